//! The atomics and locks the lock-free parts use, swapped for loom's models
//! under `--cfg ringtrace_loom` so that loom explores only our own code.

#[cfg(not(ringtrace_loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};
#[cfg(not(ringtrace_loom))]
pub(crate) use std::sync::Arc;

#[cfg(ringtrace_loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};
#[cfg(ringtrace_loom)]
pub(crate) use loom::sync::Arc;

/// A mutex with the `parking_lot` calling convention (no poisoning) in both builds.
#[cfg(not(ringtrace_loom))]
pub(crate) type Mutex<T> = parking_lot::Mutex<T>;

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
