//! Capture windows: files cut out of a running session without stopping it.
//!
//! * [`rotate_output`](crate::rotate_output): the session's file is finished (complete, loadable)
//!   and recording goes on into a new one, with no gap: the flusher drains
//!   every ring into the old file, closes it, then writes what follows into
//!   the new one. An event is in exactly one of the files (or counted lost).
//! * [`dump_to`](crate::dump_to) (flight-recorder mode): what the rings hold now, plus what is
//!   recorded during `after`, goes into a new complete file; then the
//!   session goes back to its own output and to overwriting. The dump takes
//!   the events it writes out of the rings, so the session's own output and
//!   the dumps never hold the same event twice.
//!
//! Both run on the flusher, which owns every output: the calling thread opens
//! the new file (so a bad path fails at once), queues a [`Request`] and waits
//! for the flusher's answer. The flusher takes one request at a time, and
//! none while a dump's window is open. Recording threads never see any of it.
//!
//! The same queue carries captures (`trigger`: no file opened, no answer
//! waited for), taken at the head of the queue before a pass is planned,
//! and the same switch between passes makes the disk bound's next part
//! (`disk`).
//!
//! Rules: only the flusher touches encoders and sinks; rings are read only
//! through the drain API, in the flusher's normal pass.

#![forbid(unsafe_code)]

use crate::encode::Context;
use crate::session::capture::Capture;
use crate::session::control::{Reply, Request, Requests};
use crate::session::error::Error;
use crate::session::file::guard::HardLimit;
use crate::session::file::parts::DiskLimit;
use crate::session::file::{write_out, File, Formats, Target};
use crate::session::waker::Waker;
use crate::stats::Stats;
use parking_lot::Mutex;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Opens the file, queues the request with `requests`, wakes the flusher
/// and waits for its answer (`rotate_output`, `dump_to`: `formats` and the
/// rest are the session's).
pub(crate) fn ask(
    requests: &Mutex<Requests>,
    waker: &Waker,
    formats: &Formats,
    path: &Path,
    after: Option<Duration>,
) -> Result<Stats, Error> {
    if after.is_some() && !formats.overwrite {
        return Err(Error::InvalidConfig(
            "dump_to needs a flight-recorder session (overwrite(true)); use rotate_output".into(),
        ));
    }
    let target = formats.target(path)?;
    let (tx, rx) = mpsc::channel();
    let request = match after {
        Some(after) => Request::Dump(target, after, tx),
        None => Request::Rotate(target, tx),
    };
    {
        let mut requests = requests.lock();
        if requests.closed {
            return Err(Error::NotRecording);
        }
        requests.queue.push(request);
    }
    waker.wake();
    rx.recv()
        .unwrap_or_else(|_| Err(Error::Flusher("the flusher thread panicked".into())))
}

/// The flusher's side: the open dump window, the totals of finished files.
pub(crate) struct Windows {
    /// The file being written now.
    path: Option<PathBuf>,
    /// It is the session's own output or a part of it.
    own: bool,
    /// A dump in progress: the session's own output, stashed, and when the
    /// window closes.
    dump: Option<(FileDone, Instant, Reply)>,
    /// A rotation to finish after this pass.
    rotate: Option<(Target, Reply)>,
    /// The current file's starting point in the session's loss count, and
    /// the threads written into it.
    lost_at_start: u64,
    threads: HashSet<u32>,
    /// Totals of every file finished so far (written, bytes, unmatched).
    pub(crate) finished: Stats,
    /// What may go into the session's own file (a hard limit, and the
    /// guard that counts what cannot be written).
    pub(crate) guard: HardLimit,
    /// The session's file in parts of a bounded size (`disk`), and how a
    /// new part is made.
    disk: Option<(DiskLimit, Formats)>,
}

impl Windows {
    /// The flusher starts writing the session's output, `path` (`own`:
    /// there is one).
    pub(crate) fn new(path: Option<PathBuf>, own: bool) -> Windows {
        Windows {
            path,
            own,
            dump: None,
            rotate: None,
            lost_at_start: 0,
            threads: HashSet::new(),
            finished: Stats::default(),
            guard: HardLimit::new(u64::MAX),
            disk: None,
        }
    }

    /// The session's file goes on in parts bounded by `limit`.
    pub(crate) fn with_disk_limit(mut self, limit: DiskLimit, formats: Formats) -> Windows {
        self.disk = Some((limit, formats));
        self
    }

    /// The session's file never grows past `max_bytes` (`max_files(1)`).
    pub(crate) fn with_hard_limit(mut self, max_bytes: u64) -> Windows {
        self.guard = HardLimit::new(max_bytes);
        self
    }

    /// The guard of the file written now, if it is the session's own.
    pub(crate) fn guard(&mut self) -> Option<&mut HardLimit> {
        self.own.then_some(&mut self.guard)
    }

