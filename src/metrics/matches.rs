//! `faultline_matches_total` by the KB entry's `error_code`, `domain`, `category`, `role` and
//! `severity` (plus the optional capped dimensions), with the overflow counter and the gauge of
//! admitted dimension values.
//!
//! Every entry's series exists from the moment its KB is loaded (at zero), so `rate()` and
//! `increase()` see the first match, and never expires, so a reload that drops an entry does
//! not rewrite history.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use prometheus::{IntCounterVec, IntGaugeVec, Registry};

use super::batch::{BatchCounts, EntryTable};
use super::config::{DimensionConfig, MetricsConfig};
use super::{counter_vec, gauge_vec, MetricsError, OTHER, UNKNOWN};
use crate::kb::KnowledgeBase;

/// The values of one dimension admitted as labels so far.
#[derive(Debug)]
struct DimState {
    config: DimensionConfig,
    admitted: HashSet<String>,
}

#[derive(Debug)]
struct State {
    table: Arc<EntryTable>,
    dims: Vec<DimState>,
}

/// The match families.
#[derive(Debug)]
pub struct MatchFamilies {
    matches: IntCounterVec,
    label_overflows: IntCounterVec,
    dimension_values: IntGaugeVec,
    state: Mutex<State>,
}

impl MatchFamilies {
    /// Registers the families with the configured dimensions.
    pub fn register(r: &Registry, config: &MetricsConfig) -> Result<Self, MetricsError> {
        let mut match_labels = vec!["error_code", "domain", "category", "role", "severity"];
        match_labels.extend(config.dimensions.iter().map(|d| d.dimension.as_str()));
        let matches = counter_vec(
            r,
            "faultline_matches_total",
            "Log lines that matched a knowledge-base entry, by the entry's error code, domain, \
             category, role and severity.",
            &match_labels,
        )?;
        let label_overflows = counter_vec(
            r,
            "faultline_label_overflow_total",
            "Matches whose dimension value was counted as \"other\": the dimension had reached \
             its cardinality cap, or the value was not a plausible label value.",
            &["dimension"],
        )?;
        let dimension_values = gauge_vec(
            r,
            "faultline_label_dimension_values",
            "Distinct values admitted as labels for each optional dimension of \
             faultline_matches_total.",
            &["dimension"],
        )?;
        for d in &config.dimensions {
            label_overflows.with_label_values(&[d.dimension.as_str()]);
            dimension_values.with_label_values(&[d.dimension.as_str()]);
        }
        let state = State {
            table: Arc::new(EntryTable {
                version: String::new(),
                index: HashMap::new(),
                labels: Vec::new(),
                counters: Vec::new(),
            }),
            dims: config
                .dimensions
                .iter()
                .map(|config| DimState {
                    config: config.clone(),
                    admitted: HashSet::new(),
                })
                .collect(),
        };
        Ok(MatchFamilies {
            matches,
            label_overflows,
            dimension_values,
            state: Mutex::new(state),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain counters behind: still usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes `kb` the KB being counted: every entry's series at zero (for each admitted
    /// dimension value too). Series of entries that left the KB stay.
    pub fn set_kb(&self, kb: &KnowledgeBase) {
        let mut state = self.state();
        let labels: Vec<[String; 5]> = kb
            .entries
            .iter()
            .map(|e| {
                [
                    e.error_code.clone(),
                    e.domain.clone(),
                    e.category.clone(),
                    e.role.as_str().to_string(),
                    e.severity.as_str().to_string(),
                ]
            })
            .collect();
        let index = kb
            .entries
            .iter()
            .enumerate()
            .map(|(i, e)| (e.id.clone(), i))
            .collect();
        let ndims = state.dims.len();
        let mut counters = Vec::new();
        for base in &labels {
            let c = self
                .matches
                .with_label_values(&series(base, &vec![UNKNOWN; ndims]));
            if ndims == 0 {
                counters.push(c);
            }
            for (d, dim) in state.dims.iter().enumerate() {
                for value in &dim.admitted {
                    let mut values = vec![UNKNOWN; ndims];
                    values[d] = value;
                    self.matches.with_label_values(&series(base, &values));
                }
            }
        }
        state.table = Arc::new(EntryTable {
            version: kb.version.clone(),
            index,
            labels,
            counters,
        });
    }

    /// A fresh local counter bound to the current KB.
    pub fn batch(&self) -> BatchCounts {
        let state = self.state();
        let dims = state.dims.iter().map(|d| d.config.dimension).collect();
        BatchCounts::new(Arc::clone(&state.table), dims)
    }

    /// The KB version being counted.
    pub fn kb_version(&self) -> String {
        self.state().table.version.clone()
    }

    /// Publishes the batch's matches, then empties it and rebinds it to the current KB.
    pub(super) fn publish(&self, batch: &mut BatchCounts) {
        let mut state = self.state();
        let table = Arc::clone(&batch.table);
        if batch.dims.is_empty() {
            for (i, &n) in batch.per_entry.iter().enumerate() {
                if n > 0 {
                    if let Some(c) = table.counters.get(i) {
                        c.inc_by(n);
                    }
                }
            }
        } else {
            // Admission follows first sight within the batch (interned ids are in that
            // order), so which values make the cap does not depend on hash order.
            let admitted: Vec<Vec<bool>> = (0..batch.dims.len())
                .map(|d| {
                    let names = &batch.values[d].names;
                    names.iter().map(|v| self.admit(&mut state, d, v)).collect()
                })
                .collect();
            for (&(entry, idx), &n) in &batch.keyed {
                let Some(base) = table.labels.get(entry as usize) else {
                    continue;
                };
                let mut values: Vec<&str> = Vec::with_capacity(batch.dims.len());
                for (d, &k) in idx.iter().take(batch.dims.len()).enumerate() {
                    let value = match k as usize {
                        0 => UNKNOWN,
                        k if k >= 2 && admitted[d][k - 2] => batch.values[d].names[k - 2].as_str(),
                        _ => {
                            self.label_overflows
                                .with_label_values(&[batch.dims[d].as_str()])
                                .inc_by(n);
                            OTHER
                        }
                    };
                    values.push(value);
                }
                self.matches
                    .with_label_values(&series(base, &values))
                    .inc_by(n);
            }
        }
        let current = Arc::clone(&state.table);
        drop(state);
        batch.reset(current);
    }

    /// Admits `value` for dimension `d` if it is known or there is room; a newly admitted
    /// value gets every current entry's series at zero.
    fn admit(&self, state: &mut State, d: usize, value: &str) -> bool {
        let dim = &mut state.dims[d];
        if dim.admitted.contains(value) {
            return true;
        }
        if dim.admitted.len() >= dim.config.max_values {
            return false;
        }
        dim.admitted.insert(value.to_string());
        self.dimension_values
            .with_label_values(&[dim.config.dimension.as_str()])
            .set(dim.admitted.len() as i64);
        let ndims = state.dims.len();
        for base in &state.table.labels {
            let mut values = vec![UNKNOWN; ndims];
            values[d] = value;
            self.matches.with_label_values(&series(base, &values));
        }
        true
    }
}

/// The label values of one match series: the entry's five, then each dimension's.
fn series<'a>(base: &'a [String; 5], dims: &[&'a str]) -> Vec<&'a str> {
    base.iter()
        .map(String::as_str)
        .chain(dims.iter().copied())
        .collect()
}
