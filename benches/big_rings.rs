//! Steady recording into rings of 1, 16 and 64 MiB: what every thread pays
//! per scope, the flusher included, and whether it depends on the ring's
//! size.
//!
//! Run: `cargo bench --bench big_rings`. Prints a Markdown table.
//!
//! Each run is a fresh process (this program run again as a child):
//! `start()` with `buffer_bytes(256 MiB)` and `buffer_bytes_per_thread` of
//! 1, 16 or 64 MiB (what a user sets to lose nothing in a burst), the
//! flusher at its defaults, Perfetto output. One or two threads record
//! `trace_scope!` back to back: 1M scopes of warm-up each, then (all
//! threads at once) for one second, then `flush()`. Reported, medians of
//! the runs (every size and thread count interleaved, run by run):
//!
//! - the clock floor: two `rdtsc` per iteration, same threads, before the
//!   session (thread CPU time);
//! - a recording thread's CPU time per scope;
//! - the CPU of every thread (the process's user + system time from the
//!   timed loop's start to the end of the `flush()` after it: the flusher's
//!   draining, encoding and writing of those scopes) per scope recorded by
//!   all threads, and its ratio to the floor;
//! - the budget's peak (the rings and the segments they outgrew).
//!
//! Rows that lost events are cheaper per scope than the others: a dropped
//! event costs its thread a counter and the flusher nothing (a 1 MiB ring
//! fills in about a millisecond of this flood, while the flusher looks at
//! the rings every 5 ms).
//!
//! `--child <MiB> <threads> <scopes>` runs one child with a fixed number of
//! scopes per thread after the warm-up (for callgrind: `valgrind
//! --tool=callgrind <bench binary> --child 64 1 3000000`);
//! `--timed-child <MiB> <threads> <seconds>` one timed child.
//!
//! Environment of a child: `RINGS_WARMUP` (scopes of warm-up per thread),
//! `RINGS_INTERVAL_MS` (`Builder::flush_interval`, default 100),
//! `RINGS_FLUSH_EACH=1` (`flush()` after every 200k scopes, as
//! `benches/peers` does after each repetition), `RINGS_DEBUG=1` (each
//! thread's user and system time and minor faults over the timed part, on
//! stderr).
//!
//! Environment: `RINGTRACE_BENCH_QUICK=1` (or no `--bench` argument, as
//! `cargo test --benches` runs it) runs one run of each, 0.1 s long;
//! `RINGTRACE_BENCH_DIR` chooses where the trace files go (default: the
//! system temp directory; each is deleted after its run).

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

mod common;
use common::{median, process_cpu_ns, run_child, thread_cpu_ns, two_rdtsc};

const WARMUP_DEFAULT: u64 = 1_000_000;
const BUDGET: u64 = 256 << 20;
const SIZES_MIB: [usize; 3] = [1, 16, 64];
/// Scopes between two looks at the clock or the stop flag.
const STEP: u64 = 10_000;

/// What one child process measured.
#[derive(Clone, Copy, Debug, Default)]
struct Run {
    mib: usize,
    threads: u64,
    scopes: u64,
    events_lost: u64,
    floor_ns: f64,
    thread_cpu_ns: f64,
    all_cpu_ns: f64,
    peak_mib: f64,
}

#[inline(never)]
fn scopes(n: u64) {
    for i in 0..n {
        ringtrace::trace_scope!("rings", "scope");
        black_box(i);
    }
}

/// The child: one run in this fresh process; prints its `Run` as one line.
/// `fixed`: scopes per thread (else for `secs` seconds).
fn child(mib: usize, threads: u64, fixed: Option<u64>, secs: f64) {
    let flush_each = std::env::var_os("RINGS_FLUSH_EACH").is_some();
    let step = if flush_each { 200_000 } else { STEP };
    let warmup: u64 = std::env::var("RINGS_WARMUP")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(WARMUP_DEFAULT);
    let dir = std::env::var_os("RINGTRACE_BENCH_DIR")
        .map(Into::into)
        .unwrap_or_else(std::env::temp_dir);
    let path = dir.join(format!(
        "ringtrace-big-rings-{}.pftrace",
        std::process::id()
    ));
    let floors: Vec<f64> = (0..threads)
        .map(|_| {
            std::thread::spawn(move || {
                two_rdtsc(WARMUP_DEFAULT / 10);
                let t = thread_cpu_ns();
                two_rdtsc(WARMUP_DEFAULT);
                (thread_cpu_ns() - t) as f64 / WARMUP_DEFAULT as f64
            })
        })
        .map(|h| h.join().unwrap())
        .collect();
    let guard = ringtrace::builder()
        .output(&path)
        .buffer_bytes(BUDGET)
        .buffer_bytes_per_thread(mib << 20)
        .flush_interval(Duration::from_millis(
            std::env::var("RINGS_INTERVAL_MS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(100),
        ))
        .start()
        .expect("start a session");
    let barrier = Arc::new(Barrier::new(threads as usize + 1));
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..threads)
        .map(|k| {
            let (barrier, stop, done) = (barrier.clone(), stop.clone(), done.clone());
            std::thread::Builder::new()
                .name(format!("rings-{k}"))
                .spawn(move || {
                    scopes(warmup);
                    barrier.wait(); // warmed up
                    barrier.wait(); // drained
                    let t = thread_cpu_ns();
                    let mut n = 0;
                    match fixed {
                        Some(total) => {
                            scopes(total);
                            n = total;
                        }
                        // At least one step: a thread the scheduler left
                        // out of a short run still measures something.
                        None => loop {
                            scopes(step);
                            n += step;
                            if flush_each {
                                ringtrace::flush();
                            }
                            if stop.load(Ordering::Relaxed) {
                                break;
                            }
                        },
                    }
                    let cpu = (thread_cpu_ns() - t) as f64 / n as f64;
                    done.fetch_add(n, Ordering::Relaxed);
                    barrier.wait(); // finished
                    barrier.wait(); // looked at
                    cpu
                })
                .unwrap()
        })
        .collect();
    // The warm-up's records out first: the timed part starts with the
    // rings drained (and at the size the warm-up grew them to).
    barrier.wait();
    ringtrace::flush();
    barrier.wait();
    let cpu0 = process_cpu_ns();
    let tasks0 = tasks();
    if fixed.is_none() {
        std::thread::sleep(Duration::from_secs_f64(secs));
        stop.store(true, Ordering::Relaxed);
    }
    barrier.wait();
    ringtrace::flush();
    let cpu = process_cpu_ns() - cpu0;
    let tasks1 = tasks();
    barrier.wait();
    let per_thread: Vec<f64> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    if std::env::var_os("RINGS_DEBUG").is_some() {
        for (name, &(u, s, f)) in &tasks1 {
            let (u0, s0, f0) = tasks0.get(name).copied().unwrap_or_default();
            eprintln!(
                "{name}: user {} ms sys {} ms minflt {}",
                (u - u0) * 10,
                (s - s0) * 10,
                f - f0
            );
        }
    }
    let stats = guard.stop().expect("stop");
    let _ = std::fs::remove_file(&path);
    let total = done.load(Ordering::Relaxed);
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    println!(
        "RUN {mib} {threads} {} {} {} {} {} {}",
        total / threads,
        stats.events_lost,
        mean(&floors),
        mean(&per_thread),
        cpu as f64 / total as f64,
        stats.buffer_bytes_peak as f64 / (1 << 20) as f64,
    );
}

