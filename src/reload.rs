//! Knowledge-base hot reload for `faultline run`: SIGHUP, or a change in the KB directory.
//!
//! The directory is polled (its `*.toml` files' names, sizes and modification times) rather
//! than watched with inotify: it costs a `stat` per file every few seconds and works the same
//! on a ConfigMap volume, NFS or a local disk. A change (or SIGHUP) loads, checks (`kb check`:
//! every example in both engines) and compiles the new KB on a blocking thread; only a KB that
//! passes replaces the running one, through a `watch` channel that the matcher reads between
//! batches, so a batch is matched by one KB and every event names the version that produced
//! it. A failed reload keeps the old KB, is logged with its reason and counted. A directory
//! whose exact contents this binary already checked (remembered in the compiled-database cache
//! directory) is not checked again: a restarted member, or a reload back to a KB seen before,
//! starts in well under a second instead of the check's tens of seconds of CPU. The check runs
//! in a child process (`faultline kb check`), so its few hundred megabytes of regexes and
//! caches never stay in the member's RSS.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use crate::engine::Engine;
use crate::enrich::Enricher;
use crate::kb::{self, KnowledgeBase};
use crate::kbtool;
use crate::matcher::MatchError;
pub use crate::runtime::health::ReloadStatus;
use crate::section::{Errors, Printer};

/// A compiled KB and its enricher, swapped as a whole.
#[derive(Debug)]
pub struct Loaded {
    /// The compiled KB the matcher scans with.
    pub engine: Engine,
    /// The same KB's diagnoses, for the events of its matches.
    pub enricher: Enricher,
}

impl Loaded {
    /// Compiles `kb` (with the unknown-line gate in its database: the match stage finds
    /// unknown lines in the KB's own pass) and builds its enricher.
    pub fn new(kb: KnowledgeBase) -> Result<Self, ReloadError> {
        let engine = crate::unknown::find::engine(kb, false).map_err(ReloadError::Compile)?;
        let enricher = Enricher::new(Arc::clone(&engine.kb));
        Ok(Loaded { engine, enricher })
    }

    /// [`Loaded::new`] keeping the training-progress entries ([`Engine::with_progress`]).
    pub fn with_progress_lines(kb: KnowledgeBase) -> Result<Self, ReloadError> {
        let engine = Engine::with_progress(kb).map_err(ReloadError::Compile)?;
        let enricher = Enricher::new(Arc::clone(&engine.kb));
        Ok(Loaded { engine, enricher })
    }

    /// The KB's content hash, named by every event it produced.
    pub fn version(&self) -> &str {
        &self.engine.kb.version
    }
}

/// Why a KB could not be (re)loaded.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The KB could not be read, holds no entry or does not validate.
    #[error(transparent)]
    Kb(#[from] kb::KbError),
    /// The directory's KB fails `kb check` (validation, or an example in either engine).
    #[error("{origin} fails `kb check` with {} error(s):\n{}", .errors.len(), .errors.join("\n"))]
    Check {
        /// The KB's directory.
        origin: String,
        /// The check's errors, one rendered problem each.
        errors: Vec<String>,
    },
    /// The KB's patterns do not compile into a Hyperscan database.
    #[error("compiling the knowledge base: {0}")]
    Compile(MatchError),
}

/// Where the KB comes from, and whether its training-progress entries are compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KbSource {
    /// A directory of `*.toml` entries, polled for changes; `None`: built into the binary,
    /// never changes.
    pub dir: Option<PathBuf>,
    /// Match the training-progress lines (KB category `progress`, one event per step) too:
    /// what the live report's ETTR and GPU-hours lost are measured with (`kb.progress_lines`).
    pub progress_lines: bool,
}

