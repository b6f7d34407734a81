//! The flusher: a background thread that drains the rings, encodes what it
//! finds and writes it out. Only this thread touches the output.
//!
//! It wakes every few milliseconds: a ring past its high-water mark (half
//! full) is drained at once; every ring is drained each flush interval, on
//! `flush()`, and when the session stops (including rings of threads that
//! are still running at that moment). A ring whose thread exited is drained
//! to the end and then forgotten. In flight-recorder (overwrite) mode the
//! rings are drained as often, into the process-wide `Recorder` instead of
//! the file's encoder; it is written out on `flush()` and at stop.

#![forbid(unsafe_code)]

use crate::encode::{Batch, Context, Encoder, IdMap, ProcessInfo, Sites};
use crate::record::clock::Calibration;
use crate::record::registry::{ThreadRing, REGISTRY};
use crate::record::ring::GROWTH;
use crate::record::sync::Arc;
use crate::session::capture::{Requests, Windows};
use crate::session::recorder::Recorder;
use crate::session::sink::Sink;
use crate::system::data_source::RecordFilter;
use crate::system::feed::SystemFeed;
use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc as StdArc;
use std::time::{Duration, Instant};

/// How often the flusher looks at the rings' fill level.
const POLL: Duration = Duration::from_millis(5);
/// How often a global clock snapshot is written.
const CLOCK_SNAPSHOT_PERIOD: Duration = Duration::from_secs(1);
/// How long `Shared::wait_parked` yields its CPU before it sleeps between
/// looks (a flusher slow to start on a loaded machine).
const PARK_SPIN: Duration = Duration::from_millis(2);
/// How long `Shared::wait_parked` waits at most (`start` then returns with
/// the flusher still on its way: only the first events' timing is at stake).
const PARK_WAIT: Duration = Duration::from_millis(250);
/// Words drained at a time (128 KiB, ~0.1 ms of encoding): between two
/// chunks the flusher makes ready the spare of a ring that grew meanwhile.
const DRAIN_CHUNK_WORDS: usize = 1 << 14;

/// State shared between the session handle and the flusher thread.
pub(crate) struct Shared {
    pub(crate) stop: AtomicBool,
    pub(crate) flush_requested: AtomicU64,
    pub(crate) flush_done: Mutex<u64>,
    pub(crate) flush_cv: Condvar,
    pub(crate) wake: Mutex<()>,
    pub(crate) wake_cv: Condvar,
    /// Capture windows asked of the flusher (`capture`).
    pub(crate) requests: Mutex<Requests>,
    /// Set once the flusher has come to wait for work (or has ended):
    /// `start` returns only then (`Shared::wait_parked`).
    parked: AtomicBool,
}

impl Shared {
    pub(crate) fn new() -> Self {
        Shared {
            stop: AtomicBool::new(false),
            flush_requested: AtomicU64::new(0),
            flush_done: Mutex::new(0),
            flush_cv: Condvar::new(),
            wake: Mutex::new(()),
            wake_cv: Condvar::new(),
            requests: Mutex::new(Requests::default()),
            parked: AtomicBool::new(false),
        }
    }

    /// Returns once the flusher has run up to its first wait for work and
    /// sleeps there (or has ended), or after [`PARK_WAIT`] at most. `start`
    /// calls it so that the flusher is a thread that sleeps, not one just
    /// made and queued: a new thread is queued on its parent's CPU, and
    /// measured here it then waited there a scheduler tick (4 ms) and took
    /// that CPU from the recording thread, its first lap in a fresh session,
    /// while the other CPU idled. A thread that sleeps is placed anew when
    /// it is woken. This thread yields its CPU until the flusher has
    /// released `wake` in its wait (a flusher queued behind us runs and
    /// parks; one on another CPU is waited for), then sleeps between looks.
    /// Bounded: before it parks the flusher writes the trace's first bytes,
    /// and a writer that blocks (a pipe nobody reads) or a system tracing
    /// handshake that hangs must not hold `start` up.
    pub(crate) fn wait_parked(&self) {
        let since = Instant::now();
        loop {
            if self.parked.load(Ordering::Acquire) && self.wake.try_lock().is_some() {
                return;
            }
            let waited = since.elapsed();
            if waited >= PARK_WAIT {
                return;
            }
            if waited < PARK_SPIN {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(100));
            }
        }
    }

    pub(crate) fn wake(&self) {
        let _g = self.wake.lock();
        self.wake_cv.notify_all();
    }
}

