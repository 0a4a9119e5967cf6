//! Tickets over HTTP: incident events to a webhook, as generic JSON or as an Alertmanager
//! webhook (version 4) payload.
//!
//! Flow: [`crate::incident::Correlator`] -> [`IncidentEvent`] -> [`WebhookSink::send`]. Only
//! incidents whose ticket is raised are sent (a root-role incident at once, others after the
//! correlator's threshold); every later change of the incident is sent too, so the ticket
//! follows it to `resolved`.
//!
//! Idempotent by construction: the ticket key is the incident's id, given when it opens and kept
//! for the life of the failure (`X-Faultline-Incident`, the alert's `incident_id` label), so a
//! receiver upserts; each change carries an `Idempotency-Key` (id, first log time, occurrence and
//! revision), the same on every retry and on a replay of the same logs, so a receiver that
//! already applied a change can drop its redelivery.
//!
//! Delivery, retries and TLS are [`crate::sink::http`]'s: transport errors, 408, 429 and 5xx
//! are retried with backoff; a change that still cannot be delivered goes to the dead letter: a
//! JSONL file or a callback. The Alertmanager format's labels are the Alertmanager sink's
//! ([`crate::sink::alertmanager::label_set`]), so one incident is one alert identity whichever
//! way it reaches Alertmanager.
//!
//! Blocking (ureq): the sink is an incident output ([`crate::sink::output`]); `faultline run`'s
//! delivery worker calls it on its own thread.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::{self, Write};
use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;
use serde_json::{json, Value};

use crate::enrich::SCHEMA_VERSION;
use crate::incident::{CulpritMethod, IncidentEvent, Status};
use crate::section::{Errors, Printer};
use crate::sink::alertmanager::label_set;
use crate::sink::http::{HttpClient, HttpError, Pause, RetryPolicy, Sleep};
use crate::sink::incident_url;
use crate::sink::output::{
    IncidentOutput, Outcome, OutputContext, OutputError, OutputSection, Undelivered,
};

/// The body shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PayloadFormat {
    /// `{"type": "faultline.ticket", "ticket_key": ..., "incident": {...}}`.
    Generic,
    /// Alertmanager's webhook payload, version 4 (`{"version": "4", "alerts": [...]}`).
    Alertmanager,
}

/// Where and how to deliver.
#[derive(Debug, Clone)]
pub struct WebhookConfig {
    /// Where changes are POSTed: `http://` or `https://`.
    pub url: String,
    /// PEM certificates of a private CA to trust instead of the public roots.
    pub ca_file: Option<PathBuf>,
    /// The body shape.
    pub format: PayloadFormat,
    /// Attempts per change, the first included.
    pub max_attempts: u32,
    /// Wait before the first retry; doubles on each one.
    pub initial_backoff: Duration,
    /// Cap on any wait, `Retry-After` included.
    pub max_backoff: Duration,
    /// For one attempt, connection to response.
    pub timeout: Duration,
    /// Extra headers (`Authorization: Bearer ...`).
    pub headers: Vec<(String, String)>,
    /// Alertmanager payload: `receiver` and `externalURL`.
    pub receiver: String,
    /// Alertmanager's `externalURL`.
    pub external_url: String,
    /// The admin server's base URL: tickets link to `<page_base>/incidents/<id>`
    /// (`incident_url`); set when the service starts.
    pub page_base: Option<String>,
}

impl WebhookConfig {
    /// A config for `url` in `format`, with the documented defaults (5 attempts, 0.5 s backoff
    /// doubling to 30 s, 10 s per attempt).
    pub fn new(url: impl Into<String>, format: PayloadFormat) -> Self {
        WebhookConfig {
            url: url.into(),
            ca_file: None,
            format,
            max_attempts: 5,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(30),
            timeout: Duration::from_secs(10),
            headers: Vec::new(),
            receiver: "faultline".into(),
            external_url: String::new(),
            page_base: None,
        }
    }
}

/// What happens to a change that could not be delivered.
pub enum DeadLetter {
    /// Dropped (counted in [`WebhookStats::dead_lettered`]).
    Drop,
    /// Appended to a JSONL file, one [`DeadLetterRecord`] per line.
    File(PathBuf),
    /// Handed to a function (the service puts it on a Kafka topic).
    Callback(Box<dyn FnMut(&DeadLetterRecord) + Send>),
}

impl std::fmt::Debug for DeadLetter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeadLetter::Drop => f.write_str("Drop"),
            DeadLetter::File(p) => f.debug_tuple("File").field(p).finish(),
            DeadLetter::Callback(_) => f.write_str("Callback(..)"),
        }
    }
}

