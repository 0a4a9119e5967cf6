//! Value classification: is this piece of a word a number, a size, a duration, hex, a UUID,
//! an IP, a path, a URL, a time, a host, or `word<NUM>`?
//!
//! Part of the masker ([`super`]). Pure predicates over bytes, no state: each recognises one
//! kind of value as a whole piece. Which is tried first, and on what, is decided in
//! [`super::words`].

use super::MaskKind;

/// `[<>~]? [+-]? digits [. digits] [e[+-]digits] [unit]`, where a unit turns
/// the number into a size or a duration.
pub(super) fn number_kind(b: &[u8]) -> Option<MaskKind> {
    let mut i = 0;
    if i < b.len() && (b[i] == b'<' || b[i] == b'>' || b[i] == b'~') {
        i += 1;
        if i < b.len() && b[i] == b'=' {
            i += 1;
        }
    }
    if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
        i += 1;
    }
    let ds = i;
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
    }
    if i == ds {
        return None;
    }
    if i + 1 < b.len() && b[i] == b'.' && b[i + 1].is_ascii_digit() {
        i += 1;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
    }
    if i + 1 < b.len() && (b[i] == b'e' || b[i] == b'E') {
        let mut k = i + 1;
        if k < b.len() && (b[k] == b'+' || b[k] == b'-') {
            k += 1;
        }
        if k < b.len() && b[k].is_ascii_digit() {
            while k < b.len() && b[k].is_ascii_digit() {
                k += 1;
            }
            i = k;
        }
    }
    if i == b.len() {
        return Some(MaskKind::Num);
    }
    unit_suffix(&b[i..])
}

/// A unit glued to a number: `MB`, `GiB/s`, `ms`, `1h2m3s` (repeated
/// number-unit pairs for durations).
fn unit_suffix(rest: &[u8]) -> Option<MaskKind> {
    let mut r = rest;
    if let Some(stripped) = r.strip_suffix(b"/s") {
        return if size_unit(stripped) {
            Some(MaskKind::Size)
        } else {
            None
        };
    }
    if size_unit(r) {
        return Some(MaskKind::Size);
    }
    // Durations, possibly compound: 1h2m3.5s
    loop {
        let mut i = 0;
        while i < r.len() && r[i].is_ascii_alphabetic() {
            i += 1;
        }
        if i == 0 || !dur_unit(&r[..i]) {
            return None;
        }
        r = &r[i..];
        if r.is_empty() {
            return Some(MaskKind::Dur);
        }
        let mut k = 0;
        while k < r.len() && (r[k].is_ascii_digit() || r[k] == b'.') {
            k += 1;
        }
        if k == 0 {
            return None;
        }
        r = &r[k..];
    }
}

fn size_unit(u: &[u8]) -> bool {
    matches!(
        u,
        b"B" | b"KB"
            | b"kB"
            | b"MB"
            | b"GB"
            | b"TB"
            | b"PB"
            | b"KiB"
            | b"MiB"
            | b"GiB"
            | b"TiB"
            | b"K"
            | b"M"
            | b"G"
            | b"k"
            | b"kb"
            | b"mb"
            | b"gb"
            | b"bytes"
            | b"byte"
            | b"Bytes"
    )
}

fn dur_unit(u: &[u8]) -> bool {
    matches!(
        u,
        b"ns"
            | b"us"
            | b"ms"
            | b"s"
            | b"sec"
            | b"secs"
            | b"second"
            | b"seconds"
            | b"m"
            | b"min"
            | b"mins"
            | b"minute"
            | b"minutes"
            | b"h"
            | b"hr"
            | b"hrs"
            | b"hour"
            | b"hours"
            | b"d"
            | b"day"
            | b"days"
            | b"msec"
            | b"msecs"
            | b"usec"
            | b"usecs"
            | b"nsec"
    )
}

/// Unit words accepted after a separate number (`18846 bytes`, `93.0 B`):
/// sizes, and durations except the one-letter ones (and `us`), which are too
/// ambiguous alone.
pub(super) fn spaced_unit(u: &[u8]) -> Option<MaskKind> {
    if size_unit(u) && (u.len() > 1 || u == b"B") {
        return Some(MaskKind::Size);
    }
    if dur_unit(u) && u.len() > 1 && u != b"us" {
        return Some(MaskKind::Dur);
    }
    None
}

pub(super) fn is_hex0x(b: &[u8]) -> bool {
    b.len() > 2
        && b[0] == b'0'
        && (b[1] == b'x' || b[1] == b'X')
        && b[2..].iter().all(|c| c.is_ascii_hexdigit())
}

