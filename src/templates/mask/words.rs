//! Words: one whitespace-free word -> literal text and masks.
//!
//! Part of the masker ([`super`]). A word keeps its wrapping punctuation literally; its core is
//! masked whole when it is a URL, path, date/time or IPv6 address, else cut at separators and
//! each piece classified ([`super::kinds`]). Also the two looks past the word that the scanner
//! needs: a unit word after a number (`18846 bytes`) and a date after a day or month name.

use super::bytes::{
    is_lead_wrap, is_sep, is_trail_wrap, is_ws, CLASS, C_COLON, C_DIGIT, C_DOT, C_INTEREST, C_SLASH,
};
use super::kinds::{
    is_hex0x, is_host, is_ipv4, is_ipv6, is_long_hex, is_path, is_time, is_tld_host, is_url,
    is_uuid, number_kind, spaced_unit, word_then_number,
};
use super::token::{lit_sep, lit_word, put_mask, sync, Sk, Tok};
use super::{MaskKind, SKEL_MARK};

/// English day and month names, abbreviated or full, capitalised.
pub(super) fn is_date_name(w: &[u8]) -> bool {
    matches!(
        w,
        b"Mon"
            | b"Tue"
            | b"Wed"
            | b"Thu"
            | b"Fri"
            | b"Sat"
            | b"Sun"
            | b"Jan"
            | b"Feb"
            | b"Mar"
            | b"Apr"
            | b"May"
            | b"Jun"
            | b"Jul"
            | b"Aug"
            | b"Sep"
            | b"Sept"
            | b"Oct"
            | b"Nov"
            | b"Dec"
            | b"Monday"
            | b"Tuesday"
            | b"Wednesday"
            | b"Thursday"
            | b"Friday"
            | b"Saturday"
            | b"Sunday"
            | b"January"
            | b"February"
            | b"March"
            | b"April"
            | b"June"
            | b"July"
            | b"August"
            | b"September"
            | b"October"
            | b"November"
            | b"December"
    )
}

/// The next word (after position `i`) starts with a digit or is itself a day
/// or month name: the current name belongs to a date.
pub(super) fn date_follows(b: &[u8], mut i: usize) -> bool {
    while i < b.len() && is_ws(b[i]) {
        i += 1;
    }
    let s = i;
    while i < b.len() && !is_ws(b[i]) {
        i += 1;
    }
    let mut e = i;
    while e > s && matches!(b[e - 1], b',' | b'.') {
        e -= 1;
    }
    s < e && (b[s].is_ascii_digit() || is_date_name(&b[s..e]))
}

/// Mask one whitespace-free word. Returns true when the word ends with a bare
/// `<NUM>` (no punctuation after it), so that a following unit word may join.
/// `cls` is the union of the byte classes of the word.
pub(super) fn mask_word(word: &str, cls: u8, out: &mut String, tok: &mut Tok) -> bool {
    let b = word.as_bytes();
    // Fast path: most words are plain words with nothing to mask.
    if cls & C_INTEREST == 0 {
        if matches!(b, b"()" | b"[]" | b"{}" | b"\"\"" | b"''" | b"<>") {
            // an empty value: `from 1.2.3.4 ()` vs `from 1.2.3.4 (host.net)`
            out.push_str(word);
            tok.lazy = false;
            tok.skel = Sk::new();
            tok.skel.byte(SKEL_MARK);
            tok.var = true;
        } else {
            lit_word(out, tok, word);
            if b.len() > 1 && b[b.len() - 1] == b'=' {
                // `ruser=` with an empty value is the same slot as `ruser=<NUM>`
                sync(out, tok);
                tok.skel.byte(SKEL_MARK);
                tok.var = true;
            }
        }
        return false;
    }
    let mut s = 0;
    while s < b.len() && is_lead_wrap(b[s]) {
        s += 1;
    }
    let mut e = b.len();
    while e > s && is_trail_wrap(b[e - 1]) {
        e -= 1;
    }
    // `1.` at the end of a sentence: the '.' was stripped; `v1.` likewise.
    lit_sep(out, tok, &word[..s]);
    let core = &word[s..e];
    let mut ends_num = false;
    if !core.is_empty() {
        ends_num = mask_core(core, cls, out, tok);
    }
    lit_sep(out, tok, &word[e..]);
    ends_num && e == b.len()
}

