//! Online log-template mining for lines the KB does not know (issue 16).
//!
//! A [`Miner`] turns a stream of lines into a bounded set of templates such as
//! `NCCL WARN connect to <IP>:<NUM> failed after <DUR>`, deterministically and
//! at line rate, so that unknown failures become countable, showable and
//! draftable as KB entries.
//!
//! Pipeline per line ([`Miner::observe`]):
//! 1. [`mask`] (in `mask.rs`) rewrites the variable parts as typed masks
//!    (`<NUM>`, `<HEX>`, `<IP>`, `<PATH>`, `<HOST>`, `<UUID>`, `<SIZE>`,
//!    `<DUR>`, `<TIME>`, `<URL>`, `<ID>`) and cuts the line into tokens with
//!    skeleton hashes; a run of values (`1 2 3`, `18846 bytes (18.4 KB)`) is
//!    one token.
//! 2. An exact-match cache (masked text -> template) answers the common case,
//!    a line whose masked form was seen before, with one hash lookup.
//! 3. Otherwise `tree.rs` finds the most similar template among those with
//!    the same token count and first token (then, more strictly, among those
//!    of the same length), generalises it where a masked slot disagrees,
//!    starts a sibling where a plain word disagrees (siblings merge once
//!    `min_distinct` different words were seen there), or creates a new
//!    template, evicting the least recently seen one when `max_templates` are
//!    live.
//!
//! [`looks_like_error`] (in `filter.rs`) decides which lines are worth mining
//! in the default (errors only) mode, and [`gate`] finds, in one Hyperscan
//! pass over a chunk, the lines that cannot be errors so they are never
//! decoded; `id.rs` holds the stable hash.
//!
//! Ids: a template's id is the FNV-1a 64 hash of its text *when it was born*
//! (its first line, masked), printed as 16 hex digits. When the template later
//! generalises, it keeps its id and [`Observed::changed`] is set, so events
//! and incidents that already cite the id stay valid; the current text is
//! always available from [`Miner::get`]. When siblings merge, the oldest keeps
//! its id and the others' ids resolve to it through [`Miner::resolve`]
//! (remembered for up to `MAX_MERGED_IDS` ids per template while it lives).
//! The same input in the same order gives the same ids in every run, build
//! and platform: no randomised hashing takes part in any decision, and ties
//! are broken by age.
//!
//! Cost (measured, see RESULTS.md): about 0.3 us per 70-byte line and 0.6 us
//! per 140-byte raw log line on one core, nearly all of it masking; about
//! 0.7 KB of heap per template on typical lines, example included (worst case
//! about 10 KB at the line limits); the exact-match cache and the shape cache
//! each hold at most `cache_entries` entries of 16 bytes (plus hash-map
//! overhead).

mod filter;
pub mod gate;
mod id;
mod mask;
mod tree;

pub use filter::{looks_like_error, FilterMemo};
pub use id::{fnv1a, TemplateId};
pub use mask::{mask, MaskKind, DEFAULT_MAX_LINE_BYTES, DEFAULT_MAX_TOKENS};
pub use tree::Template;

use id::{line_key, shape_key};
use mask::{mask_into, Limits, Token};
pub(crate) use tree::FastMap;
use tree::{Tree, TreeParams};

/// Parameters of the miner. `Default` is the single parameter set used for
/// every source (and the one measured on loghub-2.0).
#[derive(Debug, Clone, PartialEq)]
pub struct MinerConfig {
    /// Most live templates; the least recently seen is evicted beyond this.
    pub max_templates: usize,
    /// Share of positions (0..=1) on which a line must agree with a template
    /// (same skeleton, or a `<*>` position) to join it.
    pub similarity: f64,
    /// Bytes of a line that are read; the rest is ignored (`<TRUNC>`).
    pub max_line_bytes: usize,
    /// Tokens per line that are kept; the rest becomes `<TRUNC>`.
    pub max_tokens: usize,
    /// Bytes kept of each template's example line.
    pub max_example_bytes: usize,
    /// Entries of the exact-match cache (masked line -> template). The cache
    /// is emptied when full; that mostly costs speed, though a masked line
    /// seen again after a clear goes through the tree and may then pick a
    /// sibling that fits it equally well. Deterministic for a given config.
    pub cache_entries: usize,
    /// Treat a run of adjacent single-mask words (`1 2 3`,
    /// `18846 bytes (18.4 KB)`) as one variable token.
    pub collapse_runs: bool,
    /// Leading tokens that must agree exactly (as in Drain's tree depth):
    /// lines are only compared with templates of the same token count and the
    /// same first `prefix_tokens` skeletons.
    pub prefix_tokens: usize,
    /// Distinct constant values a position must show before it becomes
    /// `<*>`; below that, lines that differ there form sibling templates.
    /// 2 reproduces Drain (generalise on the first difference).
    pub min_distinct: usize,
    /// Share of positions a line must agree on to join a template whose
    /// leading tokens differ (searched only when its own bucket has no
    /// match); above 1.0 disables that search.
    pub cross_similarity: f64,
    /// Weight of a masked position agreeing with a masked position (a
    /// constant agreeing counts 1, a `<*>` position 0).
    pub var_weight: f64,
}

