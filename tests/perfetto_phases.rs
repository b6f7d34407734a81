//! The Perfetto counterparts of the Trace Event Format's phases (scenario
//! `phases` written as .pftrace), decoded with the official schema: custom
//! and async tracks, instants on thread / process / global tracks, counter
//! tracks with several series and units, flows across threads, thread time,
//! process and thread metadata in the descriptors, log messages, stacks; and
//! the JSON-only phases absent.

mod common;

use common::*;
use serde_json::{json, Value};
use std::path::Path;

/// What the model does not expose, read with the official schema: the
/// process and thread descriptors' metadata fields and the events' stacks.
fn raw_details(trace: &Path) -> Value {
    let script = r#"
import json, sys
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
t = pb.Trace(); t.ParseFromString(open(sys.argv[1], 'rb').read())
procs, threads, stacks = [], [], []
for p in t.packet:
    if p.HasField('track_descriptor'):
        td = p.track_descriptor
        rank = td.sibling_order_rank if td.HasField('sibling_order_rank') else None
        if td.HasField('process'):
            pd = td.process
            procs.append({'name': pd.process_name, 'labels': list(pd.process_labels),
                          'sort': pd.legacy_sort_index if pd.HasField('legacy_sort_index') else None, 'rank': rank})
        if td.HasField('thread'):
            th = td.thread
            threads.append({'tid': th.tid, 'name': th.thread_name,
                            'sort': th.legacy_sort_index if th.HasField('legacy_sort_index') else None, 'rank': rank})
    if p.HasField('track_event') and p.track_event.HasField('callstack'):
        te = p.track_event
        stacks.append({'type': te.type, 'name': te.name if te.HasField('name') else None,
                       'frames': [f.function_name for f in te.callstack.frames]})
print(json.dumps({'procs': procs, 'threads': threads, 'stacks': stacks}))
"#;
    serde_json::from_str(&run_python(script, &[trace.to_str().unwrap()])).unwrap()
}

fn track<'a>(model: &'a Value, uuid: &Value) -> &'a Value {
    &model["tracks"][uuid.to_string()]
}

