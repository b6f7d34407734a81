//! OTLP export (feature `otlp`) through the public API: the spans of kept
//! requests, through the layer and the subscriber, received by a collector
//! in a child Python process that decodes every request body with the
//! official OTLP schema (`tests/support/otlp_receiver.py`); each span is
//! checked against what the program did, counted here. Faults: a collector
//! down at the start or mid-run, 503 with `Retry-After`, a receiver that
//! reads one byte a second.

mod common;

use common::scratch;
use common::slices::serial;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tracing::dispatcher::{self, Dispatch};
use tracing::{error, info, info_span};
use tracing_subscriber::layer::SubscriberExt;

use ringtrace_test_support::otlp::OtlpReceiver as Receiver;

fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

#[derive(Clone, Copy, Debug)]
enum Via {
    Layer,
    Subscriber,
}

fn start(b: ringtrace::Builder, via: Via) -> (Dispatch, ringtrace::TraceGuard) {
    match via {
        Via::Layer => {
            let (layer, guard) = b.layer().unwrap();
            (
                Dispatch::new(tracing_subscriber::registry().with(layer)),
                guard,
            )
        }
        Via::Subscriber => {
            let (s, guard) = b.subscriber().unwrap();
            (Dispatch::new(s), guard)
        }
    }
}

#[derive(Debug)]
struct Debugged {
    #[allow(dead_code)]
    id: u32,
}

/// `n` requests: a root `request` (server kind, typed fields) with a child
/// `query` made on another thread under it, an event inside the child and,
/// for odd requests, an error event inside the root.
fn requests(d: &Dispatch, n: u64) {
    dispatcher::with_default(d, || {
        for i in 0..n {
            let root = info_span!(
                "request",
                otel.kind = "server",
                i = i as i64,
                big = u64::MAX,
                ratio = 0.5,
                ok = true,
                path = "/items",
                who = ?Debugged { id: 7 },
            );
            let _e = root.enter();
            if i % 2 == 1 {
                error!(code = 500i64, "request failed");
            }
            let d2 = d.clone();
            let parent = root.clone();
            std::thread::spawn(move || {
                dispatcher::with_default(&d2, || {
                    let q = info_span!(parent: &parent, "query", rows = 3u64);
                    let _e = q.enter();
                    info!(table = "items", "query done");
                })
            })
            .join()
            .unwrap();
        }
    });
}

