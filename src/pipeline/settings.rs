//! The validated settings `faultline run` runs with: every table of `faultline.toml`,
//! validated by the component that owns it. [`crate::config`] builds it (file, flags and
//! environment; the rules that span tables); the pipeline only reads it, so it lives here,
//! below the composition, and imports point down.

use crate::incident::config::IncidentsConfig;
use crate::kafka::KafkaConfig;
use crate::metrics::MetricsConfig;
use crate::pipeline::config::{DeadLetterConfig, InputConfig, PipelineConfig};
use crate::redact::RedactConfig;
use crate::reload::KbConfig;
use crate::server::AdminConfig;
use crate::sink::alertmanager::AlertmanagerConfig;
use crate::sink::kafka::OutputConfig;
use crate::sink::output::OutputSection;
use crate::sink::webhook::RunWebhookConfig;
use crate::telemetry::TelemetryConfig;
use crate::unknown::UnknownConfig;

/// A validated configuration: every section, validated by its component.
#[derive(Debug, Clone)]
pub struct Config {
    /// `[kafka]`.
    pub kafka: KafkaConfig,
    /// `[input]`.
    pub input: InputConfig,
    /// `[output]`.
    pub output: OutputConfig,
    /// `[dead_letter]`.
    pub dead_letter: DeadLetterConfig,
    /// `[pipeline]`.
    pub pipeline: PipelineConfig,
    /// `[kb]`.
    pub kb: KbConfig,
    /// `[admin]`.
    pub admin: AdminConfig,
    /// `[metrics]`.
    pub metrics: MetricsConfig,
    /// `[telemetry]`.
    pub telemetry: TelemetryConfig,
    /// `[redact]`.
    pub redact: RedactConfig,
    /// `[incidents]`; `None`: incidents off.
    pub incidents: Option<IncidentsConfig>,
    /// `[unknown]`.
    pub unknown: UnknownConfig,
    /// The incident outputs (`[webhook]`, `[alertmanager]`), in table order; empty when
    /// incidents are off.
    pub outputs: Vec<IncidentOutputConfig>,
}

/// A configured incident output: one arm per kind ([`crate::sink::output`] says how to add
/// one).
#[derive(Debug, Clone)]
pub enum IncidentOutputConfig {
    /// `[webhook]`: tickets.
    Webhook(RunWebhookConfig),
    /// `[alertmanager]`: alerts.
    Alertmanager(AlertmanagerConfig),
}

impl IncidentOutputConfig {
    /// The arm's table.
    pub fn section(&self) -> &dyn OutputSection {
        match self {
            IncidentOutputConfig::Webhook(c) => c,
            IncidentOutputConfig::Alertmanager(c) => c,
        }
    }
}

impl Config {
    /// The `[webhook]` table, when tickets are on.
    pub fn webhook(&self) -> Option<&RunWebhookConfig> {
        self.outputs.iter().find_map(|o| match o {
            IncidentOutputConfig::Webhook(w) => Some(w),
            _ => None,
        })
    }
}
