//! The flusher: a background thread that drains the rings, encodes what it
//! finds and writes it out. Only this thread touches the output.
//!
//! It wakes every few milliseconds: a ring past its high-water mark (half
//! full) is drained at once; every ring is drained each flush interval, on
//! `flush()`, and when the session stops (including rings of threads that
//! are still running at that moment). A ring whose thread exited is drained
//! to the end and then forgotten. In flight-recorder (overwrite) mode the
//! rings are drained as often, into the process-wide `Recorder` instead of
//! the encoder; it is written out on `flush()` and at stop.

use crate::encode::{Batch, Context, Encoder, ProcessInfo, Sites};
use crate::record::clock::Calibration;
use crate::record::registry::{ThreadRing, REGISTRY};
use crate::record::sync::Arc;
use crate::session::recorder::Recorder;
use crate::session::sink::Sink;
use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc as StdArc;
use std::time::{Duration, Instant};

/// How often the flusher looks at the rings' fill level.
const POLL: Duration = Duration::from_millis(5);
/// How often a global clock snapshot is written.
const CLOCK_SNAPSHOT_PERIOD: Duration = Duration::from_secs(1);
/// Words drained per ring visit, so one busy ring cannot starve the others.
const DRAIN_CHUNK_WORDS: usize = 1 << 16;

/// State shared between the session handle and the flusher thread.
pub(crate) struct Shared {
    pub(crate) stop: AtomicBool,
    pub(crate) flush_requested: AtomicU64,
    pub(crate) flush_done: Mutex<u64>,
    pub(crate) flush_cv: Condvar,
    pub(crate) wake: Mutex<()>,
    pub(crate) wake_cv: Condvar,
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
    /// Events written to the trace.
    pub events_written: u64,
    /// Events lost: dropped because a ring was full, overwritten in
    /// flight-recorder mode, too large for a ring, or recorded while their
    /// thread was being torn down. Each loss is also marked in the trace.
    pub events_lost: u64,
    /// Of those, events too large for a ring.
    pub events_oversized: u64,
    /// Of those, events of threads that had no ring because the memory
    /// budget ([`Builder::buffer_bytes`](crate::Builder::buffer_bytes)) was
    /// used up.
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
}

pub(crate) struct Flusher {
    pub(crate) shared: StdArc<Shared>,
    pub(crate) encoder: Box<dyn Encoder>,
    pub(crate) sink: Sink,
    pub(crate) cal: Calibration,
    pub(crate) process: ProcessInfo,
    pub(crate) overwrite: bool,
    /// Overwrite mode: bytes of the flight recorder's store (taken from the
    /// budget by the session, given back when the flusher ends).
    pub(crate) recorder_bytes: u64,
    pub(crate) interval: Duration,
}

struct RingState {
    seen_overwritten: u64,
    reported_oversized: u64,
}

