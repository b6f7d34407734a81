//! Quickstart: record a few threads of nested work and write a Perfetto trace.
//!
//! Run: `cargo run --example quickstart` (then open the printed file in
//! https://ui.perfetto.dev). Pass a path ending in `.json` to write Chrome JSON.

use std::thread;
use std::time::Duration;

fn parse(chunk: &[u8]) -> usize {
    ringtrace::trace_scope!("parse", bytes = chunk.len());
    let words = {
        ringtrace::trace_scope!("text", "split_words");
        chunk.split(|b| *b == b' ').count()
    };
    ringtrace::trace_instant!("parsed", words = words);
    thread::sleep(Duration::from_micros(200));
    words
}

fn main() -> Result<(), ringtrace::Error> {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "quickstart.pftrace".to_string());
    let trace = ringtrace::builder().output(&path).start()?;

    let workers: Vec<_> = (0..3)
        .map(|w| {
            thread::Builder::new()
                .name(format!("worker-{w}"))
                .spawn(move || {
                    let mut total = 0;
                    for i in 0..20 {
                        ringtrace::trace_scope!("work", "batch", worker = w, index = i);
                        total += parse(b"the quick brown fox jumps over the lazy dog");
                        ringtrace::trace_counter!("words_parsed", total);
                    }
                    total
                })
                .unwrap()
        })
        .collect();
    let total: usize = workers.into_iter().map(|h| h.join().unwrap()).sum();
    ringtrace::trace_instant!("all_done", total = total);

    let stats = trace.stop()?;
    let shown = std::fs::canonicalize(&path)
        .map(|p| p.display().to_string())
        .unwrap_or(path);
    println!(
        "wrote {} trace events ({} events lost) from {} threads to {shown}",
        stats.events_written, stats.events_lost, stats.threads
    );
    println!(
        "open it at https://ui.perfetto.dev (\"Open trace file\") or: trace_processor {shown}"
    );
    Ok(())
}
