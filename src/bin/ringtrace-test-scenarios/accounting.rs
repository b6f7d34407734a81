//! Loss accounting through the `tracing` layer, the subscriber and the `log`
//! bridge: rings too small for the workload, and an independent count of
//! what the program produced (a plain `tracing_subscriber::Layer` stacked
//! beside ringtrace, or a chained `log` logger), so the test can check that
//! every record is either written or counted lost.

use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::Duration;
use tracing::span::{Attributes, Id};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

/// What a `tracing` program produced, as ringtrace records it: a begin and
/// an end per enter, an async begin and end per span entered on more than
/// one thread, one instant per event. Counted without ringtrace's help.
#[derive(Default)]
pub struct Produced {
    enters: AtomicU64,
    events: AtomicU64,
    moved: AtomicU64,
    /// Live spans: the thread of the first enter, whether another entered.
    spans: Mutex<HashMap<u64, (Option<thread::ThreadId>, bool)>>,
}

impl Produced {
    pub fn totals(&self) -> Value {
        let (enters, events, moved) = (
            self.enters.load(Ordering::SeqCst),
            self.events.load(Ordering::SeqCst),
            self.moved.load(Ordering::SeqCst),
        );
        json!({
            "enters": enters, "events": events, "moved": moved,
            "records": 2 * enters + 2 * moved + events,
            "spans_still_open": self.spans.lock().unwrap().len(),
        })
    }
}

/// The counting layer: shares its tallies through an `Arc`.
pub struct Counting(pub Arc<Produced>);

impl<S: Subscriber> Layer<S> for Counting {
    fn on_new_span(&self, _: &Attributes<'_>, id: &Id, _: Context<'_, S>) {
        self.0
            .spans
            .lock()
            .unwrap()
            .insert(id.into_u64(), (None, false));
    }

    fn on_event(&self, _: &Event<'_>, _: Context<'_, S>) {
        self.0.events.fetch_add(1, Ordering::SeqCst);
    }

    fn on_enter(&self, id: &Id, _: Context<'_, S>) {
        self.0.enters.fetch_add(1, Ordering::SeqCst);
        let me = thread::current().id();
        let mut spans = self.0.spans.lock().unwrap();
        let s = spans.entry(id.into_u64()).or_insert((None, false));
        match s.0 {
            None => s.0 = Some(me),
            Some(first) if first != me => s.1 = true,
            _ => {}
        }
    }

    fn on_close(&self, id: Id, _: Context<'_, S>) {
        if let Some((_, true)) = self.0.spans.lock().unwrap().remove(&id.into_u64()) {
            self.0.moved.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// A `log` logger chained behind ringtrace's: counts the records.
struct CountingLog(Arc<AtomicU64>);

impl log::Log for CountingLog {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, _: &log::Record<'_>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
    fn flush(&self) {}
}

/// A future instrumented with a span entered at each of its polls, which
/// yields so that the runtime's workers take turns running it.
#[tracing::instrument(target = "acct", level = "info", skip_all, fields(task = task))]
async fn polled(task: u64, rounds: u64) -> u64 {
    let mut sum = 0;
    for r in 0..rounds {
        tracing::info!(target: "acct", r, "poll");
        sum += r;
        tokio::task::yield_now().await;
    }
    sum
}

/// The `tracing` workload: nested spans with events on four threads, spans
/// handed from one thread to another and entered on both, and instrumented
/// futures on a two-worker runtime.
fn tracing_workload(rounds: u64) {
    let workers: Vec<_> = (0..4u64)
        .map(|t| {
            thread::spawn(move || {
                for i in 0..rounds {
                    let outer = tracing::info_span!(target: "acct", "outer", t, i);
                    let _o = outer.enter();
                    tracing::info!(target: "acct", i, "in outer");
                    for j in 0..3u64 {
                        let inner = tracing::debug_span!(target: "acct", "inner", j);
                        let _g = inner.enter();
                        tracing::debug!(target: "acct", j, label = ?("x", j), "in inner");
                    }
                }
            })
        })
        .collect();
    // Spans made and entered here, then entered again on the other thread.
    let (tx, rx) = mpsc::channel::<tracing::Span>();
    let taker = thread::spawn(move || {
        for span in rx {
            let _g = span.enter();
            tracing::info!(target: "acct", "taken");
        }
    });
    for i in 0..rounds {
        let span = tracing::info_span!(target: "acct", "handed", i);
        span.in_scope(|| tracing::info!(target: "acct", "handing"));
        tx.send(span).unwrap();
    }
    drop(tx);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    rt.block_on(async {
        let tasks: Vec<_> = (0..16)
            .map(|t| tokio::spawn(polled(t, rounds / 8)))
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
    });
    drop(rt);
    taker.join().unwrap();
    for w in workers {
        w.join().unwrap();
    }
}

/// `ACC_API`: `layer`, `subscriber` or `log`; `ACC_ROUNDS` rounds of the
/// workload into 16 KiB rings drained every 20 ms.
pub fn accounting(trace: &str) -> Value {
    let api = std::env::var("ACC_API").unwrap();
    let rounds: u64 = std::env::var("ACC_ROUNDS")
        .map(|r| r.parse().unwrap())
        .unwrap_or(2000);
    let tiny = |b: ringtrace::Builder| {
        b.buffer_bytes_per_thread(16 << 10)
            .flush_interval(Duration::from_millis(20))
    };
    let produced = Arc::new(Produced::default());
    let logged = Arc::new(AtomicU64::new(0));
    let guard = match api.as_str() {
        "layer" => {
            use tracing_subscriber::prelude::*;
            let (layer, guard) = tiny(ringtrace::builder().output(trace)).layer().unwrap();
            tracing_subscriber::registry()
                .with(layer)
                .with(Counting(produced.clone()))
                .init();
            tracing_workload(rounds);
            guard
        }
        "subscriber" => {
            use tracing_subscriber::prelude::*;
            let (sub, guard) = tiny(ringtrace::builder().output(trace))
                .subscriber()
                .unwrap();
            tracing::subscriber::set_global_default(sub.with(Counting(produced.clone()))).unwrap();
            tracing_workload(rounds);
            guard
        }
        "log" => {
            let guard = tiny(ringtrace::builder().output(trace)).start().unwrap();
            ringtrace::log::Logger::new()
                .chain(CountingLog(logged.clone()), log::LevelFilter::Trace)
                .init()
                .unwrap();
            let hs: Vec<_> = (0..4u64)
                .map(|t| {
                    thread::spawn(move || {
                        for i in 0..rounds * 4 {
                            log::info!(target: "acct", "thread {t} line {i}");
                            log::debug!(target: "acct::detail", "{:?}", (t, i, "detail"));
                        }
                    })
                })
                .collect();
            for h in hs {
                h.join().unwrap();
            }
            guard
        }
        other => panic!("unknown ACC_API {other}"),
    };
    let stats = guard.stop().unwrap();
    let mut out = if api == "log" {
        json!({ "records": logged.load(Ordering::SeqCst) })
    } else {
        produced.totals()
    };
    out["events_written"] = json!(stats.events_written);
    out["events_lost"] = json!(stats.events_lost);
    out["unmatched_ends"] = json!(stats.unmatched_ends);
    out
}
