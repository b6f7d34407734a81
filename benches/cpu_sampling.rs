//! `cargo bench --bench cpu_sampling`: what CPU sampling at 1 kHz costs.
//!
//! Rounds of three sessions in one process (sampling off, frame-pointer
//! call chains, copied stacks), each running the same uninstrumented hot
//! loop for 300 ms of the thread's CPU time. Reported, as medians over the
//! rounds: the loop's throughput per CPU-second against sampling off (what
//! the sampled thread loses, the kernel's work at each sample included),
//! the sampler thread's and the flusher's CPU time per sample once started
//! (from `/proc/self/task/*/schedstat`, in ns), the trace's bytes per
//! sample, how long `start` took and the sampler's CPU time in it (it reads
//! the program's symbols before it opens the first events).
//! CPU time, not wall time: the machine may be shared.

use ringtrace::CpuStacks;
use std::hint::black_box;
use std::time::{Duration, Instant};

#[inline(never)]
fn mix(block: &[u64], state: u64) -> u64 {
    block.iter().fold(state, |h, &w| {
        (h ^ w).wrapping_mul(0x100_0000_01b3).rotate_left(13)
    })
}

#[inline(never)]
fn checksum(data: &[u64]) -> u64 {
    data.chunks(64)
        .fold(0xcbf2_9ce4_8422_2325, |h, b| mix(black_box(b), h))
}

fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// CPU ns of the process's thread whose name starts with `prefix`.
fn task_cpu_ns(prefix: &str) -> u64 {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    for e in dir.flatten() {
        let p = e.path();
        let comm = std::fs::read_to_string(p.join("comm")).unwrap_or_default();
        if comm.trim().starts_with(prefix) {
            let s = std::fs::read_to_string(p.join("schedstat")).unwrap_or_default();
            return s
                .split_whitespace()
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
        }
    }
    0
}

struct Run {
    /// The sampler's CPU time during `start` (symbols read), ns.
    sampler_start_ns: u64,
    per_cpu_ms: f64,
    samples: u64,
    truncated: u64,
    sampler_ns: u64,
    flusher_ns: u64,
    bytes: u64,
    scopes: u64,
    start: Duration,
}

fn run(mode: Option<CpuStacks>, path: &std::path::Path) -> Run {
    let mut b = ringtrace::builder().output(path);
    if let Some(stacks) = mode {
        b = b.cpu_sampling(1000).cpu_sampling_stacks(stacks);
    }
    let t = Instant::now();
    let guard = b.start().unwrap();
    let start = t.elapsed();
    // The sampler's CPU so far is its start (reading the symbols): what
    // each sample costs is counted from here.
    let sampler_at_start = task_cpu_ns("ringtrace-sampl");
    let flusher_at_start = task_cpu_ns("ringtrace-flush");
    let data: Vec<u64> = (0..1 << 14).collect();
    let cpu0 = thread_cpu();
    let mut iters = 0u64;
    let mut scopes = 0u64;
    let mut sum = 0u64;
    while thread_cpu() - cpu0 < Duration::from_millis(300) {
        ringtrace::trace_scope!("round");
        scopes += 1;
        for _ in 0..16 {
            sum = sum.wrapping_add(checksum(black_box(&data)));
            iters += 1;
        }
    }
    black_box(sum);
    let used = thread_cpu() - cpu0;
    // Let the flusher and sampler take what is pending, then read their
    // CPU time before the stop ends them.
    std::thread::sleep(Duration::from_millis(150));
    let sampler_ns = task_cpu_ns("ringtrace-sampl").saturating_sub(sampler_at_start);
    let flusher_ns = task_cpu_ns("ringtrace-flush").saturating_sub(flusher_at_start);
    let stats = guard.stop().unwrap();
    Run {
        per_cpu_ms: iters as f64 / used.as_secs_f64() / 1000.0,
        samples: stats.cpu_samples,
        truncated: stats.cpu_stacks_truncated,
        sampler_ns,
        sampler_start_ns: sampler_at_start,
        flusher_ns,
        bytes: stats.bytes_written,
        scopes,
        start,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let dir = std::env::temp_dir().join(format!("ringtrace-bench-cpu-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("t.pftrace");
    let rounds = 7;
    let modes = [
        ("off", None),
        ("frame pointers", Some(CpuStacks::FramePointers)),
        ("copied stacks", Some(CpuStacks::CopiedStacks)),
    ];
    let mut runs: Vec<Vec<Run>> = modes.iter().map(|_| Vec::new()).collect();
    for _ in 0..rounds {
        for (i, (_, m)) in modes.iter().enumerate() {
            runs[i].push(run(*m, &path));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "{:<15} {:>12} {:>10} {:>8} {:>9} {:>13} {:>13} {:>12} {:>9} {:>10}",
        "stacks",
        "iters/CPU-ms",
        "vs off",
        "samples",
        "whole %",
        "sampler ns/smp",
        "flusher ns/smp",
        "bytes/sample",
        "start ms",
        "symbols ms"
    );
    let off_rate = median(runs[0].iter().map(|r| r.per_cpu_ms).collect());
    let off_flusher: Vec<u64> = runs[0].iter().map(|r| r.flusher_ns).collect();
    // The file's bytes per scope without samples: what is not samples.
    let per_scope = median(
        runs[0]
            .iter()
            .map(|r| r.bytes as f64 / r.scopes as f64)
            .collect(),
    );
    for (i, (name, _)) in modes.iter().enumerate() {
        let r = &runs[i];
        let rate = median(r.iter().map(|x| x.per_cpu_ms).collect());
        let per = |f: &dyn Fn(usize, &Run) -> f64| {
            median(
                r.iter()
                    .enumerate()
                    .filter(|(_, x)| x.samples > 0)
                    .map(|(k, x)| f(k, x) / x.samples as f64)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .chain(std::iter::once(0.0).filter(|_| r.iter().all(|x| x.samples == 0)))
                    .collect(),
            )
        };
        println!(
            "{:<15} {:>12.1} {:>9.2}% {:>8} {:>9.1} {:>13.0} {:>13.0} {:>12.1} {:>9.1} {:>10.1}",
            name,
            rate,
            (rate / off_rate - 1.0) * 100.0,
            median(r.iter().map(|x| x.samples as f64).collect()),
            // Stacks unwound to their root, of all samples.
            100.0
                * (1.0
                    - r.iter().map(|x| x.truncated).sum::<u64>() as f64
                        / r.iter().map(|x| x.samples).sum::<u64>().max(1) as f64),
            per(&|_, x| x.sampler_ns as f64),
            per(&|k, x| x.flusher_ns as f64 - off_flusher[k] as f64),
            per(&|_, x| x.bytes as f64 - x.scopes as f64 * per_scope),
            median(r.iter().map(|x| x.start.as_secs_f64() * 1000.0).collect()),
            median(r.iter().map(|x| x.sampler_start_ns as f64 / 1e6).collect()),
        );
    }
}
