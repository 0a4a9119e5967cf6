//! The input vocabulary: what one log line is, where it came from, and which job it belongs to.
//!
//! Sources (files, stdin, Kafka) produce raw bytes; [`crate::envelope`] turns each line into a
//! [`LogRecord`] view; the matcher and the enricher read it. Nothing here allocates per line
//! except the optional owned message of a JSON envelope.

use std::borrow::Cow;
use std::fmt;

use serde::Serialize;

/// Where a line came from, precise enough to find it again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Provenance {
    /// A line of a file (or of stdin, named `-`); `line` counts from 1.
    File {
        /// The input's name: its path as given or found, `-` for stdin.
        path: String,
        /// Line number within the file, from 1.
        line: u64,
    },
    /// A Kafka record; `line` is the line's index inside a multi-line payload, from 1.
    Kafka {
        /// Topic the record was read from.
        topic: String,
        /// Partition of that topic.
        partition: i32,
        /// The record's offset within its partition.
        offset: i64,
        /// Index of the line inside the record's payload, from 1.
        line: u64,
    },
}

impl fmt::Display for Provenance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Provenance::File { path, line } => write!(f, "{path}:{line}"),
            Provenance::Kafka {
                topic,
                partition,
                offset,
                line,
            } => write!(f, "{topic}/{partition}@{offset}#{line}"),
        }
    }
}

/// Fields that a shipper's envelope or a launcher prefix told us about a line.
///
/// All optional: a raw line from a file knows none of them.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct LineMeta {
    /// The job the line belongs to, as the envelope named it.
    pub job_id: Option<String>,
    /// Rank of the process that wrote the line, from the envelope or a launcher prefix.
    pub rank: Option<u32>,
    /// Host (node) name the line came from.
    pub host: Option<String>,
    /// Kubernetes pod name, when the shipper recorded one.
    pub pod: Option<String>,
    /// The line's timestamp as found (RFC 3339 or a leading ISO 8601 stamp); [`crate::time::parse`]
    /// reads it.
    pub timestamp: Option<String>,
    /// Extra envelope fields kept for metrics dimensions (for example `cluster`).
    pub cluster: Option<String>,
    /// Where the line came from, as far as the line itself tells.
    pub origin: Origin,
}

// By hand for `clone_from`; its destructuring makes a new field a compile error here.
impl Clone for LineMeta {
    fn clone(&self) -> Self {
        let mut meta = LineMeta::default();
        meta.clone_from(self);
        meta
    }

    /// Field by field, so that a string already held is overwritten in place (the unknown
    /// lines' buffer reuses its slots this way, without allocating per line).
    fn clone_from(&mut self, source: &Self) {
        let LineMeta {
            job_id,
            rank,
            host,
            pod,
            timestamp,
            cluster,
            origin,
        } = source;
        self.job_id.clone_from(job_id);
        self.rank = *rank;
        self.host.clone_from(host);
        self.pod.clone_from(pod);
        self.timestamp.clone_from(timestamp);
        self.cluster.clone_from(cluster);
        self.origin = *origin;
    }
}

/// What kind of stream a line came from, as far as the line itself tells: a node's own log
/// (kernel, journald, a node daemon: its events belong to the jobs on that host), a shipper's
/// JSON envelope (a job only when the envelope names one), or plain text (a job's output).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Origin {
    /// Plain text, nothing says whose.
    #[default]
    Text,
    /// A syslog or journald line (`Nov 29 09:02:41 host kernel: ...`): a node's own log.
    NodeLog,
    /// A JSON envelope of a log shipper.
    Envelope,
}

/// One decoded log line: the message to match and what is known about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRecord<'a> {
    /// The text that patterns are matched against: the envelope's message, launcher prefix
    /// stripped. Borrowed from the input unless the envelope had to be unescaped.
    pub message: Cow<'a, [u8]>,
    /// What the envelope or launcher prefix told us about the line.
    pub meta: LineMeta,
    /// True when the line was longer than the configured limit and was cut.
    pub truncated: bool,
}