/// Where a passed `kb check` of exactly `files` is remembered: a file named after a hash of
/// every path and text and of this binary's version, in the compiled-database cache directory
/// ([`crate::cache::dir`]); `None` when the cache is off.
pub fn checked_marker(files: &[kb::KbFile]) -> Option<PathBuf> {
    let dir = crate::cache::dir()?;
    let mut bytes = Vec::new();
    bytes.extend_from_slice(env!("CARGO_PKG_VERSION").as_bytes());
    bytes.extend_from_slice(CHECK_RULES.as_bytes());
    for (path, text) in files {
        bytes.extend_from_slice(path.to_string_lossy().as_bytes());
        bytes.push(0);
        bytes.extend_from_slice(text.as_bytes());
        bytes.push(0);
    }
    Some(dir.join(format!(
        "kb-checked-{:016x}",
        crate::record::fnv1a64(&bytes)
    )))
}

/// Remembers a passed check at `marker` ([`checked_marker`]). Best effort: a cache that cannot
/// be written only costs the next check.
pub fn record_pass(marker: &Path) {
    let _ = crate::cache::write_whole(marker, b"passed kb check\n");
}

/// `kb check` of `dir` in a child process of this same binary: the check builds a regex for
/// every pattern and runs every example in both engines, which takes a few hundred megabytes
/// that the allocator keeps once freed; in a child they go back to the system when it exits,
/// and the running member's RSS stays its own working set. The child remembers its pass in the
/// cache ([`record_pass`]), and the pass counts only when it is remembered under `marker`, the
/// hash of the contents this process read: a directory that changed between the two reads is
/// checked again at the next reload. `None` when no child can do it (this is not the
/// `faultline` binary, as in tests, or it cannot be started): the caller checks in-process.
fn check_in_child(dir: &Path, marker: &Path) -> Option<Result<(), Vec<String>>> {
    let exe = std::env::current_exe().ok()?;
    if exe.file_stem().is_none_or(|s| s != "faultline") {
        return None;
    }
    let out = std::process::Command::new(exe)
        .args(["kb", "check", "--record-pass"])
        .arg(dir)
        .stdin(std::process::Stdio::null())
        .output()
        .ok()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    match out.status.code() {
        Some(0) if marker.is_file() => Some(Ok(())),
        Some(0) => Some(Err(vec![
            "  the directory changed while it was checked: it is checked again at the next \
             reload"
                .to_string(),
        ])),
        Some(1) => {
            let origin = format!("{}/", dir.display());
            let mut errors: Vec<String> = stderr
                .lines()
                .filter_map(|l| l.strip_prefix("error: "))
                .map(|p| format!("  {}", p.strip_prefix(&origin).unwrap_or(p)))
                .collect();
            if errors.is_empty() {
                errors.push(format!("  {}", stderr.trim()));
            }
            Some(Err(errors))
        }
        // Killed, or failed before checking: check in-process, which says why.
        _ => None,
    }
}

/// `kb check` of `files` in this process, remembering a pass at `marker` when there is one.
fn check_in_process(
    files: &[kb::KbFile],
    origin: &str,
    marker: Option<&Path>,
) -> Result<(), Vec<String>> {
    let report = kbtool::check::check(files.to_vec(), origin);
    if !report.ok() {
        return Err(report.errors.iter().map(|p| format!("  {p}")).collect());
    }
    if let Some(m) = marker {
        record_pass(m);
    }
    Ok(())
}

/// Changes whenever `kb check` gains or changes a rule, so that a KB checked by older rules is
/// checked again.
const CHECK_RULES: &str = "2026-12-01 commands, tags";

impl KbSource {
    /// The directory if one is given, else the embedded KB; progress lines left out.
    pub fn from_dir(dir: Option<&Path>) -> Self {
        KbSource {
            dir: dir.map(Path::to_path_buf),
            progress_lines: false,
        }
    }

    /// What `[kb]` says.
    pub fn from_config(kb: &KbConfig) -> Self {
        KbSource {
            progress_lines: kb.progress_lines,
            ..KbSource::from_dir(kb.dir.as_deref())
        }
    }