/// Mask a word stripped of wrapping punctuation. Returns true when it ends in
/// a bare `<NUM>`.
fn mask_core(core: &str, cls: u8, out: &mut String, tok: &mut Tok) -> bool {
    if let Some(k) = whole_kind(core.as_bytes(), cls) {
        put_mask(out, tok, k);
        return k == MaskKind::Num;
    }
    let b = core.as_bytes();
    let mut j = 0;
    let mut last_num = false;
    while j < b.len() {
        if is_sep(b[j]) {
            let s = j;
            while j < b.len() && is_sep(b[j]) {
                j += 1;
            }
            lit_sep(out, tok, &core[s..j]);
            last_num = false;
            continue;
        }
        let s = j;
        while j < b.len() && !is_sep(b[j]) {
            j += 1;
        }
        let after_eq = s > 0 && b[s - 1] == b'=';
        last_num = mask_piece(&core[s..j], after_eq, &b[j..], out, tok);
    }
    last_num
}

/// Kinds recognised on a whole core before it is cut at separators (they
/// contain separators themselves: `:` in times, IPv6 and URLs).
/// `cls` (the byte classes of the whole word) gates the costlier checks.
fn whole_kind(b: &[u8], cls: u8) -> Option<MaskKind> {
    let first = *b.first()?;
    if first.is_ascii_digit() || matches!(first, b'<' | b'>' | b'~' | b'+' | b'-') {
        if let Some(k) = number_kind(b) {
            return Some(k);
        }
    }
    if cls & C_SLASH != 0 {
        if cls & C_COLON != 0 && is_url(b) {
            return Some(MaskKind::Url);
        }
        if is_path(b) {
            return Some(MaskKind::Path);
        }
    }
    if cls & C_COLON != 0 || cls & C_SLASH != 0 {
        if first.is_ascii_digit() && is_time(b) {
            return Some(MaskKind::Time);
        }
        if cls & C_COLON != 0 && is_ipv6(b) {
            return Some(MaskKind::Ip);
        }
    } else if first.is_ascii_digit() && cls & C_DOT != 0 && is_time(b) {
        return Some(MaskKind::Time);
    }
    None
}

/// Classify one separator-free piece and write it. Returns true for a bare
/// `<NUM>`.
fn mask_piece(p: &str, after_eq: bool, next: &[u8], out: &mut String, tok: &mut Tok) -> bool {
    let b = p.as_bytes();
    let mut cls = 0u8;
    for &c in b {
        cls |= CLASS[c as usize];
    }
    if cls & C_DIGIT == 0 {
        // `name.example:443` (a dotted name followed by a port) and
        // `rhost=name.example` (a dotted value) are hosts
        let port_follows = next.len() > 1 && next[0] == b':' && next[1].is_ascii_digit();
        if cls & C_SLASH != 0 && is_path(b) {
            put_mask(out, tok, MaskKind::Path);
        } else if cls & C_DOT != 0 && (is_tld_host(b) || ((port_follows || after_eq) && is_host(b)))
        {
            put_mask(out, tok, MaskKind::Host);
        } else {
            lit_word(out, tok, p);
        }
        return false;
    }
    if let Some(k) = number_kind(b) {
        put_mask(out, tok, k);
        return k == MaskKind::Num;
    }
    let k = if is_hex0x(b) {
        MaskKind::Hex
    } else if is_uuid(b) {
        MaskKind::Uuid
    } else if is_ipv4(b) {
        MaskKind::Ip
    } else if cls & C_SLASH != 0 && is_path(b) {
        MaskKind::Path
    } else if is_time(b) {
        MaskKind::Time
    } else if is_long_hex(b) {
        MaskKind::Hex
    } else if is_host(b) {
        MaskKind::Host
    } else if let Some(cut) = word_then_number(b) {
        // `rank3`, `node-246`, `blk_-695`: the text keeps the word, which
        // reads well and gives KB drafts an anchor, but the skeleton sees one
        // variable piece, so `MININT-ABC5` and `MININT-7DEF1` still match,
        // and a list `an14 an15 an16` is one run like `1 2 3`.
        sync(out, tok);
        out.push_str(&p[..cut]);
        put_mask(out, tok, MaskKind::Num);
        return false;
    } else {
        MaskKind::Id
    };
    put_mask(out, tok, k);
    false
}

/// If the word starting after position `i` (after whitespace) is a unit word,
/// return where it ends, the kind, and its trailing punctuation.
pub(super) fn unit_after(line: &str, mut i: usize) -> Option<(usize, MaskKind, &str)> {
    let b = line.as_bytes();
    while i < b.len() && is_ws(b[i]) {
        i += 1;
    }
    let s = i;
    while i < b.len() && !is_ws(b[i]) {
        i += 1;
    }
    if s == i {
        return None;
    }
    let mut e = i;
    while e > s && is_trail_wrap(b[e - 1]) {
        e -= 1;
    }
    let kind = spaced_unit(&b[s..e])?;
    Some((i, kind, &line[e..i]))
}
