//! The template store: Drain-style buckets, similarity matching, evidence-
//! based generalisation, sibling merging and least-recently-seen eviction.
//!
//! Why this shape: after masking, most lines of one template have the same
//! token count and the same first token, so templates are kept in buckets
//! keyed by (token count, first-token skeleton), as in Drain's fixed-depth
//! tree, and a line is compared only with the templates of its bucket. If
//! none fits, the templates of the same length in other buckets are tried
//! with a stricter threshold (`cross_similarity`): that catches a variable
//! first word (a job or class name) that Drain's tree can never merge.
//!
//! Generalising, the key difference from Drain: a line that fits a template
//! but contradicts it somewhere does not always turn that position into
//! `<*>`.
//! - If either side holds a mask there (`<IP>` vs `LOCAL(<NUM>)`), the slot has
//!   already shown it varies: it becomes `<*>` at once.
//! - If both sides are plain words (`startup` vs `shutdown`, `GET` vs `POST`,
//!   `alice` vs `bob`), a single difference is weak evidence. The line starts
//!   a *sibling* template, and siblings that differ from each other only at
//!   those positions are counted in a group. When the group reaches
//!   `min_distinct` members, they are merged into the oldest one, whose
//!   position becomes `<*>`; the others' ids become aliases of it
//!   (`resolve`). So a handful of fixed alternatives stay separate events,
//!   while user names, job names and the like become variables.
//!
//! Memory is bounded: at most `max_templates` live templates, kept in an
//! intrusive doubly linked list ordered by last use, so finding and evicting
//! the least recently seen one is O(1). Evicted and merged slots are reused;
//! a per-slot generation number lets the exact-match cache in `mod.rs` detect
//! stale entries without a scan. Every per-template list (sibling groups,
//! merged ids) is capped, and the cross-bucket scan looks at the newest
//! `MAX_CROSS_SCAN` templates only.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use super::id::{fnv1a_byte, TemplateId, FNV_OFFSET};
use super::mask::{pure_skel, Token};

/// Hasher for keys that are already 64-bit hashes: one multiply-xorshift
/// instead of SipHash (FNV's low bits alone mix poorly, hence the finaliser).
#[derive(Default, Clone, Copy)]
pub(crate) struct PreHashed(u64);

