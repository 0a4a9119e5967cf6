//! `faultline run` settings: `faultline.toml` as written ([`RawConfig`]) -> validated [`Config`].
//!
//! Every setting can come from the file, a flag or an environment variable ([`Overrides`]); a
//! flag or variable wins over the file, the file over the default. Validation collects every
//! problem and names its field (`kafka.brokers`, `dead_letter.max_invalid_ratio`...). Loading
//! has no side effects: nothing connects, binds or spawns here. [`kafka_settings`] is the one
//! place where librdkafka properties are decided.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

/// The file as written. Every field is optional; defaults are applied by [`Config::from_raw`].
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    #[serde(default)]
    pub kafka: RawKafka,
    #[serde(default)]
    pub input: RawInput,
    #[serde(default)]
    pub output: RawOutput,
    #[serde(default)]
    pub dead_letter: RawDeadLetter,
    #[serde(default)]
    pub pipeline: RawPipeline,
    #[serde(default)]
    pub kb: RawKb,
    #[serde(default)]
    pub admin: RawAdmin,
    /// `[metrics]`: extra label dimensions of `faultline_matches_total`.
    #[serde(default)]
    pub metrics: crate::metrics::RawMetricsConfig,
    /// `[telemetry]`: OTLP span export; the standard `OTEL_*` variables win over it.
    #[serde(default)]
    pub telemetry: crate::telemetry::RawTelemetryConfig,
    /// `[redact]`: secret redaction of events (and of dead letters with `dead_letter.redact`).
    #[serde(default)]
    pub redact: RawRedact,
    /// `[incidents]`: correlation and the incidents topic (on when `topic` is set).
    #[serde(default)]
    pub incidents: crate::pipeline::incidents::RawIncidentsConfig,
    /// `[webhook]`: tickets for incidents (on when `url` is set; needs `[incidents]`).
    #[serde(default)]
    pub webhook: crate::pipeline::incidents::RawWebhookConfig,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawKafka {
    pub brokers: Option<String>,
    pub group_id: Option<String>,
    /// Topic names; an entry starting with `^` is a regular expression.
    pub topics: Option<Vec<String>>,
    pub auto_offset_reset: Option<String>,
    pub commit_interval_ms: Option<u64>,
    pub drain_timeout_ms: Option<u64>,
    /// librdkafka properties for both clients (SASL, TLS...).
    #[serde(default)]
    pub options: BTreeMap<String, String>,
    #[serde(default)]
    pub consumer_options: BTreeMap<String, String>,
    #[serde(default)]
    pub producer_options: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawInput {
    pub envelope: Option<String>,
    pub job_id: Option<String>,
    pub default_job_id: Option<String>,
    pub max_record_bytes: Option<usize>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawOutput {
    pub topic: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDeadLetter {
    pub topic: Option<String>,
    pub max_invalid_ratio: Option<f64>,
    pub invalid_window: Option<u64>,
    pub max_consecutive_invalid: Option<u64>,
    /// Redact dead letters' payloads (default false: the original bytes, for replay).
    pub redact: Option<bool>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRedact {
    /// Redact secrets in events (default true).
    pub enabled: Option<bool>,
    /// Rules added to the built-in ones: `[{ name = "...", pattern = '...' }]`, as
    /// `faultline scan --redact NAME=PATTERN` takes them.
    #[serde(default)]
    pub extra: Vec<crate::redact::RuleSpec>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPipeline {
    pub batch_max_records: Option<usize>,
    pub batch_max_bytes: Option<usize>,
    pub batch_linger_ms: Option<u64>,
    pub queue_batches: Option<usize>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawKb {
    pub dir: Option<PathBuf>,
    pub watch_interval_ms: Option<u64>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAdmin {
    pub listen: Option<String>,
    pub stall_timeout_ms: Option<u64>,
}

/// `faultline run` arguments: the file, the overrides, and `--check-config`.
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// Configuration file (TOML); flags and environment variables override it.
    #[arg(long, short = 'c', env = "FAULTLINE_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Validate the configuration and the knowledge base, print the effective configuration
    /// (secrets redacted) and exit.
    #[arg(long)]
    pub check_config: bool,
    #[command(flatten)]
    pub overrides: Overrides,
}

/// Flags and environment variables, one per setting. `None` leaves the file's value.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct Overrides {
    /// Kafka bootstrap servers (`kafka.brokers`).
    #[arg(long, env = "FAULTLINE_KAFKA_BROKERS", value_name = "HOST:PORT,...")]
    pub brokers: Option<String>,
    /// Consumer group (`kafka.group_id`).
    #[arg(long, env = "FAULTLINE_KAFKA_GROUP_ID", value_name = "GROUP")]
    pub group_id: Option<String>,
    /// Input topic, repeatable; `^regex` subscribes by pattern (`kafka.topics`).
    #[arg(
        long = "topic",
        env = "FAULTLINE_KAFKA_TOPICS",
        value_delimiter = ',',
        value_name = "TOPIC"
    )]
    pub topics: Vec<String>,
    /// Where a group without committed offsets starts: earliest or latest.
    #[arg(long, env = "FAULTLINE_KAFKA_AUTO_OFFSET_RESET", value_name = "WHERE")]
    pub auto_offset_reset: Option<String>,
    /// Period of the asynchronous offset commit (`kafka.commit_interval_ms`).
    #[arg(long, env = "FAULTLINE_KAFKA_COMMIT_INTERVAL_MS", value_name = "MS")]
    pub commit_interval_ms: Option<u64>,
    /// How long a revoke or a shutdown waits for in-flight records (`kafka.drain_timeout_ms`).
    #[arg(long, env = "FAULTLINE_KAFKA_DRAIN_TIMEOUT_MS", value_name = "MS")]
    pub drain_timeout_ms: Option<u64>,
    /// librdkafka property for both clients, repeatable (`kafka.options`).
    #[arg(
        long = "kafka-option",
        env = "FAULTLINE_KAFKA_OPTIONS",
        value_delimiter = ',',
        value_name = "KEY=VALUE"
    )]
    pub options: Vec<String>,
    /// librdkafka property for the consumer only (`kafka.consumer_options`).
    #[arg(
        long = "consumer-option",
        env = "FAULTLINE_KAFKA_CONSUMER_OPTIONS",
        value_delimiter = ',',
        value_name = "KEY=VALUE"
    )]
    pub consumer_options: Vec<String>,
    /// librdkafka property for the producer only (`kafka.producer_options`).
    #[arg(
        long = "producer-option",
        env = "FAULTLINE_KAFKA_PRODUCER_OPTIONS",
        value_delimiter = ',',
        value_name = "KEY=VALUE"
    )]
    pub producer_options: Vec<String>,
    /// Payload format: auto, text or json (`input.envelope`).
    #[arg(long, env = "FAULTLINE_INPUT_ENVELOPE", value_name = "MODE")]
    pub envelope: Option<String>,
    /// Where the job id comes from: envelope, key or header:NAME (`input.job_id`).
    #[arg(
        long = "job-id-from",
        env = "FAULTLINE_INPUT_JOB_ID",
        value_name = "FROM"
    )]
    pub job_id: Option<String>,
    /// Job id when the record names none (`input.default_job_id`).
    #[arg(long, env = "FAULTLINE_INPUT_DEFAULT_JOB_ID", value_name = "ID")]
    pub default_job_id: Option<String>,
    /// Larger payloads are dead-lettered (`input.max_record_bytes`).
    #[arg(long, env = "FAULTLINE_INPUT_MAX_RECORD_BYTES", value_name = "BYTES")]
    pub max_record_bytes: Option<usize>,
    /// Topic of the match events (`output.topic`).
    #[arg(long, env = "FAULTLINE_OUTPUT_TOPIC", value_name = "TOPIC")]
    pub output_topic: Option<String>,
    /// Topic of undecodable records (`dead_letter.topic`).
    #[arg(long, env = "FAULTLINE_DEAD_LETTER_TOPIC", value_name = "TOPIC")]
    pub dead_letter_topic: Option<String>,
    /// Stop when more than this share of a window is invalid; 1 disables.
    #[arg(
        long,
        env = "FAULTLINE_DEAD_LETTER_MAX_INVALID_RATIO",
        value_name = "RATIO"
    )]
    pub max_invalid_ratio: Option<f64>,
    /// Records per invalid-ratio window (`dead_letter.invalid_window`).
    #[arg(
        long,
        env = "FAULTLINE_DEAD_LETTER_INVALID_WINDOW",
        value_name = "RECORDS"
    )]
    pub invalid_window: Option<u64>,
    /// Stop after more consecutive invalid records than this; 0 disables.
    #[arg(
        long,
        env = "FAULTLINE_DEAD_LETTER_MAX_CONSECUTIVE_INVALID",
        value_name = "RECORDS"
    )]
    pub max_consecutive_invalid: Option<u64>,
    /// Redact dead letters' payloads: true or false (`dead_letter.redact`).
    #[arg(long, env = "FAULTLINE_DEAD_LETTER_REDACT", value_name = "BOOL")]
    pub dead_letter_redact: Option<bool>,
    /// Redact secrets in events: true or false (`redact.enabled`).
    #[arg(long, env = "FAULTLINE_REDACT_ENABLED", value_name = "BOOL")]
    pub redact_enabled: Option<bool>,
    /// Extra redaction rule, repeatable: NAME=PATTERN; replaces the file's `redact.extra`. The
    /// variable takes one rule per line.
    #[arg(
        long = "redact",
        env = "FAULTLINE_REDACT_EXTRA",
        value_delimiter = '\n',
        value_name = "NAME=PATTERN"
    )]
    pub redact_extra: Vec<crate::redact::RuleSpec>,
    /// Records per batch (`pipeline.batch_max_records`).
    #[arg(long, env = "FAULTLINE_PIPELINE_BATCH_MAX_RECORDS", value_name = "N")]
    pub batch_max_records: Option<usize>,
    /// Payload bytes per batch (`pipeline.batch_max_bytes`).
    #[arg(long, env = "FAULTLINE_PIPELINE_BATCH_MAX_BYTES", value_name = "BYTES")]
    pub batch_max_bytes: Option<usize>,
    /// Longest wait to fill a batch (`pipeline.batch_linger_ms`).
    #[arg(long, env = "FAULTLINE_PIPELINE_BATCH_LINGER_MS", value_name = "MS")]
    pub batch_linger_ms: Option<u64>,
    /// Batches queued between the consumer and the matcher (`pipeline.queue_batches`).
    #[arg(long, env = "FAULTLINE_PIPELINE_QUEUE_BATCHES", value_name = "N")]
    pub queue_batches: Option<usize>,
    /// Knowledge-base directory, watched for changes; the built-in KB when absent (`kb.dir`).
    #[arg(long = "kb", env = "FAULTLINE_KB", value_name = "DIR")]
    pub kb_dir: Option<PathBuf>,
    /// How often the KB directory is checked for changes; 0 disables (`kb.watch_interval_ms`).
    #[arg(long, env = "FAULTLINE_KB_WATCH_INTERVAL_MS", value_name = "MS")]
    pub kb_watch_interval_ms: Option<u64>,
    /// Admin HTTP address (/healthz, /readyz); `off` disables (`admin.listen`).
    #[arg(long, env = "FAULTLINE_ADMIN_LISTEN", value_name = "ADDR")]
    pub admin_listen: Option<String>,
    /// In-flight records without progress for this long make /readyz fail.
    #[arg(long, env = "FAULTLINE_ADMIN_STALL_TIMEOUT_MS", value_name = "MS")]
    pub stall_timeout_ms: Option<u64>,
}

