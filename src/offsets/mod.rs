//! The offset watermark: which offset of each partition may be committed.
//!
//! Flow: the source [`Tracker::register`]s every record it hands to the pipeline; the matcher
//! [`Tracker::resolve`]s each with the number of outputs it produced (0 when nothing matched,
//! 1 for a dead letter); the sink's delivery reports [`Tracker::ack`] them one by one. A record
//! is *terminal* once resolved with all its outputs acknowledged. The watermark of a partition
//! is the offset after the longest run of terminal records from the start of its window: it
//! only moves forward, over contiguous terminal records, whatever order the acks come in. The
//! source stores watermarks ([`Tracker::take_stores`]) and librdkafka commits what is stored.
//!
//! Each assignment of a partition gets a fresh epoch; acks of a previous epoch (late deliveries
//! after a revoke) are ignored, so they can never move the watermark of a new assignment.
//!
//! Holds: an open incident [`Tracker::hold`]s the first record it read from each partition, and
//! what is stored or committed never passes a held offset ([`Tracker::release`] lifts it once
//! the incident's resolution is delivered). A restart therefore reads every open incident again
//! from its start and correlates it into the same incident. A hold does not keep records in
//! flight: terminal records still leave the window, only the committed offset waits.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// A topic and partition.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    /// The topic's name, shared by every record of it.
    pub topic: Arc<str>,
    /// The partition number.
    pub partition: i32,
}

impl std::fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.topic, self.partition)
    }
}

/// Names one registered record: where it is, and which assignment of its partition read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordId {
    /// The partition.
    pub tp: TopicPartition,
    /// The assignment of the partition that read it; acks of an older epoch are ignored.
    pub epoch: u64,
    /// The record's offset.
    pub offset: i64,
}

/// Misuse of the watermark: a bug in the caller, reported rather than panicking.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OffsetError {
    /// A registered offset was not above the partition's last one.
    #[error("offset {offset} registered after {last}: offsets of a partition must increase")]
    NotIncreasing {
        /// The offset registered.
        offset: i64,
        /// The partition's last registered offset.
        last: i64,
    },
    /// A resolve or ack named an offset that is not in flight.
    #[error("offset {0} is not in flight")]
    Unknown(i64),
    /// More acks than the record's resolved output count.
    #[error("offset {0} acknowledged more often than it has outputs")]
    TooManyAcks(i64),
    /// A record was resolved a second time.
    #[error("offset {0} resolved twice")]
    ResolvedTwice(i64),
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    offset: i64,
    /// Outputs not yet acknowledged; meaningful once resolved.
    remaining: u32,
    resolved: bool,
    /// Acks that arrived before the record was resolved (the sink may be faster than us).
    early_acks: u32,
}

impl Slot {
    fn terminal(&self) -> bool {
        self.resolved && self.remaining == 0
    }
}

/// The contiguous watermark of one partition. Pure data; [`Tracker`] adds locking and epochs.
#[derive(Debug, Clone, Default)]
pub struct PartitionWatermark {
    /// Records in flight, by increasing offset.
    slots: VecDeque<Slot>,
    /// The next offset to commit: one past the last record of the terminal prefix.
    watermark: Option<i64>,
}

impl PartitionWatermark {
    /// Adds a record read from the partition; offsets must increase (gaps are fine: compacted
    /// topics and transaction markers skip offsets).
    pub fn register(&mut self, offset: i64) -> Result<(), OffsetError> {
        let last = self
            .slots
            .back()
            .map(|s| s.offset)
            .or(self.watermark.map(|w| w - 1));
        if let Some(last) = last {
            if offset <= last {
                return Err(OffsetError::NotIncreasing { offset, last });
            }
        }
        self.slots.push_back(Slot {
            offset,
            remaining: 0,
            resolved: false,
            early_acks: 0,
        });
        Ok(())
    }

