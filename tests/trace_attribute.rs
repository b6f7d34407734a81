//! `#[ringtrace::traced]`: the slice covers the call, on free fns, methods and
//! `async fn` (an async range for the whole call plus a slice per poll on the
//! thread that ran it).

mod common;

use common::*;
use serde_json::Value;

#[test]
fn trace_attribute_covers_sync_and_async_calls() {
    let (trace, expect) = run_scenario_ok("attribute", "attr.pftrace", "attribute", &[]);
    assert_eq!(
        expect["results"],
        serde_json::json!([2, 42, 1, 7, 28, 3, 5]),
        "behaviour unchanged"
    );
    let model = perfetto_model(&trace);
    let slices = model["slices"].as_array().unwrap();
    let named = |n: &str| -> Vec<&Value> { slices.iter().filter(|s| s["name"] == n).collect() };
    assert_eq!(named("traced_free").len(), 1);
    let renamed = named("renamed");
    assert_eq!(renamed.len(), 2);
    assert_eq!(renamed[0]["category"], "custom");
    assert_eq!(
        renamed[0]["args"],
        serde_json::json!({"x": 21, "label": "x"})
    );
    assert_eq!(named("method").len(), 1);

    // Each async call: one range on its own (non-thread) track spanning the
    // call, and at least one poll slice on a thread track inside it.
    let tracks = model["tracks"].as_object().unwrap();
    let kind = |s: &Value| {
        tracks[&s["track_uuid"].to_string()]["kind"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let calls = named("async_method");
    let ranges: Vec<&&Value> = calls.iter().filter(|s| kind(s) != "thread").collect();
    let polls: Vec<&&Value> = calls.iter().filter(|s| kind(s) == "thread").collect();
    assert_eq!(ranges.len(), expect["tasks"].as_u64().unwrap() as usize);
    assert!(
        polls.len() >= ranges.len() * 5,
        "every poll shows on a thread"
    );
    for r in &ranges {
        assert_eq!(r["category"], "async");
        assert!(
            r["dur"].as_i64().unwrap() >= 5_000_000,
            "the range covers the 5 sleeps"
        );
    }
    // The runtime may or may not move a task between its threads; this call
    // was polled once on the main thread and once on another, for certain:
    // one range, and each poll on the thread track of the thread that ran it.
    let handed = named("polled_on_two_threads");
    let handed_ranges = handed.iter().filter(|s| kind(s) != "thread").count();
    let mut poll_threads: Vec<String> = handed
        .iter()
        .filter(|s| kind(s) == "thread")
        .map(|p| p["track_uuid"].to_string())
        .collect();
    assert_eq!(handed_ranges, 1, "one range for the call");
    assert_eq!(poll_threads.len(), 2, "two polls: {handed:?}");
    poll_threads.dedup();
    assert_eq!(
        poll_threads.len(),
        2,
        "the two polls on two threads' tracks"
    );
    let free_async = named("traced_async");
    assert!(free_async.iter().any(|s| kind(s) != "thread"));
}
