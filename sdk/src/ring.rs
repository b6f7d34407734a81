//! The per-thread ring: a bounded single-producer, single-consumer queue of
//! variable-length records made of 64-bit words.
//!
//! # Layout
//!
//! The storage is `capacity` words (a power of two), each an `AtomicU64`, so
//! every access is an atomic load or store and no access can be a data race even
//! when the consumer reads a slot the producer is overwriting (flight-recorder
//! mode). On x86-64 and AArch64 a relaxed atomic load or store is a plain `mov`
//! / `ldr` / `str`, so this costs nothing over a raw buffer.
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
//! * Drop mode: when full the record is dropped and counted; the count is put
//!   into the stream as a `LOST` marker in front of the next record that fits,
//!   so the reader knows exactly where the gap is.
//! * Overwrite mode: when full the producer frees the oldest records itself by
//!   advancing `tail` with CAS, one whole record at a time, counting each.
//! * Consumer (the flusher): loads `head` (Acquire, pairs with the producer's
//!   publish), copies whole records out, then advances `tail` from the value it
//!   started at with a CAS (AcqRel). If the CAS fails the producer has freed
//!   some of those records meanwhile: the copies of them may be torn and are
//!   discarded, the copies past the new `tail` are intact (the producer writes
//!   only into slots of positions below `tail`), so the CAS is retried from
//!   there.

use crate::budget::Budget;
use crate::sync::{AtomicPtr, AtomicU64, Ordering};
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
/// Best effort: where `madvise` says no, one word per page is written.
#[cfg(all(target_os = "linux", not(ringtrace_loom), not(miri)))]
fn prefault(words: &[AtomicU64]) {
    const PAGE: usize = 4096;
    const MADV_POPULATE_WRITE: libc::c_int = 23; // Linux 5.14
    let start = words.as_ptr() as usize;
    let end = start + std::mem::size_of_val(words);
    let (a, b) = ((start + PAGE - 1) & !(PAGE - 1), end & !(PAGE - 1));
    if b > a {
        // SAFETY: [a, b) is whole pages inside the allocation `words` borrows
        // (just made, not yet shared). MADV_HUGEPAGE and MADV_POPULATE_WRITE
        // change how it is backed, never its contents (the zeroes stay).
        let populated = unsafe {
            if b - a >= 2 << 20 {
                libc::madvise(a as *mut libc::c_void, b - a, libc::MADV_HUGEPAGE);
            }
            libc::madvise(a as *mut libc::c_void, b - a, MADV_POPULATE_WRITE) == 0
        };
        if populated {
            return;
        }
    }
    for w in words.iter().step_by(PAGE / 8) {
        w.store(0, Ordering::Relaxed);
    }
}

#[cfg(not(all(target_os = "linux", not(ringtrace_loom), not(miri))))]
fn prefault(_words: &[AtomicU64]) {}

/// One piece of a ring's storage: a power of two of slots holding the records
/// at positions `start..` (slot of position `p`: `p & (len - 1)`), until the
/// producer moves on to a bigger segment (`next`).
pub(crate) struct Segment {
    words: Box<[AtomicU64]>,
    /// Position of the first record stored here.
    start: u64,
    /// The segment the producer moved on to (its records begin at
    /// `next.start`); null while this is the producer's segment. Stored once,
    /// with Release, after `next` is fully built.
    next: AtomicPtr<Segment>,
}

impl Segment {
    /// A zeroed, mapped-in segment of `words` slots (a power of two).
    fn new(words: usize, start: u64) -> Box<Segment> {
        debug_assert!(words.is_power_of_two() && words >= 8);
        let storage: Box<[AtomicU64]> = (0..words).map(|_| AtomicU64::new(0)).collect();
        prefault(&storage);
        Box::new(Segment {
            words: storage,
            start,
            next: AtomicPtr::new(std::ptr::null_mut()),
        })
    }

    #[inline(always)]
    fn slot(&self, pos: u64) -> &AtomicU64 {
        &self.words[(pos & (self.words.len() as u64 - 1)) as usize]
    }
}

/// Bytes a segment of `words` slots takes from the budget.
pub(crate) fn segment_bytes(words: usize) -> u64 {
    (words * 8 + std::mem::size_of::<Segment>()) as u64
}

/// Slots of a segment of at least `bytes` bytes: a power of two, at least 64.
pub(crate) fn words_for(bytes: usize) -> usize {
    (bytes / 8).clamp(64, 1 << 40).next_power_of_two()
}

