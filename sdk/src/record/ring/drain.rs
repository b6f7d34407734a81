//! The consumer's side (the flusher): copying whole records out, moving
//! the tail (a CAS that loses to the producer only in overwrite mode), and
//! freeing the segments the producer has left behind.

use super::{Ring, SegmentSlot};
use crate::record::header::header_len;
use crate::record::segment::is_mapped;
use crate::record::sync::{AtomicU64, Ordering};

/// What one `drain` call found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Drained {
    /// Words of whole records copied out.
    pub(crate) words: usize,
    /// Records the producer overwrote since the previous drain (overwrite mode).
    pub(crate) overwritten: u64,
}

impl Ring {
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
            // Records start before this (the chunk is "about" `max_words`).
            let cut = tail.saturating_add(max_words as u64).min(head);
            'walk: while pos < cut {
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
                // The headers of this segment's records up to the cut, in a
                // loop of their own: no record crosses a segment's start.
                let end = cut.min(next_start);
                if !overwrite {
                    match seg.walk(pos, end, head) {
                        Ok(p) => pos = p,
                        Err(p) => {
                            pos = p;
                            break 'walk;
                        }
                    }
                    continue;
                }
                while pos < end {
                    let len = header_len(seg.word(pos));
                    if len == 0 || pos + len > head {
                        break 'walk; // torn by an overwrite; the CAS below will fail
                    }
                    if overwrite {
                        starts.push(pos);
                    }
                    pos += len;
                }
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

    /// Drop mode: the position of the first record at or past `end`,
    /// following headers from `pos` (where one starts), or `Err` with
    /// where a header that cannot be (length 0, or past `head`) is. Four
    /// records of two words (plain scope begins and ends, the commonest)
    /// are passed with one test where they come in a row. Out of line: the
    /// loop keeps its few values in registers.
    #[inline(never)]
    fn walk(&self, mut pos: u64, end: u64, head: u64) -> Result<u64, u64> {
        // The length field of a header (`header_len`) and a length of 2.
        const LEN: u64 = 0xf_ffff << 4;
        const TWO: u64 = 2 << 4;
        // Records start at `pos`, `pos + 2`, ... while each is two words
        // long; four of them end at `pos + 8 <= end <= head`.
        while pos + 8 <= end {
            let four = (self.word(pos) & LEN) ^ TWO
                | (self.word(pos + 2) & LEN) ^ TWO
                | (self.word(pos + 4) & LEN) ^ TWO
                | (self.word(pos + 6) & LEN) ^ TWO;
            if four != 0 {
                break;
            }
            pos += 8;
        }
        while pos < end {
            let len = header_len(self.word(pos));
            if len == 0 || pos + len > head {
                return Err(pos);
            }
            pos += len;
        }
        Ok(pos)
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
