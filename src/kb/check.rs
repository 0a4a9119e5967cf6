//! `faultline kb check`: proves a KB sound in both engines.
//!
//! Every file parses with no unknown field; ids are unique and equal their paths; every pattern
//! compiles alone and all together in Hyperscan and in `regex`; every example matches its own
//! entry in both engines and no negative example does; every pattern is exercised by at least
//! one example. An example that also hits another entry is a warning.

use std::sync::Arc;

use super::{KbFile, KnowledgeBase, Problem};
use crate::engine::{ChunkInfo, Engine};
use crate::matcher::{HyperscanMatcher, MatchError, Matcher, RegexMatcher};

/// The outcome of a check.
#[derive(Debug, Default)]
pub struct Report {
    pub errors: Vec<Problem>,
    pub warnings: Vec<Problem>,
    pub entries: usize,
    pub patterns: usize,
    pub examples: usize,
}

impl Report {
    pub fn ok(&self) -> bool {
        self.errors.is_empty()
    }
}

/// Checks the KB made of `files`.
pub fn check(files: Vec<KbFile>, origin: &str) -> Report {
    let (kb, mut errors) = KnowledgeBase::build(files, origin);
    let mut report = Report {
        entries: kb.entries.len(),
        patterns: kb.patterns.len(),
        ..Default::default()
    };
    let problem = |kb: &KnowledgeBase, entry: usize, field: String, message: String| Problem {
        file: kb.entries[entry].path.clone(),
        entry: kb.entries[entry].id.clone(),
        field,
        message,
    };

    // Each pattern alone in Hyperscan, so a failure names its pattern.
    let mut hs_ok = true;
    for p in &kb.patterns {
        if let Err(e) = HyperscanMatcher::check_one(&p.source) {
            hs_ok = false;
            let message = match e {
                MatchError::Pattern { message, .. } => format!("Hyperscan rejects it: {message}"),
                other => other.to_string(),
            };
            errors.push(problem(
                &kb,
                p.entry,
                format!("patterns[{}]", p.index),
                message,
            ));
        }
    }
    if kb.patterns.is_empty() {
        report.errors = errors;
        return report;
    }
    let sources: Vec<String> = kb.patterns.iter().map(|p| p.source.clone()).collect();
    let kb = Arc::new(kb);
    let oracle = match RegexMatcher::compile(&sources) {
        Ok(m) => Engine {
            suppress_fallbacks: false,
            ..Engine::with_matcher(Arc::clone(&kb), m)
        },
        Err(e) => {
            errors.push(Problem {
                file: kb.origin.clone().into(),
                entry: String::new(),
                field: "patterns".into(),
                message: format!("all patterns together do not compile in regex: {e}"),
            });
            report.errors = errors;
            return report;
        }
    };
    let hyperscan = if hs_ok {
        match HyperscanMatcher::compile(&sources) {
            Ok(m) => Some(Engine {
                suppress_fallbacks: false,
                ..Engine::with_matcher(Arc::clone(&kb), m)
            }),
            Err(e) => {
                errors.push(Problem {
                    file: kb.origin.clone().into(),
                    entry: String::new(),
                    field: "patterns".into(),
                    message: format!("all patterns together do not compile in Hyperscan: {e}"),
                });
                None
            }
        }
    } else {
        None
    };

    let mut warnings = Vec::new();
    for (e, entry) in kb.entries.iter().enumerate() {
        let mut exercised = vec![false; entry.patterns.len()];
        for (i, example) in entry.examples.iter().enumerate() {
            report.examples += 1;
            let field = format!("examples[{i}]");
            let by_regex = entries_hit(&oracle, example);
            let by_hs = hyperscan.as_ref().map(|h| entries_hit(h, example));
            let own = |hits: &[(usize, usize)]| hits.iter().any(|(x, _)| *x == e);
            if !own(&by_regex) {
                errors.push(problem(
                    &kb,
                    e,
                    field.clone(),
                    format!("does not match its entry in regex: {example:?}"),
                ));
            }
            if let Some(by_hs) = &by_hs {
                if !own(by_hs) {
                    errors.push(problem(
                        &kb,
                        e,
                        field.clone(),
                        format!("does not match its entry in Hyperscan: {example:?}"),
                    ));
                }
                if entry_set(by_hs) != entry_set(&by_regex) {
                    errors.push(problem(
                        &kb,
                        e,
                        field.clone(),
                        format!(
                            "the engines disagree: Hyperscan hits {:?}, regex hits {:?}",
                            ids(&kb, by_hs),
                            ids(&kb, &by_regex)
                        ),
                    ));
                }
            }
            let others: Vec<&str> = by_regex
                .iter()
                // A catch-all overlapping a specific entry is its purpose, not a conflict.
                .filter(|(x, _)| *x != e && !kb.entries[*x].fallback && !entry.fallback)
                .map(|(x, _)| kb.entries[*x].id.as_str())
                .collect();
            if !others.is_empty() {
                warnings.push(problem(
                    &kb,
                    e,
                    field,
                    format!("also matches {}", others.join(", ")),
                ));
            }
        }
        // Which patterns the examples exercise: test each pattern alone on each example.
        for example in &entry.examples {
            let record = crate::envelope::decode_raw(example.as_bytes());
            for p in kb.patterns.iter().filter(|p| p.entry == e) {
                if p.regex.is_match(&record.message) {
                    exercised[p.index] = true;
                }
            }
        }
        for (i, done) in exercised.iter().enumerate() {
            if !done {
                errors.push(problem(
                    &kb,
                    e,
                    format!("patterns[{i}]"),
                    "no example exercises this pattern; add one for its wording".to_string(),
                ));
            }
        }
        for (i, negative) in entry.negative_examples.iter().enumerate() {
            let field = format!("negative_examples[{i}]");
            let by_regex = entries_hit(&oracle, negative);
            if by_regex.iter().any(|(x, _)| *x == e) {
                errors.push(problem(
                    &kb,
                    e,
                    field.clone(),
                    format!("matches its own entry in regex: {negative:?}"),
                ));
            }
            if let Some(h) = &hyperscan {
                if entries_hit(h, negative).iter().any(|(x, _)| *x == e) {
                    errors.push(problem(
                        &kb,
                        e,
                        field,
                        format!("matches its own entry in Hyperscan: {negative:?}"),
                    ));
                }
            }
        }
    }
    report.errors = errors;
    report.warnings = warnings;
    report
}

/// (entry, dense pattern id) for every entry `line` hits.
fn entries_hit<M: Matcher>(engine: &Engine<M>, line: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let Ok(mut worker) = engine.worker() else {
        return out;
    };
    let info = ChunkInfo {
        first_line: 1,
        truncated: false,
    };
    let _ = engine.scan_chunk(&mut worker, line.as_bytes(), info, &mut |hit| {
        out.push((hit.entry, hit.pattern));
    });
    out
}

fn entry_set(hits: &[(usize, usize)]) -> Vec<usize> {
    let mut v: Vec<usize> = hits.iter().map(|(e, _)| *e).collect();
    v.sort_unstable();
    v.dedup();
    v
}

fn ids<'a>(kb: &'a KnowledgeBase, hits: &[(usize, usize)]) -> Vec<&'a str> {
    entry_set(hits)
        .into_iter()
        .map(|e| kb.entries[e].id.as_str())
        .collect()
}
