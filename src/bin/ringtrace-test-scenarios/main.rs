//! Child programs for the integration tests: each scenario records a known
//! workload and writes, beside the trace, what it recorded (the expectation the
//! tests compare the decoded trace with). Usage:
//! `ringtrace-test-scenarios SCENARIO TRACE_PATH EXPECT_PATH`.

use serde_json::{json, Value};

mod accounting;
mod cpu;
mod env;
mod faults;
mod memory;
mod otlp;
mod phases;
mod random;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

/// Counts live heap bytes, so the churn scenario can show memory returns to
/// its baseline.
struct CountingAlloc;
pub(crate) static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts sizes.
unsafe impl std::alloc::GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        LIVE_BYTES.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same layout contract as the caller's.
        unsafe { std::alloc::System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        LIVE_BYTES.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: `ptr` came from `alloc` with this layout.
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

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
        "worker_panic" => worker_panic(&trace),
        "abort" => abort(&trace),
        "size" => size(&trace, &args[4]),
        "signal_wait" => signal_wait(&trace),
        "endless" => endless(&trace),
        "archive_loop" => archive_loop(&trace),
        "load" => load(&trace, &args[4]),
        "churn" => churn(&trace),
        "bad_input" => bad_input(&trace),
        "io_fault" => io_fault(),
        "size_limit" => size_limit(&trace),
        "attribute" => attribute(&trace),
        "random_events" => random::events(&trace, args[4].parse().unwrap()),
        "phases" => phases::phases(&trace),
        "cross_format" => phases::cross_format(&trace),
        "json_endless" => phases::json_endless(&trace),
        "threads_alive" => memory::threads_alive(&trace),
        "teardown" => memory::teardown(&trace),
        "accounting" => accounting::accounting(&trace),
        "flight_recorder_process" => memory::flight_recorder_process(&trace),
        "cpu_hot" => cpu::hot(&trace, &args[4]),
        "cpu_deflate" => cpu::deflate(&trace, &args[4]),
        "cpu_replaced" => cpu::replaced(&trace, &args[4]),
        "cpu_over_max_rate" => cpu::over_max_rate(&trace),
        "cpu_fd_limit" => cpu::fd_limit(&trace),
        "cpu_refused" => cpu::refused(&trace),
        "cpu_threads" => cpu::threads(&trace),
        "cpu_from_env" => cpu::from_env(),
        "cpu_layer" => cpu::layer(&trace),
        "cpu_mlock" => cpu::mlock(&trace),
        "cpu_flight" => cpu::flight(&trace, &args[4]),
        "cpu_capture" => cpu::capture(&trace, &args[4]),
        "faults" => faults::faults(&trace, &args[4]),
        "env_check" => env::check(),
        "env_check_tracing" => env::check_tracing(),
        "env_layer" => env::layer(),
        "cpu_bad_elf" => cpu::bad_elf(&trace),
        "cpu_json_parse" => cpu::json_parse(&trace),
        "cpu_inline" => cpu::inline(&trace),
        "otlp_server" => otlp::server(&trace, &args[4]),
        "otlp_client" => otlp::client(&trace, &args[4]),
        "otlp_exit" => otlp::exit(&trace, &args[4]),
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
                        // 9 to 48 bytes (two to six words): strings of either fast writer.
                        let label = format!("item\t{i}\u{1}é{}", "x".repeat(i as usize % 40));
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

/// Records until a signal ends the process; the signal handler finishes the trace.
fn signal_wait(trace: &str) -> Value {
    let _guard = ringtrace::builder()
        .output(trace)
        .finish_on_signals(true)
        .start()
        .unwrap();
    for i in 0..100 {
        ringtrace::trace_instant!("before_signal", i = i);
    }
    println!("ready");
    use std::io::Write;
    std::io::stdout().flush().unwrap();
    for i in 0u64.. {
        ringtrace::trace_scope!("waiting", i = i);
        thread::sleep(Duration::from_micros(100));
    }
    unreachable!()
}

/// Records forever with frequent flushes, for a SIGKILL mid-writing.
fn endless(trace: &str) -> Value {
    let _guard = ringtrace::builder()
        .output(trace)
        .flush_interval(Duration::from_millis(5))
        .start()
        .unwrap();
    let mut announced = false;
    let begun = Instant::now();
    for i in 0u64.. {
        ringtrace::trace_scope!("endless", i = i, label = "some text to make lines longer");
        if !announced && begun.elapsed() > Duration::from_millis(100) {
            println!("ready");
            use std::io::Write;
            std::io::stdout().flush().unwrap();
            announced = true;
        }
        if i % 64 == 0 {
            thread::sleep(Duration::from_micros(50));
        }
    }
    unreachable!()
}

/// Writes the same archive (2 MiB of JSON trace) at `path` over and over,
/// TAR or ZIP by extension; says "ready" once the first one is in place. The
/// parent kills it mid-write.
fn archive_loop(path: &str) -> Value {
    let mut events = String::from("[\n");
    for i in 0..20_000u64 {
        if i > 0 {
            events.push_str(",\n");
        }
        events.push_str(&format!(
            "{{\"name\":\"e\",\"ph\":\"i\",\"s\":\"t\",\"ts\":{i},\"pid\":1,\"tid\":1,\"args\":{{\"n\":{i}}}}}"
        ));
    }
    events.push_str("\n]\n");
    let mut archive = ringtrace::archive::Archive::new();
    archive.add_bytes("big.json", events.into_bytes()).foreign();
    archive.zip_method(ringtrace::archive::ZipMethod::Stored);
    for round in 0u64.. {
        if path.ends_with(".zip") {
            archive.write_zip(path).unwrap();
        } else {
            archive.write_tar(path).unwrap();
        }
        if round == 0 {
            println!("ready");
            use std::io::Write;
            std::io::stdout().flush().unwrap();
        }
    }
    unreachable!()
}

/// 8 threads recording instants at full speed for a while; reports how many
/// each recorded.
fn load(trace: &str, mode: &str) -> Value {
    let guard = ringtrace::builder()
        .output(trace)
        .overwrite(mode == "overwrite")
        .buffer_bytes_per_thread(256 * 1024)
        .start()
        .unwrap();
    let millis: u64 = std::env::var("RINGTRACE_LOAD_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    // The run's time starts once every thread recorded its first event: on
    // a loaded machine a thread may otherwise not run before the stop.
    let started = Arc::new(Barrier::new(9));
    let handles: Vec<_> = (0..8)
        .map(|t| {
            let (stop, started) = (stop.clone(), started.clone());
            thread::spawn(move || {
                ringtrace::trace_instant!("load", t = t, n = 0u64);
                started.wait();
                let mut n = 1u64;
                while !stop.load(Ordering::Relaxed) {
                    ringtrace::trace_instant!("load", t = t, n = n);
                    n += 1;
                }
                json!({"tid": tid(), "recorded": n})
            })
        })
        .collect();
    started.wait();
    thread::sleep(Duration::from_millis(millis));
    stop.store(true, Ordering::Relaxed);
    let threads: Vec<Value> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let stats = guard.stop().unwrap();
    json!({"threads": threads, "events_written": stats.events_written, "events_lost": stats.events_lost})
}

/// 10,000 short-lived threads, each recording a few events.
fn churn(trace: &str) -> Value {
    let guard = ringtrace::builder()
        .output(trace)
        .buffer_bytes_per_thread(16 * 1024)
        .start()
        .unwrap();
    // Warm up: the first thread's lazy statics, flusher buffers.
    thread::spawn(|| ringtrace::trace_instant!("warmup"))
        .join()
        .unwrap();
    ringtrace::flush();
    let baseline = LIVE_BYTES.load(Ordering::Relaxed);
    let threads = 10_000;
    for batch in 0..threads / 100 {
        let hs: Vec<_> = (0..100)
            .map(|k| {
                thread::spawn(move || {
                    ringtrace::trace_scope!("churn", "short_life", thread = batch * 100 + k);
                    ringtrace::trace_instant!("churn", "hello");
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
    }
    ringtrace::flush();
    thread::sleep(Duration::from_millis(200)); // let the flusher retire the last rings
    ringtrace::flush();
    let after = LIVE_BYTES.load(Ordering::Relaxed);
    let stats = guard.stop().unwrap();
    json!({"threads": threads, "baseline_bytes": baseline, "after_bytes": after,
           "events_written": stats.events_written, "events_lost": stats.events_lost, "stats_threads": stats.threads})
}

/// Misuse and odd input: must never panic inside the SDK or corrupt the file.
fn bad_input(trace: &str) -> Value {
    // Before any session: nothing recorded, nothing breaks.
    ringtrace::trace_scope!("before_start");
    ringtrace::trace_instant!("before_start_instant");
    let guard = ringtrace::builder().output(trace).start().unwrap();
    let again = ringtrace::builder()
        .output(format!("{trace}.second.pftrace"))
        .start();
    let start_twice = matches!(again, Err(ringtrace::Error::AlreadyStarted));
    ringtrace::trace_scope!("", "");
    ringtrace::trace_instant!(
        "ctl\u{0}\u{7}\n\"quoted\"",
        text = "tab\there \u{1b}[31m \u{fffd} 😀"
    );
    let huge_name = "n".repeat(1 << 20);
    ringtrace::trace_instant!("huge_arg", v = huge_name.as_str());
    ringtrace::trace_counter!("nan", f64::NAN);
    ringtrace::trace_counter!("inf", f64::INFINITY);
    ringtrace::trace_counter!("neg_inf", f64::NEG_INFINITY);
    ringtrace::trace_instant!("floats", nan = f64::NAN, inf = f64::INFINITY);
    fn nest(depth: u32) {
        ringtrace::trace_scope!("deep", depth = depth);
        if depth + 1 < 10_000 {
            nest(depth + 1);
        }
    }
    thread::Builder::new()
        .stack_size(64 << 20)
        .spawn(|| nest(0))
        .unwrap()
        .join()
        .unwrap();
    // Scopes ended out of order.
    {
        let a = ringtrace::__scope_guard!("order", "a");
        let b = ringtrace::__scope_guard!("order", "b");
        drop(a);
        drop(b);
    }
    let stats = guard.stop().unwrap();
    ringtrace::trace_instant!("after_stop");
    // Start again after stop.
    let second = format!("{trace}.again.pftrace");
    let g2 = ringtrace::builder().output(&second).start().unwrap();
    ringtrace::trace_instant!("second_session");
    drop(g2);
    json!({"start_twice_error": start_twice, "unmatched_ends": stats.unmatched_ends,
           "events_lost": stats.events_lost, "second": second})
}

/// Writing fails mid-trace (/dev/full): reported once, the program goes on.
fn io_fault() -> Value {
    let guard = ringtrace::builder()
        .output("/dev/full")
        .format(ringtrace::Format::Perfetto)
        .flush_interval(Duration::from_millis(5))
        .start()
        .unwrap();
    for i in 0..20_000u64 {
        ringtrace::trace_scope!("doomed", i = i);
        if i % 1000 == 0 {
            thread::sleep(Duration::from_millis(2));
        }
    }
    let err = guard.stop().err().map(|e| e.to_string());
    json!({"stop_error": err, "program_continued": true})
}

/// Bytes the `size_limit` scenario may write into a file (RLIMIT_FSIZE).
const FILE_SIZE_LIMIT: u64 = 300_000;

/// A write cut part-way by the file size limit (as by a full disk): the
/// file must end on an event boundary, and the program goes on.
fn size_limit(trace: &str) -> Value {
    let limit = libc::rlimit {
        rlim_cur: FILE_SIZE_LIMIT,
        rlim_max: FILE_SIZE_LIMIT,
    };
    // SAFETY: ignoring SIGXFSZ (so an over-limit write fails with EFBIG
    // instead of ending the process) and lowering this process's own
    // limit; both take plain values.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
        assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &limit), 0);
    }
    let guard = ringtrace::builder()
        .output(trace)
        .flush_interval(Duration::from_millis(5))
        .start()
        .unwrap();
    for i in 0..40_000u64 {
        ringtrace::trace_scope!("cut", label = "some text to make events longer", i = i);
        if i % 200 == 0 {
            // Many writes, each small (~30 KB), however slowly the flusher is
            // scheduled: a starved flusher's first write could otherwise be
            // over the limit on its own, and nothing but whole writes would
            // be cut.
            guard.flush();
        }
    }
    let err = guard.stop().err().map(|e| e.to_string());
    json!({"stop_error": err, "limit": FILE_SIZE_LIMIT})
}

#[ringtrace::traced]
fn traced_free(x: u32) -> u32 {
    x + 1
}

#[ringtrace::traced(name = "renamed", category = "custom", args(x, label))]
fn traced_with_args(x: u64, label: &str) -> Result<u64, String> {
    if x > 100 {
        return Err(format!("{label} too big"));
    }
    Ok(x * 2)
}

struct Worker {
    id: u32,
}

impl Worker {
    #[ringtrace::traced]
    fn method(&self) -> u32 {
        self.id
    }

    #[ringtrace::traced(category = "async")]
    async fn async_method(&self, hops: u32) -> u32 {
        for _ in 0..hops {
            tokio::task::yield_now().await;
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        self.id
    }
}

#[ringtrace::traced]
async fn traced_async(n: u32) -> Result<u32, std::io::Error> {
    tokio::time::sleep(Duration::from_millis(2)).await;
    Ok(n)
}

/// Pending on its first poll, ready on the second (wakes no one: the caller
/// polls again).
struct PendingOnce(bool);

impl std::future::Future for PendingOnce {
    type Output = ();
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        if std::mem::replace(&mut self.0, true) {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    }
}

/// An async call whose two polls run on two threads, for certain (a
/// runtime's work stealing may or may not move a task).
#[ringtrace::traced(category = "async")]
async fn polled_on_two_threads() -> u32 {
    PendingOnce(false).await;
    5
}

/// Polls `fut` once with a waker that does nothing.
fn poll_once<F: std::future::Future + Unpin>(fut: &mut F) -> std::task::Poll<F::Output> {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    std::pin::Pin::new(fut).poll(&mut cx)
}

/// `#[traced]` on free fns, methods, a fn with args, and async fns polled on a
/// multi-threaded runtime and handed from one thread to another.
fn attribute(trace: &str) -> Value {
    let guard = ringtrace::builder().output(trace).start().unwrap();
    let a = traced_free(1);
    let b = traced_with_args(21, "x").unwrap();
    let c = traced_with_args(1000, "y").is_err();
    let w = Worker { id: 7 };
    let m = w.method();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    let tasks = 8u32;
    let (sum, ok) = rt.block_on(async {
        let mut hs = Vec::new();
        for i in 0..tasks {
            hs.push(tokio::spawn(async move {
                Worker { id: i }.async_method(5).await
            }));
        }
        let mut sum = 0;
        for h in hs {
            sum += h.await.unwrap();
        }
        (sum, traced_async(3).await.unwrap())
    });
    drop(rt);
    let mut handed = Box::pin(polled_on_two_threads());
    assert!(
        poll_once(&mut handed).is_pending(),
        "first poll, on this thread"
    );
    let five = thread::spawn(move || match poll_once(&mut handed) {
        std::task::Poll::Ready(v) => v,
        std::task::Poll::Pending => unreachable!("PendingOnce is ready at its second poll"),
    })
    .join()
    .unwrap();
    let stats = guard.stop().unwrap();
    json!({"results": [a, b, c as u64, m, sum, ok, five], "tasks": tasks, "events_lost": stats.events_lost})
}

/// A worker thread panics inside nested scopes; the program goes on.
fn worker_panic(trace: &str) -> Value {
    let guard = ringtrace::builder().output(trace).start().unwrap();
    let r = thread::Builder::new()
        .name("doomed".into())
        .spawn(|| {
            ringtrace::trace_scope!("outer_before_panic");
            ringtrace::trace_scope!("inner_before_panic");
            ringtrace::trace_instant!("about_to_panic");
            panic!("worker panics");
        })
        .unwrap()
        .join();
    ringtrace::trace_instant!("main_after_worker_panic");
    guard.stop().unwrap();
    json!({"worker_panicked": r.is_err()})
}

/// Records with frequent flushes, then aborts.
fn abort(trace: &str) -> Value {
    let _guard = ringtrace::builder()
        .output(trace)
        .flush_interval(Duration::from_millis(2))
        .start()
        .unwrap();
    for i in 0..500u64 {
        ringtrace::trace_scope!("before_abort", i = i);
    }
    thread::sleep(Duration::from_millis(100)); // at least one flush cycle
    for i in 0..1000u64 {
        ringtrace::trace_scope!("maybe_lost", i = i);
    }
    std::process::abort();
}

/// Nested scopes with static names, for the trace size per scope.
fn size(trace: &str, mode: &str) -> Value {
    let guard = ringtrace::builder()
        .output(trace)
        .buffer_bytes_per_thread(16 << 20)
        .compact_packets(mode != "default")
        .compressed_packets(mode == "compressed")
        .start()
        .unwrap();
    let pairs = 3_000u64;
    for _ in 0..pairs {
        ringtrace::trace_scope!("bench", "outer");
        ringtrace::trace_scope!("bench", "inner");
    }
    let stats = guard.stop().unwrap();
    json!({"scopes": pairs * 2, "bytes": stats.bytes_written, "events_lost": stats.events_lost})
}
