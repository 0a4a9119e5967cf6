//! The shipped KB is sound in both engines, documented, and the seed imports.

use std::fs;

use faultline::kb::{self, KnowledgeBase};
use faultline::kbtool::{check, import};

use crate::support::{kb, repo, shared};

#[test]
fn shipped_kb_passes_kb_check_in_both_engines() {
    let files = kb::read_dir(&repo().join("kb")).expect("kb/ readable");
    let report = check::check(files, "kb");
    let errors: Vec<String> = report.errors.iter().map(ToString::to_string).collect();
    assert!(errors.is_empty(), "kb check errors:\n{}", errors.join("\n"));
    let warnings: Vec<String> = report.warnings.iter().map(ToString::to_string).collect();
    assert!(
        warnings.is_empty(),
        "kb check warnings (costly patterns, review gaps, lines without a winner):\n{}",
        warnings.join("\n")
    );
    assert!(report.entries >= 100, "only {} entries", report.entries);
    assert!(report.examples >= 2 * report.entries);
}

#[test]
fn embedded_kb_is_the_kb_directory() {
    let embedded = KnowledgeBase::embedded().expect("embedded KB loads");
    assert_eq!(
        embedded.version,
        kb().version,
        "rebuild: the binary's KB differs from kb/"
    );
    assert_eq!(embedded.entries.len(), kb().entries.len());
}

#[test]
fn every_pattern_is_one_line() {
    // `faultline bench patterns` prints one pattern a line for `rg -f` (scripts/bench.sh): a
    // newline written as TOML's "\n" inside a double-quoted pattern is a raw newline in the regex,
    // which matches the same but splits that line in two.
    let split: Vec<String> = kb()
        .patterns
        .iter()
        .filter(|p| p.source.contains(['\n', '\r']))
        .map(|p| p.source.clone())
        .collect();
    assert!(
        split.is_empty(),
        "patterns holding a raw line break (write \\n in a double-quoted TOML string):\n{}",
        split.join("\n")
    );
}

#[test]
fn coverage_md_is_current() {
    let expected = faultline::kb::list::markdown(&kb());
    let actual = fs::read_to_string(repo().join("kb/COVERAGE.md")).unwrap_or_default();
    assert!(
        actual == expected,
        "kb/COVERAGE.md is stale: run `cargo run -- kb list --kb kb --format markdown > kb/COVERAGE.md`"
    );
}

