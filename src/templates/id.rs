//! Stable identifiers: FNV-1a 64-bit hashing, written out here.
//!
//! Why hand-written: template ids are shown to people, stored in KB drafts and
//! compared across runs and releases, so the hash must never change. std's
//! `DefaultHasher` is explicitly unspecified and may change between Rust
//! releases; FNV-1a is a fixed, documented function (offset basis
//! 0xcbf29ce484222325, prime 0x100000001b3) that is fast on short strings.

use std::fmt;

/// FNV-1a 64 offset basis.
pub(crate) const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
/// FNV-1a 64 prime.
pub(crate) const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// Feed one byte into an FNV-1a state.
#[inline]
pub(crate) fn fnv1a_byte(h: u64, b: u8) -> u64 {
    (h ^ u64::from(b)).wrapping_mul(FNV_PRIME)
}

/// FNV-1a 64 of a byte string.
#[inline]
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h = FNV_OFFSET;
    for &b in bytes {
        h = fnv1a_byte(h, b);
    }
    h
}

/// A template id: FNV-1a 64 of the template text at the time the template was
/// born, printed as 16 lowercase hex digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TemplateId(pub u64);

impl TemplateId {
    /// The id for a template text.
    pub fn of(text: &str) -> TemplateId {
        TemplateId(fnv1a(text.as_bytes()))
    }
}

impl fmt::Display for TemplateId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// Fast, non-cryptographic hash of a whole masked line, used only as the key
/// of the in-memory exact-match cache (never shown, never persisted): 8 bytes
/// per step instead of one.
#[inline]
pub(crate) fn line_key(bytes: &[u8]) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut h: u64 = (bytes.len() as u64).wrapping_mul(K);
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        h = (h ^ u64::from_le_bytes(w)).wrapping_mul(K).rotate_left(29);
    }
    let rem = chunks.remainder();
    if !rem.is_empty() {
        let mut w = [0u8; 8];
        w[..rem.len()].copy_from_slice(rem);
        h = (h ^ u64::from_le_bytes(w)).wrapping_mul(K).rotate_left(29);
    }
    // final avalanche (from splitmix64)
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_known_vectors() {
        // Published FNV-1a 64 test vectors.
        assert_eq!(fnv1a(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a(b"a"), 0xaf63dc4c8601ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x85944171f73967e8);
    }

    #[test]
    fn id_prints_16_hex_digits() {
        assert_eq!(TemplateId(0xab).to_string(), "00000000000000ab");
        assert_eq!(TemplateId::of("a").to_string(), "af63dc4c8601ec8c");
    }

    #[test]
    fn line_key_separates_lengths_and_tails() {
        assert_ne!(line_key(b"abcdefgh"), line_key(b"abcdefgh\0"));
        assert_ne!(line_key(b"x <NUM> y"), line_key(b"x <HEX> y"));
        assert_eq!(line_key(b"same text"), line_key(b"same text"));
    }
}