/// Checks the spans of `requests(n)` as received, made between `t0` and
/// `t1` (Unix ns).
fn check_requests(spans: &[Value], n: u64, t0: u64, t1: u64) {
    assert_eq!(spans.len() as u64, 2 * n, "every span, once");
    let by_id: BTreeMap<&str, &Value> = spans
        .iter()
        .map(|s| (s["span_id"].as_str().unwrap(), s))
        .collect();
    assert_eq!(by_id.len(), spans.len(), "span ids are distinct");
    let mut traces = BTreeSet::new();
    let mut seen_i = BTreeSet::new();
    for s in spans {
        let trace = s["trace_id"].as_str().unwrap();
        assert_eq!(trace.len(), 32);
        assert_ne!(trace, "0".repeat(32));
        assert_eq!(s["span_id"].as_str().unwrap().len(), 16);
        let (start, end) = (s["start"].as_u64().unwrap(), s["end"].as_u64().unwrap());
        assert!(
            t0 <= start && start <= end && end <= t1,
            "{t0} {start} {end} {t1}"
        );
        assert_eq!(s["scope"], "otlp", "the target is the scope");
        let res = &s["resource"];
        assert_eq!(res["service.name"], serde_json::json!(["str", "otlp-test"]));
        assert_eq!(
            res["process.pid"],
            serde_json::json!(["int", std::process::id()])
        );
        assert_eq!(
            res["telemetry.sdk.name"],
            serde_json::json!(["str", "ringtrace"])
        );
        assert_eq!(
            res["telemetry.sdk.language"],
            serde_json::json!(["str", "rust"])
        );
        assert_eq!(
            res["deployment.environment"],
            serde_json::json!(["str", "test"])
        );
        assert!(res["host.name"][1].as_str().is_some_and(|h| !h.is_empty()));
        match s["name"].as_str().unwrap() {
            "request" => {
                assert!(traces.insert(trace), "a new trace per root");
                assert_eq!(s["parent_span_id"], "", "a root");
                assert_eq!(s["kind"], 2, "otel.kind = server");
                let a = &s["attributes"];
                let i = a["i"][1].as_i64().unwrap();
                assert!(seen_i.insert(i));
                assert_eq!(a["i"][0], "int");
                assert_eq!(a["big"], serde_json::json!(["str", u64::MAX.to_string()]));
                assert_eq!(a["ratio"], serde_json::json!(["double", 0.5]));
                assert_eq!(a["ok"], serde_json::json!(["bool", true]));
                assert_eq!(a["path"], serde_json::json!(["str", "/items"]));
                assert_eq!(a["who"], serde_json::json!(["str", "Debugged { id: 7 }"]));
                assert!(a.get("otel.kind").is_none());
                let events = s["events"].as_array().unwrap();
                if i % 2 == 1 {
                    assert_eq!(events.len(), 1, "{s}");
                    let e = &events[0];
                    assert_eq!(e["name"], "request failed");
                    assert_eq!(e["attributes"]["code"], serde_json::json!(["int", 500]));
                    assert_eq!(
                        e["attributes"]["level"],
                        serde_json::json!(["str", "ERROR"])
                    );
                    let t = e["time"].as_u64().unwrap();
                    assert!(start <= t && t <= end);
                    assert_eq!(s["status"]["code"], 2, "an error event: status ERROR");
                } else {
                    assert!(events.is_empty(), "{s}");
                    assert_eq!(s["status"]["code"], 0);
                }
            }
            "query" => {
                let parent = by_id[s["parent_span_id"].as_str().unwrap()];
                assert_eq!(parent["name"], "request");
                assert_eq!(parent["trace_id"], s["trace_id"], "the parent's trace");
                assert!(parent["start"].as_u64() <= s["start"].as_u64());
                assert!(s["end"].as_u64() <= parent["end"].as_u64());
                assert_eq!(s["kind"], 1, "internal");
                assert_eq!(s["attributes"]["rows"], serde_json::json!(["int", 3]));
                let events = s["events"].as_array().unwrap();
                assert_eq!(events.len(), 1, "{s}");
                assert_eq!(events[0]["name"], "query done");
                assert_eq!(
                    events[0]["attributes"]["table"],
                    serde_json::json!(["str", "items"])
                );
            }
            other => panic!("a span the program did not make: {other}"),
        }
    }
    assert_eq!(seen_i.len() as u64, n);
}

fn builder(endpoint: &str) -> ringtrace::Builder {
    ringtrace::builder()
        .otlp(endpoint)
        .service_name("otlp-test")
        .resource_attribute("deployment.environment", "test")
}

fn export(via: Via, file: bool) {
    let _one = serial();
    let rx = Receiver::start("otlp-export", "normal");
    let trace = scratch("otlp-file").join("t.pftrace");
    let mut b = builder(&rx.endpoint());
    if file {
        b = b.output(&trace);
    }
    let t0 = unix_ns();
    let (d, guard) = start(b, via);
    requests(&d, 20);
    let stats = guard.stop().unwrap();
    let t1 = unix_ns();
    assert_eq!(stats.otlp_spans_exported, 40, "{stats:?}");
    assert_eq!(
        (stats.otlp_spans_dropped, stats.otlp_events_dropped),
        (0, 0)
    );
    check_requests(&rx.spans(), 20, t0, t1);
    if file {
        let model = common::perfetto_model_clean(&trace);
        let names = model["slices"].as_array().unwrap();
        let count = |n: &str| names.iter().filter(|s| s["name"] == n).count();
        assert_eq!((count("request"), count("query")), (20, 20));
    }
}

#[test]
fn the_subscriber_exports_with_its_file() {
    export(Via::Subscriber, true);
}

#[test]
fn the_layer_exports_without_a_file() {
    export(Via::Layer, false);
}

