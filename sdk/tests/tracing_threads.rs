//! `tracing` end to end across threads: spans that hop threads or exit out of
//! stack order, `follows_from`, tasks of a multi-threaded tokio runtime, and
//! the layer's map of span ids past its fixed table; through the layer and
//! the registry-free subscriber, decoded with the official Perfetto schema and
//! parsed as JSON.
//!
//! A session is process-global, so the tests take a lock and run one at a
//! time; each has its own subscriber (`Dispatch`), set on every thread it uses.

mod common;

use common::scratch;
use common::slices::*;
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use tracing::dispatcher::{self, Dispatch};
use tracing::{info, info_span};
use tracing_subscriber::layer::SubscriberExt;

// ---------------------------------------------------------------------------
// Spans across threads and out of stack order

fn run_cross_thread(trace: &Path, via: Via) {
    let (dispatch, guard) = start(trace, via);
    // A span entered on one thread, then on another: async.
    let moved = on_thread("layer-a", &dispatch, || {
        let span = info_span!(target: "app", "moved", n = 1u64);
        span.in_scope(|| info!(target: "app", "on a"));
        span
    });
    on_thread("layer-b", &dispatch, move || {
        moved.in_scope(|| info!(target: "app", "on b"));
        moved.record("n", 2u64);
        drop(moved); // closes here
    });
    // Guards dropped out of order on one thread.
    on_thread("layer-c", &dispatch, || {
        let outer = info_span!(target: "app", "outer");
        let inner = info_span!(target: "app", "inner");
        let o = outer.enter();
        let i = inner.enter();
        std::thread::sleep(std::time::Duration::from_millis(1));
        drop(o); // outer exits while inner is still entered
        info!(target: "app", "after outer");
        std::thread::sleep(std::time::Duration::from_millis(1));
        drop(i);
        // A plain span afterwards nests normally from depth 0.
        info_span!(target: "app", "plain").in_scope(|| {});
    });
    guard.stop().unwrap();
}

fn check_cross_thread(trace: &Path) {
    let (slices, _) = decode(trace);
    let on = |thread: &str, name: &str| -> Vec<&Slice> {
        slices
            .iter()
            .filter(|s| s.thread().starts_with(&format!("{thread}#")) && s.name == name)
            .collect()
    };
    let asyncs = |name: &str| -> Vec<&Slice> {
        slices
            .iter()
            .filter(|s| s.is_async() && s.name == name)
            .collect()
    };
    // moved: one slice on each thread, one async range covering both, with
    // the creation value and the recorded one.
    let (a, b) = (on("layer-a", "moved"), on("layer-b", "moved"));
    assert_eq!((a.len(), b.len()), (1, 1), "{slices:#?}");
    let r = asyncs("moved");
    assert_eq!(
        r.len(),
        1,
        "one async range for the moved span: {slices:#?}"
    );
    assert!(
        r[0].ts <= a[0].ts && r[0].end() >= b[0].end(),
        "range covers every enter"
    );
    assert_eq!(
        r[0].args,
        json!({"n": 2}),
        "range args: the latest value wins"
    );
    assert_eq!(a[0].args, json!({"n": 1}));
    assert_eq!(b[0].depth, 0);

    // outer/inner on layer-c: outer [t0, t2] at depth 0, inner split in two:
    // [t1, t2] at depth 1 and [t2, t3] at depth 0; both async.
    let (outer, inner) = (on("layer-c", "outer"), on("layer-c", "inner"));
    assert_eq!((outer.len(), inner.len()), (1, 2), "{slices:#?}");
    let mut inner = inner;
    inner.sort_by_key(|s| s.ts);
    assert_eq!((outer[0].depth, inner[0].depth, inner[1].depth), (0, 1, 0));
    assert_eq!(inner[0].end(), outer[0].end());
    assert_eq!(inner[1].ts, outer[0].end());
    let after = slices
        .iter()
        .find(|s| s.instant && s.args["message"] == "after outer")
        .unwrap();
    assert_eq!(
        after.depth, 1,
        "the event is inside the continued inner slice"
    );
    assert!(after.ts >= inner[1].ts && after.ts <= inner[1].end());
    assert_eq!(asyncs("outer").len(), 1);
    assert_eq!(asyncs("inner").len(), 1);
    assert!(asyncs("inner")[0].end() >= inner[1].end());
    let plain = on("layer-c", "plain");
    assert_eq!(plain.len(), 1);
    assert_eq!(plain[0].depth, 0);
    assert!(asyncs("plain").is_empty());
}

