//! The command line: `scan`, `templates`, `report`, `kb check|list|import|explain|suggest`.
//!
//! Thin: each command loads what it needs, calls the library and maps the outcome to an exit
//! code. Every command's `--help` ends with examples.

use std::io::{self, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};

mod kb_commands;
pub mod report;

use crate::engine::Engine;
use crate::enrich::Detail;
use crate::incident::IncidentConfig;
use crate::kb::{self, KnowledgeBase};
use crate::redact::{Redactor, RuleSpec};
use crate::scan::{self, ScanOptions};
use crate::sink::stdout::{Format, StdoutSink};
use crate::source::file;

/// faultline: tells a GPU-training fleet what just broke, why, and what to do about it.
#[derive(Debug, Parser)]
#[command(name = "faultline", version, about, long_about = None, after_help = "\
Examples:
  faultline scan examples/                 # diagnose the shipped sample job logs
  faultline scan --format text job.log.gz  # for people
  kubectl logs -f trainer-0 | faultline scan -
  faultline kb explain '[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB'
  faultline kb check kb/")]
pub struct Cli {
    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands of `faultline`.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Scan files, directories (recursively), .gz/.zst files or stdin (`-`) and print every
    /// match with its diagnosis, then the incidents, then a summary per job.
    #[command(after_help = "\
Output: one JSON object per match (schema_version 1, see README), then one `incident` object
per incident (matches of a job grouped within a window: its root, culprit rank and host,
cascades and context lines; see docs/incidents.md), then one `summary` object per job.
Traceback and c10 frame lines are folded into incidents (--context-events prints them).
Exit code 0 when the scan ran, whatever it found; 1 when an input could not be read
or a chunk of lines had to be skipped because scanning it panicked twice (the rest is still
scanned); 2 on other errors.

Examples:
  faultline scan examples/
  faultline scan --format text logs/job-1234.log.gz
  faultline scan --job-id llm-pretrain-7 - < rank0.log
  faultline scan --redact 'internal_token=itk_(?P<secret>[a-z0-9]{32})' logs/
  faultline scan logs/ | jq 'select(.role == \"root\")'
  faultline scan logs/ | jq 'select(.type == \"incident\") | .culprit'
  faultline scan --incident-window 10m --incident-quiet 1h logs/")]
    Scan(ScanArgs),
    /// Mine the error lines that no KB entry matches into templates and list them, most
    /// frequent first, with counts and one redacted example (docs/unknown-failures.md).
    #[command(after_help = "\
Lines that look like errors (glog E/F, ERROR/CRITICAL/FATAL, exceptions, error words, non-zero
exits; benign forms excluded) and that no KB entry matches are grouped into templates: numbers,
hex, IPs, paths, hosts, UUIDs, sizes, durations and times become <NUM>, <HEX>, <IP>, ...; <*>
marks a position that varies. --all-lines mines every line (no KB, no error filter); with
--format json it prints one object per line, {\"line\": N, \"template_id\": ..., \"template\": ...},
each with its final template (scripts/template-accuracy.sh measures grouping accuracy with it).

Examples:
  faultline templates tests/corpus/real/failures/
  faultline templates --format json --top 0 job.log | jq -r '.template'
  kubectl logs trainer-0 | faultline templates -
  faultline templates --all-lines --format json app.log > lines.jsonl")]
    Templates(crate::mine::command::TemplatesArgs),
    /// Check, list, import and explain knowledge-base entries.
    #[command(subcommand)]
    Kb(KbCommand),
    /// Stream from Kafka: match every record, produce diagnoses to a topic, at least once.
    #[command(after_help = "\
Settings come from --config FILE, then flags, then FAULTLINE_* environment variables (flags
and variables win). See docs/kafka.md for the delivery guarantees. SIGTERM or SIGINT drain
in-flight records, commit and exit 0; SIGHUP reloads the knowledge base. Exit code 2 on errors,
including an input so broken that the dead-letter limits tripped.

Incidents and tickets: an [incidents] table with a topic (file only) correlates the matches
into incidents and produces every change to that topic, keyed by fingerprint; a [webhook]
table sends ticketed incidents to a ticket system. See docs/incidents.md (Incidents from
faultline run) and deploy/faultline.toml.

Examples:
  faultline run --config faultline.toml
  faultline run --check-config --config faultline.toml
  faultline run --brokers kafka:9092 --topic train-logs --topic '^fleet-.*' --kb kb/
  FAULTLINE_KAFKA_OPTIONS=security.protocol=SASL_SSL,sasl.mechanism=SCRAM-SHA-512 faultline run -c faultline.toml")]
    Run(Box<crate::config::RunArgs>),
    /// Run the whole Kafka pipeline on an embedded broker with the sample job logs.
    #[command(after_help = "\
Starts an in-process Kafka-protocol broker, produces the sample logs (./examples, or a
built-in set) to it, runs the same pipeline as `faultline run`, and prints every diagnosis as it
arrives on the output topic. Exits once the samples are processed; --follow keeps running.

Examples:
  faultline demo
  faultline demo --follow
  faultline demo --logs my-job.log --format json")]
    Demo(crate::demo::DemoArgs),
    /// Measure recognition on a corpus of real logs (tests/corpus/real/README.md): detection,
    /// headline top-1 and false alarms, per label and overall, with every miss.
    #[command(after_help = "\
Examples:
  faultline eval tests/corpus/real
  faultline eval --format json tests/corpus/real > eval.json")]
    Eval {
        /// The corpus directory (every *.log below it).
        #[arg(value_name = "DIR")]
        dir: PathBuf,
        /// The knowledge base to measure.
        #[command(flatten)]
        kb: KbArg,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
    },
    /// What failures cost the fleet: interruptions by root cause, GPU-hours lost, ETTR, mean
    /// time to failure by job size, lemon nodes and fix outcomes (docs/report.md).
    #[command(after_help = "\
Examples:
  faultline report examples/
  faultline report --format markdown --since 2026-01-01T00:00:00Z logs/
  faultline scan --format json logs/ > scan.jsonl && faultline report --from-json scan.jsonl
  faultline report --format json logs/ | jq '.table'")]
    Report(report::ReportArgs),
    /// Generate benchmark inputs (see scripts/bench-scan.sh).
    #[command(subcommand)]
    Bench(BenchCommand),
}

/// `faultline bench`: benchmark inputs and baselines.
// clap turns a field's `///` into its `--help` text: fields that show none stay bare.
#[allow(missing_docs)]
#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Write a log corpus: healthy lines (loghub samples and synthetic training output) with KB
    /// examples mixed in.
    #[command(after_help = "\
Examples:
  faultline bench corpus --size-mb 500 --background ../shared/corpus/loghub > /tmp/corpus.log
  faultline bench corpus --size-mb 50 --failure-rate 0.01 > /tmp/small.log")]
    Corpus {
        #[command(flatten)]
        kb: KbArg,
        /// Approximate size in MiB.
        #[arg(long, default_value_t = 100)]
        size_mb: u64,
        /// Share of lines that are KB examples.
        #[arg(long, default_value_t = 0.001)]
        failure_rate: f64,
        /// Directory of `*.log` files to mix in as real background lines.
        #[arg(long, value_name = "DIR")]
        background: Option<PathBuf>,
        #[arg(long, default_value_t = 42)]
        seed: u64,
    },
    /// The baseline: Hyperscan alone over a file (no line mapping, decoding or enrichment);
    /// prints bytes, hits and MB/s.
    #[command(after_help = "\
Examples:
  faultline bench raw-hyperscan /tmp/corpus.log
  faultline bench raw-hyperscan --mode line /tmp/corpus.log
  faultline bench raw-hyperscan --parts --runs 5 /tmp/corpus.log")]
    RawHyperscan {
        file: PathBuf,
        #[command(flatten)]
        kb: KbArg,
        #[command(flatten)]
        options: crate::bench::RawOptions,
    },
    /// Write a KB FACTOR times the size of the given one (copies with literals of their own),
    /// to measure how throughput and compile time scale with the KB.
    #[command(after_help = "\
Examples:
  faultline bench scale-kb --factor 10 --out /tmp/kb10 && faultline scan --kb /tmp/kb10 corpus.log")]
    ScaleKb {
        #[command(flatten)]
        kb: KbArg,
        #[arg(long, default_value_t = 10)]
        factor: usize,
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
    /// Scan FILE with the line-by-line `regex` oracle and compare with the JSON lines that
    /// `faultline scan --no-summary` printed for it (exit code 1 on any difference).
    #[command(after_help = "\
Examples:
  faultline scan --no-summary corpus.log > hs.jsonl && faultline bench oracle corpus.log --expect hs.jsonl")]
    Oracle {
        file: PathBuf,
        #[arg(long, value_name = "JSONL")]
        expect: PathBuf,
        #[command(flatten)]
        kb: KbArg,
    },
    /// Stream distinct jobs through the incident correlator (default caps) and print its
    /// counts and the process's peak resident memory (VmHWM) as JSON.
    #[command(after_help = "\
Examples:
  faultline bench incidents --jobs 1000000
  faultline bench incidents --jobs 100000 --cascades 63 --step-ms 10")]
    Incidents {
        /// Distinct jobs, each one incident.
        #[arg(long, default_value_t = 1_000_000)]
        jobs: u64,
        /// Cascade matches (distinct ranks) per job after its root.
        #[arg(long, default_value_t = 3)]
        cascades: u32,
        /// Log time between two jobs' roots, in milliseconds.
        #[arg(long, default_value_t = 100)]
        step_ms: i64,
    },
    /// Print every KB pattern, one per line (for `rg -f`); with --per-entry, rank the entries
    /// by scan cost instead (docs/performance.md).
    #[command(after_help = "\
Examples:
  faultline bench patterns > /tmp/patterns.txt && rg -c -f /tmp/patterns.txt /tmp/corpus.log
  faultline bench patterns --per-entry --background ../shared/corpus/loghub
  faultline bench patterns --per-entry --corpus /tmp/corpus.log --top 0 --json")]
    Patterns {
        #[command(flatten)]
        kb: KbArg,
        /// Turn named groups into plain groups (`rg -f` joins all patterns into one regex, where
        /// a name may appear only once).
        #[arg(long)]
        unnamed: bool,
        #[command(flatten)]
        per_entry: crate::bench::PerEntryArgs,
    },
    /// Write a simulated fleet's logs (Vector JSON lines, one file per day) and its ground
    /// truth (`truth.json`) for `faultline report` (docs/report.md).
    #[command(after_help = "\
Examples:
  faultline bench fleet --seed 7 /tmp/fleet && faultline report /tmp/fleet
  faultline bench fleet --seed 1 --jobs 50 --days 3 /tmp/small-fleet")]
    Fleet(crate::bench::fleet::FleetArgs),
    /// `faultline report` on a million incidents: writes them with their facts as scan JSON
    /// lines, then times reading and building the report on one core (docs/report.md).
    #[command(after_help = "\
Examples:
  faultline bench report
  faultline bench report --incidents 100000 --file /tmp/report-bench.jsonl --json")]
    Report(crate::bench::report::ReportBenchArgs),
    /// Match members and a correlator on an embedded broker: the maximum rate, the latency from
    /// a log line to its match event and to its incident at 10/50/90% of it, and the
    /// correlator's matches per second per core (see docs/scale-out.md).
    #[command(after_help = "\
Examples:
  faultline bench latency
  faultline bench latency --matchers 2 --seconds 20 --json")]
    Latency {
        #[command(flatten)]
        kb: KbArg,
        /// Match members.
        #[arg(long, default_value_t = 1)]
        matchers: u16,
        /// Healthy lines of the capacity backlog.
        #[arg(long, default_value_t = 400_000)]
        backlog: u64,
        /// Seconds of steady load per level.
        #[arg(long, default_value_t = 10.0)]
        seconds: f64,
        /// Load levels, in percent of the measured maximum.
        #[arg(long, value_delimiter = ',', default_values_t = [10, 50, 90])]
        levels: Vec<u32>,
        /// One root-cause line (a new job) every this many lines.
        #[arg(long, default_value_t = 1_000)]
        roots_every: u64,
        /// `pipeline.batch_linger_ms` of the members and the correlator.
        #[arg(long, default_value_t = 20)]
        batch_linger_ms: u64,
        /// `linger.ms` of the producers.
        #[arg(long, default_value_t = 5)]
        linger_ms: u64,
        /// `fetch.wait.max.ms` of the consumers (faultline's default).
        #[arg(long, default_value_t = 100)]
        fetch_wait_max_ms: u64,
        /// Jobs of the correlator backlog (64 match events each; the embedded broker keeps
        /// about 160 MB of it).
        #[arg(long, default_value_t = 1_000)]
        correlator_jobs: u64,
        /// Print the report as JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

/// The `--kb` flag of every command that reads a knowledge base.
#[derive(Debug, Args)]
pub struct KbArg {
    /// Knowledge-base directory; the KB built into the binary when absent.
    #[arg(long, env = "FAULTLINE_KB", value_name = "DIR")]
    pub kb: Option<PathBuf>,
}

impl KbArg {
    /// Loads the KB from `--kb`, or the embedded one when absent.
    pub fn load(&self) -> Result<KnowledgeBase> {
        Ok(match &self.kb {
            Some(dir) => KnowledgeBase::load_dir(dir)?,
            None => KnowledgeBase::embedded()?,
        })
    }
}

/// `faultline scan` arguments.
#[derive(Debug, Args)]
pub struct ScanArgs {
    /// Files, directories or `-` for stdin.
    #[arg(value_name = "PATH", default_value = "-")]
    pub paths: Vec<String>,
    /// The knowledge base to scan with.
    #[command(flatten)]
    pub kb: KbArg,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Json)]
    pub format: Format,
    /// Job id of every raw line (default: the file name without extensions; `stdin`).
    #[arg(long, value_name = "ID")]
    pub job_id: Option<String>,
    /// Longest line kept; longer lines are cut there and marked `truncated`.
    #[arg(long, value_name = "BYTES", default_value_t = file::DEFAULT_MAX_LINE_BYTES)]
    pub max_line_bytes: usize,
    /// Bytes scanned per matcher call.
    #[arg(long, value_name = "BYTES", default_value_t = file::DEFAULT_CHUNK_BYTES, hide = true)]
    pub chunk_bytes: usize,
    /// Do not print the per-job summaries.
    #[arg(long)]
    pub no_summary: bool,
    /// Do not correlate matches into incidents.
    #[arg(long)]
    pub no_incidents: bool,
    /// A match joins its job's incident when it comes within this of the incident's last
    /// match (`90s`, `5m`, `1h`; collective timeouts count from when the hang began).
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = parse_duration)]
    pub incident_window: i64,
    /// An incident resolves after this much log time without a new match (at least the window).
    #[arg(long, value_name = "DURATION", default_value = "35m", value_parser = parse_duration)]
    pub incident_quiet: i64,
    /// Also print traceback, c10 frame and torchrun summary lines as matches.
    #[arg(long)]
    pub context_events: bool,
    /// Print every matched line too (`--format text` prints incidents only by default;
    /// JSON always carries the matches).
    #[arg(long)]
    pub matches: bool,
    /// A node's event (Xid, ECC, AER, OOM killer...) joins a job's incident when it falls at
    /// most this long before the job's first error on that host.
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = parse_duration)]
    pub node_join: i64,
    /// Worker threads per input (0: one per core, at most 8, for inputs over 16 MiB or stdin).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// Progress bar on stderr: `auto` shows it on a terminal for inputs over 64 MiB.
    #[arg(long, value_enum, default_value_t = Progress::Auto)]
    pub progress: Progress,
    /// Print secrets as the log has them (by default tokens, keys and passwords in `line` and
    /// `captures` become `[REDACTED:<kind>]`; see docs/security.md).
    #[arg(long, conflicts_with = "redact")]
    pub no_redact: bool,
    /// Extra redaction rule, repeatable: NAME=PATTERN (a `secret` group narrows what is
    /// replaced), added to the built-in rules.
    #[arg(long, value_name = "NAME=PATTERN")]
    pub redact: Vec<RuleSpec>,
    /// No `unknown` events for error lines no KB entry knows (docs/unknown-failures.md).
    #[arg(long)]
    pub no_unknown: bool,
    /// Also match training-progress lines (KB category `progress`: an `info` event per step),
    /// for `faultline report --from-json` (docs/report.md).
    #[arg(long)]
    pub progress_lines: bool,
    /// The diagnosis in each match: `reference` (its title; incidents carry it whole), `full`.
    #[arg(long, value_enum, value_name = "DETAIL")]
    pub diagnosis: Option<Detail>,
}

