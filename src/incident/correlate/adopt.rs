//! Identities adopted from a previous correlator ([`Correlator::adopt`]): the incidents it
//! left open, read back from the incidents topic, whose ids the same failures keep here.

use std::sync::Arc;

use super::Correlator;
use crate::time::Millis;

/// An open incident of a previous correlator, as [`Correlator::adopt`] got it.
#[derive(Debug, Clone)]
pub(super) struct Adopted {
    id: String,
    first_log_ms: Option<Millis>,
    last_log_ms: Option<Millis>,
}

/// Adopted ids kept at most (per correlator), oldest dropped first.
pub(super) const MAX_ADOPTED: usize = 100_000;

impl Correlator {
    /// Remembers an incident that a previous correlator had open (its last change on the
    /// incidents topic was not a resolution): the next incident of `job_id` whose opening line
    /// falls within its log time (widened by `window_ms` before and `quiet_ms` after; any, when
    /// either side has no log time) opens with `id` instead of a new one. This is how a
    /// restarted correlator, or one taking a shard over, keeps an open failure's identity.
    pub fn adopt(
        &mut self,
        job_id: &str,
        id: &str,
        first_log_ms: Option<Millis>,
        last_log_ms: Option<Millis>,
    ) {
        let total: usize = self.adopted.values().map(Vec::len).sum();
        if total >= MAX_ADOPTED {
            return;
        }
        let list = self.adopted.entry(Arc::from(job_id)).or_default();
        if list.iter().any(|a| a.id == id) {
            return;
        }
        list.push(Adopted {
            id: id.to_string(),
            first_log_ms,
            last_log_ms,
        });
    }

    /// Takes the adopted id of job `key` whose window holds `log_ms`.
    pub(super) fn take_adopted(
        &mut self,
        key: &Arc<str>,
        log_ms: Option<Millis>,
    ) -> Option<String> {
        let (window, quiet) = (self.cfg.window_ms, self.cfg.quiet_ms);
        let list = self.adopted.get_mut(key)?;
        let at = list
            .iter()
            .position(|a| match (log_ms, a.first_log_ms, a.last_log_ms) {
                (Some(t), Some(from), Some(to)) => {
                    t >= from.saturating_sub(window) && t <= to.saturating_add(quiet)
                }
                _ => true,
            })?;
        let id = list.remove(at).id;
        if list.is_empty() {
            self.adopted.remove(key);
        }
        Some(id)
    }
}
