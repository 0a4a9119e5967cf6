//! Role `correlate`: the correlator of a scaled-out deployment. It consumes the events topic
//! (what the match members produce: matches only, a small fraction of the log volume) in its
//! own consumer group, so every match of a job and of its hosts meets in one correlator, and
//! produces incident changes, tickets and alerts exactly as role `all` does.
//!
//! ```text
//!  match members ──events (partition = shard)──▶ events topic ──▶ correlator group
//!                                                    │ active member: decode, dedupe,
//!                                                    ▼ IncidentStage (holds, incidents topic, webhook)
//!                                              standbys: no partition until a failover
//! ```
//!
//! Availability comes from Kafka's group protocol: the events topic has one partition per
//! shard, so extra correlator members get no partition and stand by; when the active member
//! dies, the group gives its partitions to a standby, which reads from the committed offset.
//! That offset is held at the first event of every open incident ([`super::incidents`]), so
//! the new member rebuilds every open incident from the events topic, the correlator's log,
//! and produces the same fingerprints and idempotency keys: a ticket is neither lost nor
//! doubled.
//!
//! Duplicates: a match member that dies re-matches, from its committed offset, records whose
//! events it had produced, so the events topic holds some events twice (at most what the
//! member had produced past its last commit). Events of one input partition reach one events
//! partition in order; a replay shows up as a source position at or before the last one seen
//! for that (events partition, input partition), and is skipped and counted
//! (`faultline_correlator_events_total{result="duplicate"}`). The positions kept are bounded
//! ([`MAX_SOURCES`], least recently seen dropped).
//!
//! The KB: events carry their entry's id; the correlator attaches its own KB's entry (its
//! class, catch-all flag and diagnosis drive the election). An entry it lacks (the members run
//! a newer KB) is correlated with the diagnosis the event carried
//! (`result="unknown_entry"`). A record that is not a readable match event is dead-lettered
//! (reason `invalid_event`); a record of another `type` is skipped.
//!
//! Unknown-line events (`type: "unknown"`, [`crate::unknown`]): the match members place them
//! on the shard of the line's match events, and the correlator notes each template for its
//! job ([`crate::incident::unrecognised`]), so an incident without a known root lists the
//! unrecognised templates near the failure, as in role `all` (`result="unknown"`; replays are
//! duplicates, tracked apart from match events). It sees only the events, which are rate
//! limited per template: a template's latest time is that of its latest event, at most
//! `unknown.template_interval_ms` older than its latest line. With `[unknown] enabled = false`
//! the correlator skips them.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use tokio::sync::watch;

use super::{incidents, PipelineError, Stop};
use crate::enrich::{Diagnosis, MatchEvent, Scope, SCHEMA_VERSION};
use crate::incident::lru::LruOrder;
use crate::incident::unrecognised::{RecentUnknown, UnknownSeen};
use crate::kb::{Role, Severity};
use crate::metrics::{CorrelatorResult, DeadLetterReason, Metrics, PanicStage};
use crate::record::Provenance;
use crate::redact::Redactor;
use crate::reload::Loaded;
use crate::runtime::{queue, Health};
use crate::sink::kafka::KafkaSink;
use crate::source::kafka::{forget, Batch};
use crate::time::Millis;
use crate::unknown::UnknownConfig;

/// (events partition, input topic, input partition) whose last source position is kept.
pub const MAX_SOURCES: usize = 100_000;

/// A match event as the events topic carries it ([`MatchEvent`]'s JSON).
#[derive(Debug, Deserialize)]
struct Wire {
    #[serde(rename = "type")]
    kind: Option<String>,
    schema_version: Option<u32>,
    kb_id: Option<String>,
    error_code: Option<String>,
    domain: Option<String>,
    category: Option<String>,
    role: Option<String>,
    severity: Option<String>,
    job_id: Option<String>,
    rank: Option<u32>,
    host: Option<String>,
    pod: Option<String>,
    timestamp: Option<String>,
    source: Option<Provenance>,
    #[serde(default)]
    line: String,
    #[serde(default)]
    truncated: bool,
    #[serde(default)]
    captures: BTreeMap<String, String>,
    #[serde(default)]
    kb_version: String,
    #[serde(default)]
    diagnosis: Option<WireDiagnosis>,
    #[serde(default)]
    scope: Scope,
    #[serde(default)]
    also: Vec<String>,
    cluster: Option<String>,
    template_id: Option<String>,
    template: Option<String>,
    #[serde(default)]
    behind: bool,
    assigned: Option<bool>,
    example: Option<String>,
    count: Option<u64>,
}

