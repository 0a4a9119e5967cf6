//! Tests of [`super`].

use super::*;

fn marks(offsets: &[i64]) -> PartitionWatermark {
    let mut m = PartitionWatermark::default();
    for &o in offsets {
        m.register(o).expect("increasing");
    }
    m
}

fn tp_of(topic: &Arc<str>, partition: i32) -> TopicPartition {
    TopicPartition {
        topic: Arc::clone(topic),
        partition,
    }
}

#[test]
fn in_flight_limit_holds_exactly_at_the_limit() {
    let tracker = Tracker::new();
    let topic: Arc<str> = Arc::from("t");
    let ids: Vec<RecordId> = (0..4)
        .map(|o| tracker.register(&tp_of(&topic, 0), o).expect("registered"))
        .collect();
    // Four in flight: a limit of 4 is reached (the reader waits), a limit of 5 is not.
    assert!(!tracker.wait_in_flight_below(4, Duration::ZERO));
    assert!(tracker.wait_in_flight_below(5, Duration::ZERO));
    // A record behind an unfinished one still counts: only the terminal prefix leaves.
    tracker.resolve(&ids[1], 0);
    assert!(!tracker.wait_in_flight_below(4, Duration::ZERO));
    tracker.resolve(&ids[0], 0);
    assert!(tracker.wait_in_flight_below(3, Duration::ZERO));
    assert!(!tracker.wait_in_flight_below(2, Duration::ZERO));
}

#[test]
fn a_drained_partition_gives_its_slots_back() {
    let offsets: Vec<i64> = (0..50_000).collect();
    let mut m = marks(&offsets);
    assert!(m.slots.capacity() >= 50_000);
    for &o in &offsets[..49_999] {
        m.resolve(o, 0).expect("in flight");
    }
    assert_eq!(m.advance(), Some(49_999));
    assert!(
        m.slots.capacity() >= 50_000,
        "kept while a record is in flight"
    );
    m.resolve(49_999, 0).expect("in flight");
    assert_eq!((m.advance(), m.in_flight()), (Some(50_000), 0));
    assert!(m.slots.capacity() <= 64, "capacity {}", m.slots.capacity());
    // Records read but forgotten (a revoked partition) give theirs back too.
    let mut m = marks(&offsets);
    m.forget_from(0);
    assert!(m.slots.capacity() <= 64, "capacity {}", m.slots.capacity());
    m.register(0).expect("read again");
    m.resolve(0, 0).expect("in flight");
    assert_eq!(m.advance(), Some(1));
}

#[test]
fn register_many_sets_epochs_per_partition_and_reports_refusals() {
    let tracker = Tracker::new();
    let (a, b): (Arc<str>, Arc<str>) = (Arc::from("a"), Arc::from("b"));
    // Runs of one partition, a partition seen again later, another topic, and one offset
    // going backwards (refused, the rest still registered).
    let mut ids: Vec<RecordId> = [(&a, 0, 5), (&a, 0, 6), (&a, 1, 0), (&a, 0, 7), (&b, 0, 0)]
        .into_iter()
        .chain([(&a, 0, 3)])
        .map(|(t, p, offset)| RecordId {
            tp: tp_of(t, p),
            epoch: 0,
            offset,
        })
        .collect();
    let failed = tracker.register_many(ids.iter_mut());
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].0, 5);
    assert_eq!(
        failed[0].1,
        OffsetError::NotIncreasing { offset: 3, last: 7 }
    );
    assert!(ids[..5].iter().all(|id| id.epoch > 0));
    assert_eq!(ids[0].epoch, ids[3].epoch, "one assignment of a/0");
    assert_ne!(ids[0].epoch, ids[2].epoch, "a/1 has an epoch of its own");
    assert_eq!(tracker.in_flight(None), 5);
    // Resolving them in a batch moves each partition's watermark.
    tracker.resolve_many(ids[..5].iter().map(|id| (id, 0)));
    assert_eq!(
        tracker.watermarks(),
        vec![(tp_of(&a, 0), 8), (tp_of(&a, 1), 1), (tp_of(&b, 0), 1)]
    );
}

