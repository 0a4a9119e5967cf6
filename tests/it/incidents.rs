//! Incidents end to end: generated job logs (real KB wordings) through `scan` with the shipped
//! KB, and the real captures. The logs are written by the tests; nothing big is committed.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use faultline::incident::fingerprint::{fp1, FingerprintInput};
use faultline::incident::IncidentConfig;
use faultline::scan::ScanOptions;
use serde_json::Value;

use crate::support::{hyperscan, repo, scan_paths};

const T0: i64 = 1_733_000_000; // 2024-11-30T20:53:20Z

fn ts(sec: i64) -> String {
    faultline::time::rfc3339_from_unix_nanos(((T0 + sec) as u128) * 1_000_000_000)
}

/// A Vector-style JSON envelope line.
pub(crate) fn vector(job: &str, host: &str, rank: Option<u32>, sec: i64, message: &str) -> String {
    let mut v = serde_json::json!({
        "timestamp": ts(sec), "host": host, "job_id": job, "message": message,
    });
    if let Some(r) = rank {
        v["rank"] = r.into();
    }
    v.to_string()
}

pub(crate) fn host_of(rank: u32) -> String {
    format!("node-{:02}", rank / 4 + 1)
}

pub(crate) fn watchdog_timeout(rank: u32, seq: u64) -> String {
    format!(
        "[rank{rank}]:[E1130 21:03:21.426415540 ProcessGroupNCCL.cpp:629] [Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600081 milliseconds before timing out."
    )
}

fn work_status(rank: u32, seq: u64, enqueued: u64, completed: u64) -> String {
    format!(
        "[rank{rank}]:[E1130 21:03:21.833621509 ProcessGroupNCCL.cpp:1709] [PG 0 (default_pg) Rank {rank}] Timeout at NCCL work: {seq}, last enqueued NCCL work: {enqueued}, last completed NCCL work: {completed}."
    )
}

pub(crate) const XID_79: &str =
    "kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=48213, name=python, GPU has fallen off the bus.";

pub(crate) const OOM: &str = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity of 79.15 GiB of which 1.06 GiB is free. Including non-PyTorch memory, this process has 78.08 GiB memory in use. Of the allocated memory 74.52 GiB is allocated by PyTorch, and 2.05 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)";

/// Healthy chatter that must not change anything.
pub(crate) fn noise(rank: u32, step: u32) -> String {
    format!("[rank{rank}]: step {step} | loss 2.{step:03} | lr 3.0e-04 | grad_norm 0.91 | tokens/s 41234")
}

/// Scans `text` as one file named `name`, with incidents on; returns the incident objects.
pub(crate) fn incidents_of(name: &str, text: &str) -> Vec<Value> {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join(name);
    std::fs::write(&path, text).expect("write");
    incidents_of_path(&path)
}

fn incidents_of_path(path: &Path) -> Vec<Value> {
    incidents_with(path, 1)
}

fn incidents_with(path: &Path, threads: usize) -> Vec<Value> {
    let opts = ScanOptions {
        incidents: Some(IncidentConfig::default()),
        threads,
        chunk_bytes: 4096,
        ..ScanOptions::default()
    };
    let (_, bytes) = scan_paths(&hyperscan(), &[path], &opts);
    String::from_utf8(bytes)
        .expect("utf8")
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("JSON lines"))
        .filter(|v| v["type"] == "incident")
        .collect()
}

fn ranks(v: &Value) -> Vec<u64> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|r| r.as_u64().expect("rank"))
        .collect()
}

/// 64 ranks; rank 17 on node-05 loses its GPU (Xid 79 in node-05's kernel log); ten minutes
/// later the 63 others time out in the all-reduce rank 17 never joins.
pub(crate) fn xid_job(job: &str, t: i64) -> Vec<String> {
    xid_job_hanging(job, t, 600)
}

/// [`xid_job`] with the timeouts printed `hang` seconds after the Xid (their text still says
/// 600 s: a test with a quiet period of seconds compresses the log's time, not the story).
pub(crate) fn xid_job_hanging(job: &str, t: i64, hang: i64) -> Vec<String> {
    let mut lines = Vec::new();
    for step in 0..3 {
        for r in 0..64 {
            lines.push(vector(
                job,
                &host_of(r),
                Some(r),
                t + step,
                &noise(r, step as u32),
            ));
        }
    }
    lines.push(vector(job, "node-05", None, t + 5, XID_79));
    for r in (0..64).filter(|r| *r != 17) {
        lines.push(vector(
            job,
            &host_of(r),
            Some(r),
            t + 5 + hang + i64::from(r % 3),
            &watchdog_timeout(r, 4711),
        ));
    }
    lines
}

