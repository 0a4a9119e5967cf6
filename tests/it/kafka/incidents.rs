//! Incidents from the running pipeline: the 64-rank Xid 79 scenario through the mock cluster
//! to the incidents topic, spans, metrics and tickets.

use std::collections::BTreeSet;

use faultline::pipeline;
use serde_json::Value;

use super::*;

/// The scenario's records, keyed by job, on partition 0.
pub(crate) fn records(lines: &[String], job: &str) -> Vec<Out> {
    lines.iter().map(|l| Out::new(0, job, l.as_str())).collect()
}

/// The incident objects on the incidents topic.
pub(crate) fn incidents(records: &[In]) -> Vec<Value> {
    records.iter().map(In::json).collect()
}

pub(crate) fn distinct(values: impl IntoIterator<Item = String>) -> BTreeSet<String> {
    values.into_iter().collect()
}

fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

/// The sum of every series of family `name`.
fn family_sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The 64-rank Xid 79 scenario through the running pipeline: one incident on the incidents
/// topic with the Xid as root, rank 17 on node-05 as culprit and 63 cascades; the committed
/// offset waits at the Xid's record while the incident is open; after the (tiny) quiet period
/// it resolves, the commit moves on, and an OTLP receiver got one span when it opened and one
/// when it resolved; /metrics counts both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_running_pipeline_produces_and_resolves_the_xid_incident() {
    use crate::telemetry::{attr, string};
    use opentelemetry_proto::tonic::common::v1::any_value::Value as Otlp;

    let (otlp, receiver, server) = crate::telemetry::start_grpc_receiver().await;

    let rig = IncidentRig::start().await;
    let cluster = &rig.cluster;
    let (input, topic, group) = (rig.input.clone(), rig.incidents.clone(), rig.group.clone());
    let job = "llm-pretrain-7";
    // The timeouts one second after the Xid (not ten minutes): the quiet period is 3 s.
    let lines = crate::incidents::xid_job_hanging(job, 0, 1);
    let xid_offset = lines
        .iter()
        .position(|l| l.contains("Xid"))
        .expect("the Xid line") as i64;
    produce(&cluster.bootstrap, &input, &records(&lines, job)).await;

    let mut raw = rig.raw.clone();
    raw.admin.listen = Some("127.0.0.1:0".into());
    raw.incidents.window_ms = Some(3_000);
    raw.incidents.quiet_ms = Some(3_000);
    // A resolved incident holds its records for late lines this long after its resolution.
    raw.incidents.resolved_hold_ms = Some(1_000);
    raw.telemetry.endpoint = Some(format!("http://{otlp}"));
    raw.telemetry.protocol = Some("grpc".into());
    raw.telemetry.scheduled_delay_ms = Some(100);
    let cfg = config(raw);
    let loaded = pipeline::load_kb(&cfg).expect("KB loads");
    let running = pipeline::start(cfg, loaded).await.expect("starts");

    // Open: the commit waits at the incident's first record.
    let opened = consume_until(&cluster.bootstrap, &topic, 1, |r| !r.is_empty());
    assert_eq!(opened[0].json()["status"], "open");
    wait_for("the commit held at the Xid's record", || {
        committed(&cluster.bootstrap, &group, &input, 1) == vec![xid_offset]
    })
    .await;

    // Resolved after the quiet period, by the clock running on from the last log time.
    let read = consume_until(&cluster.bootstrap, &topic, 1, |r| {
        r.iter().any(|m| m.json()["status"] == "resolved")
    });
    let all = incidents(&read);
    let fingerprints = distinct(all.iter().map(|i| i["fingerprint"].to_string()));
    assert_eq!(fingerprints.len(), 1, "one incident: {fingerprints:?}");
    let keys = distinct(
        read.iter()
            .map(|m| String::from_utf8(m.key.clone().expect("keyed")).expect("utf8")),
    );
    assert_eq!(
        keys.iter().collect::<Vec<_>>(),
        vec![all[0]["id"].as_str().expect("string")],
        "keyed by the incident's id"
    );
    let last = all.last().expect("resolved");
    assert_eq!(last["status"], "resolved");
    assert_eq!(last["resolution"], "quiet");
    assert_eq!(last["job_id"], job);
    assert_eq!(last["root"]["error_code"], "XID_79");
    assert_eq!(last["root"]["host"], "node-05");
    assert_eq!(last["culprit"]["ranks"], serde_json::json!([17]));
    assert_eq!(last["culprit"]["hosts"], serde_json::json!(["node-05"]));
    assert_eq!(last["cascades"]["matches"], 63);
    assert_eq!(last["cascades"]["ranks"], 63);
    assert_eq!(last["ticket"]["raised"], true);
    let revisions: Vec<u64> = all
        .iter()
        .map(|i| i["revision"].as_u64().expect("revision"))
        .collect();
    assert_eq!(
        revisions,
        (1..=all.len() as u64).collect::<Vec<_>>(),
        "each change once, in order"
    );
    // The resolution, then resolved_hold_ms, lifted the hold: everything is committed.
    wait_for("everything committed after the resolution", || {
        committed(&cluster.bootstrap, &group, &input, 1) == vec![lines.len() as i64]
    })
    .await;

    let admin = running.admin_addr().expect("admin listens");
    let (text, report) = tokio::task::spawn_blocking(move || {
        let get = |path| crate::observability::http_get(admin, path).map(|(_, body)| body);
        (get("/metrics"), get("/api/v1/report"))
    })
    .await
    .expect("joins");
    let text = text.expect("/metrics answers");
    running.shutdown();
    // The correlator's live report: the failure is one interruption of the GPU bucket, on
    // /api/v1/report and in the report's families on /metrics.
    let report: serde_json::Value =
        serde_json::from_str(&report.expect("/api/v1/report answers")).expect("JSON");
    assert_eq!(report["fleet"]["interruptions"], 1, "{report}");
    assert_eq!(report["table"][0]["bucket"], "gpu", "{report}");
    assert_eq!(
        metric(
            &text,
            "faultline_interruptions_total{cause=\"gpu\",error_code=\"XID_79\"}"
        ),
        Some(1.0),
        "{text}"
    );
    running.wait().await.expect("clean stop, spans flushed");
    // Changes are counted as they are produced, so the scrape saw both.
    assert_eq!(
        family_sum(&text, "faultline_incidents_opened_total"),
        1.0,
        "one failure counts once: {text}"
    );
    assert!(
        text.contains(
            "faultline_incidents_opened_total{category=\"gpu_hardware\",domain=\"nvidia\",error_code=\"XID_79\"} 1"
        ),
        "by its root: {text}"
    );
    assert_eq!(
        metric(
            &text,
            "faultline_incidents_resolved_total{resolution=\"quiet\"}"
        ),
        Some(1.0)
    );

    let received = receiver.0.clone();
    let got = tokio::task::spawn_blocking(move || crate::telemetry::spans_arrive(&received, 66))
        .await
        .expect("joins");
    let incident_spans: Vec<_> = crate::telemetry::spans(&got)
        .filter(|s| s.name == "faultline.incident")
        .collect();
    let statuses: Vec<String> = incident_spans
        .iter()
        .filter_map(|s| string(&s.attributes, "faultline.incident.status"))
        .collect();
    assert_eq!(
        statuses,
        vec!["open", "resolved"],
        "one span per open and resolution"
    );
    let done = incident_spans[1];
    assert_eq!(
        string(&done.attributes, "faultline.incident.fingerprint").as_deref(),
        last["fingerprint"].as_str()
    );
    assert_eq!(
        string(&done.attributes, "faultline.root.error_code").as_deref(),
        Some("XID_79")
    );
    assert_eq!(
        string(&done.attributes, "faultline.culprit.host").as_deref(),
        Some("node-05")
    );
    assert!(matches!(
        attr(&done.attributes, "faultline.culprit.rank"),
        Some(Otlp::IntValue(17))
    ));
    assert!(matches!(
        attr(&done.attributes, "faultline.incident.cascades"),
        Some(Otlp::IntValue(63))
    ));
    server.abort();
}

/// The example configuration in `deploy/` is valid and turns incidents and tickets on.
#[test]
fn the_example_configuration_enables_incidents_and_the_webhook() {
    let path = crate::support::repo().join("deploy/faultline.toml");
    let cfg = faultline::config::Config::load(Some(&path), &Default::default())
        .expect("deploy/faultline.toml is valid");
    assert!(cfg.redacted().contains("[webhook]"));
    let inc = cfg.incidents.as_ref().expect("incidents on");
    assert_eq!(inc.topic, "faultline.incidents");
    let hook = cfg.webhook().expect("webhook on");
    assert_eq!(
        hook.sink.format,
        faultline::sink::webhook::PayloadFormat::Alertmanager
    );
}
