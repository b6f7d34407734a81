//! The pool of mapped-in ring segments (one per budget: the process-wide
//! one's in a session): segments rings give up (outgrown ones once
//! drained, spares given back, rings of exited threads) are kept here,
//! their pages still mapped in, and a growing ring takes one of the size it
//! wants instead of mapping a new one. Memory must
//! be zeroed by someone before its first write; in 4 KiB pages that costs
//! a good part of what a recording thread takes to fill it, in a VM
//! (BENCHMARKS.md, "Measured for design choices"), so a thread whose
//! first growths (512 bytes to 4, 16, 64 KiB... within microseconds of its
//! first event) reuse pooled pages takes no page fault, and neither does the
//! flusher making its spares. Perfetto gets the same from one shared buffer
//! whose chunks are reused: pages are faulted in once per process.
//!
//! Classes: one per power of two from a page (4 KiB) to [`POOL_MAX_BYTES`]
//! (1 MiB), below the size from which segments are backed by huge pages
//! (faulting those in costs far less per byte: the flusher's spare
//! keeps ahead of the producer there). [`SLOTS`] segments per class, each
//! in one atomic word (its address, 64-byte aligned, with log2 of its slots
//! in the low bits, as `Ring::spare`): taken with one CAS (word to 0, the
//! taker owns the segment), put back with one CAS (0 to word). No lock, no
//! system call, so a recording thread's growth path may take from it.
//!
//! Bounds: a pooled segment stays taken from the budget (so the budget's
//! bound on memory holds, pool included). The pool holds at most an eighth
//! of the budget, and only while the budget keeps as much again (an eighth)
//! free: it must not hold the last memory another thread needs. When less
//! is free, `put` and `stock` keep nothing, the flusher's next `trim` gives
//! every pooled segment back (the stock included), and a thread whose first
//! ring or unpooled growth the budget refuses gives pooled segments back
//! itself and asks once more (`Budget::try_take_cold`); the recording hot
//! path never does. `Builder::start` stocks one segment of each size a ring
//! grows through (4 KiB to 1 MiB, ascending, within those bounds and the
//! session's largest ring) when the session writes a file (with system
//! tracing only, call sites stay off until a tracing session starts: no
//! stock then); the flusher restocks a size a growth took. `trim` gives
//! back each size's second slot after [`POOL_IDLE_MS`] unused, and its
//! first (the stock) after [`STOCK_IDLE_MS`] without a ring made or grown
//! (a process that stopped recording holds no stock); the session empties
//! the pool at stop. Outside a session the pool is closed: nothing is kept.

use super::count::ByteCount;
use crate::record::segment::{
    alloc_mapped, free_mapped, map_in_segment, pack_segment, segment_bytes, unpack_segment, PAGE,
};
use crate::record::sync::{fence, AtomicBool, AtomicU64, Ordering};
// Counters that order nothing (the segments are handed over by `words`
// alone): std's atomics even under loom, outside the models.
use std::sync::atomic::{AtomicU64 as PlainU64, Ordering as Plain};

/// Segments per class: one kept as stock, one more for a thread that gives
/// one back while another is pooled.
pub(crate) const SLOTS: usize = 2;

/// Largest pooled segment. Bigger segments are backed by transparent huge
/// pages (`segment::HUGE_PAGE`, 2 MiB), far cheaper per byte to fault in
/// (BENCHMARKS.md, "Measured for design choices"): the flusher's spare keeps
/// ahead of a producer there.
pub(crate) const POOL_MAX_BYTES: usize = 1 << 20;

/// log2 of the smallest class's slots (a page).
const MIN_CLASS: u32 = (PAGE / 8).trailing_zeros();

/// Classes: pages to `POOL_MAX_BYTES`.
pub(crate) const CLASSES: usize = ((POOL_MAX_BYTES / 8).trailing_zeros() - MIN_CLASS) as usize + 1;

/// A pooled segment not taken for this long is given back (its class's
/// stock excepted): the threads that grew have stopped growing.
pub(crate) const POOL_IDLE_MS: u64 = 1000;

