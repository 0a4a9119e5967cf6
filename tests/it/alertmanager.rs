//! Incidents into a real Alertmanager: Debian's `prometheus-alertmanager`, started by the test
//! on loopback ports with a fresh storage path and a webhook receiver pointing at a local test
//! server. `faultline run` (in-process, over librdkafka's mock cluster) posts the 64-rank Xid
//! incident; the alert shows in Alertmanager's API with its labels and annotations, the
//! receiver gets the firing notification, a restarted faultline posts the same alert again
//! without making a second one, and the resolution reaches the receiver as `resolved`.

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use crate::ticket_server::TicketServer;
use faultline::pipeline;
use serde_json::Value;

use crate::kafka::{config, consume_until, produce, test_config, unique, Cluster, Out};
use crate::observability::http_get;

/// The installed binary `binary` of Debian package `package`, or `None` with a printed
/// `SKIPPED` line (scripts/setup.sh installs it). Under CI (`CI` set, as `.ci/run` runs) a
/// missing tool fails the test: CI checks against the real components, never around them.
pub(crate) fn installed(binary: &str, package: &str, test: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(binary))
            .find(|p| p.is_file())
    });
    let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
    assert!(
        found.is_some() || !ci,
        "{test}: `{binary}` is not installed under CI (Debian package `{package}`; \
         scripts/setup.sh installs it)"
    );
    if found.is_none() {
        eprintln!(
            "SKIPPED {test}: `{binary}` is not installed (Debian package `{package}`; \
             scripts/setup.sh installs it)"
        );
    }
    found
}

