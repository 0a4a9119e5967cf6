//! `faultline demo`: the whole scaled-out Kafka deployment on one machine, with nothing to
//! install.
//!
//! Starts an embedded Kafka-protocol broker (librdkafka's mock cluster) and produces the sample
//! logs to it one record per line, keyed as docs/kafka.md advises a shipper to key them: by the
//! job (node lines by their host), so that a job's lines stay in order in one partition. A job's line carries its job in a `job` header
//! (the file's name, what a shipper's tail input adds) unless the line names its own job (an
//! envelope field) or is a node's own line (syslog, journald): those go without one, as node
//! logs do. Then it runs `--matchers N` match members (role `match`, one consumer group) and
//! one correlator (role `correlate`), the same pipelines as `faultline run --role ...`, and
//! prints the incidents from the incidents topic: as text once every sample is correlated, or
//! each change as a JSON line with `--format json`. `--matches` prints the match events too.
//! It exits once every sample record is matched and correlated and every incident printed, or
//! with `--follow` keeps everything up until Ctrl-C, so more lines can be produced with any
//! Kafka client.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::mocking::MockCluster;
use rdkafka::{Offset, TopicPartitionList};
use serde_json::Value;

use crate::config::{Config, RawConfig};
use crate::incident::config::ProcessRole;
use crate::pipeline::{self, PipelineError};
use crate::sink::stdout::{Format, TerminalSafe};
use crate::source::file;

mod produce;

use produce::{end_offsets, produce_samples, Pace};
pub use produce::{Sample, LOGS_TOPIC, LOG_PARTITIONS};

/// Topic the match members write their events to and the correlator reads (one shard).
pub const EVENTS_TOPIC: &str = "faultline.demo.events";
/// Topic the correlator writes incident changes to; the demo prints them from there.
pub const INCIDENTS_TOPIC: &str = "faultline.demo.incidents";
/// Topic of records the pipelines could not decode.
pub const DEAD_LETTER_TOPIC: &str = "faultline.demo.dead-letter";
/// Most match members `--matchers` starts.
pub const MAX_MATCHERS: usize = 16;

/// `faultline demo` options.
#[derive(Debug, Clone, clap::Args)]
pub struct DemoArgs {
    /// Sample job logs to replay: a directory or files (default: ./examples when present,
    /// else a small built-in set).
    #[arg(long, value_name = "PATH")]
    pub logs: Vec<PathBuf>,
    /// Keep the broker and the pipeline running after the samples, until Ctrl-C.
    #[arg(long)]
    pub follow: bool,
    /// Knowledge-base directory (watched for changes); the built-in KB when absent.
    #[arg(long, env = "FAULTLINE_KB", value_name = "DIR")]
    pub kb: Option<PathBuf>,
    /// Admin HTTP address (/healthz, /readyz); `off` disables.
    #[arg(long, default_value = crate::server::DEFAULT_ADMIN_LISTEN, value_name = "ADDR")]
    pub admin_listen: String,
    /// How incidents are printed: text blocks once the samples are correlated, or every change
    /// as a JSON line (`type: "incident"`).
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Match members (role `match`) in the consumer group; one correlator reads their events.
    #[arg(long, default_value_t = 1, value_name = "N",
        value_parser = clap::value_parser!(u16).range(1..=MAX_MATCHERS as i64))]
    pub matchers: u16,
    /// Print the match events too (before the incidents).
    #[arg(long)]
    pub matches: bool,
    /// Post the incidents to this Alertmanager (`http://127.0.0.1:9093`) as alerts.
    #[arg(long, value_name = "URL")]
    pub alertmanager: Option<String>,
}

/// Why the demo failed.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// The embedded broker or a client of it failed.
    #[error("embedded broker: {0}")]
    Kafka(rdkafka::error::KafkaError),
    /// A sample log could not be read.
    #[error("reading sample logs: {0}")]
    Io(std::io::Error),
    /// The demo's pipeline configuration is invalid.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// The pipeline failed.
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
    /// The samples were not all processed and printed in time; carries the limit.
    #[error("the pipeline did not finish the samples within {0:?}")]
    Timeout(Duration),
}

