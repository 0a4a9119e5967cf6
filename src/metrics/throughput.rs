//! What went through: records, bytes and lines consumed, dead letters by reason, the time to
//! scan a batch, and the delay from a matched line's own timestamp to its count.

use std::time::{SystemTime, UNIX_EPOCH};

use prometheus::{Histogram, HistogramOpts, IntCounter, IntCounterVec, Registry};

use super::batch::BatchCounts;
use super::labels::DeadLetterReason;
use super::{counter_vec, register, MetricsError};

/// The throughput families.
#[derive(Debug)]
pub struct ThroughputFamilies {
    records: IntCounter,
    bytes: IntCounter,
    lines: IntCounter,
    json_lines: IntCounter,
    dead_letters: IntCounterVec,
    batch_scan: Histogram,
    latency: Histogram,
}

impl ThroughputFamilies {
    /// Registers the families, every dead-letter reason at zero.
    pub fn register(r: &Registry) -> Result<Self, MetricsError> {
        let counter = |name: &str, help: &str| register(r, IntCounter::new(name, help)?);
        let f = ThroughputFamilies {
            records: counter(
                "faultline_records_consumed_total",
                "Records consumed from the input topics.",
            )?,
            bytes: counter(
                "faultline_consumed_bytes_total",
                "Payload bytes of the records consumed from the input topics.",
            )?,
            lines: counter(
                "faultline_lines_scanned_total",
                "Log lines scanned against the knowledge base.",
            )?,
            json_lines: counter(
                "faultline_json_lines_decoded_total",
                "Lines of the scanned records decoded as JSON envelopes (each line once, however \
                 many steps read it).",
            )?,
            dead_letters: counter_vec(
                r,
                "faultline_records_dead_lettered_total",
                "Records sent to the dead-letter topic, by reason.",
                &["reason"],
            )?,
            batch_scan: register(
                r,
                Histogram::with_opts(
                    HistogramOpts::new(
                        "faultline_batch_scan_duration_seconds",
                        "Time to scan and enrich one batch of records.",
                    )
                    .buckets(prometheus::exponential_buckets(0.000_25, 2.0, 16)?),
                )?,
            )?,
            latency: register(
                r,
                Histogram::with_opts(
                    HistogramOpts::new(
                        "faultline_log_to_metric_latency_seconds",
                        "Time from a matched log line's own timestamp to its match being counted.",
                    )
                    .buckets(vec![
                        0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
                        1800.0, 3600.0,
                    ]),
                )?,
            )?,
        };
        for reason in DeadLetterReason::ALL {
            f.dead_letters.with_label_values(&[reason.as_str()]);
        }
        Ok(f)
    }

    /// Publishes the batch's throughput counts (the matches are published by the match
    /// families).
    pub(super) fn publish(&self, batch: &mut BatchCounts) {
        self.records.inc_by(batch.records);
        self.bytes.inc_by(batch.bytes);
        self.json_lines.inc_by(batch.json_lines);
        self.lines.inc_by(batch.lines);
        for (reason, &n) in DeadLetterReason::ALL.iter().zip(&batch.dead_letters) {
            if n > 0 {
                self.dead_letters
                    .with_label_values(&[reason.as_str()])
                    .inc_by(n);
            }
        }
        if let Some(t) = batch.scan_time.take() {
            self.batch_scan.observe(t.as_secs_f64());
        }
        if !batch.log_times.is_empty() {
            let now = unix_now();
            let local = self.latency.local();
            for &t in &batch.log_times {
                // Clocks disagree across a fleet: a line "from the future" counts as no delay.
                local.observe((now - t).max(0.0));
            }
            local.flush();
        }
    }
}

/// Seconds since the Unix epoch, now.
pub(super) fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}
