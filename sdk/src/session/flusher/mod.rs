//! The flusher: a background thread that drains the rings, encodes what it
//! finds and writes it out. Only this thread touches the outputs.
//!
//! It wakes every few milliseconds: a ring past its high-water mark (half
//! full, or 1 MiB of records in a bigger ring) is drained at once; every ring is drained each flush interval, on
//! `flush()`, and when the session stops (including rings of threads that
//! are still running at that moment). A ring whose thread exited is drained
//! to the end and then forgotten. A pass looks only at the rings that have
//! records (`RingSet`): a ring found drained is made quiet and announces
//! itself when its thread records again or exits (`record::ring::announce`),
//! so threads that recorded once and wait cost a pass nothing. In flight-recorder (overwrite) mode the
//! rings are drained as often, into the process-wide `Recorder` instead of
//! the file's encoder; it is written out on `flush()` and at stop.
//!
//! Each pass is a sequence of named steps (`Flusher::run`); every output
//! (the file, system tracing: `output`) is called once per step.

#![forbid(unsafe_code)]

mod rings;
mod spares;

use rings::RingSet;
use spares::Spares;

use crate::encode::{Batch, Context, IdMap, ProcessInfo, Sites};
use crate::output::{Asked, Item, Outputs, Pass, Tally};
use crate::record::clock::Calibration;
use crate::record::registry::{ThreadRing, REGISTRY};
use crate::record::ring::GROWTH;
use crate::record::sync::Arc;
use crate::session::control::Control;
use crate::stats::Stats;
use std::sync::atomic::Ordering;
use std::sync::Arc as StdArc;
use std::time::{Duration, Instant};

/// How often the flusher looks at the rings' fill level.
const POLL: Duration = Duration::from_millis(5);
/// How often a global clock snapshot is written.
const CLOCK_SNAPSHOT_PERIOD: Duration = Duration::from_secs(1);
/// Words drained at a time (128 KiB, a small fraction of a millisecond of
/// encoding): between two chunks the flusher makes ready the spare of a
/// ring that grew meanwhile.
const DRAIN_CHUNK_WORDS: usize = 1 << 14;
/// Records pending in a ring that make it drained at the next poll
/// whatever its size (1 MiB): a big ring (`buffer_bytes_per_thread(64
/// MiB)`) is not left to fill to half (32 MiB, out of the caches by the
/// time it is read) between two full passes.
const HOT_WORDS: u64 = 1 << 17;

/// What encoders read besides the records: the clock's calibration
/// (refreshed at each full pass, so a `Context` cannot be kept across
/// passes), the process, the call-site cache.
pub(crate) struct Env {
    pub(crate) cal: Calibration,
    pub(crate) process: ProcessInfo,
    pub(crate) sites: Sites,
}

impl Env {
    fn ctx(&mut self) -> Context<'_> {
        Context {
            cal: &self.cal,
            process: &self.process,
            sites: &mut self.sites,
        }
    }
}

/// The background thread's state: what `start` gives it, and what it keeps
/// from one pass to the next.
pub(crate) struct Flusher {
    control: StdArc<Control>,
    outputs: Outputs,
    env: Env,
    /// Overwrite mode: bytes of the flight recorder's store (taken from the
    /// budget by the session, given back when the flusher ends).
    recorder_bytes: u64,
    interval: Duration,
    /// When the next full pass and the next clock snapshot are due (a
    /// compare per pass; none past what an `Instant` can hold).
    next_full: Option<Instant>,
    next_snapshot: Option<Instant>,
    /// The last `flush()` request a pass has answered.
    flush_seen: u64,
    spares: Spares,
    /// The pool's idle clock: the newest ring and `GROWTH`'s count at the
    /// last pass.
    last_in_use: (Option<u32>, u64),
    /// Events of threads without a ring counted and not yet marked.
    no_ring_pending: u64,
    /// This pass leaves losses of threads without a ring for a later one
    /// (an output said so when the pass was planned).
    defer_no_ring_marks: bool,
    rings: RingSet,
    /// The rings of this pass (kept for its allocation).
    visit: Vec<Arc<ThreadRing>>,
    state: IdMap<u32, RingState>,
    /// The drain's buffer (one chunk).
    words: Vec<u64>,
    tally: Tally,
    stats: Stats,
}

/// One pass, as it started.
struct PassPlan {
    /// The pass's one clock read (interval, snapshot, pool's idle).
    at: Instant,
    flush_req: u64,
    /// Every ring with records is drained (else only those half full or
    /// holding `HOT_WORDS`, and those retired).
    full: bool,
    /// Every ring is read, quiet ones too (stop, flush, a capture, an
    /// output's need).
    sweep: bool,
    outputs: Pass,
}

