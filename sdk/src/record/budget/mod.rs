//! The process-wide memory budget of recording: every byte the recording
//! side holds (each thread's ring segments and its bookkeeping) is taken from
//! it before it is allocated and given back when it is freed, so the total
//! never exceeds the limit whatever the number of threads.
//!
//! Taking is a compare-and-swap loop on one counter: it happens on cold paths
//! only (a thread's first event, a ring growing, a ring segment freed by the
//! flusher), never per event.

use crate::record::pool::Pool;
use crate::record::sync::{AtomicU64, Ordering};

/// Default process-wide budget: 32 MiB.
pub(crate) const DEFAULT_BUDGET_BYTES: u64 = 32 << 20;

pub(crate) struct Budget {
    limit: AtomicU64,
    used: AtomicU64,
    /// Highest `used` seen (for tests and stats).
    peak: AtomicU64,
    /// Mapped-in ring segments kept for reuse; their bytes stay taken.
    pool: Pool,
    /// Requests refused because they would have gone over the limit (tests
    /// only: every thread would write this line exactly when memory is short).
    #[cfg(test)]
    refused: AtomicU64,
}

/// The body of `Budget::new`, a `const fn` except under loom.
macro_rules! new_budget {
    ($limit:expr) => {
        Budget {
            limit: AtomicU64::new($limit),
            used: AtomicU64::new(0),
            peak: AtomicU64::new(0),
            pool: Pool::new(),
            #[cfg(test)]
            refused: AtomicU64::new(0),
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

    /// Sets the limit (a new session). Bytes already taken stay taken.
    pub(crate) fn set_limit(&self, limit: u64) {
        self.limit.store(limit, Ordering::Relaxed);
    }

    /// The limit.
    pub(crate) fn limit(&self) -> u64 {
        self.limit.load(Ordering::Relaxed)
    }

    /// The pool of segments kept for reuse, whose bytes are taken from
    /// this budget (closed, keeping nothing, until a session opens it).
    pub(crate) fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Starts measuring the peak again from what is taken now.
    pub(crate) fn reset_peak(&self) {
        self.peak.store(self.used(), Ordering::Relaxed);
    }

    /// Takes `bytes` if that keeps the total within the limit.
    pub(crate) fn try_take(&self, bytes: u64) -> bool {
        let limit = self.limit.load(Ordering::Relaxed);
        let mut used = self.used.load(Ordering::Relaxed);
        loop {
            let Some(new) = used.checked_add(bytes).filter(|&n| n <= limit) else {
                #[cfg(test)]
                self.refused.fetch_add(1, Ordering::Relaxed);
                return false;
            };
            // Relaxed: the counter orders nothing; the memory it accounts for
            // is handed between threads by the ring's own release/acquire.
            match self
                .used
                .compare_exchange_weak(used, new, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => {
                    self.peak.fetch_max(new, Ordering::Relaxed);
                    return true;
                }
                Err(now) => used = now,
            }
        }
    }

    /// Whether `bytes` would fit now (a hint: only `try_take` takes). Reads
    /// the shared counters and writes nothing, so threads that ask while
    /// memory is short do not contend.
    pub(crate) fn has_room(&self, bytes: u64) -> bool {
        self.used().saturating_add(bytes) <= self.limit.load(Ordering::Relaxed)
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
        self.pool.give_back_for(self, bytes) > 0 && self.try_take(bytes)
    }

    /// Gives back `bytes` taken earlier.
    pub(crate) fn give_back(&self, bytes: u64) {
        let before = self.used.fetch_sub(bytes, Ordering::Relaxed);
        debug_assert!(before >= bytes, "budget given back more than taken");
    }

    /// Bytes taken now.
    pub(crate) fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// Highest number of bytes taken at once since `reset_peak`.
    pub(crate) fn peak(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }

    /// Requests refused so far (monotonic).
    #[cfg(test)]
    pub(crate) fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
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
