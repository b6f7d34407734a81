//! Every phase of the Chrome Trace Event Format, emitted through the public
//! API (scenario `phases`), parsed with serde_json and checked field by field
//! against what `spec/trace-event-format.md` requires for that phase; in the
//! bare array with `X` scopes (default), and in the object form with `B`/`E`
//! scopes and thread time.

mod common;

use common::*;
use serde_json::{json, Value};

struct Trace {
    /// Every event, in file order.
    events: Vec<Value>,
    /// The whole file, parsed.
    top: Value,
    text: String,
    expect: Value,
}

fn run(name: &str, envs: &[(&str, &str)]) -> Trace {
    let dir = scratch(name);
    let trace = dir.join("phases.json");
    let (out, expect) = run_scenario("phases", &trace, envs);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&trace).unwrap();
    let top: Value = serde_json::from_str(&text).expect("the trace is valid JSON");
    Trace {
        events: json_events(&trace),
        top,
        text,
        expect: expect.unwrap(),
    }
}

impl Trace {
    fn pid(&self) -> u64 {
        self.expect["pid"].as_u64().unwrap()
    }
    fn tid(&self, key: &str) -> u64 {
        self.expect[key].as_u64().unwrap()
    }
    fn all(&self, ph: &str, name: &str) -> Vec<&Value> {
        self.events
            .iter()
            .filter(|e| e["ph"] == ph && e["name"] == name)
            .collect()
    }
    fn one(&self, ph: &str, name: &str) -> &Value {
        let v = self.all(ph, name);
        assert_eq!(v.len(), 1, "one {ph} event named {name}: {v:?}");
        v[0]
    }
}

/// Microseconds as the trace writes them, from nanoseconds.
fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

fn close(a: &Value, b: f64) -> bool {
    a.as_f64().is_some_and(|a| (a - b).abs() < 0.0005)
}

/// The fields every event has: ph, pid, tid as integers, ts in µs (except
/// M, where it is optional), and keys only of the format's vocabulary.
fn check_common(t: &Trace) {
    const KEYS: [&str; 21] = [
        "name", "cat", "ph", "ts", "tts", "pid", "tid", "args", "dur", "tdur", "cname", "s", "id",
        "id2", "scope", "bp", "sf", "stack", "esf", "estack", "bind_id",
    ];
    for e in &t.events {
        let o = e.as_object().unwrap();
        for k in o.keys() {
            assert!(KEYS.contains(&k.as_str()), "unknown key {k} in {e}");
        }
        assert!(e["ph"].as_str().is_some_and(|p| p.len() == 1), "{e}");
        assert_eq!(e["pid"].as_u64(), Some(t.pid()), "{e}");
        assert!(e["tid"].as_u64().is_some(), "{e}");
        if e["ph"] != "M" {
            assert!(e["ts"].as_f64().is_some(), "ts in µs: {e}");
        }
        assert!(
            !(o.contains_key("sf") && o.contains_key("stack")),
            "sf and stack: {e}"
        );
    }
    // ts, dur, tts, tdur: microseconds with exactly three decimals (ns kept).
    for key in ["ts", "dur", "tts", "tdur"] {
        let pat = format!("\"{key}\":");
        for (i, _) in t.text.match_indices(&pat) {
            let num: String = t.text[i + pat.len()..]
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '.')
                .collect();
            let (int, frac) = num.split_once('.').unwrap_or((&num, ""));
            assert!(!int.is_empty() && frac.len() == 3, "{key} {num}");
        }
    }
    // Non-ASCII is raw UTF-8, never surrogate escapes (fatal to some readers).
    assert!(
        !t.text.contains("\\ud8") && !t.text.contains("\\ud"),
        "surrogate escape"
    );
}

