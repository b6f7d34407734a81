//! The flight recorder's store (overwrite mode): the flusher moves what the
//! threads' rings hold into this one process-wide buffer of the most recent
//! records, which forgets its oldest entries, whichever thread wrote them, to
//! make room. So the recorder keeps the last N bytes of the whole process,
//! not of each thread: a thread that recorded long ago does not keep old
//! events while a busy one loses its new ones. It is written out, in the
//! order it was filled, on `flush()` and at stop.
//!
//! Only the flusher thread touches it: no synchronisation.

#![forbid(unsafe_code)]

use crate::encode::{Batch, Context, Encoder};
use crate::record::header::{header_kind, header_len, KIND_LOST};
use crate::record::registry::ThreadRing;
use crate::record::sync::Arc;
use std::collections::{HashMap, VecDeque};

/// Largest run of records one entry holds: what is forgotten at once.
const ENTRY_WORDS: usize = 4096;

/// Words before an entry's records (see `Recorder::words`).
const ENTRY_HEADER: usize = 3;

pub(crate) struct Recorder {
    /// Entries, oldest first: `[seq_id << 32 | records, marked, len]` (the
    /// records other than loss markers, and the records those markers
    /// stand for), then `len` words of whole records of that thread.
    words: VecDeque<u64>,
    cap_words: usize,
    threads: HashMap<u32, Held>,
    scratch: Vec<u64>,
}

/// A thread with entries in the recorder (or losses not yet marked).
struct Held {
    thread: Arc<ThreadRing>,
    entries: usize,
    /// Records of this thread forgotten since its last entry written out.
    forgotten: u64,
    /// The thread exited and its ring was drained for the last time: the
    /// recorder finishes it once nothing of it is left.
    exited: bool,
}

impl Recorder {
    /// A recorder of at most `bytes` bytes (the caller took them from the
    /// budget). That is a cap, not a reservation: the store is allocated as
    /// it fills (`make_room`), so any number is accepted.
    pub(crate) fn new(bytes: u64) -> Recorder {
        let cap_words = usize::try_from(bytes / 8)
            .unwrap_or(usize::MAX)
            .max(2 * (ENTRY_WORDS + ENTRY_HEADER));
        Recorder {
            words: VecDeque::new(),
            cap_words,
            threads: HashMap::new(),
            scratch: Vec::new(),
        }
    }

    /// Keeps the whole records of one drain of `thread` (which found
    /// `overwritten_in_ring` records overwritten in its ring), forgetting the
    /// oldest entries to make room. Returns the records forgotten (not
    /// counting those a forgotten loss marker stood for: the ring counted
    /// them when it dropped them), and
    /// appends to `finished` the exited threads none of whose records are
    /// left (the caller finishes them).
    pub(crate) fn push(
        &mut self,
        thread: &Arc<ThreadRing>,
        records: &[u64],
        overwritten_in_ring: u64,
        finished: &mut Vec<(Arc<ThreadRing>, u64)>,
    ) -> u64 {
        if overwritten_in_ring > 0 {
            // Counted by the caller; marked before the thread's next entry.
            self.held(thread).forgotten += overwritten_in_ring;
        }
        let mut forgotten = 0;
        let mut i = 0;
        while i < records.len() {
            // One entry: whole records, up to ENTRY_WORDS words (or one
            // record, if larger).
            // Counted in the same pass: the records other than loss
            // markers, and the records those markers stand for.
            let (start, mut n, mut events, mut marked) = (i, 0usize, 0u64, 0u64);
            while i < records.len() {
                let h = records[i];
                let len = (header_len(h) as usize).max(1);
                if n > 0 && n + len > ENTRY_WORDS {
                    break;
                }
                if header_kind(h) == KIND_LOST && len >= 3 {
                    marked += records[i + 2];
                } else {
                    events += 1;
                }
                n += len;
                i += len;
            }
            let need = n + ENTRY_HEADER;
            if need > self.cap_words {
                forgotten += events;
                self.held(thread).forgotten += events + marked;
                continue;
            }
            // Room made by forgetting the oldest entries, as long as any is left.
            let fits = loop {
                let fits = self.words.len() + need <= self.cap_words && self.make_room(need);
                if fits || self.words.is_empty() {
                    break fits;
                }
                forgotten += self.forget_oldest(finished);
            };
            if !fits {
                // The allocator refused even an empty store this entry.
                forgotten += events;
                self.held(thread).forgotten += events + marked;
                continue;
            }
            self.words.push_back((thread.seq_id as u64) << 32 | events);
            self.words.push_back(marked);
            self.words.push_back(n as u64);
            self.words.extend(&records[start..i]);
            self.held(thread).entries += 1;
        }
        forgotten
    }

