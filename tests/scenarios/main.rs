//! Child programs for the integration tests: each scenario records a known
//! workload and writes, beside the trace, what it recorded (the expectation the
//! tests compare the decoded trace with). Usage:
//! `ringtrace-test-scenarios SCENARIO TRACE_PATH EXPECT_PATH`.

use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::{Arc, Barrier};
use std::thread;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (scenario, trace, expect) = (args[1].as_str(), args[2].clone(), args[3].clone());
    let result = match scenario {
        "workload" => workload(&trace),
        "exit_process_exit" => exit_process_exit(&trace, &expect),
        "exit_panic" => exit_panic(&trace, &expect),
        "init_from_env" => init_from_env(),
        "drop_mode_loss" => drop_mode_loss(&trace),
        "overwrite_mode" => overwrite_mode(&trace),
        "categories" => categories(&trace),
        "oversized" => oversized(&trace),
        other => panic!("unknown scenario {other}"),
    };
    std::fs::write(&expect, serde_json::to_vec_pretty(&result).unwrap()).unwrap();
}

fn tid() -> i64 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as i64 }
}

/// Several threads of nested scopes, instants and counters with every arg type.
fn workload(trace: &str) -> Value {
    let guard = ringtrace::builder().output(trace).start().unwrap();
    let start = ringtrace::trace_clock_ns();
    let threads = 4;
    let barrier = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let barrier = barrier.clone();
            thread::Builder::new()
                .name(format!("worker \"{t}\""))
                .spawn(move || {
                    barrier.wait();
                    let mut events = Vec::new();
                    for i in 0..50u32 {
                        let label = format!("item\t{i}\u{1}é");
                        ringtrace::trace_scope!("work", "outer", i = i, thread = t as u64, label = label.as_str());
                        events.push(json!({"type": "begin", "name": "outer", "cat": "work",
                            "args": {"i": i, "thread": t, "label": label}}));
                        {
                            let mut dict = BTreeMap::new();
                            dict.insert("list", vec![1i64, -2, 3]);
                            dict.insert("empty", vec![]);
                            let ptr = 0xdead_beef_usize as *const u8;
                            ringtrace::trace_scope!("detail", "inner", ratio = 0.25 * i as f64, ok = i % 2 == 0,
                                neg = -(i as i64) - 1, big = u64::MAX, ptr = ptr, nested = dict);
                            events.push(json!({"type": "begin", "name": "inner", "cat": "detail",
                                "args": {"ratio": 0.25 * i as f64, "ok": i % 2 == 0, "neg": -(i as i64) - 1,
                                         "big": u64::MAX, "ptr": {"pointer": 0xdead_beef_u64},
                                         "nested": {"empty": [], "list": [1, -2, 3]}}}));
                            ringtrace::trace_instant!("tick", step = i);
                            events.push(json!({"type": "instant", "name": "tick", "cat": "default", "args": {"step": i}}));
                        }
                        events.push(json!({"type": "end", "name": "inner"}));
                        ringtrace::trace_counter!("progress", i);
                        events.push(json!({"type": "counter", "name": "progress", "value": i}));
                        ringtrace::trace_counter!("stats", "ratio", i as f64 / 2.0);
                        events.push(json!({"type": "counter", "name": "ratio", "value": i as f64 / 2.0}));
                        drop(label);
                        if i % 10 == 0 {
                            thread::yield_now();
                        }
                        events.push(json!({"type": "end", "name": "outer"}));
                    }
                    json!({"tid": tid(), "name": format!("worker \"{t}\""), "events": events})
                })
                .unwrap()
        })
        .collect();
    let per_thread: Vec<Value> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let end = ringtrace::trace_clock_ns();
    let stats = guard.stop().unwrap();
    json!({"pid": std::process::id(), "start_ns": start, "end_ns": end, "threads": per_thread,
           "events_written": stats.events_written, "events_lost": stats.events_lost})
}

