//! `faultline bench fleet`: a seeded fleet of training jobs, their logs and the ground truth.
//!
//! The simulator writes what a fleet's log shipper would collect over `days` simulated days
//! (Vector JSON lines, one file per day, in time order) for `jobs` training jobs of 8 to 4,096
//! GPUs on a pool of 8-GPU hosts, and `truth.json`: every interruption with its cause, culprit
//! host, GPUs, times, the last checkpoint before it and the GPU-hours it cost; ETTR per job and
//! fleet-wide; the lemon hosts; and per root code what the next attempt did. `faultline report`
//! is tested against it (`tests/it/report.rs`); docs/report.md describes the model.
//!
//! Model, in short: jobs arrive uniformly over the period and take the hosts that free up first
//! (a host is exclusive to one job). Each attempt prints NCCL's start-up line from the first
//! rank of every host, progress from rank 0 every 10-30 minutes and a checkpoint save every
//! 30-150 minutes, in one of six frameworks' wordings. Failures arrive at a constant rate per
//! GPU (causes drawn from the Llama 3 interruption mix, [`CAUSES`]) plus a much higher rate on
//! a few lemon hosts; the culprit host goes to repair, the job restarts under the same id on
//! other hosts after the NCCL timeouts and a requeue delay, and resumes from its last
//! checkpoint. Software and dependency errors come back on the next attempt half of the time.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::Rng;
use crate::report::taxonomy::Bucket;

mod lines;
mod truth;

pub use truth::{FixTruth, FleetTruth, InterruptionTruth, JobTruth, Truth};

/// `faultline bench fleet`'s arguments.
#[derive(Debug, clap::Args)]
pub struct FleetArgs {
    /// The seed: the same seed writes the same fleet.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Jobs submitted over the period.
    #[arg(long, default_value_t = 1000)]
    pub jobs: usize,
    /// Days over which the jobs are submitted.
    #[arg(long, default_value_t = 30)]
    pub days: u32,
    /// 8-GPU hosts in the pool.
    #[arg(long, default_value_t = 768)]
    pub hosts: usize,
    /// Where to write the logs and truth.json (created).
    #[arg(value_name = "OUT_DIR")]
    pub out: PathBuf,
}

/// Runs `faultline bench fleet`: writes the fleet and prints a one-line summary.
pub fn command(args: &FleetArgs) -> anyhow::Result<std::process::ExitCode> {
    let opts = FleetOptions {
        seed: args.seed,
        jobs: args.jobs,
        days: args.days,
        hosts: args.hosts,
    };
    let truth = write_fleet(&opts, &args.out)?;
    println!(
        "{} jobs, {} interruptions, {:.0} GPU-hours lost, fleet ETTR {:.3}, {} lemon hosts -> {}",
        truth.jobs.len(),
        truth.fleet.interruptions,
        truth.fleet.gpu_hours_lost,
        truth.fleet.ettr,
        truth.lemon_hosts.len(),
        args.out.display()
    );
    Ok(std::process::ExitCode::SUCCESS)
}

/// Milliseconds.
type Ms = i64;

const MINUTE: Ms = 60_000;
const HOUR: Ms = 60 * MINUTE;
/// How long the other ranks wait in a collective before their watchdog fires.
const NCCL_TIMEOUT: Ms = 10 * MINUTE;
/// The threshold of a fix outcome: the next attempt ran at least this long.
pub const FIX_THRESHOLD: Ms = HOUR;

/// What to simulate.
#[derive(Debug, Clone)]
pub struct FleetOptions {
    /// The seed: the same seed gives the same logs and truth.
    pub seed: u64,
    /// Jobs submitted over the period.
    pub jobs: usize,
    /// Days over which jobs are submitted (jobs may run on after the last).
    pub days: u32,
    /// 8-GPU hosts in the pool.
    pub hosts: usize,
}

impl Default for FleetOptions {
    fn default() -> Self {
        FleetOptions {
            seed: 1,
            jobs: 1000,
            days: 30,
            hosts: 768,
        }
    }
}

/// Why a fleet could not be written.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    /// Writing a file failed.
    #[error("writing {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// The options cannot describe a fleet.
    #[error("invalid fleet options: {0}")]
    Options(String),
}

/// The causes of an interruption (Llama 3's categories, Dubey et al. 2024, Table 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum Cause {
    FaultyGpu,
    GpuHbm3,
    SoftwareBug,
    NetworkSwitchCable,
    HostMaintenance,
    GpuSram,
    GpuSystemProcessor,
    Nic,
    NcclWatchdog,
    SilentDataCorruption,
    GpuThermal,
    Ssd,
    PowerSupply,
    ServerChassis,
    Io,
    Dependency,
    Other,
}

