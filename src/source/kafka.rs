//! The Kafka source: a consumer-group member that reads records into bounded batches.
//!
//! It runs on a thread of its own, because librdkafka calls the rebalance callback on the
//! thread that polls and a revoke must block there until the partition's in-flight records are
//! drained. Flow: `poll` -> [`Tracker::register`] -> the pending batch -> a bounded channel to
//! the matcher ([`crate::pipeline`]). When the queue is full the source stops polling, so
//! librdkafka's bounded prefetch fills and fetching stops; if that lasts, it pauses its
//! partitions and polls again only to serve the group protocol. A slow output slows
//! consumption and memory stays bounded. Offsets are stored from the tracker's watermarks, never from what was
//! merely read; librdkafka commits the stored offsets asynchronously every
//! `kafka.commit_interval_ms`, and synchronously on revoke and shutdown.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rdkafka::client::ClientContext;
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, TopicPartitionList};

use crate::config::{Config, KafkaSettings};
use crate::offsets::{RecordId, TopicPartition, Tracker};
use crate::pipeline::queue::{SendError, Sender};
use crate::pipeline::{Shared, Stop};

/// One record as read: owned, since it outlives the poll that returned it.
#[derive(Debug, Clone)]
pub struct SourceRecord {
    pub id: RecordId,
    pub key: Option<Vec<u8>>,
    /// `None` for a tombstone.
    pub payload: Option<Vec<u8>>,
    pub headers: Vec<(String, Option<Vec<u8>>)>,
}

/// Records handed to the matcher together.
#[derive(Debug, Default)]
pub struct Batch {
    pub records: Vec<SourceRecord>,
    pub bytes: usize,
    /// When the first record was read (for the linger).
    started: Option<Instant>,
}

impl Batch {
    /// Whether the batch is handed on without waiting for the linger: it holds
    /// `max_records` records, or `max_bytes` payload bytes (so at most one record more).
    fn full(&self, max_records: usize, max_bytes: usize) -> bool {
        self.records.len() >= max_records || self.bytes >= max_bytes
    }

    fn push(&mut self, r: SourceRecord) {
        self.bytes += r.payload.as_ref().map_or(0, Vec::len);
        self.started.get_or_insert_with(Instant::now);
        self.records.push(r);
    }
}

/// Records read and registered but not yet in the channel.
#[derive(Debug, Default)]
struct Queue {
    /// Being filled.
    pending: Batch,
    /// Full, waiting for room in the channel (the partitions are paused meanwhile).
    waiting: Option<Batch>,
}

/// Errors that stop the source.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("creating the Kafka consumer: {0}")]
    Create(KafkaError),
    #[error("subscribing to {topics:?}: {error}")]
    Subscribe {
        topics: Vec<String>,
        error: KafkaError,
    },
}

/// Forgets, in the tracker, records that were read but will never be handed on, so the
/// watermark stops before them and they are read again.
pub fn forget(tracker: &Tracker, records: &[SourceRecord]) {
    let mut first: HashMap<&TopicPartition, (u64, i64)> = HashMap::new();
    for r in records {
        let e = first.entry(&r.id.tp).or_insert((r.id.epoch, r.id.offset));
        if r.id.offset < e.1 {
            *e = (r.id.epoch, r.id.offset);
        }
    }
    for (tp, (epoch, offset)) in first {
        tracker.forget_from(tp, epoch, offset);
    }
}

/// The consumer's callbacks: rebalances drain and commit; logs go to `tracing`.
pub struct SourceContext {
    tracker: Arc<Tracker>,
    shared: Arc<Shared>,
    /// Consumer lag and committed offsets per partition, from librdkafka's statistics.
    metrics: Arc<crate::metrics::Metrics>,
    /// Read and registered, not yet handed to the matcher. Behind a lock because the revoke
    /// callback runs inside `poll` and must drop the records of revoked partitions.
    queue: Mutex<Queue>,
    paused: AtomicBool,
    /// Past the shutdown drain: the close's revoke must not wait again.
    closing: AtomicBool,
    drain_timeout: Duration,
}

