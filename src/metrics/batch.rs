//! [`BatchCounts`]: what one batch did, counted locally by one worker (plain integers, no
//! atomics, no locks, nothing per line) and published by [`super::Metrics::flush`] once per
//! batch.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use prometheus::IntCounter;

use super::labels::{DeadLetterReason, Dimension};
use crate::enrich::MatchEvent;

/// The most dimensions a match series can carry.
pub(super) const MAX_DIMS: usize = Dimension::ALL.len();

/// The match-counter labels of every entry of one KB version, and where each kb_id sits.
#[derive(Debug)]
pub(super) struct EntryTable {
    pub(super) version: String,
    pub(super) index: HashMap<String, usize>,
    /// error_code, domain, category, role, severity.
    pub(super) labels: Vec<[String; 5]>,
    /// The series of each entry when no dimension is enabled: resolved once per KB.
    pub(super) counters: Vec<IntCounter>,
}

/// Timestamps remembered per batch for the latency histogram; a batch with more matches
/// observes the first ones only, so a burst never grows the buffer without bound.
const MAX_LATENCY_SAMPLES: usize = 65_536;

/// Distinct dimension values one batch interns before folding the rest into `other`.
const MAX_BATCH_VALUES: usize = 4_096;

/// Longest dimension value admitted as a label; longer ones are folded into `other`.
pub const MAX_VALUE_BYTES: usize = 64;

/// The values of one dimension seen by one batch: index 0 is `unknown`, 1 is `other`.
#[derive(Debug, Default)]
pub(super) struct Interner {
    ids: HashMap<String, u16>,
    pub(super) names: Vec<String>,
}

impl Interner {
    fn id(&mut self, value: Option<&str>) -> u16 {
        let Some(v) = value.filter(|v| !v.is_empty()) else {
            return 0;
        };
        if !plausible_label(v) {
            return 1;
        }
        if let Some(&id) = self.ids.get(v) {
            return id;
        }
        if self.names.len() >= MAX_BATCH_VALUES {
            return 1;
        }
        let id = self.names.len() as u16 + 2;
        self.ids.insert(v.to_string(), id);
        self.names.push(v.to_string());
        id
    }

    fn clear(&mut self) {
        self.ids.clear();
        self.names.clear();
    }
}

/// A short name of letters, digits and `._:/-`: anything else is not a cluster name.
fn plausible_label(v: &str) -> bool {
    v.len() <= MAX_VALUE_BYTES
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'/' | b'-'))
}

/// What one batch did, counted locally by one worker and published by [`Metrics::flush`].
#[derive(Debug)]
pub struct BatchCounts {
    pub(super) table: Arc<EntryTable>,
    /// The enabled dimensions, in label order; `values` has one interner for each.
    pub(super) dims: Vec<Dimension>,
    /// Matches per entry of `table` (no dimension enabled).
    pub(super) per_entry: Vec<u64>,
    /// Matches per (entry, interned dimension values) (dimensions enabled).
    pub(super) keyed: HashMap<(u32, [u16; MAX_DIMS]), u64>,
    pub(super) values: Vec<Interner>,
    pub(super) records: u64,
    pub(super) bytes: u64,
    pub(super) lines: u64,
    /// JSON envelope lines decoded.
    pub(super) json_lines: u64,
    /// Per [`DeadLetterReason`], in its order.
    pub(super) dead_letters: [u64; DeadLetterReason::ALL.len()],
    pub(super) scan_time: Option<Duration>,
    /// Unix seconds of the matched lines' own timestamps.
    pub(super) log_times: Vec<f64>,
}

impl BatchCounts {
    pub(super) fn new(table: Arc<EntryTable>, dims: Vec<Dimension>) -> Self {
        let n = table.labels.len();
        BatchCounts {
            table,
            values: dims.iter().map(|_| Interner::default()).collect(),
            dims,
            per_entry: vec![0; n],
            keyed: HashMap::new(),
            records: 0,
            bytes: 0,
            lines: 0,
            json_lines: 0,
            dead_letters: [0; DeadLetterReason::ALL.len()],
            scan_time: None,
            log_times: Vec::new(),
        }
    }

    pub(super) fn reset(&mut self, table: Arc<EntryTable>) {
        if !Arc::ptr_eq(&self.table, &table) {
            self.per_entry = vec![0; table.labels.len()];
            self.table = table;
        } else {
            self.per_entry.iter_mut().for_each(|n| *n = 0);
        }
        self.keyed.clear();
        self.values.iter_mut().for_each(Interner::clear);
        self.records = 0;
        self.bytes = 0;
        self.lines = 0;
        self.json_lines = 0;
        self.dead_letters = [0; DeadLetterReason::ALL.len()];
        self.scan_time = None;
        self.log_times.clear();
    }

    /// Records consumed and their payload bytes.
    pub fn consumed(&mut self, records: u64, bytes: u64) {
        self.records += records;
        self.bytes += bytes;
    }

    /// Lines scanned.
    pub fn scanned(&mut self, lines: u64) {
        self.lines += lines;
    }

    /// JSON envelope lines decoded.
    pub fn json_decoded(&mut self, lines: u64) {
        self.json_lines += lines;
    }

    /// One record dead-lettered for `reason`.
    pub fn dead_lettered(&mut self, reason: DeadLetterReason) {
        if let Some(i) = DeadLetterReason::ALL.iter().position(|r| *r == reason) {
            self.dead_letters[i] += 1;
        }
    }

    /// The time the batch took to scan and enrich (adds up if called more than once).
    pub fn scan_time(&mut self, t: Duration) {
        self.scan_time = Some(self.scan_time.unwrap_or_default() + t);
    }

    /// One match. Events of another KB version than the batch's (a reload raced the batch)
    /// are looked up by `kb_id` like any other; an id the batch's KB lacks is not counted.
    pub fn matched(&mut self, event: &MatchEvent) {
        if self.log_times.len() < MAX_LATENCY_SAMPLES {
            // A stamp without a zone or year is dropped: a guessed zone reports hours of delay.
            if let Some(t) = event
                .timestamp
                .as_deref()
                .and_then(crate::time::parse)
                .and_then(|s| s.exact_seconds())
            {
                self.log_times.push(t);
            }
        }
        let Some(&entry) = self.table.index.get(&event.kb_id) else {
            return;
        };
        if self.dims.is_empty() {
            self.per_entry[entry] += 1;
            return;
        }
        let mut key = [0u16; MAX_DIMS];
        for (d, (slot, dimension)) in key.iter_mut().zip(&self.dims).enumerate() {
            *slot = self.values[d].id(dimension.value(event));
        }
        *self.keyed.entry((entry as u32, key)).or_insert(0) += 1;
    }

    /// Matches counted so far in this batch.
    pub fn matches(&self) -> u64 {
        self.per_entry.iter().sum::<u64>() + self.keyed.values().sum::<u64>()
    }
}
