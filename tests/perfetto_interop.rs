//! Interop: traces written by ringtrace, decoded with the official Perfetto
//! schema (and, for JSON, a standard JSON parser), must give back exactly the
//! events that were recorded.

mod common;

use common::*;
use serde_json::{json, Value};

/// What a thread recorded, as the slices a reader should show, in begin order:
/// (name, category, args, depth, is_instant).
fn expected_slices(events: &[Value]) -> Vec<(String, String, Value, u64, bool)> {
    let mut out = Vec::new();
    let mut depth = 0u64;
    for e in events {
        match e["type"].as_str().unwrap() {
            "begin" => {
                out.push((
                    e["name"].as_str().unwrap().into(),
                    e["cat"].as_str().unwrap().into(),
                    e["args"].clone(),
                    depth,
                    false,
                ));
                depth += 1;
            }
            "end" => depth -= 1,
            "instant" => out.push((
                e["name"].as_str().unwrap().into(),
                e["cat"].as_str().unwrap().into(),
                e["args"].clone(),
                depth,
                true,
            )),
            _ => {}
        }
    }
    out
}

/// Perfetto has no empty arrays (a reader shows nothing for them): drop them
/// from an expectation, and the nulls a decoder reports for them.
fn without_empty_arrays(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(_, x)| !x.is_null() && !matches!(x, Value::Array(a) if a.is_empty()))
                .map(|(k, x)| (k.clone(), without_empty_arrays(x)))
                .collect(),
        ),
        other => other.clone(),
    }
}

#[test]
fn perfetto_trace_gives_back_every_recorded_event() {
    let (trace, expect) = run_scenario_ok("workload-pf", "workload.pftrace", "workload", &[]);
    let model = perfetto_model(&trace);
    assert_eq!(model["skipped_packets"], 0);
    let (start, end) = (
        expect["start_ns"].as_u64().unwrap(),
        expect["end_ns"].as_u64().unwrap(),
    );
    assert_eq!(expect["events_lost"], 0);

    // The process track: real pid and name.
    let pid = expect["pid"].as_i64().unwrap();
    let procs: Vec<&Value> = model["tracks"]
        .as_object()
        .unwrap()
        .values()
        .filter(|t| t["kind"] == "process")
        .collect();
    assert_eq!(procs.len(), 1);
    assert_eq!(procs[0]["pid"].as_i64(), Some(pid));
    assert_eq!(procs[0]["process_name"], "ringtrace-test-scenarios");

    let mut total_events = 0;
    for thread in expect["threads"].as_array().unwrap() {
        let tid = thread["tid"].as_i64().unwrap();
        let uuid = thread_uuid(&model, tid);
        let track = &model["tracks"][uuid.to_string()];
        assert_eq!(track["thread_name"], thread["name"]);
        assert_eq!(track["pid"].as_i64(), Some(pid));

        let want = expected_slices(thread["events"].as_array().unwrap());
        let got = thread_slices(&model, tid);
        assert_eq!(got.len(), want.len(), "slice count on thread {tid}");
        let mut last_ts = 0;
        for (g, (name, cat, args, depth, instant)) in got.iter().zip(&want) {
            assert_eq!(g["name"], name.as_str());
            assert_eq!(g["category"], cat.as_str());
            assert_eq!(g["depth"].as_u64(), Some(*depth), "depth of {name}");
            assert_eq!(
                without_empty_arrays(&g["args"]),
                without_empty_arrays(args),
                "args of {name}"
            );
            let ts = g["ts"].as_u64().unwrap();
            let dur = g["dur"].as_i64().unwrap();
            assert!(
                ts >= start && ts <= end,
                "{name} at {ts} outside [{start}, {end}]"
            );
            assert!(ts >= last_ts, "timestamps out of order");
            last_ts = ts;
            if *instant {
                assert_eq!(dur, 0);
            } else {
                assert!(dur >= 0 && ts + dur as u64 <= end, "{name} dur {dur}");
            }
            total_events += if *instant { 1 } else { 2 };
        }
        // Nesting: every inner slice lies within its outer one.
        let outers: Vec<&&Value> = got.iter().filter(|s| s["name"] == "outer").collect();
        let inners: Vec<&&Value> = got.iter().filter(|s| s["name"] == "inner").collect();
        for (o, i) in outers.iter().zip(&inners) {
            let (ots, odur) = (o["ts"].as_u64().unwrap(), o["dur"].as_u64().unwrap());
            let (its, idur) = (i["ts"].as_u64().unwrap(), i["dur"].as_u64().unwrap());
            assert!(its >= ots && its + idur <= ots + odur);
        }
    }

    // Counters: one process track per counter, every value back.
    for (name, scale) in [("progress", 1.0), ("ratio", 0.5)] {
        let got = counter_values(&model, name);
        let mut values: Vec<f64> = got.iter().map(|c| c.1).collect();
        values.sort_by(f64::total_cmp);
        let mut want: Vec<f64> = (0..4)
            .flat_map(|_| (0..50).map(move |i| i as f64 * scale))
            .collect();
        want.sort_by(f64::total_cmp);
        assert_eq!(values, want, "counter {name}");
        assert!(got.iter().all(|c| c.0 >= start && c.0 <= end));
        total_events += 200;
    }
    assert_eq!(expect["events_written"].as_u64(), Some(total_events));
}