/// A flusher pass holding more spans than the exporter's queue bounds
/// (2,048), with a collector that keeps up, is exported whole: the bound
/// is for an exporter that is behind, not for a busy pass.
#[test]
fn a_pass_past_the_queue_bound_is_exported_whole() {
    let _one = serial();
    let rx = Receiver::start("otlp-burst", "normal");
    let (d, guard) = start(
        builder(&rx.endpoint())
            .buffer_bytes_per_thread(8 << 20)
            .flush_interval(Duration::from_secs(3600)),
        Via::Layer,
    );
    dispatcher::with_default(&d, || {
        for _ in 0..2300 {
            info_span!("burst").in_scope(|| {});
        }
    });
    // One pass takes the 2,300 spans.
    guard.flush();
    let stats = guard.stop().unwrap();
    assert_eq!(
        (stats.otlp_spans_exported, stats.otlp_spans_dropped),
        (2300, 0),
        "{stats:?}"
    );
    assert_eq!(rx.wait_spans(2300, Duration::from_secs(30)).len(), 2300);
}

/// `flush()` sends the spans recorded so far at once, not after the
/// exporter's batch delay (1 s).
#[test]
fn a_flush_sends_at_once() {
    let _one = serial();
    let rx = Receiver::start("otlp-flush", "normal");
    let (d, guard) = start(builder(&rx.endpoint()), Via::Layer);
    dispatcher::with_default(&d, || {
        for _ in 0..5 {
            info_span!("flushed").in_scope(|| {});
        }
    });
    let t = Instant::now();
    guard.flush();
    let spans = rx.wait_spans(5, Duration::from_millis(600));
    assert_eq!(spans.len(), 5, "after {:?}", t.elapsed());
    guard.stop().unwrap();
}

/// Spans made, exported and dropped add up, and the stop returns within
/// its documented timeout.
fn faulty(endpoint: &str, mid: impl FnOnce(), n: u64) -> (ringtrace::Stats, Duration) {
    let (d, guard) = start(builder(endpoint), Via::Subscriber);
    requests(&d, n);
    ringtrace::flush();
    mid();
    requests(&d, n);
    let t = Instant::now();
    let stats = guard.stop().unwrap();
    let took = t.elapsed();
    assert_eq!(
        stats.otlp_spans_exported + stats.otlp_spans_dropped,
        4 * n,
        "every span exported or counted dropped: {stats:?}"
    );
    assert!(
        took < ringtrace::OTLP_STOP_TIMEOUT + Duration::from_secs(1),
        "stop took {took:?}"
    );
    (stats, took)
}

#[test]
fn a_collector_down_at_the_start_drops_and_counts() {
    let _one = serial();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (stats, _) = faulty(&format!("http://127.0.0.1:{port}"), || {}, 10);
    assert_eq!(stats.otlp_spans_exported, 0);
    assert_eq!(stats.otlp_spans_dropped, 40);
    // Per `requests(10)`: 10 `query done`, 5 `request failed`.
    assert_eq!(stats.otlp_events_dropped, 30, "{stats:?}");
}

#[test]
fn a_collector_down_mid_run_drops_and_counts_the_rest() {
    let _one = serial();
    let rx = Receiver::start("otlp-mid", "normal");
    let endpoint = rx.endpoint();
    let mut rx = Some(rx);
    let mut before = 0;
    let (stats, _) = faulty(
        &endpoint,
        || {
            // The first requests' spans reach it; then it dies.
            let r = rx.take().unwrap();
            let t = Instant::now();
            while r.spans().len() < 20 && t.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(20));
            }
            before = r.spans().len() as u64;
            drop(r);
        },
        10,
    );
    assert_eq!(before, 20, "the first requests' spans arrived");
    assert_eq!(stats.otlp_spans_exported, 20, "{stats:?}");
    assert_eq!(stats.otlp_spans_dropped, 20, "{stats:?}");
}

#[test]
fn service_unavailable_is_retried_after_what_retry_after_says() {
    let _one = serial();
    let rx = Receiver::start("otlp-503", "status:503:2:1");
    let t0 = unix_ns();
    let (d, guard) = start(builder(&rx.endpoint()), Via::Layer);
    requests(&d, 5);
    // Past the 1 s batch and two answers of `Retry-After: 1`.
    std::thread::sleep(Duration::from_millis(3500));
    let stats = guard.stop().unwrap();
    let t1 = unix_ns();
    assert_eq!(
        (stats.otlp_spans_exported, stats.otlp_spans_dropped),
        (10, 0),
        "{stats:?}"
    );
    check_requests(&rx.spans(), 5, t0, t1);
    let at: Vec<f64> = rx
        .requests()
        .iter()
        .map(|r| r["at"].as_f64().unwrap())
        .collect();
    assert_eq!(at.len(), 3, "two refused, one taken");
    for w in at.windows(2) {
        assert!(
            w[1] - w[0] >= 0.95,
            "a retry waited Retry-After's second: {at:?}"
        );
    }
}

