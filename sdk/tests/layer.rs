//! The `tracing` layer, end to end: what a user instruments with `tracing`
//! must come back, decoded with the official Perfetto schema (through
//! `tests/support/perfetto_model.py`) and parsed as JSON, as the slices,
//! instants, args, async ranges and flows that were recorded.
//!
//! A session is process-global, so the tests take a lock and run one at a
//! time; each has its own subscriber (`Dispatch`), set on every thread it uses.

use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, MutexGuard};
use tracing::dispatcher::{self, Dispatch};
use tracing::{debug, info, info_span, trace, warn, Level};
use tracing_subscriber::filter::{EnvFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::Layer;

// ---------------------------------------------------------------------------
// Helpers

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ringtrace-layer-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn python() -> String {
    std::env::var("RINGTRACE_PYTHON").unwrap_or_else(|_| "python3".to_string())
}

/// The Perfetto trace as a reader resolves it; fails on any rule it breaks.
fn perfetto_model(trace: &Path) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/support/perfetto_model.py");
    let out = Command::new(python())
        .arg(&script)
        .arg(trace)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e} (see scripts/test.sh)", python()));
    let model: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "decoder output is not JSON ({e}); stderr:\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert!(
        out.status.success() && model["errors"].as_array().is_some_and(|e| e.is_empty()),
        "the Perfetto decoder rejects {}: {:#}\nstderr: {}",
        trace.display(),
        model["errors"],
        String::from_utf8_lossy(&out.stderr)
    );
    let warnings = model["warnings"].as_array().unwrap();
    assert!(warnings.is_empty(), "decoder warnings: {warnings:#?}");
    model
}

fn json_events(trace: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(trace).unwrap();
    match serde_json::from_str::<Value>(&text).expect("the JSON trace is valid JSON") {
        Value::Array(events) => events,
        other => panic!("expected the bare array form, got {other}"),
    }
}

/// One slice or instant as a viewer shows it, from either format.
#[derive(Debug, Clone)]
struct Slice {
    /// `thread:<name>#<tid>` or `async:<key>`.
    track: String,
    name: String,
    cat: String,
    ts: u64,
    /// -1: never ended.
    dur: i64,
    depth: u64,
    instant: bool,
    args: Value,
}

impl Slice {
    fn end(&self) -> u64 {
        self.ts + self.dur.max(0) as u64
    }
    fn is_async(&self) -> bool {
        self.track.starts_with("async:")
    }
    fn thread(&self) -> &str {
        self.track.strip_prefix("thread:").unwrap_or("")
    }
}

/// A flow as (source slice index, destination slice index) into the slices.
type Flows = Vec<(usize, usize)>;

fn perfetto_slices(model: &Value) -> (Vec<Slice>, Flows) {
    let tracks = model["tracks"].as_object().unwrap();
    let label = |uuid: &Value| -> String {
        let t = &tracks[&uuid.to_string()];
        if t["kind"] == "thread" {
            format!(
                "thread:{}#{}",
                t["thread_name"].as_str().unwrap_or(""),
                t["tid"]
            )
        } else {
            format!("async:{uuid}")
        }
    };
    let slices: Vec<Slice> = model["slices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| Slice {
            track: label(&s["track_uuid"]),
            name: s["name"].as_str().unwrap_or("").to_string(),
            cat: s["category"].as_str().unwrap_or("").to_string(),
            ts: s["ts"].as_u64().unwrap(),
            dur: s["dur"].as_i64().unwrap(),
            depth: s["depth"].as_u64().unwrap(),
            instant: s["instant"].as_bool().unwrap(),
            args: s["args"].clone(),
        })
        .collect();
    let flows = model["flows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["from"].as_u64().unwrap() as usize,
                f["to"].as_u64().unwrap() as usize,
            )
        })
        .collect();
    (slices, flows)
}

fn ns(v: &Value) -> u64 {
    (v.as_f64().unwrap() * 1000.0).round() as u64
}