/// The stock (each class's first slot) is given back after this long
/// without a ring made or grown: the process stopped recording (or never
/// started: system tracing with no tracing session). Long enough that a
/// service recording in bursts keeps its first laps free of page faults;
/// the flusher restocks after the next growth.
pub(crate) const STOCK_IDLE_MS: u64 = 10_000;

/// Part of the budget the pool may hold (`limit / POOL_SHARE`).
const POOL_SHARE: u64 = 8;

/// The pool's state, in its budget (`Budget`); used through [`Pool`].
pub(crate) struct PoolSlots {
    /// `CLASSES * SLOTS` words: class `c`'s slot `s` at `c * SLOTS + s`; 0
    /// or a pooled segment (`segment::pack_segment`). Whoever changes a word
    /// with a CAS from 0 gives the segment to the pool (Release); whoever
    /// changes it to 0 owns the segment (Acquire).
    words: [AtomicU64; CLASSES * SLOTS],
    /// When each slot was last filled (ms, `now_ms`); only read by `trim`.
    since: [PlainU64; CLASSES * SLOTS],
    /// Bytes pooled now (approximate while segments move: a soft cap).
    bytes: PlainU64,
    /// Segments are kept only while a session is open. SeqCst with a fence
    /// in `put` and `close`, so that a segment put while the pool closes is
    /// seen by one of them (see `put`).
    open: AtomicBool,
    /// When the flusher last saw a ring made or grown (ms, `now_ms`;
    /// `touch`): the stock's idle time.
    touched: PlainU64,
    /// No slot is idle before this (ms): `trim` looks at none until then
    /// (it runs every pass of the flusher, every 5 ms). Set by `trim`'s
    /// scan, lowered by `put` to its slot's time.
    due: PlainU64,
    /// The largest segment of the session's rings, in slots.
    largest: PlainU64,
    /// Segments taken from the pool (monotonic; tests).
    taken: PlainU64,
    /// Bytes stocked (monotonic; tests).
    stocked: PlainU64,
}

/// Milliseconds since the first call (a coarse clock for idle times).
pub(crate) fn now_ms() -> u64 {
    ms_at(std::time::Instant::now())
}

/// `now_ms` at `t` (the flusher reads the clock once per pass).
pub(crate) fn ms_at(t: std::time::Instant) -> u64 {
    static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    t.saturating_duration_since(*EPOCH.get_or_init(std::time::Instant::now))
        .as_millis() as u64
}

/// The class of a segment of `words` slots, if the pool keeps that size.
fn class_of(words: usize) -> Option<usize> {
    let log = words.trailing_zeros();
    (words.is_power_of_two() && log >= MIN_CLASS && ((log - MIN_CLASS) as usize) < CLASSES)
        .then(|| (log - MIN_CLASS) as usize)
}

/// The body of `PoolSlots::new`, a `const fn` except under loom.
macro_rules! new_pool {
    () => {{
        #[allow(clippy::declare_interior_mutable_const)]
        const IDLE: PlainU64 = PlainU64::new(0);
        PoolSlots {
            words: new_pool!(@words),
            since: [IDLE; CLASSES * SLOTS],
            bytes: PlainU64::new(0),
            open: new_pool!(@open),
            touched: PlainU64::new(0),
            due: PlainU64::new(0),
            largest: PlainU64::new(0),
            taken: PlainU64::new(0),
            stocked: PlainU64::new(0),
        }
    }};
    (@words) => {{
        #[cfg(not(ringtrace_loom))]
        {
            #[allow(clippy::declare_interior_mutable_const)]
            const EMPTY: AtomicU64 = AtomicU64::new(0);
            [EMPTY; CLASSES * SLOTS]
        }
        #[cfg(ringtrace_loom)]
        {
            std::array::from_fn(|_| AtomicU64::new(0))
        }
    }};
    (@open) => {
        AtomicBool::new(false)
    };
}

impl PoolSlots {
    #[cfg(not(ringtrace_loom))]
    pub(crate) const fn new() -> PoolSlots {
        new_pool!()
    }

