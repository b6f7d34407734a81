//! [`Waker`]: where the flusher sleeps between passes, and what wakes it.
//!
//! Everything that only needs the flusher to look again holds this (or a
//! closure over it), not the session's control state: the session handle
//! (stop, flush, capture requests), a ring that grew (`record`'s `GROWTH`
//! doorbell) and system tracing's connection thread (a command from the
//! service).

#![forbid(unsafe_code)]

use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How long [`Waker::wait_parked`] yields its CPU before it sleeps between
/// looks (a flusher slow to start on a loaded machine).
const PARK_SPIN: Duration = Duration::from_millis(2);
/// How long [`Waker::wait_parked`] waits at most (`start` then returns with
/// the flusher still on its way: only the first events' timing is at stake).
const PARK_WAIT: Duration = Duration::from_millis(250);

#[derive(Default)]
pub(crate) struct Waker {
    lock: Mutex<()>,
    cv: Condvar,
    /// Set once the flusher has come to wait for work (or has ended):
    /// `start` returns only then ([`Waker::wait_parked`]).
    parked: AtomicBool,
}

impl Waker {
    /// Makes the flusher look again now (or right after its current pass).
    pub(crate) fn wake(&self) {
        let _g = self.lock.lock();
        self.cv.notify_all();
    }

    /// The flusher: sleeps up to `timeout` unless `busy()`. `busy` is read
    /// under the lock [`wake`](Waker::wake) takes, so a wake after it looked
    /// is not missed.
    pub(crate) fn sleep_unless(&self, timeout: Duration, busy: impl FnOnce() -> bool) {
        let mut g = self.lock.lock();
        if !busy() {
            self.parked.store(true, Ordering::Release);
            self.cv.wait_for(&mut g, timeout);
        }
    }

    /// The flusher ended (a panic included) before it ever slept: `start`
    /// need not wait for it.
    pub(crate) fn set_parked(&self) {
        self.parked.store(true, Ordering::Release);
    }

    /// Returns once the flusher has run up to its first wait for work and
    /// sleeps there (or has ended), or after [`PARK_WAIT`] at most. `start`
    /// calls it so that the flusher is a thread that sleeps, not one just
    /// made and queued: a new thread is queued on its parent's CPU, where it
    /// could wait a scheduler tick and then take that CPU from the
    /// recording thread, its first lap in a fresh session, while the other
    /// CPU idled (seen with `perf sched`: BENCHMARKS.md, "History", "First
    /// laps"). A thread that sleeps is placed anew when
    /// it is woken. This thread yields its CPU until the flusher has
    /// released the lock in its wait (a flusher queued behind us runs and
    /// parks; one on another CPU is waited for), then sleeps between looks.
    /// Bounded: before it parks the flusher writes the trace's first bytes,
    /// and a writer that blocks (a pipe nobody reads) or a system tracing
    /// handshake that hangs must not hold `start` up.
    pub(crate) fn wait_parked(&self) {
        let since = Instant::now();
        loop {
            if self.parked.load(Ordering::Acquire) && self.lock.try_lock().is_some() {
                return;
            }
            let waited = since.elapsed();
            if waited >= PARK_WAIT {
                return;
            }
            if waited < PARK_SPIN {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(100));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Work found under the lock: no sleep, and `start` is not released by
    /// a flusher that never slept.
    #[test]
    fn no_sleep_while_busy() {
        let w = Waker::default();
        let t = Instant::now();
        w.sleep_unless(Duration::from_secs(10), || true);
        assert!(t.elapsed() < Duration::from_secs(5));
        assert!(!w.parked.load(Ordering::Acquire));
    }

    /// A wake ends the flusher's sleep long before its timeout, and
    /// `wait_parked` returns once the flusher sleeps.
    #[test]
    fn a_wake_ends_the_sleep() {
        let w = Arc::new(Waker::default());
        let sleeper = {
            let w = w.clone();
            std::thread::spawn(move || {
                let t = Instant::now();
                w.sleep_unless(Duration::from_secs(30), || false);
                t.elapsed()
            })
        };
        w.wait_parked();
        // Parked and the lock released: the sleeper is in its wait (or
        // on its way in, holding the lock, which `wake` then waits for).
        let deadline = Instant::now() + Duration::from_secs(20);
        while !sleeper.is_finished() && Instant::now() < deadline {
            w.wake();
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(sleeper.join().unwrap() < Duration::from_secs(25));
    }
}