/// `std::process::exit` while a worker thread is still recording.
fn exit_process_exit(trace: &str, expect: &str) -> Value {
    let _guard = ringtrace::builder().output(trace).start().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    thread::Builder::new()
        .name("busy".into())
        .spawn(move || {
            let mut sent = false;
            for i in 0u64.. {
                ringtrace::trace_scope!("busy_loop", i = i);
                if i == 1000 && !sent {
                    tx.send(()).unwrap();
                    sent = true;
                }
                std::hint::spin_loop();
            }
        })
        .unwrap();
    rx.recv().unwrap();
    for i in 0..10 {
        ringtrace::trace_instant!("main_event", i = i);
    }
    std::fs::write(
        expect,
        serde_json::to_vec(&json!({"main_events": 10})).unwrap(),
    )
    .unwrap();
    std::process::exit(7);
}

/// A panic unwinding out of main with the guard alive.
fn exit_panic(trace: &str, expect: &str) -> Value {
    let _guard = ringtrace::builder().output(trace).start().unwrap();
    let worker = thread::spawn(|| {
        ringtrace::trace_scope!("worker_scope");
        ringtrace::trace_instant!("from_worker");
    });
    worker.join().unwrap();
    ringtrace::trace_scope!("main_scope");
    ringtrace::trace_instant!("before_panic");
    std::fs::write(expect, b"{}").unwrap();
    panic!("scenario panics in main");
}

/// `init_from_env` with RINGTRACE_OUTPUT set by the test.
fn init_from_env() -> Value {
    let guard = ringtrace::init_from_env()
        .unwrap()
        .expect("RINGTRACE_OUTPUT is set");
    ringtrace::trace_scope!("skipped", "never");
    ringtrace::trace_scope!("kept", "from_env");
    drop(guard);
    json!({})
}

/// A tiny ring, no periodic flush, scopes back to back: most are dropped.
fn drop_mode_loss(trace: &str) -> Value {
    let guard = ringtrace::builder()
        .output(trace)
        .buffer_bytes_per_thread(4096)
        .flush_interval(std::time::Duration::from_secs(60))
        .start()
        .unwrap();
    let scopes = 20_000u64;
    for i in 0..scopes {
        ringtrace::trace_scope!("spin", i = i);
    }
    let stats = guard.stop().unwrap();
    json!({"records": scopes * 2, "events_written": stats.events_written, "events_lost": stats.events_lost})
}

/// Flight recorder: only the newest instants survive; the loss is marked.
fn overwrite_mode(trace: &str) -> Value {
    let guard = ringtrace::builder()
        .output(trace)
        .buffer_bytes_per_thread(8192)
        .overwrite(true)
        .start()
        .unwrap();
    let n = 10_000u64;
    for i in 0..n {
        ringtrace::trace_instant!("sample", i = i);
    }
    let stats = guard.stop().unwrap();
    json!({"records": n, "last": n - 1, "events_written": stats.events_written, "events_lost": stats.events_lost})
}

/// Categories switched at run time, from another thread.
fn categories(trace: &str) -> Value {
    let guard = ringtrace::builder()
        .output(trace)
        .enable_categories(["*"])
        .disable_categories(["noisy"])
        .start()
        .unwrap();
    for phase in 0..3 {
        match phase {
            1 => thread::spawn(|| ringtrace::enable_categories(["noisy"]))
                .join()
                .unwrap(),
            2 => ringtrace::disable_categories(["*"]),
            _ => {}
        }
        ringtrace::trace_instant!("noisy", "n", phase = phase);
        ringtrace::trace_instant!("quiet", "q", phase = phase);
    }
    guard.stop().unwrap();
    json!({"expected": [["q", 0], ["n", 1], ["q", 1]]})
}

/// One argument far larger than the ring: that event is dropped and counted.
fn oversized(trace: &str) -> Value {
    let guard = ringtrace::builder()
        .output(trace)
        .buffer_bytes_per_thread(64 * 1024)
        .start()
        .unwrap();
    let huge = "x".repeat(1 << 20);
    ringtrace::trace_instant!("before");
    ringtrace::trace_instant!("huge", payload = huge.as_str());
    ringtrace::trace_instant!("after");
    let stats = guard.stop().unwrap();
    json!({"events_lost": stats.events_lost, "events_oversized": stats.events_oversized})
}
