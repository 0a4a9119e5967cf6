//! The unknown-failure families of `faultline run`: error lines that no KB entry knows, the
//! templates they form, and the `unknown` events (see [`crate::unknown`]). No template, job or
//! text label: a template is not a closed set.

use prometheus::{IntCounter, IntCounterVec, IntGauge, Registry};

use super::{counter_vec, register, MetricsError};
use crate::unknown::LiveStats;

/// What an eviction of the live miners dropped: the `what` label.
const EVICTED: [&str; 2] = ["template", "job"];

/// The unknown-failure families.
#[derive(Debug, Clone)]
pub struct UnknownFamilies {
    lines: IntCounter,
    templates: IntGauge,
    events: IntCounter,
    suppressed: IntCounter,
    evictions: IntCounterVec,
}

impl UnknownFamilies {
    /// Registers the families, every label value at zero.
    pub fn register(r: &Registry) -> Result<Self, MetricsError> {
        let f = UnknownFamilies {
            lines: register(
                r,
                IntCounter::new(
                    "faultline_unknown_lines_total",
                    "Lines that look like errors and that no KB entry matched, mined into \
                     templates.",
                )?,
            )?,
            templates: register(
                r,
                IntGauge::new(
                    "faultline_unknown_templates",
                    "Live templates of unknown error lines, over every job's miner.",
                )?,
            )?,
            events: register(
                r,
                IntCounter::new(
                    "faultline_unknown_events_total",
                    "unknown events produced (a template new, changed, or recurring after its \
                     interval).",
                )?,
            )?,
            suppressed: register(
                r,
                IntCounter::new(
                    "faultline_unknown_events_suppressed_total",
                    "unknown events held back by the per-job budget (unknown.max_events_per_minute).",
                )?,
            )?,
            evictions: counter_vec(
                r,
                "faultline_unknown_evictions_total",
                "Evictions of the live template miners: a template from a full job miner \
                 (unknown.max_templates), or a job's miner (unknown.max_jobs).",
                &["what"],
            )?,
        };
        for what in EVICTED {
            f.evictions.with_label_values(&[what]);
        }
        Ok(f)
    }

    /// Publishes what happened between `before` and `now` (cumulative counts), and the live
    /// templates.
    pub fn publish(&self, before: &LiveStats, now: &LiveStats, templates: usize) {
        self.lines.inc_by(now.lines.saturating_sub(before.lines));
        self.events.inc_by(now.events.saturating_sub(before.events));
        self.suppressed
            .inc_by(now.suppressed.saturating_sub(before.suppressed));
        self.evictions.with_label_values(&[EVICTED[0]]).inc_by(
            now.evicted_templates
                .saturating_sub(before.evicted_templates),
        );
        self.evictions
            .with_label_values(&[EVICTED[1]])
            .inc_by(now.evicted_jobs.saturating_sub(before.evicted_jobs));
        self.templates
            .set(i64::try_from(templates).unwrap_or(i64::MAX));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publishes_deltas_and_the_gauge() {
        let r = Registry::new();
        let f = UnknownFamilies::register(&r).expect("registers");
        let a = LiveStats {
            lines: 5,
            events: 2,
            suppressed: 1,
            evicted_templates: 0,
            evicted_jobs: 0,
        };
        f.publish(&LiveStats::default(), &a, 3);
        let b = LiveStats {
            lines: 9,
            evicted_jobs: 1,
            ..a
        };
        f.publish(&a, &b, 2);
        assert_eq!(f.lines.get(), 9);
        assert_eq!(f.events.get(), 2);
        assert_eq!(f.suppressed.get(), 1);
        assert_eq!(f.templates.get(), 2);
        assert_eq!(f.evictions.with_label_values(&["job"]).get(), 1);
        assert_eq!(f.evictions.with_label_values(&["template"]).get(), 0);
    }
}
