//! The match stage of `faultline run`: decode each record of a batch, scan the batch in one
//! Hyperscan pass, enrich the hits, feed the incident stage, produce the events and dead
//! letters, and resolve each record in the offset tracker.
//!
//! Failure isolation ([`crate::isolation`]): no record should make the matcher panic (the fuzz
//! targets hold decoding, scanning and multiline assembly to that), but if one does, the panic
//! is caught around the batch, counted (`faultline_panics_total{stage="match"}`), and the
//! batch is processed once more with a fresh worker; if that panics too, record by record, and
//! the records that panic alone go to the dead-letter topic (reason `panic`). No record is
//! lost or skipped silently and the partition keeps flowing. What no panic handler catches (an
//! abort in native code, an OOM kill, a stack overflow) kills the process; with
//! `pipeline.state_dir` set, [`super::quarantine`]'s crash notes find the record across restarts
//! and it is dead-lettered (reason `crashed_process`).
//!
//! Metrics across a panic: a batch is counted locally and published once, at its end; a panic
//! drops what the attempt counted, then counts again exactly what it finished (the records whose
//! outputs went out, the events that went out), so every record is counted once whichever
//! attempt finishes it, and the panic itself once (`faultline_panics_total`).
//!
//! Decision: the guard covers the sends too, unlike `scan`, which guards only the computation
//! and writes afterwards. A batch's events are serialised and handed to the producer one at a
//! time through one reused buffer, so memory stays at one event per batch whatever the match
//! count; guarding only the computation would mean holding every serialised event of a batch
//! first. The price is [`Progress`]: the guard records how far the outputs went, so that a
//! panic after a send resolves what went out instead of sending it twice.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::config::{InputConfig, InvalidLimits, JobIdFrom};
use super::decode::{decode_record, header_pairs, record_job, Disposition, InvalidCounter, Span};
use super::faults::{FaultInjection, FaultPoint};
use super::quarantine::{Quarantine, Step};
use super::settings::Config;
use super::unknown::{BatchView, SendTo, UnknownStage};
use super::{incidents, PipelineError, Stop};
use crate::engine::{Engine, Hit, JsonLines, Worker};
use crate::enrich::MatchEvent;
use crate::matcher::{HyperscanMatcher, MatchError};
use crate::metrics::{DeadLetterReason, PanicStage};
use crate::record::{LogRecord, Provenance};
use crate::redact::Redactor;
use crate::reload::Loaded;
use crate::runtime::queue;
use crate::runtime::Health;
use crate::sink::kafka::KafkaSink;
use crate::source::kafka::{forget, Batch, SourceRecord};
use crate::unknown::UnknownConfig;

/// The settings the match stage reads, and nothing else of the configuration: `[input]`,
/// `[unknown]`, the invalid-record limits of `[dead_letter]`, and how long a stop waits for the
/// sink (`kafka.drain_timeout_ms`).
#[derive(Debug, Clone)]
pub(super) struct MatchSettings {
    pub(super) input: InputConfig,
    pub(super) unknown: UnknownConfig,
    pub(super) invalid: InvalidLimits,
    pub(super) drain_timeout: Duration,
    /// How much of the diagnosis each event carries (`output.diagnosis`).
    pub(super) diagnosis: crate::enrich::Detail,
}

impl MatchSettings {
    /// The match stage's part of `config`.
    pub(super) fn of(config: &Config) -> Self {
        MatchSettings {
            input: config.input.clone(),
            unknown: config.unknown.clone(),
            invalid: config.dead_letter.limits,
            drain_timeout: config.kafka.drain_timeout,
            diagnosis: config.output.diagnosis,
        }
    }
}

/// What the match stage is built from ([`MatchStage::new`]).
pub(super) struct StageParts {
    pub(super) settings: MatchSettings,
    pub(super) sink: Arc<KafkaSink>,
    pub(super) health: Arc<Health>,
    pub(super) stop: Arc<Stop>,
    pub(super) kb: watch::Receiver<Arc<Loaded>>,
    pub(super) loaded: Arc<Loaded>,
    pub(super) metrics: Arc<crate::metrics::Metrics>,
    pub(super) tracer: Option<crate::telemetry::MatchTracer>,
    pub(super) redactor: Option<Arc<Redactor>>,
    pub(super) faults: Option<FaultInjection>,
    pub(super) incidents: Option<incidents::IncidentStage>,
    pub(super) quarantine: Option<Quarantine>,
    pub(super) partitioner: Option<super::shard::EventPartitioner>,
}

