//! Progress notes: how far in log time a match member has read each input partition.
//!
//! The correlator holds expiry at the slowest input partition ([`super::lanes`]), but it hears
//! of a partition only through that partition's events. A node's kernel log read days of log
//! time behind the job logs sends no match while its lines are healthy, so it held nothing
//! back: the jobs' failures resolved and were forgotten before that node's late Xid arrived,
//! and the Xid became an incident of its own (the demo's last misses on a 150 MB fleet slice).
//! A match member therefore tells the correlator how far it has read each input partition,
//! whether or not the lines matched: before a batch's events, a note for each partition the
//! batch reads (where it stood, else the batch's first stamped line of it) and, at most every
//! [`INTERVAL`], one for each assigned partition its last statistics show behind (no time while
//! it has read nothing there); after the batch, one with the last stamped line it read:
//!
//! ```json
//! {"type":"progress","schema_version":1,
//!  "source":{"kind":"kafka","topic":"logs","partition":3,"offset":1041,"line":1},
//!  "timestamp":"Nov 29 09:02:41","behind":true}
//! ```
//!
//! A member also tells, at most every [`INTERVAL`] with its batches, of each partition of the
//! input topics that no rebalance gave it (`"assigned":false`, no time): when members start
//! apart, one may read its partitions to their end before another has read, or mentioned, any
//! of its own, and the correlator, hearing of no such partition, would expire the failures
//! whose node lines wait there. A correlator lets such a note hold expiry only for a partition
//! it has heard nothing else of, and only for [`super::lanes::UNASSIGNED_HOLD`] after the
//! first one ([`super::lanes::Lanes::unassigned`]).
//!
//! It goes to every shard's partition of the events topic (one without `shard_by`): any
//! correlator may own some of the partition's lines. A note is never correlated; a
//! consumer of the events topic that reads matches skips `type: "progress"` as it skips any
//! type it does not know. In role `all` the note goes straight to the in-process correlator;
//! a process without `[incidents]` sends none.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::incidents::IncidentStage;
use super::shard::EventPartitioner;
use crate::envelope;
use crate::offsets::{RecordId, TopicPartition};
use crate::record::{LogRecord, Provenance};
use crate::runtime::{Health, Shutdown};
use crate::sink::kafka::{KafkaSink, SinkError};
use crate::source::kafka::{Batch, SourceRecord};

/// The least wall time between two notes of a partition behind that the batches do not read
/// (well under [`super::lanes::BEHIND_IDLE`], so it keeps holding expiry).
pub const INTERVAL: Duration = Duration::from_millis(250);

/// Input partitions remembered at most; past it the notes start again empty.
const MAX_PARTITIONS: usize = 65_536;

/// A progress note as the events topic carries it.
#[derive(Debug, Serialize)]
pub struct ProgressNote<'a> {
    /// Always `progress`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// [`crate::enrich::SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The last line read: its input partition, offset and line in the record.
    pub source: &'a Provenance,
    /// That line's timestamp as found ([`crate::time::parse`] reads it); none while the
    /// member has read no stamped line of the partition.
    pub timestamp: Option<&'a str>,
    /// Whether the partition had records not yet read at the member's last statistics.
    pub behind: bool,
    /// `false` for a partition the member is not assigned (absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub assigned: Option<bool>,
}

impl<'a> ProgressNote<'a> {
    /// The note of the partition of `source` (its last line read), stamped `timestamp`.
    pub fn new(
        source: &'a Provenance,
        timestamp: Option<&'a str>,
        behind: bool,
        assigned: Option<bool>,
    ) -> Self {
        ProgressNote {
            kind: "progress",
            schema_version: crate::enrich::SCHEMA_VERSION,
            source,
            timestamp,
            behind,
            assigned,
        }
    }
}

/// The last stamped line read from a partition.
#[derive(Debug, Clone)]
struct Stamp {
    timestamp: String,
    offset: i64,
    line: u64,
}

/// A partition's last stamp and when its last note went.
#[derive(Debug, Default)]
struct Lane {
    stamp: Option<Stamp>,
    noted: Option<Instant>,
}

