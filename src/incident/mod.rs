//! Per-job correlation: match events in, incidents out.
//!
//! Flow: `enrich` -> [`Correlator::observe`] -> [`IncidentEvent`] -> sinks (stdout for `scan`,
//! [`crate::sink::webhook`] for tickets). The correlator groups one job's matches into an
//! incident while they keep coming within a window, elects the event that started it (root
//! beats symptom beats cascade), names the culprit rank and host, gathers the traceback lines
//! that explain the root, and tells when the incident opens, changes and resolves.
//!
//! It costs nothing per line: it only sees lines that hit a KB entry. Multiline context
//! (Python tracebacks, c10 frames, torchrun summaries) is recognised by KB entries of the
//! `context` domain, so block lines are hits like any other and no extra pass reads the lines
//! that hit nothing.
//!
//! # Layout
//!
//! - [`time`]: log timestamps -> milliseconds; durations in flags. The correlator runs on the
//!   log's own clock (or one the caller injects with [`Correlator::advance`]), never the wall
//!   clock.
//! - [`fingerprint`]: the versioned, frozen incident key (`fp1:`).
//! - [`elect`]: which event initiated the incident, and which rule decided.
//! - [`culprit`]: per-rank NCCL progress; the culprit ranks and hosts, or "could not tell".
//! - [`multiline`]: traceback and summary blocks per (job, rank) stream, bounded.
//! - [`lifecycle`]: one incident's state, when it emits, how it snapshots to JSON.
//! - [`fleet`]: bad-node scores across jobs.
//! - [`timeline`]: when each rank first spoke, bounded, for the incident page.
//! - [`correlate`]: the [`Correlator`]: jobs, caps, eviction, resolution, restart loops, tickets.
//! - [`unrecognised`]: the unknown error templates an incident without a known root lists.
//!
//! The JSON contract of [`IncidentEvent`] is documented in `docs/incidents.md`.

pub mod config;
pub mod correlate;
pub mod culprit;
pub mod elect;
pub mod fingerprint;
pub mod fleet;
pub mod lifecycle;
pub mod lru;
pub mod multiline;
pub mod nodes;
#[cfg(test)]
pub(crate) mod testutil;
pub mod timeline;
pub mod unrecognised;

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;

pub use correlate::{Correlator, CorrelatorStats};

use crate::enrich::Diagnosis;
use crate::kb::{Role, Severity};
use crate::record::Provenance;
use crate::time::Millis;

