//! Lines as shippers and launchers deliver them -> [`LogRecord`].
//!
//! Two kinds of line reach faultline:
//! - raw text, possibly behind a Kubernetes CRI prefix (`<time> stderr F `) and launcher prefixes
//!   (`[rank3]:` from PyTorch, `[default0]:` from `torchrun --tee`, `3: ` from `srun -l`,
//!   `[1,3]<stderr>:` from `mpirun --tag-output`), which are stripped and kept as the rank;
//! - JSON envelopes from Vector, Fluent Bit, docker's json-file driver and OpenTelemetry (OTLP
//!   JSON, one record or a whole export request), whose message, job, rank, host, pod and
//!   timestamp fields are read.
//!
//! Raw lines are only decoded once the matcher has hit them; JSON lines are decoded first,
//! since their message may be escaped.

use std::borrow::Cow;

use serde_json::{Map, Value};

use crate::record::{LineMeta, LogRecord, Origin};

/// Why a JSON line is not an envelope. Lenient callers fall back to treating it as raw text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvelopeError {
    /// The line does not parse as JSON; carries the parser's message.
    #[error("invalid JSON: {0}")]
    InvalidJson(String),
    /// A JSON object with none of the message fields.
    #[error("JSON object without a message field (message, log, msg, MESSAGE or body)")]
    NoMessage,
}

/// The most records decoded from one JSON line (an OTLP export request's records, or the lines
/// of a message with embedded newlines). Past it the rest of the line is not scanned and its
/// records are marked truncated: a 1 MiB line of tiny records would otherwise cost a record
/// (an allocation and a copy of the metadata) per dozen bytes.
pub const MAX_RECORDS_PER_LINE: usize = 10_000;

/// Whether a line is a JSON envelope candidate: its first non-blank byte is `{`.
pub fn looks_like_json(line: &[u8]) -> bool {
    line.iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|&b| b == b'{')
}

/// Decodes any line as the engine reads it, for a reader that wants its records' fields (the
/// demo's stamps and job headers): a JSON envelope's records when it is one, else the raw
/// line; `each` sees every record. Returns whether it was an envelope.
pub fn each_record(
    line: &[u8],
    scratch: &mut Vec<LogRecord<'static>>,
    each: &mut dyn FnMut(&LogRecord<'_>),
) -> bool {
    scratch.clear();
    if looks_like_json(line) && decode_json(line, scratch).is_ok() {
        scratch.iter().for_each(&mut *each);
        return true;
    }
    each(&decode_raw(line));
    false
}

/// Decodes a raw text line: strips `\r`, a CRI prefix and launcher prefixes; reads the rank and
/// a leading timestamp.
pub fn decode_raw(line: &[u8]) -> LogRecord<'_> {
    let mut meta = LineMeta::default();
    let mut rest = line.strip_suffix(b"\r").unwrap_or(line);
    if let Some((ts, after)) = split_cri(rest) {
        meta.timestamp = Some(ts);
        rest = after;
    }
    let (rank, stripped) = strip_launcher_prefixes(rest);
    meta.rank = rank;
    read_line_header(stripped, &mut meta);
    LogRecord {
        message: Cow::Borrowed(stripped),
        meta,
        truncated: false,
    }
}

/// What the start of a message tells beyond launcher prefixes: a syslog or journald header
/// (timestamp, host, and that the line is a node's own log), an NCCL prefix
/// (`host:pid:tid [dev]`: the host), or a leading ISO timestamp. The message keeps them:
/// patterns match it as the program printed it.
fn read_line_header(message: &[u8], meta: &mut LineMeta) {
    if let Some((ts, host)) = syslog_header(message) {
        if meta.timestamp.is_none() {
            meta.timestamp = Some(ts);
        }
        if meta.host.is_none() {
            meta.host = Some(host);
        }
        meta.origin = Origin::NodeLog;
        return;
    }
    if meta.host.is_none() {
        meta.host = nccl_prefix_host(message);
    }
    if meta.timestamp.is_none() {
        meta.timestamp = leading_timestamp(message);
    }
}

