//! Tests of the families: series at zero from the start, batches published by flush only,
//! reloads, dimension caps, latency and partitions.

use std::time::Duration;

use super::throughput::unix_now;
use super::*;
use crate::testutil::{event, kb};

/// Sum of the samples of `name` whose labels include every pair of `want`.
fn sample(text: &str, name: &str, want: &[(&str, &str)]) -> Option<f64> {
    let mut found = None;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let (series, value) = line.rsplit_once(' ')?;
        let (n, labels) = series.split_once('{').unwrap_or((series, "}"));
        if n != name {
            continue;
        }
        let labels: Vec<(&str, &str)> = labels
            .trim_end_matches('}')
            .split(',')
            .filter(|p| !p.is_empty())
            .filter_map(|p| p.split_once('='))
            .map(|(k, v)| (k, v.trim_matches('"')))
            .collect();
        if want.iter().all(|w| labels.contains(w)) {
            *found.get_or_insert(0.0) += value.parse::<f64>().expect("number");
        }
    }
    found
}

fn no_dims() -> Metrics {
    Metrics::new(MetricsConfig::default()).expect("registry")
}

#[test]
fn every_entry_has_a_zero_series_from_the_start() {
    let m = no_dims();
    m.set_kb(&kb(&[
        ("nccl/x", "NCCL_TIMEOUT", "cascade"),
        ("nccl/y", "XID_79", "root"),
    ]));
    let text = m.render();
    for code in ["NCCL_TIMEOUT", "XID_79"] {
        assert_eq!(
            sample(&text, "faultline_matches_total", &[("error_code", code)]),
            Some(0.0),
            "{text}"
        );
    }
    assert_eq!(
        sample(
            &text,
            "faultline_matches_total",
            &[
                ("error_code", "NCCL_TIMEOUT"),
                ("role", "cascade"),
                ("severity", "error")
            ]
        ),
        Some(0.0)
    );
    assert_eq!(
        sample(&text, "faultline_knowledge_base_entries", &[]),
        Some(2.0)
    );
    assert_eq!(
        sample(
            &text,
            "faultline_records_dead_lettered_total",
            &[("reason", "too_large")]
        ),
        Some(0.0)
    );
    assert_eq!(
        sample(
            &text,
            "faultline_build_info",
            &[("version", env!("CARGO_PKG_VERSION"))]
        ),
        Some(1.0)
    );
}

#[test]
fn a_batch_is_published_by_flush_only() {
    let m = no_dims();
    let k = kb(&[
        ("nccl/x", "NCCL_TIMEOUT", "cascade"),
        ("nccl/y", "XID_79", "root"),
    ]);
    m.set_kb(&k);
    let mut b = m.batch();
    b.consumed(3, 300);
    b.scanned(10);
    for _ in 0..4 {
        b.matched(&event(&k, 0, None, None));
    }
    b.matched(&event(&k, 1, None, None));
    b.dead_lettered(DeadLetterReason::NotAnEnvelope);
    b.dead_lettered(DeadLetterReason::Panic);
    b.scan_time(Duration::from_millis(3));
    assert_eq!(b.matches(), 5);
    let before = m.render();
    assert_eq!(
        sample(
            &before,
            "faultline_matches_total",
            &[("error_code", "NCCL_TIMEOUT")]
        ),
        Some(0.0)
    );
    assert_eq!(
        sample(&before, "faultline_lines_scanned_total", &[]),
        Some(0.0)
    );
    m.flush(&mut b);
    assert_eq!(b.matches(), 0, "flush empties the batch");
    let text = m.render();
    let get = |name, want: &[(&str, &str)]| sample(&text, name, want);
    assert_eq!(
        get("faultline_matches_total", &[("error_code", "NCCL_TIMEOUT")]),
        Some(4.0)
    );
    assert_eq!(
        get("faultline_matches_total", &[("error_code", "XID_79")]),
        Some(1.0)
    );
    assert_eq!(get("faultline_records_consumed_total", &[]), Some(3.0));
    assert_eq!(get("faultline_consumed_bytes_total", &[]), Some(300.0));
    assert_eq!(get("faultline_lines_scanned_total", &[]), Some(10.0));
    assert_eq!(
        get(
            "faultline_records_dead_lettered_total",
            &[("reason", "not_an_envelope")]
        ),
        Some(1.0)
    );
    assert_eq!(
        get(
            "faultline_records_dead_lettered_total",
            &[("reason", "panic")]
        ),
        Some(1.0)
    );
    assert_eq!(
        get("faultline_batch_scan_duration_seconds_count", &[]),
        Some(1.0)
    );
    // A second flush of the emptied batch adds nothing.
    m.flush(&mut b);
    assert_eq!(
        sample(
            &m.render(),
            "faultline_matches_total",
            &[("error_code", "NCCL_TIMEOUT")]
        ),
        Some(4.0)
    );
}

