//! `faultline scan`: files and stdin through the same engine as the Kafka pipeline.
//!
//! Flow: [`crate::source::file`] chunks -> [`Engine::scan_chunk`] -> [`Enricher::event`] ->
//! [`StdoutSink`] (and [`Correlator`]), then one incident object per incident, then one summary
//! per job.
//!
//! Block lines of the `context` KB domain (traceback frames, c10 frames, torchrun summary rows)
//! are folded into incidents and not printed, counted or passed to `on_event`, unless
//! [`ScanOptions::context_events`] asks for them. Incidents are printed in the order they
//! opened, each in its final state (resolved when its quiet period passed in log time before
//! the end of the input, else still open); to keep memory flat on huge inputs, resolved ones
//! are written early once more than the correlator's open-incident cap are waiting.
//!
//! Failure isolation: no input should make the engine panic (the fuzz targets in `fuzz/` hold
//! it to that), but if one does, the panic is caught per chunk, the chunk is scanned once more
//! with a fresh worker, and if that panics too its lines are skipped: the scan goes on with
//! the next chunk and the other inputs, and [`ScanStats::panics`] names the input and line range
//! (for `scan`, "dead-lettered" means reported on stderr and counted; the Kafka pipeline maps
//! it to its dead-letter topic). A chunk's events are emitted only once its scan has finished,
//! so a retry never duplicates an event.
//!
//! Unknown failures ([`crate::unknown`], on unless [`ScanOptions::unknown`] is `None`): each
//! worker also picks, per chunk, the lines that look like errors and hit no entry; the writer
//! mines them in input order into per-job templates and prints the `unknown` events among the
//! matches (JSON, or text with `--matches`), on the log's clock, so the output depends on the
//! input only. Text output lists each job's templates after the incidents, and an incident
//! whose root is unknown lists the templates seen near it ([`RecentUnknown`]).

use std::collections::BTreeMap;
use std::fmt;
use std::io::{self, Read, Write};
use std::sync::Arc;

use crate::engine::{ChunkInfo, Engine, Hit, Worker};
use crate::enrich::{job_of, Enricher, JobName, MatchEvent};
use crate::incident::unrecognised::RecentUnknown;
use crate::incident::{self, multiline, Correlator, IncidentConfig, IncidentEvent, Status};
use crate::isolation;
use crate::matcher::Matcher;
use crate::record::{line_count, LogRecord, Provenance};
use crate::redact::Redactor;
use crate::sink::stdout::{JobSummary, StdoutSink};
use crate::source::file::{self, ChunkReader, Input, InputError};
use crate::unknown::{
    unknown_text, FilterMemo, KeptLine, LiveMiner, UnknownConfig, UnknownLine, UnknownLines,
};

/// How to scan.
#[derive(Debug, Clone)]
pub struct ScanOptions {
    /// Size of one read buffer, and so of one matcher call (see [`ChunkReader`]).
    pub chunk_bytes: usize,
    /// Longest line scanned whole; longer lines are cut and marked truncated.
    pub max_line_bytes: usize,
    /// Print a summary per job after the matches.
    pub summary: bool,
    /// Show a progress bar on stderr (callers decide: a terminal and a large input).
    pub progress: bool,
    /// Correlate matches into incidents and print them before the summaries; `None`: off.
    pub incidents: Option<IncidentConfig>,
    /// Also print (and count) the `context` domain's block lines as matches.
    pub context_events: bool,
    /// Print each match (JSON, or `--matches` with text); off, matches are only counted and
    /// correlated.
    pub print_matches: bool,
    /// Worker threads scanning chunks of one input in parallel; 1 scans on the calling thread.
    /// Output is identical whatever the number.
    pub threads: usize,
    /// Redacts secrets in events (the built-in rules by default); `None`: `--no-redact`.
    pub redactor: Option<Arc<Redactor>>,
    /// Mine the error lines that no entry knows into `unknown` events (on by default);
    /// `None`: `--no-unknown`.
    pub unknown: Option<UnknownConfig>,
    /// How much of its entry's diagnosis each match carries: whole by default, by reference
    /// when the incidents printed after the matches carry it (`scan --diagnosis`).
    pub diagnosis: crate::enrich::Detail,
}

impl Default for ScanOptions {
    fn default() -> Self {
        ScanOptions {
            chunk_bytes: file::DEFAULT_CHUNK_BYTES,
            max_line_bytes: file::DEFAULT_MAX_LINE_BYTES,
            summary: true,
            progress: false,
            incidents: None,
            context_events: false,
            print_matches: true,
            threads: 1,
            redactor: Some(Redactor::builtin()),
            unknown: Some(UnknownConfig::default()),
            diagnosis: crate::enrich::Detail::Full,
        }
    }
}

