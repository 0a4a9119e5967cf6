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

mod adopt;
mod late;
mod node;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use super::elect::{self, Candidate, Election, Standing};
use super::fleet::Fleet;
use super::lifecycle::Incident;
use super::lru::LruOrder;
use super::multiline::{self, Appended, StreamKey, Streams};
use super::nodes::{self, Nodes};
use super::{IncidentConfig, IncidentConfigError, IncidentEvent, Resolution, Status};
use crate::enrich::{MatchEvent, Scope};
use crate::time::Millis;

/// `(rank, host)` pairs a job's lines placed.
type Placements = Vec<(u32, Arc<str>)>;

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
    /// The last resolved incidents, oldest first (at most [`late::CLOSED_KEPT`]), which late
    /// lines revise ([`late`]).
    closed: VecDeque<late::Closed>,
    streams: Streams,
    history: VecDeque<Past>,
    /// Hosts the job's lines named, in order (bounded by `max_hosts_per_incident`), kept until a
    /// restart marker.
    hosts: Vec<Arc<str>>,
    /// Where each rank ran, as the job's lines said (bounded by `max_ranks_per_incident`).
    placements: BTreeMap<u32, Arc<str>>,
    /// The latest log time of the job's own lines: a line without a timestamp happened then,
    /// not at the latest time of any job (lines of other jobs may be read hours ahead when a
    /// partition lags or a replay interleaves jobs).
    clock: Option<Millis>,
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
    nodes: Nodes,
    clock: Option<Millis>,
    /// How far incidents may expire: the service's low watermark over its input partitions
    /// ([`Self::hold_expiry`]); none in `scan`.
    expiry_cap: Option<Millis>,
    arrivals: u64,
    next_serial: u64,
    /// Ids of incidents another correlator had open (read back from the incidents topic), per
    /// job: a new incident of the job within one's log-time window takes its id.
    adopted: HashMap<Arc<str>, Vec<adopt::Adopted>>,
    /// Serials of resolved incidents no longer kept for late lines, since the last
    /// [`Self::drain_forgotten`]; `None`: nobody asks ([`Self::track_forgotten`]).
    forgotten: Option<Vec<u64>>,
    stats: CorrelatorStats,
}

