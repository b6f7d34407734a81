//! Sessions: configuring, starting and stopping tracing, and finishing the
//! trace however the program ends (guard drop, `std::process::exit`, a panic
//! unwinding out of `main`).

//!
//! [`Builder`] holds the options ([`builder`]), this module starts and stops
//! the one session a process has, [`flusher`] is its background thread,
//! [`sink`] where the bytes go, [`signals`] the opt-in SIGINT/SIGTERM handling,
//! [`capture`] the files cut out of a running session (`rotate_output`,
//! `dump_to`).
//!
//! Rules of this layer: it wires the recording path (`record`) to an encoder
//! (`encode`) and a sink; it reads rings only through the registry's drain
//! API, and it never formats bytes itself.

mod builder;
pub(crate) mod capture;
mod error;
pub(crate) mod flusher;
mod recorder;
pub(crate) mod signals;
pub(crate) mod sink;

pub(crate) use builder::Output;
pub use builder::{builder, Builder, DisplayTimeUnit, Format, JsonScopes};
pub use capture::{dump_to, rotate_output};
pub use error::Error;

use crate::encode::perfetto::PerfettoOptions;
use crate::encode::ProcessInfo;
use crate::record::callsite::{self, CategoryFilter};
use crate::record::clock::Calibration;
use crate::record::registry::{RingConfig, REGISTRY};
use crate::session::flusher::{Flusher, Shared, Stats};
use crate::session::sink::{Sink, Units};
use crate::system::feed::SystemFeed;
use crate::system::producer::Link;
use once_cell::sync::Lazy;
use parking_lot::Mutex;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Once};
use std::thread::JoinHandle;
use std::time::Duration;

