//! Kafka client plumbing shared by the source and the sinks: the `[kafka]` section, the one
//! function that decides every librdkafka property ([`kafka_settings`]), the bridge from
//! librdkafka's log to `tracing`, the borrowed view of a consumed record, and the partition-list
//! and lag helpers.
//!
//! A leaf of the Kafka side: it depends on [`crate::offsets`], [`crate::section`] and
//! the metric labels only, so the source and the sinks share it instead of importing each other.
//! [`links`] turns librdkafka's connection noise into one line per broker outage; [`topic`]
//! reads a topic to its end outside any group.

pub mod links;
pub mod topic;

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use rdkafka::config::RDKafkaLogLevel;
use rdkafka::{Offset, TopicPartitionList};
use serde::Deserialize;

use crate::offsets::{RecordId, TopicPartition};
use crate::section::{redact, Errors, Printer};

/// `[kafka]` as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawKafka {
    /// Bootstrap servers.
    pub brokers: Option<String>,
    /// Consumer group.
    pub group_id: Option<String>,
    /// Static group membership (`group.instance.id`): a stable name per instance, such as a
    /// StatefulSet's pod name.
    pub instance_id: Option<String>,
    /// Topic names; an entry starting with `^` is a regular expression.
    pub topics: Option<Vec<String>>,
    /// `earliest` or `latest`.
    pub auto_offset_reset: Option<String>,
    /// Period of the asynchronous offset commit.
    pub commit_interval_ms: Option<u64>,
    /// How long a revoke or a shutdown waits for in-flight records.
    pub drain_timeout_ms: Option<u64>,
    /// Stop gracefully once every assigned partition has been read to its end (a replay of a
    /// backlog, as `kcat -e` reads one); `false` (the default) runs until stopped.
    pub exit_at_end: Option<bool>,
    /// librdkafka properties for both clients (SASL, TLS...).
    #[serde(default)]
    pub options: BTreeMap<String, String>,
    /// librdkafka properties for the consumer only.
    #[serde(default)]
    pub consumer_options: BTreeMap<String, String>,
    /// librdkafka properties for the producer only.
    #[serde(default)]
    pub producer_options: BTreeMap<String, String>,
}

/// One subscription entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopicSpec {
    /// A topic name.
    Name(String),
    /// A regular expression, as librdkafka takes it (starting with `^`).
    Pattern(String),
}

impl TopicSpec {
    /// As librdkafka's `subscribe` takes it.
    pub fn as_subscription(&self) -> &str {
        match self {
            TopicSpec::Name(s) | TopicSpec::Pattern(s) => s,
        }
    }
}

/// librdkafka properties; values of secret-looking keys never reach a log.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct KafkaOptions(pub BTreeMap<String, String>);

impl fmt::Debug for KafkaOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.0.iter().map(|(k, v)| (k, redact(k, v))))
            .finish()
    }
}

/// Validated `[kafka]`.
#[derive(Debug, Clone)]
pub struct KafkaConfig {
    /// Bootstrap servers.
    pub brokers: String,
    /// Consumer group.
    pub group_id: String,
    /// Static group membership (`group.instance.id`); `None`: dynamic membership.
    pub instance_id: Option<String>,
    /// What the consumer subscribes to.
    pub topics: Vec<TopicSpec>,
    /// `earliest` or `latest`.
    pub auto_offset_reset: String,
    /// Period of the asynchronous offset commit.
    pub commit_interval: Duration,
    /// How long a revoke or a shutdown waits for in-flight records.
    pub drain_timeout: Duration,
    /// Stop gracefully once every assigned partition has been read to its end.
    pub exit_at_end: bool,
    /// Properties for both clients.
    pub options: KafkaOptions,
    /// Properties for the consumer only.
    pub consumer_options: KafkaOptions,
    /// Properties for the producer only.
    pub producer_options: KafkaOptions,
}

/// Properties faultline sets itself: the guarantees depend on them, or a field names them.
const MANAGED: &[(&str, &str)] = &[
    ("bootstrap.servers", "use kafka.brokers"),
    ("group.id", "use kafka.group_id"),
    ("group.instance.id", "use kafka.instance_id"),
    ("auto.offset.reset", "use kafka.auto_offset_reset"),
    ("auto.commit.interval.ms", "use kafka.commit_interval_ms"),
    (
        "enable.auto.offset.store",
        "faultline stores offsets itself, after the output is acknowledged",
    ),
    (
        "enable.auto.commit",
        "faultline commits the offsets it stored itself (docs/kafka.md: when offsets are committed)",
    ),
];

impl KafkaConfig {
    /// Validates `[kafka]`, applying defaults; every problem goes to `errors`.
    pub fn from_raw(k: RawKafka, errors: &mut Errors<'_>) -> KafkaConfig {
        Self::from_raw_for(k, errors, true)
    }