    /// Grows the store's allocation for `need` more words: at least
    /// doubling (amortised), never past the cap. False if the allocator
    /// refuses: the cap comes down to what the store has, and the caller
    /// forgets its oldest entries instead (a budget larger than the memory
    /// the process can get is not an abort).
    fn make_room(&mut self, need: usize) -> bool {
        let len = self.words.len();
        if self.words.capacity() - len >= need {
            return true;
        }
        let want = (len + need)
            .max(self.words.capacity().saturating_mul(2))
            .max(2 * (ENTRY_WORDS + ENTRY_HEADER))
            .min(self.cap_words);
        if self.words.try_reserve_exact(want - len).is_ok() {
            return true;
        }
        self.cap_words = self.words.capacity().max(len);
        if self.words.capacity() - len >= need {
            return true;
        }
        // Not even one more entry fits what the store has: only an empty
        // store may still ask for exactly one entry.
        len == 0 && self.words.try_reserve_exact(need).is_ok()
    }

    fn held(&mut self, thread: &Arc<ThreadRing>) -> &mut Held {
        self.threads.entry(thread.seq_id).or_insert_with(|| Held {
            thread: thread.clone(),
            entries: 0,
            forgotten: 0,
            exited: false,
        })
    }

    /// Moves the first `len` words of the store into `scratch`, as (at most
    /// two) slice copies.
    fn take_front(&mut self, len: usize) {
        self.scratch.clear();
        let (a, b) = self.words.as_slices();
        let from_a = len.min(a.len());
        self.scratch.extend_from_slice(&a[..from_a]);
        self.scratch.extend_from_slice(&b[..len - from_a]);
        self.words.drain(..len);
    }

    /// `thread` exited and its ring is drained for good. Returns `None` if
    /// entries of it are held: the recorder hands it back to be finished
    /// once they are written out or forgotten. Else the caller finishes it
    /// now, marking the returned count of its forgotten records (so that an
    /// exited thread's ring is not kept, in the budget, until a write-out).
    pub(crate) fn thread_exited(&mut self, thread: &ThreadRing) -> Option<u64> {
        match self.threads.get_mut(&thread.seq_id) {
            Some(held) if held.entries > 0 => {
                held.exited = true;
                None
            }
            Some(_) => self.threads.remove(&thread.seq_id).map(|h| h.forgotten),
            None => Some(0),
        }
    }

    /// Forgets the oldest entry; returns how many records it held (its loss
    /// markers aside; they are marked again with the thread's next entry).
    fn forget_oldest(&mut self, finished: &mut Vec<(Arc<ThreadRing>, u64)>) -> u64 {
        let (head, marked, len) = self.pop_entry_header();
        self.words.drain(..len);
        let (seq, n) = ((head >> 32) as u32, head & 0xffff_ffff);
        let held = self.threads.get_mut(&seq).expect("entry of a held thread");
        held.entries -= 1;
        held.forgotten += n + marked;
        if held.entries == 0 && held.exited {
            // Nothing of that thread is left to write: the caller marks its
            // losses as it finishes it.
            let held = self.threads.remove(&seq).expect("held");
            finished.push((held.thread, held.forgotten));
        }
        n
    }

    /// Pops the oldest entry's header: its first word, marked count, length.
    fn pop_entry_header(&mut self) -> (u64, u64, usize) {
        let mut next = || self.words.pop_front().expect("an entry header");
        (next(), next(), next() as usize)
    }

    /// Writes every entry out through `encoder`, oldest first, with the
    /// losses of each thread marked before its first entry, and empties the
    /// recorder. Appends to `finished` the exited threads it held.
    /// `spill` is called after each entry (with the encoder's count of
    /// events), so the caller can write `out` out as it grows: the store can hold tens of MiB of records.
    pub(crate) fn write_out(
        &mut self,
        encoder: &mut dyn Encoder,
        ctx: &mut Context<'_>,
        out: &mut Vec<u8>,
        mut spill: impl FnMut(&mut Vec<u8>, u64),
        finished: &mut Vec<(Arc<ThreadRing>, u64)>,
    ) {
        while !self.words.is_empty() {
            let (head, _, len) = self.pop_entry_header();
            // An entry in one piece of the store is encoded where it is;
            // one that wraps is copied together first.
            let whole = self.words.as_slices().0.len() >= len;
            if !whole {
                self.take_front(len);
            }
            let words = match whole {
                true => &self.words.as_slices().0[..len],
                false => &self.scratch[..],
            };
            let held = self
                .threads
                .get_mut(&((head >> 32) as u32))
                .expect("entry of a held thread");
            let batch = Batch {
                thread: &held.thread,
                words,
                overwritten: std::mem::take(&mut held.forgotten),
            };
            encoder.batch(ctx, &batch, out);
            spill(out, encoder.stats().events);
            if whole {
                self.words.drain(..len);
            }
        }
        for (_, held) in self.threads.drain() {
            if held.forgotten > 0 {
                encoder.note_lost(ctx, &held.thread, held.forgotten, out);
            }
            if held.exited {
                finished.push((held.thread, 0)); // losses marked just above
            }
        }
    }
}

