//! Which rings have something for the flusher: a ring announces itself
//! (its id on the `ANNOUNCED` list) when it leaves the quiet state, so that
//! a pass of the flusher visits the rings with records and not the ones
//! whose threads recorded once and wait.
//!
//! # Protocol
//!
//! A ring is *announced* (`Ring::announced` true) from its creation until
//! the consumer finds it drained and makes it *quiet* (`Ring::quiet`):
//!
//! * Consumer: stores `announced = false`; a `SeqCst` fence (`F_c`); lowers
//!   the producer's cached tail far below anything real (`POISON` below the
//!   drained tail); reads `head` and the ring owner's retirement flag: if
//!   either says the ring has news, it stores `announced = true` again and
//!   keeps the ring.
//! * Producer: the poisoned cached tail fails the fast path's room test, so
//!   its next record takes the slow path (`reserve_slow`), which reloads the
//!   real tail and stores a fresh cached tail; a `SeqCst` fence (`F_p`);
//!   reads `announced` and, finding it false, sets it (a swap) and puts the
//!   ring's id on `ANNOUNCED`. The fast path is unchanged: no load or store
//!   was added to it.
//! * Owner's exit (`ThreadRing::retire`): sets the retirement flag; a
//!   `SeqCst` fence (`F_r`); announces as the producer does.
//!
//! The fences are in one total order. If `F_c` comes before `F_p`, the
//! producer's read of `announced` sees the consumer's `false` (or later),
//! and announces. If `F_p` comes first, its fresh cached tail is earlier in
//! that word's order than the poison (stored after `F_c`), so the poison
//! stays and the next record announces. Likewise with `F_r`: either the
//! exit announces or the consumer sees the flag. The one record a
//! producer may be writing while the consumer makes its ring quiet (it read
//! the cached tail before the poison and publishes after the consumer's
//! read of `head`) is announced by the thread's next record or its exit;
//! the flusher also looks at a few quiet rings each pass, in turn, so such a
//! record waits a bounded number of passes at most (and every `flush()`,
//! capture and stop reads every ring).

use super::Ring;
use crate::record::sync::{fence, Ordering};

/// How far below the drained tail a quiet ring's cached tail is put: any
/// room test of the fast path (`head + len - cached_tail <= capacity`) then
/// fails, whatever the segment's size and however far the producer got.
const POISON: u64 = 1 << 62;

/// Ids of rings that left the quiet state, for the flusher to take.
pub(crate) struct Announced {
    ids: std::sync::Mutex<Vec<u32>>,
}

/// The process's list (one flusher at a time takes from it).
pub(crate) static ANNOUNCED: Announced = Announced {
    ids: std::sync::Mutex::new(Vec::new()),
};

impl Announced {
    /// Moves every id announced since the last call to `out` (emptied
    /// first), and makes room for `rings` ids: a ring is on the list once at
    /// most between two calls, so with room for every ring the flusher
    /// knows, announcing never allocates on a recording thread (only the
    /// rings made since, whose flags start announced, could not push).
    pub(crate) fn take(&self, out: &mut Vec<u32>, rings: usize) {
        out.clear();
        let mut ids = self.ids.lock().unwrap_or_else(|e| e.into_inner());
        out.extend(ids.drain(..));
        if ids.capacity() < rings {
            ids.reserve(rings);
        }
    }

    #[cold]
    fn push(&self, id: u32) {
        self.ids.lock().unwrap_or_else(|e| e.into_inner()).push(id);
    }
}

impl Ring {
    /// The id this ring announces itself with (its thread's sequence id).
    /// Set before the ring is shared.
    pub(crate) fn set_id(&self, id: u32) {
        self.id.store(id, Ordering::Relaxed);
    }

    /// Whether the ring is announced (not quiet).
    #[cfg(ringtrace_loom)]
    pub(crate) fn is_announced(&self) -> bool {
        self.announced.load(Ordering::Acquire)
    }

    /// Announces the ring if it is quiet (producer's slow path, after it
    /// stored a fresh cached tail; or the owner's exit, after it set its
    /// retirement flag). A load, and a swap and the list's lock only on the
    /// transition.
    #[cold]
    pub(crate) fn announce(&self) {
        // `F_p` / `F_r` of the module's protocol: orders the caller's store
        // (the cached tail, the retirement flag) before this read.
        fence(Ordering::SeqCst);
        if !self.announced.load(Ordering::Relaxed) && !self.announced.swap(true, Ordering::AcqRel) {
            ANNOUNCED.push(self.id.load(Ordering::Relaxed));
        }
    }

    /// Consumer: makes the ring quiet if it holds nothing since the last
    /// drain and `retired` (its owner's exit, read after the ring is made
    /// quiet) says nothing new either. Returns whether it is quiet now; if
    /// not, it is announced (the consumer keeps it). One consumer at a time.
    pub(crate) fn quiet(&self, retired: impl Fn() -> bool) -> bool {
        // Acquire: pairs with the producer's release of `head` and, in
        // overwrite mode, its CAS of `tail`.
        let tail = self.tail.load(Ordering::Acquire);
        if self.head.load(Ordering::Acquire) != tail {
            // Records (a ring looked at in turn while quiet may hold one,
            // see above): the consumer keeps it, announced.
            self.announced.store(true, Ordering::Relaxed);
            return false;
        }
        self.announced.store(false, Ordering::Relaxed);
        // `F_c` of the module's protocol.
        fence(Ordering::SeqCst);
        self.producer
            .cached_tail
            .store(tail.wrapping_sub(POISON), Ordering::Relaxed);
        if self.head.load(Ordering::Acquire) != tail || retired() {
            self.announced.store(true, Ordering::Relaxed);
            return false;
        }
        true
    }
}
