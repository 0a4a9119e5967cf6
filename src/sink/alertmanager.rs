//! Incidents into Prometheus Alertmanager: every open incident is an alert posted to its v2 API
//! (`POST /api/v2/alerts`), so incidents get Alertmanager's grouping, inhibition, silences and
//! routing (PagerDuty, Slack, Jira) like any other alert.
//!
//! Flow: the [`Alerter`] is an incident output ([`crate::sink::output`]): `faultline run`'s
//! delivery worker hands it the changes through its bounded queue on its own thread; it keeps
//! the alert of every open incident and posts it with [`AlertmanagerSink`].
//!
//! - **Labels** identify the failure and stay put while it lasts: `alertname="FaultlineIncident"`,
//!   `fingerprint`, `job_id`, the root's `error_code`, `domain`, `category` and `severity`,
//!   `cluster` when the lines named one, and the configured extra labels. Alertmanager keys an
//!   alert on its labels, so a restarted faultline, which reads the open incident again and
//!   posts the same labels, updates the same alert instead of raising a second one. A root
//!   re-elected under the incident (a node's Xid joining after the timeouts) changes the
//!   root's labels: the alert under the old ones is resolved in the same request.
//! - **Annotations** carry what may change: `summary` (the incident's one line), `description`
//!   (the diagnosis title), `root_cause`, `workaround` (the first of the entry's own, else the
//!   first), `culprit`, `root_line`, `runbook_url` and `incident_url` (the admin server's page).
//! - **Firing**: `startsAt` is the first log time (never later than now), `endsAt` now plus four
//!   resend intervals; every open alert is posted again each `resend_interval_ms`, so it stays
//!   firing while the incident is open and ends by itself if faultline is gone for longer.
//! - **Resolved**: the incident's resolution posts the alert with `endsAt` = now, but never
//!   before it has fired for `min_firing_ms` of wall time (default 60 s, over Alertmanager's
//!   default `group_wait` of 30 s): a failure that a replayed backlog opens and resolves within
//!   a second still reaches the receivers. Until then it is posted firing, and its resolution
//!   goes with the first change or resend after.
//! - **Delivery** ([`crate::sink::http`], shared with the webhook, TLS included): transport
//!   errors, 408, 429 and 5xx are retried with exponential backoff up to `max_attempts`; other
//!   4xx are not. A change whose alert could not be posted is counted (`failed`) and posted
//!   again at the next resend (a resolution too, kept in a bounded list). That alert is also
//!   reported as an [`UndeliveredAlert`] (`faultline run` produces it to the dead-letter topic,
//!   reason `alert_undeliverable`); resends that fail are not (they repeat a state already
//!   there). The matcher never waits: a full queue drops the change, counted and logged.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::incident::{IncidentEvent, PublishedRoot, Status};
use crate::secret::redact_url;
use crate::section::{Errors, Printer};
use crate::sink::http::{HttpClient, HttpError, Pause, RetryPolicy, Sleep};
use crate::sink::incident_url;
use crate::sink::output::{
    IncidentOutput, Outcome, OutputContext, OutputError, OutputSection, Undelivered,
};
use crate::time::{format_ms, Millis};

/// The `alertname` of every faultline incident.
pub const ALERT_NAME: &str = "FaultlineIncident";
/// The runbook alerts link to unless `alertmanager.runbook_url` says otherwise.
pub const DEFAULT_RUNBOOK_URL: &str =
    "https://github.com/faultline/faultline/blob/main/docs/runbooks.md#runbook-faultlineincident";
/// Changes waiting for the Alertmanager thread by default.
pub const DEFAULT_QUEUE: usize = 1_024;
/// `endsAt` of a firing alert: now plus this many resend intervals.
pub const ENDS_AFTER_RESENDS: u32 = 4;
/// Alerts per request.
const MAX_ALERTS_PER_POST: usize = 500;

/// The output's name: its metrics' `output` label and its dead letters' stage.
const NAME: &str = "alertmanager";
/// Labels faultline sets itself; extra labels may not use them.
const OWN_LABELS: [&str; 8] = [
    "alertname",
    "incident_id",
    "job_id",
    "error_code",
    "domain",
    "category",
    "severity",
    "cluster",
];

/// `[alertmanager]` as written. Setting `url` turns it on (it needs `[incidents]`).
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAlertmanagerConfig {
    /// Alertmanager's base URL (`http://alertmanager:9093`); alerts go to `/api/v2/alerts`.
    pub url: Option<String>,
    /// PEM certificates of a private CA to trust for an `https://` URL (default: the public
    /// roots).
    pub ca_file: Option<std::path::PathBuf>,
    /// How often every open alert is posted again.
    pub resend_interval_ms: Option<u64>,
    /// The least wall time an alert fires before its resolution is posted (0: at once).
    pub min_firing_ms: Option<u64>,
    /// For one request, connection to response.
    pub timeout_ms: Option<u64>,
    /// Attempts per request, the first included.
    pub max_attempts: Option<u32>,
    /// The first wait between attempts; doubles on each retry.
    pub initial_backoff_ms: Option<u64>,
    /// The longest wait between attempts.
    pub max_backoff_ms: Option<u64>,
    /// Changes waiting for the Alertmanager thread.
    pub queue: Option<usize>,
    /// Extra labels on every alert (`team = "ml-infra"`).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Extra request headers (`Authorization = "Bearer ..."`); values are never printed.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// The `runbook_url` annotation.
    pub runbook_url: Option<String>,
    /// Post only incidents whose ticket is raised (default: every open incident).
    pub ticketed_only: Option<bool>,
}

/// Validated `[alertmanager]`.
#[derive(Debug, Clone)]
pub struct AlertmanagerConfig {
    /// The base URL as configured (printed with its credentials redacted).
    pub url: String,
    /// Where alerts are posted: `<url>/api/v2/alerts`.
    pub endpoint: String,
    /// PEM certificates of a private CA to trust instead of the public roots.
    pub ca_file: Option<std::path::PathBuf>,
    /// How often every open alert is posted again.
    pub resend_interval: Duration,
    /// The least wall time an alert fires before its resolution is posted: longer than
    /// Alertmanager's `group_wait`, so that a failure resolved in log time at once (a replayed
    /// backlog) still reaches the receivers.
    pub min_firing: Duration,
    /// For one request, connection to response.
    pub timeout: Duration,
    /// Attempts per request, the first included.
    pub max_attempts: u32,
    /// Wait before the first retry; doubles on each one.
    pub initial_backoff: Duration,
    /// Cap on any wait.
    pub max_backoff: Duration,
    /// Changes waiting for the Alertmanager thread.
    pub queue: usize,
    /// Extra labels on every alert.
    pub labels: BTreeMap<String, String>,
    /// Extra request headers.
    pub headers: Vec<(String, String)>,
    /// The `runbook_url` annotation.
    pub runbook_url: String,
    /// Post only ticketed incidents.
    pub ticketed_only: bool,
    /// The base of `incident_url` (the admin server's `external_url`, or its address): set when
    /// the service starts.
    pub page_base: Option<String>,
}