/// A syslog (RFC 3164: `Nov 29 09:02:41 host tag[pid]: `) or ISO (rsyslog, `journalctl -o
/// short-iso`: `2024-11-29T09:02:41+0000 host tag: `) header: (timestamp text, host).
pub fn syslog_header(line: &[u8]) -> Option<(String, String)> {
    let head = &line[..line.len().min(128)];
    // A cut inside a multi-byte character at 128 bytes: read up to it.
    let text = match std::str::from_utf8(head) {
        Ok(t) => t,
        Err(e) => std::str::from_utf8(&head[..e.valid_up_to()]).ok()?,
    };
    let (ts, rest) = if let Some(ts) = text.get(..15).filter(|t| crate::time::parse(t).is_some()) {
        (ts, text.get(15..)?)
    } else {
        let end = text.find(' ')?;
        let ts = &text[..end];
        if !ts.as_bytes().first().is_some_and(u8::is_ascii_digit)
            || crate::time::parse(ts).is_none()
        {
            return None;
        }
        (ts, &text[end..])
    };
    let rest = rest.strip_prefix(' ')?;
    let (host, rest) = rest.split_once(' ')?;
    let host_ok = !host.is_empty()
        && host.len() <= 64
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'));
    // The tag: `kernel:`, `slurmd[1234]:`, `systemd-journald[1]:`.
    let tag_end = rest.find(':')?;
    let tag = &rest[..tag_end];
    let tag_name = tag.split('[').next().unwrap_or("");
    let tag_ok = !tag_name.is_empty()
        && tag_name.len() <= 48
        && tag_name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'/'))
        && (tag.len() == tag_name.len()
            || tag[tag_name.len()..]
                .strip_prefix('[')
                .and_then(|p| p.strip_suffix(']'))
                .is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())));
    (host_ok && tag_ok).then(|| (ts.to_string(), host.to_string()))
}

/// The host of NCCL's line prefix `host:pid:tid [dev] `.
pub fn nccl_prefix_host(line: &[u8]) -> Option<String> {
    let colon = memchr::memchr(b':', &line[..line.len().min(80)])?;
    let host = &line[..colon];
    if host.is_empty()
        || !host[0].is_ascii_alphanumeric()
        || !host
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
    {
        return None;
    }
    let rest = &line[colon + 1..];
    let pid = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    let rest = rest.get(pid..)?.strip_prefix(b":")?;
    let tid = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    let rest = rest.get(tid..)?.strip_prefix(b" [")?;
    let dev = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if pid == 0 || tid == 0 || dev == 0 || rest.get(dev) != Some(&b']') {
        return None;
    }
    Some(String::from_utf8_lossy(host).into_owned())
}

/// Decodes a JSON envelope into one record per message line (an OTLP export request holds many
/// records; a message with embedded newlines becomes one record per line).
pub fn decode_json(line: &[u8], out: &mut Vec<LogRecord<'static>>) -> Result<(), EnvelopeError> {
    let value: Value =
        serde_json::from_slice(line).map_err(|e| EnvelopeError::InvalidJson(e.to_string()))?;
    let Value::Object(obj) = value else {
        return Err(EnvelopeError::InvalidJson("not a JSON object".into()));
    };
    let before = out.len();
    let mut out = Capped {
        out,
        limit: before + MAX_RECORDS_PER_LINE,
        capped: false,
    };
    if let Some(Value::Array(resource_logs)) = obj.get("resourceLogs") {
        'export: for rl in resource_logs {
            let resource = attributes(rl.get("resource").and_then(|r| r.get("attributes")));
            for sl in array(rl.get("scopeLogs")) {
                for record in array(sl.get("logRecords")) {
                    if out.full() {
                        break 'export;
                    }
                    decode_otlp_record(record, &resource, &mut out);
                }
            }
        }
        return match out.finish(before) {
            0 => Err(EnvelopeError::NoMessage),
            _ => Ok(()),
        };
    }
    if obj.contains_key("body")
        && (obj.contains_key("timeUnixNano") || obj.contains_key("attributes"))
    {
        let resource = attributes(obj.get("resource").and_then(|r| r.get("attributes")));
        decode_otlp_record(&Value::Object(obj), &resource, &mut out);
        return match out.finish(before) {
            0 => Err(EnvelopeError::NoMessage),
            _ => Ok(()),
        };
    }
    let message = ["message", "log", "msg", "MESSAGE", "body"]
        .iter()
        .find_map(|k| obj.get(*k).and_then(as_text))
        .ok_or(EnvelopeError::NoMessage)?;
    let message = with_detail(message, &obj, DETAIL_KEYS);
    let labels = obj.get("kubernetes").and_then(Value::as_object);
    let label_map = labels.and_then(|k| {
        k.get("labels")
            .or_else(|| k.get("pod_labels"))
            .and_then(Value::as_object)
    });
    let field = |keys: &[&str]| keys.iter().find_map(|k| obj.get(*k).and_then(as_text));
    let k8s =
        |keys: &[&str]| labels.and_then(|m| keys.iter().find_map(|k| m.get(*k).and_then(as_text)));
    let label = |keys: &[&str]| {
        label_map.and_then(|m| keys.iter().find_map(|k| m.get(*k).and_then(as_text)))
    };
    let meta = LineMeta {
        job_id: field(JOB_KEYS).or_else(|| label(JOB_LABELS)),
        rank: field(RANK_KEYS).and_then(|r| r.trim().parse().ok()),
        host: field(&["host", "hostname", "_HOSTNAME"]).or_else(|| k8s(&["host", "node_name"])),
        pod: field(&["pod", "pod_name"]).or_else(|| k8s(&["pod_name"])),
        timestamp: ["timestamp", "@timestamp", "time", "date", "ts"]
            .iter()
            .find_map(|k| obj.get(*k).and_then(as_timestamp)),
        cluster: field(&["cluster"]).or_else(|| label(&["cluster"])),
        origin: Origin::Envelope,
    };
    push_lines(&message, meta, &mut out);
    out.finish(before);
    Ok(())
}

