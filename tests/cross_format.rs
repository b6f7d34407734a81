//! The same multi-thread workload (scenario `cross_format`: nested macro and
//! typed slices, instants of every scope, counters with several series,
//! flows across threads, async ranges that begin on one thread and end on
//! another) written as Chrome JSON (with `X` scopes, and with `B`/`E`) and as
//! Perfetto gives the same slices, instants, counters, flows and async
//! ranges once both are decoded: JSON by the format's reading rules
//! (nesting by time, flow binding, async identity), Perfetto by the model of
//! trace_processor (`tests/support/perfetto_model.py`).
//!
//! The runs are separate processes, so timestamps differ: events are
//! compared by what they are (thread, name, category, nesting depth, args,
//! values, endpoints), as multisets.

mod common;

use common::*;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};

/// What a reader shows, in comparable form (sorted lists of JSON strings).
#[derive(Debug, Default, PartialEq)]
struct View {
    slices: Vec<String>,
    thread_instants: Vec<String>,
    process_instants: Vec<String>,
    global_instants: Vec<String>,
    counters: BTreeMap<String, Vec<String>>,
    flows: Vec<String>,
    async_ranges: Vec<String>,
}

impl View {
    fn sort(mut self) -> View {
        for v in [
            &mut self.slices,
            &mut self.thread_instants,
            &mut self.process_instants,
            &mut self.global_instants,
            &mut self.flows,
            &mut self.async_ranges,
        ] {
            v.sort();
        }
        for v in self.counters.values_mut() {
            v.sort();
        }
        self
    }
}

/// Threads by role: the named workers keep their name, the short-lived
/// handler threads are all "anon" (their tids differ between runs).
fn label(name: Option<&str>) -> String {
    match name {
        Some(n) if n.starts_with("xf-") => n.to_string(),
        _ => "anon".to_string(),
    }
}

fn num(v: &Value) -> f64 {
    v.as_f64().unwrap()
}

fn args_of(e: &Value) -> Value {
    e.get("args").cloned().unwrap_or(json!({}))
}

/// A slice as JSON readers build it.
#[derive(Clone)]
struct JSlice {
    tid: u64,
    name: String,
    cat: String,
    ts: f64,
    end: f64,
    args: Value,
    depth: usize,
}