impl AlertmanagerConfig {
    /// The defaults for `url`: resend every minute, 10 s per request, 5 attempts from 0.5 s
    /// doubling to 30 s, a queue of 1,024.
    pub fn new(url: &str) -> Self {
        let base = url.trim_end_matches('/');
        let endpoint = if base.ends_with("/api/v2/alerts") {
            base.to_string()
        } else {
            format!("{base}/api/v2/alerts")
        };
        AlertmanagerConfig {
            url: url.to_string(),
            endpoint,
            ca_file: None,
            resend_interval: Duration::from_secs(60),
            min_firing: Duration::from_secs(60),
            timeout: Duration::from_secs(10),
            max_attempts: 5,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(30),
            queue: DEFAULT_QUEUE,
            labels: BTreeMap::new(),
            headers: Vec::new(),
            runbook_url: DEFAULT_RUNBOOK_URL.into(),
            ticketed_only: false,
            page_base: None,
        }
    }

    /// Validates `[alertmanager]`; `None` when it is off (or a field is wrong).
    pub fn from_raw(raw: &RawAlertmanagerConfig, errors: &mut Errors<'_>) -> Option<Self> {
        let url = raw.url.as_ref()?;
        let before = errors.count();
        let mut c = AlertmanagerConfig::new(url);
        c.ca_file = raw.ca_file.clone();
        crate::sink::http::check_settings(url, c.ca_file.as_deref(), errors);
        let ms = |v: Option<u64>, d: Duration| v.map_or(d, Duration::from_millis);
        c.resend_interval = ms(raw.resend_interval_ms, c.resend_interval);
        c.min_firing = ms(raw.min_firing_ms, c.min_firing);
        c.timeout = ms(raw.timeout_ms, c.timeout);
        c.initial_backoff = ms(raw.initial_backoff_ms, c.initial_backoff);
        c.max_backoff = ms(raw.max_backoff_ms, c.max_backoff);
        c.max_attempts = raw.max_attempts.unwrap_or(c.max_attempts);
        c.queue = raw.queue.unwrap_or(c.queue);
        for (key, zero) in [
            ("resend_interval_ms", c.resend_interval.is_zero()),
            ("timeout_ms", c.timeout.is_zero()),
            ("max_attempts", c.max_attempts == 0),
            ("queue", c.queue == 0),
        ] {
            if zero {
                errors.push(key, "must be positive");
            }
        }
        if c.max_backoff < c.initial_backoff {
            errors.push(
                "max_backoff_ms",
                "must be at least alertmanager.initial_backoff_ms",
            );
        }
        for name in raw.labels.keys() {
            let valid = name.chars().enumerate().all(|(i, ch)| {
                ch == '_' || ch.is_ascii_alphabetic() || (i > 0 && ch.is_ascii_digit())
            });
            if name.is_empty() || !valid || name.starts_with("__") {
                errors.push(
                    &format!("labels.{name}"),
                    "a label name is [a-zA-Z_][a-zA-Z0-9_]* and does not start with __",
                );
            } else if OWN_LABELS.contains(&name.as_str()) {
                errors.push(
                    &format!("labels.{name}"),
                    "faultline sets this label itself",
                );
            }
        }
        c.labels = raw.labels.clone();
        c.headers = raw
            .headers
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if let Some(r) = &raw.runbook_url {
            c.runbook_url = crate::secret::without_userinfo(r).into_owned();
        }
        c.ticketed_only = raw.ticketed_only.unwrap_or(false);
        (errors.count() == before).then_some(c)
    }

    /// The effective `[alertmanager]` table: credentials in the URL and header values left out.
    pub fn print(&self, p: &mut Printer) {
        p.table("alertmanager");
        p.value("url", redact_url(&self.url));
        if let Some(path) = &self.ca_file {
            p.value("ca_file", path.display().to_string());
        }
        p.number("resend_interval_ms", self.resend_interval.as_millis());
        p.number("min_firing_ms", self.min_firing.as_millis());
        p.number("timeout_ms", self.timeout.as_millis());
        p.number("max_attempts", self.max_attempts);
        p.number("initial_backoff_ms", self.initial_backoff.as_millis());
        p.number("max_backoff_ms", self.max_backoff.as_millis());
        p.number("queue", self.queue);
        p.value("runbook_url", redact_url(&self.runbook_url));
        p.number("ticketed_only", self.ticketed_only);
        if !self.labels.is_empty() {
            let kv: Vec<String> = self
                .labels
                .iter()
                .map(|(k, v)| format!("{k} = {v:?}"))
                .collect();
            p.line(&format!("labels = {{ {} }}", kv.join(", ")));
        }
        for (name, _) in &self.headers {
            p.line(&format!("# header {name}: [REDACTED]"));
        }
    }
}

/// One alert of Alertmanager's v2 API (`PostableAlert`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Alert {
    /// What identifies the alert.
    pub labels: BTreeMap<String, String>,
    /// What describes it.
    pub annotations: BTreeMap<String, String>,
    /// RFC 3339.
    #[serde(rename = "startsAt")]
    pub starts_at: String,
    /// RFC 3339: in the future while firing, now when resolved.
    #[serde(rename = "endsAt")]
    pub ends_at: String,
    /// The incident page, when the admin server's URL is known.
    #[serde(rename = "generatorURL", skip_serializing_if = "String::is_empty")]
    pub generator_url: String,
}

fn ms_of(t: SystemTime) -> Millis {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as Millis)
}

