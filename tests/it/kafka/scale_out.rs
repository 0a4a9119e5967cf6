//! Scale-out: match members (`--role match`) in one consumer group and correlators
//! (`--role correlate`) fed by the events topic, each a process of its own, over the logs of a
//! fleet spread round-robin over 12 partitions as a shipper that keys by nothing sends them. The
//! incidents must be the ones `faultline scan` finds in the same lines, with a match member and
//! the active correlator SIGKILLed mid-stream, and with the correlator sharded by cluster.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::Child;

use serde_json::Value;

use super::incidents::{distinct, incidents};
use super::out_of_process::{broker, make_topic, run_command_serving, signal, wait_exit, Topics};
use super::*;
use crate::incidents::{host_of, incidents_of, noise, vector, watchdog_timeout, OOM, XID_79};
use crate::ticket_server::TicketServer;

pub(super) const LOG_PARTITIONS: i32 = 12;

/// The fleet: `llm-pretrain-7` (64 ranks; node-05's kernel log, which names no job, says Xid
/// 79; 63 ranks time out ten minutes later) and `sft-oom-3` (8 ranks on other nodes; rank 2
/// runs out of memory, the others time out). Each line carries `cluster` when given.
fn fleet(clusters: Option<(&str, &str)>) -> Vec<String> {
    let tag = |line: String, cluster: Option<&str>| match cluster {
        Some(c) => {
            let mut v: Value = serde_json::from_str(&line).expect("JSON");
            v["cluster"] = c.into();
            v.to_string()
        }
        None => line,
    };
    let (a, b) = match clusters {
        Some((a, b)) => (Some(a), Some(b)),
        None => (None, None),
    };
    let mut lines = Vec::new();
    let job = "llm-pretrain-7";
    for step in 0..3 {
        for r in 0..64 {
            lines.push(tag(
                vector(job, &host_of(r), Some(r), step, &noise(r, step as u32)),
                a,
            ));
        }
    }
    // The node's own line: a host, no job.
    let mut xid: Value =
        serde_json::from_str(&vector(job, "node-05", None, 5, XID_79)).expect("JSON");
    xid.as_object_mut().expect("object").remove("job_id");
    lines.push(tag(xid.to_string(), a));
    let oom_job = "sft-oom-3";
    let oom_host = |r: u32| format!("node-{}", 40 + r / 4);
    for r in 0..8 {
        lines.push(tag(
            vector(oom_job, &oom_host(r), Some(r), 20, &noise(r, 0)),
            b,
        ));
    }
    lines.push(tag(vector(oom_job, &oom_host(2), Some(2), 30, OOM), b));
    for r in (0..64).filter(|r| *r != 17) {
        lines.push(tag(
            vector(
                job,
                &host_of(r),
                Some(r),
                605 + i64::from(r % 3),
                &watchdog_timeout(r, 4711),
            ),
            a,
        ));
    }
    for r in (0..8).filter(|r| *r != 2) {
        lines.push(tag(
            vector(
                oom_job,
                &oom_host(r),
                Some(r),
                630 + i64::from(r),
                &watchdog_timeout(r, 99),
            ),
            b,
        ));
    }
    lines
}

/// Round-robin over the partitions, unkeyed, as a shipper without a job key sends them.
fn spread(lines: &[String], from: usize) -> Vec<Out> {
    lines
        .iter()
        .enumerate()
        .map(|(i, l)| Out {
            partition: ((from + i) % LOG_PARTITIONS as usize) as i32,
            key: None,
            payload: l.clone().into_bytes(),
            headers: Vec::new(),
        })
        .collect()
}

/// What an incident answers: root code, root host, culprit ranks, matches.
type Answer = (String, String, String, u64);

/// The final state of each incident of a list of changes: the last revision per fingerprint,
/// without the fingerprints a later change replaced (`previous_fingerprint`).
fn answers(changes: &[Value]) -> BTreeMap<String, Answer> {
    let mut last: BTreeMap<String, &Value> = BTreeMap::new();
    for c in changes {
        let fp = c["fingerprint"].as_str().expect("fingerprint").to_string();
        let newer = last
            .get(&fp)
            .is_none_or(|old| old["revision"].as_u64() <= c["revision"].as_u64());
        if newer {
            last.insert(fp, c);
        }
    }
    let replaced: Vec<String> = changes
        .iter()
        .filter_map(|c| c["previous_fingerprint"].as_str().map(str::to_string))
        .collect();
    last.into_iter()
        .filter(|(fp, _)| !replaced.contains(fp))
        .map(|(fp, c)| {
            let s = |v: &Value| v.as_str().unwrap_or("").to_string();
            (
                fp,
                (
                    s(&c["root"]["error_code"]),
                    s(&c["root"]["host"]),
                    c["culprit"]["ranks"].to_string(),
                    c["counts"]["matches"].as_u64().unwrap_or(0),
                ),
            )
        })
        .collect()
}

