//! The families of `faultline report --format prometheus`: interruptions and the GPU-hours they
//! cost, by root-cause bucket and root error code, and the fleet's ETTR, in the text exposition
//! format (for a node exporter's textfile collector or a push gateway, refreshed by a periodic
//! report). Labels are closed sets: the report's buckets and the KB's error codes (`none` for a
//! restart nothing explained); never jobs or hosts.

use prometheus::{CounterVec, Gauge, IntCounterVec, Opts, Registry, TextEncoder};

use super::{counter_vec, register, MetricsError};

/// The report families, in a registry of their own.
#[derive(Debug)]
pub struct ReportFamilies {
    registry: Registry,
    interruptions: IntCounterVec,
    gpu_hours: CounterVec,
}

impl ReportFamilies {
    /// Registers the families with every bucket in `buckets` at zero.
    pub fn new(buckets: &[&str]) -> Result<Self, MetricsError> {
        let r = Registry::new();
        let labels = ["cause", "error_code"];
        let interruptions = counter_vec(
            &r,
            "faultline_interruptions_total",
            "Job interruptions in the report's range (one per failed attempt), by root-cause \
             bucket and the root's error code.",
            &labels,
        )?;
        let gpu_hours = register(
            &r,
            CounterVec::new(
                Opts::new(
                    "faultline_gpu_hours_lost_total",
                    "GPU-hours the interruptions cost: GPUs x (work since the last checkpoint + \
                     downtime until the restart's first progress), by bucket and error code.",
                ),
                &labels,
            )?,
        )?;
        for b in buckets {
            interruptions.with_label_values(&[b, "none"]);
            gpu_hours.with_label_values(&[b, "none"]);
        }
        Ok(ReportFamilies {
            registry: r,
            interruptions,
            gpu_hours,
        })
    }

    /// Counts one interruption of `bucket` with root `code` that cost `gpu_hours`.
    pub fn interruption(&self, bucket: &str, code: Option<&str>, gpu_hours: f64) {
        let labels = [bucket, code.unwrap_or("none")];
        self.interruptions.with_label_values(&labels).inc();
        self.gpu_hours
            .with_label_values(&labels)
            .inc_by(gpu_hours.max(0.0));
    }

    /// Adds the fleet's ETTR (only a report that has one exports the gauge).
    pub fn set_ettr(&self, ettr: f64) -> Result<(), MetricsError> {
        let gauge = register(
            &self.registry,
            Gauge::new(
                "faultline_fleet_ettr_ratio",
                "Effective training time ratio of the report's jobs, weighted by GPUs.",
            )?,
        )?;
        gauge.set(ettr);
        Ok(())
    }

    /// The text exposition of the families.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Encoding well-formed families into a String cannot fail.
        let _ = TextEncoder::new().encode_utf8(&self.registry.gather(), &mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_gpu_hours_by_bucket_and_code() {
        let f = ReportFamilies::new(&["gpu", "unknown"]).expect("registers");
        f.interruption("gpu", Some("XID_79"), 12.5);
        f.interruption("gpu", Some("XID_79"), 7.5);
        f.interruption("unknown", None, 1.0);
        f.set_ettr(0.9).expect("registers once");
        let text = f.render();
        assert!(
            text.contains(r#"faultline_interruptions_total{cause="gpu",error_code="XID_79"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(r#"faultline_gpu_hours_lost_total{cause="gpu",error_code="XID_79"} 20"#),
            "{text}"
        );
        assert!(
            text.contains(r#"faultline_interruptions_total{cause="unknown",error_code="none"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"faultline_interruptions_total{cause="gpu",error_code="none"} 0"#),
            "{text}"
        );
        assert!(text.contains("faultline_fleet_ettr_ratio 0.9"), "{text}");
    }
}
