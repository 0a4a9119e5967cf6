//! When each rank (or host) of an incident first spoke: what the incident page draws as a
//! timeline, bounded.
//!
//! [`super::lifecycle::Incident::count`] feeds every match here; [`Timeline::view`] is what the
//! incident object carries (not in its JSON contract: the admin server's API and page show it).
//! One row per rank (per host for lines without a rank): the first match's time, role and
//! error code, the first root-role match's time, the last match's time and a count. At most
//! [`MAX_TIMELINE_ROWS`] rows; the matches of further ranks are only counted (`untracked`), so
//! a 16,384-rank cascade costs 512 rows, about 40 bytes each.
//!
//! Times are the lines' own, in milliseconds since the epoch. A rank whose lines carry no time
//! is drawn at the incident's earliest time (`timed: false`), not at the correlator's clock,
//! which other jobs' lines may have moved far ahead; when no line of the incident has a time,
//! rows fall back to the correlator's clock when they first spoke.

use std::collections::HashMap;
use std::sync::Arc;

use serde::Serialize;

use crate::enrich::MatchEvent;
use crate::kb::Role;
use crate::time::Millis;

/// Rows kept per incident.
pub const MAX_TIMELINE_ROWS: usize = 512;

/// Distinct error codes shared between rows (further ones are stored per row).
const MAX_SHARED_CODES: usize = 64;

/// What a row is keyed by: the rank, or the host of a line without one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    Rank(u32),
    Host(Arc<str>),
    Unknown,
}

#[derive(Debug, Clone)]
struct Row {
    rank: Option<u32>,
    host: Option<Arc<str>>,
    /// The correlator's clock at the row's first match: the fallback without log times.
    clock_ms: Millis,
    first_ms: Option<Millis>,
    last_ms: Option<Millis>,
    role: Role,
    code: Arc<str>,
    root_ms: Option<Millis>,
    matches: u32,
}

/// The rows of one incident as they fill; [`Timeline::view`] is what leaves the correlator.
#[derive(Debug, Clone, Default)]
pub struct Timeline {
    rows: Vec<Row>,
    index: HashMap<Key, u16>,
    codes: Vec<Arc<str>>,
    untracked: u64,
    cluster: Option<Arc<str>>,
}

impl Timeline {
    /// Counts one match of `rank` on `host` logged at `log_ms`, seen at `clock_ms` on the
    /// correlator's clock.
    pub fn observe(
        &mut self,
        event: &MatchEvent,
        rank: Option<u32>,
        host: Option<&Arc<str>>,
        log_ms: Option<Millis>,
        clock_ms: Millis,
    ) {
        if self.cluster.is_none() {
            self.cluster = event.cluster.as_deref().map(Arc::from);
        }
        let key = match (rank, host) {
            (Some(r), _) => Key::Rank(r),
            (None, Some(h)) => Key::Host(Arc::clone(h)),
            (None, None) => Key::Unknown,
        };
        let root = log_ms.filter(|_| event.role == Role::Root);
        if let Some(&i) = self.index.get(&key) {
            let row = &mut self.rows[usize::from(i)];
            if let Some(t) = log_ms {
                if row.first_ms.is_none_or(|f| t < f) {
                    row.first_ms = Some(t);
                    row.role = event.role;
                    row.code = intern(&mut self.codes, &event.error_code);
                }
                row.last_ms = Some(row.last_ms.map_or(t, |l| l.max(t)));
            }
            row.root_ms = match (row.root_ms, root) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            row.matches = row.matches.saturating_add(1);
            if row.host.is_none() {
                row.host = host.cloned();
            }
            return;
        }
        if self.rows.len() >= MAX_TIMELINE_ROWS {
            self.untracked += 1;
            return;
        }
        let code = intern(&mut self.codes, &event.error_code);
        self.index.insert(key, self.rows.len() as u16);
        self.rows.push(Row {
            rank,
            host: host.cloned(),
            clock_ms,
            first_ms: log_ms,
            last_ms: log_ms,
            role: event.role,
            code,
            root_ms: root,
            matches: 1,
        });
    }

    /// The rows ordered by their first match (then by rank), with the envelope's cluster.
    pub fn view(&self) -> TimelineView {
        let earliest = self.rows.iter().filter_map(|r| r.first_ms).min();
        let mut rows: Vec<TimelineRow> = self
            .rows
            .iter()
            .map(|r| {
                let first = r.first_ms.or(earliest).unwrap_or(r.clock_ms);
                TimelineRow {
                    rank: r.rank,
                    host: r.host.as_deref().map(str::to_string),
                    first_ms: first,
                    last_ms: r.last_ms.unwrap_or(first).max(first),
                    timed: r.first_ms.is_some(),
                    role: r.role,
                    error_code: r.code.to_string(),
                    root_ms: r.root_ms,
                    matches: r.matches,
                }
            })
            .collect();
        rows.sort_by(|a, b| (a.first_ms, a.rank, &a.host).cmp(&(b.first_ms, b.rank, &b.host)));
        TimelineView {
            rows,
            untracked: self.untracked,
            cluster: self.cluster.as_deref().map(str::to_string),
        }
    }
}

