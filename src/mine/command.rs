//! The two commands over [`super`]: `faultline templates` and `faultline kb suggest`.
//!
//! Their options (clap) and what they do from the command line to the exit code: expand the
//! paths like `scan`, load and compile the KB (`--kb`, else the built-in one; not needed by
//! `templates --all-lines`), mine, print, summarise on stderr. `cli.rs` only dispatches here.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::kb::{KbError, KnowledgeBase};
use crate::matcher::MatchError;
use crate::redact::Redactor;
use crate::sink::stdout::Format;
use crate::source::file;
use crate::templates::MinerConfig;
use crate::unknown::find;

use super::suggest::{self, SuggestError, SuggestOptions};
use super::{mine, write_json, write_text, Filter, MineError, MineOptions, Mining};

/// The healthy corpus `kb suggest` checks drafts against when no `--healthy` is given,
/// relative to the working directory (the repository's).
pub const DEFAULT_HEALTHY: [&str; 2] = ["tests/fixtures/healthy", "tests/corpus/real/healthy"];

/// `faultline templates` options.
#[derive(Debug, clap::Args)]
pub struct TemplatesArgs {
    /// Files, directories or `-` for stdin.
    #[arg(value_name = "PATH", default_value = "-")]
    pub paths: Vec<String>,
    /// Knowledge-base directory; the KB built into the binary when absent.
    #[arg(long, env = "FAULTLINE_KB", value_name = "DIR")]
    pub kb: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Templates shown, most frequent first (0: all).
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub top: usize,
    /// Mine every line: no KB, no error filter. With --format json, print one object per line.
    #[arg(long)]
    pub all_lines: bool,
    /// Live templates kept; the least recently seen is evicted beyond this.
    #[arg(long, value_name = "N", default_value_t = MinerConfig::default().max_templates)]
    pub max_templates: usize,
    /// Print examples as the log has them (by default secrets become `[REDACTED:<kind>]`).
    #[arg(long)]
    pub no_redact: bool,
}

/// `faultline kb suggest` options.
#[derive(Debug, clap::Args)]
pub struct SuggestArgs {
    /// Files, directories or `-` for stdin.
    #[arg(value_name = "PATH", default_value = "-")]
    pub paths: Vec<String>,
    /// Knowledge-base directory; the KB built into the binary when absent.
    #[arg(long, env = "FAULTLINE_KB", value_name = "DIR")]
    pub kb: Option<PathBuf>,
    /// Drafts wanted: the most frequent unknown templates that yield a sound draft.
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub top: usize,
    /// Templates seen fewer times are not drafted.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub min_count: u64,
    /// Write each draft to DIR/draft/SLUG.toml instead of printing them.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Overwrite existing drafts in --out.
    #[arg(long)]
    pub force: bool,
    /// Healthy logs (files or directories, repeatable) that no draft may match (default:
    /// tests/fixtures/healthy and tests/corpus/real/healthy, where they exist).
    #[arg(long, value_name = "PATH")]
    pub healthy: Vec<PathBuf>,
}