#[test]
fn spans_across_threads_and_out_of_order_perfetto() {
    let _s = serial();
    let trace = scratch("cross-pf").join("cross.pftrace");
    run_cross_thread(&trace, Via::Layer);
    check_cross_thread(&trace);
}

#[test]
fn spans_across_threads_and_out_of_order_json() {
    let _s = serial();
    let trace = scratch("cross-json").join("cross.json");
    run_cross_thread(&trace, Via::Layer);
    check_cross_thread(&trace);
}

// ---------------------------------------------------------------------------
// follows_from

fn run_flows(trace: &Path, via: Via) {
    let (dispatch, guard) = start(trace, via);
    on_thread("layer-flows", &dispatch, || {
        // The source is entered when the flow is made.
        let producer = info_span!(target: "app", "producer");
        let consumer = {
            let _p = producer.enter();
            let c = info_span!(target: "app", "consumer");
            c.follows_from(&producer);
            c
        };
        consumer.in_scope(|| {});
        // The source is no longer entered and closes without another enter.
        let batch_item = info_span!(target: "app", "item");
        batch_item.in_scope(|| {});
        let batch = info_span!(target: "app", "batch");
        batch.follows_from(&batch_item);
        drop(batch_item);
        batch.in_scope(|| {});
    });
    guard.stop().unwrap();
}

fn check_flows(trace: &Path) {
    let (slices, flows) = decode(trace);
    let named: Vec<(String, String, bool)> = flows
        .iter()
        .map(|&(a, b)| {
            (
                slices[a].name.clone(),
                slices[b].name.clone(),
                slices[a].is_async(),
            )
        })
        .collect();
    // producer's flow is bound to the end of its slice; item was not entered
    // after the flow was made, so it is bound to item's range (made async).
    let expected = vec![
        ("producer".to_string(), "consumer".to_string(), false),
        ("item".into(), "batch".into(), true),
    ];
    assert_eq!(named, expected, "{slices:#?}");
    for &(a, b) in &flows {
        assert!(slices[a].ts <= slices[b].ts, "flows go forward in time");
    }
}

#[test]
fn follows_from_is_a_flow_perfetto() {
    let _s = serial();
    let trace = scratch("flows-pf").join("flows.pftrace");
    run_flows(&trace, Via::Layer);
    check_flows(&trace);
}

#[test]
fn follows_from_is_a_flow_json() {
    let _s = serial();
    let trace = scratch("flows-json").join("flows.json");
    run_flows(&trace, Via::Layer);
    check_flows(&trace);
}

// ---------------------------------------------------------------------------
// A multi-threaded tokio runtime

#[tracing::instrument(target = "tasks")]
async fn task(
    i: u64,
    rx: tokio::sync::mpsc::Receiver<u64>,
    tx: Option<tokio::sync::mpsc::Sender<u64>>,
) -> u64 {
    let mut rx = rx;
    let mut sum = 0;
    while let Some(v) = rx.recv().await {
        info!(target: "tasks", v, "got");
        sum += v;
        if let Some(tx) = &tx {
            let _ = tx.send(v + 1).await;
        }
        tokio::task::yield_now().await;
    }
    sum
}

