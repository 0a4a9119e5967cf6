//! `faultline eval DIR`: recognition measured on a corpus of real logs
//! (`tests/corpus/real/README.md` says the format): for each labelled failure excerpt, whether
//! a match carries an expected code (detected) and whether the incident's headline root does
//! (top-1); for each healthy excerpt, whether anything would alert (a false alarm).
//!
//! Each excerpt is scanned and correlated as one job, exactly as `faultline scan` would with
//! incidents on; nothing here is tuned to the corpus.
//!
//! A corpus directory may hold several **sets**, each a directory with a `set.toml` saying what
//! its figure means ([`SetKind`]): `in-sample` (entries were written while reading it: a
//! figure of memory), `blind` (scored before the KB was changed for it, then improved on: the
//! first score is the blind figure, later ones are in-sample), or `held-out` (never read by
//! whoever writes entries: the generalisation figure). `faultline eval tests/corpus` reports
//! each set apart, under its kind, so an in-sample score is never shown as recognition.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;

use crate::engine::{ChunkInfo, Engine};
use crate::enrich::{Enricher, MatchEvent, Scope};
use crate::incident::{Correlator, IncidentConfig, IncidentEvent};
use crate::kb::Role;
use crate::matcher::Matcher;
use crate::record::Provenance;

/// Why the corpus could not be evaluated.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    /// A file or directory could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// What was read.
        path: PathBuf,
        /// Why it failed.
        source: std::io::Error,
    },
    /// An excerpt's header is malformed.
    #[error("{path}: {message}")]
    Format {
        /// The excerpt.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The engine failed.
    #[error(transparent)]
    Match(#[from] crate::matcher::MatchError),
    /// The incident settings are invalid.
    #[error(transparent)]
    Incident(#[from] crate::incident::IncidentConfigError),
}

/// What a set's score means.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SetKind {
    /// Entries were written while reading these excerpts: memory, not recognition.
    InSample,
    /// Scored once before any KB change for it (the blind figure, in `blind_figure`), then
    /// used to improve the KB: later scores are in-sample.
    Blind,
    /// Never read by whoever writes entries: scored to measure generalisation.
    HeldOut,
}

impl SetKind {
    /// How the heading names it.
    pub fn as_str(self) -> &'static str {
        match self {
            SetKind::InSample => "in-sample",
            SetKind::Blind => "blind (improved on since its first score: now in-sample)",
            SetKind::HeldOut => "held-out",
        }
    }
}

/// A set's `set.toml`, as written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetInfo {
    /// What its score means.
    pub kind: SetKind,
    /// When it was collected, and by whom (free text).
    pub collected: String,
    /// For a blind set: its first score, before any KB change for it (free text with the date
    /// and the commit it was measured at).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blind_figure: Option<String>,
    /// The set's directory, relative to the corpus given (filled in when read).
    #[serde(default)]
    pub dir: String,
}

/// `a` before `b` in natural order: runs of digits compare as numbers (`batch2` before
/// `batch10`), everything else as text.
fn natural_order(a: &Path, b: &Path) -> std::cmp::Ordering {
    fn runs(s: &str) -> Vec<(bool, &str)> {
        let mut out = Vec::new();
        let mut start = 0;
        for (i, c) in s.char_indices().skip(1) {
            let prev = s[..i]
                .chars()
                .next_back()
                .is_some_and(|p| p.is_ascii_digit());
            if prev != c.is_ascii_digit() {
                out.push((prev, &s[start..i]));
                start = i;
            }
        }
        if start < s.len() {
            out.push((
                s[start..].starts_with(|c: char| c.is_ascii_digit()),
                &s[start..],
            ));
        }
        out
    }
    let (a, b) = (a.to_string_lossy(), b.to_string_lossy());
    fn key((digits, run): (bool, &str)) -> (bool, usize, &str) {
        let n = run.trim_start_matches('0');
        // Numbers by their length, then their digits; text after numbers, by itself.
        match digits {
            true => (false, n.len(), n),
            false => (true, 0, run),
        }
    }
    runs(&a)
        .into_iter()
        .map(key)
        .cmp(runs(&b).into_iter().map(key))
}

