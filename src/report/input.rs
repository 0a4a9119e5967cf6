//! What the report reads: the few facts of a scan it needs, from either source.
//!
//! From a scan run in-process, each [`MatchEvent`] becomes a [`Fact`] (or nothing) as it is
//! emitted, and the incidents come back as the JSON the scan printed; from `scan --format json`
//! output, the same objects are read line by line. Either way the report sees the same
//! [`Input`]: start-up, progress and checkpoint lines of jobs, the root-role lines of nodes
//! (Xid, ECC: the lemon-node history and the report's own node join), and every incident in
//! its final state.

use std::borrow::Cow;
use std::collections::HashSet;
use std::io::BufRead;

use rustc_hash::{FxBuildHasher, FxHashMap};

use serde::Deserialize;

use crate::enrich::{MatchEvent, Scope};
use crate::kb::entry::Role;
use crate::time::Millis;

use super::skim::{null_end, skip};

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

/// A job id, host, code or category: shared, not copied, by every fact and incident that names
/// it (a million incidents name a few hundred thousand distinct values). One pointer wide, half
/// of an `Arc<str>`, to one allocation holding the count, the length and the text: a million
/// incidents' facts hold a few million of them (docs/report.md).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Name(arcstr::ArcStr);

impl std::ops::Deref for Name {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for Name {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl From<&str> for Name {
    fn from(s: &str) -> Name {
        Name(arcstr::ArcStr::from(s))
    }
}

impl std::fmt::Debug for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.0.as_str(), f)
    }
}

impl std::fmt::Display for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl serde::Serialize for Name {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

/// The distinct [`Name`]s read so far: each value is allocated once.
#[derive(Debug, Default)]
pub struct Names(HashSet<Name, FxBuildHasher>);

impl Names {
    /// The shared copy of `s`.
    pub fn get(&mut self, s: &str) -> Name {
        if let Some(n) = self.0.get(s) {
            return n.clone();
        }
        let n = Name::from(s);
        self.0.insert(n.clone());
        n
    }
}

/// One line the report uses.
#[derive(Debug, Clone)]
pub struct Fact {
    /// Its kind.
    pub kind: FactKind,
    /// The job (for node lines, `node:<host>`).
    pub job_id: Name,
    /// Its log time.
    pub t: Millis,
    /// The host it names or came from.
    pub host: Option<Name>,
    /// The rank that printed it (or the `rank` capture).
    pub rank: Option<u32>,
    /// `nranks` of a start-up line.
    pub world: Option<u32>,
    /// Error code and KB category (node roots).
    pub code: Name,
    /// The KB category.
    pub category: Name,
}

/// An incident in its final state, as far as the report needs it.
#[derive(Debug, Clone)]
pub struct IncidentFact {
    /// The job (`node:<host>` for a node incident).
    pub job_id: Name,
    /// Whether a root-role line was elected.
    pub root_known: bool,
    /// The elected headline's error code.
    pub code: Name,
    /// Its KB category.
    pub category: Name,
    /// Its host.
    pub host: Option<Name>,
    /// Its GPU.
    pub gpu: Option<Name>,
    /// When the failure began: the headline's time, less the wait a collective timeout
    /// reports.
    pub t: Option<Millis>,
    /// The world size the culprit evidence saw.
    pub world_size: Option<u32>,
    /// The incident's id (its fingerprint in output older than ids): one per failure.
    pub fingerprint: Name,
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
            job_id: Name::from(e.job_id.as_str()),
            t: millis(e.timestamp.as_deref())?,
            host: e.host.as_deref().map(Name::from),
            rank: e.any_rank(),
            world: e.captures.get("nranks").and_then(|n| n.parse().ok()),
            code: Name::from(e.error_code.as_str()),
            category: Name::from(e.category.as_str()),
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

impl<'a> Captures<'a> {
    fn number<T: std::str::FromStr>(v: &Option<Cow<'_, str>>) -> Option<T> {
        v.as_deref().and_then(|n| n.trim().parse().ok())
    }

