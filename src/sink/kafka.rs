//! The Kafka sink: match events to the output topic, undecodable records to the dead-letter
//! topic, incident changes to the incidents topic, ticket changes and alerts their receivers
//! never accepted to the dead-letter topic too ([`KafkaSink::send_undeliverable`]), and every
//! delivery report back to the offset [`Tracker`] (an incident's resolution lifts the holds of
//! its records: [`Release`]).
//!
//! A [`ThreadedProducer`] delivers in the background; each record carries the [`RecordId`] of
//! the input record it came from, and the delivery callback acknowledges that record's output
//! ([`Tracker::ack`]). A delivery that fails after librdkafka's own retries (for
//! `message.timeout.ms`) is fatal: the pipeline stops without storing the record's offset, so a
//! restart produces it again. The producer's queue is bounded; when it is full, `send` waits for
//! deliveries, which holds the matcher, which fills the pipeline's queue, which pauses the
//! consumer.

use std::borrow::Cow;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

use rdkafka::client::ClientContext;
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, Message, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;

use crate::kafka::links::BrokerLinks;
use crate::kafka::{log_librdkafka, KafkaSettings, RecordView};
use crate::metrics::KafkaClient;
use crate::offsets::{RecordId, Release, Tracker};
use crate::redact::Redactor;
use crate::runtime::health::Delivered;
use crate::runtime::Shutdown;

/// The default topic of match events.
pub const DEFAULT_OUTPUT_TOPIC: &str = "faultline.events";

/// `[output]` as written.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawOutput {
    /// Topic of the match events.
    pub topic: Option<String>,
    /// How much of its entry's diagnosis each event carries: `reference` (the default) or
    /// `full`.
    pub diagnosis: Option<crate::enrich::Detail>,
}

/// Validated `[output]`.
#[derive(Debug, Clone)]
pub struct OutputConfig {
    /// Topic of the match events.
    pub topic: String,
    /// How much of its entry's diagnosis each event carries: by reference unless a consumer
    /// reads events without incidents (docs/output.md).
    pub diagnosis: crate::enrich::Detail,
}

impl OutputConfig {
    /// Validates `[output]`, applying defaults.
    pub fn from_raw(raw: RawOutput, errors: &mut crate::section::Errors<'_>) -> Self {
        let topic = raw.topic.unwrap_or_else(|| DEFAULT_OUTPUT_TOPIC.into());
        if topic.trim().is_empty() {
            errors.push("topic", "must not be empty");
        }
        OutputConfig {
            topic,
            diagnosis: raw.diagnosis.unwrap_or(crate::enrich::Detail::Reference),
        }
    }

    /// The effective `[output]` table.
    pub fn print(&self, p: &mut crate::section::Printer) {
        p.table("output");
        p.value("topic", &self.topic);
        p.value("diagnosis", self.diagnosis.as_str());
    }
}

/// Header names of a dead letter, beside the record's own headers.
pub mod headers {
    /// Why the record was dead-lettered: a closed set (`too_large`, `invalid_utf8`,
    /// `not_an_envelope`, `panic`, `invalid_event`: [`crate::metrics::DeadLetterReason`]; for
    /// what an incident output gave up on, its own reason, [`super::UndeliveredRecord`]).
    pub const REASON: &str = "faultline.reason";
    /// The detail of the reason, for people (a panic's message, secrets redacted).
    pub const ERROR: &str = "faultline.error";
    /// The pipeline stage that rejected it: `decode`, or `match` for a panic, or the incident
    /// output that gave up (`webhook`, `alertmanager`).
    pub const STAGE: &str = "faultline.stage";
    /// The KB version running when it was rejected.
    pub const KB_VERSION: &str = "faultline.kb_version";
    /// `topic/partition@offset` of the original record.
    pub const SOURCE: &str = "faultline.source";
    /// `true` when the payload was redacted (`dead_letter.redact`); absent when it holds the
    /// original bytes.
    pub const REDACTED: &str = "faultline.redacted";
    /// Attempts made before a ticket change or an alert was given up (its receiver never
    /// accepted it); absent on dead-lettered records.
    pub const ATTEMPTS: &str = "faultline.attempts";
    /// The original payload's size in bytes, when the dead letter carries only its head
    /// ([`super::DEAD_LETTER_MAX_PAYLOAD`]); absent when it carries the whole payload.
    pub const ORIGINAL_BYTES: &str = "faultline.original_bytes";
    /// FNV-1a 64 of the original payload, 16 hex digits, beside [`ORIGINAL_BYTES`]: to tell
    /// which record of the input topic it was, and whether two are the same.
    pub const ORIGINAL_HASH: &str = "faultline.original_fnv1a64";
}

