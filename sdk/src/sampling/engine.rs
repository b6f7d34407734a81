//! The sampler thread and the tables of mappings, frames and call stacks
//! samples refer to (see the module's documentation in `mod.rs`).
//!
//! Longer than the rest (about 900 lines) for a reason: the sampler's loop
//! (open, wait, drain, scan, publish) and the state it shares with the
//! session's calls (`start`, `take_pending`, `end`) are one state machine;
//! cut apart they would expose that state to each other. The tables' entries
//! are made in `intern.rs`.

use super::modules::{FilesCap, Modules};
use super::perf::{Chain, OpenError, PerfEvent, PerfRecord, StackSource};
use super::tables::{FrameDef, MappingDef, Sample, SampleView, Tables, SLOT_OVERHEAD};
use super::wake::{Bell, Epoll, TaskList, BELL};
use super::{perf, timer, unwind, CpuStacks, Totals};
use crate::record::registry::REGISTRY;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bytes of user stack copied per sample in [`CpuStacks::CopiedStacks`].
/// It holds the least copy each sample of the release programs measured
/// needed to unwind whole, and most of a debug build's (measured in
/// BENCHMARKS.md, "Measured for design choices"). The
/// kernel copies it in the sampled thread's interrupt, so half of 16 KiB
/// is a cost the thread no longer pays; what deeper stacks need beyond it
/// the sampler reads from the thread's own stack (`unwind::LiveStack`),
/// at no cost to the thread.
pub(crate) const STACK_COPY: u32 = 8 << 10;
/// How often the thread list is read (also the longest a sample waits in
/// a ring whose watermark is not reached).
const SCAN_EVERY: Duration = Duration::from_millis(100);
/// How often the timer fallback's buffers are read (they have no fd to
/// wake on): 8 buffers per thread hold 32 ms at 250 Hz.
const TIMER_EVERY: Duration = Duration::from_millis(20);
/// How long `start` waits at most for the sampler's first events.
const READY_WAIT: Duration = Duration::from_millis(500);
/// Most samples waiting for the flusher (beyond: dropped and counted).
const PENDING_CAP: usize = 1 << 16;
/// Most heap the tables of mappings, names, frames and call stacks hold
/// (an estimate), also taken from the memory budget as they grow: past
/// either, samples whose stacks need new entries are dropped and counted
/// (`Stats::cpu_samples_no_memory`). Ids stay valid for the session, so
/// nothing is evicted.
pub(crate) const TABLES_CAP: u64 = 16 << 20;
/// Budget taken for the tables at a time (the first before any thread's
/// ring).
const TABLES_CHUNK: u64 = 64 << 10;
/// A sample is interned only while this much is taken beyond what the
/// tables hold (a sample's new entries rarely need more; one that does
/// overruns it once, and the next sample takes another chunk or is
/// dropped).
const TABLES_HEADROOM: u64 = 16 << 10;

/// The samples not yet encoded.
#[derive(Default)]
pub(crate) struct Pending {
    pub(crate) samples: Vec<Sample>,
    /// Records the kernel dropped since the last take.
    pub(crate) lost: u64,
}

/// Counts reported in [`Stats`](crate::Stats).
#[derive(Debug, Default)]
struct Counters {
    samples: AtomicU64,
    lost: AtomicU64,
    truncated: AtomicU64,
    threads: AtomicU64,
    threads_unsampled: AtomicU64,
    /// The rate sampled at (the one asked, or the kernel's limit).
    hz: AtomicU32,
    /// Samples dropped: their stacks needed table entries past the
    /// tables' memory.
    no_memory: AtomicU64,
    /// Frames the flusher had names for and no memory to keep them in.
    frames_unnamed: AtomicU64,
}

struct Shared {
    stop: AtomicBool,
    /// Wakes the sampler at once (the stop).
    bell: Bell,
    /// Set once the first threads' events are open (or sampling is off).
    ready: AtomicBool,
    pending: Mutex<Pending>,
    tables: Mutex<Tables>,
    /// Names the frames (the flusher's, before it encodes).
    symbolizer: Mutex<Symbolizer>,
    /// Budget bytes taken for `tables` (given back at `end`).
    tables_taken: AtomicU64,
    /// What the mapped files' tables hold (the sampler's and the
    /// flusher's), within `modules::FILES_CAP`.
    files_cap: Arc<FilesCap>,
    counters: Counters,
}

