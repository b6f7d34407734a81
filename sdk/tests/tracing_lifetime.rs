//! `span_slices(SpanSlices::Lifetime)` end to end: a `tracing` span is one
//! slice from its creation to its close, on a track reused by spans of its
//! name; enters and exits write nothing. Through the layer and the
//! registry-free subscriber, decoded with the official Perfetto schema and
//! parsed as JSON, against what the workload counted itself.

mod common;

use common::scratch;
use common::slices::*;
use ringtrace::SpanSlices;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use tracing::dispatcher::{self, Dispatch};
use tracing::{info, info_span};

fn start_lifetime(trace: &Path, via: Via, ratio: Option<f64>) -> (Dispatch, ringtrace::TraceGuard) {
    let mut builder = ringtrace::builder()
        .output(trace)
        .span_slices(SpanSlices::Lifetime);
    if let Some(ratio) = ratio {
        builder = builder.sample_ratio(ratio);
    }
    finish(builder, via)
}

const THREADS: u64 = 3;
const REQUESTS: u64 = 300;

/// What the workload made, counted by itself.
#[derive(Default)]
struct Made {
    requests: AtomicU64,
    moved: AtomicU64,
}

/// Three threads at once, each making `REQUESTS` requests: a `request` span
/// (fields `id`, and `path` recorded after its creation) entered twice, a
/// `step` span inside it, an event in each. Every tenth request is closed
/// on another thread (sent there, entered there once more), so that ranges
/// begin and end on different sequences, drained in any order.
fn run(trace: &Path, via: Via, ratio: Option<f64>) -> Made {
    let (dispatch, guard) = start_lifetime(trace, via, ratio);
    let made = std::sync::Arc::new(Made::default());
    let (tx, rx) = std::sync::mpsc::channel::<tracing::Span>();
    let closer = {
        let d = dispatch.clone();
        std::thread::Builder::new()
            .name("lt-closer".into())
            .spawn(move || {
                dispatcher::with_default(&d, || {
                    for span in rx {
                        span.in_scope(|| info!(target: "app", "closing"));
                    }
                })
            })
            .unwrap()
    };
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let d = dispatch.clone();
            let made = made.clone();
            let tx = tx.clone();
            std::thread::Builder::new()
                .name(format!("lt-{t}"))
                .spawn(move || {
                    dispatcher::with_default(&d, || {
                        for i in 0..REQUESTS {
                            let id = t * 1_000_000 + i;
                            let request = info_span!(
                                target: "app",
                                "request",
                                id,
                                path = tracing::field::Empty
                            );
                            request.in_scope(|| {
                                let step = info_span!(target: "app", "step", id);
                                step.in_scope(|| info!(target: "app", id, "in step"));
                            });
                            request.record("path", "/orders");
                            request.in_scope(|| info!(target: "app", id, "again"));
                            made.requests.fetch_add(1, Ordering::Relaxed);
                            if i % 10 == 0 {
                                made.moved.fetch_add(1, Ordering::Relaxed);
                                tx.send(request).unwrap();
                            }
                        }
                    })
                })
                .unwrap()
        })
        .collect();
    drop(tx);
    for w in workers {
        w.join().unwrap();
    }
    closer.join().unwrap();
    let stats = guard.stop().unwrap();
    assert_eq!(stats.events_lost + stats.unmatched_ends, 0, "{stats:?}");
    std::sync::Arc::try_unwrap(made).ok().unwrap()
}

fn id_of(s: &Slice) -> u64 {
    s.args["id"]
        .as_u64()
        .unwrap_or_else(|| panic!("no `id`: {s:?}"))
}

