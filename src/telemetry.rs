//! OpenTelemetry traces: one span per enriched match, exported over OTLP (gRPC or
//! HTTP/protobuf) to a collector, Jaeger or any OTLP backend.
//!
//! Flow: the pipeline hands each [`MatchEvent`] to [`MatchTracer::record`] after it is
//! produced; the span carries the match in semantic-convention attributes (`exception.type` is
//! the error code, `messaging.kafka.*` the source record) and ends at once. A trace-id ratio
//! sampler decides first, so an unsampled match costs no attribute building. Ended spans wait in
//! the batch span processor's bounded queue and are exported in batches from its own thread.
//!
//! A match is rarer than a line by orders of magnitude, but a large job failing produces a burst
//! (one NCCL timeout per rank): the queue is sized for that ([`DEFAULT_MAX_QUEUE_SIZE`]), and
//! what still does not fit is dropped and counted in `faultline_spans_dropped_total`, never
//! blocking the pipeline.
//!
//! Incidents (`faultline run` with `[incidents]`): [`IncidentTracer::record`] makes one span
//! when an incident opens and one when it resolves (intermediate updates are left out: a
//! 16,384-rank cascade would add ~15 spans to an incident that two describe), named
//! `faultline.incident`, with the fingerprint, root code, culprit ranks and hosts and cascade
//! count as attributes.
//!
//! Settings come from the `[telemetry]` table ([`RawTelemetryConfig`]) and the standard
//! `OTEL_*` environment variables, which win ([`TelemetryConfig::resolve`]). Resolving has no
//! side effects; [`Telemetry::start`] builds the exporter (the gRPC one needs a Tokio runtime).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use opentelemetry::trace::{Span, SpanKind, Status, Tracer, TracerProvider};
use opentelemetry::KeyValue;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Sampler, SdkTracer, SdkTracerProvider, SpanData,
    SpanExporter, SpanProcessor,
};
use opentelemetry_sdk::Resource;
use prometheus::IntCounter;

use crate::enrich::MatchEvent;
use crate::incident::{IncidentEvent, Status as IncidentStatus};
use crate::kb::Severity;
use crate::metrics::{Metrics, SpanDrop};
use crate::record::Provenance;

/// Spans waiting for export before new ones are dropped: a 4 096-rank job's NCCL cascade
/// fits many times over.
pub const DEFAULT_MAX_QUEUE_SIZE: usize = 65_536;
/// Spans per export request: well under the 4 MiB default gRPC message limit.
pub const DEFAULT_MAX_EXPORT_BATCH_SIZE: usize = 1_024;
/// How long the batch processor waits between exports.
pub const DEFAULT_SCHEDULED_DELAY: Duration = Duration::from_secs(1);
/// The longest one export request may take.
pub const DEFAULT_EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// The `service.name` resource attribute unless the file or `OTEL_SERVICE_NAME` sets one.
pub const DEFAULT_SERVICE_NAME: &str = "faultline";
/// The longest `exception.message` (the matched line) carried by a span.
pub const MAX_MESSAGE_BYTES: usize = 1_024;

/// Errors configuring or starting the exporter; each names its setting.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// A setting is invalid.
    #[error("{field}: {message}")]
    Config {
        /// The setting, with its environment variable where one applies.
        field: String,
        /// What is wrong with its value.
        message: String,
    },
    /// The exporter could not be built.
    #[error("starting the OTLP exporter: {0}")]
    Start(String),
    /// Spans could not be flushed before exit.
    #[error("flushing spans at shutdown: {0}")]
    Shutdown(String),
}

fn config_error(field: &str, message: impl Into<String>) -> TelemetryError {
    TelemetryError::Config {
        field: field.to_string(),
        message: message.into(),
    }
}

/// The OTLP transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// OTLP/gRPC (default port 4317).
    Grpc,
    /// OTLP/HTTP with protobuf bodies (default port 4318, path `/v1/traces`).
    HttpProtobuf,
}

impl Protocol {
    /// The spelling of `OTEL_EXPORTER_OTLP_PROTOCOL`.
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim() {
            "grpc" => Some(Protocol::Grpc),
            "http/protobuf" => Some(Protocol::HttpProtobuf),
            _ => None,
        }
    }
}