pub(super) fn is_long_hex(b: &[u8]) -> bool {
    b.len() >= 8 && b.iter().all(|c| c.is_ascii_hexdigit())
}

pub(super) fn is_uuid(b: &[u8]) -> bool {
    if b.len() != 36 {
        return false;
    }
    b.iter().enumerate().all(|(i, &c)| {
        if i == 8 || i == 13 || i == 18 || i == 23 {
            c == b'-'
        } else {
            c.is_ascii_hexdigit()
        }
    })
}

pub(super) fn is_ipv4(b: &[u8]) -> bool {
    let mut parts = 0;
    let mut digits = 0;
    for &c in b {
        if c.is_ascii_digit() {
            digits += 1;
            if digits > 3 {
                return false;
            }
        } else if c == b'.' {
            if digits == 0 {
                return false;
            }
            parts += 1;
            digits = 0;
        } else {
            return false;
        }
    }
    digits > 0 && parts == 3
}

/// IPv6 (or a MAC address): hex groups of at most 4 separated by ':', with
/// `::`, or 5+ colons, or a hex letter (which a clock time never has).
pub(super) fn is_ipv6(b: &[u8]) -> bool {
    let mut colons = 0;
    let mut group = 0;
    let mut letter = false;
    let mut double = false;
    let mut prev_colon = false;
    for &c in b {
        if c == b':' {
            colons += 1;
            if prev_colon {
                double = true;
            }
            prev_colon = true;
            group = 0;
        } else if c.is_ascii_hexdigit() {
            if !c.is_ascii_digit() {
                letter = true;
            }
            group += 1;
            prev_colon = false;
            if group > 4 {
                return false;
            }
        } else if c == b'.' || c == b'%' {
            // embedded IPv4 tail or zone index: accept when already IPv6-like
            return colons >= 2 && (double || colons >= 5);
        } else {
            return false;
        }
    }
    colons >= 2 && (double || colons >= 5 || (letter && colons >= 2 && b.len() >= 6))
}

pub(super) fn is_url(b: &[u8]) -> bool {
    // scheme "://": letters, digits, '+', '-', '.' before it
    let mut i = 0;
    while i < b.len()
        && (b[i].is_ascii_alphanumeric() || b[i] == b'+' || b[i] == b'-' || b[i] == b'.')
    {
        i += 1;
    }
    i > 0 && b.len() > i + 3 && &b[i..i + 3] == b"://"
}

pub(super) fn is_path(b: &[u8]) -> bool {
    if b.len() >= 2 && b[0] == b'/' && b[1] != b'/' {
        return true;
    }
    if b.starts_with(b"./") || b.starts_with(b"../") || b.starts_with(b"~/") {
        return b.len() > 2;
    }
    if b.len() >= 3 && b[0].is_ascii_alphabetic() && b[1] == b':' && b[2] == b'\\' {
        return true;
    }
    // relative path with at least two separators: a/b/c
    let mut slashes = 0;
    let mut prev_slash = false;
    for &c in b {
        if c == b'/' {
            if prev_slash {
                return false;
            }
            slashes += 1;
            prev_slash = true;
        } else if c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-' | b'+') {
            prev_slash = false;
        } else {
            return false;
        }
    }
    slashes >= 2 && b[0] != b'/'
}

