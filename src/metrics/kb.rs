//! The knowledge base in use and the build: entries, content version, reload outcomes, and
//! `faultline_build_info`.

use prometheus::{IntCounterVec, IntGauge, IntGaugeVec, Registry};

use super::labels::ReloadResult;
use super::{counter_vec, gauge_vec, register, MetricsError};
use crate::kb::KnowledgeBase;

/// The KB and build families.
#[derive(Debug)]
pub struct KbFamilies {
    entries: IntGauge,
    info: IntGaugeVec,
    reloads: IntCounterVec,
}

impl KbFamilies {
    /// Registers the families, every reload result at zero, and the build info.
    pub fn register(r: &Registry) -> Result<Self, MetricsError> {
        let f = KbFamilies {
            entries: register(
                r,
                IntGauge::new(
                    "faultline_knowledge_base_entries",
                    "Entries in the knowledge base in use.",
                )?,
            )?,
            info: gauge_vec(
                r,
                "faultline_knowledge_base_info",
                "The knowledge base in use: always 1, labelled by its content version.",
                &["kb_version"],
            )?,
            reloads: counter_vec(
                r,
                "faultline_knowledge_base_reloads_total",
                "Knowledge-base reload attempts, by result.",
                &["result"],
            )?,
        };
        for res in ReloadResult::ALL {
            f.reloads.with_label_values(&[res.as_str()]);
        }
        gauge_vec(
            r,
            "faultline_build_info",
            "The faultline build: always 1, labelled by its version.",
            &["version"],
        )?
        .with_label_values(&[env!("CARGO_PKG_VERSION")])
        .set(1);
        Ok(f)
    }

    /// Makes `kb` the one reported.
    pub fn set_kb(&self, kb: &KnowledgeBase) {
        self.entries.set(kb.entries.len() as i64);
        self.info.reset();
        self.info.with_label_values(&[kb.version.as_str()]).set(1);
    }

    /// Counts a reload attempt.
    pub fn reload(&self, result: ReloadResult) {
        self.reloads.with_label_values(&[result.as_str()]).inc();
    }
}
