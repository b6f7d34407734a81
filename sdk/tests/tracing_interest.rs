//! What `tracing` caches per call site (the subscriber's `Interest`) across
//! category switches and session starts made on threads that are not the
//! recording one, and with other layers that call ringtrace while `tracing`
//! asks them. A binary of its own: `tracing` asks only the calling thread's
//! dispatcher when one `Dispatch` exists in the process, which is the case
//! these tests need.
//!
//! Each test runs its body on a thread and fails if it has not finished in
//! time, so a deadlock fails the test instead of hanging the suite.

mod common;

use common::slices::serial;
use common::{json_events, scratch};
use std::sync::mpsc;
use std::time::Duration;
use tracing::dispatcher::Dispatch;
use tracing::subscriber::Interest;
use tracing::{Metadata, Subscriber};
use tracing_subscriber::layer::{Layer, SubscriberExt};

/// Runs `body` on a thread; panics if it has not returned within a minute.
fn within_a_minute(name: &str, body: impl FnOnce() + Send + 'static) {
    let (done, finished) = mpsc::channel();
    let runner = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            body();
            let _ = done.send(());
        })
        .unwrap();
    match finished.recv_timeout(Duration::from_secs(60)) {
        Ok(()) => runner.join().unwrap(),
        // The body panicked: its panic is the failure.
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            std::panic::resume_unwind(runner.join().unwrap_err())
        }
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("{name}: still running after a minute (deadlock)")
        }
    }
}

fn tick(i: u64) {
    tracing::info!(target: "app", i, "tick");
}

/// The subscriber is the default of one worker thread only; the main
/// thread, which has no default, changes the category filter (as a control
/// thread would) while the worker's call site is cached. The change must not
/// turn the worker's call site off.
#[test]
fn category_change_from_a_thread_without_the_subscriber() {
    let _s = serial();
    within_a_minute("scoped-switch", || {
        let trace = scratch("scoped").join("t.json");
        let (subscriber, guard) = ringtrace::builder().output(&trace).subscriber().unwrap();
        let dispatch = Dispatch::new(subscriber);
        let (ran_one, first_done) = mpsc::channel::<()>();
        let (go_on, switched) = mpsc::channel::<()>();
        let worker = std::thread::spawn(move || {
            tracing::dispatcher::with_default(&dispatch, || {
                tick(1);
                ran_one.send(()).unwrap();
                switched.recv().unwrap();
                tick(2);
            })
        });
        first_done.recv().unwrap();
        ringtrace::enable_categories(["unrelated"]); // `app` stays on
        go_on.send(()).unwrap();
        worker.join().unwrap();
        guard.stop().unwrap();
        let ticks: Vec<_> = json_events(&trace)
            .into_iter()
            .filter(|e| e["cat"] == "app")
            .map(|e| e["args"]["i"].clone())
            .collect();
        assert_eq!(ticks, [1, 2], "both ticks recorded");
    });
}

/// A layer next to ringtrace that asks ringtrace something in
/// `register_callsite` (which `tracing` calls whenever it rebuilds its
/// interest cache).
struct AsksRingtrace;

impl<S: Subscriber> Layer<S> for AsksRingtrace {
    fn register_callsite(&self, _: &'static Metadata<'static>) -> Interest {
        let _ = ringtrace::is_recording();
        Interest::always()
    }
}

/// A session started while such a layer is the thread's default: starting
/// must not have `tracing` ask the layer while ringtrace holds its session
/// lock.
#[test]
fn session_start_with_a_layer_that_asks_ringtrace() {
    let _s = serial();
    within_a_minute("start-with-asking-layer", || {
        let (subscriber, guard) = ringtrace::builder()
            .writer(ringtrace::MemoryBuffer::new())
            .subscriber()
            .unwrap();
        let dispatch = Dispatch::new(subscriber.with(AsksRingtrace));
        tracing::dispatcher::with_default(&dispatch, || {
            tracing::info!(target: "app", "one");
            guard.stop().unwrap();
            let second = ringtrace::builder()
                .writer(ringtrace::MemoryBuffer::new())
                .start()
                .unwrap();
            assert!(ringtrace::is_recording());
            tracing::info!(target: "app", "two");
            drop(second);
        });
    });
}
