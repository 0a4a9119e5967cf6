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

impl Matcher for HyperscanMatcher {
    type Scratch = Scratch;

    fn name(&self) -> &'static str {
        ENGINE
    }

    fn scratch(&self) -> Result<Scratch, MatchError> {
        self.db.alloc_scratch().map_err(|e| MatchError::Database {
            engine: ENGINE,
            message: format!("cannot allocate scratch: {e}"),
        })
    }

    fn find(
        &self,
        scratch: &mut Scratch,
        haystack: &[u8],
        hits: &mut Vec<RawHit>,
    ) -> Result<(), MatchError> {
        if u32::try_from(haystack.len()).is_err() {
            return Err(MatchError::TooLarge(haystack.len()));
        }
        self.db
            .scan(
                haystack,
                scratch,
                |id: u32, _from: u64, to: u64, _flags: u32| {
                    // `to` <= haystack.len(), checked above to fit in u32.
                    hits.push(RawHit {
                        end: to as u32,
                        pattern: id,
                    });
                    Matching::Continue
                },
            )
            .map_err(|e| MatchError::Scan {
                engine: ENGINE,
                message: e.to_string(),
            })
    }
}