/// Totals of a finished session, returned by
/// [`TraceGuard::stop`](crate::TraceGuard::stop).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Trace events written: the events the file holds, in its format's
    /// units. Perfetto writes a scope as two (its begin and its end, each a
    /// `TrackEvent`), Chrome JSON as one (`X`; a `B` and an `E` with
    /// [`JsonScopes::BeginEnd`](crate::JsonScopes::BeginEnd)); an instant, a
    /// counter value or a log message is one in both. Track and thread
    /// descriptions (JSON `M` events) are not counted. A reader that pairs
    /// begins with ends (`ringtrace inspect`) counts slices instead.
    pub events_written: u64,
    /// Events lost, counted as they were recorded (a scope's begin and its
    /// end are one each, as in Perfetto): dropped because a ring was full,
    /// overwritten in flight-recorder mode, too large for a ring, or
    /// recorded while their thread was being torn down. Each loss is also
    /// marked in the trace.
    pub events_lost: u64,
    /// Of those, events too large for a ring.
    pub events_oversized: u64,
    /// Of those, events of threads that had no ring because the memory
    /// budget ([`Builder::buffer_bytes`](crate::Builder::buffer_bytes)) was
    /// used up. Marked on the process track (an events-lost instant with
    /// `reason = "no memory"`), except those of an event racing with the
    /// session's stop.
    pub events_no_memory: u64,
    /// Scope ends that matched no recorded begin (the begin was lost, or the
    /// scope began before the session) and were left out.
    pub unmatched_ends: u64,
    /// Threads that recorded at least one event.
    pub threads: u64,
    /// Bytes written to the output.
    pub bytes_written: u64,
    /// Most memory the rings and their threads' bookkeeping held at once
    /// during the session (at most
    /// [`buffer_bytes`](crate::Builder::buffer_bytes)).
    pub buffer_bytes_peak: u64,
    /// CPU stack samples written ([`Builder::cpu_sampling`](crate::Builder::cpu_sampling)).
    pub cpu_samples: u64,
    /// CPU samples lost: records the kernel dropped (its ring was full) and
    /// samples beyond what waits for the flusher. Also written to the trace
    /// (Perfetto: `kernel_records_lost`).
    pub cpu_samples_lost: u64,
    /// CPU samples whose stack unwinding stopped before the thread's first
    /// frame (the frames found are kept; Perfetto: `unwind_error`).
    pub cpu_stacks_truncated: u64,
    /// Threads that were sampled.
    pub cpu_threads_sampled: u64,
    /// Threads that could not be sampled (memory budget, perf refused).
    pub cpu_threads_unsampled: u64,
}

pub(crate) struct Flusher {
    pub(crate) shared: StdArc<Shared>,
    /// The file output (None: system tracing only).
    pub(crate) output: Option<(Box<dyn Encoder>, Sink)>,
    /// System tracing (the Perfetto producer), if on.
    pub(crate) system: Option<SystemFeed>,
    pub(crate) cal: Calibration,
    pub(crate) process: ProcessInfo,
    pub(crate) overwrite: bool,
    /// Overwrite mode: bytes of the flight recorder's store (taken from the
    /// budget by the session, given back when the flusher ends).
    pub(crate) recorder_bytes: u64,
    pub(crate) interval: Duration,
    /// Rotations and dumps (`capture`).
    pub(crate) windows: Windows,
    /// `GROWTH`'s count before the session's call sites were on.
    pub(crate) growth_at_start: u64,
}

