//! Unknown failures, live: error lines that no KB entry knows, mined per job into templates and
//! reported as `type: "unknown"` events by `scan` and `faultline run`.
//!
//! Flow, per chunk (`scan`) or batch (`run`): the engine says which lines hit; [`find`] picks
//! the other lines that look like errors; each goes to its job's [`LiveMiner`] (a
//! [`crate::templates::Miner`] per job), which places it in a template and decides, by the
//! rate limits of [`limit`], whether it becomes an [`UnknownEvent`]: when its template is new
//! or its text changed, then at most once per template per `template_interval_ms`, and at most
//! `max_events_per_minute` per job. The drivers also hand every line to the incident side
//! ([`crate::incident::unrecognised`]), so that an incident without a known root lists the
//! unknown templates seen near the failure. Unknown lines never become matches: they open no
//! incident and page nobody.
//!
//! Determinism: the miner is deterministic and `scan` runs the limits on the log's clock, so
//! the same input gives the same events and template ids in every run, whatever the number of
//! threads (lines are mined in input order).
//!
//! Bounded: at most `max_jobs` jobs have a miner (the least recently active one is dropped,
//! counted), each with at most `max_templates` templates (the least recently seen is evicted,
//! counted) and a small exact-match cache ([`MINER_CACHE_ENTRIES`]).
//!
//! - [`config`]: the `[unknown]` table.
//! - [`find`]: which lines of a chunk are unknown errors.
//! - [`limit`]: the job's clock and the rate limits.

pub mod config;
pub mod find;
pub mod limit;

use std::collections::HashMap;
use std::io::{self, Write};
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

pub use crate::templates::FilterMemo;
pub use config::{RawUnknownConfig, UnknownConfig};
pub use find::unknown_text;
pub use limit::Change;

use crate::enrich::SCHEMA_VERSION;
use crate::incident::lru::LruOrder;
use crate::incident::unrecognised::UnknownSeen;
use crate::record::{LineMeta, Provenance};
use crate::redact::Redactor;
use crate::templates::{FastMap, Miner, MinerConfig, Template, TemplateId};
use crate::time::Millis;
use limit::{Decision, JobBudget, JobClock, Limits, TemplateLimit};

/// Bytes of the line carried in an event's `example` (after redaction); longer is cut and the
/// event marked `truncated`.
pub const MAX_EXAMPLE_BYTES: usize = 2048;

/// Entries of each job's exact-match cache (masked line -> template).
pub const MINER_CACHE_ENTRIES: usize = 1024;

/// One `type: "unknown"` event: an error line that no KB entry knows, as its template.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UnknownEvent {
    /// Always `unknown` (`type` in JSON).
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// Version of the output contract, [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Stable id of the template: 16 hex digits, the hash of its text when it was born.
    pub template_id: String,
    /// The template's text now, secrets redacted.
    pub template: String,
    /// Why this event: `new`, `changed` (the template's text generalised) or `recurring`.
    pub change: Change,
    /// Lines of the template in this job so far, this one included.
    pub count: u64,
    /// The line's job, as match events name it.
    pub job_id: String,
    /// Rank of the line's process, from the envelope or a launcher prefix.
    pub rank: Option<u32>,
    /// Host the line came from, when the envelope or the line's header said.
    pub host: Option<String>,
    /// The line's timestamp as written, when it had one.
    pub timestamp: Option<String>,
    /// Where the line was read, as in match events.
    pub source: Provenance,
    /// The line (its message, launcher prefix stripped), secrets redacted, at most
    /// [`MAX_EXAMPLE_BYTES`].
    pub example: String,
    /// The line was cut, at the input's line limit or at [`MAX_EXAMPLE_BYTES`].
    pub truncated: bool,
    /// The envelope's `cluster`, when it named one: the correlator shard key, as for match
    /// events.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
}

/// One unknown error line, as a driver hands it to [`LiveMiner::observe`].
#[derive(Debug, Clone, Copy)]
pub struct UnknownLine<'a> {
    /// The line's job ([`crate::enrich::job_of`]).
    pub job_id: &'a str,
    /// The message, as the miner reads it.
    pub message: &'a str,
    /// What the envelope or the line's header said.
    pub meta: &'a LineMeta,
    /// The line was cut at the input's line limit.
    pub truncated: bool,
}

