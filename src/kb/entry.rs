//! The validated KB entry: what the rest of faultline reads.
//!
//! [`Entry::from_spec`] checks every field of an [`EntrySpec`] and turns the free strings of the
//! file into closed enums; each problem becomes a [`Problem`] naming the file, the entry id and
//! the field, so `kb check` can report them all at once.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::spec::{DeadEndSpec, EntrySpec, ReviewSpec, SeedSpec, VersionSpec, WorkaroundSpec};

/// What an entry's line means for an incident.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Starts a failure: Xid, ECC, OOM, device assert, script error.
    Root,
    /// Context worth keeping that neither starts nor follows a failure.
    Symptom,
    /// Follows another rank's failure: NCCL timeouts, remote errors, aborted communicators.
    Cascade,
    /// A recoverable event.
    Info,
}

/// How loud an entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// The job cannot go on where it runs: a lost GPU, an uncorrectable error, a failed node.
    Critical,
    /// A failure of the job: an OOM, a timeout, a crash.
    Error,
    /// Stopped or degraded without a fault: a preemption, a time limit, a skipped step.
    Warning,
    /// Context or a recoverable event; nothing to act on.
    Info,
}

macro_rules! str_enum {
    ($ty:ident { $($variant:ident => $text:literal),+ $(,)? }) => {
        impl $ty {
            /// Every value, in declaration order.
            pub const ALL: &'static [$ty] = &[$($ty::$variant),+];

            /// The spelling used in KB files, JSON and metric labels.
            pub fn as_str(self) -> &'static str {
                match self { $($ty::$variant => $text),+ }
            }

            /// Parses the KB spelling.
            pub fn parse(text: &str) -> Option<Self> {
                match text { $($text => Some($ty::$variant),)+ _ => None }
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

/// Where a failure comes from, for the headline election: among roots logged at the same
/// time, the node's hardware and driver come first, then the device (CUDA), the network and
/// collectives, the framework and the job's own code, the launcher; teardown, abort, exit and
/// launcher-summary lines never headline while anything else stands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CauseClass {
    /// GPU hardware and driver, memory ECC, NVLink, PCIe, the kernel, host memory.
    Node,
    /// CUDA and device memory.
    Device,
    /// NCCL, InfiniBand, sockets, collectives, rendezvous.
    Network,
    /// The framework and the job's own code, data, storage.
    #[default]
    Framework,
    /// Schedulers and launchers.
    Launcher,
    /// Teardown, abort, exit and launcher-summary lines: they report a failure, never cause it.
    Teardown,
}

impl CauseClass {
    /// The class of an entry without a `class` field, from its category and domain.
    pub fn derive(category: &str, domain: &str) -> CauseClass {
        match (domain, category) {
            ("nvidia" | "linux", _) => CauseClass::Node,
            ("cuda", _) => CauseClass::Device,
            (
                _,
                "gpu_hardware"
                | "gpu_memory_ecc"
                | "gpu_firmware"
                | "interconnect_nvlink"
                | "kernel_bug"
                | "host_oom",
            ) => CauseClass::Node,
            (_, "device_oom") => CauseClass::Device,
            ("nccl" | "rdma", _)
            | (
                _,
                "network_ib" | "network_tcp" | "collective_timeout" | "collective_error"
                | "rendezvous",
            ) => CauseClass::Network,
            ("slurm" | "kubernetes" | "submitit" | "ray", _) | (_, "scheduler") => {
                CauseClass::Launcher
            }
            _ => CauseClass::Framework,
        }
    }
}

str_enum!(CauseClass { Node => "node", Device => "device", Network => "network", Framework => "framework", Launcher => "launcher", Teardown => "teardown" });
str_enum!(Role { Root => "root", Symptom => "symptom", Cascade => "cascade", Info => "info" });
str_enum!(Severity { Critical => "critical", Error => "error", Warning => "warning", Info => "info" });

/// Accepted values of `verification` and of a review row's `level`, weakest first (how the
/// diagnosis was judged; `kb/README.md` says what each means).
pub const VERIFICATIONS: &[&str] = &[
    "seed_ai_generated",
    "ai_generated",
    "draft",
    "community_reported",
    "source_verified",
    "expert_reviewed",
    "measured",
];

/// The parts of an entry a review row can speak for.
pub const REVIEW_PARTS: &[&str] = &["patterns", "root_cause", "advice", "versions"];

/// How a shown rate was obtained: `measured` (the entry is measured) or `community_reported`
/// (with its sample size and source); seed rates are `estimate`.
pub fn rate_kind(verification: &str) -> &'static str {
    if verification == "measured" {
        "measured"
    } else {
        "community_reported"
    }
}

/// Accepted values of `patterns_verified` (how the patterns were checked against reality).
pub const PATTERN_VERIFICATIONS: &[&str] =
    &["source", "real_log", "captured", "secondary", "unverified"];

/// Accepted values of a version row's `status`.
pub const VERSION_STATUSES: &[&str] = &["active", "fixed", "changed", "deprecated"];

/// One problem found in a KB file. `entry` is empty when the file has no readable id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The file the problem is in, relative to the KB root.
    pub file: PathBuf,
    /// The entry's id as written; empty when unreadable.
    pub entry: String,
    /// The field at fault (`patterns[2]`, `examples[0]`, `id`).
    pub field: String,
    /// What is wrong, for the author.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let entry = if self.entry.is_empty() {
            "?"
        } else {
            &self.entry
        };
        write!(
            f,
            "{}: entry {entry}: field `{}`: {}",
            self.file.display(),
            self.field,
            self.message
        )
    }
}

