//! Which lines of a chunk are unknown errors: they look like errors
//! ([`looks_like_error`]) and no KB entry matched them.
//!
//! Per chunk, after the engine's scan (which says which lines hit, as `(line, hash of the
//! message)`): one Hyperscan pass of the [`Gate`] finds the raw lines that may hold an error
//! word, only those are decoded ([`crate::envelope`]: a JSON envelope's messages, a raw line
//! without its launcher prefix) and given to [`looks_like_error`]; a message that a hit
//! confirmed on is known and left out. What comes out is exactly what `faultline templates`
//! mines ([`crate::mine`] runs the same steps), so the live templates and the offline ones
//! agree. Lines of a JSON envelope are never gated (their message may be escaped).

use std::borrow::Cow;

use crate::engine::{strip_ansi, strip_message, ChunkInfo, ESC};
use crate::envelope;
use crate::matcher::MatchError;
use crate::record::LogRecord;
use crate::templates::gate::Gate;
use crate::templates::{fnv1a, looks_like_error};

/// A line's key in the list of known lines: its number and the hash of its message.
pub fn known_key(line: u64, message: &[u8]) -> (u64, u64) {
    (line, fnv1a(message))
}

/// Finds unknown error lines in chunks. One per worker: it holds Hyperscan scratch.
pub struct Finder {
    gate: Gate,
    records: Vec<LogRecord<'static>>,
    /// Whether the current chunk holds an ESC byte at all (most hold none).
    escapes: bool,
}

impl std::fmt::Debug for Finder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Finder").finish_non_exhaustive()
    }
}

impl Finder {
    /// Compiles the gate.
    pub fn new() -> Result<Finder, MatchError> {
        Ok(Finder {
            gate: Gate::new()?,
            records: Vec::new(),
            escapes: false,
        })
    }

    /// Calls `found(line, record, text)` for every message of `chunk` that looks like an error
    /// and is not in `known` (the [`known_key`]s of the chunk's hits, in line order); `text` is
    /// the message as UTF-8 (invalid bytes replaced). Lines are numbered from
    /// `info.first_line`, as the engine numbers them.
    pub fn find(
        &mut self,
        chunk: &[u8],
        info: ChunkInfo,
        known: &[(u64, u64)],
        found: &mut dyn FnMut(u64, &LogRecord<'_>, &str),
    ) -> Result<(), MatchError> {
        self.gate.scan(chunk)?;
        self.escapes = memchr::memchr(ESC, chunk).is_some();
        if info.truncated {
            let at = (info.first_line, info.truncated);
            self.line(chunk, 0..chunk.len(), at, known, found);
            return Ok(());
        }
        let mut line_no = info.first_line;
        let mut start = 0;
        for nl in memchr::memchr_iter(b'\n', chunk) {
            self.line(chunk, start..nl, (line_no, false), known, found);
            line_no += 1;
            start = nl + 1;
        }
        if start < chunk.len() {
            self.line(chunk, start..chunk.len(), (line_no, false), known, found);
        }
        Ok(())
    }

    /// The line at `chunk[range]`; `at`: its number, and whether it was cut.
    fn line(
        &mut self,
        chunk: &[u8],
        range: std::ops::Range<usize>,
        (line_no, truncated): (u64, bool),
        known: &[(u64, u64)],
        found: &mut dyn FnMut(u64, &LogRecord<'_>, &str),
    ) {
        let (start, end) = (range.start, range.end);
        let line = &chunk[range];
        let json = envelope::looks_like_json(line);
        // A coloured line is read as the engine reads it: without its escape sequences (the
        // gate, which saw the raw bytes, may miss a word glued to a colour code).
        let escape = self.escapes && memchr::memchr(ESC, line).is_some();
        if !json && !escape && !self.gate.maybe(start, end) {
            return;
        }
        if json {
            let mut records = std::mem::take(&mut self.records);
            records.clear();
            let decoded = envelope::decode_json(line, &mut records).is_ok();
            if decoded {
                for record in &mut records {
                    record.truncated |= truncated;
                    strip_message(record);
                    message(record, line_no, known, found);
                }
            }
            self.records = records;
            if decoded {
                return;
            }
        }
        let mut clean = Vec::new();
        let line = if escape {
            strip_ansi(line, &mut clean);
            &clean[..]
        } else {
            line
        };
        let mut record = envelope::decode_raw(line);
        record.truncated = truncated;
        message(&record, line_no, known, found);
    }
}

fn message(
    record: &LogRecord<'_>,
    line_no: u64,
    known: &[(u64, u64)],
    found: &mut dyn FnMut(u64, &LogRecord<'_>, &str),
) {
    let text = match std::str::from_utf8(&record.message) {
        Ok(s) => Cow::Borrowed(s),
        Err(_) => String::from_utf8_lossy(&record.message),
    };
    if !looks_like_error(&text) {
        return;
    }
    let from = known.partition_point(|k| k.0 < line_no);
    if known[from..]
        .iter()
        .take_while(|k| k.0 == line_no)
        .any(|k| k.1 == fnv1a(&record.message))
    {
        return;
    }
    found(line_no, record, &text);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn find(chunk: &str, known: &[(u64, u64)]) -> Vec<(u64, String, Option<u32>)> {
        let mut f = Finder::new().expect("compiles");
        let mut out = Vec::new();
        let info = ChunkInfo {
            first_line: 10,
            truncated: false,
        };
        f.find(chunk.as_bytes(), info, known, &mut |line, record, text| {
            out.push((line, text.to_string(), record.meta.rank))
        })
        .expect("scans");
        out
    }

    #[test]
    fn error_lines_that_no_hit_knows() {
        let chunk = "step 1 loss 0.5\n\
                     [rank3]: RuntimeError: the frobnicator failed\n\
                     0 errors\n\
                     {\"message\":\"ERROR: disk quota exceeded on /scratch\",\"job_id\":\"j\"}\n\
                     Traceback (most recent call last):\n\
                     fine";
        let all = find(chunk, &[]);
        assert_eq!(
            all,
            vec![
                (11, "RuntimeError: the frobnicator failed".into(), Some(3)),
                (13, "ERROR: disk quota exceeded on /scratch".into(), None),
                (14, "Traceback (most recent call last):".into(), None),
            ]
        );
        // A hit on line 14 (the traceback frame entry) makes it known; a hit on line 11 with
        // another message (another record of a JSON line) does not.
        let known = [
            known_key(11, b"something else"),
            known_key(14, b"Traceback (most recent call last):"),
        ];
        let lines: Vec<u64> = find(chunk, &known).iter().map(|f| f.0).collect();
        assert_eq!(lines, [11, 13]);
    }

    #[test]
    fn coloured_lines_are_read_without_their_escape_sequences() {
        let chunk = "\x1b[1;35mRuntimeError\x1b[0m: \x1b[35mthe frobnicator failed\x1b[0m\n\
                     {\"message\":\"\\u001b[31mERROR\\u001b[0m: disk quota exceeded\"}";
        let all = find(chunk, &[]);
        assert_eq!(
            all,
            vec![
                (10, "RuntimeError: the frobnicator failed".into(), None),
                (11, "ERROR: disk quota exceeded".into(), None),
            ]
        );
        // The engine's hit names the cleaned message: the coloured line is known.
        let known = [known_key(10, b"RuntimeError: the frobnicator failed")];
        let lines: Vec<u64> = find(chunk, &known).iter().map(|f| f.0).collect();
        assert_eq!(lines, [11]);
    }
}
