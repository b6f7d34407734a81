//! `Builder`: every option of a session, set before it starts: the
//! output, memory, categories and packets here; what goes on disk (the
//! disk bound, captures) in `disk`; Chrome JSON's in `json`; `tracing`
//! spans' in `tracing/builder.rs`, CPU sampling's in `sampling`.

#![forbid(unsafe_code)]

mod disk;
mod json;
mod sampling;

use disk::DEFAULT_MAX_FILES;
pub(crate) use disk::{CaptureOptions, SlowRule};
pub use json::{DisplayTimeUnit, JsonScopes};

use crate::record::callsite::CategoryFilter;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

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

pub(crate) enum Output {
    None,
    Path(PathBuf),
    Writer(Box<dyn Write + Send>),
}

/// Configures a session. Made by [`builder()`]; every option takes and
/// returns the builder. [`Builder::start`] starts recording;
/// [`Builder::layer`] and [`Builder::subscriber`] (feature `tracing`) start
/// it and also return what records `tracing` spans into it. The
/// environment's configuration is applied with [`Builder::from_env`].
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
    pub(super) output: Output,
    pub(super) format: Option<Format>,
    /// `None`: not set (`record::registry::DEFAULT_RING_BYTES`).
    pub(super) buffer_bytes: Option<usize>,
    /// `None`: not set; it then follows `buffer_bytes` (`record::budget::default_for`).
    pub(super) budget_bytes: Option<u64>,
    pub(super) overwrite: bool,
    pub(super) filter: CategoryFilter,
    pub(super) flush_interval: Duration,
    pub(super) process_name: Option<String>,
    pub(super) source_locations: bool,
    pub(super) compact_packets: bool,
    pub(super) compressed_packets: bool,
    pub(super) finish_on_signals: bool,
    pub(super) thread_time: bool,
    pub(super) json: crate::encode::json::JsonOptions,
    /// A top-level JSON key that cannot be set (reported by `start`).
    pub(super) json_key_error: Option<String>,
    pub(super) process_labels: Vec<String>,
    pub(super) process_sort_index: Option<i32>,
    pub(super) system_tracing: bool,
    pub(super) max_file_bytes: Option<u64>,
    pub(super) max_files: u64,
    pub(super) capture: Option<CaptureOptions>,
    /// CPU stack samples (`sampling`: its builder methods are there).
    pub(crate) cpu_sampling: crate::sampling::Options,
    /// The mode of the files the session creates.
    pub(super) file_mode: u32,
    /// The options of `tracing` spans (`tracing`: their builder methods
    /// and the finishers `layer` and `subscriber` are there).
    #[cfg(feature = "tracing")]
    pub(crate) spans: SpanOptions,
    /// The OTLP exporter's options (`otlp/`: its builder methods are there).
    #[cfg(feature = "otlp")]
    pub(crate) otlp: Option<crate::otlp::Config>,
}

/// The options of `tracing` spans (feature `tracing`: their methods and
/// the finishers, `layer()` and `subscriber()`, are in `tracing/builder.rs`),
/// until a finisher makes a sampler and the slow rule of them.
#[cfg(feature = "tracing")]
#[derive(Default)]
pub(crate) struct SpanOptions {
    pub(crate) ratio: Option<f64>,
    pub(crate) roots: Vec<String>,
    pub(crate) decide: Option<Box<Decide>>,
    /// `capture_slow`'s patterns and threshold.
    pub(crate) slow: Option<SlowRule>,
    /// `span_fields_every_slice`.
    pub(crate) fields_every_slice: bool,
    /// `span_slices(SpanSlices::Lifetime)`.
    pub(crate) lifetime_slices: bool,
}

#[cfg(feature = "tracing")]
impl SpanOptions {
    /// `RINGTRACE_SAMPLE` and `RINGTRACE_SAMPLE_ROOTS` as
    /// [`Builder::from_env`] read them: each set replaces the builder's.
    pub(crate) fn apply_env(&mut self, ratio: Option<f64>, roots: Option<Vec<String>>) {
        if ratio.is_some() {
            self.ratio = ratio;
        }
        if let Some(roots) = roots {
            self.roots = roots;
        }
    }
}

/// Decides whether a root span is kept (`Builder::sample_with`).
#[cfg(feature = "tracing")]
pub(crate) type Decide = dyn Fn(&tracing::span::Attributes<'_>) -> Option<bool> + Send + Sync;

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
        buffer_bytes: None,
        budget_bytes: None,
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
        system_tracing: false,
        max_file_bytes: None,
        max_files: DEFAULT_MAX_FILES,
        capture: None,
        cpu_sampling: Default::default(),
        file_mode: super::file::create::DEFAULT_MODE,
        #[cfg(feature = "tracing")]
        spans: Default::default(),
        #[cfg(feature = "otlp")]
        otlp: None,
    }
}

impl Builder {
    /// Makes this process a producer for Perfetto's tracing service
    /// (`traced`): it registers the `track_event` data source with the
    /// categories it knows and records nothing for it until a tracing session
    /// enables it; each session gets the events of the categories its
    /// `TrackEventConfig` selects. The service's socket is
    /// `PERFETTO_PRODUCER_SOCK_NAME` (a path, `@abstract` or `host:port`),
    /// else Perfetto's default. A file output can be on at the same time (it
    /// keeps to [`enable_categories`](Builder::enable_categories)); without
    /// one, [`start`](Builder::start) needs no output. If no service listens
    /// the program runs as usual, says so once on stderr and connects when
    /// the service starts.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let _trace = ringtrace::builder().system_tracing(true).start()?;
    /// ringtrace::trace_instant!("demo", "recorded when a session enables \"demo\"");
    /// # Ok::<(), ringtrace::Error>(())
    /// ```
    pub fn system_tracing(mut self, on: bool) -> Self {
        self.system_tracing = on;
        self
    }

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