/// How the correlator groups, bounds and tickets. Build with [`IncidentConfig::default`] and
/// override fields; [`IncidentConfig::validate`] runs in [`Correlator::new`].
#[derive(Debug, Clone, PartialEq)]
pub struct IncidentConfig {
    /// A match joins its job's open incident when its time is no later than the incident's
    /// last match plus this. A collective timeout counts from when the hang began (its time
    /// minus `elapsed_ms`/`timeout_ms`), so the cascade of a root lands in the root's incident.
    pub window_ms: Millis,
    /// An open incident resolves once the clock passes its last match plus this. At least the
    /// window; the default leaves room for a 30-minute NCCL timeout to report.
    pub quiet_ms: Millis,
    /// The most a collective timeout is back-dated by its `elapsed_ms`/`timeout_ms` capture.
    pub max_backdate_ms: Millis,
    /// Open incidents kept; opening one more resolves the least recently updated (`evicted`).
    pub max_open_incidents: usize,
    /// Jobs with any state (open incident, pending traceback blocks, restart history); one more
    /// forgets the least recently touched.
    pub max_jobs: usize,
    /// Ranks tracked per incident (counts, NCCL progress); further ranks are only counted.
    pub max_ranks_per_incident: usize,
    /// Hosts counted per incident; further hosts are only counted.
    pub max_hosts_per_incident: usize,
    /// Lines kept in an incident's context and in each pending block.
    pub max_context_lines: usize,
    /// Bytes kept in an incident's context and in each pending block.
    pub max_context_bytes: usize,
    /// Per-(job, rank, host) streams with a pending block, per job.
    pub max_context_streams_per_job: usize,
    /// Hosts with a bad-node score.
    pub max_hosts: usize,
    /// Raise a ticket for an incident whose root is unknown once this many of its matches fall
    /// within `ticket_window_ms` (a tumbling window). Root-role incidents are ticketed at once.
    pub ticket_min_matches: u64,
    /// The tumbling window over which `ticket_min_matches` is counted.
    pub ticket_window_ms: Millis,
    /// A new incident of a job with the fingerprint of one of its incidents that ended less
    /// than this ago is a recurrence.
    pub restart_horizon_ms: Millis,
    /// Occurrences of one fingerprint in one job (within the horizon) that make a restart loop.
    pub restart_loop_after: u32,
    /// Error codes or KB ids of lines that say the job restarts (torchelastic, Slurm requeue,
    /// Kubeflow replica restart): they resolve the job's open incident (`restart`).
    pub restart_markers: Vec<String>,
    /// Half-life of a bad-node score.
    pub bad_node_half_life_ms: Millis,
    /// A node's event (Xid, ECC, AER, OOM killer...) joins a job's incident when it falls at
    /// most this long before the job's first error on that host (or within the window after
    /// its last).
    pub node_join_ms: Millis,
    /// Raise tickets for node incidents (node events that no job claimed); off by default:
    /// they feed the bad-node score and the lemon-node view, not a page.
    pub node_tickets: bool,
    /// Where a stamp without a year (syslog, glog) is placed before any log told the time:
    /// near this time instead of the wall clock's today. For replays of old logs whose first
    /// correlated line may be yearless (`faultline demo` sets it to its samples' earliest
    /// dated stamp); `None` in the live service.
    pub clock_anchor: Option<Millis>,
}

impl Default for IncidentConfig {
    fn default() -> Self {
        IncidentConfig {
            window_ms: 5 * 60_000,
            quiet_ms: 35 * 60_000,
            max_backdate_ms: 2 * 3_600_000,
            max_open_incidents: 10_000,
            max_jobs: 20_000,
            max_ranks_per_incident: 32_768,
            max_hosts_per_incident: 4_096,
            max_context_lines: 64,
            max_context_bytes: 16 * 1024,
            max_context_streams_per_job: 256,
            max_hosts: 65_536,
            ticket_min_matches: 20,
            ticket_window_ms: 5 * 60_000,
            restart_horizon_ms: 24 * 3_600_000,
            restart_loop_after: 2,
            restart_markers: vec![
                "TORCHELASTIC_RESTART".into(),
                "SLURM_REQUEUED".into(),
                "kubernetes/kubeflow-replica-restarting".into(),
            ],
            bad_node_half_life_ms: 24 * 3_600_000,
            node_join_ms: 10 * 60_000,
            node_tickets: false,
            clock_anchor: None,
        }
    }
}

/// An [`IncidentConfig`] that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IncidentConfigError {
    /// A setting that must be positive is not; carries its name.
    #[error("incident setting {0} must be greater than zero")]
    NotPositive(&'static str),
    /// `quiet_ms` is shorter than `window_ms`: an incident would resolve while still joinable.
    #[error(
        "the incident quiet period ({quiet_ms} ms) must be at least the window ({window_ms} ms)"
    )]
    QuietShorterThanWindow {
        /// The configured quiet period, in ms.
        quiet_ms: Millis,
        /// The configured window, in ms.
        window_ms: Millis,
    },
    /// `max_jobs` is below `max_open_incidents`: every open incident needs its job's state.
    #[error("max_jobs ({max_jobs}) must be at least max_open_incidents ({max_open})")]
    FewerJobsThanIncidents {
        /// The configured cap on jobs.
        max_jobs: usize,
        /// The configured cap on open incidents.
        max_open: usize,
    },
}

