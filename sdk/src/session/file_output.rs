//! The session's file as an [`Output`]: the file being written (its encoder
//! and sink), the bytes not yet written out, and what stands in front of
//! it: the filter of the file's own categories (with system tracing on, call
//! sites also record categories only a tracing session wants), the flight
//! recorder (overwrite mode: records are held there and written out on
//! `flush()`, at stop and into a dump), the capture windows, which swap
//! files in and out between passes (`capture`, the disk bound's parts
//! too), and the captures copied from the flight recorder into files of
//! their own after a pass (`trigger`).

#![forbid(unsafe_code)]

use crate::encode::{Batch, Context, IdMap};
use crate::output::{Asked, Item, Output, Pass, Tally, Wants};
use crate::record::callsite;
use crate::record::registry::ThreadRing;
use crate::record::sync::Arc;
use crate::sampling::held::HeldSamples;
use crate::session::capture::Captures;
use crate::session::capture::SlowScopes;
use crate::session::control::Control;
use crate::session::file::{write_if_full, write_out, File, WRITE_AT};
use crate::session::recorder::Recorder;
use crate::session::window::Windows;
use crate::stats::Stats;
use crate::system::data_source::RecordFilter;
use std::sync::Arc as StdArc;

pub(crate) struct FileOutput {
    /// The file written now (`None`: no file, as with system tracing only
    /// until a rotation starts one).
    file: Option<File>,
    /// Encoded bytes not written out yet (at [`WRITE_AT`], and after each
    /// pass).
    out: Vec<u8>,
    /// With system tracing on: the file's own categories.
    filter: Option<OwnFilter>,
    /// The flight recorder in front of the file (overwrite mode).
    stage: Stage,
    /// Which file is written now: the session's own, a window's, a part.
    windows: Windows,
    /// Captures and the slow scopes that fire them.
    captures: CaptureRoom,
    /// Where capture requests are queued.
    control: StdArc<Control>,
}

/// The file's own categories with system tracing on (call sites then also
/// record categories only a tracing session wants).
struct OwnFilter {
    filter: RecordFilter,
    /// The filter generation they were selected at.
    generation: u64,
    /// The records of a batch the file keeps: scratch.
    selected: Vec<u64>,
}

/// The flight recorder's stage: the store of the most recent records and
/// the CPU samples held beside it, what a pass does with them (write them
/// out, or hold this pass's records too), and the threads it lets go of.
/// Windows and captures read from it.
struct Stage {
    store: Option<Recorder>,
    /// This pass writes the store out (stop, flush, a capture window).
    dump: bool,
    /// This pass's records go straight to the file, past the store.
    straight: bool,
    /// Threads the store let go of, finished or handed back: scratch.
    finished: Vec<(Arc<ThreadRing>, u64)>,
    /// Losses the store counted for threads it let go of and had no
    /// record of left to mark them next to: marked when they are done.
    unmarked: IdMap<u32, u64>,
    /// The CPU samples held beside the store.
    held: HeldSamples,
    /// A write-out's window: the time (ns) of the oldest record it wrote.
    written_from: Option<u64>,
    held_scratch: Vec<crate::sampling::tables::Sample>,
    /// The sampler has handed samples over: captures wait for their
    /// window's last ones.
    sampled: bool,
}

/// Captures (`trigger`): `captures` is `None` if the session takes none;
/// `slow`, the slow scopes to capture (`capture_slow_scopes`), found in
/// the records drained.
struct CaptureRoom {
    captures: Option<Captures>,
    slow: Option<SlowScopes>,
}

impl FileOutput {
    /// `filtered`: system tracing is on, so the file keeps to its own
    /// filter. `recorder`: flight-recorder mode (a file only).
    pub(crate) fn new(
        file: Option<File>,
        windows: Windows,
        captures: Option<Captures>,
        recorder: Option<Recorder>,
        filtered: bool,
        control: StdArc<Control>,
    ) -> FileOutput {
        FileOutput {
            file,
            out: Vec::with_capacity(WRITE_AT * 2),
            filter: filtered.then(|| OwnFilter {
                filter: RecordFilter::default(),
                generation: u64::MAX,
                selected: Vec::new(),
            }),
            stage: Stage {
                store: recorder,
                dump: false,
                straight: true,
                finished: Vec::new(),
                unmarked: IdMap::default(),
                held: HeldSamples::default(),
                written_from: None,
                held_scratch: Vec::new(),
                sampled: false,
            },
            windows,
            captures: CaptureRoom {
                captures,
                slow: None,
            },
            control,
        }
    }

