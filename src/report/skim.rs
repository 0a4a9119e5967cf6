//! A JSON line's top-level fields by name, found without parsing the rest.
//!
//! A scan's match and incident lines are mostly text the report never reads (each carries its
//! entry's diagnosis: root cause, workarounds, references). [`object`] walks the top-level
//! object, jumps over each value (strings with `memchr`, nested values by their brackets) and
//! hands back the byte span of the values asked for; [`super::input`] parses only those with
//! serde. It does not validate what it jumps over: a line it cannot walk, or whose wanted spans
//! do not parse, is parsed whole by serde instead, which names the error.

use memchr::memchr2;

/// Each byte of `w` that equals `b`, as its top bit (exact up to the first such byte: a borrow
/// may mark bytes after it, never before).
const fn bytes_equal(w: u64, b: u8) -> u64 {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    let x = w ^ (ONES * b as u64);
    x.wrapping_sub(ONES) & !x & HIGH
}

/// The first `"` or `\` at or after `i`. Most strings a report reads are keys and short
/// values: eight bytes at a time (a word's first match is its lowest marked byte) cost less
/// than setting up a vector search, which takes what is left after 64 bytes.
fn quote_or_escape(s: &[u8], mut i: usize) -> Option<usize> {
    let window = s.len().min(i + 64);
    while i + 8 <= window {
        let w = u64::from_le_bytes(s[i..i + 8].try_into().ok()?);
        let hit = bytes_equal(w, b'"') | bytes_equal(w, b'\\');
        if hit != 0 {
            return Some(i + (hit.trailing_zeros() / 8) as usize);
        }
        i += 8;
    }
    Some(i + memchr2(b'"', b'\\', s.get(i..)?)?)
}

/// The end (exclusive) of the string whose opening quote is at `at`.
fn string_end(s: &[u8], at: usize) -> Option<usize> {
    let mut i = at + 1;
    loop {
        i = quote_or_escape(s, i)?;
        if s[i] == b'"' {
            return Some(i + 1);
        }
        i += 2;
    }
}

fn skip_ws(s: &[u8], mut i: usize) -> usize {
    while i < s.len() && s[i].is_ascii_whitespace() {
        i += 1;
    }
    i
}

/// The end of a wanted value that the caller does not walk itself: [`value_end`], for
/// [`object`]'s `end_of`.
pub fn skip(_slot: usize, s: &[u8], at: usize) -> Option<usize> {
    value_end(s, at)
}

/// The end (exclusive) of a `null` starting at `at`; `None` for anything else.
pub fn null_end(s: &[u8], at: usize) -> Option<usize> {
    s.get(at..)?.starts_with(b"null").then_some(at + 4)
}

