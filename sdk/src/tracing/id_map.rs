//! The layer's map of the registry's span ids to span table ids, read on
//! every enter and written at every new span and close: lock-free on its
//! common path. A fixed table of groups of 8 entries (a key line and a value
//! line), a key's group chosen by its hash: a look-up reads one group's keys,
//! an insert takes an empty entry of the group with one compare-and-swap, a
//! removal clears the key with a store. No probe runs past its group, so a
//! removal leaves no tombstone. A key whose group is full goes to an
//! overflow map, sharded, behind locks, grown to the peak of its entries and
//! reused (no allocation per span), looked at only while it holds entries
//! (one count for all its shards).
//!
//! What makes this enough: `tracing` orders the callbacks of one span (its
//! handle is shared between threads with synchronisation, its close follows
//! every other callback on it), and the registry gives an id to one live
//! span at a time. So a key is inserted, read and removed by callbacks that
//! happen one after the other; only different keys' inserts and removals run
//! at once, on different entries (the compare-and-swap decides who takes an
//! empty one). An id `tracing` did not give (`Id::from_u64`) finds at worst
//! another span's table id, whose generation the span table checks.

#![forbid(unsafe_code)]

use crate::record::sync::{AtomicU64, Ordering};
use crossbeam_utils::CachePadded;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::AtomicUsize;

/// Entries per group: one cache line of keys.
#[cfg(not(ringtrace_loom))]
const GROUP: usize = 8;
/// Groups in the table (a power of two): 4,096 entries, 64 KiB per layer.
#[cfg(not(ringtrace_loom))]
const GROUPS: usize = 512;
// Under loom: one group of two, so that the model's keys meet in it.
#[cfg(ringtrace_loom)]
const GROUP: usize = 2;
#[cfg(ringtrace_loom)]
const GROUPS: usize = 1;
/// Shards of the overflow map: spans of different threads rarely meet on a lock.
const SHARDS: usize = 32;

/// Keys (0: empty; `tracing`'s ids are never 0) and their values.
#[repr(align(128))]
struct Group {
    keys: [AtomicU64; GROUP],
    values: [AtomicU64; GROUP],
}

type Overflow = HashMap<u64, u64, BuildHasherDefault<IdHash>>;

struct Shard {
    /// Entries in `map`, written under its lock, read without it: an empty
    /// shard (the usual case) is not locked at all.
    len: AtomicUsize,
    map: Mutex<Overflow>,
}

/// Span ids (non-zero) to values: see the module's comment for what callers
/// must keep to (one span's callbacks ordered by `tracing`).
pub(crate) struct IdMap {
    groups: Box<[Group]>,
    /// Entries in all the overflow shards, changed under a shard's lock:
    /// while it is 0 (the usual case) a key not in its group is not in the
    /// map, found with one load.
    overflowed: CachePadded<AtomicUsize>,
    overflow: Box<[CachePadded<Shard>]>,
}

/// Hashes a span id (already unique) with one multiply; the high bits, which
/// pick the group, the overflow shard and the overflow map's bucket, depend
/// on every bit of the id.
#[derive(Default)]
struct IdHash(u64);

impl Hasher for IdHash {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    #[inline]
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

#[inline]
fn hash(key: u64) -> u64 {
    let mut h = IdHash::default();
    h.write_u64(key);
    h.finish()
}

impl IdMap {
    pub(crate) fn new() -> IdMap {
        IdMap {
            groups: (0..GROUPS)
                .map(|_| Group {
                    keys: std::array::from_fn(|_| AtomicU64::new(0)),
                    values: std::array::from_fn(|_| AtomicU64::new(0)),
                })
                .collect(),
            overflowed: CachePadded::new(AtomicUsize::new(0)),
            overflow: (0..SHARDS)
                .map(|_| {
                    CachePadded::new(Shard {
                        len: AtomicUsize::new(0),
                        map: Mutex::new(HashMap::default()),
                    })
                })
                .collect(),
        }
    }

    #[inline]
    fn group(&self, key: u64) -> &Group {
        // The hash's top bits (rotated down: no shift by 64 when there is
        // one group, as under loom).
        let top = hash(key).rotate_left(GROUPS.trailing_zeros()) as usize;
        &self.groups[top & (GROUPS - 1)]
    }

    #[inline]
    fn shard(&self, key: u64) -> &Shard {
        // Other bits of the hash than the group's: a full group's keys
        // spread over the shards.
        &self.overflow[(hash(key) >> 32) as usize % SHARDS]
    }