#[derive(Default)]
struct RingState {
    seen_overwritten: u64,
    reported_oversized: u64,
}

/// What the flusher knows of a grown ring's spare segment.
#[derive(Default)]
struct SpareState {
    /// The ring's segment count when its spare was last prepared.
    made: u64,
    /// When that spare was made ready, while it may still be unused.
    since: Option<Instant>,
}

/// The flusher's watch on growing rings: rings that grew get their next
/// segment made at once, between two drains of other records if need be (a
/// fresh thread's ring quadruples every few hundred microseconds, and a
/// pass of the flusher can take milliseconds).
struct Spares {
    seen: u64,
    /// `GROWTH`'s count when the pool was last restocked (at the session's
    /// start: what `start` stocked, if anything).
    stocked: u64,
    rings: IdMap<u32, SpareState>,
}

impl Spares {
    /// Tends the spares if a ring grew since the last look (or if `all`).
    /// Restocks the pool (`restock`: at a pass's start) only once a look
    /// finds no new growth: while a ring is growing its spares come first,
    /// and mapping in the stock (~0.4 ms for 1 MiB of 4 KiB pages) or a
    /// drain chunk in between made a fresh thread's 4 MiB spare late by
    /// that much (measured: the thread then mapped its segment itself).
    /// Not while stopping: the spares and the stock would be given back at
    /// once.
    fn tend_if_grown(&mut self, rings: &[Arc<ThreadRing>], all: bool, restock: bool) {
        let grown = GROWTH.count();
        let quiet = grown == self.seen;
        if !quiet || all {
            self.seen = grown;
            tend_spares(rings, &mut self.rings);
        }
        if restock && quiet && grown != self.stocked {
            self.stocked = grown;
            // Sizes a growth emptied are stocked again, here rather than
            // on a recording thread's first lap; a ring that grows
            // meanwhile gets its spare first (a later pass stocks on).
            // Only after a growth: a stock given back idle stays so until
            // rings grow again (and none is made in system-tracing-only
            // mode until a tracing session turns call sites on).
            REGISTRY
                .budget
                .pool()
                .stock_until(&|| GROWTH.count() != grown);
        }
    }
}

/// A spare segment the producer has not grown into after this long is given
/// back: its thread has stopped growing (the flusher keeps up with it), and
/// the memory is the budget's and the process's.
const SPARE_IDLE: Duration = Duration::from_secs(1);