/// The mix failures are drawn from, in percent of interruptions (weights; they sum to 97.4).
pub const CAUSES: [(Cause, f64); 17] = [
    (Cause::FaultyGpu, 30.1),
    (Cause::GpuHbm3, 17.2),
    (Cause::SoftwareBug, 12.9),
    (Cause::NetworkSwitchCable, 8.4),
    (Cause::HostMaintenance, 7.6),
    (Cause::GpuSram, 4.5),
    (Cause::GpuSystemProcessor, 4.1),
    (Cause::Nic, 2.9),
    (Cause::NcclWatchdog, 1.7),
    (Cause::SilentDataCorruption, 1.7),
    (Cause::GpuThermal, 1.4),
    (Cause::Ssd, 0.7),
    (Cause::PowerSupply, 0.7),
    (Cause::ServerChassis, 0.5),
    (Cause::Io, 0.5),
    (Cause::Dependency, 0.5),
    (Cause::Other, 2.0),
];

/// The causes a lemon host's extra failures are drawn from (its GPUs), with weights.
const LEMON_CAUSES: [(Cause, f64); 4] = [
    (Cause::FaultyGpu, 30.1),
    (Cause::GpuHbm3, 17.2),
    (Cause::GpuSram, 4.5),
    (Cause::GpuSystemProcessor, 4.1),
];

impl Cause {
    /// The report bucket the lines written for this cause belong in.
    pub fn bucket(self) -> Bucket {
        match self {
            Cause::FaultyGpu | Cause::GpuThermal => Bucket::Gpu,
            Cause::GpuHbm3 => Bucket::GpuMemory,
            Cause::GpuSram => Bucket::GpuSram,
            Cause::GpuSystemProcessor => Bucket::GpuSystemProcessor,
            Cause::Nic => Bucket::Nic,
            Cause::NetworkSwitchCable => Bucket::Network,
            Cause::NcclWatchdog => Bucket::CollectiveHang,
            Cause::HostMaintenance | Cause::PowerSupply | Cause::ServerChassis | Cause::Io => {
                Bucket::Host
            }
            Cause::Ssd => Bucket::Storage,
            Cause::SoftwareBug | Cause::Dependency => Bucket::UserCode,
            Cause::SilentDataCorruption => Bucket::Numerical,
            Cause::Other => Bucket::Unknown,
        }
    }

    /// Whether the failure is the culprit host's own (it goes to repair).
    fn host_fault(self) -> bool {
        matches!(
            self.bucket(),
            Bucket::Gpu
                | Bucket::GpuMemory
                | Bucket::GpuSram
                | Bucket::GpuSystemProcessor
                | Bucket::Nic
                | Bucket::Host
                | Bucket::Storage
        )
    }

    /// Whether the same error comes back after a restart half of the time (the code did not
    /// change).
    fn may_repeat(self) -> bool {
        matches!(self, Cause::SoftwareBug | Cause::Dependency)
    }
}

/// The training framework of a job: the wording of its progress and checkpoint lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum Framework {
    Megatron,
    DeepSpeed,
    Lightning,
    HfTrainer,
    Torchtitan,
    NeMo,
}

const FRAMEWORKS: [Framework; 6] = [
    Framework::Megatron,
    Framework::DeepSpeed,
    Framework::Lightning,
    Framework::HfTrainer,
    Framework::Torchtitan,
    Framework::NeMo,
];

/// Job sizes in GPUs and their weights: most jobs are small, a few use half the fleet.
const SIZES: [(u32, f64); 10] = [
    (8, 30.0),
    (16, 15.0),
    (32, 15.0),
    (64, 12.0),
    (128, 10.0),
    (256, 8.0),
    (512, 5.0),
    (1024, 3.0),
    (2048, 1.5),
    (4096, 0.5),
];

/// Failures per GPU-hour of a healthy host, all causes.
const GPU_RATE_PER_HOUR: f64 = 6e-5;
/// Extra failures per hour of a lemon host while a job runs on it.
const LEMON_RATE_PER_HOUR: f64 = 0.02;

/// The simulated clock's origin: 2026-01-05T00:00:00Z.
pub fn epoch_ms() -> Ms {
    crate::time::days_from_civil(2026, 1, 5) * 86_400_000
}

/// A small wrapper over the shared generator with the draws the model needs.
struct Draw(Rng);

