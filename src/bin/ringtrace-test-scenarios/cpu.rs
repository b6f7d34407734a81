//! CPU sampling scenarios: a traced scope over an uninstrumented hot path,
//! the same with `perf_event_open` refused by a seccomp filter, threads
//! coming and going, and a malformed ELF file mapped and run.

use ringtrace_test_support::elf;
use serde_json::{json, Value};
use std::hint::black_box;
use std::time::Duration;

/// Not instrumented: where the time goes.
#[inline(never)]
fn hot_mix(block: &[u64], state: u64) -> u64 {
    block.iter().fold(state, |h, &w| {
        (h ^ w).wrapping_mul(0x100_0000_01b3).rotate_left(13)
    })
}

/// Not instrumented: calls `hot_mix` for every block.
#[inline(never)]
fn hot_checksum(data: &[u64]) -> u64 {
    data.chunks(64)
        .fold(0xcbf2_9ce4_8422_2325, |h, b| hot_mix(black_box(b), h))
}

/// The thread's body: scopes `checksum` around the hot path, until `cpu`
/// of its CPU time is used.
#[inline(never)]
fn hot_thread_body(cpu: Duration) -> u64 {
    let data: Vec<u64> = (0..1 << 14).collect();
    let start = thread_cpu();
    let mut sum = 0u64;
    while thread_cpu() - start < cpu {
        ringtrace::trace_scope!("checksum");
        for _ in 0..8 {
            sum = sum.wrapping_add(hot_checksum(black_box(&data)));
        }
    }
    sum
}

/// Runs [`hot_thread_body`] for `cpu` on a thread named "hot"; its tid and
/// the body's sum.
fn run_hot_thread(cpu: Duration) -> (i64, u64) {
    spawn_hot("hot", cpu).join().unwrap()
}

/// Starts [`hot_thread_body`] for `cpu` on a thread named `name`; it
/// returns its tid and the body's sum.
fn spawn_hot(name: &str, cpu: Duration) -> std::thread::JoinHandle<(i64, u64)> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || (super::tid(), hot_thread_body(cpu)))
        .unwrap()
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

/// `stacks`: "fp", "copied" or "auto"; "copied-tight": copied stacks in
/// a 1 MiB budget (the threads started first take the room of a whole
/// ring). The hot thread runs for 400 ms of CPU time; its tid and the
/// stats are the expectation.
pub fn hot(trace: &str, stacks: &str) -> Value {
    let tight = stacks == "copied-tight";
    let stacks = match stacks {
        "fp" => ringtrace::CpuStacks::FramePointers,
        "copied" | "copied-tight" => ringtrace::CpuStacks::CopiedStacks,
        _ => ringtrace::CpuStacks::Auto,
    };
    let mut builder = ringtrace::builder().output(trace);
    if tight {
        builder = builder.buffer_bytes(1 << 20);
    }
    let guard = builder
        .cpu_sampling(1000)
        .cpu_sampling_stacks(stacks)
        .start()
        .unwrap();
    let (tid, sum) = run_hot_thread(Duration::from_millis(400));
    let stats = guard.stop().unwrap();
    json!({"tid": tid, "sum": sum, "stats": stats_json(&stats)})
}

