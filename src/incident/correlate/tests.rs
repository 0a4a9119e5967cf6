//! Tests of [`super`].

use super::*;
use crate::incident::testutil::event;
use crate::incident::{CulpritMethod, TicketReason};
use crate::kb::Role;

fn ts(sec: i64) -> String {
    crate::time::format_ms(1_714_564_800_000 + sec * 1000)
}

fn corr(cfg: IncidentConfig) -> Correlator {
    Correlator::new(cfg).expect("valid config")
}

fn feed(c: &mut Correlator, events: &[MatchEvent]) -> Vec<IncidentEvent> {
    let mut out = Vec::new();
    for e in events {
        c.observe(e, &mut out);
    }
    out
}

fn xid(job: &str, host: &str, sec: i64) -> MatchEvent {
    event("XID_79", Role::Root, "gpu_hardware")
        .job(job)
        .host(host)
        .ts(&ts(sec))
        .cap("gpu", "0000:3b:00")
        .build()
}

fn timeout(job: &str, rank: u32, sec: i64) -> MatchEvent {
    event("NCCL_TIMEOUT", Role::Cascade, "collective_timeout")
        .job(job)
        .rank(rank)
        .host(&format!("node-{:02}", rank / 8))
        .ts(&ts(sec))
        .cap("seq", "100")
        .cap("timeout_ms", "600000")
        .cap("elapsed_ms", "600050")
        .build()
}

#[test]
fn opens_updates_and_resolves_on_log_time() {
    let mut c = corr(IncidentConfig::default());
    let out = feed(&mut c, &[xid("j", "node-05", 0), timeout("j", 1, 600)]);
    assert_eq!(out[0].status, Status::Open);
    assert_eq!(out[0].root.error_code, "XID_79");
    assert!(out.iter().all(|e| e.resolution.is_none()));
    assert_eq!(c.open_incidents(), 1);
    // 40 minutes of silence on the log clock: another job's line moves the clock.
    let out = feed(&mut c, &[timeout("other", 0, 600 + 40 * 60)]);
    let resolved: Vec<_> = out
        .iter()
        .filter(|e| e.status == Status::Resolved)
        .collect();
    assert_eq!(resolved.len(), 1);
    assert_eq!(resolved[0].job_id, "j");
    assert_eq!(resolved[0].resolution, Some(Resolution::Quiet));
    assert_eq!(resolved[0].counts.matches, 2);
    // An injected clock does the same without any event.
    let mut out = Vec::new();
    c.advance(1_714_564_800_000 + 10 * 3_600_000, &mut out);
    assert_eq!(out.len(), 1);
    assert_eq!(c.open_incidents(), 0);
}

#[test]
fn matches_before_the_first_timestamp_are_not_from_1970() {
    let mut c = corr(IncidentConfig::default());
    let untimed = event("NCCL_TIMEOUT", Role::Cascade, "collective_timeout")
        .rank(0)
        .build();
    let out = feed(&mut c, &[untimed.clone(), timeout("job", 1, 0), untimed]);
    assert!(out.iter().all(|e| e.status != Status::Resolved), "{out:?}");
    assert_eq!(c.current("job").expect("open").counts.matches, 3);
}

#[test]
fn a_late_root_takes_over_and_the_rule_is_reported() {
    let mut c = corr(IncidentConfig::default());
    let out = feed(&mut c, &[timeout("j", 1, 10), xid("j", "node-05", 20)]);
    let first = &out[0];
    assert!(!first.root_known);
    let last = out.last().expect("events");
    assert!(last.root_known);
    assert_eq!(last.root.error_code, "XID_79");
    // The fingerprint names the failure, not its root: a root learned later leaves it as it
    // is (tickets keep their key); the signature follows the root.
    assert_eq!(last.fingerprint, first.fingerprint);
    assert_eq!(last.previous_fingerprint, None);
    assert_ne!(last.signature, first.signature);
    assert_eq!(last.grouping_info.rule, elect::Rule::Role);
    assert_eq!(
        last.grouping_info
            .runner_up
            .as_ref()
            .map(|r| r.error_code.as_str()),
        Some("NCCL_TIMEOUT")
    );
}