/// `every`: each slice of a span carries its fields, not only its first.
fn run_tokio(trace: &Path, via: Via, every: bool) -> u64 {
    let (dispatch, guard) = start_with(trace, via, every);
    let d = dispatch.clone();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .thread_name("layer-worker")
        .on_thread_start(move || std::mem::forget(dispatcher::set_default(&d)))
        .enable_all()
        .build()
        .unwrap();
    let tasks = 16u64;
    let total = dispatcher::with_default(&dispatch, || {
        rt.block_on(async {
            // A ring of tasks: each one's sends wake the next from whichever
            // worker runs it, so tasks move between workers.
            let (txs, rxs): (Vec<_>, Vec<_>) =
                (0..tasks).map(|_| tokio::sync::mpsc::channel(4)).unzip();
            let first = txs[0].clone();
            let mut handles = Vec::new();
            let mut txs: Vec<Option<_>> = txs.into_iter().map(Some).collect();
            for (i, rx) in rxs.into_iter().enumerate() {
                let next = if i + 1 < tasks as usize {
                    txs[i + 1].take()
                } else {
                    None
                };
                handles.push(tokio::spawn(task(i as u64, rx, next)));
            }
            drop(txs);
            for v in 0..50 {
                first.send(v).await.unwrap();
                if v % 5 == 0 {
                    tokio::time::sleep(std::time::Duration::from_micros(200)).await;
                }
            }
            drop(first);
            let mut total = 0;
            for h in handles {
                total += h.await.unwrap();
            }
            total
        })
    });
    drop(rt);
    guard.stop().unwrap();
    total
}

/// `every`: the trace of `run_tokio(.., every)`. Without it a task's first
/// poll carries its field `i` and later polls its name alone: a task is
/// known to have hopped by its async range (which carries `i`), which must
/// cover its first poll.
fn check_tokio(trace: &Path, every: bool) {
    let (slices, _) = decode(trace);
    let mut polls: BTreeMap<u64, Vec<&Slice>> = BTreeMap::new();
    let mut ranges: BTreeMap<u64, Vec<&Slice>> = BTreeMap::new();
    let mut bare = 0;
    for s in slices.iter().filter(|s| s.name == "task") {
        if !s.is_async() {
            assert!(
                s.thread().starts_with("layer-worker#"),
                "polls run on workers: {s:?}"
            );
        }
        let Some(i) = s.args.get("i").and_then(|i| i.as_u64()) else {
            assert!(!every && !s.is_async(), "a slice without `i`: {s:?}");
            bare += 1;
            continue;
        };
        if s.is_async() {
            ranges.entry(i).or_default().push(s);
        } else {
            polls.entry(i).or_default().push(s);
        }
    }
    assert_eq!(polls.len(), 16, "every task's polls are on thread tracks");
    if !every {
        assert!(
            bare > 0,
            "tasks polled more than once: the test proves nothing"
        );
        let mut hopped = 0;
        for (i, p) in &polls {
            assert_eq!(p.len(), 1, "task {i}: its first poll alone carries `i`");
            let r = ranges.get(i).map_or(&[][..], |v| v.as_slice());
            assert!(r.len() <= 1, "task {i}: {r:?}");
            if let Some(r) = r.first() {
                hopped += 1;
                assert!(r.ts <= p[0].ts && r.end() >= p[0].end(), "task {i}: {r:?}");
            }
        }
        assert!(
            hopped > 0,
            "no task moved between workers: the test proves nothing"
        );
        for e in slices.iter().filter(|s| s.instant && s.cat == "tasks") {
            assert!(e.depth >= 1, "event outside its task's slice: {e:?}");
        }
        return;
    }
    let mut hopped = 0;
    for (i, p) in &polls {
        let threads: BTreeSet<&str> = p.iter().map(|s| s.thread()).collect();
        let r = ranges.get(i).map_or(&[][..], |v| v.as_slice());
        if threads.len() > 1 {
            hopped += 1;
            assert_eq!(r.len(), 1, "task {i} ran on {threads:?}: one async range");
            let first = p.iter().map(|s| s.ts).min().unwrap();
            let last = p.iter().map(|s| s.end()).max().unwrap();
            assert!(
                r[0].ts <= first && r[0].end() >= last,
                "task {i}: the range covers every poll"
            );
        } else {
            assert!(
                r.is_empty(),
                "task {i} stayed on {threads:?}: no async range"
            );
        }
    }
    assert!(
        hopped > 0,
        "no task moved between workers: the test proves nothing"
    );
    // The events of each poll are inside it.
    for e in slices.iter().filter(|s| s.instant && s.cat == "tasks") {
        assert!(e.depth >= 1, "event outside its task's slice: {e:?}");
    }
}

#[test]
fn tokio_tasks_hopping_threads_perfetto() {
    let _s = serial();
    let trace = scratch("tokio-pf").join("tokio.pftrace");
    assert!(run_tokio(&trace, Via::Layer, false) > 0);
    check_tokio(&trace, false);
}