pub(crate) struct Ring {
    overwrite: bool,
    /// Next position the producer writes. Written only by the producer.
    head: CachePadded<AtomicU64>,
    /// First position not yet consumed (or freed by the producer in overwrite mode).
    tail: CachePadded<AtomicU64>,
    producer: CachePadded<ProducerState>,
    /// The oldest segment that may still hold records. Read and written only
    /// by the consumer (and `Drop`), which alone frees segments.
    first: AtomicPtr<Segment>,
    /// Records freed by the producer in overwrite mode (monotonic).
    overwritten: AtomicU64,
    /// Largest segment this ring grows to, in slots.
    max_words: usize,
    /// Where every segment's bytes are taken from and given back to.
    budget: &'static Budget,
}

/// Fields only the producer writes; atomics only so the struct is `Sync`.
struct ProducerState {
    /// The segment the producer writes into (the newest), and copies of its
    /// base pointer, `len - 1` and largest record for the hot path.
    seg: AtomicPtr<Segment>,
    base: AtomicPtr<AtomicU64>,
    mask: AtomicU64,
    max_record: AtomicU64,
    /// `start` of that segment: slots of earlier positions live in older
    /// segments, so the producer's free room counts from here at the least.
    seg_start: AtomicU64,
    cached_tail: AtomicU64,
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
        // SAFETY: `base` and `mask` are the producer's segment's
        // `words.as_ptr()` and `words.len() - 1` (a power of two minus one,
        // see `Segment::new`), read by this thread, the only one that changes
        // them, after the last change; so `pos & mask` indexes inside that
        // storage. The segment is freed only by the consumer once it has seen
        // a newer segment published (`Ring::grow`), which cannot happen while
        // this reservation (made by the producer) is being written, or by
        // `Drop`, which the borrow of `ring` excludes. The slot is an atomic,
        // so the store races with nothing.
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
    /// Whole records copied out.
    pub(crate) records: usize,
    /// Records the producer overwrote since the previous drain (overwrite mode).
    pub(crate) overwritten: u64,
}

