//! Scratch directories and the Python that has the official Perfetto
//! schema: what the tests of `ringtrace-archive` and of `ringtrace` share
//! (each includes this file in its own `common` module).

use std::path::PathBuf;
use std::process::Command;

/// A fresh directory, unique per call (tests run in parallel threads).
pub fn scratch(name: &str) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!(
        "ringtrace-{}-{}-{n}-{name}",
        env!("CARGO_CRATE_NAME"),
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The Python with the `perfetto` package (`scripts/test.sh` sets it up).
pub fn python() -> String {
    std::env::var("RINGTRACE_PYTHON").unwrap_or_else(|_| "python3".to_string())
}

/// Runs a Python script; fails the test if it fails. Returns its stdout.
pub fn run_python(script: &str, args: &[&str]) -> String {
    let out = Command::new(python())
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e} (set RINGTRACE_PYTHON)", python()));
    assert!(
        out.status.success(),
        "python failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}
