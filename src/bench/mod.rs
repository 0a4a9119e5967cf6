//! Benchmark inputs: generated corpora and the KB's patterns for peer tools.
//!
//! `faultline bench corpus` writes a log corpus of a given size: healthy lines (the public
//! loghub samples when a directory of them is given, plus synthetic training-job output) with
//! KB examples mixed in at a fixed rate (0.1% by default). `faultline bench patterns` prints
//! every KB pattern, one per line, for `rg -f`. `scripts/bench-scan.sh` runs the comparison.

use std::fs;
use std::io::{self, Write};
use std::path::Path;

use crate::kb::KnowledgeBase;

pub mod fleet;
pub mod latency;
pub mod report;

/// A small deterministic generator (xorshift64*), so a corpus is reproducible from its seed.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed` (0 is read as 1: xorshift needs a non-zero state).
    pub fn new(seed: u64) -> Self {
        Rng(seed.max(1))
    }

    /// The next pseudo-random 64-bit value.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// Healthy lines a training job prints: progress, NCCL INFO start-up, loaders, checkpoints.
pub fn synthetic_healthy_line(rng: &mut Rng, out: &mut Vec<u8>) {
    let rank = rng.below(512);
    let host = rng.below(64);
    let step = rng.below(100_000);
    let line = match rng.below(6) {
        0 => format!(
            "[rank{rank}]: iteration {step:>8}/ 100000 | consumed samples: {:>10} | elapsed time per iteration (ms): {}.{} | learning rate: 3.000E-04 | lm loss: {}.{:06}E+00 | loss scale: 1.0 | grad norm: 0.{} |",
            step * 1024,
            5000 + rng.below(400),
            rng.below(10),
            rng.below(9),
            rng.below(1_000_000),
            rng.below(1000)
        ),
        1 => format!(
            "gpu-node-{host:02}:{}:{} [{}] NCCL INFO Channel {:02}/32 : 0 1 2 3 4 5 6 7",
            20000 + rank,
            20100 + rank,
            rank % 8,
            rng.below(32)
        ),
        2 => format!(
            "{rank}: {{'loss': {}.{:04}, 'grad_norm': 0.{:03}, 'learning_rate': 2e-05, 'epoch': 0.{:02}}}",
            rng.below(3),
            rng.below(10_000),
            rng.below(1000),
            rng.below(100)
        ),
        3 => format!(
            "[2024-11-29 08:{:02}:{:02},{:03}] [INFO] [logging.py:96:log_dist] [Rank {rank}] step={step}, skipped=0, lr=[0.0003], mom=[(0.9, 0.95)]",
            rng.below(60),
            rng.below(60),
            rng.below(1000)
        ),
        4 => format!(
            "Epoch {}: {:>3}%|####      | {step}/200000 [10:02<14:25, 2.00it/s, loss=0.{:03}]",
            rng.below(10),
            rng.below(100),
            rng.below(1000)
        ),
        _ => format!(
            "I1129 08:{:02}:{:02}.{:06} {} torch/distributed/elastic/agent/server/api.py:560] [default] worker group heartbeat ok, rank {rank}",
            rng.below(60),
            rng.below(60),
            rng.below(1_000_000),
            140_000 + rank
        ),
    };
    out.extend_from_slice(line.as_bytes());
    out.push(b'\n');
}

/// Lines of every `*.log` under `dir` (the loghub samples), when it exists.
pub fn background_lines(dir: Option<&Path>) -> io::Result<Vec<Vec<u8>>> {
    let Some(dir) = dir else {
        return Ok(Vec::new());
    };
    let mut lines = Vec::new();
    let mut paths: Vec<_> = fs::read_dir(dir)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    paths.sort();
    for path in paths {
        for line in fs::read(&path)?.split(|&b| b == b'\n') {
            if !line.is_empty() {
                lines.push(line.to_vec());
            }
        }
    }
    Ok(lines)
}