/// Slices of a JSON trace: `X` and `i` on threads (depth from nesting),
/// `b`/`e` pairs on async tracks; flows from v2 `bind_id`s.
fn json_slices(events: &[Value]) -> (Vec<Slice>, Flows) {
    let mut names: HashMap<i64, String> = HashMap::new();
    for e in events {
        if e["ph"] == "M" && e["name"] == "thread_name" {
            names.insert(
                e["tid"].as_i64().unwrap(),
                e["args"]["name"].as_str().unwrap().into(),
            );
        }
    }
    let mut slices = Vec::new();
    let mut binds: Vec<(String, bool, usize)> = Vec::new();
    let mut open: HashMap<String, usize> = HashMap::new();
    // Readers sort by timestamp; the file is in flush order (per thread).
    let mut events: Vec<&Value> = events.iter().collect();
    events.sort_by_key(|e| e.get("ts").map_or(0, ns));
    for e in events {
        let ph = e["ph"].as_str().unwrap();
        let tid = e["tid"].as_i64().unwrap_or(0);
        let track = format!("thread:{}#{tid}", names.get(&tid).map_or("", |s| s));
        let base = |track: String, dur: i64, instant: bool| Slice {
            track,
            name: e["name"].as_str().unwrap().into(),
            cat: e["cat"].as_str().unwrap_or("").into(),
            ts: ns(&e["ts"]),
            dur,
            depth: 0,
            instant,
            args: e.get("args").cloned().unwrap_or(json!({})),
        };
        match ph {
            "X" => {
                if let Some(id) = e.get("bind_id") {
                    binds.push((
                        id.as_str().unwrap().into(),
                        e.get("flow_in").is_some(),
                        slices.len(),
                    ));
                }
                slices.push(base(track, ns(&e["dur"]) as i64, false));
            }
            "i" => slices.push(base(track, 0, true)),
            "b" => {
                if let Some(id) = e.get("bind_id") {
                    binds.push((
                        id.as_str().unwrap().into(),
                        e.get("flow_in").is_some(),
                        slices.len(),
                    ));
                }
                let key = format!("{}:{}", e["cat"], e["id2"]["local"]);
                assert!(!open.contains_key(&key), "async id reused while open: {e}");
                open.insert(key.clone(), slices.len());
                slices.push(base(format!("async:{key}"), -1, false));
            }
            "e" => {
                let key = format!("{}:{}", e["cat"], e["id2"]["local"]);
                let i = open
                    .remove(&key)
                    .unwrap_or_else(|| panic!("`e` without `b`: {e}"));
                let s = &mut slices[i];
                assert_eq!(
                    s.name,
                    e["name"].as_str().unwrap(),
                    "e matches its b by name"
                );
                s.dur = (ns(&e["ts"]) - s.ts) as i64;
                if let Some(Value::Object(a)) = e.get("args") {
                    let args = s.args.as_object_mut().unwrap();
                    args.extend(a.clone());
                }
            }
            "M" => {}
            other => panic!("unexpected phase {other}: {e}"),
        }
    }
    // Depths from nesting, per track: longer first at equal ts.
    let mut by_track: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, s) in slices.iter().enumerate() {
        by_track.entry(s.track.clone()).or_default().push(i);
    }
    for idx in by_track.values_mut() {
        idx.sort_by_key(|&i| {
            (
                slices[i].ts,
                std::cmp::Reverse(slices[i].dur),
                slices[i].instant,
            )
        });
        let mut stack: Vec<u64> = Vec::new();
        for &i in idx.iter() {
            while stack.last().is_some_and(|&end| {
                end <= slices[i].ts && !(end == slices[i].ts && slices[i].instant)
            }) {
                stack.pop();
            }
            slices[i].depth = stack.len() as u64;
            if !slices[i].instant {
                stack.push(slices[i].end());
            }
        }
    }
    let mut flows = Vec::new();
    for (id, is_in, dst) in &binds {
        if !is_in {
            continue;
        }
        let src: Vec<usize> = binds
            .iter()
            .filter(|(i, inn, _)| i == id && !inn)
            .map(|b| b.2)
            .collect();
        assert_eq!(src.len(), 1, "one flow_out for bind_id {id}");
        flows.push((src[0], *dst));
    }
    for (id, is_in, _) in &binds {
        if !is_in {
            assert!(
                binds.iter().any(|(i, inn, _)| i == id && *inn),
                "flow_out {id} has no flow_in"
            );
        }
    }
    (slices, flows)
}

