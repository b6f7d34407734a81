//! Sessions: configuring, starting and stopping tracing, and finishing the
//! trace however the program ends (guard drop, `std::process::exit`, a panic
//! unwinding out of `main`).
//!
//! [`Builder`] holds the options ([`builder`]); this module starts and stops
//! the one session a process has and holds its public entry points (`start`,
//! `stop`, `flush`, `rotate_output`, `dump_to`). The rest, each one job:
//!
//! | file | job |
//! | --- | --- |
//! | `builder` | [`Builder`] and every option (`disk`: the disk bound and captures; `json`: Chrome JSON's), `SlowRule` |
//! | `start` | `Builder::start` as named steps: options checked, memory, output, formats, outputs, the flusher and producer spawned |
//! | `control` | what the handle and the flusher share: stop, flush requests and answers, the queue of requests (windows, captures) |
//! | `waker` | where the flusher sleeps, and what wakes it (the handle, a ring that grew, system tracing's connection thread) |
//! | `flusher` | the background thread: each pass as named steps (drain, spares, pool, losses, clock) |
//! | `file_output` | the session's own output (an `Output` of the seam in `crate::output`): its file, the flight recorder in front, windows, captures |
//! | `file` | a file's bytes: its encoder and sink (`target`), creation (`create`), a layout a kill leaves whole events of (`sink`), the hard limit (`guard`), the disk bound's parts (`parts`) |
//! | `window` | capture windows (`rotate_output`, `dump_to`): requests, and the flusher's side of swapping files (the disk bound's next part too) |
//! | `capture` | captures (`trigger`, slow spans, slow scopes): queued with the requests, copied from the flight recorder into files of their own |
//! | `recorder` | the flight recorder's store (overwrite mode) |
//! | `error` | [`Error`] |
//! | `signals` | the opt-in SIGINT/SIGTERM handling |
//! | `env` | the options environment variables set (`init_from_env`'s table), applied over a builder |
//!
//! The output seam (`crate::output`) and the totals ([`Stats`](crate::Stats),
//! `crate::stats`) are below this layer.
//!
//! Rules of this layer: it wires the recording path (`record`) to encoders
//! (`encode`) and sinks, and to system tracing (`system`), which knows
//! nothing of it (its connection thread gets a closure that wakes the
//! flusher); it reads rings only through the registry's drain API, and it
//! never formats bytes itself. Only the flusher thread calls outputs, and it
//! calls every output once per step: a new destination (a file that
//! rotates, a capture file) is one more `Output`, not another branch in the
//! flusher. No file of this folder imports one that imports it back:
//! `error`, `waker`, `recorder`, `signals`, `file::create` and `file::sink`
//! are leaves, `builder` imports only leaves; then `file`'s other files,
//! `env`, `control`, `capture`, `window`, `file_output`, `flusher`, this
//! module and `start` each import only leaves and files listed before them.

mod builder;
pub(crate) mod capture;
mod control;
mod env;
mod error;
pub(crate) mod file;
mod file_output;
pub(crate) mod flusher;
mod recorder;
pub(crate) mod signals;
mod start;
mod waker;
mod window;

use crate::stats::counters;
pub use crate::stats::Stats;
pub use builder::{builder, Builder, DisplayTimeUnit, Format, JsonScopes};
#[cfg(feature = "tracing")]
pub(crate) use builder::{Decide, SlowRule};
pub use error::Error;

use crate::record::callsite;
use crate::record::registry::REGISTRY;
use crate::session::control::Control;
use crate::session::file::Formats;
use crate::system::producer::Link;
use once_cell::sync::Lazy;
use parking_lot::Mutex;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Once};
use std::thread::JoinHandle;
use std::time::Duration;

struct Session {
    id: u64,
    control: Arc<Control>,
    handle: JoinHandle<(Stats, Option<std::io::Error>)>,
    path: Option<PathBuf>,
    /// How new files of capture windows are written.
    formats: Formats,
    /// System tracing's connection thread, if on.
    producer: Option<(Arc<Link>, JoinHandle<()>)>,
    /// `trigger` queues captures (a capture file pattern or system tracing).
    captures: bool,
    /// The span table's count of spans not stored when the session started.
    spans_not_stored_at_start: u64,
}

