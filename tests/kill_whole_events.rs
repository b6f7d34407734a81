//! Issue 17 part 4: whatever a SIGKILL leaves is whole events. A child
//! records scopes back to back into a file and is killed while it writes;
//! with no cleanup of any kind,
//! - the Chrome JSON file loads in a standard parser (serde_json) once the
//!   format's optional `]` is appended, nothing cut away first;
//! - the Perfetto file decodes as a whole with a strict protobuf parser
//!   (prost, over the project's copy of Perfetto's `.proto`: no cut last
//!   packet) and with the official schema (`tests/support/perfetto_model.py`);
//! - an archive being rewritten in place is always the previous complete
//!   archive, never a partial one, and the temporary file a killed writer
//!   leaves is not taken for a trace by `Archive::from_dir`.
//!
//! The kills wait for what the child wrote rather than for a fixed time, so
//! the test holds under valgrind (`scripts/memcheck.sh` runs it).

mod common;

use common::*;
use prost::Message;
use serde_json::Value;
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

/// Waits until `path` holds at least `bytes` (the child is writing), or
/// fails after a minute.
fn wait_for(path: &Path, bytes: u64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::fs::metadata(path).map_or(0, |m| m.len()) < bytes {
        assert!(Instant::now() < deadline, "{} stayed small", path.display());
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// How much the child writes before each kill: 32 KiB, 256 KiB and 1 MiB,
/// those up to `RINGTRACE_KILL_MAX_BYTES` (`scripts/memcheck.sh` keeps the
/// children under valgrind short).
fn kill_sizes() -> Vec<u64> {
    let max = std::env::var("RINGTRACE_KILL_MAX_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(u64::MAX);
    [32u64 << 10, 256 << 10, 1 << 20]
        .into_iter()
        .filter(|&s| s <= max)
        .collect()
}

fn sigkill(mut child: Child) {
    child.kill().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(child.wait().unwrap().signal(), Some(libc::SIGKILL));
}

#[test]
fn killed_json_writer_leaves_whole_events() {
    let dir = scratch("kill-json");
    // Several kills, at different sizes: each lands wherever the writer is.
    for (round, size) in kill_sizes().into_iter().enumerate() {
        let trace = dir.join(format!("endless{round}.json"));
        let child = spawn_ready("endless", &trace);
        wait_for(&trace, size);
        sigkill(child);
        let mut text = std::fs::read(&trace).unwrap();
        assert!(
            !text.ends_with(b"]\n"),
            "a killed writer never closes the array"
        );
        text.push(b']');
        let events: Vec<Value> = serde_json::from_slice(&text).unwrap_or_else(|e| {
            let tail = String::from_utf8_lossy(&text[text.len().saturating_sub(200)..]);
            panic!("round {round}: the file + ']' does not parse: {e}; it ends with {tail:?}")
        });
        let scopes: Vec<&Value> = events.iter().filter(|e| e["name"] == "endless").collect();
        assert!(scopes.len() > 100, "{} scopes", scopes.len());
        // Whole events: every scope has all it was recorded with.
        for e in &scopes {
            assert_eq!(e["ph"], "X", "{e}");
            assert!(e["dur"].is_number() && e["ts"].is_number(), "{e}");
            assert_eq!(e["args"]["label"], "some text to make lines longer", "{e}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn killed_perfetto_writer_leaves_whole_packets() {
    let dir = scratch("kill-pftrace");
    for (round, size) in kill_sizes().into_iter().enumerate() {
        let trace = dir.join(format!("endless{round}.pftrace"));
        let child = spawn_ready("endless", &trace);
        wait_for(&trace, size);
        sigkill(child);
        let bytes = std::fs::read(&trace).unwrap();
        let decoded = ringtrace_protos::Trace::decode(bytes.as_slice())
            .unwrap_or_else(|e| panic!("round {round}: a strict parser rejects the file: {e}"));
        assert!(decoded.packet.len() > 100);
        let model = perfetto_model(&trace);
        let n = slices_named(&model, "endless").len();
        assert!(n > 100, "{n} slices before the kill");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn archive_rewritten_by_a_killed_process_stays_whole() {
    use ringtrace::archive::{check_archive, read_members, Archive};
    let dir = scratch("kill-archive");
    for (round, ext) in ["tar", "zip", "tar", "zip"].into_iter().enumerate() {
        let path = dir.join(format!("run{round}.{ext}"));
        let child = spawn_ready("archive_loop", &path);
        // Let it be somewhere in a later rewrite.
        std::thread::sleep(Duration::from_millis(5 + 20 * round as u64));
        sigkill(child);
        let bytes = std::fs::read(&path).unwrap();
        check_archive(&bytes).unwrap_or_else(|e| panic!("{ext}: {e}"));
        let members = read_members(&bytes).unwrap();
        let big = &members.iter().find(|(n, _)| n == "big.json").unwrap().1;
        let events: Value = serde_json::from_slice(big).unwrap();
        assert_eq!(events.as_array().unwrap().len(), 20_000);
    }
    // The killed writers' temporary files are not members of a directory's archive.
    let collected = Archive::from_dir(&dir).unwrap();
    for m in collected.members() {
        assert!(
            !m.name().contains(".partial-"),
            "a partial archive was taken for a trace: {}",
            m.name()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
