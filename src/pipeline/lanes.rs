//! The low watermark of the correlator's input partitions ("lanes"): how far in log time every
//! input partition that still sends matches has been read.
//!
//! The correlator's clock is the latest log time it has seen. Lines of one failure travel
//! different input partitions (a job's partition and its node's, keyed by host), and a member
//! reads one partition ahead of another by hours of log time when a backlog is replayed. On the
//! latest time alone, a job's failure would close before the Xid that caused it arrived from the
//! lagging partition, and that Xid would become a node incident before the job's lines arrived.
//! Expiry therefore waits for the slowest lane: the earliest of the lanes' latest log times
//! ([`crate::incident::correlate::Correlator::hold_expiry`]). A lane that sent nothing for
//! [`LANE_IDLE`] of wall time no longer holds it (a healthy host's partition may send no match
//! for days).
//!
//! A lane is heard from by its matches and by its match member's progress notes
//! ([`crate::pipeline::progress`]): the log time of the last line the member read from that
//! partition, sent while it reads whether or not the lines match. A node partition read days
//! of log time behind the others sends no match while its lines are healthy; its notes keep it
//! holding expiry until it has caught up.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::enrich::MatchEvent;
use crate::incident::lru::LruOrder;
use crate::record::Provenance;
use crate::time::Millis;

/// Wall time after which a lane that sent no match stops holding expiry back.
pub const LANE_IDLE: Duration = Duration::from_secs(2);

/// Wall time a lane that its match member reported behind keeps holding expiry without another
/// note: long enough for a consumer group to hand its partitions to another member (a
/// rebalance takes seconds, during which no member reads them); a member that died for good
/// holds nothing after it.
pub const BEHIND_IDLE: Duration = Duration::from_secs(30);

/// Wall time a partition no member has told of yet holds expiry after a member first says it
/// is not its own ([`Lanes::unassigned`]): longer than librdkafka's default
/// `session.timeout.ms` (45 s), after which a member that joined the group but does not read
/// the partitions it was given loses them to one that does, which then tells of them.
pub const UNASSIGNED_HOLD: Duration = Duration::from_secs(60);

/// The time of a lane behind whose position is not known yet: it holds expiry back entirely
/// until its match member reports where it is.
pub const UNKNOWN: Millis = 0;

/// Lanes remembered at most; past it the one idle longest is forgotten.
pub const MAX_LANES: usize = 4_096;

/// Each input partition's latest log time and when it last sent a match, by topic and
/// partition (looked up without allocating), least recently heard first in `order`.
#[derive(Debug, Default)]
pub struct Lanes {
    latest: HashMap<String, HashMap<i32, Lane>>,
    order: LruOrder<(String, i32)>,
}

/// A lane's latest log time, when it last sent a match, and its tick in [`Lanes::order`].
#[derive(Debug)]
struct Lane {
    t: Millis,
    /// Until when it holds expiry without being heard from again.
    until: Instant,
    tick: u64,
}

impl Lanes {
    /// Notes `event` (read from an input partition, at log time `t`) arriving at `at`.
    pub fn note(&mut self, event: &MatchEvent, t: Option<Millis>, at: Instant) {
        if let (
            Provenance::Kafka {
                topic, partition, ..
            },
            Some(t),
        ) = (&event.source, t)
        {
            self.heard(topic, *partition, t, at + LANE_IDLE);
        }
    }

    /// A match member's progress note: input partition `partition` of `topic` was read up to
    /// log time `t`, as of `at`. A partition `behind` (records not yet read) holds expiry for
    /// [`BEHIND_IDLE`]; one read to its end only moves its time on and holds no longer than
    /// [`LANE_IDLE`] (it holds expiry while its matches come, as before: a current host whose
    /// clock is off holds nothing back for long).
    pub fn progress(&mut self, topic: &str, partition: i32, t: Millis, behind: bool, at: Instant) {
        if behind {
            self.heard(topic, partition, t, at + BEHIND_IDLE);
        } else if let Some(lane) = self
            .latest
            .get_mut(topic)
            .and_then(|p| p.get_mut(&partition))
        {
            // Read to its end: it holds no longer than a lane that sends matches.
            lane.t = lane.t.max(t);
            lane.until = lane.until.min(at + LANE_IDLE);
        }
    }

