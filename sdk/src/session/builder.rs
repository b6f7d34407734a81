//! `Builder`: every option of a session, set before it starts.

#![forbid(unsafe_code)]

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

/// How captures are written (the session's options).
#[derive(Clone, Debug)]
pub(crate) struct CaptureOptions {
    /// File name pattern: `{n}` the capture's number, `{name}` its name.
    pub(crate) pattern: PathBuf,
    pub(crate) before: Duration,
    pub(crate) interval: Duration,
    pub(crate) files: u64,
    /// `capture_slow_scopes`'s patterns and threshold.
    pub(crate) slow_scopes: Option<SlowRule>,
}

/// A slow-slice rule: the patterns (`prefix*`, a whole name or `*`,
/// matched by `record::pattern`) and the threshold, as
/// [`Builder::capture_slow_scopes`] and `Builder::capture_slow` (spans)
/// keep it. The threshold is compared with tick differences, in the
/// flusher (scopes) as on the recording thread (spans): in ticks from the
/// session's clock calibration ([`calibrated`](SlowRule::calibrated), once
/// the session started).
#[derive(Clone, Debug)]
pub(crate) struct SlowRule {
    patterns: Vec<String>,
    threshold: Duration,
    /// `threshold` in clock ticks (set by `calibrated`).
    ticks: u64,
}

impl SlowRule {
    /// The rule of `patterns` (any strings, owned) and `threshold`.
    pub(crate) fn new<I, S>(patterns: I, threshold: Duration) -> SlowRule
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let patterns = patterns
            .into_iter()
            .map(|p| p.as_ref().to_owned())
            .collect();
        SlowRule {
            patterns,
            threshold,
            ticks: crate::record::clock::ticks_in(threshold),
        }
    }

    /// The rule with its threshold in ticks of the running session's clock
    /// (its calibration at start, no measurement of its own).
    pub(crate) fn calibrated(mut self) -> SlowRule {
        self.ticks = crate::record::clock::ticks_in(self.threshold);
        self
    }

    /// Whether `name` (a slice's name, category or target) matches.
    #[inline]
    pub(crate) fn matches(&self, name: &str) -> bool {
        crate::record::pattern::any_matches(&self.patterns, name)
    }

    /// Whether a slice from tick `begin` to tick `end` lasted longer than
    /// the threshold.
    #[inline]
    pub(crate) fn is_slow(&self, begin: u64, end: u64) -> bool {
        end.saturating_sub(begin) > self.ticks
    }
}

/// The capture options before any is set: files `capture-{n}.pftrace`.
fn default_capture() -> CaptureOptions {
    CaptureOptions {
        pattern: "capture-{n}.pftrace".into(),
        before: Duration::from_millis(10),
        interval: Duration::from_secs(10),
        files: 10,
        slow_scopes: None,
    }
}

