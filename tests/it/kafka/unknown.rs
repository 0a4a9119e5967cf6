//! Unknown failures in the running pipeline (issue 16), through the mock cluster: `unknown`
//! events on the events topic, the unknown metrics, and the root-unknown incident that lists
//! the templates; in role `all`, and split into a match member and a correlator, where the
//! unknown events must land on the correlator shard of their job's match events.

use std::collections::BTreeSet;
use std::sync::Arc;

use faultline::pipeline::{self, shard::shard_of, Running};
use faultline::reload::Loaded;
use serde_json::Value;

use super::*;
use crate::unknown::{FIXTURE, SECRET};

/// The fixture's lines for job `job` in cluster `cluster`, one record each.
fn job_records(job: &str, cluster: &str, partition: i32) -> Vec<Out> {
    let text = std::fs::read_to_string(crate::support::repo().join(FIXTURE)).expect("fixture");
    text.lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).expect("json");
            v["job_id"] = job.into();
            v["cluster"] = cluster.into();
            Out::new(partition, job, v.to_string())
        })
        .collect()
}

/// The built-in KB (compiled once, no example check at start: quick in a debug build), shared
/// by the pipelines of a test.
fn builtin_kb() -> Arc<Loaded> {
    let kb = faultline::kb::KnowledgeBase::embedded().expect("the built-in KB");
    Arc::new(Loaded::new(kb).expect("compiles"))
}

async fn start(mut raw: RawConfig, kb: &Arc<Loaded>) -> Running {
    raw.kb.dir = None;
    pipeline::start_shared(config(raw), Arc::clone(kb), None)
        .await
        .expect("starts")
}

async fn scrape(running: &Running) -> String {
    let admin = running.admin_addr().expect("admin listens");
    tokio::task::spawn_blocking(move || {
        crate::observability::http_get(admin, "/metrics").map(|(_, body)| body)
    })
    .await
    .expect("joins")
    .expect("/metrics answers")
}

