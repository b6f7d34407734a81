//! The exporter's thread: spans from the flusher (never waited for: a full
//! queue drops and counts), batched by size and time, sent with retries,
//! and at the stop sent within the stop's deadline. Every span handed over
//! ends exported or dropped, and counted either way.

use super::proto::{self, Span, SpanEvent, Value};
use super::{http, Config};
use crate::record::registry::REGISTRY;
use crate::stats::Stats;
use std::collections::HashMap;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Attempts per batch (the first and four retries).
const MAX_ATTEMPTS: u32 = 5;
/// The first retry's backoff; it doubles, with jitter, up to `MAX_BACKOFF`.
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// A `Retry-After` longer than this is cut to it.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(30);
/// Events waiting for a span not seen yet, at most; more are dropped.
const MAX_WAITING_EVENTS: usize = 4096;

/// What the exporter counts, shared with the output.
#[derive(Default)]
pub(crate) struct Counts {
    exported: AtomicU64,
    dropped: AtomicU64,
    events_dropped: AtomicU64,
    /// Spans handed over and not yet exported or dropped.
    in_flight: AtomicU64,
    /// Spans handed over that the thread has not taken from the channel
    /// yet: while there are none, the thread keeps up, and a pass goes whole.
    untaken: AtomicU64,
    /// The stop's deadline passed: what was in flight is counted dropped,
    /// the thread counts nothing more.
    abandoned: AtomicBool,
    warned: AtomicBool,
}

impl Counts {
    pub(crate) fn dropped(&self, spans: u64, events: u64) {
        if !self.abandoned.load(Ordering::Relaxed) {
            self.dropped.fetch_add(spans, Ordering::Relaxed);
            self.events_dropped.fetch_add(events, Ordering::Relaxed);
        }
    }

    fn resolved(&self, spans: u64) {
        self.in_flight.fetch_sub(spans, Ordering::Relaxed);
    }

    pub(crate) fn add_to(&self, stats: &mut Stats) {
        stats.otlp_spans_exported += self.exported.load(Ordering::Relaxed);
        stats.otlp_spans_dropped += self.dropped.load(Ordering::Relaxed);
        stats.otlp_events_dropped += self.events_dropped.load(Ordering::Relaxed);
    }

    /// Says the first failure on stderr (once per session).
    fn warn(&self, url: &str, what: &str) {
        if !self.warned.swap(true, Ordering::Relaxed) {
            eprintln!(
                "ringtrace: OTLP export to {url}: {what}; spans not sent are dropped and counted \
                 in Stats::otlp_spans_dropped"
            );
        }
    }
}

enum Msg {
    Spans {
        spans: Vec<Span>,
        events: Vec<(u64, Vec<SpanEvent>)>,
        bytes: u64,
        /// Send the batch now (the output held these spans for the batch
        /// delay already, or a flush asked for them).
        now: bool,
    },
    Stop {
        deadline: Instant,
        events: Vec<(u64, Vec<SpanEvent>)>,
    },
}

/// The exporter's handle, owned by the output.
pub(crate) struct Exporter {
    tx: SyncSender<Msg>,
    done: Receiver<()>,
    counts: Arc<Counts>,
    queue_spans: u64,
    stop_timeout: Duration,
    /// Set when the stop begins: a backoff's sleep ends at once.
    stopping: Arc<Mutex<Option<Instant>>>,
}

