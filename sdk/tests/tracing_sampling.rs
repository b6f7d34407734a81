//! Whole-request sampling through `tracing`: a root span kept or skipped
//! with everything under it, on other threads and tokio tasks; the counts
//! in `Stats`; the trace's own note of its sampling; a user's decision; and
//! roots limited by name. Through the layer and the subscriber, decoded with
//! the official Perfetto schema and parsed as JSON.

mod common;

use common::scratch;
use common::slices::*;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tracing::dispatcher::{self, Dispatch};
use tracing::{info, info_span, Instrument};
use tracing_subscriber::layer::SubscriberExt;

const REQUESTS: u64 = 400;

fn start_sampled(
    trace: &Path,
    via: Via,
    f: impl FnOnce(ringtrace::Builder) -> ringtrace::Builder,
    g: impl FnOnce(ringtrace::Builder) -> ringtrace::Builder,
) -> (Dispatch, ringtrace::TraceGuard) {
    match via {
        Via::Layer => {
            let (layer, guard) = f(ringtrace::builder().output(trace)).layer().unwrap();
            (
                Dispatch::new(tracing_subscriber::registry().with(layer)),
                guard,
            )
        }
        Via::Subscriber => {
            let (sub, guard) = g(ringtrace::builder().output(trace)).subscriber().unwrap();
            (Dispatch::new(sub), guard)
        }
    }
}

/// One request: a root span with a child on another thread (explicit
/// parent), a tokio task instrumented with a span made inside it (a child
/// by context) which makes a span of its own and an event, and an event in
/// the root. Every span and event carries the request's `id`.
fn request(id: u64, dispatch: &Dispatch, rt: &tokio::runtime::Runtime) {
    let root = info_span!(target: "svc", "request", id);
    let _in_root = root.enter();
    let parent = root.clone();
    let d = dispatch.clone();
    std::thread::spawn(move || {
        dispatcher::with_default(&d, || {
            let db = info_span!(target: "svc", parent: &parent, "db", id);
            let _e = db.enter();
            info!(target: "svc", id, "query");
        })
    })
    .join()
    .unwrap();
    let task = info_span!(target: "svc", "task", id);
    rt.block_on(async {
        tokio::spawn(
            async move {
                tokio::task::yield_now().await;
                let step = info_span!(target: "svc", "step", id);
                async {
                    tokio::task::yield_now().await;
                    info!(target: "svc", id, "stepped");
                }
                .instrument(step)
                .await;
            }
            .instrument(task),
        )
        .await
        .unwrap();
    });
    info!(target: "svc", id, "handled");
}

/// What a whole request leaves in the trace: (name, instant).
const PIECES: [(&str, bool); 7] = [
    ("request", false),
    ("db", false),
    ("task", false),
    ("step", false),
    ("query", true),
    ("stepped", true),
    ("handled", true),
];

fn run(trace: &Path, via: Via, ratio: f64) -> ringtrace::Stats {
    let _one = serial();
    let (dispatch, guard) = start_sampled(
        trace,
        via,
        |b| b.sample_ratio(ratio),
        |b| b.sample_ratio(ratio),
    );
    let d = dispatch.clone();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("sampling-worker")
        .on_thread_start(move || std::mem::forget(dispatcher::set_default(&d)))
        .build()
        .unwrap();
    dispatcher::with_default(&dispatch, || {
        for id in 0..REQUESTS {
            request(id, &dispatch, &rt);
            if id % 100 == 0 {
                info!(target: "svc", n = id, "outside");
            }
        }
    });
    drop(rt);
    guard.stop().unwrap()
}

/// The requests in the trace, each checked whole; the trace's sampling note.
fn requests_in(trace: &Path) -> (BTreeSet<u64>, Vec<Slice>) {
    let (slices, _) = decode(trace);
    let mut seen: BTreeMap<u64, BTreeSet<(&str, bool)>> = BTreeMap::new();
    for s in slices.iter().filter(|s| !s.is_async() && s.cat == "svc") {
        if let Some(id) = s.args["id"].as_u64() {
            let name = if s.instant {
                s.args["message"].as_str().unwrap_or("")
            } else {
                s.name.as_str()
            };
            let piece = PIECES
                .iter()
                .find(|p| p.0 == name)
                .unwrap_or_else(|| panic!("unexpected {s:?}"));
            assert_eq!(piece.1, s.instant, "{s:?}");
            seen.entry(id).or_default().insert(*piece);
        }
    }
    for (id, pieces) in &seen {
        // A request is all there or not at all: no orphans.
        assert_eq!(pieces.len(), PIECES.len(), "request {id}: {pieces:?}");
    }
    let handled = slices
        .iter()
        .filter(|s| s.instant && s.args["message"] == "handled")
        .filter_map(|s| s.args["id"].as_u64())
        .collect::<BTreeSet<_>>();
    let kept: BTreeSet<u64> = seen.keys().copied().collect();
    // The event in the root after the task: only for kept roots.
    assert_eq!(handled, kept);
    let outside = slices
        .iter()
        .filter(|s| s.instant && s.args["message"] == "outside")
        .count();
    assert_eq!(outside, 4, "events outside any span are all recorded");
    (kept, slices)
}

