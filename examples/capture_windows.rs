//! Capture windows: files cut out of a program that keeps running.
//!
//! A server records into a flight recorder (rings keep only the recent
//! past, nothing is written). Twice an "incident" happens on a worker
//! thread; a watcher thread then writes the moments around it into a file of
//! its own with `ringtrace::dump_to`: what the rings hold (the time before)
//! plus 100 ms after the call, while the workers go on recording. At the
//! end, `ringtrace::rotate_output` shows the other capture: the session's
//! file is finished and recording goes on in a new one, with no gap.
//!
//! Run: `cargo run --example capture_windows [DIR]` (DIR defaults to
//! `ringtrace-capture-windows` in the system's temporary directory) and open
//! the printed files in https://ui.perfetto.dev.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A directory of its own (by default under the system's temporary
    // directory), so that a run leaves no files in the working tree.
    let dir = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("ringtrace-capture-windows"));
    std::fs::create_dir_all(&dir)?;
    let trace = ringtrace::builder()
        .output(dir.join("capture_recorder.pftrace"))
        .overwrite(true)
        .buffer_bytes_per_thread(256 * 1024) // the recent past only
        .start()?;

    let stop = Arc::new(AtomicBool::new(false));
    let incidents = Arc::new(AtomicU32::new(0));
    let (alarm, alarms) = mpsc::channel::<u32>();

    // The watcher: one dump per incident, from its own thread.
    let watcher = {
        let dir = dir.clone();
        thread::spawn(move || {
            let mut files = Vec::new();
            for n in alarms {
                let path = dir.join(format!("capture_incident{n}.pftrace"));
                match ringtrace::dump_to(&path, Duration::from_millis(100)) {
                    Ok(stats) => {
                        println!(
                            "incident {n}: {} trace events in {} ({} older events overwritten before)",
                            stats.events_written,
                            path.display(),
                            stats.events_lost
                        );
                        files.push(path);
                    }
                    Err(e) => eprintln!("incident {n}: {e}"),
                }
            }
            files
        })
    };

    let workers: Vec<_> = (0..2u32)
        .map(|w| {
            let (stop, incidents, alarm) = (stop.clone(), incidents.clone(), alarm.clone());
            thread::spawn(move || {
                let mut request = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    ringtrace::trace_scope!("server", "request", worker = w, request = request);
                    if w == 0
                        && request > 0
                        && request.is_multiple_of(20_000)
                        && incidents.load(Ordering::Relaxed) < 2
                    {
                        let n = incidents.fetch_add(1, Ordering::Relaxed) + 1;
                        ringtrace::trace_instant!("server", "incident", n = n);
                        alarm.send(n).unwrap();
                    }
                    request += 1;
                    thread::sleep(Duration::from_micros(20));
                }
            })
        })
        .collect();
    drop(alarm);

    while incidents.load(Ordering::Relaxed) < 2 {
        thread::sleep(Duration::from_millis(10));
    }
    thread::sleep(Duration::from_millis(300));

    // Keep everything from here on, in a new file: the recorder's file is
    // finished now (with what the rings held), recording goes on.
    let finished = ringtrace::rotate_output(dir.join("capture_tail.json"))?;
    println!(
        "{} finished: {} trace events",
        dir.join("capture_recorder.pftrace").display(),
        finished.events_written
    );
    thread::sleep(Duration::from_millis(50));
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    let files = watcher.join().unwrap();
    let stats = trace.stop()?;
    println!(
        "{} dumps; the session wrote {} trace events in all; {} written at stop; open them at https://ui.perfetto.dev",
        files.len(),
        stats.events_written,
        dir.join("capture_tail.json").display()
    );
    Ok(())
}