#[test]
fn tokio_tasks_hopping_threads_json() {
    let _s = serial();
    let trace = scratch("tokio-json").join("tokio.json");
    assert!(run_tokio(&trace, Via::Layer, false) > 0);
    check_tokio(&trace, false);
}

// ---------------------------------------------------------------------------
// The registry-free subscriber: the same workloads give the same traces

#[test]
fn subscriber_spans_across_threads_and_out_of_order() {
    let _s = serial();
    let trace = scratch("sub-cross-pf").join("cross.pftrace");
    run_cross_thread(&trace, Via::Subscriber);
    check_cross_thread(&trace);
}

#[test]
fn subscriber_follows_from_is_a_flow() {
    let _s = serial();
    let trace = scratch("sub-flows-json").join("flows.json");
    run_flows(&trace, Via::Subscriber);
    check_flows(&trace);
}

#[test]
fn subscriber_tokio_tasks_hopping_threads() {
    let _s = serial();
    let trace = scratch("sub-tokio-pf").join("tokio.pftrace");
    assert!(run_tokio(&trace, Via::Subscriber, false) > 0);
    check_tokio(&trace, false);
}

/// With `span_fields_every_slice(true)`, every poll of a task carries its
/// field: a task's polls are found on every thread that ran them, inside
/// its async range.
#[test]
fn tokio_tasks_hopping_threads_every_slice() {
    let _s = serial();
    for (via, ext) in [(Via::Layer, "pftrace"), (Via::Subscriber, "json")] {
        let trace = scratch(&format!("tokio-every-{ext}")).join(format!("tokio.{ext}"));
        assert!(run_tokio(&trace, via, true) > 0);
        check_tokio(&trace, true);
    }
}

#[test]
fn layer_spans_past_its_map_in_place_made_entered_and_closed_on_two_threads() {
    // The layer's map of registry ids holds 4,096 spans in place and the
    // rest in an overflow map: 6,000 spans alive at once, made on six
    // threads, half entered there, half entered and closed on the main
    // thread; three rounds, so the registry reuses the ids of closed spans.
    // Every span is recorded once, with its own fields, none left unstored.
    let _s = serial();
    let trace = scratch("layer-many").join("many.pftrace");
    let (layer, guard) = ringtrace::builder()
        .output(&trace)
        .buffer_bytes_per_thread(16 << 20)
        .buffer_bytes(256 << 20)
        .layer()
        .unwrap();
    let dispatch = Dispatch::new(tracing_subscriber::registry().with(layer));
    const THREADS: u64 = 6;
    const SPANS: u64 = 1000;
    for round in 0..3u64 {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let d = dispatch.clone();
                std::thread::spawn(move || {
                    dispatcher::with_default(&d, || {
                        let spans: Vec<_> = (0..SPANS)
                            .map(|i| info_span!(target: "app", "live", round, t, i))
                            .collect();
                        for s in &spans[..SPANS as usize / 2] {
                            s.in_scope(|| {});
                        }
                        spans
                    })
                })
            })
            .collect();
        // Every thread's spans are alive until all are joined.
        let all: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        dispatcher::with_default(&dispatch, || {
            for spans in &all {
                for s in &spans[SPANS as usize / 2..] {
                    s.in_scope(|| {});
                }
            }
            drop(all);
        });
    }
    assert_eq!(guard.stop().unwrap().spans_not_stored, 0);
    let (slices, _) = decode(&trace);
    let mut seen = BTreeMap::new();
    for s in slices.iter().filter(|s| s.name == "live" && !s.instant) {
        let key = ["round", "t", "i"].map(|k| s.args[k].as_u64().unwrap());
        *seen.entry(key).or_insert(0) += 1;
    }
    assert_eq!(
        seen.len() as u64,
        3 * THREADS * SPANS,
        "every span recorded"
    );
    assert!(seen.values().all(|&n| n == 1), "each once");
}

