//! Crash notes: finding, across restarts, a record whose matching kills the process (an abort
//! in native code, an OOM kill, a stack overflow: what [`crate::isolation`] cannot catch), so
//! that a crash loop ends with that record in the dead-letter topic (reason `crashed_process`)
//! instead of going on forever.
//!
//! Before the match stage matches records, it notes their offset range per partition in a small
//! file under `pipeline.state_dir`, written atomically (a temporary file renamed over the old
//! one); when it goes idle it clears the note. A process that dies while matching leaves its
//! note behind, and the next one reads it at start:
//!
//! 1. the first crash over a range makes it a suspect (crashes 1); nothing else changes, since a
//!    SIGKILL or a node failure also leaves a note;
//! 2. a second crash whose note overlaps the suspect narrows it to the overlap (crashes 2): the
//!    records there are now matched one at a time, each under a note of its own;
//! 3. the next crash therefore notes exactly one record (crashes 3), and the next process
//!    dead-letters that record without matching it, and moves on.
//!
//! So a record that kills the process costs three restarts, whatever the batch size. A suspect
//! that a process gets through without crashing is dropped, as is one whose offsets the
//! partition has passed. A note that does not overlap the suspect replaces it (another cause).
//!
//! Why one record at a time after the second crash rather than halving the range on each
//! restart: halving needs about `log2(batch)` more restarts (ten for a batch of 1,000), each
//! costing a rebalance and the re-reading of everything uncommitted; matching a suspect batch
//! one record at a time costs one note per record, microseconds each.
//!
//! The notes are not fsynced: a process that dies leaves its writes in the page cache, where
//! the next process finds them. A machine crash may lose the last note; the count then starts
//! over. The directory must survive the process, not the machine (a Kubernetes `emptyDir`
//! survives a container's restarts within its pod), and it must be this process's own: one file
//! per group and `kafka.instance_id`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::source::kafka::SourceRecord;

/// The most suspects kept; past it the oldest is dropped (it is only a suspicion).
pub const MAX_SUSPECTS: usize = 1024;

/// Why the notes could not be used.
#[derive(Debug, thiserror::Error)]
pub enum QuarantineError {
    /// The state directory or the notes file could not be created, written or renamed.
    #[error("crash notes at {path}: {error}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        error: std::io::Error,
    },
}

/// The offsets of one partition that were being matched.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Span {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The first offset.
    pub first: i64,
    /// The last offset (inclusive).
    pub last: i64,
}

impl Span {
    fn same_partition(&self, topic: &str, partition: i32) -> bool {
        self.partition == partition && self.topic == topic
    }

    fn overlap(&self, other: &Span) -> Option<Span> {
        let (first, last) = (self.first.max(other.first), self.last.min(other.last));
        (self.same_partition(&other.topic, other.partition) && first <= last).then(|| Span {
            topic: self.topic.clone(),
            partition: self.partition,
            first,
            last,
        })
    }

    fn holds(&self, r: &SourceRecord) -> bool {
        self.same_partition(&r.id.tp.topic, r.id.tp.partition)
            && (self.first..=self.last).contains(&r.id.offset)
    }
}

/// A range that was being matched when the process died.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Suspect {
    /// Where.
    pub span: Span,
    /// How many processes died matching it (or a range it was narrowed from).
    pub crashes: u32,
}

/// The file's content.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Notes {
    /// What is being matched now; empty while idle.
    matching: Vec<Span>,
    suspects: Vec<Suspect>,
}

/// How the match stage handles a part of a batch, in record order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Records matched together (indices into the batch's records).
    Run(std::ops::Range<usize>),
    /// A record of a suspect matched alone.
    One(usize),
    /// A record that crashed the process `crashes` times: dead-lettered, not matched.
    DeadLetter {
        /// Its index in the batch.
        index: usize,
        /// The crashes that led to it.
        crashes: u32,
    },
}

/// The crash notes of one process.
#[derive(Debug)]
pub struct Quarantine {
    path: PathBuf,
    tmp: PathBuf,
    notes: Notes,
    /// What the file holds now, to skip writes that change nothing.
    written: Notes,
    /// A write failed and was logged: the next failures are not.
    failing: bool,
}

impl Quarantine {
    /// Opens the notes of `group` (and `instance`) under `dir`, creating the directory; counts
    /// the crash of a predecessor that died while matching, and writes that down at once.
    pub fn open(dir: &Path, group: &str, instance: Option<&str>) -> Result<Self, QuarantineError> {
        std::fs::create_dir_all(dir).map_err(|error| QuarantineError::Io {
            path: dir.to_path_buf(),
            error,
        })?;
        let mut name = format!("crash-notes-{}", file_safe(group));
        if let Some(i) = instance {
            name.push('-');
            name.push_str(&file_safe(i));
        }
        let path = dir.join(format!("{name}.json"));
        let tmp = dir.join(format!(".{name}.json.tmp"));
        let found = match std::fs::read(&path) {
            Ok(bytes) => match serde_json::from_slice::<Notes>(&bytes) {
                Ok(n) => n,
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e,
                        "unreadable crash notes; starting afresh");
                    Notes::default()
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Notes::default(),
            Err(error) => return Err(QuarantineError::Io { path, error }),
        };
        let mut q = Quarantine {
            path,
            tmp,
            notes: found.clone(),
            written: found,
            failing: false,
        };
        for s in q.notes.fold_crash() {
            tracing::warn!(topic = %s.span.topic, partition = s.span.partition,
                first_offset = s.span.first, last_offset = s.span.last, crashes = s.crashes,
                "the previous process died while matching these records (a crash, a kill or an \
                 OOM kill); from the second crash on they are matched one at a time, and a \
                 record that crashes alone is dead-lettered");
        }
        q.write()?;
        Ok(q)
    }