/// A problem with one field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// Why a configuration was rejected.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {error}")]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("invalid configuration:\n{}", render(.0))]
    Invalid(Vec<FieldError>),
}

fn render(errors: &[FieldError]) -> String {
    errors
        .iter()
        .map(|e| format!("  {e}"))
        .collect::<Vec<_>>()
        .join("\n")
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

/// One subscription entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopicSpec {
    Name(String),
    /// A regular expression, as librdkafka takes it (starting with `^`).
    Pattern(String),
}

impl TopicSpec {
    pub fn as_subscription(&self) -> &str {
        match self {
            TopicSpec::Name(s) | TopicSpec::Pattern(s) => s,
        }
    }
}

/// librdkafka properties; values of secret-looking keys never reach a log.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct KafkaOptions(pub BTreeMap<String, String>);

impl fmt::Debug for KafkaOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.0.iter().map(|(k, v)| (k, redact(k, v))))
            .finish()
    }
}

/// Whether a property's value is a secret: its key mentions a password, secret, token or key.
pub fn is_secret(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    ["password", "secret", "token", "key"]
        .iter()
        .any(|w| key.contains(w))
}

/// The value as it may be printed.
pub fn redact<'a>(key: &str, value: &'a str) -> &'a str {
    if is_secret(key) {
        "[redacted]"
    } else {
        value
    }
}

