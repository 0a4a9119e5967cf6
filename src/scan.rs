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

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::sync::Arc;

use crate::engine::{Engine, Worker};
use crate::enrich::{Enricher, MatchEvent};
use crate::incident::{self, multiline, Correlator, IncidentConfig, IncidentEvent, Status};
use crate::matcher::Matcher;
use crate::record::Provenance;
use crate::redact::Redactor;
use crate::sink::stdout::{JobSummary, StdoutSink};
use crate::source::file::{self, ChunkReader, Input, InputError};

/// How to scan.
#[derive(Debug, Clone)]
pub struct ScanOptions {
    pub chunk_bytes: usize,
    pub max_line_bytes: usize,
    /// Print a summary per job after the matches.
    pub summary: bool,
    /// Show a progress bar on stderr (callers decide: a terminal and a large input).
    pub progress: bool,
    /// Correlate matches into incidents and print them before the summaries; `None`: off.
    pub incidents: Option<IncidentConfig>,
    /// Also print (and count) the `context` domain's block lines as matches.
    pub context_events: bool,
    /// Worker threads scanning chunks of one input in parallel; 1 scans on the calling thread.
    /// Output is identical whatever the number.
    pub threads: usize,
    /// Redacts secrets in events (the built-in rules by default); `None`: `--no-redact`.
    pub redactor: Option<Arc<Redactor>>,
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
            threads: 1,
            redactor: Some(Redactor::builtin()),
        }
    }
}

/// What a scan did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScanStats {
    pub inputs: u64,
    pub bytes: u64,
    pub lines: u64,
    pub matches: u64,
    pub truncated_lines: u64,
    /// Inputs that could not be read, with the reason.
    pub errors: Vec<String>,
}