impl Flusher {
    /// Runs until the session stops; returns the totals and the first write error.
    pub(crate) fn run(self) -> (Stats, Option<std::io::Error>) {
        let _finally = Finally(self.shared.clone());
        let Flusher {
            shared,
            output,
            mut system,
            mut cal,
            process,
            overwrite,
            recorder_bytes,
            interval,
            mut windows,
            growth_at_start,
        } = self;
        let (mut encoder, mut sink) = match output {
            Some((e, s)) => (Some(e), Some(s)),
            None => (None, None),
        };
        let mut recorder = (overwrite && encoder.is_some()).then(|| Recorder::new(recorder_bytes));
        let mut finished: Vec<(Arc<ThreadRing>, u64)> = Vec::new();
        // With system tracing on, call sites also record categories only a
        // tracing session wants: the file keeps to its own filter.
        let mut file_filter = system.as_ref().map(|_| (RecordFilter::default(), u64::MAX));
        let mut file_words = Vec::new();
        let mut sites = Sites::default();
        // The encoders' view of the session, made afresh where needed (`cal`
        // is refreshed in between, so one cannot be kept).
        macro_rules! ctx {
            () => {
                Context {
                    cal: &cal,
                    process: &process,
                    sites: &mut sites,
                }
            };
        }
        let mut out = Vec::with_capacity(WRITE_AT * 2);
        let mut words = Vec::with_capacity(DRAIN_CHUNK_WORDS * 2);
        let mut rings: Vec<Arc<ThreadRing>> = Vec::new();
        let mut state: IdMap<u32, RingState> = IdMap::default();
        let mut stats = Stats::default();
        {
            let mut ctx = ctx!();
            if let Some(e) = encoder.as_deref_mut() {
                e.header(&mut ctx, &mut out);
            }
        }
        write_out(&mut sink, &mut out);
        // When the next full pass and the next clock snapshot are due (a
        // compare per pass; none past what an `Instant` can hold).
        let start_at = Instant::now();
        let mut next_full = start_at.checked_add(interval);
        let mut next_snapshot = start_at.checked_add(CLOCK_SNAPSHOT_PERIOD);
        let mut flush_seen = 0;
        // Rings may have grown before this thread ran: look at once.
        let mut spares = Spares {
            seen: u64::MAX,
            stocked: growth_at_start,
            rings: IdMap::default(),
        };
        {
            let shared = shared.clone();
            GROWTH.set_waker(Some(Box::new(move || shared.wake())));
        }
        let mut last_in_use = (None, u64::MAX);
        // Events of threads without a ring counted and not yet marked.
        let mut no_ring_pending = 0;
        loop {
            {
                let mut g = shared.wake.lock();
                if !shared.stop.load(Ordering::Acquire)
                    && shared.flush_requested.load(Ordering::Acquire) == flush_seen
                    && shared.requests.lock().is_empty()
                    && GROWTH.count() == spares.seen
                {
                    shared.parked.store(true, Ordering::Release);
                    shared.wake_cv.wait_for(&mut g, POLL);
                }
            }
            // The pass's one clock read (interval, snapshot, pool's idle).
            let pass_at = Instant::now();
            let stopping = shared.stop.load(Ordering::Acquire);
            let flush_req = shared.flush_requested.load(Ordering::Acquire);
            let system_full = match system.as_mut() {
                Some(sys) => sys.begin_cycle(&mut ctx!()),
                None => false,
            };
            let window = {
                let mut ctx = ctx!();
                let lost = stats.events_lost + stats.events_oversized;
                windows.before_pass(&shared, &mut encoder, &mut sink, &mut ctx, lost, &mut out)
            };
            // A flight recorder drains the rings as often (into the
            // recorder); it writes out on flush, at stop and into a dump.
            let dump = stopping || window || flush_req != flush_seen;
            let full = dump || system_full || next_full.is_some_and(|at| pass_at >= at);
            // While a dump's window is open, records go straight to its file.
            let dumping = windows.dumping();
            if full {
                cal.refresh();
                next_full = pass_at.checked_add(interval);
            }
            if let (true, Some(rec), Some(e)) = (dump, recorder.as_mut(), encoder.as_deref_mut()) {
                // What the recorder holds is older than what the rings hold:
                // it goes first, then this pass drains the rings straight
                // into the file.
                let mut ctx = ctx!();
                let spill = |out: &mut Vec<u8>| write_if_full(&mut sink, out);
                rec.write_out(e, &mut ctx, &mut out, spill, &mut finished);
            }
            REGISTRY.snapshot(&mut rings);
            // First, before draining: the next segment of each ring that
            // grew, which its thread may need within microseconds.
            if !stopping {
                spares.tend_if_grown(&rings, full, true);
            }
            // The stock's idle clock: a ring made (a new newest sequence)
            // or grown since the last pass. Kept here, off the threads'
            // first events (whose stack depth `tests/memory.rs` measures).
            let in_use = (rings.iter().map(|tr| tr.seq_id).max(), GROWTH.count());
            if in_use != last_in_use {
                last_in_use = in_use;
                REGISTRY.budget.pool().touch();
            }
            REGISTRY
                .budget
                .pool()
                .trim_at(crate::record::budget::ms_at(pass_at));
            let mut gone = Vec::new();
            for tr in &rings {
                let retired = tr.is_retired();
                let hot = tr.ring.used_words() * 2 >= tr.ring.capacity_words() as u64;
                if !(full || retired || hot) {
                    continue;
                }
                let st = state.entry(tr.seq_id).or_default();
                let mut ctx = ctx!();
                // Bounded: a producer still writing cannot keep us here.
                let mut budget = tr.ring.capacity_words() * 2;
                loop {
                    words.clear();
                    let d = tr
                        .ring
                        .drain(&mut words, DRAIN_CHUNK_WORDS, &mut st.seen_overwritten);
                    stats.events_lost += d.overwritten;
                    if d.words == 0 && d.overwritten == 0 {
                        break;
                    }
                    let batch = Batch {
                        thread: tr,
                        words: &words,
                        overwritten: d.overwritten,
                    };
                    if let Some(e) = encoder.as_deref_mut() {
                        windows.wrote(tr.seq_id);
                        let mine = match file_filter.as_mut() {
                            None => batch.words,
                            Some((filter, generation)) => {
                                let now = crate::record::callsite::filter_generation();
                                if *generation != now {
                                    *generation = now;
                                    filter.forget_sites();
                                }
                                filter.select(
                                    tr.seq_id,
                                    &words,
                                    &crate::record::callsite::category_enabled,
                                    ctx.sites,
                                    &mut file_words,
                                );
                                &file_words
                            }
                        };
                        match recorder.as_mut().filter(|_| !(dump || dumping)) {
                            Some(rec) => {
                                stats.events_lost +=
                                    rec.push(tr, mine, d.overwritten, &mut finished);
                            }
                            None => {
                                let mine = Batch {
                                    words: mine,
                                    ..batch
                                };
                                e.batch(&mut ctx, &mine, &mut out);
                            }
                        }
                    }
                    if let Some(sys) = system.as_mut() {
                        sys.batch(&mut ctx, &batch);
                    }
                    write_if_full(&mut sink, &mut out);
                    if !stopping {
                        spares.tend_if_grown(&rings, false, false);
                    }
                    budget = budget.saturating_sub(words.len().max(1));
                    if budget == 0 {
                        break;
                    }
                }
                let oversized = tr.ring.oversized();
                if oversized > st.reported_oversized {
                    let n = oversized - st.reported_oversized;
                    st.reported_oversized = oversized;
                    stats.events_oversized += n;
                    if let Some(e) = encoder.as_deref_mut() {
                        e.note_lost(&mut ctx, tr, n, &mut out);
                    }
                    if let Some(sys) = system.as_mut() {
                        sys.note_lost(&mut ctx, tr, n);
                    }
                }
                if retired && tr.ring.used_words() == 0 {
                    tr.ring.reclaim_spare();
                    // A thread the recorder still holds records of is
                    // finished when they are written out or forgotten.
                    let unmarked = match recorder.as_mut() {
                        Some(rec) => rec.thread_exited(tr),
                        None => Some(0),
                    };
                    if let Some(unmarked) = unmarked {
                        thread_finished(
                            &mut encoder,
                            &mut system,
                            &mut ctx,
                            tr,
                            unmarked,
                            &mut stats,
                            &mut out,
                        );
                    }
                    if let Some(f) = file_filter.as_mut() {
                        f.0.forget_thread(tr.seq_id);
                    }
                    state.remove(&tr.seq_id);
                    spares.rings.remove(&tr.seq_id);
                    gone.push(tr.seq_id);
                }
            }
            gone.sort_unstable();
            REGISTRY.remove(&gone);
            if !finished.is_empty() {
                let mut ctx = ctx!();
                for (tr, unmarked) in finished.drain(..) {
                    thread_finished(
                        &mut encoder,
                        &mut system,
                        &mut ctx,
                        &tr,
                        unmarked,
                        &mut stats,
                        &mut out,
                    );
                }
            }
            // CPU stack samples (`sampling`): to the file's encoder.
            if let Some(e) = encoder.as_deref_mut() {
                let mut ctx = ctx!();
                crate::sampling::take_pending(|v| e.samples(&mut ctx, v, &mut out));
            }
            // Events of threads the budget had no ring for: no stream of
            // theirs can carry the loss, so it is marked on the process
            // track with the count since the last mark (a flight recorder
            // marks it when it writes out).
            no_ring_pending += REGISTRY.no_memory_dropped.swap(0, Ordering::Relaxed);
            if no_ring_pending > 0 && (recorder.is_none() || dump) {
                let count = std::mem::take(&mut no_ring_pending);
                stats.events_no_memory += count;
                let now = cal.now_ns();
                let mut ctx = ctx!();
                if let Some(e) = encoder.as_deref_mut() {
                    e.note_lost_no_ring(&mut ctx, now, count, &mut out);
                }
                if let Some(sys) = system.as_mut() {
                    sys.note_lost_no_ring(&mut ctx, now, count);
                }
            }
            if next_snapshot.is_some_and(|at| pass_at >= at) {
                next_snapshot = pass_at.checked_add(CLOCK_SNAPSHOT_PERIOD);
                let mut ctx = ctx!();
                if let Some(e) = encoder.as_deref_mut() {
                    e.tick(&mut ctx, &mut out);
                }
                if let Some(sys) = system.as_mut() {
                    sys.tick(&mut ctx);
                }
            }
            {
                let mut ctx = ctx!();
                let lost = stats.events_lost + stats.events_oversized;
                windows.after_pass(&mut encoder, &mut sink, &mut ctx, lost, stopping, &mut out);
            }
            if stopping {
                // Threads still running: their drops so far, then close the
                // file. Their spares go back to the budget.
                let mut ctx = ctx!();
                for tr in &rings {
                    tr.ring.reclaim_spare();
                    if !tr.is_retired() || tr.ring.used_words() > 0 {
                        thread_finished(
                            &mut encoder,
                            &mut system,
                            &mut ctx,
                            tr,
                            0,
                            &mut stats,
                            &mut out,
                        );
                    }
                }
                let now = cal.now_ns();
                if let Some(e) = encoder.as_deref_mut() {
                    e.finish(&mut ctx, now, &mut out);
                }
                if let Some(sys) = system.as_mut() {
                    sys.finish(&mut ctx, now);
                }
                write_out(&mut sink, &mut out);
                if let Some(s) = sink.as_mut() {
                    s.flush();
                }
                break;
            }
            if let Some(sys) = system.as_mut() {
                let now = cal.now_ns();
                sys.end_cycle(&mut ctx!(), now);
            }
            write_out(&mut sink, &mut out);
            if let Some(s) = sink.as_mut() {
                s.flush();
            }
            if flush_req != flush_seen {
                flush_seen = flush_req;
                *shared.flush_done.lock() = flush_req;
                shared.flush_cv.notify_all();
            }
        }
        // Totals of the whole session: every file it wrote.
        if let Some(e) = encoder.as_deref() {
            let enc = e.stats();
            stats.events_written = enc.events;
            stats.unmatched_ends = enc.unmatched_ends;
        }
        stats.events_written += windows.finished.events_written;
        stats.unmatched_ends += windows.finished.unmatched_ends;
        // Counted after the last pass (an event racing with the stop): in
        // the stats, not marked.
        stats.events_no_memory +=
            no_ring_pending + REGISTRY.no_memory_dropped.swap(0, Ordering::Relaxed);
        stats.events_lost += stats.events_oversized
            + stats.events_no_memory
            + REGISTRY.teardown_dropped.swap(0, Ordering::Relaxed);
        if let Some(sys) = system.as_ref() {
            stats.events_lost += sys.stats().events_dropped;
        }
        stats.bytes_written =
            sink.as_ref().map_or(0, Sink::bytes_written) + windows.finished.bytes_written;
        stats.buffer_bytes_peak = REGISTRY.budget.peak();
        let cpu = crate::sampling::end();
        stats.cpu_samples = cpu.samples;
        stats.cpu_samples_lost = cpu.lost;
        stats.cpu_stacks_truncated = cpu.truncated;
        stats.cpu_threads_sampled = cpu.threads;
        stats.cpu_threads_unsampled = cpu.threads_unsampled;
        drop(recorder);
        REGISTRY.budget.give_back(recorder_bytes);
        (stats, sink.as_mut().and_then(Sink::take_error))
    }
}