impl Builder {
    /// Starts recording: creates the output (a file already at the path is
    /// truncated, which for a big one takes the file system some
    /// milliseconds), calibrates the clock (it spins 2 ms where events are
    /// stamped with the TSC), starts the flusher thread (and returns once
    /// that thread has written the trace's first bytes and waits for work,
    /// typically within a fraction of a millisecond, or after 250 ms at
    /// most: a writer that blocks does not hold `start` up) and replaces
    /// the process-wide category filter with this builder's. The session is
    /// process-global and records until the returned guard is dropped or
    /// [stopped](TraceGuard::stop); the trace is also finished at `exit`
    /// (including `std::process::exit` and the return from `main`).
    ///
    /// # Examples
    ///
    /// ```
    /// let path = std::env::temp_dir().join("ringtrace-doc-start.json");
    /// let trace = ringtrace::builder().output(&path).start()?;
    /// assert!(ringtrace::is_recording());
    /// // A second session cannot start while this one records.
    /// assert!(matches!(
    ///     ringtrace::builder().output(&path).start(),
    ///     Err(ringtrace::Error::AlreadyStarted)
    /// ));
    /// trace.stop()?;
    /// # Ok::<(), ringtrace::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::AlreadyStarted`] if a session is recording,
    /// [`Error::Io`] if the output file cannot be created (or the signal
    /// handlers of [`finish_on_signals`](Builder::finish_on_signals) cannot
    /// be installed),
    /// [`Error::UnknownFormat`] if its extension names no known format,
    /// [`Error::NoOutput`] without an output,
    /// [`Error::InvalidConfig`] for a top-level JSON key that
    /// [`json_metadata`](Builder::json_metadata) cannot set or a
    /// [`buffer_bytes_per_thread`](Builder::buffer_bytes_per_thread) over
    /// 1 TiB,
    /// [`Error::Flusher`] if the flusher thread cannot be spawned.
    pub fn start(self) -> Result<TraceGuard, Error> {
        if let Some(key) = &self.json_key_error {
            return Err(Error::InvalidConfig(format!(
                "json_metadata: the top-level key {key:?} is reserved or given twice"
            )));
        }
        let mut slot = SESSION.lock();
        if slot.is_some() {
            return Err(Error::AlreadyStarted);
        }
        if self.buffer_bytes > (1usize << 40) {
            return Err(Error::InvalidConfig(format!(
                "buffer_bytes_per_thread {} is too large",
                self.buffer_bytes
            )));
        }
        if self.budget_bytes < MIN_BUDGET_BYTES {
            return Err(Error::InvalidConfig(format!(
                "buffer_bytes {} is less than {MIN_BUDGET_BYTES}",
                self.budget_bytes
            )));
        }
        let (sink, format, path) = match self.output {
            Output::None if self.system_tracing => (None, Format::Perfetto, None),
            Output::None => return Err(Error::NoOutput),
            Output::Writer(w) => (
                Some(Sink::new(w, "the configured writer".into())),
                self.format.unwrap_or(Format::Perfetto),
                None,
            ),
            Output::Path(p) => {
                let format = match self.format.or_else(|| Format::from_path(&p)) {
                    Some(f) => f,
                    None => return Err(Error::UnknownFormat(p)),
                };
                let file = std::fs::File::create(&p).map_err(|e| Error::Io {
                    path: Some(p.clone()),
                    source: e,
                })?;
                let units = Units::of(format);
                (
                    Some(Sink::file(file, p.display().to_string(), units)),
                    format,
                    Some(p),
                )
            }
        };
        let formats = capture::Formats {
            perfetto: PerfettoOptions {
                source_locations: self.source_locations,
                omit_needs_flag: self.compact_packets,
            },
            // CPU samples live in the object form's `samples` (`sampling`).
            json: {
                let mut json = self.json;
                json.object |= self.cpu_sampling.hz > 0;
                json
            },
            compressed_packets: self.compressed_packets,
            overwrite: self.overwrite,
        };
        let file_output = sink.is_some();
        let output = sink.map(|mut sink| {
            let encoder = formats.encoder(format);
            if self.compressed_packets {
                sink.compress_perfetto_packets();
            }
            (encoder, sink)
        });
        if self.finish_on_signals {
            crate::session::signals::install(finish_current_session).map_err(|e| Error::Io {
                path: None,
                source: e,
            })?;
        }
        let cal = Calibration::start(false);
        let id = NEXT_SESSION.fetch_add(1, Ordering::Relaxed);
        REGISTRY.open(
            id,
            RingConfig {
                bytes: self.buffer_bytes,
                budget_bytes: self.budget_bytes,
                overwrite: self.overwrite,
                thread_time: self.thread_time,
            },
        );
        // A flight recorder keeps the process's most recent records in one
        // store of half the budget; the rings share the other half.
        let recorder_bytes = if self.overwrite && output.is_some() {
            let want = self.budget_bytes / 2;
            if REGISTRY.budget.try_take(want) {
                want
            } else {
                0 // what earlier sessions' rings still hold: the smallest store
            }
        } else {
            0
        };
        // The pool's stock: one mapped-in segment of each size a thread's
        // ring grows through, up to 1 MiB, within an eighth of the budget
        // (`record::budget`). Here, not on the flusher: a thread that records
        // at once grows through its first sizes within microseconds, before
        // the flusher runs, and would map them in itself (~340 us of page
        // faults per MiB in 4 KiB pages). Costs start() that time, once.
        // Not with system tracing only: call sites stay off until a tracing
        // session starts, maybe never; the flusher stocks after a growth.
        if file_output {
            REGISTRY.budget.pool().stock();
        }
        let shared = Arc::new(Shared::new());
        let process = {
            let mut p = ProcessInfo::current(self.process_name);
            p.labels = self.process_labels;
            p.sort_index = self.process_sort_index;
            p
        };
        let link = self.system_tracing.then(|| {
            Link::new(
                crate::system::transport::default_address(),
                process.name.clone(),
                shared.clone(),
            )
        });
        let system = link.as_ref().map(|link| {
            SystemFeed::new(
                link.clone(),
                PerfettoOptions {
                    source_locations: self.source_locations,
                    omit_needs_flag: false,
                },
            )
        });
        let flusher = Flusher {
            shared: shared.clone(),
            output,
            system,
            cal,
            process,
            overwrite: self.overwrite,
            recorder_bytes,
            interval: self.flush_interval.max(Duration::from_millis(1)),
            windows: capture::Windows::new(path.clone()),
            growth_at_start: crate::record::ring::GROWTH.count(),
        };
        #[cfg(test)]
        if tests::FAIL_FLUSHER_SPAWN.swap(false, Ordering::Relaxed) {
            drop(flusher);
            return Err(abandon_start(recorder_bytes, "a test's failure"));
        }
        let handle = std::thread::Builder::new()
            .name("ringtrace-flusher".into())
            .spawn(move || flusher.run())
            .map_err(|e| abandon_start(recorder_bytes, e))?;
        let producer = match link {
            Some(link) => {
                let l = link.clone();
                let spawned = std::thread::Builder::new()
                    .name("ringtrace-producer".into())
                    .spawn(move || crate::system::producer::run(l));
                match spawned {
                    Ok(h) => Some((link, h)),
                    Err(e) => {
                        shared.stop.store(true, Ordering::Release);
                        shared.wake();
                        let _ = handle.join();
                        REGISTRY.close();
                        return Err(Error::Flusher(format!(
                            "cannot start the system tracing thread: {e}"
                        )));
                    }
                }
            }
            None => None,
        };
        shared.wait_parked();
        // Without a file, only system tracing sessions turn call sites on.
        callsite::replace_filter(if file_output {
            self.filter
        } else {
            CategoryFilter::none()
        });
        callsite::set_active(true);
        // CPU sampling (`sampling`), off unless asked for.
        crate::sampling::start(self.cpu_sampling, self.overwrite);
        *slot = Some(Session {
            id,
            shared,
            handle,
            path: path.clone(),
            formats,
            producer,
        });
        drop(slot);
        AT_EXIT.call_once(|| {
            // SAFETY: `finish_at_exit` is an `extern "C" fn()` that never
            // unwinds (it catches panics); registering it has no other
            // precondition. A failure to register (non-zero) only loses the
            // exit-path guarantee, which `start` cannot fix, so it is ignored.
            unsafe {
                libc::atexit(finish_at_exit);
            }
        });
        Ok(TraceGuard {
            id,
            path,
            stopped: false,
        })
    }
}