/// The `[telemetry]` table of `faultline.toml` as written.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTelemetryConfig {
    /// `otlp` or `none`; tracing is on when an endpoint is set and this is not `none`.
    pub exporter: Option<String>,
    /// Collector address: `http://collector:4317` (gRPC) or `http://collector:4318` (HTTP,
    /// `/v1/traces` is appended).
    pub endpoint: Option<String>,
    /// `grpc` (default) or `http/protobuf`.
    pub protocol: Option<String>,
    /// The `service.name` resource attribute (default [`DEFAULT_SERVICE_NAME`]).
    pub service_name: Option<String>,
    /// Share of matches traced, 0 to 1 (default 1).
    pub sample_ratio: Option<f64>,
    /// Spans waiting for export before new ones are dropped (default
    /// [`DEFAULT_MAX_QUEUE_SIZE`]).
    pub max_queue_size: Option<usize>,
    /// Spans per export request (default [`DEFAULT_MAX_EXPORT_BATCH_SIZE`]).
    pub max_export_batch_size: Option<usize>,
    /// Milliseconds between exports (default [`DEFAULT_SCHEDULED_DELAY`]).
    pub scheduled_delay_ms: Option<u64>,
    /// Milliseconds one export may take (default [`DEFAULT_EXPORT_TIMEOUT`]).
    pub export_timeout_ms: Option<u64>,
}

/// Validated tracing settings.
#[derive(Debug, Clone, PartialEq)]
pub struct TelemetryConfig {
    /// False: no exporter is built and [`Telemetry::start`] returns `None`.
    pub enabled: bool,
    /// The OTLP transport.
    pub protocol: Protocol,
    /// The full URL spans are sent to (for HTTP, including `/v1/traces`).
    pub endpoint: String,
    /// The `service.name` resource attribute.
    pub service_name: String,
    /// From `OTEL_RESOURCE_ATTRIBUTES`.
    pub resource_attributes: Vec<(String, String)>,
    /// Share of matches traced, 0 to 1.
    pub sample_ratio: f64,
    /// Spans waiting for export before new ones are dropped; at least the batch size.
    pub max_queue_size: usize,
    /// Spans per export request.
    pub max_export_batch_size: usize,
    /// Time between exports.
    pub scheduled_delay: Duration,
    /// The longest one export may take.
    pub export_timeout: Duration,
}