/// Dates and clock times: `21:42:00`, `21:42:00.429`, `00:01`, `2024-01-02`,
/// `2024-01-02T03:04:05.1Z`, `2024/01/02-03:04:05`, `17/06/09`,
/// `20171223-22:15:29:606`. An IP with a port (`9.1.2.3:443`) is not a time.
pub(super) fn is_time(b: &[u8]) -> bool {
    let run = |i: usize| {
        b[i.min(b.len())..]
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .count()
    };
    let at = |i: usize| b.get(i).copied().unwrap_or(0);
    let d0 = run(0);
    let mut i;
    if d0 == 4 && matches!(at(4), b'-' | b'/' | b'.') {
        // yyyy-mm-dd
        let sep = at(4);
        let m = run(5);
        if !(1..=2).contains(&m) || at(5 + m) != sep {
            return false;
        }
        let d = run(6 + m);
        if !(1..=2).contains(&d) {
            return false;
        }
        i = 6 + m + d;
        if i == b.len() {
            return true;
        }
        if !matches!(at(i), b'T' | b'-' | b'_' | b':') {
            return false;
        }
        i += 1;
    } else if d0 == 8 && at(8) == b'-' {
        // yyyymmdd-clock
        i = 9;
    } else if (1..=2).contains(&d0) && at(d0) == b'/' {
        // dd/mm/yy(yy)
        let m = run(d0 + 1);
        if !(1..=2).contains(&m) || at(d0 + 1 + m) != b'/' {
            return false;
        }
        let y = run(d0 + 2 + m);
        if y != 2 && y != 4 {
            return false;
        }
        i = d0 + 2 + m + y;
        if i == b.len() {
            return true;
        }
        if !matches!(at(i), b'-' | b':' | b'T') {
            return false;
        }
        i += 1;
    } else {
        i = 0;
    }
    // clock: h{1,2}:mm[:ss][(.|,|:)frac]
    let h = run(i);
    if !(1..=2).contains(&h) || at(i + h) != b':' {
        return false;
    }
    i += h + 1;
    if run(i) != 2 {
        return false;
    }
    i += 2;
    if at(i) == b':' && run(i + 1) == 2 {
        i += 3;
    }
    if matches!(at(i), b'.' | b',' | b':') && run(i + 1) > 0 {
        i += 1 + run(i + 1);
    }
    // zone: Z, +hh:mm, -hhmm
    if at(i) == b'Z' {
        i += 1;
    } else if matches!(at(i), b'+' | b'-') && run(i + 1) >= 2 {
        i += 1 + run(i + 1);
        if at(i) == b':' && run(i + 1) == 2 {
            i += 3;
        }
    }
    i == b.len()
}

/// Dotted name whose labels are alphanumeric (with '-' or '_') and whose last
/// label is alphabetic: `node12.cluster.local`, `tcpconn6.tencent.com`.
pub(super) fn is_host(b: &[u8]) -> bool {
    let mut labels = 1;
    let mut label_len = 0;
    let mut last_alpha = true;
    for &c in b {
        if c == b'.' {
            if label_len == 0 {
                return false;
            }
            labels += 1;
            label_len = 0;
            last_alpha = true;
        } else if c.is_ascii_alphanumeric() || c == b'-' || c == b'_' {
            label_len += 1;
            if !c.is_ascii_alphabetic() {
                last_alpha = false;
            }
        } else {
            return false;
        }
    }
    labels >= 2 && label_len > 0 && last_alpha
}

/// Digit-free dotted name ending in a common generic top-level domain or in
/// two lower-case letters: `proxy.cse.cuhk.edu.hk`, `www.example.com`.
/// Digit-free dotted words without such an ending (`org.apache.Foo`,
/// `file.txt`) stay literal.
pub(super) fn is_tld_host(b: &[u8]) -> bool {
    let Some(dot) = b.iter().rposition(|&c| c == b'.') else {
        return false;
    };
    if dot == 0 || !is_host(b) {
        return false;
    }
    let tld = &b[dot + 1..];
    // two lower-case letters: a country code (`.hk`, `.pl`, also `.py` file
    // names, which vary like hosts do)
    if tld.len() == 2 && tld.iter().all(|c| c.is_ascii_lowercase()) {
        return true;
    }
    matches!(
        tld,
        b"com"
            | b"net"
            | b"org"
            | b"edu"
            | b"gov"
            | b"io"
            | b"ai"
            | b"dev"
            | b"cloud"
            | b"local"
            | b"internal"
            | b"lan"
            | b"cn"
            | b"hk"
            | b"uk"
            | b"de"
            | b"jp"
            | b"fr"
            | b"ru"
            | b"us"
            | b"tw"
            | b"kr"
            | b"in"
            | b"info"
            | b"biz"
            | b"cz"
            | b"nl"
            | b"br"
            | b"it"
            | b"eu"
    )
}

/// `rank3`, `node-246`, `blk_-695`, `eth0`: letters (and `_`/`-`) then a
/// number to the end. Returns where the number starts.
pub(super) fn word_then_number(b: &[u8]) -> Option<usize> {
    let mut i = 0;
    let mut letters = 0;
    while i < b.len() && (b[i].is_ascii_alphabetic() || b[i] == b'_' || b[i] == b'-') {
        if b[i].is_ascii_alphabetic() {
            letters += 1;
        }
        i += 1;
    }
    if letters == 0 || i == b.len() {
        return None;
    }
    // allow a sign right after a separator: blk_-695
    let mut cut = i;
    if i > 0 && b[i - 1] == b'-' && (i < 2 || b[i - 2] == b'_') {
        cut = i - 1;
    }
    if b[i..].iter().all(|c| c.is_ascii_digit()) {
        Some(cut)
    } else {
        None
    }
}
