//! A program recording with ringtrace's system tracing, driven by the tests
//! line by line on stdin (one answer line per command on stdout):
//!
//! - `wait CATEGORY on|off`: until a tracing session records CATEGORY (or no
//!   longer does); `ok` or `timeout`
//! - `burst TAG N`: on 3 threads, N times: slice `outer` (alpha, args `tag`,
//!   `i`) around slice `inner` (beta) around instant `point` (alpha, arg
//!   `i`), then instant `other` (gamma); `done`
//! - `main TAG N`: the same as one thread of `burst`, on the main thread
//!   (whose sequence lives as long as the program); `done`
//! - `big BYTES`: one alpha instant `big` with a string arg of BYTES bytes; `done`
//! - `flood MS`: alpha instants from 2 threads for MS ms; `done COUNT`
//! - `late N`: N instants `late` of category delta, which nothing uses
//!   before (its first use registers it, after the program connected); `done`
//! - `trigger NAME`: `ringtrace::trigger(NAME)` (sent to the service as
//!   `ActivateTriggers` by the flusher); `done` or `refused`
//! - `triggers N BYTES VALID`: N `ringtrace::trigger` calls, every other
//!   one with a distinct name of BYTES bytes, the others with distinct short
//!   names, `ringtrace::flush()` after every 500 calls; halfway, `VALID`
//!   (unless `-`) until it is queued; `done BIG SMALL MAX_FLUSH_MS`: the
//!   long and short names queued, the longest flush
//! - `flush`: `ringtrace::flush()`; `done MS`
//! - `spin MS`: MS ms of this thread's CPU time in `spin_hot` (not
//!   instrumented), inside alpha slices `spin`; `done TID`
//! - `quit`: stops the session; `stopped LOST`
//! - `quit-stats`: stops the session; `stopped triggers_dropped=N
//!   captures_suppressed=N stop_ms=MS`
//!
//! Prints `ready` once the session runs. With `RINGTRACE_OUTPUT` set it
//! starts through `init_from_env` instead of the builder (the builder also
//! reads `RINGTRACE_CPU_SAMPLING`: CPU samples at that rate).

use ringtrace::events::Category;
use std::io::BufRead;
use std::time::{Duration, Instant};

static ALPHA: Category = Category::new("alpha");
static BETA: Category = Category::new("beta");
static GAMMA: Category = Category::new("gamma");
static DELTA: Category = Category::new("delta");

fn category(name: &str) -> &'static Category {
    match name {
        "alpha" => &ALPHA,
        "beta" => &BETA,
        "delta" => &DELTA,
        _ => &GAMMA,
    }
}

fn rounds(tag: u64, n: u64) {
    for i in 0..n {
        ringtrace::trace_scope!("alpha", "outer", tag = tag, i = i);
        {
            ringtrace::trace_scope!("beta", "inner");
            ringtrace::trace_instant!("alpha", "point", i = i);
        }
        ringtrace::trace_instant!("gamma", "other");
    }
}

