//! The correlator: match events of many jobs in, [`IncidentEvent`]s out.
//!
//! Per match: read its log time (or take the clock), resolve incidents whose quiet period has
//! passed, find the job's state, then either fold a block line into the job's streams, resolve
//! on a restart marker, or count the match into the job's open incident (opening one if the
//! match can initiate and none is open or the open one is out of the window). Changes are
//! pushed to `out` as they become due (see [`super::lifecycle`]).
//!
//! Bounded state: at most `max_open_incidents` open incidents (opening one more resolves the
//! least recently updated, `evicted`), `max_jobs` jobs (the least recently touched is
//! forgotten, its incident resolved as `evicted`), `max_hosts` bad-node scores, and the
//! per-incident and per-job caps of [`super::culprit`] and [`super::multiline`]. The sizes are
//! exposed for tests and, later, metrics: [`Correlator::stats`], [`Correlator::sizes`].

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use super::elect::{self, Candidate, Election, Standing};
use super::fleet::Fleet;
use super::lifecycle::Incident;
use super::lru::LruOrder;
use super::multiline::{self, Appended, StreamKey, Streams};
use super::{ConfigError, IncidentConfig, IncidentEvent, Resolution, Status};
use crate::enrich::MatchEvent;
use crate::time::Millis;

/// Past incidents remembered per job for restart-loop detection.
const HISTORY: usize = 8;

#[derive(Debug, Clone)]
struct Past {
    fingerprint: String,
    ended_ms: Millis,
    occurrences: u32,
}

#[derive(Debug)]
struct JobState {
    key: Arc<str>,
    tick: u64,
    /// Boxed: an incident is large and moves in and out of here.
    incident: Option<Box<Incident>>,
    streams: Streams,
    history: VecDeque<Past>,
}

/// What the correlator did, for logs and (later) metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CorrelatorStats {
    /// Match events observed.
    pub events: u64,
    /// Incidents opened (`open` changes emitted).
    pub opened: u64,
    /// `updated` changes emitted.
    pub updated: u64,
    /// Incidents resolved, for any reason.
    pub resolved: u64,
    /// Open incidents resolved to respect `max_open_incidents` or `max_jobs`.
    pub evicted_incidents: u64,
    /// Jobs forgotten to respect `max_jobs`.
    pub evicted_jobs: u64,
    /// Tickets raised.
    pub tickets: u64,
    /// Incidents that opened as a restart loop.
    pub restart_loops: u64,
    /// Block lines folded into streams.
    pub context_lines: u64,
}

/// Sizes of every internal map, for tests that prove the bounds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sizes {
    /// Jobs with state.
    pub jobs: usize,
    /// Entries in the job LRU order (equals `jobs`).
    pub job_lru: usize,
    /// Jobs with an open incident.
    pub open_incidents: usize,
    /// Entries in the open-incident index (equals `open_incidents`).
    pub open_index: usize,
    /// Hosts with a bad-node score.
    pub hosts: usize,
    /// Entries in the host LRU order (equals `hosts`).
    pub host_lru: usize,
    /// The largest per-job stream list.
    pub max_streams_per_job: usize,
    /// The largest per-incident rank table.
    pub max_ranks_per_incident: usize,
}

/// Groups match events into incidents. One per pipeline; not shared between threads.
#[derive(Debug)]
pub struct Correlator {
    cfg: IncidentConfig,
    jobs: HashMap<Arc<str>, JobState>,
    job_lru: LruOrder<Arc<str>>,
    /// Open incidents by (last time, update tick): the first is the least recently updated.
    open: BTreeMap<(Millis, u64), Arc<str>>,
    update_tick: u64,
    fleet: Fleet,
    clock: Option<Millis>,
    arrivals: u64,
    next_serial: u64,
    stats: CorrelatorStats,
}

impl Correlator {
    /// A correlator with no state; fails when `cfg` does not [validate](IncidentConfig::validate).
    pub fn new(cfg: IncidentConfig) -> Result<Self, ConfigError> {
        cfg.validate()?;
        Ok(Correlator {
            fleet: Fleet::new(cfg.max_hosts, cfg.bad_node_half_life_ms),
            cfg,
            jobs: HashMap::new(),
            job_lru: LruOrder::default(),
            open: BTreeMap::new(),
            update_tick: 0,
            clock: None,
            arrivals: 0,
            next_serial: 1,
            stats: CorrelatorStats::default(),
        })
    }

    /// The settings it runs with.
    pub fn config(&self) -> &IncidentConfig {
        &self.cfg
    }

    /// What it has done so far.
    pub fn stats(&self) -> &CorrelatorStats {
        &self.stats
    }

