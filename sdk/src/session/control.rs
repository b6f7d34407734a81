//! [`Control`]: what the session's handle and the flusher share: the stop
//! flag, flush requests and their answers, the queue of capture requests,
//! and the flusher's [`Waker`].

#![forbid(unsafe_code)]

use crate::session::capture::{self, Requests};
use crate::session::waker::Waker;
use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) struct Control {
    pub(crate) stop: AtomicBool,
    pub(crate) flush_requested: AtomicU64,
    flush_done: Mutex<u64>,
    flush_cv: Condvar,
    /// Capture windows asked of the flusher (`capture`).
    pub(crate) requests: Mutex<Requests>,
    pub(crate) waker: Arc<Waker>,
}

impl Control {
    pub(crate) fn new() -> Self {
        Control {
            stop: AtomicBool::new(false),
            flush_requested: AtomicU64::new(0),
            flush_done: Mutex::new(0),
            flush_cv: Condvar::new(),
            requests: Mutex::new(Requests::default()),
            waker: Arc::new(Waker::default()),
        }
    }

    /// Asks the flusher to finish the session.
    pub(crate) fn request_stop(&self) {
        self.stop.store(true, Ordering::Release);
        self.waker.wake();
    }

    /// Asks the flusher for a pass that drains every ring and waits until
    /// it has written it out, `timeout` at most.
    pub(crate) fn flush(&self, timeout: Duration) {
        let want = self.flush_requested.fetch_add(1, Ordering::AcqRel) + 1;
        self.waker.wake();
        let mut done = self.flush_done.lock();
        let deadline = Instant::now() + timeout;
        while *done < want {
            if self.flush_cv.wait_until(&mut done, deadline).timed_out() {
                break;
            }
        }
    }

    /// The flusher: the flushes asked up to `seen` are written out.
    pub(crate) fn flushed(&self, seen: u64) {
        *self.flush_done.lock() = seen;
        self.flush_cv.notify_all();
    }

    /// The flusher has ended, however (a panic included): `start` stops
    /// waiting for it, every capture request queued is refused and every
    /// flush waiting is answered.
    pub(crate) fn close(&self) {
        self.waker.set_parked();
        capture::close_requests(&self.requests);
        self.flushed(u64::MAX);
    }
}