/// When `scan` shows a progress bar on stderr.
// clap would list a variant's `///` as that value's help in `--help`.
#[allow(missing_docs)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Progress {
    Auto,
    Always,
    Never,
}

/// `faultline kb`: check, list, import and explain entries.
// clap turns a field's `///` into its `--help` text: fields that show none stay bare.
#[allow(missing_docs)]
#[derive(Debug, Subcommand)]
pub enum KbCommand {
    /// Prove a KB directory sound: fields, ids, patterns in both engines, examples.
    #[command(after_help = "\
Exit code 0 when the KB is sound (warnings allowed), 1 when it has errors. Each error names the
file, the entry and the field.

Examples:
  faultline kb check            # ./kb if present, else the built-in KB
  faultline kb check my-kb/")]
    Check {
        /// KB directory (default: ./kb if it exists, else the built-in KB).
        dir: Option<PathBuf>,
        /// Also print warnings (examples that hit other entries too).
        #[arg(long)]
        warnings: bool,
        /// Remember a pass in the cache directory, as `run` does (`run` checks a KB directory
        /// in a child process with this flag, so that the check's memory is never its own).
        #[arg(long, hide = true)]
        record_pass: bool,
    },
    /// List every entry: a table, Markdown (kb/COVERAGE.md) or JSON.
    #[command(after_help = "\
Examples:
  faultline kb list
  faultline kb list --format markdown > kb/COVERAGE.md
  faultline kb list --format json | jq '.[].error_code'")]
    List {
        #[command(flatten)]
        kb: KbArg,
        #[arg(long, value_enum, default_value_t = ListFormat::Table)]
        format: ListFormat,
    },
    /// Convert seed-format Markdown or deadends.dev JSON entries into KB TOML files.
    #[command(after_help = "\
Each entry is written to OUT/<domain>/<slug>.toml with a first pattern, example and negative
example derived from its title; sharpen them, then run `faultline kb check`.

Examples:
  faultline kb import seeds/pytorch-nccl-timeout-allreduce.md --out kb
  faultline kb import deadends-export.json --out /tmp/imported --force")]
    Import {
        /// Markdown (.md) or JSON (.json) files.
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
        /// KB directory to write into.
        #[arg(long, default_value = "kb")]
        out: PathBuf,
        /// Overwrite existing entries.
        #[arg(long)]
        force: bool,
    },
    /// Show which entries match a line, with captures, diagnosis, verification level and
    /// review trail.
    #[command(after_help = "\
Text shows each entry's own advice in the author's order (first action first). The seed
knowledge base's AI-written advice is unverified and shown only with --all, labelled as the
seed's; JSON always carries it (origin \"seed\", rate_kind \"estimate\") and the review trail.

Examples:
  faultline kb explain '[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB'
  faultline kb explain --format json 'NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.'
  faultline kb explain --all '[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600081 milliseconds before timing out.'")]
    Explain {
        /// The log line (raw text or a JSON envelope).
        line: String,
        #[command(flatten)]
        kb: KbArg,
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
        /// Also show the seed's AI-written advice (unverified) after the entry's own.
        #[arg(long)]
        all: bool,
    },
    /// Draft KB entries for the most frequent unknown error templates of logs.
    #[command(after_help = "\
Mines the input like `faultline templates`, then drafts an entry per template, most frequent
first: id draft/<slug>, verification = \"draft\", a pattern built from the template (literal
parts escaped, each value a named capture), examples from the real lines (redacted), a near
miss as negative example, the lines' places as references, and TODO text for the diagnosis.
Every draft passes `faultline kb check`; a draft that would match a line of the healthy
corpus is dropped with a note on stderr. See docs/unknown-failures.md.