impl Flusher {
    /// Runs until the session stops; returns the totals and the first write error.
    pub(crate) fn run(self) -> (Stats, Option<std::io::Error>) {
        let Flusher {
            shared,
            mut encoder,
            mut sink,
            mut cal,
            process,
            overwrite,
            recorder_bytes,
            interval,
        } = self;
        let mut recorder = overwrite.then(|| Recorder::new(recorder_bytes));
        let mut finished: Vec<Arc<ThreadRing>> = Vec::new();
        let encoder = &mut *encoder;
        let mut sites = Sites::default();
        let mut out = Vec::with_capacity(1 << 20);
        let mut words = Vec::with_capacity(DRAIN_CHUNK_WORDS * 2);
        let mut rings: Vec<Arc<ThreadRing>> = Vec::new();
        let mut state: HashMap<u32, RingState> = HashMap::new();
        let mut stats = Stats::default();
        {
            let mut ctx = Context {
                cal: &cal,
                process: &process,
                sites: &mut sites,
            };
            encoder.header(&mut ctx, &mut out);
        }
        sink.write(&mut out);
        let mut last_full = Instant::now();
        let mut last_snapshot = Instant::now();
        let mut flush_seen = 0;
        loop {
            {
                let mut g = shared.wake.lock();
                if !shared.stop.load(Ordering::Acquire)
                    && shared.flush_requested.load(Ordering::Acquire) == flush_seen
                {
                    shared.wake_cv.wait_for(&mut g, POLL);
                }
            }
            let stopping = shared.stop.load(Ordering::Acquire);
            let flush_req = shared.flush_requested.load(Ordering::Acquire);
            // A flight recorder drains the rings as often (into the
            // recorder); it writes out only on flush and at stop.
            let write_out = stopping || flush_req != flush_seen;
            let full = write_out || last_full.elapsed() >= interval;
            if full {
                cal.refresh();
                last_full = Instant::now();
            }
            REGISTRY.snapshot(&mut rings);
            for tr in &rings {
                let retired = tr.is_retired();
                let hot = tr.ring.used_words() * 2 >= tr.ring.capacity_words() as u64;
                if !(full || retired || hot) {
                    continue;
                }
                let st = state.entry(tr.seq_id).or_insert(RingState {
                    seen_overwritten: 0,
                    reported_oversized: 0,
                });
                let mut ctx = Context {
                    cal: &cal,
                    process: &process,
                    sites: &mut sites,
                };
                // Bounded: a producer still writing cannot keep us here.
                let mut budget = tr.ring.capacity_words() * 2;
                loop {
                    words.clear();
                    let d = tr
                        .ring
                        .drain(&mut words, DRAIN_CHUNK_WORDS, &mut st.seen_overwritten);
                    stats.events_lost += d.overwritten;
                    if d.records == 0 && d.overwritten == 0 {
                        break;
                    }
                    if let Some(rec) = recorder.as_mut() {
                        stats.events_lost += rec.push(tr, &words, d.overwritten, &mut finished);
                    } else {
                        let batch = Batch {
                            thread: tr,
                            words: &words,
                            overwritten: d.overwritten,
                        };
                        encoder.batch(&mut ctx, &batch, &mut out);
                    }
                    if out.len() >= 1 << 20 {
                        sink.write(&mut out);
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
                    encoder.note_lost(&mut ctx, tr, n, &mut out);
                }
                if retired && tr.ring.used_words() == 0 {
                    if !recorder.as_mut().is_some_and(|r| r.thread_exited(tr)) {
                        thread_finished(encoder, &mut ctx, tr, &mut stats, &mut out);
                    }
                    state.remove(&tr.seq_id);
                    REGISTRY.remove(tr.seq_id);
                }
            }
            if let Some(rec) = recorder.as_mut() {
                let mut ctx = Context {
                    cal: &cal,
                    process: &process,
                    sites: &mut sites,
                };
                if write_out {
                    rec.write_out(encoder, &mut ctx, &mut out, &mut finished);
                }
                for tr in finished.drain(..) {
                    thread_finished(encoder, &mut ctx, &tr, &mut stats, &mut out);
                }
            }
            if last_snapshot.elapsed() >= CLOCK_SNAPSHOT_PERIOD {
                last_snapshot = Instant::now();
                let mut ctx = Context {
                    cal: &cal,
                    process: &process,
                    sites: &mut sites,
                };
                encoder.tick(&mut ctx, &mut out);
            }
            if stopping {
                // Threads still running: their drops so far, then close the file.
                let mut ctx = Context {
                    cal: &cal,
                    process: &process,
                    sites: &mut sites,
                };
                for tr in &rings {
                    if !tr.is_retired() || tr.ring.used_words() > 0 {
                        thread_finished(encoder, &mut ctx, tr, &mut stats, &mut out);
                    }
                }
                let now = cal.now_ns();
                encoder.finish(&mut ctx, now, &mut out);
                sink.write(&mut out);
                sink.flush();
                break;
            }
            sink.write(&mut out);
            sink.flush();
            if flush_req != flush_seen {
                flush_seen = flush_req;
                *shared.flush_done.lock() = flush_req;
                shared.flush_cv.notify_all();
            }
        }
        let enc = encoder.stats();
        stats.events_written = enc.events;
        stats.unmatched_ends = enc.unmatched_ends;
        stats.events_no_memory = REGISTRY.no_memory_dropped.swap(0, Ordering::Relaxed);
        stats.events_lost += stats.events_oversized
            + stats.events_no_memory
            + REGISTRY.teardown_dropped.swap(0, Ordering::Relaxed);
        stats.bytes_written = sink.bytes_written();
        stats.buffer_bytes_peak = REGISTRY.budget.peak();
        drop(recorder);
        REGISTRY.budget.give_back(recorder_bytes);
        *shared.flush_done.lock() = u64::MAX;
        shared.flush_cv.notify_all();
        (stats, sink.take_error())
    }
}

/// Reports drops not yet marked in the stream, and forgets the thread.
fn thread_finished(
    encoder: &mut dyn Encoder,
    ctx: &mut Context<'_>,
    tr: &ThreadRing,
    stats: &mut Stats,
    out: &mut Vec<u8>,
) {
    stats.threads += 1;
    stats.events_lost += tr.ring.dropped();
    let pending = tr.ring.pending_lost();
    if pending > 0 {
        encoder.note_lost(ctx, tr, pending, out);
    }
    encoder.thread_done(ctx, tr.seq_id, out);
}
