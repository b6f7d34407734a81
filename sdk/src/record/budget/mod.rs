//! The process-wide memory budget of recording: every byte the recording
//! side holds (each thread's ring segments and its bookkeeping) is taken from
//! it before it is allocated and given back when it is freed, so the total
//! never exceeds the limit whatever the number of threads.
//!
//! One owner of the two things rings draw memory from: the byte count
//! ([`count`], a leaf) and the pool of mapped-in segments kept for reuse
//! ([`pool`], whose bytes stay counted). A ring holds a `&Budget`; the pool
//! is reached through [`Budget::pool`], a handle that carries the count, so
//! no caller passes the budget back into its own pool.
//!
//! Taking is a compare-and-swap loop on one counter: it happens on cold paths
//! only (a thread's first event, a ring growing, a ring segment freed by the
//! flusher), never per event.

mod count;
mod pool;

pub(crate) use pool::{ms_at, Pool};

use crate::record::segment::{segment_bytes, words_for};
use count::ByteCount;
use pool::PoolSlots;

/// Default process-wide budget: 32 MiB.
pub(crate) const DEFAULT_BUDGET_BYTES: u64 = 32 << 20;

/// Bytes of the largest segment of a ring whose size was asked as
/// `per_thread` (`Builder::buffer_bytes_per_thread`, rounded as rings are).
pub(crate) fn ring_bytes(per_thread: usize) -> u64 {
    segment_bytes(words_for(per_thread))
}

/// The budget when only the per-thread size was asked: room for one ring
/// at that size and the segments it outgrew while they drain (a third as
/// much again, at most) with the pool's share; at least the default.
pub(crate) fn default_for(per_thread: usize) -> u64 {
    DEFAULT_BUDGET_BYTES.max(ring_bytes(per_thread).saturating_mul(2))
}

pub(crate) struct Budget {
    count: ByteCount,
    /// Mapped-in ring segments kept for reuse; their bytes stay taken.
    pool: PoolSlots,
}

/// The body of `Budget::new`, a `const fn` except under loom.
macro_rules! new_budget {
    ($limit:expr) => {
        Budget {
            count: ByteCount::new($limit),
            pool: PoolSlots::new(),
        }
    };
}

impl Budget {
    #[cfg(not(ringtrace_loom))]
    pub(crate) const fn new(limit: u64) -> Budget {
        new_budget!(limit)
    }

    #[cfg(ringtrace_loom)]
    pub(crate) fn new(limit: u64) -> Budget {
        new_budget!(limit)
    }

    /// A budget for tests and models, alive for the rest of the process.
    /// Its address is kept in a static list, so leak checkers (memcheck)
    /// see it as reachable, as it is meant to be, not as lost.
    #[cfg(any(test, ringtrace_loom))]
    pub(crate) fn leaked(limit: u64) -> &'static Budget {
        static KEPT: std::sync::Mutex<Vec<usize>> = std::sync::Mutex::new(Vec::new());
        let budget: &'static Budget = Box::leak(Box::new(Budget::new(limit)));
        KEPT.lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(budget as *const Budget as usize);
        budget
    }

    /// The pool of segments kept for reuse, whose bytes are taken from
    /// this budget (closed, keeping nothing, until a session opens it).
    pub(crate) fn pool(&self) -> Pool<'_> {
        Pool::of(&self.pool, &self.count)
    }

    /// Sets the limit (a new session). Bytes already taken stay taken.
    pub(crate) fn set_limit(&self, limit: u64) {
        self.count.set_limit(limit)
    }

    /// The limit.
    #[cfg(all(test, not(ringtrace_loom)))]
    pub(crate) fn limit(&self) -> u64 {
        self.count.limit()
    }

    /// Starts measuring the peak again from what is taken now.
    pub(crate) fn reset_peak(&self) {
        self.count.reset_peak()
    }

    /// Takes `bytes` if that keeps the total within the limit.
    pub(crate) fn try_take(&self, bytes: u64) -> bool {
        self.count.try_take(bytes)
    }

    /// Whether `bytes` would fit now (a hint: only `try_take` takes). Reads
    /// the shared counters and writes nothing, so threads that ask while
    /// memory is short do not contend.
    pub(crate) fn has_room(&self, bytes: u64) -> bool {
        self.count.has_room(bytes)
    }

    /// `try_take` on a cold path (a thread's first ring, a growth the pool
    /// did not serve): if refused, gives pooled segments back to make room
    /// (`Pool::give_back_for`: system calls) and asks once more. The pool
    /// must never hold the memory a thread needs to record at all.
    pub(crate) fn try_take_cold(&self, bytes: u64) -> bool {
        self.try_take(bytes) || self.take_from_pool(bytes)
    }

    /// `try_take_cold`'s fallback, out of line: a thread's first event
    /// must not touch more of its stack for it (see `tests/memory.rs`).
    #[cold]
    #[inline(never)]
    fn take_from_pool(&self, bytes: u64) -> bool {
        self.pool().give_back_for(bytes) > 0 && self.try_take(bytes)
    }

    /// Gives back `bytes` taken earlier.
    pub(crate) fn give_back(&self, bytes: u64) {
        self.count.give_back(bytes)
    }

    /// Bytes taken now.
    #[cfg(test)]
    pub(crate) fn used(&self) -> u64 {
        self.count.used()
    }

    /// Highest number of bytes taken at once since `reset_peak`.
    pub(crate) fn peak(&self) -> u64 {
        self.count.peak()
    }

    /// Requests refused so far (monotonic).
    #[cfg(all(test, not(ringtrace_loom)))]
    pub(crate) fn refused(&self) -> u64 {
        self.count.refused()
    }
}

#[cfg(all(test, not(ringtrace_loom)))]
mod tests {
    use super::*;

    #[test]
    fn never_goes_over_the_limit_under_contention() {
        let b = Budget::leaked(1000);
        let taken: u64 = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4)
                .map(|_| s.spawn(|| (0..100).filter(|_| b.try_take(7)).count() as u64))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(taken, 1000 / 7);
        assert_eq!(b.used(), taken * 7);
        assert_eq!(b.refused(), 400 - taken);
        b.give_back(b.used());
        assert_eq!(b.used(), 0);
        assert!(b.try_take(1000));
        assert!(!b.try_take(1));
        assert_eq!(b.peak(), 1000);
    }
}
