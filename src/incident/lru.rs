//! A least-recently-used order for bounded maps: each entry stores the tick it got from here,
//! and eviction pops the smallest tick. O(log n) per touch, no unsafe linked list.

use std::collections::BTreeMap;

/// Keys ordered by last touch.
#[derive(Debug, Clone)]
pub struct LruOrder<K> {
    order: BTreeMap<u64, K>,
    next: u64,
}

impl<K> Default for LruOrder<K> {
    fn default() -> Self {
        LruOrder {
            order: BTreeMap::new(),
            next: 0,
        }
    }
}

impl<K> LruOrder<K> {
    /// Adds `key` as the most recent; returns its tick.
    pub fn push(&mut self, key: K) -> u64 {
        let tick = self.next;
        self.next += 1;
        self.order.insert(tick, key);
        tick
    }

    /// Makes the entry at `tick` the most recent; returns its new tick (`tick` itself when it
    /// already is the most recent, the common case of a stream from one job at a time).
    pub fn touch(&mut self, tick: u64) -> u64 {
        if tick + 1 == self.next && self.order.contains_key(&tick) {
            return tick;
        }
        match self.order.remove(&tick) {
            Some(key) => self.push(key),
            None => tick,
        }
    }

    /// Removes the entry at `tick`, returning its key if it was there.
    pub fn remove(&mut self, tick: u64) -> Option<K> {
        self.order.remove(&tick)
    }

    /// Removes and returns the least recent key.
    pub fn pop_oldest(&mut self) -> Option<K> {
        self.order.pop_first().map(|(_, k)| k)
    }

    /// Number of keys held.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// True when no key is held.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn touch_moves_to_the_back() {
        let mut lru = LruOrder::default();
        let a = lru.push("a");
        let _b = lru.push("b");
        let a = lru.touch(a);
        assert_eq!(lru.touch(a), a, "the most recent entry keeps its tick");
        let c = lru.push("c");
        assert_eq!(lru.touch(a), c + 1);
        assert_eq!(lru.pop_oldest(), Some("b"));
        assert_eq!(lru.pop_oldest(), Some("c"));
        assert_eq!(lru.pop_oldest(), Some("a"));
        assert!(lru.is_empty());
    }
}
