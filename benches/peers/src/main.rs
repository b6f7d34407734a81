//! ringtrace against its peers: the same workloads, one process, one run.
//!
//! `cargo run --release` (in `benches/peers/`), optionally with
//! `--features tracy` and/or `--features perfetto-sdk` (Google's SDK: builds
//! vendored C++ for minutes). Prints Markdown tables: median ns per scope
//! (and the ratio to ringtrace), then what each writes: bytes per scope on
//! disk, time to finish the file, peak memory, events lost.
//!
//! Each peer is used as its documentation says, in its fastest recording
//! configuration; where its API makes that a choice it is said in the notes:
//! * puffin: scopes run inside one outer scope per repetition (puffin's frame
//!   scope): the end of a top-level scope takes puffin's global mutex.
//! * fastrace: local spans under a root span per 1,000 (its span queue holds
//!   10,240 spans per root and silently drops the rest).
//! * perfetto-recorder: with its `fastant` feature (its fastest clock; turn it
//!   off with `--no-default-features`).
//! * tracing layers: each in its own `Dispatch`, set as the thread's default.
//!
//! Environment: `PEERS_QUICK=1` for a smoke run; `PEERS_DIR` for the trace
//! files (default: the system temp directory); `PEERS_ONLY=puffin,fastrace`
//! for a subset (ringtrace always runs: it is the base of the ratios; the
//! keys: puffin, fastrace, perfetto-recorder, tracy, perfetto-sdk, registry,
//! registry-layer, tracing-chrome, tracing-perfetto, tracing-perfetto-file,
//! tracing-perfetto-sdk).
//!
//! One file (Google's SDK aside, in `gsdk.rs`): the harness, each peer's
//! module and the report side by side, so one read shows every peer runs
//! the same loop.

// The workspace's bench helpers (`benches/common/`).
#[path = "../../common/mod.rs"]
mod common;

use common::{machine, median, process_cpu_ns, two_rdtsc};
use std::hint::black_box;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use tracing_subscriber::prelude::*;

// ------------------------------------------------------------------ harness

#[derive(Clone, Copy, Debug)]
struct Sample {
    median: f64,
    /// Median CPU time of the whole process (every thread: a tracer's
    /// background thread too) per iteration over a repetition and the
    /// untimed work after it (`between`: the drain, the writer's flush);
    /// NaN where not measured (two threads at once).
    cpu: f64,
}

struct Cfg {
    /// Run the timed workloads.
    timing: bool,
    /// Run the file measurement (done in a child process, one per peer, so
    /// that each peer's peak memory is its own).
    file: bool,
    reps: usize,
    /// Target duration of one repetition.
    rep_time: Duration,
    /// Scopes written for the file measurements.
    file_scopes: u64,
}

/// Iterations such that one repetition of `f` takes about `cfg.rep_time`.
fn calibrate(cfg: &Cfg, f: &mut dyn FnMut(u64), between: &mut dyn FnMut()) -> u64 {
    let mut n = 1000u64;
    loop {
        let t = Instant::now();
        f(n);
        let el = t.elapsed();
        between();
        if el >= cfg.rep_time / 4 || n >= 1 << 22 {
            let per = el.as_secs_f64() / n as f64;
            return ((cfg.rep_time.as_secs_f64() / per) as u64).clamp(1000, 1 << 22);
        }
        n *= 4;
    }
}

/// Median ns per iteration of `f(iters)` over `cfg.reps` repetitions.
fn bench(cfg: &Cfg, mut f: impl FnMut(u64), mut between: impl FnMut()) -> Sample {
    let iters = calibrate(cfg, &mut f, &mut between);
    let mut v = Vec::new();
    let mut cpu = Vec::new();
    for _ in 0..cfg.reps {
        let c = process_cpu_ns() as f64;
        let t = Instant::now();
        f(iters);
        v.push(t.elapsed().as_nanos() as f64 / iters as f64);
        between();
        cpu.push((process_cpu_ns() as f64 - c) / iters as f64);
    }
    Sample {
        median: median(&mut v),
        cpu: median(&mut cpu),
    }
}

/// `f` on two threads at once, repetition by repetition; each thread times
/// its own loop. `init` runs first on each thread (and what it returns lives
/// as long as the thread's loop: a dispatcher guard, say); `between` runs
/// on each thread after each repetition, untimed.
fn two_threads<G: 'static>(
    cfg: &Cfg,
    init: impl Fn() -> G + Send + Sync + 'static,
    f: impl Fn(u64) + Send + Sync + 'static,
    between: impl Fn() + Send + Sync + 'static,
) -> Sample {
    let init = Arc::new(init);
    let f = Arc::new(f);
    let between = Arc::new(between);
    let barrier = Arc::new(Barrier::new(2));
    let iters_shared = Arc::new(AtomicU64::new(0));
    let reps = cfg.reps;
    let rep_time = cfg.rep_time;
    let handles: Vec<_> = (0..2)
        .map(|k| {
            let (init, f, between, barrier, iters_shared) = (
                init.clone(),
                f.clone(),
                between.clone(),
                barrier.clone(),
                iters_shared.clone(),
            );
            std::thread::Builder::new()
                .name(format!("peer-{k}"))
                .spawn(move || {
                    let _keep = init();
                    if k == 0 {
                        let c = Cfg {
                            timing: true,
                            file: false,
                            reps,
                            rep_time,
                            file_scopes: 0,
                        };
                        let n = calibrate(&c, &mut |n| f(n), &mut || between());
                        iters_shared.store(n, Ordering::Relaxed);
                    } else {
                        f(1000);
                        between();
                    }
                    barrier.wait();
                    let iters = iters_shared.load(Ordering::Relaxed);
                    let mut v = Vec::new();
                    for _ in 0..reps {
                        barrier.wait();
                        let t = Instant::now();
                        f(iters);
                        v.push(t.elapsed().as_nanos() as f64 / iters as f64);
                        barrier.wait();
                        between();
                    }
                    v
                })
                .unwrap()
        })
        .collect();
    let mut all = Vec::new();
    for h in handles {
        all.extend(h.join().unwrap());
    }
    Sample {
        median: median(&mut all),
        cpu: f64::NAN,
    }
}

