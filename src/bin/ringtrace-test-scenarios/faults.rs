//! Faults around the files a session writes (`tests/file_faults.rs`): a
//! budget larger than memory, a part's or capture's name taken, a full disk
//! (a file size limit), no file descriptor left, a capture that cannot be
//! written, a capture queued while a dump's window is open. Each scenario
//! writes the session's `Stats` (or its error) and what it recorded, counted
//! here, into the expectation file.

use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, Instant};

/// `ringtrace-test-scenarios faults TRACE EXPECT CASE`.
pub fn faults(trace: &str, case: &str) -> Value {
    match case {
        "huge_budget" => huge_budget(trace),
        "parts" => parts(trace, None),
        "parts_no_fd" => parts(trace, Some(Fault::NoFd)),
        "parts_full_disk" => parts(trace, Some(Fault::FileSize(40 << 10))),
        "main_full_disk" => main_full_disk(trace),
        "captures" => captures(trace),
        "capture_in_dump" => capture_in_dump(trace),
        other => panic!("unknown faults case {other}"),
    }
}

fn stats_json(s: &ringtrace::Stats) -> Value {
    json!({
        "events_written": s.events_written,
        "events_lost": s.events_lost,
        "events_dropped_disk": s.events_dropped_disk,
        "bytes_written": s.bytes_written,
        "files_removed": s.files_removed,
        "parts_failed": s.parts_failed,
        "first_part_error": s.first_part_error.map(|k| format!("{k:?}")),
        "captures_fired": s.captures_fired,
        "captures_suppressed": s.captures_suppressed,
        "captures_failed": s.captures_failed,
        "first_capture_error": s.first_capture_error.map(|k| format!("{k:?}")),
    })
}

/// The stop's outcome: the `Stats`, and the error (its `Stats` inside).
fn stopped(r: Result<ringtrace::Stats, ringtrace::Error>) -> Value {
    match r {
        Ok(s) => json!({"stats": stats_json(&s), "error": null}),
        Err(e) => json!({
            "stats": e.stats().map(stats_json),
            "error": e.to_string(),
        }),
    }
}

