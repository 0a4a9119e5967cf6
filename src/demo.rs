//! `faultline demo`: the whole Kafka pipeline on one machine, with nothing to install.
//!
//! Starts an embedded Kafka-protocol broker (librdkafka's mock cluster), produces the sample
//! job logs to it (one record per line, keyed by job id, as a log shipper would), runs the
//! same pipeline as `faultline run` against it, and prints each diagnosis as it arrives on
//! the output topic. It exits once every sample record is processed and every event printed,
//! or with `--follow` keeps everything up until Ctrl-C, so more lines can be produced with any
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
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};
use serde_json::Value;

use crate::config::{Config, RawConfig};
use crate::pipeline::{self, PipelineError};
use crate::sink::stdout::Format;
use crate::source::file;

/// Topic the sample lines are produced to and the pipeline reads.
pub const LOGS_TOPIC: &str = "faultline.demo.logs";
/// Topic the pipeline writes its events to; the demo prints them from there.
pub const EVENTS_TOPIC: &str = "faultline.demo.events";
/// Topic of records the pipeline could not decode.
pub const DEAD_LETTER_TOPIC: &str = "faultline.demo.dead-letter";
/// Topic of the incident changes (the admin server's `/incidents` pages show them).
pub const INCIDENTS_TOPIC: &str = "faultline.demo.incidents";
const PARTITIONS: i32 = 3;

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
    /// How diagnoses are printed.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
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
    /// Records the pipeline consumed.
    pub records: u64,
    /// Events printed from the events topic.
    pub events: u64,
    /// Dead letters the broker acknowledged.
    pub dead_letters: u64,
    /// Sample jobs replayed.
    pub jobs: usize,
    /// Content hash of the KB the pipeline ran with.
    pub kb_version: String,
}

/// A job id and its lines, one record each.
pub type Sample = (String, Vec<Vec<u8>>);

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

/// Runs the demo, printing diagnoses to stdout and progress to stderr.
pub async fn run(args: DemoArgs) -> Result<DemoSummary, DemoError> {
    // The mock cluster is not `Send`: it lives on this task, which the CLI blocks on.
    let cluster = MockCluster::new(1)?;
    let bootstrap = cluster.bootstrap_servers();
    for (topic, partitions) in [
        (LOGS_TOPIC, PARTITIONS),
        (EVENTS_TOPIC, PARTITIONS),
        (DEAD_LETTER_TOPIC, 1),
        (INCIDENTS_TOPIC, 1),
    ] {
        cluster.create_topic(topic, partitions, 1)?;
    }
    let jobs = samples(&args.logs)?;
    let ends = produce_samples(&bootstrap, &jobs)?;
    let records: i64 = ends.values().sum();
    eprintln!(
        "faultline demo: embedded Kafka broker at {bootstrap}; produced {records} log lines of {} job(s) to {LOGS_TOPIC}",
        jobs.len()
    );

    let mut raw = RawConfig::default();
    raw.kafka.brokers = Some(bootstrap.clone());
    raw.kafka.group_id = Some("faultline-demo".into());
    raw.kafka.topics = Some(vec![LOGS_TOPIC.into()]);
    raw.kafka.commit_interval_ms = Some(1_000);
    raw.input.job_id = Some("key".into());
    raw.output.topic = Some(EVENTS_TOPIC.into());
    raw.dead_letter.topic = Some(DEAD_LETTER_TOPIC.into());
    raw.pipeline.batch_linger_ms = Some(20);
    raw.kb.dir = args.kb.clone();
    raw.admin.listen = Some(args.admin_listen.clone());
    raw.incidents.topic = Some(INCIDENTS_TOPIC.into());
    raw.alertmanager.url.clone_from(&args.alertmanager);
    let config = Config::from_raw(raw)?;
    let c = config.clone();
    let loaded = tokio::task::spawn_blocking(move || pipeline::load_kb(&c))
        .await
        .map_err(|_| PipelineError::Panicked)?
        .map_err(PipelineError::from)?;
    let kb_version = loaded.version().to_string();
    let running = pipeline::start(config, loaded).await?;
    if let Some(addr) = running.admin_addr() {
        eprintln!(
            "faultline demo: admin endpoints at http://{addr}/healthz and http://{addr}/readyz; \
             incidents at http://{addr}/incidents"
        );
    }

    let printer = Printer::start(&bootstrap, args.format)?;
    let signals = tokio::spawn(pipeline::signals::handle_signals(
        std::sync::Arc::clone(running.stopper().shutdown()),
        running.reloader(),
    ));
    let outcome = if args.follow {
        eprintln!(
            "faultline demo: following; produce more with e.g.\n  echo '[rank0]: torch.OutOfMemoryError: CUDA out of memory.' | kcat -P -b {bootstrap} -t {LOGS_TOPIC} -k my-job\nCtrl-C to stop"
        );
        let mut stop = running.stopper().subscribe();
        let _ = stop.wait_for(|s| *s).await;
        Ok(())
    } else {
        wait_until_done(&running, &printer, &bootstrap, records as u64).await
    };
    running.shutdown();
    let report = running.wait().await;
    signals.abort();
    let printed = printer.stop();
    outcome?;
    let report = report?;
    drop(cluster);
    let summary = DemoSummary {
        records: report.stats.records,
        events: printed,
        dead_letters: report.stats.dead_letters_acked,
        jobs: jobs.len(),
        kb_version,
    };
    eprintln!(
        "faultline demo: {} records, {} diagnoses, {} dead letters, KB {}",
        summary.records, summary.events, summary.dead_letters, summary.kb_version
    );
    Ok(summary)
}

