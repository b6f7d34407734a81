//! An OTLP/HTTP collector for the export tests: `tests/support/otlp_receiver.py`
//! in a child process (the Python of [`python`](crate::python), with
//! opentelemetry-proto), which decodes every request body with the official
//! OTLP schema. Killed when dropped.

use serde_json::Value;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// A collector in a child process.
pub struct OtlpReceiver {
    child: Child,
    dir: PathBuf,
    /// The port it listens on (127.0.0.1).
    pub port: u16,
}

impl OtlpReceiver {
    /// Starts one in `mode` (`normal`, `status:CODE:N:AFTER`, `slow`: see
    /// the script); waits until it listens.
    pub fn start(name: &str, mode: &str) -> OtlpReceiver {
        let dir = crate::scratch(name);
        let child = Command::new(crate::python())
            .arg(crate::support_script("otlp_receiver.py"))
            .arg(&dir)
            .arg(mode)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start the OTLP receiver: {e}"));
        let t = Instant::now();
        let port = loop {
            if let Ok(p) = std::fs::read_to_string(dir.join("port")) {
                break p.trim().parse().expect("the receiver's port");
            }
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "the OTLP receiver did not start (is opentelemetry-proto installed? \
                 tests/support/requirements.txt)"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        OtlpReceiver { child, dir, port }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every request received so far (path, headers, `spans` decoded or
    /// `error`, `answered` for a refused one, `at`).
    pub fn requests(&self) -> Vec<Value> {
        std::fs::read_to_string(self.dir.join("requests.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("a request's JSON line"))
            .collect()
    }

    /// Every span received in the requests it took, each request checked
    /// first (path, content type, a body that decodes).
    pub fn spans(&self) -> Vec<Value> {
        let mut spans = Vec::new();
        for r in self.requests() {
            assert_eq!(r["path"], "/v1/traces", "{r}");
            if r.get("answered").is_some() {
                continue;
            }
            assert_eq!(
                r["headers"]["content-type"], "application/x-protobuf",
                "{r}"
            );
            assert!(r.get("error").is_none(), "a body did not decode: {r}");
            spans.extend(r["spans"].as_array().expect("spans").iter().cloned());
        }
        spans
    }

    /// Waits until `n` spans arrived (at most `timeout`); the spans.
    pub fn wait_spans(&self, n: usize, timeout: Duration) -> Vec<Value> {
        let t = Instant::now();
        loop {
            let spans = self.spans();
            if spans.len() >= n || t.elapsed() > timeout {
                return spans;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