/// The JSON trace as a reader of the format sees it (spec rules; Perfetto
/// writer notes §3.3).
fn json_view(events: &[Value]) -> View {
    let mut names: HashMap<u64, String> = HashMap::new();
    for e in events
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
    {
        names.insert(
            e["tid"].as_u64().unwrap(),
            e["args"]["name"].as_str().unwrap().into(),
        );
    }
    let thread = |tid: u64| label(names.get(&tid).map(|s| s.as_str()));
    // Slices: X, and B/E pairs matched per thread in time order.
    let mut slices: Vec<JSlice> = Vec::new();
    let mut per_tid: BTreeMap<u64, Vec<&Value>> = BTreeMap::new();
    for e in events {
        match e["ph"].as_str().unwrap() {
            "X" => slices.push(JSlice {
                tid: e["tid"].as_u64().unwrap(),
                name: e["name"].as_str().unwrap().into(),
                cat: e["cat"].as_str().unwrap().into(),
                ts: num(&e["ts"]),
                end: num(&e["ts"]) + num(&e["dur"]),
                args: args_of(e),
                depth: 0,
            }),
            "B" | "E" => per_tid
                .entry(e["tid"].as_u64().unwrap())
                .or_default()
                .push(e),
            _ => {}
        }
    }
    for evs in per_tid.values_mut() {
        evs.sort_by(|a, b| num(&a["ts"]).partial_cmp(&num(&b["ts"])).unwrap());
        let mut open: Vec<&Value> = Vec::new();
        for e in evs.iter() {
            if e["ph"] == "B" {
                open.push(e);
            } else {
                let b = open.pop().expect("E closes a B");
                let mut args = args_of(b);
                for (k, v) in args_of(e).as_object().unwrap() {
                    args[k] = v.clone(); // E args merge into the slice
                }
                slices.push(JSlice {
                    tid: b["tid"].as_u64().unwrap(),
                    name: b["name"].as_str().unwrap().into(),
                    cat: b["cat"].as_str().unwrap().into(),
                    ts: num(&b["ts"]),
                    end: num(&e["ts"]),
                    args,
                    depth: 0,
                });
            }
        }
    }
    // Depth: slices of the thread enclosing this one (longest first at a tie).
    slices.sort_by(|a, b| {
        (a.tid, a.ts, -a.end)
            .partial_cmp(&(b.tid, b.ts, -b.end))
            .unwrap()
    });
    let mut stack: Vec<(u64, f64)> = Vec::new();
    for s in slices.iter_mut() {
        stack.retain(|&(tid, end)| tid == s.tid && end >= s.end);
        s.depth = stack.len();
        stack.push((s.tid, s.end));
    }
    let depth_at = |tid: u64, ts: f64| {
        slices
            .iter()
            .filter(|s| s.tid == tid && s.ts <= ts && ts <= s.end)
            .count()
    };
    let mut view = View::default();
    for s in &slices {
        view.slices
            .push(json!([thread(s.tid), s.name, s.cat, s.depth, s.args]).to_string());
    }
    for e in events.iter().filter(|e| e["ph"] == "i" || e["ph"] == "R") {
        let (name, cat, args) = (&e["name"], &e["cat"], args_of(e));
        match e["s"].as_str().unwrap_or("t") {
            "g" => view
                .global_instants
                .push(json!([name, cat, args]).to_string()),
            "p" => view
                .process_instants
                .push(json!([name, cat, args]).to_string()),
            _ => {
                let tid = e["tid"].as_u64().unwrap();
                let d = depth_at(tid, num(&e["ts"]));
                view.thread_instants
                    .push(json!([thread(tid), name, cat, d, args]).to_string());
            }
        }
    }
    // Counters: a track per series, "<name> <series>"; the single series
    // "value" is the track "<name>" (ringtrace's naming in Perfetto).
    for e in events.iter().filter(|e| e["ph"] == "C") {
        for (k, v) in e["args"].as_object().unwrap() {
            let name = e["name"].as_str().unwrap();
            let track = if k == "value" {
                name.to_string()
            } else {
                format!("{name} {k}")
            };
            view.counters
                .entry(track)
                .or_default()
                .push(json!(num(v)).to_string());
        }
    }
    // Flows (v1): identity (id, cat, name); s/t bind to the enclosing
    // slice, f to the next slice of its thread (enclosing with bp "e").
    let innermost = |tid: u64, ts: f64| {
        slices
            .iter()
            .filter(|s| s.tid == tid && s.ts <= ts && ts <= s.end)
            .max_by_key(|s| s.depth)
    };
    let next = |tid: u64, ts: f64| {
        slices
            .iter()
            .filter(|s| s.tid == tid && s.ts >= ts)
            .min_by(|a, b| a.ts.partial_cmp(&b.ts).unwrap())
    };
    let mut chains: BTreeMap<String, Vec<&Value>> = BTreeMap::new();
    for e in events
        .iter()
        .filter(|e| ["s", "t", "f"].contains(&e["ph"].as_str().unwrap()))
    {
        let key = json!([e["id"], e["cat"], e["name"]]).to_string();
        chains.entry(key).or_default().push(e);
    }
    for chain in chains.values_mut() {
        chain.sort_by(|a, b| num(&a["ts"]).partial_cmp(&num(&b["ts"])).unwrap());
        let bound: Vec<&JSlice> = chain
            .iter()
            .filter_map(|e| {
                let (tid, ts) = (e["tid"].as_u64().unwrap(), num(&e["ts"]));
                if e["ph"] == "f" && e["bp"] != "e" {
                    next(tid, ts)
                } else {
                    innermost(tid, ts)
                }
            })
            .collect();
        for w in bound.windows(2) {
            let end = |s: &JSlice| json!([thread(s.tid), s.name, s.args]);
            view.flows.push(json!([end(w[0]), end(w[1])]).to_string());
        }
    }
    // Async: identity (cat, id, scope); ranges nest by name; n events are
    // instants of the innermost open range.
    let mut open: HashMap<String, Vec<(String, Value, Vec<String>)>> = HashMap::new();
    let mut sorted: Vec<&Value> = events
        .iter()
        .filter(|e| ["b", "n", "e"].contains(&e["ph"].as_str().unwrap()))
        .collect();
    sorted.sort_by(|a, b| num(&a["ts"]).partial_cmp(&num(&b["ts"])).unwrap());
    for e in sorted {
        let key = json!([e["cat"], e["id"], e["id2"], e["scope"]]).to_string();
        let stack = open.entry(key).or_default();
        match e["ph"].as_str().unwrap() {
            "b" => stack.push((e["name"].as_str().unwrap().into(), args_of(e), Vec::new())),
            "n" => {
                if let Some(top) = stack.last_mut() {
                    top.2.push(e["name"].as_str().unwrap().into());
                }
            }
            _ => {
                let pos = stack
                    .iter()
                    .rposition(|r| r.0 == e["name"].as_str().unwrap())
                    .unwrap();
                let (name, mut args, inst) = stack.remove(pos);
                for (k, v) in args_of(e).as_object().unwrap() {
                    args[k] = v.clone();
                }
                view.async_ranges
                    .push(json!([name, e["cat"], args, inst]).to_string());
            }
        }
    }
    view.sort()
}