/// Where a note goes: the in-process correlator (role `all`), or the events topic.
pub enum Target<'a> {
    /// Role `all`: straight to the correlator.
    InProcess(&'a mut IncidentStage),
    /// Role `match` (with `[incidents]`, for the correlators): the events topic, every shard.
    Kafka {
        /// The events producer.
        sink: &'a KafkaSink,
        /// The pipeline's stop, which a blocked send watches.
        stop: &'a Shutdown,
        /// The correlator shards.
        partitioner: &'a EventPartitioner,
    },
}

impl<'a> Target<'a> {
    /// Where a match stage's notes go: role `all` correlates in process (`incidents`), role
    /// `match` feeds correlators (its `partitioner` is set); a process without `[incidents]` has
    /// no one to tell (`None`).
    pub fn of(
        incidents: Option<&'a mut IncidentStage>,
        partitioner: Option<&'a EventPartitioner>,
        sink: &'a KafkaSink,
        stop: &'a Shutdown,
    ) -> Option<Self> {
        match (incidents, partitioner) {
            (Some(incidents), _) => Some(Target::InProcess(incidents)),
            (None, Some(partitioner)) => Some(Target::Kafka {
                sink,
                stop,
                partitioner,
            }),
            (None, None) => None,
        }
    }
}

/// A match stage's notes: each partition's last stamped line, which records of a batch end
/// their partition's part of it, and sending the notes.
#[derive(Debug, Default)]
pub struct Noter {
    lanes: HashMap<TopicPartition, Lane>,
    lasts: Vec<usize>,
    json: Vec<u8>,
}

impl Noter {
    /// The notes of `batch` (its `records`, those `scanned` says were scanned) due before its
    /// events (`i` none: `before`, as outputs of its first record) or after record `i`
    /// (`after`, when it is the last the batch read of its partition), counted in
    /// `health`. Returns the outputs added and the first send error.
    pub fn notes(
        &mut self,
        batch: &Batch,
        records: &[SourceRecord],
        scanned: impl Fn(usize) -> bool,
        i: Option<usize>,
        health: &Health,
        to: Option<Target<'_>>,
    ) -> (u32, Result<(), SinkError>) {
        let Some(mut to) = to else {
            return (0, Ok(()));
        };
        if i.is_some_and(|i| !self.is_last(i)) {
            return (0, Ok(()));
        }
        let backlog = health.backlog();
        let (n, sent) = match i {
            None => {
                self.plan(records, &scanned);
                let mut seen: Vec<&TopicPartition> = Vec::new();
                let first = records.iter().enumerate().filter_map(|(k, r)| {
                    let new = scanned(k) && !seen.contains(&&r.id.tp);
                    new.then(|| {
                        seen.push(&r.id.tp);
                        (&r.id, batch.payload(r).unwrap_or_default())
                    })
                });
                // An in-process correlator hears only this member's partitions.
                let unassigned = match to {
                    Target::InProcess(_) => Vec::new(),
                    Target::Kafka { .. } => health.unassigned(),
                };
                match records.first() {
                    Some(carrier) => {
                        let (n, sent) = self.before(first, &backlog, &carrier.id, &mut to);
                        if sent.is_err() {
                            (n, sent)
                        } else {
                            let (m, sent) = self.unassigned(&unassigned, &carrier.id, &mut to);
                            (n + m, sent)
                        }
                    }
                    None => (0, Ok(())),
                }
            }
            Some(i) => {
                let r = &records[i];
                let payload = batch.payload(r).unwrap_or_default();
                let behind = backlog.contains(&r.id.tp);
                self.after(&r.id, payload, behind, &mut to)
            }
        };
        health
            .notes_sent
            .fetch_add(u64::from(n), std::sync::atomic::Ordering::Relaxed);
        (n, sent)
    }

    /// Finds, among `records` (those `scanned` says were scanned), the last one of each
    /// partition: after its outputs, [`Self::after`] sends that partition's note.
    fn plan(&mut self, records: &[SourceRecord], scanned: &impl Fn(usize) -> bool) {
        self.lasts.clear();
        for (i, r) in records.iter().enumerate().rev() {
            if scanned(i) && !self.lasts.iter().any(|&j| records[j].id.tp == r.id.tp) {
                self.lasts.push(i);
            }
        }
    }

    /// Whether record `i` of the planned batch ends its partition's part of it.
    fn is_last(&self, i: usize) -> bool {
        self.lasts.contains(&i)
    }

