//! `faultline run`: the stages of the Kafka pipeline, wired with bounded queues.
//!
//! ```text
//!  source thread ──Batch (bounded channel)──▶ matcher thread ──events──▶ sink (producer)
//!   │ poll, register offsets                   │ decode, scan, enrich         │ delivery
//!   │ store watermarks ◀──────── Tracker ◀─────┴ resolve(outputs) ◀───────────┘ reports = acks
//!   └ rebalance: drain, commit                                  ▲
//!                          reload (SIGHUP, KB dir poll) ──watch─┘ swapped between batches
//! ```
//!
//! The acks travel behind their batch: a record's offset is stored only when it and every
//! earlier record of its partition are terminal ([`crate::offsets`]). Every queue is bounded:
//! librdkafka's prefetch, the batch channel (`pipeline.queue_batches`) and the producer queue;
//! a slow output blocks the matcher, the channel fills, the source pauses its partitions.
//! The admin server and the KB watcher are tokio tasks; the consumer and the matcher are threads
//! because both block (a revoke waits for the drain inside librdkafka's callback, and matching
//! is CPU work).
//!
//! Failure isolation: no record should make the matcher panic (the fuzz targets hold decoding,
//! scanning and multiline assembly to that), but if one does, the panic is caught around the
//! batch, counted (`faultline_panics_total{stage="match"}`), and the batch is processed once
//! more with a fresh worker; if that panics too, record by record, and the records that panic
//! alone go to the dead-letter topic (reason `panic`). No record is lost or skipped silently
//! and the partition keeps flowing; see `MatchStage::process_isolated`.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use crate::config::{kafka_settings, Config, EnvelopeMode, InputConfig, InvalidLimits, JobIdFrom};
use crate::engine::{ChunkInfo, Worker};
use crate::enrich::MatchEvent;
use crate::envelope;
use crate::matcher::{HyperscanMatcher, MatchError};
use crate::offsets::{TopicPartition, Tracker};
use crate::record::Provenance;
use crate::redact::Redactor;
use crate::reload::{self, KbSource, Loaded, ReloadError, ReloadStatus};
use crate::server;
use crate::sink::kafka::{KafkaSink, SinkCounts, SinkError};
use crate::source::kafka::{forget, Batch, KafkaSource, RecordView, SourceError, SourceRecord};

pub mod incidents;
pub mod queue;

/// Why the pipeline stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    #[error(transparent)]
    Kb(#[from] ReloadError),
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error(transparent)]
    Sink(#[from] SinkError),
    #[error(transparent)]
    Match(#[from] MatchError),
    #[error("{0}")]
    InvalidLimit(#[from] LimitExceeded),
    #[error("admin server on {addr}: {error}")]
    Admin {
        addr: std::net::SocketAddr,
        error: std::io::Error,
    },
    #[error("starting a pipeline thread: {0}")]
    Thread(std::io::Error),
    #[error("a pipeline thread panicked")]
    Panicked,
    #[error(transparent)]
    Metrics(#[from] crate::metrics::MetricsError),
    #[error(transparent)]
    Telemetry(#[from] crate::telemetry::TelemetryError),
    #[error(transparent)]
    Redact(#[from] crate::redact::RedactError),
    #[error(transparent)]
    Incidents(#[from] incidents::StartError),
}

/// The stop signal shared by every stage.
#[derive(Debug)]
pub struct Stop {
    requested: watch::Sender<bool>,
    /// Past the drain deadline: stages give up waiting on the output.
    abandoned: AtomicBool,
    error: Mutex<Option<PipelineError>>,
}

impl Stop {
    pub fn new() -> Arc<Self> {
        Arc::new(Stop {
            requested: watch::channel(false).0,
            abandoned: AtomicBool::new(false),
            error: Mutex::new(None),
        })
    }

    /// Asks for a graceful stop: drain, commit, exit.
    pub fn request(&self) {
        self.requested.send_replace(true);
    }

    pub fn requested(&self) -> bool {
        *self.requested.borrow()
    }

    /// Stops with an error (the first one wins).
    pub fn fail(&self, e: PipelineError) {
        let mut slot = self.error.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            tracing::error!(error = %e, "stopping");
            *slot = Some(e);
        }
        drop(slot);
        self.request();
    }

    pub fn failed(&self) -> bool {
        self.error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }

    pub fn abandon(&self) {
        self.abandoned.store(true, Ordering::Relaxed);
    }

    pub fn abandoned(&self) -> bool {
        self.abandoned.load(Ordering::Relaxed)
    }

    /// A receiver that turns true when a stop is requested, for async tasks.
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.requested.subscribe()
    }

    fn take_error(&self) -> Option<PipelineError> {
        self.error.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

/// State shared by the stages, the admin server and the caller.
#[derive(Debug)]
pub struct Shared {
    pub tracker: Arc<Tracker>,
    pub sink: Arc<SinkCounts>,
    pub reload: Arc<Mutex<ReloadStatus>>,
    records: AtomicU64,
    bytes: AtomicU64,
    events_sent: AtomicU64,
    invalid: AtomicU64,
    assigned: AtomicUsize,
    stall_timeout: Duration,
}

/// A snapshot of what the pipeline did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    pub records: u64,
    pub bytes: u64,
    /// Match events handed to the producer, and acknowledged by the broker.
    pub events_sent: u64,
    pub events_acked: u64,
    /// Records found undecodable, and dead letters acknowledged.
    pub invalid: u64,
    pub dead_letters_acked: u64,
    pub assigned_partitions: usize,
    pub in_flight: usize,
    pub kb: ReloadStatus,
    /// The next offset to commit of every partition seen.
    pub watermarks: Vec<(TopicPartition, i64)>,
}

impl Shared {
    fn new(stall_timeout: Duration) -> Arc<Self> {
        Arc::new(Shared {
            tracker: Tracker::new(),
            sink: Arc::new(SinkCounts::default()),
            reload: Arc::new(Mutex::new(ReloadStatus::default())),
            records: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            events_sent: AtomicU64::new(0),
            invalid: AtomicU64::new(0),
            assigned: AtomicUsize::new(0),
            stall_timeout,
        })
    }

    pub fn set_assigned(&self, n: usize) {
        self.assigned.store(n, Ordering::Relaxed);
    }

    pub fn stats(&self) -> Stats {
        Stats {
            records: self.records.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            events_sent: self.events_sent.load(Ordering::Relaxed),
            events_acked: self.sink.events.load(Ordering::Relaxed),
            invalid: self.invalid.load(Ordering::Relaxed),
            dead_letters_acked: self.sink.dead_letters.load(Ordering::Relaxed),
            assigned_partitions: self.assigned.load(Ordering::Relaxed),
            in_flight: self.tracker.in_flight(None),
            kb: self
                .reload
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
            watermarks: self.tracker.watermarks(),
        }
    }

    /// /readyz: the KB is loaded, partitions are assigned, records are not stuck.
    pub fn readiness(&self) -> Result<String, String> {
        let s = self.stats();
        let mut problems = Vec::new();
        if s.kb.version.is_empty() {
            problems.push("knowledge base not loaded".to_string());
        }
        if s.assigned_partitions == 0 {
            problems.push("no partitions assigned".to_string());
        }
        if self.tracker.stalled(self.stall_timeout) {
            problems.push(format!(
                "stalled: {} record(s) in flight and none finished for {} s",
                s.in_flight,
                self.stall_timeout.as_secs()
            ));
        }
        let body = format!(
            "kb_version {}\nassigned_partitions {}\nin_flight {}\nrecords {}\nevents {}\ndead_letters {}\nkb_reload_failures {}\n",
            s.kb.version,
            s.assigned_partitions,
            s.in_flight,
            s.records,
            s.events_acked,
            s.dead_letters_acked,
            s.kb.failures
        );
        if problems.is_empty() {
            Ok(body)
        } else {
            Err(format!("not ready: {}\n{body}", problems.join("; ")))
        }
    }
}

/// Why the Arroyo-style invalid-record limit tripped.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LimitExceeded {
    #[error(
        "stopped consuming: {count} consecutive records could not be decoded (limit \
         dead_letter.max_consecutive_invalid = {max}); last at {source_record}: {reason}. \
         Fix the producer or the input settings (input.envelope, input.max_record_bytes); \
         nothing past the last good record was committed"
    )]
    Consecutive {
        count: u64,
        max: u64,
        source_record: String,
        reason: String,
    },
    #[error(
        "stopped consuming: {invalid} of the last {seen} records could not be decoded (limit \
         dead_letter.max_invalid_ratio = {ratio} of dead_letter.invalid_window = {window}); \
         last at {source_record}: {reason}. Nothing past the last good record was committed"
    )]
    Ratio {
        invalid: u64,
        seen: u64,
        ratio: f64,
        window: u64,
        source_record: String,
        reason: String,
    },
}

