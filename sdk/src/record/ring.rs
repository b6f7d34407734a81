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

use crate::record::sync::{AtomicU64, Ordering};
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

pub(crate) struct Ring {
    words: Box<[AtomicU64]>,
    mask: u64,
    /// `max_record_words(capacity)`, computed once for the hot path.
    max_record: usize,
    overwrite: bool,
    /// Next position the producer writes. Written only by the producer.
    head: CachePadded<AtomicU64>,
    /// First position not yet consumed (or freed by the producer in overwrite mode).
    tail: CachePadded<AtomicU64>,
    producer: CachePadded<ProducerState>,
    /// Records freed by the producer in overwrite mode (monotonic).
    overwritten: AtomicU64,
}

/// Fields only the producer writes; atomics only so the struct is `Sync`.
struct ProducerState {
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
/// It caches the storage's base pointer and mask: the word stores are atomic,
/// so the compiler could not otherwise keep `ring.words` in a register across
/// them, and would re-load and bounds-check it for every word.
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
        // SAFETY: `base` and `mask` are `ring.words.as_ptr()` and
        // `ring.words.len() - 1` (a power of two minus one, see `with_words`),
        // so `pos & mask` indexes inside the storage, which `ring` (borrowed
        // for the reservation's life) keeps alive. The slot is an atomic, so
        // the store races with nothing.
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
    /// A ring of at least `bytes` bytes (rounded up to a power of two, minimum 512 bytes),
    /// mapped in at once (see `prefault`): the thread's first event pays for
    /// it (about 70 us per MiB measured on a 2-core AMD EPYC VM), and the
    /// ring's memory is resident from then on.
    pub(crate) fn new(bytes: usize, overwrite: bool) -> Ring {
        Ring::with_words((bytes / 8).max(64).next_power_of_two(), overwrite)
    }

    /// A ring of exactly `words` words (a power of two; tiny ones for models).
    pub(crate) fn with_words(words: usize, overwrite: bool) -> Ring {
        assert!(words.is_power_of_two() && words >= 8);
        let storage: Box<[AtomicU64]> = (0..words).map(|_| AtomicU64::new(0)).collect();
        prefault(&storage);
        Ring {
            words: storage,
            mask: (words - 1) as u64,
            max_record: max_record_words(words),
            overwrite,
            head: CachePadded::new(AtomicU64::new(0)),
            tail: CachePadded::new(AtomicU64::new(0)),
            producer: CachePadded::new(ProducerState {
                cached_tail: AtomicU64::new(0),
                pending_lost: AtomicU64::new(0),
                dropped: AtomicU64::new(0),
                oversized: AtomicU64::new(0),
            }),
            overwritten: AtomicU64::new(0),
        }
    }

    pub(crate) fn capacity_words(&self) -> usize {
        self.words.len()
    }

    pub(crate) fn is_overwrite(&self) -> bool {
        self.overwrite
    }

