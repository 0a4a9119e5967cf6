//! Every Prometheus family faultline exports, registered in one place: [`Metrics`].
//!
//! Flow: a pipeline worker counts a batch locally in a [`BatchCounts`] (plain integers, no
//! atomics, no locks, nothing per line) and hands it to [`Metrics::flush`] once per batch, which
//! publishes it into the shared families. The admin server's `/metrics` route calls
//! [`Metrics::render`]. Partition lag, committed offsets, produce errors and KB reloads are
//! reported directly: they happen per poll, per commit or per error, never per line.
//!
//! Labels come from closed sets only. `faultline_matches_total` is labelled by the KB entry's
//! `error_code`, `domain`, `category`, `role` and `severity`; every entry's series exists from
//! the moment its KB is loaded (at zero), so `rate()` and `increase()` see the first match, and
//! never expires, so a reload that drops an entry does not rewrite history. Optional extra
//! dimensions taken from the envelope ([`Dimension`], e.g. `cluster`) are capped: past the cap
//! a value is folded into `other` and counted in `faultline_label_overflow_total`. Job ids,
//! hosts, ranks and text never become labels.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus::core::Collector;
use prometheus::{
    Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
    TextEncoder,
};

use crate::enrich::MatchEvent;
use crate::kb::KnowledgeBase;

/// `Content-Type` of [`Metrics::render`]'s output: the Prometheus text exposition format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Label value of a dimension the record did not carry.
pub const UNKNOWN: &str = "unknown";
/// Label value of a dimension past its cardinality cap (or not a plausible label value).
pub const OTHER: &str = "other";

/// Distinct values a dimension admits by default before folding the rest into `other`.
pub const DEFAULT_MAX_VALUES: usize = 32;

/// Longest dimension value admitted as a label; longer ones are folded into `other`.
pub const MAX_VALUE_BYTES: usize = 64;

/// Reasons a record is dead-lettered: the `faultline.reason` header of the Kafka pipeline.
/// `panic`: processing the record panicked, alone, after its batch's retry panicked too.
pub const DEAD_LETTER_REASONS: &[&str] = &["too_large", "invalid_utf8", "not_an_envelope", "panic"];

/// Pipeline stages whose panics are caught and counted (`faultline_panics_total{stage}`).
pub const PANIC_STAGES: &[&str] = &["match"];

/// Timestamps remembered per batch for the latency histogram; a batch with more matches
/// observes the first ones only, so a burst never grows the buffer without bound.
const MAX_LATENCY_SAMPLES: usize = 65_536;

/// Distinct dimension values one batch interns before folding the rest into `other`.
const MAX_BATCH_VALUES: usize = 4_096;

/// Errors building the registry: only a programming error (a duplicate or malformed family)
/// can cause one, and it shows at startup.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error("registering metric family: {0}")]
    Prometheus(#[from] prometheus::Error),
    #[error("metrics.dimensions: {0}")]
    Config(String),
}

/// An envelope field that may become an extra label of `faultline_matches_total`.
///
/// A closed set on purpose: each one must be low-cardinality by nature (a fleet has a handful
/// of clusters, not thousands of jobs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dimension {
    /// The envelope's `cluster` (or `k8s.cluster.name`).
    Cluster,
}

impl Dimension {
    /// Every dimension, in label order.
    pub const ALL: &'static [Dimension] = &[Dimension::Cluster];

    /// The label name.
    pub fn as_str(self) -> &'static str {
        match self {
            Dimension::Cluster => "cluster",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|d| d.as_str() == name)
    }

    /// The event's value for this dimension.
    pub fn value(self, event: &MatchEvent) -> Option<&str> {
        match self {
            Dimension::Cluster => event.cluster.as_deref(),
        }
    }
}

const MAX_DIMS: usize = Dimension::ALL.len();

/// One enabled dimension and its cardinality cap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DimensionConfig {
    pub dimension: Dimension,
    /// Distinct values admitted over the life of the process; later ones count as `other`.
    pub max_values: usize,
}

/// What [`Metrics`] exports beyond its fixed families.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetricsConfig {
    /// Extra labels of `faultline_matches_total`, in label order. Empty by default.
    pub dimensions: Vec<DimensionConfig>,
}

/// The `[metrics]` table of `faultline.toml` as written.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMetricsConfig {
    /// Envelope fields to add as labels: `["cluster"]`.
    #[serde(default)]
    pub dimensions: Vec<String>,
    /// Cardinality cap of each dimension; [`DEFAULT_MAX_VALUES`] when absent.
    pub max_values_per_dimension: Option<usize>,
}

impl MetricsConfig {
    /// Validates the raw table; errors name the field.
    pub fn from_raw(raw: &RawMetricsConfig) -> Result<Self, MetricsError> {
        let max_values = raw.max_values_per_dimension.unwrap_or(DEFAULT_MAX_VALUES);
        if max_values == 0 {
            return Err(MetricsError::Config(
                "metrics.max_values_per_dimension must be at least 1".into(),
            ));
        }
        let mut dimensions: Vec<DimensionConfig> = Vec::new();
        for (i, name) in raw.dimensions.iter().enumerate() {
            let Some(dimension) = Dimension::parse(name) else {
                let known: Vec<&str> = Dimension::ALL.iter().map(|d| d.as_str()).collect();
                return Err(MetricsError::Config(format!(
                    "metrics.dimensions[{i}] = {name:?} is not one of {known:?}"
                )));
            };
            if dimensions.iter().any(|d| d.dimension == dimension) {
                return Err(MetricsError::Config(format!(
                    "metrics.dimensions[{i}] = {name:?} is listed twice"
                )));
            }
            dimensions.push(DimensionConfig {
                dimension,
                max_values,
            });
        }
        Ok(MetricsConfig { dimensions })
    }
}

