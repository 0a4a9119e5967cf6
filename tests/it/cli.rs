//! The `faultline` binary as users run it: exit codes, stdin, unreadable paths, help texts.

use std::io::Write;
use std::process::{Command, Stdio};

use crate::support::repo;

fn faultline() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_faultline"));
    cmd.current_dir(repo()).env_remove("FAULTLINE_KB");
    cmd
}

#[test]
fn an_unreadable_path_is_reported_and_the_others_still_scanned() {
    let out = faultline()
        .args([
            "scan",
            "does/not/exist.log",
            "examples/bert-finetune-oom-77.log",
        ])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("does/not/exist.log"), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("\"error_code\":\"CUDA_OOM\""), "{stdout}");
}

#[test]
fn scan_exits_zero_whatever_it_finds() {
    let out = faultline()
        .args(["scan", "examples/"])
        .output()
        .expect("runs");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON lines"))
        .collect();
    assert!(lines.iter().any(|l| l["type"] == "match"));
    assert!(lines.iter().any(|l| l["type"] == "summary"));
    let healthy = faultline()
        .args(["scan", "--no-summary", "--no-unknown", "Cargo.toml"])
        .output()
        .expect("runs");
    assert_eq!(healthy.status.code(), Some(0));
    assert!(healthy.stdout.is_empty());
    // With unknown events on, a line that merely looks like an error ("a failure knowledge
    // base") may be reported as an unknown template, never as a match.
    let unknown = faultline()
        .args(["scan", "--no-summary", "Cargo.toml"])
        .output()
        .expect("runs");
    assert_eq!(unknown.status.code(), Some(0));
    for l in String::from_utf8_lossy(&unknown.stdout).lines() {
        let v: serde_json::Value = serde_json::from_str(l).expect("JSON lines");
        assert_eq!(v["type"], "unknown", "{l}");
    }
}

#[test]
fn stdin_is_scanned_with_the_given_job_id() {
    let mut child = faultline()
        .args(["scan", "--job-id", "j-9", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("runs");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"[rank4]: RuntimeError: CUDA error: an illegal memory access was encountered\n")
        .expect("write");
    let out = child.wait_with_output().expect("waits");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("\"job_id\":\"j-9\"") && text.contains("\"rank\":4"),
        "{text}"
    );
    assert!(text.contains("CUDA_ILLEGAL_ADDRESS"), "{text}");
}

#[test]
fn text_output_shows_control_and_bidi_characters_of_job_ids_and_hosts_visibly() {
    let line = serde_json::json!({
        "message": "[rank4]: RuntimeError: CUDA error: an illegal memory access was encountered",
        "job_id": "evil\u{1b}]0;pwned\u{7}\u{1b}[2J\u{0}\u{202e}gpj.exe",
        "host": "node\u{1b}[31m-7\u{9b}",
    })
    .to_string();
    for extra in [&["--matches"][..], &[][..]] {
        let mut child = faultline()
            .args(["scan", "--format", "text"])
            .args(extra)
            .arg("-")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("runs");
        let mut stdin = child.stdin.take().expect("stdin");
        writeln!(stdin, "{line}").expect("write");
        drop(stdin);
        let out = child.wait_with_output().expect("waits");
        let text = String::from_utf8(out.stdout).expect("utf8");
        assert!(text.contains("CUDA_ILLEGAL_ADDRESS"), "{text}");
        for raw in ['\u{1b}', '\u{0}', '\u{7}', '\u{202e}', '\u{9b}'] {
            assert!(!text.contains(raw), "raw {raw:?} printed: {text:?}");
        }
        assert!(text.contains("evil\u{241b}]0;pwned"), "{text}");
        assert!(text.contains("[U+202E]gpj.exe"), "{text}");
    }
}

#[test]
fn text_format_is_for_people() {
    let out = faultline()
        .args(["scan", "--format", "text", "examples/gpu-node-02.kern.log"])
        .output()
        .expect("runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("XID_79") && text.contains("why:") && text.contains("try:"),
        "{text}"
    );
}

#[test]
fn kb_commands_work_on_the_shipped_kb() {
    let check = faultline()
        .args(["kb", "check", "kb"])
        .output()
        .expect("runs");
    assert_eq!(
        check.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    let list = faultline()
        .args(["kb", "list", "--format", "json"])
        .output()
        .expect("runs");
    let entries: Vec<serde_json::Value> = serde_json::from_slice(&list.stdout).expect("JSON");
    assert!(entries.len() >= 100);
    let explain = faultline()
        .args([
            "kb",
            "explain",
            "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.",
        ])
        .output()
        .expect("runs");
    let text = String::from_utf8_lossy(&explain.stdout);
    assert!(
        text.contains("XID_79") && text.contains("gpu=0000:3b:00"),
        "{text}"
    );
}

#[test]
fn kb_check_fails_on_a_broken_kb() {
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::create_dir_all(dir.path().join("cuda")).expect("mkdir");
    std::fs::write(
        dir.path().join("cuda/x.toml"),
        "id = \"cuda/x\"\ntitel = \"typo\"\n",
    )
    .expect("write");
    let out = faultline()
        .args(["kb", "check"])
        .arg(dir.path())
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cuda/x.toml")
            && stderr.contains("entry cuda/x")
            && stderr.contains("titel"),
        "{stderr}"
    );
}

