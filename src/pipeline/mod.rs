//! `faultline run`: the stages of the Kafka pipeline, wired with bounded queues.
//!
//! ```text
//!  source thread ──Batch (bounded queue)──▶ match stage thread ──events──▶ sink (producer)
//!   │ poll, register offsets                   │ decode, scan, enrich         │ delivery
//!   │ store watermarks ◀──────── Tracker ◀─────┴ resolve(outputs) ◀───────────┘ reports = acks
//!   └ rebalance: drain, commit                 │ incident stage ──▶ incidents topic, webhook,
//!                                              │                    Alertmanager, admin pages
//!                          reload (SIGHUP, KB dir poll) ──watch─┘ swapped between batches
//! ```
//!
//! The acks travel behind their batch: a record's offset is stored only when it and every
//! earlier record of its partition are terminal ([`crate::offsets`]). Every queue is bounded:
//! librdkafka's prefetch, the batch queue (`pipeline.queue_batches`) and the producer queue;
//! a slow output blocks the matcher, the queue fills, the source pauses its partitions.
//! The admin server and the KB watcher are tokio tasks; the consumer and the matcher are threads
//! because both block (a revoke waits for the drain inside librdkafka's callback, and matching
//! is CPU work).
//!
//! - [`config`]: the `[pipeline]`, `[input]` and `[dead_letter]` tables.
//! - [`decode`]: what a record is and whether it can be read.
//! - [`match_stage`]: decode, scan, enrich, produce, resolve; panics isolated there.
//! - [`quarantine`]: crash notes, which find a record that kills the process across restarts.
//! - [`incidents`]: the correlator, the incidents topic, the incident store of the admin
//!   server, and the webhook and Alertmanager threads.
//! - [`shard`]: role `match`: each event's partition on the events topic (correlator shard).
//! - [`correlate`]: role `correlate`: the correlator fed by the events topic.
//! - [`signals`]: SIGTERM, SIGINT, SIGHUP.
//! - `unknown`: the batch's unknown error lines -> templates -> `unknown` events.
//!
//! Roles (`incidents.role`, `--role`; see `docs/scale-out.md`): `all` runs the stages above in
//! one process; `match` runs them without the incident stage and places each event on the
//! partition of its correlator shard; `correlate` swaps the match stage for [`correlate`] and
//! the input topics for the events topic, read in the correlator group.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use crate::incident::config::ProcessRole;
use crate::kafka::{kafka_settings, KafkaConfig};
use crate::matcher::MatchError;
use crate::reload::{self, KbSource, Loaded, ReloadError};
use crate::runtime::{queue, Health, Shutdown, Stats};
use crate::server;
use crate::sink::kafka::{KafkaSink, SinkError};
use crate::source::kafka::{Batch, KafkaSource, SourceError};
use settings::Config;

pub mod config;
pub mod correlate;
pub mod decode;
mod faults;
pub mod incidents;
pub mod lanes;
pub mod match_stage;
pub mod outputs;
pub mod progress;
pub mod quarantine;
pub mod rebuild;
pub mod settings;
pub mod shard;
pub mod signals;
mod unknown;

pub use decode::LimitExceeded;
pub use faults::{FaultInjection, FaultPoint};
use match_stage::{MatchSettings, MatchStage, StageParts};

/// How long role `match` waits for the events topic's metadata at start.
const METADATA_TIMEOUT: Duration = Duration::from_secs(30);

