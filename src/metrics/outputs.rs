//! The incident outputs' families, one set for every output (`output` label: `webhook`,
//! `alertmanager`, or whatever an output calls itself): what became of each change handed to
//! it, its retries, its queue and the items it keeps open.

use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Registry};

use super::labels::OutputResult;
use super::{counter_vec, gauge_vec, MetricsError};

/// `faultline_output_*`.
#[derive(Debug, Clone)]
pub struct OutputFamilies {
    changes: IntCounterVec,
    retries: IntCounterVec,
    queued: IntGaugeVec,
    open: IntGaugeVec,
}

/// The series of one output, resolved once.
#[derive(Debug, Clone)]
pub struct OutputCounters {
    results: Vec<(OutputResult, IntCounter)>,
    /// `faultline_output_retries_total{output}`.
    pub retries: IntCounter,
    /// `faultline_output_queued_changes{output}`.
    pub queued: IntGauge,
    /// `faultline_output_open_items{output}`.
    pub open: IntGauge,
}

impl OutputCounters {
    /// Counts `n` changes with result `r`.
    pub fn count(&self, r: OutputResult, n: u64) {
        if let Some((_, c)) = self.results.iter().find(|(x, _)| *x == r) {
            c.inc_by(n);
        }
    }
}

impl OutputFamilies {
    /// Registers the families (series appear per output, see [`OutputFamilies::output`]).
    pub fn register(r: &Registry) -> Result<Self, MetricsError> {
        Ok(OutputFamilies {
            changes: counter_vec(
                r,
                "faultline_output_changes_total",
                "Incident changes handed to an output, by output and result: delivered \
                 (accepted by the receiver), failed (not accepted after the retries; the output \
                 sends the state again later, e.g. at Alertmanager's next resend), \
                 dead_lettered (given up: produced to the dead-letter topic), dropped (the \
                 output's queue was full), abandoned (still queued at shutdown; handled again \
                 after the restart).",
                &["output", "result"],
            )?,
            retries: counter_vec(
                r,
                "faultline_output_retries_total",
                "Output requests retried after a transport error, 408, 429 or 5xx.",
                &["output"],
            )?,
            queued: gauge_vec(
                r,
                "faultline_output_queued_changes",
                "Incident changes waiting in an output's queue.",
                &["output"],
            )?,
            open: gauge_vec(
                r,
                "faultline_output_open_items",
                "Items an output keeps alive on its receiver (Alertmanager: the alerts of open \
                 incidents that faultline keeps firing).",
                &["output"],
            )?,
        })
    }

    /// The series of output `name`, every result at zero.
    pub fn output(&self, name: &str) -> OutputCounters {
        OutputCounters {
            results: OutputResult::ALL
                .iter()
                .map(|&r| (r, self.changes.with_label_values(&[name, r.as_str()])))
                .collect(),
            retries: self.retries.with_label_values(&[name]),
            queued: self.queued.with_label_values(&[name]),
            open: self.open.with_label_values(&[name]),
        }
    }
}
