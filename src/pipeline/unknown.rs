//! Unknown failures in `faultline run`: the match stage's batch, after its scan, through the
//! live template miners ([`crate::unknown`]).
//!
//! Per batch: the engine's one pass over the scan buffer hands over the decoded messages that
//! no entry confirmed ([`crate::engine::Engine::scan_chunk_with`]); [`UnknownStage::unmatched`]
//! keeps those that look like errors ([`unknown_text`]); each goes to its
//! job's miner (the job named as for match events: the key or header when `input.job_id` says
//! so, else the envelope's, else the record's default) on the job's log clock, running on at
//! wall speed ([`crate::unknown::limit`]); the events that are due go to the output topic
//! after the record's match events, keyed by job id, and count among the record's outputs, so
//! the record is resolved only once they are acknowledged too (at least once, like match
//! events). Every mined line is also shown to the incident stage, for incidents whose root is
//! unknown. The counts are published once per batch.

use std::borrow::Cow;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use super::config::{InputConfig, JobIdFrom};
use super::decode::{header_pairs, record_job, Span};
use super::incidents::IncidentStage;
use super::shard::EventPartitioner;
use super::Stop;
use crate::enrich::job_of;
use crate::incident::unrecognised::RecentUnknown;
use crate::metrics::{Metrics, UnknownFamilies};
use crate::offsets::RecordId;
use crate::record::LogRecord;
use crate::record::Provenance;
use crate::redact::Redactor;
use crate::runtime::Health;
use crate::sink::kafka::{KafkaSink, SinkError};
use crate::source::kafka::{Batch, SourceRecord};
use crate::unknown::{
    unknown_text, FilterMemo, LiveMiner, LiveStats, UnknownConfig, UnknownEvent, UnknownLine,
};

/// The unknown-line state of the match stage.
pub(super) struct UnknownStage {
    live: LiveMiner,
    /// When the batch began: the wall clock the miners' rate limits run on.
    wall: Instant,
    /// The batch's due events, with the index of their record, in record order.
    events: Vec<(usize, UnknownEvent)>,
    /// The first event of `events` not yet sent.
    next: usize,
    json: Vec<u8>,
    families: UnknownFamilies,
    published: LiveStats,
    redactor: Option<Arc<Redactor>>,
    max_jobs: usize,
    /// The error-line gate's verdicts by line shape.
    memo: FilterMemo,
}

/// What [`UnknownStage::unmatched`] reads of the batch.
pub(super) struct BatchView<'a> {
    pub(super) spans: &'a [Span],
    pub(super) batch: &'a Batch,
    pub(super) records: &'a [SourceRecord],
    pub(super) input: &'a InputConfig,
}

/// Where one record's unknown events go.
pub(super) struct SendTo<'a> {
    pub(super) sink: &'a KafkaSink,
    pub(super) stop: &'a Stop,
    pub(super) health: &'a Health,
    /// Role `match`: the correlator shard of each event, as for the record's match events.
    pub(super) partitioner: Option<&'a EventPartitioner>,
}

impl UnknownStage {
    /// The stage, when `[unknown]` is enabled.
    pub(super) fn new(
        cfg: &UnknownConfig,
        redactor: Option<Arc<Redactor>>,
        metrics: &Metrics,
    ) -> Option<Self> {
        if !cfg.enabled {
            return None;
        }
        Some(UnknownStage {
            live: LiveMiner::new(cfg, redactor.clone()),
            wall: Instant::now(),
            events: Vec::new(),
            next: 0,
            json: Vec::new(),
            families: metrics.unknown().clone(),
            published: LiveStats::default(),
            redactor,
            max_jobs: cfg.max_jobs,
            memo: FilterMemo::default(),
        })
    }

    /// The per-job memory of unknown templates that the incident stage lists in incidents
    /// without a known root.
    pub(super) fn recent(&self) -> RecentUnknown {
        RecentUnknown::new(self.max_jobs, self.redactor.clone())
    }

    /// Starts a batch.
    pub(super) fn begin(&mut self) {
        self.wall = Instant::now();
        self.events.clear();
        self.next = 0;
    }

    /// One message of the batch that no entry confirmed on (buffer line `line`): mined when it
    /// looks like an error, its due event kept, and shown to `incidents`.
    pub(super) fn unmatched(
        &mut self,
        b: &BatchView<'_>,
        line: u64,
        record: &LogRecord<'_>,
        incidents: Option<&mut IncidentStage>,
    ) {
        let Some(text) = unknown_text(record, &mut self.memo) else {
            return;
        };
        let k = b.spans.partition_point(|s| s.first_line <= line);
        let Some(span) = k.checked_sub(1).map(|k| b.spans[k]) else {
            return;
        };
        let Some(source_record) = b.records.get(span.record) else {
            return;
        };
        let r = b.batch.view(source_record);
        let named =
            record_job(r.key, header_pairs(r), &b.input.job_id).map(String::from_utf8_lossy);
        let job: Cow<'_, str> = match (&named, &b.input.job_id) {
            // The key or header names the job: it wins over the envelope's.
            (Some(j), JobIdFrom::Key | JobIdFrom::Header(_)) => crate::record::cap_key(j),
            (named, from) => {
                let name = super::decode::job_name(named.as_deref(), from, &b.input.default_job_id);
                job_of(&record.meta, name).0
            }
        };
        let unknown = UnknownLine {
            job_id: &job,
            message: &text,
            meta: &record.meta,
            truncated: record.truncated,
        };
        let out = self.live.observe(&unknown, Some(self.wall));
        if let Some(inc) = incidents {
            if let Some(seen) = self.live.seen(&job, &out) {
                inc.observe_unknown(&seen);
            }
        }
        if out.emit.is_none() {
            return;
        }
        let source = Provenance::Kafka {
            topic: r.id.tp.topic.to_string(),
            partition: r.id.tp.partition,
            offset: r.id.offset,
            line: line - span.first_line + 1,
        };
        if let Some(event) = self.live.event(&unknown, &out, source) {
            self.events.push((span.record, event));
        }
    }

    /// Sends the unknown events of record `record` (index in the batch), counting each in
    /// `partial` as it goes out; returns how many went out, and the first failure.
    pub(super) fn send(
        &mut self,
        record: usize,
        id: &RecordId,
        to: &SendTo<'_>,
        partial: &mut u32,
    ) -> (u32, Result<(), SinkError>) {
        let mut sent = 0;
        while self.events.get(self.next).is_some_and(|(i, _)| *i < record) {
            self.next += 1;
        }
        while let Some((_, event)) = self.events.get(self.next).filter(|(i, _)| *i == record) {
            self.json.clear();
            if let Err(err) = serde_json::to_writer(&mut self.json, event) {
                // Serialising plain data cannot fail; never drop an event silently.
                tracing::error!(error = %err, "serialising an unknown event");
            }
            let partition = to
                .partitioner
                .map(|p| p.partition_of(event.cluster.as_deref(), &event.source));
            let key = event.job_id.as_bytes();
            if let Err(e) = to.sink.send_event(id, key, &self.json, partition, to.stop) {
                return (sent, Err(e));
            }
            self.next += 1;
            sent += 1;
            *partial += 1;
            to.health.events_sent.fetch_add(1, Ordering::Relaxed);
        }
        (sent, Ok(()))
    }

    /// Publishes the counts of what was mined since the last call.
    pub(super) fn publish(&mut self) {
        let now = self.live.stats();
        self.families
            .publish(&self.published, &now, self.live.templates());
        self.published = now;
    }
}