impl Default for MinerConfig {
    fn default() -> Self {
        MinerConfig {
            max_templates: 4096,
            similarity: 0.6,
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
            max_tokens: DEFAULT_MAX_TOKENS,
            max_example_bytes: 512,
            cache_entries: 65536,
            collapse_runs: true,
            prefix_tokens: 1,
            min_distinct: 4,
            cross_similarity: 0.7,
            var_weight: 0.5,
        }
    }
}

/// What [`Miner::observe`] did with a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observed {
    /// The template the line belongs to.
    pub id: TemplateId,
    /// The line created this template.
    pub is_new: bool,
    /// The line generalised the template's text (a position became `<*>`).
    pub changed: bool,
    /// Lines counted for this template so far, this one included.
    pub count: u64,
}

/// The online template miner. See the module documentation.
pub struct Miner {
    cfg: MinerConfig,
    tree: Tree,
    cache: FastMap<u64, (u32, u32)>,
    /// The same, keyed by the raw line's shape ([`id::shape_key`]): a line that repeats an
    /// earlier one with other numbers is not masked again (lines of one shape mask alike).
    shapes: FastMap<u64, (u32, u32)>,
    /// Tests compare against the miner without its shape cache.
    #[cfg(test)]
    no_shapes: bool,
    buf: String,
    toks: Vec<Token>,
    seq: u64,
}

impl Miner {
    /// A miner with the given parameters.
    pub fn new(cfg: MinerConfig) -> Miner {
        let tree = Tree::new(TreeParams {
            max_templates: cfg.max_templates.max(1),
            similarity: cfg.similarity,
            max_example_bytes: cfg.max_example_bytes,
            prefix_tokens: cfg.prefix_tokens,
            min_distinct: cfg.min_distinct,
            cross_similarity: cfg.cross_similarity,
            var_weight: cfg.var_weight,
        });
        Miner {
            cfg,
            tree,
            cache: FastMap::default(),
            shapes: FastMap::default(),
            #[cfg(test)]
            no_shapes: false,
            buf: String::with_capacity(256),
            toks: Vec::with_capacity(64),
            seq: 0,
        }
    }

    /// The parameters in use.
    pub fn config(&self) -> &MinerConfig {
        &self.cfg
    }

    /// Mine one line: returns its template id, whether the template is new or
    /// changed, and its count so far.
    pub fn observe(&mut self, line: &str) -> Observed {
        let seq = self.seq;
        self.seq += 1;
        let shape = shape_key(line.as_bytes());
        #[cfg(test)]
        if self.no_shapes {
            self.shapes.clear();
        }
        if let Some(seen) = self.cached(self.shapes.get(&shape).copied(), seq) {
            return seen;
        }
        self.buf.clear();
        self.toks.clear();
        let lim = Limits {
            max_line_bytes: self.cfg.max_line_bytes,
            max_tokens: self.cfg.max_tokens,
            collapse_runs: self.cfg.collapse_runs,
        };
        mask_into(line, lim, &mut self.buf, &mut self.toks);
        let key = line_key(self.buf.as_bytes());
        let known = self.cache.get(&key).copied();
        if let (Some(seen), Some(at)) = (self.cached(known, seq), known) {
            self.remember(shape, at, false);
            return seen;
        }
        let placed = self.tree.place(&self.buf, &self.toks, line, seq);
        let at = (placed.slot, self.tree.generation(placed.slot));
        self.remember(key, at, true);
        self.remember(shape, at, false);
        match self.tree.template(placed.slot) {
            Some(t) => Observed {
                id: t.id(),
                is_new: placed.is_new,
                changed: placed.changed,
                count: t.count(),
            },
            // unreachable in practice: `place` always leaves a live template
            None => Observed {
                id: TemplateId(0),
                is_new: placed.is_new,
                changed: placed.changed,
                count: 0,
            },
        }
    }

