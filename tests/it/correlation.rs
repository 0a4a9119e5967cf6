//! One failure, one incident, the right root: node events joined to the jobs they hit in
//! either order, one event per line, the job-level election, contributing roots, node
//! incidents, and `scan`'s incident-first text. Every log is written by the test.

use std::path::{Path, PathBuf};
use std::process::Command;

use faultline::incident::IncidentConfig;
use faultline::scan::ScanOptions;
use serde_json::Value;

use crate::support::{hyperscan, repo, scan_paths};

const T0: i64 = 1_733_000_000; // 2024-11-30T20:53:20Z

fn ts(sec: i64) -> String {
    faultline::time::rfc3339_from_unix_nanos(((T0 + sec) as u128) * 1_000_000_000)
}

/// A Vector-style envelope of one job line.
fn vector(job: Option<&str>, host: &str, rank: Option<u32>, sec: i64, message: &str) -> String {
    let mut v = serde_json::json!({ "timestamp": ts(sec), "host": host, "message": message });
    if let Some(j) = job {
        v["job_id"] = j.into();
    }
    if let Some(r) = rank {
        v["rank"] = r.into();
    }
    v.to_string()
}

/// A syslog line of `host`'s kernel log at `sec`: no year, no zone, as rsyslog writes it.
fn kernel(host: &str, sec: i64, message: &str) -> String {
    let stamp = faultline::time::rfc3339_from_unix_nanos(((T0 + sec) as u128) * 1_000_000_000);
    // 2024-11-30T20:53:25... -> "Nov 30 20:53:25"
    format!("Nov 30 {} {host} kernel: {message}", &stamp[11..19])
}

fn timeout(rank: u32, seq: u64) -> String {
    format!(
        "[rank{rank}]:[E1130 21:03:21.426415540 ProcessGroupNCCL.cpp:629] [Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600081 milliseconds before timing out."
    )
}

fn teardown(rank: u32, seq: u64) -> String {
    format!(
        "[rank{rank}]:[E1130 21:03:21.500000000 ProcessGroupNCCL.cpp:1785] [PG ID 0 PG GUID 0(default_pg) Rank {rank}] Exception (either an error or timeout) detected by watchdog at work: {seq}, last enqueued NCCL work: {seq}, last completed NCCL work: {}.",
        seq - 1
    )
}

const XID: &str =
    "[ 1898.771002] NVRM: Xid (PCI:0000:3b:00): 79, pid=48213, name=python, GPU has fallen off the bus.";

/// 16 ranks, 4 per host (`node-01`..`node-04`); rank 9 (on node-03) dies of `CUDA error:
/// unknown error` at second 6, the 15 others time out in all-reduce 812 ten minutes later.
fn job_lines(job: &str) -> Vec<String> {
    let host = |r: u32| format!("node-{:02}", r / 4 + 1);
    let mut lines: Vec<String> = (0..16)
        .map(|r| {
            vector(
                Some(job),
                &host(r),
                Some(r),
                1,
                &format!("step 100 loss 2.{r:02}"),
            )
        })
        .collect();
    lines.push(vector(
        Some(job),
        &host(9),
        Some(9),
        6,
        "RuntimeError: CUDA error: unknown error",
    ));
    for r in (0..16).filter(|r| *r != 9) {
        lines.push(vector(Some(job), &host(r), Some(r), 606, &timeout(r, 812)));
    }
    lines
}

fn write(dir: &Path, name: &str, lines: &[String]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, lines.join("\n") + "\n").expect("write");
    path
}

/// Scans `paths` in order with incidents on: (match events, final incident states).
fn scan(paths: &[&Path]) -> (Vec<Value>, Vec<Value>) {
    let opts = ScanOptions {
        incidents: Some(IncidentConfig::default()),
        ..ScanOptions::default()
    };
    let (_, bytes) = scan_paths(&hyperscan(), paths, &opts);
    let objects: Vec<Value> = String::from_utf8(bytes)
        .expect("utf8")
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON lines"))
        .collect();
    let of = |t: &str| objects.iter().filter(|o| o["type"] == t).cloned().collect();
    (of("match"), of("incident"))
}

