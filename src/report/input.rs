//! What the report reads: the few facts of a scan it needs, from either source.
//!
//! From a scan run in-process, each [`MatchEvent`] becomes a [`Fact`] (or nothing) as it is
//! emitted, and the incidents come back as the JSON the scan printed; from `scan --format json`
//! output, the same objects are read line by line. Either way the report sees the same
//! [`Input`]: start-up, progress and checkpoint lines of jobs, the root-role lines of nodes
//! (Xid, ECC: the lemon-node history and the report's own node join), and every incident in
//! its final state.

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::BufRead;

use serde::Deserialize;

use crate::enrich::{MatchEvent, Scope};
use crate::kb::entry::Role;
use crate::time::Millis;

/// Why an input could not be read.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// Reading failed.
    #[error("reading {what}: {source}")]
    Read {
        /// What was read.
        what: String,
        /// The error.
        source: std::io::Error,
    },
    /// A line is not a scan's JSON object.
    #[error("{what}:{line}: not a faultline scan JSON object: {source}")]
    Json {
        /// What was read.
        what: String,
        /// The line number, from 1.
        line: usize,
        /// The error.
        source: serde_json::Error,
    },
}

/// What kind of line a fact is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FactKind {
    /// NCCL's communicator start-up line: a rank, the world size, the host.
    Start,
    /// A training progress line.
    Progress,
    /// A checkpoint save.
    Checkpoint,
    /// A node's own root-role line (Xid, ECC, NIC).
    NodeRoot,
}

/// One line the report uses.
#[derive(Debug, Clone)]
pub struct Fact {
    /// Its kind.
    pub kind: FactKind,
    /// The job (for node lines, `node:<host>`).
    pub job_id: String,
    /// Its log time.
    pub t: Millis,
    /// The host it names or came from.
    pub host: Option<String>,
    /// The rank that printed it (or the `rank` capture).
    pub rank: Option<u32>,
    /// `nranks` of a start-up line.
    pub world: Option<u32>,
    /// Error code and KB category (node roots).
    pub code: String,
    /// The KB category.
    pub category: String,
}

/// An incident in its final state, as far as the report needs it.
#[derive(Debug, Clone)]
pub struct IncidentFact {
    /// The job (`node:<host>` for a node incident).
    pub job_id: String,
    /// Whether a root-role line was elected.
    pub root_known: bool,
    /// The elected headline's error code.
    pub code: String,
    /// Its KB category.
    pub category: String,
    /// Its host.
    pub host: Option<String>,
    /// Its GPU.
    pub gpu: Option<String>,
    /// When the failure began: the headline's time, less the wait a collective timeout
    /// reports.
    pub t: Option<Millis>,
    /// The world size the culprit evidence saw.
    pub world_size: Option<u32>,
    /// The incident's id (its fingerprint in output older than ids): one per failure.
    pub fingerprint: String,
}

/// Everything the report reads.
#[derive(Debug, Default)]
pub struct Input {
    /// Job and node lines.
    pub facts: Vec<Fact>,
    /// Incidents.
    pub incidents: Vec<IncidentFact>,
}

/// A log time in milliseconds (a stamp without a year is placed in the current one).
fn millis(stamp: Option<&str>) -> Option<Millis> {
    let s = crate::time::parse(stamp?)?;
    Some(s.millis_near(None))
}

fn kind_of(code: &str, category: &str, role: &str, node: bool) -> Option<FactKind> {
    match (code, category, role, node) {
        ("NCCL_INIT_COMPLETE", _, _, false) => Some(FactKind::Start),
        (_, "progress", "info", false) => Some(FactKind::Progress),
        (_, "checkpoint", "info", false) => Some(FactKind::Checkpoint),
        (_, _, "root", true) => Some(FactKind::NodeRoot),
        _ => None,
    }
}

impl Fact {
    /// The fact a match event carries, if the report uses it.
    pub fn from_event(e: &MatchEvent) -> Option<Fact> {
        let role = match e.role {
            Role::Root => "root",
            Role::Info => "info",
            _ => return None,
        };
        let kind = kind_of(&e.error_code, &e.category, role, e.scope == Scope::Node)?;
        Some(Fact {
            kind,
            job_id: e.job_id.clone(),
            t: millis(e.timestamp.as_deref())?,
            host: e.host.clone(),
            rank: e.any_rank(),
            world: e.captures.get("nranks").and_then(|n| n.parse().ok()),
            code: e.error_code.clone(),
            category: e.category.clone(),
        })
    }
}

