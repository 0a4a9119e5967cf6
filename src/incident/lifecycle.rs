//! One incident's state, from open to resolved, and when it speaks.
//!
//! An incident opens on the first match of a job that can initiate one (not info, not
//! context). Every further match of the job within the window updates it: counts per rank,
//! host, role and error code, cascades, last seen, the election of its initiator, the NCCL
//! evidence and the context lines. It resolves after a quiet period of log time, when a later
//! match starts the job's next incident, when the job prints a restart marker, or when a state
//! cap evicts it.
//!
//! Output is throttled so that a 16,384-rank cascade does not print 16,384 updates: an
//! `updated` event goes out at once after a significant change (initiator or fingerprint,
//! culprit, ticket, restart-loop flag) and otherwise when the number of matches reaches a power
//! of two. The `resolved` event always carries the final state.
//!
//! The culprit inference walks the rank table, so it runs only when its answer may have
//! changed in a way worth looking at: on significant changes, at powers of two, and when the
//! number of silent or lagging ranks changes while small enough to name them.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::culprit::{RankTable, LISTED};
use super::elect::Election;
use super::fingerprint::{self, FingerprintInput};
use super::multiline::{ContextBuf, StreamKey, Streams};
use super::timeline::Timeline;
use super::{
    Cascades, Contributor, Counts, Culprit, CulpritMethod, IncidentConfig, IncidentEvent,
    Resolution, Status, Ticket, TicketReason,
};

/// Contributing roots, and distinct cascade ops, kept per incident.
pub const MAX_CONTRIBUTING: usize = 8;
use crate::enrich::{MatchEvent, SCHEMA_VERSION};
use crate::kb::Role;
use crate::time::{format_ms, Millis};

/// One open incident.
#[derive(Debug, Clone)]
pub struct Incident {
    /// Unique per correlator ([`IncidentEvent::serial`]).
    pub serial: u64,
    /// The job whose matches make up the incident.
    pub job_id: Arc<str>,
    /// The initiator and runner-up so far.
    pub election: Election,
    /// [`IncidentEvent::id`]: set when it opens, never changed.
    pub id: String,
    /// The current `fp2` key, of the current anchor.
    pub fingerprint: String,
    /// Set by a re-election until the next event carries it.
    pub previous_fingerprint: Option<String>,
    /// Earliest match time on the correlator's clock.
    pub first_ms: Millis,
    /// Latest match time on the correlator's clock.
    pub last_ms: Millis,
    /// Earliest parsed log time of a match, if any carried one.
    pub first_log_ms: Option<Millis>,
    /// Latest parsed log time of a match, if any carried one.
    pub last_log_ms: Option<Millis>,
    /// The log time range with collective timeouts back-dated to when their hang began: what
    /// node events are joined against.
    pub first_effective_ms: Option<Millis>,
    /// The end of that range.
    pub last_effective_ms: Option<Millis>,
    /// The earliest of the job's own lines that could open an incident: (log time, text).
    anchor: Option<(Option<Millis>, String)>,
    /// Root-role matches seen, distinct by code, rank and host (at most [`MAX_CONTRIBUTING`]).
    roots: Vec<Contributor>,
    /// The collective op, sequence number and timeout the cascade names most.
    cascade_op: BTreeMap<(String, Option<i64>), u64>,
    cascade_timeout_ms: Option<i64>,
    /// Matches counted, of any role.
    pub matches: u64,
    by_role: [u64; 4],
    by_code: BTreeMap<String, u64>,
    cascade_matches: u64,
    cascade_by_code: BTreeMap<String, u64>,
    /// Per-rank counts and NCCL evidence.
    pub ranks: RankTable,
    hosts: HashMap<Arc<str>, u64>,
    max_hosts: usize,
    host_untracked: u64,
    /// The root's traceback or c10 block and torchrun's summary, bounded.
    pub context: ContextBuf,
    /// The stream whose block lines join the context.
    pub context_key: Option<StreamKey>,
    /// The context holds a stream's block (not just the root line).
    pub context_from_stream: bool,
    /// torchrun's root-cause row: (rank, host).
    pub elastic: Option<(u32, Option<String>)>,
    /// The culprit as last inferred.
    pub culprit: Culprit,
    last_eval: (u64, u64),
    /// New evidence since the last inference.
    pub evidence_dirty: bool,
    /// Why the ticket was raised; `None` until it is.
    pub ticket: Option<TicketReason>,
    ticket_window_start: Millis,
    ticket_window_count: u64,
    /// Occurrences of this fingerprint in the job within the restart horizon, this one included.
    pub recurrence: u32,
    /// The fingerprint recurred `restart_loop_after` times.
    pub restart_loop: bool,
    /// The host this incident blames, once credited.
    pub blamed_host: Option<Arc<str>>,
    /// `blamed_host` has been credited in the fleet scores (once per incident).
    pub credited: bool,
    /// The blamed host's decayed bad-node score.
    pub bad_node_score: Option<f64>,
    /// Changes emitted so far; the next snapshot counts one more.
    pub revision: u64,
    /// A change that is emitted at once.
    pub significant: bool,
    /// A change that waits for the next power of two.
    pub minor: bool,
    /// Key in the correlator's index of open incidents.
    pub open_key: (Millis, u64),
    /// Content hash of the KB in use when the incident opened.
    pub kb_version: String,
    /// When each rank first spoke, bounded ([`super::timeline`]).
    pub timeline: Timeline,
}

