//! Faults around the files a session writes, injected for real in child
//! programs (`ringtrace-test-scenarios faults CASE`): a budget of `u64::MAX`,
//! a part's or capture's name taken (a directory, an earlier run's file, a
//! planted symlink), no file descriptor left, a full disk (`RLIMIT_FSIZE`),
//! a capture into a missing directory or under a name too long, a capture
//! queued while a dump's window is open. In every case: no abort, panic or
//! hang; the bytes on disk stay within the bound plus one pass; every event
//! recorded is in a file or counted; each failure is counted where it
//! belongs and said on stderr; every file decodes (the official Perfetto
//! schema, a JSON parser) and is private (0600).

mod common;

use common::{json_written, perfetto_written, scratch};
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const PART: u64 = 64 << 10;
const FILES: u64 = 3;
/// What one pass may add past the bound (the scenarios' passes write a few KiB).
const ONE_PASS: u64 = 64 << 10;

struct Run {
    stderr: String,
    expect: Value,
}

/// Runs `faults CASE` writing `trace`, with `envs`; fails on a signal, a
/// panic, a failed exit or a run of more than 60 s (a hang).
fn run(case: &str, trace: &Path, envs: &[(&str, &str)]) -> Run {
    let expect = trace.with_extension("expect");
    let mut child = Command::new(env!("CARGO_BIN_EXE_ringtrace-test-scenarios"))
        .args([
            "faults",
            trace.to_str().unwrap(),
            expect.to_str().unwrap(),
            case,
        ])
        .envs(envs.iter().copied())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("{case}: no end after 60 s (a hang)");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(status.success(), "{case}: {status}; stderr:\n{stderr}");
    assert!(!stderr.contains("panicked"), "{case}: {stderr}");
    let expect = serde_json::from_slice(&std::fs::read(&expect).unwrap()).unwrap();
    let _ = std::fs::remove_file(trace.with_extension("expect"));
    Run { stderr, expect }
}

fn stats(run: &Run) -> &Value {
    &run.expect["stop"]["stats"]
}

fn n(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or_else(|| panic!("{key} in {v}"))
}

/// Every event recorded is written, dropped at the disk and counted, or
/// lost in a ring and counted.
fn all_accounted(run: &Run) {
    let s = stats(run);
    assert_eq!(
        n(s, "events_written") + n(s, "events_dropped_disk") + n(s, "events_lost"),
        n(&run.expect, "recorded"),
        "{s}"
    );
}

/// The `tick` instants a trace holds (its `i` args), and the losses it
/// marks; a JSON file cut short (its last write failed) is read as a
/// viewer reads a bare array cut at a whole event: with `]` appended.
fn ticks(path: &Path) -> (Vec<u64>, u64) {
    if path.extension().unwrap() == "json" {
        let text = std::fs::read_to_string(path).unwrap();
        let events: Vec<Value> = serde_json::from_str(&text)
            .or_else(|_| serde_json::from_str(&format!("{}]", text.trim_end())))
            .unwrap_or_else(|e| panic!("{}: not JSON even closed ({e})", path.display()));
        let whole = path.with_extension("closed.json");
        std::fs::write(&whole, serde_json::to_vec(&events).unwrap()).unwrap();
        let (_, marked) = json_written(&whole);
        std::fs::remove_file(&whole).unwrap();
        let ticks = events
            .iter()
            .filter(|e| e["name"] == "tick")
            .map(|e| e["args"]["i"].as_u64().unwrap())
            .collect();
        (ticks, marked)
    } else {
        let (_, marked) = perfetto_written(path);
        let model = common::perfetto_model(path);
        let ticks = common::slices_named(&model, "tick")
            .iter()
            .map(|s| s["args"]["i"].as_u64().unwrap())
            .collect();
        (ticks, marked)
    }
}

/// The session's file and its parts in `dir`, by number (files only).
fn parts(dir: &Path, ext: &str) -> Vec<(u64, PathBuf)> {
    let mut v: Vec<(u64, PathBuf)> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let p = e.ok()?.path();
            if !std::fs::symlink_metadata(&p).ok()?.is_file() {
                return None;
            }
            let middle = p
                .file_name()?
                .to_str()?
                .strip_prefix("trace")?
                .strip_suffix(&format!(".{ext}"))?
                .to_owned();
            let n = match middle.as_str() {
                "" => 0,
                m => m.strip_prefix('.')?.parse().ok()?,
            };
            Some((n, p))
        })
        .collect();
    v.sort();
    v
}

