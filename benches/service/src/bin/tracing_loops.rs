//! The `tracing` loops of `benches/peers` (a span's whole life, an event), on
//! one thread, for counting instructions: one mode, one loop, `N` times.
//! Under callgrind the difference between two counts of iterations is the
//! cost of one, whatever the start-up and the flusher cost:
//!
//! ```sh
//! cargo build --release --bin tracing_loops     # in benches/service
//! valgrind --tool=callgrind --separate-threads=yes \
//!     target/release/tracing_loops subscriber 20000 span   # and 40000
//! ```
//!
//! The recording thread's count is in the `.out-01` file. Modes: `registry`
//! (no layer), `noop-layer` (a layer that does nothing, behind the per-layer
//! filter the layer gets: the floor of every layer), `subscriber`, `layer`, `subscriber-off` and `layer-off`
//! (every category off); each in a `Dispatch` with an INFO level filter
//! (per-layer for the layer), as `benches/peers` sets them. Loops: `span`
//! (`info_span!(..).entered()` dropped), `int` (the same with an int field),
//! `event` (an int field and a message), `debug` (a `Debug` and a `Display`
//! field and a message).

use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::prelude::*;

/// A ring that holds every loop's records (up to 100,000 iterations), so
/// none is dropped: a dropped record costs less than a written one.
const RING: usize = 64 << 20;

/// A layer that does nothing: what the registry and a per-layer filter cost
/// any layer before it does its own work.
struct NoopLayer;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for NoopLayer {}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: tracing_loops MODE N [span|int|event|debug]";
    let mode = args.get(1).expect(usage).as_str();
    let n: u64 = args.get(2).and_then(|n| n.parse().ok()).expect(usage);
    let what = args.get(3).map_or("span", |s| s.as_str());
    let path = std::env::temp_dir().join(format!("tracing-loops-{}.pftrace", std::process::id()));
    let mut guard = None;
    let dispatch = match mode {
        "registry" => {
            tracing::Dispatch::new(tracing_subscriber::registry().with(LevelFilter::INFO))
        }
        "noop-layer" => tracing::Dispatch::new(
            tracing_subscriber::registry().with(NoopLayer.with_filter(LevelFilter::INFO)),
        ),
        "subscriber" | "subscriber-off" => {
            let mut b = ringtrace::subscriber()
                .output(&path)
                .buffer_bytes_per_thread(RING)
                .buffer_bytes(2 * RING as u64);
            if mode.ends_with("off") {
                b = b.disable_categories(["*"]);
            }
            let (s, g) = b.build().expect("ringtrace session");
            guard = Some(g);
            tracing::Dispatch::new(s.with(LevelFilter::INFO))
        }
        "layer" | "layer-off" => {
            let mut b = ringtrace::layer()
                .output(&path)
                .buffer_bytes_per_thread(RING)
                .buffer_bytes(2 * RING as u64);
            if mode.ends_with("off") {
                b = b.disable_categories(["*"]);
            }
            let (l, g) = b.build().expect("ringtrace session");
            guard = Some(g);
            tracing::Dispatch::new(
                tracing_subscriber::registry().with(l.with_filter(LevelFilter::INFO)),
            )
        }
        _ => panic!("{usage}"),
    };
    tracing::dispatcher::with_default(&dispatch, || {
        for i in 0..n {
            match what {
                "span" => drop(tracing::info_span!("scope").entered()),
                "int" => drop(tracing::info_span!("scope", v = i).entered()),
                "event" => tracing::info!(v = i, "event"),
                "debug" => tracing::info!(v = ?i, s = %"abc", "event"),
                _ => panic!("{usage}"),
            }
        }
    });
    drop(dispatch);
    if let Some(g) = guard {
        let stats = g.stop().expect("stop");
        assert_eq!(stats.events_lost, 0, "events lost");
    }
    let _ = std::fs::remove_file(&path);
}