#[derive(Debug, Clone)]
pub struct KafkaConfig {
    pub brokers: String,
    pub group_id: String,
    pub topics: Vec<TopicSpec>,
    pub auto_offset_reset: String,
    pub commit_interval: Duration,
    pub drain_timeout: Duration,
    pub options: KafkaOptions,
    pub consumer_options: KafkaOptions,
    pub producer_options: KafkaOptions,
}

#[derive(Debug, Clone)]
pub struct InputConfig {
    pub envelope: EnvelopeMode,
    pub job_id: JobIdFrom,
    pub default_job_id: String,
    pub max_record_bytes: usize,
}

/// The Arroyo-style limits past which faultline stops instead of dead-lettering.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct InvalidLimits {
    /// Stop when more than `max_ratio * window` records of a window of `window` records are
    /// invalid. `None`: no ratio limit.
    pub max_ratio: Option<f64>,
    pub window: u64,
    /// Stop when more than this many consecutive records are invalid. `None`: no limit.
    pub max_consecutive: Option<u64>,
}

#[derive(Debug, Clone)]
pub struct DeadLetterConfig {
    pub topic: String,
    pub limits: InvalidLimits,
    /// Redact payloads before producing them (with the `[redact]` rules, whatever
    /// `redact.enabled` says); `false` keeps the original bytes for replay.
    pub redact: bool,
}

/// Secret redaction in `faultline run`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedactConfig {
    /// Redact events' `line` and `captures` (and so spans and everything quoting events).
    pub enabled: bool,
    /// Rules added to the built-in ones, each checked in both engines at validation.
    pub extra: Vec<crate::redact::RuleSpec>,
}

impl RedactConfig {
    /// The built-in rules plus the extra ones, compiled (the shared built-in instance when
    /// there are none).
    pub fn rules(
        &self,
    ) -> Result<std::sync::Arc<crate::redact::Redactor>, crate::redact::RedactError> {
        if self.extra.is_empty() {
            Ok(crate::redact::Redactor::builtin())
        } else {
            crate::redact::Redactor::new(&self.extra).map(std::sync::Arc::new)
        }
    }
}

#[derive(Debug, Clone)]
pub struct PipelineConfig {
    pub batch_max_records: usize,
    pub batch_max_bytes: usize,
    pub batch_linger: Duration,
    pub queue_batches: usize,
}

#[derive(Debug, Clone)]
pub struct KbConfig {
    /// `None`: the KB built into the binary (never reloaded).
    pub dir: Option<PathBuf>,
    /// `None`: the directory is not watched (SIGHUP still reloads).
    pub watch_interval: Option<Duration>,
}

#[derive(Debug, Clone)]
pub struct AdminConfig {
    /// `None`: no admin server.
    pub listen: Option<SocketAddr>,
    pub stall_timeout: Duration,
}

/// A validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub kafka: KafkaConfig,
    pub input: InputConfig,
    pub output_topic: String,
    pub dead_letter: DeadLetterConfig,
    pub pipeline: PipelineConfig,
    pub kb: KbConfig,
    pub admin: AdminConfig,
    pub metrics: crate::metrics::MetricsConfig,
    pub telemetry: crate::telemetry::TelemetryConfig,
    pub redact: RedactConfig,
    /// `None`: incidents off.
    pub incidents: Option<crate::pipeline::incidents::IncidentsConfig>,
}

pub const DEFAULT_ADMIN_LISTEN: &str = "127.0.0.1:9477";
pub const DEFAULT_OUTPUT_TOPIC: &str = "faultline.events";
pub const DEFAULT_DEAD_LETTER_TOPIC: &str = "faultline.dead-letter";

/// Properties faultline sets itself: the guarantees depend on them, or a field names them.
const MANAGED: &[(&str, &str)] = &[
    ("bootstrap.servers", "use kafka.brokers"),
    ("group.id", "use kafka.group_id"),
    ("auto.offset.reset", "use kafka.auto_offset_reset"),
    ("auto.commit.interval.ms", "use kafka.commit_interval_ms"),
    (
        "enable.auto.offset.store",
        "faultline stores offsets itself, after the output is acknowledged",
    ),
    (
        "enable.auto.commit",
        "faultline commits the offsets it stored periodically and on revoke",
    ),
];

