//! A published, third-party program instrumented with `tracing`: mini-redis
//! (a tokio server and its clients, `#[instrument]` on the connection
//! handler, the commands and the client calls, `Debug` frames in events),
//! driven on loopback with bounded loops through `ringtrace::builder()`'s
//! `.layer()` and `.subscriber()`, both formats. A plain `tracing_subscriber`
//! layer beside ringtrace counts what the program produced; the trace,
//! decoded with the official Perfetto schema or serde_json, must hold it all
//! (written + lost = produced, every span's enters as slices, every span
//! that ran on two threads as one async range, every event).
//!
//! Each run is a child process (a process has one global subscriber): this
//! test binary run again with `RINGTRACE_MINI_REDIS=<api>:<ring>:<trace>`.
//! Two more runs with 4 KiB rings, where events may be lost: the accounting
//! must hold all the same.

mod common;
use common::*;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::thread::{self, ThreadId};
use tracing::span::{Attributes, Id};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

/// What the program produced, counted by a layer of its own.
#[derive(Default)]
struct Tally {
    /// Enters per span name.
    enters: BTreeMap<String, u64>,
    events: u64,
    /// Spans closed after being entered on two threads or more.
    moved: u64,
    /// Live spans: name, the thread of the first enter, whether another
    /// thread entered it.
    live: HashMap<u64, (String, Option<ThreadId>, bool)>,
}

struct Counting(Arc<Mutex<Tally>>);

impl<S: Subscriber> Layer<S> for Counting {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _: Context<'_, S>) {
        let name = attrs.metadata().name().to_owned();
        let mut t = self.0.lock().unwrap();
        t.live.insert(id.into_u64(), (name, None, false));
    }

    fn on_event(&self, _: &Event<'_>, _: Context<'_, S>) {
        self.0.lock().unwrap().events += 1;
    }

    fn on_enter(&self, id: &Id, _: Context<'_, S>) {
        let me = thread::current().id();
        let mut t = self.0.lock().unwrap();
        let (name, first, moved) = t.live.get_mut(&id.into_u64()).expect("a live span");
        match first {
            None => *first = Some(me),
            Some(f) if *f != me => *moved = true,
            _ => {}
        }
        let name = name.clone();
        *t.enters.entry(name).or_default() += 1;
    }

    fn on_close(&self, id: Id, _: Context<'_, S>) {
        let mut t = self.0.lock().unwrap();
        if let Some((_, _, true)) = t.live.remove(&id.into_u64()) {
            t.moved += 1;
        }
    }
}

const CLIENTS: usize = 4;
const COMMANDS: usize = 25;
const MESSAGES: usize = 20;

/// The program's workload: a server, async clients setting and getting
/// keys, a subscriber and a publisher, a blocking client, a raw connection
/// sending a command the server does not know. Returns the commands sent.
fn drive_mini_redis() -> u64 {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(mini_redis::server::run(listener, stopped));
        let mut sent = 0u64;

        let clients: Vec<_> = (0..CLIENTS)
            .map(|c| {
                tokio::spawn(async move {
                    let mut client = mini_redis::client::connect(addr).await.unwrap();
                    for i in 0..COMMANDS {
                        let key = format!("key-{c}-{i}");
                        let value = format!("value\r\n{c}:{i}");
                        client.set(&key, value.clone().into()).await.unwrap();
                        let got = client.get(&key).await.unwrap();
                        assert_eq!(got.as_deref(), Some(value.as_bytes()));
                    }
                })
            })
            .collect();
        sent += (CLIENTS * COMMANDS * 2) as u64;

        // Pub/sub: the subscriber is subscribed before anything is published.
        let sub_client = mini_redis::client::connect(addr).await.unwrap();
        let mut subscriber = sub_client.subscribe(vec!["news".into()]).await.unwrap();
        let reader = tokio::spawn(async move {
            for i in 0..MESSAGES {
                let m = subscriber.next_message().await.unwrap().unwrap();
                assert_eq!(m.content, format!("item {i}").as_bytes());
            }
        });
        let mut publisher = mini_redis::client::connect(addr).await.unwrap();
        for i in 0..MESSAGES {
            let n = publisher
                .publish("news", format!("item {i}").into())
                .await
                .unwrap();
            assert_eq!(n, 1);
        }
        sent += 1 + MESSAGES as u64;

        // A blocking client on a thread of its own (its own runtime).
        let blocking = std::thread::spawn(move || {
            let mut client = mini_redis::blocking_client::connect(addr).unwrap();
            for i in 0..COMMANDS {
                client.set("blocking", format!("{i}").into()).unwrap();
                assert!(client.get("blocking").unwrap().is_some());
            }
        });
        sent += (COMMANDS * 2) as u64;

        // A raw connection: a command the server answers with an error.
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut raw = mini_redis::Connection::new(stream);
        let ping = mini_redis::Frame::Array(vec![mini_redis::Frame::Bulk("PING".into())]);
        raw.write_frame(&ping).await.unwrap();
        let reply = raw.read_frame().await.unwrap();
        assert!(
            matches!(reply, Some(mini_redis::Frame::Error(_))),
            "{reply:?}"
        );
        sent += 1;
        drop(raw);

        for c in clients {
            c.await.unwrap();
        }
        reader.await.unwrap();
        tokio::task::spawn_blocking(move || blocking.join().unwrap())
            .await
            .unwrap();
        drop(publisher);
        stop.send(()).unwrap();
        server.await.unwrap().unwrap();
        sent
    })
}

