//! Scenarios of the typed event API (issue: every phase of the Trace Event
//! Format, in both formats): every phase once, a multi-thread workload for
//! the cross-format comparison, and an endless writer for the kill test.

use ringtrace::events::{Category, Color, CounterUnit, Frame, Id, InstantScope, Stack, Track};
use ringtrace::{DisplayTimeUnit, JsonScopes, LogLevel};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

static CAT: Category = Category::new("phases");
static QUEUES: Track = Track::new("queues");
static Q0: Track = Track::child(&QUEUES, "q0");
static LANES: Track = Track::new("lanes");
static LANE: [Track; 3] = [
    Track::child(&LANES, "lane 0"),
    Track::child(&LANES, "lane 1"),
    Track::child(&LANES, "lane 2"),
];

fn tid() -> i64 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as i64 }
}

fn spin(d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}

/// The session the phase scenarios use; options from the environment:
/// RT_BE=1 (B/E scopes), RT_OBJECT=1 (object form with top-level data),
/// RT_TT=1 (thread time).
fn start(trace: &str) -> ringtrace::TraceGuard {
    let on = |k: &str| std::env::var(k).is_ok_and(|v| v == "1");
    let mut b = ringtrace::builder()
        .output(trace)
        .process_name("phases-proc")
        .process_labels(["alpha", "beta"])
        .process_sort_index(3);
    if on("RT_BE") {
        b = b.json_scopes(JsonScopes::BeginEnd);
    }
    if on("RT_OBJECT") {
        let mut meta = BTreeMap::new();
        meta.insert("run", 42);
        b = b
            .json_display_time_unit(DisplayTimeUnit::Ns)
            .json_other_data("version", "My Application v1.0")
            .json_metadata("metadata", meta);
    }
    if on("RT_TT") {
        b = b.thread_time(true);
    }
    b.start().unwrap()
}