    /// Before a batch's events, as outputs of record `carrier`: a note for each partition the
    /// batch reads (where it stood before it, else the batch's first stamped line of it: its
    /// events come next), and, at most every [`INTERVAL`], one for each partition of `backlog`
    /// the batch does not read (its position when known, else none: the correlator then waits
    /// for it). `first` gives each partition's first record in the batch and its payload.
    /// Returns the outputs added and the first send error.
    fn before<'p>(
        &mut self,
        first: impl Iterator<Item = (&'p RecordId, &'p [u8])>,
        backlog: &[TopicPartition],
        carrier: &RecordId,
        to: &mut Target<'_>,
    ) -> (u32, Result<(), SinkError>) {
        let now = Instant::now();
        let mut sent = 0;
        let mut read = Vec::new();
        for (id, payload) in first {
            read.push(&id.tp);
            self.bound(&id.tp);
            let lane = self.lanes.entry(id.tp.clone()).or_default();
            if lane.stamp.is_none() {
                lane.stamp = stamp_of(id, payload);
            }
            lane.noted = Some(now);
            let (n, result) = self.send(&id.tp, true, carrier, to);
            sent += n;
            if result.is_err() {
                return (sent, result);
            }
        }
        for tp in backlog.iter().filter(|tp| !read.contains(tp)) {
            if self.due(tp, now).is_none() {
                continue;
            }
            let (n, result) = self.send(tp, true, carrier, to);
            sent += n;
            if result.is_err() {
                return (sent, result);
            }
        }
        (sent, Ok(()))
    }

    /// At most every [`INTERVAL`], a note for each partition of `unassigned` (no rebalance gave
    /// it to this member), as outputs of record `carrier`. Returns the outputs added and the
    /// first send error.
    fn unassigned(
        &mut self,
        unassigned: &[TopicPartition],
        carrier: &RecordId,
        to: &mut Target<'_>,
    ) -> (u32, Result<(), SinkError>) {
        let now = Instant::now();
        let mut sent = 0;
        for tp in unassigned {
            let Some(lane) = self.due(tp, now) else {
                continue;
            };
            // What it read before a rebalance took it away is another member's to tell now.
            lane.stamp = None;
            let (n, result) = self.send_note(tp, true, Some(false), carrier, to);
            sent += n;
            if result.is_err() {
                return (sent, result);
            }
        }
        (sent, Ok(()))
    }

    /// Partition `tp`'s lane when a note of it is due at `now` (none in the last [`INTERVAL`]),
    /// marked as noted now.
    fn due(&mut self, tp: &TopicPartition, now: Instant) -> Option<&mut Lane> {
        self.bound(tp);
        let lane = self.lanes.entry(tp.clone()).or_default();
        if lane
            .noted
            .is_some_and(|at| now.saturating_duration_since(at) < INTERVAL)
        {
            return None;
        }
        lane.noted = Some(now);
        Some(lane)
    }

    /// After record `id` (its `payload`), the last one the batch read of its partition: keeps
    /// its last stamped line and sends the partition's note (`behind`: the partition has
    /// records not yet read). Returns the outputs it added to the record (0 or 1) and the send's
    /// result.
    fn after(
        &mut self,
        id: &RecordId,
        payload: &[u8],
        behind: bool,
        to: &mut Target<'_>,
    ) -> (u32, Result<(), SinkError>) {
        self.bound(&id.tp);
        let lane = self.lanes.entry(id.tp.clone()).or_default();
        if let Some(stamp) = stamp_of(id, payload) {
            lane.stamp = Some(stamp);
        }
        if lane.stamp.is_none() {
            return (0, Ok(()));
        }
        lane.noted = Some(Instant::now());
        self.send(&id.tp, behind, id, to)
    }

    /// Keeps the partitions remembered under [`MAX_PARTITIONS`].
    fn bound(&mut self, tp: &TopicPartition) {
        if self.lanes.len() >= MAX_PARTITIONS && !self.lanes.contains_key(tp) {
            self.lanes.clear();
        }
    }

    fn send(
        &mut self,
        tp: &TopicPartition,
        behind: bool,
        carrier: &RecordId,
        to: &mut Target<'_>,
    ) -> (u32, Result<(), SinkError>) {
        self.send_note(tp, behind, None, carrier, to)
    }

    /// Sends partition `tp`'s note (`assigned`: `Some(false)` for a partition not this
    /// member's) as outputs of record `carrier`.
    fn send_note(
        &mut self,
        tp: &TopicPartition,
        behind: bool,
        assigned: Option<bool>,
        carrier: &RecordId,
        to: &mut Target<'_>,
    ) -> (u32, Result<(), SinkError>) {
        let stamp = self.lanes.get(tp).and_then(|l| l.stamp.as_ref());
        let timestamp = stamp.map(|s| s.timestamp.as_str());
        let (sink, stop, partitioner) = match to {
            Target::InProcess(incidents) => {
                incidents.progress(&tp.topic, tp.partition, timestamp, behind);
                return (0, Ok(()));
            }
            Target::Kafka {
                sink,
                stop,
                partitioner,
            } => (sink, stop, partitioner),
        };
        let source = Provenance::Kafka {
            topic: tp.topic.to_string(),
            partition: tp.partition,
            offset: stamp.map_or(-1, |s| s.offset),
            line: stamp.map_or(0, |s| s.line),
        };
        let note = ProgressNote::new(&source, timestamp, behind, assigned);
        self.json.clear();
        if let Err(e) = serde_json::to_writer(&mut self.json, &note) {
            tracing::error!(error = %e, "serialising a progress note");
            return (0, Ok(()));
        }
        // Every shard's correlator may hold lines of this partition (its clusters): all hear it.
        let key = tp.to_string();
        let mut sent = 0;
        for partition in partitioner.shards() {
            let result =
                sink.send_event(carrier, key.as_bytes(), &self.json, Some(partition), stop);
            sent += 1;
            if result.is_err() {
                return (sent, result);
            }
        }
        (sent, Ok(()))
    }
}

