//! `tracing` end to end, one thread at a time: spans, fields, `Span::record`,
//! events and `#[instrument]`, and filters composed with ringtrace, through
//! the layer and through the registry-free subscriber. What is recorded must
//! come back, decoded with the official Perfetto schema (through
//! `tests/support/perfetto_model.py`) and parsed as JSON.
//!
//! A session is process-global, so the tests take a lock and run one at a
//! time; each has its own subscriber (`Dispatch`), set on every thread it uses.

mod common;

use common::scratch;
use common::slices::*;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::{Arc, Mutex};
use tracing::dispatcher::Dispatch;
use tracing::{debug, info, info_span, trace, warn, Level};
use tracing_subscriber::filter::{EnvFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::Layer;

// ---------------------------------------------------------------------------
// Spans, fields, Span::record, events, #[instrument]

#[tracing::instrument(target = "app::db", fields(rows = tracing::field::Empty))]
fn query(table: &str, limit: u32) -> u64 {
    tracing::Span::current().record("rows", 42u64);
    debug!(target: "app::db", table, "query done");
    42
}

fn workload() {
    let request = info_span!(
        target: "app",
        "request",
        id = 7u64,
        path = "/users",
        ok = tracing::field::Empty
    );
    let entered = request.enter();
    info!(target: "app", user = "ann", count = -3i64, ratio = 0.5, "hello {}", "world");
    warn!(target: "app::net", retry = true, "slow");
    query("users", 10);
    request.record("ok", true);
    drop(entered);
    // Recorded while not entered: the next enter carries it (alone: the
    // other fields are on the span's first slice).
    request.record("path", "/users/2");
    request.in_scope(|| trace!(target: "app", "again"));
}

fn check_workload(trace: &Path) {
    let (slices, _) = decode(trace);
    let mut main: Vec<&Slice> = slices
        .iter()
        .filter(|s| s.thread().starts_with("layer-workload#"))
        .collect();
    main.sort_by_key(|s| (s.ts, s.depth));
    let seen: Vec<Value> = main
        .iter()
        .map(|s| {
            let name = if s.name.starts_with("event ") {
                "event"
            } else {
                s.name.as_str()
            };
            json!([name, s.cat, s.depth, s.instant, s.args])
        })
        .collect();
    let expected = vec![
        json!(["request", "app", 0, false, {"id": 7, "path": "/users", "ok": true}]),
        json!(["event", "app", 1, true,
            {"message": "hello world", "user": "ann", "count": -3, "ratio": 0.5, "level": "INFO"}]),
        json!(["event", "app::net", 1, true, {"message": "slow", "retry": true, "level": "WARN"}]),
        json!(["query", "app::db", 1, false, {"table": "users", "limit": 10, "rows": 42}]),
        json!(["event", "app::db", 2, true, {"message": "query done", "table": "users", "level": "DEBUG"}]),
        // Entered again: only what was recorded since its first slice.
        json!(["request", "app", 0, false, {"path": "/users/2"}]),
        json!(["event", "app", 1, true, {"message": "again", "level": "TRACE"}]),
    ];
    assert_eq!(
        seen,
        expected,
        "slices of the workload thread in {}",
        trace.display()
    );
    // Each slice lies inside its parent and events inside their span.
    assert!(main[3].ts >= main[0].ts && main[3].end() <= main[0].end());
    assert!(main[4].ts >= main[3].ts && main[4].ts <= main[3].end());
    assert!(
        slices.iter().all(|s| !s.is_async()),
        "no async range: {slices:#?}"
    );
}

fn run_workload(trace: &Path, via: Via) {
    let (dispatch, guard) = start(trace, via);
    on_thread("layer-workload", &dispatch, workload);
    guard.stop().unwrap();
}

/// Records the workload through `via` into `file` of a fresh directory
/// `dir`, and checks the trace.
fn record_and_check(dir: &str, file: &str, via: Via) {
    let _s = serial();
    let trace = scratch(dir).join(file);
    run_workload(&trace, via);
    check_workload(&trace);
}

#[test]
fn spans_events_and_records_perfetto() {
    record_and_check("workload-pf", "workload.pftrace", Via::Layer);
}

#[test]
fn spans_events_and_records_json() {
    record_and_check("workload-json", "workload.json", Via::Layer);
}

// ---------------------------------------------------------------------------
// Filters: per-layer (Targets, EnvFilter) and ringtrace categories

/// Counts the events a second layer sees: filters of our layer must not
/// change what other layers get.
#[derive(Clone, Default)]
struct Counting(Arc<Mutex<Vec<String>>>);

impl<S: tracing::Subscriber> Layer<S> for Counting {
    fn on_event(&self, e: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        self.0.lock().unwrap().push(format!(
            "{} {}",
            e.metadata().level(),
            e.metadata().target()
        ));
    }
}

fn filtered_workload() {
    let s = info_span!(target: "app", "kept_span");
    let _e = s.enter();
    let _d = tracing::debug_span!(target: "app", "debug_span").entered();
    info!(target: "app", "kept");
    debug!(target: "app", "app debug");
    info!(target: "other", "other info");
    warn!(target: "other", "other warn");
    info!(target: "app::quiet", "quiet");
    info!(target: "app::noisy", "noisy");
}

fn instants(slices: &[Slice]) -> BTreeSet<String> {
    slices
        .iter()
        .filter(|s| s.instant)
        .map(|s| {
            format!(
                "{} {} {}",
                s.args["level"].as_str().unwrap(),
                s.cat,
                s.args["message"].as_str().unwrap()
            )
        })
        .collect()
}

/// The names of the slices that are not instants, in file order.
fn span_names(slices: &[Slice]) -> Vec<&str> {
    slices
        .iter()
        .filter(|s| !s.instant)
        .map(|s| s.name.as_str())
        .collect()
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

#[test]
fn per_layer_filters_compose() {
    let _s = serial();
    let dir = scratch("filters");

    // Targets: app at INFO and up, other at WARN; ringtrace's own category
    // filter takes app::quiet out.
    let trace = dir.join("targets.pftrace");
    let (layer, guard) = ringtrace::builder()
        .output(&trace)
        .disable_categories(["app::quiet"])
        .layer()
        .unwrap();
    let counting = Counting::default();
    let filter = Targets::new()
        .with_target("app", Level::INFO)
        .with_target("other", Level::WARN);
    let dispatch = Dispatch::new(
        tracing_subscriber::registry()
            .with(layer.with_filter(filter))
            .with(counting.clone()),
    );
    on_thread("layer-targets", &dispatch, filtered_workload);
    guard.stop().unwrap();
    let (slices, _) = decode(&trace);
    assert_eq!(
        instants(&slices),
        set(&[
            "INFO app kept",
            "WARN other other warn",
            "INFO app::noisy noisy"
        ])
    );
    let spans = span_names(&slices);
    assert_eq!(spans, ["kept_span"]);
    assert_eq!(
        counting.0.lock().unwrap().len(),
        6,
        "the other layer sees every event"
    );

    // EnvFilter, JSON output.
    let trace = dir.join("env.json");
    let (layer, guard) = ringtrace::builder().output(&trace).layer().unwrap();
    let filter = EnvFilter::new("app=debug,app::noisy=off,other=off");
    let dispatch = Dispatch::new(tracing_subscriber::registry().with(layer.with_filter(filter)));
    on_thread("layer-env", &dispatch, filtered_workload);
    guard.stop().unwrap();
    let (slices, _) = decode(&trace);
    assert_eq!(
        instants(&slices),
        set(&[
            "INFO app kept",
            "DEBUG app app debug",
            "INFO app::quiet quiet"
        ])
    );
    let spans: BTreeSet<&str> = span_names(&slices).into_iter().collect();
    assert_eq!(spans, BTreeSet::from(["kept_span", "debug_span"]));
}

// ---------------------------------------------------------------------------
// The registry-free subscriber: the same workloads give the same traces

#[test]
fn subscriber_spans_events_and_records_perfetto() {
    record_and_check("sub-workload-pf", "workload.pftrace", Via::Subscriber);
}

#[test]
fn subscriber_spans_events_and_records_json() {
    record_and_check("sub-workload-json", "workload.json", Via::Subscriber);
}

#[test]
fn subscriber_composes_with_filters_and_tracks_the_current_span() {
    let _s = serial();
    let trace = scratch("sub-filters").join("env.pftrace");
    let (subscriber, guard) = ringtrace::builder()
        .output(&trace)
        .disable_categories(["app::quiet"])
        .subscriber()
        .unwrap();
    let filter = EnvFilter::new("app=debug,app::noisy=off,other=warn");
    let dispatch = Dispatch::new(subscriber.with(filter));
    let current = on_thread("sub-env", &dispatch, || {
        filtered_workload();
        let outer = info_span!(target: "app", "outer");
        let _o = outer.enter();
        let names = |s: tracing::Span| s.metadata().map(|m| m.name());
        let mut seen = vec![names(tracing::Span::current())];
        {
            let inner = info_span!(target: "app", "inner");
            let _i = inner.enter();
            seen.push(names(tracing::Span::current()));
            let kept = tracing::Span::current(); // a second handle
            drop(_i);
            drop(inner);
            seen.push(kept.metadata().map(|m| m.name())); // still alive
        }
        seen.push(names(tracing::Span::current()));
        seen
    });
    assert_eq!(
        current,
        [Some("outer"), Some("inner"), Some("inner"), Some("outer")]
    );
    guard.stop().unwrap();
    let (slices, _) = decode(&trace);
    assert_eq!(
        instants(&slices),
        set(&[
            "INFO app kept",
            "DEBUG app app debug",
            "WARN other other warn"
        ])
    );
    let spans: BTreeSet<&str> = span_names(&slices).into_iter().collect();
    assert_eq!(
        spans,
        BTreeSet::from(["kept_span", "debug_span", "outer", "inner"])
    );
    assert_well_nested(&slices);
}

/// The span table reuses a closed span's slot state in place: nothing of a
/// closed span (values, recorded fields, thread) may show in the next span
/// created there.
#[test]
fn subscriber_spans_in_reused_slots_start_clean() {
    spans_in_reused_slots_start_clean(Via::Subscriber);
}

/// The layer keeps span state in the same table, reused the same way.
#[test]
fn layer_spans_in_reused_slots_start_clean() {
    spans_in_reused_slots_start_clean(Via::Layer);
}

fn spans_in_reused_slots_start_clean(via: Via) {
    let _s = serial();
    let trace = scratch(&format!("reuse-{via:?}")).join("reuse.pftrace");
    let (dispatch, guard) = start(&trace, via);
    tracing::dispatcher::with_default(&dispatch, || {
        for i in 0..50u64 {
            let a = info_span!("with_fields", i, note = tracing::field::Empty);
            a.record("note", "recorded");
            a.in_scope(|| {});
            drop(a);
            info_span!("bare").in_scope(|| {});
            let late = info_span!(
                "late",
                i = tracing::field::Empty,
                other = tracing::field::Empty
            );
            late.record("other", 7u64);
            late.in_scope(|| {});
        }
    });
    guard.stop().unwrap();
    let (slices, _) = perfetto_slices(&common::perfetto_model_clean(&trace));
    let bare: Vec<&Slice> = slices.iter().filter(|s| s.name == "bare").collect();
    let with: Vec<&Slice> = slices.iter().filter(|s| s.name == "with_fields").collect();
    assert_eq!((bare.len(), with.len()), (50, 50));
    for s in &bare {
        assert!(
            s.args.as_object().is_none_or(|a| a.is_empty()),
            "a bare span carries nothing of the span before it: {:?}",
            s.args
        );
    }
    let late: Vec<&Slice> = slices.iter().filter(|s| s.name == "late").collect();
    assert_eq!(late.len(), 50);
    for s in &late {
        assert_eq!(s.args, json!({"other": 7}), "only what this span recorded");
    }
    for (i, s) in with.iter().enumerate() {
        assert_eq!(s.args["i"], json!(i), "{:?}", s.args);
        assert_eq!(s.args["note"], json!("recorded"), "{:?}", s.args);
    }
}

// ---------------------------------------------------------------------------
// Categories switched while spans and events run

/// The same call sites, run three times: `app::late` off, then on, then off
/// again. The subscriber lets `tracing` cache its answer per call site, so
/// this checks that a switch reaches call sites that ran before it. The
/// `Debug` and `Display` values are formatted in pieces across word
/// boundaries (straight into the record's words).
fn switching_workload() {
    for round in 0..3u64 {
        match round {
            1 => ringtrace::enable_categories(["app::late"]),
            2 => ringtrace::disable_categories(["app::late"]),
            _ => {}
        }
        let _s = info_span!(target: "app::late", "late_span", round).entered();
        info!(target: "app::late", round, "late event");
        info!(
            target: "app",
            round,
            list = ?[1u8, 22, 3],
            text = %"nine byte",
            "always {}",
            "formatted"
        );
    }
}

fn check_switching(trace: &Path) {
    let (slices, _) = decode(trace);
    let rounds = |name: &str| -> Vec<Value> {
        slices
            .iter()
            .filter(|s| s.name == name)
            .map(|s| s.args["round"].clone())
            .collect()
    };
    assert_eq!(rounds("late_span"), [json!(1)]);
    let events: Vec<&Slice> = slices.iter().filter(|s| s.instant).collect();
    let late: Vec<_> = events.iter().filter(|s| s.cat == "app::late").collect();
    assert_eq!(late.len(), 1);
    assert_eq!(late[0].args["round"], json!(1));
    assert_eq!(late[0].args["message"], json!("late event"));
    let always: Vec<_> = events.iter().filter(|s| s.cat == "app").collect();
    assert_eq!(always.len(), 3);
    for (i, s) in always.iter().enumerate() {
        assert_eq!(
            s.args,
            json!({
                "round": i,
                "list": "[1, 22, 3]",
                "text": "nine byte",
                "message": "always formatted",
                "level": "INFO"
            })
        );
    }
}

#[test]
fn categories_switched_while_running_reach_every_call_site() {
    let _s = serial();
    let dir = scratch("switching");
    for (via, file) in [
        (Via::Subscriber, "sub.pftrace"),
        (Via::Subscriber, "sub.json"),
        (Via::Layer, "layer.pftrace"),
    ] {
        let trace = dir.join(file);
        let (dispatch, guard) = match via {
            Via::Layer => {
                let (layer, guard) = ringtrace::builder()
                    .output(&trace)
                    .disable_categories(["app::late"])
                    .layer()
                    .unwrap();
                (
                    Dispatch::new(tracing_subscriber::registry().with(layer)),
                    guard,
                )
            }
            Via::Subscriber => {
                let (subscriber, guard) = ringtrace::builder()
                    .output(&trace)
                    .disable_categories(["app::late"])
                    .subscriber()
                    .unwrap();
                (Dispatch::new(subscriber), guard)
            }
        };
        on_thread("switching", &dispatch, switching_workload);
        guard.stop().unwrap();
        check_switching(&trace);
    }
}
