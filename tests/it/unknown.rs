//! Unknown failures in `scan` (issue 16): `type: "unknown"` events for the error lines no KB
//! entry knows, their rate limits, stable template ids, redaction, and the templates an
//! incident without a known root lists. The running pipeline's side is in
//! `kafka/unknown.rs`.

use std::process::Command;

use serde_json::Value;

use crate::support::repo;

/// A job whose checkpoint plugin fails (lines no entry knows, one with a token) ten minutes
/// before two ranks time out in an all-reduce (cascades: the incident's root is unknown).
pub(crate) const FIXTURE: &str = "tests/fixtures/unknown/ckpt-plugin-then-nccl-timeout.jsonl";

/// The fixture's secret; it must never be printed.
pub(crate) const SECRET: &str = "hf_abcdefghijklmnopqrstuvwxyz0123456789";

fn scan(args: &[&str]) -> String {
    crate::support::faultline_stdout(["scan"].iter().chain(args))
}

fn objects(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect()
}

fn of_type<'a>(objects: &'a [Value], kind: &str) -> Vec<&'a Value> {
    objects.iter().filter(|o| o["type"] == kind).collect()
}

#[test]
fn scan_reports_unknown_events_and_the_root_unknown_incident_lists_their_templates() {
    let stdout = scan(&["--format", "json", FIXTURE]);
    assert!(!stdout.contains(SECRET), "the token is redacted everywhere");
    let all = objects(&stdout);
    let unknown = of_type(&all, "unknown");
    assert_eq!(unknown.len(), 2, "one event per new template: {unknown:#?}");
    let write = unknown[0];
    assert_eq!(write["schema_version"], 1);
    assert_eq!(
        write["template"],
        "ERROR ckptfs: write of shard <NUM> to <PATH> failed: remote I/O error (code <NUM>)"
    );
    assert_eq!(write["change"], "new");
    assert_eq!(write["count"], 1);
    assert_eq!(write["job_id"], "ckpt-sft-12");
    assert_eq!(write["rank"], 3);
    assert_eq!(write["host"], "gpu-node-01");
    assert_eq!(write["cluster"], "eu-1");
    assert_eq!(write["timestamp"], "2024-11-29T10:00:05.000Z");
    assert_eq!(write["source"]["line"], 2);
    assert!(write["example"]
        .as_str()
        .expect("example")
        .contains("shard 17"));
    let id = write["template_id"].as_str().expect("id");
    assert!(
        id.len() == 16 && id.bytes().all(|b| b.is_ascii_hexdigit()),
        "{id}"
    );
    let token = unknown[1];
    assert!(token["example"]
        .as_str()
        .expect("example")
        .contains("[REDACTED:"));

    // Every unknown line stays out of the matches: two timeouts, nothing else.
    let matches = of_type(&all, "match");
    assert_eq!(matches.len(), 2);
    assert!(matches.iter().all(|m| m["error_code"] == "NCCL_TIMEOUT"));

    // The incident: cascades only, so its root is unknown; it lists both templates, seen
    // before the hang began (ten minutes before the timeouts), newest first.
    let incidents = of_type(&all, "incident");
    let last = incidents.last().expect("an incident");
    assert_eq!(last["root_known"], false);
    let listed = last["unrecognised"]
        .as_array()
        .expect("unrecognised listed");
    let ids: Vec<&str> = listed
        .iter()
        .map(|u| u["template_id"].as_str().expect("id"))
        .collect();
    assert_eq!(
        ids,
        [
            write["template_id"].as_str().expect("id"),
            token["template_id"].as_str().expect("id")
        ],
        "newest first: the write template's last line is the latest"
    );
    assert_eq!(
        listed[0]["count"],
        4 - 1,
        "three lines of the write template"
    );
    assert_eq!(listed[0]["last_seen"], "2024-11-29T10:00:08.000Z");
}