impl From<rdkafka::error::KafkaError> for DemoError {
    fn from(e: rdkafka::error::KafkaError) -> Self {
        DemoError::Kafka(e)
    }
}

impl From<std::io::Error> for DemoError {
    fn from(e: std::io::Error) -> Self {
        DemoError::Io(e)
    }
}

/// What the demo did.
#[derive(Debug, Clone, Default)]
pub struct DemoSummary {
    /// Log records the match members consumed.
    pub records: u64,
    /// Match events on the events topic.
    pub events: u64,
    /// Incidents (distinct fingerprints) on the incidents topic.
    pub incidents: usize,
    /// Dead letters the broker acknowledged.
    pub dead_letters: u64,
    /// Sample jobs replayed.
    pub jobs: usize,
    /// Content hash of the KB the pipeline ran with.
    pub kb_version: String,
}

/// Lines shown when there is no `examples/` directory.
const BUILT_IN: &[(&str, &str)] = &[
    (
        "llm-pretrain-7",
        "[rank0]:[I1129 09:00:00.100 ProcessGroupNCCL.cpp:912] [PG ID 0 PG GUID 0 Rank 0] ProcessGroupNCCL initialization options: size: 8, global rank: 0, TIMEOUT(ms): 600000
[rank3]:[E1129 09:41:12.532 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=51242, OpType=ALLREDUCE, NumelIn=262144, NumelOut=262144, Timeout(ms)=600000) ran for 600021 milliseconds before timing out.
[rank3]:[E1129 09:41:13.001 ProcessGroupNCCL.cpp:1412] [PG ID 0 PG GUID 0(default_pg) Rank 3] ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress in monitoring enqueued collectives.
",
    ),
    (
        "bert-finetune-77",
        "step 1200 loss 2.113
[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of 79.15 GiB of which 1.02 GiB is free.
",
    ),
    (
        "gpu-node-02",
        "May 18 19:02:39 gpu-node-02 kernel: NVRM: Xid (PCI:0000:2b:00): 79, pid=4121, GPU has fallen off the bus.
",
    ),
];

/// (job id, lines) of the samples to replay.
pub fn samples(paths: &[PathBuf]) -> Result<Vec<Sample>, DemoError> {
    let mut paths = paths.to_vec();
    if paths.is_empty() && Path::new("examples").is_dir() {
        paths.push(PathBuf::from("examples"));
    }
    if paths.is_empty() {
        return Ok(BUILT_IN
            .iter()
            .map(|(job, text)| {
                let lines = text.lines().map(|l| l.as_bytes().to_vec()).collect();
                (job.to_string(), lines)
            })
            .collect());
    }
    let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    let (inputs, errors) = file::expand(&names, None);
    if let Some(e) = errors.into_iter().next() {
        return Err(std::io::Error::other(e.to_string()).into());
    }
    let mut out = Vec::new();
    for input in inputs {
        let mut reader = file::open(&input)?;
        let mut text = Vec::new();
        std::io::Read::read_to_end(&mut reader, &mut text)?;
        let lines = text
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(<[u8]>::to_vec)
            .collect();
        out.push((input.job_id, lines));
    }
    Ok(out)
}

/// Runs the demo, printing incidents to stdout and progress to stderr.
pub async fn run(args: DemoArgs) -> Result<DemoSummary, DemoError> {
    let signals = pipeline::signals::Signals::register();
    // The mock cluster is not `Send`: it lives on this task, which the CLI blocks on.
    let cluster = MockCluster::new(1)?;
    let bootstrap = cluster.bootstrap_servers();
    for (topic, partitions) in [
        (LOGS_TOPIC, LOG_PARTITIONS),
        (EVENTS_TOPIC, 1),
        (INCIDENTS_TOPIC, 1),
        (DEAD_LETTER_TOPIC, 1),
    ] {
        cluster.create_topic(topic, partitions, 1)?;
    }
    let jobs = Arc::new(samples(&args.logs)?);
    let anchor = earliest_dated(&jobs);
    let loaded = {
        let c = config(&bootstrap, &args, ProcessRole::Match, anchor)?;
        tokio::task::spawn_blocking(move || pipeline::load_kb(&c))
            .await
            .map_err(|_| PipelineError::Panicked)?
            .map_err(PipelineError::from)?
    };
    let kb_version = loaded.version().to_string();
    let loaded = Arc::new(loaded);
    // One registry for the whole demo, as for one process: the match members count lines,
    // matches per error code and unknown templates into it, the correlator its incidents, and
    // the one admin endpoint (the correlator's) serves them all.
    let correlator_config = config(&bootstrap, &args, ProcessRole::Correlate, anchor)?;
    let metrics = Arc::new(
        crate::metrics::Metrics::new(correlator_config.metrics.clone())
            .map_err(PipelineError::from)?,
    );
    let correlator = pipeline::start_shared(
        correlator_config,
        Arc::clone(&loaded),
        Some(Arc::clone(&metrics)),
    )
    .await?;
    if let Some(addr) = correlator.admin_addr() {
        eprintln!(
            "faultline demo: admin endpoints at http://{addr}/healthz, /readyz and /metrics (the \
             match members' counts and the correlator's); incidents at http://{addr}/incidents"
        );
    }
    let mut matchers = Vec::new();
    for _ in 0..args.matchers {
        let c = config(&bootstrap, &args, ProcessRole::Match, anchor)?;
        matchers.push(
            pipeline::start_shared(c, Arc::clone(&loaded), Some(Arc::clone(&metrics))).await?,
        );
    }
    eprintln!(
        "faultline demo: {} match member(s) in group faultline-demo, one correlator in group \
         faultline-demo-correlator",
        args.matchers
    );

    // Following, each incident change is printed as it arrives; otherwise (text) the final
    // state of each incident is printed once the samples are done.
    let incidents = Printer::start(
        &bootstrap,
        INCIDENTS_TOPIC,
        args.format,
        if args.follow {
            Kind::LiveIncidents
        } else {
            Kind::Incidents
        },
    )?;
    let events = args
        .matches
        .then(|| Printer::start(&bootstrap, EVENTS_TOPIC, args.format, Kind::Matches))
        .transpose()?;
    // The demo's own stop: Ctrl-C while following or waiting.
    let stop = crate::pipeline::Stop::new();
    let reload = correlator.reloader();
    let signals = signals.map(|s| tokio::spawn(s.handle(Arc::clone(stop.shutdown()), reload)));
    // A match member whose stage stops on its own takes the demo's /readyz (the correlator's)
    // down with it and stops the demo, loudly: it must never go on answering 200 while no
    // line is matched any more.
    let members_watch = {
        let members: Vec<_> = matchers.iter().map(|m| Arc::clone(m.health())).collect();
        let served = Arc::clone(correlator.health());
        let stop = Arc::clone(&stop);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(250));
            loop {
                tick.tick().await;
                let stopped = members
                    .iter()
                    .enumerate()
                    .find_map(|(i, h)| h.stopped().map(|why| (i, why)));
                if let Some((i, why)) = stopped {
                    served.set_stopped(&format!("match member {i}: {why}"));
                    stop.fail(PipelineError::StageEnded(format!("match member {i}")));
                    return;
                }
            }
        })
    };
    // Produced while the pipelines run, never further ahead of them than the broker keeps.
    let pace = Pace {
        members: matchers.iter().map(|m| Arc::clone(m.health())).collect(),
        correlator: Arc::clone(correlator.health()),
        stop: Arc::clone(stop.shutdown()),
    };
    let (b, j) = (bootstrap.clone(), Arc::clone(&jobs));
    let produced = tokio::task::spawn_blocking(move || produce_samples(&b, &j, &pace))
        .await
        .map_err(|_| PipelineError::Panicked)?;
    let outcome = match produced {
        Err(e) => Err(e.into()),
        Ok(ends) => {
            eprintln!(
                "faultline demo: embedded Kafka broker at {bootstrap}; produced {} log lines of \
                 {} sample(s) to {LOGS_TOPIC}, keyed by job (node lines by host) over \
                 {LOG_PARTITIONS} partitions",
                ends.values().sum::<i64>(),
                jobs.len()
            );
            if args.follow {
                eprintln!(
                    "faultline demo: following; produce more with e.g.\n  echo '[rank0]: torch.OutOfMemoryError: CUDA out of memory.' | kcat -P -b {bootstrap} -t {LOGS_TOPIC} -H job=my-job\nCtrl-C to stop"
                );
                let mut stopped = stop.subscribe();
                let _ = stopped.wait_for(|s| *s).await;
                Ok(())
            } else {
                wait_until_done(&matchers, &correlator, &stop, &bootstrap, &ends).await
            }
        }
    };
    // Stop the members first, then the correlator: its producer flushes the last changes.
    // (records read, match events acknowledged) over the members, their progress notes apart.
    let mut report = Ok((0, 0));
    for m in matchers {
        m.shutdown();
        match m.wait().await {
            Ok(r) => {
                if let Ok((records, events)) = report.as_mut() {
                    *records += r.stats.records;
                    *events += r.stats.events_acked.saturating_sub(r.stats.progress_notes);
                }
            }
            Err(e) => report = Err(e),
        }
    }
    members_watch.abort();
    correlator.shutdown();
    let correlated = correlator.wait().await;
    if let Some(s) = signals {
        s.abort();
    }
    let printed = match outcome {
        Ok(()) => finish(&bootstrap, incidents, events, &args).await,
        Err(e) => {
            incidents.stop();
            if let Some(p) = events {
                p.stop();
            }
            Err(e)
        }
    };
    let (_, incidents) = printed?;
    let (records, events) = report?;
    correlated?;
    drop(cluster);
    let summary = DemoSummary {
        records,
        events,
        incidents,
        dead_letters: 0,
        jobs: jobs.len(),
        kb_version,
    };
    eprintln!(
        "faultline demo: {} records, {} match events, {} incident(s), KB {}",
        summary.records, summary.events, summary.incidents, summary.kb_version
    );
    Ok(summary)
}

