//! The shipped engine: every KB pattern in one Hyperscan block-mode database.
//!
//! One `hs_scan` call covers a whole buffer of lines; the callback only records
//! `(end, pattern)`, so nothing is allocated per line and nothing is decoded per line.

use hyperscan::prelude::*;

use super::{MatchError, Matcher, RawHit};

const ENGINE: &str = "Hyperscan";

/// A compiled Hyperscan database of all patterns; pattern id = index in the input slice.
pub struct HyperscanMatcher {
    db: BlockDatabase,
    patterns: usize,
}

impl std::fmt::Debug for HyperscanMatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HyperscanMatcher")
            .field("patterns", &self.patterns)
            .finish()
    }
}

fn to_pattern(index: usize, source: &str) -> Result<Pattern, MatchError> {
    let mut pattern = Pattern::new(source).map_err(|e| MatchError::Pattern {
        engine: ENGINE,
        index,
        pattern: source.to_string(),
        message: e.to_string(),
    })?;
    pattern.id = Some(index);
    Ok(pattern)
}

impl HyperscanMatcher {
    /// Compiles `patterns` into one database.
    pub fn compile<S: AsRef<str>>(patterns: &[S]) -> Result<Self, MatchError> {
        let list = patterns
            .iter()
            .enumerate()
            .map(|(i, p)| to_pattern(i, p.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        if list.is_empty() {
            return Err(MatchError::Database {
                engine: ENGINE,
                message: "no patterns".to_string(),
            });
        }
        let db: BlockDatabase = Patterns(list).build().map_err(|e| {
            // Hyperscan names the failing expression; report it as a pattern error.
            let message = e.to_string();
            match &e {
                hyperscan::Error::Hyperscan(hyperscan::HsError::CompileError(ce)) => {
                    match ce.expression() {
                        Some(index) if index < patterns.len() => MatchError::Pattern {
                            engine: ENGINE,
                            index,
                            pattern: patterns[index].as_ref().to_string(),
                            message: ce.message().to_string(),
                        },
                        _ => MatchError::Database {
                            engine: ENGINE,
                            message,
                        },
                    }
                }
                _ => MatchError::Database {
                    engine: ENGINE,
                    message,
                },
            }
        })?;
        Ok(HyperscanMatcher {
            db,
            patterns: patterns.len(),
        })
    }

    /// Compiles one pattern alone: `kb check` uses it to name the pattern that fails.
    pub fn check_one(source: &str) -> Result<(), MatchError> {
        Self::compile(&[source]).map(|_| ())
    }
}

/// A worker's Hyperscan scratch, plus where each pattern last hit during the current call.
pub struct HsScratch {
    scratch: Scratch,
    /// Per pattern: end of its last reported hit in this call, or `u32::MAX`.
    last_end: Vec<u32>,
}

impl Matcher for HyperscanMatcher {
    type Scratch = HsScratch;

    fn name(&self) -> &'static str {
        ENGINE
    }

    fn scratch(&self) -> Result<HsScratch, MatchError> {
        let scratch = self.db.alloc_scratch().map_err(|e| MatchError::Database {
            engine: ENGINE,
            message: format!("cannot allocate scratch: {e}"),
        })?;
        Ok(HsScratch {
            scratch,
            last_end: vec![u32::MAX; self.patterns],
        })
    }

    fn find(
        &self,
        scratch: &mut HsScratch,
        haystack: &[u8],
        hits: &mut Vec<RawHit>,
    ) -> Result<(), MatchError> {
        if u32::try_from(haystack.len()).is_err() {
            return Err(MatchError::TooLarge(haystack.len()));
        }
        let HsScratch { scratch, last_end } = scratch;
        last_end.fill(u32::MAX);
        let on_match = |id: u32, _from: u64, to: u64, _flags: u32| {
            // `to` <= haystack.len(), checked above to fit in u32. A pattern with a variable
            // tail (`[^\n]+`, `(?:, pid=\d+)?`) reports every end; one hit per line is all the
            // engine needs, so later ends on the same line are dropped here.
            let to = to as u32;
            if let Some(last) = last_end.get_mut(id as usize) {
                let same_line = *last != u32::MAX
                    && memchr::memchr(b'\n', &haystack[*last as usize..to as usize]).is_none();
                *last = to;
                if same_line {
                    return Matching::Continue;
                }
            }
            hits.push(RawHit {
                end: to,
                pattern: id,
            });
            Matching::Continue
        };
        self.db
            .scan(haystack, scratch, on_match)
            .map_err(|e| MatchError::Scan {
                engine: ENGINE,
                message: e.to_string(),
            })
    }
}
