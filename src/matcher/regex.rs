//! The oracle: the same patterns, one line at a time, with the `regex` crate.
//!
//! Slow and obviously correct. `kb check` and the tests compare the shipped engine against it;
//! it never runs in production paths.

use regex_automata::meta::{self, Regex};
use regex_automata::util::syntax;

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
#[derive(Debug)]
pub struct RegexMatcher {
    regexes: Vec<Regex>,
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
        Ok(RegexMatcher { regexes })
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
        while start <= haystack.len() {
            let line_end =
                memchr::memchr(b'\n', &haystack[start..]).map_or(haystack.len(), |i| start + i);
            let line = &haystack[start..line_end];
            for (pattern, re) in self.regexes.iter().enumerate() {
                if !re.is_match(line) {
                    continue;
                }
                // Any offset inside the line identifies it; report the line's end.
                hits.push(RawHit {
                    end: (line_end as u32).min(end),
                    pattern: pattern as u32,
                });
            }
            start = line_end + 1;
        }
        Ok(())
    }
}