/// However the flusher ends, a panic included: every flush waiting is
/// answered and every capture request queued is refused (a panic's own
/// message reaches `stop()` through the thread's join). The one place this
/// is done.
struct Finally(StdArc<Shared>);

impl Drop for Finally {
    fn drop(&mut self) {
        // A flusher that ended (a panic) before it parked releases `start`.
        self.0.parked.store(true, Ordering::Release);
        GROWTH.set_waker(None);
        crate::session::capture::close_requests(&self.0);
        *self.0.flush_done.lock() = u64::MAX;
        self.0.flush_cv.notify_all();
    }
}

/// Makes ready the next segment of each ring that grew since the last look
/// (`Ring::prepare_spare`), so its thread grows into memory mapped in here
/// rather than on its own slow path; gives back spares left unused for
/// [`SPARE_IDLE`]. Rings that never grew get none: a thread that records a
/// few events holds no more than its first 1 KiB.
fn tend_spares(rings: &[Arc<ThreadRing>], state: &mut IdMap<u32, SpareState>) {
    let now = Instant::now();
    for tr in rings {
        let made = tr.ring.segments_made();
        if made < 2 {
            continue;
        }
        if tr.is_retired() {
            tr.ring.reclaim_spare();
            continue;
        }
        let st = state.entry(tr.seq_id).or_default();
        if st.made != made {
            st.made = made;
            st.since = tr.ring.prepare_spare().then_some(now);
        } else if st.since.is_some_and(|t| now - t >= SPARE_IDLE) {
            tr.ring.reclaim_spare();
            st.since = None;
        }
    }
}

