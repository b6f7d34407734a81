//! What the integration tests of `ringtrace` share beyond the workspace's
//! test helpers (`ringtrace-test-support`, re-exported here): slices and
//! captures as a viewer shows them, and a session started from the
//! environment.
//!
//! Each test binary uses part of it.
#![allow(dead_code)]

pub mod captures;
pub mod slices;

// Each test binary uses a part of them.
#[allow(unused_imports)]
pub use ringtrace_test_support::{
    archive, json_events, perfetto_model_clean, rerun_test, run_python, scratch,
};
use std::path::Path;

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