/// Why a command failed (an unreadable input is not a failure: it is reported and gives exit
/// code 1).
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// The KB did not load.
    #[error(transparent)]
    Kb(#[from] KbError),
    /// The KB did not compile.
    #[error("compiling the knowledge base: {0}")]
    Compile(#[from] MatchError),
    /// Mining failed.
    #[error(transparent)]
    Mine(#[from] MineError),
    /// Drafting failed.
    #[error(transparent)]
    Suggest(#[from] SuggestError),
    /// A draft would overwrite a file.
    #[error("{0} exists; --force overwrites it")]
    Exists(PathBuf),
    /// Writing the output or a draft failed.
    #[error("writing {what}: {source}")]
    Write {
        /// stdout or the file.
        what: String,
        /// The error.
        source: io::Error,
    },
}

/// Runs `faultline templates`.
pub fn templates(args: &TemplatesArgs) -> Result<ExitCode, CommandError> {
    let (inputs, errors) = file::expand(&args.paths, None);
    let filter = match args.all_lines {
        true => Filter::AllLines,
        false => Filter::UnknownErrors,
    };
    // The KB only tells which lines are known; --all-lines does not need it.
    let engine = match filter {
        Filter::AllLines => None,
        Filter::UnknownErrors => Some(find::engine(load_kb(args.kb.as_deref())?, false)?),
    };
    // --all-lines --format json prints lines, not templates: no samples needed.
    let per_line = args.all_lines && args.format == Format::Json;
    let opts = MineOptions {
        filter,
        miner: MinerConfig {
            max_templates: args.max_templates,
            ..MinerConfig::default()
        },
        per_line,
        samples: usize::from(!per_line),
        ..MineOptions::default()
    };
    let mining = mine(engine.as_ref(), &inputs, &opts)?;
    let mut stdout = io::BufWriter::with_capacity(256 * 1024, io::stdout().lock());
    let written = if per_line {
        mining.write_lines(&mut stdout)
    } else {
        let redactor = (!args.no_redact).then(Redactor::builtin);
        let report = mining.report(redactor.as_deref(), args.top);
        match args.format {
            Format::Json => write_json(&mut stdout, &report),
            Format::Text => write_text(&mut stdout, &report),
        }
    };
    stdout_result(written.and_then(|()| stdout.flush()))?;
    let s = &mining.stats;
    eprintln!(
        "faultline: {} lines, {} known to the KB, {} mined into {} templates ({} evicted)",
        s.lines,
        s.known_lines,
        s.mined,
        mining.miner.len(),
        mining.miner.evicted()
    );
    Ok(input_errors(&errors, &mining))
}

/// Runs `faultline kb suggest`.
pub fn suggest(args: &SuggestArgs) -> Result<ExitCode, CommandError> {
    let (inputs, errors) = file::expand(&args.paths, None);
    let engine = find::engine(load_kb(args.kb.as_deref())?, false)?;
    let opts = MineOptions {
        samples: 8,
        ..MineOptions::default()
    };
    let mining = mine(Some(&engine), &inputs, &opts)?;
    let healthy: Vec<PathBuf> = match args.healthy.is_empty() {
        false => args.healthy.clone(),
        true => DEFAULT_HEALTHY
            .iter()
            .map(PathBuf::from)
            .filter(|p| p.exists())
            .collect(),
    };
    if healthy.is_empty() {
        eprintln!(
            "faultline: no healthy corpus (--healthy PATH): drafts were not checked against one"
        );
    }
    let sopts = SuggestOptions {
        top: args.top,
        min_count: args.min_count,
        healthy,
        inputs: args.paths.clone(),
    };
    let result = suggest::suggest(&mining, &Redactor::builtin(), &sopts)?;
    for note in &result.notes {
        eprintln!("faultline: {note}");
    }
    match &args.out {
        Some(dir) => {
            for d in &result.drafts {
                let target = dir.join(&d.path);
                if target.exists() && !args.force {
                    return Err(CommandError::Exists(target));
                }
                let write = |e| CommandError::Write {
                    what: target.display().to_string(),
                    source: e,
                };
                if let Some(parent) = target.parent() {
                    std::fs::create_dir_all(parent).map_err(write)?;
                }
                std::fs::write(&target, &d.toml).map_err(write)?;
                eprintln!("wrote {} ({} lines)", target.display(), d.count);
            }
        }
        None => {
            let text: Vec<&str> = result.drafts.iter().map(|d| d.toml.as_str()).collect();
            let mut stdout = io::stdout().lock();
            stdout_result(
                stdout
                    .write_all(text.join("\n").as_bytes())
                    .and_then(|()| stdout.flush()),
            )?;
        }
    }
    eprintln!(
        "faultline: {} draft(s) from {} unknown error line(s) in {} template(s)",
        result.drafts.len(),
        mining.stats.mined,
        mining.miner.len()
    );
    Ok(input_errors(&errors, &mining))
}

fn load_kb(dir: Option<&Path>) -> Result<KnowledgeBase, KbError> {
    match dir {
        Some(dir) => KnowledgeBase::load_dir(dir),
        None => KnowledgeBase::embedded(),
    }
}

/// A closed pipe (`| head`) is not an error.
fn stdout_result(r: io::Result<()>) -> Result<(), CommandError> {
    match r {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => Err(CommandError::Write {
            what: "stdout".to_string(),
            source: e,
        }),
        _ => Ok(()),
    }
}

/// Prints the inputs that could not be listed or read; exit code 1 when there were any.
fn input_errors(listing: &[file::InputError], mining: &Mining) -> ExitCode {
    for e in listing {
        eprintln!("faultline: cannot read {e}");
    }
    for e in &mining.stats.errors {
        eprintln!("faultline: cannot read {e}");
    }
    match listing.is_empty() && mining.stats.errors.is_empty() {
        true => ExitCode::SUCCESS,
        false => ExitCode::from(1),
    }
}
