//! Which rank broke the collective: per-rank NCCL evidence of one incident, and the inference.
//!
//! When one rank of a data-parallel job dies or hangs, every other rank's NCCL watchdog times
//! out on the collective it was waiting for, so the cascade is loud and the culprit is quiet.
//! The evidence, strongest first:
//!
//! 1. the root match itself, when it names a rank (a CUDA OOM on `[rank3]`) or a host (an Xid
//!    from the kernel log of `node-05`);
//! 3. progress: each watchdog line carries the collective's `SeqNum` (`seq`), and PyTorch 2.x
//!    also prints `last enqueued`/`last completed` NCCL work. A minority of ranks below the
//!    maximum of either counter are the suspects: behind on *enqueued* work, a rank never
//!    issued the collective the others wait on (it hangs or died in Python); behind on
//!    *completed* work, its GPU never finished an earlier one;
//! 4. silence: ranks of the job that never reported a timeout or collective error, when most
//!    did and the world size is known (a `world_size`/`nranks` capture) or inferable (highest
//!    rank seen + 1);
//! 5. torchrun's summary row under "Root Cause (first observed failure)", unless that rank
//!    reported a timeout itself: torchrun's "first" failure is the first process to exit, which
//!    in a hang is a watchdog victim (see `tests/fixtures/captured/torchrun_nccl_watchdog_timeout.log`);
//! 6. "NCCL communicator was aborted on rank N" printed by a *different* rank. PyTorch prints
//!    its own rank there (`NCCLComm::getNcclComm`), so normally the capture just identifies the
//!    reporter; only a mismatch names a peer.
//!
//! Sequence numbers count per process group; ranks of different groups are compared as if
//! they shared one (the lines do not say which group), which is right for the default group
//! and a known limit otherwise.
//!
//! State is bounded: at most `max_ranks_per_incident` ranks are itemised; matches of further
//! ranks are only counted. Aggregates (reporters, progress maximum, laggards) are kept
//! incrementally so that the inference, which walks the table, runs only when the correlator
//! decides to look (see `lifecycle`).

use std::collections::HashMap;
use std::sync::Arc;

use super::{Culprit, CulpritMethod, Evidence, RootInfo};
use crate::enrich::MatchEvent;
use crate::kb::Role;

/// How many ranks an evidence list names.
pub const LISTED: usize = 16;

/// One rank in one incident.
#[derive(Debug, Clone, Default)]
pub struct RankState {
    /// Matches of this rank in the incident.
    pub matches: u64,
    /// Of them, matches of cascade entries.
    pub cascades: u64,
    /// The host of its first match that named one.
    pub host: Option<Arc<str>>,
    /// Printed a collective timeout or collective error: alive and waiting on a peer.
    pub reporter: bool,
    /// Highest NCCL work reported enqueued (`last_enqueued`, or the timed-out `seq`).
    pub enqueued: Option<i64>,
    /// Highest NCCL work reported completed (`last_completed`, else `seq - 1`).
    pub completed: Option<i64>,
}

/// The maximum of one per-rank counter and how many ranks sit at it, kept incrementally.
#[derive(Debug, Clone, Copy, Default)]
struct MaxTracker {
    max: Option<i64>,
    at_max: u64,
    with: u64,
}

impl MaxTracker {
    /// A rank's value rose from `old` to `new`.
    fn raise(&mut self, old: Option<i64>, new: i64) {
        match old {
            Some(o) if Some(o) == self.max => self.at_max -= 1,
            Some(_) => {}
            None => self.with += 1,
        }
        match self.max {
            Some(m) if new < m => {}
            Some(m) if new == m => self.at_max += 1,
            _ => {
                self.max = Some(new);
                self.at_max = 1;
            }
        }
    }

    fn lagging(&self) -> u64 {
        self.with - self.at_max
    }

    /// Laggards name suspects only as a minority of at least two ranks with the counter.
    fn conclusive(&self) -> bool {
        let lagging = self.lagging();
        lagging > 0 && self.with >= 2 && lagging * 2 <= self.with
    }
}

