//! The shipped engine: every KB pattern in one Hyperscan block-mode database, as itself or
//! (what `scan` and `run` compile, [`HyperscanMatcher::compile_plan`]) as its required literals.
//!
//! One `hs_scan` call covers a whole buffer of lines; the callback only records
//! `(end, pattern)`, so nothing is allocated per line and nothing is decoded per line.

use hyperscan::prelude::*;

use super::literals::Plan;
use super::{MatchError, Matcher, RawHit};
use crate::record::Fnv;

const ENGINE: &str = "Hyperscan";
const CACHE_MAGIC: &[u8] = b"FLHSDB01";

/// What [`HyperscanMatcher::compile_cached`] did with the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheUse {
    /// No cache directory, or it could not be written.
    Off,
    /// Compiled, and stored for next time.
    Stored,
    /// Loaded; nothing was compiled.
    Loaded,
}

/// What Hyperscan says of a database it compiles on this host (version, CPU features, mode):
/// part of a cache file's name, so that a database compiled for other CPU features (another
/// machine sharing the cache directory, or a run under an emulator such as valgrind) is never
/// loaded here. Empty when even a one-literal database does not compile.
fn host_features() -> &'static str {
    static FEATURES: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    FEATURES.get_or_init(|| {
        HyperscanMatcher::compile(&["faultline"])
            .ok()
            .and_then(|m| m.db.info().ok())
            .unwrap_or_default()
    })
}

