//! Signs of trouble inside faultline itself: panics caught by stage (each is a bug) and trace
//! spans that were not exported.

use prometheus::{IntCounter, IntCounterVec, Registry};

use super::labels::{PanicStage, SpanDrop};
use super::{counter_vec, MetricsError};

/// The self-health families.
#[derive(Debug)]
pub struct HealthFamilies {
    spans_dropped: IntCounterVec,
    panics: IntCounterVec,
}

impl HealthFamilies {
    /// Registers the families, every label value at zero.
    pub fn register(r: &Registry) -> Result<Self, MetricsError> {
        let f = HealthFamilies {
            spans_dropped: counter_vec(
                r,
                "faultline_spans_dropped_total",
                "Trace spans that were not exported, by reason.",
                &["reason"],
            )?,
            panics: counter_vec(
                r,
                "faultline_panics_total",
                "Panics caught while processing records, by pipeline stage: each is a bug. The \
                 batch is retried, then processed record by record, and records that still \
                 panic are dead-lettered (reason panic).",
                &["stage"],
            )?,
        };
        for stage in PanicStage::ALL {
            f.panics.with_label_values(&[stage.as_str()]);
        }
        for d in SpanDrop::ALL {
            f.spans_dropped.with_label_values(&[d.as_str()]);
        }
        Ok(f)
    }

    /// Counts a panic caught in `stage`.
    pub fn panicked(&self, stage: PanicStage) {
        self.panics.with_label_values(&[stage.as_str()]).inc();
    }

    /// The counter of spans lost for `reason`, for the telemetry exporter to increment.
    pub fn spans_dropped(&self, reason: SpanDrop) -> IntCounter {
        self.spans_dropped.with_label_values(&[reason.as_str()])
    }
}
