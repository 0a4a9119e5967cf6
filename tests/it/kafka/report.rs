//! `faultline report --brokers`: the report from the events and incidents topics of a running
//! service is the report of the same objects read from a file, and a record that is not a
//! scan's JSON is named and skipped, not fatal.

use std::collections::BTreeSet;
use std::process::{Command, Output};

use super::*;

fn faultline(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_faultline"))
        .args(args)
        .output()
        .expect("faultline runs")
}

/// `faultline report --brokers` over `events` and `incidents` with `extra` flags.
async fn report_from(bootstrap: &str, events: &str, incidents: &str, extra: &[&str]) -> Output {
    let args: Vec<String> = [
        "report",
        "--brokers",
        bootstrap,
        "--events-topic",
        events,
        "--incidents-topic",
        incidents,
        "--kafka-timeout",
        "60s",
    ]
    .iter()
    .chain(extra)
    .map(|a| a.to_string())
    .collect();
    tokio::task::spawn_blocking(move || {
        faultline(&args.iter().map(String::as_str).collect::<Vec<_>>())
    })
    .await
    .expect("joins")
}

/// A stable partition for `key` among `n`.
fn partition(key: &str, n: i32) -> i32 {
    (key.bytes()
        .fold(7u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)))
        % n as u32) as i32
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_report_from_the_topics_is_the_report_from_the_scan_output() {
    // A fleet's scan output: its match events and every change of its incidents.
    let dir = tempfile::tempdir().expect("tempdir");
    let fleet = dir.path().join("fleet");
    let opts = faultline::bench::fleet::FleetOptions {
        seed: 11,
        jobs: 12,
        days: 2,
        hosts: 24,
    };
    faultline::bench::fleet::write_fleet(&opts, &fleet).expect("fleet written");
    let mut logs: Vec<String> = std::fs::read_dir(&fleet)
        .expect("dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .map(|p| p.to_string_lossy().to_string())
        .collect();
    logs.sort();
    let mut args = vec!["scan", "--progress-lines", "--format", "json"];
    args.extend(logs.iter().map(String::as_str));
    let scan = faultline(&args);
    let text = String::from_utf8(scan.stdout).expect("utf8");
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with('{')).collect();
    let kind =
        |l: &str| serde_json::from_str::<serde_json::Value>(l).expect("JSON")["type"].clone();
    let events: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| kind(l) == "match")
        .collect();
    let changes: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| kind(l) == "incident")
        .collect();
    assert!(
        events.len() > 100 && !changes.is_empty(),
        "{} {}",
        events.len(),
        changes.len()
    );

    // The file: the same objects, as `--from-json` reads them.
    let file = dir.path().join("scan.jsonl");
    std::fs::write(&file, format!("{}\n", lines.join("\n"))).expect("written");

    // The topics, as `faultline run` writes them: events keyed by job on three partitions,
    // incident changes keyed by id on two, and one record in between that is cut short.
    let cluster = Cluster::start(1);
    let events_topic = cluster.topic("events", 3).await;
    let incidents_topic = cluster.topic("incidents", 2).await;
    let field = |l: &str, f: &str| {
        serde_json::from_str::<serde_json::Value>(l).expect("JSON")[f]
            .as_str()
            .expect("a string")
            .to_string()
    };
    let mut out: Vec<Out> = events
        .iter()
        .map(|l| {
            let job = field(l, "job_id");
            Out::new(partition(&job, 3), &job, *l)
        })
        .collect();
    out.insert(
        out.len() / 2,
        Out::new(1, "broken", r#"{"type":"match","job_id":"#),
    );
    produce(&cluster.bootstrap, &events_topic, &out).await;
    let out: Vec<Out> = changes
        .iter()
        .map(|l| {
            let id = field(l, "id");
            Out::new(partition(&id, 2), &id, *l)
        })
        .collect();
    produce(&cluster.bootstrap, &incidents_topic, &out).await;

    let from_file = faultline(&[
        "report",
        "--format",
        "json",
        "--from-json",
        &file.to_string_lossy(),
    ]);
    assert!(
        from_file.status.success(),
        "{}",
        String::from_utf8_lossy(&from_file.stderr)
    );
    let from_topics = report_from(
        &cluster.bootstrap,
        &events_topic,
        &incidents_topic,
        &["--format", "json"],
    )
    .await;
    let stderr = String::from_utf8_lossy(&from_topics.stderr);
    assert_eq!(
        from_topics.status.code(),
        Some(1),
        "one record skipped: {stderr}"
    );
    assert!(
        stderr.contains("skipped ")
            && stderr.contains("/1@")
            && stderr.contains("not a faultline scan JSON object"),
        "the skipped record is named by topic, partition and offset: {stderr}"
    );
    let a: serde_json::Value = serde_json::from_slice(&from_file.stdout).expect("JSON");
    let b: serde_json::Value = serde_json::from_slice(&from_topics.stdout).expect("JSON");
    assert!(
        a["fleet"]["interruptions"].as_u64().expect("count") > 0,
        "{a}"
    );
    assert_eq!(a, b, "the same report either way");
    let jobs: BTreeSet<&str> = b["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .filter_map(|j| j["job_id"].as_str())
        .collect();
    assert_eq!(jobs.len(), opts.jobs, "every job of the fleet: {jobs:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_that_does_not_exist_is_a_clear_error() {
    let cluster = Cluster::start(1);
    let events_topic = cluster.topic("events", 1).await;
    let missing = unique("no-such-topic");
    let out = report_from(&cluster.bootstrap, &events_topic, &missing, &[]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("reading the topic {missing}")),
        "names the topic: {stderr}"
    );
}
