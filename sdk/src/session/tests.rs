//! Unit tests of starting and stopping a session: the flusher's start, the
//! budget and the pool given back.

#[cfg(feature = "enable")]
use crate::record::registry::REGISTRY;

/// The next flusher spawn fails (tests of `start`'s error path).
pub(super) static FAIL_FLUSHER_SPAWN: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// One session at a time across the unit tests that start one.
#[cfg(feature = "enable")]
static SESSIONS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// An output the next session started adds to its own (tests of the seam).
pub(crate) static TEST_OUTPUT: std::sync::Mutex<Option<Box<dyn crate::output::Output>>> =
    std::sync::Mutex::new(None);

/// Holds the unit tests' one session at a time (for tests elsewhere in the
/// crate that start one).
#[cfg(feature = "enable")]
pub(crate) fn serial() -> std::sync::MutexGuard<'static, ()> {
    SESSIONS.lock().unwrap_or_else(|e| e.into_inner())
}

/// A flight recorder whose flusher cannot be spawned gives its store
/// (half the budget) back, and the pool its stock: the budget ends where
/// it was (before: half the budget stayed taken for good).
#[cfg(feature = "enable")]
#[test]
fn a_start_whose_flusher_fails_gives_the_budget_back() {
    let _one = SESSIONS.lock().unwrap_or_else(|e| e.into_inner());
    let before = REGISTRY.budget.used();
    FAIL_FLUSHER_SPAWN.store(true, std::sync::atomic::Ordering::Relaxed);
    let started = crate::builder()
        .writer(crate::MemoryBuffer::new())
        .overwrite(true)
        .buffer_bytes(8 << 20)
        .start();
    assert!(matches!(started, Err(crate::Error::Flusher(_))));
    assert_eq!(REGISTRY.budget.used(), before, "every byte given back");
}

/// `start` returns once the flusher has run to its wait for work: the
/// trace's first packets (which the flusher writes before it waits) are
/// in the writer by then. Before, `start` returned with the flusher
/// thread only made: queued on the starting thread's CPU, it could wait
/// there a scheduler tick, then take that CPU from the first events
/// (a fresh session's first lap, well above the clock floor: BENCHMARKS.md,
/// "History", "First laps").
#[cfg(feature = "enable")]
#[test]
fn start_returns_once_the_flusher_waits_for_work() {
    let _one = SESSIONS.lock().unwrap_or_else(|e| e.into_inner());
    for _ in 0..20 {
        let buf = crate::MemoryBuffer::new();
        let guard = crate::builder()
            .writer(buf.clone())
            .flush_interval(std::time::Duration::from_secs(3600))
            .start()
            .unwrap();
        let header = buf.contents();
        assert_eq!(
            header.first(),
            Some(&0x0a),
            "a packet, written by the flusher"
        );
        guard.stop().unwrap();
    }
}

