//! Fuzz harnesses: one function per `cargo fuzz` target in `fuzz/`, kept here so that the
//! stored corpora replay under a plain `cargo test` (`tests/it/fuzz_corpus.rs`), no nightly
//! needed. Each function takes arbitrary bytes, must never panic on its own, and asserts the
//! properties its input path promises (a panic here is a finding). Not part of the API.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use crate::engine::{ChunkInfo, Engine};
use crate::enrich::{Enricher, MatchEvent, MAX_CAPTURE_BYTES, MAX_EVENT_LINE_BYTES};
use crate::envelope::{self, MAX_RECORDS_PER_LINE};
use crate::incident::multiline::{self, ContextBuf, Streams, MAX_CONTEXT_LINE_BYTES};
use crate::incident::{ContextInfo, Correlator, IncidentConfig};
use crate::kb::{self, KnowledgeBase};
use crate::kbtool;
use crate::matcher::{HyperscanMatcher, RegexMatcher};
use crate::pipeline::config::{EnvelopeMode, InputConfig, JobIdFrom};
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
    ("kafka_record", kafka_record),
    ("multiline", multiline),
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
        let report = kbtool::check::check(files, "fuzz");
        assert_eq!(report.entries, 1);
    }
}

/// The seed Markdown importer: what it imports is written as TOML by `kb import`, so that TOML
/// must read back as the same entry, and the pattern derived from a title must match it.
pub fn seed_markdown(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(spec) = kbtool::import::from_markdown(text) {
        imported(&spec);
        // The Markdown writer is the importer's inverse.
        let again = kbtool::import::from_markdown(&kbtool::import::to_markdown(&spec));
        assert!(again.is_ok(), "to_markdown output re-imports");
    }
}