#[derive(Default)]
struct RingState {
    seen_overwritten: u64,
    reported_oversized: u64,
}

impl Flusher {
    /// `growth_at_start`: `GROWTH`'s count before the session's call sites
    /// were on.
    pub(crate) fn new(
        control: StdArc<Control>,
        outputs: Outputs,
        env: Env,
        recorder_bytes: u64,
        interval: Duration,
        growth_at_start: u64,
    ) -> Flusher {
        Flusher {
            control,
            outputs,
            env,
            recorder_bytes,
            interval,
            next_full: None,
            next_snapshot: None,
            flush_seen: 0,
            // Rings may have grown before this thread ran: look at once.
            spares: Spares {
                seen: u64::MAX,
                stocked: growth_at_start,
                rings: IdMap::default(),
                waiting: IdMap::default(),
            },
            last_in_use: (None, u64::MAX),
            no_ring_pending: 0,
            defer_no_ring_marks: false,
            rings: RingSet::default(),
            visit: Vec::new(),
            state: IdMap::default(),
            words: Vec::with_capacity(DRAIN_CHUNK_WORDS * 2),
            tally: Tally::default(),
            stats: Stats::default(),
        }
    }

    /// Runs until the session stops; returns the totals and the first write error.
    pub(crate) fn run(mut self) -> (Stats, Option<std::io::Error>) {
        let _finally = Finally(self.control.clone());
        self.open();
        loop {
            self.wait_for_work();
            let pass = self.begin_pass();
            self.outputs
                .take(&mut self.env.ctx(), &Item::Held, &mut self.tally);
            self.tend_memory(&pass);
            self.drain_rings(&pass);
            self.write_samples();
            self.finish_let_go();
            self.mark_lost_without_ring();
            self.snapshot_clock(&pass);
            let lost = self.stats.events_lost + self.stats.events_oversized;
            self.outputs
                .end(&mut self.env.ctx(), &pass.outputs, lost, &mut self.tally);
            self.activate_triggers();
            if pass.outputs.stopping {
                self.finish_outputs();
                break;
            }
            self.answer_flush(&pass);
        }
        self.totals()
    }

    /// Opens the outputs (the file's header) and arms the growth doorbell.
    fn open(&mut self) {
        self.outputs
            .take(&mut self.env.ctx(), &Item::Open, &mut self.tally);
        let start_at = Instant::now();
        self.next_full = start_at.checked_add(self.interval);
        self.next_snapshot = start_at.checked_add(CLOCK_SNAPSHOT_PERIOD);
        let waker = self.control.waker.clone();
        GROWTH.set_waker(Some(Box::new(move || waker.wake())));
    }

    /// Sleeps until woken or [`POLL`] has passed, unless work is waiting.
    fn wait_for_work(&self) {
        let c = &self.control;
        let seen = (self.flush_seen, self.spares.seen);
        c.waker.sleep_unless(POLL, || {
            c.stop.load(Ordering::Acquire)
                || c.flush_requested.load(Ordering::Acquire) != seen.0
                || c.requests.lock().waiting()
                || GROWTH.count() != seen.1
        });
    }

    /// What this pass does: the outputs take what was asked of them; a
    /// full pass (stop, flush, a capture, an output's need, the interval)
    /// refreshes the clock's calibration. A capture's pass drains the rings
    /// into the flight recorder's store and copies its window from there:
    /// a stop or flush, which writes the store out, waits for the next pass.
    fn begin_pass(&mut self) -> PassPlan {
        let at = Instant::now();
        let flush_req = self.control.flush_requested.load(Ordering::Acquire);
        let asked = Asked {
            stop: self.control.stop.load(Ordering::Acquire),
            flush: flush_req != self.flush_seen,
            lost: self.stats.events_lost + self.stats.events_oversized,
        };
        let wants = self.outputs.plan(&mut self.env.ctx(), &asked);
        self.defer_no_ring_marks = wants.defer_no_ring_marks;
        let capture = wants.capture;
        // A capture's pass serves no flush: the next one does.
        let flush_req = if capture { self.flush_seen } else { flush_req };
        let pass = asked.pass(capture);
        let asked = wants.full;
        let full = capture
            || asked
            || pass.stopping
            || pass.flush
            || self.next_full.is_some_and(|due| at >= due);
        if full {
            self.env.cal.refresh();
            self.next_full = at.checked_add(self.interval);
        }
        self.stats.flusher_passes += 1;
        PassPlan {
            at,
            flush_req,
            full,
            sweep: capture || asked || pass.stopping || pass.flush,
            outputs: pass,
        }
    }

