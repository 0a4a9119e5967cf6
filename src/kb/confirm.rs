//! A pattern's confirming regexes: built on first use, and for a short message with its long
//! bounded repetitions made unbounded.
//!
//! Why: a hit is confirmed by the pattern's regex on its message, and building that regex is
//! most of what a run spends beyond Hyperscan's pass when it sees failures (each pattern that
//! hits builds one). The KB bounds its gaps (`[^\n]{0,200}`, `\S{1,64}`) so that Hyperscan and
//! the regex agree on long lines, and a bounded repetition is compiled as one NFA state per
//! allowed iteration: most of the build, and of each search. On a message of `len` bytes a
//! repetition `x{m,n}` whose `x` matches at least one byte can iterate at most `len` times, so
//! when `n >= len` it matches exactly what `x{m,}` matches there, through the same paths in the
//! same order (the same match and the same captures): the relaxed regex, a few states instead
//! of hundreds, confirms that message. A longer message gets the exact regex.
//!
//! And most hits are not matches: Hyperscan scans for one required literal of a pattern
//! ([`crate::matcher::literals`]), and on the benchmark corpus four of five lines it reports
//! hold that literal without the rest of the pattern. Every literal the pattern's concatenation
//! requires is looked for first ([`Confirmers::may_match`]); a message without one of them
//! cannot match, and is turned down without the regex being built or run.

use std::sync::OnceLock;

use regex_automata::meta::{self, Regex};
use regex_syntax::hir::{Capture, Hir, HirKind, Repetition};

/// Upper bounds below this are kept as written: a handful of NFA states each.
const RELAX_FROM: u32 = 16;

/// Required literals shorter than this are not looked for first (`: ` is on every line).
const NEEDLE_MIN: usize = 3;

/// Sets of literals of which a message must hold one each.
type Needles = Box<[Box<[memchr::memmem::Finder<'static>]>]>;

/// The confirming regexes of one pattern, each built on its first use.
#[derive(Debug, Clone)]
pub(crate) struct Confirmers {
    /// The distinct upper bounds (`RELAX_FROM` or more) of the pattern's repetitions that can be
    /// relaxed, ascending.
    bounds: Box<[u32]>,
    /// `variants[i]` for `i < bounds.len()`: every such repetition with an upper bound of
    /// `bounds[i]` or more made unbounded, exact on a message of at most `bounds[i]` bytes. The
    /// last one is the exact regex.
    variants: Box<[OnceLock<Result<Regex, String>>]>,
    /// Sets of literals of which every match contains one each, the likeliest to fail first.
    /// Found on the pattern's first hit, as its regexes are built on first use.
    needles: OnceLock<Needles>,
}

impl Confirmers {
    /// None built yet.
    pub(crate) fn new(hir: &Hir) -> Confirmers {
        let mut bounds = Vec::new();
        relaxable_bounds(hir, &mut bounds);
        bounds.sort_unstable();
        bounds.dedup();
        let variants = (0..=bounds.len()).map(|_| OnceLock::new()).collect();
        Confirmers {
            bounds: bounds.into_boxed_slice(),
            variants,
            needles: OnceLock::new(),
        }
    }

    /// Whether `message` holds every literal a match requires: `false` proves no match.
    pub(crate) fn may_match(&self, hir: &Hir, message: &[u8]) -> bool {
        self.needles
            .get_or_init(|| needles(hir))
            .iter()
            .all(|set| set.iter().any(|n| n.find(message).is_some()))
    }

    /// The exact regex; the reason when the regex crate rejects it.
    pub(crate) fn exact<'a>(&'a self, hir: &Hir, source: &str) -> Result<&'a Regex, &'a str> {
        let last = self.variants.len() - 1;
        self.variants[last]
            .get_or_init(|| {
                let built = build_regex(hir);
                if let Err(why) = &built {
                    tracing::warn!(pattern = %source, %why, "a KB pattern cannot confirm its hits");
                }
                built
            })
            .as_ref()
            .map_err(String::as_str)
    }

    /// The regex that confirms a message of `len` bytes and its variant's number (captures made
    /// for one variant are for that variant only): the relaxed one where the message is short
    /// enough, else the exact one.
    pub(crate) fn for_len<'a>(
        &'a self,
        hir: &Hir,
        source: &str,
        len: usize,
    ) -> (usize, Result<&'a Regex, &'a str>) {
        let i = self.bounds.partition_point(|&b| (b as usize) < len);
        // Every variant from `i` on is exact on this message: one already built serves (a
        // pattern seen on messages of many lengths builds few regexes, not one per length).
        let built = (i..self.bounds.len()).find_map(|j| match self.variants[j].get() {
            Some(Ok(regex)) => Some((j, regex)),
            _ => None,
        });
        if let Some((j, regex)) = built {
            return (j, Ok(regex));
        }
        if i < self.bounds.len() {
            let relaxed = self.variants[i].get_or_init(|| build_regex(&relax(hir, self.bounds[i])));
            if let Ok(regex) = relaxed {
                return (i, Ok(regex));
            }
        }
        (self.variants.len() - 1, self.exact(hir, source))
    }

    /// Whether any of the regexes has been built.
    #[cfg(test)]
    pub(crate) fn any_built(&self) -> bool {
        self.variants.iter().any(|v| v.get().is_some())
    }

    /// The lengths at which another variant takes over: each bound, and one more.
    #[cfg(test)]
    pub(crate) fn bounds(&self) -> &[u32] {
        &self.bounds
    }
}