/// The one label set of incident `i` as an Alertmanager alert, whichever way it is sent (this
/// sink, or the webhook's Alertmanager format): `extra` and then faultline's own labels.
pub fn label_set(i: &IncidentEvent, extra: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut l = extra.clone();
    for (k, v) in [
        ("alertname", ALERT_NAME),
        ("incident_id", &i.id),
        ("job_id", &i.job_id),
    ] {
        l.insert(k.to_string(), v.to_string());
    }
    set_root_labels(&mut l, &PublishedRoot::of(&i.root));
    if let Some(c) = &i.timeline.cluster {
        l.insert("cluster".into(), c.clone());
    }
    l
}

/// Incident `i` as an alert at wall time `now`: firing until `now` plus four resend intervals,
/// or resolved at `now`.
pub fn alert(i: &IncidentEvent, cfg: &AlertmanagerConfig, now: SystemTime) -> Alert {
    let now_ms = ms_of(now);
    let d = &i.diagnosis;
    let mut a = BTreeMap::new();
    a.insert("summary".to_string(), i.summary.clone());
    a.insert("description".to_string(), d.title.clone());
    a.insert("root_cause".to_string(), d.root_cause.trim().to_string());
    if let Some(w) = d
        .verified_workarounds()
        .next()
        .or_else(|| d.workarounds.first())
    {
        a.insert("workaround".to_string(), w.text.clone());
    }
    let c = &i.culprit;
    let mut culprit = String::new();
    if !c.ranks.is_empty() {
        let ranks: Vec<String> = c.ranks.iter().map(u32::to_string).collect();
        culprit.push_str(&format!("rank(s) {} ", ranks.join(", ")));
    }
    if !c.hosts.is_empty() {
        culprit.push_str(&format!("on {} ", c.hosts.join(", ")));
    }
    if !culprit.is_empty() {
        culprit = format!("{}: ", culprit.trim_end());
    }
    culprit.push_str(if c.explanation.is_empty() {
        "unknown"
    } else {
        &c.explanation
    });
    a.insert("culprit".to_string(), culprit);
    a.insert("root_line".to_string(), i.root.line.clone());
    a.insert("fingerprint".to_string(), i.fingerprint.clone());
    a.insert("runbook_url".to_string(), cfg.runbook_url.clone());
    let page = cfg
        .page_base
        .as_deref()
        .map(|b| incident_url(b, &i.id))
        .unwrap_or_default();
    if !page.is_empty() {
        a.insert("incident_url".to_string(), page.clone());
    }
    let first = i
        .first_seen
        .as_deref()
        .and_then(crate::time::parse)
        .and_then(|s| s.millis())
        .unwrap_or(now_ms)
        .min(now_ms);
    let ends = if i.status == Status::Resolved {
        now_ms.max(first)
    } else {
        firing_until(cfg, now_ms)
    };
    Alert {
        labels: label_set(i, &cfg.labels),
        annotations: a,
        starts_at: format_ms(first),
        ends_at: format_ms(ends),
        generator_url: page,
    }
}

/// Why the sink could not be built: the URL or the CA file is unusable.
#[derive(Debug, thiserror::Error)]
#[error("alertmanager: {0}")]
pub struct AlertmanagerError(#[from] HttpError);

/// A request that was not accepted: attempts made and the last error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostFailed {
    /// Attempts made.
    pub attempts: u32,
    /// The last attempt's error (`HTTP 503`, a transport error).
    pub error: String,
    /// The indexes (in the slice given to [`AlertmanagerSink::post`]) of the alerts not
    /// accepted.
    pub alerts: Vec<usize>,
}

/// The alert of an incident change that Alertmanager did not accept, as a dead letter: the
/// JSON payload of a `faultline.reason: alert_undeliverable` record (`payload` can be POSTed
/// to `/api/v2/alerts` as is).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UndeliveredAlert {
    /// Always `dead_letter` (`type` in JSON).
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// Version of the output contract.
    pub schema_version: u32,
    /// Where it was posted, credentials redacted.
    pub url: String,
    /// The incident's id (the alert's `incident_id` label).
    pub incident_id: String,
    /// Attempts made.
    pub attempts: u32,
    /// The last attempt's error.
    pub error: String,
    /// The alert, in the body shape of `POST /api/v2/alerts`.
    pub payload: [Alert; 1],
}

/// Counters since the sink was built.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AlertStats {
    /// Alerts accepted by Alertmanager (each resend counts).
    pub posted: u64,
    /// Alerts of requests that failed after their retries.
    pub failed: u64,
    /// Retries after a retryable failure.
    pub retries: u64,
}

/// Posts alerts to one Alertmanager, with retries.
pub struct AlertmanagerSink {
    cfg: AlertmanagerConfig,
    client: HttpClient,
    pause: Box<dyn Pause>,
    stats: AlertStats,
}

impl std::fmt::Debug for AlertmanagerSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlertmanagerSink")
            .field("endpoint", &redact_url(&self.cfg.endpoint))
            .field("stats", &self.stats)
            .finish()
    }
}

impl AlertmanagerSink {
    /// A sink for `cfg`; fails on a URL that is not HTTP(S) or an unusable CA file.
    pub fn new(cfg: AlertmanagerConfig) -> Result<Self, AlertmanagerError> {
        let client = HttpClient::new(&cfg.endpoint, cfg.timeout, cfg.ca_file.as_deref())?;
        Ok(AlertmanagerSink {
            cfg,
            client,
            pause: Box::new(Sleep),
            stats: AlertStats::default(),
        })
    }

    /// Replaces how the sink waits between attempts (tests record instead of sleeping).
    pub fn with_pause(mut self, pause: Box<dyn Pause>) -> Self {
        self.pause = pause;
        self
    }

    /// The settings in force.
    pub fn config(&self) -> &AlertmanagerConfig {
        &self.cfg
    }

    /// Counters since the sink was built.
    pub fn stats(&self) -> AlertStats {
        self.stats
    }

    /// Posts `alerts` (in requests of at most 500), each request retried per the settings.
    pub fn post(&mut self, alerts: &[Alert]) -> Result<(), PostFailed> {
        let mut failed: Option<PostFailed> = None;
        for (n, chunk) in alerts.chunks(MAX_ALERTS_PER_POST).enumerate() {
            match self.post_one(chunk) {
                Ok(()) => self.stats.posted += chunk.len() as u64,
                Err(e) => {
                    self.stats.failed += chunk.len() as u64;
                    let start = n * MAX_ALERTS_PER_POST;
                    let all = failed.get_or_insert_with(|| PostFailed {
                        attempts: 0,
                        error: String::new(),
                        alerts: Vec::new(),
                    });
                    all.attempts = e.attempts;
                    all.error = e.error;
                    all.alerts.extend(start..start + chunk.len());
                }
            }
        }
        failed.map_or(Ok(()), Err)
    }