    /// The captures object that starts at `at` in `s`, walked once like the line
    /// ([`super::skim`]), and its end.
    fn skim_at(s: &'a [u8], at: usize) -> Option<(Captures<'a>, usize)> {
        let slot = |key: &[u8]| -> Option<usize> {
            Some(match key {
                b"nranks" => 0,
                b"rank" => 1,
                b"elapsed_ms" => 2,
                b"timeout_ms" => 3,
                b"node" => 4,
                b"host" => 5,
                _ => return None,
            })
        };
        let ([nranks, rank, elapsed, timeout, node, host], end) =
            super::skim::object(s, at, slot, skip, |_| false)?;
        let captures = Captures {
            nranks: text(nranks)?,
            rank: text(rank)?,
            elapsed_ms: text(elapsed)?,
            timeout_ms: text(timeout)?,
            node: text(node)?,
            host: text(host)?,
        };
        Some((captures, end))
    }
}

impl<'a> Root<'a> {
    /// The root that starts at `at` in `s` (`null`: none), its captures included, walked once
    /// like the line, and its end.
    fn skim_at(s: &'a [u8], at: usize) -> Option<(Option<Root<'a>>, usize)> {
        if let Some(end) = null_end(s, at) {
            return Some((None, end));
        }
        let slot = |key: &[u8]| -> Option<usize> {
            Some(match key {
                b"error_code" => 0,
                b"category" => 1,
                b"host" => 2,
                b"gpu" => 3,
                b"timestamp" => 4,
                b"captures" => 5,
                _ => return None,
            })
        };
        let mut captures = None;
        let end_of = |k, s: &'a [u8], at| match k {
            5 => {
                let (c, end) = Captures::skim_at(s, at)?;
                captures = Some(c);
                Some(end)
            }
            k => skip(k, s, at),
        };
        let ([code, category, host, gpu, stamp, _], end) =
            super::skim::object(s, at, slot, end_of, |_| false)?;
        let root = Root {
            error_code: text(code)??,
            category: text(category)??,
            host: text(host)?,
            gpu: text(gpu)?,
            timestamp: text(stamp)?,
            captures: captures.unwrap_or_default(),
        };
        Some((Some(root), end))
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

impl Culprit {
    /// `culprit.evidence.world_size` of the culprit that starts at `at` in `s` (`null`: none),
    /// walked once like the line, and the culprit's end.
    fn skim_at(s: &[u8], at: usize) -> Option<(Option<Culprit>, usize)> {
        if let Some(end) = null_end(s, at) {
            return Some((None, end));
        }
        let mut world = None;
        let evidence = |_, s: &[u8], at| {
            if let Some(end) = null_end(s, at) {
                return Some(end);
            }
            let world_size = |k: &[u8]| (k == b"world_size").then_some(0);
            let ([w], end) = super::skim::object(s, at, world_size, skip, |_| false)?;
            world = small_number(w)?;
            Some(end)
        };
        let ([_], end) = super::skim::object(
            s,
            at,
            |k| (k == b"evidence").then_some(0),
            evidence,
            |_| false,
        )?;
        let culprit = Culprit {
            evidence: Some(Evidence { world_size: world }),
        };
        Some((Some(culprit), end))
    }
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

/// A `u32` or `null` (absent: `None`), read directly where it is plain digits.
fn small_number(span: &[u8]) -> Option<Option<u32>> {
    match span {
        b"" | b"null" => Some(None),
        digits if digits.len() <= 9 && digits.iter().all(u8::is_ascii_digit) => Some(Some(
            digits
                .iter()
                .fold(0u32, |n, d| n * 10 + u32::from(d - b'0')),
        )),
        other => value(other),
    }
}

/// A boolean (absent: false).
fn flag(span: &[u8]) -> Option<bool> {
    match span {
        b"" | b"false" => Some(false),
        b"true" => Some(true),
        other => value(other),
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
        // An incident has every field the report reads once its culprit is read (the culprit
        // comes after the id, the job and the root; counts, context and the diagnosis after it).
        let enough = |f: &[&[u8]; 15]| {
            f[0] == br#""incident""# && [1, 10, 11, 12, 13, 14].iter().all(|&k| !f[k].is_empty())
        };
        // The captures, the root and the culprit are read as they are walked past.
        let (mut captures, mut root, mut culprit) = (None, None, None);
        let end_of = |k, s: &'a [u8], at| match k {
            9 => {
                let (c, end) = Captures::skim_at(s, at)?;
                captures = Some(c);
                Some(end)
            }
            12 => {
                let (r, end) = Root::skim_at(s, at)?;
                root = r;
                Some(end)
            }
            13 => {
                let (c, end) = Culprit::skim_at(s, at)?;
                culprit = c;
                Some(end)
            }
            k => skip(k, s, at),
        };
        let (
            [kind, job, code, category, role, scope, rank, host, stamp, _, fp, known, _, _, id],
            _,
        ) = super::skim::object(line, 0, slot, end_of, enough)?;
        let or_empty = |span| text(span).map(Option::unwrap_or_default);
        Some(Line {
            kind: text(kind)??,
            job_id: or_empty(job)?,
            error_code: or_empty(code)?,
            category: or_empty(category)?,
            role: or_empty(role)?,
            scope: or_empty(scope)?,
            rank: small_number(rank)?,
            host: text(host)?,
            timestamp: text(stamp)?,
            captures: captures.unwrap_or_default(),
            fingerprint: or_empty(fp)?,
            id: or_empty(id)?,
            root_known: flag(known)?,
            root,
            culprit,
        })
    }
}

impl Line<'_> {
    fn into_fact(self, names: &mut Names) -> Option<Fact> {
        let node = self.scope == "node";
        let kind = kind_of(&self.error_code, &self.category, &self.role, node)?;
        let rank = self.rank.or_else(|| Captures::number(&self.captures.rank));
        Some(Fact {
            kind,
            t: millis(self.timestamp.as_deref())?,
            world: Captures::number(&self.captures.nranks),
            job_id: names.get(&self.job_id),
            host: self.host.map(|h| names.get(&h)),
            rank,
            code: names.get(&self.error_code),
            category: names.get(&self.category),
        })
    }

