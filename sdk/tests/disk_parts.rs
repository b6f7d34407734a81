//! A session's file in parts bounded on disk (`Builder::max_file_bytes`,
//! `max_files`): the bytes on disk stay within the bound plus one pass's
//! output while recording, every part kept decodes on its own (official
//! Perfetto schema; a JSON parser), and consecutive parts neither overlap
//! nor leave a gap.

mod common;

use common::scratch;
use common::slices::*;
use std::path::{Path, PathBuf};
use std::time::Duration;

const PART: u64 = 64 << 10;
const FILES: u64 = 3;

/// Parts on disk (number, path), in order: part 0 is the session's path.
fn parts(dir: &Path, ext: &str) -> Vec<(u64, PathBuf)> {
    let mut v: Vec<(u64, PathBuf)> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let p = e.unwrap().path();
            let name = p.file_name()?.to_str()?.to_owned();
            let middle = name
                .strip_prefix("trace.")?
                .strip_suffix(&format!(".{ext}"))?;
            let n = if middle.is_empty() {
                0
            } else {
                middle.parse().ok()?
            };
            Some((n, p))
        })
        .collect();
    v.extend(
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.file_name().unwrap() == format!("trace.{ext}").as_str())
            .map(|p| (0, p)),
    );
    v.sort();
    v.dedup();
    v
}

fn on_disk(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum()
}

fn bounded(ext: &str) {
    let _one = serial();
    let dir = scratch(&format!("parts_{ext}"));
    let trace = ringtrace::builder()
        .output(dir.join(format!("trace.{ext}")))
        .max_file_bytes(PART)
        .max_files(FILES)
        .flush_interval(Duration::from_millis(10))
        .start()
        .unwrap();
    // 30,000 events, 20 a millisecond at most: parts of 64 KiB fill in a
    // fraction of a second, a pass (10 ms) writes a few KiB.
    let mut peak = 0;
    let mut n = 0u64;
    while n < 30_000 {
        for _ in 0..20 {
            ringtrace::trace_instant!("parts", "tick", i = n);
            n += 1;
        }
        std::thread::sleep(Duration::from_millis(1));
        peak = peak.max(on_disk(&dir));
    }
    let stats = trace.stop().unwrap();
    // One pass's output is a few KiB here; allow 64 KiB.
    assert!(
        peak <= PART * FILES + (64 << 10),
        "{peak} bytes on disk at most"
    );
    assert!(on_disk(&dir) <= PART * FILES + (64 << 10));
    assert_eq!(stats.events_lost, 0);
    assert!(stats.files_removed >= 2, "{stats:?}");
    assert!(stats.bytes_written > PART * (FILES + 2), "{stats:?}");
    let kept = parts(&dir, ext);
    assert!(kept.len() as u64 <= FILES && kept.len() >= 2, "{kept:?}");
    // The parts kept are the last ones, numbered without a hole.
    for w in kept.windows(2) {
        assert_eq!(w[0].0 + 1, w[1].0, "{kept:?}");
    }
    assert!(kept[0].0 >= stats.files_removed, "{kept:?} {stats:?}");
    // Each part decodes on its own; its ticks follow the previous part's.
    let mut last: Option<u64> = None;
    for (_, p) in &kept {
        let (slices, _) = decode(p);
        let ticks: Vec<u64> = slices
            .iter()
            .filter(|s| s.name == "tick")
            .map(|s| s.args["i"].as_u64().unwrap())
            .collect();
        assert!(!ticks.is_empty(), "{p:?}");
        for w in ticks.windows(2) {
            assert_eq!(w[0] + 1, w[1], "{p:?}: ticks in order, none missing");
        }
        if let Some(l) = last {
            assert_eq!(l + 1, ticks[0], "{p:?}: no overlap, no gap");
        }
        last = ticks.last().copied();
        assert!(std::fs::metadata(p).unwrap().len() <= PART + (64 << 10));
    }
    assert_eq!(last, Some(n - 1), "the last part ends with the last tick");
}

#[test]
fn perfetto_parts_stay_within_the_bound() {
    bounded("pftrace");
}

#[test]
fn json_parts_stay_within_the_bound() {
    bounded("json");
}

#[test]
fn max_file_bytes_from_the_environment() {
    let _one = serial();
    let dir = scratch("parts_env");
    std::env::set_var("RINGTRACE_OUTPUT", dir.join("trace.json"));
    std::env::set_var("RINGTRACE_MAX_FILE_BYTES", "nope");
    assert!(matches!(
        ringtrace::init_from_env(),
        Err(ringtrace::Error::InvalidConfig(_))
    ));
    std::env::set_var("RINGTRACE_MAX_FILE_BYTES", PART.to_string());
    std::env::set_var("RINGTRACE_MAX_FILES", "2");
    let trace = ringtrace::init_from_env().unwrap().unwrap();
    for i in 0..60_000u64 {
        ringtrace::trace_instant!("parts", "tick", i = i);
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
    assert!(stats.files_removed >= 1, "{stats:?}");
    assert!(parts(&dir, "json").len() <= 2);
}