    /// Captures an output fired this pass go to every output (system
    /// tracing tells the tracing service).
    fn activate_triggers(&mut self) {
        if !self.tally.triggers.is_empty() {
            let names = std::mem::take(&mut self.tally.triggers);
            self.outputs.activate_triggers(&names);
        }
    }

    /// Before draining: the next segment of each ring that grew, which its
    /// thread may need within microseconds; the pool's idle clock and trim.
    fn tend_memory(&mut self, pass: &PassPlan) {
        self.rings.follow_registry();
        if !pass.outputs.stopping {
            self.spares.tend_if_grown(&mut self.rings, pass.full, true);
        }
        // The stock's idle clock: a ring made (a new last one listed) or
        // grown since the last pass. Kept here, off the threads' first
        // events (whose stack depth `tests/memory.rs` measures).
        let in_use = (self.rings.all.last().map(|tr| tr.seq_id), GROWTH.count());
        if in_use != self.last_in_use {
            self.last_in_use = in_use;
            REGISTRY.budget.pool().touch();
        }
        REGISTRY
            .budget
            .pool()
            .trim_at(crate::record::budget::ms_at(pass.at));
    }

    /// Looks at the rings with records (every ring on a sweep): drains
    /// those a full pass wants, or those half full or holding `HOT_WORDS`,
    /// or retired; forgets the rings of exited threads once drained to the
    /// end; makes quiet those left empty.
    fn drain_rings(&mut self, pass: &PassPlan) {
        let mut visit = std::mem::take(&mut self.visit);
        self.rings.visits(pass.sweep, &mut visit);
        self.stats.rings_visited += visit.len() as u64;
        let mut gone = Vec::new();
        for tr in &visit {
            let retired = tr.is_retired();
            let used = tr.ring.used_words();
            let hot = used >= HOT_WORDS || used * 2 >= tr.ring.capacity_words() as u64;
            if pass.full || retired || hot {
                self.drain_ring(tr, pass.outputs.stopping);
                if retired && tr.ring.used_words() == 0 {
                    self.retire(tr);
                    gone.push(tr.seq_id);
                    continue;
                }
                // Only a ring just drained may go quiet: a ring made a
                // moment ago, whose thread is about to write its first
                // record, is not sent to the slow path for it.
                self.rings.settle(tr);
            } else if tr.ring.used_words() > 0 {
                self.rings.activate(tr);
            }
        }
        visit.clear();
        self.visit = visit;
        gone.sort_unstable();
        self.rings.forget(&gone);
    }

    /// Drains one ring in chunks into every output (making ready the spare
    /// of a ring that grew meanwhile between two chunks), then marks the
    /// events too large for it.
    fn drain_ring(&mut self, tr: &Arc<ThreadRing>, stopping: bool) {
        let st = self.state.entry(tr.seq_id).or_default();
        let mut ctx = self.env.ctx();
        // Bounded: a producer still writing cannot keep us here.
        let mut budget = tr.ring.capacity_words() * 2;
        loop {
            self.words.clear();
            let d = tr
                .ring
                .drain(&mut self.words, DRAIN_CHUNK_WORDS, &mut st.seen_overwritten);
            self.stats.events_lost += d.overwritten;
            if d.words == 0 && d.overwritten == 0 {
                break;
            }
            let batch = Batch {
                thread: tr,
                words: &self.words,
                overwritten: d.overwritten,
            };
            self.outputs
                .take(&mut ctx, &Item::Batch(tr, &batch), &mut self.tally);
            if !stopping {
                self.spares.tend_if_grown(&mut self.rings, false, false);
            }
            budget = budget.saturating_sub(self.words.len().max(1));
            if budget == 0 {
                break;
            }
        }
        self.stats.events_lost += std::mem::take(&mut self.tally.lost);
        let oversized = tr.ring.oversized();
        if oversized > st.reported_oversized {
            let n = oversized - st.reported_oversized;
            st.reported_oversized = oversized;
            self.stats.events_oversized += n;
            self.outputs
                .take(&mut ctx, &Item::Lost(tr, n), &mut self.tally);
        }
    }

    /// A retired ring drained to the end: its spare goes back, and its
    /// thread is finished unless an output holds records of it still.
    fn retire(&mut self, tr: &Arc<ThreadRing>) {
        tr.ring.reclaim_spare();
        if self.outputs.thread_exited(tr) {
            self.thread_finished(tr);
        }
        self.state.remove(&tr.seq_id);
        self.spares.rings.remove(&tr.seq_id);
        self.spares.waiting.remove(&tr.seq_id);
    }

    /// CPU stack samples taken since the last pass (`sampling`), to the
    /// outputs.
    fn write_samples(&mut self) {
        let (outputs, env, tally) = (&mut self.outputs, &mut self.env, &mut self.tally);
        crate::sampling::take_pending(|v| outputs.take(&mut env.ctx(), &Item::Samples(v), tally));
    }