    fn slot(&mut self, offset: i64) -> Result<&mut Slot, OffsetError> {
        // Offsets in flight are usually contiguous (gaps come from compaction and transaction
        // markers): try the position that assumes so before searching.
        let guess = self
            .slots
            .front()
            .and_then(|f| usize::try_from(offset - f.offset).ok())
            .filter(|&i| self.slots.get(i).is_some_and(|s| s.offset == offset));
        let i = match guess {
            Some(i) => i,
            None => self
                .slots
                .binary_search_by_key(&offset, |s| s.offset)
                .map_err(|_| OffsetError::Unknown(offset))?,
        };
        Ok(&mut self.slots[i])
    }

    /// The record has produced `outputs` outputs (0: it is terminal now).
    pub fn resolve(&mut self, offset: i64, outputs: u32) -> Result<(), OffsetError> {
        let slot = self.slot(offset)?;
        if slot.resolved {
            return Err(OffsetError::ResolvedTwice(offset));
        }
        if slot.early_acks > outputs {
            return Err(OffsetError::TooManyAcks(offset));
        }
        slot.resolved = true;
        slot.remaining = outputs - slot.early_acks;
        Ok(())
    }

    /// One output of the record was acknowledged.
    pub fn ack(&mut self, offset: i64) -> Result<(), OffsetError> {
        let slot = self.slot(offset)?;
        if !slot.resolved {
            slot.early_acks += 1;
            return Ok(());
        }
        if slot.remaining == 0 {
            return Err(OffsetError::TooManyAcks(offset));
        }
        slot.remaining -= 1;
        Ok(())
    }

    /// Moves the watermark over the terminal prefix; returns it when it moved.
    pub fn advance(&mut self) -> Option<i64> {
        let mut moved = None;
        while self.slots.front().is_some_and(Slot::terminal) {
            if let Some(s) = self.slots.pop_front() {
                moved = Some(s.offset + 1);
            }
        }
        if moved.is_some() {
            self.watermark = moved;
            self.release_idle_capacity();
        }
        moved
    }

    /// Gives back the slots' memory once the partition has nothing in flight. A partition's
    /// records arrive a fetch at a time (thousands of small records) and drain between fetches;
    /// kept, every partition's deque would stay at the size of its largest fetch ever, and
    /// with hundreds of partitions assigned that sum, not the records in flight, set the
    /// memory.
    fn release_idle_capacity(&mut self) {
        const KEEP_SLOTS: usize = 64;
        if self.slots.is_empty() && self.slots.capacity() > KEEP_SLOTS {
            self.slots = VecDeque::new();
        }
    }

    /// Forgets the records at and after `offset` (read but never handed to the pipeline): the
    /// watermark will stop before them, so they are read again.
    pub fn forget_from(&mut self, offset: i64) {
        while self.slots.back().is_some_and(|s| s.offset >= offset) {
            self.slots.pop_back();
        }
        self.release_idle_capacity();
    }

    /// The next offset to commit, once any record is terminal.
    pub fn watermark(&self) -> Option<i64> {
        self.watermark
    }

    /// Records not yet terminal or behind one that is not.
    pub fn in_flight(&self) -> usize {
        self.slots.len()
    }
}

#[derive(Debug)]
struct Partition {
    epoch: u64,
    marks: PartitionWatermark,
    /// The watermark last handed out by `take_stores`.
    stored: Option<i64>,
    /// Held offsets (with how many holds each): the committable offset stops at the first.
    holds: std::collections::BTreeMap<i64, u32>,
}

impl Partition {
    /// The next offset to commit: the watermark, unless a held record comes first.
    fn committable(&self) -> Option<i64> {
        let w = self.marks.watermark()?;
        Some(match self.holds.keys().next() {
            Some(&held) => w.min(held),
            None => w,
        })
    }
}

#[derive(Debug, Default)]
struct Inner {
    partitions: HashMap<TopicPartition, Partition>,
    next_epoch: u64,
    /// Misuse seen (logged once by the caller, counted).
    errors: u64,
    /// Bumped whenever a record becomes terminal (or the first one arrives after an idle
    /// spell); reading a clock per record was a tenth of the consumer's time.
    progress: u64,
    /// `(progress, when)` as [`Tracker::stalled`] last saw it.
    probe: Option<(u64, Instant)>,
    /// Threads waiting on `progressed`: without any, notifying costs nothing (no syscall).
    waiters: usize,
}