    fn post_one(&mut self, alerts: &[Alert]) -> Result<(), PostFailed> {
        let body = serde_json::to_vec(alerts).map_err(|e| PostFailed {
            attempts: 0,
            error: e.to_string(),
            alerts: Vec::new(),
        })?;
        let headers: Vec<(&str, &str)> = self
            .cfg
            .headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let policy = RetryPolicy {
            max_attempts: self.cfg.max_attempts,
            initial_backoff: self.cfg.initial_backoff,
            max_backoff: self.cfg.max_backoff,
        };
        let retries = &mut self.stats.retries;
        self.client
            .post(&headers, &body, policy, self.pause.as_mut(), &mut || {
                *retries += 1
            })
            .map(|_| ())
            .map_err(|f| PostFailed {
                attempts: f.attempts,
                error: f.error,
                alerts: Vec::new(),
            })
    }
}

/// The alert of one open incident.
#[derive(Debug, Clone)]
struct Tracked {
    incident: Arc<IncidentEvent>,
    labels: BTreeMap<String, String>,
    /// When its alert first fired (its labels' first post).
    fired: SystemTime,
}

/// A resolved incident whose alert keeps firing until `due` ([`AlertmanagerConfig::min_firing`]).
#[derive(Debug, Clone)]
struct Ending {
    due: SystemTime,
    /// The resolved incident, its labels and when it first fired.
    tracked: Tracked,
}

/// Incident `i` as a firing alert at `now`, whatever its status.
fn firing(i: &IncidentEvent, cfg: &AlertmanagerConfig, now: SystemTime) -> Alert {
    let mut a = alert(i, cfg, now);
    a.ends_at = format_ms(firing_until(cfg, ms_of(now)));
    a
}

/// The labels that name an incident's root: its `error_code`, `domain` (the entry id's first
/// part), `category` and `severity`.
fn set_root_labels(labels: &mut BTreeMap<String, String>, root: &PublishedRoot) {
    let domain = root.kb_id.split('/').next().unwrap_or("");
    for (k, v) in [
        ("error_code", root.error_code.as_str()),
        ("domain", domain),
        ("category", root.category.as_str()),
        ("severity", root.severity.as_str()),
    ] {
        labels.insert(k.to_string(), v.to_string());
    }
}

/// The previous correlator's alert of incident `i` (see [`IncidentEvent::replaces`]), whose
/// alert is now `a`, resolved at `now`: `a` under the old root's labels, when they differ.
fn replaced(i: &IncidentEvent, a: &Alert, now: SystemTime) -> Option<Alert> {
    let root = i.replaces.as_deref()?;
    let mut old = a.clone();
    set_root_labels(&mut old.labels, root);
    old.ends_at = format_ms(ms_of(now));
    (old.labels != a.labels).then_some(old)
}

/// `endsAt` of an alert firing at `now_ms`: [`ENDS_AFTER_RESENDS`] resend intervals ahead.
fn firing_until(cfg: &AlertmanagerConfig, now_ms: Millis) -> Millis {
    now_ms + (cfg.resend_interval * ENDS_AFTER_RESENDS).as_millis() as Millis
}

/// The alerts of the open incidents, posted on each change and again every resend interval.
#[derive(Debug)]
pub struct Alerter {
    sink: AlertmanagerSink,
    open: HashMap<u64, Tracked>,
    /// Resolved incidents whose alerts have not fired for `min_firing` yet, oldest first.
    ending: VecDeque<Ending>,
    /// Resolutions whose request failed: posted again at the next resend.
    unresolved: VecDeque<Alert>,
    max_unresolved: usize,
    /// The alerts of the last changes not accepted, until [`Alerter::take_undelivered`].
    undelivered: Vec<UndeliveredAlert>,
}

impl Alerter {
    /// Tracks the open incidents' alerts and posts them with `sink`.
    pub fn new(sink: AlertmanagerSink) -> Self {
        let max_unresolved = sink.cfg.queue;
        Alerter {
            sink,
            open: HashMap::new(),
            ending: VecDeque::new(),
            unresolved: VecDeque::new(),
            max_unresolved,
            undelivered: Vec::new(),
        }
    }

    /// The alerts of the changes that the last [`Alerter::changes`] could not post (at most
    /// one per change, or two for a re-elected root).
    pub fn take_undelivered(&mut self) -> Vec<UndeliveredAlert> {
        std::mem::take(&mut self.undelivered)
    }

    /// The sink, for its counters.
    pub fn sink(&self) -> &AlertmanagerSink {
        &self.sink
    }

    /// Incidents whose alert fires: the open ones and those resolved too recently
    /// ([`AlertmanagerConfig::min_firing`]).
    pub fn open(&self) -> usize {
        self.open.len() + self.ending.len()
    }

    /// The resolutions due at `now` (and, past the bound of `queue`, the oldest), as
    /// resolved alerts.
    fn due(&mut self, now: SystemTime) -> Vec<Alert> {
        let mut out = Vec::new();
        while let Some(e) = self.ending.front() {
            if e.due > now && self.ending.len() <= self.max_unresolved {
                break;
            }
            if let Some(e) = self.ending.pop_front() {
                out.push(alert(&e.tracked.incident, &self.sink.cfg, now));
            }
        }
        out
    }