// ------------------------------------------------------------------ process

fn status_kib(key: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Resets VmHWM to the current RSS; returns the RSS (KiB).
fn reset_peak() -> u64 {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    status_kib("VmRSS:")
}

fn file_len(p: &Path) -> u64 {
    std::fs::metadata(p).map_or(0, |m| m.len())
}

/// TracePackets with a track_event (field 11) in a Perfetto file.
fn count_track_events(bytes: &[u8]) -> u64 {
    fn varint(b: &[u8], i: &mut usize) -> Option<u64> {
        let mut v = 0u64;
        for s in 0..10 {
            let x = *b.get(*i)?;
            *i += 1;
            v |= ((x & 0x7f) as u64) << (7 * s);
            if x < 0x80 {
                return Some(v);
            }
        }
        None
    }
    fn has_field(b: &[u8], want: u64) -> bool {
        let mut i = 0;
        while i < b.len() {
            let Some(key) = varint(b, &mut i) else {
                return false;
            };
            let (field, wt) = (key >> 3, key & 7);
            if field == want {
                return true;
            }
            let skip = match wt {
                0 => {
                    if varint(b, &mut i).is_none() {
                        return false;
                    }
                    0
                }
                1 => 8,
                2 => match varint(b, &mut i) {
                    Some(n) => n as usize,
                    None => return false,
                },
                5 => 4,
                _ => return false,
            };
            i += skip;
        }
        false
    }
    let mut i = 0;
    let mut n = 0;
    while i < bytes.len() {
        let Some(key) = varint(bytes, &mut i) else {
            break;
        };
        let Some(len) = varint(bytes, &mut i) else {
            break;
        };
        let end = (i + len as usize).min(bytes.len());
        if key == (1 << 3 | 2) && has_field(&bytes[i..end], 11) {
            n += 1;
        }
        i = end;
    }
    n
}

fn count_json(bytes: &[u8], needle: &str) -> u64 {
    let s = String::from_utf8_lossy(bytes);
    s.matches(needle).count() as u64
}

// ------------------------------------------------------------------ results

#[derive(Default)]
struct Peer {
    name: &'static str,
    /// Which ringtrace column the ratio is taken against.
    tracing_layer: bool,
    scope: Option<Sample>,
    scope_arg: Option<Sample>,
    disabled: Option<Sample>,
    two: Option<Sample>,
    enter_exit: Option<Sample>,
    event: Option<Sample>,
    file: Option<FileStats>,
    notes: Vec<String>,
}

struct FileStats {
    format: &'static str,
    bytes_per_scope: Option<f64>,
    finish_ms: f64,
    peak_mib: f64,
    lost: String,
}

/// Finishes a ringtrace file run: the time `stop()` takes, the file's size
/// and the events in it against those recorded (two per scope).
fn finish_ringtrace(cfg: &Cfg, path: &Path, rss: u64, guard: ringtrace::TraceGuard) -> FileStats {
    let t = Instant::now();
    let stats = guard.stop().unwrap();
    let finish = t.elapsed();
    let found = count_track_events(&std::fs::read(path).unwrap_or_default());
    FileStats {
        format: "Perfetto",
        bytes_per_scope: Some(file_len(path) as f64 / cfg.file_scopes as f64),
        finish_ms: finish.as_secs_f64() * 1e3,
        peak_mib: (status_kib("VmHWM:").saturating_sub(rss)) as f64 / 1024.0,
        lost: format!(
            "{} (Stats); {} of {} events in the file",
            stats.events_lost,
            found,
            2 * cfg.file_scopes
        ),
    }
}

fn out_path(name: &str) -> PathBuf {
    std::env::var_os("PEERS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir)
        .join(name)
}

// ------------------------------------------------------------------ ringtrace

mod rt {
    use super::*;

    #[inline(never)]
    pub fn scope(n: u64) {
        for i in 0..n {
            ringtrace::trace_scope!("bench", "scope");
            black_box(i);
        }
    }
    #[inline(never)]
    pub fn scope_arg(n: u64) {
        for i in 0..n {
            ringtrace::trace_scope!("bench", "scope_arg", i = i);
            black_box(i);
        }
    }
    #[inline(never)]
    pub fn disabled(n: u64) {
        for i in 0..n {
            ringtrace::trace_scope!("off", "scope");
            black_box(i);
        }
    }
    #[inline(never)]
    pub fn nested(n: u64) {
        for i in 0..n / 2 {
            ringtrace::trace_scope!("bench", "outer");
            {
                ringtrace::trace_scope!("bench", "inner");
                black_box(i);
            }
        }
    }

    pub fn run(cfg: &Cfg) -> Peer {
        let mut p = Peer {
            name: "ringtrace",
            ..Default::default()
        };
        if cfg.timing {
            let guard = ringtrace::builder()
                .output(out_path("peers-ringtrace-timing.pftrace"))
                .buffer_bytes_per_thread(64 << 20)
                .buffer_bytes(512 << 20) // two threads' rings, and what they outgrew
                .flush_interval(Duration::from_secs(3600))
                .enable_categories(["bench"])
                .start()
                .expect("ringtrace start");
            p.disabled = Some(bench(cfg, disabled, || {}));
            p.scope = Some(bench(cfg, scope, ringtrace::flush));
            p.scope_arg = Some(bench(cfg, scope_arg, ringtrace::flush));
            p.two = Some(two_threads(cfg, || (), scope, ringtrace::flush));
            let stats = guard.stop().unwrap();
            if stats.events_lost > 0 {
                p.notes.push(format!(
                    "timing runs lost {} events: rings too small",
                    stats.events_lost
                ));
            }
        }
        if cfg.file {
            // File: default settings but a ring that holds the burst.
            let path = out_path("peers-ringtrace.pftrace");
            let rss = reset_peak();
            let guard = ringtrace::builder()
                .output(&path)
                .buffer_bytes_per_thread(16 << 20)
                .buffer_bytes(64 << 20)
                .enable_categories(["bench"])
                .start()
                .unwrap();
            nested(cfg.file_scopes);
            p.file = Some(finish_ringtrace(cfg, &path, rss, guard));
        }
        p
    }
}

// ------------------------------------------------------------------ tracing layers

/// The workloads every `tracing` layer runs.
mod tr {
    use super::*;

    #[inline(never)]
    pub fn span(n: u64) {
        for i in 0..n {
            let _s = tracing::info_span!("scope").entered();
            black_box(i);
        }
    }
    #[inline(never)]
    pub fn span_arg(n: u64) {
        for i in 0..n {
            let _s = tracing::info_span!("scope_arg", i = i).entered();
            black_box(i);
        }
    }
    #[inline(never)]
    pub fn disabled(n: u64) {
        for i in 0..n {
            let _s = tracing::trace_span!("disabled").entered();
            black_box(i);
        }
    }
    #[inline(never)]
    pub fn enter_exit(n: u64, span: &tracing::Span) {
        for i in 0..n {
            let _e = span.enter();
            black_box(i);
        }
    }
    #[inline(never)]
    pub fn event(n: u64) {
        for i in 0..n {
            tracing::info!(i = i, "tick");
        }
    }
    #[inline(never)]
    pub fn nested(n: u64) {
        for i in 0..n / 2 {
            let _o = tracing::info_span!("outer").entered();
            {
                let _i = tracing::info_span!("inner").entered();
                black_box(i);
            }
        }
    }

    /// Runs every tracing workload with `dispatch` as the default.
    pub fn workloads(cfg: &Cfg, p: &mut Peer, dispatch: &tracing::Dispatch, between: fn()) {
        let _d = tracing::dispatcher::set_default(dispatch);
        p.disabled = Some(bench(cfg, disabled, || {}));
        p.scope = Some(bench(cfg, span, between));
        p.scope_arg = Some(bench(cfg, span_arg, between));
        let held = tracing::info_span!("held");
        p.enter_exit = Some(bench(cfg, |n| enter_exit(n, &held), between));
        drop(held);
        p.event = Some(bench(cfg, event, between));
        let d = dispatch.clone();
        p.two = Some(two_threads(
            cfg,
            move || tracing::dispatcher::set_default(&d),
            span,
            between,
        ));
    }

    pub fn ringtrace_layer(cfg: &Cfg) -> Peer {
        ringtrace_tracing(cfg, false)
    }

    pub fn ringtrace_subscriber(cfg: &Cfg) -> Peer {
        ringtrace_tracing(cfg, true)
    }

    /// ringtrace through `tracing`: its layer on the registry, or its own
    /// subscriber (no registry).
    fn ringtrace_tracing(cfg: &Cfg, own_subscriber: bool) -> Peer {
        let info = || tracing_subscriber::filter::LevelFilter::INFO;
        let tag = if own_subscriber {
            "subscriber"
        } else {
            "layer"
        };
        let mut p = Peer {
            name: if own_subscriber {
                "ringtrace subscriber"
            } else {
                "ringtrace layer"
            },
            tracing_layer: true,
            ..Default::default()
        };
        if cfg.timing {
            let session = ringtrace::builder()
                .output(out_path(&format!("peers-ringtrace-{tag}-timing.pftrace")))
                .buffer_bytes_per_thread(64 << 20)
                .buffer_bytes(512 << 20) // two threads' rings, and what they outgrew
                .flush_interval(Duration::from_secs(3600));
            let (dispatch, guard) = if own_subscriber {
                let (sub, guard) = session.subscriber().unwrap();
                (tracing::Dispatch::new(sub.with(info())), guard)
            } else {
                let (layer, guard) = session.layer().unwrap();
                let registry = tracing_subscriber::registry().with(layer.with_filter(info()));
                (tracing::Dispatch::new(registry), guard)
            };
            workloads(cfg, &mut p, &dispatch, ringtrace::flush);
            drop(dispatch);
            let stats = guard.stop().unwrap();
            if stats.events_lost > 0 {
                p.notes
                    .push(format!("timing runs lost {} events", stats.events_lost));
            }
        }
        if cfg.file {
            let path = out_path(&format!("peers-ringtrace-{tag}.pftrace"));
            let rss = reset_peak();
            let session = ringtrace::builder()
                .output(&path)
                .buffer_bytes_per_thread(16 << 20)
                .buffer_bytes(64 << 20);
            let (dispatch, guard) = if own_subscriber {
                let (sub, guard) = session.subscriber().unwrap();
                (tracing::Dispatch::new(sub), guard)
            } else {
                let (layer, guard) = session.layer().unwrap();
                (
                    tracing::Dispatch::new(tracing_subscriber::registry().with(layer)),
                    guard,
                )
            };
            tracing::dispatcher::with_default(&dispatch, || nested(cfg.file_scopes));
            drop(dispatch);
            p.file = Some(finish_ringtrace(cfg, &path, rss, guard));
        }
        p
    }

    /// The floor of every layer: `tracing`'s registry with no layer at all
    /// (span ids, the span slab, the current-span stack).
    pub fn registry_only(cfg: &Cfg) -> Peer {
        let mut p = Peer {
            name: "(floor) tracing registry, no layer",
            tracing_layer: true,
            ..Default::default()
        };
        let dispatch = tracing::Dispatch::new(
            tracing_subscriber::registry().with(tracing_subscriber::filter::LevelFilter::INFO),
        );
        workloads(cfg, &mut p, &dispatch, || {});
        p
    }

    /// A layer that does nothing.
    struct NoopLayer;

    impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for NoopLayer {}

    /// The floor of every layer as the layers here are set up: the registry
    /// with a layer that does nothing behind the same per-layer INFO filter
    /// (which adds the filter's per-span state and a registry look-up on
    /// each enter, exit and close).
    pub fn registry_noop_layer(cfg: &Cfg) -> Peer {
        let mut p = Peer {
            name: "(floor) registry + a layer that does nothing, behind the same per-layer filter",
            tracing_layer: true,
            ..Default::default()
        };
        let dispatch = tracing::Dispatch::new(
            tracing_subscriber::registry()
                .with(NoopLayer.with_filter(tracing_subscriber::filter::LevelFilter::INFO)),
        );
        workloads(cfg, &mut p, &dispatch, || {});
        p
    }

    pub fn chrome(cfg: &Cfg) -> Peer {
        use tracing_chrome::ChromeLayerBuilder;
        let mut p = Peer {
            name: "tracing-chrome",
            tracing_layer: true,
            ..Default::default()
        };
        if cfg.timing {
            {
                let (layer, flush) = ChromeLayerBuilder::new()
                    .file(out_path("peers-chrome-timing.json"))
                    .include_args(true)
                    .build();
                let dispatch = tracing::Dispatch::new(
                    tracing_subscriber::registry()
                        .with(layer.with_filter(tracing_subscriber::filter::LevelFilter::INFO)),
                );
                workloads(cfg, &mut p, &dispatch, || {});
                drop(dispatch);
                drop(flush);
            }
        }
        if cfg.file {
            let path = out_path("peers-chrome.json");
            let rss = reset_peak();
            let (layer, flush) = ChromeLayerBuilder::new()
                .file(&path)
                .include_args(true)
                .build();
            let dispatch = tracing::Dispatch::new(tracing_subscriber::registry().with(layer));
            tracing::dispatcher::with_default(&dispatch, || nested(cfg.file_scopes));
            let t = Instant::now();
            drop(dispatch);
            drop(flush);
            let finish = t.elapsed();
            let bytes = std::fs::read(&path).unwrap_or_default();
            let found = count_json(&bytes, "\"ph\":\"B\"") + count_json(&bytes, "\"ph\":\"X\"");
            p.file = Some(FileStats {
                format: "Chrome JSON (B/E)",
                bytes_per_scope: Some(bytes.len() as f64 / cfg.file_scopes as f64),
                finish_ms: finish.as_secs_f64() * 1e3,
                peak_mib: (status_kib("VmHWM:").saturating_sub(rss)) as f64 / 1024.0,
                lost: format!(
                    "{} (none reported: unbounded channel); {found} of {} scopes in the file",
                    cfg.file_scopes.saturating_sub(found),
                    cfg.file_scopes
                ),
            });
            p.notes
                .push("writer thread behind an unbounded channel: no drops, memory grows".into());
        }
        p
    }

    /// A `MakeWriter` over a shared buffered file.
    #[derive(Clone)]
    pub struct SharedFile(pub Arc<Mutex<std::io::BufWriter<std::fs::File>>>);

    pub struct SharedGuard<'a>(std::sync::MutexGuard<'a, std::io::BufWriter<std::fs::File>>);

    impl Write for SharedGuard<'_> {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.write(b)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            self.0.flush()
        }
    }

    impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for SharedFile {
        type Writer = SharedGuard<'a>;
        fn make_writer(&'a self) -> SharedGuard<'a> {
            SharedGuard(self.0.lock().unwrap())
        }
    }

    fn shared_file(path: &Path) -> SharedFile {
        SharedFile(Arc::new(Mutex::new(std::io::BufWriter::with_capacity(
            1 << 16,
            std::fs::File::create(path).unwrap(),
        ))))
    }

    pub fn perfetto(cfg: &Cfg) -> Peer {
        use tracing_perfetto::PerfettoLayer;
        let mut p = Peer {
            name: "tracing-perfetto",
            tracing_layer: true,
            ..Default::default()
        };
        if cfg.timing {
            {
                let w = shared_file(&out_path("peers-tracing-perfetto-timing.pftrace"));
                let layer = PerfettoLayer::new(w.clone()).with_debug_annotations(true);
                let dispatch = tracing::Dispatch::new(
                    tracing_subscriber::registry()
                        .with(layer.with_filter(tracing_subscriber::filter::LevelFilter::INFO)),
                );
                workloads(cfg, &mut p, &dispatch, || {});
                drop(dispatch);
                let _ = w.0.lock().unwrap().flush();
            }
        }
        if cfg.file {
            let path = out_path("peers-tracing-perfetto.pftrace");
            let rss = reset_peak();
            let w = shared_file(&path);
            let layer = PerfettoLayer::new(w.clone()).with_debug_annotations(true);
            let dispatch = tracing::Dispatch::new(tracing_subscriber::registry().with(layer));
            tracing::dispatcher::with_default(&dispatch, || nested(cfg.file_scopes));
            let t = Instant::now();
            drop(dispatch);
            let _ = w.0.lock().unwrap().flush();
            let finish = t.elapsed();
            let bytes = std::fs::read(&path).unwrap_or_default();
            let found = count_track_events(&bytes);
            p.file = Some(FileStats {
                format: "Perfetto",
                bytes_per_scope: Some(bytes.len() as f64 / cfg.file_scopes as f64),
                finish_ms: finish.as_secs_f64() * 1e3,
                peak_mib: (status_kib("VmHWM:").saturating_sub(rss)) as f64 / 1024.0,
                lost: format!("{} of {} events in the file", found, 2 * cfg.file_scopes),
            });
            p.notes
                .push("encodes and writes each packet on the recording thread (file mutex)".into());
        }
        p
    }

    /// tracing-perfetto-file: its layer on the registry, fields written as
    /// debug annotations (its fullest recording; spans on tracks of their
    /// own, its default).
    pub fn perfetto_file(cfg: &Cfg) -> Peer {
        use tracing_perfetto_file::PerfettoLayer;
        let mut p = Peer {
            name: "tracing-perfetto-file",
            tracing_layer: true,
            ..Default::default()
        };
        let create = |path: &Path| {
            let file =
                std::io::BufWriter::with_capacity(1 << 16, std::fs::File::create(path).unwrap());
            PerfettoLayer::builder(file)
                .with_debug_annotations()
                .build()
        };
        if cfg.timing {
            let (layer, guard) = create(&out_path("peers-tracing-perfetto-file-timing.pftrace"));
            let dispatch = tracing::Dispatch::new(
                tracing_subscriber::registry()
                    .with(layer.with_filter(tracing_subscriber::filter::LevelFilter::INFO)),
            );
            // Each thread writes its queue to the file when it fills: no
            // drain between repetitions.
            workloads(cfg, &mut p, &dispatch, || {});
            drop(dispatch);
            guard.flush().unwrap();
        }
        if cfg.file {
            let path = out_path("peers-tracing-perfetto-file.pftrace");
            let rss = reset_peak();
            let (layer, guard) = create(&path);
            let dispatch = tracing::Dispatch::new(tracing_subscriber::registry().with(layer));
            tracing::dispatcher::with_default(&dispatch, || nested(cfg.file_scopes));
            let t = Instant::now();
            drop(dispatch);
            guard.flush().unwrap();
            drop(guard);
            let finish = t.elapsed();
            let bytes = std::fs::read(&path).unwrap_or_default();
            let found = count_track_events(&bytes);
            p.file = Some(FileStats {
                format: "Perfetto",
                bytes_per_scope: Some(bytes.len() as f64 / cfg.file_scopes as f64),
                finish_ms: finish.as_secs_f64() * 1e3,
                peak_mib: (status_kib("VmHWM:").saturating_sub(rss)) as f64 / 1024.0,
                lost: format!("{} of {} events in the file", found, 2 * cfg.file_scopes),
            });
            p.notes.push(
                "encodes on the recording thread into a queue of its own, which that thread writes to the file when it fills"
                    .into(),
            );
        }
        p
    }
}