/// Counts invalid records against [`InvalidLimits`]: more than `max_consecutive` in a row, or
/// more than `max_ratio * window` within a window of `window` records, trips it.
#[derive(Debug, Clone)]
pub struct InvalidCounter {
    limits: InvalidLimits,
    consecutive: u64,
    window_seen: u64,
    window_invalid: u64,
}

/// Which limit tripped, before the caller adds where.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Trip {
    Consecutive {
        count: u64,
        max: u64,
    },
    Ratio {
        invalid: u64,
        seen: u64,
        ratio: f64,
        window: u64,
    },
}

impl InvalidCounter {
    pub fn new(limits: InvalidLimits) -> Self {
        InvalidCounter {
            limits,
            consecutive: 0,
            window_seen: 0,
            window_invalid: 0,
        }
    }

    /// Counts one record; `Err` when the invalid ones are past a limit.
    pub fn record(&mut self, valid: bool) -> Result<(), Trip> {
        if self.window_seen >= self.limits.window {
            self.window_seen = 0;
            self.window_invalid = 0;
        }
        self.window_seen += 1;
        if valid {
            self.consecutive = 0;
            return Ok(());
        }
        self.consecutive += 1;
        self.window_invalid += 1;
        if let Some(max) = self.limits.max_consecutive {
            if self.consecutive > max {
                return Err(Trip::Consecutive {
                    count: self.consecutive,
                    max,
                });
            }
        }
        if let Some(ratio) = self.limits.max_ratio {
            if self.window_invalid as f64 > ratio * self.limits.window as f64 {
                return Err(Trip::Ratio {
                    invalid: self.window_invalid,
                    seen: self.window_seen,
                    ratio,
                    window: self.limits.window,
                });
            }
        }
        Ok(())
    }
}

impl Trip {
    fn at(self, source_record: String, reason: String) -> LimitExceeded {
        match self {
            Trip::Consecutive { count, max } => LimitExceeded::Consecutive {
                count,
                max,
                source_record,
                reason,
            },
            Trip::Ratio {
                invalid,
                seen,
                ratio,
                window,
            } => LimitExceeded::Ratio {
                invalid,
                seen,
                ratio,
                window,
                source_record,
                reason,
            },
        }
    }
}

/// Why a record cannot be decoded: it goes to the dead-letter topic.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Invalid {
    #[error("payload of {bytes} bytes is over input.max_record_bytes = {max}")]
    TooLarge { bytes: usize, max: usize },
    #[error("payload is not valid UTF-8 (input.envelope = text): invalid byte at {at}")]
    NotUtf8 { at: usize },
    #[error("line {line} is not a JSON envelope (input.envelope = json): {error}")]
    NotEnvelope { line: usize, error: String },
}

impl Invalid {
    /// The `faultline.reason` header: a closed set.
    pub fn code(&self) -> &'static str {
        match self {
            Invalid::TooLarge { .. } => "too_large",
            Invalid::NotUtf8 { .. } => "invalid_utf8",
            Invalid::NotEnvelope { .. } => "not_an_envelope",
        }
    }
}

