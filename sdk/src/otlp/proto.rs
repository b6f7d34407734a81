//! The OTLP messages the exporter sends, encoded by hand with the Perfetto
//! encoder's protobuf writer (`encode::protowire`): field numbers from
//! opentelemetry-proto's `trace/v1/trace.proto`, `common/v1/common.proto`,
//! `resource/v1/resource.proto` and `collector/trace/v1/trace_service.proto`
//! (OTLP 1.x). The tests decode every body with the official schema.

use crate::encode::protowire::{bytes, double, fixed64, int, nested, string, uint};
use std::borrow::Cow;
use std::sync::Arc;

// ExportTraceServiceRequest
const REQ_RESOURCE_SPANS: u32 = 1;
// ResourceSpans
const RS_RESOURCE: u32 = 1;
const RS_SCOPE_SPANS: u32 = 2;
// Resource
const RES_ATTRIBUTES: u32 = 1;
// ScopeSpans
const SS_SCOPE: u32 = 1;
const SS_SPANS: u32 = 2;
// InstrumentationScope
const IS_NAME: u32 = 1;
// Span
const S_TRACE_ID: u32 = 1;
const S_SPAN_ID: u32 = 2;
const S_TRACE_STATE: u32 = 3;
const S_PARENT_SPAN_ID: u32 = 4;
const S_NAME: u32 = 5;
const S_KIND: u32 = 6;
const S_START: u32 = 7;
const S_END: u32 = 8;
const S_ATTRIBUTES: u32 = 9;
const S_EVENTS: u32 = 11;
const S_STATUS: u32 = 15;
const S_FLAGS: u32 = 16;
// Span.Event
const E_TIME: u32 = 1;
const E_NAME: u32 = 2;
const E_ATTRIBUTES: u32 = 3;
// Status
const ST_MESSAGE: u32 = 2;
const ST_CODE: u32 = 3;
// KeyValue
const KV_KEY: u32 = 1;
const KV_VALUE: u32 = 2;
// AnyValue
const AV_STRING: u32 = 1;
const AV_BOOL: u32 = 2;
const AV_INT: u32 = 3;
const AV_DOUBLE: u32 = 4;
// ExportTraceServiceResponse / ExportTracePartialSuccess
const RESP_PARTIAL_SUCCESS: u32 = 1;
const PS_REJECTED_SPANS: u32 = 1;

/// `Span.SpanKind`.
pub(crate) const KIND_INTERNAL: u64 = 1;
pub(crate) const KIND_SERVER: u64 = 2;
pub(crate) const KIND_CLIENT: u64 = 3;
pub(crate) const KIND_PRODUCER: u64 = 4;
pub(crate) const KIND_CONSUMER: u64 = 5;
/// `Status.StatusCode`.
pub(crate) const STATUS_UNSET: u64 = 0;
pub(crate) const STATUS_OK: u64 = 1;
pub(crate) const STATUS_ERROR: u64 = 2;

/// An attribute's value.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Value {
    Str(String),
    Int(i64),
    Double(f64),
    Bool(bool),
}

impl Value {
    pub(crate) fn as_text(&self) -> String {
        match self {
            Value::Str(s) => s.clone(),
            Value::Int(v) => v.to_string(),
            Value::Double(v) => v.to_string(),
            Value::Bool(v) => v.to_string(),
        }
    }

    /// Bytes it holds (what the exporter's memory counts).
    fn heap(&self) -> usize {
        match self {
            Value::Str(s) => s.len(),
            _ => 0,
        }
    }
}

/// Attributes; a key is a field's name (static) but for the resource's.
pub(crate) type Attrs = Vec<(Cow<'static, str>, Value)>;

/// A span event.
#[derive(Debug)]
pub(crate) struct SpanEvent {
    pub(crate) time: u64,
    pub(crate) name: Cow<'static, str>,
    pub(crate) attrs: Attrs,
    /// The event was at ERROR level.
    pub(crate) error: bool,
}

/// A finished span, as sent.
#[derive(Debug)]
pub(crate) struct Span {
    pub(crate) trace_id: [u8; 16],
    pub(crate) span_id: u64,
    pub(crate) parent: u64,
    pub(crate) flags: u8,
    /// Its trace's W3C `tracestate`, shared with the trace's other spans.
    pub(crate) trace_state: Option<Arc<str>>,
    pub(crate) name: Cow<'static, str>,
    /// The instrumentation scope (the `tracing` target).
    pub(crate) scope: &'static str,
    pub(crate) kind: u64,
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) attrs: Attrs,
    pub(crate) events: Vec<SpanEvent>,
    pub(crate) status: u64,
    pub(crate) status_message: String,
}

impl Span {
    /// An estimate of the memory it holds, for the session's budget (a
    /// `tracestate` shared with other spans counted with each: a bound).
    pub(crate) fn bytes(&self) -> usize {
        let attrs = |a: &Attrs| {
            a.iter()
                .map(|(k, v)| k.len() + v.heap() + 48)
                .sum::<usize>()
        };
        std::mem::size_of::<Span>()
            + self.trace_state.as_ref().map_or(0, |t| t.len())
            + self.name.len()
            + self.status_message.len()
            + attrs(&self.attrs)
            + self
                .events
                .iter()
                .map(|e| std::mem::size_of::<SpanEvent>() + e.name.len() + attrs(&e.attrs))
                .sum::<usize>()
    }
}