/// How long the demo's correlator waits before it calls an incident over: the samples were
/// logged hours apart and arrive at once, spread over partitions read in parallel, so their
/// order across partitions is arbitrary; a long quiet period keeps every incident open while
/// its lines still arrive (the live default, 35 minutes, covers the skew of members that keep
/// up with their partitions).
pub const DEMO_QUIET_MS: i64 = 24 * 3_600_000;

/// The earliest stamp with a year in the samples' envelopes (CRI, Docker, shipper JSON):
/// the correlator places yearless stamps (syslog, glog) near it, as it would near today's date
/// when live.
pub fn earliest_dated(jobs: &[Sample]) -> Option<crate::time::Millis> {
    let mut records = Vec::new();
    let mut earliest = None;
    for line in jobs.iter().flat_map(|(_, lines)| lines) {
        crate::envelope::each_record(line, &mut records, &mut |r| {
            let stamp = r.meta.timestamp.as_deref();
            if let Some(ms) = stamp.and_then(crate::time::parse).and_then(|s| s.millis()) {
                earliest = Some(earliest.map_or(ms, |e: crate::time::Millis| e.min(ms)));
            }
        });
    }
    earliest
}

/// The configuration of one demo pipeline of role `role`.
fn config(
    bootstrap: &str,
    args: &DemoArgs,
    role: ProcessRole,
    anchor: Option<crate::time::Millis>,
) -> Result<Config, DemoError> {
    let mut raw = RawConfig::default();
    raw.kafka.brokers = Some(bootstrap.to_string());
    raw.kafka.group_id = Some("faultline-demo".into());
    raw.kafka.topics = Some(vec![LOGS_TOPIC.into()]);
    raw.kafka.commit_interval_ms = Some(1_000);
    raw.input.job_id = Some("header:job".into());
    raw.output.topic = Some(EVENTS_TOPIC.into());
    raw.dead_letter.topic = Some(DEAD_LETTER_TOPIC.into());
    raw.pipeline.batch_linger_ms = Some(20);
    raw.incidents.topic = Some(INCIDENTS_TOPIC.into());
    raw.incidents.role = Some(role.as_str().into());
    raw.incidents.quiet_ms = Some(DEMO_QUIET_MS);
    raw.kb.dir = args.kb.clone();
    // The correlator serves the demo's admin endpoint; the members run without one (they count
    // into the same registry).
    raw.admin.listen = Some(match role {
        ProcessRole::Correlate => args.admin_listen.clone(),
        _ => "off".into(),
    });
    if role == ProcessRole::Correlate {
        raw.alertmanager.url.clone_from(&args.alertmanager);
    }
    let mut config = Config::from_raw(raw)?;
    if let Some(i) = config.incidents.as_mut() {
        i.correlator.clock_anchor = anchor;
    }
    Ok(config)
}

