//! The ringtrace `tracing` layer and ringtrace's own subscriber against the
//! other `tracing` layers that write Chrome JSON or Perfetto (tracing-chrome,
//! tracing-perfetto), and against `tracing` with no layer at all, in one run.
//!
//! Run: `cargo bench --bench layer` (about 20 s). Prints a Markdown table of
//! ns per operation (median of the repetitions, and the minimum) and how many
//! times faster ringtrace (Perfetto output; layer and subscriber) is than
//! each peer.
//!
//! Operations, all through `tracing`'s macros and a `tracing_subscriber`
//! registry with one layer (or ringtrace's subscriber alone):
//! * `span`: create a span with two fields, enter, exit, close
//!   (`info_span!("work", i, kind = "x").in_scope(|| {})`);
//! * `enter/exit`: enter and exit a span that already exists;
//! * `event`: an event with a formatted message and two fields;
//! * `event, Debug per char`: an event with a 52-character `Debug` field
//!   written a character at a time (as `bytes::Bytes` writes a frame).
//!
//! No benchmark framework: a loop of `iters` operations timed with
//! `Instant`, `reps` times. Between repetitions (untimed) each layer is
//! flushed, so ringtrace's rings never fill (its sessions are sized so
//! nothing is dropped; `lost` is printed). tracing-chrome writes on its own
//! thread, tracing-perfetto on the calling thread: both are measured as a
//! user sees them.
//!
//! Environment: `RINGTRACE_BENCH_QUICK=1` runs fewer repetitions;
//! `RINGTRACE_BENCH_ONLY=<text>` runs the operations whose name contains it;
//! `RINGTRACE_BENCH_NO_PEERS=1` stops after ringtrace (for profiling);
//! `RINGTRACE_BENCH_DIR` chooses where the trace files go (default: the
//! system temp directory).

// The workspace's bench helpers (`benches/common/`).
#[path = "../../common/mod.rs"]
mod common;

use common::{bench, Sample};
use std::fmt;
use std::hint::black_box;
use std::path::PathBuf;
use tracing::{info, info_span, Dispatch};
use tracing_subscriber::layer::SubscriberExt;

#[derive(Clone, Copy, PartialEq)]
enum Op {
    Span,
    EnterExit,
    Event,
    DebugChars,
}

const OPS: [(Op, &str); 4] = [
    (Op::Span, "span (new, enter, exit, close)"),
    (Op::EnterExit, "enter/exit of a live span"),
    (Op::Event, "event (message + 2 fields)"),
    (Op::DebugChars, "event, Debug per char (52 chars)"),
];

/// A byte string whose `Debug` writes one character (or one escape) at a
/// time: `b"*3\r\n$3..."`, 52 characters for `FRAME`.
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

/// A RESP command of 34 bytes.
const FRAME: &[u8] = b"*3\r\n$3\r\nSET\r\n$5\r\nhello\r\n$5\r\nworld\r\n";

/// Runs `op` under `dispatch` on this thread.
fn run(dispatch: &Dispatch, op: Op, reps: usize, iters: u64, mut between: impl FnMut()) -> Sample {
    tracing::dispatcher::with_default(dispatch, || {
        let live = info_span!("live", id = 7u64, kind = "x");
        bench(
            reps,
            iters,
            // Enough to touch every page of a ring (a fresh ring's pages are
            // mapped lazily: first writes fault), so no repetition pays for it.
            &[iters; 3],
            |n| match op {
                Op::Span => {
                    for i in 0..n {
                        info_span!("work", i, kind = "x").in_scope(|| black_box(i));
                    }
                }
                Op::EnterExit => {
                    for i in 0..n {
                        live.in_scope(|| black_box(i));
                    }
                }
                Op::Event => {
                    for i in 0..n {
                        info!(i, ratio = 0.5, "tick {}", black_box(i) & 7);
                    }
                }
                Op::DebugChars => {
                    for _ in 0..n {
                        info!(frame = ?Frame(black_box(FRAME)), "frame");
                    }
                }
            },
            &mut between,
        )
    })
}