/// Every phase of the format through the public API, once (some twice).
pub fn phases(trace: &str) -> Value {
    let guard = start(trace);
    let frames = [Frame::new("main", "app"), Frame::new("work", "app")];
    ringtrace::events::set_thread_name("main-thread");
    ringtrace::events::set_thread_sort_index(-1);
    let t_start = ringtrace::trace_clock_ns();
    let explicit_start;
    {
        ringtrace::trace_scope!("phases", "macro_scope", n = 1);
        {
            let mut g = CAT
                .scope("dyn_scope")
                .arg("k", "v")
                .arg("keep", true)
                .stack(Stack::Frames(&frames))
                .color(Color::GOOD)
                .begin();
            spin(Duration::from_micros(200));
            g.end_arg("k", "w");
            g.end_arg("extra", 2);
            g.end_stack(Stack::Addresses(&[0x10, 0x20]));
        }
        explicit_start = ringtrace::trace_clock_ns();
        spin(Duration::from_micros(50));
        CAT.complete("explicit", explicit_start, 5_000)
            .thread_time(100_000, 2_500)
            .stack(Stack::Raw(&["0x1", "0x2"]))
            .end_stack(Stack::Raw(&["0x3"]))
            .arg("a", 1)
            .color(Color::TERRIBLE)
            .emit();
        spin(Duration::from_micros(50));
    }
    // Instants of the three scopes.
    CAT.instant("inst_t")
        .arg("x", 1)
        .stack(Stack::Raw(&["a", "b"]))
        .color(Color::BAD)
        .emit();
    CAT.instant("inst_p").scope(InstantScope::Process).emit();
    CAT.instant("inst_g").scope(InstantScope::Global).emit();
    ringtrace::trace_instant!("phases", "macro_instant", v = 3);
    // Counters: several series; an id and a unit.
    CAT.counter("ctr")
        .series("cats", 0)
        .series("dogs", 7.5)
        .emit();
    CAT.counter("ctr")
        .series("cats", 10)
        .series("dogs", 4.25)
        .emit();
    CAT.counter("bytes")
        .id(9)
        .value(3)
        .unit(CounterUnit::Bytes)
        .emit();
    ringtrace::trace_counter!("phases", "macro_counter", 17);
    // Async: local id with an instant and end args; global id with scope; plain id.
    let r = CAT
        .async_begin("req", Id::local(0x100))
        .arg("url", "/x")
        .emit();
    r.instant("step").arg("s", 1).emit();
    CAT.async_begin("req_g", Id::global(0x200).with_scope("sc"))
        .emit()
        .end();
    let r2 = CAT.async_begin("plain", Id::new(0x300)).emit();
    r.end_with().arg("status", 200).emit();
    r2.end();
    // Flows: s on this thread, t on a second thread, f (next slice) on a
    // third; a second flow ending in its enclosing slice (bp "e").
    let flow = CAT.flow("fl", 0x402);
    {
        ringtrace::trace_scope!("phases", "flow_src");
        flow.start();
        spin(Duration::from_micros(20));
    }
    let mid = thread::spawn(move || {
        ringtrace::trace_scope!("phases", "flow_mid");
        flow.step();
        spin(Duration::from_micros(20));
        tid()
    })
    .join()
    .unwrap();
    let dst = thread::spawn(move || {
        flow.end();
        spin(Duration::from_micros(5));
        ringtrace::trace_scope!("phases", "flow_dst");
        spin(Duration::from_micros(20));
        tid()
    })
    .join()
    .unwrap();
    let flow2 = CAT.flow("fl2", 0x403);
    {
        ringtrace::trace_scope!("phases", "flow2_src");
        flow2.start();
        spin(Duration::from_micros(20));
    }
    thread::spawn(move || {
        ringtrace::trace_scope!("phases", "flow2_dst");
        spin(Duration::from_micros(10));
        flow2.end_enclosing();
        spin(Duration::from_micros(10));
    })
    .join()
    .unwrap();
    // Custom tracks: a child track with nested slices (the outer one ends
    // on another thread), an instant on its parent.
    let job = CAT.track_scope(&Q0, "dispatch").arg("groups", 64).begin();
    {
        let _sub = CAT.track_scope(&Q0, "sub").color(Color::GOOD).begin();
        spin(Duration::from_micros(10));
    }
    CAT.track_instant(&QUEUES, "fence").arg("v", 1).emit();
    let ender = thread::spawn(move || {
        spin(Duration::from_micros(10));
        drop(job);
        tid()
    })
    .join()
    .unwrap();
    // A sample with a stack.
    CAT.sample("smp")
        .stack(Stack::Frames(&frames))
        .arg("n", 1)
        .emit();
    // Objects: created, snapshot with base_type and category, destroyed;
    // scoped and id2 ids.
    CAT.object_created("MyObject", Id::new(0x1000)).emit();
    let mut snap = BTreeMap::new();
    snap.insert("size", 3);
    CAT.object_snapshot("MyObjectSubType", Id::new(0x1000), snap)
        .base_type("MyObject")
        .snapshot_category("real_cat")
        .emit();
    CAT.object_destroyed("MyObject", Id::new(0x1000)).emit();
    CAT.object_created("Scoped", Id::new(0x1).with_scope("objs"))
        .emit();
    CAT.object_destroyed("Scoped", Id::global(0x1).with_scope("objs"))
        .emit();
    // Memory dumps.
    CAT.global_memory_dump("dump", Id::new(0xd))
        .arg("ram_mb", 1024)
        .emit();
    CAT.process_memory_dump("dump", Id::new(0xd))
        .arg("heap_mb", 12)
        .emit();
    // A mark.
    CAT.mark("firstLayout").arg("url", "/").emit();
    // Clock sync, receiver and issuer.
    ringtrace::events::clock_sync("guid1");
    let issue = ringtrace::trace_clock_ns();
    ringtrace::events::clock_sync_issued("guid2", issue);
    // A context around an instant.
    {
        let _c = CAT.context("Ctx", Id::new(0x1234));
        ringtrace::trace_instant!("phases", "in_ctx");
    }
    // Linked ids.
    CAT.link_ids("link", Id::new(0x1000), Id::new(0x2000));
    // Process metadata at run time.
    ringtrace::events::set_process_name("phases-renamed");
    ringtrace::events::set_process_labels(&["gamma", "delta"]);
    ringtrace::events::set_process_sort_index(5);
    // A global sample.
    ringtrace::events::global_sample("cycles:HG", 2, Some(0), Stack::Frames(&frames));
    // A log message.
    ringtrace::trace_log!(LogLevel::Warn, "disk {} is {}% full", "sda", 93);
    // Escaping and non-finite numbers.
    CAT.instant("quote\"back\\slash\nnl\u{1}é😀")
        .arg("nan", f64::NAN)
        .arg("inf", f64::INFINITY)
        .emit();
    let t_end = ringtrace::trace_clock_ns();
    let stats = guard.stop().unwrap();
    json!({
        "pid": std::process::id(), "tid": tid(), "mid_tid": mid, "dst_tid": dst, "ender_tid": ender,
        "start_ns": t_start, "end_ns": t_end, "explicit_start_ns": explicit_start,
        "issue_ns": issue, "events_lost": stats.events_lost,
    })
}