/// Whether `rep` may be relaxed: a long upper bound, and each iteration takes at least a byte
/// (so a message of `len` bytes allows at most `len` iterations).
fn relaxable(rep: &Repetition) -> Option<u32> {
    let max = rep.max?;
    let takes_a_byte = rep.sub.properties().minimum_len().is_some_and(|l| l >= 1);
    (max >= RELAX_FROM && takes_a_byte).then_some(max)
}

/// The finders of [`required_literals`] worth looking for, the likeliest to fail first.
fn needles(hir: &Hir) -> Needles {
    let mut sets = Vec::new();
    required_literals(hir, &mut sets);
    // A set with a short literal in it says little; a long single literal says most.
    sets.retain(|set| set.iter().all(|n| n.len() >= NEEDLE_MIN));
    sets.sort_by_key(|set| (set.len(), std::cmp::Reverse(set.iter().map(Vec::len).min())));
    sets.dedup();
    sets.iter()
        .map(|set| {
            set.iter()
                .map(|n| memchr::memmem::Finder::new(n).into_owned())
                .collect()
        })
        .collect()
}

/// Sets of literals (case-sensitive bytes) of which every match of `hir` contains at least one
/// each: a part of a concatenation, a group, a repetition that runs at least once require what
/// their parts require; an alternation requires one of its branches' longest literals when each
/// branch requires one.
fn required_literals(hir: &Hir, out: &mut Vec<Vec<Vec<u8>>>) {
    match hir.kind() {
        HirKind::Literal(lit) => out.push(vec![lit.0.to_vec()]),
        HirKind::Concat(subs) => subs.iter().for_each(|h| required_literals(h, out)),
        HirKind::Capture(cap) => required_literals(&cap.sub, out),
        HirKind::Repetition(rep) if rep.min >= 1 => required_literals(&rep.sub, out),
        HirKind::Alternation(branches) => {
            let mut any = Vec::new();
            for branch in branches {
                let mut sets = Vec::new();
                required_literals(branch, &mut sets);
                // The branch's best single literal: the longest one it requires outright.
                let Some(best) = sets
                    .into_iter()
                    .filter(|set| set.len() == 1)
                    .flatten()
                    .max_by_key(Vec::len)
                else {
                    return;
                };
                any.push(best);
            }
            out.push(any);
        }
        HirKind::Repetition(_) | HirKind::Empty | HirKind::Class(_) | HirKind::Look(_) => {}
    }
}