/// What a scan did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScanStats {
    /// Inputs attempted, readable or not.
    pub inputs: u64,
    /// Bytes read, after decompression.
    pub bytes: u64,
    /// Lines read.
    pub lines: u64,
    /// Matches emitted (`context` block lines only with [`ScanOptions::context_events`]).
    pub matches: u64,
    /// Lines cut at [`ScanOptions::max_line_bytes`].
    pub truncated_lines: u64,
    /// Inputs that could not be read, with the reason.
    pub errors: Vec<String>,
    /// Chunks whose scan panicked, retried or skipped.
    pub panics: Vec<ChunkPanic>,
    /// Lines that look like errors and that no entry matched (mined into templates).
    pub unknown_lines: u64,
    /// `unknown` events (printed with JSON output or `--matches`).
    pub unknown_events: u64,
}

impl ScanStats {
    /// Chunks skipped after their retry panicked too: lines that were not scanned.
    pub fn skipped_chunks(&self) -> usize {
        self.panics.iter().filter(|p| p.skipped).count()
    }
}

/// A chunk whose scan panicked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkPanic {
    /// The input's name, as in output.
    pub input: String,
    /// First line of the chunk.
    pub first_line: u64,
    /// Last line of the chunk.
    pub last_line: u64,
    /// The panic's message, secrets redacted.
    pub message: String,
    /// The retry panicked too, so these lines were not scanned.
    pub skipped: bool,
}

impl fmt::Display for ChunkPanic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: lines {}-{}: scanning panicked ({}); ",
            self.input, self.first_line, self.last_line, self.message
        )?;
        if self.skipped {
            write!(f, "the retry panicked too: these lines were skipped")
        } else {
            write!(f, "the retry scanned them")
        }
    }
}

/// Errors that stop a scan (unreadable inputs do not: they are counted in [`ScanStats`]).
#[derive(Debug, thiserror::Error)]
pub enum ScanError {
    /// The engine failed to scan.
    #[error(transparent)]
    Match(#[from] crate::matcher::MatchError),
    /// Writing to the output failed.
    #[error("writing output: {0}")]
    Output(io::Error),
    /// The incident settings are inconsistent.
    #[error(transparent)]
    Incident(#[from] incident::IncidentConfigError),
}

/// The incidents of one scan: the correlator and the latest state of each incident.
struct Incidents {
    correlator: Correlator,
    changes: Vec<IncidentEvent>,
    latest: BTreeMap<u64, IncidentEvent>,
    resolved: usize,
    max_waiting: usize,
}

impl Incidents {
    fn new(cfg: IncidentConfig) -> Result<Self, incident::IncidentConfigError> {
        let max_waiting = cfg.max_open_incidents;
        Ok(Incidents {
            correlator: Correlator::new(cfg)?,
            changes: Vec::new(),
            latest: BTreeMap::new(),
            resolved: 0,
            max_waiting,
        })
    }

    fn observe(&mut self, event: &MatchEvent) {
        self.correlator.observe(event, &mut self.changes);
        self.absorb();
    }

    fn absorb(&mut self) {
        for change in self.changes.drain(..) {
            if change.status == Status::Resolved {
                self.resolved += 1;
            }
            self.latest.insert(change.serial, change);
        }
    }

    /// Writes the resolved incidents once too many wait.
    fn spill<W: Write>(
        &mut self,
        out: &mut StdoutSink<W>,
        recent: Option<&RecentUnknown>,
    ) -> io::Result<()> {
        if self.resolved <= self.max_waiting {
            return Ok(());
        }
        let done: Vec<u64> = self
            .latest
            .iter()
            .filter(|(_, e)| e.status == Status::Resolved)
            .map(|(k, _)| *k)
            .collect();
        for key in done {
            if let Some(mut event) = self.latest.remove(&key) {
                if let Some(r) = recent {
                    r.attach(&mut event);
                }
                out.incident(&event)?;
            }
        }
        self.resolved = 0;
        Ok(())
    }

    fn finish<W: Write>(
        mut self,
        out: &mut StdoutSink<W>,
        recent: Option<&RecentUnknown>,
    ) -> io::Result<()> {
        self.correlator.flush(&mut self.changes);
        self.absorb();
        for mut event in self.latest.into_values() {
            if let Some(r) = recent {
                r.attach(&mut event);
            }
            out.incident(&event)?;
        }
        Ok(())
    }
}

/// What every chunk of a scan shares, read-only (and shared by the parallel workers).
struct Chunks<'a, M: Matcher> {
    engine: &'a Engine<M>,
    enricher: Enricher,
    opts: &'a ScanOptions,
    /// Redacts panic messages (they may quote the input).
    redactor: Arc<Redactor>,
}

/// One worker's engine state, and whether it hands unmatched lines to the unknown finder.
struct Scanner<M: Matcher> {
    worker: Worker<M>,
    unknown: bool,
    memo: FilterMemo,
}

/// Where a scan's results go, in input order: the printer, the per-job summaries, the
/// statistics, the incidents, the unknown-line miners and the caller's callback.
struct Writer<'a, W: Write> {
    out: &'a mut StdoutSink<W>,
    opts: &'a ScanOptions,
    jobs: BTreeMap<String, JobSummary>,
    stats: ScanStats,
    incidents: Option<Incidents>,
    unknown: Option<LiveMiner>,
    /// Unknown templates per job, for incidents without a known root.
    recent: Option<RecentUnknown>,
    on_event: &'a mut dyn FnMut(&MatchEvent),
}