/// The largest payload a dead letter carries whole. A larger record (one over
/// `input.max_record_bytes`, typically) is dead-lettered with its first
/// [`DEAD_LETTER_HEAD_BYTES`] only, its size and hash in headers, and its place in
/// `faultline.source`: the original stays on the input topic. Chosen so that a dead letter with
/// its headers fits librdkafka's and Kafka's default message limits (1,000,000 and 1,048,588
/// bytes), so that no record, however large, can make the dead-letter produce fail and stop
/// the pipeline.
pub const DEAD_LETTER_MAX_PAYLOAD: usize = 900 * 1024;

/// The head of an oversized record that its dead letter carries.
pub const DEAD_LETTER_HEAD_BYTES: usize = 64 * 1024;

/// Room left for a dead letter's headers (the record's own, capped by the input's limits, and
/// faultline's) above [`DEAD_LETTER_MAX_PAYLOAD`].
pub const DEAD_LETTER_HEADER_ROOM: usize = 64 * 1024;

// A dead letter of DEAD_LETTER_MAX_PAYLOAD with its headers fits the producer's smallest
// allowed message.max.bytes (match events and incidents are far smaller: their lines and
// captures are cut, crate::enrich::MAX_EVENT_LINE_BYTES).
const _: () = assert!(
    DEAD_LETTER_MAX_PAYLOAD + DEAD_LETTER_HEADER_ROOM <= crate::kafka::MIN_MESSAGE_MAX_BYTES
);

/// What an incident output gave up on (a ticket change, an alert), as it goes to the
/// dead-letter topic.
#[derive(Debug, Clone, Copy)]
pub struct UndeliveredRecord<'a> {
    /// The `faultline.reason` header (`ticket_undeliverable`, `alert_undeliverable`).
    pub reason: &'a str,
    /// The `faultline.stage` header: the output that gave up (`webhook`, `alertmanager`).
    pub stage: &'a str,
    /// The record key: the incident's fingerprint (or the output's own key for it).
    pub fingerprint: &'a str,
    /// The JSON record (what the receiver was sent, with its URL and the error).
    pub payload: &'a [u8],
    /// The last attempt's error (`faultline.error`).
    pub error: &'a str,
    /// Attempts made (`faultline.attempts`).
    pub attempts: u32,
}

/// Errors that stop the pipeline.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SinkError {
    /// The producer could not be created (bad settings).
    #[error("creating the Kafka producer: {0}")]
    Create(KafkaError),
    /// librdkafka refused a record outright (not a full queue, which is waited on).
    #[error("producing to {topic}: {error}")]
    Produce {
        /// The record's topic.
        topic: String,
        /// librdkafka's error.
        error: KafkaError,
    },
    /// A record was not delivered within librdkafka's retries (`message.timeout.ms`).
    #[error("delivery to {topic} failed after retries: {error}")]
    Delivery {
        /// The record's topic.
        topic: String,
        /// librdkafka's error, as text.
        error: String,
    },
    /// The drain deadline passed while a record waited for room in the producer queue.
    #[error("shutting down with the producer queue full")]
    Abandoned,
    /// A topic's partitions could not be read from the cluster's metadata.
    #[error("reading the partitions of {topic}: {error}")]
    Metadata {
        /// The topic.
        topic: String,
        /// What went wrong.
        error: String,
    },
}