/// The end (exclusive) of the value starting at `at` (no leading whitespace).
pub fn value_end(s: &[u8], at: usize) -> Option<usize> {
    match *s.get(at)? {
        b'"' => string_end(s, at),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut i = at;
            while i < s.len() {
                match s[i] {
                    b'"' => {
                        i = string_end(s, i)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
            None
        }
        _ => {
            let mut i = at;
            while i < s.len() && !matches!(s[i], b',' | b'}' | b']') && !s[i].is_ascii_whitespace()
            {
                i += 1;
            }
            (i > at).then_some(i)
        }
    }
}

/// The spans of the top-level values of the object that starts at `at` (after any whitespace)
/// in `s` whose keys `slot` numbers (a key's text as written, without its quotes), at those
/// numbers (an empty span for a key not there), with the end (exclusive) of the object, or of
/// the value after which `enough` stopped the walk; `None` when it is not an object this can
/// walk. `enough` says when the spans found so far are all the caller needs (an incident's
/// diagnosis, context and counts come after the fields the report reads, and are never looked
/// at). The end of
/// a wanted value comes from `end_of(slot, s, start)`: a caller that reads a nested object
/// walks it there once, instead of jumping over it here and walking its span again.
pub fn object<'s, const N: usize>(
    s: &'s [u8],
    at: usize,
    slot: impl Fn(&[u8]) -> Option<usize>,
    mut end_of: impl FnMut(usize, &'s [u8], usize) -> Option<usize>,
    enough: impl Fn(&[&'s [u8]; N]) -> bool,
) -> Option<([&'s [u8]; N], usize)> {
    let mut out: [&[u8]; N] = [&[]; N];
    let mut i = skip_ws(s, at);
    if s.get(i) != Some(&b'{') {
        return None;
    }
    i = skip_ws(s, i + 1);
    if s.get(i) == Some(&b'}') {
        return Some((out, i + 1));
    }
    loop {
        if s.get(i) != Some(&b'"') {
            return None;
        }
        let key_end = string_end(s, i)?;
        let key = &s[i + 1..key_end - 1];
        i = skip_ws(s, key_end);
        if s.get(i) != Some(&b':') {
            return None;
        }
        i = skip_ws(s, i + 1);
        let end = match slot(key).filter(|k| *k < N) {
            Some(k) => {
                let end = end_of(k, s, i)?;
                out[k] = s.get(i..end)?;
                if enough(&out) {
                    return Some((out, end));
                }
                end
            }
            None => value_end(s, i)?,
        };
        i = skip_ws(s, end);
        match s.get(i) {
            Some(b',') => i = skip_ws(s, i + 1),
            Some(b'}') => return Some((out, i + 1)),
            _ => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The spans of the top-level values of the object `line`, as [`object`] finds them.
    fn fields<const N: usize>(
        line: &[u8],
        slot: impl Fn(&[u8]) -> Option<usize>,
        enough: impl Fn(&[&[u8]; N]) -> bool,
    ) -> Option<[&[u8]; N]> {
        object(line, 0, slot, skip, enough).map(|(out, _)| out)
    }

    #[test]
    fn finds_the_fields_asked_for_and_jumps_over_the_rest() {
        let line = br#"{"type":"match","diagnosis":{"text":"a \"quoted\" } ] {","list":[1,{"x":[]}]},"rank":12,"ok":true,"host":null, "job_id" : "j\\1" }"#;
        let names = ["type", "rank", "host", "job_id", "ok", "absent"];
        let slot = |k: &[u8]| names.iter().position(|n| n.as_bytes() == k);
        let [kind, rank, host, job, ok, none] = fields(line, slot, |_| false).expect("walks");
        assert_eq!(kind, br#""match""#);
        assert_eq!(rank, b"12");
        assert_eq!(host, b"null");
        assert_eq!(job, br#""j\\1""#);
        assert_eq!(ok, b"true");
        assert!(none.is_empty());
    }

    #[test]
    fn finds_the_first_quote_or_escape_at_every_offset_and_length() {
        // Every position of a quote or backslash in words and windows of every alignment,
        // after bytes whose top bit is set (UTF-8) and bytes one below either: the word search
        // must agree with a byte-by-byte one.
        for len in 0..150 {
            for at in 0..len {
                for special in [b'"', b'\\'] {
                    let mut s: Vec<u8> =
                        (0..len).map(|k| [b'!', b'[', 0xc3, 0xa9][k % 4]).collect();
                    s[at] = special;
                    if at + 3 < len {
                        s[at + 3] = b'"';
                    }
                    for from in 0..=at {
                        assert_eq!(
                            quote_or_escape(&s, from),
                            Some(at),
                            "len {len} at {at} from {from}"
                        );
                    }
                }
            }
            let plain = vec![b'a'; len];
            assert_eq!(quote_or_escape(&plain, 0), None);
        }
    }

    #[test]
    fn a_line_it_cannot_walk_is_none() {
        for bad in [
            &b"{\"type\":"[..],
            b"[1,2]",
            b"{\"a\":\"unterminated}",
            b"{\"a\":{\"b\":1}",
            b"{\"a\" 1}",
        ] {
            let slot = |k: &[u8]| (k == b"a").then_some(0);
            assert!(
                fields::<1>(bad, slot, |_| false).is_none(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn stops_once_it_has_enough_and_never_reads_the_rest() {
        // The tail is not JSON at all: a walk that went on would fail.
        let line = br#"{"type":"incident","id":"a","root":{"x":1},"diagnosis":{"#;
        let names = ["type", "id", "root"];
        let slot = |k: &[u8]| names.iter().position(|n| n.as_bytes() == k);
        let all = |out: &[&[u8]; 3]| out.iter().all(|s| !s.is_empty());
        let [kind, id, root] = fields(line, slot, all).expect("stops before the tail");
        assert_eq!(
            (kind, id, root),
            (&br#""incident""#[..], &br#""a""#[..], &br#"{"x":1}"#[..])
        );
        assert!(fields(line, slot, |_: &[&[u8]; 3]| false).is_none());
    }
}
