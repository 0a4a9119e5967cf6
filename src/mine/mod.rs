//! `faultline templates`: the error lines that no KB entry knows, mined into templates.
//!
//! Flow, per chunk of an input: [`crate::source::file`] reads it; [`Engine::scan_chunk`] says
//! which lines a KB entry matches (those are known, never mined); [`crate::envelope`] turns
//! each line into its message (a JSON envelope's message, launcher prefixes stripped, so the
//! miner sees what the KB sees, not the shipper's JSON); [`looks_like_error`] keeps the lines
//! that look like failures; the [`Miner`] groups them into templates. [`Mining::report`] then
//! lists the templates, most frequent first, each with its count and one redacted example.
//!
//! `--all-lines` ([`Filter::AllLines`]) skips the KB and the error gate: every line is mined,
//! and [`Mining::write_lines`] prints each line's final template (after merges), the mode
//! that measures grouping accuracy (`scripts/template-accuracy.sh`).
//!
//! [`suggest`] turns the most frequent templates into KB drafts (`faultline kb suggest`);
//! [`pattern`] builds a draft's pattern from a template; [`command`] holds both commands'
//! options and runs them.
//!
//! Memory: the miner's (bounded by `max_templates`, see [`crate::templates`]), a few sample
//! lines per live template, and in `--all-lines` mode 16 bytes per line plus each template's
//! text, held until the end so that every line can be printed with its final template.

pub mod command;
pub use crate::templates::gate;
pub mod pattern;
pub mod suggest;

use std::borrow::Cow;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::io::{self, Read, Write};

use serde::Serialize;

use crate::engine::{strip_ansi, strip_message, ChunkInfo, Engine, Worker, ESC};
use crate::envelope;
use crate::matcher::{MatchError, Matcher};
use crate::record::LogRecord;
use crate::redact::Redactor;
use crate::source::file::{self, ChunkReader, Input, InputError};
use crate::templates::{looks_like_error, Miner, MinerConfig, TemplateId};

/// Which lines are mined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Filter {
    /// Lines that look like errors ([`looks_like_error`]) and that no KB entry matches.
    UnknownErrors,
    /// Every line (no KB, no error gate): `--all-lines`.
    AllLines,
}

/// How to mine.
#[derive(Debug, Clone)]
pub struct MineOptions {
    /// Which lines are mined.
    pub filter: Filter,
    /// The miner's parameters.
    pub miner: MinerConfig,
    /// Distinct raw lines kept per template, with where they came from (for `kb suggest`'s
    /// examples and references, and the first line's place in a report); 0 keeps none.
    pub samples: usize,
    /// Keep every mined line's template id, for [`Mining::write_lines`].
    pub per_line: bool,
    /// Bytes read per engine call.
    pub chunk_bytes: usize,
    /// Longest line read; longer lines are cut there (the miner reads at most
    /// `miner.max_line_bytes` of it anyway).
    pub max_line_bytes: usize,
}

impl Default for MineOptions {
    fn default() -> Self {
        MineOptions {
            filter: Filter::UnknownErrors,
            miner: MinerConfig::default(),
            samples: 1,
            per_line: false,
            chunk_bytes: file::DEFAULT_CHUNK_BYTES,
            max_line_bytes: file::DEFAULT_MAX_LINE_BYTES,
        }
    }
}

/// What a mining run read and kept.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct MineStats {
    /// Inputs opened.
    pub inputs: u64,
    /// Lines read.
    pub lines: u64,
    /// Messages examined: those no entry matched (a JSON envelope can hold several; raw
    /// lines without any word an error line needs are not decoded, see [`gate`]).
    pub records: u64,
    /// Lines that a KB entry matched (never mined).
    pub known_lines: u64,
    /// Messages that were mined: every one with [`Filter::AllLines`], else those that look
    /// like errors and come from a line no entry matched.
    pub mined: u64,
    /// Lines longer than the line limit, cut.
    pub truncated_lines: u64,
    /// Inputs that could not be read, with the reason.
    pub errors: Vec<String>,
}

/// Errors that stop a mining run (an unreadable input does not: it is listed in
/// [`MineStats::errors`]).
#[derive(Debug, thiserror::Error)]
pub enum MineError {
    /// The KB's engine failed on a chunk.
    #[error(transparent)]
    Match(#[from] MatchError),
}

/// One line kept for a template, as read (not redacted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    /// The message the miner saw.
    pub text: String,
    /// Where it came from: `path:line` (`-:line` for stdin).
    pub source: String,
}

