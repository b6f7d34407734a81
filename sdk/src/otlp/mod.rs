//! OTLP export (feature `otlp`): the spans of kept requests sent to an
//! OpenTelemetry collector over OTLP/HTTP with protobuf bodies.
//!
//! The recording threads write one OTEL record per `tracing` span at its
//! close and one per event inside a span (`tracing/bridge/otel.rs`), in
//! their rings like every other record. [`OtlpOutput`] is an output of the
//! flusher (`output.rs`): it reads those records from each drained batch,
//! turns them into spans (names, times on the Unix clock, attributes,
//! kind and status by the `otel.*` conventions) and hands them to the
//! exporter's thread (`exporter.rs`) without waiting, a batch at a time
//! (512 spans, 1 s, a flush, the stop): spans beyond the session's memory
//! budget, or beyond the queue's bound once the thread is behind, are
//! dropped and counted. The exporter batches (512 spans), encodes
//! (`proto.rs`), POSTs (`http.rs`), retries with backoff, and at the
//! session's stop sends what is left within [`STOP_TIMEOUT`].
//!
//! | module | job |
//! | --- | --- |
//! | `mod.rs` | the options ([`Config`]), the resource, the output |
//! | `builder.rs` | the builder's methods, the `OTEL_*` variables |
//! | `exporter.rs` | the exporter's thread: batches, retries, the stop's deadline, counts |
//! | `proto.rs` | the OTLP messages, encoded by hand |
//! | `http.rs` | an HTTP/1.1 client over `TcpStream`, every step bounded by a deadline |

#![forbid(unsafe_code)]

mod builder;
mod exporter;
pub(crate) mod http;
pub(crate) mod proto;

use crate::encode::Context;
use crate::output::{Asked, Item, Output, Pass, Tally, Wants};
use crate::record::args::{ArgReader, ArgValue, StrWords};
use crate::record::callsite::Callsite;
use crate::record::layout::{parse_otel, OtelRecord};
use crate::stats::Stats;
pub(crate) use builder::apply_env;
use exporter::{Counts, Exporter};
use proto::{Span, SpanEvent, Value};
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// How long the session's stop waits for the spans still to be sent (the
/// flusher's last pass, so `TraceGuard::stop` and the exit paths): what is
/// not sent by then is dropped and counted.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// The exporter's options (`Builder::otlp` and the `OTEL_*` variables).
#[derive(Clone, Debug)]
pub(crate) struct Config {
    /// The whole URL the requests go to (`.../v1/traces`).
    pub(crate) url: String,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) service_name: Option<String>,
    pub(crate) resource: Vec<(String, String)>,
    pub(crate) gzip: bool,
    /// One request's timeout.
    pub(crate) timeout: Duration,
    pub(crate) batch_spans: usize,
    pub(crate) batch_delay: Duration,
    /// Spans waiting for the exporter at most.
    pub(crate) queue_spans: usize,
    pub(crate) stop_timeout: Duration,
    /// A root with a `traceparent` is kept as its caller decided.
    pub(crate) by_parent: bool,
}

impl Config {
    pub(crate) fn new(url: String) -> Config {
        Config {
            url,
            headers: Vec::new(),
            service_name: None,
            resource: Vec::new(),
            gzip: false,
            timeout: Duration::from_secs(10),
            batch_spans: 512,
            batch_delay: Duration::from_secs(1),
            queue_spans: 2048,
            stop_timeout: STOP_TIMEOUT,
            by_parent: true,
        }
    }
}

