//! The scanning engine: a chunk of lines in, confirmed matches with captures out.
//!
//! Flow for one chunk: the [`Matcher`] scans the whole buffer once and reports raw hits; hits
//! are mapped back to their lines; each hit line is decoded ([`crate::envelope`]) and the hit is
//! confirmed by the entry's anchored `regex` on that line's message, which also yields the
//! captures. JSON envelope lines are decoded first and their messages scanned one by one, since
//! escaping can hide a match from the raw bytes. Everything a line costs beyond the one
//! buffer-wide scan is paid only by lines that hit.
//!
//! Lines with ANSI escape sequences (colours `ESC[1;31m`, other CSI sequences, OSC titles and
//! links) match as if the sequences were absent: one `memchr` pass per chunk finds the lines
//! holding an ESC byte, and only those are copied without their sequences ([`strip_ansi`]),
//! scanned and confirmed on the copy. The event then quotes the cleaned line, and its captures
//! (and any offsets into [`Hit::record`]) refer to the cleaned line, not to the raw bytes.

use std::sync::Arc;

use crate::envelope;
use crate::kb::KnowledgeBase;
use crate::matcher::{literals, HyperscanMatcher, MatchError, Matcher, RawHit};
use crate::record::LogRecord;

/// A confirmed match of one KB entry on one line.
#[derive(Debug)]
pub struct Hit<'a> {
    /// Index into [`KnowledgeBase::entries`].
    pub entry: usize,
    /// Dense id of the pattern that confirmed the match.
    pub pattern: usize,
    /// 1-based line number within the stream (file or record payload).
    pub line: u64,
    /// The decoded line the match was confirmed on.
    pub record: &'a LogRecord<'a>,
    /// Named groups of the confirming pattern that took part in the match, in pattern order.
    pub captures: Vec<(String, String)>,
    /// Other entries that matched the same line and yielded to this one (one line, one event).
    pub also: Vec<usize>,
}

/// A compiled KB: the knowledge base and its matcher. Share it with `Arc`.
#[derive(Debug)]
pub struct Engine<M: Matcher = HyperscanMatcher> {
    /// The knowledge base; pattern ids index its [`KnowledgeBase::patterns`].
    pub kb: Arc<KnowledgeBase>,
    /// The multi-pattern matcher compiled from `kb.patterns`, in order.
    pub matcher: M,
    /// One event per line (the default): when several entries match one line, the winner
    /// ([`KnowledgeBase::wins`]) carries it and lists the others in [`Hit::also`]; context
    /// entries pass through beside it. `kb check` turns it off to test every entry's own
    /// examples.
    pub one_event_per_line: bool,
    /// Id of the first prefilter pattern ([`Compile::prefilter`]) in the database, when it has
    /// any: hits of these ids only mark lines for [`Engine::scan_chunk_with`]'s `on_unmatched`.
    prefilter_from: Option<u32>,
}

/// How [`Engine::compile`] builds the database.
#[derive(Debug, Clone, Copy, Default)]
pub struct Compile<'a> {
    /// Keep the training-progress entries (`faultline report`, `scan --progress-lines`).
    pub progress: bool,
    /// Patterns scanned in the same Hyperscan pass as the KB's: a raw line that one of them
    /// matches and no entry confirms is handed to [`Engine::scan_chunk_with`]'s
    /// `on_unmatched`, decoded once, as the engine decoded it (the unknown-line gate,
    /// [`crate::templates::gate::PATTERNS`]).
    pub prefilter: &'a [&'a str],
}

/// Per-worker state: the matcher's scratch and reusable buffers. Not shared.
pub struct Worker<M: Matcher> {
    scratch: M::Scratch,
    hits: Vec<RawHit>,
    line_hits: Vec<RawHit>,
    patterns: Vec<u32>,
    seen: Vec<usize>,
    json: Vec<LogRecord<'static>>,
    /// A line without its ANSI escape sequences.
    clean: Vec<u8>,
    /// Starts of the chunk's JSON envelope lines and of its lines with an ESC ([`mark_lines`]).
    json_starts: Vec<usize>,
    escape_starts: Vec<usize>,
    /// JSON lines decoded ([`Engine::json_lines_decoded`]).
    json_decoded: u64,
    /// Capture slots per pattern (each regex needs its own), made when the pattern first
    /// confirms a hit (its regex is built then too: [`crate::kb::Pattern::regex`]).
    caps: Vec<Option<(usize, regex_automata::util::captures::Captures)>>,
}

/// What [`Engine::scan_chunk_with`] calls with each unmatched message: its line and record.
pub type OnUnmatched<'a> = dyn FnMut(u64, &LogRecord<'_>) + 'a;

/// One scan's input: the chunk, what the caller knows of it, and its lines decoded already.
#[derive(Clone, Copy)]
struct Scan<'a> {
    chunk: &'a [u8],
    info: ChunkInfo,
    decoded: Option<&'a JsonLines>,
}

/// What the caller knows about a chunk.
#[derive(Debug, Clone, Copy, Default)]
pub struct ChunkInfo {
    /// Line number of the chunk's first line (1-based).
    pub first_line: u64,
    /// The chunk is a single line that was cut at the line-length limit.
    pub truncated: bool,
}

