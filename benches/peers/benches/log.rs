//! `log` records into ringtrace, three ways, in one run: ringtrace's own
//! `log` bridge (`ringtrace::log::Logger`), ringtrace's `trace_log!` (the
//! same record without `log`), and `log` → `tracing` through tracing-log's
//! `LogTracer` into ringtrace's `tracing` subscriber and into its layer.
//!
//! Run (from benches/peers): `cargo bench --bench log` (about 10 s).
//! Prints a Markdown table of ns per record (median of the repetitions, and
//! the minimum) and each way's ratio to the `log` bridge.
//!
//! A process has one `log` logger, so the bench installs a switch: a logger
//! that passes each record to the logger of the row being measured (one
//! relaxed load and a branch, paid by every `log` row alike). The floor row
//! measures that switch with a logger that does nothing; the `filtered` row
//! is a record below `log::max_level`, which `log`'s macro drops before any
//! logger is called.
//!
//! Records: `"tick {}"` with an integer (formatted), and a static message
//! (nothing to format). No benchmark framework: a loop of `iters` records
//! timed with `Instant`, `reps` times; between repetitions (untimed) the
//! session is flushed, so the rings never fill (`lost` is printed).
//!
//! Environment: `RINGTRACE_BENCH_QUICK=1` runs fewer repetitions;
//! `RINGTRACE_BENCH_DIR` chooses where the trace files go (default: the
//! system temp directory).

// The workspace's bench helpers (`benches/common/`).
#[path = "../../common/mod.rs"]
mod common;

use common::{bench, Sample};
use log::{LevelFilter, Log, Metadata, Record};
use ringtrace::LogLevel;
use std::hint::black_box;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;
use tracing::Dispatch;
use tracing_subscriber::layer::SubscriberExt;

/// Which logger the switch passes records to.
static MODE: AtomicU8 = AtomicU8::new(NOTHING);
const NOTHING: u8 = 0;
const RINGTRACE: u8 = 1;
const TRACING_LOG: u8 = 2;

static RT: OnceLock<ringtrace::log::Logger> = OnceLock::new();
static LOG_TRACER: OnceLock<tracing_log::LogTracer> = OnceLock::new();

struct Switch;

impl Log for Switch {
    fn enabled(&self, m: &Metadata<'_>) -> bool {
        match MODE.load(Ordering::Relaxed) {
            RINGTRACE => RT.get().unwrap().enabled(m),
            TRACING_LOG => LOG_TRACER.get().unwrap().enabled(m),
            _ => false,
        }
    }
    fn log(&self, r: &Record<'_>) {
        match MODE.load(Ordering::Relaxed) {
            RINGTRACE => RT.get().unwrap().log(r),
            TRACING_LOG => LOG_TRACER.get().unwrap().log(r),
            _ => {}
        }
    }
    fn flush(&self) {}
}

#[derive(Clone, Copy, PartialEq)]
enum Via {
    /// `log::info!` with the switch set to the mode.
    Log(u8),
    /// `log::debug!`, below `log::max_level`.
    Filtered,
    /// `ringtrace::trace_log!`.
    TraceLog,
}

/// Formatted records, then static ones.
fn workload(via: Via, static_message: bool) -> impl FnMut(u64) {
    move |n| match (via, static_message) {
        (Via::TraceLog, false) => {
            for i in 0..n {
                ringtrace::trace_log!(LogLevel::Info, "tick {}", black_box(i) & 7);
            }
        }
        (Via::TraceLog, true) => {
            for i in 0..n {
                black_box(i);
                ringtrace::trace_log!(LogLevel::Info, "connected");
            }
        }
        (Via::Filtered, _) => {
            for i in 0..n {
                log::debug!("tick {}", black_box(i) & 7);
            }
        }
        (Via::Log(_), false) => {
            for i in 0..n {
                log::info!("tick {}", black_box(i) & 7);
            }
        }
        (Via::Log(_), true) => {
            for i in 0..n {
                black_box(i);
                log::info!("connected");
            }
        }
    }
}

fn main() {
    let quick = std::env::var_os("RINGTRACE_BENCH_QUICK").is_some();
    let (reps, iters) = if quick { (3, 20_000) } else { (11, 100_000) };
    let dir = std::env::var_os("RINGTRACE_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let file = |name: &str| dir.join(format!("ringtrace-bench-log-{name}"));

    RT.set(ringtrace::log::Logger::new().max_level(LevelFilter::Info))
        .unwrap();
    LOG_TRACER
        .set(tracing_log::LogTracer::new())
        .unwrap_or_else(|_| unreachable!());
    log::set_logger(&Switch).unwrap();
    log::set_max_level(LevelFilter::Info);

    #[derive(Clone, Copy, PartialEq)]
    enum Session {
        None,
        Plain,
        Subscriber,
        Layer,
    }
    let rows: [(&str, Via, Session); 6] = [
        (
            "`log`, filtered out (`debug!` under an INFO max level)",
            Via::Filtered,
            Session::None,
        ),
        (
            "`log` → a logger that does nothing (floor)",
            Via::Log(NOTHING),
            Session::None,
        ),
        (
            "`log` → `ringtrace::log`",
            Via::Log(RINGTRACE),
            Session::Plain,
        ),
        ("`ringtrace::trace_log!`", Via::TraceLog, Session::Plain),
        (
            "`log` → tracing-log → ringtrace subscriber",
            Via::Log(TRACING_LOG),
            Session::Subscriber,
        ),
        (
            "`log` → tracing-log → ringtrace layer",
            Via::Log(TRACING_LOG),
            Session::Layer,
        ),
    ];

    let mut results: Vec<(&str, [Sample; 2])> = Vec::new();
    for (label, via, kind) in rows {
        let mut samples = [Sample {
            median: 0.0,
            min: 0.0,
        }; 2];
        let mut lost = 0;
        for (k, static_message) in [false, true].into_iter().enumerate() {
            if let Via::Log(mode) = via {
                MODE.store(mode, Ordering::Relaxed);
            }
            let session = ringtrace::builder()
                .output(file("log.pftrace"))
                .buffer_bytes_per_thread(16 << 20);
            let run = |samples: &mut [Sample; 2]| {
                samples[k] = bench(
                    reps,
                    iters,
                    &[iters; 3],
                    workload(via, static_message),
                    ringtrace::flush,
                );
            };
            match kind {
                Session::None => run(&mut samples),
                Session::Plain => {
                    let guard = session.start().expect("start a ringtrace session");
                    run(&mut samples);
                    lost += guard.stop().expect("finish the trace").events_lost;
                }
                Session::Subscriber | Session::Layer => {
                    let (d, guard) = if kind == Session::Subscriber {
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
                    tracing::dispatcher::with_default(&d, || run(&mut samples));
                    drop(d);
                    lost += guard.stop().expect("finish the trace").events_lost;
                }
            }
        }
        if kind != Session::None {
            println!("{label}: events lost {lost}");
        }
        results.push((label, samples));
    }

    let bridge = results[2].1;
    println!();
    println!("{reps} repetitions of {iters} records; ns per record, median (min)");
    println!();
    println!("| way | `info!(\"tick {{}}\", i)` | `info!(\"connected\")` |");
    println!("| --- | ---: | ---: |");
    for (label, samples) in &results {
        print!("| {label} |");
        for (i, s) in samples.iter().enumerate() {
            print!(
                " {:.1} ({:.1}), {:.2}x the bridge |",
                s.median,
                s.min,
                s.median / bridge[i].median
            );
        }
        println!();
    }
}
