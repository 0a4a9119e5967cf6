//! Per job: its attempts, progress and checkpoints, its interruptions and what each cost.
//!
//! An attempt starts at rank 0's NCCL start-up line (a later one opens a new attempt once the
//! current one made progress or is older than [`Settings::attempt_gap_ms`]; sub-communicators
//! print theirs within seconds). An incident interrupts its attempt when no progress or
//! checkpoint line of that attempt follows its failure time; the earliest such incident of an
//! attempt is its interruption. An attempt followed by another without any incident is an
//! interruption whose cause is unknown. docs/report.md gives every formula.

use std::collections::BTreeMap;

use rustc_hash::FxHashMap;

use serde::Serialize;

use super::input::{Fact, FactKind, IncidentFact, Name};
use super::taxonomy::{classify, Bucket};
use crate::time::{format_ms, Millis};

const HOUR: f64 = 3_600_000.0;

/// How the report reads a job's lines.
#[derive(Debug, Clone)]
pub struct Settings {
    /// A rank-0 start-up line this long after the attempt's start opens a new attempt even if
    /// the current one printed no progress.
    pub attempt_gap_ms: Millis,
    /// A node's root line this long before an unexplained failure, on one of the job's hosts,
    /// is taken as its root.
    pub node_join_ms: Millis,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            attempt_gap_ms: 10 * 60_000,
            node_join_ms: 10 * 60_000,
        }
    }
}

/// One attempt of a job.
#[derive(Debug, Clone)]
pub struct Attempt {
    /// Rank 0's start-up line (or the job's first line).
    pub start: Millis,
    /// The world size rank 0 reported.
    pub gpus: Option<u32>,
    /// Hosts that printed a start-up line.
    pub hosts: Vec<Name>,
    /// Progress line times, in order.
    pub progress: Vec<Millis>,
    /// Its last line of any kind the report reads.
    pub last_seen: Millis,
}

/// One job's timeline.
#[derive(Debug, Clone)]
pub struct Job {
    /// Its id.
    pub job_id: Name,
    /// Its attempts in order.
    pub attempts: Vec<Attempt>,
    /// Checkpoint save times, in order.
    pub checkpoints: Vec<Millis>,
    /// Its last line.
    pub last_seen: Millis,
    /// Whether any of its lines had a time.
    pub timed: bool,
}

fn ser_ms<S: serde::Serializer>(t: &Millis, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format_ms(*t))
}

fn ser_opt_ms<S: serde::Serializer>(t: &Option<Millis>, s: S) -> Result<S::Ok, S::Error> {
    match t {
        Some(t) => s.serialize_str(&format_ms(*t)),
        None => s.serialize_none(),
    }
}

/// One interruption and the inputs of its cost.
#[derive(Debug, Clone, Serialize)]
pub struct Interruption {
    /// The job.
    pub job_id: Name,
    /// Its bucket.
    pub bucket: Bucket,
    /// The root's error code (the headline's when the root is unknown; none when no incident
    /// explained the restart).
    pub code: Option<Name>,
    /// Whether a root-role line was found.
    pub root_known: bool,
    /// `report` when the report joined a node's root line the correlator had not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub joined_by: Option<&'static str>,
    /// The culprit host.
    pub host: Option<Name>,
    /// The culprit GPU.
    pub gpu: Option<Name>,
    /// GPUs of the job.
    pub gpus: u32,
    /// The attempt it ended (from 0).
    pub attempt: usize,
    /// That attempt's start.
    #[serde(serialize_with = "ser_ms")]
    pub attempt_start: Millis,
    /// When it failed.
    #[serde(serialize_with = "ser_ms")]
    pub failure: Millis,
    /// The job's last checkpoint save before it.
    #[serde(serialize_with = "ser_opt_ms")]
    pub last_checkpoint: Option<Millis>,
    /// The start of the work thrown away: the later of the last save and the attempt's first
    /// progress (the failure itself when the attempt made none).
    #[serde(serialize_with = "ser_ms")]
    pub lost_from: Millis,
    /// The next attempt's start.
    #[serde(serialize_with = "ser_opt_ms")]
    pub restart: Option<Millis>,
    /// The next attempt's first progress (its failure, if it made none).
    #[serde(serialize_with = "ser_opt_ms")]
    pub restart_progress: Option<Millis>,
    /// Hours of work thrown away: failure - lost_from.
    pub lost_work_hours: f64,
    /// Hours until training resumed: restart_progress - failure.
    pub downtime_hours: f64,
    /// GPUs x (lost work + downtime).
    pub gpu_hours_lost: f64,
    /// The incident's fingerprint.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<Name>,
}