/// The stamp of record `id`'s last stamped line.
fn stamp_of(id: &RecordId, payload: &[u8]) -> Option<Stamp> {
    let (timestamp, line) = last_stamp(payload)?;
    Some(Stamp {
        timestamp,
        offset: id.offset,
        line,
    })
}

/// Lines read back from a payload's end for a timestamp: a record of many untimed lines is not
/// decoded whole for a note.
const LINES_TRIED: usize = 8;

/// The timestamp of the last record of a payload's last line that has a timestamp
/// (a JSON envelope's field, a syslog or ISO prefix) among its last eight, and that
/// line's number (1-based).
pub fn last_stamp(payload: &[u8]) -> Option<(String, u64)> {
    let mut scratch: Vec<LogRecord<'static>> = Vec::new();
    let mut end = payload.len();
    let mut tried = 0;
    while tried < LINES_TRIED {
        let start = memchr::memrchr(b'\n', &payload[..end]).map_or(0, |i| i + 1);
        let line = &payload[start..end];
        if !line.iter().all(u8::is_ascii_whitespace) {
            tried += 1;
            let mut found = None;
            envelope::each_record(line, &mut scratch, &mut |r| {
                if let Some(ts) = &r.meta.timestamp {
                    found = Some(ts.clone());
                }
            });
            if let Some(ts) = found {
                let n = crate::record::line_count(&payload[..start]);
                return Some((ts, n + 1));
            }
        }
        if start == 0 {
            return None;
        }
        end = start - 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_stamped_line_of_a_payload_gives_the_time() {
        let payload =
            b"Nov 29 09:02:41 gpu-7 kernel: NVRM: Xid 79\nNov 29 09:02:43 gpu-7 kernel: ok\n\n";
        assert_eq!(
            last_stamp(payload),
            Some(("Nov 29 09:02:43".to_string(), 2))
        );
        let json = br#"{"message":"step 9","timestamp":"2024-05-01T10:00:00Z"}"#;
        assert_eq!(
            last_stamp(json),
            Some(("2024-05-01T10:00:00Z".to_string(), 1))
        );
        assert_eq!(
            last_stamp(b"2024-05-01T10:00:00Z a\nno time here"),
            Some(("2024-05-01T10:00:00Z".to_string(), 1))
        );
        assert_eq!(last_stamp(b"no time at all\n"), None);
        // Only the last lines are tried: a long untimed record is not decoded whole.
        let mut long = b"2024-05-01T10:00:00Z first\n".to_vec();
        long.extend(b"untimed\n".repeat(LINES_TRIED));
        assert_eq!(last_stamp(&long), None);
    }
}
