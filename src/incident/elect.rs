//! Electing the event that headlines an incident: the one a responder should read first.
//!
//! Rules, in order (the first that tells them apart decides):
//! 1. `teardown`: teardown, abort, exit and launcher-summary lines (torchrun's child-failed
//!    table, srun's task exits, the watchdog's "Exception ... detected by watchdog", a
//!    communicator abort) never headline while anything else stands: they report a failure.
//! 2. `role`: a root beats a symptom beats a cascade.
//! 3. Between roots: `timestamp`, the earliest by the log's own time (a node's event up to
//!    [`NODE_SKEW_MS`] after a job's line still counts as before it: kernel and job logs are
//!    stamped by different clocks), then `cause_class`: the node's hardware and driver, then
//!    CUDA, the network and collectives, the framework, the launcher; then `specific`: a
//!    specific entry's root over a catch-all's (any Python exception, any death by signal).
//! 4. Between symptoms or cascades: `informative`, a collective failure naming its op and
//!    sequence number beats one naming its op beats one naming neither; then `timestamp`,
//!    then `cause_class`.
//! 5. `arrival`: the earlier arrival, when nothing else tells.
//!
//! Info and `context`-category matches never initiate: they are recoverable events or lines
//! that only explain another one. The election keeps the runner-up too, so the incident can
//! say which rule decided (`grouping_info`), and every other root it saw (`contributing`).

use std::sync::Arc;

use serde::Serialize;

use super::{GroupingInfo, RootInfo, RunnerUp};
use crate::enrich::{Diagnosis, MatchEvent, Scope};
use crate::kb::{CauseClass, Role};
use crate::time::{self, Millis};

/// How far after a job's line a node's event still counts as before it.
pub const NODE_SKEW_MS: Millis = 5_000;

/// The rule that decided between the initiator and the runner-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    /// A teardown line lost to anything else.
    Teardown,
    /// Root beats symptom beats cascade.
    Role,
    /// The earlier log time.
    Timestamp,
    /// The cause class (node, device, network, framework, launcher).
    CauseClass,
    /// The line naming the op and sequence number.
    Informative,
    /// A specific entry's root over a catch-all's.
    Specific,
    /// The earlier arrival.
    Arrival,
    /// Nothing else stood.
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
    /// The entry's role.
    pub role: Role,
    /// The parsed log timestamp (not the correlator's clock).
    pub log_ms: Option<Millis>,
    /// Arrival order in the correlator.
    pub arrival: u64,
    /// The entry's cause class.
    pub class: CauseClass,
    /// 0: names its op and sequence number; 1: its op; 2: neither.
    pub informative: u8,
    /// A node's own event (kernel, journald), joined to the job.
    pub node: bool,
    /// A catch-all entry's match.
    pub catch_all: bool,
}

impl Standing {
    /// The standing of `event`, logged at `log_ms`, arrived `arrival`-th.
    pub fn of(event: &MatchEvent, log_ms: Option<Millis>, arrival: u64) -> Self {
        let has = |k: &str| event.captures.contains_key(k);
        Standing {
            role: event.role,
            log_ms,
            arrival,
            class: event.diagnosis.cause_class,
            informative: match (has("op"), has("seq")) {
                (true, true) => 0,
                (true, false) => 1,
                _ => 2,
            },
            node: event.scope == Scope::Node,
            catch_all: event.diagnosis.catch_all,
        }
    }
}

