//! No heap allocation per event after a thread's first event.
//!
//! A counting global allocator counts allocations made by the thread under
//! test only (a thread-local switch: the flusher thread allocates, and that
//! is allowed). The thread records one of every event kind once (its first
//! event creates its ring; each call site registers on first use), then
//! switches counting on and records 100,000 iterations of enabled scopes
//! with an int and a string argument, a plain scope, an instant with an
//! argument and two counters: the count must stay 0.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::hint::black_box;

struct CountingAlloc;

thread_local! {
    // Const-initialised, no destructor: reading them never allocates and
    // works during thread teardown.
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn note_allocation() {
    let _ = COUNTING.try_with(|on| {
        if on.get() {
            let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        }
    });
}

// SAFETY: every method forwards to the system allocator with the caller's
// arguments unchanged; the bookkeeping touches only thread-local cells.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note_allocation();
        // SAFETY: forwarded as is; the caller upholds `alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note_allocation();
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note_allocation();
        // SAFETY: as above; `ptr` came from this allocator, i.e. from System.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

/// Allocations made by this thread while `f` runs.
fn allocations_during(f: impl FnOnce()) -> u64 {
    let before = ALLOCATIONS.with(Cell::get);
    COUNTING.with(|c| c.set(true));
    f();
    COUNTING.with(|c| c.set(false));
    ALLOCATIONS.with(Cell::get) - before
}

/// One iteration of every event kind; the same call sites every time.
#[inline(never)]
fn events(i: u64, name: &str) {
    ringtrace::trace_scope!("alloc", "with_args", n = i, label = name);
    {
        ringtrace::trace_scope!("alloc", "plain");
        ringtrace::trace_instant!("alloc", "tick", n = i as i64, ok = true);
    }
    ringtrace::trace_counter!("alloc", "int_counter", i);
    ringtrace::trace_counter!("alloc", "float_counter", i as f64 * 0.5);
    black_box(i);
}

/// One recording session at a time.
static SESSION: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn no_heap_allocation_per_event_after_the_first() {
    let _one = SESSION.lock().unwrap_or_else(|e| e.into_inner());
    const N: u64 = 100_000;
    let out = ringtrace::MemoryBuffer::new();
    let guard = ringtrace::builder()
        .writer(out.clone())
        .buffer_bytes_per_thread(64 << 20) // holds every event: nothing dropped
        .buffer_bytes(256 << 20) // room for the ring to grow that far
        .enable_categories(["alloc"])
        .start()
        .expect("start a session");

    // The counter sees allocations: a control.
    assert!(allocations_during(|| drop(black_box(Box::new(7u64)))) >= 1);

    let label = String::from("a label longer than one ring word");
    events(0, &label); // the thread's first events: ring and call sites
    let during = allocations_during(|| {
        for i in 1..=N {
            events(i, &label);
        }
    });

    let stats = guard.stop().expect("stop");
    assert_eq!(
        during, 0,
        "the recording thread allocated {during} times in {N} iterations"
    );
    assert_eq!(stats.events_lost, 0, "{stats:?}");
    // 2 scopes (begin + end each), 1 instant, 2 counters per iteration.
    assert_eq!(stats.events_written, (N + 1) * 7, "{stats:?}");
    assert!(!out.contents().is_empty());
}

#[test]
fn disabled_events_do_not_allocate_either() {
    // Runs in its own thread: the session of the other test may be active.
    std::thread::spawn(|| {
        ringtrace::disable_categories(["off"]);
        let during = allocations_during(|| {
            for i in 0..10_000u64 {
                ringtrace::trace_scope!("off", "disabled", n = i, s = "x");
                ringtrace::trace_instant!("off", "disabled_instant", n = i);
                black_box(i);
            }
        });
        // Call sites register on first use (a lock and one push to the site
        // list, which may grow): a handful at most, never per event.
        assert!(
            during <= 4,
            "{during} allocations for 20,000 disabled events"
        );
    })
    .join()
    .unwrap();
}

/// Through `ringtrace::builder().subscriber()`: spans without fields live in the
/// subscriber's span table and events format into a reused buffer, so after
/// the first iteration neither allocates.
#[inline(never)]
fn tracing_events(i: u64) {
    let outer = tracing::info_span!(target: "alloc", "outer");
    let _o = outer.enter();
    tracing::info_span!(target: "alloc", "inner").in_scope(|| {
        tracing::info!(target: "alloc", n = i, ok = true, "tick {i}");
    });
    black_box(i);
}

#[test]
fn tracing_subscriber_spans_and_events_do_not_allocate() {
    // First use: ring, call sites, span table page, and the reused
    // formatting buffer grown to the longest message ("tick 50000").
    const N: u64 = 50_000;
    no_alloc_through(subscriber_dispatch, tracing_events, N..=N, N);
}

/// Spans whose fields are primitives (integers, bools, floats, strings) keep
/// their values in place in the span's state, so after the first iteration
/// neither the subscriber nor the layer (span state in its own table, not in
/// the registry's extensions) allocates per span.
#[inline(never)]
fn tracing_spans_with_fields(i: u64) {
    let outer = tracing::info_span!(target: "alloc", "request", id = i, ok = true, ratio = 0.5);
    let _o = outer.enter();
    tracing::info_span!(target: "alloc", "load", user = i as i64, table = "users").in_scope(|| {
        tracing::info!(target: "alloc", n = i, "loaded");
    });
    black_box(i);
}

/// Runs `workload` for each of `warmup`, then for 1..=n counting the
/// allocations of this thread: there must be none. Each iteration of a
/// workload writes 2 slices (begin + end each) and 1 instant.
fn no_alloc_through(
    dispatch_of: fn() -> (tracing::Dispatch, ringtrace::TraceGuard),
    workload: fn(u64),
    warmup: std::ops::RangeInclusive<u64>,
    n: u64,
) {
    let _one = SESSION.lock().unwrap_or_else(|e| e.into_inner());
    let (dispatch, guard) = dispatch_of();
    let during = tracing::dispatcher::with_default(&dispatch, || {
        for i in warmup.clone() {
            workload(i);
        }
        allocations_during(|| {
            for i in 1..=n {
                workload(i);
            }
        })
    });
    drop(dispatch);
    let stats = guard.stop().expect("stop");
    assert_eq!(
        during, 0,
        "the recording thread allocated {during} times in {n} iterations"
    );
    assert_eq!(stats.events_lost, 0, "{stats:?}");
    assert_eq!(
        stats.events_written,
        (warmup.count() as u64 + n) * 5,
        "{stats:?}"
    );
}

fn subscriber_dispatch() -> (tracing::Dispatch, ringtrace::TraceGuard) {
    let (subscriber, guard) = ringtrace::builder()
        .writer(ringtrace::MemoryBuffer::new())
        .buffer_bytes_per_thread(64 << 20)
        .buffer_bytes(256 << 20)
        .subscriber()
        .expect("start a session");
    (tracing::Dispatch::new(subscriber), guard)
}

fn layer_dispatch() -> (tracing::Dispatch, ringtrace::TraceGuard) {
    use tracing_subscriber::prelude::*;
    let (layer, guard) = ringtrace::builder()
        .writer(ringtrace::MemoryBuffer::new())
        .buffer_bytes_per_thread(64 << 20)
        .buffer_bytes(256 << 20)
        .layer()
        .expect("start a session");
    (
        tracing::Dispatch::new(tracing_subscriber::registry().with(layer)),
        guard,
    )
}

/// First use in the warm-up: ring, call sites, the span table, the
/// registry's slab, and each shard of the layer's span map (span ids cycle
/// through generations, so they land in every shard).
const FIELDS_WARMUP: std::ops::RangeInclusive<u64> = 0..=99;

#[test]
fn tracing_subscriber_spans_with_primitive_fields_do_not_allocate() {
    no_alloc_through(
        subscriber_dispatch,
        tracing_spans_with_fields,
        FIELDS_WARMUP,
        20_000,
    );
}

#[test]
fn tracing_layer_spans_with_primitive_fields_do_not_allocate() {
    no_alloc_through(
        layer_dispatch,
        tracing_spans_with_fields,
        FIELDS_WARMUP,
        20_000,
    );
}
