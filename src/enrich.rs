//! Match + knowledge base -> [`MatchEvent`]: the schema_version 1 output contract.
//!
//! Pure functions of their inputs. The diagnosis of each entry is built once per KB and shared
//! by every event of that entry (`Arc`), so enriching costs an allocation of the event only.
//!
//! The event's `line` and `captures` quote the log, so they pass through the [`Redactor`] here,
//! before anything else sees the event: secrets become `[REDACTED:<kind>]` (on by default; see
//! [`crate::redact`]). Then the line is cut to [`MAX_EVENT_LINE_BYTES`] and each capture to
//! [`MAX_CAPTURE_BYTES`]; redacting first means a cut never leaves half a secret behind.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;

use crate::engine::Hit;
use crate::kb::spec::VersionSpec;
use crate::kb::{Entry, KnowledgeBase, Role, Severity};
use crate::record::{cap_key, LineMeta, Origin, Provenance};
use crate::redact::Redactor;

/// Version of the event and incident JSON contract. Bumped only for breaking changes.
pub const SCHEMA_VERSION: u32 = 1;

/// The most bytes of a line carried in an event; longer lines are cut and marked `truncated`.
pub const MAX_EVENT_LINE_BYTES: usize = 8 * 1024;

/// The most bytes of one capture value carried in an event (a `message` group can hold a
/// whole line); longer values are cut and the event marked `truncated`.
pub const MAX_CAPTURE_BYTES: usize = 1024;

/// What to do about an entry: shared by all its events.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Diagnosis {
    /// The entry's title: one line saying what failed.
    pub title: String,
    /// Where the failure comes from (`node`, `device`, `network`, `framework`, `launcher`,
    /// `teardown`): the headline election's tie-break.
    pub cause_class: crate::kb::CauseClass,
    /// A catch-all entry (any Xid, any Python exception, any death by signal): a specific
    /// root logged at the same time headlines instead.
    #[serde(skip)]
    pub catch_all: bool,
    /// What is going on, for the on-call engineer.
    pub root_cause: String,
    /// Share of incidents the workarounds fix, 0.0..=1.0; only when measured.
    pub fix_rate: Option<f64>,
    /// How the diagnosis was judged ([`crate::kb::entry::VERIFICATIONS`]).
    pub verification: String,
    /// Version compatibility rows.
    pub versions: Vec<VersionSpec>,
    /// In the author's order (first action first, escalations last); the seed's AI-written
    /// advice, where the entry keeps one, after the rest with `origin = "seed"`.
    pub workarounds: Vec<Workaround>,
    /// Fixes known not to work, in the author's order; the seed's after the rest.
    pub dead_ends: Vec<DeadEnd>,
    /// Where the message is printed: source files, functions, documentation pages.
    pub references: Vec<String>,
    /// This diagnosis as JSON, rendered once: every event of the entry carries the same text.
    #[serde(skip)]
    pub rendered: Rendered,
    /// How much of it a match event carries ([`Detail`]); incidents always carry all of it.
    #[serde(skip)]
    pub detail: Detail,
}

/// How much of its entry's diagnosis a match event carries.
///
/// A failure of a 1,024-rank job is a thousand cascade events of one entry; carrying the whole
/// diagnosis (advice, dead ends, versions, references: most of an event's bytes) in each of them
/// /// repeated it a thousand times. By reference, an event carries the title beside its headline
/// fields and the incident carries the diagnosis once; the admin server's `/api/v1/kb/<kb_id>`
/// and `faultline kb explain` on the event's line give it for any event (docs/output.md).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Detail {
    /// The whole diagnosis in every event: for a consumer that reads events without incidents
    /// (and what a diagnosis is until an enricher says otherwise).
    #[default]
    Full,
    /// The title, and the rest by reference (`kb_id` at `kb_version`): the default of `run`
    /// and of `scan` with incidents.
    Reference,
}

impl Detail {
    /// By reference where incidents carry the diagnosis whole, else whole in every event.
    pub fn with_incidents(incidents: bool) -> Self {
        match incidents {
            true => Detail::Reference,
            false => Detail::Full,
        }
    }

    /// The name in configuration and flags.
    pub fn as_str(self) -> &'static str {
        match self {
            Detail::Full => "full",
            Detail::Reference => "reference",
        }
    }
}

/// The fields of a diagnosis an event carries by reference: its title (a diagnosis without
/// `root_cause` is a reference; the entry is `kb_id` at `kb_version`).
#[derive(Serialize)]
struct ReferenceForm<'a> {
    title: &'a str,
}

