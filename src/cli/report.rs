//! `faultline report`: reads logs (scanned in-process, as `faultline scan` would) or a scan's
//! JSON output, builds the [`crate::report::Report`] and prints it.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::engine::Engine;
use crate::incident::IncidentConfig;
use crate::kb::{KbError, KnowledgeBase};
use crate::matcher::MatchError;
use crate::report::input::{self, Fact, Input, InputError};
use crate::report::render::{self, Format};
use crate::report::{build, Options};
use crate::scan::{self, ScanError, ScanOptions};
use crate::sink::stdout::{self, StdoutSink};
use crate::source::file;
use crate::time::Millis;

/// `faultline report` arguments.
#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    /// Log files and directories (recursively; .gz and .zst too) to scan.
    #[arg(value_name = "PATH")]
    pub paths: Vec<String>,
    /// Read `faultline scan --format json` output from FILE (`-`: stdin) instead of scanning.
    #[arg(long, value_name = "FILE", conflicts_with = "paths")]
    pub from_json: Option<PathBuf>,
    /// Read the events and incidents topics of `faultline run` from these brokers instead of
    /// scanning: each from its oldest record kept to its end when the report starts.
    #[arg(long, value_name = "HOST:PORT,...", conflicts_with_all = ["paths", "from_json"])]
    pub brokers: Option<String>,
    /// The match events topic (`output.topic`), with --brokers.
    #[arg(long, default_value = crate::sink::kafka::DEFAULT_OUTPUT_TOPIC, value_name = "TOPIC")]
    pub events_topic: String,
    /// The incidents topic (`incidents.topic`), with --brokers.
    #[arg(long, default_value = "faultline.incidents", value_name = "TOPIC")]
    pub incidents_topic: String,
    /// A librdkafka property (TLS, SASL), repeatable, with --brokers.
    #[arg(long = "kafka-option", value_name = "KEY=VALUE")]
    pub kafka_options: Vec<String>,
    /// How long reading each topic to its end may take, with --brokers.
    #[arg(long, default_value = "5m", value_name = "DURATION")]
    pub kafka_timeout: String,
    /// Only jobs that started at or after this time (RFC 3339), and interruptions from it on.
    #[arg(long, value_name = "TIME")]
    pub since: Option<String>,
    /// Only jobs that started before this time (RFC 3339), and interruptions before it.
    #[arg(long, value_name = "TIME")]
    pub until: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub format: OutputFormat,
    /// A next attempt that runs this long without failing counts as a fix that worked.
    #[arg(long, default_value = "1h", value_name = "DURATION")]
    pub fix_threshold: String,
    /// A lemon node was blamed by at least this many distinct jobs.
    #[arg(long, default_value_t = 3)]
    pub lemon_min_jobs: usize,
    /// The false lemons a report may name by chance, on average (Bonferroni over the hosts).
    #[arg(long, default_value_t = 0.2)]
    pub lemon_alpha: f64,
    /// Knowledge-base directory (when scanning); the KB built into the binary when absent.
    #[arg(long, env = "FAULTLINE_KB", value_name = "DIR")]
    pub kb: Option<PathBuf>,
}

/// `--format`: the report's renderings, and the admin server's page.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// Aligned columns.
    Text,
    /// Markdown tables.
    Markdown,
    /// One JSON object.
    Json,
    /// The report's Prometheus families.
    Prometheus,
    /// The admin server's `/report` page, with its charts.
    Html,
}

