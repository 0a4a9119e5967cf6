//! Fuzz harnesses: one function per `cargo fuzz` target in `fuzz/`, kept here so that the
//! stored corpora replay under a plain `cargo test` (`tests/it/fuzz_corpus.rs`), no nightly
//! needed. Each function takes arbitrary bytes, must never panic on its own, and asserts the
//! properties its input path promises (a panic here is a finding). Not part of the API.

use std::path::Path;
use std::sync::{Arc, OnceLock};

use crate::engine::{ChunkInfo, Engine};
use crate::enrich::{Enricher, MAX_CAPTURE_BYTES, MAX_EVENT_LINE_BYTES};
use crate::envelope::{self, MAX_RECORDS_PER_LINE};
use crate::kb::{self, KnowledgeBase};
use crate::matcher::{HyperscanMatcher, RegexMatcher};
use crate::record::Provenance;
use crate::redact::Redactor;
use crate::source::file::ChunkReader;

/// A harness: arbitrary bytes in, a panic on a finding.
pub type Harness = fn(&[u8]);

/// The targets, by name, as `fuzz/fuzz_targets/<name>.rs` and `fuzz/corpus/<name>/` call them.
pub const TARGETS: &[(&str, Harness)] = &[
    ("envelope", envelope),
    ("kb_toml", kb_toml),
    ("seed_markdown", seed_markdown),
    ("deadends_json", deadends_json),
    ("engine", engine),
    ("chunk_reader", chunk_reader),
    ("redact", redact),
];

/// Envelope decoding and launcher-prefix stripping, line by line.
pub fn envelope(data: &[u8]) {
    let mut records = Vec::new();
    for line in data.split(|&b| b == b'\n') {
        let (rank, rest) = envelope::strip_launcher_prefixes(line);
        assert!(line.ends_with(rest), "prefix stripping keeps a suffix");
        if rank.is_none() {
            assert_eq!(rest, line, "no rank, nothing stripped");
        }
        let raw = envelope::decode_raw(line);
        assert!(line.len() >= raw.message.len());
        if envelope::looks_like_json(line) {
            records.clear();
            if envelope::decode_json(line, &mut records).is_ok() {
                assert!(records.len() <= MAX_RECORDS_PER_LINE);
            }
        }
    }
}

/// The KB TOML loader: one file's text through `parse_entry` and `KnowledgeBase::build`; a
/// file that loads is also checked in both engines, as `kb check` does with untrusted KBs.
pub fn kb_toml(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let path = Path::new("fuzz/entry.toml");
    let parsed = kb::parse_entry(path, text);
    let files = vec![(path.to_path_buf(), text.to_string())];
    let (kb, problems) = KnowledgeBase::build(files.clone(), "fuzz");
    assert_eq!(parsed.is_ok(), kb.entries.len() == 1);
    if problems.is_empty() && !kb.patterns.is_empty() {
        let report = kb::check::check(files, "fuzz");
        assert_eq!(report.entries, 1);
    }
}

/// The seed Markdown importer: what it imports is written as TOML by `kb import`, so that TOML
/// must read back as the same entry, and the pattern derived from a title must match it.
pub fn seed_markdown(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(spec) = kb::import::from_markdown(text) {
        imported(&spec);
        // The Markdown writer is the importer's inverse.
        let again = kb::import::from_markdown(&kb::import::to_markdown(&spec));
        assert!(again.is_ok(), "to_markdown output re-imports");
    }
}

/// The deadends.dev JSON importer (object, array or NDJSON), with the same properties.
pub fn deadends_json(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(specs) = kb::import::from_json(text) {
        for spec in &specs {
            imported(spec);
        }
    }
}

fn imported(spec: &kb::EntrySpec) {
    let toml = toml::to_string_pretty(spec).expect("an entry serialises");
    let back: kb::EntrySpec = toml::from_str(&toml).expect("the written TOML reads back");
    assert_eq!(&back, spec, "TOML round trip");
    if spec.title.trim().is_empty() {
        return;
    }
    let derived = spec.patterns.last().expect("a derived pattern");
    let re = kb::compile_pattern(derived)
        .unwrap_or_else(|e| panic!("derived pattern {derived:?} does not compile: {e}"));
    assert!(
        re.is_match(spec.title.as_bytes()),
        "derived pattern {derived:?} does not match its title {:?}",
        spec.title
    );
}