// ------------------------------------------------------------------ puffin

mod pf {
    use super::*;

    #[inline(never)]
    pub fn scope(n: u64) {
        puffin::profile_scope!("rep");
        for i in 0..n {
            puffin::profile_scope!("scope");
            black_box(i);
        }
    }
    #[inline(never)]
    pub fn scope_arg(n: u64) {
        puffin::profile_scope!("rep");
        for i in 0..n {
            puffin::profile_scope!("scope_arg", i.to_string());
            black_box(i);
        }
    }
    #[inline(never)]
    pub fn nested(n: u64) {
        puffin::profile_scope!("rep");
        for i in 0..n / 2 {
            puffin::profile_scope!("outer");
            {
                puffin::profile_scope!("inner");
                black_box(i);
            }
        }
    }

    fn new_frame() {
        puffin::GlobalProfiler::lock().new_frame();
    }

    pub fn run(cfg: &Cfg) -> Peer {
        let mut p = Peer {
            name: "puffin",
            ..Default::default()
        };
        if cfg.timing {
            puffin::set_scopes_on(false);
            p.disabled = Some(bench(cfg, scope, || {}));
            puffin::set_scopes_on(true);
            p.scope = Some(bench(cfg, scope, new_frame));
            p.scope_arg = Some(bench(cfg, scope_arg, new_frame));
            p.two = Some(two_threads(cfg, || (), scope, new_frame));
            new_frame();
            p.notes.push(
                "int arg: puffin takes a string, so `i.to_string()` (an allocation per scope)"
                    .into(),
            );
        }
        if cfg.file {
            // File: a frame view keeping every frame, written at the end.
            let path = out_path("peers-puffin.puffin");
            let rss = reset_peak();
            puffin::set_scopes_on(true);
            let view = puffin::GlobalFrameView::default();
            view.lock().set_max_recent(usize::MAX);
            let per_frame = 10_000;
            let mut left = cfg.file_scopes;
            while left > 0 {
                let n = left.min(per_frame);
                nested(n);
                new_frame();
                left -= n;
            }
            let t = Instant::now();
            new_frame();
            let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
            view.lock().write(&mut f).expect("puffin write");
            f.flush().unwrap();
            drop(f);
            let finish = t.elapsed();
            p.file = Some(FileStats {
                format: "puffin (lz4-packed frames)",
                bytes_per_scope: Some(file_len(&path) as f64 / cfg.file_scopes as f64),
                finish_ms: finish.as_secs_f64() * 1e3,
                peak_mib: (status_kib("VmHWM:").saturating_sub(rss)) as f64 / 1024.0,
                lost: "0 (unbounded per-thread streams)".into(),
            });
            puffin::set_scopes_on(false);
        }
        p
    }
}