    /// Incidents open now.
    pub fn open_incidents(&self) -> usize {
        self.open.len()
    }

    /// Jobs with state now (open incident, pending blocks or restart history).
    pub fn jobs_tracked(&self) -> usize {
        self.jobs.len()
    }

    /// The bad-node scores.
    pub fn fleet(&self) -> &Fleet {
        &self.fleet
    }

    /// The correlator's clock: the latest log time seen or passed to [`Self::advance`].
    pub fn now(&self) -> Option<Millis> {
        self.clock
    }

    /// Sizes of every internal map now.
    pub fn sizes(&self) -> Sizes {
        let (hosts, host_lru) = self.fleet.sizes();
        Sizes {
            jobs: self.jobs.len(),
            job_lru: self.job_lru.len(),
            open_incidents: self.jobs.values().filter(|j| j.incident.is_some()).count(),
            open_index: self.open.len(),
            hosts,
            host_lru,
            max_streams_per_job: self
                .jobs
                .values()
                .map(|j| j.streams.len())
                .max()
                .unwrap_or(0),
            max_ranks_per_incident: self
                .jobs
                .values()
                .filter_map(|j| j.incident.as_ref().map(|i| i.ranks.len()))
                .max()
                .unwrap_or(0),
        }
    }

    /// Moves the clock to `now` (if later) and resolves incidents quiet since. The live service
    /// calls this from a timer with the wall clock; `scan` never does (log time drives it).
    pub fn advance(&mut self, now: Millis, out: &mut Vec<IncidentEvent>) {
        self.set_clock(now);
        self.expire(out);
    }

    /// Emits the current state of every open incident with unreported changes, leaving them
    /// open: `scan` calls it at the end of its input.
    pub fn flush(&mut self, out: &mut Vec<IncidentEvent>) {
        let keys: Vec<Arc<str>> = self.open.values().cloned().collect();
        for key in keys {
            let Some(job) = self.jobs.get_mut(&key) else {
                continue;
            };
            let Some(inc) = job.incident.as_mut() else {
                continue;
            };
            let dirty = inc.evidence_dirty;
            inc.evaluate(&job.streams, dirty);
            if inc.significant || inc.minor {
                let now = self.clock.unwrap_or(inc.last_ms);
                Self::refresh_blame(&mut self.fleet, inc, now);
                out.push(inc.snapshot(Status::Updated, None, &self.cfg));
                self.stats.updated += 1;
            }
        }
    }

    /// The serial of job `job_id`'s open incident (the `serial` of its events), if one is open:
    /// the service asks after each match which incident the match's record feeds.
    pub fn open_serial(&self, job_id: &str) -> Option<u64> {
        self.jobs.get(job_id)?.incident.as_ref().map(|i| i.serial)
    }

    /// The current state of job `job_id`'s open incident, without emitting it.
    pub fn current(&mut self, job_id: &str) -> Option<IncidentEvent> {
        let job = self.jobs.get_mut(job_id)?;
        let inc = job.incident.as_mut()?;
        inc.evaluate(&job.streams, true);
        let now = self.clock.unwrap_or(inc.last_ms);
        Self::refresh_blame(&mut self.fleet, inc, now);
        Some(inc.view(Status::Updated, None, &self.cfg))
    }

    /// Resolves every open incident (`shutdown`).
    pub fn resolve_all(&mut self, out: &mut Vec<IncidentEvent>) {
        let keys: Vec<Arc<str>> = self.open.values().cloned().collect();
        for key in keys {
            self.resolve(&key, Resolution::Shutdown, out);
        }
    }