/// The fields in which structured loggers keep an error apart from the message: zap's, logrus'
/// and klog's JSON encoders write `{"msg":"failed to start plugin","error":"..."}` (klog `err`),
/// Elastic Common Schema `error.message` and `error.stack_trace`, python-json-logger the traceback
/// in `exc_info`, structlog in `exception`.
const DETAIL_KEYS: &[&str] = &["error", "err", "exc_info", "exception"];

/// An OpenTelemetry log record's exception attributes (semantic conventions), as [`attributes`]
/// flattens them.
const OTLP_DETAIL_KEYS: &[&str] = &["exception.message", "exception.stacktrace"];

/// `message` with the error detail of its record after it, as those loggers' console encoders
/// print it: a one-line detail after `": "` on the message's line (Go's `msg: err`), a multi-line
/// one (a traceback) on the lines after it. Only text is taken (a boolean `error` flag is not a
/// detail), and a detail the message already holds is not repeated.
fn with_detail(mut message: String, obj: &Map<String, Value>, keys: &[&str]) -> String {
    let mut append = |detail: &str| {
        let detail = detail.trim_end_matches(['\n', '\r']);
        if detail.trim().is_empty() || message.contains(detail) {
            return;
        }
        let message_end = message.trim_end_matches(['\n', '\r']).len();
        message.truncate(message_end);
        message.push_str(if detail.contains('\n') { "\n" } else { ": " });
        message.push_str(detail);
    };
    for &key in keys {
        match obj.get(key) {
            Some(Value::String(s)) => append(s),
            Some(Value::Object(e)) => ["message", "stack_trace"]
                .iter()
                .filter_map(|k| e.get(*k).and_then(Value::as_str))
                .for_each(&mut append),
            _ => {}
        }
    }
    message
}

/// The records of one JSON line, at most [`MAX_RECORDS_PER_LINE`] of them.
struct Capped<'o> {
    out: &'o mut Vec<LogRecord<'static>>,
    limit: usize,
    /// A record was refused.
    capped: bool,
}

impl Capped<'_> {
    fn full(&mut self) -> bool {
        if self.out.len() >= self.limit {
            self.capped = true;
        }
        self.capped
    }

    fn push(&mut self, record: LogRecord<'static>) {
        if !self.full() {
            self.out.push(record);
        }
    }

    /// Marks the line's records truncated if some were refused; how many were decoded.
    fn finish(self, before: usize) -> usize {
        if self.capped {
            for record in &mut self.out[before..] {
                record.truncated = true;
            }
        }
        self.out.len() - before
    }
}

const JOB_KEYS: &[&str] = &[
    "job_id",
    "jobId",
    "job",
    "slurm_job_id",
    "SLURM_JOB_ID",
    "job_name",
];
const JOB_LABELS: &[&str] = &[
    "training.kubeflow.org/job-name",
    "batch.kubernetes.io/job-name",
    "job-name",
    "job_id",
    "job",
];
const RANK_KEYS: &[&str] = &["rank", "RANK", "global_rank", "SLURM_PROCID"];