/// The error codes the product promises (issue 3): metric labels and alert keys.
const REQUIRED_CODES: &[&str] = &[
    "NCCL_TIMEOUT",
    "NCCL_HEARTBEAT_MONITOR_TIMEOUT",
    "NCCL_WATCHDOG_TEARDOWN",
    "NCCL_COMM_ABORTED",
    "NCCL_ASYNC_ERROR",
    "NCCL_SYSTEM_ERROR",
    "NCCL_UNHANDLED_CUDA_ERROR",
    "NCCL_INTERNAL_ERROR",
    "NCCL_REMOTE_ERROR",
    "NCCL_INVALID_USAGE",
    "TCPSTORE_TIMEOUT",
    "TCPSTORE_RECV_FAILED",
    "DIST_STORE_WAIT_TIMEOUT",
    "RENDEZVOUS_ERROR",
    "GLOO_CONNECTION_CLOSED",
    "GLOO_TIMEOUT",
    "TORCHELASTIC_CHILD_FAILED",
    "TORCHELASTIC_WORKER_EXIT",
    "CUDA_OOM",
    "CUDA_OOM_RUNTIME",
    "CUBLAS_ALLOC_FAILED",
    "CUDA_ILLEGAL_ADDRESS",
    "CUDA_ECC_UNCORRECTABLE",
    "CUDA_LAUNCH_FAILURE",
    "CUDA_DEVICE_ASSERT",
    "CUDA_MISALIGNED_ADDRESS",
    "CUDA_ILLEGAL_INSTRUCTION",
    "CUDA_NVLINK_UNCORRECTABLE",
    "CUDA_SYSTEM_NOT_READY",
    "CUDA_UNKNOWN_ERROR",
    "CUDA_DEVICE_UNAVAILABLE",
    "CUBLAS_EXECUTION_FAILED",
    "CUDA_ASYNC_REPORT_HINT",
    "DATALOADER_WORKER_KILLED",
    "DATALOADER_SHM_BUS_ERROR",
    "DATALOADER_WORKER_EXITED",
    "DATALOADER_WORKER_SEGFAULT",
    "SHM_NO_SPACE",
    "NCCL_IB_COMPLETION_ERROR",
    "NCCL_IB_ASYNC_EVENT",
    "NCCL_IB_FATAL",
    "NCCL_IBV_CALL_FAILED",
    "NCCL_SOCKET_ERROR",
    "NCCL_NO_SOCKET_INTERFACE",
    "NCCL_SHM_ERROR",
    "NCCL_CUDA_FAILURE",
    "NCCL_CUDA_CALLOC_FAILED",
    "IBV_WC_RETRY_EXCEEDED",
    "IBV_WC_ERROR",
    "MLX5_CQE_ERROR",
    "XID",
    "XID_13",
    "XID_31",
    "XID_43",
    "XID_45",
    "XID_48",
    "XID_63",
    "XID_64",
    "XID_74",
    "XID_79",
    "XID_92",
    "XID_94",
    "XID_95",
    "XID_119",
    "XID_120",
    "XID_154",
    "NVSWITCH_SXID",
    "NVML_DRIVER_MISMATCH",
    "NVML_GPU_LOST",
    "NVRM_INIT_FAILED",
    "LINUX_OOM_KILL",
    "PCIE_AER_FATAL",
    "SLURM_TIME_LIMIT",
    "SLURM_NODE_FAIL",
    "SLURM_PREEMPTED",
    "SLURM_REQUEUED",
    "SLURM_CANCELLED",
    "SLURM_TASK_FAILURE",
    "SLURM_CGROUP_OOM",
    "SLURM_SRUN_TASK_EXIT",
    "SLURM_SRUN_NODE_FAILURE",
    "SLURM_MEM_LIMIT",
    "K8S_OOMKILLED",
    "K8S_EVICTED",
    "KUBEFLOW_REPLICA_FAILED",
    "DS_LOSS_SCALE_MIN",
    "DS_FP16_OVERFLOW",
    "MEGATRON_NAN_GRAD_NORM",
    "MEGATRON_INF_GRAD_NORM",
    "NAN_LOSS",
    "CKPT_WRITE_FAILED",
    "DISK_FULL",
    "SEGFAULT",
    "BUS_ERROR",
    "PYTHON_IMPORT_ERROR",
    "PYTHON_FILE_NOT_FOUND",
    "PYTHON_PERMISSION_ERROR",
    "PYTHON_SYNTAX_ERROR",
    "PYTHON_KEY_ERROR",
    "PYTHON_ATTRIBUTE_ERROR",
    "PYTHON_TYPE_ERROR",
    "PYTHON_VALUE_ERROR",
    "PYTHON_ASSERTION_ERROR",
    "PYTHON_NAME_ERROR",
    "PYTHON_INDEX_ERROR",
];

#[test]
fn every_promised_error_code_has_an_entry_with_two_examples() {
    let kb = kb();
    let codes = kb.error_codes();
    let missing: Vec<&&str> = REQUIRED_CODES
        .iter()
        .filter(|c| !codes.contains(c))
        .collect();
    assert!(missing.is_empty(), "codes without an entry: {missing:?}");
    for e in &kb.entries {
        assert!(
            e.examples.len() >= 2,
            "{} has fewer than two examples",
            e.id
        );
        assert!(
            !e.negative_examples.is_empty(),
            "{} has no negative example",
            e.id
        );
    }
}