/// Bytes of the session's file and its parts now (`trace.N.ext`, N < 200),
/// read with `stat` alone: no file descriptor needed.
fn on_disk(trace: &Path) -> u64 {
    let (stem, ext) = (
        trace.file_stem().unwrap().to_str().unwrap(),
        trace.extension().unwrap().to_str().unwrap(),
    );
    (0..200)
        .map(|n| match n {
            0 => trace.to_path_buf(),
            n => trace.with_file_name(format!("{stem}.{n}.{ext}")),
        })
        .filter_map(|p| std::fs::symlink_metadata(p).ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum()
}

/// A flight recorder given a budget far larger than memory: `start` must
/// not reserve it.
fn huge_budget(trace: &str) -> Value {
    let guard = ringtrace::builder()
        .output(trace)
        .overwrite(true)
        .buffer_bytes(u64::MAX)
        .start()
        .expect("start with a budget of u64::MAX");
    for i in 0..1000u64 {
        ringtrace::trace_instant!("faults", "tick", i = i);
    }
    json!({"recorded": 1000, "stop": stopped(guard.stop())})
}

enum Fault {
    /// No file descriptor left (`RLIMIT_NOFILE`) for a while after the
    /// first part.
    NoFd,
    /// Every file at most this size (`RLIMIT_FSIZE`): a full disk for
    /// each part.
    FileSize(u64),
}

fn set_limit(resource: libc::__rlimit_resource_t, soft: u64) -> u64 {
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `old` is a valid, writable rlimit for the call to fill.
    assert_eq!(unsafe { libc::getrlimit(resource, &mut old) }, 0);
    let new = libc::rlimit {
        rlim_cur: soft,
        rlim_max: old.rlim_max,
    };
    // SAFETY: `new` is a valid rlimit; lowering a soft limit needs no
    // privilege.
    assert_eq!(unsafe { libc::setrlimit(resource, &new) }, 0);
    old.rlim_cur
}

/// Parts of 64 KiB, 3 kept, 20 ticks a millisecond for about 2.5 s, with
/// the fault the test asks for (names taken are planted by the test). The
/// peak of bytes on disk is sampled every millisecond.
fn parts(trace: &str, fault: Option<Fault>) -> Value {
    const PART: u64 = 64 << 10;
    if let Some(Fault::FileSize(max)) = fault {
        // A write past the limit fails with EFBIG instead of killing us.
        // SAFETY: ignoring SIGXFSZ installs no handler code.
        unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
        set_limit(libc::RLIMIT_FSIZE, max);
    }
    let guard = ringtrace::builder()
        .output(trace)
        .max_file_bytes(PART)
        .max_files(3)
        .flush_interval(Duration::from_millis(10))
        .start()
        .expect("start");
    let (mut n, mut peak) = (0u64, 0u64);
    // No file descriptor from 0.2 s to 1 s (`NoFd`): the soft limit and
    // whether it was restored.
    let (mut fd_limit, mut restored) = (None, false);
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(2500) {
        if let Some(Fault::NoFd) = fault {
            let t = start.elapsed();
            if fd_limit.is_none() && t > Duration::from_millis(200) {
                // No new descriptor: 0, 1 and 2 are taken.
                fd_limit = Some(set_limit(libc::RLIMIT_NOFILE, 3));
            } else if !restored && t > Duration::from_millis(1000) {
                if let Some(old) = fd_limit {
                    set_limit(libc::RLIMIT_NOFILE, old);
                    restored = true;
                }
            }
        }
        for _ in 0..20 {
            ringtrace::trace_instant!("faults", "tick", i = n);
            n += 1;
        }
        std::thread::sleep(Duration::from_millis(1));
        peak = peak.max(on_disk(Path::new(trace)));
    }
    json!({"recorded": n, "peak": peak, "stop": stopped(guard.stop())})
}

/// The session's only file hits a file size limit (a full disk).
fn main_full_disk(trace: &str) -> Value {
    // SAFETY: ignoring SIGXFSZ installs no handler code.
    unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
    set_limit(libc::RLIMIT_FSIZE, 48 << 10);
    let guard = ringtrace::builder()
        .output(trace)
        .flush_interval(Duration::from_millis(10))
        .start()
        .expect("start");
    let mut n = 0u64;
    for _ in 0..300 {
        for _ in 0..20 {
            ringtrace::trace_instant!("faults", "tick", i = n);
            n += 1;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    json!({"recorded": n, "stop": stopped(guard.stop())})
}

/// A flight recorder whose captures go where `RINGTRACE_TEST_CAPTURES`
/// says (a pattern the test chose: a missing directory, a taken name, a
/// name too long); three triggers, `capture_interval` short enough for
/// each to be written.
fn captures(trace: &str) -> Value {
    let pattern = std::env::var("RINGTRACE_TEST_CAPTURES").unwrap();
    let guard = ringtrace::builder()
        .output(trace)
        .overwrite(true)
        .capture_to(&pattern)
        .capture_interval(Duration::from_millis(1))
        .capture_before(Duration::from_secs(5))
        .flush_interval(Duration::from_millis(10))
        .start()
        .expect("start");
    let mut n = 0u64;
    for round in 0..3 {
        for _ in 0..100 {
            ringtrace::trace_instant!("faults", "tick", i = n);
            n += 1;
        }
        ringtrace::trigger(&format!("incident-{round}"));
        std::thread::sleep(Duration::from_millis(60));
    }
    json!({"recorded": n, "stop": stopped(guard.stop())})
}

/// The flusher thread's CPU time so far (ns), from its `/proc` stat.
fn flusher_cpu_ns() -> u64 {
    let tick_ns = 1_000_000_000 / unsafe_clock_ticks();
    for task in std::fs::read_dir("/proc/self/task").unwrap() {
        let dir = task.unwrap().path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if comm.trim() == "ringtrace-flush" || comm.trim() == "ringtrace-flusher" {
            let stat = std::fs::read_to_string(dir.join("stat")).unwrap();
            // Fields after the command's closing parenthesis: utime is the
            // 12th, stime the 13th (14th and 15th of the whole line).
            let rest = &stat[stat.rfind(')').unwrap() + 2..];
            let f: Vec<u64> = rest
                .split(' ')
                .skip(11)
                .take(2)
                .map(|v| v.parse().unwrap())
                .collect();
            return (f[0] + f[1]) * tick_ns;
        }
    }
    panic!("no flusher thread");
}

fn unsafe_clock_ticks() -> u64 {
    // SAFETY: sysconf has no preconditions.
    (unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).max(1) as u64
}

/// A capture queued while a `dump_to` window of 1.5 s is open: the
/// flusher's CPU over the window.
fn capture_in_dump(trace: &str) -> Value {
    let dir = Path::new(trace).parent().unwrap();
    let guard = ringtrace::builder()
        .output(trace)
        .overwrite(true)
        .capture_to(dir.join("capture-{n}.pftrace"))
        .start()
        .expect("start");
    ringtrace::trace_instant!("faults", "before");
    let dumper = {
        let path = dir.join("dump.pftrace");
        std::thread::spawn(move || ringtrace::dump_to(path, Duration::from_millis(1500)))
    };
    std::thread::sleep(Duration::from_millis(100));
    let cpu_before = flusher_cpu_ns();
    let wall = Instant::now();
    assert!(ringtrace::trigger("during-the-dump"));
    let dump = dumper.join().unwrap().expect("the dump");
    let cpu = flusher_cpu_ns() - cpu_before;
    let wall = wall.elapsed();
    // The capture is written once the window closed.
    std::thread::sleep(Duration::from_millis(100));
    json!({
        "flusher_cpu_ns": cpu,
        "wall_ns": wall.as_nanos() as u64,
        "dump_events": dump.events_written,
        "stop": stopped(guard.stop()),
    })
}
