//! Secret redaction end to end: the secrets corpus (`tests/fixtures/secrets/`) through `scan`,
//! with redaction on (the default) and off.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use faultline::enrich::MatchEvent;
use faultline::scan::ScanOptions;
use faultline::sink::stdout::{Format, StdoutSink};
use faultline::source::file;
use serde_json::Value;

use crate::support::{hyperscan, repo, scan_paths};

fn corpus() -> PathBuf {
    repo().join("tests/fixtures/secrets")
}

/// `(kind, secret)` pairs of `SECRETS.txt`.
fn secrets() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(corpus().join("SECRETS.txt")).expect("SECRETS.txt");
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let (kind, secret) = l.split_once('\t').expect("kind<TAB>secret");
            (kind.to_string(), secret.to_string())
        })
        .collect()
}

/// Everything `scan` prints for the secrets corpus, in both formats.
fn printed(opts: &ScanOptions) -> (Vec<MatchEvent>, String) {
    printed_in(&corpus(), opts)
}

/// Everything `scan` prints for `dir`, in both formats.
pub(crate) fn printed_in(dir: &Path, opts: &ScanOptions) -> (Vec<MatchEvent>, String) {
    let (events, json) = scan_paths(&hyperscan(), &[dir], opts);
    let (inputs, _) = file::expand(&[dir.display().to_string()], None);
    let mut text = StdoutSink::new(Vec::new(), Format::Text);
    faultline::scan::scan_inputs(&hyperscan(), &inputs, opts, &mut text, &mut |_| {})
        .expect("scan runs");
    let all = String::from_utf8(json).expect("utf8")
        + &String::from_utf8(text.into_inner()).expect("utf8");
    (events, all)
}

pub(crate) fn redaction_off() -> ScanOptions {
    ScanOptions {
        redactor: None,
        ..ScanOptions::default()
    }
}

#[test]
fn the_manifest_lists_secrets_the_corpus_holds() {
    let mut input = String::new();
    for entry in std::fs::read_dir(corpus()).expect("dir") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "log" || e == "jsonl") {
            input += &std::fs::read_to_string(&path).expect("read");
        }
    }
    let secrets = secrets();
    assert!(secrets.len() >= 20);
    for (_, secret) in &secrets {
        assert!(
            input.contains(secret.as_str()),
            "{secret} is not in the corpus"
        );
    }
    let kinds: BTreeSet<&str> = secrets.iter().map(|(k, _)| k.as_str()).collect();
    for kind in [
        "hf_token",
        "aws_access_key_id",
        "aws_secret_access_key",
        "github_token",
        "wandb_api_key",
        "bearer_token",
        "authorization",
        "url_password",
        "cli_secret",
        "env_secret",
        "password",
        "secret_field",
        "openai_api_key",
        "anthropic_api_key",
        "slack_token",
        "jwt",
        "private_key",
    ] {
        assert!(kinds.contains(kind), "no {kind} in SECRETS.txt");
    }
}

#[test]
fn without_redaction_every_secret_reaches_the_output() {
    // Proves the corpus puts each secret on a line that matches a KB entry, so the next test
    // could fail.
    let (_, printed) = printed(&redaction_off());
    for (kind, secret) in secrets() {
        assert!(
            printed.contains(&secret),
            "{kind} {secret} is not on a matching line"
        );
    }
}

#[test]
fn no_secret_leaves_faultline() {
    let (events, printed) = printed(&ScanOptions::default());
    assert!(events.len() >= 25, "the corpus matches: {}", events.len());
    for (kind, secret) in secrets() {
        assert!(!printed.contains(&secret), "{kind} {secret} was printed");
        assert!(
            printed.contains(&format!("[REDACTED:{kind}]")),
            "no [REDACTED:{kind}] marker"
        );
    }
}

#[test]
fn the_parallel_scan_redacts_too() {
    let opts = ScanOptions {
        threads: 2,
        chunk_bytes: 4096,
        max_line_bytes: 4096,
        ..ScanOptions::default()
    };
    let (_, json) = scan_paths(&hyperscan(), &[&corpus()], &opts);
    let json = String::from_utf8(json).expect("utf8");
    assert!(json.contains("[REDACTED:"));
    for (kind, secret) in secrets() {
        assert!(!json.contains(&secret), "{kind} {secret} was printed");
    }
}

/// Everything but the text: where, which entry, and what was read from the line.
pub(crate) fn diagnosis_view(events: &[MatchEvent]) -> Vec<Value> {
    events
        .iter()
        .map(|e| {
            serde_json::json!({
                "source": e.source.to_string(), "kb_id": e.kb_id, "error_code": e.error_code,
                "role": e.role, "severity": e.severity, "job_id": e.job_id, "rank": e.rank,
                "host": e.host, "pod": e.pod, "timestamp": e.timestamp,
                "capture_names": e.captures.keys().collect::<Vec<_>>(),
                "diagnosis": e.diagnosis.title, "truncated": e.truncated,
            })
        })
        .collect()
}

