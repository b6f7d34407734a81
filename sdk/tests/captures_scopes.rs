//! Slow scopes captured whole (`Builder::capture_slow_scopes`, flight
//! recorder): on a service where about 1 request in 1,000 sleeps 50 ms,
//! each slow request, whichever way in recorded it (`trace_scope!`,
//! `#[traced]`, a typed `events` slice), is in a file of its own with its
//! slices from every thread (a helper thread's included), and nothing
//! outside its window; the fast requests (under the threshold) are not
//! captured.

mod common;

use common::captures::{assert_within, captures_in};
use common::scratch;
use common::slices::*;
use ringtrace::events::Category;
use std::time::Duration;

const BEFORE: Duration = Duration::from_millis(5);
const THRESHOLD: Duration = Duration::from_millis(20);
static SVC: Category = Category::new("svc");

#[ringtrace::traced(name = "handle traced")]
fn handle_traced(i: u64) {
    work(i);
}

/// The request's body: a scope naming it, a helper thread under the slow ones.
fn work(i: u64) {
    ringtrace::trace_scope!("work", id = i);
    if i % 1000 == 7 {
        let helper = std::thread::Builder::new()
            .name("helper".into())
            .spawn(move || {
                ringtrace::trace_scope!("helper", id = i);
                std::thread::sleep(Duration::from_millis(10));
            })
            .unwrap();
        std::thread::sleep(Duration::from_millis(50));
        helper.join().unwrap();
    } else {
        std::thread::sleep(Duration::from_micros(50));
    }
}

/// Requests on two workers, each recorded one of three ways by `i % 3`.
fn serve(requests: u64) -> Vec<u64> {
    let workers: Vec<_> = (0..2u64)
        .map(|w| {
            std::thread::Builder::new()
                .name(format!("worker-{w}"))
                .spawn(move || {
                    for i in (w..requests).step_by(2) {
                        match i % 3 {
                            0 => {
                                ringtrace::trace_scope!("handle scope");
                                work(i);
                            }
                            1 => handle_traced(i),
                            _ => {
                                let _s = SVC.scope("handle typed").begin();
                                work(i);
                            }
                        }
                    }
                })
                .unwrap()
        })
        .collect();
    workers.into_iter().for_each(|w| w.join().unwrap());
    (0..requests).filter(|i| i % 1000 == 7).collect()
}

fn slow_scopes_captured_whole(ext: &str) {
    let _one = serial();
    let dir = scratch(&format!("scopes_{ext}"));
    let trace = ringtrace::builder()
        .output(dir.join(format!("main.{ext}")))
        .overwrite(true)
        .capture_to(dir.join(format!("slow-{{name}}-{{n}}.{ext}")))
        .capture_before(BEFORE)
        .capture_interval(Duration::ZERO)
        // Every capture kept: a loaded machine stretches fast requests past
        // the threshold too, and the default (10 files) would remove the
        // oldest, the slow ones among them.
        .capture_files(1_000)
        .capture_slow_scopes(["handle*"], THRESHOLD)
        .start()
        .unwrap();
    let slow = serve(3000);
    let stats = trace.stop().unwrap();
    assert_eq!(slow, [7, 1007, 2007]); // one each way in: traced, typed, scope
                                       // A fast request the machine's load stretched past 20 ms is captured
                                       // too: at least the slow ones.
    assert!(stats.captures_fired >= 3, "{stats:?}");
    assert_eq!(stats.captures_suppressed, 0, "{stats:?}");
    let files = captures_in(&dir, "slow-", ext);
    assert_eq!(files.len() as u64, stats.captures_fired, "{files:?}");
    let mut found = Vec::new();
    for f in &files {
        // Slices of other requests may be cut by the window's ends.
        let (slices, _) = decode_as_is(f);
        let long: Vec<&Slice> = slices
            .iter()
            .filter(|s| s.name.starts_with("handle") && s.dur > THRESHOLD.as_nanos() as i64)
            .collect();
        // One slow request a file, or more when the machine's load stretched
        // a fast one beside it (its capture then holds both).
        assert!(!long.is_empty(), "{f:?}: a slow request");
        for req in &long {
            // The request's id: its `work` scope, on its thread, inside it.
            let inner: Vec<&Slice> = slices
                .iter()
                .filter(|s| {
                    s.name == "work"
                        && s.track == req.track
                        && s.ts >= req.ts
                        && s.end() <= req.end()
                })
                .collect();
            assert_eq!(inner.len(), 1, "{f:?}: its work scope");
            let id = inner[0].args["id"].as_u64().unwrap();
            found.push(id);
            if slow.contains(&id) {
                let helper: Vec<&Slice> = slices
                    .iter()
                    .filter(|s| s.name == "helper" && s.args["id"].as_u64() == Some(id))
                    .collect();
                assert_eq!(helper.len(), 1, "{f:?}: its helper");
                assert!(
                    helper[0].thread().starts_with("helper#"),
                    "from its own thread"
                );
                assert!(helper[0].ts >= req.ts && helper[0].end() <= req.end());
                let way = ["handle scope", "handle traced", "handle typed"][(id % 3) as usize];
                assert_eq!(req.name, way, "{f:?}");
            }
        }
        // Nothing outside the window: `BEFORE` before the slow slices' first
        // begin to their last end (JSON rounds to microseconds).
        // 20 us at the start: the capture converts its window with the
        // calibration when it is written, the file its slices with the one
        // when they were encoded (a refresh between moves them apart).
        let first = long.iter().map(|s| s.ts).min().unwrap();
        let last = long.iter().map(|s| s.end()).max().unwrap();
        let window = (first - BEFORE.as_nanos() as u64 - 20_000, last + 1_000);
        assert_within(f, &slices, window);
    }
    found.sort();
    for id in &slow {
        assert!(found.contains(id), "request {id} captured: {found:?}");
    }
}

#[test]
fn slow_scopes_captured_whole_perfetto() {
    slow_scopes_captured_whole("pftrace");
}

#[test]
fn slow_scopes_captured_whole_json() {
    slow_scopes_captured_whole("json");
}

/// Without the rule, or under the threshold: nothing captured.
#[test]
fn fast_scopes_not_captured() {
    let _one = serial();
    let dir = scratch("scopes_fast");
    let trace = ringtrace::builder()
        .output(dir.join("main.pftrace"))
        .overwrite(true)
        .capture_to(dir.join("slow-{name}-{n}.pftrace"))
        .capture_interval(Duration::ZERO)
        .capture_slow_scopes(["handle*"], Duration::from_millis(200))
        .start()
        .unwrap();
    for _ in 0..3 {
        ringtrace::trace_scope!("handle quick");
        std::thread::sleep(Duration::from_millis(30));
    }
    {
        // Matches no pattern, however long.
        ringtrace::trace_scope!("other");
        std::thread::sleep(Duration::from_millis(250));
    }
    std::thread::sleep(Duration::from_millis(30));
    let stats = trace.stop().unwrap();
    assert_eq!(stats.captures_fired, 0, "{stats:?}");
    assert!(captures_in(&dir, "slow-", "pftrace").is_empty());
}
