//! Memory scenarios (the process-wide budget) and events recorded while
//! threads are torn down.

use serde_json::{json, Value};
use std::sync::{Arc, Barrier};
use std::thread;

/// A field of `/proc/self/status` in KiB (`VmRSS`, `VmHWM`).
fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status"))
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .map_or(default, |v| v.parse().expect(name))
}

/// One thread's work: a scope around an instant.
fn record(api: &str, i: u64) {
    match api {
        "subscriber" => {
            let span = tracing::info_span!(target: "mem", "work", i);
            let _g = span.enter();
            tracing::info!(target: "mem", "tick");
        }
        _ => {
            ringtrace::trace_scope!("mem", "work", i = i);
            ringtrace::trace_instant!("mem", "tick");
        }
    }
}

/// `MEM_THREADS` threads (or tasks of a tokio blocking pool of that size,
/// with `MEM_API=tokio`) alive at once, each recording a scope and an
/// instant, then all exit. With `MEM_MODE=off` the same program records
/// nothing (no session): the difference in peak RSS growth between the two
/// runs is what recording cost. Reports RSS from `/proc/self/status`.
pub fn threads_alive(trace: &str) -> Value {
    let on = std::env::var("MEM_MODE").as_deref() != Ok("off");
    let threads = env_u64("MEM_THREADS", 10_000) as usize;
    let budget = env_u64("MEM_BUDGET", 32 << 20);
    let api = std::env::var("MEM_API").unwrap_or_else(|_| "macros".into());
    let session = on.then(|| {
        if api == "subscriber" {
            let (sub, guard) = ringtrace::builder()
                .output(trace)
                .buffer_bytes(budget)
                .subscriber()
                .unwrap();
            tracing::subscriber::set_global_default(sub).unwrap();
            guard
        } else {
            ringtrace::builder()
                .output(trace)
                .buffer_bytes(budget)
                .start()
                .unwrap()
        }
    });
    // Warm up what every run pays once (lazy statics, the flusher's
    // buffers, the first thread's stack cache) before the baseline.
    thread::spawn({
        let api = api.clone();
        move || record(&api, u64::MAX)
    })
    .join()
    .unwrap();
    if on {
        ringtrace::flush();
    }
    let rss_base = status_kib("VmRSS");
    let heap_base = crate::LIVE_BYTES.load(std::sync::atomic::Ordering::Relaxed);
    let barrier = Arc::new(Barrier::new(threads + 1));
    let work = {
        let barrier = barrier.clone();
        let api = api.clone();
        move |i: u64| {
            record(&api, i);
            barrier.wait(); // all alive at once, each having recorded
            barrier.wait(); // the main thread has flushed
        }
    };
    // With every thread alive and having recorded: the heap bytes live
    // before the flush (the counting allocator's: sizes asked for, no malloc
    // overhead), what the threads' state takes on the heap; then the flush,
    // and the threads go on.
    let all_alive = || {
        barrier.wait();
        let heap = crate::LIVE_BYTES.load(std::sync::atomic::Ordering::Relaxed);
        if on {
            ringtrace::flush();
        }
        barrier.wait();
        heap
    };
    let heap_alive;
    if api == "tokio" {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .max_blocking_threads(threads)
            .thread_stack_size(256 << 10)
            .build()
            .unwrap();
        let tasks: Vec<_> = (0..threads as u64)
            .map(|i| {
                let work = work.clone();
                rt.spawn_blocking(move || work(i))
            })
            .collect();
        heap_alive = all_alive();
        rt.block_on(async {
            for t in tasks {
                t.await.unwrap();
            }
        });
        drop(rt);
    } else {
        let hs: Vec<_> = (0..threads as u64)
            .map(|i| {
                let work = work.clone();
                thread::Builder::new()
                    .stack_size(256 << 10)
                    .spawn(move || work(i))
                    .expect("spawn")
            })
            .collect();
        heap_alive = all_alive();
        for h in hs {
            h.join().unwrap();
        }
    }
    let rss_peak = status_kib("VmHWM");
    let stats = session.map(|g| g.stop().unwrap()).unwrap_or_default();
    json!({
        "threads": threads, "budget": budget, "rss_base_kib": rss_base, "rss_peak_kib": rss_peak,
        "events_written": stats.events_written, "events_lost": stats.events_lost,
        "events_no_memory": stats.events_no_memory, "buffer_bytes_peak": stats.buffer_bytes_peak,
        "heap_growth": heap_alive - heap_base,
    })
}

