//! Electing the event that initiated an incident.
//!
//! Rules, in order: the role (root beats symptom beats cascade), then the log's own timestamp
//! (earlier wins; only when both events carry one), then arrival order (earlier wins). Info and
//! `context`-category matches never initiate: they are recoverable events or lines that only
//! explain another one. The election keeps the runner-up too, so the incident can say which
//! rule decided (`grouping_info`).

use std::sync::Arc;

use serde::Serialize;

use super::{GroupingInfo, RootInfo, RunnerUp};
use crate::enrich::{Diagnosis, MatchEvent};
use crate::kb::Role;
use crate::time::{self, Millis};

/// The rule that decided between the initiator and the runner-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    /// The stronger role won (root beats symptom beats cascade).
    Role,
    /// Same role; the earlier log timestamp won.
    Timestamp,
    /// Same role and no comparable timestamps; the earlier arrival won.
    Arrival,
    /// No runner-up: the initiator stood alone.
    OnlyCandidate,
}

/// Whether a match may initiate an incident.
pub fn can_initiate(event: &MatchEvent) -> bool {
    event.role != Role::Info && event.category != "context"
}

fn role_rank(role: Role) -> u8 {
    match role {
        Role::Root => 0,
        Role::Symptom => 1,
        Role::Cascade => 2,
        Role::Info => 3,
    }
}

/// What the election compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Standing {
    /// The event's entry role, compared first.
    pub role: Role,
    /// The parsed log timestamp (not the correlator's clock).
    pub log_ms: Option<Millis>,
    /// Order of arrival in the incident, the last resort.
    pub arrival: u64,
}

/// Whether `a` beats `b`, and the rule that decided.
pub fn contest(a: &Standing, b: &Standing) -> (bool, Rule) {
    let (ra, rb) = (role_rank(a.role), role_rank(b.role));
    if ra != rb {
        return (ra < rb, Rule::Role);
    }
    if let (Some(x), Some(y)) = (a.log_ms, b.log_ms) {
        if x != y {
            return (x < y, Rule::Timestamp);
        }
    }
    (a.arrival < b.arrival, Rule::Arrival)
}

/// An event that stood in the election, kept whole enough to report it.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// Where the election stands it.
    pub standing: Standing,
    /// The rank of the stream that printed it (launcher prefix or envelope), for its context.
    pub printed_by: Option<u32>,
    /// The event as the incident reports its root.
    pub info: RootInfo,
    /// The event's diagnosis, which the incident carries while it leads.
    pub diagnosis: Arc<Diagnosis>,
}

impl Candidate {
    /// The candidate for `event`, standing at `standing`.
    pub fn of(event: &MatchEvent, standing: Standing) -> Self {
        Candidate {
            standing,
            printed_by: event.rank,
            info: RootInfo {
                kb_id: event.kb_id.clone(),
                error_code: event.error_code.clone(),
                role: event.role,
                severity: event.severity,
                category: event.category.clone(),
                rank: event.any_rank(),
                host: event.host.clone(),
                gpu: event.captures.get("gpu").cloned(),
                timestamp: event.timestamp.clone(),
                line: event.line.clone(),
                source: event.source.clone(),
                captures: event.captures.clone(),
            },
            diagnosis: Arc::clone(&event.diagnosis),
        }
    }
}

/// The initiator and the runner-up of one incident.
#[derive(Debug, Clone)]
pub struct Election {
    /// The event that leads the election.
    pub initiator: Candidate,
    /// The best event that does not, if any stood.
    pub runner_up: Option<Candidate>,
    /// Events that stood, the initiator included.
    pub candidates: u64,
}

impl Election {
    /// An election with `first` as its only candidate.
    pub fn new(first: Candidate) -> Self {
        Election {
            initiator: first,
            runner_up: None,
            candidates: 1,
        }
    }