impl SourceContext {
    fn queue(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn update_assigned(&self, c: &BaseConsumer<Self>) {
        if let Ok(a) = c.assignment() {
            self.shared.set_assigned(a.count());
        }
    }

    /// A revoke: stop taking records of the partitions, drain their in-flight records up to
    /// the deadline, store and commit their watermarks synchronously.
    fn revoke(&self, c: &BaseConsumer<Self>, tpl: &TopicPartitionList) {
        let tps: Vec<TopicPartition> = tpl
            .elements()
            .iter()
            .map(|e| TopicPartition {
                topic: Arc::from(e.topic()),
                partition: e.partition(),
            })
            .collect();
        {
            let mut queue = self.queue();
            let Queue { pending, waiting } = &mut *queue;
            for batch in std::iter::once(pending).chain(waiting.as_mut()) {
                let (gone, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut batch.records)
                    .into_iter()
                    .partition(|r| tps.contains(&r.id.tp));
                forget(&self.tracker, &gone);
                let started = batch.started;
                *batch = Batch::default();
                for r in keep {
                    batch.push(r);
                }
                batch.started = batch.started.and(started);
            }
        }
        let lost = c.assignment_lost();
        if lost {
            tracing::warn!(
                partitions = tps.len(),
                "assignment lost (session timeout?): in-flight records of the lost partitions \
                 will be processed again by their new owner"
            );
        } else if !self.closing.load(Ordering::Relaxed) {
            let left = self.tracker.wait_drained(Some(&tps), self.drain_timeout);
            if left > 0 {
                tracing::warn!(
                    in_flight = left,
                    drain_timeout_ms = self.drain_timeout.as_millis() as u64,
                    "revoking partitions before their in-flight records finished; the next owner \
                     reprocesses them"
                );
            }
        }
        for tp in &tps {
            self.metrics.forget_partition(&tp.topic, tp.partition);
        }
        let finals = self.tracker.remove(&tps);
        if !lost && !finals.is_empty() {
            let tpl = to_tpl(&finals);
            if let Err(e) = c.store_offsets(&tpl) {
                tracing::debug!(error = %e, "storing offsets of revoked partitions");
            }
            match c.commit(&tpl, CommitMode::Sync) {
                Ok(()) => tracing::info!(partitions = tps.len(), "committed revoked partitions"),
                Err(e) => tracing::warn!(error = %e, "committing revoked partitions"),
            }
        }
    }
}

impl ClientContext for SourceContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        log_librdkafka("consumer", level, fac, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        tracing::warn!(client = "consumer", error = %error, reason, "librdkafka");
    }

    /// librdkafka's periodic statistics (`statistics.interval.ms`): the lag and committed
    /// offset of every partition this member consumes (others report -1 and are skipped).
    fn stats(&self, statistics: rdkafka::Statistics) {
        for (topic, t) in &statistics.topics {
            for (&partition, p) in &t.partitions {
                if partition < 0 || p.consumer_lag < 0 {
                    continue;
                }
                let committed = (p.committed_offset >= 0).then_some(p.committed_offset);
                self.metrics
                    .set_partition(topic, partition, p.consumer_lag, committed);
            }
        }
    }
}

impl ConsumerContext for SourceContext {
    fn pre_rebalance(&self, c: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Revoke(tpl) => {
                tracing::info!(partitions = tpl.count(), "partitions revoked");
                self.revoke(c, tpl);
            }
            Rebalance::Assign(tpl) => {
                tracing::info!(partitions = tpl.count(), "partitions assigned");
            }
            Rebalance::Error(e) => tracing::warn!(error = %e, "rebalance error"),
        }
    }

    fn post_rebalance(&self, c: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance {
            if self.paused.load(Ordering::Relaxed) {
                if let Err(e) = c.pause(tpl) {
                    tracing::warn!(error = %e, "pausing newly assigned partitions");
                }
            }
        }
        self.update_assigned(c);
    }

    fn commit_callback(&self, result: KafkaResult<()>, offsets: &TopicPartitionList) {
        match result {
            Ok(()) => tracing::debug!(partitions = offsets.count(), "offsets committed"),
            Err(KafkaError::ConsumerCommit(rdkafka::types::RDKafkaErrorCode::NoOffset)) => {}
            Err(e) => tracing::warn!(error = %e, "offset commit failed; retried next interval"),
        }
    }
}