/// The incidents `faultline scan` finds in the same lines (one file, in order).
fn scanned(lines: &[String]) -> BTreeMap<String, Answer> {
    answers(&incidents_of("fleet.jsonl", &(lines.join("\n") + "\n")))
}

/// A free loopback port for an admin server.
pub(super) fn free_addr() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr")
}

/// The sum of a series on a process's /metrics, or `None` while it does not answer.
pub(super) fn series(addr: SocketAddr, name: &str) -> Option<f64> {
    let (status, body) = crate::observability::http_get(addr, "/metrics")?;
    (status == 200).then_some(())?;
    Some(
        body.lines()
            .filter_map(|l| {
                l.strip_prefix(name)?
                    .strip_prefix(' ')?
                    .trim()
                    .parse::<f64>()
                    .ok()
            })
            .sum(),
    )
}

pub(super) struct Fleet {
    pub(super) bootstrap: String,
    pub(super) t: Topics,
    pub(super) incidents: String,
    file: tempfile::NamedTempFile,
}

impl Fleet {
    pub(super) fn member(&self, role: &str, admin: Option<SocketAddr>) -> Child {
        let admin = admin.map_or_else(|| "off".to_string(), |a| a.to_string());
        run_command_serving(&self.bootstrap, &self.t, &admin)
            .arg("--config")
            .arg(self.file.path())
            .args(["--role", role])
            .spawn()
            .expect("faultline starts")
    }
}

pub(super) async fn setup(
    broker: &mut Option<super::out_of_process::BrokerProcess>,
    bootstrap: &str,
    event_partitions: i32,
    extra: &str,
) -> Fleet {
    let t = Topics::unique();
    let incidents = unique("incidents");
    make_topic(broker, bootstrap, &t.input, LOG_PARTITIONS).await;
    make_topic(broker, bootstrap, &t.output, event_partitions).await;
    make_topic(broker, bootstrap, &t.dlq, 1).await;
    make_topic(broker, bootstrap, &incidents, 1).await;
    let file = tempfile::NamedTempFile::new().expect("tmp");
    std::fs::write(
        file.path(),
        format!("[incidents]\ntopic = \"{incidents}\"\n{extra}"),
    )
    .expect("write");
    Fleet {
        bootstrap: bootstrap.to_string(),
        t,
        incidents,
        file,
    }
}

pub(super) fn stop(mut children: Vec<Child>) {
    for c in &children {
        signal(c, "TERM");
    }
    for (i, c) in children.iter_mut().enumerate() {
        let status = wait_exit(c);
        assert!(
            status.success(),
            "member {i}: SIGTERM exits 0, not {status:?}"
        );
    }
}