/// What to do with one record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Disposition {
    /// No payload (a tombstone) or an empty one: nothing to match, terminal at once.
    Skip,
    Invalid(Invalid),
    Scan,
}

/// Decides whether a payload can be decoded under the input settings.
pub fn classify(
    payload: Option<&[u8]>,
    input: &InputConfig,
    scratch: &mut Vec<crate::record::LogRecord<'static>>,
) -> Disposition {
    let Some(p) = payload.filter(|p| !p.is_empty()) else {
        return Disposition::Skip;
    };
    if p.len() > input.max_record_bytes {
        return Disposition::Invalid(Invalid::TooLarge {
            bytes: p.len(),
            max: input.max_record_bytes,
        });
    }
    match input.envelope {
        EnvelopeMode::Auto => Disposition::Scan,
        EnvelopeMode::Text => match std::str::from_utf8(p) {
            Ok(_) => Disposition::Scan,
            Err(e) => Disposition::Invalid(Invalid::NotUtf8 {
                at: e.valid_up_to(),
            }),
        },
        EnvelopeMode::Json => {
            for (i, line) in p.split(|&b| b == b'\n').enumerate() {
                if line.trim_ascii().is_empty() {
                    continue;
                }
                scratch.clear();
                if let Err(e) = envelope::decode_json(line, scratch) {
                    return Disposition::Invalid(Invalid::NotEnvelope {
                        line: i + 1,
                        error: e.to_string(),
                    });
                }
            }
            Disposition::Scan
        }
    }
}

/// The job a record names by its key or a header (the first of that name), per
/// `input.job_id`; `None` when that is absent or empty (the envelope's job field or
/// `input.default_job_id` apply then).
pub fn record_job<'a>(
    key: Option<&'a [u8]>,
    headers: impl IntoIterator<Item = (&'a str, Option<&'a [u8]>)>,
    from: &JobIdFrom,
) -> Option<&'a [u8]> {
    match from {
        JobIdFrom::Envelope | JobIdFrom::Key => key,
        JobIdFrom::Header(name) => headers
            .into_iter()
            .find(|(k, _)| k == name)
            .and_then(|(_, v)| v),
    }
    .filter(|j| !j.is_empty())
}

/// A record's headers as [`record_job`] and [`decode_record`] take them.
fn header_pairs(r: RecordView<'_>) -> impl Iterator<Item = (&str, Option<&[u8]>)> {
    r.headers.iter().map(|(k, v)| (k.as_str(), v.as_deref()))
}

/// The lines a payload adds to the batch's scan buffer: its newlines, plus one for a last line
/// without one (the buffer gets a `\n` after it).
pub fn payload_lines(payload: &[u8]) -> u64 {
    memchr::memchr_iter(b'\n', payload).count() as u64
        + u64::from(payload.last().is_some_and(|&b| b != b'\n'))
}

/// What the matcher decides about one consumed record before scanning it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded<'a> {
    pub disposition: Disposition,
    /// The job named by the key or a header ([`record_job`]).
    pub job: Option<&'a [u8]>,
    /// Lines the payload adds to the scan buffer ([`payload_lines`]); 0 unless `Scan`.
    pub lines: u64,
}

/// Decodes one record's parts (key, headers, payload) under the input settings: the pure part
/// of the matching stage's per-record work, and what the `kafka_record` fuzz target drives.
pub fn decode_record<'a>(
    key: Option<&'a [u8]>,
    headers: impl IntoIterator<Item = (&'a str, Option<&'a [u8]>)>,
    payload: Option<&'a [u8]>,
    input: &InputConfig,
    scratch: &mut Vec<crate::record::LogRecord<'static>>,
) -> Decoded<'a> {
    let disposition = classify(payload, input, scratch);
    let lines = match disposition {
        Disposition::Scan => payload.map_or(0, payload_lines),
        _ => 0,
    };
    Decoded {
        disposition,
        job: record_job(key, headers, &input.job_id),
        lines,
    }
}

/// Where a record's lines start in the batch's scan buffer.
#[derive(Debug, Clone, Copy)]
struct Span {
    record: usize,
    first_line: u64,
}

/// The matching stage: decode, scan, enrich, produce; resolve each record in the tracker.
struct MatchStage {
    config: Arc<Config>,
    sink: Arc<KafkaSink>,
    shared: Arc<Shared>,
    stop: Arc<Stop>,
    kb: watch::Receiver<Arc<Loaded>>,
    loaded: Arc<Loaded>,
    worker: Worker<HyperscanMatcher>,
    counter: InvalidCounter,
    buf: Vec<u8>,
    spans: Vec<Span>,
    events: Vec<(usize, MatchEvent)>,
    dispositions: Vec<Disposition>,
    /// Outputs sent per record of the batch, in order.
    outputs: Vec<u32>,
    json: Vec<u8>,
    envelopes: Vec<crate::record::LogRecord<'static>>,
    metrics: Arc<crate::metrics::Metrics>,
    /// Counted locally per batch, published once per batch.
    counts: crate::metrics::BatchCounts,
    /// One span per match when OTLP export is configured.
    tracer: Option<crate::telemetry::MatchTracer>,
    /// The KB's enricher with the `[redact]` settings, rebuilt on every KB reload.
    enricher: crate::enrich::Enricher,
    /// Events' redactor (`[redact]`), `None` when redaction is off.
    redactor: Option<Arc<Redactor>>,
    /// How far [`MatchStage::process`] got in handing the batch's outputs to the sink.
    progress: Progress,
    /// Test-only panics ([`start_with_faults`]); `None` in `faultline run`.
    faults: Option<FaultInjection>,
    /// Correlation, the incidents topic and the webhook, when `[incidents]` is configured.
    incidents: Option<incidents::IncidentStage>,
}

/// How far [`MatchStage::process`] got in handing outputs to the sink: what the panic wrapper
/// needs to go on without sending an output twice or losing one.
#[derive(Debug, Default, Clone, Copy)]
struct Progress {
    /// Outputs started going out: the outputs of the first `outputs.len()` records are all
    /// with the sink.
    emitting: bool,
    /// Outputs of the record being emitted already with the sink.
    partial: u32,
    /// Every record of the batch is resolved in the tracker.
    resolved: bool,
}