    /// The steps of a batch: suspect records of two crashes or more apart, the others together.
    pub fn plan(&self, records: &[SourceRecord]) -> Vec<Step> {
        let mut steps = Vec::new();
        let mut run = 0;
        for (i, r) in records.iter().enumerate() {
            let Some(s) = self
                .notes
                .suspects
                .iter()
                .find(|s| s.crashes >= 2 && s.span.holds(r))
            else {
                continue;
            };
            if run < i {
                steps.push(Step::Run(run..i));
            }
            run = i + 1;
            steps.push(if s.span.first == s.span.last {
                Step::DeadLetter {
                    index: i,
                    crashes: s.crashes,
                }
            } else {
                Step::One(i)
            });
        }
        if run < records.len() {
            steps.push(Step::Run(run..records.len()));
        }
        steps
    }

    /// Notes that `records` are being matched, before matching them. A failed write is logged
    /// (once per streak) and matching goes on, unprotected.
    pub fn matching(&mut self, records: &[SourceRecord]) {
        self.notes.matching = spans(records);
        self.write_logged();
    }

    /// The batch of `records` is done: suspects whose offsets it reached are dropped.
    pub fn done(&mut self, records: &[SourceRecord]) {
        self.notes.suspects.retain(|s| {
            let reached = records.iter().any(|r| {
                r.id.offset >= s.span.last
                    && s.span.same_partition(&r.id.tp.topic, r.id.tp.partition)
            });
            if reached && s.crashes >= 2 {
                tracing::info!(topic = %s.span.topic, partition = s.span.partition,
                    first_offset = s.span.first, last_offset = s.span.last,
                    "suspect records matched without a crash");
            }
            !reached
        });
    }

    /// Nothing is being matched: clears the note (so that a kill while idle is no crash).
    pub fn idle(&mut self) {
        self.notes.matching.clear();
        self.write_logged();
    }

    /// The suspects now (for tests and logs).
    pub fn suspects(&self) -> &[Suspect] {
        &self.notes.suspects
    }

    fn write_logged(&mut self) {
        match self.write() {
            Ok(()) => self.failing = false,
            Err(e) if !self.failing => {
                self.failing = true;
                tracing::warn!(error = %e, "writing the crash notes failed; a record that \
                    kills the process will not be found until they can be written again");
            }
            Err(_) => {}
        }
    }

    fn write(&mut self) -> Result<(), QuarantineError> {
        if self.notes == self.written {
            return Ok(());
        }
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |error| QuarantineError::Io { path, error }
        };
        // Serialising plain data into memory cannot fail.
        let bytes = serde_json::to_vec(&self.notes).unwrap_or_default();
        std::fs::write(&self.tmp, bytes).map_err(io(&self.tmp))?;
        std::fs::rename(&self.tmp, &self.path).map_err(io(&self.path))?;
        self.written.clone_from(&self.notes);
        Ok(())
    }
}

impl Notes {
    /// Turns a note left by a process that died while matching into suspects; returns the
    /// suspects that changed.
    fn fold_crash(&mut self) -> Vec<Suspect> {
        let mut changed = Vec::new();
        for m in std::mem::take(&mut self.matching) {
            let at = self
                .suspects
                .iter()
                .position(|s| s.span.same_partition(&m.topic, m.partition));
            let next = match at.map(|i| self.suspects.remove(i)) {
                Some(s) => match s.span.overlap(&m) {
                    Some(span) => Suspect {
                        span,
                        crashes: s.crashes + 1,
                    },
                    None => Suspect {
                        span: m,
                        crashes: 1,
                    },
                },
                None => Suspect {
                    span: m,
                    crashes: 1,
                },
            };
            if self.suspects.len() >= MAX_SUSPECTS {
                self.suspects.remove(0);
            }
            changed.push(next.clone());
            self.suspects.push(next);
        }
        changed
    }
}

/// Each partition's first and last offset among `records`.
fn spans(records: &[SourceRecord]) -> Vec<Span> {
    let mut out: Vec<Span> = Vec::new();
    for r in records {
        let (topic, partition, o) = (&r.id.tp.topic, r.id.tp.partition, r.id.offset);
        match out.iter_mut().find(|s| s.same_partition(topic, partition)) {
            Some(s) => {
                s.first = s.first.min(o);
                s.last = s.last.max(o);
            }
            None => out.push(Span {
                topic: topic.to_string(),
                partition,
                first: o,
                last: o,
            }),
        }
    }
    out
}

/// A name as a file name: anything but `[A-Za-z0-9._-]` becomes `_`.
fn file_safe(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
