//! The delivery worker: one thread and one bounded queue per incident output
//! ([`crate::sink::output`]), the same for every output.
//!
//! ```text
//!  IncidentStage::emit ── wants? ──▶ OutputQueue::offer ── bounded queue ──▶ worker thread
//!                                      │ full: dropped (counted, logged)        │ deliver / tick
//!                                      ▼                                        ▼
//!                               release done                 dead letters ──▶ dead-letter topic
//!                                                            release done after delivery (or
//!                                                            after its dead letter's ack)
//! ```
//!
//! What the worker guarantees for every output:
//! - **Never blocks the matcher**: [`OutputQueue::offer`] does not wait; a full queue drops the
//!   change, counted in `faultline_output_changes_total{output, result="dropped"}` and logged at
//!   most once a second (a resolution always, at ERROR: its receiver keeps the item open until
//!   the incident's next change).
//! - **Commit holds**: a resolution's [`Release`] counts one party per output that wants the
//!   change (the stage asks [`OutputQueue::wants`] before it builds the release, so a new output
//!   cannot be forgotten); the worker marks its party done once the output handled the change,
//!   or once the dead letter of a change it gave up on is acknowledged, or at once when the
//!   change is dropped.
//! - **Shutdown**: changes still queued after a stop request are abandoned (counted): their
//!   incidents are still held, so the restarted service hands them over again.
//! - **Dead letters**: what an output gives up on is produced to the dead-letter topic with its
//!   reason and the output's name as stage.

use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Stop;
use crate::incident::{IncidentEvent, Status};
use crate::metrics::{OutputCounters, OutputFamilies, OutputResult};
use crate::offsets::Release;
use crate::sink::kafka::{KafkaSink, UndeliveredRecord};
use crate::sink::output::{IncidentOutput, Outcome, Undelivered};

/// A change for an output's worker, with the release its handling helps.
type Job = (Arc<IncidentEvent>, Option<Arc<Release>>);

/// Produces what outputs gave up on to the dead-letter topic.
#[derive(Clone)]
pub struct DeadLetters {
    /// The producer.
    pub sink: Arc<KafkaSink>,
    /// `dead_letter.undeliverable_topic`, or the dead-letter topic.
    pub topic: String,
    /// Stopped when a dead letter cannot be produced (the holds stay: the restarted service
    /// handles the change again).
    pub stop: Arc<Stop>,
}

impl DeadLetters {
    fn send(&self, stage: &str, u: &Undelivered, release: Option<Arc<Release>>) {
        let record = UndeliveredRecord {
            reason: u.reason,
            stage,
            fingerprint: &u.key,
            payload: &u.payload,
            error: &u.error,
            attempts: u.attempts,
        };
        if let Err(e) = self
            .sink
            .send_undeliverable(&self.topic, record, release, &self.stop)
        {
            self.stop.fail(e.into());
        }
    }
}

/// The incident stage's end of one output: its filter and its queue.
pub struct OutputQueue {
    name: &'static str,
    wants: fn(&IncidentEvent) -> bool,
    tx: SyncSender<Job>,
    counters: OutputCounters,
    last_drop_log: Option<Instant>,
}

impl std::fmt::Debug for OutputQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutputQueue")
            .field("name", &self.name)
            .finish()
    }
}

impl OutputQueue {
    /// Starts `output`'s worker thread behind a queue of `queue` changes.
    pub fn spawn(
        output: Box<dyn IncidentOutput>,
        queue: usize,
        families: &OutputFamilies,
        dead: DeadLetters,
    ) -> std::io::Result<(Self, std::thread::JoinHandle<()>)> {
        let name = output.name();
        let counters = families.output(name);
        let (tx, rx) = sync_channel::<Job>(queue.max(1));
        let wants = output.wants();
        let c = counters.clone();
        let thread = std::thread::Builder::new()
            .name(format!("faultline-{name}"))
            .spawn(move || work(rx, output, &c, &dead))?;
        let q = OutputQueue {
            name,
            wants,
            tx,
            counters,
            last_drop_log: None,
        };
        Ok((q, thread))
    }