/// Waits until every sample record is matched (every partition's watermark, in whichever
/// member owns it, at its end) and every event correlated.
async fn wait_until_done(
    matchers: &[pipeline::Running],
    correlator: &pipeline::Running,
    stop: &crate::pipeline::Stop,
    bootstrap: &str,
    ends: &HashMap<i32, i64>,
) -> Result<(), DemoError> {
    let limit = Duration::from_secs(180);
    let deadline = Instant::now() + limit;
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    let mut stopped = stop.subscribe();
    let matched = || {
        ends.iter().all(|(&p, &end)| {
            end == 0
                || matchers.iter().any(|m| {
                    m.stats()
                        .watermarks
                        .iter()
                        .any(|(tp, w)| &*tp.topic == LOGS_TOPIC && tp.partition == p && *w >= end)
                })
        })
    };
    let mut events: Option<i64> = None;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stopped.wait_for(|s| *s) => return Ok(()),
        }
        if Instant::now() >= deadline {
            return Err(DemoError::Timeout(limit));
        }
        if events.is_none() && matched() {
            // Every event is acknowledged by now: the events topic's end is final.
            let consumer: BaseConsumer = ClientConfig::new()
                .set("bootstrap.servers", bootstrap)
                .create()?;
            events = Some(end_offsets(consumer.client(), EVENTS_TOPIC, 1)?[&0]);
        }
        // The correlator has read (not committed: open incidents hold it) every event.
        if let Some(end) = events {
            if end == 0 || correlator.stats().records >= end as u64 {
                return Ok(());
            }
        }
    }
}