/// Scans `inputs` in order, writing every match to `out` and, at the end, the incidents (when
/// [`ScanOptions::incidents`] is set) and a summary per job. `on_event` sees each printed match.
pub fn scan_inputs<M: Matcher, W: Write>(
    engine: &Engine<M>,
    inputs: &[Input],
    opts: &ScanOptions,
    out: &mut StdoutSink<W>,
    on_event: &mut dyn FnMut(&MatchEvent),
) -> Result<ScanStats, ScanError> {
    let chunks = Chunks {
        engine,
        enricher: Enricher::new(Arc::clone(&engine.kb))
            .with_redactor(opts.redactor.clone())
            .with_detail(opts.diagnosis),
        opts,
        redactor: Redactor::builtin(),
    };
    let mut scanner = chunks.scanner()?;
    let unknown = opts.unknown.as_ref().filter(|u| u.enabled);
    let mut w = Writer {
        out,
        opts,
        jobs: BTreeMap::new(),
        stats: ScanStats::default(),
        incidents: opts.incidents.clone().map(Incidents::new).transpose()?,
        unknown: unknown.map(|u| LiveMiner::new(u, opts.redactor.clone())),
        recent: unknown
            .filter(|_| opts.incidents.is_some())
            .map(|u| RecentUnknown::new(u.max_jobs, opts.redactor.clone())),
        on_event,
    };
    let progress = opts.progress.then(|| {
        let total: u64 = inputs.iter().filter_map(|i| i.size).sum();
        let bar = indicatif::ProgressBar::new(total);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} {bytes}/{total_bytes} {bytes_per_sec} eta {eta} {wide_msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar
    });
    for input in inputs {
        w.stats.inputs += 1;
        if let Some(bar) = &progress {
            bar.set_message(input.name.clone());
        }
        let unreadable = |e: io::Error| {
            InputError {
                name: input.name.clone(),
                source: e,
            }
            .to_string()
        };
        let reader = match file::open(input) {
            Ok(r) => r,
            Err(e) => {
                w.stats.errors.push(unreadable(e));
                continue;
            }
        };
        let counted = Counted {
            inner: reader,
            bar: progress.clone(),
            bytes: 0,
        };
        let result = if opts.threads > 1 {
            scan_parallel(&chunks, input, counted, &mut w)
        } else {
            scan_one(&chunks, &mut scanner, input, counted, &mut w)
        };
        match result {
            Ok(()) => {}
            Err(OneError::Read(e)) => w.stats.errors.push(unreadable(e)),
            Err(OneError::Fatal(e)) => return Err(e),
        }
    }
    if let Some(bar) = progress {
        bar.finish_and_clear();
    }
    let Writer {
        out,
        jobs,
        mut stats,
        incidents,
        unknown,
        recent,
        ..
    } = w;
    if let Some(incidents) = incidents {
        incidents
            .finish(out, recent.as_ref())
            .map_err(ScanError::Output)?;
    }
    if let Some(live) = &unknown {
        stats.unknown_lines = live.stats().lines;
        out.unrecognised(&live.summary())
            .map_err(ScanError::Output)?;
    }
    if opts.summary {
        for summary in jobs.values() {
            out.summary(summary).map_err(ScanError::Output)?;
        }
    }
    out.flush().map_err(ScanError::Output)?;
    Ok(stats)
}