fn key_values<K: AsRef<str>>(buf: &mut Vec<u8>, field: u32, attrs: &[(K, Value)]) {
    for (k, v) in attrs {
        nested(buf, field, |kv| {
            string(kv, KV_KEY, k.as_ref());
            nested(kv, KV_VALUE, |av| match v {
                Value::Str(s) => string(av, AV_STRING, s),
                Value::Bool(b) => uint(av, AV_BOOL, *b as u64),
                Value::Int(i) => int(av, AV_INT, *i),
                Value::Double(d) => double(av, AV_DOUBLE, *d),
            });
        });
    }
}

fn span(buf: &mut Vec<u8>, s: &Span) {
    bytes(buf, S_TRACE_ID, &s.trace_id);
    bytes(buf, S_SPAN_ID, &s.span_id.to_be_bytes());
    if let Some(state) = &s.trace_state {
        string(buf, S_TRACE_STATE, state);
    }
    if s.parent != 0 {
        bytes(buf, S_PARENT_SPAN_ID, &s.parent.to_be_bytes());
    }
    string(buf, S_NAME, &s.name);
    uint(buf, S_KIND, s.kind);
    fixed64(buf, S_START, s.start);
    fixed64(buf, S_END, s.end);
    key_values(buf, S_ATTRIBUTES, &s.attrs);
    for e in &s.events {
        nested(buf, S_EVENTS, |ev| {
            fixed64(ev, E_TIME, e.time);
            string(ev, E_NAME, &e.name);
            key_values(ev, E_ATTRIBUTES, &e.attrs);
        });
    }
    if s.status != STATUS_UNSET {
        nested(buf, S_STATUS, |st| {
            if !s.status_message.is_empty() {
                string(st, ST_MESSAGE, &s.status_message);
            }
            uint(st, ST_CODE, s.status);
        });
    }
    // fixed32: the W3C flags in the low byte.
    crate::encode::protowire::tag(buf, S_FLAGS, 5);
    buf.extend_from_slice(&(s.flags as u32).to_le_bytes());
}

/// An `ExportTraceServiceRequest` of `spans` (one `ScopeSpans` per scope,
/// in the order scopes first appear) from the resource `resource`.
pub(crate) fn export_request(resource: &[(String, Value)], spans: &[Span]) -> Vec<u8> {
    let mut scopes: Vec<&'static str> = Vec::new();
    for s in spans {
        if !scopes.contains(&s.scope) {
            scopes.push(s.scope);
        }
    }
    let mut buf = Vec::with_capacity(256 * spans.len() + 256);
    nested(&mut buf, REQ_RESOURCE_SPANS, |rs| {
        nested(rs, RS_RESOURCE, |r| key_values(r, RES_ATTRIBUTES, resource));
        for scope in &scopes {
            nested(rs, RS_SCOPE_SPANS, |ss| {
                nested(ss, SS_SCOPE, |is| string(is, IS_NAME, scope));
                for s in spans.iter().filter(|s| s.scope == *scope) {
                    nested(ss, SS_SPANS, |b| span(b, s));
                }
            });
        }
    });
    buf
}

/// The `rejected_spans` of an `ExportTraceServiceResponse`'s partial
/// success (0 if none, or if the body is not one).
pub(crate) fn rejected_spans(body: &[u8]) -> u64 {
    field_varint(
        field_bytes(body, RESP_PARTIAL_SUCCESS).unwrap_or(&[]),
        PS_REJECTED_SPANS,
    )
    .unwrap_or(0)
}

/// Reads a varint at `*pos`.
fn read_varint(b: &[u8], pos: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *b.get(*pos)?;
        *pos += 1;
        v |= ((byte & 0x7f) as u64) << shift;
        if byte < 0x80 {
            return Some(v);
        }
    }
    None
}

/// Walks the fields of message `b`: `f(field, wire type, value or length
/// start, length)`; stops at the first malformed one.
fn walk<'a>(b: &'a [u8], mut f: impl FnMut(u32, u64, &'a [u8]) -> bool) {
    let mut pos = 0;
    while pos < b.len() {
        let Some(key) = read_varint(b, &mut pos) else {
            return;
        };
        let (field, wt) = ((key >> 3) as u32, key & 7);
        let (v, body): (u64, &'a [u8]) = match wt {
            0 => match read_varint(b, &mut pos) {
                Some(v) => (v, &[]),
                None => return,
            },
            1 | 5 => {
                let n = if wt == 1 { 8 } else { 4 };
                let Some(s) = b.get(pos..pos + n) else { return };
                pos += n;
                (0, s)
            }
            2 => {
                let Some(n) = read_varint(b, &mut pos) else {
                    return;
                };
                let Some(end) = pos.checked_add(n as usize).filter(|&e| e <= b.len()) else {
                    return;
                };
                let s = &b[pos..end];
                pos = end;
                (0, s)
            }
            _ => return,
        };
        if !f(field, v, body) {
            return;
        }
    }
}

fn field_bytes(b: &[u8], want: u32) -> Option<&[u8]> {
    let mut found = None;
    walk(b, |field, _, body| {
        if field == want {
            found = Some(body);
        }
        true
    });
    found
}

fn field_varint(b: &[u8], want: u32) -> Option<u64> {
    let mut found = None;
    walk(b, |field, v, _| {
        if field == want {
            found = Some(v);
        }
        true
    });
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_success_is_read_and_bad_bytes_read_as_none() {
        // partial_success { rejected_spans: 3, error_message: "x" }
        let body = [0x0a, 0x05, 0x08, 0x03, 0x12, 0x01, b'x'];
        assert_eq!(rejected_spans(&body), 3);
        for bad in [&[0x0a, 0x7f][..], &[0xff; 12], &[], &[0x0a]] {
            assert_eq!(rejected_spans(bad), 0);
        }
    }
}