// ------------------------------------------------------------------ fastrace

mod fr {
    use super::*;
    use fastrace::collector::{Config, Reporter, SpanRecord};
    use fastrace::local::LocalSpan;
    use fastrace::prelude::{Span, SpanContext};
    use std::sync::atomic::AtomicBool;

    const PER_ROOT: u64 = 1000;

    pub static RECEIVED: AtomicU64 = AtomicU64::new(0);
    static WRITE: AtomicBool = AtomicBool::new(false);
    static OUT: Mutex<Option<std::io::BufWriter<std::fs::File>>> = Mutex::new(None);

    /// fastrace ships no file writer: this one writes Chrome JSON `X`
    /// events, as a user would to open the spans in a trace viewer.
    struct FileReporter;

    impl Reporter for FileReporter {
        fn report(&mut self, spans: Vec<SpanRecord>) {
            RECEIVED.fetch_add(spans.len() as u64, Ordering::Relaxed);
            if !WRITE.load(Ordering::Relaxed) {
                return;
            }
            let mut out = OUT.lock().unwrap();
            if let Some(w) = out.as_mut() {
                for s in spans {
                    let _ = writeln!(
                        w,
                        "{{\"name\":\"{}\",\"ph\":\"X\",\"ts\":{:.3},\"dur\":{:.3},\"pid\":1,\"tid\":{}}},",
                        s.name,
                        s.begin_time_unix_ns as f64 / 1e3,
                        s.duration_ns as f64 / 1e3,
                        s.trace_id.0 as u32
                    );
                }
            }
        }
    }