impl Recorder {
    /// The time (clock ticks) of the oldest record held (`None`: nothing
    /// held): where
    /// the window written out at the next write-out starts. Entries of
    /// different threads are not in time order: every entry's first record
    /// is looked at.
    pub(crate) fn oldest_ticks(&self) -> Option<u64> {
        let mut oldest = None::<u64>;
        let mut at = 0;
        while at + ENTRY_HEADER <= self.words.len() {
            let len = self.words[at + 2] as usize;
            let body = at + ENTRY_HEADER;
            let mut i = body;
            while i + 1 < body + len {
                let h = self.words[i];
                if header_kind(h) != KIND_LOST {
                    let ts = self.words[i + 1];
                    oldest = Some(oldest.map_or(ts, |o| o.min(ts)));
                    break;
                }
                i += (header_len(h) as usize).max(1);
            }
            at = body + len;
        }
        oldest
    }
}

impl Recorder {
    /// Copies the records of every thread whose time `in_window` accepts
    /// into `encoder`, oldest first, without forgetting them (a capture:
    /// the session's own output still gets them). Returns the events copied.
    pub(crate) fn copy_window(
        &self,
        encoder: &mut dyn Encoder,
        ctx: &mut Context<'_>,
        out: &mut Vec<u8>,
        in_window: impl Fn(&Context<'_>, u64) -> bool,
        mut spill: impl FnMut(&mut Vec<u8>),
    ) -> u64 {
        let mut picked = Vec::new();
        let mut entry = Vec::new();
        let mut copied = 0;
        let mut words = self.words.iter().copied();
        while let (Some(head), Some(_marked), Some(len)) =
            (words.next(), words.next(), words.next())
        {
            entry.clear();
            entry.extend(words.by_ref().take(len as usize));
            picked.clear();
            let mut i = 0;
            while i < entry.len() {
                let h = entry[i];
                let n = (header_len(h) as usize).max(1).min(entry.len() - i);
                if n >= 2 && header_kind(h) != KIND_LOST && in_window(ctx, entry[i + 1]) {
                    picked.extend_from_slice(&entry[i..i + n]);
                    copied += 1;
                }
                i += n;
            }
            if picked.is_empty() {
                continue;
            }
            let Some(held) = self.threads.get(&((head >> 32) as u32)) else {
                continue;
            };
            let batch = Batch {
                thread: &held.thread,
                words: &picked,
                overwritten: 0,
            };
            encoder.batch(ctx, &batch, out);
            spill(out);
        }
        copied
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::header::make_header;

    fn thread(seq: u32) -> Arc<ThreadRing> {
        Arc::new(ThreadRing::for_test(seq, true))
    }

    /// `n` records of 4 words, of a kind that is not a loss marker.
    fn records(n: usize) -> Vec<u64> {
        (0..n)
            .flat_map(|i| [make_header(9, 4, i as u64), 0, 0, 0])
            .collect()
    }

    /// A thread whose entries were all forgotten before it exited is
    /// finished at once, with its losses to mark, and the recorder keeps
    /// no reference to it; one with entries left is kept until they go.
    #[test]
    fn an_exited_thread_with_nothing_left_is_let_go_at_once() {
        let mut rec = Recorder::new(8 * 2 * (ENTRY_WORDS as u64 + ENTRY_HEADER as u64));
        let (a, b) = (thread(2), thread(3));
        let mut finished = Vec::new();
        assert_eq!(rec.push(&a, &records(10), 5, &mut finished), 0);
        // Two full entries of `b` fill the store: `a`'s entry is forgotten.
        let full = records(ENTRY_WORDS / 4);
        let forgotten: u64 = (0..2).map(|_| rec.push(&b, &full, 0, &mut finished)).sum();
        assert_eq!(forgotten, 10);
        assert!(finished.is_empty());
        assert_eq!(
            rec.thread_exited(&a),
            Some(15),
            "10 forgotten + 5 overwritten"
        );
        assert_eq!(Arc::strong_count(&a), 1, "the recorder let it go");
        assert_eq!(rec.thread_exited(&b), None, "b still has entries");
        let c = thread(4);
        assert_eq!(rec.push(&c, &full, 0, &mut finished), full.len() as u64 / 4);
        assert!(finished.is_empty(), "b has an entry left");
        rec.push(&c, &full, 0, &mut finished);
        assert_eq!(finished.len(), 1, "b's last entry forgotten: finished");
        assert!(Arc::ptr_eq(&finished[0].0, &b));
        assert_eq!(
            finished[0].1,
            2 * full.len() as u64 / 4,
            "its losses, to mark"
        );
    }
}