fn sampled(ext: &str, via: Via) {
    let trace = scratch(&format!("sampled_{via:?}")).join(format!("trace.{ext}"));
    let stats = run(&trace, via, 0.25);
    let (kept, slices) = requests_in(&trace);
    assert_eq!(
        stats.roots_kept + stats.roots_skipped,
        REQUESTS,
        "{stats:?}"
    );
    assert_eq!(stats.roots_kept, kept.len() as u64, "{stats:?}");
    assert_eq!(stats.events_lost, 0);
    // 100 expected; over 5 standard deviations (8.7) either side.
    assert!((55..=145).contains(&kept.len()), "{} kept", kept.len());
    let note: Vec<&Slice> = slices
        .iter()
        .filter(|s| s.instant && s.name == "sampling" && s.cat == "ringtrace")
        .collect();
    assert_eq!(note.len(), 1, "the trace says it was sampled");
    assert_eq!(note[0].args["ratio"].as_f64(), Some(0.25));
    assert_eq!(note[0].args["roots"], "*");
}

#[test]
fn sampled_requests_are_whole_layer_perfetto() {
    sampled("pftrace", Via::Layer);
}

#[test]
fn sampled_requests_are_whole_subscriber_perfetto() {
    sampled("pftrace", Via::Subscriber);
}

#[test]
fn sampled_requests_are_whole_layer_json() {
    sampled("json", Via::Layer);
}

#[test]
fn sampled_requests_are_whole_subscriber_json() {
    sampled("json", Via::Subscriber);
}

#[test]
fn every_root_kept_at_ratio_one_none_at_zero() {
    for via in [Via::Layer, Via::Subscriber] {
        let trace = scratch(&format!("sampled_all_{via:?}")).join("trace.pftrace");
        let stats = run(&trace, via, 1.0);
        assert_eq!((stats.roots_kept, stats.roots_skipped), (REQUESTS, 0));
        assert_eq!(requests_in(&trace).0.len() as u64, REQUESTS);
        let trace = scratch(&format!("sampled_none_{via:?}")).join("trace.pftrace");
        let stats = run(&trace, via, 0.0);
        assert_eq!((stats.roots_kept, stats.roots_skipped), (0, REQUESTS));
        assert!(requests_in(&trace).0.is_empty());
    }
}

/// A user's decision from a field of the root (a propagated id); roots
/// limited by name: others are kept whole and not counted.
#[test]
fn a_hook_decides_and_roots_are_limited_by_name() {
    let decide = |attrs: &tracing::span::Attributes<'_>| {
        struct Id(Option<u64>);
        impl tracing::field::Visit for Id {
            fn record_u64(&mut self, f: &tracing::field::Field, v: u64) {
                if f.name() == "id" {
                    self.0 = Some(v);
                }
            }
            fn record_debug(&mut self, _: &tracing::field::Field, _: &dyn std::fmt::Debug) {}
        }
        let mut id = Id(None);
        attrs.record(&mut id);
        // Every tenth id; no decision (the ratio: 0) for the rest.
        id.0.filter(|id| id % 10 == 0).map(|_| true)
    };
    for via in [Via::Layer, Via::Subscriber] {
        let _one = serial();
        let trace = scratch(&format!("sampled_hook_{via:?}")).join("trace.json");
        let (dispatch, guard) = start_sampled(
            &trace,
            via,
            |b| {
                b.sample_ratio(0.0)
                    .sample_roots(["req*"])
                    .sample_with(decide)
            },
            |b| {
                b.sample_ratio(0.0)
                    .sample_roots(["req*"])
                    .sample_with(decide)
            },
        );
        dispatcher::with_default(&dispatch, || {
            for id in 0..100u64 {
                let _r = info_span!(target: "svc", "request", id).entered();
                info_span!(target: "svc", "db", id).in_scope(|| {});
                // Another kind of root: not decided, kept.
                drop(_r);
                let _b = info_span!(target: "svc", "background", id).entered();
                info_span!(target: "svc", "db", id).in_scope(|| {});
            }
        });
        let stats = guard.stop().unwrap();
        assert_eq!((stats.roots_kept, stats.roots_skipped), (10, 90));
        let (slices, _) = decode(&trace);
        let ids = |name: &str| -> Vec<u64> {
            slices
                .iter()
                .filter(|s| s.name == name)
                .map(|s| s.args["id"].as_u64().unwrap())
                .collect()
        };
        let tens: Vec<u64> = (0..100).step_by(10).collect();
        assert_eq!(ids("request"), tens);
        assert_eq!(ids("background"), (0..100).collect::<Vec<_>>());
        assert_eq!(ids("db").len(), 110, "kept roots' children only");
        let note = slices.iter().find(|s| s.name == "sampling").unwrap();
        assert_eq!(note.args["roots"], "req*");
        assert_eq!(note.args["hook"], true);
    }
}