impl Exporter {
    /// Starts the exporter's thread. If it cannot be spawned, every span
    /// handed over is dropped (counted) and the failure said once.
    pub(crate) fn start(
        config: Config,
        resource: Vec<(String, Value)>,
        counts: Arc<Counts>,
    ) -> Exporter {
        let (tx, rx) = mpsc::sync_channel(64);
        let (done_tx, done) = mpsc::sync_channel(1);
        let stopping = Arc::new(Mutex::new(None));
        let exporter = Exporter {
            tx,
            done,
            counts: counts.clone(),
            queue_spans: config.queue_spans as u64,
            stop_timeout: config.stop_timeout,
            stopping: stopping.clone(),
        };
        let url = config.url.clone();
        let worker = Worker {
            url: match http::Url::parse(&config.url) {
                Ok(u) => Some(u),
                Err(e) => {
                    counts.warn(&url, &e);
                    None
                }
            },
            headers: headers(&config),
            resource,
            config,
            counts: counts.clone(),
            batch: Vec::new(),
            batch_bytes: 0,
            first_at: None,
            now: false,
            waiting: HashMap::new(),
            waiting_events: 0,
            stopping,
            attempt_seed: 0x2545_F491_4F6C_DD1D,
        };
        let spawned = std::thread::Builder::new()
            .name("ringtrace-otlp".into())
            .spawn(move || {
                worker.run(rx);
                let _ = done_tx.send(());
            });
        if let Err(e) = spawned {
            counts.warn(&url, &format!("cannot start the exporter's thread: {e}"));
        }
        exporter
    }

    /// Hands a pass's spans (and events of spans not closed in it) to the
    /// thread, without waiting. When the thread has taken every earlier
    /// pass (it keeps up), the pass goes whole, within the session's memory
    /// budget: a pass holds what a flush interval recorded, more than the
    /// queue's bound at a high rate. When it has not (a slow or dead
    /// collector), only what the queue's bound has room for goes. The rest
    /// is dropped and counted.
    pub(crate) fn send(&self, mut spans: Vec<Span>, events: Vec<(u64, Vec<SpanEvent>)>, now: bool) {
        if spans.is_empty() && events.is_empty() {
            return;
        }
        let room = if self.counts.untaken.load(Ordering::Acquire) == 0 {
            usize::MAX
        } else {
            let queued = self.counts.in_flight.load(Ordering::Relaxed);
            self.queue_spans.saturating_sub(queued) as usize
        };
        if spans.len() > room {
            let over = spans.split_off(room);
            self.counts.dropped(over.len() as u64, events_in(&over));
        }
        let n = spans.len() as u64;
        let n_events: u64 = events.iter().map(|(_, e)| e.len() as u64).sum();
        let bytes = spans.iter().map(|s| s.bytes() as u64).sum::<u64>()
            + events
                .iter()
                .flat_map(|(_, e)| e.iter())
                .map(|e| 64 + e.name.len() as u64 + 64 * e.attrs.len() as u64)
                .sum::<u64>();
        if !REGISTRY.budget.try_take(bytes) {
            self.counts.dropped(n, n_events + events_in(&spans));
            return;
        }
        self.counts.in_flight.fetch_add(n, Ordering::Relaxed);
        self.counts.untaken.fetch_add(n, Ordering::Release);
        match self.tx.try_send(Msg::Spans {
            spans,
            events,
            bytes,
            now,
        }) {
            Ok(()) => {}
            Err(TrySendError::Full(m) | TrySendError::Disconnected(m)) => {
                REGISTRY.budget.give_back(bytes);
                self.counts.resolved(n);
                self.counts.untaken.fetch_sub(n, Ordering::Release);
                if let Msg::Spans { spans, events, .. } = m {
                    let ev = events.iter().map(|(_, e)| e.len() as u64).sum::<u64>();
                    self.counts.dropped(n, ev + events_in(&spans));
                }
            }
        }
    }

