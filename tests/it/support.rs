//! Shared helpers: the repository's KB, engines in both flavours, and scanning to events.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use faultline::engine::{ChunkInfo, Engine};
use faultline::enrich::{Enricher, MatchEvent};
use faultline::kb::KnowledgeBase;
use faultline::matcher::{HyperscanMatcher, RegexMatcher};
use faultline::record::Provenance;
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

pub(crate) fn hyperscan() -> Engine<HyperscanMatcher> {
    let kb = kb();
    let sources: Vec<&str> = kb.patterns.iter().map(|p| p.source.as_str()).collect();
    let m = HyperscanMatcher::compile(&sources).expect("compiles");
    Engine::with_matcher(kb, m)
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

/// Every event of one line, through the engine as `scan` sees it.
pub(crate) fn events_of_line<M: faultline::matcher::Matcher>(
    engine: &Engine<M>,
    line: &str,
) -> Vec<MatchEvent> {
    let enricher = Enricher::new(Arc::clone(&engine.kb));
    let mut worker = engine.worker().expect("scratch");
    let mut out = Vec::new();
    engine
        .scan_chunk(
            &mut worker,
            line.as_bytes(),
            ChunkInfo {
                first_line: 1,
                truncated: false,
            },
            &mut |hit| {
                out.push(enricher.event(
                    &hit,
                    "test",
                    Provenance::File {
                        path: "-".into(),
                        line: 1,
                    },
                ));
            },
        )
        .expect("scan");
    out
}
