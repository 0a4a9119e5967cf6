//! `[incidents]`: correlation in `faultline run`, the incidents topic, how long an open
//! incident may hold the commit, and the scale-out roles ([`ProcessRole`]): one process matching and
//! correlating (the default), or match members feeding a correlator through the events topic.
//! Setting `topic` turns incidents on.

use std::time::Duration;

use serde::Deserialize;

use super::IncidentConfig;
use crate::section::{Errors, Printer};

/// The default incidents topic.
pub const DEFAULT_INCIDENTS_TOPIC: &str = "faultline.incidents";
/// Incidents held longer than this stop holding the commit.
pub const DEFAULT_MAX_HOLD: Duration = Duration::from_secs(3_600);
/// How long a resolved incident keeps holding the commit for its late lines, by default.
pub const DEFAULT_RESOLVED_HOLD: Duration = Duration::from_secs(600);

/// `[incidents]` as written. Setting `topic` turns incidents on.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawIncidentsConfig {
    /// Where incident changes go; incidents are off without it.
    pub topic: Option<String>,
    /// [`IncidentConfig::window_ms`].
    pub window_ms: Option<i64>,
    /// [`IncidentConfig::quiet_ms`].
    pub quiet_ms: Option<i64>,
    /// [`IncidentConfig::max_open_incidents`].
    pub max_open_incidents: Option<usize>,
    /// [`IncidentConfig::max_jobs`].
    pub max_jobs: Option<usize>,
    /// [`IncidentConfig::ticket_min_matches`].
    pub ticket_min_matches: Option<u64>,
    /// [`IncidentConfig::ticket_window_ms`].
    pub ticket_window_ms: Option<i64>,
    /// [`IncidentConfig::restart_loop_after`].
    pub restart_loop_after: Option<u32>,
    /// How long an open incident may hold the commit.
    pub max_hold_ms: Option<u64>,
    /// How long a resolved incident still holds the commit (at most `max_hold_ms`; 0: not at
    /// all).
    pub resolved_hold_ms: Option<u64>,
    /// `all` (match and correlate in one process), `match` or `correlate` ([`ProcessRole`]).
    pub role: Option<String>,
    /// The correlator's consumer group (role `correlate`); default `<kafka.group_id>-correlator`.
    pub group_id: Option<String>,
    /// How match members spread events over correlator shards: `cluster` ([`ShardBy`]); unset:
    /// one shard.
    pub shard_by: Option<String>,
}

/// What a `faultline run` process does ([`IncidentsConfig::role`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ProcessRole {
    /// Match and correlate in one process: incidents from the partitions it owns.
    #[default]
    All,
    /// Match only: events go to the events topic, partitioned by correlator shard, for the
    /// correlators (a match member keeps no incident state).
    Match,
    /// Correlate only: consume the events topic in the correlator group, produce incidents.
    Correlate,
}

impl ProcessRole {
    /// Parses `all`, `match` or `correlate`.
    pub fn parse(s: &str) -> Option<ProcessRole> {
        match s {
            "all" => Some(ProcessRole::All),
            "match" => Some(ProcessRole::Match),
            "correlate" => Some(ProcessRole::Correlate),
            _ => None,
        }
    }

    /// The name in `faultline.toml` and `--role`.
    pub fn as_str(self) -> &'static str {
        match self {
            ProcessRole::All => "all",
            ProcessRole::Match => "match",
            ProcessRole::Correlate => "correlate",
        }
    }
}

/// Which events share a correlator shard ([`IncidentsConfig::shard_by`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardBy {
    /// The envelope's `cluster` (else the input topic's name): every job and node of one
    /// cluster meet in one correlator.
    Cluster,
}

/// Validated `[incidents]`.
#[derive(Debug, Clone)]
pub struct IncidentsConfig {
    /// Where incident changes go.
    pub topic: String,
    /// The correlator's settings.
    pub correlator: IncidentConfig,
    /// How long an open incident may hold the commit.
    pub max_hold: Duration,
    /// How long a resolved incident that late lines may still revise holds its records, after
    /// its resolution (at most `max_hold`): a correlator that takes over within it reads the
    /// failure again and revises it under its id.
    pub resolved_hold: Duration,
    /// What this process does.
    pub role: ProcessRole,
    /// The correlator's consumer group when set; see [`IncidentsConfig::correlator_group`].
    pub group_id: Option<String>,
    /// How events are spread over correlator shards; `None`: one shard.
    pub shard_by: Option<ShardBy>,
}