#[test]
fn template_ids_are_stable_across_runs_and_agree_with_faultline_templates() {
    let ids = |stdout: &str| -> Vec<String> {
        of_type(&objects(stdout), "unknown")
            .iter()
            .map(|u| u["template_id"].as_str().expect("id").to_string())
            .collect()
    };
    let first = ids(&scan(&["--format", "json", FIXTURE]));
    let again = ids(&scan(&["--format", "json", "--threads", "4", FIXTURE]));
    assert_eq!(first, again);
    let out = Command::new(env!("CARGO_BIN_EXE_faultline"))
        .current_dir(repo())
        .env_remove("FAULTLINE_KB")
        .args(["templates", "--format", "json", FIXTURE])
        .output()
        .expect("runs");
    assert!(out.status.success());
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("hf_abcdefghij"),
        "`faultline templates` redacts template texts too"
    );
    let mut mined: Vec<String> = objects(&String::from_utf8(out.stdout).expect("utf8"))
        .iter()
        .map(|t| t["template_id"].as_str().expect("id").to_string())
        .collect();
    mined.sort();
    let mut sorted = first.clone();
    sorted.sort();
    assert_eq!(sorted, mined, "the same ids as `faultline templates`");
}

#[test]
fn text_output_lists_unrecognised_errors_and_no_unknown_turns_it_all_off() {
    let text = scan(&["--format", "text", FIXTURE]);
    assert!(!text.contains(SECRET));
    assert!(
        text.contains("unrecognised errors near the failure: 3x ERROR ckptfs: write of shard"),
        "{text}"
    );
    assert!(
        text.contains("== unrecognised: 4 error line(s) of job ckpt-sft-12"),
        "{text}"
    );

    let off = scan(&["--format", "json", "--no-unknown", FIXTURE]);
    let all = objects(&off);
    assert!(of_type(&all, "unknown").is_empty());
    let incidents = of_type(&all, "incident");
    assert!(incidents.last().expect("an incident")["unrecognised"].is_null());
    let text = scan(&["--format", "text", "--no-unknown", FIXTURE]);
    assert!(!text.contains("unrecognised"), "{text}");
}

/// A line of job `job` at `sec` seconds past 10:00.
fn line(job: &str, sec: u64, message: &str) -> String {
    serde_json::json!({
        "message": message,
        "timestamp": format!("2024-11-29T{:02}:{:02}:{:02}Z", 10 + sec / 3600, sec / 60 % 60, sec % 60),
        "job_id": job,
        "rank": 0,
    })
    .to_string()
}

#[test]
fn events_are_rate_limited_per_template_and_per_job_on_log_time() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("noisy.jsonl");
    let mut lines = Vec::new();
    // One template, a line every 2 s for ten minutes: `new`, then one `recurring` per minute.
    for i in 0..300u64 {
        lines.push(line(
            "steady",
            i * 2,
            &format!(
                "ERROR dataloader worker {i} failed to fetch sample {}",
                i * 7
            ),
        ));
    }
    // Another job: 30 new templates in one minute (each its own token count), 10 reported.
    for i in 0..30u64 {
        let words = "x ".repeat(i as usize + 1);
        lines.push(line("burst", 700 + i, &format!("ERROR {words}failed")));
    }
    std::fs::write(&path, lines.join("\n") + "\n").expect("write");
    let path = path.to_str().expect("utf8 path");
    let all = objects(&scan(&["--format", "json", path]));
    let unknown = of_type(&all, "unknown");
    let steady: Vec<&&Value> = unknown.iter().filter(|u| u["job_id"] == "steady").collect();
    let changes: Vec<&str> = steady
        .iter()
        .map(|u| u["change"].as_str().expect("change"))
        .collect();
    assert_eq!(changes.len(), 10, "{changes:?}");
    assert_eq!(changes[0], "new");
    assert!(
        changes[1..].iter().all(|c| *c == "recurring"),
        "{changes:?}"
    );
    let counts: Vec<u64> = steady
        .iter()
        .map(|u| u["count"].as_u64().expect("count"))
        .collect();
    assert_eq!(counts[0], 1);
    assert_eq!(
        counts[1], 31,
        "the lines in between are counted: {counts:?}"
    );
    assert!(counts.windows(2).all(|w| w[1] == w[0] + 30), "{counts:?}");
    let ids: std::collections::BTreeSet<&str> = steady
        .iter()
        .map(|u| u["template_id"].as_str().expect("id"))
        .collect();
    assert_eq!(ids.len(), 1, "one template");

    let burst = unknown.iter().filter(|u| u["job_id"] == "burst").count();
    assert_eq!(
        burst, 10,
        "at most unknown.max_events_per_minute per job per minute"
    );
}