fn relaxable_bounds(hir: &Hir, out: &mut Vec<u32>) {
    match hir.kind() {
        HirKind::Repetition(rep) => {
            out.extend(relaxable(rep));
            relaxable_bounds(&rep.sub, out);
        }
        HirKind::Capture(cap) => relaxable_bounds(&cap.sub, out),
        HirKind::Concat(subs) | HirKind::Alternation(subs) => {
            subs.iter().for_each(|h| relaxable_bounds(h, out))
        }
        HirKind::Empty | HirKind::Literal(_) | HirKind::Class(_) | HirKind::Look(_) => {}
    }
}

/// `hir` with every relaxable repetition whose upper bound is `from` or more made unbounded.
fn relax(hir: &Hir, from: u32) -> Hir {
    match hir.kind() {
        HirKind::Repetition(rep) => Hir::repetition(Repetition {
            min: rep.min,
            max: match relaxable(rep) {
                Some(max) if max >= from => None,
                _ => rep.max,
            },
            greedy: rep.greedy,
            sub: Box::new(relax(&rep.sub, from)),
        }),
        HirKind::Capture(cap) => Hir::capture(Capture {
            index: cap.index,
            name: cap.name.clone(),
            sub: Box::new(relax(&cap.sub, from)),
        }),
        HirKind::Concat(subs) => Hir::concat(subs.iter().map(|h| relax(h, from)).collect()),
        HirKind::Alternation(subs) => {
            Hir::alternation(subs.iter().map(|h| relax(h, from)).collect())
        }
        HirKind::Empty | HirKind::Literal(_) | HirKind::Class(_) | HirKind::Look(_) => hir.clone(),
    }
}

/// The confirming regex of a checked pattern.
pub(crate) fn build_regex(hir: &Hir) -> Result<Regex, String> {
    // Confirming runs once per hit line, a few hundred bytes, and each of hundreds of patterns
    // sees few lines: the lazy DFA's warm-up per pattern cost more than it saved (18 us per
    // hit on the benchmark corpus), so the meta engine runs without it (bounded backtracker,
    // PikeVM: no per-pattern warm-up). Without it every search is unanchored, which the
    // one-pass DFA never runs, so it is not built either. A regex is built the first time its
    // pattern hits in a run, so every run that sees a failure pays for building (docs/
    // performance.md).
    Regex::builder()
        .configure(
            meta::Config::new()
                .hybrid(false)
                .dfa(false)
                .onepass(false)
                .auto_prefilter(false),
        )
        .build_from_hir(&named_groups_only(hir, &mut 0))
        .map_err(|e| format!("the regex crate rejects it: {e}"))
}