/// The fields of a scan's JSON line the report reads (matches and incidents; other types are
/// skipped). Borrowed from the line where it has no escapes: a million incidents and their
/// facts are read without a string allocated per field.
#[derive(Debug, Deserialize)]
struct Line<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default, borrow)]
    job_id: Cow<'a, str>,
    #[serde(default, borrow)]
    error_code: Cow<'a, str>,
    #[serde(default, borrow)]
    category: Cow<'a, str>,
    #[serde(default, borrow)]
    role: Cow<'a, str>,
    #[serde(default, borrow)]
    scope: Cow<'a, str>,
    rank: Option<u32>,
    #[serde(borrow)]
    host: Option<Cow<'a, str>>,
    #[serde(borrow)]
    timestamp: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    captures: Captures<'a>,
    #[serde(default, borrow)]
    fingerprint: Cow<'a, str>,
    #[serde(default, borrow)]
    id: Cow<'a, str>,
    #[serde(default)]
    root_known: bool,
    #[serde(borrow)]
    root: Option<Root<'a>>,
    culprit: Option<Culprit>,
}

/// The captures the report reads (the others are skipped).
#[derive(Debug, Default, Deserialize)]
struct Captures<'a> {
    #[serde(borrow)]
    nranks: Option<Cow<'a, str>>,
    #[serde(borrow)]
    rank: Option<Cow<'a, str>>,
    #[serde(borrow)]
    elapsed_ms: Option<Cow<'a, str>>,
    #[serde(borrow)]
    timeout_ms: Option<Cow<'a, str>>,
    #[serde(borrow)]
    node: Option<Cow<'a, str>>,
    #[serde(borrow)]
    host: Option<Cow<'a, str>>,
}

impl Captures<'_> {
    fn number<T: std::str::FromStr>(v: &Option<Cow<'_, str>>) -> Option<T> {
        v.as_deref().and_then(|n| n.trim().parse().ok())
    }
}

#[derive(Debug, Deserialize)]
struct Root<'a> {
    #[serde(borrow)]
    error_code: Cow<'a, str>,
    #[serde(borrow)]
    category: Cow<'a, str>,
    #[serde(borrow)]
    host: Option<Cow<'a, str>>,
    #[serde(borrow)]
    gpu: Option<Cow<'a, str>>,
    #[serde(borrow)]
    timestamp: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    captures: Captures<'a>,
}

#[derive(Debug, Default, Deserialize)]
struct Culprit {
    #[serde(default)]
    evidence: Option<Evidence>,
}

#[derive(Debug, Default, Deserialize)]
struct Evidence {
    world_size: Option<u32>,
}

/// How long a collective timeout says it waited (its time less this is when it began to hang).
fn waited(category: &str, captures: &Captures<'_>) -> Millis {
    if category != "collective_timeout" {
        return 0;
    }
    Captures::number::<Millis>(&captures.elapsed_ms)
        .or_else(|| Captures::number(&captures.timeout_ms))
        .unwrap_or(0)
        .clamp(0, 24 * 3_600_000)
}

/// A string value's text, borrowed when it has no escapes; `None` for `null` or anything else.
fn text(span: &[u8]) -> Option<Option<Cow<'_, str>>> {
    match span {
        b"" | b"null" => Some(None),
        [b'"', inner @ .., b'"'] if !inner.contains(&b'\\') => std::str::from_utf8(inner)
            .ok()
            .map(|s| Some(Cow::Borrowed(s))),
        _ => serde_json::from_slice::<String>(span)
            .ok()
            .map(|s| Some(Cow::Owned(s))),
    }
}

/// A value parsed by serde, `T::default()` when absent.
fn value<'a, T: Deserialize<'a> + Default>(span: &'a [u8]) -> Option<T> {
    match span {
        b"" => Some(T::default()),
        _ => serde_json::from_slice(span).ok(),
    }
}