    /// Whether the file written now takes no more records (the session's
    /// own, at its limit or failing).
    pub(crate) fn full(&self, file: &Option<File>, out: &[u8]) -> bool {
        match file {
            Some(f) if self.own => self.guard.full(f, out),
            _ => false,
        }
    }

    /// The parts: removed, failed, and the first error (taken).
    pub(crate) fn disk_report(&mut self) -> (u64, u64, Option<std::io::Error>) {
        match self.disk.as_mut() {
            Some((d, _)) => (d.removed, d.failed, d.first_error.take()),
            None => (0, 0, None),
        }
    }

    /// The file written now is the session's own (or a part of it).
    pub(crate) fn own(&self) -> bool {
        self.own
    }

    /// With parts, every file of the session's own is a part: its failure
    /// is counted, not the session's error.
    pub(crate) fn in_parts(&self) -> bool {
        self.disk.is_some()
    }

    /// Before a pass, ahead of [`before_pass`](Windows::before_pass): the
    /// captures queued at the head of the queue go into `into` (none while
    /// a dump's window is open: its records go straight to its file, not
    /// into the flight recorder's store the captures are copied from).
    pub(crate) fn take_captures(&self, requests: &Mutex<Requests>, into: &mut Vec<Capture>) {
        if self.dump.is_some() {
            return;
        }
        let mut requests = requests.lock();
        while matches!(requests.queue.first(), Some(Request::Capture(_))) {
            if let Request::Capture(c) = requests.queue.remove(0) {
                into.push(c);
            }
        }
    }

    /// Before a pass: takes the next request (none while a dump is open).
    /// Returns true if this pass must drain every ring. A dump's file
    /// becomes the output now, so the pass drains the rings into it.
    pub(crate) fn before_pass(
        &mut self,
        requests: &Mutex<Requests>,
        file: &mut Option<File>,
        ctx: &mut Context<'_>,
        lost: u64,
        out: &mut Vec<u8>,
    ) -> bool {
        if self.dump.is_some() {
            return true;
        }
        let request = {
            let mut requests = requests.lock();
            // A capture queued since `take_captures`: the next pass's.
            if matches!(requests.queue.first(), None | Some(Request::Capture(_))) {
                return false;
            }
            requests.queue.remove(0)
        };
        match request {
            Request::Capture(_) => unreachable!("captures are left in the queue above"),
            Request::Rotate(target, reply) => self.rotate = Some((target, reply)),
            Request::Dump(mut target, after, reply) => {
                self.swap_in(file, &mut target, ctx, out);
                let stashed = self.switch_file(target, lost);
                let now = Instant::now();
                // A window too long for the clock: until the session stops.
                let until = now
                    .checked_add(after)
                    .unwrap_or(now + Duration::from_secs(1 << 32));
                self.dump = Some((stashed, until, reply));
                // What else is queued waits for the window to close.
                requests.lock().held = true;
            }
        }
        true
    }

    /// A dump's window is open: records go straight into its file.
    pub(crate) fn dumping(&self) -> bool {
        self.dump.is_some()
    }

    /// Notes that a thread's records went into the current file.
    pub(crate) fn wrote(&mut self, seq_id: u32) {
        self.threads.insert(seq_id);
    }

    /// After a pass: finishes a rotation, or a dump whose window has closed
    /// (or any dump when `stopping`).
    pub(crate) fn after_pass(
        &mut self,
        requests: &Mutex<Requests>,
        file: &mut Option<File>,
        ctx: &mut Context<'_>,
        lost: u64,
        stopping: bool,
        out: &mut Vec<u8>,
    ) {
        if let Some((mut target, reply)) = self.rotate.take() {
            self.swap_in(file, &mut target, ctx, out);
            let old = self.switch_file(target, lost);
            let _ = reply.send(answer(self.finish(old, ctx, out)));
        }
        let closes =
            matches!(&self.dump, Some((_, until, _)) if stopping || Instant::now() >= *until);
        if closes {
            let (mut main, _, reply) = self.dump.take().unwrap();
            requests.lock().held = false;
            // The session's own output comes back, its counts where they
            // were: it wrote nothing meanwhile.
            let t = &mut main.target;
            std::mem::swap(file, &mut t.file);
            std::mem::swap(&mut self.path, &mut t.path);
            std::mem::swap(&mut self.own, &mut t.own);
            let dump = self.switch_file(main.target, lost);
            self.lost_at_start = lost - main.lost;
            self.threads = main.threads;
            let _ = reply.send(answer(self.finish(dump, ctx, out)));
        }
        if !stopping && self.dump.is_none() {
            self.next_part(file, ctx, lost, out);
        }
    }

