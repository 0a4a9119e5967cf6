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
    words_hash(bytes, 0, |w| w)
}

/// Fast hash of a raw line with every digit 1-9 read as `1`: lines that differ only in which
/// non-zero digits they hold share a shape key. Neither the masker nor the error-line gate
/// reads a digit's value, only whether a byte is a digit and whether a number is all zeros
/// (`0 errors`, `exit code 0`, the `0x` of a hex value), so two lines with one shape key mask
/// to one template key and get one gate verdict; the caches keyed by it
/// ([`super::Miner::observe`], [`super::FilterMemo`]) skip that work for the many lines of a
/// log that repeat a message with other numbers (ranks, timestamps, pids, sizes). Like
/// [`line_key`], only ever an in-memory key; the two never share a map.
#[inline]
pub(crate) fn shape_key(bytes: &[u8]) -> u64 {
    words_hash(bytes, 0x5eed, fold_digits)
}

/// The hash behind [`line_key`] and [`shape_key`]: eight bytes a step, each word passed
/// through `word` first, then splitmix64's final avalanche; `seed` keeps the two apart.
#[inline(always)]
fn words_hash(bytes: &[u8], seed: u64, word: impl Fn(u64) -> u64) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut h: u64 = (bytes.len() as u64).wrapping_mul(K) ^ seed;
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        h = (h ^ word(u64::from_le_bytes(w)))
            .wrapping_mul(K)
            .rotate_left(29);
    }
    let rem = chunks.remainder();
    if !rem.is_empty() {
        let mut w = [0u8; 8];
        w[..rem.len()].copy_from_slice(rem);
        h = (h ^ word(u64::from_le_bytes(w)))
            .wrapping_mul(K)
            .rotate_left(29);
    }
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// The eight bytes of `x` with each of `1`..=`9` replaced by `1` (SWAR: exact per byte).
#[inline]
fn fold_digits(x: u64) -> u64 {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    // high bit of each byte that is < 0x80 and in '1'..='9' (0x31..=0x39)
    let low7 = x & !HI;
    let ge = (low7 + LO * (0x80 - 0x31)) & HI; // byte >= 0x31
    let gt = (low7 + LO * (0x80 - 0x3a)) & HI; // byte >= 0x3a
    let hit = ge & !gt & !x & HI;
    let bytes = (hit >> 7) * 0xff;
    (x & !bytes) | ((LO * 0x31) & bytes)
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

    #[test]
    fn shape_key_folds_non_zero_digits_and_nothing_else() {
        let fold = |s: &[u8]| -> Vec<u8> {
            s.iter()
                .map(|&c| if (b'1'..=b'9').contains(&c) { b'1' } else { c })
                .collect()
        };
        // every byte value at every position of a word, against the byte-wise fold
        for v in 0..=255u8 {
            for pos in 0..9 {
                let mut a = b"ab0x7Z9:\xff ".to_vec();
                a[pos] = v;
                let mut w = [0u8; 8];
                w.copy_from_slice(&a[..8]);
                let mut f = [0u8; 8];
                f.copy_from_slice(&fold(&a[..8]));
                assert_eq!(
                    fold_digits(u64::from_le_bytes(w)),
                    u64::from_le_bytes(f),
                    "{a:?}"
                );
                assert_eq!(shape_key(&a), shape_key(&fold(&a)));
            }
        }
        assert_eq!(
            shape_key(b"rank 12 at 10:42:17"),
            shape_key(b"rank 93 at 70:45:87")
        );
        assert_ne!(shape_key(b"exit code 0"), shape_key(b"exit code 1"));
        assert_ne!(shape_key(b"0x1f"), shape_key(b"1x1f"));
        assert_ne!(shape_key(b"rank 1"), shape_key(b"rank 12"));
        assert_ne!(shape_key(b"abc"), line_key(b"abc"));
    }
}