/// The child: records the workload through `api` into `trace` (rings of
/// `ring` bytes at most, 0: the default), writes the tally and ringtrace's
/// totals beside it.
fn child(api: &str, ring: usize, trace: &Path) {
    use tracing_subscriber::prelude::*;
    let tally = Arc::new(Mutex::new(Tally::default()));
    let sized = |b: ringtrace::Builder| match ring {
        0 => b,
        n => b.buffer_bytes_per_thread(n),
    };
    let guard = match api {
        "layer" => {
            let (layer, guard) = sized(ringtrace::builder().output(trace)).layer().unwrap();
            tracing_subscriber::registry()
                .with(layer)
                .with(Counting(tally.clone()))
                .init();
            guard
        }
        "subscriber" => {
            let (sub, guard) = sized(ringtrace::builder().output(trace))
                .subscriber()
                .unwrap();
            tracing::subscriber::set_global_default(sub.with(Counting(tally.clone()))).unwrap();
            guard
        }
        other => panic!("unknown api {other}"),
    };
    let sent = drive_mini_redis();
    let stats = guard.stop().unwrap();
    let t = tally.lock().unwrap();
    let enters: u64 = t.enters.values().sum();
    let out = json!({
        "commands": sent,
        "enters": t.enters,
        "events": t.events,
        "moved": t.moved,
        "spans_still_open": t.live.len(),
        "records": 2 * enters + 2 * t.moved + t.events,
        "events_written": stats.events_written,
        "events_lost": stats.events_lost,
        "unmatched_ends": stats.unmatched_ends,
    });
    std::fs::write(trace.with_extension("tally.json"), out.to_string()).unwrap();
}

/// Slices per name on thread tracks, async ranges, instants: from the
/// official decoder's model of a Perfetto trace.
fn perfetto_shapes(trace: &Path) -> (BTreeMap<String, u64>, u64, u64) {
    let model = perfetto_model(trace);
    let tracks = model["tracks"].as_object().unwrap();
    let (mut slices, mut ranges, mut instants) = (BTreeMap::new(), 0, 0);
    for s in model["slices"].as_array().unwrap() {
        let on_thread = tracks[&s["track_uuid"].to_string()]["kind"] == "thread";
        if s["instant"] == true {
            instants += 1;
        } else if on_thread {
            *slices
                .entry(s["name"].as_str().unwrap().to_owned())
                .or_default() += 1;
        } else {
            ranges += 1;
        }
    }
    (slices, ranges, instants)
}