    #[cfg(ringtrace_loom)]
    pub(crate) fn new() -> PoolSlots {
        new_pool!()
    }
}

/// The pool of a budget: its state and the budget's byte count, which
/// every pooled segment's bytes stay in (`Budget::pool`).
#[derive(Clone, Copy)]
pub(crate) struct Pool<'a> {
    slots: &'a PoolSlots,
    count: &'a ByteCount,
}

impl<'a> Pool<'a> {
    /// The pool kept in `slots`, its bytes counted in `count`.
    pub(super) fn of(slots: &'a PoolSlots, count: &'a ByteCount) -> Pool<'a> {
        Pool { slots, count }
    }

    /// Starts keeping segments (a session started whose rings grow up to
    /// `largest` slots: `stock` makes none bigger).
    pub(crate) fn open(&self, largest: usize) {
        self.slots.largest.store(largest as u64, Plain::Relaxed);
        self.touch();
        self.slots.open.store(true, Ordering::Relaxed);
    }

    /// The flusher saw a ring made or grown: the stock is in use (see
    /// `trim`). Not called by recording threads.
    pub(crate) fn touch(&self) {
        self.slots.touched.store(now_ms(), Plain::Relaxed);
    }

    /// Stops keeping segments and gives back every pooled one (a session
    /// stopped), including one a thread puts meanwhile (see `put`).
    pub(crate) fn close(&self) {
        self.slots.open.store(false, Ordering::SeqCst);
        // Pairs with `put`'s fence: either its slot's word is seen below,
        // or it sees `open` false and frees the segment itself.
        fence(Ordering::SeqCst);
        self.free_all();
    }

    /// Gives back every pooled segment; returns their bytes.
    fn free_all(&self) -> u64 {
        (0..CLASSES * SLOTS).map(|i| self.free_slot(i)).sum()
    }

    /// Whether the budget is short: less than an eighth of it is free
    /// (beyond what the pool holds, which is in `used`). The pool then
    /// keeps nothing.
    fn short(&self) -> bool {
        !self.count.has_room(self.count.limit() / POOL_SHARE)
    }

    /// A cold path the budget refused `bytes` (a thread's first ring, a
    /// growth the pool could not serve): gives pooled segments back,
    /// largest first, until that much is free or the pool is empty.
    /// Returns the bytes given back. Takes the pooled words with a CAS each
    /// and unmaps (system calls): never on the recording hot path.
    pub(crate) fn give_back_for(&self, bytes: u64) -> u64 {
        let mut freed = 0;
        for i in (0..CLASSES * SLOTS).rev() {
            if self.count.has_room(bytes) {
                break;
            }
            freed += self.free_slot(i);
        }
        freed
    }

    /// Segments taken so far (monotonic).
    #[cfg(any(test, ringtrace_loom))]
    pub(crate) fn taken(&self) -> u64 {
        self.slots.taken.load(Plain::Relaxed)
    }

    /// Bytes stocked so far (monotonic; the session's tests).
    #[cfg(all(test, feature = "enable"))]
    pub(crate) fn stocked(&self) -> u64 {
        self.slots.stocked.load(Plain::Relaxed)
    }

    /// Bytes pooled now.
    #[cfg(any(test, ringtrace_loom))]
    pub(crate) fn pooled_bytes(&self) -> u64 {
        self.slots.bytes.load(Plain::Relaxed)
    }

    /// Takes a pooled segment of `min_words..=max_words` slots (the
    /// smallest there is), mapped in, its bytes in the budget: the caller
    /// owns it. Lock-free, no system call: a recording thread's growth path
    /// calls it. Its words hold whatever its last owner wrote (see
    /// `Ring::grow` for why nothing reads them before writing).
    pub(crate) fn take(
        &self,
        min_words: usize,
        max_words: usize,
    ) -> Option<(*mut AtomicU64, usize)> {
        let first = class_of(min_words.max(PAGE / 8).next_power_of_two())?;
        for class in first..CLASSES {
            if (1usize << (class as u32 + MIN_CLASS)) > max_words {
                break;
            }
            for s in (0..SLOTS).rev() {
                let word = &self.slots.words[class * SLOTS + s];
                let w = word.load(Ordering::Relaxed);
                // Acquire: pairs with `put`'s Release, so the segment's words
                // (their last owner's stores) are ours before we write. A
                // CAS, not a swap: another taker may have won it and the
                // slot been refilled meanwhile; an equal word then is that
                // new segment (same address and size), just as good.
                if w != 0
                    && word
                        .compare_exchange(w, 0, Ordering::Acquire, Ordering::Relaxed)
                        .is_ok()
                {
                    let (base, words) = unpack_segment(w);
                    self.slots
                        .bytes
                        .fetch_sub(segment_bytes(words), Plain::Relaxed);
                    self.slots.taken.fetch_add(1, Plain::Relaxed);
                    return Some((base, words));
                }
            }
        }
        None
    }

    /// Gives a mapped segment (`segment::alloc_mapped(words)`, its bytes taken
    /// from the budget, no reference into it left) to the pool if the pool is
    /// open, keeps that size, has a free slot for it, and the bounds allow
    /// (see the module's doc). Else the caller still owns it (and unmaps it).
    pub(crate) fn put(&self, base: *mut AtomicU64, words: usize) -> bool {
        let Some(class) = class_of(words) else {
            return false;
        };
        let bytes = segment_bytes(words);
        if !self.slots.open.load(Ordering::Relaxed)
            || self.short()
            || self.slots.bytes.load(Plain::Relaxed) + bytes > self.count.limit() / POOL_SHARE
        {
            return false;
        }
        let packed = pack_segment(base, words);
        for s in 0..SLOTS {
            let i = class * SLOTS + s;
            if self.slots.words[i].load(Ordering::Relaxed) != 0 {
                continue;
            }
            // A segment freed while partly written (a ring dropped) may
            // have pages never touched: mapped in now, while it is ours.
            map_in_segment(base, words);
            self.slots.bytes.fetch_add(bytes, Plain::Relaxed);
            let since = now_ms();
            self.slots.since[i].store(since, Plain::Relaxed);
            // Before the word is published: a scan that sees the word sees
            // `due` at most this slot's time (one racing with us may raise
            // `due` past it again: then it is trimmed a pass late).
            self.slots
                .due
                .fetch_min(since + POOL_IDLE_MS, Plain::Relaxed);
            // Release: pairs with `take`'s Acquire; our writes to the
            // segment (and its mapping in) happen before its next owner's.
            match self.slots.words[i].compare_exchange(
                0,
                packed,
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    // The pool may have closed since `open` was loaded
                    // above, its scan missing our word. Pairs with
                    // `close`'s fence: either close sees our word, or we see
                    // `open` false here; then whoever wins the word (we,
                    // `close`, a taker) frees it. The segment is no longer
                    // the caller's either way.
                    fence(Ordering::SeqCst);
                    if !self.slots.open.load(Ordering::Relaxed) {
                        self.free_slot(i);
                    }
                    return true;
                }
                Err(_) => {
                    self.slots.bytes.fetch_sub(bytes, Plain::Relaxed);
                }
            }
        }
        false
    }

    /// Frees slot `i`'s segment, if any, giving its bytes back; returns
    /// them.
    fn free_slot(&self, i: usize) -> u64 {
        let w = self.slots.words[i].load(Ordering::Relaxed);
        if w == 0
            || self.slots.words[i]
                .compare_exchange(w, 0, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        {
            return 0;
        }
        let (base, words) = unpack_segment(w);
        self.slots
            .bytes
            .fetch_sub(segment_bytes(words), Plain::Relaxed);
        // SAFETY: the CAS made us the segment's owner (no taker can have
        // it); it came to the pool from `alloc_mapped(words)` (`put`'s
        // contract) and leaves it here once.
        unsafe { free_mapped(base, words) };
        self.count.give_back(segment_bytes(words));
        segment_bytes(words)
    }

    /// Flusher: gives back the segments pooled for [`POOL_IDLE_MS`] or
    /// more, but for each class's first slot (the stock), given back after
    /// [`STOCK_IDLE_MS`] without a ring made or grown; everything when the
    /// budget is short. Returns how many.
    #[cfg(all(test, not(ringtrace_loom)))]
    pub(crate) fn trim(&self) -> usize {
        self.trim_at(now_ms())
    }

    /// `trim` at time `now` (`now_ms`). Before the earliest time a pooled
    /// segment can be idle, and with the budget not short, it looks at no
    /// slot: most passes of the flusher.
    pub(crate) fn trim_at(&self, now: u64) -> usize {
        let short = self.short();
        if !short && now < self.slots.due.load(Plain::Relaxed) {
            return 0;
        }
        let touched = self.slots.touched.load(Plain::Relaxed);
        // Slots filled after this scan are idle POOL_IDLE_MS after it at
        // the earliest (`put` lowers `due` to its own slot's time anyway);
        // the stock's time only moves later with `touched`.
        let mut due = now + POOL_IDLE_MS;
        let mut freed = 0;
        for class in 0..CLASSES {
            for s in 0..SLOTS {
                let i = class * SLOTS + s;
                if self.slots.words[i].load(Ordering::Relaxed) == 0 {
                    continue;
                }
                let since = self.slots.since[i].load(Plain::Relaxed);
                let idle_at = if s == 0 {
                    since.max(touched) + STOCK_IDLE_MS
                } else {
                    since + POOL_IDLE_MS
                };
                if (short || now >= idle_at) && self.free_slot(i) > 0 {
                    freed += 1;
                } else {
                    due = due.min(idle_at);
                }
            }
        }
        self.slots.due.store(due, Plain::Relaxed);
        freed
    }

    /// `Builder::start` (and the flusher, through `stock_until`, after a
    /// growth): stocks one segment of each size a ring grows through from
    /// its first 512 bytes (4, 16, 64, 256 KiB, 1 MiB) that has none, smallest
    /// first, mapped in here, while the bounds allow: the first growths of
    /// a thread then take pooled pages. Returns the bytes newly stocked.
    pub(crate) fn stock(&self) -> u64 {
        self.stock_until(&|| false)
    }

    /// `stock`, stopping before the next size once `interrupted()`: the
    /// flusher has a growing ring's spare to make first (while it maps in
    /// 1 MiB of 4 KiB pages a fresh thread can outgrow 1 MiB and map its
    /// next segment itself).
    pub(crate) fn stock_until(&self, interrupted: &dyn Fn() -> bool) -> u64 {
        let mut stocked = 0;
        for class in (0..CLASSES).step_by(2) {
            if interrupted() {
                break;
            }
            if (0..SLOTS).any(|s| self.slots.words[class * SLOTS + s].load(Ordering::Relaxed) != 0)
            {
                continue;
            }
            let words = 1usize << (class as u32 + MIN_CLASS);
            if words as u64 > self.slots.largest.load(Plain::Relaxed) {
                break; // no ring of the session grows to it
            }
            let bytes = segment_bytes(words);
            // Only while an eighth of the budget stays free after it.
            if !self.slots.open.load(Ordering::Relaxed)
                || !self
                    .count
                    .has_room(bytes.saturating_add(self.count.limit() / POOL_SHARE))
                || self.slots.bytes.load(Plain::Relaxed) + bytes > self.count.limit() / POOL_SHARE
                || !self.count.try_take(bytes)
            {
                break;
            }
            let Some(base) = alloc_mapped(words) else {
                self.count.give_back(bytes);
                break;
            };
            if self.put(base, words) {
                stocked += bytes;
                self.slots.stocked.fetch_add(bytes, Plain::Relaxed);
            } else {
                // SAFETY: just mapped above, never shared, freed once.
                unsafe { free_mapped(base, words) };
                self.count.give_back(bytes);
            }
        }
        stocked
    }
}