impl Hasher for PreHashed {
    fn finish(&self) -> u64 {
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^ (h >> 33)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = fnv1a_byte(self.0 ^ FNV_OFFSET, b);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

pub(crate) type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<PreHashed>>;

const NIL: u32 = u32::MAX;

/// Skeleton value of a position that has become `<*>`.
const WILD: u64 = 0;

/// One live template, as the miner reports it.
#[derive(Debug, Clone)]
pub struct Template {
    id: TemplateId,
    text: String,
    count: u64,
    first_seen: u64,
    last_seen: u64,
    example: String,
    /// Display text of each position (`<*>` once generalised).
    words: Vec<Box<str>>,
    /// Skeleton hash of each position; `WILD` once generalised.
    skels: Vec<u64>,
    /// Whether the position held a mask when the template was born.
    vars: Vec<bool>,
    bucket: u64,
    /// Sibling groups this template belongs to (see `Tree::join`).
    groups: Vec<u64>,
    /// Ids of templates merged into this one (bounded).
    merged: Vec<TemplateId>,
}

impl Template {
    /// Stable id: hash of the template text when the template was born.
    pub fn id(&self) -> TemplateId {
        self.id
    }
    /// Current template text, with typed masks and `<*>` for mined variables.
    pub fn text(&self) -> &str {
        &self.text
    }
    /// Lines that matched this template so far (including lines of templates
    /// merged into it).
    pub fn count(&self) -> u64 {
        self.count
    }
    /// Sequence number (0-based count of observed lines) of its first line.
    pub fn first_seen(&self) -> u64 {
        self.first_seen
    }
    /// Sequence number of its latest line.
    pub fn last_seen(&self) -> u64 {
        self.last_seen
    }
    /// The first line that created it (cut to `max_example_bytes`), unredacted.
    pub fn example(&self) -> &str {
        &self.example
    }
    /// Number of tokens (positions) in the template.
    pub fn len_tokens(&self) -> usize {
        self.words.len()
    }
    /// Ids of templates that were merged into this one (most recent last,
    /// at most `MAX_MERGED_IDS`); they resolve to this id.
    pub fn merged_ids(&self) -> &[TemplateId] {
        &self.merged
    }

    fn render(&mut self) {
        self.text.clear();
        for (i, w) in self.words.iter().enumerate() {
            if i > 0 {
                self.text.push(' ');
            }
            self.text.push_str(w);
        }
    }

    /// Approximate heap bytes held by this template.
    pub fn heap_bytes(&self) -> usize {
        self.text.capacity()
            + self.example.capacity()
            + self
                .words
                .iter()
                .map(|w| w.len() + std::mem::size_of::<Box<str>>())
                .sum::<usize>()
            + self.skels.capacity() * 8
            + self.vars.capacity()
            + self.groups.capacity() * 8
            + self.merged.capacity() * 8
    }
}

/// Most merged ids remembered per template (for `Miner::resolve`).
pub(super) const MAX_MERGED_IDS: usize = 64;

/// Most sibling groups a template takes part in at once.
const MAX_GROUPS_PER_TEMPLATE: usize = 8;

/// Most templates of other buckets examined for one line (the newest ones):
/// bounds the slow path when many templates share a token count.
const MAX_CROSS_SCAN: usize = 512;

struct Slot {
    t: Option<Template>,
    gen: u32,
    prev: u32,
    next: u32,
}

/// Tunables the tree needs (a subset of `MinerConfig`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct TreeParams {
    pub max_templates: usize,
    pub similarity: f64,
    pub max_example_bytes: usize,
    pub prefix_tokens: usize,
    pub min_distinct: usize,
    pub cross_similarity: f64,
    pub var_weight: f64,
}

pub(crate) struct Tree {
    p: TreeParams,
    slots: Vec<Slot>,
    free: Vec<u32>,
    buckets: FastMap<u64, Vec<u32>>,
    by_len: FastMap<usize, Vec<u32>>,
    groups: FastMap<u64, Vec<u32>>,
    ids: FastMap<u64, u32>,
    aliases: FastMap<u64, u64>,
    head: u32,
    tail: u32,
    live: usize,
    evicted: u64,
    scratch: Vec<usize>,
}

/// What `Tree::place` did with a line.
pub(crate) struct Placed {
    pub slot: u32,
    pub is_new: bool,
    pub changed: bool,
}

/// Bucket of a masked line: token count and the skeletons of its first
/// `prefix` tokens (a token holding a mask counts as "variable").
pub(crate) fn bucket_key(toks: &[Token], prefix: usize) -> u64 {
    let pure = pure_skel();
    let mut h = fnv1a_u64(FNV_OFFSET, toks.len() as u64);
    for t in toks.iter().take(prefix) {
        // `uid=<NUM>` keys by its skeleton; a bare value by "variable"
        h = fnv1a_u64(h, if t.skel == pure { WILD } else { t.skel });
    }
    h
}

fn bucket_of_template(t: &Template, prefix: usize) -> u64 {
    let pure = pure_skel();
    let mut h = fnv1a_u64(FNV_OFFSET, t.skels.len() as u64);
    for s in t.skels.iter().take(prefix) {
        h = fnv1a_u64(h, if *s == pure || *s == WILD { WILD } else { *s });
    }
    h
}

fn fnv1a_u64(mut h: u64, v: u64) -> u64 {
    for b in v.to_le_bytes() {
        h = fnv1a_byte(h, b);
    }
    h
}

/// How well a line fits a template.
#[derive(Clone, Copy)]
struct Fit {
    /// Constant positions of the template that the line contradicts.
    conflicts: usize,
    /// Agreeing positions: constants 1, variables `var_weight`, `<*>` 0.
    score: f64,
}

impl Tree {
    pub(super) fn new(p: TreeParams) -> Tree {
        Tree {
            p,
            slots: Vec::new(),
            free: Vec::new(),
            buckets: FastMap::default(),
            by_len: FastMap::default(),
            groups: FastMap::default(),
            ids: FastMap::default(),
            aliases: FastMap::default(),
            head: NIL,
            tail: NIL,
            live: 0,
            evicted: 0,
            scratch: Vec::new(),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.live
    }

    pub(super) fn evicted(&self) -> u64 {
        self.evicted
    }

    pub(super) fn generation(&self, slot: u32) -> u32 {
        self.slots.get(slot as usize).map_or(u32::MAX, |s| s.gen)
    }

    pub(super) fn template(&self, slot: u32) -> Option<&Template> {
        self.slots.get(slot as usize).and_then(|s| s.t.as_ref())
    }

    fn tmpl_mut(&mut self, slot: u32) -> Option<&mut Template> {
        self.slots.get_mut(slot as usize).and_then(|s| s.t.as_mut())
    }

    pub(super) fn slot_of(&self, id: TemplateId) -> Option<u32> {
        self.ids.get(&id.0).copied()
    }

    /// The live id that `id` now stands for: itself, or the template it was
    /// merged into.
    pub(super) fn resolve(&self, id: TemplateId) -> TemplateId {
        let mut cur = id.0;
        // chains are flattened on merge, so one or two steps suffice; the
        // bound guards against any cycle
        for _ in 0..8 {
            if self.ids.contains_key(&cur) {
                return TemplateId(cur);
            }
            match self.aliases.get(&cur) {
                Some(&next) => cur = next,
                None => return TemplateId(cur),
            }
        }
        TemplateId(cur)
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &Template> {
        self.slots.iter().filter_map(|s| s.t.as_ref())
    }

    /// A cached line matched `slot` again: count it and mark it recent.
    pub(super) fn hit(&mut self, slot: u32, seq: u64) -> u64 {
        let count = match self.tmpl_mut(slot) {
            Some(t) => {
                t.count += 1;
                t.last_seen = seq;
                t.count
            }
            None => return 0,
        };
        self.touch(slot);
        count
    }

    fn fit(&self, t: &Template, toks: &[Token]) -> Fit {
        let mut conflicts = 0;
        let mut score = 0.0;
        for ((s, v), tok) in t.skels.iter().zip(&t.vars).zip(toks) {
            if *s == WILD {
                continue;
            }
            if *s == tok.skel {
                score += if *v { self.p.var_weight } else { 1.0 };
            } else {
                conflicts += 1;
            }
        }
        Fit { conflicts, score }
    }

    /// Best candidate among `cands`: a template the line fits without
    /// conflict first, then the highest score, then the oldest (so the choice
    /// never depends on hash-map order).
    fn best_among(
        &self,
        cands: &[u32],
        toks: &[Token],
        skip_bucket: Option<u64>,
    ) -> Option<(u32, Fit)> {
        let mut best: Option<(u32, Fit, u64)> = None;
        for &slot in cands {
            let Some(t) = self.template(slot) else {
                continue;
            };
            if skip_bucket == Some(t.bucket) {
                continue;
            }
            let f = self.fit(t, toks);
            let better = match &best {
                None => true,
                Some((_, bf, bseen)) => {
                    let (a0, b0) = (f.conflicts == 0, bf.conflicts == 0);
                    if a0 != b0 {
                        a0
                    } else if f.score != bf.score {
                        f.score > bf.score
                    } else {
                        t.first_seen < *bseen
                    }
                }
            };
            if better {
                best = Some((slot, f, t.first_seen));
            }
        }
        best.map(|(s, f, _)| (s, f))
    }

    /// Find the template for a masked line, generalising, merging or creating.
    pub(super) fn place(&mut self, masked: &str, toks: &[Token], line: &str, seq: u64) -> Placed {
        let n = toks.len();
        let key = bucket_key(toks, self.p.prefix_tokens);
        let nf = n.max(1) as f64;
        if let Some(cands) = self.buckets.get(&key) {
            if let Some((slot, f)) = self.best_among(cands, toks, None) {
                if f.conflicts == 0 || f.score >= self.p.similarity * nf {
                    return self.join(slot, masked, toks, line, seq);
                }
            }
        }
        // Other buckets of the same length: the first tokens differ (a
        // variable first word such as a job or class name), so demand a much
        // closer fit.
        if self.p.cross_similarity <= 1.0 {
            if let Some(cands) = self.by_len.get(&n) {
                let recent = &cands[cands.len().saturating_sub(MAX_CROSS_SCAN)..];
                if let Some((slot, f)) = self.best_among(recent, toks, Some(key)) {
                    if f.score >= self.p.cross_similarity * nf {
                        return self.join(slot, masked, toks, line, seq);
                    }
                }
            }
        }
        let slot = self.create(key, masked, toks, line, seq);
        Placed {
            slot,
            is_new: true,
            changed: false,
        }
    }

    /// The line was matched to `slot`. Positions where it contradicts the
    /// template's constants are variables only once `min_distinct` distinct
    /// values have been seen there: until then the line starts a sibling
    /// template, and the siblings (same template except at those positions)
    /// are counted in a group. When the group reaches `min_distinct` members
    /// they are merged into the oldest one, which becomes `<*>` there.
    /// This keeps `startup`/`shutdown` or `GET`/`POST` apart while user names
    /// or job names become variables.
    fn join(&mut self, slot: u32, masked: &str, toks: &[Token], line: &str, seq: u64) -> Placed {
        let mut diff = std::mem::take(&mut self.scratch);
        diff.clear();
        // Differences where either side holds a mask are variables already
        // (a masked slot has shown it varies); only a constant word against
        // another constant word needs more evidence.
        let mut const_diff = false;
        if let Some(t) = self.template(slot) {
            for (i, ((s, v), tok)) in t.skels.iter().zip(&t.vars).zip(toks).enumerate() {
                if *s != WILD && *s != tok.skel {
                    diff.push(i);
                    if !*v && !tok.var {
                        const_diff = true;
                    }
                }
            }
        }
        let placed = if !const_diff || self.p.min_distinct <= 2 {
            if !diff.is_empty() {
                // its skeleton changes: its sibling groups no longer describe it
                self.leave_groups(slot);
            }
            let changed = self.absorb(slot, masked, toks, seq, &diff);
            self.touch(slot);
            Placed {
                slot,
                is_new: false,
                changed,
            }
        } else {
            let gkey = self.group_key(slot, &diff);
            let mut members: Vec<u32> = self.groups.get(&gkey).cloned().unwrap_or_default();
            members.retain(|&m| self.template(m).is_some());
            if !members.contains(&slot) {
                members.push(slot);
            }
            if members.len() + 1 >= self.p.min_distinct {
                // enough distinct values: merge the siblings into the oldest
                members.sort_by_key(|&m| self.template(m).map_or(u64::MAX, |t| t.first_seen));
                let keep = members[0];
                self.groups.remove(&gkey);
                for &m in &members[1..] {
                    self.merge_into(m, keep);
                }
                self.leave_groups(keep);
                self.absorb(keep, masked, toks, seq, &diff);
                self.touch(keep);
                Placed {
                    slot: keep,
                    is_new: false,
                    changed: true,
                }
            } else {
                let new = self.create(
                    bucket_key(toks, self.p.prefix_tokens),
                    masked,
                    toks,
                    line,
                    seq,
                );
                members.push(new);
                self.groups.insert(gkey, members.clone());
                for &m in &members {
                    self.note_group(m, gkey);
                }
                Placed {
                    slot: new,
                    is_new: true,
                    changed: false,
                }
            }
        };
        self.scratch = diff;
        placed
    }

    /// Key of the sibling group: the template's skeleton with the differing
    /// positions as variables.
    fn group_key(&self, slot: u32, diff: &[usize]) -> u64 {
        let mut h = FNV_OFFSET;
        if let Some(t) = self.template(slot) {
            h = fnv1a_u64(h, t.skels.len() as u64);
            let mut d = diff.iter().peekable();
            for (i, s) in t.skels.iter().enumerate() {
                if d.peek() == Some(&&i) {
                    d.next();
                    h = fnv1a_u64(h, WILD);
                } else {
                    h = fnv1a_u64(h, *s);
                }
            }
        }
        h
    }

    /// Count the line into the template; positions in `diff` become `<*>`;
    /// positions whose skeleton agrees but whose text differs (`<NUM>` vs
    /// `<HEX>`) show their skeleton with `<*>` for the masked pieces.
    fn absorb(
        &mut self,
        slot: u32,
        masked: &str,
        toks: &[Token],
        seq: u64,
        diff: &[usize],
    ) -> bool {
        let Some(t) = self.tmpl_mut(slot) else {
            return false;
        };
        t.count += 1;
        t.last_seen = seq;
        let mut changed = false;
        for &i in diff {
            if let (Some(s), Some(w)) = (t.skels.get_mut(i), t.words.get_mut(i)) {
                *s = WILD;
                *w = "<*>".into();
                changed = true;
            }
        }
        for (i, tok) in toks.iter().enumerate() {
            if t.skels.get(i) == Some(&WILD) {
                continue;
            }
            let word = masked
                .get(tok.start as usize..tok.end as usize)
                .unwrap_or("");
            if let Some(w) = t.words.get_mut(i) {
                if &**w != word {
                    let g = generic_word(w);
                    if *w.as_ref() != *g {
                        *w = g.into();
                        changed = true;
                    }
                }
            }
        }
        if changed {
            t.render();
        }
        changed
    }

    /// Fold template `from` into `into` (sibling merge): counts, first/last
    /// seen, and an alias so that `from`'s id resolves to `into`'s.
    fn merge_into(&mut self, from: u32, into: u32) {
        if from == into {
            return;
        }
        let Some(f) = self.remove(from) else { return };
        let into_id = match self.tmpl_mut(into) {
            Some(t) => {
                t.count += f.count;
                t.first_seen = t.first_seen.min(f.first_seen);
                t.last_seen = t.last_seen.max(f.last_seen);
                t.id
            }
            None => return,
        };
        let mut moved: Vec<TemplateId> = f.merged;
        moved.push(f.id);
        for id in &moved {
            self.aliases.insert(id.0, into_id.0);
        }
        let mut dropped = Vec::new();
        if let Some(t) = self.tmpl_mut(into) {
            t.merged.extend(moved);
            if t.merged.len() > MAX_MERGED_IDS {
                let extra = t.merged.len() - MAX_MERGED_IDS;
                dropped.extend(t.merged.drain(..extra));
            }
        }
        for id in dropped {
            self.aliases.remove(&id.0);
        }
    }

    /// Record that `slot` is in group `gkey`. Keys of groups that dissolved
    /// meanwhile (their other members were evicted or merged) are dropped
    /// here, so the list stays as short as the template's live groups, and
    /// it is capped at `MAX_GROUPS_PER_TEMPLATE` (the oldest group is left).
    fn note_group(&mut self, slot: u32, gkey: u64) {
        let mut gs = match self.tmpl_mut(slot) {
            Some(t) => std::mem::take(&mut t.groups),
            None => return,
        };
        gs.retain(|g| self.groups.get(g).is_some_and(|v| v.contains(&slot)));
        if !gs.contains(&gkey) {
            gs.push(gkey);
        }
        while gs.len() > MAX_GROUPS_PER_TEMPLATE {
            let old = gs.remove(0);
            if let Some(v) = self.groups.get_mut(&old) {
                v.retain(|&m| m != slot);
                if v.len() <= 1 {
                    self.groups.remove(&old);
                }
            }
        }
        if let Some(t) = self.tmpl_mut(slot) {
            t.groups = gs;
        }
    }

    /// Remove a template from every group it belongs to (its skeleton is
    /// about to change, so its group keys no longer describe it).
    fn leave_groups(&mut self, slot: u32) {
        let gs = match self.tmpl_mut(slot) {
            Some(t) => std::mem::take(&mut t.groups),
            None => return,
        };
        for g in gs {
            if let Some(v) = self.groups.get_mut(&g) {
                v.retain(|&m| m != slot);
                if v.len() <= 1 {
                    self.groups.remove(&g);
                }
            }
        }
    }

    fn create(&mut self, key: u64, masked: &str, toks: &[Token], line: &str, seq: u64) -> u32 {
        if self.live >= self.p.max_templates.max(1) {
            self.evict_lru();
        }
        let words: Vec<Box<str>> = toks
            .iter()
            .map(|t| {
                masked
                    .get(t.start as usize..t.end as usize)
                    .unwrap_or("")
                    .into()
            })
            .collect();
        let skels: Vec<u64> = toks
            .iter()
            .map(|t| if t.skel == WILD { 1 } else { t.skel })
            .collect();
        let vars: Vec<bool> = toks.iter().map(|t| t.var).collect();
        let (example, _) = super::mask::truncate_str(line, self.p.max_example_bytes);
        let mut t = Template {
            id: TemplateId(0),
            text: String::with_capacity(masked.len()),
            count: 1,
            first_seen: seq,
            last_seen: seq,
            example: example.to_string(),
            words,
            skels,
            vars,
            bucket: key,
            groups: Vec::new(),
            merged: Vec::new(),
        };
        t.render();
        debug_assert_eq!(key, bucket_of_template(&t, self.p.prefix_tokens));
        // Id = hash of the birth text. Two live templates can be born with
        // the same text (siblings never are, but a twin can appear in another
        // bucket after generalisation); re-hash with a counter so ids stay
        // unique and still deterministic.
        let mut id = TemplateId::of(&t.text);
        let mut salt = 0u32;
        while self.ids.contains_key(&id.0) {
            salt += 1;
            id = TemplateId::of(&format!("{}#{}", t.text, salt));
        }
        t.id = id;
        // a re-born id must not keep resolving to an old merge target
        self.aliases.remove(&id.0);
        let n = t.skels.len();
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.slots.push(Slot {
                    t: None,
                    gen: 0,
                    prev: NIL,
                    next: NIL,
                });
                (self.slots.len() - 1) as u32
            }
        };
        if let Some(s) = self.slots.get_mut(slot as usize) {
            s.t = Some(t);
        }
        self.ids.insert(id.0, slot);
        self.buckets.entry(key).or_default().push(slot);
        self.by_len.entry(n).or_default().push(slot);
        self.live += 1;
        self.link_front(slot);
        slot
    }