    /// Folds one match event in; pushes the incident changes it causes to `out`.
    pub fn observe(&mut self, event: &MatchEvent, out: &mut Vec<IncidentEvent>) {
        self.stats.events += 1;
        self.arrivals += 1;
        let log_ms = elect::log_ms(event);
        if let Some(t) = log_ms {
            self.set_clock(t);
        }
        let t = log_ms.or(self.clock).unwrap_or(0);
        self.expire(out);

        let key = self.job_key(&event.job_id, out);
        let rank = event.any_rank();
        let host: Option<Arc<str>> = event.host.as_deref().map(Arc::from);
        // A stream is where a line was printed: the launcher prefix or envelope rank, never a
        // capture (torchrun's summary row names another rank than the one printing it).
        let stream_key: StreamKey = (event.rank, host.clone());

        if self.is_restart_marker(event) {
            self.resolve(&key, Resolution::Restart, out);
            return;
        }

        let window = self.cfg.window_ms;
        let max_backdate = self.cfg.max_backdate_ms;
        let (appended, joins, has_incident) = {
            let Some(job) = self.jobs.get_mut(&key) else {
                return;
            };
            // Multiline: block lines go to their stream; other matches extend a fresh block.
            let appended = match multiline::classify(event) {
                Some(kind) => {
                    self.stats.context_lines += 1;
                    job.streams
                        .block_line(stream_key.clone(), kind, event, t, window)
                }
                None => job.streams.other_match(&stream_key, event, t, window),
            };
            if multiline::is_block_only(event) {
                let Some(inc) = job.incident.as_mut() else {
                    return;
                };
                forward_context(inc, &stream_key, appended, event);
                (appended, true, true)
            } else {
                // Does the match belong to the open incident?
                let effective = t - backdate(event, max_backdate);
                let joins = job
                    .incident
                    .as_ref()
                    .is_some_and(|inc| effective <= inc.last_ms + window);
                (appended, joins, job.incident.is_some())
            }
        };
        if multiline::is_block_only(event) {
            // Context lines ride along with the incident's next event.
            return;
        }
        if !joins {
            if has_incident {
                self.resolve(&key, Resolution::NextIncident, out);
            }
            if !elect::can_initiate(event) {
                return;
            }
            self.open_incident(&key, event, t, log_ms, out);
        }

        let standing = Standing {
            role: event.role,
            log_ms,
            arrival: self.arrivals,
        };
        let cfg = &self.cfg;
        let Some(job) = self.jobs.get_mut(&key) else {
            return;
        };
        let Some(inc) = job.incident.as_mut() else {
            return;
        };
        inc.count(event, rank, host.as_ref(), t, log_ms, cfg);
        if appended.root_cause {
            inc.evidence_dirty = true;
        }
        if joins {
            if elect::can_initiate(event)
                && inc
                    .election
                    .offer(standing, || Candidate::of(event, standing))
            {
                inc.significant = true;
                inc.evidence_dirty = true;
                if inc.refingerprint() {
                    let history = &job.history;
                    let (recurrence, _) = recurrence_of(history, &inc.fingerprint, t, cfg);
                    inc.recurrence = recurrence;
                    inc.restart_loop = recurrence >= cfg.restart_loop_after;
                }
                inc.reset_context(&job.streams);
            } else {
                forward_context(inc, &stream_key, appended, event);
            }
        }
        self.finish_update(&key, true, out);
    }

    /// After a change: culprit, ticket, blame, index position, and the event if due.
    fn finish_update(&mut self, key: &Arc<str>, changed: bool, out: &mut Vec<IncidentEvent>) {
        if !changed {
            return;
        }
        let Some(job) = self.jobs.get_mut(key) else {
            return;
        };
        let Some(inc) = job.incident.as_mut() else {
            return;
        };
        inc.evaluate(&job.streams, false);
        if inc.check_ticket(&self.cfg) {
            self.stats.tickets += 1;
        }
        let now = self.clock.unwrap_or(inc.last_ms);
        Self::refresh_blame(&mut self.fleet, inc, now);
        // Re-index by last activity.
        self.open.remove(&inc.open_key);
        self.update_tick += 1;
        inc.open_key = (inc.last_ms, self.update_tick);
        self.open.insert(inc.open_key, Arc::clone(key));
        if inc.due() {
            let status = if inc.revision == 0 {
                self.stats.opened += 1;
                super::Status::Open
            } else {
                self.stats.updated += 1;
                Status::Updated
            };
            out.push(inc.snapshot(status, None, &self.cfg));
        }
    }

    /// Credits the blamed host once per incident and refreshes its score.
    fn refresh_blame(fleet: &mut Fleet, inc: &mut Incident, now: Millis) {
        if !inc.credited {
            if let Some(host) = inc.blame() {
                let score = fleet.credit(&host, &inc.job_id, inc.first_ms);
                inc.blamed_host = Some(host);
                inc.bad_node_score = Some(score);
                inc.credited = true;
                inc.significant = true;
                return;
            }
        }
        if let Some(host) = &inc.blamed_host {
            inc.bad_node_score = fleet.score(host, now);
        }
    }

