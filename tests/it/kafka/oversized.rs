//! Records far over every limit reach `faultline run` (a separate process, as in production):
//! each is dead-lettered in bounded form and the pipeline goes on, with no restart; a stage that
//! stops on its own takes `/readyz` down.

use std::sync::Arc;

use faultline::pipeline::{self, FaultInjection, FaultPoint};
use faultline::sink::kafka::{headers, DEAD_LETTER_HEAD_BYTES};

use super::out_of_process::{broker, make_topic, signal, wait_exit, Topics};
use super::*;

/// Produces `payloads` in order to `partition` of `topic`, keyed `job`, with a producer whose
/// own limit is above the largest (as a shipper with a raised limit would be).
async fn produce_large(bootstrap: &str, topic: &str, partition: i32, payloads: &[Vec<u8>]) {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("message.max.bytes", "20000000")
        // No duplicate on a retry: the mock broker keeps 5 MiB per partition, so a second copy
        // of a 10 MB record would evict the first before faultline reads it.
        .set("enable.idempotence", "true")
        .set("request.timeout.ms", "60000")
        .create()
        .expect("producer");
    for p in payloads {
        producer
            .send(
                FutureRecord::to(topic)
                    .partition(partition)
                    .key("job")
                    .payload(p),
                Duration::from_secs(30),
            )
            .await
            .map_err(|(e, _)| e)
            .expect("delivered");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_of_1_5_and_10_mb_are_dead_lettered_bounded_and_the_next_failure_gets_its_incident()
{
    let (mut broker, bootstrap) = broker();
    let t = Topics::unique();
    let incidents = unique("incidents");
    for (name, parts) in [(&t.input, 2), (&t.output, 1), (&t.dlq, 1), (&incidents, 1)] {
        make_topic(&mut broker, &bootstrap, name, parts).await;
    }
    let big = |n: usize| {
        let mut p = b"BOOM 1 ".to_vec();
        p.resize(n, b'x');
        p
    };
    let kb = test_kb();
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("faultline.toml");
    std::fs::write(
        &config,
        format!(
            "[incidents]\ntopic = {incidents:?}\nwindow_ms = 3000\nquiet_ms = 3000\n\
             [pipeline]\nstate_dir = {:?}\n",
            dir.path().join("state").display().to_string()
        ),
    )
    .expect("config");
    let mut child = super::out_of_process::run_command(&bootstrap, &t, kb.path())
        .arg("--config")
        .arg(&config)
        .spawn()
        .expect("faultline starts");
    // The 10 MB record first and alone in partition 1: librdkafka's mock broker keeps 5 MiB
    // per partition and, past that, drops every message set before the newest one, the newest
    // one's offset included (a real broker keeps it). The 1.5 MB record and then a failure
    // line in partition 0.
    produce_large(&bootstrap, &t.input, 1, &[big(10_000_000)]).await;
    produce_large(&bootstrap, &t.input, 0, &[big(1_500_000)]).await;
    produce_large(&bootstrap, &t.input, 0, &[b"[rank0]: BOOM 2".to_vec()]).await;
    let mut dead = consume_until(&bootstrap, &t.dlq, 1, |r| r.len() >= 2);
    assert_eq!(dead.len(), 2);
    dead.sort_by_key(|d| d.header(headers::ORIGINAL_BYTES).map(|b| b.len()));
    for (d, size) in dead.iter().zip([1_500_000usize, 10_000_000]) {
        assert_eq!(d.header(headers::REASON).as_deref(), Some("too_large"));
        assert_eq!(
            d.payload.len(),
            DEAD_LETTER_HEAD_BYTES,
            "a bounded head only"
        );
        assert!(d.payload.starts_with(b"BOOM 1 xxx"));
        assert_eq!(
            d.header(headers::ORIGINAL_BYTES),
            Some(size.to_string()),
            "the dead letter says how big the record was"
        );
        assert_eq!(d.header(headers::ORIGINAL_HASH).map(|h| h.len()), Some(16));
    }
    assert_ne!(
        dead[0].header(headers::ORIGINAL_HASH),
        dead[1].header(headers::ORIGINAL_HASH)
    );
    assert_eq!(
        dead[0].header(headers::SOURCE),
        Some(format!("{}/0@0", t.input))
    );
    assert_eq!(
        dead[1].header(headers::SOURCE),
        Some(format!("{}/1@0", t.input))
    );
    // The line after them is matched and correlated by the same process.
    let opened = consume_until(&bootstrap, &incidents, 1, |r| !r.is_empty());
    let incident = opened[0].json();
    assert_eq!(incident["root"]["error_code"], "TEST_BOOM", "{incident}");
    assert!(
        child.try_wait().expect("status").is_none(),
        "faultline is still running"
    );
    // The partition holding only the 10 MB record is committed past it (the other one waits
    // for its open incident, which holds its commit until the incident is durable).
    wait_for("the group commits past the 10 MB record", || {
        committed(&bootstrap, &t.group, &t.input, 2).get(1) == Some(&1)
    })
    .await;
    signal(&child, "TERM");
    let status = wait_exit(&mut child);
    assert!(status.success(), "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stage_that_stops_on_its_own_takes_readyz_down_and_fails_the_pipeline() {
    let cluster = Cluster::start(1);
    let input = cluster.topic("logs", 1).await;
    let output = cluster.topic("events", 1).await;
    let dlq = cluster.topic("dead", 1).await;
    let kb = test_kb();
    let mut raw = test_config(
        &cluster.bootstrap,
        &unique("group"),
        &input,
        &output,
        &dlq,
        kb.path(),
    );
    raw.admin.listen = Some("127.0.0.1:0".into());
    let faults = FaultInjection {
        marker: b"STOP-THE-STAGE".to_vec(),
        point: FaultPoint::Fail,
        times: None,
    };
    let config = config(raw);
    let loaded = pipeline::load_kb(&config).expect("kb");
    let running = pipeline::start_with_faults(config, loaded, Some(faults))
        .await
        .expect("starts");
    let addr = running.admin_addr().expect("admin server");
    produce(
        &cluster.bootstrap,
        &input,
        &[
            Out::new(0, "j", "BOOM 1"),
            Out::new(0, "j", "STOP-THE-STAGE"),
        ],
    )
    .await;
    let health = Arc::clone(running.health());
    wait_for("the stage's stop reaches the health", || {
        health.stopped().is_some()
    })
    .await;
    let why = health
        .readiness()
        .expect_err("not ready once a stage stopped");
    assert!(why.contains("a stage stopped: faultline-match"), "{why}");
    // The probe fails too: 503 while the server still answers, refused once it is down.
    if let Some((status, body)) = http_get(addr, "/readyz").await {
        assert_eq!(status, 503, "{body}");
    }
    let stopped = running.wait().await;
    assert!(stopped.is_err(), "the pipeline reports the stage's error");
}

/// A GET over a fresh connection: the status and the body; `None` when nothing listens.
async fn http_get(addr: std::net::SocketAddr, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .expect("request");
    let mut text = String::new();
    s.read_to_string(&mut text).await.expect("response");
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    Some((status, body))
}