#[cfg(all(test, not(ringtrace_loom)))]
mod tests {
    use super::*;
    use crate::record::budget::Budget;

    const PAGE_WORDS: usize = PAGE / 8;

    /// A mapped segment of `words` slots taken from `budget`.
    fn segment(budget: &Budget, words: usize) -> *mut AtomicU64 {
        assert!(budget.try_take(segment_bytes(words)));
        alloc_mapped(words).expect("mmap")
    }

    /// A put segment is taken back (the smallest one that fits), its bytes
    /// stay counted while pooled, and a closed pool keeps nothing.
    #[test]
    fn put_take_and_close_keep_the_budget_exact() {
        let budget = Budget::leaked(64 << 20);
        let pool = budget.pool();
        let a = segment(budget, PAGE_WORDS);
        assert!(!pool.put(a, PAGE_WORDS), "closed: the caller keeps it");
        pool.open(usize::MAX);
        assert!(pool.put(a, PAGE_WORDS));
        let b = segment(budget, 4 * PAGE_WORDS);
        assert!(pool.put(b, 4 * PAGE_WORDS));
        assert_eq!(pool.pooled_bytes(), segment_bytes(5 * PAGE_WORDS));
        assert_eq!(budget.used(), segment_bytes(5 * PAGE_WORDS));
        assert_eq!(
            pool.take(2 * PAGE_WORDS, 1 << 20),
            Some((b, 4 * PAGE_WORDS))
        );
        assert_eq!(pool.take(2 * PAGE_WORDS, 1 << 20), None, "none big enough");
        assert_eq!(pool.take(PAGE_WORDS, PAGE_WORDS), Some((a, PAGE_WORDS)));
        assert_eq!(pool.taken(), 2);
        assert!(pool.put(a, PAGE_WORDS));
        assert!(pool.put(b, 4 * PAGE_WORDS));
        assert_eq!(
            pool.take(PAGE_WORDS * 2, PAGE_WORDS * 2),
            None,
            "never above the most asked for"
        );
        pool.close();
        assert_eq!(pool.pooled_bytes(), 0);
        assert_eq!(budget.used(), 0, "every pooled byte given back at close");
        assert_eq!(pool.take(PAGE_WORDS, 1 << 20), None);
    }