/// A validated knowledge-base entry.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Entry {
    /// `<domain>/<slug>`, equal to the file's path; stable forever.
    pub id: String,
    /// One line saying what failed, for people.
    pub title: String,
    /// Emitting software family (`pytorch`, `nccl`, `nvidia`, ...).
    pub domain: String,
    /// Failure class, from the vocabulary in `kb/README.md`.
    pub category: String,
    /// Stable metric label and alert key (`NCCL_TIMEOUT`, `XID_79`).
    pub error_code: String,
    /// Earlier codes of this entry, so old alerts and tickets still resolve.
    pub aliases: Vec<String>,
    /// What the line means for an incident.
    pub role: Role,
    /// How loud the entry is.
    pub severity: Severity,
    /// Reported only when no non-fallback entry matches the same line.
    pub fallback: bool,
    /// Where the failure comes from, for the headline election.
    pub class: CauseClass,
    /// A match counts only when it spans the whole message (blanks and Markdown emphasis
    /// around it aside).
    pub whole_line: bool,
    /// Ids of entries this one beats on the same line.
    pub supersedes: Vec<String>,
    /// How the diagnosis was judged, one of [`VERIFICATIONS`].
    pub verification: String,
    /// How the patterns were checked, one of [`PATTERN_VERIFICATIONS`].
    pub patterns_verified: String,
    /// Share of incidents the workarounds fix, 0.0..=1.0; only when `verification` is `measured`.
    pub fix_rate: Option<f64>,
    /// What is going on, for the on-call engineer.
    pub root_cause: String,
    /// Regexes in the common syntax of Hyperscan and `regex`; named groups become captures.
    pub patterns: Vec<String>,
    /// Lines that must match this entry, checked in both engines.
    pub examples: Vec<String>,
    /// Near-miss lines that must not match it.
    pub negative_examples: Vec<String>,
    /// Where the message is printed: source file and function, or documentation page.
    pub references: Vec<String>,
    /// Version compatibility rows.
    pub versions: Vec<VersionSpec>,
    /// In the author's order: first action first, escalations last.
    pub workarounds: Vec<WorkaroundSpec>,
    /// Fixes known not to work, and why.
    pub dead_ends: Vec<DeadEndSpec>,
    /// Who or what checked each part, against which source.
    pub review: Vec<ReviewSpec>,
    /// The seed knowledge base's own AI-written fields, kept apart.
    pub seed: Option<SeedSpec>,
    /// The file the entry was read from, relative to the KB root.
    #[serde(skip)]
    pub path: PathBuf,
}

