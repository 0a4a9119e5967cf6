//! What a starting correlator learns from the incidents topic: the incidents a previous
//! correlator (this process before a restart, or the member that had the shard before a
//! takeover) published, so that the same failures keep their ids
//! ([`crate::incident::IncidentEvent::id`], [`crate::incident::Correlator::adopt`]) and a
//! failure it had resolved is not announced again when its records are read again
//! ([`super::incidents`]).
//!
//! It reads every partition of the incidents topic from the records produced within the last
//! `lookback` (by their timestamps; from the start of the partition where the broker cannot say) to
//! the end as it was when it started, and keeps each id's last change: those whose last change
//! is not a resolution are open, the others resolved. The topic is keyed by id, so one
//! incident's changes are in one partition, in order. Reading stops at `timeout`; what was read
//! by then is used (logged).

use std::collections::HashMap;
use std::time::Duration;

use rdkafka::message::Message;
use serde::Deserialize;

use crate::kafka::topic::{self, From};
use crate::kafka::KafkaSettings;
use crate::time::Millis;

/// An incident another correlator published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownIncident {
    /// Its id.
    pub id: String,
    /// Its job.
    pub job_id: String,
    /// The log time of its first and last matches, when they had one.
    pub first_log_ms: Option<Millis>,
    /// See `first_log_ms`.
    pub last_log_ms: Option<Millis>,
    /// The hosts its job ran on, as far as its lines said (`job_hosts`).
    pub hosts: Vec<String>,
    /// What its resolution said, when its last change was one; `None`: left open.
    pub resolved: Option<Outcome>,
    /// The `revision` of its last change.
    pub revision: u64,
}

/// What a resolved incident's last change said that a consumer acts on: equal outcomes of one
/// id are the same news.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The content fingerprint (its anchor line).
    pub fingerprint: String,
    /// The signature (job, root code, root host and GPU).
    pub signature: String,
    /// Matches counted.
    pub matches: u64,
    /// Its root.
    pub root: crate::incident::PublishedRoot,
}

impl Outcome {
    /// The outcome of `change`.
    pub fn of(change: &crate::incident::IncidentEvent) -> Self {
        Outcome {
            fingerprint: change.fingerprint.clone(),
            signature: change.signature.clone(),
            matches: change.counts.matches,
            root: crate::incident::PublishedRoot::of(&change.root),
        }
    }
}

/// The fields of an incident change this reads.
#[derive(Deserialize)]
struct Change {
    #[serde(rename = "type")]
    kind: String,
    /// Absent before ids existed: the fingerprint stands in.
    id: Option<String>,
    fingerprint: String,
    #[serde(default)]
    signature: String,
    #[serde(default)]
    counts: ChangeCounts,
    #[serde(default)]
    root: crate::incident::PublishedRoot,
    status: String,
    #[serde(default)]
    revision: u64,
    job_id: String,
    #[serde(default)]
    job_hosts: Vec<String>,
    first_seen: Option<String>,
    last_seen: Option<String>,
}

#[derive(Deserialize, Default)]
struct ChangeCounts {
    #[serde(default)]
    matches: u64,
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

/// The incidents of `topic`, each as its last change left it (see the module docs). Blocking.
pub fn known_incidents(
    settings: &KafkaSettings,
    topic: &str,
    lookback: Duration,
    timeout: Duration,
) -> Result<Vec<KnownIncident>, RebuildError> {
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
             new ids, resolved ones may be announced again"
        );
    }
    let stamp = |s: &Option<String>| {
        s.as_deref()
            .and_then(crate::time::parse)
            .and_then(|t| t.millis())
    };
    Ok(last
        .into_iter()
        .map(|(id, c)| KnownIncident {
            first_log_ms: stamp(&c.first_seen),
            last_log_ms: stamp(&c.last_seen),
            resolved: (c.status == "resolved").then_some(Outcome {
                fingerprint: c.fingerprint,
                signature: c.signature,
                matches: c.counts.matches,
                root: c.root,
            }),
            id,
            job_id: c.job_id,
            hosts: c.job_hosts,
            revision: c.revision,
        })
        .collect())
}
