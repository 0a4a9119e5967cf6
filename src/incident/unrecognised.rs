//! Unknown error templates seen near a failure: what an incident without a known root lists
//! as `unrecognised`.
//!
//! Flow: the drivers mine the error lines that no KB entry knows into per-job templates
//! ([`crate::unknown`]); for every such line they hand a [`UnknownSeen`] (plain data: this
//! module knows nothing of the miner) to a [`RecentUnknown`], which keeps, per job, the
//! templates seen most recently. When an incident whose root is unknown is emitted,
//! [`RecentUnknown::attach`] lists the job's templates seen within the incident's window
//! (from its first match minus the window to its last match plus the window, on the log's
//! clock; a collective timeout's incident starts where the hang began, when the timeout said
//! how long it waited), newest first, at most [`MAX_LISTED`]. A lead for the on-call engineer when the KB
//! could not name the root: the failure may well be one of these lines.
//!
//! Bounded: at most `max_jobs` jobs (the least recently touched is forgotten, counted in
//! [`RecentUnknown::evicted_jobs`]) and [`MAX_PER_JOB`] templates per job (the least recently
//! seen is replaced). Strings are copied only when a template enters a job's list or its
//! text changes; a line of a template already listed updates two numbers.

use std::collections::HashMap;
use std::sync::Arc;

use serde::Serialize;

use super::lru::LruOrder;
use super::IncidentEvent;
use crate::redact::Redactor;
use crate::time::{format_ms, Millis};

/// Templates listed per incident.
pub const MAX_LISTED: usize = 5;

/// Templates remembered per job.
pub const MAX_PER_JOB: usize = 16;

/// One unknown template of the incident's job, in the incident JSON (`unrecognised`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unrecognised {
    /// Stable id of the template (16 hex digits), as in its `unknown` events.
    pub template_id: String,
    /// The template text (`<NUM>`, `<IP>`... for masked values, `<*>` for mined variables),
    /// secrets redacted.
    pub template: String,
    /// The template's first line in this job, secrets redacted.
    pub example: String,
    /// Lines of the template in this job so far.
    pub count: u64,
    /// Log time of its latest line, RFC 3339; null when no line of the job had a time.
    pub last_seen: Option<String>,
}

/// `text` with secrets redacted by `redactor` (`None`: as read).
fn redact(redactor: &Option<Arc<Redactor>>, text: &str) -> String {
    match redactor {
        Some(r) => r.redact_str(text).into_owned(),
        None => text.to_string(),
    }
}

/// One unknown error line, as the miner placed it: what [`RecentUnknown::note`] takes.
#[derive(Debug, Clone, Copy)]
pub struct UnknownSeen<'a> {
    /// The line's job (as match events name it).
    pub job_id: &'a str,
    /// The template's stable id.
    pub template_id: u64,
    /// The template's current text.
    pub template: &'a str,
    /// The template's first line, not yet redacted.
    pub example: &'a str,
    /// Lines of the template in the job so far.
    pub count: u64,
    /// The line's log time (or the job's clock when the line had none).
    pub at: Option<Millis>,
}

#[derive(Debug)]
struct Entry {
    id: u64,
    /// The template's text as the miner has it (redacted when read out by
    /// [`RecentUnknown::near`]: a masked template can still hold a secret's letters; redacting
    /// on every line cost more than the mining).
    template: String,
    /// The template's example line, as the miner has it (redacted when read out).
    example: String,
    count: u64,
    first: Option<Millis>,
    last: Option<Millis>,
    /// Order of the latest sighting, for "newest first" when times are missing or equal.
    seq: u64,
}

#[derive(Debug, Default)]
struct Job {
    tick: u64,
    entries: Vec<Entry>,
}

/// The unknown templates each job showed most recently. See the module docs.
#[derive(Debug)]
pub struct RecentUnknown {
    jobs: HashMap<Arc<str>, Job>,
    lru: LruOrder<Arc<str>>,
    max_jobs: usize,
    redactor: Option<Arc<Redactor>>,
    seq: u64,
    evicted_jobs: u64,
}

impl RecentUnknown {
    /// Remembers at most `max_jobs` jobs; examples are redacted by `redactor` (`None`: as
    /// read).
    pub fn new(max_jobs: usize, redactor: Option<Arc<Redactor>>) -> Self {
        RecentUnknown {
            jobs: HashMap::new(),
            lru: LruOrder::default(),
            max_jobs: max_jobs.max(1),
            redactor,
            seq: 0,
            evicted_jobs: 0,
        }
    }

    /// Jobs forgotten to stay within `max_jobs`.
    pub fn evicted_jobs(&self) -> u64 {
        self.evicted_jobs
    }

