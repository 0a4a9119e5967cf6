//! `faultline bench latency`: the split roles on an embedded broker, measured.
//!
//! Match members (role `match`) and a correlator (role `correlate`) run in this process against
//! librdkafka's mock cluster, as `faultline demo` runs them. Three measurements, side by side:
//!
//! 1. **Capacity**: a backlog of healthy lines is produced as fast as the producer goes; the
//!    members' consumed-record count over the time until the last one is read is the maximum
//!    rate of this machine (producer, broker and members share its cores).
//! 2. **Latency** at each load level (10%, 50%, 90% of that maximum): healthy lines at a
//!    steady rate with a root-cause line of a new job every `roots_every` lines. For each root
//!    line: the time from handing it to the producer to its match event on the events topic,
//!    and to the first incident change of its job on the incidents topic, as a consumer of
//!    each topic sees them (p50 and p99).
//! 3. **Correlator capacity**: a backlog of match events (jobs of one Xid root and 63 NCCL
//!    timeouts) on an events topic, read by a fresh correlator; events per second of wall
//!    time and per second of CPU of the correlator thread (`/proc/self/task/*/stat`), the
//!    figure that says what fleet one correlator covers.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, Message, OwnedHeaders};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};
use serde::Serialize;

use crate::config::{Config, ConfigError, RawConfig};
use crate::incident::config::ProcessRole;
use crate::pipeline::{self, PipelineError, Running};
use crate::reload::Loaded;

const LOGS: &str = "bench.latency.logs";
const EVENTS: &str = "bench.latency.events";
const INCIDENTS: &str = "bench.latency.incidents";
const DEAD: &str = "bench.latency.dead-letter";
const CORRELATOR_EVENTS: &str = "bench.correlator.events";
const CORRELATOR_INCIDENTS: &str = "bench.correlator.incidents";
/// Partitions of the logs topic.
const LOG_PARTITIONS: i32 = 12;
/// Partitions of the correlator's backlog: the mock broker keeps about 5 MB per partition,
/// so the backlog is spread (a correlator reads every partition of its events topic).
const CORRELATOR_PARTITIONS: i32 = 32;
/// How long any phase may wait for the pipeline.
const PHASE_LIMIT: Duration = Duration::from_secs(300);
/// A root-cause line that opens an incident at once (a PyTorch out-of-memory error).
const ROOT_LINE: &str = "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate \
                         2.00 GiB. GPU 3 has a total capacity of 79.15 GiB of which 1.06 GiB is \
                         free.";

/// What `faultline bench latency` runs.
#[derive(Debug, Clone)]
pub struct LatencyOptions {
    /// Knowledge-base directory; the built-in KB when absent.
    pub kb: Option<std::path::PathBuf>,
    /// Match members.
    pub matchers: u16,
    /// Healthy lines of the capacity backlog.
    pub backlog: u64,
    /// Seconds of steady load per level.
    pub seconds: f64,
    /// Load levels, in percent of the measured maximum.
    pub levels: Vec<u32>,
    /// One root-cause line every this many lines.
    pub roots_every: u64,
    /// `pipeline.batch_linger_ms` of the members and the correlator.
    pub batch_linger_ms: u64,
    /// `linger.ms` of their producers and of the load generator.
    pub linger_ms: u64,
    /// `fetch.wait.max.ms` of their consumers.
    pub fetch_wait_max_ms: u64,
    /// Jobs of the correlator backlog (64 match events each).
    pub correlator_jobs: u64,
}

/// Latency at one load level.
#[derive(Debug, Clone, Serialize)]
pub struct Level {
    /// Percent of the measured maximum.
    pub load_pct: u32,
    /// Lines per second offered.
    pub lines_per_s: f64,
    /// Root-cause lines sent.
    pub roots: usize,
    /// Root lines whose match event was seen.
    pub events_seen: usize,
    /// Root lines whose incident was seen.
    pub incidents_seen: usize,
    /// Append to match event, median, in milliseconds.
    pub event_p50_ms: f64,
    /// Append to match event, 99th percentile, in milliseconds.
    pub event_p99_ms: f64,
    /// Append to incident change, median, in milliseconds.
    pub incident_p50_ms: f64,
    /// Append to incident change, 99th percentile, in milliseconds.
    pub incident_p99_ms: f64,
}

