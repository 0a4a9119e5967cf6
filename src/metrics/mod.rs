//! Every Prometheus family faultline exports: one file per family group, each registering
//! itself (`register(&Registry) -> Self`), composed by [`Metrics`].
//!
//! Flow: a pipeline worker counts a batch locally in a [`BatchCounts`] (plain integers, no
//! atomics, no locks, nothing per line) and hands it to [`Metrics::flush`] once per batch, which
//! publishes it into the shared families. The admin server's `/metrics` route calls
//! [`Metrics::render`]. Partition lag, committed offsets, produce errors and KB reloads are
//! reported directly: they happen per poll, per commit or per error, never per line.
//!
//! Labels come from closed sets only ([`labels`]) and from the KB's codes, domains and
//! categories. Optional extra dimensions taken from the envelope ([`Dimension`], e.g. `cluster`)
//! are capped: past the cap a value is folded into `other` and counted in
//! `faultline_label_overflow_total`. Job ids, hosts, ranks and text never become labels.
//!
//! - [`matches`]: `faultline_matches_total` and its dimension bookkeeping.
//! - [`throughput`]: records, bytes, lines, dead letters, scan time, log-to-metric latency.
//! - [`kafka`]: consumer lag, committed offsets, produce errors, broker disconnects.
//! - [`kb`]: the KB in use, reloads, build info.
//! - [`health`]: panics and dropped spans.
//! - [`incidents`]: incidents, tickets, commit holds.
//! - [`outputs`]: each incident output's results, retries, queue and open items.
//! - [`unknown`]: error lines no KB entry knows, their templates and events.
//! - [`report`]: `faultline report --format prometheus`: interruptions and GPU-hours lost by
//!   bucket and code, fleet ETTR (a registry of its own, not the service's).

use prometheus::core::Collector;
use prometheus::{IntCounter, IntCounterVec, IntGaugeVec, Opts, Registry, TextEncoder};

use crate::kb::KnowledgeBase;

pub mod batch;
pub mod config;
pub mod health;
pub mod incidents;
pub mod kafka;
pub mod kb;
pub mod labels;
pub mod matches;
pub mod outputs;
pub mod report;
pub mod throughput;
pub mod unknown;

pub use batch::{BatchCounts, MAX_VALUE_BYTES};
pub use config::{DimensionConfig, MetricsConfig, RawMetricsConfig, DEFAULT_MAX_VALUES};
pub use incidents::IncidentFamilies;
pub use labels::{
    CorrelatorResult, DeadLetterReason, Dimension, Eviction, KafkaClient, Output, OutputResult,
    PanicStage, ReloadResult, ResolutionLabel, SpanDrop,
};
pub use outputs::{OutputCounters, OutputFamilies};
pub use unknown::UnknownFamilies;

/// `Content-Type` of [`Metrics::render`]'s output: the Prometheus text exposition format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Label value of a dimension the record did not carry.
pub const UNKNOWN: &str = "unknown";
/// Label value of a dimension past its cardinality cap (or not a plausible label value).
pub const OTHER: &str = "other";

/// Errors building the registry: only a programming error (a duplicate or malformed family)
/// can cause one, and it shows at startup.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// The registry refused a family (a duplicate name or malformed options).
    #[error("registering metric family: {0}")]
    Prometheus(#[from] prometheus::Error),
    /// An invalid `[metrics]` setting; the text says which.
    #[error("metrics.dimensions: {0}")]
    Config(String),
}

fn register<C: Collector + Clone + 'static>(registry: &Registry, c: C) -> Result<C, MetricsError> {
    registry.register(Box::new(c.clone()))?;
    Ok(c)
}

