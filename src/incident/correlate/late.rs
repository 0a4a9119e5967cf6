//! Late lines: order-independent correlation in log time.
//!
//! Lines of one failure reach the correlator out of log-time order whenever they travel
//! different partitions, members or pipelines (a node's kernel log and the job's own output
//! always do), and above all when a backlog is replayed. A line joins the failure whose
//! log-time window it falls in, whenever it arrives:
//!
//! - in the window of the job's open incident: it joins it (the open path, [`super`]);
//! - before that window, in the window of the job's last resolved incident: it revises that
//!   incident ([`Correlator::revise`]): counted, offered to its election (a late Xid becomes
//!   the root), and emitted as an `updated` change with the same id, then `resolved` again with
//!   its first resolution; never a later failure's;
//! - before the open incident's window and in no resolved one: it is an earlier failure of its
//!   own, opened, counted and resolved at once ([`Correlator::earlier_incident`]), the open
//!   incident untouched.
//!
//! A window runs from `slack` before an incident's first error (its effective start: an NCCL
//! timeout is backdated by its timeout) to `window_ms` after its last match; `slack` is the
//! larger of `window_ms` and `node_join_ms`. The last [`CLOSED_KEPT`] resolved incidents are
//! kept per job (the job's state is bounded by `max_jobs`), so a line that belongs to an older
//! failure than those is treated as an earlier failure of its own.

use std::sync::Arc;

use super::Correlator;
use crate::enrich::MatchEvent;
use crate::incident::elect::{self, Candidate, Standing};
use crate::incident::lifecycle::Incident;
use crate::incident::multiline::Streams;
use crate::incident::nodes::NodeEvent;
use crate::incident::{IncidentConfig, IncidentEvent, Resolution, Status};
use crate::time::Millis;

/// Resolved incidents kept per job for their late lines: a job that failed and restarted
/// several times while its node logs lagged still gets each late node event into its failure.
pub(super) const CLOSED_KEPT: usize = 4;

/// Resolved incidents kept per job while a late line may still reach them (their window is not
/// yet behind the expiry clock, which the service holds at its slowest input partition's log
/// time): a job that restarted more than [`CLOSED_KEPT`] times before its node logs caught up
/// keeps each failure, up to this many.
pub(super) const CLOSED_MAX: usize = 64;

/// One of a job's last resolved incidents, kept so that its late lines revise it.
#[derive(Debug)]
pub(super) struct Closed {
    pub(super) inc: Box<Incident>,
    /// How it was resolved: a revision resolves it the same way again.
    pub(super) why: Resolution,
    /// The log time of the restart marker that resolved it: the next attempt's lines, after
    /// it, are never this failure's.
    pub(super) until: Option<Millis>,
    /// The hosts of its attempt, moved here by the restart marker: a node event of one of them
    /// that arrives late still reaches this failure (and no later one); forgotten when the
    /// job's next failure resolves.
    pub(super) hosts: Vec<Arc<str>>,
}

impl Closed {
    /// Incident `inc`, just resolved for `why`.
    pub(super) fn new(inc: Box<Incident>, why: Resolution) -> Self {
        Closed {
            inc,
            why,
            until: None,
            hosts: Vec::new(),
        }
    }

    /// Whether its window, which ends `window_ms` after its last match (or at the restart
    /// marker), ended more than `margin` before `clock`: the lines still to come are later.
    pub(super) fn behind(&self, clock: Option<Millis>, window_ms: Millis, margin: Millis) -> bool {
        let (_, last) = span(&self.inc);
        clock.is_none_or(|c| self.end(last + window_ms).saturating_add(margin) < c)
    }

    /// The end of its window: `end`, or the restart marker's time when that is earlier.
    fn end(&self, end: Millis) -> Millis {
        self.until.map_or(end, |u| u.min(end))
    }
}

/// Where a late line goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Late {
    /// Into the job's resolved incident of this index (`JobState::closed`).
    Revise(usize),
    /// Into an earlier failure of its own.
    Earlier,
}