    /// The pool never holds the last memory of the budget nor more than an
    /// eighth of it, nor sizes outside its classes, nor more than `SLOTS`
    /// per class.
    #[test]
    fn the_pool_keeps_within_its_bounds() {
        // An eighth of 1 MiB: 128 KiB.
        let budget = Budget::leaked(1 << 20);
        let pool = budget.pool();
        pool.open(usize::MAX);
        let big = 16 * PAGE_WORDS; // 64 KiB
        let a = segment(budget, big);
        let b = segment(budget, big);
        let c = segment(budget, big);
        assert!(pool.put(a, big));
        assert!(pool.put(b, big));
        assert!(!pool.put(c, big), "over an eighth of the budget");
        pool.close();
        // SAFETY: `c` was mapped above and is not pooled.
        unsafe { free_mapped(c, big) };
        budget.give_back(segment_bytes(big));
        assert_eq!(budget.used(), 0);

        let budget = Budget::leaked(64 << 20);
        let pool = budget.pool();
        pool.open(usize::MAX);
        let segs: Vec<_> = (0..3).map(|_| segment(budget, PAGE_WORDS)).collect();
        assert!(pool.put(segs[0], PAGE_WORDS));
        assert!(pool.put(segs[1], PAGE_WORDS));
        assert!(!pool.put(segs[2], PAGE_WORDS), "two per class");
        let huge = 2 * (POOL_MAX_BYTES / 8);
        let h = segment(budget, huge);
        assert!(!pool.put(h, huge), "huge-page sizes are not pooled");
        // The budget with less than the segment free after it.
        budget.set_limit(budget.used() + segment_bytes(PAGE_WORDS) - 8);
        pool.take(PAGE_WORDS, PAGE_WORDS).unwrap();
        assert!(!pool.put(segs[0], PAGE_WORDS), "the last memory");
        pool.close();
        for (base, words) in [(segs[0], PAGE_WORDS), (segs[2], PAGE_WORDS), (h, huge)] {
            // SAFETY: mapped above, not pooled, freed once.
            unsafe { free_mapped(base, words) };
            budget.give_back(segment_bytes(words));
        }
        assert_eq!(budget.used(), 0);
    }

