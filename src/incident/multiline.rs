//! Multiline context: traceback, c10 and torchrun-summary blocks, assembled per stream.
//!
//! A block is the run of lines that explains one failure on one (job, rank, host) stream:
//!
//! ```text
//! [rank3]: Traceback (most recent call last):                      start
//! [rank3]:   File "train.py", line 41, in <module>                  continue
//! [rank3]:     ~~~~~~^^^^^^^                                        continue (3.11+ carets)
//! [rank3]: KeyError: 'labels'                                       a match: appended
//! [rank3]: The above exception was the direct cause of the ...      chain
//! [rank3]: Traceback (most recent call last):                       start after chain: same block
//! [rank3]: RuntimeError: CUDA error: an illegal memory access ...   a match: appended
//! [rank3]: Exception raised from c10_cuda_check_implementation ...  continue (c10)
//! [rank3]: frame #0: c10::Error::Error(...) + 0x57 (...)            continue
//! ```
//!
//! and, on the launcher's stream, torchrun's `ChildFailedError` summary whose "Root Cause
//! (first observed failure)" section names the failed rank and host.
//!
//! Block lines are recognised by KB entries of the `context` domain (`kb/context/`, category
//! `context`, role `info`): the one Hyperscan pass finds them like any other entry, so a line
//! that hits nothing costs nothing here. Their error codes say what a line does to a block
//! ([`classify`]); other `context`-category matches (CUDA's "might be asynchronously reported"
//! hint, the NCCL teardown notice) continue a block, and any other match on a stream with a
//! fresh block is appended to it (it is the exception line the block explains). The source
//! lines of Python frames hit nothing and are therefore not kept.
//!
//! Bounded: at most `max_context_streams_per_job` streams per job (the least recently touched
//! is dropped), and each block keeps its first lines and its last lines within
//! `max_context_lines` and `max_context_bytes`, counting what it left out.

use std::collections::VecDeque;
use std::sync::Arc;

use super::{ContextInfo, ContextLine};
use crate::enrich::MatchEvent;
use crate::time::Millis;

/// The most bytes of one context line; longer lines are cut and the block marked truncated.
pub const MAX_CONTEXT_LINE_BYTES: usize = 2048;

/// What a block line does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineKind {
    /// Starts a block (`Traceback (most recent call last):`, `terminate called after ...`),
    /// unless it follows a chain line.
    Start,
    /// `The above exception was the direct cause ...`, `During handling of the above ...`.
    Chain,
    /// torchrun's `Root Cause (first observed failure):`.
    RootCauseSection,
    /// A torchrun summary field (`host      : node-05`, `time      : ...`).
    SummaryField,
    /// Anything else that belongs inside a block: frames, carets, c10 lines, CUDA hints.
    Continue,
}

/// The block role of a match, or `None` for a match that is not a block line.
pub fn classify(event: &MatchEvent) -> Option<LineKind> {
    if event.category != "context" {
        return None;
    }
    Some(match event.error_code.as_str() {
        "CONTEXT_PY_TRACEBACK" | "CONTEXT_CPP_TERMINATE" => LineKind::Start,
        "CONTEXT_PY_CHAIN" => LineKind::Chain,
        "CONTEXT_ELASTIC_ROOT_CAUSE" => LineKind::RootCauseSection,
        "CONTEXT_ELASTIC_FIELD" => LineKind::SummaryField,
        _ => LineKind::Continue,
    })
}

/// Whether a match only serves multiline context (the `context` domain): it is folded into
/// blocks and incidents, never counted as a match of its own.
pub fn is_block_only(event: &MatchEvent) -> bool {
    event.domain == "context"
}

/// A bounded run of lines: the first lines and the last lines, the middle left out.
#[derive(Debug, Clone)]
pub struct ContextBuf {
    head: Vec<ContextLine>,
    tail: VecDeque<ContextLine>,
    bytes: usize,
    omitted: u64,
    cut: bool,
    max_lines: usize,
    max_bytes: usize,
}