fn intern(codes: &mut Vec<Arc<str>>, code: &str) -> Arc<str> {
    if let Some(c) = codes.iter().find(|c| &***c == code) {
        return Arc::clone(c);
    }
    let c: Arc<str> = Arc::from(code);
    if codes.len() < MAX_SHARED_CODES {
        codes.push(Arc::clone(&c));
    }
    c
}

/// The timeline as the incident page and API show it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TimelineView {
    /// One row per rank (per host for lines without a rank), by first match.
    pub rows: Vec<TimelineRow>,
    /// Matches of ranks beyond [`MAX_TIMELINE_ROWS`]: counted, not drawn.
    pub untracked: u64,
    /// The envelope's cluster of the first match that named one.
    pub cluster: Option<String>,
}

/// One rank's (or host's) part in an incident.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TimelineRow {
    /// The rank, when the lines named one.
    pub rank: Option<u32>,
    /// The host, when known.
    pub host: Option<String>,
    /// Its first match, ms since the epoch.
    pub first_ms: Millis,
    /// Its last match, ms since the epoch.
    pub last_ms: Millis,
    /// Whether its lines carried a time (else it is drawn at the incident's earliest time).
    pub timed: bool,
    /// The role of its first match.
    pub role: Role,
    /// The error code of its first match.
    pub error_code: String,
    /// Its first root-role match, ms since the epoch.
    pub root_ms: Option<Millis>,
    /// Its matches.
    pub matches: u32,
}

impl TimelineView {
    /// The earliest and latest time on the timeline.
    pub fn span(&self) -> Option<(Millis, Millis)> {
        let first = self.rows.iter().map(|r| r.first_ms).min()?;
        let last = self.rows.iter().map(|r| r.last_ms.max(r.first_ms)).max()?;
        Some((first, last))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::incident::testutil::event;

    #[test]
    fn one_row_per_rank_first_match_wins_and_rows_are_capped() {
        let mut t = Timeline::default();
        let host: Arc<str> = Arc::from("node-05");
        let xid = event("XID_79", Role::Root, "gpu_hardware").build();
        t.observe(&xid, None, Some(&host), Some(1_000), 1_000);
        let timeout = event("NCCL_TIMEOUT", Role::Cascade, "collective_timeout").build();
        for rank in 0..(MAX_TIMELINE_ROWS as u32 + 10) {
            t.observe(&timeout, Some(rank), None, Some(5_000 + i64::from(rank)), 0);
        }
        // An earlier root of rank 3 takes over its row's first match; a later one only counts.
        let oom = event("CUDA_OOM", Role::Root, "oom").build();
        t.observe(&oom, Some(3), None, Some(2_000), 0);
        t.observe(&oom, Some(4), None, Some(9_000), 0);
        // A line without a time counts, and moves nothing.
        t.observe(&oom, Some(4), None, None, 99_000);
        let v = t.view();
        assert_eq!(v.rows.len(), MAX_TIMELINE_ROWS);
        assert_eq!(v.untracked, 11, "the ranks past the cap, only counted");
        assert_eq!(v.rows[0].host.as_deref(), Some("node-05"));
        assert_eq!(v.rows[0].root_ms, Some(1_000));
        assert_eq!(v.rows[1].rank, Some(3));
        assert_eq!((v.rows[1].first_ms, v.rows[1].role), (2_000, Role::Root));
        assert_eq!(v.rows[1].error_code, "CUDA_OOM");
        let four = v.rows.iter().find(|r| r.rank == Some(4)).expect("rank 4");
        assert_eq!(four.error_code, "NCCL_TIMEOUT");
        assert_eq!(
            (four.root_ms, four.last_ms, four.matches),
            (Some(9_000), 9_000, 3)
        );
        assert_eq!(v.span(), Some((1_000, 9_000)));
        assert!(v.rows.windows(2).all(|w| w[0].first_ms <= w[1].first_ms));
    }

    #[test]
    fn rows_without_a_time_sit_at_the_start_or_fall_back_to_the_clock() {
        let e = event("CUDA_UNKNOWN_ERROR", Role::Root, "gpu").build();
        let mut t = Timeline::default();
        t.observe(&e, Some(11), None, None, 3_600_000);
        t.observe(&e, Some(0), None, Some(1_000), 1_000);
        let v = t.view();
        let eleven = v.rows.iter().find(|r| r.rank == Some(11)).expect("row");
        assert_eq!(
            (eleven.first_ms, eleven.timed),
            (1_000, false),
            "not at the clock"
        );
        assert_eq!(v.span(), Some((1_000, 1_000)));

        let mut untimed = Timeline::default();
        untimed.observe(&e, Some(1), None, None, 5);
        untimed.observe(&e, Some(2), None, None, 7);
        let v = untimed.view();
        assert_eq!(v.span(), Some((5, 7)), "the clock orders them");
    }
}
