//! `cargo bench --bench cpu_sampling`: what CPU sampling at 1 kHz costs.
//!
//! Rounds of three sessions in one process (sampling off, frame-pointer
//! call chains, copied stacks), each running the same uninstrumented hot
//! loop for 2 s of CPU time: first on one thread, then on four threads of
//! 500 ms each. Reported, as medians over the rounds: the loop's
//! throughput per CPU-second against sampling off (what the sampled
//! threads lose, the kernel's work at each sample included); samples
//! (median) and samples lost (all rounds); the steady
//! state after `start` returned, per sample, in ns: the sampler thread's
//! CPU time, the flusher's beyond the session without sampling, their sum
//! (from `/proc/self/task/*/schedstat`), and the sampler's wake-ups per
//! second; the trace's bytes per sample; start-up apart: how long `start`
//! took and the sampler's CPU time in it (it reads the program's symbols
//! and opens the first events before `start` returns). CPU time, not wall
//! time: the machine may be shared. `-- --quick`: one round only.
//!
//! Then the kernel's share alone (`kernel_share`): the same loop with a
//! perf event on its own thread that nobody reads (the loop frees the ring
//! itself, so no sampler thread runs), without a stack, with a call chain
//! and with stack copies of 16, 8 and 4 KiB, at 1 and 4 kHz: what each
//! sample's interrupt costs the sampled thread whatever the stack mode.

mod common;
#[path = "../sdk/benches/sampling_cost/workload.rs"]
mod workload;
use common::{median, thread_cpu_ns};
use ringtrace::CpuStacks;
use std::hint::black_box;
use std::time::{Duration, Instant};
use workload::checksum;

/// `/proc/self/task/*/schedstat` of the process's thread whose name starts
/// with `prefix`: CPU ns and times it was scheduled in (its wake-ups).
fn task_sched(prefix: &str) -> (u64, u64) {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return (0, 0);
    };
    for e in dir.flatten() {
        let p = e.path();
        let comm = std::fs::read_to_string(p.join("comm")).unwrap_or_default();
        if comm.trim().starts_with(prefix) {
            let s = std::fs::read_to_string(p.join("schedstat")).unwrap_or_default();
            let f: Vec<u64> = s
                .split_whitespace()
                .filter_map(|v| v.parse().ok())
                .collect();
            return (
                f.first().copied().unwrap_or(0),
                f.get(2).copied().unwrap_or(0),
            );
        }
    }
    (0, 0)
}

/// The hot loop for `cpu` of the calling thread's CPU time: (iterations,
/// CPU time used).
fn hot_loop(cpu: Duration) -> (u64, Duration) {
    let data: Vec<u64> = (0..1 << 14).collect();
    let cpu0 = Duration::from_nanos(thread_cpu_ns());
    let mut iters = 0u64;
    let mut sum = 0u64;
    while Duration::from_nanos(thread_cpu_ns()) - cpu0 < cpu {
        ringtrace::trace_scope!("round");
        for _ in 0..16 {
            sum = sum.wrapping_add(checksum(black_box(&data)));
            iters += 1;
        }
    }
    black_box(sum);
    (iters, Duration::from_nanos(thread_cpu_ns()) - cpu0)
}

struct Run {
    /// The sampler's CPU time during `start` (symbols read, first events
    /// opened), ns.
    sampler_start_ns: u64,
    per_cpu_ms: f64,
    samples: u64,
    lost: u64,
    truncated: u64,
    /// After `start`: the sampler's and flusher's CPU ns, the sampler's
    /// wake-ups, the wall time.
    sampler_ns: u64,
    sampler_wakes: u64,
    flusher_ns: u64,
    wall: Duration,
    bytes: u64,
    scopes: u64,
    start: Duration,
}

