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
