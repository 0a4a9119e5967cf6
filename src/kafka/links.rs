//! Broker connections as the operator should see them: one WARN line when a client loses its
//! connection to a broker, one WARN summary with the outage's duration when the broker is
//! reachable again, and `faultline_broker_disconnects_total` counting the losses. In between,
//! librdkafka's own lines about the same outage (every failed reconnect, "all brokers down",
//! the consumer's transport errors) go to DEBUG.
//!
//! Why: librdkafka logs a refused connection at its ERROR level and retries it by itself, so a
//! broker restart produced about ten ERROR lines per outage although nothing was lost and nobody
//! had to act; ERROR pages people. What librdkafka cannot retry its way out of (failed
//! authentication, TLS errors) stays at ERROR ([`is_retried_connection_failure`]).
//!
//! An outage is keyed by the broker's address (`host:port`): the consumer's and the producer's
//! connections to it, and librdkafka's several handles per broker (bootstrap, by node id, group
//! coordinator), are one outage. It ends when librdkafka's statistics (every
//! `statistics.interval.ms`) show a handle to that address up since after it started.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use prometheus::IntCounter;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;

use super::log_librdkafka;
use crate::metrics::KafkaClient;

/// The most brokers with an outage in progress; more (a cluster of thousands of brokers, all
/// down) are logged by the plain bridge, line by line.
pub const MAX_OUTAGES: usize = 1024;

/// An outage in progress.
#[derive(Debug)]
struct Outage {
    since: Instant,
    /// Clients that lost their connection in this outage (each counted once), by
    /// [`KafkaClient`] position.
    clients: [bool; 2],
    /// Failed connection attempts reported, the first included.
    failures: u64,
}

/// The broker outages of both clients, shared by the source and the sink.
#[derive(Debug)]
pub struct BrokerLinks {
    outages: Mutex<HashMap<String, Outage>>,
    /// `faultline_broker_disconnects_total{client}`: consumer, then producer.
    disconnects: Option<[IntCounter; 2]>,
    /// `faultline_consumer_offset_resets_total`.
    resets: Option<IntCounter>,
}

impl Default for BrokerLinks {
    fn default() -> Self {
        BrokerLinks {
            outages: Mutex::new(HashMap::new()),
            disconnects: None,
            resets: None,
        }
    }
}

impl BrokerLinks {
    /// Links counting disconnects in `consumer` and `producer` (the families' series).
    pub fn new(consumer: IntCounter, producer: IntCounter) -> Self {
        BrokerLinks {
            disconnects: Some([consumer, producer]),
            ..Default::default()
        }
    }

