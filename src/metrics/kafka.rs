//! The Kafka side: consumer lag and committed offset per assigned partition (from librdkafka's
//! statistics), produce errors by output, and lost broker connections by client.

use prometheus::{IntCounter, IntCounterVec, IntGaugeVec, Registry};

use super::labels::{KafkaClient, Output};
use super::{counter_vec, gauge_vec, MetricsError};

/// The Kafka families.
#[derive(Debug)]
pub struct KafkaFamilies {
    lag: IntGaugeVec,
    committed: IntGaugeVec,
    produce_errors: IntCounterVec,
    broker_disconnects: IntCounterVec,
    offset_resets: IntCounter,
}

impl KafkaFamilies {
    /// Registers the families, every output at zero.
    pub fn register(r: &Registry) -> Result<Self, MetricsError> {
        let f = KafkaFamilies {
            lag: gauge_vec(
                r,
                "faultline_consumer_lag_records",
                "Records between the consumer's position (what faultline has read) and the end \
                 of each assigned partition; not from the committed offset, which open \
                 incidents may hold back.",
                &["topic", "partition"],
            )?,
            committed: gauge_vec(
                r,
                "faultline_committed_offset",
                "Last offset committed for each assigned partition.",
                &["topic", "partition"],
            )?,
            produce_errors: counter_vec(
                r,
                "faultline_produce_errors_total",
                "Records the producer failed to deliver, by output.",
                &["output"],
            )?,
            broker_disconnects: counter_vec(
                r,
                "faultline_broker_disconnects_total",
                "Connections to a broker lost, by client: each client counts once per broker \
                 outage, however many reconnects librdkafka tries before it is back.",
                &["client"],
            )?,
            offset_resets: {
                let c = IntCounter::new(
                    "faultline_consumer_offset_resets_total",
                    "Partitions whose next offset was no longer on the broker (past its retention, \
                     or a log truncated by an unclean leader election): the consumer jumped to \
                     kafka.auto_offset_reset, and the records in between were NOT processed.",
                )?;
                r.register(Box::new(c.clone()))?;
                c
            },
        };
        for o in Output::ALL {
            f.produce_errors.with_label_values(&[o.as_str()]);
        }
        for c in KafkaClient::ALL {
            f.broker_disconnects.with_label_values(&[c.as_str()]);
        }
        Ok(f)
    }

    /// Sets the lag and the committed offset of one assigned partition (per poll or commit).
    pub fn set_partition(&self, topic: &str, partition: i32, lag: i64, committed: Option<i64>) {
        let p = partition.to_string();
        self.lag
            .with_label_values(&[topic, p.as_str()])
            .set(lag.max(0));
        if let Some(offset) = committed {
            self.committed
                .with_label_values(&[topic, p.as_str()])
                .set(offset);
        }
    }

    /// Drops a revoked partition's series: a stale lag would page someone for nothing.
    pub fn forget_partition(&self, topic: &str, partition: i32) {
        let p = partition.to_string();
        let _ = self.lag.remove_label_values(&[topic, p.as_str()]);
        let _ = self.committed.remove_label_values(&[topic, p.as_str()]);
    }

    /// Counts `n` records the producer failed to deliver.
    pub fn produce_errors(&self, output: Output, n: u64) {
        self.produce_errors
            .with_label_values(&[output.as_str()])
            .inc_by(n);
    }

    /// The counter of offset resets (records skipped).
    pub fn offset_resets(&self) -> IntCounter {
        self.offset_resets.clone()
    }

    /// The counter of `client`'s lost broker connections.
    pub fn broker_disconnects(&self, client: KafkaClient) -> prometheus::IntCounter {
        self.broker_disconnects
            .with_label_values(&[client.as_str()])
    }
}
