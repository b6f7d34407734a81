//! The trace is complete however the program ends: guard drop (covered by
//! every other test), `std::process::exit` with a thread still recording, a
//! panic unwinding out of `main`, and `init_from_env`.

mod common;

use common::*;

fn slice_names(model: &serde_json::Value) -> Vec<String> {
    model["slices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap_or("").to_string())
        .collect()
}

#[test]
fn process_exit_finishes_the_trace_and_flushes_running_threads() {
    let dir = scratch("exit");
    for ext in ["pftrace", "json"] {
        let trace = dir.join(format!("exit.{ext}"));
        let (out, expect) = run_scenario("exit_process_exit", &trace, &[]);
        assert_eq!(
            out.status.code(),
            Some(7),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(expect.is_some());
        let names: Vec<String> = if ext == "pftrace" {
            slice_names(&perfetto_model(&trace))
        } else {
            // A finished JSON file: it parses as a whole.
            json_events(&trace)
                .iter()
                .filter_map(|e| e["name"].as_str().map(String::from))
                .collect()
        };
        assert_eq!(
            names.iter().filter(|n| *n == "main_event").count(),
            10,
            "{ext}"
        );
        // The busy thread was still running at exit: what it had recorded is there.
        assert!(
            names.iter().filter(|n| *n == "busy_loop").count() > 1000,
            "{ext}"
        );
    }
}

#[test]
fn panic_in_main_finishes_the_trace() {
    let dir = scratch("panic");
    let trace = dir.join("panic.pftrace");
    let (out, _) = run_scenario("exit_panic", &trace, &[]);
    assert_eq!(out.status.code(), Some(101));
    assert!(String::from_utf8_lossy(&out.stderr).contains("scenario panics in main"));
    let model = perfetto_model(&trace);
    let names = slice_names(&model);
    for want in ["worker_scope", "from_worker", "main_scope", "before_panic"] {
        assert!(
            names.iter().any(|n| n == want),
            "{want} missing from {names:?}"
        );
    }
}

#[test]
fn init_from_env_reads_output_and_categories() {
    let dir = scratch("env");
    let trace = dir.join("env.pftrace");
    let (out, _) = run_scenario(
        "init_from_env",
        &dir.join("unused"),
        &[
            ("RINGTRACE_OUTPUT", trace.to_str().unwrap()),
            ("RINGTRACE_CATEGORIES", "*,-skipped"),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let names = slice_names(&perfetto_model(&trace));
    assert_eq!(names, ["from_env"]);
}

#[test]
fn panic_in_a_worker_thread_keeps_its_events() {
    let dir = scratch("worker-panic");
    let trace = dir.join("wp.pftrace");
    let (out, expect) = run_scenario("worker_panic", &trace, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(expect.unwrap()["worker_panicked"], true);
    let model = perfetto_model(&trace);
    let slices = model["slices"].as_array().unwrap();
    for name in ["outer_before_panic", "inner_before_panic"] {
        let s = slices
            .iter()
            .find(|s| s["name"] == name)
            .unwrap_or_else(|| panic!("{name} missing"));
        assert!(
            s["dur"].as_i64().unwrap() >= 0,
            "{name} is closed by the unwinding"
        );
    }
    assert!(slices
        .iter()
        .any(|s| s["name"] == "main_after_worker_panic"));
}

#[test]
fn abort_leaves_what_was_flushed_readable() {
    let dir = scratch("abort");
    let trace = dir.join("abort.pftrace");
    let (out, _) = run_scenario("abort", &trace, &[]);
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(libc::SIGABRT));
    let model = perfetto_model(&trace);
    let n = slices_named(&model, "before_abort").len();
    assert_eq!(n, 500, "everything flushed before the abort is readable");
}
