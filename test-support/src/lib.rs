//! What the tests of every ringtrace crate share, written once: scratch
//! directories, the Python that has the official Perfetto schema, the trace
//! decoders (`tests/support/*.py` of the workspace, run by that Python), JSON
//! trace reading, the archive checks ([`archive`]) and a seeded generator
//! ([`Rng`]).
//!
//! A dev-only crate: a dev-dependency of the published crates (a `path`
//! without a version, which `cargo publish` strips), never a dependency they
//! need to build. Every helper fails the calling test with a message naming
//! what failed.

pub mod archive;
pub mod elf;
pub mod otlp;
mod rng;

pub use rng::Rng;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A fresh, empty directory for one test's files, unique per call: tests run
/// in parallel threads of one process, and several test binaries at once.
///
/// The name is short (`<tmp>/rt-<pid>-<n>-<name>`) so that Unix socket paths
/// made inside it stay within their 108-byte limit.
pub fn scratch(name: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("rt-{}-{n}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("cannot make the scratch directory {}: {e}", dir.display()));
    dir
}

/// The Python with the `perfetto` package: `RINGTRACE_PYTHON`, else
/// `python3` (`scripts/test.sh` sets up a virtual environment and the
/// variable).
pub fn python() -> String {
    std::env::var("RINGTRACE_PYTHON").unwrap_or_else(|_| "python3".to_string())
}

/// This test binary run again as a child process that runs only the test
/// `name` (exactly, on one thread, its output not captured): for a test
/// binary whose cases record in a process of their own (the child test
/// finds what to do in environment variables the parent sets on the
/// returned command, and does nothing without them).
pub fn rerun_test(name: &str) -> Command {
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut command = Command::new(exe);
    command.args([name, "--exact", "--nocapture", "--test-threads=1"]);
    command
}

/// Runs `command` (a Python), failing the test with a hint if it cannot start.
fn run(command: &mut Command) -> Output {
    command.output().unwrap_or_else(|e| {
        panic!(
            "cannot run {}: {e} (set RINGTRACE_PYTHON, see scripts/test.sh)",
            python()
        )
    })
}

/// Runs the Python `script` (given as text) with `args`; fails the test if
/// it fails. Returns its stdout.
pub fn run_python(script: &str, args: &[&str]) -> String {
    let out = run(Command::new(python()).arg("-c").arg(script).args(args));
    assert!(
        out.status.success(),
        "python failed ({}): {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("python's output is UTF-8")
}

/// The workspace's decoder script `name` (in `tests/support/`).
pub(crate) fn support_script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/support")
        .join(name)
}

/// Runs the decoder `script` on `trace`; its JSON output (which lists the
/// trace's `errors`), failing the test if there are any.
fn decode(script: &str, trace: &Path, what: &str) -> Value {
    let out = run(Command::new(python())
        .arg(support_script(script))
        .arg(trace));
    let model: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{script} on {}: its output is not JSON ({e}); stderr:\n{}",
            trace.display(),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert!(
        out.status.success() && model["errors"].as_array().is_some_and(|e| e.is_empty()),
        "{what} {}: {:#}\nstderr: {}",
        trace.display(),
        model["errors"],
        String::from_utf8_lossy(&out.stderr)
    );
    model
}

/// The Perfetto trace at `trace` as a reader resolves it (the model of
/// `tests/support/perfetto_model.py`, decoded with the official schema);
/// fails the test on any rule of a Perfetto reader it breaks. Warnings
/// (what a reader accepts but a clean trace does not have, such as an end
/// after a declared loss) are in `model["warnings"]`:
/// [`perfetto_model_clean`] fails on those too.
pub fn perfetto_model(trace: &Path) -> Value {
    decode("perfetto_model.py", trace, "the Perfetto decoder rejects")
}

/// [`perfetto_model`], failing the test on any warning as well.
pub fn perfetto_model_clean(trace: &Path) -> Value {
    let model = perfetto_model(trace);
    let warnings = model["warnings"]
        .as_array()
        .expect("the model lists warnings");
    assert!(
        warnings.is_empty(),
        "the Perfetto decoder warns about {}: {warnings:#?}",
        trace.display()
    );
    model
}

/// The CPU samples of the Perfetto trace at `trace` as the official schema
/// resolves them (`tests/support/perfetto_samples.py`); fails the test on
/// any interned id that resolves to nothing, or a sample using interned data
/// before its sequence was cleared.
pub fn samples_model(trace: &Path) -> Value {
    decode(
        "perfetto_samples.py",
        trace,
        "the samples do not resolve in",
    )
}

/// The JSON trace at `trace` parsed by a standard JSON parser.
pub fn json_trace(trace: &Path) -> Value {
    let text = std::fs::read_to_string(trace)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", trace.display()));
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{} is not valid JSON: {e}", trace.display()))
}

/// The events of the JSON trace at `trace`: the bare array, or the object
/// form's `traceEvents`.
pub fn json_events(trace: &Path) -> Vec<Value> {
    match json_trace(trace) {
        Value::Array(events) => events,
        Value::Object(mut o) => match o.remove("traceEvents") {
            Some(Value::Array(events)) => events,
            _ => panic!("{}: object form without traceEvents", trace.display()),
        },
        other => panic!("{}: not a JSON trace: {other}", trace.display()),
    }
}