#[test]
fn a_node_event_joins_the_job_it_killed_in_either_order() {
    let dir = tempfile::tempdir().expect("tmp");
    let job = write(dir.path(), "llm-9.jsonl", &job_lines("llm-9"));
    let node = write(
        dir.path(),
        "node-03.kern.log",
        &[
            kernel(
                "node-03",
                0,
                "[ 1898.004211] NVRM: GPU at PCI:0000:3b:00: GPU-5f1c2a9e",
            ),
            kernel("node-03", 5, XID),
        ],
    );
    let (_, node_first) = scan(&[&node, &job]);
    let (_, job_first) = scan(&[&job, &node]);
    for (order, incidents) in [("node first", &node_first), ("job first", &job_first)] {
        assert_eq!(
            incidents.len(),
            1,
            "{order}: one incident, no node incident: {incidents:#?}"
        );
        let i = &incidents[0];
        assert_eq!(i["job_id"], "llm-9", "{order}");
        assert_eq!(
            i["root"]["error_code"], "XID_79",
            "{order}: the node event is the root"
        );
        assert_eq!(i["root"]["host"], "node-03", "{order}");
        assert_eq!(i["root"]["gpu"], "0000:3b:00", "{order}");
        assert_eq!(i["root_known"], true, "{order}");
        assert!(
            i["culprit"]["ranks"]
                .as_array()
                .expect("ranks")
                .contains(&Value::from(9)),
            "{order}: rank 9 ran on node-03: {}",
            i["culprit"]
        );
        let consequences: Vec<&Value> = i["contributing"]
            .as_array()
            .expect("contributing")
            .iter()
            .filter(|c| c["consequence"] == true)
            .collect();
        assert_eq!(consequences.len(), 1, "{order}: {}", i["contributing"]);
        assert_eq!(consequences[0]["error_code"], "CUDA_UNKNOWN_ERROR");
        assert_eq!(i["cascades"]["op"], "ALLREDUCE", "{order}");
        assert_eq!(i["cascades"]["seq"], 812, "{order}");
        assert!(
            i["summary"]
                .as_str()
                .expect("summary")
                .contains("XID_79 on node-03"),
            "{order}: {}",
            i["summary"]
        );
    }
    assert_eq!(
        node_first[0]["fingerprint"], job_first[0]["fingerprint"],
        "the order of the streams does not change the incident"
    );
    assert_eq!(node_first[0]["root"], job_first[0]["root"]);
}

#[test]
fn a_node_event_far_from_the_jobs_errors_is_a_node_incident_without_a_ticket() {
    let dir = tempfile::tempdir().expect("tmp");
    let job = write(dir.path(), "llm-9.jsonl", &job_lines("llm-9"));
    // Two hours before the job's first error: not its cause.
    let node = write(
        dir.path(),
        "node-03.kern.log",
        &[kernel("node-03", -7200, XID)],
    );
    let (_, incidents) = scan(&[&node, &job]);
    assert_eq!(incidents.len(), 2, "{incidents:#?}");
    let node_incident = incidents
        .iter()
        .find(|i| i["job_id"] == "node:node-03")
        .expect("a node incident");
    assert_eq!(node_incident["root"]["error_code"], "XID_79");
    assert_eq!(
        node_incident["ticket"]["raised"], false,
        "node incidents do not page"
    );
    let job_incident = incidents
        .iter()
        .find(|i| i["job_id"] == "llm-9")
        .expect("the job's");
    assert_eq!(job_incident["root"]["error_code"], "CUDA_UNKNOWN_ERROR");
}

#[test]
fn a_host_with_no_job_gives_a_node_incident_and_json_lines_keep_their_host() {
    let dir = tempfile::tempdir().expect("tmp");
    // A shipper's envelope with a host and no job id: a node's event, not the file's job.
    let node = write(
        dir.path(),
        "fleet.jsonl",
        &[vector(None, "gpu-17", None, 5, &format!("kernel: {XID}"))],
    );
    let (matches, incidents) = scan(&[&node]);
    assert_eq!(matches.len(), 1, "{matches:#?}");
    assert_eq!(matches[0]["scope"], "node");
    assert_eq!(matches[0]["job_id"], "node:gpu-17", "not the file's name");
    assert_eq!(incidents.len(), 1);
    assert_eq!(incidents[0]["job_id"], "node:gpu-17");
    assert_eq!(incidents[0]["ticket"]["raised"], false);
}

