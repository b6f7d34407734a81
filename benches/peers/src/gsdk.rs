//! Google's Perfetto SDK (`perfetto-sdk`, vendored C++), natively and as a
//! `tracing` layer (`tracing-perfetto-sdk`), recording in-process into a
//! central buffer that is read out and written to a file at the end.

use super::*;
use perfetto_sdk::tracing_session::TracingSession;
use perfetto_sdk::track_event::{EventContext, TrackEventDebugArg};
use perfetto_sdk::{track_event_begin, track_event_categories, track_event_end};

track_event_categories! {
    pub mod bench_te_ns {
        ("bench", "benchmark scopes", []),
        ("off", "never enabled", []),
    }
}

use bench_te_ns as perfetto_te_ns;

static INIT: std::sync::Once = std::sync::Once::new();

fn init() {
    INIT.call_once(|| {
        // Initialises the producer (in-process backend), TrackEvent and the
        // layer's "tracing" category; then our categories.
        tracing_perfetto_sdk::init_in_process();
        perfetto_te_ns::register().expect("register categories");
    });
}

/// A TraceConfig: one central buffer of `size_kb` (ring buffer, Perfetto's
/// default policy), track_event with the "bench" and "tracing" categories.
fn config(size_kb: u32) -> Vec<u8> {
    use perfetto_sdk::heap_buffer::HeapBuffer;
    use perfetto_sdk::pb_msg::{PbMsg, PbMsgWriter};
    use perfetto_sdk::protos::config::{
        data_source_config::DataSourceConfig,
        trace_config::{TraceConfig, TraceConfigBufferConfig, TraceConfigDataSource},
        track_event::track_event_config::TrackEventConfig,
    };
    let writer = PbMsgWriter::new();
    let hb = HeapBuffer::new(writer.stream_writer());
    let mut msg = PbMsg::new(&writer).unwrap();
    {
        let mut cfg = TraceConfig { msg: &mut msg };
        cfg.set_buffers(|b: &mut TraceConfigBufferConfig| {
            b.set_size_kb(size_kb);
        });
        cfg.set_data_sources(|ds: &mut TraceConfigDataSource| {
            ds.set_config(|c: &mut DataSourceConfig| {
                c.set_name("track_event");
                c.set_track_event_config(|te: &mut TrackEventConfig| {
                    te.set_enabled_categories("bench");
                    te.set_enabled_categories("tracing");
                });
            });
        });
    }
    msg.finalize();
    let n = writer.stream_writer().get_written_size();
    let mut buf = vec![0u8; n];
    hb.copy_into(&mut buf);
    buf
}

fn start(size_kb: u32) -> TracingSession {
    init();
    let mut s = TracingSession::in_process().expect("in-process session");
    s.setup(&config(size_kb));
    s.start_blocking();
    s
}

/// Stops `s` and writes what its buffer holds to `path`.
fn finish(mut s: TracingSession, path: &Path) {
    s.flush_blocking(Duration::from_secs(10));
    s.stop_blocking();
    let data = Arc::new(Mutex::new(Vec::new()));
    let d = data.clone();
    s.read_trace_blocking(move |chunk, _more| d.lock().unwrap().extend_from_slice(chunk));
    std::fs::write(path, &*data.lock().unwrap()).unwrap();
}

#[inline(never)]
fn scope(n: u64) {
    for i in 0..n {
        track_event_begin!("bench", "scope");
        black_box(i);
        track_event_end!("bench");
    }
}

#[inline(never)]
fn scope_arg(n: u64) {
    for i in 0..n {
        track_event_begin!("bench", "scope_arg", |ctx: &mut EventContext| {
            ctx.add_debug_arg("i", TrackEventDebugArg::Int64(i as i64));
        });
        black_box(i);
        track_event_end!("bench");
    }
}

#[inline(never)]
fn disabled(n: u64) {
    for i in 0..n {
        track_event_begin!("off", "scope");
        black_box(i);
        track_event_end!("off");
    }
}

#[inline(never)]
fn nested(n: u64) {
    for i in 0..n / 2 {
        track_event_begin!("bench", "outer");
        track_event_begin!("bench", "inner");
        black_box(i);
        track_event_end!("bench");
        track_event_end!("bench");
    }
}

pub fn native(cfg: &Cfg) -> Peer {
    let mut p = Peer {
        name: "perfetto-sdk (Google, C SDK)",
        ..Default::default()
    };
    if cfg.timing {
        let s = start(64 << 10);
        p.disabled = Some(bench(cfg, disabled, || {}));
        p.scope = Some(bench(cfg, scope, || {}));
        p.scope_arg = Some(bench(cfg, scope_arg, || {}));
        p.two = Some(two_threads(cfg, || (), scope, || {}));
        finish(s, &out_path("peers-perfetto-sdk-timing.pftrace"));
        p.notes.push(
        "in-process backend, 64 MiB central ring buffer (overwrites: timing runs keep the newest)"
            .into(),
    );
    }
    if cfg.file {
        let path = out_path("peers-perfetto-sdk.pftrace");
        let rss = reset_peak();
        let s = start(64 << 10);
        nested(cfg.file_scopes);
        let t = Instant::now();
        finish(s, &path);
        let finish_t = t.elapsed();
        let found = count_track_events(&std::fs::read(&path).unwrap_or_default());
        p.file = Some(FileStats {
            format: "Perfetto",
            bytes_per_scope: Some(file_len(&path) as f64 / cfg.file_scopes as f64),
            finish_ms: finish_t.as_secs_f64() * 1e3,
            peak_mib: (status_kib("VmHWM:").saturating_sub(rss)) as f64 / 1024.0,
            lost: format!("{} of {} events in the file", found, 2 * cfg.file_scopes),
        });
    }
    p
}

pub fn layer(cfg: &Cfg) -> Peer {
    let mut p = Peer {
        name: "tracing-perfetto-sdk (Google)",
        tracing_layer: true,
        ..Default::default()
    };
    if cfg.timing {
        let s = start(64 << 10);
        let dispatch = tracing::Dispatch::new(
            tracing_subscriber::registry().with(
                tracing_perfetto_sdk::PerfettoLayer::new()
                    .with_filter(tracing_subscriber::filter::LevelFilter::INFO),
            ),
        );
        tr::workloads(cfg, &mut p, &dispatch, || {});
        drop(dispatch);
        finish(s, &out_path("peers-tracing-perfetto-sdk-timing.pftrace"));
    }
    if cfg.file {
        let path = out_path("peers-tracing-perfetto-sdk.pftrace");
        let rss = reset_peak();
        let s = start(64 << 10);
        let dispatch = tracing::Dispatch::new(
            tracing_subscriber::registry().with(tracing_perfetto_sdk::PerfettoLayer::new()),
        );
        tracing::dispatcher::with_default(&dispatch, || tr::nested(cfg.file_scopes));
        drop(dispatch);
        let t = Instant::now();
        finish(s, &path);
        let finish_t = t.elapsed();
        let found = count_track_events(&std::fs::read(&path).unwrap_or_default());
        p.file = Some(FileStats {
            format: "Perfetto",
            bytes_per_scope: Some(file_len(&path) as f64 / cfg.file_scopes as f64),
            finish_ms: finish_t.as_secs_f64() * 1e3,
            peak_mib: (status_kib("VmHWM:").saturating_sub(rss)) as f64 / 1024.0,
            lost: format!("{} of {} events in the file", found, 2 * cfg.file_scopes),
        });
    }
    p
}
