//! Fleet-wide figures from the jobs' costs: the interruption table, fleet ETTR, mean time to
//! failure by job size, lemon nodes and fix outcomes.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use rustc_hash::{FxHashMap, FxHashSet};
use serde::Serialize;

use super::input::{Fact, Name};
use super::jobs::JobCost;
use super::taxonomy::{Bucket, BUCKETS};
use crate::time::{format_ms, Millis};

const HOUR: f64 = 3_600_000.0;

/// How lemon nodes and fix outcomes are decided.
#[derive(Debug, Clone)]
pub struct Thresholds {
    /// A next attempt that ran this long without failing counts as a fix that worked.
    pub fix_threshold_ms: Millis,
    /// A lemon was blamed by at least this many distinct jobs...
    pub lemon_min_jobs: usize,
    /// ...and that many is less likely than this (divided by the hosts seen) for a host with
    /// the fleet's rate of blame per hour of jobs on it.
    pub lemon_alpha: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            fix_threshold_ms: 3_600_000,
            lemon_min_jobs: 3,
            lemon_alpha: 0.2,
        }
    }
}

/// One row of the interruption table.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// The bucket.
    pub bucket: Bucket,
    /// Its label.
    pub label: &'static str,
    /// Interruptions.
    pub count: usize,
    /// Share of all interruptions (0..=1).
    pub share: f64,
    /// GPU-hours lost.
    pub gpu_hours_lost: f64,
}

/// Mean time to failure of one job-size bucket.
#[derive(Debug, Clone, Serialize)]
pub struct SizeBucket {
    /// GPUs, as a range.
    pub gpus: String,
    /// Jobs.
    pub jobs: usize,
    /// Interruptions.
    pub failures: usize,
    /// Hours the jobs' attempts ran.
    pub runtime_hours: f64,
    /// runtime / failures; absent without failures.
    pub mttf_hours: Option<f64>,
}

/// A host blamed by several jobs.
#[derive(Debug, Clone, Serialize)]
pub struct Lemon {
    /// The host.
    pub host: String,
    /// Distinct jobs whose interruption blamed its hardware.
    pub jobs: usize,
    /// Blamed jobs expected for a host with its hours of jobs at the fleet's rate.
    pub expected: f64,
    /// Probability of that many or more by chance (Poisson).
    pub p_value: f64,
    /// Its hardware history: job interruptions and node root lines, in time order.
    pub history: Vec<Event>,
}

/// One event of a host's history.
#[derive(Debug, Clone, Serialize)]
pub struct Event {
    /// When.
    pub time: String,
    /// The error code.
    pub code: String,
    /// The job it interrupted, if any.
    pub job: Option<String>,
}

/// What the attempts after one root code did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Fix {
    /// The root code.
    pub code: String,
    /// Interruptions followed by another attempt.
    pub n: usize,
    /// Next attempts that ran past the threshold (or finished) without failing.
    pub ran_on: usize,
    /// Next attempts that failed within the threshold with the same code.
    pub failed_same: usize,
    /// ... with another code (or none known).
    pub failed_other: usize,
}

/// The interruption table, in bucket order, with empty buckets left out.
pub fn table(jobs: &[JobCost]) -> Vec<Row> {
    let total: usize = jobs.iter().map(|j| j.interruptions.len()).sum();
    BUCKETS
        .iter()
        .filter_map(|&b| {
            let rows: Vec<_> = jobs
                .iter()
                .flat_map(|j| &j.interruptions)
                .filter(|i| i.bucket == b)
                .collect();
            (!rows.is_empty()).then(|| Row {
                bucket: b,
                label: b.label(),
                count: rows.len(),
                share: rows.len() as f64 / total.max(1) as f64,
                gpu_hours_lost: rows.iter().map(|i| i.gpu_hours_lost).sum(),
            })
        })
        .collect()
}

/// GPU-time-weighted ETTR over the jobs that have one: sum(GPUs x productive) / sum(GPUs x
/// wall).
pub fn fleet_ettr(jobs: &[JobCost]) -> Option<f64> {
    let (kept, wall) = jobs
        .iter()
        .filter(|j| j.ettr.is_some())
        .fold((0.0, 0.0), |(k, w), j| {
            let g = f64::from(j.gpus);
            (k + g * j.productive_hours, w + g * j.wall_hours)
        });
    (wall > 0.0).then(|| kept / wall)
}

const SIZES: [(u32, u32); 6] = [
    (1, 8),
    (9, 32),
    (33, 128),
    (129, 512),
    (513, 2048),
    (2049, u32::MAX),
];

