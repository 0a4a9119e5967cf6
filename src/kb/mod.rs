//! The knowledge base: every failure faultline recognises, with its diagnosis.
//!
//! Flow: TOML files ([`spec`], as written) -> [`Entry`] (validated, [`entry`]) ->
//! [`KnowledgeBase`] (all entries, plus a dense table of patterns whose index is the Hyperscan
//! pattern id). [`crate::kbtool`] proves a KB sound in both engines and converts other formats.

pub mod commands;
mod confirm;
pub mod entry;
pub mod lint;
pub mod list;
pub mod spec;

use std::fs;
use std::path::{Path, PathBuf};

use regex_automata::meta::Regex;
use regex_syntax::hir::{Hir, HirKind, Look};

pub use entry::{rate_kind, CauseClass, Entry, Problem, Role, Severity};
pub use spec::EntrySpec;

mod embedded {
    include!(concat!(env!("OUT_DIR"), "/embedded_kb.rs"));
}

/// Errors loading a knowledge base.
#[derive(Debug, thiserror::Error)]
pub enum KbError {
    /// The knowledge base, or a directory under it, could not be read.
    #[error("cannot read the knowledge base at {path}: {source}")]
    Io {
        /// The file or directory that failed.
        path: PathBuf,
        /// The underlying I/O error.
        source: std::io::Error,
    },
    /// Entries failed validation; every problem found.
    #[error("the knowledge base has {} problem(s):\n{}", .0.len(), render(.0))]
    Invalid(Vec<Problem>),
    /// The directory holds no `*.toml` file.
    #[error("the knowledge base at {0} holds no entries")]
    Empty(PathBuf),
}

