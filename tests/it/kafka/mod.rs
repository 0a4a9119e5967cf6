//! Kafka pipeline tests over the real wire protocol: librdkafka's mock cluster in-process, or a
//! real broker when `FAULTLINE_TEST_BROKERS` is set (tests that need to take brokers down are
//! skipped there). Never a fake consumer: every test goes through rdkafka clients.
//!
//! Waiting is bounded polling on an observable condition (offsets committed, records on a
//! topic) with a deadline; nothing sleeps to let something happen.

mod backpressure;
mod crash_loop;
mod dead_letters;
mod demo_fleet;
mod identity;
mod in_process;
mod incidents;
mod out_of_process;
mod outage;
mod output;
mod oversized;
mod poison;
mod replay;
mod report;
mod scale_out;
mod undeliverable;
mod unknown;

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use faultline::config::{Config, RawConfig};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{DefaultProducerContext, FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};

/// How long any wait in these tests may take before the test fails.
pub(crate) const DEADLINE: Duration = Duration::from_secs(120);

/// A broker to test against.
pub(crate) struct Cluster {
    pub mock: Option<MockCluster<'static, DefaultProducerContext>>,
    pub bootstrap: String,
}

impl Cluster {
    /// A mock cluster of `brokers` brokers, or the real one named by `FAULTLINE_TEST_BROKERS`.
    pub(crate) fn start(brokers: i32) -> Cluster {
        match std::env::var("FAULTLINE_TEST_BROKERS") {
            Ok(b) if !b.is_empty() => Cluster {
                mock: None,
                bootstrap: b,
            },
            _ => {
                let mock = MockCluster::new(brokers).expect("mock cluster");
                let bootstrap = mock.bootstrap_servers();
                Cluster {
                    mock: Some(mock),
                    bootstrap,
                }
            }
        }
    }

    /// Creates a topic with a unique name.
    pub(crate) async fn topic(&self, prefix: &str, partitions: i32) -> String {
        let name = unique(prefix);
        create_topic(self.mock.as_ref(), &self.bootstrap, &name, partitions).await;
        name
    }
}

pub(crate) async fn create_topic(
    mock: Option<&MockCluster<'static, DefaultProducerContext>>,
    bootstrap: &str,
    name: &str,
    partitions: i32,
) {
    match mock {
        Some(m) => m.create_topic(name, partitions, 1).expect("create topic"),
        None => {
            let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
                .set("bootstrap.servers", bootstrap)
                .create()
                .expect("admin client");
            let topic = NewTopic::new(name, partitions, TopicReplication::Fixed(1));
            let results = admin
                .create_topics([&topic], &AdminOptions::new())
                .await
                .expect("create topics");
            for r in results {
                r.expect("topic created");
            }
        }
    }
}

/// A name no other test (or earlier run against a real broker) uses.
pub(crate) fn unique(prefix: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!(
        "{prefix}-{}-{}-{nanos}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A record to produce: partition, key, payload, headers.
#[derive(Debug, Clone, Default)]
pub(crate) struct Out {
    pub partition: i32,
    pub key: Option<String>,
    pub payload: Vec<u8>,
    pub headers: Vec<(String, String)>,
}

impl Out {
    pub(crate) fn new(partition: i32, key: &str, payload: impl Into<Vec<u8>>) -> Self {
        Out {
            partition,
            key: Some(key.to_string()),
            payload: payload.into(),
            headers: Vec::new(),
        }
    }
}

/// Produces records and waits until the broker acknowledged every one.
pub(crate) async fn produce(bootstrap: &str, topic: &str, records: &[Out]) {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .create()
        .expect("producer");
    let mut deliveries = Vec::new();
    for r in records {
        let mut headers = OwnedHeaders::new();
        for (k, v) in &r.headers {
            headers = headers.insert(Header {
                key: k,
                value: Some(v),
            });
        }
        let mut fr = FutureRecord::to(topic)
            .partition(r.partition)
            .payload(&r.payload)
            .headers(headers);
        if let Some(k) = &r.key {
            fr = fr.key(k);
        }
        let d = producer
            .send_result(fr)
            .map_err(|(e, _)| e)
            .expect("queued");
        deliveries.push(d);
    }
    for d in deliveries {
        d.await.expect("not cancelled").expect("delivered");
    }
}

/// A record read back.
#[derive(Debug, Clone)]
pub(crate) struct In {
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub payload: Vec<u8>,
    pub headers: Vec<(String, Vec<u8>)>,
}

impl In {
    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.payload).expect("JSON payload")
    }

    pub(crate) fn header(&self, key: &str) -> Option<String> {
        self.headers
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
    }
}

/// Reads a topic from the beginning until `done` holds for what was read, or the deadline.
pub(crate) fn consume_until(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    done: impl Fn(&[In]) -> bool,
) -> Vec<In> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", unique("reader"))
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .expect("partition");
    }
    consumer.assign(&tpl).expect("assign");
    let deadline = Instant::now() + DEADLINE;
    let mut out = Vec::new();
    while !done(&out) {
        assert!(
            Instant::now() < deadline,
            "{topic}: condition not met after {DEADLINE:?} with {} records read",
            out.len()
        );
        if let Some(m) = consumer.poll(Duration::from_millis(100)) {
            let m = m.expect("consume");
            out.push(In {
                partition: m.partition(),
                offset: m.offset(),
                key: m.key().map(<[u8]>::to_vec),
                payload: m.payload().unwrap_or_default().to_vec(),
                headers: m
                    .headers()
                    .map(|h| {
                        h.iter()
                            .map(|h| (h.key.to_string(), h.value.unwrap_or_default().to_vec()))
                            .collect()
                    })
                    .unwrap_or_default(),
            });
        }
    }
    out
}

