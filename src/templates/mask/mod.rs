//! Masking: replace the variable parts of a log line by typed placeholders.
//!
//! Why: a template miner can only group lines that share their constant
//! words, and the fastest, most robust way to expose those words is to remove
//! what obviously varies *before* any clustering: numbers, hex, IPs, hosts,
//! paths, UUIDs, sizes, durations, timestamps. Drain's published accuracy
//! depends on per-dataset regexes for exactly this; here one fixed, hand-written
//! scanner does it for every source (no regex engine: the scanner is a single
//! pass over the bytes and allocates nothing once `out` has grown).
//!
//! Rules, per whitespace-separated word:
//! - wrapping punctuation (`( [ { " '` in front, `) ] } " ' , ; : . ! ?` behind)
//!   is kept literally around the core;
//! - a core that is a URL, a path, a date/time or an IPv6 address as a whole is
//!   one mask;
//! - otherwise the core is cut at separators (`= : , ; ( ) [ ] { } " ' | < > @ # $ % & * ! ? ^`)
//!   and each piece is classified: number (with optional size/duration unit),
//!   `0x` hex, UUID, IPv4, path, date, long hex string, host name, `word<NUM>`
//!   (e.g. `rank3` -> `rank<NUM>`, `blk_-12` -> `blk_<NUM>`), and any other piece
//!   holding a digit becomes `<ID>`; digit-free pieces stay literal unless they
//!   are paths or dotted host names ending in a common top-level domain;
//! - a number followed by a unit word (`18846 bytes`, `5 sec`) is one mask;
//! - a run of adjacent words that are each a single mask (`0 1 2`,
//!   `18846 bytes (18.4 KB)`) forms ONE token, so variable-length lists of
//!   values do not change the token count the miner keys on.
//!
//! Besides the text, the masker reports every token with a *skeleton* hash: the
//! token with each masked piece replaced by one marker byte (0xFF, which never
//! occurs in UTF-8). The miner compares skeletons, not texts, so `<NUM>` and
//! `<HEX>` in the same slot, or `rank<NUM>` and `node-<NUM>`, count as the same
//! kind of variable, while `uid=<NUM>` and `euid=<NUM>` stay different.
//!
//! Limits: at most `max_line_bytes` bytes of the line are read (cut on a char
//! boundary), at most `max_tokens` tokens and about twice `max_line_bytes` of
//! output are produced; a longer line ends with the `<TRUNC>` token, so lines
//! that differ only past the limit group together and the cost per line is
//! bounded.
//!
//! Files: `bytes.rs` (byte classes, the eight-bytes-at-a-time word scan), `words.rs` (one word
//! -> literal text and masks), `kinds.rs` (value classification), `token.rs` (the token being
//! built: skeleton hash, writers); the line loop, run joining and limits are here.

mod bytes;
mod kinds;
mod token;
mod words;

use bytes::{is_ws, scan_word, CLASS};
pub(crate) use token::pure_skel;
use token::{finish, lit_sep, put_mask, Sk, Tok};
use words::{date_follows, is_date_name, mask_word, unit_after};

/// Default number of bytes of a line that [`mask`] reads.
pub const DEFAULT_MAX_LINE_BYTES: usize = 2048;
/// Default number of tokens that [`mask`] produces per line.
pub const DEFAULT_MAX_TOKENS: usize = 96;

/// The typed placeholders written by [`mask`]. `<*>` is not among them: it is
/// what the miner writes where lines of one template disagree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MaskKind {
    /// Integer or decimal number, optionally signed or with a comparator (`<1`).
    Num,
    /// `0x`-prefixed hex, or a hex string of 8+ characters with a digit.
    Hex,
    /// IPv4 or IPv6 address.
    Ip,
    /// Absolute or relative file path (`/a/b`, `./a`, `~/a`, `C:\a`).
    Path,
    /// URL (`scheme://...`).
    Url,
    /// Dotted host name (`node12.cluster.local`, `www.example.com`).
    Host,
    /// UUID (8-4-4-4-12 hex).
    Uuid,
    /// Number with a size unit (`10MB`, `18846 bytes`, `1.5 GiB`).
    Size,
    /// Number with a duration unit (`250ms`, `5 sec`, `1h2m`).
    Dur,
    /// Clock time or date (`21:42:00.429`, `2024-01-02`, `2024-01-02T03:04:05Z`).
    Time,
    /// Any other piece of a word that holds a digit (`v2.1`, `R02-M1`, `tty2x`).
    Id,
    /// The line was cut at `max_tokens` or `max_line_bytes`.
    Trunc,
}

