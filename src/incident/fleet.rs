//! Fleet signals across jobs: bad-node scores.
//!
//! A host whose hardware or software initiates incidents in several jobs is likely the problem,
//! not the jobs. Each distinct job whose incident a host initiated (its root match came from
//! the host, or the single culprit host when the root is unknown) adds 1 to the host's score;
//! the score halves every `bad_node_half_life_ms` of log time. The same job failing again on
//! the same host does not add (that is a restart loop, see `correlate`). Bounded: at most
//! `max_hosts` hosts, least recently credited forgotten first.
//!
//! Metrics come with the Prometheus issue; until then [`Fleet::hosts`] and
//! [`Fleet::score`] are the accessors.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use super::lru::LruOrder;
use crate::time::Millis;

/// Recent jobs remembered per host, to count distinct jobs.
const RECENT_JOBS: usize = 16;

#[derive(Debug, Clone)]
struct HostScore {
    score: f64,
    at_ms: Millis,
    recent_jobs: VecDeque<Arc<str>>,
    tick: u64,
}

/// Bad-node scores of the hosts seen.
#[derive(Debug, Clone)]
pub struct Fleet {
    hosts: HashMap<Arc<str>, HostScore>,
    lru: LruOrder<Arc<str>>,
    cap: usize,
    half_life_ms: Millis,
}

fn decayed(score: f64, from: Millis, to: Millis, half_life_ms: Millis) -> f64 {
    if to <= from || half_life_ms <= 0 {
        return score;
    }
    score * 0.5f64.powf((to - from) as f64 / half_life_ms as f64)
}

/// Scores are printed with three decimals so that output stays stable.
fn round(score: f64) -> f64 {
    (score * 1000.0).round() / 1000.0
}

impl Fleet {
    /// An empty fleet remembering at most `cap` hosts (at least 1), whose scores halve every
    /// `half_life_ms` of log time.
    pub fn new(cap: usize, half_life_ms: Millis) -> Self {
        Fleet {
            hosts: HashMap::new(),
            lru: LruOrder::default(),
            cap: cap.max(1),
            half_life_ms,
        }
    }

    /// Credits `host` with an incident of `job` at `t`; returns the new score.
    pub fn credit(&mut self, host: &Arc<str>, job: &Arc<str>, t: Millis) -> f64 {
        if !self.hosts.contains_key(host) && self.hosts.len() >= self.cap {
            if let Some(old) = self.lru.pop_oldest() {
                self.hosts.remove(&old);
            }
        }
        let half_life = self.half_life_ms;
        let lru = &mut self.lru;
        let entry = self
            .hosts
            .entry(Arc::clone(host))
            .or_insert_with(|| HostScore {
                score: 0.0,
                at_ms: t,
                recent_jobs: VecDeque::new(),
                tick: lru.push(Arc::clone(host)),
            });
        entry.tick = lru.touch(entry.tick);
        entry.score = decayed(entry.score, entry.at_ms, t, half_life);
        entry.at_ms = entry.at_ms.max(t);
        if !entry.recent_jobs.iter().any(|j| j == job) {
            entry.score += 1.0;
            if entry.recent_jobs.len() >= RECENT_JOBS {
                entry.recent_jobs.pop_front();
            }
            entry.recent_jobs.push_back(Arc::clone(job));
        }
        round(entry.score)
    }

    /// The score of `host` at `t`, if it has one.
    pub fn score(&self, host: &str, t: Millis) -> Option<f64> {
        self.hosts
            .get(host)
            .map(|h| round(decayed(h.score, h.at_ms, t, self.half_life_ms)))
    }

    /// The highest score of any host at `t` (a walk over the hosts: call it per scrape, not
    /// per match).
    pub fn max_score(&self, t: Millis) -> Option<f64> {
        self.hosts
            .values()
            .map(|h| round(decayed(h.score, h.at_ms, t, self.half_life_ms)))
            .reduce(f64::max)
    }

    /// How many hosts have a score.
    pub fn hosts(&self) -> usize {
        self.hosts.len()
    }

    /// Sizes of the internal maps, for tests of the bounds.
    pub fn sizes(&self) -> (usize, usize) {
        (self.hosts.len(), self.lru.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distinct_jobs_raise_the_score_and_it_decays() {
        let mut f = Fleet::new(8, 1000);
        let h: Arc<str> = Arc::from("node-05");
        let (a, b): (Arc<str>, Arc<str>) = (Arc::from("a"), Arc::from("b"));
        assert_eq!(f.credit(&h, &a, 0), 1.0);
        assert_eq!(f.credit(&h, &a, 0), 1.0, "same job again does not add");
        assert_eq!(f.credit(&h, &b, 0), 2.0);
        assert_eq!(f.score("node-05", 1000), Some(1.0));
        assert_eq!(f.score("node-06", 0), None);
    }

    #[test]
    fn hosts_are_capped() {
        let mut f = Fleet::new(2, 1000);
        let j: Arc<str> = Arc::from("j");
        for h in ["a", "b", "c"] {
            f.credit(&Arc::from(h), &j, 0);
        }
        assert_eq!(f.sizes(), (2, 2));
        assert_eq!(f.score("a", 0), None);
    }
}