    fn compile(&self, kb: KnowledgeBase) -> Result<Loaded, ReloadError> {
        match self.progress_lines {
            true => Loaded::with_progress_lines(kb),
            false => Loaded::new(kb),
        }
    }

    /// Loads, checks and compiles. Blocking: call it from a blocking thread.
    pub fn load(&self) -> Result<Loaded, ReloadError> {
        match &self.dir {
            None => self.compile(KnowledgeBase::embedded()?),
            Some(dir) => {
                let files = kb::read_dir(dir)?;
                if files.is_empty() {
                    return Err(kb::KbError::Empty(dir.clone()).into());
                }
                let origin = dir.display().to_string();
                // The check runs every example in both engines (tens of seconds of CPU for the
                // shipped KB), in a child process where it can: a directory whose exact
                // contents this binary already checked, at a start or a reload before, is not
                // checked again.
                let marker = checked_marker(&files);
                if !marker.as_ref().is_some_and(|m| m.is_file()) {
                    let checked = marker
                        .as_deref()
                        .and_then(|m| check_in_child(dir, m))
                        .unwrap_or_else(|| check_in_process(&files, &origin, marker.as_deref()));
                    if let Err(errors) = checked {
                        return Err(ReloadError::Check { origin, errors });
                    }
                }
                self.compile(KnowledgeBase::from_files(files, &origin)?)
            }
        }
    }

    /// A cheap fingerprint of the directory: changes when a `*.toml` file is added, removed,
    /// resized or touched.
    pub fn fingerprint(&self) -> Option<u64> {
        let dir = self.dir.as_ref()?;
        let mut entries = Vec::new();
        let mut stack = vec![dir.clone()];
        while let Some(d) = stack.pop() {
            let Ok(read) = std::fs::read_dir(&d) else {
                continue;
            };
            for item in read.flatten() {
                let path = item.path();
                let Ok(meta) = item.metadata() else { continue };
                if meta.is_dir() {
                    stack.push(path);
                } else if path.extension().is_some_and(|e| e == "toml") {
                    entries.push((path, meta.len(), meta.modified().ok()));
                }
            }
        }
        entries.sort();
        let mut h = DefaultHasher::new();
        entries.hash(&mut h);
        Some(h.finish())
    }
}

/// `[kb]` as written.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawKb {
    /// The KB directory, watched for changes; the built-in KB when absent.
    pub dir: Option<PathBuf>,
    /// How often the directory is checked for changes; 0 disables.
    pub watch_interval_ms: Option<u64>,
    /// Also match training-progress lines (one `info` event per step) for the live report.
    pub progress_lines: Option<bool>,
}

/// Validated `[kb]`.
#[derive(Debug, Clone)]
pub struct KbConfig {
    /// `None`: the KB built into the binary (never reloaded).
    pub dir: Option<PathBuf>,
    /// `None`: the directory is not watched (SIGHUP still reloads).
    pub watch_interval: Option<Duration>,
    /// Match training-progress lines too (off by default: one event per training step).
    pub progress_lines: bool,
}

impl KbConfig {
    /// Validates `[kb]`, applying defaults.
    pub fn from_raw(raw: RawKb, errors: &mut Errors<'_>) -> KbConfig {
        if raw.dir.as_ref().is_some_and(|d| d.as_os_str().is_empty()) {
            errors.push("dir", "must not be empty");
        }
        let watch_ms = raw.watch_interval_ms.unwrap_or(3_000);
        KbConfig {
            dir: raw.dir,
            watch_interval: (watch_ms > 0).then(|| Duration::from_millis(watch_ms)),
            progress_lines: raw.progress_lines.unwrap_or(false),
        }
    }

    /// The effective `[kb]` table.
    pub fn print(&self, p: &mut Printer) {
        p.table("kb");
        match &self.dir {
            Some(d) => p.value("dir", d.display().to_string()),
            None => p.line("# dir: the built-in KB"),
        }
        p.number(
            "watch_interval_ms",
            self.watch_interval.map_or(0, |d| d.as_millis()),
        );
        p.number("progress_lines", self.progress_lines);
    }
}