/// One template of a report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TemplateReport {
    /// Stable id: 16 hex digits.
    pub template_id: String,
    /// The template text (`<NUM>`, `<IP>`, ... for masked values, `<*>` for mined variables).
    pub template: String,
    /// Lines counted for it (those of templates merged into it included).
    pub count: u64,
    /// Its first line, redacted (unless redaction is off), cut to 512 bytes.
    pub example: String,
    /// Where its first kept line came from: `path:line`.
    pub first_seen: String,
}

/// The outcome of [`mine`]: the miner with its templates, and what was read.
pub struct Mining {
    /// The miner, with every live template.
    pub miner: Miner,
    /// Counts of what was read and mined.
    pub stats: MineStats,
    samples: IdMap<Vec<Sample>>,
    /// (line number across all inputs, template id when mined), with `per_line`.
    lines: Vec<(u64, TemplateId)>,
    /// The latest text of every template seen, with `per_line` (evicted ones included).
    texts: IdMap<String>,
}

/// Maps keyed by template id: the id is a hash already, so hashing it again with SipHash
/// (std's default) only costs time on the per-line paths.
type IdMap<V> = HashMap<TemplateId, V, BuildHasherDefault<IdHasher>>;

/// Mixes an already hashed 64-bit key (FNV's low bits alone spread poorly).
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        let h = self.0.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        h ^ (h >> 29)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

/// Mines `inputs` in order with one [`Miner`]. With [`Filter::UnknownErrors`], `engine`
/// tells which lines the KB knows (`None`: no line is known); with [`Filter::AllLines`] it is
/// not used.
pub fn mine<M: Matcher>(
    engine: Option<&Engine<M>>,
    inputs: &[Input],
    opts: &MineOptions,
) -> Result<Mining, MineError> {
    let engine = engine.filter(|_| opts.filter == Filter::UnknownErrors);
    let mut worker = engine.map(Engine::worker).transpose()?;
    // Without an engine, the gate finds the candidate lines on its own.
    let gate = match (opts.filter, engine) {
        (Filter::UnknownErrors, None) => Some(gate::Gate::new()?),
        _ => None,
    };
    let mut run = Run {
        opts,
        mining: Mining {
            miner: Miner::new(opts.miner.clone()),
            stats: MineStats::default(),
            samples: IdMap::default(),
            lines: Vec::new(),
            texts: IdMap::default(),
        },
        gate,
        records: Vec::new(),
        escapes: false,
        base_line: 0,
        name: String::new(),
    };
    for input in inputs {
        run.mining.stats.inputs += 1;
        let unreadable = |e: io::Error| {
            InputError {
                name: input.name.clone(),
                source: e,
            }
            .to_string()
        };
        let reader = match file::open(input) {
            Ok(r) => r,
            Err(e) => {
                run.mining.stats.errors.push(unreadable(e));
                continue;
            }
        };
        run.name.clone_from(&input.name);
        let read = match (engine, worker.as_mut()) {
            (Some(engine), Some(worker)) => run.input(reader, Some((engine, worker))),
            _ => run.input::<M>(reader, None),
        };
        match read {
            Ok(()) => {}
            Err(ReadError::Io(e)) => run.mining.stats.errors.push(unreadable(e)),
            Err(ReadError::Match(e)) => return Err(e.into()),
        }
    }
    Ok(run.mining)
}

enum ReadError {
    Io(io::Error),
    Match(MatchError),
}

/// The state of one mining run across its inputs.
struct Run<'a> {
    opts: &'a MineOptions,
    mining: Mining,
    /// Which raw lines may look like errors ([`Filter::UnknownErrors`] only).
    gate: Option<gate::Gate>,
    /// Reused buffer of decoded JSON records.
    records: Vec<LogRecord<'static>>,
    /// Whether the current chunk holds an ESC byte at all (most hold none).
    escapes: bool,
    /// Lines of the inputs before this one (per-line numbers run across inputs).
    base_line: u64,
    /// Name of the current input.
    name: String,
}