/// A change that was not delivered, with everything needed to replay it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeadLetterRecord {
    /// Always `dead_letter` (`type` in JSON).
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// Version of the output contract, [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The webhook that refused the change.
    pub url: String,
    /// The ticket key: the incident's id.
    pub ticket_key: String,
    /// The change's `Idempotency-Key`, as sent.
    pub idempotency_key: String,
    /// Attempts made before giving up.
    pub attempts: u32,
    /// The last attempt's error (`HTTP 503`, a transport error).
    pub error: String,
    /// The body that was sent, to replay as is.
    pub payload: Value,
}

/// The outcome of one [`WebhookSink::send`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TicketOutcome {
    /// No ticket raised for this incident (yet): nothing sent.
    Skipped,
    /// Delivered with a 2xx response.
    Delivered {
        /// Attempts it took, the first included.
        attempts: u32,
    },
    /// Not delivered: retries ran out or the error is not retryable; the dead letter has it.
    DeadLettered {
        /// Attempts made.
        attempts: u32,
        /// The last attempt's error.
        error: String,
    },
}

/// Counters (metrics come with the Prometheus issue).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WebhookStats {
    /// Changes delivered.
    pub delivered: u64,
    /// Attempts made, retries included.
    pub attempts: u64,
    /// Retries after a retryable failure.
    pub retries: u64,
    /// Changes dead-lettered.
    pub dead_lettered: u64,
    /// Changes not sent because their ticket was not raised.
    pub skipped: u64,
}

/// Why the sink could not be built or a dead letter not written.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// The URL or the CA file is unusable.
    #[error("webhook: {0}")]
    Http(#[from] HttpError),
    /// The dead letter file could not be written.
    #[error("writing the dead letter file {path}: {source}")]
    DeadLetter {
        /// The dead letter file.
        path: PathBuf,
        /// The write error.
        source: io::Error,
    },
    /// The payload could not be serialised.
    #[error("encoding the webhook payload: {0}")]
    Encode(#[from] serde_json::Error),
}

/// Sends incident changes to one webhook.
pub struct WebhookSink {
    cfg: WebhookConfig,
    client: HttpClient,
    dead_letter: DeadLetter,
    pause: Box<dyn Pause>,
    stats: WebhookStats,
    /// The last change dead-lettered, until [`WebhookSink::take_dead_letter`].
    last_dead_letter: Option<DeadLetterRecord>,
}

impl std::fmt::Debug for WebhookSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookSink")
            .field("cfg", &self.cfg)
            .field("dead_letter", &self.dead_letter)
            .field("stats", &self.stats)
            .finish()
    }
}

impl WebhookSink {
    /// A sink for `cfg`; fails on a URL that is not HTTP(S) or an unusable CA file.
    pub fn new(cfg: WebhookConfig, dead_letter: DeadLetter) -> Result<Self, WebhookError> {
        let client = HttpClient::new(&cfg.url, cfg.timeout, cfg.ca_file.as_deref())?;
        Ok(WebhookSink {
            cfg,
            client,
            dead_letter,
            pause: Box::new(Sleep),
            stats: WebhookStats::default(),
            last_dead_letter: None,
        })
    }

    /// Replaces how the sink waits between attempts (tests record instead of sleeping).
    pub fn with_pause(mut self, pause: Box<dyn Pause>) -> Self {
        self.pause = pause;
        self
    }

    /// Counters since the sink was built.
    pub fn stats(&self) -> &WebhookStats {
        &self.stats
    }

    /// The record of the last change dead-lettered (after the [`DeadLetter`] had it), for a
    /// caller that keeps it elsewhere too (`faultline run` produces it to Kafka); one at most.
    pub fn take_dead_letter(&mut self) -> Option<DeadLetterRecord> {
        self.last_dead_letter.take()
    }