    /// With a disk limit: ends the current part if it is within one pass of
    /// the limit (or its writes failed), the next part taking over as a
    /// rotation's file does. While no next part can be made, the current
    /// one takes no more records (dropped and counted): the bound holds
    /// whatever fails.
    fn next_part(
        &mut self,
        file: &mut Option<File>,
        ctx: &mut Context<'_>,
        lost: u64,
        out: &mut Vec<u8>,
    ) {
        // Only the session's own file is cut (not one `rotate_output` chose).
        let (Some((limit, formats)), true, Some(f)) = (self.disk.as_mut(), self.own, file.as_ref())
        else {
            return;
        };
        let bytes = f.sink.bytes_written() + out.len() as u64;
        let ends = limit.after_pass(bytes);
        if !ends && !f.sink.failed() {
            return;
        }
        let format = limit.format;
        let next = match limit.may_try(Instant::now()) {
            true => limit.open_next(
                |p, file| formats.writing(p, file, format, true),
                formats.mode,
            ),
            false => None,
        };
        let Some(mut target) = next else {
            self.guard.close();
            return;
        };
        self.swap_in(file, &mut target, ctx, out);
        let mut old = self.switch_file(target, lost);
        if let Some(f) = old.target.file.as_mut() {
            self.guard.mark(f, ctx, out);
        }
        let path = old.target.path.clone();
        let done = self.finish(old, ctx, out);
        self.guard.reopen();
        // Drops while no part could be made are marked in the new one.
        if let Some(f) = file.as_mut() {
            self.guard.mark(f, ctx, out);
        }
        let Some((limit, _)) = self.disk.as_mut() else {
            return;
        };
        let (stats, error) = done;
        let ok = error.is_none();
        if let Some(Error::Io { source, .. }) = error {
            limit.part_failed(source);
        }
        let written = stats.bytes_written;
        if let Some(path) = path {
            limit.finished(path, written, ok);
        }
    }

    /// The current file becomes `target`'s (already swapped in); returns
    /// the previous one, with its starting loss count and threads.
    fn switch_file(&mut self, previous: Target, lost: u64) -> FileDone {
        FileDone {
            target: previous,
            lost: lost - std::mem::replace(&mut self.lost_at_start, lost),
            threads: std::mem::take(&mut self.threads),
        }
    }

    /// Closes a file that is no longer the output; its totals, with its
    /// first error if a write failed (its events encoded but not written
    /// counted in `events_dropped_disk`).
    fn finish(
        &mut self,
        mut done: FileDone,
        ctx: &mut Context<'_>,
        out: &mut Vec<u8>,
    ) -> (Stats, Option<Error>) {
        let t = &mut done.target;
        let Some(f) = t.file.as_mut() else {
            return (Stats::default(), None); // there was no file
        };
        let now = ctx.cal.now_ns();
        f.encoder.finish(ctx, now, out);
        f.write(out);
        f.flush();
        let enc = f.encoder.stats();
        let stats = Stats {
            events_written: f.events_in_file(),
            events_lost: done.lost,
            events_oversized: 0,
            unmatched_ends: enc.unmatched_ends,
            threads: done.threads.len() as u64,
            bytes_written: f.sink.bytes_written(),
            events_dropped_disk: f.events_unwritten(),
            ..Stats::default()
        };
        self.finished.events_written += stats.events_written;
        self.finished.unmatched_ends += stats.unmatched_ends;
        self.finished.bytes_written += stats.bytes_written;
        self.finished.events_dropped_disk += stats.events_dropped_disk;
        let error = f.sink.take_error().map(|e| Error::Io {
            path: t.path.clone(),
            source: e,
        });
        (stats, error)
    }

    /// Makes `target` the output (its header written) and puts the current
    /// output into `target`. Writes what the current output still holds in
    /// `out` first.
    fn swap_in(
        &mut self,
        file: &mut Option<File>,
        target: &mut Target,
        ctx: &mut Context<'_>,
        out: &mut Vec<u8>,
    ) {
        write_out(file, out);
        std::mem::swap(file, &mut target.file);
        std::mem::swap(&mut self.path, &mut target.path);
        std::mem::swap(&mut self.own, &mut target.own);
        if let Some(f) = file.as_mut() {
            f.encoder.header(ctx, out);
        }
        write_out(file, out);
    }
}

/// A finished file's answer to `rotate_output` or `dump_to`: its totals, or
/// its first error.
fn answer((stats, error): (Stats, Option<Error>)) -> Result<Stats, Error> {
    match error {
        Some(e) => Err(e),
        None => Ok(stats),
    }
}

/// A file taken out of service, waiting to be finished.
struct FileDone {
    target: Target,
    /// Events lost while it was the output.
    lost: u64,
    /// Threads written into it.
    threads: HashSet<u32>,
}
