//! Captures: in flight-recorder mode, a window of the recent past written
//! into a file of its own when something asks for it ([`trigger`](crate::trigger), or a
//! slow `tracing` span: `TracingBuilder::capture_slow`).
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

#![forbid(unsafe_code)]

use crate::encode::Context;
use crate::session::capture::{Capture, Formats, Request, Requests};
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
    pub(crate) error: Option<std::io::Error>,
    /// Names to send to the tracing service (`ActivateTriggers`).
    pub(crate) to_service: Vec<String>,
    refused_at_start: u64,
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
            error: None,
            to_service: Vec::new(),
            refused_at_start: REFUSED.load(Ordering::Relaxed),
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
    /// from `recorder` (none without one: not a flight recorder).
    pub(crate) fn write(&mut self, recorder: Option<&Recorder>, ctx: &mut Context<'_>) {
        for c in std::mem::take(&mut self.pending) {
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
            if let Err(e) = self.write_one(&opts, recorder, ctx, &c) {
                self.error.get_or_insert(e);
            }
        }
    }

    fn write_one(
        &mut self,
        opts: &CaptureOptions,
        recorder: &Recorder,
        ctx: &mut Context<'_>,
        c: &Capture,
    ) -> std::io::Result<()> {
        let path = file_name(&opts.pattern, self.next, &c.name);
        self.next += 1;
        let format = Format::from_path(&path).unwrap_or(Format::Perfetto);
        let file = std::fs::File::create(&path)?;
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
        // Slices still open at the window's end end there (marked
        // unfinished by the encoder).
        encoder.finish(ctx, to, &mut out);
        sink.write(&mut out);
        sink.flush();
        if let Some(e) = sink.take_error() {
            return Err(e);
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

/// The pattern's file name for capture `n` named `name` (`{n}`, `{name}`;
/// without `{n}`, the number goes before the extension).
fn file_name(pattern: &std::path::Path, n: u64, name: &str) -> PathBuf {
    let safe: String = name
        .chars()
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