impl<'a> Line<'a> {
    /// The line from the spans of its fields ([`super::skim`]); `None` when it cannot be read
    /// that way (serde then reads it whole, and says what is wrong).
    fn skim(line: &'a [u8]) -> Option<Line<'a>> {
        let slot = |key: &[u8]| -> Option<usize> {
            Some(match key {
                b"type" => 0,
                b"job_id" => 1,
                b"error_code" => 2,
                b"category" => 3,
                b"role" => 4,
                b"scope" => 5,
                b"rank" => 6,
                b"host" => 7,
                b"timestamp" => 8,
                b"captures" => 9,
                b"fingerprint" => 10,
                b"root_known" => 11,
                b"root" => 12,
                b"culprit" => 13,
                b"id" => 14,
                _ => return None,
            })
        };
        let [kind, job, code, category, role, scope, rank, host, stamp, captures, fp, known, root, culprit, id] =
            super::skim::fields(line, slot)?;
        let or_empty = |span| text(span).map(Option::unwrap_or_default);
        Some(Line {
            kind: text(kind)??,
            job_id: or_empty(job)?,
            error_code: or_empty(code)?,
            category: or_empty(category)?,
            role: or_empty(role)?,
            scope: or_empty(scope)?,
            rank: value::<Option<u32>>(rank)?,
            host: text(host)?,
            timestamp: text(stamp)?,
            captures: value(captures)?,
            fingerprint: or_empty(fp)?,
            id: or_empty(id)?,
            root_known: value(known)?,
            root: value(root)?,
            culprit: value(culprit)?,
        })
    }
}

impl Line<'_> {
    fn into_fact(self) -> Option<Fact> {
        let node = self.scope == "node";
        let kind = kind_of(&self.error_code, &self.category, &self.role, node)?;
        let rank = self.rank.or_else(|| Captures::number(&self.captures.rank));
        Some(Fact {
            kind,
            t: millis(self.timestamp.as_deref())?,
            world: Captures::number(&self.captures.nranks),
            job_id: self.job_id.into_owned(),
            host: self.host.map(Cow::into_owned),
            rank,
            code: self.error_code.into_owned(),
            category: self.category.into_owned(),
        })
    }

    fn into_incident(self) -> Option<IncidentFact> {
        let root = self.root?;
        let t =
            millis(root.timestamp.as_deref()).map(|t| t - waited(&root.category, &root.captures));
        // A line that names the failed node (`srun: error: Node failure on X`) blames it, not
        // the host that printed it.
        let host = root.captures.node.or(root.captures.host).or(root.host);
        Some(IncidentFact {
            job_id: self.job_id.into_owned(),
            root_known: self.root_known,
            code: root.error_code.into_owned(),
            category: root.category.into_owned(),
            host: host.map(Cow::into_owned),
            gpu: root.gpu.map(Cow::into_owned),
            t,
            world_size: self
                .culprit
                .and_then(|c| c.evidence)
                .and_then(|e| e.world_size),
            // The id never changes for the life of a failure; the fingerprint may move when an
            // earlier line arrives late. Older output has no id.
            fingerprint: match self.id.is_empty() {
                true => self.fingerprint.into_owned(),
                false => self.id.into_owned(),
            },
        })
    }
}

/// Whether a line can be skipped unparsed: a match whose role (near its start in a scan's
/// output) is one no fact has (cascades and symptoms are most of a failing fleet's matches).
fn skippable(line: &[u8]) -> bool {
    let head = &line[..line.len().min(512)];
    if !head.starts_with(br#"{"type":"match""#) {
        return false;
    }
    [&br#""role":"cascade""#[..], br#""role":"symptom""#]
        .iter()
        .any(|r| memchr::memmem::find(head, r).is_some())
}

/// Reads a scan's JSON lines (`what` names the input in errors) into `input`. An incident that
/// appears several times (open, updated, resolved from a stream) is kept in its last state.
///
/// Lines are cut out of the reader's buffer in place (only one that straddles two reads is
/// copied) and parsed without allocating the fields they skip.
pub fn read_json_lines<R: BufRead>(
    mut reader: R,
    what: &str,
    input: &mut Input,
) -> Result<(), InputError> {
    let mut latest: HashMap<String, usize> = HashMap::new();
    let mut number = 0usize;
    let mut carry: Vec<u8> = Vec::new();
    let read_err = |source| InputError::Read {
        what: what.to_string(),
        source,
    };
    loop {
        let buf = match reader.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(read_err(e)),
        };
        if buf.is_empty() {
            break;
        }
        let mut at = 0;
        while let Some(end) = memchr::memchr(b'\n', &buf[at..]) {
            number += 1;
            if carry.is_empty() {
                one_line(&buf[at..at + end], number, what, input, &mut latest)?;
            } else {
                carry.extend_from_slice(&buf[at..at + end]);
                one_line(&carry, number, what, input, &mut latest)?;
                carry.clear();
            }
            at += end + 1;
        }
        carry.extend_from_slice(&buf[at..]);
        let n = buf.len();
        reader.consume(n);
    }
    if !carry.is_empty() {
        one_line(&carry, number + 1, what, input, &mut latest)?;
    }
    Ok(())
}