/// The matching stage: decode, scan, enrich, produce; resolve each record in the tracker.
/// How often [`MatchStage::trim_now_and_then`] may walk glibc's heaps (a few milliseconds each).
const TRIM_EVERY: Duration = Duration::from_secs(20);

pub(super) struct MatchStage {
    settings: MatchSettings,
    sink: Arc<KafkaSink>,
    health: Arc<Health>,
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
    /// The batch's lines decoded while classifying its records (`input.envelope = json`).
    decoded: JsonLines,
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
    /// Correlation, the incidents topic and the webhook, when `[incidents]` is configured and
    /// this process correlates.
    incidents: Option<incidents::IncidentStage>,
    /// Unknown error lines -> templates -> `unknown` events, unless `[unknown]` is off.
    unknown: Option<UnknownStage>,
    /// The crash notes, when `pipeline.state_dir` is set.
    quarantine: Option<Quarantine>,
    /// Role `match`: the correlator shard of each event ([`super::shard`]).
    partitioner: Option<super::shard::EventPartitioner>,
    /// How far each input partition was read, told to the correlator ([`super::progress`]).
    noter: super::progress::Noter,
    /// When freed memory was last handed back to the system ([`MatchStage::trim_now_and_then`]).
    last_trim: Instant,
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

impl MatchStage {
    pub(super) fn new(mut p: StageParts) -> Result<Self, MatchError> {
        let unknown = UnknownStage::new(&p.settings.unknown, p.redactor.clone(), &p.metrics);
        if let (Some(u), Some(inc)) = (&unknown, p.incidents.as_mut()) {
            inc.track_unknown(u.recent());
        }
        Ok(MatchStage {
            counter: InvalidCounter::new(p.settings.invalid),
            worker: p.loaded.engine.worker()?,
            enricher: p
                .loaded
                .enricher
                .clone()
                .with_redactor(p.redactor.clone())
                .with_detail(p.settings.diagnosis),
            counts: p.metrics.batch(),
            settings: p.settings,
            sink: p.sink,
            health: p.health,
            stop: p.stop,
            kb: p.kb,
            loaded: p.loaded,
            buf: Vec::new(),
            spans: Vec::new(),
            events: Vec::new(),
            dispositions: Vec::new(),
            outputs: Vec::new(),
            json: Vec::new(),
            decoded: JsonLines::default(),
            metrics: p.metrics,
            tracer: p.tracer,
            redactor: p.redactor,
            progress: Progress::default(),
            faults: p.faults,
            incidents: p.incidents,
            unknown,
            quarantine: p.quarantine,
            partitioner: p.partitioner,
            noter: super::progress::Noter::default(),
            last_trim: Instant::now(),
        })
    }

    pub(super) fn run(mut self, rx: queue::Receiver<Batch>) {
        let mut next = None;
        loop {
            let received = match next.take() {
                Some(b) => Ok(b),
                None => rx.recv_timeout(Duration::from_millis(100)),
            };
            let batch = match received {
                Ok(b) => b,
                Err(queue::RecvError::Timeout) => {
                    if let Some(e) = self.sink.failure() {
                        self.stop.fail(e.into());
                    }
                    if let Some(incidents) = self.incidents.as_mut() {
                        incidents.tick(self.health.input_current());
                    }
                    self.trim_now_and_then();
                    continue;
                }
                Err(queue::RecvError::Closed) => {
                    if let Some(incidents) = self.incidents.as_mut() {
                        incidents.flush_open();
                    }
                    break;
                }
            };
            if self.stop.failed() {
                forget(&self.health.tracker, &batch.records);
                continue;
            }
            if let Err(e) = self.refresh_kb() {
                forget(&self.health.tracker, &batch.records);
                self.stop.fail(e.into());
                continue;
            }
            if let Err(e) = self.process_noted(&batch) {
                self.stop.fail(e);
            }
            if let Some(incidents) = self.incidents.as_mut() {
                incidents.tick(self.health.input_current());
            }
            self.trim_now_and_then();
            if let Some(q) = self.quarantine.as_mut() {
                // Going idle clears the crash note; with a batch waiting, its note replaces it.
                match rx.recv_timeout(Duration::ZERO) {
                    Ok(b) => next = Some(b),
                    Err(queue::RecvError::Timeout) => q.idle(),
                    Err(queue::RecvError::Closed) => {
                        q.idle();
                        break;
                    }
                }
            }
        }
        if let Err(e) = self.sink.flush(self.settings.drain_timeout) {
            tracing::warn!(error = %e, "flushing the producer");
        }
    }