/// A small fixed KB covering the pattern constructs the real KB uses: captures, classes,
/// `\b`, case-insensitive groups, bounded repeats, a pattern that can span lines in a
/// buffer-wide scan, and a fallback entry.
fn fuzz_kb() -> &'static Arc<KnowledgeBase> {
    static KB: OnceLock<Arc<KnowledgeBase>> = OnceLock::new();
    KB.get_or_init(|| {
        let entries: &[(&str, &str, bool)] = &[
            ("boom", r"boom (?P<n>\d+)", false),
            ("cuda", r"(?i:cuda error): (?P<what>[a-z ]{1,40})", false),
            (
                "xid",
                r"\bXid \(PCI:(?P<gpu>[0-9a-fA-F:.]+)\): (?P<xid>\d+)",
                false,
            ),
            ("fail", r"fail[^!\n]*!", false),
            ("cross", r"cross[^!]*end", false),
            (
                "timeout",
                r"timed out after (?P<ms>\d+)\s*ms|Timeout\(ms\)=(?P<t>\d+)",
                false,
            ),
            ("rank", r"\[rank(?P<rank>\d+)\]: x{2,5}y", false),
            ("msg", r"Error: (?P<message>[^\n]+)", false),
            ("any", r"(?i)error", true),
        ];
        let files = entries
            .iter()
            .map(|(id, pattern, fallback)| {
                let text = format!(
                    "id = \"fuzz/{id}\"\ntitle = \"t\"\ndomain = \"fuzz\"\ncategory = \"crash\"\n\
                     error_code = \"{code}\"\nrole = \"root\"\nseverity = \"error\"\n\
                     fallback = {fallback}\nverification = \"ai_generated\"\n\
                     patterns_verified = \"unverified\"\nroot_cause = \"r\"\n\
                     patterns = ['{pattern}']\nexamples = [\"x\"]\n\
                     negative_examples = [\"y\"]\nreferences = [\"z\"]\n",
                    code = id.to_uppercase()
                );
                (format!("fuzz/{id}.toml").into(), text)
            })
            .collect();
        Arc::new(KnowledgeBase::from_files(files, "fuzz").expect("the fuzz KB is valid"))
    })
}

type Engines = (Engine<HyperscanMatcher>, Engine<RegexMatcher>, Enricher);

fn engines() -> &'static Engines {
    static ENGINES: OnceLock<Engines> = OnceLock::new();
    ENGINES.get_or_init(|| {
        let kb = fuzz_kb();
        let sources: Vec<&str> = kb.patterns.iter().map(|p| p.source.as_str()).collect();
        let hs = HyperscanMatcher::compile(&sources).expect("compiles in Hyperscan");
        let re = RegexMatcher::compile(&sources).expect("compiles in regex");
        (
            Engine::with_matcher(Arc::clone(kb), hs),
            Engine::with_matcher(Arc::clone(kb), re),
            Enricher::new(Arc::clone(kb)),
        )
    })
}

/// The engine over an arbitrary chunk: Hyperscan and the regex oracle report the same matches
/// (line, entry, captures), and every match enriches into a bounded, redacted event.
pub fn engine(data: &[u8]) {
    let (hs, re, enricher) = engines();
    let info = ChunkInfo {
        first_line: 1,
        truncated: data.first().is_some_and(|b| b & 1 == 1),
    };
    let mut a = Vec::new();
    let mut hs_worker = hs.worker().expect("scratch");
    hs.scan_chunk(&mut hs_worker, data, info, &mut |hit| {
        let source = Provenance::File {
            path: "fuzz".into(),
            line: hit.line,
        };
        let event = enricher.event(&hit, "fuzz", source);
        assert!(event.line.len() <= MAX_EVENT_LINE_BYTES);
        assert!(event
            .captures
            .values()
            .all(|v| v.len() <= MAX_CAPTURE_BYTES));
        a.push((hit.line, hit.entry, hit.captures));
    })
    .expect("Hyperscan scans");
    let mut b = Vec::new();
    let mut re_worker = re.worker().expect("scratch");
    re.scan_chunk(&mut re_worker, data, info, &mut |hit| {
        b.push((hit.line, hit.entry, hit.captures));
    })
    .expect("regex scans");
    assert_eq!(a, b, "Hyperscan and the oracle disagree");
}