    /// Slices matching the rule and longer than its threshold are
    /// captured (with captures on: a flight recorder and a pattern).
    pub(crate) fn with_slow_scopes(mut self, slow: SlowScopes) -> Self {
        if self.stage.store.is_some() && self.captures.captures.is_some() {
            self.captures.slow = Some(slow);
        }
        self
    }

    /// The session's own file takes no more records (its hard limit, a
    /// failed write, no next part): only its ending goes in now.
    fn full(&self) -> bool {
        self.windows.full(&self.file, &self.out)
    }

    fn capture_pending(&self) -> bool {
        self.captures
            .captures
            .as_ref()
            .is_some_and(Captures::pending)
    }

    /// A write-out's samples: those held from the oldest record written on
    /// (every held one if no record was), encoded with the whole tables
    /// (the file's encoder writes the entries it has not written yet).
    fn write_held(&mut self, ctx: &mut Context<'_>) {
        if self.stage.held.is_empty() {
            return;
        }
        let lost = self
            .stage
            .held
            .take(self.stage.written_from, &mut self.stage.held_scratch);
        if self.full() {
            self.stage.held.aged_out += self.stage.held_scratch.len() as u64;
            return;
        }
        let (Some(f), samples, out) = (self.file.as_mut(), &self.stage.held_scratch, &mut self.out)
        else {
            return;
        };
        crate::sampling::with_tables(|tables| {
            let view = crate::sampling::SampleView {
                tables,
                samples,
                lost,
            };
            f.encoder.samples(ctx, &view, out);
        });
    }

    /// Threads the recorder let go of: their unmarked losses kept here,
    /// the threads handed to the flusher.
    fn let_go(&mut self, tally: &mut Tally) {
        for (thread, unmarked) in self.stage.finished.drain(..) {
            if unmarked > 0 {
                self.stage.unmarked.insert(thread.seq_id, unmarked);
            }
            tally.let_go.push(thread);
        }
    }
}

/// The steps of a pass ([`Output`]'s items, in their order).
impl FileOutput {
    fn open(&mut self, ctx: &mut Context<'_>) {
        if let Some(f) = self.file.as_mut() {
            f.encoder.header(ctx, &mut self.out);
        }
        write_out(&mut self.file, &mut self.out);
    }

    /// Captures queued at the head of the queue are this pass's (with no
    /// other request: the next pass takes that).
    fn take_captures(&mut self) -> bool {
        let mut refused = Vec::new();
        let into = match self.captures.captures.as_mut() {
            Some(c) => c.pending_mut(),
            None => &mut refused, // `trigger` queues none: not reached
        };
        self.windows.take_captures(&self.control.requests, into);
        // Slow scopes found by the last pass, unless a dump's window is
        // open (its records go straight to its file, not into the store).
        match self.captures.captures.as_mut() {
            Some(c) if !self.windows.dumping() => c.take_found(),
            _ => self.capture_pending(),
        }
    }

    /// Takes a capture request; a dump's file becomes the output now, so
    /// the pass drains the rings into it.
    fn begin_pass(&mut self, ctx: &mut Context<'_>, pass: &Pass, lost: u64) -> bool {
        let window = !self.capture_pending()
            && self.windows.before_pass(
                &self.control.requests,
                &mut self.file,
                ctx,
                lost,
                &mut self.out,
            );
        self.stage.dump = pass.stopping || window || pass.flush;
        self.stage.written_from = None;
        // While a dump's window is open, records go straight to its file.
        self.stage.straight =
            self.stage.store.is_none() || self.stage.dump || self.windows.dumping();
        self.stage.dump
    }

