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
#[derive(Debug, Clone, Default, PartialEq, Eq)]
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