fn one_line(
    line: &[u8],
    number: usize,
    what: &str,
    input: &mut Input,
    latest: &mut HashMap<String, usize>,
) -> Result<(), InputError> {
    let text = line.trim_ascii();
    if !text.starts_with(b"{") || skippable(text) {
        return Ok(());
    }
    let parsed = match Line::skim(text) {
        Some(line) => line,
        None => serde_json::from_slice(text).map_err(|source| InputError::Json {
            what: what.to_string(),
            line: number,
            source,
        })?,
    };
    match parsed.kind.as_ref() {
        "match" => input.facts.extend(parsed.into_fact()),
        "incident" => {
            if let Some(inc) = parsed.into_incident() {
                keep_latest(inc, &mut input.incidents, latest);
            }
        }
        _ => {}
    }
    Ok(())
}

/// Puts `inc` in `incidents`, in place of an earlier state of the same incident if `latest`
/// (its position by id) knows one.
pub fn keep_latest(
    inc: IncidentFact,
    incidents: &mut Vec<IncidentFact>,
    latest: &mut HashMap<String, usize>,
) {
    match latest.get(&inc.fingerprint) {
        Some(&at) if !inc.fingerprint.is_empty() => incidents[at] = inc,
        _ => {
            latest.insert(inc.fingerprint.clone(), incidents.len());
            incidents.push(inc);
        }
    }
}

/// An incident's JSON object (as `scan --format json` prints it) as the report reads it.
pub fn incident_of_json(line: &[u8]) -> Option<IncidentFact> {
    let parsed = Line::skim(line).or_else(|| serde_json::from_slice(line).ok())?;
    (parsed.kind == "incident").then(|| parsed.into_incident())?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_matches_and_keeps_the_last_state_of_an_incident() {
        let text = r#"{"type":"match","job_id":"j","error_code":"NCCL_INIT_COMPLETE","category":"progress","role":"info","scope":"job","rank":0,"host":"h1","timestamp":"2026-01-05T00:00:00.000Z","captures":{"nranks":"16","rank":"0"}}
{"type":"match","job_id":"j","error_code":"CHECKPOINT_SAVED","category":"checkpoint","role":"info","scope":"job","timestamp":"2026-01-05T01:00:00.000Z"}
{"type":"match","job_id":"j","error_code":"NCCL_TIMEOUT","category":"collective_timeout","role":"cascade","scope":"job","timestamp":"2026-01-05T01:00:00.000Z"}
{"type":"incident","status":"open","fingerprint":"fp2:1","job_id":"j","root_known":false,"root":{"error_code":"NCCL_TIMEOUT","category":"collective_timeout","timestamp":"2026-01-05T02:10:00.000Z","captures":{"elapsed_ms":"600000"}}}
{"type":"incident","status":"resolved","fingerprint":"fp2:1","job_id":"j","root_known":true,"root":{"error_code":"XID_79","category":"gpu_hardware","host":"h1","timestamp":"2026-01-05T02:00:00.000Z"},"culprit":{"evidence":{"world_size":16}}}
{"type":"summary","job_id":"j"}
"#;
        let mut input = Input::default();
        read_json_lines(text.as_bytes(), "t", &mut input).expect("reads");
        assert_eq!(input.facts.len(), 2);
        assert_eq!(input.facts[0].kind, FactKind::Start);
        assert_eq!(input.facts[0].world, Some(16));
        assert_eq!(input.incidents.len(), 1);
        let inc = &input.incidents[0];
        assert_eq!((inc.code.as_str(), inc.root_known), ("XID_79", true));
        assert_eq!(inc.world_size, Some(16));
    }

    #[test]
    fn a_timeout_headline_dates_back_to_when_the_collective_began() {
        let text = r#"{"type":"incident","fingerprint":"a","job_id":"j","root_known":false,"root":{"error_code":"NCCL_TIMEOUT","category":"collective_timeout","timestamp":"2026-01-05T02:10:00.000Z","captures":{"elapsed_ms":"600000"}}}"#;
        let mut input = Input::default();
        read_json_lines(text.as_bytes(), "t", &mut input).expect("reads");
        let t0 = millis(Some("2026-01-05T02:00:00.000Z"));
        assert_eq!(input.incidents[0].t, t0);
    }

    #[test]
    fn a_broken_line_is_an_error_with_its_number() {
        let mut input = Input::default();
        let err = read_json_lines("{\"type\":\n".as_bytes(), "x.jsonl", &mut input)
            .expect_err("not JSON");
        assert!(err.to_string().starts_with("x.jsonl:1:"), "{err}");
    }
}
