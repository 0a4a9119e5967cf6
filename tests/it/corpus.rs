//! The KB on logs it must stay silent on: healthy training output and the public loghub
//! samples (read from `../shared/corpus/loghub` when present, never copied here).

use std::collections::BTreeSet;
use std::fs;
use std::path::PathBuf;

use faultline::kb::Role;
use faultline::scan::ScanOptions;

use crate::support::{hyperscan, oracle, repo, scan_paths, shared};

#[test]
fn healthy_training_output_has_no_root_or_cascade_match() {
    let captured = repo().join("tests/fixtures/captured");
    let paths = [
        repo().join("tests/fixtures/healthy"),
        captured.join("nccl_healthy_2rank.log"),
        captured.join("torchrun_nccl_healthy.log"),
        captured.join("env_versions_nvidia_smi.log"),
    ];
    let refs: Vec<&std::path::Path> = paths.iter().map(PathBuf::as_path).collect();
    let (events, _) = scan_paths(&hyperscan(), &refs, &ScanOptions::default());
    let loud: Vec<String> = events
        .iter()
        .filter(|e| matches!(e.role, Role::Root | Role::Cascade))
        .map(|e| format!("{} {} {}", e.source, e.kb_id, e.line))
        .collect();
    assert!(
        loud.is_empty(),
        "healthy lines matched:\n{}",
        loud.join("\n")
    );
}

#[test]
fn real_captures_yield_their_reviewed_error_codes() {
    let dir = repo().join("tests/fixtures/captured");
    let expected: Vec<(String, Vec<String>)> =
        fs::read_to_string(repo().join("tests/fixtures/captured-expectations.txt"))
            .expect("expectations")
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
            .map(|l| {
                let mut words = l.split_whitespace().map(str::to_string);
                let file = words.next().unwrap_or_default();
                (file, words.filter(|w| w != "-").collect())
            })
            .collect();
    assert!(expected.len() >= 40, "every capture is reviewed");
    let engine = hyperscan();
    let mut wrong = Vec::new();
    for (file, codes) in &expected {
        let (events, _) = scan_paths(&engine, &[&dir.join(file)], &ScanOptions::default());
        let found: BTreeSet<String> = events.iter().map(|e| e.error_code.clone()).collect();
        let want: BTreeSet<String> = codes.iter().cloned().collect();
        if found != want {
            wrong.push(format!("{file}: expected {want:?}, found {found:?}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "captures differ from tests/fixtures/captured-expectations.txt:\n{}",
        wrong.join("\n")
    );
}

/// Reviewed root/cascade matches in loghub: `file:line kb_id` per line.
fn expectations() -> BTreeSet<String> {
    fs::read_to_string(repo().join("tests/fixtures/loghub-expectations.txt"))
        .expect("expectations file")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect()
}

#[test]
fn loghub_root_and_cascade_matches_are_all_reviewed() {
    let Some(dir) = shared("corpus/loghub") else {
        eprintln!("SKIPPED loghub_root_and_cascade_matches_are_all_reviewed: ../shared/corpus/loghub is absent");
        return;
    };
    let (events, _) = scan_paths(&hyperscan(), &[&dir], &ScanOptions::default());
    let found: BTreeSet<String> = events
        .iter()
        .filter(|e| matches!(e.role, Role::Root | Role::Cascade))
        .map(|e| {
            let source = e.source.to_string();
            let file = source.rsplit('/').next().unwrap_or(&source).to_string();
            format!("{file} {}", e.kb_id)
        })
        .collect();
    let expected = expectations();
    let unreviewed: Vec<&String> = found.difference(&expected).collect();
    let stale: Vec<&String> = expected.difference(&found).collect();
    assert!(
        unreviewed.is_empty() && stale.is_empty(),
        "loghub matches differ from tests/fixtures/loghub-expectations.txt\nnew (review them): {unreviewed:#?}\nno longer found: {stale:#?}"
    );
}

#[test]
fn hyperscan_agrees_with_the_oracle_on_loghub() {
    let Some(dir) = shared("corpus/loghub") else {
        eprintln!(
            "SKIPPED hyperscan_agrees_with_the_oracle_on_loghub: ../shared/corpus/loghub is absent"
        );
        return;
    };
    let (a, _) = scan_paths(&hyperscan(), &[&dir], &ScanOptions::default());
    let (b, _) = scan_paths(&oracle(), &[&dir], &ScanOptions::default());
    let key = |e: &faultline::enrich::MatchEvent| {
        (e.source.to_string(), e.kb_id.clone(), e.captures.clone())
    };
    assert_eq!(
        a.iter().map(key).collect::<Vec<_>>(),
        b.iter().map(key).collect::<Vec<_>>()
    );
}