fn render(problems: &[Problem]) -> String {
    problems
        .iter()
        .map(|p| format!("  {p}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// One pattern of one entry; its position in [`KnowledgeBase::patterns`] is its pattern id.
#[derive(Debug, Clone)]
pub struct Pattern {
    /// Index of the owning entry in [`KnowledgeBase::entries`].
    pub entry: usize,
    /// Index of the pattern within its entry.
    pub index: usize,
    /// The pattern as written in the entry; what Hyperscan compiles.
    pub source: String,
    /// The pattern parsed and checked ([`validate_pattern`]'s rules), and the confirming regexes
    /// built from it for the `regex` crate on their first use: they confirm hits and extract
    /// captures. Most patterns never see a hit in a run, and building all of them was most of a
    /// start-up (2,017 patterns: about 0.15 s of 0.22 s). A short message is confirmed by a
    /// cheaper regex of the same meaning ([`confirm`]). Set at load, or on first use for a KB
    /// this build checked before ([`KnowledgeBase::from_files`]).
    parsed: std::sync::OnceLock<Parsed>,
}

impl Pattern {
    /// A checked pattern, its confirming regex not built yet.
    pub fn new(entry: usize, index: usize, source: &str) -> Result<Pattern, String> {
        let hir = checked_hir(source)?;
        let parsed = std::sync::OnceLock::new();
        let _ = parsed.set(Parsed::of(hir));
        Ok(Pattern {
            entry,
            index,
            source: source.to_string(),
            parsed,
        })
    }

    /// A pattern of a KB whose patterns this build checked before (the memo of
    /// [`KnowledgeBase::from_files`]): parsed on first use, not now. Parsing and checking every
    /// pattern was most of a start-up, and most patterns never see a hit in a run.
    fn checked_before(entry: usize, index: usize, source: &str) -> Pattern {
        Pattern {
            entry,
            index,
            source: source.to_string(),
            parsed: std::sync::OnceLock::new(),
        }
    }

    fn parsed(&self) -> &Parsed {
        self.parsed.get_or_init(|| {
            // A pattern is made by `checked_before` only when this build has checked this very
            // text before, so it parses; a failure here is a corrupt cache directory.
            let hir = checked_hir(&self.source).unwrap_or_else(|why| {
                panic!(
                    "KB pattern `{}` was remembered as checked but is not: {why}; remove the \
                     cache directory ($FAULTLINE_CACHE_DIR) and start again",
                    self.source
                )
            });
            Parsed::of(hir)
        })
    }

    /// The pattern's syntax tree, as the confirming regex reads it.
    pub fn hir(&self) -> &Hir {
        &self.parsed().hir
    }

    /// The confirming regex, built now if this is its first use; the reason when the regex
    /// crate rejects the pattern (a size limit: `faultline kb check` builds every one, so a KB
    /// that passed it never gets here, and a run says so once per pattern).
    pub fn regex(&self) -> Result<&Regex, &str> {
        let p = self.parsed();
        p.confirmers.exact(&p.hir, &self.source)
    }

    /// The regex that confirms the pattern on a message of `len` bytes, with the same matches
    /// and captures there as [`Pattern::regex`] (cheaper to build and run on a short message),
    /// and its variant's number: a `Captures` made by one variant's regex is for it only.
    pub fn regex_for(&self, len: usize) -> (usize, Result<&Regex, &str>) {
        let p = self.parsed();
        p.confirmers.for_len(&p.hir, &self.source, len)
    }

    /// Whether `message` holds every literal a match of the pattern requires: when `false`, it
    /// cannot match (checked before [`Pattern::regex_for`], which builds a regex).
    pub fn may_match(&self, message: &[u8]) -> bool {
        let p = self.parsed();
        p.confirmers.may_match(&p.hir, message)
    }

    /// Whether a confirming regex has been built (each is built on first use).
    #[cfg(test)]
    pub(crate) fn regex_built(&self) -> bool {
        self.parsed.get().is_some_and(|p| p.confirmers.any_built())
    }

    /// Whether the pattern has been parsed (at load, or on first use when checked before).
    #[cfg(test)]
    pub(crate) fn is_parsed(&self) -> bool {
        self.parsed.get().is_some()
    }
}

/// A pattern's syntax tree and the regexes built from it on demand.
#[derive(Debug, Clone)]
struct Parsed {
    hir: Hir,
    confirmers: confirm::Confirmers,
}

impl Parsed {
    fn of(hir: Hir) -> Parsed {
        Parsed {
            confirmers: confirm::Confirmers::new(&hir),
            hir,
        }
    }
}

/// A loaded, validated knowledge base.
#[derive(Debug, Clone)]
pub struct KnowledgeBase {
    /// The validated entries, in path order.
    pub entries: Vec<Entry>,
    /// Every pattern of every entry, in entry order; the position is the pattern id.
    pub patterns: Vec<Pattern>,
    /// Content hash of every file: changes whenever any entry changes.
    pub version: String,
    /// Where it came from, for messages (`<embedded>` or a directory).
    pub origin: String,
    /// `(winner, loser)` entry indices of every `supersedes` declaration.
    pub beats: std::collections::HashSet<(usize, usize)>,
}

/// The category of the entries [`KnowledgeBase::without_progress`] leaves out.
pub const PROGRESS_CATEGORY: &str = "progress";

/// A KB file's path (relative to the root) and its text.
pub type KbFile = (PathBuf, String);

impl KnowledgeBase {
    /// Loads the KB shipped inside the binary.
    pub fn embedded() -> Result<Self, KbError> {
        Self::from_files(Self::embedded_files(), "<embedded>")
    }

    /// The files of the KB shipped inside the binary.
    pub fn embedded_files() -> Vec<KbFile> {
        embedded::EMBEDDED_KB
            .iter()
            .map(|(path, text)| (PathBuf::from(path), (*text).to_string()))
            .collect()
    }

    /// Loads every `*.toml` under `dir`.
    pub fn load_dir(dir: &Path) -> Result<Self, KbError> {
        let files = read_dir(dir)?;
        if files.is_empty() {
            return Err(KbError::Empty(dir.to_path_buf()));
        }
        Self::from_files(files, &dir.display().to_string())
    }

    /// Builds a KB from in-memory files (path relative to the KB root, text).
    ///
    /// Every entry is parsed and validated; every pattern is parsed and checked too, unless this
    /// build loaded exactly these files before and all their patterns passed: a memo in the
    /// cache directory ([`crate::cache`], named after a hash of the build and of every path and
    /// text) says so, and the patterns are then parsed on first use. Without a cache directory
    /// every pattern is checked at every load.
    pub fn from_files(files: Vec<KbFile>, origin: &str) -> Result<Self, KbError> {
        let (kb, problems) = Self::build_with(files, origin, crate::cache::dir().as_deref());
        if problems.is_empty() {
            Ok(kb)
        } else {
            Err(KbError::Invalid(problems))
        }
    }

    /// Builds a KB of the entries and patterns that are valid, and lists the problems of the
    /// rest: `kb check` goes on to test what it can. Checks every pattern (no memo).
    pub fn build(files: Vec<KbFile>, origin: &str) -> (Self, Vec<Problem>) {
        Self::build_with(files, origin, None)
    }

    /// [`KnowledgeBase::build`], trusting and writing the patterns' memo in `memo_dir`.
    fn build_with(
        mut files: Vec<KbFile>,
        origin: &str,
        memo_dir: Option<&Path>,
    ) -> (Self, Vec<Problem>) {
        files.sort();
        let content = content_hash(&files);
        let version = format!("{content:016x}")[..12].to_string();
        let memo = memo_dir.map(|dir| {
            let mut key = crate::record::Fnv::new();
            key.write(crate::cache::BUILD_ID.as_bytes());
            key.write(&content.to_le_bytes());
            dir.join(format!("kb-checked-{:016x}.json", key.finish()))
        });
        // The memo holds every file's entry as parsed, in file order: reading it back is a
        // few times cheaper than parsing the TOML again, and its presence says that every
        // entry and pattern passed.
        let remembered = memo
            .as_deref()
            .and_then(crate::cache::read_checked)
            .and_then(|bytes| serde_json::from_slice::<Vec<EntrySpec>>(&bytes).ok())
            .filter(|specs| specs.len() == files.len());
        let checked_before = remembered.is_some();
        let mut problems = Vec::new();
        let mut entries = Vec::new();
        let mut specs = Vec::new();
        match remembered {
            Some(remembered) => {
                for ((path, _), spec) in files.iter().zip(remembered) {
                    match Entry::from_spec(spec, path) {
                        Ok(entry) => entries.push(entry),
                        Err(mut p) => problems.append(&mut p),
                    }
                }
            }
            None => {
                for (path, text) in &files {
                    let parsed = parse_spec(path, text).and_then(|spec| {
                        if memo.is_some() {
                            specs.push(spec.clone());
                        }
                        Entry::from_spec(spec, path)
                    });
                    match parsed {
                        Ok(entry) => entries.push(entry),
                        Err(mut p) => problems.append(&mut p),
                    }
                }
            }
        }
        let mut seen = std::collections::HashMap::new();
        for entry in &entries {
            if let Some(first) = seen.insert(entry.id.clone(), entry.path.clone()) {
                problems.push(Problem {
                    file: entry.path.clone(),
                    entry: entry.id.clone(),
                    field: "id".into(),
                    message: format!("duplicate id, also in {}", first.display()),
                });
            }
        }
        for entry in &entries {
            for (i, other) in entry.supersedes.iter().enumerate() {
                if !seen.contains_key(other) {
                    problems.push(Problem {
                        file: entry.path.clone(),
                        entry: entry.id.clone(),
                        field: format!("supersedes[{i}]"),
                        message: format!("`{other}` is not an entry of this KB"),
                    });
                }
            }
        }
        let mut patterns = Vec::new();
        for (e, entry) in entries.iter().enumerate() {
            for (i, source) in entry.patterns.iter().enumerate() {
                if checked_before && problems.is_empty() {
                    patterns.push(Pattern::checked_before(e, i, source));
                    continue;
                }
                match Pattern::new(e, i, source) {
                    Ok(pattern) => patterns.push(pattern),
                    Err(message) => problems.push(Problem {
                        file: entry.path.clone(),
                        entry: entry.id.clone(),
                        field: format!("patterns[{i}]"),
                        message,
                    }),
                }
            }
        }
        if let Some(memo) = memo.filter(|_| !checked_before && problems.is_empty()) {
            // Best effort: a memo that cannot be written only costs the next load its checks.
            if let Ok(bytes) = serde_json::to_vec(&specs) {
                let _ = crate::cache::write_checked(&memo, &bytes);
                if let Some(dir) = memo.parent() {
                    crate::cache::prune(dir, "kb-checked-", crate::cache::KEEP);
                }
            }
        }
        let index: std::collections::HashMap<&str, usize> = entries
            .iter()
            .enumerate()
            .map(|(i, e)| (e.id.as_str(), i))
            .collect();
        let beats = entries
            .iter()
            .enumerate()
            .flat_map(|(w, e)| {
                e.supersedes
                    .iter()
                    .filter_map(|l| index.get(l.as_str()).map(|&l| (w, l)))
                    .collect::<Vec<_>>()
            })
            .collect();
        let kb = KnowledgeBase {
            entries,
            patterns,
            version,
            origin: origin.to_string(),
            beats,
        };
        (kb, problems)
    }

    /// This KB without its `progress` entries: the lines a healthy training loop prints at
    /// every step (iteration, loss, throughput). `faultline report` needs them to measure the
    /// training time kept; matching paths leave them out by default (`scan --progress-lines` keeps
    /// them), since one event per training step would flood the events topic and cost the scan
    /// several times its matching.
    pub fn without_progress(mut self) -> Self {
        let keep: Vec<bool> = self
            .entries
            .iter()
            .map(|e| e.category != PROGRESS_CATEGORY)
            .collect();
        if keep.iter().all(|k| *k) {
            return self;
        }
        let mut new_index = vec![usize::MAX; keep.len()];
        for (n, (i, _)) in keep.iter().enumerate().filter(|(_, k)| **k).enumerate() {
            new_index[i] = n;
        }
        let mut i = 0;
        self.entries.retain(|_| {
            i += 1;
            keep[i - 1]
        });
        self.patterns.retain(|p| keep[p.entry]);
        for p in &mut self.patterns {
            p.entry = new_index[p.entry];
        }
        self.beats = self
            .beats
            .iter()
            .filter(|(w, l)| keep[*w] && keep[*l])
            .map(|(w, l)| (new_index[*w], new_index[*l]))
            .collect();
        self
    }

    /// Which of two entries matching one line carries the event: the one a `supersedes` names
    /// as winner, else a specific entry over a catch-all (`fallback`), else by role (root,
    /// symptom, cascade, info), severity, and the entries' order (their ids). Context entries
    /// never compete: they are block lines, kept beside the event.
    pub fn wins(&self, a: usize, b: usize) -> bool {
        if self.beats.contains(&(a, b)) {
            return true;
        }
        if self.beats.contains(&(b, a)) {
            return false;
        }
        let (x, y) = (&self.entries[a], &self.entries[b]);
        (x.fallback, x.role, x.severity, a) < (y.fallback, y.role, y.severity, b)
    }

    /// Whether the KB states who wins when `a` and `b` match one line: a `supersedes` between
    /// them, or exactly one of them is a catch-all (or a context entry, which never competes).
    pub fn winner_stated(&self, a: usize, b: usize) -> bool {
        let (x, y) = (&self.entries[a], &self.entries[b]);
        self.beats.contains(&(a, b))
            || self.beats.contains(&(b, a))
            || x.fallback != y.fallback
            || x.category == "context"
            || y.category == "context"
    }

    /// The entry owning pattern `id`.
    pub fn entry_of(&self, pattern: usize) -> &Entry {
        &self.entries[self.patterns[pattern].entry]
    }

    /// Every distinct error code, sorted.
    pub fn error_codes(&self) -> Vec<&str> {
        let mut codes: Vec<&str> = self.entries.iter().map(|e| e.error_code.as_str()).collect();
        codes.sort_unstable();
        codes.dedup();
        codes
    }
}

/// Reads every `*.toml` under `dir`, recursively, as (relative path, text).
pub fn read_dir(dir: &Path) -> Result<Vec<KbFile>, KbError> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(current) = stack.pop() {
        let read = fs::read_dir(&current).map_err(|source| KbError::Io {
            path: current.clone(),
            source,
        })?;
        for item in read {
            let item = item.map_err(|source| KbError::Io {
                path: current.clone(),
                source,
            })?;
            let path = item.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "toml") {
                let text = fs::read_to_string(&path).map_err(|source| KbError::Io {
                    path: path.clone(),
                    source,
                })?;
                let rel = path.strip_prefix(dir).unwrap_or(&path).to_path_buf();
                files.push((rel, text));
            }
        }
    }
    files.sort();
    Ok(files)
}

/// Parses and validates one file's text.
pub fn parse_entry(path: &Path, text: &str) -> Result<Entry, Vec<Problem>> {
    Entry::from_spec(parse_spec(path, text)?, path)
}

/// One file's text as written, not validated yet.
fn parse_spec(path: &Path, text: &str) -> Result<EntrySpec, Vec<Problem>> {
    toml::from_str(text).map_err(|e| {
        vec![Problem {
            file: path.to_path_buf(),
            entry: sniff_id(text),
            field: toml_field(&e),
            message: e.message().to_string(),
        }]
    })
}

/// Best-effort id of a file that does not parse, so the error still names the entry.
fn sniff_id(text: &str) -> String {
    text.lines()
        .find_map(|l| {
            let rest = l
                .trim()
                .strip_prefix("id")?
                .trim_start()
                .strip_prefix('=')?;
            Some(rest.trim().trim_matches(['"', '\'']).to_string())
        })
        .unwrap_or_default()
}

/// The field a TOML error is about: serde names unknown and missing fields in its message.
fn toml_field(e: &toml::de::Error) -> String {
    let msg = e.message();
    for marker in ["unknown field `", "missing field `"] {
        if let Some(rest) = msg.split(marker).nth(1) {
            if let Some(field) = rest.split('`').next() {
                return field.to_string();
            }
        }
    }
    "(syntax)".to_string()
}

/// Compiles a pattern for confirming hits after checking the rules every engine relies on.
pub fn compile_pattern(source: &str) -> Result<Regex, String> {
    // The rules are checked on the syntax tree the regex is built from.
    confirm::build_regex(&checked_hir(source)?)
}

/// The rules every engine relies on: valid syntax, no `^`/`$` anchors, no empty match.
pub fn validate_pattern(source: &str) -> Result<(), String> {
    checked_hir(source).map(drop)
}

/// `source` parsed as the confirming regex reads it (bytes, no Unicode classes), once the rules
/// of [`validate_pattern`] hold.
fn checked_hir(source: &str) -> Result<Hir, String> {
    let hir = regex_syntax::ParserBuilder::new()
        .unicode(false)
        .utf8(false)
        .build()
        .parse(source)
        .map_err(|e| format!("not valid regex syntax: {e}"))?;
    if let Some(look) = forbidden_look(&hir) {
        return Err(format!(
            "uses the anchor {look}; patterns match anywhere in the message, so anchor on the \
             message's literal text instead of ^ or $"
        ));
    }
    if hir.properties().minimum_len() == Some(0) {
        return Err("can match the empty string".to_string());
    }
    Ok(hir)
}

fn forbidden_look(hir: &Hir) -> Option<&'static str> {
    match hir.kind() {
        HirKind::Look(look) => match look {
            Look::Start | Look::StartLF | Look::StartCRLF => Some("^ (or \\A)"),
            Look::End | Look::EndLF | Look::EndCRLF => Some("$ (or \\z)"),
            _ => None,
        },
        HirKind::Repetition(rep) => forbidden_look(&rep.sub),
        HirKind::Capture(cap) => forbidden_look(&cap.sub),
        HirKind::Concat(subs) | HirKind::Alternation(subs) => subs.iter().find_map(forbidden_look),
        HirKind::Empty | HirKind::Literal(_) | HirKind::Class(_) => None,
    }
}

