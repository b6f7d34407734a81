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