/// Flight-recorder mode with sampling: a hot thread ("early"), then a
/// flood of instants that makes the recorder forget the early thread's
/// records, then a second hot thread ("late"). `mode` "stop": the file
/// written at stop; "dump": also `dump_to(trace + ".dump.pftrace")` while
/// the late thread runs (a window of 1 s: the late thread's 300 ms of CPU
/// even when a loaded machine gives it a third of a core);
/// "dump-json": the same into `.dump.json`.
pub fn flight(trace: &str, mode: &str) -> Value {
    let guard = ringtrace::builder()
        .output(trace)
        .overwrite(true)
        // A recorder of 3 MiB (half the budget): quick to overflow, and a
        // file the decoders read in seconds.
        .buffer_bytes(6 << 20)
        .cpu_sampling(1000)
        .cpu_sampling_stacks(ringtrace::CpuStacks::CopiedStacks)
        .start()
        .unwrap();
    let hot = |name: &str| spawn_hot(name, Duration::from_millis(300));
    let (early, _) = hot("early").join().unwrap();
    // The flusher drains the exited thread's ring into the recorder within
    // a pass (5 ms); on a loaded machine it may wait longer for a CPU. The
    // flood must come after it there to push it out: a ring drained late
    // in the flood would put the early records behind the flood's, and
    // they would rightly be kept as the most recent drained.
    std::thread::sleep(Duration::from_millis(200));
    // 600 k instants (over 14 MiB) overflow the recorder, in chunks smaller
    // than a ring (so the flusher drains each one as it comes, rather than
    // the ring overwriting its own) with pauses for it.
    for chunk in 0..24 {
        for i in 0..25_000u64 {
            ringtrace::trace_instant!("flood", i = chunk * 25_000 + i);
        }
        std::thread::sleep(Duration::from_millis(4));
    }
    let late = hot("late");
    let dump = mode.starts_with("dump").then(|| {
        let ext = if mode == "dump-json" {
            "json"
        } else {
            "pftrace"
        };
        let path = format!("{trace}.dump.{ext}");
        let stats = ringtrace::dump_to(&path, Duration::from_secs(1)).unwrap();
        json!({"path": path, "events_written": stats.events_written})
    });
    let (late, _) = late.join().unwrap();
    let stats = guard.stop().unwrap();
    let mut s = stats_json(&stats);
    s["cpu_samples_aged_out"] = json!(stats.cpu_samples_aged_out);
    s["events_lost"] = json!(stats.events_lost);
    json!({"early": early, "late": late, "dump": dump, "stats": s})
}

/// A slow request: a scope over the uninstrumented hot path, `cpu` of CPU
/// time.
#[inline(never)]
fn slow_request(cpu: Duration) -> u64 {
    let data: Vec<u64> = (0..1 << 14).collect();
    let start = thread_cpu();
    ringtrace::trace_scope!("slow_request");
    let mut sum = 0u64;
    while thread_cpu() - start < cpu {
        sum = sum.wrapping_add(hot_checksum(black_box(&data)));
    }
    sum
}

/// `slow_request` in a `tracing` span of that name instead of a scope.
#[inline(never)]
fn slow_request_in_a_span(cpu: Duration) -> u64 {
    let data: Vec<u64> = (0..1 << 14).collect();
    let start = thread_cpu();
    let _span = tracing::info_span!("slow_request").entered();
    let mut sum = 0u64;
    while thread_cpu() - start < cpu {
        sum = sum.wrapping_add(hot_checksum(black_box(&data)));
    }
    sum
}