    /// Jobs remembered now.
    pub fn jobs(&self) -> usize {
        self.jobs.len()
    }

    /// Records one unknown line.
    pub fn note(&mut self, seen: &UnknownSeen<'_>) {
        self.seq += 1;
        let seq = self.seq;
        let job = match self.jobs.get_mut(seen.job_id) {
            Some(job) => {
                job.tick = self.lru.touch(job.tick);
                job
            }
            None => {
                if self.jobs.len() >= self.max_jobs {
                    if let Some(old) = self.lru.pop_oldest() {
                        self.jobs.remove(&old);
                        self.evicted_jobs += 1;
                    }
                }
                let key: Arc<str> = Arc::from(seen.job_id);
                let tick = self.lru.push(Arc::clone(&key));
                self.jobs.entry(key).or_insert(Job {
                    tick,
                    entries: Vec::new(),
                })
            }
        };
        if let Some(e) = job.entries.iter_mut().find(|e| e.id == seen.template_id) {
            e.count = seen.count;
            e.seq = seq;
            if seen.at.is_some() {
                e.first = e.first.or(seen.at);
                e.last = seen.at.max(e.last);
            }
            if e.template != seen.template {
                e.template.clear();
                e.template.push_str(seen.template);
            }
            return;
        }
        if job.entries.len() >= MAX_PER_JOB {
            // Full: the least recently seen entry makes room, its buffers reused.
            if let Some(oldest) = job.entries.iter_mut().min_by_key(|e| e.seq) {
                oldest.id = seen.template_id;
                oldest.template.clear();
                oldest.template.push_str(seen.template);
                oldest.example.clear();
                oldest.example.push_str(seen.example);
                oldest.count = seen.count;
                oldest.first = seen.at;
                oldest.last = seen.at;
                oldest.seq = seq;
            }
            return;
        }
        job.entries.push(Entry {
            id: seen.template_id,
            template: seen.template.to_string(),
            example: seen.example.to_string(),
            count: seen.count,
            first: seen.at,
            last: seen.at,
            seq,
        });
    }

    /// The job's templates seen from `from` to `to` (log time; either `None`: no bound on
    /// that side, and a template without a time always counts), newest first, at most `max`.
    pub fn near(
        &self,
        job_id: &str,
        from: Option<Millis>,
        to: Option<Millis>,
        max: usize,
    ) -> Vec<Unrecognised> {
        let Some(job) = self.jobs.get(job_id) else {
            return Vec::new();
        };
        let mut hits: Vec<&Entry> = job
            .entries
            .iter()
            .filter(|e| {
                let after = match (from, e.last) {
                    (Some(from), Some(last)) => last >= from,
                    _ => true,
                };
                let before = match (to, e.first) {
                    (Some(to), Some(first)) => first <= to,
                    _ => true,
                };
                after && before
            })
            .collect();
        hits.sort_by(|a, b| b.last.cmp(&a.last).then(b.seq.cmp(&a.seq)));
        hits.truncate(max);
        hits.into_iter()
            .map(|e| Unrecognised {
                template_id: format!("{:016x}", e.id),
                template: redact(&self.redactor, &e.template),
                example: redact(&self.redactor, &e.example),
                count: e.count,
                last_seen: e.last.map(format_ms),
            })
            .collect()
    }

