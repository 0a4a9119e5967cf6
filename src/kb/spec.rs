//! The KB entry as written on disk: one TOML file per entry, `kb/<domain>/<slug>.toml`.
//!
//! This is the serde shape only (`deny_unknown_fields`, so a typo is an error, not a silently
//! ignored field). [`super::entry`] turns it into a validated [`super::Entry`]; errors there name
//! the file, the entry and the field.

use serde::{Deserialize, Serialize};

/// One knowledge-base entry, exactly as written in its TOML file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EntrySpec {
    /// `<domain>/<slug>`; must equal the file's path under the KB root, without `.toml`.
    pub id: String,
    /// One line saying what failed, for people.
    pub title: String,
    /// Emitting software family: `pytorch`, `cuda`, `nccl`, `nvidia`, `linux`, `slurm`, ...
    pub domain: String,
    /// Failure class, from the category vocabulary in `kb/README.md`.
    pub category: String,
    /// Stable metric label and alert key (`NCCL_TIMEOUT`, `XID_79`): never changes once shipped.
    pub error_code: String,
    /// Earlier codes this entry was known by; kept so that old alerts and tickets still resolve.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub aliases: Vec<String>,
    /// `root`, `cascade`, `symptom` or `info`.
    pub role: String,
    /// `critical`, `error`, `warning` or `info`.
    pub severity: String,
    /// A catch-all (the generic Xid entry, say): reported only when no specific entry matches
    /// the same line, so one line is not counted twice.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fallback: bool,
    /// Cause class for the headline election: `node`, `device`, `network`, `framework`,
    /// `launcher` or `teardown`; derived from the category when absent
    /// ([`super::entry::CauseClass`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    /// The pattern must match the whole message (surrounding blanks and Markdown emphasis
    /// aside): for bare words a shell prints alone on a line, such as `Killed`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub whole_line: bool,
    /// Ids of entries this one beats when both match one line: the event carries this entry
    /// and lists the other under `also`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub supersedes: Vec<String>,
    /// How the diagnosis was judged: the weakest level of its reviewed parts
    /// ([`super::entry::VERIFICATIONS`]).
    pub verification: String,
    /// How the patterns were checked against reality: `source` (read in the emitting program's
    /// source), `real_log` (seen in published logs), `captured` (printed by the real program in
    /// this project's captures), `secondary` (a secondary copy) or `unverified`.
    pub patterns_verified: String,
    /// Share of incidents that the workarounds fix, 0.0..=1.0; only with
    /// `verification = "measured"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fix_rate: Option<f64>,
    /// What is going on, for the on-call engineer at 3 a.m.
    pub root_cause: String,
    /// Regexes in the common syntax of Hyperscan and the `regex` crate; named groups become
    /// captures (`rank`, `op`, `seq`, `timeout_ms`, `gpu`, `xid`, `pid`, `host`, ...).
    pub patterns: Vec<String>,
    /// Verbatim log lines that must match this entry (at least one).
    pub examples: Vec<String>,
    /// Near-miss lines that must not match this entry (at least one).
    pub negative_examples: Vec<String>,
    /// Where the message is printed: a source file and function, or a documentation page.
    pub references: Vec<String>,
    /// Version compatibility rows.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub versions: Vec<VersionSpec>,
    /// What to try, in the author's order: first action first, escalations last.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workarounds: Vec<WorkaroundSpec>,
    /// Fixes known not to work, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dead_ends: Vec<DeadEndSpec>,
    /// Who or what checked each part of the entry, and against which source.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub review: Vec<ReviewSpec>,
    /// The seed knowledge base's own fields (AI-written), kept apart for import round trips.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<SeedSpec>,
}

/// One row of an entry's review trail.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReviewSpec {
    /// `patterns`, `root_cause`, `advice` or `versions`.
    pub part: String,
    /// A verification level ([`super::entry::VERIFICATIONS`]).
    pub level: String,
    /// Who or what checked it.
    pub by: String,
    /// The source it was checked against.
    pub against: String,
    /// The release tags the source was read at (`v2.21.5-1`, `slurm-23-11-10-1`, `535.104.12`):
    /// for a `patterns` row of an entry with version rows, every wording a supported release
    /// prints was checked at these.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
}

/// The seed knowledge base's fields of an entry, as the seed wrote them: AI-written, never
/// shown as verified advice (only by `kb explain --all`, and in JSON marked `origin = "seed"`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeedSpec {
    /// The seed's one-line title.
    pub title: String,
    /// The seed's failure class; empty when the same as the entry's.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub category: String,
    /// The seed's error code; empty when the same as the entry's.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error_code: String,
    /// The seed's verification level; empty when the same as the entry's.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub verification: String,
    /// The seed's claimed share of incidents the workarounds fix, 0.0..=1.0 (an estimate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fix_rate: Option<f64>,
    /// The seed's explanation of the failure.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub root_cause: String,
    /// The seed's version compatibility rows.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub versions: Vec<VersionSpec>,
    /// The seed's workarounds, with its estimated rates.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workarounds: Vec<WorkaroundSpec>,
    /// The seed's dead ends, with its estimated rates.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dead_ends: Vec<DeadEndSpec>,
}

/// One row of the version compatibility table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VersionSpec {
    /// `torch`, `cuda`, `nccl`, `driver`, ...
    pub component: String,
    /// A version range such as `>=1.10` or `>=2.2,<2.4`.
    pub range: String,
    /// `active`, `fixed`, `changed` or `deprecated`.
    pub status: String,
    /// The version that introduced the behaviour, free text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub introduced: Option<String>,
    /// The version that deprecated or removed it, free text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deprecated: Option<String>,
}

/// A fix that works some of the time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkaroundSpec {
    /// What to do, for people.
    pub text: String,
    /// A shell command or code snippet that applies it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// 0.0..=1.0, only as measured or reported: with `n` and `source` (seed rates aside).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub success_rate: Option<f64>,
    /// The sample size behind the rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<u32>,
    /// Where the rate was measured or reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// A fix that people try and that does not work.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeadEndSpec {
    /// The fix people try.
    pub action: String,
    /// Why it does not help.
    pub why: String,
    /// 0.0..=1.0, only as measured or reported: with `n` and `source` (seed rates aside).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fail_rate: Option<f64>,
    /// The sample size behind the rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<u32>,
    /// Where the rate was measured or reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}