#[test]
fn one_line_matched_by_two_entries_is_one_event() {
    let dir = tempfile::tempdir().expect("tmp");
    let line = "gpu-node-07:31337:31420 [3] NCCL WARN NET/IB : Got completion from peer 10.1.0.9<51234> with error 12, opcode 0, len 0, vendor err 129 (Recv) localGid ::ffff:10.1.0.7 remoteGid ::ffff:10.1.0.9";
    let path = write(dir.path(), "moe-1.log", &[line.to_string()]);
    let (matches, incidents) = scan(&[&path]);
    assert_eq!(matches.len(), 1, "one line, one event: {matches:#?}");
    assert_eq!(matches[0]["error_code"], "NCCL_IB_COMPLETION_ERROR");
    assert!(
        matches[0]["also"]
            .as_array()
            .expect("the entries that yielded")
            .contains(&Value::from("rdma/wc-retry-exceeded")),
        "{}",
        matches[0]["also"]
    );
    assert_eq!(matches[0]["host"], "gpu-node-07", "from NCCL's line prefix");
    assert_eq!(incidents.len(), 1);
}

#[test]
fn a_hang_without_a_root_is_headlined_by_the_timeout_naming_op_and_sequence() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut lines = Vec::new();
    for r in 0..8 {
        // The teardown line of each rank comes first: it must still not headline.
        lines.push(format!("{r}: {}", teardown(r, 4417)));
        lines.push(format!("{r}: {}", timeout(r, 4417)));
    }
    let path = write(dir.path(), "hang-3.log", &lines);
    let (_, incidents) = scan(&[&path]);
    assert_eq!(incidents.len(), 1, "{incidents:#?}");
    let i = &incidents[0];
    assert_eq!(i["root_known"], false, "nobody printed a root");
    assert_eq!(i["root"]["error_code"], "NCCL_TIMEOUT");
    assert_eq!(i["root"]["captures"]["op"], "ALLREDUCE");
    assert_eq!(i["root"]["captures"]["seq"], "4417");
    let summary = i["cascades"]["summary"].as_str().expect("cascade line");
    assert!(
        summary.contains("8 ranks timed out in ALLREDUCE SeqNum 4417 after 600 s"),
        "{summary}"
    );
    assert_eq!(
        i["counts"]["by_error_code"]["NCCL_WATCHDOG_TEARDOWN"], 8,
        "the teardown lines were matched and stood in the election"
    );
}

#[test]
fn several_roots_in_one_job_are_one_incident_with_the_others_contributing() {
    let dir = tempfile::tempdir().expect("tmp");
    let lines = vec![
        vector(
            Some("ft-2"),
            "n1",
            Some(3),
            10,
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity of 79.15 GiB of which 1.06 GiB is free.",
        ),
        vector(
            Some("ft-2"),
            "n2",
            Some(5),
            12,
            "ValueError: Expected input batch_size (8) to match target batch_size (4).",
        ),
    ];
    let path = write(dir.path(), "ft-2.jsonl", &lines);
    let (_, incidents) = scan(&[&path]);
    assert_eq!(incidents.len(), 1, "{incidents:#?}");
    let i = &incidents[0];
    assert_eq!(i["root"]["error_code"], "CUDA_OOM", "the earlier root");
    let contributing = i["contributing"].as_array().expect("contributing");
    assert_eq!(contributing.len(), 1, "{contributing:#?}");
    assert_eq!(contributing[0]["rank"], 5);
    assert_eq!(contributing[0]["consequence"], false);
}