/// A thread-local whose `Drop` records, through `MEM_API` (`macros`,
/// `events`, `subscriber`, `layer`, `log`), a slice `td_span` entered and
/// closed there with an instant `td` inside it (`log`: a macro scope around
/// a `log::info!`).
struct RecordsOnDrop(&'static str);

impl Drop for RecordsOnDrop {
    fn drop(&mut self) {
        let api = std::env::var("MEM_API").unwrap_or_default();
        match api.as_str() {
            "events" => {
                static CAT: ringtrace::events::Category =
                    ringtrace::events::Category::new("teardown");
                let _s = CAT.scope("td_span").arg("which", self.0).begin();
                CAT.instant(self.0).emit();
            }
            // `tracing-subscriber`'s registry cannot make a span once its
            // own thread-locals are gone (it panics: tokio-rs/tracing#3239):
            // through the layer, only the destructor that runs before them
            // makes one.
            "layer" if self.0 == "first" => {
                tracing::info!(target: "teardown", which = self.0, "td");
            }
            "subscriber" | "layer" => {
                let _s =
                    tracing::info_span!(target: "teardown", "td_span", which = self.0).entered();
                tracing::info!(target: "teardown", which = self.0, "td");
                // `MEM_DEPTH`: that many more spans nested inside.
                let deep: Vec<_> = (0..env_u64("MEM_DEPTH", 0))
                    .map(|d| tracing::info_span!(target: "teardown", "td_deep", d).entered())
                    .collect();
                deep.into_iter().rev().for_each(drop); // innermost first
            }
            "log" => {
                ringtrace::trace_scope!("teardown", "td_span", which = self.0);
                log::info!(target: "teardown", "{}", self.0);
            }
            _ => {
                ringtrace::trace_scope!("teardown", "td_span", which = self.0);
                ringtrace::trace_instant!("teardown", "td", which = self.0);
            }
        }
    }
}

thread_local! {
    static MADE_FIRST: RecordsOnDrop = const { RecordsOnDrop("first") };
    static MADE_LAST: RecordsOnDrop = const { RecordsOnDrop("last") };
}

/// `MEM_THREADS` threads each hold two thread-locals whose destructors
/// record a slice with an instant inside: one made before the thread's
/// first event (its destructor runs after ringtrace's thread-locals with
/// destructors are gone), one made after (its destructor runs before them).
/// Every slice must be in the trace, whole, and every instant.
pub fn teardown(trace: &str) -> Value {
    let threads = env_u64("MEM_THREADS", 1000);
    let api = std::env::var("MEM_API").unwrap_or_default();
    let guard = match api.as_str() {
        "subscriber" => {
            let (sub, guard) = ringtrace::builder().output(trace).subscriber().unwrap();
            tracing::subscriber::set_global_default(sub).unwrap();
            guard
        }
        "layer" => {
            use tracing_subscriber::prelude::*;
            let (layer, guard) = ringtrace::builder().output(trace).layer().unwrap();
            tracing_subscriber::registry().with(layer).init();
            guard
        }
        "log" => {
            ringtrace::log::Logger::new().init().unwrap();
            ringtrace::builder().output(trace).start().unwrap()
        }
        _ => ringtrace::builder().output(trace).start().unwrap(),
    };
    let hs: Vec<_> = (0..threads)
        .map(|i| {
            let api = api.clone();
            thread::spawn(move || {
                MADE_FIRST.with(|_| ());
                if std::env::var_os("MEM_ONLY_DROP").is_some() {
                    return; // nothing recorded before the destructors run
                }
                match api.as_str() {
                    "subscriber" | "layer" => {
                        let span = tracing::info_span!(target: "teardown", "body", i);
                        let _g = span.enter();
                        let deep: Vec<_> = (0..env_u64("MEM_DEPTH", 0))
                            .map(|d| tracing::info_span!(target: "teardown", "deep", d).entered())
                            .collect();
                        deep.into_iter().rev().for_each(drop); // innermost first
                    }
                    "events" => {
                        static CAT: ringtrace::events::Category =
                            ringtrace::events::Category::new("teardown");
                        CAT.instant("body").emit();
                    }
                    "log" => log::info!(target: "teardown", "body"),
                    _ => {
                        ringtrace::trace_scope!("teardown", "body", i = i);
                    }
                }
                MADE_LAST.with(|_| ());
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    let stats = guard.stop().unwrap();
    json!({"threads": threads, "events_written": stats.events_written, "events_lost": stats.events_lost})
}

/// Flight recorder, 64 threads, a 4 MiB budget: first every thread records
/// `old` instants, then (all threads still alive, the first phase drained
/// into the recorder) 4 threads record `new` instants, three times what the
/// recorder holds. The trace must hold the newest of the whole process: no
/// `old` instant, and of each busy thread a run of `new` ones ending at its
/// last.
pub fn flight_recorder_process(trace: &str) -> Value {
    let budget: u64 = 4 << 20;
    let guard = ringtrace::builder()
        .output(trace)
        .overwrite(true)
        .buffer_bytes(budget)
        .start()
        .unwrap();
    let threads = 64;
    let old_each = 30u64;
    // An instant with one argument is 3 words: the recorder holds budget / 2.
    let new_each = (budget / 2 / 24) * 3 / 4;
    let phase = Arc::new(Barrier::new(threads + 1));
    let hs: Vec<_> = (0..threads)
        .map(|t| {
            let phase = phase.clone();
            thread::spawn(move || {
                for i in 0..old_each {
                    ringtrace::trace_instant!("fr", "old", i = i);
                }
                phase.wait(); // phase 1 done
                phase.wait(); // phase 2 may start
                if t < 4 {
                    for i in 0..new_each {
                        ringtrace::trace_instant!("fr", "new", i = i);
                        if i % 500 == 499 {
                            // Let the flusher keep up: this test is about
                            // what the recorder keeps, not about the rings.
                            thread::sleep(std::time::Duration::from_millis(1));
                        }
                    }
                }
                phase.wait(); // phase 2 done
            })
        })
        .collect();
    phase.wait();
    thread::sleep(std::time::Duration::from_millis(300)); // the flusher drains phase 1
    phase.wait();
    phase.wait();
    ringtrace::flush();
    let stats = guard.stop().unwrap();
    for h in hs {
        h.join().unwrap();
    }
    json!({"threads": threads, "old_each": old_each, "new_each": new_each, "busy": 4,
           "recorder_bytes": budget / 2,
           "events_written": stats.events_written, "events_lost": stats.events_lost,
           "buffer_bytes_peak": stats.buffer_bytes_peak})
}