/// A loopback port nothing listens on right now.
pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// A running Alertmanager, killed on drop.
pub(crate) struct Alertmanager {
    child: Child,
    pub(crate) addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Drop for Alertmanager {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Alertmanager {
    /// Starts `binary` with a webhook receiver at `receiver`, grouping by incident id with
    /// one-second waits.
    pub(crate) fn start(binary: &PathBuf, receiver: &str) -> Alertmanager {
        let dir = tempfile::tempdir().expect("tmp");
        let config = dir.path().join("alertmanager.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  resolve_timeout: 5s\n\
                 route:\n  receiver: test\n  group_by: ['incident_id']\n  group_wait: 1s\n  \
                 group_interval: 1s\n  repeat_interval: 1h\n\
                 receivers:\n  - name: test\n    webhook_configs:\n      - url: '{receiver}'\n        \
                 send_resolved: true\n"
            ),
        )
        .expect("config");
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
        let log = std::fs::File::create(dir.path().join("alertmanager.log")).expect("log");
        let child = Command::new(binary)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .arg("--cluster.listen-address=")
            .arg("--log.level=warn")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("alertmanager starts");
        let am = Alertmanager {
            child,
            addr,
            _dir: dir,
        };
        crate::observability::wait_for(60, "Alertmanager ready", || {
            http_get(am.addr, "/-/ready").filter(|(s, _)| *s == 200)
        });
        am
    }
}

/// The active FaultlineIncident alerts in the API of the Alertmanager at `addr`.
pub(crate) fn alerts(addr: SocketAddr) -> Vec<Value> {
    let Some((200, body)) = http_get(
        addr,
        "/api/v2/alerts?filter=alertname%3D%22FaultlineIncident%22",
    ) else {
        return Vec::new();
    };
    serde_json::from_str::<Value>(&body)
        .ok()
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
}

/// The receiver's notifications for incident `id`: (status, alert status) in arrival order.
fn notifications(receiver: &TicketServer, id: &str) -> Vec<String> {
    receiver
        .requests()
        .iter()
        .filter(|r| r.body["groupLabels"]["incident_id"] == id)
        .map(|r| r.body["status"].as_str().unwrap_or("?").to_string())
        .collect()
}

/// Polls `f` until it holds, for at most `secs` (a local server answering; no sleep as sync).
fn wait_until(secs: u64, what: &str, mut f: impl FnMut() -> bool) {
    crate::observability::wait_for(secs, what, || f().then_some(()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incidents_fire_survive_a_restart_and_resolve_in_a_real_alertmanager() {
    let test = "alertmanager::incidents_fire_survive_a_restart_and_resolve_in_a_real_alertmanager";
    let Some(binary) = installed("prometheus-alertmanager", "prometheus-alertmanager", test) else {
        return;
    };
    let started = Instant::now();
    let receiver = Arc::new(TicketServer::accepting());
    let am = tokio::task::spawn_blocking({
        let url = receiver.url.clone();
        move || Alertmanager::start(&binary, &url)
    })
    .await
    .expect("joins");

    let cluster = Cluster::start(1);
    let input = cluster.topic("logs", 1).await;
    let output = cluster.topic("events", 1).await;
    let dlq = cluster.topic("dead", 1).await;
    let topic = cluster.topic("incidents", 1).await;
    let group = unique("group");
    let job = "llm-pretrain-7";
    // The 64-rank Xid job, every line naming its cluster.
    let lines: Vec<String> = crate::incidents::xid_job_hanging(job, 0, 1)
        .into_iter()
        .map(|l| {
            let mut v: Value = serde_json::from_str(&l).expect("an envelope");
            v["cluster"] = "east".into();
            v.to_string()
        })
        .collect();
    let records: Vec<Out> = lines.iter().map(|l| Out::new(0, job, l.as_str())).collect();
    produce(&cluster.bootstrap, &input, &records).await;

    let kb = tempfile::tempdir().expect("tmp");
    let raw = {
        let mut raw = test_config(&cluster.bootstrap, &group, &input, &output, &dlq, kb.path());
        // The built-in KB: the same entries as kb/, without checking every example again.
        raw.kb.dir = None;
        raw.admin.listen = Some("127.0.0.1:0".into());
        raw.admin.external_url = Some("http://faultline.test:9477".into());
        raw.incidents.topic = Some(topic.clone());
        raw.incidents.window_ms = Some(20_000);
        // Long enough for a stop and a restart before the incident resolves.
        raw.incidents.quiet_ms = Some(20_000);
        raw.alertmanager.url = Some(format!("http://{}", am.addr));
        // endsAt four resends ahead: the alert outlives the restart.
        raw.alertmanager.resend_interval_ms = Some(30_000);
        raw.alertmanager.initial_backoff_ms = Some(100);
        raw.alertmanager
            .labels
            .insert("team".into(), "ml-infra".into());
        raw
    };
    let cfg = config(raw.clone());
    let loaded = pipeline::load_kb(&cfg).expect("KB loads");
    let first = pipeline::start(cfg, loaded).await.expect("starts");

    let opened = consume_until(&cluster.bootstrap, &topic, 1, |r| !r.is_empty());
    let incident = opened[0].json();
    let fp = incident["id"].as_str().expect("id").to_string();

    // The alert, as Alertmanager stores it.
    let addr = am.addr;
    let alert = tokio::task::spawn_blocking(move || {
        crate::observability::wait_for(60, "the alert in Alertmanager", || {
            alerts(addr).into_iter().next()
        })
    })
    .await
    .expect("joins");
    let l = &alert["labels"];
    assert_eq!(l["alertname"], "FaultlineIncident");
    assert_eq!(l["incident_id"], fp.as_str());
    assert_eq!(l["job_id"], job);
    assert_eq!(l["error_code"], "XID_79");
    assert_eq!(l["domain"], "nvidia");
    assert_eq!(l["category"], "gpu_hardware");
    assert_eq!(l["severity"], "critical");
    assert_eq!(l["cluster"], "east");
    assert_eq!(l["team"], "ml-infra");
    let a = &alert["annotations"];
    let summary = a["summary"].as_str().expect("summary");
    assert!(
        summary.starts_with("XID_79 on node-05") && summary.contains("killed llm-pretrain-7"),
        "{summary}"
    );
    assert!(!a["root_cause"].as_str().unwrap_or("").is_empty());
    assert!(!a["workaround"].as_str().unwrap_or("").is_empty());
    assert!(a["culprit"].as_str().unwrap_or("").contains("17"), "{a}");
    assert_eq!(
        a["incident_url"],
        format!("http://faultline.test:9477/incidents/{fp}")
    );
    assert_eq!(
        a["runbook_url"],
        "https://github.com/faultline/faultline/blob/main/docs/runbooks.md#runbook-faultlineincident"
    );
    assert!(a["root_line"].as_str().unwrap_or("").contains("Xid"));
    assert_eq!(alert["generatorURL"], a["incident_url"]);
    assert_eq!(alert["status"]["state"], "active");
    let (starts, ends) = (
        alert["startsAt"].as_str().expect("startsAt").to_string(),
        alert["endsAt"].as_str().expect("endsAt").to_string(),
    );
    assert!(
        starts.starts_with("2024-11-30T"),
        "the first log time: {starts}"
    );

    // The receiver is paged once.
    tokio::task::spawn_blocking({
        let (fp, receiver) = (fp.clone(), Arc::clone(&receiver));
        move || {
            wait_until(60, "the firing notification", || {
                notifications(&receiver, &fp) == ["firing"]
            })
        }
    })
    .await
    .expect("joins");

    // A restart reads the open incident again and posts the same alert: still one.
    first.shutdown();
    first.wait().await.expect("clean stop");
    let cfg = config(raw);
    let loaded = pipeline::load_kb(&cfg).expect("KB loads");
    let second = pipeline::start(cfg, loaded).await.expect("restarts");
    let again = tokio::task::spawn_blocking({
        let ends = ends.clone();
        move || {
            crate::observability::wait_for(60, "the restarted faultline's post", || {
                let now = alerts(addr);
                let newer = now
                    .iter()
                    .any(|x| x["endsAt"].as_str().is_some_and(|e| e > ends.as_str()));
                newer.then_some(now)
            })
        }
    })
    .await
    .expect("joins");
    assert_eq!(again.len(), 1, "one alert after the restart: {again:#?}");
    assert_eq!(again[0]["labels"], alert["labels"], "the same labels");
    assert_eq!(again[0]["startsAt"], starts.as_str(), "the same start");

    // The resolution ends the alert; the receiver hears firing once, then resolved.
    tokio::task::spawn_blocking({
        let (fp, receiver) = (fp.clone(), Arc::clone(&receiver));
        move || {
            wait_until(90, "the resolved notification", || {
                notifications(&receiver, &fp).last().map(String::as_str) == Some("resolved")
            });
            let left = alerts(addr);
            assert!(
                left.is_empty(),
                "no active alert left: {left:#?}; notifications {:?}",
                notifications(&receiver, &fp)
            );
            assert_eq!(
                notifications(&receiver, &fp),
                ["firing", "resolved"],
                "paged once, resolved once"
            );
        }
    })
    .await
    .expect("joins");
    let admin = second.admin_addr().expect("admin");
    let metrics = tokio::task::spawn_blocking(move || http_get(admin, "/metrics"))
        .await
        .expect("joins")
        .map(|(_, b)| b)
        .unwrap_or_default();
    assert!(
        metrics.contains(
            "faultline_output_changes_total{output=\"alertmanager\",result=\"failed\"} 0"
        ),
        "{metrics}"
    );
    let posted = metrics
        .lines()
        .find_map(|l| {
            l.strip_prefix(
                "faultline_output_changes_total{output=\"alertmanager\",result=\"delivered\"} ",
            )
        })
        .and_then(|v| v.trim().parse::<f64>().ok());
    assert!(
        posted.is_some_and(|n| n >= 2.0),
        "fired and resolved: {posted:?}"
    );
    second.shutdown();
    second.wait().await.expect("clean stop");
    eprintln!(
        "alertmanager test: {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