#[test]
fn a_receiver_reading_a_byte_a_second_does_not_hold_the_stop() {
    let _one = serial();
    let rx = Receiver::start("otlp-slow", "slow");
    let (stats, _) = faulty(&rx.endpoint(), || {}, 10);
    assert_eq!(stats.otlp_spans_exported, 0, "{stats:?}");
    assert_eq!(stats.otlp_spans_dropped, 40, "{stats:?}");
}

/// A caller's request: its headers, the `tracestate` its trace must carry
/// (`None`: none), and whether its `traceparent` is valid.
struct Incoming {
    path: &'static str,
    headers: Vec<(&'static str, String)>,
    state: Option<&'static str>,
    continues: Option<&'static str>,
}

fn incoming() -> Vec<Incoming> {
    let tp = |i: u8| {
        format!(
            "00-{:032x}-00f067aa0ba902b7-01",
            0x4bf9_2f35_0000_u64 + i as u64
        )
    };
    let members = |n: usize| {
        (0..n)
            .map(|i| format!("k{i}=v{i}"))
            .collect::<Vec<_>>()
            .join(",")
    };
    vec![
        Incoming {
            path: "/state",
            headers: vec![
                ("traceparent", tp(1)),
                (
                    "tracestate",
                    " congo=t61rcWkgMzE ,\t, rojo=00f067aa0ba902b7".into(),
                ),
                ("TraceState", "fw529a3039@dt=a b".into()),
            ],
            state: Some("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7,fw529a3039@dt=a b"),
            continues: Some("000000000000000000004bf92f350001"),
        },
        Incoming {
            path: "/bad-key",
            headers: vec![("traceparent", tp(2)), ("tracestate", "ok=1,Bad=2".into())],
            state: None,
            continues: Some("000000000000000000004bf92f350002"),
        },
        Incoming {
            path: "/33-members",
            headers: vec![("traceparent", tp(3)), ("tracestate", members(33))],
            state: None,
            continues: Some("000000000000000000004bf92f350003"),
        },
        Incoming {
            path: "/32-members",
            headers: vec![("traceparent", tp(4)), ("tracestate", members(32))],
            state: Some(Box::leak(members(32).into_boxed_str())),
            continues: Some("000000000000000000004bf92f350004"),
        },
        Incoming {
            path: "/duplicate",
            headers: vec![("traceparent", tp(5)), ("tracestate", "a=1,b=2,a=3".into())],
            state: None,
            continues: Some("000000000000000000004bf92f350005"),
        },
        Incoming {
            path: "/no-parent",
            headers: vec![("tracestate", "a=1".into())],
            state: None,
            continues: None,
        },
    ]
}

/// Each incoming request served as a service does: its root span with the
/// extracted `traceparent` and, as the caller sent it, `tracestate` (the
/// root validates it itself); a child `call` on the thread, which makes an
/// outgoing request (what it would send, returned per path), and a
/// grandchild `db` on another thread. Then a root of a trace of its own.
fn serve(d: &Dispatch) -> BTreeMap<&'static str, Vec<(&'static str, String)>> {
    let mut sent = BTreeMap::new();
    dispatcher::with_default(d, || {
        for req in incoming() {
            let h = || req.headers.iter().map(|(k, v)| (*k, v.as_str()));
            let parent = ringtrace::context::extract(h());
            let state = ringtrace::context::extract_tracestate(h());
            assert_eq!(
                state.as_ref().map(|s| s.as_str()),
                req.state,
                "{}",
                req.path
            );
            // The raw header, as a caller sent it: the root checks it too.
            let raw = req
                .headers
                .iter()
                .filter(|(k, _)| k.eq_ignore_ascii_case("tracestate"))
                .map(|(_, v)| v.as_str())
                .collect::<Vec<_>>()
                .join(",");
            let root = info_span!(
                "serve",
                path = req.path,
                traceparent = parent.as_ref().map(tracing::field::display),
                tracestate = match state {
                    Some(s) => s.to_string(),
                    None => raw,
                },
            );
            let _e = root.enter();
            let call = info_span!("call", otel.kind = "client");
            let _c = call.enter();
            let headers = ringtrace::context::current_headers();
            assert_eq!(
                ringtrace::context::current_tracestate().as_deref(),
                req.state,
                "{}",
                req.path
            );
            assert_eq!(
                Some(headers[0].1.clone()),
                ringtrace::context::current_traceparent()
            );
            sent.insert(req.path, headers);
            let d2 = d.clone();
            let parent = call.clone();
            std::thread::spawn(move || {
                dispatcher::with_default(&d2, || {
                    info_span!(parent: &parent, "db").in_scope(|| info!("queried"));
                })
            })
            .join()
            .unwrap();
        }
        info_span!("own", path = "/own").in_scope(|| {
            assert_eq!(ringtrace::context::current_tracestate(), None);
            assert_eq!(ringtrace::context::current_headers().len(), 1);
        });
    });
    assert_eq!(ringtrace::context::current_headers(), []);
    sent
}