/// Parts kept on disk by default with [`Builder::max_file_bytes`].
const DEFAULT_MAX_FILES: u64 = 4;
/// The smallest part: room for a part's header and a pass's output.
const MIN_FILE_BYTES: u64 = 64 << 10;

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
    /// 512 bytes). Default 1 MiB. A thread's ring starts at 1 KiB and
    /// grows (at least four times larger each time) while the thread records
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
    /// 1.33 MiB at the defaults, which costs `start` the time to map it in,
    /// a fraction of a millisecond (measured in the repository's
    /// `BENCHMARKS.md`); none with system tracing only, where nothing
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

    /// Bounds what the session keeps on disk: its file is written in
    /// numbered parts of about `bytes` each (`trace.pftrace`, then
    /// `trace.1.pftrace`, `trace.2.pftrace`, ... beside it), and the oldest
    /// parts are removed so that the parts on disk never exceed `bytes`
    /// times [`max_files`](Builder::max_files) plus one flusher pass's
    /// output. Each part is a complete trace that loads on its own (Perfetto:
    /// its sequences start afresh, descriptors and interned names included;
    /// JSON: a document of its own) and every event is in exactly one part;
    /// a scope open across the switch has its begin in one part and its end
    /// in the next (counted in [`Stats::unmatched_ends`](crate::Stats)). A
    /// part ends after the flusher pass that brings it within one pass's
    /// output (the largest so far) of `bytes`, so parts stay near the limit
    /// and rarely pass it. [`Stats::files_removed`](crate::Stats) counts the
    /// parts removed; [`Stats::bytes_written`](crate::Stats) counts every
    /// part. Only for a file [`output`](Builder::output) (not a writer); a
    /// file given to [`rotate_output`](crate::rotate_output) is not cut.
    ///
    /// Parts are new files: a part's name already taken (an earlier run's
    /// part, a directory, a symlink) is skipped. If no next part can be
    /// made (or a part's writes fail), the bound still holds: the current
    /// part takes no more events, which are dropped and counted in
    /// [`Stats::events_dropped_disk`](crate::Stats) until a part can be made
    /// (tried again after 0.1 s, up to every second); each failure is
    /// counted in [`Stats::parts_failed`](crate::Stats) and said on
    /// stderr. The production guide's "When the disk fails" has each case.
    /// Also `RINGTRACE_MAX_FILE_BYTES` in [`init_from_env`](crate::init_from_env).
    ///
    /// # Examples
    ///
    /// ```
    /// let dir = std::env::temp_dir().join("ringtrace-doc-parts");
    /// # let _ = std::fs::remove_dir_all(&dir);
    /// std::fs::create_dir_all(&dir)?;
    /// let trace = ringtrace::builder()
    ///     .output(dir.join("trace.json"))
    ///     .max_file_bytes(1 << 20) // parts of 1 MiB,
    ///     .max_files(8) //            8 MiB on disk at most
    ///     .start()?;
    /// ringtrace::trace_instant!("recorded");
    /// trace.stop()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn max_file_bytes(mut self, bytes: u64) -> Self {
        self.max_file_bytes = Some(bytes.max(MIN_FILE_BYTES));
        self
    }

    /// Parts kept on disk with [`max_file_bytes`](Builder::max_file_bytes)
    /// (the part being written included; default 4). Also
    /// `RINGTRACE_MAX_FILES` in [`init_from_env`](crate::init_from_env).
    ///
    /// `max_files(1)` is a hard limit without rotation: the one file is
    /// never cut, and once it holds `max_file_bytes`, later events are
    /// dropped, counted in
    /// [`Stats::events_dropped_disk`](crate::Stats::events_dropped_disk)
    /// (apart from ring losses) and marked in the trace (an events-lost
    /// instant on the process track, `reason = "disk limit"`, where the drop
    /// began, and one with the rest before the file's ending). The file
    /// stays complete and loadable: whole Perfetto packets, a closed JSON
    /// document. It exceeds `max_file_bytes` by at most the encoding of
    /// 1 KiB of records (near the limit the flusher encodes that much at a
    /// time: about 1 KiB in Perfetto, 4 KiB in JSON), plus the two marks
    /// and the file's ending. Past the
    /// limit, clock snapshots, ring-loss marks and CPU samples are no
    /// longer written either (losses stay counted in
    /// [`Stats`](crate::Stats)). Not with [`overwrite`](Builder::overwrite)
    /// (a flight recorder writes its store out whole): `start()` returns
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig). The marks are
    /// made when the flusher finds the file full (the first) and at stop
    /// (the rest). A file [`rotate_output`](crate::rotate_output) switches
    /// to is not bounded.
    ///
    /// ```
    /// let dir = std::env::temp_dir().join("ringtrace-doc-hard-limit");
    /// # let _ = std::fs::remove_dir_all(&dir);
    /// std::fs::create_dir_all(&dir)?;
    /// let trace = ringtrace::builder()
    ///     .output(dir.join("trace.pftrace"))
    ///     .max_file_bytes(64 << 20) // one file, 64 MiB at most:
    ///     .max_files(1) //             events past it dropped and counted
    ///     .start()?;
    /// ringtrace::trace_instant!("recorded");
    /// let stats = trace.stop()?;
    /// assert_eq!(stats.events_dropped_disk, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn max_files(mut self, files: u64) -> Self {
        self.max_files = files.max(1);
        self
    }

    /// Flight-recorder mode: where captures go ([`trigger`](crate::trigger),
    /// slow `tracing` spans: `Builder::capture_slow`), each a new
    /// complete file named from `pattern`: `{n}` is the capture's number
    /// (from 1), `{name}` its name (its first 64 characters; characters other than ASCII letters,
    /// digits, `-` and `_` made `_`); without `{n}` the number goes before
    /// the extension (`slow.pftrace` → `slow.1.pftrace`). The extension
    /// picks the format. Each capture is a new file: a number whose name is
    /// taken (an earlier run's capture, a symlink) is skipped, so a restart
    /// never overwrites the last run's captures. A capture that cannot be
    /// written is counted in [`Stats::captures_failed`](crate::Stats) and
    /// said on stderr; the session goes on. A capture holds what was recorded from
    /// [`capture_before`](Builder::capture_before) before the window's start
    /// (the trigger, or the slow span's creation) to its end, on every
    /// thread; the flusher copies it from the flight recorder's store (the
    /// session's own output still gets those events). At most one capture
    /// per [`capture_interval`](Builder::capture_interval), at most
    /// [`capture_files`](Builder::capture_files) files kept (the oldest
    /// removed); [`Stats`](crate::Stats) counts captures fired and
    /// suppressed. Without [`overwrite`](Builder::overwrite)`(true)` no
    /// file is written.
    ///
    /// With whole-request sampling (`Builder::sample_ratio` below 1,
    /// root patterns or a hook), a request sampling did not keep is not
    /// recorded: it is never captured, however slow, and a capture's window
    /// holds only the kept requests' spans (the macros' scopes are not
    /// sampled). Building a layer or subscriber with both says so once on
    /// stderr.
    pub fn capture_to(mut self, pattern: impl AsRef<Path>) -> Self {
        let c = self.capture.get_or_insert_with(default_capture);
        c.pattern = pattern.as_ref().to_path_buf();
        self
    }

    /// How long before a capture's window it starts (default 10 ms).
    pub fn capture_before(mut self, before: Duration) -> Self {
        self.capture.get_or_insert_with(default_capture).before = before;
        self
    }

    /// At most one capture per `interval` (default 10 s); later ones are
    /// counted as suppressed.
    pub fn capture_interval(mut self, interval: Duration) -> Self {
        self.capture.get_or_insert_with(default_capture).interval = interval;
        self
    }

    /// Flight-recorder mode: each slice recorded on a thread whose name or
    /// category matches one of `patterns` (`prefix*` or a whole name) and
    /// that lasts longer than `threshold` is captured whole, as
    /// [`trigger`](crate::trigger) does (the capture named after the
    /// slice): what every thread recorded from
    /// [`capture_before`](Builder::capture_before) before its begin to its
    /// end goes into a new file ([`capture_to`](Builder::capture_to)), at
    /// most one per [`capture_interval`](Builder::capture_interval). Slices
    /// are those of [`trace_scope!`](crate::trace_scope), `#[traced]`
    /// functions (and each poll of a `#[traced] async fn`, whose whole life,
    /// its async range, is matched too), typed
    /// [`events`](crate::events) slices (`Category::scope`, matched by the
    /// slice's name or its category) and `tracing` spans' entries (for a
    /// span's whole life, from creation to close, use
    /// `Builder::capture_slow`).
    ///
    /// The flusher finds them in the records it drains, so the recording
    /// thread pays nothing for the rule; a capture is written at the
    /// flusher's next pass after the one that read the slice's end (within
    /// about two [`flush_interval`](Builder::flush_interval)s of it). A
    /// slice whose end is read by a pass that writes the recorder out (the
    /// session's last, a [`flush`](crate::flush)) has no window left to
    /// copy: it is counted in `Stats::captures_suppressed`. Needs
    /// [`overwrite`](Builder::overwrite)`(true)` (captures are copied from
    /// the flight recorder's store); without it nothing is captured. A
    /// scope whose begin or end was lost (full ring) is not matched.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let dir = std::env::temp_dir();
    /// let trace = ringtrace::builder()
    ///     .output(dir.join("ringtrace-doc-slow-scopes.pftrace"))
    ///     .overwrite(true)
    ///     .capture_to(dir.join("ringtrace-doc-slow-scope-{n}.pftrace"))
    ///     .capture_slow_scopes(["handle*"], Duration::from_millis(20))
    ///     .flush_interval(Duration::from_millis(10))
    ///     .start()?;
    /// {
    ///     ringtrace::trace_scope!("handle_request");
    ///     std::thread::sleep(Duration::from_millis(25));
    /// }
    /// std::thread::sleep(Duration::from_millis(50)); // two flusher passes
    /// assert_eq!(trace.stop()?.captures_fired, 1);
    /// # Ok::<(), ringtrace::Error>(())
    /// ```
    pub fn capture_slow_scopes<I, S>(mut self, patterns: I, threshold: Duration) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.capture.get_or_insert_with(default_capture).slow_scopes =
            Some(SlowRule::new(patterns, threshold));
        self
    }

    /// Capture files kept (default 10, at least 1); the oldest go.
    pub fn capture_files(mut self, files: u64) -> Self {
        self.capture.get_or_insert_with(default_capture).files = files.max(1);
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