    /// Stocking maps one segment per class in, smallest first, within an
    /// eighth of the budget and while as much again stays free; trimming
    /// gives back what was not taken for a second, the stock excepted.
    #[test]
    fn stock_and_trim() {
        let budget = Budget::leaked(4 << 20); // an eighth: 512 KiB
        let pool = budget.pool();
        assert_eq!(pool.stock(), 0, "closed");
        pool.open(usize::MAX);
        let stocked = pool.stock();
        // 4 + 16 + 64 + 256 KiB; 1 MiB would pass the eighth.
        assert_eq!(stocked, (4 + 16 + 64 + 256) << 10);
        assert_eq!(budget.used(), stocked);
        assert_eq!(pool.stock(), 0, "stocked already");
        let (base, words) = pool.take(PAGE_WORDS, PAGE_WORDS).unwrap();
        assert_eq!(pool.stock(), segment_bytes(PAGE_WORDS), "restocked");
        assert!(pool.put(base, words), "a second 4 KiB");
        assert_eq!(pool.trim(), 0, "not idle yet");
        let later = now_ms() + POOL_IDLE_MS;
        assert_eq!(pool.trim_at(later), 1, "the second 4 KiB");
        assert_eq!(budget.used(), stocked, "the stock is kept");

        // The stock too, once no ring was made or grew for STOCK_IDLE_MS.
        pool.touch();
        let touched = now_ms();
        assert_eq!(
            pool.trim_at(touched + STOCK_IDLE_MS - 2),
            0,
            "a ring grew within STOCK_IDLE_MS"
        );
        assert_eq!(pool.trim_at(touched + STOCK_IDLE_MS + 2), 4);
        assert_eq!(pool.pooled_bytes(), 0);
        assert_eq!(budget.used(), 0, "an idle process holds no stock");
        pool.close();

        // Rings of 64 KiB at most: nothing bigger is stocked.
        let budget = Budget::leaked(32 << 20);
        let pool = budget.pool();
        pool.open(64 << 10 >> 3);
        assert_eq!(pool.stock(), (4 + 16 + 64) << 10);
        pool.close();
        assert_eq!(budget.used(), 0);
    }