impl IncidentConfig {
    /// Checks that every bound is positive, the quiet period at least the window and `max_jobs`
    /// at least `max_open_incidents`.
    pub fn validate(&self) -> Result<(), IncidentConfigError> {
        let positive: [(&'static str, i128); 14] = [
            ("node_join", self.node_join_ms.into()),
            ("window", self.window_ms.into()),
            ("quiet", self.quiet_ms.into()),
            ("max_open_incidents", self.max_open_incidents as i128),
            ("max_jobs", self.max_jobs as i128),
            (
                "max_ranks_per_incident",
                self.max_ranks_per_incident as i128,
            ),
            (
                "max_hosts_per_incident",
                self.max_hosts_per_incident as i128,
            ),
            ("max_context_lines", self.max_context_lines as i128),
            ("max_context_bytes", self.max_context_bytes as i128),
            (
                "max_context_streams_per_job",
                self.max_context_streams_per_job as i128,
            ),
            ("max_hosts", self.max_hosts as i128),
            ("ticket_min_matches", self.ticket_min_matches.into()),
            ("ticket_window", self.ticket_window_ms.into()),
            ("restart_loop_after", self.restart_loop_after.into()),
        ];
        for (name, value) in positive {
            if value <= 0 {
                return Err(IncidentConfigError::NotPositive(name));
            }
        }
        if self.quiet_ms < self.window_ms {
            return Err(IncidentConfigError::QuietShorterThanWindow {
                quiet_ms: self.quiet_ms,
                window_ms: self.window_ms,
            });
        }
        if self.max_jobs < self.max_open_incidents {
            return Err(IncidentConfigError::FewerJobsThanIncidents {
                max_jobs: self.max_jobs,
                max_open: self.max_open_incidents,
            });
        }
        Ok(())
    }
}

/// What changed: an incident's lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// The incident's first change: its first match arrived.
    Open,
    /// A significant change (root, fingerprint, culprit, ticket, restart loop) or a power-of-two
    /// match count.
    Updated,
    /// The final state; `resolution` says why.
    Resolved,
}

/// Why an incident resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Resolution {
    /// Nothing new for the quiet period.
    Quiet,
    /// A match of the same job came after the window: a new incident starts.
    NextIncident,
    /// The job printed a restart marker.
    Restart,
    /// Dropped to respect a state cap (least recently updated first).
    Evicted,
    /// [`Correlator::resolve_all`]: the stream ended or the service is shutting down.
    Shutdown,
}

/// Why a ticket was raised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TicketReason {
    /// The incident's elected initiator is a root-role match.
    Root,
    /// `ticket_min_matches` matches within `ticket_window_ms`.
    Threshold,
}