/// A root not kept: `Span::current()` inside it is still that span (tasks
/// spawned with `in_current_span()` follow it), and a category-off span
/// passes its root's decision on.
#[test]
fn current_span_and_category_off_spans_carry_the_decision() {
    for via in [Via::Layer, Via::Subscriber] {
        let _one = serial();
        let trace = scratch(&format!("sampled_current_{via:?}")).join("trace.pftrace");
        let (dispatch, guard) = start_sampled(
            &trace,
            via,
            |b| b.sample_ratio(0.0).disable_categories(["off"]),
            |b| b.sample_ratio(0.0).disable_categories(["off"]),
        );
        dispatcher::with_default(&dispatch, || {
            let root = info_span!(target: "svc", "request", id = 1u64);
            let _e = root.enter();
            let current = tracing::Span::current();
            assert_eq!(current.metadata().map(|m| m.name()), Some("request"));
            assert_eq!(current.id(), root.id());
            let off = info_span!(target: "off", "middle");
            let _o = off.enter();
            info_span!(target: "svc", "leaf", id = 1u64).in_scope(|| {
                info!(target: "svc", "inside");
            });
        });
        let stats = guard.stop().unwrap();
        assert_eq!((stats.roots_kept, stats.roots_skipped), (0, 1));
        let (slices, _) = decode(&trace);
        assert!(
            slices.iter().all(|s| s.cat != "svc"),
            "nothing of a root not kept: {slices:?}"
        );
    }
}