#[test]
fn the_seed_keeps_its_id_diagnosis_and_alias() {
    let kb = kb();
    let seed = kb
        .entries
        .iter()
        .find(|e| e.id == "pytorch/nccl-timeout-allreduce")
        .expect("the seed entry ships");
    assert_eq!(seed.error_code, "NCCL_TIMEOUT");
    assert!(seed.aliases.iter().any(|a| a == "NCCL_TIMEOUT_600"));
    // The seed's own AI-written fields are kept apart, rates and all, for import round trips;
    // the entry's own advice and numbers are the verified ones.
    assert_eq!(
        seed.fix_rate, None,
        "no invented fix rate on the entry itself"
    );
    assert!(seed
        .workarounds
        .iter()
        .all(|w| w.success_rate.is_none() || w.n.is_some()));
    let s = seed.seed.as_ref().expect("the seed's own fields");
    assert_eq!(s.fix_rate, Some(0.75));
    let rates: Vec<Option<f64>> = s.workarounds.iter().map(|w| w.success_rate).collect();
    assert_eq!(rates, vec![Some(0.8), Some(0.7), Some(0.6)]);
    assert!(s.workarounds[0]
        .text
        .starts_with("Set NCCL_IB_TIMEOUT and NCCL_SOCKET_IFNAME"));
    let dead: Vec<(&str, Option<f64>)> = s
        .dead_ends
        .iter()
        .map(|d| (d.action.as_str(), d.fail_rate))
        .collect();
    assert_eq!(
        dead,
        vec![
            ("export NCCL_TIMEOUT=1200", Some(0.7)),
            ("torchrun --nproc_per_node=2", Some(0.5))
        ]
    );
    // The entry's title is PyTorch's real text; the seed's invented one is kept in [seed].
    assert!(
        seed.title
            .contains("Watchdog caught collective operation timeout"),
        "{}",
        seed.title
    );
    assert!(s
        .title
        .starts_with("RuntimeError: [Rank 0] NCCL communicator was aborted"));
    let words: Vec<&str> = s.root_cause.split_whitespace().collect();
    assert!(words.join(" ").contains(
        "NCCL collective operation (AllReduce) timed out due to network congestion, GPU hang, or \
         uneven workload distribution across distributed ranks."
    ));
}

#[test]
fn the_seed_imports_and_passes_kb_check() {
    let md =
        fs::read_to_string(repo().join("tests/fixtures/seed/pytorch-nccl-timeout-allreduce.md"))
            .expect("fixture");
    if let Some(original) = shared("seeds/pytorch-nccl-timeout-allreduce.md") {
        assert_eq!(
            fs::read_to_string(original).expect("seed"),
            md,
            "the fixture is the seed"
        );
    }
    let spec = import::from_markdown(&md).expect("imports");
    let toml = toml::to_string_pretty(&spec).expect("serialises");
    let path = format!("{}.toml", spec.id);
    let report = check::check(vec![(path.into(), toml.clone())], "import");
    assert!(report.errors.is_empty(), "{:?}\n{toml}", report.errors);
    // Round trip: TOML -> spec -> Markdown -> spec keeps every field.
    let back: kb::EntrySpec = toml::from_str(&toml).expect("parses");
    assert_eq!(back, spec);
    assert_eq!(
        import::from_markdown(&import::to_markdown(&back)).expect("re-imports"),
        spec
    );
}

fn broken(file: &str, text: &str) -> Vec<String> {
    let report = check::check(vec![(file.into(), text.to_string())], "bad");
    report.errors.iter().map(ToString::to_string).collect()
}

const GOOD: &str = r#"id = "cuda/demo"
title = "demo"
domain = "cuda"
category = "kernel_bug"
error_code = "DEMO"
role = "root"
severity = "error"
verification = "ai_generated"
patterns_verified = "unverified"
root_cause = "r"
patterns = ['CUDA error: demo (?P<code>\d+)']
examples = ["CUDA error: demo 7"]
negative_examples = ["CUDA error: demo"]
references = ["here"]
"#;