#[test]
fn xid_79_on_one_rank_is_one_incident_with_63_cascades() {
    let text = xid_job("llm-pretrain-7", 0).join("\n") + "\n";
    let incidents = incidents_of("fleet.jsonl", &text);
    assert_eq!(incidents.len(), 1, "{incidents:#?}");
    let i = &incidents[0];
    assert_eq!(i["schema_version"], 1);
    assert_eq!(i["job_id"], "llm-pretrain-7");
    assert_eq!(i["root_known"], true);
    assert_eq!(i["root"]["error_code"], "XID_79");
    assert_eq!(i["root"]["host"], "node-05");
    assert_eq!(i["root"]["gpu"], "0000:3b:00");
    assert_eq!(ranks(&i["culprit"]["ranks"]), vec![17]);
    assert_eq!(i["culprit"]["hosts"], serde_json::json!(["node-05"]));
    assert_eq!(i["culprit"]["method"], "root_host");
    assert_eq!(i["culprit"]["rank_method"], "missing_ranks");
    assert_eq!(i["cascades"]["matches"], 63);
    assert_eq!(i["cascades"]["ranks"], 63);
    assert_eq!(i["cascades"]["by_error_code"]["NCCL_TIMEOUT"], 63);
    assert_eq!(i["counts"]["matches"], 64);
    assert_eq!(i["grouping_info"]["rule"], "role");
    assert_eq!(i["ticket"]["raised"], true);
    assert_eq!(i["ticket"]["reason"], "root");
    assert_eq!(i["fingerprint_version"], "fp2");
    assert!(i["fingerprint"].as_str().expect("fp").starts_with("fp2:"));
    assert_eq!(
        i["signature"],
        fp1(&FingerprintInput {
            job_id: "llm-pretrain-7",
            error_code: "XID_79",
            host: Some("node-05"),
            gpu: Some("0000:3b:00"),
        })
    );
    assert_eq!(i["first_seen"], "2024-11-30T20:53:25.000Z");
    assert_eq!(i["blamed_host"], "node-05");
    assert_eq!(
        i["diagnosis"]["title"].as_str().map(str::is_empty),
        Some(false)
    );
}

#[test]
fn cuda_oom_on_one_rank_carries_its_traceback() {
    let mut text = String::new();
    for r in 0..8 {
        writeln!(text, "{}", noise(r, 1)).expect("write");
    }
    for line in [
        "[rank3]: Traceback (most recent call last):",
        "[rank3]:   File \"/app/train.py\", line 212, in <module>",
        "[rank3]:     main()",
        "[rank3]:   File \"/app/train.py\", line 188, in main",
        "[rank3]:     loss = model(batch).loss",
        "[rank3]:            ^^^^^^^^^^^^",
        "[rank3]:   File \"/app/model.py\", line 97, in forward",
        "[rank3]:     attn = torch.softmax(scores, dim=-1)",
    ] {
        writeln!(text, "{line}").expect("write");
    }
    writeln!(text, "[rank3]: {OOM}").expect("write");
    for r in (0..8).filter(|r| *r != 3) {
        writeln!(text, "{}", watchdog_timeout(r, 902)).expect("write");
    }
    let incidents = incidents_of("bert-oom-12.log", &text);
    assert_eq!(incidents.len(), 1, "{incidents:#?}");
    let i = &incidents[0];
    assert_eq!(i["root"]["error_code"], "CUDA_OOM");
    assert_eq!(i["root"]["rank"], 3);
    assert_eq!(i["culprit"]["method"], "root_event");
    assert_eq!(ranks(&i["culprit"]["ranks"]), vec![3]);
    assert_eq!(i["cascades"]["matches"], 7);
    let context: Vec<&str> = i["context"]["lines"]
        .as_array()
        .expect("lines")
        .iter()
        .map(|l| l["text"].as_str().expect("text"))
        .collect();
    assert_eq!(context.first(), Some(&"Traceback (most recent call last):"));
    assert!(context
        .iter()
        .any(|l| l.contains("/app/model.py\", line 97")));
    assert!(context.iter().any(|l| l.trim() == "^^^^^^^^^^^^"));
    assert!(context
        .last()
        .is_some_and(|l| l.starts_with("torch.OutOfMemoryError")));
    assert!(
        !context.iter().any(|l| l.contains("Watchdog")),
        "other ranks stay out"
    );
    assert_eq!(i["context"]["truncated"], false);
}