/// Writes about `bytes` of corpus to `out`: background and synthetic healthy lines half and
/// half, and one KB example every `1 / failure_rate` lines. Returns (lines, failure lines).
pub fn write_corpus(
    kb: &KnowledgeBase,
    background: &[Vec<u8>],
    bytes: u64,
    failure_rate: f64,
    seed: u64,
    out: &mut impl Write,
) -> io::Result<(u64, u64)> {
    let mut rng = Rng::new(seed);
    let examples: Vec<&str> = kb
        .entries
        .iter()
        .flat_map(|e| e.examples.iter().map(String::as_str))
        .collect();
    let every = if failure_rate > 0.0 {
        (1.0 / failure_rate).round().max(1.0) as u64
    } else {
        u64::MAX
    };
    let mut written = 0u64;
    let mut lines = 0u64;
    let mut failures = 0u64;
    let mut buf = Vec::with_capacity(1 << 20);
    while written < bytes {
        buf.clear();
        while buf.len() < (1 << 20) && written + (buf.len() as u64) < bytes {
            lines += 1;
            if lines.is_multiple_of(every) && !examples.is_empty() {
                failures += 1;
                buf.extend_from_slice(examples[rng.below(examples.len())].as_bytes());
                buf.push(b'\n');
            } else if !background.is_empty() && rng.below(2) == 0 {
                buf.extend_from_slice(&background[rng.below(background.len())]);
                buf.push(b'\n');
            } else {
                synthetic_healthy_line(&mut rng, &mut buf);
            }
        }
        out.write_all(&buf)?;
        written += buf.len() as u64;
    }
    Ok((lines, failures))
}

/// How the raw baseline calls Hyperscan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RawMode {
    /// One call per 1 MiB block of the file, as read.
    Buffer,
    /// One call per line.
    Line,
}

/// How `faultline bench raw-hyperscan` compiles and times.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct RawOptions {
    /// How Hyperscan is called.
    #[arg(long, value_enum, default_value_t = RawMode::Buffer)]
    pub mode: RawMode,
    /// Scan for each pattern itself, not for its required literals (the database design
    /// before 2026-12-04, kept to compare).
    #[arg(long)]
    pub whole_patterns: bool,
    /// Shortest required literal a pattern is scanned by (shorter: for itself).
    #[arg(long, value_name = "BYTES", default_value_t = crate::matcher::literals::MIN_LEN, conflicts_with = "whole_patterns")]
    pub min_literal: usize,
    /// Scans per measurement; the fastest is reported.
    #[arg(long, default_value_t = 1)]
    pub runs: usize,
    /// Also time the database's parts apart: its required literals alone, its patterns
    /// scanned for themselves alone, and 10 to 1000 of the literals.
    #[arg(long, conflicts_with = "whole_patterns")]
    pub parts: bool,
}

/// `faultline bench raw-hyperscan`: compiles `kb`'s patterns as `scan` does (by their required
/// literals of at least `options.min_literal` bytes, or each pattern whole with
/// `options.whole_patterns`, the design before), scans `file` with [`raw_hyperscan`] and prints
/// what it measured.
pub fn raw_hyperscan_command(
    kb: &KnowledgeBase,
    file: &Path,
    options: &RawOptions,
) -> anyhow::Result<()> {
    use crate::matcher::HyperscanMatcher;
    let RawOptions {
        mode, runs, parts, ..
    } = *options;
    let min_literal = (!options.whole_patterns).then_some(options.min_literal);
    let sources: Vec<&str> = kb.patterns.iter().map(|p| p.source.as_str()).collect();
    let compile = std::time::Instant::now();
    let cache = crate::cache::dir();
    let mut split = None;
    let (matcher, cache_use) = match min_literal {
        None => HyperscanMatcher::compile_cached(&sources, cache.as_deref())?,
        Some(min_len) => {
            let plan = crate::engine::plan(kb, &sources, min_len);
            let (by_literal, literals) = plan.literal_counts();
            eprintln!(
                "{by_literal} of {} patterns scanned by {literals} required literals",
                sources.len()
            );
            if parts {
                split = Some(Parts::of(&plan));
            }
            HyperscanMatcher::compile_plan(plan, cache.as_deref())?
        }
    };
    eprintln!(
        "{} patterns ready in {:.3} s (database cache: {cache_use:?})",
        sources.len(),
        compile.elapsed().as_secs_f64()
    );
    let r = best_raw(&matcher, file, mode, runs)?;
    let (scan, total) = (r.scan.as_secs_f64(), r.total.as_secs_f64());
    println!(
        "{} bytes, {} raw hits, scan {scan:.3} s, {:.1} MB/s; with the file's reads \
         {total:.3} s, {:.1} MB/s",
        r.bytes,
        r.hits,
        r.bytes as f64 / scan / 1e6,
        r.bytes as f64 / total / 1e6
    );
    if let Some(split) = split {
        for (name, expressions) in split.databases() {
            let part = HyperscanMatcher::compile(&expressions)?;
            let r = best_raw(&part, file, mode, runs)?;
            println!(
                "part: {name} ({} expressions): {} raw hits, scan {:.3} s, {:.1} MB/s",
                expressions.len(),
                r.hits,
                r.scan.as_secs_f64(),
                r.bytes as f64 / r.scan.as_secs_f64() / 1e6
            );
        }
    }
    Ok(())
}