/// Every track's slices nest: each one is inside its parent or after it.
fn assert_well_nested(slices: &[Slice]) {
    let mut by_track: BTreeMap<&str, Vec<&Slice>> = BTreeMap::new();
    for s in slices.iter().filter(|s| !s.instant) {
        by_track.entry(&s.track).or_default().push(s);
    }
    for (track, mut v) in by_track {
        v.sort_by_key(|s| (s.ts, std::cmp::Reverse(s.dur)));
        let mut stack: Vec<&Slice> = Vec::new();
        for s in v {
            assert!(s.dur >= 0, "slice never ended on {track}: {s:?}");
            while stack.last().is_some_and(|p| p.end() <= s.ts) {
                stack.pop();
            }
            if let Some(p) = stack.last() {
                assert!(
                    s.end() <= p.end(),
                    "slices overlap on {track} without nesting:\n  {p:?}\n  {s:?}"
                );
            }
            stack.push(s);
        }
    }
}

fn no_loss_flags(slices: &[Slice]) {
    for s in slices {
        assert!(
            s.args.get("ringtrace.end_lost").is_none()
                && s.args.get("ringtrace.unfinished").is_none(),
            "a slice was closed by the encoder, not by its span: {s:?}"
        );
        assert_ne!(s.name, "ringtrace: events lost", "events were lost");
    }
}

fn decode(trace: &Path) -> (Vec<Slice>, Flows) {
    let (slices, flows) = if trace.extension().unwrap() == "json" {
        json_slices(&json_events(trace))
    } else {
        perfetto_slices(&perfetto_model(trace))
    };
    no_loss_flags(&slices);
    assert_well_nested(&slices);
    (slices, flows)
}

/// Runs `f` on a new thread named `name` with `dispatch` as its subscriber.
fn on_thread<R: Send + 'static>(
    name: &str,
    dispatch: &Dispatch,
    f: impl FnOnce() -> R + Send + 'static,
) -> R {
    let d = dispatch.clone();
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || dispatcher::with_default(&d, f))
        .unwrap()
        .join()
        .unwrap()
}

// ---------------------------------------------------------------------------
// Spans, fields, Span::record, events, #[instrument]

#[tracing::instrument(target = "app::db", fields(rows = tracing::field::Empty))]
fn query(table: &str, limit: u32) -> u64 {
    tracing::Span::current().record("rows", 42u64);
    debug!(target: "app::db", table, "query done");
    42
}

/// How spans reach ringtrace: its layer on the registry, or its own subscriber.
#[derive(Clone, Copy, Debug)]
enum Via {
    Layer,
    Subscriber,
}