static SESSION: Lazy<Mutex<Option<Session>>> = Lazy::new(|| Mutex::new(None));
static NEXT_SESSION: AtomicU64 = AtomicU64::new(1);
/// Smallest process-wide budget [`Builder::buffer_bytes`] accepts.
const MIN_BUDGET_BYTES: u64 = 64 << 10;
static AT_EXIT: Once = Once::new();

/// Runs at `exit()` (including `std::process::exit` and the return from
/// `main`): finishes the trace of a session still recording.
extern "C" fn finish_at_exit() {
    let _ = std::panic::catch_unwind(finish_current_session);
}

/// Stops whatever session is recording (exit and signal paths).
fn finish_current_session() {
    let id = SESSION
        .try_lock_for(Duration::from_secs(2))
        .and_then(|s| s.as_ref().map(|s| s.id));
    if let Some(id) = id {
        if let Err(e) = stop_session(id) {
            eprintln!("ringtrace: finishing the trace failed: {e}");
        }
    }
}

/// Stops session `id` if it is the one recording; waits for the flusher to
/// write everything.
fn stop_session(id: u64) -> Result<Stats, Error> {
    let session = {
        let mut slot = SESSION.lock();
        match slot.as_ref() {
            Some(s) if s.id == id => slot.take().unwrap(),
            _ => return Ok(Stats::default()),
        }
    };
    callsite::set_active(false);
    // The sampler's last samples reach the flusher's last pass.
    crate::sampling::stop();
    session.control.request_stop();
    let joined = session.handle.join();
    let mut triggers_dropped = 0;
    if let Some((link, handle)) = session.producer {
        // After the flusher's last commits: now the connection may close.
        link.shut_down();
        let _ = handle.join();
        // Every trigger name is now sent or counted.
        triggers_dropped = link.triggers_dropped();
    }
    REGISTRY.close();
    match joined {
        Ok((mut stats, error)) => {
            stats.spans_not_stored =
                counters::spans_not_stored().saturating_sub(session.spans_not_stored_at_start);
            (stats.roots_kept, stats.roots_skipped) = counters::take_sampled_roots();
            stats.triggers_dropped = triggers_dropped;
            match error {
                None => Ok(stats),
                Some(e) => Err(Error::Incomplete {
                    path: session.path,
                    source: e,
                    stats: Box::new(stats),
                }),
            }
        }
        Err(_) => Err(Error::Flusher("the flusher thread panicked".into())),
    }
}

/// Keeps a session recording; dropping it stops the session and finishes
/// the trace file. Returned by [`Builder::start`].
///
/// Dropping the guard reports a failure to write the trace on stderr; call
/// [`TraceGuard::stop`] to get it as an [`Error`] instead, along with the
/// session's [`Stats`].
///
/// # Examples
///
/// ```
/// let path = std::env::temp_dir().join("ringtrace-doc-guard.pftrace");
/// let trace = ringtrace::builder().output(&path).start()?;
/// assert_eq!(trace.path(), Some(path.as_path()));
/// ringtrace::trace_instant!("tick");
/// let stats = trace.stop()?;
/// println!("{} events, {} bytes", stats.events_written, stats.bytes_written);
/// assert_eq!(stats.events_lost, 0);
/// # Ok::<(), ringtrace::Error>(())
/// ```
#[must_use = "the session stops when the guard is dropped; bind it with `let _trace = ...`"]
pub struct TraceGuard {
    id: u64,
    path: Option<PathBuf>,
    stopped: bool,
}

impl TraceGuard {
    /// The trace file being written, if the output is a file.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Stops the session, waits for the flusher to write everything,
    /// finishes the trace and returns its totals. If the session was already
    /// finished another way (a signal with
    /// [`Builder::finish_on_signals`]), the totals are all zero.
    ///
    /// # Errors
    ///
    /// [`Error::Incomplete`] if writing the session's own file failed at
    /// some point (the first error; the session's `Stats` are in it, and
    /// the file holds what was written before, cut at a whole event);
    /// [`Error::Flusher`] if the flusher thread panicked. A capture or a
    /// part of a bounded file that fails is not the session's failure: it is
    /// counted in the `Stats` ([`Stats::captures_failed`],
    /// [`Stats::parts_failed`]) and said on stderr when it happens.
    pub fn stop(mut self) -> Result<Stats, Error> {
        self.stopped = true;
        stop_session(self.id)
    }

