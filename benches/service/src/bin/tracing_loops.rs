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
//! field and a message), `chars` (a message and a 52-character `Debug`
//! field written a character at a time, as `bytes::Bytes` writes a frame:
//! divide by 52 for instructions per character).

use std::fmt;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::prelude::*;

/// A byte string whose `Debug` writes one character (or one escape) at a
/// time: `b"*3\r\n$3..."`.
struct Frame<'a>(&'a [u8]);

impl fmt::Debug for Frame<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("b\"")?;
        for &b in self.0 {
            match b {
                b'\n' => f.write_str("\\n")?,
                b'\r' => f.write_str("\\r")?,
                0x20..0x7f => write!(f, "{}", b as char)?,
                _ => write!(f, "\\x{b:02x}")?,
            }
        }
        f.write_str("\"")
    }
}

/// A RESP command of 34 bytes, 52 characters as `Frame`'s `Debug`.
const FRAME: &[u8] = b"*3\r\n$3\r\nSET\r\n$5\r\nhello\r\n$5\r\nworld\r\n";

/// A ring that holds every loop's records (up to 100,000 iterations), so
/// none is dropped: a dropped record costs less than a written one.
const RING: usize = 64 << 20;

/// A layer that does nothing: what the registry and a per-layer filter cost
/// any layer before it does its own work.
struct NoopLayer;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for NoopLayer {}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: tracing_loops MODE N [span|int|event|debug|chars]";
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
            let mut b = ringtrace::builder()
                .output(&path)
                .buffer_bytes_per_thread(RING)
                .buffer_bytes(2 * RING as u64);
            if mode.ends_with("off") {
                b = b.disable_categories(["*"]);
            }
            let (s, g) = b.subscriber().expect("ringtrace session");
            guard = Some(g);
            tracing::Dispatch::new(s.with(LevelFilter::INFO))
        }
        "layer" | "layer-off" => {
            let mut b = ringtrace::builder()
                .output(&path)
                .buffer_bytes_per_thread(RING)
                .buffer_bytes(2 * RING as u64);
            if mode.ends_with("off") {
                b = b.disable_categories(["*"]);
            }
            let (l, g) = b.layer().expect("ringtrace session");
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
                "chars" => tracing::info!(frame = ?Frame(std::hint::black_box(FRAME)), "frame"),
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
