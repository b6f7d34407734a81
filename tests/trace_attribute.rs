//! `#[ringtrace::trace]`: the slice covers the call, on free fns, methods and
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
        serde_json::json!([2, 42, 1, 7, 28, 3]),
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
    let mut poll_threads: Vec<&Value> = polls.iter().map(|p| &p["track_uuid"]).collect();
    poll_threads.sort_by_key(|v| v.to_string());
    poll_threads.dedup();
    assert!(
        poll_threads.len() > 1,
        "polls ran on several runtime threads"
    );
    let free_async = named("traced_async");
    assert!(free_async.iter().any(|s| kind(s) != "thread"));
}
