//! Tracing left on in production: a tokio service instrumented with
//! `tracing`, where about one request in a thousand is slow. Two ways:
//!
//! - `sample`: whole requests are sampled: 1% of them are written with
//!   every span and event under them, on whatever worker thread they ran;
//!   the others cost about what a subscriber that does nothing costs. The
//!   file is written in parts of at most 1 MiB, at most 3 kept on disk.
//! - `capture` (default): the session is a flight recorder: it keeps the
//!   most recent events in memory; every request slower than 20 ms has its
//!   whole life (and what every thread did meanwhile) written into a file
//!   of its own, `slow-request-N.pftrace`, at most one per 100 ms, the newest
//!   5 kept. (A request must be recorded to be captured: sampling and
//!   captures do not combine.)
//! - `bounded`: every request recorded into one file with a hard limit of
//!   1 MiB: once it is reached, later events are dropped, counted and
//!   marked where the drop began; the file stays complete.
//!
//! Run: `cargo run --release --example production_service [sample|capture|bounded] [DIR]`
//! and open the printed files in https://ui.perfetto.dev.

use std::path::PathBuf;
use std::time::Duration;
use tracing::Instrument;

#[tracing::instrument(target = "svc")]
async fn handle(id: u64) -> u64 {
    let rows = query(id).await;
    tracing::info!(target: "svc", rows, "answered");
    rows
}

#[tracing::instrument(target = "svc")]
async fn query(id: u64) -> u64 {
    if id % 1000 == 999 {
        // The rare slow one: a lock held elsewhere, a cold cache...
        tokio::time::sleep(Duration::from_millis(50)).await;
    } else {
        tokio::task::yield_now().await;
    }
    id % 7
}

fn main() -> Result<(), ringtrace::Error> {
    let mode = std::env::args().nth(1).unwrap_or_else(|| "capture".into());
    let sample = mode == "sample";
    let dir = PathBuf::from(std::env::args().nth(2).unwrap_or_else(|| ".".into()));
    std::fs::create_dir_all(&dir).map_err(|e| ringtrace::Error::Io {
        path: Some(dir.clone()),
        source: e,
    })?;
    let builder = ringtrace::builder().output(dir.join("service.pftrace"));
    let builder = if mode == "bounded" {
        builder.max_file_bytes(1 << 20).max_files(1)
    } else if sample {
        builder
            .sample_ratio(0.01)
            .sample_roots(["request"])
            .max_file_bytes(1 << 20)
            .max_files(3)
    } else {
        builder
            .capture_slow(["request"], Duration::from_millis(20))
            .overwrite(true)
            .capture_to(dir.join("slow-{name}-{n}.pftrace"))
            .capture_before(Duration::from_millis(5))
            .capture_interval(Duration::from_millis(100))
            .capture_files(5)
    };
    let (subscriber, trace) = builder.subscriber()?;
    tracing::subscriber::set_global_default(subscriber).expect("no other subscriber");

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let mut tasks = Vec::new();
        for id in 0..5_000u64 {
            let span = tracing::info_span!(target: "svc", "request", id);
            tasks.push(tokio::spawn(handle(id).instrument(span)));
            if id % 5 == 0 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        for t in tasks {
            t.await.expect("request task");
        }
    });
    drop(rt);
    let stats = trace.stop()?;
    let decided = stats.roots_kept + stats.roots_skipped;
    if decided > 0 {
        println!("requests kept {} of {decided}", stats.roots_kept);
    }
    if stats.events_dropped_disk > 0 {
        println!(
            "trace events written {}, dropped at the disk limit {} (marked in the trace)",
            stats.events_written, stats.events_dropped_disk
        );
    }
    if stats.captures_fired + stats.captures_suppressed > 0 {
        println!(
            "slow requests captured {} (suppressed {})",
            stats.captures_fired, stats.captures_suppressed
        );
    }
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .map_err(|e| ringtrace::Error::Io {
            path: Some(dir.clone()),
            source: e,
        })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "pftrace"))
        .collect();
    files.sort();
    for f in files {
        println!("{}", f.display());
    }
    Ok(())
}