#[test]
fn timestamps_then_arrival_break_ties_between_roots() {
    let mut c = corr(IncidentConfig::default());
    let late = event("CUDA_LAUNCH_FAILURE", Role::Root, "kernel_bug")
        .rank(17)
        .ts(&ts(30))
        .build();
    let out = feed(&mut c, &[late, xid("job", "node-05", 20)]);
    let last = out.last().expect("events");
    assert_eq!(
        last.root.error_code, "XID_79",
        "logged earlier, arrived later"
    );
    assert_eq!(last.grouping_info.rule, elect::Rule::Timestamp);

    let mut c = corr(IncidentConfig::default());
    let a = event("A", Role::Root, "crash").build();
    let b = event("B", Role::Root, "crash").build();
    feed(&mut c, &[a, b]);
    let now = c.current("job").expect("open");
    assert_eq!(now.root.error_code, "A");
    assert_eq!(now.grouping_info.rule, elect::Rule::Arrival);
}

#[test]
fn info_and_context_never_initiate() {
    let mut c = corr(IncidentConfig::default());
    let info = event("DS_FP16_OVERFLOW", Role::Info, "numerical").build();
    let hint = event("CUDA_ASYNC_REPORT_HINT", Role::Symptom, "context").build();
    assert!(feed(&mut c, &[info, hint]).is_empty());
    assert_eq!(c.open_incidents(), 0);
}

#[test]
fn a_match_after_the_window_starts_the_next_incident() {
    let mut c = corr(IncidentConfig::default());
    let oom = |sec| {
        event("CUDA_OOM", Role::Root, "device_oom")
            .rank(3)
            .ts(&ts(sec))
            .build()
    };
    let out = feed(&mut c, &[oom(0), oom(6 * 60)]);
    let resolved: Vec<_> = out
        .iter()
        .filter(|e| e.status == Status::Resolved)
        .collect();
    assert_eq!(resolved.len(), 1);
    assert_eq!(resolved[0].resolution, Some(Resolution::NextIncident));
    assert_eq!(c.open_incidents(), 1);
    // Same job, same root: the second one is a recurrence.
    let second = c.current("job").expect("open");
    assert_eq!(second.recurrence, 2);
    assert!(second.restart_loop);
}

#[test]
fn a_timeout_counts_from_when_the_hang_began() {
    let mut c = corr(IncidentConfig::default());
    // The watchdog fires ten minutes after the Xid, beyond the 5-minute window, but the
    // collective has been hanging since the Xid.
    let out = feed(&mut c, &[xid("j", "node-05", 0), timeout("j", 1, 601)]);
    assert!(out.iter().all(|e| e.status != Status::Resolved));
    assert_eq!(c.stats().opened, 1);
}

