//! A simulated fleet replayed through Kafka out of order: 50 jobs over several days of log time
//! (`faultline bench fleet`: restarts under the same job id, checkpoints, Xids, OOM kills),
//! job logs on ten partitions keyed by job, node logs (kernel lines naming a host and no job)
//! on two partitions of their own that arrive only after every job line was correlated, as a
//! backlog replayed after an outage or a shipper that lags. Two match members and two
//! correlators (one active, one standing by in the same group); between the job and the node
//! lines the active correlator and a match member are SIGKILLed, and the standby takes over.
//! The incidents must be `scan`'s: same count, same roots and culprit hosts, and one id per
//! failure from its first change to its last: a late node line revises the failure it belongs
//! to, under its id, though the correlator that resolved it is gone (its records were held,
//! and the standby reads what it published when the partition is assigned to it).
//! The correlator posts its incidents to a real Alertmanager (Debian's
//! `prometheus-alertmanager`, grouping by `incident_id`): it sees one notification group per
//! failure, never two alerts of one failure firing at once (a re-elected root's old alert is
//! resolved in the request that fires the new one, also when the revision comes from the
//! standby).

use std::collections::BTreeMap;
use std::process::Child;

use faultline::bench::fleet::{write_fleet, FleetOptions};
use serde_json::Value;

use super::incidents::incidents;
use super::out_of_process::broker;
use super::scale_out::{free_addr, series, setup, stop, LOG_PARTITIONS};
use super::*;

/// The correlator's count of correlated match events.
const CORRELATED: &str = "faultline_correlator_events_total{result=\"correlated\"}";

/// Partitions of the job logs; the node logs take the rest.
const JOB_PARTITIONS: i32 = 10;

/// What an incident answers: job, root code, root host.
type Answer = (String, String, String);