/// A diagnosis's JSON, rendered on first use ([`serialize_diagnosis`]). Equal to any other:
/// it is a cache of the fields beside it.
#[derive(Clone, Default)]
pub struct Rendered(std::sync::OnceLock<Box<serde_json::value::RawValue>>);

impl PartialEq for Rendered {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl std::fmt::Debug for Rendered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Rendered")
    }
}

/// Serialises an event's diagnosis as the enricher was set: the whole of it, from its JSON
/// rendered once (rendering it per event was the largest cost of writing events; for JSON
/// output only: the text is spliced in as is), or its [`Detail::Reference`] form.
pub fn serialize_diagnosis<S: serde::Serializer>(
    d: &Arc<Diagnosis>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match d.detail {
        Detail::Full => serialize_full_diagnosis(d, s),
        Detail::Reference => ReferenceForm { title: &d.title }.serialize(s),
    }
}

/// Serialises the whole diagnosis, whatever the events carry (an incident's root diagnosis),
/// from its JSON rendered once.
pub fn serialize_full_diagnosis<S: serde::Serializer>(
    d: &Arc<Diagnosis>,
    s: S,
) -> Result<S::Ok, S::Error> {
    if d.rendered.0.get().is_none() {
        match serde_json::value::to_raw_value(&**d) {
            Ok(raw) => {
                let _ = d.rendered.0.set(raw);
            }
            Err(_) => return d.serialize(s),
        }
    }
    match d.rendered.0.get() {
        Some(raw) => raw.serialize(s),
        None => d.serialize(s),
    }
}

/// A workaround as events carry it. A rate is carried only with what backs it: `n` and
/// `source` for a measured or reported rate, `rate_kind = "estimate"` for the seed's.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Workaround {
    /// What to do.
    pub text: String,
    /// A shell command or snippet that applies it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Share of cases it fixed, 0.0..=1.0; only with its sample (`n`, `source`) or as the
    /// seed's estimate.
    pub success_rate: Option<f64>,
    /// The sample size behind the rate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub n: Option<u32>,
    /// Where the rate was measured or reported.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// `measured`, `community_reported` or `estimate`; absent without a rate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_kind: Option<&'static str>,
    /// `seed` for the seed knowledge base's AI-written advice.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub origin: Option<&'static str>,
}

/// A dead end as events carry it; rates as for [`Workaround`].
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct DeadEnd {
    /// The fix people try.
    pub action: String,
    /// Why it does not help.
    pub why: String,
    /// Share of cases it failed, 0.0..=1.0; carried like [`Workaround::success_rate`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fail_rate: Option<f64>,
    /// The sample size behind the rate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub n: Option<u32>,
    /// Where the rate was measured or reported.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// As [`Workaround::rate_kind`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_kind: Option<&'static str>,
    /// As [`Workaround::origin`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub origin: Option<&'static str>,
}

/// A rate as shown: only with its sample (`n` and `source`), else not at all.
fn sampled(
    rate: Option<f64>,
    n: Option<u32>,
    source: &Option<String>,
    verification: &str,
) -> (
    Option<f64>,
    Option<u32>,
    Option<String>,
    Option<&'static str>,
) {
    match (rate, n.filter(|n| *n > 0), source) {
        (Some(r), Some(n), Some(s)) if !s.trim().is_empty() => (
            Some(r),
            Some(n),
            Some(s.clone()),
            Some(crate::kb::rate_kind(verification)),
        ),
        _ => (None, None, None, None),
    }
}

impl Workaround {
    /// How people read its rate: "72% success, community-reported, n=41, source: ...",
    /// "seed's AI estimate, never measured: 80% success", or nothing.
    pub fn rate_text(&self) -> Option<String> {
        rate_text(
            self.success_rate,
            self.n,
            self.source.as_deref(),
            self.rate_kind,
            "success",
        )
    }
}

impl DeadEnd {
    /// As [`Workaround::rate_text`].
    pub fn rate_text(&self) -> Option<String> {
        rate_text(
            self.fail_rate,
            self.n,
            self.source.as_deref(),
            self.rate_kind,
            "fail",
        )
    }
}

