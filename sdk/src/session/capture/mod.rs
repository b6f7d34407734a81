//! Captures: in flight-recorder mode, a window of the recent past written
//! into a file of its own when something asks for it ([`trigger`](crate::trigger), or a
//! slow `tracing` span: `Builder::capture_slow`).
//!
//! The caller only queues a [`Capture`] (the window's ends as raw clock
//! ticks) with the session's other requests and wakes the flusher. The
//! flusher drains every ring into the flight recorder's store, then copies
//! the records of the window (from [`Builder::capture_before`] before its
//! start to its end; nothing is taken out of the store) into a new complete
//! file named from [`Builder::capture_to`]'s pattern, at most one per
//! [`Builder::capture_interval`] (later ones are counted as suppressed),
//! the oldest of more than [`Builder::capture_files`] removed. With system
//! tracing, each capture also sends `ActivateTriggers` with its name to the
//! tracing service, so a tracing session configured with that trigger
//! (`STOP_TRACING`, `CLONE_SNAPSHOT`, ...) reacts.
//!
//! With CPU sampling on, a capture file also holds the samples of its
//! window, of every thread (the question a slow scope's capture answers,
//! "where did its time go", may lead to a thread it waited for): those the
//! flight recorder holds beside its records (`sampling::held`), none taken
//! out, encoded a chunk at a time into memory taken from the budget (when
//! it refuses, the window's samples are dropped, counted in
//! `Stats::cpu_samples_lost` and, in Perfetto, marked in the file); the file interns
//! afresh only the mappings, frames and call stacks they use. A queued
//! capture wakes the sampler to read its rings, and while it runs a capture
//! waits until [`SAMPLES_LAG`] after its window's end before it is written.

#![forbid(unsafe_code)]

mod slow;
mod write;

pub(crate) use slow::SlowScopes;
pub(crate) use write::Captures;

#[allow(unused_imports)] // rustdoc links
use crate::session::builder::Builder;
pub(crate) use crate::session::control::Capture;
use crate::session::control::{Request, Requests};
use crate::session::waker::Waker;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// Captures queued and not yet taken by the flusher, at most.
pub(super) const MAX_QUEUED: usize = 16;

/// Captures refused before reaching the flusher (too many queued).
static REFUSED: AtomicU64 = AtomicU64::new(0);

/// Queues `capture` with the session's `requests` and wakes the flusher;
/// false once the flusher has ended or when too many wait.
pub(crate) fn queue(requests: &Mutex<Requests>, waker: &Waker, capture: Capture) -> bool {
    {
        let mut requests = requests.lock();
        if requests.closed() {
            return false;
        }
        if requests.captures() >= MAX_QUEUED {
            REFUSED.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        requests.push(Request::Capture(capture));
    }
    waker.wake();
    crate::sampling::read_now();
    true
}