/// The fleet's log lines in log-time order, one list per day.
fn fleet_days(dir: &std::path::Path) -> Vec<Vec<String>> {
    let opts = FleetOptions {
        seed: 7,
        jobs: 50,
        days: 3,
        hosts: 64,
    };
    write_fleet(&opts, dir).expect("fleet written");
    let mut days: Vec<_> = std::fs::read_dir(dir)
        .expect("dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    days.sort();
    days.iter()
        .map(|p| {
            std::fs::read_to_string(p)
                .expect("read")
                .lines()
                .map(str::to_string)
                .collect()
        })
        .collect()
}

/// Each incident id's last change, and every id whose changes named more than one job.
fn by_id(changes: &[Value]) -> (BTreeMap<String, Answer>, Vec<String>) {
    let mut last: BTreeMap<String, &Value> = BTreeMap::new();
    let mut jobs: BTreeMap<String, std::collections::BTreeSet<String>> = BTreeMap::new();
    for c in changes {
        let id = c["id"].as_str().expect("id").to_string();
        let s = |v: &Value| v.as_str().unwrap_or("").to_string();
        jobs.entry(id.clone()).or_default().insert(s(&c["job_id"]));
        let newer = last
            .get(&id)
            .is_none_or(|old| old["revision"].as_u64() <= c["revision"].as_u64());
        if newer {
            last.insert(id, c);
        }
    }
    let answers = last
        .into_iter()
        .map(|(id, c)| {
            let s = |v: &Value| v.as_str().unwrap_or("").to_string();
            (
                id,
                (
                    s(&c["job_id"]),
                    s(&c["root"]["error_code"]),
                    s(&c["root"]["host"]),
                ),
            )
        })
        .collect();
    let split = jobs
        .into_iter()
        .filter(|(_, j)| j.len() > 1)
        .map(|(id, _)| id)
        .collect();
    (answers, split)
}

/// The jobs' answers sorted, ids aside: what two runs must agree on. A node event that no job
/// claims becomes an incident of its own once the log clock passes it by `node_join_ms` and
/// `window_ms`: at the end of a file for `scan`, after 15 minutes at wall speed for the
/// service once its input is current; this test does not wait that long for those.
fn sorted(answers: &BTreeMap<String, Answer>) -> Vec<Answer> {
    let mut v: Vec<Answer> = answers
        .values()
        .filter(|a| !a.0.starts_with("node:"))
        .cloned()
        .collect();
    v.sort();
    v
}

/// Whether a shipper's record is a node's own line (it names a host and no job).
fn node_line(line: &str) -> bool {
    let v: Value = serde_json::from_str(line).expect("JSON");
    v.get("job_id").is_none()
}

/// The line keyed and placed as the shipper sends it: a job's lines by job on the job
/// partitions, a node's by host on the node partitions.
fn placed(lines: &[String], jobs: &BTreeMap<String, i32>) -> Vec<Out> {
    let node_partitions = LOG_PARTITIONS - JOB_PARTITIONS;
    lines
        .iter()
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("JSON");
            let (key, partition) = match v.get("job_id").and_then(Value::as_str) {
                Some(job) => (job.to_string(), jobs[job] % JOB_PARTITIONS),
                None => {
                    let host = v["host"].as_str().expect("a node line names its host");
                    let n: i32 = host.bytes().map(i32::from).sum();
                    (host.to_string(), JOB_PARTITIONS + n % node_partitions)
                }
            };
            Out::new(partition, &key, l.clone().into_bytes())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_replayed_with_late_node_partitions_gives_the_incidents_of_scan() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut days = fleet_days(dir.path());
    assert!(days.len() >= 4, "a multi-day fleet: {} days", days.len());
    let lines: Vec<String> = days.concat();
    let (scanned, _) = by_id(&crate::incidents::incidents_of(
        "fleet.jsonl",
        &(lines.join("\n") + "\n"),
    ));
    let expected = sorted(&scanned);
    assert!(expected.len() >= 8, "the fleet fails: {expected:?}");
    // Every day but the last: the job partitions first, the node partitions' backlog after.
    // The last day then arrives in order, and its lines move the log clock on past the node
    // events that no job claimed, as a fleet's logs always go on.
    let last_day = days.pop().expect("days");
    let (node, job): (Vec<String>, Vec<String>) =
        days.concat().into_iter().partition(|l| node_line(l));
    assert!(!node.is_empty() && !job.is_empty());
    // What the job lines alone give: the correlator has them all when it has these many ids.
    let (job_only, _) = by_id(&crate::incidents::incidents_of(
        "jobs.jsonl",
        &(job.join("\n") + "\n"),
    ));
    let mut jobs = BTreeMap::new();
    for l in &lines {
        if node_line(l) {
            continue;
        }
        let v: Value = serde_json::from_str(l).expect("JSON");
        let name = v["job_id"].as_str().expect("job").to_string();
        let n = jobs.len() as i32;
        jobs.entry(name).or_insert(n);
    }
    assert!(jobs.len() >= 50, "{} jobs", jobs.len());

    let test =
        "kafka::replay::a_fleet_replayed_with_late_node_partitions_gives_the_incidents_of_scan";
    let receiver = std::sync::Arc::new(crate::ticket_server::TicketServer::accepting());
    let am = match crate::alertmanager::installed(
        "prometheus-alertmanager",
        "prometheus-alertmanager",
        test,
    ) {
        Some(binary) => Some(
            tokio::task::spawn_blocking({
                let url = receiver.url.clone();
                move || crate::alertmanager::Alertmanager::start(&binary, &url)
            })
            .await
            .expect("joins"),
        ),
        None => None,
    };
    let extra = am.as_ref().map_or_else(String::new, |am| {
        format!(
            "\n[alertmanager]\nurl = \"http://{}\"\ninitial_backoff_ms = 100\n",
            am.addr
        )
    });
    let (mut broker, bootstrap) = broker();
    let f = setup(&mut broker, &bootstrap, 1, &extra).await;
    // Two correlators in one group, started together: one owns the events partition, the
    // other stands by.
    let admins = [free_addr(), free_addr()];
    let mut correlators: Vec<Child> = admins
        .iter()
        .map(|a| f.member("correlate", Some(*a)))
        .collect();
    wait_for("both correlators serve their metrics", || {
        admins.iter().all(|a| series(*a, CORRELATED).is_some())
    })
    .await;
    let mut members: Vec<Child> = (0..2).map(|_| f.member("match", None)).collect();
    produce(&bootstrap, &f.t.input, &placed(&job, &jobs)).await;
    wait_for("the job lines' incidents", || {
        by_id(&incidents(&consume_all(&bootstrap, &f.incidents, 1)))
            .0
            .len()
            >= job_only.len()
    })
    .await;
    // The correlator that resolved them dies, and a match member; the standby takes the
    // events partition over, a new member the killed one's input partitions. The late node
    // lines must revise the failures the dead correlator resolved, under their ids.
    let owner = admins
        .iter()
        .position(|a| series(*a, CORRELATED).is_some_and(|n| n > 0.0))
        .expect("a correlator correlated the job lines");
    let mut killed = vec![correlators.remove(owner), members.remove(0)];
    for c in &mut killed {
        c.kill().expect("SIGKILL");
        c.wait().expect("reaped");
    }
    members.push(f.member("match", None));

    // Hours of log time late: the node partitions' backlog.
    produce(&bootstrap, &f.t.input, &placed(&node, &jobs)).await;
    produce(&bootstrap, &f.t.input, &placed(&last_day, &jobs)).await;
    let mut seen = Vec::new();
    let settled = tokio::time::timeout(DEADLINE, async {
        let mut ticks = tokio::time::interval(Duration::from_millis(200));
        loop {
            ticks.tick().await;
            seen = incidents(&consume_all(&bootstrap, &f.incidents, 1));
            if sorted(&by_id(&seen).0) == expected {
                return;
            }
        }
    })
    .await;
    members.extend(correlators);
    stop(members);
    let (got, split) = by_id(&seen);
    assert!(
        settled.is_ok(),
        "the incidents of scan:\n  scan  {expected:?}\n  kafka {:?}",
        sorted(&got)
    );
    assert!(split.is_empty(), "an id named two jobs: {split:?}");
    let jobs_ids =
        |a: &BTreeMap<String, Answer>| a.values().filter(|a| !a.0.starts_with("node:")).count();
    assert_eq!(jobs_ids(&got), jobs_ids(&scanned), "one id per failure");
    if let Some(am) = &am {
        one_alert_per_failure(am, &receiver, &got, &seen);
    }
    eprintln!(
        "replay: {} job lines, {} node lines late, {} lines of the last day, {} incidents",
        job.len(),
        node.len(),
        last_day.len(),
        got.len()
    );
}

/// Alertmanager, grouping by `incident_id`, notified one group per failure (every id on the
/// incidents topic, no other), and no notification showed two alerts of one failure firing.
fn one_alert_per_failure(
    am: &crate::alertmanager::Alertmanager,
    receiver: &crate::ticket_server::TicketServer,
    got: &BTreeMap<String, Answer>,
    changes: &[Value],
) {
    let ids: std::collections::BTreeSet<String> = got.keys().cloned().collect();
    let grouped = |requests: &[crate::ticket_server::TicketRequest]| {
        requests
            .iter()
            .filter_map(|r| {
                r.body["groupLabels"]["incident_id"]
                    .as_str()
                    .map(str::to_string)
            })
            .collect::<std::collections::BTreeSet<String>>()
    };
    // Woken by each notification Alertmanager posts.
    let seen = grouped(&receiver.wait_for(Duration::from_secs(60), |r| grouped(r) == ids));
    assert_eq!(
        seen,
        ids,
        "a notification group for every incident and no other: missing {:?}, extra {:?}",
        ids.difference(&seen)
            .map(|id| changes
                .iter()
                .filter(|c| c["id"] == id.as_str())
                .map(|c| format!(
                    "{} {} {} {} {}",
                    c["id"], c["status"], c["resolution"], c["root"]["error_code"], c["timeline"]
                ))
                .collect::<Vec<_>>())
            .collect::<Vec<_>>(),
        seen.difference(&ids).collect::<Vec<_>>()
    );
    for r in receiver.requests() {
        let firing = r.body["alerts"]
            .as_array()
            .expect("alerts")
            .iter()
            .filter(|a| a["status"] == "firing")
            .count();
        assert!(
            firing <= 1,
            "two alerts of one failure firing: {}",
            r.body["alerts"]
        );
    }
    // What Alertmanager holds now: at most one active alert per failure, each under its id.
    let mut active: BTreeMap<String, usize> = BTreeMap::new();
    for a in crate::alertmanager::alerts(am.addr) {
        let id = a["labels"]["incident_id"].as_str().expect("incident_id");
        assert!(ids.contains(id), "an alert of no incident: {id}");
        *active.entry(id.to_string()).or_default() += 1;
    }
    assert!(active.values().all(|&n| n == 1), "{active:?}");
    eprintln!(
        "replay: Alertmanager notified {} groups, {} alerts active at the end",
        ids.len(),
        active.len()
    );
}