    fn into_incident(self, names: &mut Names) -> Option<IncidentFact> {
        let root = self.root?;
        let t =
            millis(root.timestamp.as_deref()).map(|t| t - waited(&root.category, &root.captures));
        // A line that names the failed node (`srun: error: Node failure on X`) blames it, not
        // the host that printed it.
        let host = root.captures.node.or(root.captures.host).or(root.host);
        Some(IncidentFact {
            job_id: names.get(&self.job_id),
            root_known: self.root_known,
            code: names.get(&root.error_code),
            category: names.get(&root.category),
            host: host.map(|h| names.get(&h)),
            gpu: root.gpu.map(|g| names.get(&g)),
            t,
            world_size: self
                .culprit
                .and_then(|c| c.evidence)
                .and_then(|e| e.world_size),
            // The id never changes for the life of a failure; the fingerprint may move when an
            // earlier line arrives late. Older output has no id.
            fingerprint: Name::from(match self.id.is_empty() {
                true => &*self.fingerprint,
                false => &*self.id,
            }),
        })
    }
}

/// Whether a line can be skipped unparsed: a match whose role (near its start in a scan's
/// output) is one no fact has (cascades and symptoms are most of a failing fleet's matches).
fn skippable(line: &[u8]) -> bool {
    use memchr::memmem::Finder;
    static ROLES: std::sync::LazyLock<[Finder<'static>; 2]> = std::sync::LazyLock::new(|| {
        [
            Finder::new(br#""role":"cascade""#),
            Finder::new(br#""role":"symptom""#),
        ]
    });
    let head = &line[..line.len().min(512)];
    if !head.starts_with(br#"{"type":"match""#) {
        return false;
    }
    ROLES.iter().any(|r| r.find(head).is_some())
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
    let mut lines = JsonLines::default();
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
            if carry.is_empty() {
                lines.read(&buf[at..at + end], what, input)?;
            } else {
                carry.extend_from_slice(&buf[at..at + end]);
                lines.read(&carry, what, input)?;
                carry.clear();
            }
            at += end + 1;
        }
        carry.extend_from_slice(&buf[at..]);
        let n = buf.len();
        reader.consume(n);
    }
    if !carry.is_empty() {
        lines.read(&carry, what, input)?;
    }
    Ok(())
}

/// Reads a file of a scan's JSON lines like [`read_json_lines`]. A regular file is mapped, not
/// copied through a buffer: on a million incidents' 10 GB in the page cache the copy was a sixth
/// of the read (docs/report.md). What another process appends meanwhile is not read; a file
/// truncated while it is read stops the process (SIGBUS), as with any mapped input.
pub fn read_json_file(path: &std::path::Path, input: &mut Input) -> Result<(), InputError> {
    let what = path.display().to_string();
    let read_err = |source| InputError::Read {
        what: what.clone(),
        source,
    };
    let file = std::fs::File::open(path).map_err(read_err)?;
    let meta = file.metadata().map_err(read_err)?;
    // SAFETY: the map is private and read only, and dropped before this returns; its bytes
    // change only if another process truncates or rewrites the file meanwhile (above).
    #[allow(unsafe_code)]
    let map = match meta.is_file() && meta.len() > 0 {
        true => unsafe { memmap2::MmapOptions::new().map(&file) }.ok(),
        false => None,
    };
    let Some(map) = map else {
        return read_json_lines(
            std::io::BufReader::with_capacity(4 << 20, file),
            &what,
            input,
        );
    };
    let _ = map.advise(memmap2::Advice::Sequential);
    let mut lines = JsonLines::default();
    let mut at = 0;
    for end in memchr::memchr_iter(b'\n', &map) {
        lines.read(&map[at..end], &what, input)?;
        at = end + 1;
    }
    lines.read(&map[at..], &what, input)
}

/// A scan's JSON objects read one at a time (lines of a file, records of a topic), keeping
/// each incident in its last state.
#[derive(Debug, Default)]
pub struct JsonLines {
    /// Each incident's position in `Input::incidents`, by id.
    latest: FxHashMap<Name, usize>,
    /// The job ids, hosts, codes and categories read.
    names: Names,
    /// Objects read so far (blank lines included): the line number of errors.
    number: usize,
}

impl JsonLines {
    /// Reads one line or record into `input`; anything but an object (a blank line) is
    /// skipped, an object that is not a scan's is an error naming `what` and its number.
    pub fn read(&mut self, line: &[u8], what: &str, input: &mut Input) -> Result<(), InputError> {
        self.number += 1;
        let text = line.trim_ascii();
        if !text.starts_with(b"{") || skippable(text) {
            return Ok(());
        }
        let parsed = match Line::skim(text) {
            Some(line) => line,
            None => serde_json::from_slice(text).map_err(|source| InputError::Json {
                what: what.to_string(),
                line: self.number,
                source,
            })?,
        };
        match parsed.kind.as_ref() {
            "match" => input.facts.extend(parsed.into_fact(&mut self.names)),
            "incident" => {
                if let Some(inc) = parsed.into_incident(&mut self.names) {
                    keep_latest(inc, &mut input.incidents, &mut self.latest);
                }
            }
            _ => {}
        }
        Ok(())
    }
}

/// Puts `inc` in `incidents`, in place of an earlier state of the same incident if `latest`
/// (its position by id) knows one.
pub fn keep_latest(
    inc: IncidentFact,
    incidents: &mut Vec<IncidentFact>,
    latest: &mut FxHashMap<Name, usize>,
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
    (parsed.kind == "incident").then(|| parsed.into_incident(&mut Names::default()))?
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
        assert_eq!((&*inc.code, inc.root_known), ("XID_79", true));
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
    fn an_incident_is_read_from_its_fields_before_the_diagnosis() {
        // As `scan` writes it: id, job and root first; culprit, then counts, context and the
        // diagnosis, which the reader stops before.
        let text = r#"{"type":"incident","status":"resolved","id":"fp2:9","fingerprint":"fp2:a","job_id":"j","root_known":true,"root":{"kb_id":"x","error_code":"NCCL_TIMEOUT","category":"collective_timeout","host":"h\u0031","timestamp":"2026-01-05T02:10:00.000Z","captures":{"elapsed_ms":"600000","node":"n7"}},"contributing":[],"culprit":{"ranks":[3],"evidence":{"world_size":16}},"counts":{"a":[1,{"b":"}"}]},"diagnosis":{"title":"t"}}"#;
        let mut input = Input::default();
        read_json_lines(text.as_bytes(), "t", &mut input).expect("reads");
        let inc = &input.incidents[0];
        assert_eq!(&*inc.fingerprint, "fp2:9", "the id, not the fingerprint");
        assert_eq!((&*inc.code, inc.root_known), ("NCCL_TIMEOUT", true));
        assert_eq!(inc.world_size, Some(16));
        assert_eq!(inc.host.as_deref(), Some("n7"), "the node a line names");
        assert_eq!(inc.t, millis(Some("2026-01-05T02:00:00.000Z")));
        // The same object with its keys in another order is read the same, by serde.
        let reordered = r#"{"diagnosis":{"title":"t"},"culprit":{"evidence":{"world_size":16}},"root":{"error_code":"NCCL_TIMEOUT","category":"collective_timeout","timestamp":"2026-01-05T02:10:00.000Z","captures":{"elapsed_ms":"600000","node":"n7"}},"root_known":true,"job_id":"j","id":"fp2:9","type":"incident"}"#;
        let mut again = Input::default();
        read_json_lines(reordered.as_bytes(), "t", &mut again).expect("reads");
        let b = &again.incidents[0];
        assert_eq!(
            (&b.fingerprint, &b.code, b.world_size, &b.host, b.t),
            (
                &inc.fingerprint,
                &inc.code,
                inc.world_size,
                &inc.host,
                inc.t
            )
        );
    }

    #[test]
    fn a_broken_line_is_an_error_with_its_number() {
        let mut input = Input::default();
        let err = read_json_lines("{\"type\":\n".as_bytes(), "x.jsonl", &mut input)
            .expect_err("not JSON");
        assert!(err.to_string().starts_with("x.jsonl:1:"), "{err}");
    }
}