/// The ranks of one incident.
#[derive(Debug, Clone)]
pub struct RankTable {
    ranks: HashMap<u32, RankState>,
    cap: usize,
    /// Matches of ranks beyond the cap.
    pub untracked: u64,
    /// Highest rank seen, itemised or not; plus one, the world size when no capture gives it.
    pub highest: Option<u32>,
    /// Largest `world_size` or `nranks` capture seen.
    pub world_capture: Option<u32>,
    /// Ranks that reported a collective timeout or error ([`RankState::reporter`]).
    pub reporters: u64,
    /// Ranks with at least one cascade match.
    pub cascade_ranks: u64,
    enqueued: MaxTracker,
    completed: MaxTracker,
    named_by_peers: Vec<u32>,
}

/// Whether a match says "I was waiting on a peer": a non-root collective timeout or error.
pub fn is_reporter(event: &MatchEvent) -> bool {
    event.role != Role::Root
        && (event.category.starts_with("collective_") || event.category.starts_with("network_"))
}

fn capture_u32(event: &MatchEvent, name: &str) -> Option<u32> {
    event.captures.get(name).and_then(|v| v.trim().parse().ok())
}

fn capture_i64(event: &MatchEvent, name: &str) -> Option<i64> {
    event.captures.get(name).and_then(|v| v.trim().parse().ok())
}

impl RankTable {
    /// An empty table itemising at most `cap` ranks.
    pub fn new(cap: usize) -> Self {
        RankTable {
            ranks: HashMap::new(),
            cap,
            untracked: 0,
            highest: None,
            world_capture: None,
            reporters: 0,
            cascade_ranks: 0,
            enqueued: MaxTracker::default(),
            completed: MaxTracker::default(),
            named_by_peers: Vec::new(),
        }
    }

    /// Ranks itemised.
    pub fn len(&self) -> usize {
        self.ranks.len()
    }

    /// True when no rank is itemised.
    pub fn is_empty(&self) -> bool {
        self.ranks.is_empty()
    }

