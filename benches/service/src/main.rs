//! What tracing costs a real service: an axum server instrumented the way
//! services usually are (tower-http's `TraceLayer`, `#[tracing::instrument]`
//! handlers that open a nested span and log an event), under keep-alive
//! HTTP/1.1 load on loopback, in every mode, interleaved, repeated.
//!
//! `cargo run --release` (in `benches/service/`). Each repetition runs every
//! mode once, each in a child process of its own (one global `tracing`
//! dispatcher, one ringtrace session, its own threads), in an order rotated
//! from one repetition to the next. Prints a Markdown table of medians.
//!
//! Environment: `SERVICE_REPS` (default 5), `SERVICE_REQUESTS` measured
//! requests per run (default 20000), `SERVICE_CONNS` client connections
//! (default 8), `SERVICE_MODES` a comma-separated subset (untraced always
//! runs: it is the base of the ratios), `SERVICE_DIR` for the trace files
//! (default: the system temp directory; each is deleted once measured,
//! unless `SERVICE_KEEP=1`).
//! The `-10`, `-1` and `-0` modes sample whole requests (`sample_ratio`: 10%, 1%, none kept).
//! `perfetto-file` is tracing-perfetto-file's layer on the registry with
//! fields written as debug annotations (its fullest recording: by default a
//! span is one slice, creation to close, on a track of its own, and its
//! enters and exits write nothing; `perfetto-file-threads` writes a slice
//! per enter on the thread's track instead, as ringtrace does); it has no
//! background thread: each worker encodes into a queue of its own and writes
//! the file itself when the queue fills (the flushes around the measured
//! requests write the rest from the main thread).
//! `--modes` prints every mode's key, one a line; `--child MODE` runs one.
//!
//! Instructions instead of time: `./instructions.sh` runs every mode as a
//! child under callgrind (`--separate-threads=yes`) at 6000 and 2000
//! requests and prints, per request, the instructions of the workers, of the
//! background thread and of every thread, against untraced (see the script's
//! head for its settings).
//! The OTLP modes (`layer-otlp`, `otlp`, `otel`, `fastrace`, each also `-1`: 1% kept) are
//! in `otel.rs`; they run only when `SERVICE_MODES` names them.
//!
//! What is measured, per run: wall time of the measured requests (after a
//! warm-up), and the CPU time each thread of the process spent meanwhile
//! (the kernel's per-thread CPU clock, read for every task listed in
//! `/proc/self/task`): the runtime's two workers (where spans and events are
//! recorded), the background thread of the tracer (ringtrace's flusher,
//! tracing-chrome's writer), and the load client (the main thread, reported
//! apart: it is not the service). Before the second reading the tracer is
//! made to write out everything recorded (`ringtrace::flush()`; for the
//! others, the background thread is waited on until it is idle), so the
//! background column covers every request. Bytes per request are the trace
//! file's size over all requests; events lost come from ringtrace's `Stats`.
//! Both "vs untraced" columns (requests/s, and the service's CPU per request:
//! workers plus background) are medians of ratios to the untraced run of the
//! same repetition.

// The workspace's bench helpers (`benches/common/`).
#[path = "../../common/mod.rs"]
mod common;
// The OTLP modes (ringtrace's exporter against its peers): `otel.rs`.
mod otel;

use common::{machine, median};
use std::collections::HashMap;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Path, State};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tracing_subscriber::prelude::*;

// ------------------------------------------------------------------ the service

#[derive(Serialize, Clone)]
struct User {
    id: u64,
    name: String,
    email: String,
    orders: u32,
}

#[derive(Deserialize)]
struct NewOrder {
    user: u64,
    items: Vec<Item>,
}

#[derive(Deserialize)]
struct Item {
    sku: String,
    qty: u32,
    cents: u64,
}

#[derive(Serialize)]
struct Receipt {
    order: u64,
    user: u64,
    total_cents: u64,
    lines: usize,
}