    #[inline(never)]
    pub fn scope(n: u64) {
        let mut left = n;
        while left > 0 {
            let root = Span::root("root", SpanContext::random());
            let _g = root.set_local_parent();
            for i in 0..left.min(PER_ROOT) {
                let _s = LocalSpan::enter_with_local_parent("scope");
                black_box(i);
            }
            left -= left.min(PER_ROOT);
        }
    }
    #[inline(never)]
    pub fn scope_arg(n: u64) {
        let mut left = n;
        while left > 0 {
            let root = Span::root("root", SpanContext::random());
            let _g = root.set_local_parent();
            for i in 0..left.min(PER_ROOT) {
                let _s = LocalSpan::enter_with_local_parent("scope_arg")
                    .with_property(|| ("i", i.to_string()));
                black_box(i);
            }
            left -= left.min(PER_ROOT);
        }
    }
    #[inline(never)]
    pub fn nested(n: u64) {
        let mut left = n / 2;
        while left > 0 {
            let root = Span::root("root", SpanContext::random());
            let _g = root.set_local_parent();
            for i in 0..left.min(PER_ROOT / 2) {
                let _o = LocalSpan::enter_with_local_parent("outer");
                {
                    let _i = LocalSpan::enter_with_local_parent("inner");
                    black_box(i);
                }
            }
            left -= left.min(PER_ROOT / 2);
        }
    }
    /// No root span: fastrace's "off" (nothing collects).
    #[inline(never)]
    pub fn disabled(n: u64) {
        for i in 0..n {
            let _s = LocalSpan::enter_with_local_parent("scope");
            black_box(i);
        }
    }