/// One session: `threads` threads (the first is this one) each run the hot
/// loop for `cpu` of their CPU time; the other threads are started before
/// the session (found by its first look at the thread list) and wait for it.
fn run(mode: Option<CpuStacks>, path: &std::path::Path, threads: usize, cpu: Duration) -> Run {
    let go = std::sync::Arc::new(std::sync::Barrier::new(threads));
    let workers: Vec<_> = (1..threads)
        .map(|_| {
            let go = go.clone();
            std::thread::spawn(move || {
                go.wait();
                hot_loop(cpu)
            })
        })
        .collect();
    let mut b = ringtrace::builder().output(path);
    if let Some(stacks) = mode {
        b = b.cpu_sampling(1000).cpu_sampling_stacks(stacks);
    }
    let t = Instant::now();
    let guard = b.start().unwrap();
    let start = t.elapsed();
    // The sampler's CPU so far is its start (symbols, first events): the
    // steady state is counted from here.
    let (sampler_at_start, wakes_at_start) = task_sched("ringtrace-sampl");
    let (flusher_at_start, _) = task_sched("ringtrace-flush");
    let wall0 = Instant::now();
    go.wait();
    let (mut iters, mut used) = hot_loop(cpu);
    for w in workers {
        let (i, u) = w.join().unwrap();
        iters += i;
        used += u;
    }
    // Let the sampler read the rings and the flusher encode what is
    // pending (the sampler reads them at least every 100 ms), then read
    // their CPU time before the stop ends them.
    std::thread::sleep(Duration::from_millis(150));
    let wall = wall0.elapsed();
    let (sampler, wakes) = task_sched("ringtrace-sampl");
    let (flusher, _) = task_sched("ringtrace-flush");
    let stats = guard.stop().unwrap();
    Run {
        per_cpu_ms: iters as f64 / used.as_secs_f64() / 1000.0,
        samples: stats.cpu_samples,
        lost: stats.cpu_samples_lost,
        truncated: stats.cpu_stacks_truncated,
        sampler_ns: sampler.saturating_sub(sampler_at_start),
        sampler_wakes: wakes.saturating_sub(wakes_at_start),
        flusher_ns: flusher.saturating_sub(flusher_at_start),
        wall,
        sampler_start_ns: sampler_at_start,
        bytes: stats.bytes_written,
        scopes: iters / 16,
        start,
    }
}

/// A perf CPU-clock event on the calling thread at `hz`: `stack` None
/// (no stack), Some(0) (call chain) or Some(bytes) (stack copy). Returns
/// the fd and the mapped ring (one metadata page and 256 data pages).
fn raw_event(hz: u64, stack: Option<u32>) -> (i32, *mut u8, usize) {
    // struct perf_event_attr (PERF_ATTR_SIZE_VER8): the words used here.
    let mut attr = [0u64; 16];
    let size = 128u64;
    attr[0] = 1 | (size << 32); // PERF_TYPE_SOFTWARE, size
    attr[1] = 0; // PERF_COUNT_SW_CPU_CLOCK
    attr[2] = hz; // sample_freq
    let mut sample_type = (1 << 1) | (1 << 2) | (1 << 7) | (1 << 8); // TID TIME CPU PERIOD
                                                                     // disabled, exclude_kernel, exclude_hv, freq, watermark, use_clockid
    let mut flags: u64 = 1 | (1 << 5) | (1 << 6) | (1 << 10) | (1 << 14) | (1 << 25);
    match stack {
        None => {}
        Some(0) => {
            sample_type |= 1 << 5; // CALLCHAIN
            flags |= 1 << 21; // exclude_callchain_kernel
        }
        Some(n) => {
            sample_type |= (1 << 12) | (1 << 13); // REGS_USER, STACK_USER
            attr[10] = (1 << 6) | (1 << 7) | (1 << 8); // sample_regs_user: BP SP IP
            attr[11] = n as u64 | ((libc::CLOCK_BOOTTIME as u64) << 32); // stack, clockid
        }
    }
    if stack.is_none_or(|n| n == 0) {
        attr[11] = (libc::CLOCK_BOOTTIME as u64) << 32;
    }
    attr[3] = sample_type;
    attr[5] = flags;
    let pages = 256usize;
    attr[6] = (pages as u64 * 4096 / 2) & 0xffff_ffff; // wakeup_watermark
                                                       // SAFETY: a valid perf_event_attr of the size it states, alive for
                                                       // the call; pid 0 = this thread, cpu -1, no group, no flags.
    let fd =
        unsafe { libc::syscall(libc::SYS_perf_event_open, attr.as_ptr(), 0, -1, -1, 0) } as i32;
    assert!(
        fd >= 0,
        "perf_event_open: {}",
        std::io::Error::last_os_error()
    );
    let len = (pages + 1) * 4096;
    // SAFETY: a fresh shared mapping of the event's ring.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    assert!(base != libc::MAP_FAILED, "mmap of the perf ring");
    // SAFETY: PERF_EVENT_IOC_ENABLE on our fd.
    unsafe { libc::ioctl(fd, 0x2400, 0) };
    (fd, base as *mut u8, len)
}