#[test]
fn reload_adds_new_entries_and_keeps_old_series() {
    let m = no_dims();
    let v1 = kb(&[("nccl/x", "NCCL_TIMEOUT", "cascade")]);
    m.set_kb(&v1);
    let mut b = m.batch();
    b.matched(&event(&v1, 0, None, None));
    // The KB reloads while the batch is open: the batch still counts against its own KB.
    let v2 = kb(&[("nccl/y", "XID_79", "root"), ("nccl/z", "CUDA_OOM", "root")]);
    m.set_kb(&v2);
    m.flush(&mut b);
    let text = m.render();
    assert_eq!(
        sample(
            &text,
            "faultline_matches_total",
            &[("error_code", "NCCL_TIMEOUT")]
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            "faultline_matches_total",
            &[("error_code", "CUDA_OOM")]
        ),
        Some(0.0)
    );
    assert_eq!(
        sample(
            &text,
            "faultline_knowledge_base_info",
            &[("kb_version", v1.version.as_str())]
        ),
        None
    );
    assert_eq!(
        sample(
            &text,
            "faultline_knowledge_base_info",
            &[("kb_version", v2.version.as_str())]
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, "faultline_knowledge_base_entries", &[]),
        Some(2.0)
    );
    assert_eq!(m.kb_version(), v2.version);
    // After the flush the batch counts against the new KB.
    b.matched(&event(&v2, 1, None, None));
    m.flush(&mut b);
    assert_eq!(
        sample(
            &m.render(),
            "faultline_matches_total",
            &[("error_code", "CUDA_OOM")]
        ),
        Some(1.0)
    );
    m.kb_reload(ReloadResult::Success);
    assert_eq!(
        sample(
            &m.render(),
            "faultline_knowledge_base_reloads_total",
            &[("result", "success")]
        ),
        Some(1.0)
    );
}

/// Metrics with the envelope's `cluster` as an extra dimension, capped at `max` values.
fn by_cluster(max: Option<usize>) -> Metrics {
    let config = MetricsConfig::from_raw(&RawMetricsConfig {
        dimensions: vec!["cluster".into()],
        max_values_per_dimension: max,
    })
    .expect("valid");
    Metrics::new(config).expect("registry")
}

#[test]
fn a_label_value_of_exactly_the_byte_cap_is_kept_one_more_byte_is_other() {
    let m = by_cluster(None);
    let k = kb(&[("nccl/x", "NCCL_TIMEOUT", "cascade")]);
    m.set_kb(&k);
    let at = "c".repeat(MAX_VALUE_BYTES);
    let past = "d".repeat(MAX_VALUE_BYTES + 1);
    let mut b = m.batch();
    b.matched(&event(&k, 0, Some(&at), None));
    b.matched(&event(&k, 0, Some(&past), None));
    m.flush(&mut b);
    let text = m.render();
    let count = |cluster: &str| {
        sample(
            &text,
            "faultline_matches_total",
            &[("error_code", "NCCL_TIMEOUT"), ("cluster", cluster)],
        )
    };
    assert_eq!(count(&at), Some(1.0), "exactly 64 bytes is a label value");
    assert_eq!(count(&past), None);
    assert_eq!(count(OTHER), Some(1.0), "65 bytes is counted as other");
}

#[test]
fn exactly_max_values_per_dimension_are_admitted_one_more_is_other() {
    let m = by_cluster(Some(3));
    let k = kb(&[("nccl/x", "NCCL_TIMEOUT", "cascade")]);
    m.set_kb(&k);
    let mut b = m.batch();
    for cluster in ["a", "b", "c", "d"] {
        b.matched(&event(&k, 0, Some(cluster), None));
    }
    m.flush(&mut b);
    let text = m.render();
    let count = |cluster: &str| {
        sample(
            &text,
            "faultline_matches_total",
            &[("error_code", "NCCL_TIMEOUT"), ("cluster", cluster)],
        )
    };
    for admitted in ["a", "b", "c"] {
        assert_eq!(count(admitted), Some(1.0), "{admitted} is within the cap");
    }
    assert_eq!((count("d"), count(OTHER)), (None, Some(1.0)));
    assert_eq!(
        sample(
            &text,
            "faultline_label_dimension_values",
            &[("dimension", "cluster")]
        ),
        Some(3.0)
    );
}

