//! Failure isolation in `scan`: a panic while scanning one chunk costs that chunk at most; the
//! other chunks of the same input and the other inputs still produce their matches.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use faultline::engine::Engine;
use faultline::enrich::MatchEvent;
use faultline::matcher::{MatchError, Matcher, RawHit, RegexMatcher};
use faultline::record::Provenance;
use faultline::scan::{scan_inputs, ScanOptions, ScanStats};
use faultline::sink::stdout::{Format, StdoutSink};
use faultline::source::file;

use crate::support::kb;

const MARKER: &[u8] = b"@@PANIC@@";

/// The oracle matcher, except that it panics on any haystack holding [`MARKER`]: always, or
/// only the first `flaky` times.
struct PanickingMatcher {
    inner: RegexMatcher,
    flaky: Option<AtomicUsize>,
}

impl Matcher for PanickingMatcher {
    type Scratch = ();

    fn name(&self) -> &'static str {
        "panicking"
    }

    fn scratch(&self) -> Result<(), MatchError> {
        Ok(())
    }

    fn find(&self, s: &mut (), haystack: &[u8], hits: &mut Vec<RawHit>) -> Result<(), MatchError> {
        if memchr::memmem::find(haystack, MARKER).is_some() {
            let panic_now = match &self.flaky {
                None => true,
                Some(left) => left
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok(),
            };
            if panic_now {
                panic!("test matcher: marker seen");
            }
        }
        self.inner.find(s, haystack, hits)
    }
}

fn engine(flaky: Option<usize>) -> Engine<PanickingMatcher> {
    let kb = kb();
    let sources: Vec<&str> = kb.patterns.iter().map(|p| p.source.as_str()).collect();
    let matcher = PanickingMatcher {
        inner: RegexMatcher::compile(&sources).expect("compiles"),
        flaky: flaky.map(AtomicUsize::new),
    };
    Engine::with_matcher(Arc::clone(&kb), matcher)
}

const OOM: &str = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.11 GiB of which 1.20 GiB is free.";

/// Three inputs: `a.log` and `c.log` healthy with matches, `b.log` with 300 lines (a match every
/// tenth line) and the marker on line 150. Chunks of 4 KiB split `b.log` into several.
fn inputs(dir: &Path) -> Vec<file::Input> {
    std::fs::write(dir.join("a.log"), format!("start\n{OOM}\n")).expect("write");
    let mut b = String::new();
    for i in 1..=300 {
        match i {
            150 => b.push_str("@@PANIC@@ a line that trips the matcher\n"),
            i if i % 10 == 0 => b.push_str(&format!("[rank{i}]: {OOM}\n")),
            i => b.push_str(&format!("step {i} loss 1.{i:03}\n")),
        }
    }
    std::fs::write(dir.join("b.log"), b).expect("write");
    std::fs::write(dir.join("c.log"), format!("{OOM}\nend\n")).expect("write");
    let (inputs, errors) = file::expand(&[dir.display().to_string()], None);
    assert!(errors.is_empty());
    inputs
}

fn scan<M: Matcher>(
    engine: &Engine<M>,
    inputs: &[file::Input],
    threads: usize,
) -> (Vec<MatchEvent>, ScanStats) {
    let opts = ScanOptions {
        chunk_bytes: 4096,
        max_line_bytes: 4096,
        threads,
        ..ScanOptions::default()
    };
    let mut sink = StdoutSink::new(Vec::new(), Format::Json);
    let mut events = Vec::new();
    let stats = scan_inputs(engine, inputs, &opts, &mut sink, &mut |e| {
        events.push(e.clone())
    })
    .expect("the scan runs to the end");
    (events, stats)
}

fn where_(e: &MatchEvent) -> (String, u64) {
    match &e.source {
        Provenance::File { path, line } => (
            Path::new(path)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            *line,
        ),
        Provenance::Kafka { .. } => unreachable!("file inputs"),
    }
}

#[test]
fn a_chunk_that_panics_twice_is_skipped_and_the_rest_still_matches() {
    let dir = tempfile::tempdir().expect("tmp");
    let inputs = inputs(dir.path());
    // What a scan without the marker's effect finds: the oracle over the same inputs.
    let (clean, _) = scan(&crate::support::oracle(), &inputs, 1);
    assert!(
        clean.len() >= 31,
        "one match in a.log and c.log, 29 in b.log"
    );
    for threads in [1, 2] {
        let (events, stats) = scan(&engine(None), &inputs, threads);
        assert_eq!(
            stats.panics.len(),
            1,
            "threads={threads}: {:?}",
            stats.panics
        );
        let p = &stats.panics[0];
        assert!(p.skipped);
        assert!(p.input.ends_with("b.log"));
        assert!(p.first_line <= 150 && 150 <= p.last_line, "{p}");
        assert!(p.message.contains("marker seen"), "{p}");
        assert_eq!(stats.skipped_chunks(), 1);
        assert_eq!(stats.lines, 2 + 300 + 2, "skipped lines are still counted");
        // Everything outside the skipped range is there, in order; nothing inside it is.
        let skipped = |e: &&MatchEvent| {
            let (file, line) = where_(e);
            file == "b.log" && (p.first_line..=p.last_line).contains(&line)
        };
        let expected: Vec<_> = clean.iter().filter(|e| !skipped(e)).map(where_).collect();
        let got: Vec<_> = events.iter().map(where_).collect();
        assert_eq!(got, expected, "threads={threads}");
        assert!(got.iter().any(|(f, l)| f == "b.log" && *l > p.last_line));
        assert!(got.iter().any(|(f, _)| f == "c.log"));
        assert!(
            clean.iter().filter(skipped).count() > 0,
            "the chunk had matches"
        );
    }
}

#[test]
fn a_chunk_that_panics_once_is_retried_whole() {
    let dir = tempfile::tempdir().expect("tmp");
    let inputs = inputs(dir.path());
    let (clean, _) = scan(&crate::support::oracle(), &inputs, 1);
    for threads in [1, 2] {
        let (events, stats) = scan(&engine(Some(1)), &inputs, threads);
        assert_eq!(stats.panics.len(), 1);
        assert!(!stats.panics[0].skipped, "{}", stats.panics[0]);
        assert_eq!(stats.skipped_chunks(), 0);
        let got: Vec<_> = events.iter().map(where_).collect();
        let expected: Vec<_> = clean.iter().map(where_).collect();
        assert_eq!(
            got, expected,
            "no match lost or duplicated, threads={threads}"
        );
    }
}