impl Correlator {
    /// A correlator with no state; fails when `cfg` does not [validate](IncidentConfig::validate).
    pub fn new(cfg: IncidentConfig) -> Result<Self, IncidentConfigError> {
        cfg.validate()?;
        Ok(Correlator {
            fleet: Fleet::new(cfg.max_hosts, cfg.bad_node_half_life_ms),
            nodes: Nodes::new(cfg.max_hosts),
            cfg,
            jobs: HashMap::new(),
            job_lru: LruOrder::default(),
            open: BTreeMap::new(),
            update_tick: 0,
            clock: None,
            expiry_cap: None,
            arrivals: 0,
            next_serial: 1,
            adopted: HashMap::new(),
            forgotten: None,
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

    /// Holds expiry at log time `cap` (none: the clock): an input partition read behind the
    /// others may still hold lines of the failures the clock has passed (a job's partition
    /// behind a node's, whose Xid would otherwise become a node incident before the job's lines
    /// arrive). Incidents and unclaimed node events expire on the earlier of the clock and
    /// `cap`.
    pub fn hold_expiry(&mut self, cap: Option<Millis>) {
        self.expiry_cap = cap;
    }

    /// The clock expiry runs on: the clock, held at the cap of [`Self::hold_expiry`].
    pub fn expiry_clock(&self) -> Option<Millis> {
        let clock = self.clock?;
        Some(self.expiry_cap.map_or(clock, |cap| cap.min(clock)))
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
        for orphan in self.nodes.expire(Millis::MAX) {
            self.node_incident(&orphan, out);
        }
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
        let log_ms = self.log_ms(event);
        self.observe_at(event, log_ms, out);
    }

    /// The log time of `event`: a stamp without a year is placed next to the clock, or today
    /// when nothing told the time yet.
    pub fn log_ms(&self, event: &MatchEvent) -> Option<Millis> {
        let near = self.clock.or(self.cfg.clock_anchor).or_else(wall_now);
        elect::log_ms(event, near)
    }

    /// The log time of a line stamped `stamp` (a match member's progress note), read like an
    /// event's ([`Self::log_ms`]).
    pub fn stamp_ms(&self, stamp: &str) -> Option<Millis> {
        let near = self.clock.or(self.cfg.clock_anchor).or_else(wall_now);
        elect::stamp_ms(stamp, near)
    }

    /// [`Self::observe`] with the event's log time already read ([`Self::log_ms`]).
    pub fn observe_at(
        &mut self,
        event: &MatchEvent,
        log_ms: Option<Millis>,
        out: &mut Vec<IncidentEvent>,
    ) {
        self.stats.events += 1;
        self.arrivals += 1;
        if let Some(t) = log_ms {
            self.set_clock(t);
        }
        let job_clock = match event.scope {
            // Else the time its open incident was opened on: untimed lines stay together.
            Scope::Job => self
                .jobs
                .get(event.job_id.as_str())
                .and_then(|j| j.clock.or_else(|| j.incident.as_ref().map(|i| i.last_ms))),
            Scope::Node => None,
        };
        let t = log_ms.or(job_clock).or(self.clock).unwrap_or(0);
        self.expire(out);
        match (&event.scope, &event.host) {
            (Scope::Node, Some(host)) if elect::can_initiate(event) => {
                let host: Arc<str> = Arc::from(host.as_str());
                self.observe_node(event, &host, t, log_ms, out);
            }
            _ => self.observe_job(event, t, log_ms, self.arrivals, out),
        }
    }

    /// A job's own match (or a node event no job claimed, under its `node:<host>` key).
    fn observe_job(
        &mut self,
        event: &MatchEvent,
        t: Millis,
        log_ms: Option<Millis>,
        arrival: u64,
        out: &mut Vec<IncidentEvent>,
    ) {
        let key = self.job_key(&event.job_id, out);
        // A retimed incident looks again at the node events of every host the job is on.
        let mut retimed = false;
        if let (Some(l), Some(job)) = (log_ms, self.jobs.get_mut(&key)) {
            let first = job.clock.is_none();
            job.clock = Some(job.clock.map_or(l, |c| c.max(l)));
            // The job's first line with a time: what it printed before without one happened
            // just before it, not at whatever time another job's lines had reached.
            if let Some(inc) = job
                .incident
                .as_mut()
                .filter(|i| first && i.first_log_ms.is_none())
            {
                self.open.remove(&inc.open_key);
                inc.retime(l);
                job.streams.retime(l);
                self.update_tick += 1;
                inc.open_key = (l.max(self.clock.unwrap_or(l)), self.update_tick);
                self.open.insert(inc.open_key, Arc::clone(&key));
                retimed = true;
            }
        }
        let rank = event.any_rank();
        let host: Option<Arc<str>> = event.host.as_deref().map(Arc::from);
        // A stream is where a line was printed: the launcher prefix or envelope rank, never a
        // capture (torchrun's summary row names another rank than the one printing it).
        let stream_key: StreamKey = (event.rank, host.clone());

        if self.is_restart_marker(event) {
            self.resolve(&key, Resolution::Restart, out);
            return self.restarted(&key, t);
        }
        let (new_hosts, new_places) = self.learn_placements(&key, event, t);

        let window = self.cfg.window_ms;
        let slack = self.slack();
        let max_backdate = self.cfg.max_backdate_ms;
        let effective = log_ms.map(|l| l - backdate(event, max_backdate));
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
                let joins = job.incident.as_ref().is_some_and(|inc| {
                    effective <= inc.last_ms + window
                        && (log_ms.is_none() || !late::before(inc, t, slack))
                });
                (appended, joins, job.incident.is_some())
            }
        };
        if multiline::is_block_only(event) {
            // Context lines ride along with the incident's next event.
            return;
        }
        let late = log_ms.filter(|_| !joins).and_then(|l| self.late(&key, l));
        match late {
            Some(late::Late::Revise(i)) => return self.revise(&key, i, event, t, arrival, out),
            Some(late::Late::Earlier) => {
                return self.earlier_incident(&key, event, t, arrival, out)
            }
            None => {}
        }
        let mut opened = false;
        if !joins {
            if has_incident {
                self.resolve(&key, Resolution::NextIncident, out);
            }
            if !elect::can_initiate(event) {
                return;
            }
            self.open_incident(&key, event, t, log_ms, arrival, out);
            opened = true;
        }

        let standing = Standing::of(event, log_ms, arrival);
        let cfg = &self.cfg;
        let Some(job) = self.jobs.get_mut(&key) else {
            return;
        };
        let Some(inc) = job.incident.as_mut() else {
            return;
        };
        inc.count(event, rank, host.as_ref(), t, log_ms, cfg);
        inc.note_effective(effective);
        inc.note_root(event);
        if opened {
            for (r, h) in &job.placements {
                inc.ranks.place(*r, h);
            }
        } else {
            for (r, h) in &new_places {
                inc.ranks.place(*r, h);
            }
        }
        if appended.root_cause {
            inc.evidence_dirty = true;
        }
        if elect::can_initiate(event) && event.scope == Scope::Job && inc.note_anchor(event, log_ms)
        {
            inc.significant = true;
            Self::re_sign(inc, &job.history, cfg);
        }
        if joins {
            if elect::can_initiate(event)
                && inc
                    .election
                    .offer(standing, || Candidate::of(event, standing))
            {
                inc.significant = true;
                inc.evidence_dirty = true;
                Self::re_sign(inc, &job.history, cfg);
                inc.reset_context(&job.streams);
            } else {
                forward_context(inc, &stream_key, appended, event);
            }
        }
        // Node events of this job's hosts: all of them when the incident opens or is retimed,
        // else those of a host the job was just seen on.
        let hosts: Vec<Arc<str>> = if opened || retimed {
            job.hosts.clone()
        } else {
            new_hosts
        };
        self.finish_update(&key, true, out);
        for h in hosts {
            self.claim_node_events(&key, &h, out);
        }
    }

    /// Records where job `key`'s line says its ranks ran; returns the hosts new for the job
    /// and the rank placements new for it.
    fn learn_placements(
        &mut self,
        key: &Arc<str>,
        event: &MatchEvent,
        t: Millis,
    ) -> (Vec<Arc<str>>, Placements) {
        let placed = nodes::placements(event);
        if placed.is_empty() {
            return (Vec::new(), Vec::new());
        }
        let new_hosts = self.place_job(key, placed.iter().map(|(_, h)| h), t);
        let mut new_places = Vec::new();
        let cap = self.cfg.max_ranks_per_incident;
        if let Some(job) = self.jobs.get_mut(key) {
            for (rank, host) in &placed {
                if let Some(r) = rank {
                    let fresh = job.placements.get(r) != Some(host);
                    if fresh && (job.placements.len() < cap || job.placements.contains_key(r)) {
                        job.placements.insert(*r, Arc::clone(host));
                        new_places.push((*r, Arc::clone(host)));
                    }
                }
            }
        }
        (new_hosts, new_places)
    }

    /// Job `key` ran on `hosts` at log time `t`: they join its hosts (up to
    /// `max_hosts_per_incident`) and the node index knows the job there. Returns the hosts new
    /// for the job.
    fn place_job<'a>(
        &mut self,
        key: &Arc<str>,
        hosts: impl Iterator<Item = &'a Arc<str>> + Clone,
        t: Millis,
    ) -> Vec<Arc<str>> {
        let mut new_hosts = Vec::new();
        let max_hosts = self.cfg.max_hosts_per_incident;
        if let Some(job) = self.jobs.get_mut(key) {
            for host in hosts.clone() {
                if !job.hosts.contains(host) && job.hosts.len() < max_hosts {
                    job.hosts.push(Arc::clone(host));
                    new_hosts.push(Arc::clone(host));
                }
            }
        }
        for host in hosts {
            self.nodes.saw_job(host, key, t);
        }
        new_hosts
    }

