//! `faultline run` settings: `faultline.toml` as written ([`RawConfig`]) -> validated [`Config`].
//!
//! Each component owns its table ([`crate::section`] says how): `[kafka]` in [`crate::kafka`],
//! `[input]`, `[dead_letter]` and `[pipeline]` in [`crate::pipeline::config`] (read by
//! [`crate::pipeline::decode`]), `[output]` in [`crate::sink::kafka`], `[kb]` in [`crate::reload`],
//! `[admin]` in [`crate::server`], `[redact]` in [`crate::redact`], `[metrics]` in
//! [`crate::metrics`], `[telemetry]` in [`crate::telemetry`], `[incidents]` in
//! [`crate::incident::config`], `[webhook]` in [`crate::sink::webhook`], `[alertmanager]` in
//! [`crate::sink::alertmanager`], `[unknown]` in [`crate::unknown::config`]. This module composes
//! them and checks the rules that span tables (no output topic may be an input topic).
//!
//! Every setting can come from the file, a flag or an environment variable ([`Overrides`]); a
//! flag or variable wins over the file, the file over the default. Validation collects every
//! problem and names its field (`kafka.brokers`, `dead_letter.max_invalid_ratio`...). Loading
//! has no side effects: nothing connects, binds or spawns here.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::incident::config::{IncidentsConfig, RawIncidentsConfig};
use crate::kafka::{KafkaConfig, RawKafka};
use crate::metrics::{MetricsConfig, RawMetricsConfig};
use crate::pipeline::config::{
    DeadLetterConfig, InputConfig, PipelineConfig, RawDeadLetter, RawInput, RawPipeline,
};
pub use crate::pipeline::settings::{Config, IncidentOutputConfig};
use crate::redact::{RawRedact, RedactConfig};
use crate::reload::{KbConfig, RawKb};
pub use crate::section::FieldError;
use crate::section::{redact, Errors, Printer};
use crate::server::{AdminConfig, RawAdmin};
use crate::sink::alertmanager::{AlertmanagerConfig, RawAlertmanagerConfig};
use crate::sink::kafka::{OutputConfig, RawOutput};
use crate::sink::webhook::{RawWebhookConfig, RunWebhookConfig};
use crate::telemetry::{RawTelemetryConfig, TelemetryConfig};
use crate::unknown::{RawUnknownConfig, UnknownConfig};

/// The file as written. Every field is optional; defaults are applied by [`Config::from_raw`].
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// `[kafka]`: brokers, group, topics and librdkafka options.
    #[serde(default)]
    pub kafka: RawKafka,
    /// `[input]`: envelope mode, where the job id comes from, record size limit.
    #[serde(default)]
    pub input: RawInput,
    /// `[output]`: the match events topic.
    #[serde(default)]
    pub output: RawOutput,
    /// `[dead_letter]`: the dead-letter topic and the limits on undecodable records.
    #[serde(default)]
    pub dead_letter: RawDeadLetter,
    /// `[pipeline]`: batch sizes, linger and queue depth.
    #[serde(default)]
    pub pipeline: RawPipeline,
    /// `[kb]`: the KB directory and how often it is polled.
    #[serde(default)]
    pub kb: RawKb,
    /// `[admin]`: the admin HTTP address and the stall timeout.
    #[serde(default)]
    pub admin: RawAdmin,
    /// `[metrics]`: extra label dimensions of `faultline_matches_total`.
    #[serde(default)]
    pub metrics: RawMetricsConfig,
    /// `[telemetry]`: OTLP span export; the standard `OTEL_*` variables win over it.
    #[serde(default)]
    pub telemetry: RawTelemetryConfig,
    /// `[redact]`: secret redaction of events (and of dead letters with `dead_letter.redact`).
    #[serde(default)]
    pub redact: RawRedact,
    /// `[incidents]`: correlation and the incidents topic (on when `topic` is set).
    #[serde(default)]
    pub incidents: RawIncidentsConfig,
    /// `[webhook]`: tickets for incidents (on when `url` is set; needs `[incidents]`).
    #[serde(default)]
    pub webhook: RawWebhookConfig,
    /// `[unknown]`: live templates and events of error lines no KB entry knows (on by default).
    #[serde(default)]
    pub unknown: RawUnknownConfig,
    /// `[alertmanager]`: incidents as Alertmanager alerts (on when `url` is set; needs
    /// `[incidents]`).
    #[serde(default)]
    pub alertmanager: RawAlertmanagerConfig,
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
    /// Every other setting, as a flag or environment variable.
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
    /// Static group membership: this instance's stable name, e.g. the pod name of a
    /// StatefulSet (`kafka.instance_id`).
    #[arg(long, env = "FAULTLINE_KAFKA_INSTANCE_ID", value_name = "NAME")]
    pub instance_id: Option<String>,
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
    /// Stop gracefully once every assigned partition has been read to its end, as `kcat -e`
    /// does: for replaying a backlog (`kafka.exit_at_end`).
    #[arg(
        long,
        env = "FAULTLINE_KAFKA_EXIT_AT_END",
        value_name = "BOOL",
        num_args = 0..=1,
        default_missing_value = "true"
    )]
    pub exit_at_end: Option<bool>,
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
    /// Directory of the crash notes that find a record killing the process
    /// (`pipeline.state_dir`); off when unset.
    #[arg(long, env = "FAULTLINE_PIPELINE_STATE_DIR", value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
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
    /// What this process does: all, match or correlate (`incidents.role`).
    #[arg(long, env = "FAULTLINE_INCIDENTS_ROLE", value_name = "ROLE")]
    pub role: Option<String>,
    /// Bearer token of the incident pages and API (`admin.token`); prefer the variable, a flag
    /// shows in the process list.
    #[arg(
        long,
        env = "FAULTLINE_ADMIN_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    pub admin_token: Option<String>,
    /// Alertmanager to post incidents to (`alertmanager.url`).
    #[arg(long, env = "FAULTLINE_ALERTMANAGER_URL", value_name = "URL")]
    pub alertmanager_url: Option<String>,
}