    pub fn run(cfg: &Cfg) -> Peer {
        let mut p = Peer {
            name: "fastrace",
            ..Default::default()
        };
        fastrace::set_reporter(
            FileReporter,
            Config::default().report_interval(Duration::from_millis(10)),
        );
        if cfg.timing {
            p.disabled = Some(bench(cfg, disabled, || {}));
            p.scope = Some(bench(cfg, scope, fastrace::flush));
            p.scope_arg = Some(bench(cfg, scope_arg, fastrace::flush));
            p.two = Some(two_threads(cfg, || (), scope, fastrace::flush));
            p.notes.push(format!(
            "a root span per {PER_ROOT} local spans (its queue drops past 10,240 per root, uncounted); \
             disabled = no root span; int arg = `with_property(|| (\"i\", i.to_string()))`"
        ));
        }
        if cfg.file {
            // File.
            let path = out_path("peers-fastrace.json");
            let rss = reset_peak();
            fastrace::flush();
            *OUT.lock().unwrap() = Some(std::io::BufWriter::new(
                std::fs::File::create(&path).unwrap(),
            ));
            WRITE.store(true, Ordering::Relaxed);
            let before = RECEIVED.load(Ordering::Relaxed);
            nested(cfg.file_scopes);
            let t = Instant::now();
            fastrace::flush();
            if let Some(mut w) = OUT.lock().unwrap().take() {
                w.flush().unwrap();
            }
            let finish = t.elapsed();
            WRITE.store(false, Ordering::Relaxed);
            let got = RECEIVED.load(Ordering::Relaxed) - before;
            let roots = cfg.file_scopes.div_ceil(PER_ROOT);
            let expected = cfg.file_scopes + roots;
            p.file = Some(FileStats {
                format: "Chrome JSON X (own reporter)",
                bytes_per_scope: Some(file_len(&path) as f64 / cfg.file_scopes as f64),
                finish_ms: finish.as_secs_f64() * 1e3,
                peak_mib: (status_kib("VmHWM:").saturating_sub(rss)) as f64 / 1024.0,
                lost: format!(
                    "{} (not reported by fastrace: counted here)",
                    expected.saturating_sub(got)
                ),
            });
            // What one root with many spans does.
            let before = RECEIVED.load(Ordering::Relaxed);
            {
                let root = Span::root("root", SpanContext::random());
                let _g = root.set_local_parent();
                for i in 0..20_000u64 {
                    let _s = LocalSpan::enter_with_local_parent("scope");
                    black_box(i);
                }
            }
            fastrace::flush();
            let got = RECEIVED.load(Ordering::Relaxed) - before;
            p.notes.push(format!(
                "20,000 spans under one root: {} reached the reporter, {} silently dropped",
                got,
                20_001u64.saturating_sub(got)
            ));
        }
        p
    }
}

// ------------------------------------------------------------------ perfetto-recorder

mod pr {
    use super::*;
    use perfetto_recorder::{scope, ThreadTraceData, TraceBuilder};

    #[inline(never)]
    pub fn scope(n: u64) {
        for i in 0..n {
            scope!("scope");
            black_box(i);
        }
    }
    #[inline(never)]
    pub fn scope_arg(n: u64) {
        for i in 0..n {
            scope!("scope_arg", i = i);
            black_box(i);
        }
    }
    #[inline(never)]
    pub fn nested(n: u64) {
        for i in 0..n / 2 {
            scope!("outer");
            {
                scope!("inner");
                black_box(i);
            }
        }
    }

    fn discard() {
        drop(ThreadTraceData::take_current_thread());
    }

    pub fn run(cfg: &Cfg) -> Peer {
        let mut p = Peer {
            name: "perfetto-recorder",
            ..Default::default()
        };
        if cfg.timing {
            // Before start(): recording is off.
            p.disabled = Some(bench(cfg, scope, discard));
            perfetto_recorder::start().expect("perfetto-recorder built without `enable`");
            p.scope = Some(bench(cfg, scope, discard));
            p.scope_arg = Some(bench(cfg, scope_arg, discard));
            p.two = Some(two_threads(cfg, || (), scope, discard));
            p.notes.push(format!(
                "`fastant` feature {}; disabled = before `start()` (no way back)",
                if cfg!(feature = "recorder-fastant") {
                    "on (TSC clock)"
                } else {
                    "off (std Instant)"
                }
            ));
        }
        if cfg.file {
            let path = out_path("peers-perfetto-recorder.pftrace");
            let rss = reset_peak();
            perfetto_recorder::start().expect("perfetto-recorder built without `enable`");
            discard();
            nested(cfg.file_scopes);
            let t = Instant::now();
            TraceBuilder::new()
                .unwrap()
                .process_thread_data(&ThreadTraceData::take_current_thread())
                .write_to_file(&path)
                .unwrap();
            let finish = t.elapsed();
            let found = count_track_events(&std::fs::read(&path).unwrap_or_default());
            p.file = Some(FileStats {
                format: "Perfetto",
                bytes_per_scope: Some(file_len(&path) as f64 / cfg.file_scopes as f64),
                finish_ms: finish.as_secs_f64() * 1e3,
                peak_mib: (status_kib("VmHWM:").saturating_sub(rss)) as f64 / 1024.0,
                lost: format!(
                    "{} of {} events in the file (unbounded per-thread Vec)",
                    found,
                    2 * cfg.file_scopes
                ),
            });
        }
        p
    }
}