    /// The itemised ranks, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&u32, &RankState)> {
        self.ranks.iter()
    }

    /// The state of `rank`, if itemised.
    pub fn get(&self, rank: u32) -> Option<&RankState> {
        self.ranks.get(&rank)
    }

    /// Ranks below the maximum of either progress counter (a rank may count twice).
    pub fn lagging_count(&self) -> u64 {
        self.enqueued.lagging() + self.completed.lagging()
    }

    /// Records one match of `rank` (the event's rank, [`MatchEvent::any_rank`]). Returns
    /// whether culprit-relevant evidence changed.
    pub fn observe(
        &mut self,
        event: &MatchEvent,
        rank: Option<u32>,
        host: Option<&Arc<str>>,
    ) -> bool {
        let mut changed = false;
        for name in ["world_size", "nranks"] {
            if let Some(w) = capture_u32(event, name).filter(|w| *w > 0) {
                if self.world_capture.is_none_or(|old| w > old) {
                    self.world_capture = Some(w);
                    changed = true;
                }
            }
        }
        let reporter = is_reporter(event);
        if reporter {
            // A peer named by a rank that is not itself.
            if let (Some(printed_by), Some(named)) = (event.rank, capture_u32(event, "rank")) {
                if printed_by != named
                    && self.named_by_peers.len() < LISTED
                    && !self.named_by_peers.contains(&named)
                {
                    self.named_by_peers.push(named);
                    changed = true;
                }
            }
        }
        let Some(rank) = rank else {
            return changed;
        };
        if self.highest.is_none_or(|h| rank > h) {
            self.highest = Some(rank);
            changed = true;
        }
        if !self.ranks.contains_key(&rank) && self.ranks.len() >= self.cap {
            self.untracked += 1;
            return changed;
        }
        let state = self.ranks.entry(rank).or_default();
        state.matches += 1;
        if state.host.is_none() {
            state.host = host.cloned();
        }
        if event.role == Role::Cascade {
            state.cascades += 1;
            if state.cascades == 1 {
                self.cascade_ranks += 1;
            }
        }
        if reporter && !state.reporter {
            state.reporter = true;
            self.reporters += 1;
            changed = true;
        }
        // Progress. Completed work is ignored when above enqueued work (some 2.3 builds print
        // garbage there); a timeout's SeqNum was enqueued and everything before it completed.
        let seq = reporter.then(|| capture_i64(event, "seq")).flatten();
        let enqueued = match (capture_i64(event, "last_enqueued"), seq) {
            (Some(e), Some(s)) => Some(e.max(s)),
            (e, s) => e.or(s),
        };
        let completed = capture_i64(event, "last_completed")
            .filter(|c| enqueued.is_none_or(|e| *c <= e))
            .or_else(|| seq.map(|s| s - 1));
        if let Some(e) = enqueued {
            let old = state.enqueued;
            if old.is_none_or(|o| e > o) {
                state.enqueued = Some(e);
                self.enqueued.raise(old, e);
                changed = true;
            }
        }
        if let Some(c) = completed {
            let old = state.completed;
            if old.is_none_or(|o| c > o) {
                state.completed = Some(c);
                self.completed.raise(old, c);
                changed = true;
            }
        }
        changed
    }

    /// The host rank `rank` ran on, as far as the incident's lines said.
    pub fn host_of(&self, rank: u32) -> Option<&Arc<str>> {
        self.ranks.get(&rank).and_then(|s| s.host.as_ref())
    }

    /// Records that `rank` ran on `host` (a launcher's task map, an envelope), without counting
    /// a match; true when it was new.
    pub fn place(&mut self, rank: u32, host: &Arc<str>) -> bool {
        if !self.ranks.contains_key(&rank) && self.ranks.len() >= self.cap {
            return false;
        }
        let state = self.ranks.entry(rank).or_default();
        if state.host.is_none() {
            state.host = Some(Arc::clone(host));
            return true;
        }
        false
    }

    /// The NCCL evidence, with bounded lists.
    pub fn evidence(&self, elastic_rank: Option<u32>) -> Evidence {
        let (world_size, world_size_source) = match (self.world_capture, self.highest) {
            (Some(w), _) => (Some(w), Some("capture")),
            (None, Some(h)) => (Some(h.saturating_add(1)), Some("highest_rank")),
            (None, None) => (None, None),
        };
        let mut ev = Evidence {
            world_size,
            world_size_source,
            reporting_ranks: self.reporters,
            max_enqueued: self.enqueued.max,
            max_completed: self.completed.max,
            named_by_peers: self.named_by_peers.clone(),
            torchelastic_root_cause: elastic_rank,
            ..Evidence::default()
        };
        if let Some(world) = world_size {
            let reporters_inside = self
                .ranks
                .iter()
                .filter(|(r, s)| s.reporter && **r < world)
                .count() as u64;
            let missing = u64::from(world).saturating_sub(reporters_inside);
            // Silence means something only when most ranks spoke.
            if self.reporters > 0 && reporters_inside * 2 >= u64::from(world) && missing > 0 {
                ev.missing_count = missing;
                ev.missing_ranks = (0..world)
                    .filter(|r| !self.ranks.get(r).is_some_and(|s| s.reporter))
                    .take(LISTED)
                    .collect();
            }
        }
        let mut lagging: Vec<u32> = Vec::new();
        for (tracker, value) in [
            (
                &self.enqueued,
                (|s: &RankState| s.enqueued) as fn(&RankState) -> Option<i64>,
            ),
            (&self.completed, |s: &RankState| s.completed),
        ] {
            if let (true, Some(max)) = (tracker.conclusive(), tracker.max) {
                lagging.extend(
                    self.ranks
                        .iter()
                        .filter(|(_, s)| value(s).is_some_and(|v| v < max))
                        .map(|(r, _)| *r),
                );
            }
        }
        lagging.sort_unstable();
        lagging.dedup();
        lagging.truncate(LISTED);
        ev.lagging_ranks = lagging;
        ev
    }

    /// The culprit given the elected root and the evidence.
    pub fn infer(
        &self,
        root: &RootInfo,
        root_known: bool,
        elastic: Option<(u32, Option<&str>)>,
    ) -> Culprit {
        let evidence = self.evidence(elastic.map(|(r, _)| r));
        // Ranks from NCCL and launcher evidence, strongest first.
        let elastic_rank = elastic
            .map(|(r, _)| r)
            .filter(|r| !self.ranks.get(r).is_some_and(|s| s.reporter));
        let from_evidence: Option<(CulpritMethod, Vec<u32>)> = if !evidence.lagging_ranks.is_empty()
        {
            Some((CulpritMethod::SequenceLag, evidence.lagging_ranks.clone()))
        } else if evidence.missing_count > 0 && evidence.missing_count <= LISTED as u64 {
            Some((CulpritMethod::MissingRanks, evidence.missing_ranks.clone()))
        } else if let Some(rank) = elastic_rank {
            Some((CulpritMethod::TorchelasticRootCause, vec![rank]))
        } else if !evidence.named_by_peers.is_empty() {
            Some((
                CulpritMethod::AbortedOnRank,
                evidence.named_by_peers.clone(),
            ))
        } else {
            None
        };
        let hosts_of = |ranks: &[u32], extra: Option<&str>| -> Vec<String> {
            let mut hosts: Vec<String> = extra.map(str::to_string).into_iter().collect();
            for r in ranks {
                let known = self.host_of(*r).map(|h| h.to_string()).or_else(|| {
                    elastic
                        .filter(|(er, _)| er == r)
                        .and_then(|(_, h)| h.map(str::to_string))
                });
                if let Some(h) = known {
                    if !hosts.contains(&h) {
                        hosts.push(h);
                    }
                }
            }
            hosts
        };
        let ranks_text = |ranks: &[u32]| {
            ranks
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        };
        if root_known {
            if let Some(rank) = root.rank {
                let hosts = hosts_of(&[rank], root.host.as_deref());
                return Culprit {
                    explanation: format!(
                        "the root match {} was printed by rank {rank}{}",
                        root.error_code,
                        on_hosts(&hosts)
                    ),
                    ranks: vec![rank],
                    hosts,
                    method: CulpritMethod::RootEvent,
                    rank_method: None,
                    evidence,
                };
            }
            if let Some(host) = root.host.as_deref() {
                let (rank_method, ranks) = match from_evidence {
                    Some((m, r)) => (Some(m), r),
                    None => (None, Vec::new()),
                };
                let hosts = hosts_of(&ranks, Some(host));
                let explanation = match rank_method {
                    Some(m) => format!(
                        "the root match {} came from host {host}; rank(s) {} by {}",
                        root.error_code,
                        ranks_text(&ranks),
                        method_words(m)
                    ),
                    None => format!(
                        "the root match {} came from host {host}; no rank evidence names which of its ranks",
                        root.error_code
                    ),
                };
                return Culprit {
                    ranks,
                    hosts,
                    method: CulpritMethod::RootHost,
                    rank_method,
                    explanation,
                    evidence,
                };
            }
        }
        match from_evidence {
            Some((method, ranks)) => {
                let hosts = hosts_of(&ranks, None);
                Culprit {
                    explanation: format!(
                        "rank(s) {}{} by {}",
                        ranks_text(&ranks),
                        on_hosts(&hosts),
                        method_words(method)
                    ),
                    ranks,
                    hosts,
                    method,
                    rank_method: None,
                    evidence,
                }
            }
            None => Culprit {
                ranks: Vec::new(),
                hosts: Vec::new(),
                method: CulpritMethod::Unknown,
                rank_method: None,
                explanation: "could not tell: no root match names a rank or host, and the NCCL \
                              progress and silence of the ranks do not single one out"
                    .to_string(),
                evidence,
            },
        }
    }
}

