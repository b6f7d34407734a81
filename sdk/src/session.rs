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
///
/// Returned by [`Builder::start`], [`TraceGuard::stop`] and
/// [`init_from_env`]. It implements [`std::error::Error`]; [`Error::Io`]
/// has the underlying I/O error as its [`source`](std::error::Error::source).
///
/// # Examples
///
/// ```
/// use ringtrace::Error;
/// // No output configured:
/// assert!(matches!(ringtrace::builder().start(), Err(Error::NoOutput)));
/// // An extension that names no format:
/// let path = std::env::temp_dir().join("ringtrace-doc-error.txt");
/// assert!(matches!(ringtrace::builder().output(&path).start(), Err(Error::UnknownFormat(_))));
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The output could not be created or written.
    Io {
        /// The trace file, or `None` when the output is a writer (or the
        /// failure was installing the signal handlers of
        /// [`Builder::finish_on_signals`]).
        path: Option<PathBuf>,
        /// The I/O error (the first one, when several writes failed).
        source: std::io::Error,
    },
    /// A session is already recording; stop it first.
    AlreadyStarted,
    /// The output's file extension names no format ringtrace writes; use
    /// `.pftrace`, `.perfetto-trace`, `.pb` or `.json`, or call `format`.
    UnknownFormat(PathBuf),
    /// No output was configured.
    NoOutput,
    /// A setting is out of range or malformed (the message says which).
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
///
/// Chosen by the output's extension (see [`Format::from_path`]) or
/// explicitly with [`Builder::format`].
///
/// # Examples
///
/// ```
/// use ringtrace::Format;
/// let path = std::env::temp_dir().join("ringtrace-doc-format.trace");
/// let _trace = ringtrace::builder().output(&path).format(Format::Json).start()?;
/// ringtrace::trace_instant!("hello");
/// # Ok::<(), ringtrace::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Perfetto protobuf (`.pftrace`): opens in ui.perfetto.dev and trace_processor.
    Perfetto,
    /// Chrome Trace Event Format JSON (`.json`): opens in Perfetto, chrome://tracing, speedscope...
    Json,
}

impl Format {
    /// The format a file name implies, if any: `.pftrace`,
    /// `.perfetto-trace`, `.pb` and `.perfetto` are Perfetto, `.json` is
    /// Chrome JSON (extensions compared case-insensitively).
    ///
    /// # Examples
    ///
    /// ```
    /// use ringtrace::Format;
    /// use std::path::Path;
    /// assert_eq!(Format::from_path(Path::new("run.pftrace")), Some(Format::Perfetto));
    /// assert_eq!(Format::from_path(Path::new("run.JSON")), Some(Format::Json));
    /// assert_eq!(Format::from_path(Path::new("run.txt")), None);
    /// ```
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

/// Configures a session. Made by [`builder()`]; every option takes and
/// returns the builder, and [`Builder::start`] starts recording.
///
/// # Examples
///
/// ```
/// use ringtrace::{Format, MemoryBuffer};
/// let buf = MemoryBuffer::new();
/// let trace = ringtrace::builder()
///     .writer(buf.clone())
///     .format(Format::Json)
///     .process_name("doc-test")
///     .start()?;
/// ringtrace::trace_instant!("hello");
/// trace.stop()?;
/// assert!(buf.contents().starts_with(b"[")); // a JSON array of events
/// # Ok::<(), ringtrace::Error>(())
/// ```
pub struct Builder {
    output: Output,
    format: Option<Format>,
    buffer_bytes: usize,
    budget_bytes: u64,
    overwrite: bool,
    filter: CategoryFilter,
    flush_interval: Duration,
    process_name: Option<String>,
    source_locations: bool,
    compact_packets: bool,
    compressed_packets: bool,
    finish_on_signals: bool,
    thread_time: bool,
    json: crate::encode::json::JsonOptions,
    /// A top-level JSON key that cannot be set (reported by `start`).
    json_key_error: Option<String>,
    process_labels: Vec<String>,
    process_sort_index: Option<i32>,
}

/// How the Chrome JSON output writes scopes ([`Builder::json_scopes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum JsonScopes {
    /// One complete (`X`) event per scope, written when it ends, with `dur`
    /// (and `tts`/`tdur` when thread time is recorded). Half the size of
    /// `B`/`E`; the default.
    #[default]
    Complete,
    /// A `B` event when a scope begins and an `E` when it ends (each with
    /// `tts` when thread time is recorded). A crash keeps the begins of the
    /// scopes still open. Complete events given explicit times are written
    /// as `B`/`E` pairs too: a file never mixes `X` with `B`/`E`.
    BeginEnd,
}