    /// The session stops: what is queued is sent within the stop's
    /// timeout; past it, what is still in flight is counted dropped and
    /// the thread left to end on its own.
    pub(crate) fn stop(self, events: HashMap<u64, Vec<SpanEvent>>) {
        let deadline = Instant::now() + self.stop_timeout;
        *self.stopping.lock().unwrap_or_else(|e| e.into_inner()) = Some(deadline);
        let mut msg = Msg::Stop {
            deadline,
            events: events.into_iter().collect(),
        };
        // The queue may be full: try until the deadline.
        loop {
            match self.tx.try_send(msg) {
                Ok(()) => break,
                Err(TrySendError::Disconnected(_)) => break,
                Err(TrySendError::Full(m)) => {
                    if Instant::now() >= deadline {
                        break;
                    }
                    msg = m;
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        }
        let wait = deadline.saturating_duration_since(Instant::now()) + Duration::from_millis(100);
        if self.done.recv_timeout(wait).is_err() {
            let left = self.counts.in_flight.swap(0, Ordering::Relaxed);
            self.counts.dropped(left, 0);
            self.counts.abandoned.store(true, Ordering::Relaxed);
        }
    }
}

/// The events the spans carry.
fn events_in(spans: &[Span]) -> u64 {
    spans.iter().map(|s| s.events.len() as u64).sum()
}

/// The request headers: content type, encoding, the user's.
fn headers(config: &Config) -> Vec<(String, String)> {
    let mut h = vec![(
        "Content-Type".to_string(),
        "application/x-protobuf".to_string(),
    )];
    if config.gzip {
        h.push(("Content-Encoding".into(), "gzip".into()));
    }
    for (k, v) in &config.headers {
        // A header that would break the request's framing is left out.
        let clean = |s: &str| !s.chars().any(|c| c == '\r' || c == '\n');
        if clean(k) && clean(v) && !k.is_empty() && !k.contains(':') {
            h.push((k.clone(), v.clone()));
        }
    }
    h
}

struct Worker {
    url: Option<http::Url>,
    headers: Vec<(String, String)>,
    resource: Vec<(String, Value)>,
    config: Config,
    counts: Arc<Counts>,
    batch: Vec<Span>,
    batch_bytes: u64,
    first_at: Option<Instant>,
    /// Export what the batch holds at once (see `Msg::Spans::now`).
    now: bool,
    /// Events whose span has not come yet.
    waiting: HashMap<u64, Vec<SpanEvent>>,
    waiting_events: usize,
    stopping: Arc<Mutex<Option<Instant>>>,
    attempt_seed: u64,
}

impl Worker {
    fn run(mut self, rx: Receiver<Msg>) {
        loop {
            let wait = match self.first_at {
                Some(t) => (t + self.config.batch_delay).saturating_duration_since(Instant::now()),
                None => Duration::from_secs(3600),
            };
            match rx.recv_timeout(wait) {
                Ok(Msg::Spans {
                    spans,
                    events,
                    bytes,
                    now,
                }) => {
                    self.add(spans, events, bytes);
                    self.now |= now;
                }
                Ok(Msg::Stop { deadline, events }) => {
                    // What was queued before the stop, then the rest.
                    while let Ok(m) = rx.try_recv() {
                        if let Msg::Spans {
                            spans,
                            events,
                            bytes,
                            ..
                        } = m
                        {
                            self.add(spans, events, bytes);
                        }
                    }
                    self.attach(events);
                    while !self.batch.is_empty() {
                        self.export(Some(deadline));
                    }
                    let left = self.waiting_events as u64;
                    self.counts.dropped(0, left);
                    return;
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    // The output went without a stop (it cannot, but for a
                    // panic of the flusher): what is held is dropped.
                    let left = self.batch.len() as u64;
                    let events = events_in(&self.batch) + self.waiting_events as u64;
                    self.counts.dropped(left, events);
                    self.counts.resolved(left);
                    REGISTRY
                        .budget
                        .give_back(std::mem::take(&mut self.batch_bytes));
                    return;
                }
            }
            let due = self.now
                || self
                    .first_at
                    .is_some_and(|t| t.elapsed() >= self.config.batch_delay);
            while self.batch.len() >= self.config.batch_spans || (due && !self.batch.is_empty()) {
                self.export(None);
            }
            if due {
                self.now = false;
            }
        }
    }

    fn add(&mut self, spans: Vec<Span>, events: Vec<(u64, Vec<SpanEvent>)>, bytes: u64) {
        self.counts
            .untaken
            .fetch_sub(spans.len() as u64, Ordering::Release);
        self.batch_bytes += bytes;
        for mut s in spans {
            if let Some(ev) = self.waiting.remove(&s.span_id) {
                self.waiting_events -= ev.len();
                s.events.extend(ev);
                s.events.sort_by_key(|e| e.time);
                if s.events.iter().any(|e| e.error) && s.status == proto::STATUS_UNSET {
                    s.status = proto::STATUS_ERROR;
                }
            }
            self.batch.push(s);
        }
        self.attach(events);
        if self.first_at.is_none() && !self.batch.is_empty() {
            self.first_at = Some(Instant::now());
        }
    }

    /// Events join their span if it waits in the batch, else wait for it.
    fn attach(&mut self, events: Vec<(u64, Vec<SpanEvent>)>) {
        for (id, ev) in events {
            if let Some(s) = self.batch.iter_mut().find(|s| s.span_id == id) {
                if ev.iter().any(|e| e.error) && s.status == proto::STATUS_UNSET {
                    s.status = proto::STATUS_ERROR;
                }
                s.events.extend(ev);
                s.events.sort_by_key(|e| e.time);
            } else if self.waiting_events + ev.len() <= MAX_WAITING_EVENTS {
                self.waiting_events += ev.len();
                self.waiting.entry(id).or_default().extend(ev);
            } else {
                self.counts.dropped(0, ev.len() as u64);
            }
        }
    }

    /// Sends the batch's first `batch_spans` spans, retrying; by
    /// `stop_deadline` at the latest when stopping.
    fn export(&mut self, stop_deadline: Option<Instant>) {
        let n = self.batch.len().min(self.config.batch_spans);
        let spans: Vec<Span> = self.batch.drain(..n).collect();
        let bytes = if self.batch.is_empty() {
            std::mem::take(&mut self.batch_bytes)
        } else {
            let b = spans
                .iter()
                .map(|s| s.bytes() as u64)
                .sum::<u64>()
                .min(self.batch_bytes);
            self.batch_bytes -= b;
            b
        };
        self.first_at = (!self.batch.is_empty()).then(Instant::now);
        let count = spans.len() as u64;
        let sent = self.send(&spans, stop_deadline);
        match sent {
            Ok(rejected) => {
                if !self.counts.abandoned.load(Ordering::Relaxed) {
                    self.counts
                        .exported
                        .fetch_add(count - rejected.min(count), Ordering::Relaxed);
                }
                self.counts.dropped(rejected.min(count), 0);
            }
            Err(what) => {
                let url = self.config.url.clone();
                self.counts.warn(&url, &what);
                self.counts.dropped(count, events_in(&spans));
            }
        }
        self.counts.resolved(count);
        drop(spans);
        REGISTRY.budget.give_back(bytes);
    }

    /// One batch, with its retries: the spans the collector rejected, or
    /// why it was given up.
    fn send(&mut self, spans: &[Span], stop_deadline: Option<Instant>) -> Result<u64, String> {
        let Some(url) = self.url.clone() else {
            return Err("no valid URL".into());
        };
        let mut body = proto::export_request(&self.resource, spans);
        if self.config.gzip {
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            if gz.write_all(&body).is_ok() {
                if let Ok(b) = gz.finish() {
                    body = b;
                }
            }
        }
        let mut attempt = 0;
        loop {
            let stop =
                stop_deadline.or_else(|| *self.stopping.lock().unwrap_or_else(|e| e.into_inner()));
            let mut deadline = Instant::now() + self.config.timeout;
            if let Some(s) = stop {
                deadline = deadline.min(s);
            }
            let (what, wait) = match http::post(&url, &self.headers, &body, deadline) {
                Ok(r) if (200..300).contains(&r.status) => {
                    return Ok(proto::rejected_spans(&r.body));
                }
                Ok(r) if matches!(r.status, 429 | 502 | 503 | 504) => (
                    format!("HTTP {}", r.status),
                    r.retry_after.map(|d| d.min(MAX_RETRY_AFTER)),
                ),
                Ok(r) => return Err(format!("HTTP {} (not retried)", r.status)),
                Err(e) => (e.to_string(), None),
            };
            attempt += 1;
            if attempt >= MAX_ATTEMPTS {
                return Err(format!("{what}, after {MAX_ATTEMPTS} attempts"));
            }
            let wait = wait.unwrap_or_else(|| self.backoff(attempt));
            let until = Instant::now() + wait;
            // The sleep ends at the stop's deadline; a batch that cannot be
            // sent by then is given up.
            loop {
                let stop = stop_deadline
                    .or_else(|| *self.stopping.lock().unwrap_or_else(|e| e.into_inner()));
                if stop.is_some_and(|s| until >= s) {
                    return Err(format!("{what}; the stop's deadline came first"));
                }
                let now = Instant::now();
                if now >= until {
                    break;
                }
                std::thread::sleep((until - now).min(Duration::from_millis(20)));
            }
        }
    }

    /// Exponential backoff with jitter (half to all of the step).
    fn backoff(&mut self, attempt: u32) -> Duration {
        let step = FIRST_BACKOFF
            .saturating_mul(1 << (attempt - 1).min(10))
            .min(MAX_BACKOFF);
        self.attempt_seed ^= self.attempt_seed << 13;
        self.attempt_seed ^= self.attempt_seed >> 7;
        self.attempt_seed ^= self.attempt_seed << 17;
        let frac = (self.attempt_seed % 1000) as u32;
        step / 2 + step / 2 * frac / 1000
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(id: u64) -> Span {
        Span {
            trace_id: [1; 16],
            span_id: id,
            parent: 0,
            flags: 1,
            trace_state: None,
            name: "s".into(),
            scope: "t",
            kind: proto::KIND_INTERNAL,
            start: 1,
            end: 2,
            attrs: Vec::new(),
            events: vec![SpanEvent {
                time: 1,
                name: "e".into(),
                attrs: Vec::new(),
                error: false,
            }],
            status: 0,
            status_message: String::new(),
        }
    }

    /// While the thread keeps up, a pass past the queue's bound goes whole;
    /// once it is behind (a dead collector's retries), a pass past the
    /// bound is dropped at once, counted with its events, without waiting;
    /// at the stop the rest, which a dead collector never takes, are
    /// counted within the deadline.
    #[test]
    fn a_pass_goes_whole_while_the_thread_keeps_up_and_drops_past_the_bound_once_behind() {
        // No session's budget changes meanwhile.
        let _one = crate::session::tests::serial();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut config = Config::new(format!("http://127.0.0.1:{port}/v1/traces"));
        config.queue_spans = 10;
        config.batch_spans = 5;
        config.stop_timeout = Duration::from_secs(2);
        let counts = Arc::new(Counts::default());
        let e = Exporter::start(config, Vec::new(), counts.clone());
        let dropped = || {
            let mut stats = Stats::default();
            counts.add_to(&mut stats);
            (stats.otlp_spans_dropped, stats.otlp_events_dropped)
        };
        let t = Instant::now();
        // The thread is idle: 25 spans, past the bound of 10, go whole.
        e.send((0..25).map(span).collect(), Vec::new(), false);
        assert_eq!(dropped(), (0, 0));
        // It takes them and retries its first batch against nobody.
        while counts.untaken.load(Ordering::Acquire) != 0 {
            assert!(
                t.elapsed() < Duration::from_secs(5),
                "the thread takes the pass"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        // The next pass waits in the channel (the thread took every earlier
        // one); with it untaken, the one after is past the bound: dropped.
        e.send((0..25).map(span).collect(), Vec::new(), false);
        assert_eq!(dropped(), (0, 0));
        let sent = Instant::now();
        e.send((0..25).map(span).collect(), Vec::new(), false);
        assert!(
            sent.elapsed() < Duration::from_millis(100),
            "send does not wait"
        );
        assert_eq!(dropped(), (25, 25));
        e.stop(HashMap::new());
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        let mut stats = Stats::default();
        counts.add_to(&mut stats);
        assert_eq!(stats.otlp_spans_dropped + stats.otlp_spans_exported, 75);
        assert_eq!(stats.otlp_spans_exported, 0);
    }
}