    /// Whether the output takes `change`.
    pub fn wants(&self, change: &IncidentEvent) -> bool {
        (self.wants)(change)
    }

    /// Queues `change` without waiting; a full queue drops it (counted, logged) and marks its
    /// release's party done.
    pub fn offer(&mut self, change: Arc<IncidentEvent>, release: Option<Arc<Release>>) {
        let (change, release) = match self.tx.try_send((change, release)) {
            Ok(()) => {
                self.counters.queued.inc();
                return;
            }
            Err(TrySendError::Full(job) | TrySendError::Disconnected(job)) => job,
        };
        self.counters.count(OutputResult::Dropped, 1);
        let now = Instant::now();
        let resolved = change.status == Status::Resolved;
        // At most one line a second (a stuck receiver and an incident storm).
        if resolved
            || self
                .last_drop_log
                .is_none_or(|at| now.duration_since(at) >= Duration::from_secs(1))
        {
            self.last_drop_log = Some(now);
            let output = self.name;
            if resolved {
                tracing::error!(output, fingerprint = %change.fingerprint,
                    "output queue full: resolution not sent; the receiver keeps it open until \
                     the incident's next change");
            } else {
                tracing::warn!(output, fingerprint = %change.fingerprint,
                    "output queue full: change not sent; the next one carries its state");
            }
        }
        if let Some(r) = release {
            r.done();
        }
    }
}

/// The worker: batches of queued changes to [`IncidentOutput::deliver`], ticks when idle.
fn work(
    rx: Receiver<Job>,
    mut output: Box<dyn IncidentOutput>,
    c: &OutputCounters,
    dead: &DeadLetters,
) {
    let every = output.tick_every();
    let mut next_tick = every.map(|e| Instant::now() + e);
    loop {
        let first = match next_tick {
            Some(at) => match rx.recv_timeout(at.saturating_duration_since(Instant::now())) {
                Ok(job) => job,
                Err(RecvTimeoutError::Timeout) => {
                    next_tick = every.map(|e| Instant::now() + e);
                    if !dead.stop.requested() {
                        let mut report = Outcome::default();
                        output.tick(&mut report);
                        account(c, output.name(), &report, &mut Vec::new(), dead);
                    }
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => return,
            },
            None => match rx.recv() {
                Ok(job) => job,
                Err(_) => return,
            },
        };
        let mut jobs = vec![first];
        while jobs.len() < output.max_batch() {
            match rx.try_recv() {
                Ok(j) => jobs.push(j),
                Err(_) => break,
            }
        }
        c.queued.sub(jobs.len() as i64);
        if dead.stop.requested() {
            // Not done: the incidents stay held, and the restarted service hands them over.
            c.count(OutputResult::Abandoned, jobs.len() as u64);
            continue;
        }
        let changes: Vec<Arc<IncidentEvent>> = jobs.iter().map(|(c, _)| Arc::clone(c)).collect();
        let mut report = Outcome::default();
        output.deliver(&changes, &mut report);
        let mut releases: Vec<Option<Arc<Release>>> = jobs.into_iter().map(|(_, r)| r).collect();
        account(c, output.name(), &report, &mut releases, dead);
    }
}

/// Counts `report`, produces its dead letters (each change's release waiting for its first),
/// and marks the remaining releases done.
fn account(
    c: &OutputCounters,
    name: &'static str,
    report: &Outcome,
    releases: &mut [Option<Arc<Release>>],
    dead: &DeadLetters,
) {
    c.count(OutputResult::Delivered, report.delivered);
    c.count(OutputResult::Failed, report.failed);
    c.count(OutputResult::DeadLettered, report.dead_lettered);
    c.retries.inc_by(report.retries);
    if let Some(open) = report.open {
        c.open.set(open as i64);
    }
    for u in &report.undelivered {
        let release = u
            .change
            .and_then(|i| releases.get_mut(i))
            .and_then(Option::take);
        dead.send(name, u, release);
    }
    for r in releases.iter_mut().filter_map(Option::take) {
        r.done();
    }
}
