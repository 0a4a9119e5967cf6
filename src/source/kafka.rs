//! The Kafka source: a consumer-group member that reads records into bounded batches.
//!
//! It runs on a thread of its own, because librdkafka calls the rebalance callback on the
//! thread that polls and a revoke must block there until the partition's in-flight records are
//! drained. Flow: `poll` -> [`Tracker::register`] -> the pending batch -> a bounded channel to
//! the pipeline's match stage. When the queue is full the source stops polling, so
//! librdkafka's bounded prefetch fills and fetching stops; if that lasts, it pauses its
//! partitions and polls again only to serve the group protocol. A slow output slows
//! consumption and memory stays bounded. Offsets are stored from the tracker's watermarks, never
//! from what was merely read, and committed asynchronously when [`CommitPolicy`] says so (at
//! once after an assignment, then at a pace that follows the acknowledgements), and
//! synchronously on revoke and shutdown.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rdkafka::client::ClientContext;
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::message::{Headers, Message};
use rdkafka::TopicPartitionList;

use super::commit::CommitPolicy;
use super::end::{self, Ends};
use crate::kafka::links::BrokerLinks;
use crate::kafka::{partitions_of, read_lag, to_tpl, KafkaConfig, KafkaSettings, RecordView};
use crate::metrics::KafkaClient;
use crate::offsets::{RecordId, TopicPartition, Tracker};
use crate::runtime::queue::{SendError, Sender};
use crate::runtime::{Health, Shutdown};

/// One record as read. Its key and payload live in its [`Batch`]'s buffer ([`Batch::key`],
/// [`Batch::payload`], [`Batch::view`]): copying every record into one growing buffer instead
/// of two allocations of its own halved the source thread's time in `malloc` and `free`.
#[derive(Debug, Clone)]
pub struct SourceRecord {
    /// Where it was read, and by which assignment of its partition.
    pub id: RecordId,
    key: Option<Range<usize>>,
    /// `None` for a tombstone.
    payload: Option<Range<usize>>,
    /// Its headers, in order: name and value (`None` when null).
    pub headers: Vec<(String, Option<Vec<u8>>)>,
}

/// Records handed to the matcher together, with their keys and payloads in one buffer.
#[derive(Debug, Default)]
pub struct Batch {
    /// The records, in the order they were read.
    pub records: Vec<SourceRecord>,
    /// Every record's key, then its payload.
    data: Vec<u8>,
    /// Payload bytes (what the batch limits count).
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

    /// Appends a record, copying its key and payload into the batch.
    pub fn push(
        &mut self,
        id: RecordId,
        key: Option<&[u8]>,
        payload: Option<&[u8]>,
        headers: Vec<(String, Option<Vec<u8>>)>,
    ) {
        let mut put = |bytes: Option<&[u8]>| {
            bytes.map(|b| {
                let start = self.data.len();
                self.data.extend_from_slice(b);
                start..self.data.len()
            })
        };
        let key = put(key);
        let payload = put(payload);
        self.bytes += payload.as_ref().map_or(0, |p| p.len());
        self.started.get_or_insert_with(Instant::now);
        self.records.push(SourceRecord {
            id,
            key,
            payload,
            headers,
        });
    }

    /// The record's key, if it has one.
    pub fn key(&self, r: &SourceRecord) -> Option<&[u8]> {
        r.key.clone().map(|k| &self.data[k])
    }

    /// The record's payload; `None` for a tombstone.
    pub fn payload(&self, r: &SourceRecord) -> Option<&[u8]> {
        r.payload.clone().map(|p| &self.data[p])
    }

    /// The record with its bytes, as the decoder reads it.
    pub fn view<'a>(&'a self, r: &'a SourceRecord) -> RecordView<'a> {
        RecordView {
            id: &r.id,
            key: self.key(r),
            payload: self.payload(r),
            headers: &r.headers,
        }
    }

