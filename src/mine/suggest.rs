//! `faultline kb suggest`: KB drafts for the most frequent unknown templates.
//!
//! Flow: a [`Mining`] of the unknown error lines -> per template, most frequent first, a
//! draft entry ([`EntrySpec`], `id = "draft/<slug>"`, `verification = "draft"`): its pattern
//! from the template ([`super::pattern`]), its examples from the template's real lines
//! (redacted, and only those the pattern matches), a near miss as negative example, the
//! places the lines came from as references, and `TODO` text where a person must write the
//! diagnosis. Each draft is then proven the way the KB is: it must pass [`kbtool::check::check`]
//! on its own (compiles in both engines, matches its examples, not its negative example), and
//! all drafts together are scanned over the healthy corpus, where they must match nothing. A
//! draft that fails either is dropped, with a note saying why.

use std::path::PathBuf;
use std::sync::Arc;

use crate::engine::Engine;
use crate::kb::spec::{EntrySpec, ReviewSpec};
use crate::kb::{self, KbFile, KnowledgeBase};
use crate::kbtool;
use crate::matcher::{HyperscanMatcher, MatchError};
use crate::redact::Redactor;
use crate::source::file::{self, ChunkReader};
use crate::templates::{Template, TemplateId};

use super::pattern::{self, DraftPattern, Variables};
use super::{Mining, Sample};

/// The draft entries' domain: drafts live in `draft/` until a person moves them.
pub const DRAFT_DOMAIN: &str = "draft";

/// Most examples a draft carries.
pub const MAX_EXAMPLES: usize = 3;

/// Most places (`path:line`) a draft's references name.
pub const MAX_REFERENCES: usize = 5;

/// How to draft.
#[derive(Debug, Clone)]
pub struct SuggestOptions {
    /// Drafts wanted (the most frequent templates that yield a sound draft).
    pub top: usize,
    /// Templates seen fewer times are not drafted.
    pub min_count: u64,
    /// Files or directories of healthy logs that no draft may match.
    pub healthy: Vec<PathBuf>,
    /// The inputs as given (paths, `-` for stdin), for the review row.
    pub inputs: Vec<String>,
}

/// A draft that passed every check.
#[derive(Debug, Clone, PartialEq)]
pub struct Draft {
    /// `draft/<slug>`.
    pub id: String,
    /// Where it goes under a KB root: `draft/<slug>.toml`.
    pub path: PathBuf,
    /// The file's text: a comment saying what is left to do, then the entry.
    pub toml: String,
    /// The template it was drafted from.
    pub template_id: TemplateId,
    /// Lines of that template.
    pub count: u64,
}

/// The drafts, and a note for each template that was dropped.
#[derive(Debug, Clone, Default)]
pub struct Suggestion {
    /// Sound drafts, most frequent template first.
    pub drafts: Vec<Draft>,
    /// Why templates were skipped or drafts dropped, one line each.
    pub notes: Vec<String>,
}

