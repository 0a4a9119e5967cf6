//! A KB pattern from a mined template: literal parts escaped, each mask a named capture.
//!
//! Used by [`super::suggest`] to draft KB entries. A template reads like
//! `NCCL WARN connect to <IP>:<NUM> failed after <DUR>`: its tokens are separated by one
//! space, literal text is what every line of the template shares, and each placeholder stands
//! for a value ([`MaskKind`], or `<*>` for a position the miner found to vary). The pattern:
//! - starts at the first token holding a literal word of two letters or more, since KB
//!   patterns match anywhere in the message and should anchor on the message's stable words,
//!   not on a timestamp or a logger prefix;
//! - escapes literal text (non-ASCII and control bytes as `\xNN`, so both engines read it as
//!   the same bytes);
//! - turns each placeholder into a named capture with a class that fits its kind (names
//!   follow `kb/README.md` where the context says what the value is: `rank3` -> `rank`,
//!   `pid=12` -> `pid`, `exit code 1` -> `exit_code`; else the kind: `num`, `ip`, `file`...);
//! - allows a run of whitespace wherever the template has a space, including inside a token
//!   where the miner joined a run of values (`<NUM> <NUM> <NUM>`) or a date;
//! - lets `<*>` span one word ([`Variables::Word`]) or, when that misses some of the
//!   template's lines, several words ([`Variables::Span`]): a generalised position may be a
//!   joined run of values;
//! - stops at `<TRUNC>` and after [`MAX_PIECES`] space-separated pieces (a pattern matches
//!   anywhere, so the rest of the line need not be spelled out).

use crate::templates::MaskKind;

/// Most space-separated pieces of a template that a pattern spells out.
pub const MAX_PIECES: usize = 32;

/// How a `<*>` position is matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variables {
    /// One word: `\S+`.
    Word,
    /// One or more words: `\S+(?:\s+\S+)*`.
    Span,
}

/// A pattern drafted from a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DraftPattern {
    /// The regex, in the syntax Hyperscan and the `regex` crate share.
    pub source: String,
    /// Its capture names, in order.
    pub captures: Vec<String>,
    /// The template's pieces that the pattern spells out, as text (placeholders included).
    pieces: Vec<String>,
}

/// One part of a template piece.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part<'a> {
    Literal(&'a str),
    Mask(MaskKind),
    Star,
}

/// The pattern of `template`, or `None` when it has no literal word of two letters or more
/// to anchor on (a template of values alone would match almost any line).
pub fn from_template(template: &str, vars: Variables) -> Option<DraftPattern> {
    let pieces: Vec<&str> = template.split(' ').filter(|p| !p.is_empty()).collect();
    let start = pieces.iter().position(|p| has_word(p))?;
    let mut out = DraftPattern {
        source: String::new(),
        captures: Vec::new(),
        pieces: Vec::new(),
    };
    for (i, piece) in pieces.iter().enumerate().skip(start).take(MAX_PIECES) {
        if piece.starts_with(MaskKind::Trunc.text()) {
            break;
        }
        if i > start {
            out.source.push_str(r"\s+");
        }
        out.pieces.push((*piece).to_string());
        let before = |k: usize| pieces.get(i.wrapping_sub(k)).copied().unwrap_or("");
        let context = (before(1), before(2));
        write_piece(piece, context, vars, &mut out);
    }
    Some(out)
}

impl DraftPattern {
    /// Lines that share the pattern's literal head but not the rest, for `negative_examples`:
    /// the head without its last word and with another tail, the head alone, and the first word
    /// in an INFO line. The caller keeps the first one the pattern does not match.
    pub fn near_misses(&self) -> Vec<String> {
        let head: Vec<&str> = self
            .pieces
            .iter()
            .take_while(|p| parts(p).iter().all(|x| matches!(x, Part::Literal(_))))
            .map(String::as_str)
            .collect();
        let first_literal = self
            .pieces
            .first()
            .map(|p| match parts(p).first() {
                Some(Part::Literal(l)) => (*l).to_string(),
                _ => String::new(),
            })
            .unwrap_or_default();
        let mut out = Vec::new();
        if head.len() >= 2 {
            out.push(format!("{} completed", head[..head.len() - 1].join(" ")));
        }
        if !head.is_empty() && head.len() < self.pieces.len() {
            out.push(head.join(" "));
        }
        if let Some(word) = first_literal
            .split(|c: char| !c.is_alphanumeric())
            .find(|w| w.len() >= 2)
        {
            out.push(format!("INFO {word} ok"));
        }
        out.push("INFO all ranks healthy".to_string());
        out
    }
}

