//! Required literals: for a pattern, a small set of strings one of which every match contains,
//! and the prefilter plan built from them.
//!
//! A prefiltered database ([`super::HyperscanMatcher::compile_plan`]) scans for these literals
//! instead of the patterns themselves: a literal's hit stands for every pattern that requires it,
//! and the engine confirms each of those on its line with the pattern's own regex, as it confirms
//! every hit anyway. So the hits are a superset of the patterns' own, and what the engine reports
//! is the same. Hyperscan scans a few thousand literals faster than the patterns they come from
//! (each pattern adds its own automaton behind its literals), and a pattern with no literal long
//! enough is scanned for itself.

use std::collections::{BTreeMap, BTreeSet};

use regex_syntax::hir::{Class, Hir, HirKind};

/// The shortest required literal a KB pattern is scanned by; a pattern with only shorter ones is
/// scanned for itself. Shorter literals hit more background lines, each a confirmation (and the
/// first one of a pattern builds its regex); longer ones leave more patterns whole. On the
/// benchmark corpus (docs/performance.md) 8 bytes gave 9 times the patterns' own hits and a slower
/// `scan`; 12 bytes gives 1.4 times.
pub const MIN_LEN: usize = 12;

/// Largest set of alternatives kept; beyond it a set stops growing by cross products. The
/// generated wrapper patterns (`tools/enumerations/gen_wrappers.py`) alternate 20 to 60 wrappers
/// before an error text: at 16 they had no set and Hyperscan compiled each whole, which made
/// the shipped KB's compile 1.05 s and a KB grown 10 times 78 s; at 64 they are scanned by their
/// wrappers' literals (0.74 s and a few seconds; the scan's speed the same, 2% fewer raw hits).
const MAX_SET: usize = 64;
/// A class of at most this many distinct bytes is spelled out as alternatives.
const MAX_CLASS: usize = 4;
/// Marks an element that matches an ASCII letter in either case (`(?i)`, `[Ee]`).
const CASELESS: u16 = 0x100;

/// One literal: bytes, some of them letters in either case ([`CASELESS`] | lowercase letter).
type Lit = Vec<u16>;
type Set = BTreeSet<Lit>;

/// What a sub-pattern tells about literals.
struct Info {
    /// Every string the sub-pattern can match, when there are few.
    exact: Option<Set>,
    /// The best set found such that every match contains one of its strings.
    required: Option<Set>,
}

/// How good a required set is for scanning: its shortest string first (longer literals fire
/// less often and let Hyperscan skip more), then fewer alternatives.
fn quality(set: &Set) -> (usize, std::cmp::Reverse<usize>) {
    let shortest = set.iter().map(Vec::len).min().unwrap_or(0);
    (shortest, std::cmp::Reverse(set.len()))
}

fn better(a: Option<Set>, b: Option<Set>) -> Option<Set> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if quality(&b) > quality(&a) { b } else { a }),
        (a, b) => a.or(b),
    }
}

fn single(lit: Lit) -> Set {
    std::iter::once(lit).collect()
}

/// Every `a` followed by every `b`, when that stays small.
fn cross(a: &Set, b: &Set) -> Option<Set> {
    if a.len() * b.len() > MAX_SET {
        return None;
    }
    Some(
        a.iter()
            .flat_map(|x| b.iter().map(move |y| x.iter().chain(y).copied().collect()))
            .collect(),
    )
}

/// A set usable as a required set: no empty string in it.
fn usable(set: Set) -> Option<Set> {
    (!set.is_empty() && set.iter().all(|s| !s.is_empty())).then_some(set)
}

/// The bytes of a small class; `[Ee]` is one caseless element.
fn class_set(class: &Class) -> Option<Set> {
    let mut bytes = BTreeSet::new();
    let mut add = |start: u32, end: u32| {
        if end > 0xff || end - start >= 2 * MAX_CLASS as u32 {
            return false;
        }
        bytes.extend((start..=end).map(|b| b as u8));
        bytes.len() <= 2 * MAX_CLASS
    };
    let small = match class {
        Class::Bytes(c) => c
            .iter()
            .all(|r| add(u32::from(r.start()), u32::from(r.end()))),
        Class::Unicode(c) => c
            .iter()
            .all(|r| add(u32::from(r.start()), u32::from(r.end()))),
    };
    if !small {
        return None;
    }
    let mut set = Set::new();
    for &b in &bytes {
        let other = if b.is_ascii_lowercase() {
            b.to_ascii_uppercase()
        } else {
            b.to_ascii_lowercase()
        };
        if other != b && bytes.contains(&other) {
            set.insert(vec![CASELESS | u16::from(b.to_ascii_lowercase())]);
        } else {
            set.insert(vec![u16::from(b)]);
        }
    }
    (set.len() <= MAX_CLASS).then_some(set)
}