/// Errors that stop drafting.
#[derive(Debug, thiserror::Error)]
pub enum SuggestError {
    /// The drafts together do not compile (each passed alone, so this is unexpected).
    #[error("the drafts do not compile together: {0}")]
    Compile(#[from] MatchError),
    /// A healthy-corpus path could not be read.
    #[error("cannot read the healthy corpus: {0}")]
    Healthy(String),
    /// The drafts do not load as a KB.
    #[error("the drafts do not load as a knowledge base: {0}")]
    Load(#[from] kb::KbError),
}

/// Drafts entries for the most frequent templates of `mining`.
pub fn suggest(
    mining: &Mining,
    redactor: &Redactor,
    opts: &SuggestOptions,
) -> Result<Suggestion, SuggestError> {
    let mut out = Suggestion::default();
    let mut candidates: Vec<&Template> = mining
        .miner
        .iter()
        .filter(|t| t.count() >= opts.min_count.max(1))
        .collect();
    candidates.sort_by(|a, b| {
        b.count()
            .cmp(&a.count())
            .then(a.first_seen().cmp(&b.first_seen()))
            .then(a.id().cmp(&b.id()))
    });
    // Some drafts are dropped; draft more than wanted, within reason.
    candidates.truncate(opts.top.saturating_mul(4).max(40));
    let mut drafts = Vec::new();
    for t in candidates {
        match draft(t, &mining.samples(t.id()), redactor, opts) {
            Ok(d) => drafts.push(d),
            Err(why) => out.notes.push(format!(
                "template {} ({} lines) `{}`: no draft: {why}",
                t.id(),
                t.count(),
                t.text()
            )),
        }
    }
    let matched = healthy_hits(&drafts, &opts.healthy)?;
    for d in drafts {
        match matched.iter().find(|(id, _)| *id == d.id) {
            Some((_, at)) => out.notes.push(format!(
                "{}: dropped: it matches the healthy corpus at {at}",
                d.id
            )),
            None if out.drafts.len() < opts.top => out.drafts.push(d),
            None => {}
        }
    }
    Ok(out)
}

/// One template's draft, checked on its own; or why there is none.
fn draft(
    t: &Template,
    samples: &[&Sample],
    redactor: &Redactor,
    opts: &SuggestOptions,
) -> Result<Draft, String> {
    let mut lines: Vec<String> = Vec::new();
    for s in samples {
        let text = redactor.redact_str(&s.text).trim().to_string();
        if !text.is_empty() && !lines.contains(&text) {
            lines.push(text);
        }
    }
    let mut chosen = None;
    for vars in [Variables::Word, Variables::Span] {
        let Some(p) = pattern::from_template(t.text(), vars) else {
            return Err("no literal word of two letters or more to anchor a pattern on".into());
        };
        let re = kb::compile_pattern(&p.source).map_err(|e| format!("pattern: {e}"))?;
        let hits: Vec<&String> = lines.iter().filter(|l| re.is_match(l.as_bytes())).collect();
        // The wider pattern only when the word-wide one misses some lines.
        if hits.len() == lines.len() || (vars == Variables::Span && !hits.is_empty()) {
            let negative = p
                .near_misses()
                .into_iter()
                .find(|m| !re.is_match(m.as_bytes()));
            let examples: Vec<String> = hits
                .iter()
                .take(MAX_EXAMPLES)
                .map(|l| (*l).clone())
                .collect();
            chosen = Some((p, examples, negative));
            break;
        }
    }
    let Some((p, examples, negative)) = chosen else {
        return Err("the pattern built from the template matches none of its lines".into());
    };
    let negative = negative.ok_or("no near miss that the pattern does not match")?;
    let mut places: Vec<String> = Vec::new();
    for s in samples {
        if places.len() < MAX_REFERENCES && !places.contains(&s.source) {
            places.push(s.source.clone());
        }
    }
    let spec = entry(t, &p, &examples, negative, &places, opts);
    let path = PathBuf::from(format!("{}.toml", spec.id));
    let toml = format!(
        "{}{}",
        header(t, &spec.id),
        toml::to_string_pretty(&spec).map_err(|e| e.to_string())?
    );
    let report = kbtool::check::check(vec![(path.clone(), toml.clone())], "<draft>");
    if let Some(problem) = report.errors.first() {
        return Err(format!("it fails kb check: {problem}"));
    }
    Ok(Draft {
        id: spec.id,
        path,
        toml,
        template_id: t.id(),
        count: t.count(),
    })
}

fn entry(
    t: &Template,
    p: &DraftPattern,
    examples: &[String],
    negative: String,
    places: &[String],
    opts: &SuggestOptions,
) -> EntrySpec {
    let hex = t.id().to_string();
    EntrySpec {
        id: format!("{DRAFT_DOMAIN}/{}", slug(t.text(), &hex)),
        title: t.text().to_string(),
        domain: DRAFT_DOMAIN.to_string(),
        category: "unknown".to_string(),
        error_code: format!("DRAFT_{}", hex.to_ascii_uppercase()),
        aliases: Vec::new(),
        role: "symptom".to_string(),
        class: None,
        whole_line: false,
        severity: "error".to_string(),
        fallback: false,
        supersedes: Vec::new(),
        verification: "draft".to_string(),
        patterns_verified: "real_log".to_string(),
        fix_rate: None,
        root_cause: format!(
            "TODO: what fails, why, and what to look at first. Drafted by `faultline kb \
             suggest` from {} line(s) that no entry matched (template {hex}).",
            t.count()
        ),
        patterns: vec![p.source.clone()],
        examples: examples.to_vec(),
        negative_examples: vec![negative],
        references: places.to_vec(),
        versions: Vec::new(),
        workarounds: Vec::new(),
        dead_ends: Vec::new(),
        review: vec![ReviewSpec {
            part: "patterns".to_string(),
            level: "draft".to_string(),
            by: "faultline kb suggest".to_string(),
            against: format!(
                "{} line(s) of template {hex} in {}",
                t.count(),
                inputs_text(&opts.inputs)
            ),
            tags: Vec::new(),
        }],
        seed: None,
    }
}

/// The inputs as given on the command line, at most three named.
fn inputs_text(inputs: &[String]) -> String {
    match inputs.len() {
        0 => "the input".to_string(),
        1..=3 => inputs.join(", "),
        n => format!("{} and {} more", inputs[..3].join(", "), n - 3),
    }
}

/// The comment at the head of a draft: what it is and what is left to do.
fn header(t: &Template, id: &str) -> String {
    format!(
        "# {id}: a draft from `faultline kb suggest` (template {}, {} line(s)).\n\
         # To finish it: write `title` and `root_cause`; pick `domain` (move the file to\n\
         # kb/<domain>/<slug>.toml and change `id`), `category` (kb/README.md), `error_code`,\n\
         # `role` and `severity`; cite the source that prints the message in `references`;\n\
         # sharpen the pattern; add [[review]] rows; run `faultline kb check`.\n",
        t.id(),
        t.count()
    )
}

/// `draft/<slug>`'s slug: the template's first literal words (at most six, 40 bytes) and the
/// first 8 hex digits of its id, so that two templates never share a slug.
fn slug(template: &str, hex: &str) -> String {
    let mut words: Vec<String> = Vec::new();
    let mut len = 0;
    for piece in template.split(' ') {
        let mut literal = piece.to_string();
        for k in crate::templates::MaskKind::ALL {
            literal = literal.replace(k.text(), " ");
        }
        literal = literal.replace("<*>", " ");
        for w in literal.split(|c: char| !c.is_ascii_alphanumeric()) {
            if w.len() < 2 || !w.bytes().any(|b| b.is_ascii_alphabetic()) {
                continue;
            }
            if words.len() >= 6 || len + w.len() > 40 {
                break;
            }
            len += w.len() + 1;
            words.push(w.to_ascii_lowercase());
        }
    }
    let short = hex.get(..8).unwrap_or(hex);
    if words.is_empty() {
        format!("template-{short}")
    } else {
        format!("{}-{short}", words.join("-"))
    }
}

/// (draft id, `path:line`) of the first healthy line each draft matches.
fn healthy_hits(
    drafts: &[Draft],
    healthy: &[PathBuf],
) -> Result<Vec<(String, String)>, SuggestError> {
    if drafts.is_empty() || healthy.is_empty() {
        return Ok(Vec::new());
    }
    let files: Vec<KbFile> = drafts
        .iter()
        .map(|d| (d.path.clone(), d.toml.clone()))
        .collect();
    let kb = Arc::new(KnowledgeBase::from_files(files, "<drafts>")?);
    let sources: Vec<&str> = kb.patterns.iter().map(|p| p.source.as_str()).collect();
    let mut engine = Engine::with_matcher(Arc::clone(&kb), HyperscanMatcher::compile(&sources)?);
    engine.one_event_per_line = false;
    let names: Vec<String> = healthy.iter().map(|p| p.display().to_string()).collect();
    let (inputs, errors) = file::expand(&names, None);
    if let Some(e) = errors.first() {
        return Err(SuggestError::Healthy(e.to_string()));
    }
    let mut worker = engine.worker()?;
    let mut found: Vec<(String, String)> = Vec::new();
    for input in &inputs {
        let reader = file::open(input).map_err(|e| SuggestError::Healthy(e.to_string()))?;
        let mut chunks = ChunkReader::new(reader, file::DEFAULT_CHUNK_BYTES, 1 << 20);
        loop {
            let chunk = match chunks.next_chunk() {
                Ok(Some(c)) => c,
                Ok(None) => break,
                Err(e) => return Err(SuggestError::Healthy(format!("{}: {e}", input.name))),
            };
            let lines = engine.scan_chunk(&mut worker, chunk.data, chunk.info, &mut |hit| {
                let id = &kb.entries[hit.entry].id;
                if !found.iter().any(|(f, _)| f == id) {
                    found.push((id.clone(), format!("{}:{}", input.name, hit.line)));
                }
            })?;
            chunks.advance_lines(lines);
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_are_words_and_the_id() {
        assert_eq!(
            slug(
                "E<NUM> <TIME> boom: NCCL WARN connect to <IP> failed",
                "0123456789abcdef"
            ),
            "boom-nccl-warn-connect-to-failed-01234567"
        );
        assert_eq!(slug("<NUM> <*>", "0123456789abcdef"), "template-01234567");
    }
}