    /// `trim` skips its scan until the earliest time a slot can be idle,
    /// and a segment put after a scan lowers that time: it is still given
    /// back POOL_IDLE_MS after it was put, not at the scan's later guess.
    #[test]
    fn trim_scans_from_the_earliest_idle_time_a_put_included() {
        let budget = Budget::leaked(4 << 20);
        let pool = budget.pool();
        pool.open(usize::MAX);
        pool.stock();
        let t0 = now_ms();
        // A scan an hour ahead: the stock goes, and the empty pool's next
        // scan is set an hour ahead too.
        assert_eq!(pool.trim_at(t0 + 3600 * 1000), 4);
        assert_eq!(pool.pooled_bytes(), 0);
        let seg = segment(budget, PAGE_WORDS);
        assert!(pool.put(seg, PAGE_WORDS));
        let seg = segment(budget, PAGE_WORDS);
        assert!(pool.put(seg, PAGE_WORDS), "a second 4 KiB");
        let put_at = now_ms();
        assert_eq!(pool.trim_at(put_at), 0, "not idle yet");
        assert_eq!(
            pool.trim_at(put_at + POOL_IDLE_MS + 2),
            1,
            "the second 4 KiB, idle a second after it was put"
        );
        assert_eq!(
            pool.pooled_bytes(),
            segment_bytes(PAGE_WORDS),
            "the stock slot stays"
        );
        pool.close();
        assert_eq!(budget.used(), 0);
    }
}
