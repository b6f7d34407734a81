//! Shared helpers of the integration tests: run a scenario in a child process,
//! decode its Perfetto trace with the official schema (through
//! `tests/support/perfetto_model.py`), parse its JSON with serde_json.

#![allow(dead_code)]

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A fresh directory for one test's files.
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ringtrace-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs `scenario` of the scenario binary, writing `trace`; returns the
/// process output and the expectation file it wrote (if any).
pub fn run_scenario(
    scenario: &str,
    trace: &Path,
    envs: &[(&str, &str)],
) -> (Output, Option<Value>) {
    let expect = trace.with_extension("expect.json");
    let _ = std::fs::remove_file(&expect);
    let out = Command::new(env!("CARGO_BIN_EXE_ringtrace-test-scenarios"))
        .args([scenario, trace.to_str().unwrap(), expect.to_str().unwrap()])
        .envs(envs.iter().copied())
        .output()
        .expect("run scenario binary");
    let expectation = std::fs::read(&expect)
        .ok()
        .map(|b| serde_json::from_slice(&b).unwrap());
    (out, expectation)
}

/// Runs `scenario` writing `file` in a fresh directory `dir`; fails the test
/// if the child fails. Returns the trace's path and the child's expectation.
pub fn run_scenario_ok(
    dir: &str,
    file: &str,
    scenario: &str,
    envs: &[(&str, &str)],
) -> (PathBuf, Value) {
    let trace = scratch(dir).join(file);
    let (out, expect) = run_scenario(scenario, &trace, envs);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let expect = expect.unwrap_or_else(|| panic!("scenario {scenario} wrote no expectation"));
    (trace, expect)
}

pub fn python() -> String {
    std::env::var("RINGTRACE_PYTHON").unwrap_or_else(|_| "python3".to_string())
}

/// The trace as a Perfetto reader resolves it (see tests/support/perfetto_model.py).
/// Fails the test if the file breaks any rule a Perfetto reader applies.
pub fn perfetto_model(trace: &Path) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/perfetto_model.py");
    let out = Command::new(python())
        .arg(&script)
        .arg(trace)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {}: {e} (set RINGTRACE_PYTHON, see scripts/test.sh)",
                python()
            )
        });
    let model: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "decoder output is not JSON ({e}); stderr:\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert!(
        out.status.success() && model["errors"].as_array().is_some_and(|e| e.is_empty()),
        "the Perfetto decoder rejects {}: {:#}\nstderr: {}",
        trace.display(),
        model["errors"],
        String::from_utf8_lossy(&out.stderr)
    );
    model
}

/// The JSON trace parsed by a standard JSON parser: the array of events.
pub fn json_events(trace: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(trace).unwrap();
    match serde_json::from_str::<Value>(&text).expect("valid JSON") {
        Value::Array(events) => events,
        Value::Object(mut o) => match o.remove("traceEvents") {
            Some(Value::Array(events)) => events,
            _ => panic!("object form without traceEvents"),
        },
        other => panic!("unexpected JSON trace: {other}"),
    }
}

/// The slices of `model` named `name`.
pub fn slices_named<'a>(model: &'a Value, name: &str) -> Vec<&'a Value> {
    model["slices"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["name"] == name)
        .collect()
}

/// Slices of `model` on the thread track of `tid`, in time order.
pub fn thread_slices(model: &Value, tid: i64) -> Vec<&Value> {
    let uuid = thread_uuid(model, tid);
    let mut v: Vec<&Value> = model["slices"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["track_uuid"] == uuid)
        .collect();
    v.sort_by_key(|s| (s["ts"].as_u64().unwrap(), s["depth"].as_u64().unwrap()));
    v
}

pub fn thread_uuid(model: &Value, tid: i64) -> Value {
    model["tracks"]
        .as_object()
        .unwrap()
        .values()
        .find(|t| t["kind"] == "thread" && t["tid"].as_i64() == Some(tid))
        .unwrap_or_else(|| panic!("no thread track for tid {tid}"))["uuid"]
        .clone()
}

/// Counter values on the counter track named `name`, in time order.
pub fn counter_values(model: &Value, name: &str) -> Vec<(u64, f64)> {
    let tracks: Vec<&Value> = model["tracks"]
        .as_object()
        .unwrap()
        .values()
        .filter(|t| t["kind"] == "counter" && t["name"] == name)
        .map(|t| &t["uuid"])
        .collect();
    assert_eq!(tracks.len(), 1, "one counter track named {name}");
    let mut v: Vec<(u64, f64)> = model["counters"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| &&c["track_uuid"] == tracks.first().unwrap())
        .map(|c| (c["ts"].as_u64().unwrap(), c["value"].as_f64().unwrap()))
        .collect();
    v.sort_by_key(|c| c.0);
    v
}

/// Sum of the `lost_events` counts the trace marks.
pub fn lost_marked(model: &Value) -> u64 {
    model["slices"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["name"] == "ringtrace: events lost")
        .map(|s| s["args"]["lost_events"].as_u64().unwrap())
        .sum()
}

/// Starts `scenario` and waits until it prints "ready".
pub fn spawn_ready(scenario: &str, trace: &std::path::Path) -> std::process::Child {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_ringtrace-test-scenarios"))
        .args([
            scenario,
            trace.to_str().unwrap(),
            trace.with_extension("expect").to_str().unwrap(),
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::BufRead;
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready");
    child
}

/// Records of a decoded Perfetto trace, and the losses it marks.
pub fn perfetto_written(trace: &Path) -> (u64, u64) {
    let model = perfetto_model(trace);
    let written = model["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| match e["type"].as_str().unwrap() {
            // An end the encoder wrote for a slice whose end was lost.
            "SLICE_END" => e["args"].get("ringtrace.end_lost").is_none(),
            "SLICE_BEGIN" => true,
            "INSTANT" => e["name"] != "ringtrace: events lost",
            other => panic!("unexpected event type {other}"),
        })
        .count() as u64;
    (written, lost_marked(&model))
}

/// Records of a JSON trace, and the losses it marks.
pub fn json_written(trace: &Path) -> (u64, u64) {
    let (mut written, mut marked) = (0, 0);
    for e in json_events(trace) {
        let args = &e["args"];
        // Slices whose end the encoder made up: their end was not recorded.
        let made_up =
            !args["ringtrace.end_lost"].is_null() || !args["ringtrace.unfinished"].is_null();
        written += match e["ph"].as_str().unwrap() {
            "X" if made_up => 1,
            "X" => 2,
            "E" | "e" if made_up => 0,
            "B" | "E" | "b" | "e" => 1,
            "i" if e["name"] == "ringtrace: events lost" => {
                marked += args["lost_events"].as_u64().unwrap();
                0
            }
            "i" => 1,
            "M" => 0,
            other => panic!("unexpected phase {other}: {e}"),
        };
    }
    (written, marked)
}