    /// Takes the newest KB, if a reload published one: between batches only.
    fn refresh_kb(&mut self) -> Result<(), MatchError> {
        if self.kb.has_changed().unwrap_or(false) {
            let next = Arc::clone(&self.kb.borrow_and_update());
            self.worker = next.engine.worker()?;
            self.enricher = next
                .enricher
                .clone()
                .with_redactor(self.redactor.clone())
                .with_detail(self.settings.diagnosis);
            self.metrics.set_kb(&next.engine.kb);
            tracing::info!(kb_version = %next.version(), "matching with the reloaded knowledge base");
            self.loaded = next;
            // The old KB's engine and regexes were freed just now (this stage held the last
            // reference): hand their pages back rather than keep them resident.
            crate::runtime::memory::release_free_memory();
            self.last_trim = Instant::now();
        }
        Ok(())
    }

    /// Hands freed memory back to the system at most once per [`TRIM_EVERY`]. A catch-up after a
    /// rebalance, a member's death or a broker outage frees tens of MiB of batches and fetch
    /// buffers in the middle of glibc's heaps, which stay resident until something trims them:
    /// in 2-minute soaks the member's RSS after warm-up was 59-86 MiB when three KB reloads
    /// trimmed and 303-337 MiB when only one did.
    fn trim_now_and_then(&mut self) {
        if self.last_trim.elapsed() >= TRIM_EVERY {
            crate::runtime::memory::release_free_memory();
            self.last_trim = Instant::now();
        }
    }