/// One change of one incident: the `type: "incident"` object of the JSON contract.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IncidentEvent {
    /// Always `incident` (`type` in JSON).
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// Version of the output contract, [`crate::enrich::SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The change this object reports.
    pub status: Status,
    /// Set when `status` is `resolved`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resolution: Option<Resolution>,
    /// The incident's identity: given when it opens and never changed for the life of the
    /// failure, whatever order its lines arrive in and whichever correlator (restarted or
    /// taking over, which adopts the open incidents of the incidents topic) reports it. It is
    /// the fingerprint the incident opened with. Tickets, alert labels, incident pages and the
    /// incidents topic's key use it.
    pub id: String,
    /// The content key ([`fingerprint`]): the job and its earliest line that could open an
    /// incident, so it moves when an earlier line arrives late; for deduplication across
    /// replays.
    pub fingerprint: String,
    /// The fingerprint algorithm, [`fingerprint::VERSION`].
    pub fingerprint_version: &'static str,
    /// What failed where (`fp1`: job, root code, root host and GPU): equal across a job's
    /// incidents with the same root, which is how restart loops are told.
    pub signature: String,
    /// One line for people: "XID_79 on gpu-node-02 (GPU 0000:3b:00) killed llama-pretrain-4821;
    /// 15 ranks timed out in ALLREDUCE SeqNum 4417 after 600 s".
    pub summary: String,
    /// The fingerprint this incident had before its root was re-elected in this change.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub previous_fingerprint: Option<String>,
    /// Counts this incident's emitted changes from 1; with the fingerprint, a delivery key.
    pub revision: u64,
    /// The job whose matches make up the incident.
    pub job_id: String,
    /// True when the elected initiator is a root-role match; false: root unknown, `root`
    /// holds the symptom or cascade that started the incident.
    pub root_known: bool,
    /// The elected initiator.
    pub root: RootInfo,
    /// The other roots the incident saw (at most eight): causes of their own, or consequences
    /// of a node event's root.
    pub contributing: Vec<Contributor>,
    /// The ranks and hosts to look at, and how they were found.
    pub culprit: Culprit,
    /// Which rule elected the initiator, against which runner-up.
    pub grouping_info: GroupingInfo,
    /// Every match of the incident by role, error code, rank and host.
    pub counts: Counts,
    /// The cascade-role matches.
    pub cascades: Cascades,
    /// RFC 3339, from the log's timestamps; null when no match carried one.
    pub first_seen: Option<String>,
    /// Latest log time of a match, RFC 3339; null when no match carried one.
    pub last_seen: Option<String>,
    /// The root's traceback or c10 block and torchrun's summary, bounded.
    pub context: ContextInfo,
    /// Root unknown only: the job's error lines that no KB entry knows, as templates seen near
    /// the failure, newest first, at most five ([`unrecognised`]); absent when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unrecognised: Vec<unrecognised::Unrecognised>,
    /// The root entry's diagnosis, as in match events.
    #[serde(serialize_with = "crate::enrich::serialize_full_diagnosis")]
    pub diagnosis: Arc<Diagnosis>,
    /// The same fingerprint recurred in this job `restart_loop_after` times within the horizon.
    pub restart_loop: bool,
    /// Occurrences of this fingerprint in this job within the restart horizon, this one included.
    pub recurrence: u32,
    /// The host this incident blames (the root's host, or the single culprit host).
    pub blamed_host: Option<String>,
    /// Decayed count of distinct jobs whose incidents `blamed_host` initiated.
    pub bad_node_score: Option<f64>,
    /// Whether a ticket is raised, and why.
    pub ticket: Ticket,
    /// Content hash of the KB in use when the incident opened.
    pub kb_version: String,
    /// Unique per correlator; keys "the same incident" for sinks that keep the latest state.
    #[serde(skip)]
    pub serial: u64,
    /// When each rank first spoke, and the envelope's cluster: for the incident page, the API
    /// and the alert's `cluster` label; not part of the JSON contract.
    #[serde(skip)]
    pub timeline: Arc<timeline::TimelineView>,
    /// Every host the incident's lines placed the job's ranks on or named, sorted (at most
    /// `max_hosts_per_incident`): a correlator that takes the job over learns from it where the
    /// job ran, so that a node's late event still joins the failure.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub job_hosts: Vec<String>,
    /// The root a previous correlator published for this incident, on the change that
    /// revises it under another root after a takeover: its alert ends. Set by the service
    /// (`pipeline::incidents`); not part of the JSON contract.
    #[serde(skip)]
    pub replaces: Option<Arc<PublishedRoot>>,
    /// The start of the incident's log time range with collective timeouts back-dated to when
    /// their hang began (bounded by `max_backdate_ms`): where [`unrecognised`] looks back
    /// from; not part of the JSON contract.
    #[serde(skip)]
    pub effective_from: Option<Millis>,
}