impl ContextBuf {
    /// An empty buffer of at most `max_lines` lines and `max_bytes` bytes (each at least 1).
    pub fn new(max_lines: usize, max_bytes: usize) -> Self {
        ContextBuf {
            head: Vec::new(),
            tail: VecDeque::new(),
            bytes: 0,
            omitted: 0,
            cut: false,
            max_lines: max_lines.max(1),
            max_bytes: max_bytes.max(1),
        }
    }

    /// Lines kept.
    pub fn len(&self) -> usize {
        self.head.len() + self.tail.len()
    }

    /// True when no line is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of the lines kept.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Forgets every line and what was left out.
    pub fn clear(&mut self) {
        self.head.clear();
        self.tail.clear();
        self.bytes = 0;
        self.omitted = 0;
        self.cut = false;
    }

    /// Appends a line of `rank`, cut to [`MAX_CONTEXT_LINE_BYTES`]; past the bounds, lines are
    /// dropped from the middle and counted.
    pub fn push(&mut self, rank: Option<u32>, text: &str) {
        let mut text = text;
        if text.len() > MAX_CONTEXT_LINE_BYTES {
            let mut end = MAX_CONTEXT_LINE_BYTES;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            text = &text[..end];
            self.cut = true;
        }
        self.bytes += text.len();
        let line = ContextLine {
            rank,
            text: text.to_string(),
        };
        let head_cap = (self.max_lines / 4).max(1);
        if self.head.len() < head_cap && self.tail.is_empty() && self.omitted == 0 {
            self.head.push(line);
        } else {
            self.tail.push_back(line);
        }
        while self.len() > self.max_lines || self.bytes > self.max_bytes {
            let dropped = match self.tail.pop_front() {
                Some(l) => l,
                None => match self.head.pop() {
                    Some(l) => l,
                    None => break,
                },
            };
            self.bytes -= dropped.text.len();
            self.omitted += 1;
        }
    }

    /// Appends every line of `other`, in order.
    pub fn extend_from(&mut self, other: &ContextBuf) {
        for line in other.head.iter().chain(other.tail.iter()) {
            self.push(line.rank, &line.text);
        }
        self.omitted += other.omitted;
        self.cut |= other.cut;
    }

    /// Whether the last line kept is `text` (to avoid repeating a root line).
    pub fn ends_with(&self, text: &str) -> bool {
        self.tail
            .back()
            .or_else(|| self.head.last())
            .is_some_and(|l| l.text == text)
    }

    /// Whether any kept line is `text`.
    pub fn contains(&self, text: &str) -> bool {
        self.head
            .iter()
            .chain(self.tail.iter())
            .any(|l| l.text == text)
    }

    /// The `context` object of the JSON contract.
    pub fn info(&self) -> ContextInfo {
        ContextInfo {
            lines: self.head.iter().chain(self.tail.iter()).cloned().collect(),
            truncated: self.omitted > 0 || self.cut,
            omitted_lines: self.omitted,
            omitted_at: (self.omitted > 0).then_some(self.head.len()),
        }
    }
}

/// Identifies a stream: the rank and host a line came from.
pub type StreamKey = (Option<u32>, Option<Arc<str>>);

/// One stream's current block.
#[derive(Debug, Clone)]
pub struct Stream {
    /// The rank and host the stream's lines came from.
    pub key: StreamKey,
    /// Its current block.
    pub block: ContextBuf,
    last_kind: Option<LineKind>,
    last_ms: Millis,
    touched: u64,
    /// The block is a torchrun summary: its lines go to the job's incident too.
    pub summary: bool,
    in_root_cause: bool,
    root_cause_host: Option<String>,
}

/// What a line did to the streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    /// The line is now part of a block.
    pub appended: bool,
    /// The block is a torchrun summary.
    pub summary: bool,
    /// The line was torchrun's root cause row: culprit evidence changed.
    pub root_cause: bool,
}

/// The streams of one job.
#[derive(Debug, Clone)]
pub struct Streams {
    list: Vec<Stream>,
    cap: usize,
    touch: u64,
    max_lines: usize,
    max_bytes: usize,
    /// torchrun's root cause row: (rank, host).
    pub root_cause: Option<(u32, Option<String>)>,
    /// Streams dropped to respect the cap.
    pub dropped: u64,
}