/// The Perfetto trace as trace_processor shows it (the model's slices,
/// counters, flows and tracks).
fn perfetto_view(model: &Value) -> View {
    let tracks = model["tracks"].as_object().unwrap();
    let slices = model["slices"].as_array().unwrap();
    let kind = |uuid: &Value| -> (String, Option<String>) {
        match tracks.get(&uuid.to_string()) {
            Some(t) => (
                t["kind"].as_str().unwrap().to_string(),
                t["thread_name"].as_str().map(String::from),
            ),
            None => ("global".into(), None),
        }
    };
    // Flow points are instants carrying flow ids; readers bind the arrow to
    // the slice around them.
    let is_flow_point = |s: &Value| {
        s["instant"] == true
            && (!s["flow_ids"].as_array().unwrap().is_empty()
                || !s["terminating_flow_ids"].as_array().unwrap().is_empty())
    };
    let mut view = View::default();
    let mut async_children: HashMap<usize, Vec<String>> = HashMap::new();
    for s in slices.iter() {
        if s["instant"] == true && !is_flow_point(s) {
            if let ("track", Some(p)) = (kind(&s["track_uuid"]).0.as_str(), s["parent"].as_u64()) {
                async_children
                    .entry(p as usize)
                    .or_default()
                    .push(s["name"].as_str().unwrap().into());
            }
        }
    }
    for (i, s) in slices.iter().enumerate() {
        if is_flow_point(s) {
            continue;
        }
        let (k, tname) = kind(&s["track_uuid"]);
        let (name, cat, args, depth) = (&s["name"], &s["category"], &s["args"], &s["depth"]);
        match (k.as_str(), s["instant"] == true) {
            ("thread", false) => view
                .slices
                .push(json!([label(tname.as_deref()), name, cat, depth, args]).to_string()),
            ("thread", true) => view
                .thread_instants
                .push(json!([label(tname.as_deref()), name, cat, depth, args]).to_string()),
            ("process", true) => view
                .process_instants
                .push(json!([name, cat, args]).to_string()),
            ("global", true) => view
                .global_instants
                .push(json!([name, cat, args]).to_string()),
            ("track", false) => {
                let inst = async_children.remove(&i).unwrap_or_default();
                view.async_ranges
                    .push(json!([name, cat, args, inst]).to_string());
            }
            ("track", true) => {} // counted with their range
            other => panic!("unexpected slice {s} on {other:?}"),
        }
    }
    for t in tracks.values() {
        if t["kind"] != "counter" || t["counter"]["type"] == "COUNTER_THREAD_TIME_NS" {
            continue;
        }
        let values: Vec<String> = model["counters"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["track_uuid"] == t["uuid"])
            .map(|c| json!(num(&c["value"])).to_string())
            .collect();
        view.counters
            .insert(t["name"].as_str().unwrap().into(), values);
    }
    let endpoint = |i: &Value| {
        let mut s = &slices[i.as_u64().unwrap() as usize];
        if is_flow_point(s) {
            s = &slices[s["parent"].as_u64().expect("a flow point inside a slice") as usize];
        }
        let tname = kind(&s["track_uuid"]).1;
        json!([label(tname.as_deref()), s["name"], s["args"]])
    };
    for f in model["flows"].as_array().unwrap() {
        view.flows
            .push(json!([endpoint(&f["from"]), endpoint(&f["to"])]).to_string());
    }
    view.sort()
}