/// Undoes a start whose flusher could not be spawned: the rings and the
/// pool (`Registry::close`) and the flight recorder's store, which the
/// flusher would have given back when it ended.
fn abandon_start(recorder_bytes: u64, e: impl std::fmt::Display) -> Error {
    REGISTRY.close();
    REGISTRY.budget.give_back(recorder_bytes);
    Error::Flusher(format!("cannot start the flusher thread: {e}"))
}

struct Session {
    id: u64,
    shared: Arc<Shared>,
    handle: JoinHandle<(Stats, Option<std::io::Error>)>,
    path: Option<PathBuf>,
    /// How new files of capture windows are written.
    formats: capture::Formats,
    /// System tracing's connection thread, if on.
    producer: Option<(Arc<Link>, JoinHandle<()>)>,
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
    session
        .shared
        .stop
        .store(true, std::sync::atomic::Ordering::Release);
    session.shared.wake();
    let joined = session.handle.join();
    if let Some((link, handle)) = session.producer {
        // After the flusher's last commits: now the connection may close.
        link.shut_down();
        let _ = handle.join();
    }
    REGISTRY.close();
    match joined {
        Ok((stats, None)) => Ok(stats),
        Ok((_, Some(e))) => Err(Error::Io {
            path: session.path,
            source: e,
        }),
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
    /// [`Error::Io`] if writing the trace failed at any point (the first error);
    /// [`Error::Flusher`] if the flusher thread panicked.
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
    let shared = match SESSION.lock().as_ref() {
        Some(s) => s.shared.clone(),
        None => return,
    };
    let want = shared.flush_requested.fetch_add(1, Ordering::AcqRel) + 1;
    shared.wake();
    let mut done = shared.flush_done.lock();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while *done < want {
        if shared.flush_cv.wait_until(&mut done, deadline).timed_out() {
            break;
        }
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
/// `RINGTRACE_OUTPUT` is unset or empty:
///
/// | variable | meaning |
/// | --- | --- |
/// | `RINGTRACE_OUTPUT` | output path; the extension picks the format; `system`: system tracing only ([`Builder::system_tracing`]) |
/// | `RINGTRACE_SYSTEM` | `1`, `true`, `yes` or `on`: system tracing as well as the file |
/// | `RINGTRACE_CATEGORIES` | comma-separated patterns to enable (default `*`); `-name` disables |
/// | `RINGTRACE_BUFFER_BYTES` | memory of all rings of the process ([`Builder::buffer_bytes`]) |
/// | `RINGTRACE_BUFFER_BYTES_PER_THREAD` | largest ring of one thread ([`Builder::buffer_bytes_per_thread`]) |
/// | `RINGTRACE_OVERWRITE` | `1`, `true`, `yes` or `on`: flight-recorder mode |
/// | `RINGTRACE_CPU_SAMPLING` | CPU stack samples per second of each thread ([`Builder::cpu_sampling`]) |
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
/// As [`Builder::start`], and [`Error::InvalidConfig`] if
/// `RINGTRACE_BUFFER_BYTES` or `RINGTRACE_BUFFER_BYTES_PER_THREAD` is not a
/// number.
pub fn init_from_env() -> Result<Option<TraceGuard>, Error> {
    let Some(out) = std::env::var_os("RINGTRACE_OUTPUT").filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    let system = out == "system"
        || std::env::var("RINGTRACE_SYSTEM")
            .is_ok_and(|v| matches!(v.trim(), "1" | "true" | "yes" | "on"));
    let mut b = builder().system_tracing(system);
    if out != "system" {
        b = b.output(PathBuf::from(out));
    }
    if let Ok(cats) = std::env::var("RINGTRACE_CATEGORIES") {
        let mut filter = CategoryFilter::none();
        for p in cats.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match p.strip_prefix('-') {
                Some(off) => filter.push(off, false),
                None => filter.push(p, true),
            }
        }
        b.filter = filter;
    }
    let number = |name: &str| -> Result<Option<u64>, Error> {
        match std::env::var(name) {
            Ok(v) => v
                .trim()
                .parse()
                .map(Some)
                .map_err(|_| Error::InvalidConfig(format!("{name}={v} is not a number"))),
            Err(_) => Ok(None),
        }
    };
    if let Some(n) = number("RINGTRACE_BUFFER_BYTES")? {
        b = b.buffer_bytes(n);
    }
    if let Some(n) = number("RINGTRACE_BUFFER_BYTES_PER_THREAD")? {
        b = b.buffer_bytes_per_thread(usize::try_from(n).unwrap_or(usize::MAX));
    }
    if let Some(hz) = number("RINGTRACE_CPU_SAMPLING")? {
        b = b.cpu_sampling(u32::try_from(hz).unwrap_or(u32::MAX));
    }
    if let Ok(v) = std::env::var("RINGTRACE_OVERWRITE") {
        b = b.overwrite(matches!(v.trim(), "1" | "true" | "yes" | "on"));
    }
    b.start().map(Some)
}

#[cfg(test)]
mod tests {
    #[cfg(feature = "enable")]
    use crate::record::registry::REGISTRY;

    /// The next flusher spawn fails (tests of `start`'s error path).
    pub(super) static FAIL_FLUSHER_SPAWN: std::sync::atomic::AtomicBool =
        std::sync::atomic::AtomicBool::new(false);

    /// One session at a time across the unit tests that start one.
    #[cfg(feature = "enable")]
    static SESSIONS: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// A flight recorder whose flusher cannot be spawned gives its store
    /// (half the budget) back, and the pool its stock: the budget ends where
    /// it was (before: half the budget stayed taken for good).
    #[cfg(feature = "enable")]
    #[test]
    fn a_start_whose_flusher_fails_gives_the_budget_back() {
        let _one = SESSIONS.lock().unwrap_or_else(|e| e.into_inner());
        let before = REGISTRY.budget.used();
        FAIL_FLUSHER_SPAWN.store(true, std::sync::atomic::Ordering::Relaxed);
        let started = crate::builder()
            .writer(crate::MemoryBuffer::new())
            .overwrite(true)
            .buffer_bytes(8 << 20)
            .start();
        assert!(matches!(started, Err(crate::Error::Flusher(_))));
        assert_eq!(REGISTRY.budget.used(), before, "every byte given back");
    }

    /// `start` returns once the flusher has run to its wait for work: the
    /// trace's first packets (which the flusher writes before it waits) are
    /// in the writer by then. Before, `start` returned with the flusher
    /// thread only made: queued on the starting thread's CPU, it could wait
    /// there a scheduler tick, then take that CPU from the first events
    /// (a fresh session's first lap, 1.9x the clock floor).
    #[cfg(feature = "enable")]
    #[test]
    fn start_returns_once_the_flusher_waits_for_work() {
        let _one = SESSIONS.lock().unwrap_or_else(|e| e.into_inner());
        for _ in 0..20 {
            let buf = crate::MemoryBuffer::new();
            let guard = crate::builder()
                .writer(buf.clone())
                .flush_interval(std::time::Duration::from_secs(3600))
                .start()
                .unwrap();
            let header = buf.contents();
            assert_eq!(
                header.first(),
                Some(&0x0a),
                "a packet, written by the flusher"
            );
            guard.stop().unwrap();
        }
    }

    /// `start` waits for the flusher a bounded time: a writer that blocks
    /// (here until the test opens it) holds the flusher in its first write,
    /// before it ever waits for work, and `start` returns all the same.
    #[cfg(feature = "enable")]
    #[test]
    fn start_does_not_wait_for_a_writer_that_blocks() {
        use std::sync::{mpsc, Arc, Condvar, Mutex};
        struct Gate(Arc<(Mutex<bool>, Condvar)>);
        impl std::io::Write for Gate {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                let (open, cv) = &*self.0;
                let mut open = open.lock().unwrap();
                while !*open {
                    open = cv.wait(open).unwrap();
                }
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let _one = SESSIONS.lock().unwrap_or_else(|e| e.into_inner());
        let gate = Arc::new((Mutex::new(false), Condvar::new()));
        let open = || {
            *gate.0.lock().unwrap() = true;
            gate.1.notify_all();
        };
        let (tx, rx) = mpsc::channel();
        let writer = Gate(gate.clone());
        std::thread::spawn(move || {
            let _ = tx.send(crate::builder().writer(writer).start());
        });
        let started = rx.recv_timeout(std::time::Duration::from_secs(10));
        open(); // lets the flusher (and a `start` still waiting) go on
        let guard = started
            .expect("start returned while the writer blocked")
            .unwrap();
        guard.stop().unwrap();
    }

    /// With system tracing only, nothing records until a tracing session
    /// turns call sites on (maybe never): `start` stocks no pool. And a
    /// session that recorded nothing restocks nothing, its stopping pass
    /// included (before: every full pass, the stop's too, stocked again
    /// what the pool missed, just before stop emptied it).
    #[cfg(feature = "enable")]
    #[test]
    fn no_stock_without_a_file_and_none_restocked_at_stop() {
        let _one = SESSIONS.lock().unwrap_or_else(|e| e.into_inner());
        let budget = REGISTRY.budget;
        let pool = budget.pool();
        let before = budget.used();
        let guard = crate::builder().system_tracing(true).start().unwrap();
        assert_eq!(pool.pooled_bytes(), 0, "no stock with system tracing only");
        guard.stop().unwrap();
        assert_eq!(budget.used(), before);

        let guard = crate::builder()
            .writer(crate::MemoryBuffer::new())
            .flush_interval(std::time::Duration::from_secs(3600))
            .start()
            .unwrap();
        // A segment taken from the stock, not by a growth: a full pass of
        // the old flusher restocked it.
        let (base, words) = pool.take(512, 512).expect("the 4 KiB stock");
        let stocked = pool.stocked();
        std::thread::sleep(std::time::Duration::from_millis(20));
        guard.stop().unwrap();
        assert_eq!(pool.stocked(), stocked, "nothing stocked up to the stop");
        // SAFETY: taken from the pool above (mapped, ours), freed once.
        unsafe { crate::record::segment::free_mapped(base, words) };
        budget.give_back(crate::record::segment::segment_bytes(words));
        assert_eq!(budget.used(), before);
    }

    /// A session stocks the pool at start; a thread that records enough to
    /// grow its ring takes its segments from there (and gives them back
    /// after), and stop gives every byte back: the budget ends where it
    /// was before the session.
    #[cfg(feature = "enable")]
    #[test]
    fn a_session_stocks_the_pool_and_gives_the_budget_back_at_stop() {
        let _one = SESSIONS.lock().unwrap_or_else(|e| e.into_inner());
        let budget = REGISTRY.budget;
        let before = budget.used();
        let guard = crate::builder()
            .writer(crate::MemoryBuffer::new())
            .buffer_bytes(32 << 20)
            .buffer_bytes_per_thread(1 << 20)
            .start()
            .unwrap();
        let pool = budget.pool();
        assert_eq!(
            pool.pooled_bytes(),
            (4 + 16 + 64 + 256 + 1024) << 10,
            "one segment per growth size, to 1 MiB"
        );
        let taken = pool.taken();
        std::thread::spawn(|| {
            for i in 0..100_000u64 {
                crate::trace_instant!("pool", "tick", i = i);
            }
        })
        .join()
        .unwrap();
        assert!(pool.taken() >= taken + 4, "grew into pooled segments");
        let stats = guard.stop().unwrap();
        assert_eq!(stats.events_lost + stats.events_written, 100_000);
        assert_eq!(pool.pooled_bytes(), 0, "emptied at stop");
        assert_eq!(budget.used(), before, "every byte given back");
    }
}
