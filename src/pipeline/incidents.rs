//! Incidents from `faultline run`: the matcher's events through the [`Correlator`], incident
//! changes to the incidents topic, to the admin server's incident store, and to every incident
//! output that wants them (Alertmanager, the ticket webhook: [`crate::sink::output`], each on
//! its worker of [`super::outputs`]).
//!
//! ```text
//!  MatchStage::process ── events ──▶ IncidentStage::observe ──▶ Correlator
//!        │ (before the records are resolved)   │ hold the incident's first record per partition
//!        ▼                                     ▼
//!  tick (idle, per batch) ──▶ expire ──▶ changes ──▶ incidents topic (key: id)
//!                                               ├──▶ incident store (admin pages, API)
//!                                               └──▶ each output that wants it: its worker
//!                                                    (bounded queue) ──▶ HTTP
//! ```
//!
//! # What is guaranteed
//!
//! The correlator's state lives in memory and is lost on a restart; the log is its durable
//! copy. While an incident is open, the offset committed for each partition it read from stays
//! at the first record it read there ([`Tracker::hold`]); the holds are lifted once the
//! incident's `resolved` change is acknowledged by the broker and handled by every output that
//! wants it (delivered, or dead-lettered and that dead letter acknowledged). So after a crash, a SIGKILL or a graceful stop, the restarted service reads
//! every open incident again from its first record and correlates it into the same incident:
//! same root, same fingerprint, same ticket. Every change is produced at least once (a replay
//! produces the changes again: consumers key on `fingerprint`, webhooks receive the same
//! `Idempotency-Key`s for the same changes). Match events are unaffected: they are replayed too
//! and are at-least-once as before.
//!
//! A resolved incident stays held while the correlator keeps it for late lines, at most
//! `incidents.resolved_hold_ms` after its resolution: a correlator that takes over within it
//! reads the failure again, from the incidents topic knows it was announced
//! ([`super::rebuild`], read after each rebalance that assigned partitions), withholds the
//! replay, and revises the failure under its id when a late line arrives.
//!
//! A node's own event (an Xid in the kernel log) is held too, on its own, while it may still
//! join the incident of a job that shows up later (its log time plus `node_join_ms` and
//! `window_ms`), and by every incident that elects it as its root until that resolves: after a
//! restart the Xid is read again before the job's lines, and the same root is elected.
//!
//! Bounds: a hold never keeps records in flight (only the committed offset waits), but a
//! restart re-reads everything after the oldest held record. An incident held longer than
//! `incidents.max_hold_ms` has its holds lifted (counted, logged): past that, a crash loses
//! its state like any in-memory state, and the rest of the incident after a restart is a new
//! incident (with the fingerprint of what the restarted service sees first).
//!
//! Time: the correlator runs on the logs' clock. When no match arrives, [`LogClock`] lets that
//! clock run on at wall-clock speed from the last log time seen, so incidents resolve after
//! their quiet period even when the logs are replayed from the past.
//!
//! Outputs: each on its own thread behind a bounded queue (`webhook.queue`,
//! `alertmanager.queue`); the matcher never waits for HTTP. A full queue drops the change,
//! counted in `faultline_output_changes_total{output, result="dropped"}` and logged; what an
//! output gives up on goes to the dead-letter topic (`dead_letter.undeliverable_topic`, by
//! default `dead_letter.topic`) with its reason (`ticket_undeliverable`,
//! `alert_undeliverable`), the output as stage and the attempts made, so it outlives the node
//! ([`super::outputs`] has the rules).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::outputs::{DeadLetters, OutputQueue};
use super::Stop;
use crate::enrich::MatchEvent;
use crate::incident::config::IncidentsConfig;
use crate::incident::unrecognised::{RecentUnknown, UnknownSeen};
use crate::incident::{Correlator, CorrelatorStats, IncidentEvent, Status};
use crate::metrics::{Eviction, IncidentFamilies, Metrics, ResolutionLabel};
use crate::offsets::{RecordId, Release, Tracker};
use crate::server::store::IncidentStore;
use crate::sink::kafka::KafkaSink;
use crate::sink::output::{OutputError, QueuedOutput};
use crate::source::kafka::SourceRecord;
use crate::telemetry::IncidentTracer;
use crate::time::Millis;

/// The correlator's clock when no match tells the time: the last log time seen plus the wall
/// time since, while the input is current ([`LogClock::set_current`]). Log times only move it
/// forward.
///
/// Why it stops while the input is behind: an incident resolves once its job has been quiet
/// for `quiet_ms` of this clock. While the source cannot read (a broker outage), is paused by
/// backpressure or is catching up on a backlog, the job's next lines may be waiting in Kafka;
/// run on at wall speed, the clock resolved incidents between two lines of one failure, and
/// the second line opened a second incident (the soak saw it after outages and takeovers).
#[derive(Debug)]
pub struct LogClock {
    base: Option<(Millis, Instant)>,
    /// Whether wall time counts: the input is read up to its end.
    current: bool,
}

impl Default for LogClock {
    fn default() -> Self {
        LogClock {
            base: None,
            current: true,
        }
    }
}