/// Where a produce error happened: a closed set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    Events,
    DeadLetter,
}

impl Output {
    pub const ALL: &'static [Output] = &[Output::Events, Output::DeadLetter];

    pub fn as_str(self) -> &'static str {
        match self {
            Output::Events => "events",
            Output::DeadLetter => "dead_letter",
        }
    }
}

/// The outcome of a KB reload attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReloadResult {
    /// A new KB version is in use.
    Success,
    /// The KB did not load or compile; the running one stays.
    Failure,
    /// The KB loaded but its content did not change.
    Unchanged,
}

impl ReloadResult {
    pub const ALL: &'static [ReloadResult] = &[
        ReloadResult::Success,
        ReloadResult::Failure,
        ReloadResult::Unchanged,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ReloadResult::Success => "success",
            ReloadResult::Failure => "failure",
            ReloadResult::Unchanged => "unchanged",
        }
    }
}

/// Why a span was not exported: a closed set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanDrop {
    /// The export queue was full (a burst larger than `max_queue_size`).
    QueueFull,
    /// The exporter failed (collector down, timeout).
    ExportFailed,
}

impl SpanDrop {
    pub const ALL: &'static [SpanDrop] = &[SpanDrop::QueueFull, SpanDrop::ExportFailed];

    pub fn as_str(self) -> &'static str {
        match self {
            SpanDrop::QueueFull => "queue_full",
            SpanDrop::ExportFailed => "export_failed",
        }
    }
}

/// The match-counter labels of every entry of one KB version, and where each kb_id sits.
#[derive(Debug)]
struct EntryTable {
    version: String,
    index: HashMap<String, usize>,
    /// error_code, domain, category, role, severity.
    labels: Vec<[String; 5]>,
    /// The series of each entry when no dimension is enabled: resolved once per KB.
    counters: Vec<IntCounter>,
}

/// The values of one dimension admitted as labels so far.
#[derive(Debug)]
struct DimState {
    config: DimensionConfig,
    admitted: HashSet<String>,
}

#[derive(Debug)]
struct State {
    table: Arc<EntryTable>,
    dims: Vec<DimState>,
}

/// Every family faultline exports, and the registry that renders them.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    matches: IntCounterVec,
    label_overflows: IntCounterVec,
    dimension_values: IntGaugeVec,
    records: IntCounter,
    bytes: IntCounter,
    lines: IntCounter,
    dead_letters: IntCounterVec,
    batch_scan: Histogram,
    latency: Histogram,
    lag: IntGaugeVec,
    committed: IntGaugeVec,
    produce_errors: IntCounterVec,
    kb_entries: IntGauge,
    kb_info: IntGaugeVec,
    kb_reloads: IntCounterVec,
    spans_dropped: IntCounterVec,
    panics: IntCounterVec,
    incidents: IncidentFamilies,
    state: Mutex<State>,
}

/// The incident and ticket families of `faultline run` (labels are closed sets: resolutions,
/// delivery results; never fingerprints, jobs or hosts).
#[derive(Debug, Clone)]
pub struct IncidentFamilies {
    pub open: IntGauge,
    pub opened: IntCounter,
    pub resolved: IntCounterVec,
    pub evictions: IntCounterVec,
    pub restart_loops: IntCounter,
    pub tickets_raised: IntCounter,
    pub webhook: IntCounterVec,
    pub webhook_retries: IntCounter,
    pub bad_node_score_max: prometheus::Gauge,
    pub holds: IntGauge,
    pub holds_expired: IntCounter,
}

/// Resolutions, as `faultline_incidents_resolved_total` labels them.
pub const RESOLUTIONS: &[&str] = &["quiet", "next_incident", "restart", "evicted", "shutdown"];

/// Outcomes of a webhook change: a closed set.
pub const WEBHOOK_RESULTS: &[&str] = &["delivered", "dead_lettered", "dropped", "abandoned"];

impl IncidentFamilies {
    fn register(r: &Registry) -> Result<Self, MetricsError> {
        let f = IncidentFamilies {
            open: register(
                r,
                IntGauge::new(
                    "faultline_incidents_open",
                    "Incidents open in the correlator.",
                )?,
            )?,
            opened: register(
                r,
                IntCounter::new("faultline_incidents_opened_total", "Incidents opened.")?,
            )?,
            resolved: counter_vec(
                r,
                "faultline_incidents_resolved_total",
                "Incidents resolved, by resolution (quiet, next_incident, restart, evicted, \
                 shutdown).",
                &["resolution"],
            )?,
            evictions: counter_vec(
                r,
                "faultline_incident_evictions_total",
                "State dropped to respect the correlator's caps: open incidents resolved as \
                 evicted (state=incident), jobs forgotten (state=job).",
                &["state"],
            )?,
            restart_loops: register(
                r,
                IntCounter::new(
                    "faultline_incident_restart_loops_total",
                    "Incidents whose fingerprint recurred in their job often enough to be a \
                     restart loop.",
                )?,
            )?,
            tickets_raised: register(
                r,
                IntCounter::new(
                    "faultline_tickets_raised_total",
                    "Incidents whose ticket was raised (a root-role initiator, or the match \
                     threshold).",
                )?,
            )?,
            webhook: counter_vec(
                r,
                "faultline_webhook_changes_total",
                "Ticketed incident changes handed to the webhook, by result: delivered, \
                 dead_lettered (retries exhausted or refused), dropped (the webhook queue was \
                 full), abandoned (still queued at shutdown; replayed after the restart).",
                &["result"],
            )?,
            webhook_retries: register(
                r,
                IntCounter::new(
                    "faultline_webhook_retries_total",
                    "Webhook attempts retried after a transport error, 408, 429 or 5xx.",
                )?,
            )?,
            bad_node_score_max: register(
                r,
                prometheus::Gauge::new(
                    "faultline_bad_node_score_max",
                    "The highest bad-node score of any host: distinct jobs whose incidents the \
                     host initiated, halving every half-life.",
                )?,
            )?,
            holds: register(
                r,
                IntGauge::new(
                    "faultline_incident_commit_holds",
                    "Partitions whose committed offset waits at the first record of an open \
                     incident.",
                )?,
            )?,
            holds_expired: register(
                r,
                IntCounter::new(
                    "faultline_incident_commit_holds_expired_total",
                    "Incidents whose commit holds were lifted after incidents.max_hold_ms \
                     while still open.",
                )?,
            )?,
        };
        for res in RESOLUTIONS {
            f.resolved.with_label_values(&[*res]);
        }
        for state in ["incident", "job"] {
            f.evictions.with_label_values(&[state]);
        }
        for res in WEBHOOK_RESULTS {
            f.webhook.with_label_values(&[*res]);
        }
        Ok(f)
    }
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
    register(r, IntGaugeVec::new(Opts::new(name, help), labels)?)
}

