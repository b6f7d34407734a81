//! A hard disk limit without rotation (`max_file_bytes` with
//! `max_files(1)`): the one file stays within the limit plus the encoding
//! of the few records written at a time near it and its ending; it stays
//! complete (official Perfetto schema; a JSON parser); the events past the
//! limit are counted apart from ring losses and marked where the drop
//! began; written + dropped = what the test recorded.

mod common;

use common::slices::*;
use common::{scratch, ticks_from_env};
use std::time::Duration;

const LIMIT: u64 = 256 << 10;
/// What the file may pass the limit by: the encoding of 1 KiB of records
/// (an instant here: 4 words in; Perfetto about 30 bytes out, JSON about
/// 117: at most ~1 KiB and ~4 KiB), two marks and the ending.
const SLACK: u64 = 8 << 10;

fn hard_limit(ext: &str) {
    let _one = serial();
    let dir = scratch(&format!("hard_{ext}"));
    let path = dir.join(format!("trace.{ext}"));
    let trace = ringtrace::builder()
        .output(&path)
        .max_file_bytes(LIMIT)
        .max_files(1)
        .buffer_bytes_per_thread(8 << 20)
        .flush_interval(Duration::from_millis(5))
        .start()
        .unwrap();
    // Two threads; each about 40 bytes an instant: ~8 MB asked of a
    // 256 KiB file. Paced so that the rings lose nothing.
    let per_thread = 100_000u64;
    let threads: Vec<_> = (0..2u64)
        .map(|t| {
            std::thread::spawn(move || {
                for i in 0..per_thread {
                    ringtrace::trace_instant!("hard", "tick", t = t, i = i);
                    if i % 500 == 499 {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    let recorded = 2 * per_thread; // counted by the test, not the library
    let stats = trace.stop().unwrap();
    let size = std::fs::metadata(&path).unwrap().len();
    eprintln!(
        "{ext}: {size} bytes on disk for a limit of {LIMIT} (+{}); {} written, {} dropped, {} lost",
        size.saturating_sub(LIMIT),
        stats.events_written,
        stats.events_dropped_disk,
        stats.events_lost
    );
    assert!(size <= LIMIT + SLACK, "{size} bytes");
    assert!(size >= LIMIT, "the file was filled up to the limit: {size}");
    assert_eq!(stats.bytes_written, size);
    assert_eq!(stats.events_lost, 0, "the rings lost nothing: {stats:?}");
    assert!(stats.events_dropped_disk > recorded / 2, "{stats:?}");
    assert_eq!(
        stats.events_written + stats.events_dropped_disk,
        recorded,
        "written + dropped = recorded: {stats:?}"
    );
    let (slices, _) = decode_as_is(&path);
    let ticks: Vec<&Slice> = slices.iter().filter(|s| s.name == "tick").collect();
    assert_eq!(ticks.len() as u64, stats.events_written);
    // Per thread, the ticks in the file are its first ones, none missing.
    let mut last_written = 0;
    for t in 0..2u64 {
        let mine: Vec<u64> = ticks
            .iter()
            .filter(|s| s.args["t"].as_u64() == Some(t))
            .map(|s| s.args["i"].as_u64().unwrap())
            .collect();
        assert_eq!(
            mine,
            (0..mine.len() as u64).collect::<Vec<_>>(),
            "thread {t}"
        );
    }
    for s in &ticks {
        last_written = last_written.max(s.ts);
    }
    let marks: Vec<&Slice> = slices
        .iter()
        .filter(|s| s.name == "ringtrace: events lost")
        .collect();
    assert!(!marks.is_empty(), "the drop is marked");
    for m in &marks {
        assert_eq!(m.args["reason"], "disk limit", "{m:?}");
    }
    let marked: u64 = marks
        .iter()
        .map(|m| m.args["lost_events"].as_u64().unwrap())
        .sum();
    assert_eq!(marked, stats.events_dropped_disk, "the marks add up");
    // The first mark is where the drop began: after the last tick written.
    let first = marks.iter().map(|m| m.ts).min().unwrap();
    assert!(
        first >= last_written,
        "mark at {first}, last tick {last_written}"
    );
}

#[test]
fn perfetto_file_stops_at_the_hard_limit() {
    hard_limit("pftrace");
}

#[test]
fn json_file_stops_at_the_hard_limit() {
    hard_limit("json");
}

#[test]
fn hard_limit_from_the_environment_and_not_with_a_flight_recorder() {
    let _one = serial();
    let dir = scratch("hard_env");
    let path = dir.join("trace.json");
    let stats = ticks_from_env(&path, 64 << 10, 1, 20_000);
    assert!(stats.events_dropped_disk > 0, "{stats:?}");
    assert_eq!(
        stats.events_written + stats.events_dropped_disk + stats.events_lost,
        20_000
    );
    assert!(std::fs::metadata(&path).unwrap().len() <= (64 << 10) + SLACK);
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1, "one file");
    let refused = ringtrace::builder()
        .output(dir.join("fr.pftrace"))
        .overwrite(true)
        .max_file_bytes(64 << 10)
        .max_files(1)
        .start();
    assert!(matches!(refused, Err(ringtrace::Error::InvalidConfig(_))));
}