    /// What the recorder holds is older than what the rings hold: it goes
    /// first, then this pass drains the rings straight into the file.
    fn before_drain(&mut self, ctx: &mut Context<'_>, tally: &mut Tally) {
        if !self.stage.dump {
            return;
        }
        let (Some(rec), Some(f)) = (self.stage.store.as_mut(), self.file.as_mut()) else {
            return;
        };
        self.stage.written_from = rec.oldest_ticks().map(|t| ctx.cal.to_ns(t));
        // As `write_if_full`: the store can hold tens of MiB of records.
        let mut carried = None;
        let sink = &mut f.sink;
        let spill = |out: &mut Vec<u8>, events: u64| {
            if out.len() >= WRITE_AT {
                sink.write(out);
                if !sink.failed() {
                    carried = Some(events);
                }
            }
        };
        rec.write_out(
            &mut *f.encoder,
            ctx,
            &mut self.out,
            spill,
            &mut self.stage.finished,
        );
        if let Some(events) = carried {
            f.wrote(events);
        }
        self.let_go(tally);
    }

    fn batch(
        &mut self,
        ctx: &mut Context<'_>,
        thread: &Arc<ThreadRing>,
        batch: &Batch<'_>,
        tally: &mut Tally,
    ) {
        if let Some(slow) = self.captures.slow.as_mut() {
            slow.scan(ctx, batch.thread.seq_id, batch.words);
            let found = slow.found.drain(..);
            if let Some(c) = self.captures.captures.as_mut() {
                // A pass that writes the store out (stop, flush, a dump)
                // leaves no window to copy: such captures are counted
                // suppressed.
                match self.stage.dump {
                    true => c.suppressed += found.len() as u64,
                    false => found.for_each(|f| c.found(f)),
                }
            }
        }
        if let Some(f) = self.file.as_mut() {
            let tr = batch.thread;
            self.windows.wrote(tr.seq_id);
            let mine = match self.filter.as_mut() {
                None => batch.words,
                Some(OwnFilter {
                    filter,
                    generation,
                    selected,
                }) => {
                    let now = callsite::filter_generation();
                    if *generation != now {
                        *generation = now;
                        filter.forget_sites();
                    }
                    filter.select(
                        tr.seq_id,
                        batch.words,
                        &callsite::category_enabled,
                        ctx.sites,
                        selected,
                    );
                    &*selected
                }
            };
            match self.stage.store.as_mut().filter(|_| !self.stage.straight) {
                Some(rec) => {
                    tally.lost +=
                        rec.push(thread, mine, batch.overwritten, &mut self.stage.finished);
                }
                None => {
                    if self.stage.dump && self.stage.store.is_some() {
                        note_oldest(&mut self.stage.written_from, ctx, mine);
                    }
                    let mine = Batch {
                        words: mine,
                        ..*batch
                    };
                    match self.windows.guard() {
                        Some(h) => h.batch(f, ctx, &mine, &mut self.out),
                        None => f.encoder.batch(ctx, &mine, &mut self.out),
                    }
                }
            }
        }
        write_if_full(&mut self.file, &mut self.out);
        self.let_go(tally);
    }

    /// Past a hard limit, losses are counted in `Stats` only.
    fn note_lost(&mut self, ctx: &mut Context<'_>, thread: &ThreadRing, count: u64) {
        if self.full() {
            return;
        }
        if let Some(f) = self.file.as_mut() {
            f.encoder.note_lost(ctx, thread, count, &mut self.out);
        }
    }

    /// A thread the recorder still holds records of is finished when they
    /// are written out or forgotten.
    fn exited(&mut self, thread: &ThreadRing) -> bool {
        if let Some(f) = self.filter.as_mut() {
            f.filter.forget_thread(thread.seq_id);
        }
        match self
            .stage
            .store
            .as_mut()
            .map(|rec| rec.thread_exited(thread))
        {
            None | Some(Some(0)) => true,
            Some(Some(unmarked)) => {
                self.stage.unmarked.insert(thread.seq_id, unmarked);
                true
            }
            Some(None) => false,
        }
    }