// ------------------------------------------------------------------ tracy

#[cfg(feature = "tracy")]
mod ty {
    use super::*;

    #[inline(never)]
    pub fn scope(n: u64) {
        for i in 0..n {
            let _s = tracy_client::span!("scope");
            black_box(i);
        }
    }
    #[inline(never)]
    pub fn scope_arg(n: u64) {
        for i in 0..n {
            let s = tracy_client::span!("scope_arg");
            s.emit_value(i);
            black_box(i);
        }
    }

    pub fn run(cfg: &Cfg) -> Peer {
        let mut p = Peer {
            name: "tracy-client",
            ..Default::default()
        };
        let _client = tracy_client::Client::start();
        p.scope = Some(bench(cfg, scope, || {}));
        p.scope_arg = Some(bench(cfg, scope_arg, || {}));
        p.two = Some(two_threads(cfg, || (), scope, || {}));
        p.notes.push(
            "no server connected: events queue in memory for one; no file, no run-time off switch"
                .into(),
        );
        p
    }
}

#[cfg(feature = "perfetto-sdk")]
mod gsdk;

// ------------------------------------------------------------------ report

fn cell(s: Option<Sample>, base: Option<Sample>) -> String {
    match (s, base) {
        (Some(s), Some(b)) => format!("{:.1} ({:.1}x)", s.median, s.median / b.median),
        (Some(s), None) => format!("{:.1}", s.median),
        (None, _) => "n/a".into(),
    }
}

/// The peers with a file measurement, by the key the child is run with.
const FILE_PEERS: &[&str] = &[
    "ringtrace",
    "puffin",
    "fastrace",
    "perfetto-recorder",
    #[cfg(feature = "perfetto-sdk")]
    "perfetto-sdk",
    "ringtrace-layer",
    "ringtrace-subscriber",
    "tracing-chrome",
    "tracing-perfetto",
    "tracing-perfetto-file",
    #[cfg(feature = "perfetto-sdk")]
    "tracing-perfetto-sdk",
];

fn run_peer(key: &str, cfg: &Cfg) -> Option<Peer> {
    Some(match key {
        "ringtrace" => rt::run(cfg),
        "puffin" => pf::run(cfg),
        "fastrace" => fr::run(cfg),
        "perfetto-recorder" => pr::run(cfg),
        #[cfg(feature = "tracy")]
        "tracy" => ty::run(cfg),
        #[cfg(feature = "perfetto-sdk")]
        "perfetto-sdk" => gsdk::native(cfg),
        "ringtrace-layer" => tr::ringtrace_layer(cfg),
        "ringtrace-subscriber" => tr::ringtrace_subscriber(cfg),
        "registry" => tr::registry_only(cfg),
        "registry-layer" => tr::registry_noop_layer(cfg),
        "tracing-chrome" => tr::chrome(cfg),
        "tracing-perfetto" => tr::perfetto(cfg),
        "tracing-perfetto-file" => tr::perfetto_file(cfg),
        #[cfg(feature = "perfetto-sdk")]
        "tracing-perfetto-sdk" => gsdk::layer(cfg),
        _ => return None,
    })
}

/// Runs `--file <key>` in a child process; returns its file stats and notes.
fn file_in_child(key: &str, quick: bool) -> (Option<FileStats>, Vec<String>) {
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args(["--file", key]);
    if quick {
        cmd.env("PEERS_QUICK", "1");
    }
    let out = match cmd.output() {
        Ok(o) => o,
        Err(e) => return (None, vec![format!("file run failed: {e}")]),
    };
    let mut stats = None;
    let mut notes = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let f: Vec<&str> = line.split('\t').collect();
        match f.as_slice() {
            ["FILE", format, bps, finish, peak, lost] => {
                stats = Some(FileStats {
                    format: Box::leak(format.to_string().into_boxed_str()),
                    bytes_per_scope: bps.parse().ok(),
                    finish_ms: finish.parse().unwrap_or(f64::NAN),
                    peak_mib: peak.parse().unwrap_or(f64::NAN),
                    lost: lost.to_string(),
                })
            }
            ["NOTE", n] => notes.push(n.to_string()),
            _ => {}
        }
    }
    if stats.is_none() {
        notes.push(format!(
            "file run failed: {}",
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("")
        ));
    }
    (stats, notes)
}