/// After the pipelines stopped (their producers flushed): reads each printed topic to its end,
/// prints the incidents' final states in text mode, and returns (match events, incidents).
async fn finish(
    bootstrap: &str,
    incidents: Printer,
    events: Option<Printer>,
    args: &DemoArgs,
) -> Result<(u64, usize), DemoError> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()?;
    let limit = Duration::from_secs(60);
    let deadline = Instant::now() + limit;
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    let mut printers = vec![(INCIDENTS_TOPIC, &incidents)];
    if let Some(p) = &events {
        printers.push((EVENTS_TOPIC, p));
    }
    for (topic, printer) in printers {
        let high = end_offsets(consumer.client(), topic, 1)?;
        while !printer.reached(&high) {
            if Instant::now() >= deadline {
                return Err(DemoError::Timeout(limit));
            }
            tick.tick().await;
        }
    }
    let matches = events.map_or(0, Printer::stop);
    let last = incidents.stop_collecting();
    if args.format == Format::Text {
        let mut out = std::io::stdout().lock();
        for incident in &last {
            write_incident_text(&mut TerminalSafe(&mut out), incident)?;
        }
        out.flush()?;
    }
    Ok((matches, last.len()))
}

/// What a printer reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Matches,
    Incidents,
    /// Incidents, each change printed as it arrives (`--follow`).
    LiveIncidents,
}

