//! The per-thread ring: a bounded single-producer, single-consumer queue of
//! variable-length records made of 64-bit words.
//!
//! # Layout
//!
//! The storage is one or more segments, each `capacity` words (a power of
//! two), each word an `AtomicU64`, so every access is an atomic load or store
//! and no access can be a data race even when the consumer reads a slot the
//! producer is overwriting (flight-recorder mode). On x86-64 and AArch64 a
//! relaxed atomic load or store is a plain `mov` / `ldr` / `str`, so this
//! costs nothing over a raw buffer.
//!
//! A ring starts with one small segment (512 bytes, from the heap) and grows:
//! when a record does not fit, the producer takes a segment at least four
//! times as big (the consumer's spare, else one from the budget's pool of
//! mapped-in segments, `record::budget`, else its own `mmap`, taken from the
//! process-wide `Budget`), fills in the next of `MAX_SEGMENTS` slots (`base`,
//! `len`, `start`: the first position it holds) and publishes it with
//! `made.store(Release)`; it writes only into its newest segment. The
//! consumer reads position `p` from the last segment whose `start <= p`
//! (Acquire of `made`), and gives a segment up (`freed.store(Release)`: to
//! the pool, or unmapped and its bytes given back) once its tail has passed
//! the next one's start. The consumer also makes, ahead of time, the segment
//! a ring that grew will want next (a spare, `Ring::prepare_spare`, from the
//! pool first), so that the producer grows into memory mapped in off its
//! thread. A reused segment holds its earlier owner's words: nothing reads a
//! slot the producer has not written in it (see `Ring::grow`). In overwrite
//! mode the producer copies the records not yet consumed into the new
//! segment, which starts at the tail, so the oldest records are always in
//! the segment it may free them in.
//!
//! `head` and `tail` are monotonically increasing word positions (never
//! wrapped; the slot of position `p` is `p & mask`). Records may straddle the
//! end of the storage. Every record starts with a header word (`header`);
//! the ring only reads its length.
//!
//! # Protocol
//!
//! * Producer (the owning thread): reserves `n` words if `head + n - tail <=
//!   capacity`, stores the words (Relaxed), then publishes with
//!   `head.store(Release)`. It reads `tail` with Acquire (pairs with the
//!   consumer's release CAS: the consumer is done reading the words it freed).
//!   A cached copy of `tail` avoids touching the consumer's cache line on most
//!   writes.
//! * Drop mode: when full (and it cannot grow) the record is dropped and
//!   counted; the count is put into the stream as a `LOST` marker in front of
//!   the next record that fits, so the reader knows exactly where the gap is.
//! * Overwrite mode: when full (and it cannot grow) the producer frees the
//!   oldest records itself by advancing `tail` with CAS, one whole record at
//!   a time, counting each.
//! * Consumer (the flusher): loads `head` (Acquire, pairs with the producer's
//!   publish), copies whole records out, then advances `tail` from the value it
//!   started at with a CAS (AcqRel). If the CAS fails the producer has freed
//!   some of those records meanwhile: the copies of them may be torn and are
//!   discarded, the copies past the new `tail` are intact (the producer writes
//!   only into slots of positions below `tail`), so the CAS is retried from
//!   there.
//!
//! # Rooms
//!
//! This module holds the ring's state and what both sides read; the
//! producer's path is in `producer` (reserving, the slow path, overwrite
//! mode's freeing), growing and the consumer's spares in `growth` (with the
//! `GROWTH` doorbell), the consumer's copy in `drain`, a ring telling the
//! consumer it has records again after it was found drained in `announce`.
//! The segments' memory is `record::segment`'s, and their bytes are the
//! budget's.

mod announce;
mod drain;
mod growth;
mod producer;
#[cfg(all(test, not(ringtrace_loom)))]
mod tests;

pub(crate) use announce::ANNOUNCED;
pub(crate) use growth::GROWTH;
pub(crate) use producer::Reservation;

use crate::record::budget::Budget;
use crate::record::segment::{alloc_storage, is_mapped, segment_bytes, words_for, PAGE};
use crate::record::sync::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};
use crossbeam_utils::CachePadded;

/// Largest record a ring accepts, in words. Bigger events are dropped and
/// counted as oversized: a record must leave room for others in the ring.
pub(crate) fn max_record_words(capacity: usize) -> usize {
    (capacity / 4).clamp(4, (1 << 20) - 1)
}

/// Segments a ring can hold at once: its newest (the producer's) and the
/// older ones the consumer has not freed yet. Each growth at least
/// quadruples the ring, and growing into the last free slot goes straight
/// to the ring's largest size (`Ring::next_words`), so a ring reaches any
/// size without waiting for the consumer to free a segment. (More slots
/// would make `Ring` larger, and a thread's first event moves it on its
/// stack: a page more of each thread's stack, see `tests/memory.rs`.)
const MAX_SEGMENTS: usize = 8;