fn run(name: &str, ext: &str, envs: &[(&str, &str)]) -> (std::path::PathBuf, Value) {
    let dir = scratch(name);
    let trace = dir.join(format!("cross.{ext}"));
    let (out, expect) = run_scenario("cross_format", &trace, envs);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let expect = expect.unwrap();
    assert_eq!(expect["events_lost"], 0);
    (trace, expect)
}

fn assert_same(a: &View, b: &View, what: &str) {
    assert_eq!(a.slices, b.slices, "{what}: slices");
    assert_eq!(
        a.thread_instants, b.thread_instants,
        "{what}: thread instants"
    );
    assert_eq!(
        a.process_instants, b.process_instants,
        "{what}: process instants"
    );
    assert_eq!(
        a.global_instants, b.global_instants,
        "{what}: global instants"
    );
    assert_eq!(a.counters, b.counters, "{what}: counters");
    assert_eq!(a.flows, b.flows, "{what}: flows");
    assert_eq!(a.async_ranges, b.async_ranges, "{what}: async ranges");
}

#[test]
fn json_and_perfetto_of_one_workload_show_the_same_events() {
    let (pf, expect) = run("cross-pf", "pftrace", &[]);
    let (jx, _) = run("cross-json-x", "json", &[]);
    let (jbe, _) = run("cross-json-be", "json", &[("RT_BE", "1")]);
    let model = perfetto_model(&pf);
    assert_eq!(model["warnings"], json!([]));
    let p = perfetto_view(&model);
    let x = json_view(&json_events(&jx));
    let be = json_view(&json_events(&jbe));

    // The workload's shape, so an empty comparison cannot pass.
    let n = expect["threads"].as_u64().unwrap() * expect["iterations"].as_u64().unwrap();
    assert_eq!(p.slices.len() as u64, 3 * n, "outer, inner, handler");
    assert_eq!(p.thread_instants.len() as u64, n, "tick");
    assert_eq!(p.process_instants.len() as u64, n / 5);
    assert_eq!(p.global_instants.len() as u64, n / 5);
    assert_eq!(p.flows.len() as u64, n);
    assert_eq!(
        p.async_ranges.len() as u64,
        2 * n,
        "job, and step on a custom track"
    );
    assert_eq!(p.counters.len(), 5, "load 0..2, mix a, mix b");
    assert!(
        p.flows[0].contains("inner") && p.flows[0].contains("handler"),
        "{}",
        p.flows[0]
    );
    assert!(
        p.async_ranges[0].contains("handled"),
        "{}",
        p.async_ranges[0]
    );

    assert_same(&x, &p, "JSON (X) vs Perfetto");
    assert_same(&be, &p, "JSON (B/E) vs Perfetto");
}
