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
use std::time::Duration;

use rdkafka::message::Message;
use serde::Deserialize;

use crate::kafka::topic::{self, From};
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
    let properties = settings
        .consumer
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()));
    let consumer = topic::reader(properties, "faultline-incidents-rebuild").map_err(fail)?;
    let mut last: HashMap<String, Change> = HashMap::new();
    let read = topic::read_to_end(&consumer, topic, From::Within(lookback), timeout, |msg| {
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
    })
    .map_err(fail)?;
    if read.partitions_left > 0 {
        tracing::warn!(
            topic,
            partitions = read.partitions_left,
            "the incidents topic was not read to its end in time: open incidents there may get \
             new ids"
        );
    }
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