    /// Offers an event; `make` builds its candidate only if it places. True when it became the
    /// initiator.
    pub fn offer(&mut self, standing: Standing, make: impl FnOnce() -> Candidate) -> bool {
        self.candidates += 1;
        if contest(&standing, &self.initiator.standing).0 {
            let old = std::mem::replace(&mut self.initiator, make());
            self.runner_up = Some(old);
            return true;
        }
        let places = self
            .runner_up
            .as_ref()
            .is_none_or(|r| contest(&standing, &r.standing).0);
        if places {
            self.runner_up = Some(make());
        }
        false
    }

    /// The rule that decided between the initiator and the runner-up.
    pub fn rule(&self) -> Rule {
        self.runner_up.as_ref().map_or(Rule::OnlyCandidate, |r| {
            contest(&self.initiator.standing, &r.standing).1
        })
    }

    /// The `grouping_info` object.
    pub fn grouping_info(&self, window_ms: Millis) -> GroupingInfo {
        let rule = self.rule();
        let w = &self.initiator.info;
        let name = |i: &RootInfo| match i.rank {
            Some(rank) => format!("{} of rank {rank}", i.error_code),
            None => match &i.host {
                Some(host) => format!("{} on {host}", i.error_code),
                None => i.error_code.clone(),
            },
        };
        let explanation = match (&self.runner_up, rule) {
            (Some(r), Rule::Role) => format!(
                "{} ({}) beats {} ({}): root beats symptom beats cascade",
                name(w),
                w.role,
                name(&r.info),
                r.info.role
            ),
            (Some(r), Rule::Timestamp) => format!(
                "{} and {} are both {}; the first was logged earlier ({} < {})",
                name(w),
                name(&r.info),
                w.role,
                w.timestamp.as_deref().unwrap_or("?"),
                r.info.timestamp.as_deref().unwrap_or("?"),
            ),
            (Some(r), _) => format!(
                "{} and {} are both {} without comparable timestamps; the first arrived first",
                name(w),
                name(&r.info),
                w.role
            ),
            (None, _) => format!(
                "{} ({}) is the only match of this incident that can initiate one",
                name(w),
                w.role
            ),
        };
        GroupingInfo {
            key: "job_id",
            window_ms,
            rule,
            runner_up: self.runner_up.as_ref().map(|r| RunnerUp {
                kb_id: r.info.kb_id.clone(),
                error_code: r.info.error_code.clone(),
                role: r.info.role,
                rank: r.info.rank,
                timestamp: r.info.timestamp.clone(),
            }),
            candidates: self.candidates,
            explanation,
        }
    }
}

/// The log time of an event, if its timestamp parses.
pub fn log_ms(event: &MatchEvent) -> Option<Millis> {
    event
        .timestamp
        .as_deref()
        .and_then(time::parse)
        .and_then(|s| s.millis())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(role: Role, log_ms: Option<Millis>, arrival: u64) -> Standing {
        Standing {
            role,
            log_ms,
            arrival,
        }
    }

    #[test]
    fn role_first_then_time_then_arrival() {
        // A later root beats an earlier cascade.
        assert_eq!(
            contest(&s(Role::Root, Some(9), 9), &s(Role::Cascade, Some(1), 1)),
            (true, Rule::Role)
        );
        assert_eq!(
            contest(&s(Role::Symptom, None, 5), &s(Role::Cascade, None, 1)),
            (true, Rule::Role)
        );
        // Same role: the earlier log time wins even if it arrived later.
        assert_eq!(
            contest(&s(Role::Root, Some(1), 9), &s(Role::Root, Some(2), 1)),
            (true, Rule::Timestamp)
        );
        // Same role, a timestamp missing: arrival decides.
        assert_eq!(
            contest(&s(Role::Root, Some(1), 9), &s(Role::Root, None, 1)),
            (false, Rule::Arrival)
        );
        assert_eq!(
            contest(&s(Role::Root, Some(1), 1), &s(Role::Root, Some(1), 2)),
            (true, Rule::Arrival)
        );
    }
}