impl LogClock {
    /// Whether the input is current (every assigned partition read to its end, the broker
    /// reachable): wall time counts only while it is.
    pub fn set_current(&mut self, current: bool, at: Instant) {
        if current == self.current {
            return;
        }
        // Re-anchored at `at`: a stop keeps the time reached, a restart runs on from it.
        self.base = self.now(at).map(|t| (t, at));
        self.current = current;
    }

    /// The correlator's clock after some matches: re-anchors when the logs are ahead.
    pub fn observed(&mut self, log_now: Option<Millis>, at: Instant) {
        let Some(t) = log_now else {
            return;
        };
        if self.now(at).is_none_or(|extrapolated| t > extrapolated) {
            self.base = Some((t, at));
        }
    }

    /// The clock at wall time `at`; `None` before any log time was seen.
    pub fn now(&self, at: Instant) -> Option<Millis> {
        self.base.map(|(t, since)| {
            if self.current {
                t.saturating_add(at.saturating_duration_since(since).as_millis() as Millis)
            } else {
                t
            }
        })
    }
}

/// An incident's holds on the commit.
#[derive(Debug)]
struct Held {
    /// The first record read from each partition (and assignment).
    ids: Vec<RecordId>,
    since: Instant,
    /// Lifted after `max_hold`: no new holds for this incident.
    expired: bool,
}

/// A node event's record (a kernel or node-daemon line), held while the event may still join
/// the incident of a job that shows up later: until the log clock passes its time by
/// `node_join_ms` plus `window_ms`, or `max_hold`. An incident that elects it as its root holds
/// it again, until its resolution.
#[derive(Debug)]
struct NodeHold {
    id: RecordId,
    /// The correlator's clock when it was observed.
    at: Option<Millis>,
    since: Instant,
}

/// Reads back what the previous owners of this member's partitions published
/// ([`super::rebuild::known_incidents`]; blocking), once after each rebalance that assigned
/// partitions ([`crate::runtime::health::Health::assignments`]).
pub struct KnownReader {
    /// Whose assignments count.
    pub health: Arc<crate::runtime::health::Health>,
    /// The read.
    pub read: Box<dyn FnMut() -> Vec<super::rebuild::KnownIncident> + Send>,
    /// Assignments read for so far.
    pub seen: u64,
}

/// Whether an incident change is news to the consumers (see [`IncidentStage::emit`]).
enum News {
    New,
    /// A replay of what a previous correlator announced.
    Withheld,
    /// A previous correlator's resolved incident, revised: how it had ended, and the last
    /// revision published of it.
    Revised(super::rebuild::Outcome, u64),
}

/// Node events held at once; past it the oldest hold is lifted (counted as expired).
pub const MAX_NODE_HOLDS: usize = 10_000;

/// Where incident changes go besides the incidents topic.
#[derive(Default)]
pub struct Outputs {
    /// The incident outputs, built, each with its queue size.
    pub list: Vec<QueuedOutput>,
    /// The admin server's incident store.
    pub store: Option<Arc<IncidentStore>>,
    /// Where undeliverable ticket changes and alerts go; `None`: the sink's dead-letter topic.
    pub undeliverable_topic: Option<String>,
}

impl std::fmt::Debug for Outputs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.list.iter().map(|(o, _)| o.name()).collect();
        f.debug_struct("Outputs").field("list", &names).finish()
    }
}

/// The incident part of the matcher thread.
pub struct IncidentStage {
    topic: String,
    correlator: Correlator,
    sink: Arc<KafkaSink>,
    tracker: Arc<Tracker>,
    stop: Arc<Stop>,
    families: IncidentFamilies,
    tracer: Option<IncidentTracer>,
    outputs: Vec<OutputQueue>,
    store: Option<Arc<IncidentStore>>,
    holds: HashMap<u64, Held>,
    /// Node events' records, oldest first.
    node_holds: std::collections::VecDeque<NodeHold>,
    /// The last record observed per partition, with its assignment: records processed again
    /// (the matcher's panic fallback retries what had not gone out) are not counted twice.
    observed: HashMap<crate::offsets::TopicPartition, (u64, i64)>,
    changes: Vec<IncidentEvent>,
    json: Vec<u8>,
    clock: LogClock,
    /// The input partitions' low watermark, which expiry waits for.
    lanes: super::lanes::Lanes,
    /// The log time of each event of the batch being observed (reused).
    times: Vec<Option<crate::time::Millis>>,
    max_hold: Duration,
    /// How long a resolved incident holds its records for late lines ([`IncidentsConfig`]).
    resolved_hold: Duration,
    /// Resolutions whose records stay held while the correlator keeps the incident for late
    /// lines: the time of the resolution, the incident's serial, and the release's last party.
    revisable: std::collections::VecDeque<(Instant, u64, Arc<Release>)>,
    /// Serials the correlator forgot (reused).
    forgotten: Vec<u64>,
    /// How the incidents a previous correlator resolved ended, by id, and the last revision
    /// published of each: read again (their records were held), they are not announced again
    /// unless their outcome changes, and then under revisions after those published.
    resolved_before: HashMap<String, (super::rebuild::Outcome, u64)>,
    /// Reads the incidents topic back after each rebalance that assigned partitions.
    known: Option<KnownReader>,
    published: CorrelatorStats,
    last_publish: Option<Instant>,
    /// Unknown templates per job, listed in incidents without a known root; `None`: unknown
    /// events are off.
    recent: Option<RecentUnknown>,
}

