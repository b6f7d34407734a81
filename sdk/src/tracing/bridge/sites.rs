//! A ringtrace call site for each `tracing` call site and field set, found
//! through a four-way thread-local cache before the shared map.

use crate::record::callsite::Callsite;
use once_cell::sync::Lazy;
use parking_lot::{Mutex, RwLock};
use std::cell::{Cell, OnceCell};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use tracing::Metadata;

/// What ringtrace knows of one `tracing` callsite.
pub(crate) struct SiteInfo {
    meta: &'static Metadata<'static>,
    /// Field names, in the callsite's field order.
    names: Vec<&'static str>,
    /// Events carry their `level` as an arg constant to their site.
    event: bool,
    /// Mask of every field (bit `i` = field `i`).
    all: u64,
    /// The ringtrace call site when every field has a value.
    pub(super) full: &'static Callsite,
    /// Call sites for other sets of present fields, made on first use,
    /// filled in order and never changed: found without a lock.
    subsets: [OnceLock<(u64, &'static Callsite)>; SUBSETS],
    /// Call sites for field sets past the first `SUBSETS`.
    more: Mutex<Vec<(u64, &'static Callsite)>>,
    /// The call site without fields (a span's later slices), made on first use.
    bare: OnceLock<&'static Callsite>,
    /// What sampling learned of where this site's spans are entered
    /// ([`SiteInfo::stays_nested`]): the enters seen inside another span
    /// (counted up to `NESTED_ENOUGH`), and `MOVES` once one was entered
    /// with no span around it on its thread.
    nesting: AtomicU32,
}

/// Enters seen inside another span before a site's spans are taken to stay
/// where they are made.
const NESTED_ENOUGH: u32 = 4;
/// Set once a span of the site was entered with nothing entered around it.
const MOVES: u32 = 1 << 31;

/// Field sets of a call site whose sites are found without a lock.
const SUBSETS: usize = 4;

impl SiteInfo {
    pub(super) fn new(meta: &'static Metadata<'static>) -> SiteInfo {
        let names: Vec<&'static str> = meta.fields().iter().map(|f| f.name()).take(64).collect();
        let all = if names.len() >= 64 {
            u64::MAX
        } else {
            (1u64 << names.len()) - 1
        };
        let event = meta.is_event();
        let full = make_site(meta, &names, all, event);
        SiteInfo {
            meta,
            names,
            event,
            all,
            full,
            subsets: [const { OnceLock::new() }; SUBSETS],
            more: Mutex::new(Vec::new()),
            bare: OnceLock::new(),
            nesting: AtomicU32::new(0),
        }
    }

    /// Whether this site's spans have always been entered inside another
    /// span of their thread (at least `NESTED_ENOUGH` times, never once with
    /// nothing around them). Under a request sampling did not keep, such a
    /// span need not exist: whatever is made inside it finds the request's
    /// decision on the span around it. A site whose spans were seen entered
    /// alone (a span moved to another task or thread) never is.
    #[inline]
    pub(crate) fn stays_nested(&self) -> bool {
        let n = self.nesting.load(Ordering::Relaxed);
        (NESTED_ENOUGH..MOVES).contains(&n)
    }

    /// The site's `tracing` metadata.
    #[inline]
    pub(crate) fn meta(&self) -> &'static Metadata<'static> {
        self.meta
    }

    /// Whether a span of this site was seen entered alone.
    #[inline]
    pub(crate) fn moves(&self) -> bool {
        self.nesting.load(Ordering::Relaxed) >= MOVES
    }

    /// Whether spans and events of this site are recorded now (its
    /// category is on).
    #[inline]
    pub(crate) fn is_on(&self) -> bool {
        self.full.is_enabled()
    }

    /// A span of this site is entered, `nested` inside another span of the
    /// same request's decision on its thread, or not (with nothing entered
    /// around it, or a span of another decision). Relaxed: a count.
    #[inline]
    pub(crate) fn observe_enter(&self, nested: bool) {
        let n = self.nesting.load(Ordering::Relaxed);
        if n >= MOVES {
            return;
        }
        if !nested {
            self.nesting.fetch_or(MOVES, Ordering::Relaxed);
        } else if n < NESTED_ENOUGH {
            self.nesting.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The ringtrace call site without fields: a span's name alone.
    #[inline]
    pub(super) fn bare(&self) -> &'static Callsite {
        if self.all == 0 {
            return self.full;
        }
        self.bare.get_or_init(|| self.site(0))
    }

    /// The ringtrace call site whose arg names are the fields in `mask`.
    pub(super) fn site(&self, mask: u64) -> &'static Callsite {
        if mask == self.all {
            return self.full;
        }
        for slot in &self.subsets {
            match slot.get() {
                Some(&(m, cs)) if m == mask => return cs,
                Some(_) => {}
                None => break,
            }
        }
        self.site_slow(mask)
    }

    #[cold]
    #[inline(never)]
    fn site_slow(&self, mask: u64) -> &'static Callsite {
        let mut more = self.more.lock(); // also orders the makers of `subsets`
        let mut known = self
            .subsets
            .iter()
            .filter_map(|s| s.get())
            .chain(more.iter());
        if let Some(&(_, cs)) = known.find(|(m, _)| *m == mask) {
            return cs;
        }
        let cs = make_site(self.meta, &self.names, mask, self.event);
        match self.subsets.iter().find(|s| s.get().is_none()) {
            Some(slot) => {
                let _ = slot.set((mask, cs));
            }
            None => more.push((mask, cs)),
        }
        cs
    }
}

/// Leaks a ringtrace call site for `meta` with the fields of `mask` as arg
/// names, and registers it (so its id is valid in records from now on).
fn make_site(
    meta: &'static Metadata<'static>,
    names: &[&'static str],
    mask: u64,
    event: bool,
) -> &'static Callsite {
    let args: Vec<&'static str> = names
        .iter()
        .enumerate()
        .filter(|(i, _)| mask >> i & 1 == 1)
        .map(|(_, n)| *n)
        .collect();
    let site = Callsite::new(
        meta.target(),
        meta.name(),
        meta.file().unwrap_or(""),
        meta.line().unwrap_or(0),
        meta.module_path().unwrap_or(""),
        Box::leak(args.into_boxed_slice()),
    );
    // An event's level is its call site's: an arg of the site, not of each
    // record (the encoders write it).
    let site = if event {
        // One small leak per site and field set, as the site itself.
        let level: &'static [(&'static str, &'static str)] =
            Box::leak(Box::new([("level", meta.level().as_str())]));
        site.with_const_args(level)
    } else {
        site
    };
    let cs: &'static Callsite = Box::leak(Box::new(site));
    let _ = cs.is_enabled(); // registers the site: gives it its id
    cs
}

/// Hashes a metadata address (already unique and well spread above bit 3).
#[derive(Default)]
pub(super) struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | b as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_usize(&mut self, n: usize) {
        self.0 = (n as u64)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .rotate_left(29);
    }
}

type SiteMap = HashMap<usize, &'static SiteInfo, BuildHasherDefault<AddrHasher>>;

pub(super) static SITES: Lazy<RwLock<SiteMap>> = Lazy::new(|| RwLock::new(SiteMap::default()));

/// Entries of a thread's first site cache (a power of two): 128 bytes, what
/// a thread that uses a few call sites holds (most of 10,000 threads that
/// each record a span or two).
const SMALL_CACHE_LEN: usize = 8;
/// Entries of the site cache a thread moves to once it uses more sites
/// than the first one keeps (a power of two).
const SITE_CACHE_LEN: usize = 64;

type CacheEntry = Cell<(usize, Option<&'static SiteInfo>)>;

/// Bytes each cache takes from the memory budget.
const SMALL_CACHE_BYTES: u64 = std::mem::size_of::<[CacheEntry; SMALL_CACHE_LEN]>() as u64;
const SITE_CACHE_BYTES: u64 = std::mem::size_of::<[CacheEntry; SITE_CACHE_LEN]>() as u64;

/// A thread's view of `SITES`, four-way by metadata address, so spans
/// and events find their site without a shared lock or a hash map (a
/// collision only sends the lookup to `SITES`). It is on the heap, made at
/// the thread's first lookup that misses if the memory budget has room
/// (taken from it, given back at the thread's exit), not in static TLS:
/// there it was 4 KiB of every thread of the process, recording or not,
/// which threads that never record paid in peak RSS (measured in
/// BENCHMARKS.md, "Measured for design choices"). It starts small (8
/// entries) and moves to 64 entries when a site would push another out of
/// the small one (the four ways of its set taken): a thread that uses a few
/// sites holds 128 bytes, not 1 KiB (10,000 threads: 9 MiB less).
struct SiteCache {
    small: OnceCell<Box<[CacheEntry; SMALL_CACHE_LEN]>>,
    big: OnceCell<Box<[CacheEntry; SITE_CACHE_LEN]>>,
}

impl SiteCache {
    /// The cache in use: the big one once made, else the small one.
    #[inline]
    fn entries(&self) -> Option<&[CacheEntry]> {
        match self.big.get() {
            Some(big) => Some(&big[..]),
            None => self.small.get().map(|small| &small[..]),
        }
    }
}

impl Drop for SiteCache {
    fn drop(&mut self) {
        if self.small.get().is_some() {
            crate::record::registry::give_back_thread_state(SMALL_CACHE_BYTES);
        }
        if self.big.get().is_some() {
            crate::record::registry::give_back_thread_state(SITE_CACHE_BYTES);
        }
    }
}

thread_local! {
    static SITE_CACHE: SiteCache = const {
        SiteCache { small: OnceCell::new(), big: OnceCell::new() }
    };
}

/// Ways of a set of the site caches.
const WAYS: usize = 4;

/// The first of the [`WAYS`] entries (a set: slots `WAYS * i ..`) where
/// `key` may be in a cache of `len` entries, spread by a multiplicative
/// hash. A dozen call sites hot on a thread (a request's spans and events)
/// would often have two of them on one slot of a direct-mapped cache, and
/// three on one pair of a two-way one of 64 entries (about one binary in
/// ten of the service benchmark: two look-ups of `SITES` per request);
/// each such collision sends their look-ups to `SITES` (BENCHMARKS.md,
/// "Measured for design choices"). Keys on one set of the big cache are on
/// one set of the small one (its set is the low bits of the big one's).
#[inline]
fn cache_set(key: usize, len: usize) -> usize {
    let h = (key as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    ((h >> 40) as usize & (len / WAYS - 1)) * WAYS
}

#[inline]
pub(super) fn cached_site(key: usize) -> Option<&'static SiteInfo> {
    SITE_CACHE
        .try_with(|c| {
            let entries = c.entries()?;
            let at = cache_set(key, entries.len());
            let set: &[CacheEntry; WAYS] = entries.get(at..at + WAYS)?.try_into().ok()?;
            set.iter().map(Cell::get).find(|&(k, _)| k == key)?.1
        })
        .ok()
        .flatten()
}

#[inline]
pub(super) fn site_info(meta: &'static Metadata<'static>) -> &'static SiteInfo {
    let key = meta as *const Metadata<'static> as usize;
    if let Some(info) = cached_site(key) {
        return info;
    }
    let info = site_info_slow(key, meta);
    cache_put(key, info);
    info
}

/// The site of metadata `key` if it was made (its call site registered),
/// through the thread's cache, which it fills.
#[inline]
pub(super) fn known_site(key: usize) -> Option<&'static SiteInfo> {
    if let Some(info) = cached_site(key) {
        return Some(info);
    }
    let info = SITES.read().get(&key).copied()?;
    cache_put(key, info);
    Some(info)
}