#[test]
fn dimensions_are_capped_and_overflow_is_counted() {
    let m = by_cluster(Some(2));
    let k = kb(&[
        ("nccl/x", "NCCL_TIMEOUT", "cascade"),
        ("nccl/y", "XID_79", "root"),
    ]);
    m.set_kb(&k);
    let text = m.render();
    assert_eq!(
        sample(
            &text,
            "faultline_matches_total",
            &[("error_code", "XID_79"), ("cluster", "unknown")]
        ),
        Some(0.0)
    );
    let mut b = m.batch();
    for cluster in [
        Some("eu-1"),
        Some("eu-1"),
        Some("us-2"),
        Some("ap-3"),
        Some("bad value!"),
        None,
    ] {
        b.matched(&event(&k, 0, cluster, None));
    }
    m.flush(&mut b);
    let text = m.render();
    let nccl = |cluster| {
        sample(
            &text,
            "faultline_matches_total",
            &[("error_code", "NCCL_TIMEOUT"), ("cluster", cluster)],
        )
    };
    assert_eq!(nccl("eu-1"), Some(2.0));
    assert_eq!(nccl("us-2"), Some(1.0));
    assert_eq!(nccl("ap-3"), None, "past the cap");
    assert_eq!(nccl("other"), Some(2.0), "ap-3 and the implausible value");
    assert_eq!(nccl("unknown"), Some(1.0));
    assert_eq!(
        sample(
            &text,
            "faultline_label_overflow_total",
            &[("dimension", "cluster")]
        ),
        Some(2.0)
    );
    assert_eq!(
        sample(
            &text,
            "faultline_label_dimension_values",
            &[("dimension", "cluster")]
        ),
        Some(2.0)
    );
    // A newly admitted value gets every entry's series at zero.
    assert_eq!(
        sample(
            &text,
            "faultline_matches_total",
            &[("error_code", "XID_79"), ("cluster", "us-2")]
        ),
        Some(0.0)
    );
    // A later batch reuses the admitted values.
    b.matched(&event(&k, 1, Some("us-2"), None));
    m.flush(&mut b);
    assert_eq!(
        sample(
            &m.render(),
            "faultline_matches_total",
            &[("error_code", "XID_79"), ("cluster", "us-2")]
        ),
        Some(1.0)
    );
}

#[test]
fn dimension_config_is_validated() {
    let raw = |dims: &[&str], max| RawMetricsConfig {
        dimensions: dims.iter().map(|d| d.to_string()).collect(),
        max_values_per_dimension: max,
    };
    assert!(MetricsConfig::from_raw(&raw(&["job_id"], None))
        .expect_err("unknown dimension")
        .to_string()
        .contains("metrics.dimensions[0]"));
    assert!(MetricsConfig::from_raw(&raw(&["cluster", "cluster"], None)).is_err());
    assert!(MetricsConfig::from_raw(&raw(&["cluster"], Some(0))).is_err());
    let ok = MetricsConfig::from_raw(&raw(&["cluster"], None)).expect("valid");
    assert_eq!(ok.dimensions[0].max_values, DEFAULT_MAX_VALUES);
}

#[test]
fn latency_comes_from_the_log_timestamp() {
    let m = no_dims();
    let k = kb(&[("nccl/x", "NCCL_TIMEOUT", "cascade")]);
    m.set_kb(&k);
    let mut b = m.batch();
    let ten_s_ago = crate::time::rfc3339_from_unix_nanos(((unix_now() - 10.0) * 1e9) as u128);
    b.matched(&event(&k, 0, None, Some(&ten_s_ago)));
    b.matched(&event(&k, 0, None, Some("2024-05-01T12:00:00.123"))); // no zone: skipped
    b.matched(&event(&k, 0, None, None));
    m.flush(&mut b);
    let text = m.render();
    assert_eq!(
        sample(&text, "faultline_log_to_metric_latency_seconds_count", &[]),
        Some(1.0)
    );
    let sum = sample(&text, "faultline_log_to_metric_latency_seconds_sum", &[]).expect("sum");
    assert!((10.0..3600.0).contains(&sum), "{sum}");
    assert_eq!(
        sample(
            &text,
            "faultline_log_to_metric_latency_seconds_bucket",
            &[("le", "5")]
        ),
        Some(0.0)
    );
}

#[test]
fn partitions_come_and_go() {
    let m = no_dims();
    m.set_partition("logs", 3, 42, Some(1000));
    m.set_partition("logs", 4, -5, None);
    let text = m.render();
    let lag = |p| {
        sample(
            &text,
            "faultline_consumer_lag_records",
            &[("topic", "logs"), ("partition", p)],
        )
    };
    assert_eq!(lag("3"), Some(42.0));
    assert_eq!(
        lag("4"),
        Some(0.0),
        "negative lag (a stale high watermark) clamps to 0"
    );
    assert_eq!(
        sample(&text, "faultline_committed_offset", &[("partition", "3")]),
        Some(1000.0)
    );
    m.forget_partition("logs", 3);
    let text = m.render();
    assert_eq!(
        sample(
            &text,
            "faultline_consumer_lag_records",
            &[("partition", "3")]
        ),
        None
    );
    assert_eq!(
        sample(&text, "faultline_committed_offset", &[("partition", "3")]),
        None
    );
    m.produce_errors(Output::DeadLetter, 2);
    m.spans_dropped(SpanDrop::QueueFull).inc_by(7);
    let text = m.render();
    assert_eq!(
        sample(
            &text,
            "faultline_produce_errors_total",
            &[("output", "dead_letter")]
        ),
        Some(2.0)
    );
    assert_eq!(
        sample(
            &text,
            "faultline_spans_dropped_total",
            &[("reason", "queue_full")]
        ),
        Some(7.0)
    );
}