fn start(trace: &Path, via: Via) -> (Dispatch, ringtrace::TraceGuard) {
    match via {
        Via::Layer => {
            let (layer, guard) = ringtrace::layer().output(trace).build().unwrap();
            (
                Dispatch::new(tracing_subscriber::registry().with(layer)),
                guard,
            )
        }
        Via::Subscriber => {
            let (subscriber, guard) = ringtrace::subscriber().output(trace).build().unwrap();
            (Dispatch::new(subscriber), guard)
        }
    }
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
    // Recorded while not entered: the next enter carries it.
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
        json!(["request", "app", 0, false, {"id": 7, "path": "/users/2", "ok": true}]),
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

#[test]
fn spans_events_and_records_perfetto() {
    let _s = serial();
    let trace = scratch("workload-pf").join("workload.pftrace");
    run_workload(&trace, Via::Layer);
    check_workload(&trace);
}

#[test]
fn spans_events_and_records_json() {
    let _s = serial();
    let trace = scratch("workload-json").join("workload.json");
    run_workload(&trace, Via::Layer);
    check_workload(&trace);
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
    let (layer, guard) = ringtrace::layer()
        .output(&trace)
        .disable_categories(["app::quiet"])
        .build()
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
    let spans: Vec<&str> = slices
        .iter()
        .filter(|s| !s.instant)
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(spans, ["kept_span"]);
    assert_eq!(
        counting.0.lock().unwrap().len(),
        6,
        "the other layer sees every event"
    );

    // EnvFilter, JSON output.
    let trace = dir.join("env.json");
    let (layer, guard) = ringtrace::layer().output(&trace).build().unwrap();
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
    let spans: BTreeSet<&str> = slices
        .iter()
        .filter(|s| !s.instant)
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(spans, BTreeSet::from(["kept_span", "debug_span"]));
}

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

fn run_tokio(trace: &Path, via: Via) -> u64 {
    let (dispatch, guard) = start(trace, via);
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

fn check_tokio(trace: &Path) {
    let (slices, _) = decode(trace);
    let mut polls: BTreeMap<u64, Vec<&Slice>> = BTreeMap::new();
    let mut ranges: BTreeMap<u64, Vec<&Slice>> = BTreeMap::new();
    for s in slices.iter().filter(|s| s.name == "task") {
        let i = s.args["i"].as_u64().unwrap();
        if s.is_async() {
            ranges.entry(i).or_default().push(s);
        } else {
            assert!(
                s.thread().starts_with("layer-worker#"),
                "polls run on workers: {s:?}"
            );
            polls.entry(i).or_default().push(s);
        }
    }
    assert_eq!(polls.len(), 16, "every task's polls are on thread tracks");
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
    assert!(run_tokio(&trace, Via::Layer) > 0);
    check_tokio(&trace);
}

#[test]
fn tokio_tasks_hopping_threads_json() {
    let _s = serial();
    let trace = scratch("tokio-json").join("tokio.json");
    assert!(run_tokio(&trace, Via::Layer) > 0);
    check_tokio(&trace);
}

// ---------------------------------------------------------------------------
// The registry-free subscriber: the same workloads give the same traces

#[test]
fn subscriber_spans_events_and_records_perfetto() {
    let _s = serial();
    let trace = scratch("sub-workload-pf").join("workload.pftrace");
    run_workload(&trace, Via::Subscriber);
    check_workload(&trace);
}

#[test]
fn subscriber_spans_events_and_records_json() {
    let _s = serial();
    let trace = scratch("sub-workload-json").join("workload.json");
    run_workload(&trace, Via::Subscriber);
    check_workload(&trace);
}

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
    assert!(run_tokio(&trace, Via::Subscriber) > 0);
    check_tokio(&trace);
}

#[test]
fn subscriber_composes_with_filters_and_tracks_the_current_span() {
    let _s = serial();
    let trace = scratch("sub-filters").join("env.pftrace");
    let (subscriber, guard) = ringtrace::subscriber()
        .output(&trace)
        .disable_categories(["app::quiet"])
        .build()
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
    let spans: BTreeSet<&str> = slices
        .iter()
        .filter(|s| !s.instant)
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(
        spans,
        BTreeSet::from(["kept_span", "debug_span", "outer", "inner"])
    );
    assert_well_nested(&slices);
}

#[test]
fn subscriber_frees_every_span() {
    // Spans made and dropped on many threads, some closed on another thread
    // than their own: every slot comes back (the table does not grow).
    let _s = serial();
    let trace = scratch("sub-free").join("free.pftrace");
    let (subscriber, guard) = ringtrace::subscriber().output(&trace).build().unwrap();
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