    /// Joins the waiting node events of `host` that fit job `key`'s open incident.
    fn claim_node_events(&mut self, key: &Arc<str>, host: &Arc<str>, out: &mut Vec<IncidentEvent>) {
        let Some(inc) = self.jobs.get(key).and_then(|j| j.incident.as_ref()) else {
            return;
        };
        let first = inc.first_effective_ms.unwrap_or(inc.first_ms) - self.cfg.node_join_ms;
        let last = inc.last_effective_ms.unwrap_or(inc.last_ms) + self.cfg.window_ms;
        let reference = inc.first_effective_ms.unwrap_or(inc.first_ms);
        let claimed = self.nodes.claim(host, key, |ev| {
            let t = ev.time_near(reference);
            t >= first && t <= last
        });
        for ev in claimed {
            self.join_node(key, &ev, out);
        }
    }

    /// After a re-election or a new anchor: the fingerprint and signature, and what the
    /// signature says about restart loops.
    fn re_sign(inc: &mut Incident, history: &VecDeque<Past>, cfg: &IncidentConfig) {
        inc.refingerprint();
        let (recurrence, _) = recurrence_of(history, &inc.signature(), inc.last_ms, cfg);
        inc.recurrence = recurrence;
        inc.restart_loop = recurrence >= cfg.restart_loop_after;
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
        // Re-index by last activity: its log time, or the clock when it was updated if that is
        // later (logs that arrive late still get their quiet period of clock time).
        self.open.remove(&inc.open_key);
        self.update_tick += 1;
        inc.open_key = (
            inc.last_ms.max(self.clock.unwrap_or(inc.last_ms)),
            self.update_tick,
        );
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
        arrival: u64,
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
        let standing = Standing::of(event, log_ms, arrival);
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
        let (recurrence, _) = recurrence_of(&job.history, &inc.signature(), t, &self.cfg);
        inc.recurrence = recurrence;
        inc.restart_loop = recurrence >= self.cfg.restart_loop_after;
        if inc.restart_loop {
            self.stats.restart_loops += 1;
        }
        if event.scope == Scope::Job {
            inc.note_anchor(event, log_ms);
        }
        inc.fresh_fingerprint();
        inc.reset_context(&job.streams);
        inc.id = inc.fingerprint.clone();
        self.update_tick += 1;
        inc.open_key = (t.max(self.clock.unwrap_or(t)), self.update_tick);
        self.open.insert(inc.open_key, Arc::clone(key));
        let fresh = inc.id.clone();
        job.incident = Some(inc);
        if let Some(adopted) = self.take_adopted(key, log_ms, &fresh) {
            if let Some(inc) = self.jobs.get_mut(key).and_then(|j| j.incident.as_mut()) {
                inc.id = adopted.id;
            }
            self.place_job(key, adopted.hosts.iter(), t);
        }
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
        let (clock, slack) = (self.expiry_clock(), self.slack());
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
        let signature = inc.signature();
        let (_, slot) = recurrence_of(&job.history, &signature, inc.last_ms, &self.cfg);
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
                    fingerprint: signature,
                    ended_ms: inc.last_ms,
                    occurrences: inc.recurrence,
                });
            }
        }
        self.stats.resolved += 1;
        out.push(inc.snapshot(Status::Resolved, Some(why), &self.cfg));
        job.closed.push_back(late::Closed::new(inc, why));
        let mut gone = Vec::new();
        while job.closed.len() > late::CLOSED_KEPT
            && (job.closed.len() > late::CLOSED_MAX
                || job
                    .closed
                    .front()
                    .is_some_and(|c| c.behind(clock, self.cfg.window_ms, slack)))
        {
            // The oldest failure no longer takes late lines: its attempt's hosts go.
            if let Some(c) = job.closed.pop_front() {
                if let Some(f) = self.forgotten.as_mut() {
                    f.push(c.inc.serial);
                }
                gone.extend(c.hosts);
            }
        }
        self.forget_hosts(key, gone);
    }

    /// Resolves incidents whose quiet period has passed on the clock.
    fn expire(&mut self, out: &mut Vec<IncidentEvent>) {
        let Some(now) = self.expiry_clock() else {
            return;
        };
        let horizon = self.cfg.node_join_ms + self.cfg.window_ms;
        for orphan in self.nodes.expire(now.saturating_sub(horizon)) {
            self.node_incident(&orphan, out);
        }
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
            if let (Some(job), Some(f)) = (self.jobs.remove(&victim), self.forgotten.as_mut()) {
                f.extend(job.closed.iter().map(|c| c.inc.serial));
            }
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
                closed: VecDeque::new(),
                streams: Streams::new(
                    self.cfg.max_context_streams_per_job,
                    self.cfg.max_context_lines,
                    self.cfg.max_context_bytes,
                ),
                history: VecDeque::new(),
                hosts: Vec::new(),
                placements: BTreeMap::new(),
                clock: None,
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

/// The wall clock, in milliseconds since the epoch: the last resort to place a stamp that
/// names no year.
fn wall_now() -> Option<Millis> {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()
        .map(|d| d.as_millis() as Millis)
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
mod tests;