/// A chunk's unknown lines kept for later, in order: what `scan`'s workers hand to its writer.
///
/// The messages share one buffer and the slots are kept when cleared, a slot's [`LineMeta`]
/// overwritten in place ([`LineMeta::clone_from`] reuses its strings), so a buffer reused chunk
/// after chunk allocates nothing per line once it has grown to a chunk's worth.
#[derive(Debug, Default)]
pub struct UnknownLines {
    /// The messages, one after another.
    text: String,
    /// The lines; those from `len` on are spare, kept for their strings' capacity.
    slots: Vec<Slot>,
    len: usize,
}

#[derive(Debug, Default)]
struct Slot {
    line: u64,
    /// Where the message ends in `text` (it starts where the slot before ends).
    end: usize,
    meta: LineMeta,
    truncated: bool,
}

/// One line of [`UnknownLines`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeptLine<'a> {
    /// Line number in its input (or chunk, before the writer fixes it up).
    pub line: u64,
    /// The message.
    pub message: &'a str,
    /// What the envelope or the line's header said.
    pub meta: &'a LineMeta,
    /// The line was cut at the input's line limit.
    pub truncated: bool,
}

impl UnknownLines {
    /// Empties the buffer, keeping its memory.
    pub fn clear(&mut self) {
        self.text.clear();
        self.len = 0;
    }

    /// Keeps one line.
    pub fn push(&mut self, line: u64, message: &str, meta: &LineMeta, truncated: bool) {
        self.text.push_str(message);
        let end = self.text.len();
        match self.slots.get_mut(self.len) {
            Some(slot) => {
                slot.line = line;
                slot.end = end;
                slot.meta.clone_from(meta);
                slot.truncated = truncated;
            }
            None => self.slots.push(Slot {
                line,
                end,
                meta: meta.clone(),
                truncated,
            }),
        }
        self.len += 1;
    }

    /// Lines kept.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no line is kept.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds `by` to every line number (a chunk's lines placed in their input).
    pub fn offset_lines(&mut self, by: u64) {
        for slot in &mut self.slots[..self.len] {
            slot.line += by;
        }
    }

    /// The lines, in the order kept.
    pub fn iter(&self) -> impl Iterator<Item = KeptLine<'_>> + '_ {
        let mut start = 0;
        self.slots[..self.len].iter().map(move |slot| {
            let message = &self.text[start..slot.end];
            start = slot.end;
            KeptLine {
                line: slot.line,
                message,
                meta: &slot.meta,
                truncated: slot.truncated,
            }
        })
    }
}

/// What [`LiveMiner::observe`] did with a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// The line's template.
    pub id: TemplateId,
    /// Lines of the template in the job so far.
    pub count: u64,
    /// The job's clock at this line.
    pub at: Option<Millis>,
    /// Emit an event, and why; `None`: counted only.
    pub emit: Option<Change>,
}

/// What the live miners did so far (cumulative).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LiveStats {
    /// Unknown error lines mined.
    pub lines: u64,
    /// Events emitted.
    pub events: u64,
    /// Due events held back by the per-job budget (each counted once).
    pub suppressed: u64,
    /// Templates evicted from a full job miner.
    pub evicted_templates: u64,
    /// Job miners dropped to stay within `max_jobs`.
    pub evicted_jobs: u64,
}

struct JobState {
    tick: u64,
    miner: Miner,
    /// Keyed by template id, itself a hash: no second hash per line.
    limits: FastMap<TemplateId, TemplateLimit>,
    budget: JobBudget,
    clock: JobClock,
    evicted: u64,
}

/// The per-job miners and their rate limits. See the module docs.
pub struct LiveMiner {
    cfg: UnknownConfig,
    miner: MinerConfig,
    jobs: HashMap<Arc<str>, JobState>,
    lru: LruOrder<Arc<str>>,
    templates: usize,
    stats: LiveStats,
    redactor: Option<Arc<Redactor>>,
}