#[test]
fn redaction_changes_no_diagnosis() {
    let (on, _) = printed(&ScanOptions::default());
    let (off, _) = printed(&redaction_off());
    assert_eq!(diagnosis_view(&on), diagnosis_view(&off));
    // Captures that held no secret are unchanged (sizes, devices, ranks...).
    let mut unchanged = 0;
    for (a, b) in on.iter().zip(&off) {
        for (name, value) in &a.captures {
            if !value.contains("[REDACTED:") {
                assert_eq!(Some(value), b.captures.get(name), "{name} at {}", a.source);
                unchanged += 1;
            }
        }
        // The line keeps its text around the markers: the same start up to the first marker.
        let head = a.line.split("[REDACTED:").next().unwrap_or_default();
        assert!(b.line.starts_with(head), "{:?} vs {:?}", a.line, b.line);
    }
    assert!(unchanged > 10);
    let oom = on
        .iter()
        .find(|e| e.error_code == "CUDA_OOM")
        .expect("the OOM line next to a token");
    assert_eq!(
        oom.captures.get("size").map(String::as_str),
        Some("2.50 GiB")
    );
    assert!(oom.line.contains("--hf-token [REDACTED:"), "{}", oom.line);
}

fn faultline(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_faultline"))
        .current_dir(repo())
        .env_remove("FAULTLINE_KB")
        .args(args)
        .output()
        .expect("runs");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf8")
}

#[test]
fn the_cli_redacts_by_default_and_takes_extra_rules() {
    let path = Path::new("tests/fixtures/secrets/env-dump-slurm.log");
    let path = path.to_str().expect("utf8");
    let default = faultline(&["scan", "--no-summary", path]);
    assert!(!default.contains("Pg-Sup3r-S3cret"));
    let off = faultline(&["scan", "--no-summary", "--no-redact", path]);
    assert!(off.contains("Pg-Sup3r-S3cret"));
    // An extra rule for something no built-in rule knows: the slurm step id.
    let extra = faultline(&[
        "scan",
        "--no-summary",
        "--redact",
        r"step_id=STEP (?P<secret>\d+\.\d+)",
        path,
    ]);
    assert!(extra.contains("STEP [REDACTED:step_id]"), "{extra}");
    assert!(!extra.contains("Pg-Sup3r-S3cret"));
}

#[test]
fn the_cli_refuses_a_bad_extra_rule() {
    let out = Command::new(env!("CARGO_BIN_EXE_faultline"))
        .current_dir(repo())
        .args(["scan", "--redact", "x=a*", "Cargo.toml"])
        .output()
        .expect("runs");
    assert_ne!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("redaction rule `x`"), "{stderr}");
}

/// Everything downstream of the events that quotes log text: the incident objects `scan` prints
/// (root line, context lines), both webhook payloads built from them, and the span attributes.
fn downstream_text(opts: &ScanOptions) -> String {
    downstream_text_in(&corpus(), opts)
}

/// [`downstream_text`] for `dir`.
pub(crate) fn downstream_text_in(dir: &Path, opts: &ScanOptions) -> String {
    use faultline::incident::{Correlator, IncidentConfig};
    use faultline::sink::webhook::{self, PayloadFormat, WebhookConfig};

    let opts = ScanOptions {
        incidents: Some(IncidentConfig::default()),
        ..opts.clone()
    };
    let (events, printed) = scan_paths(&hyperscan(), &[dir], &opts);
    let mut text = String::from_utf8(printed).expect("utf8");
    let mut correlator = Correlator::new(IncidentConfig::default()).expect("config");
    let mut incidents = Vec::new();
    for event in &events {
        correlator.observe(event, &mut incidents);
        text += &format!("{:?}\n", faultline::telemetry::attributes(event));
    }
    correlator.resolve_all(&mut incidents);
    assert!(!incidents.is_empty(), "the corpus opens incidents");
    let alertmanager = WebhookConfig::new("http://127.0.0.1:9/", PayloadFormat::Alertmanager);
    for incident in &incidents {
        let key = webhook::idempotency_key(incident);
        text += &webhook::generic_payload(incident, &key)
            .expect("payload")
            .to_string();
        text += &webhook::alertmanager_payload(incident, &alertmanager).to_string();
    }
    text
}

#[test]
fn incidents_webhook_payloads_and_spans_carry_no_secret() {
    let off = downstream_text(&redaction_off());
    let leaked_without = secrets()
        .iter()
        .filter(|(_, s)| off.contains(s.as_str()))
        .count();
    assert!(leaked_without >= 10, "these paths quote log lines");
    let on = downstream_text(&ScanOptions::default());
    assert!(on.contains("[REDACTED:"));
    for (kind, secret) in secrets() {
        assert!(
            !on.contains(&secret),
            "{kind} {secret} reached an incident, ticket or span"
        );
    }
}