/// Whether log time `t` is before the window of incident `inc`, which opens `slack` before its
/// first error.
pub(super) fn before(inc: &Incident, t: Millis, slack: Millis) -> bool {
    t < span(inc).0 - slack
}

/// Counts late `event`, read at log time `t`, into `inc`.
fn count_at(inc: &mut Incident, event: &MatchEvent, t: Millis, cfg: &IncidentConfig) {
    let host: Option<Arc<str>> = event.host.as_deref().map(Arc::from);
    inc.count(event, event.any_rank(), host.as_ref(), t, Some(t), cfg);
    inc.note_root(event);
}

/// From how long before an incident's first error to how long after its last match a line
/// falls in its window.
fn span(inc: &Incident) -> (Millis, Millis) {
    let first = inc.first_effective_ms.unwrap_or(inc.first_ms);
    let last = inc.last_effective_ms.unwrap_or(inc.last_ms);
    (first.min(inc.first_ms), last.max(inc.last_ms))
}

impl Correlator {
    /// Starts listing the resolved incidents that are no longer kept for late lines (dropped
    /// past [`CLOSED_KEPT`], or with their job at `max_jobs`): the service holds a resolved
    /// incident's records while a late line may still revise it, and lifts the hold when it
    /// is forgotten ([`Self::drain_forgotten`]).
    pub fn track_forgotten(&mut self) {
        self.forgotten.get_or_insert_with(Vec::new);
    }

    /// Moves the serials of the resolved incidents forgotten since the last call to `out`.
    pub fn drain_forgotten(&mut self, out: &mut Vec<u64>) {
        if let Some(f) = self.forgotten.as_mut() {
            out.append(f);
        }
    }

    /// How far before an incident's first error its window starts.
    pub(super) fn slack(&self) -> Millis {
        self.cfg.window_ms.max(self.cfg.node_join_ms)
    }

    /// Node event `ev` on a host of job `job`, when it belongs to one of the job's resolved
    /// incidents (not to its open one): that incident's index and the event's time, placed
    /// near it.
    pub(super) fn node_revises(&self, job: &Arc<str>, ev: &NodeEvent) -> Option<(usize, Millis)> {
        let j = self.jobs.get(job)?;
        let host = ev.event.host.as_deref();
        j.closed.iter().enumerate().rev().find_map(|(i, closed)| {
            // A failure of an attempt elsewhere is not this host's.
            let ran_here = closed.hosts.is_empty()
                || host.is_some_and(|h| closed.hosts.iter().any(|c| &**c == h));
            let (first, last) = span(&closed.inc);
            let t = ev.time_near(first);
            let fits = ran_here
                && t >= first - self.cfg.node_join_ms
                && t <= closed.end(last + self.cfg.window_ms);
            let before_open = j
                .incident
                .as_ref()
                .is_none_or(|o| before(o, t, self.slack()));
            (fits && before_open).then_some((i, t))
        })
    }

    /// A restart marker of job `key` at log time `t`: its resolved incident's window ends
    /// there, and the job's hosts move to that incident (the next attempt may run elsewhere:
    /// an old host's node event no longer joins the job's open incident, only, when it falls
    /// in its window, the failure the restart ended).
    pub(super) fn restarted(&mut self, key: &Arc<str>, t: Millis) {
        let cap = self.cfg.max_hosts_per_incident;
        let Some(job) = self.jobs.get_mut(key) else {
            return;
        };
        job.placements.clear();
        let hosts = std::mem::take(&mut job.hosts);
        // Kept for the failure the restart ended: its late node events revise it.
        if let Some(closed) = job.closed.back_mut() {
            closed.until = Some(closed.until.map_or(t, |u| u.min(t)));
            for host in &hosts {
                if closed.hosts.len() < cap && !closed.hosts.contains(host) {
                    closed.hosts.push(Arc::clone(host));
                }
            }
        }
        self.forget_hosts(key, hosts);
    }