/// Puts `info` in this thread's cache (making the cache, or moving to the
/// big one, if the budget has room).
#[cold]
#[inline(never)]
fn cache_put(key: usize, info: &'static SiteInfo) {
    let _ = SITE_CACHE.try_with(|c| {
        // Made here, on the slow path, if the budget has room (else the
        // next miss tries again).
        if c.small.get().is_none() && crate::record::registry::take_thread_state(SMALL_CACHE_BYTES)
        {
            let _ = c
                .small
                .set(Box::new([const { Cell::new((0, None)) }; SMALL_CACHE_LEN]));
        }
        let Some(small) = c.small.get() else {
            return;
        };
        if c.big.get().is_none() {
            let at = cache_set(key, SMALL_CACHE_LEN);
            let full = small[at..at + WAYS].iter().all(|e| e.get().1.is_some());
            if !full || !crate::record::registry::take_thread_state(SITE_CACHE_BYTES) {
                put_in(&small[..], key, info);
                return;
            }
            // The thread uses more sites than the small cache keeps: they
            // move to the big one, each set's oldest entry first (so the
            // newest stays in the first way).
            let big = Box::new([const { Cell::new((0, None)) }; SITE_CACHE_LEN]);
            for set in small.chunks_exact(WAYS) {
                for e in set.iter().rev() {
                    if let (k, Some(i)) = e.get() {
                        put_in(&big[..], k, i);
                    }
                }
            }
            let _ = c.big.set(big);
        }
        if let Some(big) = c.big.get() {
            put_in(&big[..], key, info);
        }
    });
}