impl Streams {
    /// No streams yet: at most `cap` (at least 1), each block bounded by `max_lines` and
    /// `max_bytes`.
    pub fn new(cap: usize, max_lines: usize, max_bytes: usize) -> Self {
        Streams {
            list: Vec::new(),
            cap: cap.max(1),
            touch: 0,
            max_lines,
            max_bytes,
            root_cause: None,
            dropped: 0,
        }
    }

    /// Streams with a block.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// True when no stream has a block.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The stream `key`, if it has a block.
    pub fn get(&self, key: &StreamKey) -> Option<&Stream> {
        self.list.iter().find(|s| &s.key == key)
    }

    /// The stream of `rank`, whatever its host.
    pub fn by_rank(&self, rank: u32) -> Option<&Stream> {
        self.list
            .iter()
            .filter(|s| s.key.0 == Some(rank))
            .max_by_key(|s| s.touched)
    }

    fn position(&self, key: &StreamKey) -> Option<usize> {
        self.list.iter().position(|s| &s.key == key)
    }

    /// Moves every stream to `t` (see `Correlator::set_clock`).
    pub fn retime(&mut self, t: Millis) {
        for stream in &mut self.list {
            stream.last_ms = t;
        }
    }

    /// A block line of `kind` on stream `key` at time `t`.
    pub fn block_line(
        &mut self,
        key: StreamKey,
        kind: LineKind,
        event: &MatchEvent,
        t: Millis,
        window_ms: Millis,
    ) -> Appended {
        self.touch += 1;
        let touch = self.touch;
        let idx = match self.position(&key) {
            Some(i) => i,
            None => {
                if self.list.len() >= self.cap {
                    if let Some(oldest) = self
                        .list
                        .iter()
                        .enumerate()
                        .min_by_key(|(_, s)| s.touched)
                        .map(|(i, _)| i)
                    {
                        self.list.swap_remove(oldest);
                        self.dropped += 1;
                    }
                }
                self.list.push(Stream {
                    key: key.clone(),
                    block: ContextBuf::new(self.max_lines, self.max_bytes),
                    last_kind: None,
                    last_ms: t,
                    touched: touch,
                    summary: false,
                    in_root_cause: false,
                    root_cause_host: None,
                });
                self.list.len() - 1
            }
        };
        let stream = &mut self.list[idx];
        let stale = t.saturating_sub(stream.last_ms) > window_ms;
        // A start line opens a new block, except after a chain line and inside a torchrun
        // summary (whose root cause row quotes the failed worker's traceback).
        let restart = stale
            || stream.block.is_empty()
            || (kind == LineKind::Start
                && stream.last_kind != Some(LineKind::Chain)
                && !stream.summary);
        if restart {
            stream.block.clear();
            stream.summary = false;
            stream.in_root_cause = false;
            stream.root_cause_host = None;
        }
        match kind {
            LineKind::RootCauseSection => {
                stream.summary = true;
                stream.in_root_cause = true;
            }
            LineKind::SummaryField => {
                stream.summary = true;
                if stream.in_root_cause {
                    if let Some(node) = event.captures.get("node") {
                        stream.root_cause_host = Some(node.clone());
                    }
                }
            }
            _ => {}
        }
        // Two entries may hit the same line (the terminate line is also a teardown notice).
        if !stream.block.ends_with(&event.line) {
            stream.block.push(event.rank, &event.line);
        }
        stream.last_kind = Some(kind);
        stream.last_ms = stream.last_ms.max(t);
        stream.touched = touch;
        Appended {
            appended: true,
            summary: stream.summary,
            root_cause: false,
        }
    }

