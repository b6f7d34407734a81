//! The output seam: where the flusher's drained records go.
//!
//! The flusher drains each ring once per pass and hands every [`Output`] the
//! same batches, losses and thread ends, one call per step for all of them
//! ([`Outputs`]). Each output encodes what it wants of them and writes it
//! out. Two implement it: the session's file (`file::FileOutput`: its
//! encoder and sink, the flight recorder in front of them, the capture
//! windows that swap files in and out) and system tracing's feed (one
//! Perfetto encoder per tracing session of `traced`). Another output (a file
//! that rotates, a capture file) is one more implementation, pushed into
//! [`Outputs`] at start.
//!
//! Rules: only the flusher thread calls outputs; an output never reads a
//! ring (it gets drained records), and every loss it causes is reported
//! back through [`Tally`] or [`Output::totals`].

#![forbid(unsafe_code)]

use crate::encode::{Batch, Context};
use crate::record::registry::ThreadRing;
use crate::record::sync::Arc;
use crate::stats::Stats;
use crate::system::feed::SystemFeed;

/// What starts a pass, as outputs see it.
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

/// One place the drained records go. The hooks come in the order of a pass:
/// `take_captures`, `begin_pass`, `before_drain`, then per ring `batch` (and
/// `note_lost`, `thread_exited`), then `thread_done` of finished threads,
/// `note_lost_no_ring`, `tick`, `after_pass`, `activate_triggers` (if any
/// capture fired), and `end_pass` (or `finish` at the session's last pass).
pub(crate) trait Output: Send {
    /// Once, before the first pass: what opens the stream (a file's header).
    fn open(&mut self, _ctx: &mut Context<'_>) {}
    /// Before the pass is planned: takes the captures asked of this output
    /// (`trigger`). True if this pass is a capture's: it drains every ring,
    /// and a stop or flush waiting is left to the next pass (a capture is
    /// copied from the flight recorder's store, which they empty).
    fn take_captures(&mut self) -> bool {
        false
    }
    /// Applies what was asked of this output since the last pass; `lost` is
    /// the session's loss count so far. True if this pass must drain every
    /// ring (a flush or stop from the service, a capture window).
    fn begin_pass(&mut self, _ctx: &mut Context<'_>, _pass: &Pass, _lost: u64) -> bool {
        false
    }
    /// The rings are about to be drained (the clock refreshed if the pass is
    /// full): records held from earlier passes go out first.
    fn before_drain(&mut self, _ctx: &mut Context<'_>, _tally: &mut Tally) {}
    /// One drained batch of `thread`'s records.
    fn batch(
        &mut self,
        ctx: &mut Context<'_>,
        thread: &Arc<ThreadRing>,
        batch: &Batch<'_>,
        tally: &mut Tally,
    );
    /// `count` events of `thread` were lost outside its records (too large
    /// for its ring).
    fn note_lost(&mut self, ctx: &mut Context<'_>, thread: &ThreadRing, count: u64);
    /// `thread`'s ring is drained for good. False if the output holds
    /// records of it still: it hands the thread back through
    /// [`Tally::let_go`] once they are written out or forgotten.
    fn thread_exited(&mut self, _thread: &ThreadRing) -> bool {
        true
    }
    /// `thread` is finished: its `pending` losses (counted, not yet marked
    /// in any stream) are marked, with any the output held, and its state
    /// is forgotten.
    fn thread_done(&mut self, ctx: &mut Context<'_>, thread: &ThreadRing, pending: u64);
    /// While true, losses of threads without a ring wait for a later pass
    /// (a flight recorder marks them when it writes out).
    fn defers_marks(&self) -> bool {
        false
    }
    /// `count` events of threads without a ring were lost (see
    /// `Encoder::note_lost_no_ring`).
    fn note_lost_no_ring(&mut self, ctx: &mut Context<'_>, now_ns: u64, count: u64);
    /// CPU stack samples (`sampling`); outputs without them ignore them.
    fn samples(&mut self, _ctx: &mut Context<'_>, _view: &crate::sampling::SampleView<'_>) {}
    /// Periodic packets (clock snapshots).
    fn tick(&mut self, ctx: &mut Context<'_>);
    /// After the pass's drain and marks; `lost` as in `begin_pass`. Names
    /// of captures fired go into [`Tally::triggers`].
    fn after_pass(&mut self, _ctx: &mut Context<'_>, _pass: &Pass, _lost: u64, _tally: &mut Tally) {
    }
    /// Captures fired this pass (by any output), by name: system tracing
    /// sends them to the tracing service as `ActivateTriggers`.
    fn activate_triggers(&mut self, _names: &[String]) {}
    /// The end of a pass that is not the last: what it made goes out.
    fn end_pass(&mut self, ctx: &mut Context<'_>);
    /// The session's last pass: closes the stream at `now_ns`.
    fn finish(&mut self, ctx: &mut Context<'_>, now_ns: u64);
    /// Adds this output's part to the session's totals; its first write
    /// error, if any.
    fn totals(&mut self, stats: &mut Stats) -> Option<std::io::Error>;
}

/// The outputs of a session, in the order each hook is called.
#[derive(Default)]
pub(crate) struct Outputs(Vec<Box<dyn Output>>);

impl Outputs {
    /// Adds an output (at start: the flusher owns them once it runs).
    pub(crate) fn push(&mut self, output: impl Output + 'static) {
        self.0.push(Box::new(output));
    }

    pub(crate) fn open(&mut self, ctx: &mut Context<'_>) {
        self.0.iter_mut().for_each(|o| o.open(ctx));
    }

    /// True if any output has a capture for this pass (every one is asked).
    pub(crate) fn take_captures(&mut self) -> bool {
        let mut capture = false;
        for o in &mut self.0 {
            capture |= o.take_captures();
        }
        capture
    }

    /// True if any output needs every ring drained (every one is asked).
    pub(crate) fn begin_pass(&mut self, ctx: &mut Context<'_>, pass: &Pass, lost: u64) -> bool {
        let mut full = false;
        for o in &mut self.0 {
            full |= o.begin_pass(ctx, pass, lost);
        }
        full
    }

    pub(crate) fn before_drain(&mut self, ctx: &mut Context<'_>, tally: &mut Tally) {
        self.0.iter_mut().for_each(|o| o.before_drain(ctx, tally));
    }

    pub(crate) fn batch(
        &mut self,
        ctx: &mut Context<'_>,
        thread: &Arc<ThreadRing>,
        batch: &Batch<'_>,
        tally: &mut Tally,
    ) {
        self.0
            .iter_mut()
            .for_each(|o| o.batch(ctx, thread, batch, tally));
    }

    pub(crate) fn note_lost(&mut self, ctx: &mut Context<'_>, thread: &ThreadRing, count: u64) {
        self.0
            .iter_mut()
            .for_each(|o| o.note_lost(ctx, thread, count));
    }

    /// True if no output holds the thread back (every one is told).
    pub(crate) fn thread_exited(&mut self, thread: &ThreadRing) -> bool {
        let mut now = true;
        for o in &mut self.0 {
            now &= o.thread_exited(thread);
        }
        now
    }

    pub(crate) fn thread_done(&mut self, ctx: &mut Context<'_>, thread: &ThreadRing, pending: u64) {
        self.0
            .iter_mut()
            .for_each(|o| o.thread_done(ctx, thread, pending));
    }

    pub(crate) fn defers_marks(&self) -> bool {
        self.0.iter().any(|o| o.defers_marks())
    }

    pub(crate) fn note_lost_no_ring(&mut self, ctx: &mut Context<'_>, now_ns: u64, count: u64) {
        self.0
            .iter_mut()
            .for_each(|o| o.note_lost_no_ring(ctx, now_ns, count));
    }

    pub(crate) fn samples(
        &mut self,
        ctx: &mut Context<'_>,
        view: &crate::sampling::SampleView<'_>,
    ) {
        self.0.iter_mut().for_each(|o| o.samples(ctx, view));
    }

    pub(crate) fn tick(&mut self, ctx: &mut Context<'_>) {
        self.0.iter_mut().for_each(|o| o.tick(ctx));
    }

    pub(crate) fn after_pass(
        &mut self,
        ctx: &mut Context<'_>,
        pass: &Pass,
        lost: u64,
        tally: &mut Tally,
    ) {
        self.0
            .iter_mut()
            .for_each(|o| o.after_pass(ctx, pass, lost, tally));
    }

    pub(crate) fn activate_triggers(&mut self, names: &[String]) {
        self.0.iter_mut().for_each(|o| o.activate_triggers(names));
    }

    pub(crate) fn end_pass(&mut self, ctx: &mut Context<'_>) {
        self.0.iter_mut().for_each(|o| o.end_pass(ctx));
    }

    pub(crate) fn finish(&mut self, ctx: &mut Context<'_>, now_ns: u64) {
        self.0.iter_mut().for_each(|o| o.finish(ctx, now_ns));
    }

    /// Every output's totals added; the first write error.
    pub(crate) fn totals(&mut self, stats: &mut Stats) -> Option<std::io::Error> {
        let mut error = None;
        for o in &mut self.0 {
            let e = o.totals(stats);
            error = error.or(e);
        }
        error
    }
}

/// System tracing: every hook goes to each live tracing session's encoder
/// (`system::feed`), whose packets go to `traced`'s shared memory.
impl Output for SystemFeed {
    fn begin_pass(&mut self, ctx: &mut Context<'_>, _pass: &Pass, _lost: u64) -> bool {
        self.begin_cycle(ctx)
    }

    fn batch(
        &mut self,
        ctx: &mut Context<'_>,
        _thread: &Arc<ThreadRing>,
        batch: &Batch<'_>,
        _tally: &mut Tally,
    ) {
        SystemFeed::batch(self, ctx, batch);
    }

    fn note_lost(&mut self, ctx: &mut Context<'_>, thread: &ThreadRing, count: u64) {
        SystemFeed::note_lost(self, ctx, thread, count);
    }

    fn thread_done(&mut self, ctx: &mut Context<'_>, thread: &ThreadRing, pending: u64) {
        if pending > 0 {
            SystemFeed::note_lost(self, ctx, thread, pending);
        }
        SystemFeed::thread_done(self, ctx, thread.seq_id);
    }

    fn note_lost_no_ring(&mut self, ctx: &mut Context<'_>, now_ns: u64, count: u64) {
        SystemFeed::note_lost_no_ring(self, ctx, now_ns, count);
    }

    fn samples(&mut self, ctx: &mut Context<'_>, view: &crate::sampling::SampleView<'_>) {
        SystemFeed::samples(self, ctx, view);
    }

    fn tick(&mut self, ctx: &mut Context<'_>) {
        SystemFeed::tick(self, ctx);
    }

    fn activate_triggers(&mut self, names: &[String]) {
        SystemFeed::activate_triggers(self, names);
    }

    fn end_pass(&mut self, ctx: &mut Context<'_>) {
        let now = ctx.cal.now_ns();
        self.end_cycle(ctx, now);
    }

    fn finish(&mut self, ctx: &mut Context<'_>, now_ns: u64) {
        SystemFeed::finish(self, ctx, now_ns);
    }

    fn totals(&mut self, stats: &mut Stats) -> Option<std::io::Error> {
        stats.events_lost += self.stats().events_dropped;
        stats.cpu_samples_lost += self.stats().samples_dropped;
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encode::{ProcessInfo, Sites};
    use crate::record::clock::Calibration;

    /// An output that notes which hooks it was called with, says it needs a
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
        fn take_captures(&mut self) -> bool {
            self.note("take_captures");
            self.wants_full
        }
        fn begin_pass(&mut self, _: &mut Context<'_>, _: &Pass, _: u64) -> bool {
            self.note("begin_pass");
            self.wants_full
        }
        fn batch(
            &mut self,
            _: &mut Context<'_>,
            t: &Arc<ThreadRing>,
            b: &Batch<'_>,
            _: &mut Tally,
        ) {
            self.note(&format!("batch {} {}", t.seq_id, b.words.len()));
        }
        fn note_lost(&mut self, _: &mut Context<'_>, t: &ThreadRing, n: u64) {
            self.note(&format!("note_lost {} {n}", t.seq_id));
        }
        fn thread_exited(&mut self, t: &ThreadRing) -> bool {
            self.note(&format!("thread_exited {}", t.seq_id));
            !self.holds
        }
        fn thread_done(&mut self, _: &mut Context<'_>, t: &ThreadRing, pending: u64) {
            self.note(&format!("thread_done {} {pending}", t.seq_id));
        }
        fn note_lost_no_ring(&mut self, _: &mut Context<'_>, _: u64, n: u64) {
            self.note(&format!("note_lost_no_ring {n}"));
        }
        fn tick(&mut self, _: &mut Context<'_>) {
            self.note("tick");
        }
        fn after_pass(&mut self, _: &mut Context<'_>, _: &Pass, _: u64, tally: &mut Tally) {
            self.note("after_pass");
            tally.triggers.push(self.name.into());
        }
        fn activate_triggers(&mut self, names: &[String]) {
            self.note(&format!("activate_triggers {}", names.join(",")));
        }
        fn end_pass(&mut self, _: &mut Context<'_>) {
            self.note("end_pass");
        }
        fn finish(&mut self, _: &mut Context<'_>, _: u64) {
            self.note("finish");
        }
        fn totals(&mut self, stats: &mut Stats) -> Option<std::io::Error> {
            stats.events_written += 1;
            self.error
                .then(|| std::io::Error::other(format!("{} failed", self.name)))
        }
    }

    /// Every output is called once per step, in order, and none is skipped
    /// because an earlier one already answered: a pass is full if any output
    /// needs it, a thread is finished only if no output holds it, the totals
    /// add up and keep the first error.
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
        let pass = Pass {
            stopping: false,
            flush: false,
        };
        let thread = Arc::new(ThreadRing::for_test(7, false));
        let words = [1u64, 2, 3];
        let batch = Batch {
            thread: &thread,
            words: &words,
            overwritten: 0,
        };
        let mut tally = Tally::default();
        assert!(outputs.take_captures(), "a has a capture");
        assert!(
            outputs.begin_pass(&mut ctx, &pass, 0),
            "a wants a full pass"
        );
        outputs.batch(&mut ctx, &thread, &batch, &mut tally);
        outputs.note_lost(&mut ctx, &thread, 2);
        assert!(!outputs.thread_exited(&thread), "a holds the thread");
        outputs.thread_done(&mut ctx, &thread, 4);
        assert!(!outputs.defers_marks());
        outputs.note_lost_no_ring(&mut ctx, 0, 5);
        outputs.tick(&mut ctx);
        outputs.after_pass(&mut ctx, &pass, 0, &mut tally);
        assert_eq!(tally.triggers, ["a", "b", "c"], "every output's captures");
        outputs.activate_triggers(&tally.triggers);
        outputs.end_pass(&mut ctx);
        outputs.finish(&mut ctx, 0);
        let mut stats = Stats::default();
        let error = outputs.totals(&mut stats);
        assert_eq!(stats.events_written, 3);
        assert_eq!(error.map(|e| e.to_string()).as_deref(), Some("b failed"));
        let steps = [
            "take_captures",
            "begin_pass",
            "batch 7 3",
            "note_lost 7 2",
            "thread_exited 7",
            "thread_done 7 4",
            "note_lost_no_ring 5",
            "tick",
            "after_pass",
            "activate_triggers a,b,c",
            "end_pass",
            "finish",
        ];
        let want: Vec<String> = steps
            .iter()
            .flat_map(|s| ["a", "b", "c"].map(|o| format!("{o} {s}")))
            .collect();
        assert_eq!(*calls.lock().unwrap(), want);
    }
}
