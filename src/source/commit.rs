//! When the Kafka source commits: as soon as a partition's first watermark of an assignment is
//! stored, then every [`COMMIT_RECORDS`] acknowledged records but not more often than every
//! [`MIN_INTERVAL`], and at the latest `kafka.commit_interval_ms` after the last commit while
//! anything is left uncommitted. Revokes and shutdowns commit synchronously on their own
//! ([`super::kafka`]).
//!
//! Why: a timer alone means that a member which dies before its first tick commits nothing, and
//! the next one reads everything again; a crash loop (a bad node, an OOM-killed pod, a record
//! that kills the process) then makes no progress and floods the outputs with repeats. Committing
//! at once after an assignment makes every member move the group forward; counting records makes
//! the interval follow the rate of acknowledgements: the effective interval is
//! `COMMIT_RECORDS / rate`, clamped to `[MIN_INTERVAL, kafka.commit_interval_ms]`. So a crash
//! repeats at most about `max(COMMIT_RECORDS, rate × MIN_INTERVAL)` records (plus those in
//! flight), while the broker gets at most one commit request per member every `MIN_INTERVAL`,
//! and none at all while nothing is acknowledged.
//!
//! Pure bookkeeping (the caller passes the clock), so that the rule is tested without a broker.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::offsets::TopicPartition;

/// The shortest interval between two commits of one member: the floor that keeps a fast
/// consumer from flooding the group coordinator (Kafka Streams commits every 100 ms under
/// exactly-once).
pub const MIN_INTERVAL: Duration = Duration::from_millis(100);

/// Acknowledged records that make a commit due (once [`MIN_INTERVAL`] has passed).
pub const COMMIT_RECORDS: u64 = 50;

/// The most partitions remembered; past it the oldest assignment's marks are dropped, which
/// only makes their next store count as a first one (an early commit).
const MAX_PARTITIONS: usize = 65_536;

/// Decides when the stored offsets are committed.
#[derive(Debug)]
pub struct CommitPolicy {
    /// The longest interval between commits while something is uncommitted
    /// (`kafka.commit_interval_ms`).
    max_interval: Duration,
    /// The last offset stored for each partition of the current assignments.
    marks: HashMap<TopicPartition, i64>,
    /// Records stored since the last commit (offset deltas: compaction gaps count too).
    pending: u64,
    /// A partition's first offset of its assignment was stored and not committed yet.
    first: bool,
    /// Something was stored since the last commit.
    dirty: bool,
    /// When the last commit was requested.
    last: Option<Instant>,
}

impl CommitPolicy {
    /// A policy that commits at the latest every `max_interval` while records are acknowledged.
    pub fn new(max_interval: Duration) -> Self {
        CommitPolicy {
            max_interval,
            marks: HashMap::new(),
            pending: 0,
            first: false,
            dirty: false,
            last: None,
        }
    }

    /// Offsets just stored (each partition's next offset to commit).
    pub fn stored(&mut self, moved: &[(TopicPartition, i64)]) {
        for (tp, next) in moved {
            if self.marks.len() >= MAX_PARTITIONS && !self.marks.contains_key(tp) {
                self.marks.clear();
            }
            match self.marks.insert(tp.clone(), *next) {
                Some(before) => self.pending += next.saturating_sub(before).max(0) as u64,
                None => self.first = true,
            }
            self.dirty = true;
        }
    }

    /// Whether to commit now.
    pub fn due(&self, now: Instant) -> bool {
        if !self.dirty {
            return false;
        }
        if self.first {
            return true;
        }
        let Some(last) = self.last else {
            return true;
        };
        let since = now.saturating_duration_since(last);
        since >= self.max_interval || (since >= MIN_INTERVAL && self.pending >= COMMIT_RECORDS)
    }

    /// A commit of everything stored was requested at `now`.
    pub fn committed(&mut self, now: Instant) {
        self.pending = 0;
        self.first = false;
        self.dirty = false;
        self.last = Some(now);
    }

    /// The partitions left (revoked or lost): their next assignment starts afresh.
    pub fn revoked(&mut self, tps: &[TopicPartition]) {
        for tp in tps {
            self.marks.remove(tp);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn tp(p: i32) -> TopicPartition {
        TopicPartition {
            topic: Arc::from("logs"),
            partition: p,
        }
    }

    #[test]
    fn the_first_watermark_of_an_assignment_is_committed_at_once() {
        let t0 = Instant::now();
        let mut c = CommitPolicy::new(Duration::from_secs(5));
        assert!(!c.due(t0), "nothing stored");
        c.stored(&[(tp(0), 3)]);
        assert!(c.due(t0));
        c.committed(t0);
        c.stored(&[(tp(0), 4)]);
        assert!(!c.due(t0 + MIN_INTERVAL), "one more record waits");
        // A partition assigned later commits its first watermark at once too.
        c.stored(&[(tp(1), 10)]);
        assert!(c.due(t0 + Duration::from_millis(1)));
        c.committed(t0 + Duration::from_millis(1));
        // A revoked and reassigned partition is new again.
        c.revoked(&[tp(0)]);
        c.stored(&[(tp(0), 9)]);
        assert!(c.due(t0 + Duration::from_millis(2)));
    }

    #[test]
    fn the_interval_follows_the_rate_of_acknowledgements() {
        let t0 = Instant::now();
        let mut c = CommitPolicy::new(Duration::from_secs(5));
        c.stored(&[(tp(0), 0)]);
        c.committed(t0);
        // Fast: COMMIT_RECORDS records within a few milliseconds wait for the floor.
        c.stored(&[(tp(0), COMMIT_RECORDS as i64)]);
        assert!(!c.due(t0 + MIN_INTERVAL - Duration::from_millis(1)));
        assert!(c.due(t0 + MIN_INTERVAL));
        c.committed(t0 + MIN_INTERVAL);
        // Slow: a few records commit only at the longest interval.
        let t1 = t0 + MIN_INTERVAL;
        c.stored(&[(tp(0), COMMIT_RECORDS as i64 + 5)]);
        assert!(!c.due(t1 + Duration::from_secs(4)));
        assert!(c.due(t1 + Duration::from_secs(5)));
        c.committed(t1 + Duration::from_secs(5));
        // Records of several partitions add up.
        let t2 = t1 + Duration::from_secs(5);
        let half = (COMMIT_RECORDS / 2) as i64;
        c.stored(&[(tp(1), 0)]);
        c.committed(t2);
        c.stored(&[(tp(0), COMMIT_RECORDS as i64 + 5 + half), (tp(1), half)]);
        assert!(c.due(t2 + MIN_INTERVAL));
        // Idle: nothing stored, nothing due, however long.
        c.committed(t2 + MIN_INTERVAL);
        assert!(!c.due(t2 + Duration::from_secs(3600)));
    }
}