impl TelemetryConfig {
    /// Settings from the file's table and the environment (`env` looks a variable up; pass
    /// `|k| std::env::var(k).ok()`). The standard variables win over the file:
    /// `OTEL_SDK_DISABLED`, `OTEL_TRACES_EXPORTER`, `OTEL_EXPORTER_OTLP_ENDPOINT`,
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, `OTEL_EXPORTER_OTLP_PROTOCOL` (and `_TRACES_`),
    /// `OTEL_EXPORTER_OTLP_TIMEOUT`, `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`,
    /// `OTEL_TRACES_SAMPLER`, `OTEL_TRACES_SAMPLER_ARG` and `OTEL_BSP_*`. Headers
    /// (`OTEL_EXPORTER_OTLP_HEADERS`) are read by the exporter itself.
    pub fn resolve(
        raw: &RawTelemetryConfig,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, TelemetryError> {
        let var = |k: &str| env(k).filter(|v| !v.trim().is_empty());
        let protocol_text = var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            .or_else(|| var("OTEL_EXPORTER_OTLP_PROTOCOL"))
            .or_else(|| raw.protocol.clone());
        let protocol = match protocol_text.as_deref() {
            None => Protocol::Grpc,
            Some(p) => Protocol::parse(p).ok_or_else(|| {
                config_error(
                    "telemetry.protocol (OTEL_EXPORTER_OTLP_PROTOCOL)",
                    format!("{p:?} is not grpc or http/protobuf"),
                )
            })?,
        };
        // A signal-specific endpoint is used as is; a base endpoint gets the signal's path
        // over HTTP (the OTLP exporter specification's rule).
        let endpoint = match (
            var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
            var("OTEL_EXPORTER_OTLP_ENDPOINT").or_else(|| raw.endpoint.clone()),
        ) {
            (Some(full), _) => Some(full),
            (None, Some(base)) if protocol == Protocol::HttpProtobuf => {
                Some(format!("{}/v1/traces", base.trim_end_matches('/')))
            }
            (None, base) => base,
        };
        if let Some(e) = &endpoint {
            if !(e.starts_with("http://") || e.starts_with("https://")) {
                return Err(config_error(
                    "telemetry.endpoint (OTEL_EXPORTER_OTLP_ENDPOINT)",
                    format!("{e:?} is not an http:// or https:// URL"),
                ));
            }
        }
        let exporter = var("OTEL_TRACES_EXPORTER").or_else(|| raw.exporter.clone());
        let exporter_on = match exporter.as_deref().map(str::trim) {
            None | Some("otlp") => true,
            Some("none") => false,
            Some(other) => {
                return Err(config_error(
                    "telemetry.exporter (OTEL_TRACES_EXPORTER)",
                    format!("{other:?} is not otlp or none"),
                ))
            }
        };
        let disabled = var("OTEL_SDK_DISABLED").is_some_and(|v| v.trim() == "true");
        let sample_ratio = match var("OTEL_TRACES_SAMPLER").as_deref().map(str::trim) {
            None => raw.sample_ratio.unwrap_or(1.0),
            Some("always_on" | "parentbased_always_on") => 1.0,
            Some("always_off" | "parentbased_always_off") => 0.0,
            Some("traceidratio" | "parentbased_traceidratio") => {
                match var("OTEL_TRACES_SAMPLER_ARG") {
                    Some(arg) => arg.trim().parse::<f64>().map_err(|_| {
                        config_error(
                            "OTEL_TRACES_SAMPLER_ARG",
                            format!("{arg:?} is not a number"),
                        )
                    })?,
                    None => raw.sample_ratio.unwrap_or(1.0),
                }
            }
            Some(other) => {
                return Err(config_error(
                    "OTEL_TRACES_SAMPLER",
                    format!("{other:?} is not supported (always_on, always_off, traceidratio)"),
                ))
            }
        };
        if !(0.0..=1.0).contains(&sample_ratio) {
            return Err(config_error(
                "telemetry.sample_ratio (OTEL_TRACES_SAMPLER_ARG)",
                format!("{sample_ratio} is not between 0 and 1"),
            ));
        }
        let number = |name: &str, file: Option<u64>, default: u64| -> Result<u64, TelemetryError> {
            match var(name) {
                Some(v) => v
                    .trim()
                    .parse()
                    .map_err(|_| config_error(name, format!("{v:?} is not a whole number"))),
                None => Ok(file.unwrap_or(default)),
            }
        };
        let max_queue_size = number(
            "OTEL_BSP_MAX_QUEUE_SIZE",
            raw.max_queue_size.map(|n| n as u64),
            DEFAULT_MAX_QUEUE_SIZE as u64,
        )? as usize;
        let max_export_batch_size = number(
            "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
            raw.max_export_batch_size.map(|n| n as u64),
            DEFAULT_MAX_EXPORT_BATCH_SIZE as u64,
        )? as usize;
        if max_queue_size == 0 || max_export_batch_size == 0 {
            return Err(config_error(
                "telemetry.max_queue_size / max_export_batch_size",
                "must be at least 1",
            ));
        }
        let scheduled_delay = Duration::from_millis(number(
            "OTEL_BSP_SCHEDULE_DELAY",
            raw.scheduled_delay_ms,
            DEFAULT_SCHEDULED_DELAY.as_millis() as u64,
        )?);
        let timeout_file = raw.export_timeout_ms;
        let export_timeout =
            Duration::from_millis(match var("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT") {
                Some(_) => number("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", None, 0)?,
                None => number(
                    "OTEL_EXPORTER_OTLP_TIMEOUT",
                    timeout_file,
                    DEFAULT_EXPORT_TIMEOUT.as_millis() as u64,
                )?,
            });
        let service_name = var("OTEL_SERVICE_NAME")
            .or_else(|| raw.service_name.clone())
            .unwrap_or_else(|| DEFAULT_SERVICE_NAME.to_string());
        let resource_attributes = var("OTEL_RESOURCE_ATTRIBUTES")
            .map(|v| parse_resource_attributes(&v))
            .transpose()?
            .unwrap_or_default();
        Ok(TelemetryConfig {
            enabled: endpoint.is_some() && exporter_on && !disabled,
            protocol,
            endpoint: endpoint.unwrap_or_default(),
            service_name,
            resource_attributes,
            sample_ratio,
            max_queue_size: max_queue_size.max(max_export_batch_size),
            max_export_batch_size,
            scheduled_delay,
            export_timeout,
        })
    }
}

/// `key1=value1,key2=value2`, values percent-decoded as the specification says.
fn parse_resource_attributes(s: &str) -> Result<Vec<(String, String)>, TelemetryError> {
    s.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').ok_or_else(|| {
                config_error(
                    "OTEL_RESOURCE_ATTRIBUTES",
                    format!("{pair:?} is not key=value"),
                )
            })?;
            Ok((k.trim().to_string(), percent_decode(v.trim())))
        })
        .collect()
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (
            b[i],
            b.get(i + 1).copied().and_then(hex),
            b.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Where lost spans are counted.
#[derive(Debug, Clone)]
pub struct SpanDropCounters {
    /// Spans dropped because the export queue was full.
    pub queue_full: IntCounter,
    /// Spans lost because their export failed.
    pub export_failed: IntCounter,
}

impl SpanDropCounters {
    /// The `faultline_spans_dropped_total` series of `metrics`.
    pub fn of(metrics: &Metrics) -> Self {
        SpanDropCounters {
            queue_full: metrics.spans_dropped(SpanDrop::QueueFull),
            export_failed: metrics.spans_dropped(SpanDrop::ExportFailed),
        }
    }

    /// Counters registered nowhere (tests, or no metrics).
    pub fn detached() -> Self {
        let c = |name| IntCounter::new(name, "detached").expect("a valid name");
        SpanDropCounters {
            queue_full: c("spans_dropped_queue_full"),
            export_failed: c("spans_dropped_export_failed"),
        }
    }
}

/// A running exporter. Call [`Telemetry::shutdown`] before exiting to flush the queue.
#[derive(Debug)]
pub struct Telemetry {
    provider: SdkTracerProvider,
}

impl Telemetry {
    /// Builds the OTLP exporter and the batch span processor; `None` when tracing is off.
    /// The gRPC exporter must be built inside a Tokio runtime, which then drives its
    /// connection.
    pub fn start(
        config: &TelemetryConfig,
        drops: SpanDropCounters,
    ) -> Result<Option<Self>, TelemetryError> {
        if !config.enabled {
            return Ok(None);
        }
        let exporter = match config.protocol {
            Protocol::Grpc => {
                if tokio::runtime::Handle::try_current().is_err() {
                    return Err(TelemetryError::Start(
                        "the gRPC exporter needs a Tokio runtime; start it from inside one or \
                         use OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf"
                            .into(),
                    ));
                }
                opentelemetry_otlp::SpanExporter::builder()
                    .with_tonic()
                    .with_endpoint(config.endpoint.as_str())
                    .with_timeout(config.export_timeout)
                    .build()
            }
            Protocol::HttpProtobuf => opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                .with_endpoint(config.endpoint.as_str())
                .with_timeout(config.export_timeout)
                .build(),
        }
        .map_err(|e| TelemetryError::Start(e.to_string()))?;
        Ok(Some(Telemetry {
            provider: provider(config, exporter, drops),
        }))
    }

    /// The tracer that turns matches into spans; cheap to clone, one per worker.
    pub fn tracer(&self) -> MatchTracer {
        MatchTracer {
            tracer: self.provider.tracer("faultline"),
        }
    }

    /// The tracer that turns incident changes into spans.
    pub fn incident_tracer(&self) -> IncidentTracer {
        IncidentTracer {
            tracer: self.provider.tracer("faultline"),
        }
    }

    /// Exports what is queued (waiting at most the export timeout) and stops the exporter.
    pub fn shutdown(self) -> Result<(), TelemetryError> {
        self.provider
            .shutdown()
            .map_err(|e| TelemetryError::Shutdown(e.to_string()))
    }
}

/// The provider around any exporter: sampler, resource, counted batch processor.
fn provider<E: SpanExporter + 'static>(
    config: &TelemetryConfig,
    exporter: E,
    drops: SpanDropCounters,
) -> SdkTracerProvider {
    let pending = Arc::new(AtomicUsize::new(0));
    let batch = BatchConfigBuilder::default()
        .with_max_queue_size(config.max_queue_size)
        .with_max_export_batch_size(config.max_export_batch_size)
        .with_scheduled_delay(config.scheduled_delay)
        .build();
    let exporter = CountingExporter {
        inner: exporter,
        pending: Arc::clone(&pending),
        failed: drops.export_failed,
    };
    let processor = CountingProcessor {
        inner: BatchSpanProcessor::builder(exporter)
            .with_batch_config(batch)
            .build(),
        pending,
        capacity: config.max_queue_size,
        queue_full: drops.queue_full,
    };
    let resource = Resource::builder_empty()
        .with_service_name(config.service_name.clone())
        .with_attributes(
            [KeyValue::new("service.version", env!("CARGO_PKG_VERSION"))]
                .into_iter()
                .chain(
                    config
                        .resource_attributes
                        .iter()
                        .filter(|(k, _)| k != "service.name")
                        .map(|(k, v)| KeyValue::new(k.clone(), v.clone())),
                ),
        )
        .build();
    let sampler = if config.sample_ratio >= 1.0 {
        Sampler::AlwaysOn
    } else if config.sample_ratio <= 0.0 {
        Sampler::AlwaysOff
    } else {
        Sampler::TraceIdRatioBased(config.sample_ratio)
    };
    SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_sampler(sampler)
        .with_resource(resource)
        .build()
}