impl std::fmt::Debug for LiveMiner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveMiner")
            .field("jobs", &self.jobs.len())
            .field("templates", &self.templates)
            .field("stats", &self.stats)
            .finish()
    }
}

/// A job's templates, for `scan`'s text section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobTemplates {
    /// The job.
    pub job_id: String,
    /// Its unknown error lines.
    pub lines: u64,
    /// (template id, template text redacted, count), most frequent first.
    pub templates: Vec<(String, String, u64)>,
}

impl LiveMiner {
    /// Miners with `cfg`'s bounds; events' text redacted by `redactor` (`None`: as read).
    pub fn new(cfg: &UnknownConfig, redactor: Option<Arc<Redactor>>) -> Self {
        LiveMiner {
            miner: MinerConfig {
                max_templates: cfg.max_templates.max(1),
                cache_entries: MINER_CACHE_ENTRIES,
                ..MinerConfig::default()
            },
            cfg: cfg.clone(),
            jobs: HashMap::new(),
            lru: LruOrder::default(),
            templates: 0,
            stats: LiveStats::default(),
            redactor,
        }
    }

    /// What was done so far.
    pub fn stats(&self) -> LiveStats {
        self.stats
    }

    /// Live templates over every job.
    pub fn templates(&self) -> usize {
        self.templates
    }

    /// Jobs with a miner.
    pub fn jobs(&self) -> usize {
        self.jobs.len()
    }

    /// Mines one unknown line; `wall` is the wall clock (`None` in `scan`: log time only).
    pub fn observe(&mut self, line: &UnknownLine<'_>, wall: Option<Instant>) -> Outcome {
        self.stats.lines += 1;
        let limits = Limits {
            template_interval_ms: self.cfg.template_interval_ms,
            max_events_per_minute: self.cfg.max_events_per_minute,
        };
        let state = self.job(line.job_id);
        let stamp = line
            .meta
            .timestamp
            .as_deref()
            .and_then(crate::time::parse)
            .map(|s| match s.millis() {
                Some(ms) => ms,
                // No year: the one nearest the job's clock, else the wall clock's, as the
                // correlator places such stamps (so incident windows compare).
                None => s.millis_near(state.clock.now().or_else(wall_ms)),
            });
        let at = state.clock.tick(stamp, wall);
        let before = state.miner.len();
        let seen = state.miner.observe(line.message);
        let after = state.miner.len();
        let evicted = state.miner.evicted() - state.evicted;
        state.evicted += evicted;
        if evicted > 0 || seen.changed {
            // Forget the limits of evicted and merged templates.
            let miner = &state.miner;
            state
                .limits
                .retain(|id, _| miner.resolve(*id) == *id && miner.get(*id).is_some());
        }
        let change = if seen.is_new {
            Some(Change::New)
        } else if seen.changed {
            Some(Change::Changed)
        } else {
            None
        };
        let t = state.limits.entry(seen.id).or_default();
        let decision = limit::decide(t, &mut state.budget, change, at, limits);
        self.templates = self.templates + after - before;
        self.stats.evicted_templates += evicted;
        let emit = match decision {
            Decision::Emit(why) => {
                self.stats.events += 1;
                Some(why)
            }
            Decision::Suppressed => {
                self.stats.suppressed += 1;
                None
            }
            Decision::Quiet | Decision::Held => None,
        };
        Outcome {
            id: seen.id,
            count: seen.count,
            at,
            emit,
        }
    }

    /// The job's state, created (and the least recently active job dropped) when new.
    fn job(&mut self, job_id: &str) -> &mut JobState {
        // A job already known lends its key (no allocation per line).
        let known = self
            .jobs
            .get_key_value(job_id)
            .map(|(key, _)| Arc::clone(key));
        let fresh = known.is_none();
        if fresh && self.jobs.len() >= self.cfg.max_jobs.max(1) {
            if let Some(old) = self.lru.pop_oldest() {
                if let Some(gone) = self.jobs.remove(&old) {
                    self.templates -= gone.miner.len();
                }
                self.stats.evicted_jobs += 1;
            }
        }
        let lru = &mut self.lru;
        let miner = &self.miner;
        let key = known.unwrap_or_else(|| Arc::from(job_id));
        let state = self.jobs.entry(key).or_insert_with_key(|key| JobState {
            tick: lru.push(Arc::clone(key)),
            miner: Miner::new(miner.clone()),
            limits: FastMap::default(),
            budget: JobBudget::default(),
            clock: JobClock::default(),
            evicted: 0,
        });
        if !fresh {
            state.tick = lru.touch(state.tick);
        }
        state
    }