/// Lines in a buffer as every driver counts them: its newlines, plus one for a last line
/// without one (a buffer of one line cut at the line limit is one line too).
pub fn line_count(data: &[u8]) -> u64 {
    memchr::memchr_iter(b'\n', data).count() as u64
        + u64::from(data.last().is_some_and(|&b| b != b'\n'))
}

/// The longest job id, host, pod or cluster name kept as it is, in bytes. Such fields become
/// keys (of incidents, miners, metrics dimensions, page filters): a longer one is cut by
/// [`cap_key`], so that memory and page sizes are bounded by the documented caps of
/// `docs/limits.md` whatever a shipper sends.
pub const MAX_KEY_BYTES: usize = 256;

/// `value` when it is at most [`MAX_KEY_BYTES`] long; else its head, cut at a character
/// boundary, followed by `~` and 16 hex digits of a hash of the whole value, so that distinct
/// long values stay distinct keys and the result is exactly deterministic.
pub fn cap_key(value: &str) -> Cow<'_, str> {
    if value.len() <= MAX_KEY_BYTES {
        return Cow::Borrowed(value);
    }
    const SUFFIX: usize = 1 + 16;
    let mut head = MAX_KEY_BYTES - SUFFIX;
    while !value.is_char_boundary(head) {
        head -= 1;
    }
    Cow::Owned(format!(
        "{}~{:016x}",
        &value[..head],
        fnv1a64(value.as_bytes())
    ))
}

/// [`cap_key`] of an owned value, without a copy when it is short enough.
pub fn cap_key_owned(value: String) -> String {
    match cap_key(&value) {
        Cow::Borrowed(_) => value,
        Cow::Owned(capped) => capped,
    }
}

/// FNV-1a, 64 bits: stable across releases and platforms (a key suffix must not change when
/// the binary does).
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h = Fnv::new();
    h.write(bytes);
    h.finish()
}

/// FNV-1a, 64 bits, fed piece by piece: a stable hash for cache keys and checksums (std's
/// hasher is not stable).
pub struct Fnv(u64);

impl Fnv {
    /// The hash of nothing.
    pub fn new() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

    /// Feeds `bytes`.
    pub fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }

    /// The hash so far.
    pub fn finish(&self) -> u64 {
        self.0
    }
}

impl Default for Fnv {
    fn default() -> Self {
        Self::new()
    }
}

/// C1 controls and the format characters that reorder or hide text (bidirectional overrides
/// and isolates, zero-width characters, the byte order mark): shown, never passed through, by
/// every output for people (pages and terminals alike).
pub fn is_invisible(c: char) -> bool {
    matches!(c,
        '\u{80}'..='\u{9f}'
        | '\u{200b}'..='\u{200f}'
        | '\u{202a}'..='\u{202e}'
        | '\u{2060}'..='\u{2064}'
        | '\u{2066}'..='\u{2069}'
        | '\u{feff}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_keys_are_cut_with_a_hash_that_keeps_them_distinct() {
        assert!(matches!(cap_key("job-1"), Cow::Borrowed("job-1")));
        let exact = "j".repeat(MAX_KEY_BYTES);
        assert_eq!(cap_key(&exact), exact.as_str());
        let a = format!("{}a", "x".repeat(100_000));
        let b = format!("{}b", "x".repeat(100_000));
        let (ca, cb) = (cap_key(&a), cap_key(&b));
        assert_eq!(ca.len(), MAX_KEY_BYTES);
        assert_ne!(ca, cb, "distinct ids stay distinct");
        assert_eq!(ca, cap_key(&a), "deterministic");
        assert!(ca.starts_with("xxxx") && ca.contains('~'), "{ca}");
        // A multi-byte character across the cut is not split.
        let wide = "é".repeat(300);
        let c = cap_key(&wide);
        assert!(c.len() <= MAX_KEY_BYTES, "{}", c.len());
        assert!(c.starts_with("éé"));
        assert_eq!(cap_key_owned(a.clone()), ca.into_owned());
    }
}