    /// Take a template out of every index and free its slot.
    fn remove(&mut self, slot: u32) -> Option<Template> {
        self.leave_groups(slot);
        self.unlink(slot);
        let s = self.slots.get_mut(slot as usize)?;
        let t = s.t.take()?;
        s.gen = s.gen.wrapping_add(1);
        self.ids.remove(&t.id.0);
        for (map_key, idx) in [(t.bucket, 0usize), (t.skels.len() as u64, 1)] {
            let v = if idx == 0 {
                self.buckets.get_mut(&map_key)
            } else {
                self.by_len.get_mut(&(map_key as usize))
            };
            if let Some(v) = v {
                if let Some(pos) = v.iter().position(|&x| x == slot) {
                    // keep creation order (scans stay predictable)
                    v.remove(pos);
                }
                if v.is_empty() {
                    if idx == 0 {
                        self.buckets.remove(&map_key);
                    } else {
                        self.by_len.remove(&(map_key as usize));
                    }
                }
            }
        }
        self.free.push(slot);
        self.live -= 1;
        Some(t)
    }

    fn evict_lru(&mut self) {
        let slot = self.tail;
        if slot == NIL {
            return;
        }
        if let Some(t) = self.remove(slot) {
            // ids merged into it no longer resolve to anything live
            for id in &t.merged {
                self.aliases.remove(&id.0);
            }
            self.evicted += 1;
        }
    }