    /// The live template `id` of `job_id`.
    pub fn template(&self, job_id: &str, id: TemplateId) -> Option<&Template> {
        self.jobs.get(job_id)?.miner.get(id)
    }

    /// What the incident side needs to know about a mined line ([`Outcome`]).
    pub fn seen<'a>(&'a self, job_id: &'a str, out: &Outcome) -> Option<UnknownSeen<'a>> {
        let t = self.template(job_id, out.id)?;
        Some(UnknownSeen {
            job_id,
            template_id: out.id.0,
            template: t.text(),
            example: t.example(),
            count: out.count,
            at: out.at,
        })
    }

    /// The event for a line whose [`Outcome`] says to emit one; `source` says where it was read.
    pub fn event(
        &self,
        line: &UnknownLine<'_>,
        out: &Outcome,
        source: Provenance,
    ) -> Option<UnknownEvent> {
        let change = out.emit?;
        let template = self
            .template(line.job_id, out.id)
            .map_or(String::new(), |t| self.redact(t.text()));
        let example = self.redact(line.message);
        let (example, cut) = cut(example, MAX_EXAMPLE_BYTES);
        Some(UnknownEvent {
            kind: "unknown",
            schema_version: SCHEMA_VERSION,
            template_id: out.id.to_string(),
            template,
            change,
            count: out.count,
            job_id: line.job_id.to_string(),
            rank: line.meta.rank,
            host: line.meta.host.clone(),
            timestamp: line.meta.timestamp.clone(),
            source,
            example,
            truncated: cut || line.truncated,
            cluster: line.meta.cluster.clone(),
        })
    }

    fn redact(&self, text: &str) -> String {
        match &self.redactor {
            Some(r) => r.redact_str(text).into_owned(),
            None => text.to_string(),
        }
    }

    /// Every job's live templates, jobs in name order, templates most frequent first (then
    /// first seen), for `scan`'s text output.
    pub fn summary(&self) -> Vec<JobTemplates> {
        let mut jobs: Vec<JobTemplates> = self
            .jobs
            .iter()
            .filter(|(_, s)| !s.miner.is_empty())
            .map(|(job, s)| {
                let mut live: Vec<&Template> = s.miner.iter().collect();
                live.sort_by(|a, b| {
                    b.count()
                        .cmp(&a.count())
                        .then(a.first_seen().cmp(&b.first_seen()))
                });
                JobTemplates {
                    job_id: job.to_string(),
                    lines: s.miner.lines(),
                    templates: live
                        .into_iter()
                        .map(|t| (t.id().to_string(), self.redact(t.text()), t.count()))
                        .collect(),
                }
            })
            .collect();
        jobs.sort_by(|a, b| a.job_id.cmp(&b.job_id));
        jobs
    }
}

/// The wall clock, in milliseconds since the epoch: the last resort to place a stamp that
/// names no year.
fn wall_ms() -> Option<Millis> {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()
        .and_then(|d| Millis::try_from(d.as_millis()).ok())
}

