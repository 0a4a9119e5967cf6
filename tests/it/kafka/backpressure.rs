//! The Kafka source under backpressure, driven directly: a pipeline that stops taking batches
//! makes the source pause its partitions, and every record still reaches the pipeline once it
//! takes batches again.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use faultline::kafka::kafka_settings;
use faultline::kafka::links::BrokerLinks;
use faultline::metrics::{KafkaClient, Metrics, MetricsConfig};
use faultline::runtime::queue::{self, RecvError};
use faultline::runtime::{Health, Shutdown};
use faultline::source::kafka::{BatchLimits, KafkaSource};

use super::*;

const PARTITIONS: i32 = 8;
const PER_PARTITION: i64 = 2_000;

/// librdkafka drops a paused partition's prefetched records and, on resume, fetches again from
/// the record after the last one the application polled, or from where the assignment started
/// when it polled none. Eight partitions are prefetched while the pipeline takes nothing, so the
/// source pauses with most of them unpolled: every record must still be handed on once, and
/// the pause must be lifted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_paused_before_reading_some_partitions_still_hands_on_every_record() {
    let cluster = Cluster::start(1);
    let topic = cluster.topic("backpressure", PARTITIONS).await;
    let records: Vec<Out> = (0..PARTITIONS)
        .flat_map(|p| (0..PER_PARTITION).map(move |i| Out::new(p, "job", format!("line {p} {i}"))))
        .collect();
    produce(&cluster.bootstrap, &topic, &records).await;

    let dir = test_kb();
    let raw = test_config(
        &cluster.bootstrap,
        &unique("group"),
        &topic,
        "unused-events",
        "unused-dead",
        dir.path(),
    );
    let cfg = config(raw);
    let metrics = Arc::new(Metrics::new(MetricsConfig::default()).expect("metrics"));
    let links = Arc::new(BrokerLinks::new(
        metrics.broker_disconnects(KafkaClient::Consumer),
        metrics.broker_disconnects(KafkaClient::Producer),
    ));
    let health = Health::new(Duration::from_secs(60));
    let source = KafkaSource::new(
        &cfg.kafka,
        &kafka_settings(&cfg.kafka),
        BatchLimits {
            max_records: 100,
            max_bytes: 1 << 20,
            linger: Duration::from_millis(10),
        },
        Arc::clone(&health),
        Arc::clone(&metrics),
        links,
    )
    .expect("source");
    let (tx, rx) = queue::bounded(1);
    let stop = Shutdown::new();
    let thread = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || source.run(tx, stop))
    };

    let mut seen = BTreeSet::new();
    let take = |seen: &mut BTreeSet<(i32, i64)>, batch: faultline::source::kafka::Batch| {
        for r in &batch.records {
            assert!(
                seen.insert((r.id.tp.partition, r.id.offset)),
                "{}@{} handed on twice in one assignment",
                r.id.tp,
                r.id.offset
            );
            health.tracker.resolve(&r.id, 0);
        }
    };
    // One batch, then nothing until the source has paused: the channel (one batch) fills,
    // the source blocks, librdkafka prefetches every partition meanwhile.
    take(&mut seen, rx.recv_timeout(DEADLINE).expect("a first batch"));
    wait_for("the source to pause its partitions", || {
        health.stats().paused_partitions > 0
    })
    .await;
    let deadline = Instant::now() + DEADLINE;
    while seen.len() < (i64::from(PARTITIONS) * PER_PARTITION) as usize && Instant::now() < deadline
    {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(batch) => take(&mut seen, batch),
            Err(RecvError::Timeout) => {}
            Err(RecvError::Closed) => break,
        }
    }
    wait_for("the source to resume what it paused", || {
        health.stats().paused_partitions == 0
    })
    .await;
    stop.request();
    while let Ok(batch) = rx.recv_timeout(Duration::from_secs(5)) {
        take(&mut seen, batch);
    }
    thread.join().expect("the source thread");

    for p in 0..PARTITIONS {
        let missing: Vec<i64> = (0..PER_PARTITION)
            .filter(|o| !seen.contains(&(p, *o)))
            .collect();
        assert!(
            missing.is_empty(),
            "partition {p}: {} records never handed on (first {:?})",
            missing.len(),
            &missing[..missing.len().min(5)]
        );
    }
}