    /// Delivers one incident change if its ticket is raised; retries, then dead-letters.
    /// Errors only when the dead letter itself cannot be written.
    pub fn send(&mut self, incident: &IncidentEvent) -> Result<TicketOutcome, WebhookError> {
        if !incident.ticket.raised {
            self.stats.skipped += 1;
            return Ok(TicketOutcome::Skipped);
        }
        let key = idempotency_key(incident);
        let payload = match self.cfg.format {
            PayloadFormat::Generic => {
                let mut p = generic_payload(incident, &key)?;
                if let (Some(base), Value::Object(map)) = (&self.cfg.page_base, &mut p) {
                    map.insert(
                        "incident_url".into(),
                        Value::String(incident_url(base, &incident.id)),
                    );
                }
                p
            }
            PayloadFormat::Alertmanager => alertmanager_payload(incident, &self.cfg),
        };
        let body = serde_json::to_vec(&payload)?;
        let status = match incident.status {
            Status::Open => "open",
            Status::Updated => "updated",
            Status::Resolved => "resolved",
        };
        let mut headers = vec![
            ("Idempotency-Key", key.as_str()),
            ("X-Faultline-Incident", incident.id.as_str()),
            ("X-Faultline-Fingerprint", incident.fingerprint.as_str()),
            ("X-Faultline-Status", status),
        ];
        headers.extend(
            self.cfg
                .headers
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str())),
        );
        let policy = RetryPolicy {
            max_attempts: self.cfg.max_attempts,
            initial_backoff: self.cfg.initial_backoff,
            max_backoff: self.cfg.max_backoff,
        };
        let retries = &mut self.stats.retries;
        let result = self
            .client
            .post(&headers, &body, policy, self.pause.as_mut(), &mut || {
                *retries += 1
            });
        let attempts = result.as_ref().map_or_else(|f| f.attempts, |a| *a);
        self.stats.attempts += u64::from(attempts);
        let error = match result {
            Ok(_) => {
                self.stats.delivered += 1;
                return Ok(TicketOutcome::Delivered { attempts });
            }
            Err(failed) => failed.error,
        };
        self.stats.dead_lettered += 1;
        let record = DeadLetterRecord {
            kind: "dead_letter",
            schema_version: SCHEMA_VERSION,
            url: crate::secret::redact_url(&self.cfg.url).into_owned(),
            ticket_key: incident.id.clone(),
            idempotency_key: key,
            attempts,
            error: error.clone(),
            payload,
        };
        // Kept first: a file that cannot be written must not lose the caller's copy.
        self.last_dead_letter = Some(record.clone());
        match &mut self.dead_letter {
            DeadLetter::Drop => {}
            DeadLetter::Callback(f) => f(&record),
            DeadLetter::File(path) => {
                let write = || -> io::Result<()> {
                    let mut file = OpenOptions::new().create(true).append(true).open(&*path)?;
                    let mut line = serde_json::to_vec(&record).map_err(io::Error::from)?;
                    line.push(b'\n');
                    file.write_all(&line)
                };
                write().map_err(|source| WebhookError::DeadLetter {
                    path: path.clone(),
                    source,
                })?;
            }
        }
        Ok(TicketOutcome::DeadLettered { attempts, error })
    }
}

/// The key of one change: the same on every retry and on a replay of the same logs.
pub fn idempotency_key(incident: &IncidentEvent) -> String {
    format!(
        "{}/{}/{}/{}",
        incident.id,
        incident.first_seen.as_deref().unwrap_or("-"),
        incident.recurrence,
        incident.revision
    )
}

/// The generic body: the incident object with its keys.
pub fn generic_payload(incident: &IncidentEvent, key: &str) -> Result<Value, serde_json::Error> {
    Ok(json!({
        "type": "faultline.ticket",
        "schema_version": SCHEMA_VERSION,
        "ticket_key": incident.id,
        "idempotency_key": key,
        "incident": serde_json::to_value(incident)?,
    }))
}

/// Alertmanager's zero time: "no end yet".
const ZERO_TIME: &str = "0001-01-01T00:00:00Z";

/// The most context bytes put into an annotation.
const ANNOTATION_CONTEXT_BYTES: usize = 4096;