/// What a delivery report acknowledges.
#[derive(Debug)]
pub enum Acked {
    /// A match event or a dead letter: one output of `record`.
    Output {
        /// The input record the output came from.
        record: RecordId,
        /// A dead letter rather than a match event (counted apart).
        dead_letter: bool,
    },
    /// A ticket change or an alert that its receiver never accepted; the release (a
    /// resolution's) is told when the broker acknowledged the dead letter.
    Undelivered {
        /// The incident's fingerprint, for the log line if the delivery fails.
        fingerprint: String,
        /// The holds this dead letter helps lift.
        release: Option<Arc<Release>>,
    },
    /// An incident change; a resolution carries the holds its ack helps lift.
    Incident {
        /// The incident's fingerprint, for the log line if the delivery fails.
        fingerprint: String,
        /// The holds lifted once every party saw the resolution; `None` for other changes.
        release: Option<Arc<Release>>,
    },
}

/// Delivery callbacks: acknowledge, count, wake a waiting `send`.
pub struct SinkContext {
    tracker: Arc<Tracker>,
    counts: Arc<Delivered>,
    failure: OnceLock<SinkError>,
    delivered: (Mutex<u64>, Condvar),
    /// Broker outages, shared with the consumer ([`KafkaSink::with_links`]).
    links: OnceLock<Arc<BrokerLinks>>,
}

impl ClientContext for SinkContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        match self.links.get() {
            Some(l) => l.log(KafkaClient::Producer, level, fac, message),
            None => log_librdkafka("producer", level, fac, message),
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        match self.links.get() {
            Some(l) => l.error(KafkaClient::Producer, &error, reason),
            None => tracing::warn!(client = "producer", error = %error, reason, "librdkafka"),
        }
    }

    /// librdkafka's statistics: only which brokers are up again after an outage.
    fn stats(&self, statistics: rdkafka::Statistics) {
        if let Some(l) = self.links.get() {
            l.stats(KafkaClient::Producer, &statistics);
        }
    }
}

impl ProducerContext for SinkContext {
    type DeliveryOpaque = Box<Acked>;

    fn delivery(&self, result: &DeliveryResult<'_>, delivery: Box<Acked>) {
        match (result, *delivery) {
            (
                Ok(_),
                Acked::Output {
                    record,
                    dead_letter,
                },
            ) => {
                self.tracker.ack(&record);
                let counter = if dead_letter {
                    &self.counts.dead_letters
                } else {
                    &self.counts.events
                };
                counter.fetch_add(1, Ordering::Relaxed);
            }
            (Ok(_), Acked::Undelivered { release, .. }) => {
                if let Some(r) = release {
                    r.done();
                }
            }
            (Ok(_), Acked::Incident { release, .. }) => {
                if let Some(r) = release {
                    r.done();
                }
                self.counts.incidents.fetch_add(1, Ordering::Relaxed);
            }
            (Err((error, message)), delivery) => {
                let e = SinkError::Delivery {
                    topic: message.topic().to_string(),
                    error: error.to_string(),
                };
                match delivery {
                    Acked::Output { record, .. } => {
                        tracing::error!(error = %e, source = %record.tp, offset = record.offset,
                            "output lost; stopping so that the record is processed again after a restart");
                    }
                    Acked::Incident { fingerprint, .. } => {
                        tracing::error!(error = %e, fingerprint = %fingerprint,
                            "incident change lost; stopping so that its records are read again after a restart");
                    }
                    Acked::Undelivered { fingerprint, .. } => {
                        tracing::error!(error = %e, fingerprint = %fingerprint,
                            "undeliverable ticket change or alert lost; stopping so that its records are read again after a restart");
                    }
                }
                let _ = self.failure.set(e);
            }
        }
        let (lock, cv) = &self.delivered;
        *lock.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        cv.notify_all();
    }
}