/// Why a report could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The KB did not load.
    #[error(transparent)]
    Kb(#[from] KbError),
    /// The KB did not compile.
    #[error("compiling the knowledge base: {0}")]
    Compile(#[from] MatchError),
    /// The scan failed.
    #[error("scanning: {0}")]
    Scan(#[from] ScanError),
    /// The JSON input could not be read.
    #[error(transparent)]
    Input(#[from] InputError),
    /// A flag's value is wrong.
    #[error("--{flag}: {message}")]
    Flag {
        /// The flag.
        flag: &'static str,
        /// What is wrong.
        message: String,
    },
    /// Nothing to read.
    #[error("give log files or directories, --from-json FILE or --brokers HOST:PORT")]
    NoInput,
    /// A topic could not be read.
    #[error("reading the topic {topic}: {error}")]
    Kafka {
        /// The topic.
        topic: String,
        /// What failed.
        error: String,
    },
    /// Writing the report failed.
    #[error("writing the report: {0}")]
    Write(io::Error),
}

fn time_flag(flag: &'static str, value: Option<&str>) -> Result<Option<Millis>, ReportError> {
    let Some(text) = value else {
        return Ok(None);
    };
    let stamp = crate::time::parse(text).filter(|s| s.year_known);
    match stamp.and_then(|s| s.millis()) {
        Some(ms) => Ok(Some(ms)),
        None => Err(ReportError::Flag {
            flag,
            message: format!("`{text}` is not an RFC 3339 time (2026-01-05T00:00:00Z)"),
        }),
    }
}

/// The report's options from the flags.
pub fn options(args: &ReportArgs) -> Result<Options, ReportError> {
    let mut opts = Options {
        since: time_flag("since", args.since.as_deref())?,
        until: time_flag("until", args.until.as_deref())?,
        ..Options::default()
    };
    opts.thresholds.fix_threshold_ms = crate::time::parse_duration_ms(&args.fix_threshold)
        .filter(|ms| *ms > 0)
        .ok_or_else(|| ReportError::Flag {
            flag: "fix-threshold",
            message: format!("`{}` is not a duration (30m, 1h)", args.fix_threshold),
        })?;
    opts.thresholds.lemon_min_jobs = args.lemon_min_jobs.max(1);
    if !(args.lemon_alpha > 0.0 && args.lemon_alpha < 1.0) {
        return Err(ReportError::Flag {
            flag: "lemon-alpha",
            message: format!("{} is not between 0 and 1", args.lemon_alpha),
        });
    }
    opts.thresholds.lemon_alpha = args.lemon_alpha;
    Ok(opts)
}

/// Runs `faultline report`.
pub fn run(args: &ReportArgs) -> Result<ExitCode, ReportError> {
    let opts = options(args)?;
    let (input, unreadable) = match (&args.from_json, &args.brokers) {
        (Some(path), _) => (read_json(path)?, 0),
        (None, Some(brokers)) => read_topics(args, brokers)?,
        (None, None) if args.paths.is_empty() => return Err(ReportError::NoInput),
        (None, None) => scan_logs(&args.paths, args.kb.as_deref())?,
    };
    let report = build(&input, &opts);
    let text = match args.format {
        OutputFormat::Html => crate::server::report::page(&report),
        OutputFormat::Text => render::render(&report, Format::Text),
        OutputFormat::Markdown => render::render(&report, Format::Markdown),
        OutputFormat::Json => render::render(&report, Format::Json),
        OutputFormat::Prometheus => render::render(&report, Format::Prometheus),
    };
    let mut out = io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => return Err(ReportError::Write(e)),
        _ => {}
    }
    Ok(if unreadable > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn read_json(path: &Path) -> Result<Input, ReportError> {
    let mut input = Input::default();
    match path.to_str() == Some("-") {
        true => input::read_json_lines(io::stdin().lock(), "stdin", &mut input)?,
        false => input::read_json_file(path, &mut input)?,
    }
    Ok(input)
}

/// Reads the events and incidents topics to their ends (`--brokers`). Returns the input and how
/// many records were not a scan's JSON (each named on stderr, first few only; the report is
/// made from the rest and the exit code says some were skipped).
fn read_topics(args: &ReportArgs, brokers: &str) -> Result<(Input, usize), ReportError> {
    let timeout = crate::time::parse_duration_ms(&args.kafka_timeout)
        .filter(|ms| *ms > 0)
        .ok_or_else(|| ReportError::Flag {
            flag: "kafka-timeout",
            message: format!("`{}` is not a duration (30s, 5m)", args.kafka_timeout),
        })?;
    let mut properties = vec![("bootstrap.servers", brokers)];
    for option in &args.kafka_options {
        let (k, v) = option.split_once('=').ok_or_else(|| ReportError::Flag {
            flag: "kafka-option",
            message: format!("`{option}` is not KEY=VALUE"),
        })?;
        properties.push((k.trim(), v.trim()));
    }
    let kafka = |topic: &str, error: String| ReportError::Kafka {
        topic: topic.to_string(),
        error,
    };
    let consumer = crate::kafka::topic::reader(properties, "faultline-report").map_err(|e| {
        ReportError::Flag {
            flag: "brokers",
            message: format!("the Kafka client: {e}"),
        }
    })?;
    let mut input = Input::default();
    let mut skipped = 0usize;
    for topic in [&args.events_topic, &args.incidents_topic] {
        let mut lines = input::JsonLines::default();
        let from = crate::kafka::topic::From::Start;
        let wait = std::time::Duration::from_millis(timeout.unsigned_abs());
        let read = crate::kafka::topic::read_to_end(&consumer, topic, from, wait, |msg| {
            use rdkafka::Message;
            let place = format!("{topic}/{}@{}", msg.partition(), msg.offset());
            if let Err(e) = lines.read(msg.payload().unwrap_or_default(), &place, &mut input) {
                skipped += 1;
                if skipped <= 5 {
                    let why = match e {
                        InputError::Json { source, .. } => source.to_string(),
                        e => e.to_string(),
                    };
                    eprintln!(
                        "faultline: skipped {place}: not a faultline scan JSON object: {why}"
                    );
                }
            }
        })
        .map_err(|e| kafka(topic, e))?;
        if read.partitions_left > 0 {
            return Err(kafka(
                topic,
                format!(
                    "{} partitions not read to their end within --kafka-timeout {}",
                    read.partitions_left, args.kafka_timeout
                ),
            ));
        }
    }
    if skipped > 5 {
        eprintln!("faultline: skipped {skipped} records that are not a scan's JSON in all");
    }
    Ok((input, skipped))
}

/// Scans `paths` in-process: the facts from each match as it is emitted, the incidents from
/// the JSON the scan writes at the end. Returns the input and how many inputs were unreadable.
pub fn scan_logs(paths: &[String], kb: Option<&Path>) -> Result<(Input, usize), ReportError> {
    let kb = match kb {
        Some(dir) => KnowledgeBase::load_dir(dir)?,
        None => KnowledgeBase::embedded()?,
    };
    let engine = Engine::with_progress(kb)?;
    let (inputs, errors) = file::expand(paths, None);
    for e in &errors {
        eprintln!("faultline: cannot read {e}");
    }
    let big = inputs.iter().any(|i| i.size.is_none_or(|s| s > 16 << 20));
    let threads = match big {
        true => std::thread::available_parallelism().map_or(1, |n| n.get().min(8)),
        false => 1,
    };
    let opts = ScanOptions {
        threads,
        summary: false,
        print_matches: false,
        incidents: Some(IncidentConfig::default()),
        unknown: None,
        ..ScanOptions::default()
    };
    let mut facts: Vec<Fact> = Vec::new();
    let mut json = Vec::new();
    let stats = {
        let mut sink = StdoutSink::new(&mut json, stdout::Format::Json);
        scan::scan_inputs(&engine, &inputs, &opts, &mut sink, &mut |e| {
            facts.extend(Fact::from_event(e));
        })?
    };
    for e in &stats.errors {
        eprintln!("faultline: cannot read {e}");
    }
    let mut input = Input {
        facts,
        incidents: Vec::new(),
    };
    input::read_json_lines(json.as_slice(), "the scan's incidents", &mut input)?;
    Ok((input, errors.len() + stats.errors.len()))
}
