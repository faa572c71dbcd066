//! A small bounded cache: two generations of a map. Lookups that hit the
//! old generation move the entry to the new one; when the new generation
//! holds half the budget it becomes the old one and the old one goes. Every
//! operation is O(1) and the whole never holds more than the budget (plus
//! one entry).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

/// A cache of `Arc<V>` weighed by the caller, shared between threads.
#[derive(Debug)]
pub struct Cache<K, V> {
    inner: Mutex<Generations<K, V>>,
    half: usize,
}

#[derive(Debug)]
struct Generations<K, V> {
    new: HashMap<K, (Arc<V>, usize)>,
    new_weight: usize,
    old: HashMap<K, (Arc<V>, usize)>,
}

impl<K: Hash + Eq + Copy, V> Cache<K, V> {
    /// A cache holding about `budget` units of weight.
    pub fn new(budget: usize) -> Self {
        Cache {
            inner: Mutex::new(Generations {
                new: HashMap::new(),
                new_weight: 0,
                old: HashMap::new(),
            }),
            half: (budget / 2).max(1),
        }
    }

    /// The value of `key`, if cached.
    pub fn get(&self, key: &K) -> Option<Arc<V>> {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((v, _)) = g.new.get(key) {
            return Some(v.clone());
        }
        let (v, w) = g.old.remove(key)?;
        let out = v.clone();
        g.insert(*key, v, w, self.half);
        Some(out)
    }

    /// Caches `value` of `weight` under `key`.
    pub fn put(&self, key: K, value: Arc<V>, weight: usize) {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        g.insert(key, value, weight, self.half);
    }
}

impl<K: Hash + Eq, V> Generations<K, V> {
    fn insert(&mut self, key: K, value: Arc<V>, weight: usize, half: usize) {
        if self.new_weight + weight > half && !self.new.is_empty() {
            self.old = std::mem::take(&mut self.new);
            self.new_weight = 0;
        }
        self.new_weight += weight;
        if let Some((_, w)) = self.new.insert(key, (value, weight)) {
            self.new_weight -= w;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stays_within_its_budget_and_keeps_what_is_used() {
        let c: Cache<u32, u32> = Cache::new(10);
        for i in 0..100 {
            c.put(i, Arc::new(i), 1);
            // 0 is used all along: it stays.
            assert_eq!(c.get(&0).as_deref(), Some(&0));
        }
        let g = c.inner.lock().unwrap();
        assert!(g.new.len() + g.old.len() <= 11);
        drop(g);
        assert!(c.get(&50).is_none());
        assert_eq!(c.get(&99).as_deref(), Some(&99));
    }
}
