//! The pipeline's own tables of `faultline.toml`: `[pipeline]` (batches and the queue between
//! the source and the match stage), `[input]` (how payloads are read, where the job id comes
//! from) and `[dead_letter]` (where undecodable records go, and when to stop instead).

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::section::{Errors, Printer};
use crate::source::kafka::BatchLimits;

/// `[pipeline]` as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPipeline {
    /// Records per batch.
    pub batch_max_records: Option<usize>,
    /// Payload bytes per batch.
    pub batch_max_bytes: Option<usize>,
    /// Longest wait to fill a batch.
    pub batch_linger_ms: Option<u64>,
    /// Batches queued between the consumer and the matcher.
    pub queue_batches: Option<usize>,
    /// Where the crash notes are kept (off when unset).
    pub state_dir: Option<PathBuf>,
}

/// Validated `[pipeline]`.
#[derive(Debug, Clone)]
pub struct PipelineConfig {
    /// How the source cuts batches.
    pub batch: BatchLimits,
    /// Batches queued between the consumer and the matcher.
    pub queue_batches: usize,
    /// Where the crash notes are kept ([`super::quarantine`]); `None`: no notes, and a record
    /// that kills the process is read again after every restart.
    pub state_dir: Option<PathBuf>,
}

impl PipelineConfig {
    /// Validates `[pipeline]`, applying defaults.
    pub fn from_raw(p: RawPipeline, errors: &mut Errors<'_>) -> PipelineConfig {
        let max_records = p.batch_max_records.unwrap_or(1_000);
        if max_records == 0 {
            errors.push("batch_max_records", "must be positive");
        }
        let max_bytes = p.batch_max_bytes.unwrap_or(1 << 20);
        if max_bytes == 0 {
            errors.push("batch_max_bytes", "must be positive");
        }
        let queue_batches = p.queue_batches.unwrap_or(4);
        if queue_batches == 0 {
            errors.push("queue_batches", "must be positive");
        }
        let state_dir = p.state_dir.filter(|d| !d.as_os_str().is_empty());
        PipelineConfig {
            state_dir,
            batch: BatchLimits {
                max_records,
                max_bytes,
                linger: Duration::from_millis(p.batch_linger_ms.unwrap_or(20)),
            },
            queue_batches,
        }
    }

    /// The effective `[pipeline]` table.
    pub fn print(&self, p: &mut Printer) {
        p.table("pipeline");
        p.number("batch_max_records", self.batch.max_records);
        p.number("batch_max_bytes", self.batch.max_bytes);
        p.number("batch_linger_ms", self.batch.linger.as_millis());
        p.number("queue_batches", self.queue_batches);
        if let Some(d) = &self.state_dir {
            p.value("state_dir", d.display().to_string());
        }
    }
}

/// `[input]` as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawInput {
    /// `auto`, `text` or `json`.
    pub envelope: Option<String>,
    /// `envelope`, `key` or `header:NAME`.
    pub job_id: Option<String>,
    /// The job of a record that names none.
    pub default_job_id: Option<String>,
    /// Larger payloads are dead-lettered.
    pub max_record_bytes: Option<usize>,
}

/// How record payloads are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnvelopeMode {
    /// As `faultline scan`: any bytes; lines starting with `{` are decoded as JSON envelopes
    /// when they are, matched as raw text when not.
    Auto,
    /// As `auto`, but the payload must be valid UTF-8.
    Text,
    /// Every non-blank line must be a JSON envelope with a message.
    Json,
}

/// Where a record's job id comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobIdFrom {
    /// The envelope's job field, else the record key, else the default.
    Envelope,
    /// The record key, else the default.
    Key,
    /// A record header, else the default.
    Header(String),
}

/// Validated `[input]`.
#[derive(Debug, Clone)]
pub struct InputConfig {
    /// How payloads are read.
    pub envelope: EnvelopeMode,
    /// Where the job id comes from.
    pub job_id: JobIdFrom,
    /// The job of a record that names none.
    pub default_job_id: String,
    /// Larger payloads are dead-lettered.
    pub max_record_bytes: usize,
}

impl InputConfig {
    /// Validates `[input]`, applying defaults.
    pub fn from_raw(i: RawInput, errors: &mut Errors<'_>) -> InputConfig {
        let envelope = match i.envelope.as_deref().unwrap_or("auto") {
            "auto" => EnvelopeMode::Auto,
            "text" => EnvelopeMode::Text,
            "json" => EnvelopeMode::Json,
            other => {
                errors.push(
                    "envelope",
                    format!("{other:?}: expected auto, text or json"),
                );
                EnvelopeMode::Auto
            }
        };
        let job_id = match i.job_id.as_deref().unwrap_or("envelope") {
            "envelope" => JobIdFrom::Envelope,
            "key" => JobIdFrom::Key,
            other => match other.strip_prefix("header:") {
                Some(name) if !name.is_empty() => JobIdFrom::Header(name.to_string()),
                _ => {
                    errors.push(
                        "job_id",
                        format!("{other:?}: expected envelope, key or header:NAME"),
                    );
                    JobIdFrom::Envelope
                }
            },
        };
        let default_job_id = i.default_job_id.unwrap_or_else(|| "unknown".into());
        let max_record_bytes = i.max_record_bytes.unwrap_or(1 << 20);
        if max_record_bytes == 0 {
            errors.push("max_record_bytes", "must be positive");
        }
        InputConfig {
            envelope,
            job_id,
            default_job_id,
            max_record_bytes,
        }
    }

