//! OpenTelemetry ids of `tracing` spans (feature `otlp`): a span's trace
//! id, span id and parent, given when it is made (from its parent, from a
//! W3C `traceparent` field on a root, or new), its trace's `tracestate`
//! (a root's `tracestate` field beside a valid `traceparent`, shared by
//! every span under it), and the OTEL records its close and the events
//! inside it write while an OTLP exporter runs
//! (`record::layout::OTEL_RECORDS`). Nothing here runs when none does.

use super::fields::{push_str, Words};
use super::{SpanData, SpanStore};
use crate::context::{TraceParent, TraceState};
use crate::record::callsite::Callsite;
use crate::record::clock::ticks;
use crate::record::layout::{
    self, FLOW_GLOBAL, FLOW_IN, KIND_END, KIND_END_ARGS, KIND_OTEL, OTEL_EVENT, OTEL_RECORDS,
    OTEL_SPAN, OTEL_TRACESTATE,
};
use crate::record::registry::{with_current, ThreadRing};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing::Event;

/// A span's OpenTelemetry identity; all zero: none (made while no exporter
/// ran, or a span not recorded).
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub(crate) struct OtelIds {
    pub(crate) trace: [u64; 2],
    pub(crate) span: u64,
    /// The parent's span id (a remote parent's for a root continuing a
    /// trace), 0 for a root.
    pub(crate) parent: u64,
    /// W3C trace flags (bit 0: sampled).
    pub(crate) flags: u8,
    /// The parent is remote (a `traceparent` field).
    pub(crate) remote: bool,
    /// A root whose trace id its first slice's end has not carried yet
    /// (an annotation `trace_id` in the file).
    pub(crate) annotate: bool,
    /// Whether its crossing flow was bound (`inject`).
    pub(crate) injected: bool,
}

impl OtelIds {
    pub(crate) fn is_set(&self) -> bool {
        self.span != 0
    }

    /// The `traceparent` of this span, as a child's remote parent.
    pub(crate) fn traceparent(&self) -> TraceParent {
        let mut trace_id = [0u8; 16];
        trace_id[..8].copy_from_slice(&self.trace[0].to_be_bytes());
        trace_id[8..].copy_from_slice(&self.trace[1].to_be_bytes());
        TraceParent {
            trace_id,
            parent_id: self.span.to_be_bytes(),
            flags: self.flags | 1,
        }
    }
}

/// Whether spans get ids now.
#[inline]
pub(crate) fn active() -> bool {
    OTEL_RECORDS.load(Ordering::Relaxed)
}

/// 64 random-looking bits, never 0: a bijection (splitmix64's finalizer)
/// of a per-thread counter (the thread's number above bit 40, so no two
/// threads count the same values) offset by a seed taken once from the
/// clock and the pid: ids do not repeat within a process and rarely
/// across, and a thread makes them without touching a shared line.
pub(crate) fn random_u64() -> u64 {
    static SEED: OnceLock<u64> = OnceLock::new();
    static THREADS: AtomicU64 = AtomicU64::new(1);
    thread_local! {
        static NEXT: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }
    let seed = *SEED.get_or_init(|| {
        crate::sys::realtime_ns() ^ (crate::sys::pid() as u64).rotate_left(40) ^ ticks()
    });
    loop {
        let n = NEXT
            .try_with(|c| {
                let mut n = c.get();
                if n == 0 {
                    n = THREADS.fetch_add(1, Ordering::Relaxed) << 40;
                }
                c.set(n + 1);
                n
            })
            // A thread being torn down: a shared count of its own range.
            .unwrap_or_else(|_| THREADS.fetch_add(1, Ordering::Relaxed) << 40);
        let mut z = seed.wrapping_add(n.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        if z != 0 {
            return z;
        }
    }
}

/// Finds a `traceparent` field's value (and, with `state_wanted`, a
/// `tracestate` field's).
#[derive(Default)]
struct FindTraceparent {
    parent: Option<TraceParent>,
    /// Whether to read a `tracestate` field.
    state_wanted: bool,
    state: Option<TraceState>,
}

impl Visit for FindTraceparent {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "traceparent" => self.parent = TraceParent::parse(value),
            "tracestate" if self.state_wanted => self.state = TraceState::parse(value),
            _ => {}
        }
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "traceparent" => self.parent = TraceParent::parse(&format!("{value:?}")),
            "tracestate" if self.state_wanted => {
                self.state = TraceState::parse(&format!("{value:?}"))
            }
            _ => {}
        }
    }
}