/// How one guarded call of [`MatchStage::process`] ended.
enum Attempt {
    Done(Result<(), PipelineError>),
    /// It panicked: the panic's message, redacted.
    Panicked(String),
}

/// Where an injected panic strikes.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultPoint {
    /// Before the batch is decoded and scanned: nothing has gone out.
    Scan,
    /// After the record's first event was handed to the producer.
    AfterSend,
}

/// Test-only fault injection: the matcher panics on records whose payload holds `marker`, to
/// prove the failure isolation end to end. Only [`start_with_faults`] takes it; `faultline run`
/// calls [`start`], and no file, flag or environment variable can set it, so it cannot
/// trigger in production.
#[doc(hidden)]
#[derive(Debug, Clone)]
pub struct FaultInjection {
    pub marker: Vec<u8>,
    pub point: FaultPoint,
    /// Panics left; `None`: every time.
    pub times: Option<Arc<AtomicUsize>>,
}

impl FaultInjection {
    fn strike(&self, point: FaultPoint, payload: Option<&[u8]>) {
        if point != self.point
            || payload.is_none_or(|p| memchr::memmem::find(p, &self.marker).is_none())
        {
            return;
        }
        let now = match &self.times {
            None => true,
            Some(left) => left
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok(),
        };
        if now {
            panic!("injected fault: the record holds the test marker");
        }
    }
}

