//! The oracle: the same patterns, one line at a time, with the `regex` crate.
//!
//! Slow and obviously correct. `kb check` and the tests compare the shipped engine against it;
//! it never runs in production paths.

use aho_corasick::{AhoCorasick, MatchKind};
use regex_automata::meta::{self, Regex};
use regex_automata::util::syntax;
use regex_syntax::hir::literal::Extractor;

use super::{MatchError, Matcher, RawHit};

const ENGINE: &str = "regex";

/// Every pattern as its own `Regex`, each tried on every line.
///
/// One regex per pattern rather than one `RegexSet`: a set of three thousand patterns outgrows
/// the lazy DFA's cache, falls back to the PikeVM on every line, and took minutes of CPU and a
/// quarter of a gigabyte for `kb check` (which `run` performs on a KB directory it has not
/// checked before). Each regex alone keeps its own literal prefilter, so most patterns reject a
/// line at a memchr; the lazy DFA is left out, as its cache per pattern is most of the memory
/// three thousand regexes take.
///
/// Calling every regex on every line still cost `kb check` most of its minute and a half with
/// 4,688 patterns (about 600 ns a call, most of them rejections). So the regex crate's own
/// literal extractor gives each pattern its prefixes (every match starts with one of them), one
/// Aho-Corasick automaton finds which prefixes a line holds, and only their patterns (and those
/// with no finite set of prefixes) run their regex. Neither Hyperscan nor faultline's own literal
/// code takes part, so the oracle stays independent of the engine it checks.
#[derive(Debug)]
pub struct RegexMatcher {
    regexes: Vec<Regex>,
    prefixes: Prefixes,
}

/// Which patterns a line may match, from their prefixes.
#[derive(Debug)]
struct Prefixes {
    /// Every pattern's prefixes; a match's pattern id indexes `owners`.
    automaton: Option<AhoCorasick>,
    /// The patterns each prefix belongs to.
    owners: Vec<Vec<u32>>,
    /// Patterns without a usable prefix set: tried on every line.
    always: Vec<u32>,
}

impl Prefixes {
    fn build(sources: &[&str]) -> Self {
        let mut literals: Vec<Vec<u8>> = Vec::new();
        let mut index = std::collections::HashMap::<Vec<u8>, usize>::new();
        let mut owners: Vec<Vec<u32>> = Vec::new();
        let mut always = Vec::new();
        for (pattern, source) in sources.iter().enumerate() {
            let pattern = pattern as u32;
            let Some(prefixes) = literal_prefixes(source) else {
                always.push(pattern);
                continue;
            };
            for literal in prefixes {
                let slot = *index.entry(literal.clone()).or_insert_with(|| {
                    literals.push(literal);
                    owners.push(Vec::new());
                    owners.len() - 1
                });
                if owners[slot].last() != Some(&pattern) {
                    owners[slot].push(pattern);
                }
            }
        }
        let automaton = AhoCorasick::builder()
            .match_kind(MatchKind::Standard)
            .build(&literals)
            .ok();
        if automaton.is_none() {
            // No automaton: every pattern is tried on every line, as before it.
            always = (0..sources.len() as u32).collect();
            owners.clear();
        }
        Prefixes {
            automaton,
            owners,
            always,
        }
    }

    /// The patterns that may match `line`, ascending, into `out`.
    fn candidates(&self, line: &[u8], out: &mut Vec<u32>) {
        out.clear();
        out.extend_from_slice(&self.always);
        if let Some(automaton) = &self.automaton {
            for m in automaton.find_overlapping_iter(line) {
                out.extend_from_slice(&self.owners[m.pattern().as_usize()]);
            }
        }
        out.sort_unstable();
        out.dedup();
    }
}

/// The literals every match of `source` starts with (so a line it matches holds one of them), by
/// the regex crate's own extractor on the same syntax as [`RegexMatcher::compile`]; `None` when
/// there is no finite set or one of them is empty (the pattern can start anywhere with anything).
pub fn literal_prefixes(source: &str) -> Option<Vec<Vec<u8>>> {
    let hir = regex_syntax::ParserBuilder::new()
        .unicode(false)
        .utf8(false)
        .build()
        .parse(source)
        .ok()?;
    let seq = Extractor::new().extract(&hir);
    let literals = seq.literals()?;
    if literals.is_empty() || literals.iter().any(|l| l.as_bytes().is_empty()) {
        return None;
    }
    Some(literals.iter().map(|l| l.as_bytes().to_vec()).collect())
}