/// Admits a span into the batch processor only while fewer than `capacity` spans are queued
/// or being exported, so the processor never drops silently: every span it refuses is counted.
#[derive(Debug)]
struct CountingProcessor {
    inner: BatchSpanProcessor,
    pending: Arc<AtomicUsize>,
    capacity: usize,
    queue_full: IntCounter,
}

impl SpanProcessor for CountingProcessor {
    fn on_start(&self, span: &mut opentelemetry_sdk::trace::Span, cx: &opentelemetry::Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        if self.pending.fetch_add(1, Ordering::AcqRel) >= self.capacity {
            self.pending.fetch_sub(1, Ordering::AcqRel);
            self.queue_full.inc();
            return;
        }
        self.inner.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// Releases the spans of each finished export from the pending count; counts failed ones.
#[derive(Debug)]
struct CountingExporter<E> {
    inner: E,
    pending: Arc<AtomicUsize>,
    failed: IntCounter,
}

impl<E: SpanExporter> SpanExporter for CountingExporter<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let n = batch.len();
        let result = self.inner.export(batch).await;
        self.pending.fetch_sub(n, Ordering::AcqRel);
        if result.is_err() {
            self.failed.inc_by(n as u64);
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// Turns matches into spans. Clone one per worker.
#[derive(Debug, Clone)]
pub struct MatchTracer {
    tracer: SdkTracer,
}

impl MatchTracer {
    /// One span for `event`, named after its error code, ended at once. Kafka sources make a
    /// consumer span with the record's coordinates. Unsampled events cost a sampling decision.
    pub fn record(&self, event: &MatchEvent) {
        let kind = match event.source {
            Provenance::Kafka { .. } => SpanKind::Consumer,
            Provenance::File { .. } => SpanKind::Internal,
        };
        let mut span = self
            .tracer
            .span_builder(event.error_code.clone())
            .with_kind(kind)
            .start(&self.tracer);
        if !span.is_recording() {
            return;
        }
        span.set_attributes(attributes(event));
        span.add_event(
            "exception",
            vec![
                KeyValue::new("exception.type", event.error_code.clone()),
                KeyValue::new("exception.message", message(event)),
            ],
        );
        if matches!(event.severity, Severity::Critical | Severity::Error) {
            span.set_status(Status::error(event.diagnosis.title.clone()));
        }
        span.end();
    }
}

/// Turns incident changes into spans: one when an incident opens, one when it resolves.
#[derive(Debug, Clone)]
pub struct IncidentTracer {
    tracer: SdkTracer,
}

impl IncidentTracer {
    /// One span for an `open` or `resolved` change (others are skipped; returns whether a
    /// span was started).
    pub fn record(&self, incident: &IncidentEvent) -> bool {
        if incident.status == IncidentStatus::Updated {
            return false;
        }
        let mut span = self
            .tracer
            .span_builder("faultline.incident")
            .with_kind(SpanKind::Internal)
            .start(&self.tracer);
        if !span.is_recording() {
            return true;
        }
        span.set_attributes(incident_attributes(incident));
        if incident.status == IncidentStatus::Open
            && matches!(incident.root.severity, Severity::Critical | Severity::Error)
        {
            span.set_status(Status::error(incident.diagnosis.title.clone()));
        }
        span.end();
        true
    }
}

/// The span attributes of an incident change.
pub fn incident_attributes(incident: &IncidentEvent) -> Vec<KeyValue> {
    let status = match incident.status {
        IncidentStatus::Open => "open",
        IncidentStatus::Updated => "updated",
        IncidentStatus::Resolved => "resolved",
    };
    let c = &incident.culprit;
    let mut a = vec![
        KeyValue::new(
            "faultline.incident.fingerprint",
            incident.fingerprint.clone(),
        ),
        KeyValue::new("faultline.incident.status", status),
        KeyValue::new("faultline.incident.revision", incident.revision as i64),
        KeyValue::new("faultline.job_id", incident.job_id.clone()),
        KeyValue::new("exception.type", incident.root.error_code.clone()),
        KeyValue::new(
            "faultline.root.error_code",
            incident.root.error_code.clone(),
        ),
        KeyValue::new("faultline.root.kb_id", incident.root.kb_id.clone()),
        KeyValue::new("faultline.root_known", incident.root_known),
        KeyValue::new(
            "faultline.culprit.ranks",
            opentelemetry::Value::Array(
                c.ranks
                    .iter()
                    .map(|&r| i64::from(r))
                    .collect::<Vec<i64>>()
                    .into(),
            ),
        ),
        KeyValue::new(
            "faultline.culprit.hosts",
            opentelemetry::Value::Array(
                c.hosts
                    .iter()
                    .map(|h| opentelemetry::StringValue::from(h.clone()))
                    .collect::<Vec<_>>()
                    .into(),
            ),
        ),
        KeyValue::new(
            "faultline.incident.cascades",
            incident.cascades.matches as i64,
        ),
        KeyValue::new("faultline.incident.matches", incident.counts.matches as i64),
        KeyValue::new("faultline.ticket.raised", incident.ticket.raised),
    ];
    if let Some(&rank) = c.ranks.first() {
        a.push(KeyValue::new("faultline.culprit.rank", i64::from(rank)));
    }
    if let Some(host) = c.hosts.first() {
        a.push(KeyValue::new("faultline.culprit.host", host.clone()));
    }
    if let Some(r) = incident.resolution {
        let r = serde_json::to_value(r)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        a.push(KeyValue::new("faultline.incident.resolution", r));
    }
    a
}

fn message(event: &MatchEvent) -> String {
    let mut end = event.line.len().min(MAX_MESSAGE_BYTES);
    while !event.line.is_char_boundary(end) {
        end -= 1;
    }
    event.line[..end].to_string()
}

/// The span attributes of a match: OpenTelemetry semantic conventions where one exists
/// (exception, host, k8s, messaging), `faultline.*` for the rest.
pub fn attributes(event: &MatchEvent) -> Vec<KeyValue> {
    let mut a = vec![
        KeyValue::new("exception.type", event.error_code.clone()),
        KeyValue::new("exception.message", message(event)),
        KeyValue::new("faultline.kb_id", event.kb_id.clone()),
        KeyValue::new("faultline.kb_version", event.kb_version.clone()),
        KeyValue::new("faultline.job_id", event.job_id.clone()),
        KeyValue::new("faultline.domain", event.domain.clone()),
        KeyValue::new("faultline.category", event.category.clone()),
        KeyValue::new("faultline.role", event.role.as_str()),
        KeyValue::new("faultline.severity", event.severity.as_str()),
        KeyValue::new("faultline.title", event.diagnosis.title.clone()),
        KeyValue::new("faultline.root_cause", event.diagnosis.root_cause.clone()),
    ];
    if let Some(rank) = event.rank {
        a.push(KeyValue::new("faultline.rank", i64::from(rank)));
    }
    if let Some(host) = &event.host {
        a.push(KeyValue::new("host.name", host.clone()));
    }
    if let Some(pod) = &event.pod {
        a.push(KeyValue::new("k8s.pod.name", pod.clone()));
    }
    if let Some(cluster) = &event.cluster {
        a.push(KeyValue::new("k8s.cluster.name", cluster.clone()));
    }
    if let Some(ts) = &event.timestamp {
        a.push(KeyValue::new("faultline.log.timestamp", ts.clone()));
    }
    match &event.source {
        Provenance::Kafka {
            topic,
            partition,
            offset,
            line,
        } => {
            a.push(KeyValue::new("messaging.system", "kafka"));
            a.push(KeyValue::new("messaging.operation.type", "process"));
            a.push(KeyValue::new("messaging.destination.name", topic.clone()));
            a.push(KeyValue::new(
                "messaging.destination.partition.id",
                partition.to_string(),
            ));
            a.push(KeyValue::new("messaging.kafka.offset", *offset));
            a.push(KeyValue::new("faultline.source.line", *line as i64));
        }
        Provenance::File { path, line } => {
            a.push(KeyValue::new("log.file.path", path.clone()));
            a.push(KeyValue::new("faultline.source.line", *line as i64));
        }
    }
    a
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::{Condvar, Mutex};

    use opentelemetry_sdk::error::OTelSdkError;

    use super::*;
    use crate::testutil::{event, kb};

    fn resolve(
        raw: &RawTelemetryConfig,
        env: &[(&str, &str)],
    ) -> Result<TelemetryConfig, TelemetryError> {
        let env: HashMap<String, String> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        TelemetryConfig::resolve(raw, |k| env.get(k).cloned())
    }

    #[test]
    fn tracing_is_off_without_an_endpoint() {
        let c = resolve(&RawTelemetryConfig::default(), &[]).expect("valid");
        assert!(!c.enabled);
        assert_eq!(c.service_name, "faultline");
        assert_eq!(c.max_queue_size, DEFAULT_MAX_QUEUE_SIZE);
    }

    #[test]
    fn standard_variables_win_over_the_file() {
        let raw = RawTelemetryConfig {
            endpoint: Some("http://file:4317".into()),
            service_name: Some("from-file".into()),
            sample_ratio: Some(0.5),
            max_queue_size: Some(100),
            ..Default::default()
        };
        let c = resolve(&raw, &[]).expect("valid");
        assert!(c.enabled);
        assert_eq!(c.protocol, Protocol::Grpc);
        assert_eq!(c.endpoint, "http://file:4317");
        assert_eq!(c.sample_ratio, 0.5);
        assert_eq!(c.max_queue_size, 1_024, "never below one export batch");
        let c = resolve(
            &raw,
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
                ("OTEL_SERVICE_NAME", "faultline-eu"),
                (
                    "OTEL_RESOURCE_ATTRIBUTES",
                    "deployment.environment=prod,team=ml%20infra",
                ),
                ("OTEL_TRACES_SAMPLER", "traceidratio"),
                ("OTEL_TRACES_SAMPLER_ARG", "0.25"),
                ("OTEL_BSP_MAX_QUEUE_SIZE", "4096"),
                ("OTEL_BSP_SCHEDULE_DELAY", "250"),
                ("OTEL_EXPORTER_OTLP_TIMEOUT", "3000"),
            ],
        )
        .expect("valid");
        assert_eq!(c.protocol, Protocol::HttpProtobuf);
        assert_eq!(c.endpoint, "http://collector:4318/v1/traces");
        assert_eq!(c.service_name, "faultline-eu");
        assert_eq!(
            c.resource_attributes,
            vec![
                ("deployment.environment".to_string(), "prod".to_string()),
                ("team".to_string(), "ml infra".to_string())
            ]
        );
        assert_eq!(c.sample_ratio, 0.25);
        assert_eq!(c.max_queue_size, 4096);
        assert_eq!(c.scheduled_delay, Duration::from_millis(250));
        assert_eq!(c.export_timeout, Duration::from_secs(3));
        // A signal-specific endpoint is used as is.
        let c = resolve(
            &raw,
            &[
                ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://x:1/custom"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ],
        )
        .expect("valid");
        assert_eq!(c.endpoint, "http://x:1/custom");
        for off in [
            ("OTEL_SDK_DISABLED", "true"),
            ("OTEL_TRACES_EXPORTER", "none"),
        ] {
            assert!(!resolve(&raw, &[off]).expect("valid").enabled, "{off:?}");
        }
    }

    #[test]
    fn bad_settings_name_their_variable() {
        let raw = RawTelemetryConfig::default();
        for (env, field) in [
            (
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
                "OTEL_EXPORTER_OTLP_PROTOCOL",
            ),
            (
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4317"),
                "OTEL_EXPORTER_OTLP_ENDPOINT",
            ),
            (
                ("OTEL_TRACES_SAMPLER", "jaeger_remote"),
                "OTEL_TRACES_SAMPLER",
            ),
            (
                ("OTEL_BSP_MAX_QUEUE_SIZE", "many"),
                "OTEL_BSP_MAX_QUEUE_SIZE",
            ),
            (
                ("OTEL_RESOURCE_ATTRIBUTES", "novalue"),
                "OTEL_RESOURCE_ATTRIBUTES",
            ),
        ] {
            let e = resolve(&raw, &[env]).expect_err("rejected").to_string();
            assert!(e.contains(field), "{e}");
        }
        let e = resolve(
            &raw,
            &[
                ("OTEL_TRACES_SAMPLER", "traceidratio"),
                ("OTEL_TRACES_SAMPLER_ARG", "2"),
            ],
        )
        .expect_err("rejected");
        assert!(e.to_string().contains("between 0 and 1"), "{e}");
    }

    /// Collects exported spans; optionally holds every export until the gate opens, or fails.
    #[derive(Debug, Clone, Default)]
    struct Collect {
        spans: Arc<Mutex<Vec<SpanData>>>,
        gate: Option<Arc<(Mutex<bool>, Condvar)>>,
        fail: bool,
    }

    impl SpanExporter for Collect {
        async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
            if let Some(gate) = &self.gate {
                let (open, cv) = &**gate;
                let mut o = open.lock().expect("gate");
                while !*o {
                    o = cv.wait(o).expect("gate");
                }
            }
            if self.fail {
                return Err(OTelSdkError::InternalFailure("collector down".into()));
            }
            self.spans.lock().expect("spans").extend(batch);
            Ok(())
        }
    }

    fn config(ratio: f64, queue: usize) -> TelemetryConfig {
        TelemetryConfig {
            enabled: true,
            protocol: Protocol::Grpc,
            endpoint: String::new(),
            service_name: "test".into(),
            resource_attributes: Vec::new(),
            sample_ratio: ratio,
            max_queue_size: queue,
            max_export_batch_size: queue.min(512),
            scheduled_delay: Duration::from_millis(50),
            export_timeout: Duration::from_secs(5),
        }
    }

    fn emit(ratio: f64, n: usize) -> usize {
        let exporter = Collect::default();
        let p = provider(
            &config(ratio, 4096),
            exporter.clone(),
            SpanDropCounters::detached(),
        );
        let k = kb(&[("nccl/x", "NCCL_TIMEOUT", "cascade")]);
        let e = event(&k, 0, None, None);
        let t = MatchTracer {
            tracer: p.tracer("test"),
        };
        for _ in 0..n {
            t.record(&e);
        }
        p.shutdown().expect("flushes");
        let got = exporter.spans.lock().expect("spans").len();
        got
    }

    #[test]
    fn the_sample_ratio_decides_how_many_matches_are_traced() {
        assert_eq!(emit(1.0, 50), 50);
        assert_eq!(emit(0.0, 50), 0);
        let half = emit(0.5, 1_000);
        assert!((350..=650).contains(&half), "{half} of 1000 at ratio 0.5");
    }

    #[test]
    fn a_span_carries_the_match() {
        let exporter = Collect::default();
        let p = provider(
            &config(1.0, 16),
            exporter.clone(),
            SpanDropCounters::detached(),
        );
        let k = kb(&[("nccl/x", "NCCL_TIMEOUT", "cascade")]);
        let mut e = event(&k, 0, Some("eu-1"), Some("2024-05-01T12:00:00Z"));
        e.rank = Some(3);
        e.host = Some("gpu-node-7".into());
        e.line = "é".repeat(MAX_MESSAGE_BYTES);
        MatchTracer {
            tracer: p.tracer("test"),
        }
        .record(&e);
        p.shutdown().expect("flushes");
        let spans = exporter.spans.lock().expect("spans");
        let span = &spans[0];
        assert_eq!(span.name, "NCCL_TIMEOUT");
        assert_eq!(span.span_kind, SpanKind::Internal);
        assert!(matches!(span.status, Status::Error { .. }));
        let attr = |k: &str| {
            span.attributes
                .iter()
                .find(|kv| kv.key.as_str() == k)
                .map(|kv| kv.value.to_string())
        };
        assert_eq!(attr("exception.type").as_deref(), Some("NCCL_TIMEOUT"));
        assert_eq!(attr("faultline.rank").as_deref(), Some("3"));
        assert_eq!(attr("host.name").as_deref(), Some("gpu-node-7"));
        assert_eq!(attr("k8s.cluster.name").as_deref(), Some("eu-1"));
        assert_eq!(attr("log.file.path").as_deref(), Some("-"));
        assert_eq!(attr("k8s.pod.name"), None, "unknown fields are left out");
        let msg = attr("exception.message").expect("message");
        assert!(msg.len() <= MAX_MESSAGE_BYTES && msg.len() >= MAX_MESSAGE_BYTES - 1);
        assert_eq!(span.events.events[0].name, "exception");
    }

    #[test]
    fn spans_past_the_queue_are_dropped_and_counted() {
        let gate = Arc::new((Mutex::new(false), Condvar::new()));
        let exporter = Collect {
            gate: Some(Arc::clone(&gate)),
            ..Default::default()
        };
        let drops = SpanDropCounters::detached();
        let p = provider(&config(1.0, 4), exporter.clone(), drops.clone());
        let k = kb(&[("nccl/x", "NCCL_TIMEOUT", "cascade")]);
        let e = event(&k, 0, None, None);
        let t = MatchTracer {
            tracer: p.tracer("test"),
        };
        // The exporter is held: the first four spans fill the queue, the rest are refused.
        for _ in 0..100 {
            t.record(&e);
        }
        assert_eq!(drops.queue_full.get(), 96);
        *gate.0.lock().expect("gate") = true;
        gate.1.notify_all();
        p.shutdown().expect("flushes");
        assert_eq!(exporter.spans.lock().expect("spans").len(), 4);
        assert_eq!(drops.export_failed.get(), 0);
    }

    #[test]
    fn failed_exports_are_counted() {
        let exporter = Collect {
            fail: true,
            ..Default::default()
        };
        let drops = SpanDropCounters::detached();
        let p = provider(&config(1.0, 64), exporter, drops.clone());
        let k = kb(&[("nccl/x", "NCCL_TIMEOUT", "cascade")]);
        let e = event(&k, 0, None, None);
        let t = MatchTracer {
            tracer: p.tracer("test"),
        };
        for _ in 0..10 {
            t.record(&e);
        }
        let _ = p.shutdown();
        assert_eq!(drops.export_failed.get(), 10);
        assert_eq!(drops.queue_full.get(), 0);
    }

    #[test]
    fn the_grpc_exporter_needs_a_runtime() {
        let mut c = config(1.0, 16);
        c.endpoint = "http://127.0.0.1:4317".into();
        let e = Telemetry::start(&c, SpanDropCounters::detached()).expect_err("no runtime");
        assert!(e.to_string().contains("Tokio runtime"), "{e}");
        c.enabled = false;
        assert!(Telemetry::start(&c, SpanDropCounters::detached())
            .expect("off")
            .is_none());
    }
}