fn role_index(role: Role) -> usize {
    match role {
        Role::Root => 0,
        Role::Symptom => 1,
        Role::Cascade => 2,
        Role::Info => 3,
    }
}

impl Incident {
    /// A fresh incident of `job_id` with `election`'s initiator, opened at `t` (log time
    /// `log_ms`); nothing counted yet.
    pub fn new(
        serial: u64,
        job_id: Arc<str>,
        election: Election,
        t: Millis,
        log_ms: Option<Millis>,
        cfg: &IncidentConfig,
        kb_version: &str,
    ) -> Self {
        let fingerprint = fingerprint::fp2(&job_id, None, "");
        Incident {
            serial,
            job_id,
            election,
            id: String::new(),
            fingerprint,
            previous_fingerprint: None,
            first_ms: t,
            last_ms: t,
            first_log_ms: log_ms,
            last_log_ms: log_ms,
            first_effective_ms: None,
            last_effective_ms: None,
            anchor: None,
            roots: Vec::new(),
            cascade_op: BTreeMap::new(),
            cascade_timeout_ms: None,
            matches: 0,
            by_role: [0; 4],
            by_code: BTreeMap::new(),
            cascade_matches: 0,
            cascade_by_code: BTreeMap::new(),
            ranks: RankTable::new(cfg.max_ranks_per_incident),
            hosts: HashMap::new(),
            max_hosts: cfg.max_hosts_per_incident,
            host_untracked: 0,
            context: ContextBuf::new(cfg.max_context_lines, cfg.max_context_bytes),
            context_key: None,
            context_from_stream: false,
            elastic: None,
            culprit: Culprit {
                ranks: Vec::new(),
                hosts: Vec::new(),
                method: CulpritMethod::Unknown,
                rank_method: None,
                explanation: String::new(),
                evidence: Default::default(),
            },
            last_eval: (u64::MAX, u64::MAX),
            evidence_dirty: true,
            ticket: None,
            ticket_window_start: t,
            ticket_window_count: 0,
            recurrence: 1,
            restart_loop: false,
            blamed_host: None,
            credited: false,
            bad_node_score: None,
            revision: 0,
            significant: true,
            minor: false,
            open_key: (t, 0),
            kb_version: kb_version.to_string(),
            timeline: Timeline::default(),
        }
    }

    /// Moves an incident that has only seen matches without a time (time 0) to `t`.
    pub fn retime(&mut self, t: Millis) {
        if self.first_log_ms.is_none() {
            self.first_ms = t;
            self.last_ms = t;
            self.ticket_window_start = t;
        }
    }

    /// Node events no job claimed: job `node:<host>`.
    pub fn is_node_incident(&self) -> bool {
        self.job_id.starts_with("node:")
    }

    /// True when the initiator is a root-role match.
    pub fn root_known(&self) -> bool {
        self.election.initiator.info.role == Role::Root
    }