/// One job's cost.
#[derive(Debug, Clone, Serialize)]
pub struct JobCost {
    /// The job.
    pub job_id: Name,
    /// Its GPUs.
    pub gpus: u32,
    /// Attempts (1 + restarts).
    pub attempts: usize,
    /// First start.
    #[serde(serialize_with = "ser_ms")]
    pub start: Millis,
    /// Last line.
    #[serde(serialize_with = "ser_ms")]
    pub end: Millis,
    /// Hours from first start to last line.
    pub wall_hours: f64,
    /// Hours of training kept.
    pub productive_hours: f64,
    /// productive / wall; absent when the job printed no progress the report recognises.
    pub ettr: Option<f64>,
    /// Hours each attempt ran (start to failure, next start or last line).
    #[serde(skip)]
    pub runtimes: Vec<(Millis, Millis)>,
    /// Whether its times are known (a job whose lines had no timestamps has none).
    #[serde(skip)]
    pub timed: bool,
    /// Its interruptions.
    pub interruptions: Vec<Interruption>,
}

/// Builds the job timelines from the facts (node facts are skipped).
pub fn timelines(facts: &[Fact], settings: &Settings) -> BTreeMap<Name, Job> {
    // Grouped by hash, then ordered once (a million facts into a tree compared ids ~20 times
    // each).
    let mut by_job: FxHashMap<&Name, Vec<&Fact>> = FxHashMap::default();
    for f in facts.iter().filter(|f| f.kind != FactKind::NodeRoot) {
        by_job.entry(&f.job_id).or_default().push(f);
    }
    let mut by_job: Vec<_> = by_job.into_iter().collect();
    by_job.sort_unstable_by_key(|(id, _)| *id);
    by_job
        .into_iter()
        .map(|(id, mut fs)| {
            fs.sort_by_key(|f| f.t);
            (Name::clone(id), timeline(id, &fs, settings))
        })
        .collect()
}

fn timeline(id: &Name, facts: &[&Fact], settings: &Settings) -> Job {
    let mut job = Job {
        job_id: Name::clone(id),
        attempts: Vec::new(),
        checkpoints: Vec::new(),
        last_seen: facts.first().map_or(0, |f| f.t),
        timed: true,
    };
    for f in facts {
        job.last_seen = job.last_seen.max(f.t);
        let opens = f.kind == FactKind::Start
            && f.rank == Some(0)
            && job
                .attempts
                .last()
                .is_none_or(|a| !a.progress.is_empty() || f.t - a.start > settings.attempt_gap_ms);
        if opens || job.attempts.is_empty() {
            job.attempts.push(Attempt {
                start: f.t,
                gpus: None,
                hosts: Vec::new(),
                progress: Vec::new(),
                last_seen: f.t,
            });
        }
        let Some(a) = job.attempts.last_mut() else {
            continue;
        };
        a.last_seen = a.last_seen.max(f.t);
        match f.kind {
            FactKind::Start => {
                if f.rank == Some(0) {
                    a.gpus = a.gpus.max(f.world);
                }
                if let Some(h) = &f.host {
                    if !a.hosts.contains(h) {
                        a.hosts.push(h.clone());
                    }
                }
            }
            FactKind::Progress => a.progress.push(f.t),
            FactKind::Checkpoint => job.checkpoints.push(f.t),
            FactKind::NodeRoot => {}
        }
    }
    job
}

/// A job known only from its incidents: one attempt from its first incident.
pub fn from_incidents(id: &Name, incidents: &[&IncidentFact]) -> Job {
    let t = incidents.iter().filter_map(|i| i.t).min().unwrap_or(0);
    let last = incidents.iter().filter_map(|i| i.t).max().unwrap_or(t);
    Job {
        job_id: Name::clone(id),
        attempts: vec![Attempt {
            start: t,
            gpus: None,
            hosts: Vec::new(),
            progress: Vec::new(),
            last_seen: last,
        }],
        checkpoints: Vec::new(),
        last_seen: last,
        timed: incidents.iter().any(|i| i.t.is_some()),
    }
}

