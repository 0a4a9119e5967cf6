//! A whole-broker outage that `faultline run` rides out, out of process: librdkafka reconnects,
//! nothing is lost, and the log says so at WARN (one line when a connection is lost, one summary
//! with the outage's duration when it is back), never at ERROR, which pages people. The broker
//! disconnects are counted in `faultline_broker_disconnects_total`.

use super::crash_loop::Member;
use super::out_of_process::{broker, run_over, signal, wait_exit, Topics};
use super::*;

/// The admin address the member logged (`addr=127.0.0.1:PORT`).
fn admin_addr(log: &[String]) -> Option<std::net::SocketAddr> {
    log.iter()
        .filter(|l| l.contains("admin server listening"))
        .find_map(|l| {
            l.split("addr=")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
}

/// One sample of `/metrics`, summed over the series whose line starts with `series`.
fn metric(addr: std::net::SocketAddr, series: &str) -> f64 {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
        return 0.0;
    };
    let _ = s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    text.lines()
        .filter(|l| l.starts_with(series))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The level of a `tracing` fmt line (`<time>  WARN target: ...`).
fn level(line: &str) -> Option<&str> {
    line.split_whitespace()
        .nth(1)
        .filter(|w| ["ERROR", "WARN", "INFO", "DEBUG", "TRACE"].contains(w))
}

/// `faultline run` over the test's topics, logging at INFO, its admin server on a free port.
fn member_command(bootstrap: &str, t: &Topics, kb: &std::path::Path) -> std::process::Command {
    let mut cmd = run_over(bootstrap, t, "127.0.0.1:0");
    cmd.env("FAULTLINE_LOG", "info").arg("--kb").arg(kb);
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_outage_that_is_ridden_out_logs_no_error() {
    let (mut broker, bootstrap) = broker();
    if broker.is_none() {
        eprintln!("SKIPPED: needs the mock broker process to take the broker down");
        return;
    }
    let t = Topics::made(&mut broker, &bootstrap).await;
    let kb = test_kb();
    let mut cmd = member_command(&bootstrap, &t, kb.path());
    cmd.args(["--kafka-option", "statistics.interval.ms=200"])
        .args(["--consumer-option", "session.timeout.ms=6000"])
        .args(["--consumer-option", "heartbeat.interval.ms=500"]);
    let mut member = Member::spawn(&mut cmd);
    let wave = |from: usize, to: usize| -> Vec<Out> {
        (from..to)
            .map(|i| Out::new(0, "job", format!("BOOM {i}")))
            .collect()
    };
    produce(&bootstrap, &t.input, &wave(0, 100)).await;
    wait_for("the first wave committed", || {
        committed(&bootstrap, &t.group, &t.input, 1) == vec![100]
    })
    .await;
    wait_for("the admin address", || member.saw("admin server listening")).await;
    let admin = admin_addr(&member.log).expect("addr=HOST:PORT");
    let disconnects = "faultline_broker_disconnects_total";
    let before = metric(admin, disconnects);

    // The whole cluster goes down; records keep coming (the producer below waits for it).
    broker.as_mut().expect("mock broker").command("down 1");
    let flow = {
        let (b, topic) = (bootstrap.clone(), t.input.clone());
        tokio::spawn(async move { produce(&b, &topic, &wave(100, 300)).await })
    };
    wait_for("both clients saw the outage", || {
        metric(admin, disconnects) >= before + 2.0
    })
    .await;
    broker.as_mut().expect("mock broker").command("up 1");
    flow.await.expect("produced once the broker is back");
    wait_for("everything committed", || {
        committed(&bootstrap, &t.group, &t.input, 1) == vec![300]
    })
    .await;
    wait_for("the outage's summary", || member.saw("reachable again")).await;
    signal(&member.child, "TERM");
    assert!(wait_exit(&mut member.child).success(), "SIGTERM exits 0");
    let log = member.finish().to_vec();
    let errors: Vec<&String> = log.iter().filter(|l| level(l) == Some("ERROR")).collect();
    assert!(
        errors.is_empty(),
        "ERROR lines for an outage ridden out: {errors:#?}"
    );
    let summaries: Vec<&String> = log
        .iter()
        .filter(|l| l.contains("reachable again"))
        .collect();
    assert_eq!(summaries.len(), 1, "one summary per outage: {summaries:#?}");
    assert_eq!(level(summaries[0]), Some("WARN"));
    assert!(summaries[0].contains("down_for_ms="), "{}", summaries[0]);
    let events = consume_all(&bootstrap, &t.output, 1);
    let mut seen: Vec<i64> = events
        .iter()
        .map(|e| e.json()["source"]["offset"].as_i64().expect("offset"))
        .collect();
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen.len(), 300, "every record matched");
}

/// A committed offset the broker no longer holds (here one past the end; in production, one
/// that fell out of the topic's retention while a member lagged) makes librdkafka jump to
/// `auto_offset_reset`: records are skipped, and the operator must hear it. librdkafka says so
/// only at WARNING, which it never handed over while faultline left its log level to the `log`
/// crate (unused here): an ERROR line now, and `faultline_consumer_offset_resets_total`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_committed_offset_the_broker_no_longer_holds_is_an_error_and_counted() {
    let (mut broker, bootstrap) = broker();
    if broker.is_none() {
        eprintln!("SKIPPED: needs the mock broker process");
        return;
    }
    let t = Topics::made(&mut broker, &bootstrap).await;
    let records: Vec<Out> = (0..10)
        .map(|i| Out::new(0, "job", format!("BOOM {i}")))
        .collect();
    produce(&bootstrap, &t.input, &records).await;
    {
        let c: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &bootstrap)
            .set("group.id", &t.group)
            .create()
            .expect("committing consumer");
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&t.input, 0, Offset::Offset(1_000))
            .expect("offset");
        c.commit(&tpl, rdkafka::consumer::CommitMode::Sync)
            .expect("commit past the end");
    }
    let kb = test_kb();
    let mut member = Member::spawn(&mut member_command(&bootstrap, &t, kb.path()));
    wait_for("the admin address", || member.saw("admin server listening")).await;
    let admin = admin_addr(&member.log).expect("addr=HOST:PORT");
    wait_for("the reset counted", || {
        metric(admin, "faultline_consumer_offset_resets_total") >= 1.0
    })
    .await;
    signal(&member.child, "TERM");
    assert!(wait_exit(&mut member.child).success(), "SIGTERM exits 0");
    let log = member.finish().to_vec();
    let reset: Vec<&String> = log.iter().filter(|l| l.contains("NOT")).collect();
    assert_eq!(reset.len(), 1, "one line for one reset: {log:#?}");
    assert_eq!(level(reset[0]), Some("ERROR"), "{}", reset[0]);
    assert!(
        reset[0].contains("offset reset"),
        "librdkafka's words: {}",
        reset[0]
    );
}