    /// Counts one match (any role) of rank `rank` on `host` at `t`.
    pub fn count(
        &mut self,
        event: &MatchEvent,
        rank: Option<u32>,
        host: Option<&Arc<str>>,
        t: Millis,
        log_ms: Option<Millis>,
        cfg: &IncidentConfig,
    ) {
        self.matches += 1;
        self.by_role[role_index(event.role)] += 1;
        bump(&mut self.by_code, &event.error_code);
        if event.role == Role::Cascade {
            self.cascade_matches += 1;
            bump(&mut self.cascade_by_code, &event.error_code);
        }
        self.timeline.observe(event, rank, host, log_ms, t);
        if self.ranks.observe(event, rank, host) {
            self.evidence_dirty = true;
        }
        if let Some(h) = host {
            if let Some(n) = self.hosts.get_mut(h) {
                *n += 1;
            } else if self.hosts.len() < self.max_hosts {
                self.hosts.insert(Arc::clone(h), 1);
            } else {
                self.host_untracked += 1;
            }
        }
        self.first_ms = self.first_ms.min(t);
        self.last_ms = self.last_ms.max(t);
        if let Some(l) = log_ms {
            self.first_log_ms = Some(self.first_log_ms.map_or(l, |f| f.min(l)));
            self.last_log_ms = Some(self.last_log_ms.map_or(l, |f| f.max(l)));
        }
        // Tumbling ticket window.
        if t.saturating_sub(self.ticket_window_start) > cfg.ticket_window_ms {
            self.ticket_window_start = t;
            self.ticket_window_count = 0;
        }
        self.ticket_window_count += 1;
        self.minor = true;
    }

    /// Widens the effective log time range.
    pub fn note_effective(&mut self, t: Option<Millis>) {
        if let Some(t) = t {
            self.first_effective_ms = Some(self.first_effective_ms.map_or(t, |f| f.min(t)));
            self.last_effective_ms = Some(self.last_effective_ms.map_or(t, |l| l.max(t)));
        }
    }

    /// Remembers a root-role match among the contributing roots, and a cascade's op and
    /// sequence number.
    pub fn note_root(&mut self, event: &MatchEvent) {
        if event.role == Role::Cascade {
            if let Some(op) = event.captures.get("op") {
                let seq = event
                    .captures
                    .get("seq")
                    .and_then(|s| s.trim().parse().ok());
                let key = (op.to_ascii_uppercase(), seq);
                if let Some(n) = self.cascade_op.get_mut(&key) {
                    *n += 1;
                } else if self.cascade_op.len() < MAX_CONTRIBUTING {
                    self.cascade_op.insert(key, 1);
                }
            }
            if let Some(ms) = event
                .captures
                .get("timeout_ms")
                .and_then(|s| s.trim().parse().ok())
            {
                self.cascade_timeout_ms = Some(ms);
            }
        }
        if event.role != Role::Root || self.roots.len() >= MAX_CONTRIBUTING {
            return;
        }
        let c = Contributor {
            kb_id: event.kb_id.clone(),
            error_code: event.error_code.clone(),
            rank: event.any_rank(),
            host: event.host.clone(),
            gpu: event.captures.get("gpu").cloned(),
            timestamp: event.timestamp.clone(),
            consequence: false,
        };
        let same = |o: &Contributor| {
            o.error_code == c.error_code && o.rank == c.rank && o.host == c.host && o.gpu == c.gpu
        };
        if !self.roots.iter().any(same) {
            self.roots.push(c);
        }
    }

    /// Offers a job's own initiating line as the anchor; true when the anchor moved (the
    /// fingerprint changes with it).
    pub fn note_anchor(&mut self, event: &MatchEvent, log_ms: Option<Millis>) -> bool {
        let candidate = (log_ms, event.line.clone());
        let key = |a: &(Option<Millis>, String)| (a.0.is_none(), a.0, a.1.clone());
        let better = self
            .anchor
            .as_ref()
            .is_none_or(|old| key(&candidate) < key(old));
        if better {
            self.anchor = Some(candidate);
        }
        better
    }

