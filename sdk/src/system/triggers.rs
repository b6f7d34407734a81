//! Trigger names on their way to traced (`ActivateTriggers`). The flusher
//! queues a pass's names here ([`Triggers::queue`]) and returns at once: it
//! never waits on the service. The producer's trigger thread takes them
//! ([`Triggers::take`]) and sends them on the live connection.
//!
//! Bounds: a name longer than [`MAX_NAME`] bytes is refused (a shortened
//! name would fire another trigger); a name already waiting is not queued
//! again (the service gets it once); at most [`MAX_QUEUED`] names wait, and
//! the trigger thread sends them in one frame, which these bounds keep well
//! within the protocol's frame limit. Every name that does not reach the
//! service (refused, the queue full, no connection, the send failed, the
//! session stopping) is counted ([`Triggers::dropped`], which becomes
//! `Stats::triggers_dropped`) and said once on stderr.

#![forbid(unsafe_code)]

use super::wire::MAX_FRAME;
use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The longest trigger name sent, in bytes. Trigger names in a trace
/// config are short identifiers; a longer name is refused, not shortened.
pub(crate) const MAX_NAME: usize = 256;

/// Names waiting for the trigger thread, at most; also the most one
/// `ActivateTriggers` frame carries.
pub(crate) const MAX_QUEUED: usize = 64;

// The largest frame these bounds allow (a name: a tag, a 2-byte length and
// its bytes; the frame's header and method fields: under 64 bytes) stays
// within the protocol's limit.
const _: () = assert!(MAX_QUEUED * (MAX_NAME + 3) + 64 <= MAX_FRAME);

/// Why names did not reach the service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dropped {
    TooLong,
    QueueFull,
    NotConnected,
    Unsupported,
    SendFailed,
    Stopping,
}

impl Dropped {
    fn says(self) -> String {
        match self {
            Dropped::TooLong => format!("a name longer than {MAX_NAME} bytes is refused"),
            Dropped::QueueFull => {
                format!("more than {MAX_QUEUED} were waiting to be sent")
            }
            Dropped::NotConnected => "not connected to the service".into(),
            Dropped::Unsupported => "the service offers no ActivateTriggers".into(),
            Dropped::SendFailed => "the send failed, which ended the connection".into(),
            Dropped::Stopping => "system tracing ended before they were sent".into(),
        }
    }
}

#[derive(Default)]
struct Queue {
    names: Vec<String>,
    /// The trigger thread holds names it took and has not settled yet.
    in_flight: bool,
    /// No more names are taken (the session stops).
    closed: bool,
}

/// The queue between the flusher and the trigger thread, and its counts.
#[derive(Default)]
pub(crate) struct Triggers {
    queue: Mutex<Queue>,
    changed: Condvar,
    dropped: AtomicU64,
    said: AtomicBool,
}

impl Triggers {
    /// Queues `names` (the flusher; never blocks on the service): refuses
    /// names over [`MAX_NAME`], skips those already waiting, drops those
    /// beyond [`MAX_QUEUED`] (both counted); wakes the trigger thread.
    pub(crate) fn queue(&self, names: &[String]) {
        let mut too_long = 0;
        let mut full = 0;
        let mut stopping = 0;
        let mut added = false;
        {
            let mut q = self.queue.lock();
            for n in names {
                if n.len() > MAX_NAME {
                    too_long += 1;
                } else if q.names.iter().any(|w| w == n) {
                    // Already waiting: the service gets it once.
                } else if q.closed {
                    stopping += 1;
                } else if q.names.len() >= MAX_QUEUED {
                    full += 1;
                } else {
                    q.names.push(n.clone());
                    added = true;
                }
            }
        }
        if added {
            self.changed.notify_all();
        }
        self.drop_names(too_long, Dropped::TooLong);
        self.drop_names(full, Dropped::QueueFull);
        self.drop_names(stopping, Dropped::Stopping);
    }

    /// The trigger thread: waits for names and moves them into `out`
    /// (empty on entry); false once closed (the thread ends).
    pub(crate) fn take(&self, out: &mut Vec<String>) -> bool {
        let mut q = self.queue.lock();
        loop {
            if q.closed {
                return false;
            }
            if !q.names.is_empty() {
                std::mem::swap(out, &mut q.names);
                q.in_flight = true;
                return true;
            }
            self.changed.wait(&mut q);
        }
    }