/// The best (shortest scan) of `runs` raw scans.
fn best_raw(
    matcher: &crate::matcher::HyperscanMatcher,
    file: &Path,
    mode: RawMode,
    runs: usize,
) -> anyhow::Result<RawScan> {
    let mut best: Option<RawScan> = None;
    for _ in 0..runs.max(1) {
        let r = raw_hyperscan(matcher, file, mode).map_err(|e| anyhow::anyhow!("{e}"))?;
        if best.is_none_or(|b| r.scan < b.scan) {
            best = Some(r);
        }
    }
    best.ok_or_else(|| anyhow::anyhow!("no run"))
}

/// A planned database split into the parts `bench raw-hyperscan --parts` times apart: where
/// Hyperscan's time goes, by the required literals and the patterns scanned for themselves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parts {
    /// The required literals, in plan order.
    pub literals: Vec<String>,
    /// The patterns scanned for themselves.
    pub whole: Vec<String>,
}

impl Parts {
    /// Splits `plan`'s expressions.
    pub fn of(plan: &crate::matcher::literals::Plan) -> Parts {
        let (mut literals, mut whole) = (Vec::new(), Vec::new());
        for (id, e) in plan.expressions.iter().enumerate() {
            if plan.is_literal(id as u32) {
                literals.push(e.clone());
            } else {
                whole.push(e.clone());
            }
        }
        Parts { literals, whole }
    }

    /// The databases to time: the literals alone, the whole patterns alone, the unknown-line
    /// gate's patterns alone and with the rest (the database the default `scan` compiles), and
    /// subsets of the literals (a fixed shuffle, so that each size is a fair sample and every
    /// run the same).
    pub fn databases(&self) -> Vec<(String, Vec<String>)> {
        let gate: Vec<String> = crate::templates::gate::PATTERNS
            .iter()
            .map(|p| p.to_string())
            .collect();
        let with_gate = [&self.literals[..], &self.whole[..], &gate[..]].concat();
        let mut out = vec![
            ("required literals alone".to_string(), self.literals.clone()),
            ("whole patterns alone".to_string(), self.whole.clone()),
            ("the unknown-line gate alone".to_string(), gate),
            (
                "the database with the unknown-line gate (the default scan's)".to_string(),
                with_gate,
            ),
        ];
        let mut shuffled = self.literals.clone();
        let mut rng = Rng::new(7);
        for i in (1..shuffled.len()).rev() {
            shuffled.swap(i, rng.below(i + 1));
        }
        for n in [10, 30, 100, 300, 1000] {
            if n < shuffled.len() {
                out.push((format!("{n} of the literals"), shuffled[..n].to_vec()));
            }
        }
        out.retain(|(_, e)| !e.is_empty());
        out
    }
}

/// What [`raw_hyperscan`] measured.
#[derive(Debug, Clone, Copy)]
pub struct RawScan {
    /// Bytes scanned.
    pub bytes: u64,
    /// Raw hits (pattern, end offset).
    pub hits: u64,
    /// Wall time of the whole loop, reading the file included.
    pub total: std::time::Duration,
    /// The same without the reads: Hyperscan's own time (and the loop's).
    pub scan: std::time::Duration,
}

/// The baseline: Hyperscan alone over a file, no line mapping, decoding or enrichment. Reads
/// are timed apart, so that the scan's own throughput is not the page cache's.
pub fn raw_hyperscan(
    matcher: &crate::matcher::HyperscanMatcher,
    path: &Path,
    mode: RawMode,
) -> Result<RawScan, Box<dyn std::error::Error>> {
    use crate::matcher::Matcher;
    use std::io::Read;
    let mut scratch = matcher.scratch()?;
    let mut file = fs::File::open(path)?;
    let mut buf = vec![0u8; 1 << 20];
    let mut hits = Vec::new();
    let (mut bytes, mut total) = (0u64, 0u64);
    let start = std::time::Instant::now();
    let mut reading = std::time::Duration::ZERO;
    loop {
        let read_at = std::time::Instant::now();
        let n = file.read(&mut buf)?;
        reading += read_at.elapsed();
        if n == 0 {
            break;
        }
        bytes += n as u64;
        match mode {
            RawMode::Buffer => matcher.find(&mut scratch, &buf[..n], &mut hits)?,
            RawMode::Line => {
                for line in buf[..n].split(|&b| b == b'\n') {
                    matcher.find(&mut scratch, line, &mut hits)?;
                }
            }
        }
        total += hits.len() as u64;
        hits.clear();
    }
    let elapsed = start.elapsed();
    Ok(RawScan {
        bytes,
        hits: total,
        total: elapsed,
        scan: elapsed.saturating_sub(reading),
    })
}

