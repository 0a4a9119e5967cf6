//! A new incident output plugs in as one file: this one records every change it is handed and
//! holds back the resolution until the test lets it through. The running pipeline delivers the
//! Xid scenario's changes to it through the same worker as the webhook and Alertmanager; the
//! resolution's commit hold waits for it (and not for an output that wants nothing), and
//! `/metrics` counts its deliveries under its own `output` label.

use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};

use faultline::incident::{IncidentEvent, Status};
use faultline::pipeline;
use faultline::sink::output::{IncidentOutput, Outcome};

use super::*;

/// Records the changes; a resolution waits for a token on `gate` first.
struct Recorder {
    seen: Arc<Mutex<Vec<(Status, String)>>>,
    gate: Receiver<()>,
    arrived: Sender<Status>,
}

impl IncidentOutput for Recorder {
    fn name(&self) -> &'static str {
        "recorder"
    }

    fn deliver(&mut self, changes: &[Arc<IncidentEvent>], report: &mut Outcome) {
        for c in changes {
            let _ = self.arrived.send(c.status);
            if c.status == Status::Resolved {
                // Held here until the test has looked at the commit.
                let _ = self.gate.recv();
            }
            let mut seen = self.seen.lock().expect("lock");
            seen.push((c.status, c.fingerprint.clone()));
            report.delivered += 1;
        }
    }
}

/// Wants nothing: its worker never holds a commit.
struct Uninterested;

impl IncidentOutput for Uninterested {
    fn name(&self) -> &'static str {
        "uninterested"
    }

    fn wants(&self) -> fn(&IncidentEvent) -> bool {
        |_| false
    }

    fn deliver(&mut self, _: &[Arc<IncidentEvent>], _: &mut Outcome) {
        panic!("handed a change it does not want");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_test_output_gets_every_change_and_holds_the_commit_until_it_has_the_resolution() {
    let rig = IncidentRig::start().await;
    let cluster = &rig.cluster;
    let (input, topic, group) = (rig.input.clone(), rig.incidents.clone(), rig.group.clone());
    let job = "llm-pretrain-8";
    let lines = crate::incidents::xid_job_hanging(job, 0, 1);
    let xid_offset = lines
        .iter()
        .position(|l| l.contains("Xid"))
        .expect("the Xid line") as i64;
    produce(
        &cluster.bootstrap,
        &input,
        &super::incidents::records(&lines, job),
    )
    .await;

    let mut raw = rig.raw.clone();
    raw.admin.listen = Some("127.0.0.1:0".into());
    raw.incidents.window_ms = Some(3_000);
    raw.incidents.quiet_ms = Some(3_000);
    let cfg = config(raw);
    let loaded = pipeline::load_kb(&cfg).expect("KB loads");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (open_gate, gate) = channel();
    let (arrived, arrivals) = channel();
    let recorder = Recorder {
        seen: Arc::clone(&seen),
        gate,
        arrived,
    };
    let extras = pipeline::Extras {
        outputs: vec![(Box::new(recorder), 8), (Box::new(Uninterested), 8)],
        ..Default::default()
    };
    let running = pipeline::start_with(cfg, Arc::new(loaded), extras)
        .await
        .expect("starts");

    // The resolution reached the recorder, which holds it: the incidents topic has it, yet the
    // commit still waits at the Xid's record.
    let resolved = tokio::task::spawn_blocking(move || {
        arrivals
            .iter()
            .find(|s| *s == Status::Resolved)
            .map(|_| arrivals)
    })
    .await
    .expect("joins")
    .expect("the resolution is handed to the recorder");
    let read = consume_until(&cluster.bootstrap, &topic, 1, |r| {
        r.iter().any(|m| m.json()["status"] == "resolved")
    });
    // It can only reach the Xid's record: the output has not handled the resolution yet.
    wait_for("the commit held at the Xid's record", || {
        committed(&cluster.bootstrap, &group, &input, 1) == vec![xid_offset]
    })
    .await;
    open_gate.send(()).expect("the recorder waits");
    wait_for(
        "everything committed once the recorder has the resolution",
        || committed(&cluster.bootstrap, &group, &input, 1) == vec![lines.len() as i64],
    )
    .await;
    drop(resolved);

    // It got exactly what the incidents topic got, in order.
    let on_topic: Vec<(String, String)> = read
        .iter()
        .map(|m| {
            let j = m.json();
            (
                j["status"].as_str().unwrap_or("").to_string(),
                j["fingerprint"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    let got: Vec<(String, String)> = seen
        .lock()
        .expect("lock")
        .iter()
        .map(|(s, f)| (format!("{s:?}").to_lowercase(), f.clone()))
        .collect();
    assert_eq!(got, on_topic, "every change, as produced");

    let admin = running.admin_addr().expect("admin listens");
    let text = tokio::task::spawn_blocking(move || {
        crate::observability::http_get(admin, "/metrics").map(|(_, body)| body)
    })
    .await
    .expect("joins")
    .expect("/metrics answers");
    running.shutdown();
    running.wait().await.expect("clean stop");
    let delivered = format!(
        "faultline_output_changes_total{{output=\"recorder\",result=\"delivered\"}} {}",
        on_topic.len()
    );
    assert!(text.contains(&delivered), "{delivered} in {text}");
    assert!(
        text.contains(
            "faultline_output_changes_total{output=\"uninterested\",result=\"delivered\"} 0"
        ),
        "{text}"
    );
}
