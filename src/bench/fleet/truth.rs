//! The simulated fleet's ground truth (`truth.json`), computed from the model's own times with
//! the definitions `faultline report` estimates (docs/report.md): GPU-hours lost per
//! interruption, ETTR per job and fleet-wide, the lemon hosts, and fix outcomes per root code.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{lines, Attempt, Cause, Fleet, FleetOptions, JobRun, Ms, FIX_THRESHOLD, HOUR};
use crate::report::taxonomy::Bucket;
use crate::time::format_ms;

/// Everything the simulator knows about the fleet it wrote.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Truth {
    /// The seed.
    pub seed: u64,
    /// Days over which jobs were submitted.
    pub days: u32,
    /// Hosts in the pool.
    pub hosts: usize,
    /// The hosts that fail far more often than the others.
    pub lemon_hosts: Vec<String>,
    /// The fix-outcome threshold, in milliseconds.
    pub fix_threshold_ms: Ms,
    /// Fleet-wide figures.
    pub fleet: FleetTruth,
    /// Per root code: what the next attempt did.
    pub fix_outcomes: BTreeMap<String, FixTruth>,
    /// Every job.
    pub jobs: Vec<JobTruth>,
}

/// Fleet-wide figures.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FleetTruth {
    /// Interruptions.
    pub interruptions: usize,
    /// GPU-hours lost to them.
    pub gpu_hours_lost: f64,
    /// GPU-time-weighted effective training time ratio.
    pub ettr: f64,
    /// Per report bucket: count, share and GPU-hours lost.
    pub by_bucket: BTreeMap<Bucket, BucketTruth>,
    /// Per Llama 3 cause: count.
    pub by_cause: BTreeMap<Cause, usize>,
}

/// One bucket's figures.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct BucketTruth {
    /// Interruptions.
    pub count: usize,
    /// Share of all interruptions (0..=1).
    pub share: f64,
    /// GPU-hours lost.
    pub gpu_hours_lost: f64,
}

/// What the attempts after interruptions with one root code did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FixTruth {
    /// Interruptions followed by another attempt.
    pub n: usize,
    /// Next attempts that ran at least the threshold (or finished) without failing.
    pub ran_on: usize,
    /// Next attempts that failed within the threshold with the same code.
    pub failed_same: usize,
    /// Next attempts that failed within the threshold with another code.
    pub failed_other: usize,
}

/// One job.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobTruth {
    /// Its id (the `job_id` of its records).
    pub job_id: String,
    /// Its size.
    pub gpus: u32,
    /// Attempts (1 + restarts).
    pub attempts: usize,
    /// First start and last line.
    pub start: String,
    /// When it finished.
    pub end: String,
    /// Wall time, first start to end, in milliseconds.
    pub wall_ms: Ms,
    /// Productive time kept, in milliseconds.
    pub productive_ms: Ms,
    /// productive / wall.
    pub ettr: f64,
    /// Its interruptions.
    pub interruptions: Vec<InterruptionTruth>,
}

/// One interruption.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InterruptionTruth {
    /// The Llama 3 cause.
    pub cause: Cause,
    /// The report bucket its lines belong in.
    pub bucket: Bucket,
    /// The KB error code of the line that says what failed.
    pub code: String,
    /// The culprit host.
    pub host: String,
    /// The culprit GPU's PCI address.
    pub gpu: String,
    /// The attempt's start.
    pub attempt_start: String,
    /// When it failed.
    pub failure: String,
    /// The job's last checkpoint save before it, if any.
    pub last_checkpoint: Option<String>,
    /// Start of the work it threw away: the later of the last save and the attempt's first
    /// progress (the failure itself when the attempt made none).
    pub lost_from: String,
    /// The next attempt's start.
    pub restart: Option<String>,
    /// The next attempt's first progress (or its failure, if it made none).
    pub restart_progress: Option<String>,
    /// GPUs x (restart_progress - lost_from), in GPU-hours.
    pub gpu_hours_lost: f64,
}

