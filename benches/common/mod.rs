//! Timing functions shared by the benchmarks in this folder: the clock floor
//! (two reads of the clock the hot path uses), medians, and a repetition run
//! as a fresh process. A folder with a
//! `mod.rs`, so that Cargo does not take it for a benchmark of its own.

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

/// The median (of the two middle values for an even count); sorts `v`.
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
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