struct Store {
    users: std::sync::RwLock<HashMap<u64, User>>,
    next_order: AtomicU64,
}

type AppState = Arc<Store>;

#[tracing::instrument(skip(store))]
async fn get_user(
    State(store): State<AppState>,
    Path(id): Path<u64>,
) -> Result<Json<User>, axum::http::StatusCode> {
    match load_user(&store, id) {
        Some(u) => Ok(Json(u)),
        None => Err(axum::http::StatusCode::NOT_FOUND),
    }
}

#[tracing::instrument(skip(store), level = "debug")]
fn load_user(store: &Store, id: u64) -> Option<User> {
    let user = store.users.read().unwrap().get(&id).cloned();
    tracing::info!(user_id = id, found = user.is_some(), "user loaded");
    user
}

#[tracing::instrument(skip(store, order), fields(user = order.user, items = order.items.len()))]
async fn create_order(
    State(store): State<AppState>,
    Json(order): Json<NewOrder>,
) -> Result<Json<Receipt>, axum::http::StatusCode> {
    let total = price(&order).ok_or(axum::http::StatusCode::UNPROCESSABLE_ENTITY)?;
    let id = store.next_order.fetch_add(1, Ordering::Relaxed);
    if let Some(u) = store.users.write().unwrap().get_mut(&order.user) {
        u.orders += 1;
    }
    Ok(Json(Receipt {
        order: id,
        user: order.user,
        total_cents: total,
        lines: order.items.len(),
    }))
}

#[tracing::instrument(skip(order), level = "debug")]
fn price(order: &NewOrder) -> Option<u64> {
    let mut total = 0u64;
    for item in &order.items {
        if item.sku.is_empty() || item.qty == 0 {
            tracing::warn!(sku = %item.sku, "rejected line");
            return None;
        }
        total = total.checked_add(item.cents.checked_mul(item.qty as u64)?)?;
    }
    tracing::info!(
        total_cents = total,
        lines = order.items.len(),
        "order priced"
    );
    Some(total)
}

fn app() -> Router {
    let mut users = HashMap::new();
    for id in 0..1000u64 {
        users.insert(
            id,
            User {
                id,
                name: format!("user {id}"),
                email: format!("user{id}@example.com"),
                orders: 0,
            },
        );
    }
    let store = Arc::new(Store {
        users: std::sync::RwLock::new(users),
        next_order: AtomicU64::new(1),
    });
    Router::new()
        .route("/users/{id}", get(get_user))
        .route("/orders", post(create_order))
        .layer(tower_http::trace::TraceLayer::new_for_http())
        .with_state(store)
}

// ------------------------------------------------------------------ the load client