fn info(hir: &Hir) -> Info {
    match hir.kind() {
        HirKind::Empty | HirKind::Look(_) => Info {
            exact: Some(single(Vec::new())),
            required: None,
        },
        HirKind::Literal(lit) => {
            let set = single(lit.0.iter().map(|&b| u16::from(b)).collect());
            Info {
                required: usable(set.clone()),
                exact: Some(set),
            }
        }
        HirKind::Class(class) => {
            let exact = class_set(class);
            Info {
                required: exact.clone().and_then(usable),
                exact,
            }
        }
        HirKind::Capture(cap) => info(&cap.sub),
        HirKind::Repetition(rep) => {
            let sub = info(&rep.sub);
            let exact = match (rep.min, rep.max) {
                (1, Some(1)) => sub.exact.clone(),
                (0, Some(1)) => sub.exact.as_ref().map(|e| {
                    let mut e = e.clone();
                    e.insert(Vec::new());
                    e
                }),
                _ => None,
            };
            let exact = exact.filter(|e| e.len() <= MAX_SET);
            let required = if rep.min == 0 {
                None
            } else {
                better(sub.exact.and_then(usable), sub.required)
            };
            Info {
                required: better(exact.clone().and_then(usable), required),
                exact,
            }
        }
        HirKind::Concat(subs) => {
            let mut required: Option<Set> = None;
            let mut run = single(Vec::new());
            let mut whole = true;
            for sub in subs.iter().map(info) {
                required = better(required, sub.required);
                match sub.exact.as_ref().and_then(|e| cross(&run, e)) {
                    Some(joined) => run = joined,
                    None => {
                        // The run so far is required; a new one starts with this part when its
                        // strings are few (only the cross product overflowed), else after it.
                        whole = false;
                        let next = sub.exact.unwrap_or_else(|| single(Vec::new()));
                        required = better(required, usable(std::mem::replace(&mut run, next)));
                    }
                }
            }
            let exact = whole.then(|| run.clone());
            Info {
                exact,
                required: better(required, usable(run)),
            }
        }
        HirKind::Alternation(subs) => {
            let infos: Vec<Info> = subs.iter().map(info).collect();
            let exact = infos.iter().try_fold(Set::new(), |mut all, i| {
                all.extend(i.exact.clone()?);
                (all.len() <= MAX_SET).then_some(all)
            });
            let required = infos.into_iter().try_fold(Set::new(), |mut all, i| {
                all.extend(better(i.exact.and_then(usable), i.required)?);
                (all.len() <= MAX_SET).then_some(all)
            });
            Info {
                required: better(exact.clone().and_then(usable), required),
                exact,
            }
        }
    }
}

/// The required literals of a parsed pattern, or `None` when no set of at most [`MAX_SET`]
/// strings of at least `min_len` bytes each is required.
fn required(hir: &Hir, min_len: usize) -> Option<Set> {
    let i = info(hir);
    let set = better(i.exact.and_then(usable), i.required)?;
    (quality(&set).0 >= min_len).then_some(set)
}

/// `source` parsed as the confirming regex reads it (bytes, no Unicode classes).
#[cfg(test)]
fn parse(source: &str) -> Option<Hir> {
    regex_syntax::ParserBuilder::new()
        .unicode(false)
        .utf8(false)
        .build()
        .parse(source)
        .ok()
}

/// A literal as a Hyperscan expression: bytes escaped, caseless letters as `[Xx]`.
fn expression(lit: &[u16]) -> String {
    lit.iter()
        .map(|&e| match u8::try_from(e & 0xff) {
            Ok(b) if e & CASELESS != 0 => {
                format!("[{}{}]", b.to_ascii_uppercase() as char, b as char)
            }
            Ok(b) if b.is_ascii_alphanumeric() => (b as char).to_string(),
            Ok(b) => format!("\\x{b:02x}"),
            Err(_) => String::new(),
        })
        .collect()
}

/// Whether `text` contains `lit`.
fn contains(text: &[u8], lit: &[u16]) -> bool {
    let fits = |w: &[u8]| {
        w.iter().zip(lit).all(|(&b, &e)| {
            if e & CASELESS != 0 {
                u16::from(b.to_ascii_lowercase()) == e & 0xff
            } else {
                u16::from(b) == e
            }
        })
    };
    lit.is_empty() || text.windows(lit.len()).any(fits)
}