/// `faultline bench patterns --per-entry` and its options.
#[derive(Debug, Clone, clap::Args)]
pub struct PerEntryArgs {
    /// Rank the entries by scan cost: each entry's patterns alone in a Hyperscan database,
    /// timed over a corpus; prints entry, ns/MB, MB/s and share of the total.
    #[arg(long)]
    pub per_entry: bool,
    /// The corpus to scan (default: one generated as `bench corpus` does, --size-mb large).
    #[arg(long, value_name = "FILE", requires = "per_entry")]
    pub corpus: Option<std::path::PathBuf>,
    /// Directory of `*.log` files to mix into the generated corpus (the loghub samples).
    #[arg(
        long,
        value_name = "DIR",
        requires = "per_entry",
        conflicts_with = "corpus"
    )]
    pub background: Option<std::path::PathBuf>,
    /// Size of the generated corpus in MiB.
    #[arg(long, default_value_t = 32, requires = "per_entry")]
    pub size_mb: u64,
    /// Runs per measurement; the best is kept.
    #[arg(long, default_value_t = 3, requires = "per_entry")]
    pub runs: usize,
    /// Entries printed, most expensive first (0: all).
    #[arg(long, default_value_t = 30, requires = "per_entry")]
    pub top: usize,
    /// Print the whole ranking as JSON.
    #[arg(long, requires = "per_entry")]
    pub json: bool,
}

/// Runs `bench patterns --per-entry`: reads or generates the corpus, ranks the entries and
/// renders the ranking.
pub fn per_entry(
    kb: &KnowledgeBase,
    args: &PerEntryArgs,
) -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
    let corpus = match &args.corpus {
        Some(path) => fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?,
        None => {
            let background = background_lines(args.background.as_deref())?;
            let mut out = Vec::new();
            write_corpus(kb, &background, args.size_mb << 20, 0.001, 42, &mut out)?;
            out
        }
    };
    let costs = entry_costs(kb, &corpus, args.runs)?;
    Ok(if args.json {
        serde_json::to_string_pretty(&costs)? + "\n"
    } else {
        render_entry_costs(&costs, args.top)
    })
}

/// What one entry's patterns cost alone: `faultline bench patterns --per-entry`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct EntryCost {
    /// The entry's id.
    pub id: String,
    /// Its patterns.
    pub patterns: usize,
    /// Raw hits over the corpus.
    pub hits: u64,
    /// Scan time of a database of its patterns alone, in nanoseconds per MB (10^6 bytes) of
    /// corpus, best of the runs.
    pub ns_per_mb: f64,
    /// The same as throughput, in MB/s.
    pub mb_per_s: f64,
    /// `ns_per_mb` above the floor: a database of one literal that never occurs.
    pub excess_ns_per_mb: f64,
    /// Its share of the sum of all entries' excess costs.
    pub share: f64,
    /// Wall milliseconds to compile a database of its patterns alone.
    pub compile_ms: f64,
}

/// The per-entry ranking and what it is relative to.
#[derive(Debug, Clone, serde::Serialize)]
pub struct EntryCosts {
    /// Corpus bytes scanned per run.
    pub bytes: u64,
    /// Runs per measurement (the best is kept).
    pub runs: usize,
    /// The floor: one literal that never occurs, in ns/MB.
    pub floor_ns_per_mb: f64,
    /// The whole KB in the database `scan` uses (its patterns' required literals,
    /// [`crate::engine::plan`]), in ns/MB: less than the sum of the entries, since Hyperscan
    /// shares its literal matching between patterns.
    pub all_ns_per_mb: f64,
    /// Wall milliseconds to compile that database (no cache). The whole patterns of a KB this
    /// size take Hyperscan minutes, which is why `scan` never compiles them.
    pub all_compile_ms: f64,
    /// Every entry, most expensive first.
    pub entries: Vec<EntryCost>,
}

/// A literal no log contains: the floor of a Hyperscan scan.
const FLOOR_PATTERN: &str = "zq9xk4wvQ7faultline-floor";