/// Keep-alive HTTP/1.1 requests from `conns` connections until `total`
/// responses have come back (or `deadline` passes). Returns the responses.
async fn load(addr: std::net::SocketAddr, conns: usize, total: u64, deadline: Duration) -> u64 {
    let issued = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let until = Instant::now() + deadline;
    let mut tasks = Vec::new();
    for c in 0..conns {
        let (issued, done) = (issued.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
            s.set_nodelay(true).unwrap();
            let mut buf = Vec::with_capacity(4096);
            let mut req = Vec::with_capacity(512);
            loop {
                let n = issued.fetch_add(1, Ordering::Relaxed);
                if n >= total || Instant::now() >= until {
                    break;
                }
                req.clear();
                if n % 2 == 0 {
                    write!(req, "GET /users/{} HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n", (n * 7 + c as u64) % 1000).unwrap();
                } else {
                    let body = format!(
                        r#"{{"user":{},"items":[{{"sku":"A-{}","qty":2,"cents":1250}},{{"sku":"B-7","qty":1,"cents":399}}]}}"#,
                        n % 1000,
                        n % 97
                    );
                    write!(
                        req,
                        "POST /orders HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                        body.len()
                    )
                    .unwrap();
                }
                s.write_all(&req).await.expect("send");
                read_response(&mut s, &mut buf).await;
                done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    done.load(Ordering::Relaxed)
}

/// Reads one response (headers, then `content-length` bytes of body) and
/// checks its status is 200.
async fn read_response(s: &mut tokio::net::TcpStream, buf: &mut Vec<u8>) {
    buf.clear();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
        let n = s.read(&mut chunk).await.expect("read");
        assert!(n > 0, "server closed the connection");
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = std::str::from_utf8(&buf[..head_end]).expect("ascii head");
    assert!(
        head.starts_with("HTTP/1.1 200"),
        "unexpected response: {head}"
    );
    let len: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .expect("content-length");
    while buf.len() < head_end + len {
        let n = s.read(&mut chunk).await.expect("read body");
        assert!(n > 0, "server closed the connection");
        buf.extend_from_slice(&chunk[..n]);
    }
}

// ------------------------------------------------------------------ CPU per thread

/// CPU time of every thread of this process, by tid, with its name.
fn thread_cpu() -> HashMap<i32, (String, u64)> {
    let mut out = HashMap::new();
    for e in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let Ok(tid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let name = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        // The kernel's CPU clock of thread `tid`: CPUCLOCK_SCHED (2) with the
        // per-thread bit (4), the tid complemented in the upper bits.
        let clock = ((!tid) << 3) | 6;
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec for the call to fill.
        if unsafe { libc::clock_gettime(clock as libc::clockid_t, &mut ts) } == 0 {
            let ns = ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64;
            out.insert(tid, (name.trim().to_string(), ns));
        }
    }
    out
}

#[derive(Default, Clone, Copy, Debug)]
struct Cpu {
    workers: u64,
    background: u64,
    client: u64,
}

fn cpu_between(a: &HashMap<i32, (String, u64)>, b: &HashMap<i32, (String, u64)>) -> Cpu {
    let main = std::process::id() as i32;
    let mut c = Cpu::default();
    for (tid, (name, ns)) in b {
        let d = ns.saturating_sub(a.get(tid).map_or(0, |x| x.1));
        if *tid == main {
            c.client += d;
        } else if name.starts_with("svc-worker") {
            c.workers += d;
        } else {
            c.background += d;
        }
    }
    c
}

fn background_ns(s: &HashMap<i32, (String, u64)>) -> u64 {
    let main = std::process::id() as i32;
    s.iter()
        .filter(|(t, (n, _))| **t != main && !n.starts_with("svc-worker"))
        .map(|(_, (_, ns))| ns)
        .sum()
}

// ------------------------------------------------------------------ modes

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Untraced,
    Registry,
    Subscriber,
    Layer,
    Json,
    Chrome,
    SubscriberOff,
    LayerOff,
    NoopSubscriber,
    NoopLayer,
    /// A subscriber that reads every field and formats every `Debug` and
    /// `Display` value, and keeps nothing.
    FieldsSubscriber,
    /// Whole-request sampling: one request in ten, in a hundred, none.
    Subscriber10,
    Subscriber1,
    Subscriber0,
    Layer10,
    Layer1,
    Layer0,
    /// `span_slices(SpanSlices::Lifetime)`: a span is one slice, creation
    /// to close, on a track of its own (what tracing-perfetto-file's
    /// default writes).
    SubscriberLifetime,
    LayerLifetime,
    /// tracing-perfetto-file's layer on the registry, fields written as
    /// debug annotations.
    PerfettoFile,
    /// The same with `SpanMode::ThreadTracks`: a slice per enter on the
    /// thread's track, as ringtrace records spans (its default,
    /// `SpanTracks`, writes one slice per span, creation to close, on a
    /// track of the span's own, and nothing at enters and exits).
    PerfettoFileThreads,
    /// The OTLP modes (`otel.rs`).
    Ext(otel::Ext),
}

const MODES: [Mode; 21] = [
    Mode::Untraced,
    Mode::Registry,
    Mode::Subscriber,
    Mode::Layer,
    Mode::Json,
    Mode::Chrome,
    Mode::SubscriberOff,
    Mode::LayerOff,
    Mode::NoopSubscriber,
    Mode::NoopLayer,
    Mode::FieldsSubscriber,
    Mode::Subscriber10,
    Mode::Subscriber1,
    Mode::Subscriber0,
    Mode::Layer10,
    Mode::Layer1,
    Mode::Layer0,
    Mode::PerfettoFile,
    Mode::PerfettoFileThreads,
    Mode::SubscriberLifetime,
    Mode::LayerLifetime,
];

impl Mode {
    fn key(self) -> &'static str {
        match self {
            Mode::Untraced => "untraced",
            Mode::Registry => "registry",
            Mode::Subscriber => "subscriber",
            Mode::Layer => "layer",
            Mode::Json => "json",
            Mode::Chrome => "chrome",
            Mode::SubscriberOff => "subscriber-off",
            Mode::LayerOff => "layer-off",
            Mode::NoopSubscriber => "noop-subscriber",
            Mode::NoopLayer => "noop-layer",
            Mode::FieldsSubscriber => "fields-subscriber",
            Mode::Subscriber10 => "subscriber-10",
            Mode::Subscriber1 => "subscriber-1",
            Mode::Subscriber0 => "subscriber-0",
            Mode::Layer10 => "layer-10",
            Mode::Layer1 => "layer-1",
            Mode::Layer0 => "layer-0",
            Mode::PerfettoFile => "perfetto-file",
            Mode::PerfettoFileThreads => "perfetto-file-threads",
            Mode::SubscriberLifetime => "subscriber-lifetime",
            Mode::LayerLifetime => "layer-lifetime",
            Mode::Ext(e) => e.key(),
        }
    }

    fn label(self) -> &'static str {
        match self {
            Mode::Untraced => "untraced",
            Mode::Registry => "`tracing` registry, no layer",
            Mode::Subscriber => "ringtrace `subscriber()`, Perfetto",
            Mode::Layer => "ringtrace `layer()`, Perfetto",
            Mode::Json => "ringtrace `subscriber()`, JSON",
            Mode::Chrome => "tracing-chrome",
            Mode::SubscriberOff => "ringtrace `subscriber()`, every category off",
            Mode::LayerOff => "ringtrace `layer()`, every category off",
            Mode::NoopSubscriber => "(floor) a subscriber that does nothing",
            Mode::NoopLayer => "(floor) registry + a layer that does nothing",
            Mode::FieldsSubscriber => {
                "(floor) a subscriber that formats every field, keeps nothing"
            }
            Mode::Subscriber10 => "ringtrace `subscriber()`, Perfetto, 10% of requests kept",
            Mode::Subscriber1 => "ringtrace `subscriber()`, Perfetto, 1% of requests kept",
            Mode::Subscriber0 => "ringtrace `subscriber()`, Perfetto, no request kept",
            Mode::Layer10 => "ringtrace `layer()`, Perfetto, 10% of requests kept",
            Mode::Layer1 => "ringtrace `layer()`, Perfetto, 1% of requests kept",
            Mode::Layer0 => "ringtrace `layer()`, Perfetto, no request kept",
            Mode::PerfettoFile => "tracing-perfetto-file, debug annotations",
            Mode::SubscriberLifetime => "ringtrace `subscriber()`, Perfetto, a slice per span",
            Mode::LayerLifetime => "ringtrace `layer()`, Perfetto, a slice per span",
            Mode::PerfettoFileThreads => {
                "tracing-perfetto-file, debug annotations, a slice per enter (`ThreadTracks`)"
            }
            Mode::Ext(e) => e.label(),
        }
    }

    /// The share of requests kept (whole-request sampling), if sampled.
    fn ratio(self) -> Option<f64> {
        match self {
            Mode::Subscriber10 | Mode::Layer10 => Some(0.1),
            Mode::Subscriber1 | Mode::Layer1 => Some(0.01),
            Mode::Subscriber0 | Mode::Layer0 => Some(0.0),
            _ => None,
        }
    }

    fn from_key(k: &str) -> Option<Mode> {
        MODES
            .into_iter()
            .find(|m| m.key() == k)
            .or_else(|| otel::Ext::from_key(k).map(Mode::Ext))
    }
}

