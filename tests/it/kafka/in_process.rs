//! The pipeline in the test's process, against the mock cluster (or a real broker).

use faultline::config::RawConfig;
use faultline::pipeline::{self, PipelineError, Running};
use faultline::sink::kafka::headers;
use rdkafka::mocking::MockCoordinator;
use std::collections::{HashMap, HashSet};

use super::*;

async fn start(raw: RawConfig) -> Running {
    let cfg = config(raw);
    let loaded = pipeline::load_kb(&cfg).expect("test KB loads");
    pipeline::start(cfg, loaded).await.expect("pipeline starts")
}

/// Topics and a group for one test.
struct Setup {
    input: String,
    output: String,
    dlq: String,
    group: String,
}

async fn setup(cluster: &Cluster, partitions: i32) -> Setup {
    Setup {
        input: cluster.topic("logs", partitions).await,
        output: cluster.topic("events", partitions).await,
        dlq: cluster.topic("dead", 1).await,
        group: unique("group"),
    }
}

impl Setup {
    fn raw(&self, cluster: &Cluster, kb: &Path) -> RawConfig {
        test_config(
            &cluster.bootstrap,
            &self.group,
            &self.input,
            &self.output,
            &self.dlq,
            kb,
        )
    }
}

/// The (partition, offset) of the input record an event came from.
fn source_of(event: &In) -> (i64, i64) {
    let v = event.json();
    (
        v["source"]["partition"].as_i64().expect("partition"),
        v["source"]["offset"].as_i64().expect("offset"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offsets_are_committed_only_after_the_output_is_acknowledged() {
    let cluster = Cluster::start(3);
    let Some(mock) = &cluster.mock else {
        eprintln!("skipped: needs the mock cluster to take the output's broker down");
        return;
    };
    let s = setup(&cluster, 1).await;
    // The input, the group and the dead letters on broker 1; the output on broker 2.
    mock.partition_leader(&s.input, 0, Some(1)).expect("leader");
    mock.partition_leader(&s.dlq, 0, Some(1)).expect("leader");
    mock.partition_leader(&s.output, 0, Some(2))
        .expect("leader");
    mock.coordinator(MockCoordinator::Group(s.group.clone()), 1)
        .expect("coordinator");
    produce(
        &cluster.bootstrap,
        &s.input,
        &[
            Out::new(0, "job-1", "all fine"),
            Out::new(0, "job-1", "still fine"),
            Out::new(0, "job-1", "[rank3]: BOOM 2"),
            Out::new(0, "job-1", "fine again"),
        ],
    )
    .await;
    mock.broker_down(2).expect("down");

    let kb = test_kb();
    let running = start(s.raw(&cluster, kb.path())).await;
    // Every record is matched, the two before the match are committed, and the watermark
    // stays before the match, whose output cannot be acknowledged.
    wait_for("all four records matched and offset 2 committed", || {
        running.stats().records == 4
            && committed(&cluster.bootstrap, &s.group, &s.input, 1) == vec![2]
    })
    .await;
    let stats = running.stats();
    assert_eq!(stats.events_acked, 0);
    assert_eq!(stats.in_flight, 2, "the match and the record behind it");
    assert_eq!(stats.watermarks.len(), 1);
    assert_eq!(
        stats.watermarks[0].1, 2,
        "the watermark never passes an unacknowledged record"
    );

    mock.broker_up(2).expect("up");
    wait_for("everything committed once the output is back", || {
        committed(&cluster.bootstrap, &s.group, &s.input, 1) == vec![4]
    })
    .await;
    let events = consume_until(&cluster.bootstrap, &s.output, 1, |r| !r.is_empty());
    let e = events[0].json();
    assert_eq!(e["type"], "match");
    assert_eq!(e["schema_version"], 1);
    assert_eq!(e["error_code"], "TEST_BOOM");
    assert_eq!(e["job_id"], "job-1");
    assert_eq!(e["rank"], 3);
    assert_eq!(e["captures"]["n"], "2");
    assert_eq!(e["kb_version"], running.stats().kb.version.as_str());
    assert_eq!(
        e["source"],
        serde_json::json!({"kind": "kafka", "topic": s.input, "partition": 0, "offset": 2, "line": 1})
    );
    assert_eq!(
        events[0].key.as_deref(),
        Some(&b"job-1"[..]),
        "keyed by job id"
    );
    running.shutdown();
    running.wait().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poison_records_are_dead_lettered_and_the_partition_keeps_flowing() {
    let cluster = Cluster::start(1);
    let s = setup(&cluster, 1).await;
    let mut poison = Out::new(0, "job-p", &b"\xffnot an envelope: BOOM 9"[..]);
    poison.headers.push(("trace".into(), "abc".into()));
    produce(
        &cluster.bootstrap,
        &s.input,
        &[
            Out::new(0, "job-a", r#"{"log":"[rank1]: BOOM 1\n"}"#),
            poison,
            Out::new(0, "job-a", r#"{"log":"nothing here"}"#),
            Out::new(
                0,
                "job-a",
                r#"{"message":"BOOM 3","job_id":"from-envelope"}"#,
            ),
        ],
    )
    .await;
    let kb = test_kb();
    let mut raw = s.raw(&cluster, kb.path());
    raw.input.envelope = Some("json".into());
    raw.admin.listen = Some("127.0.0.1:0".into());
    let running = start(raw).await;
    wait_for("all four committed", || {
        committed(&cluster.bootstrap, &s.group, &s.input, 1) == vec![4]
    })
    .await;

    let dead = consume_until(&cluster.bootstrap, &s.dlq, 1, |r| !r.is_empty());
    assert_eq!(dead.len(), 1);
    let d = &dead[0];
    assert_eq!(
        d.payload, b"\xffnot an envelope: BOOM 9",
        "the original bytes"
    );
    assert_eq!(d.key.as_deref(), Some(&b"job-p"[..]));
    assert_eq!(
        d.header("trace").as_deref(),
        Some("abc"),
        "original headers kept"
    );
    assert_eq!(
        d.header(headers::REASON).as_deref(),
        Some("not_an_envelope")
    );
    assert_eq!(d.header(headers::STAGE).as_deref(), Some("decode"));
    let version = running.stats().kb.version;
    assert_eq!(d.header(headers::KB_VERSION), Some(version));
    assert_eq!(d.header(headers::SOURCE), Some(format!("{}/0@1", s.input)));
    assert!(d
        .header(headers::ERROR)
        .is_some_and(|e| e.contains("line 1")));

    let events = consume_until(&cluster.bootstrap, &s.output, 1, |r| r.len() >= 2);
    let jobs: Vec<String> = events
        .iter()
        .map(|e| e.json()["job_id"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(jobs, vec!["job-a", "from-envelope"]);
    assert_eq!(events[0].json()["rank"], 1);

    // The admin endpoints answer while it runs.
    let addr = running.admin_addr().expect("admin server");
    let ready = http_get(addr, "/readyz").await;
    assert!(ready.starts_with("HTTP/1.1 200"), "{ready}");
    assert!(ready.contains("assigned_partitions 1"), "{ready}");
    assert!(http_get(addr, "/healthz").await.starts_with("HTTP/1.1 200"));
    let stats = running.stats();
    assert_eq!((stats.invalid, stats.dead_letters_acked), (1, 1));
    running.shutdown();
    running.wait().await.expect("clean stop");
}

async fn http_get(addr: std::net::SocketAddr, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr)
        .await
        .expect("connects");
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .expect("writes");
    let mut out = String::new();
    s.read_to_string(&mut out).await.expect("reads");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_invalid_record_limit_stops_consuming() {
    let cluster = Cluster::start(1);
    let s = setup(&cluster, 1).await;
    let mut records = vec![
        Out::new(0, "j", r#"{"log":"BOOM 1"}"#),
        Out::new(0, "j", r#"{"log":"fine"}"#),
    ];
    for i in 0..10 {
        records.push(Out::new(0, "j", format!("plain text {i}")));
    }
    produce(&cluster.bootstrap, &s.input, &records).await;
    let kb = test_kb();
    let mut raw = s.raw(&cluster, kb.path());
    raw.input.envelope = Some("json".into());
    raw.dead_letter.max_consecutive_invalid = Some(3);
    raw.dead_letter.max_invalid_ratio = Some(1.0);
    // Subscribed by pattern (test topic names are [a-z0-9-]: nothing to escape).
    raw.kafka.topics = Some(vec![format!("^{}$", s.input)]);
    let running = start(raw).await;
    let err = running.wait().await.expect_err("the limit trips");
    assert!(matches!(err, PipelineError::InvalidLimit(_)), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("dead_letter.max_consecutive_invalid = 3"),
        "{msg}"
    );
    assert!(msg.contains(&format!("{}/0@5", s.input)), "{msg}");
    // Two good records and three dead letters are done; the fourth invalid one is not, and
    // nothing from it on is committed.
    assert_eq!(
        committed(&cluster.bootstrap, &s.group, &s.input, 1),
        vec![5]
    );
    let dead = consume_all(&cluster.bootstrap, &s.dlq, 1);
    assert_eq!(dead.len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_reload_mid_stream_changes_matches_without_losing_records() {
    let cluster = Cluster::start(1);
    let s = setup(&cluster, 2).await;
    let kb = test_kb();
    let running = start(s.raw(&cluster, kb.path())).await;
    let v1 = running.stats().kb.version;
    // Each record has two lines: one the KB knows, one it learns mid-stream.
    let wave = |from: usize, to: usize| -> Vec<Out> {
        (from..to)
            .map(|i| Out::new((i % 2) as i32, "job", format!("BOOM {i}\nZAP {i}\n")))
            .collect()
    };
    produce(&cluster.bootstrap, &s.input, &wave(0, 100)).await;
    wait_for("the first wave matched", || running.stats().records >= 100).await;

    // A broken entry is rejected and the running KB kept.
    std::fs::write(
        kb.path().join("test").join("broken.toml"),
        "id = \"test/broken\"\n",
    )
    .expect("write");
    wait_for("the failed reload counted", || {
        running.stats().kb.failures >= 1
    })
    .await;
    assert_eq!(running.stats().kb.version, v1);
    assert!(running.stats().kb.last_error.is_some());
    std::fs::remove_file(kb.path().join("test").join("broken.toml")).expect("rm");

    // Records flow while the new entry is added.
    let producer = {
        let (b, t) = (cluster.bootstrap.clone(), s.input.clone());
        let records = wave(100, 300);
        tokio::spawn(async move { produce(&b, &t, &records).await })
    };
    write_entry(kb.path(), "zap", "ZAP");
    wait_for("the new KB swapped in", || {
        let st = running.stats().kb;
        st.version != v1 && st.reloads >= 1
    })
    .await;
    let v2 = running.stats().kb.version;
    producer.await.expect("produced");
    produce(&cluster.bootstrap, &s.input, &wave(300, 400)).await;
    wait_for("all 400 committed", || {
        committed(&cluster.bootstrap, &s.group, &s.input, 2)
            .iter()
            .sum::<i64>()
            == 400
    })
    .await;
    running.shutdown();
    running.wait().await.expect("clean stop");

    let events = consume_all(&cluster.bootstrap, &s.output, 2);
    // Per input record: the versions of its events and the codes they matched.
    let mut by_record: HashMap<(i64, i64), Vec<(String, String)>> = HashMap::new();
    for e in &events {
        let v = e.json();
        by_record.entry(source_of(e)).or_default().push((
            v["kb_version"].as_str().unwrap_or_default().to_string(),
            v["error_code"].as_str().unwrap_or_default().to_string(),
        ));
    }
    assert_eq!(by_record.len(), 400, "every record matched at least once");
    let mut seen_v2: HashSet<i64> = HashSet::new();
    let mut order: Vec<_> = by_record.keys().copied().collect();
    order.sort();
    for key in order {
        let evs = &by_record[&key];
        let versions: HashSet<&str> = evs.iter().map(|(v, _)| v.as_str()).collect();
        assert_eq!(versions.len(), 1, "{key:?}: one KB per record: {evs:?}");
        let codes: HashSet<&str> = evs.iter().map(|(_, c)| c.as_str()).collect();
        if versions.contains(v1.as_str()) {
            assert_eq!(codes, HashSet::from(["TEST_BOOM"]), "{key:?}");
            assert!(
                !seen_v2.contains(&key.0),
                "{key:?}: v1 after v2 on one partition"
            );
        } else {
            assert!(versions.contains(v2.as_str()), "{key:?}: {evs:?}");
            assert_eq!(codes, HashSet::from(["TEST_BOOM", "TEST_ZAP"]), "{key:?}");
            seen_v2.insert(key.0);
        }
    }
    assert!(by_record.values().any(|e| e[0].0 == v1));
    assert!(by_record.values().any(|e| e[0].0 == v2));
}

/// Every one of `n` records (payload `BOOM <i>`) produced at least one event.
fn assert_all_matched(events: &[In], n: usize) -> usize {
    let mut seen = HashSet::new();
    for e in events {
        let v = e.json();
        let i: usize = v["captures"]["n"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .expect("capture");
        seen.insert(i);
    }
    let missing: Vec<usize> = (0..n).filter(|i| !seen.contains(i)).collect();
    assert!(
        missing.is_empty(),
        "{} records lost: {missing:?}",
        missing.len()
    );
    events.len() - n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_joining_and_leaving_lose_nothing() {
    let cluster = Cluster::start(1);
    let s = setup(&cluster, 6).await;
    let kb = test_kb();
    let wave = |from: usize, to: usize| -> Vec<Out> {
        (from..to)
            .map(|i| {
                Out::new(
                    (i % 6) as i32,
                    &format!("job-{}", i % 7),
                    format!("[rank0]: BOOM {i}"),
                )
            })
            .collect()
    };
    let total = || {
        committed(&cluster.bootstrap, &s.group, &s.input, 6)
            .iter()
            .map(|&o| o.max(0))
            .sum::<i64>()
    };
    let a = start(s.raw(&cluster, kb.path())).await;
    produce(&cluster.bootstrap, &s.input, &wave(0, 200)).await;
    wait_for("A consumed the first wave", || a.stats().records >= 200).await;
    let b = start(s.raw(&cluster, kb.path())).await;
    produce(&cluster.bootstrap, &s.input, &wave(200, 400)).await;
    wait_for("B got partitions", || b.stats().assigned_partitions > 0).await;
    let c = start(s.raw(&cluster, kb.path())).await;
    produce(&cluster.bootstrap, &s.input, &wave(400, 600)).await;
    wait_for("C got partitions", || c.stats().assigned_partitions > 0).await;
    // A leaves while records flow; its partitions move to B and C.
    let flow = {
        let (bs, t) = (cluster.bootstrap.clone(), s.input.clone());
        let records = wave(600, 800);
        tokio::spawn(async move { produce(&bs, &t, &records).await })
    };
    a.shutdown();
    a.wait().await.expect("A stops cleanly");
    flow.await.expect("produced");
    wait_for("B and C share all six partitions", || {
        b.stats().assigned_partitions + c.stats().assigned_partitions == 6
    })
    .await;
    b.shutdown();
    b.wait().await.expect("B stops cleanly");
    produce(&cluster.bootstrap, &s.input, &wave(800, 1000)).await;
    wait_for("C committed everything", || total() == 1000).await;
    assert_eq!(c.stats().assigned_partitions, 6);
    c.shutdown();
    c.wait().await.expect("C stops cleanly");

    let events = consume_all(&cluster.bootstrap, &s.output, 6);
    let duplicates = assert_all_matched(&events, 1000);
    eprintln!(
        "rebalance: {} events for 1000 records ({duplicates} duplicates)",
        events.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_down_and_back_loses_nothing() {
    let cluster = Cluster::start(3);
    let Some(mock) = &cluster.mock else {
        eprintln!("skipped: needs the mock cluster to take a broker down");
        return;
    };
    let s = setup(&cluster, 3).await;
    for p in 0..3 {
        mock.partition_leader(&s.input, p, Some(p + 1))
            .expect("leader");
        mock.partition_leader(&s.output, p, Some(p + 1))
            .expect("leader");
    }
    mock.partition_leader(&s.dlq, 0, Some(1)).expect("leader");
    mock.coordinator(MockCoordinator::Group(s.group.clone()), 1)
        .expect("coordinator");
    let n = 900;
    let records: Vec<Out> = (0..n)
        .map(|i| Out::new((i % 3) as i32, &format!("job-{i}"), format!("BOOM {i}")))
        .collect();
    produce(&cluster.bootstrap, &s.input, &records[..300]).await;
    let kb = test_kb();
    let mut raw = s.raw(&cluster, kb.path());
    raw.pipeline.batch_max_records = Some(10);
    let running = start(raw).await;
    wait_for("some events out", || running.stats().events_acked > 0).await;
    // Broker 3 leads input and output partition 2.
    mock.broker_down(3).expect("down");
    let flow = {
        let (b, t) = (cluster.bootstrap.clone(), s.input.clone());
        let rest: Vec<Out> = records[300..].to_vec();
        tokio::spawn(async move { produce(&b, &t, &rest).await })
    };
    let before = running.stats().events_acked;
    wait_for("partitions 0 and 1 keep flowing", || {
        running.stats().events_acked >= before + 100
    })
    .await;
    mock.broker_up(3).expect("up");
    flow.await.expect("produced");
    wait_for("everything committed", || {
        committed(&cluster.bootstrap, &s.group, &s.input, 3)
            .iter()
            .sum::<i64>()
            == n as i64
    })
    .await;
    running.shutdown();
    running.wait().await.expect("clean stop");
    let events = consume_all(&cluster.bootstrap, &s.output, 3);
    assert_all_matched(&events, n);
}

#[test]
fn dead_letter_header_names_are_stable() {
    // They are a contract with whoever reads the dead-letter topic.
    let names = [
        headers::REASON,
        headers::ERROR,
        headers::STAGE,
        headers::KB_VERSION,
        headers::SOURCE,
        headers::ATTEMPTS,
    ];
    assert_eq!(
        names,
        [
            "faultline.reason",
            "faultline.error",
            "faultline.stage",
            "faultline.kb_version",
            "faultline.source",
            "faultline.attempts"
        ]
    );
}

/// The service end to end with a real Prometheus server: records through the mock cluster,
/// the pipeline's `/metrics` scraped, the match counts and pipeline health queried with PromQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_prometheus_scrapes_the_running_pipeline() {
    let Some(binary) = crate::observability::tool(
        "prometheus",
        "a_real_prometheus_scrapes_the_running_pipeline",
    ) else {
        return;
    };
    let cluster = Cluster::start(1);
    let s = setup(&cluster, 1).await;
    let records: Vec<Out> = (0..30)
        .map(|i| Out::new(0, "job-m", format!("[rank{i}]: BOOM {i}")))
        .chain((0..19).map(|i| Out::new(0, "job-m", format!("healthy line {i}"))))
        // Over max_record_bytes below: one dead letter for the dead-letter panels.
        .chain([Out::new(0, "job-m", "x".repeat(2048))])
        .collect();
    produce(&cluster.bootstrap, &s.input, &records).await;
    let kb = test_kb();
    write_entry(kb.path(), "never", "NEVERSEEN");
    let mut raw = s.raw(&cluster, kb.path());
    raw.admin.listen = Some("127.0.0.1:0".into());
    raw.kafka
        .consumer_options
        .insert("statistics.interval.ms".into(), "200".into());
    raw.input.max_record_bytes = Some(1024);
    let running = start(raw).await;
    // A forced reload of the unchanged KB, for the reload panels.
    running.reload();
    wait_for("all 50 committed", || {
        committed(&cluster.bootstrap, &s.group, &s.input, 1) == vec![50]
    })
    .await;
    let addr = running.admin_addr().expect("admin server");

    // The exposition is valid for promtool.
    let body = http_get(addr, "/metrics").await;
    let text = body
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_string();
    let dir = tempfile::tempdir().expect("tmp");
    let file = dir.path().join("metrics.txt");
    std::fs::write(&file, &text).expect("write");
    let check = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("promtool check metrics < {}", file.display()))
        .output()
        .expect("promtool runs");
    crate::support::assert_success(&check);

    let server = crate::observability::PrometheusServer::start(&binary, addr);
    let series = |q: &str| -> Option<f64> {
        let r = server.query(q).ok()?;
        r.first()?["value"][1].as_str()?.parse().ok()
    };
    let matched = crate::observability::wait_for(120, "a scrape with the matches", || {
        series("sum(faultline_matches_total{error_code=\"TEST_BOOM\"})").filter(|v| *v >= 30.0)
    });
    assert_eq!(matched, 30.0);
    // Every KB entry's series exists from the start, at zero.
    assert_eq!(
        series("faultline_matches_total{error_code=\"TEST_NEVER\"}"),
        Some(0.0),
        "{}",
        server.log()
    );
    assert_eq!(series("faultline_records_consumed_total"), Some(50.0));
    assert_eq!(series("faultline_lines_scanned_total"), Some(49.0));
    assert_eq!(
        series("sum(faultline_records_dead_lettered_total)"),
        Some(1.0)
    );
    assert!(series("faultline_batch_scan_duration_seconds_count").is_some_and(|n| n >= 1.0));
    assert_eq!(series("faultline_knowledge_base_entries"), Some(2.0));
    // Lag and committed offsets come from librdkafka's statistics of the assigned partition.
    let committed = crate::observability::wait_for(120, "the committed offset", || {
        series(&format!(
            "faultline_committed_offset{{topic=\"{}\",partition=\"0\"}}",
            s.input
        ))
        .filter(|v| *v >= 50.0)
    });
    assert_eq!(committed, 50.0);
    assert_eq!(
        series(&format!(
            "faultline_consumer_lag_records{{topic=\"{}\"}}",
            s.input
        )),
        Some(0.0)
    );
    running.shutdown();
    running.wait().await.expect("clean stop");
}

/// The service exports one span per match to a real OTLP gRPC receiver (built from the official
/// protocol definitions), with the Kafka coordinates of the record it came from.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_running_pipeline_exports_a_span_per_match_over_otlp() {
    use crate::telemetry::string;

    let (otlp, receiver, server) = crate::telemetry::start_grpc_receiver().await;
    let cluster = Cluster::start(1);
    let s = setup(&cluster, 1).await;
    let records: Vec<Out> = (0..5)
        .map(|i| Out::new(0, "job-t", format!("[rank{i}]: BOOM {i}")))
        .collect();
    produce(&cluster.bootstrap, &s.input, &records).await;
    let kb = test_kb();
    let mut raw = s.raw(&cluster, kb.path());
    raw.telemetry.endpoint = Some(format!("http://{otlp}"));
    raw.telemetry.protocol = Some("grpc".into());
    raw.telemetry.scheduled_delay_ms = Some(100);
    let running = start(raw).await;
    wait_for("all five committed", || {
        committed(&cluster.bootstrap, &s.group, &s.input, 1) == vec![5]
    })
    .await;
    running.shutdown();
    running.wait().await.expect("clean stop, spans flushed");
    let received = receiver.0.clone();
    let got = tokio::task::spawn_blocking(move || crate::telemetry::spans_arrive(&received, 5))
        .await
        .expect("joins");
    let spans: Vec<_> = crate::telemetry::spans(&got).collect();
    assert_eq!(spans.len(), 5);
    let mut offsets: Vec<String> = Vec::new();
    for span in &spans {
        assert_eq!(
            string(&span.attributes, "exception.type").as_deref(),
            Some("TEST_BOOM")
        );
        assert_eq!(
            string(&span.attributes, "faultline.job_id").as_deref(),
            Some("job-t")
        );
        assert_eq!(
            string(&span.attributes, "messaging.destination.name").as_deref(),
            Some(s.input.as_str())
        );
        offsets.push(format!(
            "{:?}",
            crate::telemetry::attr(&span.attributes, "messaging.kafka.offset")
        ));
    }
    offsets.sort();
    offsets.dedup();
    assert_eq!(offsets.len(), 5, "one span per record: {offsets:?}");
    server.abort();
}
