//! Fixtures for unit tests: a tiny KB and events of its entries.

use std::borrow::Cow;
use std::sync::Arc;

use crate::engine::Hit;
use crate::enrich::{Enricher, MatchEvent};
use crate::kb::KnowledgeBase;
use crate::record::{LineMeta, LogRecord, Provenance};

pub(crate) fn entry(id: &str, code: &str, role: &str) -> (std::path::PathBuf, String) {
    let text = entry_toml(id, code, role, &format!("{code} happened"), false);
    (format!("{id}.toml").into(), text)
}

/// The smallest valid entry: `id` is `<domain>/<slug>`, one pattern, placeholder diagnosis.
pub(crate) fn entry_toml(
    id: &str,
    code: &str,
    role: &str,
    pattern: &str,
    fallback: bool,
) -> String {
    let domain = id.split('/').next().unwrap_or(id);
    format!(
        r#"id = "{id}"
title = "t"
domain = "{domain}"
category = "collective_timeout"
error_code = "{code}"
role = "{role}"
severity = "error"
fallback = {fallback}
verification = "ai_generated"
patterns_verified = "unverified"
root_cause = "r"
patterns = ['{pattern}']
examples = ["{code} happened"]
negative_examples = ["y"]
references = ["z"]
"#
    )
}

pub(crate) fn kb(entries: &[(&str, &str, &str)]) -> KnowledgeBase {
    let files = entries
        .iter()
        .map(|(id, code, role)| entry(id, code, role))
        .collect();
    KnowledgeBase::from_files(files, "test").expect("valid KB")
}

pub(crate) fn event(
    kb: &KnowledgeBase,
    entry: usize,
    cluster: Option<&str>,
    ts: Option<&str>,
) -> MatchEvent {
    let record = LogRecord {
        message: Cow::Borrowed(b"x happened"),
        meta: LineMeta {
            cluster: cluster.map(str::to_string),
            timestamp: ts.map(str::to_string),
            ..LineMeta::default()
        },
        truncated: false,
    };
    let hit = Hit {
        entry,
        pattern: entry,
        line: 1,
        record: &record,
        captures: Vec::new(),
        also: Vec::new(),
    };
    let source = Provenance::File {
        path: "-".into(),
        line: 1,
    };
    Enricher::new(Arc::new(kb.clone())).event(&hit, "job-1", source)
}

/// Every line of the repository's logs, KB and examples, and of the loghub samples in
/// `../shared` when present: real text for property tests.
pub(crate) fn repo_lines() -> Vec<Vec<u8>> {
    fn lines_of(dir: &std::path::Path, out: &mut Vec<Vec<u8>>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                lines_of(&path, out);
            } else if let Ok(bytes) = std::fs::read(&path) {
                out.extend(bytes.split(|&b| b == b'\n').map(<[u8]>::to_vec));
            }
        }
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut lines = Vec::new();
    for dir in ["tests", "examples", "kb", "../shared/corpus/loghub"] {
        lines_of(&root.join(dir), &mut lines);
    }
    lines
}