/// Reads a topic from the beginning: match events are printed as they arrive; incident
/// changes are printed as they arrive in JSON, and their latest state per fingerprint is kept.
struct Printer {
    positions: Arc<Mutex<HashMap<i32, i64>>>,
    printed: Arc<AtomicU64>,
    latest: Arc<Mutex<Vec<(String, Value)>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Printer {
    fn start(bootstrap: &str, topic: &str, format: Format, kind: Kind) -> Result<Self, DemoError> {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("group.id", "faultline-demo-printer")
            .set("enable.auto.commit", "false")
            .create()?;
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, 0, Offset::Beginning)?;
        consumer.assign(&tpl)?;
        let positions = Arc::new(Mutex::new(HashMap::new()));
        let printed = Arc::new(AtomicU64::new(0));
        let latest = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (pos, count, last, halt) = (
            Arc::clone(&positions),
            Arc::clone(&printed),
            Arc::clone(&latest),
            Arc::clone(&stop),
        );
        let thread = std::thread::spawn(move || {
            while !halt.load(Ordering::Relaxed) {
                let Some(Ok(msg)) = consumer.poll(Duration::from_millis(100)) else {
                    continue;
                };
                let payload = msg.payload().unwrap_or_default();
                let value = serde_json::from_slice::<Value>(payload).ok();
                let note = value.as_ref().is_some_and(|v| v["type"] == "progress");
                pos.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(msg.partition(), msg.offset() + 1);
                if note {
                    // A match member's progress note: how far it read, not a match.
                    continue;
                }
                let mut out = std::io::stdout().lock();
                let written = match (format, kind, &value) {
                    (Format::Json, _, _) => {
                        out.write_all(payload).and_then(|()| out.write_all(b"\n"))
                    }
                    (Format::Text, Kind::Matches, Some(v)) => {
                        write_event_text(&mut TerminalSafe(&mut out), v)
                    }
                    (Format::Text, Kind::LiveIncidents, Some(v)) => {
                        write_incident_change(&mut TerminalSafe(&mut out), v)
                    }
                    _ => Ok(()),
                };
                let _ = written.and_then(|()| out.flush());
                drop(out);
                if let (Kind::Incidents | Kind::LiveIncidents, Some(v)) = (kind, value) {
                    // One incident, one id, whatever its fingerprint did.
                    let fp = v["id"].as_str().unwrap_or_default().to_string();
                    let mut last = last.lock().unwrap_or_else(|p| p.into_inner());
                    match last.iter_mut().find(|(f, _)| *f == fp) {
                        Some(slot) => *slot = (fp, v),
                        None => last.push((fp, v)),
                    }
                }
                count.fetch_add(1, Ordering::Relaxed);
            }
        });
        Ok(Printer {
            positions,
            printed,
            latest,
            stop,
            thread: Some(thread),
        })
    }

    fn reached(&self, highs: &HashMap<i32, i64>) -> bool {
        let pos = self.positions.lock().unwrap_or_else(|p| p.into_inner());
        highs
            .iter()
            .all(|(p, &high)| high == 0 || pos.get(p).is_some_and(|&o| o >= high))
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    /// Stops reading; how many records it read.
    fn stop(mut self) -> u64 {
        self.halt();
        self.printed.load(Ordering::Relaxed)
    }

    /// Stops reading; the latest state of each incident, in order of first appearance.
    fn stop_collecting(mut self) -> Vec<Value> {
        self.halt();
        let mut last = self.latest.lock().unwrap_or_else(|p| p.into_inner());
        std::mem::take(&mut *last)
            .into_iter()
            .map(|(_, v)| v)
            .collect()
    }
}

impl Drop for Printer {
    fn drop(&mut self) {
        self.halt();
    }
}

/// A match event (as read back from the output topic) for people.
pub fn write_event_text(out: &mut impl Write, e: &Value) -> std::io::Result<()> {
    let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let mut who = format!("job={}", s(e, "job_id"));
    if let Some(rank) = e.get("rank").and_then(Value::as_u64) {
        who.push_str(&format!(" rank={rank}"));
    }
    if let Some(host) = e.get("host").and_then(Value::as_str) {
        who.push_str(&format!(" host={host}"));
    }
    let src = e.get("source").cloned().unwrap_or(Value::Null);
    writeln!(
        out,
        "{}/{}@{} [{}] {} ({}, {}) {}",
        s(&src, "topic"),
        src.get("partition").and_then(Value::as_i64).unwrap_or(-1),
        src.get("offset").and_then(Value::as_i64).unwrap_or(-1),
        s(e, "severity").to_uppercase(),
        s(e, "error_code"),
        s(e, "kb_id"),
        s(e, "role"),
        who
    )?;
    writeln!(out, "  | {}", s(e, "line"))?;
    let d = e.get("diagnosis").cloned().unwrap_or(Value::Null);
    writeln!(out, "  what: {}", s(&d, "title"))?;
    writeln!(
        out,
        "  why: {}",
        s(&d, "root_cause").replace('\n', " ").trim()
    )?;
    for w in d
        .get("workarounds")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|w| w.get("origin").is_none())
        .take(2)
    {
        let rate = match (
            w.get("success_rate").and_then(Value::as_f64),
            w.get("n").and_then(Value::as_u64),
        ) {
            (Some(r), Some(n)) => format!(" ({:.0}% success in {n})", r * 100.0),
            _ => String::new(),
        };
        writeln!(out, "  try: {}{rate}", s(w, "text"))?;
    }
    writeln!(out)
}