#[test]
fn json_trace_gives_back_every_recorded_event() {
    let (trace, expect) = run_scenario_ok("workload-json", "workload.json", "workload", &[]);
    let events = json_events(&trace);
    let pid = expect["pid"].as_i64().unwrap();
    let (start, end) = (
        expect["start_ns"].as_f64().unwrap() / 1e3,
        expect["end_ns"].as_f64().unwrap() / 1e3,
    );
    assert!(events
        .iter()
        .any(|e| e["ph"] == "M" && e["name"] == "process_name" && e["pid"] == pid));
    for thread in expect["threads"].as_array().unwrap() {
        let tid = thread["tid"].as_i64().unwrap();
        assert!(events.iter().any(|e| e["ph"] == "M"
            && e["name"] == "thread_name"
            && e["tid"] == tid
            && e["args"]["name"] == thread["name"]));
        let mut mine: Vec<&Value> = events
            .iter()
            .filter(|e| e["tid"] == tid && e["ph"] != "M" && e["ph"] != "C")
            .collect();
        mine.sort_by(|a, b| {
            a["ts"]
                .as_f64()
                .unwrap()
                .total_cmp(&b["ts"].as_f64().unwrap())
        });
        let want = expected_slices(thread["events"].as_array().unwrap());
        assert_eq!(mine.len(), want.len());
        for (g, (name, cat, args, _, instant)) in mine.iter().zip(&want) {
            assert_eq!(g["name"], name.as_str());
            assert_eq!(g["cat"], cat.as_str());
            assert_eq!(g["pid"], pid);
            assert_eq!(g["ph"], if *instant { "i" } else { "X" });
            let mut want_args = args.clone();
            if let Some(p) = want_args.get_mut("ptr") {
                *p = json!("0xdeadbeef"); // JSON has no pointer type: written as a hex string
            }
            assert_eq!(g["args"], want_args, "args of {name}");
            let ts = g["ts"].as_f64().unwrap();
            assert!(ts >= start - 0.001 && ts <= end + 0.001);
            if !*instant {
                assert!(g["dur"].as_f64().unwrap() >= 0.0);
            }
        }
    }
    let counters: Vec<&Value> = events.iter().filter(|e| e["ph"] == "C").collect();
    assert_eq!(counters.len(), 400);
}

#[test]
fn losses_in_drop_mode_are_counted_and_marked() {
    let (trace, expect) = run_scenario_ok("drop", "drop.pftrace", "drop_mode_loss", &[]);
    let model = perfetto_model(&trace);
    let lost = expect["events_lost"].as_u64().unwrap();
    assert!(lost > 0, "a 4 KiB ring must overflow");
    // Every record is either in the trace or counted lost, and the trace says so.
    let written: u64 = model["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| {
            e["name"] == "spin"
                || (e["type"] == "SLICE_END" && e["args"].get("ringtrace.end_lost").is_none())
        })
        .count() as u64;
    assert_eq!(written + lost, expect["records"].as_u64().unwrap());
    assert_eq!(lost_marked(&model), lost);
    let marks: Vec<&Value> = model["sequences"]
        .as_object()
        .unwrap()
        .values()
        .flat_map(|s| s["loss_marks"].as_array().unwrap())
        .collect();
    assert!(
        !marks.is_empty(),
        "previous_packet_dropped is set after a loss"
    );
    assert!(marks
        .iter()
        .all(|m| m["previous_packet_dropped"].as_u64().unwrap() & 1 == 1));
}

#[test]
fn flight_recorder_keeps_the_newest_events() {
    let (trace, expect) = run_scenario_ok("overwrite", "overwrite.pftrace", "overwrite_mode", &[]);
    let model = perfetto_model(&trace);
    let kept: Vec<u64> = model["slices"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["name"] == "sample")
        .map(|s| s["args"]["i"].as_u64().unwrap())
        .collect();
    let records = expect["records"].as_u64().unwrap();
    assert!(!kept.is_empty() && (kept.len() as u64) < records);
    assert_eq!(*kept.last().unwrap(), expect["last"].as_u64().unwrap());
    // The newest, contiguous, except where the ring went round between two
    // drains (the flusher fell behind, e.g. in a debug build on a loaded
    // machine): a hole the producer overwrote, counted and marked.
    let holes: u64 = kept.windows(2).map(|w| w[1] - w[0] - 1).sum();
    assert!(
        holes <= lost_marked(&model),
        "the kept events are the newest; {holes} missing inside, not all marked"
    );
    assert_eq!(
        kept.len() as u64 + expect["events_lost"].as_u64().unwrap(),
        records
    );
    assert_eq!(lost_marked(&model), expect["events_lost"].as_u64().unwrap());
}

