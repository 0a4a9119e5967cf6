//! Which lines look like errors: the gate in front of the miner.
//!
//! Why: in the default mode only lines that look like failures and hit no KB
//! entry are mined, so that the template table shows unknown *errors*, not the
//! whole log. The test must be cheap (it runs on every line faultline reads)
//! and must not fire on the many benign lines that merely mention errors
//! (`0 errors`, `error_rate=0.01`, `UserWarning: ...`).
//!
//! Evidence, in one pass over the words of the line:
//! - a glog `E`/`F` prefix: `E1129 21:42:00.429 ...` (also after a launcher
//!   prefix such as `[default0]:`);
//! - an upper-case level word: `ERROR`, `ERR`, `CRITICAL`, `CRIT`, `FATAL`,
//!   `SEVERE`, `PANIC`, `EMERG`;
//! - `Traceback`, and exception class names: a CamelCase word with an `Error`,
//!   `Exception`, `Failure`, `Failed` or `Fault` segment (`RuntimeError`,
//!   `ncclSystemError`, `cudaErrorIllegalAddress`, `ChildFailedError`);
//! - the words error(s), fail(s/ed/ure/ures), fatal, abort(s/ed/ing),
//!   exception(s), panic(ked), segfault, crashed, `segmentation fault`,
//!   `core dumped`, `SIGSEGV`/`SIGABRT`/`SIGBUS`/`SIGFPE`/`SIGILL`;
//! - a non-zero exit: `exit code 1`, `exited with code 137`, `exit status 2`,
//!   `exitcode: 1`, `return code -9`, `returned non-zero exit status 1`.
//!
//! Benign forms that do not count (collected deliberately, each one tested):
//! - a zero count or value: `0 errors`, `0 failed`, `errors: 0`, `error=0`,
//!   `failures=0.0`, `error: null`, `err=<nil>`, `error=None`, `exit code 0`;
//! - a negation before the word: `no error`, `No errors found`,
//!   `without error`, `zero failures`, `never failed`, `non-fatal`;
//! - a topic rather than an occurrence: `error handling`, `error rate`;
//! - a metric or config key: `error_rate=0.01`, `num_errors: 3`,
//!   `TORCH_NCCL_ASYNC_ERROR_HANDLING=1`, `on_error=continue`, `error-free`,
//!   `fail-safe`;
//! - inside a path or URL: `/var/log/error.log`, `http://h/errors`;
//! - Python warning lines (`UserWarning:`, `DeprecationWarning:`,
//!   `FutureWarning:`, `RuntimeWarning:` ...), unless a strong signal (glog
//!   `E`/`F`, an upper-case level word, `Traceback`) is also present.

use super::id::shape_key;
use super::tree::FastMap;

/// Bytes of a line that are examined.
const MAX_BYTES: usize = 4096;

/// Verdicts remembered by [`FilterMemo`] before it starts over.
const MEMO_ENTRIES: usize = 16_384;

/// [`looks_like_error`] with a memory: a line whose shape (the line with its non-zero digits
/// read alike, [`super::id::shape_key`]) was judged before gets the same verdict without being
/// read again. The gate reads digits only as digits and zeros only as zeros, so the verdict
/// is the one the line would get (a test holds this over real logs). One per worker; bounded
/// (it starts over when full, as the miner's cache does).
#[derive(Default)]
pub struct FilterMemo {
    verdicts: FastMap<u64, bool>,
}

impl FilterMemo {
    /// Whether `line` looks like an error, as [`looks_like_error`] says.
    pub fn looks_like_error(&mut self, line: &str) -> bool {
        let (head, _) = super::mask::truncate_str(line, MAX_BYTES);
        let key = shape_key(head.as_bytes());
        if let Some(&v) = self.verdicts.get(&key) {
            return v;
        }
        let v = looks_like_error(line);
        if self.verdicts.len() >= MEMO_ENTRIES {
            self.verdicts.clear();
        }
        self.verdicts.insert(key, v);
        v
    }
}