/// Lines of a chunk that the caller has already decoded as JSON envelopes (`input.envelope =
/// json` decodes every line to validate its record before the record joins the scan buffer):
/// the engine reads their records from here instead of decoding them again.
#[derive(Debug, Default)]
pub struct JsonLines {
    /// Per decoded line, in ascending order: its start in the chunk and its records' range.
    lines: Vec<(usize, std::ops::Range<usize>)>,
    records: Vec<LogRecord<'static>>,
    /// Lines decoded (kept or not).
    parsed: u64,
}

impl JsonLines {
    /// Forgets every line, and the count of lines decoded.
    pub fn clear(&mut self) {
        self.lines.clear();
        self.records.clear();
        self.parsed = 0;
    }

    /// Lines held, for [`JsonLines::truncate`].
    pub fn len(&self) -> usize {
        self.lines.len()
    }

    /// Whether no line is held.
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// Forgets the lines after the first `len` (a record that turned out undecodable).
    pub fn truncate(&mut self, len: usize) {
        self.lines.truncate(len);
        let records = self.lines.last().map_or(0, |(_, r)| r.end);
        self.records.truncate(records);
    }

    /// Decodes `line`, which will start at `start` in the chunk (after the last line added),
    /// and keeps its records (without colour codes) when it is a JSON envelope.
    pub fn decode(&mut self, start: usize, line: &[u8]) -> Result<(), envelope::EnvelopeError> {
        self.parsed += 1;
        let from = self.records.len();
        if let Err(e) = envelope::decode_json(line, &mut self.records) {
            self.records.truncate(from);
            return Err(e);
        }
        self.records[from..].iter_mut().for_each(strip_message);
        self.lines.push((start, from..self.records.len()));
        Ok(())
    }

    /// Lines decoded since the last [`JsonLines::clear`] (kept or not).
    pub fn parsed(&self) -> u64 {
        self.parsed
    }
}

impl Engine<HyperscanMatcher> {
    /// Compiles `kb` without its training-progress entries
    /// ([`KnowledgeBase::without_progress`]) into one Hyperscan database, or loads it from the
    /// database cache ([`crate::cache::dir`]) when this KB was compiled before.
    pub fn new(kb: KnowledgeBase) -> Result<Self, MatchError> {
        Self::compile(kb, Compile::default())
    }

    /// [`Engine::new`] keeping the progress entries: `faultline report` and `scan --progress-lines`.
    pub fn with_progress(kb: KnowledgeBase) -> Result<Self, MatchError> {
        let progress = Compile {
            progress: true,
            ..Compile::default()
        };
        Self::compile(kb, progress)
    }

    /// Compiles `kb` (and `how.prefilter` after its patterns) into one database.
    pub fn compile(kb: KnowledgeBase, how: Compile<'_>) -> Result<Self, MatchError> {
        let kb = if how.progress {
            kb
        } else {
            kb.without_progress()
        };
        let mut sources: Vec<&str> = kb.patterns.iter().map(|p| p.source.as_str()).collect();
        let prefilter_from = (!how.prefilter.is_empty()).then_some(sources.len() as u32);
        sources.extend_from_slice(how.prefilter);
        let cache = crate::cache::dir();
        let plan = plan(&kb, &sources, literals::MIN_LEN);
        let (matcher, _) = HyperscanMatcher::compile_plan(plan, cache.as_deref())?;
        Ok(Engine {
            kb: Arc::new(kb),
            matcher,
            one_event_per_line: true,
            prefilter_from,
        })
    }
}

/// What the shipped database scans for: `kb`'s patterns (the first of `sources`) by their
/// required literals of `min_len` bytes or more ([`crate::matcher::literals`], from the syntax
/// trees of the KB's patterns), the rest of `sources` (the unknown-line prefilter) and any
/// KB pattern without such literals for themselves. Hits are confirmed on their line either way,
/// so the events are those of a database of the patterns.
///
/// The plan is kept in the cache directory ([`crate::cache`]) under a hash of this build,
/// `min_len` and every source, and read from there next time: planning parses every pattern,
/// which was a fifth of a start-up, and a KB checked before is otherwise parsed only pattern by
/// pattern as hits need it.
pub fn plan<S: AsRef<str>>(kb: &KnowledgeBase, sources: &[S], min_len: usize) -> literals::Plan {
    plan_cached(kb, sources, min_len, crate::cache::dir().as_deref())
}

/// [`plan`] with the cache in `dir` (none: planned every time).
pub fn plan_cached<S: AsRef<str>>(
    kb: &KnowledgeBase,
    sources: &[S],
    min_len: usize,
    dir: Option<&std::path::Path>,
) -> literals::Plan {
    let path = dir.map(|dir| {
        let mut key = crate::record::Fnv::new();
        key.write(crate::cache::BUILD_ID.as_bytes());
        key.write(&min_len.to_le_bytes());
        for s in sources {
            key.write(&[0]);
            key.write(s.as_ref().as_bytes());
        }
        dir.join(format!("plan-{:016x}.json", key.finish()))
    });
    if let Some(plan) = path.as_deref().and_then(|p| read_plan(p, sources.len())) {
        return plan;
    }
    let hirs: Vec<&regex_syntax::hir::Hir> = kb.patterns.iter().map(|p| p.hir()).collect();
    let plan = literals::Plan::parsed(sources, &hirs, min_len);
    if let (Some(path), Ok(bytes)) = (path, serde_json::to_vec(&plan)) {
        // Best effort: a plan that cannot be kept is made again next time.
        let _ = crate::cache::write_checked(&path, &bytes);
        if let Some(dir) = path.parent() {
            crate::cache::prune(dir, "plan-", crate::cache::KEEP);
        }
    }
    plan
}

