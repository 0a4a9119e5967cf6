//! What a starting correlator learns from the incidents topic: the incidents a previous
//! correlator (this process before a restart, or the member that had the shard before a
//! takeover) left open, so that the same failures keep their ids
//! ([`crate::incident::IncidentEvent::id`], [`crate::incident::Correlator::adopt`]).
//!
//! It reads every partition of the incidents topic from the records produced within the last
//! `lookback` (by their timestamps; from the start of the partition where the broker cannot say) to
//! the end as it was when it started, and keeps each id's last change: those whose last change
//! is not a resolution are open. The topic is keyed by id, so one incident's changes are in one
//! partition, in order. Reading stops at `timeout`; what was read by then is used (logged).

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use serde::Deserialize;

use crate::kafka::KafkaSettings;
use crate::time::Millis;

/// An incident another correlator left open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenIncident {
    /// Its id.
    pub id: String,
    /// Its job.
    pub job_id: String,
    /// The log time of its first and last matches, when they had one.
    pub first_log_ms: Option<Millis>,
    /// See `first_log_ms`.
    pub last_log_ms: Option<Millis>,
}

/// The fields of an incident change this reads.
#[derive(Deserialize)]
struct Change {
    #[serde(rename = "type")]
    kind: String,
    /// Absent before ids existed: the fingerprint stands in.
    id: Option<String>,
    fingerprint: String,
    status: String,
    job_id: String,
    first_seen: Option<String>,
    last_seen: Option<String>,
}

/// Why the topic could not be read.
#[derive(Debug, thiserror::Error)]
#[error("reading the incidents topic {topic} back: {error}")]
pub struct RebuildError {
    /// The incidents topic.
    pub topic: String,
    /// What failed.
    pub error: String,
}

/// The incidents of `topic` left open (see the module docs). Blocking.
pub fn open_incidents(
    settings: &KafkaSettings,
    topic: &str,
    lookback: Duration,
    timeout: Duration,
) -> Result<Vec<OpenIncident>, RebuildError> {
    let fail = |error: String| RebuildError {
        topic: topic.to_string(),
        error,
    };
    let deadline = Instant::now() + timeout;
    let mut cc = ClientConfig::new();
    cc.set_log_level(crate::kafka::librdkafka_log_level());
    // The connection settings only: this reader assigns partitions itself and must never join,
    // commit for or fence the pipeline's consumer group.
    for (k, v) in &settings.consumer {
        if !k.starts_with("group.") && k != "partition.assignment.strategy" {
            cc.set(k, v);
        }
    }
    cc.set("group.id", "faultline-incidents-rebuild");
    cc.set("enable.auto.commit", "false");
    cc.set("enable.auto.offset.store", "false");
    let consumer: BaseConsumer = cc.create().map_err(|e| fail(e.to_string()))?;
    let ends = end_offsets(&consumer, topic, timeout).map_err(fail)?;
    let starts = start_offsets(&consumer, topic, &ends, lookback, timeout);
    let mut assign = TopicPartitionList::new();
    let mut left: HashMap<i32, i64> = HashMap::new();
    for (&p, &end) in &ends {
        let start = starts.get(&p).copied().unwrap_or(0);
        if start < end {
            assign
                .add_partition_offset(topic, p, Offset::Offset(start))
                .map_err(|e| fail(e.to_string()))?;
            left.insert(p, end);
        }
    }
    if left.is_empty() {
        return Ok(Vec::new());
    }
    consumer.assign(&assign).map_err(|e| fail(e.to_string()))?;
    let last = last_changes(&consumer, topic, left, deadline).map_err(fail)?;
    let stamp = |s: &Option<String>| {
        s.as_deref()
            .and_then(crate::time::parse)
            .and_then(|t| t.millis())
    };
    Ok(last
        .into_iter()
        .filter(|(_, c)| c.status != "resolved")
        .map(|(id, c)| OpenIncident {
            first_log_ms: stamp(&c.first_seen),
            last_log_ms: stamp(&c.last_seen),
            id,
            job_id: c.job_id,
        })
        .collect())
}

/// Each incident's last change, reading every partition of `left` up to its end offset (or
/// until `deadline`, logged).
fn last_changes(
    consumer: &BaseConsumer,
    topic: &str,
    mut left: HashMap<i32, i64>,
    deadline: Instant,
) -> Result<HashMap<String, Change>, String> {
    let mut last: HashMap<String, Change> = HashMap::new();
    while !left.is_empty() && Instant::now() < deadline {
        let Some(msg) = consumer.poll(Duration::from_millis(100)) else {
            continue;
        };
        let msg = msg.map_err(|e| e.to_string())?;
        if let Some(change) = msg
            .payload()
            .and_then(|p| serde_json::from_slice::<Change>(p).ok())
            .filter(|c| c.kind == "incident")
        {
            let id = change
                .id
                .clone()
                .unwrap_or_else(|| change.fingerprint.clone());
            last.insert(id, change);
        }
        let p = msg.partition();
        if left.get(&p).is_some_and(|&end| msg.offset() + 1 >= end) {
            left.remove(&p);
        }
    }
    if !left.is_empty() {
        tracing::warn!(
            topic,
            partitions = left.len(),
            "the incidents topic was not read to its end in time: open incidents there may get \
             new ids"
        );
    }
    Ok(last)
}

/// Each partition's end offset now.
fn end_offsets(
    consumer: &BaseConsumer,
    topic: &str,
    timeout: Duration,
) -> Result<HashMap<i32, i64>, String> {
    let metadata = consumer
        .fetch_metadata(Some(topic), timeout)
        .map_err(|e| e.to_string())?;
    let t = metadata
        .topics()
        .iter()
        .find(|t| t.name() == topic)
        .ok_or("not in the metadata")?;
    let mut ends = HashMap::new();
    for p in t.partitions() {
        let (_, high) = consumer
            .fetch_watermarks(topic, p.id(), timeout)
            .map_err(|e| e.to_string())?;
        ends.insert(p.id(), high);
    }
    Ok(ends)
}

/// Each partition's first offset produced within `lookback`, or its start where the broker
/// cannot say.
fn start_offsets(
    consumer: &BaseConsumer,
    topic: &str,
    ends: &HashMap<i32, i64>,
    lookback: Duration,
    timeout: Duration,
) -> HashMap<i32, i64> {
    let since = SystemTime::now()
        .checked_sub(lookback)
        .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_millis() as i64);
    let mut query = TopicPartitionList::new();
    for &p in ends.keys() {
        let _ = query.add_partition_offset(topic, p, Offset::Offset(since));
    }
    let mut starts = HashMap::new();
    if let Ok(found) = consumer.offsets_for_times(query, timeout) {
        for e in found.elements() {
            // `End` (nothing produced since, or a broker that keeps no time index) and the
            // rest fall back to the partition's start below: reading more is safe, less is not.
            if let Offset::Offset(o) = e.offset() {
                starts.insert(e.partition(), o);
            }
        }
    }
    for &p in ends.keys() {
        if let std::collections::hash_map::Entry::Vacant(v) = starts.entry(p) {
            let low = consumer
                .fetch_watermarks(topic, p, timeout)
                .map_or(0, |(low, _)| low);
            v.insert(low);
        }
    }
    starts
}