#[test]
fn kb_import_writes_an_entry_that_checks() {
    let dir = tempfile::tempdir().expect("tmp");
    let out = faultline()
        .args([
            "kb",
            "import",
            "tests/fixtures/seed/pytorch-nccl-timeout-allreduce.md",
            "tests/fixtures/deadends/two-entries.json",
            "--out",
        ])
        .arg(dir.path())
        .output()
        .expect("runs");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(dir
        .path()
        .join("pytorch/nccl-timeout-allreduce.toml")
        .exists());
    let again = faultline()
        .args([
            "kb",
            "import",
            "tests/fixtures/seed/pytorch-nccl-timeout-allreduce.md",
            "--out",
        ])
        .arg(dir.path())
        .output()
        .expect("runs");
    assert_eq!(
        again.status.code(),
        Some(1),
        "refuses to overwrite without --force"
    );
    let check = faultline()
        .args(["kb", "check"])
        .arg(dir.path())
        .output()
        .expect("runs");
    assert_eq!(
        check.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
}

#[test]
fn every_command_has_help_with_an_example() {
    for args in [
        vec!["--help"],
        vec!["scan", "--help"],
        vec!["kb", "check", "--help"],
        vec!["kb", "list", "--help"],
        vec!["kb", "import", "--help"],
        vec!["kb", "explain", "--help"],
        vec!["run", "--help"],
        vec!["bench", "incidents", "--help"],
    ] {
        let out = faultline().args(&args).output().expect("runs");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("Examples:") && text.contains("faultline "),
            "{args:?}: {text}"
        );
    }
}

/// A KB directory of one shipped entry under `root`, its second example replaced by `example`.
fn one_entry_kb(root: &std::path::Path, example: Option<&str>) -> std::path::PathBuf {
    let rel = "cuda/container-driver-not-detected.toml";
    let mut text = std::fs::read_to_string(repo().join("kb").join(rel)).expect("shipped entry");
    if let Some(example) = example {
        let second = "  \"WARNING: The NVIDIA Driver was not detected.\",\n";
        assert!(text.contains(second), "the entry's second example moved");
        text = text.replace(second, &format!("  {example:?},\n"));
    }
    let dir = root.join("kb");
    std::fs::create_dir_all(dir.join("cuda")).expect("mkdir");
    std::fs::write(dir.join(rel), text).expect("write entry");
    dir
}

/// How many passed checks `cache` remembers (`reload::checked_marker`'s files).
fn remembered_passes(cache: &std::path::Path) -> usize {
    std::fs::read_dir(cache).map_or(0, |d| {
        d.flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("kb-checked-"))
            .count()
    })
}

#[test]
fn run_refuses_a_kb_that_fails_its_check_done_in_a_child_and_names_the_example() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let kb = one_entry_kb(tmp.path(), Some("nothing this entry knows"));
    let config = tmp.path().join("faultline.toml");
    std::fs::write(
        &config,
        format!(
            "[kafka]\nbrokers = \"127.0.0.1:1\"\n[output]\ntopic = \"events\"\n[kb]\ndir = {:?}\n",
            kb.display().to_string()
        ),
    )
    .expect("config");
    let cache = tmp.path().join("cache");
    let out = faultline()
        .args(["run", "--topic", "logs", "--config"])
        .arg(&config)
        .env("FAULTLINE_CACHE_DIR", &cache)
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("fails `kb check` with 2 error(s)")
            && stderr.contains("field `examples[1]`: does not match its entry in regex")
            && stderr.contains("field `examples[1]`: does not match its entry in Hyperscan"),
        "{stderr}"
    );
    assert_eq!(
        remembered_passes(&cache),
        0,
        "a failed check is never remembered"
    );
}

#[test]
fn kb_check_remembers_a_pass_only_when_asked_and_only_a_pass() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cache = tmp.path().join("cache");
    let check = |dir: &std::path::Path, record: bool| {
        let mut cmd = faultline();
        cmd.args(["kb", "check"]).env("FAULTLINE_CACHE_DIR", &cache);
        if record {
            cmd.arg("--record-pass");
        }
        cmd.arg(dir).output().expect("runs").status.code()
    };
    let good = one_entry_kb(&tmp.path().join("good"), None);
    let bad = one_entry_kb(&tmp.path().join("bad"), Some("nothing this entry knows"));
    assert_eq!(check(&good, false), Some(0));
    assert_eq!(
        remembered_passes(&cache),
        0,
        "a plain `kb check` leaves the cache alone"
    );
    assert_eq!(check(&bad, true), Some(1));
    assert_eq!(
        remembered_passes(&cache),
        0,
        "a failure is never remembered"
    );
    assert_eq!(check(&good, true), Some(0));
    assert_eq!(remembered_passes(&cache), 1, "the pass is remembered");
}