/// `text` cut to at most `max` bytes on a character boundary; whether it was cut.
fn cut(mut text: String, max: usize) -> (String, bool) {
    if text.len() <= max {
        return (text, false);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    (text, true)
}

/// Templates shown per job in `scan`'s text section.
const SHOWN_PER_JOB: usize = 5;

/// `scan --format text --matches`: one line per `unknown` event.
pub fn write_event_text(out: &mut impl Write, e: &UnknownEvent) -> io::Result<()> {
    let mut who = format!("job={}", e.job_id);
    if let Some(rank) = e.rank {
        who.push_str(&format!(" rank={rank}"));
    }
    if let Some(host) = &e.host {
        who.push_str(&format!(" host={host}"));
    }
    let change = match e.change {
        Change::New => "new",
        Change::Changed => "changed",
        Change::Recurring => "recurring",
    };
    writeln!(
        out,
        "{} [UNKNOWN] {} ({change}, {} line(s)) {who}",
        e.source, e.template_id, e.count
    )?;
    writeln!(out, "  | {}", e.example)?;
    writeln!(out)
}

/// `scan --format text`: after the incidents, each job's unknown error templates, most frequent
/// first (at most five per job; `faultline templates` lists them all).
pub fn write_section(out: &mut impl Write, jobs: &[JobTemplates]) -> io::Result<()> {
    for job in jobs {
        writeln!(
            out,
            "== unrecognised: {} error line(s) of job {} that no KB entry knows, in {} template(s)",
            job.lines,
            job.job_id,
            job.templates.len()
        )?;
        for (id, text, count) in job.templates.iter().take(SHOWN_PER_JOB) {
            writeln!(out, "   {count}x {text}  [{id}]")?;
        }
        if job.templates.len() > SHOWN_PER_JOB {
            writeln!(
                out,
                "   ... {} more (faultline templates lists them)",
                job.templates.len() - SHOWN_PER_JOB
            )?;
        }
    }
    if !jobs.is_empty() {
        writeln!(out)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(ts: Option<&str>) -> LineMeta {
        LineMeta {
            timestamp: ts.map(str::to_string),
            rank: Some(2),
            ..LineMeta::default()
        }
    }

    #[test]
    fn kept_lines_come_back_in_order_and_a_cleared_buffer_forgets_them() {
        let mut kept = UnknownLines::default();
        let host = LineMeta {
            host: Some("node7".into()),
            ..meta(Some("2026-12-05T04:00:00Z"))
        };
        kept.push(3, "ERROR first", &host, false);
        kept.push(9, "", &LineMeta::default(), true);
        kept.push(12, "FATAL third", &meta(None), false);
        kept.offset_lines(100);
        let got: Vec<_> = kept
            .iter()
            .map(|l| (l.line, l.message, l.meta.clone(), l.truncated))
            .collect();
        assert_eq!(
            got,
            vec![
                (103, "ERROR first", host.clone(), false),
                (109, "", LineMeta::default(), true),
                (112, "FATAL third", meta(None), false),
            ]
        );
        // Reused: the slots' old fields never show through (a host the new line lacks, a
        // longer message before it).
        kept.clear();
        assert!(kept.is_empty());
        kept.push(1, "panic: short", &meta(None), false);
        assert_eq!(kept.len(), 1);
        let l = kept.iter().next().expect("one line");
        assert_eq!(
            (l.line, l.message, l.meta, l.truncated),
            (1, "panic: short", &meta(None), false)
        );
    }

    #[test]
    fn line_meta_clone_from_equals_clone() {
        let full = LineMeta {
            job_id: Some("j".into()),
            rank: Some(4),
            host: Some("h".into()),
            pod: Some("p".into()),
            timestamp: Some("t".into()),
            cluster: Some("c".into()),
            origin: crate::record::Origin::Envelope,
        };
        for (from, into) in [
            (&full, LineMeta::default()),
            (&LineMeta::default(), full.clone()),
        ] {
            let mut into = into;
            into.clone_from(from);
            assert_eq!(&into, from);
            assert_eq!(&from.clone(), from);
        }
    }

    fn feed(live: &mut LiveMiner, job: &str, message: &str, ts: Option<&str>) -> Outcome {
        let m = meta(ts);
        live.observe(
            &UnknownLine {
                job_id: job,
                message,
                meta: &m,
                truncated: false,
            },
            None,
        )
    }

    #[test]
    fn events_carry_the_template_a_redacted_example_and_the_count() {
        let mut live = LiveMiner::new(&UnknownConfig::default(), Some(Redactor::builtin()));
        let m = meta(Some("2024-11-29T10:00:00Z"));
        let line = UnknownLine {
            job_id: "j",
            message:
                "ERROR: upload to https://user:hunter2secret@store.example/x failed with code 7",
            meta: &m,
            truncated: false,
        };
        let out = live.observe(&line, None);
        assert_eq!(out.emit, Some(Change::New));
        let source = Provenance::File {
            path: "j.log".into(),
            line: 3,
        };
        let e = live.event(&line, &out, source).expect("an event");
        assert_eq!(e.kind, "unknown");
        assert_eq!(e.count, 1);
        assert_eq!(e.rank, Some(2));
        assert_eq!(e.template_id.len(), 16);
        assert!(!e.example.contains("hunter2secret"), "{}", e.example);
        assert!(e.example.contains("[REDACTED:"), "{}", e.example);
        let json = serde_json::to_value(&e).expect("serialises");
        assert_eq!(json["type"], "unknown");
        assert_eq!(json["change"], "new");
        assert_eq!(json["source"]["line"], 3);
        // The next line of the template, a second later: counted, no event.
        let out = feed(
            &mut live,
            "j",
            "ERROR: upload to https://store.example/y failed with code 9",
            Some("2024-11-29T10:00:01Z"),
        );
        assert_eq!((out.emit, out.count), (None, 2));
        assert_eq!(live.stats().lines, 2);
        assert_eq!(live.stats().events, 1);
    }

    #[test]
    fn jobs_and_templates_are_bounded_and_evictions_counted() {
        let cfg = UnknownConfig {
            max_templates: 3,
            max_jobs: 2,
            ..UnknownConfig::default()
        };
        let mut live = LiveMiner::new(&cfg, None);
        let words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot"];
        for w in words {
            feed(
                &mut live,
                "a",
                &format!("{w} {w}{w} failed badly for {w}"),
                None,
            );
        }
        assert_eq!(live.templates(), 3);
        assert_eq!(live.stats().evicted_templates, 3);
        feed(&mut live, "b", "ERROR one", None);
        assert_eq!(live.templates(), 4);
        feed(&mut live, "c", "ERROR two", None);
        assert_eq!(live.jobs(), 2);
        assert_eq!(live.stats().evicted_jobs, 1);
        assert_eq!(live.templates(), 2, "job a's templates went with it");
        assert!(live.summary().iter().all(|j| j.job_id != "a"));
    }

    #[test]
    fn rate_limits_apply_per_job_on_log_time() {
        let cfg = UnknownConfig {
            max_events_per_minute: 3,
            ..UnknownConfig::default()
        };
        let mut live = LiveMiner::new(&cfg, None);
        let kinds = [
            "ERROR alpha subsystem exploded",
            "fatal: bravo could not start at all",
            "panic in charlie",
            "delta failed to respond in time, giving up now",
            "Exception in echo thread",
        ];
        let mut emitted = 0;
        for i in 0..20 {
            let ts = format!("2024-11-29T10:00:{i:02}Z");
            if feed(&mut live, "j", kinds[i % 5], Some(&ts)).emit.is_some() {
                emitted += 1;
            }
        }
        assert_eq!(emitted, 3, "three events in the minute");
        assert_eq!(
            live.stats().suppressed,
            2,
            "the two other new templates, once each"
        );
        // Another job has its own budget.
        assert!(feed(&mut live, "k", kinds[4], None).emit.is_some());
        // A minute later the held-back templates go out, as new.
        let out = feed(&mut live, "j", kinds[4], Some("2024-11-29T10:01:30Z"));
        assert_eq!(out.emit, Some(Change::New));
        assert_eq!(out.count, 5);
    }

    #[test]
    fn the_text_section_is_short() {
        let mut live = LiveMiner::new(&UnknownConfig::default(), None);
        for i in 0..8 {
            for _ in 0..=i {
                let msg = format!("ERROR the {}subsystem went down", "very ".repeat(i));
                feed(&mut live, "j", &msg, None);
            }
        }
        let mut out = Vec::new();
        write_section(&mut out, &live.summary()).expect("writes");
        let text = String::from_utf8(out).expect("utf8");
        assert!(
            text.starts_with("== unrecognised: 36 error line(s) of job j"),
            "{text}"
        );
        assert_eq!(
            text.lines().filter(|l| l.starts_with("   ")).count(),
            6,
            "{text}"
        );
        assert!(text.contains("   ... 3 more"), "{text}");
    }
}