/// The same multi-thread workload for both formats: nested scopes (macro
/// and typed), instants of every scope, counters, flows across threads,
/// async ranges that start on one thread and end on another.
pub fn cross_format(trace: &str) -> Value {
    let guard = start(trace);
    let threads = 3;
    let barrier = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let barrier = barrier.clone();
            thread::Builder::new()
                .name(format!("xf-{t}"))
                .spawn(move || {
                    barrier.wait();
                    for i in 0..20u64 {
                        ringtrace::trace_scope!("xf", "outer", i = i);
                        let flow = CAT.flow("hop", (t as u64) << 32 | i);
                        {
                            let _g = CAT.scope(&format!("inner {t}")).arg("i", i).begin();
                            flow.start();
                            CAT.instant("tick").arg("i", i).emit();
                            spin(Duration::from_micros(5));
                        }
                        if i % 5 == 0 {
                            CAT.instant("proc_wide")
                                .scope(InstantScope::Process)
                                .arg("t", t as u64)
                                .emit();
                            CAT.instant("everywhere").scope(InstantScope::Global).emit();
                        }
                        CAT.counter(&format!("load {t}"))
                            .series("value", i as i64)
                            .emit();
                        CAT.counter("mix")
                            .series("a", i as f64 / 4.0)
                            .series("b", (t as u64 * 100 + i) as i64)
                            .emit();
                        let range = CAT
                            .async_begin("job", Id::local((t as u64) << 32 | i))
                            .arg("i", i)
                            .emit();
                        let flow_copy = flow;
                        let lane = CAT.track_scope(&LANE[t], "step").arg("i", i).begin();
                        thread::spawn(move || {
                            spin(Duration::from_micros(5));
                            flow_copy.end();
                            ringtrace::trace_scope!("xf", "handler");
                            spin(Duration::from_micros(5));
                            range.instant("handled").emit();
                            range.end();
                            drop(lane);
                        })
                        .join()
                        .unwrap();
                        spin(Duration::from_micros(5));
                    }
                })
                .unwrap()
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let stats = guard.stop().unwrap();
    json!({"pid": std::process::id(), "events_lost": stats.events_lost, "threads": threads, "iterations": 20})
}

/// Writes numbered instants on two threads until killed, flushing often.
/// Prints "ready" once the first events are in the file.
pub fn json_endless(trace: &str) -> Value {
    let _guard = ringtrace::builder()
        .output(trace)
        .flush_interval(Duration::from_millis(2))
        .buffer_bytes_per_thread(8 << 20)
        .start()
        .unwrap();
    let worker = thread::Builder::new()
        .name("endless-worker".into())
        .spawn(|| {
            for seq in 0u64.. {
                ringtrace::trace_scope!("kill", "work", seq = seq);
                CAT.instant("numbered")
                    .arg("seq", seq)
                    .arg("who", "worker")
                    .emit();
                if seq % 64 == 0 {
                    thread::sleep(Duration::from_millis(1));
                }
            }
        })
        .unwrap();
    let _ = worker;
    for seq in 0u64.. {
        CAT.instant("numbered")
            .arg("seq", seq)
            .arg("who", "main")
            .emit();
        if seq % 64 == 0 {
            thread::sleep(Duration::from_millis(1));
        }
    }
    unreachable!()
}
