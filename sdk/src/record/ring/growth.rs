//! Growing: the producer moving to a bigger segment (the consumer's
//! spare, else a pooled one, else its own), the consumer making that spare
//! ahead of time, and the doorbell (`GROWTH`) that wakes the flusher to
//! make it. Cold paths, a few times in a thread's life.

use super::{Ring, MAX_SEGMENTS};
use crate::record::header::LOST_MARKER_WORDS;
use crate::record::ring::max_record_words;
use crate::record::segment::{
    alloc_storage, free_storage, is_mapped, pack_segment, prefault_positions, segment_bytes,
    spare_is_mapped, unpack_segment, PREFAULT_STEP_WORDS,
};
use crate::record::sync::{AtomicU64, Ordering};

/// Rings that grew, and how the flusher is woken when one does: it then
/// prepares that ring's next segment (`Ring::prepare_spare`) at once rather
/// than at its next poll, a few milliseconds in which a busy ring grows
/// from 512 bytes to 16 MiB. Rung only on the producer's growth path (a few
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

impl Ring {
    /// Moves the producer to a new segment at least four times as big (and
    /// with room for a record of `len` words plus a loss marker; into the
    /// last free segment slot, its largest size: see `next_words`), if the
    /// ring is below its largest size, has a free segment slot, and the
    /// budget gives the memory; returns the new segment's first position.
    ///
    /// Drop mode: the new segment starts at `head`; records before it stay
    /// in the older segments until the consumer has copied them out and
    /// frees those. Overwrite mode: the records not yet consumed are copied
    /// into the new segment, which starts at the tail, so that the oldest
    /// records are always in the producer's segment, where it may free them.
    #[cold]
    pub(super) fn grow(&self, head: u64, len: usize) -> Option<u64> {
        let p = &*self.producer;
        let cur = p.mask.load(Ordering::Relaxed) as usize + 1;
        let made = self.made.load(Ordering::Relaxed); // only this thread writes it
                                                      // Acquire: pairs with the consumer's Release of `freed`; it is done
                                                      // with the slot we are about to reuse.
        let held = made - self.freed.load(Ordering::Acquire);
        if held >= MAX_SEGMENTS as u64 {
            return None;
        }
        let want = self.next_words(cur, held, len);
        if want <= cur || len > max_record_words(want) {
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
        // `freed` is ours (only the consumer stores it).
        let held = made - self.freed.load(Ordering::Relaxed);
        let want = self.next_words(cur, held, 0);
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

    /// The size a ring of `cur` slots holding `held` segments grows to: four
    /// times as big, and room for a record of `len` words, up to its
    /// largest size; and its largest size at once when the new segment
    /// takes the last free slot. A ring the consumer has freed nothing of
    /// (a thread flooding it from 512 bytes while the flusher is busy
    /// elsewhere) thus still reaches the size it was allowed, and keeps
    /// every record while the budget has room: growing by four into every
    /// slot, it stopped at 16 MiB of a 64 MiB cap and dropped. A ring that
    /// keeps that many segments is being outrun anyway.
    /// At least `min_next_words` (a page for a thread's ring).
    pub(super) fn next_words(&self, cur: usize, held: u64, len: usize) -> usize {
        let want = if held + 1 >= MAX_SEGMENTS as u64 {
            self.max_words
        } else {
            (cur * 4)
                .max((len * 4).next_power_of_two())
                .max(self.min_next_words)
        };
        want.min(self.max_words)
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
    pub(super) unsafe fn free_segment(&self, base: *mut AtomicU64, words: usize, mapped: bool) {
        if mapped && self.budget.pool().put(base, words) {
            return;
        }
        // SAFETY: the caller's contract.
        unsafe { free_storage(base, words, mapped) };
        self.budget.give_back(segment_bytes(words));
    }
}