#[test]
fn an_nccl_timeout_without_root_names_the_lagging_rank() {
    let mut lines = Vec::new();
    for r in 0..8 {
        lines.push(vector("rl-sweep-3", &host_of(r), Some(r), 0, &noise(r, 9)));
    }
    for r in 0..8u32 {
        let (seq, enq, comp) = if r == 5 {
            (117, 117, 116)
        } else {
            (120, 120, 119)
        };
        lines.push(vector(
            "rl-sweep-3",
            &host_of(r),
            Some(r),
            1800,
            &watchdog_timeout(r, seq),
        ));
        lines.push(vector(
            "rl-sweep-3",
            &host_of(r),
            Some(r),
            1800,
            &work_status(r, seq, enq, comp),
        ));
    }
    let incidents = incidents_of("rl.jsonl", &(lines.join("\n") + "\n"));
    assert_eq!(incidents.len(), 1, "{incidents:#?}");
    let i = &incidents[0];
    assert_eq!(i["root_known"], false, "root unknown");
    assert_eq!(i["culprit"]["method"], "sequence_lag");
    assert_eq!(ranks(&i["culprit"]["ranks"]), vec![5]);
    assert_eq!(i["culprit"]["hosts"], serde_json::json!(["node-02"]));
    assert_eq!(i["culprit"]["evidence"]["max_completed"], 119);
    // Without a root, the signature has no host or GPU.
    assert_eq!(
        i["signature"],
        fp1(&FingerprintInput {
            job_id: "rl-sweep-3",
            error_code: i["root"]["error_code"].as_str().expect("code"),
            host: None,
            gpu: None,
        })
    );
    assert_eq!(
        i["ticket"]["reason"],
        Value::Null,
        "16 matches: below the threshold"
    );
}

#[test]
fn two_interleaved_jobs_make_two_incidents() {
    let a = xid_job("job-a", 0);
    let mut b = Vec::new();
    for r in 0..4 {
        b.push(vector("job-b", "gpu-b1", Some(r), 3, &noise(r, 7)));
    }
    b.push(vector(
        "job-b",
        "gpu-b1",
        Some(1),
        4,
        &format!("[rank1]: {OOM}"),
    ));
    for r in [0, 2, 3] {
        b.push(vector(
            "job-b",
            "gpu-b1",
            Some(r),
            604,
            &watchdog_timeout(r, 55),
        ));
    }
    // Interleave: one line of b after every 20 lines of a.
    let mut lines = Vec::new();
    let mut bi = b.into_iter();
    for (n, line) in a.into_iter().enumerate() {
        lines.push(line);
        if n % 20 == 19 {
            lines.extend(bi.next());
        }
    }
    lines.extend(bi);
    let incidents = incidents_of("mixed.jsonl", &(lines.join("\n") + "\n"));
    assert_eq!(incidents.len(), 2, "{incidents:#?}");
    let by_job = |job: &str| {
        incidents
            .iter()
            .find(|i| i["job_id"] == job)
            .unwrap_or_else(|| panic!("incident of {job}"))
    };
    let (ia, ib) = (by_job("job-a"), by_job("job-b"));
    assert_eq!(ia["root"]["error_code"], "XID_79");
    assert_eq!(ia["cascades"]["matches"], 63);
    assert_eq!(ranks(&ia["culprit"]["ranks"]), vec![17]);
    assert_eq!(ib["root"]["error_code"], "CUDA_OOM");
    assert_eq!(ib["cascades"]["matches"], 3);
    assert_eq!(ranks(&ib["culprit"]["ranks"]), vec![1]);
    assert_ne!(ia["fingerprint"], ib["fingerprint"]);
}

#[test]
fn the_same_root_after_each_restart_is_a_restart_loop() {
    let mut lines = Vec::new();
    for attempt in 0..3i64 {
        let t = attempt * 300;
        for r in 0..4 {
            lines.push(vector("ft-loop-9", &host_of(r), Some(r), t, &noise(r, 1)));
        }
        lines.push(vector(
            "ft-loop-9",
            "node-01",
            Some(2),
            t + 10,
            "[rank2]: RuntimeError: CUDA error: an illegal memory access was encountered",
        ));
        lines.push(vector(
            "ft-loop-9",
            "node-01",
            None,
            t + 12,
            "[2024-11-30 21:00:00,101] torch.distributed.elastic.agent.server.api: [WARNING] [default] Worker group FAILED. 3/3 attempts left; will restart worker group",
        ));
    }
    let incidents = incidents_of("loop.jsonl", &(lines.join("\n") + "\n"));
    assert_eq!(incidents.len(), 3, "{incidents:#?}");
    // Three failures (three tickets), one signature: the same root three times.
    let fps: std::collections::BTreeSet<&str> = incidents
        .iter()
        .filter_map(|i| i["fingerprint"].as_str())
        .collect();
    assert_eq!(fps.len(), 3, "one fingerprint per attempt: {fps:?}");
    let sigs: Vec<&Value> = incidents.iter().map(|i| &i["signature"]).collect();
    assert!(sigs.iter().all(|f| *f == sigs[0]), "one root, three times");
    let rec: Vec<u64> = incidents
        .iter()
        .map(|i| i["recurrence"].as_u64().expect("n"))
        .collect();
    assert_eq!(rec, vec![1, 2, 3]);
    let looping: Vec<bool> = incidents
        .iter()
        .map(|i| i["restart_loop"].as_bool().expect("bool"))
        .collect();
    assert_eq!(looping, vec![false, true, true]);
    assert!(incidents
        .iter()
        .all(|i| i["root"]["error_code"] == "CUDA_ILLEGAL_ADDRESS"));
    assert!(incidents[..2].iter().all(|i| i["resolution"] == "restart"));
}