/// The unit a JSON trace viewer displays times in (`displayTimeUnit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DisplayTimeUnit {
    /// Milliseconds (`"displayTimeUnit": "ms"`).
    Ms,
    /// Nanoseconds (`"displayTimeUnit": "ns"`).
    Ns,
}

/// Smallest process-wide budget [`Builder::buffer_bytes`] accepts.
const MIN_BUDGET_BYTES: u64 = 64 << 10;

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
        budget_bytes: crate::budget::DEFAULT_BUDGET_BYTES,
        overwrite: false,
        filter: CategoryFilter::all(),
        flush_interval: Duration::from_millis(100),
        process_name: None,
        source_locations: true,
        compact_packets: false,
        compressed_packets: false,
        finish_on_signals: false,
        thread_time: false,
        json: Default::default(),
        json_key_error: None,
        process_labels: Vec::new(),
        process_sort_index: None,
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

    /// Writes the trace to any writer (a socket, a pipe, a
    /// [`MemoryBuffer`](crate::MemoryBuffer)). The format defaults to
    /// Perfetto. The writer is used as is (wrap a slow one in a
    /// [`BufWriter`](std::io::BufWriter)).
    pub fn writer(mut self, w: impl Write + Send + 'static) -> Self {
        self.output = Output::Writer(Box::new(w));
        self
    }

    /// Chooses the format explicitly.
    pub fn format(mut self, format: Format) -> Self {
        self.format = Some(format);
        self
    }

    /// Largest ring of one thread (rounded up to a power of two; at least
    /// 512 bytes). Default 1 MiB. A thread's ring starts at 1 KiB and
    /// doubles while the thread records faster than the flusher drains it,
    /// up to this size, as long as [`buffer_bytes`](Builder::buffer_bytes)
    /// has room (the smaller segment it outgrew is freed once drained). In
    /// flight-recorder mode ([`overwrite`](Builder::overwrite)) every ring
    /// has this size at once. More than 1 TiB makes
    /// [`start`](Builder::start) fail with [`Error::InvalidConfig`].
    pub fn buffer_bytes_per_thread(mut self, bytes: usize) -> Self {
        self.buffer_bytes = bytes;
        self
    }

    /// Memory recording may hold in the whole process, whatever the number
    /// of threads: every thread's ring and bookkeeping (about 1 KiB per
    /// thread besides its ring) is taken from it. Default 32 MiB. When it
    /// is used up, rings stop growing and events that do not fit are
    /// dropped and counted (a thread with no ring yet gets one as soon as
    /// memory is given back: threads that exit and rings drained after
    /// growing give theirs back). At least 64 KiB: less makes
    /// [`start`](Builder::start) fail with [`Error::InvalidConfig`].
    pub fn buffer_bytes(mut self, bytes: u64) -> Self {
        self.budget_bytes = bytes;
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
    /// `"prefix*"`). Default: all. The builder's filter replaces the
    /// process-wide one when the session starts; change it while recording
    /// with [`enable_categories`](crate::enable_categories) and
    /// [`disable_categories`](crate::disable_categories).
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

    /// Perfetto: the smallest event packets (about 24 bytes per scope instead
    /// of 31): no source locations, and no NEEDS_INCREMENTAL_STATE flag on
    /// plain event packets. Off by default. Dropping the flag changes nothing
    /// a reader keeps in ringtrace's files: every sequence starts with, and
    /// restarts after any loss with, a packet that clears incremental state,
    /// so a reader never sees one of our event packets while its state is
    /// invalid (the flag only tells it to skip packets in that case).
    ///
    /// # Examples
    ///
    /// ```
    /// let buf = ringtrace::MemoryBuffer::new();
    /// let guard = ringtrace::builder().writer(buf.clone()).compact_packets(true).start()?;
    /// ringtrace::trace_scope!("small");
    /// drop(guard);
    /// # Ok::<(), ringtrace::Error>(())
    /// ```
    pub fn compact_packets(mut self, on: bool) -> Self {
        self.compact_packets = on;
        if on {
            self.source_locations = false;
        }
        self
    }

    /// Perfetto: write the packets zlib-compressed inside
    /// `TracePacket.compressed_packets`, which Perfetto expands as it reads
    /// (a few bytes per scope; combine with [`Builder::compact_packets`]).
    /// Each flush cycle's packets are compressed in chunks of at most 256 KiB,
    /// so a crash loses no more than without compression. Costs flusher CPU
    /// (zlib, default level). Ignored for JSON output. Off by default.
    ///
    /// # Examples
    ///
    /// ```
    /// let buf = ringtrace::MemoryBuffer::new();
    /// let guard = ringtrace::builder().writer(buf.clone()).compressed_packets(true).start()?;
    /// ringtrace::trace_scope!("small");
    /// guard.stop()?;
    /// assert_eq!(buf.contents()[0], 0x0a);
    /// # Ok::<(), ringtrace::Error>(())
    /// ```
    pub fn compressed_packets(mut self, on: bool) -> Self {
        self.compressed_packets = on;
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

    /// Record each thread's CPU time (CLOCK_THREAD_CPUTIME_ID) at the begin
    /// and end of every scope: JSON `tts`/`tdur`, Perfetto a thread-time
    /// counter track per thread (`COUNTER_THREAD_TIME_NS`, values on the
    /// slices' begin and end as `extra_counter_values`), from which readers
    /// compute each slice's thread duration. Off by default.
    ///
    /// # Cost
    ///
    /// The vDSO does not serve this clock: each read is a system call. On
    /// the development machine (AMD EPYC, Linux 6.18, 2 cores) one read took
    /// 380 ns against 22 ns for a vDSO `CLOCK_BOOTTIME` read, so a scope
    /// costs about 0.76 µs more with thread time on.
    ///
    /// # Examples
    ///
    /// ```
    /// let path = std::env::temp_dir().join("ringtrace-doc-thread-time.json");
    /// let _trace = ringtrace::builder().output(&path).thread_time(true).start()?;
    /// ringtrace::trace_scope!("busy"); // X event with "tts" and "tdur"
    /// # Ok::<(), ringtrace::Error>(())
    /// ```
    pub fn thread_time(mut self, on: bool) -> Self {
        self.thread_time = on;
        self
    }

    /// Chrome JSON: write scopes as complete `X` events (default) or as
    /// `B`/`E` pairs. One file never mixes the two.
    ///
    /// # Examples
    ///
    /// ```
    /// use ringtrace::JsonScopes;
    /// let path = std::env::temp_dir().join("ringtrace-doc-be.json");
    /// let _trace = ringtrace::builder()
    ///     .output(&path)
    ///     .json_scopes(JsonScopes::BeginEnd)
    ///     .start()?;
    /// ringtrace::trace_scope!("work"); // {"ph":"B",...} then {"ph":"E",...}
    /// # Ok::<(), ringtrace::Error>(())
    /// ```
    pub fn json_scopes(mut self, scopes: JsonScopes) -> Self {
        self.json.scopes = match scopes {
            JsonScopes::Complete => crate::encode::json::ScopeForm::Complete,
            JsonScopes::BeginEnd => crate::encode::json::ScopeForm::BeginEnd,
        };
        self
    }

    /// Chrome JSON: write the JSON Object Format
    /// (`{"traceEvents":[...], ...}`) instead of the bare array. Implied by
    /// [`json_display_time_unit`](Builder::json_display_time_unit),
    /// [`json_other_data`](Builder::json_other_data) and
    /// [`json_metadata`](Builder::json_metadata). The object form is
    /// completed when the session stops; unlike the default bare array, a
    /// file cut short by a crash or kill does not load. Stack frames go to
    /// its `stackFrames` dictionary and global samples to its `samples`.
    pub fn json_object_form(mut self, on: bool) -> Self {
        self.json.object = on;
        self
    }

    /// Chrome JSON: `displayTimeUnit` ("ms" or "ns"). Selects the object form.
    pub fn json_display_time_unit(mut self, unit: DisplayTimeUnit) -> Self {
        self.json.display_time_unit = Some(match unit {
            DisplayTimeUnit::Ms => "ms",
            DisplayTimeUnit::Ns => "ns",
        });
        self.json.object = true;
        self
    }

    /// Chrome JSON: an entry of the top-level `otherData` object (shown by
    /// viewers as the trace's metadata). Selects the object form.
    ///
    /// # Examples
    ///
    /// ```
    /// let path = std::env::temp_dir().join("ringtrace-doc-other-data.json");
    /// let _trace = ringtrace::builder()
    ///     .output(&path)
    ///     .json_other_data("version", "My Application v1.0")
    ///     .json_metadata("metadata", std::collections::BTreeMap::from([("run", 42)]))
    ///     .start()?;
    /// # Ok::<(), ringtrace::Error>(())
    /// ```
    pub fn json_other_data(mut self, key: &str, value: impl crate::TraceValue) -> Self {
        self.json
            .other_data
            .push((key.to_string(), crate::encode::json::to_json_text(&value)));
        self.json.object = true;
        self
    }

    /// Chrome JSON: any other top-level key of the object form (viewers keep
    /// unknown keys as trace metadata; Perfetto imports a `metadata` object
    /// into its metadata table). Not `traceEvents`, `displayTimeUnit`,
    /// `stackFrames`, `samples` or `otherData`, which ringtrace writes
    /// itself. Selects the object form.
    pub fn json_metadata(mut self, key: &str, value: impl crate::TraceValue) -> Self {
        const RESERVED: [&str; 5] = [
            "traceEvents",
            "displayTimeUnit",
            "stackFrames",
            "samples",
            "otherData",
        ];
        if RESERVED.contains(&key) || self.json.metadata.iter().any(|(k, _)| k == key) {
            self.json_key_error = Some(key.to_string());
        } else {
            self.json
                .metadata
                .push((key.to_string(), crate::encode::json::to_json_text(&value)));
        }
        self.json.object = true;
        self
    }

    /// Extra labels of the process (JSON `M process_labels`; Perfetto
    /// `process_labels`). See also [`set_process_labels`](crate::set_process_labels).
    pub fn process_labels<I, S>(mut self, labels: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.process_labels = labels.into_iter().map(Into::into).collect();
        self
    }

    /// Where the process sorts among processes, lower first (JSON `M
    /// process_sort_index`; Perfetto `legacy_sort_index` and the process
    /// track's `sibling_order_rank`).
    pub fn process_sort_index(mut self, index: i32) -> Self {
        self.process_sort_index = Some(index);
        self
    }

    /// Starts recording: creates the output, starts the flusher thread and
    /// replaces the process-wide category filter with this builder's. The
    /// session is process-global and records until the returned guard is
    /// dropped or [stopped](TraceGuard::stop); the trace is also finished at
    /// `exit` (including `std::process::exit` and the return from `main`).
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
        let (mut sink, format, path) = match self.output {
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
                omit_needs_flag: self.compact_packets,
            })),
            Format::Json => Box::new(JsonEncoder::with_options(self.json)),
        };
        if self.compressed_packets {
            sink.compress_perfetto_packets();
        }
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
                budget_bytes: self.budget_bytes,
                overwrite: self.overwrite,
                thread_time: self.thread_time,
            },
        );
        let shared = Arc::new(Shared::new());
        let flusher = Flusher {
            shared: shared.clone(),
            encoder,
            sink,
            cal,
            process: {
                let mut p = ProcessInfo::current(self.process_name);
                p.labels = self.process_labels;
                p.sort_index = self.process_sort_index;
                p
            },
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
/// | `RINGTRACE_OUTPUT` | output path; the extension picks the format |
/// | `RINGTRACE_CATEGORIES` | comma-separated patterns to enable (default `*`); `-name` disables |
/// | `RINGTRACE_BUFFER_BYTES` | memory of all rings of the process ([`Builder::buffer_bytes`]) |
/// | `RINGTRACE_BUFFER_BYTES_PER_THREAD` | largest ring of one thread ([`Builder::buffer_bytes_per_thread`]) |
/// | `RINGTRACE_OVERWRITE` | `1`, `true`, `yes` or `on`: flight-recorder mode |
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
    if let Ok(v) = std::env::var("RINGTRACE_OVERWRITE") {
        b = b.overwrite(matches!(v.trim(), "1" | "true" | "yes" | "on"));
    }
    b.start().map(Some)
}