impl Run<'_> {
    fn input<M: Matcher>(
        &mut self,
        reader: Box<dyn Read + Send>,
        mut engine: Option<(&Engine<M>, &mut Worker<M>)>,
    ) -> Result<(), ReadError> {
        let mut chunks = ChunkReader::new(reader, self.opts.chunk_bytes, self.opts.max_line_bytes);
        let mut last_line = 0;
        loop {
            let chunk = match chunks.next_chunk() {
                Ok(Some(c)) => c,
                Ok(None) => break,
                Err(e) => {
                    self.mining.stats.truncated_lines += chunks.truncated_lines;
                    self.base_line += last_line;
                    return Err(ReadError::Io(e));
                }
            };
            if let Some((engine, worker)) = engine.as_mut() {
                // The engine's one pass says which lines an entry knows and hands over the
                // messages it decoded that none matched: nothing is decoded twice.
                let mut known: Vec<u64> = Vec::new();
                let lines = engine
                    .scan_chunk_with(
                        worker,
                        chunk.data,
                        chunk.info,
                        &mut |hit| known.push(hit.line),
                        &mut |line, record| self.message(&record.message, line),
                    )
                    .map_err(ReadError::Match)?;
                known.dedup();
                self.mining.stats.known_lines += known.len() as u64;
                self.mining.stats.lines += lines;
                last_line = chunk.info.first_line + lines - 1;
                chunks.advance_lines(lines);
                continue;
            }
            if let Some(gate) = self.gate.as_mut() {
                gate.scan(chunk.data).map_err(ReadError::Match)?;
            }
            let lines = self.chunk(chunk.data, chunk.info);
            last_line = chunk.info.first_line + lines - 1;
            chunks.advance_lines(lines);
        }
        self.mining.stats.truncated_lines += chunks.truncated_lines;
        self.base_line += last_line;
        Ok(())
    }

    /// Mines the lines of one chunk; returns how many there were (as every driver counts
    /// them: [`crate::record::line_count`]).
    fn chunk(&mut self, data: &[u8], info: ChunkInfo) -> u64 {
        self.escapes = memchr::memchr(ESC, data).is_some();
        if info.truncated {
            self.line(data, 0, data.len(), info.first_line);
            return 1;
        }
        let mut line_no = info.first_line;
        let mut start = 0;
        for nl in memchr::memchr_iter(b'\n', data) {
            self.line(data, start, nl, line_no);
            line_no += 1;
            start = nl + 1;
        }
        if start < data.len() {
            self.line(data, start, data.len(), line_no);
            line_no += 1;
        }
        line_no - info.first_line
    }

    /// The line at `data[start..end]`.
    fn line(&mut self, data: &[u8], start: usize, end: usize, line_no: u64) {
        self.mining.stats.lines += 1;
        let line = &data[start..end];
        let json = envelope::looks_like_json(line);
        // Coloured lines are read without their escape sequences, as the engine reads them.
        let escape = self.escapes && memchr::memchr(ESC, line).is_some();
        if !json && !escape && self.gate.as_mut().is_some_and(|g| !g.maybe(start, end)) {
            return;
        }
        let mut clean = Vec::new();
        if json {
            let mut records = std::mem::take(&mut self.records);
            records.clear();
            if envelope::decode_json(line, &mut records).is_ok() {
                for record in &mut records {
                    strip_message(record);
                    self.message(&record.message, line_no);
                }
                self.records = records;
                return;
            }
            self.records = records;
        }
        let line = if escape {
            strip_ansi(line, &mut clean);
            &clean[..]
        } else {
            line
        };
        let record = envelope::decode_raw(line);
        self.message(&record.message, line_no);
    }

    fn message(&mut self, message: &[u8], line_no: u64) {
        let m = &mut self.mining;
        m.stats.records += 1;
        let text = match std::str::from_utf8(message) {
            Ok(s) => Cow::Borrowed(s),
            Err(_) => String::from_utf8_lossy(message),
        };
        if self.opts.filter == Filter::UnknownErrors && !looks_like_error(&text) {
            return;
        }
        m.stats.mined += 1;
        let seen = m.miner.observe(&text);
        if self.opts.per_line {
            m.lines.push((self.base_line + line_no, seen.id));
            if seen.is_new || seen.changed {
                if let Some(t) = m.miner.get(seen.id) {
                    m.texts.insert(seen.id, t.text().to_string());
                }
            }
        }
        if self.opts.samples > 0 {
            self.sample(seen, &text, line_no);
        }
    }

    /// Keeps the line as a sample of its template, while it has fewer than `samples` (distinct
    /// by text and input).
    fn sample(&mut self, seen: crate::templates::Observed, text: &str, line_no: u64) {
        let m = &mut self.mining;
        // One sample is the template's first line: only a new template needs a look.
        if self.opts.samples == 1 && !seen.is_new {
            return;
        }
        let kept = m.samples.entry(seen.id).or_default();
        // The same text from another input still tells where the template occurs.
        let same = |s: &Sample| {
            s.text == text && s.source.rsplit_once(':').map(|(name, _)| name) == Some(&self.name)
        };
        if kept.len() < self.opts.samples && !kept.iter().any(same) {
            kept.push(Sample {
                text: text.to_string(),
                source: format!("{}:{line_no}", self.name),
            });
        }
        if seen.is_new && m.samples.len() > 2 * m.miner.config().max_templates.max(1) + 64 {
            // Bounded: forget the samples of templates that were evicted.
            let miner = &m.miner;
            m.samples
                .retain(|id, _| miner.get(miner.resolve(*id)).is_some());
        }
    }
}

