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
//! A ring starts with one small segment (1 KiB, from the heap) and grows:
//! when a record does not fit, the producer takes a segment at least four
//! times as big (the consumer's spare, else one from the budget's pool of
//! mapped-in segments, `record::pool`, else its own `mmap`, taken from the
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
//! end of the storage. Every record starts with a header word:
//!
//! ```text
//! bits  0..4   kind (see `record`)
//! bits  4..24  length of the record in words, header included (>= 1)
//! bits 24..64  kind-specific payload (callsite id, nesting depth, ...)
//! ```
//!
//! The ring only reads the length; the meaning of the other bits belongs to
//! `record`.
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

use crate::record::budget::Budget;
use crate::record::sync::{AtomicPtr, AtomicU64, Ordering};
use crossbeam_utils::CachePadded;

/// Words of the loss marker written in drop mode: header, timestamp, count.
pub(crate) const LOST_MARKER_WORDS: usize = 3;
/// Kind value of the loss marker (shared with `record`).
pub(crate) const KIND_LOST: u64 = 1;

/// Length in words of the record whose header is `header`.
#[inline]
pub(crate) fn header_len(header: u64) -> u64 {
    (header >> 4) & 0xf_ffff
}

/// Kind of the record whose header is `header`.
#[inline]
pub(crate) fn header_kind(header: u64) -> u64 {
    header & 0xf
}

/// Kind-specific payload of the record whose header is `header`.
#[inline]
pub(crate) fn header_payload(header: u64) -> u64 {
    header >> 24
}

/// Builds a header word.
#[inline]
pub(crate) fn make_header(kind: u64, len_words: usize, payload: u64) -> u64 {
    debug_assert!(kind < 16 && len_words > 0 && len_words < (1 << 20) && payload < (1 << 40));
    kind | ((len_words as u64) << 4) | (payload << 24)
}

/// Largest record a ring accepts, in words. Bigger events are dropped and
/// counted as oversized: a record must leave room for others in the ring.
pub(crate) fn max_record_words(capacity: usize) -> usize {
    (capacity / 4).clamp(4, (1 << 20) - 1)
}

/// Maps the storage in now, on the cold path (a thread's first event), so
/// that the hot path takes no page fault on its first lap through the ring:
/// in a VM a fault costs microseconds, which spread over the 256 events of a
/// 4 KiB page is several times the cost of recording them. Rings of 2 MiB
/// and more ask for transparent huge pages (fewer faults, fewer TLB misses).
/// Best effort: where `madvise` says no, one word per page is written with
/// its own value.
#[cfg(all(target_os = "linux", not(ringtrace_loom), not(miri)))]
fn prefault(words: &[AtomicU64]) {
    const PAGE: usize = 4096;
    const MADV_POPULATE_WRITE: libc::c_int = 23; // Linux 5.14
    let start = words.as_ptr() as usize;
    let end = start + std::mem::size_of_val(words);
    let (a, b) = ((start + PAGE - 1) & !(PAGE - 1), end & !(PAGE - 1));
    if b > a {
        // SAFETY: [a, b) is whole pages inside the live allocation `words`
        // borrows. MADV_HUGEPAGE and MADV_POPULATE_WRITE change how it is
        // backed, never its contents, so a reader of any of its words (the
        // consumer, of published records) sees the same values.
        let populated = unsafe {
            if b - a >= HUGE_PAGE {
                libc::madvise(a as *mut libc::c_void, b - a, libc::MADV_HUGEPAGE);
            }
            libc::madvise(a as *mut libc::c_void, b - a, MADV_POPULATE_WRITE) == 0
        };
        if populated && !touch_pages() {
            return;
        }
    }
    // A write that keeps the value: the range may hold records.
    for w in words.iter().step_by(PAGE / 8) {
        w.fetch_or(0, Ordering::Relaxed);
    }
}

#[cfg(not(all(target_os = "linux", not(ringtrace_loom), not(miri))))]
fn prefault(_words: &[AtomicU64]) {}

/// Tests: `prefault` maps in by writing a word per page even where
/// `MADV_POPULATE_WRITE` works (kernels before 5.14 and some sandboxes
/// refuse it), to test that fallback everywhere.
#[cfg(test)]
static TOUCH_PAGES: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

#[cfg(all(test, target_os = "linux", not(ringtrace_loom), not(miri)))]
fn touch_pages() -> bool {
    TOUCH_PAGES.load(std::sync::atomic::Ordering::Relaxed)
}

#[cfg(all(not(test), target_os = "linux", not(ringtrace_loom), not(miri)))]
fn touch_pages() -> bool {
    false
}

/// Segments a ring can hold at once: its newest (the producer's) and the
/// older ones the consumer has not freed yet. Each growth at least
/// quadruples the ring, so a few are enough to reach any size before the
/// flusher catches up.
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

/// Bytes a segment of `words` slots takes from the budget.
pub(crate) fn segment_bytes(words: usize) -> u64 {
    (words * 8) as u64
}

/// Slots of a segment of at least `bytes` bytes: a power of two, at least 64.
pub(crate) fn words_for(bytes: usize) -> usize {
    (bytes / 8).clamp(64, 1 << 40).next_power_of_two()
}

/// Page size the mapped segments are multiples of. (Models: a small size,
/// so that their tiny rings have "mapped" segments, pooled as real ones.)
#[cfg(not(ringtrace_loom))]
pub(crate) const PAGE: usize = 4096;
#[cfg(ringtrace_loom)]
pub(crate) const PAGE: usize = 64;

/// Makes zeroed, mapped-in storage of `words` slots (a power of two).
///
/// A thread's first segment (1 KiB) comes from the heap, on its first event.
/// Every segment a ring grows into is a page multiple and gets an anonymous
/// mapping of its own: growing never touches the heap of the recording
/// thread, and freeing a segment gives its memory back to the system at
/// once. `None` if the system refuses the mapping.
fn alloc_storage(words: usize, mapped: bool) -> Option<*mut AtomicU64> {
    debug_assert!(words.is_power_of_two() && words >= 8);
    #[cfg(all(unix, not(ringtrace_loom), not(miri)))]
    if mapped {
        // SAFETY: a fresh private anonymous mapping: no address hint, no
        // file; the kernel picks the place and zero-fills it. Checked below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                words * 8,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        if words * 8 >= HUGE_PAGE {
            // SAFETY: advice on the mapping just made, owned by no one else;
            // it changes how the pages will be backed, not their contents.
            // Best effort: where it is refused, pages are 4 KiB.
            unsafe { libc::madvise(p, words * 8, libc::MADV_HUGEPAGE) };
        }
        // The mapping is `words * 8` zeroed bytes, page-aligned (so aligned
        // for `AtomicU64`, which has the layout of `u64`; zero is a valid
        // value), owned by the caller from now on, who maps it in as it
        // goes (`Ring::grow`, `Ring::prefault_more`).
        return Some(p as *mut AtomicU64);
    }
    let _ = mapped;
    let layout = heap_layout(words);
    // SAFETY: `layout` has a non-zero size (`words >= 8`).
    let base = unsafe { std::alloc::alloc(layout) } as *mut AtomicU64;
    if base.is_null() {
        std::alloc::handle_alloc_error(layout);
    }
    for i in 0..words {
        // SAFETY: `i < words`: inside the fresh allocation, which is laid
        // out for `words` of them and aligned for one; nothing is there yet.
        unsafe { base.add(i).write(AtomicU64::new(0)) };
    }
    // SAFETY: the `words` slots were just initialised above.
    prefault(unsafe { std::slice::from_raw_parts(base, words) });
    Some(base)
}

/// Storage is aligned to this (mapped segments: to a page), so a spare
/// segment's size fits in the low bits of its address (`Ring::spare`).
const STORAGE_ALIGN: usize = 64;

/// The heap layout of a segment of `words` slots.
fn heap_layout(words: usize) -> std::alloc::Layout {
    std::alloc::Layout::array::<AtomicU64>(words)
        .and_then(|l| l.align_to(STORAGE_ALIGN))
        .expect("segment size")
}

/// Frees what `alloc_storage(words, mapped)` returned.
///
/// # Safety
/// `base` came from `alloc_storage` with these arguments, is freed once, and
/// no reference into it outlives this call.
unsafe fn free_storage(base: *mut AtomicU64, words: usize, mapped: bool) {
    #[cfg(all(unix, not(ringtrace_loom), not(miri)))]
    if mapped {
        // SAFETY: the caller's contract: our own mapping of this length.
        unsafe { libc::munmap(base as *mut libc::c_void, words * 8) };
        return;
    }
    let _ = mapped;
    // SAFETY: the caller's contract: `alloc_storage`'s heap allocation of
    // `heap_layout(words)`, its `words` slots initialised, freed once, no
    // reference left into it.
    unsafe {
        std::ptr::drop_in_place(std::ptr::slice_from_raw_parts_mut(base, words));
        std::alloc::dealloc(base as *mut u8, heap_layout(words));
    }
}