/// The deadends.dev JSON importer (object, array or NDJSON), with the same properties.
pub fn deadends_json(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(specs) = kbtool::import::from_json(text) {
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

/// A consumed Kafka record as `faultline run` decodes it ([`crate::pipeline::decode_record`]),
/// under every envelope mode, then scanned as the pipeline scans it. The input is
/// `[flags, limit, key 0x1e headers 0x1e payload]`; headers are `name=value` pairs separated by
/// 0x1f (no `=`: a header without a value). `flags` picks a missing key or payload (a
/// tombstone) and where the job id comes from; `limit` sets `input.max_record_bytes`.
pub fn kafka_record(data: &[u8]) {
    use crate::pipeline::decode::{decode_record, payload_lines, Disposition, Invalid};
    let [flags, limit, rest @ ..] = data else {
        return;
    };
    let mut parts = rest.splitn(3, |&b| b == 0x1e);
    let key = parts.next().filter(|_| flags & 1 == 0);
    let header_blob = parts.next().unwrap_or_default();
    let payload = parts.next().filter(|_| flags & 2 == 0);
    let headers: Vec<(String, Option<Vec<u8>>)> = header_blob
        .split(|&b| b == 0x1f)
        .filter(|h| !h.is_empty())
        .map(|h| match h.iter().position(|&b| b == b'=') {
            Some(i) => (
                String::from_utf8_lossy(&h[..i]).into_owned(),
                Some(h[i + 1..].to_vec()),
            ),
            None => (String::from_utf8_lossy(h).into_owned(), None),
        })
        .collect();
    let header_name = headers.first().map_or("job", |(k, _)| k.as_str());
    let job_id = match (flags >> 2) % 3 {
        0 => JobIdFrom::Envelope,
        1 => JobIdFrom::Key,
        _ => JobIdFrom::Header(header_name.to_string()),
    };
    // Payloads are at most a few KiB here: limits around their sizes.
    let max_record_bytes = 1 + usize::from(*limit) * 16;
    let expected_job = match &job_id {
        JobIdFrom::Envelope | JobIdFrom::Key => key,
        JobIdFrom::Header(name) => headers
            .iter()
            .find(|(k, _)| k == name)
            .and_then(|(_, v)| v.as_deref()),
    }
    .filter(|j| !j.is_empty());

    let (hs, _, _) = engines();
    let mut worker = hs.worker().expect("scratch");
    let mut scratch = Vec::new();
    let mut json = crate::engine::JsonLines::default();
    for envelope_mode in [EnvelopeMode::Auto, EnvelopeMode::Text, EnvelopeMode::Json] {
        let input = InputConfig {
            envelope: envelope_mode,
            job_id: job_id.clone(),
            default_job_id: "unknown".into(),
            max_record_bytes,
        };
        let pairs = headers.iter().map(|(k, v)| (k.as_str(), v.as_deref()));
        json.clear();
        let d = decode_record(key, pairs, payload, &input, &mut json, 0);
        assert_eq!(d.job, expected_job, "the job of the key or the header");
        let p = payload.unwrap_or_default();
        match &d.disposition {
            Disposition::Skip => assert!(p.is_empty(), "only an empty record is skipped"),
            Disposition::Invalid(Invalid::TooLarge { bytes, max }) => {
                assert_eq!((*bytes, *max), (p.len(), max_record_bytes));
                assert!(p.len() > max_record_bytes, "too large only past the limit");
            }
            other => {
                assert!(!p.is_empty());
                assert!(p.len() <= max_record_bytes, "past the limit: {other:?}");
            }
        }
        let utf8 = std::str::from_utf8(p);
        // The 1-based number of the first non-blank line that is not an envelope.
        let mut first_bad_line = || {
            p.split(|&b| b == b'\n')
                .enumerate()
                .find(|(_, line)| {
                    !line.trim_ascii().is_empty() && {
                        scratch.clear();
                        envelope::decode_json(line, &mut scratch).is_err()
                    }
                })
                .map(|(i, _)| i + 1)
        };
        match (&d.disposition, envelope_mode) {
            (Disposition::Invalid(Invalid::NotUtf8 { at }), EnvelopeMode::Text) => {
                let e = utf8.expect_err("invalid only when not UTF-8");
                assert_eq!(*at, e.valid_up_to());
            }
            (Disposition::Scan, EnvelopeMode::Text) => assert!(utf8.is_ok(), "text must be UTF-8"),
            (Disposition::Invalid(Invalid::NotEnvelope { line, .. }), EnvelopeMode::Json) => {
                assert_eq!(Some(*line), first_bad_line(), "the first bad line");
            }
            (Disposition::Scan, EnvelopeMode::Json) => {
                assert_eq!(first_bad_line(), None, "every line an envelope");
            }
            (Disposition::Invalid(Invalid::TooLarge { .. }) | Disposition::Skip, _)
            | (Disposition::Scan, EnvelopeMode::Auto) => {}
            (other, mode) => panic!("{other:?} under {mode:?}"),
        }
        if let Disposition::Invalid(why) = &d.disposition {
            assert_eq!(
                crate::metrics::DeadLetterReason::parse(why.code()),
                Some(why.reason())
            );
        }
        if d.disposition != Disposition::Scan {
            assert_eq!(d.lines, 0);
            continue;
        }
        // The batch's scan buffer holds the payload and a newline after it when it has none;
        // hits map back to the record by the line count, so it must be the engine's.
        assert_eq!(d.lines, payload_lines(p));
        let mut buf = p.to_vec();
        if buf.last() != Some(&b'\n') {
            buf.push(b'\n');
        }
        let mut last = 0;
        let lines = hs
            .scan_chunk(
                &mut worker,
                &buf,
                ChunkInfo {
                    first_line: 1,
                    truncated: false,
                },
                &mut |hit| {
                    assert!(hit.line >= last, "hits in line order");
                    last = hit.line;
                },
            )
            .expect("Hyperscan scans");
        assert_eq!(lines, d.lines, "the engine counts the record's lines alike");
        assert!(last <= d.lines);
    }
}

/// The embedded KB, whose `context` entries drive multiline assembly.
fn embedded_engine() -> &'static (Engine<HyperscanMatcher>, Enricher) {
    static ENGINE: OnceLock<(Engine<HyperscanMatcher>, Enricher)> = OnceLock::new();
    ENGINE.get_or_init(|| {
        // The shipped plan (required literals, through the database cache), as `scan` runs
        // it: Hyperscan needs minutes to compile every pattern of the KB whole.
        let kb = KnowledgeBase::embedded().expect("the embedded KB loads");
        let engine = Engine::with_progress(kb).expect("compiles in Hyperscan");
        let enricher = Enricher::new(Arc::clone(&engine.kb));
        (engine, enricher)
    })
}

/// Builds what [`multiline`] shares between runs (the embedded KB compiled for Hyperscan), so
/// that the fuzzer's `init` pays for it once instead of the first input: in an AddressSanitizer
/// build of the grown KB that took 14 s, which libFuzzer reports as a slow unit.
pub fn multiline_init() {
    embedded_engine();
}

/// Multiline assembly: arbitrary lines into a [`ContextBuf`], then matched with the embedded
/// KB and fed, as `scan` and the correlator do, into per-(job, rank, host) block streams and
/// into incidents. Every block and every incident's context stays within its lines and bytes
/// caps, every kept line within [`MAX_CONTEXT_LINE_BYTES`], and whatever was left out or cut
/// is marked. The input is `[lines cap, bytes cap, streams cap, time step, text]`.
pub fn multiline(data: &[u8]) {
    let [a, b, c, d, text @ ..] = data else {
        return;
    };
    let max_lines = 1 + usize::from(*a % 80);
    let max_bytes = 1 + usize::from(*b) * 67;
    let max_streams = 1 + usize::from(*c % 8);
    let step_ms = i64::from(*d) * 1_000;
    let window_ms = 60_000;

    // Every line of the input, whatever it is, into one buffer.
    let mut buf = ContextBuf::new(max_lines, max_bytes);
    let mut pushed = Vec::new();
    for line in text.split(|&b| b == b'\n') {
        let line = String::from_utf8_lossy(line);
        buf.push(None, &line);
        pushed.push(line.into_owned());
        check_block(&buf, max_lines, max_bytes);
    }
    let info = buf.info();
    assert_eq!(
        info.lines.len() as u64 + info.omitted_lines,
        pushed.len() as u64,
        "every line kept or counted"
    );
    let cut = pushed.iter().any(|l| l.len() > MAX_CONTEXT_LINE_BYTES);
    assert_eq!(info.truncated, info.omitted_lines > 0 || cut);
    // Kept lines are the input's lines (or their heads), in order.
    let mut next = 0;
    for kept in &info.lines {
        let at = pushed[next..]
            .iter()
            .position(|p| {
                p.starts_with(&kept.text)
                    && (p.len() == kept.text.len() || kept.text.len() >= MAX_CONTEXT_LINE_BYTES - 3)
            })
            .expect("a kept line is an input line, in order");
        next += at + 1;
    }

    // The lines as matched events, through the block streams and the correlator.
    let (engine, enricher) = embedded_engine();
    let mut worker = engine.worker().expect("scratch");
    let mut events: Vec<(u64, MatchEvent)> = Vec::new();
    let info = ChunkInfo {
        first_line: 1,
        truncated: false,
    };
    engine
        .scan_chunk(&mut worker, text, info, &mut |hit| {
            let source = Provenance::File {
                path: "fuzz".into(),
                line: hit.line,
            };
            events.push((hit.line, enricher.event(&hit, "fuzz", source)));
        })
        .expect("Hyperscan scans");
    let mut jobs: HashMap<String, Streams> = HashMap::new();
    for (line, e) in &events {
        let t = *line as i64 * step_ms;
        let streams = jobs
            .entry(e.job_id.clone())
            .or_insert_with(|| Streams::new(max_streams, max_lines, max_bytes));
        let key = (e.rank, e.host.as_deref().map(Arc::from));
        let appended = match multiline::classify(e) {
            Some(kind) => streams.block_line(key.clone(), kind, e, t, window_ms),
            None => streams.other_match(&key, e, t, window_ms),
        };
        assert!(streams.len() <= max_streams, "streams per job are capped");
        if appended.appended {
            let stream = streams.get(&key).expect("the stream appended to");
            check_block(&stream.block, max_lines, max_bytes);
        }
    }
    let cfg = IncidentConfig {
        max_context_lines: max_lines,
        max_context_bytes: max_bytes,
        max_context_streams_per_job: max_streams,
        max_open_incidents: 4,
        max_jobs: 8,
        ..IncidentConfig::default()
    };
    let mut correlator = Correlator::new(cfg).expect("a valid incident config");
    let mut out = Vec::new();
    for (_, e) in &events {
        correlator.observe(e, &mut out);
    }
    correlator.resolve_all(&mut out);
    for incident in &out {
        check_context(&incident.context, max_lines, max_bytes);
    }
}

fn check_block(block: &ContextBuf, max_lines: usize, max_bytes: usize) {
    let info = block.info();
    assert_eq!(block.len(), info.lines.len());
    assert_eq!(
        block.bytes(),
        info.lines.iter().map(|l| l.text.len()).sum::<usize>(),
        "bytes accounted"
    );
    check_context(&info, max_lines, max_bytes);
}

fn check_context(info: &ContextInfo, max_lines: usize, max_bytes: usize) {
    assert!(info.lines.len() <= max_lines, "{} lines", info.lines.len());
    let bytes: usize = info.lines.iter().map(|l| l.text.len()).sum();
    assert!(bytes <= max_bytes, "{bytes} bytes over {max_bytes}");
    assert!(info
        .lines
        .iter()
        .all(|l| l.text.len() <= MAX_CONTEXT_LINE_BYTES));
    assert_eq!(info.omitted_at.is_some(), info.omitted_lines > 0);
    assert!(info.omitted_at.is_none_or(|at| at <= info.lines.len()));
    if info.omitted_lines > 0 {
        assert!(info.truncated, "omitted lines are marked");
    }
}
