//! Capture windows: `rotate_output` (a new file, no gap) and `dump_to`
//! (flight recorder: the rings plus a window after the call, into a file of
//! its own). A producer thread records numbered instants while other
//! threads cut files; every file is decoded (Perfetto with the official
//! schema, JSON with serde_json), and the numbers are compared with what was
//! recorded: each event in exactly one file, or counted as lost.

mod common;

use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One session at a time in this binary.
static SESSION: Mutex<()> = Mutex::new(());

/// The `n` of every `tick` instant in the file, in file order per thread,
/// and the names of the other instants; losses the file marks.
struct Decoded {
    ticks: Vec<u64>,
    names: Vec<String>,
    lost: u64,
}

fn decode(path: &Path) -> Decoded {
    let is_json = path.extension().is_some_and(|e| e == "json");
    let mut d = Decoded {
        ticks: Vec::new(),
        names: Vec::new(),
        lost: 0,
    };
    if is_json {
        for e in json_events(path) {
            if e["ph"] != "i" {
                continue;
            }
            let name = e["name"].as_str().unwrap().to_string();
            match name.as_str() {
                "tick" => d.ticks.push(e["args"]["n"].as_u64().unwrap()),
                "ringtrace: events lost" => d.lost += e["args"]["lost_events"].as_u64().unwrap(),
                _ => {}
            }
            d.names.push(name);
        }
    } else {
        let model = perfetto_model(path);
        let mut slices: Vec<&Value> = model["slices"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["instant"] == true)
            .collect();
        slices.sort_by_key(|s| s["ts"].as_u64().unwrap());
        for s in slices {
            let name = s["name"].as_str().unwrap().to_string();
            if name == "tick" {
                d.ticks.push(s["args"]["n"].as_u64().unwrap());
            }
            d.names.push(name);
        }
        d.lost = lost_marked(&model);
    }
    d
}

/// Events recorded in the file (its loss markers are not).
fn events(d: &Decoded) -> u64 {
    d.names
        .iter()
        .filter(|n| *n != "ringtrace: events lost")
        .count() as u64
}

/// Records `tick n=i` for i = 0, 1, ... until told to stop, at most one per
/// `period`; `count` is the number recorded so far (published after each).
struct Producer {
    stop: Arc<AtomicBool>,
    count: Arc<AtomicU64>,
    handle: std::thread::JoinHandle<()>,
}

fn producer(period: Duration) -> Producer {
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let (s, c) = (stop.clone(), count.clone());
    let handle = std::thread::spawn(move || {
        let mut i = 0u64;
        let mut next = Instant::now();
        while !s.load(Ordering::Relaxed) {
            ringtrace::trace_instant!("cap", "tick", n = i);
            i += 1;
            c.store(i, Ordering::Release);
            next += period;
            while Instant::now() < next {
                std::hint::spin_loop();
            }
        }
    });
    Producer {
        stop,
        count,
        handle,
    }
}

impl Producer {
    fn count(&self) -> u64 {
        self.count.load(Ordering::Acquire)
    }
    fn finish(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().unwrap();
        self.count.load(Ordering::Acquire)
    }
}

/// `v` strictly increases; its first and last.
fn assert_increasing(v: &[u64], what: &str) -> (u64, u64) {
    assert!(!v.is_empty(), "{what}: no ticks");
    assert!(
        v.windows(2).all(|w| w[0] < w[1]),
        "{what}: ticks out of order or repeated"
    );
    (v[0], *v.last().unwrap())
}

/// `v` is `from, from+1, ..., to` (inclusive), with no gap or repeat.
fn assert_run(v: &[u64], what: &str) -> (u64, u64) {
    assert!(!v.is_empty(), "{what}: no ticks");
    for w in v.windows(2) {
        assert_eq!(w[1], w[0] + 1, "{what}: ticks not consecutive");
    }
    (v[0], *v.last().unwrap())
}