/// FNV-1a over every path and text: a stable content hash (std's hasher is not stable).
fn content_hash(files: &[KbFile]) -> u64 {
    let mut hash = crate::record::Fnv::new();
    for (path, text) in files {
        hash.write(path.to_string_lossy().as_bytes());
        hash.write(&[0]);
        hash.write(text.as_bytes());
        hash.write(&[0]);
    }
    hash.finish()
}

/// The KB's version: the first 12 hex digits of [`content_hash`].
#[cfg(test)]
fn version_of(files: &[KbFile]) -> String {
    format!("{:016x}", content_hash(files))[..12].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kb_checked_before_loads_the_same_from_its_memo_and_parses_patterns_on_use() {
        let dir = tempfile::tempdir().expect("tempdir");
        let files = KnowledgeBase::embedded_files();
        let (fresh, problems) = KnowledgeBase::build(files.clone(), "t");
        assert!(problems.is_empty());
        let memos = || {
            fs::read_dir(dir.path())
                .expect("list")
                .filter(|e| {
                    let name = e.as_ref().expect("entry").file_name();
                    name.to_string_lossy().starts_with("kb-checked-")
                })
                .count()
        };
        assert_eq!(memos(), 0);
        let (first, problems) = KnowledgeBase::build_with(files.clone(), "t", Some(dir.path()));
        assert!(problems.is_empty());
        assert_eq!(memos(), 1, "a KB that passed is remembered");
        assert!(first.patterns.iter().all(Pattern::is_parsed));
        let (second, problems) = KnowledgeBase::build_with(files.clone(), "t", Some(dir.path()));
        assert!(problems.is_empty());
        assert!(
            second.patterns.iter().all(|p| !p.is_parsed()),
            "a remembered KB parses no pattern at load"
        );
        assert_eq!(
            format!("{:?}", second.entries),
            format!("{:?}", fresh.entries)
        );
        assert_eq!(second.version, fresh.version);
        assert_eq!(second.beats, fresh.beats);
        let sources = |kb: &KnowledgeBase| -> Vec<String> {
            kb.patterns
                .iter()
                .map(|p| format!("{} {} {}", p.entry, p.index, p.source))
                .collect()
        };
        assert_eq!(sources(&second), sources(&fresh));
        let (p, q) = (&second.patterns[7], &fresh.patterns[7]);
        assert_eq!(p.hir(), q.hir(), "parsed on first use, the same tree");
        assert!(p.is_parsed());

        // A corrupt memo is not trusted: every pattern is checked again, and the memo rewritten.
        for e in fs::read_dir(dir.path()).expect("list") {
            fs::write(e.expect("entry").path(), b"garbage").expect("corrupt");
        }
        let (third, problems) = KnowledgeBase::build_with(files, "t", Some(dir.path()));
        assert!(problems.is_empty());
        assert!(third.patterns.iter().all(Pattern::is_parsed));
    }

    #[test]
    fn a_kb_with_a_bad_pattern_is_never_remembered() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut files = KnowledgeBase::embedded_files();
        files.truncate(3);
        files[1].1 = files[1]
            .1
            .replacen("patterns = [", "patterns = [\n  '^anchored',", 1);
        for _ in 0..2 {
            let (_, problems) = KnowledgeBase::build_with(files.clone(), "t", Some(dir.path()));
            assert!(
                problems.iter().any(|p| p.message.contains("anchor")),
                "{problems:?}"
            );
        }
        assert_eq!(
            fs::read_dir(dir.path()).map(Iterator::count).unwrap_or(0),
            0
        );
    }

    #[test]
    fn anchors_and_empty_patterns_are_rejected() {
        assert!(compile_pattern("^foo").expect_err("anchored").contains('^'));
        assert!(compile_pattern("foo$").expect_err("anchored").contains('$'));
        assert!(compile_pattern("a*").expect_err("empty").contains("empty"));
        assert!(compile_pattern("(?P<rank>\\d+) died").is_ok());
    }

    #[test]
    fn patterns_are_bytewise_ascii() {
        let re = compile_pattern("rank \\d+").expect("valid");
        // A Unicode digit is not \d in byte mode, as in Hyperscan without UCP.
        assert!(!re.is_match("rank \u{0663}".as_bytes()));
        assert!(re.is_match(b"rank 3\xff"));
    }

    #[test]
    fn only_named_groups_capture_and_they_keep_their_spans() {
        let source =
            r"(NCCL|RCCL) (?:WARN|INFO) (rank|peer) (?P<rank>\d+)(,| on) (?P<host>[\w.-]+)";
        let re = compile_pattern(source).expect("valid");
        let info = re.group_info();
        // The implicit whole-match group and the two named ones; the three unnamed are gone.
        assert_eq!(info.group_len(regex_automata::PatternID::ZERO), 3);
        let names: Vec<_> = info
            .pattern_names(regex_automata::PatternID::ZERO)
            .collect();
        assert_eq!(names, [None, Some("rank"), Some("host")]);
        let line = b"x RCCL WARN peer 17 on node-3.example y";
        let mut caps = re.create_captures();
        re.captures(&line[..], &mut caps);
        let text = |name: &str| caps.get_group_by_name(name).map(|s| &line[s.range()]);
        assert_eq!(text("rank"), Some(&b"17"[..]));
        assert_eq!(text("host"), Some(&b"node-3.example"[..]));
        // The whole match is where the regex crate with every group capturing puts it.
        let full = regex::bytes::Regex::new(&format!("(?-u){source}")).expect("valid");
        let m = full.find(line).expect("matches");
        assert_eq!(caps.get_match().map(|m| m.range()), Some(m.range()));
    }

    #[test]
    fn version_changes_with_content() {
        let a = version_of(&[(PathBuf::from("a/b.toml"), "x".into())]);
        let b = version_of(&[(PathBuf::from("a/b.toml"), "y".into())]);
        assert_ne!(a, b);
        assert_eq!(a.len(), 12);
    }
}