    /// The effective `[input]` table.
    pub fn print(&self, p: &mut Printer) {
        p.table("input");
        p.value("envelope", format!("{:?}", self.envelope).to_lowercase());
        let job = match &self.job_id {
            JobIdFrom::Envelope => "envelope".to_string(),
            JobIdFrom::Key => "key".to_string(),
            JobIdFrom::Header(h) => format!("header:{h}"),
        };
        p.value("job_id", job);
        p.value("default_job_id", &self.default_job_id);
        p.number("max_record_bytes", self.max_record_bytes);
    }
}

/// `[dead_letter]` as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDeadLetter {
    /// Topic of undecodable records.
    pub topic: Option<String>,
    /// Stop when more than this share of a window is invalid; 1 disables.
    pub max_invalid_ratio: Option<f64>,
    /// Records per invalid-ratio window.
    pub invalid_window: Option<u64>,
    /// Stop after more consecutive invalid records than this; 0 disables.
    pub max_consecutive_invalid: Option<u64>,
    /// Redact dead letters' payloads (default false: the original bytes, for replay).
    pub redact: Option<bool>,
    /// Topic of ticket changes and alerts their receivers never accepted (default: `topic`).
    pub undeliverable_topic: Option<String>,
}

/// The default dead-letter topic.
pub const DEFAULT_DEAD_LETTER_TOPIC: &str = "faultline.dead-letter";

/// The Arroyo-style limits past which faultline stops instead of dead-lettering.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct InvalidLimits {
    /// Stop when more than `max_ratio * window` records of a window of `window` records are
    /// invalid. `None`: no ratio limit.
    pub max_ratio: Option<f64>,
    /// Records per window.
    pub window: u64,
    /// Stop when more than this many consecutive records are invalid. `None`: no limit.
    pub max_consecutive: Option<u64>,
}

/// Validated `[dead_letter]`.
#[derive(Debug, Clone)]
pub struct DeadLetterConfig {
    /// Topic of undecodable records.
    pub topic: String,
    /// When to stop instead.
    pub limits: InvalidLimits,
    /// Redact payloads before producing them (with the `[redact]` rules, whatever
    /// `redact.enabled` says); `false` keeps the original bytes for replay.
    pub redact: bool,
    /// Topic of ticket changes and alerts their receivers never accepted; `None`: `topic`.
    pub undeliverable_topic: Option<String>,
}

impl DeadLetterConfig {
    /// Validates `[dead_letter]`, applying defaults.
    pub fn from_raw(d: RawDeadLetter, errors: &mut Errors<'_>) -> DeadLetterConfig {
        let topic = d.topic.unwrap_or_else(|| DEFAULT_DEAD_LETTER_TOPIC.into());
        if topic.trim().is_empty() {
            errors.push("topic", "must not be empty");
        }
        let ratio = d.max_invalid_ratio.unwrap_or(0.1);
        if !(0.0..=1.0).contains(&ratio) || ratio.is_nan() {
            errors.push(
                "max_invalid_ratio",
                format!("{ratio}: expected a number from 0 to 1 (1 disables the limit)"),
            );
        }
        let window = d.invalid_window.unwrap_or(1_000);
        if window == 0 {
            errors.push("invalid_window", "must be positive");
        }
        let consecutive = d.max_consecutive_invalid.unwrap_or(100);
        if d.undeliverable_topic
            .as_ref()
            .is_some_and(|t| t.trim().is_empty())
        {
            errors.push("undeliverable_topic", "must not be empty");
        }
        DeadLetterConfig {
            undeliverable_topic: d.undeliverable_topic,
            topic,
            limits: InvalidLimits {
                max_ratio: (ratio < 1.0).then_some(ratio),
                window,
                max_consecutive: (consecutive > 0).then_some(consecutive),
            },
            redact: d.redact.unwrap_or(false),
        }
    }

    /// The effective `[dead_letter]` table.
    pub fn print(&self, p: &mut Printer) {
        p.table("dead_letter");
        p.value("topic", &self.topic);
        p.number("max_invalid_ratio", self.limits.max_ratio.unwrap_or(1.0));
        p.number("invalid_window", self.limits.window);
        p.number(
            "max_consecutive_invalid",
            self.limits.max_consecutive.unwrap_or(0),
        );
        p.number("redact", self.redact);
        p.value(
            "undeliverable_topic",
            self.undeliverable_topic.as_deref().unwrap_or(&self.topic),
        );
    }
}