    fn open_incident(
        &mut self,
        key: &Arc<str>,
        event: &MatchEvent,
        t: Millis,
        log_ms: Option<Millis>,
        out: &mut Vec<IncidentEvent>,
    ) {
        while self.open.len() >= self.cfg.max_open_incidents {
            let Some((_, victim)) = self.open.pop_first() else {
                break;
            };
            // Popped already; resolve reads the job's incident directly.
            self.stats.evicted_incidents += 1;
            self.resolve_popped(&victim, Resolution::Evicted, out);
        }
        let standing = Standing {
            role: event.role,
            log_ms,
            arrival: self.arrivals,
        };
        let election = Election::new(Candidate::of(event, standing));
        let serial = self.next_serial;
        self.next_serial += 1;
        let Some(job) = self.jobs.get_mut(key) else {
            return;
        };
        let mut inc = Box::new(Incident::new(
            serial,
            Arc::clone(key),
            election,
            t,
            log_ms,
            &self.cfg,
            &event.kb_version,
        ));
        let (recurrence, _) = recurrence_of(&job.history, &inc.fingerprint, t, &self.cfg);
        inc.recurrence = recurrence;
        inc.restart_loop = recurrence >= self.cfg.restart_loop_after;
        if inc.restart_loop {
            self.stats.restart_loops += 1;
        }
        inc.reset_context(&job.streams);
        self.update_tick += 1;
        inc.open_key = (t, self.update_tick);
        self.open.insert(inc.open_key, Arc::clone(key));
        job.incident = Some(inc);
    }

    /// Moves the clock forward. The first time anything tells the time, what happened before
    /// (matches without a timestamp, at time 0) is re-timed to it: "just before now", not 1970.
    fn set_clock(&mut self, t: Millis) {
        let Some(old) = self.clock else {
            self.clock = Some(t);
            let keys: Vec<Arc<str>> = self.open.values().cloned().collect();
            self.open.clear();
            for key in keys {
                if let Some(inc) = self.jobs.get_mut(&key).and_then(|j| j.incident.as_mut()) {
                    inc.retime(t);
                    self.update_tick += 1;
                    inc.open_key = (t, self.update_tick);
                    self.open.insert(inc.open_key, key);
                }
            }
            for job in self.jobs.values_mut() {
                job.streams.retime(t);
            }
            return;
        };
        self.clock = Some(old.max(t));
    }

    /// Resolves the open incident of job `key`, if any.
    fn resolve(&mut self, key: &Arc<str>, why: Resolution, out: &mut Vec<IncidentEvent>) {
        let open_key = self
            .jobs
            .get(key)
            .and_then(|j| j.incident.as_ref())
            .map(|i| i.open_key);
        if let Some(k) = open_key {
            self.open.remove(&k);
            self.resolve_popped(key, why, out);
        }
    }

    /// Resolves job `key`'s incident, already removed from the open index.
    fn resolve_popped(&mut self, key: &Arc<str>, why: Resolution, out: &mut Vec<IncidentEvent>) {
        let Some(job) = self.jobs.get_mut(key) else {
            return;
        };
        let Some(mut inc) = job.incident.take() else {
            return;
        };
        let dirty = inc.evidence_dirty;
        inc.evaluate(&job.streams, dirty);
        // torchrun's root cause row belongs to this failure, not the job's next one.
        job.streams.root_cause = None;
        let now = self.clock.unwrap_or(inc.last_ms);
        Self::refresh_blame(&mut self.fleet, &mut inc, now);
        let (_, slot) = recurrence_of(&job.history, &inc.fingerprint, inc.last_ms, &self.cfg);
        match slot {
            Some(i) => {
                job.history[i].ended_ms = inc.last_ms;
                job.history[i].occurrences = inc.recurrence;
            }
            None => {
                if job.history.len() >= HISTORY {
                    job.history.pop_front();
                }
                job.history.push_back(Past {
                    fingerprint: inc.fingerprint.clone(),
                    ended_ms: inc.last_ms,
                    occurrences: inc.recurrence,
                });
            }
        }
        self.stats.resolved += 1;
        out.push(inc.snapshot(Status::Resolved, Some(why), &self.cfg));
    }

    /// Resolves incidents whose quiet period has passed on the clock.
    fn expire(&mut self, out: &mut Vec<IncidentEvent>) {
        let Some(now) = self.clock else {
            return;
        };
        while let Some((&(last, _), _)) = self.open.first_key_value() {
            if now.saturating_sub(last) <= self.cfg.quiet_ms {
                break;
            }
            let Some((_, key)) = self.open.pop_first() else {
                break;
            };
            self.resolve_popped(&key, Resolution::Quiet, out);
        }
    }