/// Puts `info` in the first way of its set in `entries`; what the set held
/// moves one way down (the last way's entry, the oldest, is dropped).
fn put_in(entries: &[CacheEntry], key: usize, info: &'static SiteInfo) {
    let at = cache_set(key, entries.len());
    for i in (at + 1..at + WAYS).rev() {
        entries[i].set(entries[i - 1].get());
    }
    entries[at].set((key, Some(info)));
}

#[cold]
#[inline(never)]
fn site_info_slow(key: usize, meta: &'static Metadata<'static>) -> &'static SiteInfo {
    if let Some(&info) = SITES.read().get(&key) {
        return info;
    }
    let mut sites = SITES.write();
    let info = sites
        .entry(key)
        .or_insert_with(|| Box::leak(Box::new(SiteInfo::new(meta))));
    info
}

#[cfg(test)]
mod tests {
    use super::*;

    struct TestCallsite;
    static TEST_CALLSITE: TestCallsite = TestCallsite;
    static TEST_META: Metadata<'static> = tracing_core::metadata! {
        name: "cached",
        target: "sites-test",
        level: tracing_core::Level::INFO,
        fields: &[],
        callsite: &TEST_CALLSITE,
        kind: tracing_core::metadata::Kind::EVENT,
    };
    impl tracing_core::Callsite for TestCallsite {
        fn set_interest(&self, _: tracing_core::Interest) {}
        fn metadata(&self) -> &Metadata<'_> {
            &TEST_META
        }
    }

    /// A thread that uses a few sites keeps them in the small cache (no big
    /// one made); five on one set of it move the thread to the big one,
    /// where all five stay when they are on different sets there.
    #[test]
    fn the_small_cache_moves_to_the_big_one_when_a_set_overflows() {
        let info = site_info(&TEST_META);
        std::thread::spawn(move || {
            let at = cache_set(0x1000, SMALL_CACHE_LEN);
            let mut big_sets = Vec::new();
            let keys: Vec<usize> = (0x1001..)
                .map(|k| k * 8)
                .filter(|&k| {
                    let big = cache_set(k, SITE_CACHE_LEN);
                    let new = cache_set(k, SMALL_CACHE_LEN) == at && !big_sets.contains(&big);
                    if new {
                        big_sets.push(big);
                    }
                    new
                })
                .take(WAYS + 1)
                .collect();
            let big_made = || SITE_CACHE.with(|c| c.big.get().is_some());
            for &k in &keys[..WAYS] {
                cache_put(k, info);
            }
            assert!(!big_made(), "four sites on a set fit the small cache");
            assert!(keys[..WAYS].iter().all(|&k| cached_site(k).is_some()));
            cache_put(keys[WAYS], info);
            assert!(big_made());
            assert!(keys.iter().all(|&k| cached_site(k).is_some()));
        })
        .join()
        .unwrap();
    }

    /// Four sites whose addresses share a set of the cache all stay in it
    /// (three on one pair of the two-way cache before pushed each other
    /// out); a fifth drops the oldest of them.
    #[test]
    fn four_sites_of_one_set_stay_cached() {
        let info = site_info(&TEST_META);
        std::thread::spawn(move || {
            // Keys (aligned like metadata addresses) on one set.
            let at = cache_set(0x1000, SITE_CACHE_LEN);
            let keys: Vec<usize> = (0x1001..)
                .map(|k| k * 8)
                .filter(|&k| cache_set(k, SITE_CACHE_LEN) == at)
                .take(WAYS + 1)
                .collect();
            assert!(cached_site(keys[0]).is_none());
            for &k in &keys[..WAYS] {
                cache_put(k, info);
            }
            assert!(keys[..WAYS].iter().all(|&k| cached_site(k).is_some()));
            cache_put(keys[WAYS], info);
            assert!(keys[1..].iter().all(|&k| cached_site(k).is_some()));
            assert!(
                cached_site(keys[0]).is_none(),
                "the oldest entry of the set is dropped"
            );
        })
        .join()
        .unwrap();
    }
}