enum OneError {
    Read(io::Error),
    Fatal(ScanError),
}

impl From<io::Error> for OneError {
    /// An error writing the output (reading errors are mapped explicitly).
    fn from(e: io::Error) -> Self {
        OneError::Fatal(ScanError::Output(e))
    }
}

fn scan_one<M: Matcher, W: Write, R: Read>(
    c: &Chunks<'_, M>,
    scanner: &mut Scanner<M>,
    input: &Input,
    mut reader: Counted<R>,
    w: &mut Writer<'_, W>,
) -> Result<(), OneError> {
    let opts = c.opts;
    let mut chunks = ChunkReader::new(&mut reader, opts.chunk_bytes, opts.max_line_bytes);
    // One buffer for every chunk's unknown lines: emptied, never freed, between chunks.
    let mut unknown = UnknownLines::default();
    loop {
        let chunk = match chunks.next_chunk() {
            Ok(Some(c)) => c,
            Ok(None) => break,
            Err(e) => {
                w.stats.truncated_lines += chunks.truncated_lines;
                return Err(OneError::Read(e));
            }
        };
        let first_line = chunk.info.first_line;
        let scanned = c
            .scan_isolated(scanner, input, chunk.data, chunk.info, &mut unknown)
            .map_err(|e| OneError::Fatal(e.into()))?;
        let lines = scanned.lines;
        w.stats.note_panics(input, first_line, &scanned);
        w.emit_chunk(input, &scanned.events, &unknown)?;
        w.spill()?;
        w.stats.lines += lines;
        chunks.advance_lines(lines);
    }
    w.stats.truncated_lines += chunks.truncated_lines;
    drop(chunks);
    w.stats.bytes += reader.bytes;
    Ok(())
}

impl<W: Write> Writer<'_, W> {
    /// Records what the writer does with each event, in input order, for either scan path.
    fn emit(&mut self, event: &MatchEvent) -> io::Result<()> {
        if let Some(incidents) = self.incidents.as_mut() {
            incidents.observe(event);
        }
        if !self.opts.context_events && multiline::is_block_only(event) {
            return Ok(());
        }
        self.stats.matches += 1;
        self.jobs
            .entry(event.job_id.clone())
            .or_insert_with(|| JobSummary::new(&event.job_id))
            .add(event);
        (self.on_event)(event);
        if self.opts.print_matches {
            self.out.event(event)
        } else {
            Ok(())
        }
    }

    /// Writes resolved incidents early once too many wait.
    fn spill(&mut self) -> io::Result<()> {
        match self.incidents.as_mut() {
            Some(incidents) => incidents.spill(self.out, self.recent.as_ref()),
            None => Ok(()),
        }
    }

    /// A chunk's matches and unknown lines, merged in line order.
    fn emit_chunk(
        &mut self,
        input: &Input,
        events: &[MatchEvent],
        unknown: &UnknownLines,
    ) -> io::Result<()> {
        let mut pending = unknown.iter().peekable();
        for event in events {
            let at = match &event.source {
                Provenance::File { line, .. } => *line,
                Provenance::Kafka { .. } => u64::MAX,
            };
            while let Some(line) = pending.next_if(|l| l.line < at) {
                self.unknown_line(input, line)?;
            }
            self.emit(event)?;
        }
        for line in pending {
            self.unknown_line(input, line)?;
        }
        Ok(())
    }

    /// Mines one unknown line; prints its event when one is due.
    fn unknown_line(&mut self, input: &Input, l: KeptLine<'_>) -> io::Result<()> {
        let Some(live) = self.unknown.as_mut() else {
            return Ok(());
        };
        let name = if input.job_given {
            JobName::Given(&input.job_id)
        } else {
            JobName::Guessed(&input.job_id)
        };
        let (job, _) = job_of(l.meta, name);
        let line = UnknownLine {
            job_id: &job,
            message: l.message,
            meta: l.meta,
            truncated: l.truncated,
        };
        let seen = live.observe(&line, None);
        if let Some(recent) = self.recent.as_mut() {
            if let Some(s) = live.seen(&job, &seen) {
                recent.note(&s);
            }
        }
        if seen.emit.is_none() {
            return Ok(());
        }
        self.stats.unknown_events += 1;
        if !self.opts.print_matches {
            return Ok(());
        }
        let source = Provenance::File {
            path: input.name.clone(),
            line: l.line,
        };
        match live.event(&line, &seen, source) {
            Some(event) => self.out.unknown(&event),
            None => Ok(()),
        }
    }
}