/// The same from a JSON trace.
fn json_shapes(trace: &Path) -> (BTreeMap<String, u64>, u64, u64) {
    let (mut slices, mut ranges, mut instants) = (BTreeMap::new(), 0, 0);
    for e in json_events(trace) {
        match e["ph"].as_str().unwrap() {
            "X" => {
                *slices
                    .entry(e["name"].as_str().unwrap().to_owned())
                    .or_default() += 1
            }
            "b" => ranges += 1,
            "i" => instants += 1,
            _ => {}
        }
    }
    (slices, ranges, instants)
}

#[test]
fn mini_redis_is_recorded_whole_through_the_layer_and_the_subscriber() {
    if std::env::var_os("RINGTRACE_MINI_REDIS").is_some() {
        return; // in a child, `mini_redis_child` runs
    }
    // (api, format, largest ring: 0 for the default, 4 KiB to lose events)
    let runs = [
        ("layer", "pftrace", 0),
        ("layer", "json", 0),
        ("subscriber", "pftrace", 0),
        ("subscriber", "json", 0),
        ("layer", "pftrace", 4096),
        ("subscriber", "json", 4096),
    ];
    let mut moved_in_all_runs = 0;
    for (api, ext, ring) in runs {
        {
            let dir = scratch(&format!("mini-redis-{api}-{ext}-{ring}"));
            let trace = dir.join(format!("mini-redis.{ext}"));
            let out = rerun_test("mini_redis_child")
                .env(
                    "RINGTRACE_MINI_REDIS",
                    format!("{api}:{ring}:{}", trace.display()),
                )
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{api} {ext}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let tally: Value = serde_json::from_slice(
                &std::fs::read(trace.with_extension("tally.json")).expect("the child's tally"),
            )
            .unwrap();
            let (written, marked) = if ext == "json" {
                json_written(&trace)
            } else {
                perfetto_written(&trace)
            };
            let lost = tally["events_lost"].as_u64().unwrap();
            let produced = tally["records"].as_u64().unwrap();
            assert_eq!(written + lost, produced, "{api} {ext}: {tally}");
            assert_eq!(marked, lost, "{api} {ext}: {tally}");
            assert_eq!(tally["unmatched_ends"], 0, "{api} {ext}: {tally}");
            assert_eq!(tally["spans_still_open"], 0, "{api} {ext}: {tally}");
            // The workload touched what matters: commands were handled and
            // frames logged. Whether tokio moves a span between its workers in
            // one run is the scheduler's choice (on a loaded machine, some runs
            // keep every task on one worker), so moves are asked of the runs
            // together, below.
            moved_in_all_runs += tally["moved"].as_u64().unwrap();
            for name in ["run", "get", "set", "publish", "subscribe", "apply"] {
                assert!(
                    tally["enters"][name].as_u64().unwrap_or(0) > 0,
                    "{name}: {tally}"
                );
            }
            // Nothing lost with the default buffers: every enter a slice,
            // every moved span a range, every event an instant.
            if lost == 0 {
                let (slices, ranges, instants) = if ext == "json" {
                    json_shapes(&trace)
                } else {
                    perfetto_shapes(&trace)
                };
                let enters: BTreeMap<String, u64> =
                    serde_json::from_value(tally["enters"].clone()).unwrap();
                assert_eq!(slices, enters, "{api} {ext}");
                assert_eq!(ranges, tally["moved"].as_u64().unwrap(), "{api} {ext}");
                assert_eq!(instants, tally["events"].as_u64().unwrap(), "{api} {ext}");
            }
            eprintln!("{api} {ext} {ring}: {written} written + {lost} lost = {produced}: {tally}");
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    // Spans that live across `.await`s and move between the workers were
    // recorded (as async ranges, counted above run by run).
    assert!(
        moved_in_all_runs > 0,
        "no span moved between threads in any run"
    );
}

/// Runs in the child processes of the test above.
#[test]
fn mini_redis_child() {
    let Ok(what) = std::env::var("RINGTRACE_MINI_REDIS") else {
        return;
    };
    let mut parts = what.splitn(3, ':');
    let (api, ring, trace) = (
        parts.next().unwrap(),
        parts.next().unwrap().parse().unwrap(),
        parts.next().unwrap(),
    );
    child(api, ring, Path::new(trace));
}