impl MatchStage {
    fn run(mut self, rx: queue::Receiver<Batch>) {
        loop {
            let batch = match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(b) => b,
                Err(queue::RecvError::Timeout) => {
                    if let Some(e) = self.sink.failure() {
                        self.stop.fail(e.into());
                    }
                    if let Some(incidents) = self.incidents.as_mut() {
                        incidents.tick();
                    }
                    continue;
                }
                Err(queue::RecvError::Closed) => break,
            };
            if self.stop.failed() {
                forget(&self.shared.tracker, &batch.records);
                continue;
            }
            if let Err(e) = self.refresh_kb() {
                forget(&self.shared.tracker, &batch.records);
                self.stop.fail(e.into());
                continue;
            }
            if let Err(e) = self.process_isolated(&batch) {
                self.stop.fail(e);
            }
            if let Some(incidents) = self.incidents.as_mut() {
                incidents.tick();
            }
        }
        if let Err(e) = self.sink.flush(self.config.kafka.drain_timeout) {
            tracing::warn!(error = %e, "flushing the producer");
        }
    }

    /// Takes the newest KB, if a reload published one: between batches only.
    fn refresh_kb(&mut self) -> Result<(), MatchError> {
        if self.kb.has_changed().unwrap_or(false) {
            let next = Arc::clone(&self.kb.borrow_and_update());
            self.worker = next.engine.worker()?;
            self.enricher = next.enricher.clone().with_redactor(self.redactor.clone());
            self.metrics.set_kb(&next.engine.kb);
            tracing::info!(kb_version = %next.version(), "matching with the reloaded knowledge base");
            self.loaded = next;
        }
        Ok(())
    }

    /// [`MatchStage::process`] with panics isolated, as `faultline scan` isolates them per
    /// chunk: a batch whose processing panics is processed once more with fresh engine state
    /// (worker, scratch, buffers), then record by record, and a record that panics on its own
    /// is dead-lettered (reason `panic`, stage `match`): nothing is lost or silently skipped
    /// and the partition goes on. Records whose outputs had started going out are not
    /// processed again (their events would go out twice): the records before are resolved,
    /// the one being emitted is dead-lettered, the rest go on. Every panic is logged and
    /// counted (`faultline_panics_total{stage="match"}`).
    fn process_isolated(&mut self, batch: &Batch) -> Result<(), PipelineError> {
        let mut rest = &batch.records[..];
        let mut panics = 0;
        while panics < 2 {
            match self.attempt(batch, rest) {
                Attempt::Done(result) => return result,
                Attempt::Panicked(message) => {
                    panics += 1;
                    tracing::error!(records = rest.len(), attempt = panics, error = %message,
                        "processing a batch panicked (a bug: please report it)");
                    let done = self.recover(batch, rest, &message)?;
                    rest = &rest[done..];
                    if rest.is_empty() {
                        return Ok(());
                    }
                }
            }
        }
        for (i, r) in rest.iter().enumerate() {
            let one = std::slice::from_ref(r);
            match self.attempt(batch, one) {
                Attempt::Done(Ok(())) => {}
                Attempt::Done(Err(e)) => {
                    forget(&self.shared.tracker, &rest[i + 1..]);
                    return Err(e);
                }
                Attempt::Panicked(message) => {
                    tracing::error!(source = %r.id.tp, offset = r.id.offset, error = %message,
                        "processing a record panicked (a bug: please report it); dead-lettering it");
                    if !self.progress.emitting {
                        self.shared.records.fetch_add(1, Ordering::Relaxed);
                        self.dead_letter_panic(batch, r, 0, &message)?;
                    } else {
                        self.recover(batch, one, &message)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Runs [`MatchStage::process`] once, catching a panic; after one, the engine state that
    /// it may have left mid-update is rebuilt and what it counted for the batch is undone.
    fn attempt(&mut self, batch: &Batch, records: &[SourceRecord]) -> Attempt {
        self.progress = Progress::default();
        let counter = self.counter.clone();
        let consumed = (
            self.shared.records.load(Ordering::Relaxed),
            self.shared.bytes.load(Ordering::Relaxed),
        );
        let result = catch_unwind(AssertUnwindSafe(|| {
            if let Some(f) = &self.faults {
                for r in records {
                    f.strike(FaultPoint::Scan, batch.payload(r));
                }
            }
            self.process(batch, records)
        }));
        let payload = match result {
            Ok(done) => return Attempt::Done(done),
            Err(payload) => payload,
        };
        self.metrics.panicked("match");
        let redactor = self.redactor.clone().unwrap_or_else(Redactor::builtin);
        let message = crate::scan::panic_message_with(payload.as_ref(), &redactor);
        // Only this thread writes these counts: the batch's are taken back, and counted again
        // by whatever processes its records next.
        self.shared.records.store(consumed.0, Ordering::Relaxed);
        self.shared.bytes.store(consumed.1, Ordering::Relaxed);
        self.counter = counter;
        self.counts = self.metrics.batch();
        match self.loaded.engine.worker() {
            Ok(w) => self.worker = w,
            Err(e) => {
                // Stopping: the batch is read again after a restart.
                forget(&self.shared.tracker, records);
                return Attempt::Done(Err(e.into()));
            }
        }
        self.buf = Vec::new();
        self.spans = Vec::new();
        self.events = Vec::new();
        self.envelopes = Vec::new();
        self.json = Vec::new();
        Attempt::Panicked(message)
    }

    /// After a panic in [`MatchStage::attempt`]: finishes what already went out and returns how
    /// many of `records` are done. Nothing went out: none (the caller retries them all).
    /// Outputs were going out: the records before are resolved and counted, the record being
    /// emitted is dead-lettered. All resolved (a panic after the tracker update): all.
    fn recover(
        &mut self,
        batch: &Batch,
        records: &[SourceRecord],
        message: &str,
    ) -> Result<usize, PipelineError> {
        let p = self.progress;
        if !p.emitting {
            return Ok(0);
        }
        if p.resolved {
            return Ok(records.len());
        }
        let k = self.outputs.len().min(records.len());
        let done = records[..k].iter().map(|r| &r.id);
        self.shared
            .tracker
            .resolve_many(done.zip(self.outputs.iter().copied()));
        // Count what is done once, as `process` would have.
        let upto = (k + 1).min(records.len());
        for (r, d) in records[..upto].iter().zip(&self.dispositions) {
            self.shared.records.fetch_add(1, Ordering::Relaxed);
            match d {
                Disposition::Invalid(_) => {
                    let _ = self.counter.record(false);
                }
                Disposition::Scan => {
                    let _ = self.counter.record(true);
                    let bytes = batch.payload(r).map_or(0, <[u8]>::len) as u64;
                    self.shared.bytes.fetch_add(bytes, Ordering::Relaxed);
                }
                Disposition::Skip => {}
            }
        }
        if k == records.len() {
            return Ok(k);
        }
        tracing::error!(source = %records[k].id.tp, offset = records[k].id.offset,
            events_sent = p.partial, "a record's processing panicked after its first outputs \
            went out; dead-lettering it");
        self.dead_letter_panic(batch, &records[k], p.partial, message)?;
        Ok(k + 1)
    }

    /// Sends `r` to the dead-letter topic (reason `panic`, stage `match`) and resolves it with
    /// its `sent` outputs plus the dead letter.
    fn dead_letter_panic(
        &mut self,
        batch: &Batch,
        r: &SourceRecord,
        sent: u32,
        message: &str,
    ) -> Result<(), PipelineError> {
        self.counts.dead_lettered("panic");
        self.metrics.flush(&mut self.counts);
        let kb_version = self.loaded.version().to_string();
        let error = format!("processing the record panicked: {message}");
        if let Err(e) = self.sink.send_dead_letter(
            batch.view(r),
            "panic",
            "match",
            &error,
            &kb_version,
            &self.stop,
        ) {
            self.shared.tracker.resolve(&r.id, sent);
            forget(&self.shared.tracker, std::slice::from_ref(r));
            return Err(e.into());
        }
        self.shared.tracker.resolve(&r.id, sent + 1);
        Ok(())
    }

    /// Processes `records`, records of `batch` (all of them, or a part when isolating a panic).
    fn process(&mut self, batch: &Batch, records: &[SourceRecord]) -> Result<(), PipelineError> {
        let tracker = Arc::clone(&self.shared.tracker);
        self.buf.clear();
        self.spans.clear();
        self.events.clear();
        self.dispositions.clear();
        let mut tripped = None;
        let mut line = 1u64;
        let mut bytes = 0u64;
        for (i, r) in records.iter().enumerate() {
            let view = batch.view(r);
            let decoded = decode_record(
                view.key,
                header_pairs(view),
                view.payload,
                &self.config.input,
                &mut self.envelopes,
            );
            let d = decoded.disposition;
            match &d {
                Disposition::Invalid(why) => {
                    if let Err(trip) = self.counter.record(false) {
                        let at = format!("{}@{}", r.id.tp, r.id.offset);
                        tripped = Some((i, trip.at(at, why.to_string())));
                        break;
                    }
                }
                Disposition::Scan => {
                    let _ = self.counter.record(true);
                    let p = batch.payload(r).unwrap_or_default();
                    bytes += p.len() as u64;
                    self.spans.push(Span {
                        record: i,
                        first_line: line,
                    });
                    self.buf.extend_from_slice(p);
                    if p.last() != Some(&b'\n') {
                        self.buf.push(b'\n');
                    }
                    line += decoded.lines;
                }
                Disposition::Skip => {}
            }
            self.dispositions.push(d);
        }
        self.shared
            .records
            .fetch_add(self.dispositions.len() as u64, Ordering::Relaxed);
        self.shared.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.counts.consumed(self.dispositions.len() as u64, bytes);
        self.counts.scanned(line - 1);

        if !self.buf.is_empty() {
            let scan_started = std::time::Instant::now();
            let Self {
                loaded,
                worker,
                spans,
                events,
                buf,
                config,
                counts,
                tracer,
                enricher,
                ..
            } = self;
            let job_from = &config.input.job_id;
            let default_job = &config.input.default_job_id;
            loaded.engine.scan_chunk_hits(
                worker,
                buf,
                ChunkInfo {
                    first_line: 1,
                    truncated: false,
                },
                &mut |hit| {
                    let k = spans.partition_point(|s| s.first_line <= hit.line);
                    let Some(span) = k.checked_sub(1).map(|k| spans[k]) else {
                        return;
                    };
                    let r = batch.view(&records[span.record]);
                    let source = Provenance::Kafka {
                        topic: r.id.tp.topic.to_string(),
                        partition: r.id.tp.partition,
                        offset: r.id.offset,
                        line: hit.line - span.first_line + 1,
                    };
                    let job =
                        record_job(r.key, header_pairs(r), job_from).map(String::from_utf8_lossy);
                    let mut event =
                        enricher.event(&hit, job.as_deref().unwrap_or(default_job), source);
                    if let (Some(job), JobIdFrom::Key | JobIdFrom::Header(_)) = (&job, job_from) {
                        event.job_id = job.to_string();
                    }
                    counts.matched(&event);
                    if let Some(tracer) = tracer {
                        tracer.record(&event);
                    }
                    events.push((span.record, event));
                },
            )?;
            counts.scan_time(scan_started.elapsed());
        }

        // Incidents before any record is resolved: their holds must precede the watermark.
        if let Some(incidents) = self.incidents.as_mut() {
            incidents.observe(records, &self.events);
        }

        // Outputs are sent first and the records resolved together after (acks arriving before
        // their record is resolved are counted): one tracker lock per batch, not per record.
        let mut e = 0;
        let kb_version = self.loaded.version().to_string();
        self.outputs.clear();
        self.progress.emitting = true;
        for (i, d) in self.dispositions.iter().enumerate() {
            let r = &records[i];
            let (outputs, sent) = match d {
                Disposition::Skip => (0, Ok(())),
                Disposition::Invalid(why) => {
                    self.shared.invalid.fetch_add(1, Ordering::Relaxed);
                    self.counts.dead_lettered(why.code());
                    tracing::warn!(source = %r.id.tp, offset = r.id.offset, reason = why.code(),
                        error = %why, "dead-lettering an undecodable record");
                    let sent = self.sink.send_dead_letter(
                        batch.view(r),
                        why.code(),
                        "decode",
                        &why.to_string(),
                        &kb_version,
                        &self.stop,
                    );
                    (1, sent)
                }
                Disposition::Scan => {
                    let start = e;
                    while e < self.events.len() && self.events[e].0 == i {
                        e += 1;
                    }
                    let mut result = Ok(());
                    for (_, event) in &self.events[start..e] {
                        self.json.clear();
                        if let Err(err) = serde_json::to_writer(&mut self.json, event) {
                            // Serialising plain data cannot fail; never drop an event silently.
                            tracing::error!(error = %err, "serialising an event");
                        }
                        result = self.sink.send_event(
                            &r.id,
                            event.job_id.as_bytes(),
                            &self.json,
                            &self.stop,
                        );
                        if result.is_err() {
                            break;
                        }
                        self.shared.events_sent.fetch_add(1, Ordering::Relaxed);
                        self.progress.partial += 1;
                        if let Some(f) = &self.faults {
                            f.strike(FaultPoint::AfterSend, batch.payload(r));
                        }
                    }
                    ((e - start) as u32, result)
                }
            };
            if let Err(err) = sent {
                let done = records.iter().map(|r| &r.id);
                tracker.resolve_many(done.zip(self.outputs.iter().copied()));
                forget(&tracker, &records[i..]);
                return Err(err.into());
            }
            self.outputs.push(outputs);
            self.progress.partial = 0;
        }
        let done = records.iter().map(|r| &r.id);
        tracker.resolve_many(done.zip(self.outputs.iter().copied()));
        self.progress.resolved = true;
        self.metrics.flush(&mut self.counts);
        if let Some((i, limit)) = tripped {
            forget(&tracker, &records[i..]);
            return Err(limit.into());
        }
        Ok(())
    }
}

/// A started pipeline.
pub struct Running {
    shared: Arc<Shared>,
    stop: Arc<Stop>,
    reload: tokio::sync::mpsc::Sender<()>,
    admin: Option<std::net::SocketAddr>,
    threads: Vec<std::thread::JoinHandle<()>>,
    /// The webhook thread: joined after the matcher, within the drain timeout.
    webhook: Option<(std::thread::JoinHandle<()>, Duration)>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// Flushed after the stages stop, so the last spans are exported.
    telemetry: Option<crate::telemetry::Telemetry>,
}

/// What `faultline run` reports when it stops.
#[derive(Debug, Clone)]
pub struct Report {
    pub stats: Stats,
}

/// Loads the KB (blocking; call from a blocking context or before the runtime is busy).
pub fn load_kb(config: &Config) -> Result<Loaded, ReloadError> {
    KbSource::from_dir(config.kb.dir.as_deref()).load()
}

/// Starts every stage: the admin server (bound before anything reads), the KB watcher, the
/// sink, the source and the matcher. Must be called inside a tokio runtime.
pub async fn start(config: Config, loaded: Loaded) -> Result<Running, PipelineError> {
    start_with_faults(config, loaded, None).await
}

/// [`start`], with panics injected into the matcher: for tests of the failure isolation only.
#[doc(hidden)]
pub async fn start_with_faults(
    config: Config,
    loaded: Loaded,
    faults: Option<FaultInjection>,
) -> Result<Running, PipelineError> {
    let config = Arc::new(config);
    let shared = Shared::new(config.admin.stall_timeout);
    let stop = Stop::new();
    shared
        .reload
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .version = loaded.version().to_string();
    let loaded = Arc::new(loaded);
    let (kb_tx, kb_rx) = watch::channel(Arc::clone(&loaded));
    let (reload_tx, reload_rx) = tokio::sync::mpsc::channel(1);
    let mut tasks = Vec::new();

    let metrics = Arc::new(crate::metrics::Metrics::new(config.metrics.clone())?);
    metrics.set_kb(&loaded.engine.kb);
    let telemetry = crate::telemetry::Telemetry::start(
        &config.telemetry,
        crate::telemetry::SpanDropCounters::of(&metrics),
    )?;
    let admin = match config.admin.listen {
        Some(addr) => {
            let listener = server::bind(addr)
                .await
                .map_err(|error| PipelineError::Admin { addr, error })?;
            let bound = listener.local_addr().unwrap_or(addr);
            let s = Arc::clone(&shared);
            let m = Arc::clone(&metrics);
            let routes =
                server::health_routes(move || s.readiness()).route("/metrics", move || {
                    server::Reply {
                        status: 200,
                        content_type: crate::metrics::CONTENT_TYPE,
                        body: m.render(),
                    }
                });
            tasks.push(tokio::spawn(server::serve(
                listener,
                routes,
                stop.subscribe(),
            )));
            tracing::info!(addr = %bound, "admin server listening (/healthz, /readyz, /metrics)");
            Some(bound)
        }
        None => None,
    };
    tasks.push(tokio::spawn(reload::watch(
        KbSource::from_dir(config.kb.dir.as_deref()),
        config.kb.dir.as_ref().and(config.kb.watch_interval),
        kb_tx,
        reload_rx,
        Arc::clone(&shared.reload),
        Arc::clone(&metrics),
        stop.subscribe(),
    )));

    let settings = kafka_settings(&config.kafka);
    let rules = config.redact.rules()?;
    let redactor = config.redact.enabled.then(|| Arc::clone(&rules));
    let sink = Arc::new(
        KafkaSink::new(
            &settings,
            &config.output_topic,
            &config.dead_letter.topic,
            Arc::clone(&shared.tracker),
            Arc::clone(&shared.sink),
        )?
        .with_dead_letter_redactor(config.dead_letter.redact.then_some(rules)),
    );
    let source = KafkaSource::new(
        &config,
        &settings,
        Arc::clone(&shared.tracker),
        Arc::clone(&shared),
        Arc::clone(&metrics),
    )?;
    let worker = loaded.engine.worker()?;
    let loaded_enricher = loaded.enricher.clone().with_redactor(redactor.clone());
    let (incidents, webhook) = match &config.incidents {
        Some(c) => {
            let (stage, thread) = incidents::IncidentStage::start(
                c,
                Arc::clone(&sink),
                Arc::clone(&shared.tracker),
                Arc::clone(&stop),
                &metrics,
                telemetry
                    .as_ref()
                    .map(crate::telemetry::Telemetry::incident_tracer),
            )?;
            (Some(stage), thread.map(|t| (t, config.kafka.drain_timeout)))
        }
        None => (None, None),
    };
    let (tx, rx) = queue::bounded::<Batch>(config.pipeline.queue_batches);
    let stage = MatchStage {
        counter: InvalidCounter::new(config.dead_letter.limits),
        config: Arc::clone(&config),
        sink,
        shared: Arc::clone(&shared),
        stop: Arc::clone(&stop),
        kb: kb_rx,
        loaded,
        worker,
        buf: Vec::new(),
        spans: Vec::new(),
        events: Vec::new(),
        dispositions: Vec::new(),
        outputs: Vec::new(),
        json: Vec::new(),
        envelopes: Vec::new(),
        counts: metrics.batch(),
        metrics: Arc::clone(&metrics),
        tracer: telemetry.as_ref().map(crate::telemetry::Telemetry::tracer),
        enricher: loaded_enricher,
        redactor,
        progress: Progress::default(),
        faults,
        incidents,
    };
    let mut threads = Vec::new();
    let spawn = |name: &str, f: Box<dyn FnOnce() + Send>| {
        std::thread::Builder::new()
            .name(name.to_string())
            .spawn(f)
            .map_err(PipelineError::Thread)
    };
    threads.push(spawn("faultline-match", Box::new(move || stage.run(rx)))?);
    let s = Arc::clone(&stop);
    threads.push(spawn(
        "faultline-source",
        Box::new(move || source.run(tx, s)),
    )?);
    tracing::info!(
        topics = ?config.kafka.topics.iter().map(|t| t.as_subscription()).collect::<Vec<_>>(),
        group = %config.kafka.group_id,
        output = %config.output_topic,
        "consuming"
    );
    Ok(Running {
        shared,
        stop,
        reload: reload_tx,
        admin,
        threads,
        webhook,
        tasks,
        telemetry,
    })
}

impl Running {
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    pub fn stats(&self) -> Stats {
        self.shared.stats()
    }

    /// The admin server's address, when it runs.
    pub fn admin_addr(&self) -> Option<std::net::SocketAddr> {
        self.admin
    }

    /// Asks for a graceful stop (SIGTERM, SIGINT): drain, commit, exit.
    pub fn shutdown(&self) {
        self.stop.request();
    }

    /// A handle that requests a stop, for signal handlers.
    pub fn stopper(&self) -> Arc<Stop> {
        Arc::clone(&self.stop)
    }

    /// Asks for a KB reload (SIGHUP).
    pub fn reload(&self) {
        let _ = self.reload.try_send(());
    }

    /// A handle that requests reloads.
    pub fn reloader(&self) -> tokio::sync::mpsc::Sender<()> {
        self.reload.clone()
    }

    /// Waits for the pipeline to stop (after [`Running::shutdown`] or an error).
    pub async fn wait(self) -> Result<Report, PipelineError> {
        let Running {
            shared,
            stop,
            threads,
            webhook,
            tasks,
            telemetry,
            ..
        } = self;
        let joined =
            tokio::task::spawn_blocking(move || threads.into_iter().all(|t| t.join().is_ok()))
                .await
                .unwrap_or(false);
        stop.request();
        if let Some((thread, limit)) = webhook {
            // Its queue is closed with the matcher; an attempt in progress may take its timeout.
            let joining = tokio::task::spawn_blocking(move || thread.join().is_ok());
            if tokio::time::timeout(limit, joining).await.is_err() {
                tracing::warn!("the webhook thread is still sending; not waiting for it");
            }
        }
        for t in tasks {
            let _ = t.await;
        }
        if let Some(t) = telemetry {
            let flushed = tokio::task::spawn_blocking(move || t.shutdown()).await;
            if let Ok(Err(e)) = flushed {
                tracing::warn!(error = %e, "exporting the last spans");
            }
        }
        if let Some(e) = stop.take_error() {
            return Err(e);
        }
        if !joined {
            return Err(PipelineError::Panicked);
        }
        Ok(Report {
            stats: shared.stats(),
        })
    }
}

/// `faultline run`: start, then stop gracefully on SIGTERM or SIGINT, reload on SIGHUP.
pub async fn run(config: Config) -> Result<Report, PipelineError> {
    let c = config.clone();
    let loaded = tokio::task::spawn_blocking(move || load_kb(&c))
        .await
        .map_err(|_| PipelineError::Panicked)??;
    tracing::info!(kb_version = %loaded.version(), entries = loaded.engine.kb.entries.len(),
        origin = %loaded.engine.kb.origin, "knowledge base loaded");
    let running = start(config, loaded).await?;
    let signals = tokio::spawn(handle_signals(running.stopper(), running.reloader()));
    let result = running.wait().await;
    signals.abort();
    result
}

/// SIGTERM and SIGINT request a graceful stop (a second one exits at once); SIGHUP reloads the
/// KB.
pub async fn handle_signals(stop: Arc<Stop>, reload: tokio::sync::mpsc::Sender<()>) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int), Ok(mut hup)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::hangup()),
    ) else {
        tracing::error!("cannot install signal handlers");
        return;
    };
    loop {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
            _ = hup.recv() => {
                tracing::info!("SIGHUP: reloading the knowledge base");
                let _ = reload.try_send(());
                continue;
            }
        }
        if stop.requested() {
            tracing::warn!("second signal: exiting without draining");
            std::process::exit(130);
        }
        tracing::info!("signal: draining in-flight records, committing, exiting");
        stop.request();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(ratio: Option<f64>, window: u64, consecutive: Option<u64>) -> InvalidCounter {
        InvalidCounter::new(InvalidLimits {
            max_ratio: ratio,
            window,
            max_consecutive: consecutive,
        })
    }

    #[test]
    fn consecutive_limit_trips_past_the_maximum() {
        let mut c = limits(None, 10, Some(3));
        for _ in 0..3 {
            c.record(false).expect("within the limit");
        }
        c.record(true).expect("valid resets the run");
        for _ in 0..3 {
            c.record(false).expect("within the limit");
        }
        assert_eq!(c.record(false), Err(Trip::Consecutive { count: 4, max: 3 }));
    }

    #[test]
    fn ratio_limit_counts_within_a_window() {
        // 2 of 10 allowed per window.
        let mut c = limits(Some(0.2), 10, None);
        for i in 0..30 {
            // Two invalid records per window of ten: never trips.
            c.record(i % 10 >= 2).expect("at the ratio");
        }
        c.record(false).expect("1");
        c.record(false).expect("2");
        assert!(matches!(
            c.record(false),
            Err(Trip::Ratio {
                invalid: 3,
                seen: 3,
                ..
            })
        ));
    }

    fn input(envelope: EnvelopeMode) -> InputConfig {
        InputConfig {
            envelope,
            job_id: JobIdFrom::Envelope,
            default_job_id: "unknown".into(),
            max_record_bytes: 64,
        }
    }

    #[test]
    fn what_cannot_be_decoded() {
        let mut s = Vec::new();
        let auto = input(EnvelopeMode::Auto);
        let text = input(EnvelopeMode::Text);
        let json = input(EnvelopeMode::Json);
        assert_eq!(classify(None, &auto, &mut s), Disposition::Skip);
        assert_eq!(classify(Some(b""), &auto, &mut s), Disposition::Skip);
        assert_eq!(
            classify(Some(b"\xff boom"), &auto, &mut s),
            Disposition::Scan
        );
        assert_eq!(
            classify(Some(&[b'x'; 64]), &auto, &mut s),
            Disposition::Scan,
            "exactly input.max_record_bytes"
        );
        assert_eq!(
            classify(Some(&[b'x'; 65]), &auto, &mut s),
            Disposition::Invalid(Invalid::TooLarge { bytes: 65, max: 64 })
        );
        assert_eq!(
            classify(Some(b"ok \xff"), &text, &mut s),
            Disposition::Invalid(Invalid::NotUtf8 { at: 3 })
        );
        assert_eq!(
            classify(Some(b"{\"log\":\"x\"}\n\n"), &json, &mut s),
            Disposition::Scan
        );
        let d = classify(Some(b"{\"log\":\"x\"}\nplain"), &json, &mut s);
        assert!(
            matches!(
                &d,
                Disposition::Invalid(Invalid::NotEnvelope { line: 2, .. })
            ),
            "{d:?}"
        );
        let d = classify(Some(b"{\"level\":1}"), &json, &mut s);
        assert!(matches!(&d, Disposition::Invalid(i) if i.code() == "not_an_envelope"));
    }

    #[test]
    fn the_job_comes_from_the_key_or_the_first_header_of_its_name() {
        let headers = [
            ("trace", Some(&b"t"[..])),
            ("job", Some(&b""[..])),
            ("job", Some(&b"second"[..])),
        ];
        let header = JobIdFrom::Header("job".into());
        assert_eq!(
            record_job(Some(b"k"), headers, &JobIdFrom::Key),
            Some(&b"k"[..])
        );
        assert_eq!(record_job(Some(b""), headers, &JobIdFrom::Envelope), None);
        assert_eq!(
            record_job(Some(b"k"), headers, &header),
            None,
            "the first is empty"
        );
        let mut s = Vec::new();
        let mut input = input(EnvelopeMode::Text);
        input.job_id = JobIdFrom::Header("trace".into());
        let d = decode_record(None, headers, Some(b"a\nb"), &input, &mut s);
        assert_eq!(
            d,
            Decoded {
                disposition: Disposition::Scan,
                job: Some(&b"t"[..]),
                lines: 2
            }
        );
        let d = decode_record(None, headers, Some(b"a\xff\n"), &input, &mut s);
        assert_eq!((d.lines, d.job), (0, Some(&b"t"[..])));
    }
}
