//! Multi-pattern matching behind one small trait.
//!
//! A [`Matcher`] reports raw hits, `(pattern id, end offset)`, over a haystack of one or many
//! lines. It knows nothing of lines, entries or captures: [`crate::engine`] maps hits to lines,
//! confirms each on its own line and extracts captures. Hyperscan ([`hyperscan`]) is what ships;
//! the plain `regex` implementation ([`regex`]) is the oracle that tests and `kb check` compare
//! it against.

pub mod hyperscan;
pub mod literals;
pub mod regex;

pub use self::hyperscan::HyperscanMatcher;
pub use self::regex::RegexMatcher;

/// A pattern that matched, ending at byte `end` (exclusive) of the haystack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct RawHit {
    /// Offset one past the last byte of the match. First field, so hits sort by position.
    pub end: u32,
    /// Dense pattern id: the index into [`crate::kb::KnowledgeBase::patterns`].
    pub pattern: u32,
}

/// Errors of the matching engines.
#[derive(Debug, thiserror::Error)]
pub enum MatchError {
    /// One pattern is rejected on its own.
    #[error("pattern {index} (`{pattern}`) does not compile in {engine}: {message}")]
    Pattern {
        /// The engine that rejected it ([`Matcher::name`]).
        engine: &'static str,
        /// Position of the pattern in the compiled list (its pattern id).
        index: usize,
        /// The pattern's source.
        pattern: String,
        /// The engine's reason.
        message: String,
    },
    /// The patterns do not compile as one database, or its scratch cannot be allocated.
    #[error("the {engine} database does not compile: {message}")]
    Database {
        /// The engine that failed ([`Matcher::name`]).
        engine: &'static str,
        /// The engine's reason.
        message: String,
    },
    /// The engine failed while scanning.
    #[error("scanning failed in {engine}: {message}")]
    Scan {
        /// The engine that failed ([`Matcher::name`]).
        engine: &'static str,
        /// The engine's reason.
        message: String,
    },
    /// A haystack of 4 GiB or more (hit offsets are `u32`); carries its length in bytes.
    #[error("a haystack of {0} bytes is larger than the engine's 4 GiB limit")]
    TooLarge(usize),
}

/// A compiled set of patterns that can scan bytes.
///
/// Compile once and share (`Arc`); each worker owns one [`Matcher::Scratch`].
pub trait Matcher: Send + Sync {
    /// Per-worker mutable state (Hyperscan's scratch space).
    type Scratch: Send;

    /// Short engine name for messages.
    fn name(&self) -> &'static str;

    /// Allocates a scratch for one worker.
    fn scratch(&self) -> Result<Self::Scratch, MatchError>;

    /// Appends every hit in `haystack` to `hits`. Lines are separated by `\n`; a hit is
    /// reported at least once for every line on which its pattern matches, and possibly for
    /// spans crossing lines, which the caller discards when it confirms the hit on its line.
    fn find(
        &self,
        scratch: &mut Self::Scratch,
        haystack: &[u8],
        hits: &mut Vec<RawHit>,
    ) -> Result<(), MatchError>;
}
