//! `scan` over the shipped examples (every envelope kind and launcher prefix), the output
//! contract, and bad input.

use std::io::Write;
use std::sync::Arc;

use faultline::engine::Engine;
use faultline::kb::KnowledgeBase;
use faultline::scan::ScanOptions;
use serde_json::Value;

use crate::support::{hyperscan, oracle, repo, scan_paths};

/// What the snapshot pins per match: where, which entry, and what was read from the line.
fn projection(events: &[faultline::enrich::MatchEvent]) -> Vec<Value> {
    events
        .iter()
        .map(|e| {
            serde_json::json!({
                "source": e.source.to_string().replace(&repo().display().to_string(), "."),
                "kb_id": e.kb_id, "error_code": e.error_code, "role": e.role,
                "job_id": e.job_id, "rank": e.rank, "host": e.host, "pod": e.pod,
                "timestamp": e.timestamp, "captures": e.captures,
            })
        })
        .collect()
}

#[test]
fn examples_snapshot() {
    let dir = repo().join("examples");
    let (events, _) = scan_paths(&hyperscan(), &[&dir], &ScanOptions::default());
    insta::assert_json_snapshot!("examples", projection(&events));
}

#[test]
fn every_envelope_and_prefix_kind_is_read() {
    let dir = repo().join("examples");
    let (events, _) = scan_paths(&hyperscan(), &[&dir], &ScanOptions::default());
    let by_file = |name: &'static str| {
        events
            .iter()
            .filter(move |e| e.source.to_string().contains(name))
    };
    // srun -l + [rankN]: the global rank wins.
    assert!(by_file("llama-pretrain-4821.log")
        .any(|e| e.rank == Some(11) && e.error_code == "CUDA_UNKNOWN_ERROR"));
    // torchrun --tee [default1]:
    assert!(by_file("bert-finetune-oom-77.log")
        .any(|e| e.rank == Some(1) && e.error_code == "CUDA_OOM"));
    // mpirun [1,3]<stderr>:
    assert!(by_file("gpt-neox-mpirun-55.log").any(|e| e.rank == Some(3)));
    // docker json-file: timestamp from the envelope.
    assert!(by_file("docker.jsonl")
        .any(|e| e.timestamp.as_deref() == Some("2024-11-29T11:00:03.120000000Z")));
    // CRI: timestamp from the prefix, rank from [rank2]:.
    assert!(by_file("cri.log")
        .any(|e| e.rank == Some(2)
            && e.timestamp.as_deref() == Some("2024-11-29T11:00:03.120000000Z")));
    // Vector: job, rank, host and pod from fields.
    assert!(by_file("vector.jsonl").any(|e| e.job_id == "moe-sft-991"
        && e.rank == Some(27)
        && e.pod.as_deref() == Some("moe-sft-991-worker-3")));
    // Fluent Bit: job from the Kubeflow label, host from kubernetes.host.
    assert!(by_file("fluentbit.jsonl")
        .any(|e| e.job_id == "moe-sft-991" && e.host.as_deref() == Some("gpu-node-07")));
    // OTLP JSON: job and host from resource attributes, time from timeUnixNano.
    assert!(by_file("otlp.json")
        .any(|e| e.job_id == "7311" && e.host.as_deref() == Some("gpu-node-12")));
}

#[test]
fn hyperscan_agrees_with_the_oracle_on_the_examples() {
    let dir = repo().join("examples");
    let (a, _) = scan_paths(&hyperscan(), &[&dir], &ScanOptions::default());
    let (b, _) = scan_paths(&oracle(), &[&dir], &ScanOptions::default());
    assert!(!a.is_empty());
    assert_eq!(projection(&a), projection(&b));
}

/// A KB with fixed content, so the whole event (diagnosis included) can be pinned.
fn fixed_engine() -> Engine {
    let text = r#"id = "cuda/demo-oom"
title = "Demo OOM"
domain = "cuda"
category = "device_oom"
error_code = "DEMO_OOM"
aliases = ["OLD_DEMO"]
role = "root"
severity = "error"
verification = "ai_generated"
patterns_verified = "unverified"
fix_rate = 0.5
root_cause = "The demo ran out of memory."
patterns = ['CUDA out of memory\. Tried to allocate (?P<size>[0-9.]+ [KMG]iB)']
examples = ["CUDA out of memory. Tried to allocate 2.00 GiB"]
negative_examples = ["CUDA memory is fine"]
references = ["c10/cuda/CUDACachingAllocator.cpp"]

[[versions]]
component = "torch"
range = ">=2.0"
status = "active"

[[workarounds]]
text = "Lower the batch size."

[[workarounds]]
text = "Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True."
command = "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
success_rate = 0.7
n = 41
source = "a fleet's restart outcomes, 2026-10"

[[dead_ends]]
action = "torch.cuda.empty_cache() in the loop"
why = "It returns cached blocks but frees nothing in use."
fail_rate = 0.9
"#;
    let kb = KnowledgeBase::from_files(vec![("cuda/demo-oom.toml".into(), text.into())], "fixed")
        .expect("valid");
    Engine::new(kb).expect("compiles")
}