    /// Writes out everything recorded so far (see [`flush`](crate::flush)).
    pub fn flush(&self) {
        flush();
    }
}

impl Drop for TraceGuard {
    fn drop(&mut self) {
        if !self.stopped {
            if let Err(e) = stop_session(self.id) {
                eprintln!("ringtrace: {e}");
            }
        }
    }
}

/// Drains every thread's ring to the output now and waits until it is written
/// (at most 10 s). In flight-recorder mode this is the dump. No-op without a
/// session.
///
/// # Examples
///
/// ```
/// let buf = ringtrace::MemoryBuffer::new();
/// let _trace = ringtrace::builder().writer(buf.clone()).start()?;
/// ringtrace::trace_instant!("before the dump");
/// ringtrace::flush();
/// assert!(!buf.contents().is_empty()); // written while still recording
/// # Ok::<(), ringtrace::Error>(())
/// ```
pub fn flush() {
    let control = match SESSION.lock().as_ref() {
        Some(s) => s.control.clone(),
        None => return,
    };
    control.flush(Duration::from_secs(10));
}

/// Finishes the session's current file and goes on recording into a new
/// one at `path` (format from its extension), with no gap and no event in
/// two files: every event recorded before the call is in the finished file
/// or the new one, and every event after it is in the new one (events lost
/// are counted and marked, as always). Can be called from any thread; the
/// session's [`Stats`] at stop cover every file.
///
/// In a session without a file (system tracing only), this starts one.
///
/// Returns the totals of the finished file. A scope open across the switch
/// has its begin in one file and its end in the other: neither file shows
/// it as a slice (the end is counted in
/// [`unmatched_ends`](Stats::unmatched_ends)).
///
/// # Examples
///
/// ```
/// let dir = std::env::temp_dir();
/// let _trace = ringtrace::builder().output(dir.join("ringtrace-doc-part1.pftrace")).start()?;
/// ringtrace::trace_instant!("in part 1");
/// let part1 = ringtrace::rotate_output(dir.join("ringtrace-doc-part2.json"))?;
/// assert_eq!(part1.events_written, 1); // part1 is complete now
/// ringtrace::trace_instant!("in part 2");
/// # Ok::<(), ringtrace::Error>(())
/// ```
///
/// # Errors
///
/// [`Error::NotRecording`] without a session (or if it stops first),
/// [`Error::UnknownFormat`] / [`Error::Io`] if the new file cannot be
/// created (the session goes on in the old one), [`Error::Io`] if writing
/// the finished file failed.
pub fn rotate_output(path: impl AsRef<Path>) -> Result<Stats, Error> {
    capture_window(path.as_ref(), None)
}

/// Flight-recorder mode: writes what the rings hold now, then what is
/// recorded during `after`, into a new complete file at `path` (format from
/// its extension), while recording goes on; returns when the file is
/// finished (after `after`), with its totals. Call it again for another
/// file: each holds the events recorded since the previous dump (as much of
/// them as the rings kept). The events a dump writes are taken out of the
/// rings, so the session's own output (written on [`flush`]
/// and at stop) does not hold them again.
///
/// Events the rings overwrote before the dump are counted and marked at the
/// start of the file, as in every flight-recorder output.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// let dir = std::env::temp_dir();
/// let _trace = ringtrace::builder()
///     .output(dir.join("ringtrace-doc-recorder.pftrace"))
///     .overwrite(true)
///     .start()?;
/// ringtrace::trace_instant!("before the incident");
/// let dump = ringtrace::dump_to(dir.join("ringtrace-doc-incident.pftrace"), Duration::from_millis(20))?;
/// assert!(dump.events_written >= 1);
/// # Ok::<(), ringtrace::Error>(())
/// ```
///
/// # Errors
///
/// [`Error::NotRecording`] without a session (or if it stops first),
/// [`Error::InvalidConfig`] if the session is not in flight-recorder mode
/// (use [`rotate_output`] there), [`Error::UnknownFormat`] / [`Error::Io`] if
/// the file cannot be created, [`Error::Io`] if writing it failed.
pub fn dump_to(path: impl AsRef<Path>, after: Duration) -> Result<Stats, Error> {
    capture_window(path.as_ref(), Some(after))
}

