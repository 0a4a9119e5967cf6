//! Reading a topic from a start to its end as it was when reading began, outside any consumer
//! group: what a starting correlator reads back from the incidents topic, and what
//! `faultline report --brokers` reads from the events and incidents topics.
//!
//! The reader assigns every partition itself (it never joins, commits for or fences a group),
//! takes each partition's high watermark when it starts, and stops a partition once it has read
//! the record before that mark or librdkafka reports its end. Records produced after it started
//! are not waited for.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

/// Where each partition is read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum From {
    /// Its oldest record still kept.
    Start,
    /// The first record produced within this long before now (by the records' timestamps);
    /// the partition's start where the broker cannot say (reading more is safe, less is not).
    Within(Duration),
}

/// How far a read got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Read {
    /// Partitions not read to their end before the deadline (0: the whole topic was read).
    pub partitions_left: usize,
}

/// A consumer for [`read_to_end`] from a client's consumer properties: the connection settings
/// (brokers, TLS, SASL) are kept, the group settings replaced by `group` (never joined or
/// committed to), offsets never stored.
pub fn reader<'a>(
    consumer_properties: impl IntoIterator<Item = (&'a str, &'a str)>,
    group: &str,
) -> Result<BaseConsumer, String> {
    let mut cc = ClientConfig::new();
    cc.set_log_level(super::librdkafka_log_level());
    for (k, v) in consumer_properties {
        if !k.starts_with("group.") && k != "partition.assignment.strategy" {
            cc.set(k, v);
        }
    }
    cc.set("group.id", group);
    cc.set("enable.auto.commit", "false");
    cc.set("enable.auto.offset.store", "false");
    // The end of a partition is also told directly, for a partition whose last offsets hold no
    // record to hand over (compacted away, or a control record).
    cc.set("enable.partition.eof", "true");
    cc.create().map_err(|e| e.to_string())
}

/// Reads every partition of `topic` from `from` to its end as it is now, handing each record
/// to `each` in partition order (partitions interleave), until done or `timeout` has passed
/// (then [`Read::partitions_left`] says how many were not finished). A topic that does not
/// exist is an error.
pub fn read_to_end(
    consumer: &BaseConsumer,
    topic: &str,
    from: From,
    timeout: Duration,
    mut each: impl FnMut(&BorrowedMessage<'_>),
) -> Result<Read, String> {
    let deadline = Instant::now() + timeout;
    let ends = end_offsets(consumer, topic, timeout)?;
    let starts = match from {
        From::Start => HashMap::new(),
        From::Within(lookback) => offsets_since(consumer, topic, &ends, lookback, timeout),
    };
    let mut assign = TopicPartitionList::new();
    let mut left: HashMap<i32, i64> = HashMap::new();
    for (&p, &(low, end)) in &ends {
        let start = starts.get(&p).copied().unwrap_or(low).max(low);
        if start < end {
            assign
                .add_partition_offset(topic, p, Offset::Offset(start))
                .map_err(|e| e.to_string())?;
            left.insert(p, end);
        }
    }
    let mut read = Read { partitions_left: 0 };
    if left.is_empty() {
        return Ok(read);
    }
    consumer.assign(&assign).map_err(|e| e.to_string())?;
    while !left.is_empty() && Instant::now() < deadline {
        let Some(msg) = consumer.poll(Duration::from_millis(100)) else {
            continue;
        };
        let msg = match msg {
            Ok(msg) => msg,
            Err(rdkafka::error::KafkaError::PartitionEOF(p)) => {
                left.remove(&p);
                continue;
            }
            Err(e) => return Err(e.to_string()),
        };
        let p = msg.partition();
        let Some(&end) = left.get(&p) else {
            continue;
        };
        if msg.offset() < end {
            each(&msg);
        }
        if msg.offset() + 1 >= end {
            left.remove(&p);
        }
    }
    read.partitions_left = left.len();
    Ok(read)
}

/// Each partition's low and high watermarks now.
fn end_offsets(
    consumer: &BaseConsumer,
    topic: &str,
    timeout: Duration,
) -> Result<HashMap<i32, (i64, i64)>, String> {
    let metadata = consumer
        .fetch_metadata(Some(topic), timeout)
        .map_err(|e| e.to_string())?;
    let t = metadata
        .topics()
        .iter()
        .find(|t| t.name() == topic)
        .ok_or("not in the metadata")?;
    if let Some(e) = t.error() {
        return Err(format!("{:?}", rdkafka::types::RDKafkaErrorCode::from(e)));
    }
    let mut ends = HashMap::new();
    for p in t.partitions() {
        let marks = consumer
            .fetch_watermarks(topic, p.id(), timeout)
            .map_err(|e| e.to_string())?;
        ends.insert(p.id(), marks);
    }
    Ok(ends)
}

/// Each partition's first offset produced within `lookback`, where the broker can say.
fn offsets_since(
    consumer: &BaseConsumer,
    topic: &str,
    ends: &HashMap<i32, (i64, i64)>,
    lookback: Duration,
    timeout: Duration,
) -> HashMap<i32, i64> {
    let since = SystemTime::now()
        .checked_sub(lookback)
        .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_millis() as i64);
    let mut query = TopicPartitionList::new();
    for &p in ends.keys() {
        let _ = query.add_partition_offset(topic, p, Offset::Offset(since));
    }
    let mut starts = HashMap::new();
    if let Ok(found) = consumer.offsets_for_times(query, timeout) {
        for e in found.elements() {
            // `End` (nothing produced since, or a broker that keeps no time index) and the
            // rest fall back to the partition's start.
            if let Offset::Offset(o) = e.offset() {
                starts.insert(e.partition(), o);
            }
        }
    }
    starts
}
