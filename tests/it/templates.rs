//! Unknown failures (issue 16): masking, stable template ids, bounded memory, `faultline
//! templates` skipping what the KB knows, and `faultline kb suggest` drafts that pass
//! `faultline kb check` and match nothing healthy.

use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;

use faultline::engine::Engine;
use faultline::kb::KnowledgeBase;
use faultline::matcher::RegexMatcher;
use faultline::mine::{self, MineOptions};
use faultline::source::file;
use faultline::templates::{mask, Miner, MinerConfig, TemplateId};

use crate::support::{hyperscan, repo};

fn faultline() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_faultline"));
    cmd.current_dir(repo()).env_remove("FAULTLINE_KB");
    cmd
}

fn run(args: &[&str]) -> Output {
    let out = faultline().args(args).output().expect("runs");
    assert_eq!(
        out.status.code(),
        Some(0),
        "faultline {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn masked(line: &str) -> String {
    let mut out = String::new();
    mask(line, &mut out);
    out
}

#[test]
fn masking_replaces_each_kind_of_value() {
    let cases = [
        (
            "step 1200 loss -0.25 lr 1e-4",
            "step <NUM> loss <NUM> lr <NUM>",
        ),
        ("at 0x7f3a12ff: bad", "at <HEX>: bad"),
        ("digest 54fadb412c4e40cdbaed9335e4c35a9e", "digest <HEX>"),
        (
            "cannot open /scratch/ckpt/step_900/model.pt",
            "cannot open <PATH>",
        ),
        ("see ./logs/rank0.txt", "see <PATH>"),
        (
            "peer gpu-node12.cluster.local unreachable",
            "peer <HOST> unreachable",
        ),
        ("via proxy.example.com:3128", "via <HOST>:<NUM>"),
        (
            "connect to 10.1.2.3:29500 refused",
            "connect to <IP>:<NUM> refused",
        ),
        ("via fe80::1 down", "via <IP> down"),
        (
            "[rank3] NCCL error on node-246",
            "[rank<NUM>] NCCL error on node-<NUM>",
        ),
        (
            "job 38101a0b-2096-447d-96ea-a692162415ae failed",
            "job <UUID> failed",
        ),
        ("Tried to allocate 2.00 GiB", "Tried to allocate <SIZE>"),
        ("sent 18846 bytes (18.4 KB)", "sent <SIZE> (<SIZE>)"),
        ("timed out after 1800000ms", "timed out after <DUR>"),
        ("retry in 5 sec", "retry in <DUR>"),
        ("watchdog 1h2m3s", "watchdog <DUR>"),
        (
            "E1129 21:42:00.429 1234 nccl.cc:55] boom",
            "E<NUM> <TIME> <NUM> <HOST>:<NUM>] boom",
        ),
        ("at 2024-01-02T03:04:05Z", "at <TIME>"),
        ("GET https://hf.co/a/b?x=1 failed", "GET <URL> failed"),
        ("version v2.1.0-rc1", "version <ID>"),
        ("  plain   words\tstay  ", "plain words stay"),
    ];
    for (line, want) in cases {
        assert_eq!(masked(line), want, "{line}");
    }
}

#[test]
fn two_miners_give_the_same_ids_for_the_same_lines() {
    let text = std::fs::read_to_string(
        repo().join("tests/corpus/real/failures/submitit-usr2-requeue-tasks-exit.log"),
    )
    .expect("readable");
    let ids = || {
        let mut m = Miner::new(MinerConfig::default());
        text.lines()
            .map(|l| m.observe(l).id)
            .collect::<Vec<TemplateId>>()
    };
    let (a, b) = (ids(), ids());
    assert_eq!(a, b);
    // An id is the FNV-1a hash of the template text at its birth, printed as 16 hex digits.
    let line = "slurmstepd: error: Failed to send MESSAGE_TASK_EXIT: Connection refused";
    let at = text
        .lines()
        .position(|l| l == line)
        .expect("the line is there");
    assert_eq!(a[at], TemplateId::of(line));
    assert_eq!(
        a[at].to_string(),
        format!("{:016x}", TemplateId::of(line).0)
    );
}

#[test]
fn template_ids_are_stable_across_two_runs_of_the_cli() {
    let dir = "tests/corpus/real/failures/";
    let first = run(&["templates", "--format", "json", "--top", "0", dir]);
    let second = run(&["templates", "--format", "json", "--top", "0", dir]);
    assert!(!first.stdout.is_empty());
    assert_eq!(first.stdout, second.stdout);
    let lines1 = run(&["templates", "--all-lines", "--format", "json", dir]);
    let lines2 = run(&["templates", "--all-lines", "--format", "json", dir]);
    assert_eq!(lines1.stdout, lines2.stdout);
    // The same template through the library and through the CLI: the same id.
    let report: Vec<serde_json::Value> = String::from_utf8_lossy(&first.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON"))
        .collect();
    let refused = report
        .iter()
        .find(|t| {
            t["template"]
                == "slurmstepd: error: Failed to send MESSAGE_TASK_EXIT: Connection refused"
        })
        .expect("the unknown slurmstepd error is a template");
    assert_eq!(
        refused["template_id"],
        TemplateId::of("slurmstepd: error: Failed to send MESSAGE_TASK_EXIT: Connection refused")
            .to_string()
    );
    assert_eq!(refused["count"], 3);
}

#[test]
fn all_lines_prints_one_object_per_line() {
    let out = run(&[
        "templates",
        "--all-lines",
        "--format",
        "json",
        "tests/corpus/real/failures/submitit-usr2-requeue-tasks-exit.log",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    let objects: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON"))
        .collect();
    assert_eq!(objects.len(), 13, "one per line of the file");
    for (i, o) in objects.iter().enumerate() {
        assert_eq!(o["line"], i as u64 + 1);
        assert_eq!(o.as_object().map(|m| m.len()), Some(3), "{o}");
    }
    // Lines 11 and 12 are the same message: one template.
    assert_eq!(objects[10]["template_id"], objects[11]["template_id"]);
    assert_eq!(
        objects[10]["template"],
        "slurmstepd: error: Failed to send MESSAGE_TASK_EXIT: Connection refused"
    );
}

/// 100k lines of which no two share a word: 100k distinct templates.
fn distinct_line(i: usize) -> String {
    let word = |mut n: usize| {
        let mut w = String::from("w");
        loop {
            w.push(char::from(b'a' + (n % 26) as u8));
            n /= 26;
            if n == 0 {
                return w;
            }
        }
    };
    (0..3 + i % 4)
        .map(|j| word(i * 8 + j))
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn memory_stays_bounded_under_100k_distinct_templates() {
    let cfg = MinerConfig::default();
    let max = cfg.max_templates;
    let mut m = Miner::new(cfg);
    let n = 100_000;
    let mut new = 0u64;
    for i in 0..n {
        let seen = m.observe(&distinct_line(i));
        new += u64::from(seen.is_new);
        assert!(m.len() <= max, "{} live after line {i}", m.len());
    }
    assert_eq!(new, n as u64, "every line is a template of its own");
    assert_eq!(m.len(), max);
    assert_eq!(m.evicted(), (n - max) as u64);
    // the least recently seen went first: the oldest are gone, the newest live
    assert!(m.get(TemplateId::of(&distinct_line(0))).is_none());
    assert!(m.get(TemplateId::of(&distinct_line(n - 1))).is_some());
    let heap: usize = m.iter().map(|t| t.heap_bytes()).sum();
    assert!(heap / max < 1024, "{} bytes per template", heap / max);
}

#[test]
fn the_cli_counts_evictions() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("churn.log");
    let text: String = (0..500).map(|i| distinct_line(i) + "\n").collect();
    std::fs::write(&path, text).expect("writes");
    let path = path.display().to_string();
    let out = run(&["templates", "--all-lines", "--max-templates", "64", &path]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("mined into 64 templates (436 evicted)"),
        "{stderr}"
    );
}

#[test]
fn templates_skips_lines_the_kb_matches() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("job.log");
    std::fs::write(
        &path,
        "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n\
         ERROR widget pipeline stalled on shard 17\n\
         step 100 loss 0.25\n\
         [rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB\n\
         ERROR widget pipeline stalled on shard 18\n\
         {\"message\":\"ERROR widget pipeline stalled on shard 19\",\"host\":\"n1\"}\n",
    )
    .expect("writes");
    // In-process, with the shipped engine.
    let engine = hyperscan();
    let (inputs, errors) = file::expand(&[path.display().to_string()], None);
    assert!(errors.is_empty());
    let mining = mine::mine(Some(&engine), &inputs, &MineOptions::default()).expect("mines");
    assert_eq!(mining.stats.lines, 6);
    assert_eq!(mining.stats.known_lines, 2);
    assert_eq!(mining.stats.mined, 3);
    let report = mining.report(None, 0);
    let templates: Vec<&str> = report.iter().map(|t| t.template.as_str()).collect();
    assert_eq!(
        templates,
        vec!["ERROR widget pipeline stalled on shard <NUM>"],
        "the KB's OOM lines, the healthy line and the JSON envelope are not templates"
    );
    assert_eq!(report[0].count, 3);
    // Without the KB, the OOM lines are mined too.
    let none: Option<&Engine<RegexMatcher>> = None;
    let all = mine::mine(none, &inputs, &MineOptions::default()).expect("mines");
    assert_eq!(all.stats.mined, 5);
    // Through the CLI.
    let out = run(&["templates", "--format", "json", &path.display().to_string()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(!text.contains("OutOfMemoryError"), "{text}");
}

#[test]
fn examples_are_redacted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("secret.log");
    std::fs::write(
        &path,
        "ERROR upload failed with HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123456789\n",
    )
    .expect("writes");
    let out = run(&["templates", "--format", "json", &path.display().to_string()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("[REDACTED:"), "{text}");
    assert!(
        !text.contains("hf_abcdefghijklmnopqrstuvwxyz0123456789"),
        "{text}"
    );
}

/// Every draft file under `dir`: (path, parsed TOML).
fn drafts_in(dir: &Path) -> Vec<(std::path::PathBuf, toml::Value)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir.join("draft")).expect("draft/ written") {
        let path = entry.expect("entry").path();
        let text = std::fs::read_to_string(&path).expect("readable");
        out.push((path, toml::from_str(&text).expect("TOML")));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn strings(v: &toml::Value, key: &str) -> Vec<String> {
    v[key]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn kb_suggest_drafts_pass_kb_check_and_match_their_examples() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out_dir = dir.path().display().to_string();
    let out = run(&[
        "kb",
        "suggest",
        "--top",
        "4",
        "--out",
        &out_dir,
        "tests/corpus/real/failures/",
    ]);
    let drafts = drafts_in(dir.path());
    assert_eq!(drafts.len(), 4, "{}", String::from_utf8_lossy(&out.stderr));
    for (path, d) in &drafts {
        let id = d["id"].as_str().expect("id");
        assert!(id.starts_with("draft/"), "{id}");
        assert_eq!(
            path.file_name().and_then(|n| n.to_str()),
            Some(format!("{}.toml", &id["draft/".len()..]).as_str())
        );
        assert_eq!(d["verification"].as_str(), Some("draft"));
        assert_eq!(d["patterns_verified"].as_str(), Some("real_log"));
        assert!(d["root_cause"]
            .as_str()
            .is_some_and(|r| r.starts_with("TODO")));
        let patterns = strings(d, "patterns");
        assert_eq!(patterns.len(), 1);
        let re = regex::bytes::Regex::new(&format!("(?-u){}", patterns[0])).expect("compiles");
        let examples = strings(d, "examples");
        assert!(!examples.is_empty());
        for e in &examples {
            assert!(re.is_match(e.as_bytes()), "{id}: {e}");
        }
        for n in strings(d, "negative_examples") {
            assert!(!re.is_match(n.as_bytes()), "{id}: {n}");
        }
        let refs = strings(d, "references");
        assert!(
            refs.iter()
                .all(|r| r.starts_with("tests/corpus/real/failures/")),
            "{refs:?}"
        );
    }
    // The checker itself, on the written directory: both engines, examples, negatives.
    let check = faultline()
        .args(["kb", "check", &out_dir])
        .output()
        .expect("runs");
    assert_eq!(
        check.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    assert!(String::from_utf8_lossy(&check.stderr).contains("4 entries, 4 patterns"));
    // And they match nothing in the healthy corpus.
    let kb = Arc::new(KnowledgeBase::load_dir(dir.path()).expect("loads"));
    let sources: Vec<&str> = kb.patterns.iter().map(|p| p.source.as_str()).collect();
    let engine = Engine::with_matcher(
        Arc::clone(&kb),
        RegexMatcher::compile(&sources).expect("compiles"),
    );
    let healthy = [
        repo().join("tests/fixtures/healthy"),
        repo().join("tests/corpus/real/healthy"),
    ];
    let paths: Vec<&Path> = healthy.iter().map(|p| p.as_path()).collect();
    let (events, _) = crate::support::scan_paths(&engine, &paths, &Default::default());
    assert!(events.is_empty(), "{:?}", events.first().map(|e| &e.line));
}

#[test]
fn a_draft_that_matches_a_healthy_line_is_dropped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("job.log");
    std::fs::write(
        &log,
        "ERROR frobnicator stalled on shard 17\nERROR frobnicator stalled on shard 18\n\
         ERROR quux exploded at step 9\n",
    )
    .expect("writes");
    let healthy = dir.path().join("healthy.log");
    std::fs::write(
        &healthy,
        "ERROR frobnicator stalled on shard 3 (retrying, harmless)\n",
    )
    .expect("writes");
    let out = run(&[
        "kb",
        "suggest",
        "--healthy",
        &healthy.display().to_string(),
        &log.display().to_string(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stderr.contains("dropped: it matches the healthy corpus at"),
        "{stderr}"
    );
    assert!(!stdout.contains("frobnicator"), "{stdout}");
    assert!(
        stdout.contains("id = \"draft/error-quux-exploded-at-step-"),
        "{stdout}"
    );
}