/// True when the line looks like an error report. See the module docs for the
/// evidence and the benign forms that are excluded.
pub fn looks_like_error(line: &str) -> bool {
    let (line, _) = super::mask::truncate_str(line, MAX_BYTES);
    let b = line.as_bytes();
    if glog_error_prefix(b) {
        return true;
    }
    let mut strong = false;
    let mut weak = false;
    let mut warning_class = false;
    // previous two alphabetic words (lower-cased, truncated) for negations and
    // "exit code" / "exited with code" phrases
    let mut prev1: [u8; 12] = [0; 12];
    let mut prev1_len = 0usize;
    let mut prev2: [u8; 12] = [0; 12];
    let mut prev2_len = 0usize;
    let mut i = 0usize;
    while i < b.len() {
        if !b[i].is_ascii_alphabetic() {
            i += 1;
            continue;
        }
        let s = i;
        while i < b.len() && b[i].is_ascii_alphabetic() {
            i += 1;
        }
        let w = &b[s..i];
        let mut lw: [u8; 12] = [0; 12];
        let lw_len = w.len().min(12);
        for (d, c) in lw.iter_mut().zip(w.iter()) {
            *d = c.to_ascii_lowercase();
        }
        let lower = &lw[..lw_len];
        let p1 = &prev1[..prev1_len];
        let p2 = &prev2[..prev2_len];

        let ev = if is_level_word(w) && !in_key_or_path(b, s, i) || w == b"Traceback" {
            Evidence::Strong
        } else if w.len() > 7 && w.ends_with(b"Warning") {
            Evidence::WarningClass
        } else if (w.len() <= 12 && is_error_word(lower)) || camel_error(w) {
            if benign_context(b, s, i, p1) {
                Evidence::None
            } else {
                Evidence::Weak
            }
        } else if (w.len() <= 12 && is_signal(w))
            || (lower == b"fault" && p1 == b"segmentation")
            || (lower == b"dumped" && p1 == b"core")
        {
            Evidence::Weak
        } else if exit_word(lower, p1, p2) {
            if nonzero_value_after(b, i) {
                Evidence::Weak
            } else {
                Evidence::None
            }
        } else if (lower == b"nonzero"
            || (lower == b"zero" && p1 == b"non" && s > 0 && b[s - 1] == b'-'))
            && (p1 == b"returned" || p2 == b"returned" || next_word_is_exitish(b, i))
        {
            Evidence::Weak
        } else {
            Evidence::None
        };
        match ev {
            Evidence::Strong => strong = true,
            Evidence::Weak => weak = true,
            Evidence::WarningClass => warning_class = true,
            Evidence::None => {}
        }
        prev2 = prev1;
        prev2_len = prev1_len;
        prev1 = lw;
        prev1_len = lw_len;
    }
    if strong {
        return true;
    }
    if warning_class {
        return false;
    }
    weak
}

/// What one word says about the line.
enum Evidence {
    /// glog-independent proof: a level word or `Traceback`.
    Strong,
    /// An error word, exception name, signal or non-zero exit.
    Weak,
    /// A Python warning class (`UserWarning`): weak evidence does not count.
    WarningClass,
    None,
}

/// `exit code`, `exit status`, `exitcode`, `returncode`, `return code`,
/// `exited with code`, `failed with status`...: a word after which an exit
/// value follows.
fn exit_word(lower: &[u8], p1: &[u8], p2: &[u8]) -> bool {
    matches!(lower, b"exitcode" | b"returncode")
        || (matches!(lower, b"code" | b"status")
            && (matches!(p1, b"exit" | b"return")
                || (p1 == b"with"
                    && matches!(p2, b"exited" | b"failed" | b"terminated" | b"finished"))))
}

/// glog severity prefix `E`/`F` + MMDD + space + time, at the start of the line
/// or after a short launcher prefix ending in `]:`, `]` or `: `.
fn glog_error_prefix(b: &[u8]) -> bool {
    if glog_at(b, 0) {
        return true;
    }
    let lim = b.len().min(48);
    for i in 0..lim {
        if (b[i] == b']' || b[i] == b':') && i + 1 < b.len() {
            let mut j = i + 1;
            while j < b.len() && (b[j] == b':' || b[j] == b' ') {
                j += 1;
            }
            if glog_at(b, j) {
                return true;
            }
        }
    }
    false
}

