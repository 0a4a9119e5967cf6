//! Lines with ANSI escape sequences match as if the sequences were absent, in the library
//! engine (Hyperscan and the oracle alike) and in `faultline scan`'s output, which quotes the
//! cleaned line.

use faultline::matcher::Matcher;
use serde_json::Value;

use crate::support::{events_of_line, faultline_stdout, hyperscan, oracle};

/// (coloured line, the same line as the program printed it without colour, expected code).
/// Python 3.13's coloured traceback (exception type bold magenta, message magenta), a logger
/// that colours its level, and Ray's cyan worker prefix before an NCCL WARN line.
const LINES: &[(&str, &str, &str)] = &[
    (
        "\x1b[1;35mRuntimeError\x1b[0m: \x1b[35mCUDA error: out of memory\x1b[0m",
        "RuntimeError: CUDA error: out of memory",
        "CUDA_OOM_RUNTIME",
    ),
    (
        "\x1b[36m(RayTrainWorker pid=3490362, ip=10.0.0.5)\x1b[0m gpu-102:7781:7845 [2] transport/net_ib/common.cc:122 (ncclIbAsyncThreadMain) NCCL WARN NET/IB : mlx5_2:1 async fatal event: local catastrophic error",
        "(RayTrainWorker pid=3490362, ip=10.0.0.5) gpu-102:7781:7845 [2] transport/net_ib/common.cc:122 (ncclIbAsyncThreadMain) NCCL WARN NET/IB : mlx5_2:1 async fatal event: local catastrophic error",
        "NCCL_IB_FATAL",
    ),
    (
        "2024-11-29 08:12:40 \x1b[1m\x1b[31mERROR\x1b[0m node-2:5776:5902 [0] transport/net_ib.cc:1296 NCCL WARN NET/IB : Got completion from peer 10.2.0.5<33092> with error \x1b[1m12\x1b[22m, opcode 0, len 0, vendor err 129 (Recv)",
        "2024-11-29 08:12:40 ERROR node-2:5776:5902 [0] transport/net_ib.cc:1296 NCCL WARN NET/IB : Got completion from peer 10.2.0.5<33092> with error 12, opcode 0, len 0, vendor err 129 (Recv)",
        "",
    ),
];

/// (code, captures, line) of every event of `line`.
fn summary<M: Matcher>(
    engine: &faultline::engine::Engine<M>,
    line: &str,
) -> Vec<(String, String, String)> {
    events_of_line(engine, line)
        .into_iter()
        .map(|e| (e.error_code, format!("{:?}", e.captures), e.line))
        .collect()
}

#[test]
fn coloured_lines_match_as_if_plain_in_both_engines() {
    let (hs, re) = (hyperscan(), oracle());
    for (coloured, plain, code) in LINES {
        let want = summary(&hs, plain);
        assert!(!want.is_empty(), "the plain line matches: {plain}");
        if !code.is_empty() {
            assert_eq!(want[0].0, *code, "{plain}");
        }
        let got = summary(&hs, coloured);
        assert_eq!(got, want, "Hyperscan on {coloured:?}");
        assert_eq!(summary(&re, coloured), want, "the oracle on {coloured:?}");
        assert!(got.iter().all(|(_, _, line)| !line.contains('\x1b')));
    }
}

#[test]
fn scan_reports_coloured_lines_with_the_cleaned_line() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("coloured.log");
    let mut text = String::from("\x1b[32mINFO\x1b[0m epoch 1 done\n");
    for (coloured, _, _) in LINES {
        text.push_str(coloured);
        text.push('\n');
    }
    std::fs::write(&path, &text).expect("write");
    let path = path.display().to_string();
    let events: Vec<Value> = faultline_stdout([
        "scan",
        "--kb",
        "kb",
        "--no-summary",
        "--no-incidents",
        &path,
    ])
    .lines()
    .map(|l| serde_json::from_str(l).expect("JSON"))
    .collect();
    let hs = hyperscan();
    for (i, (_, plain, _)) in LINES.iter().enumerate() {
        let line_no = i as u64 + 2;
        let want = summary(&hs, plain);
        let got: Vec<&Value> = events
            .iter()
            .filter(|e| e["source"]["line"] == line_no)
            .collect();
        assert_eq!(got.len(), want.len(), "line {line_no}: {got:?}");
        for (g, (code, _, line)) in got.iter().zip(&want) {
            assert_eq!(g["error_code"], code.as_str());
            assert_eq!(g["line"], line.as_str(), "the cleaned line is quoted");
        }
    }
    assert!(
        events.iter().all(|e| e["source"]["line"] != 1),
        "the coloured INFO line stays quiet"
    );
}
