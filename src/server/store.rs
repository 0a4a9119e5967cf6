//! The incidents the admin server shows: the latest state of every open incident and a ring of
//! the most recently resolved ones, bounded.
//!
//! Fed with every incident change by the incident stage of `faultline run` (or by anything
//! that runs a [`crate::incident::Correlator`]); read by [`super::incidents`]. Open incidents
//! are keyed by the correlator's serial, so a fingerprint that moves (a job line logged before
//! the anchor arriving late) replaces its entry. Bounds: `max_open` open incidents (the
//! correlator's `max_open_incidents`; past it the least recently updated is dropped and
//! counted) and `max_resolved` resolved ones (`admin.resolved_incidents`; the oldest leaves
//! first). Each entry is the incident object as the incidents topic carries it plus its
//! timeline (at most 512 rows), shared by `Arc` with the sinks.
//!
//! It also keeps the report's live input ([`crate::report::live`]): every incident change, and
//! the match events the stage hands it ([`IncidentStore::observe_match`]), for `/report` and
//! the report's families on `/metrics` ([`super::report`]).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use crate::enrich::MatchEvent;
use crate::incident::{IncidentEvent, Status};
use crate::report::live::LiveInput;
use crate::report::{Options, Report};

/// Which incidents a query wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusFilter {
    /// Open (opened or updated, not resolved).
    Open,
    /// Resolved.
    Resolved,
}

/// A query of the store; every set field must match.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// The job id, exactly.
    pub job: Option<String>,
    /// The root's error code, exactly.
    pub code: Option<String>,
    /// A host the incident involves: the root's, a culprit's, the blamed one, or one with matches.
    pub host: Option<String>,
    /// Open or resolved.
    pub status: Option<StatusFilter>,
}

impl Filter {
    /// Whether `i` passes.
    pub fn matches(&self, i: &IncidentEvent) -> bool {
        let job = self.job.as_deref().is_none_or(|j| i.job_id == j);
        let code = self
            .code
            .as_deref()
            .is_none_or(|c| i.root.error_code.eq_ignore_ascii_case(c));
        let host = self.host.as_deref().is_none_or(|h| {
            i.root.host.as_deref() == Some(h)
                || i.blamed_host.as_deref() == Some(h)
                || i.culprit.hosts.iter().any(|x| x == h)
                || i.counts.by_host.contains_key(h)
        });
        let status = match self.status {
            None => true,
            Some(StatusFilter::Open) => i.status != Status::Resolved,
            Some(StatusFilter::Resolved) => i.status == Status::Resolved,
        };
        job && code && host && status
    }
}

#[derive(Debug)]
struct Entry {
    incident: Arc<IncidentEvent>,
    touched: u64,
}

#[derive(Debug, Default)]
struct Inner {
    open: HashMap<u64, Entry>,
    resolved: VecDeque<Arc<IncidentEvent>>,
    seq: u64,
    dropped: u64,
}

/// Open incidents and recently resolved ones, bounded; shared by the feeder and the server.
#[derive(Debug)]
pub struct IncidentStore {
    inner: Mutex<Inner>,
    report: Mutex<LiveInput>,
    max_open: usize,
    max_resolved: usize,
}