    /// [`KafkaConfig::from_raw`]; `topics` may be empty when `require_topics` is false (a
    /// correlator reads the events topic, not `kafka.topics`).
    pub fn from_raw_for(k: RawKafka, errors: &mut Errors<'_>, require_topics: bool) -> KafkaConfig {
        let brokers = k.brokers.unwrap_or_default();
        if brokers.trim().is_empty() {
            errors.push(
                "brokers",
                "required (the file, --brokers or FAULTLINE_KAFKA_BROKERS)",
            );
        }
        let group_id = k.group_id.unwrap_or_else(|| "faultline".into());
        if group_id.trim().is_empty() {
            errors.push("group_id", "must not be empty");
        }
        let instance_id = k.instance_id.map(|i| i.trim().to_string());
        if let Some(i) = &instance_id {
            // Kafka's rule for group.instance.id, checked here rather than at the first join.
            let bad = i.is_empty()
                || i.len() > 249
                || i.chars()
                    .any(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')));
            if bad {
                errors.push(
                    "instance_id",
                    format!("{i:?}: 1 to 249 characters of [a-zA-Z0-9._-]"),
                );
            }
        }
        let mut topics = Vec::new();
        let mut bad_topic = false;
        for (i, t) in k.topics.unwrap_or_default().into_iter().enumerate() {
            let t = t.trim().to_string();
            let key = format!("topics[{i}]");
            if t.is_empty() {
                bad_topic = true;
                errors.push(&key, "empty topic name");
            } else if t.starts_with('^') {
                match regex::Regex::new(&t) {
                    Ok(_) => topics.push(TopicSpec::Pattern(t)),
                    Err(e) => {
                        bad_topic = true;
                        errors.push(&key, format!("not a valid regular expression: {e}"));
                    }
                }
            } else if let Some(bad) = t
                .chars()
                .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
            {
                bad_topic = true;
                errors.push(
                    &key,
                    format!(
                        "{t:?} is not a topic name ({bad:?} is not allowed; start a regular \
                         expression with ^)"
                    ),
                );
            } else {
                topics.push(TopicSpec::Name(t));
            }
        }
        if topics.is_empty() && !bad_topic && require_topics {
            errors.push(
                "topics",
                "at least one topic is required (the file, --topic or FAULTLINE_KAFKA_TOPICS)",
            );
        }
        let auto_offset_reset = k.auto_offset_reset.unwrap_or_else(|| "earliest".into());
        if !["earliest", "latest"].contains(&auto_offset_reset.as_str()) {
            errors.push(
                "auto_offset_reset",
                format!("{auto_offset_reset:?}: expected earliest or latest"),
            );
        }
        let commit_interval_ms = k.commit_interval_ms.unwrap_or(5_000);
        if commit_interval_ms == 0 {
            errors.push(
                "commit_interval_ms",
                "must be positive (faultline never commits per record)",
            );
        }
        let drain_timeout_ms = k.drain_timeout_ms.unwrap_or(10_000);
        for (table, map) in [
            ("options", &k.options),
            ("consumer_options", &k.consumer_options),
            ("producer_options", &k.producer_options),
        ] {
            for key in map.keys() {
                if let Some((_, why)) = MANAGED.iter().find(|(m, _)| m == key) {
                    errors.push(
                        &format!("{table}.\"{key}\""),
                        format!("not settable: {why}"),
                    );
                }
            }
            // An output that can never accept a dead letter is an error now, not at the first
            // large record (which would stop the pipeline on it, again after every restart).
            if table != "consumer_options" {
                if let Some(v) = map.get("message.max.bytes") {
                    match v.trim().parse::<usize>() {
                        Ok(n) if n >= MIN_MESSAGE_MAX_BYTES => {}
                        _ => errors.push(
                            &format!("{table}.\"message.max.bytes\""),
                            format!(
                                "{v:?}: must be a number of at least {MIN_MESSAGE_MAX_BYTES} \
                                 (the largest message faultline produces: a dead letter)"
                            ),
                        ),
                    }
                }
            }
        }
        KafkaConfig {
            brokers,
            group_id,
            instance_id,
            topics,
            auto_offset_reset,
            commit_interval: Duration::from_millis(commit_interval_ms),
            drain_timeout: Duration::from_millis(drain_timeout_ms),
            exit_at_end: k.exit_at_end.unwrap_or(false),
            options: KafkaOptions(k.options),
            consumer_options: KafkaOptions(k.consumer_options),
            producer_options: KafkaOptions(k.producer_options),
        }
    }

    /// Whether the consumer reads `topic` by name (the output topics must not be inputs).
    pub fn reads(&self, topic: &str) -> bool {
        self.topics
            .iter()
            .any(|t| matches!(t, TopicSpec::Name(n) if n == topic))
    }

    /// The effective `[kafka]` table, secret values left out.
    pub fn print(&self, p: &mut Printer) {
        p.table("kafka");
        p.value("brokers", &self.brokers);
        p.value("group_id", &self.group_id);
        if let Some(i) = &self.instance_id {
            p.value("instance_id", i);
        }
        let topics: Vec<&str> = self.topics.iter().map(TopicSpec::as_subscription).collect();
        p.value("topics", topics);
        p.value("auto_offset_reset", &self.auto_offset_reset);
        p.number("commit_interval_ms", self.commit_interval.as_millis());
        p.number("drain_timeout_ms", self.drain_timeout.as_millis());
        if self.exit_at_end {
            p.line("exit_at_end = true");
        }
        for (name, map) in [
            ("options", &self.options),
            ("consumer_options", &self.consumer_options),
            ("producer_options", &self.producer_options),
        ] {
            if !map.0.is_empty() {
                p.table(&format!("kafka.{name}"));
                for (key, value) in &map.0 {
                    p.line(&format!("{key:?} = {:?}", redact(key, value)));
                }
            }
        }
    }
}

/// The producer's `message.max.bytes` may not be set below this: librdkafka's default, which
/// every message faultline produces fits (dead letters carry at most
/// [`crate::sink::kafka::DEAD_LETTER_MAX_PAYLOAD`] bytes of a record plus headers; events and
/// incidents are cut far below it).
pub const MIN_MESSAGE_MAX_BYTES: usize = 1_000_000;

/// The librdkafka properties of both clients, decided in one place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaSettings {
    /// The consumer's properties.
    pub consumer: Vec<(String, String)>,
    /// The producer's properties.
    pub producer: Vec<(String, String)>,
}