/// `k1=v1,k2=v2` with percent-encoded values (`OTEL_EXPORTER_OTLP_HEADERS`,
/// `OTEL_RESOURCE_ATTRIBUTES`); entries without `=` or with an empty key
/// are skipped.
pub(crate) fn parse_pairs(s: &str) -> Vec<(String, String)> {
    s.split(',')
        .filter_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            let k = percent_decode(k.trim());
            (!k.is_empty()).then(|| (k, percent_decode(v.trim())))
        })
        .collect()
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push(h << 4 | l);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The resource's attributes: the standard ones, then
/// `OTEL_RESOURCE_ATTRIBUTES`' and the builder's (a later key replaces an
/// earlier one), `service.name` last.
fn resource(config: &Config, process_name: &str) -> Vec<(String, Value)> {
    let mut attrs: Vec<(String, Value)> = vec![
        ("process.pid".into(), Value::Int(crate::sys::pid() as i64)),
        ("telemetry.sdk.name".into(), Value::Str("ringtrace".into())),
        ("telemetry.sdk.language".into(), Value::Str("rust".into())),
        (
            "telemetry.sdk.version".into(),
            Value::Str(env!("CARGO_PKG_VERSION").into()),
        ),
    ];
    if let Ok(h) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
        attrs.push(("host.name".into(), Value::Str(h.trim().into())));
    }
    let mut set = |k: &str, v: Value| match attrs.iter_mut().find(|(key, _)| key == k) {
        Some(e) => e.1 = v,
        None => attrs.push((k.into(), v)),
    };
    let mut service = None;
    for (k, v) in &config.resource {
        if k == "service.name" {
            service = Some(v.clone());
        } else {
            set(k, Value::Str(v.clone()));
        }
    }
    let service = config
        .service_name
        .clone()
        .or(service)
        .unwrap_or_else(|| format!("unknown_service:{process_name}"));
    set("service.name", Value::Str(service));
    attrs
}

/// The flusher's side of the export: OTEL records into spans, handed to
/// the exporter's thread each pass.
pub(crate) struct OtlpOutput {
    config: Config,
    exporter: Option<Exporter>,
    counts: Arc<Counts>,
    /// Spans of this pass, sent at its end.
    pass: Vec<Span>,
    /// Events of this pass by span id (a span takes them when it closes in
    /// the same pass; the rest go to the exporter, which holds them for
    /// spans yet to come).
    events: HashMap<u64, Vec<SpanEvent>>,
    /// Realtime minus the trace clock (ns), refreshed with the clock
    /// snapshots.
    offset: i128,
    /// Since when spans or events wait here for the exporter: they are
    /// handed over once a batch's worth (`batch_spans`) is here, after the
    /// batch delay, at a flush or at the stop, so that at a low rate the
    /// exporter's thread wakes once a batch, not once a flusher pass.
    held_since: Option<std::time::Instant>,
    /// The last `tracestate` read: the spans of one trace, read one after
    /// the other, share one copy of it.
    last_state: Option<Arc<str>>,
    /// A `tracestate`'s bytes as read (reused).
    state_bytes: Vec<u8>,
}

impl OtlpOutput {
    pub(crate) fn new(config: Config) -> OtlpOutput {
        OtlpOutput {
            config,
            exporter: None,
            counts: Arc::default(),
            pass: Vec::new(),
            events: HashMap::new(),
            offset: realtime_offset(),
            held_since: None,
            last_state: None,
            state_bytes: Vec::new(),
        }
    }

    /// A span's `tracestate` as recorded, shared with the span read before
    /// it if that one's was the same.
    fn shared_state(&mut self, text: StrWords<'_>) -> Arc<str> {
        self.state_bytes.clear();
        text.append_to(&mut self.state_bytes);
        match &self.last_state {
            Some(last) if last.as_bytes() == self.state_bytes.as_slice() => last.clone(),
            _ => {
                let state: Arc<str> = String::from_utf8_lossy(&self.state_bytes).into();
                self.last_state = Some(state.clone());
                state
            }
        }
    }

    fn unix_ns(&self, ctx: &Context<'_>, ticks: u64) -> u64 {
        let ns = ctx.cal.to_ns(ticks) as i128 + self.offset;
        ns.clamp(0, u64::MAX as i128) as u64
    }

