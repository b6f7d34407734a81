//! What the integration tests of `ringtrace` share: scratch directories, the
//! Python that has the official Perfetto schema, the decoders, and a session
//! started from the environment.
//!
//! Each test binary uses part of it.
#![allow(dead_code)]

// The archive crate's test helpers (Python validator, synthetic traces),
// shared with `archive_processes`, which records its members with the SDK.
#[path = "../../../archive/tests/common/archive.rs"]
pub mod archive;
// Scratch directories and the Python: the archive crate's own.
#[path = "../../../archive/tests/common/base.rs"]
mod base;
pub mod captures;
pub mod slices;

pub use base::{python, run_python, scratch};
use serde_json::Value;
use std::path::Path;
use std::process::Command;

/// The Perfetto trace as a reader resolves it; fails on any rule it breaks.
pub fn perfetto_model(trace: &Path) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/support/perfetto_model.py");
    let out = Command::new(python())
        .arg(&script)
        .arg(trace)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e} (see scripts/test.sh)", python()));
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
    let warnings = model["warnings"].as_array().unwrap();
    assert!(warnings.is_empty(), "decoder warnings: {warnings:#?}");
    model
}

/// The events of a JSON trace in the bare array form.
pub fn json_events(trace: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(trace).unwrap();
    match serde_json::from_str::<Value>(&text).expect("the JSON trace is valid JSON") {
        Value::Array(events) => events,
        other => panic!("expected the bare array form, got {other}"),
    }
}

/// A session started from the environment (`RINGTRACE_OUTPUT`,
/// `RINGTRACE_MAX_FILE_BYTES`, `RINGTRACE_MAX_FILES`) records `n` instants
/// `tick`, flushing every 1,000; returns its `Stats`. The variables are
/// removed again.
pub fn ticks_from_env(
    output: &Path,
    max_file_bytes: u64,
    max_files: u64,
    n: u64,
) -> ringtrace::Stats {
    std::env::set_var("RINGTRACE_OUTPUT", output);
    std::env::set_var("RINGTRACE_MAX_FILE_BYTES", max_file_bytes.to_string());
    std::env::set_var("RINGTRACE_MAX_FILES", max_files.to_string());
    let trace = ringtrace::init_from_env().unwrap().unwrap();
    for i in 0..n {
        ringtrace::trace_instant!("env", "tick", i = i);
        if i % 1000 == 0 {
            ringtrace::flush();
        }
    }
    let stats = trace.stop().unwrap();
    for k in [
        "RINGTRACE_OUTPUT",
        "RINGTRACE_MAX_FILE_BYTES",
        "RINGTRACE_MAX_FILES",
    ] {
        std::env::remove_var(k);
    }
    stats
}