/// True when `piece` holds a literal run of two ASCII letters or more.
fn has_word(piece: &str) -> bool {
    parts(piece).iter().any(|p| match p {
        Part::Literal(l) => {
            let mut run = 0;
            l.bytes().any(|b| {
                run = if b.is_ascii_alphabetic() { run + 1 } else { 0 };
                run >= 2
            })
        }
        _ => false,
    })
}

/// `piece` cut into literal text and placeholders.
fn parts(piece: &str) -> Vec<Part<'_>> {
    let mut out = Vec::new();
    let mut rest = piece;
    let mut lit_start = 0;
    let mut at = 0;
    while at < rest.len() {
        let tail = &rest[at..];
        let found = if tail.starts_with('<') {
            if tail.starts_with("<*>") {
                Some((Part::Star, 3))
            } else {
                MaskKind::ALL
                    .iter()
                    .find(|k| tail.starts_with(k.text()))
                    .map(|k| (Part::Mask(*k), k.text().len()))
            }
        } else {
            None
        };
        match found {
            Some((part, len)) => {
                if at > lit_start {
                    out.push(Part::Literal(&rest[lit_start..at]));
                }
                out.push(part);
                rest = &rest[at + len..];
                at = 0;
                lit_start = 0;
            }
            None => at += tail.chars().next().map_or(1, char::len_utf8),
        }
    }
    if !rest.is_empty() {
        out.push(Part::Literal(rest));
    }
    out
}

/// Appends one piece: literal text escaped, placeholders as captures, inner spaces (a joined
/// run of values) as `\s+`. `context` is the two pieces before it.
fn write_piece(piece: &str, context: (&str, &str), vars: Variables, out: &mut DraftPattern) {
    // An empty value stands for the same slot as a filled one (`()` and `(host.net)`,
    // `ruser=` and `ruser=5`): let the value be there.
    if matches!(piece, "()" | "[]" | "{}") {
        let (open, close) = piece.split_at(1);
        escape_into(open, &mut out.source);
        out.source.push_str(r"\S*");
        escape_into(close, &mut out.source);
        return;
    }
    let parts = parts(piece);
    let mut prev_literal = "";
    for (k, part) in parts.iter().enumerate() {
        match part {
            Part::Literal(text) => {
                escape_into(text, &mut out.source);
                prev_literal = text;
            }
            Part::Mask(kind) => {
                let name = context_name(prev_literal, if k == 0 { context } else { ("", "") })
                    .unwrap_or(kind_name(*kind));
                push_capture(out, name, class(*kind));
                prev_literal = "";
            }
            Part::Star => {
                let name = context_name(prev_literal, if k == 0 { context } else { ("", "") })
                    .unwrap_or("value");
                let class = match vars {
                    Variables::Word => r"\S+",
                    Variables::Span => r"\S+(?:\s+\S+)*",
                };
                push_capture(out, name, class);
                prev_literal = "";
            }
        }
    }
    if parts.len() == 1 && piece.len() > 1 && piece.ends_with('=') {
        out.source.push_str(r"\S*");
    }
}

fn push_capture(out: &mut DraftPattern, name: &str, class: &str) {
    let mut unique = name.to_string();
    let mut n = 1;
    while out.captures.contains(&unique) {
        n += 1;
        unique = format!("{name}_{n}");
    }
    out.source.push_str(&format!("(?P<{unique}>{class})"));
    out.captures.push(unique);
}