/// Times each entry's patterns alone in a Hyperscan database of their own over `corpus`
/// (whole 1 MiB buffers, one core, best of `runs`), and ranks the entries by cost.
pub fn entry_costs(
    kb: &KnowledgeBase,
    corpus: &[u8],
    runs: usize,
) -> Result<EntryCosts, crate::matcher::MatchError> {
    use crate::matcher::{HyperscanMatcher, Matcher};
    let runs = runs.max(1);
    let mb = corpus.len().max(1) as f64 / 1e6;
    let time = |m: &HyperscanMatcher| -> Result<(f64, u64), crate::matcher::MatchError> {
        let mut scratch = m.scratch()?;
        let mut hits = Vec::new();
        let (mut best, mut total) = (f64::INFINITY, 0u64);
        for _ in 0..runs {
            total = 0;
            let start = std::time::Instant::now();
            for block in corpus.chunks(1 << 20) {
                m.find(&mut scratch, block, &mut hits)?;
                total += hits.len() as u64;
                hits.clear();
            }
            best = best.min(start.elapsed().as_secs_f64());
        }
        Ok((best * 1e9 / mb, total))
    };
    let (floor, _) = time(&HyperscanMatcher::compile(&[FLOOR_PATTERN])?)?;
    let compile =
        |sources: &[&str]| -> Result<(HyperscanMatcher, f64), crate::matcher::MatchError> {
            let start = std::time::Instant::now();
            let m = HyperscanMatcher::compile(sources)?;
            Ok((m, start.elapsed().as_secs_f64() * 1e3))
        };
    let all: Vec<&str> = kb.patterns.iter().map(|p| p.source.as_str()).collect();
    let start = std::time::Instant::now();
    let plan = crate::engine::plan(kb, &all, crate::matcher::literals::MIN_LEN);
    let (all_db, _) = HyperscanMatcher::compile_plan(plan, None)?;
    let all_compile_ms = start.elapsed().as_secs_f64() * 1e3;
    let (all_ns, _) = time(&all_db)?;
    let mut entries = Vec::with_capacity(kb.entries.len());
    for (e, entry) in kb.entries.iter().enumerate() {
        let sources: Vec<&str> = kb
            .patterns
            .iter()
            .filter(|p| p.entry == e)
            .map(|p| p.source.as_str())
            .collect();
        let (db, compile_ms) = compile(&sources)?;
        let (ns, hits) = time(&db)?;
        entries.push(EntryCost {
            id: entry.id.clone(),
            patterns: sources.len(),
            hits,
            ns_per_mb: ns,
            mb_per_s: 1e9 / ns,
            excess_ns_per_mb: (ns - floor).max(0.0),
            share: 0.0,
            compile_ms,
        });
    }
    let sum: f64 = entries.iter().map(|c| c.excess_ns_per_mb).sum();
    for c in &mut entries {
        c.share = if sum > 0.0 {
            c.excess_ns_per_mb / sum
        } else {
            0.0
        };
    }
    entries.sort_by(|a, b| b.excess_ns_per_mb.total_cmp(&a.excess_ns_per_mb));
    Ok(EntryCosts {
        bytes: corpus.len() as u64,
        runs,
        floor_ns_per_mb: floor,
        all_ns_per_mb: all_ns,
        all_compile_ms,
        entries,
    })
}

/// The ranking as a table for people: the `top` most expensive entries (0: all).
pub fn render_entry_costs(c: &EntryCosts, top: usize) -> String {
    let mut out = format!(
        "{:.1} MB scanned, best of {}; floor (one absent literal) {:.0} ns/MB ({:.0} MB/s); \
         whole KB as scan compiles it {:.0} ns/MB ({:.0} MB/s), compiled in {:.0} ms\n\n{:<4} \
         {:<44} {:>4} {:>9} {:>9} {:>9} {:>7} {:>9} {:>10}\n",
        c.bytes as f64 / 1e6,
        c.runs,
        c.floor_ns_per_mb,
        1e9 / c.floor_ns_per_mb,
        c.all_ns_per_mb,
        1e9 / c.all_ns_per_mb,
        c.all_compile_ms,
        "rank",
        "entry",
        "pats",
        "ns/MB",
        "MB/s",
        "excess",
        "share",
        "hits",
        "compile ms"
    );
    let n = if top == 0 { c.entries.len() } else { top };
    for (i, e) in c.entries.iter().take(n).enumerate() {
        out.push_str(&format!(
            "{:<4} {:<44} {:>4} {:>9.0} {:>9.0} {:>9.0} {:>6.1}% {:>9} {:>10.1}\n",
            i + 1,
            e.id,
            e.patterns,
            e.ns_per_mb,
            e.mb_per_s,
            e.excess_ns_per_mb,
            e.share * 100.0,
            e.hits,
            e.compile_ms
        ));
    }
    let mut slow: Vec<&EntryCost> = c.entries.iter().collect();
    slow.sort_by(|a, b| b.compile_ms.total_cmp(&a.compile_ms));
    out.push_str("\nslowest to compile (ms alone):");
    for e in slow.iter().take(n.min(10)) {
        out.push_str(&format!(" {} {:.0};", e.id, e.compile_ms));
    }
    out.push('\n');
    out
}

