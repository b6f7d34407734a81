//! A crowd: thousands of threads start at once, record one scope each and
//! wait. Every event is in the file (decoded with the official schema), and
//! the flusher's passes over idle rings do not grow with their number.
//! Counts only, never times.

mod common;

use std::sync::{mpsc, Arc, Barrier, Mutex};
use std::time::Duration;

/// One session at a time in this process.
static ONE: Mutex<()> = Mutex::new(());

/// Quiet rings the flusher looks at per pass, in turn (its
/// `QUIET_LOOKS_PER_PASS`), with room for an active ring or two.
const LOOKS_PER_IDLE_PASS: u64 = 40;

/// `threads` threads released at once record one scope each, then wait
/// (idle rings) for `idle`; the session stops before they exit (so their
/// exits cost the flusher nothing here). Returns the stats.
fn crowd(trace: &std::path::Path, threads: usize, idle: Duration) -> ringtrace::Stats {
    let guard = ringtrace::builder()
        .output(trace)
        .buffer_bytes(64 << 20)
        // Rings are drained, and so made quiet, within a few passes.
        .flush_interval(Duration::from_millis(10))
        .start()
        .expect("start");
    let go = Arc::new(Barrier::new(threads + 1));
    let recorded = Arc::new(Barrier::new(threads + 1));
    let (release, wait) = mpsc::channel::<()>();
    let wait = Arc::new(Mutex::new(wait));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (go, recorded, wait) = (go.clone(), recorded.clone(), wait.clone());
            std::thread::Builder::new()
                .stack_size(256 << 10)
                .spawn(move || {
                    go.wait();
                    {
                        ringtrace::trace_scope!("crowd", "once");
                    }
                    recorded.wait();
                    let _ = wait.lock().unwrap().recv();
                })
                .expect("spawn")
        })
        .collect();
    go.wait();
    recorded.wait();
    std::thread::sleep(idle);
    let stats = guard.stop().expect("stop");
    for _ in 0..threads {
        release.send(()).unwrap();
    }
    for h in handles {
        h.join().unwrap();
    }
    stats
}

/// 2,000 threads each record one scope: each one's scope is in the file, on
/// its own thread's track, nothing lost; and over a second with every ring
/// idle, a pass looks at a bounded number of rings, not at all 2,000 (the
/// flusher passed over every ring each pass before, ~2,000 per pass).
#[test]
fn thousands_of_threads_recording_once_are_all_in_the_file_and_idle_rings_cost_no_pass() {
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let threads = 2_000;
    let trace = common::scratch("crowd").join("crowd.pftrace");
    let stats = crowd(&trace, threads, Duration::from_secs(1));
    assert_eq!(stats.events_lost, 0, "{stats:?}");
    assert_eq!(stats.events_written, 2 * threads as u64, "{stats:?}");

    let model = common::perfetto_model(&trace);
    let slices = common::slices_named(&model, "once");
    assert_eq!(slices.len(), threads, "every thread's scope decoded");
    let tracks: std::collections::HashSet<String> =
        slices.iter().map(|s| s["track_uuid"].to_string()).collect();
    assert_eq!(tracks.len(), threads, "one scope on each thread's track");

    // Each ring is looked at while it has records (its first passes, until
    // a full pass drains it: a few at a 10 ms interval) and by the stop's
    // pass over every ring; besides, an idle pass looks at a few quiet
    // rings in turn.
    let n = threads as u64;
    let passes = stats.flusher_passes;
    assert!(
        passes >= 20,
        "the flusher ran through the idle second: {stats:?}"
    );
    let bound = 8 * n + LOOKS_PER_IDLE_PASS * passes;
    println!(
        "{} rings looked at in {passes} passes ({threads} threads)",
        stats.rings_visited
    );
    assert!(
        stats.rings_visited <= bound,
        "{} rings looked at in {passes} passes (bound {bound}; every ring each pass: {})",
        stats.rings_visited,
        n * passes
    );
}