    /// A match member's word that input partition `partition` of `topic` is not its own, at
    /// `at`. Members that start apart leave a partition unread, and unmentioned, while another
    /// reads its own to their end; the failures whose node lines wait there must not expire
    /// meanwhile. A partition no note or match has told of yet therefore holds expiry where it
    /// is ([`UNKNOWN`]) for [`UNASSIGNED_HOLD`] after the first such word; later words do not
    /// extend it (another member may read it and be quiet, caught up), and once its own member
    /// tells of it, that member's notes alone count.
    pub fn unassigned(&mut self, topic: &str, partition: i32, at: Instant) {
        let known = self
            .latest
            .get(topic)
            .is_some_and(|p| p.contains_key(&partition));
        if !known {
            tracing::debug!(
                topic,
                partition,
                "an input partition no member has told of yet: holding expiry for it a while"
            );
            self.heard(topic, partition, UNKNOWN, at + UNASSIGNED_HOLD);
        }
    }

    /// Notes that input partition `partition` of `topic` was read up to log time `t`, holding
    /// expiry until at least `until`.
    fn heard(&mut self, topic: &str, partition: i32, t: Millis, until: Instant) {
        if let Some(lane) = self
            .latest
            .get_mut(topic)
            .and_then(|p| p.get_mut(&partition))
        {
            lane.t = lane.t.max(t);
            lane.until = lane.until.max(until);
            lane.tick = self.order.touch(lane.tick);
            return;
        }
        if self.order.len() >= MAX_LANES {
            if let Some((topic, n)) = self.order.pop_oldest() {
                if let Some(p) = self.latest.get_mut(&topic) {
                    p.remove(&n);
                    if p.is_empty() {
                        self.latest.remove(&topic);
                    }
                }
            }
        }
        let tick = self.order.push((topic.to_string(), partition));
        self.latest
            .entry(topic.to_string())
            .or_default()
            .insert(partition, Lane { t, until, tick });
    }

