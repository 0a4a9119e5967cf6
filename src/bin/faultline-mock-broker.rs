//! A Kafka-protocol broker in a process of its own, for tests and benchmarks that run
//! `faultline` as a separate process (and kill it): librdkafka's mock cluster.
//!
//! Prints `bootstrap=HOST:PORT,...` on stdout, then obeys commands on stdin, one per line,
//! answering `ok` or `error: ...`:
//!
//! ```text
//! topic NAME PARTITIONS      create a topic (replication 1)
//! leader NAME PARTITION ID   move a partition's leadership to broker ID
//! down ID | up ID            take a broker down or bring it back (-1: all)
//! ```
//!
//! It exits when stdin closes. Not a real broker: data lives in memory, nothing is durable.
//!
//! `--group-initial-rebalance-delay-ms N` sets what a real broker calls
//! `group.initial.rebalance.delay.ms` (librdkafka's mock, like Kafka, waits 3000 ms before the
//! first member of an empty group gets its assignment); benchmarks set it to 0.

use std::io::{BufRead, Write};
use std::process::ExitCode;

use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseProducer, Producer};

fn main() -> ExitCode {
    let mut brokers = 1;
    let mut delay_ms = None;
    let mut topics = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match (a.as_str(), args.next()) {
            ("--brokers", Some(n)) => match n.parse() {
                Ok(n) => brokers = n,
                Err(_) => return usage(),
            },
            ("--group-initial-rebalance-delay-ms", Some(n)) => match n.parse() {
                Ok(n) => delay_ms = Some(n),
                Err(_) => return usage(),
            },
            ("--topic", Some(t)) => {
                match t.split_once(':').map(|(n, p)| (n.to_string(), p.parse())) {
                    Some((name, Ok(parts))) => topics.push((name, parts)),
                    _ => return usage(),
                }
            }
            _ => return usage(),
        }
    }
    // The cluster lives inside this client (librdkafka's `test.mock.num.brokers`).
    let client: BaseProducer = match ClientConfig::new()
        .set("test.mock.num.brokers", brokers.to_string())
        .create()
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("faultline-mock-broker: {e}");
            return ExitCode::FAILURE;
        }
    };
    let Some(cluster) = client.client().mock_cluster() else {
        eprintln!("faultline-mock-broker: librdkafka did not create a mock cluster");
        return ExitCode::FAILURE;
    };
    if let Some(ms) = delay_ms {
        set_initial_rebalance_delay(&client, ms);
    }
    for (name, parts) in &topics {
        if let Err(e) = cluster.create_topic(name, *parts, 1) {
            eprintln!("faultline-mock-broker: creating {name}: {e}");
            return ExitCode::FAILURE;
        }
    }
    let mut out = std::io::stdout().lock();
    if writeln!(out, "bootstrap={}", cluster.bootstrap_servers())
        .and_then(|()| out.flush())
        .is_err()
    {
        return ExitCode::FAILURE;
    }
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let words: Vec<&str> = line.split_whitespace().collect();
        let result = match words.as_slice() {
            ["topic", name, parts] => parts
                .parse()
                .map_err(|e| format!("{e}"))
                .and_then(|p| cluster.create_topic(name, p, 1).map_err(|e| e.to_string())),
            ["leader", name, part, id] => match (part.parse(), id.parse()) {
                (Ok(p), Ok(id)) => cluster
                    .partition_leader(name, p, Some(id))
                    .map_err(|e| e.to_string()),
                _ => Err("expected: leader NAME PARTITION ID".into()),
            },
            ["down", id] => id
                .parse()
                .map_err(|e| format!("{e}"))
                .and_then(|id| cluster.broker_down(id).map_err(|e| e.to_string())),
            ["up", id] => id
                .parse()
                .map_err(|e| format!("{e}"))
                .and_then(|id| cluster.broker_up(id).map_err(|e| e.to_string())),
            [] => continue,
            _ => Err(format!("unknown command {line:?}")),
        };
        let reply = match result {
            Ok(()) => writeln!(out, "ok"),
            Err(e) => writeln!(out, "error: {e}"),
        };
        if reply.and_then(|()| out.flush()).is_err() {
            break;
        }
    }
    ExitCode::SUCCESS
}

/// The mock cluster's `group.initial.rebalance.delay.ms`: rdkafka has no safe wrapper for it.
#[allow(unsafe_code)]
fn set_initial_rebalance_delay(client: &BaseProducer, ms: i32) {
    use rdkafka::bindings::{
        rd_kafka_handle_mock_cluster, rd_kafka_mock_group_initial_rebalance_delay_ms,
    };
    // SAFETY: `native_ptr` is the live handle of `client`, which outlives this call; the mock
    // cluster it returns (checked for null) is owned by that handle. The setter only stores an
    // integer in the cluster's defaults.
    unsafe {
        let mcluster = rd_kafka_handle_mock_cluster(client.client().native_ptr());
        if !mcluster.is_null() {
            rd_kafka_mock_group_initial_rebalance_delay_ms(mcluster, ms);
        }
    }
}

fn usage() -> ExitCode {
    eprintln!(
        "usage: faultline-mock-broker [--brokers N] [--topic NAME:PARTITIONS]... \
         [--group-initial-rebalance-delay-ms MS]"
    );
    ExitCode::from(2)
}