/// Captures with sampling: a flight recorder capturing `slow_request`
/// scopes over 100 ms into `trace`'s directory (`capture-{n}.` + `mode`,
/// "pftrace" or "json"). A hot thread ("before") runs first, then one slow
/// request ("slow"), then another hot thread ("after"), 300 ms apart:
/// samples before and after the capture's window. `mode` "trigger": no
/// rule, the slow thread calls `trigger` as its scope ends (a window of
/// the 1.5 s before it, into a `.pftrace`: the whole scope on a loaded
/// machine; the threads before and after it 2 s apart). `mode` "tracing":
/// the slow request is a `tracing` span, captured by `capture_slow`
/// (the session's subscriber the global default), into a `.pftrace`.
pub fn capture(trace: &str, mode: &str) -> Value {
    let dir = std::path::Path::new(trace).parent().unwrap();
    let by_trigger = mode == "trigger";
    let by_span = mode == "tracing";
    let ext = if by_trigger || by_span {
        "pftrace"
    } else {
        mode
    };
    let pattern = dir.join(format!("capture-{{n}}.{ext}"));
    let before_ms = if by_trigger { 1500 } else { 10 };
    let apart = Duration::from_millis(if by_trigger { 2000 } else { 300 });
    let builder = ringtrace::builder()
        .output(trace)
        .overwrite(true)
        .buffer_bytes(6 << 20)
        .cpu_sampling(1000)
        .cpu_sampling_stacks(ringtrace::CpuStacks::CopiedStacks)
        .capture_to(&pattern)
        .capture_before(Duration::from_millis(before_ms));
    let guard = if by_span {
        let (subscriber, guard) = builder
            .capture_slow(["slow_request"], Duration::from_millis(100))
            .subscriber()
            .unwrap();
        tracing::subscriber::set_global_default(subscriber).unwrap();
        guard
    } else if by_trigger {
        builder.start().unwrap()
    } else {
        builder
            .capture_slow_scopes(["slow_request"], Duration::from_millis(100))
            .start()
            .unwrap()
    };
    let run = |name: &str, slow: bool| {
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let sum = if slow && by_span {
                    slow_request_in_a_span(Duration::from_millis(250))
                } else if slow {
                    let sum = slow_request(Duration::from_millis(250));
                    if by_trigger {
                        ringtrace::trigger("slow");
                    }
                    sum
                } else {
                    hot_thread_body(Duration::from_millis(150))
                };
                (super::tid(), sum)
            })
            .unwrap()
            .join()
            .unwrap()
            .0
    };
    let before = run("before", false);
    std::thread::sleep(apart);
    let slow = run("slow", true);
    std::thread::sleep(apart);
    let after = run("after", false);
    let stats = guard.stop().unwrap();
    let mut s = stats_json(&stats);
    s["captures_fired"] = json!(stats.captures_fired);
    s["captures_suppressed"] = json!(stats.captures_suppressed);
    json!({
        "before": before, "slow": slow, "after": after,
        "window_before_ns": before_ms * 1_000_000,
        "capture": pattern.to_str().unwrap().replace("{n}", "1"),
        "stats": s,
    })
}

fn stats_json(s: &ringtrace::Stats) -> Value {
    json!({
        "cpu_samples": s.cpu_samples,
        "cpu_samples_lost": s.cpu_samples_lost,
        "cpu_stacks_truncated": s.cpu_stacks_truncated,
        "cpu_threads_sampled": s.cpu_threads_sampled,
        "cpu_threads_unsampled": s.cpu_threads_unsampled,
        "cpu_samples_no_memory": s.cpu_samples_no_memory,
        "cpu_files_no_memory": s.cpu_files_no_memory,
        "cpu_frames_unnamed": s.cpu_frames_unnamed,
        "buffer_bytes_peak": s.buffer_bytes_peak,
    })
}

