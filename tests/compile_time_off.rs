//! With the `enable` feature off, every macro and `#[traced]` expand to
//! nothing: argument expressions are not evaluated and the binary carries no
//! ringtrace code, statics or names.

use std::path::Path;
use std::process::Command;

#[test]
fn disabled_feature_compiles_instrumentation_out() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let target = root.join("target/compiled-out");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let build = Command::new(cargo)
        .args(["build", "--release", "--quiet", "--manifest-path"])
        .arg(root.join("tests/compiled_out/Cargo.toml"))
        .arg("--target-dir")
        .arg(&target)
        .env_remove("RUSTFLAGS")
        .output()
        .unwrap();
    assert!(
        build.status.success(),
        "{}",
        String::from_utf8_lossy(&build.stderr)
    );
    let exe = target.join("release/ringtrace-compiled-out");

    // Half one: no argument was evaluated (each would panic).
    let run = Command::new(&exe).output().unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&run.stdout).trim(), "ok 42");

    // Half two: no ringtrace symbol, and none of the instrumentation names.
    let bytes = std::fs::read(&exe).unwrap();
    let text = String::from_utf8_lossy(&bytes);
    assert!(
        !text.contains("xq7"),
        "an event name survived in the binary"
    );
    let nm = Command::new("nm").arg("-C").arg(&exe).output().unwrap();
    assert!(nm.status.success());
    let symbols = String::from_utf8_lossy(&nm.stdout);
    let ours: Vec<&str> = symbols
        .lines()
        .filter(|l| l.contains("ringtrace::"))
        .collect();
    assert!(ours.is_empty(), "ringtrace symbols in the binary: {ours:?}");
}