impl std::fmt::Debug for IncidentStage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IncidentStage")
            .field("topic", &self.topic)
            .field("open", &self.correlator.open_incidents())
            .field("holds", &self.holds.len())
            .finish()
    }
}

impl IncidentStage {
    /// The stage and the delivery threads of its outputs (join them after the matcher).
    pub fn start(
        config: &IncidentsConfig,
        outputs: Outputs,
        sink: Arc<KafkaSink>,
        tracker: Arc<Tracker>,
        stop: Arc<Stop>,
        metrics: &Metrics,
        tracer: Option<IncidentTracer>,
    ) -> Result<(Self, Vec<std::thread::JoinHandle<()>>), StartError> {
        let mut correlator = Correlator::new(config.correlator.clone())?;
        if !config.resolved_hold.is_zero() {
            correlator.track_forgotten();
        }
        let dead = DeadLetters {
            topic: outputs
                .undeliverable_topic
                .clone()
                .unwrap_or_else(|| sink.dead_letter_topic.clone()),
            sink: Arc::clone(&sink),
            stop: Arc::clone(&stop),
        };
        let mut queues = Vec::new();
        let mut threads = Vec::new();
        for (output, queue) in outputs.list {
            let (q, thread) = OutputQueue::spawn(output, queue, metrics.outputs(), dead.clone())
                .map_err(StartError::Thread)?;
            queues.push(q);
            threads.push(thread);
        }
        Ok((
            IncidentStage {
                topic: config.topic.clone(),
                correlator,
                sink,
                tracker,
                stop,
                families: metrics.incidents().clone(),
                tracer,
                outputs: queues,
                store: outputs.store,
                holds: HashMap::new(),
                node_holds: std::collections::VecDeque::new(),
                observed: HashMap::new(),
                changes: Vec::new(),
                json: Vec::new(),
                clock: LogClock::default(),
                lanes: super::lanes::Lanes::default(),
                times: Vec::new(),
                max_hold: config.max_hold,
                resolved_hold: config.resolved_hold,
                revisable: std::collections::VecDeque::new(),
                forgotten: Vec::new(),
                resolved_before: HashMap::new(),
                known: None,
                published: CorrelatorStats::default(),
                last_publish: None,
                recent: None,
            },
            threads,
        ))
    }

    /// Feeds a batch's events (with the index of their record) to the correlator and holds
    /// the commit at each incident's first record per partition. Call it before the records
    /// are resolved in the tracker, so no watermark passed them yet.
    pub fn observe(&mut self, records: &[SourceRecord], events: &[(usize, MatchEvent)]) {
        if events.is_empty() {
            return;
        }
        self.read_known();
        let now = Instant::now();
        // Expiry waits for the slowest input partition, this batch's lines included. Each
        // event's log time is read once, here, for the lanes and the correlator.
        self.times.clear();
        for (_, event) in events {
            let t = self.correlator.log_ms(event);

            self.lanes.note(event, t, now);
            self.times.push(t);
        }
        self.correlator.hold_expiry(self.lanes.low_watermark(now));
        // The last record of each partition in this batch, recorded once the batch is done.
        let mut last: Vec<&RecordId> = Vec::new();
        for (k, (i, event)) in events.iter().enumerate() {
            let Some(record) = records.get(*i) else {
                continue;
            };
            let id = &record.id;
            // Seen before: the panic fallback processing a batch again, or a partition revoked
            // and assigned back, whose records are read again from the held commit. While the
            // job's incident is open the correlator counted it already; only the hold of this
            // assignment is renewed. Once that incident resolved, the line is observed again:
            // skipped, the job's next line would open an incident of its own without it (the
            // soak saw one failure become two incidents that way after a rebalance).
            let seen = self
                .observed
                .get(&id.tp)
                .is_some_and(|&(_, offset)| id.offset <= offset)
                && self.correlator.open_serial(&event.job_id).is_some();
            if !seen {
                match last.iter_mut().find(|l| l.tp == id.tp) {
                    Some(l) => *l = id,
                    None => last.push(id),
                }
                self.correlator
                    .observe_at(event, self.times[k], &mut self.changes);
                if let Some(store) = &self.store {
                    store.observe_match(event);
                }
                if event.scope == crate::enrich::Scope::Node {
                    self.hold_node(id);
                }
            }
            let Some(serial) = self.correlator.open_serial(&event.job_id) else {
                continue;
            };
            let held = self.holds.entry(serial).or_insert_with(|| Held {
                ids: Vec::new(),
                since: now,
                expired: false,
            });
            if !held.expired
                && !held
                    .ids
                    .iter()
                    .any(|h| h.tp == id.tp && h.epoch == id.epoch)
            {
                self.tracker.hold(id);
                held.ids.push(id.clone());
            }
        }
        for id in last {
            self.observed.insert(id.tp.clone(), (id.epoch, id.offset));
        }
        self.clock.observed(self.correlator.now(), now);
        self.emit();
    }

