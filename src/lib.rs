//! faultline tells a GPU-training fleet what just broke, why, and what to do about it.
//!
//! It matches every log line of a training job against a knowledge base of failure signatures
//! (PyTorch, NCCL, CUDA, the NVIDIA driver, the kernel, Slurm, Kubernetes...) in one Hyperscan
//! pass, attaches to each match its diagnosis (root cause, workarounds in the author's order,
//! dead ends, version compatibility, the fields it extracted), and correlates the matches of a
//! job into one incident per failure.
//!
//! # Layout
//!
//! Modules in flow order, lowest first: each bullet below is a layer. Imports point down this
//! list (or stay within a bullet), never up and never in a circle (`tests/it/architecture.rs`
//! checks both, reading this list):
//!
//! ```text
//!  source::file ─chunks─┐                          ┌─batches─ source::kafka
//!                       ▼                          ▼
//!     envelope ──▶ engine (matcher, kb) ──Hit──▶ enrich ──MatchEvent──▶ incident
//!                                                                          │
//!     sink::stdout ◀── scan                  pipeline ──▶ sink::kafka, sink::webhook
//! ```
//!
//! - Leaves: [`record`] (a line, its job, rank, host, provenance; the one line count),
//!   [`time`] (the one timestamp parser), [`offsets`] (the contiguous per-partition watermark),
//!   [`runtime`] (shutdown, the bounded queue, health), [`secret`] (what a credential in
//!   faultline's settings is, and the one redaction of URLs and secret values),
//!   [`section`] (what every configuration table shares), [`cache`] (what is kept between
//!   runs, keyed by the build's identity).
//! - [`envelope`]: raw lines and shipper JSON envelopes -> [`record::LogRecord`].
//! - [`kb`]: the knowledge base: format ([`kb::spec`] -> [`kb::entry`]), the rules on its
//!   text that need no engine (pattern cost, safe commands), listing.
//! - [`matcher`]: the multi-pattern engines behind one trait (Hyperscan, and the `regex` oracle).
//! - [`engine`]: a chunk of lines -> confirmed hits with captures.
//! - [`kbtool`]: what a KB author runs over the engines: `kb check` and the seed importer.
//! - [`redact`]: secrets out of everything that quotes a log line.
//! - [`templates`]: the online template miner: masking, templates with stable ids, bounded
//!   memory, and the gate that says which lines look like errors.
//! - [`enrich`]: a hit -> the schema_version 1 event with its diagnosis.
//! - [`incident`]: matches of a job -> incidents: election, culprit, context, lifecycle,
//!   fingerprint, and its `[incidents]` table.
//! - [`unknown`]: error lines no entry knows -> per-job templates -> rate-limited `unknown`
//!   events (and the templates an incident without a known root lists), its `[unknown]` table.
//! - [`metrics`]: every Prometheus family, one file per group; [`telemetry`]: OTLP spans.
//! - [`report`]: what failures cost a fleet: the interruption table, GPU-hours lost, ETTR,
//!   lemon nodes and fix outcomes, from a scan's matches and incidents (the `faultline report`
//!   command is `cli::report`, the live page the admin server's `/report`).
//! - [`kafka`]: librdkafka settings in one function, the log bridge, the record view, lag.
//! - [`source`]: [`source::file`], [`source::kafka`]; [`sink`]: [`sink::stdout`],
//!   [`sink::kafka`], [`sink::webhook`], [`sink::alertmanager`], and [`sink::http`] under the
//!   last two.
//! - [`reload`]: KB hot reload; [`server`]: the admin HTTP server; [`isolation`]: panics caught,
//!   redacted and retried, for every driver ([`panic_hook`] prints them the same way).
//! - [`pipeline`]: `faultline run`'s settings ([`pipeline::settings`], which `config` builds) and
//!   stages ([`pipeline::config`], [`pipeline::decode`],
//!   [`pipeline::match_stage`], [`pipeline::incidents`], [`pipeline::signals`]; the roles of a
//!   split deployment: [`pipeline::shard`], [`pipeline::correlate`]).
//! - [`scan`]: the file and stdin driver.
//! - [`explain`]: `faultline kb explain`: one line's matches, trust level and advice.
//! - [`mine`]: `faultline templates` (unknown error lines -> templates) and `kb suggest`
//!   (templates -> KB drafts), over the same readers and engine as `scan`.
//! - [`config`]: composes every component's table into `faultline.toml`.
//! - [`eval`]: recognition measured on the real-log corpus.
//! - [`demo`]: the whole pipeline on an embedded broker; [`bench`]: benchmark inputs and
//!   [`bench::latency`], the split roles measured on an embedded broker;
//!   [`cli`]: the command line; [`fuzzing`]: the fuzz targets' entry points.

pub mod bench;
pub mod cache;
pub mod cli;
pub mod config;
pub mod demo;
pub mod engine;
pub mod enrich;
pub mod envelope;
pub mod eval;
pub mod explain;
#[doc(hidden)]
pub mod fuzzing;
pub mod incident;
pub mod isolation;
pub mod kafka;
pub mod kb;
pub mod kbtool;
pub mod matcher;
pub mod metrics;
pub mod mine;
pub mod offsets;
pub mod panic_hook;
pub mod pipeline;
pub mod record;
pub mod redact;
pub mod reload;
pub mod report;
pub mod runtime;
pub mod scan;
pub mod secret;
pub mod section;
pub mod server;
pub mod sink;
pub mod source;
pub mod telemetry;
pub mod templates;
#[cfg(test)]
mod testutil;
pub mod time;
pub mod unknown;