#[test]
fn every_phase_in_the_bare_array_with_complete_events() {
    let t = run("phases-x", &[]);
    check_common(&t);
    assert!(t.top.is_array(), "default: the bare array form");
    assert!(t.text.trim_end().ends_with(']'), "closed at the end");
    let main = t.tid("tid");
    let phs: Vec<&str> = t.events.iter().map(|e| e["ph"].as_str().unwrap()).collect();
    assert!(
        !phs.contains(&"B") && !phs.contains(&"E"),
        "X file has no B/E"
    );

    // X: complete events with dur; args merged from both ends (the end's
    // value wins); start and end stacks; a color.
    let outer = t.one("X", "macro_scope");
    assert_eq!(outer["cat"], "phases");
    assert_eq!(outer["args"], json!({"n": 1}));
    assert_eq!(outer["tid"].as_u64(), Some(main));
    let dyn_ = t.one("X", "dyn_scope");
    assert_eq!(dyn_["cat"], "phases");
    assert_eq!(dyn_["cname"], "good");
    assert_eq!(dyn_["args"], json!({"k": "w", "keep": true, "extra": 2}));
    assert_eq!(
        dyn_["stack"],
        json!(["main", "work"]),
        "frames inline in the array form"
    );
    assert_eq!(dyn_["estack"], json!(["0x10", "0x20"]));
    assert!(dyn_["dur"].as_f64().unwrap() >= 200.0);
    let explicit = t.one("X", "explicit");
    let start = t.expect["explicit_start_ns"].as_u64().unwrap();
    assert!(close(&explicit["ts"], us(start)), "{explicit}");
    assert!(close(&explicit["dur"], 5.0));
    assert!(close(&explicit["tts"], 100.0) && close(&explicit["tdur"], 2.5));
    assert_eq!(explicit["stack"], json!(["0x1", "0x2"]));
    assert_eq!(explicit["estack"], json!(["0x3"]));
    assert_eq!(explicit["cname"], "terrible");
    assert_eq!(explicit["args"], json!({"a": 1}));
    // Both nest inside macro_scope.
    let (o0, o1) = (
        outer["ts"].as_f64().unwrap(),
        outer["ts"].as_f64().unwrap() + outer["dur"].as_f64().unwrap(),
    );
    for inner in [dyn_, explicit] {
        let a = inner["ts"].as_f64().unwrap();
        assert!(
            a >= o0 && a + inner["dur"].as_f64().unwrap() <= o1,
            "{inner}"
        );
    }

    // i: scopes t, p, g; a stack only on the thread-scoped one.
    let it = t.one("i", "inst_t");
    assert_eq!((&it["s"], &it["cname"]), (&json!("t"), &json!("bad")));
    assert_eq!(it["stack"], json!(["a", "b"]));
    assert_eq!(it["args"], json!({"x": 1}));
    assert_eq!(t.one("i", "inst_p")["s"], "p");
    assert_eq!(t.one("i", "inst_g")["s"], "g");
    assert!(t.one("i", "inst_p").get("stack").is_none());
    assert_eq!(t.one("i", "macro_instant")["args"], json!({"v": 3}));

    // C: several series in one event; an id; the macros' single series.
    let ctr = t.all("C", "ctr");
    assert_eq!(ctr.len(), 2);
    assert_eq!(ctr[0]["args"], json!({"cats": 0, "dogs": 7.5}));
    assert_eq!(ctr[1]["args"], json!({"cats": 10, "dogs": 4.25}));
    let bytes = t.one("C", "bytes");
    assert_eq!(
        (&bytes["id"], &bytes["args"]),
        (&json!("0x9"), &json!({"value": 3}))
    );
    assert_eq!(t.one("C", "macro_counter")["args"], json!({"value": 17}));

    // b/n/e: id2.local, id2.global with scope, plain id; the end repeats the
    // category, name and id; args on begin, instant and end.
    let b = t.one("b", "req");
    assert_eq!(b["id2"], json!({"local": "0x100"}));
    assert_eq!(b["args"], json!({"url": "/x"}));
    let n = t.one("n", "step");
    assert_eq!((&n["id2"], &n["cat"]), (&b["id2"], &b["cat"]));
    assert_eq!(n["args"], json!({"s": 1}));
    let e = t.one("e", "req");
    assert_eq!((&e["id2"], &e["cat"]), (&b["id2"], &b["cat"]));
    assert_eq!(e["args"], json!({"status": 200}));
    assert!(b["ts"].as_f64() <= n["ts"].as_f64() && n["ts"].as_f64() <= e["ts"].as_f64());
    for ph in ["b", "e"] {
        let g = t.one(ph, "req_g");
        assert_eq!(
            (&g["id2"], &g["scope"]),
            (&json!({"global": "0x200"}), &json!("sc"))
        );
        assert_eq!(t.one(ph, "plain")["id"], "0x300");
    }

    // s/t/f: one id, category and name on three threads; s and t inside a
    // slice of their thread (enclosing binding); f before the next slice of
    // its thread (next-slice binding); the second flow ends with bp "e".
    let (s, st, f) = (t.one("s", "fl"), t.one("t", "fl"), t.one("f", "fl"));
    for ev in [s, st, f] {
        assert_eq!((&ev["id"], &ev["cat"]), (&json!("0x402"), &json!("phases")));
    }
    assert!(f.get("bp").is_none());
    assert_eq!(s["tid"].as_u64(), Some(main));
    assert_eq!(st["tid"].as_u64(), Some(t.tid("mid_tid")));
    assert_eq!(f["tid"].as_u64(), Some(t.tid("dst_tid")));
    let encloses = |x: &Value, ev: &Value| {
        x["tid"] == ev["tid"]
            && x["ts"].as_f64() <= ev["ts"].as_f64()
            && ev["ts"].as_f64().unwrap() <= x["ts"].as_f64().unwrap() + x["dur"].as_f64().unwrap()
    };
    assert!(encloses(t.one("X", "flow_src"), s));
    assert!(encloses(t.one("X", "flow_mid"), st));
    let dst = t.one("X", "flow_dst");
    assert!(dst["tid"] == f["tid"] && dst["ts"].as_f64() >= f["ts"].as_f64());
    let f2 = t.one("f", "fl2");
    assert_eq!((&f2["bp"], &f2["id"]), (&json!("e"), &json!("0x403")));
    assert!(encloses(t.one("X", "flow2_dst"), f2));
    assert!(encloses(t.one("X", "flow2_src"), t.one("s", "fl2")));

    // Custom tracks: async events with the track's own id; the end repeats
    // name, category and id (it happened on another thread).
    let (db, de) = (t.one("b", "dispatch"), t.one("e", "dispatch"));
    assert!(db["id2"]["local"].is_string());
    assert_eq!((&de["id2"], &de["cat"]), (&db["id2"], &db["cat"]));
    assert_eq!(db["args"], json!({"groups": 64}));
    assert_eq!(de["tid"].as_u64(), Some(t.tid("ender_tid")));
    let (sb, se) = (t.one("b", "sub"), t.one("e", "sub"));
    assert_eq!(
        (&sb["id2"], &se["id2"], &sb["cname"]),
        (&db["id2"], &db["id2"], &json!("good"))
    );
    assert!(db["ts"].as_f64() <= sb["ts"].as_f64() && se["ts"].as_f64() <= de["ts"].as_f64());
    let fence = t.one("n", "fence");
    assert!(
        fence["id2"]["local"].is_string() && fence["id2"] != db["id2"],
        "the parent track"
    );
    assert_eq!(fence["args"], json!({"v": 1}));

    // P: a sample with its stack.
    let p = t.one("P", "smp");
    assert_eq!(
        (&p["stack"], &p["args"]),
        (&json!(["main", "work"]), &json!({"n": 1}))
    );

    // N/O/D: no args on N/D; the snapshot carries base_type and its own cat.
    for ph in ["N", "D"] {
        let o = t.one(ph, "MyObject");
        assert_eq!(o["id"], "0x1000");
        assert!(o.get("args").is_none(), "object events have no args: {o}");
    }
    let snap = t.one("O", "MyObjectSubType");
    assert_eq!(snap["id"], "0x1000");
    assert_eq!(
        snap["args"],
        json!({"snapshot": {"cat": "real_cat", "base_type": "MyObject", "size": 3}})
    );
    assert_eq!(t.one("N", "Scoped")["scope"], "objs");
    assert_eq!(t.one("D", "Scoped")["id2"], json!({"global": "0x1"}));

    // V/v: one dump id for the global and the process dump.
    let (gv, pv) = (t.one("V", "dump"), t.one("v", "dump"));
    assert_eq!((&gv["id"], &pv["id"]), (&json!("0xd"), &json!("0xd")));
    assert_eq!(
        (&gv["args"], &pv["args"]),
        (&json!({"ram_mb": 1024}), &json!({"heap_mb": 12}))
    );

    // R.
    let r = t.one("R", "firstLayout");
    assert_eq!(
        (&r["cat"], &r["args"]),
        (&json!("phases"), &json!({"url": "/"}))
    );

    // c: receiver (sync_id), issuer (sync_id and issue_ts before ts).
    let syncs = t.all("c", "clock_sync");
    assert_eq!(syncs.len(), 2);
    assert_eq!(syncs[0]["args"], json!({"sync_id": "guid1"}));
    assert_eq!(syncs[1]["args"]["sync_id"], "guid2");
    let issue = &syncs[1]["args"]["issue_ts"];
    assert!(close(issue, us(t.expect["issue_ns"].as_u64().unwrap())));
    assert!(issue.as_f64() <= syncs[1]["ts"].as_f64());

    // ( and ): an instant between them.
    let (enter, leave) = (t.one("(", "Ctx"), t.one(")", "Ctx"));
    assert_eq!(
        (&enter["id"], &leave["id"]),
        (&json!("0x1234"), &json!("0x1234"))
    );
    let inside = t.one("i", "in_ctx");
    assert!(enter["ts"].as_f64() <= inside["ts"].as_f64());
    assert!(inside["ts"].as_f64() <= leave["ts"].as_f64());

    // =: linked ids.
    let link = t.one("=", "link");
    assert_eq!(
        (&link["id"], &link["args"]),
        (&json!("0x1000"), &json!({"linked_id": "0x2000"}))
    );

    // M: process name, labels and sort index (from the builder, then at run
    // time); thread name and sort index.
    let m =
        |name: &str| -> Vec<Value> { t.all("M", name).iter().map(|e| e["args"].clone()).collect() };
    assert_eq!(
        m("process_name"),
        [
            json!({"name": "phases-proc"}),
            json!({"name": "phases-renamed"})
        ]
    );
    assert_eq!(
        m("process_labels"),
        [
            json!({"labels": "alpha,beta"}),
            json!({"labels": "gamma,delta"})
        ]
    );
    assert_eq!(
        m("process_sort_index"),
        [json!({"sort_index": 3}), json!({"sort_index": 5})]
    );
    let thread_names: Vec<&Value> = t
        .all("M", "thread_name")
        .into_iter()
        .filter(|e| e["tid"].as_u64() == Some(main))
        .collect();
    assert_eq!(
        thread_names.last().unwrap()["args"],
        json!({"name": "main-thread"})
    );
    let tsi = t.one("M", "thread_sort_index");
    assert_eq!(
        (tsi["tid"].as_u64(), &tsi["args"]),
        (Some(main), &json!({"sort_index": -1}))
    );
    for ev in t.all("M", "thread_name") {
        assert!(ev["args"]["name"].is_string());
    }

    // The bare array has no `samples` list: a global sample is a P event.
    let gs = t.one("P", "cycles:HG");
    assert_eq!(
        (&gs["args"], &gs["stack"]),
        (&json!({"weight": 2, "cpu": 0}), &json!(["main", "work"]))
    );

    // A log message: a thread instant with the message, level and source.
    let log = t.one("i", "log");
    assert_eq!((&log["cat"], &log["s"]), (&json!("log"), &json!("t")));
    assert_eq!(log["args"]["message"], "disk sda is 93% full");
    assert_eq!(log["args"]["level"], "WARN");
    assert!(log["args"]["source"]
        .as_str()
        .unwrap()
        .starts_with("src/bin/ringtrace-test-scenarios/phases.rs:"));

    // Escaping round-trips; non-finite numbers are the documented strings.
    let odd = t
        .events
        .iter()
        .find(|e| e["name"].as_str().is_some_and(|n| n.starts_with("quote")))
        .unwrap();
    assert_eq!(odd["name"], "quote\"back\\slash\nnl\u{1}é😀");
    assert_eq!(odd["args"], json!({"nan": "NaN", "inf": "Infinity"}));
    assert_eq!(t.expect["events_lost"], 0);
}