/// The floor of any `tracing` subscriber on this service: every call site
/// enabled, span ids handed out, nothing stored or recorded. What remains is
/// `tracing`'s own work in the instrumented code (building field sets and
/// events, the dispatch of each callback). With `formats`, the floor of any
/// subscriber that records every field: each span's and event's values
/// read, `Debug` and `Display` ones formatted (into a thread's reused
/// buffer, then dropped); above it is what recording and writing them
/// costs.
#[derive(Default)]
struct FloorSubscriber {
    next: AtomicU64,
    formats: bool,
}

impl tracing::Subscriber for FloorSubscriber {
    fn register_callsite(
        &self,
        _: &'static tracing::Metadata<'static>,
    ) -> tracing::subscriber::Interest {
        tracing::subscriber::Interest::always()
    }
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, attrs: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        if self.formats {
            read_fields(|v| attrs.record(v));
        }
        tracing::span::Id::from_u64(self.next.fetch_add(1, Ordering::Relaxed) + 1)
    }
    fn record(&self, _: &tracing::span::Id, values: &tracing::span::Record<'_>) {
        if self.formats {
            read_fields(|v| values.record(v));
        }
    }
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        if self.formats {
            read_fields(|v| event.record(v));
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// Reads every value: primitives through a `black_box`, text formatted.
struct ReadFields<'a>(&'a mut String);

