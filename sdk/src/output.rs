//! The output seam: where the flusher's drained records go.
//!
//! The flusher drains each ring once per pass and hands every [`Output`] the
//! same items, one call per item for all of them ([`Outputs`]). A pass, as
//! an output sees it, is three calls:
//!
//! 1. [`plan`](Output::plan): what was asked of the output since the last
//!    pass (a window, a capture, a flush of the tracing service); it says
//!    what it needs of this pass ([`Wants`]).
//! 2. [`take`](Output::take) for each [`Item`], in the order the flusher
//!    meets them: the records it held from earlier passes go first
//!    ([`Item::Held`]), then each ring's batches and losses, the threads
//!    finished, the losses of threads without a ring, CPU samples, clock
//!    snapshots. [`thread_exited`](Output::thread_exited) is asked when a
//!    ring is drained for good.
//! 3. [`end`](Output::end): what the pass made goes out. The last pass
//!    ([`Pass::stopping`]) then hands the threads still running
//!    ([`Item::ThreadDone`]) and closes the stream ([`Item::Close`]).
//!
//! Captures an output fires are handed to every output
//! ([`activate_triggers`](Output::activate_triggers)); at the end the
//! session adds each output's [`totals`](Output::totals).
//!
//! Three implement it: the session's own output (`session::file_output`:
//! its file, the flight recorder in front of it, windows and captures),
//! system tracing's feed (`system::feed`: one Perfetto encoder per tracing
//! session of `traced`) and the OTLP export (`otlp`, feature `otlp`: spans
//! handed to an exporter thread). A new destination is one more implementation,
//! pushed into [`Outputs`] when the session starts: `output/count_by_name.rs`
//! (a test) is one, written from this page alone.
//!
//! Rules: only the flusher thread calls outputs; an output never reads a
//! ring (it gets drained records), and every loss it causes is reported
//! back through [`Tally`] or [`Output::totals`].

#![forbid(unsafe_code)]

use crate::encode::{Batch, Context};
use crate::record::registry::ThreadRing;
use crate::record::sync::Arc;
use crate::sampling::SampleView;
use crate::stats::Stats;

/// What the session's handle asked of this pass, before the outputs plan it.
#[derive(Clone, Copy)]
pub(crate) struct Asked {
    /// The session stops.
    pub(crate) stop: bool,
    /// `flush()` was called since the last pass that flushed.
    pub(crate) flush: bool,
    /// The session's loss count so far.
    pub(crate) lost: u64,
}

impl Asked {
    /// The pass as an output that takes `capture` for its captures sees it:
    /// a capture's pass defers the stop and the flush to the next one (a
    /// capture is copied from a store they empty).
    pub(crate) fn pass(&self, capture: bool) -> Pass {
        Pass {
            stopping: self.stop && !capture,
            flush: self.flush && !capture,
        }
    }
}

/// What an output needs of a pass ([`Output::plan`]).
#[derive(Default, Clone, Copy)]
pub(crate) struct Wants {
    /// This pass is a capture's: it drains every ring; the stop or flush
    /// asked waits for the next pass. Only the session's own output takes
    /// captures, so every output agrees on [`Asked::pass`].
    pub(crate) capture: bool,
    /// Every ring drained (a flush from the tracing service, a window).
    pub(crate) full: bool,
    /// Losses of threads without a ring wait for a later pass (a flight
    /// recorder marks them when it writes out).
    pub(crate) defer_no_ring_marks: bool,
}

impl Wants {
    fn or(self, o: Wants) -> Wants {
        Wants {
            capture: self.capture | o.capture,
            full: self.full | o.full,
            defer_no_ring_marks: self.defer_no_ring_marks | o.defer_no_ring_marks,
        }
    }
}

/// A pass, as outputs see it once planned.
pub(crate) struct Pass {
    /// The session stops: this is its last pass.
    pub(crate) stopping: bool,
    /// `flush()` was called: everything recorded so far is written out.
    pub(crate) flush: bool,
}

/// What outputs hand back to the flusher during a pass.
#[derive(Default)]
pub(crate) struct Tally {
    /// Events an output had to forget (the flight recorder's oldest).
    pub(crate) lost: u64,
    /// Threads an output held back when their rings were drained for good
    /// ([`Output::thread_exited`]) and has let go of since: the flusher
    /// finishes them on every output after the drain.
    pub(crate) let_go: Vec<Arc<ThreadRing>>,
    /// Names of the captures an output fired this pass: the flusher hands
    /// them to every output ([`Output::activate_triggers`]).
    pub(crate) triggers: Vec<String>,
}