    /// Maps `key` (non-zero) to `value`; returns the value of a stale entry
    /// of `key` it replaced (one whose removal this map never saw).
    pub(crate) fn insert(&self, key: u64, value: u64) -> Option<u64> {
        debug_assert_ne!(key, 0);
        let g = self.group(key);
        for (k, v) in g.keys.iter().zip(&g.values) {
            if k.load(Ordering::Relaxed) == key {
                return Some(v.swap(value, Ordering::Relaxed));
            }
        }
        let stale = self.overflow_remove(key);
        for (k, v) in g.keys.iter().zip(&g.values) {
            // Acquire: the value of the key removed from this entry was read
            // before its removal (`remove`'s Release) and so before this
            // store replaces it.
            if k.load(Ordering::Relaxed) == 0
                && k.compare_exchange(0, key, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                // Relaxed: the key's readers come after this insert
                // returns (see the module's comment).
                v.store(value, Ordering::Relaxed);
                return stale;
            }
        }
        self.overflow_insert(key, value).or(stale)
    }

    /// The value of `key`, if it is in the map.
    #[inline]
    pub(crate) fn get(&self, key: u64) -> Option<u64> {
        let g = self.group(key);
        for (k, v) in g.keys.iter().zip(&g.values) {
            if k.load(Ordering::Relaxed) == key {
                return Some(v.load(Ordering::Relaxed));
            }
        }
        if self.overflowed.load(std::sync::atomic::Ordering::Relaxed) == 0 {
            return None; // as in `overflow_remove`
        }
        let shard = self.shard(key);
        if shard.len.load(std::sync::atomic::Ordering::Relaxed) == 0 {
            return None;
        }
        shard.map.lock().get(&key).copied()
    }

    /// Removes `key`; returns its value if it was in the map.
    #[inline]
    pub(crate) fn remove(&self, key: u64) -> Option<u64> {
        let g = self.group(key);
        for (k, v) in g.keys.iter().zip(&g.values) {
            if k.load(Ordering::Relaxed) == key {
                let value = v.load(Ordering::Relaxed);
                // Release: the value is read before another insert can take
                // the entry (its compare-and-swap is Acquire).
                k.store(0, Ordering::Release);
                return Some(value);
            }
        }
        self.overflow_remove(key)
    }

    #[cold]
    #[inline(never)]
    fn overflow_insert(&self, key: u64, value: u64) -> Option<u64> {
        let shard = self.shard(key);
        let mut map = shard.map.lock();
        let old = map.insert(key, value);
        shard
            .len
            .store(map.len(), std::sync::atomic::Ordering::Relaxed);
        if old.is_none() {
            self.overflowed
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        old
    }

    #[inline]
    fn overflow_remove(&self, key: u64) -> Option<u64> {
        // Relaxed: a key's entry is inserted and removed by callbacks that
        // `tracing` orders; only other keys' updates can be unseen here.
        if self.overflowed.load(std::sync::atomic::Ordering::Relaxed) == 0 {
            return None;
        }
        let shard = self.shard(key);
        if shard.len.load(std::sync::atomic::Ordering::Relaxed) == 0 {
            return None;
        }
        self.overflow_remove_locked(shard, key)
    }

    #[cold]
    #[inline(never)]
    fn overflow_remove_locked(&self, shard: &Shard, key: u64) -> Option<u64> {
        let mut map = shard.map.lock();
        let old = map.remove(&key);
        shard
            .len
            .store(map.len(), std::sync::atomic::Ordering::Relaxed);
        if old.is_some() {
            self.overflowed
                .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        }
        old
    }

    /// Entries in the overflow map.
    #[cfg(test)]
    fn overflowed(&self) -> usize {
        let n = self
            .overflow
            .iter()
            .map(|s| s.len.load(std::sync::atomic::Ordering::Relaxed))
            .sum();
        assert_eq!(
            self.overflowed.load(std::sync::atomic::Ordering::Relaxed),
            n
        );
        n
    }
}

#[cfg(all(test, not(ringtrace_loom)))]
mod tests {
    use super::*;

    /// Keys that all fall in the group of `first`.
    fn same_group(map: &IdMap, first: u64, n: usize) -> Vec<u64> {
        let g = map.group(first) as *const Group;
        (first..)
            .filter(|&k| std::ptr::eq(map.group(k), g))
            .take(n)
            .collect()
    }

