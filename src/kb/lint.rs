//! Pattern cost lint: what makes a KB pattern expensive for a multi-pattern engine, found by a
//! small analysis of its syntax tree (`regex-syntax`'s HIR), for `kb check` warnings.
//!
//! Hyperscan scans fast when every pattern carries a literal factor it can look for first
//! (its literal prefilter): a pattern that, on some alternative, holds no literal of at least
//! [`MIN_LITERAL`] bytes runs its automaton on far more of the input. A pattern that starts
//! with an unbounded repeat (`.*foo`, `\s+x`, `(?:a|b)*y`) adds nothing to what it matches
//! (matches may start anywhere) but makes both engines track many start positions; it also
//! makes the confirming `regex` run scan back over the repeat on every hit line.
//!
//! Both findings are warnings, never errors (`kb check --warnings` lists them; the shipped KB
//! has none). A leading repeat that only feeds a capture is bounded instead of dropped: a host
//! name has at most 64 bytes (`HOST_NAME_MAX`), a process name 15.

use regex_syntax::hir::{Class, Hir, HirKind};

/// The shortest literal a pattern must contain on every alternative.
pub const MIN_LITERAL: usize = 3;

/// One cost finding of a pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finding {
    /// Some alternative of the pattern has no literal of [`MIN_LITERAL`] bytes; carries the
    /// longest literal that every match is sure to contain.
    ShortLiteral(usize),
    /// The pattern can start with an unbounded repeat.
    LeadingRepeat,
}

impl Finding {
    /// A short name of the finding.
    pub fn key(self) -> &'static str {
        match self {
            Finding::ShortLiteral(_) => "short_literal",
            Finding::LeadingRepeat => "leading_repeat",
        }
    }

    /// What is wrong, for the author.
    pub fn message(self) -> String {
        match self {
            Finding::ShortLiteral(n) => format!(
                "some alternative holds no literal of {MIN_LITERAL} bytes (longest sure literal: \
                 {n}): Hyperscan cannot prefilter it; add more of the message's fixed text, or \
                 repeat the text around a group in each branch (`ab(?:c|d+e)` -> `abc|abd+e`)"
            ),
            Finding::LeadingRepeat => "starts with an unbounded repeat (`.*`, `\\s+`, `\\d+`, \
                 `(...)*`): matches start anywhere already, so drop it or bound it \
                 (`\\d{1,6}`)"
                .to_string(),
        }
    }
}

/// Every cost finding of `source`; empty for a cheap pattern or one that does not parse
/// (parse errors are reported by validation).
pub fn findings(source: &str) -> Vec<Finding> {
    let Ok(hir) = regex_syntax::ParserBuilder::new()
        .unicode(false)
        .utf8(false)
        .build()
        .parse(source)
    else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let sure = sure_literal(&hir);
    if sure < MIN_LITERAL {
        out.push(Finding::ShortLiteral(sure));
    }
    if starts_unbounded(std::slice::from_ref(&hir)) {
        out.push(Finding::LeadingRepeat);
    }
    out
}

/// The length of the longest literal that every match of `hir` contains, taken per
/// alternative (the shortest over the branches of an alternation): what a literal prefilter
/// can count on.
pub fn sure_literal(hir: &Hir) -> usize {
    literals(hir).sure
}

/// What a node guarantees in literal text: its length when it matches one string only (case
/// aside), the literal every match starts and ends with, and the longest one inside.
#[derive(Debug, Clone, Copy)]
struct Lit {
    exact: Option<usize>,
    prefix: usize,
    suffix: usize,
    sure: usize,
}

impl Lit {
    const NONE: Lit = Lit {
        exact: None,
        prefix: 0,
        suffix: 0,
        sure: 0,
    };

    fn exact(n: usize) -> Lit {
        Lit {
            exact: Some(n),
            prefix: n,
            suffix: n,
            sure: n,
        }
    }
}