#[test]
fn slots_are_found_past_gaps_in_the_offsets() {
    // Compaction leaves gaps: the position guess misses and the search finds the slot.
    let mut m = marks(&[10, 12, 13, 20]);
    for o in [20, 13, 12, 10] {
        m.resolve(o, 0).expect("known");
    }
    assert_eq!(m.resolve(11, 0), Err(OffsetError::Unknown(11)));
    assert_eq!(m.advance(), Some(21));
}

#[test]
fn records_without_outputs_are_terminal_when_resolved() {
    let mut m = marks(&[0, 1, 2]);
    assert_eq!(m.advance(), None);
    m.resolve(0, 0).expect("known");
    assert_eq!(m.advance(), Some(1));
    m.resolve(2, 0).expect("known");
    assert_eq!(m.advance(), None, "1 is still in flight");
    m.resolve(1, 0).expect("known");
    assert_eq!(m.advance(), Some(3));
    assert_eq!(m.in_flight(), 0);
}

#[test]
fn the_watermark_waits_for_every_output() {
    let mut m = marks(&[10, 11]);
    m.resolve(10, 2).expect("known");
    m.resolve(11, 1).expect("known");
    m.ack(11).expect("known");
    assert_eq!(m.advance(), None, "10 has two outputs unacknowledged");
    m.ack(10).expect("known");
    assert_eq!(m.advance(), None, "10 has one output unacknowledged");
    m.ack(10).expect("known");
    assert_eq!(m.advance(), Some(12));
}

#[test]
fn out_of_order_acks_never_move_the_watermark_past_a_gap() {
    let mut m = marks(&[0, 1, 2, 3, 4]);
    for o in 0..5 {
        m.resolve(o, 1).expect("known");
    }
    for (ack, want) in [(4, None), (2, None), (0, Some(1)), (3, None), (1, Some(5))] {
        m.ack(ack).expect("known");
        assert_eq!(m.advance(), want, "after ack of {ack}");
    }
}

#[test]
fn acks_may_arrive_before_the_record_is_resolved() {
    let mut m = marks(&[0]);
    m.ack(0).expect("known");
    assert_eq!(m.advance(), None, "not resolved yet");
    m.resolve(0, 2).expect("known");
    assert_eq!(m.advance(), None);
    m.ack(0).expect("known");
    assert_eq!(m.advance(), Some(1));
}

#[test]
fn gaps_in_offsets_are_allowed() {
    let mut m = marks(&[5, 9, 20]);
    for o in [5, 9, 20] {
        m.resolve(o, 0).expect("known");
    }
    assert_eq!(m.advance(), Some(21));
}

#[test]
fn misuse_is_an_error_not_a_panic() {
    let mut m = marks(&[3]);
    assert_eq!(
        m.register(3),
        Err(OffsetError::NotIncreasing { offset: 3, last: 3 })
    );
    assert_eq!(m.ack(4), Err(OffsetError::Unknown(4)));
    m.resolve(3, 1).expect("known");
    assert_eq!(m.resolve(3, 1), Err(OffsetError::ResolvedTwice(3)));
    m.ack(3).expect("known");
    assert_eq!(m.ack(3), Err(OffsetError::TooManyAcks(3)));
    m.advance();
    assert_eq!(
        m.register(2),
        Err(OffsetError::NotIncreasing { offset: 2, last: 3 }),
        "offsets below the watermark are rejected too"
    );
}

#[test]
fn forgotten_records_hold_the_watermark_before_them() {
    let mut m = marks(&[0, 1, 2, 3]);
    m.forget_from(2);
    m.resolve(0, 0).expect("known");
    m.resolve(1, 0).expect("known");
    assert_eq!(m.advance(), Some(2));
    assert_eq!(m.in_flight(), 0);
    m.register(2).expect("read again");
}

/// A small deterministic generator, so the randomized test needs no dependency.
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