fn decode_otlp_record(record: &Value, resource: &Map<String, Value>, out: &mut Capped<'_>) {
    let Some(message) = record.get("body").and_then(any_value) else {
        return;
    };
    let attrs = attributes(record.get("attributes"));
    let message = with_detail(message, &attrs, OTLP_DETAIL_KEYS);
    let get = |keys: &[&str]| {
        keys.iter()
            .find_map(|k| attrs.get(*k).or_else(|| resource.get(*k)).and_then(as_text))
    };
    let meta = LineMeta {
        job_id: get(&["job.id", "slurm.job.id", "k8s.job.name", "job_id", "job"]),
        rank: get(&["rank", "process.rank", "global_rank"]).and_then(|r| r.parse().ok()),
        host: get(&["host.name", "k8s.node.name"]),
        pod: get(&["k8s.pod.name"]),
        timestamp: ["timeUnixNano", "observedTimeUnixNano"]
            .iter()
            .find_map(|k| record.get(*k).and_then(as_text))
            .and_then(|nanos| nanos.parse::<u128>().ok())
            .filter(|n| *n > 0)
            .map(crate::time::rfc3339_from_unix_nanos),
        cluster: get(&["k8s.cluster.name", "cluster"]),
        origin: Origin::Envelope,
    };
    push_lines(&message, meta, out);
}

fn push_lines(message: &str, meta: LineMeta, out: &mut Capped<'_>) {
    let message = message.strip_suffix('\n').unwrap_or(message);
    for line in message.split('\n') {
        if out.full() {
            return;
        }
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.is_empty() && message.contains('\n') {
            continue;
        }
        let (rank, stripped) = strip_launcher_prefixes(line.as_bytes());
        let mut meta = meta.clone();
        if meta.rank.is_none() {
            meta.rank = rank;
        }
        read_line_header(stripped, &mut meta);
        if meta.origin == Origin::Text {
            meta.origin = Origin::Envelope;
        }
        out.push(LogRecord {
            message: Cow::Owned(stripped.to_vec()),
            meta,
            truncated: false,
        });
    }
}

fn array(v: Option<&Value>) -> &[Value] {
    v.and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

/// OTLP attributes (`[{key, value: {stringValue|intValue|...}}]`) as a flat map.
fn attributes(v: Option<&Value>) -> Map<String, Value> {
    let mut map = Map::new();
    for kv in array(v) {
        if let (Some(key), Some(value)) = (kv.get("key").and_then(Value::as_str), kv.get("value")) {
            if let Some(text) = any_value(value) {
                map.insert(key.to_string(), Value::String(text));
            }
        }
    }
    map
}

/// An OTLP `AnyValue` (or a plain JSON scalar) as text.
fn any_value(v: &Value) -> Option<String> {
    if let Some(obj) = v.as_object() {
        for key in ["stringValue", "intValue", "doubleValue", "boolValue"] {
            if let Some(inner) = obj.get(key) {
                return as_text(inner);
            }
        }
        return None;
    }
    as_text(v)
}

fn as_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// A timestamp field: RFC 3339 text is kept; epoch seconds (Fluent Bit's `date`) are converted.
fn as_timestamp(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => {
            let secs = n.as_f64()?;
            if !(0.0..1e11).contains(&secs) {
                return None;
            }
            Some(crate::time::rfc3339_from_unix_nanos((secs * 1e9) as u128))
        }
        _ => None,
    }
}

/// `2024-05-01T12:00:00.123456789Z stderr F message` -> (timestamp, message).
fn split_cri(line: &[u8]) -> Option<(String, &[u8])> {
    let ts_end = memchr::memchr(b' ', line)?;
    let ts = &line[..ts_end];
    if !is_iso_timestamp(ts) {
        return None;
    }
    let rest = &line[ts_end + 1..];
    let rest = rest
        .strip_prefix(b"stdout ")
        .or_else(|| rest.strip_prefix(b"stderr "))?;
    let rest = rest
        .strip_prefix(b"F ")
        .or_else(|| rest.strip_prefix(b"P "))
        .or_else(|| (rest == b"F" || rest == b"P").then_some(&b""[..]))?;
    Some((String::from_utf8_lossy(ts).into_owned(), rest))
}