fn glog_at(b: &[u8], i: usize) -> bool {
    b.len() >= i + 8
        && (b[i] == b'E' || b[i] == b'F')
        && b[i + 1..i + 5].iter().all(|c| c.is_ascii_digit())
        && b[i + 5] == b' '
        && b[i + 6].is_ascii_digit()
        && b[i + 7].is_ascii_digit()
}

fn is_level_word(w: &[u8]) -> bool {
    matches!(
        w,
        b"ERROR" | b"ERR" | b"CRITICAL" | b"CRIT" | b"FATAL" | b"SEVERE" | b"PANIC" | b"EMERG"
    )
}

fn is_error_word(lower: &[u8]) -> bool {
    matches!(
        lower,
        b"error"
            | b"errors"
            | b"fail"
            | b"fails"
            | b"failed"
            | b"failure"
            | b"failures"
            | b"fatal"
            | b"abort"
            | b"aborts"
            | b"aborted"
            | b"aborting"
            | b"exception"
            | b"exceptions"
            | b"panic"
            | b"panicked"
            | b"segfault"
            | b"crashed"
    )
}

fn is_signal(w: &[u8]) -> bool {
    matches!(
        w,
        b"SIGSEGV" | b"SIGABRT" | b"SIGBUS" | b"SIGFPE" | b"SIGILL"
    )
}

/// CamelCase word with an error-ish segment: `RuntimeError`,
/// `ncclSystemError`, `cudaErrorIllegalAddress`, `ChildFailedError`.
fn camel_error(w: &[u8]) -> bool {
    const SEGS: [&[u8]; 5] = [b"Error", b"Exception", b"Failure", b"Failed", b"Fault"];
    if w.len() < 6 {
        return false;
    }
    // Every segment starts with `E` or `F`: only those positions are tried (this runs on
    // every word of every candidate line).
    for (k, &c) in w.iter().enumerate() {
        if c != b'E' && c != b'F' {
            continue;
        }
        for seg in SEGS {
            if seg[0] != c || !w[k..].starts_with(seg) {
                continue;
            }
            // a segment boundary: start of word or after a lower-case
            // letter, and followed by end or an upper-case letter
            let start_ok = k == 0 || w[k - 1].is_ascii_lowercase();
            let end = k + seg.len();
            let end_ok = end == w.len() || w[end].is_ascii_uppercase();
            let whole = k == 0 && end == w.len();
            if start_ok && end_ok && !whole {
                // `NoError`, `noFailure` are benign names
                let neg = k >= 2 && (w[..k].eq_ignore_ascii_case(b"no"));
                if !neg {
                    return true;
                }
            }
        }
    }
    false
}

/// Whether the error word at `b[s..e]` sits in a benign context.
fn benign_context(b: &[u8], s: usize, e: usize, prev: &[u8]) -> bool {
    // negation before: "no error", "without errors", "non-fatal", "0 errors"
    if matches!(
        prev,
        b"no" | b"without" | b"zero" | b"never" | b"non" | b"not"
    ) && gap_is_short(b, s)
    {
        return true;
    }
    if zero_before(b, s) {
        return true;
    }
    // "error-free", "fail-safe"
    if b.len() > e + 1 && b[e] == b'-' {
        let rest = &b[e + 1..];
        if starts_with_ci(rest, b"free")
            || starts_with_ci(rest, b"safe")
            || starts_with_ci(rest, b"tolerant")
        {
            return true;
        }
    }
    if in_key_or_path(b, s, e) {
        return true;
    }
    // "error handling", "error rate": the topic, not an occurrence
    let mut k = e;
    while k < b.len() && b[k] == b' ' {
        k += 1;
    }
    if k > e {
        let rest = &b[k..];
        for w in [&b"handling"[..], b"handler", b"rate", b"rates"] {
            if starts_with_ci(rest, w)
                && (rest.len() == w.len() || !rest[w.len()].is_ascii_alphanumeric())
            {
                return true;
            }
        }
    }
    // "errors: 0", "error=None", "err=<nil>", "\"error\": null"
    if null_value_after(b, e) {
        return true;
    }
    false
}