#[test]
fn randomized_acks_match_a_model() {
    for seed in 0..200 {
        let mut rng = Lcg(seed);
        let n = 1 + rng.next(60) as i64;
        let mut m = PartitionWatermark::default();
        let mut outputs = Vec::new();
        let mut offset = rng.next(5) as i64;
        for _ in 0..n {
            m.register(offset).expect("increasing");
            outputs.push((offset, rng.next(4) as u32));
            offset += 1 + rng.next(3) as i64;
        }
        // Every event (a resolve, or an ack after its resolve or before it) in random order.
        let mut events: Vec<(i64, bool)> = Vec::new();
        for &(o, k) in &outputs {
            events.push((o, true));
            events.extend(std::iter::repeat_n((o, false), k as usize));
        }
        let mut acked = std::collections::HashMap::<i64, u32>::new();
        let mut resolved = std::collections::HashSet::new();
        let mut last_mark = None;
        while !events.is_empty() {
            let (o, is_resolve) = events.swap_remove(rng.next(events.len() as u64) as usize);
            let k = outputs
                .iter()
                .find(|x| x.0 == o)
                .map(|x| x.1)
                .expect("known");
            if is_resolve {
                m.resolve(o, k).expect("resolves");
                resolved.insert(o);
            } else {
                m.ack(o).expect("acks");
                *acked.entry(o).or_default() += 1;
            }
            m.advance();
            // Model: the watermark is one past the longest terminal prefix.
            let prefix_end = outputs
                .iter()
                .take_while(|(o, k)| {
                    resolved.contains(o) && acked.get(o).copied().unwrap_or(0) == *k
                })
                .last()
                .map(|(o, _)| o + 1);
            let want = prefix_end.or(last_mark);
            assert_eq!(m.watermark(), want, "seed {seed}");
            assert!(want >= last_mark, "the watermark never moves back");
            last_mark = want;
        }
        assert_eq!(m.in_flight(), 0, "seed {seed}");
        assert_eq!(m.watermark(), outputs.last().map(|(o, _)| o + 1));
    }
}

fn tp(p: i32) -> TopicPartition {
    TopicPartition {
        topic: Arc::from("logs"),
        partition: p,
    }
}

#[test]
fn tracker_stores_only_moved_watermarks() {
    let t = Tracker::new();
    let a = t.register(&tp(0), 0).expect("registers");
    let b = t.register(&tp(1), 7).expect("registers");
    assert!(t.take_stores().is_empty());
    t.resolve(&a, 1);
    t.resolve(&b, 0);
    assert_eq!(t.take_stores(), vec![(tp(1), 8)]);
    assert!(
        t.take_stores().is_empty(),
        "unchanged watermarks are not stored again"
    );
    t.ack(&a);
    assert_eq!(t.take_stores(), vec![(tp(0), 1)]);
}

#[test]
fn a_hold_caps_what_is_stored_until_released() {
    let t = Tracker::new();
    let ids: Vec<_> = (0..5)
        .map(|o| t.register(&tp(0), o).expect("registers"))
        .collect();
    // The incident's first record is held before it is resolved; so is a later one twice.
    t.hold(&ids[2]);
    t.hold(&ids[3]);
    t.hold(&ids[3]);
    t.resolve_many(ids.iter().map(|id| (id, 0)));
    assert_eq!(t.in_flight(None), 0, "holds keep no record in flight");
    assert_eq!(
        t.take_stores(),
        vec![(tp(0), 2)],
        "stops at the held record"
    );
    assert_eq!(t.holds(), 3);
    t.release(&ids[2]);
    assert_eq!(t.take_stores(), vec![(tp(0), 3)]);
    t.release(&ids[3]);
    assert!(t.take_stores().is_empty(), "still held once");
    t.release(&ids[3]);
    assert_eq!(t.watermarks(), vec![(tp(0), 5)]);
    assert_eq!(t.take_stores(), vec![(tp(0), 5)]);
    // A revoke commits the capped offset; holds of the old epoch are then ignored.
    let next = t.register(&tp(0), 5).expect("registers");
    t.hold(&next);
    t.resolve(&next, 0);
    assert_eq!(t.remove(&[tp(0)]), vec![(tp(0), 5)]);
    t.release(&next);
    assert_eq!(t.holds(), 0);
}

