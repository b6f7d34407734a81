//! A crowd: thousands of threads starting at once, each recording one scope
//! as its first event, then waiting (idle rings).
//!
//! Run: `cargo bench --bench crowd`. Prints a Markdown table.
//!
//! Each repetition is a fresh process (this program run again as a child):
//! `start()` with `buffer_bytes(64 MiB)` (room for every thread's ring),
//! the flusher at its defaults, Perfetto output; then N threads (1,000 or
//! 10,000; 256 KiB stacks) wait at a barrier, and once it opens each
//! records one `trace_scope!`, its first event, timed with the thread's CPU
//! clock (`CLOCK_THREAD_CPUTIME_ID`) and the wall clock around the scope;
//! then every thread waits, and the process holds still for one second
//! (the flusher alone, with N idle rings) before the threads end and the
//! session stops. Reported, medians over the repetitions (1,000 and 10,000
//! interleaved):
//!
//! - the first event's CPU time to its thread and its wall time: p50, p90
//!   and max over the N threads of a run;
//! - the flusher thread's CPU time over the whole run (its scheduler's
//!   run time, `/proc/self/task/<tid>/schedstat`), and over the idle
//!   second, per wake-up of the flusher (`schedstat`'s count of times it
//!   ran: each pass sleeps in between, so about one per pass).
//!
//! CPU time is the figure to read on a loaded machine: with N threads
//! runnable on a few cores, a thread's wall time is mostly waiting its turn.
//!
//! Environment: `RINGTRACE_BENCH_QUICK=1` (or no `--bench` argument, as
//! `cargo test --benches` runs it) runs one repetition with 1,000 threads;
//! `RINGTRACE_BENCH_REPS` sets the repetitions; `RINGTRACE_BENCH_DIR`
//! chooses where the trace files go (default: the system temp directory;
//! each is deleted after its run).

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

mod common;
use common::{median, run_child, thread_cpu_ns};

const BUDGET: u64 = 64 << 20;
const STACK: usize = 256 << 10;
/// How long the process holds still with every ring idle.
const IDLE: Duration = Duration::from_secs(1);

/// The flusher thread's (run time ns, times run) from its `schedstat`.
fn flusher_sched() -> (u64, u64) {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return (0, 0);
    };
    for task in tasks.flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim_end() == "ringtrace-flush" || comm.starts_with("ringtrace-flusher") {
            let s = std::fs::read_to_string(task.path().join("schedstat")).unwrap_or_default();
            let f: Vec<u64> = s
                .split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect();
            if f.len() == 3 {
                return (f[0], f[2]);
            }
        }
    }
    (0, 0)
}

#[inline(never)]
fn first_scope() {
    ringtrace::trace_scope!("crowd", "first");
}

/// The value at quantile `q` of sorted `v`.
fn quantile(v: &[u64], q: f64) -> u64 {
    v[((v.len() - 1) as f64 * q).round() as usize]
}