    fn read(&mut self, ctx: &mut Context<'_>, words: &[u64]) {
        for rec in parse_otel(words) {
            match rec {
                OtelRecord::Span {
                    end,
                    created,
                    trace,
                    span,
                    parent,
                    flags,
                    tracestate,
                    site,
                    args,
                } => {
                    let Some(cs) = ctx.sites.get(site) else {
                        continue;
                    };
                    let trace_state = tracestate.map(|t| self.shared_state(t));
                    let mut trace_id = [0u8; 16];
                    trace_id[..8].copy_from_slice(&trace[0].to_be_bytes());
                    trace_id[8..].copy_from_slice(&trace[1].to_be_bytes());
                    let mut s = Span {
                        trace_id,
                        span_id: span,
                        parent,
                        flags,
                        trace_state,
                        name: Cow::Borrowed(cs.name),
                        scope: cs.category,
                        kind: proto::KIND_INTERNAL,
                        start: self.unix_ns(ctx, created),
                        end: self.unix_ns(ctx, end),
                        attrs: Vec::new(),
                        events: self.events.remove(&span).unwrap_or_default(),
                        status: proto::STATUS_UNSET,
                        status_message: String::new(),
                    };
                    apply_fields(&mut s, values(cs, args));
                    self.pass.push(s);
                }
                OtelRecord::Event {
                    ts,
                    span,
                    site,
                    args,
                } => {
                    let Some(cs) = ctx.sites.get(site) else {
                        continue;
                    };
                    let mut attrs = values(cs, args);
                    let error = attrs
                        .iter()
                        .any(|(k, v)| k == "level" && matches!(v, Value::Str(s) if s == "ERROR"));
                    let name = match attrs.iter().position(|(k, _)| k == "message") {
                        Some(i) => match attrs.remove(i).1 {
                            Value::Str(s) => Cow::Owned(s),
                            v => Cow::Owned(v.as_text()),
                        },
                        None => Cow::Borrowed(cs.name),
                    };
                    let e = SpanEvent {
                        time: self.unix_ns(ctx, ts),
                        name,
                        attrs,
                        error,
                    };
                    self.events.entry(span).or_default().push(e);
                }
            }
        }
    }
}

impl OtlpOutput {
    /// The stop: spans still held go first, then the exporter sends what
    /// it has within the stop's timeout.
    fn stop_exporter(&mut self) {
        if let Some(e) = self.exporter.take() {
            let spans = std::mem::take(&mut self.pass);
            if !spans.is_empty() {
                e.send(spans, Vec::new(), true);
            }
            e.stop(std::mem::take(&mut self.events));
        }
    }
}

/// Realtime minus the trace clock (BOOTTIME), in ns.
fn realtime_offset() -> i128 {
    crate::sys::realtime_ns() as i128 - crate::sys::boottime_ns() as i128
}

/// A record's args as attributes, by the site's names, then the site's
/// constant args (an event's `level`).
fn values(cs: &Callsite, args: &[u64]) -> proto::Attrs {
    let mut r = ArgReader::new(args);
    let mut out = Vec::with_capacity(cs.arg_names.len() + cs.const_args.len());
    for name in cs.arg_names {
        if r.at_end() {
            break;
        }
        let at = r.pos();
        let v = match r.next() {
            ArgValue::Int(v) => Value::Int(v),
            ArgValue::Uint(v) => match i64::try_from(v) {
                Ok(v) => Value::Int(v),
                Err(_) => Value::Str(v.to_string()),
            },
            ArgValue::Double(v) => Value::Double(v),
            ArgValue::Bool(v) => Value::Bool(v),
            ArgValue::Pointer(v) => Value::Str(format!("{v:#x}")),
            ArgValue::Str(s) => Value::Str(s.to_string_lossy()),
            ArgValue::Null => continue,
            ArgValue::Dict(_) | ArgValue::Array(_) => {
                r.set_pos(at);
                r.skip_value();
                continue;
            }
        };
        out.push((Cow::Borrowed(*name), v));
    }
    for &(name, text) in cs.const_args {
        out.push((Cow::Borrowed(name), Value::Str(text.to_string())));
    }
    out
}

/// A span's fields: the `otel.*` conventions set its name, kind and
/// status; an `error` field or an event at ERROR level sets the status to
/// ERROR (unless `otel.status_code` says otherwise); the rest are its
/// attributes (`traceparent` and `tracestate` excepted: they are the span's
/// remote parent and its trace's `trace_state`).
fn apply_fields(s: &mut Span, fields: proto::Attrs) {
    let mut code = None;
    for (k, v) in fields {
        match k.as_ref() {
            "otel.name" => s.name = Cow::Owned(v.as_text()),
            "otel.kind" => {
                s.kind = match v.as_text().to_ascii_lowercase().as_str() {
                    "server" => proto::KIND_SERVER,
                    "client" => proto::KIND_CLIENT,
                    "producer" => proto::KIND_PRODUCER,
                    "consumer" => proto::KIND_CONSUMER,
                    _ => proto::KIND_INTERNAL,
                }
            }
            "otel.status_code" => {
                code = match v.as_text().to_ascii_lowercase().as_str() {
                    "ok" => Some(proto::STATUS_OK),
                    "error" => Some(proto::STATUS_ERROR),
                    _ => Some(proto::STATUS_UNSET),
                }
            }
            "otel.status_message" => s.status_message = v.as_text(),
            "traceparent" | "tracestate" => {}
            "error" => {
                if s.status_message.is_empty() {
                    s.status_message = v.as_text();
                }
                s.status = proto::STATUS_ERROR;
                s.attrs.push((k, v));
            }
            _ => s.attrs.push((k, v)),
        }
    }
    if s.events.iter().any(|e| e.error) {
        s.status = proto::STATUS_ERROR;
    }
    if let Some(code) = code {
        s.status = code;
    }
}

