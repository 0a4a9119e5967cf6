//! Incident outputs: where incident changes go besides the incidents topic (tickets through a
//! webhook, alerts to Alertmanager, whatever comes next), behind one interface.
//!
//! An output is an [`IncidentOutput`]: it says which changes it wants, delivers a batch of
//! them, and may do periodic work (Alertmanager's resend). It never deals with queues, threads,
//! commit holds, dead-letter topics or metrics: `faultline run`'s delivery worker
//! (`pipeline::outputs`, the driver above) does that the same way for every output, and counts into
//! `faultline_output_*{output}`.
//!
//! The configured outputs are a list of `pipeline::settings::IncidentOutputConfig`s, one enum arm per
//! kind, each arm an [`OutputSection`] (its validated table of `faultline.toml`). Adding a
//! kind of output takes:
//!
//! 1. one file under `src/sink/` with its table (`Raw...` as written, the validated config
//!    implementing [`OutputSection`]) and its [`IncidentOutput`];
//! 2. one arm in `IncidentOutputConfig` (and its line in `IncidentOutputConfig::section`);
//! 3. one field in `config::RawConfig` and its line in `Config::from_raw`'s list.
//!
//! `docs/architecture.md` walks through it; `tests/it/outputs.rs` plugs a test output in
//! through `pipeline::Extras::outputs`, which takes any [`IncidentOutput`] directly.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::incident::IncidentEvent;
use crate::runtime::shutdown::Shutdown;
use crate::section::Printer;
use crate::sink::http::Pause;

/// Where incident changes go, for one receiver.
pub trait IncidentOutput: Send {
    /// The output's name: the `output` label of its metrics, its thread's name, its log lines,
    /// and the `faultline.stage` header of its dead letters.
    fn name(&self) -> &'static str;

    /// Which changes it takes (asked on the incident stage's thread, before queueing: a
    /// resolution's commit holds wait for exactly the outputs that want it). Every change by
    /// default.
    fn wants(&self) -> fn(&IncidentEvent) -> bool {
        every
    }

    /// The most changes [`IncidentOutput::deliver`] takes at once (queued changes are batched
    /// up to it). 1 by default.
    fn max_batch(&self) -> usize {
        1
    }

    /// Delivers `changes` (at least one, at most [`IncidentOutput::max_batch`]), retrying as
    /// its settings say, and reports the outcome into `report`. A change it gives up on goes
    /// into [`Outcome::undelivered`], to be produced to the dead-letter topic.
    fn deliver(&mut self, changes: &[Arc<IncidentEvent>], report: &mut Outcome);

    /// How often [`IncidentOutput::tick`] runs when no change arrives; `None`: never.
    fn tick_every(&self) -> Option<Duration> {
        None
    }

    /// Periodic work (a resend of what the receiver keeps alive).
    fn tick(&mut self, _report: &mut Outcome) {}
}

/// An output with the size of its queue: what `faultline run` starts a worker for.
pub type QueuedOutput = (Box<dyn IncidentOutput>, usize);

/// Every change.
fn every(_: &IncidentEvent) -> bool {
    true
}

/// What one [`IncidentOutput::deliver`] or [`IncidentOutput::tick`] did.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Changes the receiver accepted.
    pub delivered: u64,
    /// Changes not accepted after the retries that the output sends again itself later.
    pub failed: u64,
    /// Changes given up on (their records are in `undelivered`).
    pub dead_lettered: u64,
    /// Attempts retried after a retryable failure.
    pub retries: u64,
    /// Items the output keeps alive on its receiver, when it has such (open alerts).
    pub open: Option<usize>,
    /// What it gave up on, for the dead-letter topic.
    pub undelivered: Vec<Undelivered>,
}

/// A change (or the item made of it) an output gave up on: the dead-letter record.
#[derive(Debug, Clone, PartialEq)]
pub struct Undelivered {
    /// The `faultline.reason` header (`ticket_undeliverable`).
    pub reason: &'static str,
    /// The record key: the incident's fingerprint, or the output's key for it.
    pub key: String,
    /// The JSON record (what was sent, where, and the error), to replay.
    pub payload: Vec<u8>,
    /// Attempts made.
    pub attempts: u32,
    /// The last attempt's error, credentials redacted.
    pub error: String,
    /// The index (in the batch given to `deliver`) of the change whose commit holds wait for
    /// this dead letter's acknowledgement; `None`: none waits.
    pub change: Option<usize>,
}

/// What every output's table does: name the output, size its queue, build it, print itself.
pub trait OutputSection: std::fmt::Debug + Send + Sync {
    /// The table's name and the output's.
    fn name(&self) -> &'static str;

    /// Changes waiting for the output (its bounded queue).
    fn queue(&self) -> usize;

    /// The output, ready to deliver.
    fn build(&self, ctx: &OutputContext) -> Result<Box<dyn IncidentOutput>, OutputError>;

    /// The effective table, secrets left out.
    fn print(&self, p: &mut Printer);
}

/// What the service gives an output when it builds it.
#[derive(Debug, Clone)]
pub struct OutputContext {
    /// The base of incident page links (the admin server's `external_url`, or its address).
    pub page_base: Option<String>,
    /// The service's shutdown: waits between attempts end when it is requested.
    pub shutdown: Arc<Shutdown>,
}

impl OutputContext {
    /// How an output waits between attempts: at most until a stop is requested.
    pub fn pause(&self) -> Box<dyn Pause> {
        Box::new(ShutdownPause(Arc::clone(&self.shutdown)))
    }
}

/// Waits between attempts, but not past a stop request.
#[derive(Debug)]
pub struct ShutdownPause(pub Arc<Shutdown>);

impl Pause for ShutdownPause {
    fn pause(&mut self, duration: Duration) {
        let deadline = Instant::now() + duration;
        while !self.0.requested() {
            let now = Instant::now();
            if now >= deadline {
                return;
            }
            // A short slice: a stop request ends the wait within it.
            std::thread::sleep((deadline - now).min(Duration::from_millis(50)));
        }
    }
}

/// An output that cannot be built (its URL or CA file is unusable).
#[derive(Debug, thiserror::Error)]
#[error("{output}: {message}")]
pub struct OutputError {
    /// The output's name.
    pub output: &'static str,
    /// Why.
    pub message: String,
}

impl OutputError {
    /// `error` of output `output`.
    pub fn new(output: &'static str, error: impl std::fmt::Display) -> Self {
        OutputError {
            output,
            message: error.to_string(),
        }
    }
}