/// Asks the session's flusher for a capture window (`capture`).
fn capture_window(path: &Path, after: Option<Duration>) -> Result<Stats, Error> {
    let (control, formats) = {
        let slot = SESSION.lock();
        let s = slot.as_ref().ok_or(Error::NotRecording)?;
        (s.control.clone(), s.formats.clone())
    };
    window::ask(&control.requests, &control.waker, &formats, path, after)
}

/// Asks for a capture named `name` of the window ending now (from
/// [`capture_before`](Builder::capture_before) ago): in flight-recorder mode with
/// [`capture_to`](Builder::capture_to) set, the flusher writes it into a new file; with
/// system tracing, it also sends `ActivateTriggers` with `name` to the
/// tracing service (also when the capture's file is suppressed: the service
/// rate-limits triggers itself). Returns whether the capture was queued:
/// `false` without a session, or if 16 are already waiting for the flusher
/// (counted in [`Stats::captures_suppressed`](crate::Stats)). The calling
/// thread only queues it and wakes the flusher, which never waits on the
/// service for it: a thread of system tracing's connection sends the
/// names. A name longer than 256 bytes is not sent (refused, not
/// shortened); nor are names beyond 64 waiting to be sent, or those
/// without a connection to the service: each is counted in
/// [`Stats::triggers_dropped`](crate::Stats::triggers_dropped) and the
/// first said on stderr (see the [system tracing guide](crate::guide::system_tracing)).
///
/// # Examples
///
/// ```
/// let dir = std::env::temp_dir();
/// let trace = ringtrace::builder()
///     .output(dir.join("ringtrace-doc-trigger.pftrace"))
///     .overwrite(true)
///     .capture_to(dir.join("ringtrace-doc-capture-{n}.pftrace"))
///     .start()?;
/// ringtrace::trace_instant!("before the incident");
/// ringtrace::trigger("incident");
/// let stats = trace.stop()?;
/// assert_eq!(stats.captures_fired, 1);
/// # Ok::<(), ringtrace::Error>(())
/// ```
pub fn trigger(name: &str) -> bool {
    let now = crate::record::clock::ticks();
    queue_capture(capture::Capture {
        name: name.to_owned(),
        start: now,
        end: now,
    })
}

/// Queues `capture` for the session's flusher (`trigger`, a slow span);
/// false without a session that takes captures.
pub(crate) fn queue_capture(capture: capture::Capture) -> bool {
    let control = match SESSION.lock().as_ref() {
        Some(s) if s.captures => s.control.clone(),
        _ => return false,
    };
    capture::queue(&control.requests, &control.waker, capture)
}

/// Slow-span captures set together with whole-request sampling: a request
/// not kept is not recorded, so it is never captured, however slow. Said
/// once on stderr at build (`ratio`: the sampling ratio, `hook`: a
/// decision hook or root patterns decide too), so that a service missing
/// most of its slow requests in captures knows why.
#[cfg_attr(not(feature = "tracing"), allow(dead_code))] // the tracing finishers'
pub(crate) fn warn_captures_with_sampling(slow_rule: bool, ratio: Option<f64>, hook: bool) {
    let ratio = ratio.unwrap_or(1.0);
    if slow_rule && (ratio < 1.0 || hook) {
        eprintln!(
            "ringtrace: capture_slow is set with whole-request sampling (ratio {ratio}{}): \
             a request sampling does not keep is not recorded, so it is never captured, \
             however slow (Stats::roots_skipped counts them); to capture every slow \
             request, keep every root (sample_ratio(1.0))",
            if hook { ", roots or a hook" } else { "" }
        );
    }
}

/// Whether a session is recording.
///
/// # Examples
///
/// ```
/// assert!(!ringtrace::is_recording());
/// let trace = ringtrace::builder().writer(ringtrace::MemoryBuffer::new()).start()?;
/// assert!(ringtrace::is_recording());
/// drop(trace);
/// assert!(!ringtrace::is_recording());
/// # Ok::<(), ringtrace::Error>(())
/// ```
pub fn is_recording() -> bool {
    SESSION.lock().is_some()
}