/// A compiled Hyperscan database of all patterns; pattern id = index in the input slice.
pub struct HyperscanMatcher {
    db: BlockDatabase,
    patterns: usize,
    /// A prefiltered database's plan: what each database id stands for. `None`: database id =
    /// pattern id.
    plan: Option<Plan>,
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
            plan: None,
        })
    }

    /// Compiles `plan` ([`Plan`]: the patterns' required literals, and the patterns without
    /// any), through the cache as [`HyperscanMatcher::compile_cached`] does. A hit of a literal
    /// is reported as a hit of every pattern that requires it; the caller confirms each on its
    /// line.
    pub fn compile_plan(
        plan: Plan,
        cache_dir: Option<&std::path::Path>,
    ) -> Result<(Self, CacheUse), MatchError> {
        let (mut matcher, cache_use) =
            Self::compile_cached(&plan.expressions, cache_dir).map_err(|e| match e {
                MatchError::Pattern {
                    engine,
                    index,
                    pattern,
                    message,
                } => MatchError::Pattern {
                    engine,
                    index: plan
                        .targets(index as u32)
                        .first()
                        .map_or(index, |&p| p as usize),
                    pattern,
                    message,
                },
                other => other,
            })?;
        matcher.patterns = plan.patterns();
        matcher.plan = Some(plan);
        Ok((matcher, cache_use))
    }

    /// Like [`HyperscanMatcher::compile`], but keeps the compiled database in `cache_dir` and
    /// loads it from there next time: compiling the shipped KB takes a few hundred
    /// milliseconds, loading it a few. The file name is a hash of the patterns, the library
    /// version and the CPU features Hyperscan compiles for on this host ([`host_features`]); a
    /// file that is corrupt is recompiled and replaced. Cache problems are never errors: the
    /// database is compiled instead.
    pub fn compile_cached<S: AsRef<str>>(
        patterns: &[S],
        cache_dir: Option<&std::path::Path>,
    ) -> Result<(Self, CacheUse), MatchError> {
        let Some(dir) = cache_dir else {
            return Ok((Self::compile(patterns)?, CacheUse::Off));
        };
        let mut key = Fnv::new();
        key.write(hyperscan::version_str().to_bytes());
        key.write(host_features().as_bytes());
        for p in patterns {
            key.write(&[0]);
            key.write(p.as_ref().as_bytes());
        }
        let path = dir.join(format!("hs-{:016x}.db", key.finish()));
        if let Ok(bytes) = std::fs::read(&path) {
            if let Some(db) = Self::load(&bytes) {
                return Ok((
                    HyperscanMatcher {
                        db,
                        patterns: patterns.len(),
                        plan: None,
                    },
                    CacheUse::Loaded,
                ));
            }
        }
        let matcher = Self::compile(patterns)?;
        let stored = matcher.store(&path).is_ok();
        crate::cache::prune(dir, "hs-", 2 * crate::cache::KEEP);
        Ok((
            matcher,
            if stored {
                CacheUse::Stored
            } else {
                CacheUse::Off
            },
        ))
    }

    /// A cache file: magic, FNV-64 of the payload, then Hyperscan's serialized database.
    /// Hyperscan's own check accepts a database built for fewer CPU features than the host has
    /// (it runs, slower), which is why the features are part of the file name.
    fn load(bytes: &[u8]) -> Option<BlockDatabase> {
        let rest = bytes.strip_prefix(CACHE_MAGIC)?;
        let (sum, payload) = rest.split_at_checked(8)?;
        let mut fnv = Fnv::new();
        fnv.write(payload);
        if sum != fnv.finish().to_le_bytes() {
            return None;
        }
        // Hyperscan checks the version, the platform and its own checksum.
        hyperscan::SerializedDatabase::deserialize(&payload).ok()
    }

    fn store(&self, path: &std::path::Path) -> std::io::Result<()> {
        let payload = self.db.serialize().map_err(std::io::Error::other)?;
        let mut fnv = Fnv::new();
        fnv.write(&payload);
        let mut bytes = CACHE_MAGIC.to_vec();
        bytes.extend(fnv.finish().to_le_bytes());
        bytes.extend_from_slice(&payload);
        crate::cache::write_whole(path, &bytes)
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
        let plan = self.plan.as_ref();
        let on_match = |id: u32, _from: u64, to: u64, _flags: u32| {
            // `to` <= haystack.len(), checked above to fit in u32. A pattern with a variable
            // tail (`[^\n]+`, `(?:, pid=\d+)?`) reports every end; one hit per line is all the
            // engine needs, so later ends on the same line are dropped here.
            let to = to as u32;
            let one = [id];
            let patterns = plan.map_or(&one[..], |p| p.targets(id));
            for &pattern in patterns {
                if let Some(last) = last_end.get_mut(pattern as usize) {
                    let same_line = *last != u32::MAX && same_line(haystack, *last, to);
                    *last = to;
                    if same_line {
                        continue;
                    }
                }
                hits.push(RawHit { end: to, pattern });
            }
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

/// Whether the match ends `a` and `b` fall on the same line of `haystack`. Hyperscan reports a
/// pattern's matches in the order of their ends as far as anyone has seen here, but does not
/// promise it: either order is taken, since a panic in this callback would abort the process.
fn same_line(haystack: &[u8], a: u32, b: u32) -> bool {
    let (lo, hi) = (a.min(b) as usize, a.max(b) as usize);
    haystack
        .get(lo..hi)
        .is_some_and(|between| memchr::memchr(b'\n', between).is_none())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(m: &HyperscanMatcher, text: &[u8]) -> Vec<RawHit> {
        let mut scratch = m.scratch().expect("scratch");
        let mut hits = Vec::new();
        m.find(&mut scratch, text, &mut hits).expect("scan");
        hits
    }

    #[test]
    fn match_ends_on_one_line_in_either_order() {
        let text = b"ab\ncd";
        assert!(same_line(text, 0, 2));
        assert!(same_line(text, 2, 0), "an earlier end after a later one");
        assert!(!same_line(text, 1, 4));
        assert!(!same_line(text, 4, 1));
        assert!(same_line(text, 3, 3));
        assert!(
            !same_line(text, 3, 9),
            "past the haystack: not known to be one line"
        );
    }

    #[test]
    fn cached_database_is_stored_loaded_and_replaced_when_corrupt() {
        let dir = tempfile::tempdir().expect("tmp");
        let patterns = ["boom \\d+", "Xid[^\\n]*79"];
        let (a, first) =
            HyperscanMatcher::compile_cached(&patterns, Some(dir.path())).expect("compiles");
        assert_eq!(first, CacheUse::Stored);
        let (b, second) =
            HyperscanMatcher::compile_cached(&patterns, Some(dir.path())).expect("loads");
        assert_eq!(second, CacheUse::Loaded);
        let text = b"boom 1\nXid 79\nnothing\n";
        assert_eq!(scan(&a, text), scan(&b, text));
        assert_eq!(scan(&b, text).len(), 2);
        // Corrupt every cache file: the next call compiles again.
        for entry in std::fs::read_dir(dir.path()).expect("dir") {
            let path = entry.expect("entry").path();
            let mut bytes = std::fs::read(&path).expect("read");
            let last = bytes.len() - 1;
            bytes[last] ^= 0xff;
            std::fs::write(&path, bytes).expect("write");
        }
        let (_, third) =
            HyperscanMatcher::compile_cached(&patterns, Some(dir.path())).expect("compiles");
        assert_eq!(third, CacheUse::Stored);
        // Other patterns never load this database.
        let (_, other) =
            HyperscanMatcher::compile_cached(&["boom"], Some(dir.path())).expect("compiles");
        assert_eq!(other, CacheUse::Stored);
    }

    #[test]
    fn the_cache_key_names_this_hosts_cpu_features() {
        // What Hyperscan reports for a database compiled here: version, features and mode.
        let info = host_features();
        let version = hyperscan::version_str().to_string_lossy().into_owned();
        let number = version.split_whitespace().next().unwrap_or_default();
        assert!(info.contains(number), "{info} / {version}");
        assert!(info.contains("Features:"), "{info}");
    }

    #[test]
    fn a_planned_database_reports_a_literal_hit_as_every_pattern_that_needs_it() {
        let patterns = [
            r"ncclSystemError: [^\n]{0,40}failed",
            r"ncclSystemError: \w+ refused",
            r"Xid \d+",
        ];
        let plan = Plan::new(&patterns, patterns.len(), 8);
        assert_eq!(plan.literal_counts(), (2, 1), "two share one literal");
        let (m, _) = HyperscanMatcher::compile_plan(plan, None).expect("compiles");
        let text = b"ncclSystemError: x\nok\nXid 79\n";
        let mut hits: Vec<(u32, u32)> = scan(&m, text)
            .into_iter()
            .map(|h| (h.end, h.pattern))
            .collect();
        hits.sort_unstable();
        // A superset of the patterns' hits (the engine's regexes decide); the whole one as itself.
        assert_eq!(hits, [(17, 0), (17, 1), (27, 2)]);
    }

    #[test]
    fn one_hit_per_pattern_per_line() {
        let m = HyperscanMatcher::compile(&["KeyError: [^\\n]+"]).expect("compiles");
        let hits = scan(&m, b"KeyError: 'abc'\nKeyError: 'de'\n");
        assert_eq!(hits.len(), 2, "{hits:?}");
    }
}