    /// A match that is not a block line: appended to its stream's block when the stream has a
    /// fresh one. A torchrun summary's rank row (`rank : N (local_rank: M)`) under "Root Cause"
    /// records the root cause rank.
    pub fn other_match(
        &mut self,
        key: &StreamKey,
        event: &MatchEvent,
        t: Millis,
        window_ms: Millis,
    ) -> Appended {
        let Some(idx) = self.position(key) else {
            return Appended {
                appended: false,
                summary: false,
                root_cause: false,
            };
        };
        self.touch += 1;
        let touch = self.touch;
        let stream = &mut self.list[idx];
        if stream.block.is_empty() || t.saturating_sub(stream.last_ms) > window_ms {
            return Appended {
                appended: false,
                summary: false,
                root_cause: false,
            };
        }
        let mut root_cause = false;
        if stream.in_root_cause && event.captures.contains_key("local_rank") {
            if let Some(rank) = event
                .captures
                .get("rank")
                .and_then(|r| r.trim().parse::<u32>().ok())
            {
                self.root_cause = Some((rank, stream.root_cause_host.clone()));
                root_cause = true;
            }
        }
        if !stream.block.ends_with(&event.line) {
            stream.block.push(event.rank, &event.line);
        }
        stream.last_kind = None;
        stream.last_ms = stream.last_ms.max(t);
        stream.touched = touch;
        Appended {
            appended: true,
            summary: stream.summary,
            root_cause,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::incident::testutil::event;
    use crate::kb::Role;

    fn ctx(code: &str, line: &str) -> MatchEvent {
        event(code, Role::Info, "context")
            .domain("context")
            .line(line)
            .rank(3)
            .build()
    }

    fn texts(buf: &ContextBuf) -> Vec<String> {
        buf.info().lines.into_iter().map(|l| l.text).collect()
    }

    #[test]
    fn head_and_tail_are_kept_the_middle_counted() {
        let mut b = ContextBuf::new(8, 1 << 20);
        for i in 0..20 {
            b.push(None, &format!("line {i}"));
        }
        let info = b.info();
        assert_eq!(info.lines.len(), 8);
        assert_eq!(info.lines[0].text, "line 0");
        assert_eq!(info.lines[1].text, "line 1");
        assert_eq!(info.lines[2].text, "line 14");
        assert_eq!(info.lines[7].text, "line 19");
        assert_eq!(info.omitted_lines, 12);
        assert_eq!(info.omitted_at, Some(2));
        assert!(info.truncated);
    }

    #[test]
    fn bytes_are_bounded_and_long_lines_cut() {
        let mut b = ContextBuf::new(100, 4096);
        b.push(None, &"x".repeat(10_000));
        assert_eq!(b.bytes(), MAX_CONTEXT_LINE_BYTES);
        for _ in 0..10 {
            b.push(None, &"y".repeat(1000));
        }
        assert!(b.bytes() <= 4096);
        assert!(b.info().truncated);
    }

    #[test]
    fn a_block_of_exactly_its_line_cap_is_whole_one_more_line_is_left_out() {
        let mut b = ContextBuf::new(8, 1 << 20);
        for i in 0..8 {
            b.push(None, &format!("line {i}"));
        }
        let info = b.info();
        assert_eq!(info.lines.len(), 8);
        assert!(!info.truncated && info.omitted_lines == 0 && info.omitted_at.is_none());
        b.push(None, "line 8");
        let info = b.info();
        assert_eq!(info.lines.len(), 8);
        assert_eq!(info.omitted_lines, 1);
        assert!(info.truncated);
        assert_eq!(info.lines.last().map(|l| l.text.as_str()), Some("line 8"));
    }

    #[test]
    fn a_block_of_exactly_its_byte_cap_is_whole_one_more_byte_is_left_out() {
        let mut b = ContextBuf::new(64, 100);
        b.push(None, &"a".repeat(60));
        b.push(None, &"b".repeat(40));
        assert_eq!(b.bytes(), 100);
        assert!(!b.info().truncated, "exactly max_context_bytes");
        b.push(None, "c");
        let info = b.info();
        assert!(b.bytes() <= 100);
        assert_eq!(info.omitted_lines, 1);
        assert!(info.truncated);
    }

    #[test]
    fn a_context_line_of_exactly_its_cap_is_whole_one_more_byte_is_cut() {
        let mut b = ContextBuf::new(64, 1 << 20);
        b.push(None, &"x".repeat(MAX_CONTEXT_LINE_BYTES));
        assert_eq!(b.bytes(), MAX_CONTEXT_LINE_BYTES);
        assert!(!b.info().truncated);
        b.push(None, &"y".repeat(MAX_CONTEXT_LINE_BYTES + 1));
        assert_eq!(b.bytes(), 2 * MAX_CONTEXT_LINE_BYTES);
        let info = b.info();
        assert!(
            info.truncated && info.omitted_lines == 0,
            "cut, not left out"
        );
    }

    #[test]
    fn chained_tracebacks_stay_one_block() {
        let mut s = Streams::new(4, 64, 1 << 16);
        let key: StreamKey = (Some(3), None);
        let lines = [
            ("CONTEXT_PY_TRACEBACK", "Traceback (most recent call last):"),
            ("CONTEXT_PY_FRAME", "  File \"a.py\", line 1, in f"),
        ];
        for (code, line) in lines {
            let e = ctx(code, line);
            s.block_line(key.clone(), classify(&e).expect("block"), &e, 0, 1000);
        }
        let exc = event("PYTHON_KEY_ERROR", Role::Root, "script_error")
            .line("KeyError: 'a'")
            .build();
        assert!(s.other_match(&key, &exc, 0, 1000).appended);
        for (code, line) in [
            (
                "CONTEXT_PY_CHAIN",
                "The above exception was the direct cause of the following exception:",
            ),
            ("CONTEXT_PY_TRACEBACK", "Traceback (most recent call last):"),
        ] {
            let e = ctx(code, line);
            s.block_line(key.clone(), classify(&e).expect("block"), &e, 0, 1000);
        }
        let block = &s.get(&key).expect("stream").block;
        assert_eq!(texts(block).len(), 5);
        // A fresh traceback without a chain line starts over.
        let e = ctx("CONTEXT_PY_TRACEBACK", "Traceback (most recent call last):");
        s.block_line(key.clone(), LineKind::Start, &e, 0, 1000);
        assert_eq!(s.get(&key).expect("stream").block.len(), 1);
    }

    #[test]
    fn stale_blocks_restart_and_streams_are_capped() {
        let mut s = Streams::new(2, 64, 1 << 16);
        let e = ctx("CONTEXT_CPP_FRAME", "frame #0: x");
        let f = ctx("CONTEXT_CPP_FRAME", "frame #1: y");
        s.block_line((Some(1), None), LineKind::Continue, &e, 0, 10);
        s.block_line((Some(1), None), LineKind::Continue, &f, 5, 10);
        assert_eq!(s.get(&(Some(1), None)).expect("s").block.len(), 2);
        s.block_line((Some(1), None), LineKind::Continue, &e, 100, 10);
        assert_eq!(s.get(&(Some(1), None)).expect("s").block.len(), 1);
        s.block_line((Some(2), None), LineKind::Continue, &e, 100, 10);
        s.block_line((Some(3), None), LineKind::Continue, &e, 100, 10);
        assert_eq!(s.len(), 2);
        assert_eq!(s.dropped, 1);
        assert!(
            s.get(&(Some(1), None)).is_none(),
            "least recently touched goes"
        );
    }

    #[test]
    fn torchrun_root_cause_row_names_rank_and_host() {
        let mut s = Streams::new(4, 64, 1 << 16);
        let key: StreamKey = (None, None);
        let header = ctx(
            "CONTEXT_ELASTIC_ROOT_CAUSE",
            "Root Cause (first observed failure):",
        );
        s.block_line(key.clone(), LineKind::RootCauseSection, &header, 0, 10);
        let host = event("CONTEXT_ELASTIC_FIELD", Role::Info, "context")
            .domain("context")
            .line("  host      : node-05")
            .cap("node", "node-05")
            .build();
        s.block_line(key.clone(), LineKind::SummaryField, &host, 0, 10);
        let row = event("TORCHELASTIC_CHILD_FAILED", Role::Symptom, "crash")
            .line("  rank      : 17 (local_rank: 1)")
            .cap("rank", "17")
            .cap("local_rank", "1")
            .build();
        let a = s.other_match(&key, &row, 0, 10);
        assert!(a.appended && a.summary);
        assert_eq!(s.root_cause, Some((17, Some("node-05".to_string()))));
    }
}
