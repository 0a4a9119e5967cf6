//! Which lines of a chunk are unknown errors: they look like errors
//! ([`looks_like_error`]) and no KB entry matched them.
//!
//! The engine finds them in its own pass ([`Engine::scan_chunk_with`]): the gate's patterns
//! ([`crate::templates::gate::PATTERNS`]) are compiled into the KB's Hyperscan database
//! ([`engine`]), so one scan of a chunk yields both the KB's hits and the raw lines that may
//! hold an error word; the engine decodes each such line once (a JSON envelope's messages, a
//! raw line without its launcher prefix or colour codes), confirms the KB's hits on it, and
//! hands the messages that no entry confirmed to [`unknown_text`], which keeps those that look
//! like errors. What comes out is what `faultline templates` mines ([`crate::mine`] runs the
//! same steps), so the live templates and the offline ones agree. Lines of a JSON envelope are
//! never gated (their message may be escaped).

use std::borrow::Cow;

use crate::engine::{Compile, Engine};
use crate::kb::KnowledgeBase;
use crate::matcher::MatchError;
use crate::record::LogRecord;
use crate::templates::gate;
use crate::templates::FilterMemo;

/// Compiles `kb` with the unknown-line gate in the same database (`progress`: keep the
/// training-progress entries).
pub fn engine(kb: KnowledgeBase, progress: bool) -> Result<Engine, MatchError> {
    let how = Compile {
        progress,
        prefilter: gate::PATTERNS,
    };
    Engine::compile(kb, how)
}

/// The message of an unmatched record as UTF-8 (invalid bytes replaced) when it looks like an
/// error: an unknown error line. `memo` (one per worker) remembers the verdicts of the line
/// shapes it has judged.
pub fn unknown_text<'a>(record: &'a LogRecord<'_>, memo: &mut FilterMemo) -> Option<Cow<'a, str>> {
    let text = match std::str::from_utf8(&record.message) {
        Ok(s) => Cow::Borrowed(s),
        Err(_) => String::from_utf8_lossy(&record.message),
    };
    memo.looks_like_error(&text).then_some(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::ChunkInfo;
    use crate::testutil::entry_toml;

    fn find(chunk: &str) -> Vec<(u64, String, Option<u32>)> {
        let kb = KnowledgeBase::from_files(
            vec![(
                "test/t.toml".into(),
                entry_toml("test/t", "T", "root", r"Traceback \(most recent", false),
            )],
            "test",
        )
        .expect("valid");
        let engine = engine(kb, false).expect("compiles");
        let mut w = engine.worker().expect("scratch");
        let mut out = Vec::new();
        let info = ChunkInfo {
            first_line: 10,
            truncated: false,
        };
        let mut hits = 0;
        let mut memo = FilterMemo::default();
        engine
            .scan_chunk_with(
                &mut w,
                chunk.as_bytes(),
                info,
                &mut |_| hits += 1,
                &mut |line, record| {
                    if let Some(text) = unknown_text(record, &mut memo) {
                        out.push((line, text.into_owned(), record.meta.rank));
                    }
                },
            )
            .expect("scans");
        assert_eq!(
            Engine::json_lines_decoded(&w),
            chunk.matches("\n{").count() as u64
        );
        out
    }

    #[test]
    fn error_lines_that_no_entry_knows() {
        let chunk = "step 1 loss 0.5\n\
                     [rank3]: RuntimeError: the frobnicator failed\n\
                     0 errors\n\
                     {\"message\":\"ERROR: disk quota exceeded on /scratch\",\"job_id\":\"j\"}\n\
                     Traceback (most recent call last):\n\
                     fine\n\
                     {\"message\":\"Traceback (most recent call last):\"}";
        assert_eq!(
            find(chunk),
            vec![
                (11, "RuntimeError: the frobnicator failed".into(), Some(3)),
                (13, "ERROR: disk quota exceeded on /scratch".into(), None),
            ]
        );
    }

    #[test]
    fn coloured_lines_are_read_without_their_escape_sequences() {
        let chunk = "\x1b[1;35mRuntimeError\x1b[0m: \x1b[35mthe frobnicator failed\x1b[0m\n\
                     {\"message\":\"\\u001b[31mERROR\\u001b[0m: disk quota exceeded\"}\n\
                     \x1b[31mTraceback (most recent call last):\x1b[0m";
        assert_eq!(
            find(chunk),
            vec![
                (10, "RuntimeError: the frobnicator failed".into(), None),
                (11, "ERROR: disk quota exceeded".into(), None),
            ]
        );
    }
}
