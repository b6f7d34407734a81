//! A budget's byte count: bytes taken against a limit, with the peak. A
//! leaf, so that the pool and the budget that owns both can use it.
//!
//! Taking is a compare-and-swap loop on one counter: it happens on cold paths
//! only (a thread's first event, a ring growing, a ring segment freed by the
//! flusher), never per event.

use crate::record::sync::{AtomicU64, Ordering};

pub(crate) struct ByteCount {
    limit: AtomicU64,
    used: AtomicU64,
    /// Highest `used` seen (for tests and stats).
    peak: AtomicU64,
    /// Requests refused because they would have gone over the limit (tests
    /// only: every thread would write this line exactly when memory is short).
    #[cfg(all(test, not(ringtrace_loom)))]
    refused: AtomicU64,
}

/// The body of `ByteCount::new`, a `const fn` except under loom.
macro_rules! new_count {
    ($limit:expr) => {
        ByteCount {
            limit: AtomicU64::new($limit),
            used: AtomicU64::new(0),
            peak: AtomicU64::new(0),
            #[cfg(all(test, not(ringtrace_loom)))]
            refused: AtomicU64::new(0),
        }
    };
}

impl ByteCount {
    #[cfg(not(ringtrace_loom))]
    pub(crate) const fn new(limit: u64) -> ByteCount {
        new_count!(limit)
    }

    #[cfg(ringtrace_loom)]
    pub(crate) fn new(limit: u64) -> ByteCount {
        new_count!(limit)
    }

    /// Sets the limit (a new session). Bytes already taken stay taken.
    pub(crate) fn set_limit(&self, limit: u64) {
        self.limit.store(limit, Ordering::Relaxed);
    }

    /// The limit.
    pub(crate) fn limit(&self) -> u64 {
        self.limit.load(Ordering::Relaxed)
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
                #[cfg(all(test, not(ringtrace_loom)))]
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
    #[cfg(all(test, not(ringtrace_loom)))]
    pub(crate) fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }
}
