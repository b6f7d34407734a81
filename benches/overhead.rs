//! ringtrace's own overhead, measured against the clock floor in one run.
//!
//! Run: `cargo bench --bench overhead` (about 15 s). Prints a Markdown table.
//!
//! No benchmark framework: each measurement is a loop of `iters` iterations
//! timed with `Instant`, repeated `reps` times; the table gives the median
//! (and the minimum) ns per iteration, and the ratio of the median to the
//! median of the clock floor (two reads of the clock the hot path uses).
//!
//! The enabled measurements must not measure the drop path: every session is
//! sized so nothing is dropped (rings of 32 MiB, drained with `flush()`
//! between repetitions, never during one), and `events_lost` is printed.
//!
//! Environment: `RINGTRACE_BENCH_QUICK=1` runs fewer repetitions (a smoke
//! test, also what `cargo test --benches` runs); `RINGTRACE_BENCH_DIR` chooses where the trace files go (default:
//! the system temp directory).

use std::hint::black_box;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

mod common;
use common::{bench, machine, median, summarize, two_boottime, two_rdtsc, Sample};

// ---------------------------------------------------------------- harness

/// Times `f(iters)` `reps` times after one warm-up call of at most 10,000
/// iterations; `between` runs untimed after each (draining the rings).
fn timed(reps: usize, iters: u64, f: impl FnMut(u64), between: impl FnMut()) -> Sample {
    bench(reps, iters, &[iters.min(10_000)], f, between)
}

// ---------------------------------------------------------------- workloads

static FLAG: AtomicU8 = AtomicU8::new(1);

#[cold]
#[inline(never)]
fn never() {
    black_box(());
}

/// The empty loop plus what a disabled site does: one relaxed load and a branch.
#[inline(never)]
fn empty_loop_relaxed_load(n: u64) {
    for i in 0..n {
        if FLAG.load(Ordering::Relaxed) == 2 {
            never();
        }
        black_box(i);
    }
}

#[inline(never)]
fn scope_disabled(n: u64) {
    for i in 0..n {
        ringtrace::trace_scope!("off", "disabled");
        black_box(i);
    }
}

#[inline(never)]
fn scope_static(n: u64) {
    for i in 0..n {
        ringtrace::trace_scope!("bench", "scope");
        black_box(i);
    }
}

#[inline(never)]
fn scope_int_arg(n: u64) {
    for i in 0..n {
        ringtrace::trace_scope!("bench", "scope_arg", i = i);
        black_box(i);
    }
}

/// Nested scopes (two levels, interned names): `n` iterations, `2n` scopes.
#[inline(never)]
fn nested_scopes(n: u64) {
    for i in 0..n {
        ringtrace::trace_scope!("bench", "outer");
        {
            ringtrace::trace_scope!("bench", "inner");
            black_box(i);
        }
    }
}

// ---------------------------------------------------------------- process info