    fn touch(&mut self, slot: u32) {
        if self.head == slot {
            return;
        }
        self.unlink(slot);
        self.link_front(slot);
    }

    fn unlink(&mut self, slot: u32) {
        let (prev, next) = match self.slots.get(slot as usize) {
            Some(s) => (s.prev, s.next),
            None => return,
        };
        if prev != NIL {
            if let Some(p) = self.slots.get_mut(prev as usize) {
                p.next = next;
            }
        } else if self.head == slot {
            self.head = next;
        }
        if next != NIL {
            if let Some(n) = self.slots.get_mut(next as usize) {
                n.prev = prev;
            }
        } else if self.tail == slot {
            self.tail = prev;
        }
        if let Some(s) = self.slots.get_mut(slot as usize) {
            s.prev = NIL;
            s.next = NIL;
        }
    }

    fn link_front(&mut self, slot: u32) {
        let old = self.head;
        if let Some(s) = self.slots.get_mut(slot as usize) {
            s.prev = NIL;
            s.next = old;
        }
        if old != NIL {
            if let Some(o) = self.slots.get_mut(old as usize) {
                o.prev = slot;
            }
        } else {
            self.tail = slot;
        }
        self.head = slot;
    }
}

/// `uid=<NUM>` -> `uid=<*>`: the word with every mask replaced by `<*>`.
fn generic_word(w: &str) -> String {
    let mut out = String::with_capacity(w.len());
    let mut rest = w;
    'outer: while !rest.is_empty() {
        if rest.starts_with('<') {
            for k in super::mask::MaskKind::ALL {
                if let Some(r) = rest.strip_prefix(k.text()) {
                    out.push_str("<*>");
                    rest = r;
                    continue 'outer;
                }
            }
            if let Some(r) = rest.strip_prefix("<*>") {
                out.push_str("<*>");
                rest = r;
                continue;
            }
        }
        let mut chars = rest.chars();
        if let Some(c) = chars.next() {
            out.push(c);
        }
        rest = chars.as_str();
    }
    // `<*> <*>` (a joined run) reads as one variable
    while out.contains("<*> <*>") {
        out = out.replace("<*> <*>", "<*>");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generic_word_replaces_masks() {
        assert_eq!(generic_word("uid=<NUM>"), "uid=<*>");
        assert_eq!(generic_word("<IP>:<NUM>"), "<*>:<*>");
        assert_eq!(generic_word("<SIZE> (<SIZE>)"), "<*> (<*>)");
        assert_eq!(generic_word("<NUM> <NUM> <NUM>"), "<*>");
        assert_eq!(generic_word("<init>"), "<init>");
    }

    #[test]
    fn prehashed_spreads_low_bits() {
        let mut a = PreHashed::default();
        a.write_u64(0x100);
        let mut b = PreHashed::default();
        b.write_u64(0x200);
        assert_ne!(a.finish() & 0xff, b.finish() & 0xff);
    }
}
