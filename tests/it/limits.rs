//! Every limit of `scan` at its boundary: exactly at the limit nothing is cut; one past it the
//! documented thing happens (docs/limits.md). Limits of the Kafka, incident and observability
//! stages are tested on their branches.

use std::sync::Arc;

use faultline::engine::{ChunkInfo, Engine};
use faultline::enrich::{Enricher, MatchEvent, MAX_CAPTURE_BYTES, MAX_EVENT_LINE_BYTES};
use faultline::envelope::{self, MAX_RECORDS_PER_LINE};
use faultline::kb::KnowledgeBase;
use faultline::record::Provenance;
use faultline::scan::{scan_inputs, ScanOptions, ScanStats};
use faultline::sink::stdout::{Format, StdoutSink};
use faultline::source::file::{self, ChunkReader};

/// Two entries: `boom N` (a number capture) and `fail: MESSAGE` (a capture as long as the line).
fn engine() -> Engine {
    let entry = |id: &str, code: &str, pattern: &str| {
        format!(
            r#"id = "{id}"
title = "t"
domain = "test"
category = "crash"
error_code = "{code}"
role = "root"
severity = "error"
verification = "ai_generated"
patterns_verified = "unverified"
root_cause = "r"
patterns = ['{pattern}']
examples = ["x"]
negative_examples = ["y"]
references = ["z"]
"#
        )
    };
    let kb = KnowledgeBase::from_files(
        vec![
            (
                "test/boom.toml".into(),
                entry("test/boom", "BOOM", r"boom (?P<n>\d+)"),
            ),
            (
                "test/fail.toml".into(),
                entry("test/fail", "FAIL", r"fail: (?P<message>[^\n]+)"),
            ),
        ],
        "limits",
    )
    .expect("valid");
    Engine::new(kb).expect("compiles")
}

/// A line of exactly `len` bytes (no newline) that starts with `head`.
fn line_of(head: &str, len: usize) -> Vec<u8> {
    let mut line = head.as_bytes().to_vec();
    assert!(line.len() <= len);
    line.resize(len, b'x');
    line
}

/// Every chunk as `(first_line, truncated, data)`.
fn chunks(input: &[u8], chunk_bytes: usize, max_line: usize) -> Vec<(u64, bool, Vec<u8>)> {
    let mut reader = ChunkReader::new(input, chunk_bytes, max_line);
    let mut out = Vec::new();
    while let Some(c) = reader.next_chunk().expect("reads") {
        let lines = memchr::memchr_iter(b'\n', c.data).count() as u64
            + u64::from(c.data.last().is_some_and(|&b| b != b'\n'));
        out.push((c.info.first_line, c.info.truncated, c.data.to_vec()));
        reader.advance_lines(lines.max(1));
    }
    out
}

#[test]
fn a_line_exactly_at_the_line_limit_is_whole() {
    for max_line in [4096, 5000, 65_536] {
        for chunk_bytes in [4096, max_line, 1 << 20] {
            let mut input = line_of("boom 1", max_line);
            input.extend(b"\nboom 2\n");
            let out = chunks(&input, chunk_bytes, max_line);
            assert!(
                out.iter().all(|c| !c.1),
                "nothing cut at max_line={max_line} chunk_bytes={chunk_bytes}"
            );
            assert_eq!(out.concat_data(), input);
            // The same line last in the input, without a newline.
            let input = line_of("boom 1", max_line);
            let out = chunks(&input, chunk_bytes, max_line);
            assert!(out.iter().all(|c| !c.1), "max_line={max_line} at EOF");
            assert_eq!(out.concat_data(), input);
        }
    }
}

