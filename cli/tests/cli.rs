//! The `ringtrace` command on real traces.
//!
//! Traces are recorded by child processes (this test binary re-executed with
//! `RT_CLI_CHILD_*` set, test `child_process`): nested slices with args,
//! instants, integer and float counters, an `async fn`, a named worker thread,
//! and a thread flooding a small ring so events are lost. The command's
//! output is checked against what the children report and against the
//! official Perfetto schema (`tests/support/perfetto_model.py`).
//!
//! One file: the tests share the child entry point (`child_process`) that
//! this binary re-executes to record, and the helpers that decode its traces.

use ringtrace_test_support::{json_events, perfetto_model, rerun_test, run_python, scratch};
use serde_json::Value;
use std::collections::BTreeMap;
use std::future::Future;
use std::path::Path;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_ringtrace");

fn ringtrace(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .output()
        .expect("run ringtrace")
}

fn ok(args: &[&str]) -> String {
    let out = ringtrace(args);
    assert!(
        out.status.success(),
        "ringtrace {args:?} failed ({:?}):\n{}\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Runs `ringtrace` expecting exit status `code`; returns stderr.
fn fails(args: &[&str], code: i32) -> String {
    let out = ringtrace(args);
    assert_eq!(
        out.status.code(),
        Some(code),
        "ringtrace {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stderr).unwrap()
}

fn inspect_json(path: &Path) -> Value {
    serde_json::from_str(&ok(&["inspect", "--json", path.to_str().unwrap()])).unwrap()
}

/// What a child recorded.
#[derive(Debug)]
struct Recorded {
    pid: i64,
    worker_tid: i64,
    start: i64,
    end: i64,
    lost: u64,
}

/// Records the standard workload into `path` (format by extension) in a child.
fn record(path: &Path, flood: bool) -> Recorded {
    let out = rerun_test("child_process")
        // Timestamps straight from CLOCK_BOOTTIME, so the child's own
        // readings bracket them exactly.
        .env("RINGTRACE_CLOCK", "boottime")
        .env("RT_CLI_CHILD_OUT", path)
        .env("RT_CLI_CHILD_FLOOD", if flood { "1" } else { "0" })
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "child: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let at = stdout.find("RT-DONE ").expect("child report");
    let f: Vec<i64> = stdout[at..]
        .split_whitespace()
        .skip(1)
        .take(5)
        .map(|x| x.parse().unwrap())
        .collect();
    Recorded {
        pid: f[0],
        worker_tid: f[1],
        start: f[2],
        end: f[3],
        lost: f[4] as u64,
    }
}

#[ringtrace::traced]
async fn fetch(n: u32) -> u32 {
    n + 1
}

/// The child side of `record` (a no-op in a normal test run).
#[test]
fn child_process() {
    let Ok(out) = std::env::var("RT_CLI_CHILD_OUT") else {
        return;
    };
    let flood = std::env::var("RT_CLI_CHILD_FLOOD").as_deref() == Ok("1");
    let guard = ringtrace::builder()
        .output(&out)
        .buffer_bytes_per_thread(16 << 10)
        .start()
        .unwrap();
    let start = ringtrace::trace_clock_ns() as i64;
    for i in 0..5i64 {
        ringtrace::trace_scope!("outer", i = i);
        {
            ringtrace::trace_scope!("cat", "inner");
            ringtrace::trace_instant!("tick", n = i);
        }
        ringtrace::trace_counter!("depth", i);
        ringtrace::trace_counter!("ratio", i as f64 * 0.5);
    }
    let v = std::pin::pin!(fetch(41));
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let mut v = v;
    assert_eq!(v.as_mut().poll(&mut cx), std::task::Poll::Ready(42));
    let worker = std::thread::Builder::new()
        .name("worker".into())
        .spawn(|| {
            for j in 0..3 {
                ringtrace::trace_scope!("job", j = j);
            }
            os_tid()
        })
        .unwrap();
    let worker_tid = worker.join().unwrap();
    if flood {
        std::thread::Builder::new()
            .name("flood".into())
            .spawn(|| {
                for k in 0..200_000u64 {
                    ringtrace::trace_instant!("spam", k = k);
                }
            })
            .unwrap()
            .join()
            .unwrap();
    }
    let stats = guard.stop().unwrap();
    // After the stop: losses are marked when the trace is finished.
    let end = ringtrace::trace_clock_ns() as i64;
    println!(
        "RT-DONE {} {worker_tid} {start} {end} {}",
        std::process::id(),
        stats.events_lost
    );
    std::process::exit(0);
}

/// The calling thread's OS id, read from /proc.
fn os_tid() -> i64 {
    std::fs::read_link("/proc/thread-self")
        .ok()
        .and_then(|p| p.file_name()?.to_str()?.parse().ok())
        .unwrap_or(0)
}

fn ns(v: &Value) -> i64 {
    (v.as_f64().unwrap() * 1000.0).round() as i64
}

type Slices = BTreeMap<(String, i64, i64), usize>;
/// Slices, instants, counter values.
type Shapes = (
    Slices,
    BTreeMap<(String, i64), usize>,
    BTreeMap<(String, i64), String>,
);

/// (name, ts, dur) of every slice (thread `X` and async `b`/`e` pairs) and
/// (name, ts) of every instant, counted.
fn json_shapes(events: &[Value]) -> Shapes {
    let mut slices = Slices::new();
    let mut instants = BTreeMap::new();
    let mut counters = BTreeMap::new();
    let mut open: BTreeMap<(String, String), Vec<(String, i64)>> = BTreeMap::new();
    for e in events {
        let name = e["name"].as_str().unwrap_or("").to_owned();
        match e["ph"].as_str().unwrap_or("") {
            "X" => {
                *slices
                    .entry((name, ns(&e["ts"]), ns(&e["dur"])))
                    .or_default() += 1
            }
            "i" => *instants.entry((name, ns(&e["ts"]))).or_default() += 1,
            "C" => {
                counters.insert((name, ns(&e["ts"])), e["args"]["value"].to_string());
            }
            "b" => open
                .entry((e["cat"].to_string(), e["id2"].to_string()))
                .or_default()
                .push((name, ns(&e["ts"]))),
            "e" => {
                let (n, ts) = open
                    .get_mut(&(e["cat"].to_string(), e["id2"].to_string()))
                    .unwrap()
                    .pop()
                    .unwrap();
                *slices.entry((n, ts, ns(&e["ts"]) - ts)).or_default() += 1;
            }
            _ => {}
        }
    }
    (slices, instants, counters)
}

/// The same shapes from the official decoder's model of a Perfetto file.
fn model_shapes(m: &Value) -> Shapes {
    let mut slices = Slices::new();
    let mut instants = BTreeMap::new();
    for s in m["slices"].as_array().unwrap() {
        let name = s["name"].as_str().unwrap_or("").to_owned();
        let ts = s["ts"].as_i64().unwrap();
        if s["instant"] == true {
            *instants.entry((name, ts)).or_default() += 1;
        } else {
            *slices
                .entry((name, ts, s["dur"].as_i64().unwrap()))
                .or_default() += 1;
        }
    }
    let tracks = m["tracks"].as_object().unwrap();
    let mut counters = BTreeMap::new();
    for c in m["counters"].as_array().unwrap() {
        let name = tracks[&c["track_uuid"].to_string()]["name"]
            .as_str()
            .unwrap()
            .to_owned();
        let v = &c["value"];
        // The JSON side writes integers as integers, doubles as doubles.
        let text = if v.as_f64().unwrap().fract() == 0.0 && !v.to_string().contains('.') {
            v.to_string()
        } else {
            format!("{:?}", v.as_f64().unwrap())
        };
        counters.insert((name, c["ts"].as_i64().unwrap()), text);
    }
    (slices, instants, counters)
}

// ------------------------------------------------------------------ tests

#[test]
fn inspect_a_perfetto_trace() {
    let dir = scratch("inspect-pf");
    let trace = dir.join("t.pftrace");
    let r = record(&trace, true);
    assert!(r.lost > 0, "the flood loses events");
    let s = inspect_json(&trace);
    assert_eq!(s["format"], "perfetto");
    let threads = s["threads"].as_array().unwrap();
    assert!(
        threads
            .iter()
            .any(|t| t["tid"] == r.worker_tid && t["name"] == "worker" && t["pid"] == r.pid),
        "{threads:?}"
    );
    assert!(threads.iter().any(|t| t["name"] == "flood"));
    assert_eq!(s["processes"][0]["pid"], r.pid);
    let e = &s["events"];
    // 5 outer + 5 inner + 3 jobs + fetch's slice on the thread track; fetch's
    // async range; 5 ticks and the spam that was kept; 10 counter values.
    let m = perfetto_model(&trace);
    let (slices, instants, counters) = model_shapes(&m);
    let thread_and_async: usize = slices.values().sum();
    assert_eq!(
        e["slices"].as_u64().unwrap() + e["async_slices"].as_u64().unwrap(),
        thread_and_async as u64
    );
    assert!(e["async_slices"].as_u64().unwrap() >= 1);
    assert!(e["slices"].as_u64().unwrap() >= 14);
    assert_eq!(e["counters"].as_u64().unwrap(), counters.len() as u64);
    assert_eq!(counters.len(), 10);
    let spam_kept = instants.keys().filter(|(n, _)| n == "spam").count() as u64;
    assert_eq!(e["instants"].as_u64().unwrap(), 5 + spam_kept);
    // Losses: the count the session reported, marked in the trace.
    let lost = &s["lost_events"];
    assert_eq!(lost["count"].as_u64().unwrap(), r.lost);
    assert!(lost["markers"].as_u64().unwrap() >= 1);
    assert!(
        lost["packets_with_previous_packet_dropped"]
            .as_u64()
            .unwrap()
            >= 1
    );
    let seqs = s["sequences"].as_array().unwrap();
    assert!(seqs
        .iter()
        .any(|q| q["loss_marks"].as_u64().unwrap() >= 1 && q["thread"]["name"] == "flood"));
    assert!(seqs.iter().any(|q| q["thread"]["tid"] == r.worker_tid));
    // Time range inside the child's own bracket; clocks as written.
    let tr = &s["time_range"];
    assert!(
        tr["start_ns"].as_i64().unwrap() >= r.start && tr["end_ns"].as_i64().unwrap() <= r.end,
        "{tr} vs {r:?}"
    );
    let clocks: Vec<&str> = s["clocks"]["clocks"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for c in ["BOOTTIME", "REALTIME", "MONOTONIC"] {
        assert!(clocks.contains(&c), "{clocks:?}");
    }
    assert_eq!(s["clocks"]["trace_clock"], "BOOTTIME");
    assert!(s["clocks"]["realtime_at_start"]
        .as_str()
        .unwrap()
        .ends_with('Z'));
    // Gzipped (by Python's gzip module), it reads the same.
    let gz = dir.join("t.pftrace.gz");
    run_python(
        "import gzip,sys; open(sys.argv[2],'wb').write(gzip.compress(open(sys.argv[1],'rb').read()))",
        &[trace.to_str().unwrap(), gz.to_str().unwrap()],
    );
    assert_eq!(inspect_json(&gz)["events"], s["events"]);
    // The text form says the same.
    let text = ok(&["inspect", trace.to_str().unwrap()]);
    assert!(
        text.contains("\"worker\"") && text.contains(&format!("lost events: {}", r.lost)),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn inspect_a_json_trace() {
    let dir = scratch("inspect-json");
    let trace = dir.join("t.json");
    let r = record(&trace, true);
    let s = inspect_json(&trace);
    assert_eq!(s["format"], "json");
    assert!(s["threads"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["tid"] == r.worker_tid && t["name"] == "worker"));
    assert_eq!(s["lost_events"]["count"].as_u64().unwrap(), r.lost);
    assert!(s["events"]["slices"].as_u64().unwrap() >= 14);
    assert_eq!(s["events"]["counters"], 10);
    let tr = &s["time_range"];
    assert!(tr["start_ns"].as_i64().unwrap() >= r.start && tr["end_ns"].as_i64().unwrap() <= r.end);
    assert!(s["clocks"]["trace_clock"].is_null());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn convert_perfetto_to_json_keeps_every_event() {
    let dir = scratch("pf2json");
    let trace = dir.join("t.pftrace");
    record(&trace, false);
    let out = dir.join("t.json");
    ok(&["convert", trace.to_str().unwrap(), out.to_str().unwrap()]);
    // Python's json module reads it.
    run_python(
        "import json,sys; json.load(open(sys.argv[1]))",
        &[out.to_str().unwrap()],
    );
    let events = json_events(&out);
    let model = perfetto_model(&trace);
    let expected = model_shapes(&model);
    let got = json_shapes(&events);
    assert_eq!(got.0, expected.0, "slices");
    assert_eq!(got.1, expected.1, "instants");
    assert_eq!(got.2, expected.2, "counters");
    // Args and names survive.
    let outer: Vec<&Value> = events.iter().filter(|e| e["name"] == "outer").collect();
    assert_eq!(outer.len(), 5);
    assert_eq!(
        outer
            .iter()
            .map(|e| e["args"]["i"].as_i64().unwrap())
            .collect::<Vec<_>>(),
        vec![0, 1, 2, 3, 4]
    );
    assert!(events
        .iter()
        .any(|e| e["ph"] == "M" && e["name"] == "thread_name" && e["args"]["name"] == "worker"));
    assert!(events
        .iter()
        .any(|e| e["name"] == "inner" && e["cat"] == "cat"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn convert_json_to_perfetto_and_back() {
    let dir = scratch("json2pf");
    let trace = dir.join("t.json");
    record(&trace, false);
    let original = json_events(&trace);
    let pf = dir.join("t.pftrace");
    ok(&["convert", trace.to_str().unwrap(), pf.to_str().unwrap()]);
    // The official schema reads it without a single error, with every event.
    let model = perfetto_model(&pf);
    let want = json_shapes(&original);
    assert_eq!(model_shapes(&model).0, want.0, "slices");
    assert_eq!(model_shapes(&model).1, want.1, "instants");
    assert_eq!(model_shapes(&model).2, want.2, "counters");
    let tick: Vec<&Value> = model["slices"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["name"] == "tick")
        .collect();
    assert_eq!(tick.len(), 5);
    assert!(tick.iter().all(|s| s["args"]["n"].is_i64()));
    let tracks = model["tracks"].as_object().unwrap();
    assert!(tracks
        .values()
        .any(|t| t["kind"] == "thread" && t["thread_name"] == "worker"));
    // And back: the same events as the original.
    let back = dir.join("back.json");
    ok(&["convert", pf.to_str().unwrap(), back.to_str().unwrap()]);
    assert_eq!(json_shapes(&json_events(&back)), want);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn convert_reads_a_json_trace_cut_short() {
    let dir = scratch("cut");
    let trace = dir.join("t.json");
    record(&trace, false);
    let text = std::fs::read_to_string(&trace).unwrap();
    // As after a crash: no closing bracket, half an event at the end.
    let cut = &text[..text.trim_end().trim_end_matches(']').trim_end().len() - 10];
    let cut_path = dir.join("cut.json");
    std::fs::write(&cut_path, cut).unwrap();
    let s = inspect_json(&cut_path);
    assert_eq!(s["truncated"], true);
    let pf = dir.join("cut.pftrace");
    ok(&["convert", cut_path.to_str().unwrap(), pf.to_str().unwrap()]);
    perfetto_model(&pf);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn pack_inspect_tar_and_zip() {
    let dir = scratch("pack");
    let a = dir.join("app.pftrace");
    let b = dir.join("log.json");
    let ra = record(&a, false);
    let rb = record(&b, false);
    let tar = dir.join("run.tar");
    let out = ok(&[
        "pack",
        "-o",
        tar.to_str().unwrap(),
        "--attr",
        "run_id=42",
        "--attr",
        "who=ci",
        "--trace-time",
        "BOOTTIME@app.pftrace",
        "--print-manifest",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
    ]);
    assert!(
        out.contains("log.json: pinned to app.pftrace, offset 0 ns"),
        "{out}"
    );
    assert!(out.contains("ui.perfetto.dev"));
    // Standard readers.
    let listing = Command::new("tar").arg("-tf").arg(&tar).output().unwrap();
    let names = String::from_utf8(listing.stdout).unwrap();
    assert_eq!(
        names.lines().collect::<Vec<_>>(),
        ["perfetto_manifest.json", "app.pftrace", "log.json"]
    );
    let py = r#"
import json, sys, tarfile
t = tarfile.open(sys.argv[1])
m = json.loads(t.extractfile("perfetto_manifest.json").read())["perfetto_manifest"]
assert m["version"] == 1 and m["attributes"] == {"run_id": 42, "who": "ci"}, m
assert m["trace_time"] == {"clock": "BOOTTIME", "file": "app.pftrace"}, m
log = [f for f in m["files"] if f["path"] == "log.json"][0]
assert log["clocks"] == {"sync_to": {"file": "app.pftrace", "clock": "BOOTTIME"}, "offset_ns": 0}, log
print("ok")
"#;
    run_python(py, &[tar.to_str().unwrap()]);
    // inspect of the archive: valid, both traces summarised.
    let s = inspect_json(&tar);
    assert_eq!(s["valid"], true);
    assert_eq!(s["container"], "tar");
    let members = s["members"].as_array().unwrap();
    assert_eq!(members[0]["kind"], "manifest");
    assert_eq!(members[1]["trace"]["processes"][0]["pid"], ra.pid);
    assert_eq!(members[2]["trace"]["processes"][0]["pid"], rb.pid);
    let text = ok(&["inspect", tar.to_str().unwrap()]);
    assert!(
        text.contains("manifest check: ok") && text.contains("PIN"),
        "{text}"
    );

    // ZIP, with machines and an explicit relation and offset.
    let zip = dir.join("run.zip");
    ok(&[
        "pack",
        "-o",
        zip.to_str().unwrap(),
        "--machine",
        "app.pftrace=phone",
        "--machine",
        "log.json=phone",
        "--sync",
        "log.json=app.pftrace@250000",
        "--stored",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
    ]);
    let py = r#"
import json, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
assert z.testzip() is None
assert [i.compress_type for i in z.infolist()] == [0, 0, 0]
m = json.loads(z.read("perfetto_manifest.json"))["perfetto_manifest"]
f = {e["path"]: e for e in m["files"]}
assert f["app.pftrace"]["machine"] == {"name": "phone"}
assert f["log.json"]["clocks"] == {"sync_to": {"file": "app.pftrace", "clock": "BOOTTIME"}, "offset_ns": 250000}, f
"#;
    run_python(py, &[zip.to_str().unwrap()]);
    assert_eq!(inspect_json(&zip)["valid"], true);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Two processes' Perfetto traces of one machine (their sidecars say so)
/// are joined into one member, `processes.pftrace`, in which the decoder
/// finds both processes and every slice of both (Perfetto links flows only
/// within a file); a JSON trace stays a member of its own. Files without
/// sidecars are joined only with `--join`; `--no-join` keeps them apart.
#[test]
fn pack_joins_the_perfetto_files_of_one_machine() {
    let dir = scratch("pack-join");
    let shared = dir.join("shared");
    let members: Vec<_> = ["client", "server"]
        .iter()
        .map(|role| ringtrace_archive::MemberFile::new(&shared, role, "pftrace"))
        .collect();
    let mut pids = Vec::new();
    for m in &members {
        m.prepare().unwrap();
        pids.push(record(&m.path, false).pid);
    }
    record(&shared.join("log.json"), false);
    let names = |tar: &Path| -> Vec<String> {
        let listing = Command::new("tar").arg("-tf").arg(tar).output().unwrap();
        let mut n: Vec<String> = String::from_utf8(listing.stdout)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect();
        n.sort();
        n
    };
    let slices = |path: &Path| perfetto_model(path)["slices"].as_array().unwrap().len();
    let tar = dir.join("run.tar");
    let out = ok(&[
        "pack",
        "-o",
        tar.to_str().unwrap(),
        shared.to_str().unwrap(),
    ]);
    let (a, b) = (
        members[0].path.file_name().unwrap().to_str().unwrap(),
        members[1].path.file_name().unwrap().to_str().unwrap(),
    );
    assert!(
        out.contains(&format!("joined {a}, {b} into processes.pftrace")),
        "{out}"
    );
    assert_eq!(
        names(&tar),
        ["log.json", "perfetto_manifest.json", "processes.pftrace"]
    );
    let s = inspect_json(&tar);
    assert_eq!(s["valid"], true, "{s:#}");
    let member = s["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "processes.pftrace")
        .cloned()
        .unwrap();
    let mut seen: Vec<i64> = member["trace"]["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["pid"].as_i64().unwrap())
        .collect();
    seen.sort();
    pids.sort();
    assert_eq!(seen, pids, "both processes in the joined trace");
    // Every slice of both files, decoded with the official schema.
    let x = dir.join("x");
    std::fs::create_dir_all(&x).unwrap();
    let untar = Command::new("tar")
        .args(["-xf", tar.to_str().unwrap(), "-C", x.to_str().unwrap()])
        .status()
        .unwrap();
    assert!(untar.success());
    let joined = x.join("processes.pftrace");
    assert_eq!(
        slices(&joined),
        slices(&members[0].path) + slices(&members[1].path)
    );
    assert!(perfetto_model(&joined)["errors"]
        .as_array()
        .unwrap()
        .is_empty());
    // Kept apart when asked; files given without sidecars: only with --join.
    let apart = dir.join("apart.tar");
    ok(&[
        "pack",
        "-o",
        apart.to_str().unwrap(),
        "--no-join",
        shared.to_str().unwrap(),
    ]);
    let mut expect = vec![a, b, "log.json", "perfetto_manifest.json"];
    expect.sort();
    assert_eq!(names(&apart), expect);
    let files = [
        members[0].path.to_str().unwrap(),
        members[1].path.to_str().unwrap(),
    ];
    let loose = dir.join("loose.tar");
    ok(&["pack", "-o", loose.to_str().unwrap(), files[0], files[1]]);
    assert_eq!(names(&loose), [a, "perfetto_manifest.json", b]);
    let asked = dir.join("asked.tar");
    ok(&[
        "pack",
        "-o",
        asked.to_str().unwrap(),
        "--join",
        files[0],
        files[1],
    ]);
    assert_eq!(
        names(&asked),
        ["perfetto_manifest.json", "processes.pftrace"]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn pack_refuses_what_the_manifest_rules_reject() {
    let dir = scratch("refuse");
    let a = dir.join("app.pftrace");
    let b = dir.join("log.json");
    record(&a, false);
    std::fs::copy(&a, dir.join("other.pftrace")).unwrap();
    record(&b, false);
    let out = dir.join("x.tar");
    let (o, pa, pb) = (
        out.to_str().unwrap(),
        a.to_str().unwrap(),
        b.to_str().unwrap(),
    );
    let other = dir.join("other.pftrace");
    let po = other.to_str().unwrap();
    // `ringtrace pack -o <o> args...`, expecting exit status `code`: its stderr.
    let pack = |args: &[&str], code| fails(&[&["pack", "-o", o], args].concat(), code);
    // Manifest rules: exit 1, nothing written.
    let e = pack(&["--sync", "log.json=phone.pftrace", pa, pb], 1);
    assert!(
        e.contains("sync_to.file names unknown file 'phone.pftrace'"),
        "{e}"
    );
    let e = pack(&["--sync", "other.pftrace=app.pftrace", pa, po], 1);
    assert!(
        e.contains("clock overrides require the trace to use a single clock"),
        "{e}"
    );
    let e = pack(&["--sync", "log.json=app.pftrace:BOOTTIME", pa, pb], 1);
    assert!(e.contains("clockless"), "{e}");
    let e = pack(&["--machines", "app.pftrace=0:host,4294967296:vm", pa], 1);
    assert!(e.contains("machines: id must be in [0, 4294967295]"), "{e}");
    let e = pack(
        &[
            "--machine",
            "app.pftrace=phone",
            "--machine",
            "log.json=watch",
            pa,
            pb,
        ],
        1,
    );
    assert!(
        e.contains("cannot compute the clock offset of 'log.json'"),
        "{e}"
    );
    assert!(!out.exists());
    // Usage errors: exit 2.
    let e = pack(&["--sync", "log.json=app.pftrace:UTC", pa, pb], 2);
    assert!(e.contains("unknown clock name: UTC"), "{e}");
    pack(&["--machine", "app.pftrace", pa], 2);
    pack(&["--machine", "nope.pftrace=x", pa], 2);
    fails(&["pack", pa], 2);
    fails(&["pack", "-o", dir.join("x.rar").to_str().unwrap(), pa], 2);
    fails(&["pack", "-o", o], 2);
    pack(&["--sync", "log.json=app.pftrace@1.5", pa, pb], 2);
    assert!(!out.exists());
    // Unreadable input: exit 1.
    pack(&[dir.join("missing.pftrace").to_str().unwrap()], 1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn usage_errors_and_bad_inputs() {
    let e = fails(&[], 2);
    assert!(e.contains("usage:"));
    fails(&["frobnicate"], 2);
    fails(&["inspect"], 2);
    fails(&["inspect", "--bogus", "x"], 2);
    fails(&["convert", "only-one"], 2);
    fails(&["convert", "a.json", "b.txt"], 2);
    assert!(ok(&["help"]).contains("ringtrace pack"));
    let dir = scratch("bad");
    let junk = dir.join("junk.pftrace");
    std::fs::write(&junk, b"hello").unwrap();
    fails(&["inspect", junk.to_str().unwrap()], 1);
    fails(
        &[
            "convert",
            junk.to_str().unwrap(),
            dir.join("o.json").to_str().unwrap(),
        ],
        1,
    );
    fails(&["inspect", dir.join("missing").to_str().unwrap()], 1);
    // An archive whose manifest the spec rejects (written by Python's tarfile).
    let py = r#"
import io, sys, tarfile
with tarfile.open(sys.argv[1], "w") as t:
    for name, data in [("perfetto_manifest.json", b'{"perfetto_manifest": {"version": 2}}'), ("a.json", b'[{"ph":"i","ts":1,"pid":1,"tid":1,"name":"x","s":"t"}]')]:
        i = tarfile.TarInfo(name); i.size = len(data); t.addfile(i, io.BytesIO(data))
"#;
    let bad = dir.join("bad.tar");
    run_python(py, &[bad.to_str().unwrap()]);
    let e = fails(&["inspect", bad.to_str().unwrap()], 1);
    assert!(e.contains("unsupported version: 2"), "{e}");
    let out = ringtrace(&["inspect", "--json", bad.to_str().unwrap()]);
    let s: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(s["valid"], false);
    assert_eq!(
        s["members"][1]["trace"]["events"]["instants"], 1,
        "the traces are still summarised"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn output_cut_short_by_its_reader_ends_quietly() {
    // `ringtrace inspect t | head -0`: the reader is gone before the first
    // write, which fails with a closed pipe.
    let dir = scratch("closed-pipe");
    let trace = dir.join("t.pftrace");
    record(&trace, false);
    for args in [
        vec!["inspect", trace.to_str().unwrap()],
        vec!["inspect", "--json", trace.to_str().unwrap()],
    ] {
        // The read end is closed before the child starts: its first write
        // fails, whatever the timing.
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = Command::new(BIN)
            .args(&args)
            .stdout(writer)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
    }
}

/// Issue 17 part 5: `pack` refuses a file no Perfetto reader recognizes as a
/// trace (11 bytes of text), unless `--allow-unrecognized`; `inspect` of the
/// archive then reports it and exits 1.
#[test]
fn pack_and_inspect_refuse_a_file_that_is_no_trace() {
    let dir = scratch("junk");
    let junk = dir.join("junk.pftrace");
    std::fs::write(&junk, b"hello world").unwrap();
    let good = dir.join("good.pftrace");
    record(&good, false);
    let tar = dir.join("bad.tar");
    let (pj, pg, pt) = (
        junk.to_str().unwrap(),
        good.to_str().unwrap(),
        tar.to_str().unwrap(),
    );
    let e = fails(&["pack", "-o", pt, pg, pj], 1);
    assert!(
        e.contains("archive member 'junk.pftrace' is not a trace")
            && e.contains("Unknown trace type"),
        "{e}"
    );
    assert!(!tar.exists(), "nothing written");
    let out = ok(&["pack", "-o", pt, "--allow-unrecognized", pg, pj]);
    assert!(out.contains("wrote"), "{out}");
    assert!(
        out.contains("will refuse this archive") && !out.contains("open it at"),
        "{out}"
    );
    let e = fails(&["inspect", pt], 1);
    assert!(e.contains("'junk.pftrace' is not a trace"), "{e}");
    let out = ringtrace(&["inspect", "--json", pt]);
    assert_eq!(out.status.code(), Some(1));
    let s: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(s["valid"], false);
    let kinds: Vec<&str> = s["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["manifest", "perfetto", "unrecognized"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The descriptor packets of a process track (uuid 1) and its thread's
/// track (uuid 2): `(pid, name)` and `(tid, name)`, on sequence `seq`.
fn process_and_thread(
    seq: Option<u32>,
    (pid, process_name): (i32, Option<&str>),
    (tid, thread_name): (i64, Option<&str>),
) -> Vec<ringtrace_protos::TracePacket> {
    use ringtrace_protos::{ProcessDescriptor, ThreadDescriptor, TracePacket, TrackDescriptor};
    let desc = |td: TrackDescriptor| TracePacket {
        trusted_packet_sequence_id: seq,
        track_descriptor: Some(td),
        ..Default::default()
    };
    vec![
        desc(TrackDescriptor {
            uuid: Some(1),
            process: Some(ProcessDescriptor {
                pid: Some(pid),
                process_name: process_name.map(str::to_owned),
                ..Default::default()
            }),
            ..Default::default()
        }),
        desc(TrackDescriptor {
            uuid: Some(2),
            parent_uuid: Some(1),
            thread: Some(ThreadDescriptor {
                pid: Some(pid),
                tid: Some(tid),
                thread_name: thread_name.map(str::to_owned),
                ..Default::default()
            }),
            ..Default::default()
        }),
    ]
}

/// A Perfetto trace whose events are in time order but not in file order,
/// as ringtrace writes them when a thread finds a span moved after another
/// thread closed it: a thread track whose inner slice's end comes before its
/// begin in the file, and an async range whose end comes before its begin.
fn out_of_file_order_perfetto() -> Vec<u8> {
    use prost::Message;
    use ringtrace_protos::{
        track_descriptor, track_event, Trace, TracePacket, TrackDescriptor, TrackEvent,
    };
    let seq = Some(1u32);
    let mut packets = process_and_thread(seq, (7, None), (8, None));
    packets.push(TracePacket {
        trusted_packet_sequence_id: seq,
        track_descriptor: Some(TrackDescriptor {
            uuid: Some(3),
            parent_uuid: Some(1),
            static_or_dynamic_name: Some(track_descriptor::StaticOrDynamicName::Name(
                "moved".into(),
            )),
            ..Default::default()
        }),
        ..Default::default()
    });
    packets[0].sequence_flags = Some(1);
    packets[0].first_packet_on_sequence = Some(true);
    let ev = |ts: u64, track: u64, ty: track_event::Type, name: Option<&str>| {
        let mut te = TrackEvent {
            track_uuid: Some(track),
            name: name.map(str::to_owned),
            ..Default::default()
        };
        te.set_type(ty);
        TracePacket {
            timestamp: Some(ts),
            trusted_packet_sequence_id: seq,
            track_event: Some(te),
            ..Default::default()
        }
    };
    use track_event::Type::{Instant, SliceBegin, SliceEnd};
    packets.extend([
        ev(1_000_000, 2, SliceBegin, Some("outer")),
        ev(3_000_000, 2, SliceEnd, None), // inner's end, before inner's begin
        ev(2_000_000, 2, SliceBegin, Some("inner")),
        ev(2_500_000, 2, Instant, Some("mark")),
        ev(5_000_000, 2, SliceEnd, None), // outer's end
        ev(9_000_000, 3, SliceEnd, None), // the range's end, before its begin
        ev(500_000, 3, SliceBegin, Some("moved")),
        ev(6_000_000, 2, SliceBegin, Some("later")),
        ev(6_000_000, 2, SliceEnd, None), // equal timestamps: file order
    ]);
    Trace { packet: packets }.encode_to_vec()
}

/// The same events as Chrome JSON, out of file order: an `E` before its
/// `B`, an `e` before its `b`.
const OUT_OF_FILE_ORDER_JSON: &str = r#"[
{"name":"outer","cat":"c","ph":"B","ts":1000,"pid":7,"tid":8},
{"ph":"E","ts":3000,"pid":7,"tid":8},
{"name":"inner","cat":"c","ph":"B","ts":2000,"pid":7,"tid":8},
{"name":"mark","cat":"c","ph":"i","s":"t","ts":2500,"pid":7,"tid":8},
{"ph":"E","ts":5000,"pid":7,"tid":8},
{"name":"moved","cat":"c","ph":"e","ts":9000,"pid":7,"tid":8,"id2":{"local":"0x1"}},
{"name":"moved","cat":"c","ph":"b","ts":500,"pid":7,"tid":8,"id2":{"local":"0x1"}},
{"name":"later","cat":"c","ph":"B","ts":6000,"pid":7,"tid":8},
{"ph":"E","ts":6000,"pid":7,"tid":8}
]
"#;

/// `inspect` and `convert` pair begins and ends in time order (stable for
/// equal timestamps), as Perfetto's reader does, not in file order; every
/// event survives conversion both ways.
#[test]
fn inspect_and_convert_pair_slices_in_time_order() {
    let dir = scratch("time-order");
    let pf = dir.join("in.pftrace");
    std::fs::write(&pf, out_of_file_order_perfetto()).unwrap();
    let js = dir.join("in.json");
    std::fs::write(&js, OUT_OF_FILE_ORDER_JSON).unwrap();
    // (name, ts, dur) in ns: what the events mean in time order.
    let want_slices: Slices = [
        (("outer".to_owned(), 1_000_000, 4_000_000), 1),
        (("inner".to_owned(), 2_000_000, 1_000_000), 1),
        (("moved".to_owned(), 500_000, 8_500_000), 1),
        (("later".to_owned(), 6_000_000, 0), 1),
    ]
    .into_iter()
    .collect();
    let want_instants: BTreeMap<(String, i64), usize> =
        [(("mark".to_owned(), 2_500_000), 1)].into_iter().collect();
    // The official decoder reads the Perfetto input so.
    let model = perfetto_model(&pf);
    assert_eq!(
        model_shapes(&model).0,
        want_slices,
        "the input as Perfetto reads it"
    );
    for input in [&pf, &js] {
        let s = inspect_json(input);
        assert_eq!(s["warnings"], serde_json::json!([]), "{}", input.display());
        assert_eq!(s["events"]["slices"], 3, "{}: {s}", input.display());
        assert_eq!(s["events"]["async_slices"], 1, "{}: {s}", input.display());
        assert_eq!(
            s["events"]["unfinished_slices"],
            0,
            "{}: {s}",
            input.display()
        );
        assert_eq!(s["events"]["instants"], 1, "{}: {s}", input.display());
        let to_json = dir.join("out.json");
        let to_pf = dir.join("out.pftrace");
        for out in [&to_json, &to_pf] {
            let _ = std::fs::remove_file(out);
            ok(&["convert", input.to_str().unwrap(), out.to_str().unwrap()]);
        }
        let events = json_events(&to_json);
        let ph = |p: &str| events.iter().filter(|e| e["ph"] == p).count();
        assert_eq!(
            (ph("b"), ph("e")),
            (1, 1),
            "{}: {events:?}",
            input.display()
        );
        let (slices, instants, _) = json_shapes(&events);
        assert_eq!(slices, want_slices, "{} to JSON", input.display());
        assert_eq!(instants, want_instants, "{} to JSON", input.display());
        let (slices, instants, _) = model_shapes(&perfetto_model(&to_pf));
        assert_eq!(slices, want_slices, "{} to Perfetto", input.display());
        assert_eq!(instants, want_instants, "{} to Perfetto", input.display());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A JSON trace of the program `pixel-app` (pid 40) with CPU samples of
/// three threads: `main` (41) in `main;render`, `worker-1` (42) in
/// `run;render` and an unnamed one (43) in `spin`.
fn sampled_json_trace(path: &Path) {
    let trace = serde_json::json!({
        "traceEvents": [
            {"ph": "M", "name": "process_name", "pid": 40, "tid": 41, "args": {"name": "pixel-app"}},
            {"ph": "M", "name": "thread_name", "pid": 40, "tid": 41, "args": {"name": "main"}},
            {"ph": "M", "name": "thread_name", "pid": 40, "tid": 42, "args": {"name": "worker-1"}},
            {"ph": "X", "name": "frame", "pid": 40, "tid": 42, "ts": 1.0, "dur": 10.0}
        ],
        "stackFrames": {
            "1": {"name": "main", "category": "app"},
            "2": {"name": "render", "category": "app", "parent": "1"},
            "3": {"name": "run", "category": "app"},
            "4": {"name": "render", "category": "app", "parent": "3"},
            "5": {"name": "spin", "category": "app"}
        },
        "samples": [
            {"cpu": 0, "tid": 41, "ts": 2.0, "name": "cpu-clock", "sf": 2, "weight": 1},
            {"cpu": 0, "tid": 41, "ts": 3.0, "name": "cpu-clock", "sf": 2, "weight": 1},
            {"cpu": 1, "tid": 42, "ts": 2.0, "name": "cpu-clock", "sf": 4, "weight": 1},
            {"cpu": 1, "tid": 43, "ts": 2.0, "name": "cpu-clock", "sf": 5, "weight": 1}
        ]
    });
    std::fs::write(path, trace.to_string()).unwrap();
}

/// Runs `flamegraph --folded` with `extra` options; the folded lines.
fn folded_lines(trace: &Path, extra: &[&str]) -> Vec<String> {
    let out = trace.with_extension("folded");
    let mut args = vec!["flamegraph", "--folded", "-o", out.to_str().unwrap()];
    args.extend_from_slice(extra);
    args.push(trace.to_str().unwrap());
    ok(&args);
    let text = std::fs::read_to_string(&out).unwrap();
    text.lines().map(str::to_owned).collect()
}

#[test]
fn flamegraph_has_one_root_per_thread() {
    let dir = scratch("flame-roots");
    let trace = dir.join("app.json");
    sampled_json_trace(&trace);
    assert_eq!(
        folded_lines(&trace, &[]),
        [
            "main (41);main;render 2",
            "thread 43;spin 1",
            "worker-1 (42);run;render 1",
        ]
    );
    // The SVG: one root frame per thread, none drawn under another.
    let svg = dir.join("app.svg");
    ok(&[
        "flamegraph",
        "-o",
        svg.to_str().unwrap(),
        trace.to_str().unwrap(),
    ]);
    let svg = std::fs::read_to_string(&svg).unwrap();
    for root in ["main (41)", "worker-1 (42)", "thread 43"] {
        assert!(
            svg.contains(&format!("<title>{root} (")),
            "{root} in the SVG"
        );
    }
}

#[test]
fn flamegraph_title_names_the_program() {
    let dir = scratch("flame-title");
    // JSON: the process_name metadata.
    let trace = dir.join("recorded-run.json");
    sampled_json_trace(&trace);
    let svg = dir.join("json.svg");
    ok(&[
        "flamegraph",
        "-o",
        svg.to_str().unwrap(),
        trace.to_str().unwrap(),
    ]);
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.contains(">pixel-app: CPU samples<"), "title: {text}");
    assert!(!text.contains(dir.to_str().unwrap()), "no path in the SVG");

    // Perfetto: the process descriptor names the program.
    let pf = dir.join("capture.pftrace");
    std::fs::write(&pf, perfetto_samples(Some("pixel-app"))).unwrap();
    let svg = dir.join("pf.svg");
    ok(&[
        "flamegraph",
        "-o",
        svg.to_str().unwrap(),
        pf.to_str().unwrap(),
    ]);
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.contains(">pixel-app: CPU samples<"), "title: {text}");
    assert!(text.contains("<title>main (41) ("), "thread root: {text}");

    // A trace that names no process: the file's stem, not its path.
    std::fs::write(&pf, perfetto_samples(None)).unwrap();
    ok(&[
        "flamegraph",
        "-o",
        svg.to_str().unwrap(),
        pf.to_str().unwrap(),
    ]);
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.contains(">capture: CPU samples<"), "title: {text}");
    assert!(!text.contains(dir.to_str().unwrap()), "no path in the SVG");
}

/// A Perfetto trace: the process (pid 40, named `process` if given) and its
/// thread `main` (41), and two samples of `main;hot` on it.
fn perfetto_samples(process: Option<&str>) -> Vec<u8> {
    use prost::Message;
    use ringtrace_protos::{
        Callstack, Frame, InternedData, InternedString, PerfSample, Trace, TracePacket,
    };
    let s = |iid: u64, text: &str| InternedString {
        iid: Some(iid),
        str: Some(text.as_bytes().to_vec()),
    };
    let frame = |iid: u64| Frame {
        iid: Some(iid),
        function_name_id: Some(iid),
        ..Default::default()
    };
    let sample = |ts: u64, first: bool| TracePacket {
        timestamp: Some(ts),
        trusted_packet_sequence_id: Some(9),
        sequence_flags: Some(if first { 3 } else { 2 }),
        interned_data: first.then(|| InternedData {
            function_names: vec![s(1, "main"), s(2, "hot")],
            frames: vec![frame(1), frame(2)],
            callstacks: vec![Callstack {
                iid: Some(1),
                frame_ids: vec![1, 2],
            }],
            ..Default::default()
        }),
        perf_sample: Some(PerfSample {
            pid: Some(40),
            tid: Some(41),
            callstack_iid: Some(1),
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut packets = process_and_thread(None, (40, process), (41, Some("main")));
    packets.extend([sample(100, true), sample(200, false)]);
    Trace { packet: packets }.encode_to_vec()
}

#[test]
fn flamegraph_thread_filter_keeps_only_those_threads() {
    let dir = scratch("flame-filter");
    let trace = dir.join("app.json");
    sampled_json_trace(&trace);
    assert_eq!(
        folded_lines(&trace, &["--thread", "worker-1"]),
        ["worker-1 (42);run;render 1"]
    );
    assert_eq!(
        folded_lines(&trace, &["--thread", "work*"]),
        ["worker-1 (42);run;render 1"]
    );
    // By tid, comma-separated and repeated.
    assert_eq!(
        folded_lines(&trace, &["--thread", "41,43"]),
        ["main (41);main;render 2", "thread 43;spin 1"]
    );
    assert_eq!(
        folded_lines(&trace, &["--thread", "main", "--thread", "42"]),
        ["main (41);main;render 2", "worker-1 (42);run;render 1"]
    );
    // With --under: worker-1's sample inside `frame`.
    assert_eq!(
        folded_lines(&trace, &["--thread", "worker-1", "--under", "frame"]),
        ["worker-1 (42);run;render 1"]
    );
    // An exact name does not match by prefix.
    let out = dir.join("x.svg");
    let err = fails(
        &[
            "flamegraph",
            "--thread",
            "work",
            "-o",
            out.to_str().unwrap(),
            trace.to_str().unwrap(),
        ],
        1,
    );
    assert!(
        err.contains("no sampled thread matches --thread work"),
        "{err}"
    );
}

#[test]
fn flamegraph_thread_filter_matching_nothing_names_the_threads() {
    let dir = scratch("flame-nomatch");
    let trace = dir.join("app.json");
    sampled_json_trace(&trace);
    let out = dir.join("x.svg");
    let err = fails(
        &[
            "flamegraph",
            "--thread",
            "gpu*,7",
            "-o",
            out.to_str().unwrap(),
            trace.to_str().unwrap(),
        ],
        1,
    );
    assert!(
        err.contains("no sampled thread matches --thread gpu*,7"),
        "{err}"
    );
    assert!(
        err.contains("the sampled threads are: main (41), worker-1 (42), thread 43"),
        "{err}"
    );
    assert!(!out.exists(), "nothing written");
}