    /// Sets `incident.unrecognised`: for an incident whose root is unknown, the job's
    /// templates seen within its window (see the module docs), which starts where a collective
    /// timeout's hang began when that is earlier than its first match; empty otherwise.
    pub fn attach(&self, incident: &mut IncidentEvent) {
        if incident.root_known {
            incident.unrecognised.clear();
            return;
        }
        let window = incident.grouping_info.window_ms;
        let ms = |t: &Option<String>| {
            t.as_deref()
                .and_then(crate::time::parse)
                .and_then(|s| s.millis())
        };
        let first = match (ms(&incident.first_seen), incident.effective_from) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let from = first.map(|t| t.saturating_sub(window));
        let to = ms(&incident.last_seen).map(|t| t.saturating_add(window));
        incident.unrecognised = self.near(&incident.job_id, from, to, MAX_LISTED);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen<'a>(
        job: &'a str,
        id: u64,
        text: &'a str,
        count: u64,
        at: Option<Millis>,
    ) -> UnknownSeen<'a> {
        UnknownSeen {
            job_id: job,
            template_id: id,
            template: text,
            example: "token=hf_abcdefghijklmnopqrstuvwxyz0123456789 failed",
            count,
            at,
        }
    }

    #[test]
    fn lists_the_window_newest_first_and_redacts_examples() {
        let mut r = RecentUnknown::new(4, Some(Redactor::builtin()));
        r.note(&seen("j", 1, "early failure <NUM>", 1, Some(1_000)));
        r.note(&seen("j", 2, "near failure <NUM>", 1, Some(100_000)));
        r.note(&seen("j", 3, "nearer failure <NUM>", 1, Some(110_000)));
        r.note(&seen("j", 2, "near failure <*>", 2, Some(105_000)));
        r.note(&seen("other", 9, "not this job", 1, Some(100_000)));
        r.note(&seen(
            "other",
            10,
            "retrying with token=hf_abcdefghijklmnopqrstuvwxyz<NUM>",
            1,
            Some(100_000),
        ));
        let other = r.near("other", None, None, 5);
        assert!(
            other.iter().all(|u| !u.template.contains("hf_abcdefghij")),
            "templates are redacted too: {other:?}"
        );
        let near = r.near("j", Some(50_000), Some(200_000), 5);
        let ids: Vec<&str> = near.iter().map(|u| u.template_id.as_str()).collect();
        assert_eq!(ids, ["0000000000000003", "0000000000000002"]);
        assert_eq!(near[1].template, "near failure <*>", "the current text");
        assert_eq!(near[1].count, 2);
        assert!(
            near[0].example.contains("[REDACTED:"),
            "{}",
            near[0].example
        );
        assert_eq!(r.near("j", Some(50_000), Some(200_000), 1).len(), 1);
        // No time bounds: everything, newest first.
        assert_eq!(r.near("j", None, None, 5).len(), 3);
    }

    #[test]
    fn bounded_per_job_and_in_jobs() {
        let mut r = RecentUnknown::new(2, None);
        for id in 0..(MAX_PER_JOB as u64 + 10) {
            r.note(&seen("a", id, "t", 1, None));
        }
        let all = r.near("a", None, None, usize::MAX);
        assert_eq!(all.len(), MAX_PER_JOB);
        assert_eq!(
            all[0].template_id,
            format!("{:016x}", MAX_PER_JOB as u64 + 9)
        );
        assert!(
            !all.iter().any(|u| u.template_id == format!("{:016x}", 0)),
            "the least recently seen was replaced"
        );
        r.note(&seen("b", 1, "t", 1, None));
        r.note(&seen("c", 1, "t", 1, None));
        assert_eq!(r.jobs(), 2);
        assert_eq!(r.evicted_jobs(), 1);
        assert!(r.near("a", None, None, 5).is_empty(), "a was the oldest");
    }

    #[test]
    fn a_timeout_incident_without_a_root_lists_what_preceded_the_hang() {
        use crate::incident::testutil::event;
        use crate::incident::{Correlator, IncidentConfig};
        use crate::kb::Role;
        let base: Millis = 1_714_564_800_000;
        // The hang began at base + 50 s; the timeouts fire ten minutes later.
        let timeout = |rank: u32| {
            event("NCCL_TIMEOUT", Role::Cascade, "collective_timeout")
                .job("j")
                .rank(rank)
                .ts(&format_ms(base + 650_000))
                .cap("seq", "100")
                .cap("timeout_ms", "600000")
                .cap("elapsed_ms", "600000")
                .build()
        };
        let mut c = Correlator::new(IncidentConfig::default()).expect("valid");
        let mut out = Vec::new();
        c.observe(&timeout(0), &mut out);
        c.observe(&timeout(1), &mut out);
        c.resolve_all(&mut out);
        let mut incident = out.pop().expect("an incident");
        assert!(!incident.root_known, "only cascades: no known root");
        let window = incident.grouping_info.window_ms;
        assert!(
            window < 600_000,
            "the window alone does not reach back to the hang"
        );

        let mut r = RecentUnknown::new(4, None);
        // Just before the hang: listed. Long before it: not.
        r.note(&seen(
            "j",
            7,
            "ckptfs: write of shard <NUM> failed",
            3,
            Some(base + 45_000),
        ));
        r.note(&seen(
            "j",
            8,
            "old failure <NUM>",
            1,
            Some(base - 3_600_000),
        ));
        r.attach(&mut incident);
        let ids: Vec<&str> = incident
            .unrecognised
            .iter()
            .map(|u| u.template_id.as_str())
            .collect();
        assert_eq!(ids, ["0000000000000007"]);
        assert_eq!(incident.unrecognised[0].count, 3);

        // Without the back-dated start, only the window before the first match counts.
        incident.effective_from = None;
        r.attach(&mut incident);
        assert!(incident.unrecognised.is_empty());

        // An incident with a known root lists nothing.
        incident.root_known = true;
        incident.effective_from = Some(base);
        r.attach(&mut incident);
        assert!(incident.unrecognised.is_empty());
    }
}