    /// The `fp1` signature: the job, the root's code, and its host and GPU when the root is
    /// known.
    pub fn signature(&self) -> String {
        fingerprint_of(&self.job_id, &self.election)
    }

    /// The cascade, with its most named op and one line for people.
    fn cascades(&self) -> Cascades {
        let top = self
            .cascade_op
            .iter()
            .max_by_key(|(k, n)| (**n, std::cmp::Reverse((*k).clone())))
            .map(|(k, _)| k.clone());
        let (op, seq) = match top {
            Some((op, seq)) => (Some(op), seq),
            None => (None, None),
        };
        let ranks = self.ranks.cascade_ranks;
        let summary = (self.cascade_matches > 0).then(|| {
            let who = if ranks > 0 {
                format!("{ranks} rank{}", if ranks == 1 { "" } else { "s" })
            } else {
                format!("{} match(es)", self.cascade_matches)
            };
            let timed_out = self.cascade_by_code.keys().any(|c| c.contains("TIMEOUT"));
            let mut line = format!("{who} {}", if timed_out { "timed out" } else { "followed" });
            if let Some(op) = &op {
                line.push_str(&format!(" in {op}"));
                if let Some(seq) = seq {
                    line.push_str(&format!(" SeqNum {seq}"));
                }
            }
            if let Some(ms) = self.cascade_timeout_ms.filter(|_| timed_out) {
                line.push_str(&format!(" after {} s", ms / 1000));
            }
            line
        });
        Cascades {
            matches: self.cascade_matches,
            ranks,
            by_error_code: self.cascade_by_code.clone(),
            op,
            seq,
            timeout_ms: self.cascade_timeout_ms,
            summary,
        }
    }

    /// The roots other than the elected one; those on a node-event root's host after it are
    /// marked consequences.
    fn contributing(&self) -> Vec<Contributor> {
        let root = &self.election.initiator;
        let node_root = root
            .standing
            .node
            .then_some(root.info.host.as_deref())
            .flatten();
        let on_root_host = |c: &Contributor| {
            let Some(h) = node_root else {
                return false;
            };
            c.host.as_deref() == Some(h)
                || c.rank.and_then(|r| self.ranks.host_of(r)).map(|x| &**x) == Some(h)
        };
        self.roots
            .iter()
            .filter(|c| {
                !(c.kb_id == root.info.kb_id
                    && c.rank == root.info.rank
                    && c.host == root.info.host)
            })
            .map(|c| Contributor {
                consequence: on_root_host(c),
                ..c.clone()
            })
            .collect()
    }

    /// One line for people: what broke, where, whom it killed, and the cascade.
    fn summary(&self) -> String {
        let r = &self.election.initiator.info;
        let mut s = r.error_code.clone();
        if !self.root_known() {
            s = format!("root unknown: {s}");
        }
        match (&r.host, r.rank) {
            (Some(h), Some(rank)) => s.push_str(&format!(" on {h} (rank {rank})")),
            (Some(h), None) => s.push_str(&format!(" on {h}")),
            (None, Some(rank)) => s.push_str(&format!(" on rank {rank}")),
            (None, None) => {}
        }
        if let Some(gpu) = &r.gpu {
            s.push_str(&format!(" (GPU {gpu})"));
        }
        if !self.job_id.starts_with("node:") {
            let verb = if self.root_known() { "killed" } else { "in" };
            s.push_str(&format!(" {verb} {}", self.job_id));
        }
        let consequences = self.contributing().iter().filter(|c| c.consequence).count();
        if consequences > 0 {
            s.push_str(&format!("; {consequences} consequence(s) on that host"));
        }
        if let Some(c) = self.cascades().summary {
            s.push_str(&format!("; {c}"));
        }
        s
    }

    /// Sets the fingerprint from the anchor without recording a change (a new incident).
    pub fn fresh_fingerprint(&mut self) {
        self.refingerprint();
        self.previous_fingerprint = None;
    }