/// The producer, shared by the output and dead-letter topics.
pub struct KafkaSink {
    producer: ThreadedProducer<SinkContext>,
    /// Topic of the match events.
    pub output_topic: String,
    /// Topic of the dead letters.
    pub dead_letter_topic: String,
    /// Redacts dead letters' payloads (`dead_letter.redact`); `None` keeps the original bytes.
    dead_letter_redactor: Option<Arc<Redactor>>,
}

impl KafkaSink {
    /// A producer with `settings`, acknowledging deliveries to `tracker` and counting them in
    /// `counts`.
    pub fn new(
        settings: &KafkaSettings,
        output_topic: &str,
        dead_letter_topic: &str,
        tracker: Arc<Tracker>,
        counts: Arc<Delivered>,
    ) -> Result<Self, SinkError> {
        let mut cc = ClientConfig::new();
        cc.set_log_level(crate::kafka::librdkafka_log_level());
        for (k, v) in &settings.producer {
            cc.set(k, v);
        }
        let context = SinkContext {
            tracker,
            counts,
            failure: OnceLock::new(),
            delivered: (Mutex::new(0), Condvar::new()),
            links: OnceLock::new(),
        };
        let producer = cc.create_with_context(context).map_err(SinkError::Create)?;
        Ok(KafkaSink {
            producer,
            output_topic: output_topic.to_string(),
            dead_letter_topic: dead_letter_topic.to_string(),
            dead_letter_redactor: None,
        })
    }

    /// Redacts the payload (and the error text) of every dead letter with `redactor`, and marks
    /// it with the [`headers::REDACTED`] header; `None` (the default) keeps the original bytes.
    pub fn with_dead_letter_redactor(mut self, redactor: Option<Arc<Redactor>>) -> Self {
        self.dead_letter_redactor = redactor;
        self
    }

    /// Reports the producer's broker connections to `links` (shared with the consumer, so that
    /// an outage is logged once); without, librdkafka's lines are logged as they come.
    pub fn with_links(self, links: Arc<BrokerLinks>) -> Self {
        let _ = self.producer.context().links.set(links);
        self
    }

    /// The first delivery failure, if any.
    pub fn failure(&self) -> Option<SinkError> {
        self.producer.context().failure.get().cloned()
    }

    /// Sends one match event for `record`, keyed by job id.
    /// `partition` places it explicitly (a correlator shard, chosen by the driver);
    /// `None` leaves it to the partitioner (by key).
    pub fn send_event(
        &self,
        record: &RecordId,
        key: &[u8],
        payload: &[u8],
        partition: Option<i32>,
        stop: &Shutdown,
    ) -> Result<(), SinkError> {
        let mut r = BaseRecord::with_opaque_to(
            &self.output_topic,
            Box::new(Acked::Output {
                record: record.clone(),
                dead_letter: false,
            }),
        )
        .key(key)
        .payload(payload);
        if let Some(p) = partition {
            r = r.partition(p);
        }
        self.send(r, stop)
    }

    /// How many partitions `topic` has, from the cluster's metadata; an error when the topic
    /// does not exist.
    pub fn partitions(&self, topic: &str, timeout: Duration) -> Result<i32, SinkError> {
        let error = |error: String| SinkError::Metadata {
            topic: topic.to_string(),
            error,
        };
        let metadata = self
            .producer
            .client()
            .fetch_metadata(Some(topic), timeout)
            .map_err(|e| error(e.to_string()))?;
        let t = metadata
            .topics()
            .iter()
            .find(|t| t.name() == topic)
            .ok_or_else(|| error("not in the metadata".into()))?;
        if let Some(e) = t.error() {
            return Err(error(RDKafkaErrorCode::from(e).to_string()));
        }
        match t.partitions().len() {
            0 => Err(error("the topic has no partitions (does it exist?)".into())),
            n => Ok(n as i32),
        }
    }

