//! What the benchmarks share, written once: the clock floor (two reads of
//! the clock the hot path uses), CPU time, medians, a timed loop and its
//! summary, the machine a run was on, and a repetition run as a fresh
//! process. A folder with a `mod.rs`, so that Cargo does not take it for a
//! benchmark of its own; the separate bench crates (`benches/peers/`,
//! `benches/service/`) and `perfetto-test-host`'s bench include this same
//! file with `#[path]` (they are not in a workspace with the root suite).
//! Needs the `libc` crate.

// Each benchmark compiles this module in and uses a part of it.
#![allow(dead_code)]

use std::hint::black_box;

/// Two reads of the clock the hot path uses, `n` times: the floor a
/// scope's cost is compared with.
#[cfg(target_arch = "x86_64")]
#[inline(never)]
pub fn two_rdtsc(n: u64) {
    for _ in 0..n {
        // SAFETY: RDTSC exists on every x86-64 CPU and has no memory effects.
        let (a, b) = unsafe { (core::arch::x86_64::_rdtsc(), core::arch::x86_64::_rdtsc()) };
        black_box(a);
        black_box(b);
    }
}

/// Elsewhere the hot path reads `CLOCK_BOOTTIME`: the floor is two of those.
#[cfg(not(target_arch = "x86_64"))]
#[inline(never)]
pub fn two_rdtsc(n: u64) {
    two_boottime(n)
}

/// The time of `clock` in ns (`CLOCK_BOOTTIME`, `CLOCK_THREAD_CPUTIME_ID`:
/// through the vDSO). Inlined: the clock floor is two of these reads.
#[inline(always)]
pub fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write into; the callers pass
    // clocks Linux has.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// `CLOCK_BOOTTIME` in ns: the clock the hot path reads where it has no TSC.
#[inline(always)]
fn boottime() -> u64 {
    clock_ns(libc::CLOCK_BOOTTIME)
}

/// The CPU time of the calling thread so far, in ns.
pub fn thread_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// The CPU time of every thread of the process so far, in ns.
pub fn process_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// Two reads of `CLOCK_BOOTTIME`, `n` times.
#[inline(never)]
pub fn two_boottime(n: u64) {
    for _ in 0..n {
        let a = boottime();
        let b = boottime();
        black_box(a);
        black_box(b);
    }
}

/// The median (of the two middle values for an even count; NaN for none)
/// of `v` (a `Vec` or a `&mut` slice, which it sorts).
pub fn median(mut v: impl AsMut<[f64]>) -> f64 {
    let v = v.as_mut();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// One measurement's repetitions, in ns per iteration.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    pub median: f64,
    pub min: f64,
}

/// The median and the minimum of `per_iter`.
pub fn summarize(mut per_iter: Vec<f64>) -> Sample {
    let min = per_iter.iter().cloned().fold(f64::INFINITY, f64::min);
    Sample {
        median: median(&mut per_iter),
        min,
    }
}

/// Times `f(iters)` `reps` times, after untimed warm-up calls `f(n)` for
/// each `n` of `warmup`; `between` runs untimed after each call (draining
/// the rings, say).
pub fn bench(
    reps: usize,
    iters: u64,
    warmup: &[u64],
    mut f: impl FnMut(u64),
    mut between: impl FnMut(),
) -> Sample {
    for &n in warmup {
        f(n);
        between();
    }
    let mut v = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = std::time::Instant::now();
        f(iters);
        v.push(t.elapsed().as_nanos() as f64 / iters as f64);
        between();
    }
    summarize(v)
}

/// The machine a run was on: cores, CPU model, kernel.
pub fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{cores} cores, {cpu}, Linux {kernel}")
}

/// Runs this benchmark again as a child process with `args` (a repetition
/// in a fresh process); its stdout, and the run `parse` finds in one of its
/// lines. Panics with the child's output if it failed or printed no run.
pub fn run_child<T>(args: &[&str], parse: impl Fn(&str) -> Option<T>) -> (T, String) {
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new(exe)
        .args(args)
        .output()
        .expect("run a child");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    match text.lines().find_map(parse) {
        Some(run) if out.status.success() => (run, text),
        _ => panic!(
            "child failed: {}\n{}",
            text,
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}
