//! Files, directories, `.gz`/`.zst` files and stdin, read as chunks of whole lines.
//!
//! [`ChunkReader`] hands out large buffers that end on a line boundary, so the matcher can scan
//! many lines per call. Memory is bounded whatever the input: a line longer than the limit is
//! cut to the limit (and marked truncated) and the rest of it is skipped.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use crate::engine::ChunkInfo;

/// Default size of one read buffer, and so of one matcher call.
pub const DEFAULT_CHUNK_BYTES: usize = 1 << 20;
/// Default maximum line length; longer lines are cut and marked truncated.
pub const DEFAULT_MAX_LINE_BYTES: usize = 1 << 20;

/// One input to scan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Input {
    /// How it is named in output: the path as given (or found), or `-` for stdin.
    pub name: String,
    /// `None` for stdin.
    pub path: Option<PathBuf>,
    /// The job a raw line of this input belongs to, unless its envelope says otherwise.
    pub job_id: String,
    /// `job_id` was given (`--job-id`), not guessed from the file name: even a node's own
    /// lines (kernel, journald) then belong to that job.
    pub job_given: bool,
    /// Size on disk, when known (for the progress bar).
    pub size: Option<u64>,
}

/// An input that could not be listed or opened.
#[derive(Debug, thiserror::Error)]
#[error("{name}: {source}")]
pub struct InputError {
    /// The input as named in output (path or `-`).
    pub name: String,
    /// The underlying I/O error.
    pub source: io::Error,
}

/// Expands paths (files, directories recursively in name order, `-` for stdin) into inputs.
/// Unreadable paths are returned as errors beside the inputs that could be listed.
pub fn expand(paths: &[String], job_override: Option<&str>) -> (Vec<Input>, Vec<InputError>) {
    let mut inputs = Vec::new();
    let mut errors = Vec::new();
    for name in paths {
        if name == "-" {
            inputs.push(Input {
                name: "-".into(),
                path: None,
                job_id: job_override.unwrap_or("stdin").to_string(),
                job_given: job_override.is_some(),
                size: None,
            });
            continue;
        }
        walk(Path::new(name), job_override, &mut inputs, &mut errors);
    }
    (inputs, errors)
}

fn walk(path: &Path, job: Option<&str>, inputs: &mut Vec<Input>, errors: &mut Vec<InputError>) {
    let error = |source| InputError {
        name: path.display().to_string(),
        source,
    };
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) => return errors.push(error(e)),
    };
    if meta.is_dir() {
        let mut children = match std::fs::read_dir(path) {
            Ok(rd) => rd
                .filter_map(Result::ok)
                .map(|e| e.path())
                .collect::<Vec<_>>(),
            Err(e) => return errors.push(error(e)),
        };
        children.sort();
        for child in children {
            walk(&child, job, inputs, errors);
        }
    } else {
        inputs.push(Input {
            name: path.display().to_string(),
            path: Some(path.to_path_buf()),
            job_id: job.map_or_else(|| job_from_file_name(path), str::to_string),
            job_given: job.is_some(),
            size: Some(meta.len()),
        });
    }
}

/// `logs/job-1234.log.gz` -> `job-1234`: the file name without its log and compression
/// extensions.
pub fn job_from_file_name(path: &Path) -> String {
    let mut name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "unknown".into());
    while let Some((stem, ext)) = name.rsplit_once('.') {
        if stem.is_empty()
            || ![
                "gz", "zst", "log", "txt", "out", "err", "json", "jsonl", "ndjson",
            ]
            .contains(&ext)
        {
            break;
        }
        name = stem.to_string();
    }
    name
}

/// Opens an input, decompressing gzip and zstd by their magic bytes.
pub fn open(input: &Input) -> io::Result<Box<dyn Read + Send>> {
    let raw: Box<dyn Read + Send> = match &input.path {
        None => Box::new(io::stdin()),
        Some(path) => Box::new(File::open(path)?),
    };
    let mut reader = BufReader::with_capacity(64 * 1024, raw);
    let head = reader.fill_buf()?;
    Ok(if head.starts_with(&[0x1f, 0x8b]) {
        Box::new(flate2::read::MultiGzDecoder::new(reader))
    } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        Box::new(zstd::stream::read::Decoder::with_buffer(reader)?)
    } else {
        Box::new(reader)
    })
}

/// Reads whole lines in large chunks with bounded memory.
pub struct ChunkReader<R> {
    reader: R,
    buf: Vec<u8>,
    /// Bytes of `buf` holding data.
    len: usize,
    /// Bytes at the front of `buf` handed out by the last chunk, dropped on the next call.
    consumed: usize,
    max_line: usize,
    /// Discarding the rest of an over-long line until its newline.
    skipping: bool,
    eof: bool,
    next_line: u64,
    /// Lines cut at the limit so far.
    pub truncated_lines: u64,
}

/// A chunk of whole lines and where it starts.
#[derive(Debug)]
pub struct Chunk<'a> {
    /// Whole lines; the last lacks its newline only at the end of the input or when cut.
    pub data: &'a [u8],
    /// Its first line number and whether it is a cut line.
    pub info: ChunkInfo,
}