    /// [`MatchStage::process_isolated`] under the crash notes: each step's records are noted
    /// before they are matched, suspect records are matched alone, and a record that crashed
    /// the process alone is dead-lettered without being matched ([`super::quarantine`]).
    fn process_noted(&mut self, batch: &Batch) -> Result<(), PipelineError> {
        let Some(steps) = self.quarantine.as_ref().map(|q| q.plan(&batch.records)) else {
            return self.process_isolated(batch, &batch.records);
        };
        for step in steps {
            let (range, dead) = match step {
                Step::Run(r) => (r, None),
                Step::One(i) => (i..i + 1, None),
                Step::DeadLetter { index, crashes } => (index..index + 1, Some(crashes)),
            };
            let records = &batch.records[range.clone()];
            let done = match dead {
                Some(crashes) => {
                    let r = &records[0];
                    tracing::error!(source = %r.id.tp, offset = r.id.offset, crashes,
                        "matching this record killed the process (an abort, an OOM kill or a \
                         stack overflow: a bug, please report it); dead-lettering it unmatched");
                    self.health.records.fetch_add(1, Ordering::Relaxed);
                    let why = format!(
                        "matching the record killed the process {crashes} times (crash notes)"
                    );
                    self.dead_letter(batch, r, 0, DeadLetterReason::CrashedProcess, &why)
                }
                None => {
                    if let Some(q) = self.quarantine.as_mut() {
                        q.matching(records);
                    }
                    self.process_isolated(batch, records)
                }
            };
            if let Err(e) = done {
                forget(&self.health.tracker, &batch.records[range.end..]);
                return Err(e);
            }
        }
        if let Some(q) = self.quarantine.as_mut() {
            q.done(&batch.records);
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
    fn process_isolated(
        &mut self,
        batch: &Batch,
        records: &[SourceRecord],
    ) -> Result<(), PipelineError> {
        let mut rest = records;
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
                    forget(&self.health.tracker, &rest[i + 1..]);
                    return Err(e);
                }
                Attempt::Panicked(message) => {
                    tracing::error!(source = %r.id.tp, offset = r.id.offset, error = %message,
                        "processing a record panicked (a bug: please report it); dead-lettering it");
                    if !self.progress.emitting {
                        self.health.records.fetch_add(1, Ordering::Relaxed);
                        // Consumed, not scanned: no bytes, as for `health.bytes`.
                        self.counts.consumed(1, 0);
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
            self.health.records.load(Ordering::Relaxed),
            self.health.bytes.load(Ordering::Relaxed),
        );
        let redactor = self.redactor.clone().unwrap_or_else(Redactor::builtin);
        let result = crate::isolation::catch(&redactor, || self.process(batch, records));
        let message = match result {
            Ok(done) => return Attempt::Done(done),
            Err(message) => message,
        };
        self.metrics.panicked(PanicStage::Match);
        // Only this thread writes these counts: the batch's are taken back, and counted again
        // by whatever processes its records next.
        self.health.records.store(consumed.0, Ordering::Relaxed);
        self.health.bytes.store(consumed.1, Ordering::Relaxed);
        self.counter = counter;
        self.recount(batch, records);
        match self.loaded.engine.worker() {
            Ok(w) => self.worker = w,
            Err(e) => {
                // Stopping: the batch is read again after a restart.
                forget(&self.health.tracker, records);
                return Attempt::Done(Err(e.into()));
            }
        }
        self.buf = Vec::new();
        self.spans = Vec::new();
        self.events = Vec::new();
        self.decoded = JsonLines::default();
        self.json = Vec::new();
        Attempt::Panicked(message)
    }

    /// After a panic in [`MatchStage::attempt`], the metric counts of `records`: what the attempt
    /// counted is dropped and what it finished is counted again (published at once), so that
    /// the records retried are counted by their retry only. Finished: with the outputs all
    /// resolved, every record as counted; while outputs were going out, the records before the
    /// one being emitted (consumed, lines, matches, decode dead letters), and that one
    /// (consumed, lines, the events that went out; [`MatchStage::recover`] dead-letters it).
    /// Nothing out yet: nothing.
    fn recount(&mut self, batch: &Batch, records: &[SourceRecord]) {
        let p = self.progress;
        if p.resolved {
            self.metrics.flush(&mut self.counts);
            return;
        }
        self.counts = self.metrics.batch();
        if !p.emitting {
            return;
        }
        let k = self.outputs.len().min(records.len());
        let upto = (k + 1).min(records.len());
        for d in self.dispositions.iter().take(k) {
            if let Disposition::Invalid(why) = d {
                self.counts.dead_lettered(why.reason());
            }
        }
        let (mut bytes, mut lines) = (0, 0);
        for s in self.spans.iter().filter(|s| s.record < upto) {
            bytes += batch.payload(&records[s.record]).map_or(0, <[u8]>::len) as u64;
            lines += s.lines;
        }
        self.counts.consumed(upto as u64, bytes);
        self.counts.scanned(lines);
        let mut sent_of_k = 0;
        for (i, event) in &self.events {
            if *i < k || (*i == k && sent_of_k < p.partial) {
                if *i == k {
                    sent_of_k += 1;
                }
                self.counts.matched(event);
            }
        }
        self.metrics.flush(&mut self.counts);
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
        self.health
            .tracker
            .resolve_many(done.zip(self.outputs.iter().copied()));
        // Count what is done once, as `process` would have.
        let upto = (k + 1).min(records.len());
        for (r, d) in records[..upto].iter().zip(&self.dispositions) {
            self.health.records.fetch_add(1, Ordering::Relaxed);
            match d {
                Disposition::Invalid(_) => {
                    let _ = self.counter.record(false);
                }
                Disposition::Scan => {
                    let _ = self.counter.record(true);
                    let bytes = batch.payload(r).map_or(0, <[u8]>::len) as u64;
                    self.health.bytes.fetch_add(bytes, Ordering::Relaxed);
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
        let error = format!("processing the record panicked: {message}");
        self.dead_letter(batch, r, sent, DeadLetterReason::Panic, &error)
    }

    /// Sends `r` to the dead-letter topic (stage `match`) for `reason`, and resolves it with its
    /// `sent` outputs plus the dead letter.
    fn dead_letter(
        &mut self,
        batch: &Batch,
        r: &SourceRecord,
        sent: u32,
        reason: DeadLetterReason,
        error: &str,
    ) -> Result<(), PipelineError> {
        self.counts.dead_lettered(reason);
        self.metrics.flush(&mut self.counts);
        let kb_version = self.loaded.version().to_string();
        if let Err(e) = self.sink.send_dead_letter(
            batch.view(r),
            reason.as_str(),
            "match",
            error,
            &kb_version,
            &self.stop,
        ) {
            self.health.tracker.resolve(&r.id, sent);
            forget(&self.health.tracker, std::slice::from_ref(r));
            return Err(e.into());
        }
        self.health.tracker.resolve(&r.id, sent + 1);
        Ok(())
    }

    /// Processes `records`, records of `batch` (all of them, or a part when isolating a panic):
    /// decode, scan (with the unknown-line finder), correlate, emit, resolve.
    fn process(&mut self, batch: &Batch, records: &[SourceRecord]) -> Result<(), PipelineError> {
        let tracker = Arc::clone(&self.health.tracker);
        let tripped = self.decode(batch, records)?;
        if !self.buf.is_empty() {
            let scan_started = std::time::Instant::now();
            self.scan(batch, records)?;
            self.counts.scan_time(scan_started.elapsed());
        }
        // Incidents before any record is resolved: their holds must precede the watermark.
        if let Some(incidents) = self.incidents.as_mut() {
            incidents.observe(records, &self.events);
        }
        // Outputs are sent first and the records resolved together after (acks arriving before
        // their record is resolved are counted): one tracker lock per batch, not per record.
        let kb_version = self.loaded.version().to_string();
        self.outputs.clear();
        self.progress.emitting = true;
        let (mut before, mut noted) = self.note_progress(batch, records, None);
        self.progress.partial += before;
        let mut e = 0;
        for i in 0..self.dispositions.len() {
            let (mut outputs, mut sent) = match noted {
                Ok(()) => self.emit(batch, records, i, &mut e, &kb_version)?,
                Err(err) => (0, Err(err)),
            };
            (outputs, noted) = (outputs + std::mem::take(&mut before), Ok(()));
            if sent.is_ok() {
                let (n, noted) = self.note_progress(batch, records, Some(i));
                self.progress.partial += n;
                (outputs, sent) = (outputs + n, noted);
            }
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
        if let Some(u) = self.unknown.as_mut() {
            u.publish();
        }
        if let Some((i, limit)) = tripped {
            forget(&tracker, &records[i..]);
            return Err(limit.into());
        }
        Ok(())
    }

    /// Sends the progress notes ([`super::progress`]) due before the batch (`i` none) or after `i`.
    fn note_progress(
        &mut self,
        batch: &Batch,
        records: &[SourceRecord],
        i: Option<usize>,
    ) -> (u32, Result<(), crate::sink::kafka::SinkError>) {
        let to = super::progress::Target::of(
            self.incidents.as_mut(),
            self.partitioner.as_ref(),
            &self.sink,
            &self.stop,
        );
        let dispositions = &self.dispositions;
        let scanned = |k: usize| matches!(dispositions[k], Disposition::Scan);
        self.noter
            .notes(batch, records, scanned, i, &self.health, to)
    }

    /// Decodes `records` into the scan buffer (their spans of lines) and their dispositions,
    /// counting them; returns where the invalid-record limit tripped, if it did.
    fn decode(
        &mut self,
        batch: &Batch,
        records: &[SourceRecord],
    ) -> Result<Option<(usize, super::decode::LimitExceeded)>, PipelineError> {
        self.buf.clear();
        self.decoded.clear();
        self.spans.clear();
        self.events.clear();
        self.dispositions.clear();
        if let Some(u) = self.unknown.as_mut() {
            u.begin();
        }
        let mut tripped = None;
        let mut line = 1u64;
        let mut bytes = 0u64;
        for (i, r) in records.iter().enumerate() {
            let view = batch.view(r);
            let decoded = decode_record(
                view.key,
                header_pairs(view),
                view.payload,
                &self.settings.input,
                &mut self.decoded,
                self.buf.len(),
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
                        lines: decoded.lines,
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
        self.health
            .records
            .fetch_add(self.dispositions.len() as u64, Ordering::Relaxed);
        self.health.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.counts.consumed(self.dispositions.len() as u64, bytes);
        self.counts.scanned(line - 1);
        if let Some(f) = &self.faults {
            for r in records {
                f.strike(FaultPoint::Scan, batch.payload(r))?;
                f.strike(FaultPoint::Abort, batch.payload(r))?;
                f.strike(FaultPoint::Fail, batch.payload(r))?;
            }
        }
        Ok(tripped)
    }

    /// One Hyperscan pass over the buffer: each hit enriched into an event of its record (the
    /// job from the key or header when configured); with `[unknown]` on, the lines no entry
    /// matched go to the unknown stage from the same pass.
    fn scan(&mut self, batch: &Batch, records: &[SourceRecord]) -> Result<(), PipelineError> {
        let Self {
            loaded,
            worker,
            spans,
            events,
            buf,
            settings,
            counts,
            tracer,
            enricher,
            unknown,
            incidents,
            decoded,
            ..
        } = self;
        let job_from = &settings.input.job_id;
        let default_job = &settings.input.default_job_id;
        let spans = &spans[..];
        let mut on_hit = |hit: Hit<'_>| {
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
            let job = record_job(r.key, header_pairs(r), job_from).map(String::from_utf8_lossy);
            let name = super::decode::job_name(job.as_deref(), job_from, default_job);
            let mut event = enricher.event_for(&hit, name, source);
            if let (Some(job), JobIdFrom::Key | JobIdFrom::Header(_)) = (&job, job_from) {
                // The key or header names the job: it wins over the envelope's.
                event.job_id = crate::record::cap_key(job).into_owned();
                event.scope = crate::enrich::Scope::Job;
            }
            counts.matched(&event);
            if let Some(tracer) = tracer {
                tracer.record(&event);
            }
            events.push((span.record, event));
        };
        let engine = &loaded.engine;
        let before = Engine::json_lines_decoded(worker);
        match unknown.as_mut() {
            None => engine.scan_batch(worker, buf, decoded, &mut on_hit, None)?,
            Some(u) => {
                let view = BatchView {
                    spans,
                    batch,
                    records,
                    input: &settings.input,
                };
                let mut on_unmatched = |line: u64, record: &LogRecord<'_>| {
                    u.unmatched(&view, line, record, incidents.as_mut());
                };
                let on_unmatched: &mut dyn FnMut(u64, &LogRecord<'_>) = &mut on_unmatched;
                engine.scan_batch(worker, buf, decoded, &mut on_hit, Some(on_unmatched))?;
            }
        }
        // Each line decoded once: by the classification (`input.envelope = json`) or the scan.
        counts.json_decoded(decoded.parsed() + Engine::json_lines_decoded(worker) - before);
        Ok(())
    }

    /// Sends record `i`'s outputs per its disposition (a dead letter, or its events from
    /// `events[*e..]` and its unknown-line events); returns how many were sent and the first
    /// send error.
    fn emit(
        &mut self,
        batch: &Batch,
        records: &[SourceRecord],
        i: usize,
        e: &mut usize,
        kb_version: &str,
    ) -> Result<(u32, Result<(), crate::sink::kafka::SinkError>), PipelineError> {
        let r = &records[i];
        match &self.dispositions[i] {
            Disposition::Skip => Ok((0, Ok(()))),
            Disposition::Invalid(why) => {
                self.health.invalid.fetch_add(1, Ordering::Relaxed);
                self.counts.dead_lettered(why.reason());
                tracing::warn!(source = %r.id.tp, offset = r.id.offset, reason = why.code(),
                    error = %why, "dead-lettering an undecodable record");
                let sent = self.sink.send_dead_letter(
                    batch.view(r),
                    why.code(),
                    "decode",
                    &why.to_string(),
                    kb_version,
                    &self.stop,
                );
                Ok((1, sent))
            }
            Disposition::Scan => {
                let start = *e;
                while *e < self.events.len() && self.events[*e].0 == i {
                    *e += 1;
                }
                let mut result = Ok(());
                for (_, event) in &self.events[start..*e] {
                    self.json.clear();
                    if let Err(err) = serde_json::to_writer(&mut self.json, event) {
                        // Serialising plain data cannot fail; never drop an event silently.
                        tracing::error!(error = %err, "serialising an event");
                    }
                    let partition = self.partitioner.as_ref().map(|p| p.partition(event));
                    result = self.sink.send_event(
                        &r.id,
                        event.job_id.as_bytes(),
                        &self.json,
                        partition,
                        &self.stop,
                    );
                    if result.is_err() {
                        break;
                    }
                    self.health.events_sent.fetch_add(1, Ordering::Relaxed);
                    self.progress.partial += 1;
                    if let Some(f) = &self.faults {
                        f.strike(FaultPoint::AfterSend, batch.payload(r))?;
                    }
                }
                let mut sent = (*e - start) as u32;
                if let (Ok(()), Some(u)) = (&result, self.unknown.as_mut()) {
                    let to = SendTo {
                        sink: &self.sink,
                        stop: &self.stop,
                        health: &self.health,
                        partitioner: self.partitioner.as_ref(),
                    };
                    let (n, unknown_sent) = u.send(i, &r.id, &to, &mut self.progress.partial);
                    sent += n;
                    result = unknown_sent;
                }
                Ok((sent, result))
            }
        }
    }
}