/// `YYYY-MM-DD[T ]HH:MM:SS...` at the very start.
fn is_iso_timestamp(s: &[u8]) -> bool {
    let shape = b"dddd-dd-ddxdd:dd:dd";
    s.len() >= shape.len()
        && shape.iter().zip(s).all(|(&want, &got)| match want {
            b'd' => got.is_ascii_digit(),
            b'x' => got == b'T' || got == b' ',
            other => got == other,
        })
}

/// A leading ISO-8601 timestamp, bare or in brackets (`[2024-05-01T12:00:00.123]` as Slurm
/// prints it), up to the first space or `]`; or glog's `E1129 09:12:40.200` (PyTorch's C++
/// log, bare or in brackets), which names no year.
fn leading_timestamp(message: &[u8]) -> Option<String> {
    let body = message.strip_prefix(b"[").unwrap_or(message);
    if let Some(glog) = glog_stamp(body) {
        return Some(glog);
    }
    if !is_iso_timestamp(body) {
        return None;
    }
    // The date and the time may be separated by a space; keep both parts.
    let tail = &body[19..];
    let end = 19
        + tail
            .iter()
            .position(|&b| b == b' ' || b == b']' || b == b',')
            .unwrap_or(tail.len());
    Some(String::from_utf8_lossy(&body[..end]).into_owned())
}

/// glog's `LMMDD HH:MM:SS[.frac]` at the start of `s`.
fn glog_stamp(s: &[u8]) -> Option<String> {
    if !matches!(s.first(), Some(b'I' | b'W' | b'E' | b'F')) || s.get(5) != Some(&b' ') {
        return None;
    }
    let end = s
        .iter()
        .skip(6)
        .position(|&b| b == b' ' || b == b']')
        .map_or(s.len(), |p| p + 6);
    let text = std::str::from_utf8(&s[..end]).ok()?;
    crate::time::parse(text).map(|_| text.to_string())
}

/// Strips launcher prefixes (up to three, as in `0: [rank0]: ...`) and returns the rank they
/// name: `[rankN]:` or `srun -l`'s `N: ` (global ranks) win over mpirun's `[job,N]<stream>:`,
/// which wins over torchrun's `[roleN]:` (a local rank).
pub fn strip_launcher_prefixes(line: &[u8]) -> (Option<u32>, &[u8]) {
    let mut rest = line;
    let mut best: Option<(u8, u32)> = None;
    for _ in 0..3 {
        let Some((priority, rank, after)) = launcher_prefix(rest) else {
            break;
        };
        if best.is_none_or(|(p, _)| priority < p) {
            best = Some((priority, rank));
        }
        rest = after;
    }
    (best.map(|(_, r)| r), rest)
}

/// One launcher prefix at the start of `s`: (priority, rank, rest). Lower priority wins.
fn launcher_prefix(s: &[u8]) -> Option<(u8, u32, &[u8])> {
    if let Some(body) = s.strip_prefix(b"[") {
        let close = memchr::memchr(b']', &body[..body.len().min(40)])?;
        let inside = &body[..close];
        let after = &body[close + 1..];
        // [rank3]:
        if let Some(num) = inside.strip_prefix(b"rank") {
            let rank = parse_u32(num)?;
            let rest = after.strip_prefix(b":")?;
            return Some((0, rank, trim_one_space(rest)));
        }
        // [1,3]<stderr>: or [1,3]<stdout>:
        if let Some(comma) = memchr::memchr(b',', inside) {
            parse_u32(&inside[..comma])?;
            let rank = parse_u32(&inside[comma + 1..])?;
            let rest = after
                .strip_prefix(b"<stderr>:")
                .or_else(|| after.strip_prefix(b"<stdout>:"))
                .or_else(|| after.strip_prefix(b"<stddiag>:"))?;
            return Some((2, rank, rest));
        }
        // [default0]: (torchrun --tee: role name then local rank)
        let digits = inside
            .iter()
            .rev()
            .take_while(|b| b.is_ascii_digit())
            .count();
        if digits > 0 && digits < inside.len() {
            let (role, num) = inside.split_at(inside.len() - digits);
            if role
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || *b == b'_' || *b == b'-')
            {
                let rank = parse_u32(num)?;
                let rest = after.strip_prefix(b":")?;
                return Some((3, rank, rest));
            }
        }
        return None;
    }
    // srun -l: "3: message" (srun pads the task id with spaces to align columns).
    let lead = s.iter().take_while(|&&b| b == b' ').count();
    let body = &s[lead..];
    let digits = body.iter().take_while(|b| b.is_ascii_digit()).count();
    if (1..=6).contains(&digits) && body.get(digits..digits + 2) == Some(b": ") {
        let rank = parse_u32(&body[..digits])?;
        return Some((1, rank, &body[digits + 2..]));
    }
    None
}

