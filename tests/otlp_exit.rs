//! OTLP export on the exit paths the file is finished on: spans recorded
//! and never stopped are sent when the program calls `std::process::exit`
//! or panics out of `main` (feature `otlp`; the collector decodes with the
//! official schema).

mod common;

use common::scratch;
use ringtrace_test_support::otlp::OtlpReceiver;
use std::process::Command;
use std::time::Duration;

fn exits(how: &str) {
    let rx = OtlpReceiver::start("otlp-exit-rx", "normal");
    let trace = scratch("otlp-exit").join("t.pftrace");
    let out = Command::new(env!("CARGO_BIN_EXE_ringtrace-test-scenarios"))
        .args(["otlp_exit", trace.to_str().unwrap(), "-", how])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", rx.endpoint())
        .output()
        .unwrap();
    assert_eq!(
        out.status.success(),
        how == "exit",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The spans were sent before the process ended: no wait needed but
    // the receiver's own write.
    let spans = rx.wait_spans(3, Duration::from_secs(5));
    let mut seen: Vec<i64> = spans
        .iter()
        .map(|s| {
            assert_eq!(s["name"], "before_exit");
            assert_eq!(s["events"][0]["name"], "inside");
            s["attributes"]["i"][1].as_i64().unwrap()
        })
        .collect();
    seen.sort();
    assert_eq!(seen, [0, 1, 2]);
}

#[test]
fn spans_are_sent_at_process_exit() {
    exits("exit");
}

#[test]
fn spans_are_sent_when_main_panics() {
    exits("panic");
}
