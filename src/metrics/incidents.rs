//! The incident and ticket families of `faultline run`: failures counted once each (not once per
//! matched line), by the root's error code, domain and category; how many ranks each touched;
//! the nodes blamed for node-class roots; tickets raised and commit holds (the outputs' own
//! families are in [`super::outputs`]).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use prometheus::{Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Registry};

use crate::incident::IncidentEvent;
use crate::kb::{CauseClass, KnowledgeBase};

/// Hosts `faultline_node_incidents_total` names before counting the rest as `other`.
pub const MAX_BLAMED_HOSTS: usize = 1_000;

use super::labels::{CorrelatorResult, Eviction, ResolutionLabel};
use super::{counter_vec, register, MetricsError};

/// The incident and ticket families of `faultline run` (labels are closed sets: resolutions,
/// delivery results; never fingerprints, jobs or hosts).
#[derive(Debug, Clone)]
pub struct IncidentFamilies {
    /// `faultline_incidents_open`.
    pub open: IntGauge,
    opened: IntCounterVec,
    ranks_affected: Histogram,
    blamed: IntCounterVec,
    blamed_hosts: Arc<Mutex<HashSet<String>>>,
    resolved: IntCounterVec,
    evictions: IntCounterVec,
    /// `faultline_incident_restart_loops_total`.
    pub restart_loops: IntCounter,
    /// `faultline_tickets_raised_total`.
    pub tickets_raised: IntCounter,
    /// `faultline_bad_node_score_max`.
    pub bad_node_score_max: prometheus::Gauge,
    /// `faultline_incident_commit_holds`.
    pub holds: IntGauge,
    /// `faultline_incident_commit_holds_expired_total`.
    pub holds_expired: IntCounter,
    correlator: IntCounterVec,
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
            opened: counter_vec(
                r,
                "faultline_incidents_opened_total",
                "Incidents opened (one per failure of a job, not per matched line), by the \
                 error code, domain and category of their root when they opened.",
                &["error_code", "domain", "category"],
            )?,
            ranks_affected: register(
                r,
                Histogram::with_opts(
                    HistogramOpts::new(
                        "faultline_incident_ranks",
                        "Ranks an incident touched (matched lines of), observed when it resolves.",
                    )
                    .buckets(prometheus::exponential_buckets(1.0, 2.0, 16)?),
                )?,
            )?,
            blamed: counter_vec(
                r,
                "faultline_node_incidents_total",
                "Incidents whose root is a node's hardware or driver (Xid, ECC, PCIe, NVLink, \
                 the kernel), by the host blamed: lemon nodes. At most 1000 hosts are named; the \
                 rest count as host=\"other\".",
                &["host"],
            )?,
            blamed_hosts: Arc::new(Mutex::new(HashSet::new())),
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
            correlator: counter_vec(
                r,
                "faultline_correlator_events_total",
                "Role correlate: events-topic records by what the correlator did with them: \
                 correlated, unknown_entry (correlated with the event's own diagnosis), \
                 unknown (an unknown-line event, its template noted), duplicate (a match \
                 member's replay, skipped), skipped (another type), invalid (dead-lettered).",
                &["result"],
            )?,
        };
        for res in CorrelatorResult::ALL {
            f.correlator.with_label_values(&[res.as_str()]);
        }
        f.blamed.with_label_values(&[super::OTHER]);
        for res in ResolutionLabel::ALL {
            f.resolved.with_label_values(&[res.as_str()]);
        }
        for state in Eviction::ALL {
            f.evictions.with_label_values(&[state.as_str()]);
        }
        Ok(f)
    }

    /// Creates `faultline_incidents_opened_total`'s series at zero for every entry of `kb` that
    /// can open an incident, so `rate()` sees the first one.
    pub fn set_kb(&self, kb: &KnowledgeBase) {
        for e in &kb.entries {
            if e.role != crate::kb::Role::Info && e.category != "context" {
                self.opened.with_label_values(&[
                    e.error_code.as_str(),
                    e.domain.as_str(),
                    &e.category,
                ]);
            }
        }
    }

    /// Counts an incident that opened, by its root.
    pub fn opened(&self, i: &IncidentEvent) {
        let domain = i.root.kb_id.split('/').next().unwrap_or("");
        self.opened
            .with_label_values(&[i.root.error_code.as_str(), domain, &i.root.category])
            .inc();
    }

    /// Observes a resolved incident: the ranks it touched, and the node it blames when its
    /// root is a node's hardware or driver.
    pub fn resolved_incident(&self, i: &IncidentEvent) {
        self.ranks_affected.observe(i.counts.ranks.max(1) as f64);
        if i.diagnosis.cause_class != CauseClass::Node || !i.root_known {
            return;
        }
        let Some(host) = i.blamed_host.as_deref().or(i.root.host.as_deref()) else {
            return;
        };
        let label = {
            let mut hosts = self.blamed_hosts.lock().unwrap_or_else(|p| p.into_inner());
            if hosts.contains(host) {
                host.to_string()
            } else if hosts.len() < MAX_BLAMED_HOSTS {
                hosts.insert(host.to_string());
                host.to_string()
            } else {
                super::OTHER.to_string()
            }
        };
        self.blamed.with_label_values(&[label.as_str()]).inc();
    }

    /// Counts a resolution.
    pub fn resolved(&self, r: ResolutionLabel) {
        self.resolved.with_label_values(&[r.as_str()]).inc();
    }

    /// Counts `n` evictions.
    pub fn evicted(&self, what: Eviction, n: u64) {
        self.evictions.with_label_values(&[what.as_str()]).inc_by(n);
    }

    /// Counts `n` events-topic records of role `correlate` by result.
    pub fn correlator(&self, r: CorrelatorResult, n: u64) {
        self.correlator.with_label_values(&[r.as_str()]).inc_by(n);
    }
}