    /// The job's key, creating its state (and evicting the least recently touched job at the
    /// cap); touches it.
    fn job_key(&mut self, job_id: &str, out: &mut Vec<IncidentEvent>) -> Arc<str> {
        if let Some(job) = self.jobs.get_mut(job_id) {
            job.tick = self.job_lru.touch(job.tick);
            return Arc::clone(&job.key);
        }
        while self.jobs.len() >= self.cfg.max_jobs {
            let Some(victim) = self.job_lru.pop_oldest() else {
                break;
            };
            if self.jobs.get(&victim).is_some_and(|j| j.incident.is_some()) {
                self.stats.evicted_incidents += 1;
                self.resolve(&victim, Resolution::Evicted, out);
            }
            self.jobs.remove(&victim);
            self.stats.evicted_jobs += 1;
        }
        let key: Arc<str> = Arc::from(job_id);
        let tick = self.job_lru.push(Arc::clone(&key));
        self.jobs.insert(
            Arc::clone(&key),
            JobState {
                key: Arc::clone(&key),
                tick,
                incident: None,
                streams: Streams::new(
                    self.cfg.max_context_streams_per_job,
                    self.cfg.max_context_lines,
                    self.cfg.max_context_bytes,
                ),
                history: VecDeque::new(),
            },
        );
        key
    }

    fn is_restart_marker(&self, event: &MatchEvent) -> bool {
        self.cfg
            .restart_markers
            .iter()
            .any(|m| *m == event.error_code || *m == event.kb_id)
    }
}

/// Block lines that extend the incident's context stream, or a torchrun summary.
fn forward_context(inc: &mut Incident, key: &StreamKey, appended: Appended, event: &MatchEvent) {
    if !appended.appended {
        return;
    }
    let ours = appended.summary || inc.context_key.as_ref() == Some(key);
    if ours && !inc.context.ends_with(&event.line) {
        inc.context.push(event.rank, &event.line);
        inc.minor = true;
    }
}

/// How far a collective timeout is back-dated: the hang began `elapsed_ms` (or `timeout_ms`)
/// before the line, at most `max_ms`.
fn backdate(event: &MatchEvent, max_ms: Millis) -> Millis {
    if event.category != "collective_timeout" {
        return 0;
    }
    ["elapsed_ms", "timeout_ms"]
        .iter()
        .find_map(|k| event.captures.get(*k)?.trim().parse::<Millis>().ok())
        .map_or(0, |ms| ms.clamp(0, max_ms))
}