/// Each thread's name and id: its user and system time in clock ticks
/// (10 ms), its minor faults.
fn tasks() -> std::collections::BTreeMap<String, (u64, u64, u64)> {
    let mut m = std::collections::BTreeMap::new();
    for e in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let Ok(st) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let open = st.find('(').unwrap();
        let close = st.rfind(')').unwrap();
        let name = format!(
            "{}-{}",
            &st[open + 1..close],
            e.file_name().to_string_lossy()
        );
        let f: Vec<&str> = st[close + 2..].split(' ').collect();
        let n = |i: usize| f[i].parse::<u64>().unwrap_or(0);
        m.insert(name, (n(11), n(12), n(7)));
    }
    m
}

fn parse(line: &str) -> Option<Run> {
    let f: Vec<&str> = line.strip_prefix("RUN ")?.split(' ').collect();
    Some(Run {
        mib: f[0].parse().ok()?,
        threads: f[1].parse().ok()?,
        scopes: f[2].parse().ok()?,
        events_lost: f[3].parse().ok()?,
        floor_ns: f[4].parse().ok()?,
        thread_cpu_ns: f[5].parse().ok()?,
        all_cpu_ns: f[6].parse().ok()?,
        peak_mib: f[7].parse().ok()?,
    })
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--child") {
        let fixed = args[i + 3].parse().unwrap();
        child(
            args[i + 1].parse().unwrap(),
            args[i + 2].parse().unwrap(),
            Some(fixed),
            0.0,
        );
        return;
    }
    if let Some(i) = args.iter().position(|a| a == "--timed-child") {
        let secs = args[i + 3].parse().unwrap();
        child(
            args[i + 1].parse().unwrap(),
            args[i + 2].parse().unwrap(),
            None,
            secs,
        );
        return;
    }
    let quick =
        std::env::var_os("RINGTRACE_BENCH_QUICK").is_some() || !args.iter().any(|a| a == "--bench");
    let (reps, secs) = if quick { (1, 0.1) } else { (7, 1.0) };
    let started = Instant::now();
    let mut runs: Vec<Run> = Vec::new();
    for _ in 0..reps {
        for mib in SIZES_MIB {
            for threads in [1u64, 2] {
                let args = [
                    "--timed-child",
                    &mib.to_string(),
                    &threads.to_string(),
                    &secs.to_string(),
                ];
                runs.push(run_child(&args, parse).0);
            }
        }
    }
    println!(
        "Big rings: fresh process per run, {reps} runs of each, interleaved; 1M scopes of \
         warm-up per thread, then `trace_scope!` back to back for {secs} s on all threads \
         at once, then `flush()`; buffer_bytes 256 MiB; medians.\n"
    );
    println!(
        "| per thread | threads | lost events (max) | budget peak MiB | floor ns | thread CPU \
         ns/scope | every thread's CPU ns/scope | vs floor | the rest (flusher) ns/scope |"
    );
    println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for mib in SIZES_MIB {
        for threads in [1u64, 2] {
            let rs: Vec<Run> = runs
                .iter()
                .copied()
                .filter(|r| r.threads == threads && r.mib == mib)
                .collect();
            let m = |f: fn(&Run) -> f64| median(&mut rs.iter().map(f).collect::<Vec<_>>());
            let floor = m(|r| r.floor_ns);
            println!(
                "| {mib} MiB | {threads} | {} | {:.0} | {:.1} | {:.1} | {:.1} | {:.2}x | {:.1} |",
                rs.iter().map(|r| r.events_lost).max().unwrap_or(0),
                m(|r| r.peak_mib),
                floor,
                m(|r| r.thread_cpu_ns),
                m(|r| r.all_cpu_ns),
                m(|r| r.all_cpu_ns) / floor,
                m(|r| r.all_cpu_ns - r.thread_cpu_ns),
            );
            debug_assert!(rs.iter().all(|r| r.scopes > 0));
        }
    }
    println!(
        "\nTotal bench time: {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