/// A KB `factor` times the size of `files`: each entry plus `factor - 1` copies whose patterns
/// and examples start with a literal of their own, so the matcher has `factor` times as many
/// distinct signatures to look for. Returns (relative path, TOML text) pairs.
pub fn scale_kb(
    files: &[crate::kb::KbFile],
    factor: usize,
) -> Result<Vec<crate::kb::KbFile>, String> {
    let mut out = Vec::new();
    for (path, text) in files {
        out.push((path.clone(), text.clone()));
        let spec: crate::kb::EntrySpec =
            toml::from_str(text).map_err(|e| format!("{}: {e}", path.display()))?;
        for copy in 1..factor {
            let mut s = spec.clone();
            let tag = format!("zq{copy}k ");
            s.id = format!("{}-x{copy}", spec.id);
            s.patterns = s.patterns.iter().map(|p| format!("{tag}{p}")).collect();
            s.examples = s.examples.iter().map(|e| format!("{tag}{e}")).collect();
            let file = format!("{}.toml", s.id);
            out.push((file.into(), toml::to_string(&s).map_err(|e| e.to_string())?));
        }
    }
    Ok(out)
}

/// What `faultline bench incidents` measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct IncidentBench {
    /// Jobs streamed through the correlator.
    pub jobs: u64,
    /// Match events observed: each job's root and its cascades.
    pub events: u64,
    /// Incident changes the correlator emitted.
    pub changes: u64,
    /// Incidents open at the end, bounded by `max_open_incidents`.
    pub open_incidents: usize,
    /// Jobs remembered at the end, bounded by `max_jobs`.
    pub jobs_tracked: usize,
    /// Incidents opened.
    pub opened: u64,
    /// Incidents resolved, evictions included.
    pub resolved: u64,
    /// Open incidents resolved to respect `max_open_incidents` or `max_jobs`.
    pub evicted_incidents: u64,
    /// Jobs forgotten to respect `max_jobs`.
    pub evicted_jobs: u64,
    /// Wall-clock time of the run, in seconds.
    pub seconds: f64,
    /// Peak resident set size of the process (`VmHWM`), in MiB; `None` off Linux.
    pub peak_rss_mib: Option<f64>,
    /// Resident set size at the end (`VmRSS`), in MiB; `None` off Linux.
    pub rss_mib: Option<f64>,
}

/// Streams `jobs` distinct jobs through a [`crate::incident::Correlator`] with the service's
/// default caps: each job an Xid 79 root on one of 4,096 hosts and `cascades` NCCL timeouts of
/// distinct ranks, jobs `step_ms` of log time apart. Measures the process's peak RSS: the
/// correlator's state is all it holds.
pub fn incidents(
    jobs: u64,
    cascades: u32,
    step_ms: i64,
) -> Result<IncidentBench, crate::incident::IncidentConfigError> {
    use crate::incident::{Correlator, IncidentConfig};

    let templates = Templates::new();
    let started = std::time::Instant::now();
    let mut c = Correlator::new(IncidentConfig::default())?;
    let mut out = Vec::new();
    let (mut events, mut changes) = (0u64, 0u64);
    let mut job = Vec::new();
    for j in 0..jobs {
        templates.job(j, cascades, step_ms, &mut job);
        for e in job.drain(..) {
            c.observe(&e, &mut out);
            events += 1;
        }
        changes += out.len() as u64;
        out.clear();
    }
    let s = c.stats().clone();
    Ok(IncidentBench {
        jobs,
        events,
        changes,
        open_incidents: c.open_incidents(),
        jobs_tracked: c.jobs_tracked(),
        opened: s.opened,
        resolved: s.resolved,
        evicted_incidents: s.evicted_incidents,
        evicted_jobs: s.evicted_jobs,
        seconds: started.elapsed().as_secs_f64(),
        peak_rss_mib: proc_status_mib("VmHWM"),
        rss_mib: proc_status_mib("VmRSS"),
    })
}