impl Metrics {
    /// Builds the registry with every family. Call [`Metrics::set_kb`] before counting.
    pub fn new(config: MetricsConfig) -> Result<Self, MetricsError> {
        let r = Registry::new();
        let mut match_labels = vec!["error_code", "domain", "category", "role", "severity"];
        match_labels.extend(config.dimensions.iter().map(|d| d.dimension.as_str()));
        let matches = counter_vec(
            &r,
            "faultline_matches_total",
            "Log lines that matched a knowledge-base entry, by the entry's error code, domain, \
             category, role and severity.",
            &match_labels,
        )?;
        let label_overflows = counter_vec(
            &r,
            "faultline_label_overflow_total",
            "Matches whose dimension value was counted as \"other\": the dimension had reached \
             its cardinality cap, or the value was not a plausible label value.",
            &["dimension"],
        )?;
        let dimension_values = gauge_vec(
            &r,
            "faultline_label_dimension_values",
            "Distinct values admitted as labels for each optional dimension of \
             faultline_matches_total.",
            &["dimension"],
        )?;
        let records = register(
            &r,
            IntCounter::new(
                "faultline_records_consumed_total",
                "Records consumed from the input topics.",
            )?,
        )?;
        let bytes = register(
            &r,
            IntCounter::new(
                "faultline_consumed_bytes_total",
                "Payload bytes of the records consumed from the input topics.",
            )?,
        )?;
        let lines = register(
            &r,
            IntCounter::new(
                "faultline_lines_scanned_total",
                "Log lines scanned against the knowledge base.",
            )?,
        )?;
        let dead_letters = counter_vec(
            &r,
            "faultline_records_dead_lettered_total",
            "Records sent to the dead-letter topic, by reason.",
            &["reason"],
        )?;
        let batch_scan = register(
            &r,
            Histogram::with_opts(
                HistogramOpts::new(
                    "faultline_batch_scan_duration_seconds",
                    "Time to scan and enrich one batch of records.",
                )
                .buckets(prometheus::exponential_buckets(0.000_25, 2.0, 16)?),
            )?,
        )?;
        let latency = register(
            &r,
            Histogram::with_opts(
                HistogramOpts::new(
                    "faultline_log_to_metric_latency_seconds",
                    "Time from a matched log line's own timestamp to its match being counted.",
                )
                .buckets(vec![
                    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0,
                    3600.0,
                ]),
            )?,
        )?;
        let lag = gauge_vec(
            &r,
            "faultline_consumer_lag_records",
            "Records between the consumer's position (what faultline has read) and the end of \
             each assigned partition; not from the committed offset, which open incidents may \
             hold back.",
            &["topic", "partition"],
        )?;
        let committed = gauge_vec(
            &r,
            "faultline_committed_offset",
            "Last offset committed for each assigned partition.",
            &["topic", "partition"],
        )?;
        let produce_errors = counter_vec(
            &r,
            "faultline_produce_errors_total",
            "Records the producer failed to deliver, by output.",
            &["output"],
        )?;
        let kb_entries = register(
            &r,
            IntGauge::new(
                "faultline_knowledge_base_entries",
                "Entries in the knowledge base in use.",
            )?,
        )?;
        let kb_info = gauge_vec(
            &r,
            "faultline_knowledge_base_info",
            "The knowledge base in use: always 1, labelled by its content version.",
            &["kb_version"],
        )?;
        let kb_reloads = counter_vec(
            &r,
            "faultline_knowledge_base_reloads_total",
            "Knowledge-base reload attempts, by result.",
            &["result"],
        )?;
        let build_info = gauge_vec(
            &r,
            "faultline_build_info",
            "The faultline build: always 1, labelled by its version.",
            &["version"],
        )?;
        let spans_dropped = counter_vec(
            &r,
            "faultline_spans_dropped_total",
            "Trace spans that were not exported, by reason.",
            &["reason"],
        )?;
        let panics = counter_vec(
            &r,
            "faultline_panics_total",
            "Panics caught while processing records, by pipeline stage: each is a bug. The \
             batch is retried, then processed record by record, and records that still panic \
             are dead-lettered (reason panic).",
            &["stage"],
        )?;

        for stage in PANIC_STAGES {
            panics.with_label_values(&[*stage]);
        }
        let incidents = IncidentFamilies::register(&r)?;
        for reason in DEAD_LETTER_REASONS.iter().chain([&OTHER]) {
            dead_letters.with_label_values(&[*reason]);
        }
        for o in Output::ALL {
            produce_errors.with_label_values(&[o.as_str()]);
        }
        for res in ReloadResult::ALL {
            kb_reloads.with_label_values(&[res.as_str()]);
        }
        for d in SpanDrop::ALL {
            spans_dropped.with_label_values(&[d.as_str()]);
        }
        for d in &config.dimensions {
            label_overflows.with_label_values(&[d.dimension.as_str()]);
            dimension_values.with_label_values(&[d.dimension.as_str()]);
        }
        build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1);