/// The node root lines of each host with their times, in time order (the times side by side:
/// a search by time reads one array, not a fact per step).
pub type NodeRoots<'a> = FxHashMap<&'a str, Vec<(Millis, &'a Fact)>>;

/// A failure as found: its time, headline and where it came from.
#[derive(Debug, Clone)]
struct Found {
    t: Millis,
    code: Option<Name>,
    category: Option<Name>,
    root_known: bool,
    joined_by: Option<&'static str>,
    host: Option<Name>,
    gpu: Option<Name>,
    world: Option<u32>,
    fingerprint: Option<Name>,
}

/// The job's interruptions and cost.
pub fn cost(
    job: &Job,
    incidents: &[&IncidentFact],
    nodes: &NodeRoots<'_>,
    settings: &Settings,
) -> JobCost {
    let found = attempt_failures(job, incidents, nodes, settings);
    let gpus = job_gpus(job, incidents);
    let resumed = |i: usize| -> Millis {
        let a = &job.attempts[i];
        a.progress
            .first()
            .copied()
            .or(found[i].as_ref().map(|f| f.t))
            .unwrap_or(a.last_seen)
    };
    let start = job.attempts[0].start;
    let mut unproductive = resumed(0) - start;
    let mut interruptions = Vec::new();
    let mut runtimes = Vec::new();
    for (i, a) in job.attempts.iter().enumerate() {
        let next = job.attempts.get(i + 1);
        let end = found[i]
            .as_ref()
            .map(|f| f.t)
            .or(next.map(|n| n.start))
            .unwrap_or(a.last_seen)
            .max(a.start);
        runtimes.push((a.start, end));
        let Some(f) = &found[i] else { continue };
        let last_checkpoint = job.checkpoints.iter().copied().filter(|&c| c < f.t).max();
        let lost_from = match a.progress.first() {
            Some(&p) if p <= f.t => last_checkpoint.map_or(p, |c| c.max(p)),
            _ => f.t,
        };
        let restart_progress = next.map(|_| resumed(i + 1));
        let until = restart_progress.unwrap_or(f.t).max(f.t);
        unproductive += until - lost_from;
        let g = a.gpus.or(f.world).unwrap_or(gpus);
        interruptions.push(Interruption {
            job_id: job.job_id.clone(),
            bucket: classify(
                f.code.as_deref().unwrap_or(""),
                f.category.as_deref().unwrap_or(""),
                f.root_known,
            ),
            code: f.code.clone(),
            root_known: f.root_known,
            joined_by: f.joined_by,
            host: f.host.clone(),
            gpu: f.gpu.clone(),
            gpus: g,
            attempt: i,
            attempt_start: a.start,
            failure: f.t,
            last_checkpoint,
            lost_from,
            restart: next.map(|n| n.start),
            restart_progress,
            lost_work_hours: (f.t - lost_from) as f64 / HOUR,
            downtime_hours: (until - f.t) as f64 / HOUR,
            gpu_hours_lost: f64::from(g) * (until - lost_from) as f64 / HOUR,
            fingerprint: f.fingerprint.clone(),
        });
    }
    let wall = (job.last_seen - start).max(0);
    let productive = (wall - unproductive).max(0);
    let has_progress = job.attempts.iter().any(|a| !a.progress.is_empty());
    JobCost {
        job_id: job.job_id.clone(),
        gpus,
        attempts: job.attempts.len(),
        start,
        end: job.last_seen,
        wall_hours: wall as f64 / HOUR,
        productive_hours: productive as f64 / HOUR,
        ettr: (has_progress && wall > 0).then(|| productive as f64 / wall as f64),
        runtimes,
        timed: job.timed,
        interruptions,
    }
}

/// The job's size: rank 0's world size, else the incidents' evidence, else 8 per host seen.
fn job_gpus(job: &Job, incidents: &[&IncidentFact]) -> u32 {
    job.attempts
        .iter()
        .filter_map(|a| a.gpus)
        .max()
        .or_else(|| incidents.iter().filter_map(|i| i.world_size).max())
        .or_else(|| {
            let hosts = job.attempts.iter().map(|a| a.hosts.len()).max()?;
            (hosts > 0).then_some(hosts as u32 * 8)
        })
        .unwrap_or(1)
}

/// Per attempt, the failure that ended it, if any.
fn attempt_failures(
    job: &Job,
    incidents: &[&IncidentFact],
    nodes: &NodeRoots<'_>,
    settings: &Settings,
) -> Vec<Option<Found>> {
    let n = job.attempts.len();
    let mut out: Vec<Option<Found>> = vec![None; n];
    for inc in incidents {
        let t = inc.t.unwrap_or(job.attempts[0].start);
        let i = job.attempts.iter().rposition(|a| a.start <= t).unwrap_or(0);
        let a = &job.attempts[i];
        let next_start = job.attempts.get(i + 1).map_or(Millis::MAX, |n| n.start);
        let went_on = a.progress.iter().any(|&p| p > t)
            || job.checkpoints.iter().any(|&c| c > t && c < next_start);
        if went_on || out[i].as_ref().is_some_and(|f| f.t <= t) {
            continue;
        }
        let mut f = Found {
            t,
            code: Some(inc.code.clone()),
            category: Some(inc.category.clone()),
            root_known: inc.root_known,
            joined_by: None,
            host: inc.host.clone(),
            gpu: inc.gpu.clone(),
            world: inc.world_size,
            fingerprint: Some(inc.fingerprint.clone()).filter(|s| !s.is_empty()),
        };
        // The correlator keeps every host a job ever ran on: a node's line on a host the job
        // left may have been elected. The attempt's own hosts' lines win.
        let elsewhere = f
            .host
            .as_ref()
            .is_some_and(|h| !a.hosts.is_empty() && !a.hosts.contains(h));
        if !f.root_known || elsewhere {
            join_node_root(&mut f, &a.hosts, nodes, settings);
        }
        out[i] = Some(f);
    }
    // An attempt followed by another with no incident: a node's root line on one of its hosts
    // after its last progress, else nothing explains why.
    for (slot, pair) in out.iter_mut().zip(job.attempts.windows(2)) {
        if slot.is_some() {
            continue;
        }
        let (a, next) = (&pair[0], &pair[1]);
        let from = a.progress.last().copied().unwrap_or(a.start);
        let mut f = Found {
            t: a.last_seen,
            code: None,
            category: None,
            root_known: false,
            joined_by: None,
            host: None,
            gpu: None,
            world: None,
            fingerprint: None,
        };
        if let Some(node) = earliest_node_root(&a.hosts, nodes, from, next.start) {
            adopt(&mut f, node);
        }
        *slot = Some(f);
    }
    out
}

/// The earliest node root line on one of `hosts` in `from..=to` (each host's lines are in time
/// order: the first at or after `from` is found by halving).
fn earliest_node_root<'a>(
    hosts: &[Name],
    nodes: &NodeRoots<'a>,
    from: Millis,
    to: Millis,
) -> Option<&'a Fact> {
    hosts
        .iter()
        .filter_map(|h| nodes.get(&**h))
        .filter_map(|lines| lines.get(lines.partition_point(|(t, _)| *t < from)))
        .filter(|(t, _)| *t <= to)
        .min_by_key(|(t, _)| *t)
        .map(|(_, n)| *n)
}