    /// Sends one incident change to `topic`, keyed by its fingerprint; `release` (a resolution)
    /// is told when the broker acknowledged it.
    pub fn send_incident(
        &self,
        topic: &str,
        fingerprint: &str,
        payload: &[u8],
        release: Option<Arc<Release>>,
        stop: &Shutdown,
    ) -> Result<(), SinkError> {
        let r = BaseRecord::with_opaque_to(
            topic,
            Box::new(Acked::Incident {
                fingerprint: fingerprint.to_string(),
                release,
            }),
        )
        .key(fingerprint)
        .payload(payload);
        self.send(r, stop)
    }

    /// Sends the original record to the dead-letter topic with its key, payload and headers,
    /// plus why, where (`stage`) and under which KB it was rejected. With a dead-letter
    /// redactor, the payload and the error text are redacted first.
    pub fn send_dead_letter(
        &self,
        record: RecordView<'_>,
        reason: &str,
        stage: &str,
        error: &str,
        kb_version: &str,
        stop: &Shutdown,
    ) -> Result<(), SinkError> {
        let redactor = self.dead_letter_redactor.as_deref();
        let error = redactor.map_or(Cow::Borrowed(error), |r| r.redact_str(error));
        let cut = record
            .payload
            .filter(|p| p.len() > DEAD_LETTER_MAX_PAYLOAD)
            .map(|p| {
                (
                    p.len().to_string(),
                    format!("{:016x}", crate::record::fnv1a64(p)),
                )
            });
        let payload = record.payload.map(|p| bounded_payload(p, redactor));
        let mut h = OwnedHeaders::new_with_capacity(record.headers.len() + 8);
        for (key, value) in record.headers {
            h = h.insert(Header {
                key,
                value: value.as_deref(),
            });
        }
        let source = format!("{}@{}", record.id.tp, record.id.offset);
        if let Some((bytes, hash)) = &cut {
            h = add_headers(
                h,
                &[
                    (headers::ORIGINAL_BYTES, bytes.as_str()),
                    (headers::ORIGINAL_HASH, hash.as_str()),
                ],
                false,
            );
        }
        let h = add_headers(
            h,
            &[
                (headers::REASON, reason),
                (headers::ERROR, error.as_ref()),
                (headers::STAGE, stage),
                (headers::KB_VERSION, kb_version),
                (headers::SOURCE, source.as_str()),
            ],
            redactor.is_some(),
        );
        let mut r = BaseRecord::with_opaque_to(
            &self.dead_letter_topic,
            Box::new(Acked::Output {
                record: record.id.clone(),
                dead_letter: true,
            }),
        )
        .headers(h);
        if let Some(k) = record.key {
            r = r.key(k);
        }
        if let Some(p) = &payload {
            r = r.payload(p.as_ref());
        }
        self.send(r, stop)
    }

    /// Sends a ticket change or an alert that its receiver never accepted to `topic` (the
    /// dead-letter topic, or `dead_letter.undeliverable_topic`), keyed by the incident's
    /// fingerprint, with the headers `faultline.reason`, `faultline.error`, `faultline.stage`
    /// and `faultline.attempts`; `release` is told when the broker
    /// acknowledged it. With a dead-letter redactor the payload and the error are redacted.
    pub fn send_undeliverable(
        &self,
        topic: &str,
        record: UndeliveredRecord<'_>,
        release: Option<Arc<Release>>,
        stop: &Shutdown,
    ) -> Result<(), SinkError> {
        let redactor = self.dead_letter_redactor.as_deref();
        let error = redactor.map_or(Cow::Borrowed(record.error), |r| r.redact_str(record.error));
        let payload = redactor.map_or(Cow::Borrowed(record.payload), |r| r.redact(record.payload));
        let attempts = record.attempts.to_string();
        let h = add_headers(
            OwnedHeaders::new_with_capacity(5),
            &[
                (headers::REASON, record.reason),
                (headers::ERROR, error.as_ref()),
                (headers::STAGE, record.stage),
                (headers::ATTEMPTS, attempts.as_str()),
            ],
            redactor.is_some(),
        );
        let r = BaseRecord::with_opaque_to(
            topic,
            Box::new(Acked::Undelivered {
                fingerprint: record.fingerprint.to_string(),
                release,
            }),
        )
        .key(record.fingerprint)
        .payload(payload.as_ref())
        .headers(h);
        self.send(r, stop)
    }