impl Ring {
    /// A ring whose first segment has at least `initial_bytes` bytes and
    /// which grows, doubling, up to `max_bytes` (both rounded up to a power
    /// of two, minimum 512 bytes) while `budget` allows. In overwrite mode it
    /// starts at `max_bytes` and never grows (the producer reuses its own
    /// oldest slots). `None` when the budget cannot hold the first segment.
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
        let initial = if overwrite {
            max_words
        } else {
            words_for(initial_bytes).min(max_words)
        };
        if !budget.try_take(segment_bytes(initial)) {
            return None;
        }
        Some(Ring::build(initial, max_words, overwrite, budget))
    }

    /// A ring of exactly `words` words (a power of two; tiny ones for models)
    /// that never grows, with a budget of its own.
    #[cfg(any(test, ringtrace_loom))]
    pub(crate) fn with_words(words: usize, overwrite: bool) -> Ring {
        Ring::growable(words, words, overwrite, Budget::leaked(u64::MAX))
    }

    /// A ring of `words` words growing up to `max_words` within `budget`
    /// (for models and tests; takes the first segment from the budget).
    #[cfg(any(test, ringtrace_loom))]
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
        let seg = Box::into_raw(Segment::new(words, 0));
        // SAFETY: just made by `Box::into_raw`, not shared yet.
        let base = unsafe { (*seg).words.as_ptr() } as *mut AtomicU64;
        Ring {
            overwrite,
            head: CachePadded::new(AtomicU64::new(0)),
            tail: CachePadded::new(AtomicU64::new(0)),
            producer: CachePadded::new(ProducerState {
                seg: AtomicPtr::new(seg),
                base: AtomicPtr::new(base),
                mask: AtomicU64::new(words as u64 - 1),
                max_record: AtomicU64::new(max_record_words(words) as u64),
                seg_start: AtomicU64::new(0),
                cached_tail: AtomicU64::new(0),
                pending_lost: AtomicU64::new(0),
                dropped: AtomicU64::new(0),
                oversized: AtomicU64::new(0),
            }),
            first: AtomicPtr::new(seg),
            overwritten: AtomicU64::new(0),
            max_words,
            budget,
        }
    }

    /// Slots of the segment the producer writes into now.
    pub(crate) fn capacity_words(&self) -> usize {
        self.producer.mask.load(Ordering::Relaxed) as usize + 1
    }

    pub(crate) fn is_overwrite(&self) -> bool {
        self.overwrite
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
            && head + len as u64 - tail <= mask + 1
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
        let need = len as u64
            + if pending > 0 {
                LOST_MARKER_WORDS as u64
            } else {
                0
            };
        let mut tail = p.cached_tail.load(Ordering::Relaxed);
        let fits = |tail: u64| {
            len as u64 <= p.max_record.load(Ordering::Relaxed)
                && head + need - tail <= p.mask.load(Ordering::Relaxed) + 1
        };
        if !fits(tail) {
            // Acquire: pairs with the consumer's release CAS on `tail`, so its
            // reads of the freed words happen before we overwrite them. Slots
            // of positions before `seg_start` are in older segments.
            tail = self
                .tail
                .load(Ordering::Acquire)
                .max(p.seg_start.load(Ordering::Relaxed));
            if !fits(tail) {
                if self.grow(head, len) {
                    tail = head; // the new segment is empty
                } else if self.overwrite {
                    // Overwrite rings never grow: one segment, `len` fits it.
                    let cap = p.mask.load(Ordering::Relaxed) + 1;
                    tail = self.free_oldest(head + need - cap);
                } else {
                    p.pending_lost.store(pending + 1, Ordering::Relaxed);
                    p.dropped.fetch_add(1, Ordering::Relaxed);
                    return None;
                }
            }
            p.cached_tail.store(tail, Ordering::Relaxed);
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

    /// Drop mode: moves the producer to a new segment at least twice as big
    /// (and with room for a record of `len` words plus a loss marker), if
    /// the ring is below its largest size and the budget gives the memory.
    /// Records before `head` stay in the older segments until the consumer
    /// has copied them out and frees those.
    #[cold]
    fn grow(&self, head: u64, len: usize) -> bool {
        let p = &*self.producer;
        let cur = p.mask.load(Ordering::Relaxed) as usize + 1;
        let want = (cur * 2)
            .max((len * 4).next_power_of_two())
            .min(self.max_words);
        if self.overwrite || want <= cur || len > max_record_words(want) {
            return false;
        }
        if !self.budget.try_take(segment_bytes(want)) {
            return false;
        }
        let seg = Box::into_raw(Segment::new(want, head));
        // SAFETY: `p.seg` is the producer's segment: the consumer frees a
        // segment only after loading its `next` as non-null, which happens
        // after the store below at the earliest; we do not touch it after.
        let old = unsafe { &*p.seg.load(Ordering::Relaxed) };
        // Release: the new segment (its `start`, its zeroed slots) is built
        // before the consumer can see the pointer (its Acquire loads of
        // `next`). Records at `head` and after are published later, by the
        // producer's Release stores of `head`.
        old.next.store(seg, Ordering::Release);
        // SAFETY: `seg` is alive (the consumer frees it only after a newer
        // segment is published, which only this thread does).
        let words = unsafe { &(*seg).words };
        p.seg.store(seg, Ordering::Relaxed);
        p.base
            .store(words.as_ptr() as *mut AtomicU64, Ordering::Relaxed);
        p.mask.store(want as u64 - 1, Ordering::Relaxed);
        p.max_record
            .store(max_record_words(want) as u64, Ordering::Relaxed);
        p.seg_start.store(head, Ordering::Relaxed);
        true
    }

    /// Overwrite mode: advances `tail` by whole records until it is at least
    /// `min_tail`; returns the new tail.
    #[cold]
    fn free_oldest(&self, min_tail: u64) -> u64 {
        // SAFETY: overwrite rings have one segment, freed only by `Drop`.
        let seg = unsafe { &*self.producer.seg.load(Ordering::Relaxed) };
        let mut tail = self.tail.load(Ordering::Acquire);
        while tail < min_tail {
            // The header at `tail` is a word this thread wrote (only the
            // producer writes slots), so it is intact even if `tail` is stale.
            let len = header_len(seg.slot(tail).load(Ordering::Relaxed));
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
        let mut starts: Vec<(u64, usize)> = Vec::new();
        loop {
            out.truncate(base);
            starts.clear();
            let tail = self.tail.load(Ordering::Acquire);
            // Acquire: pairs with the producer's Release publish of `head`.
            let head = self.head.load(Ordering::Acquire);
            // SAFETY: `first` and the segments linked after it are freed only
            // by `release_segments` (this consumer, after this loop) and by
            // `Drop`; so each is alive while we read it.
            let mut seg = unsafe { &*self.first.load(Ordering::Relaxed) };
            let mut pos = tail;
            while pos < head && (pos - tail) < max_words as u64 {
                // Acquire: pairs with `grow`'s Release; the segment's fields
                // are visible. If `pos` was written into a newer segment, its
                // link is visible here: the producer stored it before the
                // `head` we loaded.
                let next = seg.next.load(Ordering::Acquire);
                if !next.is_null() {
                    // SAFETY: linked segments are alive (see above).
                    let n = unsafe { &*next };
                    if pos >= n.start {
                        seg = n;
                        continue;
                    }
                }
                let len = header_len(seg.slot(pos).load(Ordering::Relaxed));
                if len == 0 || pos + len > head {
                    break; // torn by an overwrite; the CAS below will fail
                }
                starts.push((pos, out.len()));
                for p in pos..pos + len {
                    out.push(seg.slot(p).load(Ordering::Relaxed));
                }
                pos += len;
            }
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
                    Err(now) => match starts.iter().position(|&(p, _)| p == now) {
                        // The producer freed the records before `now`: drop
                        // their (possibly torn) copies, keep the rest.
                        Some(i) => {
                            let cut = starts[i].1;
                            out.drain(base..cut);
                            let shift = cut - base;
                            starts.drain(..i);
                            for s in starts.iter_mut() {
                                s.1 -= shift;
                            }
                            from = now;
                        }
                        None => {
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
                records: starts.len(),
                overwritten,
            };
        }
    }

    /// Consumer: frees the segments the producer has left whose records are
    /// all consumed, giving their bytes back to the budget.
    fn release_segments(&self) {
        // Only the consumer moves `tail` in a ring that grows.
        let tail = self.tail.load(Ordering::Relaxed);
        loop {
            let first = self.first.load(Ordering::Relaxed);
            // SAFETY: `first` is alive: only this function (one consumer) and
            // `Drop` free segments.
            let next = unsafe { &*first }.next.load(Ordering::Acquire);
            // SAFETY: a linked segment is alive (the same argument).
            if next.is_null() || tail < unsafe { &*next }.start {
                return;
            }
            self.first.store(next, Ordering::Relaxed);
            // SAFETY: `first` came from `Box::into_raw`; the producer left it
            // for good when it published `next` (it writes only into its
            // newest segment); every record in it lies below `next.start <=
            // tail`, so it has been copied out; it is no longer reachable
            // from `self.first`, and nothing else frees segments.
            let old = unsafe { Box::from_raw(first) };
            self.budget.give_back(segment_bytes(old.words.len()));
        }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        let mut seg = self.first.load(Ordering::Relaxed);
        while !seg.is_null() {
            // SAFETY: `&mut self`: no producer or consumer is left; every
            // segment from `first` on came from `Box::into_raw` and is
            // reachable once, through the previous segment's `next`.
            let s = unsafe { Box::from_raw(seg) };
            self.budget.give_back(segment_bytes(s.words.len()));
            seg = s.next.load(Ordering::Relaxed);
        }
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

    fn records(words: &[u64]) -> Vec<(u64, u64, usize)> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < words.len() {
            let len = header_len(words[i]) as usize;
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
        assert_eq!(ring.capacity_words(), 64); // 8 -> 16 -> 32 -> 64
        let held = segment_bytes(8) + segment_bytes(16) + segment_bytes(32) + segment_bytes(64);
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
        let budget = Budget::leaked(segment_bytes(8) + segment_bytes(16));
        let ring = Ring::growable(8, 1024, false, budget);
        let written = (0..20).filter(|&id| write(&ring, id, 2)).count();
        assert_eq!(written, 12, "8 words, then 16 more after growing once");
        assert_eq!(ring.capacity_words(), 16);
        assert_eq!(ring.dropped(), 8);
        assert!(budget.refused() > 0);
        let mut out = Vec::new();
        let mut seen = 0;
        ring.drain(&mut out, usize::MAX, &mut seen);
        // Draining gave the first segment back: the ring can grow again.
        assert_eq!(budget.used(), segment_bytes(16));
        assert!(write(&ring, 99, 2));
        ring.drain(&mut out, usize::MAX, &mut seen);
        let recs = records(&out);
        assert_eq!(recs.len(), 14);
        assert_eq!(recs[12].0, KIND_LOST);
        assert_eq!(out[out.len() - 3], 8, "the marker counts the 8 drops");
        assert_eq!(recs[13].1, 99);
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
        let producer = {
            let ring = ring.clone();
            std::thread::spawn(move || {
                (0..100_000u64)
                    .filter(|&id| write(&ring, id, 2 + (id % 5) as usize))
                    .count() as u64
            })
        };
        let mut out = Vec::new();
        let mut seen = 0;
        let mut ids = Vec::new();
        let mut take = |out: &mut Vec<u64>| {
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
        };
        while !producer.is_finished() {
            ring.drain(&mut out, 1 << 10, &mut seen);
            take(&mut out);
        }
        let written = producer.join().unwrap();
        ring.drain(&mut out, usize::MAX, &mut seen);
        take(&mut out);
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
}