impl Output for OtlpOutput {
    fn plan(&mut self, _: &mut Context<'_>, _: &Asked) -> Wants {
        Wants::default()
    }

    fn take(&mut self, ctx: &mut Context<'_>, item: Item<'_>, _: &mut Tally) {
        match item {
            Item::Open => {
                self.exporter = Some(Exporter::start(
                    self.config.clone(),
                    resource(&self.config, &ctx.process.name),
                    self.counts.clone(),
                ));
            }
            Item::Batch(_, batch) => self.read(ctx, batch.words),
            Item::Tick => self.offset = realtime_offset(),
            Item::Close { .. } => {
                crate::record::layout::OTEL_RECORDS
                    .store(false, std::sync::atomic::Ordering::Relaxed);
                self.stop_exporter();
            }
            _ => {}
        }
    }

    fn end(&mut self, _: &mut Context<'_>, pass: &Pass, _: u64, _: &mut Tally) {
        if self.pass.is_empty() && self.events.is_empty() {
            return;
        }
        let since = *self.held_since.get_or_insert_with(std::time::Instant::now);
        let asked = pass.flush || pass.stopping;
        let late = since.elapsed() >= self.config.batch_delay;
        if !(asked || late || self.pass.len() >= self.config.batch_spans) {
            return; // held for the next pass
        }
        self.held_since = None;
        // The next pass starts at this one's size (no regrowing, no copies).
        let next = Vec::with_capacity(self.pass.len());
        let spans = std::mem::replace(&mut self.pass, next);
        // Events of spans not closed yet wait at the exporter.
        let events: Vec<(u64, Vec<SpanEvent>)> = self.events.drain().collect();
        match &self.exporter {
            Some(e) => e.send(spans, events, asked || late),
            None => self.counts.dropped(spans.len() as u64, 0),
        }
    }

    fn totals(&mut self, stats: &mut Stats) -> Option<std::io::Error> {
        self.stop_exporter();
        self.counts.add_to(stats);
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_are_split_and_percent_decoded() {
        assert_eq!(
            parse_pairs("a=1, api-key=x%3Dy%2Cz ,bad,=v,c=%zz"),
            [
                ("a".to_string(), "1".to_string()),
                ("api-key".into(), "x=y,z".into()),
                ("c".into(), "%zz".into())
            ]
        );
        assert_eq!(percent_decode("%"), "%");
        assert_eq!(percent_decode("a%4"), "a%4");
    }

    #[test]
    fn conventions_set_name_kind_and_status() {
        let mut s = Span {
            trace_id: [1; 16],
            span_id: 1,
            parent: 0,
            flags: 1,
            trace_state: None,
            name: "n".into(),
            scope: "t",
            kind: proto::KIND_INTERNAL,
            start: 0,
            end: 0,
            attrs: Vec::new(),
            events: Vec::new(),
            status: 0,
            status_message: String::new(),
        };
        apply_fields(
            &mut s,
            vec![
                ("otel.name".into(), Value::Str("GET /".into())),
                ("otel.kind".into(), Value::Str("Server".into())),
                ("error".into(), Value::Str("boom".into())),
                ("n".into(), Value::Int(3)),
            ],
        );
        assert_eq!(s.name, "GET /");
        assert_eq!(s.kind, proto::KIND_SERVER);
        assert_eq!(
            (s.status, s.status_message.as_str()),
            (proto::STATUS_ERROR, "boom")
        );
        assert_eq!(s.attrs.len(), 2);
    }
}