/// Only spaces or a hyphen between the previous word and this one.
fn gap_is_short(b: &[u8], s: usize) -> bool {
    let mut k = s;
    let mut n = 0;
    while k > 0 && (b[k - 1] == b' ' || b[k - 1] == b'-') {
        k -= 1;
        n += 1;
    }
    n <= 2
}

/// "0 errors", "0 failed": a standalone zero right before the word.
fn zero_before(b: &[u8], s: usize) -> bool {
    let mut k = s;
    while k > 0 && b[k - 1] == b' ' {
        k -= 1;
    }
    if k == s {
        return false;
    }
    let end = k;
    while k > 0 && (b[k - 1].is_ascii_digit() || b[k - 1] == b'.') {
        k -= 1;
    }
    if k == end {
        return false;
    }
    let num = &b[k..end];
    let standalone = k == 0 || !b[k - 1].is_ascii_alphanumeric();
    standalone && num.iter().all(|&c| c == b'0' || c == b'.') && num.contains(&b'0')
}

/// The word is part of a snake_case key followed by `=` or `: <number>`
/// (`error_rate=0.01`, `TORCH_NCCL_ASYNC_ERROR_HANDLING=1`, `num_errors: 3`),
/// or part of a path or URL.
fn in_key_or_path(b: &[u8], s: usize, e: usize) -> bool {
    // extent of the identifier-ish token around the word
    let mut ks = s;
    while ks > 0
        && (b[ks - 1].is_ascii_alphanumeric() || matches!(b[ks - 1], b'_' | b'.' | b'/' | b'-'))
    {
        ks -= 1;
    }
    let mut ke = e;
    while ke < b.len()
        && (b[ke].is_ascii_alphanumeric() || matches!(b[ke], b'_' | b'.' | b'/' | b'-'))
    {
        ke += 1;
    }
    let tok = &b[ks..ke];
    if tok.contains(&b'/') {
        return true;
    }
    let snake = tok.contains(&b'_');
    if !snake {
        return false;
    }
    // key: followed by '=' (any value), or ':' then a number
    let mut k = ke;
    while k < b.len() && (b[k] == b'"' || b[k] == b'\'') {
        k += 1;
    }
    if k < b.len() && b[k] == b'=' {
        return true;
    }
    if k < b.len() && b[k] == b':' {
        let mut j = k + 1;
        while j < b.len() && b[j] == b' ' {
            j += 1;
        }
        return j < b.len() && (b[j].is_ascii_digit() || b[j] == b'-');
    }
    false
}

/// After the word: optional quote, `=` or `:`, then a zero or null value.
fn null_value_after(b: &[u8], e: usize) -> bool {
    let mut k = e;
    while k < b.len() && (b[k] == b'"' || b[k] == b'\'' || b[k] == b' ') {
        k += 1;
    }
    if k >= b.len() || !(b[k] == b'=' || b[k] == b':') {
        return false;
    }
    k += 1;
    while k < b.len() && (b[k] == b' ' || b[k] == b'"' || b[k] == b'\'') {
        k += 1;
    }
    let rest = &b[k..];
    if rest.is_empty() {
        return false;
    }
    // numeric zero: 0, 0.0, 0.00 (not 0.5, not 01x)
    let mut j = 0;
    while j < rest.len() && (rest[j] == b'0' || rest[j] == b'.') {
        j += 1;
    }
    if j > 0 && rest[0] == b'0' && (j == rest.len() || !rest[j].is_ascii_alphanumeric()) {
        return true;
    }
    for v in [
        &b"none"[..],
        b"null",
        b"nil",
        b"<nil>",
        b"false",
        b"\"\"",
        b"[]",
        b"{}",
    ] {
        if starts_with_ci(rest, v)
            && (rest.len() == v.len() || !rest[v.len()].is_ascii_alphanumeric())
        {
            return true;
        }
    }
    false
}

/// After "exit code" and the like: a value that is a non-zero integer.
fn nonzero_value_after(b: &[u8], e: usize) -> bool {
    let mut k = e;
    while k < b.len() && matches!(b[k], b' ' | b':' | b'=' | b'"' | b'\'' | b'(' | b'[') {
        k += 1;
    }
    if k < b.len() && (b[k] == b'-' || b[k] == b'+') {
        k += 1;
    }
    let s = k;
    while k < b.len() && b[k].is_ascii_digit() {
        k += 1;
    }
    s < k && b[s..k].iter().any(|&c| c != b'0')
}