/// Names the frames the sampler interned since the last time, and gives
/// the call stacks made meanwhile their inlined frames: on the flusher
/// (before each hand-over of the tables), never on the sampler thread,
/// whose reads of the kernel's rings must keep up. Files are read and
/// names looked up outside the tables' lock (the sampler goes on
/// interning); only the results are written under it.
///
/// What it adds (names, the frames of inlined functions, the longer
/// expanded stacks) is counted in `Tables::bytes` and taken from the
/// budget as the sampler's entries are (`tables_room`): past the tables'
/// memory a frame stays unnamed and its stacks unexpanded. An expanded
/// stack keeps its id and its slot in `stack_ids`, which is keyed by the
/// hash of the stack as the sampler makes it (`Tables::is_stack`).
fn resolve(shared: &Shared) {
    let mut sym = shared.symbolizer.lock();
    let sym = &mut *sym;
    // What the sampler made since the last time: every frame of these
    // call stacks is among these frames or named already.
    let (frames, stacks, todo, maps) = {
        let mut t = shared.tables.lock();
        if t.unnamed.is_empty() && t.unexpanded.is_empty() {
            return;
        }
        let frames = std::mem::take(&mut t.unnamed);
        let stacks = std::mem::take(&mut t.unexpanded);
        let mut maps: HashMap<u32, MappingDef> = HashMap::new();
        let todo: Vec<(u32, u64)> = frames
            .iter()
            .map(|&id| {
                let f = t.frames[id as usize - 1];
                let m = &t.mappings[f.mapping as usize - 1];
                maps.entry(f.mapping).or_insert_with(|| m.clone());
                (f.mapping, f.rel_pc.wrapping_add(m.load_bias))
            })
            .collect();
        (frames, stacks, todo, maps)
    };
    let mut named: Vec<Vec<String>> = Vec::with_capacity(todo.len());
    for (mapping, svma) in &todo {
        let mut names = Vec::new();
        if let Some(m) = maps.get(mapping) {
            sym.symbolizer
                .frame_names(&m.maps_line(), &m.build_id, *svma, &mut names);
        }
        named.push(names);
    }
    let mut t = shared.tables.lock();
    let t = &mut *t;
    let mut unnamed = 0;
    for (&id, names) in frames.iter().zip(named) {
        if names.is_empty() {
            continue; // no name found: its address stays
        }
        // A name goes in while the tables keep their headroom (taking
        // budget for it), and past that into the headroom itself: the
        // memory they already took. The sampler, which interns with the
        // headroom only, then drops (and counts) samples needing new
        // entries until the budget has room again.
        if !tables_room(t, &shared.tables_taken)
            && t.bytes + name_bytes(&names) > shared.tables_taken.load(Ordering::Relaxed)
        {
            unnamed += 1;
            continue;
        }
        t.name_frame(id, names);
    }
    shared
        .counters
        .frames_unnamed
        .fetch_add(unnamed, Ordering::Relaxed);
    let mut expanded = std::mem::take(&mut sym.scratch);
    for id in stacks {
        t.expand(id, &mut expanded);
    }
    sym.scratch = expanded;
}

/// The flusher's naming state.
struct Symbolizer {
    symbolizer: super::debuginfo::Symbolizer,
    scratch: Vec<u32>,
}

struct Running {
    shared: Arc<Shared>,
    thread: std::thread::JoinHandle<()>,
}

static RUNNING: Mutex<Option<Running>> = Mutex::new(None);
/// The samples' state outlives the sampler thread until the flusher's last
/// pass has taken them: kept here between `stop` and `end`.
static LAST: Mutex<Option<Arc<Shared>>> = Mutex::new(None);