/// What `tracing` makes beside ringtrace (a layer on the same registry, or
/// on the subscriber): spans created, events dispatched.
#[derive(Clone, Default)]
struct Made {
    spans: Arc<AtomicU64>,
    events: Arc<AtomicU64>,
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Made {
    fn on_new_span(
        &self,
        _: &tracing::span::Attributes<'_>,
        _: &tracing::span::Id,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) {
        self.spans.fetch_add(1, Ordering::Relaxed);
    }
    fn on_event(&self, _: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        self.events.fetch_add(1, Ordering::Relaxed);
    }
}

fn start_counted(
    trace: &Path,
    via: Via,
    f: impl Fn(ringtrace::Builder) -> ringtrace::Builder,
) -> (Dispatch, ringtrace::TraceGuard, Made) {
    let made = Made::default();
    let b = f(ringtrace::builder().output(trace));
    let (dispatch, guard) = match via {
        Via::Layer => {
            let (layer, guard) = b.layer().unwrap();
            let registry = tracing_subscriber::registry()
                .with(layer)
                .with(made.clone());
            (Dispatch::new(registry), guard)
        }
        Via::Subscriber => {
            let (sub, guard) = b.subscriber().unwrap();
            (Dispatch::new(sub.with(made.clone())), guard)
        }
    };
    (dispatch, guard, made)
}

/// A request not kept is not made where the dispatch can tell: an event in
/// it never is, a span nested in it is not once its call site's spans were
/// seen to stay nested (a few enters). Neither the registry (or the
/// subscriber) nor any layer beside ringtrace's sees them; kept requests
/// are made whole.
#[test]
fn requests_not_kept_are_not_made() {
    const N: u64 = 200;
    for via in [Via::Layer, Via::Subscriber] {
        for ratio in [0.0, 1.0] {
            let _one = serial();
            let trace = scratch(&format!("not_made_{via:?}_{ratio}")).join("trace.pftrace");
            let (dispatch, guard, made) = start_counted(&trace, via, |b| b.sample_ratio(ratio));
            dispatcher::with_default(&dispatch, || {
                for id in 0..N {
                    let _r = info_span!(target: "svc", "request", id).entered();
                    info!(target: "svc", id, "received");
                    info_span!(target: "svc", "db", id).in_scope(|| {
                        info!(target: "svc", id, "query");
                    });
                }
            });
            let stats = guard.stop().unwrap();
            let (spans, events) = (
                made.spans.load(Ordering::Relaxed),
                made.events.load(Ordering::Relaxed),
            );
            let (slices, _) = decode(&trace);
            let recorded = |name: &str| slices.iter().filter(|s| s.name == name).count() as u64;
            if ratio == 1.0 {
                assert_eq!((spans, events), (2 * N, 2 * N), "{via:?}");
                assert_eq!((recorded("request"), recorded("db")), (N, N));
                continue;
            }
            assert_eq!(stats.roots_skipped, N, "{via:?}");
            // The roots are made (they carry the decision), and `db` only
            // until its site is known to stay nested.
            assert!(
                (N..N + 8).contains(&spans),
                "{via:?}: {spans} spans made for {N} requests not kept"
            );
            assert_eq!(events, 0, "{via:?}: events of requests not kept");
            assert_eq!(recorded("request") + recorded("db"), 0);
        }
    }
}

/// Every request runs in a task and moves part of itself to another task
/// (`tokio::spawn` with `.instrument(span)`, the span made in the request),
/// where it makes nested spans and events, a number that depends on the
/// request; tasks interleave on two workers. The trace holds each kept
/// request whole, exactly what the program made for it, and nothing of the
/// others, with and without named roots.
#[test]
fn requests_crossing_tasks_are_whole_or_absent() {
    const N: u64 = 300;
    for via in [Via::Layer, Via::Subscriber] {
        for named in [false, true] {
            let _one = serial();
            let trace = scratch(&format!("crossing_{via:?}_{named}")).join("trace.pftrace");
            let (dispatch, guard, _made) = start_counted(&trace, via, |b| {
                let b = b.sample_ratio(0.3);
                if named {
                    b.sample_roots(["request"])
                } else {
                    b
                }
            });
            let d = dispatch.clone();
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("crossing-worker")
                .on_thread_start(move || std::mem::forget(dispatcher::set_default(&d)))
                .build()
                .unwrap();
            // What the program made, per request: its spans (name, step)
            // and its number of events.
            type Made = (BTreeSet<(String, u64)>, usize);
            let mut expected: BTreeMap<u64, Made> = BTreeMap::new();
            dispatcher::with_default(&dispatch, || {
                rt.block_on(async {
                    let mut handles = Vec::new();
                    for id in 0..N {
                        let steps = id % 4 + 1;
                        // request, moved, the steps; an event per step and
                        // one in the request.
                        let mut spans: BTreeSet<(String, u64)> =
                            [("request".into(), 0), ("moved".into(), 0)].into();
                        spans.extend((0..steps).map(|n| ("step".to_string(), n)));
                        expected.insert(id, (spans, steps as usize + 1));
                        let root = info_span!(target: "svc", "request", id);
                        handles.push(tokio::spawn(
                            async move {
                                tokio::task::yield_now().await;
                                let moved = info_span!(target: "svc", "moved", id);
                                tokio::spawn(
                                    async move {
                                        for n in 0..steps {
                                            let step = info_span!(target: "svc", "step", id, n);
                                            async {
                                                tokio::task::yield_now().await;
                                                info!(target: "svc", id, "stepped");
                                            }
                                            .instrument(step)
                                            .await;
                                        }
                                    }
                                    .instrument(moved),
                                )
                                .await
                                .unwrap();
                                info!(target: "svc", id, "handled");
                            }
                            .instrument(root),
                        ));
                    }
                    for h in handles {
                        h.await.unwrap();
                    }
                });
            });
            drop(rt);
            let stats = guard.stop().unwrap();
            let (slices, _) = decode(&trace);
            // A span is a slice per enter (each poll of its future); its
            // first slice carries its fields, later ones its name alone.
            let mut seen: BTreeMap<u64, Made> = BTreeMap::new();
            for s in slices.iter().filter(|s| !s.is_async() && s.cat == "svc") {
                if !s.instant && s.args.as_object().is_none_or(|a| a.is_empty()) {
                    continue; // a later slice of a span
                }
                let id = s.args["id"].as_u64().unwrap_or_else(|| panic!("{s:?}"));
                let e = seen.entry(id).or_default();
                if s.instant {
                    e.1 += 1;
                } else {
                    let n = s.args["n"].as_u64().unwrap_or(0);
                    e.0.insert((s.name.clone(), n));
                }
            }
            for (id, got) in &seen {
                assert_eq!(
                    Some(got),
                    expected.get(id),
                    "{via:?} named {named}: request {id} not whole"
                );
            }
            assert_eq!(stats.roots_kept + stats.roots_skipped, N, "{stats:?}");
            assert_eq!(stats.roots_kept, seen.len() as u64, "{stats:?}");
            assert_eq!(stats.events_lost, 0);
            // 90 expected; over 5 standard deviations (7.9) either side.
            assert!((50..=130).contains(&seen.len()), "{} kept", seen.len());
        }
    }
}
