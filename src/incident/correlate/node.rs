//! A node's own events (Xid, ECC, the OOM killer...): joined to the open incidents of the jobs
//! on its host, revising a resolved failure they belong to ([`super::late`]), held for jobs
//! that show up later ([`crate::incident::nodes`]), or an incident of their own.

use std::sync::Arc;

use super::Correlator;
use crate::enrich::MatchEvent;
use crate::incident::elect::{Candidate, Standing};
use crate::incident::nodes::NodeEvent;
use crate::incident::IncidentEvent;
use crate::time::Millis;

impl Correlator {
    /// A node's own event: joined to the open incidents of the jobs on its host whose time
    /// range it falls in, and kept for jobs that show up later ([`super::nodes`]).
    pub(super) fn observe_node(
        &mut self,
        event: &MatchEvent,
        host: &Arc<str>,
        t: Millis,
        log_ms: Option<Millis>,
        out: &mut Vec<IncidentEvent>,
    ) {
        let yearless = event
            .timestamp
            .as_deref()
            .and_then(crate::time::parse)
            .filter(|s| !s.year_known);
        let mut ev = NodeEvent {
            event: event.clone(),
            t,
            held_at: t.max(self.clock.unwrap_or(t)),
            yearless,
            log_ms,
            arrival: self.arrivals,
            claimed_by: Vec::new(),
        };
        for job in self.nodes.jobs_on(host) {
            // A host of the job's failed attempt only (it restarted elsewhere): its late
            // node events revise that failure, never the next attempt's.
            let current = self.jobs.get(&job).is_some_and(|j| j.hosts.contains(host));
            if current && self.node_fits(&job, &ev) {
                self.join_node(&job, &ev, out);
                ev.claimed_by.push(job);
            } else if let Some((i, t)) = self.node_revises(&job, &ev) {
                self.revise(&job, i, &ev.event, t, ev.arrival, out);
                ev.claimed_by.push(job);
            }
        }
        if let Some(overflow) = self.nodes.hold(host, ev) {
            if overflow.claimed_by.is_empty() {
                self.node_incident(&overflow, out);
            }
        }
    }

    /// Whether node event `ev` falls in the time range of job `job`'s open incident: at most
    /// `node_join_ms` before its first error, at most a window after its last match.
    pub(super) fn node_fits(&self, job: &Arc<str>, ev: &NodeEvent) -> bool {
        let Some(inc) = self.jobs.get(job).and_then(|j| j.incident.as_ref()) else {
            return false;
        };
        let first = inc.first_effective_ms.unwrap_or(inc.first_ms);
        let last = inc.last_effective_ms.unwrap_or(inc.last_ms);
        let t = ev.time_near(first);
        t >= first - self.cfg.node_join_ms && t <= last + self.cfg.window_ms
    }

    /// Counts node event `ev` into job `job`'s open incident and offers it to its election.
    pub(super) fn join_node(
        &mut self,
        job: &Arc<str>,
        ev: &NodeEvent,
        out: &mut Vec<IncidentEvent>,
    ) {
        let cfg = &self.cfg;
        let Some(state) = self.jobs.get_mut(job) else {
            return;
        };
        let Some(inc) = state.incident.as_mut() else {
            return;
        };
        let host = ev.event.host.as_deref().map(Arc::from);
        let t = ev.time_near(inc.first_effective_ms.unwrap_or(inc.first_ms));
        let log_ms = ev.log_ms.map(|_| t);
        inc.count(&ev.event, None, host.as_ref(), t, log_ms, cfg);
        inc.note_root(&ev.event);
        let standing = Standing::of(&ev.event, log_ms, ev.arrival);
        if inc
            .election
            .offer(standing, || Candidate::of(&ev.event, standing))
        {
            inc.significant = true;
            inc.evidence_dirty = true;
            Self::re_sign(inc, &state.history, cfg);
            inc.reset_context(&state.streams);
        }
        inc.significant = true;
        self.finish_update(job, true, out);
    }

    /// A node event no job claimed: an incident of its own (job `node:<host>`).
    pub(super) fn node_incident(&mut self, ev: &NodeEvent, out: &mut Vec<IncidentEvent>) {
        self.observe_job(&ev.event, ev.t, ev.log_ms, ev.arrival, out);
    }
}
