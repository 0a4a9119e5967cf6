//! `faultline report` against the fleet simulator's ground truth, and on the sample logs.
//!
//! One fleet (seed 7: 1,000 jobs over 30 days) is simulated and reported once, in-process, and
//! each figure the issue names is checked in its own test: category shares within 2 points,
//! GPU-hours lost within 10%, fleet ETTR within 0.02, lemon nodes with precision and recall of
//! at least 0.9, fix outcomes equal to the truth.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;

use faultline::bench::fleet::{write_fleet, FleetOptions, Truth};
use faultline::cli::report::scan_logs;
use faultline::report::{self, Options, Report};

use crate::support::repo;

struct Scored {
    truth: Truth,
    report: Report,
}

/// The seed-7 fleet, simulated and reported once for every test here.
fn fleet() -> &'static Scored {
    static FLEET: OnceLock<Scored> = OnceLock::new();
    FLEET.get_or_init(|| {
        let dir = tempfile::tempdir().expect("tempdir");
        let opts = FleetOptions {
            seed: 7,
            ..FleetOptions::default()
        };
        let truth = write_fleet(&opts, dir.path()).expect("fleet written");
        let logs = dir.path().to_string_lossy().to_string();
        let (input, unreadable) = scan_logs(&[logs], None).expect("scanned");
        assert_eq!(unreadable, 0);
        let report = report::build(&input, &Options::default());
        Scored { truth, report }
    })
}

#[test]
fn the_simulated_fleet_is_the_one_the_issue_asks_for() {
    let t = &fleet().truth;
    assert!(t.jobs.len() >= 1000, "{} jobs", t.jobs.len());
    let first = t.jobs.iter().map(|j| j.start.as_str()).min().expect("jobs");
    let last = t.jobs.iter().map(|j| j.start.as_str()).max().expect("jobs");
    let span = faultline::time::parse(last)
        .and_then(|s| s.millis())
        .expect("time")
        - faultline::time::parse(first)
            .and_then(|s| s.millis())
            .expect("time");
    assert!(span >= 29 * 86_400_000, "jobs start over {span} ms");
    let sizes: BTreeSet<u32> = t.jobs.iter().map(|j| j.gpus).collect();
    assert_eq!(sizes.first(), Some(&8));
    assert_eq!(sizes.last(), Some(&4096));
    assert!(t.fleet.interruptions >= 200, "{}", t.fleet.interruptions);
    assert!(t.fleet.by_cause.len() >= 12, "{:?}", t.fleet.by_cause);
    assert!(t.lemon_hosts.len() >= 10);
}

#[test]
fn every_category_share_within_two_points() {
    let Scored { truth, report } = fleet();
    assert_eq!(report.fleet.interruptions, truth.fleet.interruptions);
    let mine: BTreeMap<_, _> = report.table.iter().map(|r| (r.bucket, r.share)).collect();
    for (bucket, t) in &truth.fleet.by_bucket {
        let got = mine.get(bucket).copied().unwrap_or(0.0);
        assert!(
            (got - t.share).abs() <= 0.02,
            "{bucket:?}: report {got:.4}, truth {:.4}",
            t.share
        );
    }
    for (bucket, got) in &mine {
        let want = truth.fleet.by_bucket.get(bucket).map_or(0.0, |b| b.share);
        assert!((got - want).abs() <= 0.02, "{bucket:?}: {got} vs {want}");
    }
}

#[test]
fn gpu_hours_lost_within_ten_percent() {
    let Scored { truth, report } = fleet();
    let (got, want) = (report.fleet.gpu_hours_lost, truth.fleet.gpu_hours_lost);
    assert!(want > 0.0);
    assert!(
        (got - want).abs() <= 0.10 * want,
        "report {got:.0}, truth {want:.0}"
    );
    // Per bucket too: each row's GPU-hours within 10% of its truth (or 1 GPU-hour).
    for row in &report.table {
        let want = truth
            .fleet
            .by_bucket
            .get(&row.bucket)
            .map_or(0.0, |b| b.gpu_hours_lost);
        let slack = (0.10 * want).max(1.0);
        assert!(
            (row.gpu_hours_lost - want).abs() <= slack,
            "{:?}: {} vs {want}",
            row.bucket,
            row.gpu_hours_lost
        );
    }
}

#[test]
fn fleet_ettr_within_two_hundredths() {
    let Scored { truth, report } = fleet();
    let got = report.fleet.ettr.expect("the fleet printed progress");
    assert!(
        (got - truth.fleet.ettr).abs() <= 0.02,
        "report {got:.4}, truth {:.4}",
        truth.fleet.ettr
    );
    assert!(
        truth.fleet.ettr < 0.99,
        "a fleet without losses tests nothing"
    );
    assert_eq!(report.fleet.ettr_jobs, truth.jobs.len());
}

