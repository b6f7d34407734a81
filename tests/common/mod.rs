//! Shared helpers of the integration tests: run a scenario in a child
//! process, and read what its traces hold. Scratch directories, the Python
//! and the decoders with the official schema are the workspace's
//! (`ringtrace-test-support`, re-exported here).

#![allow(dead_code)]

// Each test binary uses a part of them.
#[allow(unused_imports)]
pub use ringtrace_test_support::{
    json_events, perfetto_model, python, rerun_test, run_python, samples_model, scratch, Rng,
};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

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

/// Runs `scenario trace expect args...` of the scenario binary; fails the
/// test if the child fails. Returns the expectation it wrote to `expect`.
pub fn run_scenario_with(scenario: &str, trace: &Path, expect: &Path, args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_ringtrace-test-scenarios"))
        .args([scenario, trace.to_str().unwrap(), expect.to_str().unwrap()])
        .args(args)
        .output()
        .expect("run scenario binary");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&std::fs::read(expect).unwrap()).unwrap()
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