/// Whether `a` beats `b`, and the rule that decided.
pub fn contest(a: &Standing, b: &Standing) -> (bool, Rule) {
    let (ta, tb) = (
        a.class == CauseClass::Teardown,
        b.class == CauseClass::Teardown,
    );
    if ta != tb {
        return (tb, Rule::Teardown);
    }
    let (ra, rb) = (role_rank(a.role), role_rank(b.role));
    if ra != rb {
        return (ra < rb, Rule::Role);
    }
    let earlier = |a: &Standing, b: &Standing| -> Option<bool> {
        let (x, y) = (a.log_ms?, b.log_ms?);
        // A node's event stamped a little after a job's line still came first.
        let skew = |s: &Standing, o: &Standing| {
            if s.node && !o.node {
                NODE_SKEW_MS
            } else {
                0
            }
        };
        let (x, y) = (x - skew(a, b), y - skew(b, a));
        (x != y).then_some(x < y)
    };
    if a.role == Role::Root {
        if let Some(first) = earlier(a, b) {
            return (first, Rule::Timestamp);
        }
        if a.class != b.class {
            return (a.class < b.class, Rule::CauseClass);
        }
        if a.catch_all != b.catch_all {
            return (b.catch_all, Rule::Specific);
        }
    } else {
        if a.informative != b.informative {
            return (a.informative < b.informative, Rule::Informative);
        }
        if let Some(first) = earlier(a, b) {
            return (first, Rule::Timestamp);
        }
        if a.class != b.class {
            return (a.class < b.class, Rule::CauseClass);
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
            (Some(r), Rule::Teardown) => format!(
                "{} beats {}: a teardown, abort or exit line never headlines while anything \
                 else stands",
                name(w),
                name(&r.info)
            ),
            (Some(r), Rule::CauseClass) => format!(
                "{} ({}) beats {} ({}): at the same time, the node's hardware and driver come \
                 before CUDA, the network, the framework and the launcher",
                name(w),
                self.initiator.standing.class.as_str(),
                name(&r.info),
                r.standing.class.as_str()
            ),
            (Some(r), Rule::Specific) => format!(
                "{} beats {}: a specific entry over a catch-all",
                name(w),
                name(&r.info)
            ),
            (Some(r), Rule::Informative) => format!(
                "{} beats {}: it names the collective op{}",
                name(w),
                name(&r.info),
                if self.initiator.standing.informative == 0 {
                    " and its sequence number"
                } else {
                    ""
                }
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
                "{} and {} are both {}, logged at the same time or without comparable \
                 timestamps; the first arrived first",
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

/// The log time of an event, if its timestamp parses: a stamp without a zone is read as UTC,
/// one without a year (syslog, glog) is placed in the year nearest `reference` (the
/// correlator's clock), or not at all without one.
pub fn log_ms(event: &MatchEvent, reference: Option<Millis>) -> Option<Millis> {
    stamp_ms(event.timestamp.as_deref()?, reference)
}

/// The log time of timestamp text `stamp`, as [`log_ms`] reads an event's.
pub fn stamp_ms(stamp: &str, reference: Option<Millis>) -> Option<Millis> {
    let stamp = time::parse(stamp)?;
    match stamp.millis() {
        Some(ms) => Some(ms),
        None => reference.map(|r| stamp.millis_near(Some(r))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(role: Role, log_ms: Option<Millis>, arrival: u64) -> Standing {
        Standing {
            role,
            log_ms,
            arrival,
            class: CauseClass::Framework,
            informative: 2,
            node: false,
            catch_all: false,
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

    #[test]
    fn teardown_never_headlines_while_anything_else_stands() {
        let teardown = Standing {
            class: CauseClass::Teardown,
            ..s(Role::Symptom, Some(1), 1)
        };
        let timeout = s(Role::Cascade, Some(9), 9);
        assert_eq!(contest(&timeout, &teardown), (true, Rule::Teardown));
        assert_eq!(contest(&teardown, &timeout), (false, Rule::Teardown));
    }

    #[test]
    fn without_a_root_the_line_naming_op_and_sequence_wins() {
        let named = Standing {
            informative: 0,
            ..s(Role::Cascade, Some(9), 9)
        };
        let bare = s(Role::Cascade, Some(1), 1);
        assert_eq!(contest(&named, &bare), (true, Rule::Informative));
    }

    #[test]
    fn roots_at_the_same_time_go_by_cause_class_and_node_events_allow_skew() {
        let xid = Standing {
            class: CauseClass::Node,
            node: true,
            ..s(Role::Root, None, 9)
        };
        let cuda = Standing {
            class: CauseClass::Device,
            ..s(Role::Root, None, 1)
        };
        assert_eq!(contest(&xid, &cuda), (true, Rule::CauseClass));
        // The kernel stamped its Xid 2 s after the job's CUDA error: still first.
        let xid_later = Standing {
            log_ms: Some(12_000),
            ..xid
        };
        let cuda_at = Standing {
            log_ms: Some(10_000),
            ..cuda
        };
        assert_eq!(contest(&xid_later, &cuda_at), (true, Rule::Timestamp));
        let xid_much_later = Standing {
            log_ms: Some(60_000),
            ..xid
        };
        assert_eq!(contest(&xid_much_later, &cuda_at), (false, Rule::Timestamp));
    }
}
