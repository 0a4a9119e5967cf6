//! A pre-filter for [`looks_like_error`](crate::templates::looks_like_error): the words without which it cannot say yes, found in a
//! whole chunk by one Hyperscan pass.
//!
//! Why: `looks_like_error` reads every word of a line (lower-casing, looking at neighbours),
//! which costs more than Hyperscan's pass over the same bytes, and most lines of a log hold none
//! of its evidence. Each piece of evidence needs a word that starts with one of a few literals
//! (`err`, `fail`, `fatal`, `abort`, `exception`, `panic`, `fault`, ... in any case), an exit
//! phrase (`exit code`, `exited with status`), an exception name's segment (`ncclSystemError`) or
//! a glog prefix (`E1129 21:...`), and a message is a contiguous part of its raw line, so a raw line without
//! any of them cannot hold a message that looks like an error: it is skipped without being
//! decoded. The gate only ever says "maybe"; `looks_like_error` still decides, so what is mined
//! is exactly what it would be without the gate (`tests::the_gate_never_hides_an_error_line`
//! checks it on every log of the repository and on the loghub samples).
//!
//! JSON envelopes are not gated: their message may be escaped (`\u0045RROR`).

use crate::matcher::{HyperscanMatcher, MatchError, Matcher, RawHit};

/// The words, in any case and at the start of a word, of which an error line holds at least
/// one. `looks_like_error` reads a line as words, maximal runs of ASCII letters, and each of its
/// pieces of evidence is a word that begins with one of these: `err` for `ERROR`, `ERR` and
/// `errors`, `fail` for `failed` and `failure`, `fault` and `dumped` for `segmentation fault` and
/// `core dumped`, `sig...` for the signal names, and so on. A word start is the start of the
/// chunk or a byte that is not a letter (the newline before a line counts); no match reaches past
/// its line, so a trigger's end always falls in the line it belongs to.
///
/// Why word starts: the same words anywhere in a word made every `[default]`, `stderr` and
/// `interrupt` a candidate, and a candidate is decoded and read word by word. A message starts
/// at a word start of its raw line (the envelope and prefix decoders cut after a separator).
pub const TRIGGERS: &str = "(?i)(?:^|[^A-Za-z])(?:err|fail|fatal|abort|exception|panic|segfault|\
                            crash|crit|severe|emerg|traceback|fault|dumped|\
                            sig(?:segv|abrt|bus|fpe|ill)|nonzero|non-zero|exitcode|returncode)";

/// The exit phrases, whole: `exit code`, `return status`, `exited with code`, `terminated with
/// status`, `finished with code` (the words `looks_like_error` reads before an exit value; the
/// words between them are separated by anything but letters, as its words are).
pub const EXIT_PHRASES: &str = "(?i)(?:^|[^A-Za-z])(?:(?:exit|return)[^A-Za-z\\n]+|\
                                (?:exited|terminated|finished)[^A-Za-z\\n]+with[^A-Za-z\\n]+)(?:code|status)";

/// An exception name's segment inside a CamelCase word (`RuntimeError`, `ncclSystemError`,
/// `ChildFailedError`); a word that starts with one is found by [`TRIGGERS`].
pub const CAMEL: &str = "[a-z](?:Error|Exception|Failure|Failed|Fault)";

/// The glog severity prefix of an `E` or `F` line: `E1129 21:42:00.429 ...`, as three patterns
/// by the first digit. One pattern `[EF]\d{4} \d\d` has no literal Hyperscan will scan for (ten
/// two-byte pairs are too many for it; eight are not), and alone it cost as much as the other
/// three patterns of the gate together (docs/performance.md, session 55). Together the three
/// match exactly what it matched.
pub const GLOG: [&str; 3] = [
    r"[EF][0-3]\d{3} \d\d",
    r"[EF][4-7]\d{3} \d\d",
    r"[EF][89]\d{3} \d\d",
];

/// The gate's patterns, as [`crate::unknown::find::engine`] compiles them into the KB's database.
pub const PATTERNS: &[&str] = &[TRIGGERS, EXIT_PHRASES, CAMEL, GLOG[0], GLOG[1], GLOG[2]];