/// One line per incident change, for `demo --follow`: when it happened, what changed (opened,
/// a new root, resolved), the headline, where, and the fingerprint.
pub fn write_incident_change(out: &mut impl Write, i: &Value) -> std::io::Result<()> {
    let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let root = &i["root"];
    let mut what = s(i, "status");
    if what == "resolved" {
        what = format!("resolved ({})", s(i, "resolution"));
    } else if i["previous_fingerprint"].is_string() {
        what.push_str(", root changed");
    }
    let known = if i["root_known"].as_bool() == Some(false) {
        "root unknown: "
    } else {
        ""
    };
    let mut where_ = format!("job {}", s(i, "job_id"));
    if let Some(h) = root.get("host").and_then(Value::as_str) {
        where_.push_str(&format!(" · host {h}"));
    }
    writeln!(
        out,
        "[{}] incident {what}: {known}{} {} · {where_} · {}",
        i["last_seen"].as_str().unwrap_or("-"),
        s(root, "error_code"),
        s(&i["diagnosis"], "title"),
        s(i, "id")
    )
}

/// An incident (as read back from the incidents topic) for people: the headline, where, the
/// summary, the root line, the cascade, the first verified workarounds, and why this headline.
pub fn write_incident_text(out: &mut impl Write, i: &Value) -> std::io::Result<()> {
    let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let root = &i["root"];
    let d = &i["diagnosis"];
    let known = if i["root_known"].as_bool() == Some(false) {
        "root unknown: "
    } else {
        ""
    };
    writeln!(out, "== {known}{} {}", s(root, "error_code"), s(d, "title"))?;
    let mut where_ = vec![format!("job {}", s(i, "job_id"))];
    let list = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .map(|x| x.as_str().map_or_else(|| x.to_string(), str::to_string))
            .collect()
    };
    let hosts = list(&i["culprit"]["hosts"]);
    match (hosts.is_empty(), root.get("host").and_then(Value::as_str)) {
        (false, _) => where_.push(format!("host {}", hosts.join(", "))),
        (true, Some(h)) => where_.push(format!("host {h}")),
        (true, None) => {}
    }
    if let Some(gpu) = root.get("gpu").and_then(Value::as_str) {
        where_.push(format!("GPU {gpu}"));
    }
    let ranks = list(&i["culprit"]["ranks"]);
    match (ranks.is_empty(), root.get("rank").and_then(Value::as_u64)) {
        (false, _) => where_.push(format!("rank {}", ranks.join(", "))),
        (true, Some(r)) => where_.push(format!("rank {r}")),
        (true, None) => {}
    }
    writeln!(
        out,
        "   {} · {} · {} match(es) · {}",
        where_.join(" · "),
        s(i, "status"),
        i["counts"]["matches"].as_u64().unwrap_or(0),
        s(i, "id")
    )?;
    writeln!(out, "   {}", s(i, "summary"))?;
    writeln!(out, "     | {}", s(root, "line"))?;
    if let Some(cascade) = i["cascades"].get("summary").and_then(Value::as_str) {
        writeln!(out, "   cascade: {cascade}")?;
    }
    for w in d["workarounds"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|w| w.get("origin").is_none())
        .take(2)
    {
        writeln!(out, "   try: {}", s(w, "text"))?;
    }
    writeln!(
        out,
        "   why this headline: {}",
        s(&i["grouping_info"], "explanation")
    )?;
    writeln!(out)
}