impl Draw {
    fn new(seed: u64) -> Self {
        // splitmix64 of the seed: xorshift's first outputs from a small seed are poor.
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        Draw(Rng::new(z ^ (z >> 31)))
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.0.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `lo..hi` milliseconds.
    fn between(&mut self, lo: Ms, hi: Ms) -> Ms {
        lo + (self.unit() * (hi - lo) as f64) as Ms
    }

    fn below(&mut self, n: usize) -> usize {
        self.0.below(n.max(1))
    }

    /// An exponential waiting time for `rate_per_hour`, in milliseconds.
    fn exponential(&mut self, rate_per_hour: f64) -> Ms {
        let u = self.unit().max(1e-12);
        ((-u.ln() / rate_per_hour) * HOUR as f64) as Ms
    }

    fn weighted<T: Copy>(&mut self, items: &[(T, f64)]) -> T {
        let total: f64 = items.iter().map(|(_, w)| w).sum();
        let mut x = self.unit() * total;
        for (item, w) in items {
            if x < *w {
                return *item;
            }
            x -= w;
        }
        items[items.len() - 1].0
    }
}

/// One job as planned: what it needs and how it logs.
#[derive(Debug, Clone)]
struct JobPlan {
    id: String,
    gpus: u32,
    framework: Framework,
    submit: Ms,
    work: Ms,
    progress_every: Ms,
    checkpoint_every: Ms,
    startup: Ms,
}

/// One attempt as it ran.
#[derive(Debug, Clone)]
pub(crate) struct Attempt {
    pub(crate) start: Ms,
    pub(crate) hosts: Vec<usize>,
    pub(crate) first_progress: Ms,
    /// Progress line times.
    pub(crate) progress: Vec<Ms>,
    /// Checkpoint save times.
    pub(crate) checkpoints: Vec<Ms>,
    /// How it ended: a failure, or the job's completion at `end`.
    pub(crate) failure: Option<Failure>,
    pub(crate) end: Ms,
}

/// An interruption as it happened.
#[derive(Debug, Clone)]
pub(crate) struct Failure {
    pub(crate) at: Ms,
    pub(crate) cause: Cause,
    /// The KB error code of the line that says what failed.
    pub(crate) code: &'static str,
    /// Index into the attempt's hosts of the host it happened on.
    pub(crate) host_index: usize,
    /// The GPU (local index) it happened on.
    pub(crate) gpu: usize,
    /// The rank that printed it (job-side lines).
    pub(crate) rank: u32,
}

/// A job's whole life.
#[derive(Debug, Clone)]
pub(crate) struct JobRun {
    pub(crate) plan_id: String,
    pub(crate) gpus: u32,
    pub(crate) framework: Framework,
    pub(crate) attempts: Vec<Attempt>,
}

/// The whole simulated fleet.
pub(crate) struct Fleet {
    pub(crate) hosts: Vec<String>,
    pub(crate) lemons: Vec<usize>,
    pub(crate) jobs: Vec<JobRun>,
}

/// Simulates the fleet, writes its logs under `out` (created) and `truth.json`, and returns
/// the truth.
pub fn write_fleet(opts: &FleetOptions, out: &Path) -> Result<Truth, FleetError> {
    let fleet = simulate(opts)?;
    let truth = truth::compute(&fleet, opts);
    let write_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| FleetError::Write { path, source }
    };
    fs::create_dir_all(out).map_err(write_err(out))?;
    let mut records = lines::render(&fleet, opts.seed);
    records.sort_by_key(|r| (r.0, r.1));
    let origin = epoch_ms();
    let mut day_start = 0usize;
    while day_start < records.len() {
        let day = (records[day_start].0 - origin).div_euclid(24 * HOUR);
        let day_end = records[day_start..]
            .iter()
            .position(|r| (r.0 - origin).div_euclid(24 * HOUR) != day)
            .map_or(records.len(), |n| day_start + n);
        let path = out.join(format!("fleet-day-{:03}.jsonl", day.max(0)));
        let mut file = io::BufWriter::new(fs::File::create(&path).map_err(write_err(&path))?);
        for r in &records[day_start..day_end] {
            file.write_all(r.2.as_bytes())
                .and_then(|()| file.write_all(b"\n"))
                .map_err(write_err(&path))?;
        }
        file.flush().map_err(write_err(&path))?;
        day_start = day_end;
    }
    let path = out.join("truth.json");
    let text = serde_json::to_string_pretty(&truth).map_err(|e| FleetError::Write {
        path: path.clone(),
        source: io::Error::other(e),
    })?;
    fs::write(&path, text + "\n").map_err(write_err(&path))?;
    Ok(truth)
}