/// The ids of a new span whose parent (an id of `store`'s, if any) is
/// `parent`, and its trace's `tracestate`: its trace and span id follow the
/// parent's, and it shares the parent's `tracestate`; a root takes them
/// from a valid `traceparent` field (and a valid `tracestate` field beside
/// it), or starts a new trace (without a `tracestate`).
pub(crate) fn new_ids(
    store: &impl SpanStore,
    attrs: &Attributes<'_>,
    parent: Option<Id>,
) -> (OtelIds, Option<TraceState>) {
    let parent = parent.and_then(|p| {
        store
            .with_data(&p, |d| (d.otel, d.tracestate.clone()))
            .filter(|(o, _)| o.is_set())
    });
    match parent {
        Some((p, state)) => (
            OtelIds {
                trace: p.trace,
                span: random_u64(),
                parent: p.span,
                flags: p.flags,
                ..OtelIds::default()
            },
            state,
        ),
        None => {
            let fields = attrs.metadata().fields();
            let mut find = FindTraceparent::default();
            if fields.field("traceparent").is_some() {
                // Only a root that may continue a caller's trace looks
                // for its state.
                find.state_wanted = fields.field("tracestate").is_some();
                attrs.record(&mut find);
            }
            let ids = match find.parent {
                Some(tp) => OtelIds {
                    trace: [
                        u64::from_be_bytes(tp.trace_id[..8].try_into().unwrap_or_default()),
                        u64::from_be_bytes(tp.trace_id[8..].try_into().unwrap_or_default()),
                    ],
                    span: random_u64(),
                    parent: u64::from_be_bytes(tp.parent_id),
                    flags: tp.flags,
                    remote: true,
                    annotate: true,
                    injected: false,
                },
                None => OtelIds {
                    trace: [random_u64(), random_u64()],
                    span: random_u64(),
                    parent: 0,
                    flags: 1,
                    annotate: true,
                    ..OtelIds::default()
                },
            };
            // A caller's state goes only with the caller's trace.
            let state = find.state.filter(|_| ids.remote);
            (ids, state)
        }
    }
}

/// The id of the flow that joins a client's span `client_span` of trace
/// `trace` (whose `traceparent` went out) with the span of the service it
/// called (whose remote parent it is): the same in both processes, so the
/// files of both, packed, show the crossing. `FLOW_GLOBAL` set: encoders
/// do not make it process-unique.
pub(crate) fn crossing_flow(trace: [u64; 2], client_span: u64) -> u64 {
    let mut z = trace[0] ^ trace[1].rotate_left(17) ^ client_span.rotate_left(41);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z & (FLOW_GLOBAL - 1)) | FLOW_GLOBAL
}

/// Gives span `data` its ids and its trace's `tracestate` (`new_ids`): a
/// span continuing a remote parent's trace gets the crossing flow into it
/// (bound to its next slice end).
pub(crate) fn set_ids(data: &mut SpanData, (ids, state): (OtelIds, Option<TraceState>)) {
    data.tracking(|d| {
        d.otel = ids;
        d.tracestate = state;
        if ids.remote {
            d.flows.push(crossing_flow(ids.trace, ids.parent) | FLOW_IN);
        }
    });
}

/// Span `data`'s ids and its trace's `tracestate` for an outgoing request:
/// with `bind` (its `traceparent` goes out), the crossing flow out of it is
/// bound to its next slice end (once).
pub(crate) fn inject(data: &mut SpanData, bind: bool) -> Option<(OtelIds, Option<TraceState>)> {
    if !data.otel.is_set() {
        return None;
    }
    if bind && !data.otel.injected {
        data.tracking(|d| {
            d.otel.injected = true;
            d.flows.push(crossing_flow(d.otel.trace, d.otel.span));
        });
    }
    Some((data.otel, data.tracestate.clone()))
}

/// The annotation of a root's first slice end.
static TRACE_ID_SITE: Callsite = Callsite::new("otel", "trace_id", "", 0, "", &["trace_id"]);