fn carries_tracestate(via: Via) {
    let _one = serial();
    let rx = Receiver::start("otlp-tracestate", "normal");
    let (d, guard) = start(builder(&rx.endpoint()), via);
    let sent = serve(&d);
    let stats = guard.stop().unwrap();
    let n = incoming().len() as u64;
    assert_eq!(
        (stats.otlp_spans_exported, stats.otlp_spans_dropped),
        (3 * n + 1, 0),
        "{stats:?}"
    );
    let spans = rx.spans();
    assert_eq!(spans.len() as u64, 3 * n + 1);
    let by_id: BTreeMap<&str, &Value> = spans
        .iter()
        .map(|s| (s["span_id"].as_str().unwrap(), s))
        .collect();
    for req in incoming() {
        let root: Vec<&Value> = spans
            .iter()
            .filter(|s| s["name"] == "serve" && s["attributes"]["path"][1] == req.path)
            .collect();
        assert_eq!(root.len(), 1, "{}: {spans:#?}", req.path);
        let root = root[0];
        let trace = root["trace_id"].as_str().unwrap();
        if let Some(t) = req.continues {
            assert_eq!(trace, t, "{}: the traceparent holds", req.path);
            assert_eq!(root["parent_span_id"], "00f067aa0ba902b7");
        } else {
            assert_eq!(root["parent_span_id"], "", "{}", req.path);
        }
        assert!(
            root["attributes"].get("tracestate").is_none(),
            "{}: the field is the span's trace_state, not an attribute",
            req.path
        );
        let trace_spans: Vec<&Value> = spans.iter().filter(|s| s["trace_id"] == trace).collect();
        let names: BTreeSet<&str> = trace_spans
            .iter()
            .map(|s| s["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            BTreeSet::from(["serve", "call", "db"]),
            "{}",
            req.path
        );
        for s in &trace_spans {
            assert_eq!(
                s["trace_state"].as_str().unwrap(),
                req.state.unwrap_or(""),
                "{} {}",
                req.path,
                s["name"]
            );
            if s["name"] != "serve" {
                let parent = by_id[s["parent_span_id"].as_str().unwrap()];
                assert_eq!(parent["trace_id"], s["trace_id"]);
            }
        }
        let out = &sent[req.path];
        let call = trace_spans.iter().find(|s| s["name"] == "call").unwrap();
        assert_eq!(
            out[0],
            (
                "traceparent",
                format!("00-{trace}-{}-01", call["span_id"].as_str().unwrap())
            )
        );
        match req.state {
            Some(st) => assert_eq!(out[1..], [("tracestate", st.to_string())], "{}", req.path),
            None => assert_eq!(out.len(), 1, "{}: {out:?}", req.path),
        }
    }
    let own = spans.iter().find(|s| s["name"] == "own").unwrap();
    assert_eq!(own["trace_state"], "", "a trace of its own carries none");
}

/// A caller's valid `tracestate` goes with every span of its trace (the
/// root, a child, a grandchild on another thread) in the exported spans,
/// decoded with the official schema, and out again with the requests made
/// inside them; an invalid one (a bad key, 33 members, a key twice) is
/// dropped while the `traceparent` still holds, and none is taken without
/// a valid `traceparent`.
#[test]
fn a_callers_tracestate_goes_with_its_trace_through_the_subscriber() {
    carries_tracestate(Via::Subscriber);
}

#[test]
fn a_callers_tracestate_goes_with_its_trace_through_the_layer() {
    carries_tracestate(Via::Layer);
}
