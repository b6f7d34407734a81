//! Captures: in flight-recorder mode, a window of the recent past written
//! into a file of its own when something asks for it ([`trigger`](crate::trigger), or a
//! slow `tracing` span: `Builder::capture_slow`).
//!
//! The caller only queues a [`Capture`] (the window's ends as raw clock
//! ticks) with the session's other requests and wakes the flusher. The
//! flusher drains every ring into the flight recorder's store, then copies
//! the records of the window (from [`Builder::capture_before`] before its
//! start to its end; nothing is taken out of the store) into a new complete
//! file named from [`Builder::capture_to`]'s pattern, at most one per
//! [`Builder::capture_interval`] (later ones are counted as suppressed),
//! the oldest of more than [`Builder::capture_files`] removed. With system
//! tracing, each capture also sends `ActivateTriggers` with its name to the
//! tracing service, so a tracing session configured with that trigger
//! (`STOP_TRACING`, `CLONE_SNAPSHOT`, ...) reacts.
//!
//! With CPU sampling on, a capture file also holds the samples of its
//! window, of every thread (the question a slow scope's capture answers,
//! "where did its time go", may lead to a thread it waited for): those the
//! flight recorder holds beside its records (`sampling::held`), none taken
//! out, encoded a chunk at a time into memory taken from the budget (when
//! it refuses, the window's samples are dropped, counted in
//! `Stats::cpu_samples_lost` and, in Perfetto, marked in the file); the file interns
//! afresh only the mappings, frames and call stacks they use. A queued
//! capture wakes the sampler to read its rings, and while it runs a capture
//! waits until [`SAMPLES_LAG`] after its window's end before it is written.

#![forbid(unsafe_code)]

use crate::encode::{Context, Encoder};
use crate::record::registry::REGISTRY;
use crate::sampling::held::HeldSamples;
use crate::sampling::tables::{Sample, Tables};
use crate::sampling::SampleView;
use crate::session::capture::{Capture, Formats, Request, Requests};
use crate::session::files;
use crate::session::recorder::Recorder;
use crate::session::sink::Sink;
use crate::session::waker::Waker;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

#[allow(unused_imports)] // rustdoc links
use crate::session::builder::Builder;
use crate::session::builder::{CaptureOptions, Format};

/// Captures queued and not yet taken by the flusher, at most.
const MAX_QUEUED: usize = 16;

/// How long after its window's end a capture waits while the session
/// samples: the sampler reads the kernel's rings when a capture is queued
/// (`queue`), so by then it has handed over the window's last samples.
pub(crate) const SAMPLES_LAG: std::time::Duration = std::time::Duration::from_millis(50);

/// Samples of a capture's window encoded at once (their copy is taken
/// from the budget while the capture is written).
const SAMPLES_AT_ONCE: usize = 4096;

/// Captures refused before reaching the flusher (too many queued).
static REFUSED: AtomicU64 = AtomicU64::new(0);