#[test]
fn version_rows_need_a_patterns_review_that_names_release_tags() {
    let review = |tags: &str| {
        format!(
            "{GOOD}\n[[versions]]\ncomponent = \"cuda\"\nrange = \">=12.0\"\nstatus = \"active\"\n\n\
             [[review]]\npart = \"patterns\"\nlevel = \"source_verified\"\nby = \"t\"\n\
             against = \"demo.c\"\n{tags}\n"
        )
    };
    let untagged_warnings = |text: String| -> Vec<String> {
        let report = check::check(vec![("cuda/demo.toml".into(), text)], "t");
        assert!(report.errors.is_empty(), "{:?}", report.errors);
        report
            .warnings
            .iter()
            .map(ToString::to_string)
            .filter(|w| w.contains("release tags"))
            .collect()
    };
    let missing = untagged_warnings(review(""));
    assert_eq!(missing.len(), 1, "{missing:?}");
    assert!(missing[0].contains("cuda/demo") && missing[0].contains("field `review`"));
    assert_eq!(
        untagged_warnings(review("tags = [\"v12.0.0\", \"v12.4.1\"]")),
        Vec::<String>::new()
    );
}

#[test]
fn costly_patterns_are_warnings_that_name_the_pattern() {
    let text = GOOD
        .replace(
            r"patterns = ['CUDA error: demo (?P<code>\d+)']",
            r"patterns = ['CUDA error: demo (?P<code>\d+)', '.*error: demo \d+x', 'E\d(?:x|yz)']",
        )
        .replace(
            r#"examples = ["CUDA error: demo 7"]"#,
            r#"examples = ["CUDA error: demo 7", "error: demo 7x", "E7x"]"#,
        );
    let report = check::check(vec![("cuda/demo.toml".into(), text)], "bad");
    let errors: Vec<String> = report.errors.iter().map(ToString::to_string).collect();
    assert!(errors.is_empty(), "{errors:?}");
    let costly: Vec<String> = report
        .warnings
        .iter()
        .filter(|w| w.field.starts_with("patterns["))
        .map(ToString::to_string)
        .collect();
    assert_eq!(costly.len(), 2, "{costly:?}");
    assert!(costly[0].contains("field `patterns[1]`") && costly[0].contains("unbounded repeat"));
    assert!(costly[1].contains("field `patterns[2]`") && costly[1].contains("literal of 3 bytes"));
}

#[test]
fn a_good_entry_passes() {
    assert_eq!(broken("cuda/demo.toml", GOOD), Vec::<String>::new());
}

#[test]
fn broken_entries_name_file_entry_and_field() {
    let cases: &[(&str, String, &str)] = &[
        (
            "cuda/demo.toml",
            GOOD.replace("severity", "severty"),
            "field `severty`",
        ),
        ("cuda/other.toml", GOOD.to_string(), "field `id`"),
        (
            "cuda/demo.toml",
            GOOD.replace("\"root\"", "\"rooot\""),
            "field `role`",
        ),
        (
            "cuda/demo.toml",
            GOOD.replace("demo (?P", "demo ^(?P"),
            "field `patterns[0]`",
        ),
        (
            "cuda/demo.toml",
            GOOD.replace("(?P<code>\\d+)", "(?P<code>\\d+"),
            "field `patterns[0]`",
        ),
        (
            "cuda/demo.toml",
            GOOD.replace("demo 7\"", "demo x\""),
            "field `examples[0]`",
        ),
        (
            "cuda/demo.toml",
            GOOD.replace("[\"CUDA error: demo\"]", "[\"CUDA error: demo 8\"]"),
            "field `negative_examples[0]`",
        ),
        (
            "cuda/demo.toml",
            GOOD.replace("examples = [\"CUDA error: demo 7\"]", "examples = []"),
            "field `examples`",
        ),
        (
            "cuda/demo.toml",
            GOOD.replace("root_cause = \"r\"", "root_cause = \"r\"\nfix_rate = 75"),
            "field `fix_rate`",
        ),
        (
            "cuda/demo.toml",
            GOOD.replace("patterns = ['", "patterns = ['(?=x)"),
            "field `patterns[0]`",
        ),
    ];
    for (file, text, field) in cases {
        let errors = broken(file, text);
        assert!(
            errors
                .iter()
                .any(|e| e.contains(file) && e.contains(field) && e.contains("cuda/demo")),
            "expected an error naming {file}, cuda/demo and {field}; got {errors:?}"
        );
    }
}