    /// Forgets that job `key` ran on those of `hosts` that neither its running attempt nor a
    /// kept failure still has: their node events no longer reach the job.
    pub(super) fn forget_hosts(&mut self, key: &Arc<str>, hosts: Vec<Arc<str>>) {
        let Some(job) = self.jobs.get(key) else {
            return;
        };
        let kept =
            |h: &Arc<str>| job.hosts.contains(h) || job.closed.iter().any(|c| c.hosts.contains(h));
        let gone: Vec<Arc<str>> = hosts.into_iter().filter(|h| !kept(h)).collect();
        for host in gone {
            self.nodes.forget_job(&host, key);
        }
    }

    /// Where a line of job `key` at log time `t` goes when it does not join the open incident:
    /// `None` when it is not late (no incident, or after the resolved one's window).
    pub(super) fn late(&self, key: &Arc<str>, t: Millis) -> Option<Late> {
        let job = self.jobs.get(key)?;
        let before_open = job.incident.as_ref().map(|o| before(o, t, self.slack()));
        if before_open == Some(false) {
            return None;
        }
        let fits = job.closed.iter().rposition(|c| {
            let (first, last) = span(&c.inc);
            t >= first - self.slack() && t <= c.end(last + self.cfg.window_ms)
        });
        match (fits, before_open) {
            (Some(i), _) => Some(Late::Revise(i)),
            (None, Some(true)) => Some(Late::Earlier),
            (None, _) => None,
        }
    }

    /// Counts late `event` (log time `t`) into job `key`'s resolved incident `i` and emits the
    /// revision: `updated` with the same id, then `resolved` again.
    pub(super) fn revise(
        &mut self,
        key: &Arc<str>,
        i: usize,
        event: &MatchEvent,
        t: Millis,
        arrival: u64,
        out: &mut Vec<IncidentEvent>,
    ) {
        let cfg = &self.cfg;
        let Some(job) = self.jobs.get_mut(key) else {
            return;
        };
        let Some(closed) = job.closed.get_mut(i) else {
            return;
        };
        let inc = &mut closed.inc;
        count_at(inc, event, t, cfg);
        let log_ms = Some(t);
        let standing = Standing::of(event, log_ms, arrival);
        if elect::can_initiate(event)
            && inc
                .election
                .offer(standing, || Candidate::of(event, standing))
        {
            inc.evidence_dirty = true;
            Self::re_sign(inc, &job.history, cfg);
        }
        // The job's streams are its later lines' now: the revision is judged without them.
        inc.evaluate(&Streams::new(1, 1, 1), true);
        let now = self.clock.unwrap_or(inc.last_ms);
        Self::refresh_blame(&mut self.fleet, inc, now);
        self.stats.updated += 1;
        out.push(inc.snapshot(Status::Updated, None, cfg));
        out.push(inc.snapshot(Status::Resolved, Some(closed.why), cfg));
    }

    /// A late line before job `key`'s open incident and in no resolved one: an earlier failure
    /// of its own, opened, counted and resolved at once; the open incident steps aside
    /// meanwhile and is left as it was.
    pub(super) fn earlier_incident(
        &mut self,
        key: &Arc<str>,
        event: &MatchEvent,
        t: Millis,
        arrival: u64,
        out: &mut Vec<IncidentEvent>,
    ) {
        if !elect::can_initiate(event) {
            return;
        }
        let open = self.jobs.get_mut(key).and_then(|j| j.incident.take());
        if let Some(o) = &open {
            self.open.remove(&o.open_key);
        }
        self.open_incident(key, event, t, Some(t), arrival, out);
        let cfg = &self.cfg;
        if let Some(job) = self.jobs.get_mut(key) {
            if let Some(inc) = job.incident.as_mut() {
                count_at(inc, event, t, cfg);
                for (r, h) in &job.placements {
                    inc.ranks.place(*r, h);
                }
                inc.significant = true;
            }
        }
        self.finish_update(key, true, out);
        self.resolve(key, Resolution::Quiet, out);
        if let (Some(o), Some(job)) = (open, self.jobs.get_mut(key)) {
            self.open.insert(o.open_key, Arc::clone(key));
            job.incident = Some(o);
        }
    }
}