impl Entry {
    /// Validates `spec`, read from `path` (relative to the KB root). Returns every problem.
    pub fn from_spec(spec: EntrySpec, path: &Path) -> Result<Entry, Vec<Problem>> {
        let mut problems = Vec::new();
        let mut problem = |field: &str, message: String| {
            problems.push(Problem {
                file: path.to_path_buf(),
                entry: spec.id.clone(),
                field: field.to_string(),
                message,
            })
        };

        let expected_id = expected_id(path);
        match &expected_id {
            Some(expected) if *expected != spec.id => problem(
                "id",
                format!("`{}` must equal the file's path `{expected}`", spec.id),
            ),
            None => problem(
                "id",
                "the file must live at <domain>/<slug>.toml under the KB root".to_string(),
            ),
            _ => {}
        }
        if !is_id(&spec.id) {
            problem(
                "id",
                format!(
                    "`{}` must be <domain>/<slug> in lowercase a-z, 0-9 and '-'",
                    spec.id
                ),
            );
        }
        if let Some((domain, _)) = spec.id.split_once('/') {
            if domain != spec.domain {
                problem(
                    "domain",
                    format!("`{}` must equal the id's domain `{domain}`", spec.domain),
                );
            }
        }
        if !is_snake_lower(&spec.category) {
            problem(
                "category",
                format!("`{}` must be a lowercase identifier", spec.category),
            );
        }
        if !is_upper_snake(&spec.error_code) {
            problem(
                "error_code",
                format!("`{}` must be UPPER_SNAKE_CASE", spec.error_code),
            );
        }
        for alias in &spec.aliases {
            if !is_upper_snake(alias) {
                problem("aliases", format!("`{alias}` must be UPPER_SNAKE_CASE"));
            }
        }
        let role = Role::parse(&spec.role);
        if role.is_none() {
            problem(
                "role",
                format!("`{}` is not one of root, cascade, symptom, info", spec.role),
            );
        }
        let severity = Severity::parse(&spec.severity);
        if severity.is_none() {
            problem(
                "severity",
                format!(
                    "`{}` is not one of critical, error, warning, info",
                    spec.severity
                ),
            );
        }
        if !VERIFICATIONS.contains(&spec.verification.as_str()) {
            problem(
                "verification",
                format!(
                    "`{}` is not one of {}",
                    spec.verification,
                    VERIFICATIONS.join(", ")
                ),
            );
        }
        if !PATTERN_VERIFICATIONS.contains(&spec.patterns_verified.as_str()) {
            problem(
                "patterns_verified",
                format!(
                    "`{}` is not one of {}",
                    spec.patterns_verified,
                    PATTERN_VERIFICATIONS.join(", ")
                ),
            );
        }
        for (field, text) in [("title", &spec.title), ("root_cause", &spec.root_cause)] {
            if text.trim().is_empty() {
                problem(field, "must not be empty".to_string());
            }
        }
        if spec.title.contains('\n') {
            problem("title", "must be one line".to_string());
        }
        for (field, list) in [
            ("patterns", &spec.patterns),
            ("examples", &spec.examples),
            ("negative_examples", &spec.negative_examples),
            ("references", &spec.references),
        ] {
            if list.is_empty() {
                problem(field, "needs at least one item".to_string());
            }
            if list.iter().any(|item| item.trim().is_empty()) {
                problem(field, "has an empty item".to_string());
            }
        }
        for (field, list) in [
            ("examples", &spec.examples),
            ("negative_examples", &spec.negative_examples),
        ] {
            if list.iter().any(|line| line.contains('\n')) {
                problem(field, "each example is one line (no newline)".to_string());
            }
        }
        check_rate(&mut problem, "fix_rate", spec.fix_rate);
        for (i, other) in spec.supersedes.iter().enumerate() {
            if !is_id(other) || *other == spec.id {
                problem(
                    &format!("supersedes[{i}]"),
                    format!("`{other}` must be the id of another entry"),
                );
            }
        }
        for (i, r) in spec.review.iter().enumerate() {
            let field = format!("review[{i}]");
            if !REVIEW_PARTS.contains(&r.part.as_str()) {
                problem(
                    &format!("{field}.part"),
                    format!("`{}` is not one of {}", r.part, REVIEW_PARTS.join(", ")),
                );
            }
            if !VERIFICATIONS.contains(&r.level.as_str()) {
                problem(
                    &format!("{field}.level"),
                    format!("`{}` is not one of {}", r.level, VERIFICATIONS.join(", ")),
                );
            }
            if r.by.trim().is_empty() || r.against.trim().is_empty() {
                problem(&field, "`by` and `against` must not be empty".to_string());
            }
        }
        if let Some(seed) = &spec.seed {
            if seed.title.trim().is_empty() {
                problem("seed.title", "must not be empty".to_string());
            }
            check_rate(&mut problem, "seed.fix_rate", seed.fix_rate);
            for (i, w) in seed.workarounds.iter().enumerate() {
                check_rate(
                    &mut problem,
                    &format!("seed.workarounds[{i}].success_rate"),
                    w.success_rate,
                );
            }
            for (i, d) in seed.dead_ends.iter().enumerate() {
                check_rate(
                    &mut problem,
                    &format!("seed.dead_ends[{i}].fail_rate"),
                    d.fail_rate,
                );
            }
        }
        for (i, row) in spec.versions.iter().enumerate() {
            let field = format!("versions[{i}]");
            if row.component.trim().is_empty() || row.range.trim().is_empty() {
                problem(&field, "component and range must not be empty".to_string());
            }
            if !VERSION_STATUSES.contains(&row.status.as_str()) {
                problem(
                    &format!("{field}.status"),
                    format!(
                        "`{}` is not one of {}",
                        row.status,
                        VERSION_STATUSES.join(", ")
                    ),
                );
            }
        }
        for (i, w) in spec.workarounds.iter().enumerate() {
            if w.text.trim().is_empty() {
                problem(
                    &format!("workarounds[{i}].text"),
                    "must not be empty".to_string(),
                );
            }
            check_rate(
                &mut problem,
                &format!("workarounds[{i}].success_rate"),
                w.success_rate,
            );
        }
        for (i, d) in spec.dead_ends.iter().enumerate() {
            if d.action.trim().is_empty() || d.why.trim().is_empty() {
                problem(
                    &format!("dead_ends[{i}]"),
                    "action and why must not be empty".to_string(),
                );
            }
            check_rate(
                &mut problem,
                &format!("dead_ends[{i}].fail_rate"),
                d.fail_rate,
            );
        }

        let class = match &spec.class {
            None => Some(CauseClass::derive(&spec.category, &spec.domain)),
            Some(c) => {
                let parsed = CauseClass::parse(c);
                if parsed.is_none() {
                    problem(
                        "class",
                        format!(
                            "`{c}` is not one of node, device, network, framework, launcher, teardown"
                        ),
                    );
                }
                parsed
            }
        };
        let (Some(role), Some(severity), Some(class), true) =
            (role, severity, class, problems.is_empty())
        else {
            return Err(problems);
        };
        Ok(Entry {
            id: spec.id,
            title: spec.title,
            domain: spec.domain,
            category: spec.category,
            error_code: spec.error_code,
            aliases: spec.aliases,
            role,
            severity,
            fallback: spec.fallback,
            class,
            whole_line: spec.whole_line,
            supersedes: spec.supersedes,
            verification: spec.verification,
            patterns_verified: spec.patterns_verified,
            fix_rate: spec.fix_rate,
            root_cause: spec.root_cause.trim().to_string(),
            patterns: spec.patterns,
            examples: spec.examples,
            negative_examples: spec.negative_examples,
            references: spec.references,
            versions: spec.versions,
            workarounds: spec.workarounds,
            dead_ends: spec.dead_ends,
            review: spec.review,
            seed: spec.seed,
            path: path.to_path_buf(),
        })
    }
}

