//! The atomics and locks the lock-free parts use, swapped for loom's models
//! under `--cfg ringtrace_loom` so that loom explores only our own code.

#[cfg(not(ringtrace_loom))]
pub(crate) use std::sync::atomic::{fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};
#[cfg(not(ringtrace_loom))]
pub(crate) use std::sync::Arc;

#[cfg(ringtrace_loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};
#[cfg(ringtrace_loom)]
pub(crate) use loom::sync::Arc;

/// A mutex with the `parking_lot` calling convention (no poisoning) in both
/// builds. Outside loom it is `std`'s (a futex word on Linux), not
/// `parking_lot`'s: every thread that ever waits for a `parking_lot` lock
/// gets thread data of its own (a destructor registration on the heap) and
/// grows `parking_lot`'s process-wide wait table to three 64-byte buckets per
/// such thread alive, tables that are never freed. The registry's lock is
/// taken by every thread's first event, so with thousands of threads
/// starting at once that was memory per thread held outside the budget
/// (measured in BENCHMARKS.md, "Measured for design choices"); a futex waits with no memory.
#[cfg(not(ringtrace_loom))]
pub(crate) struct Mutex<T>(std::sync::Mutex<T>);

#[cfg(not(ringtrace_loom))]
impl<T> Mutex<T> {
    pub(crate) const fn new(value: T) -> Self {
        Mutex(std::sync::Mutex::new(value))
    }
    /// Locks; a panic while it was held leaves the data as it was (the
    /// registry's updates are single pushes and removals).
    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, T> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(ringtrace_loom)]
pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);

#[cfg(ringtrace_loom)]
impl<T> Mutex<T> {
    pub(crate) fn new(value: T) -> Self {
        Mutex(loom::sync::Mutex::new(value))
    }
    pub(crate) fn lock(&self) -> loom::sync::MutexGuard<'_, T> {
        self.0.lock().unwrap()
    }
}