/// `scan --format text` prints one block per failure and no per-line match; `--matches`
/// prints the matched lines too.
#[test]
fn text_output_is_incident_first() {
    let examples = repo().join("examples");
    let run = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_faultline"))
            .args(["scan", "--format", "text", "--no-summary"])
            .args(extra)
            .arg(&examples)
            .output()
            .expect("runs");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).expect("utf8")
    };
    let text = run(&[]);
    let blocks = text.lines().filter(|l| l.starts_with("== ")).count();
    assert_eq!(blocks, 7, "one block per failed job:\n{text}");
    assert!(text.contains("== XID_79 "), "{text}");
    assert!(text.contains("cascade: 15 ranks timed out in ALLREDUCE SeqNum 4417 after 600 s"));
    assert!(
        !text.contains("[CRITICAL]"),
        "no per-line match without --matches"
    );
    let with_matches = run(&["--matches"]);
    assert!(with_matches.contains("[CRITICAL] XID_79"), "{with_matches}");
}

/// The sample jobs: one incident per failed job, each with the headline a responder needs.
#[test]
fn the_examples_give_one_incident_per_failed_job() {
    let examples = repo().join("examples");
    let (_, incidents) = scan(&[&examples]);
    let mut heads: Vec<String> = incidents
        .iter()
        .map(|i| {
            format!(
                "{} {} host={} ranks={}",
                i["job_id"].as_str().unwrap_or("?"),
                i["root"]["error_code"].as_str().unwrap_or("?"),
                i["root"]["host"].as_str().unwrap_or("-"),
                i["culprit"]["ranks"]
            )
        })
        .collect();
    heads.sort();
    insta::assert_snapshot!("examples_incidents", heads.join("\n"));
    let jobs: std::collections::BTreeSet<&str> = incidents
        .iter()
        .filter_map(|i| i["job_id"].as_str())
        .collect();
    assert_eq!(
        jobs.len(),
        incidents.len(),
        "one incident per job: {heads:#?}"
    );
}

/// NCCL's start-up line of `rank` (of 32, 8 per host) on `host`, with NCCL's `host:pid:tid`
/// prefix.
fn nccl_init(host: &str, rank: u32) -> String {
    format!(
        "{host}:{}:{} [{}] NCCL INFO comm 0x55d0c8a0 rank {rank} nranks 32 cudaDev {} nvmlDev {} \
         busId 3b000 commId 0x7f3a - Init COMPLETE",
        4000 + rank,
        4100 + rank,
        rank % 8,
        rank % 8,
        rank % 8
    )
}

/// One attempt of job `job` on `hosts` (8 ranks each) from second `from`: every rank's start-up
/// line, then only rank 0's Megatron progress every 10 minutes until second `to`.
fn quiet_attempt(job: &str, hosts: &[&str], from: i64, to: i64) -> Vec<String> {
    let mut lines: Vec<String> = (0..32u32)
        .map(|r| {
            let host = hosts[(r / 8) as usize];
            vector(Some(job), host, Some(r), from, &nccl_init(host, r))
        })
        .collect();
    let mut t = from + 600;
    let mut step = 1;
    while t < to {
        lines.push(vector(
            Some(job),
            hosts[0],
            Some(0),
            t,
            &format!(
                " iteration {step:>8}/  100000 | consumed samples: {:>12} | elapsed time per \
                 iteration (ms): 812.5 | learning rate: 1.500000E-04 | global batch size:    32 \
                 | lm loss: 2.123456E+00 |",
                step * 32
            ),
        ));
        t += 600;
        step += 1;
    }
    lines
}

/// The job's collective timeouts at second `at` from ranks 0-7 (the first host): the other
/// hosts say nothing.
fn hang(job: &str, host: &str, at: i64, seq: u64) -> Vec<String> {
    (0..8)
        .map(|r| vector(Some(job), host, Some(r), at, &timeout(r, seq)))
        .collect()
}