/// Starts sampling every thread at `hz` (the session's start).
pub(crate) fn start(hz: u32, stacks: CpuStacks) {
    let mut running = RUNNING.lock();
    if running.is_some() || hz == 0 {
        return;
    }
    let bell = match Bell::new() {
        Ok(b) => b,
        Err(e) => {
            eprintln!("ringtrace: CPU sampling off: cannot make its eventfd: {e}");
            return;
        }
    };
    let files_cap: Arc<FilesCap> = Arc::default();
    let shared = Arc::new(Shared {
        stop: AtomicBool::new(false),
        bell,
        ready: AtomicBool::new(false),
        pending: Mutex::new(Pending::default()),
        tables: Mutex::new(Tables::default()),
        symbolizer: Mutex::new(Symbolizer {
            symbolizer: super::debuginfo::Symbolizer::new(files_cap.clone()),
            scratch: Vec::new(),
        }),
        tables_taken: AtomicU64::new(0),
        files_cap,
        counters: Counters::default(),
    });
    *LAST.lock() = Some(shared.clone());
    let s = shared.clone();
    let spawned = std::thread::Builder::new()
        .name("ringtrace-sampler".into())
        .spawn(move || guarded_run(s, hz, stacks));
    match spawned {
        Ok(thread) => {
            // The session's first moments are sampled too: back once every
            // thread has its event (the symbols read first: tens of
            // milliseconds), or after `READY_WAIT`.
            let since = Instant::now();
            while !shared.ready.load(Ordering::Acquire) && since.elapsed() < READY_WAIT {
                std::thread::sleep(Duration::from_millis(1));
            }
            *running = Some(Running { shared, thread });
        }
        Err(e) => eprintln!("ringtrace: CPU sampling off: cannot start its thread: {e}"),
    }
}

/// Runs the sampler until the stop. Should its work ever panic (a bug:
/// nothing it reads may make it panic), sampling ends there with one
/// message, not the program: the panic unwinds through the sampler, whose
/// threads' events close and give their memory back to the budget as they
/// drop (`Watched`), and the session's start is not kept waiting.
fn guarded_run(shared: Arc<Shared>, hz: u32, stacks: CpuStacks) {
    let s = shared.clone();
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        Sampler::new(s, hz, stacks).run()
    }));
    if let Err(panic) = run {
        let why = panic
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
            .unwrap_or("a panic");
        eprintln!("ringtrace: CPU sampling stopped early: the sampler failed ({why})");
        shared.ready.store(true, Ordering::Release);
    }
}

/// Stops the sampler thread after it read every ring a last time (the
/// session's stop, before the flusher's last pass).
pub(crate) fn stop() {
    let running = RUNNING.lock().take();
    if let Some(r) = running {
        r.shared.stop.store(true, Ordering::Release);
        r.shared.bell.ring();
        let _ = r.thread.join();
    }
}

/// Wakes the sampler to read every ring now (a capture was queued: its
/// window's last samples are wanted within its wait, not at the sampler's
/// next look at the thread list).
pub(crate) fn read_now() {
    if let Some(shared) = LAST.lock().clone() {
        shared.bell.ring();
    }
}