/// The part of an event's diagnosis used when the correlator's KB lacks the entry.
#[derive(Debug, Default, Deserialize)]
struct WireDiagnosis {
    #[serde(default)]
    title: String,
    #[serde(default)]
    root_cause: String,
    #[serde(default)]
    verification: String,
}

/// What an events-topic record is.
#[derive(Debug)]
pub enum EventsRecord {
    /// A match event; `known`: the correlator's KB has its entry.
    Match {
        /// The event, with the entry's diagnosis attached.
        event: Box<MatchEvent>,
        /// Whether the correlator's KB has the entry.
        known: bool,
    },
    /// An unknown-line event: a template the job showed.
    Unknown(Box<UnknownNote>),
    /// A match member's progress note ([`super::progress`]): input partition `partition` of
    /// `topic` was read up to a line stamped `timestamp`.
    Progress {
        /// The input topic.
        topic: String,
        /// The input partition.
        partition: i32,
        /// The last line's timestamp as found; none while its member has read no stamped line.
        timestamp: Option<String>,
        /// Whether the partition had records not yet read.
        behind: bool,
        /// Whether the partition is its member's (`false`: a partition no rebalance gave the
        /// member, told so that one no member reads yet holds expiry a while).
        assigned: bool,
    },
    /// Another `type` (a future kind): not the correlator's.
    Other,
}

/// An `unknown` event ([`crate::unknown::UnknownEvent`]) as the correlator reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownNote {
    /// The line's job.
    pub job_id: String,
    /// The template's stable id.
    pub template_id: u64,
    /// The template's text, redacted.
    pub template: String,
    /// The event's line, redacted.
    pub example: String,
    /// Lines of the template in the job so far.
    pub count: u64,
    /// The line's timestamp as written.
    pub timestamp: Option<String>,
    /// Where the line was read.
    pub source: Provenance,
}

impl UnknownNote {
    /// The line's log time: its timestamp (one without a year placed nearest `reference`, the
    /// correlator's clock, as match events are), else `reference`.
    pub fn at(&self, reference: Option<Millis>) -> Option<Millis> {
        let stamp = self.timestamp.as_deref().and_then(crate::time::parse);
        match stamp {
            Some(s) => s
                .millis()
                .or_else(|| reference.map(|r| s.millis_near(Some(r)))),
            None => reference,
        }
    }

    /// What [`crate::incident::unrecognised::RecentUnknown::note`] takes, at `at`.
    pub fn seen(&self, at: Option<Millis>) -> UnknownSeen<'_> {
        UnknownSeen {
            job_id: &self.job_id,
            template_id: self.template_id,
            template: &self.template,
            example: &self.example,
            count: self.count,
            at,
        }
    }
}

/// Reads an `unknown` event's fields.
fn unknown_note(w: Wire) -> Result<EventsRecord, String> {
    let missing = |field: &str| format!("no {field}");
    let id = w.template_id.ok_or_else(|| missing("template_id"))?;
    let template_id = Some(&id)
        .filter(|id| id.len() == 16)
        .and_then(|id| u64::from_str_radix(id, 16).ok())
        .ok_or_else(|| format!("template_id {id:?} is not 16 hex digits"))?;
    Ok(EventsRecord::Unknown(Box::new(UnknownNote {
        job_id: w.job_id.ok_or_else(|| missing("job_id"))?,
        template_id,
        template: w.template.ok_or_else(|| missing("template"))?,
        example: w.example.unwrap_or_default(),
        count: w.count.unwrap_or(1),
        timestamp: w.timestamp,
        source: w.source.ok_or_else(|| missing("source"))?,
    })))
}

fn progress_note(w: Wire) -> Result<EventsRecord, String> {
    match w.source {
        Some(Provenance::Kafka {
            topic, partition, ..
        }) => Ok(EventsRecord::Progress {
            topic,
            partition,
            timestamp: w.timestamp,
            behind: w.behind,
            assigned: w.assigned.unwrap_or(true),
        }),
        _ => Err("a progress note without a Kafka source".into()),
    }
}