fn main() {
    let quick = std::env::var_os("PEERS_QUICK").is_some();
    let args: Vec<String> = std::env::args().collect();
    let child = args.get(1).map(String::as_str) == Some("--file");
    let cfg = Cfg {
        timing: !child,
        file: child,
        reps: if quick { 3 } else { 11 },
        rep_time: Duration::from_millis(if quick { 2 } else { 6 }),
        file_scopes: if quick { 20_000 } else { 200_000 },
    };
    if child {
        let key = args.get(2).map(String::as_str).unwrap_or("");
        if key == "none" {
            let kib = status_kib("VmHWM:");
            println!("FILE\tnone\tn/a\t0\t{:.1}\t-", kib as f64 / 1024.0);
            return;
        }
        let p = run_peer(key, &cfg).expect("unknown peer");
        if let Some(f) = &p.file {
            println!(
                "FILE\t{}\t{}\t{:.2}\t{:.1}\t{}",
                f.format,
                f.bytes_per_scope
                    .map_or("n/a".to_string(), |b| format!("{b:.1}")),
                f.finish_ms,
                status_kib("VmHWM:") as f64 / 1024.0,
                f.lost
            );
        }
        for n in &p.notes {
            println!("NOTE\t{n}");
        }
        return;
    }
    let started = Instant::now();
    // The clock floor, measured before and after the peers: the lower of the
    // two medians (a busy neighbour inflates one of them now and then).
    let floor_before = bench(&cfg, two_rdtsc, || {});
    let mut keys = vec!["ringtrace", "puffin", "fastrace", "perfetto-recorder"];
    #[cfg(feature = "tracy")]
    keys.push("tracy");
    #[cfg(feature = "perfetto-sdk")]
    keys.push("perfetto-sdk");
    keys.extend([
        "ringtrace-layer",
        "ringtrace-subscriber",
        "registry",
        "registry-layer",
        "tracing-chrome",
        "tracing-perfetto",
        "tracing-perfetto-file",
    ]);
    #[cfg(feature = "perfetto-sdk")]
    keys.push("tracing-perfetto-sdk");
    // PEERS_ONLY=ringtrace,puffin: a subset (ringtrace and its layer stay,
    // as the ratios' base).
    if let Ok(only) = std::env::var("PEERS_ONLY") {
        let only: Vec<&str> = only.split(',').collect();
        keys.retain(|k| k.starts_with("ringtrace") || only.contains(k));
    }
    let mut peers = Vec::new();
    for key in &keys {
        let mut p = run_peer(key, &cfg).unwrap();
        if FILE_PEERS.contains(key) {
            let (f, notes) = file_in_child(key, quick);
            p.file = f;
            p.notes.extend(notes);
        }
        peers.push(p);
    }
    // A child that does nothing: the baseline of the peak RSS column.
    let baseline = file_in_child("none", quick)
        .0
        .map_or(f64::NAN, |f| f.peak_mib);

    let floor_after = bench(&cfg, two_rdtsc, || {});
    let floor = if floor_after.median < floor_before.median {
        floor_after
    } else {
        floor_before
    };
    let base = |layer: bool| {
        peers
            .iter()
            .find(|p| p.tracing_layer == layer && p.name.starts_with("ringtrace"))
            // (the layer: the base of the other layers)
            .map(|p| {
                (
                    p.scope,
                    p.scope_arg,
                    p.disabled,
                    p.two,
                    p.enter_exit,
                    p.event,
                )
            })
            .unwrap()
    };
    println!();
    println!("## ringtrace vs peers ({})", machine());
    println!();
    println!(
        "Median ns per scope (begin + end) over {} repetitions; in parentheses the ratio to \
         ringtrace (native API rows: to `trace_scope!`; tracing layers: to ringtrace's layer). \
         Clock floor (two rdtsc): {:.1} ns.",
        cfg.reps, floor.median
    );
    println!();
    println!("| peer | scope, static name | one int arg | disabled | 2 threads (per thread) | tracing: enter/exit existing span | tracing: event |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    for p in &peers {
        let b = base(p.tracing_layer);
        println!(
            "| {} | {} | {} | {} | {} | {} | {} |",
            p.name,
            cell(p.scope, b.0),
            cell(p.scope_arg, b.1),
            cell(p.disabled, b.2),
            cell(p.two, b.3),
            cell(p.enter_exit, b.4),
            cell(p.event, b.5),
        );
    }
    println!();
    println!(
        "CPU of every thread per scope (or span, or event), ns: the whole process's CPU time over \
         a repetition and the untimed drain after it (a tracer's background thread included), \
         median of the repetitions; in parentheses the ratio as above."
    );
    println!();
    println!("| peer | scope, static name | one int arg | tracing: enter/exit existing span | tracing: event |");
    println!("| --- | ---: | ---: | ---: | ---: |");
    let cpu_cell = |s: Option<Sample>, b: Option<Sample>| match (s, b) {
        (Some(s), Some(b)) => format!("{:.1} ({:.1}x)", s.cpu, s.cpu / b.cpu),
        (Some(s), None) => format!("{:.1}", s.cpu),
        (None, _) => "n/a".into(),
    };
    for p in &peers {
        let b = base(p.tracing_layer);
        println!(
            "| {} | {} | {} | {} | {} |",
            p.name,
            cpu_cell(p.scope, b.0),
            cpu_cell(p.scope_arg, b.1),
            cpu_cell(p.enter_exit, b.4),
            cpu_cell(p.event, b.5),
        );
    }
    println!();
    let sub = peers.iter().find(|p| p.name == "ringtrace subscriber");
    if let Some(sub) = sub {
        println!(
            "Through `tracing`, each peer against ringtrace's subscriber (no registry): \
             ratio of medians."
        );
        println!();
        println!("| peer | span life | one int arg | 2 threads | enter/exit | event |");
        println!("| --- | ---: | ---: | ---: | ---: | ---: |");
        let r = |a: Option<Sample>, b: Option<Sample>| match (a, b) {
            (Some(a), Some(b)) => format!("{:.1}x", a.median / b.median),
            _ => "n/a".into(),
        };
        for p in peers.iter().filter(|p| p.tracing_layer) {
            println!(
                "| {} | {} | {} | {} | {} | {} |",
                p.name,
                r(p.scope, sub.scope),
                r(p.scope_arg, sub.scope_arg),
                r(p.two, sub.two),
                r(p.enter_exit, sub.enter_exit),
                r(p.event, sub.event),
            );
        }
        println!();
    }
    println!(
        "Tracing layers: a scope is `info_span!(..).entered()` dropped (new span, enter, exit, \
         close); disabled is a `trace_span!` under an INFO filter."
    );
    println!();
    println!(
        "Files: {} nested scopes (two levels) written back to back, then the file finished; \
         each peer in a child process of its own (peak RSS is that process's VmHWM; the same \
         process doing nothing peaks at {:.1} MiB).",
        cfg.file_scopes, baseline
    );
    println!();
    println!("| peer | format | bytes/scope | finish the file | peak RSS (whole process) | events lost |");
    println!("| --- | --- | ---: | ---: | ---: | --- |");
    for p in &peers {
        match &p.file {
            Some(f) => println!(
                "| {} | {} | {} | {:.1} ms | {:.1} MiB | {} |",
                p.name,
                f.format,
                f.bytes_per_scope
                    .map_or("n/a".to_string(), |b| format!("{b:.1}")),
                f.finish_ms,
                f.peak_mib,
                f.lost
            ),
            None => println!("| {} | none | n/a | n/a | n/a | n/a |", p.name),
        }
    }
    println!();
    for p in &peers {
        for n in &p.notes {
            println!("- {}: {}", p.name, n);
        }
    }
    println!();
    println!("Total: {:.1} s", started.elapsed().as_secs_f64());
}
