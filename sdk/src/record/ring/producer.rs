//! The producer's side (the owning thread): reserving room for a record
//! and publishing it (the hot path, inlined into the caller), and the slow
//! path when the cached tail says full: a loss marker, growing
//! (`growth`), dropping, or in overwrite mode freeing its own oldest
//! records; mapping in a large segment ahead of itself.

use super::Ring;
use crate::record::header::{header_len, make_header, KIND_LOST, LOST_MARKER_WORDS};
use crate::record::ring::max_record_words;
use crate::record::segment::{prefault_positions, PREFAULT_STEP_WORDS};
use crate::record::sync::{AtomicU64, Ordering};

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

    /// Stores `words` as the next words of the record. Where they do not
    /// wrap past the segment's end (nearly always) they go in one run: a
    /// load, a store and a count a word, without the mask each `push`
    /// applies (an event's or a span's field values are most of its words).
    #[inline(always)]
    pub(crate) fn push_words(&mut self, words: &[u64]) {
        if words.is_empty() {
            return; // folds away for the records that have none
        }
        let n = words.len() as u64;
        debug_assert!(self.pos + n <= self.end);
        let at = self.pos & self.mask;
        if at + n <= self.mask + 1 {
            // SAFETY: as in `push`, `at` indexes inside the producer's
            // segment storage of `mask + 1` slots, and `at + n <= mask + 1`
            // was checked above, so `at + i` for every `i < n` does too;
            // the segment outlives this reservation (see `push`), and the
            // slots are atomics.
            let run = unsafe { self.base.add(at as usize) };
            for (i, &w) in words.iter().enumerate() {
                // SAFETY: `i < n`: inside the run checked above.
                unsafe { &*run.add(i) }.store(w, Ordering::Relaxed);
            }
        } else {
            store_wrapping(self.base, self.mask, self.pos, words);
        }
        self.pos += n;
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

/// [`Reservation::push_words`] across the segment's end: word by word, at
/// `pos` on (its fields passed by value, so that the reservation stays in
/// registers on the inlined fast path).
#[cold]
#[inline(never)]
fn store_wrapping(base: *const AtomicU64, mask: u64, pos: u64, words: &[u64]) {
    for (i, &w) in words.iter().enumerate() {
        // SAFETY: as in `Reservation::push`: `(pos + i) & mask` indexes
        // inside the producer's segment storage of `mask + 1` slots, which
        // outlives the reservation this is called from.
        unsafe { &*base.add(((pos + i as u64) & mask) as usize) }.store(w, Ordering::Relaxed);
    }
}

impl Ring {
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
            // Then the ring is announced if it was quiet: the consumer may
            // have lowered the cached tail to send us here (see `announce`).
            // Once per lap of the segment at most.
            p.cached_tail
                .store(self.fast_path_tail(tail), Ordering::Relaxed);
            self.announce();
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
}