#[test]
fn a_host_that_fails_several_jobs_scores_higher() {
    let mut lines = Vec::new();
    for (n, job) in ["j1", "j2", "j3"].iter().enumerate() {
        lines.extend(xid_job(job, n as i64 * 3600));
    }
    let incidents = incidents_of("three.jsonl", &(lines.join("\n") + "\n"));
    let scores: Vec<f64> = incidents
        .iter()
        .map(|i| i["bad_node_score"].as_f64().expect("score"))
        .collect();
    assert_eq!(scores.len(), 3);
    assert!(scores[0] < scores[1] && scores[1] < scores[2], "{scores:?}");
}

/// The real torchrun capture: rank 1 slept, rank 0's watchdog fired. torchrun's "Root Cause"
/// row names rank 0 (the first process to exit); the NCCL counters name rank 1.
#[test]
fn the_real_torchrun_timeout_names_the_rank_that_never_enqueued() {
    let path = repo().join("tests/fixtures/captured/torchrun_nccl_watchdog_timeout.log");
    let incidents = incidents_of_path(&path);
    assert_eq!(incidents.len(), 1, "{incidents:#?}");
    let i = &incidents[0];
    assert_eq!(i["root_known"], false);
    assert_eq!(i["culprit"]["method"], "sequence_lag");
    assert_eq!(ranks(&i["culprit"]["ranks"]), vec![1]);
    assert_eq!(i["culprit"]["evidence"]["torchelastic_root_cause"], 0);
    assert!(i["context"]["lines"]
        .as_array()
        .expect("lines")
        .iter()
        .any(|l| l["text"] == "Root Cause (first observed failure):"));
}

#[test]
fn incidents_do_not_depend_on_the_number_of_threads() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("mixed.jsonl");
    let mut lines = xid_job("a", 0);
    lines.extend(xid_job("b", 60));
    std::fs::write(&path, lines.join("\n") + "\n").expect("write");
    let one = incidents_with(&path, 1);
    assert_eq!(one.len(), 2);
    assert_eq!(one, incidents_with(&path, 4));
}

#[test]
fn chained_python_exceptions_stay_one_context_block() {
    let path = repo().join("tests/fixtures/captured/py_chained_cause.log");
    let incidents = incidents_of_path(&path);
    assert_eq!(incidents.len(), 1);
    let lines: Vec<String> = incidents[0]["context"]["lines"]
        .as_array()
        .expect("lines")
        .iter()
        .map(|l| l["text"].as_str().expect("text").to_string())
        .collect();
    assert_eq!(lines[0], "Traceback (most recent call last):");
    assert!(lines
        .iter()
        .any(|l| l.starts_with("The above exception was")));
    assert!(lines
        .last()
        .is_some_and(|l| l.starts_with("ValueError: invalid learning rate")));
}

#[test]
fn scan_prints_incidents_between_matches_and_summaries() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("fleet.jsonl");
    std::fs::write(&path, xid_job("llm-pretrain-7", 0).join("\n") + "\n").expect("write");
    let run = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_faultline"))
            .current_dir(repo())
            .env_remove("FAULTLINE_KB")
            .arg("scan")
            .args(extra)
            .arg(&path)
            .output()
            .expect("runs");
        assert_eq!(out.status.code(), Some(0));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let types: Vec<String> = run(&[])
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).expect("JSON")["type"]
                .as_str()
                .expect("type")
                .to_string()
        })
        .collect();
    let first_incident = types
        .iter()
        .position(|t| t == "incident")
        .expect("incident");
    let last_match = types.iter().rposition(|t| t == "match").expect("matches");
    let first_summary = types.iter().position(|t| t == "summary").expect("summary");
    assert!(last_match < first_incident && first_incident < first_summary);
    assert_eq!(types.iter().filter(|t| *t == "incident").count(), 1);
    assert!(!run(&["--no-incidents"]).contains("\"type\":\"incident\""));
    let text = run(&["--format", "text"]);
    assert!(
        text.contains("== XID_79 ")
            && text.contains("host node-05 · GPU 0000:3b:00 · rank 17")
            && text.contains("cascade: 63 ranks timed out in ALLREDUCE SeqNum 4711"),
        "{text}"
    );
    // A window of one second splits the Xid from its cascade.
    let split = run(&["--incident-window", "1s", "--incident-quiet", "1s"]);
    assert!(split.matches("\"type\":\"incident\"").count() > 1);
}
