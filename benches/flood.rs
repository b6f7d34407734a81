//! A flood into growing rings: how much of it is recorded, and what every
//! thread pays for it.
//!
//! Run: `cargo bench --bench flood`. Prints a Markdown table.
//!
//! Each repetition is a fresh process (this program run again as a child):
//! `start()` with `buffer_bytes(256 MiB)` and `buffer_bytes_per_thread(64
//! MiB)` (room for every event of the run), the flusher at its defaults,
//! Perfetto output; then on each of one or two new threads (their rings
//! start at 1 KiB and grow) 100k `trace_scope!` of warm-up and, all threads
//! at once, 1M back to back; then `stop()`. Reported, medians over the
//! repetitions (one- and two-thread runs interleaved):
//!
//! - recorded: the scopes' events in the file (`Stats::events_written`) over
//!   those recorded; the rest are counted lost (`Stats::events_lost`);
//! - the clock floor: two `rdtsc` per iteration, same threads, before the
//!   session (thread CPU time);
//! - a recording thread's CPU time per scope over the 1M loop, and its
//!   ratio to the floor;
//! - the CPU of every thread (the process's user + system time, flusher
//!   and the writes included, from the flood's start to the end of `stop`)
//!   per scope recorded by all threads.
//!
//! Times are only meaningful on a quiet machine; the recorded share and the
//! losses are counts, and do not depend on it as much (a slower flusher
//! leaves rings fuller, which is what the run is about).
//!
//! Environment: `RINGTRACE_BENCH_QUICK=1` (or no `--bench` argument, as
//! `cargo test --benches` runs it) runs one repetition of 100k scopes;
//! `RINGTRACE_BENCH_DIR` chooses where the trace files go (default: the
//! system temp directory; each is deleted after its run).

use std::hint::black_box;
use std::sync::{Arc, Barrier};
use std::time::Instant;

mod common;
use common::{median, process_cpu_ns, run_child, thread_cpu_ns, two_rdtsc};

const WARMUP: u64 = 100_000;
const BUDGET: u64 = 256 << 20;
const PER_THREAD: usize = 64 << 20;

/// What one child process measured.
#[derive(Clone, Copy, Debug, Default)]
struct Run {
    threads: u64,
    scopes: u64,
    recorded_pct: f64,
    events_lost: u64,
    floor_ns: f64,
    thread_cpu_ns: f64,
    all_cpu_ns: f64,
    wall_ns: f64,
}

#[inline(never)]
fn scopes(n: u64) {
    for i in 0..n {
        ringtrace::trace_scope!("flood", "scope");
        black_box(i);
    }
}

/// The child: one flood in this fresh process; prints its `Run` as one line.
fn child(threads: u64, scopes_each: u64) {
    let dir = std::env::var_os("RINGTRACE_BENCH_DIR")
        .map(Into::into)
        .unwrap_or_else(std::env::temp_dir);
    let path = dir.join(format!("ringtrace-flood-{}.pftrace", std::process::id()));
    // The floor first, on threads of their own (no session yet).
    let floors: Vec<f64> = (0..threads)
        .map(|_| {
            std::thread::spawn(move || {
                two_rdtsc(WARMUP);
                let t = thread_cpu_ns();
                two_rdtsc(scopes_each);
                (thread_cpu_ns() - t) as f64 / scopes_each as f64
            })
        })
        .map(|h| h.join().unwrap())
        .collect();
    let guard = ringtrace::builder()
        .output(&path)
        .buffer_bytes(BUDGET)
        .buffer_bytes_per_thread(PER_THREAD)
        .start()
        .expect("start a session");
    let barrier = Arc::new(Barrier::new(threads as usize + 1));
    let handles: Vec<_> = (0..threads)
        .map(|k| {
            let barrier = barrier.clone();
            std::thread::Builder::new()
                .name(format!("flood-{k}"))
                .spawn(move || {
                    scopes(WARMUP);
                    barrier.wait();
                    let t = thread_cpu_ns();
                    scopes(scopes_each);
                    (thread_cpu_ns() - t) as f64 / scopes_each as f64
                })
                .unwrap()
        })
        .collect();
    barrier.wait();
    let (cpu0, wall0) = (process_cpu_ns(), Instant::now());
    let per_thread: Vec<f64> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let wall = wall0.elapsed();
    let stats = guard.stop().expect("stop");
    let cpu = process_cpu_ns() - cpu0;
    let _ = std::fs::remove_file(&path);
    let total_scopes = threads * (WARMUP + scopes_each);
    let expected = 2 * total_scopes;
    assert_eq!(
        stats.events_written + stats.events_lost,
        expected,
        "every event written or counted lost: {stats:?}"
    );
    let flood = (threads * scopes_each) as f64;
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    println!(
        "RUN {threads} {scopes_each} {} {} {} {} {} {}",
        100.0 * stats.events_written as f64 / expected as f64,
        stats.events_lost,
        mean(&floors),
        mean(&per_thread),
        cpu as f64 / flood,
        wall.as_nanos() as f64 / scopes_each as f64,
    );
}