    /// Recomputes the fingerprint from the anchor; true when it changed.
    pub fn refingerprint(&mut self) -> bool {
        let fp = match &self.anchor {
            Some((t, line)) => fingerprint::fp2(&self.job_id, *t, line),
            // A node incident: no job line, the root line is its anchor.
            None => {
                let root = &self.election.initiator;
                fingerprint::fp2(&self.job_id, root.standing.log_ms, &root.info.line)
            }
        };
        if fp == self.fingerprint {
            return false;
        }
        let old = std::mem::replace(&mut self.fingerprint, fp);
        // Several re-elections between two events: the oldest unreported key is the one
        // downstream knows.
        if self.previous_fingerprint.is_none() {
            self.previous_fingerprint = Some(old);
        }
        true
    }

    /// Fills the context from the root's stream block, or the root line alone.
    pub fn reset_context(&mut self, streams: &Streams) {
        self.context.clear();
        let root = &self.election.initiator;
        let info = &root.info;
        let key: StreamKey = (root.printed_by, info.host.as_deref().map(Arc::from));
        self.context_from_stream = false;
        if let Some(stream) = streams.get(&key).filter(|s| !s.block.is_empty()) {
            self.context.extend_from(&stream.block);
            self.context_from_stream = true;
        }
        if !self.context.contains(&info.line) {
            self.context.push(info.rank, &info.line);
        }
        self.context_key = Some(key);
    }

    /// When the root names no stream with a block, adopts the first culprit rank's block.
    fn adopt_culprit_context(&mut self, streams: &Streams) {
        if self.context_from_stream {
            return;
        }
        let Some(stream) = self
            .culprit
            .ranks
            .iter()
            .find_map(|r| streams.by_rank(*r))
            .filter(|s| !s.block.is_empty())
        else {
            return;
        };
        self.context.extend_from(&stream.block);
        self.context_key = Some(stream.key.clone());
        self.context_from_stream = true;
        self.minor = true;
    }

    /// Re-runs the culprit inference when worth it (see the module doc), or when `force`.
    pub fn evaluate(&mut self, streams: &Streams, force: bool) {
        if !self.evidence_dirty && !force {
            return;
        }
        let world = self
            .ranks
            .world_capture
            .or(self.ranks.highest.map(|h| h.saturating_add(1)))
            .map_or(0, u64::from);
        let silent = world.saturating_sub(self.ranks.reporters);
        let lagging = self.ranks.lagging_count();
        let small = |n: u64, before: u64| n != before && n <= LISTED as u64;
        let worth = force
            || self.significant
            || self.matches.is_power_of_two()
            || small(silent, self.last_eval.0)
            || small(lagging, self.last_eval.1);
        if !worth {
            return;
        }
        self.last_eval = (silent, lagging);
        self.evidence_dirty = false;
        if streams.root_cause.is_some() {
            self.elastic = streams.root_cause.clone();
        }
        let elastic = self.elastic.as_ref().map(|(r, h)| (*r, h.as_deref()));
        let culprit = self
            .ranks
            .infer(&self.election.initiator.info, self.root_known(), elastic);
        let same = culprit.ranks == self.culprit.ranks
            && culprit.hosts == self.culprit.hosts
            && culprit.method == self.culprit.method
            && culprit.rank_method == self.culprit.rank_method;
        if !same {
            self.significant = true;
        }
        self.culprit = culprit;
        self.adopt_culprit_context(streams);
    }

    /// Raises the ticket when the policy says so; true when it was raised now.
    pub fn check_ticket(&mut self, cfg: &IncidentConfig) -> bool {
        if self.ticket.is_some() || (self.is_node_incident() && !cfg.node_tickets) {
            return false;
        }
        let reason = if self.root_known() {
            Some(TicketReason::Root)
        } else if self.ticket_window_count >= cfg.ticket_min_matches {
            Some(TicketReason::Threshold)
        } else {
            None
        };
        if reason.is_some() {
            self.ticket = reason;
            self.significant = true;
            return true;
        }
        false
    }

    /// The host this incident blames: the root's, or the single culprit host.
    pub fn blame(&self) -> Option<Arc<str>> {
        if self.root_known() {
            if let Some(h) = &self.election.initiator.info.host {
                return Some(Arc::from(h.as_str()));
            }
        }
        match self.culprit.hosts.as_slice() {
            [one] => Some(Arc::from(one.as_str())),
            _ => None,
        }
    }

