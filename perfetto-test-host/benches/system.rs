//! System tracing against file mode: the recording thread's cost per event
//! and the background threads' CPU per event (the flusher, and in system
//! mode the producer connection), one thread recording `N` scope pairs with
//! an argument. System mode records for a session of Perfetto's own service
//! (the test host) over the Unix socket and shared memory.
//!
//! `cargo bench -p perfetto-test-host --bench system` (medians of 5 runs).

// The workspace's bench helpers (`benches/common/`).
#[path = "../../benches/common/mod.rs"]
mod common;

use common::{clock_ns, median};
use perfetto_test_host::{Host, TraceConfig};
use ringtrace::events::Category;
use ringtrace_test_support::scratch;
use std::time::{Duration, Instant};

const N: u64 = 1_000_000;
const RUNS: usize = 5;

static BENCH: Category = Category::new("bench");

/// Records N scopes (a begin and an end each); returns the recording
/// thread's CPU ns per scope (CPU time: the machine may be shared) and the
/// other threads' CPU ns per scope.
fn record(finish: impl FnOnce()) -> (f64, f64) {
    // Warm up: the ring's pages are touched (page faults are not the cost
    // of an event), then everything is drained.
    for i in 0..N {
        ringtrace::trace_scope!("bench", "warm-up", i = i);
    }
    ringtrace::flush();
    let p0 = clock_ns(libc::CLOCK_PROCESS_CPUTIME_ID);
    let t0 = clock_ns(libc::CLOCK_THREAD_CPUTIME_ID);
    for i in 0..N {
        ringtrace::trace_scope!("bench", "work", i = i);
    }
    let recording = clock_ns(libc::CLOCK_THREAD_CPUTIME_ID) - t0;
    finish();
    // Everything but this thread: the flusher (and the producer connection).
    let background = (clock_ns(libc::CLOCK_PROCESS_CPUTIME_ID) - p0)
        .saturating_sub(clock_ns(libc::CLOCK_THREAD_CPUTIME_ID) - t0);
    (recording as f64 / N as f64, background as f64 / N as f64)
}

fn main() {
    let _ = BENCH.is_enabled();
    let dir = scratch("bench");
    let mut host = Host::start(&dir, None);
    std::env::set_var("PERFETTO_PRODUCER_SOCK_NAME", &host.producer_socket);
    let (mut file_rec, mut file_bg, mut sys_rec, mut sys_bg) = (vec![], vec![], vec![], vec![]);
    for run in 0..RUNS {
        // File mode.
        let path = dir.join("file.pftrace");
        let trace = ringtrace::builder()
            .output(&path)
            .buffer_bytes_per_thread(64 << 20)
            .start()
            .unwrap();
        let (r, b) = record(|| {
            trace.stop().unwrap();
        });
        file_rec.push(r);
        file_bg.push(b);
        // System mode: the same events for a session of Perfetto's service.
        let trace = ringtrace::builder()
            .system_tracing(true)
            .process_name("system-producer")
            .buffer_bytes_per_thread(64 << 20)
            .start()
            .unwrap();
        let cfg = TraceConfig {
            buffer_kb: 256 * 1024,
            shm_size_kb: 8192,
            page_size_kb: 32,
            ..TraceConfig::categories(&["bench"])
        };
        let name = format!("run{run}");
        host.start_session(&name, &cfg);
        let until = Instant::now() + Duration::from_secs(10);
        while !BENCH.is_enabled() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(BENCH.is_enabled(), "the session did not start");
        let out = dir.join("system.pftrace");
        let (r, b) = record(|| {
            host.stop_session(&name, &out);
            trace.stop().unwrap();
        });
        sys_rec.push(r);
        sys_bg.push(b);
    }
    let (fr, fb, sr, sb) = (
        median(file_rec),
        median(file_bg),
        median(sys_rec),
        median(sys_bg),
    );
    println!("{N} scope pairs on one thread, medians of {RUNS} runs");
    println!("mode     recording CPU ns/scope   background CPU ns/scope");
    println!("file     {fr:>22.1}   {fb:>23.1}");
    println!("system   {sr:>22.1}   {sb:>23.1}");
    println!(
        "system/file: recording {:.2}x, background {:.2}x",
        sr / fr,
        sb / fb
    );
}