fn main() {
    let quick = std::env::var_os("RINGTRACE_BENCH_QUICK").is_some();
    // RINGTRACE_BENCH_ONLY=enter: only that operation (profiling).
    let only = std::env::var("RINGTRACE_BENCH_ONLY").unwrap_or_default();
    let ops: Vec<(Op, &str)> = OPS
        .iter()
        .copied()
        .filter(|(_, n)| n.contains(only.as_str()))
        .collect();
    let (reps, iters) = if quick { (3, 20_000) } else { (11, 50_000) };
    let dir = std::env::var_os("RINGTRACE_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let file = |name: &str| dir.join(format!("ringtrace-bench-layer-{name}"));

    let mut rows: Vec<(&str, Vec<Sample>)> = Vec::new();

    // tracing with a registry and no layer: the floor.
    let d = Dispatch::new(tracing_subscriber::registry());
    rows.push((
        "tracing, registry only",
        ops.iter()
            .map(|&(op, _)| run(&d, op, reps, iters, || {}))
            .collect(),
    ));

    // ringtrace: the layer in both formats, and its own subscriber.
    for (label, name, own_subscriber) in [
        ("ringtrace layer (Perfetto)", "rt.pftrace", false),
        ("ringtrace layer (JSON)", "rt.json", false),
        ("ringtrace subscriber (Perfetto)", "rt-sub.pftrace", true),
    ] {
        let mut samples = Vec::new();
        let mut lost = 0;
        for &(op, _) in &ops {
            let session = ringtrace::builder()
                .output(file(name))
                .buffer_bytes_per_thread(8 << 20)
                .buffer_bytes(32 << 20);
            let (d, guard) = if own_subscriber {
                let (sub, guard) = session
                    .subscriber()
                    .expect("start a ringtrace session");
                (Dispatch::new(sub), guard)
            } else {
                let (layer, guard) = session
                    .layer()
                    .expect("start a ringtrace session");
                (
                    Dispatch::new(tracing_subscriber::registry().with(layer)),
                    guard,
                )
            };
            samples.push(run(&d, op, reps, iters, ringtrace::flush));
            drop(d);
            lost += guard.stop().expect("finish the trace").events_lost;
        }
        println!("{label}: events lost {lost}");
        rows.push((label, samples));
    }

    if std::env::var_os("RINGTRACE_BENCH_NO_PEERS").is_none() {
        // tracing-chrome (JSON, written on its own thread).
        let mut samples = Vec::new();
        for &(op, _) in &ops {
            let (layer, flush) = tracing_chrome::ChromeLayerBuilder::new()
                .file(file("chrome.json"))
                .include_args(true)
                .build();
            let d = Dispatch::new(tracing_subscriber::registry().with(layer));
            samples.push(run(&d, op, reps, iters, || flush.flush()));
            drop(d);
            drop(flush);
        }
        rows.push(("tracing-chrome (include_args)", samples));

        // tracing-perfetto (protobuf, written on the calling thread).
        let mut samples = Vec::new();
        for &(op, _) in &ops {
            let out = std::fs::File::create(file("perfetto.pftrace")).unwrap();
            let layer = tracing_perfetto::PerfettoLayer::new(std::sync::Mutex::new(
                std::io::BufWriter::new(out),
            ))
            .with_debug_annotations(true);
            let d = Dispatch::new(tracing_subscriber::registry().with(layer));
            samples.push(run(&d, op, reps, iters, || {}));
        }
        rows.push(("tracing-perfetto (debug annotations)", samples));
    }

    println!();
    println!("{reps} repetitions of {iters} operations; ns per operation, median (min)");
    println!();
    print!("| layer |");
    for (_, name) in &ops {
        print!(" {name} |");
    }
    println!();
    print!("| --- |");
    for _ in &ops {
        print!(" ---: |");
    }
    println!();
    let layer = rows[1].1.clone();
    let subscriber = rows[3].1.clone();
    for (label, samples) in &rows {
        print!("| {label} |");
        for (i, s) in samples.iter().enumerate() {
            let vs = if label.starts_with("ringtrace") || label.starts_with("tracing,") {
                String::new()
            } else {
                format!(
                    "; ringtrace layer {:.1}x, subscriber {:.1}x faster",
                    s.median / layer[i].median,
                    s.median / subscriber[i].median
                )
            };
            print!(" {:.0} ({:.0}){vs} |", s.median, s.min);
        }
        println!();
    }
}