impl RawConfig {
    /// Reads and parses a TOML file (unknown fields are errors).
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read {
            path: path.to_path_buf(),
            error,
        })?;
        Self::from_toml(&text).map_err(|message| ConfigError::Parse {
            path: path.to_path_buf(),
            message,
        })
    }

    pub fn from_toml(text: &str) -> Result<Self, String> {
        toml::from_str(text).map_err(|e| e.to_string().trim_end().to_string())
    }

    /// Applies flags and environment variables over the file.
    pub fn apply(&mut self, o: &Overrides) -> Result<(), ConfigError> {
        fn set<T: Clone>(slot: &mut Option<T>, v: &Option<T>) {
            if v.is_some() {
                slot.clone_from(v);
            }
        }
        let mut errors = Vec::new();
        let k = &mut self.kafka;
        set(&mut k.brokers, &o.brokers);
        set(&mut k.group_id, &o.group_id);
        if !o.topics.is_empty() {
            k.topics = Some(o.topics.clone());
        }
        set(&mut k.auto_offset_reset, &o.auto_offset_reset);
        set(&mut k.commit_interval_ms, &o.commit_interval_ms);
        set(&mut k.drain_timeout_ms, &o.drain_timeout_ms);
        for (list, map, field) in [
            (&o.options, &mut k.options, "--kafka-option"),
            (
                &o.consumer_options,
                &mut k.consumer_options,
                "--consumer-option",
            ),
            (
                &o.producer_options,
                &mut k.producer_options,
                "--producer-option",
            ),
        ] {
            for kv in list {
                match kv.split_once('=') {
                    Some((key, value)) if !key.trim().is_empty() => {
                        map.insert(key.trim().to_string(), value.to_string());
                    }
                    _ => errors.push(FieldError {
                        field: field.into(),
                        message: format!("expected KEY=VALUE, got {:?}", redact(kv, kv)),
                    }),
                }
            }
        }
        set(&mut self.input.envelope, &o.envelope);
        set(&mut self.input.job_id, &o.job_id);
        set(&mut self.input.default_job_id, &o.default_job_id);
        set(&mut self.input.max_record_bytes, &o.max_record_bytes);
        set(&mut self.output.topic, &o.output_topic);
        let d = &mut self.dead_letter;
        set(&mut d.topic, &o.dead_letter_topic);
        set(&mut d.max_invalid_ratio, &o.max_invalid_ratio);
        set(&mut d.invalid_window, &o.invalid_window);
        set(&mut d.max_consecutive_invalid, &o.max_consecutive_invalid);
        set(&mut d.redact, &o.dead_letter_redact);
        set(&mut self.redact.enabled, &o.redact_enabled);
        if !o.redact_extra.is_empty() {
            self.redact.extra.clone_from(&o.redact_extra);
        }
        let p = &mut self.pipeline;
        set(&mut p.batch_max_records, &o.batch_max_records);
        set(&mut p.batch_max_bytes, &o.batch_max_bytes);
        set(&mut p.batch_linger_ms, &o.batch_linger_ms);
        set(&mut p.queue_batches, &o.queue_batches);
        set(&mut self.kb.dir, &o.kb_dir);
        set(&mut self.kb.watch_interval_ms, &o.kb_watch_interval_ms);
        set(&mut self.admin.listen, &o.admin_listen);
        set(&mut self.admin.stall_timeout_ms, &o.stall_timeout_ms);
        if errors.is_empty() {
            Ok(())
        } else {
            Err(ConfigError::Invalid(errors))
        }
    }
}

impl Config {
    /// Reads `path` (if any), applies the overrides and validates.
    pub fn load(path: Option<&Path>, overrides: &Overrides) -> Result<Self, ConfigError> {
        let mut raw = match path {
            Some(p) => RawConfig::from_file(p)?,
            None => RawConfig::default(),
        };
        raw.apply(overrides)?;
        Config::from_raw(raw)
    }