fn counter_vec(
    r: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> Result<IntCounterVec, MetricsError> {
    register(r, IntCounterVec::new(Opts::new(name, help), labels)?)
}

fn gauge_vec(
    r: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> Result<IntGaugeVec, MetricsError> {
    register(
        r,
        prometheus::IntGaugeVec::new(Opts::new(name, help), labels)?,
    )
}

/// Every family faultline exports, and the registry that renders them.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    matches: matches::MatchFamilies,
    throughput: throughput::ThroughputFamilies,
    kafka: kafka::KafkaFamilies,
    kb: kb::KbFamilies,
    health: health::HealthFamilies,
    incidents: IncidentFamilies,
    outputs: OutputFamilies,
    unknown: UnknownFamilies,
}

impl Metrics {
    /// Builds the registry with every family. Call [`Metrics::set_kb`] before counting.
    pub fn new(config: MetricsConfig) -> Result<Self, MetricsError> {
        let r = Registry::new();
        Ok(Metrics {
            matches: matches::MatchFamilies::register(&r, &config)?,
            throughput: throughput::ThroughputFamilies::register(&r)?,
            kafka: kafka::KafkaFamilies::register(&r)?,
            kb: kb::KbFamilies::register(&r)?,
            health: health::HealthFamilies::register(&r)?,
            incidents: IncidentFamilies::register(&r)?,
            outputs: OutputFamilies::register(&r)?,
            unknown: UnknownFamilies::register(&r)?,
            registry: r,
        })
    }

    /// The registry, for a caller that adds families of its own (e.g. process metrics).
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Makes `kb` the KB being counted: creates every entry's series at zero (for each admitted
    /// dimension value too), and updates `faultline_knowledge_base_entries` and
    /// `faultline_knowledge_base_info`. Call at start and after every successful reload;
    /// series of entries that left the KB stay.
    pub fn set_kb(&self, kb: &KnowledgeBase) {
        self.matches.set_kb(kb);
        self.kb.set_kb(kb);
        self.incidents.set_kb(kb);
    }

    /// A fresh local counter for one worker, bound to the current KB. Reuse it: [`flush`]
    /// empties it and rebinds it after a reload.
    ///
    /// [`flush`]: Metrics::flush
    pub fn batch(&self) -> BatchCounts {
        self.matches.batch()
    }

    /// Publishes what `batch` counted, then empties it (and rebinds it to the current KB).
    pub fn flush(&self, batch: &mut BatchCounts) {
        self.throughput.publish(batch);
        self.matches.publish(batch);
    }

    /// Sets the lag and the committed offset of one assigned partition (per poll or commit).
    pub fn set_partition(&self, topic: &str, partition: i32, lag: i64, committed: Option<i64>) {
        self.kafka.set_partition(topic, partition, lag, committed);
    }

    /// Drops a revoked partition's series: a stale lag would page someone for nothing.
    pub fn forget_partition(&self, topic: &str, partition: i32) {
        self.kafka.forget_partition(topic, partition);
    }

    /// Counts `n` records the producer failed to deliver.
    pub fn produce_errors(&self, output: Output, n: u64) {
        self.kafka.produce_errors(output, n);
    }

    /// The counter of offset resets, for the broker links.
    pub fn offset_resets(&self) -> IntCounter {
        self.kafka.offset_resets()
    }

    /// The counter of `client`'s lost broker connections, for the broker links.
    pub fn broker_disconnects(&self, client: KafkaClient) -> IntCounter {
        self.kafka.broker_disconnects(client)
    }

    /// Counts a KB reload attempt. On success, also call [`Metrics::set_kb`].
    pub fn kb_reload(&self, result: ReloadResult) {
        self.kb.reload(result);
    }

    /// Counts a panic caught in `stage`.
    pub fn panicked(&self, stage: PanicStage) {
        self.health.panicked(stage);
    }

    /// The counter of spans lost for `reason`, for the telemetry exporter to increment.
    pub fn spans_dropped(&self, reason: SpanDrop) -> IntCounter {
        self.health.spans_dropped(reason)
    }

    /// The incident and ticket families.
    pub fn incidents(&self) -> &IncidentFamilies {
        &self.incidents
    }

    /// The incident outputs' families.
    pub fn outputs(&self) -> &OutputFamilies {
        &self.outputs
    }

    /// The unknown-failure families.
    pub fn unknown(&self) -> &UnknownFamilies {
        &self.unknown
    }

    /// The KB version being counted.
    pub fn kb_version(&self) -> String {
        self.matches.kb_version()
    }

    /// The text exposition of every family, for the `/metrics` route.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Encoding well-formed families into a String cannot fail; if it ever did, the scrape
        // would get what was written so far and Prometheus would report the parse error.
        let _ = TextEncoder::new().encode_utf8(&self.registry.gather(), &mut out);
        out
    }
}

#[cfg(test)]
mod tests;