#[test]
fn rotate_output_cuts_the_stream_without_gap_or_repeat() {
    let _one = SESSION.lock().unwrap_or_else(|e| e.into_inner());
    let dir = scratch("rotate");
    let files: Vec<PathBuf> = ["part0.pftrace", "part1.json", "part2.pftrace", "part3.json"]
        .iter()
        .map(|f| dir.join(f))
        .collect();
    let guard = ringtrace::builder()
        .output(&files[0])
        .buffer_bytes_per_thread(1 << 20)
        .start()
        .unwrap();
    let p = producer(Duration::from_micros(50));

    // Rotations from a thread that did not start the session, each once the
    // producer has recorded 200 more ticks, while it goes on recording.
    let next = files[1..].to_vec();
    let count = p.count.clone();
    let wait_for_ticks = move |n: u64| {
        let from = count.load(Ordering::Acquire);
        while count.load(Ordering::Acquire) < from + n {
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    let wait = wait_for_ticks.clone();
    let rotations = std::thread::spawn(move || {
        next.iter()
            .map(|f| {
                wait(200);
                ringtrace::rotate_output(f).unwrap()
            })
            .collect::<Vec<_>>()
    })
    .join()
    .unwrap();
    wait_for_ticks(200);
    let produced = p.finish();
    let total = guard.stop().unwrap();
    assert_eq!(total.events_lost, 0, "{total:?}");

    let decoded: Vec<Decoded> = files.iter().map(|f| decode(f)).collect();
    let mut all = Vec::new();
    for (i, d) in decoded.iter().enumerate() {
        let (from, to) = assert_run(&d.ticks, &files[i].display().to_string());
        // Each file takes over where the previous one stopped.
        assert_eq!(
            from,
            all.len() as u64,
            "{} starts after a gap",
            files[i].display()
        );
        all.extend(from..=to);
        if let Some(s) = rotations.get(i) {
            assert_eq!(s.events_written, d.ticks.len() as u64, "{s:?}");
            assert_eq!((s.events_lost, s.threads), (0, 1), "{s:?}");
        }
    }
    assert_eq!(all.len() as u64, produced, "every tick in exactly one file");
    assert_eq!(total.events_written, produced);
}

#[test]
fn dump_to_writes_the_rings_and_the_window_after_the_call() {
    let _one = SESSION.lock().unwrap_or_else(|e| e.into_inner());
    let dir = scratch("dump");
    let main = dir.join("recorder.pftrace");
    let dumps = [dir.join("incident1.pftrace"), dir.join("incident2.json")];
    let guard = ringtrace::builder()
        .output(&main)
        .overwrite(true)
        .buffer_bytes_per_thread(256 << 10)
        .start()
        .unwrap();
    let started = Instant::now();
    // A drop-mode API on a flight recorder is refused, and so is an unknown
    // extension; the session goes on.
    assert!(matches!(
        ringtrace::dump_to(dir.join("x.txt"), Duration::ZERO),
        Err(ringtrace::Error::UnknownFormat(_))
    ));
    let p = producer(Duration::from_micros(50));
    // Long enough for the rings to wrap (256 KiB hold a few thousand ticks).
    while p.count() < 10_000 && started.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(5));
    }

    // Dump 1, with a 200 ms window: a thread records a marker 10 ms into it.
    let started = Arc::new(AtomicBool::new(false));
    let s = started.clone();
    let marker = std::thread::spawn(move || {
        while !s.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
        std::thread::sleep(Duration::from_millis(10));
        ringtrace::trace_instant!("cap", "during the window");
    });
    let before1 = p.count();
    started.store(true, Ordering::Release);
    let d1 = ringtrace::dump_to(&dumps[0], Duration::from_millis(200)).unwrap();
    let after1 = p.count();
    marker.join().unwrap();

    // Dump 2, no window, from another thread.
    std::thread::sleep(Duration::from_millis(20));
    let before2 = p.count();
    let path = dumps[1].clone();
    let d2 = std::thread::spawn(move || ringtrace::dump_to(path, Duration::ZERO))
        .join()
        .unwrap()
        .unwrap();
    let after2 = p.count();

    std::thread::sleep(Duration::from_millis(20));
    let produced = p.finish();
    let total = guard.stop().unwrap();

    // Each file's ticks in order, the files one after the other, and every
    // tick in one file or counted as lost (what the rings overwrote).
    let (f1, f2, fm) = (decode(&dumps[0]), decode(&dumps[1]), decode(&main));
    let (s1, e1) = assert_increasing(&f1.ticks, "dump 1");
    let (s2, e2) = assert_increasing(&f2.ticks, "dump 2");
    let (sm, em) = assert_increasing(&fm.ticks, "the recorder's file");
    assert!(
        e1 < s2 && e2 < sm && em == produced - 1,
        "{s1}..{e1} {s2}..{e2} {sm}..{em}"
    );
    let kept = (f1.ticks.len() + f2.ticks.len() + fm.ticks.len()) as u64;
    assert_eq!(kept + total.events_lost, produced, "{total:?}");
    // Each file marks the losses its totals report.
    for (d, f) in [(&d1, &f1), (&d2, &f2)] {
        assert_eq!(d.events_lost, f.lost, "{d:?}");
        assert_eq!(d.events_written, events(f), "{d:?}");
    }
    assert_eq!(total.events_lost, f1.lost + f2.lost + fm.lost);

    // Dump 1: the rings up to the newest tick recorded before the call,
    // after ticks overwritten earlier (marked); then the window.
    assert!(
        e1 + 1 >= before1,
        "dump 1 ends at {e1}, {before1} recorded before it"
    );
    assert!(
        e1 < after1,
        "dump 1 holds tick {e1}, recorded after it returned"
    );
    assert!(f1.names.iter().any(|n| n == "during the window"));
    assert!(!fm.names.iter().any(|n| n == "during the window"));
    assert!(
        f1.lost >= s1,
        "ticks before {s1} overwritten, {} marked",
        f1.lost
    );
    // Dump 2: from where dump 1 ended (nothing overwritten in 20 ms).
    if d2.events_lost == 0 {
        assert_eq!(s2, e1 + 1);
    }
    assert!(
        e2 + 1 >= before2 && e2 < after2,
        "dump 2: {s2}..={e2}, {before2}..{after2}"
    );
    assert_eq!(
        total.events_written,
        events(&f1) + events(&f2) + events(&fm)
    );
}

#[test]
fn capture_windows_need_a_session() {
    let _one = SESSION.lock().unwrap_or_else(|e| e.into_inner());
    let dir = scratch("no-session");
    assert!(matches!(
        ringtrace::rotate_output(dir.join("a.pftrace")),
        Err(ringtrace::Error::NotRecording)
    ));
    assert!(matches!(
        ringtrace::dump_to(dir.join("b.pftrace"), Duration::ZERO),
        Err(ringtrace::Error::NotRecording)
    ));
    // dump_to is for flight recorders.
    let guard = ringtrace::builder()
        .writer(ringtrace::MemoryBuffer::new())
        .start()
        .unwrap();
    assert!(matches!(
        ringtrace::dump_to(dir.join("c.pftrace"), Duration::ZERO),
        Err(ringtrace::Error::InvalidConfig(_))
    ));
    guard.stop().unwrap();
}