impl KafkaSettings {
    /// Whether the consumer's `partition.assignment.strategy` (the last setting wins, as in
    /// librdkafka's configuration) names the cooperative assignor; librdkafka refuses a list
    /// that mixes eager and cooperative assignors, so this is the group's protocol.
    pub fn cooperative(&self) -> bool {
        self.consumer
            .iter()
            .rev()
            .find(|(k, _)| k == "partition.assignment.strategy")
            .is_some_and(|(_, v)| v.split(',').any(|a| a.trim() == "cooperative-sticky"))
    }
}

/// Every librdkafka property faultline sets. Pass-through options come last and win over the
/// defaults here (but not over the managed ones, which validation forbids).
pub fn kafka_settings(k: &KafkaConfig) -> KafkaSettings {
    let s = |a: &str, b: &str| (a.to_string(), b.to_string());
    let mut consumer = vec![
        s("bootstrap.servers", &k.brokers),
        s("client.id", "faultline"),
        s("group.id", &k.group_id),
        s("partition.assignment.strategy", "cooperative-sticky"),
        s("auto.offset.reset", &k.auto_offset_reset),
        // Offsets are stored by faultline once a record and all before it are terminal, and
        // committed by faultline: at once after an assignment, then at a pace that follows the
        // acknowledgements (source::commit), not on librdkafka's timer, which a member dying
        // young never reaches.
        s("enable.auto.offset.store", "false"),
        s("enable.auto.commit", "false"),
        // Lag and committed offsets for /metrics, and the end of broker outages (kafka::links).
        s("statistics.interval.ms", "5000"),
        // Bounded prefetch: memory stays bounded under a large lag. (queued.min.messages stays
        // at librdkafka's 100000: lower values mean many more, smaller fetches.)
        s("queued.max.messages.kbytes", "16384"),
        // When the prefetch is full, librdkafka waits this long before fetching again
        // (default 1 s): with a bounded prefetch and a fast consumer, that wait dominated and
        // capped throughput at a sixth of what it is with 20 ms.
        s("fetch.queue.backoff.ms", "20"),
        // How long a fetch waits on a quiet partition (librdkafka's default 500 ms): every hop
        // of the split roles pays it, and at 500 ms the p99 from a log line to its incident at
        // half load was 1 s; at 100 ms it was 0.24 s, with no loss of throughput
        // (`faultline bench latency`, docs/scale-out.md).
        s("fetch.wait.max.ms", "100"),
        s("fetch.max.bytes", "16777216"),
        s("max.partition.fetch.bytes", "1048576"),
    ];
    if let Some(id) = &k.instance_id {
        // Static membership: a restarted instance takes its partitions back without a
        // rebalance, as long as it returns within session.timeout.ms.
        consumer.push(s("group.instance.id", id));
    }
    let mut producer = vec![
        s("bootstrap.servers", &k.brokers),
        s("client.id", "faultline"),
        s("acks", "all"),
        s("enable.idempotence", "true"),
        s("linger.ms", "5"),
        // Events repeat their diagnosis and incidents their context: zstd shrinks them several
        // times over on the wire and on the brokers' disks. `producer_options` may say
        // otherwise (a broker before Kafka 2.1 needs `lz4`, `gzip` or `none`).
        s("compression.type", "zstd"),
        // Bounded producer queue: a slow output blocks the matcher, which fills the bounded
        // queue, which pauses consumption.
        s("queue.buffering.max.kbytes", "65536"),
        s("queue.buffering.max.messages", "100000"),
        s("statistics.interval.ms", "5000"),
    ];
    for (key, value) in k.options.0.iter().chain(&k.consumer_options.0) {
        consumer.retain(|(k, _)| k != key);
        consumer.push((key.clone(), value.clone()));
    }
    for (key, value) in k.options.0.iter().chain(&k.producer_options.0) {
        producer.retain(|(k, _)| k != key);
        producer.push((key.clone(), value.clone()));
    }
    KafkaSettings { consumer, producer }
}