fn trim_one_space(s: &[u8]) -> &[u8] {
    s.strip_prefix(b" ").unwrap_or(s)
}

fn parse_u32(s: &[u8]) -> Option<u32> {
    if s.is_empty() || s.len() > 9 || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(s).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(line: &str) -> (Option<u32>, String, Option<String>) {
        let r = decode_raw(line.as_bytes());
        (
            r.meta.rank,
            String::from_utf8_lossy(&r.message).into_owned(),
            r.meta.timestamp,
        )
    }

    #[test]
    fn launcher_prefixes_are_stripped_and_kept_as_rank() {
        assert_eq!(raw("[rank3]:[E ProcessGroupNCCL.cpp] x").0, Some(3));
        assert_eq!(
            raw("[rank3]:[E ProcessGroupNCCL.cpp] x").1,
            "[E ProcessGroupNCCL.cpp] x"
        );
        assert_eq!(raw("[default5]:Traceback").0, Some(5));
        assert_eq!(raw("[default5]:Traceback").1, "Traceback");
        assert_eq!(raw("12: RuntimeError: boom").0, Some(12));
        assert_eq!(raw(" 7: RuntimeError: boom").1, "RuntimeError: boom");
        assert_eq!(raw("[1,6]<stderr>:NCCL WARN x").0, Some(6));
        assert_eq!(raw("[1,6]<stderr>:NCCL WARN x").1, "NCCL WARN x");
        // srun -l around a PyTorch prefix: the global [rankN] wins.
        assert_eq!(raw("0: [rank9]: KeyError: 'x'").0, Some(9));
        assert_eq!(raw("0: [rank9]: KeyError: 'x'").1, "KeyError: 'x'");
    }

    #[test]
    fn text_that_only_looks_like_a_prefix_is_kept() {
        assert_eq!(raw("[E ProcessGroupNCCL.cpp:1] x").0, None);
        assert_eq!(raw("12:30:00 clock time").0, None);
        assert_eq!(raw("[rank]: x").1, "[rank]: x");
    }

    #[test]
    fn cri_prefix_gives_the_timestamp() {
        let (rank, msg, ts) = raw("2024-05-01T12:00:00.123456789Z stderr F [rank1]: boom");
        assert_eq!(rank, Some(1));
        assert_eq!(msg, "boom");
        assert_eq!(ts.as_deref(), Some("2024-05-01T12:00:00.123456789Z"));
    }

    #[test]
    fn leading_timestamps_are_read() {
        assert_eq!(
            raw("[2024-05-01T12:00:00.123] error: x").2.as_deref(),
            Some("2024-05-01T12:00:00.123")
        );
        assert_eq!(raw("no time here").2, None);
    }

    fn json(line: &str) -> Vec<LogRecord<'static>> {
        let mut out = Vec::new();
        decode_json(line.as_bytes(), &mut out).expect("decodes");
        out
    }

    #[test]
    fn docker_json_file() {
        let r =
            json(r#"{"log":"[rank2]: boom\n","stream":"stderr","time":"2024-05-01T00:00:00Z"}"#);
        assert_eq!(r.len(), 1);
        assert_eq!(&*r[0].message, b"boom");
        assert_eq!(r[0].meta.rank, Some(2));
        assert_eq!(r[0].meta.timestamp.as_deref(), Some("2024-05-01T00:00:00Z"));
    }

    #[test]
    fn vector_and_fluent_bit() {
        let r = json(
            r#"{"message":"x","host":"n1","timestamp":"t","kubernetes":{"pod_name":"p-0","pod_labels":{"training.kubeflow.org/job-name":"llm"}}}"#,
        );
        assert_eq!(r[0].meta.job_id.as_deref(), Some("llm"));
        assert_eq!(r[0].meta.pod.as_deref(), Some("p-0"));
        assert_eq!(r[0].meta.host.as_deref(), Some("n1"));
        let r = json(
            r#"{"date":1714521600.5,"log":"y","kubernetes":{"host":"n2","labels":{"job-name":"j"}}}"#,
        );
        assert_eq!(
            r[0].meta.timestamp.as_deref(),
            Some("2024-05-01T00:00:00.500000000Z")
        );
        assert_eq!(r[0].meta.host.as_deref(), Some("n2"));
        assert_eq!(r[0].meta.job_id.as_deref(), Some("j"));
    }

    #[test]
    fn otlp_export_request_holds_many_records() {
        let r = json(
            r#"{"resourceLogs":[{"resource":{"attributes":[{"key":"host.name","value":{"stringValue":"h"}},{"key":"job.id","value":{"stringValue":"77"}}]},"scopeLogs":[{"logRecords":[{"timeUnixNano":"1714521600000000000","body":{"stringValue":"a"},"attributes":[{"key":"rank","value":{"intValue":"4"}}]},{"body":{"stringValue":"b"}}]}]}]}"#,
        );
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].meta.rank, Some(4));
        assert_eq!(r[0].meta.job_id.as_deref(), Some("77"));
        assert_eq!(r[1].meta.host.as_deref(), Some("h"));
        assert_eq!(
            r[0].meta.timestamp.as_deref(),
            Some("2024-05-01T00:00:00.000000000Z")
        );
    }

    #[test]
    fn multi_line_messages_become_one_record_per_line() {
        let r = json(r#"{"message":"Traceback:\n  File x\nKeyError: 'a'\n"}"#);
        assert_eq!(r.len(), 3);
        assert_eq!(&*r[2].message, b"KeyError: 'a'");
    }

    #[test]
    fn a_structured_loggers_error_field_follows_its_message() {
        // zap / logrus: the error after the message on its line.
        let r = json(
            r#"{"level":"error","msg":"failed to start shim","error":"fork/exec /usr/bin/containerd-shim-runc-v2: resource temporarily unavailable"}"#,
        );
        assert_eq!(r.len(), 1);
        assert_eq!(
            &*r[0].message,
            &b"failed to start shim: fork/exec /usr/bin/containerd-shim-runc-v2: resource temporarily unavailable"[..]
        );
        // klog's `err`; Elastic Common Schema's error object with its stack trace on the next lines.
        let r = json(r#"{"msg":"Failed to initialize NVML","err":"could not load NVML library"}"#);
        assert_eq!(
            &*r[0].message,
            &b"Failed to initialize NVML: could not load NVML library"[..]
        );
        let r = json(
            r#"{"message":"step failed","error":{"message":"CUDA error: out of memory","stack_trace":"Traceback (most recent call last):\n  File \"t.py\", line 1\nRuntimeError: CUDA error: out of memory\n"}}"#,
        );
        let lines: Vec<&[u8]> = r.iter().map(|r| &*r.message).collect();
        assert_eq!(
            lines,
            [
                &b"step failed: CUDA error: out of memory"[..],
                b"Traceback (most recent call last):",
                b"  File \"t.py\", line 1",
                b"RuntimeError: CUDA error: out of memory",
            ]
        );
        // python-json-logger's traceback; a detail the message holds already, or a flag, adds nothing.
        let r = json(r#"{"message":"worker died","exc_info":"Traceback:\nKeyError: 'a'"}"#);
        assert_eq!(r.len(), 3);
        assert_eq!(&*r[2].message, b"KeyError: 'a'");
        let r = json(r#"{"msg":"open x: permission denied","error":"permission denied"}"#);
        assert_eq!(&*r[0].message, b"open x: permission denied");
        let r = json(r#"{"msg":"done","error":false,"exception":""}"#);
        assert_eq!(&*r[0].message, b"done");
        // An OpenTelemetry record's exception attributes.
        let r = json(
            r#"{"body":{"stringValue":"train step failed"},"attributes":[{"key":"exception.message","value":{"stringValue":"NCCL error: unhandled system error"}}]}"#,
        );
        assert_eq!(
            &*r[0].message,
            &b"train step failed: NCCL error: unhandled system error"[..]
        );
    }

    #[test]
    fn non_envelopes_are_errors() {
        let mut out = Vec::new();
        assert!(matches!(
            decode_json(b"{not json", &mut out),
            Err(EnvelopeError::InvalidJson(_))
        ));
        assert_eq!(
            decode_json(br#"{"level":"info"}"#, &mut out),
            Err(EnvelopeError::NoMessage)
        );
    }
}
