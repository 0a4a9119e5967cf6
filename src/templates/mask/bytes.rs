//! Bytes: the class table and the word scan, the masker's inner loop.
//!
//! Part of the masker ([`super`]). One table lookup classifies a byte (whitespace, digit,
//! separator, "worth a closer look"); [`scan_word`] finds the end of a word eight bytes at a
//! time (SWAR), since it touches every byte of every line.

/// Byte classes, one table lookup per byte.
pub(super) const C_WS: u8 = 1;
pub(super) const C_DIGIT: u8 = 2;
pub(super) const C_SEP: u8 = 4;
/// Bytes that make a word worth a closer look: digits, '/', '.', '\\'.
pub(super) const C_INTEREST: u8 = 8;
pub(super) const C_SLASH: u8 = 16;
pub(super) const C_COLON: u8 = 32;
pub(super) const C_DOT: u8 = 64;

pub(super) const CLASS: [u8; 256] = {
    let mut t = [0u8; 256];
    let ws = b" \t\r\n\x0b\x0c";
    let mut i = 0;
    while i < ws.len() {
        t[ws[i] as usize] |= C_WS;
        i += 1;
    }
    let mut d = b'0';
    while d <= b'9' {
        t[d as usize] |= C_DIGIT | C_INTEREST;
        d += 1;
    }
    let seps = b"=:,;()[]{}\"'|<>@#$%&*!?^";
    i = 0;
    while i < seps.len() {
        t[seps[i] as usize] |= C_SEP;
        i += 1;
    }
    t[b'/' as usize] |= C_INTEREST | C_SLASH;
    t[b'.' as usize] |= C_INTEREST | C_DOT;
    t[b'\\' as usize] |= C_INTEREST | C_SLASH;
    t[b':' as usize] |= C_COLON;
    t
};

#[inline]
pub(super) fn is_ws(b: u8) -> bool {
    CLASS[b as usize] & C_WS != 0
}

const LO: u64 = 0x0101_0101_0101_0101;
const HI: u64 = 0x8080_8080_8080_8080;

/// Bytes of `x` below `n` (n <= 128), as high bits; the lowest flagged byte
/// is always a true match (borrows only propagate upwards).
#[inline]
fn swar_less(x: u64, n: u8) -> u64 {
    x.wrapping_sub(LO * u64::from(n)) & !x & HI
}

/// Bytes of `x` strictly between `m` and `n` (m < n <= 128), exact per byte.
#[inline]
fn swar_between(x: u64, m: u8, n: u8) -> u64 {
    let low = x & (LO * 127);
    (LO * (127 + u64::from(n))).wrapping_sub(low) & !x & (low + LO * (127 - u64::from(m))) & HI
}

/// Bit mask of the bytes below byte index `p` of a little-endian word.
#[inline]
fn below(p: u32) -> u64 {
    if p >= 8 {
        u64::MAX
    } else {
        (1u64 << (8 * p)) - 1
    }
}

/// Find the end of the word starting at `i` (the next whitespace byte or the
/// end) and whether it holds a byte worth a closer look (a digit, `.`, `/`,
/// `\\`), eight bytes at a time: this scan touches every byte of every line,
/// so it is the masker's inner loop.
#[inline]
pub(super) fn scan_word(b: &[u8], mut i: usize) -> (usize, bool) {
    let mut interesting = false;
    while i + 8 <= b.len() {
        let mut w = [0u8; 8];
        w.copy_from_slice(&b[i..i + 8]);
        let x = u64::from_le_bytes(w);
        // candidates for whitespace: bytes <= 0x20
        let ws = swar_less(x, 0x21);
        // '.', '/', '0'..='9' are 0x2e..=0x39; '\\' is 0x5c
        let intr = swar_between(x, 0x2d, 0x3a) | swar_less(x ^ (LO * 0x5c), 1);
        if ws != 0 {
            let p = ws.trailing_zeros() / 8;
            let at = i + p as usize;
            if is_ws(b[at]) {
                interesting |= intr & below(p) != 0;
                return (at, interesting);
            }
            // a control byte that is not whitespace: part of the word
            interesting |= intr & below(p + 1) != 0;
            i = at + 1;
            continue;
        }
        interesting |= intr != 0;
        i += 8;
    }
    while i < b.len() {
        let c = CLASS[b[i] as usize];
        if c & C_WS != 0 {
            break;
        }
        interesting |= c & C_INTEREST != 0;
        i += 1;
    }
    (i, interesting)
}

#[inline]
pub(super) fn is_lead_wrap(b: u8) -> bool {
    matches!(b, b'(' | b'[' | b'{' | b'"' | b'\'')
}

#[inline]
pub(super) fn is_trail_wrap(b: u8) -> bool {
    matches!(
        b,
        b')' | b']' | b'}' | b'"' | b'\'' | b',' | b';' | b':' | b'.' | b'!' | b'?'
    )
}

#[inline]
pub(super) fn is_sep(b: u8) -> bool {
    CLASS[b as usize] & C_SEP != 0
}