#[test]
fn output_contract_schema_version_1() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("job-42.log");
    std::fs::write(
        &path,
        "ok\n[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n",
    )
    .expect("write");
    let (_, bytes) = scan_paths(&fixed_engine(), &[&path], &ScanOptions::default());
    let text = String::from_utf8(bytes).expect("utf8");
    let text = text.replace(&dir.path().display().to_string(), "<tmp>");
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is JSON"))
        .collect();
    insta::assert_json_snapshot!("contract", lines, { "[].kb_version" => "[kb_version]" });
    // Workarounds keep the author's order; a rate is carried only with its sample.
    let w = &lines[0]["diagnosis"]["workarounds"];
    assert_eq!(w[0]["text"], "Lower the batch size.");
    assert_eq!(w[0]["success_rate"], Value::Null);
    assert_eq!(w[1]["success_rate"], 0.7);
    assert_eq!(w[1]["n"], 41);
    assert_eq!(w[1]["rate_kind"], "community_reported");
    let dead = &lines[0]["diagnosis"]["dead_ends"][0];
    assert!(
        dead.get("fail_rate").is_none(),
        "an unsampled rate is never shown: {dead}"
    );
}

/// A 1,024-rank NCCL timeout cascade: one rank's CUDA error, then every rank's watchdog line.
fn cascade_log(ranks: u32) -> String {
    let mut log = String::from(
        "[rank17]:[E1129 02:07:11.000001 ProcessGroupNCCL.cpp:1430] [Rank 17] Process group \
         watchdog thread terminated with exception: CUDA error: an illegal memory access was \
         encountered\n",
    );
    for r in 0..ranks {
        log.push_str(&format!(
            "[rank{r}]:[E1129 02:17:{:02}.{r:06} ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog \
             caught collective operation timeout: WorkNCCL(SeqNum=88213, OpType=ALLREDUCE, \
             NumelIn=262144, NumelOut=262144, Timeout(ms)=600000) ran for 600041 milliseconds \
             before timing out.\n",
            11 + r % 40
        ));
    }
    log
}

