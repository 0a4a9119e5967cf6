//! The oracle: the same patterns, one line at a time, with the `regex` crate.
//!
//! Slow and obviously correct. `kb check` and the tests compare the shipped engine against it;
//! it never runs in production paths.

use regex::bytes::{RegexSet, RegexSetBuilder};

use super::{MatchError, Matcher, RawHit};

const ENGINE: &str = "regex";

/// Every pattern in one `RegexSet`, applied line by line.
#[derive(Debug)]
pub struct RegexMatcher {
    set: RegexSet,
}

impl RegexMatcher {
    /// Compiles `patterns` with the same byte-wise ASCII semantics as the Hyperscan database.
    pub fn compile<S: AsRef<str>>(patterns: &[S]) -> Result<Self, MatchError> {
        for (index, p) in patterns.iter().enumerate() {
            crate::kb::compile_pattern(p.as_ref()).map_err(|message| MatchError::Pattern {
                engine: ENGINE,
                index,
                pattern: p.as_ref().to_string(),
                message,
            })?;
        }
        let set = RegexSetBuilder::new(patterns.iter().map(AsRef::as_ref))
            .unicode(false)
            .size_limit(256 << 20)
            // Room for the lazy DFA's states over a thousand patterns: with the default it
            // gives up and every line runs through the PikeVM (`kb check`'s main cost).
            .dfa_size_limit(64 << 20)
            .build()
            .map_err(|e| MatchError::Database {
                engine: ENGINE,
                message: e.to_string(),
            })?;
        Ok(RegexMatcher { set })
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
            for pattern in self.set.matches(&haystack[start..line_end]).iter() {
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