#[test]
fn a_pattern_hyperscan_rejects_is_reported_for_that_pattern() {
    // Backreferences parse in neither engine's common subset.
    let errors = broken(
        "cuda/demo.toml",
        &GOOD.replace("patterns = ['", "patterns = ['(a)\\1 "),
    );
    assert!(
        errors.iter().any(|e| e.contains("patterns[0]")),
        "{errors:?}"
    );
}

#[test]
fn duplicate_ids_are_errors() {
    let report = check::check(
        vec![
            ("cuda/demo.toml".into(), GOOD.into()),
            ("cuda/demo2.toml".into(), GOOD.into()),
        ],
        "bad",
    );
    assert!(
        report.errors.iter().any(|e| e.field == "id"),
        "{:?}",
        report.errors
    );
}

#[test]
fn kb_dir_problems_are_all_reported_by_load() {
    let dir = tempfile::tempdir().expect("tmp");
    fs::create_dir_all(dir.path().join("cuda")).expect("mkdir");
    fs::write(
        dir.path().join("cuda/demo.toml"),
        GOOD.replace("domain", "domian"),
    )
    .expect("write");
    let err = KnowledgeBase::load_dir(dir.path()).expect_err("invalid");
    let text = err.to_string();
    assert!(
        text.contains("cuda/demo.toml") && text.contains("domian"),
        "{text}"
    );
}

#[test]
fn deadends_json_imports_pass_kb_check() {
    for name in [
        "cuda-oom-example.json",
        "two-entries.json",
        "two-entries.ndjson",
    ] {
        let text =
            fs::read_to_string(repo().join("tests/fixtures/deadends").join(name)).expect("fixture");
        let specs = import::from_json(&text).expect("imports");
        let files = specs
            .iter()
            .map(|s| {
                (
                    format!("{}.toml", s.id).into(),
                    toml::to_string_pretty(s).expect("toml"),
                )
            })
            .collect();
        let report = check::check(files, name);
        assert!(report.errors.is_empty(), "{name}: {:?}", report.errors);
    }
}

#[test]
fn bench_patterns_per_entry_ranks_every_entry_from_the_cli() {
    let run = |extra: &[&str]| {
        let base = [
            "bench",
            "patterns",
            "--kb",
            "kb",
            "--per-entry",
            "--size-mb",
            "1",
            "--runs",
            "1",
        ];
        crate::support::faultline_stdout(base.iter().chain(extra))
    };
    let json: serde_json::Value = serde_json::from_str(&run(&["--json"])).expect("JSON");
    let entries = json["entries"].as_array().expect("entries");
    assert_eq!(entries.len(), kb().entries.len(), "every entry is ranked");
    let excess: Vec<f64> = entries
        .iter()
        .map(|e| e["excess_ns_per_mb"].as_f64().expect("a cost"))
        .collect();
    assert!(
        excess.windows(2).all(|w| w[0] >= w[1]),
        "most expensive first"
    );
    assert!(entries.iter().any(|e| e["hits"].as_u64() > Some(0)));
    let text = run(&["--top", "4"]);
    let rows: Vec<&str> = text
        .lines()
        .filter(|l| {
            l.split_whitespace()
                .nth(1)
                .is_some_and(|id| id.contains('/'))
        })
        .collect();
    assert_eq!(rows.len(), 4, "{text}");
    assert!(
        rows[0].starts_with("1 ") && rows[3].starts_with("4 "),
        "{text}"
    );
    assert!(text.contains("whole KB as scan compiles it"), "{text}");
}

/// A dotted driver version as numbers (`535.104.12`).
fn driver_version(text: &str) -> Vec<u64> {
    text.split('.')
        .map(|p| p.parse().expect("numeric version"))
        .collect()
}

/// Whether `version` lies in `range` (`>=525.147.05,<526`: every comma-separated bound holds).
fn in_range(version: &[u64], range: &str) -> bool {
    range.split(',').map(str::trim).all(|bound| {
        let (op, v) = [">=", "<=", ">", "<", "="]
            .iter()
            .find_map(|op| bound.strip_prefix(op).map(|v| (*op, v)))
            .unwrap_or(("=", bound));
        let v = driver_version(v.trim());
        match op {
            ">=" => version >= v.as_slice(),
            "<=" => version <= v.as_slice(),
            ">" => version > v.as_slice(),
            "<" => version < v.as_slice(),
            _ => version == v.as_slice(),
        }
    })
}