#[test]
fn events_carry_the_diagnosis_by_reference_and_the_incident_carries_it_whole() {
    use faultline::enrich::Detail;
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("job-1024.log");
    std::fs::write(&path, cascade_log(1024)).expect("write");
    let engine = hyperscan();
    let run = |diagnosis| {
        let opts = ScanOptions {
            diagnosis,
            summary: false,
            unknown: None,
            incidents: Some(faultline::incident::IncidentConfig::default()),
            ..ScanOptions::default()
        };
        let (_, bytes) = scan_paths(&engine, &[&path], &opts);
        let text = String::from_utf8(bytes).expect("utf8");
        let (matches, others): (Vec<&str>, Vec<&str>) = text
            .lines()
            .partition(|l| l.starts_with(r#"{"type":"match""#));
        (matches.join("\n"), others.join("\n"))
    };
    let (full, full_incidents) = run(Detail::Full);
    let (lean, lean_incidents) = run(Detail::Reference);
    assert_eq!(full.lines().count(), 1025, "one event per line, either way");
    assert_eq!(lean.lines().count(), 1025);
    // The incident carries the whole diagnosis whatever the events carry.
    assert_eq!(full_incidents, lean_incidents);
    let incident: Value =
        serde_json::from_str(lean_incidents.lines().next().expect("an incident")).expect("JSON");
    assert!(!incident["diagnosis"]["root_cause"]
        .as_str()
        .unwrap_or("")
        .is_empty());
    assert!(incident["diagnosis"]["workarounds"].is_array());
    // Each lean event keeps the headline and says where the rest is.
    for (f, l) in full.lines().zip(lean.lines()) {
        let (f, l): (Value, Value) = (
            serde_json::from_str(f).expect("JSON"),
            serde_json::from_str(l).expect("JSON"),
        );
        assert_eq!(l["diagnosis"]["title"], f["diagnosis"]["title"]);
        assert_eq!(l["diagnosis"].as_object().map(|d| d.len()), Some(1), "{l}");
        assert!(f["diagnosis"]["root_cause"].is_string(), "{f}");
        assert_eq!(
            (&l["kb_id"], &l["kb_version"]),
            (&f["kb_id"], &f["kb_version"])
        );
        assert_eq!((&l["line"], &l["captures"]), (&f["line"], &f["captures"]));
    }
    // Issue 28's goal: a 1,024-rank cascade's events at least ten times leaner.
    let (before, after) = (
        full.len() + full_incidents.len(),
        lean.len() + lean_incidents.len(),
    );
    assert!(
        before >= 10 * after,
        "events and incident: {before} bytes with the whole diagnosis, {after} by reference"
    );
}

#[test]
fn bad_input_is_handled_with_bounded_memory() {
    let dir = tempfile::tempdir().expect("tmp");
    let hit = b"CUDA out of memory. Tried to allocate 1.00 GiB\n";
    // Invalid UTF-8 around a hit.
    let mut invalid = b"\xff\xfe garbage \xc3\x28\n".to_vec();
    invalid.extend(b"\xff");
    invalid.extend(hit);
    std::fs::write(dir.path().join("invalid.log"), &invalid).expect("write");
    // Binary garbage with NULs, then a hit.
    let mut binary: Vec<u8> = (0..200_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    binary.push(b'\n');
    binary.extend(hit);
    std::fs::write(dir.path().join("binary.log"), &binary).expect("write");
    // A 10 MB line holding a hit near its start, then a normal hit.
    let mut long = b"prefix ".to_vec();
    long.extend(&hit[..hit.len() - 1]);
    long.extend(std::iter::repeat_n(b'x', 10 << 20));
    long.push(b'\n');
    long.extend(hit);
    std::fs::write(dir.path().join("long.log"), &long).expect("write");
    // Empty file, and only empty lines.
    std::fs::write(dir.path().join("empty.log"), b"").expect("write");
    std::fs::write(dir.path().join("blank.log"), b"\n\n\r\n").expect("write");

    let opts = ScanOptions {
        max_line_bytes: 1 << 20,
        ..ScanOptions::default()
    };
    let (events, _) = scan_paths(&fixed_engine(), &[dir.path()], &opts);
    let of = |name: &str| {
        events
            .iter()
            .filter(|e| e.source.to_string().contains(name))
            .collect::<Vec<_>>()
    };
    let invalid_hits = of("invalid.log");
    assert_eq!(invalid_hits.len(), 1);
    assert!(
        invalid_hits[0].line.starts_with('\u{fffd}'),
        "invalid bytes replaced: {:?}",
        invalid_hits[0].line
    );
    assert_eq!(of("binary.log").len(), 1);
    let long_hits = of("long.log");
    assert_eq!(
        long_hits.len(),
        2,
        "the cut line still matches at its head, and the next line too"
    );
    assert!(long_hits[0].truncated);
    assert!(long_hits[0].line.len() <= faultline::enrich::MAX_EVENT_LINE_BYTES);
    assert_eq!(
        long_hits[1].source.to_string(),
        format!("{}:2", dir.path().join("long.log").display())
    );
    assert!(!long_hits[1].truncated);
    assert!(of("empty.log").is_empty() && of("blank.log").is_empty());
}

#[test]
fn compressed_inputs_are_read() {
    let dir = tempfile::tempdir().expect("tmp");
    let text = b"noise\nCUDA out of memory. Tried to allocate 3.00 MiB\n";
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(text).expect("gz");
    std::fs::write(dir.path().join("a.log.gz"), gz.finish().expect("gz")).expect("write");
    std::fs::write(
        dir.path().join("b.log.zst"),
        zstd::encode_all(&text[..], 1).expect("zstd"),
    )
    .expect("write");
    let (events, _) = scan_paths(&fixed_engine(), &[dir.path()], &ScanOptions::default());
    assert_eq!(events.len(), 2);
    assert!(events.iter().all(|e| e.job_id == "a" || e.job_id == "b"));
    assert!(events
        .iter()
        .all(|e| e.captures.get("size").map(String::as_str) == Some("3.00 MiB")));
}

#[test]
fn small_chunks_give_the_same_matches_as_large_ones() {
    let dir = repo().join("examples");
    let engine = hyperscan();
    let (big, _) = scan_paths(&engine, &[&dir], &ScanOptions::default());
    let small = ScanOptions {
        chunk_bytes: 4096,
        max_line_bytes: 4096,
        ..ScanOptions::default()
    };
    let (tiny, _) = scan_paths(&engine, &[&dir], &small);
    assert_eq!(projection(&big), projection(&tiny));
}

#[test]
fn engine_is_shareable_across_threads() {
    let engine = Arc::new(hyperscan());
    let handles: Vec<_> = (0..2)
        .map(|_| {
            let engine = Arc::clone(&engine);
            std::thread::spawn(move || {
                crate::support::events_of_line(&engine, "RuntimeError: CUDA error: unknown error")
                    .len()
            })
        })
        .collect();
    for h in handles {
        assert!(h.join().expect("thread") >= 1);
    }
}

#[test]
fn parallel_scan_output_is_identical_to_sequential() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("corpus.log");
    let mut corpus = Vec::new();
    let kb = crate::support::kb();
    faultline::bench::write_corpus(&kb, &[], 3 << 20, 0.01, 11, &mut corpus).expect("corpus");
    std::fs::write(&path, &corpus).expect("write");
    let examples = repo().join("examples");
    let engine = hyperscan();
    let sequential = ScanOptions {
        chunk_bytes: 64 << 10,
        ..ScanOptions::default()
    };
    let (a, out_a) = scan_paths(&engine, &[&path, &examples], &sequential);
    for threads in [2, 4] {
        let parallel = ScanOptions {
            threads,
            ..sequential.clone()
        };
        let (b, out_b) = scan_paths(&engine, &[&path, &examples], &parallel);
        assert_eq!(a.len(), b.len());
        assert!(a.len() > 300, "the corpus has KB examples");
        assert_eq!(out_a, out_b, "{threads} threads: byte-identical output");
    }
}