/// Another root-role match of the incident (the primary one is `root`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Contributor {
    /// Its KB entry.
    pub kb_id: String,
    /// Its error code.
    pub error_code: String,
    /// The rank that printed it, if known.
    pub rank: Option<u32>,
    /// The host it came from, if known.
    pub host: Option<String>,
    /// PCI address, from a `gpu` capture.
    pub gpu: Option<String>,
    /// Its timestamp as the log wrote it.
    pub timestamp: Option<String>,
    /// On the host of a node-event root, after it: a consequence of the root (a CUDA error
    /// after the GPU fell off the bus), not a cause of its own.
    pub consequence: bool,
}

/// The root of an incident as the incidents topic tells it: what its alert's labels name.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Deserialize)]
pub struct PublishedRoot {
    /// [`RootInfo::kb_id`].
    #[serde(default)]
    pub kb_id: String,
    /// [`RootInfo::error_code`].
    #[serde(default)]
    pub error_code: String,
    /// [`RootInfo::category`].
    #[serde(default)]
    pub category: String,
    /// [`RootInfo::severity`], as written.
    #[serde(default)]
    pub severity: String,
}

impl PublishedRoot {
    /// What `root` publishes.
    pub fn of(root: &RootInfo) -> Self {
        PublishedRoot {
            kb_id: root.kb_id.clone(),
            error_code: root.error_code.clone(),
            category: root.category.clone(),
            severity: root.severity.as_str().to_string(),
        }
    }
}

/// The elected initiator.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RootInfo {
    /// Id of the initiator's entry.
    pub kb_id: String,
    /// The entry's stable error code.
    pub error_code: String,
    /// The entry's role.
    pub role: Role,
    /// The entry's severity.
    pub severity: Severity,
    /// The entry's failure class.
    pub category: String,
    /// Rank of the initiating line (envelope, launcher prefix or `rank` capture).
    pub rank: Option<u32>,
    /// Host the initiating line came from.
    pub host: Option<String>,
    /// PCI address, from a `gpu` capture.
    pub gpu: Option<String>,
    /// The line's timestamp as text.
    pub timestamp: Option<String>,
    /// The matched line, as in its match event.
    pub line: String,
    /// Where the line was read.
    pub source: Provenance,
    /// The named groups of the match, as in its match event.
    pub captures: BTreeMap<String, String>,
}

/// How the culprit was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CulpritMethod {
    /// The root match names its rank.
    RootEvent,
    /// The root match names a host but no rank (a kernel log); ranks, if any, come from the
    /// NCCL evidence below.
    RootHost,
    /// torchrun's "Root Cause (first observed failure)" row (ignored when that rank timed out
    /// itself: the first process to exit in a hang is a victim).
    TorchelasticRootCause,
    /// Ranks whose enqueued or completed NCCL work lags the rest.
    SequenceLag,
    /// Ranks of the job that never reported a collective timeout or error.
    MissingRanks,
    /// "communicator was aborted on rank N" printed by a different rank.
    AbortedOnRank,
    /// Not enough evidence.
    Unknown,
}

/// The culprit ranks and hosts, or `method: "unknown"`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Culprit {
    /// Ranks to look at, at most 16.
    pub ranks: Vec<u32>,
    /// Hosts to look at: the root's, and those of the culprit ranks.
    pub hosts: Vec<String>,
    /// How they were found (for the ranks, unless `rank_method` is set).
    pub method: CulpritMethod,
    /// For ranks found by NCCL evidence when the root names only a host.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank_method: Option<CulpritMethod>,
    /// One sentence for people.
    pub explanation: String,
    /// What the NCCL inference saw.
    pub evidence: Evidence,
}