/// Alertmanager webhook payload, version 4, with one alert per incident. Its labels are the
/// Alertmanager sink's ([`label_set`]: alertname, incident id, job, error code, domain,
/// category, severity, cluster), so that every change of an incident updates the same alert
/// and both ways to Alertmanager give it one identity; everything that may change is an
/// annotation.
pub fn alertmanager_payload(incident: &IncidentEvent, cfg: &WebhookConfig) -> Value {
    let resolved = incident.status == Status::Resolved;
    let status = if resolved { "resolved" } else { "firing" };
    let labels = label_set(incident, &BTreeMap::new());

    let c = &incident.culprit;
    let culprit = if c.method == CulpritMethod::Unknown {
        "culprit unknown".to_string()
    } else {
        let ranks: Vec<String> = c.ranks.iter().map(u32::to_string).collect();
        format!(
            "culprit rank(s) [{}] on [{}]",
            ranks.join(", "),
            c.hosts.join(", ")
        )
    };
    let mut context = String::new();
    for line in &incident.context.lines {
        if context.len() + line.text.len() + 1 > ANNOTATION_CONTEXT_BYTES {
            break;
        }
        context.push_str(&line.text);
        context.push('\n');
    }
    let mut annotations = BTreeMap::new();
    annotations.insert(
        "summary",
        format!(
            "{} in job {}: {} ({culprit})",
            incident.root.error_code, incident.job_id, incident.diagnosis.title
        ),
    );
    annotations.insert(
        "description",
        format!(
            "{}\n{}",
            incident.diagnosis.root_cause.trim(),
            c.explanation
        ),
    );
    annotations.insert("root_line", incident.root.line.clone());
    annotations.insert("root_known", incident.root_known.to_string());
    annotations.insert("culprit_ranks", format!("{:?}", c.ranks));
    annotations.insert("culprit_hosts", c.hosts.join(","));
    annotations.insert("cascades", incident.cascades.matches.to_string());
    annotations.insert("restart_loop", incident.restart_loop.to_string());
    if let Some(score) = incident.bad_node_score {
        annotations.insert("bad_node_score", score.to_string());
    }
    if let Some(w) = incident.diagnosis.verified_workarounds().next() {
        annotations.insert("runbook", w.text.clone());
    }
    if !context.is_empty() {
        annotations.insert("context", context);
    }
    annotations.insert("fingerprint", incident.fingerprint.clone());
    if let Some(prev) = &incident.previous_fingerprint {
        annotations.insert("previous_fingerprint", prev.clone());
    }
    let page = cfg
        .page_base
        .as_deref()
        .map(|b| incident_url(b, &incident.id));
    if let Some(page) = &page {
        annotations.insert("incident_url", page.clone());
    }
    let starts_at = incident
        .first_seen
        .clone()
        .unwrap_or_else(|| ZERO_TIME.to_string());
    let ends_at = if resolved {
        incident
            .last_seen
            .clone()
            .unwrap_or_else(|| starts_at.clone())
    } else {
        ZERO_TIME.to_string()
    };
    // Alertmanager's own fingerprint is 16 hex digits of a label hash; the id's hex is that shape.
    let am_fingerprint = incident
        .id
        .split_once(':')
        .map_or(incident.id.as_str(), |(_, hex)| hex)
        .to_string();
    json!({
        "version": "4",
        "groupKey": format!("{{}}:{{incident_id=\"{}\"}}", incident.id),
        "truncatedAlerts": 0,
        "status": status,
        "receiver": cfg.receiver,
        "groupLabels": { "incident_id": incident.id },
        "commonLabels": labels,
        "commonAnnotations": annotations,
        "externalURL": cfg.external_url,
        "alerts": [{
            "status": status,
            "labels": labels,
            "annotations": annotations,
            "startsAt": starts_at,
            "endsAt": ends_at,
            "generatorURL": page.as_deref().unwrap_or(&cfg.external_url),
            "fingerprint": am_fingerprint,
        }],
    })
}

/// The default number of changes waiting for the webhook thread.
pub const DEFAULT_WEBHOOK_QUEUE: usize = 1_024;

/// `[webhook]` as written. Setting `url` turns it on (it needs `[incidents]`).
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawWebhookConfig {
    /// Where tickets go.
    pub url: Option<String>,
    /// PEM certificates of a private CA to trust for an `https://` URL (default: the public
    /// roots).
    pub ca_file: Option<PathBuf>,
    /// `generic` or `alertmanager`.
    pub format: Option<String>,
    /// Attempts per change, the first included.
    pub max_attempts: Option<u32>,
    /// The first wait between attempts.
    pub initial_backoff_ms: Option<u64>,
    /// The longest wait between attempts.
    pub max_backoff_ms: Option<u64>,
    /// For one attempt, connection to response.
    pub timeout_ms: Option<u64>,
    /// A JSONL file for changes that could not be delivered; none: counted and logged only.
    pub dead_letter: Option<PathBuf>,
    /// Changes waiting for the webhook thread.
    pub queue: Option<usize>,
    /// Extra request headers (`Authorization = "Bearer ..."`); values are never logged.
    #[serde(default)]
    pub headers: std::collections::BTreeMap<String, String>,
    /// Alertmanager payload: `receiver`.
    pub receiver: Option<String>,
    /// Alertmanager payload: `externalURL`.
    pub external_url: Option<String>,
}