    /// The earliest latest log time of the lanes still holding at `at` (heard from within
    /// [`LANE_IDLE`], or [`BEHIND_IDLE`] when reported behind);
    /// `None` when one lane or none is active (nothing to wait for), unless that lane's
    /// position is [`UNKNOWN`].
    pub fn low_watermark(&self, at: Instant) -> Option<Millis> {
        let mut active = self
            .latest
            .values()
            .flat_map(HashMap::values)
            .filter(|l| at < l.until)
            .map(|l| l.t);
        let first = active.next()?;
        match active.min() {
            Some(next) => Some(first.min(next)),
            None => (first == UNKNOWN).then_some(UNKNOWN),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(partition: i32) -> MatchEvent {
        let mut e = crate::incident::testutil::event(
            "NCCL_TIMEOUT",
            crate::kb::Role::Cascade,
            "collective_timeout",
        )
        .build();
        e.source = Provenance::Kafka {
            topic: "logs".into(),
            partition,
            offset: 0,
            line: 1,
        };
        e
    }

    #[test]
    fn the_slowest_active_lane_holds_expiry_and_an_idle_one_does_not() {
        let mut lanes = Lanes::default();
        let t0 = Instant::now();
        lanes.note(&event(0), Some(10_000), t0);
        assert_eq!(
            lanes.low_watermark(t0),
            None,
            "one lane: nothing to wait for"
        );
        lanes.note(&event(1), Some(3_600_000), t0);
        lanes.note(&event(0), Some(20_000), t0);
        assert_eq!(
            lanes.low_watermark(t0),
            Some(20_000),
            "the lagging lane's latest time"
        );
        // Lane 0 goes quiet; lane 1 keeps sending.
        let later = t0 + LANE_IDLE + Duration::from_millis(1);
        lanes.note(&event(1), Some(3_700_000), later);
        assert_eq!(
            lanes.low_watermark(later),
            None,
            "an idle lane no longer holds it"
        );
    }

    #[test]
    fn a_partition_reported_behind_holds_expiry_without_matches_until_it_is_read() {
        let mut lanes = Lanes::default();
        let t0 = Instant::now();
        lanes.note(&event(0), Some(100_000), t0);
        // Partition 1 sends no match: its member's notes say it is behind at 10_000.
        lanes.progress("logs", 1, 10_000, true, t0);
        assert_eq!(lanes.low_watermark(t0), Some(10_000));
        // Past a match lane's idleness, with lane 0 still sending, it still holds.
        let later = t0 + LANE_IDLE + Duration::from_millis(1);
        lanes.note(&event(0), Some(200_000), later);
        assert_eq!(lanes.low_watermark(later), Some(10_000));
        // Read to its end: it moves on, and stops holding after a match lane's idleness.
        lanes.progress("logs", 1, 150_000, false, later);
        assert_eq!(lanes.low_watermark(later), Some(150_000));
        let done = later + LANE_IDLE;
        lanes.note(&event(0), Some(300_000), done);
        assert_eq!(lanes.low_watermark(done), None);
        // A member that stops reporting a partition behind holds it at most BEHIND_IDLE.
        lanes.progress("logs", 2, 250_000, true, done);
        let gone = done + BEHIND_IDLE;
        lanes.note(&event(0), Some(400_000), gone);
        assert_eq!(lanes.low_watermark(gone), None);
    }

    #[test]
    fn a_partition_behind_at_an_unknown_position_holds_everything_until_it_reports_one() {
        let mut lanes = Lanes::default();
        let t0 = Instant::now();
        lanes.progress("logs", 1, UNKNOWN, true, t0);
        assert_eq!(
            lanes.low_watermark(t0),
            Some(UNKNOWN),
            "alone, it still holds"
        );
        lanes.note(&event(0), Some(100_000), t0);
        assert_eq!(lanes.low_watermark(t0), Some(UNKNOWN));
        lanes.progress("logs", 1, 40_000, true, t0);
        assert_eq!(lanes.low_watermark(t0), Some(40_000));
        // An unknown position never moves a known one back.
        lanes.progress("logs", 1, UNKNOWN, true, t0);
        assert_eq!(lanes.low_watermark(t0), Some(40_000));
    }

    #[test]
    fn a_note_of_a_partition_read_to_its_end_starts_no_hold() {
        let mut lanes = Lanes::default();
        let t0 = Instant::now();
        lanes.note(&event(0), Some(100_000), t0);
        lanes.progress("logs", 1, 5_000, false, t0);
        assert_eq!(lanes.low_watermark(t0), None);
    }

    #[test]
    fn a_line_without_a_time_or_from_a_file_is_no_lane() {
        let mut lanes = Lanes::default();
        let t0 = Instant::now();
        lanes.note(&event(0), None, t0);
        let mut file = event(1);
        file.source = Provenance::File {
            path: "-".into(),
            line: 1,
        };
        lanes.note(&file, Some(5), t0);
        lanes.note(&event(2), Some(7), t0);
        lanes.note(&event(3), Some(9), t0);
        assert_eq!(lanes.low_watermark(t0), Some(7));
    }

    #[test]
    fn a_partition_no_member_has_told_of_holds_expiry_a_while_and_only_until_its_member_does() {
        let mut lanes = Lanes::default();
        let t0 = Instant::now();
        lanes.progress("logs", 0, 100_000, true, t0);
        lanes.progress("logs", 1, 200_000, true, t0);
        assert_eq!(lanes.low_watermark(t0), Some(100_000));
        // Member A, reading 0 and 1, tells of partition 2, which member B has not started on.
        lanes.unassigned("logs", 2, t0);
        assert_eq!(lanes.low_watermark(t0), Some(UNKNOWN), "held where it is");
        // A's later words do not extend the hold past UNASSIGNED_HOLD from the first.
        let later = t0 + UNASSIGNED_HOLD - Duration::from_millis(1);
        lanes.unassigned("logs", 2, later);
        lanes.progress("logs", 0, 300_000, true, later);
        lanes.progress("logs", 1, 300_000, true, later);
        assert_eq!(lanes.low_watermark(later), Some(UNKNOWN));
        let past = t0 + UNASSIGNED_HOLD + Duration::from_millis(1);
        lanes.unassigned("logs", 2, past);
        lanes.progress("logs", 0, 400_000, true, past);
        lanes.progress("logs", 1, 400_000, true, past);
        assert_eq!(
            lanes.low_watermark(past),
            Some(400_000),
            "a member that never reports holds nothing for good"
        );
        // B tells of partition 2: its position holds from then on, A's words change nothing.
        lanes.progress("logs", 2, 150_000, true, past);
        lanes.unassigned("logs", 2, past);
        assert_eq!(lanes.low_watermark(past), Some(150_000));
        // A partition already heard of through its matches is not held by the word either.
        lanes.note(&event(3), Some(500_000), past);
        lanes.unassigned("logs", 3, past);
        assert_eq!(lanes.low_watermark(past), Some(150_000));
    }

    #[test]
    fn past_the_cap_the_lane_idle_longest_is_forgotten() {
        let mut lanes = Lanes::default();
        let t0 = Instant::now();
        for p in 0..MAX_LANES as i32 {
            lanes.note(
                &event(p),
                Some(1_000 + i64::from(p)),
                t0 + Duration::from_micros(p as u64),
            );
        }
        assert_eq!(
            lanes.low_watermark(t0 + Duration::from_millis(5)),
            Some(1_000)
        );
        lanes.note(&event(-1), Some(50_000), t0 + Duration::from_millis(1));
        assert_eq!(lanes.order.len(), MAX_LANES);
        // Partition 0 (seen first) is gone: the earliest left is partition 1's.
        assert_eq!(
            lanes.low_watermark(t0 + Duration::from_millis(5)),
            Some(1_001)
        );
    }
}