/// Computes the truth of a simulated fleet.
pub(super) fn compute(fleet: &Fleet, opts: &FleetOptions) -> Truth {
    let jobs: Vec<JobTruth> = fleet.jobs.iter().map(|j| job_truth(fleet, j)).collect();
    let mut by_bucket: BTreeMap<Bucket, BucketTruth> = BTreeMap::new();
    let mut by_cause: BTreeMap<Cause, usize> = BTreeMap::new();
    let (mut weighted_kept, mut weighted_wall, mut lost, mut count) = (0.0, 0.0, 0.0, 0usize);
    for j in &jobs {
        weighted_kept += f64::from(j.gpus) * j.productive_ms as f64;
        weighted_wall += f64::from(j.gpus) * j.wall_ms as f64;
        for i in &j.interruptions {
            let b = by_bucket.entry(i.bucket).or_default();
            b.count += 1;
            b.gpu_hours_lost += i.gpu_hours_lost;
            *by_cause.entry(i.cause).or_default() += 1;
            lost += i.gpu_hours_lost;
            count += 1;
        }
    }
    for b in by_bucket.values_mut() {
        b.share = b.count as f64 / count.max(1) as f64;
    }
    Truth {
        seed: opts.seed,
        days: opts.days,
        hosts: opts.hosts,
        lemon_hosts: fleet
            .lemons
            .iter()
            .map(|&h| fleet.hosts[h].clone())
            .collect(),
        fix_threshold_ms: FIX_THRESHOLD,
        fleet: FleetTruth {
            interruptions: count,
            gpu_hours_lost: lost,
            ettr: if weighted_wall > 0.0 {
                weighted_kept / weighted_wall
            } else {
                1.0
            },
            by_bucket,
            by_cause,
        },
        fix_outcomes: fix_outcomes(&fleet.jobs),
        jobs,
    }
}

/// The first progress of an attempt, or its end when it made none.
fn resumed(a: &Attempt) -> Ms {
    a.progress.first().copied().unwrap_or(a.end)
}

fn job_truth(fleet: &Fleet, job: &JobRun) -> JobTruth {
    let first = &job.attempts[0];
    let last = &job.attempts[job.attempts.len() - 1];
    let wall = last.end - first.start;
    let mut unproductive = resumed(first) - first.start;
    let mut interruptions = Vec::new();
    for (i, a) in job.attempts.iter().enumerate() {
        let Some(f) = &a.failure else { continue };
        let last_checkpoint = job.attempts[..=i]
            .iter()
            .flat_map(|a| a.checkpoints.iter().copied())
            .filter(|&c| c < f.at)
            .max();
        let lost_from = match a.progress.first() {
            Some(&p) => last_checkpoint.map_or(p, |c| c.max(p)),
            None => f.at,
        };
        let next = job.attempts.get(i + 1);
        let restart_progress = next.map(resumed);
        let until = restart_progress.unwrap_or(f.at);
        unproductive += until - lost_from;
        interruptions.push(InterruptionTruth {
            cause: f.cause,
            bucket: f.cause.bucket(),
            code: f.code.to_string(),
            host: fleet.hosts[a.hosts[f.host_index]].clone(),
            gpu: lines::pci(f.gpu),
            attempt_start: format_ms(a.start),
            failure: format_ms(f.at),
            last_checkpoint: last_checkpoint.map(format_ms),
            lost_from: format_ms(lost_from),
            restart: next.map(|n| format_ms(n.start)),
            restart_progress: restart_progress.map(format_ms),
            gpu_hours_lost: f64::from(job.gpus) * (until - lost_from) as f64 / HOUR as f64,
        });
    }
    let productive = wall - unproductive;
    JobTruth {
        job_id: job.plan_id.clone(),
        gpus: job.gpus,
        attempts: job.attempts.len(),
        start: format_ms(first.start),
        end: format_ms(last.end),
        wall_ms: wall,
        productive_ms: productive,
        ettr: if wall > 0 {
            productive as f64 / wall as f64
        } else {
            1.0
        },
        interruptions,
    }
}

fn fix_outcomes(jobs: &[JobRun]) -> BTreeMap<String, FixTruth> {
    let mut out: BTreeMap<String, FixTruth> = BTreeMap::new();
    for job in jobs {
        for pair in job.attempts.windows(2) {
            let Some(f) = &pair[0].failure else { continue };
            let next = &pair[1];
            let e = out.entry(f.code.to_string()).or_default();
            e.n += 1;
            match &next.failure {
                Some(g) if g.at - next.start < FIX_THRESHOLD => {
                    if g.code == f.code {
                        e.failed_same += 1;
                    } else {
                        e.failed_other += 1;
                    }
                }
                _ => e.ran_on += 1,
            }
        }
    }
    out
}