fn literals(hir: &Hir) -> Lit {
    match hir.kind() {
        HirKind::Empty | HirKind::Look(_) => Lit::exact(0),
        HirKind::Literal(lit) => Lit::exact(lit.0.len()),
        HirKind::Class(c) if literal_byte(c) => Lit::exact(1),
        HirKind::Class(_) => Lit::NONE,
        HirKind::Capture(cap) => literals(&cap.sub),
        HirKind::Repetition(rep) => {
            let sub = literals(&rep.sub);
            match (sub.exact, rep.max) {
                // `a{3}` is the literal `aaa`.
                (Some(n), Some(max)) if max == rep.min => Lit::exact(n * rep.min as usize),
                _ if rep.min == 0 => Lit::NONE,
                _ => Lit { exact: None, ..sub },
            }
        }
        // Each branch has a prefilter literal of its own: the weakest branch counts. Text
        // around the group joins its branches only when every branch is one literal (a set
        // of strings Hyperscan expands): `  (?:\^|~+\^)` leaves Hyperscan the two spaces
        // alone to look for, 4x slower over the whole KB than `  \^|  ~+\^`.
        HirKind::Alternation(branches) => {
            let all: Vec<Lit> = branches.iter().map(literals).collect();
            let min = |f: fn(&Lit) -> usize| all.iter().map(f).min().unwrap_or(0);
            let joins = all.iter().all(|l| l.exact.is_some());
            Lit {
                exact: None,
                prefix: if joins { min(|l| l.prefix) } else { 0 },
                suffix: if joins { min(|l| l.suffix) } else { 0 },
                sure: min(|l| l.sure),
            }
        }
        // Adjacent literal text joins into one run across the parts.
        HirKind::Concat(parts) => {
            let (mut run, mut best, mut prefix, mut exact) = (0, 0, None, true);
            for part in parts.iter().map(literals) {
                match part.exact {
                    Some(n) => run += n,
                    None => {
                        best = best.max(run + part.prefix).max(part.sure);
                        prefix.get_or_insert(run + part.prefix);
                        run = part.suffix;
                        exact = false;
                    }
                }
            }
            Lit {
                exact: exact.then_some(run),
                prefix: prefix.unwrap_or(run),
                suffix: run,
                sure: best.max(run),
            }
        }
    }
}

/// Whether a class is one byte, or one letter in either case: a literal to Hyperscan.
fn literal_byte(class: &Class) -> bool {
    let bytes: Vec<u8> = match class {
        Class::Bytes(c) => c
            .ranges()
            .iter()
            .flat_map(|r| r.start()..=r.end())
            .take(3)
            .collect(),
        Class::Unicode(c) => c
            .ranges()
            .iter()
            .flat_map(|r| r.start()..=r.end())
            .take(3)
            .filter_map(|ch| u8::try_from(u32::from(ch)).ok())
            .collect(),
    };
    match bytes[..] {
        [_] => true,
        [a, b] => a.is_ascii_alphabetic() && a.eq_ignore_ascii_case(&b),
        _ => false,
    }
}

/// Whether a match of the sequence `seq` can begin with an unbounded repeat: the first item
/// that consumes input, looking through groups, alternatives and optional items.
fn starts_unbounded(seq: &[Hir]) -> bool {
    let Some((first, rest)) = seq.split_first() else {
        return false;
    };
    match first.kind() {
        HirKind::Empty | HirKind::Look(_) => starts_unbounded(rest),
        HirKind::Literal(_) | HirKind::Class(_) => false,
        HirKind::Capture(cap) => {
            starts_unbounded(std::slice::from_ref(&cap.sub))
                || (can_be_empty(&cap.sub) && starts_unbounded(rest))
        }
        HirKind::Repetition(rep) => {
            rep.max.is_none()
                || starts_unbounded(std::slice::from_ref(&rep.sub))
                || ((rep.min == 0 || can_be_empty(&rep.sub)) && starts_unbounded(rest))
        }
        HirKind::Alternation(branches) => {
            branches
                .iter()
                .any(|b| starts_unbounded(std::slice::from_ref(b)))
                || (branches.iter().any(can_be_empty) && starts_unbounded(rest))
        }
        HirKind::Concat(parts) => {
            starts_unbounded(parts) || (can_be_empty(first) && starts_unbounded(rest))
        }
    }
}