/// Runs the model: plans every job, then schedules and runs them in submission order.
pub(crate) fn simulate(opts: &FleetOptions) -> Result<Fleet, FleetError> {
    if opts.jobs == 0 || opts.days == 0 || opts.hosts < 8 {
        return Err(FleetError::Options(
            "--jobs and --days must be positive and the pool at least 8 hosts".into(),
        ));
    }
    let mut rng = Draw::new(opts.seed);
    let hosts: Vec<String> = (1..=opts.hosts).map(|i| format!("node-{i:04}")).collect();
    let lemon_count = (opts.hosts / 64).max(3);
    let mut lemons: Vec<usize> = Vec::new();
    while lemons.len() < lemon_count {
        let h = rng.below(opts.hosts);
        if !lemons.contains(&h) {
            lemons.push(h);
        }
    }
    lemons.sort_unstable();
    let mut plans: Vec<JobPlan> = (0..opts.jobs)
        .map(|i| plan_job(&mut rng, i, opts))
        .collect();
    plans.sort_by_key(|p| p.submit);
    let mut free_at = vec![epoch_ms(); opts.hosts];
    let jobs = plans
        .iter()
        .map(|plan| run_job(&mut rng, plan, &mut free_at, &lemons))
        .collect();
    Ok(Fleet {
        hosts,
        lemons,
        jobs,
    })
}

fn plan_job(rng: &mut Draw, i: usize, opts: &FleetOptions) -> JobPlan {
    // At most the largest power of two within two thirds of the pool.
    let room = (opts.hosts as u32 * 8 * 2 / 3).max(8);
    let cap = if room.is_power_of_two() {
        room
    } else {
        room.next_power_of_two() / 2
    };
    let gpus = rng.weighted(&SIZES).min(cap);
    // Productive hours needed: log-uniform between 2 and 48.
    let work_hours = (2f64.ln() + rng.unit() * (48f64 / 2.0).ln()).exp();
    let framework = FRAMEWORKS[rng.below(FRAMEWORKS.len())];
    JobPlan {
        id: format!("train-{:05}", i + 1),
        gpus,
        framework,
        submit: epoch_ms() + rng.between(0, i64::from(opts.days) * 24 * HOUR),
        work: (work_hours * HOUR as f64) as Ms,
        progress_every: rng.between(10 * MINUTE, 30 * MINUTE),
        checkpoint_every: rng.between(30 * MINUTE, 150 * MINUTE),
        startup: rng.between(3 * MINUTE, 8 * MINUTE),
    }
}

/// Runs one job to completion, attempt after attempt.
fn run_job(rng: &mut Draw, plan: &JobPlan, free_at: &mut [Ms], lemons: &[usize]) -> JobRun {
    let mut attempts = Vec::new();
    let mut ready = plan.submit;
    let mut remaining = plan.work;
    let mut repeat: Option<(Cause, &'static str)> = None;
    loop {
        let hosts = allocate(free_at, (plan.gpus / 8).max(1) as usize);
        let start = hosts
            .iter()
            .map(|&h| free_at[h])
            .max()
            .unwrap_or(ready)
            .max(ready);
        let first_progress = start + plan.startup;
        let done_at = first_progress + remaining;
        let failure = draw_failure(rng, plan, &hosts, lemons, start, repeat.take());
        let (end, failure) = match failure {
            Some(f) if f.at < done_at => (f.at, Some(f)),
            _ => (done_at, None),
        };
        let progress = ticks(first_progress, plan.progress_every, end);
        let mut checkpoints = ticks(
            first_progress + plan.checkpoint_every,
            plan.checkpoint_every,
            end,
        );
        if failure.is_none() {
            checkpoints.push(end);
        }
        let kept = checkpoints
            .iter()
            .filter(|&&c| c >= first_progress)
            .max()
            .map_or(0, |&c| c - first_progress);
        let attempt = Attempt {
            start,
            hosts: hosts.clone(),
            first_progress,
            progress,
            checkpoints,
            failure: failure.clone(),
            end,
        };
        attempts.push(attempt);
        let Some(f) = failure else {
            for &h in &hosts {
                free_at[h] = end + MINUTE;
            }
            break;
        };
        remaining = (remaining - kept).max(MINUTE);
        release(rng, free_at, &hosts, &f, lemons);
        ready = f.at + NCCL_TIMEOUT + rng.between(2 * MINUTE, 30 * MINUTE);
        if f.cause.may_repeat() && rng.unit() < 0.5 {
            repeat = Some((f.cause, f.code));
        }
    }
    JobRun {
        plan_id: plan.id.clone(),
        gpus: plan.gpus,
        framework: plan.framework,
        attempts,
    }
}

/// Times from `first` every `every`, strictly before `end`.
fn ticks(first: Ms, every: Ms, end: Ms) -> Vec<Ms> {
    let mut out = Vec::new();
    let mut t = first;
    while t < end {
        out.push(t);
        t += every;
    }
    out
}

/// The `n` hosts that free up first (ties by index).
fn allocate(free_at: &[Ms], n: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..free_at.len()).collect();
    order.sort_by_key(|&h| (free_at[h], h));
    order.truncate(n.min(free_at.len()));
    order
}