    /// Whether pending changes should be emitted now.
    pub fn due(&self) -> bool {
        self.significant || (self.minor && self.matches.is_power_of_two())
    }

    /// The JSON object of this incident's current state; counts a revision and clears the
    /// pending changes.
    pub fn snapshot(
        &mut self,
        status: Status,
        resolution: Option<Resolution>,
        cfg: &IncidentConfig,
    ) -> IncidentEvent {
        self.revision += 1;
        self.significant = false;
        self.minor = false;
        let previous = self.previous_fingerprint.take();
        let mut event = self.view(status, resolution, cfg);
        event.previous_fingerprint = previous;
        event
    }

    /// The JSON object of this incident's current state, without counting a revision.
    pub fn view(
        &self,
        status: Status,
        resolution: Option<Resolution>,
        cfg: &IncidentConfig,
    ) -> IncidentEvent {
        let root = &self.election.initiator;
        let mut by_role = BTreeMap::new();
        for role in Role::ALL {
            by_role.insert(role.as_str(), self.by_role[role_index(*role)]);
        }
        let by_rank: BTreeMap<u32, u64> = self
            .ranks
            .iter()
            .filter(|(_, s)| s.matches > 0)
            .map(|(r, s)| (*r, s.matches))
            .collect();
        let by_host: BTreeMap<String, u64> = self
            .hosts
            .iter()
            .map(|(h, n)| (h.to_string(), *n))
            .collect();
        let mut job_hosts: std::collections::BTreeSet<&str> = self
            .ranks
            .iter()
            .filter_map(|(_, s)| s.host.as_deref())
            .collect();
        job_hosts.extend(self.hosts.keys().map(|h| &**h));
        IncidentEvent {
            kind: "incident",
            schema_version: SCHEMA_VERSION,
            status,
            resolution,
            id: self.id.clone(),
            fingerprint: self.fingerprint.clone(),
            fingerprint_version: fingerprint::VERSION,
            previous_fingerprint: self.previous_fingerprint.clone(),
            revision: self.revision,
            job_id: self.job_id.to_string(),
            root_known: self.root_known(),
            root: root.info.clone(),
            culprit: self.culprit.clone(),
            grouping_info: self.election.grouping_info(cfg.window_ms),
            counts: Counts {
                matches: self.matches,
                by_role,
                by_error_code: self.by_code.clone(),
                ranks: by_rank.len() as u64,
                by_rank,
                hosts: by_host.len() as u64,
                by_host,
                untracked: self.ranks.untracked + self.host_untracked,
            },
            cascades: self.cascades(),
            signature: self.signature(),
            summary: self.summary(),
            contributing: self.contributing(),
            first_seen: self.first_log_ms.map(format_ms),
            last_seen: self.last_log_ms.map(format_ms),
            context: self.context.info(),
            unrecognised: Vec::new(),
            diagnosis: Arc::clone(&root.diagnosis),
            restart_loop: self.restart_loop,
            recurrence: self.recurrence,
            blamed_host: self.blamed_host.as_deref().map(str::to_string),
            bad_node_score: self.bad_node_score,
            ticket: Ticket {
                raised: self.ticket.is_some(),
                reason: self.ticket,
            },
            kb_version: self.kb_version.clone(),
            serial: self.serial,
            timeline: Arc::new(self.timeline.view()),
            replaces: None,
            job_hosts: job_hosts
                .into_iter()
                .take(self.max_hosts)
                .map(str::to_string)
                .collect(),
            effective_from: self.first_effective_ms,
        }
    }
}

fn bump(map: &mut BTreeMap<String, u64>, key: &str) {
    if let Some(n) = map.get_mut(key) {
        *n += 1;
    } else {
        map.insert(key.to_string(), 1);
    }
}

/// The `fp1` of an election: the root's host and GPU when the root is known, else neither.
pub fn fingerprint_of(job_id: &str, election: &Election) -> String {
    let info = &election.initiator.info;
    let known = info.role == Role::Root;
    fingerprint::fp1(&FingerprintInput {
        job_id,
        error_code: &info.error_code,
        host: info.host.as_deref().filter(|_| known),
        gpu: info.gpu.as_deref().filter(|_| known),
    })
}