        let state = State {
            table: Arc::new(EntryTable {
                version: String::new(),
                index: HashMap::new(),
                labels: Vec::new(),
                counters: Vec::new(),
            }),
            dims: config
                .dimensions
                .into_iter()
                .map(|config| DimState {
                    config,
                    admitted: HashSet::new(),
                })
                .collect(),
        };
        Ok(Metrics {
            registry: r,
            matches,
            label_overflows,
            dimension_values,
            records,
            bytes,
            lines,
            dead_letters,
            batch_scan,
            latency,
            lag,
            committed,
            produce_errors,
            kb_entries,
            kb_info,
            kb_reloads,
            spans_dropped,
            panics,
            incidents,
            state: Mutex::new(state),
        })
    }

    /// The registry, for a caller that adds families of its own (e.g. process metrics).
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain counters behind: still usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes `kb` the KB being counted: creates every entry's series at zero (for each admitted
    /// dimension value too), and updates `faultline_knowledge_base_entries` and `faultline_knowledge_base_info`. Call
    /// at start and after every successful reload; series of entries that left the KB stay.
    pub fn set_kb(&self, kb: &KnowledgeBase) {
        let mut state = self.state();
        let labels: Vec<[String; 5]> = kb
            .entries
            .iter()
            .map(|e| {
                [
                    e.error_code.clone(),
                    e.domain.clone(),
                    e.category.clone(),
                    e.role.as_str().to_string(),
                    e.severity.as_str().to_string(),
                ]
            })
            .collect();
        let index = kb
            .entries
            .iter()
            .enumerate()
            .map(|(i, e)| (e.id.clone(), i))
            .collect();
        let ndims = state.dims.len();
        let mut counters = Vec::new();
        for base in &labels {
            let c = self
                .matches
                .with_label_values(&series(base, &vec![UNKNOWN; ndims]));
            if ndims == 0 {
                counters.push(c);
            }
            for (d, dim) in state.dims.iter().enumerate() {
                for value in &dim.admitted {
                    let mut values = vec![UNKNOWN; ndims];
                    values[d] = value;
                    self.matches.with_label_values(&series(base, &values));
                }
            }
        }
        state.table = Arc::new(EntryTable {
            version: kb.version.clone(),
            index,
            labels,
            counters,
        });
        self.kb_entries.set(kb.entries.len() as i64);
        self.kb_info.reset();
        self.kb_info
            .with_label_values(&[kb.version.as_str()])
            .set(1);
    }

    /// A fresh local counter for one worker, bound to the current KB. Reuse it: [`flush`]
    /// empties it and rebinds it after a reload.
    ///
    /// [`flush`]: Metrics::flush
    pub fn batch(&self) -> BatchCounts {
        let state = self.state();
        let dims = state.dims.iter().map(|d| d.config.dimension).collect();
        BatchCounts::new(Arc::clone(&state.table), dims)
    }

    /// Publishes what `batch` counted, then empties it (and rebinds it to the current KB).
    pub fn flush(&self, batch: &mut BatchCounts) {
        self.records.inc_by(batch.records);
        self.bytes.inc_by(batch.bytes);
        self.lines.inc_by(batch.lines);
        for (i, &n) in batch.dead_letters.iter().enumerate() {
            if n > 0 {
                let reason = DEAD_LETTER_REASONS.get(i).copied().unwrap_or(OTHER);
                self.dead_letters.with_label_values(&[reason]).inc_by(n);
            }
        }
        if let Some(t) = batch.scan_time.take() {
            self.batch_scan.observe(t.as_secs_f64());
        }
        if !batch.log_times.is_empty() {
            let now = unix_now();
            let local = self.latency.local();
            for &t in &batch.log_times {
                // Clocks disagree across a fleet: a line "from the future" counts as no delay.
                local.observe((now - t).max(0.0));
            }
            local.flush();
        }

        let mut state = self.state();
        let table = Arc::clone(&batch.table);
        if batch.dims.is_empty() {
            for (i, &n) in batch.per_entry.iter().enumerate() {
                if n > 0 {
                    if let Some(c) = table.counters.get(i) {
                        c.inc_by(n);
                    }
                }
            }
        } else {
            // Admission follows first sight within the batch (interned ids are in that
            // order), so which values make the cap does not depend on hash order.
            let admitted: Vec<Vec<bool>> = (0..batch.dims.len())
                .map(|d| {
                    let names = &batch.values[d].names;
                    names.iter().map(|v| self.admit(&mut state, d, v)).collect()
                })
                .collect();
            for (&(entry, idx), &n) in &batch.keyed {
                let Some(base) = table.labels.get(entry as usize) else {
                    continue;
                };
                let mut values: Vec<&str> = Vec::with_capacity(batch.dims.len());
                for (d, &k) in idx.iter().take(batch.dims.len()).enumerate() {
                    let value = match k as usize {
                        0 => UNKNOWN,
                        k if k >= 2 && admitted[d][k - 2] => batch.values[d].names[k - 2].as_str(),
                        _ => {
                            self.label_overflows
                                .with_label_values(&[batch.dims[d].as_str()])
                                .inc_by(n);
                            OTHER
                        }
                    };
                    values.push(value);
                }
                self.matches
                    .with_label_values(&series(base, &values))
                    .inc_by(n);
            }
        }
        let current = Arc::clone(&state.table);
        drop(state);
        batch.reset(current);
    }

    /// Admits `value` for dimension `d` if it is known or there is room; a newly admitted
    /// value gets every current entry's series at zero.
    fn admit(&self, state: &mut State, d: usize, value: &str) -> bool {
        let dim = &mut state.dims[d];
        if dim.admitted.contains(value) {
            return true;
        }
        if dim.admitted.len() >= dim.config.max_values {
            return false;
        }
        dim.admitted.insert(value.to_string());
        self.dimension_values
            .with_label_values(&[dim.config.dimension.as_str()])
            .set(dim.admitted.len() as i64);
        let ndims = state.dims.len();
        for base in &state.table.labels {
            let mut values = vec![UNKNOWN; ndims];
            values[d] = value;
            self.matches.with_label_values(&series(base, &values));
        }
        true
    }

    /// Sets the lag and the committed offset of one assigned partition (per poll or commit).
    pub fn set_partition(&self, topic: &str, partition: i32, lag: i64, committed: Option<i64>) {
        let p = partition.to_string();
        self.lag
            .with_label_values(&[topic, p.as_str()])
            .set(lag.max(0));
        if let Some(offset) = committed {
            self.committed
                .with_label_values(&[topic, p.as_str()])
                .set(offset);
        }
    }

    /// Drops a revoked partition's series: a stale lag would page someone for nothing.
    pub fn forget_partition(&self, topic: &str, partition: i32) {
        let p = partition.to_string();
        let _ = self.lag.remove_label_values(&[topic, p.as_str()]);
        let _ = self.committed.remove_label_values(&[topic, p.as_str()]);
    }

    /// Counts `n` records the producer failed to deliver.
    pub fn produce_errors(&self, output: Output, n: u64) {
        self.produce_errors
            .with_label_values(&[output.as_str()])
            .inc_by(n);
    }

    /// Counts a KB reload attempt. On success, also call [`Metrics::set_kb`].
    pub fn kb_reload(&self, result: ReloadResult) {
        self.kb_reloads.with_label_values(&[result.as_str()]).inc();
    }

    /// Counts a panic caught in `stage` (one of [`PANIC_STAGES`]).
    pub fn panicked(&self, stage: &'static str) {
        self.panics.with_label_values(&[stage]).inc();
    }

    /// The counter of spans lost for `reason`, for the telemetry exporter to increment.
    pub fn spans_dropped(&self, reason: SpanDrop) -> IntCounter {
        self.spans_dropped.with_label_values(&[reason.as_str()])
    }

    /// The incident and ticket families.
    pub fn incidents(&self) -> &IncidentFamilies {
        &self.incidents
    }

    /// The KB version being counted.
    pub fn kb_version(&self) -> String {
        self.state().table.version.clone()
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

/// The label values of one match series: the entry's five, then each dimension's.
fn series<'a>(base: &'a [String; 5], dims: &[&'a str]) -> Vec<&'a str> {
    base.iter()
        .map(String::as_str)
        .chain(dims.iter().copied())
        .collect()
}

/// The values of one dimension seen by one batch: index 0 is `unknown`, 1 is `other`.
#[derive(Debug, Default)]
struct Interner {
    ids: HashMap<String, u16>,
    names: Vec<String>,
}

impl Interner {
    fn id(&mut self, value: Option<&str>) -> u16 {
        let Some(v) = value.filter(|v| !v.is_empty()) else {
            return 0;
        };
        if !plausible_label(v) {
            return 1;
        }
        if let Some(&id) = self.ids.get(v) {
            return id;
        }
        if self.names.len() >= MAX_BATCH_VALUES {
            return 1;
        }
        let id = self.names.len() as u16 + 2;
        self.ids.insert(v.to_string(), id);
        self.names.push(v.to_string());
        id
    }

    fn clear(&mut self) {
        self.ids.clear();
        self.names.clear();
    }
}

/// A short name of letters, digits and `._:/-`: anything else is not a cluster name.
fn plausible_label(v: &str) -> bool {
    v.len() <= MAX_VALUE_BYTES
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'/' | b'-'))
}