/// Frees the hosts of a failed attempt: the culprit after its repair, the others once the
/// job has torn down.
fn release(rng: &mut Draw, free_at: &mut [Ms], hosts: &[usize], f: &Failure, lemons: &[usize]) {
    let culprit = hosts.get(f.host_index).copied();
    for &h in hosts {
        free_at[h] = f.at + NCCL_TIMEOUT + MINUTE;
    }
    if let (Some(h), true) = (culprit, f.cause.host_fault()) {
        let repair = if lemons.contains(&h) {
            // A lemon passes its quick health check and goes straight back to the pool.
            rng.between(HOUR, 4 * HOUR)
        } else {
            rng.between(12 * HOUR, 72 * HOUR)
        };
        free_at[h] = f.at + repair;
    }
}

/// The attempt's first failure, if any: the healthy rate over all its GPUs, each lemon host's
/// own rate, and a repeated software error early in the attempt.
fn draw_failure(
    rng: &mut Draw,
    plan: &JobPlan,
    hosts: &[usize],
    lemons: &[usize],
    start: Ms,
    repeat: Option<(Cause, &'static str)>,
) -> Option<Failure> {
    let mut best: Option<(Ms, Cause, Option<&'static str>, usize)> = None;
    let mut offer = |at: Ms, cause: Cause, code: Option<&'static str>, host: usize| {
        if best.is_none_or(|(t, ..)| at < t) {
            best = Some((at, cause, code, host));
        }
    };
    let base = rng.exponential(GPU_RATE_PER_HOUR * f64::from(plan.gpus));
    let cause = rng.weighted(&CAUSES);
    let host = rng.below(hosts.len());
    offer(start + base.max(MINUTE), cause, None, host);
    for (i, h) in hosts.iter().enumerate() {
        if lemons.contains(h) {
            let at = start + rng.exponential(LEMON_RATE_PER_HOUR).max(MINUTE);
            let cause = rng.weighted(&LEMON_CAUSES);
            offer(at, cause, None, i);
        }
    }
    if let Some((cause, code)) = repeat {
        let at = start + plan.startup + rng.between(5 * MINUTE, 40 * MINUTE);
        offer(at, cause, Some(code), rng.below(hosts.len()));
    }
    let (at, cause, code, host_index) = best?;
    let gpu = rng.below(8);
    let rank = (host_index * 8 + gpu) as u32 % plan.gpus.max(1);
    let code = code.unwrap_or_else(|| lines::code_for(cause, rng.below(3)));
    Some(Failure {
        at,
        cause,
        code,
        host_index,
        gpu,
        rank,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small(seed: u64) -> FleetOptions {
        FleetOptions {
            seed,
            jobs: 30,
            days: 2,
            hosts: 64,
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_fleet_and_another_seed_another() {
        let a = truth::compute(&simulate(&small(5)).expect("fleet"), &small(5));
        let b = truth::compute(&simulate(&small(5)).expect("fleet"), &small(5));
        let c = truth::compute(&simulate(&small(6)).expect("fleet"), &small(6));
        let text = |t: &Truth| serde_json::to_string(t).expect("json");
        assert_eq!(text(&a), text(&b));
        assert_ne!(text(&a), text(&c));
    }

    #[test]
    fn hosts_are_never_shared_and_failures_end_their_attempt() {
        let fleet = simulate(&small(9)).expect("fleet");
        let mut busy: Vec<(usize, Ms, Ms)> = Vec::new();
        for job in &fleet.jobs {
            for a in &job.attempts {
                assert!(a.progress.iter().chain(&a.checkpoints).all(|&t| t <= a.end));
                if let Some(f) = &a.failure {
                    assert_eq!(f.at, a.end);
                    assert!(f.host_index < a.hosts.len());
                }
                busy.extend(a.hosts.iter().map(|&h| (h, a.start, a.end)));
            }
        }
        busy.sort_unstable();
        for w in busy.windows(2) {
            if w[0].0 == w[1].0 {
                assert!(w[1].1 >= w[0].2, "host {} shared: {w:?}", w[0].0);
            }
        }
    }

    #[test]
    fn an_empty_fleet_is_refused() {
        let opts = FleetOptions {
            jobs: 0,
            ..small(1)
        };
        assert!(simulate(&opts).is_err());
    }
}
