//! The metrics, the alerting rules and the dashboard against the real Prometheus tools:
//! `promtool check metrics` on a rendered registry, `promtool check rules` and `promtool test
//! rules` on dashboards/alerts.yml, and every PromQL expression of the rules and the dashboard
//! evaluated by a real `prometheus` server scraping a rendered faultline registry.
//!
//! The tools come from Debian's `prometheus` package (scripts/setup.sh installs it). Without
//! them these tests print why and pass: everything else still runs.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use faultline::metrics::{
    Metrics, MetricsConfig, Output, RawMetricsConfig, ReloadResult, SpanDrop,
};

use crate::support;

/// The path of `tool` on PATH, or `None` after saying the test is skipped.
pub fn tool(tool: &str, test: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(tool))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        eprintln!(
            "SKIPPED {test}: `{tool}` is not installed (Debian package `prometheus`; \
             scripts/setup.sh installs it)"
        );
    }
    found
}

/// A registry of the repository's KB with a non-zero value in every family.
pub fn busy_metrics() -> Metrics {
    let config = MetricsConfig::from_raw(&RawMetricsConfig {
        dimensions: vec!["cluster".into()],
        max_values_per_dimension: Some(4),
    })
    .expect("valid");
    let m = Metrics::new(config).expect("registry");
    let kb = support::kb();
    m.set_kb(&kb);
    let engine = support::hyperscan();
    let mut batch = m.batch();
    batch.consumed(120, 48_000);
    batch.scanned(4_000);
    batch.dead_lettered("not_an_envelope");
    batch.scan_time(Duration::from_millis(12));
    let now = faultline::envelope::rfc3339_from_unix_nanos(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_nanos(),
    );
    let lines = [
        "[rank3]:[E ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation \
         timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) \
         ran for 600085 milliseconds before timing out.",
        "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.",
        "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    ];
    let mut codes = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        for mut event in support::events_of_line(&engine, line) {
            event.cluster = Some(["eu-1", "us-2"][i % 2].into());
            event.timestamp = Some(now.clone());
            codes.push(event.error_code.clone());
            batch.matched(&event);
        }
    }
    assert!(codes.len() >= 3, "the sample lines match: {codes:?}");
    assert!(codes.iter().any(|c| c == "NCCL_TIMEOUT"), "{codes:?}");
    m.flush(&mut batch);
    m.set_partition("fleet.logs", 0, 1_500, Some(98_000));
    m.set_partition("fleet.logs", 1, 20, Some(97_000));
    m.produce_errors(Output::Events, 1);
    m.kb_reload(ReloadResult::Success);
    m.kb_reload(ReloadResult::Failure);
    m.spans_dropped(SpanDrop::QueueFull).inc_by(3);
    m
}

#[test]
fn rendered_metrics_pass_promtool_check_metrics() {
    let Some(promtool) = tool("promtool", "rendered_metrics_pass_promtool_check_metrics") else {
        return;
    };
    let text = busy_metrics().render();
    for family in [
        "faultline_matches_total",
        "faultline_label_overflow_total",
        "faultline_label_dimension_values",
        "faultline_records_consumed_total",
        "faultline_consumed_bytes_total",
        "faultline_lines_scanned_total",
        "faultline_records_dead_lettered_total",
        "faultline_batch_scan_duration_seconds",
        "faultline_log_to_metric_latency_seconds",
        "faultline_consumer_lag_records",
        "faultline_committed_offset",
        "faultline_produce_errors_total",
        "faultline_knowledge_base_entries",
        "faultline_knowledge_base_info",
        "faultline_knowledge_base_reloads_total",
        "faultline_build_info",
        "faultline_spans_dropped_total",
    ] {
        assert!(
            text.contains(&format!("# HELP {family} ")),
            "{family} is rendered"
        );
    }
    let mut child = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool starts");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("writes");
    let out = child.wait_with_output().expect("promtool runs");
    assert!(
        out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
        "promtool check metrics: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // promtool really lints: a counter without `_total` is reported.
    let mut child = Command::new(tool("promtool", "").expect("found above"))
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool starts");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"# HELP bad_counter A counter.\n# TYPE bad_counter counter\nbad_counter 1\n")
        .expect("writes");
    let out = child.wait_with_output().expect("promtool runs");
    assert!(!out.status.success(), "the lint catches a bad name");
}
