//! `faultline kb check`: proves a KB sound in both engines.
//!
//! Every file parses with no unknown field; ids are unique and equal their paths; every pattern
//! compiles alone and all together in Hyperscan and in `regex`; every example matches its own
//! entry in both engines and no negative example does; every pattern is exercised by at least
//! one example. An example that also hits another entry is a warning.
//!
//! Advice is checked too ([`advice_problems`]): a command that only looks runnable (a
//! `python -c` that changes another process's state, a hard-coded network interface, an in-band
//! power cut without a warning) is an error. A missing review trail is a warning.

use std::sync::Arc;

use crate::engine::{ChunkInfo, Engine};
use crate::kb::{KbFile, KnowledgeBase, Problem};
use crate::matcher::{HyperscanMatcher, MatchError, Matcher, RegexMatcher};

/// The outcome of a check.
#[derive(Debug, Default)]
pub struct CheckReport {
    /// Problems that fail the check (`kb check` exits non-zero).
    pub errors: Vec<Problem>,
    /// Problems reported without failing it: an example that also hits another entry, a missing
    /// review trail.
    pub warnings: Vec<Problem>,
    /// Entries that parsed and validated.
    pub entries: usize,
    /// Patterns that compiled in `regex`.
    pub patterns: usize,
    /// Examples run through the engines.
    pub examples: usize,
}

impl CheckReport {
    /// True when there is no error (warnings allowed).
    pub fn ok(&self) -> bool {
        self.errors.is_empty()
    }
}