#[test]
fn a_line_one_past_the_line_limit_is_cut_and_marked() {
    for max_line in [4096, 5000] {
        for chunk_bytes in [4096, max_line, 1 << 20] {
            let mut input = b"boom 0\n".to_vec();
            input.extend(line_of("boom 1", max_line + 1));
            input.extend(b"\nboom 2\n");
            let out = chunks(&input, chunk_bytes, max_line);
            let cut: Vec<_> = out.iter().filter(|c| c.1).collect();
            assert_eq!(
                cut.len(),
                1,
                "max_line={max_line} chunk_bytes={chunk_bytes}"
            );
            assert_eq!(cut[0].0, 2, "the cut line keeps its number");
            assert_eq!(cut[0].2, line_of("boom 1", max_line));
            let last = out.last().expect("chunks");
            assert_eq!((last.0, last.2.as_slice()), (3, &b"boom 2\n"[..]));
        }
    }
}

trait ConcatData {
    fn concat_data(&self) -> Vec<u8>;
}

impl ConcatData for Vec<(u64, bool, Vec<u8>)> {
    fn concat_data(&self) -> Vec<u8> {
        self.iter().flat_map(|c| c.2.clone()).collect()
    }
}

/// Scans `input` as one file with `opts`; events and stats.
fn scan(input: &[u8], opts: &ScanOptions) -> (Vec<MatchEvent>, ScanStats) {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("job.log");
    std::fs::write(&path, input).expect("write");
    let (inputs, errors) = file::expand(&[path.display().to_string()], None);
    assert!(errors.is_empty());
    let mut sink = StdoutSink::new(Vec::new(), Format::Json);
    let mut events = Vec::new();
    let stats = scan_inputs(&engine(), &inputs, opts, &mut sink, &mut |e| {
        events.push(e.clone())
    })
    .expect("scan runs");
    (events, stats)
}

#[test]
fn scan_marks_only_lines_past_the_line_limit() {
    let opts = ScanOptions {
        max_line_bytes: 4096,
        chunk_bytes: 4096,
        ..ScanOptions::default()
    };
    let mut input = line_of("boom 1", 4096);
    input.push(b'\n');
    input.extend(line_of("boom 2", 4097));
    input.push(b'\n');
    let (events, stats) = scan(&input, &opts);
    let marks: Vec<(u64, bool)> = events
        .iter()
        .map(|e| match e.source {
            Provenance::File { line, .. } => (line, e.truncated),
            _ => unreachable!("file input"),
        })
        .collect();
    assert_eq!(marks, vec![(1, false), (2, true)]);
    assert_eq!(stats.truncated_lines, 1);
    assert_eq!(stats.lines, 2);
}

/// Events of one line through the engine and the enricher.
fn events_of(line: &[u8]) -> Vec<MatchEvent> {
    let engine = engine();
    let enricher = Enricher::new(Arc::clone(&engine.kb));
    let mut worker = engine.worker().expect("scratch");
    let mut out = Vec::new();
    engine
        .scan_chunk(&mut worker, line, ChunkInfo::default(), &mut |hit| {
            let source = Provenance::File {
                path: "-".into(),
                line: hit.line,
            };
            out.push(enricher.event(&hit, "job", source));
        })
        .expect("scan");
    out
}

#[test]
fn the_event_line_is_cut_one_past_its_limit() {
    let whole = events_of(&line_of("boom 1 ", MAX_EVENT_LINE_BYTES));
    assert_eq!(whole.len(), 1);
    assert_eq!(whole[0].line.len(), MAX_EVENT_LINE_BYTES);
    assert!(!whole[0].truncated);
    let cut = events_of(&line_of("boom 1 ", MAX_EVENT_LINE_BYTES + 1));
    assert_eq!(cut[0].line.len(), MAX_EVENT_LINE_BYTES);
    assert!(cut[0].truncated);
}

#[test]
fn a_capture_is_cut_one_past_its_limit() {
    let head = "fail: ";
    let whole = events_of(&line_of(head, head.len() + MAX_CAPTURE_BYTES));
    assert_eq!(whole[0].captures["message"].len(), MAX_CAPTURE_BYTES);
    assert!(!whole[0].truncated);
    let cut = events_of(&line_of(head, head.len() + MAX_CAPTURE_BYTES + 1));
    assert_eq!(cut[0].captures["message"].len(), MAX_CAPTURE_BYTES);
    assert!(cut[0].truncated);
    // A multi-byte character across the limit is left out whole: the value stays UTF-8.
    let mut line = line_of(head, head.len() + MAX_CAPTURE_BYTES - 1);
    line.extend("é".as_bytes());
    let cut = events_of(&line);
    assert_eq!(cut[0].captures["message"].len(), MAX_CAPTURE_BYTES - 1);
    assert!(cut[0].truncated);
}