#[test]
fn layer_slots_of_spans_with_values_on_the_heap_are_reused_with_fresh_values() {
    // A closed span's slot goes back unlocked, its state as it was; a span
    // with more values than a state keeps inline (ten fields: twenty words)
    // leaves them on the heap, so the next span in that slot must get a new
    // state, not the old one reset. Spans of both kinds alternate on one
    // thread (which reuses its last freed slot first), each with its own
    // values in the trace.
    let _s = serial();
    let trace = scratch("layer-reuse").join("reuse.pftrace");
    let (dispatch, guard) = start(&trace, Via::Layer);
    dispatcher::with_default(&dispatch, || {
        for i in 0..200u64 {
            if i % 2 == 0 {
                let (a, b, c, d, e) = (i, i + 1, i + 2, i + 3, i + 4);
                let (f, g, h, j, k) = (i + 5, i + 6, i + 7, i + 8, i + 9);
                info_span!(target: "app", "wide", a, b, c, d, e, f, g, h, j, k).in_scope(|| {});
            } else {
                info_span!(target: "app", "narrow", a = i).in_scope(|| {});
            }
        }
    });
    guard.stop().unwrap();
    let (slices, _) = decode(&trace);
    let wide: Vec<_> = slices.iter().filter(|s| s.name == "wide").collect();
    let narrow: Vec<_> = slices.iter().filter(|s| s.name == "narrow").collect();
    assert_eq!((wide.len(), narrow.len()), (100, 100));
    for s in wide {
        let a = s.args["a"].as_u64().unwrap();
        for (n, k) in ["a", "b", "c", "d", "e", "f", "g", "h", "j", "k"]
            .iter()
            .enumerate()
        {
            assert_eq!(
                s.args[k].as_u64(),
                Some(a + n as u64),
                "{k} of {:?}",
                s.args
            );
        }
    }
    for s in narrow {
        assert_eq!(s.args.as_object().unwrap().len(), 1, "{:?}", s.args);
        assert_eq!(s.args["a"].as_u64().unwrap() % 2, 1);
    }
}

// ---------------------------------------------------------------------------
// Deeper than the thread's inline stack of entered spans (16)

fn run_deep(trace: &Path, via: Via) {
    let (dispatch, guard) = start(trace, via);
    on_thread("deep", &dispatch, || {
        // 40 nested spans, exited in stack order.
        let spans: Vec<_> = (0..40u64)
            .map(|i| info_span!(target: "app", "deep", i))
            .collect();
        let entered: Vec<_> = spans.iter().map(|s| s.enter()).collect();
        info!(target: "app", "at the bottom");
        assert_eq!(
            tracing::Span::current().id(),
            spans[39].id(),
            "the innermost span is current"
        );
        drop(entered.into_iter().rev().collect::<Vec<_>>());
        // Again, with span 10 exiting while 11..39 are still entered.
        let spans: Vec<_> = (0..40u64)
            .map(|i| info_span!(target: "app", "deep2", i))
            .collect();
        let mut entered: Vec<_> = spans.iter().map(|s| Some(s.enter())).collect();
        entered[10] = None;
        assert_eq!(tracing::Span::current().id(), spans[39].id());
        for g in entered.iter_mut().rev() {
            *g = None;
        }
        assert!(tracing::Span::current().is_none());
        info_span!(target: "app", "after").in_scope(|| {});
    });
    guard.stop().unwrap();
}

fn check_deep(trace: &Path) {
    let (slices, _) = decode(trace);
    let on_thread = |name: &str| -> Vec<&Slice> {
        slices
            .iter()
            .filter(|s| s.name == name && s.thread().starts_with("deep#"))
            .collect()
    };
    let deep = on_thread("deep");
    assert_eq!(deep.len(), 40);
    for s in &deep {
        assert_eq!(Some(s.depth), s.args["i"].as_u64(), "{s:?}");
    }
    // 0..=10 once; 11..39 ended at 10's exit and begun again: twice.
    // Their first slices carry `i`; the slices begun again their name alone.
    let deep2 = on_thread("deep2");
    let mut per: BTreeMap<u64, usize> = BTreeMap::new();
    let mut again = Vec::new();
    for s in &deep2 {
        match s.args.get("i").and_then(|i| i.as_u64()) {
            Some(i) => *per.entry(i).or_default() += 1,
            None => again.push(s.depth),
        }
    }
    let want: BTreeMap<u64, usize> = (0..40).map(|i| (i, 1)).collect();
    assert_eq!(per, want);
    again.sort();
    assert_eq!(
        again,
        (10..39).collect::<Vec<u64>>(),
        "11..39 begun again at 10..38"
    );
    let after = on_thread("after");
    assert_eq!(after.len(), 1);
    assert_eq!(after[0].depth, 0);
}