    #[test]
    fn a_full_group_overflows_and_every_key_is_found() {
        let map = IdMap::new();
        let keys = same_group(&map, 1, 3 * GROUP);
        for (i, &k) in keys.iter().enumerate() {
            assert_eq!(map.insert(k, i as u64 + 100), None);
        }
        assert_eq!(map.overflowed(), 2 * GROUP, "a group holds {GROUP}");
        for (i, &k) in keys.iter().enumerate() {
            assert_eq!(map.get(k), Some(i as u64 + 100), "key {k}");
        }
        // Removing from the group makes room; the overflowed keys stay found.
        assert_eq!(map.remove(keys[0]), Some(100));
        assert_eq!(map.get(keys[0]), None);
        assert_eq!(map.insert(keys[0], 7), None);
        assert_eq!(map.overflowed(), 2 * GROUP);
        for (i, &k) in keys.iter().enumerate().skip(1) {
            assert_eq!(map.remove(k), Some(i as u64 + 100), "key {k}");
            assert_eq!(map.get(k), None);
        }
        assert_eq!(map.overflowed(), 0);
        assert_eq!(map.get(keys[0]), Some(7));
    }

    #[test]
    fn a_stale_entry_is_replaced_and_returned() {
        let map = IdMap::new();
        assert_eq!(map.insert(5, 1), None);
        assert_eq!(map.insert(5, 2), Some(1), "in its group");
        assert_eq!(map.get(5), Some(2));
        // A stale entry in the overflow map: found and replaced, once.
        let keys = same_group(&map, 1000, GROUP + 1);
        for &k in &keys {
            map.insert(k, k);
        }
        let over = *keys.last().unwrap();
        assert_eq!(map.overflowed(), 1);
        map.remove(keys[0]); // room in the group now
        assert_eq!(map.insert(over, 9), Some(over));
        assert_eq!(map.overflowed(), 0);
        assert_eq!(map.get(over), Some(9));
        assert_eq!(map.remove(over), Some(9));
        assert_eq!(map.get(over), None);
    }

    #[test]
    fn threads_inserting_and_removing_in_the_same_groups() {
        // Keys of 4 threads interleaved over a few groups, so that inserts
        // race for the same empty entries and some keys overflow.
        let map = std::sync::Arc::new(IdMap::new());
        let keys = same_group(&map, 1, 4 * 3 * GROUP);
        let handles: Vec<_> = (0..4)
            .map(|t| {
                let map = map.clone();
                let mine: Vec<u64> = keys.iter().copied().skip(t).step_by(4).collect();
                std::thread::spawn(move || {
                    for round in 0..2000u64 {
                        for &k in &mine {
                            assert_eq!(map.insert(k, k ^ round), None);
                        }
                        for &k in &mine {
                            assert_eq!(map.get(k), Some(k ^ round), "key {k}");
                        }
                        for &k in &mine {
                            assert_eq!(map.remove(k), Some(k ^ round), "key {k}");
                            assert_eq!(map.get(k), None);
                        }
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(map.overflowed(), 0);
    }
}

/// The hand-over of an entry between threads: one thread's key removed
/// while another's insert takes the entry (or the other one) for its key.
/// Run with the other loom models (`loom_tests` in `record/`).
#[cfg(all(test, ringtrace_loom))]
mod loom_tests {
    use super::*;
    use loom::sync::Arc;
    use loom::thread;

    #[test]
    fn an_entry_freed_on_one_thread_is_taken_on_another_with_its_new_value() {
        loom::model(|| {
            let map = Arc::new(IdMap::new());
            let m = map.clone();
            let t = thread::spawn(move || {
                assert_eq!(m.insert(2, 20), None);
                assert_eq!(m.get(2), Some(20));
                // Read before the entry can be taken for key 4.
                assert_eq!(m.remove(2), Some(20));
            });
            assert_eq!(map.insert(3, 30), None);
            assert_eq!(map.remove(3), Some(30));
            assert_eq!(map.insert(4, 40), None);
            assert_eq!(map.get(4), Some(40));
            t.join().unwrap();
            assert_eq!(map.get(2), None);
            assert_eq!(map.get(3), None);
            assert_eq!(map.get(4), Some(40));
            assert_eq!(map.overflowed(), 0, "two keys at most: both in the group");
        });
    }
}