impl Mining {
    /// The kept lines of a live template, first line first, then those of templates merged
    /// into it (at most `samples` of each).
    pub fn samples(&self, id: TemplateId) -> Vec<&Sample> {
        let mut out: Vec<&Sample> = Vec::new();
        let mut ids: Vec<TemplateId> = vec![id];
        if let Some(t) = self.miner.get(id) {
            ids.extend_from_slice(t.merged_ids());
        }
        for i in ids {
            out.extend(self.samples.get(&i).into_iter().flatten());
        }
        out
    }

    /// The live templates, most frequent first (ties: the one seen first, then the id), at
    /// most `top` of them (0: all), each with one example, text and example redacted by
    /// `redactor` (`None`: as read; a masked template can keep a secret's letters).
    pub fn report(&self, redactor: Option<&Redactor>, top: usize) -> Vec<TemplateReport> {
        let mut live: Vec<_> = self.miner.iter().collect();
        live.sort_by(|a, b| {
            b.count()
                .cmp(&a.count())
                .then(a.first_seen().cmp(&b.first_seen()))
                .then(a.id().cmp(&b.id()))
        });
        if top > 0 {
            live.truncate(top);
        }
        live.into_iter()
            .map(|t| {
                let redact = |text: &str| match redactor {
                    Some(r) => r.redact_str(text).into_owned(),
                    None => text.to_string(),
                };
                let example = redact(t.example());
                let first_seen = self
                    .samples(t.id())
                    .first()
                    .map(|s| s.source.clone())
                    .unwrap_or_default();
                TemplateReport {
                    template_id: t.id().to_string(),
                    template: redact(t.text()),
                    count: t.count(),
                    example,
                    first_seen,
                }
            })
            .collect()
    }

    /// Writes one JSON object per mined line, `{"line": N, "template_id": "...",
    /// "template": "..."}`, with the line's final template: the id it resolves to now (after
    /// sibling merges) and that template's current text. Lines are numbered from 1 across all
    /// inputs; a JSON envelope holding several messages gives one object per message, all
    /// with its line's number. Needs [`MineOptions::per_line`].
    pub fn write_lines<W: Write>(&self, out: &mut W) -> io::Result<()> {
        // Each final template's tail of the object, built once.
        let mut tails: IdMap<Vec<u8>> = IdMap::default();
        for &(line, id) in &self.lines {
            let fin = self.miner.resolve(id);
            let tail = match tails.get(&fin) {
                Some(t) => t,
                None => {
                    let text = self
                        .miner
                        .get(fin)
                        .map(|t| t.text())
                        .or_else(|| self.texts.get(&fin).map(String::as_str))
                        .or_else(|| self.texts.get(&id).map(String::as_str))
                        .unwrap_or("");
                    let tail = format!(
                        ",\"template_id\":\"{fin}\",\"template\":{}}}\n",
                        serde_json::to_string(text).map_err(io::Error::other)?
                    );
                    tails.entry(fin).or_insert(tail.into_bytes())
                }
            };
            out.write_all(b"{\"line\":")?;
            out.write_all(decimal(line, &mut [0u8; 20]))?;
            out.write_all(tail)?;
        }
        Ok(())
    }

    /// Lines kept for [`Mining::write_lines`].
    pub fn mined_lines(&self) -> usize {
        self.lines.len()
    }
}

/// `n` in decimal, written at the end of `buf` (a line's number, printed for every line of
/// `--all-lines`: `write!`'s formatting machinery cost more than the rest of the object).
fn decimal(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[at..];
        }
    }
}

/// Writes a report as JSON lines, one object per template.
pub fn write_json<W: Write>(out: &mut W, report: &[TemplateReport]) -> io::Result<()> {
    for t in report {
        serde_json::to_writer(&mut *out, t).map_err(io::Error::other)?;
        out.write_all(b"\n")?;
    }
    Ok(())
}