    /// The permission bits of the files the session creates (its output,
    /// the parts of [`max_file_bytes`](Builder::max_file_bytes), captures,
    /// the files of [`rotate_output`](crate::rotate_output) and
    /// [`dump_to`](crate::dump_to)), less the process's umask. Default
    /// `0o600`: only the owner reads them, as `perfetto_cmd`'s output;
    /// traces hold the program's data (field values, arguments, addresses).
    /// Widen it (`0o644`) to share them. A file the user named that already
    /// exists keeps its mode when it is replaced.
    ///
    /// The names the session picks itself (parts, captures) are always new
    /// files: a name already taken, by a file of an earlier run, another
    /// user's file or a symlink, is skipped (the numbering goes on past it),
    /// never followed or overwritten.
    ///
    /// # Examples
    ///
    /// ```
    /// let path = std::env::temp_dir().join("ringtrace-doc-mode.pftrace");
    /// # let _ = std::fs::remove_file(&path);
    /// let trace = ringtrace::builder().output(&path).file_mode(0o640).start()?;
    /// trace.stop()?;
    /// # use std::os::unix::fs::PermissionsExt;
    /// # assert_eq!(std::fs::metadata(&path)?.permissions().mode() & 0o7, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn file_mode(mut self, mode: u32) -> Self {
        self.file_mode = mode & 0o777;
        self
    }

    /// Chooses the format explicitly.
    pub fn format(mut self, format: Format) -> Self {
        self.format = Some(format);
        self
    }

    /// Largest ring of one thread (rounded up to a power of two; at least
    /// 512 bytes). Default 1 MiB. A thread's ring starts at 512 bytes and
    /// grows (to 4 KiB, then at least four times larger each time) while the thread records
    /// faster than the flusher drains it, up to this size, as long as
    /// [`buffer_bytes`](Builder::buffer_bytes) has room (the smaller segment
    /// it outgrew is freed once drained). A ring never shrinks: a thread
    /// that was busy once keeps its largest segment, counted in
    /// [`buffer_bytes`](Builder::buffer_bytes), until it exits. The same
    /// holds in flight-recorder mode ([`overwrite`](Builder::overwrite)),
    /// where growing copies the records not yet drained into the new
    /// segment. More than 1 TiB makes
    /// [`start`](Builder::start) fail with [`Error::InvalidConfig`](crate::Error::InvalidConfig).
    ///
    /// Without [`buffer_bytes`](Builder::buffer_bytes), the process-wide
    /// budget follows this size: twice it (rounded), or 32 MiB if that is
    /// more, so that a thread can grow its ring to it while the segments it
    /// outgrew are drained. Both set, with [`buffer_bytes`](Builder::buffer_bytes)
    /// below this size (rounded), no ring could reach it:
    /// [`start`](Builder::start) fails with
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig) rather than cut
    /// it silently.
    pub fn buffer_bytes_per_thread(mut self, bytes: usize) -> Self {
        self.buffer_bytes = Some(bytes);
        self
    }

    /// Memory recording may hold in the whole process, whatever the number
    /// of threads: every thread's ring and bookkeeping (about 1 KiB per
    /// thread besides its ring) is taken from it. Default: 32 MiB, or twice
    /// [`buffer_bytes_per_thread`](Builder::buffer_bytes_per_thread) if that
    /// is more; when both are set, it must be at least the per-thread size (else
    /// [`start`](Builder::start) fails with
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig)). When it
    /// is used up, rings stop growing and events that do not fit are
    /// dropped and counted (a thread with no ring yet gets one as soon as
    /// memory is given back: threads that exit and rings drained after
    /// growing give theirs back). At least 64 KiB: less makes
    /// [`start`](Builder::start) fail with [`Error::InvalidConfig`](crate::Error::InvalidConfig).
    ///
    /// Part of it, at most an eighth, is a pool of ring segments of 4 KiB
    /// to 1 MiB kept mapped in, so that a thread's ring grows without page
    /// faults (which in a VM cost more than recording into the page): at
    /// [`start`](Builder::start), one segment of each size a ring grows
    /// through (4, 16, 64, 256 KiB, 1 MiB, none past
    /// [`buffer_bytes_per_thread`](Builder::buffer_bytes_per_thread);
    /// 1.33 MiB at the defaults, which costs `start` the time to map it in
    /// (timed in the repository's `BENCHMARKS.md`); none with system
    /// tracing only, where nothing
    /// records until a tracing session starts), and the segments rings
    /// give up, kept for the next thread that grows and given back after a
    /// second unused. The stock is given back after 10 s in which no
    /// thread's ring was made or grew, and restocked after the next growth.
    /// The pool only holds memory while as much again stays free in the
    /// budget: under memory pressure it is given back (a thread the budget
    /// refuses a ring or a growth first takes back what the pool holds),
    /// and it is emptied when the session stops.
    pub fn buffer_bytes(mut self, bytes: u64) -> Self {
        self.budget_bytes = Some(bytes);
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
    /// The vDSO does not serve this clock: each read is a system call, two
    /// per scope, each many times a vDSO clock read (measured in the
    /// repository's `BENCHMARKS.md`, "Thread time").
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

    /// Extra labels of the process (JSON `M process_labels`; Perfetto
    /// `process_labels`). See also [`set_process_labels`](crate::events::set_process_labels).
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
}