    /// Threads the outputs held back and have let go of.
    fn finish_let_go(&mut self) {
        for tr in std::mem::take(&mut self.tally.let_go) {
            self.thread_finished(&tr);
        }
    }

    /// Counts a thread's drops and marks those not yet in the stream on
    /// every output, which then forget the thread.
    fn thread_finished(&mut self, tr: &ThreadRing) {
        self.stats.threads += 1;
        self.stats.events_lost += tr.ring.dropped();
        let pending = tr.ring.pending_lost();
        self.outputs.take(
            &mut self.env.ctx(),
            &Item::ThreadDone(tr, pending),
            &mut self.tally,
        );
    }

    /// Events of threads the budget had no ring for: no stream of theirs
    /// can carry the loss, so it is marked on the process track with the
    /// count since the last mark (a flight recorder marks it when it writes
    /// out).
    fn mark_lost_without_ring(&mut self) {
        self.no_ring_pending += REGISTRY.no_memory_dropped.swap(0, Ordering::Relaxed);
        if self.no_ring_pending > 0 && !self.defer_no_ring_marks {
            let count = std::mem::take(&mut self.no_ring_pending);
            self.stats.events_no_memory += count;
            let now_ns = self.env.cal.now_ns();
            self.outputs.take(
                &mut self.env.ctx(),
                &Item::LostNoRing { now_ns, count },
                &mut self.tally,
            );
        }
    }

    /// The periodic clock snapshot, when due.
    fn snapshot_clock(&mut self, pass: &PassPlan) {
        if self.next_snapshot.is_some_and(|due| pass.at >= due) {
            self.next_snapshot = pass.at.checked_add(CLOCK_SNAPSHOT_PERIOD);
            self.outputs
                .take(&mut self.env.ctx(), &Item::Tick, &mut self.tally);
        }
    }

    /// The last pass: threads still running get their drops so far marked,
    /// their spares go back to the budget; then the outputs close.
    fn finish_outputs(&mut self) {
        let rings = std::mem::take(&mut self.rings.all);
        for tr in &rings {
            tr.ring.reclaim_spare();
            if !tr.is_retired() || tr.ring.used_words() > 0 {
                self.thread_finished(tr);
            }
        }
        let now_ns = self.env.cal.now_ns();
        self.outputs.take(
            &mut self.env.ctx(),
            &Item::Close { now_ns },
            &mut self.tally,
        );
    }

    /// A `flush()` the pass served is answered (its output is out).
    fn answer_flush(&mut self, pass: &PassPlan) {
        if pass.flush_req != self.flush_seen {
            self.flush_seen = pass.flush_req;
            self.control.flushed(pass.flush_req);
        }
    }

    /// Totals of the whole session: every output's, and the losses counted
    /// after the last pass.
    fn totals(mut self) -> (Stats, Option<std::io::Error>) {
        let stats = &mut self.stats;
        // Counted after the last pass (an event racing with the stop): in
        // the stats, not marked.
        stats.events_no_memory +=
            self.no_ring_pending + REGISTRY.no_memory_dropped.swap(0, Ordering::Relaxed);
        stats.events_lost += stats.events_oversized
            + stats.events_no_memory
            + REGISTRY.teardown_dropped.swap(0, Ordering::Relaxed);
        let error = self.outputs.totals(stats);
        stats.buffer_bytes_peak = REGISTRY.budget.peak();
        let cpu = crate::sampling::end();
        stats.cpu_samples = cpu.samples;
        stats.cpu_samples_lost += cpu.lost;
        stats.cpu_stacks_truncated = cpu.truncated;
        stats.cpu_threads_sampled = cpu.threads;
        stats.cpu_threads_unsampled = cpu.threads_unsampled;
        stats.cpu_sampling_hz = cpu.hz;
        stats.cpu_samples_no_memory = cpu.no_memory;
        stats.cpu_files_no_memory = cpu.files_no_memory;
        stats.cpu_frames_unnamed = cpu.frames_unnamed;
        let stats = *stats;
        drop(self.outputs);
        REGISTRY.budget.give_back(self.recorder_bytes);
        (stats, error)
    }
}

/// However the flusher ends, a panic included: the growth doorbell is
/// disarmed, every flush waiting is answered and every capture request
/// queued is refused (a panic's own message reaches `stop()` through the
/// thread's join). The one place this is done.
struct Finally(StdArc<Control>);

impl Drop for Finally {
    fn drop(&mut self) {
        GROWTH.set_waker(None);
        self.0.close();
    }
}
