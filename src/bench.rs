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

/// A small deterministic generator (xorshift64*), so a corpus is reproducible from its seed.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.max(1))
    }

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

/// The baseline: Hyperscan alone over a file, no line mapping, decoding or enrichment.
/// Returns (bytes, raw hits).
pub fn raw_hyperscan(
    matcher: &crate::matcher::HyperscanMatcher,
    path: &Path,
    mode: RawMode,
) -> Result<(u64, u64), Box<dyn std::error::Error>> {
    use crate::matcher::Matcher;
    use std::io::Read;
    let mut scratch = matcher.scratch()?;
    let mut file = fs::File::open(path)?;
    let mut buf = vec![0u8; 1 << 20];
    let mut hits = Vec::new();
    let (mut bytes, mut total) = (0u64, 0u64);
    loop {
        let n = file.read(&mut buf)?;
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
    Ok((bytes, total))
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn scaled_kb_has_factor_times_the_entries_and_loads() {
        let files = KnowledgeBase::embedded_files();
        let scaled = scale_kb(&files[..5], 3).expect("scales");
        assert_eq!(scaled.len(), 15);
        let kb = KnowledgeBase::from_files(scaled, "scaled").expect("valid");
        assert_eq!(kb.entries.len(), 15);
    }
}