Examples:
  faultline kb suggest tests/corpus/real/failures/
  faultline kb suggest --top 5 --out /tmp/drafts job.log && faultline kb check /tmp/drafts")]
    Suggest(crate::mine::command::SuggestArgs),
}

/// How `kb list` prints the entries.
// clap would list a variant's `///` as that value's help in `--help`.
#[allow(missing_docs)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ListFormat {
    Table,
    Markdown,
    Json,
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Scan(args) => run_scan(args),
        Command::Eval { dir, kb, format } => {
            let engine = Engine::new(kb.load()?).context("compiling the knowledge base")?;
            let sets = crate::eval::find_sets(&dir)?;
            let mut text = String::new();
            for (i, (set_dir, info)) in sets.into_iter().enumerate() {
                let excerpts = crate::eval::read_corpus(&set_dir)?;
                let mut report = crate::eval::evaluate(&engine, &excerpts, &set_dir)?;
                report.set = info;
                // One report as before; several sets: one JSON object per line (text: blocks).
                match format {
                    Format::Json if i == 0 => text.push_str(&serde_json::to_string(&report)?),
                    Format::Json => {
                        text.push('\n');
                        text.push_str(&serde_json::to_string(&report)?);
                    }
                    Format::Text => {
                        if i > 0 {
                            text.push('\n');
                        }
                        text.push_str(&crate::eval::render_text(&report));
                    }
                }
            }
            if format == Format::Json {
                text.push('\n');
            }
            write_stdout(text.as_bytes())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Templates(args) => Ok(crate::mine::command::templates(&args)?),
        Command::Report(args) => Ok(report::run(&args)?),
        Command::Kb(KbCommand::Suggest(args)) => Ok(crate::mine::command::suggest(&args)?),
        Command::Kb(KbCommand::Check {
            dir,
            warnings,
            record_pass,
        }) => kb_commands::check(dir, warnings, record_pass),
        Command::Kb(KbCommand::List { kb, format }) => {
            let kb = kb.load()?;
            let text = match format {
                ListFormat::Table => kb::list::table(&kb),
                ListFormat::Markdown => kb::list::markdown(&kb),
                ListFormat::Json => serde_json::to_string_pretty(&kb.entries)? + "\n",
            };
            write_stdout(text.as_bytes())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Kb(KbCommand::Import { files, out, force }) => {
            kb_commands::import(&files, &out, force)
        }
        Command::Kb(KbCommand::Explain {
            line,
            kb,
            format,
            all,
        }) => run_explain(&line, &kb, format, all),
        Command::Bench(BenchCommand::Corpus {
            kb,
            size_mb,
            failure_rate,
            background,
            seed,
        }) => {
            let kb = kb.load()?;
            let background = crate::bench::background_lines(background.as_deref())?;
            let stdout = io::stdout().lock();
            let mut out = io::BufWriter::new(stdout);
            let (lines, failures) = crate::bench::write_corpus(
                &kb,
                &background,
                size_mb << 20,
                failure_rate,
                seed,
                &mut out,
            )?;
            out.flush()?;
            eprintln!("wrote {lines} lines, {failures} of them KB examples");
            Ok(ExitCode::SUCCESS)
        }
        Command::Bench(BenchCommand::Oracle { file, expect, kb }) => {
            let kb = Arc::new(kb.load()?.without_progress()); // as `scan` matches
            let sources: Vec<&str> = kb.patterns.iter().map(|p| p.source.as_str()).collect();
            let oracle = Engine::with_matcher(
                Arc::clone(&kb),
                crate::matcher::RegexMatcher::compile(&sources)?,
            );
            let (inputs, errors) = file::expand(&[file.display().to_string()], None);
            if let Some(e) = errors.first() {
                bail!("cannot read {e}");
            }
            let opts = ScanOptions {
                summary: false,
                ..ScanOptions::default()
            };
            let mut sink = StdoutSink::new(Vec::new(), Format::Json);
            scan::scan_inputs(&oracle, &inputs, &opts, &mut sink, &mut |_| {})?;
            let got = sink.into_inner();
            let want = std::fs::read(&expect)?;
            let (got_lines, want_lines) = (got.split(|&b| b == b'\n'), want.split(|&b| b == b'\n'));
            for (i, (g, w)) in got_lines.zip(want_lines).enumerate() {
                if g != w {
                    eprintln!(
                        "line {}: oracle {}\n        expected {}",
                        i + 1,
                        String::from_utf8_lossy(g),
                        String::from_utf8_lossy(w)
                    );
                    return Ok(ExitCode::from(1));
                }
            }
            if got.len() != want.len() {
                eprintln!(
                    "outputs differ in length: oracle {} bytes, expected {}",
                    got.len(),
                    want.len()
                );
                return Ok(ExitCode::from(1));
            }
            eprintln!("identical: {} bytes of events", got.len());
            Ok(ExitCode::SUCCESS)
        }
        Command::Bench(BenchCommand::ScaleKb { kb, factor, out }) => {
            let files = match &kb.kb {
                Some(dir) => kb::read_dir(dir)?,
                None => KnowledgeBase::embedded_files(),
            };
            let scaled =
                crate::bench::scale_kb(&files, factor.max(1)).map_err(anyhow::Error::msg)?;
            for (path, text) in &scaled {
                let target = out.join(path);
                if let Some(parent) = target.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                std::fs::write(&target, text)?;
            }
            eprintln!("wrote {} entries to {}", scaled.len(), out.display());
            Ok(ExitCode::SUCCESS)
        }
        Command::Bench(BenchCommand::RawHyperscan { file, kb, options }) => {
            // The database `scan` and `run` compile: the progress entries left out.
            let kb = kb.load()?.without_progress();
            crate::bench::raw_hyperscan_command(&kb, &file, &options)?;
            // As `scan` does (`run_scan`): the process ends, so the KB is not freed piece by piece.
            std::mem::forget(kb);
            Ok(ExitCode::SUCCESS)
        }
        Command::Bench(BenchCommand::Incidents {
            jobs,
            cascades,
            step_ms,
        }) => {
            let report = crate::bench::incidents(jobs, cascades, step_ms)?;
            println!("{}", serde_json::to_string(&report)?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Bench(BenchCommand::Fleet(args)) => crate::bench::fleet::command(&args),
        Command::Bench(BenchCommand::Report(args)) => crate::bench::report::command(&args),
        Command::Bench(BenchCommand::Latency {
            kb,
            matchers,
            backlog,
            seconds,
            levels,
            roots_every,
            batch_linger_ms,
            linger_ms,
            fetch_wait_max_ms,
            correlator_jobs,
            json,
        }) => {
            init_logs("warn");
            let opts = crate::bench::latency::LatencyOptions {
                kb: kb.kb,
                matchers,
                backlog,
                seconds,
                levels,
                roots_every,
                batch_linger_ms,
                linger_ms,
                fetch_wait_max_ms,
                correlator_jobs,
            };
            let report = runtime()?.block_on(crate::bench::latency::run(&opts))?;
            match json {
                true => println!("{}", serde_json::to_string(&report)?),
                false => print!("{}", crate::bench::latency::table(&report)),
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Bench(BenchCommand::Patterns {
            kb,
            unnamed,
            per_entry,
        }) => {
            let kb = kb.load()?;
            if per_entry.per_entry {
                let text =
                    crate::bench::per_entry(&kb, &per_entry).map_err(|e| anyhow::anyhow!("{e}"))?;
                write_stdout(text.as_bytes())?;
                return Ok(ExitCode::SUCCESS);
            }
            let names = regex::Regex::new(r"\(\?P?<[A-Za-z_][A-Za-z0-9_]*>")?;
            let text: String = kb
                .patterns
                .iter()
                .map(|p| match unnamed {
                    true => format!("{}\n", names.replace_all(&p.source, "(?:")),
                    false => format!("{}\n", p.source),
                })
                .collect();
            write_stdout(text.as_bytes())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Run(args) => run_kafka(*args),
        Command::Demo(args) => run_demo(args),
    }
}

/// A `--incident-*` duration: `90s`, `5m`, `1h30m`, `250ms` or seconds.
fn parse_duration(text: &str) -> std::result::Result<i64, String> {
    match crate::time::parse_duration_ms(text) {
        Some(ms) if ms > 0 => Ok(ms),
        _ => Err(format!(
            "{text:?} is not a duration: write 90s, 5m, 1h30m or 250ms"
        )),
    }
}

fn write_stdout(bytes: &[u8]) -> Result<()> {
    let mut stdout = io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

fn run_scan(args: ScanArgs) -> Result<ExitCode> {
    let kb = args.kb.load()?;
    let engine = match (args.no_unknown, args.progress_lines) {
        // Unknown lines are found in the KB's own pass: the gate compiled into its database.
        (false, progress) => crate::unknown::find::engine(kb, progress),
        (true, true) => Engine::with_progress(kb),
        (true, false) => Engine::new(kb),
    }
    .context("compiling the knowledge base")?;
    let (inputs, errors) = file::expand(&args.paths, args.job_id.as_deref());
    for e in &errors {
        eprintln!("faultline: cannot read {e}");
    }
    let total: u64 = inputs.iter().filter_map(|i| i.size).sum();
    let progress = match args.progress {
        Progress::Always => true,
        Progress::Never => false,
        Progress::Auto => io::stderr().is_terminal() && total > 64 << 20,
    };
    let cores = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(8);
    let threads = match args.threads {
        0 if inputs.iter().any(|i| i.size.is_none_or(|s| s > 16 << 20)) => cores,
        0 => 1,
        n => n,
    };
    let redactor = match (args.no_redact, args.redact.is_empty()) {
        (true, _) => None,
        (false, true) => Some(Redactor::builtin()),
        (false, false) => Some(Arc::new(Redactor::new(&args.redact)?)),
    };
    let opts = ScanOptions {
        threads,
        chunk_bytes: args.chunk_bytes,
        max_line_bytes: args.max_line_bytes,
        summary: !args.no_summary,
        progress,
        incidents: (!args.no_incidents).then(|| IncidentConfig {
            window_ms: args.incident_window,
            quiet_ms: args.incident_quiet,
            node_join_ms: args.node_join,
            ..IncidentConfig::default()
        }),
        context_events: args.context_events,
        print_matches: args.matches || args.format == Format::Json || args.no_incidents,
        redactor,
        unknown: (!args.no_unknown).then(crate::unknown::UnknownConfig::default),
        diagnosis: (args.diagnosis).unwrap_or(Detail::with_incidents(!args.no_incidents)),
    };
    let stdout = io::stdout().lock();
    let mut sink = StdoutSink::new(
        io::BufWriter::with_capacity(256 * 1024, stdout),
        args.format,
    );
    let stats = match scan::scan_inputs(&engine, &inputs, &opts, &mut sink, &mut |_| {}) {
        Ok(stats) => stats,
        Err(scan::ScanError::Output(e)) if e.kind() == io::ErrorKind::BrokenPipe => {
            return Ok(ExitCode::SUCCESS);
        }
        Err(e) => return Err(e.into()),
    };
    for e in &stats.errors {
        eprintln!("faultline: cannot read {e}");
    }
    for p in &stats.panics {
        eprintln!("faultline: {p}");
    }
    if stats.truncated_lines > 0 {
        eprintln!(
            "faultline: {} line(s) longer than {} bytes were cut (marked \"truncated\")",
            stats.truncated_lines, args.max_line_bytes
        );
    }
    let failed = !errors.is_empty() || !stats.errors.is_empty() || stats.skipped_chunks() > 0;
    // The process ends next: freeing the KB and its database piece by piece (hundreds of
    // thousands of allocations, 2% of a 300 MB scan) would only delay the exit.
    std::mem::forget(engine);
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn run_explain(line: &str, kb: &KbArg, format: Format, all: bool) -> Result<ExitCode> {
    let engine = Engine::new(kb.load()?)?;
    let events = crate::explain::explain(&engine, line)?;
    let mut buf = Vec::new();
    if events.is_empty() {
        writeln!(buf, "no entry matches this line")?;
    }
    for e in &events {
        match format {
            Format::Json => {
                serde_json::to_writer_pretty(&mut buf, &crate::explain::to_json(&engine.kb, e)?)?;
                writeln!(buf)?;
            }
            Format::Text => crate::explain::write_text(&mut buf, &engine.kb, e, all)?,
        }
    }
    write_stdout(&buf)?;
    Ok(ExitCode::SUCCESS)
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?)
}

/// Logs to stderr; `FAULTLINE_LOG` (an `EnvFilter` directive) overrides `default`.
fn init_logs(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("FAULTLINE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(io::stderr)
        .try_init();
}

fn run_kafka(args: crate::config::RunArgs) -> Result<ExitCode> {
    let config = crate::config::Config::load(args.config.as_deref(), &args.overrides)?;
    if args.check_config {
        let loaded = crate::pipeline::load_kb(&config)?;
        let kb = &loaded.engine.kb;
        let text = format!(
            "{}# knowledge base: {}, {} entries, version {}\n# configuration OK\n",
            config.redacted(),
            kb.origin,
            kb.entries.len(),
            kb.version
        );
        write_stdout(text.as_bytes())?;
        return Ok(ExitCode::SUCCESS);
    }
    init_logs("info");
    tracing::debug!(config = %config.redacted(), "effective configuration");
    let report = runtime()?.block_on(crate::pipeline::run(config))?;
    let s = report.stats;
    eprintln!(
        "faultline: stopped cleanly: {} records, {} events, {} dead letters, KB {}",
        s.records, s.events_acked, s.dead_letters_acked, s.kb.version
    );
    Ok(ExitCode::SUCCESS)
}

fn run_demo(args: crate::demo::DemoArgs) -> Result<ExitCode> {
    init_logs("warn");
    runtime()?.block_on(crate::demo::run(args))?;
    Ok(ExitCode::SUCCESS)
}
