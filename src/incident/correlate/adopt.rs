//! Identities adopted from a previous correlator ([`Correlator::adopt`]): the incidents it
//! published (left open, or resolved recently enough that their records are read again), read
//! back from the incidents topic, whose ids the same failures keep here.

use std::sync::Arc;

use super::Correlator;
use crate::incident::lifecycle::Incident;
use crate::time::Millis;

/// An incident of a previous correlator, as [`Correlator::adopt`] got it.
#[derive(Debug, Clone)]
pub(super) struct Adopted {
    pub(super) id: String,
    first_log_ms: Option<Millis>,
    last_log_ms: Option<Millis>,
    /// The hosts its job ran on, as its last change said.
    pub(super) hosts: Vec<Arc<str>>,
}

/// Adopted ids kept at most (per correlator), oldest dropped first.
pub(super) const MAX_ADOPTED: usize = 100_000;

impl Correlator {
    /// Remembers an incident that a previous correlator published: the next incident of
    /// `job_id` that opens with `id` itself (the same opening line), or else whose opening line
    /// falls within its log time (widened by `window_ms` before and `quiet_ms` after; any, when
    /// either side has no log time), opens with `id` instead of a new one. This is how a
    /// restarted correlator, or one taking a shard over, keeps a failure's identity when it
    /// reads the failure's records again. `span` is the log time of its first and last
    /// matches; `hosts` where the job ran (the lines that said so may be older than the
    /// records read again): the job is known on them from then on, so that their nodes' late
    /// events reach it.
    pub fn adopt(
        &mut self,
        job_id: &str,
        id: &str,
        span: (Option<Millis>, Option<Millis>),
        hosts: &[String],
    ) {
        let (first_log_ms, last_log_ms) = span;
        let total: usize = self.adopted.values().map(Vec::len).sum();
        if total >= MAX_ADOPTED {
            return;
        }
        // Read back after a rebalance: this correlator's own incidents keep theirs.
        if let Some(job) = self.jobs.get(job_id) {
            let own = |i: &Incident| i.id == id;
            if job.incident.as_deref().is_some_and(own) || job.closed.iter().any(|c| own(&c.inc)) {
                return;
            }
        }
        let list = self.adopted.entry(Arc::from(job_id)).or_default();
        if list.iter().any(|a| a.id == id) {
            return;
        }
        list.push(Adopted {
            id: id.to_string(),
            first_log_ms,
            last_log_ms,
            hosts: hosts.iter().map(|h| Arc::from(h.as_str())).collect(),
        });
    }

    /// Forgets the adopted incidents not taken yet: the service reads the incidents topic
    /// again after each rebalance, and that read holds every incident still worth adopting.
    pub fn forget_adopted(&mut self) {
        self.adopted.clear();
    }

    /// Takes the adopted incident of job `key` that is `fresh` (the id the incident opened with),
    /// else the first whose window holds `log_ms`.
    pub(super) fn take_adopted(
        &mut self,
        key: &Arc<str>,
        log_ms: Option<Millis>,
        fresh: &str,
    ) -> Option<Adopted> {
        let (window, quiet) = (self.cfg.window_ms, self.cfg.quiet_ms);
        let list = self.adopted.get_mut(key)?;
        let at = list.iter().position(|a| a.id == fresh).or_else(|| {
            list.iter()
                .position(|a| match (log_ms, a.first_log_ms, a.last_log_ms) {
                    (Some(t), Some(from), Some(to)) => {
                        t >= from.saturating_sub(window) && t <= to.saturating_add(quiet)
                    }
                    _ => true,
                })
        })?;
        let adopted = list.remove(at);
        if list.is_empty() {
            self.adopted.remove(key);
        }
        Some(adopted)
    }
}
