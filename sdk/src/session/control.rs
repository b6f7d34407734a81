//! [`Control`]: what the session's handle and the flusher share: the stop
//! flag, flush requests and their answers, the queue of [`Request`]s (a
//! window's file, a capture), and the flusher's [`Waker`].

#![forbid(unsafe_code)]

use crate::session::error::Error;
use crate::session::file::Target;
use crate::session::waker::Waker;
use crate::stats::Stats;
use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) struct Control {
    pub(crate) stop: AtomicBool,
    pub(crate) flush_requested: AtomicU64,
    flush_done: Mutex<u64>,
    flush_cv: Condvar,
    /// Windows and captures asked of the flusher.
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
        close_requests(&self.requests);
        self.flushed(u64::MAX);
    }
}

pub(crate) type Reply = mpsc::Sender<Result<Stats, Error>>;

/// What a caller asks of the flusher.
pub(crate) enum Request {
    /// Finish the current file, go on in this one.
    Rotate(Target, Reply),
    /// Write the rings and the next `after` into this file.
    Dump(Target, Duration, Reply),
    /// Write this window into a file of its own (`trigger`).
    Capture(Capture),
}

impl Request {
    pub(crate) fn refuse(self) {
        if let Request::Rotate(_, reply) | Request::Dump(_, _, reply) = self {
            let _ = reply.send(Err(Error::NotRecording));
        }
    }
}

/// The queue of requests; closed when the flusher has finished.
#[derive(Default)]
pub(crate) struct Requests {
    pub(crate) queue: Vec<Request>,
    pub(crate) closed: bool,
    /// A dump's window is open: nothing queued is taken until it closes,
    /// so what waits is no reason for the flusher to wake.
    pub(crate) held: bool,
}

impl Requests {
    /// Whether a request waits that the flusher can take now.
    pub(crate) fn waiting(&self) -> bool {
        !self.held && !self.queue.is_empty()
    }

    pub(crate) fn closed(&self) -> bool {
        self.closed
    }

    /// Captures queued.
    pub(crate) fn captures(&self) -> usize {
        self.queue
            .iter()
            .filter(|r| matches!(r, Request::Capture(_)))
            .count()
    }

    pub(crate) fn push(&mut self, r: Request) {
        self.queue.push(r);
    }
}

/// The flusher is done, however it ended (`Control::close`, a panic
/// included): no more requests; those still queued fail, so no caller of
/// `rotate_output`/`dump_to` waits for an answer that will not come.
pub(crate) fn close_requests(requests: &Mutex<Requests>) {
    let queued = {
        let mut requests = requests.lock();
        requests.closed = true;
        std::mem::take(&mut requests.queue)
    };
    queued.into_iter().for_each(Request::refuse);
}

/// A window to capture (`trigger`): raw clock ticks of its start and end.
pub(crate) struct Capture {
    pub(crate) name: String,
    pub(crate) start: u64,
    pub(crate) end: u64,
}
