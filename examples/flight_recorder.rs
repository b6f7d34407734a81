//! Flight recorder: rings keep only the newest events (overwrite mode) and
//! nothing is written until something interesting happens; then `flush()`
//! dumps what the rings hold. The trace marks how many older events were
//! overwritten.
//!
//! Run: `cargo run --example flight_recorder` and open the printed file in
//! https://ui.perfetto.dev.

use std::thread;

fn main() -> Result<(), ringtrace::Error> {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "flight_recorder.pftrace".to_string());
    let trace = ringtrace::builder()
        .output(&path)
        .overwrite(true)
        .buffer_bytes(1 << 20) // small: the process keeps its last 512 KiB of events
        .start()?;

    let workers: Vec<_> = (0..2)
        .map(|w| {
            thread::spawn(move || {
                for request in 0..50_000u32 {
                    ringtrace::trace_scope!("server", "request", worker = w, request = request);
                    if request % 1000 == 0 {
                        ringtrace::trace_counter!("requests_done", request);
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    // Something went wrong: dump the recent past now.
    ringtrace::trace_instant!("anomaly_detected");
    ringtrace::flush();

    let stats = trace.stop()?;
    println!(
        "kept {} trace events, {} older events overwritten; trace at {path}; open it at https://ui.perfetto.dev",
        stats.events_written, stats.events_lost
    );
    Ok(())
}