    /// Producer: reserves `len` words for a record stamped `ts`. In drop mode a
    /// pending loss count is written first as a `LOST` marker. Returns `None`
    /// (and counts the drop) when the record does not fit.
    ///
    /// The fast path (the record fits against the cached tail, no loss to
    /// report) is inlined into the caller; the rest is out of line.
    #[inline(always)]
    pub(crate) fn reserve(&self, len: usize, ts: u64) -> Option<Reservation<'_>> {
        let head = self.head.load(Ordering::Relaxed); // only this thread writes it
        let tail = self.producer.cached_tail.load(Ordering::Relaxed);
        // `max_record` is at least 4: the test folds away for the small
        // constant lengths of most records.
        let pos = if (len <= 4 || len <= self.max_record)
            && head + len as u64 - tail <= self.words.len() as u64
            && self.producer.pending_lost.load(Ordering::Relaxed) == 0
        {
            head
        } else {
            self.reserve_slow(len, ts)?
        };
        Some(self.reservation(pos, pos + len as u64))
    }

    #[inline(always)]
    fn reservation(&self, pos: u64, end: u64) -> Reservation<'_> {
        Reservation {
            ring: self,
            base: self.words.as_ptr(),
            mask: self.mask,
            pos,
            end,
        }
    }

    /// `reserve` when the record is oversized, the cached tail says full, or
    /// a loss marker must go first (written here, published with the record).
    /// Returns the position of the record.
    #[cold]
    #[inline(never)]
    fn reserve_slow(&self, len: usize, ts: u64) -> Option<u64> {
        let cap = self.words.len() as u64;
        if len > self.max_record {
            self.producer.oversized.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let head = self.head.load(Ordering::Relaxed); // only this thread writes it
        let pending = self.producer.pending_lost.load(Ordering::Relaxed);
        let need = len as u64
            + if pending > 0 {
                LOST_MARKER_WORDS as u64
            } else {
                0
            };
        let mut tail = self.producer.cached_tail.load(Ordering::Relaxed);
        if head + need - tail > cap {
            // Acquire: pairs with the consumer's release CAS on `tail`, so its
            // reads of the freed words happen before we overwrite them.
            tail = self.tail.load(Ordering::Acquire);
            if head + need - tail > cap {
                if self.overwrite {
                    tail = self.free_oldest(head + need - cap);
                } else {
                    self.producer
                        .pending_lost
                        .store(pending + 1, Ordering::Relaxed);
                    self.producer.dropped.fetch_add(1, Ordering::Relaxed);
                    return None;
                }
            }
            self.producer.cached_tail.store(tail, Ordering::Relaxed);
        }
        if pending > 0 {
            let mut marker = self.reservation(head, head + LOST_MARKER_WORDS as u64);
            marker.push(make_header(KIND_LOST, LOST_MARKER_WORDS, 0));
            marker.push(ts);
            marker.push(pending);
            self.producer.pending_lost.store(0, Ordering::Relaxed);
            return Some(head + LOST_MARKER_WORDS as u64);
        }
        Some(head)
    }

    /// Overwrite mode: advances `tail` by whole records until it is at least
    /// `min_tail`; returns the new tail.
    #[cold]
    fn free_oldest(&self, min_tail: u64) -> u64 {
        let mut tail = self.tail.load(Ordering::Acquire);
        while tail < min_tail {
            // The header at `tail` is a word this thread wrote (only the
            // producer writes slots), so it is intact even if `tail` is stale.
            let len = header_len(self.words[(tail & self.mask) as usize].load(Ordering::Relaxed));
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
    /// `out`, frees them, and says how many records were lost to overwriting
    /// since `seen_overwritten` (which it updates).
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
            let mut pos = tail;
            while pos < head && (pos - tail) < max_words as u64 {
                let len =
                    header_len(self.words[(pos & self.mask) as usize].load(Ordering::Relaxed));
                if len == 0 || pos + len > head {
                    break; // torn by an overwrite; the CAS below will fail
                }
                starts.push((pos, out.len()));
                for p in pos..pos + len {
                    out.push(self.words[(p & self.mask) as usize].load(Ordering::Relaxed));
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
            let total = self.overwritten.load(Ordering::Relaxed);
            let overwritten = total - *seen_overwritten;
            *seen_overwritten = total;
            return Drained {
                records: starts.len(),
                overwritten,
            };
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
        let ring = Ring::new(64 * 8, false);
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
        let ring = Ring::new(64 * 8, true);
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
    fn oversized_records_are_counted() {
        let ring = Ring::new(64 * 8, false);
        assert!(!write(&ring, 1, 17));
        assert_eq!(ring.oversized(), 1);
        assert!(write(&ring, 2, 16));
    }

    #[test]
    fn concurrent_drop_mode_loses_nothing_silently() {
        let ring = std::sync::Arc::new(Ring::new(1 << 12, false));
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
