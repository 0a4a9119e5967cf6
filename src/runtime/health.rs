//! What the service did and whether it is ready: the counters the stages bump, the KB reload
//! status, the acknowledged deliveries, and the `/readyz` verdict built from them.
//!
//! Plain atomics and a mutex, no Kafka types: the source sets the assignment, the sink's
//! delivery callbacks count acknowledgements, the matcher counts records, the reload task
//! records reloads, and the admin server reads a [`Stats`] snapshot.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::offsets::{TopicPartition, Tracker};

/// Reload outcomes, for /readyz and logs.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ReloadStatus {
    /// The version of the KB in use; empty until one is loaded.
    pub version: String,
    /// Successful reloads.
    pub reloads: u64,
    /// Failed reloads (the previous KB stays in use).
    pub failures: u64,
    /// The last failure, for people.
    pub last_error: Option<String>,
}

/// Deliveries the broker acknowledged, counted by the sink's callbacks.
#[derive(Debug, Default)]
pub struct Delivered {
    /// Match events.
    pub events: AtomicU64,
    /// Dead letters.
    pub dead_letters: AtomicU64,
    /// Incident changes.
    pub incidents: AtomicU64,
}

/// State shared by the stages, the admin server and the caller.
#[derive(Debug)]
pub struct Health {
    /// The offset tracker: records in flight, watermarks, stalls.
    pub tracker: Arc<Tracker>,
    /// Acknowledged deliveries.
    pub delivered: Arc<Delivered>,
    /// KB reloads.
    pub reload: Arc<Mutex<ReloadStatus>>,
    /// Records consumed (each counted once, whatever happened to it).
    pub records: AtomicU64,
    /// Payload bytes consumed.
    pub bytes: AtomicU64,
    /// Match events handed to the producer.
    pub events_sent: AtomicU64,
    /// Records found undecodable.
    pub invalid: AtomicU64,
    assigned: AtomicUsize,
    paused: AtomicUsize,
    current: AtomicBool,
    stall_timeout: Duration,
    /// Why a stage stopped on its own (an error, a panic that escaped): `/readyz` fails with it
    /// from then on.
    stopped: Mutex<Option<String>>,
    /// The assigned partitions with records not yet read, as of the source's last statistics.
    backlog: Mutex<Vec<TopicPartition>>,
    /// The partitions of the input topics this member is not assigned, as of the source's last
    /// rebalance or statistics.
    unassigned: Mutex<Vec<TopicPartition>>,
    /// Progress notes handed to the producer (counted among the events too).
    pub notes_sent: AtomicU64,
    /// Rebalances that assigned partitions to this member.
    assignments: AtomicU64,
}

/// A snapshot of what the service did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Records consumed.
    pub records: u64,
    /// Payload bytes consumed.
    pub bytes: u64,
    /// Match events handed to the producer.
    pub events_sent: u64,
    /// Match events acknowledged by the broker (progress notes included).
    pub events_acked: u64,
    /// Progress notes handed to the producer (`pipeline::progress`).
    pub progress_notes: u64,
    /// Records found undecodable.
    pub invalid: u64,
    /// Dead letters acknowledged.
    pub dead_letters_acked: u64,
    /// Partitions this member owns.
    pub assigned_partitions: usize,
    /// Partitions the source paused because the pipeline is full (backpressure).
    pub paused_partitions: usize,
    /// Records read and not yet terminal.
    pub in_flight: usize,
    /// KB reloads.
    pub kb: ReloadStatus,
    /// The next offset to commit of every partition seen.
    pub watermarks: Vec<(TopicPartition, i64)>,
}

impl Health {
    /// Fresh counters; `/readyz` fails when records make no progress for `stall_timeout`.
    pub fn new(stall_timeout: Duration) -> Arc<Self> {
        Arc::new(Health {
            tracker: Tracker::new(),
            delivered: Arc::new(Delivered::default()),
            reload: Arc::new(Mutex::new(ReloadStatus::default())),
            records: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            events_sent: AtomicU64::new(0),
            invalid: AtomicU64::new(0),
            assigned: AtomicUsize::new(0),
            paused: AtomicUsize::new(0),
            current: AtomicBool::new(false),
            stall_timeout,
            stopped: Mutex::new(None),
            backlog: Mutex::new(Vec::new()),
            unassigned: Mutex::new(Vec::new()),
            notes_sent: AtomicU64::new(0),
            assignments: AtomicU64::new(0),
        })
    }

    /// A rebalance assigned partitions to this member.
    pub fn note_assignment(&self) {
        self.assignments.fetch_add(1, Ordering::Release);
    }

    /// Rebalances that assigned partitions to this member so far.
    pub fn assignments(&self) -> u64 {
        self.assignments.load(Ordering::Acquire)
    }

    /// The source's partition count after a rebalance.
    pub fn set_assigned(&self, n: usize) {
        self.assigned.store(n, Ordering::Relaxed);
    }