/// [`HyperscanMatcher::check_one`] of every pattern, in order, on all cores.
fn compile_each_alone(patterns: &[crate::kb::Pattern]) -> Vec<Result<(), MatchError>> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let per = patterns.len().div_ceil(threads).max(1);
    std::thread::scope(|scope| {
        let parts: Vec<_> = patterns
            .chunks(per)
            .map(|part| {
                scope.spawn(move || {
                    part.iter()
                        .map(|p| HyperscanMatcher::check_one(&p.source))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        parts
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    })
}

/// Checks the KB made of `files`.
pub fn check(files: Vec<KbFile>, origin: &str) -> CheckReport {
    let (kb, mut errors) = KnowledgeBase::build(files, origin);
    let mut report = CheckReport {
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

    // Each pattern alone in Hyperscan, so a failure names its pattern; and its confirming
    // regex, which a run builds only when the pattern first hits.
    // Hyperscan's compile of one pattern alone is a third of the check's CPU (about 7 ms each):
    // the patterns are split between the machine's cores, and the results kept in order.
    let alone = compile_each_alone(&kb.patterns);
    let mut hs_ok = true;
    for (p, alone) in kb.patterns.iter().zip(alone) {
        if let Err(message) = p.regex() {
            errors.push(problem(
                &kb,
                p.entry,
                format!("patterns[{}]", p.index),
                message.to_string(),
            ));
        }
        if let Err(e) = alone {
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
        Ok(m) => Probe::new(every_event(&kb, m)),
        Err(e) => {
            errors.push(whole_kb_problem(&kb, "regex", &e));
            report.errors = errors;
            return report;
        }
    };
    // The database `scan` and `run` use: required literals, confirmed by the patterns.
    let plan = crate::engine::plan(&kb, &sources, crate::matcher::literals::MIN_LEN);
    let hyperscan = if hs_ok {
        match HyperscanMatcher::compile_plan(plan.clone(), None) {
            Ok((m, _)) => Some(Probe::new(every_event(&kb, m))),
            Err(e) => {
                errors.push(whole_kb_problem(&kb, "Hyperscan", &e));
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
            let by_regex = oracle.hits(example);
            let by_hs = hyperscan.as_ref().map(|h| h.hits(example));
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
            // One line, one event: two entries matching one example need a stated winner
            // (supersedes, or a catch-all against a specific entry).
            let mut others: Vec<&str> = by_regex
                .iter()
                .filter(|(x, _)| *x != e && !kb.winner_stated(e, *x))
                .map(|(x, _)| kb.entries[*x].id.as_str())
                .collect();
            others.sort_unstable();
            others.dedup();
            if !others.is_empty() {
                warnings.push(problem(
                    &kb,
                    e,
                    field,
                    format!(
                        "also matches {} with no stated winner: add `supersedes` to the entry \
                         that should carry the line",
                        others.join(", ")
                    ),
                ));
            }
        }
        // Which patterns the examples exercise: test each pattern alone on each example.
        for example in &entry.examples {
            let record = crate::envelope::decode_raw(example.as_bytes());
            for (id, p) in kb.patterns.iter().enumerate().filter(|(_, p)| p.entry == e) {
                if p.regex().is_ok_and(|re| re.is_match(&record.message)) {
                    exercised[p.index] = true;
                    // A line the pattern matches must hold one of the literals it is scanned by.
                    if !plan.passes(id, &record.message) {
                        errors.push(problem(
                            &kb,
                            e,
                            format!("patterns[{}]", p.index),
                            format!(
                                "its required literals miss an example it matches (a bug in \
                                 matcher::literals): {example:?}"
                            ),
                        ));
                    }
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
            let by_regex = oracle.hits(negative);
            if by_regex.iter().any(|(x, _)| *x == e) {
                errors.push(problem(
                    &kb,
                    e,
                    field.clone(),
                    format!("matches its own entry in regex: {negative:?}"),
                ));
            }
            if let Some(h) = &hyperscan {
                if h.hits(negative).iter().any(|(x, _)| *x == e) {
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
    for (e, entry) in kb.entries.iter().enumerate() {
        for (field, message) in advice_problems(entry) {
            errors.push(problem(&kb, e, field, message));
        }
        for (field, message) in review_gaps(entry) {
            warnings.push(problem(&kb, e, field, message));
        }
        for (field, message) in too_few_examples(entry) {
            warnings.push(problem(&kb, e, field, message));
        }
    }
    for p in kb.patterns.iter() {
        for f in crate::kb::lint::findings(&p.source) {
            warnings.push(problem(
                &kb,
                p.entry,
                format!("patterns[{}]", p.index),
                f.message(),
            ));
        }
    }
    report.errors = errors;
    report.warnings = warnings;
    report
}

/// Advice an operator could be misled by: a rate shown without its sample (an estimate shown
/// as a measurement), and commands that look runnable but do not do what the text says, or do
/// harm: (field, why). Loading tolerates them (output never shows such a rate); `kb check`
/// fails on them.
pub fn advice_problems(entry: &crate::kb::Entry) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if entry.fix_rate.is_some() && entry.verification != "measured" {
        out.push((
            "fix_rate".to_string(),
            "a fix rate is shown only when measured: set verification = \"measured\" or move \
             the number into [seed] (an estimate is never shown as a measurement)"
                .to_string(),
        ));
    }
    let rates = entry
        .workarounds
        .iter()
        .enumerate()
        .map(|(i, w)| (format!("workarounds[{i}]"), w.success_rate, w.n, &w.source))
        .chain(
            entry
                .dead_ends
                .iter()
                .enumerate()
                .map(|(i, d)| (format!("dead_ends[{i}]"), d.fail_rate, d.n, &d.source)),
        );
    for (field, rate, n, source) in rates {
        let sourced = source.as_deref().is_some_and(|s| !s.trim().is_empty());
        if rate.is_some() && (n.unwrap_or(0) == 0 || !sourced) {
            out.push((
                field,
                "a rate needs `n` (the sample size) and `source` (where it was measured or \
                 reported); an estimate belongs in [seed] or nowhere"
                    .to_string(),
            ));
        } else if rate.is_none() && (n.is_some() || source.is_some()) {
            out.push((
                field,
                "`n` and `source` describe a rate: set one".to_string(),
            ));
        }
    }
    let texts = entry
        .workarounds
        .iter()
        .enumerate()
        .flat_map(|(i, w)| {
            [
                (format!("workarounds[{i}].text"), w.text.as_str()),
                (
                    format!("workarounds[{i}].command"),
                    w.command.as_deref().unwrap_or(""),
                ),
            ]
        })
        .filter(|(_, t)| !t.is_empty());
    for (field, text) in texts {
        if let Some(why) = runnable_trap(text) {
            out.push((field, why.to_string()));
        }
    }
    for (i, w) in entry.workarounds.iter().enumerate() {
        let Some(command) = w.command.as_deref() else {
            continue;
        };
        for why in crate::kb::commands::command_problems(command) {
            out.push((format!("workarounds[{i}].command"), why.to_string()));
        }
    }
    out
}

/// Why `text` is a command that only looks runnable, if it is one.
pub fn runnable_trap(text: &str) -> Option<&'static str> {
    let lower = text.to_ascii_lowercase();
    if lower.contains("python -c") || lower.contains("python3 -c") {
        const STATEFUL: &[&str] = &[
            "set_per_process_memory_fraction",
            "empty_cache",
            "reset_peak_memory_stats",
            "cuda.set_device",
            "set_sync_debug_mode",
            "os.environ[",
            "init_process_group",
        ];
        if STATEFUL.iter().any(|s| lower.contains(s)) {
            return Some(
                "a `python -c` process changes only its own state, never the training job's: \
                 say where in the job's code the call goes",
            );
        }
    }
    const IFACE_VARS: &[&str] = &[
        "nccl_socket_ifname=",
        "gloo_socket_ifname=",
        "tp_socket_ifname=",
        "nccl_ib_hca=",
    ];
    for var in IFACE_VARS {
        let mut rest = lower.as_str();
        while let Some(at) = rest.find(var) {
            let value = &rest[at + var.len()..];
            let value = value.trim_start_matches(['"', '\'', '^', '=']);
            let hard_coded = ["eth", "ens", "enp", "eno", "ib", "bond", "mlx5_"]
                .iter()
                .any(|p| {
                    value.starts_with(p)
                        && value[p.len()..].starts_with(|c: char| c.is_ascii_digit())
                });
            if hard_coded {
                return Some(
                    "a hard-coded interface name breaks on machines that name theirs otherwise: \
                     write <iface> and how to find it (ip -br link, ibdev2netdev)",
                );
            }
            rest = &rest[at + var.len()..];
        }
    }
    let power_cut = [
        "chassis power cycle",
        "chassis power off",
        "chassis power reset",
    ]
    .iter()
    .any(|c| lower.contains(c));
    if power_cut
        && !(lower.contains("warning") || lower.contains("out-of-band") || lower.contains("bmc"))
    {
        return Some(
            "an in-band power cycle cuts power under the operator's own session: use the BMC \
             out of band and say so (warning)",
        );
    }
    None
}

/// An entry with fewer than two examples or no negative example: one example shows one
/// wording, and without a near miss nothing shows where the pattern stops (the shipped KB's
/// test requires both of every entry).
fn too_few_examples(entry: &crate::kb::Entry) -> Vec<(String, String)> {
    let mut gaps = Vec::new();
    if entry.examples.len() < 2 {
        gaps.push((
            "examples".to_string(),
            format!(
                "{} example(s): give at least two (another wording, version or wrapper the \
                 program prints)",
                entry.examples.len()
            ),
        ));
    }
    if entry.negative_examples.is_empty() {
        gaps.push((
            "negative_examples".to_string(),
            "no negative example: give a real near miss the patterns must not match".to_string(),
        ));
    }
    gaps
}

/// Parts of an entry that no review row speaks for: (field, what is missing).
pub fn review_gaps(entry: &crate::kb::Entry) -> Vec<(String, String)> {
    let mut needed = vec!["patterns", "root_cause"];
    if !entry.workarounds.is_empty() || !entry.dead_ends.is_empty() {
        needed.push("advice");
    }
    if !entry.versions.is_empty() {
        needed.push("versions");
    }
    needed
        .into_iter()
        .filter(|part| !entry.review.iter().any(|r| r.part == *part))
        .map(|part| {
            (
                "review".to_string(),
                format!("no [[review]] row for `{part}`: say who checked it against what"),
            )
        })
        .chain(untagged_versions(entry))
        .collect()
}

/// An entry that claims releases (version rows) must say at which release tags its patterns
/// were read against the emitting program's source: a `patterns` review row with `tags`.
/// Wordings change between releases, so a range read at one release only is a guess.
fn untagged_versions(entry: &crate::kb::Entry) -> Option<(String, String)> {
    let has_patterns_row = entry.review.iter().any(|r| r.part == "patterns");
    let tagged = entry
        .review
        .iter()
        .any(|r| r.part == "patterns" && !r.tags.is_empty());
    (!entry.versions.is_empty() && has_patterns_row && !tagged).then(|| {
        (
            "review".to_string(),
            "version rows but no `patterns` review row names the release tags its wording was \
             read at: add `tags = [...]`"
                .to_string(),
        )
    })
}

/// An engine over `kb` that reports every entry a line hits, not only the winner.
fn every_event<M: Matcher>(kb: &Arc<KnowledgeBase>, m: M) -> Engine<M> {
    let mut engine = Engine::with_matcher(Arc::clone(kb), m);
    engine.one_event_per_line = false;
    engine
}

/// The KB's patterns do not compile together in `engine`.
fn whole_kb_problem(kb: &KnowledgeBase, engine: &str, e: &MatchError) -> Problem {
    Problem {
        file: kb.origin.clone().into(),
        entry: String::new(),
        field: "patterns".into(),
        message: format!("all patterns together do not compile in {engine}: {e}"),
    }
}

/// An engine and the one worker every probe reuses (a worker holds a capture slot per
/// pattern: making one per example cost more than scanning it).
struct Probe<M: Matcher> {
    engine: Engine<M>,
    worker: std::cell::RefCell<Option<crate::engine::Worker<M>>>,
}

impl<M: Matcher> Probe<M> {
    fn new(engine: Engine<M>) -> Self {
        let worker = std::cell::RefCell::new(engine.worker().ok());
        Probe { engine, worker }
    }

    /// (entry, dense pattern id) for every entry `line` hits.
    fn hits(&self, line: &str) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        let mut worker = self.worker.borrow_mut();
        let Some(worker) = worker.as_mut() else {
            return out;
        };
        let info = ChunkInfo {
            first_line: 1,
            truncated: false,
        };
        let _ = self
            .engine
            .scan_chunk(worker, line.as_bytes(), info, &mut |hit| {
                out.push((hit.entry, hit.pattern));
            });
        out
    }
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