/// Queues `capture` with the session's `requests` and wakes the flusher;
/// false once the flusher has ended or when too many wait.
pub(crate) fn queue(requests: &Mutex<Requests>, waker: &Waker, capture: Capture) -> bool {
    {
        let mut requests = requests.lock();
        if requests.closed() {
            return false;
        }
        if requests.captures() >= MAX_QUEUED {
            REFUSED.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        requests.push(Request::Capture(capture));
    }
    waker.wake();
    crate::sampling::read_now();
    true
}

/// The flusher's side: captures waiting for the pass that drains the rings,
/// the files written, the counts.
pub(crate) struct Captures {
    /// `None`: captures only go to the tracing service.
    opts: Option<CaptureOptions>,
    formats: Formats,
    pending: Vec<Capture>,
    last: Option<Instant>,
    kept: VecDeque<PathBuf>,
    next: u64,
    pub(crate) fired: u64,
    pub(crate) suppressed: u64,
    /// Captures that could not be written, and the first error.
    pub(crate) failed: u64,
    pub(crate) error: Option<std::io::Error>,
    /// Names to send to the tracing service (`ActivateTriggers`).
    pub(crate) to_service: Vec<String>,
    refused_at_start: u64,
    /// Samples of capture windows dropped (the budget refused their copy).
    pub(crate) samples_dropped: u64,
}

impl Captures {
    pub(crate) fn new(opts: Option<CaptureOptions>, formats: Formats) -> Captures {
        Captures {
            opts,
            formats,
            pending: Vec::new(),
            last: None,
            kept: VecDeque::new(),
            next: 1,
            fired: 0,
            suppressed: 0,
            failed: 0,
            error: None,
            to_service: Vec::new(),
            refused_at_start: REFUSED.load(Ordering::Relaxed),
            samples_dropped: 0,
        }
    }

    /// Capture requests taken from the queue: written after this pass.
    pub(crate) fn pending_mut(&mut self) -> &mut Vec<Capture> {
        &mut self.pending
    }

    pub(crate) fn pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Captures refused before the flusher saw them.
    pub(crate) fn refused(&self) -> u64 {
        REFUSED.load(Ordering::Relaxed) - self.refused_at_start
    }

    /// After a pass that drained every ring: writes the pending captures
    /// from `recorder` (none without one: not a flight recorder) and the
    /// samples `held` beside it. `sampling`: the sampler is running, so a
    /// capture whose window ended less than [`SAMPLES_LAG`] ago waits for a
    /// later pass.
    pub(crate) fn write(
        &mut self,
        recorder: Option<&Recorder>,
        held: &HeldSamples,
        sampling: bool,
        ctx: &mut Context<'_>,
    ) {
        let now_ns = ctx.cal.now_ns();
        let lag = SAMPLES_LAG.as_nanos() as u64;
        for c in std::mem::take(&mut self.pending) {
            if sampling && recorder.is_some() && now_ns < ctx.cal.to_ns(c.end).saturating_add(lag) {
                self.pending.push(c);
                continue;
            }
            self.to_service.push(c.name.clone());
            let (Some(recorder), Some(opts)) = (recorder, self.opts.as_ref()) else {
                continue;
            };
            let now = Instant::now();
            if self
                .last
                .is_some_and(|t| now.duration_since(t) < opts.interval)
            {
                self.suppressed += 1;
                continue;
            }
            self.last = Some(now);
            let opts = opts.clone();
            if let Err((path, e)) = self.write_one(&opts, recorder, held, ctx, &c) {
                // The capture's own failure: the session and its file go on.
                eprintln!(
                    "ringtrace: capture {:?} could not be written to {}: {e} (counted in \
                     Stats::captures_failed)",
                    c.name,
                    path.display()
                );
                self.failed += 1;
                self.error.get_or_insert(e);
            }
        }
    }

    fn write_one(
        &mut self,
        opts: &CaptureOptions,
        recorder: &Recorder,
        held: &HeldSamples,
        ctx: &mut Context<'_>,
        c: &Capture,
    ) -> Result<(), (PathBuf, std::io::Error)> {
        // A new file: a name taken (an earlier run's capture, a file or a
        // symlink planted there) is skipped, never followed or replaced.
        let (path, file) = files::create_numbered(&mut self.next, self.formats.mode, |n| {
            file_name(&opts.pattern, n, &c.name)
        })
        .map_err(|e| (file_name(&opts.pattern, self.next, &c.name), e))?;
        let format = Format::from_path(&path).unwrap_or(Format::Perfetto);
        let mut sink = Sink::file(
            file,
            path.display().to_string(),
            crate::session::sink::Units::of(format),
        );
        let mut encoder = self.formats.encoder(format);
        let from = ctx
            .cal
            .to_ns(c.start)
            .saturating_sub(opts.before.as_nanos() as u64);
        let to = ctx.cal.to_ns(c.end);
        let mut out = Vec::new();
        encoder.header(ctx, &mut out);
        recorder.copy_window(
            encoder.as_mut(),
            ctx,
            &mut out,
            |ctx, ts| (from..=to).contains(&ctx.cal.to_ns(ts)),
            |out| {
                if out.len() >= 1 << 20 {
                    sink.write(out);
                }
            },
        );
        self.write_samples(
            held.window(from, to),
            encoder.as_mut(),
            ctx,
            &mut out,
            &mut sink,
        );
        // Slices still open at the window's end end there (marked
        // unfinished by the encoder).
        encoder.finish(ctx, to, &mut out);
        sink.write(&mut out);
        sink.flush();
        if let Some(e) = sink.take_error() {
            // All or nothing: a capture cut short is not left behind.
            let _ = std::fs::remove_file(&path);
            return Err((path, e));
        }
        self.fired += 1;
        self.kept.push_back(path);
        while self.kept.len() as u64 > opts.files {
            if let Some(old) = self.kept.pop_front() {
                let _ = std::fs::remove_file(old);
            }
        }
        Ok(())
    }
}

impl Captures {
    /// A capture's samples, `SAMPLES_AT_ONCE` at a time; all dropped and
    /// marked if the budget refuses their copy.
    fn write_samples<'a>(
        &mut self,
        window: impl Iterator<Item = &'a Sample>,
        encoder: &mut dyn Encoder,
        ctx: &mut Context<'_>,
        out: &mut Vec<u8>,
        sink: &mut Sink,
    ) {
        let mut window = window.peekable();
        if window.peek().is_none() {
            return;
        }
        let bytes = (SAMPLES_AT_ONCE * std::mem::size_of::<Sample>()) as u64;
        let mut dropped = 0;
        if REGISTRY.budget.try_take(bytes) {
            let mut chunk = Vec::with_capacity(SAMPLES_AT_ONCE);
            let mut written = false;
            crate::sampling::with_tables(|tables| {
                written = true;
                loop {
                    chunk.clear();
                    chunk.extend(window.by_ref().take(SAMPLES_AT_ONCE).copied());
                    if chunk.is_empty() {
                        break;
                    }
                    let view = SampleView {
                        tables,
                        samples: &chunk,
                        lost: 0,
                    };
                    encoder.samples(ctx, &view, out);
                    if out.len() >= 1 << 20 {
                        sink.write(out);
                    }
                }
            });
            drop(chunk);
            REGISTRY.budget.give_back(bytes);
            if !written {
                // The sampler's tables are gone (not reached: they last
                // until the flusher's end).
                dropped = window.count() as u64;
            }
        } else {
            dropped = window.count() as u64;
        }
        if dropped > 0 {
            self.samples_dropped += dropped;
            let view = SampleView {
                tables: &Tables::default(),
                samples: &[],
                lost: dropped,
            };
            encoder.samples(ctx, &view, out);
        }
    }
}

/// The pattern's file name for capture `n` named `name` (`{n}`, `{name}`:
/// its first 64 characters; without `{n}`, the number goes before the
/// extension).
fn file_name(pattern: &std::path::Path, n: u64, name: &str) -> PathBuf {
    // At most 64 characters of the name: the file name stays within the
    // file system's limit however long a capture's name is.
    let safe: String = name
        .chars()
        .take(64)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let text = pattern.to_string_lossy();
    if text.contains("{n}") {
        PathBuf::from(text.replace("{n}", &n.to_string()).replace("{name}", &safe))
    } else {
        crate::session::disk::part_path(&PathBuf::from(text.replace("{name}", &safe)), n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_from_the_pattern() {
        let p = std::path::Path::new("/t/slow-{name}-{n}.json");
        assert_eq!(
            file_name(p, 3, "GET /a"),
            PathBuf::from("/t/slow-GET__a-3.json")
        );
        let p = std::path::Path::new("/t/cap.pftrace");
        assert_eq!(file_name(p, 2, "x"), PathBuf::from("/t/cap.2.pftrace"));
    }
}