/// Routes librdkafka's own log lines to `tracing`.
pub fn log_librdkafka(client: &str, level: RDKafkaLogLevel, fac: &str, message: &str) {
    match level {
        RDKafkaLogLevel::Emerg
        | RDKafkaLogLevel::Alert
        | RDKafkaLogLevel::Critical
        | RDKafkaLogLevel::Error => tracing::error!(client, fac, "{message}"),
        RDKafkaLogLevel::Warning => tracing::warn!(client, fac, "{message}"),
        RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
            tracing::info!(client, fac, "{message}")
        }
        RDKafkaLogLevel::Debug => tracing::debug!(client, fac, "{message}"),
    }
}

/// One shared name per topic, so records do not allocate it.
fn intern(topics: &mut HashMap<String, Arc<str>>, name: &str) -> Arc<str> {
    if let Some(t) = topics.get(name) {
        return Arc::clone(t);
    }
    let t: Arc<str> = Arc::from(name);
    topics.insert(name.to_string(), Arc::clone(&t));
    t
}

pub fn to_tpl(offsets: &[(TopicPartition, i64)]) -> TopicPartitionList {
    let mut tpl = TopicPartitionList::new();
    for (tp, next) in offsets {
        // Only fails for an invalid offset, which a watermark never is.
        let _ = tpl.add_partition_offset(&tp.topic, tp.partition, Offset::Offset(*next));
    }
    tpl
}

/// How long one wait for room in the queue lasts before the loop checks for a stop.
const BLOCK_SLICE: Duration = Duration::from_millis(100);
/// How long the queue may stay full before the partitions are paused to keep polling.
const PAUSE_AFTER: Duration = Duration::from_secs(1);

/// The most records in flight (read, not yet below the watermark): each costs a few bytes in
/// the tracker, and a partition stuck on one unacknowledged record must not grow it forever.
const MAX_IN_FLIGHT: usize = 1_000_000;

/// How often moved watermarks are handed to librdkafka's offset store.
const STORE_EVERY: Duration = Duration::from_millis(20);

/// The consumer and its loop.
pub struct KafkaSource {
    consumer: BaseConsumer<SourceContext>,
    tracker: Arc<Tracker>,
    batch_max_records: usize,
    batch_max_bytes: usize,
    linger: Duration,
    drain_timeout: Duration,
    topics: HashMap<String, Arc<str>>,
}