impl MaskKind {
    /// The placeholder text, e.g. `<NUM>`.
    pub const fn text(self) -> &'static str {
        match self {
            MaskKind::Num => "<NUM>",
            MaskKind::Hex => "<HEX>",
            MaskKind::Ip => "<IP>",
            MaskKind::Path => "<PATH>",
            MaskKind::Url => "<URL>",
            MaskKind::Host => "<HOST>",
            MaskKind::Uuid => "<UUID>",
            MaskKind::Size => "<SIZE>",
            MaskKind::Dur => "<DUR>",
            MaskKind::Time => "<TIME>",
            MaskKind::Id => "<ID>",
            MaskKind::Trunc => "<TRUNC>",
        }
    }

    /// All placeholder texts, for consumers that parse templates back (for
    /// example to turn a template into a KB pattern with captures).
    pub const ALL: [MaskKind; 12] = [
        MaskKind::Num,
        MaskKind::Hex,
        MaskKind::Ip,
        MaskKind::Path,
        MaskKind::Url,
        MaskKind::Host,
        MaskKind::Uuid,
        MaskKind::Size,
        MaskKind::Dur,
        MaskKind::Time,
        MaskKind::Id,
        MaskKind::Trunc,
    ];
}

/// Byte that stands for a masked piece in skeleton hashes; never valid UTF-8.
pub(crate) const SKEL_MARK: u8 = 0xFF;

/// Bounds on the work done per line.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub max_line_bytes: usize,
    pub max_tokens: usize,
    /// Join runs of single-mask words into one token.
    pub collapse_runs: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
            max_tokens: DEFAULT_MAX_TOKENS,
            collapse_runs: true,
        }
    }
}

/// One token of the masked line: its byte range in the output, its skeleton
/// hash and whether it holds a mask.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Token {
    pub start: u32,
    pub end: u32,
    pub skel: u64,
    pub var: bool,
}

/// Receives the tokens as they are produced; `()` ignores them, which makes
/// the public [`mask`] as cheap as the miner's internal use.
pub(crate) trait TokenSink {
    fn push(&mut self, t: Token);
    /// The last token grew to `end` and now has skeleton `skel` (a run of
    /// single-mask words was joined).
    fn extend_last(&mut self, end: u32, skel: u64);
}

impl TokenSink for () {
    fn push(&mut self, _t: Token) {}
    fn extend_last(&mut self, _end: u32, _skel: u64) {}
}

impl TokenSink for Vec<Token> {
    fn push(&mut self, t: Token) {
        Vec::push(self, t);
    }
    fn extend_last(&mut self, end: u32, skel: u64) {
        if let Some(last) = self.last_mut() {
            last.end = end;
            last.skel = skel;
        }
    }
}

/// Mask the variable parts of `line` into `out` (which is cleared first).
///
/// Tokens are separated by single spaces in the output. Allocation-free once
/// `out` has the capacity of the longest masked line.
///
/// ```
/// # use faultline::templates::mask;
/// let mut out = String::new();
/// mask("conn to 10.0.0.7:8080 failed after 250ms (rank 3)", &mut out);
/// assert_eq!(out, "conn to <IP>:<NUM> failed after <DUR> (rank <NUM>)");
/// ```
pub fn mask(line: &str, out: &mut String) {
    out.clear();
    mask_into(line, Limits::default(), out, &mut ());
}

/// Cut `s` to at most `max` bytes on a char boundary.
pub(crate) fn truncate_str(s: &str, max: usize) -> (&str, bool) {
    if s.len() <= max {
        return (s, false);
    }
    let mut end = max;
    while end > 0 && !s.is_char_boundary(end) {
        end -= 1;
    }
    (&s[..end], true)
}

