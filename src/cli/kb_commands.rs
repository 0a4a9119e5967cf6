//! `faultline kb check` and `kb import`: validate a KB directory, turn seed files into entries.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};

use crate::kb::{self, KnowledgeBase};
use crate::kbtool;

/// Checks `dir` (default `kb/` when present, else the embedded KB); exit 1 on any error. With
/// `record_pass`, a pass is remembered as `run`'s own check remembers it
/// ([`crate::reload::record_pass`]).
pub(super) fn check(
    dir: Option<PathBuf>,
    show_warnings: bool,
    record_pass: bool,
) -> Result<ExitCode> {
    let (files, origin) = match dir {
        Some(dir) => (kb::read_dir(&dir)?, dir.display().to_string()),
        None if Path::new("kb").is_dir() => (kb::read_dir(Path::new("kb"))?, "kb".to_string()),
        None => (KnowledgeBase::embedded_files(), "<embedded>".to_string()),
    };
    if files.is_empty() {
        bail!("{origin} holds no *.toml entries");
    }
    let marker = record_pass
        .then(|| crate::reload::checked_marker(&files))
        .flatten();
    let report = kbtool::check::check(files, &origin);
    if let (true, Some(marker)) = (report.ok(), &marker) {
        crate::reload::record_pass(marker);
    }
    for p in &report.errors {
        eprintln!("error: {origin}/{p}");
    }
    if show_warnings {
        for p in &report.warnings {
            eprintln!("warning: {origin}/{p}");
        }
    }
    eprintln!(
        "{origin}: {} entries, {} patterns, {} examples: {} error(s), {} warning(s)",
        report.entries,
        report.patterns,
        report.examples,
        report.errors.len(),
        report.warnings.len()
    );
    Ok(if report.ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Writes one `<id>.toml` under `out_dir` per seed entry; exit 1 when any file failed.
pub(super) fn import(files: &[PathBuf], out_dir: &Path, force: bool) -> Result<ExitCode> {
    let mut failed = false;
    for path in files {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let specs = if path.extension().is_some_and(|e| e == "json") {
            kbtool::import::from_json(&text)
        } else {
            kbtool::import::from_markdown(&text).map(|s| vec![s])
        };
        let specs = match specs {
            Ok(s) => s,
            Err(e) => {
                eprintln!("faultline: {}: {e}", path.display());
                failed = true;
                continue;
            }
        };
        for spec in specs {
            let target = out_dir.join(format!("{}.toml", spec.id));
            if target.exists() && !force {
                eprintln!(
                    "faultline: {} exists; --force overwrites it",
                    target.display()
                );
                failed = true;
                continue;
            }
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent)?;
            }
            let toml = toml::to_string_pretty(&spec)?;
            std::fs::write(&target, toml)
                .with_context(|| format!("writing {}", target.display()))?;
            eprintln!("wrote {}", target.display());
        }
    }
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