    /// Notes a match member's progress ([`super::progress`]): input partition `partition` of
    /// `topic` was read up to a line stamped `stamp`; while it is `behind` (records not yet
    /// read), expiry waits for it whether or not its lines match.
    /// A partition behind whose position is not known yet (`stamp` none) holds expiry where it
    /// is until the partition reports one.
    pub fn progress(&mut self, topic: &str, partition: i32, stamp: Option<&str>, behind: bool) {
        let t = match stamp {
            Some(stamp) => self.correlator.stamp_ms(stamp),
            None if behind => Some(super::lanes::UNKNOWN),
            None => None,
        };
        let Some(t) = t else {
            return;
        };
        let now = Instant::now();
        self.lanes.progress(topic, partition, t, behind, now);
        self.correlator.hold_expiry(self.lanes.low_watermark(now));
    }

    /// Notes a match member's word that input partition `partition` of `topic` is not its own:
    /// one no member has told of yet holds expiry where it is for a while
    /// ([`super::lanes::Lanes::unassigned`]).
    pub fn unassigned(&mut self, topic: &str, partition: i32) {
        let now = Instant::now();
        self.lanes.unassigned(topic, partition, now);
        self.correlator.hold_expiry(self.lanes.low_watermark(now));
    }

    /// Reads what a previous correlator published with `reader` after each rebalance that
    /// assigned partitions (the first one included), before the first record read after it
    /// is correlated: a correlator that takes a shard over, even one started long before as a
    /// standby, knows what the shard's previous owner published up to then.
    pub fn adopt_on_assignment(&mut self, reader: KnownReader) {
        self.known = Some(reader);
    }

    /// Runs the [`KnownReader`] when an assignment came since its last read.
    fn read_known(&mut self) {
        let Some(r) = self.known.as_mut() else {
            return;
        };
        let now = r.health.assignments();
        if now == r.seen {
            return;
        }
        r.seen = now;
        let known = (r.read)();
        // The read holds every incident still worth knowing: what earlier reads left is
        // dropped, so a long-lived member's lists stay bounded by one read.
        self.correlator.forget_adopted();
        self.resolved_before.clear();
        self.adopt(known);
    }

    /// Adopts the ids of the incidents a previous correlator published
    /// ([`super::rebuild::known_incidents`]), and remembers how those it resolved ended.
    pub fn adopt(&mut self, known: Vec<super::rebuild::KnownIncident>) {
        for k in known {
            self.correlator
                .adopt(&k.job_id, &k.id, (k.first_log_ms, k.last_log_ms), &k.hosts);
            if let Some(outcome) = k.resolved {
                self.resolved_before.insert(k.id, (outcome, k.revision));
            }
        }
    }

    /// Lists the unknown templates `recent` remembers in incidents without a known root.
    pub fn track_unknown(&mut self, recent: RecentUnknown) {
        self.recent = Some(recent);
    }

    /// The correlator's log clock ([`Correlator::now`]).
    pub fn log_now(&self) -> Option<crate::time::Millis> {
        self.correlator.now()
    }

    /// Notes an unknown error line (see [`crate::incident::unrecognised`]).
    pub fn observe_unknown(&mut self, seen: &UnknownSeen<'_>) {
        if let Some(r) = self.recent.as_mut() {
            r.note(seen);
        }
    }

    /// Lets log time run on at wall speed while the input is `current` (see [`LogClock`]),
    /// resolves quiet incidents, lifts holds past `max_hold`, publishes metrics. Call it when
    /// idle and after each batch.
    pub fn tick(&mut self, current: bool) {
        self.read_known();
        let now = Instant::now();
        self.clock.set_current(current, now);
        self.correlator.hold_expiry(self.lanes.low_watermark(now));
        if let Some(t) = self.clock.now(now) {
            self.correlator.advance(t, &mut self.changes);
        }
        self.lift_node_holds(now);
        for (serial, held) in &mut self.holds {
            if !held.expired && now.duration_since(held.since) >= self.max_hold {
                for id in held.ids.drain(..) {
                    self.tracker.release(&id);
                }
                held.expired = true;
                self.families.holds_expired.inc();
                tracing::warn!(
                    serial,
                    max_hold_ms = self.max_hold.as_millis() as u64,
                    "incident open longer than incidents.max_hold_ms: its records are committed; \
                     a restart now loses its state"
                );
            }
        }
        self.emit();
        if self
            .last_publish
            .is_none_or(|at| now.duration_since(at) >= Duration::from_secs(1))
        {
            self.last_publish = Some(now);
            self.publish();
        }
    }

    /// Holds a node event's record ([`NodeHold`]).
    fn hold_node(&mut self, id: &RecordId) {
        if self.node_holds.len() >= MAX_NODE_HOLDS {
            if let Some(oldest) = self.node_holds.pop_front() {
                self.tracker.release(&oldest.id);
                self.families.holds_expired.inc();
            }
        }
        self.tracker.hold(id);
        self.node_holds.push_back(NodeHold {
            id: id.clone(),
            at: self.correlator.now(),
            since: Instant::now(),
        });
    }