/// Reads one events-topic payload; the error says why it is not a readable match event.
pub fn decode_event(
    payload: &[u8],
    enricher: &crate::enrich::Enricher,
) -> Result<EventsRecord, String> {
    let mut w: Wire = serde_json::from_slice(payload).map_err(|e| format!("not JSON: {e}"))?;
    let unknown = match w.kind.as_deref() {
        Some("match") => false,
        Some("unknown") => true,
        Some("progress") => return progress_note(w),
        Some(_) => return Ok(EventsRecord::Other),
        None => return Err("no \"type\"".into()),
    };
    let version = w.schema_version.ok_or("no schema_version")?;
    if version > SCHEMA_VERSION {
        return Err(format!(
            "schema_version {version} is newer than this correlator's {SCHEMA_VERSION}"
        ));
    }
    if unknown {
        return unknown_note(w);
    }
    let missing = |field: &str| format!("no {field}");
    let kb_id = w.kb_id.ok_or_else(|| missing("kb_id"))?;
    let job_id = w.job_id.ok_or_else(|| missing("job_id"))?;
    let source = w.source.ok_or_else(|| missing("source"))?;
    let (diagnosis, role, severity, known) = entry_or_wire(
        enricher,
        &kb_id,
        w.role.as_deref(),
        w.severity.as_deref(),
        w.diagnosis.take(),
    )?;
    let event = MatchEvent {
        kind: "match",
        schema_version: SCHEMA_VERSION,
        error_code: w.error_code.ok_or_else(|| missing("error_code"))?,
        domain: w.domain.unwrap_or_default(),
        category: w.category.unwrap_or_default(),
        kb_id,
        role,
        severity,
        job_id,
        rank: w.rank,
        host: w.host,
        pod: w.pod,
        timestamp: w.timestamp,
        source,
        line: w.line,
        truncated: w.truncated,
        captures: w.captures,
        kb_version: w.kb_version,
        diagnosis,
        scope: w.scope,
        also: w.also,
        cluster: w.cluster,
    };
    Ok(EventsRecord::Match {
        event: Box::new(event),
        known,
    })
}

/// The entry's diagnosis, role and severity from this correlator's KB (`true`), else what the
/// event itself carries (`false`: a KB older than the match member's).
fn entry_or_wire(
    enricher: &crate::enrich::Enricher,
    kb_id: &str,
    role: Option<&str>,
    severity: Option<&str>,
    diagnosis: Option<WireDiagnosis>,
) -> Result<(Arc<Diagnosis>, Role, Severity, bool), String> {
    if let Some((entry, d)) = enricher.entry(kb_id) {
        return Ok((Arc::clone(d), entry.role, entry.severity, true));
    }
    let role = role.and_then(Role::parse).ok_or("no role")?;
    let severity = severity.and_then(Severity::parse).ok_or("no severity")?;
    let d = diagnosis.unwrap_or_default();
    let diagnosis = Diagnosis {
        title: d.title,
        root_cause: d.root_cause,
        verification: d.verification,
        ..Diagnosis::default()
    };
    Ok((Arc::new(diagnosis), role, severity, false))
}

/// The last source position seen per (events partition, input partition): a match member's
/// replay after a crash arrives at or before it ([`MAX_SOURCES`] kept).
#[derive(Debug, Default)]
pub struct Dedupe {
    last: HashMap<SourceKey, Seen>,
    order: LruOrder<SourceKey>,
}

/// (events partition, input topic, input partition).
type SourceKey = (i32, String, i32);

/// The last (input offset, line) seen of a source and its LRU tick.
type Seen = ((i64, u64), u64);

impl Dedupe {
    /// Whether the event read from events partition `partition` with provenance `source` was
    /// seen before; records it otherwise. Events of a file (no input offset) are never
    /// duplicates.
    pub fn seen(&mut self, partition: i32, source: &Provenance) -> bool {
        let Provenance::Kafka {
            topic,
            partition: p,
            offset,
            line,
        } = source
        else {
            return false;
        };
        let at = (*offset, *line);
        let key = (partition, topic.clone(), *p);
        if let Some((last, tick)) = self.last.get_mut(&key) {
            *tick = self.order.touch(*tick);
            if at <= *last {
                return true;
            }
            *last = at;
            return false;
        }
        if self.last.len() >= MAX_SOURCES {
            if let Some(old) = self.order.pop_oldest() {
                self.last.remove(&old);
            }
        }
        let tick = self.order.push(key.clone());
        self.last.insert(key, (at, tick));
        false
    }

    /// Input partitions tracked.
    pub fn len(&self) -> usize {
        self.last.len()
    }