/// Three match members and a correlator with a standby; one member and the active correlator
/// are SIGKILLed mid-stream. Same incidents as `scan`, one ticket per failure, the standby's
/// duplicates counted and bounded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_members_and_a_failed_over_correlator_give_the_incidents_of_scan() {
    let (mut broker, bootstrap) = broker();
    let tickets = TicketServer::accepting();
    let f = setup(
        &mut broker,
        &bootstrap,
        1,
        &format!(
            "[webhook]\nurl = \"{}\"\ninitial_backoff_ms = 50\n",
            tickets.url
        ),
    )
    .await;
    let lines = fleet(None);
    let expected = scanned(&lines);
    assert_eq!(expected.len(), 2, "scan: {expected:?}");

    let active_admin = free_addr();
    let active = f.member("correlate", Some(active_admin));
    let mut members: Vec<Child> = (0..3).map(|_| f.member("match", None)).collect();
    // The first part ends after both roots and some of the timeouts.
    let half = lines
        .iter()
        .position(|l| l.contains("OutOfMemoryError"))
        .expect("the OOM line")
        + 20;
    produce(&bootstrap, &f.t.input, &spread(&lines[..half], 0)).await;
    wait_for("the active correlator correlates the first half", || {
        series(
            active_admin,
            "faultline_correlator_events_total{result=\"correlated\"}",
        )
        .is_some_and(|n| n > 0.0)
            && !tickets.requests().is_empty()
    })
    .await;
    let standby_admin = free_addr();
    let standby = f.member("correlate", Some(standby_admin));
    wait_for("the standby serves its metrics", || {
        series(standby_admin, "faultline_correlator_events_total").is_some()
    })
    .await;

    // A match member and the active correlator die; the rest of the fleet's logs arrive.
    let killed = members.remove(0);
    for mut c in [killed, active] {
        c.kill().expect("SIGKILL");
        c.wait().expect("reaped");
    }
    members.push(f.member("match", None));
    produce(&bootstrap, &f.t.input, &spread(&lines[half..], half)).await;

    let matched: u64 = expected.values().map(|a| a.3).sum();
    wait_for("every match correlated", || {
        answers(&incidents(&consume_all(&bootstrap, &f.incidents, 1))) == expected
    })
    .await;
    let duplicates = series(
        standby_admin,
        "faultline_correlator_events_total{result=\"duplicate\"}",
    )
    .expect("metrics");
    let events = consume_all(&bootstrap, &f.t.output, 1).len();
    members.push(standby);
    stop(members);

    let on_topic = incidents(&consume_all(&bootstrap, &f.incidents, 1));
    assert_eq!(answers(&on_topic), expected, "the incidents of scan");
    let (_, xid) = expected
        .iter()
        .find(|(_, a)| a.0 == "XID_79")
        .expect("the Xid incident");
    assert_eq!(xid.1, "node-05", "the node's event met the job it killed");
    // One ticket per failure: a job's line logged earlier than the anchor and arriving later
    // (the partitions interleave the job's lines) moves the fingerprint, and the change says
    // from what; every other ticketed fingerprint is the final one of a failure.
    let fingerprints = distinct(expected.keys().cloned());
    let requests = tickets.requests();
    let ticketed = distinct(requests.iter().map(|r| r.fingerprint.clone()));
    let moved = distinct(requests.iter().filter_map(|r| {
        r.body["incident"]["previous_fingerprint"]
            .as_str()
            .map(str::to_string)
    }));
    let current: std::collections::BTreeSet<String> =
        ticketed.difference(&moved).cloned().collect();
    assert_eq!(
        current, fingerprints,
        "one ticket per failure; moved: {moved:?}"
    );
    // Replays of the killed member's partitions reach the events topic again; the standby
    // skips what it saw (it rebuilt from the events topic, so it counts what it replays).
    assert!(
        duplicates <= events.saturating_sub(matched as usize) as f64,
        "duplicates {duplicates} of {events} events"
    );
    eprintln!(
        "scale-out: {} lines, {events} events for {matched} matches, {duplicates} duplicates skipped",
        lines.len()
    );
}

/// The correlator sharded by cluster: two clusters, an events topic of two partitions, two
/// correlators. Each correlates one cluster's jobs and nodes; together they give scan's
/// incidents.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_cluster_shards_correlate_their_own_jobs() {
    use faultline::pipeline::shard::shard_of;
    let (mut broker, bootstrap) = broker();
    let f = setup(&mut broker, &bootstrap, 2, "shard_by = \"cluster\"\n").await;
    // Two cluster names on different shards.
    let east = "east";
    let west = (0..)
        .map(|i| format!("west-{i}"))
        .find(|w| shard_of(w, 2) != shard_of(east, 2))
        .expect("a name on the other shard");
    let lines = fleet(Some((east, &west)));
    let expected = scanned(&lines);
    assert_eq!(expected.len(), 2, "scan: {expected:?}");

    let admins = [free_addr(), free_addr()];
    let mut children: Vec<Child> = admins
        .iter()
        .map(|a| f.member("correlate", Some(*a)))
        .collect();
    children.extend((0..2).map(|_| f.member("match", None)));
    produce(&bootstrap, &f.t.input, &spread(&lines, 0)).await;
    wait_for("scan's incidents", || {
        answers(&incidents(&consume_all(&bootstrap, &f.incidents, 1))) == expected
    })
    .await;
    let correlated: Vec<f64> = admins
        .iter()
        .map(|a| {
            series(
                *a,
                "faultline_correlator_events_total{result=\"correlated\"}",
            )
            .expect("metrics")
        })
        .collect();
    stop(children);

    // Each shard's events on its own partition, each correlator busy with one; the members'
    // progress notes (how far they read each input partition) reach both shards.
    let records = consume_all(&bootstrap, &f.t.output, 2);
    let (notes, events): (Vec<&In>, Vec<&In>) =
        records.iter().partition(|e| e.json()["type"] == "progress");
    let mut noted: Vec<i32> = notes.iter().map(|n| n.partition).collect();
    noted.sort_unstable();
    noted.dedup();
    assert_eq!(noted, [0, 1], "every shard hears the progress notes");
    for e in &events {
        let cluster = e.json()["cluster"].as_str().expect("cluster").to_string();
        assert_eq!(e.partition, shard_of(&cluster, 2), "{cluster}");
    }
    assert!(
        correlated.iter().all(|n| *n > 0.0),
        "both correlators correlated: {correlated:?}"
    );
    assert_eq!(
        correlated.iter().sum::<f64>(),
        events.len() as f64,
        "each event correlated once"
    );
}