/// The sets under `dir`: every directory (itself included) with a `set.toml`, in natural path
/// order (`batch2` before `batch10`); when there is none, `dir` itself as one set without a
/// kind.
pub fn find_sets(dir: &Path) -> Result<Vec<(PathBuf, Option<SetInfo>)>, EvalError> {
    fn walk(
        root: &Path,
        dir: &Path,
        out: &mut Vec<(PathBuf, Option<SetInfo>)>,
    ) -> Result<(), EvalError> {
        let file = dir.join("set.toml");
        if file.is_file() {
            let text = std::fs::read_to_string(&file).map_err(|e| EvalError::Read {
                path: file.clone(),
                source: e,
            })?;
            let mut info: SetInfo = toml::from_str(&text).map_err(|e| EvalError::Format {
                path: file.clone(),
                message: e.to_string(),
            })?;
            let rel = dir.strip_prefix(root).unwrap_or(dir);
            info.dir = if rel.as_os_str().is_empty() {
                root.display().to_string()
            } else {
                root.join(rel).display().to_string()
            };
            out.push((dir.to_path_buf(), Some(info)));
            return Ok(());
        }
        let mut subdirs: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(|e| EvalError::Read {
                path: dir.to_path_buf(),
                source: e,
            })?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_dir())
            .collect();
        subdirs.sort_by(|a, b| natural_order(a, b));
        for d in subdirs {
            walk(root, &d, out)?;
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out)?;
    if out.is_empty() {
        out.push((dir.to_path_buf(), None));
    }
    Ok(out)
}

/// One excerpt as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Excerpt {
    /// Its file.
    pub path: PathBuf,
    /// Where the lines were copied from.
    pub source: String,
    /// Acceptable headline codes, best first; empty for a healthy excerpt.
    pub expect: Vec<String>,
    /// A verbatim substring of the culprit line.
    pub culprit: Option<String>,
    /// The log lines.
    pub body: String,
}

impl Excerpt {
    /// Whether the excerpt is a healthy one.
    pub fn healthy(&self) -> bool {
        self.expect.is_empty()
    }
}

/// Parses one excerpt file: a header of `key: value` lines, `---`, then the body.
pub fn parse_excerpt(path: &Path, text: &str) -> Result<Excerpt, EvalError> {
    let err = |message: String| EvalError::Format {
        path: path.to_path_buf(),
        message,
    };
    let (head, body) = text
        .split_once("\n---\n")
        .ok_or_else(|| err("no `---` line between the header and the log lines".into()))?;
    let mut fields = BTreeMap::new();
    for line in head.lines().filter(|l| !l.trim().is_empty()) {
        let (k, v) = line
            .split_once(':')
            .ok_or_else(|| err(format!("header line {line:?} is not `key: value`")))?;
        fields.insert(k.trim().to_string(), v.trim().to_string());
    }
    let source = fields
        .get("source")
        .cloned()
        .ok_or_else(|| err("no `source:`".into()))?;
    let expect_text = fields
        .get("expect")
        .ok_or_else(|| err("no `expect:`".into()))?;
    let expect: Vec<String> = if expect_text == "healthy" {
        Vec::new()
    } else {
        expect_text
            .split(',')
            .map(|c| c.trim().to_string())
            .filter(|c| !c.is_empty())
            .collect()
    };
    let culprit = fields.get("culprit").cloned();
    if let Some(c) = &culprit {
        if !body.contains(c.as_str()) {
            return Err(err(format!("the culprit {c:?} is not in the log lines")));
        }
    }
    if expect.is_empty() != (expect_text == "healthy") {
        return Err(err("`expect:` names no code".into()));
    }
    Ok(Excerpt {
        path: path.to_path_buf(),
        source,
        expect,
        culprit,
        body: body.to_string(),
    })
}

/// What faultline made of one excerpt.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    /// The excerpt's file, relative to the corpus.
    pub file: String,
    /// Its first expected code (`healthy` for a healthy excerpt).
    pub label: String,
    /// A match carried an expected code.
    pub detected: bool,
    /// The headline root carried an expected code.
    pub top1: bool,
    /// A healthy excerpt gave an incident or a root or cascade match.
    pub false_alarm: bool,
    /// The headline root's code, if any incident opened.
    pub headline: Option<String>,
    /// Every code matched, in order of first appearance.
    pub codes: Vec<String>,
}

/// Counts of one label, or of all.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Tally {
    /// Failure excerpts.
    pub failures: u64,
    /// Detected ones.
    pub detected: u64,
    /// Correct headlines.
    pub top1: u64,
    /// Healthy excerpts.
    pub healthy: u64,
    /// Healthy excerpts that would have alerted.
    pub false_alarms: u64,
}

/// The whole evaluation.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SetScore {
    /// The set evaluated, when its directory says what it is (`set.toml`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub set: Option<SetInfo>,
    /// Overall counts.
    pub overall: Tally,
    /// Counts per label (the first expected code).
    pub by_label: BTreeMap<String, Tally>,
    /// Every excerpt's outcome.
    pub outcomes: Vec<Outcome>,
    /// Distinct sources of the failure and healthy excerpts.
    pub sources: u64,
}

