//! Node events and the jobs they hit.
//!
//! A node's own lines (kernel log, journald, node daemons: Xid, ECC, PCIe AER, IB port errors,
//! the OOM killer, slurmd, kubelet) name a host and no job. The correlator learns which jobs
//! ran on which host from the jobs' own lines (envelope hosts, NCCL `host:pid:tid [dev]`
//! prefixes, `srun: error: NODE: task N`, torchrun's `host :` rows, Slurm's `ON NODE`) and
//! joins each node event to the incidents of the jobs on its host whose time range it falls
//! in: at most [`super::IncidentConfig::node_join_ms`] before the job's first error, at most a
//! window after its last. A node event waits here for such a job in either order: a job that
//! shows up later still claims it. One that no job claims before its time passes becomes a node
//! incident (job `node:<host>`), for lemon-node tracking, not a ticket.
//!
//! Bounded: at most `max_hosts` hosts (least recently touched forgotten), [`MAX_PENDING`] node
//! events and [`MAX_JOBS_PER_HOST`] jobs per host.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use super::lru::LruOrder;
use crate::enrich::MatchEvent;
use crate::time::Millis;

/// Node events remembered per host.
pub const MAX_PENDING: usize = 64;
/// Jobs remembered per host.
pub const MAX_JOBS_PER_HOST: usize = 64;
/// Ranks a `tasks 0-7` range may name.
const MAX_RANGE: u32 = 1024;

/// A node event waiting for the jobs of its host.
#[derive(Debug, Clone)]
pub struct NodeEvent {
    /// The match.
    pub event: MatchEvent,
    /// Its time on the correlator's clock.
    pub t: Millis,
    /// The clock when it arrived, if later than `t` (a late line): it waits a full horizon
    /// of clock time from then.
    pub held_at: Millis,
    /// Its stamp when that names no year (syslog): placed again next to each job's times.
    pub yearless: Option<crate::time::Stamp>,
    /// Its own log time, if it has one.
    pub log_ms: Option<Millis>,
    /// Its arrival order.
    pub arrival: u64,
    /// Jobs that took it (each takes it once).
    pub claimed_by: Vec<Arc<str>>,
}

impl NodeEvent {
    /// Its time next to `reference` (a job's times): a stamp without a year is placed in the
    /// year nearest it.
    pub fn time_near(&self, reference: Millis) -> Millis {
        self.yearless
            .map_or(self.t, |s| s.millis_near(Some(reference)))
    }
}

/// What the correlator knows about one host.
#[derive(Debug, Default)]
struct Host {
    tick: u64,
    pending: VecDeque<NodeEvent>,
    /// Jobs seen on this host and when last.
    jobs: HashMap<Arc<str>, Millis>,
}

/// Hosts, their jobs and their node events.
#[derive(Debug)]
pub struct Nodes {
    hosts: HashMap<Arc<str>, Host>,
    lru: LruOrder<Arc<str>>,
    max_hosts: usize,
    /// Every waiting node event by (held since, arrival): expiry pops from the front only.
    waiting: std::collections::BTreeMap<(Millis, u64), Arc<str>>,
}

impl Nodes {
    /// An empty index of at most `max_hosts` hosts.
    pub fn new(max_hosts: usize) -> Self {
        Nodes {
            hosts: HashMap::new(),
            lru: LruOrder::default(),
            max_hosts,
            waiting: std::collections::BTreeMap::new(),
        }
    }

    /// The host's state, created (evicting the least recently touched host at the cap) and
    /// touched.
    fn host(&mut self, host: &str) -> &mut Host {
        if !self.hosts.contains_key(host) {
            while self.hosts.len() >= self.max_hosts {
                match self.lru.pop_oldest() {
                    // Its waiting events go with it; their index entries are skipped when due.
                    Some(victim) => {
                        self.hosts.remove(&victim);
                    }
                    None => break,
                }
            }
        }
        let key: Arc<str> = Arc::from(host);
        let lru = &mut self.lru;
        let state = self.hosts.entry(Arc::clone(&key)).or_insert_with(|| Host {
            tick: lru.push(key),
            ..Host::default()
        });
        state.tick = lru.touch(state.tick);
        state
    }

    /// Records that `job` logged from `host` at `t`.
    pub fn saw_job(&mut self, host: &str, job: &Arc<str>, t: Millis) {
        let state = self.host(host);
        if let Some(last) = state.jobs.get_mut(job) {
            *last = (*last).max(t);
            return;
        }
        if state.jobs.len() >= MAX_JOBS_PER_HOST {
            if let Some(oldest) = state
                .jobs
                .iter()
                .min_by_key(|(_, t)| **t)
                .map(|(j, _)| Arc::clone(j))
            {
                state.jobs.remove(&oldest);
            }
        }
        state.jobs.insert(Arc::clone(job), t);
    }