/// Errors that stop a scan (unreadable inputs do not: they are counted in [`ScanStats`]).
#[derive(Debug, thiserror::Error)]
pub enum ScanError {
    #[error(transparent)]
    Match(#[from] crate::matcher::MatchError),
    #[error("writing output: {0}")]
    Output(io::Error),
    #[error(transparent)]
    Incident(#[from] incident::ConfigError),
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
    fn new(cfg: IncidentConfig) -> Result<Self, incident::ConfigError> {
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
    fn spill<W: Write>(&mut self, out: &mut StdoutSink<W>) -> io::Result<()> {
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
            if let Some(event) = self.latest.remove(&key) {
                out.incident(&event)?;
            }
        }
        self.resolved = 0;
        Ok(())
    }

    fn finish<W: Write>(mut self, out: &mut StdoutSink<W>) -> io::Result<()> {
        self.correlator.flush(&mut self.changes);
        self.absorb();
        for event in self.latest.values() {
            out.incident(event)?;
        }
        Ok(())
    }
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
    let enricher = Enricher::new(Arc::clone(&engine.kb)).with_redactor(opts.redactor.clone());
    let mut worker = engine.worker()?;
    let mut stats = ScanStats::default();
    let mut jobs: BTreeMap<String, JobSummary> = BTreeMap::new();
    let mut incidents = opts.incidents.clone().map(Incidents::new).transpose()?;
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
        stats.inputs += 1;
        if let Some(bar) = &progress {
            bar.set_message(input.name.clone());
        }
        let reader = match file::open(input) {
            Ok(r) => r,
            Err(e) => {
                stats.errors.push(
                    InputError {
                        name: input.name.clone(),
                        source: e,
                    }
                    .to_string(),
                );
                continue;
            }
        };
        let counted = Counted {
            inner: reader,
            bar: progress.clone(),
            bytes: 0,
        };
        let result = if opts.threads > 1 {
            scan_parallel(
                engine,
                &enricher,
                input,
                counted,
                opts,
                out,
                &mut jobs,
                &mut stats,
                &mut incidents,
                on_event,
            )
        } else {
            scan_one(
                engine,
                &enricher,
                &mut worker,
                input,
                counted,
                opts,
                out,
                &mut jobs,
                &mut stats,
                &mut incidents,
                on_event,
            )
        };
        match result {
            Ok(()) => {}
            Err(OneError::Read(e)) => {
                stats.errors.push(
                    InputError {
                        name: input.name.clone(),
                        source: e,
                    }
                    .to_string(),
                );
            }
            Err(OneError::Fatal(e)) => return Err(e),
        }
    }
    if let Some(bar) = progress {
        bar.finish_and_clear();
    }
    if let Some(incidents) = incidents {
        incidents.finish(out).map_err(ScanError::Output)?;
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

#[allow(clippy::too_many_arguments)]
fn scan_one<M: Matcher, W: Write, R: Read>(
    engine: &Engine<M>,
    enricher: &Enricher,
    worker: &mut Worker<M>,
    input: &Input,
    mut reader: Counted<R>,
    opts: &ScanOptions,
    out: &mut StdoutSink<W>,
    jobs: &mut BTreeMap<String, JobSummary>,
    stats: &mut ScanStats,
    incidents: &mut Option<Incidents>,
    on_event: &mut dyn FnMut(&MatchEvent),
) -> Result<(), OneError> {
    let mut chunks = ChunkReader::new(&mut reader, opts.chunk_bytes, opts.max_line_bytes);
    let mut write_error = None;
    loop {
        let chunk = match chunks.next_chunk() {
            Ok(Some(c)) => c,
            Ok(None) => break,
            Err(e) => {
                stats.truncated_lines += chunks.truncated_lines;
                return Err(OneError::Read(e));
            }
        };
        let lines = engine
            .scan_chunk(worker, chunk.data, chunk.info, &mut |hit| {
                if write_error.is_some() {
                    return;
                }
                let source = Provenance::File {
                    path: input.name.clone(),
                    line: hit.line,
                };
                let event = enricher.event(&hit, &input.job_id, source);
                if let Err(e) = emit(&event, opts, out, jobs, stats, incidents, on_event) {
                    write_error = Some(e);
                }
            })
            .map_err(|e| OneError::Fatal(e.into()))?;
        if let Some(e) = write_error.take() {
            return Err(OneError::Fatal(ScanError::Output(e)));
        }
        if let Some(incidents) = incidents.as_mut() {
            incidents
                .spill(out)
                .map_err(|e| OneError::Fatal(ScanError::Output(e)))?;
        }
        stats.lines += lines;
        chunks.advance_lines(lines);
    }
    stats.truncated_lines += chunks.truncated_lines;
    drop(chunks);
    stats.bytes += reader.bytes;
    Ok(())
}

/// Records what the writer does with each event, in input order, for either scan path.
#[allow(clippy::too_many_arguments)]
fn emit<W: Write>(
    event: &MatchEvent,
    opts: &ScanOptions,
    out: &mut StdoutSink<W>,
    jobs: &mut BTreeMap<String, JobSummary>,
    stats: &mut ScanStats,
    incidents: &mut Option<Incidents>,
    on_event: &mut dyn FnMut(&MatchEvent),
) -> io::Result<()> {
    if let Some(incidents) = incidents.as_mut() {
        incidents.observe(event);
    }
    if !opts.context_events && multiline::is_block_only(event) {
        return Ok(());
    }
    stats.matches += 1;
    jobs.entry(event.job_id.clone())
        .or_insert_with(|| JobSummary::new(&event.job_id))
        .add(event);
    on_event(event);
    out.event(event)
}

/// One chunk's results from a worker: events with line numbers relative to the chunk.
struct ChunkResult {
    seq: u64,
    lines: u64,
    events: Result<Vec<MatchEvent>, crate::matcher::MatchError>,
    buf: Vec<u8>,
}

/// Scans one input with `opts.threads` workers: a reader hands out owned chunks in sequence,
/// workers scan them, and this thread writes the results back in sequence, fixing up line
/// numbers. Queues are bounded, so memory stays at a few chunks per worker.
#[allow(clippy::too_many_arguments)]
fn scan_parallel<M: Matcher, W: Write, R: Read + Send>(
    engine: &Engine<M>,
    enricher: &Enricher,
    input: &Input,
    mut reader: Counted<R>,
    opts: &ScanOptions,
    out: &mut StdoutSink<W>,
    jobs: &mut BTreeMap<String, JobSummary>,
    stats: &mut ScanStats,
    incidents: &mut Option<Incidents>,
    on_event: &mut dyn FnMut(&MatchEvent),
) -> Result<(), OneError> {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::mpsc::{channel, sync_channel};
    use std::sync::Mutex;

    let threads = opts.threads;
    let (work_tx, work_rx) = sync_channel::<(u64, Vec<u8>, bool)>(threads * 2);
    let work_rx = Mutex::new(work_rx);
    let (done_tx, done_rx) = channel::<ChunkResult>();
    let (pool_tx, pool_rx) = channel::<Vec<u8>>();
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
                let mut buf = pool_rx.try_recv().unwrap_or_default();
                buf.clear();
                buf.extend_from_slice(chunk.data);
                if work_tx.send((seq, buf, chunk.info.truncated)).is_err() {
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
                let mut worker = engine.worker();
                loop {
                    let next = match work_rx.lock() {
                        Ok(rx) => rx.recv(),
                        Err(_) => break,
                    };
                    let Ok((seq, buf, truncated)) = next else {
                        break;
                    };
                    if stop.load(Ordering::Relaxed) {
                        continue;
                    }
                    let mut events = Vec::new();
                    let info = crate::engine::ChunkInfo {
                        first_line: 1,
                        truncated,
                    };
                    let result = match worker.as_mut() {
                        Ok(worker) => engine.scan_chunk(worker, &buf, info, &mut |hit| {
                            let source = Provenance::File {
                                path: input.name.clone(),
                                line: hit.line,
                            };
                            events.push(enricher.event(&hit, &input.job_id, source));
                        }),
                        Err(e) => Err(crate::matcher::MatchError::Scan {
                            engine: engine.matcher.name(),
                            message: e.to_string(),
                        }),
                    };
                    let (lines, events) = match result {
                        Ok(lines) => (lines, Ok(events)),
                        Err(e) => (0, Err(e)),
                    };
                    let _ = done_tx.send(ChunkResult {
                        seq,
                        lines,
                        events,
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
        let mut failure: Option<OneError> = None;
        'results: for result in done_rx.iter() {
            pending.insert(result.seq, result);
            while let Some(result) = pending.remove(&next) {
                next += 1;
                let events = match result.events {
                    Ok(events) => events,
                    Err(e) => {
                        failure = Some(OneError::Fatal(e.into()));
                        break 'results;
                    }
                };
                for mut event in events {
                    if let Provenance::File { line, .. } = &mut event.source {
                        *line += base_line;
                    }
                    if let Err(e) = emit(&event, opts, out, jobs, stats, incidents, on_event) {
                        failure = Some(OneError::Fatal(ScanError::Output(e)));
                        break 'results;
                    }
                }
                if let Some(incidents) = incidents.as_mut() {
                    if let Err(e) = incidents.spill(out) {
                        failure = Some(OneError::Fatal(ScanError::Output(e)));
                        break 'results;
                    }
                }
                base_line += result.lines;
                stats.lines += result.lines;
                let _ = pool_tx.send(result.buf);
            }
        }
        if let Some(e) = failure {
            stop.store(true, Ordering::Relaxed);
            return Err(e);
        }
        match reading.join() {
            Ok(Ok((bytes, truncated))) => {
                stats.bytes += bytes;
                stats.truncated_lines += truncated;
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