    /// Validates, applying defaults. Every problem is reported, each naming its field.
    pub fn from_raw(raw: RawConfig) -> Result<Self, ConfigError> {
        let mut errors = Vec::new();
        let mut err = |field: &str, message: String| {
            errors.push(FieldError {
                field: field.to_string(),
                message,
            })
        };
        let k = raw.kafka;
        let brokers = k.brokers.unwrap_or_default();
        if brokers.trim().is_empty() {
            err(
                "kafka.brokers",
                "required (the file, --brokers or FAULTLINE_KAFKA_BROKERS)".into(),
            );
        }
        let group_id = k.group_id.unwrap_or_else(|| "faultline".into());
        if group_id.trim().is_empty() {
            err("kafka.group_id", "must not be empty".into());
        }
        let mut topics = Vec::new();
        let mut bad_topic = false;
        for (i, t) in k.topics.unwrap_or_default().into_iter().enumerate() {
            let t = t.trim().to_string();
            bad_topic |= t.is_empty();
            if t.is_empty() {
                err(&format!("kafka.topics[{i}]"), "empty topic name".into());
            } else if t.starts_with('^') {
                match regex::Regex::new(&t) {
                    Ok(_) => topics.push(TopicSpec::Pattern(t)),
                    Err(e) => {
                        bad_topic = true;
                        err(
                            &format!("kafka.topics[{i}]"),
                            format!("not a valid regular expression: {e}"),
                        )
                    }
                }
            } else if let Some(bad) = t
                .chars()
                .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
            {
                bad_topic = true;
                err(
                    &format!("kafka.topics[{i}]"),
                    format!(
                        "{t:?} is not a topic name ({bad:?} is not allowed; start a regular \
                         expression with ^)"
                    ),
                );
            } else {
                topics.push(TopicSpec::Name(t));
            }
        }
        if topics.is_empty() && !bad_topic {
            err(
                "kafka.topics",
                "at least one topic is required (the file, --topic or FAULTLINE_KAFKA_TOPICS)"
                    .into(),
            );
        }
        let auto_offset_reset = k.auto_offset_reset.unwrap_or_else(|| "earliest".into());
        if !["earliest", "latest"].contains(&auto_offset_reset.as_str()) {
            err(
                "kafka.auto_offset_reset",
                format!("{auto_offset_reset:?}: expected earliest or latest"),
            );
        }
        let commit_interval_ms = k.commit_interval_ms.unwrap_or(5_000);
        if commit_interval_ms == 0 {
            err(
                "kafka.commit_interval_ms",
                "must be positive (faultline never commits per record)".into(),
            );
        }
        let drain_timeout_ms = k.drain_timeout_ms.unwrap_or(10_000);
        for (field, map) in [
            ("kafka.options", &k.options),
            ("kafka.consumer_options", &k.consumer_options),
            ("kafka.producer_options", &k.producer_options),
        ] {
            for key in map.keys() {
                if let Some((_, why)) = MANAGED.iter().find(|(m, _)| m == key) {
                    err(
                        &format!("{field}.\"{key}\""),
                        format!("not settable: {why}"),
                    );
                }
            }
        }

        let i = raw.input;
        let envelope = match i.envelope.as_deref().unwrap_or("auto") {
            "auto" => EnvelopeMode::Auto,
            "text" => EnvelopeMode::Text,
            "json" => EnvelopeMode::Json,
            other => {
                err(
                    "input.envelope",
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
                    err(
                        "input.job_id",
                        format!("{other:?}: expected envelope, key or header:NAME"),
                    );
                    JobIdFrom::Envelope
                }
            },
        };
        let default_job_id = i.default_job_id.unwrap_or_else(|| "unknown".into());
        let max_record_bytes = i.max_record_bytes.unwrap_or(1 << 20);
        if max_record_bytes == 0 {
            err("input.max_record_bytes", "must be positive".into());
        }

        let output_topic = raw
            .output
            .topic
            .unwrap_or_else(|| DEFAULT_OUTPUT_TOPIC.into());
        if output_topic.trim().is_empty() {
            err("output.topic", "must not be empty".into());
        }
        let d = raw.dead_letter;
        let dl_topic = d.topic.unwrap_or_else(|| DEFAULT_DEAD_LETTER_TOPIC.into());
        if dl_topic.trim().is_empty() {
            err("dead_letter.topic", "must not be empty".into());
        }
        for (field, topic) in [
            ("output.topic", &output_topic),
            ("dead_letter.topic", &dl_topic),
        ] {
            if topics.iter().any(|t| t == &TopicSpec::Name(topic.clone())) {
                err(
                    field,
                    format!(
                        "{topic:?} is also an input topic; faultline would read its own output"
                    ),
                );
            }
        }
        let ratio = d.max_invalid_ratio.unwrap_or(0.1);
        if !(0.0..=1.0).contains(&ratio) || ratio.is_nan() {
            err(
                "dead_letter.max_invalid_ratio",
                format!("{ratio}: expected a number from 0 to 1 (1 disables the limit)"),
            );
        }
        let window = d.invalid_window.unwrap_or(1_000);
        if window == 0 {
            err("dead_letter.invalid_window", "must be positive".into());
        }
        let consecutive = d.max_consecutive_invalid.unwrap_or(100);
        for (i, rule) in raw.redact.extra.iter().enumerate() {
            if let Err(e) = rule.check() {
                err(&format!("redact.extra[{i}]"), e.to_string());
            }
        }

        let p = raw.pipeline;
        let batch_max_records = p.batch_max_records.unwrap_or(1_000);
        if batch_max_records == 0 {
            err("pipeline.batch_max_records", "must be positive".into());
        }
        let batch_max_bytes = p.batch_max_bytes.unwrap_or(1 << 20);
        if batch_max_bytes == 0 {
            err("pipeline.batch_max_bytes", "must be positive".into());
        }
        let queue_batches = p.queue_batches.unwrap_or(4);
        if queue_batches == 0 {
            err("pipeline.queue_batches", "must be positive".into());
        }

        if let Some(dir) = &raw.kb.dir {
            if dir.as_os_str().is_empty() {
                err("kb.dir", "must not be empty".into());
            }
        }
        let watch_ms = raw.kb.watch_interval_ms.unwrap_or(3_000);

        let listen = match raw.admin.listen.as_deref().unwrap_or(DEFAULT_ADMIN_LISTEN) {
            "off" | "" => None,
            addr => match addr.parse::<SocketAddr>() {
                Ok(a) => Some(a),
                Err(e) => {
                    err(
                        "admin.listen",
                        format!("{addr:?}: {e} (expected IP:PORT, or off)"),
                    );
                    None
                }
            },
        };
        let stall_ms = raw.admin.stall_timeout_ms.unwrap_or(60_000);
        if stall_ms == 0 {
            err("admin.stall_timeout_ms", "must be positive".into());
        }

        let metrics = crate::metrics::MetricsConfig::from_raw(&raw.metrics).unwrap_or_else(|e| {
            err("metrics", e.to_string());
            crate::metrics::MetricsConfig::default()
        });
        let telemetry =
            crate::telemetry::TelemetryConfig::resolve(&raw.telemetry, |k| std::env::var(k).ok());
        let telemetry = match telemetry {
            Ok(t) => Some(t),
            Err(e) => {
                err("telemetry", e.to_string());
                None
            }
        };
        let incidents = crate::pipeline::incidents::IncidentsConfig::from_raw(
            &raw.incidents,
            &raw.webhook,
            &mut err,
        );
        if let Some(inc) = &incidents {
            if topics
                .iter()
                .any(|t| t == &TopicSpec::Name(inc.topic.clone()))
            {
                err(
                    "incidents.topic",
                    format!(
                        "{:?} is also an input topic; faultline would read its own output",
                        inc.topic
                    ),
                );
            }
        }
        let Some(telemetry) = telemetry.filter(|_| errors.is_empty()) else {
            return Err(ConfigError::Invalid(errors));
        };
        Ok(Config {
            metrics,
            telemetry,
            incidents,
            kafka: KafkaConfig {
                brokers,
                group_id,
                topics,
                auto_offset_reset,
                commit_interval: Duration::from_millis(commit_interval_ms),
                drain_timeout: Duration::from_millis(drain_timeout_ms),
                options: KafkaOptions(k.options),
                consumer_options: KafkaOptions(k.consumer_options),
                producer_options: KafkaOptions(k.producer_options),
            },
            input: InputConfig {
                envelope,
                job_id,
                default_job_id,
                max_record_bytes,
            },
            output_topic,
            dead_letter: DeadLetterConfig {
                topic: dl_topic,
                limits: InvalidLimits {
                    max_ratio: (ratio < 1.0).then_some(ratio),
                    window,
                    max_consecutive: (consecutive > 0).then_some(consecutive),
                },
                redact: d.redact.unwrap_or(false),
            },
            redact: RedactConfig {
                enabled: raw.redact.enabled.unwrap_or(true),
                extra: raw.redact.extra,
            },
            pipeline: PipelineConfig {
                batch_max_records,
                batch_max_bytes,
                batch_linger: Duration::from_millis(p.batch_linger_ms.unwrap_or(20)),
                queue_batches,
            },
            kb: KbConfig {
                dir: raw.kb.dir,
                watch_interval: (watch_ms > 0).then(|| Duration::from_millis(watch_ms)),
            },
            admin: AdminConfig {
                listen,
                stall_timeout: Duration::from_millis(stall_ms),
            },
        })
    }