impl RegexMatcher {
    /// Compiles `patterns` with the same byte-wise ASCII semantics as the Hyperscan database.
    pub fn compile<S: AsRef<str>>(patterns: &[S]) -> Result<Self, MatchError> {
        let regexes = patterns
            .iter()
            .enumerate()
            .map(|(index, p)| {
                let source = p.as_ref();
                let error = |message: String| MatchError::Pattern {
                    engine: ENGINE,
                    index,
                    pattern: source.to_string(),
                    message,
                };
                crate::kb::validate_pattern(source).map_err(error)?;
                Regex::builder()
                    .syntax(syntax::Config::new().unicode(false).utf8(false))
                    .configure(meta::Config::new().hybrid(false).dfa(false))
                    .build(source)
                    .map_err(|e| error(e.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let sources: Vec<&str> = patterns.iter().map(AsRef::as_ref).collect();
        Ok(RegexMatcher {
            regexes,
            prefixes: Prefixes::build(&sources),
        })
    }
}

impl Matcher for RegexMatcher {
    type Scratch = ();

    fn name(&self) -> &'static str {
        ENGINE
    }

    fn scratch(&self) -> Result<(), MatchError> {
        Ok(())
    }

    fn find(&self, _: &mut (), haystack: &[u8], hits: &mut Vec<RawHit>) -> Result<(), MatchError> {
        let end =
            u32::try_from(haystack.len()).map_err(|_| MatchError::TooLarge(haystack.len()))?;
        let mut start = 0usize;
        let mut candidates = Vec::new();
        while start <= haystack.len() {
            let line_end =
                memchr::memchr(b'\n', &haystack[start..]).map_or(haystack.len(), |i| start + i);
            let line = &haystack[start..line_end];
            self.prefixes.candidates(line, &mut candidates);
            for &pattern in &candidates {
                if !self.regexes[pattern as usize].is_match(line) {
                    continue;
                }
                // Any offset inside the line identifies it; report the line's end.
                hits.push(RawHit {
                    end: (line_end as u32).min(end),
                    pattern,
                });
            }
            start = line_end + 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every pattern tried on the line with its regex alone: what the prefilter must agree with.
    fn plain(patterns: &[&str], line: &[u8]) -> Vec<u32> {
        let m = RegexMatcher::compile(patterns).expect("compiles");
        (0..patterns.len() as u32)
            .filter(|&p| m.regexes[p as usize].is_match(line))
            .collect()
    }

    fn found(patterns: &[&str], line: &[u8]) -> Vec<u32> {
        let m = RegexMatcher::compile(patterns).expect("compiles");
        let mut hits = Vec::new();
        m.find(&mut (), line, &mut hits).expect("scans");
        hits.iter().map(|h| h.pattern).collect()
    }

    #[test]
    fn the_prefix_prefilter_finds_what_every_regex_alone_finds() {
        let patterns = [
            r"CUDA error: out of memory",
            r"(?i)nccl warn",
            r"(?:Xid|XID) \(PCI:[^)]*\): (?P<xid>\d+)",
            r"\d+ bytes",
            r"[a-z]+ failed",
            r"\bKilled\b",
            r"(?:remote access|local protection) error",
        ];
        let lines: [&[u8]; 9] = [
            b"RuntimeError: CUDA error: out of memory",
            b"host:1:2 [0] NcCl WaRn bootstrap",
            b"NVRM: Xid (PCI:0000:3b:00): 79, pid=1",
            b"allocated 4096 bytes",
            b"cudaMalloc failed",
            b"Killed",
            b"status 10 (remote access error)",
            b"nothing to see here",
            b"",
        ];
        for line in lines {
            let want = plain(&patterns, line);
            assert_eq!(
                found(&patterns, line),
                want,
                "{:?}",
                String::from_utf8_lossy(line)
            );
        }
        // The lines were chosen so that every pattern matches one of them.
        let all: std::collections::BTreeSet<u32> =
            lines.iter().flat_map(|l| plain(&patterns, l)).collect();
        assert_eq!(all.len(), patterns.len());
    }

    #[test]
    fn patterns_without_finite_prefixes_are_tried_on_every_line() {
        let p = Prefixes::build(&[r"[a-z]+ failed", r"CUDA error", r"(?i)nccl warn", r".*x"]);
        // A repetition of a class has too many prefixes to spell out; `.*` has an empty one.
        assert!(p.always.contains(&0), "{:?}", p.always);
        assert!(p.always.contains(&3), "{:?}", p.always);
        assert!(!p.always.contains(&1), "{:?}", p.always);
        let mut out = Vec::new();
        p.candidates(b"no literal of any pattern", &mut out);
        assert!(!out.contains(&1) && !out.contains(&2), "{out:?}");
        p.candidates(b"a CUDA error and an NCCL WARN", &mut out);
        assert!(out.contains(&1) && out.contains(&2), "{out:?}");
    }
}