/// The match events of a benchmark job: an Xid 79 root on one of 4,096 hosts and NCCL timeouts
/// of distinct ranks a second later.
pub struct Templates {
    xid: crate::enrich::MatchEvent,
    timeout: crate::enrich::MatchEvent,
}

impl Default for Templates {
    fn default() -> Self {
        Self::new()
    }
}

impl Templates {
    /// The two templates.
    pub fn new() -> Self {
        use crate::enrich::{Diagnosis, MatchEvent, SCHEMA_VERSION};
        use crate::kb::{Role, Severity};
        use crate::record::Provenance;
        use std::collections::BTreeMap;
        use std::sync::Arc;

        let diagnosis = |title: &str| {
            Arc::new(Diagnosis {
                title: title.into(),
                root_cause: "A benchmark diagnosis of typical length: the GPU fell off the bus \
                             and the collective it was part of timed out on every other rank."
                    .into(),
                verification: "ai_generated".into(),
                ..Default::default()
            })
        };
        let template = |code: &str, role: Role, category: &str, line: &str| MatchEvent {
            kind: "match",
            schema_version: SCHEMA_VERSION,
            kb_id: format!("bench/{}", code.to_ascii_lowercase()),
            error_code: code.into(),
            domain: "bench".into(),
            category: category.into(),
            role,
            severity: Severity::Critical,
            job_id: String::new(),
            rank: None,
            host: None,
            pod: None,
            timestamp: None,
            source: Provenance::Kafka {
                topic: "fleet.logs".into(),
                partition: 0,
                offset: 0,
                line: 1,
            },
            line: line.into(),
            truncated: false,
            captures: BTreeMap::new(),
            kb_version: "bench".into(),
            diagnosis: diagnosis(code),
            scope: crate::enrich::Scope::Job,
            also: Vec::new(),
            cluster: None,
        };
        let mut xid = template(
            "XID_79",
            Role::Root,
            "gpu_hardware",
            "kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=48213, name=python, GPU has fallen off \
             the bus.",
        );
        xid.captures.insert("gpu".into(), "0000:3b:00".into());
        let mut timeout = template(
            "NCCL_TIMEOUT",
            Role::Cascade,
            "collective_timeout",
            "[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4711, \
             OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600081 \
             milliseconds before timing out.",
        );
        timeout
            .captures
            .insert("elapsed_ms".into(), "600081".into());
        Templates { xid, timeout }
    }

    /// Job `j`'s events (`step_ms` of log time after job `j - 1`'s) appended to `out`: its
    /// root, then `cascades` timeouts.
    pub fn job(
        &self,
        j: u64,
        cascades: u32,
        step_ms: i64,
        out: &mut Vec<crate::enrich::MatchEvent>,
    ) {
        let t0: i64 = 1_733_000_000_000;
        let job = format!("bench-job-{j:08}");
        let t = t0 + j as i64 * step_ms;
        let mut e = self.xid.clone();
        e.job_id.clone_from(&job);
        e.host = Some(format!("node-{:04}", j % 4096));
        e.timestamp = Some(crate::time::rfc3339_from_unix_nanos(t as u128 * 1_000_000));
        out.push(e);
        for r in 0..cascades {
            let mut e = self.timeout.clone();
            e.job_id.clone_from(&job);
            e.rank = Some(r);
            e.host = Some(format!("node-{:04}", (j + u64::from(r) / 8) % 4096));
            e.timestamp = Some(crate::time::rfc3339_from_unix_nanos(
                (t + 1_000) as u128 * 1_000_000,
            ));
            out.push(e);
        }
    }
}