/// What one batch did, counted locally by one worker and published by [`Metrics::flush`].
#[derive(Debug)]
pub struct BatchCounts {
    table: Arc<EntryTable>,
    /// The enabled dimensions, in label order; `values` has one interner for each.
    dims: Vec<Dimension>,
    /// Matches per entry of `table` (no dimension enabled).
    per_entry: Vec<u64>,
    /// Matches per (entry, interned dimension values) (dimensions enabled).
    keyed: HashMap<(u32, [u16; MAX_DIMS]), u64>,
    values: Vec<Interner>,
    records: u64,
    bytes: u64,
    lines: u64,
    /// Per [`DEAD_LETTER_REASONS`] index, then `other`.
    dead_letters: [u64; DEAD_LETTER_REASONS.len() + 1],
    scan_time: Option<Duration>,
    /// Unix seconds of the matched lines' own timestamps.
    log_times: Vec<f64>,
}

impl BatchCounts {
    fn new(table: Arc<EntryTable>, dims: Vec<Dimension>) -> Self {
        let n = table.labels.len();
        BatchCounts {
            table,
            values: dims.iter().map(|_| Interner::default()).collect(),
            dims,
            per_entry: vec![0; n],
            keyed: HashMap::new(),
            records: 0,
            bytes: 0,
            lines: 0,
            dead_letters: [0; DEAD_LETTER_REASONS.len() + 1],
            scan_time: None,
            log_times: Vec::new(),
        }
    }

    fn reset(&mut self, table: Arc<EntryTable>) {
        if !Arc::ptr_eq(&self.table, &table) {
            self.per_entry = vec![0; table.labels.len()];
            self.table = table;
        } else {
            self.per_entry.iter_mut().for_each(|n| *n = 0);
        }
        self.keyed.clear();
        self.values.iter_mut().for_each(Interner::clear);
        self.records = 0;
        self.bytes = 0;
        self.lines = 0;
        self.dead_letters = [0; DEAD_LETTER_REASONS.len() + 1];
        self.scan_time = None;
        self.log_times.clear();
    }