fn next_word_is_exitish(b: &[u8], e: usize) -> bool {
    let mut k = e;
    while k < b.len() && !b[k].is_ascii_alphabetic() {
        if k > e + 3 {
            return false;
        }
        k += 1;
    }
    let rest = &b[k..];
    starts_with_ci(rest, b"exit")
        || starts_with_ci(rest, b"status")
        || starts_with_ci(rest, b"return")
}

fn starts_with_ci(h: &[u8], n: &[u8]) -> bool {
    h.len() >= n.len() && h[..n.len()].eq_ignore_ascii_case(n)
}

#[cfg(test)]
mod tests {
    use super::looks_like_error;

    #[test]
    fn error_lines() {
        let yes = [
            "E1129 21:42:00.429 12345 ProcessGroupNCCL.cpp:1191] [Rank 3] Watchdog caught collective operation timeout",
            "F1129 21:42:00.429 12345 logging.cc:12] Check failed: x == y",
            "[default0]:E1129 21:42:00.429 1 nccl.cc:5] boom",
            "2024-01-02 03:04:05,678 ERROR trainer: step 5 crashed",
            "CRITICAL:root:disk full",
            "[FATAL] cannot continue",
            "Traceback (most recent call last):",
            "RuntimeError: CUDA error: an illegal memory access was encountered",
            "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275",
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
            "ncclSystemError: System call (e.g. socket, malloc) or external library call failed",
            "cudaErrorIllegalAddress returned from kernel",
            "java.lang.NullPointerException",
            "Connection failed: timed out",
            "job aborted by user request",
            "unhandled exception in worker thread",
            "Segmentation fault (core dumped)",
            "process 1234 received SIGSEGV",
            "worker 3 exited with code 137",
            "subprocess exit code: 1",
            "Command '['ls']' returned non-zero exit status 2.",
            "exitcode  : 1 (pid: 4242)",
            "error: could not open device",
            "3 errors found during validation",
            "level=error msg=\"rendezvous timed out\"",
            "CUDA_ERROR_OUT_OF_MEMORY: out of memory",
            "thread 'main' panicked at src/main.rs:5",
            "Auth fail for user root",
        ];
        for l in yes {
            assert!(looks_like_error(l), "should be an error: {l}");
        }
    }

    #[test]
    fn benign_lines() {
        let no = [
            "I1129 21:42:00.429 12345 trainer.cc:10] step 100 loss 0.25",
            "W1129 21:42:00.429 12345 trainer.cc:10] slow step",
            "validation finished: 0 errors, 0 failures",
            "0 failed, 12 passed",
            "error=0 warnings=2",
            "errors: 0",
            "failures=0.0",
            "\"error\": null, \"status\": \"ok\"",
            "err=<nil>",
            "error=None",
            "no error detected",
            "No errors found.",
            "completed without errors",
            "zero failures in 1000 steps",
            "non-fatal condition ignored",
            "error_rate=0.0012 p99=35ms",
            "num_errors: 3",
            "TORCH_NCCL_ASYNC_ERROR_HANDLING=1",
            "config on_error=continue",
            "an error-free run",
            "fail-safe mode enabled",
            "writing logs to /var/log/app/error.log",
            "see http://docs.example.com/errors/handling",
            "/usr/lib/python3/warnings.py:109: UserWarning: this will error in a future release",
            "DeprecationWarning: failure modes changed",
            "worker 3 exited with code 0",
            "exit code: 0",
            "step 10 loss 2.31 lr 1e-4",
            "NCCL INFO Channel 00 : 0[0] -> 1[1] via P2P/IPC",
            "terminal error handling enabled",
        ];
        for l in no {
            assert!(!looks_like_error(l), "should not be an error: {l}");
        }
    }

    #[test]
    fn strong_signal_beats_warning_class() {
        assert!(looks_like_error(
            "ERROR UserWarning escalated: cannot continue"
        ));
    }
}