/// Makes a mapped segment of `words` slots (at least a page), not mapped
/// in: the pool's stock.
pub(crate) fn alloc_mapped(words: usize) -> Option<*mut AtomicU64> {
    debug_assert!(spare_is_mapped(words));
    alloc_storage(words, true)
}

/// Frees what `alloc_mapped(words)` returned (or any segment of `words`
/// slots that `is_mapped` says is mapped).
///
/// # Safety
/// As `free_storage`'s.
pub(crate) unsafe fn free_mapped(base: *mut AtomicU64, words: usize) {
    // SAFETY: the caller's contract.
    unsafe { free_storage(base, words, true) }
}

/// Maps in a whole segment of `words` slots the caller owns (no change to
/// its words' values).
pub(crate) fn map_in_segment(base: *mut AtomicU64, words: usize) {
    prefault_positions(base, words as u64 - 1, 0, words as u64);
}

/// Whether a segment of `words` slots (not a thread's first) is mapped.
fn is_mapped(index: u64, words: usize) -> bool {
    index > 0 && words * 8 >= PAGE
}

/// Whether a spare segment of `words` slots is mapped: it is never a
/// thread's first.
fn spare_is_mapped(words: usize) -> bool {
    is_mapped(1, words)
}

/// `Ring::spare`'s (and the pool's) word for the segment `base` of `words` slots.
pub(crate) fn pack_segment(base: *mut AtomicU64, words: usize) -> u64 {
    debug_assert!((base as usize).is_multiple_of(STORAGE_ALIGN) && words.is_power_of_two());
    base as usize as u64 | u64::from(words.trailing_zeros())
}

/// The segment (base, slots) of a non-zero `Ring::spare` (or pool) word.
pub(crate) fn unpack_segment(word: u64) -> (*mut AtomicU64, usize) {
    let tag = STORAGE_ALIGN as u64 - 1;
    ((word & !tag) as usize as *mut AtomicU64, 1 << (word & tag))
}

/// Rings that grew, and how the flusher is woken when one does: it then
/// prepares that ring's next segment (`Ring::prepare_spare`) at once rather
/// than at its next poll, a few milliseconds in which a busy ring grows
/// from 1 KiB to 16 MiB. Rung only on the producer's growth path (a few
/// times in a thread's life), never on the hot path.
pub(crate) struct Growth {
    grown: std::sync::atomic::AtomicU64,
    #[allow(clippy::type_complexity)]
    wake: std::sync::Mutex<Option<Box<dyn Fn() + Send + Sync>>>,
}

/// The process's growth signal (one flusher at a time listens).
pub(crate) static GROWTH: Growth = Growth {
    grown: std::sync::atomic::AtomicU64::new(0),
    wake: std::sync::Mutex::new(None),
};

impl Growth {
    /// Growths so far (monotonic).
    pub(crate) fn count(&self) -> u64 {
        self.grown.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Sets (or, with `None`, clears) what wakes the flusher.
    pub(crate) fn set_waker(&self, wake: Option<Box<dyn Fn() + Send + Sync>>) {
        *self.wake.lock().unwrap_or_else(|e| e.into_inner()) = wake;
    }

    /// A ring grew and can grow further.
    #[cold]
    fn rang(&self) {
        self.grown
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if let Some(wake) = self.wake.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            wake();
        }
    }
}

/// Segments of this size and more are backed by transparent huge pages where
/// the kernel allows: in a VM, mapping in 4 KiB pages costs about ten times
/// as much per byte (measured: 333 against 35 us per MiB).
#[cfg(all(unix, not(ringtrace_loom), not(miri)))]
const HUGE_PAGE: usize = 2 << 20;

/// A mapped segment is mapped in this many words at a time, ahead of the
/// producer, on its slow path (256 KiB: tens of microseconds to zero, then
/// thousands of records on the fast path). Mapping a whole new segment at
/// once would stall the recording thread for milliseconds at 16 MiB, most
/// of it for room it may never use.
const PREFAULT_STEP_WORDS: u64 = 32 << 10;

/// Maps in the slots of positions `from..to` of the segment `base` of
/// `mask + 1` slots, at most one lap (they wrap once at most). Called with
/// a segment that stays alive for the call: the producer's own, or a spare
/// the consumer is preparing (see `Ring::prepare_spare`).
fn prefault_positions(base: *mut AtomicU64, mask: u64, from: u64, to: u64) {
    let len = mask + 1;
    debug_assert!(to <= from + len);
    let mut pos = from;
    while pos < to {
        let i = pos & mask;
        let n = (to - pos).min(len - i);
        // SAFETY: `base` is a segment of `len` slots alive for this call
        // (the producer's, see `Reservation::push`, or the spare the
        // consumer is preparing, see `Ring::prepare_spare`); `i + n <= len`,
        // so the slice is inside it. Mapping in changes no slot's value, and
        // every slot is an atomic, so a producer writing some meanwhile
        // races with nothing.
        prefault(unsafe { std::slice::from_raw_parts(base.add(i as usize), n as usize) });
        pos += n;
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
    /// Where every segment's bytes are taken from and given back to.
    budget: &'static Budget,
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
    /// fast path stops at `prefaulted`.
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

/// A reservation of `len` words at `start`, written word by word then published.
///
/// It caches the segment's base pointer and mask: the word stores are atomic,
/// so the compiler could not otherwise keep them in registers across them.
pub(crate) struct Reservation<'a> {
    ring: &'a Ring,
    base: *const AtomicU64,
    mask: u64,
    pos: u64,
    end: u64,
}

impl Reservation<'_> {
    /// Stores the next word of the record.
    #[inline(always)]
    pub(crate) fn push(&mut self, word: u64) {
        debug_assert!(self.pos < self.end);
        // SAFETY: `base` and `mask` are the producer's segment's storage and
        // length minus one (a power of two minus one, see `alloc_storage`),
        // read by this thread, the only one that changes them, after the
        // last change; so `pos & mask` indexes inside that storage. A
        // segment is freed only by the consumer once a newer one is made
        // (`Ring::grow`, by this thread, not while this reservation is being
        // written), or by `Drop`, which the borrow of `ring` excludes. The
        // slot is an atomic, so the store races with nothing.
        unsafe { &*self.base.add((self.pos & self.mask) as usize) }.store(word, Ordering::Relaxed);
        self.pos += 1;
    }

    /// Publishes the record to the consumer.
    #[inline(always)]
    pub(crate) fn commit(self) {
        debug_assert_eq!(self.pos, self.end);
        // Release: pairs with the consumer's Acquire load of `head`; the words
        // stored above are visible to it before it sees the new head.
        self.ring.head.store(self.end, Ordering::Release);
    }
}

/// What one `drain` call found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Drained {
    /// Words of whole records copied out.
    pub(crate) words: usize,
    /// Records the producer overwrote since the previous drain (overwrite mode).
    pub(crate) overwritten: u64,
}