impl tracing::field::Visit for ReadFields<'_> {
    fn record_debug(&mut self, _: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        use std::fmt::Write;
        self.0.clear();
        let _ = write!(self.0, "{value:?}");
        std::hint::black_box(&self.0);
    }
    fn record_str(&mut self, _: &tracing::field::Field, value: &str) {
        std::hint::black_box(value);
    }
    fn record_u64(&mut self, _: &tracing::field::Field, value: u64) {
        std::hint::black_box(value);
    }
    fn record_i64(&mut self, _: &tracing::field::Field, value: i64) {
        std::hint::black_box(value);
    }
    fn record_bool(&mut self, _: &tracing::field::Field, value: bool) {
        std::hint::black_box(value);
    }
    fn record_f64(&mut self, _: &tracing::field::Field, value: f64) {
        std::hint::black_box(value);
    }
}

thread_local! {
    static FIELD_TEXT: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

fn read_fields(record: impl FnOnce(&mut ReadFields<'_>)) {
    FIELD_TEXT.with(|t| record(&mut ReadFields(&mut t.borrow_mut())));
}

/// The floor of any layer on the registry: a layer with no callbacks of its
/// own (the registry's span slab, its per-layer dispatch and close guard).
struct NoopLayer;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for NoopLayer {}

/// What keeps the tracer alive until the end of the run.
enum Tracer {
    None,
    Ringtrace(ringtrace::TraceGuard),
    Chrome(tracing_chrome::FlushGuard),
    PerfettoFile(tracing_perfetto_file::FlushGuard),
    Ext(otel::Guard),
}

fn install(mode: Mode, path: &std::path::Path) -> Tracer {
    let ring = 8 << 20;
    match mode {
        Mode::Untraced => Tracer::None,
        Mode::Registry => {
            tracing_subscriber::registry().init();
            Tracer::None
        }
        Mode::Subscriber
        | Mode::Json
        | Mode::SubscriberOff
        | Mode::Subscriber10
        | Mode::Subscriber1
        | Mode::Subscriber0
        | Mode::SubscriberLifetime => {
            let mut b = ringtrace::builder()
                .output(path)
                .buffer_bytes_per_thread(ring);
            if mode == Mode::SubscriberLifetime {
                b = b.span_slices(ringtrace::SpanSlices::Lifetime);
            }
            if mode == Mode::SubscriberOff {
                b = b.disable_categories(["*"]);
            }
            if let Some(ratio) = mode.ratio() {
                b = b.sample_ratio(ratio);
            }
            let (sub, guard) = b.subscriber().expect("ringtrace session");
            tracing::subscriber::set_global_default(sub).unwrap();
            Tracer::Ringtrace(guard)
        }
        Mode::Layer
        | Mode::LayerOff
        | Mode::Layer10
        | Mode::Layer1
        | Mode::Layer0
        | Mode::LayerLifetime => {
            let mut b = ringtrace::builder()
                .output(path)
                .buffer_bytes_per_thread(ring);
            if mode == Mode::LayerLifetime {
                b = b.span_slices(ringtrace::SpanSlices::Lifetime);
            }
            if mode == Mode::LayerOff {
                b = b.disable_categories(["*"]);
            }
            if let Some(ratio) = mode.ratio() {
                b = b.sample_ratio(ratio);
            }
            let (layer, guard) = b.layer().expect("ringtrace session");
            tracing_subscriber::registry().with(layer).init();
            Tracer::Ringtrace(guard)
        }
        Mode::NoopSubscriber => {
            tracing::subscriber::set_global_default(FloorSubscriber::default()).unwrap();
            Tracer::None
        }
        Mode::NoopLayer => {
            tracing_subscriber::registry().with(NoopLayer).init();
            Tracer::None
        }
        Mode::FieldsSubscriber => {
            let floor = FloorSubscriber {
                formats: true,
                ..FloorSubscriber::default()
            };
            tracing::subscriber::set_global_default(floor).unwrap();
            Tracer::None
        }
        Mode::Chrome => {
            let (layer, flush) = tracing_chrome::ChromeLayerBuilder::new()
                .file(path)
                .include_args(true)
                .build();
            tracing_subscriber::registry().with(layer).init();
            Tracer::Chrome(flush)
        }
        Mode::PerfettoFile | Mode::PerfettoFileThreads => {
            let file = std::fs::File::create(path).expect("tracing-perfetto-file's trace file");
            let mut builder =
                tracing_perfetto_file::PerfettoLayer::builder(file).with_debug_annotations();
            if mode == Mode::PerfettoFileThreads {
                builder = builder.span_mode(tracing_perfetto_file::SpanMode::ThreadTracks);
            }
            let (layer, flush) = builder.build();
            tracing_subscriber::registry().with(layer).init();
            Tracer::PerfettoFile(flush)
        }
        Mode::Ext(e) => Tracer::Ext(otel::install(e, path)),
    }
}

struct RunResult {
    rps: f64,
    cpu: Cpu,
    requests: u64,
    bytes: u64,
    events: u64,
    lost: u64,
}

fn child(mode: Mode, requests: u64, conns: usize, dir: PathBuf) {
    let ext = if matches!(mode, Mode::Json | Mode::Chrome) {
        "json"
    } else {
        "pftrace"
    };
    let path = dir.join(format!("ringtrace-service-{}.{ext}", mode.key()));
    let tracer = install(mode, &path);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("svc-worker")
        .enable_all()
        .build()
        .unwrap();
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    rt.spawn(async move { axum::serve(listener, app()).await.unwrap() });

    let client = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let warmup = (requests / 10).max(500);
    let got = client.block_on(load(addr, conns, warmup, Duration::from_secs(60)));
    assert_eq!(got, warmup, "warm-up incomplete");
    settle(&tracer);

    let before = thread_cpu();
    let t = Instant::now();
    let got = client.block_on(load(addr, conns, requests, Duration::from_secs(60)));
    let wall = t.elapsed();
    settle(&tracer);
    let after = thread_cpu();
    let cpu = cpu_between(&before, &after);

    drop(rt);
    let (events, lost) = match tracer {
        Tracer::Ringtrace(g) => {
            let s = g.stop().expect("stop");
            (s.events_written, s.events_lost)
        }
        Tracer::Chrome(f) => {
            drop(f);
            (0, 0)
        }
        Tracer::PerfettoFile(f) => {
            f.flush().expect("tracing-perfetto-file's flush");
            (0, 0)
        }
        Tracer::Ext(g) => otel::stop(g, &before, &after),
        Tracer::None => (0, 0),
    };
    let bytes = std::fs::metadata(&path).map_or(0, |m| m.len());
    if std::env::var_os("SERVICE_KEEP").is_none_or(|v| v != "1") {
        let _ = std::fs::remove_file(&path);
    }
    let all = warmup + got;
    println!(
        "RESULT rps={} workers={} background={} client={} requests={} bytes={} events={} lost={}",
        got as f64 / wall.as_secs_f64(),
        cpu.workers,
        cpu.background,
        cpu.client,
        got,
        bytes as f64 / all as f64,
        events as f64 / all as f64,
        lost
    );
}

/// Waits until the tracer has written what was recorded: ringtrace's flush,
/// then (for every mode) until the background threads stop using CPU.
fn settle(tracer: &Tracer) {
    match tracer {
        Tracer::Ringtrace(g) => g.flush(),
        // Writes what the threads' queues hold (on this thread).
        Tracer::PerfettoFile(f) => f.flush().expect("tracing-perfetto-file's flush"),
        Tracer::Ext(g) => otel::flush(g),
        Tracer::None | Tracer::Chrome(_) => {}
    }
    let mut last = background_ns(&thread_cpu());
    for _ in 0..100 {
        std::thread::sleep(Duration::from_millis(20));
        let now = background_ns(&thread_cpu());
        if now - last < 200_000 {
            break;
        }
        last = now;
    }
}

fn parse_result(line: &str) -> Option<RunResult> {
    let rest = line.strip_prefix("RESULT ")?;
    let kv: HashMap<&str, f64> = rest
        .split_whitespace()
        .filter_map(|p| p.split_once('='))
        .filter_map(|(k, v)| Some((k, v.parse().ok()?)))
        .collect();
    Some(RunResult {
        rps: kv["rps"],
        cpu: Cpu {
            workers: kv["workers"] as u64,
            background: kv["background"] as u64,
            client: kv["client"] as u64,
        },
        requests: kv["requests"] as u64,
        bytes: (kv["bytes"] * 1000.0) as u64,
        events: (kv["events"] * 1000.0) as u64,
        lost: kv["lost"] as u64,
    })
}

fn env_num(key: &str, default: u64) -> u64 {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if otel::sink_main(&args) {
        return;
    }
    let requests = env_num("SERVICE_REQUESTS", 20_000);
    let conns = env_num("SERVICE_CONNS", 8) as usize;
    let dir = std::env::var_os("SERVICE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    if args.len() == 2 && args[1] == "--modes" {
        for m in MODES {
            println!("{}", m.key());
        }
        return;
    }
    if args.len() == 3 && args[1] == "--child" {
        let mode = Mode::from_key(&args[2]).expect("mode");
        child(mode, requests, conns, dir);
        return;
    }
    let reps = env_num("SERVICE_REPS", 5) as usize;
    let modes: Vec<Mode> = match std::env::var("SERVICE_MODES") {
        Ok(list) => {
            let mut m = vec![Mode::Untraced];
            m.extend(
                list.split(',')
                    .filter_map(|k| Mode::from_key(k.trim()))
                    .filter(|m| *m != Mode::Untraced),
            );
            m
        }
        Err(_) => MODES.to_vec(),
    };
    eprintln!(
        "{} modes x {reps} repetitions, {requests} requests from {conns} connections each ({})",
        modes.len(),
        machine()
    );
    let exe = std::env::current_exe().unwrap();
    // results[mode] = one per repetition
    let mut results: Vec<Vec<RunResult>> = modes.iter().map(|_| Vec::new()).collect();
    // ratio to the untraced run of the same repetition: requests/s, and the
    // service's CPU per request (all its threads)
    let mut ratios: Vec<Vec<f64>> = modes.iter().map(|_| Vec::new()).collect();
    let mut cpu_ratios: Vec<Vec<f64>> = modes.iter().map(|_| Vec::new()).collect();
    for rep in 0..reps {
        let mut rps = vec![f64::NAN; modes.len()];
        let mut cpu = vec![f64::NAN; modes.len()];
        for k in 0..modes.len() {
            let i = (k + rep) % modes.len();
            let out = Command::new(&exe)
                .args(["--child", modes[i].key()])
                .output()
                .expect("run child");
            let text = String::from_utf8_lossy(&out.stdout);
            otel::note(modes[i].key(), &text);
            let Some(r) = text.lines().find_map(parse_result) else {
                eprintln!(
                    "{} failed: {}",
                    modes[i].key(),
                    String::from_utf8_lossy(&out.stderr)
                );
                std::process::exit(1);
            };
            eprintln!(
                "rep {rep} {:>15}: {:>8.0} req/s, workers {:.1} us/req, background {:.1} us/req",
                modes[i].key(),
                r.rps,
                r.cpu.workers as f64 / r.requests as f64 / 1e3,
                r.cpu.background as f64 / r.requests as f64 / 1e3
            );
            rps[i] = r.rps;
            cpu[i] = (r.cpu.workers + r.cpu.background) as f64 / r.requests as f64;
            results[i].push(r);
        }
        for i in 0..modes.len() {
            ratios[i].push(rps[i] / rps[0] - 1.0);
            cpu_ratios[i].push(cpu[i] / cpu[0] - 1.0);
        }
    }
    println!(
        "\n{} repetitions; medians. {requests} requests per run from {conns} keep-alive connections; {}\n",
        reps,
        machine()
    );
    println!("| mode | requests/s | vs untraced | CPU µs/request: workers | background | service total | vs untraced | load client | bytes/request | events/request | events lost |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for (i, m) in modes.iter().enumerate() {
        let rs = &results[i];
        let med = |f: &dyn Fn(&RunResult) -> f64| median(&mut rs.iter().map(f).collect::<Vec<_>>());
        let per = |ns: u64, r: &RunResult| ns as f64 / r.requests as f64 / 1e3;
        let (vs, cpu_vs) = if i == 0 {
            (String::new(), String::new())
        } else {
            (
                format!("{:+.1}%", median(&mut ratios[i].clone()) * 100.0),
                format!("{:+.1}%", median(&mut cpu_ratios[i].clone()) * 100.0),
            )
        };
        let traced = !matches!(
            m,
            Mode::Untraced
                | Mode::Registry
                | Mode::NoopSubscriber
                | Mode::NoopLayer
                | Mode::FieldsSubscriber
        );
        let bytes = med(&|r| r.bytes as f64 / 1000.0);
        let events = med(&|r| r.events as f64 / 1000.0);
        let lost: u64 = rs.iter().map(|r| r.lost).sum();
        println!(
            "| {} | {:.1}k | {vs} | {:.2} | {:.2} | {:.2} | {cpu_vs} | {:.2} | {} | {} | {} |",
            m.label(),
            med(&|r| r.rps) / 1e3,
            med(&|r| per(r.cpu.workers, r)),
            med(&|r| per(r.cpu.background, r)),
            med(&|r| per(r.cpu.workers + r.cpu.background, r)),
            med(&|r| per(r.cpu.client, r)),
            if traced {
                format!("{bytes:.0}")
            } else {
                "".into()
            },
            if traced
                && !matches!(
                    m,
                    Mode::Chrome | Mode::PerfettoFile | Mode::PerfettoFileThreads
                )
            {
                format!("{events:.1}")
            } else {
                "".into()
            },
            if matches!(
                m,
                Mode::Chrome | Mode::PerfettoFile | Mode::PerfettoFileThreads
            ) || !traced
            {
                "".into()
            } else {
                lost.to_string()
            },
        );
    }
    otel::report();
}