/// What the flusher hands an output, in the order of a pass.
pub(crate) enum Item<'a> {
    /// Once, before the first pass: what opens the stream (a file's header).
    Open,
    /// The rings are about to be drained (the clock refreshed if the pass
    /// is full): records held from earlier passes go out first.
    Held,
    /// One drained batch of a thread's records.
    Batch(&'a Arc<ThreadRing>, &'a Batch<'a>),
    /// Events of a thread lost outside its records (too large for its ring).
    Lost(&'a ThreadRing, u64),
    /// A thread is finished: its pending losses (counted, not yet marked in
    /// any stream) are marked, with any the output held, and its state is
    /// forgotten.
    ThreadDone(&'a ThreadRing, u64),
    /// Events of threads without a ring lost, at this time (ns).
    LostNoRing { now_ns: u64, count: u64 },
    /// CPU stack samples; outputs without them ignore them.
    Samples(&'a SampleView<'a>),
    /// Periodic packets (clock snapshots).
    Tick,
    /// The session's last pass, after its [`end`](Output::end) and the last
    /// threads' `ThreadDone`: the stream closes at this time (ns).
    Close { now_ns: u64 },
}

/// One place the drained records go (module docs: a pass is `plan`, `take`
/// for each item, `end`).
pub(crate) trait Output: Send {
    /// Takes what was asked of this output since the last pass; what it
    /// needs of this one.
    fn plan(&mut self, ctx: &mut Context<'_>, asked: &Asked) -> Wants;
    /// One item of the pass.
    fn take(&mut self, ctx: &mut Context<'_>, item: Item<'_>, tally: &mut Tally);
    /// `thread`'s ring is drained for good. False if the output holds
    /// records of it still: it hands the thread back through
    /// [`Tally::let_go`] once they are written out or forgotten.
    fn thread_exited(&mut self, _thread: &ThreadRing) -> bool {
        true
    }
    /// After the pass's items: captures fired go into [`Tally::triggers`];
    /// what the pass made goes out. On the last pass ([`Pass::stopping`])
    /// the stream stays open for the last threads' marks and closes with
    /// [`Item::Close`].
    fn end(&mut self, ctx: &mut Context<'_>, pass: &Pass, lost: u64, tally: &mut Tally);
    /// Captures fired this pass (by any output), by name: system tracing
    /// sends them to the tracing service as `ActivateTriggers`.
    fn activate_triggers(&mut self, _names: &[String]) {}
    /// Adds this output's part to the session's totals; the first error of
    /// the session's own file, if any.
    fn totals(&mut self, stats: &mut Stats) -> Option<std::io::Error>;
}

/// The outputs of a session, each called once per step, in order.
#[derive(Default)]
pub(crate) struct Outputs(Vec<Box<dyn Output>>);

impl Outputs {
    /// Adds an output (at start: the flusher owns them once it runs).
    pub(crate) fn push(&mut self, output: impl Output + 'static) {
        self.0.push(Box::new(output));
    }

    #[cfg(test)]
    pub(crate) fn push_boxed(&mut self, output: Box<dyn Output>) {
        self.0.push(output);
    }

    /// What the pass must be: every output asked, their wants together.
    pub(crate) fn plan(&mut self, ctx: &mut Context<'_>, asked: &Asked) -> Wants {
        let mut wants = Wants::default();
        for o in &mut self.0 {
            wants = wants.or(o.plan(ctx, asked));
        }
        wants
    }

    pub(crate) fn take(&mut self, ctx: &mut Context<'_>, item: &Item<'_>, tally: &mut Tally) {
        for o in &mut self.0 {
            o.take(ctx, item.reborrow(), tally);
        }
    }

    /// True if no output holds the thread back (every one is told).
    pub(crate) fn thread_exited(&mut self, thread: &ThreadRing) -> bool {
        let mut now = true;
        for o in &mut self.0 {
            now &= o.thread_exited(thread);
        }
        now
    }

    pub(crate) fn end(&mut self, ctx: &mut Context<'_>, pass: &Pass, lost: u64, tally: &mut Tally) {
        self.0
            .iter_mut()
            .for_each(|o| o.end(ctx, pass, lost, tally));
    }

    pub(crate) fn activate_triggers(&mut self, names: &[String]) {
        self.0.iter_mut().for_each(|o| o.activate_triggers(names));
    }

    /// Every output's totals added; the first error.
    pub(crate) fn totals(&mut self, stats: &mut Stats) -> Option<std::io::Error> {
        let mut error = None;
        for o in &mut self.0 {
            let e = o.totals(stats);
            error = error.or(e);
        }
        error
    }
}

impl Item<'_> {
    /// The same item again (for the next output).
    fn reborrow(&self) -> Item<'_> {
        match *self {
            Item::Open => Item::Open,
            Item::Held => Item::Held,
            Item::Batch(t, b) => Item::Batch(t, b),
            Item::Lost(t, n) => Item::Lost(t, n),
            Item::ThreadDone(t, n) => Item::ThreadDone(t, n),
            Item::LostNoRing { now_ns, count } => Item::LostNoRing { now_ns, count },
            Item::Samples(v) => Item::Samples(v),
            Item::Tick => Item::Tick,
            Item::Close { now_ns } => Item::Close { now_ns },
        }
    }
}

#[cfg(all(test, feature = "enable"))]
mod count_by_name;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encode::{ProcessInfo, Sites};
    use crate::record::clock::Calibration;

    /// An output that notes what it was handed, asks for a capture and a
    /// full pass or holds a thread as told, and fails its totals if told.
    struct Probe {
        calls: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
        name: &'static str,
        wants_full: bool,
        holds: bool,
        error: bool,
    }

    impl Probe {
        fn note(&self, what: &str) {
            self.calls
                .lock()
                .unwrap()
                .push(format!("{} {what}", self.name));
        }
    }

    impl Output for Probe {
        fn plan(&mut self, _: &mut Context<'_>, _: &Asked) -> Wants {
            self.note("plan");
            Wants {
                capture: self.wants_full,
                full: self.wants_full,
                defer_no_ring_marks: false,
            }
        }
        fn take(&mut self, _: &mut Context<'_>, item: Item<'_>, _: &mut Tally) {
            let what = match item {
                Item::Open => "open".into(),
                Item::Held => "held".into(),
                Item::Batch(t, b) => format!("batch {} {}", t.seq_id, b.words.len()),
                Item::Lost(t, n) => format!("lost {} {n}", t.seq_id),
                Item::ThreadDone(t, n) => format!("thread_done {} {n}", t.seq_id),
                Item::LostNoRing { count, .. } => format!("lost_no_ring {count}"),
                Item::Samples(_) => "samples".into(),
                Item::Tick => "tick".into(),
                Item::Close { .. } => "close".into(),
            };
            self.note(&what);
        }
        fn thread_exited(&mut self, t: &ThreadRing) -> bool {
            self.note(&format!("thread_exited {}", t.seq_id));
            !self.holds
        }
        fn end(&mut self, _: &mut Context<'_>, _: &Pass, _: u64, tally: &mut Tally) {
            self.note("end");
            tally.triggers.push(self.name.into());
        }
        fn activate_triggers(&mut self, names: &[String]) {
            self.note(&format!("activate_triggers {}", names.join(",")));
        }
        fn totals(&mut self, stats: &mut Stats) -> Option<std::io::Error> {
            stats.events_written += 1;
            self.error
                .then(|| std::io::Error::other(format!("{} failed", self.name)))
        }
    }

    /// Every output is called once per step, in order, and none is skipped
    /// because an earlier one already answered: a pass is a capture's and
    /// full if any output needs it, a thread is finished only if no output
    /// holds it, the totals add up and keep the first error.
    #[test]
    fn every_output_is_asked_once_per_step() {
        let calls = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let probe = |name, wants_full, holds, error| Probe {
            calls: calls.clone(),
            name,
            wants_full,
            holds,
            error,
        };
        let mut outputs = Outputs::default();
        outputs.push(probe("a", true, true, false));
        outputs.push(probe("b", false, false, true));
        outputs.push(probe("c", false, false, true));
        let cal = Calibration::start(false);
        let process = ProcessInfo::current(None);
        let mut sites = Sites::default();
        let mut ctx = Context {
            cal: &cal,
            process: &process,
            sites: &mut sites,
        };
        let thread = Arc::new(ThreadRing::for_test(7, false));
        let words = [1u64, 2, 3];
        let batch = Batch {
            thread: &thread,
            words: &words,
            overwritten: 0,
        };
        let mut tally = Tally::default();
        let asked = Asked {
            stop: true,
            flush: false,
            lost: 0,
        };
        let wants = outputs.plan(&mut ctx, &asked);
        assert!(wants.capture && wants.full, "a has a capture");
        let pass = asked.pass(wants.capture);
        assert!(!pass.stopping, "a capture's pass defers the stop");
        for item in [
            Item::Open,
            Item::Held,
            Item::Batch(&thread, &batch),
            Item::Lost(&thread, 2),
        ] {
            outputs.take(&mut ctx, &item, &mut tally);
        }
        assert!(!outputs.thread_exited(&thread), "a holds the thread");
        for item in [
            Item::ThreadDone(&thread, 4),
            Item::LostNoRing {
                now_ns: 0,
                count: 5,
            },
            Item::Tick,
        ] {
            outputs.take(&mut ctx, &item, &mut tally);
        }
        outputs.end(&mut ctx, &pass, 0, &mut tally);
        assert_eq!(tally.triggers, ["a", "b", "c"], "every output's captures");
        outputs.activate_triggers(&tally.triggers);
        outputs.take(&mut ctx, &Item::Close { now_ns: 0 }, &mut tally);
        let mut stats = Stats::default();
        let error = outputs.totals(&mut stats);
        assert_eq!(stats.events_written, 3);
        assert_eq!(error.map(|e| e.to_string()).as_deref(), Some("b failed"));
        let steps = [
            "plan",
            "open",
            "held",
            "batch 7 3",
            "lost 7 2",
            "thread_exited 7",
            "thread_done 7 4",
            "lost_no_ring 5",
            "tick",
            "end",
            "activate_triggers a,b,c",
            "close",
        ];
        let want: Vec<String> = steps
            .iter()
            .flat_map(|s| ["a", "b", "c"].map(|o| format!("{o} {s}")))
            .collect();
        assert_eq!(*calls.lock().unwrap(), want);
    }
}
