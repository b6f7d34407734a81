//! ringtrace as a `tracing` layer: code instrumented with `tracing` (spans,
//! events, `#[instrument]`, async tasks on a multi-threaded runtime) written
//! to a Perfetto trace, next to a console logger.
//!
//! Run: `cargo run --example tracing_layer` (then open the printed file in
//! https://ui.perfetto.dev). Pass a path ending in `.json` to write Chrome
//! JSON. `RUST_LOG`-style filtering of what is traced: set `TRACE_FILTER`
//! (default `info,shop=trace`).
//!
//! With `--subscriber`, the same program records through ringtrace's own
//! subscriber instead (`ringtrace::builder().subscriber()`: no registry, about a third
//! of the cost per span, but no other layer such as the console logger can
//! be added to it): `cargo run --example tracing_layer -- --subscriber`.

use std::time::Duration;
use tracing::{info, info_span, instrument, warn, Instrument};
use tracing_subscriber::prelude::*;
use tracing_subscriber::EnvFilter;

/// A span per call, with the arguments as fields; `rows` is filled in later.
#[instrument(target = "shop::db", fields(rows = tracing::field::Empty))]
async fn load_cart(user: u64) -> usize {
    tokio::time::sleep(Duration::from_millis(2)).await; // the task may resume on another worker
    let rows = (user % 5 + 1) as usize;
    tracing::Span::current().record("rows", rows);
    rows
}

#[instrument(target = "shop")]
async fn checkout(user: u64) {
    let items = load_cart(user).await;
    let total = {
        let _pricing = info_span!(target: "shop", "price", items).entered();
        std::thread::sleep(Duration::from_micros(300));
        items as f64 * 9.99
    };
    if total > 40.0 {
        warn!(target: "shop", user, total, "large order");
    }
    info!(target: "shop", user, total, "checked out");
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let own_subscriber = args.iter().any(|a| a == "--subscriber");
    let path = args
        .iter()
        .find(|a| !a.starts_with("--"))
        .cloned()
        .unwrap_or_else(|| "tracing_layer.pftrace".to_string());
    let filter = EnvFilter::new(
        std::env::var("TRACE_FILTER").unwrap_or_else(|_| "info,shop=trace".to_string()),
    );

    // The layer or subscriber, and the session's guard: the trace is
    // complete when the guard drops (or at exit, or on a panic in main).
    let session = ringtrace::builder().output(&path).process_name("shop");
    let trace = if own_subscriber {
        let (subscriber, trace) = session.subscriber()?;
        subscriber.with(filter).init();
        trace
    } else {
        let (ringtrace_layer, trace) = session.layer()?;
        tracing_subscriber::registry()
            .with(ringtrace_layer.with_filter(filter))
            .with(
                tracing_subscriber::fmt::layer()
                    .with_filter(tracing::level_filters::LevelFilter::WARN),
            )
            .init();
        trace
    };

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let orders: Vec<_> = (0..12).map(|user| tokio::spawn(checkout(user))).collect();
        for o in orders {
            o.await.unwrap();
        }
        // A batch that follows from the orders: a flow arrow in the UI.
        let orders_span = info_span!(target: "shop", "orders");
        let batch = info_span!(target: "shop", "nightly_batch");
        batch.follows_from(&orders_span);
        orders_span.in_scope(|| info!(target: "shop", "orders closed"));
        async { tokio::time::sleep(Duration::from_millis(1)).await }
            .instrument(batch)
            .await;
    });
    drop(rt);

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