#[test]
fn every_phase_with_a_perfetto_counterpart() {
    let (trace, expect) =
        run_scenario_ok("phases-pf", "phases.pftrace", "phases", &[("RT_TT", "1")]);
    let model = perfetto_model(&trace);
    assert_eq!(model["skipped_packets"], 0);
    assert_eq!(model["warnings"], json!([]));
    let main = expect["tid"].as_i64().unwrap();
    let main_uuid = thread_uuid(&model, main);
    let tracks = model["tracks"].as_object().unwrap();
    let proc_uuid = tracks.values().find(|t| t["kind"] == "process").unwrap()["uuid"].clone();
    let slices = model["slices"].as_array().unwrap();
    let slice = |name: &str| -> &Value {
        let v: Vec<&Value> = slices.iter().filter(|s| s["name"] == name).collect();
        assert_eq!(v.len(), 1, "one slice {name}");
        v[0]
    };

    // Track uuids are unique: one process track, one track per thread.
    let procs: Vec<&Value> = tracks.values().filter(|t| t["kind"] == "process").collect();
    assert_eq!(procs.len(), 1);
    assert_eq!(
        procs[0]["process_name"], "phases-renamed",
        "set_process_name re-describes"
    );
    assert_eq!(track(&model, &main_uuid)["thread_name"], "main-thread");

    // Sort order and labels in the descriptors.
    let raw = raw_details(&trace);
    let last_proc = raw["procs"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last_proc["labels"], json!(["gamma", "delta"]));
    assert_eq!(
        (&last_proc["sort"], &last_proc["rank"]),
        (&json!(5), &json!(5))
    );
    assert_eq!(
        raw["procs"][0]["labels"],
        json!(["alpha", "beta"]),
        "from the builder"
    );
    assert_eq!(raw["procs"][0]["sort"], 3);
    let main_desc: Vec<&Value> = raw["threads"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["tid"].as_i64() == Some(main))
        .collect();
    let last = main_desc.last().unwrap();
    assert_eq!(
        (&last["name"], &last["sort"], &last["rank"]),
        (&json!("main-thread"), &json!(-1), &json!(-1))
    );

    // Slices on the thread track, nested; args of both ends merged.
    let outer = slice("macro_scope");
    assert_eq!(
        (&outer["track_uuid"], &outer["depth"]),
        (&main_uuid, &json!(0))
    );
    let dyn_ = slice("dyn_scope");
    assert_eq!(
        (&dyn_["track_uuid"], &dyn_["depth"]),
        (&main_uuid, &json!(1))
    );
    assert_eq!(dyn_["category"], "phases");
    assert_eq!(dyn_["args"], json!({"k": "w", "keep": true, "extra": 2}));
    let explicit = slice("explicit");
    assert_eq!(explicit["ts"], expect["explicit_start_ns"]);
    assert_eq!(
        (&explicit["dur"], &explicit["depth"]),
        (&json!(5000), &json!(1))
    );
    assert_eq!(explicit["args"], json!({"a": 1}));

    // Stacks as callstacks, rootmost frame first (begin and end).
    let stacks = raw["stacks"].as_array().unwrap();
    assert!(stacks.contains(&json!({"type": 1, "name": "dyn_scope", "frames": ["main", "work"]})));
    assert!(stacks.contains(&json!({"type": 2, "name": null, "frames": ["0x10", "0x20"]})));
    assert!(stacks.contains(&json!({"type": 1, "name": "explicit", "frames": ["0x1", "0x2"]})));

    // Thread time: a COUNTER_THREAD_TIME_NS track of the thread, with the
    // values at the begin and end of each slice.
    let tt: Vec<&Value> = tracks
        .values()
        .filter(|t| {
            t["counter"]["type"] == "COUNTER_THREAD_TIME_NS" && t["parent_uuid"] == main_uuid
        })
        .collect();
    assert_eq!(tt.len(), 1);
    let tt_values: Vec<(u64, f64)> = model["counters"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["track_uuid"] == tt[0]["uuid"])
        .map(|c| (c["ts"].as_u64().unwrap(), c["value"].as_f64().unwrap()))
        .collect();
    let es = expect["explicit_start_ns"].as_u64().unwrap();
    assert!(tt_values.contains(&(es, 100_000.0)) && tt_values.contains(&(es + 5000, 102_500.0)));
    assert!(
        tt_values.len() >= 6,
        "begin and end of macro_scope, dyn_scope, explicit..."
    );

    // Instants on the thread, process and global tracks.
    assert_eq!(slice("inst_t")["track_uuid"], main_uuid);
    assert_eq!(slice("inst_t")["args"], json!({"x": 1}));
    assert_eq!(slice("inst_p")["track_uuid"], proc_uuid);
    assert_eq!(slice("inst_g")["track_uuid"], 0);
    for n in ["inst_t", "inst_p", "inst_g", "firstLayout"] {
        assert_eq!(slice(n)["instant"], true);
    }
    assert_eq!(
        slice("firstLayout")["track_uuid"],
        main_uuid,
        "R: an instant"
    );

    // Counters: a track per series, int and double values, units.
    assert_eq!(
        counter_values(&model, "ctr cats")
            .iter()
            .map(|c| c.1)
            .collect::<Vec<_>>(),
        [0.0, 10.0]
    );
    assert_eq!(
        counter_values(&model, "ctr dogs")
            .iter()
            .map(|c| c.1)
            .collect::<Vec<_>>(),
        [7.5, 4.25]
    );
    assert_eq!(counter_values(&model, "bytes id: 0x9")[0].1, 3.0);
    assert_eq!(counter_values(&model, "macro_counter")[0].1, 17.0);
    let bytes = tracks
        .values()
        .find(|t| t["name"] == "bytes id: 0x9")
        .unwrap();
    assert_eq!(bytes["counter"]["unit"], "UNIT_SIZE_BYTES");
    assert_eq!(bytes["parent_uuid"], proc_uuid);

    // Async: local ids on a child of the process track, global and plain
    // ids on global tracks; the instant nests in its range.
    let req = slice("req");
    assert_eq!(req["args"], json!({"url": "/x", "status": 200}));
    assert_eq!(track(&model, &req["track_uuid"])["parent_uuid"], proc_uuid);
    let step = slice("step");
    assert_eq!(
        (&step["track_uuid"], &step["depth"]),
        (&req["track_uuid"], &json!(1))
    );
    for n in ["req_g", "plain"] {
        let s = slice(n);
        assert!(
            track(&model, &s["track_uuid"])["parent_uuid"].is_null(),
            "{n}: global"
        );
        assert!(s["dur"].as_i64().unwrap() >= 0);
    }
    let async_uuids: std::collections::HashSet<String> = ["req", "req_g", "plain"]
        .iter()
        .map(|n| slice(n)["track_uuid"].to_string())
        .collect();
    assert_eq!(async_uuids.len(), 3, "one track per async id");

    // Custom tracks: "q0" under "queues" under the process, never merged by
    // name; nested slices, the outer ended on another thread.
    let dispatch = slice("dispatch");
    let q0 = track(&model, &dispatch["track_uuid"]);
    assert_eq!((&q0["name"], &q0["kind"]), (&json!("q0"), &json!("track")));
    assert_eq!(q0["sibling_merge_behavior"], "SIBLING_MERGE_BEHAVIOR_NONE");
    let queues = track(&model, &q0["parent_uuid"]);
    assert_eq!(
        (&queues["name"], &queues["parent_uuid"]),
        (&json!("queues"), &proc_uuid)
    );
    assert_eq!(dispatch["args"], json!({"groups": 64}));
    assert!(dispatch["dur"].as_i64().unwrap() > 0);
    let sub = slice("sub");
    assert_eq!(
        (&sub["track_uuid"], &sub["depth"]),
        (&dispatch["track_uuid"], &json!(1))
    );
    assert_eq!(slice("fence")["track_uuid"], queues["uuid"]);

    // Flows across threads: s → t → f (next slice), and s → f (enclosing).
    let name_of = |i: &Value| -> String {
        let s = &slices[i.as_u64().unwrap() as usize];
        // A flow point is an instant; the format binds it to its parent slice.
        if s["instant"] == true && !s["parent"].is_null() {
            slices[s["parent"].as_u64().unwrap() as usize]["name"]
                .as_str()
                .unwrap()
                .to_string()
        } else {
            s["name"].as_str().unwrap().to_string()
        }
    };
    let edges: Vec<(String, String)> = model["flows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (name_of(&f["from"]), name_of(&f["to"])))
        .collect();
    assert_eq!(
        edges,
        [
            ("flow_src".to_string(), "flow_mid".to_string()),
            ("flow_mid".to_string(), "flow_dst".to_string()),
            ("flow2_src".to_string(), "flow2_dst".to_string())
        ]
    );
    assert_eq!(
        slice("flow_mid")["track_uuid"],
        thread_uuid(&model, expect["mid_tid"].as_i64().unwrap())
    );

    // A log message: interned body, priority, source location.
    let logs: Vec<&Value> = model["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| !e["log"].is_null())
        .collect();
    assert_eq!(logs.len(), 1);
    let log = &logs[0]["log"];
    assert_eq!(
        (&log["body"], &log["prio"]),
        (&json!("disk sda is 93% full"), &json!(5))
    );
    assert_eq!(
        log["source_location"]["file"],
        "src/bin/ringtrace-test-scenarios/phases.rs"
    );
    assert_eq!(logs[0]["track_uuid"], main_uuid);

    // JSON-only phases are not in the Perfetto trace.
    for n in [
        "smp",
        "MyObject",
        "MyObjectSubType",
        "dump",
        "clock_sync",
        "Ctx",
        "link",
        "cycles:HG",
    ] {
        assert!(slices.iter().all(|s| s["name"] != n), "{n} is JSON only");
    }
    assert_eq!(expect["events_lost"], 0);
}