/// What a prefiltered database scans for: its expressions, and which patterns each stands for.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Plan {
    /// Hyperscan expressions; the id of each is its index.
    pub expressions: Vec<String>,
    /// Expression `i` stands for the pattern ids `targets[start[i]..start[i + 1]]`.
    start: Vec<u32>,
    targets: Vec<u32>,
    /// Per pattern: its literals, or `None` when it is scanned for itself.
    #[serde(with = "literal_text")]
    literals: Vec<Option<Set>>,
}

/// A plan's literals kept as text, one character per byte (its caseless flag above the byte):
/// a kept plan is read at every start-up, and arrays of numbers took longer to read than
/// planning did.
mod literal_text {
    use super::{Lit, Set};
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub(super) fn serialize<S: Serializer>(
        literals: &[Option<Set>],
        s: S,
    ) -> Result<S::Ok, S::Error> {
        let text = |lit: &Lit| -> Result<String, S::Error> {
            lit.iter()
                .map(|&e| {
                    char::from_u32(u32::from(e))
                        .ok_or_else(|| serde::ser::Error::custom("a literal's unit is no char"))
                })
                .collect()
        };
        let mut out = Vec::with_capacity(literals.len());
        for set in literals {
            out.push(match set {
                Some(set) => Some(set.iter().map(text).collect::<Result<Vec<_>, _>>()?),
                None => None,
            });
        }
        out.serialize(s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Vec<Option<Set>>, D::Error> {
        let text: Vec<Option<Vec<String>>> = Deserialize::deserialize(d)?;
        let lit = |s: &str| -> Result<Lit, D::Error> {
            s.chars()
                .map(|c| {
                    u16::try_from(u32::from(c))
                        .map_err(|_| serde::de::Error::custom("a literal's unit is out of range"))
                })
                .collect()
        };
        text.into_iter()
            .map(|set| {
                set.map(|v| v.iter().map(|s| lit(s)).collect::<Result<Set, _>>())
                    .transpose()
            })
            .collect()
    }
}

impl Plan {
    /// Plans `patterns`: the first `literal` of them by their required literals of at least
    /// `min_len` bytes where they have such, every other one (and any that does not parse)
    /// as itself. The shipped path plans from the trees the KB parsed ([`Plan::parsed`]).
    #[cfg(test)]
    pub(crate) fn new<S: AsRef<str>>(patterns: &[S], literal: usize, min_len: usize) -> Plan {
        Self::build(patterns, |i| {
            (i < literal)
                .then(|| parse(patterns[i].as_ref()))
                .flatten()
                .and_then(|hir| required(&hir, min_len))
        })
    }

    /// [`Plan::new`] from patterns already parsed: the first `parsed.len()` of `patterns`,
    /// parsed as [`crate::kb::Pattern::hir`] holds them, by their literals.
    pub fn parsed<S: AsRef<str>>(patterns: &[S], parsed: &[&Hir], min_len: usize) -> Plan {
        Self::build(patterns, |i| {
            parsed.get(i).and_then(|hir| required(hir, min_len))
        })
    }

    fn build<S: AsRef<str>>(patterns: &[S], literals_of: impl Fn(usize) -> Option<Set>) -> Plan {
        let mut ids: BTreeMap<Lit, usize> = BTreeMap::new();
        let mut plan = Plan::default();
        let mut per_id: Vec<Vec<u32>> = Vec::new();
        for (i, source) in patterns.iter().enumerate() {
            let lits = literals_of(i);
            match &lits {
                Some(set) => {
                    for lit in set {
                        let id = *ids.entry(lit.clone()).or_insert_with(|| {
                            plan.expressions.push(expression(lit));
                            per_id.push(Vec::new());
                            per_id.len() - 1
                        });
                        per_id[id].push(i as u32);
                    }
                }
                None => {
                    plan.expressions.push(source.as_ref().to_string());
                    per_id.push(vec![i as u32]);
                }
            }
            plan.literals.push(lits);
        }
        for list in per_id {
            plan.start.push(plan.targets.len() as u32);
            plan.targets.extend(list);
        }
        plan.start.push(plan.targets.len() as u32);
        plan
    }

    /// The pattern ids a hit of expression `id` stands for.
    pub fn targets(&self, id: u32) -> &[u32] {
        let i = id as usize;
        match (self.start.get(i), self.start.get(i + 1)) {
            (Some(&a), Some(&b)) => self.targets.get(a as usize..b as usize).unwrap_or(&[]),
            _ => &[],
        }
    }

    /// Whether expression `id` is a required literal (else a pattern scanned for itself).
    pub fn is_literal(&self, id: u32) -> bool {
        self.targets(id)
            .first()
            .is_some_and(|&p| matches!(self.literals.get(p as usize), Some(Some(_))))
    }

    /// Whether the tables agree with each other (a plan read back from the cache is checked):
    /// one range per expression, in order, each naming patterns the plan has, and one literal
    /// slot per pattern.
    pub fn is_consistent(&self) -> bool {
        self.start.len() == self.expressions.len() + 1
            && self.start.first() == Some(&0)
            && self.start.last().map(|&l| l as usize) == Some(self.targets.len())
            && self.start.windows(2).all(|w| w[0] <= w[1])
            && self
                .targets
                .iter()
                .all(|&t| (t as usize) < self.literals.len())
    }

    /// How many patterns there are.
    pub fn patterns(&self) -> usize {
        self.literals.len()
    }

    /// How many patterns are scanned by their literals, and how many distinct literals.
    pub fn literal_counts(&self) -> (usize, usize) {
        let by_literal = self.literals.iter().flatten().count();
        let whole = self.literals.len() - by_literal;
        (by_literal, self.expressions.len() - whole)
    }

    /// Whether pattern `pattern` is found in `text` by this plan: always, when it is scanned
    /// for itself; else when `text` holds one of its literals. A line a pattern matches must
    /// pass: `faultline kb check` checks it on every example.
    pub fn passes(&self, pattern: usize, text: &[u8]) -> bool {
        match self.literals.get(pattern) {
            Some(Some(set)) => set.iter().any(|lit| contains(text, lit)),
            _ => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(p: &str, min_len: usize) -> Vec<String> {
        let hir = parse(p).expect("parses");
        required(&hir, min_len)
            .unwrap_or_default()
            .iter()
            .map(|l| expression(l))
            .collect()
    }

    #[test]
    fn the_longest_required_literal_is_chosen() {
        assert_eq!(
            req(r"NCCL WARN \w+ failed: timeout after \d+ ms", 1),
            [r"\x20failed\x3a\x20timeout\x20after\x20"]
        );
        assert_eq!(
            req(r"Xid \(PCI:[0-9a-f:.]+\): 79, pid=\d+", 1),
            [r"\x29\x3a\x2079\x2c\x20pid\x3d"]
        );
    }

    #[test]
    fn case_folds_letters_only_where_the_pattern_does() {
        assert_eq!(req(r"(?i)oom!", 1), ["[Oo][Oo][Mm]\\x21"]);
        assert_eq!(req(r"[Ee]rror: CUDA", 1), [r"[Ee]rror\x3a\x20CUDA"]);
    }

    #[test]
    fn alternatives_become_a_set_and_optional_parts_do_not_count() {
        assert_eq!(
            req(r"(?:Killed|Bus error) \(core", 1),
            [r"Bus\x20error\x20\x28core", r"Killed\x20\x28core"]
        );
        // Both `ab cd` and `cd` would do; one literal is fewer alternatives of the same length.
        assert_eq!(req(r"(?:ab )?cd", 1), ["cd"]);
        assert_eq!(req(r"(?:ab|cd)ef", 1), ["abef", "cdef"]);
        assert_eq!(req(r"a.{0,9}(?:bcdef)*", 1), ["a"]);
    }

    #[test]
    fn a_pattern_without_a_long_enough_literal_has_none() {
        assert_eq!(req(r"\d+\s+[a-z]+", 1), Vec::<String>::new());
        assert_eq!(req(r"ab\d+cd", 3), Vec::<String>::new());
        assert_eq!(req(r"ab\d+cde", 3), ["cde"]);
    }

    #[test]
    fn a_plan_maps_shared_literals_to_every_pattern_and_keeps_the_rest_whole() {
        let patterns = [r"boom \d+ failed", r"(?:x|y)boom \d+", r"\d+", r"gate word"];
        let plan = Plan::new(&patterns, 3, 4);
        assert_eq!(plan.literal_counts(), (2, 3));
        let of = |expr: &str| {
            let id = plan.expressions.iter().position(|e| e == expr).expect(expr);
            plan.targets(id as u32).to_vec()
        };
        assert_eq!(of(r"\x20failed"), [0]);
        assert_eq!(of(r"xboom\x20"), [1]);
        assert_eq!(of(r"\d+"), [2], "no literal: scanned for itself");
        assert_eq!(of("gate word"), [3], "past `literal`: scanned for itself");
        let literal = |expr: &str| {
            let id = plan.expressions.iter().position(|e| e == expr).expect(expr);
            plan.is_literal(id as u32)
        };
        assert!(literal(r"\x20failed") && literal(r"xboom\x20"));
        assert!(!literal(r"\d+") && !literal("gate word"));
        assert!(plan.passes(0, b"a boom 7 failed"));
        assert!(!plan.passes(0, b"boom 7 FAILED"));
        assert!(plan.passes(2, b"anything"));
    }
}
