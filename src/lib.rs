//! faultline tells a GPU-training fleet what just broke, why, and what to do about it.
//!
//! It matches every log line of a training job against a knowledge base of failure signatures
//! (PyTorch, NCCL, CUDA, the NVIDIA driver, the kernel, Slurm, Kubernetes...) in one Hyperscan
//! pass, and attaches to each match its diagnosis: root cause, workarounds ranked by success
//! rate, dead ends, version compatibility and the fields it extracted (rank, op, timeout, GPU).
//!
//! # Layout
//!
//! ```text
//!  source::file ──chunks of lines──▶ engine ──Hit──▶ enrich ──MatchEvent──▶ sink::stdout
//!                                      │   ▲                    │
//!                  envelope (JSON, ────┘   └── matcher          ▼
//!                  launcher prefixes)            ▲          incident ──IncidentEvent──▶ sink::stdout,
//!                                                │                                     sink::webhook
//!                                                └── kb (TOML entries -> validated Entry)
//! ```
//!
//! - [`record`]: the input vocabulary (a line, its job, rank, host, timestamp, provenance).
//! - [`envelope`]: raw lines and shipper JSON envelopes -> [`record::LogRecord`].
//! - [`kb`]: the knowledge base: format, validation, `kb check`, importers.
//! - [`matcher`]: the multi-pattern engines behind one trait.
//! - [`engine`]: a chunk of lines -> confirmed matches with captures.
//! - [`enrich`]: a match -> the schema_version 1 event with its diagnosis, secrets redacted
//!   ([`redact`]) before the event leaves.
//! - [`incident`]: matches of a job -> incidents: root versus cascade, the culprit rank and
//!   host, context lines, lifecycle, tickets.
//! - [`metrics`]: every Prometheus family, counted per batch, rendered for `/metrics`.
//! - [`telemetry`]: one OpenTelemetry span per match, exported over OTLP.
//! - [`source`], [`sink`]: inputs and outputs; [`scan`] wires them for `faultline scan`.
//! - [`bench`]: generated corpora for the benchmarks.
//! - [`cli`]: the command line.
//!
//! `faultline run` streams from Kafka (see `docs/kafka.md`):
//!
//! ```text
//!  source::kafka ──Batch──▶ pipeline (engine + enrich) ──events──▶ sink::kafka
//!        ▲  store watermark        │ resolve      │ incidents          │ delivery acks
//!        └───────────────── offsets::Tracker ◀──┼─────(holds)────────┘
//!                                                 └─▶ correlator ──▶ incidents topic, webhook
//! ```
//!
//! - [`config`]: `faultline.toml`, flags and environment -> validated [`config::Config`].
//! - [`offsets`]: the contiguous per-partition watermark of terminal records, capped by the
//!   holds of open incidents.
//! - [`pipeline`]: the stages wired with bounded queues ([`pipeline::incidents`]: the
//!   correlator, the incidents topic and the webhook thread); [`reload`]: KB hot reload;
//!   [`server`]: `/healthz`, `/readyz`; [`demo`]: the whole pipeline on an embedded broker.

pub mod bench;
pub mod cli;
pub mod config;
pub mod demo;
pub mod engine;
pub mod enrich;
pub mod envelope;
#[doc(hidden)]
pub mod fuzzing;
pub mod incident;
pub mod isolation;
pub mod kafka;
pub mod kb;
pub mod matcher;
pub mod metrics;
pub mod offsets;
pub mod panic_hook;
pub mod pipeline;
pub mod record;
pub mod redact;
pub mod reload;
pub mod runtime;
pub mod scan;
pub mod server;
pub mod sink;
pub mod source;
pub mod telemetry;
#[cfg(test)]
mod testutil;
pub mod time;