/// The scanner behind [`mask`]; appends to `out` and reports tokens to `sink`.
pub(crate) fn mask_into<S: TokenSink>(line: &str, lim: Limits, out: &mut String, sink: &mut S) {
    let (line, cut) = truncate_str(line, lim.max_line_bytes);
    let b = line.as_bytes();
    let base = out.len();
    let mut i = 0usize;
    let mut ntok = 0usize;
    // Whether the previous token was exactly one mask, for run collapsing.
    let mut prev_pure = false;
    let mut truncated = cut;
    loop {
        while i < b.len() && is_ws(b[i]) {
            i += 1;
        }
        if i >= b.len() {
            break;
        }
        let ws = i;
        let (end, interesting) = scan_word(b, i);
        i = end;
        let cls = if interesting {
            let mut c = 0u8;
            for &x in &b[ws..i] {
                c |= CLASS[x as usize];
            }
            c
        } else {
            0
        };
        // Masks can be longer than what they replace (`1` -> `<NUM>`), so the
        // output is bounded too: at most twice the input bytes read.
        if ntok >= lim.max_tokens || out.len() - base > 2 * lim.max_line_bytes {
            truncated = true;
            break;
        }
        let word = &line[ws..i];
        if out.len() > base {
            out.push(' ');
        }
        let start = out.len();
        let mut tok = Tok::new();
        tok.start = start;
        let wb = word.as_bytes();
        let ends_num = if wb.len() >= 3
            && wb[0].is_ascii_uppercase()
            && is_date_name(wb)
            && date_follows(b, i)
        {
            // `Fri Jul  1 07:57:30 2005`: names of days and months inside a
            // date are part of the timestamp
            put_mask(out, &mut tok, MaskKind::Time);
            false
        } else {
            mask_word(word, cls, out, &mut tok)
        };
        if ends_num {
            // "18846 bytes", "5 sec": a unit word after a bare number.
            if let Some((next_end, kind, post)) = unit_after(line, i) {
                let new_len = out.len() - MaskKind::Num.text().len();
                out.truncate(new_len);
                out.push_str(kind.text());
                lit_sep(out, &mut tok, post);
                i = next_end;
            }
        }
        let pure = tok.pure();
        if lim.collapse_runs && pure && prev_pure {
            // Join with the previous single-mask token: one variable slot.
            sink.extend_last(out.len() as u32, pure_skel());
        } else {
            let skel = if pure && lim.collapse_runs {
                // A lone mask in brackets, `(<NUM>)`, and a bare `<NUM>` are
                // the same kind of slot once runs are joined.
                pure_skel()
            } else {
                finish(out, &tok)
            };
            sink.push(Token {
                start: start as u32,
                end: out.len() as u32,
                skel,
                var: tok.var,
            });
            ntok += 1;
        }
        prev_pure = pure;
    }
    if truncated {
        if out.len() > base {
            out.push(' ');
        }
        let start = out.len();
        out.push_str(MaskKind::Trunc.text());
        let mut h = Sk::new();
        h.byte(0xFE);
        let skel = h.finish();
        sink.push(Token {
            start: start as u32,
            end: out.len() as u32,
            skel,
            var: true,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::bytes::{C_INTEREST, C_WS};
    use super::*;

    fn m(s: &str) -> String {
        let mut out = String::new();
        mask(s, &mut out);
        out
    }

    fn toks(s: &str) -> Vec<String> {
        let mut out = String::new();
        let mut v: Vec<Token> = Vec::new();
        mask_into(s, Limits::default(), &mut out, &mut v);
        v.iter()
            .map(|t| out[t.start as usize..t.end as usize].to_string())
            .collect()
    }

    #[test]
    fn numbers_hex_ip_uuid() {
        assert_eq!(m("took 12 steps"), "took <NUM> steps");
        assert_eq!(m("loss -0.25 lr 1e-4"), "loss <NUM> lr <NUM>");
        assert_eq!(m("addr 0x7f3a12"), "addr <HEX>");
        assert_eq!(m("id 54fadb412c4e40cdbaed9335e4c35a9e"), "id <HEX>");
        assert_eq!(m("from 10.1.2.3 port 22"), "from <IP> port <NUM>");
        assert_eq!(m("peer 10.1.2.3:5070"), "peer <IP>:<NUM>");
        assert_eq!(m("via fe80::1 up"), "via <IP> up");
        assert_eq!(m("ip 91.190.218.40:443 ok"), "ip <IP>:<NUM> ok");
        assert_eq!(m("req 38101a0b-2096-447d-96ea-a692162415ae"), "req <UUID>");
        assert_eq!(
            m("[instance: 38101a0b-2096-447d-96ea-a692162415ae]"),
            "[instance: <UUID>]"
        );
    }

    #[test]
    fn paths_hosts_urls() {
        assert_eq!(m("open /etc/httpd/conf/a.properties ok"), "open <PATH> ok");
        assert_eq!(m("node '/udev/vcs2'"), "node '<PATH>'");
        assert_eq!(m("see ./logs/x.txt"), "see <PATH>");
        assert_eq!(m("GET https://a.b/c?d=1 done"), "GET <URL> done");
        assert_eq!(m("via proxy.cse.cuhk.edu.hk:5070"), "via <HOST>:<NUM>");
        assert_eq!(m("host node12.cluster.local"), "host <HOST>");
        // a class name without a known top-level domain is not a host
        assert_eq!(m("in org.apache.Foo"), "in org.apache.Foo");
    }

    #[test]
    fn sizes_durations_times() {
        assert_eq!(m("alloc 10MB"), "alloc <SIZE>");
        assert_eq!(
            m("sent 18846 bytes (18.4 KB) ok"),
            "sent <SIZE> (<SIZE>) ok"
        );
        assert_eq!(m("after 250ms"), "after <DUR>");
        assert_eq!(m("lifetime <1 sec"), "lifetime <DUR>");
        assert_eq!(m("timeout 1h2m3s"), "timeout <DUR>");
        assert_eq!(m("at 21:42:00.429 x"), "at <TIME> x");
        assert_eq!(m("on 2024-01-02T03:04:05Z"), "on <TIME>");
        assert_eq!(
            m("E1129 21:42:00.429 1 nccl.cc:12] boom"),
            "E<NUM> <TIME> <NUM> <HOST>:<NUM>] boom"
        );
        assert_eq!(
            m("at Fri Jul  1 07:57:30 2005"),
            "at <TIME> <TIME> <NUM> <TIME> <NUM>"
        );
        assert_eq!(m("May I help"), "May I help");
        assert_eq!(m("t 20171223-22:15:29:606 x"), "t <TIME> x");
        assert_eq!(m("size 93.0 B, free 5.2 KB"), "size <SIZE>, free <SIZE>");
    }

    #[test]
    fn key_values_and_ranks() {
        assert_eq!(
            m("uid=0 euid=0 rhost=1.2.3.4"),
            "uid=<NUM> euid=<NUM> rhost=<IP>"
        );
        assert_eq!(
            m("[rank3] cuda:0 node-246"),
            "[rank<NUM>] cuda:<NUM> node-<NUM>"
        );
        assert_eq!(m("block blk_-69522958"), "block blk_<NUM>");
        assert_eq!(m("ver v2.1.0-rc1 on eth0"), "ver <ID> on eth<NUM>");
    }

    #[test]
    fn runs_of_masks_are_one_token() {
        assert_eq!(
            toks("REPORT : 7007 5002 150089 240"),
            vec!["REPORT", ":", "<NUM> <NUM> <NUM> <NUM>"]
        );
        assert_eq!(
            toks("x 451 bytes (1.1 KB) sent"),
            vec!["x", "<SIZE> (<SIZE>)", "sent"]
        );
        // same skeleton for a run and for a single value
        let mut out = String::new();
        let mut a: Vec<Token> = Vec::new();
        mask_into("v 1 2 3", Limits::default(), &mut out, &mut a);
        let mut b: Vec<Token> = Vec::new();
        out.clear();
        mask_into("v 0x1", Limits::default(), &mut out, &mut b);
        assert_eq!(a.len(), 2);
        assert_eq!(a[1].skel, b[1].skel);
    }

    #[test]
    fn empty_values_and_value_lists() {
        let mut out = String::new();
        let mut a: Vec<Token> = Vec::new();
        mask_into("from 1.2.3.4 () at x", Limits::default(), &mut out, &mut a);
        let mut b: Vec<Token> = Vec::new();
        out.clear();
        mask_into(
            "from 1.2.3.4 (a.example.net) at x",
            Limits::default(),
            &mut out,
            &mut b,
        );
        let sa: Vec<u64> = a.iter().map(|t| t.skel).collect();
        let sb: Vec<u64> = b.iter().map(|t| t.skel).collect();
        assert_eq!(sa, sb, "an empty value and a value are the same slot");
        // `ruser=` and `ruser=<NUM>`; `<IP>,<IP>` and `<IP>`
        out.clear();
        let mut c: Vec<Token> = Vec::new();
        mask_into(
            "ruser= 10.0.0.1,10.0.0.2",
            Limits::default(),
            &mut out,
            &mut c,
        );
        out.clear();
        let mut d: Vec<Token> = Vec::new();
        mask_into("ruser=5 10.0.0.1", Limits::default(), &mut out, &mut d);
        assert_eq!(c[0].skel, d[0].skel);
        assert_eq!(c[1].skel, d[1].skel);
        // a list of numbered names is one run, whatever its length
        assert_eq!(toks("name an14 an15 an16 ok").len(), 3);
    }

    #[test]
    fn skeletons_keep_keys_apart() {
        let mut out = String::new();
        let mut v: Vec<Token> = Vec::new();
        mask_into("uid=1 euid=2 uid=0x3", Limits::default(), &mut out, &mut v);
        assert_ne!(v[0].skel, v[1].skel);
        assert_eq!(
            v[0].skel, v[2].skel,
            "NUM and HEX in the same slot share a skeleton"
        );
        assert!(v.iter().all(|t| t.var));
    }

    #[test]
    fn plain_words_untouched_and_whitespace_normalised() {
        assert_eq!(
            m("  Connection   reset by\tpeer  "),
            "Connection reset by peer"
        );
        assert_eq!(m(""), "");
        assert_eq!(m("ünïcödé wörds"), "ünïcödé wörds");
    }

    #[test]
    fn limits_bound_the_work() {
        let long: String = "word ".repeat(500);
        let mut out = String::new();
        let mut v: Vec<Token> = Vec::new();
        mask_into(&long, Limits::default(), &mut out, &mut v);
        assert_eq!(v.len(), DEFAULT_MAX_TOKENS + 1);
        assert!(out.ends_with("<TRUNC>"));
        let huge = "é".repeat(5000);
        mask(&huge, &mut out);
        assert!(out.len() <= DEFAULT_MAX_LINE_BYTES + 8);
        // one long run of values: the output stays bounded although every
        // `1` becomes `<NUM>`
        let ones = "1 ".repeat(5000);
        mask(&ones, &mut out);
        assert!(
            out.len() <= 2 * DEFAULT_MAX_LINE_BYTES + 16,
            "{}",
            out.len()
        );
        assert!(out.ends_with("<TRUNC>"));
    }

    #[test]
    fn word_scan_matches_the_byte_classes() {
        // every byte value at every offset of a word, against the table
        for len in 1..20usize {
            for pos in 0..len {
                for v in 0..=255u8 {
                    let mut w = vec![b'a'; len];
                    w[pos] = v;
                    w.extend_from_slice(b" tail9");
                    let (end, intr) = scan_word(&w, 0);
                    let exp_end = w
                        .iter()
                        .position(|&c| CLASS[c as usize] & C_WS != 0)
                        .unwrap_or(w.len());
                    let exp_intr = w[..exp_end]
                        .iter()
                        .any(|&c| CLASS[c as usize] & C_INTEREST != 0);
                    assert_eq!(
                        (end, intr),
                        (exp_end, exp_intr),
                        "len {len} pos {pos} byte {v}"
                    );
                }
            }
        }
    }

    #[test]
    fn no_allocation_once_grown() {
        let mut out = String::with_capacity(256);
        mask("a 1 b 2 c /x/y 10.0.0.1", &mut out);
        let cap = out.capacity();
        let ptr = out.as_ptr();
        for _ in 0..100 {
            mask("a 1 b 2 c /x/y 10.0.0.1", &mut out);
        }
        assert_eq!(out.capacity(), cap);
        assert_eq!(out.as_ptr(), ptr);
    }
}