/// `start` waits for the flusher a bounded time: a writer that blocks
/// (here until the test opens it) holds the flusher in its first write,
/// before it ever waits for work, and `start` returns all the same.
#[cfg(feature = "enable")]
#[test]
fn start_does_not_wait_for_a_writer_that_blocks() {
    use std::sync::{mpsc, Arc, Condvar, Mutex};
    struct Gate(Arc<(Mutex<bool>, Condvar)>);
    impl std::io::Write for Gate {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let (open, cv) = &*self.0;
            let mut open = open.lock().unwrap();
            while !*open {
                open = cv.wait(open).unwrap();
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let _one = SESSIONS.lock().unwrap_or_else(|e| e.into_inner());
    let gate = Arc::new((Mutex::new(false), Condvar::new()));
    let open = || {
        *gate.0.lock().unwrap() = true;
        gate.1.notify_all();
    };
    let (tx, rx) = mpsc::channel();
    let writer = Gate(gate.clone());
    std::thread::spawn(move || {
        let _ = tx.send(crate::builder().writer(writer).start());
    });
    let started = rx.recv_timeout(std::time::Duration::from_secs(10));
    open(); // lets the flusher (and a `start` still waiting) go on
    let guard = started
        .expect("start returned while the writer blocked")
        .unwrap();
    guard.stop().unwrap();
}

/// With system tracing only, nothing records until a tracing session
/// turns call sites on (maybe never): `start` stocks no pool. And a
/// session that recorded nothing restocks nothing, its stopping pass
/// included (before: every full pass, the stop's too, stocked again
/// what the pool missed, just before stop emptied it).
#[cfg(feature = "enable")]
#[test]
fn no_stock_without_a_file_and_none_restocked_at_stop() {
    let _one = SESSIONS.lock().unwrap_or_else(|e| e.into_inner());
    let budget = REGISTRY.budget;
    let pool = budget.pool();
    let before = budget.used();
    let guard = crate::builder().system_tracing(true).start().unwrap();
    assert_eq!(pool.pooled_bytes(), 0, "no stock with system tracing only");
    guard.stop().unwrap();
    assert_eq!(budget.used(), before);

    let guard = crate::builder()
        .writer(crate::MemoryBuffer::new())
        .flush_interval(std::time::Duration::from_secs(3600))
        .start()
        .unwrap();
    // A segment taken from the stock, not by a growth: a full pass of
    // the old flusher restocked it.
    let (base, words) = pool.take(512, 512).expect("the 4 KiB stock");
    let stocked = pool.stocked();
    std::thread::sleep(std::time::Duration::from_millis(20));
    guard.stop().unwrap();
    assert_eq!(pool.stocked(), stocked, "nothing stocked up to the stop");
    // SAFETY: taken from the pool above (mapped, ours), freed once.
    unsafe { crate::record::segment::free_mapped(base, words) };
    budget.give_back(crate::record::segment::segment_bytes(words));
    assert_eq!(budget.used(), before);
}

/// A session stocks the pool at start; a thread that records enough to
/// grow its ring takes its segments from there (and gives them back
/// after), and stop gives every byte back: the budget ends where it
/// was before the session.
#[cfg(feature = "enable")]
#[test]
fn a_session_stocks_the_pool_and_gives_the_budget_back_at_stop() {
    let _one = SESSIONS.lock().unwrap_or_else(|e| e.into_inner());
    let budget = REGISTRY.budget;
    let before = budget.used();
    let guard = crate::builder()
        .writer(crate::MemoryBuffer::new())
        .buffer_bytes(32 << 20)
        .buffer_bytes_per_thread(1 << 20)
        .start()
        .unwrap();
    let pool = budget.pool();
    assert_eq!(
        pool.pooled_bytes(),
        (4 + 16 + 64 + 256 + 1024) << 10,
        "one segment per growth size, to 1 MiB"
    );
    let taken = pool.taken();
    std::thread::spawn(|| {
        for i in 0..100_000u64 {
            crate::trace_instant!("pool", "tick", i = i);
        }
    })
    .join()
    .unwrap();
    assert!(pool.taken() >= taken + 4, "grew into pooled segments");
    let stats = guard.stop().unwrap();
    assert_eq!(stats.events_lost + stats.events_written, 100_000);
    assert_eq!(pool.pooled_bytes(), 0, "emptied at stop");
    assert_eq!(budget.used(), before, "every byte given back");
}

/// A session's `Stats` count the spans the span table had no room for
/// while it recorded: not those before it, and not those of another session.
#[cfg(all(feature = "enable", feature = "tracing"))]
#[test]
fn spans_not_stored_during_a_session_are_in_its_stats() {
    let _one = SESSIONS.lock().unwrap_or_else(|e| e.into_inner());
    crate::tracing::count_span_not_stored(); // before: not this session's
    let guard = crate::builder()
        .writer(crate::MemoryBuffer::new())
        .start()
        .unwrap();
    crate::tracing::count_span_not_stored();
    crate::tracing::count_span_not_stored();
    assert_eq!(guard.stop().unwrap().spans_not_stored, 2);
    let guard = crate::builder()
        .writer(crate::MemoryBuffer::new())
        .start()
        .unwrap();
    assert_eq!(guard.stop().unwrap().spans_not_stored, 0);
}