    /// Lifts the holds of node events that can no longer join a new incident.
    fn lift_node_holds(&mut self, now: Instant) {
        let cfg = self.correlator.config();
        let reach = cfg.node_join_ms.saturating_add(cfg.window_ms);
        let clock = self.correlator.expiry_clock();
        while let Some(front) = self.node_holds.front() {
            let past = match (front.at, clock) {
                (Some(at), Some(clock)) => clock.saturating_sub(at) > reach,
                _ => false,
            };
            let expired = now.duration_since(front.since) >= self.max_hold;
            if !(past || expired) {
                break;
            }
            if expired && !past {
                self.families.holds_expired.inc();
            }
            self.tracker.release(&front.id);
            self.node_holds.pop_front();
        }
    }

    /// An incident whose root is a held node event holds that record too, until resolved.
    fn hold_node_root(&mut self, change: &IncidentEvent) {
        let crate::record::Provenance::Kafka {
            topic,
            partition,
            offset,
            ..
        } = &change.root.source
        else {
            return;
        };
        let Some(node) = self.node_holds.iter().find(|h| {
            h.id.offset == *offset && h.id.tp.partition == *partition && *h.id.tp.topic == **topic
        }) else {
            return;
        };
        let held = self.holds.entry(change.serial).or_insert_with(|| Held {
            ids: Vec::new(),
            since: Instant::now(),
            expired: false,
        });
        if !held.expired && !held.ids.contains(&node.id) {
            self.tracker.hold(&node.id);
            held.ids.push(node.id.clone());
        }
    }

    /// At a graceful stop: emits the current state of every open incident with changes not
    /// yet reported (they stay open, and held: the restarted service reads them again).
    pub fn flush_open(&mut self) {
        if self.stop.failed() {
            return;
        }
        self.correlator.flush(&mut self.changes);
        self.emit();
    }

    /// Produces the pending changes; a resolution lifts its incident's holds once delivered
    /// and, while the correlator keeps the incident for late lines, at most `resolved_hold`
    /// later. A change of an incident a previous correlator resolved ([`Self::adopt`]) goes out
    /// only when its resolution says something new, as an `updated` change and the
    /// resolution; the rest of its replay is withheld.
    fn emit(&mut self) {
        let mut changes = std::mem::take(&mut self.changes);
        for change in changes.drain(..) {
            let sent = match self.news(&change) {
                News::New => self.send(change, true),
                News::Withheld => self.send(change, false),
                News::Revised(before, published) => {
                    let mut change = change;
                    let mut update = change.clone();
                    update.status = Status::Updated;
                    update.resolution = None;
                    update.replaces = Some(Arc::new(before.root));
                    // After every revision published of it (idempotency keys name revisions).
                    update.revision = published + 1;
                    change.revision = published + 2;
                    self.send(update, true) && self.send(change, true)
                }
            };
            if !sent {
                break;
            }
        }
        self.changes = changes;
        self.changes.clear();
        self.settle(Instant::now());
    }

    /// Whether `change` is news (see [`Self::emit`]).
    fn news(&mut self, change: &IncidentEvent) -> News {
        let Some((before, published)) = self.resolved_before.get(&change.id) else {
            return News::New;
        };
        if change.status != Status::Resolved {
            return News::Withheld;
        }
        let outcome = super::rebuild::Outcome::of(change);
        if *before == outcome {
            return News::Withheld;
        }
        let now = (outcome, published + 2);
        match self.resolved_before.insert(change.id.clone(), now) {
            Some((before, published)) => News::Revised(before, published),
            None => News::New,
        }
    }

    /// Produces `change` when `announce`, else only records it in the incident store; false
    /// when the pipeline failed.
    fn send(&mut self, mut change: IncidentEvent, announce: bool) -> bool {
        if let Some(r) = &self.recent {
            r.attach(&mut change);
        }
        let change = &change;
        if change.status != Status::Resolved {
            self.hold_node_root(change);
        }
        let wanted: Vec<usize> = if announce {
            (0..self.outputs.len())
                .filter(|&i| self.outputs[i].wants(change))
                .collect()
        } else {
            Vec::new()
        };
        let release = (change.status == Status::Resolved).then(|| {
            let ids = self
                .holds
                .remove(&change.serial)
                .map(|h| h.ids)
                .unwrap_or_default();
            // The incidents topic, every output that takes the change, and the correlator
            // forgetting the incident (or `resolved_hold`).
            let revisable = !self.resolved_hold.is_zero();
            let parties = u32::from(announce) + wanted.len() as u32 + u32::from(revisable);
            let release = Release::new(Arc::clone(&self.tracker), ids, parties);
            if revisable {
                let at = Instant::now();
                self.revisable
                    .push_back((at, change.serial, Arc::clone(&release)));
            }
            release
        });
        let shared = (self.store.is_some() || !wanted.is_empty()).then(|| Arc::new(change.clone()));
        if let (Some(store), Some(shared)) = (&self.store, &shared) {
            store.record_shared(Arc::clone(shared));
        }
        if !announce {
            return true;
        }
        match change.status {
            Status::Open => self.families.opened(change),
            Status::Updated => {}
            Status::Resolved => {
                let label = change
                    .resolution
                    .map_or(ResolutionLabel::Quiet, ResolutionLabel::from);
                self.families.resolved(label);
                self.families.resolved_incident(change);
            }
        }
        if let Some(t) = &self.tracer {
            t.record(change);
        }
        self.json.clear();
        if let Err(e) = serde_json::to_writer(&mut self.json, change) {
            tracing::error!(error = %e, "serialising an incident");
        }
        if let Err(e) = self.sink.send_incident(
            &self.topic,
            &change.id,
            &self.json,
            release.clone(),
            &self.stop,
        ) {
            // Holds stay: after the restart the incident is read and produced again.
            self.stop.fail(e.into());
            return false;
        }
        if let Some(shared) = shared {
            for &i in &wanted {
                self.outputs[i].offer(Arc::clone(&shared), release.clone());
            }
        }
        true
    }