    /// The effective configuration as TOML-like text, secrets redacted: for `--check-config`
    /// and the startup log.
    pub fn redacted(&self) -> String {
        let k = &self.kafka;
        let mut s = String::new();
        let mut line = |l: String| {
            s.push_str(&l);
            s.push('\n');
        };
        line("[kafka]".into());
        line(format!("brokers = {:?}", k.brokers));
        line(format!("group_id = {:?}", k.group_id));
        let topics: Vec<&str> = k.topics.iter().map(TopicSpec::as_subscription).collect();
        line(format!("topics = {topics:?}"));
        line(format!("auto_offset_reset = {:?}", k.auto_offset_reset));
        line(format!(
            "commit_interval_ms = {}",
            k.commit_interval.as_millis()
        ));
        line(format!(
            "drain_timeout_ms = {}",
            k.drain_timeout.as_millis()
        ));
        for (name, map) in [
            ("options", &k.options),
            ("consumer_options", &k.consumer_options),
            ("producer_options", &k.producer_options),
        ] {
            if !map.0.is_empty() {
                line(format!("[kafka.{name}]"));
                for (key, value) in &map.0 {
                    line(format!("{key:?} = {:?}", redact(key, value)));
                }
            }
        }
        line("[input]".into());
        line(format!(
            "envelope = {:?}",
            format!("{:?}", self.input.envelope).to_lowercase()
        ));
        let job = match &self.input.job_id {
            JobIdFrom::Envelope => "envelope".to_string(),
            JobIdFrom::Key => "key".to_string(),
            JobIdFrom::Header(h) => format!("header:{h}"),
        };
        line(format!("job_id = {job:?}"));
        line(format!("default_job_id = {:?}", self.input.default_job_id));
        line(format!(
            "max_record_bytes = {}",
            self.input.max_record_bytes
        ));
        line("[output]".into());
        line(format!("topic = {:?}", self.output_topic));
        let d = &self.dead_letter;
        line("[dead_letter]".into());
        line(format!("topic = {:?}", d.topic));
        line(format!(
            "max_invalid_ratio = {}",
            d.limits.max_ratio.unwrap_or(1.0)
        ));
        line(format!("invalid_window = {}", d.limits.window));
        line(format!(
            "max_consecutive_invalid = {}",
            d.limits.max_consecutive.unwrap_or(0)
        ));
        line(format!("redact = {}", d.redact));
        let p = &self.pipeline;
        line("[pipeline]".into());
        line(format!("batch_max_records = {}", p.batch_max_records));
        line(format!("batch_max_bytes = {}", p.batch_max_bytes));
        line(format!("batch_linger_ms = {}", p.batch_linger.as_millis()));
        line(format!("queue_batches = {}", p.queue_batches));
        line("[kb]".into());
        match &self.kb.dir {
            Some(d) => line(format!("dir = {:?}", d.display().to_string())),
            None => line("# dir: the built-in KB".into()),
        }
        line(format!(
            "watch_interval_ms = {}",
            self.kb.watch_interval.map_or(0, |d| d.as_millis())
        ));
        line("[admin]".into());
        line(format!(
            "listen = {:?}",
            self.admin
                .listen
                .map_or_else(|| "off".to_string(), |a| a.to_string())
        ));
        line(format!(
            "stall_timeout_ms = {}",
            self.admin.stall_timeout.as_millis()
        ));
        line("[redact]".into());
        line(format!("enabled = {}", self.redact.enabled));
        let extra: Vec<String> = self
            .redact
            .extra
            .iter()
            .map(|r| {
                format!(
                    "{{ name = {}, pattern = {} }}",
                    toml::Value::String(r.name.clone()),
                    toml::Value::String(r.pattern.clone())
                )
            })
            .collect();
        line(format!("extra = [{}]", extra.join(", ")));
        if let Some(inc) = &self.incidents {
            inc.redacted(&mut line);
        }
        s
    }
}

/// The librdkafka properties of both clients, decided in one place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaSettings {
    pub consumer: Vec<(String, String)>,
    pub producer: Vec<(String, String)>,
}

