//! OTLP export on the exit paths the file is finished on: spans recorded
//! and never stopped are sent when the program calls `std::process::exit`
//! or panics out of `main` (feature `otlp`; the collector decodes with the
//! official schema).

mod common;

use common::scratch;
use ringtrace_test_support::otlp::OtlpReceiver;
use std::process::Command;
use std::time::Duration;

fn exits(how: &str) -> (OtlpReceiver, Vec<serde_json::Value>) {
    let rx = OtlpReceiver::start("otlp-exit-rx", "normal");
    let endpoint = rx.endpoint();
    exits_with(rx, how, &[("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)])
}

fn exits_with(
    rx: OtlpReceiver,
    how: &str,
    envs: &[(&str, &str)],
) -> (OtlpReceiver, Vec<serde_json::Value>) {
    let trace = scratch("otlp-exit").join("t.pftrace");
    let out = Command::new(env!("CARGO_BIN_EXE_ringtrace-test-scenarios"))
        .args(["otlp_exit", trace.to_str().unwrap(), "-", how])
        .envs(envs.iter().copied())
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
    (rx, spans)
}

#[test]
fn spans_are_sent_at_process_exit() {
    exits("exit");
}

#[test]
fn spans_are_sent_when_main_panics() {
    exits("panic");
}

/// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is the whole URL, the headers and
/// resource attributes are sent (values percent-decoded), gzip bodies
/// decode, and the service is `unknown_service:<process>` without a name.
#[test]
fn the_standard_variables_configure_the_export() {
    let rx = OtlpReceiver::start("otlp-env-rx", "normal");
    let url = format!("{}/v1/traces", rx.endpoint());
    let (rx, spans) = exits_with(
        rx,
        "exit",
        &[
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &url),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=a%3Db,x-team=obs"),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "deployment.environment=ci,team=o%20b",
            ),
            ("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip"),
        ],
    );
    for r in rx.requests() {
        assert_eq!(r["headers"]["x-api-key"], "a=b", "{r}");
        assert_eq!(r["headers"]["x-team"], "obs");
        assert_eq!(r["headers"]["content-encoding"], "gzip");
    }
    for s in &spans {
        let res = &s["resource"];
        assert_eq!(res["deployment.environment"][1], "ci");
        assert_eq!(res["team"][1], "o b");
        let service = res["service.name"][1].as_str().unwrap();
        assert!(
            service.starts_with("unknown_service:ringtrace"),
            "{service}"
        );
    }
}

/// A bad value is an error naming the variable, not ignored.
#[test]
fn a_bad_variable_is_an_error() {
    let rx = OtlpReceiver::start("otlp-bad-rx", "normal");
    let trace = scratch("otlp-bad").join("t.pftrace");
    let out = Command::new(env!("CARGO_BIN_EXE_ringtrace-test-scenarios"))
        .args(["otlp_exit", trace.to_str().unwrap(), "-", "exit"])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", rx.endpoint())
        .env("OTEL_EXPORTER_OTLP_COMPRESSION", "zstd")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("OTEL_EXPORTER_OTLP_COMPRESSION") && err.contains("gzip or none"),
        "{err}"
    );
}