/// Mean time to failure per job-size bucket.
pub fn mttf_by_size(jobs: &[JobCost]) -> Vec<SizeBucket> {
    SIZES
        .iter()
        .filter_map(|&(lo, hi)| {
            let js: Vec<_> = jobs
                .iter()
                .filter(|j| j.gpus >= lo && j.gpus <= hi)
                .collect();
            if js.is_empty() {
                return None;
            }
            let failures: usize = js.iter().map(|j| j.interruptions.len()).sum();
            let runtime: f64 = js
                .iter()
                .flat_map(|j| &j.runtimes)
                .map(|(a, b)| (b - a) as f64 / HOUR)
                .sum();
            Some(SizeBucket {
                gpus: if hi == u32::MAX {
                    format!("{lo}+")
                } else {
                    format!("{lo}-{hi}")
                },
                jobs: js.len(),
                failures,
                runtime_hours: runtime,
                mttf_hours: (failures > 0 && runtime > 0.0).then(|| runtime / failures as f64),
            })
        })
        .collect()
}

/// P(X >= k) for X ~ Poisson(lambda).
pub fn poisson_sf(k: usize, lambda: f64) -> f64 {
    if k == 0 {
        return 1.0;
    }
    let mut term = (-lambda).exp();
    let mut below = term;
    for i in 1..k {
        term *= lambda / i as f64;
        below += term;
    }
    (1.0 - below).max(0.0)
}

/// Hours each host spent in jobs' attempts, from the start-up lines.
///
/// In host order, so that sums over it do not depend on a hash's order.
pub fn exposure<'a>(
    jobs: &[JobCost],
    hosts_of: &FxHashMap<&str, Vec<&'a [Name]>>,
) -> BTreeMap<&'a str, f64> {
    // Summed by hash (in job order for each host, as a tree would), ordered once.
    let mut out: FxHashMap<&'a str, f64> = FxHashMap::default();
    for j in jobs {
        let Some(attempts) = hosts_of.get(&*j.job_id) else {
            continue;
        };
        for (hosts, (a, b)) in attempts.iter().zip(&j.runtimes) {
            for h in hosts.iter() {
                *out.entry(&**h).or_default() += (b - a) as f64 / HOUR;
            }
        }
    }
    out.into_iter().collect()
}

/// Hosts blamed by more distinct jobs than chance explains.
pub fn lemons(
    jobs_all: &[JobCost],
    node_facts: &[&Fact],
    exposure: &BTreeMap<&str, f64>,
    t: &Thresholds,
) -> Vec<Lemon> {
    // By hash: a million interruptions into trees compared job ids by string ~20 times each.
    let mut blamed: FxHashMap<&str, FxHashSet<&str>> = FxHashMap::default();
    for i in jobs_all.iter().flat_map(|j| &j.interruptions) {
        if let (Some(h), true) = (i.host.as_deref(), i.bucket.blames_host()) {
            blamed.entry(h).or_default().insert(&*i.job_id);
        }
    }
    let hosts_seen = exposure.len().max(blamed.len()).max(1);
    let cut = t.lemon_alpha / hosts_seen as f64;
    // The background rate comes from the hosts not (yet) flagged, so that the lemons' own
    // failures do not raise the bar they are measured against; a few rounds settle it.
    let mut flagged: BTreeSet<&str> = BTreeSet::new();
    let mut expected_of: FxHashMap<&str, f64> = FxHashMap::default();
    for _ in 0..8 {
        let others = |h: &&str| !flagged.contains(*h);
        let events: usize = blamed
            .iter()
            .filter(|(h, _)| others(h))
            .map(|(_, j)| j.len())
            .sum();
        let hours: f64 = exposure
            .iter()
            .filter(|(h, _)| !flagged.contains(**h))
            .map(|(_, x)| x)
            .sum();
        let unflagged = hosts_seen.saturating_sub(flagged.len()).max(1);
        let mut next = BTreeSet::new();
        for (host, js) in &blamed {
            let expected = match exposure.get(*host) {
                Some(h) if hours > 0.0 => events as f64 * h / hours,
                _ => events as f64 / unflagged as f64,
            };
            expected_of.insert(host, expected);
            if js.len() >= t.lemon_min_jobs && poisson_sf(js.len(), expected) < cut {
                next.insert(*host);
            }
        }
        if next == flagged {
            break;
        }
        flagged = next;
    }
    let mut histories = histories(&flagged, jobs_all, node_facts);
    let mut out: Vec<Lemon> = flagged
        .iter()
        .map(|host| {
            let jobs = blamed.get(host).map_or(0, FxHashSet::len);
            let expected = expected_of.get(host).copied().unwrap_or(0.0);
            Lemon {
                host: host.to_string(),
                jobs,
                expected,
                p_value: poisson_sf(jobs, expected),
                history: histories.remove(host).unwrap_or_default(),
            }
        })
        .collect();
    out.sort_by(|a, b| b.jobs.cmp(&a.jobs).then(a.host.cmp(&b.host)));
    out
}

