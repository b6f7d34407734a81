//! `#[ringtrace::traced]` on `async fn` under a multi-threaded tokio runtime:
//! each call is one slice on its own async track for its whole life, and each
//! poll is a slice on the worker thread that ran it.
//!
//! Run: `cargo run --example async_tasks` and open the printed file in
//! https://ui.perfetto.dev.

use std::time::Duration;

#[ringtrace::traced(category = "net")]
async fn fetch(id: u32) -> usize {
    tokio::time::sleep(Duration::from_millis(3 + id as u64 % 4)).await;
    parse(id).await
}

#[ringtrace::traced]
async fn parse(id: u32) -> usize {
    {
        // A scope guard is `!Send`: it cannot live across an `.await` (the
        // compiler says so), because the task may resume on another thread.
        ringtrace::trace_scope!("cpu", "tokenize", id = id);
    }
    tokio::task::yield_now().await;
    id as usize * 10
}

fn main() -> Result<(), ringtrace::Error> {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "async_tasks.pftrace".to_string());
    let trace = ringtrace::builder().output(&path).start()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    let total: usize = rt.block_on(async {
        let tasks: Vec<_> = (0..16).map(|i| tokio::spawn(fetch(i))).collect();
        let mut total = 0;
        for t in tasks {
            total += t.await.unwrap();
        }
        total
    });
    drop(rt);
    let stats = trace.stop()?;
    println!(
        "total {total}; wrote {} trace events to {path}; open it at https://ui.perfetto.dev",
        stats.events_written
    );
    Ok(())
}