impl<R: Read> ChunkReader<R> {
    /// Reads `reader` in buffers of `chunk_bytes` (grown to fit one `max_line` line, and at least
    /// 4 KiB); lines longer than `max_line` bytes are cut to it.
    pub fn new(reader: R, chunk_bytes: usize, max_line: usize) -> Self {
        let max_line = max_line.max(1);
        // One byte more than the longest line, so that a line of exactly `max_line` bytes and
        // its newline fit: it is whole, not cut.
        let cap = chunk_bytes.max(max_line + 1).max(4096);
        ChunkReader {
            reader,
            buf: vec![0; cap],
            len: 0,
            consumed: 0,
            max_line,
            skipping: false,
            eof: false,
            next_line: 1,
            truncated_lines: 0,
        }
    }

    /// The caller reports how many lines the last chunk held, so numbering stays exact.
    pub fn advance_lines(&mut self, lines: u64) {
        self.next_line += lines;
    }

    /// The next chunk, or `None` at the end of the input.
    pub fn next_chunk(&mut self) -> io::Result<Option<Chunk<'_>>> {
        if self.consumed > 0 {
            self.buf.copy_within(self.consumed..self.len, 0);
            self.len -= self.consumed;
            self.consumed = 0;
        }
        loop {
            if self.skipping {
                match memchr::memchr(b'\n', &self.buf[..self.len]) {
                    Some(i) => {
                        self.buf.copy_within(i + 1..self.len, 0);
                        self.len -= i + 1;
                        self.skipping = false;
                    }
                    None => self.len = 0,
                }
            }
            if !self.skipping {
                if let Some(last) = memchr::memrchr(b'\n', &self.buf[..self.len]) {
                    // Complete lines, unless the first of them is itself over the limit.
                    let first_end = memchr::memchr(b'\n', &self.buf[..self.len]).unwrap_or(last);
                    if first_end <= self.max_line {
                        let end = self.complete_lines_within_limit(last);
                        self.consumed = end;
                        return Ok(Some(self.chunk(end, false)));
                    }
                }
                if self.len > self.max_line {
                    // One line longer than the limit: hand out its head, skip its tail.
                    self.truncated_lines += 1;
                    let rest_has_newline =
                        memchr::memchr(b'\n', &self.buf[self.max_line..self.len])
                            .map(|i| self.max_line + i);
                    match rest_has_newline {
                        Some(nl) => self.consumed = nl + 1,
                        None => {
                            self.consumed = self.len;
                            self.skipping = true;
                        }
                    }
                    return Ok(Some(self.chunk(self.max_line, true)));
                }
                if self.eof {
                    if self.len == 0 {
                        return Ok(None);
                    }
                    self.consumed = self.len;
                    return Ok(Some(self.chunk(self.len, false)));
                }
            }
            if self.eof {
                return Ok(None);
            }
            let n = loop {
                match self.reader.read(&mut self.buf[self.len..]) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                }
            };
            if n == 0 {
                self.eof = true;
            }
            self.len += n;
        }
    }

    /// The end (exclusive) of the run of complete lines up to `last`, stopping before a line
    /// longer than the limit so it is cut on the next call.
    fn complete_lines_within_limit(&self, last: usize) -> usize {
        if last <= self.max_line {
            // No line of this run can be longer than the run: nothing to look for (the usual
            // case, where the buffer is no larger than the line limit plus one).
            return last + 1;
        }
        let data = &self.buf[..=last];
        let mut start = 0;
        for nl in memchr::memchr_iter(b'\n', data) {
            if nl - start > self.max_line {
                return start;
            }
            start = nl + 1;
        }
        start
    }

    fn chunk(&self, end: usize, truncated: bool) -> Chunk<'_> {
        Chunk {
            data: &self.buf[..end],
            info: ChunkInfo {
                first_line: self.next_line,
                truncated,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunks(input: &[u8], chunk: usize, max_line: usize) -> Vec<(u64, bool, Vec<u8>)> {
        let mut r = ChunkReader::new(input, chunk, max_line);
        let mut out = Vec::new();
        while let Some(c) = r.next_chunk().expect("reads") {
            let lines = memchr::memchr_iter(b'\n', c.data).count() as u64
                + u64::from(c.data.last().is_some_and(|&b| b != b'\n'));
            let truncated = c.info.truncated;
            out.push((c.info.first_line, truncated, c.data.to_vec()));
            r.advance_lines(lines.max(u64::from(truncated)));
        }
        out
    }

    #[test]
    fn chunks_end_on_line_boundaries() {
        let input = b"aaaa\nbbbb\ncccc\ndd";
        let all: Vec<u8> = chunks(input, 4096, 4096)
            .into_iter()
            .flat_map(|c| c.2)
            .collect();
        assert_eq!(all, input);
    }

    #[test]
    fn long_lines_are_cut_and_the_rest_skipped() {
        let mut input = b"short\n".to_vec();
        input.extend(std::iter::repeat_n(b'x', 10_000));
        input.extend(b"\nafter\n");
        let out = chunks(&input, 4096, 4096);
        let truncated: Vec<_> = out.iter().filter(|c| c.1).collect();
        assert_eq!(truncated.len(), 1);
        assert_eq!(truncated[0].2.len(), 4096);
        assert_eq!(truncated[0].0, 2, "the cut line keeps its number");
        let last = out.last().expect("chunks");
        assert_eq!(last.2, b"after\n");
        assert_eq!(last.0, 3);
    }

    #[test]
    fn job_ids_come_from_file_names() {
        assert_eq!(job_from_file_name(Path::new("a/job-12.log.gz")), "job-12");
        assert_eq!(
            job_from_file_name(Path::new("train.rank0.zst")),
            "train.rank0"
        );
        assert_eq!(job_from_file_name(Path::new(".log")), ".log");
    }
}