/// The generated Xid entries' driver version rows agree with `nverror.h` at every driver tag
/// recorded in `tools/xid-catalogue/nverror-by-tag.tsv` (the first and last tag of every branch
/// from 515 to 595, and every tag where a definition changed): a row covers exactly the tags
/// that define the number (named, or only reserved for a number never named), and an `active`
/// row never covers a tag where the number meant something else. Backported numbers (Xid 140 in
/// 525.147.05 and 535.104.12+, not in 530) are where a single `>=` was wrong.
#[test]
fn xid_version_rows_agree_with_nverror_h_per_tag() {
    let table = fs::read_to_string(repo().join("tools/xid-catalogue/nverror-by-tag.tsv"))
        .expect("the per-tag table");
    let mut tags: std::collections::BTreeMap<String, std::collections::BTreeMap<u32, String>> =
        Default::default();
    for line in table.lines().skip(1).filter(|l| !l.is_empty()) {
        let f: Vec<&str> = line.split('\t').collect();
        assert_eq!(f.len(), 3, "{line}");
        tags.entry(f[0].to_string())
            .or_default()
            .insert(f[1].parse().expect("xid"), f[2].to_string());
    }
    assert!(tags.len() >= 40, "{} tags", tags.len());
    let reserved = |name: &str| {
        name.starts_with("RESERVED") || name.starts_with("ROBUST_CHANNEL_UNUSED_ERROR_")
    };
    let kb = kb();
    let mut checked = 0;
    let mut wrong = Vec::new();
    for entry in &kb.entries {
        let Some(n) = entry
            .error_code
            .strip_prefix("XID_")
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let file = repo().join("kb").join(&entry.path);
        let generated = fs::read_to_string(&file)
            .map(|t| t.starts_with("# Generated by tools/xid-catalogue/gen.py"))
            .unwrap_or(false);
        let rows: Vec<_> = entry
            .versions
            .iter()
            .filter(|r| r.component == "driver")
            .collect();
        if !generated || rows.is_empty() {
            continue;
        }
        let named = tags
            .values()
            .any(|d| d.get(&n).is_some_and(|name| !reserved(name)));
        for (tag, defs) in &tags {
            let v = driver_version(tag);
            let want = defs.get(&n).is_some_and(|name| !named || !reserved(name));
            let active = rows
                .iter()
                .any(|r| r.status == "active" && in_range(&v, &r.range));
            let other = rows
                .iter()
                .any(|r| r.status != "active" && in_range(&v, &r.range));
            checked += 1;
            if want != (active || other) || (active && other) {
                wrong.push(format!(
                    "{}: XID {n} at {tag}: defined {want}, rows say {}",
                    entry.id,
                    active || other
                ));
            }
        }
    }
    assert!(checked > 1000, "{checked} (entry, tag) pairs checked");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn an_entry_with_one_example_or_no_near_miss_is_warned_about() {
    let warned = |text: String| -> Vec<String> {
        let report = check::check(vec![("cuda/demo.toml".into(), text)], "t");
        assert!(report.errors.is_empty(), "{:?}", report.errors);
        report
            .warnings
            .iter()
            .filter(|w| w.field == "examples" || w.field == "negative_examples")
            .map(|w| w.field.clone())
            .collect()
    };
    // GOOD has one example and a negative example.
    assert_eq!(warned(GOOD.to_string()), vec!["examples".to_string()]);
    let two = GOOD.replace(
        r#"examples = ["CUDA error: demo 7"]"#,
        r#"examples = ["CUDA error: demo 7", "RuntimeError: CUDA error: demo 12"]"#,
    );
    assert_ne!(two, GOOD, "the fixture's examples line moved");
    assert_eq!(warned(two), Vec::<String>::new());
}