/// What the NCCL inference saw.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Evidence {
    /// The job's world size, when known or inferable.
    pub world_size: Option<u32>,
    /// `capture` (a `world_size`/`nranks` capture) or `highest_rank` (highest rank seen + 1).
    pub world_size_source: Option<&'static str>,
    /// Ranks that printed a collective timeout or error.
    pub reporting_ranks: u64,
    /// At most 16 listed; `missing_count` has them all.
    pub missing_ranks: Vec<u32>,
    /// Silent ranks in all: ranks of the world that never reported.
    pub missing_count: u64,
    /// Ranks below the others on enqueued or completed NCCL work (a minority).
    pub lagging_ranks: Vec<u32>,
    /// Highest enqueued and completed NCCL work among the ranks.
    pub max_enqueued: Option<i64>,
    /// Highest completed NCCL work among the ranks.
    pub max_completed: Option<i64>,
    /// Ranks that another rank's "communicator was aborted on rank N" named.
    pub named_by_peers: Vec<u32>,
    /// The rank of torchrun's "Root Cause (first observed failure)" row.
    pub torchelastic_root_cause: Option<u32>,
}

/// Which rule elected the initiator, against which runner-up.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupingInfo {
    /// Matches are grouped per job id.
    pub key: &'static str,
    /// The window in force, in ms ([`IncidentConfig::window_ms`]).
    pub window_ms: Millis,
    /// `role`, `timestamp`, `arrival` or `only_candidate`.
    pub rule: elect::Rule,
    /// The best candidate that lost, if any.
    pub runner_up: Option<RunnerUp>,
    /// Matches that could initiate (not info, not context).
    pub candidates: u64,
    /// One sentence for people.
    pub explanation: String,
}

/// The best event that did not win the election.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunnerUp {
    /// Id of its entry.
    pub kb_id: String,
    /// The entry's stable error code.
    pub error_code: String,
    /// The entry's role.
    pub role: Role,
    /// Rank of its line, when known.
    pub rank: Option<u32>,
    /// Its line's timestamp as text.
    pub timestamp: Option<String>,
}

/// Matches in the incident.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Counts {
    /// Matches in all.
    pub matches: u64,
    /// Matches per role (`root`, `symptom`, `cascade`, `info`).
    pub by_role: BTreeMap<&'static str, u64>,
    /// Matches per error code.
    pub by_error_code: BTreeMap<String, u64>,
    /// Itemised ranks with a match.
    pub ranks: u64,
    /// Matches per itemised rank.
    pub by_rank: BTreeMap<u32, u64>,
    /// Itemised hosts with a match.
    pub hosts: u64,
    /// Matches per itemised host.
    pub by_host: BTreeMap<String, u64>,
    /// Matches of ranks and hosts beyond the per-incident caps (counted, not itemised).
    pub untracked: u64,
}

/// The cascade-role matches of the incident.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Cascades {
    /// Cascade-role matches.
    pub matches: u64,
    /// Ranks that printed one.
    pub ranks: u64,
    /// Cascade matches per error code.
    pub by_error_code: BTreeMap<String, u64>,
    /// The collective op the cascade names most (`ALLREDUCE`), its sequence number, and the
    /// timeout it ran into.
    pub op: Option<String>,
    /// The sequence number (`SeqNum`) of that op.
    pub seq: Option<i64>,
    /// The timeout the cascade's lines ran into, in milliseconds.
    pub timeout_ms: Option<i64>,
    /// One line for people: "15 ranks timed out in ALLREDUCE SeqNum 4417 after 600 s".
    pub summary: Option<String>,
}

/// The lines that explain the root: its rank's traceback or c10 block, torchrun's summary.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ContextInfo {
    /// The kept lines, in order.
    pub lines: Vec<ContextLine>,
    /// Lines were left out (the middle of a long block) or cut.
    pub truncated: bool,
    /// Lines left out of the middle of a long block.
    pub omitted_lines: u64,
    /// Index in `lines` where the omitted lines were.
    pub omitted_at: Option<usize>,
}

/// One context line.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ContextLine {
    /// Rank of the line's stream, when known.
    pub rank: Option<u32>,
    /// The line, as printed.
    pub text: String,
}

/// Ticket state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Ticket {
    /// True once a ticket is raised; it stays raised.
    pub raised: bool,
    /// Why it was raised.
    pub reason: Option<TicketReason>,
}