#[test]
fn lemon_nodes_precision_and_recall() {
    let Scored { truth, report } = fleet();
    let want: BTreeSet<&str> = truth.lemon_hosts.iter().map(String::as_str).collect();
    let got: BTreeSet<&str> = report.lemon_nodes.iter().map(|l| l.host.as_str()).collect();
    let hits = want.intersection(&got).count() as f64;
    let precision = hits / got.len().max(1) as f64;
    let recall = hits / want.len() as f64;
    assert!(
        precision >= 0.9 && recall >= 0.9,
        "precision {precision}, recall {recall}: {got:?} vs {want:?}"
    );
    for l in &report.lemon_nodes {
        assert!(
            l.history.iter().any(|e| e.code.starts_with("XID_")),
            "{} has no Xid history",
            l.host
        );
    }
}

#[test]
fn fix_outcomes_equal_the_truth() {
    let Scored { truth, report } = fleet();
    let got: BTreeMap<&str, (usize, usize, usize, usize)> = report
        .fix_outcomes
        .iter()
        .map(|f| {
            (
                f.code.as_str(),
                (f.n, f.ran_on, f.failed_same, f.failed_other),
            )
        })
        .collect();
    let want: BTreeMap<&str, (usize, usize, usize, usize)> = truth
        .fix_outcomes
        .iter()
        .map(|(c, f)| (c.as_str(), (f.n, f.ran_on, f.failed_same, f.failed_other)))
        .collect();
    assert_eq!(got, want);
    // The software errors come back; the hardware ones mostly do not.
    let same = |c: &str| want.get(c).map_or(0, |f| f.2);
    assert!(same("CUDA_OOM") + same("PYTHON_KEY_ERROR") + same("CUDA_ILLEGAL_ADDRESS") > 0);
}

#[test]
fn every_interruption_has_the_truths_cause_host_and_inputs() {
    let Scored { truth, report } = fleet();
    let jobs: BTreeMap<&str, _> = report.jobs.iter().map(|j| (&*j.job_id, j)).collect();
    let mut checked = 0;
    for tj in &truth.jobs {
        let rj = jobs.get(tj.job_id.as_str()).expect("every job reported");
        assert_eq!(rj.gpus, tj.gpus, "{}", tj.job_id);
        assert_eq!(
            rj.interruptions.len(),
            tj.interruptions.len(),
            "{}",
            tj.job_id
        );
        for (r, t) in rj.interruptions.iter().zip(&tj.interruptions) {
            assert_eq!(r.bucket, t.bucket, "{} at {}", tj.job_id, t.failure);
            assert_eq!(r.code.as_deref(), Some(t.code.as_str()));
            if t.bucket.blames_host() {
                assert_eq!(
                    r.host.as_deref(),
                    Some(t.host.as_str()),
                    "{} at {}",
                    tj.job_id,
                    t.failure
                );
            }
            let ms = |s: &str| faultline::time::parse(s).and_then(|x| x.millis());
            assert_eq!(Some(r.failure), ms(&t.failure));
            assert_eq!(r.last_checkpoint, t.last_checkpoint.as_deref().and_then(ms));
            checked += 1;
        }
    }
    assert_eq!(checked, truth.fleet.interruptions);
}

fn faultline() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_faultline"));
    cmd.current_dir(repo());
    cmd
}

#[test]
fn report_on_the_sample_logs_prints_the_table() {
    let out = faultline()
        .args(["report", "examples/"])
        .output()
        .expect("runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Interruptions by root cause"), "{text}");
    let total = text
        .lines()
        .find(|l| l.trim_start().starts_with("total"))
        .expect("a total row");
    let count: usize = total
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("a count");
    assert!(count >= 5, "{total}");
    // The Xid 79 of gpu-node-02's kernel log is a GPU row.
    assert!(
        text.lines().any(|l| l.trim_start().starts_with("GPU ")),
        "{text}"
    );
}

/// A small fleet for the command-line tests.
fn small_fleet(dir: &Path) -> Truth {
    let opts = FleetOptions {
        seed: 3,
        jobs: 40,
        days: 2,
        hosts: 64,
    };
    write_fleet(&opts, dir).expect("fleet written")
}