/// A kept plan of `patterns` patterns, or `None` when it is missing, corrupt or another's.
fn read_plan(path: &std::path::Path, patterns: usize) -> Option<literals::Plan> {
    let bytes = crate::cache::read_checked(path)?;
    serde_json::from_slice::<literals::Plan>(&bytes)
        .ok()
        .filter(|plan| plan.patterns() == patterns && plan.is_consistent())
}

impl<M: Matcher> Engine<M> {
    /// Pairs a KB with any matcher compiled from its patterns, in order (tests use the oracle).
    pub fn with_matcher(kb: Arc<KnowledgeBase>, matcher: M) -> Self {
        Engine {
            kb,
            matcher,
            one_event_per_line: true,
            prefilter_from: None,
        }
    }

    /// State for one worker thread or task.
    pub fn worker(&self) -> Result<Worker<M>, MatchError> {
        Ok(Worker {
            scratch: self.matcher.scratch()?,
            hits: Vec::new(),
            line_hits: Vec::new(),
            patterns: Vec::new(),
            seen: Vec::new(),
            json: Vec::new(),
            clean: Vec::new(),
            json_starts: Vec::new(),
            escape_starts: Vec::new(),
            json_decoded: 0,
            caps: vec![None; self.kb.patterns.len()],
        })
    }