    /// True when nothing is tracked.
    pub fn is_empty(&self) -> bool {
        self.last.is_empty()
    }
}

/// What the correlate stage is built from.
pub(super) struct CorrelateParts {
    /// `[unknown]`: whether unknown events are noted, and for how many jobs.
    pub(super) unknown: UnknownConfig,
    /// How long a stop waits for the sink (`kafka.drain_timeout_ms`).
    pub(super) drain_timeout: Duration,
    pub(super) sink: Arc<KafkaSink>,
    pub(super) health: Arc<Health>,
    pub(super) stop: Arc<Stop>,
    pub(super) kb: watch::Receiver<Arc<Loaded>>,
    pub(super) loaded: Arc<Loaded>,
    pub(super) metrics: Arc<Metrics>,
    pub(super) redactor: Option<Arc<Redactor>>,
    pub(super) incidents: incidents::IncidentStage,
}

/// The correlator thread of role `correlate`.
pub(super) struct CorrelateStage {
    p: CorrelateParts,
    dedupe: Dedupe,
    /// Replays of unknown events, apart from match events: a record's unknown events follow
    /// its match events, at earlier lines.
    unknown_dedupe: Dedupe,
    /// `[unknown]` is on: unknown events are noted for incidents without a known root.
    unknown: bool,
    /// Outputs (dead letters) per record of the batch being processed.
    outputs: Vec<u32>,
}

impl CorrelateStage {
    pub(super) fn new(mut p: CorrelateParts) -> Self {
        let unknown = p.unknown.enabled;
        if unknown {
            let recent = RecentUnknown::new(p.unknown.max_jobs, p.redactor.clone());
            p.incidents.track_unknown(recent);
        }
        CorrelateStage {
            p,
            dedupe: Dedupe::default(),
            unknown_dedupe: Dedupe::default(),
            unknown,
            outputs: Vec::new(),
        }
    }