/// A rate for people, always with what backs it: an estimate says so; a measured or reported
/// rate names its sample size and source, or is not shown.
fn rate_text(
    rate: Option<f64>,
    n: Option<u32>,
    source: Option<&str>,
    kind: Option<&str>,
    word: &str,
) -> Option<String> {
    let pct = (rate? * 100.0).round();
    Some(match (kind?, n, source) {
        ("estimate", _, _) => format!("seed's AI estimate, never measured: {pct:.0}% {word}"),
        (kind, Some(n), Some(source)) if n > 0 && !source.trim().is_empty() => format!(
            "{pct:.0}% {word}, {}, n={n}, source: {source}",
            kind.replace('_', "-")
        ),
        _ => return None,
    })
}

impl Diagnosis {
    /// The diagnosis of `entry`: its verified advice with rates only where backed, then the
    /// seed's.
    pub fn of(entry: &Entry) -> Self {
        let v = entry.verification.as_str();
        let mut workarounds: Vec<Workaround> = entry
            .workarounds
            .iter()
            .map(|w| {
                let (success_rate, n, source, rate_kind) =
                    sampled(w.success_rate, w.n, &w.source, v);
                Workaround {
                    text: w.text.clone(),
                    command: w.command.clone(),
                    success_rate,
                    n,
                    source,
                    rate_kind,
                    origin: None,
                }
            })
            .collect();
        let mut dead_ends: Vec<DeadEnd> = entry
            .dead_ends
            .iter()
            .map(|d| {
                let (fail_rate, n, source, rate_kind) = sampled(d.fail_rate, d.n, &d.source, v);
                DeadEnd {
                    action: d.action.clone(),
                    why: d.why.clone(),
                    fail_rate,
                    n,
                    source,
                    rate_kind,
                    origin: None,
                }
            })
            .collect();
        if let Some(seed) = &entry.seed {
            let estimate = |r: Option<f64>| r.map(|_| "estimate");
            workarounds.extend(seed.workarounds.iter().map(|w| Workaround {
                text: w.text.clone(),
                command: w.command.clone(),
                success_rate: w.success_rate,
                rate_kind: estimate(w.success_rate),
                origin: Some("seed"),
                ..Workaround::default()
            }));
            dead_ends.extend(seed.dead_ends.iter().map(|d| DeadEnd {
                action: d.action.clone(),
                why: d.why.clone(),
                fail_rate: d.fail_rate,
                rate_kind: estimate(d.fail_rate),
                origin: Some("seed"),
                ..DeadEnd::default()
            }));
        }
        Diagnosis {
            title: entry.title.clone(),
            cause_class: entry.class,
            catch_all: entry.fallback,
            root_cause: entry.root_cause.clone(),
            fix_rate: entry.fix_rate.filter(|_| v == "measured"),
            verification: entry.verification.clone(),
            versions: entry.versions.clone(),
            workarounds,
            dead_ends,
            references: entry.references.clone(),
            rendered: Rendered::default(),
            detail: Detail::Full,
        }
    }

    /// The advice of the entry itself, without the seed's.
    pub fn verified_workarounds(&self) -> impl Iterator<Item = &Workaround> {
        self.workarounds.iter().filter(|w| w.origin.is_none())
    }

    /// The dead ends of the entry itself, without the seed's.
    pub fn verified_dead_ends(&self) -> impl Iterator<Item = &DeadEnd> {
        self.dead_ends.iter().filter(|d| d.origin.is_none())
    }
}

/// One enriched match: the unit faultline emits for every line that hits an entry.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MatchEvent {
    /// Always `match` (`type` in JSON), to tell events from summaries and incidents.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// Version of the output contract, [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Id of the matched entry (`<domain>/<slug>`).
    pub kb_id: String,
    /// The entry's stable error code.
    pub error_code: String,
    /// The entry's software family.
    pub domain: String,
    /// The entry's failure class.
    pub category: String,
    /// What the line means for an incident.
    pub role: Role,
    /// How loud the entry is.
    pub severity: Severity,
    /// The job of the line: the envelope's, else the input's default.
    pub job_id: String,
    /// Rank of the line's process: the envelope's or launcher prefix's (see [`Self::any_rank`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    /// Host the line came from, when the envelope said.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Kubernetes pod, when the envelope said.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    /// The line's timestamp as text, when the line or its envelope had one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<String>,
    /// Where the line was read.
    pub source: Provenance,
    /// The matched line's message (launcher prefix stripped), at most
    /// [`MAX_EVENT_LINE_BYTES`], invalid UTF-8 replaced.
    pub line: String,
    /// The line was cut, at the input's line-length limit or at the event's, or a capture was
    /// cut at [`MAX_CAPTURE_BYTES`].
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
    /// Named groups of the confirming pattern that took part in the match, secrets redacted, each
    /// at most [`MAX_CAPTURE_BYTES`].
    pub captures: BTreeMap<String, String>,
    /// Content hash of the KB that produced the event.
    pub kb_version: String,
    /// What to do about it, shared by every event of the entry.
    #[serde(serialize_with = "serialize_diagnosis")]
    pub diagnosis: Arc<Diagnosis>,
    /// `node` for a node's own event (a kernel, journald or node-daemon line, or an envelope
    /// naming a host and no job): it belongs to whichever jobs ran on `host`, and `job_id` is
    /// `node:<host>`. `job` otherwise.
    pub scope: Scope,
    /// Other entries that matched the same line and yielded to this one (one line, one event).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub also: Vec<String>,
    /// The envelope's `cluster` (or `k8s.cluster.name`), when it named one: a metrics
    /// dimension, and the correlator shard key (`incidents.shard_by = "cluster"`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
}

