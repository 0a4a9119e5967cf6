//! `kafka.exit_at_end`: whether a consumer has read every partition assigned to it to its end,
//! so that `faultline run --exit-at-end` can stop a replay as `kcat -e` does
//! ([`super::kafka::KafkaSource`] asks while it is idle; docs/kafka.md, "Replaying a backlog").

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::{Offset, TopicPartitionList};

/// How long the one request of a check (the group's committed offsets) may take.
const COMMITTED_TIMEOUT: Duration = Duration::from_secs(2);

/// The assigned partitions with their positions (`None` before a record was read from one);
/// `None` when nothing is assigned.
pub(super) fn positions<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
) -> Option<Vec<(PartitionKey, Option<i64>)>> {
    let positions = consumer.position().ok().filter(|p| p.count() > 0)?;
    Some(
        positions
            .elements()
            .iter()
            .map(|e| {
                let key = (e.topic().to_string(), e.partition());
                match e.offset() {
                    Offset::Offset(n) => (key, Some(n)),
                    _ => (key, None),
                }
            })
            .collect(),
    )
}

/// A partition as `kafka.exit_at_end` keys it: topic and number.
pub(super) type PartitionKey = (String, i32);

/// What `kafka.exit_at_end` needs to know of the assigned partitions, kept per assignment.
///
/// A partition is at its end when the next offset to read is its high watermark as the consumer
/// last saw it in a fetch response (librdkafka's cache, so checking asks the broker nothing;
/// the fetcher keeps asking while it waits for new records, so the cache trails the broker by
/// at most `fetch.wait.max.ms`, as `kcat -e`'s end-of-partition event does). The next offset is
/// the consumer's position after a record was read; before any, the group's committed offset
/// (one request per assignment, for the partitions that hold records), or for a partition the
/// group never committed, its start under `earliest` and its end under `latest`.
pub(super) struct Ends {
    /// The partitions this was learnt for; another assignment starts afresh.
    partitions: Vec<PartitionKey>,
    /// Where each partition nothing has been read from starts, once asked.
    start: HashMap<PartitionKey, i64>,
    /// When the source last checked.
    pub(super) checked: Instant,
}

impl Default for Ends {
    fn default() -> Self {
        Ends {
            partitions: Vec::new(),
            start: HashMap::new(),
            checked: Instant::now(),
        }
    }
}

impl Ends {
    /// Whether every partition of `next` (each with its position, `None` before a record was
    /// read from it) is at its end.
    pub(super) fn read_to_end<C: ConsumerContext>(
        &mut self,
        next: &[(PartitionKey, Option<i64>)],
        consumer: &BaseConsumer<C>,
        starts_at_latest: bool,
    ) -> bool {
        let same = next.len() == self.partitions.len()
            && next.iter().zip(&self.partitions).all(|((k, _), p)| k == p);
        if !same {
            self.partitions = next.iter().map(|(k, _)| k.clone()).collect();
            self.start.clear();
        }
        let mut unstarted = Vec::new();
        for (key, pos) in next {
            let Some((low, high)) = cached_watermarks(consumer, key) else {
                return false; // not fetched yet
            };
            let at = match pos {
                Some(p) => *p,
                None if low == high => continue, // empty
                None => match self.start.get(key) {
                    Some(&s) => s,
                    None => {
                        unstarted.push((key.clone(), low, high));
                        continue;
                    }
                },
            };
            if at < high {
                return false;
            }
        }
        if unstarted.is_empty() {
            return true;
        }
        let mut tpl = TopicPartitionList::new();
        for (key, _, _) in &unstarted {
            tpl.add_partition(&key.0, key.1);
        }
        let Ok(committed) = consumer.committed_offsets(tpl, COMMITTED_TIMEOUT) else {
            return false;
        };
        let mut read = true;
        for (key, low, high) in unstarted {
            let start = match committed.find_partition(&key.0, key.1).map(|e| e.offset()) {
                Some(Offset::Offset(c)) => c,
                _ if starts_at_latest => high,
                _ => low,
            };
            read &= start >= high;
            self.start.insert(key, start);
        }
        read
    }
}

/// A partition's low and high watermarks as the consumer last saw them in a fetch response
/// (librdkafka's cache: no request); `None` before the first. rust-rdkafka offers only the
/// variant that asks the broker, two requests a partition.
#[allow(unsafe_code)]
fn cached_watermarks<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    key: &PartitionKey,
) -> Option<(i64, i64)> {
    use rdkafka::bindings::{rd_kafka_get_watermark_offsets, rd_kafka_resp_err_t};
    let topic = std::ffi::CString::new(key.0.as_str()).ok()?;
    let (mut low, mut high) = (-1i64, -1i64);
    // SAFETY: the client handle is valid while `consumer` lives; `topic` is NUL-terminated and
    // outlives the call; `low` and `high` are valid for writes. librdkafka locks its own cache.
    let err = unsafe {
        rd_kafka_get_watermark_offsets(
            consumer.client().native_ptr(),
            topic.as_ptr(),
            key.1,
            &mut low,
            &mut high,
        )
    };
    (err == rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR && low >= 0 && high >= 0)
        .then_some((low, high))
}