fn report_json(args: &[&str]) -> serde_json::Value {
    let out = faultline().arg("report").args(args).output().expect("runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

#[test]
fn from_json_gives_the_report_the_logs_give() {
    let dir = tempfile::tempdir().expect("tempdir");
    let truth = small_fleet(dir.path());
    let logs = dir.path().to_string_lossy().to_string();
    let scan = faultline()
        .args(["scan", "--progress-lines", "--format", "json", &logs])
        .output()
        .expect("runs");
    assert!(scan.status.success());
    let elsewhere = tempfile::tempdir().expect("tempdir");
    let scanned = elsewhere.path().join("scan.json");
    std::fs::write(&scanned, &scan.stdout).expect("written");
    let direct = report_json(&["--format", "json", &logs]);
    let via_json = report_json(&[
        "--format",
        "json",
        "--from-json",
        &scanned.to_string_lossy(),
    ]);
    assert_eq!(direct["fleet"], via_json["fleet"]);
    assert_eq!(direct["table"], via_json["table"]);
    assert_eq!(direct["fix_outcomes"], via_json["fix_outcomes"]);
    assert_eq!(direct["fleet"]["interruptions"], truth.fleet.interruptions);
    // The JSON shows each estimate's inputs.
    let first = &direct["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .find_map(|j| j["interruptions"].as_array()?.first().cloned())
        .expect("an interruption");
    for key in [
        "failure",
        "lost_from",
        "last_checkpoint",
        "restart_progress",
        "gpus",
        "gpu_hours_lost",
    ] {
        assert!(first.get(key).is_some(), "{key} missing: {first}");
    }
}

#[test]
fn since_and_until_keep_the_jobs_that_started_in_the_range() {
    let dir = tempfile::tempdir().expect("tempdir");
    let truth = small_fleet(dir.path());
    let logs = dir.path().to_string_lossy().to_string();
    let mut starts: Vec<&str> = truth.jobs.iter().map(|j| j.start.as_str()).collect();
    starts.sort_unstable();
    let cut = starts[starts.len() / 2];
    let early = report_json(&["--format", "json", "--until", cut, &logs]);
    let late = report_json(&["--format", "json", "--since", cut, &logs]);
    let n = |v: &serde_json::Value| v["fleet"]["jobs"].as_u64().expect("jobs");
    assert_eq!(n(&early) + n(&late), truth.jobs.len() as u64);
    assert_eq!(
        n(&early),
        starts.iter().filter(|s| **s < cut).count() as u64
    );
    let bad = faultline()
        .args(["report", "--since", "yesterday", &logs])
        .output()
        .expect("runs");
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--since"));
}

#[test]
fn markdown_prints_tables() {
    let dir = tempfile::tempdir().expect("tempdir");
    small_fleet(dir.path());
    let logs = dir.path().to_string_lossy().to_string();
    let out = faultline()
        .args(["report", "--format", "markdown", &logs])
        .output()
        .expect("runs");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("| root cause | interruptions | share | GPU-hours lost |"),
        "{text}"
    );
    assert!(text.contains("## Fix outcomes"), "{text}");
}

#[test]
fn prometheus_families_add_up_to_the_report() {
    let dir = tempfile::tempdir().expect("tempdir");
    let truth = small_fleet(dir.path());
    let logs = dir.path().to_string_lossy().to_string();
    let out = faultline()
        .args(["report", "--format", "prometheus", &logs])
        .output()
        .expect("runs");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let sum = |family: &str| -> f64 {
        text.lines()
            .filter(|l| l.starts_with(&format!("{family}{{")))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    assert_eq!(
        sum("faultline_interruptions_total") as usize,
        truth.fleet.interruptions
    );
    let (got, want) = (
        sum("faultline_gpu_hours_lost_total"),
        truth.fleet.gpu_hours_lost,
    );
    assert!((got - want).abs() <= 0.10 * want, "{got} vs {want}");
    assert!(text.contains("faultline_fleet_ettr_ratio "), "{text}");
    assert!(
        !text.contains("job_id") && !text.contains("host="),
        "no job or host labels"
    );
}

/// Training-progress lines (one per step of a healthy job) are matched only when asked for:
/// `scan` leaves them out by default, so they never flood the events; `--progress-lines`
/// (what `report --from-json` needs) keeps them.
#[test]
fn progress_lines_are_matched_only_when_asked_for() {
    let dir = tempfile::tempdir().expect("tmp");
    let log = dir.path().join("train.log");
    std::fs::write(
        &log,
        " iteration      100/   10000 | consumed samples:         3200 | elapsed time per \
         iteration (ms): 812.5 | learning rate: 1.500000E-04 | global batch size:    32 | lm \
         loss: 6.123456E+00 | loss scale: 65536.0 | number of skipped iterations:   0 | number \
         of nan iterations:   0 |\n",
    )
    .expect("written");
    let matches = |extra: &[&str]| -> usize {
        let out = faultline()
            .args(["scan", "--no-summary", "--format", "json"])
            .args(extra)
            .arg(&log)
            .output()
            .expect("runs");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.contains("\"kb_id\":\"progress/megatron-iteration\""))
            .count()
    };
    assert_eq!(matches(&[]), 0, "left out by default");
    assert_eq!(matches(&["--progress-lines"]), 1, "kept when asked for");
}
