//! [`Stats`]: the totals a session reports at stop, and a capture window for
//! the file it finished. Every loss is counted here.

#![forbid(unsafe_code)]

/// Totals of a finished session, returned by
/// [`TraceGuard::stop`](crate::TraceGuard::stop).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Events written to the trace.
    pub events_written: u64,
    /// Events lost: dropped because a ring was full, overwritten in
    /// flight-recorder mode, too large for a ring, or recorded while their
    /// thread was being torn down. Each loss is also marked in the trace.
    pub events_lost: u64,
    /// Of those, events too large for a ring.
    pub events_oversized: u64,
    /// Of those, events of threads that had no ring because the memory
    /// budget ([`Builder::buffer_bytes`](crate::Builder::buffer_bytes)) was
    /// used up. Marked on the process track (an events-lost instant with
    /// `reason = "no memory"`), except those of an event racing with the
    /// session's stop.
    pub events_no_memory: u64,
    /// Scope ends that matched no recorded begin (the begin was lost, or the
    /// scope began before the session) and were left out.
    pub unmatched_ends: u64,
    /// Threads that recorded at least one event.
    pub threads: u64,
    /// Bytes written to the output.
    pub bytes_written: u64,
    /// Most memory the rings and their threads' bookkeeping held at once
    /// during the session (at most
    /// [`buffer_bytes`](crate::Builder::buffer_bytes)).
    pub buffer_bytes_peak: u64,
}