/// A raw event: its rate and its stack (as `raw_event` takes them).
type RawMode = Option<(u64, Option<u32>)>;

/// Loop iterations per CPU-ms of this thread for 300 ms with `event`
/// (`None`: no event), freeing the event's ring as it goes.
fn kernel_run(event: RawMode) -> f64 {
    let ev = event.map(|(hz, stack)| raw_event(hz, stack));
    let data: Vec<u64> = (0..1 << 14).collect();
    let cpu0 = Duration::from_nanos(thread_cpu_ns());
    let mut iters = 0u64;
    let mut sum = 0u64;
    while Duration::from_nanos(thread_cpu_ns()) - cpu0 < Duration::from_millis(300) {
        for _ in 0..16 {
            sum = sum.wrapping_add(checksum(black_box(&data)));
            iters += 1;
        }
        if let Some((_, base, _)) = ev {
            use std::sync::atomic::{AtomicU64, Ordering};
            // SAFETY: data_head (byte 1024) and data_tail (1032) of the
            // mapped metadata page, 8-byte aligned, shared with the kernel.
            let (head, tail) = unsafe {
                (
                    &*(base.add(1024) as *const AtomicU64),
                    &*(base.add(1032) as *const AtomicU64),
                )
            };
            tail.store(head.load(Ordering::Acquire), Ordering::Release);
        }
    }
    black_box(sum);
    let used = Duration::from_nanos(thread_cpu_ns()) - cpu0;
    if let Some((fd, base, len)) = ev {
        // SAFETY: the mapping and fd made in `raw_event`, released once.
        unsafe {
            libc::munmap(base as *mut libc::c_void, len);
            libc::close(fd);
        }
    }
    iters as f64 / used.as_secs_f64() / 1000.0
}

/// The kernel's share: each mode against no event in the same round.
fn kernel_share(rounds: usize) {
    let modes: [(&str, RawMode); 8] = [
        ("no event", None),
        ("1 kHz, no stack", Some((1000, None))),
        ("1 kHz, call chain", Some((1000, Some(0)))),
        ("1 kHz, 8 KiB copy", Some((1000, Some(8 << 10)))),
        ("4 kHz, no stack", Some((4000, None))),
        ("4 kHz, 16 KiB copy", Some((4000, Some(16 << 10)))),
        ("4 kHz, 8 KiB copy", Some((4000, Some(8 << 10)))),
        ("4 kHz, 4 KiB copy", Some((4000, Some(4 << 10)))),
    ];
    let mut rate: Vec<Vec<f64>> = modes.iter().map(|_| Vec::new()).collect();
    for _ in 0..rounds {
        for (i, (_, m)) in modes.iter().enumerate() {
            rate[i].push(kernel_run(*m));
        }
    }
    println!("\nthe kernel's share (no sampler thread; median of each round's ratio to no event)");
    for (i, (name, m)) in modes.iter().enumerate() {
        let loss = median(
            (0..rounds)
                .map(|k| 1.0 - rate[i][k] / rate[0][k])
                .collect::<Vec<_>>(),
        );
        let per_sample_us = m.map_or(0.0, |(hz, _)| loss * 1e6 / hz as f64);
        println!(
            "{name:<20} {:>7.2}% of the thread  {per_sample_us:>6.1} us per sample",
            -loss * 100.0
        );
    }
}