/// Names a value by what precedes it, when that is a name `kb/README.md` (or common sense)
/// has for it: the literal just before it in its token (`rank3`, `pid=12`), else the previous
/// token (`rank 3`), or the two before (`exit code 1`).
fn context_name(prev_literal: &str, context: (&str, &str)) -> Option<&'static str> {
    let word = |s: &str| {
        s.trim_end_matches(|c: char| !c.is_ascii_alphanumeric())
            .rsplit(|c: char| !c.is_ascii_alphanumeric() && c != '_')
            .next()
            .unwrap_or("")
            .to_ascii_lowercase()
    };
    let own = word(prev_literal);
    let (w1, w2) = if own.is_empty() {
        (word(context.0), word(context.1))
    } else {
        (own, String::new())
    };
    if matches!(w1.as_str(), "code" | "status") && w2 == "exit" {
        return Some("exit_code");
    }
    Some(match w1.as_str() {
        "rank" => "rank",
        "local_rank" => "local_rank",
        "pid" => "pid",
        "tid" => "tid",
        "xid" => "xid",
        "seq" | "seqnum" => "seq",
        "device" | "dev" => "device",
        "node" => "node",
        "gpu" => "gpu",
        "signal" | "sig" => "signal",
        "port" => "port",
        "step" => "step",
        "epoch" => "epoch",
        "iteration" | "iter" => "iteration",
        "uid" => "uid",
        "errno" => "errno",
        "exitcode" | "returncode" => "exit_code",
        _ => return None,
    })
}

/// Capture name of a placeholder kind without context.
fn kind_name(kind: MaskKind) -> &'static str {
    match kind {
        MaskKind::Num => "num",
        MaskKind::Hex => "hex",
        MaskKind::Ip => "ip",
        MaskKind::Path => "file",
        MaskKind::Url => "url",
        MaskKind::Host => "host",
        MaskKind::Uuid => "uuid",
        MaskKind::Size => "size",
        MaskKind::Dur => "duration",
        MaskKind::Time => "time",
        MaskKind::Id => "id",
        MaskKind::Trunc => "rest",
    }
}

/// What each kind of value looks like in a line (see `templates::mask`): wide enough for
/// every spelling the masker folds into the kind, narrow enough to keep its shape.
fn class(kind: MaskKind) -> &'static str {
    match kind {
        MaskKind::Num => r"[<>~]?=?[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?",
        MaskKind::Hex => r"(?:0[xX])?[0-9a-fA-F]+",
        MaskKind::Ip => r"[0-9A-Fa-f:.]+(?:%\w+)?",
        MaskKind::Path | MaskKind::Url | MaskKind::Trunc => r"\S+",
        MaskKind::Host => r"[\w.-]+",
        MaskKind::Uuid => r"[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}",
        MaskKind::Size => r"[<>~]?=?\d+(?:\.\d+)?\s*[A-Za-z]+(?:/s)?",
        MaskKind::Dur => r"[<>~]?=?\d+(?:\.\d+)?\s*[A-Za-z]+(?:[\d.]+[A-Za-z]+)*",
        MaskKind::Time => r"[\w:.,/+-]+",
        MaskKind::Id => r"[^\s=:,;()\[\]{}|<>]+",
    }
}