fn can_be_empty(hir: &Hir) -> bool {
    hir.properties().minimum_len() == Some(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(p: &str) -> Vec<&'static str> {
        findings(p).into_iter().map(Finding::key).collect()
    }

    #[test]
    fn literal_patterns_are_clean() {
        assert!(findings(r"NVRM: Xid \(PCI:(?P<gpu>[0-9a-f:.]+)\): 79").is_empty());
        assert!(findings(r"(?:Rank (?P<rank>\d+)\] )?Watchdog caught").is_empty());
        assert!(
            findings(r"(?i)out of memory").is_empty(),
            "case-folded letters"
        );
        assert!(findings(r"(?:CUDA|NCCL) error: \d+").is_empty());
    }

    #[test]
    fn the_sure_literal_is_the_weakest_alternative() {
        let lit = |p: &str| {
            let hir = regex_syntax::ParserBuilder::new()
                .unicode(false)
                .utf8(false)
                .build()
                .parse(p)
                .expect("parses");
            sure_literal(&hir)
        };
        assert_eq!(lit("foobar"), 6);
        assert_eq!(lit(r"foo\d+barbaz"), 6);
        assert_eq!(
            lit("(?:foo|ab)x"),
            3,
            "each branch joined with what follows"
        );
        assert_eq!(
            lit(r"  (?:\^|~~*\^)"),
            2,
            "text around a group joins its branches only when each is a literal"
        );
        assert_eq!(lit(r"  \^|  ~+\^"), 3, "the same pattern, flattened");
        assert_eq!(lit(r"(?:CUDA|HIP) error"), 9, "literal branches join");
        assert_eq!(lit(r"(?:CUDA|HIP ?) error"), 6);
        assert_eq!(lit(r"(?:foo|a)\dx"), 1);
        assert_eq!(lit("a+bc"), 3);
        assert_eq!(lit("(?:foo|abcd)"), 3);
        assert_eq!(lit("(?i)killed"), 6);
        assert_eq!(lit("x(?:yz)?"), 1, "an optional literal is not sure");
        assert_eq!(lit("(?:ab){2}"), 4);
        assert_eq!(lit(r"\d+ [A-Z]+"), 1);
    }

    #[test]
    fn short_literals_warn() {
        assert_eq!(keys(r"\d+:\d+"), ["short_literal", "leading_repeat"]);
        assert_eq!(keys(r"(?:Killed|ab)\d"), ["short_literal"]);
        assert_eq!(
            keys(r"  (?:\^|~+\^)"),
            ["short_literal"],
            "the caret pattern before it was flattened"
        );
        assert!(keys(r"  \^|  ~+\^").is_empty());
        assert!(
            keys(r"(?:Killed|ab) x").is_empty(),
            "each branch joins the literal after it"
        );
        assert_eq!(keys(r"[A-Z][a-z]+Error: \w"), Vec::<&str>::new());
        assert!(matches!(findings(r"E\d"), ref f if f == &[Finding::ShortLiteral(1)]));
    }

    #[test]
    fn leading_unbounded_repeats_warn() {
        for p in [
            r".*foo bar",
            r"\s+Traceback",
            r"(?:a|b)*Traceback",
            r"(?P<rank>\d+): CUDA error",
            r"(?:\[rank\d+\]: )?\s*Traceback",
            r"(?:x|\w+) Traceback",
            r"(?:ab)?.+ Traceback",
        ] {
            assert!(keys(p).contains(&"leading_repeat"), "{p}");
        }
        for p in [
            r"\d{1,6}: CUDA error",
            r"(?:Rank \d+\] )?Watchdog",
            r"Traceback.*end",
            r"(?:\[rank\d+\]: )?Traceback",
            r"\bTraceback",
        ] {
            assert!(!keys(p).contains(&"leading_repeat"), "{p}");
        }
    }

    #[test]
    fn unparsable_patterns_are_left_to_validation() {
        assert!(findings("(unclosed").is_empty());
    }
}