    /// Records consumed and their payload bytes.
    pub fn consumed(&mut self, records: u64, bytes: u64) {
        self.records += records;
        self.bytes += bytes;
    }

    /// Lines scanned.
    pub fn scanned(&mut self, lines: u64) {
        self.lines += lines;
    }

    /// One record dead-lettered for `reason` (one of [`DEAD_LETTER_REASONS`]; else `other`).
    pub fn dead_lettered(&mut self, reason: &str) {
        let i = DEAD_LETTER_REASONS
            .iter()
            .position(|r| *r == reason)
            .unwrap_or(DEAD_LETTER_REASONS.len());
        self.dead_letters[i] += 1;
    }

    /// The time the batch took to scan and enrich (adds up if called more than once).
    pub fn scan_time(&mut self, t: Duration) {
        self.scan_time = Some(self.scan_time.unwrap_or_default() + t);
    }

    /// One match. Events of another KB version than the batch's (a reload raced the batch)
    /// are looked up by `kb_id` like any other; an id the batch's KB lacks is not counted.
    pub fn matched(&mut self, event: &MatchEvent) {
        if self.log_times.len() < MAX_LATENCY_SAMPLES {
            if let Some(t) = event
                .timestamp
                .as_deref()
                .and_then(crate::time::parse)
                .and_then(|s| s.exact_seconds())
            {
                self.log_times.push(t);
            }
        }
        let Some(&entry) = self.table.index.get(&event.kb_id) else {
            return;
        };
        if self.dims.is_empty() {
            self.per_entry[entry] += 1;
            return;
        }
        let mut key = [0u16; MAX_DIMS];
        for (d, (slot, dimension)) in key.iter_mut().zip(&self.dims).enumerate() {
            *slot = self.values[d].id(dimension.value(event));
        }
        *self.keyed.entry((entry as u32, key)).or_insert(0) += 1;
    }

    /// Matches counted so far in this batch.
    pub fn matches(&self) -> u64 {
        self.per_entry.iter().sum::<u64>() + self.keyed.values().sum::<u64>()
    }
}

