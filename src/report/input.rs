//! What the report reads: the few facts of a scan it needs, from either source.
//!
//! From a scan run in-process, each [`MatchEvent`] becomes a [`Fact`] (or nothing) as it is
//! emitted, and the incidents come back as the JSON the scan printed; from `scan --format json`
//! output, the same objects are read line by line. Either way the report sees the same
//! [`Input`]: start-up, progress and checkpoint lines of jobs, the root-role lines of nodes
//! (Xid, ECC: the lemon-node history and the report's own node join), and every incident in
//! its final state.

use std::collections::{BTreeMap, HashMap};
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
    /// The incident's fingerprint.
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
/// skipped).
#[derive(Debug, Deserialize)]
struct Line {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    job_id: String,
    #[serde(default)]
    error_code: String,
    #[serde(default)]
    category: String,
    #[serde(default)]
    role: String,
    #[serde(default)]
    scope: String,
    rank: Option<u32>,
    host: Option<String>,
    timestamp: Option<String>,
    #[serde(default)]
    captures: BTreeMap<String, String>,
    #[serde(default)]
    fingerprint: String,
    #[serde(default)]
    root_known: bool,
    root: Option<Root>,
    culprit: Option<Culprit>,
}

#[derive(Debug, Deserialize)]
struct Root {
    error_code: String,
    category: String,
    host: Option<String>,
    gpu: Option<String>,
    timestamp: Option<String>,
    #[serde(default)]
    captures: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
struct Culprit {
    #[serde(default)]
    evidence: Option<Evidence>,
}

#[derive(Debug, Deserialize)]
struct Evidence {
    world_size: Option<u32>,
}

/// How long a collective timeout says it waited (its time less this is when it began to hang).
fn waited(category: &str, captures: &BTreeMap<String, String>) -> Millis {
    if category != "collective_timeout" {
        return 0;
    }
    ["elapsed_ms", "timeout_ms"]
        .iter()
        .find_map(|k| captures.get(*k)?.trim().parse::<Millis>().ok())
        .unwrap_or(0)
        .clamp(0, 24 * 3_600_000)
}

impl Line {
    fn into_fact(self) -> Option<Fact> {
        let node = self.scope == "node";
        let kind = kind_of(&self.error_code, &self.category, &self.role, node)?;
        let rank = self.rank.or_else(|| {
            self.captures
                .get("rank")
                .and_then(|r| r.trim().parse().ok())
        });
        Some(Fact {
            kind,
            t: millis(self.timestamp.as_deref())?,
            world: self.captures.get("nranks").and_then(|n| n.parse().ok()),
            job_id: self.job_id,
            host: self.host,
            rank,
            code: self.error_code,
            category: self.category,
        })
    }

    fn into_incident(self) -> Option<IncidentFact> {
        let root = self.root?;
        let t =
            millis(root.timestamp.as_deref()).map(|t| t - waited(&root.category, &root.captures));
        Some(IncidentFact {
            job_id: self.job_id,
            root_known: self.root_known,
            code: root.error_code,
            category: root.category,
            // A line that names the failed node (`srun: error: Node failure on X`) blames it,
            // not the host that printed it.
            host: ["node", "host"]
                .iter()
                .find_map(|k| root.captures.get(*k).cloned())
                .or(root.host),
            gpu: root.gpu,
            t,
            world_size: self
                .culprit
                .and_then(|c| c.evidence)
                .and_then(|e| e.world_size),
            fingerprint: self.fingerprint,
        })
    }
}

/// Reads a scan's JSON lines (`what` names the input in errors) into `input`. An incident that
/// appears several times (open, updated, resolved from a stream) is kept in its last state.
pub fn read_json_lines<R: BufRead>(
    reader: R,
    what: &str,
    input: &mut Input,
) -> Result<(), InputError> {
    let mut latest: HashMap<String, usize> = HashMap::new();
    for (i, line) in reader.lines().enumerate() {
        let line = line.map_err(|source| InputError::Read {
            what: what.to_string(),
            source,
        })?;
        let text = line.trim();
        if text.is_empty() || !text.starts_with('{') {
            continue;
        }
        let parsed: Line = serde_json::from_str(text).map_err(|source| InputError::Json {
            what: what.to_string(),
            line: i + 1,
            source,
        })?;
        match parsed.kind.as_str() {
            "match" => input.facts.extend(parsed.into_fact()),
            "incident" => {
                let Some(inc) = parsed.into_incident() else {
                    continue;
                };
                match latest.get(&inc.fingerprint) {
                    Some(&at) if !inc.fingerprint.is_empty() => input.incidents[at] = inc,
                    _ => {
                        latest.insert(inc.fingerprint.clone(), input.incidents.len());
                        input.incidents.push(inc);
                    }
                }
            }
            _ => {}
        }
    }
    Ok(())
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
