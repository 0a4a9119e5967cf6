//! Shared helpers: the repository's KB, engines in both flavours, and scanning to events.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use faultline::engine::Engine;
use faultline::enrich::MatchEvent;
use faultline::kb::KnowledgeBase;
use faultline::matcher::{HyperscanMatcher, RegexMatcher};
use faultline::scan::{scan_inputs, ScanOptions};
use faultline::sink::stdout::{Format, StdoutSink};
use faultline::source::file;

pub(crate) fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `../shared/<rel>` beside the repository, when this checkout has it.
pub(crate) fn shared(rel: &str) -> Option<PathBuf> {
    let path = repo().join("..").join("shared").join(rel);
    path.exists().then_some(path)
}

pub(crate) fn kb() -> Arc<KnowledgeBase> {
    static KB: OnceLock<Arc<KnowledgeBase>> = OnceLock::new();
    Arc::clone(
        KB.get_or_init(|| {
            Arc::new(KnowledgeBase::load_dir(&repo().join("kb")).expect("kb/ loads"))
        }),
    )
}

/// The engine `faultline scan --progress-lines` runs on the repository's KB: its patterns'
/// required literals in one Hyperscan database (through the database cache), each hit
/// confirmed on its line. Hyperscan takes minutes to compile every pattern of the KB whole,
/// which the shipped path never does; `corpus::hyperscan_agrees_with_the_oracle_on_loghub`
/// checks that this engine gives the oracle's events.
pub(crate) fn hyperscan() -> Engine<HyperscanMatcher> {
    Engine::with_progress(KnowledgeBase::clone(&kb())).expect("compiles")
}

pub(crate) fn oracle() -> Engine<RegexMatcher> {
    let kb = kb();
    let sources: Vec<&str> = kb.patterns.iter().map(|p| p.source.as_str()).collect();
    let m = RegexMatcher::compile(&sources).expect("compiles");
    Engine::with_matcher(kb, m)
}

/// Scans paths with `engine` the way `faultline scan` does; returns the events.
pub(crate) fn scan_paths<M: faultline::matcher::Matcher>(
    engine: &Engine<M>,
    paths: &[&Path],
    opts: &ScanOptions,
) -> (Vec<MatchEvent>, Vec<u8>) {
    let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    let (inputs, errors) = file::expand(&names, None);
    assert!(errors.is_empty(), "inputs readable: {errors:?}");
    let mut sink = StdoutSink::new(Vec::new(), Format::Json);
    let mut events = Vec::new();
    scan_inputs(engine, &inputs, opts, &mut sink, &mut |e| {
        events.push(e.clone())
    })
    .expect("scan runs");
    (events, sink.into_inner())
}

/// Every event of one line, through the engine as `scan` sees it (`kb explain`'s function).
pub(crate) fn events_of_line<M: faultline::matcher::Matcher>(
    engine: &Engine<M>,
    line: &str,
) -> Vec<MatchEvent> {
    faultline::explain::explain(engine, line).expect("scan")
}

/// Fails the test, with the command's output, unless it exited 0.
pub(crate) fn assert_success(out: &std::process::Output) {
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `faultline ARGS` run in the repository (the built-in KB unless `--kb` says otherwise): its
/// standard output; fails the test, with its output, when it does not exit 0.
pub(crate) fn faultline_stdout<I, S>(args: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_faultline"))
        .current_dir(repo())
        .env_remove("FAULTLINE_KB")
        .args(args)
        .output()
        .expect("runs");
    assert_success(&out);
    String::from_utf8(out.stdout).expect("utf-8")
}