    /// Posts the alerts of `changes` (one request for all): firing for open incidents,
    /// resolved for resolutions, and a resolution of the previous labels when a root was
    /// re-elected. Returns the error of a failed request.
    pub fn changes(
        &mut self,
        changes: &[Arc<IncidentEvent>],
        now: SystemTime,
    ) -> Result<(), PostFailed> {
        let mut alerts = Vec::new();
        let mut resolutions = self.due(now);
        for i in changes {
            let cfg = &self.sink.cfg;
            let resolved = i.status == Status::Resolved;
            // A late line may revise an incident resolved too recently to have stopped firing.
            let ending = self
                .ending
                .iter()
                .position(|e| e.tracked.incident.serial == i.serial);
            let previous = match ending.and_then(|k| self.ending.remove(k)) {
                Some(e) => Some(e.tracked),
                None if resolved => self.open.remove(&i.serial),
                None => self.open.get(&i.serial).cloned(),
            };
            if cfg.ticketed_only && !i.ticket.raised && previous.is_none() {
                continue;
            }
            let a = alert(i, cfg, now);
            let fired = previous
                .as_ref()
                .filter(|p| p.labels == a.labels)
                .map_or(now, |p| p.fired);
            match previous {
                Some(p) if p.labels != a.labels => {
                    let mut old = alert(&p.incident, cfg, now);
                    old.ends_at = format_ms(ms_of(now));
                    resolutions.push(old);
                }
                Some(_) => {}
                // Revised after a takeover: the previous correlator's alert names the old root.
                None => resolutions.extend(replaced(i, &a, now)),
            }
            if resolved {
                let due = fired + cfg.min_firing;
                if due > now {
                    // Resolved in log time before the receivers could hear of it (a replayed
                    // backlog): it fires a while first.
                    alerts.push(firing(i, cfg, now));
                    self.ending.push_back(Ending {
                        due,
                        tracked: Tracked {
                            incident: Arc::clone(i),
                            labels: a.labels,
                            fired,
                        },
                    });
                } else {
                    resolutions.push(a);
                }
            } else {
                self.open.insert(
                    i.serial,
                    Tracked {
                        incident: Arc::clone(i),
                        labels: a.labels.clone(),
                        fired,
                    },
                );
                alerts.push(a);
            }
        }
        if alerts.is_empty() && resolutions.is_empty() {
            return Ok(());
        }
        let n = resolutions.len();
        alerts.extend(resolutions);
        let result = self.sink.post(&alerts);
        if let Err(e) = &result {
            let url = redact_url(&self.sink.cfg.endpoint);
            self.undelivered.clear();
            for a in e.alerts.iter().filter_map(|&i| alerts.get(i)) {
                self.undelivered.push(UndeliveredAlert {
                    kind: "dead_letter",
                    schema_version: crate::enrich::SCHEMA_VERSION,
                    url: url.to_string(),
                    incident_id: a.labels.get("incident_id").cloned().unwrap_or_default(),
                    attempts: e.attempts,
                    error: crate::secret::redact_urls_in(&e.error).into_owned(),
                    payload: [a.clone()],
                });
            }
            let start = alerts.len() - n;
            for a in alerts.drain(start..) {
                self.keep_unresolved(a);
            }
        }
        result
    }

    fn keep_unresolved(&mut self, a: Alert) {
        if self.unresolved.len() >= self.max_unresolved {
            // Its endsAt passes within four resend intervals: Alertmanager resolves it then.
            self.unresolved.pop_front();
        }
        self.unresolved.push_back(a);
    }

    /// Posts every open alert again (extending `endsAt`; those of incidents resolved too
    /// recently too), the resolutions now due and the resolutions that failed.
    pub fn resend(&mut self, now: SystemTime) -> Result<(), PostFailed> {
        let due = self.due(now);
        let cfg = &self.sink.cfg;
        let mut alerts: Vec<Alert> = self
            .open
            .values()
            .map(|t| alert(&t.incident, cfg, now))
            .chain(
                self.ending
                    .iter()
                    .map(|e| firing(&e.tracked.incident, cfg, now)),
            )
            .collect();
        let n = self.unresolved.len() + due.len();
        alerts.extend(due);
        alerts.extend(self.unresolved.drain(..));
        if alerts.is_empty() {
            return Ok(());
        }
        let result = self.sink.post(&alerts);
        if result.is_err() {
            let start = alerts.len() - n;
            for a in alerts.drain(start..) {
                self.keep_unresolved(a);
            }
        }
        result
    }
}

impl OutputSection for AlertmanagerConfig {
    fn name(&self) -> &'static str {
        NAME
    }

    fn queue(&self) -> usize {
        self.queue
    }

    fn build(&self, ctx: &OutputContext) -> Result<Box<dyn IncidentOutput>, OutputError> {
        let mut cfg = self.clone();
        cfg.page_base.clone_from(&ctx.page_base);
        let sink = AlertmanagerSink::new(cfg).map_err(|e| OutputError::new(NAME, e))?;
        Ok(Box::new(Alerter::new(sink.with_pause(ctx.pause()))))
    }

    fn print(&self, p: &mut Printer) {
        AlertmanagerConfig::print(self, p);
    }
}

/// Alertmanager as an incident output: every change, in batches of up to 500 alerts, and every
/// open alert again each `resend_interval`. A change whose request failed counts as `failed`
/// (its alert is posted again at the next resend, a resolution kept until then) and its alert
/// goes to the dead-letter topic as `alert_undeliverable`; no commit hold waits for that.
impl IncidentOutput for Alerter {
    fn name(&self) -> &'static str {
        NAME
    }

    fn max_batch(&self) -> usize {
        MAX_ALERTS_PER_POST
    }

    fn deliver(&mut self, changes: &[Arc<IncidentEvent>], report: &mut Outcome) {
        let before = self.sink.stats();
        let outcome = self.changes(changes, SystemTime::now());
        for u in self.take_undelivered() {
            match serde_json::to_vec(&u) {
                Ok(payload) => report.undelivered.push(Undelivered {
                    reason: "alert_undeliverable",
                    key: u.incident_id.clone(),
                    payload,
                    attempts: u.attempts,
                    error: u.error,
                    change: None,
                }),
                Err(e) => tracing::error!(error = %e, "serialising an undelivered alert"),
            }
        }
        match outcome {
            Ok(()) => report.delivered += changes.len() as u64,
            Err(e) => {
                report.failed += changes.len() as u64;
                tracing::warn!(attempts = e.attempts, error = %e.error,
                    "alerts not accepted by Alertmanager; posted again at the next resend");
            }
        }
        self.report_stats(before, report);
    }

    fn tick_every(&self) -> Option<Duration> {
        Some(self.sink.cfg.resend_interval)
    }

    fn tick(&mut self, report: &mut Outcome) {
        let before = self.sink.stats();
        if let Err(e) = self.resend(SystemTime::now()) {
            tracing::warn!(attempts = e.attempts, error = %e.error,
                "alerts not accepted by Alertmanager; posted again at the next resend");
        }
        self.report_stats(before, report);
    }
}

