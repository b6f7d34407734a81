//! [`Stats`]: the totals a session reports at stop, and a capture window for
//! the file it finished. Every loss is counted here; `counters`: what the
//! ways in count process-wide for it.

#![forbid(unsafe_code)]

/// Totals of a finished session, returned by
/// [`TraceGuard::stop`](crate::TraceGuard::stop).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Trace events written: the events the file holds, in its format's
    /// units. Perfetto writes a scope as two (its begin and its end, each a
    /// `TrackEvent`), Chrome JSON as one (`X`; a `B` and an `E` with
    /// [`JsonScopes::BeginEnd`](crate::JsonScopes::BeginEnd)); an instant, a
    /// counter value or a log message is one in both. Track and thread
    /// descriptions (JSON `M` events) are not counted. A reader that pairs
    /// begins with ends (`ringtrace inspect`) counts slices instead.
    pub events_written: u64,
    /// Events lost, counted as they were recorded (a scope's begin and its
    /// end are one each, as in Perfetto): dropped because a ring was full,
    /// overwritten in flight-recorder mode, too large for a ring, or
    /// recorded while their thread was being torn down. Each loss is also
    /// marked in the trace.
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
    /// `tracing` spans not recorded during the session because more spans
    /// were alive at once than ringtrace's span table holds (over 10^9; the
    /// layer's and the subscriber's spans together). Such spans stay valid
    /// `tracing` spans; nothing of them is recorded. 0 without the `tracing`
    /// feature, and in the `Stats` of a finished capture window.
    pub spans_not_stored: u64,
    /// CPU stack samples taken ([`Builder::cpu_sampling`](crate::Builder::cpu_sampling)):
    /// all written, but in flight-recorder mode, where
    /// [`cpu_samples_aged_out`](Self::cpu_samples_aged_out) of them were let go.
    pub cpu_samples: u64,
    /// CPU samples lost: records the kernel dropped (its ring was full),
    /// samples beyond what waits for the flusher (both also written to the
    /// trace, Perfetto: `kernel_records_lost`), and samples Perfetto's
    /// tracing service had no room for (system tracing).
    pub cpu_samples_lost: u64,
    /// CPU samples a flight recorder
    /// ([`overwrite`](crate::Builder::overwrite)) let go before a write-out:
    /// older than the oldest record it held, or beyond its samples' memory.
    /// Not losses, as the records it forgets.
    pub cpu_samples_aged_out: u64,
    /// Of [`cpu_samples_lost`](Self::cpu_samples_lost), samples dropped
    /// because their stacks needed new entries (mappings, names, frames,
    /// call stacks) in tables whose memory was spent: the memory budget
    /// ([`buffer_bytes`](crate::Builder::buffer_bytes)), or the tables'
    /// cap of 16 MiB. Samples of stacks seen before are still kept.
    pub cpu_samples_no_memory: u64,
    /// Files mapped executable (the program, its libraries) left unread
    /// because the tables read from the files reached their cap of
    /// 128 MiB: by the sampler (symbols and unwind tables: stacks are
    /// unwound through them by frame pointers only), or for naming frames
    /// (symbols with their debug files': their frames have no names); and
    /// DWARF left unread for that cap (counted at a bound of its tables:
    /// the file's frames named from its symbols, without inlined frames).
    pub cpu_files_no_memory: u64,
    /// Frames left without a name because the sampling tables' memory was
    /// spent (the memory budget, or their cap) when the flusher named them:
    /// a name is stored within the memory the tables have already taken,
    /// and past that the frame keeps its address only.
    pub cpu_frames_unnamed: u64,
    /// CPU samples whose stack unwinding stopped before the thread's first
    /// frame (the frames found are kept; Perfetto: `unwind_error`).
    pub cpu_stacks_truncated: u64,
    /// Threads that were sampled.
    pub cpu_threads_sampled: u64,
    /// Threads that could not be sampled (memory budget, perf refused).
    pub cpu_threads_unsampled: u64,
    /// The rate CPU samples were asked of the kernel at, per CPU-second of
    /// each thread: [`Builder::cpu_sampling`](crate::Builder::cpu_sampling)'s,
    /// or the kernel's limit (`kernel.perf_event_max_sample_rate`) where
    /// that was asked above it (said once on stderr). 0 with sampling off
    /// or not possible. The timer fallback's rate is also bounded by the
    /// kernel's tick.
    pub cpu_sampling_hz: u32,
    /// Root spans kept by whole-request sampling
    /// ([`Builder::sample_ratio`](crate::Builder::sample_ratio)),
    /// with everything under them; 0 without sampling.
    pub roots_kept: u64,
    /// Root spans not kept by whole-request sampling, with everything under
    /// them: not recorded, and not losses.
    pub roots_skipped: u64,
    /// Parts of the session's file removed to keep it within
    /// [`Builder::max_file_bytes`](crate::Builder::max_file_bytes) times
    /// [`max_files`](crate::Builder::max_files).
    pub files_removed: u64,
    /// Events the rings gave up that are in no file because of the disk:
    /// the session's file reached its hard limit
    /// ([`max_file_bytes`](crate::Builder::max_file_bytes) with
    /// [`max_files`](crate::Builder::max_files)`(1)`), a write to one of
    /// the session's files failed (a full disk, a size limit: the events
    /// of that write, and every later one of that file), or the disk bound
    /// had no next part to go on in (see
    /// [`parts_failed`](Stats::parts_failed)). Counted as
    /// [`events_lost`](Stats::events_lost) counts them (a scope's begin and
    /// end are one each) but apart from them: the rings lost nothing. The
    /// trace marks them where it still can (an events-lost instant on the
    /// process track with `reason = "disk limit"` where the drop began, and
    /// one with the rest at the file's end, or at the start of the next
    /// part when the file's own writes failed).
    pub events_dropped_disk: u64,
    /// Parts of the session's file
    /// ([`max_file_bytes`](crate::Builder::max_file_bytes)) that could not
    /// be made (the next part's name: a permission, a full disk, too many
    /// open files) or written whole (a write failed: the part keeps what
    /// was written before, cut at a whole event, and the next part takes
    /// over). Each is said on stderr when it happens (once for a run of
    /// failures); the events they could not hold are in
    /// [`events_dropped_disk`](Stats::events_dropped_disk). A part's
    /// failure is not the session's: [`TraceGuard::stop`](crate::TraceGuard::stop) still returns `Ok`.
    pub parts_failed: u64,
    /// The kind of the first error making, writing or removing a part
    /// (`None`: none failed). The whole error was said on stderr.
    pub first_part_error: Option<std::io::ErrorKind>,
    /// Captures written ([`trigger`](crate::trigger), slow spans).
    pub captures_fired: u64,
    /// Captures not written: within
    /// [`capture_interval`](crate::Builder::capture_interval) of the last
    /// one, or too many queued at once.
    pub captures_suppressed: u64,
    /// Captures whose file could not be made or written whole (a missing
    /// directory, a name too long, a full disk): each said on stderr when
    /// it happens; the session and its own file go on.
    pub captures_failed: u64,
    /// The kind of the first capture's error (`None`: none failed).
    pub first_capture_error: Option<std::io::ErrorKind>,
    /// Passes the flusher made (it wakes every few milliseconds).
    pub flusher_passes: u64,
    /// Threads' rings the flusher looked at, summed over its passes. A ring
    /// with nothing recorded since its last drain is not looked at (but for
    /// a few each pass, in turn), so threads that recorded and wait cost a
    /// pass nothing; every ring is read on `flush()`, captures and stop.
    pub rings_visited: u64,
    /// Trigger names ([`trigger`](crate::trigger), slow spans) that system
    /// tracing did not send to Perfetto's tracing service: longer than 256
    /// bytes (refused, not shortened), more than 64 waiting to be sent, no
    /// connection at the time, a send that failed, or the session stopping
    /// first. Said once on stderr. 0 without system tracing.
    pub triggers_dropped: u64,
    /// Spans the OTLP exporter sent and the collector took (feature `otlp`,
    /// [`Builder::otlp`](crate::Builder::otlp); 0 without it).
    pub otlp_spans_exported: u64,
    /// Spans the OTLP exporter did not deliver: its queue full (a slow or
    /// dead collector), the session's memory budget used up, a batch given
    /// up after its retries or refused (a 4xx other than 429), spans the
    /// collector rejected (partial success), or not sent by the stop's
    /// deadline. Said once on stderr.
    pub otlp_spans_dropped: u64,
    /// Span events the OTLP exporter did not deliver: dropped with their
    /// spans' batches, or whose span never came (still open at the stop).
    pub otlp_events_dropped: u64,
}