    fn thread_done(&mut self, ctx: &mut Context<'_>, thread: &ThreadRing, pending: u64) {
        if let Some(slow) = self.captures.slow.as_mut() {
            slow.thread_done(thread.seq_id);
        }
        // Losses the flight recorder counted and had no record of the
        // thread left to mark them next to.
        let unmarked = match self.stage.store {
            Some(_) => self.stage.unmarked.remove(&thread.seq_id).unwrap_or(0),
            None => 0,
        };
        if let Some(f) = self.file.as_mut() {
            if pending + unmarked > 0 {
                f.encoder
                    .note_lost(ctx, thread, pending + unmarked, &mut self.out);
            }
            f.encoder.thread_done(ctx, thread.seq_id, &mut self.out);
        }
    }

    /// A flight recorder marks losses of threads without a ring when it
    /// writes out.
    fn defers_marks(&self) -> bool {
        self.stage.store.is_some() && !self.stage.dump
    }

    fn note_lost_no_ring(&mut self, ctx: &mut Context<'_>, now_ns: u64, count: u64) {
        if self.full() {
            return;
        }
        if let Some(f) = self.file.as_mut() {
            f.encoder
                .note_lost_no_ring(ctx, now_ns, count, &mut self.out);
        }
    }

    /// With the recorder, samples are held until a write-out (this pass's
    /// too: `after_pass` writes them with its window known).
    fn samples(&mut self, ctx: &mut Context<'_>, view: &crate::sampling::SampleView<'_>) {
        self.stage.sampled = true;
        if let Some(rec) = self
            .stage
            .store
            .as_ref()
            .filter(|_| !self.stage.straight || self.stage.dump)
        {
            self.stage.held.push(view.samples, view.lost);
            if !self.stage.dump {
                if let Some(t) = rec.oldest_ticks() {
                    self.stage.held.forget_before(ctx.cal.to_ns(t));
                }
            }
            return;
        }
        if self.full() {
            return;
        }
        if let Some(f) = self.file.as_mut() {
            f.encoder.samples(ctx, view, &mut self.out);
        }
    }

    fn tick(&mut self, ctx: &mut Context<'_>) {
        if self.full() {
            return;
        }
        if let Some(f) = self.file.as_mut() {
            f.encoder.tick(ctx, &mut self.out);
        }
    }

    /// Writes this pass's captures (the rings were drained into the flight
    /// recorder's store), then finishes a rotation, a dump whose window has
    /// closed, or a part at the disk bound.
    fn after_pass(&mut self, ctx: &mut Context<'_>, pass: &Pass, lost: u64, tally: &mut Tally) {
        if self.stage.dump && self.stage.store.is_some() {
            self.write_held(ctx);
        }
        if let Some(c) = self.captures.captures.as_mut().filter(|c| c.pending()) {
            // At the stop the sampler has read its rings a last time.
            let sampling =
                self.stage.sampled && !self.control.stop.load(std::sync::atomic::Ordering::Acquire);
            c.write(self.stage.store.as_ref(), &self.stage.held, sampling, ctx);
            tally.triggers.append(&mut c.to_service);
        }
        self.windows.after_pass(
            &self.control.requests,
            &mut self.file,
            ctx,
            lost,
            pass.stopping,
            &mut self.out,
        );
    }

    fn end_pass(&mut self, _ctx: &mut Context<'_>) {
        write_out(&mut self.file, &mut self.out);
        if let Some(f) = self.file.as_mut() {
            f.flush();
        }
    }

    /// Records dropped at a hard limit since its first mark are marked
    /// before the file's ending.
    fn finish(&mut self, ctx: &mut Context<'_>, now_ns: u64) {
        if let (Some(f), Some(h)) = (self.file.as_mut(), self.windows.guard()) {
            h.mark(f, ctx, &mut self.out);
        }
        if let Some(f) = self.file.as_mut() {
            f.encoder.finish(ctx, now_ns, &mut self.out);
        }
        self.end_pass(ctx);
    }