/// One piece of a ring's storage: `len` slots (a power of two) holding the
/// records at positions `start..` (slot of position `p`: `p & (len - 1)`)
/// until the next segment's `start`. Written by the producer before it
/// publishes the segment (`Ring::made`), read by the consumer after.
struct SegmentSlot {
    base: AtomicPtr<AtomicU64>,
    len: AtomicU64,
    start: AtomicU64,
}

impl SegmentSlot {
    fn empty() -> SegmentSlot {
        SegmentSlot {
            base: AtomicPtr::new(std::ptr::null_mut()),
            len: AtomicU64::new(0),
            start: AtomicU64::new(0),
        }
    }
}

pub(crate) struct Ring {
    overwrite: bool,
    /// Next position the producer writes. Written only by the producer.
    head: CachePadded<AtomicU64>,
    /// First position not yet consumed (or freed by the producer in overwrite mode).
    tail: CachePadded<AtomicU64>,
    producer: CachePadded<ProducerState>,
    /// Segments `freed..made`, oldest first; segment `i` is in slot
    /// `i % MAX_SEGMENTS`.
    segments: [SegmentSlot; MAX_SEGMENTS],
    /// Segments ever made; the producer's is `made - 1`. Stored (Release) by
    /// the producer after it filled the segment's slot.
    made: AtomicU64,
    /// Segments the consumer has freed. Stored (Release) by the consumer
    /// once it is done with the segment's slot and storage.
    freed: AtomicU64,
    /// Records freed by the producer in overwrite mode (monotonic).
    overwritten: AtomicU64,
    /// A segment the consumer (the flusher) made ahead of time for the
    /// producer's next growth (`prepare_spare`; it maps it in right after
    /// handing it over), or 0: its base
    /// address with log2 of its slots in the low bits (storage is aligned
    /// to `STORAGE_ALIGN`), so one word hands both over. Only the consumer
    /// stores a spare, into an empty slot (Release); whoever swaps it back
    /// to 0 with a successful CAS owns it: the producer, to grow into it, or
    /// the consumer, to free it. Its bytes are in the budget from when it is
    /// made.
    spare: AtomicU64,
    /// Largest segment this ring grows to, in slots.
    max_words: usize,
    /// Smallest segment it grows into, in slots: a page for a thread's
    /// ring (`Ring::new`), whose later segments are mappings of their own,
    /// so a first segment smaller than a quarter page grows to a page at
    /// once; no bound for the tests' tiny rings.
    min_next_words: usize,
    /// Where every segment's bytes are taken from and given back to.
    budget: &'static Budget,
    /// False while the ring is quiet: found drained by the consumer and
    /// nothing announced since (see `announce`).
    announced: AtomicBool,
    /// The id the ring is announced with (its thread's sequence id).
    id: AtomicU32,
}

/// Fields only the producer writes; atomics only so the struct is `Sync`.
struct ProducerState {
    /// The segment the producer writes into (the newest): its base pointer,
    /// `len - 1` and largest record, for the hot path.
    base: AtomicPtr<AtomicU64>,
    mask: AtomicU64,
    max_record: AtomicU64,
    /// `start` of that segment: slots of earlier positions live in older
    /// segments, so the producer's free room counts from here at the least.
    seg_start: AtomicU64,
    /// The consumer's tail as last read, lowered (never raised) so that the
    /// fast path stops at `prefaulted`. The one field here the consumer
    /// stores too: far lower, to make a quiet ring's next record take the
    /// slow path and announce the ring (`announce`).
    cached_tail: AtomicU64,
    /// Positions of the segment's first lap below this are mapped in
    /// (`u64::MAX`: the whole segment). Past it, `reserve_slow` maps in more.
    prefaulted: AtomicU64,
    /// Records dropped in drop mode and not yet reported by a `LOST` marker.
    pending_lost: AtomicU64,
    /// Records dropped in drop mode, in total (monotonic).
    dropped: AtomicU64,
    /// Records dropped because they were larger than `max_record_words`.
    oversized: AtomicU64,
}

impl Ring {
    /// A ring whose first segment has at least `initial_bytes` bytes and
    /// which grows, at least quadrupling, up to `max_bytes` (both rounded up
    /// to a power of two, minimum 512 bytes) while `budget` allows. When it
    /// cannot grow, drop mode drops; overwrite mode frees its own oldest
    /// records once the older segments are consumed. `None` when the budget
    /// cannot hold the first segment.
    ///
    /// The segment is mapped in at once (see `prefault`): at 512 bytes that is
    /// one page, a few microseconds on the thread's first event.
    pub(crate) fn new(
        initial_bytes: usize,
        max_bytes: usize,
        overwrite: bool,
        budget: &'static Budget,
    ) -> Option<Ring> {
        let max_words = words_for(max_bytes);
        let initial = words_for(initial_bytes).min(max_words);
        // A cold path: pooled segments are given back if the budget is short.
        if !budget.try_take_cold(segment_bytes(initial)) {
            return None;
        }
        let mut ring = Ring::build(initial, max_words, overwrite, budget);
        ring.min_next_words = PAGE / 8;
        Some(ring)
    }