/// The trace of [`run`] without sampling: a slice per span, nothing on the
/// threads' tracks but events, each event inside its span's slice.
fn check(trace: &Path, made: &Made) {
    let (slices, _) = decode(trace);
    let perfetto = trace.extension().unwrap() == "pftrace";
    let spans: Vec<&Slice> = slices.iter().filter(|s| !s.instant).collect();
    for s in &spans {
        assert!(s.is_async(), "a span on a thread's track: {s:?}");
        if perfetto {
            // A pooled track holds one range at a time.
            assert_eq!(s.depth, 0, "ranges nest on a pooled track: {s:?}");
        }
    }
    let requests: BTreeMap<u64, &Slice> = spans
        .iter()
        .filter(|s| s.name == "request")
        .map(|s| (id_of(s), *s))
        .collect();
    let steps: BTreeMap<u64, &Slice> = spans
        .iter()
        .filter(|s| s.name == "step")
        .map(|s| (id_of(s), *s))
        .collect();
    let n = made.requests.load(Ordering::Relaxed);
    assert_eq!(n, THREADS * REQUESTS);
    assert_eq!(requests.len() as u64, n, "one slice per request span");
    assert_eq!(steps.len() as u64, n, "one slice per step span");
    assert_eq!(spans.len() as u64, 2 * n, "no other slice");
    for (id, r) in &requests {
        assert_eq!(r.args["path"], "/orders", "recorded later: on its end");
        let s = steps[id];
        assert!(r.ts <= s.ts && s.end() <= r.end(), "step in its request");
    }
    // Events: on the thread that recorded them, within their span's life.
    let events: Vec<&Slice> = slices.iter().filter(|s| s.instant).collect();
    let moved = made.moved.load(Ordering::Relaxed);
    assert_eq!(events.len() as u64, 2 * n + moved);
    for e in &events {
        assert!(!e.is_async(), "{e:?}");
        if let Some(id) = e.args.get("id").and_then(Value::as_u64) {
            let r = requests[&id];
            assert!(r.ts <= e.ts && e.ts <= r.end(), "{e:?} outside {r:?}");
            assert!(e.thread().starts_with("lt-"), "{e:?}");
        } else {
            assert!(e.thread().starts_with("lt-closer#"), "{e:?}");
        }
    }
    if perfetto {
        // Tracks are reused: as many per name as were alive at once (a
        // few a thread, and the moved ones waiting for the closer), not one
        // per span.
        let tracks: BTreeSet<&str> = requests.values().map(|s| s.track.as_str()).collect();
        assert!(
            (tracks.len() as u64) < n / 4,
            "{} tracks for {n} requests",
            tracks.len()
        );
    }
}

#[test]
fn a_span_is_one_slice_from_creation_to_close() {
    let _s = serial();
    for (via, ext) in [
        (Via::Layer, "pftrace"),
        (Via::Layer, "json"),
        (Via::Subscriber, "pftrace"),
        (Via::Subscriber, "json"),
    ] {
        let trace = scratch(&format!("lifetime-{via:?}-{ext}")).join(format!("t.{ext}"));
        let made = run(&trace, via, None);
        check(&trace, &made);
    }
}

/// With sampling, a request kept is one slice with its step and events; of
/// one not kept nothing is written.
#[test]
fn sampled_requests_are_kept_whole() {
    let _s = serial();
    for via in [Via::Layer, Via::Subscriber] {
        let trace = scratch(&format!("lifetime-sampled-{via:?}")).join("t.pftrace");
        run(&trace, via, Some(0.3));
        let (slices, _) = decode(&trace);
        let ids = |name: &str| -> BTreeSet<u64> {
            slices
                .iter()
                .filter(|s| s.name == name && !s.instant)
                .map(id_of)
                .collect()
        };
        let requests = ids("request");
        let n = THREADS * REQUESTS;
        assert!(
            requests.len() as u64 > n / 10 && (requests.len() as u64) < n * 6 / 10,
            "{via:?}: {} of {n} kept at 0.3",
            requests.len()
        );
        assert_eq!(
            ids("step"),
            requests,
            "{via:?}: each kept request has its step"
        );
        let events: BTreeSet<u64> = slices
            .iter()
            .filter(|s| s.instant)
            .filter_map(|s| s.args.get("id").and_then(Value::as_u64))
            .collect();
        assert_eq!(events, requests, "{via:?}: events follow their request");
    }
}

/// `follows_from`: the flow is bound to the end of each span's slice (only
/// Perfetto's format binds a flow to an end).
#[test]
fn follows_from_binds_the_ends_of_both_slices() {
    let _s = serial();
    for via in [Via::Layer, Via::Subscriber] {
        let trace = scratch(&format!("lifetime-flows-{via:?}")).join("t.pftrace");
        let (dispatch, guard) = start_lifetime(&trace, via, None);
        on_thread("lt-flows", &dispatch, || {
            let producer = info_span!(target: "app", "producer");
            let consumer = info_span!(target: "app", "consumer");
            consumer.follows_from(&producer);
            drop(producer);
            consumer.in_scope(|| {});
        });
        guard.stop().unwrap();
        let (slices, flows) = decode(&trace);
        let named: Vec<(&str, &str)> = flows
            .iter()
            .map(|&(a, b)| (slices[a].name.as_str(), slices[b].name.as_str()))
            .collect();
        assert_eq!(named, [("producer", "consumer")], "{via:?}: {slices:#?}");
        assert!(slices.iter().all(|s| s.instant || s.is_async()));
    }
}