/// Seconds since the Unix epoch, now.
fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::testutil::{event, kb};

    /// Sum of the samples of `name` whose labels include every pair of `want`.
    fn sample(text: &str, name: &str, want: &[(&str, &str)]) -> Option<f64> {
        let mut found = None;
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let (series, value) = line.rsplit_once(' ')?;
            let (n, labels) = series.split_once('{').unwrap_or((series, "}"));
            if n != name {
                continue;
            }
            let labels: Vec<(&str, &str)> = labels
                .trim_end_matches('}')
                .split(',')
                .filter(|p| !p.is_empty())
                .filter_map(|p| p.split_once('='))
                .map(|(k, v)| (k, v.trim_matches('"')))
                .collect();
            if want.iter().all(|w| labels.contains(w)) {
                *found.get_or_insert(0.0) += value.parse::<f64>().expect("number");
            }
        }
        found
    }

    fn no_dims() -> Metrics {
        Metrics::new(MetricsConfig::default()).expect("registry")
    }

    #[test]
    fn every_entry_has_a_zero_series_from_the_start() {
        let m = no_dims();
        m.set_kb(&kb(&[
            ("nccl/x", "NCCL_TIMEOUT", "cascade"),
            ("nccl/y", "XID_79", "root"),
        ]));
        let text = m.render();
        for code in ["NCCL_TIMEOUT", "XID_79"] {
            assert_eq!(
                sample(&text, "faultline_matches_total", &[("error_code", code)]),
                Some(0.0),
                "{text}"
            );
        }
        assert_eq!(
            sample(
                &text,
                "faultline_matches_total",
                &[
                    ("error_code", "NCCL_TIMEOUT"),
                    ("role", "cascade"),
                    ("severity", "error")
                ]
            ),
            Some(0.0)
        );
        assert_eq!(
            sample(&text, "faultline_knowledge_base_entries", &[]),
            Some(2.0)
        );
        assert_eq!(
            sample(
                &text,
                "faultline_records_dead_lettered_total",
                &[("reason", "too_large")]
            ),
            Some(0.0)
        );
        assert_eq!(
            sample(
                &text,
                "faultline_build_info",
                &[("version", env!("CARGO_PKG_VERSION"))]
            ),
            Some(1.0)
        );
    }

    #[test]
    fn a_batch_is_published_by_flush_only() {
        let m = no_dims();
        let k = kb(&[
            ("nccl/x", "NCCL_TIMEOUT", "cascade"),
            ("nccl/y", "XID_79", "root"),
        ]);
        m.set_kb(&k);
        let mut b = m.batch();
        b.consumed(3, 300);
        b.scanned(10);
        for _ in 0..4 {
            b.matched(&event(&k, 0, None, None));
        }
        b.matched(&event(&k, 1, None, None));
        b.dead_lettered("not_an_envelope");
        b.dead_lettered("something new");
        b.scan_time(Duration::from_millis(3));
        assert_eq!(b.matches(), 5);
        let before = m.render();
        assert_eq!(
            sample(
                &before,
                "faultline_matches_total",
                &[("error_code", "NCCL_TIMEOUT")]
            ),
            Some(0.0)
        );
        assert_eq!(
            sample(&before, "faultline_lines_scanned_total", &[]),
            Some(0.0)
        );
        m.flush(&mut b);
        assert_eq!(b.matches(), 0, "flush empties the batch");
        let text = m.render();
        let get = |name, want: &[(&str, &str)]| sample(&text, name, want);
        assert_eq!(
            get("faultline_matches_total", &[("error_code", "NCCL_TIMEOUT")]),
            Some(4.0)
        );
        assert_eq!(
            get("faultline_matches_total", &[("error_code", "XID_79")]),
            Some(1.0)
        );
        assert_eq!(get("faultline_records_consumed_total", &[]), Some(3.0));
        assert_eq!(get("faultline_consumed_bytes_total", &[]), Some(300.0));
        assert_eq!(get("faultline_lines_scanned_total", &[]), Some(10.0));
        assert_eq!(
            get(
                "faultline_records_dead_lettered_total",
                &[("reason", "not_an_envelope")]
            ),
            Some(1.0)
        );
        assert_eq!(
            get(
                "faultline_records_dead_lettered_total",
                &[("reason", "other")]
            ),
            Some(1.0)
        );
        assert_eq!(
            get("faultline_batch_scan_duration_seconds_count", &[]),
            Some(1.0)
        );
        // A second flush of the emptied batch adds nothing.
        m.flush(&mut b);
        assert_eq!(
            sample(
                &m.render(),
                "faultline_matches_total",
                &[("error_code", "NCCL_TIMEOUT")]
            ),
            Some(4.0)
        );
    }

    #[test]
    fn reload_adds_new_entries_and_keeps_old_series() {
        let m = no_dims();
        let v1 = kb(&[("nccl/x", "NCCL_TIMEOUT", "cascade")]);
        m.set_kb(&v1);
        let mut b = m.batch();
        b.matched(&event(&v1, 0, None, None));
        // The KB reloads while the batch is open: the batch still counts against its own KB.
        let v2 = kb(&[("nccl/y", "XID_79", "root"), ("nccl/z", "CUDA_OOM", "root")]);
        m.set_kb(&v2);
        m.flush(&mut b);
        let text = m.render();
        assert_eq!(
            sample(
                &text,
                "faultline_matches_total",
                &[("error_code", "NCCL_TIMEOUT")]
            ),
            Some(1.0)
        );
        assert_eq!(
            sample(
                &text,
                "faultline_matches_total",
                &[("error_code", "CUDA_OOM")]
            ),
            Some(0.0)
        );
        assert_eq!(
            sample(
                &text,
                "faultline_knowledge_base_info",
                &[("kb_version", v1.version.as_str())]
            ),
            None
        );
        assert_eq!(
            sample(
                &text,
                "faultline_knowledge_base_info",
                &[("kb_version", v2.version.as_str())]
            ),
            Some(1.0)
        );
        assert_eq!(
            sample(&text, "faultline_knowledge_base_entries", &[]),
            Some(2.0)
        );
        assert_eq!(m.kb_version(), v2.version);
        // After the flush the batch counts against the new KB.
        b.matched(&event(&v2, 1, None, None));
        m.flush(&mut b);
        assert_eq!(
            sample(
                &m.render(),
                "faultline_matches_total",
                &[("error_code", "CUDA_OOM")]
            ),
            Some(1.0)
        );
        m.kb_reload(ReloadResult::Success);
        assert_eq!(
            sample(
                &m.render(),
                "faultline_knowledge_base_reloads_total",
                &[("result", "success")]
            ),
            Some(1.0)
        );
    }

    /// Metrics with the envelope's `cluster` as an extra dimension, capped at `max` values.
    fn by_cluster(max: Option<usize>) -> Metrics {
        let config = MetricsConfig::from_raw(&RawMetricsConfig {
            dimensions: vec!["cluster".into()],
            max_values_per_dimension: max,
        })
        .expect("valid");
        Metrics::new(config).expect("registry")
    }

    #[test]
    fn a_label_value_of_exactly_the_byte_cap_is_kept_one_more_byte_is_other() {
        let m = by_cluster(None);
        let k = kb(&[("nccl/x", "NCCL_TIMEOUT", "cascade")]);
        m.set_kb(&k);
        let at = "c".repeat(MAX_VALUE_BYTES);
        let past = "d".repeat(MAX_VALUE_BYTES + 1);
        let mut b = m.batch();
        b.matched(&event(&k, 0, Some(&at), None));
        b.matched(&event(&k, 0, Some(&past), None));
        m.flush(&mut b);
        let text = m.render();
        let count = |cluster: &str| {
            sample(
                &text,
                "faultline_matches_total",
                &[("error_code", "NCCL_TIMEOUT"), ("cluster", cluster)],
            )
        };
        assert_eq!(count(&at), Some(1.0), "exactly 64 bytes is a label value");
        assert_eq!(count(&past), None);
        assert_eq!(count(OTHER), Some(1.0), "65 bytes is counted as other");
    }

    #[test]
    fn exactly_max_values_per_dimension_are_admitted_one_more_is_other() {
        let m = by_cluster(Some(3));
        let k = kb(&[("nccl/x", "NCCL_TIMEOUT", "cascade")]);
        m.set_kb(&k);
        let mut b = m.batch();
        for cluster in ["a", "b", "c", "d"] {
            b.matched(&event(&k, 0, Some(cluster), None));
        }
        m.flush(&mut b);
        let text = m.render();
        let count = |cluster: &str| {
            sample(
                &text,
                "faultline_matches_total",
                &[("error_code", "NCCL_TIMEOUT"), ("cluster", cluster)],
            )
        };
        for admitted in ["a", "b", "c"] {
            assert_eq!(count(admitted), Some(1.0), "{admitted} is within the cap");
        }
        assert_eq!((count("d"), count(OTHER)), (None, Some(1.0)));
        assert_eq!(
            sample(
                &text,
                "faultline_label_dimension_values",
                &[("dimension", "cluster")]
            ),
            Some(3.0)
        );
    }

    #[test]
    fn dimensions_are_capped_and_overflow_is_counted() {
        let m = by_cluster(Some(2));
        let k = kb(&[
            ("nccl/x", "NCCL_TIMEOUT", "cascade"),
            ("nccl/y", "XID_79", "root"),
        ]);
        m.set_kb(&k);
        let text = m.render();
        assert_eq!(
            sample(
                &text,
                "faultline_matches_total",
                &[("error_code", "XID_79"), ("cluster", "unknown")]
            ),
            Some(0.0)
        );
        let mut b = m.batch();
        for cluster in [
            Some("eu-1"),
            Some("eu-1"),
            Some("us-2"),
            Some("ap-3"),
            Some("bad value!"),
            None,
        ] {
            b.matched(&event(&k, 0, cluster, None));
        }
        m.flush(&mut b);
        let text = m.render();
        let nccl = |cluster| {
            sample(
                &text,
                "faultline_matches_total",
                &[("error_code", "NCCL_TIMEOUT"), ("cluster", cluster)],
            )
        };
        assert_eq!(nccl("eu-1"), Some(2.0));
        assert_eq!(nccl("us-2"), Some(1.0));
        assert_eq!(nccl("ap-3"), None, "past the cap");
        assert_eq!(nccl("other"), Some(2.0), "ap-3 and the implausible value");
        assert_eq!(nccl("unknown"), Some(1.0));
        assert_eq!(
            sample(
                &text,
                "faultline_label_overflow_total",
                &[("dimension", "cluster")]
            ),
            Some(2.0)
        );
        assert_eq!(
            sample(
                &text,
                "faultline_label_dimension_values",
                &[("dimension", "cluster")]
            ),
            Some(2.0)
        );
        // A newly admitted value gets every entry's series at zero.
        assert_eq!(
            sample(
                &text,
                "faultline_matches_total",
                &[("error_code", "XID_79"), ("cluster", "us-2")]
            ),
            Some(0.0)
        );
        // A later batch reuses the admitted values.
        b.matched(&event(&k, 1, Some("us-2"), None));
        m.flush(&mut b);
        assert_eq!(
            sample(
                &m.render(),
                "faultline_matches_total",
                &[("error_code", "XID_79"), ("cluster", "us-2")]
            ),
            Some(1.0)
        );
    }

    #[test]
    fn dimension_config_is_validated() {
        let raw = |dims: &[&str], max| RawMetricsConfig {
            dimensions: dims.iter().map(|d| d.to_string()).collect(),
            max_values_per_dimension: max,
        };
        assert!(MetricsConfig::from_raw(&raw(&["job_id"], None))
            .expect_err("unknown dimension")
            .to_string()
            .contains("metrics.dimensions[0]"));
        assert!(MetricsConfig::from_raw(&raw(&["cluster", "cluster"], None)).is_err());
        assert!(MetricsConfig::from_raw(&raw(&["cluster"], Some(0))).is_err());
        let ok = MetricsConfig::from_raw(&raw(&["cluster"], None)).expect("valid");
        assert_eq!(ok.dimensions[0].max_values, DEFAULT_MAX_VALUES);
    }

    #[test]
    fn latency_comes_from_the_log_timestamp() {
        let m = no_dims();
        let k = kb(&[("nccl/x", "NCCL_TIMEOUT", "cascade")]);
        m.set_kb(&k);
        let mut b = m.batch();
        let ten_s_ago = crate::time::rfc3339_from_unix_nanos(((unix_now() - 10.0) * 1e9) as u128);
        b.matched(&event(&k, 0, None, Some(&ten_s_ago)));
        b.matched(&event(&k, 0, None, Some("2024-05-01T12:00:00.123"))); // no zone: skipped
        b.matched(&event(&k, 0, None, None));
        m.flush(&mut b);
        let text = m.render();
        assert_eq!(
            sample(&text, "faultline_log_to_metric_latency_seconds_count", &[]),
            Some(1.0)
        );
        let sum = sample(&text, "faultline_log_to_metric_latency_seconds_sum", &[]).expect("sum");
        assert!((10.0..3600.0).contains(&sum), "{sum}");
        assert_eq!(
            sample(
                &text,
                "faultline_log_to_metric_latency_seconds_bucket",
                &[("le", "5")]
            ),
            Some(0.0)
        );
    }

    #[test]
    fn partitions_come_and_go() {
        let m = no_dims();
        m.set_partition("logs", 3, 42, Some(1000));
        m.set_partition("logs", 4, -5, None);
        let text = m.render();
        let lag = |p| {
            sample(
                &text,
                "faultline_consumer_lag_records",
                &[("topic", "logs"), ("partition", p)],
            )
        };
        assert_eq!(lag("3"), Some(42.0));
        assert_eq!(
            lag("4"),
            Some(0.0),
            "negative lag (a stale high watermark) clamps to 0"
        );
        assert_eq!(
            sample(&text, "faultline_committed_offset", &[("partition", "3")]),
            Some(1000.0)
        );
        m.forget_partition("logs", 3);
        let text = m.render();
        assert_eq!(
            sample(
                &text,
                "faultline_consumer_lag_records",
                &[("partition", "3")]
            ),
            None
        );
        assert_eq!(
            sample(&text, "faultline_committed_offset", &[("partition", "3")]),
            None
        );
        m.produce_errors(Output::DeadLetter, 2);
        m.spans_dropped(SpanDrop::QueueFull).inc_by(7);
        let text = m.render();
        assert_eq!(
            sample(
                &text,
                "faultline_produce_errors_total",
                &[("output", "dead_letter")]
            ),
            Some(2.0)
        );
        assert_eq!(
            sample(
                &text,
                "faultline_spans_dropped_total",
                &[("reason", "queue_full")]
            ),
            Some(7.0)
        );
    }
}