    /// The line's template when a cache entry `at` (slot, generation) is still live: the
    /// slot has not been reused since, so the line is counted there.
    fn cached(&mut self, at: Option<(u32, u32)>, seq: u64) -> Option<Observed> {
        let (slot, gen) = at?;
        if self.tree.generation(slot) != gen {
            return None;
        }
        let count = self.tree.hit(slot, seq);
        self.tree.template(slot).map(|t| Observed {
            id: t.id(),
            is_new: false,
            changed: false,
            count,
        })
    }

    /// Caches `at` under `key`, in the masked-line cache (`masked`) or the shape cache.
    ///
    /// Each cache is bounded: when full it starts over rather than track recency per entry,
    /// and the tree re-finds every template on the next miss. Emptying the masked-line cache
    /// empties the shape cache too, so that a shape is only ever cached while its masked line
    /// is: a line then lands where it would without the shape cache (after a clear, the tree
    /// may place a masked line in a sibling that fits it equally well, so a shape outliving its
    /// masked line could send the line elsewhere).
    fn remember(&mut self, key: u64, at: (u32, u32), masked: bool) {
        let cap = self.cfg.cache_entries.max(1);
        if masked {
            if self.cache.len() >= cap {
                self.cache.clear();
                self.shapes.clear();
            }
            self.cache.insert(key, at);
        } else {
            if self.shapes.len() >= cap {
                self.shapes.clear();
            }
            self.shapes.insert(key, at);
        }
    }

    /// The live template with this id.
    pub fn get(&self, id: TemplateId) -> Option<&Template> {
        self.tree.slot_of(id).and_then(|s| self.tree.template(s))
    }

    /// The live id that `id` stands for now: `id` itself, or the template it
    /// was merged into (ids of evicted templates resolve to themselves).
    pub fn resolve(&self, id: TemplateId) -> TemplateId {
        self.tree.resolve(id)
    }

    /// The live templates (in storage order, which is deterministic).
    pub fn iter(&self) -> impl Iterator<Item = &Template> {
        self.tree.iter()
    }

    /// Number of live templates (at most `max_templates`).
    pub fn len(&self) -> usize {
        self.tree.len()
    }

    /// True when no template is live.
    pub fn is_empty(&self) -> bool {
        self.tree.len() == 0
    }

    /// Templates evicted so far (least recently seen first).
    pub fn evicted(&self) -> u64 {
        self.tree.evicted()
    }