/// The hardware history of each of `hosts`, in one pass over the interruptions and the node
/// lines: the interruptions that blamed it, and its node root lines that are not one of them.
fn histories<'a>(
    hosts: &BTreeSet<&'a str>,
    jobs: &[JobCost],
    node_facts: &[&Fact],
) -> HashMap<&'a str, Vec<Event>> {
    let mut events: HashMap<&'a str, Vec<(Millis, Event)>> = HashMap::new();
    let mut seen: HashSet<(&str, Millis, &str)> = HashSet::new();
    for i in jobs.iter().flat_map(|j| &j.interruptions) {
        let Some(host) = i.host.as_deref().and_then(|h| hosts.get(h)) else {
            continue;
        };
        if !i.bucket.blames_host() {
            continue;
        }
        let code = i.code.as_deref().unwrap_or_default();
        seen.insert((host, i.failure, code));
        let e = Event {
            time: format_ms(i.failure),
            code: code.to_string(),
            job: Some(i.job_id.to_string()),
        };
        events.entry(host).or_default().push((i.failure, e));
    }
    for f in node_facts {
        let Some(host) = f.host.as_deref().and_then(|h| hosts.get(h)) else {
            continue;
        };
        if seen.insert((host, f.t, &*f.code)) {
            let e = Event {
                time: format_ms(f.t),
                code: f.code.to_string(),
                job: None,
            };
            events.entry(host).or_default().push((f.t, e));
        }
    }
    events
        .into_iter()
        .map(|(host, mut list)| {
            list.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.code.cmp(&b.1.code)));
            (host, list.into_iter().map(|(_, e)| e).collect())
        })
        .collect()
}

/// Per root code: what the job's next attempt did.
pub fn fix_outcomes(jobs: &[JobCost], t: &Thresholds) -> Vec<Fix> {
    let mut out: BTreeMap<String, Fix> = BTreeMap::new();
    for j in jobs {
        for (k, i) in j.interruptions.iter().enumerate() {
            let (Some(code), Some(restart)) = (&i.code, i.restart) else {
                continue;
            };
            if !out.contains_key(&**code) {
                let fix = Fix {
                    code: code.to_string(),
                    ..Fix::default()
                };
                out.insert(code.to_string(), fix);
            }
            let Some(e) = out.get_mut(&**code) else {
                continue;
            };
            e.n += 1;
            let next = j.interruptions[k + 1..]
                .iter()
                .find(|n| n.attempt == i.attempt + 1)
                .filter(|n| n.failure - restart < t.fix_threshold_ms);
            match next {
                Some(n) if n.code.as_deref() == Some(&**code) => e.failed_same += 1,
                Some(_) => e.failed_other += 1,
                None => e.ran_on += 1,
            }
        }
    }
    out.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::jobs::Interruption;

    fn interruption(
        attempt: usize,
        failure: Millis,
        code: &str,
        restart: Option<Millis>,
    ) -> Interruption {
        Interruption {
            job_id: "j".into(),
            bucket: Bucket::Gpu,
            code: Some(code.into()),
            root_known: true,
            joined_by: None,
            host: Some("h".into()),
            gpu: None,
            gpus: 8,
            attempt,
            attempt_start: 0,
            failure,
            last_checkpoint: None,
            lost_from: failure,
            restart,
            restart_progress: restart,
            lost_work_hours: 0.0,
            downtime_hours: 0.0,
            gpu_hours_lost: 0.0,
            fingerprint: None,
        }
    }

    #[test]
    fn fix_outcomes_follow_the_next_attempt() {
        const H: Millis = 3_600_000;
        let job = JobCost {
            job_id: "j".into(),
            gpus: 8,
            attempts: 4,
            start: 0,
            end: 20 * H,
            wall_hours: 20.0,
            productive_hours: 10.0,
            ettr: Some(0.5),
            runtimes: Vec::new(),
            timed: true,
            interruptions: vec![
                // Restarted at 2 h, failed the same way 30 min later: failed again.
                interruption(0, H, "CUDA_OOM", Some(2 * H)),
                // Restarted at 3 h, failed otherwise 3 h later: ran on.
                interruption(1, 2 * H + H / 2, "CUDA_OOM", Some(3 * H)),
                // Restarted at 7 h, failed within the hour with another code.
                interruption(2, 6 * H, "XID_79", Some(7 * H)),
                // The last attempt's failure, nothing after it: no outcome.
                interruption(3, 7 * H + H / 4, "CUDA_OOM", None),
            ],
        };
        let fixes = fix_outcomes(&[job], &Thresholds::default());
        let by: BTreeMap<&str, &Fix> = fixes.iter().map(|f| (f.code.as_str(), f)).collect();
        let oom = by["CUDA_OOM"];
        assert_eq!(
            (oom.n, oom.ran_on, oom.failed_same, oom.failed_other),
            (2, 1, 1, 0)
        );
        let xid = by["XID_79"];
        assert_eq!(
            (xid.n, xid.ran_on, xid.failed_same, xid.failed_other),
            (1, 0, 0, 1)
        );
    }

    #[test]
    fn poisson_tail() {
        assert!((poisson_sf(0, 2.0) - 1.0).abs() < 1e-12);
        assert!((poisson_sf(1, 2.0) - (1.0 - (-2.0f64).exp())).abs() < 1e-12);
        assert!(poisson_sf(10, 1.0) < 1e-6);
        assert!(poisson_sf(3, 1.0) > poisson_sf(4, 1.0));
    }
}