    /// Also counts offset resets in `resets` ([`BrokerLinks::log`]).
    pub fn with_offset_resets(mut self, resets: IntCounter) -> Self {
        self.resets = Some(resets);
        self
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Outage>> {
        self.outages.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a broker outage is in progress.
    pub fn in_outage(&self) -> bool {
        !self.lock().is_empty()
    }

    /// One of librdkafka's log lines.
    ///
    /// An offset reset after an error (librdkafka's `OFFSET` warning: the partition's next
    /// offset is not on the broker any more, past its retention or truncated) means records
    /// were skipped: ERROR, counted in `faultline_consumer_offset_resets_total`.
    pub fn log(&self, client: KafkaClient, level: RDKafkaLogLevel, fac: &str, message: &str) {
        if is_lossy_offset_reset(level, fac, message) {
            if let Some(c) = &self.resets {
                c.inc();
            }
            tracing::error!(
                client = client.as_str(),
                "{message}: the records between the lost position and the new one are NOT \
                 processed (the committed offset fell out of the topic's retention, or the log \
                 was truncated; raise retention.ms or fix the lag)"
            );
            return;
        }
        if fac == "COMMITFAIL" {
            // Commits fail while the group rebalances or its coordinator is away; the commit
            // callback sees each outcome, the next commit retries, and revokes commit
            // synchronously. Hundreds of queued async commits fail at once after an outage.
            tracing::debug!(client = client.as_str(), fac, "{message}");
            return;
        }
        if is_retried_connection_failure(fac, message) {
            if let Some(broker) = broker_address(message) {
                if self.failed(client, broker, message, Instant::now()) {
                    return;
                }
            }
        }
        log_librdkafka(client.as_str(), level, fac, message);
    }

    /// librdkafka's error callback (and the consumer's poll errors, with an empty reason).
    pub fn error(&self, client: KafkaClient, error: &KafkaError, reason: &str) {
        let code = match error {
            KafkaError::Global(c) | KafkaError::MessageConsumption(c) => Some(*c),
            _ => None,
        };
        let transport = matches!(
            code,
            Some(
                RDKafkaErrorCode::BrokerTransportFailure
                    | RDKafkaErrorCode::AllBrokersDown
                    | RDKafkaErrorCode::Resolve
            )
        );
        if transport {
            let broker = broker_address(reason);
            let handled = match broker {
                Some(b) => self.failed(client, b, reason, Instant::now()),
                None => self.in_outage(),
            };
            if handled {
                tracing::debug!(client = client.as_str(), error = %error, reason, "librdkafka");
                return;
            }
        }
        tracing::warn!(client = client.as_str(), error = %error, reason, "librdkafka");
    }

    /// A failed connection to `broker` at `now`. Returns false when it is not tracked (too many
    /// outages): the caller logs it itself.
    fn failed(&self, client: KafkaClient, broker: &str, message: &str, now: Instant) -> bool {
        let mut outages = self.lock();
        if !outages.contains_key(broker) && outages.len() >= MAX_OUTAGES {
            return false;
        }
        let outage = outages.entry(broker.to_string()).or_insert_with(|| {
            tracing::warn!(
                broker,
                client = client.as_str(),
                error = message,
                "lost the connection to a broker; librdkafka reconnects by itself, nothing is \
                 lost while it does"
            );
            Outage {
                since: now,
                clients: [false; 2],
                failures: 0,
            }
        });
        outage.failures += 1;
        let i = client as usize;
        if !outage.clients[i] {
            outage.clients[i] = true;
            if let Some(c) = &self.disconnects {
                c[i].inc();
            }
        } else {
            tracing::debug!(
                broker,
                client = client.as_str(),
                error = message,
                "librdkafka"
            );
        }
        true
    }

    /// librdkafka's statistics of one client: an outage ends when a handle to its broker is up
    /// since after the outage started.
    pub fn stats(&self, client: KafkaClient, statistics: &rdkafka::Statistics) {
        let now = Instant::now();
        let up = statistics.brokers.values().filter(|b| b.state == "UP");
        for b in up {
            let age = Duration::from_micros(b.stateage.max(0) as u64);
            let address = broker_address(&b.nodename).unwrap_or(&b.nodename);
            self.up(client, address, now.checked_sub(age).unwrap_or(now));
        }
    }

    /// `broker` is up, since `since`.
    fn up(&self, client: KafkaClient, broker: &str, since: Instant) {
        let mut outages = self.lock();
        let Some(outage) = outages.get(broker) else {
            return;
        };
        if since < outage.since {
            return; // a handle that never went down: the outage is of others
        }
        let down_for = since.duration_since(outage.since);
        let clients: Vec<&str> = KafkaClient::ALL
            .iter()
            .filter(|c| outage.clients[**c as usize])
            .map(|c| c.as_str())
            .collect();
        tracing::warn!(broker, client = client.as_str(), clients = ?clients,
            down_for_ms = down_for.as_millis() as u64, failed_attempts = outage.failures,
            "broker reachable again after an outage; librdkafka reconnected");
        outages.remove(broker);
    }
}

/// Whether a librdkafka log line reports an offset reset caused by an error: the position was
/// not on the broker any more, so records were skipped. librdkafka logs such a reset at
/// WARNING; a reset without an error (no committed offset yet) is a DEBUG line.
pub fn is_lossy_offset_reset(level: RDKafkaLogLevel, fac: &str, message: &str) -> bool {
    fac == "OFFSET"
        && (level as i32) <= RDKafkaLogLevel::Warning as i32
        && message.contains("offset reset")
}

/// Whether a librdkafka log line reports a connection failure that librdkafka retries by itself
/// (refused, reset, timed out, unresolvable): `FAIL` lines, except authentication and TLS
/// failures, which need an operator.
pub fn is_retried_connection_failure(fac: &str, message: &str) -> bool {
    const OPERATOR: [&str; 5] = ["SASL", "SSL", "uthenticat", "ertificate", "nauthorized"];
    fac == "FAIL" && !OPERATOR.iter().any(|w| message.contains(w))
}

/// The `host:port` a librdkafka line is about: the first word that is an address, without a
/// handle's `/id` or `/bootstrap` suffix (`127.0.0.1:9092/1: Connect to ... failed` and
/// `GroupCoordinator: 127.0.0.1:9092: Connect to ...` both name `127.0.0.1:9092`).
pub fn broker_address(text: &str) -> Option<&str> {
    text.split_whitespace().find_map(|w| {
        if w.starts_with("[thrd:") {
            return None;
        }
        let w = w.trim_end_matches(':');
        let w = w.split('/').next().unwrap_or(w);
        let w = w.rsplit('#').next().unwrap_or(w);
        let (host, port) = w.rsplit_once(':')?;
        let is_port = !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit());
        (is_port && !host.is_empty()).then_some(w)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broker_addresses_are_found_in_librdkafka_lines() {
        for (line, want) in [
            (
                "[thrd:127.0.0.1:33145/1]: 127.0.0.1:33145/1: Connect to ipv4#127.0.0.1:33145 \
                 failed: Connection refused (after 0ms in state CONNECT)",
                Some("127.0.0.1:33145"),
            ),
            (
                "GroupCoordinator: kafka-1.example:9092: Connect to ipv4#10.0.0.1:9092 failed",
                Some("kafka-1.example:9092"),
            ),
            ("kafka-2:9093/bootstrap: Disconnected", Some("kafka-2:9093")),
            ("1/1 brokers are down", None),
        ] {
            assert_eq!(broker_address(line), want, "{line}");
        }
    }

    #[test]
    fn only_an_offset_reset_caused_by_an_error_is_lossy() {
        // librdkafka's words (rdkafka_offset.c) when the position is not on the broker.
        let lost = "logs [5]: offset reset (at offset 6013 (leader epoch -1), broker 1) to \
                    offset BEGINNING (leader epoch -1): fetch failed due to requested offset not \
                    available on the broker: Broker: Offset out of range";
        assert!(is_lossy_offset_reset(
            RDKafkaLogLevel::Warning,
            "OFFSET",
            lost
        ));
        // The same words at DEBUG: a reset without an error (no committed offset yet).
        assert!(!is_lossy_offset_reset(
            RDKafkaLogLevel::Debug,
            "OFFSET",
            lost
        ));
        assert!(!is_lossy_offset_reset(
            RDKafkaLogLevel::Warning,
            "FETCH",
            lost
        ));
        assert!(!is_lossy_offset_reset(
            RDKafkaLogLevel::Warning,
            "OFFSET",
            "logs [5]: offset commit failed"
        ));
    }

    #[test]
    fn refused_connections_are_retried_failures_authentication_is_not() {
        assert!(is_retried_connection_failure(
            "FAIL",
            "k:9092/1: Connect to ipv4#1.2.3.4:9092 failed: Connection refused"
        ));
        assert!(is_retried_connection_failure(
            "FAIL",
            "k:9092/1: Receive failed: Connection reset by peer"
        ));
        assert!(!is_retried_connection_failure(
            "FAIL",
            "k:9092/1: SASL authentication error: Authentication failed"
        ));
        assert!(!is_retried_connection_failure(
            "FAIL",
            "k:9092/1: SSL handshake failed: certificate verify failed"
        ));
        assert!(!is_retried_connection_failure(
            "MAXPOLL",
            "max.poll.interval.ms exceeded"
        ));
    }

    #[test]
    fn one_outage_per_broker_counts_each_client_once_and_ends_when_it_is_up_again() {
        let registry = prometheus::Registry::new();
        let metrics = crate::metrics::kafka::KafkaFamilies::register(&registry).expect("register");
        let links = BrokerLinks::new(
            metrics.broker_disconnects(KafkaClient::Consumer),
            metrics.broker_disconnects(KafkaClient::Producer),
        );
        let t0 = Instant::now();
        let b = "127.0.0.1:9092";
        assert!(links.failed(KafkaClient::Consumer, b, "refused", t0));
        assert!(links.failed(KafkaClient::Consumer, b, "refused", t0));
        assert!(links.failed(KafkaClient::Producer, b, "refused", t0));
        assert!(links.in_outage());
        let counts = |c: KafkaClient| metrics.broker_disconnects(c).get();
        assert_eq!(
            counts(KafkaClient::Consumer),
            1,
            "one loss, however many retries"
        );
        assert_eq!(counts(KafkaClient::Producer), 1);
        // A handle that stayed up through the outage does not end it.
        links.up(KafkaClient::Producer, b, t0 - Duration::from_secs(1));
        assert!(links.in_outage());
        links.up(KafkaClient::Consumer, b, t0 + Duration::from_secs(12));
        assert!(!links.in_outage());
        // The next loss is a new outage.
        assert!(links.failed(KafkaClient::Consumer, b, "reset", t0));
        assert_eq!(counts(KafkaClient::Consumer), 2);
    }

    #[test]
    fn outages_are_capped() {
        let links = BrokerLinks::default();
        let t0 = Instant::now();
        for i in 0..MAX_OUTAGES {
            assert!(links.failed(KafkaClient::Consumer, &format!("b{i}:9092"), "x", t0));
        }
        assert!(!links.failed(KafkaClient::Consumer, "one-more:9092", "x", t0));
        assert!(
            links.failed(KafkaClient::Producer, "b0:9092", "x", t0),
            "known ones go on"
        );
    }
}