impl Alerter {
    fn report_stats(&self, before: AlertStats, report: &mut Outcome) {
        report.retries += self.sink.stats().retries - before.retries;
        report.open = Some(self.open());
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use serde_json::Value;

    use super::*;
    use crate::incident::testutil::event;
    use crate::incident::{Correlator, IncidentConfig};
    use crate::kb::Role;
    use crate::sink::ticket_server::TicketServer;

    /// Records the waits instead of sleeping.
    #[derive(Clone, Default)]
    struct Recorded(Arc<Mutex<Vec<Duration>>>);

    impl Pause for Recorded {
        fn pause(&mut self, duration: Duration) {
            self.0.lock().expect("lock").push(duration);
        }
    }

    fn parse(text: &str) -> (Option<AlertmanagerConfig>, Vec<String>) {
        let raw: RawAlertmanagerConfig = toml::from_str(text).expect("toml");
        let mut out = Vec::new();
        let c = AlertmanagerConfig::from_raw(&raw, &mut Errors::new("alertmanager", &mut out));
        (c, out.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn the_section_names_its_fields_and_hides_credentials() {
        assert!(parse("").0.is_none());
        let (c, errors) = parse(
            "url = \"http://am:s3cret@127.0.0.1:9093/\"\nresend_interval_ms = 5000\n\
             labels = { team = \"ml-infra\" }\nheaders = { Authorization = \"Bearer t0ken\" }\n",
        );
        assert!(errors.is_empty(), "{errors:?}");
        let c = c.expect("valid");
        assert_eq!(c.endpoint, "http://am:s3cret@127.0.0.1:9093/api/v2/alerts");
        assert_eq!(c.resend_interval, Duration::from_secs(5));
        let mut p = Printer::default();
        c.print(&mut p);
        let text = p.finish();
        assert!(
            text.contains("url = \"http://[redacted]@127.0.0.1:9093/\""),
            "{text}"
        );
        assert!(text.contains("labels = { team = \"ml-infra\" }"), "{text}");
        assert!(
            !text.contains("s3cret") && !text.contains("t0ken"),
            "{text}"
        );
        let (c, errors) = parse(
            "url = \"ftp://x\"\nqueue = 0\nmax_backoff_ms = 1\nlabels = { severity = \"x\", \"0bad\" = \"y\" }\n",
        );
        assert!(c.is_none());
        let fields: Vec<&str> = errors
            .iter()
            .map(|e| e.split(':').next().unwrap_or(""))
            .collect();
        assert_eq!(
            fields,
            [
                "alertmanager.url",
                "alertmanager.queue",
                "alertmanager.max_backoff_ms",
                "alertmanager.labels.0bad",
                "alertmanager.labels.severity"
            ]
        );
        assert_eq!(
            AlertmanagerConfig::new("http://am:9093/api/v2/alerts").endpoint,
            "http://am:9093/api/v2/alerts"
        );
    }

    /// An Xid incident of job `job` opened (at 12:00), updated by a cascade, then resolved.
    fn incident(job: &str) -> Vec<IncidentEvent> {
        let mut c = Correlator::new(IncidentConfig::default()).expect("config");
        let mut out = Vec::new();
        let mut root = event("XID_79", Role::Root, "gpu_hardware")
            .job(job)
            .host("node-05")
            .ts("2024-05-01T12:00:00Z")
            .build();
        root.cluster = Some("east".into());
        c.observe(&root, &mut out);
        let cascade = event("NCCL_TIMEOUT", Role::Cascade, "collective_timeout")
            .job(job)
            .rank(1)
            .ts("2024-05-01T12:10:00Z")
            .cap("elapsed_ms", "600000")
            .build();
        c.observe(&cascade, &mut out);
        c.resolve_all(&mut out);
        out
    }

    fn at(rfc3339: &str) -> SystemTime {
        let ms = crate::time::parse(rfc3339)
            .and_then(|s| s.millis())
            .expect("a time");
        SystemTime::UNIX_EPOCH + Duration::from_millis(ms as u64)
    }

    #[test]
    fn an_alert_carries_the_labels_annotations_and_times_of_its_incident() {
        let changes = incident("llm-7");
        let mut cfg = AlertmanagerConfig::new("http://am:9093");
        cfg.labels.insert("team".into(), "ml".into());
        cfg.page_base = Some("https://faultline.example/".into());
        let now = at("2024-05-01T13:00:00Z");
        let a = alert(&changes[0], &cfg, now);
        let want: BTreeMap<String, String> = [
            ("alertname", "FaultlineIncident"),
            ("category", "gpu_hardware"),
            ("cluster", "east"),
            ("domain", "test"),
            ("error_code", "XID_79"),
            ("incident_id", changes[0].id.as_str()),
            ("job_id", "llm-7"),
            ("severity", "error"),
            ("team", "ml"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(a.labels, want);
        assert_eq!(a.annotations["summary"], changes[0].summary);
        assert_eq!(a.annotations["description"], "XID_79 title");
        assert_eq!(a.annotations["root_cause"], "because");
        assert_eq!(a.annotations["runbook_url"], DEFAULT_RUNBOOK_URL);
        let page = format!("https://faultline.example/incidents/{}", changes[0].id);
        assert_eq!(a.annotations["fingerprint"], changes[0].fingerprint);
        assert_eq!(a.annotations["incident_url"], page);
        assert_eq!(a.generator_url, page);
        assert!(
            a.annotations["culprit"].contains("node-05"),
            "{:?}",
            a.annotations
        );
        assert_eq!(a.starts_at, "2024-05-01T12:00:00.000Z");
        assert_eq!(
            a.ends_at, "2024-05-01T13:04:00.000Z",
            "now plus four resends"
        );
        let last = changes.last().expect("resolved");
        assert_eq!(last.status, Status::Resolved);
        let r = alert(last, &cfg, now);
        assert_eq!(r.labels, a.labels, "the same alert");
        assert_eq!(r.ends_at, "2024-05-01T13:00:00.000Z", "resolved now");
        // A first log time ahead of the clock starts the alert now, never after its end.
        let early = alert(&changes[0], &cfg, at("2024-05-01T11:00:00Z"));
        assert_eq!(early.starts_at, "2024-05-01T11:00:00.000Z");
    }

    fn alerter(url: &str) -> (Alerter, Recorded) {
        let mut cfg = AlertmanagerConfig::new(url);
        cfg.endpoint = url.to_string();
        cfg.max_attempts = 3;
        cfg.initial_backoff = Duration::from_millis(100);
        cfg.max_backoff = Duration::from_secs(1);
        cfg.queue = 2;
        let waits = Recorded::default();
        let sink = AlertmanagerSink::new(cfg)
            .expect("http")
            .with_pause(Box::new(waits.clone()));
        (Alerter::new(sink), waits)
    }

    fn posted(server: &TicketServer) -> Vec<Vec<Value>> {
        server
            .requests()
            .into_iter()
            .map(|r| r.body.as_array().cloned().expect("an array of alerts"))
            .collect()
    }

    #[test]
    fn changes_fire_resend_and_resolve_one_alert() {
        let server = TicketServer::accepting();
        let (mut a, _) = alerter(&server.url);
        let changes: Vec<Arc<IncidentEvent>> =
            incident("llm-7").into_iter().map(Arc::new).collect();
        let now = at("2024-05-01T13:00:00Z");
        a.changes(&changes[..1], now).expect("posted");
        assert_eq!(a.open(), 1);
        a.resend(now + Duration::from_secs(60))
            .expect("posted again");
        a.changes(&changes[changes.len() - 1..], now + Duration::from_secs(90))
            .expect("resolved");
        assert_eq!(a.open(), 0);
        a.resend(now + Duration::from_secs(120))
            .expect("nothing to send");
        let bodies = posted(&server);
        assert_eq!(bodies.len(), 3, "fire, resend, resolve; nothing after");
        let labels: std::collections::BTreeSet<String> =
            bodies.iter().map(|b| b[0]["labels"].to_string()).collect();
        assert_eq!(labels.len(), 1, "one alert throughout");
        assert_eq!(
            bodies[1][0]["endsAt"], "2024-05-01T13:05:00.000Z",
            "extended"
        );
        assert_eq!(bodies[2][0]["endsAt"], "2024-05-01T13:01:30.000Z", "ended");
        assert_eq!(a.sink().stats().posted, 3);
    }

    /// An incident opened on a rank's NCCL timeout, then re-elected to an earlier OOM root.
    fn re_elected() -> Vec<Arc<IncidentEvent>> {
        let mut c = Correlator::new(IncidentConfig::default()).expect("config");
        let mut out = Vec::new();
        let timeout = event("NCCL_TIMEOUT", Role::Cascade, "collective_timeout")
            .rank(1)
            .ts("2024-05-01T12:10:00Z")
            .build();
        c.observe(&timeout, &mut out);
        let oom = event("CUDA_OOM", Role::Root, "oom")
            .rank(3)
            .ts("2024-05-01T12:09:00Z")
            .build();
        c.observe(&oom, &mut out);
        let changes: Vec<Arc<IncidentEvent>> = out.into_iter().map(Arc::new).collect();
        changes
    }

    #[test]
    fn a_re_elected_root_resolves_the_alert_under_its_old_labels() {
        let changes = re_elected();
        assert_eq!(changes.len(), 2);
        assert_ne!(changes[0].root.error_code, changes[1].root.error_code);
        let server = TicketServer::accepting();
        let (mut a, _) = alerter(&server.url);
        let now = at("2024-05-01T13:00:00Z");
        a.changes(&changes[..1], now).expect("posted");
        a.changes(&changes[1..], now).expect("posted");
        let bodies = posted(&server);
        let second = &bodies[1];
        assert_eq!(second.len(), 2, "{second:?}");
        assert_eq!(second[0]["labels"]["error_code"], "CUDA_OOM");
        assert_eq!(second[0]["endsAt"], "2024-05-01T13:04:00.000Z");
        assert_eq!(second[1]["labels"]["error_code"], "NCCL_TIMEOUT");
        assert_eq!(
            second[1]["endsAt"], "2024-05-01T13:00:00.000Z",
            "the old one ends"
        );
        assert_eq!(a.open(), 1);
    }

    #[test]
    fn an_incident_resolved_at_once_fires_for_min_firing_before_it_resolves() {
        let server = TicketServer::accepting();
        let (mut a, _) = alerter(&server.url);
        let changes: Vec<Arc<IncidentEvent>> =
            incident("llm-7").into_iter().map(Arc::new).collect();
        let now = at("2024-05-01T13:00:00Z");
        // A replayed backlog: opened, updated and resolved in one batch.
        a.changes(&changes, now).expect("posted");
        let bodies = posted(&server);
        assert_eq!(bodies.len(), 1);
        assert!(
            bodies[0]
                .iter()
                .all(|b| b["endsAt"] == "2024-05-01T13:04:00.000Z"),
            "firing only: {:?}",
            bodies[0]
        );
        assert_eq!(a.open(), 1, "it still fires");
        // A resend before min_firing keeps it firing; the first after resolves it.
        a.resend(now + Duration::from_secs(30)).expect("posted");
        a.resend(now + Duration::from_secs(60)).expect("posted");
        let bodies = posted(&server);
        assert_eq!(bodies.len(), 3);
        assert_eq!(bodies[1][0]["endsAt"], "2024-05-01T13:04:30.000Z");
        assert_eq!(bodies[2].len(), 1, "{:?}", bodies[2]);
        assert_eq!(
            bodies[2][0]["endsAt"], "2024-05-01T13:01:00.000Z",
            "resolved"
        );
        assert_eq!(
            bodies[2][0]["labels"], bodies[0][0]["labels"],
            "the same alert"
        );
        assert_eq!(a.open(), 0);
        // With min_firing 0 a resolution goes at once.
        let (mut a, _) = alerter(&server.url);
        a.sink.cfg.min_firing = Duration::ZERO;
        a.changes(&changes, now).expect("posted");
        assert_eq!(a.open(), 0);
        let last = posted(&server).pop().expect("posted");
        assert_eq!(
            last.last().expect("alerts")["endsAt"],
            "2024-05-01T13:00:00.000Z"
        );
    }

    #[test]
    fn a_late_root_of_an_incident_resolved_too_recently_resolves_its_old_alert() {
        let changes = re_elected();
        let mut resolved = (*changes[0]).clone();
        resolved.status = Status::Resolved;
        let mut revised = (*changes[1]).clone();
        revised.status = Status::Resolved;
        let server = TicketServer::accepting();
        let (mut a, _) = alerter(&server.url);
        let now = at("2024-05-01T13:00:00Z");
        // Opened and resolved at once: it keeps firing under the timeout's labels...
        a.changes(&[Arc::clone(&changes[0]), Arc::new(resolved)], now)
            .expect("posted");
        // ...until a late root revises it: the old labels end, the new ones fire.
        a.changes(&[Arc::new(revised)], now + Duration::from_secs(5))
            .expect("posted");
        let bodies = posted(&server);
        let second = &bodies[1];
        assert_eq!(second.len(), 2, "{second:?}");
        assert_eq!(second[0]["labels"]["error_code"], "CUDA_OOM");
        assert_eq!(second[0]["endsAt"], "2024-05-01T13:04:05.000Z", "fires");
        assert_eq!(second[1]["labels"]["error_code"], "NCCL_TIMEOUT");
        assert_eq!(second[1]["endsAt"], "2024-05-01T13:00:05.000Z", "ends");
        assert_eq!(a.open(), 1, "one alert of the failure fires");
    }

    /// After a takeover the new correlator's alerter never saw the incident: a revision that
    /// names the previous correlator's root ends the alert under that root's labels in the
    /// request that fires the new one; without a root of its own to replace, nothing extra.
    #[test]
    fn a_revision_after_a_takeover_resolves_the_previous_correlators_alert() {
        let changes = re_elected();
        let timeout = &changes[0];
        let mut update = (*changes[1]).clone();
        update.replaces = Some(Arc::new(PublishedRoot::of(&timeout.root)));
        let server = TicketServer::accepting();
        let (mut a, _) = alerter(&server.url);
        let now = at("2024-05-01T13:00:00Z");
        a.changes(&[Arc::new(update.clone())], now).expect("posted");
        let body = posted(&server).pop().expect("posted");
        assert_eq!(body.len(), 2, "{body:?}");
        assert_eq!(body[0]["labels"]["error_code"], "CUDA_OOM");
        assert_eq!(body[0]["endsAt"], "2024-05-01T13:04:00.000Z", "fires");
        assert_eq!(body[1]["labels"]["error_code"], "NCCL_TIMEOUT");
        assert_eq!(
            body[1]["labels"]["incident_id"], body[0]["labels"]["incident_id"],
            "the same failure's alert"
        );
        assert_eq!(body[1]["endsAt"], "2024-05-01T13:00:00.000Z", "ends");
        // The same root as before: only the alert itself.
        let (mut a, _) = alerter(&server.url);
        update.replaces = Some(Arc::new(PublishedRoot::of(&update.root)));
        a.changes(&[Arc::new(update)], now).expect("posted");
        assert_eq!(posted(&server).pop().expect("posted").len(), 1);
    }

    #[test]
    fn failed_requests_retry_with_backoff_and_keep_the_resolution() {
        let server = TicketServer::start(usize::MAX, 503);
        let (mut a, waits) = alerter(&server.url);
        let changes: Vec<Arc<IncidentEvent>> =
            incident("llm-7").into_iter().map(Arc::new).collect();
        let now = at("2024-05-01T13:00:00Z");
        let e = a.changes(&changes[..1], now).expect_err("refused");
        assert_eq!((e.attempts, e.error.as_str()), (3, "HTTP 503"));
        assert_eq!(
            *waits.0.lock().expect("lock"),
            vec![Duration::from_millis(100), Duration::from_millis(200)]
        );
        assert_eq!(e.alerts, vec![0], "which alerts were not accepted");
        assert_eq!(a.open(), 1, "still firing: posted again at the next resend");
        let dead = a.take_undelivered();
        assert_eq!(
            dead.len(),
            1,
            "the change's alert, for the dead-letter topic"
        );
        assert_eq!(dead[0].incident_id, changes[0].id);
        assert_eq!((dead[0].attempts, dead[0].error.as_str()), (3, "HTTP 503"));
        assert_eq!(dead[0].payload[0].labels["alertname"], ALERT_NAME);
        assert!(a.take_undelivered().is_empty(), "taken once");
        // Resolved once it has fired for min_firing.
        let later = now + Duration::from_secs(60);
        a.changes(&changes[changes.len() - 1..], later)
            .expect_err("refused");
        let dead = a.take_undelivered();
        assert_eq!(dead.len(), 1);
        assert_eq!(
            dead[0].payload[0].ends_at, "2024-05-01T13:01:00.000Z",
            "the resolution"
        );
        assert_eq!(
            (a.open(), a.unresolved.len()),
            (0, 1),
            "the resolution waits"
        );
        assert_eq!(a.sink().stats().failed, 2);
        assert_eq!(a.sink().stats().retries, 4);
        drop(server);

        // The next resend carries it to a receiver that accepts.
        let server = TicketServer::accepting();
        a.sink.client = HttpClient::new(&server.url, Duration::from_secs(5), None).expect("url");
        a.resend(now + Duration::from_secs(120)).expect("posted");
        assert!(
            a.take_undelivered().is_empty(),
            "resends are not dead-lettered"
        );
        let bodies = posted(&server);
        assert_eq!(bodies.len(), 1);
        assert_eq!(bodies[0][0]["endsAt"], "2024-05-01T13:01:00.000Z");
        assert!(a.unresolved.is_empty());
    }

    #[test]
    fn client_errors_are_not_retried_and_ticketed_only_skips_the_rest() {
        let server = TicketServer::start(1, 400);
        let (mut a, waits) = alerter(&server.url);
        let changes: Vec<Arc<IncidentEvent>> =
            incident("llm-7").into_iter().map(Arc::new).collect();
        let e = a
            .changes(&changes[..1], SystemTime::now())
            .expect_err("400");
        assert_eq!(e.attempts, 1);
        assert!(waits.0.lock().expect("lock").is_empty());

        let mut c = Correlator::new(IncidentConfig::default()).expect("config");
        let mut out = Vec::new();
        c.observe(
            &event("NCCL_TIMEOUT", Role::Cascade, "collective_timeout").build(),
            &mut out,
        );
        assert!(!out[0].ticket.raised);
        let server = TicketServer::accepting();
        let (mut a, _) = alerter(&server.url);
        a.sink.cfg.ticketed_only = true;
        a.changes(&[Arc::new(out[0].clone())], SystemTime::now())
            .expect("nothing to post");
        assert!(server.requests().is_empty());
        a.sink.cfg.ticketed_only = false;
        a.changes(&[Arc::new(out[0].clone())], SystemTime::now())
            .expect("posted");
        assert_eq!(server.requests().len(), 1, "every open incident by default");
    }
}