impl IncidentStore {
    /// A store of at most `max_open` open and `max_resolved` resolved incidents (each at
    /// least 1).
    pub fn new(max_open: usize, max_resolved: usize) -> Arc<Self> {
        Arc::new(IncidentStore {
            inner: Mutex::new(Inner::default()),
            report: Mutex::new(LiveInput::default()),
            max_open: max_open.max(1),
            max_resolved: max_resolved.max(1),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes in one change: an open or updated incident replaces its entry; a resolved one
    /// leaves the open set for the ring.
    pub fn record(&self, change: &IncidentEvent) {
        self.record_shared(Arc::new(change.clone()));
    }

    fn live(&self) -> std::sync::MutexGuard<'_, LiveInput> {
        self.report.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Hands a match event the correlator consumed to the report's live input.
    pub fn observe_match(&self, event: &MatchEvent) {
        self.live().observe_match(event);
    }

    /// The report over the live input ([`crate::report::live`]).
    pub fn report(&self, opts: &Options) -> Report {
        let input = self.live().input();
        crate::report::build(&input, opts)
    }

    /// What the report's live input holds and forgot.
    pub fn report_sizes(&self) -> crate::report::live::LiveSizes {
        self.live().sizes()
    }

    /// [`IncidentStore::record`] of a change already behind an `Arc`.
    pub fn record_shared(&self, change: Arc<IncidentEvent>) {
        if let Ok(json) = serde_json::to_vec(&*change) {
            self.live().observe_incident_json(&json);
        }
        let mut inner = self.lock();
        inner.seq += 1;
        let seq = inner.seq;
        if change.status == Status::Resolved {
            inner.open.remove(&change.serial);
            if inner.resolved.len() >= self.max_resolved {
                inner.resolved.pop_front();
            }
            inner.resolved.push_back(change);
            return;
        }
        if !inner.open.contains_key(&change.serial) && inner.open.len() >= self.max_open {
            let oldest = inner
                .open
                .iter()
                .min_by_key(|(_, e)| e.touched)
                .map(|(k, _)| *k);
            if let Some(k) = oldest {
                inner.open.remove(&k);
                inner.dropped += 1;
            }
        }
        inner.open.insert(
            change.serial,
            Entry {
                incident: change,
                touched: seq,
            },
        );
    }

    /// Up to `limit` incidents passing `filter`: open ones first, then resolved ones, each
    /// newest first (by first log time, then by arrival).
    pub fn query(&self, filter: &Filter, limit: usize) -> Vec<Arc<IncidentEvent>> {
        let inner = self.lock();
        let mut open: Vec<&Entry> = inner
            .open
            .values()
            .filter(|e| filter.matches(&e.incident))
            .collect();
        open.sort_by(|a, b| {
            (b.incident.first_seen.as_deref(), b.incident.serial)
                .cmp(&(a.incident.first_seen.as_deref(), a.incident.serial))
        });
        open.into_iter()
            .map(|e| Arc::clone(&e.incident))
            .chain(
                inner
                    .resolved
                    .iter()
                    .rev()
                    .filter(|i| filter.matches(i))
                    .cloned(),
            )
            .take(limit)
            .collect()
    }

    /// The incident with this id (or, for links made before ids, this fingerprint): the open
    /// one, else the most recently resolved one.
    pub fn get(&self, key: &str) -> Option<Arc<IncidentEvent>> {
        let inner = self.lock();
        inner
            .open
            .values()
            .find(|e| e.incident.id == key || e.incident.fingerprint == key)
            .map(|e| Arc::clone(&e.incident))
            .or_else(|| {
                inner
                    .resolved
                    .iter()
                    .rev()
                    .find(|i| i.id == key || i.fingerprint == key)
                    .cloned()
            })
    }

    /// (open, resolved) incidents held.
    pub fn len(&self) -> (usize, usize) {
        let inner = self.lock();
        (inner.open.len(), inner.resolved.len())
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == (0, 0)
    }

    /// Open incidents dropped past `max_open` (the correlator's own cap makes it rare).
    pub fn dropped(&self) -> u64 {
        self.lock().dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::incident::testutil::event;
    use crate::incident::{Correlator, IncidentConfig};
    use crate::kb::Role;

    /// Every change of `jobs` one-incident jobs, each opened then resolved.
    fn changes(jobs: usize) -> Vec<IncidentEvent> {
        let mut c = Correlator::new(IncidentConfig::default()).expect("config");
        let mut out = Vec::new();
        for j in 0..jobs {
            let e = event("XID_79", Role::Root, "gpu_hardware")
                .job(&format!("job-{j}"))
                .host(&format!("node-{j:02}"))
                .ts(&format!("2024-05-01T12:{:02}:00Z", j % 60))
                .build();
            c.observe(&e, &mut out);
        }
        c.resolve_all(&mut out);
        out
    }

    #[test]
    fn open_then_resolved_and_both_sets_stay_bounded() {
        let all = changes(5);
        let store = IncidentStore::new(3, 2);
        let opens: Vec<&IncidentEvent> = all
            .iter()
            .filter(|c| c.status != Status::Resolved)
            .collect();
        for c in &opens {
            store.record(c);
        }
        assert_eq!(store.len(), (3, 0), "the open set is capped");
        assert_eq!(store.dropped(), 2);
        // The least recently updated went: jobs 0 and 1.
        assert!(store.get(&opens[0].fingerprint).is_none());
        let newest = store.query(&Filter::default(), 10);
        assert_eq!(newest[0].job_id, "job-4", "newest first");

        for c in all.iter().filter(|c| c.status == Status::Resolved) {
            store.record(c);
        }
        assert_eq!(store.len(), (0, 2), "the ring keeps the last two");
        let resolved = store.query(
            &Filter {
                status: Some(StatusFilter::Resolved),
                ..Default::default()
            },
            10,
        );
        let jobs: Vec<&str> = resolved.iter().map(|i| i.job_id.as_str()).collect();
        assert_eq!(jobs, ["job-4", "job-3"]);
        let one = store.get(&resolved[1].fingerprint).expect("by fingerprint");
        assert_eq!(one.status, Status::Resolved);
    }

    #[test]
    fn filters_by_job_code_host_and_status() {
        let store = IncidentStore::new(10, 10);
        for c in changes(3).iter().filter(|c| c.status != Status::Resolved) {
            store.record(c);
        }
        let q = |f: Filter| -> Vec<String> {
            store
                .query(&f, 10)
                .iter()
                .map(|i| i.job_id.clone())
                .collect()
        };
        assert_eq!(
            q(Filter {
                job: Some("job-1".into()),
                ..Default::default()
            }),
            ["job-1"]
        );
        assert_eq!(
            q(Filter {
                host: Some("node-02".into()),
                ..Default::default()
            }),
            ["job-2"]
        );
        assert_eq!(
            q(Filter {
                code: Some("xid_79".into()),
                ..Default::default()
            })
            .len(),
            3
        );
        assert!(q(Filter {
            code: Some("CUDA_OOM".into()),
            ..Default::default()
        })
        .is_empty());
        assert!(q(Filter {
            status: Some(StatusFilter::Resolved),
            ..Default::default()
        })
        .is_empty());
        assert_eq!(
            store.query(&Filter::default(), 2).len(),
            2,
            "the limit holds"
        );
    }
}