    /// Scans `chunk`, a run of `\n`-separated lines, and calls `on_hit` for every confirmed
    /// match in line order. Returns the number of lines in the chunk.
    pub fn scan_chunk(
        &self,
        w: &mut Worker<M>,
        chunk: &[u8],
        info: ChunkInfo,
        on_hit: &mut dyn FnMut(Hit<'_>),
    ) -> Result<u64, MatchError> {
        let scan = Scan {
            chunk,
            info,
            decoded: None,
        };
        let mut counter = self.scan_lines(w, scan, on_hit, None)?;
        Ok(counter.total(chunk))
    }

    /// [`Engine::scan_chunk`], also calling `on_unmatched(line, record)` for every decoded
    /// message that no entry confirmed on, in the same pass and from the same decoding: the
    /// messages of JSON envelope lines and of coloured lines, and the raw lines that a
    /// prefilter pattern ([`Compile::prefilter`]) matched; every line when the engine was
    /// compiled without a prefilter. This is how the unknown-line finder sees a chunk: nothing
    /// is decoded twice.
    pub fn scan_chunk_with(
        &self,
        w: &mut Worker<M>,
        chunk: &[u8],
        info: ChunkInfo,
        on_hit: &mut dyn FnMut(Hit<'_>),
        on_unmatched: &mut dyn FnMut(u64, &LogRecord<'_>),
    ) -> Result<u64, MatchError> {
        let scan = Scan {
            chunk,
            info,
            decoded: None,
        };
        let mut counter = self.scan_lines(w, scan, on_hit, Some(on_unmatched))?;
        Ok(counter.total(chunk))
    }

    /// The Kafka pipeline's scan of a batch buffer: [`Engine::scan_chunk_hits`] with the lines
    /// the caller already decoded (`decoded`), and `on_unmatched` as in
    /// [`Engine::scan_chunk_with`] when given.
    pub fn scan_batch(
        &self,
        w: &mut Worker<M>,
        chunk: &[u8],
        decoded: &JsonLines,
        on_hit: &mut dyn FnMut(Hit<'_>),
        on_unmatched: Option<&mut OnUnmatched<'_>>,
    ) -> Result<(), MatchError> {
        let scan = Scan {
            chunk,
            info: ChunkInfo {
                first_line: 1,
                truncated: false,
            },
            decoded: Some(decoded),
        };
        self.scan_lines(w, scan, on_hit, on_unmatched).map(|_| ())
    }

    /// [`Engine::scan_chunk`] for a caller that counts the chunk's lines itself (the Kafka
    /// pipeline counts each record's, to map hits back to records): lines are counted only up
    /// to the last hit, not to the end of the chunk.
    pub fn scan_chunk_hits(
        &self,
        w: &mut Worker<M>,
        chunk: &[u8],
        info: ChunkInfo,
        on_hit: &mut dyn FnMut(Hit<'_>),
    ) -> Result<(), MatchError> {
        let scan = Scan {
            chunk,
            info,
            decoded: None,
        };
        self.scan_lines(w, scan, on_hit, None).map(|_| ())
    }

    /// JSON lines whose envelopes were decoded by this worker (each line at most once per
    /// scan: the decode-once guarantee's witness).
    pub fn json_lines_decoded(w: &Worker<M>) -> u64 {
        w.json_decoded
    }

    /// The scan; returns the line counter where the last hit left it.
    fn scan_lines(
        &self,
        w: &mut Worker<M>,
        Scan {
            chunk,
            info,
            decoded,
        }: Scan<'_>,
        on_hit: &mut dyn FnMut(Hit<'_>),
        mut on_unmatched: Option<&mut OnUnmatched<'_>>,
    ) -> Result<LineCounter, MatchError> {
        w.hits.clear();
        self.matcher.find(&mut w.scratch, chunk, &mut w.hits)?;
        w.hits.sort_unstable();
        let kb_patterns = self.prefilter_from.unwrap_or(u32::MAX);
        if on_unmatched.is_none() && self.prefilter_from.is_some() {
            // Nobody asked for unmatched lines: the prefilter's hits mark nothing.
            w.hits.retain(|h| h.pattern < kb_patterns);
        }
        // Without a prefilter in the database, every line is a candidate.
        let every_line = on_unmatched.is_some() && self.prefilter_from.is_none();
        let mut all_lines = every_line.then(|| line_starts(chunk)).into_iter().flatten();
        let mut next_line = all_lines.next();

        // Taken for the scan (the loop lends `w` to the confirmations), given back at its end.
        let mut json_starts = std::mem::take(&mut w.json_starts);
        let mut escape_starts = std::mem::take(&mut w.escape_starts);
        mark_lines(chunk, &mut json_starts, &mut escape_starts);
        let mut json_lines = json_starts.iter().copied().peekable();
        let mut pre = decoded.map_or(&[][..], |d| &d.lines[..]).iter().peekable();
        let mut escape_lines = escape_starts.iter().copied().peekable();
        let mut counter = LineCounter {
            pos: 0,
            first: info.first_line,
            line: info.first_line,
        };
        let mut i = 0;
        loop {
            // The next line that needs a look: it has a hit, is a JSON envelope or holds an ESC.
            let next_hit = w.hits.get(i).map(|h| line_start(chunk, h.end as usize));
            let next_json = json_lines.peek().copied();
            let next_escape = escape_lines.peek().copied();
            let next_pre = pre.peek().map(|(at, _)| *at);
            let Some(start) = [next_hit, next_json, next_escape, next_line, next_pre]
                .into_iter()
                .flatten()
                .min()
            else {
                break;
            };
            let end = line_end(chunk, start);
            let is_json = next_json == Some(start);
            if is_json {
                json_lines.next();
            }
            let records = match next_pre == Some(start) {
                true => pre.next().map(|(_, r)| r.clone()),
                false => None,
            };
            let has_escape = next_escape == Some(start);
            if has_escape {
                escape_lines.next();
            }
            let mut candidate = next_line == Some(start);
            if candidate {
                next_line = all_lines.next();
            }
            // The hits on this line: contiguous, since hits are sorted by end offset.
            let first = i;
            while i < w.hits.len() && (w.hits[i].end as usize) <= end {
                candidate |= w.hits[i].pattern >= kb_patterns;
                i += 1;
            }
            let line_no = counter.line_at(chunk, start);
            let line = &chunk[start..end];
            if let (Some(range), Some(d)) = (records, decoded) {
                // Decoded already: its records, never the raw line.
                for record in &d.records[range] {
                    let unmatched = on_unmatched.as_deref_mut();
                    self.message(w, record, line_no, on_hit, unmatched)?;
                }
                continue;
            }
            let unmatched = on_unmatched.as_deref_mut();
            if is_json && self.json_line(w, line, line_no, info, on_hit, unmatched)? {
                continue;
            }
            let unmatched = on_unmatched.as_deref_mut();
            if has_escape {
                // The raw line's hits (if any) are superseded by the cleaned line's.
                let mut clean = std::mem::take(&mut w.clean);
                strip_ansi(line, &mut clean);
                let mut record = envelope::decode_raw(&clean);
                record.truncated = info.truncated;
                self.message(w, &record, line_no, on_hit, unmatched)?;
                drop(record);
                w.clean = clean;
                continue;
            }
            // A line whose JSON did not decode is read as text, a candidate whatever it holds.
            let candidate = candidate || is_json;
            let kb_hit = w.hits[first..i].iter().any(|h| h.pattern < kb_patterns);
            if kb_hit || (candidate && unmatched.is_some()) {
                let mut record = envelope::decode_raw(line);
                record.truncated = info.truncated;
                let hits = std::mem::take(&mut w.hits);
                let confirmed = self.confirm(w, &hits[first..i], &record, line_no, on_hit);
                w.hits = hits;
                if let (false, true, Some(f)) = (confirmed, candidate, unmatched) {
                    f(line_no, &record);
                }
            }
        }
        w.json_starts = json_starts;
        w.escape_starts = escape_starts;
        Ok(counter)
    }

    /// A JSON envelope line: each of its records scanned and confirmed on its message; `false`
    /// when it does not decode (the caller reads it as text).
    fn json_line(
        &self,
        w: &mut Worker<M>,
        line: &[u8],
        line_no: u64,
        info: ChunkInfo,
        on_hit: &mut dyn FnMut(Hit<'_>),
        mut on_unmatched: Option<&mut OnUnmatched<'_>>,
    ) -> Result<bool, MatchError> {
        let mut records = std::mem::take(&mut w.json);
        records.clear();
        w.json_decoded += 1;
        let decoded = envelope::decode_json(line, &mut records).is_ok();
        let mut result = Ok(decoded);
        if decoded {
            for record in &mut records {
                // A record cut by the envelope's record limit stays marked.
                record.truncated |= info.truncated;
                strip_message(record);
                let unmatched = on_unmatched.as_deref_mut();
                if let Err(e) = self.message(w, record, line_no, on_hit, unmatched) {
                    result = Err(e);
                    break;
                }
            }
        }
        w.json = records;
        result
    }

    /// One decoded message: scanned on its own (escaping or colour codes can hide a match from
    /// the raw bytes), its hits confirmed; unmatched when none is.
    fn message(
        &self,
        w: &mut Worker<M>,
        record: &LogRecord<'_>,
        line_no: u64,
        on_hit: &mut dyn FnMut(Hit<'_>),
        on_unmatched: Option<&mut OnUnmatched<'_>>,
    ) -> Result<(), MatchError> {
        w.line_hits.clear();
        self.matcher
            .find(&mut w.scratch, &record.message, &mut w.line_hits)?;
        let hits = std::mem::take(&mut w.line_hits);
        let confirmed = self.confirm(w, &hits, record, line_no, on_hit);
        w.line_hits = hits;
        if let (false, Some(f)) = (confirmed, on_unmatched) {
            f(line_no, record);
        }
        Ok(())
    }

    /// Confirms the raw `hits` of one line on its decoded message: one match per entry, from
    /// the entry's first pattern that matches the message; then one event per line (see
    /// [`Engine::one_event_per_line`]).
    fn confirm(
        &self,
        w: &mut Worker<M>,
        hits: &[RawHit],
        record: &LogRecord<'_>,
        line: u64,
        on_hit: &mut dyn FnMut(Hit<'_>),
    ) -> bool {
        w.patterns.clear();
        w.patterns.extend(hits.iter().map(|h| h.pattern));
        w.patterns.sort_unstable();
        w.patterns.dedup();
        w.seen.clear();
        let mut confirmed: Vec<Hit<'_>> = Vec::new();
        for &p in &w.patterns {
            let Some(pattern) = self.kb.patterns.get(p as usize) else {
                continue;
            };
            if w.seen.contains(&pattern.entry) {
                continue;
            }
            let Some(slot) = w.caps.get_mut(p as usize) else {
                continue;
            };
            // Only a KB that skipped `faultline kb check` has a pattern without a regex; it
            // never confirms (the build said why, once).
            if !pattern.may_match(&record.message) {
                continue;
            }
            let (variant, Ok(regex)) = pattern.regex_for(record.message.len()) else {
                continue;
            };
            if slot.as_ref().is_none_or(|(v, _)| *v != variant) {
                *slot = Some((variant, regex.create_captures()));
            }
            let Some((_, caps)) = slot.as_mut() else {
                continue;
            };
            regex.captures(&record.message[..], caps);
            if !caps.is_match() {
                continue;
            }
            if self.kb.entries[pattern.entry].whole_line
                && !spans_message(&record.message, caps.get_match().map(|m| m.range()))
            {
                continue;
            }
            w.seen.push(pattern.entry);
            let captures = caps
                .group_info()
                .pattern_names(regex_automata::PatternID::ZERO)
                .enumerate()
                .filter_map(|(i, name)| {
                    let span = caps.get_group(i)?;
                    Some((
                        name?.to_string(),
                        String::from_utf8_lossy(&record.message[span.range()]).into_owned(),
                    ))
                })
                .collect();
            confirmed.push(Hit {
                entry: pattern.entry,
                pattern: p as usize,
                line,
                record,
                captures,
                also: Vec::new(),
            });
        }
        if confirmed.is_empty() {
            return false;
        }
        if !self.one_event_per_line || confirmed.len() < 2 {
            confirmed.into_iter().for_each(on_hit);
            return true;
        }
        // Context entries are block lines: they never compete and always pass through.
        let kb = &self.kb;
        let competes = |h: &Hit<'_>| kb.entries[h.entry].category != "context";
        let winner = confirmed
            .iter()
            .enumerate()
            .filter(|(_, h)| competes(h))
            .map(|(i, h)| (i, h.entry))
            .reduce(|best, next| if kb.wins(next.1, best.1) { next } else { best })
            .map(|(i, _)| i);
        let also: Vec<usize> = confirmed
            .iter()
            .enumerate()
            .filter(|(i, h)| competes(h) && Some(*i) != winner)
            .map(|(_, h)| h.entry)
            .collect();
        let winner_entry = winner.map(|i| confirmed[i].entry);
        for (i, mut hit) in confirmed.into_iter().enumerate() {
            if Some(i) == winner {
                hit.also.clone_from(&also);
            } else if competes(&hit) {
                continue;
            } else if winner_entry.is_some_and(|w| kb.beats.contains(&(w, hit.entry))) {
                // A context entry the winner names in `supersedes` yields too.
                continue;
            }
            on_hit(hit);
        }
        true
    }
}

/// Whether `span` covers the whole of `message`, blanks and Markdown emphasis or quoting around
/// it aside (`**Killed**`, `> Killed`).
fn spans_message(message: &[u8], span: Option<std::ops::Range<usize>>) -> bool {
    let Some(span) = span else {
        return false;
    };
    let noise = |b: &u8| b.is_ascii_whitespace() || matches!(b, b'*' | b'_' | b'`' | b'>');
    message[..span.start].iter().all(noise) && message[span.end..].iter().all(noise)
}

/// Counts lines incrementally as the scan moves forward through a chunk.
struct LineCounter {
    pos: usize,
    /// The chunk's first line number.
    first: u64,
    line: u64,
}

impl LineCounter {
    fn line_at(&mut self, chunk: &[u8], start: usize) -> u64 {
        if start > self.pos {
            self.line += memchr::memchr_iter(b'\n', &chunk[self.pos..start]).count() as u64;
            self.pos = start;
        }
        self.line
    }

    /// Lines in the whole chunk: its newlines, plus a last line without one. Counts on from
    /// where the hits left off, so no byte is counted twice.
    fn total(&mut self, chunk: &[u8]) -> u64 {
        let newlines = self.line_at(chunk, chunk.len()) - self.first;
        newlines + u64::from(chunk.last().is_some_and(|&b| b != b'\n'))
    }
}

/// The start of the line containing the byte before `end` (a match's last byte).
fn line_start(chunk: &[u8], end: usize) -> usize {
    let end = end.min(chunk.len());
    memchr::memrchr(b'\n', &chunk[..end]).map_or(0, |i| i + 1)
}

fn line_end(chunk: &[u8], from: usize) -> usize {
    memchr::memchr(b'\n', &chunk[from..]).map_or(chunk.len(), |i| from + i)
}

/// The escape byte that starts every ANSI sequence.
pub const ESC: u8 = 0x1b;

/// Starts of the lines whose first byte is `{` (the JSON envelope candidates) and of the lines
/// holding an ESC byte (each once), in order, from one pass over the chunk. Looking for the rare
/// `{` and checking the byte before beat searching for "\n{" (whose prefilter stops at every
/// newline) on plain-text logs, and one pass for both bytes beats a pass for each.
fn mark_lines(chunk: &[u8], json: &mut Vec<usize>, escape: &mut Vec<usize>) {
    json.clear();
    escape.clear();
    // An ESC before this offset is on a line already marked.
    let mut marked_to = 0;
    for i in memchr::memchr2_iter(b'{', ESC, chunk) {
        if chunk[i] == b'{' {
            if i == 0 || chunk[i - 1] == b'\n' {
                json.push(i);
            }
        } else if i >= marked_to {
            escape.push(memchr::memrchr(b'\n', &chunk[..i]).map_or(0, |nl| nl + 1));
            marked_to = line_end(chunk, i) + 1;
        }
    }
}

/// Removes the ANSI escape sequences of a decoded record's message (copied only when it holds
/// an ESC), so that it is matched, mined and quoted as the program printed it without colour.
pub fn strip_message(record: &mut LogRecord<'_>) {
    if memchr::memchr(ESC, &record.message).is_some() {
        let mut clean = Vec::with_capacity(record.message.len());
        strip_ansi(&record.message, &mut clean);
        record.message = std::borrow::Cow::Owned(clean);
    }
}

/// Copies `line` into `out` (cleared first) without its ANSI escape sequences: CSI (`ESC [`,
/// parameter and intermediate bytes, a final byte: colours such as `ESC[1;31m`, `ESC[0m`,
/// cursor moves, erase `ESC[K`), OSC (`ESC ]` up to BEL or `ESC \`: window titles,
/// hyperlinks), and the short escapes (`ESC ( B`, `ESC =`, `ESC 7`). A sequence cut off by the
/// end of the line is dropped to there; a lone ESC is dropped.
pub fn strip_ansi(line: &[u8], out: &mut Vec<u8>) {
    out.clear();
    let mut i = 0;
    while let Some(at) = memchr::memchr(ESC, &line[i..]) {
        out.extend_from_slice(&line[i..i + at]);
        i += at + 1;
        let skip = |i: &mut usize, range: std::ops::RangeInclusive<u8>| {
            while line.get(*i).is_some_and(|b| range.contains(b)) {
                *i += 1;
            }
        };
        match line.get(i) {
            Some(b'[') => {
                i += 1;
                skip(&mut i, 0x20..=0x3f);
                if line.get(i).is_some_and(|b| (0x40..=0x7e).contains(b)) {
                    i += 1;
                }
            }
            Some(b']') => {
                i += 1;
                while let Some(&b) = line.get(i) {
                    i += 1;
                    if b == 0x07 {
                        break;
                    }
                    if b == ESC && line.get(i) == Some(&b'\\') {
                        i += 1;
                        break;
                    }
                }
            }
            Some(0x20..=0x2f) => {
                skip(&mut i, 0x20..=0x2f);
                if line.get(i).is_some_and(|b| (0x30..=0x7e).contains(b)) {
                    i += 1;
                }
            }
            Some(0x30..=0x7e) => i += 1,
            _ => {}
        }
    }
    out.extend_from_slice(&line[i..]);
}

/// Offsets of every line's first byte.
fn line_starts(chunk: &[u8]) -> impl Iterator<Item = usize> + '_ {
    let first = (!chunk.is_empty()).then_some(0);
    let ends = memchr::memchr_iter(b'\n', chunk).map(|nl| nl + 1);
    first
        .into_iter()
        .chain(ends.filter(move |&at| at < chunk.len()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kb::KnowledgeBase;
    use crate::matcher::RegexMatcher;
    use crate::testutil::entry_toml;

    fn kb() -> KnowledgeBase {
        let entry =
            |id: &str, code: &str, pattern: &str| entry_toml(id, code, "root", pattern, false);
        KnowledgeBase::from_files(
            vec![
                (
                    "test/a.toml".into(),
                    entry("test/a", "A", r"boom (?P<n>\d+)"),
                ),
                ("test/b.toml".into(), entry("test/b", "B", r"fail[^!\n]*!")),
                ("test/c.toml".into(), entry("test/c", "C", r"cross[^!]*end")),
            ],
            "test",
        )
        .expect("valid")
    }

    fn scan_with<M: Matcher>(engine: &Engine<M>, input: &str) -> Vec<(u64, String, String)> {
        let mut w = engine.worker().expect("scratch");
        let mut out = Vec::new();
        engine
            .scan_chunk(
                &mut w,
                input.as_bytes(),
                ChunkInfo {
                    first_line: 1,
                    truncated: false,
                },
                &mut |h| {
                    out.push((
                        h.line,
                        engine.kb.entries[h.entry].error_code.clone(),
                        format!("{:?}", h.captures),
                    ))
                },
            )
            .expect("scan");
        out
    }

    fn both(input: &str) -> Vec<(u64, String, String)> {
        let kb = kb();
        let hs = Engine::new(kb.clone()).expect("compiles");
        let sources: Vec<&str> = kb.patterns.iter().map(|p| p.source.as_str()).collect();
        let oracle = Engine::with_matcher(
            Arc::new(kb.clone()),
            RegexMatcher::compile(&sources).expect("compiles"),
        );
        let a = scan_with(&hs, input);
        let b = scan_with(&oracle, input);
        assert_eq!(a, b, "Hyperscan and the oracle disagree on {input:?}");
        a
    }

    #[test]
    fn one_pass_marks_the_json_lines_and_each_line_with_an_escape_once() {
        let chunk: &[u8] =
            b"{\"a\":1}\nplain {x}\n\x1b[31mred\x1b[0m and {\n{\x1b[1m\n\n {no}\nlast \x1b";
        let (mut json, mut escape) = (vec![99], vec![99]);
        mark_lines(chunk, &mut json, &mut escape);
        // The same, line by line.
        let (mut want_json, mut want_escape, mut start) = (Vec::new(), Vec::new(), 0);
        for line in chunk.split(|&b| b == b'\n') {
            if line.first() == Some(&b'{') {
                want_json.push(start);
            }
            if line.contains(&ESC) {
                want_escape.push(start);
            }
            start += line.len() + 1;
        }
        assert_eq!(json, want_json);
        assert_eq!(escape, want_escape);
        assert_eq!((json.len(), escape.len()), (2, 3));
    }

    #[test]
    fn a_kept_plan_is_the_plan_and_a_corrupt_one_is_made_again() {
        let dir = tempfile::tempdir().expect("tempdir");
        let kb = KnowledgeBase::embedded().expect("embedded");
        let mut sources: Vec<&str> = kb.patterns.iter().map(|p| p.source.as_str()).collect();
        sources.push("gate (?i:error)");
        let fresh = plan_cached(&kb, &sources, literals::MIN_LEN, None);
        let (by_literal, _) = fresh.literal_counts();
        assert!(by_literal > kb.patterns.len() / 2, "{by_literal}");
        let first = plan_cached(&kb, &sources, literals::MIN_LEN, Some(dir.path()));
        let kept: Vec<_> = std::fs::read_dir(dir.path())
            .expect("list")
            .map(|e| e.expect("entry").path())
            .collect();
        assert_eq!(kept.len(), 1, "{kept:?}");
        // Read back, the same plan; with another minimum length, another file.
        std::fs::copy(&kept[0], dir.path().join("copy")).expect("copy");
        let second = plan_cached(&kb, &sources, literals::MIN_LEN, Some(dir.path()));
        assert_eq!((&first, &second), (&fresh, &fresh));
        plan_cached(&kb, &sources, literals::MIN_LEN + 1, Some(dir.path()));
        assert_eq!(std::fs::read_dir(dir.path()).expect("list").count(), 3);
        // A kept plan that does not fit its patterns is not used.
        let other = plan_cached(&kb, &sources[..10], literals::MIN_LEN, None);
        let bytes = serde_json::to_vec(&other).expect("json");
        crate::cache::write_checked(&kept[0], &bytes).expect("write");
        let third = plan_cached(&kb, &sources, literals::MIN_LEN, Some(dir.path()));
        assert_eq!(third, fresh);
        assert_eq!(
            read_plan(&kept[0], sources.len()),
            Some(fresh),
            "and it is replaced"
        );
    }

    #[test]
    fn hits_map_to_lines_and_captures() {
        let out = both("ok\nboom 42\nfine\n[rank3]: fail now!\n");
        assert_eq!(
            out,
            vec![
                (2, "A".into(), r#"[("n", "42")]"#.into()),
                (4, "B".into(), "[]".into()),
            ]
        );
    }

    #[test]
    fn a_patterns_regex_is_built_when_it_first_hits() {
        let engine = Engine::new(kb()).expect("compiles");
        let built =
            |e: &Engine| -> Vec<bool> { e.kb.patterns.iter().map(|p| p.regex_built()).collect() };
        assert_eq!(built(&engine), [false, false, false], "none at load");
        assert_eq!(scan_with(&engine, "quiet\nboom 3\n").len(), 1);
        assert_eq!(
            built(&engine),
            [true, false, false],
            "only the one that hit"
        );
        assert_eq!(scan_with(&engine, "fail here!\nboom 4\n").len(), 2);
        assert_eq!(built(&engine), [true, true, false]);
    }

    #[test]
    fn matches_never_span_lines() {
        // `cross[^!]*end` could cross the newline in a buffer-wide scan; it must not count.
        assert!(both("cross over\nthe end\n").is_empty());
        assert_eq!(both("cross to the end\n").len(), 1);
    }

    #[test]
    fn crlf_and_missing_final_newline() {
        let out = both("boom 1\r\nboom 2");
        assert_eq!(out.len(), 2);
        assert_eq!(out[1].0, 2);
    }

    #[test]
    fn json_envelopes_are_decoded_before_matching() {
        // The escaped quote would hide nothing here, but the rank and message come from JSON.
        let out = both("{\"log\":\"[rank5]: boom 7\\n\"}\nboom 8\n{broken json boom 9\n");
        assert_eq!(out.len(), 3);
        assert_eq!(out[0].0, 1);
        assert_eq!(out[2].0, 3, "invalid JSON falls back to raw text");
    }

    #[test]
    fn a_json_records_error_field_is_matched_with_its_message() {
        // zap/logrus keep the error apart from the message: it is matched, with its captures.
        let out = both(
            "{\"msg\":\"step failed\",\"error\":\"boom 7\"}\n{\"msg\":\"ok\",\"error\":false}\n",
        );
        assert_eq!(out, vec![(1, "A".into(), r#"[("n", "7")]"#.into())]);
    }

    #[test]
    fn fallback_entries_yield_to_specific_ones() {
        let mut files = vec![
            (
                "test/a.toml".into(),
                entry_toml("test/a", "A", "root", r"boom (?P<n>\d+)", false),
            ),
            (
                "test/z.toml".into(),
                entry_toml("test/z", "ANY_BOOM", "root", r"boom", true),
            ),
        ];
        files.sort();
        let kb = KnowledgeBase::from_files(files, "test").expect("valid");
        let engine = Engine::new(kb).expect("compiles");
        let codes = |line: &str| {
            scan_with(&engine, line)
                .into_iter()
                .map(|(_, code, _)| code)
                .collect::<Vec<_>>()
        };
        assert_eq!(codes("boom 7\n"), vec!["A".to_string()]);
        assert_eq!(codes("boom!\n"), vec!["ANY_BOOM".to_string()]);
    }

    fn strip(line: &[u8]) -> String {
        let mut out = b"stale".to_vec();
        strip_ansi(line, &mut out);
        String::from_utf8(out).expect("utf-8")
    }

    #[test]
    fn ansi_sequences_are_stripped() {
        assert_eq!(
            strip(b"\x1b[1;31mRuntimeError\x1b[0m: boom"),
            "RuntimeError: boom"
        );
        assert_eq!(strip(b"a\x1b[Kb\x1b[2Jc\x1b[38;5;196md"), "abcd");
        assert_eq!(
            strip(b"\x1b]0;title\x07x \x1b]8;;https://a.b/\x1b\\link\x1b]8;;\x1b\\"),
            "x link"
        );
        assert_eq!(strip(b"\x1b(Bx\x1b=y\x1b7z\x1b"), "xyz");
        assert_eq!(strip(b"plain"), "plain");
        assert_eq!(
            strip(b"cut \x1b[38;5"),
            "cut ",
            "a sequence cut by the line end"
        );
        assert_eq!(strip("\x1b[33mé\x1b[0m".as_bytes()), "é");
    }

    #[test]
    fn coloured_lines_match_as_if_plain() {
        // Line 2: colour codes split "boom" from its number, so the raw bytes do not match.
        // Line 4: the raw bytes match too; still one event, captured on the cleaned line.
        let out = both(
            "ok\n\x1b[31mboom\x1b[0m \x1b[1m42\x1b[0m\nboom 7\n\x1b[31mboom 5\x1b[0m\n\x1b[32mall good\x1b[0m\n",
        );
        assert_eq!(
            out,
            vec![
                (2, "A".into(), r#"[("n", "42")]"#.into()),
                (3, "A".into(), r#"[("n", "7")]"#.into()),
                (4, "A".into(), r#"[("n", "5")]"#.into()),
            ]
        );
        // An escape between two hit lines of one chunk keeps every line number right.
        let out = both("\x1b[0mx\nfail now!\n\x1b[1mfail\x1b[0m again!\nboom 3");
        let lines: Vec<u64> = out.iter().map(|o| o.0).collect();
        assert_eq!(lines, [2, 3, 4]);
    }

    #[test]
    fn coloured_json_messages_match() {
        let out = both("{\"log\":\"\\u001b[31mboom\\u001b[0m 9\\n\"}\n");
        assert_eq!(out, vec![(1, "A".into(), r#"[("n", "9")]"#.into())]);
    }

    #[test]
    fn one_match_per_entry_per_line() {
        assert_eq!(both("boom 1 boom 2\n").len(), 1);
    }
}
