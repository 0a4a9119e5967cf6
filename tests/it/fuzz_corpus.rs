//! The stored fuzz inputs, replayed through the same harnesses as `cargo fuzz`
//! (`faultline::fuzzing`), so a regression fails `cargo test` without nightly or cargo-fuzz:
//! every file of `fuzz/corpus/<target>/` (seeds and what fuzzing kept) and of
//! `fuzz/regressions/<target>/` (inputs that once found a bug, named after it).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

use faultline::fuzzing::{self, Harness};

use crate::support::repo;

/// Runs `harness` over every file under `dir`; returns how many ran. Names each failing input.
fn replay_dir(target: &str, dir: &Path, harness: Harness) -> usize {
    let Ok(read) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut paths: Vec<_> = read.filter_map(Result::ok).map(|e| e.path()).collect();
    paths.sort();
    let mut failed = Vec::new();
    for path in &paths {
        let data = std::fs::read(path).expect("readable input");
        if catch_unwind(AssertUnwindSafe(|| harness(&data))).is_err() {
            failed.push(path.display().to_string());
        }
    }
    assert!(failed.is_empty(), "{target} fails on {failed:#?}");
    paths.len()
}

fn replay(target: &str) {
    let harness = fuzzing::TARGETS
        .iter()
        .find(|(name, _)| *name == target)
        .map(|(_, h)| *h)
        .expect("a known target");
    let fuzz = repo().join("fuzz");
    let corpus = replay_dir(target, &fuzz.join("corpus").join(target), harness);
    assert!(
        corpus > 0,
        "fuzz/corpus/{target}/ is empty: run scripts/fuzz.sh --seed"
    );
    replay_dir(target, &fuzz.join("regressions").join(target), harness);
}

#[test]
fn every_target_has_a_fuzz_target_file() {
    for (name, _) in fuzzing::TARGETS {
        let path = repo().join(format!("fuzz/fuzz_targets/{name}.rs"));
        let text = std::fs::read_to_string(&path).expect("the target file exists");
        assert!(text.contains(&format!("faultline::fuzzing::{name}(data)")));
    }
}

#[test]
fn envelope_corpus() {
    replay("envelope");
}

#[test]
fn kb_toml_corpus() {
    replay("kb_toml");
}

#[test]
fn seed_markdown_corpus() {
    replay("seed_markdown");
}

#[test]
fn deadends_json_corpus() {
    replay("deadends_json");
}

#[test]
fn engine_corpus() {
    replay("engine");
}

#[test]
fn chunk_reader_corpus() {
    replay("chunk_reader");
}

#[test]
fn redact_corpus() {
    replay("redact");
}

#[test]
fn kafka_record_corpus() {
    replay("kafka_record");
}

#[test]
fn multiline_corpus() {
    replay("multiline");
}

// Regressions: what fuzzing found, one test each, named after it.

#[test]
fn regression_imported_title_with_two_spaces_before_a_unit_matches_its_pattern() {
    // The importer generalised "5  s" into `\d+ ?(?:ms|...|s)`, which needs at most one space:
    // the entry it wrote failed `kb check` (its example did not match its own pattern).
    let md =
        std::fs::read(repo().join("fuzz/regressions/seed_markdown/title-unit-after-two-spaces.md"))
            .expect("regression input");
    fuzzing::seed_markdown(&md);
    let json =
        std::fs::read(repo().join("fuzz/regressions/deadends_json/title-unit-after-a-tab.json"))
            .expect("regression input");
    fuzzing::deadends_json(&json);
    let pattern = faultline::kbtool::import::pattern_from_title("fired after 5  s and 7\tms");
    let re = faultline::kb::compile_pattern(&pattern).expect("compiles");
    assert!(re.is_match(b"fired after 5  s and 7\tms"));
}

#[test]
fn regression_imported_title_with_a_multibyte_character_does_not_panic() {
    // `pattern_from_title` compared `&rest[..n]` with each collective name, and `n` could fall
    // inside a multi-byte character: `kb import` panicked on titles with an em dash.
    for name in [
        "title-with-an-em-dash.md",
        "title-with-multibyte-char-crash.md",
    ] {
        let md = std::fs::read(repo().join("fuzz/regressions/seed_markdown").join(name))
            .expect("regression input");
        fuzzing::seed_markdown(&md);
    }
    let pattern = faultline::kbtool::import::pattern_from_title("ab—cd: AllReduce — ok");
    let re = faultline::kb::compile_pattern(&pattern).expect("compiles");
    assert!(re.is_match("ab—cd: Broadcast — ok".as_bytes()));
}

#[test]
fn regression_imported_blank_title_does_not_panic() {
    // `negative_from_title` took the first half of the title's words, at least one, and a
    // title of `# ` alone has none: `kb import` panicked slicing an empty list (found by the
    // CI fuzz run of seed_markdown).
    let md = std::fs::read(repo().join("fuzz/regressions/seed_markdown/title-blank-crash.md"))
        .expect("regression input");
    // The harness panics where the importer does (before the fix: slice index out of range).
    fuzzing::seed_markdown(&md);
}