/// Refuses `perf_event_open` to this process (and its future threads) with
/// `EACCES`, as a container's seccomp profile does.
fn refuse_perf() {
    // BPF_LD | BPF_W | BPF_ABS, BPF_JMP | BPF_JEQ | BPF_K, BPF_RET | BPF_K.
    const BPF_LD_W_ABS: u16 = 0x20;
    const BPF_JMP_JEQ_K: u16 = 0x15;
    const BPF_RET_K: u16 = 0x06;
    let nr = libc::SYS_perf_event_open as u32;
    let mut filter = [
        // seccomp_data.nr
        libc::sock_filter {
            code: BPF_LD_W_ABS,
            jt: 0,
            jf: 0,
            k: 0,
        },
        libc::sock_filter {
            code: BPF_JMP_JEQ_K,
            jt: 0,
            jf: 1,
            k: nr,
        },
        libc::sock_filter {
            code: BPF_RET_K,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_ERRNO | libc::EACCES as u32,
        },
        libc::sock_filter {
            code: BPF_RET_K,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_ALLOW,
        },
    ];
    let prog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_mut_ptr(),
    };
    // SAFETY: prctl with valid arguments; `prog` outlives the call (the
    // kernel copies the filter).
    unsafe {
        assert_eq!(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
        assert_eq!(
            libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &prog as *const libc::sock_fprog
            ),
            0,
            "seccomp: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// `hot` with `perf_event_open` refused: the timer fallback samples.
pub fn refused(trace: &str) -> Value {
    refuse_perf();
    hot(trace, "auto")
}

/// 200 threads in waves of 20, each busy for 30 ms of CPU time, sampled
/// while they come and go; open fds counted before the session and after.
pub fn threads(trace: &str) -> Value {
    let fds_before = open_fds();
    let heap_before = crate::LIVE_BYTES.load(std::sync::atomic::Ordering::Relaxed);
    let rss_before = rss_kib();
    let guard = ringtrace::builder()
        .output(trace)
        .cpu_sampling(1000)
        .start()
        .unwrap();
    let mut tids = Vec::new();
    for _wave in 0..10 {
        let handles: Vec<_> = (0..20)
            .map(|_| {
                std::thread::spawn(|| {
                    let t = super::tid();
                    hot_thread_body(Duration::from_millis(30));
                    t
                })
            })
            .collect();
        tids.extend(handles.into_iter().map(|h| h.join().unwrap()));
        // Longer than a look at the thread list: some threads are found
        // while alive, the next wave's are new.
        std::thread::sleep(Duration::from_millis(20));
    }
    let stats = guard.stop().unwrap();
    let fds_after = open_fds();
    let heap_after = crate::LIVE_BYTES.load(std::sync::atomic::Ordering::Relaxed);
    json!({"tids": tids, "fds_before": fds_before, "fds_after": fds_after,
           "heap_before": heap_before, "heap_after": heap_after,
           "rss_before_kib": rss_before, "rss_after_kib": rss_kib(),
           "stats": stats_json(&stats)})
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

/// `hot` started by `init_from_env` (`RINGTRACE_OUTPUT`,
/// `RINGTRACE_CPU_SAMPLING` set by the test).
pub fn from_env() -> Value {
    let guard = ringtrace::init_from_env()
        .unwrap()
        .expect("RINGTRACE_OUTPUT set");
    let tid = hot_thread();
    let stats = guard.stop().unwrap();
    json!({"tid": tid, "stats": stats_json(&stats)})
}

/// `hot` recorded through the `tracing` layer.
pub fn layer(trace: &str) -> Value {
    use tracing_subscriber::layer::SubscriberExt;
    let (layer, guard) = ringtrace::builder()
        .output(trace)
        .cpu_sampling(1000)
        .layer()
        .unwrap();
    let subscriber = tracing_subscriber::registry().with(layer);
    let tid = tracing::subscriber::with_default(subscriber, hot_thread);
    let stats = guard.stop().unwrap();
    json!({"tid": tid, "stats": stats_json(&stats)})
}

fn hot_thread() -> i64 {
    std::thread::Builder::new()
        .name("hot".into())
        .spawn(|| {
            hot_thread_body(Duration::from_millis(300));
            super::tid()
        })
        .unwrap()
        .join()
        .unwrap()
}

/// `threads` with a locked-memory limit the rings do not fit in: the
/// capabilities that lift it are dropped (the tests may run as root) and
/// `RLIMIT_MEMLOCK` set to 64 KiB.
pub fn mlock(trace: &str) -> Value {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let mut h = Header {
        version: 0x2008_0522, // _LINUX_CAPABILITY_VERSION_3
        pid: 0,
    };
    let mut d = [Data::default(); 2];
    // SAFETY: capget/capset with a valid header and two data structs, as
    // version 3 expects; setrlimit with a valid struct.
    unsafe {
        assert_eq!(libc::syscall(libc::SYS_capget, &mut h, d.as_mut_ptr()), 0);
        // CAP_IPC_LOCK (14), CAP_SYS_ADMIN (21); CAP_PERFMON (38).
        let low = !((1u32 << 14) | (1 << 21));
        let high = !(1u32 << (38 - 32));
        d[0].effective &= low;
        d[0].permitted &= low;
        d[1].effective &= high;
        d[1].permitted &= high;
        assert_eq!(libc::syscall(libc::SYS_capset, &h, d.as_ptr()), 0);
        let lim = libc::rlimit {
            rlim_cur: 64 << 10,
            rlim_max: 64 << 10,
        };
        assert_eq!(libc::setrlimit(libc::RLIMIT_MEMLOCK, &lim), 0);
    }
    threads(trace)
}

/// A malformed ELF file (`<trace>.bad-elf.so`) mapped readable and
/// executable before a copied-stacks session, and its code run on a hot
/// thread for 300 ms of CPU time (so samples land in it), then the hot
/// path of `hot` for 200 ms. The expectation: the hot thread's tid, the
/// file's path and the stats.
pub fn bad_elf(trace: &str) -> Value {
    let path = format!("{trace}.bad-elf.so");
    let bytes = elf::malformed();
    std::fs::write(&path, &bytes).unwrap();
    let file = std::fs::File::open(&path).unwrap();
    // SAFETY: a fresh private mapping (address chosen by the kernel) of
    // the whole file just written, which nothing rewrites; it is never
    // unmapped, so the code pointer below stays valid.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            bytes.len(),
            libc::PROT_READ | libc::PROT_EXEC,
            libc::MAP_PRIVATE,
            std::os::fd::AsRawFd::as_raw_fd(&file),
            0,
        )
    };
    assert_ne!(
        base,
        libc::MAP_FAILED,
        "{}",
        std::io::Error::last_os_error()
    );
    // SAFETY: `elf::MALFORMED_CODE` lies inside the mapping, where the file holds
    // a complete x86_64 function of the System V ABI taking one u32 in
    // `edi`, touching only `ecx` (caller-saved) and the flags, returning.
    let count_down: extern "C" fn(u32) =
        unsafe { std::mem::transmute(base.cast::<u8>().add(elf::MALFORMED_CODE)) };
    let guard = ringtrace::builder()
        .output(trace)
        .cpu_sampling(1000)
        .cpu_sampling_stacks(ringtrace::CpuStacks::CopiedStacks)
        .start()
        .unwrap();
    let (tid, sum) = std::thread::Builder::new()
        .name("hot".into())
        .spawn(move || {
            let start = thread_cpu();
            while thread_cpu() - start < Duration::from_millis(300) {
                count_down(black_box(1_000_000));
            }
            (super::tid(), hot_thread_body(Duration::from_millis(200)))
        })
        .unwrap()
        .join()
        .unwrap();
    let stats = guard.stop().unwrap();
    json!({"tid": tid, "sum": sum, "elf": path, "stats": stats_json(&stats)})
}

/// A JSON document of `n` records, as a service would send.
fn json_document(n: usize) -> Vec<u8> {
    let records: Vec<Value> = (0..n)
        .map(|i| {
            json!({
                "id": i,
                "name": format!("user-{}", i * 7919 % 10_007),
                "email": format!("user{}@example.com", i * 31 % 977),
                "score": (i as f64) * 1.25,
                "tags": ["alpha", "beta", if i % 3 == 0 { "gamma" } else { "delta" }],
                "active": i % 2 == 0,
            })
        })
        .collect();
    serde_json::to_vec(&records).unwrap()
}

/// Not instrumented: compresses `data` with flate2's default backend
/// (miniz_oxide), at the default level, into a 96 KiB buffer on the stack
/// (so the compressor runs under a frame of over 64 KiB, and flate2 makes
/// it in a function whose own frame is 64 KiB).
#[inline(never)]
fn compress(data: &[u8]) -> usize {
    let mut out = [0u8; 96 << 10];
    let mut c = flate2::Compress::new(flate2::Compression::default(), false);
    let mut total = 0;
    loop {
        let before = c.total_out();
        let input = &data[c.total_in() as usize..];
        let status = c
            .compress(input, &mut out, flate2::FlushCompress::Finish)
            .unwrap();
        total += (c.total_out() - before) as usize + black_box(&out)[0] as usize;
        if status == flate2::Status::StreamEnd {
            return total;
        }
    }
}

/// Not instrumented: parses `data` with serde_json.
#[inline(never)]
fn parse(data: &[u8]) -> usize {
    serde_json::from_slice::<Value>(data)
        .unwrap()
        .as_array()
        .map_or(0, |a| a.len())
}

/// The thread's body: scopes `compress` around deflating a JSON document
/// and `parse` around parsing it, until `cpu` of its CPU time is used.
#[inline(never)]
fn deflate_thread_body(cpu: Duration) -> (usize, u64) {
    let doc = json_document(2_000);
    let start = thread_cpu();
    let mut sum = 0;
    let mut rounds = 0;
    while thread_cpu() - start < cpu {
        rounds += 1;
        {
            ringtrace::trace_scope!("compress");
            sum += compress(black_box(&doc));
        }
        {
            ringtrace::trace_scope!("parse");
            sum += parse(black_box(&doc));
        }
    }
    (sum, rounds)
}

/// CPU nanoseconds of this process's thread named `name` (its first 15
/// bytes), from its `schedstat`.
fn named_thread_cpu_ns(name: &str) -> u64 {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    for e in dir.flatten() {
        let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        if name.starts_with(comm.trim()) && !comm.trim().is_empty() {
            let s = std::fs::read_to_string(e.path().join("schedstat")).unwrap_or_default();
            return s
                .split_whitespace()
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
        }
    }
    0
}

/// Third-party code sampled: a thread ("deflate") compresses with flate2
/// (miniz_oxide) and parses with serde_json for 600 ms of CPU time (or
/// `RINGTRACE_TEST_CPU_MS`), in `compress` and `parse` scopes, sampled at
/// 1 kHz with `stacks` ("auto", "copied"; "off": not sampled). The
/// expectation: the thread's tid, its rounds per CPU-second, the sampler
/// thread's CPU time and the stats.
pub fn deflate(trace: &str, stacks: &str) -> Value {
    let hz = if stacks == "off" { 0 } else { 1000 };
    let stacks = match stacks {
        "copied" => ringtrace::CpuStacks::CopiedStacks,
        _ => ringtrace::CpuStacks::Auto,
    };
    let ms = std::env::var("RINGTRACE_TEST_CPU_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(600);
    let guard = ringtrace::builder()
        .output(trace)
        .cpu_sampling(hz)
        .cpu_sampling_stacks(stacks)
        .start()
        .unwrap();
    let sampler_before = named_thread_cpu_ns("ringtrace-sampler");
    let (tid, (sum, rounds)) = std::thread::Builder::new()
        .name("deflate".into())
        .spawn(move || (super::tid(), deflate_thread_body(Duration::from_millis(ms))))
        .unwrap()
        .join()
        .unwrap();
    let sampler_ns = named_thread_cpu_ns("ringtrace-sampler") - sampler_before;
    let stats = guard.stop().unwrap();
    json!({"tid": tid, "sum": sum, "rounds_per_cpu_s": rounds as f64 * 1000.0 / ms as f64,
           "sampler_cpu_ns": sampler_ns, "stats": stats_json(&stats)})
}

/// The system's zlib (a library with a CPU-bound exported function,
/// `crc32`), wherever the distribution keeps it.
fn system_zlib() -> std::path::PathBuf {
    [
        "/lib/x86_64-linux-gnu/libz.so.1",
        "/usr/lib/x86_64-linux-gnu/libz.so.1",
        "/usr/lib64/libz.so.1",
        "/lib64/libz.so.1",
        "/usr/lib/libz.so.1",
    ]
    .iter()
    .map(std::path::PathBuf::from)
    .find(|p| p.exists())
    .expect("the cpu_replaced scenario needs the system's zlib (libz.so.1)")
}

/// `crc32` of the library at `path`, loaded with `dlopen` (a copy of its
/// own: the path is not the system's).
fn load_crc32(path: &std::path::Path) -> extern "C" fn(u64, *const u8, u32) -> u64 {
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: dlopen and dlsym with valid NUL-terminated strings; the
    // handle is never closed, so the function stays mapped.
    unsafe {
        let h = libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        assert!(!h.is_null(), "dlopen {}", path.display());
        let f = libc::dlsym(h, c"crc32".as_ptr());
        assert!(!f.is_null(), "crc32 in {}", path.display());
        // SAFETY: zlib's `uLong crc32(uLong crc, const Bytef *buf, uInt len)`.
        std::mem::transmute::<*mut libc::c_void, extern "C" fn(u64, *const u8, u32) -> u64>(f)
    }
}

/// Libraries mapped, then changed on disk before the sampler reads them,
/// their code sampled: `mode` "replaced": two copies of zlib loaded from
/// `<dir>/libz copy.so` (a space in its path) and `<dir>/libz-replaced.so`,
/// the second then replaced on disk by another library (renamed over it:
/// `(deleted)` in the maps); "fifo": a copy loaded from `<dir>/fifo.so`,
/// then a FIFO put at its path. A thread runs each copy's `crc32` for
/// 300 ms of CPU time, copied stacks at 1 kHz. The expectation: the
/// thread's tid, the copies' paths, the stats.
pub fn replaced(trace: &str, mode: &str) -> Value {
    let dir = std::path::Path::new(trace).parent().unwrap();
    let zlib = system_zlib();
    let paths: Vec<std::path::PathBuf> = match mode {
        "fifo" => vec![dir.join("fifo.so")],
        _ => vec![dir.join("libz copy.so"), dir.join("libz-replaced.so")],
    };
    let fns: Vec<_> = paths
        .iter()
        .map(|p| {
            std::fs::copy(&zlib, p).unwrap();
            load_crc32(p)
        })
        .collect();
    if mode == "fifo" {
        std::fs::remove_file(&paths[0]).unwrap();
        let c = std::ffi::CString::new(paths[0].to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    } else {
        // Another library (its own symbols at other addresses) renamed
        // over the loaded one, as a package update does.
        let other = dir.join("other.so");
        std::fs::copy(std::env::current_exe().unwrap(), &other).unwrap();
        std::fs::rename(&other, &paths[1]).unwrap();
    }
    let guard = ringtrace::builder()
        .output(trace)
        .cpu_sampling(1000)
        .cpu_sampling_stacks(ringtrace::CpuStacks::CopiedStacks)
        .start()
        .unwrap();
    let (tid, sum) = std::thread::Builder::new()
        .name("crc".into())
        .spawn(move || {
            let data = vec![7u8; 64 << 10];
            let start = thread_cpu();
            let mut sum = 0u64;
            while thread_cpu() - start < Duration::from_millis(300) * fns.len() as u32 {
                for f in &fns {
                    sum = sum.wrapping_add(f(0, black_box(data.as_ptr()), data.len() as u32));
                }
            }
            (super::tid(), sum)
        })
        .unwrap()
        .join()
        .unwrap();
    let stats = guard.stop().unwrap();
    let paths: Vec<&str> = paths.iter().map(|p| p.to_str().unwrap()).collect();
    json!({"tid": tid, "sum": sum, "paths": paths, "stats": stats_json(&stats)})
}

/// A rate above the kernel's limit (`kernel.perf_event_max_sample_rate`
/// plus one), frame-pointer stacks, a hot thread for 100 ms of CPU time.
/// The expectation: the limit, the tid, the stats.
pub fn over_max_rate(trace: &str) -> Value {
    let max: u32 = std::fs::read_to_string("/proc/sys/kernel/perf_event_max_sample_rate")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let guard = ringtrace::builder()
        .output(trace)
        .cpu_sampling(max.saturating_add(1))
        .cpu_sampling_stacks(ringtrace::CpuStacks::FramePointers)
        .start()
        .unwrap();
    let (tid, sum) = run_hot_thread(Duration::from_millis(100));
    let stats = guard.stop().unwrap();
    let mut s = stats_json(&stats);
    s["cpu_sampling_hz"] = json!(stats.cpu_sampling_hz);
    json!({"max": max, "tid": tid, "sum": sum, "stats": s})
}

/// `RLIMIT_NOFILE` set to 64 open files, then 60 threads alive at once,
/// sampled with frame pointers: while they live (the sampler looks at the
/// thread list every 100 ms; 600 ms leave a loaded machine room) the
/// program opens 16 files. The expectation: how many opened, the perf
/// fds open then, the stats.
pub fn fd_limit(trace: &str) -> Value {
    let lim = libc::rlimit {
        rlim_cur: 64,
        rlim_max: 64,
    };
    // SAFETY: setrlimit with a valid struct.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) }, 0);
    let guard = ringtrace::builder()
        .output(trace)
        .cpu_sampling(1000)
        .cpu_sampling_stacks(ringtrace::CpuStacks::FramePointers)
        .start()
        .unwrap();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let threads: Vec<_> = (0..60)
        .map(|_| {
            let done = done.clone();
            std::thread::spawn(move || {
                hot_thread_body(Duration::from_millis(5));
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(5));
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(600));
    let perf_fds = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .flatten()
        .filter(|e| {
            std::fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy().contains("perf_event"))
        })
        .count();
    let files: Vec<_> = (0..16)
        .filter_map(|_| std::fs::File::open("/dev/null").ok())
        .collect();
    let opened = files.len();
    drop(files);
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    let stats = guard.stop().unwrap();
    json!({"opened": opened, "perf_fds": perf_fds, "stats": stats_json(&stats)})
}

/// A JSON document of `n` records, each an object of short strings and
/// numbers: parsing it allocates a string, a map node or a vector for
/// almost every token.
fn json_text(n: usize) -> String {
    let records: Vec<Value> = (0..n)
        .map(|i| {
            json!({
                "id": i,
                "name": format!("record-{i}"),
                "tags": ["alpha", "beta", format!("t{}", i % 17)],
                "attrs": {"k1": format!("v{i}"), "k2": i * 3, "k3": [i, i + 1]},
            })
        })
        .collect();
    serde_json::to_string(&records).unwrap()
}

/// Third-party code allocating heavily: `serde_json` parses a document
/// into `Value`s and drops them (the C library's `malloc` and `free`, and
/// their internal functions, take much of the time), sampled at 1 kHz for
/// `cpu` of the thread's CPU time inside a `parse` scope. The thread's tid
/// and the stats are the expectation.
#[inline(never)]
fn json_parsing_body(cpu: Duration) -> usize {
    let text = json_text(2_000);
    let start = thread_cpu();
    let mut items = 0;
    while thread_cpu() - start < cpu {
        ringtrace::trace_scope!("parse");
        let v: Value = serde_json::from_str(black_box(&text)).unwrap();
        items += v.as_array().map_or(0, Vec::len);
    }
    items
}

pub fn json_parse(trace: &str) -> Value {
    let guard = ringtrace::builder()
        .output(trace)
        .cpu_sampling(1000)
        .start()
        .unwrap();
    let (tid, items) = std::thread::Builder::new()
        .name("json".into())
        .spawn(|| (super::tid(), json_parsing_body(Duration::from_millis(500))))
        .unwrap()
        .join()
        .unwrap();
    let stats = guard.stop().unwrap();
    json!({"tid": tid, "items": items, "stats": stats_json(&stats)})
}

/// Always inlined into `inline_caller`: the hot loop, where the time goes.
#[inline(always)]
fn inlined_hot_loop(data: &[u64], state: u64) -> u64 {
    let mut h = state;
    for _ in 0..64 {
        for &w in data {
            h = (h ^ black_box(w))
                .wrapping_mul(0x100_0000_01b3)
                .rotate_left(7);
        }
    }
    h
}

/// Not inlined: its code is `inlined_hot_loop`'s.
#[inline(never)]
fn inline_caller(data: &[u64], state: u64) -> u64 {
    inlined_hot_loop(data, state) ^ 1
}

/// A thread whose time goes into a function inlined into its caller
/// (`inlined_hot_loop` in `inline_caller`), `cpu` of CPU time inside
/// `inline` scopes, sampled at 1 kHz with copied stacks.
pub fn inline(trace: &str) -> Value {
    let guard = ringtrace::builder()
        .output(trace)
        .cpu_sampling(1000)
        .cpu_sampling_stacks(ringtrace::CpuStacks::CopiedStacks)
        .start()
        .unwrap();
    let (tid, sum) = std::thread::Builder::new()
        .name("inline".into())
        .spawn(|| {
            let data: Vec<u64> = (0..1 << 12).collect();
            let start = thread_cpu();
            let mut sum = 0u64;
            while thread_cpu() - start < Duration::from_millis(400) {
                ringtrace::trace_scope!("inline");
                sum = sum.wrapping_add(inline_caller(black_box(&data), sum));
            }
            (super::tid(), sum)
        })
        .unwrap()
        .join()
        .unwrap();
    let stats = guard.stop().unwrap();
    json!({"tid": tid, "sum": sum, "stats": stats_json(&stats)})
}