/// Takes the samples waiting and hands them to `f` with the tables (the
/// flusher, each pass).
pub(crate) fn take_pending(mut f: impl FnMut(&SampleView<'_>)) {
    let Some(shared) = LAST.lock().clone() else {
        return;
    };
    let pending = std::mem::take(&mut *shared.pending.lock());
    if pending.samples.is_empty() && pending.lost == 0 {
        return;
    }
    // Their frames and call stacks were interned before they were handed
    // over: named now.
    resolve(&shared);
    let tables = shared.tables.lock();
    f(&SampleView {
        tables: &tables,
        samples: &pending.samples,
        lost: pending.lost,
    });
}

/// Hands the tables to `f` (a flight recorder's write-out).
pub(crate) fn with_tables(f: impl FnOnce(&Tables)) {
    if let Some(shared) = LAST.lock().clone() {
        resolve(&shared);
        f(&shared.tables.lock());
    }
}

/// The session's sampling totals; forgets its state (after the flusher's
/// last pass).
pub(crate) fn end() -> Totals {
    let Some(shared) = LAST.lock().take() else {
        return Totals::default();
    };
    crate::record::registry::REGISTRY
        .budget
        .give_back(shared.tables_taken.swap(0, Ordering::Relaxed));
    let c = &shared.counters;
    Totals {
        samples: c.samples.load(Ordering::Relaxed),
        lost: c.lost.load(Ordering::Relaxed),
        truncated: c.truncated.load(Ordering::Relaxed),
        threads: c.threads.load(Ordering::Relaxed),
        threads_unsampled: c.threads_unsampled.load(Ordering::Relaxed),
        hz: c.hz.load(Ordering::Relaxed),
        no_memory: c.no_memory.load(Ordering::Relaxed),
        files_no_memory: shared.files_cap.refused(),
        frames_unnamed: c.frames_unnamed.load(Ordering::Relaxed),
    }
}

/// Whether `tables` may take new entries: `TABLES_HEADROOM` beyond what
/// they hold is taken from the budget (taking more chunks if needed,
/// within `TABLES_CAP`). Taken under the tables' lock only (the sampler's
/// interning, the flusher's naming, `resolve`).
fn tables_room(tables: &Tables, taken: &AtomicU64) -> bool {
    let mut have = taken.load(Ordering::Relaxed);
    while have < tables.bytes + TABLES_HEADROOM {
        if have + TABLES_CHUNK > TABLES_CAP || !REGISTRY.budget.try_take(TABLES_CHUNK) {
            taken.store(have, Ordering::Relaxed);
            return false;
        }
        have += TABLES_CHUNK;
    }
    taken.store(have, Ordering::Relaxed);
    true
}

/// An upper bound of what naming a frame `names` adds to the tables'
/// `bytes` (its names, the frames of the functions inlined there, their
/// list), so that a name stored past the headroom still fits what the
/// tables took.
fn name_bytes(names: &[String]) -> u64 {
    // A name is kept twice (the list and the map's key) with its slot;
    // an inlined one also adds a frame and a place in the frame's list.
    let per_name = 2 * 24 + 4 + SLOT_OVERHEAD + std::mem::size_of::<FrameDef>() as u64 + 4;
    let list = 4 + 16 + SLOT_OVERHEAD;
    names
        .iter()
        .map(|n| 2 * n.len() as u64 + per_name)
        .sum::<u64>()
        + list
}

/// Half the soft limit of open files (`RLIMIT_NOFILE`), at least 1.
fn fd_cap() -> usize {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit with a valid out-pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return 512;
    }
    usize::try_from(lim.rlim_cur / 2)
        .unwrap_or(usize::MAX)
        .max(1)
}