/// The child: one crowd of `n` threads in this fresh process; prints one
/// `RUN` line.
fn child(n: usize) {
    let dir = std::env::var_os("RINGTRACE_BENCH_DIR")
        .map(Into::into)
        .unwrap_or_else(std::env::temp_dir);
    let path = dir.join(format!("ringtrace-crowd-{}.pftrace", std::process::id()));
    let guard = ringtrace::builder()
        .output(&path)
        .buffer_bytes(BUDGET)
        .start()
        .expect("start a session");
    let (f_cpu0, _) = flusher_sched();
    let go = Arc::new(Barrier::new(n + 1));
    let recorded = Arc::new(Barrier::new(n + 1));
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let release_rx = Arc::new(std::sync::Mutex::new(release_rx));
    let handles: Vec<_> = (0..n)
        .map(|k| {
            let (go, recorded, release) = (go.clone(), recorded.clone(), release_rx.clone());
            std::thread::Builder::new()
                .name(format!("crowd-{k}"))
                .stack_size(STACK)
                .spawn(move || {
                    go.wait();
                    let (c0, w0) = (thread_cpu_ns(), Instant::now());
                    first_scope();
                    let (c1, w1) = (thread_cpu_ns(), Instant::now());
                    recorded.wait();
                    // Wait (an idle ring) until the main thread lets go.
                    let _ = release.lock().unwrap().recv();
                    (c1 - c0, (w1 - w0).as_nanos() as u64)
                })
                .expect("spawn a thread")
        })
        .collect();
    go.wait();
    recorded.wait();
    // Every thread has recorded its one scope: the flusher drains them, then
    // has only idle rings.
    std::thread::sleep(Duration::from_millis(200));
    let (i_cpu0, i_runs0) = flusher_sched();
    std::thread::sleep(IDLE);
    let (i_cpu1, i_runs1) = flusher_sched();
    for _ in 0..n {
        release_tx.send(()).unwrap();
    }
    let (mut cpu, mut wall): (Vec<u64>, Vec<u64>) =
        handles.into_iter().map(|h| h.join().unwrap()).unzip();
    let (f_cpu1, _) = flusher_sched();
    let stats = guard.stop().expect("stop");
    let _ = std::fs::remove_file(&path);
    assert_eq!(
        stats.events_written + stats.events_lost,
        2 * n as u64,
        "every event written or counted lost: {stats:?}"
    );
    cpu.sort_unstable();
    wall.sort_unstable();
    let idle_runs = (i_runs1 - i_runs0).max(1);
    println!(
        "RUN {n} {} {} {} {} {} {} {} {} {} {}",
        quantile(&cpu, 0.5),
        quantile(&cpu, 0.9),
        cpu[n - 1],
        quantile(&wall, 0.5),
        quantile(&wall, 0.9),
        wall[n - 1],
        f_cpu1 - f_cpu0,
        i_cpu1 - i_cpu0,
        idle_runs,
        stats.events_lost,
    );
}

/// One child's figures: threads, then ns (CPU p50 p90 max, wall p50 p90
/// max, flusher's CPU over the run, over the idle second), the flusher's
/// runs in the idle second, events lost.
type Run = [u64; 11];

fn parse(line: &str) -> Option<Run> {
    let f: Vec<u64> = line
        .strip_prefix("RUN ")?
        .split(' ')
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    f.try_into().ok()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--crowd-child") {
        child(args[i + 1].parse().unwrap());
        return;
    }
    let quick =
        std::env::var_os("RINGTRACE_BENCH_QUICK").is_some() || !args.iter().any(|a| a == "--bench");
    let reps: usize = std::env::var("RINGTRACE_BENCH_REPS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(if quick { 1 } else { 5 });
    let sizes: &[u64] = if quick { &[1_000] } else { &[1_000, 10_000] };
    let started = Instant::now();
    let mut runs: Vec<Run> = Vec::new();
    for _ in 0..reps {
        for &n in sizes {
            let (run, text) = run_child(&["--crowd-child", &n.to_string()], parse);
            let line = text.lines().find(|l| l.starts_with("RUN ")).unwrap();
            eprintln!("{line}");
            runs.push(run);
        }
    }
    println!(
        "Crowd: fresh process per run, {reps} runs of each; N threads released at once by a \
         barrier, each recording one `trace_scope!` as its first event, then waiting; \
         buffer_bytes 64 MiB; medians over the runs of each run's figure.\n"
    );
    println!(
        "| threads | first event CPU µs p50 / p90 / max | wall µs p50 / p90 / max \
         | flusher CPU ms, whole run | flusher, idle rings: µs per wake | wakes/s | lost |"
    );
    println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for &n in sizes {
        let rs: Vec<Run> = runs.iter().copied().filter(|r| r[0] == n).collect();
        let m = |f: &dyn Fn(&Run) -> f64| median(&mut rs.iter().map(f).collect::<Vec<_>>());
        let us = |i: usize| m(&|r: &Run| r[i] as f64 / 1e3);
        println!(
            "| {n} | {:.1} / {:.1} / {:.0} | {:.0} / {:.0} / {:.0} | {:.1} | {:.1} | {:.0} | {} |",
            us(1),
            us(2),
            us(3),
            us(4),
            us(5),
            us(6),
            m(&|r: &Run| r[7] as f64 / 1e6),
            m(&|r: &Run| r[8] as f64 / 1e3 / r[9] as f64),
            m(&|r: &Run| r[9] as f64 / IDLE.as_secs_f64()),
            rs.iter().map(|r| r[10]).max().unwrap_or(0),
        );
    }
    println!(
        "\nTotal bench time: {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