/// Reloads on every `trigger` message (SIGHUP) and, when `interval` is set, whenever the
/// directory's fingerprint changes. Runs until `stop` turns true.
pub async fn watch(
    source: KbSource,
    interval: Option<Duration>,
    tx: watch::Sender<Arc<Loaded>>,
    mut trigger: mpsc::Receiver<()>,
    status: Arc<std::sync::Mutex<ReloadStatus>>,
    metrics: Arc<crate::metrics::Metrics>,
    mut stop: watch::Receiver<bool>,
) {
    use crate::metrics::ReloadResult;
    let mut seen = source.fingerprint();
    let mut ticker = tokio::time::interval(interval.unwrap_or(Duration::from_secs(3600)));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker.tick().await;
    loop {
        let forced = tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            t = trigger.recv() => match t {
                Some(()) => true,
                None => return,
            },
            _ = ticker.tick(), if interval.is_some() => false,
        };
        let now = source.fingerprint();
        if !forced && now == seen {
            continue;
        }
        seen = now;
        let s = source.clone();
        let result = tokio::task::spawn_blocking(move || s.load()).await;
        let mut st = status.lock().unwrap_or_else(|p| p.into_inner());
        match result {
            Ok(Ok(loaded)) => {
                if loaded.version() == st.version {
                    tracing::info!(kb_version = %st.version, "knowledge base unchanged");
                    metrics.kb_reload(ReloadResult::Unchanged);
                    continue;
                }
                metrics.kb_reload(ReloadResult::Success);
                st.reloads += 1;
                st.last_error = None;
                tracing::info!(
                    from = %st.version,
                    to = %loaded.version(),
                    entries = loaded.engine.kb.entries.len(),
                    "knowledge base reloaded"
                );
                st.version = loaded.version().to_string();
                tx.send_replace(Arc::new(loaded));
            }
            Ok(Err(e)) => {
                metrics.kb_reload(ReloadResult::Failure);
                st.failures += 1;
                st.last_error = Some(e.to_string());
                tracing::error!(kb_version = %st.version, error = %e,
                    "knowledge base reload failed; keeping the running one");
            }
            Err(e) => {
                metrics.kb_reload(ReloadResult::Failure);
                st.failures += 1;
                st.last_error = Some(e.to_string());
                tracing::error!(error = %e, "knowledge base reload panicked; keeping the running one");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_lines_are_compiled_only_when_kb_progress_lines_says_so() {
        let progress = |on: bool| -> usize {
            let mut found = Vec::new();
            let mut errors = Errors::new("kb", &mut found);
            let raw = RawKb {
                progress_lines: Some(on),
                ..RawKb::default()
            };
            let kb = KbConfig::from_raw(raw, &mut errors);
            let loaded = KbSource::from_config(&kb).load().expect("loads");
            loaded
                .engine
                .kb
                .entries
                .iter()
                .filter(|e| e.category == crate::kb::PROGRESS_CATEGORY)
                .count()
        };
        assert_eq!(progress(false), 0, "left out by default");
        assert!(progress(true) >= 5, "the training-progress entries");
    }

    #[test]
    fn a_kb_is_checked_again_whenever_a_byte_of_it_changes() {
        let files = |text: &str| vec![(PathBuf::from("a/b.toml"), text.to_string())];
        let (Some(one), Some(same), Some(other)) = (
            checked_marker(&files("id = 1")),
            checked_marker(&files("id = 1")),
            checked_marker(&files("id = 2")),
        ) else {
            return; // no cache directory on this machine: nothing is remembered
        };
        assert_eq!(one, same);
        assert_ne!(one, other);
        let moved = checked_marker(&[(PathBuf::from("a/c.toml"), "id = 1".to_string())]);
        assert_ne!(Some(one), moved, "the path counts too");
    }
}
