//! The options of what a session puts on disk besides its own file: the
//! disk bound (parts, a hard limit) and captures (where, how often, how
//! many, the slow scopes that fire them).

#![forbid(unsafe_code)]

use super::Builder;
use std::path::{Path, PathBuf};
use std::time::Duration;

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
pub(super) const DEFAULT_MAX_FILES: u64 = 4;
/// The smallest part: room for a part's header and a pass's output.
const MIN_FILE_BYTES: u64 = 64 << 10;

impl Builder {
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
}