    /// Lifts the holds of resolved incidents the correlator forgot, and of those resolved
    /// `resolved_hold` ago.
    fn settle(&mut self, now: Instant) {
        self.correlator.drain_forgotten(&mut self.forgotten);
        if !self.forgotten.is_empty() {
            let gone: std::collections::HashSet<u64> = self.forgotten.drain(..).collect();
            self.revisable.retain(|(_, serial, release)| {
                let keep = !gone.contains(serial);
                if !keep {
                    release.done();
                }
                keep
            });
        }
        while let Some((at, _, _)) = self.revisable.front() {
            if now.duration_since(*at) < self.resolved_hold {
                break;
            }
            if let Some((_, _, release)) = self.revisable.pop_front() {
                release.done();
            }
        }
    }

    fn publish(&mut self) {
        let f = &self.families;
        let s = self.correlator.stats().clone();
        let p = &self.published;
        f.evicted(
            Eviction::Incident,
            s.evicted_incidents - p.evicted_incidents,
        );
        f.evicted(Eviction::Job, s.evicted_jobs - p.evicted_jobs);
        f.restart_loops.inc_by(s.restart_loops - p.restart_loops);
        f.tickets_raised.inc_by(s.tickets - p.tickets);
        f.open.set(self.correlator.open_incidents() as i64);
        let incident_holds: usize = self.holds.values().map(|h| h.ids.len()).sum();
        f.holds
            .set((incident_holds + self.node_holds.len() + self.revisable.len()) as i64);
        if let Some(t) = self.correlator.now() {
            f.bad_node_score_max
                .set(self.correlator.fleet().max_score(t).unwrap_or(0.0));
        }
        self.published = s;
    }
}