/// Reads every `*.log` under `dir` (recursively, in name order).
pub fn read_corpus(dir: &Path) -> Result<Vec<Excerpt>, EvalError> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), EvalError> {
        let read = |e| EvalError::Read {
            path: dir.to_path_buf(),
            source: e,
        };
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(read)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                walk(&p, out)?;
            } else if p.extension().is_some_and(|x| x == "log") {
                out.push(p);
            }
        }
        Ok(())
    }
    let mut files = Vec::new();
    walk(dir, &mut files)?;
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).map_err(|e| EvalError::Read {
                path: p.clone(),
                source: e,
            })?;
            parse_excerpt(&p, &text)
        })
        .collect()
}

/// Scans and correlates one excerpt as one job: its matches and the final state of its
/// incidents, in the order they opened.
pub fn run_excerpt<M: Matcher>(
    engine: &Engine<M>,
    enricher: &Enricher,
    ex: &Excerpt,
    cfg: &IncidentConfig,
) -> Result<(Vec<MatchEvent>, Vec<IncidentEvent>), EvalError> {
    let mut worker = engine.worker()?;
    let job = ex
        .path
        .file_stem()
        .map_or_else(|| "excerpt".into(), |s| s.to_string_lossy().into_owned());
    let mut events = Vec::new();
    engine.scan_chunk(
        &mut worker,
        ex.body.as_bytes(),
        ChunkInfo {
            first_line: 1,
            truncated: false,
        },
        &mut |hit| {
            let source = Provenance::File {
                path: ex.path.display().to_string(),
                line: hit.line,
            };
            events.push(enricher.event(&hit, &job, source));
        },
    )?;
    let mut correlator = Correlator::new(cfg.clone())?;
    let mut changes = Vec::new();
    for e in &events {
        correlator.observe(e, &mut changes);
    }
    correlator.flush(&mut changes);
    let mut latest: BTreeMap<u64, IncidentEvent> = BTreeMap::new();
    for c in changes {
        latest.insert(c.serial, c);
    }
    Ok((events, latest.into_values().collect()))
}

/// The headline of an excerpt's incidents: a job's incident before a node's, a known root
/// before an unknown one, then the first opened.
pub fn headline(incidents: &[IncidentEvent]) -> Option<&IncidentEvent> {
    incidents
        .iter()
        .enumerate()
        .min_by_key(|(i, inc)| (inc.job_id.starts_with("node:"), !inc.root_known, *i))
        .map(|(_, inc)| inc)
}

/// Evaluates `excerpts` (paths shown relative to `root`).
pub fn evaluate<M: Matcher>(
    engine: &Engine<M>,
    excerpts: &[Excerpt],
    root: &Path,
) -> Result<SetScore, EvalError> {
    let enricher = Enricher::new(Arc::clone(&engine.kb));
    let aliases: BTreeMap<&str, &str> = engine
        .kb
        .entries
        .iter()
        .flat_map(|e| {
            e.aliases
                .iter()
                .map(|a| (a.as_str(), e.error_code.as_str()))
        })
        .collect();
    let cfg = IncidentConfig::default();
    let mut report = SetScore::default();
    let mut sources = std::collections::BTreeSet::new();
    for ex in excerpts {
        sources.insert(ex.source.clone());
        let (events, incidents) = run_excerpt(engine, &enricher, ex, &cfg)?;
        let expected = |code: &str| {
            ex.expect
                .iter()
                .any(|e| e == code || aliases.get(e.as_str()) == Some(&code))
        };
        let mut codes: Vec<String> = Vec::new();
        for e in &events {
            if !codes.contains(&e.error_code) {
                codes.push(e.error_code.clone());
            }
        }
        let head = headline(&incidents).map(|i| i.root.error_code.clone());
        let file = ex
            .path
            .strip_prefix(root)
            .unwrap_or(&ex.path)
            .display()
            .to_string();
        let outcome = if ex.healthy() {
            let alarm = !incidents.is_empty()
                || events.iter().any(|e| {
                    matches!(e.role, Role::Root | Role::Cascade) && e.scope == Scope::Job
                        || e.role == Role::Root
                });
            Outcome {
                file,
                label: "healthy".into(),
                detected: false,
                top1: false,
                false_alarm: alarm,
                headline: head,
                codes,
            }
        } else {
            Outcome {
                file,
                label: ex.expect[0].clone(),
                detected: events.iter().any(|e| expected(&e.error_code)),
                top1: head.as_deref().is_some_and(expected),
                false_alarm: false,
                headline: head,
                codes,
            }
        };
        for t in [
            &mut report.overall,
            report.by_label.entry(outcome.label.clone()).or_default(),
        ] {
            if ex.healthy() {
                t.healthy += 1;
                t.false_alarms += u64::from(outcome.false_alarm);
            } else {
                t.failures += 1;
                t.detected += u64::from(outcome.detected);
                t.top1 += u64::from(outcome.top1);
            }
        }
        report.outcomes.push(outcome);
    }
    report.sources = sources.len() as u64;
    Ok(report)
}

