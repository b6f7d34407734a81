//! Sessions: configuring, starting and stopping tracing, and finishing the
//! trace however the program ends (guard drop, `std::process::exit`, a panic
//! unwinding out of `main`).

use crate::callsite::{self, CategoryFilter};
use crate::clock::Calibration;
use crate::encode::json::JsonEncoder;
use crate::encode::perfetto::{PerfettoEncoder, PerfettoOptions};
use crate::encode::{Encoder, ProcessInfo};
use crate::flusher::{Flusher, Shared, Stats};
use crate::registry::{RingConfig, REGISTRY};
use crate::sink::Sink;
use once_cell::sync::Lazy;
use parking_lot::Mutex;
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Once};
use std::thread::JoinHandle;
use std::time::Duration;

/// What can go wrong starting or stopping a session.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The output could not be created or written.
    Io {
        path: Option<PathBuf>,
        source: std::io::Error,
    },
    /// A session is already recording; stop it first.
    AlreadyStarted,
    /// The output's file extension names no format ringtrace writes; use
    /// `.pftrace`, `.perfetto-trace`, `.pb` or `.json`, or call `format`.
    UnknownFormat(PathBuf),
    /// No output was configured.
    NoOutput,
    /// A setting is out of range.
    InvalidConfig(String),
    /// The flusher thread could not be started or died.
    Flusher(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { path: Some(p), source } => write!(f, "cannot write trace file {}: {source}", p.display()),
            Error::Io { path: None, source } => write!(f, "cannot write the trace: {source}"),
            Error::AlreadyStarted => write!(f, "a ringtrace session is already recording"),
            Error::UnknownFormat(p) => write!(
                f,
                "cannot tell the trace format from {}: use .pftrace, .perfetto-trace, .pb or .json, or set .format()",
                p.display()
            ),
            Error::NoOutput => write!(f, "no output configured: call .output(path) or .writer(w)"),
            Error::InvalidConfig(m) => write!(f, "invalid ringtrace configuration: {m}"),
            Error::Flusher(m) => write!(f, "ringtrace flusher: {m}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// The file format of a trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Perfetto protobuf (`.pftrace`): opens in ui.perfetto.dev and trace_processor.
    Perfetto,
    /// Chrome Trace Event Format JSON (`.json`): opens in Perfetto, chrome://tracing, speedscope...
    Json,
}

impl Format {
    /// The format a file name implies, if any.
    pub fn from_path(path: &Path) -> Option<Format> {
        match path.extension()?.to_str()?.to_ascii_lowercase().as_str() {
            "pftrace" | "perfetto-trace" | "pb" | "perfetto" => Some(Format::Perfetto),
            "json" => Some(Format::Json),
            _ => None,
        }
    }
}

enum Output {
    None,
    Path(PathBuf),
    Writer(Box<dyn Write + Send>),
}

/// Configures a session. Made by [`builder()`].
pub struct Builder {
    output: Output,
    format: Option<Format>,
    buffer_bytes: usize,
    overwrite: bool,
    filter: CategoryFilter,
    flush_interval: Duration,
    process_name: Option<String>,
    source_locations: bool,
    finish_on_signals: bool,
}

/// Starts configuring a tracing session.
///
/// # Examples
///
/// ```
/// let path = std::env::temp_dir().join("ringtrace-doc-builder.pftrace");
/// let _trace = ringtrace::builder()
///     .output(&path)
///     .buffer_bytes_per_thread(1 << 20)
///     .overwrite(false)
///     .enable_categories(["*"])
///     .start()?;
/// ringtrace::trace_scope!("work");
/// # Ok::<(), ringtrace::Error>(())
/// ```
pub fn builder() -> Builder {
    Builder {
        output: Output::None,
        format: None,
        buffer_bytes: 1 << 20,
        overwrite: false,
        filter: CategoryFilter::all(),
        flush_interval: Duration::from_millis(100),
        process_name: None,
        source_locations: true,
        finish_on_signals: false,
    }
}

impl Builder {
    /// Writes the trace to `path`; the extension picks the format unless
    /// [`Builder::format`] is set: `.pftrace`, `.perfetto-trace`, `.pb`
    /// (Perfetto) or `.json` (Chrome JSON).
    pub fn output(mut self, path: impl AsRef<Path>) -> Self {
        self.output = Output::Path(path.as_ref().to_path_buf());
        self
    }

    /// Writes the trace to any writer (a socket, a pipe, a [`MemoryBuffer`]).
    /// The format defaults to Perfetto.
    pub fn writer(mut self, w: impl Write + Send + 'static) -> Self {
        self.output = Output::Writer(Box::new(w));
        self
    }

    /// Chooses the format explicitly.
    pub fn format(mut self, format: Format) -> Self {
        self.format = Some(format);
        self
    }

    /// Size of each thread's ring buffer (rounded up to a power of two; at
    /// least 512 bytes). Default 1 MiB.
    pub fn buffer_bytes_per_thread(mut self, bytes: usize) -> Self {
        self.buffer_bytes = bytes;
        self
    }

    /// `false` (default): when a ring is full new events are dropped and
    /// counted. `true`: flight recorder, the oldest events are overwritten and
    /// rings are written out only on [`flush`](crate::flush) and at stop.
    pub fn overwrite(mut self, overwrite: bool) -> Self {
        self.overwrite = overwrite;
        self
    }

    /// Records only categories matching these patterns (`"*"`, exact names,
    /// `"prefix*"`). Default: all.
    pub fn enable_categories<I, S>(mut self, patterns: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.filter = CategoryFilter::none();
        for p in patterns {
            self.filter.push(p.as_ref(), true);
        }
        self
    }

    /// Excludes categories matching these patterns (applied after
    /// [`Builder::enable_categories`]).
    pub fn disable_categories<I, S>(mut self, patterns: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        for p in patterns {
            self.filter.push(p.as_ref(), false);
        }
        self
    }

    /// How often every ring is drained to the output (default 100 ms). Rings
    /// past half full are drained sooner.
    pub fn flush_interval(mut self, interval: Duration) -> Self {
        self.flush_interval = interval;
        self
    }

    /// The process name shown in the trace (default: the executable's name).
    pub fn process_name(mut self, name: impl Into<String>) -> Self {
        self.process_name = Some(name.into());
        self
    }

    /// Perfetto: attach each event's source file and line (interned). Default on.
    pub fn source_locations(mut self, on: bool) -> Self {
        self.source_locations = on;
        self
    }

    /// Finish the trace when the process gets SIGINT or SIGTERM, then let the
    /// signal take its default effect (the process still ends as it would
    /// have). Off by default: it installs process-wide signal handlers, which
    /// replace any the program set before. Handlers stay installed after the
    /// session stops and finish whatever session is recording then.
    pub fn finish_on_signals(mut self, on: bool) -> Self {
        self.finish_on_signals = on;
        self
    }

    /// Starts recording.
    ///
    /// # Errors
    ///
    /// [`Error::AlreadyStarted`] if a session is recording,
    /// [`Error::Io`] if the output file cannot be created,
    /// [`Error::UnknownFormat`] if its extension names no known format,
    /// [`Error::NoOutput`] without an output.
    pub fn start(self) -> Result<TraceGuard, Error> {
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
        let (sink, format, path) = match self.output {
            Output::None => return Err(Error::NoOutput),
            Output::Writer(w) => (
                Sink::new(w, "the configured writer".into()),
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
                let w = std::io::BufWriter::with_capacity(1 << 16, file);
                (
                    Sink::new(Box::new(w), p.display().to_string()),
                    format,
                    Some(p),
                )
            }
        };
        let encoder: Box<dyn Encoder> = match format {
            Format::Perfetto => Box::new(PerfettoEncoder::new(PerfettoOptions {
                source_locations: self.source_locations,
            })),
            Format::Json => Box::new(JsonEncoder::new()),
        };
        if self.finish_on_signals {
            crate::signals::install(finish_current_session).map_err(|e| Error::Io {
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
                overwrite: self.overwrite,
            },
        );
        let shared = Arc::new(Shared::new());
        let flusher = Flusher {
            shared: shared.clone(),
            encoder,
            sink,
            cal,
            process: ProcessInfo::current(self.process_name),
            overwrite: self.overwrite,
            interval: self.flush_interval.max(Duration::from_millis(1)),
        };
        let handle = std::thread::Builder::new()
            .name("ringtrace-flusher".into())
            .spawn(move || flusher.run())
            .map_err(|e| {
                REGISTRY.close();
                Error::Flusher(format!("cannot start the flusher thread: {e}"))
            })?;
        callsite::replace_filter(self.filter);
        callsite::set_active(true);
        *slot = Some(Session {
            id,
            shared,
            handle,
            path: path.clone(),
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

struct Session {
    id: u64,
    shared: Arc<Shared>,
    handle: JoinHandle<(Stats, Option<std::io::Error>)>,
    path: Option<PathBuf>,
}

static SESSION: Lazy<Mutex<Option<Session>>> = Lazy::new(|| Mutex::new(None));
static NEXT_SESSION: AtomicU64 = AtomicU64::new(1);
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
    session
        .shared
        .stop
        .store(true, std::sync::atomic::Ordering::Release);
    session.shared.wake();
    let joined = session.handle.join();
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

    /// Stops the session, finishes the trace and returns its totals.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] if writing the trace failed at any point (the first error).
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
pub fn is_recording() -> bool {
    SESSION.lock().is_some()
}

/// Starts a session configured by environment variables, or does nothing if
/// `RINGTRACE_OUTPUT` is unset or empty:
///
/// | variable | meaning |
/// | --- | --- |
/// | `RINGTRACE_OUTPUT` | output path; the extension picks the format |
/// | `RINGTRACE_CATEGORIES` | comma-separated patterns to enable (default `*`); `-name` disables |
/// | `RINGTRACE_BUFFER_BYTES` | ring size per thread |
/// | `RINGTRACE_OVERWRITE` | `1`/`true`: flight-recorder mode |
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
/// As [`Builder::start`], and [`Error::InvalidConfig`] for a malformed variable.
pub fn init_from_env() -> Result<Option<TraceGuard>, Error> {
    let Some(out) = std::env::var_os("RINGTRACE_OUTPUT").filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    let mut b = builder().output(PathBuf::from(out));
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
    if let Ok(v) = std::env::var("RINGTRACE_BUFFER_BYTES") {
        let n = v.trim().parse().map_err(|_| {
            Error::InvalidConfig(format!("RINGTRACE_BUFFER_BYTES={v} is not a number"))
        })?;
        b = b.buffer_bytes_per_thread(n);
    }
    if let Ok(v) = std::env::var("RINGTRACE_OVERWRITE") {
        b = b.overwrite(matches!(v.trim(), "1" | "true" | "yes" | "on"));
    }
    b.start().map(Some)
}