#[test]
fn categories_switch_at_run_time() {
    let dir = scratch("categories");
    let trace = dir.join("cats.pftrace");
    let (out, expect) = run_scenario("categories", &trace, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let model = perfetto_model(&trace);
    let got: Vec<Value> = model["slices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| json!([s["name"], s["args"]["phase"]]))
        .collect();
    assert_eq!(Value::Array(got), expect.unwrap()["expected"]);
}

#[test]
fn oversized_events_are_dropped_and_counted() {
    let (trace, expect) = run_scenario_ok("oversized", "big.pftrace", "oversized", &[]);
    assert_eq!(expect["events_oversized"], 1);
    assert_eq!(expect["events_lost"], 1);
    let model = perfetto_model(&trace);
    let names: Vec<&str> = model["slices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"before") && names.contains(&"after") && !names.contains(&"huge"));
    assert_eq!(lost_marked(&model), 1);
}

#[test]
fn unwritable_output_fails_at_start() {
    let err = ringtrace::builder()
        .output("/nonexistent-dir/sub/trace.pftrace")
        .start()
        .err()
        .expect("must fail");
    assert!(matches!(err, ringtrace::Error::Io { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("/nonexistent-dir/sub/trace.pftrace"),
        "{err}"
    );
    let err = ringtrace::builder()
        .output("trace.txt")
        .start()
        .err()
        .expect("must fail");
    assert!(matches!(err, ringtrace::Error::UnknownFormat(_)));
}

#[test]
fn compact_and_compressed_packets_decode_the_same_and_stay_small() {
    let dir = scratch("compact");
    let mut per_scope = Vec::new();
    let mut compact_slow_deltas = 0.0;
    for mode in ["default", "compact", "compressed"] {
        let trace = dir.join(format!("{mode}.pftrace"));
        let expect = dir.join(format!("{mode}.expect"));
        let expect = run_scenario_with("size", &trace, &expect, &[mode]);
        assert_eq!(expect["events_lost"], 0);
        let model = perfetto_model(&trace);
        assert_eq!(model["skipped_packets"], 0);
        let slices = model["slices"].as_array().unwrap();
        assert_eq!(slices.len() as u64, expect["scopes"].as_u64().unwrap());
        let outer = slices
            .iter()
            .filter(|s| s["name"] == "outer" && s["depth"] == 0)
            .count();
        let inner = slices
            .iter()
            .filter(|s| s["name"] == "inner" && s["depth"] == 1)
            .count();
        assert_eq!((outer, inner), (3_000, 3_000), "{mode}");
        assert!(slices
            .iter()
            .all(|s| s["category"] == "bench" && s["dur"].as_i64().unwrap() >= 0));
        let bytes = std::fs::metadata(&trace).unwrap().len() as f64;
        per_scope.push(bytes / expect["scopes"].as_f64().unwrap());
        if mode == "compact" {
            compact_slow_deltas = slow_delta_bytes(&trace) / expect["scopes"].as_f64().unwrap();
        }
    }
    // The bound is on what the encoder decides, not on how fast this (debug)
    // build recorded: each event's timestamp is a varint delta in ns, one
    // byte while events are under 128 ns apart and two when a loaded machine
    // slows the recording thread down (then nearly every event), which alone
    // adds 2 bytes per scope.
    let compact = per_scope[1] - compact_slow_deltas;
    assert!(
        compact <= 26.0,
        "compact: {compact:.1} bytes per scope with one-byte deltas ({:.1} as written)",
        per_scope[1]
    );
    assert!(per_scope[1] < per_scope[0], "{per_scope:?}");
    assert!(
        per_scope[2] <= 8.0,
        "compressed: {:.1} bytes per scope",
        per_scope[2]
    );
}

/// The bytes a Perfetto file's event timestamps take beyond one each: the
/// length of each track event's timestamp field (a delta, decoded with the
/// schema) as a varint, less one.
fn slow_delta_bytes(trace: &std::path::Path) -> f64 {
    use prost::Message as _;
    let bytes = std::fs::read(trace).unwrap();
    let decoded = ringtrace_protos::Trace::decode(bytes.as_slice()).unwrap();
    decoded
        .packet
        .iter()
        .filter(|p| p.track_event.is_some())
        .filter_map(|p| p.timestamp)
        .map(|ts| (prost::encoding::encoded_len_varint(ts) - 1) as f64)
        .sum()
}