/// Validated `[webhook]` of `faultline run`.
#[derive(Debug, Clone)]
pub struct RunWebhookConfig {
    /// Where and how to deliver.
    pub sink: WebhookConfig,
    /// The dead-letter file, if any.
    pub dead_letter: Option<PathBuf>,
    /// Changes waiting for the webhook thread.
    pub queue: usize,
}

impl RunWebhookConfig {
    /// Validates `[webhook]`; `None` when it is off (or a field is wrong).
    pub fn from_raw(wh: &RawWebhookConfig, errors: &mut Errors<'_>) -> Option<Self> {
        let url = wh.url.as_ref()?;
        let before = errors.count();
        let format = match wh.format.as_deref().unwrap_or("generic") {
            "generic" => PayloadFormat::Generic,
            "alertmanager" => PayloadFormat::Alertmanager,
            other => {
                errors.push(
                    "format",
                    format!("{other:?}: expected generic or alertmanager"),
                );
                PayloadFormat::Generic
            }
        };
        let mut sink = WebhookConfig::new(url.clone(), format);
        sink.ca_file = wh.ca_file.clone();
        if let Some(n) = wh.max_attempts {
            sink.max_attempts = n;
        }
        if let Some(ms) = wh.initial_backoff_ms {
            sink.initial_backoff = Duration::from_millis(ms);
        }
        if let Some(ms) = wh.max_backoff_ms {
            sink.max_backoff = Duration::from_millis(ms);
        }
        if let Some(ms) = wh.timeout_ms {
            sink.timeout = Duration::from_millis(ms);
        }
        sink.headers = wh
            .headers
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if let Some(r) = &wh.receiver {
            sink.receiver = r.clone();
        }
        if let Some(u) = &wh.external_url {
            sink.external_url = crate::secret::without_userinfo(u).into_owned();
        }
        for (key, zero) in [
            ("max_attempts", sink.max_attempts == 0),
            ("timeout_ms", sink.timeout.is_zero()),
            ("queue", wh.queue == Some(0)),
        ] {
            if zero {
                errors.push(key, "must be positive");
            }
        }
        if sink.max_backoff < sink.initial_backoff {
            errors.push(
                "max_backoff_ms",
                "must be at least webhook.initial_backoff_ms",
            );
        }
        // The URL and CA file are checked here, not when the thread starts.
        crate::sink::http::check_settings(url, sink.ca_file.as_deref(), errors);
        (errors.count() == before).then_some(RunWebhookConfig {
            sink,
            dead_letter: wh.dead_letter.clone(),
            queue: wh.queue.unwrap_or(DEFAULT_WEBHOOK_QUEUE),
        })
    }

    /// The effective `[webhook]` table, header values left out.
    pub fn print(&self, p: &mut Printer) {
        let s = &self.sink;
        p.table("webhook");
        p.value("url", crate::secret::redact_url(&s.url));
        if let Some(path) = &s.ca_file {
            p.value("ca_file", path.display().to_string());
        }
        let format = match s.format {
            PayloadFormat::Generic => "generic",
            PayloadFormat::Alertmanager => "alertmanager",
        };
        p.value("format", format);
        p.number("max_attempts", s.max_attempts);
        p.number("initial_backoff_ms", s.initial_backoff.as_millis());
        p.number("max_backoff_ms", s.max_backoff.as_millis());
        p.number("timeout_ms", s.timeout.as_millis());
        p.number("queue", self.queue);
        if let Some(path) = &self.dead_letter {
            p.value("dead_letter", path.display().to_string());
        }
        for (name, _) in &s.headers {
            p.line(&format!("# header {name}: [REDACTED]"));
        }
    }
}

/// The output's name: its metrics' `output` label and its dead letters' stage.
const NAME: &str = "webhook";

impl OutputSection for RunWebhookConfig {
    fn name(&self) -> &'static str {
        NAME
    }

    fn queue(&self) -> usize {
        self.queue
    }

    fn build(&self, ctx: &OutputContext) -> Result<Box<dyn IncidentOutput>, OutputError> {
        let dead_letter = match &self.dead_letter {
            Some(p) => DeadLetter::File(p.clone()),
            None => DeadLetter::Drop,
        };
        let mut cfg = self.sink.clone();
        cfg.page_base.clone_from(&ctx.page_base);
        let hook = WebhookSink::new(cfg, dead_letter).map_err(|e| OutputError::new(NAME, e))?;
        Ok(Box::new(hook.with_pause(ctx.pause())))
    }

    fn print(&self, p: &mut Printer) {
        RunWebhookConfig::print(self, p);
    }
}