/// Why the incident stage could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The incident settings are inconsistent.
    #[error(transparent)]
    Config(#[from] crate::incident::IncidentConfigError),
    /// An output could not be built.
    #[error(transparent)]
    Output(#[from] OutputError),
    /// The OS refused to spawn an output's delivery thread.
    #[error("starting an incident delivery thread: {0}")]
    Thread(std::io::Error),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::incident::testutil::event;
    use crate::kb::Role;
    use crate::offsets::TopicPartition;
    use crate::source::kafka::Batch;

    /// The partition the tests read.
    fn logs() -> TopicPartition {
        TopicPartition {
            topic: Arc::from("logs"),
            partition: 0,
        }
    }

    /// A batch of `tp`'s records at `offsets`, registered in `tracker` (job `job`).
    fn registered(tracker: &Tracker, tp: &TopicPartition, offsets: &[i64]) -> Batch {
        let mut batch = Batch::default();
        for &offset in offsets {
            let id = tracker.register(tp, offset).expect("registers");
            batch.push(id, Some(b"job"), Some(b"line"), Vec::new());
        }
        batch
    }

    #[test]
    fn the_log_clock_runs_at_wall_speed_from_the_last_log_time() {
        let mut c = LogClock::default();
        let t0 = Instant::now();
        assert_eq!(c.now(t0), None);
        c.observed(None, t0);
        assert_eq!(c.now(t0), None);
        c.observed(Some(1_000), t0);
        let later = t0 + Duration::from_millis(250);
        assert_eq!(c.now(later), Some(1_250));
        // A log time behind the extrapolated clock does not pull it back.
        c.observed(Some(1_100), later);
        assert_eq!(c.now(later), Some(1_250));
        // Logs ahead of it re-anchor it.
        c.observed(Some(9_000), later);
        assert_eq!(c.now(later + Duration::from_millis(5)), Some(9_005));
    }

    #[test]
    fn the_log_clock_stops_while_the_input_is_behind() {
        let mut c = LogClock::default();
        let t0 = Instant::now();
        c.observed(Some(1_000), t0);
        let ms = |n| t0 + Duration::from_millis(n);
        c.set_current(false, ms(100));
        assert_eq!(c.now(ms(100)), Some(1_100), "the time reached is kept");
        assert_eq!(c.now(ms(60_000)), Some(1_100), "a stall does not count");
        // Log times still move it while behind.
        c.observed(Some(2_000), ms(60_000));
        assert_eq!(c.now(ms(70_000)), Some(2_000));
        c.set_current(true, ms(70_000));
        assert_eq!(
            c.now(ms(70_250)),
            Some(2_250),
            "runs on from where it stopped"
        );
        c.set_current(true, ms(70_500));
        assert_eq!(
            c.now(ms(70_500)),
            Some(2_500),
            "a repeated state changes nothing"
        );
    }

    /// An incident stage with no webhook and no Alertmanager, over `tracker`.
    fn bare_stage(tracker: &Arc<Tracker>) -> IncidentStage {
        stage_with(
            tracker,
            crate::incident::config::RawIncidentsConfig {
                topic: Some("incidents".into()),
                quiet_ms: Some(10_000),
                window_ms: Some(10_000),
                ..Default::default()
            },
        )
    }

    /// [`bare_stage`] with `[incidents]` as `raw` says.
    fn stage_with(
        tracker: &Arc<Tracker>,
        raw: crate::incident::config::RawIncidentsConfig,
    ) -> IncidentStage {
        let settings = crate::kafka::KafkaSettings {
            consumer: Vec::new(),
            producer: vec![("bootstrap.servers".into(), "127.0.0.1:1".into())],
        };
        let sink = Arc::new(
            KafkaSink::new(
                &settings,
                "events",
                "dead",
                Arc::clone(tracker),
                Arc::default(),
            )
            .expect("a producer needs no broker to start"),
        );
        let metrics = Metrics::new(crate::metrics::MetricsConfig::default()).expect("registry");
        let mut errors = Vec::new();
        let config = IncidentsConfig::from_raw(
            &raw,
            &mut crate::section::Errors::new("incidents", &mut errors),
        )
        .expect("valid");
        let (stage, threads) = IncidentStage::start(
            &config,
            Outputs::default(),
            sink,
            Arc::clone(tracker),
            Stop::new(),
            &metrics,
            None,
        )
        .expect("starts");
        assert!(threads.is_empty(), "no webhook, no Alertmanager");
        stage
    }

    /// A batch processed again (the panic fallback) is not counted twice, and the incident
    /// holds the commit at its first record.
    #[test]
    fn records_seen_before_are_not_observed_again() {
        let tracker = Tracker::new();
        let mut stage = bare_stage(&tracker);
        let tp = logs();
        let batch = registered(&tracker, &tp, &[0, 1, 2]);
        let events: Vec<(usize, MatchEvent)> = (1..3)
            .map(|i| {
                let role = if i == 1 { Role::Root } else { Role::Cascade };
                (
                    i,
                    event("XID_79", role, "gpu_hardware")
                        .ts("2024-05-01T12:00:00Z")
                        .build(),
                )
            })
            .collect();
        stage.observe(&batch.records, &events);
        stage.observe(&batch.records[1..], &events[1..]);
        assert_eq!(
            stage.correlator.stats().events,
            2,
            "the retry is not counted"
        );
        assert_eq!(stage.correlator.open_incidents(), 1);
        tracker.resolve_many(batch.records.iter().map(|r| (&r.id, 0)));
        assert_eq!(
            tracker.take_stores(),
            vec![(tp.clone(), 1)],
            "committed up to the incident's first record"
        );

        // The partition is revoked and assigned back: its records are read again from the
        // held commit under a new assignment. The incident's counts do not double, and the
        // commit is held again at its first record.
        tracker.remove(std::slice::from_ref(&tp));
        let again = registered(&tracker, &tp, &[1, 2]);
        let reread: Vec<(usize, MatchEvent)> =
            events.iter().map(|(i, e)| (i - 1, e.clone())).collect();
        stage.observe(&again.records, &reread);
        assert_eq!(
            stage.correlator.stats().events,
            2,
            "records read again after a reassignment are not counted twice"
        );
        let current = stage.correlator.current("job").expect("still open");
        assert_eq!(current.counts.matches, 2);
        tracker.resolve_many(again.records.iter().map(|r| (&r.id, 0)));
        assert_eq!(
            tracker.take_stores(),
            vec![(tp, 1)],
            "the new assignment holds the commit at the incident's first record again"
        );
    }

    /// A partition read again after the incident of its lines resolved (a member that lost
    /// the partition, resolved the incident alone, and got the partition back): the lines are
    /// observed again and fall in the resolved incident's log-time window, so they and the
    /// job's next line in that window revise it; no second incident opens for the failure.
    #[test]
    fn records_read_again_after_their_incident_resolved_revise_it() {
        let tracker = Tracker::new();
        let mut stage = bare_stage(&tracker);
        let tp = logs();
        let oom = event("CUDA_OOM", Role::Root, "cuda")
            .ts("2024-05-01T12:00:00Z")
            .build();
        let watchdog = event("NCCL_TIMEOUT", Role::Cascade, "nccl")
            .ts("2024-05-01T12:00:00.500Z")
            .build();
        let first = registered(&tracker, &tp, &[0]);
        stage.observe(&first.records, &[(0, oom.clone())]);
        let opened = stage.correlator.current("job").expect("open");
        // Quiet for longer than quiet_ms on the log clock: resolved.
        let mut out = Vec::new();
        stage.correlator.advance(
            crate::time::parse("2024-05-01T12:01:00Z")
                .and_then(|s| s.millis())
                .expect("time"),
            &mut out,
        );
        assert!(stage.correlator.current("job").is_none(), "resolved");
        tracker.remove(std::slice::from_ref(&tp));

        let before = stage.correlator.stats().clone();
        let again = registered(&tracker, &tp, &[0, 1]);
        stage.observe(&again.records, &[(0, oom), (1, watchdog)]);
        assert!(stage.correlator.current("job").is_none(), "nothing opens");
        let after = stage.correlator.stats();
        assert_eq!(after.opened, before.opened, "no second incident");
        assert_eq!(after.updated, before.updated + 2, "both lines revise it");
        assert_eq!(opened.root.error_code, "CUDA_OOM");
    }

    /// A resolved incident holds the commit at its first record while the correlator keeps it
    /// for late lines, and lets it go when the correlator forgets it (here: its job evicted at
    /// `max_jobs`). A previous correlator's resolved incident read again with the same outcome
    /// is withheld: nothing waits for the incidents topic (no broker here), so only the
    /// correlator's forgetting holds its records. Announced, the topic's acknowledgement would
    /// hold them too.
    #[test]
    fn a_resolved_incident_holds_its_records_until_forgotten_and_a_replay_is_withheld() {
        let at = |h: i64| crate::time::format_ms(1_714_564_800_000 + h * 3_600_000);
        let xid = |job: &str, h: i64| {
            event("XID_79", Role::Root, "gpu_hardware")
                .job(job)
                .ts(&at(h))
                .build()
        };
        // What the previous correlator published: j's failure, resolved.
        let mut previous =
            Correlator::new(crate::incident::IncidentConfig::default()).expect("valid");
        let mut out = Vec::new();
        previous.observe(&xid("j", 0), &mut out);
        previous.resolve_all(&mut out);
        let published = out.last().expect("resolved").clone();
        assert_eq!(published.status, Status::Resolved);

        let run = |adopted: bool| {
            let tracker = Tracker::new();
            let mut stage = stage_with(
                &tracker,
                crate::incident::config::RawIncidentsConfig {
                    topic: Some("incidents".into()),
                    quiet_ms: Some(10_000),
                    window_ms: Some(10_000),
                    max_jobs: Some(2),
                    max_open_incidents: Some(2),
                    ..Default::default()
                },
            );
            if adopted {
                stage.adopt(vec![super::super::rebuild::KnownIncident {
                    id: published.id.clone(),
                    job_id: "j".into(),
                    first_log_ms: None,
                    last_log_ms: None,
                    hosts: Vec::new(),
                    resolved: Some(super::super::rebuild::Outcome::of(&published)),
                    revision: published.revision,
                }]);
            }
            let tp = logs();
            let batch = registered(&tracker, &tp, &[0, 1, 2]);
            // j fails; k's failure an hour later resolves it (quiet), j is kept.
            stage.observe(&batch.records[..1], &[(0, xid("j", 0))]);
            stage.observe(&batch.records, &[(1, xid("k", 1))]);
            tracker.resolve_many(batch.records.iter().map(|r| (&r.id, 0)));
            let kept = tracker.take_stores();
            // l's failure evicts j (max_jobs 2): j is forgotten.
            let more = registered(&tracker, &tp, &[3]);
            stage.observe(&more.records, &[(0, xid("l", 2))]);
            tracker.resolve_many(more.records.iter().map(|r| (&r.id, 0)));
            (kept, tracker.take_stores())
        };
        let (kept, forgotten) = run(true);
        assert_eq!(kept, vec![(logs(), 0)], "held at j's record while kept");
        assert_eq!(
            forgotten,
            vec![(logs(), 1)],
            "j forgotten and withheld: up to k's open incident"
        );
        let (kept, forgotten) = run(false);
        assert_eq!(kept, vec![(logs(), 0)]);
        assert_eq!(
            forgotten,
            Vec::new(),
            "announced: the incidents topic's acknowledgement still holds j"
        );
    }

    /// A previous correlator's resolved incident read again: its replay is withheld while the
    /// outcome is what was published; a new outcome is news, numbered after every revision
    /// published of it, and the next one after that.
    #[test]
    fn a_replayed_resolution_is_news_only_when_its_outcome_changes() {
        let tracker = Tracker::new();
        let mut stage = bare_stage(&tracker);
        let mut c = Correlator::new(crate::incident::IncidentConfig::default()).expect("valid");
        let mut out = Vec::new();
        let xid = event("XID_79", Role::Root, "gpu_hardware")
            .job("j")
            .ts("2024-05-01T12:00:00Z")
            .build();
        c.observe(&xid, &mut out);
        c.resolve_all(&mut out);
        let resolved = out.last().expect("resolved").clone();
        let outcome = super::super::rebuild::Outcome::of(&resolved);
        stage
            .resolved_before
            .insert(resolved.id.clone(), (outcome.clone(), 5));
        assert!(matches!(stage.news(&out[0]), News::Withheld), "its opening");
        assert!(
            matches!(stage.news(&resolved), News::Withheld),
            "the same end"
        );
        let mut revised = resolved.clone();
        revised.signature = "fp1:00000000000000ff".into();
        match stage.news(&revised) {
            News::Revised(before, published) => {
                assert_eq!((before, published), (outcome, 5));
            }
            _ => panic!("a new outcome is news"),
        }
        let mut again = revised.clone();
        again.counts.matches += 1;
        assert!(matches!(stage.news(&again), News::Revised(_, 7)));
        let mut other = resolved;
        other.id = "fp2:0000000000000001".into();
        assert!(matches!(stage.news(&other), News::New), "another id");
    }
}