fn on_hosts(hosts: &[String]) -> String {
    if hosts.is_empty() {
        String::new()
    } else {
        format!(" on {}", hosts.join(", "))
    }
}

fn method_words(method: CulpritMethod) -> &'static str {
    match method {
        CulpritMethod::RootEvent => "the root match",
        CulpritMethod::RootHost => "the root match's host",
        CulpritMethod::TorchelasticRootCause => "torchrun's Root Cause row",
        CulpritMethod::SequenceLag => {
            "NCCL progress: enqueued or completed work lags the other ranks"
        }
        CulpritMethod::MissingRanks => {
            "silence: never reported the collective timeout the others did"
        }
        CulpritMethod::AbortedOnRank => "a peer's 'communicator was aborted on rank N'",
        CulpritMethod::Unknown => "nothing",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::incident::testutil::event;

    fn timeout(rank: u32, seq: u64) -> MatchEvent {
        event("NCCL_TIMEOUT", Role::Cascade, "collective_timeout")
            .rank(rank)
            .cap("seq", &seq.to_string())
            .build()
    }

    fn root_unknown() -> RootInfo {
        let e = timeout(0, 1);
        super::super::elect::Candidate::of(&e, super::super::elect::Standing::of(&e, None, 0)).info
    }

    #[test]
    fn the_rank_behind_on_seq_is_the_suspect() {
        let mut t = RankTable::new(64);
        for r in 0..8 {
            let e = timeout(r, if r == 5 { 97 } else { 100 });
            t.observe(&e, Some(r), None);
        }
        let c = t.infer(&root_unknown(), false, None);
        assert_eq!(c.method, CulpritMethod::SequenceLag);
        assert_eq!(c.ranks, vec![5]);
        assert_eq!(
            t.lagging_count(),
            2,
            "behind on enqueued and on completed work"
        );
    }

    /// The real torchrun capture: rank 0 times out on SeqNum 2 (enqueued 2, completed 1),
    /// rank 1 reports "Last enqueued NCCL work: 1, last completed NCCL work: 1": rank 1 never
    /// issued the collective.
    #[test]
    fn the_rank_that_never_enqueued_the_collective_is_the_suspect() {
        let mut t = RankTable::new(8);
        let status = |rank: u32, enq: &str, comp: &str| {
            event(
                "NCCL_WATCHDOG_TEARDOWN",
                Role::Symptom,
                "collective_timeout",
            )
            .rank(rank)
            .cap("last_enqueued", enq)
            .cap("last_completed", comp)
            .build()
        };
        t.observe(&timeout(0, 2), Some(0), None);
        t.observe(&status(0, "2", "1"), Some(0), None);
        t.observe(&status(1, "1", "1"), Some(1), None);
        let c = t.infer(&root_unknown(), false, Some((0, None)));
        assert_eq!(c.method, CulpritMethod::SequenceLag);
        assert_eq!(c.ranks, vec![1]);
        // torchrun's root cause (rank 0) timed out itself: a victim, not evidence.
        let mut t = RankTable::new(8);
        t.observe(&timeout(0, 2), Some(0), None);
        let c = t.infer(&root_unknown(), false, Some((0, None)));
        assert_ne!(c.method, CulpritMethod::TorchelasticRootCause);
    }

    #[test]
    fn garbage_last_completed_is_ignored() {
        let mut t = RankTable::new(8);
        let e = event(
            "NCCL_WATCHDOG_TEARDOWN",
            Role::Symptom,
            "collective_timeout",
        )
        .rank(2)
        .cap("seq", "1")
        .cap("last_enqueued", "1")
        .cap("last_completed", "76280750235782912")
        .build();
        t.observe(&e, Some(2), None);
        let ev = t.evidence(None);
        assert_eq!(ev.max_enqueued, Some(1));
        assert_eq!(ev.max_completed, Some(0), "garbage ignored, seq - 1 used");
    }

    #[test]
    fn silence_names_the_missing_rank_once_most_reported() {
        let mut t = RankTable::new(64);
        for r in (0..8).filter(|r| *r != 3) {
            t.observe(&timeout(r, 10), Some(r), None);
        }
        let c = t.infer(&root_unknown(), false, None);
        assert_eq!(c.method, CulpritMethod::MissingRanks);
        assert_eq!(c.ranks, vec![3]);
        // With only two of eight reporting, silence says nothing.
        let mut t = RankTable::new(64);
        t.world_capture = Some(8);
        t.observe(&timeout(0, 10), Some(0), None);
        t.observe(&timeout(1, 10), Some(1), None);
        assert_eq!(
            t.infer(&root_unknown(), false, None).method,
            CulpritMethod::Unknown
        );
    }

    #[test]
    fn aborted_on_another_rank_names_a_peer() {
        let mut t = RankTable::new(8);
        let e = event("NCCL_COMM_ABORTED", Role::Cascade, "collective_error")
            .rank(0)
            .cap("rank", "2")
            .build();
        t.observe(&e, Some(0), None);
        let c = t.infer(&root_unknown(), false, None);
        assert_eq!(c.method, CulpritMethod::AbortedOnRank);
        assert_eq!(c.ranks, vec![2]);
        // Its own rank is not evidence.
        let mut t = RankTable::new(8);
        let e = event("NCCL_COMM_ABORTED", Role::Cascade, "collective_error")
            .rank(2)
            .cap("rank", "2")
            .build();
        t.observe(&e, Some(2), None);
        assert!(t.evidence(None).named_by_peers.is_empty());
    }

    #[test]
    fn ranks_beyond_the_cap_are_counted_not_kept() {
        let mut t = RankTable::new(2);
        for r in 0..5 {
            t.observe(&timeout(r, 1), Some(r), None);
        }
        assert_eq!(t.len(), 2);
        assert_eq!(t.untracked, 3);
        assert_eq!(t.highest, Some(4));
    }
}