fn burst(tag: u64, n: u64) {
    let threads: Vec<_> = (0..3)
        .map(|t| {
            std::thread::Builder::new()
                .name(format!("burst-{t}"))
                .spawn(move || rounds(tag, n))
                .unwrap()
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

fn flood(ms: u64) -> u64 {
    let until = Instant::now() + Duration::from_millis(ms);
    let threads: Vec<_> = (0..2)
        .map(|_| {
            std::thread::spawn(move || {
                let mut n = 0u64;
                while Instant::now() < until {
                    for _ in 0..64 {
                        ringtrace::trace_instant!("alpha", "flood", n = n);
                        n += 1;
                    }
                }
                n
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).sum()
}

/// Uninstrumented CPU work: what the CPU samples must name.
#[inline(never)]
fn spin_hot(data: &[u64]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &w| {
        (h ^ w).wrapping_mul(0x100_0000_01b3).rotate_left(13)
    })
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

/// `spin MS`; returns this thread's tid.
fn spin(ms: u64) -> i64 {
    let data: Vec<u64> = (0..1 << 14).collect();
    let start = thread_cpu();
    let mut sum = 0u64;
    while thread_cpu() - start < Duration::from_millis(ms) {
        ringtrace::trace_scope!("alpha", "spin");
        for _ in 0..8 {
            sum = sum.wrapping_add(spin_hot(std::hint::black_box(&data)));
        }
    }
    std::hint::black_box(sum);
    // SAFETY: gettid has no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) }
}

/// `triggers N BYTES VALID`.
fn triggers(n: u64, bytes: usize, valid: &str) -> String {
    let mut big = "x".repeat(bytes.max(16));
    let (mut queued_big, mut queued_small) = (0u64, 0u64);
    let mut max_flush = Duration::ZERO;
    for i in 0..n {
        if i % 2 == 0 {
            big.replace_range(..16, &format!("{i:016}"));
            queued_big += ringtrace::trigger(&big) as u64;
        } else {
            queued_small += ringtrace::trigger(&format!("short-{i}")) as u64;
        }
        if i == n / 2 && valid != "-" {
            // The valid name goes in between two halves of the flood, when
            // the names before it have been sent (or counted dropped): the
            // queue toward the service is bounded, and a name that finds it
            // full is dropped, whichever it is.
            ringtrace::flush();
            std::thread::sleep(Duration::from_millis(500));
            let until = Instant::now() + Duration::from_secs(10);
            while !ringtrace::trigger(valid) && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(1));
            }
            ringtrace::flush();
            std::thread::sleep(Duration::from_millis(500));
        }
        if i % 500 == 499 {
            let start = Instant::now();
            ringtrace::flush();
            max_flush = max_flush.max(start.elapsed());
        }
    }
    format!("done {queued_big} {queued_small} {}", max_flush.as_millis())
}

fn main() {
    // Known categories are listed when the data source is registered
    // (delta is first used later: it is re-announced).
    for c in [&ALPHA, &BETA, &GAMMA] {
        let _ = c.is_enabled();
    }
    let guard = if std::env::var_os("RINGTRACE_OUTPUT").is_some() {
        ringtrace::init_from_env().expect("init_from_env")
    } else {
        Some(
            ringtrace::builder()
                .system_tracing(true)
                .process_name("system-producer")
                .flush_interval(Duration::from_millis(50))
                .cpu_sampling(
                    std::env::var("RINGTRACE_CPU_SAMPLING")
                        .ok()
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0),
                )
                .start()
                .expect("start"),
        )
    };
    println!("ready");
    for line in std::io::stdin().lock().lines() {
        let line = line.unwrap();
        let words: Vec<&str> = line.split_whitespace().collect();
        let answer = match words.as_slice() {
            ["wait", cat, state] => {
                let want = *state == "on";
                let c = category(cat);
                let until = Instant::now() + Duration::from_secs(10);
                while c.is_enabled() != want && Instant::now() < until {
                    std::thread::sleep(Duration::from_millis(2));
                }
                if c.is_enabled() == want {
                    "ok"
                } else {
                    "timeout"
                }
                .to_string()
            }
            ["burst", tag, n] => {
                burst(tag.parse().unwrap(), n.parse().unwrap());
                "done".into()
            }
            ["main", tag, n] => {
                rounds(tag.parse().unwrap(), n.parse().unwrap());
                "done".into()
            }
            ["big", bytes] => {
                let text: String = (0..bytes.parse::<usize>().unwrap())
                    .map(|i| (b'a' + (i % 26) as u8) as char)
                    .collect();
                ringtrace::trace_instant!("alpha", "big", text = text.as_str());
                "done".into()
            }
            ["flood", ms] => format!("done {}", flood(ms.parse().unwrap())),
            ["late", n] => {
                for i in 0..n.parse::<u64>().unwrap() {
                    ringtrace::trace_instant!("delta", "late", i = i);
                }
                "done".into()
            }
            ["trigger", name] => if ringtrace::trigger(name) {
                "done"
            } else {
                "refused"
            }
            .into(),
            ["triggers", n, bytes, valid] => {
                triggers(n.parse().unwrap(), bytes.parse().unwrap(), valid)
            }
            ["flush"] => {
                let start = Instant::now();
                ringtrace::flush();
                format!("done {}", start.elapsed().as_millis())
            }
            ["spin", ms] => format!("done {}", spin(ms.parse().unwrap())),
            ["quit"] => break,
            ["quit-stats"] => {
                let start = Instant::now();
                let stats = guard.map(|g| g.stop().expect("stop")).unwrap_or_default();
                println!(
                    "stopped triggers_dropped={} captures_suppressed={} stop_ms={}",
                    stats.triggers_dropped,
                    stats.captures_suppressed,
                    start.elapsed().as_millis()
                );
                return;
            }
            _ => "error".into(),
        };
        println!("{answer}");
    }
    let lost = guard
        .map(|g| g.stop().expect("stop").events_lost)
        .unwrap_or(0);
    println!("stopped {lost}");
}