    /// A ring of exactly `words` words (a power of two; tiny ones for models)
    /// that never grows, with a budget of its own.
    #[cfg(test)]
    pub(crate) fn with_words(words: usize, overwrite: bool) -> Ring {
        Ring::growable(words, words, overwrite, Budget::leaked(u64::MAX))
    }

    /// A ring of `words` words growing up to `max_words` within `budget`
    /// (for models and tests; takes the first segment from the budget).
    #[cfg(test)]
    pub(crate) fn growable(
        words: usize,
        max_words: usize,
        overwrite: bool,
        budget: &'static Budget,
    ) -> Ring {
        assert!(words.is_power_of_two() && words >= 8 && max_words >= words);
        assert!(budget.try_take(segment_bytes(words)));
        Ring::build(words, max_words, overwrite, budget)
    }

    fn build(words: usize, max_words: usize, overwrite: bool, budget: &'static Budget) -> Ring {
        let base = alloc_storage(words, is_mapped(0, words)).expect("heap storage");
        let segments: [SegmentSlot; MAX_SEGMENTS] = std::array::from_fn(|_| SegmentSlot::empty());
        segments[0].base.store(base, Ordering::Relaxed);
        segments[0].len.store(words as u64, Ordering::Relaxed);
        Ring {
            overwrite,
            head: CachePadded::new(AtomicU64::new(0)),
            tail: CachePadded::new(AtomicU64::new(0)),
            producer: CachePadded::new(ProducerState {
                base: AtomicPtr::new(base),
                mask: AtomicU64::new(words as u64 - 1),
                max_record: AtomicU64::new(max_record_words(words) as u64),
                seg_start: AtomicU64::new(0),
                cached_tail: AtomicU64::new(0),
                prefaulted: AtomicU64::new(u64::MAX), // heap storage, mapped in
                pending_lost: AtomicU64::new(0),
                dropped: AtomicU64::new(0),
                oversized: AtomicU64::new(0),
            }),
            segments,
            made: AtomicU64::new(1),
            freed: AtomicU64::new(0),
            overwritten: AtomicU64::new(0),
            spare: AtomicU64::new(0),
            max_words,
            min_next_words: 0,
            budget,
            announced: AtomicBool::new(true),
            id: AtomicU32::new(0),
        }
    }

    fn slot(&self, index: u64) -> &SegmentSlot {
        &self.segments[(index % MAX_SEGMENTS as u64) as usize]
    }

    /// Slots of the segment the producer writes into now.
    pub(crate) fn capacity_words(&self) -> usize {
        self.producer.mask.load(Ordering::Relaxed) as usize + 1
    }

    /// Segments made so far (monotonic): it changes when the ring grows.
    pub(crate) fn segments_made(&self) -> u64 {
        self.made.load(Ordering::Relaxed)
    }

    /// Counts one more lost record that was never attempted: the end of a
    /// scope whose begin could not be recorded.
    pub(crate) fn count_implied_drop(&self) {
        let p = &self.producer;
        p.pending_lost.store(
            p.pending_lost.load(Ordering::Relaxed) + 1,
            Ordering::Relaxed,
        );
        p.dropped.fetch_add(1, Ordering::Relaxed);
    }

    /// Records dropped in drop mode (monotonic), including those not yet marked.
    pub(crate) fn dropped(&self) -> u64 {
        self.producer.dropped.load(Ordering::Relaxed)
    }

    /// Drops not yet reported by a marker (valid once the producer is quiet).
    pub(crate) fn pending_lost(&self) -> u64 {
        self.producer.pending_lost.load(Ordering::Relaxed)
    }

    /// Records dropped because they were too large for this ring.
    pub(crate) fn oversized(&self) -> u64 {
        self.producer.oversized.load(Ordering::Relaxed)
    }

    /// Words written and not yet consumed (approximate while the producer runs).
    pub(crate) fn used_words(&self) -> u64 {
        let head = self.head.load(Ordering::Relaxed);
        let tail = self.tail.load(Ordering::Relaxed);
        head.saturating_sub(tail)
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        let made = self.made.load(Ordering::Relaxed);
        for index in self.freed.load(Ordering::Relaxed)..made {
            let slot = self.slot(index);
            let base = slot.base.load(Ordering::Relaxed);
            let len = slot.len.load(Ordering::Relaxed) as usize;
            // SAFETY: `&mut self`: no producer or consumer is left; segments
            // `freed..made` are alive, each made by `alloc_storage(len,
            // is_mapped(index, len))` and freed only here.
            unsafe { self.free_segment(base, len, is_mapped(index, len)) };
        }
        self.reclaim_spare();
    }
}