/// Produces every line as one record keyed by its job; returns each partition's end offset.
fn produce_samples(bootstrap: &str, jobs: &[Sample]) -> Result<HashMap<i32, i64>, DemoError> {
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("enable.idempotence", "true")
        .create()?;
    for (job, lines) in jobs {
        for line in lines {
            let mut record = BaseRecord::to(LOGS_TOPIC).key(job.as_str()).payload(line);
            // The queue is large enough for the samples; wait for room if it is not.
            loop {
                match producer.send(record) {
                    Ok(()) => break,
                    Err((_, r)) => {
                        record = r;
                        producer.flush(Duration::from_millis(100))?;
                    }
                }
            }
        }
    }
    producer.flush(Duration::from_secs(30))?;
    let mut ends = HashMap::new();
    for p in 0..PARTITIONS {
        let (_, high) =
            producer
                .client()
                .fetch_watermarks(LOGS_TOPIC, p, Duration::from_secs(10))?;
        ends.insert(p, high);
    }
    Ok(ends)
}

/// Waits until every sample record is read and terminal and every event is printed.
async fn wait_until_done(
    running: &pipeline::Running,
    printer: &Printer,
    bootstrap: &str,
    records: u64,
) -> Result<(), DemoError> {
    let limit = Duration::from_secs(120);
    let deadline = Instant::now() + limit;
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    let mut stop = running.stopper().subscribe();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.wait_for(|s| *s) => return Ok(()),
        }
        // Every record read and terminal (open incidents hold the committed offset, so the
        // watermarks may wait: they are not the measure).
        let stats = running.stats();
        if stats.records >= records && stats.in_flight == 0 {
            break;
        }
        if Instant::now() >= deadline {
            return Err(DemoError::Timeout(limit));
        }
    }
    // Every output is acknowledged; now wait for the printer to reach the end of the output.
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()?;
    let mut highs = HashMap::new();
    for p in 0..PARTITIONS {
        let (_, high) = consumer.fetch_watermarks(EVENTS_TOPIC, p, Duration::from_secs(10))?;
        highs.insert(p, high);
    }
    loop {
        if printer.reached(&highs) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(DemoError::Timeout(limit));
        }
        tick.tick().await;
    }
}

/// Reads the output topic from the beginning and prints each event.
struct Printer {
    positions: Arc<Mutex<HashMap<i32, i64>>>,
    printed: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Printer {
    fn start(bootstrap: &str, format: Format) -> Result<Self, DemoError> {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("group.id", "faultline-demo-printer")
            .set("enable.auto.commit", "false")
            .create()?;
        let mut tpl = TopicPartitionList::new();
        for p in 0..PARTITIONS {
            tpl.add_partition_offset(EVENTS_TOPIC, p, Offset::Beginning)?;
        }
        consumer.assign(&tpl)?;
        let positions = Arc::new(Mutex::new(HashMap::new()));
        let printed = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (pos, count, halt) = (
            Arc::clone(&positions),
            Arc::clone(&printed),
            Arc::clone(&stop),
        );
        let thread = std::thread::spawn(move || {
            while !halt.load(Ordering::Relaxed) {
                let Some(Ok(msg)) = consumer.poll(Duration::from_millis(100)) else {
                    continue;
                };
                let payload = msg.payload().unwrap_or_default();
                let mut out = std::io::stdout().lock();
                let written = match format {
                    Format::Json => out.write_all(payload).and_then(|()| out.write_all(b"\n")),
                    Format::Text => match serde_json::from_slice::<Value>(payload) {
                        Ok(v) => write_event_text(&mut out, &v),
                        Err(_) => Ok(()),
                    },
                };
                let _ = written.and_then(|()| out.flush());
                count.fetch_add(1, Ordering::Relaxed);
                pos.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(msg.partition(), msg.offset() + 1);
            }
        });
        Ok(Printer {
            positions,
            printed,
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

    fn stop(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.printed.load(Ordering::Relaxed)
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