/// The compiled gate and its per-chunk state (`faultline templates`, which mines without the
/// KB's engine in `--all-lines` mode and reads the gate on its own).
pub struct Gate {
    matcher: HyperscanMatcher,
    scratch: <HyperscanMatcher as Matcher>::Scratch,
    /// Ends of the triggers found in the current chunk, ascending.
    hits: Vec<RawHit>,
    /// First hit not yet behind the current line.
    next: usize,
}

impl Gate {
    /// Compiles [`PATTERNS`].
    pub fn new() -> Result<Gate, MatchError> {
        let matcher = HyperscanMatcher::compile(PATTERNS)?;
        let scratch = matcher.scratch()?;
        Ok(Gate {
            matcher,
            scratch,
            hits: Vec::new(),
            next: 0,
        })
    }

    /// Finds the triggers of a chunk; then ask [`Gate::maybe`] about its lines, in order.
    pub fn scan(&mut self, chunk: &[u8]) -> Result<(), MatchError> {
        self.hits.clear();
        self.next = 0;
        self.matcher
            .find(&mut self.scratch, chunk, &mut self.hits)?;
        self.hits.sort_unstable();
        Ok(())
    }

    /// Whether the line at `chunk[start..end]` holds a trigger. Lines must be asked about in
    /// ascending order.
    pub fn maybe(&mut self, start: usize, end: usize) -> bool {
        while self
            .hits
            .get(self.next)
            .is_some_and(|h| (h.end as usize) <= start)
        {
            self.next += 1;
        }
        self.hits
            .get(self.next)
            .is_some_and(|h| (h.end as usize) <= end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envelope;
    use crate::templates::looks_like_error;

    #[test]
    fn the_gate_never_hides_an_error_line() {
        let lines = crate::testutil::repo_lines();
        assert!(lines.len() > 10_000, "{} lines", lines.len());
        let mut gate = Gate::new().expect("compiles");
        let mut errors = 0;
        for line in &lines {
            gate.scan(line).expect("scans");
            let maybe = gate.maybe(0, line.len());
            let record = envelope::decode_raw(line);
            let text = String::from_utf8_lossy(&record.message);
            if looks_like_error(&text) {
                errors += 1;
                assert!(maybe, "the gate hides {text:?}");
            }
        }
        assert!(errors > 1_000, "{errors} error lines");
    }

    #[test]
    fn lines_are_asked_in_order() {
        let chunk = "all good\nERROR x\nfine\nE1129 21:42:00.429 1 a.cc:1] boom\nok";
        assert_eq!(answers(chunk), vec![false, true, false, true, false]);
    }

    /// The gate's answer for each line of `text`, scanned as one chunk.
    fn answers(text: &str) -> Vec<bool> {
        let chunk = text.as_bytes();
        let mut gate = Gate::new().expect("compiles");
        gate.scan(chunk).expect("scans");
        let mut start = 0;
        let mut got = Vec::new();
        for line in chunk.split(|&b| b == b'\n') {
            got.push(gate.maybe(start, start + line.len()));
            start += line.len() + 1;
        }
        got
    }

    #[test]
    fn triggers_count_only_at_word_starts() {
        // Each line holds a trigger inside a word, or an exit word without its phrase: none of
        // them can look like an error, and none is a candidate.
        let quiet = "I1129 api.py:560] [default] worker group heartbeat ok, rank 178\n\
                     INFO writing to stderr and handling interrupts\n\
                     INFO executor.Executor: Finished task 0.0 in stage 1.0 (TID 3)\n\
                     INFO the function will return after the exit of all workers";
        assert_eq!(answers(quiet), vec![false; 4]);
        // The same words at word starts, the phrases whole, and names' segments are candidates.
        let loud = "[default0]:RuntimeError: boom\n\
                    worker exited with code 1\n\
                    return status: 2\n\
                    Segmentation fault (core dumped)\n\
                    NCCL error: ncclSystemError\n\
                    rank0: FAILED\n\
                    child terminated with status 9";
        assert_eq!(answers(loud), vec![true; 7]);
        for line in loud.lines() {
            assert!(looks_like_error(line), "{line}");
        }
    }
}