/// Takes a node's root line as the failure's root.
fn adopt(f: &mut Found, n: &Fact) {
    f.t = n.t;
    f.code = Some(n.code.clone());
    f.category = Some(n.category.clone());
    f.root_known = true;
    f.joined_by = Some("report");
    f.host = n.host.clone();
    f.gpu = None;
}

/// Takes the earliest node root line on one of `hosts` shortly before the failure as its root.
fn join_node_root(f: &mut Found, hosts: &[Name], nodes: &NodeRoots<'_>, s: &Settings) {
    if let Some(n) = earliest_node_root(hosts, nodes, f.t - s.node_join_ms, f.t + 60_000) {
        adopt(f, n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: Millis = 60_000;

    fn fact(kind: FactKind, t: Millis, rank: Option<u32>, host: &str) -> Fact {
        Fact {
            kind,
            job_id: "j".into(),
            t,
            host: Some(host.into()),
            rank,
            world: (kind == FactKind::Start).then_some(16),
            code: "".into(),
            category: "".into(),
        }
    }

    fn incident(t: Millis, code: &str, category: &str, known: bool, host: &str) -> IncidentFact {
        IncidentFact {
            job_id: "j".into(),
            root_known: known,
            code: code.into(),
            category: category.into(),
            host: Some(host.into()),
            gpu: None,
            t: Some(t),
            world_size: None,
            fingerprint: Name::from(format!("fp-{t}").as_str()),
        }
    }

    /// Two attempts on h1+h2 then h3+h4: start 0, progress every 10 min from 5, a save at 60,
    /// a failure at 90, a restart at 120 whose first progress is at 126, the end at 200.
    fn two_attempts() -> Vec<Fact> {
        let mut f = vec![
            fact(FactKind::Start, 0, Some(0), "h1"),
            fact(FactKind::Start, 1, Some(8), "h2"),
        ];
        f.extend((0..9).map(|k| fact(FactKind::Progress, (5 + 10 * k) * MIN, Some(0), "h1")));
        f.push(fact(FactKind::Checkpoint, 60 * MIN, Some(0), "h1"));
        f.push(fact(FactKind::Start, 120 * MIN, Some(0), "h3"));
        f.push(fact(FactKind::Start, 120 * MIN + 1, Some(8), "h4"));
        f.extend((0..8).map(|k| fact(FactKind::Progress, (126 + 10 * k) * MIN, Some(0), "h3")));
        f.push(fact(FactKind::Checkpoint, 200 * MIN, Some(0), "h3"));
        f
    }

    #[test]
    fn gpu_hours_lost_count_work_since_the_save_and_downtime_until_progress() {
        let facts = two_attempts();
        let jobs = timelines(&facts, &Settings::default());
        let job = &jobs["j"];
        assert_eq!(job.attempts.len(), 2);
        assert_eq!(job.attempts[1].hosts, [Name::from("h3"), Name::from("h4")]);
        let inc = incident(90 * MIN, "XID_79", "gpu_hardware", true, "h2");
        let cost = cost(job, &[&inc], &NodeRoots::default(), &Settings::default());
        let i = &cost.interruptions[0];
        assert_eq!((i.last_checkpoint, i.lost_from), (Some(60 * MIN), 60 * MIN));
        assert_eq!(i.restart_progress, Some(126 * MIN));
        // 16 GPUs x (30 min of work + 36 min of downtime).
        assert!(
            (i.gpu_hours_lost - 16.0 * 66.0 / 60.0).abs() < 1e-9,
            "{}",
            i.gpu_hours_lost
        );
        assert_eq!(i.bucket, Bucket::Gpu);
        // Wall 200 min; lost: 5 min start-up + 66 min.
        let ettr = cost.ettr.expect("progress seen");
        assert!((ettr - (200.0 - 71.0) / 200.0).abs() < 1e-9, "{ettr}");
    }

    #[test]
    fn an_incident_the_attempt_outlived_is_no_interruption() {
        let facts = two_attempts();
        let jobs = timelines(&facts, &Settings::default());
        let job = &jobs["j"];
        let survived = incident(
            30 * MIN,
            "NCCL_IB_COMPLETION_ERROR",
            "network_ib",
            true,
            "h1",
        );
        let cost = cost(
            job,
            &[&survived],
            &NodeRoots::default(),
            &Settings::default(),
        );
        // The restart still counts, with nothing known to explain it.
        assert_eq!(cost.interruptions.len(), 1);
        let i = &cost.interruptions[0];
        assert_eq!((i.bucket, i.code.as_deref()), (Bucket::Unknown, None));
        assert_eq!(i.failure, 85 * MIN);
    }

    #[test]
    fn a_node_line_on_the_attempts_host_explains_a_hang_or_a_silent_restart() {
        let facts = two_attempts();
        let jobs = timelines(&facts, &Settings::default());
        let job = &jobs["j"];
        let xid = Fact {
            code: "XID_48".into(),
            category: "gpu_memory_ecc".into(),
            ..fact(FactKind::NodeRoot, 88 * MIN, None, "h2")
        };
        let elsewhere = Fact {
            host: Some("h9".into()),
            ..xid.clone()
        };
        let mut nodes: NodeRoots<'_> = NodeRoots::default();
        nodes.entry("h2").or_default().push((xid.t, &xid));
        nodes
            .entry("h9")
            .or_default()
            .push((elsewhere.t, &elsewhere));
        let s = Settings::default();
        let hang = incident(88 * MIN, "NCCL_TIMEOUT", "collective_timeout", false, "h1");
        let joined = &cost(job, &[&hang], &nodes, &s).interruptions[0];
        assert_eq!(
            (joined.bucket, joined.joined_by),
            (Bucket::GpuMemory, Some("report"))
        );
        assert_eq!(joined.host.as_deref(), Some("h2"));
        let silent = &cost(job, &[], &nodes, &s).interruptions[0];
        assert_eq!(
            (silent.bucket, silent.failure),
            (Bucket::GpuMemory, 88 * MIN)
        );
        // Without the node line the hang stays a hang.
        let alone = &cost(job, &[&hang], &NodeRoots::default(), &s).interruptions[0];
        assert_eq!(alone.bucket, Bucket::CollectiveHang);
    }

    #[test]
    fn sub_communicators_do_not_open_attempts() {
        let mut facts = two_attempts();
        facts.push(fact(FactKind::Start, 2 * MIN, Some(0), "h1"));
        let jobs = timelines(&facts, &Settings::default());
        assert_eq!(jobs["j"].attempts.len(), 2);
    }
}
