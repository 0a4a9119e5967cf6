//! What faultline keeps between runs: the directory, and the build's identity that every kept
//! artefact is keyed by.
//!
//! Three things are kept there, each named after a hash of what it was made from, written
//! whole (to a temporary name, then renamed) and never trusted further than that name: the
//! compiled Hyperscan databases ([`crate::matcher::hyperscan`]), the literal plan each was
//! compiled from ([`crate::engine::plan`]), and the memo that a KB's patterns passed their
//! checks ([`crate::kb::KnowledgeBase::from_files`]). A missing, unreadable or corrupt file only
//! costs the work it would have saved.

use std::path::{Path, PathBuf};

/// Where compiled databases and plans are kept: `$FAULTLINE_CACHE_DIR` (empty or `off`
/// disables the cache), else `$XDG_CACHE_HOME/faultline`, else `~/.cache/faultline`.
pub fn dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("FAULTLINE_CACHE_DIR") {
        if dir.is_empty() || dir == "off" {
            return None;
        }
        return Some(PathBuf::from(dir));
    }
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir).join("faultline"));
    }
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(|home| PathBuf::from(home).join(".cache").join("faultline"))
}

/// A hash of this build's sources and locked dependencies (`build.rs`): what a kept plan or
/// check memo was made by. Another build (another commit, or the same commit with other
/// dependencies) never reads them, since its rules or its plan may differ.
pub const BUILD_ID: &str = env!("FAULTLINE_BUILD_ID");

/// How many of each kind of kept file (KB memos, plans; twice as many databases, since each
/// KB has one with and one without the unknown-line gate) [`prune`] leaves.
pub const KEEP: usize = 8;

/// Writes `bytes` to `path` whole: to a temporary name in the same directory, then renamed, so
/// a concurrent reader sees the old file, the new one, or none. Creates the directory.
pub fn write_whole(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    // Unique per process and per write: threads of one process may write the same file.
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = path.with_extension(format!("tmp{}-{n}", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// Keeps the `keep` most recently written files of `dir` whose names start with `prefix` and
/// removes the others, so that a cache written for every KB version a hot reload or a test run
/// meets stays bounded. Best effort: a file another process removes first is no error.
pub fn prune(dir: &Path, prefix: &str, keep: usize) {
    let Ok(read) = std::fs::read_dir(dir) else {
        return;
    };
    let mut files: Vec<(std::time::SystemTime, PathBuf)> = read
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    if files.len() <= keep {
        return;
    }
    files.sort_by(|a, b| b.cmp(a));
    for (_, path) in files.into_iter().skip(keep) {
        let _ = std::fs::remove_file(path);
    }
}

const CHECKED_MAGIC: &[u8] = b"FLCACHE2";

/// Bytes of the header before the payload: the magic and the CRC-32 of the payload.
const CHECKED_HEADER: usize = 12;

/// Writes `payload` whole ([`write_whole`]) behind a magic and its CRC-32, for
/// [`read_checked`]. CRC-32 rather than the FNV hash the rest of faultline uses: a KB's memo
/// is about 10 MB, read at every start, and FNV's byte-at-a-time loop took 4% of a 50 MB scan
/// where crc32fast's SIMD loop takes a tenth of that.
pub fn write_checked(path: &Path, payload: &[u8]) -> std::io::Result<()> {
    let mut bytes = Vec::with_capacity(CHECKED_HEADER + payload.len());
    bytes.extend_from_slice(CHECKED_MAGIC);
    bytes.extend(crc32fast::hash(payload).to_le_bytes());
    bytes.extend_from_slice(payload);
    write_whole(path, &bytes)
}

/// A file [`read_checked`] read: its payload, without copying it out of the file's bytes.
#[derive(Debug, PartialEq, Eq)]
pub struct Checked(Vec<u8>);

impl std::ops::Deref for Checked {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.0[CHECKED_HEADER..]
    }
}

/// The payload [`write_checked`] wrote at `path`; `None` when the file is missing, or its magic
/// or checksum is wrong.
pub fn read_checked(path: &Path) -> Option<Checked> {
    let bytes = std::fs::read(path).ok()?;
    let rest = bytes.strip_prefix(CHECKED_MAGIC)?;
    let (sum, payload) = rest.split_at_checked(CHECKED_HEADER - CHECKED_MAGIC.len())?;
    (sum == crc32fast::hash(payload).to_le_bytes()).then_some(Checked(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_build_id_is_a_hash_and_whole_writes_replace_files() {
        assert_eq!(BUILD_ID.len(), 16, "{BUILD_ID}");
        assert!(BUILD_ID.bytes().all(|b| b.is_ascii_hexdigit()));
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("sub").join("x.json");
        write_whole(&path, b"one").expect("write");
        write_whole(&path, b"two").expect("replace");
        assert_eq!(std::fs::read(&path).expect("read"), b"two");
        let names: Vec<_> = std::fs::read_dir(path.parent().expect("parent"))
            .expect("list")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(
            names,
            vec![std::ffi::OsString::from("x.json")],
            "no temporary file left"
        );
    }

    #[test]
    fn pruning_keeps_the_newest_files_of_one_kind() {
        let dir = tempfile::tempdir().expect("tempdir");
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        for i in 0..5 {
            let path = dir.path().join(format!("plan-{i}.json"));
            write_whole(&path, b"x").expect("write");
            let f = std::fs::File::options()
                .write(true)
                .open(&path)
                .expect("open");
            f.set_modified(old + std::time::Duration::from_secs(i))
                .expect("mtime");
        }
        write_whole(&dir.path().join("hs-1.db"), b"x").expect("write");
        prune(dir.path(), "plan-", 2);
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .expect("list")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["hs-1.db", "plan-3.json", "plan-4.json"]);
    }

    #[test]
    fn checked_files_come_back_whole_or_not_at_all() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("plan.json");
        assert_eq!(read_checked(&path), None, "missing");
        write_checked(&path, b"{\"a\":1}").expect("write");
        assert_eq!(read_checked(&path).as_deref(), Some(&b"{\"a\":1}"[..]));
        let mut bytes = std::fs::read(&path).expect("read");
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(&path, &bytes).expect("corrupt");
        assert_eq!(
            read_checked(&path),
            None,
            "a flipped bit fails the checksum"
        );
        std::fs::write(&path, b"{\"a\":1}").expect("plain");
        assert_eq!(read_checked(&path), None, "no magic");
    }
}