    fn send<K, P>(
        &self,
        mut record: BaseRecord<'_, K, P, Box<Acked>>,
        stop: &Shutdown,
    ) -> Result<(), SinkError>
    where
        K: rdkafka::message::ToBytes + ?Sized,
        P: rdkafka::message::ToBytes + ?Sized,
    {
        loop {
            if let Some(e) = self.failure() {
                return Err(e);
            }
            let seen = *self.delivered_lock();
            match self.producer.send(record) {
                Ok(()) => return Ok(()),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    record = r;
                    if stop.abandoned() {
                        return Err(SinkError::Abandoned);
                    }
                    // Wait for a delivery to make room (bounded, to re-check the stop).
                    let (lock, cv) = &self.producer.context().delivered;
                    let guard = lock.lock().unwrap_or_else(|p| p.into_inner());
                    if *guard == seen {
                        let _ = cv
                            .wait_timeout(guard, Duration::from_millis(100))
                            .unwrap_or_else(|p| p.into_inner());
                    }
                }
                Err((error, r)) => {
                    return Err(SinkError::Produce {
                        topic: r.topic.to_string(),
                        error,
                    })
                }
            }
        }
    }

    fn delivered_lock(&self) -> std::sync::MutexGuard<'_, u64> {
        self.producer
            .context()
            .delivered
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Waits for every queued record to be delivered, up to `timeout`.
    pub fn flush(&self, timeout: Duration) -> Result<(), KafkaError> {
        self.producer.flush(timeout)
    }
}

/// `h` with a dead letter's `fields`, and `faultline.redacted: true` when `redacted`.
/// What a dead letter carries of `payload`: all of it (redacted with `redactor`) up to
/// [`DEAD_LETTER_MAX_PAYLOAD`], else its first [`DEAD_LETTER_HEAD_BYTES`], redacted before the
/// cut so that the cut never leaves half a secret behind.
fn bounded_payload<'a>(payload: &'a [u8], redactor: Option<&Redactor>) -> Cow<'a, [u8]> {
    if payload.len() <= DEAD_LETTER_MAX_PAYLOAD {
        return match redactor {
            Some(r) => r.redact(payload),
            None => Cow::Borrowed(payload),
        };
    }
    // A margin past the head, so that a secret straddling the cut is still recognised whole.
    let window = &payload[..DEAD_LETTER_HEAD_BYTES + 4096];
    let redacted = match redactor {
        Some(r) => r.redact(window),
        None => Cow::Borrowed(window),
    };
    let head = redacted.len().min(DEAD_LETTER_HEAD_BYTES);
    match redacted {
        Cow::Borrowed(b) => Cow::Borrowed(&b[..head]),
        Cow::Owned(mut v) => {
            v.truncate(head);
            Cow::Owned(v)
        }
    }
}

fn add_headers(mut h: OwnedHeaders, fields: &[(&str, &str)], redacted: bool) -> OwnedHeaders {
    for &(key, value) in fields {
        h = h.insert(Header {
            key,
            value: Some(value),
        });
    }
    if redacted {
        h = h.insert(Header {
            key: headers::REDACTED,
            value: Some("true"),
        });
    }
    h
}