#[test]
fn spans_nested_past_the_inline_stack_layer() {
    let _s = serial();
    for ext in ["pftrace", "json"] {
        let trace = scratch(&format!("deep-layer-{ext}")).join(format!("deep.{ext}"));
        run_deep(&trace, Via::Layer);
        check_deep(&trace);
    }
}

#[test]
fn spans_nested_past_the_inline_stack_subscriber() {
    let _s = serial();
    for ext in ["pftrace", "json"] {
        let trace = scratch(&format!("deep-sub-{ext}")).join(format!("deep.{ext}"));
        run_deep(&trace, Via::Subscriber);
        check_deep(&trace);
    }
}

// ---------------------------------------------------------------------------
// A span's fields: on its first slice (or on every slice, if asked)

/// A span entered three times on one thread: `a` and `b` at creation, `c`
/// recorded between the first and second enter, `d` while the third is
/// entered.
fn run_reentered(trace: &Path, via: Via, every: bool) {
    let (dispatch, guard) = start_with(trace, via, every);
    on_thread("again", &dispatch, || {
        let span = info_span!(
            target: "app",
            "again",
            a = 1u64,
            b = "two",
            c = tracing::field::Empty,
            d = tracing::field::Empty
        );
        span.in_scope(|| {});
        span.record("c", 3u64);
        span.in_scope(|| {});
        span.in_scope(|| {
            span.record("d", 4u64);
        });
    });
    guard.stop().unwrap();
}

/// The args of the span's slices, in order.
fn reentered_args(trace: &Path) -> Vec<serde_json::Value> {
    let (slices, _) = decode(trace);
    let mut again: Vec<&Slice> = slices
        .iter()
        .filter(|s| s.name == "again" && s.thread().starts_with("again#"))
        .collect();
    again.sort_by_key(|s| s.ts);
    assert!(
        slices.iter().all(|s| !(s.name == "again" && s.is_async())),
        "entered on one thread, in stack order: no async range"
    );
    let empty = json!({});
    again
        .iter()
        .map(|s| {
            if s.args.is_null() {
                empty.clone()
            } else {
                s.args.clone()
            }
        })
        .collect()
}

/// By default the first slice carries every field the span has, a later
/// one only what was recorded since the slice before (or while it was
/// entered): both formats, both ways in, decoded with the official schema.
#[test]
fn a_spans_fields_are_on_its_first_slice_only() {
    let _s = serial();
    for (via, ext) in [
        (Via::Layer, "pftrace"),
        (Via::Layer, "json"),
        (Via::Subscriber, "pftrace"),
        (Via::Subscriber, "json"),
    ] {
        let trace = scratch(&format!("again-{via:?}-{ext}")).join(format!("again.{ext}"));
        run_reentered(&trace, via, false);
        let args = reentered_args(&trace);
        assert_eq!(
            args,
            [
                json!({"a": 1, "b": "two"}),
                json!({"c": 3}),
                json!({"d": 4})
            ],
            "{via:?} {ext}"
        );
    }
}

/// With `span_fields_every_slice(true)` every slice is self-contained.
#[test]
fn span_fields_every_slice_puts_them_on_each_slice() {
    let _s = serial();
    for (via, ext) in [(Via::Layer, "json"), (Via::Subscriber, "pftrace")] {
        let trace = scratch(&format!("again-every-{via:?}-{ext}")).join(format!("again.{ext}"));
        run_reentered(&trace, via, true);
        let args = reentered_args(&trace);
        assert_eq!(
            args,
            [
                json!({"a": 1, "b": "two"}),
                json!({"a": 1, "b": "two", "c": 3}),
                json!({"a": 1, "b": "two", "c": 3, "d": 4}),
            ],
            "{via:?} {ext}"
        );
    }
}
