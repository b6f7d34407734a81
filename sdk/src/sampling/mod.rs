//! CPU stack samples of every thread of the process, on the slices' clock
//! ([`Builder::cpu_sampling`](crate::Builder::cpu_sampling), feature
//! `cpu-sampling`, Linux x86_64).
//!
//! A sampler thread (`engine`) finds the process's threads (a look at
//! `/proc/self/task` every 100 ms: threads started before the session and
//! threads of other libraries too), opens one `perf_event_open` CPU-clock
//! event per thread (`perf`), and reads the kernel's rings. A stack is
//! either the kernel's frame-pointer call chain or a copy of the user stack
//! and registers unwound there from `.eh_frame` (`unwind`);
//! [`CpuStacks::Auto`] takes the first when the program's own functions
//! keep frame pointers. Addresses become interned mappings, frames and
//! call stacks (`tables`), unnamed. The flusher takes the samples each
//! pass, names their new frames from the symbol tables (`modules`), debug
//! files and DWARF (`debuginfo`: inlined functions as frames of their own)
//! of the files mapped, and hands them to its encoder; a thread that exits
//! keeps its samples.
//!
//! Bounded: each thread's kernel ring and the interning tables are taken
//! from the session's memory budget (the tables also capped), rings kept
//! within the locked-memory limit (smaller rings once it is reached, said
//! once); the files' symbols (and DWARF tables) are capped, perf fds kept to half the limit of
//! open files; samples waiting for the flusher are capped. Losses are
//! counted in [`Stats`](crate::Stats): records the kernel dropped, samples
//! over the cap or past the tables' memory, stacks whose unwinding stopped
//! early.
//!
//! Where `perf_event_open` is refused, a CPU-time timer per thread whose
//! signal handler copies registers and stack into buffers made beforehand
//! (`timer`); where that fails too, no samples, one message on stderr, and
//! tracing goes on.

// The perf rings, `poll` and the ELF reads are system calls and raw
// memory: each `unsafe` block carries its proof.
#![allow(unsafe_code)]

pub(crate) mod held;
pub(crate) mod tables;

// The measuring harness of the sampler's instructions per sample (two
// ignored tests): it replays the sampler's private stages, so it is compiled
// into the crate's unit tests, but lives with the measurements, not in `src`.
#[cfg(all(
    test,
    feature = "cpu-sampling",
    target_os = "linux",
    target_arch = "x86_64"
))]
#[path = "../../benches/sampling_cost/mod.rs"]
mod cost;
#[cfg(all(feature = "cpu-sampling", target_os = "linux", target_arch = "x86_64"))]
mod debuginfo;
#[cfg(all(feature = "cpu-sampling", target_os = "linux", target_arch = "x86_64"))]
mod engine;
#[cfg(all(feature = "cpu-sampling", target_os = "linux", target_arch = "x86_64"))]
mod intern;
#[cfg(all(feature = "cpu-sampling", target_os = "linux", target_arch = "x86_64"))]
mod modules;
#[cfg(all(feature = "cpu-sampling", target_os = "linux", target_arch = "x86_64"))]
mod perf;
#[cfg(all(feature = "cpu-sampling", target_os = "linux", target_arch = "x86_64"))]
mod timer;
#[cfg(all(feature = "cpu-sampling", target_os = "linux", target_arch = "x86_64"))]
mod unwind;
#[cfg(all(feature = "cpu-sampling", target_os = "linux", target_arch = "x86_64"))]
mod wake;

pub(crate) use tables::SampleView;

/// How sampled stacks are taken
/// ([`Builder::cpu_sampling_stacks`](crate::Builder::cpu_sampling_stacks)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CpuStacks {
    /// Frame-pointer call chains when the program's own code keeps frame
    /// pointers (most of its functions set one up), else copied stacks.
    #[default]
    Auto,
    /// The kernel walks frame pointers: cheap, but a program built without
    /// them (the default of Rust release builds) gets stacks of one frame.
    /// `RUSTFLAGS="-C force-frame-pointers=yes"` keeps them.
    FramePointers,
    /// The kernel copies the top 8 KiB of the user stack and the
    /// registers; the sampler thread unwinds them from `.eh_frame`, reading
    /// what it needs past the copy from the thread's own stack. Whole
    /// stacks without frame pointers, at more CPU per sample than
    /// `FramePointers` (the repository's `BENCHMARKS.md`, "CPU sampling").
    CopiedStacks,
}

/// The sampling a session asked for.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Options {
    /// Samples per CPU-second of each thread (0: off).
    pub(crate) hz: u32,
    pub(crate) stacks: CpuStacks,
}

/// Sampling totals, merged into the session's `Stats`.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Totals {
    pub(crate) samples: u64,
    pub(crate) lost: u64,
    pub(crate) truncated: u64,
    pub(crate) threads: u64,
    pub(crate) threads_unsampled: u64,
    pub(crate) hz: u32,
    pub(crate) no_memory: u64,
    pub(crate) files_no_memory: u64,
    pub(crate) frames_unnamed: u64,
}

/// Starts sampling (the session's start, once its flusher runs). In
/// flight-recorder mode the file's output holds the samples beside the
/// recorder (`held`) until a write-out.
pub(crate) fn start(opts: Options) {
    if opts.hz == 0 {
        return;
    }
    #[cfg(all(feature = "cpu-sampling", target_os = "linux", target_arch = "x86_64"))]
    engine::start(opts.hz, opts.stacks);
    #[cfg(not(all(feature = "cpu-sampling", target_os = "linux", target_arch = "x86_64")))]
    eprintln!(
        "ringtrace: CPU sampling off: {}",
        if cfg!(feature = "cpu-sampling") {
            "only Linux on x86_64 is supported"
        } else {
            "ringtrace was built without its `cpu-sampling` feature"
        }
    );
}

/// Stops the sampler after its last read of the rings (the session's stop,
/// before the flusher's last pass).
pub(crate) fn stop() {
    #[cfg(all(feature = "cpu-sampling", target_os = "linux", target_arch = "x86_64"))]
    engine::stop();
}

/// Asks the sampler to read every thread's ring now, not at its next
/// wake-up (a capture was queued). Nothing when sampling is off.
pub(crate) fn read_now() {
    #[cfg(all(feature = "cpu-sampling", target_os = "linux", target_arch = "x86_64"))]
    engine::read_now();
}

/// Hands the tables samples refer to to `f` (a flight recorder's
/// write-out of the samples it held). Nothing when sampling is off.
#[allow(unused_variables)]
pub(crate) fn with_tables(f: impl FnOnce(&tables::Tables)) {
    #[cfg(all(feature = "cpu-sampling", target_os = "linux", target_arch = "x86_64"))]
    engine::with_tables(f);
}

/// Hands the samples waiting, with the tables they refer to, to `f` (the
/// flusher, each pass). Nothing when sampling is off.
#[allow(unused_variables, unused_mut)]
pub(crate) fn take_pending(mut f: impl FnMut(&SampleView<'_>)) {
    #[cfg(all(feature = "cpu-sampling", target_os = "linux", target_arch = "x86_64"))]
    engine::take_pending(f);
}

/// The session's totals; forgets the samples' state (after the flusher's
/// last pass).
pub(crate) fn end() -> Totals {
    #[cfg(all(feature = "cpu-sampling", target_os = "linux", target_arch = "x86_64"))]
    return engine::end();
    #[cfg(not(all(feature = "cpu-sampling", target_os = "linux", target_arch = "x86_64")))]
    Totals::default()
}