/// Whose event a match is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// A job's own line.
    #[default]
    Job,
    /// A node's own line: joined to the jobs on its host by the correlator.
    Node,
}

/// The job of a line that does not name one itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobName<'a> {
    /// Said by the caller (`--job-id`, a Kafka key or header): the line is that job's.
    Given(&'a str),
    /// Guessed (a file name, a default): a node's own line keeps its host instead.
    Guessed(&'a str),
}

/// The job a line belongs to, and whose line it is: the envelope's job, else a given job, else
/// `node:<host>` for a node's own line (a syslog header, or an envelope naming a host and no
/// job), else the guessed job.
pub fn job_of<'a>(meta: &'a LineMeta, job: JobName<'a>) -> (Cow<'a, str>, Scope) {
    let node_line = matches!(meta.origin, Origin::NodeLog | Origin::Envelope);
    // Every job id becomes a key: capped here, the one place that decides it (docs/limits.md).
    match (&meta.job_id, job, &meta.host) {
        (Some(j), _, _) => (cap_key(j.as_str()), Scope::Job),
        (None, JobName::Given(j), _) => (cap_key(j), Scope::Job),
        (None, JobName::Guessed(_), Some(host)) if node_line => {
            (Cow::Owned(format!("node:{}", cap_key(host))), Scope::Node)
        }
        (None, JobName::Guessed(j), _) => (cap_key(j), Scope::Job),
    }
}

impl MatchEvent {
    /// The rank of a match: the envelope's or launcher prefix's, else a `rank` capture.
    pub fn any_rank(&self) -> Option<u32> {
        self.rank.or_else(|| {
            self.captures
                .get("rank")
                .and_then(|r| r.trim().parse().ok())
        })
    }
}

/// Builds events for one KB version.
#[derive(Debug, Clone)]
pub struct Enricher {
    kb: Arc<KnowledgeBase>,
    diagnoses: Vec<Arc<Diagnosis>>,
    /// Entry index by id, for events read back from the events topic.
    by_id: Arc<std::collections::HashMap<String, usize>>,
    /// Redacts the line and captures; `None` turns redaction off (`scan --no-redact`).
    redactor: Option<Arc<Redactor>>,
}

impl Enricher {
    /// An enricher that redacts with the built-in rules.
    pub fn new(kb: Arc<KnowledgeBase>) -> Self {
        let diagnoses = kb
            .entries
            .iter()
            .map(|e| Arc::new(Diagnosis::of(e)))
            .collect();
        let by_id = kb
            .entries
            .iter()
            .enumerate()
            .map(|(i, e)| (e.id.clone(), i))
            .collect();
        Enricher {
            kb,
            diagnoses,
            by_id: Arc::new(by_id),
            redactor: Some(Redactor::builtin()),
        }
    }

    /// The entry `kb_id` and its shared diagnosis, when this KB has it: the correlator of role
    /// `correlate` re-attaches them to events read back from the events topic.
    pub fn entry(&self, kb_id: &str) -> Option<(&crate::kb::Entry, &Arc<Diagnosis>)> {
        let &i = self.by_id.get(kb_id)?;
        Some((&self.kb.entries[i], &self.diagnoses[i]))
    }

    /// Events carry their diagnosis as `detail` says ([`Detail::Full`] when built).
    pub fn with_detail(mut self, detail: Detail) -> Self {
        if self.diagnoses.first().is_some_and(|d| d.detail == detail) {
            return self;
        }
        self.diagnoses = self
            .diagnoses
            .iter()
            .map(|d| {
                Arc::new(Diagnosis {
                    detail,
                    rendered: Rendered::default(),
                    ..(**d).clone()
                })
            })
            .collect();
        self
    }