/// Every librdkafka property faultline sets. Pass-through options come last and win over the
/// defaults here (but not over the managed ones, which validation forbids).
pub fn kafka_settings(k: &KafkaConfig) -> KafkaSettings {
    let s = |a: &str, b: &str| (a.to_string(), b.to_string());
    let mut consumer = vec![
        s("bootstrap.servers", &k.brokers),
        s("client.id", "faultline"),
        s("group.id", &k.group_id),
        s("partition.assignment.strategy", "cooperative-sticky"),
        s("auto.offset.reset", &k.auto_offset_reset),
        // Offsets are stored by faultline once a record and all before it are terminal, and
        // librdkafka commits what is stored, asynchronously, every interval.
        s("enable.auto.offset.store", "false"),
        s("enable.auto.commit", "true"),
        s(
            "auto.commit.interval.ms",
            &k.commit_interval.as_millis().to_string(),
        ),
        // Bounded prefetch: memory stays bounded under a large lag. (queued.min.messages stays
        // at librdkafka's 100000: lower values mean many more, smaller fetches.)
        s("queued.max.messages.kbytes", "16384"),
        // When the prefetch is full, librdkafka waits this long before fetching again
        // (default 1 s): with a bounded prefetch and a fast consumer, that wait dominated and
        // capped throughput at a sixth of what it is with 20 ms.
        s("fetch.queue.backoff.ms", "20"),
        s("fetch.max.bytes", "16777216"),
        s("max.partition.fetch.bytes", "1048576"),
    ];
    let mut producer = vec![
        s("bootstrap.servers", &k.brokers),
        s("client.id", "faultline"),
        s("acks", "all"),
        s("enable.idempotence", "true"),
        s("linger.ms", "5"),
        // Bounded producer queue: a slow output blocks the matcher, which fills the bounded
        // queue, which pauses consumption.
        s("queue.buffering.max.kbytes", "65536"),
        s("queue.buffering.max.messages", "100000"),
    ];
    for (key, value) in k.options.0.iter().chain(&k.consumer_options.0) {
        consumer.retain(|(k, _)| k != key);
        consumer.push((key.clone(), value.clone()));
    }
    for (key, value) in k.options.0.iter().chain(&k.producer_options.0) {
        producer.retain(|(k, _)| k != key);
        producer.push((key.clone(), value.clone()));
    }
    KafkaSettings { consumer, producer }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::from_raw(
            RawConfig::from_toml(text).map_err(|message| ConfigError::Parse {
                path: "t.toml".into(),
                message,
            })?,
        )
    }

    fn fields(e: ConfigError) -> Vec<String> {
        match e {
            ConfigError::Invalid(v) => v.into_iter().map(|e| e.field).collect(),
            other => panic!("expected field errors, got {other}"),
        }
    }

    const MINIMAL: &str = "[kafka]\nbrokers = \"b:9092\"\ntopics = [\"logs\"]\n";

    #[test]
    fn minimal_config_gets_defaults() {
        let c = parse(MINIMAL).expect("valid");
        assert_eq!(c.kafka.group_id, "faultline");
        assert_eq!(c.kafka.topics, vec![TopicSpec::Name("logs".into())]);
        assert_eq!(c.output_topic, DEFAULT_OUTPUT_TOPIC);
        assert_eq!(c.input.envelope, EnvelopeMode::Auto);
        assert_eq!(c.input.job_id, JobIdFrom::Envelope);
        assert_eq!(
            c.admin.listen,
            Some(DEFAULT_ADMIN_LISTEN.parse().expect("addr"))
        );
        assert!(c.admin.listen.expect("addr").ip().is_loopback());
        assert_eq!(c.dead_letter.limits.max_consecutive, Some(100));
    }

    #[test]
    fn unknown_fields_are_rejected_with_their_name() {
        let e = RawConfig::from_toml("[kafka]\nbrokerz = \"x\"\n").expect_err("unknown");
        assert!(e.contains("brokerz"), "{e}");
    }

    #[test]
    fn every_problem_names_its_field() {
        let e = parse(
            r#"
[kafka]
topics = ["ok", "bad topic", "^(unclosed"]
auto_offset_reset = "middle"
commit_interval_ms = 0
[kafka.options]
"enable.auto.offset.store" = "true"
[input]
envelope = "xml"
job_id = "header:"
[dead_letter]
max_invalid_ratio = 1.5
[admin]
listen = "localhost"
"#,
        )
        .expect_err("invalid");
        let f = fields(e);
        for want in [
            "kafka.brokers",
            "kafka.topics[1]",
            "kafka.topics[2]",
            "kafka.auto_offset_reset",
            "kafka.commit_interval_ms",
            "kafka.options.\"enable.auto.offset.store\"",
            "input.envelope",
            "input.job_id",
            "dead_letter.max_invalid_ratio",
            "admin.listen",
        ] {
            assert!(f.iter().any(|x| x == want), "{want} missing from {f:?}");
        }
    }

    #[test]
    fn output_topic_must_not_be_an_input() {
        let e =
            parse("[kafka]\nbrokers = \"b\"\ntopics = [\"logs\"]\n[output]\ntopic = \"logs\"\n")
                .expect_err("loop");
        assert_eq!(fields(e), vec!["output.topic".to_string()]);
    }

    #[test]
    fn overrides_win_over_the_file() {
        let mut raw = RawConfig::from_toml(MINIMAL).expect("parses");
        let o = Overrides {
            brokers: Some("other:1".into()),
            topics: vec!["a".into(), "^b.*".into()],
            options: vec!["sasl.password=hunter2".into()],
            job_id: Some("header:job".into()),
            admin_listen: Some("off".into()),
            ..Default::default()
        };
        raw.apply(&o).expect("applies");
        let c = Config::from_raw(raw).expect("valid");
        assert_eq!(c.kafka.brokers, "other:1");
        assert_eq!(
            c.kafka.topics,
            vec![
                TopicSpec::Name("a".into()),
                TopicSpec::Pattern("^b.*".into())
            ]
        );
        assert_eq!(c.input.job_id, JobIdFrom::Header("job".into()));
        assert_eq!(c.admin.listen, None);
        let bad = Overrides {
            options: vec!["novalue".into()],
            ..Default::default()
        };
        let mut raw = RawConfig::default();
        assert_eq!(
            fields(raw.apply(&bad).expect_err("bad")),
            vec!["--kafka-option"]
        );
    }

    #[test]
    fn secrets_are_redacted() {
        let c = parse(
            r#"
[kafka]
brokers = "b"
topics = ["t"]
[kafka.options]
"sasl.password" = "hunter2"
"ssl.key.location" = "/secret/path"
"sasl.oauthbearer.client.secret" = "s3"
"sasl.username" = "alice"
"#,
        )
        .expect("valid");
        let text = c.redacted();
        let debug = format!("{c:?}");
        for out in [&text, &debug] {
            assert!(!out.contains("hunter2"), "{out}");
            assert!(!out.contains("/secret/path"), "{out}");
            assert!(!out.contains("s3\""), "{out}");
            assert!(out.contains("alice"), "{out}");
        }
        // The redacted text is itself a valid configuration file, modulo the redactions.
        assert!(RawConfig::from_toml(&text).is_ok(), "{text}");
    }

    #[test]
    fn redaction_settings_default_parse_and_name_bad_rules() {
        let c = parse(MINIMAL).expect("valid");
        assert_eq!(
            c.redact,
            RedactConfig {
                enabled: true,
                extra: Vec::new()
            }
        );
        assert!(
            !c.dead_letter.redact,
            "dead letters keep the original bytes"
        );

        let c = parse(&format!(
            "{MINIMAL}[dead_letter]\nredact = true\n[redact]\nenabled = false\n\
             extra = [{{ name = \"internal_token\", pattern = 'itk_(?P<secret>[a-z0-9]{{8}})' }}]\n"
        ))
        .expect("valid");
        assert!(c.dead_letter.redact);
        assert!(!c.redact.enabled);
        assert_eq!(c.redact.extra.len(), 1);
        let rules = c.redact.rules().expect("compiles");
        assert!(rules.rule_names().any(|n| n == "internal_token"));
        assert_eq!(
            rules.redact_str("x itk_abcdef12 y"),
            "x itk_[REDACTED:internal_token] y"
        );
        // The effective configuration shows them, and reads back the same.
        let text = c.redacted();
        assert!(text.contains("[redact]\nenabled = false\n"), "{text}");
        assert!(
            text.contains("[dead_letter]") && text.contains("redact = true"),
            "{text}"
        );
        let again = Config::from_raw(RawConfig::from_toml(&text).expect("parses")).expect("valid");
        assert_eq!(again.redact, c.redact);
        assert!(again.dead_letter.redact);

        let e = parse(&format!(
            "{MINIMAL}[redact]\nextra = [{{ name = \"Bad-Name\", pattern = 'x' }}, \
             {{ name = \"ok\", pattern = 'ok' }}, {{ name = \"open\", pattern = '(' }}]\n"
        ))
        .expect_err("invalid");
        assert_eq!(fields(e), vec!["redact.extra[0]", "redact.extra[2]"]);
        let e = RawConfig::from_toml("[redact]\nextras = []\n").expect_err("unknown");
        assert!(e.contains("extras"), "{e}");
    }

    #[test]
    fn redaction_flags_and_variables_override_the_file() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            o: Overrides,
        }
        let cli = Cli::try_parse_from([
            "t",
            "--redact-enabled",
            "false",
            "--dead-letter-redact",
            "true",
            "--redact",
            "a=aa(?P<secret>[0-9]{4})",
            "--redact",
            "b=bb[0-9]{4}",
        ])
        .expect("parses");
        let mut raw = RawConfig::from_toml(&format!(
            "{MINIMAL}[redact]\nextra = [{{ name = \"file\", pattern = 'ff[0-9]{{4}}' }}]\n"
        ))
        .expect("parses");
        raw.apply(&cli.o).expect("applies");
        let c = Config::from_raw(raw).expect("valid");
        assert!(!c.redact.enabled && c.dead_letter.redact);
        let names: Vec<&str> = c.redact.extra.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["a", "b"], "the flags replace the file's rules");
        assert!(Cli::try_parse_from(["t", "--redact-enabled", "maybe"]).is_err());
    }

    #[test]
    fn kafka_settings_keep_the_guarantees_and_pass_options_through() {
        let c = parse(
            r#"
[kafka]
brokers = "b:1"
topics = ["t"]
[kafka.options]
"security.protocol" = "sasl_ssl"
"linger.ms" = "50"
[kafka.consumer_options]
"fetch.max.bytes" = "1000"
"#,
        )
        .expect("valid");
        let s = kafka_settings(&c.kafka);
        let get = |v: &[(String, String)], k: &str| {
            v.iter().find(|(x, _)| x == k).map(|(_, v)| v.clone())
        };
        assert_eq!(
            get(&s.consumer, "enable.auto.offset.store").as_deref(),
            Some("false")
        );
        assert_eq!(
            get(&s.consumer, "partition.assignment.strategy").as_deref(),
            Some("cooperative-sticky")
        );
        assert_eq!(get(&s.consumer, "fetch.max.bytes").as_deref(), Some("1000"));
        assert_eq!(get(&s.producer, "fetch.max.bytes"), None);
        assert_eq!(get(&s.producer, "linger.ms").as_deref(), Some("50"));
        assert_eq!(
            get(&s.producer, "security.protocol").as_deref(),
            Some("sasl_ssl")
        );
        assert_eq!(
            s.consumer.iter().filter(|(k, _)| k == "linger.ms").count(),
            1
        );
    }
}