/// What scanning one chunk gave.
struct ChunkScan {
    lines: u64,
    events: Vec<MatchEvent>,
    /// Panic messages: one when the retry succeeded, two when the chunk was skipped.
    panics: Vec<String>,
}

impl ScanStats {
    fn note_panics(&mut self, input: &Input, first_line: u64, scanned: &ChunkScan) {
        if let Some(message) = scanned.panics.first() {
            self.panics.push(ChunkPanic {
                input: input.name.clone(),
                first_line,
                last_line: first_line + scanned.lines.max(1) - 1,
                message: message.clone(),
                skipped: scanned.panics.len() > 1,
            });
        }
    }
}

impl<M: Matcher> Chunks<'_, M> {
    /// A worker's engine state (with an unknown-line finder when unknown events are on).
    fn scanner(&self) -> Result<Scanner<M>, crate::matcher::MatchError> {
        Ok(Scanner {
            worker: self.engine.worker()?,
            unknown: self.opts.unknown.as_ref().is_some_and(|u| u.enabled),
            memo: FilterMemo::default(),
        })
    }

    /// Scans one chunk into events, isolating a panic of the engine, the matcher or the
    /// enricher ([`crate::isolation::retry`]): the chunk is scanned once more with a fresh
    /// worker (its buffers and scratch may have been left mid-update), then skipped. The lines
    /// that look like errors and hit no entry go to `unknown` (emptied first), in line order.
    fn scan_isolated(
        &self,
        scanner: &mut Scanner<M>,
        input: &Input,
        data: &[u8],
        info: ChunkInfo,
        unknown: &mut UnknownLines,
    ) -> Result<ChunkScan, crate::matcher::MatchError> {
        let retried = isolation::retry(
            2,
            &self.redactor,
            scanner,
            |scanner| {
                let mut events = Vec::new();
                unknown.clear();
                let worker = &mut scanner.worker;
                let memo = &mut scanner.memo;
                let mut on_hit = |hit: Hit<'_>| {
                    let source = Provenance::File {
                        path: input.name.clone(),
                        line: hit.line,
                    };
                    let job = if input.job_given {
                        JobName::Given(&input.job_id)
                    } else {
                        JobName::Guessed(&input.job_id)
                    };
                    events.push(self.enricher.event_for(&hit, job, source));
                };
                let lines = if scanner.unknown {
                    let mut on_unmatched = |line: u64, record: &LogRecord<'_>| {
                        if let Some(text) = unknown_text(record, memo) {
                            unknown.push(line, &text, &record.meta, record.truncated);
                        }
                    };
                    let e = self.engine;
                    e.scan_chunk_with(worker, data, info, &mut on_hit, &mut on_unmatched)?
                } else {
                    self.engine.scan_chunk(worker, data, info, &mut on_hit)?
                };
                Ok((lines, events))
            },
            |scanner| {
                *scanner = self.scanner()?;
                Ok(())
            },
        )?;
        let (lines, events) = retried.value.unwrap_or_else(|| {
            unknown.clear();
            let lines = if info.truncated { 1 } else { line_count(data) };
            (lines, Vec::new())
        });
        Ok(ChunkScan {
            lines,
            events,
            panics: retried.panics,
        })
    }
}

/// One chunk's results from a worker: events with line numbers relative to the chunk.
struct ChunkResult {
    seq: u64,
    lines: u64,
    events: Result<Vec<MatchEvent>, crate::matcher::MatchError>,
    /// The chunk's unknown lines, when it scanned.
    unknown: UnknownLines,
    panics: Vec<String>,
    buf: Vec<u8>,
}