/// Ticketed changes only.
fn ticketed(change: &IncidentEvent) -> bool {
    change.ticket.raised
}

/// The webhook as an incident output: the changes of ticketed incidents, one at a time; a
/// change it gives up on goes to the dead-letter file (when set) and to the dead-letter topic
/// as `ticket_undeliverable`, and a resolution's commit holds wait for that record.
impl IncidentOutput for WebhookSink {
    fn name(&self) -> &'static str {
        NAME
    }

    fn wants(&self) -> fn(&IncidentEvent) -> bool {
        ticketed
    }

    fn deliver(&mut self, changes: &[std::sync::Arc<IncidentEvent>], report: &mut Outcome) {
        for (i, change) in changes.iter().enumerate() {
            let retries = self.stats.retries;
            match self.send(change) {
                Ok(TicketOutcome::Delivered { .. }) => report.delivered += 1,
                Ok(TicketOutcome::DeadLettered { attempts, error }) => {
                    report.dead_lettered += 1;
                    tracing::error!(fingerprint = %change.fingerprint, attempts, error = %error,
                        "webhook change dead-lettered");
                }
                Ok(TicketOutcome::Skipped) => {}
                Err(e) => {
                    report.dead_lettered += 1;
                    tracing::error!(fingerprint = %change.fingerprint, error = %e,
                        "webhook change not written to the dead-letter file (it goes to the topic)");
                }
            }
            report.retries += self.stats.retries - retries;
            let Some(record) = self.take_dead_letter() else {
                continue;
            };
            match serde_json::to_vec(&record) {
                Ok(payload) => report.undelivered.push(Undelivered {
                    reason: "ticket_undeliverable",
                    key: record.ticket_key,
                    payload,
                    attempts: record.attempts,
                    error: record.error,
                    change: Some(i),
                }),
                Err(e) => tracing::error!(error = %e, "serialising a dead-lettered ticket change"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::sink::ticket_server::TicketServer;

    #[test]
    fn the_webhook_section_names_its_fields_and_hides_header_values() {
        let parse = |text: &str| {
            let raw: RawWebhookConfig = toml::from_str(text).expect("toml");
            let mut out = Vec::new();
            let c = RunWebhookConfig::from_raw(&raw, &mut Errors::new("webhook", &mut out));
            (c, out.iter().map(ToString::to_string).collect::<Vec<_>>())
        };
        assert!(parse("").0.is_none());
        let (c, errors) = parse(
            "url = \"http://bot:hunter22@127.0.0.1:1/t\"\nformat = \"alertmanager\"\n\
             queue = 8\nheaders = { Authorization = \"Bearer s3cret\" }\n",
        );
        assert!(errors.is_empty(), "{errors:?}");
        let c = c.expect("valid");
        assert_eq!((c.queue, c.sink.format), (8, PayloadFormat::Alertmanager));
        let mut p = Printer::default();
        c.print(&mut p);
        let text = p.finish();
        assert!(
            text.contains("# header Authorization: [REDACTED]"),
            "{text}"
        );
        assert!(!text.contains("s3cret"), "{text}");
        assert!(!text.contains("hunter22"), "{text}");
        assert!(text.contains("127.0.0.1:1/t"), "{text}");
        let (c, errors) = parse("url = \"https://h/t\"\nca_file = \"/nonexistent/ca.pem\"\n");
        assert!(c.is_none());
        assert!(
            errors[0].starts_with("webhook.ca_file: CA file"),
            "{errors:?}"
        );
        let (c, errors) = parse("url = \"ftp://x\"\nformat = \"jira\"\nqueue = 0\n");
        assert!(c.is_none());
        let fields: Vec<&str> = errors
            .iter()
            .map(|e| e.split(':').next().unwrap_or(""))
            .collect();
        assert_eq!(fields, ["webhook.format", "webhook.queue", "webhook.url"]);
    }
    use crate::incident::testutil::event;
    use crate::incident::{Correlator, IncidentConfig};
    use crate::kb::Role;

    /// Records the waits instead of sleeping.
    #[derive(Clone, Default)]
    pub(crate) struct Recorded(pub(crate) Arc<Mutex<Vec<Duration>>>);

    impl Pause for Recorded {
        fn pause(&mut self, duration: Duration) {
            self.0.lock().expect("lock").push(duration);
        }
    }

    fn sink(url: &str, format: PayloadFormat, dead: DeadLetter) -> (WebhookSink, Recorded) {
        let mut cfg = WebhookConfig::new(url, format);
        cfg.max_attempts = 4;
        cfg.initial_backoff = Duration::from_millis(100);
        cfg.max_backoff = Duration::from_secs(1);
        let waits = Recorded::default();
        let s = WebhookSink::new(cfg, dead)
            .expect("http URL")
            .with_pause(Box::new(waits.clone()));
        (s, waits)
    }

    /// Two incidents, each opened, updated and resolved.
    fn incidents() -> Vec<IncidentEvent> {
        let mut c = Correlator::new(IncidentConfig::default()).expect("config");
        let mut out = Vec::new();
        for job in ["a", "b"] {
            let root = event("XID_79", Role::Root, "gpu_hardware")
                .job(job)
                .host("node-05")
                .ts("2024-05-01T12:00:00Z")
                .build();
            c.observe(&root, &mut out);
            let cascade = event("NCCL_TIMEOUT", Role::Cascade, "collective_timeout")
                .job(job)
                .rank(1)
                .ts("2024-05-01T12:10:00Z")
                .cap("elapsed_ms", "600000")
                .build();
            c.observe(&cascade, &mut out);
        }
        c.resolve_all(&mut out);
        out
    }

    #[test]
    fn exactly_one_ticket_per_incident_after_retries() {
        let server = TicketServer::start(2, 503);
        let (mut s, waits) = sink(&server.url, PayloadFormat::Generic, DeadLetter::Drop);
        let events = incidents();
        assert!(events.len() >= 4);
        for e in &events {
            assert!(matches!(s.send(e), Ok(TicketOutcome::Delivered { .. })));
        }
        // A redelivery of every change (a replay after a crash) changes nothing.
        for e in &events {
            assert!(matches!(s.send(e), Ok(TicketOutcome::Delivered { .. })));
        }
        let tickets = server.tickets.lock().expect("lock");
        assert_eq!(tickets.len(), 2, "one ticket per incident: {tickets:?}");
        for t in tickets.values() {
            assert_eq!(
                t["incident"]["status"], "resolved",
                "the ticket follows its incident"
            );
        }
        assert_eq!(
            server.applied.lock().expect("lock").len(),
            events.len(),
            "each change applied once"
        );
        assert_eq!(
            *waits.0.lock().expect("lock"),
            vec![Duration::from_millis(100), Duration::from_millis(200)],
            "exponential backoff"
        );
        assert_eq!(s.stats().retries, 2);
        assert_eq!(s.stats().delivered as usize, 2 * events.len());
        assert_eq!(
            server.requests().len(),
            2 + 2 * events.len(),
            "two refused attempts, then every change twice"
        );
    }

    #[test]
    fn exhausted_retries_go_to_the_dead_letter_file() {
        let server = TicketServer::start(usize::MAX, 500);
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("dead.jsonl");
        let (mut s, waits) = sink(
            &server.url,
            PayloadFormat::Alertmanager,
            DeadLetter::File(path.clone()),
        );
        let events = incidents();
        let outcome = s.send(&events[0]).expect("dead letter written");
        assert!(matches!(
            outcome,
            TicketOutcome::DeadLettered { attempts: 4, .. }
        ));
        assert_eq!(
            *waits.0.lock().expect("lock"),
            vec![
                Duration::from_millis(100),
                Duration::from_millis(200),
                Duration::from_millis(400)
            ]
        );
        let text = std::fs::read_to_string(&path).expect("dead letters");
        let record: Value =
            serde_json::from_str(text.lines().next().expect("a line")).expect("json");
        assert_eq!(record["type"], "dead_letter");
        assert_eq!(record["attempts"], 4);
        assert_eq!(record["error"], "HTTP 500");
        assert_eq!(record["ticket_key"], events[0].fingerprint);
        assert_eq!(record["payload"]["version"], "4");
        assert!(server.tickets.lock().expect("lock").is_empty());
        // The caller's copy (the topic, in `faultline run`) is the same record, taken once.
        let kept = s.take_dead_letter().expect("kept for the caller");
        assert_eq!(serde_json::to_value(&kept).expect("json"), record);
        assert_eq!(s.take_dead_letter(), None);
        // A file that cannot be written still leaves the caller its copy.
        let mut broken = WebhookSink::new(
            WebhookConfig::new(server.url.clone(), PayloadFormat::Generic),
            DeadLetter::File(dir.path().join("missing").join("dead.jsonl")),
        )
        .expect("sink")
        .with_pause(Box::new(Recorded::default()));
        assert!(broken.send(&events[0]).is_err(), "the file write failed");
        assert_eq!(broken.take_dead_letter().expect("kept").attempts, 5);
    }

    #[test]
    fn client_errors_are_not_retried_and_retry_after_is_honoured() {
        let server = TicketServer::start(1, 400);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink_seen = Arc::clone(&seen);
        let (mut s, waits) = sink(
            &server.url,
            PayloadFormat::Generic,
            DeadLetter::Callback(Box::new(move |r| {
                sink_seen.lock().expect("lock").push(r.error.clone())
            })),
        );
        let events = incidents();
        assert!(matches!(
            s.send(&events[0]),
            Ok(TicketOutcome::DeadLettered { attempts: 1, .. })
        ));
        assert_eq!(*seen.lock().expect("lock"), vec!["HTTP 400".to_string()]);
        assert!(waits.0.lock().expect("lock").is_empty());

        let server = TicketServer::start(1, 429);
        let (mut s, waits) = sink(&server.url, PayloadFormat::Generic, DeadLetter::Drop);
        assert!(matches!(
            s.send(&events[0]),
            Ok(TicketOutcome::Delivered { attempts: 2 })
        ));
        // Retry-After: 7 is capped by max_backoff (1 s).
        assert_eq!(*waits.0.lock().expect("lock"), vec![Duration::from_secs(1)]);
    }

    #[test]
    fn unticketed_incidents_are_not_sent_and_urls_are_checked() {
        let mut c = Correlator::new(IncidentConfig::default()).expect("config");
        let mut out = Vec::new();
        c.observe(
            &event("NCCL_TIMEOUT", Role::Cascade, "collective_timeout").build(),
            &mut out,
        );
        let (mut s, _) = sink(
            "http://127.0.0.1:9/",
            PayloadFormat::Generic,
            DeadLetter::Drop,
        );
        assert_eq!(s.send(&out[0]).expect("skips"), TicketOutcome::Skipped);
        assert_eq!(s.stats().attempts, 0);
        let bad = WebhookSink::new(
            WebhookConfig::new("ftp://x", PayloadFormat::Generic),
            DeadLetter::Drop,
        );
        assert!(matches!(
            bad,
            Err(WebhookError::Http(HttpError::UnsupportedUrl(_)))
        ));
    }

    #[test]
    fn both_ways_to_alertmanager_give_an_incident_the_same_labels() {
        let cfg = WebhookConfig::new("http://am", PayloadFormat::Alertmanager);
        let sink_cfg = crate::sink::alertmanager::AlertmanagerConfig::new("http://am");
        let now = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_714_564_800);
        for e in incidents() {
            let webhook = &alertmanager_payload(&e, &cfg)["alerts"][0]["labels"];
            let sink = crate::sink::alertmanager::alert(&e, &sink_cfg, now).labels;
            assert_eq!(
                *webhook,
                serde_json::to_value(&sink).expect("json"),
                "{e:?}"
            );
            for own in [
                "alertname",
                "incident_id",
                "job_id",
                "error_code",
                "domain",
                "category",
            ] {
                assert!(sink.contains_key(own), "{own} in {sink:?}");
            }
        }
    }

    #[test]
    fn alertmanager_labels_are_stable_over_an_incident() {
        let events = incidents();
        let cfg = WebhookConfig::new("http://am", PayloadFormat::Alertmanager);
        let a: Vec<Value> = events
            .iter()
            .filter(|e| e.job_id == "a")
            .map(|e| alertmanager_payload(e, &cfg))
            .collect();
        assert!(a.len() >= 2);
        let labels: BTreeSet<String> = a
            .iter()
            .map(|p| p["alerts"][0]["labels"].to_string())
            .collect();
        assert_eq!(labels.len(), 1, "{labels:?}");
        let first = &a[0];
        assert_eq!(first["version"], "4");
        assert_eq!(first["status"], "firing");
        assert_eq!(first["alerts"][0]["endsAt"], ZERO_TIME);
        assert_eq!(first["alerts"][0]["startsAt"], "2024-05-01T12:00:00.000Z");
        assert_eq!(first["alerts"][0]["labels"]["error_code"], "XID_79");
        let last = a.last().expect("resolved");
        assert_eq!(last["status"], "resolved");
        assert_eq!(last["alerts"][0]["endsAt"], "2024-05-01T12:10:00.000Z");
    }
}