fn proc_status_kib(key: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Resets VmHWM to the current RSS (Linux >= 4.0); false if not allowed.
fn reset_peak() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

fn out_dir() -> PathBuf {
    std::env::var_os("RINGTRACE_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir)
}

// ---------------------------------------------------------------- phases

const RING: usize = 32 << 20;

struct Row {
    what: String,
    sample: Option<Sample>,
    floor: Option<f64>,
    note: String,
}

fn main() {
    // `cargo bench` passes `--bench`; without it (`cargo test --benches`)
    // the run is a quick smoke test.
    let quick = std::env::var_os("RINGTRACE_BENCH_QUICK").is_some()
        || !std::env::args().any(|a| a == "--bench");
    let (reps, iters) = if quick { (3, 20_000) } else { (15, 200_000) };
    let started = Instant::now();
    let dir = out_dir();
    // `RINGTRACE_BENCH_ONLY=encode`: the encoding rows alone, for
    // interleaving runs of two builds (and profiling the flusher).
    if std::env::var("RINGTRACE_BENCH_ONLY").as_deref() == Ok("encode") {
        let rows = encode_rows(&dir, quick);
        print_encode_rows(&rows);
        println!("Total bench time: {:.1} s", started.elapsed().as_secs_f64());
        return;
    }
    // `RINGTRACE_BENCH_ONLY=first-lap`: the two first-lap rows and the
    // floor alone, for interleaving runs of two builds under `perf stat`.
    if std::env::var("RINGTRACE_BENCH_ONLY").as_deref() == Ok("first-lap") {
        LAP_DETAIL.store(true, Ordering::Relaxed);
        let floor = timed(reps, iters * 5, two_rdtsc, || {}).median;
        let laps = if quick { 2 } else { 7 };
        let (_, lap, faults, sys, start_us) = first_lap(&dir, laps, iters);
        let (thread_lap, thread_faults) = first_lap_of_new_threads(&dir, laps, iters);
        println!(
            "floor {floor:.2} ns | fresh session: {:.2} ns ({:.2}x), {faults:.0} faults, \
             {sys:.0} us in the kernel, start() {start_us:.0} us | new thread: {:.2} ns \
             ({:.2}x), {thread_faults:.0} faults",
            lap.median,
            lap.median / floor,
            thread_lap.median,
            thread_lap.median / floor
        );
        return;
    }
    let mut rows: Vec<Row> = Vec::new();

    // Floors: no session. FLAG is stored at run time so that the compiler
    // cannot fold its load into a constant.
    FLAG.store(black_box(1), Ordering::Relaxed);
    let rdtsc = timed(reps, iters * 5, two_rdtsc, || {});
    let vdso = timed(reps, iters * 2, two_boottime, || {});
    let empty = timed(reps, iters * 50, empty_loop_relaxed_load, || {});
    let floor = rdtsc.median;
    let rdtsc_two = two_threads(reps, iters * 5, two_rdtsc, false);

    // Recording session: drop mode, big rings, no timed drain. Only the
    // "bench" category is on, so "off" sites are disabled.
    reset_peak();
    let rss_before = proc_status_kib("VmRSS:");
    let path = dir.join("ringtrace-bench-overhead.pftrace");
    let guard = ringtrace::builder()
        .output(&path)
        .buffer_bytes_per_thread(RING)
        .buffer_bytes(8 * RING as u64) // two threads' rings, and what they outgrew
        .overwrite(false)
        .flush_interval(Duration::from_secs(3600))
        .enable_categories(["bench"])
        .start()
        .expect("start a session");
    let drain = ringtrace::flush;
    let disabled = timed(reps, iters * 50, scope_disabled, || {});
    let enabled = timed(reps, iters, scope_static, drain);
    let with_arg = timed(reps, iters, scope_int_arg, drain);
    let two = two_threads(reps, iters, scope_static, true);
    let stats = guard.stop().expect("stop");
    let (first_event, first_lap, lap_faults, lap_sys, start_us) =
        first_lap(&dir, if quick { 2 } else { 7 }, iters);
    let (thread_lap, thread_faults) =
        first_lap_of_new_threads(&dir, if quick { 2 } else { 7 }, iters);
    let hwm_record = proc_status_kib("VmHWM:");
    // Scopes per loop (warm-up included), 2 events each: two single-thread
    // loops and two threads.
    let per_loop = reps as u64 * iters + iters.min(10_000);
    let recorded = 2 * per_loop * 4;
    assert_eq!(
        stats.events_lost, 0,
        "the recording benchmarks dropped events: they measured the drop path"
    );

    rows.push(Row {
        what: "two rdtsc (the floor: what the hot path reads)".into(),
        sample: Some(rdtsc),
        floor: Some(floor),
        note: String::new(),
    });
    rows.push(Row {
        what: "two rdtsc, 2 threads at once (per thread)".into(),
        sample: Some(rdtsc_two),
        floor: Some(floor),
        note: format!(
            "{:.2}x one thread: what the machine gives 2 threads",
            rdtsc_two.median / rdtsc.median
        ),
    });
    rows.push(Row {
        what: "two clock_gettime(CLOCK_BOOTTIME) (vDSO)".into(),
        sample: Some(vdso),
        floor: Some(floor),
        note: String::new(),
    });
    rows.push(Row {
        what: "`trace_scope!` enabled, static name (begin + end)".into(),
        sample: Some(enabled),
        floor: Some(floor),
        note: format!("{:.2}x the vDSO floor", enabled.median / vdso.median),
    });
    rows.push(Row {
        what: "`trace_scope!` enabled, one int arg".into(),
        sample: Some(with_arg),
        floor: Some(floor),
        note: String::new(),
    });
    rows.push(Row {
        what: "`trace_scope!` enabled, 2 threads at once (per scope per thread)".into(),
        sample: Some(two),
        floor: Some(floor),
        note: format!(
            "{:.2}x one thread; {:.2}x the 2-thread floor",
            two.median / enabled.median,
            two.median / rdtsc_two.median
        ),
    });
    rows.push(Row {
        what: "`trace_scope!` enabled, first lap through a fresh 16 MiB ring".into(),
        sample: Some(first_lap),
        floor: Some(floor),
        note: format!(
            "start(): {:.0} us; the thread's first event (creates the ring): {:.0} us; in the lap, the recording thread took {:.0} page faults and {:.0} us in the kernel",
            start_us,
            first_event.median / 1e3,
            lap_faults,
            lap_sys
        ),
    });
    rows.push(Row {
        what: "`trace_scope!` enabled, first lap of a new thread in a running session (16 MiB)"
            .into(),
        sample: Some(thread_lap),
        floor: Some(floor),
        note: format!("{thread_faults:.0} page faults on the recording thread in the lap"),
    });
    rows.push(Row {
        what: "`trace_scope!` disabled (category off)".into(),
        sample: Some(disabled),
        floor: None,
        note: format!(
            "{:+.2} ns vs the empty loop",
            disabled.median - empty.median
        ),
    });
    rows.push(Row {
        what: "empty loop + relaxed load (baseline of disabled)".into(),
        sample: Some(empty),
        floor: None,
        note: String::new(),
    });

    let enc_rows = encode_rows(&dir, quick);

    // Drop mode under pressure: one thread, back to back for 1 s, 8 MiB ring.
    let loss = drop_mode_loss(&dir, if quick { 0.2 } else { 1.0 });

    // ------------------------------------------------------------ report
    println!();
    println!("## ringtrace overhead ({})", machine());
    println!();
    println!(
        "Clock mode: {}. Medians of {reps} repetitions; ratio = median / median of two rdtsc.",
        if std::env::var("RINGTRACE_CLOCK").as_deref() == Ok("boottime") {
            "CLOCK_BOOTTIME (forced)"
        } else {
            "TSC where invariant, else CLOCK_BOOTTIME"
        }
    );
    println!();
    println!("| measurement | median ns | min ns | ratio to floor | note |");
    println!("| --- | ---: | ---: | ---: | --- |");
    for r in &rows {
        let s = r.sample.unwrap();
        let ratio = r
            .floor
            .map_or("".to_string(), |f| format!("{:.2}x", s.median / f));
        println!(
            "| {} | {:.2} | {:.2} | {} | {} |",
            r.what, s.median, s.min, ratio, r.note
        );
    }
    println!();
    println!(
        "Recording session: {} events recorded, events_written {}, events_lost {}, \
         rings {} MiB/thread, peak RSS {} (RSS before {}).",
        recorded,
        stats.events_written,
        stats.events_lost,
        RING >> 20,
        mib(hwm_record),
        mib(rss_before)
    );
    println!();
    print_encode_rows(&enc_rows);
    println!();
    println!(
        "Drop mode, one thread recording scopes back to back for {:.1} s into an 8 MiB ring \
         (flusher at its defaults): {} events recorded, {} lost ({:.1}%), {} written.",
        loss.seconds,
        loss.recorded,
        loss.lost,
        100.0 * loss.lost as f64 / loss.recorded.max(1) as f64,
        loss.written
    );
    println!();
    println!("Total bench time: {:.1} s", started.elapsed().as_secs_f64());
}

/// Runs `f` on two threads at once, repetition by repetition (a barrier
/// between them); each thread times its own loop. With `drain`, the rings are
/// flushed between repetitions.
fn two_threads(reps: usize, iters: u64, f: fn(u64), drain: bool) -> Sample {
    let barrier = Arc::new(Barrier::new(2));
    let handles: Vec<_> = (0..2)
        .map(|k| {
            let barrier = barrier.clone();
            std::thread::Builder::new()
                .name(format!("bench-{k}"))
                .spawn(move || {
                    let mut v = Vec::with_capacity(reps);
                    f(iters.min(10_000)); // creates this thread's ring
                    barrier.wait();
                    for _ in 0..reps {
                        barrier.wait();
                        let t = Instant::now();
                        f(iters);
                        v.push(t.elapsed().as_nanos() as f64 / iters as f64);
                        barrier.wait();
                        if drain && k == 0 {
                            ringtrace::flush();
                        }
                        barrier.wait();
                    }
                    v
                })
                .unwrap()
        })
        .collect();
    let mut all = Vec::new();
    for h in handles {
        all.extend(h.join().unwrap());
    }
    summarize(all)
}

/// The session of the first-lap rows: rings that grow to 16 MiB, a budget
/// with room for them, and no timed flush during the lap.
fn lap_session(path: &std::path::Path) -> ringtrace::TraceGuard {
    ringtrace::builder()
        .output(path)
        .buffer_bytes_per_thread(16 << 20)
        .buffer_bytes(64 << 20)
        .flush_interval(Duration::from_secs(3600))
        .enable_categories(["bench"])
        .start()
        .expect("start")
}

/// A fresh session per repetition: times the thread's first event (which
/// creates its ring) and then `iters` scopes written into the ring's first
/// lap (page faults land here unless the ring was mapped in up front).
/// Also returns the medians of the page faults the recording thread took in
/// the lap and of its time in the kernel (us), its own only: the flusher's
/// mapping in is not counted; and the median time `start()` took (us).
fn first_lap(dir: &std::path::Path, reps: usize, iters: u64) -> (Sample, Sample, f64, f64, f64) {
    let mut starts = Vec::new();
    let mut first = Vec::new();
    let mut lap = Vec::new();
    let mut faults = Vec::new();
    let mut system = Vec::new();
    let path = dir.join("ringtrace-bench-first-lap.pftrace");
    for _ in 0..reps {
        // The last repetition's trace goes first, untimed: `start()` would
        // truncate it, and freeing a file of many MiB is the file system's
        // time (5 to 7 ms here), not ringtrace's.
        let _ = std::fs::remove_file(&path);
        let t = Instant::now();
        let guard = lap_session(&path);
        starts.push(t.elapsed().as_nanos() as f64 / 1e3);
        let t = Instant::now();
        ringtrace::trace_instant!("bench", "first");
        first.push(t.elapsed().as_nanos() as f64);
        scope_static(1); // registers the site
        let before = thread_usage();
        let (f, sys, _, _) = before;
        let t = Instant::now();
        scope_static(iters);
        lap.push(t.elapsed().as_nanos() as f64 / iters as f64);
        let after = thread_usage();
        let (f2, sys2, _, _) = after;
        lap_detail("fresh session", *lap.last().unwrap(), before, after);
        faults.push((f2 - f) as f64);
        system.push((sys2 - sys) as f64);
        let stats = guard.stop().expect("stop");
        assert_eq!(stats.events_lost, 0);
    }
    let _ = std::fs::remove_file(&path);
    let faults = median(&mut faults);
    (
        summarize(first),
        summarize(lap),
        faults,
        median(&mut system),
        median(&mut starts),
    )
}

/// One session, a new thread per repetition: its first lap through a ring
/// growing to 16 MiB, as a thread that starts in a running program sees it
/// (the flusher is already running, waiting for work). Returns the lap's
/// ns per scope and the median of the thread's page faults in the lap.
fn first_lap_of_new_threads(dir: &std::path::Path, reps: usize, iters: u64) -> (Sample, f64) {
    let guard = lap_session(&dir.join("ringtrace-bench-thread-lap.pftrace"));
    scope_static(1); // registers the site
    ringtrace::flush();
    let mut lap = Vec::new();
    let mut faults = Vec::new();
    for _ in 0..reps {
        let (ns, f) = std::thread::spawn(move || {
            ringtrace::trace_instant!("bench", "first");
            let before = thread_usage();
            let t = Instant::now();
            scope_static(iters);
            let ns = t.elapsed().as_nanos() as f64 / iters as f64;
            let after = thread_usage();
            lap_detail("new thread", ns, before, after);
            (ns, (after.0 - before.0) as f64)
        })
        .join()
        .unwrap();
        lap.push(ns);
        faults.push(f);
        ringtrace::flush(); // drains the exited thread's ring, which is freed
    }
    let stats = guard.stop().expect("stop");
    assert_eq!(stats.events_lost, 0);
    let _ = std::fs::remove_file(dir.join("ringtrace-bench-thread-lap.pftrace"));
    (summarize(lap), median(&mut faults))
}

/// Page faults (minor and major) the calling thread has taken, its time in
/// the kernel in us (sampled: coarse in a VM), its involuntary context
/// switches (preemptions: on a shared machine, what makes a lap's wall
/// clock noisy) and its voluntary ones (waits: a lock, a page being mapped
/// in by another thread).
fn thread_usage() -> (i64, i64, i64, i64) {
    // SAFETY: an all-zero `rusage` is a valid value (integers and timevals).
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable `rusage`; RUSAGE_THREAD asks about
    // the calling thread only.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    assert_eq!(rc, 0, "getrusage(RUSAGE_THREAD)");
    let sys = ru.ru_stime.tv_sec * 1_000_000 + ru.ru_stime.tv_usec;
    (ru.ru_minflt + ru.ru_majflt, sys, ru.ru_nivcsw, ru.ru_nvcsw)
}

/// `RINGTRACE_BENCH_ONLY=first-lap`: each lap's numbers on stderr too.
static LAP_DETAIL: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Prints one lap's numbers if `LAP_DETAIL`.
fn lap_detail(what: &str, ns: f64, before: (i64, i64, i64, i64), after: (i64, i64, i64, i64)) {
    if LAP_DETAIL.load(Ordering::Relaxed) {
        eprintln!(
            "{what}: {ns:.2} ns, {} faults, {} us in the kernel, {} involuntary switches, \
             {} waits",
            after.0 - before.0,
            after.1 - before.1,
            after.2 - before.2,
            after.3 - before.3
        );
    }
}

/// Scope pairs per encoding round.
fn encode_iters(quick: bool) -> u64 {
    if quick {
        50_000
    } else {
        250_000
    }
}

/// Encoding: flight-recorder mode so nothing drains before `flush()`.
fn encode_rows(dir: &std::path::Path, quick: bool) -> Vec<EncodeRow> {
    let n_iter = encode_iters(quick); // 2 scopes each
    let formats: [(&str, &str, bool); 3] = [
        ("Perfetto", "pftrace", true),
        ("Perfetto, source_locations(false)", "pftrace", false),
        ("Chrome JSON (X events)", "json", true),
    ];
    let mut enc_rows = Vec::new();
    for (name, ext, src) in formats {
        enc_rows.push(encode_phase(
            dir,
            name,
            ext,
            src,
            n_iter,
            if quick { 2 } else { 9 },
        ));
    }
    enc_rows
}

fn print_encode_rows(enc_rows: &[EncodeRow]) {
    let n_iter = enc_rows.first().map_or(0, |e| e.n_iter);
    println!(
        "| format | events/s encoded (flush) | bytes/scope on disk | finish: stop() after flush | finish: stop() with {} scopes pending | peak RSS (at start; ring) | events lost |",
        2 * n_iter
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    for e in enc_rows {
        println!(
            "| {} | {:.1} M | {:.1} | {:.2} ms | {:.1} ms | {} ({}; {} MiB) | {} |",
            e.name,
            e.events_per_s / 1e6,
            e.bytes_per_scope,
            e.finish_empty_ms,
            e.finish_pending_ms,
            mib(e.peak_kib),
            mib(e.rss_start_kib),
            e.ring_mib,
            e.lost
        );
    }
}

struct EncodeRow {
    n_iter: u64,
    name: &'static str,
    events_per_s: f64,
    bytes_per_scope: f64,
    finish_empty_ms: f64,
    finish_pending_ms: f64,
    peak_kib: u64,
    rss_start_kib: u64,
    ring_mib: usize,
    lost: u64,
}

/// Records `rounds` x `n_iter` nested scope pairs in overwrite mode, times
/// each `flush()` (the flusher's encode throughput), then times `stop()`;
/// then a second session whose `stop()` finds everything still in the ring.
fn encode_phase(
    dir: &std::path::Path,
    name: &'static str,
    ext: &str,
    src: bool,
    n_iter: u64,
    rounds: usize,
) -> EncodeRow {
    let ring = ((n_iter as usize * 2 * 32) * 2).next_power_of_two();
    reset_peak();
    let rss_start = proc_status_kib("VmRSS:");
    let path = dir.join(format!(
        "ringtrace-bench-{}{}.{ext}",
        ext,
        if src { "" } else { "-nosrc" }
    ));
    // Both sessions: a flight recorder into `path`.
    let start = || {
        ringtrace::builder()
            .output(&path)
            .buffer_bytes_per_thread(ring)
            .buffer_bytes(4 * ring as u64) // the flight recorder keeps half
            .overwrite(true)
            .source_locations(src)
            .enable_categories(["bench"])
            .start()
            .expect("start")
    };
    let guard = start();
    nested_scopes(10); // the thread's ring, interning
    ringtrace::flush();
    let header = std::fs::metadata(&path).map_or(0, |m| m.len());
    let mut rates = Vec::new();
    for _ in 0..rounds {
        nested_scopes(n_iter);
        let t = Instant::now();
        ringtrace::flush();
        rates.push((n_iter * 4) as f64 / t.elapsed().as_secs_f64());
    }
    let t = Instant::now();
    let stats = guard.stop().expect("stop");
    let finish_empty = t.elapsed().as_secs_f64() * 1e3;
    let size = std::fs::metadata(&path).map_or(0, |m| m.len());
    let bytes_per_scope = size.saturating_sub(header) as f64 / (2 * n_iter * rounds as u64) as f64;
    let mut lost = stats.events_lost;

    // Finish with everything still buffered.
    let guard = start();
    nested_scopes(n_iter);
    let t = Instant::now();
    let stats = guard.stop().expect("stop");
    let finish_pending = t.elapsed().as_secs_f64() * 1e3;
    lost += stats.events_lost;
    let peak = proc_status_kib("VmHWM:");
    let _ = std::fs::remove_file(&path);
    EncodeRow {
        n_iter,
        name,
        events_per_s: median(&mut rates),
        bytes_per_scope,
        finish_empty_ms: finish_empty,
        finish_pending_ms: finish_pending,
        peak_kib: peak,
        rss_start_kib: rss_start,
        ring_mib: ring >> 20,
        lost,
    }
}

struct Loss {
    seconds: f64,
    recorded: u64,
    lost: u64,
    written: u64,
}

fn drop_mode_loss(dir: &std::path::Path, seconds: f64) -> Loss {
    let path = dir.join("ringtrace-bench-loss.pftrace");
    let guard = ringtrace::builder()
        .output(&path)
        .buffer_bytes_per_thread(8 << 20)
        .buffer_bytes(32 << 20)
        .overwrite(false)
        .enable_categories(["bench"])
        .start()
        .expect("start");
    let end = Instant::now() + Duration::from_secs_f64(seconds);
    let mut scopes = 0u64;
    while Instant::now() < end {
        scope_static(1000);
        scopes += 1000;
    }
    let stats = guard.stop().expect("stop");
    let _ = std::fs::remove_file(&path);
    Loss {
        seconds,
        recorded: 2 * scopes,
        lost: stats.events_lost,
        written: stats.events_written,
    }
}
