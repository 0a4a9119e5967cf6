//! Recognition that holds on wordings nobody copied from an excerpt (issue 26): a worker that
//! died of a signal gives that signal's own root in every launcher's words; an NCCL result or
//! CUDA error string gives the same code inside every framework's wrapper; a teardown line that
//! quotes its reason headlines the quoted error. The lines are built from each program's format
//! string (`tools/enumerations/`, whose tables generate the patterns) or are real lines; each is
//! scanned and correlated alone, as one job, and its incident's headline is checked.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use faultline::engine::Engine;
use faultline::enrich::Enricher;
use faultline::eval::{self, Excerpt};
use faultline::incident::IncidentConfig;
use faultline::matcher::HyperscanMatcher;

use crate::support::{hyperscan, repo};

/// `(group, line, expected code)` rows of a fixture table (a header line first).
fn rows(name: &str) -> Vec<(String, String, String)> {
    let path = repo().join("tests/fixtures/recognition").join(name);
    let text = std::fs::read_to_string(&path).expect("fixture");
    text.lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let mut f = l.split('\t');
            let (g, line, code) = (f.next(), f.next(), f.next());
            match (g, line, code) {
                (Some(g), Some(line), Some(code)) => {
                    (g.to_string(), line.to_string(), code.to_string())
                }
                _ => panic!("{name}: malformed row {l:?}"),
            }
        })
        .collect()
}

/// The shipped KB compiled once for every test of this module.
fn engine() -> &'static (Engine<HyperscanMatcher>, Enricher) {
    static ENGINE: OnceLock<(Engine<HyperscanMatcher>, Enricher)> = OnceLock::new();
    ENGINE.get_or_init(|| {
        let engine = hyperscan();
        let enricher = Enricher::new(Arc::clone(&engine.kb));
        (engine, enricher)
    })
}

/// The headline root code of the incident `line` makes alone.
fn headline(line: &str) -> Option<String> {
    let (engine, enricher) = engine();
    let ex = Excerpt {
        path: PathBuf::from("line.log"),
        source: "test".into(),
        expect: Vec::new(),
        culprit: None,
        body: format!("{line}\n"),
    };
    let (_, incidents) =
        eval::run_excerpt(engine, enricher, &ex, &IncidentConfig::default()).expect("scan");
    eval::headline(&incidents).map(|i| i.root.error_code.clone())
}

/// Checks every row whose group starts with one of `groups`; at least `min` of them.
fn check(table: &str, groups: &[&str], min: usize) {
    let selected: Vec<_> = rows(table)
        .into_iter()
        .filter(|(g, _, _)| groups.iter().any(|p| g.starts_with(p)))
        .collect();
    assert!(
        selected.len() >= min,
        "{table} {groups:?}: {} rows",
        selected.len()
    );
    let wrong: Vec<String> = selected
        .iter()
        .filter_map(|(g, line, want)| {
            let got = headline(line);
            (got.as_deref() != Some(want.as_str()))
                .then(|| format!("{g}: {line:?}: want {want}, got {got:?}"))
        })
        .collect();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn torchrun_worker_exits_give_the_signal_s_root() {
    check("signals.tsv", &["torchelastic", "torchrun", "mp_spawn"], 20);
}

#[test]
fn open_mpi_worker_exits_give_the_signal_s_root() {
    check("signals.tsv", &["ompi", "openmpi"], 8);
}

#[test]
fn srun_task_exits_give_the_signal_s_root() {
    check("signals.tsv", &["srun"], 12);
}

#[test]
fn kubernetes_container_exits_give_the_signal_s_root() {
    check("signals.tsv", &["k8s", "kubectl"], 6);
}

#[test]
fn deepspeed_launcher_and_shell_exits_give_the_signal_s_root() {
    check(
        "signals.tsv",
        &["deepspeed", "bash", "subprocess", "python"],
        20,
    );
}

#[test]
fn exit_codes_of_each_signal_are_told_apart() {
    // The same launcher wording with -11, -9, -7, -6 and 128+N: each its own root.
    for (line, want) in [
        ("exitcode  : -11 (pid: 4242)", "SEGFAULT"),
        ("exitcode  : -9 (pid: 4242)", "PROCESS_SIGKILL"),
        ("exitcode  : -7 (pid: 4242)", "BUS_ERROR"),
        (
            "srun: error: node-3: task 2: Exited with exit code 139",
            "SEGFAULT",
        ),
        (
            "srun: error: node-3: task 2: Exited with exit code 137",
            "PROCESS_SIGKILL",
        ),
        (
            "srun: error: node-3: task 2: Exited with exit code 134",
            "PROCESS_SIGABRT",
        ),
    ] {
        assert_eq!(headline(line).as_deref(), Some(want), "{line}");
    }
}

#[test]
fn an_nccl_result_string_gives_the_same_code_in_every_wrapper() {
    check("wrappers.tsv", &["pytorch"], 2);
    check("wrappers.tsv", &["jax-xla"], 3);
    check("wrappers.tsv", &["tensorflow"], 3);
    check("wrappers.tsv", &["horovod", "paddle", "nccl-tests"], 4);
    // The same result string, three wrappers, one code.
    let codes: Vec<Option<String>> = [
        "RuntimeError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1169, unhandled cuda error, NCCL version 21.0.3",
        "INTERNAL: external/xla/xla/service/gpu/nccl_utils.cc:275: NCCL operation ncclCommInitRank(&comm, nranks, id, rank) failed: unhandled cuda error",
        "tensorflow.python.framework.errors_impl.InternalError: NCCL: unhandled cuda error. Set NCCL_DEBUG=WARN for detail.",
    ]
    .iter()
    .map(|l| headline(l))
    .collect();
    assert!(
        codes
            .iter()
            .all(|c| c.as_deref() == Some("NCCL_UNHANDLED_CUDA_ERROR")),
        "{codes:?}"
    );
}

#[test]
fn a_teardown_line_quoting_its_reason_headlines_the_quoted_error() {
    check("wrappers.tsv", &["pytorch-quoted"], 5);
}

#[test]
fn a_cuda_error_gives_its_code_in_every_framework() {
    check(
        "wrappers.tsv",
        &[
            "xla-cuda",
            "tensorflow-cuda",
            "mxnet-cuda",
            "cupy-cuda",
            "xla-cudnn",
        ],
        6,
    );
}

/// A mapped CUDA error text inside a wrapper no table lists ("CUDA ... failed with error <text>")
/// and an NVML wording inside Slurm's, NCCL's, nvidia-smi's, pynvml's and libnvidia-container's
/// words give the text's own code, not the catch-all or nothing.
#[test]
fn cuda_and_nvml_texts_give_their_code_in_unlisted_wrappers() {
    check("wrappers.tsv", &["unlisted-cuda"], 5);
    check("wrappers.tsv", &["unlisted-nccl"], 2);
    check("wrappers.tsv", &["nvml"], 8);
    // The near miss: CUDA and an error word in the line, but the text does not follow the word.
    assert_ne!(
        headline("CUDA error handler installed: out of memory is reported as a warning").as_deref(),
        Some("CUDA_OOM_RUNTIME")
    );
}