impl KafkaSource {
    /// Creates the consumer and subscribes. Nothing is read until [`KafkaSource::run`].
    pub fn new(
        config: &Config,
        settings: &KafkaSettings,
        tracker: Arc<Tracker>,
        shared: Arc<Shared>,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> Result<Self, SourceError> {
        let mut cc = ClientConfig::new();
        // Lag and committed offsets for /metrics; a pass-through option may change the interval.
        cc.set("statistics.interval.ms", "5000");
        for (k, v) in &settings.consumer {
            cc.set(k, v);
        }
        let context = SourceContext {
            tracker: Arc::clone(&tracker),
            shared,
            metrics,
            queue: Mutex::new(Queue::default()),
            paused: AtomicBool::new(false),
            closing: AtomicBool::new(false),
            drain_timeout: config.kafka.drain_timeout,
        };
        let consumer: BaseConsumer<SourceContext> = cc
            .create_with_context(context)
            .map_err(SourceError::Create)?;
        let topics: Vec<&str> = config
            .kafka
            .topics
            .iter()
            .map(|t| t.as_subscription())
            .collect();
        consumer
            .subscribe(&topics)
            .map_err(|error| SourceError::Subscribe {
                topics: topics.iter().map(|s| s.to_string()).collect(),
                error,
            })?;
        Ok(KafkaSource {
            consumer,
            tracker,
            batch_max_records: config.pipeline.batch_max_records,
            batch_max_bytes: config.pipeline.batch_max_bytes,
            linger: config.pipeline.batch_linger,
            drain_timeout: config.kafka.drain_timeout,
            topics: HashMap::new(),
        })
    }

    fn ctx(&self) -> &SourceContext {
        self.consumer.context()
    }

    /// Stores the watermarks that moved; librdkafka commits them on its interval.
    fn store(&self) {
        let moved = self.tracker.take_stores();
        if moved.is_empty() {
            return;
        }
        if let Err(e) = self.consumer.store_offsets(&to_tpl(&moved)) {
            // A partition revoked between the ack and now: its new owner reprocesses.
            tracing::debug!(error = %e, "storing offsets");
        }
    }

    fn set_paused(&self, pause: bool) {
        if self.ctx().paused.swap(pause, Ordering::Relaxed) == pause {
            return;
        }
        let Ok(assignment) = self.consumer.assignment() else {
            return;
        };
        tracing::debug!(
            pause,
            partitions = assignment.count(),
            "the pipeline is full: pausing partitions (or resuming)"
        );
        let result = if pause {
            self.consumer.pause(&assignment)
        } else {
            self.consumer.resume(&assignment)
        };
        if let Err(e) = result {
            tracing::warn!(error = %e, pause, "pausing or resuming partitions");
        }
    }

    /// Reads until `stop` is requested or the matcher hangs up, then drains: in-flight records
    /// get until `kafka.drain_timeout_ms` to reach a terminal state, the watermarks are stored
    /// and committed synchronously, and the consumer leaves the group.
    pub fn run(mut self, tx: Sender<Batch>, stop: Arc<Stop>) {
        // Watermarks are stored every few milliseconds, not per record: librdkafka commits
        // on its own interval anyway.
        let mut stored_at = Instant::now();
        let mut blocked_since: Option<Instant> = None;
        while !stop.requested() {
            // One clock read per iteration: it showed up in profiles when taken per check.
            let now = Instant::now();
            if now.duration_since(stored_at) >= STORE_EVERY {
                self.store();
                stored_at = now;
            }
            // Hand a batch on when it is full or has lingered long enough.
            let batch = {
                let mut queue = self.ctx().queue();
                match queue.waiting.take() {
                    Some(b) => Some(b),
                    None => {
                        let p = &queue.pending;
                        let due = p.full(self.batch_max_records, self.batch_max_bytes)
                            || p.started
                                .is_some_and(|t| now.duration_since(t) >= self.linger);
                        due.then(|| std::mem::take(&mut queue.pending))
                    }
                }
            };
            let mut waiting = false;
            if let Some(batch) = batch {
                // Wait a little for room: a full queue is usually drained within milliseconds.
                // Records waiting behind an unacknowledged one are bounded too.
                let room = self
                    .tracker
                    .wait_in_flight_below(MAX_IN_FLIGHT, BLOCK_SLICE);
                let sent = if room {
                    tx.send_timeout(batch, BLOCK_SLICE)
                } else {
                    Err(SendError::Full(batch))
                };
                match sent {
                    Ok(()) => {
                        blocked_since = None;
                        self.set_paused(false);
                    }
                    Err(SendError::Full(b)) => {
                        self.ctx().queue().waiting = Some(b);
                        waiting = true;
                        // Not polling lets librdkafka's bounded prefetch fill and stop fetching.
                        // Only a sustained stall pauses the partitions, so that polling can
                        // serve the group (rebalances, max.poll.interval.ms) without reading.
                        let since = *blocked_since.get_or_insert_with(Instant::now);
                        if since.elapsed() < PAUSE_AFTER {
                            continue;
                        }
                        self.set_paused(true);
                    }
                    Err(SendError::Closed(b)) => {
                        forget(&self.tracker, &b.records);
                        break;
                    }
                }
            }
            let timeout = if waiting {
                Duration::from_millis(10)
            } else {
                match self.ctx().queue().pending.started {
                    Some(t) => self.linger.saturating_sub(now.duration_since(t)),
                    None => Duration::from_millis(100),
                }
            };
            match self.consumer.poll(timeout) {
                Some(Ok(msg)) => {
                    let tp = TopicPartition {
                        topic: intern(&mut self.topics, msg.topic()),
                        partition: msg.partition(),
                    };
                    let id = match self.tracker.register(&tp, msg.offset()) {
                        Ok(id) => id,
                        Err(e) => {
                            tracing::error!(partition = %tp, error = %e, "offset tracking");
                            continue;
                        }
                    };
                    let headers = msg
                        .headers()
                        .map(|h| {
                            h.iter()
                                .map(|h| (h.key.to_string(), h.value.map(<[u8]>::to_vec)))
                                .collect()
                        })
                        .unwrap_or_default();
                    let record = SourceRecord {
                        id,
                        key: msg.key().map(<[u8]>::to_vec),
                        payload: msg.payload().map(<[u8]>::to_vec),
                        headers,
                    };
                    self.ctx().queue().pending.push(record);
                }
                Some(Err(e)) => tracing::warn!(error = %e, "consumer"),
                None => {}
            }
        }
        // Records never handed on are read again after a restart or by the next owner.
        let queue = std::mem::take(&mut *self.ctx().queue());
        forget(&self.tracker, &queue.pending.records);
        if let Some(b) = queue.waiting {
            forget(&self.tracker, &b.records);
        }
        self.set_paused(true);
        drop(tx);
        self.drain();
        stop.abandon();
        self.ctx().closing.store(true, Ordering::Relaxed);
        drop(self.consumer); // leaves the group; its revoke callback finds nothing in flight
    }

    /// Waits for in-flight records up to the deadline, then stores and commits synchronously.
    fn drain(&self) {
        let deadline = Instant::now() + self.drain_timeout;
        loop {
            let left = self.tracker.wait_drained(None, Duration::from_millis(100));
            self.store();
            if left == 0 {
                break;
            }
            if Instant::now() >= deadline {
                tracing::warn!(
                    in_flight = left,
                    "shutting down with records still in flight; they are read again on restart"
                );
                break;
            }
            // Serve the group protocol while waiting; records read now are not taken.
            let _ = self.consumer.poll(Duration::ZERO);
        }
        let marks = self.tracker.watermarks();
        if !marks.is_empty() {
            match self.consumer.commit(&to_tpl(&marks), CommitMode::Sync) {
                Ok(()) => tracing::info!(partitions = marks.len(), "final offsets committed"),
                Err(e) => tracing::warn!(error = %e, "final offset commit"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(offset: i64, bytes: usize) -> SourceRecord {
        SourceRecord {
            id: RecordId {
                tp: TopicPartition {
                    topic: Arc::from("t"),
                    partition: 0,
                },
                epoch: 0,
                offset,
            },
            key: None,
            payload: Some(vec![b'x'; bytes]),
            headers: Vec::new(),
        }
    }

    #[test]
    fn a_batch_is_full_at_exactly_its_record_or_byte_limit() {
        let mut b = Batch::default();
        b.push(record(0, 10));
        b.push(record(1, 10));
        assert!(
            !b.full(3, 21),
            "one record and one byte short of either limit"
        );
        b.push(record(2, 0));
        assert!(b.full(3, 1 << 20), "exactly pipeline.batch_max_records");
        let mut b = Batch::default();
        b.push(record(0, 20));
        assert!(!b.full(1000, 21));
        b.push(record(1, 1));
        assert!(b.full(1000, 21), "exactly pipeline.batch_max_bytes");
        assert_eq!(b.bytes, 21);
    }
}