fn private(path: &Path) {
    let mode = std::fs::metadata(path).unwrap().permissions().mode();
    assert_eq!(mode & 0o077, 0, "{} is {mode:o}", path.display());
}

#[test]
fn a_budget_of_u64_max_is_a_cap_not_a_reservation() {
    let dir = scratch("faults_budget");
    let trace = dir.join("trace.pftrace");
    let r = run("huge_budget", &trace, &[]);
    assert_eq!(r.expect["stop"]["error"], Value::Null);
    assert_eq!(n(stats(&r), "events_written"), 1000);
    assert_eq!(perfetto_written(&trace), (1000, 0));
    private(&trace);
    // The same from the environment.
    let trace = dir.join("env.json");
    let out = Command::new(env!("CARGO_BIN_EXE_ringtrace-test-scenarios"))
        .args(["init_from_env", "-"])
        .arg(dir.join("env.expect"))
        .env("RINGTRACE_OUTPUT", &trace)
        .env("RINGTRACE_OVERWRITE", "1")
        .env("RINGTRACE_BUFFER_BYTES", u64::MAX.to_string())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(json_written(&trace).0, 2, "the scope from_env");
}

/// Parts whose next names are taken (a directory, a symlink to another
/// file): skipped, never followed; the bound holds; nothing is dropped.
fn taken_names(ext: &str) {
    let dir = scratch(&format!("faults_taken_{ext}"));
    let trace = dir.join(format!("trace.{ext}"));
    std::fs::create_dir(dir.join(format!("trace.2.{ext}"))).unwrap();
    let victim = dir.join("victim.txt");
    std::fs::write(&victim, b"not a trace").unwrap();
    std::os::unix::fs::symlink(&victim, dir.join(format!("trace.3.{ext}"))).unwrap();
    let r = run("parts", &trace, &[]);
    let s = stats(&r);
    assert_eq!(r.expect["stop"]["error"], Value::Null, "{}", r.stderr);
    assert_eq!(n(s, "parts_failed"), 0, "{s}");
    assert_eq!(n(s, "events_dropped_disk"), 0, "{s}");
    all_accounted(&r);
    assert!(
        n(&r.expect, "peak") <= PART * FILES + ONE_PASS,
        "{}",
        r.expect
    );
    assert_eq!(std::fs::read(&victim).unwrap(), b"not a trace");
    assert!(dir.join(format!("trace.2.{ext}")).is_dir());
    assert!(
        std::fs::symlink_metadata(dir.join(format!("trace.3.{ext}")))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    let kept = parts(&dir, ext);
    assert!(kept.len() as u64 <= FILES && kept.len() >= 2, "{kept:?}");
    assert!(kept.iter().all(|(n, _)| *n != 2 && *n != 3), "{kept:?}");
    // Consecutive parts: no overlap, no gap; the last ends with the last tick.
    let mut last = None;
    for (_, p) in &kept {
        private(p);
        let (t, _) = ticks(p);
        for w in t.windows(2) {
            assert_eq!(w[0] + 1, w[1], "{p:?}");
        }
        if let (Some(l), Some(first)) = (last, t.first()) {
            assert_eq!(l + 1, *first, "{p:?}");
        }
        last = t.last().copied().or(last);
    }
    assert_eq!(last, Some(n(&r.expect, "recorded") - 1));
}

#[test]
fn perfetto_parts_skip_names_taken() {
    taken_names("pftrace");
}

#[test]
fn json_parts_skip_names_taken() {
    taken_names("json");
}

/// Checks shared by the faults that stop parts: the bound held, each
/// failure counted and said, every event in a part or counted, every part
/// decodes with its ticks in order, and the marks kept do not exceed the
/// drops.
fn parts_failing(r: &Run, dir: &Path, ext: &str, said: &str) -> Vec<(u64, PathBuf)> {
    let s = stats(r);
    assert_eq!(r.expect["stop"]["error"], Value::Null, "{}", r.stderr);
    assert!(n(s, "parts_failed") >= 1, "{s}");
    assert!(s["first_part_error"].is_string(), "{s}");
    assert!(n(s, "events_dropped_disk") > 0, "{s}");
    assert!(r.stderr.contains(said), "{}", r.stderr);
    all_accounted(r);
    assert!(
        n(&r.expect, "peak") <= PART * FILES + ONE_PASS,
        "{}",
        r.expect
    );
    let kept = parts(dir, ext);
    let on_disk: u64 = kept
        .iter()
        .map(|(_, p)| std::fs::metadata(p).unwrap().len())
        .sum();
    assert!(on_disk <= PART * FILES + ONE_PASS, "{on_disk}");
    let (mut seen, mut marked) = (0, 0);
    for (_, p) in &kept {
        private(p);
        let (t, m) = ticks(p);
        for w in t.windows(2) {
            assert!(w[0] < w[1], "{p:?}: in order");
        }
        seen += t.len() as u64;
        marked += m;
    }
    assert!(seen <= n(s, "events_written"), "{seen} {s}");
    assert!(marked <= n(s, "events_dropped_disk"), "{marked} {s}");
    kept
}

/// No file descriptor for the next part for 0.8 s: the current part takes
/// no more (dropped, counted, marked in the next part), and parts resume.
fn no_fd(ext: &str) {
    let dir = scratch(&format!("faults_nofd_{ext}"));
    let trace = dir.join(format!("trace.{ext}"));
    let r = run("parts_no_fd", &trace, &[]);
    let kept = parts_failing(&r, &dir, ext, "cannot make the trace's next part");
    // The last tick is in a part (the part begun by the last pass before
    // the stop may hold none).
    let last = kept
        .iter()
        .filter_map(|(_, p)| ticks(p).0.last().copied())
        .max();
    assert_eq!(last, Some(n(&r.expect, "recorded") - 1), "parts resumed");
    assert_eq!(stats(&r)["first_part_error"], "Uncategorized", "EMFILE");
}

#[test]
fn perfetto_parts_hold_the_bound_without_file_descriptors() {
    no_fd("pftrace");
}

#[test]
fn json_parts_hold_the_bound_without_file_descriptors() {
    no_fd("json");
}

/// Each part's writes fail at 40 KiB (a full disk): each is cut at a whole
/// event, counted, and the next takes over.
fn full_disk(ext: &str) {
    let dir = scratch(&format!("faults_full_{ext}"));
    let trace = dir.join(format!("trace.{ext}"));
    let r = run("parts_full_disk", &trace, &[]);
    let kept = parts_failing(&r, &dir, ext, "failed");
    assert_eq!(stats(&r)["first_part_error"], "FileTooLarge");
    assert!(n(stats(&r), "parts_failed") >= 3, "{}", stats(&r));
    for (_, p) in &kept {
        assert!(std::fs::metadata(p).unwrap().len() <= 40 << 10);
    }
}

#[test]
fn perfetto_parts_on_a_full_disk() {
    full_disk("pftrace");
}

#[test]
fn json_parts_on_a_full_disk() {
    full_disk("json");
}

/// The session's own file fails: `stop` fails with the file's error and
/// gives the `Stats` with it; the file holds whole events.
fn main_full_disk(ext: &str) {
    let dir = scratch(&format!("faults_main_{ext}"));
    let trace = dir.join(format!("trace.{ext}"));
    let r = run("main_full_disk", &trace, &[]);
    let error = r.expect["stop"]["error"].as_str().unwrap();
    assert!(
        error.contains("incomplete") && error.contains("trace."),
        "{error}"
    );
    all_accounted(&r);
    let s = stats(&r);
    assert!(n(s, "events_dropped_disk") > 0, "{s}");
    let (t, _) = ticks(&trace);
    assert_eq!(t.len() as u64, n(s, "events_written"), "{s}");
    assert_eq!(t, (0..t.len() as u64).collect::<Vec<_>>());
    private(&trace);
}

#[test]
fn perfetto_main_file_on_a_full_disk() {
    main_full_disk("pftrace");
}

#[test]
fn json_main_file_on_a_full_disk() {
    main_full_disk("json");
}

/// Captures that cannot be written are the captures' failure: `stop`
/// succeeds with the main trace's figures.
#[test]
fn a_capture_that_cannot_be_written_is_counted_not_the_sessions_error() {
    let dir = scratch("faults_capture_fail");
    let long = "x".repeat(300);
    for (pattern, kind) in [
        (dir.join("missing/cap-{n}.pftrace"), "NotFound"),
        (dir.join(format!("{long}-{{n}}.json")), "InvalidFilename"),
    ] {
        let trace = dir.join("trace.pftrace");
        let r = run(
            "captures",
            &trace,
            &[("RINGTRACE_TEST_CAPTURES", pattern.to_str().unwrap())],
        );
        let s = stats(&r);
        assert_eq!(r.expect["stop"]["error"], Value::Null, "{}", r.stderr);
        assert_eq!(n(s, "captures_failed"), 3, "{s}");
        assert_eq!(n(s, "captures_fired"), 0, "{s}");
        assert_eq!(s["first_capture_error"], kind, "{s}");
        assert!(r.stderr.contains("could not be written"), "{}", r.stderr);
        all_accounted(&r);
        assert_eq!(n(s, "events_written"), n(&r.expect, "recorded"));
        assert_eq!(perfetto_written(&trace).0, n(&r.expect, "recorded"));
    }
}

/// Capture names: a planted symlink and an earlier run's file are skipped,
/// never followed nor overwritten; a restart goes on numbering past its
/// own earlier captures; every file is private.
fn capture_names(ext: &str) {
    let dir = scratch(&format!("faults_capture_names_{ext}"));
    let victim = dir.join("victim.txt");
    std::fs::write(&victim, b"not a trace").unwrap();
    std::os::unix::fs::symlink(&victim, dir.join(format!("cap-1.{ext}"))).unwrap();
    std::fs::write(dir.join(format!("cap-2.{ext}")), b"earlier run").unwrap();
    let pattern = dir.join(format!("cap-{{n}}.{ext}"));
    let envs = [("RINGTRACE_TEST_CAPTURES", pattern.to_str().unwrap())];
    let trace = dir.join("trace.pftrace");
    let first = run("captures", &trace, &envs);
    assert_eq!(n(stats(&first), "captures_fired"), 3, "{}", first.stderr);
    assert_eq!(std::fs::read(&victim).unwrap(), b"not a trace");
    assert_eq!(
        std::fs::read(dir.join(format!("cap-2.{ext}"))).unwrap(),
        b"earlier run"
    );
    let made: Vec<Vec<u8>> = (3..=5)
        .map(|i| {
            let p = dir.join(format!("cap-{i}.{ext}"));
            private(&p);
            let (t, _) = ticks(&p);
            assert!(!t.is_empty(), "{p:?}");
            std::fs::read(&p).unwrap()
        })
        .collect();
    private(&trace);
    let again = run("captures", &trace, &envs);
    assert_eq!(n(stats(&again), "captures_fired"), 3, "{}", again.stderr);
    for (i, bytes) in (3..=5).zip(&made) {
        let p = dir.join(format!("cap-{i}.{ext}"));
        assert_eq!(&std::fs::read(&p).unwrap(), bytes, "{p:?} kept");
    }
    for i in 6..=8 {
        private(&dir.join(format!("cap-{i}.{ext}")));
    }
}

#[test]
fn perfetto_capture_names_taken_are_skipped() {
    capture_names("pftrace");
}

#[test]
fn json_capture_names_taken_are_skipped() {
    capture_names("json");
}

/// A capture queued while a dump's window is open waits for the window
/// without the flusher spinning (it took 1.4 s of CPU in 1.5 s).
#[test]
fn a_capture_queued_during_a_dump_does_not_spin_the_flusher() {
    let dir = scratch("faults_spin");
    let trace = dir.join("trace.pftrace");
    let r = run("capture_in_dump", &trace, &[]);
    let cpu = n(&r.expect, "flusher_cpu_ns");
    let wall = n(&r.expect, "wall_ns");
    assert!(wall >= 1_000_000_000, "{}", r.expect);
    assert!(
        cpu < wall / 5,
        "the flusher used {cpu} ns of CPU in {wall} ns"
    );
    assert_eq!(n(stats(&r), "captures_fired"), 1, "{}", r.expect);
}