/// Bytes the flusher lets pile up before it writes them out: large enough
/// for few system calls (one per 256 KiB: tens of microseconds against the
/// milliseconds of encoding them), small enough to stay in cache on their
/// way out. This and the sink's copy laid out in pages are most of the
/// flusher's working memory, which is not in the budget: at 1 MiB, with
/// 10,000 threads on a 4 MiB budget, recording grew peak RSS by the budget
/// plus 1.05 to 1.1 MiB whatever the number of threads (the same from 2,000
/// to 10,000 threads); at 256 KiB by the budget plus about 0.6 MiB.
const WRITE_AT: usize = 256 << 10;

/// Writes `out` out once it holds [`WRITE_AT`] bytes.
fn write_if_full(sink: &mut Option<Sink>, out: &mut Vec<u8>) {
    if out.len() >= WRITE_AT {
        write_out(sink, out);
    }
}

/// Writes `out` to the file output, if any (else drops it).
pub(crate) fn write_out(sink: &mut Option<Sink>, out: &mut Vec<u8>) {
    match sink {
        Some(s) => s.write(out),
        None => out.clear(),
    }
}

/// Reports drops not yet marked in the stream, and forgets the thread.
#[allow(clippy::too_many_arguments)]
fn thread_finished(
    encoder: &mut Option<Box<dyn Encoder>>,
    system: &mut Option<SystemFeed>,
    ctx: &mut Context<'_>,
    tr: &ThreadRing,
    unmarked: u64,
    stats: &mut Stats,
    out: &mut Vec<u8>,
) {
    stats.threads += 1;
    stats.events_lost += tr.ring.dropped();
    let pending = tr.ring.pending_lost();
    if let Some(e) = encoder.as_deref_mut() {
        // `unmarked`: losses the flight recorder counted and had no record
        // of the thread left to mark them next to.
        if pending + unmarked > 0 {
            e.note_lost(ctx, tr, pending + unmarked, out);
        }
        e.thread_done(ctx, tr.seq_id, out);
    }
    if let Some(sys) = system.as_mut() {
        if pending > 0 {
            sys.note_lost(ctx, tr, pending);
        }
        sys.thread_done(ctx, tr.seq_id);
    }
}