fn check_rate(problem: &mut impl FnMut(&str, String), field: &str, rate: Option<f64>) {
    if let Some(rate) = rate {
        if !(0.0..=1.0).contains(&rate) {
            problem(
                field,
                format!("{rate} must be a fraction between 0.0 and 1.0 (75% is 0.75)"),
            );
        }
    }
}

/// The id a file at `path` (relative to the KB root) must carry: `domain/slug`.
pub fn expected_id(path: &Path) -> Option<String> {
    let mut parts = path.iter().map(|p| p.to_str());
    let domain = parts.next()??;
    let file = parts.next()??;
    if parts.next().is_some() {
        return None;
    }
    let slug = file.strip_suffix(".toml")?;
    Some(format!("{domain}/{slug}"))
}

fn is_id(id: &str) -> bool {
    let Some((domain, slug)) = id.split_once('/') else {
        return false;
    };
    let ok = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
    };
    ok(domain) && ok(slug) && !slug.contains('/')
}

fn is_snake_lower(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_lowercase())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

fn is_upper_snake(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_uppercase())
        && s.bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expected_id_is_domain_slash_slug() {
        assert_eq!(
            expected_id(Path::new("pytorch/nccl-timeout.toml")).as_deref(),
            Some("pytorch/nccl-timeout")
        );
        assert_eq!(expected_id(Path::new("a/b/c.toml")), None);
        assert_eq!(expected_id(Path::new("flat.toml")), None);
    }

    #[test]
    fn identifiers() {
        assert!(is_upper_snake("XID_79"));
        assert!(!is_upper_snake("Xid79"));
        assert!(is_snake_lower("collective_timeout"));
        assert!(!is_snake_lower("Network"));
        assert!(is_id("nvidia/xid-79"));
        assert!(!is_id("nvidia/Xid"));
    }
}