    /// The trigger thread settled what it took (sent, or dropped).
    pub(crate) fn settled(&self) {
        self.queue.lock().in_flight = false;
        self.changed.notify_all();
    }

    /// Waits until no name waits or is being sent, for `within` at most.
    pub(crate) fn drain(&self, within: Duration) {
        let until = Instant::now() + within;
        let mut q = self.queue.lock();
        while (!q.names.is_empty() || q.in_flight) && !q.closed {
            if self.changed.wait_until(&mut q, until).timed_out() {
                break;
            }
        }
    }

    /// No more names are sent: those waiting are dropped (counted), later
    /// ones too; the trigger thread ends.
    pub(crate) fn close(&self) {
        let left = {
            let mut q = self.queue.lock();
            q.closed = true;
            std::mem::take(&mut q.names).len()
        };
        self.changed.notify_all();
        self.drop_names(left as u64, Dropped::Stopping);
    }

    /// Counts `n` names that did not reach the service; the first time,
    /// says why on stderr.
    pub(crate) fn drop_names(&self, n: u64, why: Dropped) {
        if n == 0 {
            return;
        }
        self.dropped.fetch_add(n, Ordering::Relaxed);
        if !self.said.swap(true, Ordering::Relaxed) {
            eprintln!(
                "ringtrace: trigger names not sent to the Perfetto tracing service ({}); \
                 Stats::triggers_dropped counts every one",
                why.says()
            );
        }
    }

    /// Names that did not reach the service so far.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::system::wire;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn long_names_are_refused_repeats_merged_and_the_queue_bounded() {
        let t = Triggers::default();
        let long = "x".repeat(MAX_NAME + 1);
        let longest = "y".repeat(MAX_NAME);
        t.queue(&[long, longest.clone(), "a".into(), "a".into()]);
        assert_eq!(t.dropped(), 1, "the name over the limit");
        t.queue(&names(&["a", "b"]));
        let mut out = Vec::new();
        assert!(t.take(&mut out));
        assert_eq!(out, vec![longest, "a".into(), "b".into()]);
        t.settled();
        let many: Vec<String> = (0..MAX_QUEUED + 10).map(|i| format!("n{i}")).collect();
        t.queue(&many);
        assert_eq!(t.dropped(), 1 + 10, "beyond the queue's bound");
        let mut out = Vec::new();
        assert!(t.take(&mut out));
        assert_eq!(out.len(), MAX_QUEUED);
        t.settled();
        t.queue(&names(&["c", "d"]));
        t.close();
        assert_eq!(t.dropped(), 11 + 2, "waiting at the close");
        t.queue(&names(&["e"]));
        assert_eq!(t.dropped(), 14, "after the close");
        assert!(!t.take(&mut Vec::new()), "closed: the thread ends");
    }

    #[test]
    fn the_largest_request_fits_a_frame() {
        let full: Vec<String> = (0..MAX_QUEUED)
            .map(|i| format!("{i:0width$}", width = MAX_NAME))
            .collect();
        let args = wire::activate_triggers(&full);
        let frame = wire::invoke_frame(u64::MAX, u32::MAX, u32::MAX, &args, true);
        assert!(frame.len() <= MAX_FRAME, "{} bytes", frame.len());
        // The names come back in order, each whole.
        let got: Vec<&str> = wire::fields(&args).map(|f| f.unwrap().1.as_str()).collect();
        assert_eq!(got, full.iter().map(String::as_str).collect::<Vec<_>>());
    }

    #[test]
    fn drain_waits_for_the_names_in_flight_and_no_longer_than_asked() {
        let t = std::sync::Arc::new(Triggers::default());
        t.queue(&names(&["a"]));
        let start = Instant::now();
        t.drain(Duration::from_millis(50));
        assert!(
            start.elapsed() >= Duration::from_millis(50),
            "nobody took it"
        );
        let t2 = t.clone();
        let sender = std::thread::spawn(move || {
            let mut out = Vec::new();
            while t2.take(&mut out) {
                std::thread::sleep(Duration::from_millis(20));
                out.clear();
                t2.settled();
            }
        });
        t.drain(Duration::from_secs(10));
        {
            let q = t.queue.lock();
            assert!(q.names.is_empty() && !q.in_flight);
        }
        t.close();
        sender.join().unwrap();
        assert_eq!(t.dropped(), 0);
    }
}