/// Why the pipeline stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// The KB could not be loaded at start.
    #[error(transparent)]
    Kb(#[from] ReloadError),
    /// The Kafka source failed.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// The Kafka sink failed: an output was lost.
    #[error(transparent)]
    Sink(#[from] SinkError),
    /// The matcher failed (compiling the KB or scanning).
    #[error(transparent)]
    Match(#[from] MatchError),
    /// Too many undecodable records (`[dead_letter]` limits).
    #[error("{0}")]
    InvalidLimit(#[from] LimitExceeded),
    /// The admin server could not bind its address.
    #[error("admin server on {addr}: {error}")]
    Admin {
        /// The address it tried.
        addr: std::net::SocketAddr,
        /// The bind error.
        error: std::io::Error,
    },
    /// The OS refused to spawn a pipeline thread.
    #[error("starting a pipeline thread: {0}")]
    Thread(std::io::Error),
    /// A pipeline thread or task panicked.
    #[error("a pipeline thread panicked")]
    Panicked,
    /// A stage's thread ended while nobody had asked the pipeline to stop.
    #[error("stage {0} stopped without an error while the pipeline was running")]
    StageEnded(String),
    /// The metric families could not be registered.
    #[error(transparent)]
    Metrics(#[from] crate::metrics::MetricsError),
    /// The span exporter could not be started or flushed.
    #[error(transparent)]
    Telemetry(#[from] crate::telemetry::TelemetryError),
    /// An extra redaction rule is invalid.
    #[error(transparent)]
    Redact(#[from] crate::redact::RedactError),
    /// The incident stage could not start.
    #[error(transparent)]
    Incidents(#[from] incidents::StartError),
    /// The crash notes under `pipeline.state_dir` could not be opened.
    #[error(transparent)]
    Quarantine(#[from] quarantine::QuarantineError),
    /// The admin server's token is missing or unreadable.
    #[error(transparent)]
    AdminToken(#[from] server::AdminError),
}

/// The pipeline's stop: the [`Shutdown`] flags every stage reads, and the first error that
/// stopped it.
#[derive(Debug)]
pub struct Stop {
    shutdown: Arc<Shutdown>,
    error: Mutex<Option<PipelineError>>,
}

impl std::ops::Deref for Stop {
    type Target = Shutdown;

    fn deref(&self) -> &Shutdown {
        &self.shutdown
    }
}

impl Stop {
    /// A pipeline nobody has stopped yet.
    pub fn new() -> Arc<Self> {
        Arc::new(Stop {
            shutdown: Shutdown::new(),
            error: Mutex::new(None),
        })
    }

    /// The flags alone, for sources, sinks and signal handlers.
    pub fn shutdown(&self) -> &Arc<Shutdown> {
        &self.shutdown
    }

    /// Stops with an error (the first one wins).
    pub fn fail(&self, e: PipelineError) {
        let mut slot = self.error.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            tracing::error!(error = %e, "stopping");
            *slot = Some(e);
        }
        drop(slot);
        self.request();
    }

    /// Whether an error stopped it.
    pub fn failed(&self) -> bool {
        self.error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }

    /// The error that stopped it, as text, while it is held.
    pub fn error_text(&self) -> Option<String> {
        self.error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(ToString::to_string)
    }

    fn take_error(&self) -> Option<PipelineError> {
        self.error.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

/// A started pipeline.
pub struct Running {
    health: Arc<Health>,
    stop: Arc<Stop>,
    reload: tokio::sync::mpsc::Sender<()>,
    admin: Option<std::net::SocketAddr>,
    threads: Vec<std::thread::JoinHandle<()>>,
    /// The webhook and Alertmanager threads: joined after the matcher, within the drain
    /// timeout.
    delivery: Vec<std::thread::JoinHandle<()>>,
    drain_timeout: Duration,
    /// The incidents the admin pages show, when incidents and the admin server are on.
    store: Option<Arc<server::store::IncidentStore>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// Flushed after the stages stop, so the last spans are exported.
    telemetry: Option<crate::telemetry::Telemetry>,
}

/// What `faultline run` reports when it stops.
#[derive(Debug, Clone)]
pub struct StopReport {
    /// What it did.
    pub stats: Stats,
}

/// Loads the KB (blocking; call from a blocking context or before the runtime is busy).
pub fn load_kb(config: &Config) -> Result<Loaded, ReloadError> {
    KbSource::from_config(&config.kb).load()
}

/// Starts every stage: the admin server (bound before anything reads), the KB watcher, the
/// sink, the source and the matcher. Must be called inside a tokio runtime.
pub async fn start(config: Config, loaded: Loaded) -> Result<Running, PipelineError> {
    start_with_faults(config, loaded, None).await
}

/// [`start`], with panics injected into the matcher: for tests of the failure isolation only.
#[doc(hidden)]
pub async fn start_with_faults(
    config: Config,
    loaded: Loaded,
    faults: Option<FaultInjection>,
) -> Result<Running, PipelineError> {
    let extras = Extras {
        faults,
        ..Extras::default()
    };
    start_with(config, Arc::new(loaded), extras).await
}

/// [`start`] with a KB already shared with other pipelines of this process (`faultline demo
/// --matchers N`, `faultline bench latency`): the compiled database is read-only, each stage
/// has its own scratch. With `metrics`, the pipeline counts into that registry too, so one
/// admin endpoint serves the whole process (the demo's match members and its correlator);
/// `None`: a registry of its own.
pub async fn start_shared(
    config: Config,
    loaded: Arc<Loaded>,
    metrics: Option<Arc<crate::metrics::Metrics>>,
) -> Result<Running, PipelineError> {
    let extras = Extras {
        metrics,
        ..Extras::default()
    };
    start_with(config, loaded, extras).await
}

/// What a caller embedding the pipeline adds to its configuration.
#[derive(Default)]
pub struct Extras {
    /// Panics injected into the matcher (failure isolation tests only).
    #[doc(hidden)]
    pub faults: Option<FaultInjection>,
    /// A registry shared with other pipelines of the process ([`start_shared`]).
    pub metrics: Option<Arc<crate::metrics::Metrics>>,
    /// Incident outputs besides the configured ones, each with its queue size: any
    /// [`crate::sink::output::IncidentOutput`], delivered by the same worker.
    pub outputs: Vec<crate::sink::output::QueuedOutput>,
}

/// [`start`] with [`Extras`]: starts every stage (see [`start`]). The topology, in order: the
/// admin server, the KB watcher, the producer, the incident stage and its outputs (unless this
/// is a match member), the matcher or correlator thread, and the source thread feeding it.
pub async fn start_with(
    config: Config,
    loaded: Arc<Loaded>,
    extras: Extras,
) -> Result<Running, PipelineError> {
    let shared = Shared::new(config, &loaded, extras.metrics)?;
    let Shared {
        config,
        health,
        stop,
        metrics,
        ..
    } = &shared;
    let mut tasks = Vec::new();
    let (kb_tx, kb_rx) = watch::channel(Arc::clone(&loaded));
    let admin = serve_admin(&shared, kb_rx.clone(), &mut tasks).await?;
    let reload_tx = shared.watch_kb(kb_tx, &mut tasks);
    let role = role_of(config);
    let kafka = input_of(config, role);
    let settings = kafka_settings(&kafka);
    let links = shared.broker_links();
    let sink = shared.producer(&settings, &links)?;
    let source = KafkaSource::new(
        &kafka,
        &settings,
        config.pipeline.batch,
        Arc::clone(health),
        Arc::clone(metrics),
        links,
    )?;
    let (incidents, delivery) = match &config.incidents {
        Some(c) if role != ProcessRole::Match => {
            let list = build_outputs(config, admin, stop, extras.outputs)?;
            let (mut stage, threads) = shared.incident_stage(c, list, &sink)?;
            stage.adopt_on_assignment(incidents::KnownReader {
                health: Arc::clone(health),
                read: known_incidents(&settings, c),
                seen: 0,
            });
            (Some(stage), threads)
        }
        _ => (None, Vec::new()),
    };
    let (tx, rx) = queue::bounded::<Batch>(config.pipeline.queue_batches);
    let parts = StageInputs {
        role,
        sink,
        kb: kb_rx,
        loaded,
        incidents,
        faults: extras.faults,
    };
    let (name, stage) = shared.stage(parts, rx).await?;
    let s = Arc::clone(stop.shutdown());
    let threads = vec![
        spawn_stage(name, stop, health, stage)?,
        spawn_stage(
            "faultline-source",
            stop,
            health,
            Box::new(move || source.run(tx, s)),
        )?,
    ];
    tracing::info!(
        role = role.as_str(),
        topics = ?kafka.topics.iter().map(|t| t.as_subscription()).collect::<Vec<_>>(),
        group = %kafka.group_id,
        output = %config.output.topic,
        "consuming"
    );
    Ok(Running {
        reload: reload_tx,
        admin,
        threads,
        delivery,
        drain_timeout: shared.config.kafka.drain_timeout,
        tasks,
        health: shared.health,
        stop: shared.stop,
        store: shared.store,
        telemetry: shared.telemetry,
    })
}

/// What every stage of one pipeline shares.
struct Shared {
    config: Arc<Config>,
    health: Arc<Health>,
    stop: Arc<Stop>,
    metrics: Arc<crate::metrics::Metrics>,
    telemetry: Option<crate::telemetry::Telemetry>,
    /// The incident pages' store: the correlator's open incidents and the recently resolved.
    store: Option<Arc<server::store::IncidentStore>>,
    /// The redaction rules (`[redact]`), compiled once for the events and the dead letters.
    rules: Arc<crate::redact::Redactor>,
}

/// What the matcher or correlator thread is built from, besides [`Shared`].
struct StageInputs {
    role: ProcessRole,
    sink: Arc<KafkaSink>,
    kb: watch::Receiver<Arc<Loaded>>,
    loaded: Arc<Loaded>,
    incidents: Option<incidents::IncidentStage>,
    faults: Option<FaultInjection>,
}

impl Shared {
    fn new(
        config: Config,
        loaded: &Loaded,
        metrics: Option<Arc<crate::metrics::Metrics>>,
    ) -> Result<Self, PipelineError> {
        let config = Arc::new(config);
        let health = Health::new(config.admin.stall_timeout);
        health.set_kb_version(loaded.version());
        let metrics = match metrics {
            Some(m) => m,
            None => Arc::new(crate::metrics::Metrics::new(config.metrics.clone())?),
        };
        metrics.set_kb(&loaded.engine.kb);
        let telemetry = crate::telemetry::Telemetry::start(
            &config.telemetry,
            crate::telemetry::SpanDropCounters::of(&metrics),
        )?;
        let store = match (&config.incidents, config.admin.listen) {
            (Some(c), Some(_)) => Some(server::store::IncidentStore::new(
                c.correlator.max_open_incidents,
                config.admin.resolved_incidents,
            )),
            _ => None,
        };
        let rules = config.redact.rules()?;
        Ok(Shared {
            rules,
            config,
            health,
            stop: Stop::new(),
            metrics,
            telemetry,
            store,
        })
    }

    /// Starts the KB watcher (hot reload), which publishes each new KB on `kb_tx`; the sender
    /// that asks for a reload now.
    fn watch_kb(
        &self,
        kb_tx: watch::Sender<Arc<Loaded>>,
        tasks: &mut Vec<tokio::task::JoinHandle<()>>,
    ) -> tokio::sync::mpsc::Sender<()> {
        let kb = &self.config.kb;
        let (reload_tx, reload_rx) = tokio::sync::mpsc::channel(1);
        tasks.push(tokio::spawn(reload::watch(
            KbSource::from_config(kb),
            kb.dir.as_ref().and(kb.watch_interval),
            kb_tx,
            reload_rx,
            Arc::clone(&self.health.reload),
            Arc::clone(&self.metrics),
            self.stop.subscribe(),
        )));
        reload_tx
    }

    /// The broker links the consumer and the producer share, so an outage is one outage.
    fn broker_links(&self) -> Arc<crate::kafka::links::BrokerLinks> {
        let m = &self.metrics;
        Arc::new(
            crate::kafka::links::BrokerLinks::new(
                m.broker_disconnects(crate::metrics::KafkaClient::Consumer),
                m.broker_disconnects(crate::metrics::KafkaClient::Producer),
            )
            .with_offset_resets(m.offset_resets()),
        )
    }

    /// The producer of every Kafka output (events, incidents, dead letters).
    fn producer(
        &self,
        settings: &crate::kafka::KafkaSettings,
        links: &Arc<crate::kafka::links::BrokerLinks>,
    ) -> Result<Arc<KafkaSink>, PipelineError> {
        let c = &self.config;
        let rules = Arc::clone(&self.rules);
        let sink = KafkaSink::new(
            settings,
            &c.output.topic,
            &c.dead_letter.topic,
            Arc::clone(&self.health.tracker),
            Arc::clone(&self.health.delivered),
        )?
        .with_dead_letter_redactor(c.dead_letter.redact.then_some(rules))
        .with_links(Arc::clone(links));
        Ok(Arc::new(sink))
    }

    /// The incident stage and its outputs' threads.
    fn incident_stage(
        &self,
        c: &crate::incident::config::IncidentsConfig,
        list: Vec<crate::sink::output::QueuedOutput>,
        sink: &Arc<KafkaSink>,
    ) -> Result<(incidents::IncidentStage, Vec<std::thread::JoinHandle<()>>), PipelineError> {
        let outputs = incidents::Outputs {
            list,
            store: self.store.clone(),
            undeliverable_topic: self.config.dead_letter.undeliverable_topic.clone(),
        };
        let tracer = self
            .telemetry
            .as_ref()
            .map(crate::telemetry::Telemetry::incident_tracer);
        Ok(incidents::IncidentStage::start(
            c,
            outputs,
            Arc::clone(sink),
            Arc::clone(&self.health.tracker),
            Arc::clone(&self.stop),
            &self.metrics,
            tracer,
        )?)
    }

    /// The correlator (role `correlate`) or the matcher (every other role), as the body of its
    /// thread, with the thread's name.
    async fn stage(
        &self,
        mut p: StageInputs,
        rx: queue::Receiver<Batch>,
    ) -> Result<(&'static str, Box<dyn FnOnce() + Send>), PipelineError> {
        let config = &self.config;
        let redactor = config.redact.enabled.then(|| Arc::clone(&self.rules));
        let correlator = match p.role {
            ProcessRole::Correlate => p.incidents.take(),
            _ => None,
        };
        if let Some(incidents) = correlator {
            let stage = correlate::CorrelateStage::new(correlate::CorrelateParts {
                unknown: config.unknown.clone(),
                drain_timeout: config.kafka.drain_timeout,
                sink: p.sink,
                health: Arc::clone(&self.health),
                stop: Arc::clone(&self.stop),
                kb: p.kb,
                loaded: p.loaded,
                metrics: Arc::clone(&self.metrics),
                redactor,
                incidents,
            });
            return Ok(("faultline-correlate", Box::new(move || stage.run(rx))));
        }
        let quarantine = match &config.pipeline.state_dir {
            Some(dir) => Some(quarantine::Quarantine::open(
                dir,
                &config.kafka.group_id,
                config.kafka.instance_id.as_deref(),
            )?),
            None => None,
        };
        let partitioner = event_partitioner(config, p.role, &p.sink).await?;
        let stage = MatchStage::new(StageParts {
            settings: MatchSettings::of(config),
            sink: p.sink,
            health: Arc::clone(&self.health),
            stop: Arc::clone(&self.stop),
            kb: p.kb,
            loaded: p.loaded,
            metrics: Arc::clone(&self.metrics),
            tracer: self
                .telemetry
                .as_ref()
                .map(crate::telemetry::Telemetry::tracer),
            redactor,
            faults: p.faults,
            incidents: p.incidents,
            quarantine,
            partitioner,
        })?;
        Ok(("faultline-match", Box::new(move || stage.run(rx))))
    }
}

/// Binds the admin server (before anything reads, so probes answer at once) and serves
/// `/healthz`, `/readyz`, `/metrics`, the KB's diagnoses (`/api/v1/kb/<kb_id>`, of the KB `kb`
/// holds now) and, with a store, the incident pages.
async fn serve_admin(
    shared: &Shared,
    kb: watch::Receiver<Arc<Loaded>>,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
) -> Result<Option<std::net::SocketAddr>, PipelineError> {
    let config = &shared.config;
    let Some(addr) = config.admin.listen else {
        return Ok(None);
    };
    let token = config.admin.resolve_token()?;
    let listener = server::bind(addr)
        .await
        .map_err(|error| PipelineError::Admin { addr, error })?;
    let bound = listener.local_addr().unwrap_or(addr);
    let (h, m) = (Arc::clone(&shared.health), Arc::clone(&shared.metrics));
    let live = shared.store.clone();
    let mut routes = server::health_routes(move || h.readiness()).route("/metrics", move || {
        let report = live.as_deref().map(server::report::families);
        let body = m.render() + report.as_deref().unwrap_or("");
        server::Reply::new(200, crate::metrics::CONTENT_TYPE, body)
    });
    routes = server::kb::routes(routes, move |id| {
        let loaded = Arc::clone(&kb.borrow());
        let (entry, diagnosis) = loaded.enricher.entry(id)?;
        Some(server::kb::EntryDiagnosis::new(
            entry,
            diagnosis,
            loaded.version(),
        ))
    });
    if let Some(store) = &shared.store {
        routes = server::incidents::routes(routes, Arc::clone(store));
        routes = server::report::routes(routes, Arc::clone(store));
    }
    tasks.push(tokio::spawn(server::serve(
        listener,
        routes.with_token(token),
        shared.stop.subscribe(),
    )));
    tracing::info!(addr = %bound, incidents = shared.store.is_some(),
        "admin server listening (/healthz, /readyz, /metrics, /api/v1/kb, /incidents, /api/v1/incidents, /report)");
    Ok(Some(bound))
}

/// What this process does: `incidents.role`, or match and correlate when incidents are off.
fn role_of(config: &Config) -> ProcessRole {
    let incidents = config.incidents.as_ref();
    incidents.map_or(ProcessRole::All, |i| i.role)
}

/// What this process reads: the input topics, or, for a correlator, the events topic in its own
/// group.
fn input_of(config: &Config, role: ProcessRole) -> KafkaConfig {
    match (&config.incidents, role) {
        (Some(inc), ProcessRole::Correlate) => KafkaConfig {
            topics: vec![crate::kafka::TopicSpec::Name(config.output.topic.clone())],
            group_id: inc.correlator_group(&config.kafka.group_id),
            ..config.kafka.clone()
        },
        _ => config.kafka.clone(),
    }
}

/// A match member places its events by correlator shard; other roles produce them unkeyed.
async fn event_partitioner(
    config: &Config,
    role: ProcessRole,
    sink: &Arc<KafkaSink>,
) -> Result<Option<shard::EventPartitioner>, PipelineError> {
    let (Some(inc), ProcessRole::Match) = (&config.incidents, role) else {
        return Ok(None);
    };
    let (s, topic) = (Arc::clone(sink), config.output.topic.clone());
    let partitions = tokio::task::spawn_blocking(move || s.partitions(&topic, METADATA_TIMEOUT))
        .await
        .map_err(|_| PipelineError::Panicked)??;
    tracing::info!(topic = %config.output.topic, partitions, shard_by = ?inc.shard_by,
        "role match: events placed by correlator shard");
    Ok(Some(shard::EventPartitioner::new(partitions, inc.shard_by)))
}

/// Reads the incidents a previous correlator published on the incidents topic (none, logged,
/// when it cannot be read). Blocking.
fn known_incidents(
    settings: &crate::kafka::KafkaSettings,
    c: &crate::incident::config::IncidentsConfig,
) -> Box<dyn FnMut() -> Vec<rebuild::KnownIncident> + Send> {
    // An incident held past max_hold lost its holds, not its identity: at least ten minutes.
    let lookback = c.max_hold.max(Duration::from_secs(600));
    let (settings, topic) = (settings.clone(), c.topic.clone());
    Box::new(move || {
        match rebuild::known_incidents(&settings, &topic, lookback, METADATA_TIMEOUT) {
            Ok(known) => {
                let open = known.iter().filter(|k| k.resolved.is_none()).count();
                if !known.is_empty() {
                    tracing::info!(
                        open,
                        resolved = known.len() - open,
                        "adopting the ids of incidents published before this assignment"
                    );
                }
                known
            }
            Err(e) => {
                tracing::warn!(error = %e, "incidents published before this assignment get new ids");
                Vec::new()
            }
        }
    })
}

/// The configured incident outputs, built, then the caller's.
fn build_outputs(
    config: &Config,
    admin: Option<std::net::SocketAddr>,
    stop: &Stop,
    extra: Vec<crate::sink::output::QueuedOutput>,
) -> Result<Vec<crate::sink::output::QueuedOutput>, PipelineError> {
    let ctx = crate::sink::output::OutputContext {
        page_base: config.admin.page_base(admin),
        shutdown: Arc::clone(stop.shutdown()),
    };
    let mut list = Vec::new();
    for o in &config.outputs {
        let section = o.section();
        let output = section.build(&ctx).map_err(incidents::StartError::from)?;
        list.push((output, section.queue()));
    }
    list.extend(extra);
    Ok(list)
}

/// Spawns a stage's thread. A stage that ends on its own (an error, a panic that escaped it, a
/// return nobody asked for) stops the whole pipeline loudly: `faultline run` exits non-zero,
/// and `/readyz` fails with the reason, in the demo too, where other pipelines share the
/// process.
fn spawn_stage(
    name: &str,
    stop: &Arc<Stop>,
    health: &Arc<Health>,
    f: Box<dyn FnOnce() + Send>,
) -> Result<std::thread::JoinHandle<()>, PipelineError> {
    let (stop, health, stage) = (Arc::clone(stop), Arc::clone(health), name.to_string());
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || {
            let ended = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
            if ended.is_err() {
                stop.fail(PipelineError::Panicked);
            } else if !stop.requested() {
                stop.fail(PipelineError::StageEnded(stage.clone()));
            }
            if let Some(why) = stop.error_text() {
                health.set_stopped(&format!("{stage}: {why}"));
            }
        })
        .map_err(PipelineError::Thread)
}

impl Running {
    /// The counters and readiness the admin server reports.
    pub fn health(&self) -> &Arc<Health> {
        &self.health
    }

    /// What it did so far.
    pub fn stats(&self) -> Stats {
        self.health.stats()
    }

    /// The incidents the admin pages show (open and recently resolved), when incidents and the
    /// admin server are on.
    pub fn incident_store(&self) -> Option<&Arc<server::store::IncidentStore>> {
        self.store.as_ref()
    }

    /// The admin server's address, when it runs.
    pub fn admin_addr(&self) -> Option<std::net::SocketAddr> {
        self.admin
    }

    /// Asks for a graceful stop (SIGTERM, SIGINT): drain, commit, exit.
    pub fn shutdown(&self) {
        self.stop.request();
    }

    /// A handle that requests a stop, for signal handlers.
    pub fn stopper(&self) -> Arc<Stop> {
        Arc::clone(&self.stop)
    }

    /// Asks for a KB reload (SIGHUP).
    pub fn reload(&self) {
        let _ = self.reload.try_send(());
    }

    /// A handle that requests reloads.
    pub fn reloader(&self) -> tokio::sync::mpsc::Sender<()> {
        self.reload.clone()
    }

    /// Waits for the pipeline to stop (after [`Running::shutdown`] or an error).
    pub async fn wait(self) -> Result<StopReport, PipelineError> {
        let Running {
            health,
            stop,
            threads,
            delivery,
            drain_timeout,
            tasks,
            telemetry,
            ..
        } = self;
        wait_stages(&threads, &stop, drain_timeout).await;
        let joined =
            tokio::task::spawn_blocking(move || threads.into_iter().all(|t| t.join().is_ok()))
                .await
                .unwrap_or(false);
        stop.request();
        // Their queues are closed with the matcher; an attempt in progress may take its timeout.
        let joining = tokio::task::spawn_blocking(move || {
            for t in delivery {
                let _ = t.join();
            }
        });
        if tokio::time::timeout(drain_timeout, joining).await.is_err() {
            tracing::warn!("a webhook or Alertmanager thread is still sending; not waiting for it");
        }
        for t in tasks {
            let _ = t.await;
        }
        if let Some(t) = telemetry {
            let flushed = tokio::task::spawn_blocking(move || t.shutdown()).await;
            if let Ok(Err(e)) = flushed {
                tracing::warn!(error = %e, "exporting the last spans");
            }
        }
        if let Some(e) = stop.take_error() {
            return Err(e);
        }
        if !joined {
            return Err(PipelineError::Panicked);
        }
        Ok(StopReport {
            stats: health.stats(),
        })
    }
}

/// Waits until every stage thread has ended. A stop that takes more than twice the drain
/// timeout is logged with the stages still running (again every minute), so a process that
/// will not exit says what it waits on.
async fn wait_stages(
    threads: &[std::thread::JoinHandle<()>],
    stop: &Stop,
    drain_timeout: Duration,
) {
    let patience = drain_timeout * 2;
    let mut stopping_since: Option<std::time::Instant> = None;
    let mut next_report = patience;
    let mut ticks = tokio::time::interval(Duration::from_millis(50));
    loop {
        ticks.tick().await;
        let running: Vec<&str> = threads
            .iter()
            .filter(|t| !t.is_finished())
            .map(|t| t.thread().name().unwrap_or("unnamed"))
            .collect();
        if running.is_empty() {
            return;
        }
        if !stop.requested() {
            continue;
        }
        let since = *stopping_since.get_or_insert_with(std::time::Instant::now);
        if since.elapsed() >= next_report {
            tracing::warn!(
                stopping_for_s = since.elapsed().as_secs(),
                stages = ?running,
                "still stopping: these stages have not ended"
            );
            next_report += Duration::from_secs(60);
        }
    }
}

/// `faultline run`: start, then stop gracefully on SIGTERM or SIGINT, reload on SIGHUP.
pub async fn run(config: Config) -> Result<StopReport, PipelineError> {
    // Before anything slow: a SIGTERM during start-up is then a graceful stop, not a kill.
    let signals = signals::Signals::register();
    tracing::info!("loading the knowledge base");
    let c = config.clone();
    let loaded = tokio::task::spawn_blocking(move || load_kb(&c))
        .await
        .map_err(|_| PipelineError::Panicked)??;
    tracing::info!(kb_version = %loaded.version(), entries = loaded.engine.kb.entries.len(),
        origin = %loaded.engine.kb.origin, "knowledge base loaded");
    let running = start(config, loaded).await?;
    let signals = signals.map(|s| {
        tokio::spawn(s.handle(Arc::clone(running.stopper().shutdown()), running.reloader()))
    });
    let result = running.wait().await;
    if let Some(s) = signals {
        s.abort();
    }
    result
}