    /// Lines observed so far.
    pub fn lines(&self) -> u64 {
        self.seq
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `line` with each non-zero digit replaced by another non-zero digit: the same shape.
    fn renumbered(line: &str) -> String {
        let bytes = line
            .bytes()
            .enumerate()
            .map(|(i, c)| {
                if (b'1'..=b'9').contains(&c) {
                    b'1' + (c - b'1' + 1 + (i % 7) as u8) % 9
                } else {
                    c
                }
            })
            .collect();
        String::from_utf8(bytes).expect("only ASCII digits changed")
    }

    #[test]
    fn lines_of_one_shape_mask_alike_and_get_one_gate_verdict() {
        // What the shape caches rest on (`id::shape_key`): over every real line at hand, a line
        // and the same line with other non-zero digits mask to one text and get one verdict.
        let mut checked = 0;
        let mut errors = 0;
        let (mut a, mut b) = (String::new(), String::new());
        for line in crate::testutil::repo_lines() {
            let Ok(line) = std::str::from_utf8(&line) else {
                continue;
            };
            let other = renumbered(line);
            if other == line {
                continue;
            }
            assert_eq!(shape_key(line.as_bytes()), shape_key(other.as_bytes()));
            mask(line, &mut a);
            mask(&other, &mut b);
            assert_eq!(a, b, "{line:?} and {other:?} mask apart");
            let verdict = looks_like_error(line);
            assert_eq!(verdict, looks_like_error(&other), "{line:?} / {other:?}");
            checked += 1;
            errors += usize::from(verdict);
        }
        assert!(
            checked > 10_000 && errors > 1_000,
            "{checked} lines, {errors} errors"
        );
    }

    #[test]
    fn the_shape_cache_changes_no_template_even_when_the_caches_overflow() {
        // Every line that looks like an error, through two miners with caches of 8 entries
        // (emptied over and over): one with the shape cache, one without. Same ids, counts
        // and texts, line by line.
        let cfg = MinerConfig {
            cache_entries: 8,
            ..MinerConfig::default()
        };
        let mut with = Miner::new(cfg.clone());
        let mut without = Miner::new(cfg);
        without.no_shapes = true;
        let mut lines = 0;
        for line in crate::testutil::repo_lines() {
            let line = String::from_utf8_lossy(&line);
            if !looks_like_error(&line) {
                continue;
            }
            assert_eq!(with.observe(&line), without.observe(&line), "{line:?}");
            lines += 1;
        }
        assert!(lines > 1_000, "{lines} lines");
        let texts = |m: &Miner| m.iter().map(|t| t.text().to_string()).collect::<Vec<_>>();
        assert_eq!(texts(&with), texts(&without));
        assert!(with.shapes.len() <= 8);
    }

    #[test]
    fn a_line_repeated_with_other_numbers_is_counted_without_masking_it_again() {
        let mut m = Miner::new(MinerConfig::default());
        let first = m.observe("worker 12 failed after 3.5s on node-7 (pid 4411)");
        let again = m.observe("worker 98 failed after 9.1s on node-3 (pid 5213)");
        assert_eq!(again.id, first.id);
        assert_eq!(again.count, 2);
        assert!(!again.is_new && !again.changed);
        assert_eq!(m.shapes.len(), 1, "the second line hit the shape cache");
        // a zero is not folded (`exit code 0` is no error): a new shape, found by its mask
        m.observe("worker 12 failed after 0.5s on node-7 (pid 4411)");
        assert_eq!(m.shapes.len(), 2);
    }

    #[test]
    fn same_template_for_lines_that_differ_in_values() {
        let mut m = Miner::new(MinerConfig::default());
        let a = m.observe("Connection to 10.0.0.1:29500 timed out after 30s");
        let b = m.observe("Connection to 10.0.0.9:1234 timed out after 2500ms");
        assert!(a.is_new);
        assert!(!b.is_new);
        assert_eq!(a.id, b.id);
        assert_eq!(b.count, 2);
        let t = m.get(a.id).map(|t| t.text().to_string());
        assert_eq!(
            t.as_deref(),
            Some("Connection to <IP>:<NUM> timed out after <DUR>")
        );
    }

    #[test]
    fn masked_slot_generalises_at_once_and_keeps_the_id() {
        let mut m = Miner::new(MinerConfig::default());
        let a = m.observe("user alice logged in from host 10.0.0.1");
        let b = m.observe("user alice logged in from host gpu-node-7");
        assert_eq!(a.id, b.id);
        assert!(
            b.changed,
            "a masked slot that disagrees becomes <*> at once"
        );
        assert_eq!(a.id, TemplateId::of("user alice logged in from host <IP>"));
        let t = m.get(a.id).map(|t| {
            (
                t.text().to_string(),
                t.example().to_string(),
                t.first_seen(),
                t.last_seen(),
            )
        });
        assert_eq!(
            t,
            Some((
                "user alice logged in from host <*>".to_string(),
                "user alice logged in from host 10.0.0.1".to_string(),
                0,
                1
            ))
        );
        let c = m.observe("user alice logged in from host 10.9.9.9");
        assert_eq!(c.id, a.id);
        assert!(!c.changed);
    }

    #[test]
    fn constant_words_need_distinct_values_before_becoming_variables() {
        // min_distinct = 4: `startup`/`shutdown` stay two templates, while a
        // slot that shows four different words becomes <*> and the siblings
        // merge into the oldest template.
        let mut m = Miner::new(MinerConfig::default());
        let up = m.observe("cupsd startup succeeded");
        let down = m.observe("cupsd shutdown succeeded");
        assert_ne!(up.id, down.id);
        assert!(down.is_new);
        let u1 = m.observe("session opened for user alice");
        let u2 = m.observe("session opened for user bob");
        let u3 = m.observe("session opened for user carol");
        assert_eq!(m.len(), 5);
        let u4 = m.observe("session opened for user dave");
        assert!(u4.changed);
        assert_eq!(u4.id, u1.id, "siblings merge into the oldest");
        assert_eq!(u4.count, 4);
        assert_eq!(m.len(), 3);
        assert_eq!(m.resolve(u2.id), u1.id);
        assert_eq!(m.resolve(u3.id), u1.id);
        let t = m
            .get(u1.id)
            .map(|t| (t.text().to_string(), t.merged_ids().len()));
        assert_eq!(t, Some(("session opened for user <*>".to_string(), 2)));
        // later lines of a merged sibling land in the survivor
        assert_eq!(m.observe("session opened for user bob").id, u1.id);
        assert_eq!(m.observe("session opened for user erin").id, u1.id);
    }

    #[test]
    fn different_messages_get_different_templates() {
        let mut m = Miner::new(MinerConfig::default());
        let a = m.observe("NCCL WARN Call to connect returned Connection refused");
        let b = m.observe("CUDA error: an illegal memory access was encountered");
        assert_ne!(a.id, b.id);
        assert_eq!(m.len(), 2);
    }

    #[test]
    fn stable_ids_across_runs() {
        let lines = [
            "E1129 21:42:00.429 123 nccl.cc:55] NCCL error 3 on rank 7",
            "E1129 21:42:01.001 124 nccl.cc:55] NCCL error 5 on rank 2",
            "worker 3 exited with code 137",
            "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB",
            "worker 12 exited with code 1",
        ];
        let run = || {
            let mut m = Miner::new(MinerConfig::default());
            let ids: Vec<String> = lines.iter().map(|l| m.observe(l).id.to_string()).collect();
            ids
        };
        let first = run();
        assert_eq!(first, run());
        // Pinned values: a change here means ids changed for every user.
        assert_eq!(
            first[2],
            TemplateId::of("worker <NUM> exited with code <NUM>").to_string()
        );
        assert_eq!(first[2], "d00e997b360adb4d");
        assert_eq!(first[0], first[1]);
        assert_eq!(first[2], first[4]);
    }

    #[test]
    fn memory_is_bounded_and_evictions_counted() {
        let cfg = MinerConfig {
            max_templates: 8,
            ..MinerConfig::default()
        };
        let mut m = Miner::new(cfg);
        // 100 messages with nothing in common: 100 templates wanted, 8 kept
        let words = [
            "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india",
            "juliet",
        ];
        let mut n = 0u64;
        for a in words {
            for b in words {
                let line = format!("{a}{b} {b}{a} is {a} not {b}");
                m.observe(&line);
                n += 1;
                assert!(m.len() <= 8);
            }
        }
        assert_eq!(m.len(), 8);
        assert_eq!(m.evicted(), n - 8);
        assert_eq!(m.iter().count(), 8);
        assert_eq!(m.lines(), n);
        // the first template is gone, the last one is live
        assert!(m
            .get(TemplateId::of("alphaalpha alphaalpha is alpha not alpha"))
            .is_none());
        let last = "julietjuliet julietjuliet is juliet not juliet";
        assert!(!m.observe(last).is_new);
        // memory per template stays small and bounded by the line limits
        let most = m.iter().map(|t| t.heap_bytes()).max().unwrap_or(0);
        assert!(most < 8 * 1024, "{most}");
    }

    #[test]
    fn miner_can_move_between_threads() {
        fn is_send<T: Send>() {}
        is_send::<Miner>();
    }

    #[test]
    fn long_lines_are_bounded() {
        let mut m = Miner::new(MinerConfig::default());
        let huge = "token ".repeat(100_000);
        let o = m.observe(&huge);
        let t = m
            .get(o.id)
            .map(|t| (t.len_tokens(), t.example().len(), t.text().len()));
        assert_eq!(
            t,
            Some((
                DEFAULT_MAX_TOKENS + 1,
                512,
                (DEFAULT_MAX_TOKENS * 6) + "<TRUNC>".len()
            ))
        );
    }

    #[test]
    fn least_recently_seen_is_evicted_not_oldest() {
        let cfg = MinerConfig {
            max_templates: 2,
            ..MinerConfig::default()
        };
        let mut m = Miner::new(cfg);
        let a = m.observe("first kind of message here");
        let _b = m.observe("second sort of line entirely");
        let a2 = m.observe("first kind of message here");
        assert_eq!(a.id, a2.id);
        let _c = m.observe("third variety with other words");
        assert!(m.get(a.id).is_some(), "recently seen template must survive");
        assert_eq!(m.evicted(), 1);
    }

    #[test]
    fn iteration_reports_counts_and_examples() {
        let mut m = Miner::new(MinerConfig::default());
        for i in 0..5 {
            m.observe(&format!("step {i} loss 0.{i}5"));
        }
        let all: Vec<(String, u64, u64, u64)> = m
            .iter()
            .map(|t| {
                (
                    t.text().to_string(),
                    t.count(),
                    t.first_seen(),
                    t.last_seen(),
                )
            })
            .collect();
        assert_eq!(all, vec![("step <NUM> loss <NUM>".to_string(), 5, 0, 4)]);
    }
}