/// Why a configuration was rejected.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {error}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The read error.
        error: std::io::Error,
    },
    /// The file is not valid TOML or has an unknown field.
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message.
        message: String,
    },
    /// Fields failed validation; every problem found.
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

    /// Parses TOML text (unknown fields are errors); the error is the parser's message.
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
        set(&mut k.instance_id, &o.instance_id);
        if !o.topics.is_empty() {
            k.topics = Some(o.topics.clone());
        }
        set(&mut k.auto_offset_reset, &o.auto_offset_reset);
        set(&mut k.commit_interval_ms, &o.commit_interval_ms);
        set(&mut k.drain_timeout_ms, &o.drain_timeout_ms);
        set(&mut k.exit_at_end, &o.exit_at_end);
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
        set(&mut p.state_dir, &o.state_dir);
        set(&mut self.kb.dir, &o.kb_dir);
        set(&mut self.kb.watch_interval_ms, &o.kb_watch_interval_ms);
        set(&mut self.admin.listen, &o.admin_listen);
        set(&mut self.admin.stall_timeout_ms, &o.stall_timeout_ms);
        set(&mut self.incidents.role, &o.role);
        if o.admin_token.is_some() {
            // The variable replaces the file's token, whichever way the file gives it.
            self.admin.token_file = None;
            set(&mut self.admin.token, &o.admin_token);
        }
        set(&mut self.alertmanager.url, &o.alertmanager_url);
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
        // A correlator reads the events topic (`output.topic`), not `kafka.topics`.
        let correlator_only = raw.incidents.role.as_deref() == Some("correlate");
        let kafka = KafkaConfig::from_raw_for(
            raw.kafka,
            &mut Errors::new("kafka", &mut errors),
            !correlator_only,
        );
        let input = InputConfig::from_raw(raw.input, &mut Errors::new("input", &mut errors));
        let output = OutputConfig::from_raw(raw.output, &mut Errors::new("output", &mut errors));
        let dead_letter = DeadLetterConfig::from_raw(
            raw.dead_letter,
            &mut Errors::new("dead_letter", &mut errors),
        );
        let redact = RedactConfig::from_raw(raw.redact, &mut Errors::new("redact", &mut errors));
        let pipeline =
            PipelineConfig::from_raw(raw.pipeline, &mut Errors::new("pipeline", &mut errors));
        let kb = KbConfig::from_raw(raw.kb, &mut Errors::new("kb", &mut errors));
        let admin = AdminConfig::from_raw(raw.admin, &mut Errors::new("admin", &mut errors));
        let mut rules = Errors::new("", &mut errors);
        let metrics = MetricsConfig::from_raw(&raw.metrics).unwrap_or_else(|e| {
            rules.push_field("metrics", e.to_string());
            MetricsConfig::default()
        });
        let telemetry = match TelemetryConfig::resolve(&raw.telemetry, |k| std::env::var(k).ok()) {
            Ok(t) => Some(t),
            Err(e) => {
                rules.push_field("telemetry", e.to_string());
                None
            }
        };
        let incidents =
            IncidentsConfig::from_raw(&raw.incidents, &mut Errors::new("incidents", &mut errors));
        let unknown =
            UnknownConfig::from_raw(&raw.unknown, &mut Errors::new("unknown", &mut errors));
        // The incident outputs, one line each (`crate::sink::output` says how to add one).
        let incident_outputs: Vec<IncidentOutputConfig> = [
            RunWebhookConfig::from_raw(&raw.webhook, &mut Errors::new("webhook", &mut errors))
                .map(IncidentOutputConfig::Webhook),
            AlertmanagerConfig::from_raw(
                &raw.alertmanager,
                &mut Errors::new("alertmanager", &mut errors),
            )
            .map(IncidentOutputConfig::Alertmanager),
        ]
        .into_iter()
        .flatten()
        .collect();
        // Rules that span tables.
        let mut rules = Errors::new("", &mut errors);
        if raw.incidents.topic.is_none() {
            for o in &incident_outputs {
                rules.push_field(
                    &format!("{}.url", o.section().name()),
                    "needs incidents.topic: outputs follow the incidents the service produces",
                );
            }
        }
        if raw.incidents.topic.is_none()
            && raw.incidents.role.as_deref().is_some_and(|r| r != "all")
        {
            rules.push_field(
                "incidents.role",
                "needs incidents.topic: match members feed a correlator, which produces incidents",
            );
        }
        let correlating = incidents
            .as_ref()
            .is_some_and(|i| i.role == crate::incident::config::ProcessRole::Correlate);
        if correlating {
            // The correlator reads the events topic: it may not write there.
            for (field, topic) in [
                ("dead_letter.topic", Some(&dead_letter.topic)),
                (
                    "dead_letter.undeliverable_topic",
                    dead_letter.undeliverable_topic.as_ref(),
                ),
                ("incidents.topic", incidents.as_ref().map(|i| &i.topic)),
            ] {
                if topic == Some(&output.topic) {
                    rules.push_field(
                        field,
                        format!(
                            "{:?} is the events topic the correlator reads",
                            output.topic
                        ),
                    );
                }
            }
        }
        let outputs = [
            ("output.topic", Some(&output.topic)),
            ("dead_letter.topic", Some(&dead_letter.topic)),
            (
                "dead_letter.undeliverable_topic",
                dead_letter.undeliverable_topic.as_ref(),
            ),
            ("incidents.topic", incidents.as_ref().map(|i| &i.topic)),
        ];
        for (field, topic) in outputs {
            if let Some(topic) = topic.filter(|t| kafka.reads(t)) {
                rules.push_field(
                    field,
                    format!(
                        "{topic:?} is also an input topic; faultline would read its own output"
                    ),
                );
            }
        }
        let Some(telemetry) = telemetry.filter(|_| errors.is_empty()) else {
            return Err(ConfigError::Invalid(errors));
        };
        Ok(Config {
            kafka,
            input,
            output,
            dead_letter,
            pipeline,
            kb,
            admin,
            metrics,
            telemetry,
            redact,
            outputs: if incidents.is_some() {
                incident_outputs
            } else {
                Vec::new()
            },
            incidents,
            unknown,
        })
    }

    /// The effective configuration as TOML-like text, secrets redacted: for `--check-config`
    /// and the startup log.
    pub fn redacted(&self) -> String {
        let mut p = Printer::default();
        self.kafka.print(&mut p);
        self.input.print(&mut p);
        self.output.print(&mut p);
        self.dead_letter.print(&mut p);
        self.pipeline.print(&mut p);
        self.kb.print(&mut p);
        self.admin.print(&mut p);
        self.redact.print(&mut p);
        if let Some(inc) = &self.incidents {
            inc.print(&mut p);
        }
        self.unknown.print(&mut p);
        for o in &self.outputs {
            o.section().print(&mut p);
        }
        p.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kafka::{kafka_settings, TopicSpec};
    use crate::pipeline::config::{EnvelopeMode, JobIdFrom};
    use crate::server::DEFAULT_ADMIN_LISTEN;
    use crate::sink::kafka::DEFAULT_OUTPUT_TOPIC;

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
        assert_eq!(c.output.topic, DEFAULT_OUTPUT_TOPIC);
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
    fn events_carry_the_diagnosis_by_reference_unless_told_otherwise() {
        let c = parse(MINIMAL).expect("valid");
        assert_eq!(c.output.diagnosis, crate::enrich::Detail::Reference);
        let full = parse(&format!("{MINIMAL}[output]\ndiagnosis = \"full\"\n")).expect("valid");
        assert_eq!(full.output.diagnosis, crate::enrich::Detail::Full);
        let e = RawConfig::from_toml(&format!("{MINIMAL}[output]\ndiagnosis = \"some\"\n"))
            .expect_err("invalid");
        assert!(e.contains("diagnosis"), "{e}");
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
    fn a_secret_planted_in_every_field_that_can_hold_one_is_printed_nowhere() {
        // Each secret is distinct, so a leak names its field.
        let c = parse(
            r#"
[kafka]
brokers = "b"
topics = ["t"]
[kafka.options]
"sasl.password" = "S1-kafka-password"
"sasl.oauthbearer.config" = "clientId=x clientSecret=S2-oauth-secret"
"sasl.kerberos.kinit.cmd" = "kinit -S S3-kinit-secret"
"ssl.keystore.password" = "S4-keystore"
[kafka.producer_options]
"ssl.key.password" = "S5-key-password"
[admin]
listen = "0.0.0.0:9477"
token = "S6-admin-token-long-enough"
external_url = "https://ops:S7-external@faultline.example/base?token=S8-query"
[incidents]
topic = "incidents"
[webhook]
url = "http://tickets:S9-webhook@tickets.example/hook?sig=S10-sig"
[webhook.headers]
Authorization = "Bearer S11-header"
[alertmanager]
url = "http://am:S12-am@am.example:9093"
runbook_url = "https://wiki:S13-runbook@wiki.example/runbooks#S14-fragment"
"#,
        )
        .expect("valid");
        let text = c.redacted();
        for n in 1..=14 {
            assert!(
                !text.contains(&format!("S{n}-")),
                "secret S{n} printed:\n{text}"
            );
        }
        assert!(text.contains("faultline.example/base"), "{text}");
        assert!(text.contains("tickets.example/hook"), "{text}");
        // Messages about bad values quote them without their credentials too.
        let bad = parse(
            "[kafka]\nbrokers = \"b\"\ntopics = [\"t\"]\n[admin]\nexternal_url = \"ftp://u:S15-bad@x\"\n",
        )
        .expect_err("ftp is refused");
        let shown = bad.to_string();
        assert!(shown.contains("external_url"), "{shown}");
        assert!(!shown.contains("S15-"), "{shown}");
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
    fn static_membership_sets_group_instance_id_and_commits_are_faultlines() {
        let c = parse(&format!("{MINIMAL}instance_id = \"faultline-0\"\n")).expect("valid");
        let s = kafka_settings(&c.kafka);
        let get = |k: &str| {
            s.consumer
                .iter()
                .find(|(x, _)| x == k)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(get("group.instance.id"), Some("faultline-0"));
        assert_eq!(
            get("enable.auto.commit"),
            Some("false"),
            "source::commit commits"
        );
        let dynamic = kafka_settings(&parse(MINIMAL).expect("valid").kafka);
        assert!(dynamic
            .consumer
            .iter()
            .all(|(k, _)| k != "group.instance.id"));
        for bad in ["", "pod 0", "pod/0"] {
            let e = parse(&format!("{MINIMAL}instance_id = {bad:?}\n")).expect_err(bad);
            assert_eq!(fields(e), ["kafka.instance_id"], "{bad:?}");
        }
        let e = parse(&format!(
            "{MINIMAL}[kafka.consumer_options]\n\"group.instance.id\" = \"x\"\n"
        ))
        .expect_err("managed");
        assert_eq!(fields(e), ["kafka.consumer_options.\"group.instance.id\""]);
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
            get(&s.producer, "compression.type").as_deref(),
            Some("zstd"),
            "compressed by default"
        );
        assert_eq!(get(&s.consumer, "compression.type"), None);
        assert_eq!(
            get(&s.producer, "security.protocol").as_deref(),
            Some("sasl_ssl")
        );
        assert_eq!(
            s.consumer.iter().filter(|(k, _)| k == "linger.ms").count(),
            1
        );
        let c = parse(
            "[kafka]\nbrokers = \"b:1\"\ntopics = [\"t\"]\n\
             [kafka.producer_options]\n\"compression.type\" = \"lz4\"\n",
        )
        .expect("valid");
        let s = kafka_settings(&c.kafka);
        let codecs: Vec<&str> = s
            .producer
            .iter()
            .filter(|(k, _)| k == "compression.type")
            .map(|(_, v)| v.as_str())
            .collect();
        assert_eq!(codecs, ["lz4"], "an explicit codec replaces the default");
    }
}
