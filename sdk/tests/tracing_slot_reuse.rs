//! The subscriber's span table gives every slot back: spans made and dropped
//! on many threads, some closed on another thread than their own, round after
//! round, and the table does not grow.
//!
//! In a process of its own: the span table is one per process, so slots a
//! test before this one left (thousands of spans alive at once) would be what
//! a new span takes, whatever this test's own rounds did.

mod common;

use common::scratch;
use common::slices::*;
use tracing::dispatcher::{self, Dispatch};
use tracing::info_span;

#[test]
fn subscriber_frees_every_span() {
    // Spans made and dropped on many threads, some closed on another thread
    // than their own: every slot comes back (the table does not grow).
    let _s = serial();
    let trace = scratch("sub-free").join("free.pftrace");
    let (subscriber, guard) = ringtrace::builder().output(&trace).subscriber().unwrap();
    let dispatch = Dispatch::new(subscriber);
    let round = || {
        let mut handles = Vec::new();
        for t in 0..8 {
            let d = dispatch.clone();
            handles.push(std::thread::spawn(move || {
                dispatcher::with_default(&d, || {
                    let mut spans: Vec<_> = (0..500)
                        .map(|i| info_span!(target: "app", "s", t, i))
                        .collect();
                    for s in &spans[..250] {
                        s.in_scope(|| {});
                    }
                    spans.truncate(250); // half dropped here
                    spans // half on the joining thread
                })
            }));
        }
        let moved: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        dispatcher::with_default(&dispatch, || drop(moved));
    };
    // A new span takes a free slot; its id's low half is the slot index + 1.
    let probe = || {
        dispatcher::with_default(&dispatch, || {
            info_span!(target: "app", "probe").id().unwrap().into_u64() as u32
        })
    };
    round();
    let before = probe();
    for _ in 0..5 {
        round();
    }
    let after = probe();
    assert!(
        after as usize <= 8 * 500 + 9 * 128,
        "slots are reused: index {after} after six rounds of 4000 spans (first probe {before})"
    );
    guard.stop().unwrap();
    let (slices, _) = decode(&trace);
    assert_eq!(slices.iter().filter(|s| s.name == "s").count(), 6 * 8 * 250);
}