    /// Totals of every file the session wrote: this one and those capture
    /// windows finished (the disk bound's parts among them); the captures
    /// written, suppressed and failed, with the first error of each kind of
    /// file. Returns the error of the session's own file (none with parts:
    /// a part's failure is counted as the part's).
    fn add_totals(&mut self, stats: &mut Stats) -> Option<std::io::Error> {
        let done = &self.windows.finished;
        stats.events_written += done.events_written;
        stats.unmatched_ends += done.unmatched_ends;
        stats.bytes_written += done.bytes_written;
        stats.events_dropped_disk += done.events_dropped_disk + self.windows.guard.dropped;
        let (files_removed, parts_failed, part_error) = self.windows.disk_report();
        stats.files_removed += files_removed;
        stats.parts_failed += parts_failed;
        if let Some(c) = self.captures.captures.as_mut() {
            stats.captures_fired += c.fired;
            stats.captures_suppressed += c.suppressed + c.refused();
            stats.captures_failed += c.failed;
            stats.cpu_samples_lost += c.samples_dropped;
            stats.first_capture_error = c.error.as_ref().map(std::io::Error::kind);
        }
        stats.cpu_samples_aged_out += self.stage.held.aged_out;
        let mut error = None;
        if let Some(f) = self.file.as_mut() {
            stats.events_written += f.events_in_file();
            stats.events_dropped_disk += f.events_unwritten();
            stats.unmatched_ends += f.encoder.stats().unmatched_ends;
            stats.bytes_written += f.sink.bytes_written();
            error = f.sink.take_error();
        }
        // The current part's failure is a part's: counted as the others.
        let in_parts = self.windows.in_parts() && self.windows.own();
        let mut part_error = part_error;
        if in_parts {
            if let Some(e) = error.take() {
                stats.parts_failed += 1;
                part_error.get_or_insert(e);
            }
        }
        stats.first_part_error = part_error.as_ref().map(std::io::Error::kind);
        error
    }
}

impl Output for FileOutput {
    /// The captures queued at the head of the queue are this pass's; a
    /// window asked for is taken.
    fn plan(&mut self, ctx: &mut Context<'_>, asked: &Asked) -> Wants {
        let capture = self.take_captures();
        let full = self.begin_pass(ctx, &asked.pass(capture), asked.lost);
        Wants {
            capture,
            full,
            defer_no_ring_marks: self.defers_marks(),
        }
    }

    fn take(&mut self, ctx: &mut Context<'_>, item: Item<'_>, tally: &mut Tally) {
        match item {
            Item::Open => self.open(ctx),
            Item::Held => self.before_drain(ctx, tally),
            Item::Batch(thread, batch) => self.batch(ctx, thread, batch, tally),
            Item::Lost(thread, count) => self.note_lost(ctx, thread, count),
            Item::ThreadDone(thread, pending) => self.thread_done(ctx, thread, pending),
            Item::LostNoRing { now_ns, count } => self.note_lost_no_ring(ctx, now_ns, count),
            Item::Samples(view) => self.samples(ctx, view),
            Item::Tick => self.tick(ctx),
            Item::Close { now_ns } => self.finish(ctx, now_ns),
        }
    }

    fn thread_exited(&mut self, thread: &ThreadRing) -> bool {
        self.exited(thread)
    }

    fn end(&mut self, ctx: &mut Context<'_>, pass: &Pass, lost: u64, tally: &mut Tally) {
        self.after_pass(ctx, pass, lost, tally);
        if !pass.stopping {
            self.end_pass(ctx);
        }
    }

    fn totals(&mut self, stats: &mut Stats) -> Option<std::io::Error> {
        self.add_totals(stats)
    }
}

/// Lowers `from` to the time of `words`' first record (not a loss marker):
/// a write-out's window starts at the oldest record it wrote.
fn note_oldest(from: &mut Option<u64>, ctx: &Context<'_>, words: &[u64]) {
    use crate::record::header::{header_kind, header_len, KIND_LOST};
    let mut i = 0;
    while i + 1 < words.len() {
        let h = words[i];
        if header_kind(h) != KIND_LOST {
            let ns = ctx.cal.to_ns(words[i + 1]);
            *from = Some(from.map_or(ns, |f| f.min(ns)));
            return;
        }
        i += (header_len(h) as usize).max(1);
    }
}