/// The report for people: the set and what its figure means, per label, overall, then every
/// miss.
pub fn render_text(r: &SetScore) -> String {
    let pct = |n: u64, d: u64| {
        if d == 0 {
            0.0
        } else {
            100.0 * n as f64 / d as f64
        }
    };
    let mut out = String::new();
    if let Some(set) = &r.set {
        out.push_str(&format!(
            "== {}: {}
",
            set.dir,
            set.kind.as_str()
        ));
        out.push_str(&format!(
            "   collected: {}
",
            set.collected
        ));
        if let Some(b) = &set.blind_figure {
            out.push_str(&format!(
                "   blind figure: {b}
"
            ));
        }
        out.push('\n');
    }
    out.push_str(&format!(
        "{:<34} {:>8} {:>9} {:>7}\n",
        "label", "failures", "detected", "top-1"
    ));
    for (label, t) in &r.by_label {
        if label == "healthy" {
            continue;
        }
        out.push_str(&format!(
            "{label:<34} {:>8} {:>9} {:>7}\n",
            t.failures, t.detected, t.top1
        ));
    }
    let o = &r.overall;
    out.push_str(&format!(
        "\noverall: {} failures, detected {} ({:.1}%), top-1 {} ({:.1}%); {} healthy, {} false \
         alarm(s); {} distinct sources\n",
        o.failures,
        o.detected,
        pct(o.detected, o.failures),
        o.top1,
        pct(o.top1, o.failures),
        o.healthy,
        o.false_alarms,
        r.sources
    ));
    let misses: Vec<&Outcome> = r
        .outcomes
        .iter()
        .filter(|x| x.false_alarm || (x.label != "healthy" && !(x.detected && x.top1)))
        .collect();
    if !misses.is_empty() {
        out.push_str("\nmisses:\n");
        for m in misses {
            let what = if m.false_alarm {
                "false alarm".to_string()
            } else if !m.detected {
                "not detected".to_string()
            } else {
                "wrong headline".to_string()
            };
            out.push_str(&format!(
                "  {}: {what}: expected {}, headline {}, matched [{}]\n",
                m.file,
                m.label,
                m.headline.as_deref().unwrap_or("-"),
                m.codes.join(", ")
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_come_in_natural_order() {
        let dir = tempfile::tempdir().expect("tmp");
        for name in ["batch10", "batch2", "batch1", "real", "batch9b", "batch9a"] {
            let d = dir.path().join(name);
            std::fs::create_dir(&d).expect("dir");
            let set = "kind = \"blind\"\ncollected = \"2026-12-03\"\n";
            std::fs::write(d.join("set.toml"), set).expect("set.toml");
        }
        let names: Vec<String> = find_sets(dir.path())
            .expect("sets")
            .into_iter()
            .map(|(p, _)| p.file_name().expect("name").to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            ["batch1", "batch2", "batch9a", "batch9b", "batch10", "real"]
        );
    }

    #[test]
    fn excerpts_parse_and_check_their_culprit() {
        let p = Path::new("x.log");
        let ok = parse_excerpt(
            p,
            "source: https://example.org/1\nexpect: XID_79, XID\nculprit: Xid\n---\nNVRM: Xid (PCI:0000:3b:00): 79\n",
        )
        .expect("parses");
        assert_eq!(ok.expect, ["XID_79", "XID"]);
        assert!(!ok.healthy());
        let healthy = parse_excerpt(p, "source: s\nexpect: healthy\n---\nall good\n").expect("ok");
        assert!(healthy.healthy());
        for bad in [
            "source: s\nexpect: X\nculprit: nope\n---\nline\n",
            "source: s\n---\nline\n",
            "expect: X\n---\nline\n",
            "source: s\nexpect: X\nline\n",
        ] {
            assert!(parse_excerpt(p, bad).is_err(), "{bad:?}");
        }
    }
}