/// `hir` with its unnamed groups made non-capturing and its named groups numbered again in
/// order. Only named groups are read back (an event's captures), and each capturing group is
/// NFA states and slots that every search of the pattern carries: the KB's alternations
/// `(a|b)` are most of its groups. Which text matches, and where each named group starts and
/// ends, do not change: capturing decides neither.
fn named_groups_only(hir: &Hir, next: &mut u32) -> Hir {
    match hir.kind() {
        HirKind::Capture(cap) => match &cap.name {
            None => named_groups_only(&cap.sub, next),
            Some(name) => {
                *next += 1;
                let index = *next;
                Hir::capture(Capture {
                    index,
                    name: Some(name.clone()),
                    sub: Box::new(named_groups_only(&cap.sub, next)),
                })
            }
        },
        HirKind::Repetition(rep) => Hir::repetition(Repetition {
            min: rep.min,
            max: rep.max,
            greedy: rep.greedy,
            sub: Box::new(named_groups_only(&rep.sub, next)),
        }),
        HirKind::Concat(subs) => {
            Hir::concat(subs.iter().map(|h| named_groups_only(h, next)).collect())
        }
        HirKind::Alternation(subs) => {
            Hir::alternation(subs.iter().map(|h| named_groups_only(h, next)).collect())
        }
        HirKind::Empty | HirKind::Literal(_) | HirKind::Class(_) | HirKind::Look(_) => hir.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kb::{checked_hir, KnowledgeBase};

    /// What a regex finds on `message`: the match and each named group's span.
    fn found(regex: &Regex, message: &[u8]) -> Option<Vec<Option<(usize, usize)>>> {
        let mut caps = regex.create_captures();
        regex.captures(message, &mut caps);
        caps.is_match().then(|| {
            (0..caps.group_len())
                .map(|i| caps.get_group(i).map(|s| (s.start, s.end)))
                .collect()
        })
    }

    /// Every variant that may confirm `message` finds what the exact regex finds, and a
    /// message the exact regex matches passes the required-literal check.
    fn agree(confirmers: &Confirmers, hir: &Hir, source: &str, message: &[u8]) -> usize {
        let exact = confirmers.exact(hir, source).expect("builds");
        let want = found(exact, message);
        if want.is_some() {
            assert!(
                confirmers.may_match(hir, message),
                "{source:?} matches {:?} but its literals turn it down",
                String::from_utf8_lossy(message)
            );
        }
        let mut compared = 0;
        for (i, &bound) in confirmers.bounds.iter().enumerate() {
            if (bound as usize) < message.len() {
                continue;
            }
            let relaxed = confirmers.variants[i]
                .get_or_init(|| build_regex(&relax(hir, bound)))
                .as_ref()
                .expect("builds");
            assert_eq!(
                found(relaxed, message),
                want,
                "{source:?} relaxed from {bound} on {:?}",
                String::from_utf8_lossy(message)
            );
            compared += 1;
        }
        compared
    }

    #[test]
    fn a_relaxed_regex_finds_what_the_exact_one_finds_on_a_short_enough_message() {
        let source = r"foo[^\n]{0,20}bar(?P<n>\d{1,30})(?:x{2,40}|y)?";
        let hir = checked_hir(source).expect("valid");
        let confirmers = Confirmers::new(&hir);
        assert_eq!(confirmers.bounds(), &[20, 30, 40]);
        let messages: [&[u8]; 6] = [
            b"foo bar12",
            b"foo 0123456789012345678 bar7xxx",
            b"foo 01234567890123456789 bar7",
            b"foobar1234567890123456789012345678901234",
            b"xx foo bar99yy foo  bar1",
            b"foo bar",
        ];
        let compared: usize = messages
            .iter()
            .map(|m| agree(&confirmers, &hir, source, m))
            .sum();
        assert!(compared >= 10, "{compared} comparisons");
        // A message longer than every bound gets the exact regex.
        let long = [b"foo bar1".as_slice(), &[b'z'; 64]].concat();
        assert_eq!(confirmers.for_len(&hir, source, long.len()).0, 3);
        assert_eq!(confirmers.for_len(&hir, source, 25).0, 1);
    }

    #[test]
    fn every_kb_pattern_relaxed_agrees_with_itself_on_its_examples() {
        let kb = KnowledgeBase::embedded().expect("the embedded KB loads");
        let mut compared = 0;
        for pattern in &kb.patterns {
            let entry = &kb.entries[pattern.entry];
            for line in entry.examples.iter().chain(&entry.negative_examples) {
                let record = crate::envelope::decode_raw(line.as_bytes());
                let parsed = pattern.parsed();
                compared += agree(
                    &parsed.confirmers,
                    &parsed.hir,
                    &pattern.source,
                    &record.message,
                );
            }
        }
        assert!(compared > 1_000, "{compared} comparisons");
    }

    #[test]
    fn a_message_without_a_required_literal_is_turned_down_before_any_regex_is_built() {
        let source = r"NCCL WARN [^\n]{0,200}(?:Connection refused|No route to host)(?P<x>!)?";
        let hir = checked_hir(source).expect("valid");
        let confirmers = Confirmers::new(&hir);
        assert!(!confirmers.may_match(&hir, b"NCCL WARN socket: Connection reset"));
        assert!(!confirmers.may_match(&hir, b"NCCL INFO: Connection refused"));
        assert!(!confirmers.any_built());
        assert!(confirmers.may_match(&hir, b"NCCL WARN socket: No route to host"));
        // A branch without a literal of its own makes the alternation require nothing.
        let hir = checked_hir(r"error: (?:disk full|\d+)").expect("valid");
        let confirmers = Confirmers::new(&hir);
        assert!(confirmers.may_match(&hir, b"error: 28"));
        assert!(!confirmers.may_match(&hir, b"warning: 28"));
    }
}