/// Writes a report for people: count, id and template, then the example and where it was.
pub fn write_text<W: Write>(out: &mut W, report: &[TemplateReport]) -> io::Result<()> {
    if report.is_empty() {
        return writeln!(out, "no unknown templates");
    }
    writeln!(out, "{:>8}  {:<16}  TEMPLATE", "COUNT", "ID")?;
    for t in report {
        writeln!(out, "{:>8}  {}  {}", t.count, t.template_id, t.template)?;
        writeln!(
            out,
            "{:>8}  {:<16}  e.g. {}  ({})",
            "", "", t.example, t.first_seen
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matcher::RegexMatcher;

    fn input(path: &std::path::Path) -> Input {
        let (inputs, errors) = file::expand(&[path.display().to_string()], None);
        assert!(errors.is_empty());
        inputs.into_iter().next().expect("one input")
    }

    fn write(dir: &std::path::Path, name: &str, text: &str) -> Input {
        let path = dir.join(name);
        std::fs::write(&path, text).expect("writes");
        input(&path)
    }

    #[test]
    fn only_unknown_error_lines_are_mined() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = write(
            dir.path(),
            "job.log",
            "step 1 loss 0.5\n\
             ERROR disk quota exceeded on /scratch/u1\n\
             RuntimeError: CUDA error: out of memory\n\
             ERROR disk quota exceeded on /scratch/u2\n\
             {\"message\":\"ERROR disk quota exceeded on /scratch/u3\",\"host\":\"n1\"}\n",
        );
        // A KB whose one pattern knows the CUDA line.
        let toml =
            crate::testutil::entry_toml("x/oom", "OOM", "root", "CUDA error: out of memory", false);
        let kb = crate::kb::KnowledgeBase::from_files(vec![("x/oom.toml".into(), toml)], "t")
            .expect("valid KB");
        let m = RegexMatcher::compile(&["CUDA error: out of memory"]).expect("compiles");
        let engine = Engine::with_matcher(std::sync::Arc::new(kb), m);
        let mining = mine(Some(&engine), &[log], &MineOptions::default()).expect("mines");
        assert_eq!(mining.stats.lines, 5);
        assert_eq!(mining.stats.known_lines, 1);
        assert_eq!(mining.stats.mined, 3, "{:?}", mining.stats);
        let report = mining.report(None, 0);
        assert_eq!(report.len(), 1);
        assert_eq!(report[0].template, "ERROR disk quota exceeded on <PATH>");
        assert_eq!(report[0].count, 3);
        assert_eq!(
            report[0].first_seen,
            format!("{}:2", dir.path().join("job.log").display())
        );
    }

    #[test]
    fn all_lines_prints_every_line_with_its_final_template() {
        let dir = tempfile::tempdir().expect("tempdir");
        let a = write(
            dir.path(),
            "a.log",
            "session opened for user alice\nsession opened for user bob\n",
        );
        let b = write(
            dir.path(),
            "b.log",
            "session opened for user carol\nsession opened for user dave",
        );
        let opts = MineOptions {
            filter: Filter::AllLines,
            per_line: true,
            ..MineOptions::default()
        };
        let mining = mine::<RegexMatcher>(None, &[a, b], &opts).expect("mines");
        let mut out = Vec::new();
        mining.write_lines(&mut out).expect("writes");
        let text = String::from_utf8(out).expect("utf8");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4);
        // the fourth user merged the siblings: every line reports the survivor
        let id = crate::templates::TemplateId::of("session opened for user alice");
        for (i, l) in lines.iter().enumerate() {
            assert_eq!(
                *l,
                format!(
                    "{{\"line\":{},\"template_id\":\"{id}\",\"template\":\"session opened for user <*>\"}}",
                    i + 1
                )
            );
        }
    }

    #[test]
    fn samples_stay_bounded_under_template_churn() {
        let dir = tempfile::tempdir().expect("tempdir");
        let text: String = (0..2000)
            .map(|i| format!("ERROR widget{} broke{}\n", letters(i), letters(i + 7)))
            .collect();
        let log = write(dir.path(), "churn.log", &text);
        let opts = MineOptions {
            miner: MinerConfig {
                max_templates: 16,
                ..MinerConfig::default()
            },
            ..MineOptions::default()
        };
        let mining = mine::<RegexMatcher>(None, &[log], &opts).expect("mines");
        assert!(mining.miner.len() <= 16);
        assert!(
            mining.samples.len() <= 2 * 16 + 64 + 1,
            "{}",
            mining.samples.len()
        );
    }

    /// A distinct letters-only word per number.
    fn letters(mut i: usize) -> String {
        let mut s = String::new();
        loop {
            s.push((b'a' + (i % 26) as u8) as char);
            i /= 26;
            if i == 0 {
                return s;
            }
        }
    }
}
