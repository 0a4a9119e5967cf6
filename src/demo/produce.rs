//! How the demo produces its sample lines: keyed as a shipper should key them, at the pace of
//! the pipelines that read them.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use rdkafka::config::ClientConfig;
use rdkafka::error::KafkaResult;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};

use crate::pipeline::shard::shard_of;
use crate::record::Origin;

/// Topic the sample lines are produced to and the pipeline reads.
pub const LOGS_TOPIC: &str = "faultline.demo.logs";
/// Partitions of the logs topic, spread over the match members.
pub const LOG_PARTITIONS: i32 = 12;

/// A sample job: its name and its lines.
pub type Sample = (String, Vec<Vec<u8>>);

/// How a shipper configured as docs/kafka.md advises sends a sample line: its record key (the
/// job it names, else a node's own line's host, else the sample's job) and whether it goes
/// with a `job` header (the sample's job, for a line that names neither job nor host, as a
/// tail input adds the file's name).
fn shipped(line: &[u8], sample_job: &str) -> (String, bool) {
    let (mut job, mut host, mut node) = (None, None, false);
    let json = crate::envelope::each_record(line, &mut Vec::new(), &mut |r| {
        job = job.take().or_else(|| r.meta.job_id.clone());
        host = host.take().or_else(|| r.meta.host.clone());
        node |= r.meta.origin == Origin::NodeLog;
    });
    match (job, host) {
        (Some(job), _) => (job, false),
        (None, Some(host)) if json || node => (host, false),
        _ => (sample_job.to_string(), true),
    }
}

/// How far the demo's producer may run ahead of its pipelines. The embedded broker keeps at
/// most 5 MiB or 100,000 records per partition (librdkafka's mock cluster) and drops the oldest
/// beyond that, so a fleet slice larger than that is produced as fast as it is matched (the
/// lines not yet read) and correlated (the match events not yet read), never faster.
pub(super) struct Pace {
    /// The match members' health (lines read, events acknowledged).
    pub(super) members: Vec<Arc<crate::runtime::Health>>,
    /// The correlator's (events read).
    pub(super) correlator: Arc<crate::runtime::Health>,
    /// The demo's stop.
    pub(super) stop: Arc<crate::runtime::Shutdown>,
}

impl Pace {
    /// Lines produced and not yet read, over all partitions (about 1,000 per partition).
    const LINES_AHEAD: u64 = 12_000;
    /// Match events acknowledged and not yet read by the correlator (one partition).
    const EVENTS_AHEAD: u64 = 10_000;

    /// Waits until `produced` lines are within reach of the pipelines; false once the demo
    /// is stopping.
    fn wait(&self, produced: u64) -> bool {
        loop {
            if self.stop.requested() {
                return false;
            }
            let (read, events) = self.members.iter().fold((0, 0), |(r, e), m| {
                let s = m.stats();
                (r + s.records, e + s.events_acked)
            });
            let correlated = self.correlator.stats().records;
            if produced < read + Self::LINES_AHEAD && events < correlated + Self::EVENTS_AHEAD {
                return true;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// Produces every line as one record (zstd-compressed batches), keyed and with a `job` header
/// as [`shipped`] says, in the partition its key hashes to ([`shard_of`]: a key never moves),
/// at the pipelines' [`Pace`]; returns each partition's end offset.
pub(super) fn produce_samples(
    bootstrap: &str,
    jobs: &[Sample],
    pace: &Pace,
) -> KafkaResult<HashMap<i32, i64>> {
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("enable.idempotence", "true")
        .set("compression.type", "zstd")
        .set("linger.ms", "5")
        .create()?;
    let mut produced = 0u64;
    // A stop (Ctrl-C, a failed member) ends production where it is.
    'samples: for (job, lines) in jobs {
        for line in lines {
            if produced.is_multiple_of(1000) && !pace.wait(produced) {
                break 'samples;
            }
            produced += 1;
            let (key, header) = shipped(line, job);
            let mut record = BaseRecord::to(LOGS_TOPIC)
                .partition(shard_of(&key, LOG_PARTITIONS))
                .key(key.as_str())
                .payload(line);
            if header {
                record = record.headers(OwnedHeaders::new().insert(Header {
                    key: "job",
                    value: Some(job.as_str()),
                }));
            }
            // The queue is large enough for the samples; wait for room if it is not.
            loop {
                match producer.send(record) {
                    Ok(()) => break,
                    Err((_, r)) => {
                        record = r;
                        // Room comes as the broker acknowledges; a flush that has not finished
                        // in this time is no error here (it stopped the demo on a large slice).
                        let _ = producer.flush(Duration::from_millis(100));
                    }
                }
            }
        }
    }
    producer.flush(Duration::from_secs(30))?;
    end_offsets(producer.client(), LOGS_TOPIC, LOG_PARTITIONS)
}

/// Each partition's end offset.
pub(super) fn end_offsets<C: rdkafka::client::ClientContext>(
    client: &rdkafka::client::Client<C>,
    topic: &str,
    partitions: i32,
) -> KafkaResult<HashMap<i32, i64>> {
    let mut ends = HashMap::new();
    for p in 0..partitions {
        let (_, high) = client.fetch_watermarks(topic, p, Duration::from_secs(10))?;
        ends.insert(p, high);
    }
    Ok(ends)
}