/// The chunk reader with a small line limit and a reader that hands out small pieces: the
/// chunks, read back as lines, are the input's lines, each whole or cut at the limit (and then
/// marked), with the right line numbers.
pub fn chunk_reader(data: &[u8]) {
    let [a, b, c, rest @ ..] = data else {
        return;
    };
    let max_line = 1 + usize::from(*a) * 37;
    let piece = 1 + usize::from(*b % 64) * 61;
    // Repeating the input reaches past the 4 KiB buffer with short fuzz inputs.
    let input: Vec<u8> = rest.repeat(1 + usize::from(*c % 32));

    let mut expected: Vec<(u64, bool, &[u8])> = Vec::new();
    let mut start = 0;
    let mut line_no = 1;
    while start < input.len() {
        let end = memchr::memchr(b'\n', &input[start..]).map_or(input.len(), |i| start + i);
        let content = &input[start..end];
        let with_nl = &input[start..(end + 1).min(input.len())];
        if content.len() > max_line {
            expected.push((line_no, true, &content[..max_line]));
        } else {
            expected.push((line_no, false, with_nl));
        }
        line_no += 1;
        start = end + 1;
    }
    let long_lines = expected.iter().filter(|e| e.1).count() as u64;

    let mut reader = ChunkReader::new(
        Pieces {
            data: &input,
            piece,
        },
        1,
        max_line,
    );
    let mut got: Vec<(u64, bool, Vec<u8>)> = Vec::new();
    while let Some(chunk) = reader.next_chunk().expect("in-memory reads do not fail") {
        let mut line = chunk.info.first_line;
        if chunk.info.truncated {
            assert!(!chunk.data.contains(&b'\n'), "a cut line is one line");
            got.push((line, true, chunk.data.to_vec()));
        } else {
            assert!(!chunk.data.is_empty(), "no empty chunk");
            for l in chunk.data.split_inclusive(|&b| b == b'\n') {
                got.push((line, false, l.to_vec()));
                line += 1;
            }
        }
        // As `scan` does: the engine's line count.
        let newlines = memchr::memchr_iter(b'\n', chunk.data).count() as u64;
        let lines = newlines + u64::from(chunk.data.last().is_some_and(|&b| b != b'\n'));
        reader.advance_lines(lines);
    }
    let expected: Vec<(u64, bool, Vec<u8>)> = expected
        .into_iter()
        .map(|(n, t, d)| (n, t, d.to_vec()))
        .collect();
    assert_eq!(got, expected);
    assert_eq!(reader.truncated_lines, long_lines);
}

/// A reader that returns at most `piece` bytes per call.
struct Pieces<'a> {
    data: &'a [u8],
    piece: usize,
}

impl std::io::Read for Pieces<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.piece.min(buf.len()).min(self.data.len());
        buf[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Ok(n)
    }
}

/// Redaction: the Hyperscan-prefiltered path finds exactly what every rule's regex finds, and
/// the redacted text holds none of the secrets found.
pub fn redact(data: &[u8]) {
    let r = Redactor::builtin();
    let spans = r.spans(data);
    assert_eq!(
        spans,
        r.spans_oracle(data),
        "Hyperscan prefilter missed a rule"
    );
    let out = r.redact(data);
    for pair in spans.windows(2) {
        assert!(pair[0].end <= pair[1].start, "spans do not overlap");
    }
    if spans.is_empty() {
        assert_eq!(&out[..], data);
    } else {
        assert!(out.windows(10).any(|w| w == b"[REDACTED:"));
    }
}
