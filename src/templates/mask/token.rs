//! Tokens under construction: the skeleton hash and the writers of literal text and masks.
//!
//! Part of the masker ([`super`]): every byte the scanner writes to the output goes through
//! one of these writers, which keep the current token's skeleton hash (each masked piece one
//! marker byte, adjacent masks separated only by punctuation one marker) and whether the token
//! holds a mask or literal words.

use super::{MaskKind, SKEL_MARK};

/// Streaming skeleton hash: bytes are packed 8 at a time and mixed once per
/// 8 bytes (FNV's one multiply per byte was the masker's main cost). Only
/// compared within one process, never shown or stored, so it need not be
/// FNV; it is deterministic all the same.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) struct Sk {
    h: u64,
    acc: u64,
    n: u32,
}

const SK_K: u64 = 0x9e37_79b9_7f4a_7c15;

impl Sk {
    pub(super) const fn new() -> Sk {
        Sk {
            h: 0x243f_6a88_85a3_08d3,
            acc: 0,
            n: 0,
        }
    }
    #[inline]
    fn mix(&mut self, w: u64) {
        self.h = (self.h ^ w).wrapping_mul(SK_K).rotate_left(27);
    }
    #[inline]
    pub(super) fn byte(&mut self, b: u8) {
        self.acc |= u64::from(b) << (8 * self.n);
        self.n += 1;
        if self.n == 8 {
            let w = self.acc;
            self.mix(w);
            self.acc = 0;
            self.n = 0;
        }
    }
    #[inline]
    pub(super) fn bytes(&mut self, mut s: &[u8]) {
        while self.n != 0 && !s.is_empty() {
            self.byte(s[0]);
            s = &s[1..];
        }
        let mut chunks = s.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.mix(u64::from_le_bytes(w));
        }
        for &b in chunks.remainder() {
            self.byte(b);
        }
    }
    #[inline]
    pub(super) fn finish(self) -> u64 {
        let mut h = self.h ^ self.acc ^ (u64::from(self.n) << 59);
        h = h.wrapping_mul(SK_K);
        h ^= h >> 32;
        h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
        h ^ (h >> 29)
    }
}

/// Builds the current token: its skeleton hash, whether it holds a mask,
/// and whether it holds literal word characters (a token without any is a
/// "pure" value such as `<NUM>`, `(<SIZE>)` or `<IP>:<NUM>`).
pub(super) struct Tok {
    pub(super) skel: Sk,
    /// Skeleton state right after the latest mask while only separators
    /// followed it: a mask arriving now continues the same variable
    /// (`<IP>,<IP>`, `<IP>:<NUM>`, `<NUM>.<NUM>`), so the skeleton does not
    /// change.
    pub(super) after_mask: Option<Sk>,
    pub(super) var: bool,
    pub(super) words: bool,
    /// Until the first mask, the skeleton equals the output text, so it is
    /// not hashed piece by piece: `lazy` tokens are hashed in one pass from
    /// `start` (most tokens are plain words and never leave this state).
    pub(super) lazy: bool,
    pub(super) start: usize,
}

impl Tok {
    pub(super) fn new() -> Self {
        Tok {
            skel: Sk::new(),
            after_mask: None,
            var: false,
            words: false,
            lazy: true,
            start: 0,
        }
    }
    pub(super) fn pure(&self) -> bool {
        self.var && !self.words
    }
}

/// Skeleton hash of a token that is one variable and nothing else.
pub(crate) fn pure_skel() -> u64 {
    let mut h = Sk::new();
    h.byte(SKEL_MARK);
    h.finish()
}

#[inline]
fn hash_into(tok: &mut Tok, s: &str) {
    if !tok.lazy {
        tok.skel.bytes(s.as_bytes());
    }
}

/// Leave the lazy state: hash the text written so far for this token.
#[inline]
pub(super) fn sync(out: &str, tok: &mut Tok) {
    if tok.lazy {
        tok.skel
            .bytes(out.as_bytes().get(tok.start..).unwrap_or(&[]));
        tok.lazy = false;
    }
}

/// The token's final skeleton hash.
#[inline]
pub(super) fn finish(out: &str, tok: &Tok) -> u64 {
    if tok.lazy {
        let mut h = Sk::new();
        h.bytes(out.as_bytes().get(tok.start..).unwrap_or(&[]));
        h.finish()
    } else {
        tok.skel.finish()
    }
}

/// Literal separators or wrapping punctuation.
#[inline]
pub(super) fn lit_sep(out: &mut String, tok: &mut Tok, s: &str) {
    out.push_str(s);
    hash_into(tok, s);
}

/// Literal word characters.
#[inline]
pub(super) fn lit_word(out: &mut String, tok: &mut Tok, s: &str) {
    if s.is_empty() {
        return;
    }
    out.push_str(s);
    hash_into(tok, s);
    tok.words = true;
    tok.after_mask = None;
}

#[inline]
pub(super) fn put_mask(out: &mut String, tok: &mut Tok, k: MaskKind) {
    sync(out, tok);
    out.push_str(k.text());
    match tok.after_mask {
        Some(state) => tok.skel = state,
        None => tok.skel.byte(SKEL_MARK),
    }
    tok.after_mask = Some(tok.skel);
    tok.var = true;
}