/// A `kB` field of `/proc/self/status`, in MiB.
pub fn proc_status_mib(field: &str) -> Option<f64> {
    let text = fs::read_to_string("/proc/self/status").ok()?;
    text.lines().find_map(|l| {
        let kb: f64 = l
            .strip_prefix(field)?
            .strip_prefix(':')?
            .trim()
            .strip_suffix("kB")?
            .trim()
            .parse()
            .ok()?;
        Some(kb / 1024.0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_split_the_shipped_plan_and_sample_its_literals() {
        let kb = KnowledgeBase::embedded().expect("kb").without_progress();
        let sources: Vec<&str> = kb.patterns.iter().map(|p| p.source.as_str()).collect();
        let plan = crate::engine::plan(&kb, &sources, crate::matcher::literals::MIN_LEN);
        let parts = Parts::of(&plan);
        let (by_literal, literals) = plan.literal_counts();
        assert_eq!(parts.literals.len(), literals);
        assert_eq!(parts.whole.len(), sources.len() - by_literal);
        assert!(parts.whole.iter().all(|w| sources.contains(&w.as_str())));
        let databases = parts.databases();
        assert_eq!(databases[0].1, parts.literals);
        assert_eq!(databases[1].1, parts.whole);
        let gate = crate::templates::gate::PATTERNS;
        assert_eq!(databases[2].1, gate);
        let both = &databases[3].1;
        assert_eq!(both.len(), plan.expressions.len() + gate.len());
        assert!(
            both.ends_with(&databases[2].1) && plan.expressions.iter().all(|e| both.contains(e))
        );
        let sizes: Vec<usize> = databases[4..].iter().map(|(_, e)| e.len()).collect();
        assert_eq!(sizes, [10, 30, 100, 300, 1000]);
        for (_, sample) in &databases[4..] {
            assert!(sample.iter().all(|l| parts.literals.contains(l)));
            let distinct: std::collections::BTreeSet<&String> = sample.iter().collect();
            assert_eq!(distinct.len(), sample.len(), "a sample repeats no literal");
        }
        assert_eq!(parts.databases(), databases, "the same samples every run");
    }

    #[test]
    fn corpus_is_deterministic_and_sized() {
        let kb = KnowledgeBase::embedded().expect("kb");
        let mut a = Vec::new();
        let mut b = Vec::new();
        let (lines, failures) = write_corpus(&kb, &[], 200_000, 0.01, 7, &mut a).expect("writes");
        write_corpus(&kb, &[], 200_000, 0.01, 7, &mut b).expect("writes");
        assert_eq!(a, b);
        assert!(a.len() as u64 >= 200_000 && a.len() < 202_000);
        assert_eq!(failures, lines / 100);
    }

    #[test]
    fn per_entry_costs_rank_every_entry() {
        let kb = KnowledgeBase::embedded().expect("kb");
        let mut corpus = Vec::new();
        write_corpus(&kb, &[], 300_000, 0.01, 3, &mut corpus).expect("writes");
        let c = entry_costs(&kb, &corpus, 1).expect("compiles");
        assert_eq!(c.entries.len(), kb.entries.len());
        assert!(c
            .entries
            .windows(2)
            .all(|w| w[0].excess_ns_per_mb >= w[1].excess_ns_per_mb));
        let share: f64 = c.entries.iter().map(|e| e.share).sum();
        assert!((share - 1.0).abs() < 1e-6, "shares add up: {share}");
        assert!(c.entries.iter().any(|e| e.hits > 0), "the examples hit");
        let text = render_entry_costs(&c, 5);
        // Header, blank, column names, five entries, blank, the slowest to compile.
        assert_eq!(text.lines().count(), 3 + 5 + 2, "{text}");
        assert!(text.contains(&c.entries[0].id));
        assert!(c.all_compile_ms > 0.0 && c.entries.iter().all(|e| e.compile_ms > 0.0));
        let slowest = c
            .entries
            .iter()
            .max_by(|a, b| a.compile_ms.total_cmp(&b.compile_ms))
            .expect("entries");
        let last = text.lines().last().expect("a last line");
        assert!(
            last.starts_with("slowest to compile") && last.contains(&slowest.id),
            "{last}"
        );
    }

    #[test]
    fn scaled_kb_has_factor_times_the_entries_and_loads() {
        // Five entries that name no other entry (a `supersedes` outside the five would not
        // resolve).
        let files: Vec<_> = KnowledgeBase::embedded_files()
            .into_iter()
            .filter(|(_, text)| !text.contains("supersedes"))
            .take(5)
            .collect();
        let scaled = scale_kb(&files, 3).expect("scales");
        assert_eq!(scaled.len(), 15);
        let kb = KnowledgeBase::from_files(scaled, "scaled").expect("valid");
        assert_eq!(kb.entries.len(), 15);
    }

    #[test]
    fn the_incident_bench_keeps_the_correlator_at_its_caps() {
        let r = incidents(25_000, 2, 100).expect("default config");
        assert_eq!(r.events, 75_000);
        assert_eq!(r.opened, 25_000, "one incident per job");
        assert_eq!(r.open_incidents, 10_000, "max_open_incidents");
        assert_eq!(r.jobs_tracked, 20_000, "max_jobs");
        assert_eq!(r.resolved, r.opened - r.open_incidents as u64);
        assert!(r.evicted_incidents > 0 && r.evicted_jobs == 5_000);
        if cfg!(target_os = "linux") {
            assert!(r.peak_rss_mib.is_some_and(|m| m > 0.0));
        }
    }
}