/// A consumed record with its bytes, borrowed from its batch.
#[derive(Debug, Clone, Copy)]
pub struct RecordView<'a> {
    /// Where it was read.
    pub id: &'a RecordId,
    /// Its key.
    pub key: Option<&'a [u8]>,
    /// `None` for a tombstone.
    pub payload: Option<&'a [u8]>,
    /// Its headers, in order.
    pub headers: &'a [(String, Option<Vec<u8>>)],
}

/// The level up to which librdkafka hands its log lines to faultline: WARNING, or DEBUG while
/// this module logs at DEBUG (`FAULTLINE_LOG=faultline::kafka=debug`). rust-rdkafka derives
/// the level from the `log` crate, which faultline does not use (it logs with `tracing`), so
/// left alone it asks librdkafka for ERROR lines only, and its warnings (an offset reset that
/// skipped records among them) were never seen.
pub fn librdkafka_log_level() -> RDKafkaLogLevel {
    if tracing::enabled!(target: "faultline::kafka", tracing::Level::DEBUG) {
        RDKafkaLogLevel::Debug
    } else {
        RDKafkaLogLevel::Warning
    }
}

/// Routes librdkafka's own log lines to `tracing`.
pub fn log_librdkafka(client: &str, level: RDKafkaLogLevel, fac: &str, message: &str) {
    match level {
        RDKafkaLogLevel::Emerg
        | RDKafkaLogLevel::Alert
        | RDKafkaLogLevel::Critical
        | RDKafkaLogLevel::Error => tracing::error!(client, fac, "{message}"),
        RDKafkaLogLevel::Warning => tracing::warn!(client, fac, "{message}"),
        RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
            tracing::info!(client, fac, "{message}")
        }
        RDKafkaLogLevel::Debug => tracing::debug!(client, fac, "{message}"),
    }
}

/// Records of a partition that faultline has not read yet: from its position (the next offset
/// handed to it) to the end of the partition (the last stable offset, which is the high
/// watermark without transactions). Not librdkafka's `consumer_lag`, which counts from the
/// committed offset: an open incident holds the commit back on purpose, and lag is about
/// diagnoses arriving late. Before anything was read: from the committed offset, or, with
/// none committed yet, from the fetch position (an empty partition has a lag of 0). `None` for
/// a partition this member does not consume.
pub fn read_lag(p: &rdkafka::statistics::Partition) -> Option<i64> {
    let end = if p.ls_offset >= 0 {
        p.ls_offset
    } else {
        p.hi_offset
    };
    if p.app_offset >= 0 && end >= 0 {
        Some(end - p.app_offset)
    } else if p.consumer_lag >= 0 {
        Some(p.consumer_lag)
    } else if p.next_offset >= 0 && end >= 0 {
        Some((end - p.next_offset).max(0))
    } else {
        None
    }
}

/// A partition list with the next offset to commit of each partition.
pub fn to_tpl(offsets: &[(TopicPartition, i64)]) -> TopicPartitionList {
    let mut tpl = TopicPartitionList::new();
    for (tp, next) in offsets {
        // Only fails for an invalid offset, which a watermark never is.
        let _ = tpl.add_partition_offset(&tp.topic, tp.partition, Offset::Offset(*next));
    }
    tpl
}

/// The partitions of a list, as the tracker names them.
pub fn partitions_of(tpl: &TopicPartitionList) -> Vec<TopicPartition> {
    tpl.elements()
        .iter()
        .map(|e| TopicPartition {
            topic: std::sync::Arc::from(e.topic()),
            partition: e.partition(),
        })
        .collect()
}