/// The correlator's capacity.
#[derive(Debug, Clone, Serialize)]
pub struct CorrelatorCapacity {
    /// Match events read.
    pub events: u64,
    /// Wall-clock seconds from the correlator's start to its last event.
    pub seconds: f64,
    /// Events per second of wall time (group join included).
    pub events_per_s: f64,
    /// CPU seconds of the correlator thread.
    pub thread_cpu_s: f64,
    /// Events per CPU second of the correlator thread: matches per second per core.
    pub events_per_cpu_s: f64,
}

/// What `faultline bench latency` measured.
#[derive(Debug, Clone, Serialize)]
pub struct LatencyReport {
    /// Match members.
    pub matchers: u16,
    /// Cores of this machine (producer, broker, members and correlator share them).
    pub cores: usize,
    /// Lines per second the members read at most.
    pub max_lines_per_s: f64,
    /// Latency per load level.
    pub levels: Vec<Level>,
    /// The correlator's capacity.
    pub correlator: CorrelatorCapacity,
    /// The settings measured.
    pub batch_linger_ms: u64,
    /// `linger.ms`.
    pub linger_ms: u64,
    /// `fetch.wait.max.ms`.
    pub fetch_wait_max_ms: u64,
}

/// Why the benchmark stopped.
#[derive(Debug, thiserror::Error)]
pub enum LatencyError {
    /// The embedded broker or a client failed.
    #[error("kafka: {0}")]
    Kafka(#[from] KafkaError),
    /// A configuration was rejected.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A pipeline did not start or stop cleanly.
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
    /// A phase did not finish in time.
    #[error("{0} did not finish within {PHASE_LIMIT:?}")]
    Timeout(&'static str),
    /// Options that cannot be measured.
    #[error("{0}")]
    Options(&'static str),
}

/// Runs the three measurements.
pub async fn run(opts: &LatencyOptions) -> Result<LatencyReport, LatencyError> {
    if opts.matchers == 0 || opts.roots_every == 0 || opts.seconds <= 0.0 || opts.backlog == 0 {
        return Err(LatencyError::Options(
            "--matchers, --backlog, --roots-every and --seconds must be positive",
        ));
    }
    let cluster = MockCluster::new(1)?;
    let bootstrap = cluster.bootstrap_servers();
    for (topic, partitions) in [
        (LOGS, LOG_PARTITIONS),
        (EVENTS, 1),
        (INCIDENTS, 1),
        (DEAD, 1),
        (CORRELATOR_EVENTS, CORRELATOR_PARTITIONS),
        (CORRELATOR_INCIDENTS, 1),
    ] {
        cluster.create_topic(topic, partitions, 1)?;
    }
    let loaded = {
        let c = config(
            &bootstrap,
            opts,
            ProcessRole::Match,
            "bench-latency",
            EVENTS,
            INCIDENTS,
        )?;
        tokio::task::spawn_blocking(move || pipeline::load_kb(&c))
            .await
            .map_err(|_| PipelineError::Panicked)?
            .map_err(PipelineError::from)?
    };
    let loaded = Arc::new(loaded);
    let correlator = pipeline::start_shared(
        config(
            &bootstrap,
            opts,
            ProcessRole::Correlate,
            "bench-latency",
            EVENTS,
            INCIDENTS,
        )?,
        Arc::clone(&loaded),
        None,
    )
    .await?;
    let mut matchers = Vec::new();
    for _ in 0..opts.matchers {
        let c = config(
            &bootstrap,
            opts,
            ProcessRole::Match,
            "bench-latency",
            EVENTS,
            INCIDENTS,
        )?;
        matchers.push(pipeline::start_shared(c, Arc::clone(&loaded), None).await?);
    }
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("linger.ms", opts.linger_ms.to_string())
        .set("queue.buffering.max.messages", "1000000")
        .create()?;
    wait("the group's assignment", || {
        matchers
            .iter()
            .map(|m| m.stats().assigned_partitions)
            .sum::<usize>()
            == LOG_PARTITIONS as usize
            && correlator.stats().assigned_partitions == 1
    })
    .await?;

    eprintln!("bench latency: members assigned; producing the capacity backlog");
    let max_lines_per_s = capacity(&producer, &matchers, opts.backlog).await?;
    eprintln!("bench latency: maximum {max_lines_per_s:.0} lines/s");
    let seen = Seen::start(&bootstrap)?;
    let mut levels = Vec::new();
    let mut sent_total = opts.backlog;
    for &pct in &opts.levels {
        let rate = max_lines_per_s * f64::from(pct) / 100.0;
        let (level, sent) = level(&producer, &seen, opts, pct, rate, sent_total).await?;
        eprintln!(
            "bench latency: {pct}%: event p50 {:.1} ms, incident p50 {:.1} ms",
            level.event_p50_ms, level.incident_p50_ms
        );
        sent_total += sent;
        levels.push(level);
    }
    seen.stop();
    for m in matchers {
        m.shutdown();
        m.wait().await?;
    }
    correlator.shutdown();
    correlator.wait().await?;

    let correlator = correlator_capacity(&bootstrap, opts, &producer, loaded).await?;
    Ok(LatencyReport {
        matchers: opts.matchers,
        cores: std::thread::available_parallelism().map_or(1, usize::from),
        max_lines_per_s,
        levels,
        correlator,
        batch_linger_ms: opts.batch_linger_ms,
        linger_ms: opts.linger_ms,
        fetch_wait_max_ms: opts.fetch_wait_max_ms,
    })
}

/// A member's or the correlator's configuration.
fn config(
    bootstrap: &str,
    opts: &LatencyOptions,
    role: ProcessRole,
    group: &str,
    events: &str,
    incidents: &str,
) -> Result<Config, ConfigError> {
    let mut raw = RawConfig::default();
    raw.kafka.brokers = Some(bootstrap.to_string());
    raw.kafka.group_id = Some(group.into());
    raw.kafka.topics = Some(vec![LOGS.into()]);
    raw.kafka.commit_interval_ms = Some(1_000);
    raw.kafka.consumer_options.insert(
        "fetch.wait.max.ms".into(),
        opts.fetch_wait_max_ms.to_string(),
    );
    raw.kafka
        .producer_options
        .insert("linger.ms".into(), opts.linger_ms.to_string());
    raw.input.job_id = Some("header:job".into());
    raw.output.topic = Some(events.into());
    raw.dead_letter.topic = Some(DEAD.into());
    raw.pipeline.batch_linger_ms = Some(opts.batch_linger_ms);
    raw.incidents.topic = Some(incidents.into());
    raw.incidents.role = Some(role.as_str().into());
    raw.kb.dir.clone_from(&opts.kb);
    raw.admin.listen = Some("off".into());
    Config::from_raw(raw)
}

/// Polls `done` every 5 ms until it holds, or [`PHASE_LIMIT`].
async fn wait(what: &'static str, mut done: impl FnMut() -> bool) -> Result<(), LatencyError> {
    let deadline = Instant::now() + PHASE_LIMIT;
    let mut tick = tokio::time::interval(Duration::from_millis(5));
    while !done() {
        if Instant::now() >= deadline {
            return Err(LatencyError::Timeout(what));
        }
        tick.tick().await;
    }
    Ok(())
}

/// Sends one line to partition `n % LOG_PARTITIONS`, waiting for room in the queue.
fn send(
    producer: &ThreadedProducer<DefaultProducerContext>,
    n: u64,
    line: &[u8],
    job: &str,
) -> Result<(), KafkaError> {
    let mut record = BaseRecord::<(), _>::to(LOGS)
        .partition((n % LOG_PARTITIONS as u64) as i32)
        .payload(line)
        .headers(OwnedHeaders::new().insert(Header {
            key: "job",
            value: Some(job),
        }));
    loop {
        match producer.send(record) {
            Ok(()) => return Ok(()),
            Err((
                KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull),
                r,
            )) => {
                record = r;
                producer.poll(Duration::from_millis(1));
            }
            Err((e, _)) => return Err(e),
        }
    }
}

/// Records the members consumed in all.
fn consumed(matchers: &[Running]) -> u64 {
    matchers.iter().map(|m| m.stats().records).sum()
}

/// The maximum rate: `backlog` healthy lines as fast as they go, until the members read them.
async fn capacity(
    producer: &ThreadedProducer<DefaultProducerContext>,
    matchers: &[Running],
    backlog: u64,
) -> Result<f64, LatencyError> {
    let mut rng = super::Rng::new(42);
    let mut line = Vec::new();
    let started = Instant::now();
    for n in 0..backlog {
        line.clear();
        super::synthetic_healthy_line(&mut rng, &mut line);
        send(producer, n, line.trim_ascii_end(), "bench-healthy")?;
    }
    wait("the capacity backlog", || consumed(matchers) >= backlog).await?;
    Ok(backlog as f64 / started.elapsed().as_secs_f64())
}

/// One load level: `rate` lines per second for `opts.seconds`, a root line every
/// `opts.roots_every`; waits for their events and incidents.
async fn level(
    producer: &ThreadedProducer<DefaultProducerContext>,
    seen: &Seen,
    opts: &LatencyOptions,
    pct: u32,
    rate: f64,
    first: u64,
) -> Result<(Level, u64), LatencyError> {
    let mut rng = super::Rng::new(u64::from(pct));
    let mut line = Vec::new();
    let mut sent: HashMap<String, Instant> = HashMap::new();
    let started = Instant::now();
    let mut n = 0u64;
    let mut tick = tokio::time::interval(Duration::from_millis(2));
    loop {
        let elapsed = started.elapsed().as_secs_f64();
        if elapsed >= opts.seconds {
            break;
        }
        let due = (rate * elapsed) as u64;
        while n < due {
            if n % opts.roots_every == opts.roots_every / 2 {
                let job = format!("lat-{pct}-{n}");
                send(producer, first + n, ROOT_LINE.as_bytes(), &job)?;
                sent.insert(job, Instant::now());
            } else {
                line.clear();
                super::synthetic_healthy_line(&mut rng, &mut line);
                send(producer, first + n, line.trim_ascii_end(), "bench-healthy")?;
            }
            n += 1;
        }
        tick.tick().await;
    }
    let _ = wait("the level's incidents", || seen.all(sent.keys())).await;
    let (mut events, mut incidents) = (Vec::new(), Vec::new());
    {
        let arrived = seen.arrived.lock().unwrap_or_else(|p| p.into_inner());
        for (job, at) in &sent {
            if let Some((e, i)) = arrived.get(job) {
                if let Some(e) = e {
                    events.push(e.saturating_duration_since(*at).as_secs_f64() * 1e3);
                }
                if let Some(i) = i {
                    incidents.push(i.saturating_duration_since(*at).as_secs_f64() * 1e3);
                }
            }
        }
    }
    events.sort_by(f64::total_cmp);
    incidents.sort_by(f64::total_cmp);
    Ok((
        Level {
            load_pct: pct,
            lines_per_s: rate,
            roots: sent.len(),
            events_seen: events.len(),
            incidents_seen: incidents.len(),
            event_p50_ms: quantile(&events, 0.5),
            event_p99_ms: quantile(&events, 0.99),
            incident_p50_ms: quantile(&incidents, 0.5),
            incident_p99_ms: quantile(&incidents, 0.99),
        },
        n,
    ))
}

/// The `q` quantile of sorted values (nearest rank); 0 when there are none.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// First arrival of each benchmark job's match event and incident change.
type Arrivals = HashMap<String, (Option<Instant>, Option<Instant>)>;

/// A consumer thread that notes when each `lat-` job's event and incident arrive.
struct Seen {
    arrived: Arc<Mutex<Arrivals>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Seen {
    fn start(bootstrap: &str) -> Result<Self, KafkaError> {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("group.id", "bench-latency-observer")
            .set("enable.auto.commit", "false")
            .set("fetch.wait.max.ms", "5")
            .create()?;
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(EVENTS, 0, Offset::Beginning)?;
        tpl.add_partition_offset(INCIDENTS, 0, Offset::Beginning)?;
        consumer.assign(&tpl)?;
        let arrived = Arc::new(Mutex::new(Arrivals::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (a, s) = (Arc::clone(&arrived), Arc::clone(&stop));
        let thread = std::thread::Builder::new()
            .name("bench-observer".into())
            .spawn(move || {
                while !s.load(Ordering::Relaxed) {
                    let Some(Ok(m)) = consumer.poll(Duration::from_millis(20)) else {
                        continue;
                    };
                    let now = Instant::now();
                    let Some(job) = m
                        .payload()
                        .and_then(|p| serde_json::from_slice::<serde_json::Value>(p).ok())
                        .and_then(|v| v["job_id"].as_str().map(str::to_string))
                        .filter(|j| j.starts_with("lat-"))
                    else {
                        continue;
                    };
                    let mut a = a.lock().unwrap_or_else(|p| p.into_inner());
                    let slot = a.entry(job).or_default();
                    let which = if m.topic() == EVENTS {
                        &mut slot.0
                    } else {
                        &mut slot.1
                    };
                    which.get_or_insert(now);
                }
            })
            .map_err(|_| KafkaError::Canceled)?;
        Ok(Seen {
            arrived,
            stop,
            thread: Some(thread),
        })
    }

    /// Whether every job's event and incident arrived.
    fn all<'a>(&self, mut jobs: impl Iterator<Item = &'a String>) -> bool {
        let a = self.arrived.lock().unwrap_or_else(|p| p.into_inner());
        jobs.all(|j| a.get(j).is_some_and(|(e, i)| e.is_some() && i.is_some()))
    }

    fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A backlog of match events on a topic of its own, read by a fresh correlator.
async fn correlator_capacity(
    bootstrap: &str,
    opts: &LatencyOptions,
    producer: &ThreadedProducer<DefaultProducerContext>,
    loaded: Arc<Loaded>,
) -> Result<CorrelatorCapacity, LatencyError> {
    let templates = super::Templates::new();
    let mut job = Vec::new();
    let mut offset = 0i64;
    for j in 0..opts.correlator_jobs {
        templates.job(j, 63, 60_000, &mut job);
        for mut e in job.drain(..) {
            // Distinct input positions: the correlator skips a replayed position as a duplicate.
            e.source = crate::record::Provenance::Kafka {
                topic: LOGS.into(),
                partition: 0,
                offset,
                line: 1,
            };
            offset += 1;
            let payload =
                serde_json::to_vec(&e).map_err(|_| LatencyError::Options("event JSON"))?;
            let shard = crate::pipeline::shard::shard_of(&e.job_id, CORRELATOR_PARTITIONS);
            let mut record = BaseRecord::<str, _>::to(CORRELATOR_EVENTS)
                .partition(shard)
                .key(e.job_id.as_str())
                .payload(&payload);
            loop {
                match producer.send(record) {
                    Ok(()) => break,
                    Err((KafkaError::MessageProduction(_), r)) => {
                        record = r;
                        producer.poll(Duration::from_millis(1));
                    }
                    Err((e, _)) => return Err(e.into()),
                }
            }
        }
    }
    producer.flush(Duration::from_secs(60))?;
    let events = offset as u64;
    let config = config(
        bootstrap,
        opts,
        ProcessRole::Correlate,
        "bench-correlator",
        CORRELATOR_EVENTS,
        CORRELATOR_INCIDENTS,
    )?;
    let started = Instant::now();
    let before = thread_cpu_s("faultline-corr");
    let correlator = pipeline::start_shared(config, loaded, None).await?;
    wait("the correlator backlog", || {
        correlator.stats().records >= events
    })
    .await?;
    let seconds = started.elapsed().as_secs_f64();
    let thread_cpu_s = thread_cpu_s("faultline-corr") - before;
    correlator.shutdown();
    correlator.wait().await?;
    Ok(CorrelatorCapacity {
        events,
        seconds,
        events_per_s: events as f64 / seconds,
        thread_cpu_s,
        events_per_cpu_s: if thread_cpu_s > 0.0 {
            events as f64 / thread_cpu_s
        } else {
            0.0
        },
    })
}

/// CPU seconds (user + system) of this process's threads whose name starts with `prefix`
/// (`/proc/self/task/*/stat`, in USER_HZ = 100 ticks per second); 0 off Linux.
fn thread_cpu_s(prefix: &str) -> f64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0.0;
    };
    let mut ticks = 0u64;
    for task in tasks.filter_map(Result::ok) {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        if !stat[open + 1..close].starts_with(prefix) {
            continue;
        }
        // After the name: state is field 3; utime and stime are fields 14 and 15.
        let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        let field = |i: usize| fields.get(i - 3).and_then(|f| f.parse::<u64>().ok());
        ticks += field(14).unwrap_or(0) + field(15).unwrap_or(0);
    }
    ticks as f64 / 100.0
}

/// The report as a Markdown table (the form docs/scale-out.md shows).
pub fn table(r: &LatencyReport) -> String {
    let mut out = format!(
        "{} match member(s) and one correlator on {} core(s); maximum {:.0} lines/s; \
         batch_linger_ms={}, linger.ms={}, fetch.wait.max.ms={}\n\n\
         | load | lines/s | roots | → match event p50 / p99 (ms) | → incident p50 / p99 (ms) |\n\
         |---|---|---|---|---|\n",
        r.matchers, r.cores, r.max_lines_per_s, r.batch_linger_ms, r.linger_ms, r.fetch_wait_max_ms
    );
    for l in &r.levels {
        out.push_str(&format!(
            "| {}% | {:.0} | {} ({} / {} seen) | {:.1} / {:.1} | {:.1} / {:.1} |\n",
            l.load_pct,
            l.lines_per_s,
            l.roots,
            l.events_seen,
            l.incidents_seen,
            l.event_p50_ms,
            l.event_p99_ms,
            l.incident_p50_ms,
            l.incident_p99_ms
        ));
    }
    let c = &r.correlator;
    out.push_str(&format!(
        "\ncorrelator: {} events in {:.2} s ({:.0}/s wall, group join included); correlator \
         thread {:.2} CPU s: {:.0} matches per second per core\n",
        c.events, c.seconds, c.events_per_s, c.thread_cpu_s, c.events_per_cpu_s
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_take_the_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.5), 50.0);
        assert_eq!(quantile(&v, 0.99), 99.0);
        assert_eq!(quantile(&v[..1], 0.99), 1.0);
        assert_eq!(quantile(&[], 0.5), 0.0);
    }

    #[test]
    fn this_threads_cpu_is_found_by_name() {
        let t = std::thread::Builder::new()
            .name("bench-cpu-probe".into())
            .spawn(|| {
                // Busy until the kernel has counted a tick of this thread (bounded).
                let started = Instant::now();
                let mut x = 0u64;
                let mut cpu = 0.0;
                while cpu == 0.0 && started.elapsed() < Duration::from_secs(30) {
                    for _ in 0..100_000 {
                        x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                    }
                    cpu = thread_cpu_s("bench-cpu-probe");
                }
                (x, cpu)
            })
            .expect("spawn");
        let (_, cpu) = t.join().expect("join");
        assert!(cpu > 0.0, "a busy thread's CPU time: {cpu}");
        assert_eq!(thread_cpu_s("no-such-thread-name"), 0.0);
    }
}