fn value(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

/// The resolved incident of each job on the incidents topic, once there is one per job.
fn resolved(bootstrap: &str, topic: &str, jobs: usize) -> Vec<Value> {
    let read = consume_until(bootstrap, topic, 1, |r| {
        r.iter()
            .filter(|m| m.json()["status"] == "resolved")
            .count()
            >= jobs
    });
    read.iter()
        .map(In::json)
        .filter(|i| i["status"] == "resolved")
        .collect()
}

fn ids<'a>(values: impl IntoIterator<Item = &'a Value>) -> BTreeSet<String> {
    values
        .into_iter()
        .map(|v| v["template_id"].as_str().expect("template_id").to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn role_all_produces_unknown_events_counts_them_and_lists_them_on_the_incident() {
    role_all(None).await;
}

/// `input.envelope = json` decodes every line to validate its record: the engine and the
/// unknown-line finder read those records, and no line is decoded twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_envelopes_are_decoded_once_with_unknown_mining_on() {
    role_all(Some("json")).await;
}

async fn role_all(envelope: Option<&str>) {
    let cluster = Cluster::start(1);
    let input = cluster.topic("logs", 1).await;
    let output = cluster.topic("events", 1).await;
    let dlq = cluster.topic("dead", 1).await;
    let topic = cluster.topic("incidents", 1).await;
    let group = unique("group");
    let job = "ckpt-sft-12";
    let records = job_records(job, "eu-1", 0);
    produce(&cluster.bootstrap, &input, &records).await;

    let kb = tempfile::tempdir().expect("tmp");
    let mut raw = test_config(&cluster.bootstrap, &group, &input, &output, &dlq, kb.path());
    raw.admin.listen = Some("127.0.0.1:0".into());
    raw.incidents.topic = Some(topic.clone());
    raw.incidents.resolved_hold_ms = Some(500);
    raw.incidents.window_ms = Some(3_000);
    raw.incidents.quiet_ms = Some(3_000);
    raw.input.envelope = envelope.map(str::to_string);
    let running = start(raw, &builtin_kb()).await;

    let events = consume_until(&cluster.bootstrap, &output, 1, |r| {
        r.iter().filter(|m| m.json()["type"] == "unknown").count() >= 2
            && r.iter().filter(|m| m.json()["type"] == "match").count() >= 2
    });
    let unknown: Vec<Value> = events
        .iter()
        .map(In::json)
        .filter(|e| e["type"] == "unknown")
        .collect();
    assert_eq!(unknown.len(), 2, "{unknown:#?}");
    for (m, e) in events.iter().zip(events.iter().map(In::json)) {
        assert_eq!(m.key.as_deref(), Some(job.as_bytes()), "keyed by the job");
        assert!(!e.to_string().contains(SECRET));
    }
    assert_eq!(unknown[0]["change"], "new");
    assert_eq!(unknown[0]["job_id"], job);
    assert_eq!(unknown[0]["source"]["kind"], "kafka");
    assert_eq!(
        unknown[0]["source"]["offset"], 1,
        "the fixture's second line"
    );

    let incidents = resolved(&cluster.bootstrap, &topic, 1);
    let last = &incidents[0];
    assert_eq!(last["root_known"], false);
    let listed = last["unrecognised"]
        .as_array()
        .expect("unrecognised listed");
    assert_eq!(ids(listed), ids(&unknown));
    assert!(!last.to_string().contains(SECRET));
    // The unknown events count among their records' outputs: everything gets committed.
    wait_for("everything committed", || {
        committed(&cluster.bootstrap, &group, &input, 1) == vec![records.len() as i64]
    })
    .await;

    let text = scrape(&running).await;
    running.shutdown();
    running.wait().await.expect("clean stop");
    assert_eq!(
        value(&text, "faultline_unknown_lines_total"),
        Some(4.0),
        "{text}"
    );
    assert_eq!(value(&text, "faultline_unknown_templates"), Some(2.0));
    assert_eq!(value(&text, "faultline_unknown_events_total"), Some(2.0));
    // One record, one JSON line each: each decoded once, whoever reads it (the envelope
    // check, the engine, the unknown-line finder).
    assert_eq!(
        value(&text, "faultline_json_lines_decoded_total"),
        Some(records.len() as f64),
        "{text}"
    );
}

/// Two clusters whose jobs fall on different shards of `partitions`.
fn two_clusters(partitions: i32) -> (String, String) {
    let first = "eu-1".to_string();
    let other = (0..64)
        .map(|i| format!("us-{i}"))
        .find(|c| shard_of(c, partitions) != shard_of(&first, partitions))
        .expect("another shard");
    (first, other)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_roles_place_unknown_events_on_the_job_shard_and_the_correlator_lists_them() {
    const SHARDS: i32 = 4;
    let cluster = Cluster::start(1);
    let input = cluster.topic("logs", 2).await;
    let output = cluster.topic("events", SHARDS).await;
    let dlq = cluster.topic("dead", 1).await;
    let topic = cluster.topic("incidents", 1).await;
    let group = unique("group");
    let (eu, us) = two_clusters(SHARDS);
    let jobs = [("job-eu", eu.as_str(), 0), ("job-us", us.as_str(), 1)];
    for (job, c, partition) in jobs {
        produce(&cluster.bootstrap, &input, &job_records(job, c, partition)).await;
    }

    let kb = tempfile::tempdir().expect("tmp");
    let base = || {
        let mut raw = test_config(&cluster.bootstrap, &group, &input, &output, &dlq, kb.path());
        raw.incidents.topic = Some(topic.clone());
        raw.incidents.resolved_hold_ms = Some(500);
        raw.incidents.window_ms = Some(3_000);
        raw.incidents.quiet_ms = Some(3_000);
        raw.incidents.shard_by = Some("cluster".into());
        raw
    };
    let mut member = base();
    member.incidents.role = Some("match".into());
    let mut correlator = base();
    correlator.incidents.role = Some("correlate".into());
    correlator.admin.listen = Some("127.0.0.1:0".into());
    let loaded = builtin_kb();
    let member = start(member, &loaded).await;
    let correlator = start(correlator, &loaded).await;

    let events = consume_until(&cluster.bootstrap, &output, SHARDS, |r| {
        r.iter().filter(|m| m.json()["type"] == "unknown").count() >= 4
            && r.iter().filter(|m| m.json()["type"] == "match").count() >= 4
    });
    for (job, c, _) in jobs {
        let partitions = |kind: &str| -> BTreeSet<i32> {
            events
                .iter()
                .filter(|m| {
                    let e = m.json();
                    e["type"] == kind && e["job_id"] == job
                })
                .map(|m| m.partition)
                .collect()
        };
        let shard = BTreeSet::from([shard_of(c, SHARDS)]);
        assert_eq!(partitions("match"), shard, "{job}: matches on its shard");
        assert_eq!(partitions("unknown"), shard, "{job}: unknown events too");
    }

    let incidents = resolved(&cluster.bootstrap, &topic, 2);
    for (job, _, _) in jobs {
        let incident = incidents
            .iter()
            .find(|i| i["job_id"] == job)
            .expect("an incident per job");
        assert_eq!(incident["root_known"], false);
        let listed = incident["unrecognised"]
            .as_array()
            .unwrap_or_else(|| panic!("{job}: unrecognised listed: {incident}"));
        let of_job = events
            .iter()
            .map(In::json)
            .filter(|e| e["type"] == "unknown" && e["job_id"] == job)
            .collect::<Vec<_>>();
        assert_eq!(ids(listed), ids(&of_job), "{job}: its own templates");
        assert!(!incident.to_string().contains(SECRET));
    }

    let text = scrape(&correlator).await;
    member.shutdown();
    correlator.shutdown();
    member.wait().await.expect("clean stop");
    correlator.wait().await.expect("clean stop");
    assert_eq!(
        value(
            &text,
            "faultline_correlator_events_total{result=\"unknown\"}"
        ),
        Some(4.0),
        "{text}"
    );
    assert_eq!(
        value(
            &text,
            "faultline_correlator_events_total{result=\"invalid\"}"
        ),
        Some(0.0)
    );
}
