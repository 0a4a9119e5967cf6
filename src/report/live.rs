//! The report input a running correlator keeps, for its `/report` page and the report's
//! Prometheus families.
//!
//! The correlator role of `faultline run` (and `demo`) hands every match event it consumes and
//! every incident change it makes to a [`LiveInput`]: a match becomes a [`Fact`] exactly as
//! `faultline report` makes one (start-up, progress, checkpoint, a node's root line; anything
//! else is dropped at once), an incident is kept in its latest state, read through the same
//! JSON as `faultline report --from-json` reads (so the same lines give the same numbers).
//!
//! Bounded: at most `max_facts` facts and `max_incidents` incidents, the oldest forgotten first
//! (a report over a range older than what is kept sees less than the logs hold; the page says
//! how much was forgotten).

use std::collections::VecDeque;

use rustc_hash::FxHashMap;

use super::input::{self, Fact, IncidentFact, Input, Name};
use super::{build, Options, Report};
use crate::enrich::MatchEvent;

/// Facts kept by default: about 150 bytes each.
pub const DEFAULT_MAX_FACTS: usize = 200_000;
/// Incidents kept by default.
pub const DEFAULT_MAX_INCIDENTS: usize = 20_000;

/// A bounded report input, fed as events arrive.
#[derive(Debug)]
pub struct LiveInput {
    facts: VecDeque<Fact>,
    incidents: VecDeque<IncidentFact>,
    /// Position of each kept incident in `incidents`, offset by `popped`.
    by_id: FxHashMap<Name, u64>,
    popped: u64,
    max_facts: usize,
    max_incidents: usize,
    forgotten_facts: u64,
    forgotten_incidents: u64,
}

impl Default for LiveInput {
    fn default() -> Self {
        LiveInput::new(DEFAULT_MAX_FACTS, DEFAULT_MAX_INCIDENTS)
    }
}

/// What a [`LiveInput`] holds and forgot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LiveSizes {
    /// Facts kept.
    pub facts: usize,
    /// Incidents kept.
    pub incidents: usize,
    /// Facts forgotten to stay within the bound.
    pub forgotten_facts: u64,
    /// Incidents forgotten to stay within the bound.
    pub forgotten_incidents: u64,
}

impl LiveInput {
    /// An empty input of at most `max_facts` facts and `max_incidents` incidents (each at
    /// least 1).
    pub fn new(max_facts: usize, max_incidents: usize) -> Self {
        LiveInput {
            facts: VecDeque::new(),
            incidents: VecDeque::new(),
            by_id: FxHashMap::default(),
            popped: 0,
            max_facts: max_facts.max(1),
            max_incidents: max_incidents.max(1),
            forgotten_facts: 0,
            forgotten_incidents: 0,
        }
    }

    /// Keeps the fact a match carries, if the report reads it.
    pub fn observe_match(&mut self, event: &MatchEvent) {
        let Some(fact) = Fact::from_event(event) else {
            return;
        };
        if self.facts.len() >= self.max_facts {
            self.facts.pop_front();
            self.forgotten_facts += 1;
        }
        self.facts.push_back(fact);
    }

    /// Keeps an incident's latest state, from its JSON object (`scan --format json`'s).
    pub fn observe_incident_json(&mut self, json: &[u8]) {
        let Some(inc) = input::incident_of_json(json) else {
            return;
        };
        if let Some(&at) = self.by_id.get(&inc.fingerprint) {
            if let Some(slot) = at
                .checked_sub(self.popped)
                .and_then(|i| self.incidents.get_mut(i as usize))
            {
                *slot = inc;
                return;
            }
        }
        if self.incidents.len() >= self.max_incidents {
            if let Some(old) = self.incidents.pop_front() {
                self.by_id.remove(&old.fingerprint);
            }
            self.popped += 1;
            self.forgotten_incidents += 1;
        }
        self.by_id.insert(
            inc.fingerprint.clone(),
            self.popped + self.incidents.len() as u64,
        );
        self.incidents.push_back(inc);
    }

    /// What it holds now.
    pub fn sizes(&self) -> LiveSizes {
        LiveSizes {
            facts: self.facts.len(),
            incidents: self.incidents.len(),
            forgotten_facts: self.forgotten_facts,
            forgotten_incidents: self.forgotten_incidents,
        }
    }

    /// A copy of what it holds, as `faultline report` reads a scan.
    pub fn input(&self) -> Input {
        let mut latest = FxHashMap::default();
        let mut incidents = Vec::with_capacity(self.incidents.len());
        for inc in &self.incidents {
            input::keep_latest(inc.clone(), &mut incidents, &mut latest);
        }
        Input {
            facts: self.facts.iter().cloned().collect(),
            incidents,
        }
    }

    /// The report over what it holds.
    pub fn report(&self, opts: &Options) -> Report {
        build(&self.input(), opts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn incident(id: &str, code: &str) -> Vec<u8> {
        format!(
            r#"{{"type":"incident","id":"{id}","fingerprint":"fp-{code}","job_id":"j","root_known":true,"root":{{"error_code":"{code}","category":"gpu_hardware","host":"h1","timestamp":"2026-01-05T02:00:00.000Z"}}}}"#
        )
        .into_bytes()
    }

    #[test]
    fn an_incident_is_kept_in_its_latest_state_and_the_oldest_is_forgotten() {
        let mut live = LiveInput::new(10, 2);
        live.observe_incident_json(&incident("a", "XID_79"));
        live.observe_incident_json(&incident("a", "XID_48"));
        assert_eq!(live.sizes().incidents, 1, "one incident, two states");
        assert_eq!(&*live.input().incidents[0].code, "XID_48");
        live.observe_incident_json(&incident("b", "XID_79"));
        live.observe_incident_json(&incident("c", "XID_79"));
        let sizes = live.sizes();
        assert_eq!((sizes.incidents, sizes.forgotten_incidents), (2, 1));
        // The forgotten one comes back as new; the kept ones still update in place.
        live.observe_incident_json(&incident("c", "XID_48"));
        let codes: Vec<Name> = live.input().incidents.into_iter().map(|i| i.code).collect();
        assert_eq!(codes, [Name::from("XID_79"), Name::from("XID_48")]);
    }
}