    /// Replaces the redactor (extra rules), or turns redaction off with `None`.
    pub fn with_redactor(mut self, redactor: Option<Arc<Redactor>>) -> Self {
        self.redactor = redactor;
        self
    }

    /// The redactor applied to lines and captures; `None` when redaction is off.
    pub fn redactor(&self) -> Option<&Arc<Redactor>> {
        self.redactor.as_ref()
    }

    /// The knowledge base the events are built from.
    pub fn kb(&self) -> &Arc<KnowledgeBase> {
        &self.kb
    }

    /// The event for `hit`; `default_job`, a guess, names the job when the line itself does
    /// not.
    pub fn event(&self, hit: &Hit<'_>, default_job: &str, source: Provenance) -> MatchEvent {
        self.event_for(hit, JobName::Guessed(default_job), source)
    }

    /// The event for `hit`, of job `job` when the line names none.
    pub fn event_for(&self, hit: &Hit<'_>, job: JobName<'_>, source: Provenance) -> MatchEvent {
        let entry = &self.kb.entries[hit.entry];
        let meta = &hit.record.meta;
        let (job_id, scope) = job_of(meta, job);
        let job_id = job_id.into_owned();
        let message = self.redact(&hit.record.message);
        let mut cut = message.len() > MAX_EVENT_LINE_BYTES;
        let shown = if cut {
            &message[..MAX_EVENT_LINE_BYTES]
        } else {
            &message[..]
        };
        let captures: BTreeMap<String, String> = hit
            .captures
            .iter()
            .map(|(k, v)| {
                let value = self.redact(v.as_bytes());
                let (value, capture_cut) = cut_utf8(&value, MAX_CAPTURE_BYTES);
                cut |= capture_cut;
                (k.clone(), value)
            })
            .collect();
        MatchEvent {
            kind: "match",
            schema_version: SCHEMA_VERSION,
            kb_id: entry.id.clone(),
            error_code: entry.error_code.clone(),
            domain: entry.domain.clone(),
            category: entry.category.clone(),
            role: entry.role,
            severity: entry.severity,
            job_id,
            rank: meta.rank,
            // Captured fields win over envelope fields only where the envelope says nothing.
            host: meta
                .host
                .as_deref()
                .or_else(|| captures.get("host").map(String::as_str))
                .map(|h| cap_key(h).into_owned()),
            pod: meta.pod.as_deref().map(|p| cap_key(p).into_owned()),
            timestamp: meta.timestamp.clone(),
            source,
            line: String::from_utf8_lossy(shown).into_owned(),
            truncated: cut || hit.record.truncated,
            captures,
            kb_version: self.kb.version.clone(),
            diagnosis: Arc::clone(&self.diagnoses[hit.entry]),
            scope,
            also: hit
                .also
                .iter()
                .map(|&e| self.kb.entries[e].id.clone())
                .collect(),
            cluster: meta.cluster.as_deref().map(|c| cap_key(c).into_owned()),
        }
    }

    /// `text` with its secrets replaced, when redaction is on.
    fn redact<'a>(&self, text: &'a [u8]) -> std::borrow::Cow<'a, [u8]> {
        match &self.redactor {
            Some(r) => r.redact(text),
            None => std::borrow::Cow::Borrowed(text),
        }
    }
}

/// `bytes` as text, cut to at most `max` bytes on a character boundary; whether it was cut.
fn cut_utf8(bytes: &[u8], max: usize) -> (String, bool) {
    let text = String::from_utf8_lossy(bytes);
    if text.len() <= max {
        return (text.into_owned(), false);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (text[..end].to_string(), true)
}

#[cfg(test)]
mod tests {
    use crate::incident::testutil::event;

    #[test]
    fn the_diagnosis_is_rendered_once_and_serialises_as_its_fields() {
        let e = event("XID_79", crate::kb::Role::Root, "gpu_hardware").build();
        assert!(e.diagnosis.rendered.0.get().is_none());
        let first: serde_json::Value = serde_json::to_value(&e).expect("serialises");
        assert!(
            e.diagnosis.rendered.0.get().is_some(),
            "rendered on first use"
        );
        // Cached or not, the event carries exactly the diagnosis's own fields.
        let direct = serde_json::to_value(&*e.diagnosis).expect("serialises");
        assert_eq!(first["diagnosis"], direct);
        assert_eq!(first["diagnosis"]["title"], "XID_79 title");
        let text = serde_json::to_string(&e).expect("serialises");
        let again: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
        assert_eq!(again, first);
    }
}