/// An OTLP export request with `n` records whose bodies are `boom <i>`.
fn otlp(n: usize) -> Vec<u8> {
    let records: Vec<String> = (0..n)
        .map(|i| format!(r#"{{"body":{{"stringValue":"boom {i}"}}}}"#))
        .collect();
    format!(
        r#"{{"resourceLogs":[{{"scopeLogs":[{{"logRecords":[{}]}}]}}]}}"#,
        records.join(",")
    )
    .into_bytes()
}

#[test]
fn an_otlp_line_decodes_at_most_the_record_limit() {
    let whole = events_of(&otlp(MAX_RECORDS_PER_LINE));
    assert_eq!(whole.len(), MAX_RECORDS_PER_LINE);
    assert!(whole.iter().all(|e| !e.truncated));
    let capped = events_of(&otlp(MAX_RECORDS_PER_LINE + 1));
    assert_eq!(capped.len(), MAX_RECORDS_PER_LINE);
    assert!(
        capped.iter().all(|e| e.truncated),
        "the line's events say so"
    );
    assert_eq!(
        capped.last().map(|e| e.captures["n"].clone()),
        Some((MAX_RECORDS_PER_LINE - 1).to_string()),
        "the first records are kept"
    );
}

#[test]
fn a_message_of_many_lines_decodes_at_most_the_record_limit() {
    let message: String = (0..=MAX_RECORDS_PER_LINE)
        .map(|i| format!("boom {i}\\n"))
        .collect();
    let line = format!(r#"{{"message":"{message}"}}"#);
    let mut records = Vec::new();
    envelope::decode_json(line.as_bytes(), &mut records).expect("decodes");
    assert_eq!(records.len(), MAX_RECORDS_PER_LINE);
    assert!(records.iter().all(|r| r.truncated));
}

/// `{"message":"boom 1","x":[[...]]}` with `depth` nested arrays.
fn nested(depth: usize) -> Vec<u8> {
    format!(
        r#"{{"message":"boom 1","x":{}{}}}"#,
        "[".repeat(depth),
        "]".repeat(depth)
    )
    .into_bytes()
}

#[test]
fn json_nesting_stops_at_serde_json_s_recursion_limit() {
    // serde_json's recursion limit (128) lets 127 levels through, the envelope object being one
    // of them, and refuses more with an error, not a stack overflow; such a line is scanned as
    // raw text.
    let mut out = Vec::new();
    assert!(envelope::decode_json(&nested(126), &mut out).is_ok());
    assert_eq!(&*out[0].message, b"boom 1");
    out.clear();
    assert!(matches!(
        envelope::decode_json(&nested(127), &mut out),
        Err(envelope::EnvelopeError::InvalidJson(_))
    ));
    for depth in [127, 1_000_000] {
        let events = events_of(&nested(depth));
        assert_eq!(events.len(), 1, "matched as raw text at depth {depth}");
        assert!(events[0].line.starts_with(r#"{"message":"boom 1""#));
    }
}

#[test]
fn a_json_line_past_the_line_limit_is_scanned_as_cut_raw_text() {
    let opts = ScanOptions {
        max_line_bytes: 4096,
        chunk_bytes: 4096,
        ..ScanOptions::default()
    };
    let mut exact = br#"{"message":"boom 7 "#.to_vec();
    exact.resize(4096 - 2, b'x');
    exact.extend(b"\"}\n");
    let (events, _) = scan(&exact, &opts);
    assert_eq!(events.len(), 1);
    assert!(events[0].line.starts_with("boom 7"), "decoded as JSON");
    assert!(!events[0].truncated);

    let mut long = br#"{"message":"boom 7 "#.to_vec();
    long.resize(4096 - 1, b'x');
    long.extend(b"\"}\n");
    let (events, stats) = scan(&long, &opts);
    assert_eq!(stats.truncated_lines, 1);
    assert_eq!(events.len(), 1);
    assert!(
        events[0].line.starts_with(r#"{"message":"boom 7"#),
        "raw text"
    );
    assert!(events[0].truncated);
}

/// Job ids and hosts of 100 KB each, 60 distinct jobs: every key is capped (with a hash suffix
/// that keeps the jobs apart), so each incident stays small whatever the shipper sends.
#[test]
fn long_job_ids_and_hosts_are_capped_and_stay_distinct() {
    use faultline::incident::IncidentConfig;
    use faultline::record::MAX_KEY_BYTES;

    let mut input = Vec::new();
    for i in 0..60 {
        let line = serde_json::json!({
            "message": format!("boom {i}"),
            "job_id": format!("{}{i}", "j".repeat(100_000)),
            "host": format!("{}{i}", "h".repeat(100_000)),
        });
        input.extend(serde_json::to_vec(&line).expect("json"));
        input.push(b'\n');
    }
    let opts = ScanOptions {
        incidents: Some(IncidentConfig::default()),
        max_line_bytes: 1 << 20,
        ..ScanOptions::default()
    };
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("job.log");
    std::fs::write(&path, &input).expect("write");
    let (inputs, errors) = file::expand(&[path.display().to_string()], None);
    assert!(errors.is_empty());
    let mut sink = StdoutSink::new(Vec::new(), Format::Json);
    let mut events = Vec::new();
    scan_inputs(&engine(), &inputs, &opts, &mut sink, &mut |e| {
        events.push(e.clone())
    })
    .expect("scan runs");
    assert_eq!(events.len(), 60);
    let jobs: std::collections::BTreeSet<&str> = events.iter().map(|e| e.job_id.as_str()).collect();
    assert_eq!(jobs.len(), 60, "distinct ids stay distinct");
    for e in &events {
        assert_eq!(e.job_id.len(), MAX_KEY_BYTES, "job id capped");
        assert!(e.host.as_ref().is_some_and(|h| h.len() == MAX_KEY_BYTES));
    }
    let out = String::from_utf8(sink.into_inner()).expect("utf8");
    let incidents: Vec<&str> = out
        .lines()
        .filter(|l| l.contains(r#""type":"incident""#))
        .collect();
    assert_eq!(incidents.len(), 60, "one incident per job");
    let largest = incidents.iter().map(|l| l.len()).max().unwrap_or(0);
    // Before the cap each incident held the 100 KB id and host several times (about 295 KB).
    assert!(largest < 24 * 1024, "an incident of {largest} bytes");

    // The pages that list them stay small too (before: 27 MB of HTML for /incidents?limit=1000).
    use faultline::incident::Correlator;
    use faultline::server::{self, store::IncidentStore, Get, Routes};
    let mut correlator = Correlator::new(IncidentConfig::default()).expect("config");
    let mut changes = Vec::new();
    for e in &events {
        correlator.observe(e, &mut changes);
    }
    correlator.flush(&mut changes);
    let store = IncidentStore::new(10_000, 1_000);
    for c in &changes {
        store.record(c);
    }
    let routes = server::incidents::routes(Routes::new(), store);
    for path in ["/incidents", "/api/v1/incidents"] {
        let reply = routes.dispatch(
            &hyper::Method::GET,
            &Get::new(path, Some("limit=1000")),
            None,
        );
        assert_eq!(reply.status, 200, "{path}: {}", reply.body);
        assert!(
            reply.body.contains("~"),
            "{path}: the capped ids are listed"
        );
        assert!(
            reply.body.len() < 2 * 1024 * 1024,
            "{path}: {} bytes for 60 incidents",
            reply.body.len()
        );
    }
}