/// `faultline scan --format json` (the shipped defaults: progress lines not matched) over
/// `lines` in one file: the final incident states.
fn scan_cli(lines: &[String]) -> Vec<Value> {
    let dir = tempfile::tempdir().expect("tmp");
    let path = write(dir.path(), "fleet.jsonl", lines);
    let out = Command::new(env!("CARGO_BIN_EXE_faultline"))
        .current_dir(repo())
        .env_remove("FAULTLINE_KB")
        .args(["scan", "--no-summary", "--format", "json"])
        .arg(&path)
        .output()
        .expect("runs");
    String::from_utf8(out.stdout)
        .expect("utf8")
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("JSON lines"))
        .filter(|o| o["type"] == "incident")
        .collect()
}

/// A node's own kernel line as its log shipper sends it: the host, no job.
fn node(host: &str, sec: i64, message: &str) -> String {
    vector(None, host, None, sec, &format!("kernel: {message}"))
}

const QUIET: [&str; 4] = ["gpu-a", "gpu-b", "gpu-c", "gpu-d"];
const HOUR: i64 = 3600;

/// Issue 30: a long job whose ranks on gpu-b..gpu-d print only their start-up lines, then five
/// hours of rank 0's progress on gpu-a; an Xid 79 on the quiet gpu-c, then the job's NCCL
/// timeouts ten minutes later. The host was learned from the start-up lines (matched in the
/// default scan, unlike the progress lines) and kept for the job's life: the Xid is the root of
/// the job's failure, not a node incident of its own.
#[test]
fn a_node_event_on_a_host_quiet_since_start_up_joins_the_jobs_failure() {
    for (what, node_line) in [
        ("Xid 79", node("gpu-c", 5 * HOUR, XID)),
        (
            "host OOM kill",
            node(
                "gpu-c",
                5 * HOUR,
                "[18211.661823] Out of memory: Killed process 48213 (python) total-vm:912334112kB, \
                 anon-rss:402348812kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:801224kB \
                 oom_score_adj:0",
            ),
        ),
    ] {
        let mut lines = quiet_attempt("pretrain-7", &QUIET, 0, 5 * HOUR);
        lines.push(node_line);
        lines.extend(hang("pretrain-7", "gpu-a", 5 * HOUR + 600, 90_211));
        let incidents = scan_cli(&lines);
        assert_eq!(incidents.len(), 1, "{what}: one incident: {incidents:#?}");
        let i = &incidents[0];
        assert_eq!(i["job_id"], "pretrain-7", "{what}");
        assert_eq!(i["root_known"], true, "{what}: {i:#}");
        assert_eq!(i["root"]["host"], "gpu-c", "{what}: {}", i["root"]);
    }
}

/// The other half: a restart under the same job id on other hosts (after Slurm's requeue)
/// replaces the job's hosts, so an Xid on a host of the first attempt, hours later, is not the
/// root of the second attempt's hang: it stays a node incident.
#[test]
fn a_restart_elsewhere_replaces_the_jobs_hosts() {
    let job = "pretrain-8";
    let mut lines = quiet_attempt(job, &QUIET, 0, 2 * HOUR);
    lines.push(vector(
        Some(job),
        "gpu-a",
        None,
        2 * HOUR,
        "slurmstepd: error: *** JOB 4821 ON gpu-a CANCELLED AT 2024-11-30T22:53:20 DUE TO JOB \
         REQUEUE ***",
    ));
    let moved = ["gpu-e", "gpu-f", "gpu-g", "gpu-h"];
    lines.extend(quiet_attempt(job, &moved, 2 * HOUR + 900, 7 * HOUR));
    lines.push(node("gpu-c", 7 * HOUR, XID));
    lines.extend(hang(job, "gpu-e", 7 * HOUR + 600, 51_002));
    let incidents = scan_cli(&lines);
    let of_job: Vec<&Value> = incidents.iter().filter(|i| i["job_id"] == job).collect();
    assert_eq!(of_job.len(), 1, "{incidents:#?}");
    assert_eq!(
        of_job[0]["root_known"], false,
        "gpu-c left the job at the restart: {:#}",
        of_job[0]["root"]
    );
    assert!(
        incidents
            .iter()
            .any(|i| i["job_id"] == "node:gpu-c" && i["root"]["error_code"] == "XID_79"),
        "the Xid is gpu-c's own incident: {incidents:#?}"
    );
}
