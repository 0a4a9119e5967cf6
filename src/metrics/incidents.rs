//! The incident and ticket families of `faultline run`.

use prometheus::{IntCounter, IntCounterVec, IntGauge, Registry};

use super::labels::{Eviction, ResolutionLabel, WebhookResult};
use super::{counter_vec, register, MetricsError};

/// The incident and ticket families of `faultline run` (labels are closed sets: resolutions,
/// delivery results; never fingerprints, jobs or hosts).
#[derive(Debug, Clone)]
pub struct IncidentFamilies {
    /// `faultline_incidents_open`.
    pub open: IntGauge,
    /// `faultline_incidents_opened_total`.
    pub opened: IntCounter,
    resolved: IntCounterVec,
    evictions: IntCounterVec,
    /// `faultline_incident_restart_loops_total`.
    pub restart_loops: IntCounter,
    /// `faultline_tickets_raised_total`.
    pub tickets_raised: IntCounter,
    webhook: IntCounterVec,
    /// `faultline_webhook_retries_total`.
    pub webhook_retries: IntCounter,
    /// `faultline_bad_node_score_max`.
    pub bad_node_score_max: prometheus::Gauge,
    /// `faultline_incident_commit_holds`.
    pub holds: IntGauge,
    /// `faultline_incident_commit_holds_expired_total`.
    pub holds_expired: IntCounter,
}

impl IncidentFamilies {
    /// Registers the families, every label value at zero.
    pub fn register(r: &Registry) -> Result<Self, MetricsError> {
        let f = IncidentFamilies {
            open: register(
                r,
                IntGauge::new(
                    "faultline_incidents_open",
                    "Incidents open in the correlator.",
                )?,
            )?,
            opened: register(
                r,
                IntCounter::new("faultline_incidents_opened_total", "Incidents opened.")?,
            )?,
            resolved: counter_vec(
                r,
                "faultline_incidents_resolved_total",
                "Incidents resolved, by resolution (quiet, next_incident, restart, evicted, \
                 shutdown).",
                &["resolution"],
            )?,
            evictions: counter_vec(
                r,
                "faultline_incident_evictions_total",
                "State dropped to respect the correlator's caps: open incidents resolved as \
                 evicted (state=incident), jobs forgotten (state=job).",
                &["state"],
            )?,
            restart_loops: register(
                r,
                IntCounter::new(
                    "faultline_incident_restart_loops_total",
                    "Incidents whose fingerprint recurred in their job often enough to be a \
                     restart loop.",
                )?,
            )?,
            tickets_raised: register(
                r,
                IntCounter::new(
                    "faultline_tickets_raised_total",
                    "Incidents whose ticket was raised (a root-role initiator, or the match \
                     threshold).",
                )?,
            )?,
            webhook: counter_vec(
                r,
                "faultline_webhook_changes_total",
                "Ticketed incident changes handed to the webhook, by result: delivered, \
                 dead_lettered (retries exhausted or refused), dropped (the webhook queue was \
                 full), abandoned (still queued at shutdown; replayed after the restart).",
                &["result"],
            )?,
            webhook_retries: register(
                r,
                IntCounter::new(
                    "faultline_webhook_retries_total",
                    "Webhook attempts retried after a transport error, 408, 429 or 5xx.",
                )?,
            )?,
            bad_node_score_max: register(
                r,
                prometheus::Gauge::new(
                    "faultline_bad_node_score_max",
                    "The highest bad-node score of any host: distinct jobs whose incidents the \
                     host initiated, halving every half-life.",
                )?,
            )?,
            holds: register(
                r,
                IntGauge::new(
                    "faultline_incident_commit_holds",
                    "Partitions whose committed offset waits at the first record of an open \
                     incident.",
                )?,
            )?,
            holds_expired: register(
                r,
                IntCounter::new(
                    "faultline_incident_commit_holds_expired_total",
                    "Incidents whose commit holds were lifted after incidents.max_hold_ms \
                     while still open.",
                )?,
            )?,
        };
        for res in ResolutionLabel::ALL {
            f.resolved.with_label_values(&[res.as_str()]);
        }
        for state in Eviction::ALL {
            f.evictions.with_label_values(&[state.as_str()]);
        }
        for res in WebhookResult::ALL {
            f.webhook.with_label_values(&[res.as_str()]);
        }
        Ok(f)
    }

    /// Counts a resolution.
    pub fn resolved(&self, r: ResolutionLabel) {
        self.resolved.with_label_values(&[r.as_str()]).inc();
    }

    /// Counts `n` evictions.
    pub fn evicted(&self, what: Eviction, n: u64) {
        self.evictions.with_label_values(&[what.as_str()]).inc_by(n);
    }

    /// Counts a webhook change's outcome.
    pub fn webhook(&self, r: WebhookResult) {
        self.webhook.with_label_values(&[r.as_str()]).inc();
    }
}