    /// Forgets that `job` ran on `host` (the job restarted; its next attempt names its hosts
    /// again).
    pub fn forget_job(&mut self, host: &str, job: &str) {
        if let Some(state) = self.hosts.get_mut(host) {
            state.jobs.remove(job);
        }
    }

    /// The jobs seen on `host`.
    pub fn jobs_on(&self, host: &str) -> Vec<Arc<str>> {
        let mut jobs: Vec<Arc<str>> = self
            .hosts
            .get(host)
            .map(|h| h.jobs.keys().cloned().collect())
            .unwrap_or_default();
        jobs.sort();
        jobs
    }

    /// Keeps a node event for the jobs of its host; returns the one that no longer fits, if
    /// the host's list was full (the oldest).
    pub fn hold(&mut self, host: &str, ev: NodeEvent) -> Option<NodeEvent> {
        let key = (ev.held_at, ev.arrival);
        let state = self.host(host);
        let out = (state.pending.len() >= MAX_PENDING)
            .then(|| state.pending.pop_front())
            .flatten();
        state.pending.push_back(ev);
        if let Some(o) = &out {
            self.waiting.remove(&(o.held_at, o.arrival));
        }
        self.waiting.insert(key, Arc::from(host));
        out
    }

    /// The node events of `host` that `accept` takes for `job` and that `job` has not taken
    /// yet; they are marked taken.
    pub fn claim(
        &mut self,
        host: &str,
        job: &Arc<str>,
        mut accept: impl FnMut(&NodeEvent) -> bool,
    ) -> Vec<NodeEvent> {
        let Some(state) = self.hosts.get_mut(host) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for ev in &mut state.pending {
            if !ev.claimed_by.contains(job) && accept(ev) {
                ev.claimed_by.push(Arc::clone(job));
                out.push(ev.clone());
            }
        }
        out
    }

    /// Removes the node events held since before `deadline` (oldest first), returning those
    /// no job took. Costs nothing when none is due.
    pub fn expire(&mut self, deadline: Millis) -> Vec<NodeEvent> {
        let mut orphans = Vec::new();
        while let Some((&(held_at, arrival), _)) = self.waiting.first_key_value() {
            if held_at >= deadline {
                break;
            }
            let Some((_, host)) = self.waiting.pop_first() else {
                break;
            };
            let Some(state) = self.hosts.get_mut(&host) else {
                continue;
            };
            if let Some(i) = state.pending.iter().position(|e| e.arrival == arrival) {
                if let Some(ev) = state.pending.remove(i) {
                    if ev.claimed_by.is_empty() {
                        orphans.push(ev);
                    }
                }
            }
        }
        orphans
    }

    /// Hosts tracked, and node events waiting: for tests that prove the bounds.
    pub fn sizes(&self) -> (usize, usize) {
        (
            self.hosts.len(),
            self.hosts.values().map(|h| h.pending.len()).sum(),
        )
    }
}

/// Where a job's line says its ranks ran: `(rank, host)` pairs, a rank `None` when the line
/// names a host only. From the envelope or prefix host with the line's rank, and from the
/// captures of launcher lines: `node` or `host` with `rank` (a task list such as `0-7,9`).
pub fn placements(event: &MatchEvent) -> Vec<(Option<u32>, Arc<str>)> {
    let mut out = Vec::new();
    let captured = event
        .captures
        .get("node")
        .or_else(|| event.captures.get("host"))
        .map(|h| h.trim())
        .filter(|h| plausible_host(h));
    match captured {
        Some(host) => {
            let host: Arc<str> = Arc::from(host);
            let ranks = event
                .captures
                .get("rank")
                .map(|r| task_list(r))
                .unwrap_or_default();
            if ranks.is_empty() {
                out.push((None, Arc::clone(&host)));
            }
            out.extend(ranks.into_iter().map(|r| (Some(r), Arc::clone(&host))));
        }
        None => {
            if let Some(h) = event.host.as_deref().filter(|h| plausible_host(h)) {
                out.push((event.rank, Arc::from(h)));
            }
        }
    }
    out
}

fn plausible_host(h: &str) -> bool {
    !h.is_empty()
        && h.len() <= 253
        && h.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
}

/// `11`, `0-7`, `0-3,8,10-11` -> the ranks (at most [`MAX_RANGE`]).
pub fn task_list(text: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for part in text.split(',') {
        let part = part.trim();
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.trim().parse::<u32>(), b.trim().parse::<u32>()),
            None => (part.parse::<u32>(), part.parse::<u32>()),
        };
        if let (Ok(a), Ok(b)) = (a, b) {
            for r in a..=b.min(a.saturating_add(MAX_RANGE)) {
                if out.len() >= MAX_RANGE as usize {
                    return out;
                }
                out.push(r);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_lists_and_ranges() {
        assert_eq!(task_list("11"), [11]);
        assert_eq!(task_list("0-3,8"), [0, 1, 2, 3, 8]);
        assert_eq!(task_list("x"), Vec::<u32>::new());
        assert_eq!(task_list("0-4000000000").len(), MAX_RANGE as usize);
    }
}
