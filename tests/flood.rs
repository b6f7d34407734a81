//! A flood into fresh rings while the budget has room: every event is
//! recorded. Rings start at 1 KiB and grow; the flusher may be busy (or,
//! in a debug build, slow): a ring that outruns it must still grow to its
//! cap rather than drop. Counts only, never times.

use std::sync::{Arc, Barrier, Mutex};

/// One session at a time in this process.
static ONE: Mutex<()> = Mutex::new(());

/// `threads` new threads record `scopes` scopes each, all at once, into a
/// session built by `builder`; returns its stats.
fn flood(builder: ringtrace::Builder, threads: usize, scopes: u64) -> ringtrace::Stats {
    let guard = builder
        .writer(ringtrace::MemoryBuffer::new())
        .start()
        .expect("start");
    let barrier = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                for i in 0..scopes {
                    ringtrace::trace_scope!("flood", "scope");
                    std::hint::black_box(i);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    guard.stop().expect("stop")
}

/// The flood on two threads: 256 MiB of budget, 64 MiB per
/// thread, 1M scopes each (16 MiB of records per thread): nothing lost.
#[test]
fn two_threads_flooding_growing_rings_lose_nothing_while_the_budget_has_room() {
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let stats = flood(
        ringtrace::builder()
            .buffer_bytes(256 << 20)
            .buffer_bytes_per_thread(64 << 20),
        2,
        1_000_000,
    );
    assert_eq!(stats.events_lost, 0, "{stats:?}");
    assert_eq!(stats.events_written, 2 * 2 * 1_000_000, "{stats:?}");
}

/// Only the per-thread size asked (64 MiB): the budget follows it (the
/// default 32 MiB held about half of this flood), and nothing is lost.
#[test]
fn the_budget_follows_a_per_thread_size_above_it() {
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let stats = flood(
        ringtrace::builder().buffer_bytes_per_thread(64 << 20),
        1,
        1_000_000,
    );
    assert_eq!(stats.events_lost, 0, "{stats:?}");
    assert_eq!(stats.events_written, 2 * 1_000_000, "{stats:?}");
    assert!(stats.buffer_bytes_peak <= 128 << 20, "{stats:?}");
}

/// Both sizes asked, the per-thread one above the budget: no ring could
/// reach it, and `start` says so instead of cutting it silently.
#[test]
fn a_per_thread_size_above_an_explicit_budget_is_an_error() {
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let err = ringtrace::builder()
        .writer(ringtrace::MemoryBuffer::new())
        .buffer_bytes(16 << 20)
        .buffer_bytes_per_thread(64 << 20)
        .start()
        .err()
        .expect("a per-thread size above the budget");
    match err {
        ringtrace::Error::InvalidConfig(msg) => {
            assert!(msg.contains("buffer_bytes_per_thread"), "{msg}");
            assert!(msg.contains("buffer_bytes 16777216"), "{msg}");
        }
        other => panic!("{other:?}"),
    }
    // Equal sizes are fine.
    let guard = ringtrace::builder()
        .writer(ringtrace::MemoryBuffer::new())
        .buffer_bytes(64 << 20)
        .buffer_bytes_per_thread(64 << 20)
        .start()
        .expect("a ring as large as the budget");
    guard.stop().unwrap();
}