/// Ends a root's slice at `depth` with its trace id (32 hex digits) as the
/// annotation `trace_id`.
pub(super) fn end_with_trace_id(o: &OtelIds, tr: &ThreadRing, depth: u64, ts: u64) {
    TRACE_ID_SITE.is_enabled(); // registers it: its id
    let site = TRACE_ID_SITE.id() as u64;
    let hex = format!("{:016x}{:016x}", o.trace[0], o.trace[1]);
    let mut words = Vec::with_capacity(5);
    push_str(&mut words, &hex);
    if site == 0 {
        layout::write(&tr.ring, KIND_END, depth, ts, &[], &());
    } else {
        let payload = site | depth << 24;
        layout::write(&tr.ring, KIND_END_ARGS, payload, ts, &words, &());
    }
}

/// A root's decision by its remote parent: a root with a valid
/// `traceparent` field is kept if the caller kept it (sampled flag), and
/// not if not; other roots as `user` decides (`None`: by the ratio).
pub(crate) fn parent_based(
    user: Option<Box<crate::session::Decide>>,
) -> Box<crate::session::Decide> {
    Box::new(move |attrs: &Attributes<'_>| {
        if attrs.metadata().fields().field("traceparent").is_some() {
            let mut find = FindTraceparent::default();
            attrs.record(&mut find);
            if let Some(tp) = find.parent {
                return Some(tp.sampled());
            }
        }
        user.as_ref().and_then(|d| d(attrs))
    })
}

/// The parent of a span or event as `tracing` says: explicit, or the
/// innermost span ringtrace recorded entered on this thread.
pub(crate) fn parent_of(explicit: Option<&Id>, contextual: bool) -> Option<Id> {
    match explicit {
        Some(p) => Some(p.clone()),
        None if contextual => super::current_entered().map(Id::from_u64),
        None => None,
    }
}

/// Span `data` closes at `ts`: its OTEL record, with every field's last
/// value and its trace's `tracestate` (if any: then `OTEL_TRACESTATE` is set
/// in the flags word and the text comes first among the args). The state
/// lets go of the `tracestate` (its record carries it now).
pub(super) fn write_span(data: &mut SpanData, ts: u64) {
    let o = &data.otel;
    if !o.is_set() {
        return;
    }
    let fixed = [
        data.created(),
        o.trace[0],
        o.trace[1],
        o.span,
        o.parent,
        o.flags as u64,
    ];
    let payload = data.site.id() as u64 | OTEL_SPAN << 24;
    let values = Words(data.values());
    match &data.tracestate {
        None => with_current(|tr| {
            layout::write(&tr.ring, KIND_OTEL, payload, ts, &fixed, &values);
        }),
        Some(state) => with_current(|tr| {
            let text = state.as_str();
            let mut words = Vec::with_capacity(fixed.len() + 1 + text.len().div_ceil(8));
            words.extend_from_slice(&fixed);
            words[5] |= OTEL_TRACESTATE;
            push_str(&mut words, text);
            layout::write(&tr.ring, KIND_OTEL, payload, ts, &words, &values);
        }),
    };
    data.tracestate = None;
}

/// The span id of the span (of `store`) an event is in, as `tracing`
/// says (explicit parent, or the innermost span entered); 0 if it has none.
#[inline(never)]
pub(super) fn event_span(store: &impl SpanStore, event: &Event<'_>) -> u64 {
    parent_of(event.parent(), event.is_contextual())
        .and_then(|p| store.with_data(&p, |d| d.otel.span))
        .unwrap_or(0)
}

/// The OTEL record of an event inside span `span` (its OpenTelemetry span
/// id): the fields and level its instant carries (`words`), at site `site`.
pub(super) fn write_event(tr: &ThreadRing, site: &Callsite, span: u64, ts: u64, words: &[u64]) {
    let payload = site.id() as u64 | OTEL_EVENT << 24;
    layout::write(&tr.ring, KIND_OTEL, payload, ts, &[span], &Words(words));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_ids_are_nonzero_and_distinct() {
        let threads: Vec<_> = (0..4)
            .map(|_| std::thread::spawn(|| (0..10_000).map(|_| random_u64()).collect::<Vec<_>>()))
            .collect();
        let ids: std::collections::HashSet<u64> = threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect();
        assert_eq!(ids.len(), 40_000, "distinct across threads");
        assert!(!ids.contains(&0));
    }
}