impl IncidentsConfig {
    /// Validates `[incidents]`; `None` when incidents are off (or a field is wrong).
    pub fn from_raw(inc: &RawIncidentsConfig, errors: &mut Errors<'_>) -> Option<Self> {
        let topic = inc.topic.clone()?;
        let before = errors.count();
        if topic.trim().is_empty() {
            errors.push("topic", "must not be empty");
        }
        let d = IncidentConfig::default();
        let correlator = IncidentConfig {
            window_ms: inc.window_ms.unwrap_or(d.window_ms),
            quiet_ms: inc.quiet_ms.unwrap_or(d.quiet_ms),
            max_open_incidents: inc.max_open_incidents.unwrap_or(d.max_open_incidents),
            max_jobs: inc.max_jobs.unwrap_or(d.max_jobs),
            ticket_min_matches: inc.ticket_min_matches.unwrap_or(d.ticket_min_matches),
            ticket_window_ms: inc.ticket_window_ms.unwrap_or(d.ticket_window_ms),
            restart_loop_after: inc.restart_loop_after.unwrap_or(d.restart_loop_after),
            ..d
        };
        if let Err(e) = correlator.validate() {
            errors.push("", e.to_string());
        }
        let max_hold = inc
            .max_hold_ms
            .map_or(DEFAULT_MAX_HOLD, Duration::from_millis);
        if max_hold.is_zero() {
            errors.push("max_hold_ms", "must be positive");
        }
        let resolved_hold = inc
            .resolved_hold_ms
            .map_or(DEFAULT_RESOLVED_HOLD, Duration::from_millis)
            .min(max_hold);
        let role = match inc.role.as_deref() {
            None => ProcessRole::All,
            Some(r) => ProcessRole::parse(r).unwrap_or_else(|| {
                errors.push("role", format!("{r:?}: expected all, match or correlate"));
                ProcessRole::All
            }),
        };
        if inc.group_id.as_deref().is_some_and(|g| g.trim().is_empty()) {
            errors.push("group_id", "must not be empty");
        }
        let shard_by = match inc.shard_by.as_deref() {
            None => None,
            Some("cluster") => Some(ShardBy::Cluster),
            Some(other) => {
                errors.push("shard_by", format!("{other:?}: expected cluster"));
                None
            }
        };
        (errors.count() == before).then_some(IncidentsConfig {
            topic,
            correlator,
            max_hold,
            resolved_hold,
            role,
            group_id: inc.group_id.clone(),
            shard_by,
        })
    }

    /// The correlator's consumer group: `group_id`, else `<kafka_group>-correlator`.
    pub fn correlator_group(&self, kafka_group: &str) -> String {
        self.group_id
            .clone()
            .unwrap_or_else(|| format!("{kafka_group}-correlator"))
    }

    /// The effective `[incidents]` table.
    pub fn print(&self, p: &mut Printer) {
        let c = &self.correlator;
        p.table("incidents");
        p.value("topic", &self.topic);
        p.number("window_ms", c.window_ms);
        p.number("quiet_ms", c.quiet_ms);
        p.number("max_open_incidents", c.max_open_incidents);
        p.number("max_jobs", c.max_jobs);
        p.number("ticket_min_matches", c.ticket_min_matches);
        p.number("ticket_window_ms", c.ticket_window_ms);
        p.number("restart_loop_after", c.restart_loop_after);
        p.number("max_hold_ms", self.max_hold.as_millis());
        p.number("resolved_hold_ms", self.resolved_hold.as_millis());
        p.value("role", self.role.as_str());
        if let Some(g) = &self.group_id {
            p.value("group_id", g);
        }
        if let Some(ShardBy::Cluster) = self.shard_by {
            p.value("shard_by", "cluster");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(toml_text: &str) -> (Option<IncidentsConfig>, Vec<String>) {
        let raw: RawIncidentsConfig = toml::from_str(toml_text).expect("toml");
        let mut out = Vec::new();
        let c = IncidentsConfig::from_raw(&raw, &mut Errors::new("incidents", &mut out));
        (c, out.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn off_without_a_topic_and_errors_name_the_field() {
        assert!(parse("").0.is_none());
        let (c, errors) =
            parse("topic = \"inc\"\nquiet_ms = 2000\nwindow_ms = 1000\nticket_min_matches = 3\n");
        assert!(errors.is_empty(), "{errors:?}");
        let c = c.expect("valid");
        assert_eq!(c.correlator.quiet_ms, 2000);
        assert_eq!(c.correlator.ticket_min_matches, 3);
        let mut p = Printer::default();
        c.print(&mut p);
        assert!(p.finish().contains("quiet_ms = 2000"));
        let (c, errors) =
            parse("topic = \"inc\"\nquiet_ms = 10\nwindow_ms = 1000\nmax_hold_ms = 0\n");
        assert!(c.is_none());
        let fields: Vec<&str> = errors
            .iter()
            .map(|e| e.split(':').next().unwrap_or(""))
            .collect();
        assert_eq!(fields, ["incidents", "incidents.max_hold_ms"], "{errors:?}");
    }
}