/// Occurrences of `fingerprint` in a job's recent history (this one included), and the
/// history slot to update.
fn recurrence_of(
    history: &VecDeque<Past>,
    fingerprint: &str,
    t: Millis,
    cfg: &IncidentConfig,
) -> (u32, Option<usize>) {
    match history.iter().rposition(|p| p.fingerprint == fingerprint) {
        Some(i) if t.saturating_sub(history[i].ended_ms) <= cfg.restart_horizon_ms => {
            (history[i].occurrences.saturating_add(1), Some(i))
        }
        Some(i) => (1, Some(i)),
        None => (1, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::incident::testutil::event;
    use crate::incident::{CulpritMethod, TicketReason};
    use crate::kb::Role;

    fn ts(sec: i64) -> String {
        crate::time::format_ms(1_714_564_800_000 + sec * 1000)
    }

    fn corr(cfg: IncidentConfig) -> Correlator {
        Correlator::new(cfg).expect("valid config")
    }

    fn feed(c: &mut Correlator, events: &[MatchEvent]) -> Vec<IncidentEvent> {
        let mut out = Vec::new();
        for e in events {
            c.observe(e, &mut out);
        }
        out
    }

    fn xid(job: &str, host: &str, sec: i64) -> MatchEvent {
        event("XID_79", Role::Root, "gpu_hardware")
            .job(job)
            .host(host)
            .ts(&ts(sec))
            .cap("gpu", "0000:3b:00")
            .build()
    }

    fn timeout(job: &str, rank: u32, sec: i64) -> MatchEvent {
        event("NCCL_TIMEOUT", Role::Cascade, "collective_timeout")
            .job(job)
            .rank(rank)
            .host(&format!("node-{:02}", rank / 8))
            .ts(&ts(sec))
            .cap("seq", "100")
            .cap("timeout_ms", "600000")
            .cap("elapsed_ms", "600050")
            .build()
    }

    #[test]
    fn opens_updates_and_resolves_on_log_time() {
        let mut c = corr(IncidentConfig::default());
        let out = feed(&mut c, &[xid("j", "node-05", 0), timeout("j", 1, 600)]);
        assert_eq!(out[0].status, Status::Open);
        assert_eq!(out[0].root.error_code, "XID_79");
        assert!(out.iter().all(|e| e.resolution.is_none()));
        assert_eq!(c.open_incidents(), 1);
        // 40 minutes of silence on the log clock: another job's line moves the clock.
        let out = feed(&mut c, &[timeout("other", 0, 600 + 40 * 60)]);
        let resolved: Vec<_> = out
            .iter()
            .filter(|e| e.status == Status::Resolved)
            .collect();
        assert_eq!(resolved.len(), 1);
        assert_eq!(resolved[0].job_id, "j");
        assert_eq!(resolved[0].resolution, Some(Resolution::Quiet));
        assert_eq!(resolved[0].counts.matches, 2);
        // An injected clock does the same without any event.
        let mut out = Vec::new();
        c.advance(1_714_564_800_000 + 10 * 3_600_000, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(c.open_incidents(), 0);
    }

    #[test]
    fn matches_before_the_first_timestamp_are_not_from_1970() {
        let mut c = corr(IncidentConfig::default());
        let untimed = event("NCCL_TIMEOUT", Role::Cascade, "collective_timeout")
            .rank(0)
            .build();
        let out = feed(&mut c, &[untimed.clone(), timeout("job", 1, 0), untimed]);
        assert!(out.iter().all(|e| e.status != Status::Resolved), "{out:?}");
        assert_eq!(c.current("job").expect("open").counts.matches, 3);
    }

    #[test]
    fn a_late_root_takes_over_and_the_rule_is_reported() {
        let mut c = corr(IncidentConfig::default());
        let out = feed(&mut c, &[timeout("j", 1, 10), xid("j", "node-05", 20)]);
        let first = &out[0];
        assert!(!first.root_known);
        let last = out.last().expect("events");
        assert!(last.root_known);
        assert_eq!(last.root.error_code, "XID_79");
        assert_eq!(
            last.previous_fingerprint.as_deref(),
            Some(first.fingerprint.as_str())
        );
        assert_eq!(last.grouping_info.rule, elect::Rule::Role);
        assert_eq!(
            last.grouping_info
                .runner_up
                .as_ref()
                .map(|r| r.error_code.as_str()),
            Some("NCCL_TIMEOUT")
        );
    }

    #[test]
    fn timestamps_then_arrival_break_ties_between_roots() {
        let mut c = corr(IncidentConfig::default());
        let late = event("CUDA_LAUNCH_FAILURE", Role::Root, "kernel_bug")
            .rank(17)
            .ts(&ts(30))
            .build();
        let out = feed(&mut c, &[late, xid("job", "node-05", 20)]);
        let last = out.last().expect("events");
        assert_eq!(
            last.root.error_code, "XID_79",
            "logged earlier, arrived later"
        );
        assert_eq!(last.grouping_info.rule, elect::Rule::Timestamp);

        let mut c = corr(IncidentConfig::default());
        let a = event("A", Role::Root, "crash").build();
        let b = event("B", Role::Root, "crash").build();
        feed(&mut c, &[a, b]);
        let now = c.current("job").expect("open");
        assert_eq!(now.root.error_code, "A");
        assert_eq!(now.grouping_info.rule, elect::Rule::Arrival);
    }

    #[test]
    fn info_and_context_never_initiate() {
        let mut c = corr(IncidentConfig::default());
        let info = event("DS_FP16_OVERFLOW", Role::Info, "numerical").build();
        let hint = event("CUDA_ASYNC_REPORT_HINT", Role::Symptom, "context").build();
        assert!(feed(&mut c, &[info, hint]).is_empty());
        assert_eq!(c.open_incidents(), 0);
    }

    #[test]
    fn a_match_after_the_window_starts_the_next_incident() {
        let mut c = corr(IncidentConfig::default());
        let oom = |sec| {
            event("CUDA_OOM", Role::Root, "device_oom")
                .rank(3)
                .ts(&ts(sec))
                .build()
        };
        let out = feed(&mut c, &[oom(0), oom(6 * 60)]);
        let resolved: Vec<_> = out
            .iter()
            .filter(|e| e.status == Status::Resolved)
            .collect();
        assert_eq!(resolved.len(), 1);
        assert_eq!(resolved[0].resolution, Some(Resolution::NextIncident));
        assert_eq!(c.open_incidents(), 1);
        // Same job, same root: the second one is a recurrence.
        let second = c.current("job").expect("open");
        assert_eq!(second.recurrence, 2);
        assert!(second.restart_loop);
    }

    #[test]
    fn a_timeout_counts_from_when_the_hang_began() {
        let mut c = corr(IncidentConfig::default());
        // The watchdog fires ten minutes after the Xid, beyond the 5-minute window, but the
        // collective has been hanging since the Xid.
        let out = feed(&mut c, &[xid("j", "node-05", 0), timeout("j", 1, 601)]);
        assert!(out.iter().all(|e| e.status != Status::Resolved));
        assert_eq!(c.stats().opened, 1);
    }

    #[test]
    fn restart_markers_resolve_and_recurrences_loop() {
        let mut c = corr(IncidentConfig::default());
        let marker = event("TORCHELASTIC_RESTART", Role::Info, "context")
            .domain("context")
            .build();
        let root = || {
            event("PYTHON_KEY_ERROR", Role::Root, "script_error")
                .rank(0)
                .build()
        };
        let out = feed(&mut c, &[root(), marker.clone(), root(), marker, root()]);
        let opens: Vec<_> = out.iter().filter(|e| e.status == Status::Open).collect();
        assert_eq!(opens.len(), 3);
        assert_eq!(
            opens.iter().map(|e| e.recurrence).collect::<Vec<_>>(),
            vec![1, 2, 3]
        );
        assert!(!opens[0].restart_loop && opens[1].restart_loop && opens[2].restart_loop);
        assert!(out
            .iter()
            .filter(|e| e.status == Status::Resolved)
            .all(|e| e.resolution == Some(Resolution::Restart)));
        assert_eq!(c.stats().restart_loops, 2);
    }

    #[test]
    fn a_host_failing_several_jobs_gets_a_rising_score() {
        let mut c = corr(IncidentConfig::default());
        let out = feed(
            &mut c,
            &[
                xid("a", "node-05", 0),
                xid("b", "node-05", 1),
                xid("c", "node-05", 2),
                xid("d", "node-09", 3),
            ],
        );
        let scores: Vec<_> = out
            .iter()
            .filter(|e| e.status == Status::Open)
            .map(|e| (e.blamed_host.clone(), e.bad_node_score))
            .collect();
        assert_eq!(scores[0].1, Some(1.0));
        assert!(scores[1].1 > scores[0].1 && scores[2].1 > scores[1].1);
        assert_eq!(scores[3], (Some("node-09".to_string()), Some(1.0)));
        assert_eq!(c.fleet().score("node-05", c.now().unwrap_or(0)), Some(3.0));
    }

    #[test]
    fn tickets_for_roots_at_once_and_for_cascades_after_n() {
        let cfg = IncidentConfig {
            ticket_min_matches: 5,
            ..IncidentConfig::default()
        };
        let mut c = corr(cfg.clone());
        let out = feed(&mut c, &[xid("j", "n", 0)]);
        assert_eq!(out[0].ticket.reason, Some(TicketReason::Root));

        let mut c = corr(cfg);
        let events: Vec<_> = (0..4).map(|r| timeout("k", r, 600)).collect();
        let out = feed(&mut c, &events);
        assert!(out.iter().all(|e| !e.ticket.raised));
        let out = feed(&mut c, &[timeout("k", 4, 600)]);
        assert_eq!(
            out.last().expect("ticketed").ticket.reason,
            Some(TicketReason::Threshold)
        );
        assert_eq!(c.stats().tickets, 1);
    }

    #[test]
    fn a_big_cascade_speaks_in_powers_of_two() {
        let mut c = corr(IncidentConfig::default());
        let mut events = vec![xid("j", "node-05", 0)];
        events.extend((0..1024).map(|r| timeout("j", r, 601)));
        let out = feed(&mut c, &events);
        assert!(out.len() < 40, "{} events", out.len());
        let mut out = Vec::new();
        c.flush(&mut out);
        let last = out.last().expect("final state");
        assert_eq!(last.cascades.matches, 1024);
        assert_eq!(last.cascades.ranks, 1024);
        assert_eq!(last.counts.matches, 1025);
    }

    #[test]
    fn the_silent_rank_of_a_job_is_the_culprit() {
        let mut c = corr(IncidentConfig::default());
        let mut events = vec![xid("j", "node-02", 0)];
        events.extend((0..32).filter(|r| *r != 17).map(|r| timeout("j", r, 601)));
        feed(&mut c, &events);
        let last = c.current("j").expect("open");
        assert_eq!(last.culprit.method, CulpritMethod::RootHost);
        assert_eq!(last.culprit.rank_method, Some(CulpritMethod::MissingRanks));
        assert_eq!(last.culprit.ranks, vec![17]);
        assert_eq!(last.culprit.hosts, vec!["node-02".to_string()]);
    }

    #[test]
    fn the_traceback_before_the_root_is_its_context() {
        let mut c = corr(IncidentConfig::default());
        let ctx = |code: &str, line: &str| {
            event(code, Role::Info, "context")
                .domain("context")
                .rank(3)
                .line(line)
                .build()
        };
        let events = vec![
            ctx("CONTEXT_PY_TRACEBACK", "Traceback (most recent call last):"),
            ctx(
                "CONTEXT_PY_FRAME",
                "  File \"train.py\", line 41, in <module>",
            ),
            ctx(
                "CONTEXT_PY_FRAME",
                "  File \"model.py\", line 7, in forward",
            ),
            event("CUDA_OOM", Role::Root, "device_oom")
                .rank(3)
                .line("torch.OutOfMemoryError: CUDA out of memory.")
                .build(),
            ctx(
                "CONTEXT_CPP_RAISED_FROM",
                "Exception raised from malloc at x.cpp:1",
            ),
            // Another rank's traceback stays out.
            event("CONTEXT_PY_TRACEBACK", Role::Info, "context")
                .domain("context")
                .rank(4)
                .line("Traceback (most recent call last):")
                .build(),
        ];
        let out = feed(&mut c, &events);
        assert_eq!(out.len(), 1, "context lines do not emit by themselves");
        let lines: Vec<String> = out[0]
            .context
            .lines
            .iter()
            .map(|l| l.text.clone())
            .collect();
        assert_eq!(lines.len(), 4);
        assert_eq!(lines[0], "Traceback (most recent call last):");
        assert_eq!(lines[3], "torch.OutOfMemoryError: CUDA out of memory.");
        assert_eq!(out[0].counts.matches, 1, "block lines are not counted");
        let mut out = Vec::new();
        c.flush(&mut out);
        assert_eq!(out[0].context.lines.len(), 5);
        assert_eq!(
            out[0].context.lines[4].text,
            "Exception raised from malloc at x.cpp:1"
        );
    }

    #[test]
    fn open_incidents_are_capped_least_recently_updated_first() {
        let cfg = IncidentConfig {
            max_open_incidents: 2,
            max_jobs: 3,
            ..IncidentConfig::default()
        };
        let mut c = corr(cfg);
        let mut out = feed(
            &mut c,
            &[xid("a", "h", 0), xid("b", "h", 1), xid("a", "h", 2)],
        );
        out.clear();
        c.observe(&xid("c", "h", 3), &mut out);
        let evicted: Vec<_> = out
            .iter()
            .filter(|e| e.resolution == Some(Resolution::Evicted))
            .collect();
        assert_eq!(evicted.len(), 1);
        assert_eq!(evicted[0].job_id, "b", "a was updated after b");
        assert_eq!(c.open_incidents(), 2);
        assert_eq!(c.stats().evicted_incidents, 1);
    }

    #[test]
    fn exactly_max_open_incidents_evict_nothing_one_more_evicts_one() {
        let cfg = IncidentConfig {
            max_open_incidents: 3,
            max_jobs: 10,
            ..IncidentConfig::default()
        };
        let mut c = corr(cfg);
        let out = feed(
            &mut c,
            &[xid("a", "h", 0), xid("b", "h", 1), xid("c", "h", 2)],
        );
        assert!(out.iter().all(|e| e.resolution.is_none()), "{out:?}");
        assert_eq!((c.open_incidents(), c.stats().evicted_incidents), (3, 0));
        let out = feed(&mut c, &[xid("d", "h", 3)]);
        let evicted: Vec<&str> = out
            .iter()
            .filter(|e| e.resolution == Some(Resolution::Evicted))
            .map(|e| e.job_id.as_str())
            .collect();
        assert_eq!(evicted, ["a"]);
        assert_eq!((c.open_incidents(), c.stats().evicted_incidents), (3, 1));
    }

    /// A million single-match jobs through a correlator capped at 10,000: no map grows past
    /// its cap. (A smaller stream in debug builds keeps `cargo test` quick.)
    #[test]
    fn state_stays_flat_over_a_million_jobs() {
        let n: u64 = if cfg!(debug_assertions) {
            100_000
        } else {
            1_000_000
        };
        let cap = 10_000;
        let cfg = IncidentConfig {
            max_open_incidents: cap,
            max_jobs: cap,
            max_hosts: cap,
            ..IncidentConfig::default()
        };
        let mut c = corr(cfg);
        let mut e = xid("x", "h", 0);
        let mut out = Vec::new();
        let mut peak = Sizes::default();
        for i in 0..n {
            e.job_id = format!("job-{i}");
            e.host = Some(format!("host-{}", i % 50_000));
            c.observe(&e, &mut out);
            out.clear();
            if i % 997 == 0 || i + 1 == n {
                let s = c.sizes();
                peak.jobs = peak.jobs.max(s.jobs).max(s.job_lru);
                peak.open_incidents = peak.open_incidents.max(s.open_incidents).max(s.open_index);
                peak.hosts = peak.hosts.max(s.hosts).max(s.host_lru);
            }
        }
        assert!(peak.jobs <= cap && peak.open_incidents <= cap && peak.hosts <= cap);
        assert_eq!(c.open_incidents(), cap);
        assert_eq!(c.stats().opened, n);
        assert_eq!(c.stats().evicted_incidents, n - cap as u64);
    }
}