/// Rounds of the three sessions with `threads` busy threads of `cpu` each.
fn table(rounds: usize, threads: usize, cpu: Duration, path: &std::path::Path) {
    let modes = [
        ("off", None),
        ("frame pointers", Some(CpuStacks::FramePointers)),
        ("copied stacks", Some(CpuStacks::CopiedStacks)),
    ];
    let mut runs: Vec<Vec<Run>> = modes.iter().map(|_| Vec::new()).collect();
    for _ in 0..rounds {
        for (i, (_, m)) in modes.iter().enumerate() {
            runs[i].push(run(*m, path, threads, cpu));
        }
    }
    println!(
        "\n{threads} busy thread(s), {} ms of CPU each, {rounds} rounds (medians); \
         per sample after `start` (steady state), in ns",
        cpu.as_millis()
    );
    println!(
        "{:<15} {:>12} {:>8} {:>8} {:>5} {:>7} {:>8} {:>8} {:>8} {:>8} {:>7} {:>8} {:>8}",
        "stacks",
        "iters/CPU-ms",
        "vs off",
        "samples",
        "lost",
        "whole%",
        "sampler",
        "flusher",
        "sum",
        "wakes/s",
        "bytes",
        "start ms",
        "start-up"
    );
    let off_rate = median(runs[0].iter().map(|r| r.per_cpu_ms).collect::<Vec<_>>());
    let off_flusher: Vec<u64> = runs[0].iter().map(|r| r.flusher_ns).collect();
    // The file's bytes per scope without samples: what is not samples.
    let per_scope = median(
        runs[0]
            .iter()
            .map(|r| r.bytes as f64 / r.scopes as f64)
            .collect::<Vec<_>>(),
    );
    for (i, (name, _)) in modes.iter().enumerate() {
        let r = &runs[i];
        let rate = median(r.iter().map(|x| x.per_cpu_ms).collect::<Vec<_>>());
        let per = |f: &dyn Fn(usize, &Run) -> f64| {
            if r.iter().all(|x| x.samples == 0) {
                return 0.0;
            }
            median(
                r.iter()
                    .enumerate()
                    .filter(|(_, x)| x.samples > 0)
                    .map(|(k, x)| f(k, x) / x.samples as f64)
                    .collect::<Vec<_>>(),
            )
        };
        // The flusher's share: its CPU beyond the same round's session
        // without sampling.
        let flusher = |k: usize, x: &Run| x.flusher_ns as f64 - off_flusher[k] as f64;
        println!(
            "{:<15} {:>12.1} {:>7.2}% {:>8} {:>5} {:>7.1} {:>8.0} {:>8.0} {:>8.0} {:>8.1} {:>7.1} {:>8.1} {:>7.1}ms",
            name,
            rate,
            (rate / off_rate - 1.0) * 100.0,
            median(r.iter().map(|x| x.samples as f64).collect::<Vec<_>>()),
            // Of all rounds.
            r.iter().map(|x| x.lost).sum::<u64>(),
            // Stacks unwound to their root, of all samples.
            100.0
                * (1.0
                    - r.iter().map(|x| x.truncated).sum::<u64>() as f64
                        / r.iter().map(|x| x.samples).sum::<u64>().max(1) as f64),
            per(&|_, x| x.sampler_ns as f64),
            per(&flusher),
            per(&|k, x| x.sampler_ns as f64 + flusher(k, x)),
            median(
                r.iter()
                    .map(|x| x.sampler_wakes as f64 / x.wall.as_secs_f64())
                    .collect::<Vec<_>>()
            ),
            per(&|_, x| x.bytes as f64 - x.scopes as f64 * per_scope),
            median(r.iter().map(|x| x.start.as_secs_f64() * 1000.0).collect::<Vec<_>>()),
            median(r.iter().map(|x| x.sampler_start_ns as f64 / 1e6).collect::<Vec<_>>()),
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    // `cargo bench --bench cpu_sampling -- --kernel`: the kernel's share only.
    if args.iter().any(|a| a == "--kernel") {
        kernel_share(15);
        return;
    }
    let dir = std::env::temp_dir().join(format!("ringtrace-bench-cpu-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("t.pftrace");
    // `-- --quick`: one round of each, to try a change.
    let rounds = if args.iter().any(|a| a == "--quick") {
        1
    } else {
        5
    };
    // 2 s of sampled CPU per session: one thread, then four sharing it.
    table(rounds, 1, Duration::from_millis(2000), &path);
    table(rounds, 4, Duration::from_millis(500), &path);
    let _ = std::fs::remove_dir_all(&dir);
    if !args.iter().any(|a| a == "--quick") {
        kernel_share(7);
    }
}