    /// Whether the input is current: every assigned partition read to its end and the broker
    /// reachable, as of the source's last statistics. The incident clock runs on at wall
    /// speed only then (the pipeline's log clock).
    pub fn set_input_current(&self, current: bool) {
        self.current.store(current, Ordering::Relaxed);
    }

    /// See [`Health::set_input_current`].
    pub fn input_current(&self) -> bool {
        self.current.load(Ordering::Relaxed)
    }

    /// The assigned partitions with records not yet read (their lag above 0), as of the
    /// source's last statistics: a match member tells the correlator they are behind
    /// (`pipeline::progress`).
    pub fn set_backlog(&self, behind: Vec<TopicPartition>) {
        *self.backlog.lock().unwrap_or_else(|p| p.into_inner()) = behind;
    }

    /// See [`Health::set_backlog`].
    pub fn backlog(&self) -> Vec<TopicPartition> {
        self.backlog
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The partitions of the input topics that no rebalance gave this member: another member
    /// reads them, or none does yet. A match member tells the correlator of them
    /// (`pipeline::progress`), so that a partition whose member has not started reading holds
    /// expiry back until it reports.
    pub fn set_unassigned(&self, unassigned: Vec<TopicPartition>) {
        *self.unassigned.lock().unwrap_or_else(|p| p.into_inner()) = unassigned;
    }

    /// See [`Health::set_unassigned`].
    pub fn unassigned(&self) -> Vec<TopicPartition> {
        self.unassigned
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The partitions the source holds paused while the pipeline is full.
    pub fn set_paused(&self, n: usize) {
        self.paused.store(n, Ordering::Relaxed);
    }

    /// Records the version of the KB in use.
    pub fn set_kb_version(&self, version: &str) {
        self.reload
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .version = version.to_string();
    }

    /// A snapshot of every counter.
    pub fn stats(&self) -> Stats {
        Stats {
            records: self.records.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            events_sent: self.events_sent.load(Ordering::Relaxed),
            events_acked: self.delivered.events.load(Ordering::Relaxed),
            progress_notes: self.notes_sent.load(Ordering::Relaxed),
            invalid: self.invalid.load(Ordering::Relaxed),
            dead_letters_acked: self.delivered.dead_letters.load(Ordering::Relaxed),
            assigned_partitions: self.assigned.load(Ordering::Relaxed),
            paused_partitions: self.paused.load(Ordering::Relaxed),
            in_flight: self.tracker.in_flight(None),
            kb: self
                .reload
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
            watermarks: self.tracker.watermarks(),
        }
    }

    /// A stage stopped on its own, for `why`: `/readyz` fails from now on (the first reason
    /// stays).
    pub fn set_stopped(&self, why: &str) {
        let mut s = self.stopped.lock().unwrap_or_else(|p| p.into_inner());
        if s.is_none() {
            *s = Some(why.to_string());
        }
    }

    /// Why a stage stopped on its own, if one did.
    pub fn stopped(&self) -> Option<String> {
        self.stopped
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// /readyz: no stage stopped on its own, the KB is loaded, partitions are assigned,
    /// records are not stuck.
    pub fn readiness(&self) -> Result<String, String> {
        let s = self.stats();
        let mut problems = Vec::new();
        if let Some(why) = self.stopped() {
            problems.push(format!("a stage stopped: {why}"));
        }
        if s.kb.version.is_empty() {
            problems.push("knowledge base not loaded".to_string());
        }
        if s.assigned_partitions == 0 {
            problems.push("no partitions assigned".to_string());
        }
        if self.tracker.stalled(self.stall_timeout) {
            problems.push(format!(
                "stalled: {} record(s) in flight and none finished for {} s",
                s.in_flight,
                self.stall_timeout.as_secs()
            ));
        }
        let body = format!(
            "kb_version {}\nassigned_partitions {}\npaused_partitions {}\ninput_current {}\nin_flight {}\nrecords {}\nevents {}\ndead_letters {}\nkb_reload_failures {}\n",
            s.kb.version,
            s.assigned_partitions,
            s.paused_partitions,
            self.input_current(),
            s.in_flight,
            s.records,
            s.events_acked,
            s.dead_letters_acked,
            s.kb.failures
        );
        if problems.is_empty() {
            Ok(body)
        } else {
            Err(format!("not ready: {}\n{body}", problems.join("; ")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_only_with_a_kb_and_partitions() {
        let h = Health::new(Duration::from_secs(60));
        let not = h.readiness().expect_err("nothing loaded");
        assert!(not.contains("knowledge base not loaded"), "{not}");
        assert!(not.contains("no partitions assigned"), "{not}");
        h.set_kb_version("v1");
        h.set_assigned(3);
        let body = h.readiness().expect("ready");
        assert!(
            body.contains("kb_version v1\nassigned_partitions 3\n"),
            "{body}"
        );
        h.set_stopped("faultline-match: the dead-letter topic refused a record");
        h.set_stopped("a later reason");
        let not = h.readiness().expect_err("a stage stopped");
        assert!(
            not.starts_with("not ready: a stage stopped: faultline-match: the dead-letter"),
            "{not}"
        );
    }
}