    /// True when the batch holds no record.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Drops the records `gone` selects (their bytes stay until the batch is dropped) and
    /// returns them, for the tracker to forget.
    fn split_off_where(
        &mut self,
        mut gone: impl FnMut(&SourceRecord) -> bool,
    ) -> Vec<SourceRecord> {
        let (out, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut self.records)
            .into_iter()
            .partition(|r| gone(r));
        self.records = keep;
        self.bytes = self
            .records
            .iter()
            .map(|r| r.payload.as_ref().map_or(0, |p| p.len()))
            .sum();
        if self.records.is_empty() {
            self.started = None;
        }
        out
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
    /// The client could not be created (bad settings).
    #[error("creating the Kafka consumer: {0}")]
    Create(KafkaError),
    /// Subscribing to the input topics failed.
    #[error("subscribing to {topics:?}: {error}")]
    Subscribe {
        /// The topics subscribed to.
        topics: Vec<String>,
        /// The client's error.
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
    health: Arc<Health>,
    /// Consumer lag and committed offsets per partition, from librdkafka's statistics.
    metrics: Arc<crate::metrics::Metrics>,
    /// Read and registered, not yet handed to the matcher. Behind a lock because the revoke
    /// callback runs inside `poll` and must drop the records of revoked partitions.
    queue: Mutex<Queue>,
    paused: AtomicBool,
    /// The current assignment, partitions by topic: the statistics still list partitions
    /// revoked earlier, with their old committed offset.
    assigned: Mutex<HashMap<String, std::collections::HashSet<i32>>>,
    /// Every partition of the input topics, from the metadata at each rebalance and from the
    /// statistics: those not [`Self::assigned`] are told to the correlator as unassigned.
    partitions: Mutex<HashMap<String, std::collections::BTreeSet<i32>>>,
    /// Past the shutdown drain: the close's revoke must not wait again.
    closing: AtomicBool,
    /// The group's assignment protocol ([`KafkaSettings::cooperative`]).
    cooperative: bool,
    drain_timeout: Duration,
    /// When the stored offsets are committed; revokes forget their partitions there.
    commits: Mutex<CommitPolicy>,
    /// Broker outages, shared with the producer: one line each, not librdkafka's every retry.
    links: Arc<BrokerLinks>,
}

impl SourceContext {
    fn queue(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn commits(&self) -> MutexGuard<'_, CommitPolicy> {
        self.commits.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn update_assigned(&self, c: &BaseConsumer<Self>) {
        if let Ok(a) = c.assignment() {
            self.health.set_assigned(a.count());
            let mut assigned = self.assigned.lock().unwrap_or_else(|p| p.into_inner());
            assigned.clear();
            let mut backlog = Vec::new();
            for e in a.elements() {
                assigned
                    .entry(e.topic().to_string())
                    .or_default()
                    .insert(e.partition());
                backlog.push(TopicPartition {
                    topic: e.topic().into(),
                    partition: e.partition(),
                });
            }
            // Behind until the statistics say a partition was read to its end.
            self.health.set_backlog(backlog);
            let mut found = Vec::new();
            for topic in assigned.keys() {
                match c.fetch_metadata(Some(topic), METADATA_TIMEOUT) {
                    Ok(m) => {
                        for t in m.topics().iter().filter(|t| t.name() == topic) {
                            let ids = t.partitions().iter().map(|p| p.id()).collect();
                            found.push((topic.clone(), ids));
                        }
                    }
                    // The statistics list the topic's partitions within their interval.
                    Err(e) => tracing::debug!(topic, error = %e, "reading the topic's partitions"),
                }
            }
            self.learn_partitions(found, &assigned);
        }
    }

    /// Adds `found` (topics and partitions of them) to the input topics' partitions and tells
    /// the health which of them are not in `assigned`.
    fn learn_partitions(
        &self,
        found: impl IntoIterator<Item = (String, Vec<i32>)>,
        assigned: &HashMap<String, std::collections::HashSet<i32>>,
    ) {
        let mut partitions = self.partitions.lock().unwrap_or_else(|p| p.into_inner());
        for (topic, ids) in found {
            partitions.entry(topic).or_default().extend(ids);
        }
        self.health
            .set_unassigned(unassigned_of(&partitions, assigned));
    }

    /// A revoke: stop taking records of the partitions, drain their in-flight records up to
    /// the deadline, store and commit their watermarks synchronously.
    fn revoke(&self, c: &BaseConsumer<Self>, tpl: &TopicPartitionList) {
        let tps = partitions_of(tpl);
        {
            let mut queue = self.queue();
            let Queue { pending, waiting } = &mut *queue;
            for batch in std::iter::once(pending).chain(waiting.as_mut()) {
                let gone = batch.split_off_where(|r| tps.contains(&r.id.tp));
                forget(&self.tracker, &gone);
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
        self.commits().revoked(&tps);
        let finals = self.tracker.remove(&tps);
        for (tp, offset) in &finals {
            if lost {
                tracing::info!(partition = %tp, offset, "lost partition: not committing its watermark");
            } else {
                tracing::info!(partition = %tp, offset, "revoked partition: committing its watermark");
            }
        }
        if !lost && !finals.is_empty() {
            let tpl = to_tpl(&finals);
            if let Err(e) = c.store_offsets(&tpl) {
                tracing::debug!(error = %e, "storing offsets of revoked partitions");
            }
            // In the close, asynchronously: the close waits for the answer itself.
            let closing = self.closing.load(Ordering::Relaxed);
            let mode = [CommitMode::Sync, CommitMode::Async][usize::from(closing)];
            match c.commit(&tpl, mode) {
                Ok(()) if closing => {
                    tracing::info!(partitions = tps.len(), "committing revoked partitions")
                }
                Ok(()) => tracing::info!(partitions = tps.len(), "committed revoked partitions"),
                Err(e) => tracing::warn!(error = %e, "committing revoked partitions"),
            }
        }
    }
}

impl ClientContext for SourceContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        self.links.log(KafkaClient::Consumer, level, fac, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        // Until the next statistics say otherwise: records may be waiting unread.
        self.health.set_input_current(false);
        self.links.error(KafkaClient::Consumer, &error, reason);
    }

    /// librdkafka's periodic statistics (`statistics.interval.ms`): the lag and committed
    /// offset of every partition this member consumes (others report -1 and are skipped), and
    /// which brokers are up again after an outage.
    ///
    /// The input is current when every assigned partition reported a lag of 0 and no broker
    /// is out ([`Health::set_input_current`]).
    fn stats(&self, statistics: rdkafka::Statistics) {
        self.links.stats(KafkaClient::Consumer, &statistics);
        let (mut reported, mut behind) = (0, false);
        let mut backlog = Vec::new();
        let assigned = self.assigned.lock().unwrap_or_else(|p| p.into_inner());
        for (topic, t) in &statistics.topics {
            for (&partition, p) in &t.partitions {
                if !assigned
                    .get(topic)
                    .is_some_and(|ps| ps.contains(&partition))
                {
                    continue;
                }
                let Some(lag) = read_lag(p) else {
                    // Not read yet: behind until it reports a lag.
                    backlog.push(TopicPartition {
                        topic: topic.as_str().into(),
                        partition,
                    });
                    continue;
                };
                reported += 1;
                behind |= lag > 0;
                if lag > 0 {
                    backlog.push(TopicPartition {
                        topic: topic.as_str().into(),
                        partition,
                    });
                }
                let committed = (p.committed_offset >= 0).then_some(p.committed_offset);
                self.metrics.set_partition(topic, partition, lag, committed);
            }
        }
        // librdkafka's internal "unassigned" partition is -1.
        let found = statistics.topics.iter().map(|(topic, t)| {
            let ids = t.partitions.keys().copied().filter(|&p| p >= 0);
            (topic.clone(), ids.collect())
        });
        self.learn_partitions(found, &assigned);
        let assigned: usize = assigned.values().map(std::collections::HashSet::len).sum();
        self.health.set_backlog(backlog);
        self.health.set_input_current(
            assigned > 0 && reported >= assigned && !behind && !self.links.in_outage(),
        );
    }
}

impl ConsumerContext for SourceContext {
    /// rdkafka's default, except that the protocol comes from the configuration: asking
    /// librdkafka waits without a deadline, and in a close may never be answered (librdkafka
    /// issue 4041), leaving `run` unable to exit after SIGTERM.
    fn rebalance(
        &self,
        c: &BaseConsumer<Self>,
        err: rdkafka::types::RDKafkaRespErr,
        tpl: &mut TopicPartitionList,
    ) {
        use rdkafka::types::RDKafkaRespErr::{
            RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS as ASSIGN,
            RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS as REVOKE,
        };
        let tpl: &TopicPartitionList = tpl;
        let rebalance = match err {
            ASSIGN => Rebalance::Assign(tpl),
            REVOKE => Rebalance::Revoke(tpl),
            other => Rebalance::Error(KafkaError::Rebalance(other.into())),
        };
        self.pre_rebalance(c, &rebalance);
        let done = match (err == ASSIGN, self.cooperative) {
            (true, true) => c.incremental_assign(tpl),
            (true, false) => c.assign(tpl),
            (false, true) => c.incremental_unassign(tpl),
            (false, false) => c.unassign(),
        };
        if let Err(e) = done {
            tracing::warn!(error = %e, "answering a rebalance");
        }
        self.post_rebalance(c, &rebalance);
    }

    fn pre_rebalance(&self, c: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        // A partition taken over is read from its commit: behind until the statistics say not.
        self.health.set_input_current(false);
        match rebalance {
            Rebalance::Revoke(tpl) => {
                tracing::info!(partitions = tpl.count(), "partitions revoked");
                self.revoke(c, tpl);
            }
            Rebalance::Assign(tpl) => {
                tracing::info!(partitions = tpl.count(), "partitions assigned");
                if tpl.count() > 0 {
                    // Before any of their records is read: a correlator learns what the
                    // partitions' previous owner published before it correlates them.
                    self.health.note_assignment();
                }
            }
            Rebalance::Error(e) => tracing::warn!(error = %e, "rebalance error"),
        }
    }

    fn post_rebalance(&self, c: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        // The close's revoke: nothing is read any more (and the request may go unanswered).
        if self.closing.load(Ordering::Relaxed) {
            return;
        }
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
            Ok(()) => tracing::debug!(offsets = ?offsets.to_topic_map(), "offsets committed"),
            Err(KafkaError::ConsumerCommit(rdkafka::types::RDKafkaErrorCode::NoOffset)) => {}
            // The broker outage is logged once by the links; the next commit retries.
            Err(e) if self.links.in_outage() => {
                tracing::debug!(error = %e, "offset commit failed; retried by the next commit")
            }
            Err(e) => {
                tracing::warn!(error = %e, "offset commit failed; retried by the next commit")
            }
        }
    }
}

/// How long a rebalance waits for an input topic's metadata (its partitions).
const METADATA_TIMEOUT: Duration = Duration::from_secs(2);

/// The partitions of `partitions` (every partition of each input topic) not in `assigned`.
fn unassigned_of(
    partitions: &HashMap<String, std::collections::BTreeSet<i32>>,
    assigned: &HashMap<String, std::collections::HashSet<i32>>,
) -> Vec<TopicPartition> {
    let mut out = Vec::new();
    for (topic, all) in partitions {
        let mine = assigned.get(topic);
        for &partition in all {
            if !mine.is_some_and(|m| m.contains(&partition)) {
                out.push(TopicPartition {
                    topic: topic.as_str().into(),
                    partition,
                });
            }
        }
    }
    out
}

/// One shared name per topic, so records do not allocate it. Records come in runs of one
/// topic, so the last name is compared first.
#[derive(Debug, Default)]
struct Topics {
    names: HashMap<String, Arc<str>>,
    last: Option<Arc<str>>,
}

impl Topics {
    fn intern(&mut self, name: &str) -> Arc<str> {
        if let Some(t) = self.last.as_ref().filter(|t| &***t == name) {
            return Arc::clone(t);
        }
        let t = match self.names.get(name) {
            Some(t) => Arc::clone(t),
            None => {
                let t: Arc<str> = Arc::from(name);
                self.names.insert(name.to_string(), Arc::clone(&t));
                t
            }
        };
        self.last = Some(Arc::clone(&t));
        t
    }
}

/// How long one wait for room in the queue lasts before the loop checks for a stop.
const BLOCK_SLICE: Duration = Duration::from_millis(100);
/// How long the queue may stay full before the partitions are paused to keep polling.
const PAUSE_AFTER: Duration = Duration::from_secs(1);

/// The most records in flight (read, not yet below the watermark): each costs a few bytes in
/// the tracker, and a partition stuck on one unacknowledged record must not grow it forever.
const MAX_IN_FLIGHT: usize = 250_000;

/// The most records read in a row before the loop's bookkeeping (stores, hand-over, stop).
const READ_BURST: usize = 256;

/// With `kafka.exit_at_end`, how often an idle source checks whether it has read everything
/// (librdkafka's cached watermarks: no request to the broker).
const END_CHECK_EVERY: Duration = Duration::from_millis(10);

/// How often moved watermarks are handed to librdkafka's offset store.
const STORE_EVERY: Duration = Duration::from_millis(20);

/// How the source cuts the stream into batches (`[pipeline]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchLimits {
    /// Records per batch.
    pub max_records: usize,
    /// Payload bytes per batch (so at most one record more).
    pub max_bytes: usize,
    /// Longest wait to fill a batch.
    pub linger: Duration,
}

/// The consumer and its loop.
pub struct KafkaSource {
    consumer: BaseConsumer<SourceContext>,
    tracker: Arc<Tracker>,
    batch_max_records: usize,
    batch_max_bytes: usize,
    linger: Duration,
    drain_timeout: Duration,
    topics: Topics,
    /// `kafka.exit_at_end`.
    exit_at_end: bool,
    /// What `kafka.exit_at_end` learnt of the partitions' ends.
    ends: Ends,
    /// `kafka.auto_offset_reset` is `latest`: a partition without a committed offset starts
    /// at its end.
    starts_at_latest: bool,
}

impl KafkaSource {
    /// Creates the consumer and subscribes. Nothing is read until [`KafkaSource::run`].
    /// `links` are shared with the producer, so that a broker outage is one outage.
    pub fn new(
        kafka: &KafkaConfig,
        settings: &KafkaSettings,
        batch: BatchLimits,
        health: Arc<Health>,
        metrics: Arc<crate::metrics::Metrics>,
        links: Arc<BrokerLinks>,
    ) -> Result<Self, SourceError> {
        let tracker = Arc::clone(&health.tracker);
        let mut cc = ClientConfig::new();
        cc.set_log_level(crate::kafka::librdkafka_log_level());
        for (k, v) in &settings.consumer {
            cc.set(k, v);
        }
        let context = SourceContext {
            tracker: Arc::clone(&tracker),
            health,
            metrics,
            queue: Mutex::new(Queue::default()),
            paused: AtomicBool::new(false),
            assigned: Mutex::new(HashMap::new()),
            partitions: Mutex::new(HashMap::new()),
            closing: AtomicBool::new(false),
            cooperative: settings.cooperative(),
            drain_timeout: kafka.drain_timeout,
            commits: Mutex::new(CommitPolicy::new(kafka.commit_interval)),
            links,
        };
        let consumer: BaseConsumer<SourceContext> = cc
            .create_with_context(context)
            .map_err(SourceError::Create)?;
        let topics: Vec<&str> = kafka.topics.iter().map(|t| t.as_subscription()).collect();
        consumer
            .subscribe(&topics)
            .map_err(|error| SourceError::Subscribe {
                topics: topics.iter().map(|s| s.to_string()).collect(),
                error,
            })?;
        Ok(KafkaSource {
            consumer,
            tracker,
            batch_max_records: batch.max_records,
            batch_max_bytes: batch.max_bytes,
            linger: batch.linger,
            drain_timeout: kafka.drain_timeout,
            topics: Topics::default(),
            exit_at_end: kafka.exit_at_end,
            ends: Ends::default(),
            starts_at_latest: kafka.auto_offset_reset == "latest",
        })
    }

    /// Registers a batch's records in the tracker before it is handed on; a record the
    /// tracker refuses (offsets going backwards: a bug) is logged and not handed on.
    fn register(&self, mut batch: Batch) -> Batch {
        let failed = self
            .tracker
            .register_many(batch.records.iter_mut().map(|r| &mut r.id));
        if failed.is_empty() {
            return batch;
        }
        for (i, e) in &failed {
            tracing::error!(partition = %batch.records[*i].id.tp, error = %e, "offset tracking");
        }
        let mut i = 0;
        let _ = batch.split_off_where(|_| {
            i += 1;
            failed.iter().any(|(f, _)| *f == i - 1)
        });
        batch
    }

    fn ctx(&self) -> &SourceContext {
        self.consumer.context()
    }

    /// Stores the watermarks that moved.
    fn store(&self) {
        let moved = self.tracker.take_stores();
        if moved.is_empty() {
            return;
        }
        if let Err(e) = self.consumer.store_offsets(&to_tpl(&moved)) {
            // A partition revoked between the ack and now: its new owner reprocesses.
            tracing::debug!(error = %e, "storing offsets");
        }
        self.ctx().commits().stored(&moved);
    }

    /// Stores the watermarks that moved and commits what is stored when the policy says so,
    /// asynchronously (librdkafka commits only partitions whose stored offset moved past the
    /// committed one; the commit callback reports failures, and the next commit retries).
    fn store_and_commit(&self, now: Instant) {
        self.store();
        let mut commits = self.ctx().commits();
        if !commits.due(now) {
            return;
        }
        commits.committed(now);
        drop(commits);
        tracing::debug!("committing the stored offsets");
        match self.consumer.commit_consumer_state(CommitMode::Async) {
            Ok(())
            | Err(KafkaError::ConsumerCommit(rdkafka::types::RDKafkaErrorCode::NoOffset)) => {}
            Err(e) => tracing::debug!(error = %e, "requesting an offset commit"),
        }
    }

    /// Whether every partition assigned to this member has been read to its end
    /// (`kafka.exit_at_end`), asked only when every record read has been handed on and at most
    /// every [`END_CHECK_EVERY`]. See [`Ends`] for what is asked of the broker, and when.
    fn idle_at_end(&mut self) -> bool {
        let queue = self.ctx().queue();
        if queue.waiting.is_some() || !queue.pending.records.is_empty() {
            return false;
        }
        drop(queue);
        if self.ends.checked.elapsed() < END_CHECK_EVERY {
            return false;
        }
        self.ends.checked = Instant::now();
        let Some(next) = end::positions(&self.consumer) else {
            return false; // not assigned yet, or between assignments
        };
        self.ends
            .read_to_end(&next, &self.consumer, self.starts_at_latest)
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
        self.ctx()
            .health
            .set_paused(if pause { assignment.count() } else { 0 });
    }

    /// Reads until `stop` is requested or the matcher hangs up, then drains: in-flight records
    /// get until `kafka.drain_timeout_ms` to reach a terminal state, the watermarks are stored
    /// and committed synchronously, and the consumer leaves the group.
    pub fn run(mut self, tx: Sender<Batch>, stop: Arc<Shutdown>) {
        // Watermarks are stored every few milliseconds, not per record, and commits are paced
        // by the commit policy.
        let mut stored_at = Instant::now();
        let mut blocked_since: Option<Instant> = None;
        while !stop.requested() {
            // One clock read per iteration: it showed up in profiles when taken per check.
            let now = Instant::now();
            if now.duration_since(stored_at) >= STORE_EVERY {
                self.store_and_commit(now);
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
                            .map(|b| self.register(b))
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
                    // A replay (`kafka.exit_at_end`) looks for its end sooner.
                    None if self.exit_at_end => END_CHECK_EVERY,
                    None => Duration::from_millis(100),
                }
            };
            // Up to READ_BURST records per pass: the bookkeeping above runs once per burst.
            let burst = if waiting { 1 } else { READ_BURST };
            for n in 0..burst {
                let timeout = if n == 0 { timeout } else { Duration::ZERO };
                let msg = match self.consumer.poll(timeout) {
                    Some(Ok(msg)) => msg,
                    Some(Err(e)) => {
                        self.ctx().links.error(KafkaClient::Consumer, &e, "");
                        break;
                    }
                    None => {
                        if n == 0 && self.exit_at_end && self.idle_at_end() {
                            tracing::info!(
                                "every assigned partition is read to its end \
                                 (kafka.exit_at_end): stopping"
                            );
                            stop.request();
                        }
                        break;
                    }
                };
                let topic = self.topics.intern(msg.topic());
                // Registered in the tracker when its batch is handed on (epoch 0 until then):
                // one lock per batch instead of one per record.
                let id = RecordId {
                    tp: TopicPartition {
                        topic,
                        partition: msg.partition(),
                    },
                    epoch: 0,
                    offset: msg.offset(),
                };
                let headers = msg
                    .headers()
                    .map(|h| {
                        h.iter()
                            .map(|h| (h.key.to_string(), h.value.map(<[u8]>::to_vec)))
                            .collect()
                    })
                    .unwrap_or_default();
                let mut queue = self.ctx().queue();
                let pending = &mut queue.pending;
                pending.push(id, msg.key(), msg.payload(), headers);
                if pending.records.len() >= self.batch_max_records
                    || pending.bytes >= self.batch_max_bytes
                {
                    break;
                }
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

    #[test]
    fn the_assignment_protocol_follows_the_last_strategy_setting() {
        let set = |v: &[&str]| KafkaSettings {
            consumer: v
                .iter()
                .map(|s| ("partition.assignment.strategy".to_string(), s.to_string()))
                .collect(),
            producer: Vec::new(),
        };
        assert!(set(&["cooperative-sticky"]).cooperative());
        assert!(!set(&["cooperative-sticky", "range,roundrobin"]).cooperative());
        assert!(set(&["range", " cooperative-sticky"]).cooperative());
        assert!(!set(&[]).cooperative(), "librdkafka's default is eager");
    }

    fn id(partition: i32, offset: i64) -> RecordId {
        RecordId {
            tp: TopicPartition {
                topic: Arc::from("logs"),
                partition,
            },
            epoch: 0,
            offset,
        }
    }

    #[test]
    fn a_batch_is_full_at_exactly_its_record_or_byte_limit() {
        let ten = [b'x'; 10];
        let mut b = Batch::default();
        b.push(id(0, 0), None, Some(&ten), Vec::new());
        b.push(id(0, 1), None, Some(&ten), Vec::new());
        assert!(
            !b.full(3, 21),
            "one record and one byte short of either limit"
        );
        b.push(id(0, 2), None, Some(b""), Vec::new());
        assert!(b.full(3, 1 << 20), "exactly pipeline.batch_max_records");
        let mut b = Batch::default();
        b.push(id(0, 0), None, Some(&[b'x'; 20]), Vec::new());
        assert!(!b.full(1000, 21));
        b.push(
            id(0, 1),
            Some(b"key bytes do not count"),
            Some(b"x"),
            Vec::new(),
        );
        assert!(b.full(1000, 21), "exactly pipeline.batch_max_bytes");
        assert_eq!(b.bytes, 21);
    }

    fn partition(app: i64, ls: i64, hi: i64, committed_lag: i64) -> rdkafka::statistics::Partition {
        // librdkafka's statistics JSON for one partition, only the fields that matter here.
        let mut v = serde_json::json!({
            "partition": 0, "broker": 1, "leader": 1, "desired": true, "unknown": false,
            "msgq_cnt": 0, "msgq_bytes": 0, "xmit_msgq_cnt": 0, "xmit_msgq_bytes": 0,
            "fetchq_cnt": 0, "fetchq_size": 0, "fetch_state": "active", "query_offset": 0,
            "next_offset": 0, "app_offset": app, "stored_offset": -1, "committed_offset": -1,
            "committed_leader_epoch": -1, "eof_offset": -1, "lo_offset": 0, "hi_offset": hi,
            "ls_offset": ls, "consumer_lag": committed_lag, "consumer_lag_stored": -1,
            "txmsgs": 0, "txbytes": 0, "rxmsgs": 0, "rxbytes": 0, "msgs": 0,
            "rx_ver_drops": 0, "msgs_inflight": 0, "next_ack_seq": 0, "next_err_seq": 0,
            "acked_msgid": 0
        });
        if let Some(m) = v.as_object_mut() {
            m.insert("leader_epoch".into(), serde_json::json!(-1));
        }
        serde_json::from_value(v).expect("a statistics partition")
    }

    #[test]
    fn lag_counts_from_what_was_read_not_from_the_held_commit() {
        // Read up to 900 of 1000; the commit is held back at 100 by an open incident.
        assert_eq!(read_lag(&partition(900, 1000, 1000, 900)), Some(100));
        // Transactions: the last stable offset is the end, not the high watermark.
        assert_eq!(read_lag(&partition(900, 950, 1000, 850)), Some(50));
        // Nothing read yet: librdkafka's own figure, when it has one.
        assert_eq!(read_lag(&partition(-1, 1000, 1000, 1000)), Some(1000));
        // Nothing read and nothing committed: from the fetch position (0 here).
        assert_eq!(read_lag(&partition(-1, 7, 7, -1)), Some(7));
        assert_eq!(
            read_lag(&partition(-1, 0, 0, -1)),
            Some(0),
            "an empty partition is not behind"
        );
        // A partition this member does not consume.
        assert_eq!(read_lag(&partition(-1, -1, -1, -1)), None);
    }

    #[test]
    fn a_batch_keeps_each_records_key_and_payload_apart() {
        let mut b = Batch::default();
        b.push(id(0, 1), Some(b"job-1"), Some(b"line one\n"), Vec::new());
        b.push(
            id(0, 2),
            None,
            None,
            vec![("h".into(), Some(b"v".to_vec()))],
        );
        b.push(id(1, 7), Some(b""), Some(b"two\nlines"), Vec::new());
        assert_eq!(b.bytes, 9 + 9);
        let views: Vec<_> = b.records.iter().map(|r| b.view(r)).collect();
        assert_eq!(views[0].key, Some(&b"job-1"[..]));
        assert_eq!(views[0].payload, Some(&b"line one\n"[..]));
        assert_eq!(
            (views[1].key, views[1].payload),
            (None, None),
            "a tombstone"
        );
        assert_eq!(views[1].headers.len(), 1);
        assert_eq!(
            views[2].key,
            Some(&b""[..]),
            "an empty key is not a missing one"
        );
        assert_eq!(views[2].payload, Some(&b"two\nlines"[..]));
    }

    #[test]
    fn records_split_off_leave_the_others_readable() {
        let mut b = Batch::default();
        for (p, o, text) in [(0, 1, "a0"), (1, 1, "b1"), (0, 2, "a2"), (1, 2, "b22")] {
            b.push(id(p, o), None, Some(text.as_bytes()), Vec::new());
        }
        let gone = b.split_off_where(|r| r.id.tp.partition == 1);
        assert_eq!(gone.iter().map(|r| r.id.offset).collect::<Vec<_>>(), [1, 2]);
        let kept: Vec<_> = b.records.iter().map(|r| b.payload(r)).collect();
        assert_eq!(kept, [Some(&b"a0"[..]), Some(&b"a2"[..])]);
        assert_eq!(b.bytes, 4, "the batch limit counts what is left");
        let gone = b.split_off_where(|_| true);
        assert_eq!(gone.len(), 2);
        assert!(
            b.is_empty() && b.started.is_none(),
            "an empty batch does not linger"
        );
    }
}