/// What the ways in count process-wide, read by a session at its start and
/// stop: written by `tracing` (above), read by `session` (beside it), so
/// neither imports the other for them.
pub(crate) mod counters {
    use std::sync::atomic::{AtomicU64, Ordering};

    /// `tracing` spans the span table had no room for, so far.
    pub(crate) static SPANS_NOT_STORED: AtomicU64 = AtomicU64::new(0);

    /// Root counts in shards of their own cache lines: threads deciding
    /// roots at once do not share a line.
    const SHARDS: usize = 16;

    #[repr(align(128))]
    struct Counts {
        kept: AtomicU64,
        skipped: AtomicU64,
    }

    static COUNTS: [Counts; SHARDS] = [const {
        Counts {
            kept: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
        }
    }; SHARDS];

    /// Counts a root sampling kept or skipped, in the shard of the calling
    /// thread (`shard`, any number: it is taken modulo the shards).
    #[inline]
    #[cfg_attr(not(feature = "tracing"), allow(dead_code))] // sampling's
    pub(crate) fn count_root(shard: usize, keep: bool) {
        let c = &COUNTS[shard % SHARDS];
        let n = if keep { &c.kept } else { &c.skipped };
        n.fetch_add(1, Ordering::Relaxed);
    }

    fn totals() -> (u64, u64) {
        COUNTS.iter().fold((0, 0), |(k, s), c| {
            (
                k + c.kept.load(Ordering::Relaxed),
                s + c.skipped.load(Ordering::Relaxed),
            )
        })
    }

    /// The totals when they were last taken (a sampled session's start, a
    /// session's stop).
    static BASE: std::sync::Mutex<(u64, u64)> = std::sync::Mutex::new((0, 0));

    /// Roots kept and skipped since the last call (a sampled session's
    /// start and every session's stop take them, so no session counts
    /// another's).
    pub(crate) fn take_sampled_roots() -> (u64, u64) {
        let (k, s) = totals();
        let base = std::mem::replace(&mut *BASE.lock().unwrap_or_else(|e| e.into_inner()), (k, s));
        (k.saturating_sub(base.0), s.saturating_sub(base.1))
    }

    /// `tracing` spans not stored so far, process-wide.
    pub(crate) fn spans_not_stored() -> u64 {
        SPANS_NOT_STORED.load(Ordering::Relaxed)
    }
}