/// Everything on a topic now: reads up to the partitions' current end.
pub(crate) fn consume_all(bootstrap: &str, topic: &str, partitions: i32) -> Vec<In> {
    let ends = end_offsets(bootstrap, topic, partitions);
    consume_until(bootstrap, topic, partitions, |read| {
        ends.iter().all(|(&p, &end)| {
            end == 0 || read.iter().any(|r| r.partition == p && r.offset + 1 >= end)
        })
    })
}

/// Each partition's end offset (high watermark).
pub(crate) fn end_offsets(bootstrap: &str, topic: &str, partitions: i32) -> HashMap<i32, i64> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("consumer");
    (0..partitions)
        .map(|p| {
            let (_, high) = consumer
                .fetch_watermarks(topic, p, Duration::from_secs(30))
                .expect("watermarks");
            (p, high)
        })
        .collect()
}

/// The group's committed offsets (-1: none).
pub(crate) fn committed(bootstrap: &str, group: &str, topic: &str, partitions: i32) -> Vec<i64> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition(topic, p);
    }
    let c = consumer
        .committed_offsets(tpl, Duration::from_secs(30))
        .expect("committed offsets");
    (0..partitions)
        .map(|p| match c.find_partition(topic, p).map(|e| e.offset()) {
            Some(Offset::Offset(o)) => o,
            _ => -1,
        })
        .collect()
}

/// Checks `cond` (broker-side state such as committed offsets, which no callback announces)
/// on every tick of a 50 ms interval until it holds; fails with `what` past the deadline.
pub(crate) async fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let mut ticks = tokio::time::interval(Duration::from_millis(50));
    let polled = tokio::time::timeout(DEADLINE, async {
        loop {
            ticks.tick().await;
            if cond() {
                return;
            }
        }
    });
    assert!(polled.await.is_ok(), "timed out waiting for {what}");
}

/// A KB entry file for tests: `id` is `test/<slug>`, matching `<WORD> <number>`.
pub(crate) fn write_entry(dir: &Path, slug: &str, word: &str) {
    let code = format!("TEST_{}", slug.to_uppercase().replace('-', "_"));
    let text = format!(
        r#"id = "test/{slug}"
title = "{word} happened"
domain = "test"
category = "crash"
error_code = "{code}"
role = "root"
severity = "error"
verification = "ai_generated"
patterns_verified = "unverified"
root_cause = "Something went {word}."
patterns = ['{word} (?P<n>\d+)']
examples = ["{word} 42"]
negative_examples = ["all fine"]
references = ["test fixture"]
"#
    );
    std::fs::create_dir_all(dir.join("test")).expect("mkdir");
    std::fs::write(dir.join("test").join(format!("{slug}.toml")), text).expect("write entry");
}

/// A temporary KB directory with the `boom` entry (`BOOM <n>` -> `TEST_BOOM`).
pub(crate) fn test_kb() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    write_entry(dir.path(), "boom", "BOOM");
    dir
}

/// An incident pipeline's surroundings: a mock cluster with one-partition input, events,
/// dead-letter and incidents topics, a fresh group, and the test configuration over them with
/// the repository's KB and incidents on.
pub(crate) struct IncidentRig {
    pub cluster: Cluster,
    pub input: String,
    pub incidents: String,
    pub group: String,
    pub raw: RawConfig,
}

impl IncidentRig {
    pub(crate) async fn start() -> Self {
        let cluster = Cluster::start(1);
        let input = cluster.topic("logs", 1).await;
        let output = cluster.topic("events", 1).await;
        let dlq = cluster.topic("dead", 1).await;
        let incidents = cluster.topic("incidents", 1).await;
        let group = unique("group");
        let kb = crate::support::repo().join("kb");
        let mut raw = test_config(&cluster.bootstrap, &group, &input, &output, &dlq, &kb);
        raw.incidents.topic = Some(incidents.clone());
        // Resolved incidents hold their records for late lines only briefly here: the tests
        // wait for everything to be committed after the resolutions.
        raw.incidents.resolved_hold_ms = Some(500);
        IncidentRig {
            cluster,
            input,
            incidents,
            group,
            raw,
        }
    }
}

/// A pipeline configuration for tests: small batches, fast commits, short session timeouts.
pub(crate) fn test_config(
    bootstrap: &str,
    group: &str,
    input: &str,
    output: &str,
    dlq: &str,
    kb: &Path,
) -> RawConfig {
    let mut raw = RawConfig::default();
    raw.kafka.brokers = Some(bootstrap.to_string());
    raw.kafka.group_id = Some(group.to_string());
    raw.kafka.topics = Some(vec![input.to_string()]);
    raw.kafka.commit_interval_ms = Some(100);
    raw.kafka.drain_timeout_ms = Some(30_000);
    raw.kafka
        .consumer_options
        .insert("session.timeout.ms".into(), "6000".into());
    raw.kafka
        .consumer_options
        .insert("heartbeat.interval.ms".into(), "500".into());
    raw.output.topic = Some(output.to_string());
    raw.dead_letter.topic = Some(dlq.to_string());
    raw.pipeline.batch_max_records = Some(50);
    raw.pipeline.batch_linger_ms = Some(10);
    raw.kb.dir = Some(kb.to_path_buf());
    raw.kb.watch_interval_ms = Some(100);
    raw.admin.listen = Some("off".into());
    raw
}

pub(crate) fn config(raw: RawConfig) -> Config {
    Config::from_raw(raw).expect("valid test config")
}