#[test]
fn begin_end_scopes_object_form_and_thread_time() {
    let t = run(
        "phases-be",
        &[("RT_BE", "1"), ("RT_OBJECT", "1"), ("RT_TT", "1")],
    );
    check_common(&t);
    let top = t.top.as_object().expect("the object form");
    assert!(top["traceEvents"].is_array());
    assert_eq!(top["displayTimeUnit"], "ns");
    assert_eq!(top["otherData"], json!({"version": "My Application v1.0"}));
    assert_eq!(top["metadata"], json!({"run": 42}));
    let main = t.tid("tid");

    // Never X with B/E; every E closes a B of its thread (stack discipline
    // in time order), carries no name or category, and has thread time.
    assert!(t.events.iter().all(|e| e["ph"] != "X"));
    let mut by_tid: std::collections::BTreeMap<u64, Vec<&Value>> = Default::default();
    for e in t.events.iter().filter(|e| e["ph"] == "B" || e["ph"] == "E") {
        by_tid
            .entry(e["tid"].as_u64().unwrap())
            .or_default()
            .push(e);
    }
    let mut slices = Vec::new();
    for evs in by_tid.values_mut() {
        evs.sort_by(|a, b| a["ts"].as_f64().partial_cmp(&b["ts"].as_f64()).unwrap());
        let mut open: Vec<&Value> = Vec::new();
        for e in evs.iter() {
            assert!(e["tts"].as_f64().is_some(), "thread time on {e}");
            if e["ph"] == "B" {
                open.push(e);
            } else {
                assert!(e.get("name").is_none() && e.get("cat").is_none(), "{e}");
                let b = open.pop().expect("E closes an open B");
                assert!(b["tts"].as_f64() <= e["tts"].as_f64());
                slices.push((b, *e));
            }
        }
        assert!(open.is_empty(), "every B has its E");
    }
    let slice = |name: &str| *slices.iter().find(|(b, _)| b["name"] == name).unwrap();
    let (b, e) = slice("dyn_scope");
    assert_eq!(b["tid"].as_u64(), Some(main));
    assert_eq!(b["args"], json!({"k": "v", "keep": true}));
    assert_eq!(
        e["args"],
        json!({"k": "w", "extra": 2}),
        "end args, merged by readers"
    );
    assert_eq!(
        e["stack"],
        json!(["0x10", "0x20"]),
        "the end stack on the E"
    );
    // Named frames go to the stackFrames dictionary: leaf "work", parent "main".
    let frames = &top["stackFrames"];
    let sf = b["sf"].as_u64().expect("sf");
    let leaf = &frames[sf.to_string()];
    assert_eq!(
        (&leaf["name"], &leaf["category"]),
        (&json!("work"), &json!("app"))
    );
    let root = &frames[leaf["parent"].as_str().unwrap()];
    assert_eq!(
        (&root["name"], &root["category"]),
        (&json!("main"), &json!("app"))
    );
    assert!(root.get("parent").is_none());
    let (b, e) = slice("explicit");
    let start = us(t.expect["explicit_start_ns"].as_u64().unwrap());
    assert!(close(&b["ts"], start) && close(&e["ts"], start + 5.0));
    assert!(close(&b["tts"], 100.0) && close(&e["tts"], 102.5));
    assert_eq!(e["stack"], json!(["0x3"]));
    let (b, _) = slice("macro_scope");
    assert_eq!(b["args"], json!({"n": 1}));
    assert_eq!(t.one("P", "smp")["sf"].as_u64(), Some(sf));

    // The top-level samples list.
    let samples = top["samples"].as_array().unwrap();
    assert_eq!(samples.len(), 1);
    let s = &samples[0];
    assert_eq!(s["name"], "cycles:HG");
    assert_eq!(
        (s["cpu"].as_u64(), s["tid"].as_u64()),
        (Some(0), Some(main))
    );
    assert_eq!(
        (s["sf"].as_u64(), s["weight"].as_u64()),
        (Some(sf), Some(2))
    );
    assert!(s["ts"].as_f64().is_some());
}

#[test]
fn thread_time_on_complete_events() {
    let t = run("phases-tt", &[("RT_TT", "1")]);
    check_common(&t);
    for name in ["macro_scope", "dyn_scope", "flow_src", "flow_mid"] {
        let x = t.one("X", name);
        let (dur, tdur) = (x["dur"].as_f64().unwrap(), x["tdur"].as_f64().unwrap());
        assert!(x["tts"].as_f64().is_some(), "{x}");
        // CPU time of one thread cannot exceed its wall time (clock slack 5 µs).
        assert!(tdur <= dur + 5.0, "{x}");
    }
    // The spinning slice used its thread (how much depends on the machine's
    // load: only that some CPU time was counted is certain).
    let d = t.one("X", "dyn_scope");
    assert!(d["tdur"].as_f64().unwrap() > 0.0, "{d}");
}