/// Escapes literal text: regex metacharacters with a backslash; control, non-ASCII and
/// space bytes as `\xNN` (the KB's patterns are bytewise in both engines).
fn escape_into(text: &str, out: &mut String) {
    for &b in text.as_bytes() {
        match b {
            b'\\' | b'.' | b'+' | b'*' | b'?' | b'(' | b')' | b'|' | b'[' | b']' | b'{' | b'}'
            | b'^' | b'$' => {
                out.push('\\');
                out.push(char::from(b));
            }
            b'!'..=b'~' => out.push(char::from(b)),
            _ => out.push_str(&format!("\\x{b:02X}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src(t: &str) -> String {
        from_template(t, Variables::Word)
            .map(|p| p.source)
            .unwrap_or_default()
    }

    fn matches(t: &str, vars: Variables, line: &str) -> bool {
        let p = from_template(t, vars).expect("pattern");
        let re = crate::kb::compile_pattern(&p.source).expect("compiles");
        re.is_match(line.as_bytes())
    }

    #[test]
    fn literals_are_escaped_and_masks_captured() {
        assert_eq!(
            src("NCCL WARN connect to <IP>:<NUM> failed (rank <NUM>)"),
            r"NCCL\s+WARN\s+connect\s+to\s+(?P<ip>[0-9A-Fa-f:.]+(?:%\w+)?):(?P<num>[<>~]?=?[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)\s+failed\s+\(rank\s+(?P<rank>[<>~]?=?[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)\)"
        );
        assert_eq!(
            src("ab.c* costs $5 ünï"),
            r"ab\.c\*\s+costs\s+\$5\s+\xC3\xBCn\xC3\xAF"
        );
    }

    #[test]
    fn leading_values_are_dropped_and_truncation_stops() {
        let p = from_template(
            "<TIME> [<NUM>] kernel: oops at <HEX> <TRUNC>",
            Variables::Word,
        )
        .expect("pattern");
        assert!(p.source.starts_with(r"kernel:\s+oops"), "{}", p.source);
        assert_eq!(p.captures, vec!["hex"]);
        assert_eq!(from_template("<NUM> <IP> x <*>", Variables::Word), None);
    }

    #[test]
    fn capture_names_follow_the_context_and_stay_unique() {
        let p = from_template(
            "worker rank<NUM> pid=<NUM> exit code <NUM> took <DUR> and <DUR> on <PATH>",
            Variables::Word,
        )
        .expect("pattern");
        assert_eq!(
            p.captures,
            vec!["rank", "pid", "exit_code", "duration", "duration_2", "file"]
        );
    }

    #[test]
    fn patterns_match_the_lines_of_their_template() {
        let cases = [
            (
                "ERROR connect to <IP>:<NUM> failed after <DUR>",
                "ERROR connect to 10.0.0.1:29500   failed after 30 sec",
            ),
            (
                "sent <SIZE> (<SIZE>) to <HOST>",
                "sent 18846 bytes (18.4 KB) to n1.example.com",
            ),
            (
                "job <UUID> at <TIME> <TIME> <NUM> <TIME> <NUM> failed",
                "job 38101a0b-2096-447d-96ea-a692162415ae at Fri Jul  1 07:57:30 2005 failed",
            ),
            ("REPORT : <NUM> <NUM> <NUM> done", "REPORT : 1 2 3 done"),
            (
                "auth failure ruser= rhost=<IP>",
                "auth failure ruser=bob rhost=1.2.3.4",
            ),
            ("lookup () failed", "lookup (a.example.net) failed"),
            (
                "open <PATH> failed: errno <NUM>",
                "open /var/x.log failed: errno 2",
            ),
            (
                "ver <ID> on eth<NUM> failed",
                "ver v2.1.0-rc1 on eth0 failed",
            ),
        ];
        for (t, line) in cases {
            assert!(matches(t, Variables::Word, line), "{t} vs {line}");
        }
        // a generalised position that held a run of values needs a span
        assert!(!matches(
            "user <*> failed",
            Variables::Word,
            "user 1 2 3 failed"
        ));
        assert!(matches(
            "user <*> failed",
            Variables::Span,
            "user 1 2 3 failed"
        ));
    }

    #[test]
    fn near_misses_do_not_match() {
        for t in [
            "ERROR disk quota exceeded on <PATH>",
            "Segmentation fault (core dumped)",
            "watchdog <*> expired",
            "E<NUM> <TIME> <NUM> <HOST>:<NUM>] boom <NUM>",
        ] {
            let p = from_template(t, Variables::Word).expect("pattern");
            let re = crate::kb::compile_pattern(&p.source).expect("compiles");
            let miss = p
                .near_misses()
                .into_iter()
                .find(|m| !re.is_match(m.as_bytes()))
                .expect("a near miss that does not match");
            assert!(!miss.is_empty());
        }
    }
}