impl Ring {
    /// A ring whose first segment has at least `initial_bytes` bytes and
    /// which grows, at least quadrupling, up to `max_bytes` (both rounded up
    /// to a power of two, minimum 512 bytes) while `budget` allows. When it
    /// cannot grow, drop mode drops; overwrite mode frees its own oldest
    /// records once the older segments are consumed. `None` when the budget
    /// cannot hold the first segment.
    ///
    /// The segment is mapped in at once (see `prefault`): at 1 KiB that is
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
        Some(Ring::build(initial, max_words, overwrite, budget))
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
            budget,
        }
    }

    fn slot(&self, index: u64) -> &SegmentSlot {
        &self.segments[(index % MAX_SEGMENTS as u64) as usize]
    }

    /// Slots of the segment the producer writes into now.
    pub(crate) fn capacity_words(&self) -> usize {
        self.producer.mask.load(Ordering::Relaxed) as usize + 1
    }

    /// Producer: reserves `len` words for a record stamped `ts`. In drop mode a
    /// pending loss count is written first as a `LOST` marker. Returns `None`
    /// (and counts the drop) when the record does not fit and the ring cannot
    /// grow.
    ///
    /// The fast path (the record fits against the cached tail, no loss to
    /// report) is inlined into the caller; the rest is out of line.
    #[inline(always)]
    pub(crate) fn reserve(&self, len: usize, ts: u64) -> Option<Reservation<'_>> {
        let p = &*self.producer;
        let head = self.head.load(Ordering::Relaxed); // only this thread writes it
        let tail = p.cached_tail.load(Ordering::Relaxed);
        let mask = p.mask.load(Ordering::Relaxed);
        // A segment's largest record is at least 4 words: the test folds away
        // for the small constant lengths of most records.
        if (len <= 4 || len as u64 <= p.max_record.load(Ordering::Relaxed))
            && (head + len as u64).wrapping_sub(tail) <= mask + 1
            && p.pending_lost.load(Ordering::Relaxed) == 0
        {
            let base = p.base.load(Ordering::Relaxed);
            return Some(self.reservation(head, head + len as u64, base, mask));
        }
        let pos = self.reserve_slow(len, ts)?;
        let (base, mask) = (
            p.base.load(Ordering::Relaxed),
            p.mask.load(Ordering::Relaxed),
        );
        Some(self.reservation(pos, pos + len as u64, base, mask))
    }

    #[inline(always)]
    fn reservation(&self, pos: u64, end: u64, base: *mut AtomicU64, mask: u64) -> Reservation<'_> {
        Reservation {
            ring: self,
            base,
            mask,
            pos,
            end,
        }
    }

    /// `reserve` when the record is large, the cached tail says full, or a
    /// loss marker must go first (written here, published with the record).
    /// A full ring grows if it can; else drop mode drops, overwrite mode
    /// frees its oldest records. Returns the position of the record.
    #[cold]
    #[inline(never)]
    fn reserve_slow(&self, len: usize, ts: u64) -> Option<u64> {
        let p = &*self.producer;
        if len > max_record_words(self.max_words) {
            p.oversized.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let head = self.head.load(Ordering::Relaxed); // only this thread writes it
        let pending = p.pending_lost.load(Ordering::Relaxed);
        let need_words = len as u64 + LOST_MARKER_WORDS as u64;
        if head + need_words > p.prefaulted.load(Ordering::Relaxed) {
            self.prefault_more(head + need_words);
        }
        let need = len as u64
            + if pending > 0 {
                LOST_MARKER_WORDS as u64
            } else {
                0
            };
        let mut tail = p.cached_tail.load(Ordering::Relaxed);
        let fits = |tail: u64| {
            len as u64 <= p.max_record.load(Ordering::Relaxed)
                && (head + need).wrapping_sub(tail) <= p.mask.load(Ordering::Relaxed) + 1
        };
        if !fits(tail) {
            // Acquire: pairs with the consumer's release CAS on `tail`, so its
            // reads of the freed words happen before we overwrite them. Slots
            // of positions before `seg_start` are in older segments.
            let seg_start = p.seg_start.load(Ordering::Relaxed);
            let consumed = self.tail.load(Ordering::Acquire);
            tail = consumed.max(seg_start);
            if !fits(tail) {
                if let Some(start) = self.grow(head, len) {
                    tail = start; // the new segment holds `start..head`
                } else if self.overwrite
                    && consumed >= seg_start
                    && len as u64 <= p.max_record.load(Ordering::Relaxed)
                {
                    // Every older segment is consumed: the oldest records
                    // are in this one, where the producer may free them.
                    let cap = p.mask.load(Ordering::Relaxed) + 1;
                    tail = self.free_oldest(head + need - cap);
                } else {
                    p.pending_lost.store(pending + 1, Ordering::Relaxed);
                    p.dropped.fetch_add(1, Ordering::Relaxed);
                    return None;
                }
            }
            p.cached_tail
                .store(self.fast_path_tail(tail), Ordering::Relaxed);
        }
        if pending > 0 {
            let (base, mask) = (
                p.base.load(Ordering::Relaxed),
                p.mask.load(Ordering::Relaxed),
            );
            let mut marker = self.reservation(head, head + LOST_MARKER_WORDS as u64, base, mask);
            marker.push(make_header(KIND_LOST, LOST_MARKER_WORDS, 0));
            marker.push(ts);
            marker.push(pending);
            p.pending_lost.store(0, Ordering::Relaxed);
            return Some(head + LOST_MARKER_WORDS as u64);
        }
        Some(head)
    }

    /// Moves the producer to a new segment at least four times as big (and
    /// with room for a record of `len` words plus a loss marker), if the
    /// ring is below its largest size, has a free segment slot, and the
    /// budget gives the memory; returns the new segment's first position.
    ///
    /// Drop mode: the new segment starts at `head`; records before it stay
    /// in the older segments until the consumer has copied them out and
    /// frees those. Overwrite mode: the records not yet consumed are copied
    /// into the new segment, which starts at the tail, so that the oldest
    /// records are always in the producer's segment, where it may free them.
    #[cold]
    fn grow(&self, head: u64, len: usize) -> Option<u64> {
        let p = &*self.producer;
        let cur = p.mask.load(Ordering::Relaxed) as usize + 1;
        let want = (cur * 4)
            .max((len * 4).next_power_of_two())
            .min(self.max_words);
        if want <= cur || len > max_record_words(want) {
            return None;
        }
        let made = self.made.load(Ordering::Relaxed); // only this thread writes it
                                                      // Acquire: pairs with the consumer's Release of `freed`; it is done
                                                      // with the slot we are about to reuse.
        if made - self.freed.load(Ordering::Acquire) >= MAX_SEGMENTS as u64 {
            return None;
        }
        // The flusher's spare if it is there and big enough (its bytes
        // taken, mapped in by the flusher); else a pooled segment (taken,
        // mapped in: no system call); else a segment of our own.
        //
        // Spares and pooled segments may be reused storage holding an
        // earlier owner's words: nothing reads a slot before the producer
        // wrote it in this segment. The consumer reads only positions below
        // the published `head` and at or past the segment's `start` (drop
        // mode: `head` now; overwrite mode: the records copied below
        // first); `free_oldest` reads headers at `tail..head`, which this
        // thread wrote; the copy below reads the old segment's published
        // records; mapping in keeps every value (`prefault`). Nothing relies
        // on zeroed storage (under loom, a reused segment's words are
        // initialised atomics holding their last values, as here).
        let taken = self
            .take_spare(want)
            .or_else(|| self.budget.pool().take(want, self.pool_max(want)));
        let (base, want, mapped, mapped_in) = match taken {
            // The consumer maps a spare in ahead of us: if we are faster,
            // the fast path faults in the pages it reaches first. A pooled
            // segment is mapped in.
            Some((base, words)) => (base, words, spare_is_mapped(words), true),
            None => {
                // Cold: pooled segments of other sizes are given back if
                // the budget refuses (system calls, on this slow path only).
                if !self.budget.try_take_cold(segment_bytes(want)) {
                    return None;
                }
                let mapped = is_mapped(made, want);
                let Some(base) = alloc_storage(want, mapped) else {
                    self.budget.give_back(segment_bytes(want));
                    return None;
                };
                (base, want, mapped, false)
            }
        };
        let start = if self.overwrite {
            // Acquire: as in `reserve_slow`. Everything below `start` has
            // been consumed; `start..head` is in the producer's segment
            // (older segments end at or before the tail, see `free_oldest`'s
            // precondition, kept by every growth being like this one).
            let start = self
                .tail
                .load(Ordering::Acquire)
                .max(p.seg_start.load(Ordering::Relaxed));
            let (old, old_mask) = (
                p.base.load(Ordering::Relaxed),
                p.mask.load(Ordering::Relaxed),
            );
            for pos in start..head {
                // SAFETY: `old`/`old_mask` are the producer's segment (its
                // own copies; alive, see `Reservation::push`); `base` is the
                // new storage of `want` slots, not yet shared; both indexes
                // are masked into their storage.
                let (from, to) = unsafe {
                    (
                        &*old.add((pos & old_mask) as usize),
                        &*base.add((pos & (want as u64 - 1)) as usize),
                    )
                };
                to.store(from.load(Ordering::Relaxed), Ordering::Relaxed);
            }
            start
        } else {
            head
        };
        let slot = self.slot(made);
        slot.base.store(base, Ordering::Relaxed);
        slot.len.store(want as u64, Ordering::Relaxed);
        slot.start.store(start, Ordering::Relaxed);
        // Release: the slot's fields and the storage's state are visible to
        // the consumer before it counts the segment (its Acquire loads of
        // `made`). Records at `head` and after are published later, by the
        // producer's Release stores of `head`.
        self.made.store(made + 1, Ordering::Release);
        p.base.store(base, Ordering::Relaxed);
        p.mask.store(want as u64 - 1, Ordering::Relaxed);
        p.max_record
            .store(max_record_words(want) as u64, Ordering::Relaxed);
        p.seg_start.store(start, Ordering::Relaxed);
        // The first step of the new segment is mapped in now; the rest as
        // the producer reaches it (`prefault_more`). Heap storage is already.
        let prefaulted = if mapped && !mapped_in {
            // Positions `head..` of the first lap only: overwrite mode's
            // copied records are in `start..head`.
            let lap_end = start + want as u64;
            let until = (head + PREFAULT_STEP_WORDS.max(len as u64 + LOST_MARKER_WORDS as u64))
                .min(lap_end);
            prefault_positions(base, want as u64 - 1, head, until);
            if until >= lap_end {
                u64::MAX
            } else {
                until
            }
        } else {
            u64::MAX
        };
        p.prefaulted.store(prefaulted, Ordering::Relaxed);
        if want < self.max_words {
            GROWTH.rang();
        }
        Some(start)
    }

    /// Producer: takes the consumer's spare segment if it has at least
    /// `want` slots (a smaller one is stale: the consumer frees it).
    /// Returns its base and slots, mapped in, its bytes in the budget.
    fn take_spare(&self, want: usize) -> Option<(*mut AtomicU64, usize)> {
        let word = self.spare.load(Ordering::Relaxed);
        if word == 0 || unpack_segment(word).1 < want {
            return None;
        }
        // Acquire: pairs with `prepare_spare`'s Release store, so the
        // storage it made (and, under loom, initialised) is ours to use.
        // A CAS, not a swap: the consumer may have freed that spare since
        // the load and put another one there. If the word is equal again
        // (the same address and size, reused), it is that new spare, just as
        // good.
        self.spare
            .compare_exchange(word, 0, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| unpack_segment(word))
    }

    /// Consumer: makes the segment the producer's next growth will want
    /// (four times its current one, up to its largest size), hands it over
    /// and maps it in, so that the producer grows into it without a system
    /// call and finds its pages there. Only while the budget keeps as much
    /// again free after it: a spare is a guess, it must not take the last of
    /// the memory another thread may need. A stale spare (no bigger than the
    /// current segment) is freed first. Returns whether a spare is ready.
    ///
    /// The spare is handed over before it is mapped in: mapping in 4 KiB
    /// pages is slower than a producer fills the segment before (a quarter
    /// of the size), so a fresh thread's ring often wants the spare while
    /// it is being mapped in. It is mapped in from where the producer will
    /// start writing in it; the producer, ahead of us, faults in the pages
    /// it reaches first (on its fast path: a page at a time, no work done
    /// twice), and we soon pass it (zeroing is faster than recording).
    pub(crate) fn prepare_spare(&self) -> bool {
        // Acquire: pairs with `grow`'s Release; the newest slot is filled in.
        let made = self.made.load(Ordering::Acquire);
        let newest = self.slot(made - 1);
        let cur = newest.len.load(Ordering::Relaxed) as usize;
        let want = (cur * 4).min(self.max_words);
        let word = self.spare.load(Ordering::Relaxed);
        if word != 0 && unpack_segment(word).1 >= want.max(cur + 1) {
            return true;
        }
        self.reclaim_spare();
        if want <= cur {
            return false;
        }
        // A pooled segment first: its bytes are taken and its pages mapped
        // in, so it is ready at once (its stale words: see `grow`).
        if let Some((base, words)) = self.budget.pool().take(want, self.pool_max(want)) {
            // Release: as below.
            self.spare
                .store(pack_segment(base, words), Ordering::Release);
            return true;
        }
        let bytes = segment_bytes(want);
        if !self.budget.has_room(bytes.saturating_mul(2)) || !self.budget.try_take(bytes) {
            return false;
        }
        let mapped = spare_is_mapped(want);
        let Some(base) = alloc_storage(want, mapped) else {
            self.budget.give_back(bytes);
            return false;
        };
        // Where the producer will grow: when its segment is full, about a
        // segment past where that segment's free room starts (only a guess,
        // it orders the mapping in).
        let from = newest
            .start
            .load(Ordering::Relaxed)
            .max(self.tail.load(Ordering::Relaxed))
            + cur as u64;
        // Release: pairs with `take_spare`'s Acquire. Only the consumer
        // stores a non-zero word, and the slot is empty (reclaimed above or
        // taken by the producer), so nothing is overwritten.
        self.spare
            .store(pack_segment(base, want), Ordering::Release);
        if mapped {
            // The zeroing of fresh pages, here on our thread. The storage
            // stays alive meanwhile even if the producer took it: only the
            // consumer (this thread, busy here) or `Drop` (excluded by our
            // `&self`) frees a segment.
            prefault_positions(base, want as u64 - 1, from, from + want as u64);
        }
        true
    }

    /// The largest pooled segment a growth that wants `want` slots takes:
    /// one growth step more at most (a bigger one would sit in a ring that
    /// may stop growing, where the pool could have given it to another).
    fn pool_max(&self, want: usize) -> usize {
        want.saturating_mul(4).min(self.max_words)
    }

    /// Consumer: frees the spare segment if the producer has not taken it,
    /// giving its bytes back. Returns whether there was one to free.
    pub(crate) fn reclaim_spare(&self) -> bool {
        let word = self.spare.load(Ordering::Relaxed);
        if word == 0
            || self
                .spare
                .compare_exchange(word, 0, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        {
            return false; // none, or the producer just took it
        }
        let (base, words) = unpack_segment(word);
        // SAFETY: the CAS made us its owner: the producer can no longer take
        // it and never wrote into it (it writes only into segments it took);
        // it came from `alloc_storage(words, spare_is_mapped(words))` in
        // `prepare_spare` (or from the pool, which has only such), and is
        // given up once, here.
        unsafe { self.free_segment(base, words, spare_is_mapped(words)) };
        true
    }

    /// Gives up a segment of this ring: to the pool if it keeps it (its
    /// bytes then stay taken), else freed and its bytes given back.
    ///
    /// # Safety
    /// As `free_storage(base, words, mapped)`'s: the caller owns it, no
    /// reference into it is left, and it is given up once.
    unsafe fn free_segment(&self, base: *mut AtomicU64, words: usize, mapped: bool) {
        if mapped && self.budget.pool().put(self.budget, base, words) {
            return;
        }
        // SAFETY: the caller's contract.
        unsafe { free_storage(base, words, mapped) };
        self.budget.give_back(segment_bytes(words));
    }

    /// Segments made so far (monotonic): it changes when the ring grows.
    pub(crate) fn segments_made(&self) -> u64 {
        self.made.load(Ordering::Relaxed)
    }

    /// Maps in the producer's segment up to position `upto`, a step at least
    /// (see [`PREFAULT_STEP_WORDS`]). Cold: once per step of a segment's first lap.
    #[cold]
    fn prefault_more(&self, upto: u64) {
        let p = &*self.producer;
        let from = p.prefaulted.load(Ordering::Relaxed);
        let (base, mask) = (
            p.base.load(Ordering::Relaxed),
            p.mask.load(Ordering::Relaxed),
        );
        let lap_end = p.seg_start.load(Ordering::Relaxed) + mask + 1;
        let to = upto.max(from + PREFAULT_STEP_WORDS).min(lap_end);
        prefault_positions(base, mask, from, to);
        let prefaulted = if to >= lap_end { u64::MAX } else { to };
        p.prefaulted.store(prefaulted, Ordering::Relaxed);
    }

    /// The tail to cache for the fast path: `tail`, lowered so that the fast
    /// path takes no position past what is mapped in. The lowered tail may be
    /// below zero (mapped in less than a segment past position 0): it is kept
    /// modulo 2^64, which is why the free-room tests subtract with wrapping.
    /// It is never above `head` (`prefaulted` is at most a segment past it).
    fn fast_path_tail(&self, tail: u64) -> u64 {
        let p = &*self.producer;
        let cap = p.mask.load(Ordering::Relaxed) + 1;
        match p.prefaulted.load(Ordering::Relaxed) {
            u64::MAX => tail,
            pre if pre < tail + cap => pre.wrapping_sub(cap),
            _ => tail,
        }
    }

    /// Overwrite mode, every older segment consumed (`tail >= seg_start`):
    /// advances `tail` by whole records of the producer's segment until it
    /// is at least `min_tail`; returns the new tail.
    #[cold]
    fn free_oldest(&self, min_tail: u64) -> u64 {
        let (base, mask) = (
            self.producer.base.load(Ordering::Relaxed),
            self.producer.mask.load(Ordering::Relaxed),
        );
        let mut tail = self.tail.load(Ordering::Acquire);
        while tail < min_tail {
            // The header at `tail` is a word this thread wrote (only the
            // producer writes slots), so it is intact even if `tail` is stale.
            // SAFETY: `base`/`mask` are the producer's segment (this thread's
            // own copies), which the consumer does not free while it is the
            // newest; `tail & mask` is inside it.
            let word = unsafe { &*base.add((tail & mask) as usize) };
            let len = header_len(word.load(Ordering::Relaxed));
            debug_assert!(len > 0, "a torn record at position {tail}");
            match self
                .tail
                .compare_exchange(tail, tail + len, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    self.overwritten.fetch_add(1, Ordering::Relaxed);
                    tail += len;
                }
                // The consumer moved it (AcqRel pairs with its CAS: its reads are done).
                Err(now) => tail = now,
            }
        }
        tail
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

    /// Consumer: copies whole records (at most about `max_words`) to the end of
    /// `out`, frees them (and the segments the producer left behind), and
    /// says how many records were lost to overwriting since
    /// `seen_overwritten` (which it updates). One consumer at a time.
    pub(crate) fn drain(
        &self,
        out: &mut Vec<u64>,
        max_words: usize,
        seen_overwritten: &mut u64,
    ) -> Drained {
        let base = out.len();
        // Where each record copied starts in the ring (ascending): kept in
        // overwrite mode only, where the producer may move the tail (see
        // the CAS below); in drop mode only we move it, so the CAS cannot
        // fail.
        let mut starts: Vec<u64> = Vec::new();
        let overwrite = self.overwrite;
        loop {
            out.truncate(base);
            starts.clear();
            let tail = self.tail.load(Ordering::Acquire);
            // Acquire: pairs with the producer's Release publish of `head`.
            let head = self.head.load(Ordering::Acquire);
            // Acquire: pairs with `grow`'s Release: the slots of the segments
            // counted are filled in. Loaded after `head`: a segment holding
            // any record below that head was made before it was published.
            let made = self.made.load(Ordering::Acquire);
            let mut index = self.freed.load(Ordering::Relaxed); // only we write it
            let mut seg = SegmentView::of(self.slot(index));
            let mut next_start = self.next_start(index, made);
            // At most one record per two words: one allocation per drain.
            if overwrite {
                starts.reserve((head.saturating_sub(tail) as usize).min(max_words) / 2 + 1);
            }
            // Records are found by their headers, then the words of each
            // segment's run of them are copied at once; `out[base..]` holds
            // the ring's words `tail..pos` in order. In drop mode, when all
            // that is published fits, no header is read: the words below
            // `head` are whole records (published by its Release store,
            // never freed by the producer) and each segment starts at a
            // record's start (`grow` starts it at `head`), so each
            // segment's part of `tail..head` is copied as it is.
            let whole = !overwrite && head.saturating_sub(tail) <= max_words as u64;
            let mut pos = tail;
            let mut copied = tail;
            while pos < head && (pos - tail) < max_words as u64 {
                if pos >= next_start {
                    seg.copy(copied, pos, out, !overwrite);
                    copied = pos;
                    index += 1;
                    seg = SegmentView::of(self.slot(index));
                    next_start = self.next_start(index, made);
                    continue;
                }
                if whole {
                    pos = next_start.min(head);
                    continue;
                }
                let len = header_len(seg.word(pos));
                if len == 0 || pos + len > head {
                    break; // torn by an overwrite; the CAS below will fail
                }
                if overwrite {
                    starts.push(pos);
                }
                pos += len;
            }
            seg.copy(copied, pos, out, !overwrite);
            let mut from = tail;
            loop {
                if from == pos {
                    break;
                }
                match self
                    .tail
                    .compare_exchange(from, pos, Ordering::AcqRel, Ordering::Acquire)
                {
                    Ok(_) => break,
                    Err(now) => match starts.binary_search(&now) {
                        // The producer freed the records before `now`: drop
                        // their (possibly torn) copies, keep the rest (whose
                        // headers were read before they could be freed, so
                        // they are whole and `now` is where one starts).
                        Ok(i) => {
                            out.drain(base..base + (now - from) as usize);
                            starts.drain(..i);
                            from = now;
                        }
                        Err(_) => {
                            from = u64::MAX; // start over from the new tail
                            break;
                        }
                    },
                }
            }
            if from == u64::MAX {
                continue;
            }
            self.release_segments();
            let total = self.overwritten.load(Ordering::Relaxed);
            let overwritten = total - *seen_overwritten;
            *seen_overwritten = total;
            return Drained {
                words: out.len() - base,
                overwritten,
            };
        }
    }

    /// Where the segment after `index` starts, or `u64::MAX` if `index` is
    /// the newest of the `made` ones.
    fn next_start(&self, index: u64, made: u64) -> u64 {
        if index + 1 < made {
            self.slot(index + 1).start.load(Ordering::Relaxed)
        } else {
            u64::MAX
        }
    }

    /// Consumer: frees the segments the producer has left whose records are
    /// all consumed, giving their bytes back to the budget.
    fn release_segments(&self) {
        // Ours, or moved by the producer (overwrite mode) only once every
        // older segment was consumed.
        let tail = self.tail.load(Ordering::Acquire);
        // Acquire: as in `drain`.
        let made = self.made.load(Ordering::Acquire);
        let mut freed = self.freed.load(Ordering::Relaxed); // only we write it
        while tail >= self.next_start(freed, made) {
            let slot = self.slot(freed);
            let base = slot.base.load(Ordering::Relaxed);
            let len = slot.len.load(Ordering::Relaxed) as usize;
            // SAFETY: segment `freed` came from `alloc_storage(len,
            // is_mapped(freed, len))`; the producer left it for good when it
            // made segment `freed + 1` (it writes only into its newest); every
            // record in it lies below that segment's start <= tail, so it
            // was copied out, and no reference into it is left (`drain`'s
            // views are gone); `freed` moves past it below, so it is freed once.
            unsafe { self.free_segment(base, len, is_mapped(freed, len)) };
            freed += 1;
            // Release: pairs with `grow`'s Acquire; we are done with the slot.
            self.freed.store(freed, Ordering::Release);
        }
    }
}

/// Words per plain copy of published records (2 KiB; see `copy`).
#[cfg(not(ringtrace_loom))]
const COPY_CHUNK_WORDS: usize = 256;

/// The consumer's view of one segment while it copies records out.
struct SegmentView {
    base: *const AtomicU64,
    mask: u64,
}

impl SegmentView {
    fn of(slot: &SegmentSlot) -> SegmentView {
        SegmentView {
            base: slot.base.load(Ordering::Relaxed),
            mask: slot.len.load(Ordering::Relaxed) - 1,
        }
    }

    /// Appends the words at positions `from..to` (at most the segment's
    /// length) to `out`: as at most two runs of slots, before and after
    /// the point where the positions wrap, each copied without masking.
    /// `published`: the ring is in drop mode and `to` is at most the head
    /// the caller loaded (Acquire), so no slot of `from..to` is written
    /// while it is read, and the runs are copied as plain memory (vector
    /// moves, not a load and a store per word).
    #[inline(always)]
    fn copy(&self, from: u64, to: u64, out: &mut Vec<u64>, published: bool) {
        let slots = self.mask as usize + 1;
        let mut pos = from;
        while pos < to {
            let i = (pos & self.mask) as usize;
            let n = ((to - pos) as usize).min(slots - i);
            // Loom checks the atomic loads (its atomics are not plain memory).
            #[cfg(not(ringtrace_loom))]
            if published {
                // At most 2 KiB per copy: glibc copies those with vector
                // moves, larger ones with `rep movsb` (fast on hardware
                // too, but callgrind, which measures the flusher, counts
                // it per byte).
                let n = n.min(COPY_CHUNK_WORDS);
                out.reserve(n);
                let len = out.len();
                // SAFETY: `base`/`mask` are a made, not yet freed segment's
                // storage and length minus one, as in `word`; slots
                // `i..i + n` are inside it (`i + n <= slots`). `AtomicU64`
                // has `u64`'s layout. No race: in drop mode the producer
                // writes only at and past `head` (it never moves the tail;
                // `prefault_more` neither: it maps in from `prefaulted`,
                // never below the head, to the segment's first lap's end),
                // and these slots lie below the head whose Release store
                // published them (our Acquire load), and are written again
                // only after we move the tail past them (after this copy).
                // `out` has room for `n` more (reserved above), does not
                // overlap the ring, and `len + n` words are initialised
                // after the copy.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        self.base.add(i).cast::<u64>(),
                        out.as_mut_ptr().add(len),
                        n,
                    );
                    out.set_len(len + n);
                }
                pos += n as u64;
                continue;
            }
            #[cfg(ringtrace_loom)]
            let _ = published;
            // SAFETY: `base`/`mask` are a made, not yet freed segment's
            // storage and length minus one, as in `word`; slots
            // `i..i + n` are inside it (`i + n <= slots`), and a shared
            // slice of atomics is sound while the producer stores to them.
            let run = unsafe { std::slice::from_raw_parts(self.base.add(i), n) };
            out.extend(run.iter().map(|w| w.load(Ordering::Relaxed)));
            pos += n as u64;
        }
    }

    #[inline(always)]
    fn word(&self, pos: u64) -> u64 {
        // SAFETY: `base`/`mask` are a made, not yet freed segment's storage
        // and length minus one (read after the Acquire of `made` that
        // published them); segments are freed only by the consumer, after
        // its views are gone, or by `Drop`. `pos & mask` is inside.
        unsafe { &*self.base.add((pos & self.mask) as usize) }.load(Ordering::Relaxed)
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

#[cfg(all(test, not(ringtrace_loom)))]
mod tests {
    use super::*;

    fn write(ring: &Ring, id: u64, len: usize) -> bool {
        match ring.reserve(len, id) {
            Some(mut r) => {
                r.push(make_header(9, len, id));
                for i in 1..len {
                    r.push(id * 100 + i as u64);
                }
                r.commit();
                true
            }
            None => false,
        }
    }

    /// Moves the ids of the records `write` wrote out of `out` into `ids`,
    /// checking that no record is torn (loss markers are passed over).
    fn take_ids(out: &mut Vec<u64>, ids: &mut Vec<u64>) {
        let mut i = 0;
        while i < out.len() {
            let len = header_len(out[i]) as usize;
            if header_kind(out[i]) != KIND_LOST {
                let id = header_payload(out[i]);
                for k in 1..len {
                    assert_eq!(out[i + k], id * 100 + k as u64, "record {id} torn");
                }
                ids.push(id);
            }
            i += len;
        }
        out.clear();
    }

    /// A thread writing records 0..n of 2 to 6 words into `ring`; it
    /// returns how many were written (the rest were dropped).
    fn spawn_producer(ring: &std::sync::Arc<Ring>, n: u64) -> std::thread::JoinHandle<u64> {
        let ring = ring.clone();
        std::thread::spawn(move || {
            (0..n)
                .filter(|&id| write(&ring, id, 2 + (id % 5) as usize))
                .count() as u64
        })
    }

    fn records(words: &[u64]) -> Vec<(u64, u64, usize)> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < words.len() {
            let len = header_len(words[i]) as usize;
            assert!(len > 0, "a torn record at word {i}: {:#x}", words[i]);
            out.push((header_kind(words[i]), header_payload(words[i]), len));
            i += len;
        }
        out
    }

    #[test]
    fn drop_mode_counts_and_marks_the_gap() {
        let ring = Ring::with_words(64, false);
        let mut written = 0;
        for id in 0..40 {
            if write(&ring, id, 3) {
                written += 1;
            }
        }
        assert_eq!(written, 21); // 64 words / 3
        assert_eq!(ring.dropped(), 19);
        let mut out = Vec::new();
        let mut seen = 0;
        ring.drain(&mut out, usize::MAX, &mut seen);
        assert!(write(&ring, 99, 3));
        ring.drain(&mut out, usize::MAX, &mut seen);
        let recs = records(&out);
        assert_eq!(recs.len(), 23);
        assert_eq!(recs[21].0, KIND_LOST);
        assert_eq!(out[out.len() - 4], 19); // count in the marker, right before record 99
        assert_eq!(recs[22].1, 99);
    }

    #[test]
    fn overwrite_mode_keeps_the_newest() {
        let ring = Ring::with_words(64, true);
        for id in 0..100 {
            assert!(write(&ring, id, 5));
        }
        let mut out = Vec::new();
        let mut seen = 0;
        let d = ring.drain(&mut out, usize::MAX, &mut seen);
        let ids: Vec<u64> = records(&out).iter().map(|r| r.1).collect();
        assert_eq!(ids.len() as u64 + d.overwritten, 100);
        assert_eq!(*ids.last().unwrap(), 99);
        assert!(ids.windows(2).all(|w| w[1] == w[0] + 1));
        // payload intact across the wrap
        for (k, chunk) in out.chunks(5).enumerate() {
            assert_eq!(chunk[1], ids[k] * 100 + 1);
        }
    }

    #[test]
    fn a_full_ring_grows_and_keeps_every_record_in_order() {
        let budget = Budget::leaked(u64::MAX);
        let ring = Ring::growable(8, 64, false, budget);
        for id in 0..20 {
            assert!(write(&ring, id, 3), "record {id} dropped");
        }
        assert_eq!(ring.capacity_words(), 64); // 8 -> 32 -> 64
        let held = segment_bytes(8) + segment_bytes(32) + segment_bytes(64);
        assert_eq!(budget.used(), held);
        let mut out = Vec::new();
        let mut seen = 0;
        ring.drain(&mut out, usize::MAX, &mut seen);
        let ids: Vec<u64> = records(&out).iter().map(|r| r.1).collect();
        assert_eq!(ids, (0..20).collect::<Vec<_>>());
        for (k, chunk) in out.chunks(3).enumerate() {
            assert_eq!(chunk[1], k as u64 * 100 + 1, "payload of record {k}");
        }
        // The outgrown segments are freed once drained; the newest stays.
        assert_eq!(budget.used(), segment_bytes(64));
        // At its largest size it drops (and marks) like a fixed ring.
        let written = (20..60).filter(|&id| write(&ring, id, 3)).count();
        assert_eq!(written, 21);
        assert_eq!(ring.dropped(), 19);
        drop(ring);
        assert_eq!(budget.used(), 0, "every segment given back");
    }

    #[test]
    fn growth_stops_at_the_budget_and_drops_are_counted() {
        let budget = Budget::leaked(segment_bytes(8) + segment_bytes(32));
        let ring = Ring::growable(8, 1024, false, budget);
        let written = (0..30).filter(|&id| write(&ring, id, 2)).count();
        assert_eq!(written, 20, "8 words, then 32 more after growing once");
        assert_eq!(ring.capacity_words(), 32);
        assert_eq!(ring.dropped(), 10);
        assert!(budget.refused() > 0);
        let mut out = Vec::new();
        let mut seen = 0;
        ring.drain(&mut out, usize::MAX, &mut seen);
        // Draining gave the first segment back; the ring writes on.
        assert_eq!(budget.used(), segment_bytes(32));
        assert!(write(&ring, 99, 2));
        ring.drain(&mut out, usize::MAX, &mut seen);
        let recs = records(&out);
        assert_eq!(recs.len(), 22);
        assert_eq!(recs[20].0, KIND_LOST);
        assert_eq!(out[out.len() - 3], 10, "the marker counts the 10 drops");
        assert_eq!(recs[21].1, 99);
    }

    #[test]
    fn growing_into_mapped_segments_and_back() {
        // 1 KiB on the heap, then mapped segments of 4 KiB, 16 KiB, 64 KiB.
        let budget = Budget::leaked(u64::MAX);
        let ring = Ring::growable(128, 8192, false, budget);
        let mut out = Vec::new();
        let mut seen = 0;
        let mut ids = Vec::new();
        for round in 0..4u64 {
            for id in round * 2000..(round + 1) * 2000 {
                assert!(write(&ring, id, 3), "record {id} dropped");
            }
            out.clear();
            ring.drain(&mut out, usize::MAX, &mut seen);
            ids.extend(records(&out).iter().map(|r| r.1));
        }
        assert_eq!(ids, (0..8_000).collect::<Vec<_>>());
        assert_eq!(ring.capacity_words(), 8192);
        assert_eq!(budget.used(), segment_bytes(8192));
    }

    /// A large new segment is mapped in step by step ahead of the producer:
    /// the fast path never writes past what is mapped in, and once the
    /// producer has gone round the segment, all of it is.
    #[test]
    fn a_large_segment_is_mapped_in_ahead_of_the_producer() {
        for overwrite in [false, true] {
            let budget = Budget::leaked(u64::MAX);
            let big = 4 * PREFAULT_STEP_WORDS as usize; // four steps
            let ring = Ring::growable(big / 4, big, overwrite, budget);
            let p = &*ring.producer;
            let (mut steps, mut last, mut written) = (0, 0, 0);
            // Nothing drains: drop mode fills the large segment once and then
            // drops; overwrite mode goes round it a second time.
            for id in 0..(big as u64) {
                written += write(&ring, id, 3) as u64;
                let pre = p.prefaulted.load(Ordering::Relaxed);
                let head = ring.head.load(Ordering::Relaxed);
                assert!(
                    head <= pre,
                    "overwrite {overwrite}, record {id}: head {head} past the mapped-in {pre}"
                );
                if pre != last {
                    steps += 1;
                    last = pre;
                }
            }
            assert_eq!(ring.capacity_words(), big, "grew into the large segment");
            assert_eq!(p.prefaulted.load(Ordering::Relaxed), u64::MAX);
            assert!(steps >= 4, "mapped in a step at a time ({steps} changes)");
            let lap = (big / 4 + big) as u64 / 3; // both segments, 3 words each
            match overwrite {
                false => assert!(written >= lap - 2 && written < big as u64, "{written}"),
                true => assert_eq!(written, big as u64),
            }
            assert_drains_a_run_ending_at(&ring, written - 1, written);
        }
    }

    /// Drains `ring` and checks its records are whole and a run of ids ending
    /// at `last`, with `written` records written or overwritten in all.
    fn assert_drains_a_run_ending_at(ring: &Ring, last: u64, written: u64) {
        let (mut out, mut seen) = (Vec::new(), 0);
        let d = ring.drain(&mut out, usize::MAX, &mut seen);
        let recs = records(&out);
        assert!(!recs.is_empty());
        for (i, &(kind, id, len)) in recs.iter().enumerate() {
            let want = last + 1 - recs.len() as u64 + i as u64;
            assert_eq!(
                (kind, id, len),
                (9, want, 3),
                "record {i} of {}",
                recs.len()
            );
        }
        assert_eq!(recs.len() as u64 + d.overwritten, written);
    }

    /// Growing into a small mapped segment in overwrite mode copies the
    /// undrained records into it; mapping in the rest must leave them be.
    #[test]
    fn growth_into_mapped_segments_keeps_the_copied_records() {
        for overwrite in [false, true] {
            let ring = Ring::growable(128, 1 << 14, overwrite, Budget::leaked(u64::MAX));
            let n = 10_000;
            let written = (0..n).filter(|&id| write(&ring, id, 3)).count() as u64;
            assert!(ring.capacity_words() > 128 && written > 1024);
            let last = if overwrite { n - 1 } else { written - 1 };
            assert_drains_a_run_ending_at(&ring, last, written);
        }
    }

    #[test]
    fn overwrite_mode_grows_then_keeps_the_newest() {
        let budget = Budget::leaked(u64::MAX);
        let ring = Ring::growable(8, 64, true, budget);
        for id in 0..100 {
            assert!(
                write(&ring, id, 3),
                "record {id}: overwrite mode never drops"
            );
        }
        assert_eq!(ring.capacity_words(), 64);
        assert_eq!(ring.dropped(), 0);
        let mut out = Vec::new();
        let mut seen = 0;
        let d = ring.drain(&mut out, usize::MAX, &mut seen);
        let ids: Vec<u64> = records(&out).iter().map(|r| r.1).collect();
        assert_eq!(
            ids,
            (79..100).collect::<Vec<_>>(),
            "the newest 21 (64 words / 3)"
        );
        assert_eq!(d.overwritten, 79);
        // The outgrown segments went back to the budget.
        assert_eq!(budget.used(), segment_bytes(64));
    }

    /// Overwrite mode growing into mapped segments, nothing draining, with
    /// pages mapped in by writing a word per page (`prefault`'s fallback,
    /// what a kernel without `MADV_POPULATE_WRITE` gets): the records copied
    /// into a new segment are not zeroed, so freeing the oldest goes on.
    /// (It used to zero the header at the copied tail, and the producer
    /// looped forever on a record of length 0.)
    #[test]
    fn overwrite_mode_grows_into_mapped_segments_with_pages_touched() {
        TOUCH_PAGES.store(true, std::sync::atomic::Ordering::Relaxed);
        let budget = Budget::leaked(u64::MAX);
        // 1 KiB on the heap, then mapped segments of 4 KiB and 8 KiB.
        let ring = Ring::growable(128, 1024, true, budget);
        for id in 0..10_000 {
            assert!(write(&ring, id, 4), "record {id}");
        }
        TOUCH_PAGES.store(false, std::sync::atomic::Ordering::Relaxed);
        assert_eq!(ring.capacity_words(), 1024);
        let mut out = Vec::new();
        let mut seen = 0;
        let d = ring.drain(&mut out, usize::MAX, &mut seen);
        let ids: Vec<u64> = records(&out).iter().map(|r| r.1).collect();
        assert_eq!(ids, (9_744..10_000).collect::<Vec<_>>(), "the newest 256");
        assert_eq!(d.overwritten, 9_744);
        for (k, chunk) in out.chunks(4).enumerate() {
            assert_eq!(chunk[1], ids[k] * 100 + 1, "payload of record {}", ids[k]);
        }
    }

    #[test]
    fn overwrite_mode_grows_into_mapped_segments_keeping_the_copied_records() {
        // 128 words on the heap, then mapped segments of 512 and 1024
        // words: mapping in ahead of the producer must not touch the slots
        // of the records copied into them (the fallback writes a zero per
        // page; the scenario `overwrite_mode` hung on such a zeroed header).
        let budget = Budget::leaked(u64::MAX);
        let ring = Ring::growable(128, 1024, true, budget);
        for id in 0..2000 {
            assert!(write(&ring, id, 4), "record {id}");
        }
        assert_eq!(ring.capacity_words(), 1024);
        let mut out = Vec::new();
        let mut seen = 0;
        ring.drain(&mut out, usize::MAX, &mut seen);
        let ids: Vec<u64> = records(&out).iter().map(|r| r.1).collect();
        assert_eq!(ids, (1744..2000).collect::<Vec<_>>(), "the newest 256");
    }

    /// The base address of the producer's segment.
    fn producer_base(ring: &Ring) -> usize {
        ring.producer.base.load(Ordering::Relaxed) as usize
    }

    /// A spare the consumer prepared is what the ring grows into: no
    /// segment of the producer's own, the spare's bytes already counted,
    /// and the records on both sides of the growth whole (overwrite mode
    /// copies its undrained records into the spare).
    #[test]
    fn a_ring_grows_into_the_spare_segment_prepared_for_it() {
        for overwrite in [false, true] {
            let budget = Budget::leaked(u64::MAX);
            let ring = Ring::growable(128, 1 << 14, overwrite, budget);
            let mut id = 0;
            while ring.segments_made() < 2 {
                assert!(write(&ring, id, 3));
                id += 1;
            }
            assert_eq!(ring.capacity_words(), 512);
            assert!(ring.prepare_spare(), "a spare of 2048 words");
            let (spare, words) = unpack_segment(ring.spare.load(Ordering::Relaxed));
            assert_eq!(words, 2048);
            let held = segment_bytes(128) + segment_bytes(512) + segment_bytes(2048);
            assert_eq!(budget.used(), held, "the spare is in the budget");
            assert!(ring.prepare_spare(), "ready: nothing more is made");
            assert_eq!(budget.used(), held);
            while ring.segments_made() < 3 {
                assert!(write(&ring, id, 3));
                id += 1;
            }
            assert_eq!(producer_base(&ring), spare as usize, "grew into the spare");
            assert_eq!(ring.capacity_words(), 2048);
            assert_eq!(ring.spare.load(Ordering::Relaxed), 0);
            assert_eq!(budget.used(), held, "counted once");
            for _ in 0..500 {
                assert!(write(&ring, id, 3));
                id += 1;
            }
            assert_drains_a_run_ending_at(&ring, id - 1, id);
            drop(ring);
            assert_eq!(budget.used(), 0);
        }
    }

    /// A spare too small for the growth it was made for (a large record
    /// made the ring grow more) is left for the consumer, which frees it and
    /// makes the next one; one never taken is freed with the ring. The
    /// budget gets every byte back once.
    #[test]
    fn a_stale_or_unused_spare_goes_back_to_the_budget() {
        let budget = Budget::leaked(u64::MAX);
        let ring = Ring::growable(8, 1024, false, budget);
        assert!(ring.prepare_spare());
        assert_eq!(unpack_segment(ring.spare.load(Ordering::Relaxed)).1, 32);
        assert!(
            write(&ring, 1, 20),
            "grows to 128 words: more than the spare"
        );
        assert_eq!(ring.capacity_words(), 128);
        assert_eq!(
            unpack_segment(ring.spare.load(Ordering::Relaxed)).1,
            32,
            "left"
        );
        assert_eq!(
            budget.used(),
            segment_bytes(8) + segment_bytes(128) + segment_bytes(32)
        );
        assert!(ring.prepare_spare(), "the stale one freed, the next made");
        assert_eq!(unpack_segment(ring.spare.load(Ordering::Relaxed)).1, 512);
        assert_eq!(
            budget.used(),
            segment_bytes(8) + segment_bytes(128) + segment_bytes(512)
        );
        assert!(ring.reclaim_spare());
        assert!(!ring.reclaim_spare(), "once");
        assert_eq!(budget.used(), segment_bytes(8) + segment_bytes(128));
        assert!(ring.prepare_spare());
        drop(ring);
        assert_eq!(budget.used(), 0, "the unused spare freed with the ring");
    }

    /// A spare is a guess: it is made only while the budget keeps as much
    /// again free, and never past the ring's largest size.
    #[test]
    fn a_spare_never_takes_the_last_of_the_budget() {
        let budget = Budget::leaked(segment_bytes(8) + 2 * segment_bytes(32) - 8);
        let ring = Ring::growable(8, 32, false, budget);
        assert!(
            !ring.prepare_spare(),
            "32 words would leave less than 32 free"
        );
        assert_eq!(budget.used(), segment_bytes(8));
        assert!(
            (0..4).all(|id| write(&ring, id, 3)),
            "the ring grows itself"
        );
        assert_eq!(ring.capacity_words(), 32);
        let mut out = Vec::new();
        ring.drain(&mut out, usize::MAX, &mut 0);
        assert!(!ring.prepare_spare(), "at its largest size");
        assert_eq!(budget.used(), segment_bytes(32));
    }

    /// The consumer prepares spares (mapping them in after handing them
    /// over) while the producer grows into them and writes, in both modes,
    /// and with pages mapped in by writing a word per page: nothing is torn
    /// or lost, and the budget ends with the newest segment only.
    #[test]
    fn concurrent_spares_lose_and_tear_nothing() {
        for (overwrite, touch) in [(false, false), (true, false), (true, true)] {
            TOUCH_PAGES.store(touch, std::sync::atomic::Ordering::Relaxed);
            let budget = Budget::leaked(u64::MAX);
            let ring = std::sync::Arc::new(Ring::growable(128, 1 << 17, overwrite, budget));
            let n = 300_000u64;
            let producer = spawn_producer(&ring, n);
            let (mut out, mut seen, mut ids, mut overwritten) = (Vec::new(), 0, Vec::new(), 0);
            let mut made = 0;
            while !producer.is_finished() {
                if ring.segments_made() != made {
                    made = ring.segments_made();
                    ring.prepare_spare();
                }
                overwritten += ring.drain(&mut out, 1 << 12, &mut seen).overwritten;
                take_ids(&mut out, &mut ids);
            }
            let written = producer.join().unwrap();
            overwritten += ring.drain(&mut out, usize::MAX, &mut seen).overwritten;
            take_ids(&mut out, &mut ids);
            TOUCH_PAGES.store(false, std::sync::atomic::Ordering::Relaxed);
            assert!(ids.windows(2).all(|w| w[0] < w[1]));
            assert_eq!(ids.len() as u64 + overwritten, written);
            assert_eq!(written + ring.dropped(), n);
            ring.reclaim_spare();
            assert_eq!(budget.used(), segment_bytes(ring.capacity_words()));
        }
    }

    #[test]
    fn a_record_larger_than_the_segment_grows_the_ring() {
        let ring = Ring::growable(8, 256, false, Budget::leaked(u64::MAX));
        assert!(write(&ring, 1, 40));
        assert_eq!(ring.capacity_words(), 256);
        assert!(!write(&ring, 2, 65), "over a quarter of the largest size");
        assert_eq!(ring.oversized(), 1);
    }

    #[test]
    fn concurrent_growth_loses_and_tears_nothing() {
        let budget = Budget::leaked(u64::MAX);
        let ring = std::sync::Arc::new(Ring::growable(8, 1 << 12, false, budget));
        let producer = spawn_producer(&ring, 100_000);
        let mut out = Vec::new();
        let mut seen = 0;
        let mut ids = Vec::new();
        while !producer.is_finished() {
            ring.drain(&mut out, 1 << 10, &mut seen);
            take_ids(&mut out, &mut ids);
        }
        let written = producer.join().unwrap();
        ring.drain(&mut out, usize::MAX, &mut seen);
        take_ids(&mut out, &mut ids);
        assert!(ids.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(ids.len() as u64, written);
        assert_eq!(written + ring.dropped(), 100_000);
        assert_eq!(budget.used(), segment_bytes(ring.capacity_words()));
    }

    #[test]
    fn oversized_records_are_counted() {
        let ring = Ring::with_words(64, false);
        assert!(!write(&ring, 1, 17));
        assert_eq!(ring.oversized(), 1);
        assert!(write(&ring, 2, 16));
    }

    #[test]
    fn concurrent_drop_mode_loses_nothing_silently() {
        let ring = std::sync::Arc::new(Ring::with_words(512, false));
        let producer = {
            let ring = ring.clone();
            std::thread::spawn(move || {
                for id in 0..200_000u64 {
                    write(&ring, id, 2 + (id % 4) as usize);
                }
            })
        };
        let mut out = Vec::new();
        let mut seen = 0;
        let mut got = 0u64;
        let mut lost = 0u64;
        let mut last = None;
        let mut consume = |out: &mut Vec<u64>| {
            for r in records(out) {
                if r.0 == KIND_LOST {
                    continue;
                }
                if let Some(l) = last {
                    assert!(r.1 > l);
                }
                last = Some(r.1);
                got += 1;
            }
            out.clear();
        };
        while !producer.is_finished() {
            ring.drain(&mut out, 1 << 10, &mut seen);
            consume(&mut out);
        }
        producer.join().unwrap();
        ring.drain(&mut out, usize::MAX, &mut seen);
        consume(&mut out);
        lost += ring.dropped();
        assert_eq!(got + lost, 200_000);
    }

    /// Writes records of 3 words from `*id` on until `ring`'s segment has
    /// `words` slots; returns the base of each segment it grew into.
    fn grow_to(ring: &Ring, words: usize, id: &mut u64) -> Vec<usize> {
        let mut bases = Vec::new();
        while ring.capacity_words() < words {
            let made = ring.segments_made();
            assert!(write(ring, *id, 3), "record {id}");
            *id += 1;
            if ring.segments_made() != made {
                bases.push(producer_base(ring));
            }
        }
        bases
    }

    /// Segments a ring gave up (outgrown and drained, its spare, its last
    /// at drop) wait in its budget's pool, counted in the budget; the next
    /// ring's growths and spares take them instead of mapping new ones:
    /// with the pool bypassed the budget would count both, and nothing
    /// would be taken from the pool.
    #[test]
    fn a_second_ring_grows_into_the_segments_the_first_gave_up() {
        let budget = Budget::leaked(64 << 20);
        let pool = budget.pool();
        pool.open(usize::MAX);
        let a = Ring::growable(128, 1 << 13, false, budget);
        let mut id = 0;
        let a_bases = grow_to(&a, 1 << 13, &mut id);
        assert_eq!(a_bases.len(), 3, "512, 2048, 8192 words");
        a.drain(&mut Vec::new(), usize::MAX, &mut 0);
        let grown = segment_bytes(512) + segment_bytes(2048) + segment_bytes(8192);
        assert_eq!(
            pool.pooled_bytes(),
            segment_bytes(512) + segment_bytes(2048)
        );
        drop(a);
        assert_eq!(pool.pooled_bytes(), grown, "the newest at drop");
        assert_eq!(budget.used(), grown, "pooled bytes stay taken");

        let b = Ring::growable(128, 1 << 13, false, budget);
        let mut id = 1_000_000;
        let b_bases = grow_to(&b, 2048, &mut id);
        assert_eq!(pool.taken(), 2);
        assert_eq!(b_bases[..], a_bases[..2], "the same segments");
        assert_eq!(
            budget.used(),
            segment_bytes(128) + grown,
            "none mapped anew"
        );
        // The spare comes from the pool too: ready at once, no bytes taken.
        assert!(b.prepare_spare());
        assert_eq!(pool.taken(), 3);
        assert_eq!(pool.pooled_bytes(), 0);
        let b_bases = grow_to(&b, 8192, &mut id);
        assert_eq!(b_bases, vec![a_bases[2]]);
        assert_eq!(budget.used(), segment_bytes(128) + grown);
        let mut out = Vec::new();
        b.drain(&mut out, usize::MAX, &mut 0);
        let ids: Vec<u64> = records(&out).iter().map(|r| r.1).collect();
        assert_eq!(ids, (1_000_000..id).collect::<Vec<_>>(), "b's records only");
        drop(b);
        pool.close(budget);
        assert_eq!(budget.used(), 0, "every byte back once");
    }

    /// Reused segments hold the words of their earlier ring: records that
    /// look whole, at other positions. None of them ever comes out of the
    /// new ring, in drop mode (drained between growths, so segments start
    /// at other positions than they did) and in overwrite mode (growth
    /// copies, then the producer frees its own oldest records), nor does a
    /// torn record.
    #[test]
    fn stale_words_of_pooled_segments_never_come_out() {
        for overwrite in [false, true] {
            let budget = Budget::leaked(64 << 20);
            let pool = budget.pool();
            pool.open(usize::MAX);
            let a = Ring::growable(128, 1 << 13, overwrite, budget);
            let mut id = 0;
            grow_to(&a, 1 << 13, &mut id);
            for _ in 0..10_000 {
                assert!(write(&a, id, 3) || !overwrite);
                id += 1;
            }
            a.drain(&mut Vec::new(), usize::MAX, &mut 0);
            drop(a);
            let taken = pool.taken();
            let b = Ring::growable(128, 1 << 13, overwrite, budget);
            let (mut out, mut seen) = (Vec::new(), 0);
            let mut id = 1 << 30;
            let first = id;
            let mut ids = Vec::new();
            let mut overwritten = 0;
            for round in 0..41 {
                // Odd lengths, so positions shift against the stale records;
                // at most 1,168 records (<= 6 words) between drains: none
                // dropped. Overwrite mode's last round overwrites.
                let n = if overwrite && round == 40 {
                    6_000
                } else {
                    37 + round * 29
                };
                for _ in 0..n {
                    let len = 2 + (id % 5) as usize;
                    assert!(write(&b, id, len) || !overwrite);
                    id += 1;
                }
                out.clear();
                overwritten += b.drain(&mut out, usize::MAX, &mut seen).overwritten;
                take_ids(&mut out, &mut ids);
            }
            assert!(pool.taken() > taken, "b grew into pooled segments");
            assert!(
                ids.windows(2).all(|w| w[0] < w[1]) && ids[0] >= first,
                "only b's records, in order"
            );
            assert_eq!(*ids.last().unwrap(), id - 1);
            assert_eq!(b.dropped(), 0);
            assert_eq!(ids.len() as u64 + overwritten, id - first);
            assert_eq!(overwritten > 0, overwrite);
            drop(b);
            pool.close(budget);
            assert_eq!(budget.used(), 0);
        }
    }

    /// A growth the pool cannot serve (4 MiB, above its largest class)
    /// while the budget has room only with the pool's stock given back:
    /// the growing thread gives it back and grows (before: the growth was
    /// refused and the record dropped while the pool held 1.33 MiB).
    #[test]
    fn a_growth_past_the_pool_takes_back_the_stock_when_the_budget_is_short() {
        let budget = Budget::leaked(16 << 20);
        let pool = budget.pool();
        pool.open(usize::MAX);
        let stock = pool.stock(budget);
        assert_eq!(stock, (4 + 16 + 64 + 256 + 1024) << 10);
        let ring = Ring::growable(1 << 17, 1 << 19, false, budget); // 1 MiB to 4 MiB
                                                                    // Other threads leave 3 MiB free: the 4 MiB segment fits only with
                                                                    // the stock given back.
        let others = budget.limit() - budget.used() - (3 << 20);
        assert!(budget.try_take(others));
        let mut id = 0;
        while ring.capacity_words() < 1 << 19 {
            assert!(
                write(&ring, id, 3),
                "record {id} dropped while the pool holds {} bytes",
                pool.pooled_bytes()
            );
            id += 1;
        }
        assert!(pool.pooled_bytes() < stock, "the stock gave way");
        assert_eq!(ring.dropped(), 0);
        drop(ring);
        budget.give_back(others);
        pool.close(budget);
        assert_eq!(budget.used(), 0);
    }
}