/// Starts a session configured by environment variables, or does nothing if
/// `RINGTRACE_OUTPUT` is unset or empty (then no other variable is read):
/// `builder().from_env()?.map(Builder::start)`. To start it with options
/// of your own under the environment's, or as a `tracing` layer or
/// subscriber, use [`Builder::from_env`] and the finisher you need. The
/// variables:
///
/// | variable | meaning | allowed |
/// | --- | --- | --- |
/// | `RINGTRACE_OUTPUT` | output path; the extension picks the format; `system`: system tracing only ([`Builder::system_tracing`]) | any path (any bytes) |
/// | `RINGTRACE_SYSTEM` | system tracing as well as the file | a boolean |
/// | `RINGTRACE_CATEGORIES` | patterns to enable (default `*`); `-pattern` disables | comma-separated `name`, `prefix*` or `*` (`*` only at the end); empty: none enabled |
/// | `RINGTRACE_BUFFER_BYTES` | memory of all rings of the process ([`Builder::buffer_bytes`]) | 65536 (64 KiB) to 18446744073709551615 |
/// | `RINGTRACE_BUFFER_BYTES_PER_THREAD` | largest ring of one thread ([`Builder::buffer_bytes_per_thread`], rounded up to a power of two of at least 512) | 0 to 1099511627776 (1 TiB) |
/// | `RINGTRACE_OVERWRITE` | flight-recorder mode ([`Builder::overwrite`]) | a boolean |
/// | `RINGTRACE_MAX_FILE_BYTES` | the file in parts of about this size ([`Builder::max_file_bytes`]) | 65536 (64 KiB, the smallest part) to 18446744073709551615 |
/// | `RINGTRACE_MAX_FILES` | parts kept on disk ([`Builder::max_files`], default 4) | 1 to 18446744073709551615; `1`: one file, a hard limit, events past it dropped and counted |
/// | `RINGTRACE_CPU_SAMPLING` | CPU stack samples per second of each thread ([`Builder::cpu_sampling`]) | 0 (off) to 4294967295; the kernel's rate limit bounds it further |
/// | `RINGTRACE_CLOCK` | `boottime`: timestamps from `CLOCK_BOOTTIME` rather than the CPU's time-stamp counter | `boottime` |
/// | `RINGTRACE_SAMPLE`, `RINGTRACE_SAMPLE_ROOTS` | whole-request sampling of `tracing` spans ([`Builder::sample_ratio`], [`Builder::sample_roots`]; feature `tracing`): read by [`Builder::from_env`], in effect for [`Builder::layer`] and [`Builder::subscriber`] | a ratio from 0 to 1; patterns (`name`, `prefix*` or `*`) |
/// | `RINGTRACE_SPAN_SLICES` | how a `tracing` span is drawn ([`Builder::span_slices`]; feature `tracing`): read by [`Builder::from_env`] | `entered` (a slice per enter) or `lifetime` (one slice, creation to close) |
///
/// A boolean is `1`, `true`, `yes` or `on`, or `0`, `false`, `no` or `off`
/// (any case). Numbers are whole decimal numbers. Values are trimmed, and
/// a value that is empty or only spaces is as if unset, except in the
/// lists (`RINGTRACE_CATEGORIES`). With system tracing on,
/// `PERFETTO_PRODUCER_SOCK_NAME` (the service's socket) must be text too.
///
/// # Examples
///
/// ```
/// // With RINGTRACE_OUTPUT unset this records nothing and returns Ok(None).
/// let _trace = ringtrace::init_from_env()?;
/// # Ok::<(), ringtrace::Error>(())
/// ```
///
/// # Errors
///
/// [`Error::InvalidConfig`], naming the variable and what it allows, for
/// any bad value of the table: a value that is not UTF-8 (but the path of
/// `RINGTRACE_OUTPUT`), a number that is not one (`RINGTRACE_X=v is not a
/// number`, hexadecimal and exponents included) or is out of its range
/// (`RINGTRACE_X=v is out of range: at most N`, or at least: 0 for
/// `RINGTRACE_MAX_FILES` included), a boolean or `RINGTRACE_CLOCK` that is
/// none of its words, a malformed pattern. Then as [`Builder::start`].
pub fn init_from_env() -> Result<Option<TraceGuard>, Error> {
    builder().from_env()?.map(Builder::start).transpose()
}

#[cfg(test)]
pub(crate) mod tests;