/// `kernel.perf_event_max_sample_rate`: the most samples per second the
/// kernel allows an event (None: not readable).
fn max_sample_rate() -> Option<u32> {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_max_sample_rate")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// A thread that exited before its event could be opened.
struct Gone;

/// One sampled thread.
struct Watched {
    source: Source,
    /// Budget bytes taken for its ring or buffers, given back when it is
    /// dropped (its thread closed, the sampler's end, or a panic).
    bytes: u64,
}

impl Drop for Watched {
    fn drop(&mut self) {
        REGISTRY.budget.give_back(self.bytes);
    }
}

/// Where a thread's samples come from.
enum Source {
    /// A perf event and its kernel ring.
    Perf(PerfEvent),
    /// The fallback: a CPU-time timer and the buffers its handler fills.
    Timer(timer::ThreadTimer),
}

impl Source {
    /// False if there is surely nothing to read (an empty kernel ring).
    fn has_data(&self) -> bool {
        match self {
            Source::Perf(e) => e.has_data(),
            Source::Timer(_) => true,
        }
    }
}

/// Stacks into interned call stacks: the unwinder, the process's modules
/// and scratch space, reused for every sample.
pub(crate) struct StackWork {
    pub(crate) modules: Modules,
    unwinder: unwind::StackUnwinder,
    /// The sampled threads' own stacks, past their copies.
    pub(crate) live: unwind::LiveStack,
    pcs: Vec<u64>,
    scratch: Vec<u32>,
}

impl StackWork {
    /// With files' tables of its own (the cost replay).
    #[cfg(test)]
    pub(crate) fn new() -> Self {
        Self::with_files_cap(Arc::default())
    }

    /// With the files' tables held within `files_cap` (shared with the
    /// flusher's naming).
    pub(crate) fn with_files_cap(files_cap: Arc<FilesCap>) -> Self {
        StackWork {
            modules: Modules::with_files_cap(files_cap),
            unwinder: unwind::StackUnwinder::new(),
            live: unwind::LiveStack::default(),
            pcs: Vec::new(),
            scratch: Vec::new(),
        }
    }

    /// The frames of a copied stack, innermost first (the cost replay).
    #[cfg(test)]
    pub(crate) fn unwind_pcs(&mut self, regs: [u64; 3], stack: &[u8], out: &mut Vec<u64>) {
        self.unwinder.unwind(&self.modules, regs, stack, None, out);
    }

    /// The call stack of a kernel call chain (`chain`), or of a copied
    /// stack (`regs`) unwound here, by the sampler's path (thread `tid`'s
    /// own stack past the copy, looked up only if the walk needs it);
    /// false if the unwinding stopped early (the cost replay).
    #[cfg(test)]
    pub(crate) fn intern(
        &mut self,
        tables: &mut Tables,
        tid: i32,
        chain: Chain<'_>,
        regs: Option<[u64; 3]>,
        stack: &[u8],
    ) -> (u32, bool) {
        let ok = self.unwind(Some(tid), chain, regs, stack);
        (self.interned(tables, true).unwrap_or(0), ok)
    }

    /// The frames of a kernel call chain (`chain`) or of a copied stack
    /// (`regs`, unwound here; with `tid`, the sampled thread of this
    /// process, past the copy from its own stack), kept for `interned`;
    /// false if the unwinding stopped early.
    pub(crate) fn unwind(
        &mut self,
        tid: Option<i32>,
        chain: Chain<'_>,
        regs: Option<[u64; 3]>,
        stack: &[u8],
    ) -> bool {
        self.pcs.clear();
        match regs {
            Some(regs) => self.unwinder.unwind(
                &self.modules,
                regs,
                stack,
                tid.map(|t| (t, &mut self.live)),
                &mut self.pcs,
            ),
            None => {
                self.pcs.extend(chain.pcs());
                true
            }
        }
    }

    /// The interned call stack of the frames `unwind` found.
    /// None: the stack needs entries the tables have no `room` for.
    pub(crate) fn interned(&mut self, tables: &mut Tables, room: bool) -> Option<u32> {
        tables.callstack(&mut self.modules, &self.pcs, &mut self.scratch, room)
    }
}

struct Sampler {
    shared: Arc<Shared>,
    hz: u32,
    stacks: CpuStacks,
    work: StackWork,
    /// Perf refused: per-thread CPU-time timers instead.
    timers: bool,
    threads: HashMap<i32, Watched>,
    /// Threads that could not be sampled (not tried again).
    refused: std::collections::HashSet<i32>,
    /// Data pages per ring (halved when the locked-memory limit is hit).
    pages: usize,
    said_mlock: bool,
    /// Most perf events open at once (half `RLIMIT_NOFILE`'s soft limit).
    fd_cap: usize,
    said_fds: bool,
    my_tid: i32,
    batch: Vec<Sample>,
    /// The perf fds (and the bell) the sampler sleeps on.
    epoll: Epoll,
    tasks: TaskList,
    /// Scratch: threads whose events said they exited.
    exited: Vec<i32>,
}

impl Sampler {
    fn new(shared: Arc<Shared>, hz: u32, stacks: CpuStacks) -> Self {
        let work = StackWork::with_files_cap(shared.files_cap.clone());
        Sampler {
            shared,
            hz,
            stacks,
            work,
            timers: false,
            threads: HashMap::new(),
            refused: Default::default(),
            pages: 0,
            said_mlock: false,
            fd_cap: fd_cap(),
            said_fds: false,
            my_tid: crate::sys::tid() as i32,
            batch: Vec::new(),
            epoll: Epoll::new(),
            tasks: TaskList::open(),
            exited: Vec::new(),
        }
    }

    fn run(mut self) {
        self.work.modules.scan();
        // The tables' first room, before the rings take the budget: a ring
        // whose samples cannot be interned is of no use.
        tables_room(&self.shared.tables.lock(), &self.shared.tables_taken);
        if self.stacks == CpuStacks::Auto {
            self.stacks = if self.work.modules.main_has_frame_pointers() {
                CpuStacks::FramePointers
            } else {
                CpuStacks::CopiedStacks
            };
        }
        let source = match self.stacks {
            CpuStacks::CopiedStacks => StackSource::Copy(STACK_COPY),
            _ => StackSource::Callchain,
        };
        // A ring of call chains (~200 bytes each) holds 160 samples, one
        // of copied stacks 62 (8 KiB each: 62 ms at 1 kHz); the sampler is
        // woken at half full, or reads it at its next look at the thread
        // list (100 ms) first; both taken from the memory budget. Copies
        // get the larger ring because each wake-up, not the copy's
        // unwinding, is most of the sampler's CPU per sample on a VM
        // (measured in BENCHMARKS.md, "CPU sampling").
        self.pages = match source {
            StackSource::Callchain => 8,
            StackSource::Copy(_) => 128,
        };
        // Above the kernel's limit `perf_event_open` refuses the rate
        // (EINVAL), which would send every thread to the timers: the
        // limit instead, said once.
        if let Some(max) = max_sample_rate().filter(|&m| m > 0 && self.hz > m) {
            eprintln!(
                "ringtrace: CPU sampling: {} Hz asked is above the kernel's limit \
                 (kernel.perf_event_max_sample_rate = {max}); sampling at {max} Hz",
                self.hz
            );
            self.hz = max;
        }
        self.shared.counters.hz.store(self.hz, Ordering::Relaxed);
        // One probe decides whether perf sampling is possible at all;
        // where it is not, CPU-time timers (copied stacks only).
        if let Err(e) = PerfEvent::open(self.my_tid, self.hz, source, 1) {
            let why = match e {
                OpenError::Open(e) | OpenError::Map(e) => e,
            };
            match timer::install() {
                Ok(()) => {
                    eprintln!(
                        "ringtrace: CPU sampling: perf_event_open refused ({why}); sampling \
                         with CPU-time timers instead (at most the kernel tick's rate)"
                    );
                    self.timers = true;
                }
                Err(t) => {
                    eprintln!(
                        "ringtrace: CPU sampling off: perf_event_open refused ({why}) and \
                         the timer fallback too ({t}); the trace has no samples"
                    );
                    self.shared.ready.store(true, Ordering::Release);
                    self.idle();
                    return;
                }
            }
        }
        let bell = self.shared.bell.fd();
        if !self.epoll.add(bell, BELL) {
            // No epoll: a tick, as for the timer fallback.
            self.epoll = Epoll::none();
        }
        let mut next_scan = Instant::now();
        loop {
            let stopping = self.shared.stop.load(Ordering::Acquire);
            let now = Instant::now();
            if stopping || now >= next_scan {
                self.scan_threads(source, !stopping);
                self.shared.ready.store(true, Ordering::Release);
                next_scan = now + SCAN_EVERY;
            }
            self.drain_all();
            if stopping {
                break;
            }
            self.wait(next_scan);
        }
        // Their memory goes back to the budget as they drop.
        self.threads.clear();
    }

    /// Refused: waits for the stop doing nothing.
    fn idle(&self) {
        while !self.shared.stop.load(Ordering::Acquire) {
            self.shared.bell.wait(-1);
        }
    }

    /// Sleeps until a ring reaches its watermark (or its thread exits), the
    /// stop, or the next scan (the timer fallback, which has no fd: its
    /// next read). Threads whose events say they exited are closed here,
    /// their last samples read.
    fn wait(&mut self, until: Instant) {
        let mut until = until;
        if self.timers || !self.epoll.ok() {
            until = until.min(Instant::now() + TIMER_EVERY);
        }
        // Rounded up: a wait of 0 ms before the next scan would spin.
        let ms = until
            .saturating_duration_since(Instant::now())
            .as_micros()
            .div_ceil(1000)
            .max(1) as libc::c_int;
        if !self.epoll.ok() {
            self.shared.bell.wait(ms);
            return;
        }
        let mut exited = std::mem::take(&mut self.exited);
        exited.clear();
        self.epoll.wait(ms, |key, hup| {
            if key == BELL {
                return;
            }
            // The kernel says the thread is gone (`POLLHUP` stays set until
            // the fd is closed): closed now, not at the next scan.
            if hup {
                exited.push(key as i32);
            }
        });
        self.shared.bell.clear();
        for &tid in &exited {
            self.close(tid);
        }
        self.exited = exited;
    }

    /// Reads a thread's last samples, closes its event or timer and gives
    /// its memory back.
    fn close(&mut self, tid: i32) {
        if let Some(mut w) = self.threads.remove(&tid) {
            let mut sink = std::mem::take(&mut self.batch);
            self.drain_one(&mut w.source, &mut sink);
            self.publish(sink);
            self.work.live.forget(tid);
            // `w` drops here: its memory goes back to the budget.
        }
    }

    /// Drains and closes the events of threads that exited; opens events
    /// for new threads if `open`.
    fn scan_threads(&mut self, source: StackSource, open: bool) {
        let mut tasks = std::mem::replace(&mut self.tasks, TaskList::none());
        if !tasks.read() {
            self.tasks = tasks;
            return;
        }
        let alive = tasks.tids();
        let mut gone = std::mem::take(&mut self.exited);
        gone.clear();
        gone.extend(
            self.threads
                .keys()
                .filter(|t| alive.binary_search(t).is_err())
                .copied(),
        );
        for &tid in &gone {
            self.close(tid);
        }
        self.exited = gone;
        self.refused.retain(|t| alive.binary_search(t).is_ok());
        if open {
            for &tid in alive {
                if tid == self.my_tid
                    || self.threads.contains_key(&tid)
                    || self.refused.contains(&tid)
                {
                    continue;
                }
                match self.open(tid, source) {
                    // Exited since the list was read: nothing to sample.
                    Err(Gone) => {}
                    Ok(Some(w)) => {
                        if let Source::Perf(e) = &w.source {
                            self.epoll.add(e.fd(), tid as u64);
                        }
                        self.shared.counters.threads.fetch_add(1, Ordering::Relaxed);
                        self.threads.insert(tid, w);
                    }
                    Ok(None) => {
                        self.shared
                            .counters
                            .threads_unsampled
                            .fetch_add(1, Ordering::Relaxed);
                        self.refused.insert(tid);
                    }
                }
            }
        }
        self.tasks = tasks;
    }

    /// An event on `tid`, its ring taken from the budget and within the
    /// locked-memory limit (smaller rings once it is reached).
    /// None: the thread could not be sampled; `Gone`: it has exited.
    fn open(&mut self, tid: i32, source: StackSource) -> Result<Option<Watched>, Gone> {
        if self.timers {
            if !REGISTRY.budget.try_take(timer::SLOT_BYTES) {
                return Ok(None);
            }
            return Ok(match timer::ThreadTimer::start(tid, self.hz) {
                // The budget bytes now belong to the `Watched`.
                Ok(t) => Some(Watched {
                    source: Source::Timer(t),
                    bytes: timer::SLOT_BYTES,
                }),
                Err(_) => {
                    REGISTRY.budget.give_back(timer::SLOT_BYTES);
                    None
                }
            });
        }
        // One fd per thread: at most half the process's limit of open
        // files, the rest left to the program (said once).
        if self.threads.len() >= self.fd_cap {
            if !self.said_fds {
                self.said_fds = true;
                eprintln!(
                    "ringtrace: CPU sampling: {} threads sampled, half the limit of open \
                     files (RLIMIT_NOFILE); threads beyond are not sampled",
                    self.threads.len()
                );
            }
            return Ok(None);
        }
        let page = perf::page_size() as u64;
        // This thread's ring: smaller than the others' when the budget
        // has no room for a whole one (down to 16 pages, then unsampled).
        let mut pages = self.pages;
        loop {
            let bytes = (pages as u64 + 1) * page;
            if !REGISTRY.budget.try_take(bytes) {
                if pages > 16 {
                    pages /= 2;
                    continue;
                }
                return Ok(None);
            }
            // A stack copy takes at most a quarter of a ring (rings made
            // smaller by the locked-memory limit copy less of the stack).
            let source = match source {
                StackSource::Copy(n) => {
                    StackSource::Copy(n.min((pages as u64 * page / 4) as u32 & !7))
                }
                s => s,
            };
            match PerfEvent::open(tid, self.hz, source, pages) {
                Ok(event) => {
                    return Ok(Some(Watched {
                        source: Source::Perf(event),
                        bytes,
                    }))
                }
                Err(OpenError::Map(e)) if pages > 1 => {
                    REGISTRY.budget.give_back(bytes);
                    if !self.said_mlock {
                        self.said_mlock = true;
                        eprintln!(
                            "ringtrace: CPU sampling: the locked-memory limit is reached \
                             ({e}); smaller kernel rings from now on (more samples may be lost)"
                        );
                    }
                    self.pages = pages / 2;
                    pages = self.pages;
                }
                Err(e) => {
                    REGISTRY.budget.give_back(bytes);
                    return match e {
                        OpenError::Open(e) if e.raw_os_error() == Some(libc::ESRCH) => Err(Gone),
                        _ => Ok(None),
                    };
                }
            }
        }
    }

    fn drain_all(&mut self) {
        let mut sink = std::mem::take(&mut self.batch);
        let mut threads = std::mem::take(&mut self.threads);
        for w in threads.values_mut() {
            if w.source.has_data() {
                self.drain_one(&mut w.source, &mut sink);
            }
        }
        self.threads = threads;
        self.publish(sink);
    }

    /// Reads one thread's ring or buffers; its samples go to `sink`.
    fn drain_one(&mut self, source: &mut Source, sink: &mut Vec<Sample>) {
        let mut lost = 0;
        let mut truncated = 0;
        let tables = &self.shared.tables;
        let work = &mut self.work;
        let taken = &self.shared.tables_taken;
        let mut no_memory = 0;
        let mut add = |tid, ts_ns, cpu, chain: Chain<'_>, regs: Option<[u64; 3]>, stack: &[u8]| {
            // Unwound outside the tables' lock, which the flusher holds
            // while it encodes.
            let complete = work.unwind(Some(tid), chain, regs, stack);
            let mut t = tables.lock();
            let room = tables_room(&t, taken);
            let Some(callstack) = work.interned(&mut t, room) else {
                no_memory += 1;
                return;
            };
            drop(t);
            truncated += !complete as u64;
            sink.push(Sample {
                ts_ns,
                tid,
                cpu,
                callstack,
                truncated: !complete,
            });
        };
        match source {
            Source::Perf(event) => event.drain(|r| match r {
                PerfRecord::Lost(n) => lost += n,
                PerfRecord::Sample(s) => add(s.tid, s.time_ns, s.cpu, s.chain, s.regs, s.stack),
            }),
            Source::Timer(timer) => {
                timer.drain(|c| {
                    add(
                        c.tid,
                        c.ts_ns,
                        c.cpu,
                        Chain::default(),
                        Some(c.regs),
                        c.stack,
                    )
                });
                lost += timer::DROPPED.swap(0, Ordering::Relaxed);
            }
        }
        let c = &self.shared.counters;
        c.truncated.fetch_add(truncated, Ordering::Relaxed);
        c.no_memory.fetch_add(no_memory, Ordering::Relaxed);
        lost += no_memory;
        if lost > 0 {
            c.lost.fetch_add(lost, Ordering::Relaxed);
            self.shared.pending.lock().lost += lost;
        }
    }

    /// Hands samples to the flusher (up to the cap; the rest is counted).
    fn publish(&mut self, mut sink: Vec<Sample>) {
        if !sink.is_empty() {
            let c = &self.shared.counters;
            let mut p = self.shared.pending.lock();
            let room = PENDING_CAP.saturating_sub(p.samples.len());
            let over = sink.len().saturating_sub(room) as u64;
            sink.truncate(room);
            c.samples.fetch_add(sink.len() as u64, Ordering::Relaxed);
            if over > 0 {
                c.lost.fetch_add(over, Ordering::Relaxed);
                p.lost += over;
            }
            p.samples.append(&mut sink);
        }
        self.batch = sink;
    }
}

#[cfg(test)]
mod tests;