    pub(super) fn run(mut self, rx: queue::Receiver<Batch>) {
        loop {
            let batch = match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(b) => b,
                Err(queue::RecvError::Timeout) => {
                    if let Some(e) = self.p.sink.failure() {
                        self.p.stop.fail(e.into());
                    }
                    self.p.incidents.tick(self.p.health.input_current());
                    continue;
                }
                Err(queue::RecvError::Closed) => {
                    self.p.incidents.flush_open();
                    break;
                }
            };
            if self.p.stop.failed() {
                forget(&self.p.health.tracker, &batch.records);
                continue;
            }
            self.refresh_kb();
            if let Err(e) = self.process(&batch) {
                self.p.stop.fail(e);
            }
            self.p.incidents.tick(self.p.health.input_current());
        }
        if let Err(e) = self.p.sink.flush(self.p.drain_timeout) {
            tracing::warn!(error = %e, "flushing the producer");
        }
    }

    /// Takes the newest KB, if a reload published one: between batches only.
    fn refresh_kb(&mut self) {
        if self.p.kb.has_changed().unwrap_or(false) {
            let next = Arc::clone(&self.p.kb.borrow_and_update());
            self.p.metrics.set_kb(&next.engine.kb);
            tracing::info!(kb_version = %next.version(), "correlating with the reloaded knowledge base");
            self.p.loaded = next;
        }
    }

    /// What the correlator does with record `i` (its `payload`): a match event is correlated
    /// (once: a match member's replay is a duplicate), an unknown-line event noted, anything
    /// else skipped; a record that cannot be read, or whose correlation panicked, comes back with
    /// the reason and error to dead-letter it.
    fn correlate_one(
        &mut self,
        records: &[crate::source::kafka::SourceRecord],
        i: usize,
        payload: &[u8],
        redactor: &Redactor,
    ) -> (CorrelatorResult, Option<(&'static str, String)>) {
        let r = &records[i];
        match decode_event(payload, &self.p.loaded.enricher) {
            Ok(EventsRecord::Other) => (CorrelatorResult::Skipped, None),
            Ok(EventsRecord::Progress {
                topic,
                partition,
                timestamp,
                behind,
                assigned,
            }) => {
                let incidents = &mut self.p.incidents;
                if assigned {
                    incidents.progress(&topic, partition, timestamp.as_deref(), behind);
                } else {
                    incidents.unassigned(&topic, partition);
                }
                (CorrelatorResult::Progress, None)
            }
            Ok(EventsRecord::Unknown(_)) if !self.unknown => (CorrelatorResult::Skipped, None),
            Ok(EventsRecord::Unknown(note)) => {
                if self.unknown_dedupe.seen(r.id.tp.partition, &note.source) {
                    (CorrelatorResult::Duplicate, None)
                } else {
                    let incidents = &mut self.p.incidents;
                    let at = note.at(incidents.log_now());
                    incidents.observe_unknown(&note.seen(at));
                    (CorrelatorResult::Unknown, None)
                }
            }
            Err(why) => (CorrelatorResult::Invalid, Some(("invalid_event", why))),
            Ok(EventsRecord::Match { event, known }) => {
                if self.dedupe.seen(r.id.tp.partition, &event.source) {
                    (CorrelatorResult::Duplicate, None)
                } else {
                    let one = [(i, *event)];
                    let incidents = &mut self.p.incidents;
                    match crate::isolation::catch(redactor, || incidents.observe(records, &one)) {
                        Ok(()) if known => (CorrelatorResult::Correlated, None),
                        Ok(()) => (CorrelatorResult::UnknownEntry, None),
                        Err(message) => {
                            self.p.metrics.panicked(PanicStage::Correlate);
                            tracing::error!(source = %r.id.tp, offset = r.id.offset,
                                error = %message, "correlating an event panicked (a bug: \
                                please report it); dead-lettering it");
                            let why = format!("correlating the event panicked: {message}");
                            (CorrelatorResult::Invalid, Some(("panic", why)))
                        }
                    }
                }
            }
        }
    }

    /// Decodes, dedupes and correlates each record of `batch`, one at a time (a panic in the
    /// correlator is confined to its event, which is dead-lettered), then resolves them all.
    fn process(&mut self, batch: &Batch) -> Result<(), PipelineError> {
        let records = &batch.records;
        let tracker = Arc::clone(&self.p.health.tracker);
        let families = self.p.metrics.incidents().clone();
        let kb_version = self.p.loaded.version().to_string();
        let redactor = self.p.redactor.clone().unwrap_or_else(Redactor::builtin);
        self.outputs.clear();
        let mut bytes = 0u64;
        for (i, r) in records.iter().enumerate() {
            let payload = batch.payload(r).unwrap_or_default();
            bytes += payload.len() as u64;
            let (result, why) = self.correlate_one(records, i, payload, &redactor);
            families.correlator(result, 1);
            let mut outputs = 0;
            if let Some((reason, error)) = why {
                let label = DeadLetterReason::parse(reason).unwrap_or(DeadLetterReason::Panic);
                let mut counts = self.p.metrics.batch();
                counts.dead_lettered(label);
                self.p.metrics.flush(&mut counts);
                self.p.health.invalid.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(source = %r.id.tp, offset = r.id.offset, reason, error = %error,
                    "dead-lettering an events-topic record");
                if let Err(e) = self.p.sink.send_dead_letter(
                    batch.view(r),
                    reason,
                    "correlate",
                    &error,
                    &kb_version,
                    &self.p.stop,
                ) {
                    tracker.resolve_many(
                        records
                            .iter()
                            .map(|r| &r.id)
                            .zip(self.outputs.iter().copied()),
                    );
                    forget(&tracker, &records[i..]);
                    return Err(e.into());
                }
                outputs = 1;
            }
            self.outputs.push(outputs);
        }
        self.p
            .health
            .records
            .fetch_add(records.len() as u64, Ordering::Relaxed);
        self.p.health.bytes.fetch_add(bytes, Ordering::Relaxed);
        tracker.resolve_many(
            records
                .iter()
                .map(|r| &r.id)
                .zip(self.outputs.iter().copied()),
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kafka(offset: i64, line: u64) -> Provenance {
        Provenance::Kafka {
            topic: "logs".into(),
            partition: 3,
            offset,
            line,
        }
    }

    #[test]
    fn a_replayed_source_position_is_a_duplicate_per_events_partition() {
        let mut d = Dedupe::default();
        assert!(!d.seen(0, &kafka(10, 1)));
        assert!(!d.seen(0, &kafka(10, 2)), "the next line of the record");
        assert!(!d.seen(0, &kafka(12, 1)));
        assert!(d.seen(0, &kafka(10, 2)), "a member's replay");
        assert!(d.seen(0, &kafka(12, 1)));
        assert!(!d.seen(0, &kafka(13, 1)), "past the replay");
        assert!(!d.seen(1, &kafka(10, 1)), "another events partition");
        let file = Provenance::File {
            path: "x".into(),
            line: 1,
        };
        assert!(!d.seen(0, &file) && !d.seen(0, &file), "no offsets: never");
        assert_eq!(d.len(), 2);
    }

    #[test]
    fn the_tracked_positions_are_bounded() {
        let mut d = Dedupe::default();
        for p in 0..(MAX_SOURCES as i32 + 10) {
            let src = Provenance::Kafka {
                topic: "t".into(),
                partition: p,
                offset: 1,
                line: 1,
            };
            d.seen(0, &src);
        }
        assert_eq!(d.len(), MAX_SOURCES);
    }

    #[test]
    fn progress_notes_round_trip_and_say_whose_partition_it_is() {
        let enricher = &Loaded::new(crate::kb::KnowledgeBase::embedded().expect("embedded KB"))
            .expect("compiles")
            .enricher;
        let source = kafka(41, 2);
        let json = |timestamp, behind, assigned| {
            let note =
                super::super::progress::ProgressNote::new(&source, timestamp, behind, assigned);
            serde_json::to_vec(&note).expect("serialises")
        };
        let own = decode_event(&json(Some("Nov 29 09:02:41"), true, None), enricher);
        assert!(
            matches!(
                own,
                Ok(EventsRecord::Progress { ref topic, partition: 3, timestamp: Some(ref t), behind: true, assigned: true })
                    if topic == "logs" && t == "Nov 29 09:02:41"
            ),
            "{own:?}"
        );
        let other = json(None, true, Some(false));
        assert!(
            String::from_utf8_lossy(&other).contains(r#""assigned":false"#),
            "the word is on the wire"
        );
        assert!(
            matches!(
                decode_event(&other, enricher),
                Ok(EventsRecord::Progress {
                    timestamp: None,
                    assigned: false,
                    ..
                })
            ),
            "a partition not the member's"
        );
    }

    #[test]
    fn events_round_trip_through_their_json() {
        let loaded = Loaded::new(crate::kb::KnowledgeBase::embedded().expect("embedded KB"))
            .expect("compiles");
        let (engine, enricher) = (&loaded.engine, &loaded.enricher);
        let line = "May 18 19:02:39 gpu-node-02 kernel: NVRM: Xid (PCI:0000:2b:00): 79, pid=4121, GPU has fallen off the bus.";
        let mut events = Vec::new();
        let mut worker = engine.worker().expect("worker");
        engine
            .scan_chunk_hits(
                &mut worker,
                format!("{line}\n").as_bytes(),
                crate::engine::ChunkInfo {
                    first_line: 1,
                    truncated: false,
                },
                &mut |hit| {
                    events.push(enricher.event(&hit, "job", kafka(7, hit.line)));
                },
            )
            .expect("scans");
        let original = events.pop().expect("the Xid matched");
        let json = serde_json::to_vec(&original).expect("serialises");
        let EventsRecord::Match { event, known } = decode_event(&json, enricher).expect("decodes")
        else {
            panic!("a match event");
        };
        assert!(known);
        assert_eq!(serde_json::to_vec(&*event).expect("serialises"), json);
        assert!(Arc::ptr_eq(&event.diagnosis, &original.diagnosis));

        // An entry this KB lacks keeps the event's own diagnosis.
        let mut v: serde_json::Value = serde_json::from_slice(&json).expect("json");
        v["kb_id"] = "vendor/new-entry".into();
        let EventsRecord::Match { event, known } =
            decode_event(v.to_string().as_bytes(), enricher).expect("decodes")
        else {
            panic!("a match event");
        };
        assert!(!known);
        assert_eq!(event.diagnosis.title, original.diagnosis.title);
        assert_eq!(event.role, original.role);

        // An event carrying its diagnosis by reference gets the whole of it from this KB.
        let lean = enricher
            .clone()
            .with_detail(crate::enrich::Detail::Reference);
        let mut by_reference = original.clone();
        by_reference.diagnosis = Arc::clone(lean.entry(&original.kb_id).expect("entry").1);
        let lean_json = serde_json::to_vec(&by_reference).expect("serialises");
        assert!(
            lean_json.len() < json.len() / 2,
            "the reference is the smaller"
        );
        let EventsRecord::Match { event, known } =
            decode_event(&lean_json, enricher).expect("decodes")
        else {
            panic!("a match event");
        };
        assert!(known);
        assert!(Arc::ptr_eq(&event.diagnosis, &original.diagnosis));
        assert!(!event.diagnosis.root_cause.is_empty());

        assert!(matches!(
            decode_event(br#"{"type":"kb_reload","schema_version":1}"#, enricher),
            Ok(EventsRecord::Other)
        ));
        for bad in [
            &b"not json"[..],
            br#"{"kb_id":"x"}"#,
            br#"{"type":"match","schema_version":1}"#,
        ] {
            assert!(
                decode_event(bad, enricher).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn unknown_events_decode_into_notes_for_incidents_without_a_known_root() {
        let loaded = Loaded::new(crate::kb::KnowledgeBase::embedded().expect("embedded KB"))
            .expect("compiles");
        let enricher = &loaded.enricher;
        let mut live = crate::unknown::LiveMiner::new(
            &crate::unknown::UnknownConfig::default(),
            Some(Redactor::builtin()),
        );
        let meta = crate::record::LineMeta {
            timestamp: Some("2024-11-29T10:00:00Z".into()),
            rank: Some(3),
            host: Some("gpu-node-07".into()),
            cluster: Some("cluster-a".into()),
            ..crate::record::LineMeta::default()
        };
        let line = crate::unknown::UnknownLine {
            job_id: "job-42",
            message:
                "ERROR: upload to https://user:hunter2secret@store.example/x failed with code 7",
            meta: &meta,
            truncated: false,
        };
        let out = live.observe(&line, None);
        let event = live
            .event(&line, &out, kafka(12, 4))
            .expect("a new template: an event");
        assert_eq!(
            event.cluster.as_deref(),
            Some("cluster-a"),
            "the shard key travels"
        );
        let json = serde_json::to_vec(&event).expect("serialises");
        let EventsRecord::Unknown(note) = decode_event(&json, enricher).expect("decodes") else {
            panic!("an unknown event");
        };
        assert_eq!(note.job_id, "job-42");
        assert_eq!(format!("{:016x}", note.template_id), event.template_id);
        assert_eq!(note.template, event.template);
        assert_eq!(note.example, event.example);
        assert!(
            !note.example.contains("hunter2secret"),
            "redacted at the member"
        );
        assert_eq!(note.count, 1);
        assert_eq!(note.source, kafka(12, 4));
        let at = note.at(None);
        assert_eq!(
            at,
            crate::time::parse("2024-11-29T10:00:00Z").and_then(|s| s.millis())
        );

        // Noted, it is listed for the job as the all-role lists it.
        let mut recent = RecentUnknown::new(4, None);
        recent.note(&note.seen(at));
        let listed = recent.near("job-42", at, at, 5);
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].template_id, event.template_id);
        assert_eq!(listed[0].count, 1);
        assert!(recent.near("another-job", None, None, 5).is_empty());

        // A stamp without a year is placed nearest the correlator's clock; none: the clock.
        let clock = crate::time::parse("2024-11-29T12:00:00Z").and_then(|s| s.millis());
        let mut v: serde_json::Value = serde_json::from_slice(&json).expect("json");
        v["timestamp"] = "Nov 29 11:59:00".into();
        let Ok(EventsRecord::Unknown(yearless)) = decode_event(v.to_string().as_bytes(), enricher)
        else {
            panic!("an unknown event");
        };
        assert_eq!(
            yearless.at(clock),
            crate::time::parse("2024-11-29T11:59:00Z").and_then(|s| s.millis())
        );
        v["timestamp"] = serde_json::Value::Null;
        let Ok(EventsRecord::Unknown(untimed)) = decode_event(v.to_string().as_bytes(), enricher)
        else {
            panic!("an unknown event");
        };
        assert_eq!(untimed.at(clock), clock);
        assert_eq!(untimed.at(None), None);

        // Unreadable unknown events are invalid (dead-lettered), not skipped.
        for (field, value) in [
            ("template_id", serde_json::json!("t")),
            ("template_id", serde_json::Value::Null),
            ("template", serde_json::Value::Null),
            ("job_id", serde_json::Value::Null),
            ("schema_version", serde_json::json!(SCHEMA_VERSION + 1)),
        ] {
            let mut bad = v.clone();
            bad[field] = value;
            assert!(
                decode_event(bad.to_string().as_bytes(), enricher).is_err(),
                "{field}"
            );
        }
    }
}