#[test]
fn a_release_lifts_its_holds_when_the_last_party_is_done() {
    let t = Tracker::new();
    let id = t.register(&tp(0), 0).expect("registers");
    t.hold(&id);
    t.resolve(&id, 0);
    let r = Release::new(Arc::clone(&t), vec![id], 2);
    r.done();
    assert_eq!(t.holds(), 1, "one party left");
    r.done();
    assert_eq!(t.holds(), 0);
    r.done();
    assert_eq!(
        t.watermarks(),
        vec![(tp(0), 1)],
        "extra calls change nothing"
    );
}

#[test]
fn acks_of_a_previous_assignment_are_ignored() {
    let t = Tracker::new();
    let old = t.register(&tp(0), 0).expect("registers");
    t.resolve(&old, 1);
    assert_eq!(t.remove(&[tp(0)]), vec![]);
    // Reassigned: read again from the committed offset (none: 0).
    let new = t.register(&tp(0), 0).expect("registers");
    assert_ne!(new.epoch, old.epoch);
    t.ack(&old);
    assert_eq!(
        t.in_flight(None),
        1,
        "the old ack did not complete the new record"
    );
    t.resolve(&new, 0);
    assert_eq!(t.watermarks(), vec![(tp(0), 1)]);
    assert_eq!(t.errors(), 0);
}

#[test]
fn drain_waits_for_acks_from_another_thread() {
    let t = Tracker::new();
    let ids: Vec<_> = (0..100)
        .map(|o| t.register(&tp(0), o).expect("registers"))
        .collect();
    for id in &ids {
        t.resolve(id, 1);
    }
    let acker = {
        let t = Arc::clone(&t);
        std::thread::spawn(move || {
            for id in ids.iter().rev() {
                t.ack(id);
            }
        })
    };
    let left = t.wait_drained(Some(&[tp(0)]), Duration::from_secs(30));
    acker.join().expect("acker");
    assert_eq!(left, 0);
    assert_eq!(t.remove(&[tp(0)]), vec![(tp(0), 100)]);
}

#[test]
fn stalls_are_in_flight_records_without_progress() {
    let t = Tracker::new();
    assert!(!t.stalled(Duration::ZERO), "nothing in flight");
    let id = t.register(&tp(0), 0).expect("registers");
    assert!(
        !t.stalled(Duration::ZERO),
        "the first look only notes the progress"
    );
    assert!(t.stalled(Duration::ZERO), "no progress since");
    assert!(!t.stalled(Duration::from_secs(3600)));
    t.resolve(&id, 0);
    assert!(!t.stalled(Duration::ZERO), "progress");
    assert!(!t.stalled(Duration::ZERO), "drained");
}

#[test]
fn resolving_a_batch_equals_resolving_one_by_one() {
    let t = Tracker::new();
    let ids: Vec<_> = (0..6)
        .map(|o| t.register(&tp(o % 2), o as i64).expect("registers"))
        .collect();
    t.ack(&ids[2]); // early, before its resolve
    t.resolve_many(ids.iter().zip([0, 1, 1, 0, 0, 0]));
    assert_eq!(t.watermarks(), vec![(tp(0), 5)], "1 waits for its ack");
    t.ack(&ids[1]);
    assert_eq!(t.watermarks(), vec![(tp(0), 5), (tp(1), 6)]);
    assert_eq!(t.errors(), 0);
}

#[test]
fn drain_gives_up_at_its_deadline() {
    let t = Tracker::new();
    let id = t.register(&tp(0), 0).expect("registers");
    t.resolve(&id, 1);
    assert_eq!(t.wait_drained(None, Duration::from_millis(1)), 1);
}