#[test]
fn restart_markers_resolve_and_recurrences_loop() {
    let mut c = corr(IncidentConfig::default());
    let marker = event("TORCHELASTIC_RESTART", Role::Info, "context")
        .domain("context")
        .build();
    let root = || {
        event("PYTHON_KEY_ERROR", Role::Root, "script_error")
            .rank(0)
            .build()
    };
    let out = feed(&mut c, &[root(), marker.clone(), root(), marker, root()]);
    let opens: Vec<_> = out.iter().filter(|e| e.status == Status::Open).collect();
    assert_eq!(opens.len(), 3);
    assert_eq!(
        opens.iter().map(|e| e.recurrence).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    assert!(!opens[0].restart_loop && opens[1].restart_loop && opens[2].restart_loop);
    assert!(out
        .iter()
        .filter(|e| e.status == Status::Resolved)
        .all(|e| e.resolution == Some(Resolution::Restart)));
    assert_eq!(c.stats().restart_loops, 2);
}

#[test]
fn a_host_failing_several_jobs_gets_a_rising_score() {
    let mut c = corr(IncidentConfig::default());
    let out = feed(
        &mut c,
        &[
            xid("a", "node-05", 0),
            xid("b", "node-05", 1),
            xid("c", "node-05", 2),
            xid("d", "node-09", 3),
        ],
    );
    let scores: Vec<_> = out
        .iter()
        .filter(|e| e.status == Status::Open)
        .map(|e| (e.blamed_host.clone(), e.bad_node_score))
        .collect();
    assert_eq!(scores[0].1, Some(1.0));
    assert!(scores[1].1 > scores[0].1 && scores[2].1 > scores[1].1);
    assert_eq!(scores[3], (Some("node-09".to_string()), Some(1.0)));
    assert_eq!(c.fleet().score("node-05", c.now().unwrap_or(0)), Some(3.0));
}

#[test]
fn tickets_for_roots_at_once_and_for_cascades_after_n() {
    let cfg = IncidentConfig {
        ticket_min_matches: 5,
        ..IncidentConfig::default()
    };
    let mut c = corr(cfg.clone());
    let out = feed(&mut c, &[xid("j", "n", 0)]);
    assert_eq!(out[0].ticket.reason, Some(TicketReason::Root));

    let mut c = corr(cfg);
    let events: Vec<_> = (0..4).map(|r| timeout("k", r, 600)).collect();
    let out = feed(&mut c, &events);
    assert!(out.iter().all(|e| !e.ticket.raised));
    let out = feed(&mut c, &[timeout("k", 4, 600)]);
    assert_eq!(
        out.last().expect("ticketed").ticket.reason,
        Some(TicketReason::Threshold)
    );
    assert_eq!(c.stats().tickets, 1);
}

#[test]
fn a_big_cascade_speaks_in_powers_of_two() {
    let mut c = corr(IncidentConfig::default());
    let mut events = vec![xid("j", "node-05", 0)];
    events.extend((0..1024).map(|r| timeout("j", r, 601)));
    let out = feed(&mut c, &events);
    assert!(out.len() < 40, "{} events", out.len());
    let mut out = Vec::new();
    c.flush(&mut out);
    let last = out.last().expect("final state");
    assert_eq!(last.cascades.matches, 1024);
    assert_eq!(last.cascades.ranks, 1024);
    assert_eq!(last.counts.matches, 1025);
}

#[test]
fn the_silent_rank_of_a_job_is_the_culprit() {
    let mut c = corr(IncidentConfig::default());
    let mut events = vec![xid("j", "node-02", 0)];
    events.extend((0..32).filter(|r| *r != 17).map(|r| timeout("j", r, 601)));
    feed(&mut c, &events);
    let last = c.current("j").expect("open");
    assert_eq!(last.culprit.method, CulpritMethod::RootHost);
    assert_eq!(last.culprit.rank_method, Some(CulpritMethod::MissingRanks));
    assert_eq!(last.culprit.ranks, vec![17]);
    assert_eq!(last.culprit.hosts, vec!["node-02".to_string()]);
}

#[test]
fn the_traceback_before_the_root_is_its_context() {
    let mut c = corr(IncidentConfig::default());
    let ctx = |code: &str, line: &str| {
        event(code, Role::Info, "context")
            .domain("context")
            .rank(3)
            .line(line)
            .build()
    };
    let events = vec![
        ctx("CONTEXT_PY_TRACEBACK", "Traceback (most recent call last):"),
        ctx(
            "CONTEXT_PY_FRAME",
            "  File \"train.py\", line 41, in <module>",
        ),
        ctx(
            "CONTEXT_PY_FRAME",
            "  File \"model.py\", line 7, in forward",
        ),
        event("CUDA_OOM", Role::Root, "device_oom")
            .rank(3)
            .line("torch.OutOfMemoryError: CUDA out of memory.")
            .build(),
        ctx(
            "CONTEXT_CPP_RAISED_FROM",
            "Exception raised from malloc at x.cpp:1",
        ),
        // Another rank's traceback stays out.
        event("CONTEXT_PY_TRACEBACK", Role::Info, "context")
            .domain("context")
            .rank(4)
            .line("Traceback (most recent call last):")
            .build(),
    ];
    let out = feed(&mut c, &events);
    assert_eq!(out.len(), 1, "context lines do not emit by themselves");
    let lines: Vec<String> = out[0]
        .context
        .lines
        .iter()
        .map(|l| l.text.clone())
        .collect();
    assert_eq!(lines.len(), 4);
    assert_eq!(lines[0], "Traceback (most recent call last):");
    assert_eq!(lines[3], "torch.OutOfMemoryError: CUDA out of memory.");
    assert_eq!(out[0].counts.matches, 1, "block lines are not counted");
    let mut out = Vec::new();
    c.flush(&mut out);
    assert_eq!(out[0].context.lines.len(), 5);
    assert_eq!(
        out[0].context.lines[4].text,
        "Exception raised from malloc at x.cpp:1"
    );
}

#[test]
fn open_incidents_are_capped_least_recently_updated_first() {
    let cfg = IncidentConfig {
        max_open_incidents: 2,
        max_jobs: 3,
        ..IncidentConfig::default()
    };
    let mut c = corr(cfg);
    let mut out = feed(
        &mut c,
        &[xid("a", "h", 0), xid("b", "h", 1), xid("a", "h", 2)],
    );
    out.clear();
    c.observe(&xid("c", "h", 3), &mut out);
    let evicted: Vec<_> = out
        .iter()
        .filter(|e| e.resolution == Some(Resolution::Evicted))
        .collect();
    assert_eq!(evicted.len(), 1);
    assert_eq!(evicted[0].job_id, "b", "a was updated after b");
    assert_eq!(c.open_incidents(), 2);
    assert_eq!(c.stats().evicted_incidents, 1);
}

#[test]
fn exactly_max_open_incidents_evict_nothing_one_more_evicts_one() {
    let cfg = IncidentConfig {
        max_open_incidents: 3,
        max_jobs: 10,
        ..IncidentConfig::default()
    };
    let mut c = corr(cfg);
    let out = feed(
        &mut c,
        &[xid("a", "h", 0), xid("b", "h", 1), xid("c", "h", 2)],
    );
    assert!(out.iter().all(|e| e.resolution.is_none()), "{out:?}");
    assert_eq!((c.open_incidents(), c.stats().evicted_incidents), (3, 0));
    let out = feed(&mut c, &[xid("d", "h", 3)]);
    let evicted: Vec<&str> = out
        .iter()
        .filter(|e| e.resolution == Some(Resolution::Evicted))
        .map(|e| e.job_id.as_str())
        .collect();
    assert_eq!(evicted, ["a"]);
    assert_eq!((c.open_incidents(), c.stats().evicted_incidents), (3, 1));
}

/// A million single-match jobs through a correlator capped at 10,000: no map grows past
/// its cap. (A smaller stream in debug builds keeps `cargo test` quick.)
#[test]
fn state_stays_flat_over_a_million_jobs() {
    let n: u64 = if cfg!(debug_assertions) {
        100_000
    } else {
        1_000_000
    };
    let cap = 10_000;
    let cfg = IncidentConfig {
        max_open_incidents: cap,
        max_jobs: cap,
        max_hosts: cap,
        ..IncidentConfig::default()
    };
    let mut c = corr(cfg);
    let mut e = xid("x", "h", 0);
    let mut out = Vec::new();
    let mut peak = Sizes::default();
    for i in 0..n {
        e.job_id = format!("job-{i}");
        e.host = Some(format!("host-{}", i % 50_000));
        c.observe(&e, &mut out);
        out.clear();
        if i % 997 == 0 || i + 1 == n {
            let s = c.sizes();
            peak.jobs = peak.jobs.max(s.jobs).max(s.job_lru);
            peak.open_incidents = peak.open_incidents.max(s.open_incidents).max(s.open_index);
            peak.hosts = peak.hosts.max(s.hosts).max(s.host_lru);
        }
    }
    assert!(peak.jobs <= cap && peak.open_incidents <= cap && peak.hosts <= cap);
    assert_eq!(c.open_incidents(), cap);
    assert_eq!(c.stats().opened, n);
    assert_eq!(c.stats().evicted_incidents, n - cap as u64);
}

/// A job line logged before the one that opened the incident, arriving late, moves the
/// fingerprint (the content key) but not the id.
#[test]
fn a_late_earlier_line_moves_the_fingerprint_but_not_the_id() {
    let mut c = corr(IncidentConfig::default());
    let out = feed(&mut c, &[timeout("j", 1, 600), timeout("j", 0, 500)]);
    let (first, last) = (&out[0], out.last().expect("a change"));
    assert_eq!(
        first.id, first.fingerprint,
        "it opens with its fingerprint as id"
    );
    assert_ne!(last.fingerprint, first.fingerprint, "the anchor moved");
    assert!(out.iter().all(|e| e.id == first.id), "{out:?}");
}

/// A correlator that adopted an open incident of a previous one (read back from the incidents
/// topic) gives the job's next incident within that incident's log time its id, whatever line
/// opens it now; outside that time, or for another job, a new id.
#[test]
fn an_adopted_id_is_taken_by_the_same_failure_only() {
    let (from, to) = (
        crate::time::parse(&ts(500)).and_then(|t| t.millis()),
        crate::time::parse(&ts(600)).and_then(|t| t.millis()),
    );
    let mut c = corr(IncidentConfig::default());
    c.adopt("j", "fp2:00000000000000aa", (from, to), &[]);
    c.adopt("k", "fp2:00000000000000bb", (from, to), &[]);
    // Job j's failure, opened this time by its other rank's line.
    let j = feed(&mut c, &[timeout("j", 3, 610)]);
    assert_eq!(j[0].id, "fp2:00000000000000aa");
    assert_ne!(j[0].fingerprint, j[0].id);
    // Job k's next line is hours later: another failure, a new id.
    let k = feed(&mut c, &[timeout("k", 0, 600 + 6 * 3600)]);
    let k_open = k.iter().find(|e| e.job_id == "k").expect("k opens");
    assert_eq!(k_open.id, k_open.fingerprint);
    // Another job never takes it.
    let other = feed(&mut c, &[timeout("z", 0, 600 + 6 * 3600)]);
    let z = other.iter().find(|e| e.job_id == "z").expect("z opens");
    assert_ne!(z.id, "fp2:00000000000000bb");
}

/// A correlator that takes a job over reads a resolved failure's records again from its first
/// match, not the job's earlier lines that said where its ranks ran. The hosts the incidents
/// topic gave with the adopted incident place the job there: a node's late Xid on a host none
/// of the failure's lines named revises it under its id; without them it does not.
#[test]
fn an_adopted_incidents_hosts_let_a_late_node_event_revise_it() {
    let run = |hosts: &[String]| {
        let mut c = corr(IncidentConfig::default());
        let span = (
            crate::time::parse(&ts(600)).and_then(|t| t.millis()),
            crate::time::parse(&ts(601)).and_then(|t| t.millis()),
        );
        c.adopt("j", "fp2:00000000000000aa", span, hosts);
        // The failure read again (ranks 1 and 2 on node-00), resolved quiet.
        let mut out = feed(&mut c, &[timeout("j", 1, 600), timeout("j", 2, 601)]);
        out.extend(feed(&mut c, &[timeout("other", 0, 600 + 40 * 60)]));
        assert!(out
            .iter()
            .any(|e| e.id == "fp2:00000000000000aa" && e.status == Status::Resolved));
        // node-07 (rank 56, which died silently) logs its Xid late.
        let late = feed(&mut c, &[node_xid("node-07", 0)]);
        late.iter()
            .filter(|e| e.id == "fp2:00000000000000aa")
            .map(|e| (e.status, e.root.error_code.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        run(&["node-00".to_string(), "node-07".to_string()]),
        [
            (Status::Updated, "XID_79".to_string()),
            (Status::Resolved, "XID_79".to_string())
        ]
    );
    assert_eq!(run(&[]), [], "without the hosts, the Xid is not the job's");
}

/// A node's Xid as its kernel log reports it: no job, the host's.
fn node_xid(host: &str, sec: i64) -> MatchEvent {
    let mut e = xid(&format!("node:{host}"), host, sec);
    e.scope = Scope::Node;
    e
}

#[test]
fn late_lines_revise_the_failure_they_belong_to_not_a_later_one() {
    let mut c = corr(IncidentConfig::default());
    // Failure A: NCCL timeouts at 10:10 (10-minute timeout: the failure began at 10:00), on
    // node-00's ranks; resolved quiet when the clock moves 40 minutes on.
    let out = feed(&mut c, &[timeout("j", 1, 600), timeout("j", 2, 601)]);
    let a = out[0].id.clone();
    assert_eq!(out[0].root.error_code, "NCCL_TIMEOUT");
    let out = feed(&mut c, &[timeout("other", 0, 600 + 40 * 60)]);
    assert!(out
        .iter()
        .any(|e| e.id == a && e.status == Status::Resolved));
    // Failure B of the same job, hours later.
    let out = feed(&mut c, &[timeout("j", 3, 6 * 3600)]);
    let b = out
        .iter()
        .find(|e| e.job_id == "j" && e.status == Status::Open)
        .expect("B opens")
        .id
        .clone();
    assert_ne!(a, b);

    // A's Xid (10:00, node-00's kernel log) and the job's own ECC line arrive now: they revise
    // A under its id, its root re-elected, then resolved again; B is left alone.
    let ecc = event("CUDA_ECC_UNCORRECTABLE", Role::Root, "gpu_memory_ecc")
        .job("j")
        .rank(1)
        .host("node-00")
        .ts(&ts(1))
        .build();
    let out = feed(&mut c, &[node_xid("node-00", 0), ecc]);
    assert!(out.iter().all(|e| e.id == a), "{out:#?}");
    let statuses: Vec<Status> = out.iter().map(|e| e.status).collect();
    assert_eq!(
        statuses,
        [
            Status::Updated,
            Status::Resolved,
            Status::Updated,
            Status::Resolved
        ]
    );
    assert_eq!(out[0].root.error_code, "XID_79", "the late Xid is A's root");
    assert_eq!(out[3].first_seen.as_deref(), Some(ts(0).as_str()));
    assert_eq!(out[3].last_seen.as_deref(), Some(ts(601).as_str()));
    let now = c.current("j").expect("B is open");
    assert_eq!(
        (now.id.as_str(), now.root.error_code.as_str()),
        (b.as_str(), "NCCL_TIMEOUT")
    );

    // A line of a failure before A, in no window: an incident of its own, B still untouched.
    let out = feed(&mut c, &[timeout("j", 4, -3 * 3600)]);
    let statuses: Vec<Status> = out.iter().map(|e| e.status).collect();
    assert_eq!(statuses, [Status::Open, Status::Resolved]);
    assert!(out.iter().all(|e| e.id != a && e.id != b));
    assert_eq!(c.open_incidents(), 1);
}

#[test]
fn a_late_node_event_of_a_restarted_jobs_old_host_revises_the_failure_the_restart_ended() {
    let mut c = corr(IncidentConfig::default());
    // Attempt 1 on node-00 (ranks 0-7) times out at 10:10; the job restarts at 10:20 on
    // node-01 (ranks 8-15), whose lines keep coming.
    let out = feed(&mut c, &[timeout("j", 1, 600), timeout("j", 2, 601)]);
    let a = out[0].id.clone();
    let marker = event("TORCHELASTIC_RESTART", Role::Info, "context")
        .domain("context")
        .job("j")
        .ts(&ts(1200))
        .build();
    let progress = |rank: u32, sec: i64| {
        event("TRAINING_PROGRESS", Role::Info, "progress")
            .job("j")
            .rank(rank)
            .host(&format!("node-{:02}", rank / 8))
            .ts(&ts(sec))
            .build()
    };
    let out = feed(&mut c, &[marker, progress(8, 1300), progress(8, 3 * 3600)]);
    assert!(out
        .iter()
        .any(|e| e.id == a && e.status == Status::Resolved));
    // node-00's Xid of 10:00 arrives hours late: it is attempt 1's root, under its id.
    let out = feed(&mut c, &[node_xid("node-00", 0)]);
    assert!(!out.is_empty() && out.iter().all(|e| e.id == a), "{out:#?}");
    assert_eq!(out[0].root.error_code, "XID_79");
    assert_eq!(out[0].root.host.as_deref(), Some("node-00"));
    // An Xid of node-00 after the restart is not the job's: node-00 left it.
    let out = feed(&mut c, &[node_xid("node-00", 2 * 3600)]);
    assert!(out.iter().all(|e| e.job_id != "j"), "{out:#?}");
}

/// A correlator whose expiry is held at 10:00 of the tests' day, as the service holds it at its
/// slowest input partition (node-00's), when `held`.
fn corr_held_at_ten(held: bool) -> Correlator {
    let mut c = corr(IncidentConfig::default());
    if held {
        c.hold_expiry(Some(1_714_564_800_000));
    }
    c
}

#[test]
fn an_early_node_event_waits_for_the_job_lines_of_a_lagging_lane_while_expiry_is_held() {
    // node-00's Xid at 10:00 is read first; another partition is already 6 hours ahead; job
    // j's timeouts on node-00 (10:10) come last, from the lagging partition.
    let run = |held: bool| {
        let mut c = corr_held_at_ten(held);
        let mut out = feed(
            &mut c,
            &[node_xid("node-00", 0), timeout("other", 8, 6 * 3600)],
        );
        out.extend(feed(&mut c, &[timeout("j", 1, 600), timeout("j", 2, 601)]));
        out
    };
    let held = run(true);
    assert!(held.iter().all(|e| e.job_id != "node:node-00"), "{held:#?}");
    let j = held
        .iter()
        .rfind(|e| e.job_id == "j")
        .expect("j's incident");
    assert_eq!(j.root.error_code, "XID_79");
    assert_eq!(j.root.host.as_deref(), Some("node-00"));
    // On the latest time alone, the Xid became a node incident before j's lines arrived.
    let unheld = run(false);
    assert!(
        unheld.iter().any(|e| e.job_id == "node:node-00"),
        "{unheld:#?}"
    );
}

#[test]
fn a_job_that_restarted_many_times_before_its_node_log_caught_up_keeps_each_failure() {
    // Job j fails on node-00 eight times, three hours apart, each attempt ended by torchelastic's
    // restart marker; node-00's kernel log lags and its Xid of the first failure (10:00) is
    // read last.
    let run = |held: bool| {
        let mut c = corr_held_at_ten(held);
        let mut ids = Vec::new();
        for k in 0..8 {
            let base = k * 3 * 3600;
            let out = feed(&mut c, &[timeout("j", 1, base + 600)]);
            ids.push(out[0].id.clone());
            let marker = event("TORCHELASTIC_RESTART", Role::Info, "context")
                .domain("context")
                .job("j")
                .ts(&ts(base + 1200))
                .build();
            feed(&mut c, &[marker]);
        }
        let out = feed(&mut c, &[node_xid("node-00", 0)]);
        (ids, out)
    };
    let (ids, out) = run(true);
    assert!(!out.is_empty(), "the Xid is read");
    assert!(out.iter().all(|e| e.id == ids[0]), "{out:#?}");
    assert_eq!(out[0].root.error_code, "XID_79");
    // Without the hold, the first failure's window is long behind the clock: only the last
    // few failures are kept, and the Xid is a failure of its own.
    let (ids, out) = run(false);
    assert!(out.iter().all(|e| !ids.contains(&e.id)), "{out:#?}");
}