/// The watermarks of every assigned partition, shared by the source, the matcher and the sink.
#[derive(Debug, Default)]
pub struct Tracker {
    inner: Mutex<Inner>,
    /// Signalled whenever a record becomes terminal, so a drain can wait without polling.
    progressed: Condvar,
}

impl Tracker {
    /// An empty tracker, shared by the source, the matcher and the sink.
    pub fn new() -> Arc<Self> {
        Arc::new(Tracker::default())
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic elsewhere while holding the lock leaves consistent data (each method keeps
        // its invariants before any call that could panic), so poisoning is ignored.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a record read from `tp`; the partition's state starts at its first record.
    pub fn register(&self, tp: &TopicPartition, offset: i64) -> Result<RecordId, OffsetError> {
        let mut id = RecordId {
            tp: tp.clone(),
            epoch: 0,
            offset,
        };
        let mut failed = self.register_many(std::iter::once(&mut id));
        match failed.pop() {
            Some((_, e)) => Err(e),
            None => Ok(id),
        }
    }

    /// Registers records in the order they were read, under one lock, setting each id's epoch
    /// (see [`Tracker::register`]). Returns the position and error of every id that could not
    /// be registered; the others are in flight.
    pub fn register_many<'a>(
        &self,
        ids: impl IntoIterator<Item = &'a mut RecordId>,
    ) -> Vec<(usize, OffsetError)> {
        let mut failed = Vec::new();
        // Partitions read for the first time in their assignment, logged once the lock is gone.
        let mut started = Vec::new();
        let mut ids: Vec<&mut RecordId> = ids.into_iter().collect();
        let mut guard = self.lock();
        let inner = &mut *guard;
        // Records come in runs of one partition: look it up once per run.
        let mut start = 0;
        while start < ids.len() {
            let tp = ids[start].tp.clone();
            let end = start
                + ids[start..]
                    .iter()
                    .take_while(|id| {
                        id.tp.partition == tp.partition && Arc::ptr_eq(&id.tp.topic, &tp.topic)
                    })
                    .count();
            let next_epoch = &mut inner.next_epoch;
            let first = ids[start].offset;
            let partition = inner.partitions.entry(tp).or_insert_with_key(|tp| {
                *next_epoch += 1;
                started.push((tp.clone(), *next_epoch, first));
                Partition {
                    epoch: *next_epoch,
                    marks: PartitionWatermark::default(),
                    stored: None,
                    holds: std::collections::BTreeMap::new(),
                }
            });
            for (i, id) in ids[start..end].iter_mut().enumerate() {
                let was_idle = partition.marks.in_flight() == 0;
                if let Err(e) = partition.marks.register(id.offset) {
                    failed.push((start + i, e));
                    continue;
                }
                id.epoch = partition.epoch;
                if was_idle {
                    // Stall detection counts from the first record in flight, not from the
                    // last progress before an idle spell.
                    inner.progress += 1;
                }
            }
            start = end.max(start + 1);
        }
        drop(guard);
        // One line per assignment: with the revoke's line, where each member's reading of a
        // partition began and ended.
        for (tp, epoch, offset) in started {
            tracing::info!(partition = %tp, epoch, offset, "reading a newly assigned partition");
        }
        failed
    }

    fn with(
        &self,
        id: &RecordId,
        f: impl FnOnce(&mut PartitionWatermark) -> Result<(), OffsetError>,
    ) {
        let mut inner = self.lock();
        let Some(p) = inner.partitions.get_mut(&id.tp) else {
            return; // revoked: a late report of an old assignment
        };
        if p.epoch != id.epoch {
            return;
        }
        let result = f(&mut p.marks);
        let moved = p.marks.advance().is_some();
        if result.is_err() {
            inner.errors += 1;
        }
        if moved {
            inner.progress += 1;
        }
        let wake = moved && inner.waiters > 0;
        drop(inner);
        if wake {
            self.progressed.notify_all();
        }
    }

    /// The matcher is done with the record: `outputs` outputs are on their way to the sink.
    pub fn resolve(&self, id: &RecordId, outputs: u32) {
        self.with(id, |m| m.resolve(id.offset, outputs));
    }

    /// Resolves many records under one lock (the matcher does a batch at a time).
    pub fn resolve_many<'a>(&self, items: impl IntoIterator<Item = (&'a RecordId, u32)>) {
        let mut inner = self.lock();
        let inner = &mut *inner;
        let mut errors = 0;
        let items: Vec<_> = items.into_iter().collect();
        // Records come in runs of one partition: look it up once per run.
        for run in items.chunk_by(|(a, _), (b, _)| {
            a.tp.partition == b.tp.partition && Arc::ptr_eq(&a.tp.topic, &b.tp.topic)
        }) {
            let Some(p) = inner.partitions.get_mut(&run[0].0.tp) else {
                continue; // revoked: a late report of an old assignment
            };
            for (id, outputs) in run {
                if p.epoch == id.epoch && p.marks.resolve(id.offset, *outputs).is_err() {
                    errors += 1;
                }
            }
        }
        let mut moved = false;
        for p in inner.partitions.values_mut() {
            moved |= p.marks.advance().is_some();
        }
        inner.errors += errors;
        if moved {
            inner.progress += 1;
        }
        if moved && inner.waiters > 0 {
            self.progressed.notify_all();
        }
    }

    /// The sink acknowledged one output of the record.
    pub fn ack(&self, id: &RecordId) {
        self.with(id, |m| m.ack(id.offset));
    }

    /// Forgets records of `tp` at and after `offset` that were read but not handed on.
    pub fn forget_from(&self, tp: &TopicPartition, epoch: u64, offset: i64) {
        let mut inner = self.lock();
        if let Some(p) = inner.partitions.get_mut(tp) {
            if p.epoch == epoch {
                p.marks.forget_from(offset);
            }
        }
        drop(inner);
        self.progressed.notify_all();
    }

    /// Watermarks that moved since the last call: the offsets to store now.
    pub fn take_stores(&self) -> Vec<(TopicPartition, i64)> {
        let mut inner = self.lock();
        let mut out = Vec::new();
        for (tp, p) in &mut inner.partitions {
            if let Some(w) = p.committable() {
                if p.stored != Some(w) {
                    p.stored = Some(w);
                    out.push((tp.clone(), w));
                }
            }
        }
        out.sort();
        out
    }

    /// Drops the partitions (revoked or lost) and returns their final watermarks. Later acks
    /// of their records are ignored.
    pub fn remove(&self, tps: &[TopicPartition]) -> Vec<(TopicPartition, i64)> {
        let mut inner = self.lock();
        let mut out = Vec::new();
        for tp in tps {
            if let Some(p) = inner.partitions.remove(tp) {
                if let Some(w) = p.committable() {
                    out.push((tp.clone(), w));
                }
            }
        }
        out
    }

    /// Every partition's current watermark.
    pub fn watermarks(&self) -> Vec<(TopicPartition, i64)> {
        let inner = self.lock();
        let mut out: Vec<_> = inner
            .partitions
            .iter()
            .filter_map(|(tp, p)| Some((tp.clone(), p.committable()?)))
            .collect();
        out.sort();
        out
    }

    /// Records in flight in `tps` (all partitions when `None`).
    pub fn in_flight(&self, tps: Option<&[TopicPartition]>) -> usize {
        let inner = self.lock();
        inner
            .partitions
            .iter()
            .filter(|(tp, _)| tps.is_none_or(|t| t.contains(tp)))
            .map(|(_, p)| p.marks.in_flight())
            .sum()
    }

    /// Waits until nothing of `tps` (all when `None`) is in flight, or `timeout` passes.
    /// Returns what is still in flight (0: drained).
    pub fn wait_drained(&self, tps: Option<&[TopicPartition]>, timeout: Duration) -> usize {
        self.wait_until(timeout, |inner| {
            let left: usize = inner
                .partitions
                .iter()
                .filter(|(tp, _)| tps.is_none_or(|t| t.contains(tp)))
                .map(|(_, p)| p.marks.in_flight())
                .sum();
            (left == 0, left)
        })
    }

    /// Waits up to `timeout` until fewer than `max` records are in flight; returns whether so.
    pub fn wait_in_flight_below(&self, max: usize, timeout: Duration) -> bool {
        self.wait_until(timeout, |inner| {
            let n: usize = inner.partitions.values().map(|p| p.marks.in_flight()).sum();
            (n < max, n < max)
        })
    }

    /// Re-checks `check` whenever a record becomes terminal, until it says done or `timeout`
    /// passes; returns its last value.
    fn wait_until<T>(&self, timeout: Duration, mut check: impl FnMut(&Inner) -> (bool, T)) -> T {
        let deadline = Instant::now() + timeout;
        let mut inner = self.lock();
        loop {
            let (done, value) = check(&inner);
            let now = Instant::now();
            if done || now >= deadline {
                return value;
            }
            inner.waiters += 1;
            inner = self
                .progressed
                .wait_timeout(inner, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
            inner.waiters -= 1;
        }
    }

    /// Whether records are in flight and none progressed for `after`.
    /// Call it periodically (each /readyz does): a stall is measured from the first call that
    /// saw the current progress.
    pub fn stalled(&self, after: Duration) -> bool {
        let mut inner = self.lock();
        let busy = inner.partitions.values().any(|p| p.marks.in_flight() > 0);
        let now = Instant::now();
        let progress = inner.progress;
        match inner.probe {
            Some((seen, since)) if seen == progress => busy && now - since >= after,
            _ => {
                inner.probe = Some((progress, now));
                false
            }
        }
    }

    /// Holds the commit of `id`'s partition at `id`'s offset until [`Tracker::release`]d: call
    /// it before the record is resolved, so that nothing past it was stored yet. Ignored for a
    /// revoked assignment (the next owner reads from what was committed, which the hold capped).
    pub fn hold(&self, id: &RecordId) {
        let mut inner = self.lock();
        if let Some(p) = inner.partitions.get_mut(&id.tp) {
            if p.epoch == id.epoch {
                *p.holds.entry(id.offset).or_insert(0) += 1;
            }
        }
    }

    /// Lifts one [`Tracker::hold`] of `id`.
    pub fn release(&self, id: &RecordId) {
        let mut inner = self.lock();
        if let Some(p) = inner.partitions.get_mut(&id.tp) {
            if p.epoch == id.epoch {
                if let Some(n) = p.holds.get_mut(&id.offset) {
                    *n -= 1;
                    if *n == 0 {
                        p.holds.remove(&id.offset);
                    }
                }
            }
        }
    }

    /// Holds in place, over every partition.
    pub fn holds(&self) -> usize {
        let inner = self.lock();
        inner
            .partitions
            .values()
            .map(|p| p.holds.values().map(|&n| n as usize).sum::<usize>())
            .sum()
    }

    /// Misuses seen (acks of unknown offsets and the like); 0 unless there is a bug.
    pub fn errors(&self) -> u64 {
        self.lock().errors
    }
}

/// Lifts a set of holds once every party that must see an incident's resolution saw it (the
/// broker's ack of the incidents topic; the webhook, when one is configured).
#[derive(Debug)]
pub struct Release {
    tracker: Arc<Tracker>,
    ids: Vec<RecordId>,
    parties: std::sync::atomic::AtomicU32,
}

impl Release {
    /// Lifts the holds of `ids` once `parties` parties are [done](Release::done); at once when
    /// `parties` is 0.
    pub fn new(tracker: Arc<Tracker>, ids: Vec<RecordId>, parties: u32) -> Arc<Self> {
        let r = Arc::new(Release {
            tracker,
            ids,
            parties: std::sync::atomic::AtomicU32::new(parties),
        });
        if parties == 0 {
            r.release();
        }
        r
    }

    /// One party is done; the last one lifts the holds.
    pub fn done(&self) {
        use std::sync::atomic::Ordering;
        let left = self
            .parties
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
        if left == Ok(1) {
            self.release();
        }
    }

    fn release(&self) {
        for id in &self.ids {
            self.tracker.release(id);
        }
    }
}

#[cfg(test)]
mod tests;