fn parse(line: &str) -> Option<Run> {
    let f: Vec<&str> = line.strip_prefix("RUN ")?.split(' ').collect();
    Some(Run {
        threads: f[0].parse().ok()?,
        scopes: f[1].parse().ok()?,
        recorded_pct: f[2].parse().ok()?,
        events_lost: f[3].parse().ok()?,
        floor_ns: f[4].parse().ok()?,
        thread_cpu_ns: f[5].parse().ok()?,
        all_cpu_ns: f[6].parse().ok()?,
        wall_ns: f[7].parse().ok()?,
    })
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--flood-child") {
        child(args[i + 1].parse().unwrap(), args[i + 2].parse().unwrap());
        return;
    }
    let quick =
        std::env::var_os("RINGTRACE_BENCH_QUICK").is_some() || !args.iter().any(|a| a == "--bench");
    let (reps, scopes_each) = if quick { (1, 100_000) } else { (7, 1_000_000) };
    let started = Instant::now();
    let mut runs: Vec<Run> = Vec::new();
    for _ in 0..reps {
        for threads in [1u64, 2] {
            let args = [
                "--flood-child",
                &threads.to_string(),
                &scopes_each.to_string(),
            ];
            runs.push(run_child(&args, parse).0);
        }
    }
    println!(
        "Flood: fresh process per run, {} runs of each; 100k scopes of warm-up, then {} \
         `trace_scope!` per thread, all threads at once; buffer_bytes 256 MiB, \
         buffer_bytes_per_thread 64 MiB; medians.\n",
        reps, scopes_each
    );
    println!(
        "| threads | recorded | lost events (max) | floor ns | thread CPU ns/scope | vs floor \
         | every thread's CPU ns/scope | vs floor | wall ns/scope |"
    );
    println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for threads in [1u64, 2] {
        let rs: Vec<Run> = runs
            .iter()
            .copied()
            .filter(|r| r.threads == threads)
            .collect();
        let m = |f: fn(&Run) -> f64| median(&mut rs.iter().map(f).collect::<Vec<_>>());
        let floor = m(|r| r.floor_ns);
        let min_recorded = rs
            .iter()
            .map(|r| r.recorded_pct)
            .fold(f64::INFINITY, f64::min);
        println!(
            "| {threads} | {:.2}% (min {:.2}%) | {} | {:.1} | {:.1} | {:.2}x | {:.1} | {:.2}x | {:.1} |",
            m(|r| r.recorded_pct),
            min_recorded,
            rs.iter().map(|r| r.events_lost).max().unwrap_or(0),
            floor,
            m(|r| r.thread_cpu_ns),
            m(|r| r.thread_cpu_ns) / floor,
            m(|r| r.all_cpu_ns),
            m(|r| r.all_cpu_ns) / floor,
            m(|r| r.wall_ns),
        );
        debug_assert!(rs.iter().all(|r| r.scopes == scopes_each));
    }
    println!(
        "\nTotal bench time: {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
