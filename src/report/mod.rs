//! `faultline report`: what failures cost a fleet, from its logs alone.
//!
//! It reads the matches and incidents of a scan (run in-process over log files by
//! `faultline report`, `crate::cli::report`; read back from `scan --format json`; or kept by the
//! correlator of `faultline run` for its `/report` page) and turns them into the questions a
//! fleet's operators ask after the fact: the interruption table by root-cause bucket
//! ([`taxonomy`]), the GPU-hours each interruption cost, the effective training time ratio
//! (ETTR) per job and fleet-wide, the mean time to failure by job size, the lemon nodes, and what
//! the next attempt did after each root code. docs/report.md says how each number is estimated.

pub mod input;
pub mod jobs;
pub mod live;
pub mod render;
pub mod skim;
pub mod summary;
pub mod taxonomy;

use rustc_hash::FxHashMap;

use serde::Serialize;

use crate::time::{format_ms, Millis};
use input::{FactKind, IncidentFact, Input, Name};
use jobs::{JobCost, NodeRoots, Settings};
use summary::{Fix, Lemon, Row, SizeBucket, Thresholds};

/// How to build a report.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// How job lines are read.
    pub settings: Settings,
    /// Fix outcome and lemon thresholds.
    pub thresholds: Thresholds,
    /// Only jobs that started at or after this time (and their interruptions from it on).
    pub since: Option<Millis>,
    /// Only jobs that started before this time (and their interruptions before it).
    pub until: Option<Millis>,
}

/// Fleet-wide figures.
#[derive(Debug, Clone, Serialize)]
pub struct Fleet {
    /// Jobs.
    pub jobs: usize,
    /// Interruptions.
    pub interruptions: usize,
    /// GPU-hours they cost.
    pub gpu_hours_lost: f64,
    /// GPU-time-weighted ETTR of the jobs that printed progress.
    pub ettr: Option<f64>,
    /// Jobs that have an ETTR.
    pub ettr_jobs: usize,
    /// The first job start.
    pub first: Option<String>,
    /// The last line.
    pub last: Option<String>,
}

/// The whole report (`--format json` prints it as one object).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Always `report`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The report's schema version.
    pub schema_version: u32,
    /// The range asked for.
    pub since: Option<String>,
    /// The range asked for.
    pub until: Option<String>,
    /// Fleet-wide figures.
    pub fleet: Fleet,
    /// The interruption table.
    pub table: Vec<Row>,
    /// Mean time to failure by job size.
    pub mttf_by_size: Vec<SizeBucket>,
    /// Lemon nodes.
    pub lemon_nodes: Vec<Lemon>,
    /// The fix-outcome threshold in hours.
    pub fix_threshold_hours: f64,
    /// Per root code, what the next attempt did.
    pub fix_outcomes: Vec<Fix>,
    /// Every job with its interruptions.
    pub jobs: Vec<JobCost>,
}

fn in_range(t: Millis, opts: &Options) -> bool {
    opts.since.is_none_or(|s| t >= s) && opts.until.is_none_or(|u| t < u)
}

/// Builds the report from a scan's facts and incidents.
pub fn build(input: &Input, opts: &Options) -> Report {
    let mut timelines = jobs::timelines(&input.facts, &opts.settings);
    let mut incidents: FxHashMap<&Name, Vec<&IncidentFact>> = FxHashMap::default();
    for inc in input
        .incidents
        .iter()
        .filter(|i| !i.job_id.starts_with("node:"))
    {
        incidents.entry(&inc.job_id).or_default().push(inc);
    }
    let mut only_incidents: Vec<_> = incidents
        .iter()
        .filter(|(id, _)| !timelines.contains_key(**id))
        .collect();
    only_incidents.sort_unstable_by_key(|(id, _)| **id);
    for (id, incs) in only_incidents {
        timelines.insert(Name::clone(id), jobs::from_incidents(id, incs));
    }
    let node_facts: Vec<_> = input
        .facts
        .iter()
        .filter(|f| f.kind == FactKind::NodeRoot && in_range(f.t, opts))
        .collect();
    let mut nodes: NodeRoots<'_> = FxHashMap::default();
    for f in &node_facts {
        if let Some(h) = f.host.as_deref() {
            nodes.entry(h).or_default().push((f.t, f));
        }
    }
    for lines in nodes.values_mut() {
        lines.sort_by_key(|(t, _)| *t);
    }
    let mut costs: Vec<JobCost> = Vec::new();
    let mut hosts_of: FxHashMap<&str, Vec<&[Name]>> = FxHashMap::default();
    for (id, job) in &timelines {
        if !in_range(job.attempts[0].start, opts) {
            continue;
        }
        let incs = incidents.get(id).map_or(&[][..], Vec::as_slice);
        let mut cost = jobs::cost(job, incs, &nodes, &opts.settings);
        cost.interruptions.retain(|i| in_range(i.failure, opts));
        hosts_of.insert(
            &**id,
            job.attempts.iter().map(|a| a.hosts.as_slice()).collect(),
        );
        costs.push(cost);
    }
    let exposure = summary::exposure(&costs, &hosts_of);
    let t = &opts.thresholds;
    Report {
        kind: "report",
        schema_version: 1,
        since: opts.since.map(format_ms),
        until: opts.until.map(format_ms),
        fleet: Fleet {
            jobs: costs.len(),
            interruptions: costs.iter().map(|j| j.interruptions.len()).sum(),
            gpu_hours_lost: costs
                .iter()
                .flat_map(|j| &j.interruptions)
                .map(|i| i.gpu_hours_lost)
                .sum(),
            ettr: summary::fleet_ettr(&costs),
            ettr_jobs: costs.iter().filter(|j| j.ettr.is_some()).count(),
            first: costs
                .iter()
                .filter(|j| j.timed)
                .map(|j| j.start)
                .min()
                .map(format_ms),
            last: costs
                .iter()
                .filter(|j| j.timed)
                .map(|j| j.end)
                .max()
                .map(format_ms),
        },
        table: summary::table(&costs),
        mttf_by_size: summary::mttf_by_size(&costs),
        lemon_nodes: summary::lemons(&costs, &node_facts, &exposure, t),
        fix_threshold_hours: t.fix_threshold_ms as f64 / 3_600_000.0,
        fix_outcomes: summary::fix_outcomes(&costs, t),
        jobs: costs,
    }
}