/// Scans one input with `opts.threads` workers: a reader hands out owned chunks in sequence,
/// workers scan them, and this thread writes the results back in sequence, fixing up line
/// numbers. Queues are bounded, so memory stays at a few chunks per worker.
fn scan_parallel<M: Matcher, W: Write, R: Read + Send>(
    c: &Chunks<'_, M>,
    input: &Input,
    mut reader: Counted<R>,
    w: &mut Writer<'_, W>,
) -> Result<(), OneError> {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::mpsc::{channel, sync_channel};
    use std::sync::Mutex;

    let opts = c.opts;
    let threads = opts.threads;
    // A work item: sequence number, the chunk, whether its line was cut, and a buffer for its
    // unknown lines; both buffers come back through the pool once written.
    let (work_tx, work_rx) = sync_channel::<(u64, Vec<u8>, bool, UnknownLines)>(threads * 2);
    let work_rx = Mutex::new(work_rx);
    let (done_tx, done_rx) = channel::<ChunkResult>();
    let (pool_tx, pool_rx) = channel::<(Vec<u8>, UnknownLines)>();
    // Set by the writer on a fatal error: the reader stops, the workers drain without working.
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let stop = &stop;
        let reading = scope.spawn(move || -> Result<(u64, u64), io::Error> {
            let mut chunks = ChunkReader::new(&mut reader, opts.chunk_bytes, opts.max_line_bytes);
            let mut seq = 0;
            while let Some(chunk) = chunks.next_chunk()? {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let (mut buf, unknown) = pool_rx.try_recv().unwrap_or_default();
                buf.clear();
                buf.extend_from_slice(chunk.data);
                if work_tx
                    .send((seq, buf, chunk.info.truncated, unknown))
                    .is_err()
                {
                    break;
                }
                seq += 1;
            }
            let truncated = chunks.truncated_lines;
            drop(chunks);
            Ok((reader.bytes, truncated))
        });
        for _ in 0..threads {
            let done_tx = done_tx.clone();
            let work_rx = &work_rx;
            scope.spawn(move || {
                let mut worker = c.scanner();
                loop {
                    let next = match work_rx.lock() {
                        Ok(rx) => rx.recv(),
                        Err(_) => break,
                    };
                    let Ok((seq, buf, truncated, mut unknown)) = next else {
                        break;
                    };
                    if stop.load(Ordering::Relaxed) {
                        continue;
                    }
                    let info = ChunkInfo {
                        first_line: 1,
                        truncated,
                    };
                    let result = match worker.as_mut() {
                        Ok(worker) => c.scan_isolated(worker, input, &buf, info, &mut unknown),
                        Err(e) => Err(crate::matcher::MatchError::Scan {
                            engine: c.engine.matcher.name(),
                            message: e.to_string(),
                        }),
                    };
                    let (lines, events, panics) = match result {
                        Ok(s) => (s.lines, Ok(s.events), s.panics),
                        Err(e) => (0, Err(e), Vec::new()),
                    };
                    let _ = done_tx.send(ChunkResult {
                        seq,
                        lines,
                        events,
                        unknown,
                        panics,
                        buf,
                    });
                }
            });
        }
        drop(done_tx);

        // The writer: results back in sequence order.
        let mut pending: BTreeMap<u64, ChunkResult> = BTreeMap::new();
        let mut next = 0u64;
        let mut base_line = 0u64;
        let mut write = |result: ChunkResult, base_line: u64| -> Result<(), OneError> {
            let mut events = result.events.map_err(|e| OneError::Fatal(e.into()))?;
            let mut unknown = result.unknown;
            let scanned = ChunkScan {
                lines: result.lines,
                events: Vec::new(),
                panics: result.panics,
            };
            w.stats.note_panics(input, base_line + 1, &scanned);
            for event in &mut events {
                if let Provenance::File { line, .. } = &mut event.source {
                    *line += base_line;
                }
            }
            unknown.offset_lines(base_line);
            w.emit_chunk(input, &events, &unknown)?;
            w.spill()?;
            w.stats.lines += result.lines;
            let _ = pool_tx.send((result.buf, unknown));
            Ok(())
        };
        let mut failure: Option<OneError> = None;
        'results: for result in done_rx.iter() {
            pending.insert(result.seq, result);
            while let Some(result) = pending.remove(&next) {
                next += 1;
                let lines = result.lines;
                if let Err(e) = write(result, base_line) {
                    failure = Some(e);
                    break 'results;
                }
                base_line += lines;
            }
        }
        if let Some(e) = failure {
            stop.store(true, Ordering::Relaxed);
            return Err(e);
        }
        match reading.join() {
            Ok(Ok((bytes, truncated))) => {
                w.stats.bytes += bytes;
                w.stats.truncated_lines += truncated;
                Ok(())
            }
            Ok(Err(e)) => Err(OneError::Read(e)),
            Err(_) => Err(OneError::Fatal(ScanError::Output(io::Error::other(
                "the reader thread panicked",
            )))),
        }
    })
}

/// Counts bytes read (after decompression) and moves the progress bar.
struct Counted<R> {
    inner: R,
    bar: Option<indicatif::ProgressBar>,
    bytes: u64,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.bytes += n as u64;
        if let Some(bar) = &self.bar {
            bar.inc(n as u64);
        }
        Ok(n)
    }
}
