//! ringtrace as a [`tracing_subscriber::Layer`]: spans become slices, events
//! become instants, in the same per-thread rings, flusher and encoders as the
//! macros (feature `tracing`, on by default).
//!
//! ```no_run
//! use tracing_subscriber::prelude::*;
//! let (layer, _trace) = ringtrace::builder().output("trace.pftrace").layer()?;
//! tracing_subscriber::registry().with(layer).init();
//! # Ok::<(), ringtrace::Error>(())
//! ```
//!
//! # What is recorded
//!
//! | `tracing` | Perfetto | Chrome JSON |
//! | --- | --- | --- |
//! | span entered / exited | SLICE_BEGIN / SLICE_END on the thread track | `X` on the thread |
//! | span fields at creation | debug annotations of the span's first slice | `args` of its first `X` |
//! | span re-entered | a slice with the name alone (the fields: its first slice) | an `X` without `args` |
//! | `Span::record` while entered | annotations on the SLICE_END (readers merge them into the slice) | merged into the `X`'s `args` (the recorded value wins) |
//! | `Span::record` while not entered | on the next slice | on the next `X` |
//! | span on two threads or exited out of order | + an async track, creation to close | + `b`/`e` (`id2.local`) |
//! | event | INSTANT with the fields and `level` as args | `i` (`"s":"t"`) with the same args |
//! | `follows_from` | `flow_ids` on both slices | v2 `bind_id` + `flow_out`/`flow_in` on both `X`s |
//!
//! With [`span_slices(SpanSlices::Lifetime)`](crate::Builder::span_slices)
//! a span is one slice instead, from its creation to its close, on a track
//! of its own (a Perfetto async track named after the span, reused by
//! spans of that name that live after it; Chrome JSON: `b`/`e` with the
//! span's id): its fields at creation on the slice, those recorded later
//! on its end, `follows_from` on its end (Perfetto only); enters and exits
//! write nothing; events are instants on their thread as above.
//!
//! * **Names and categories.** A span's slice is named after the span; an
//!   event's instant after the event (`tracing` names events
//!   `"event file:line"` unless given `name:`). The category of both is the
//!   `target` (by default the module path, e.g. `my_app::db`), so ringtrace's
//!   category filter selects targets: `ringtrace::enable_categories(["my_app*"])`.
//!   An event carries its `message` and fields as args, and its level as the
//!   arg `level` (`"TRACE"` .. `"ERROR"`). Levels, targets and span names are
//!   filtered before ringtrace sees them by `tracing-subscriber`'s per-layer
//!   filters (`EnvFilter`, `Targets`, `LevelFilter`) with `.with_filter(..)`.
//!   A span whose category is off when it is created is not recorded at all.
//!   Through the subscriber, `tracing` caches per call site that its
//!   category is on (`Interest::always`: no `enabled` call per span or
//!   event); a site whose category is off is asked at each span and event
//!   (`enabled`, answered from the thread's site cache), so switching
//!   categories never needs `tracing`'s cache rebuilt.
//! * **Async spans.** A span is *async* once it is entered on a second
//!   thread, or exited while a span entered after it is still entered on the
//!   thread (out of stack order), or is the source or destination of a flow
//!   that no slice end could carry. From then on it also has an async track
//!   of its own with one slice from the span's creation to its close
//!   (written when found out, with the creation timestamp); each enter/exit
//!   still shows as a slice on the thread that ran it. A thread track always
//!   nests: an out-of-order exit ends the slices entered after the exiting
//!   span, ends it, and begins the others again where they were (they become
//!   async too, so their whole life stays visible on one track). Ends carry
//!   the depth of their begin, which is how encoders pair them.
//! * **Flows.** `b.follows_from(a)` gives the flow a process-unique id and
//!   binds it to the next slice end of each span (the end of its current or
//!   next enter). A span that closes with a flow still unbound (it was not
//!   entered again) carries it on its async range, which it gets then if it
//!   had none. Perfetto draws the arrow from the earlier slice to the later
//!   one. A Chrome JSON event binds one flow (v2 `bind_id`), on an `X` or a
//!   `b`, never on an `e`: a second flow of one slice, or one left for the
//!   end of an existing async range, is only in the Perfetto output.
//!
//! # Cost
//!
//! Per tracing callsite, one ringtrace `Callsite` is made (a leaked box,
//! registered like a macro's `static`), plus one per distinct set of fields
//! present (spans with `Empty` fields). A span's fields are encoded once, when
//! the span is created, into the span's slot in ringtrace's own span table
//! (out of the registry's extensions; up to 8 primitive fields inline; the
//! layer finds the slot through a map of the registry's span ids); entering
//! it the first time copies those words into the ring: no allocation, no
//! formatting, no lock but the slot's (and the map shard's); later enters
//! write the name alone (with
//! [`span_fields_every_slice(true)`](crate::Builder::span_fields_every_slice),
//! every slice carries the fields, at a copy and an encoding per enter). Primitive values are recorded as
//! they are; `Debug` and `Display` values (messages too) are formatted
//! straight into the record's words. An exit or a close looks the span up
//! only while some span has something for its end (fields recorded, flows)
//! or is async; otherwise it writes a bare END (or nothing) at once.
//!
//! Most of a span's cost through this layer is `tracing-subscriber`'s
//! registry (its span slab, parent links, extension maps and per-layer filter
//! state), not ringtrace's recording: [`Builder::subscriber`](crate::Builder::subscriber) records the same trace
//! without the registry, at a lower cost per span. The
//! measurements (against the registry alone, tracing-chrome,
//! tracing-perfetto and tracing-perfetto-sdk) and how to rerun them
//! (`benches/peers`) are in the repository's `BENCHMARKS.md`.

#![forbid(unsafe_code)]
//!
//! # The modules
//!
//! [`bridge`] turns `tracing` call sites, fields and span callbacks into
//! ringtrace records; [`layer`] (on `tracing-subscriber`'s registry) and
//! [`subscriber`] (without it) keep span state in the [`span_table`];
//! [`builder`] holds the `tracing` options of the session's `Builder`
//! (sampling, slow spans) and its finishers `layer()` and `subscriber()`,
//! which start the session and hand out either.
//!
//! Rules of this layer: it reaches the rings only through the recording API
//! (`record::registry::with_current`, `record::layout::write`); it knows no
//! encoder and no sink. `layer` and `subscriber` do not know each other: both
//! use `bridge`, and only `builder` names both.

mod bridge;
mod builder;
mod id_map;
mod layer;
mod sample;
mod slow;
mod span_table;
mod subscriber;

pub use layer::RingtraceLayer;
pub use subscriber::RingtraceSubscriber;

/// How a `tracing` span is drawn ([`Builder::span_slices`](crate::Builder::span_slices)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum SpanSlices {
    /// A slice each time the span is entered, on the track of the thread
    /// that entered it (and an async track of its own, creation to close,
    /// once it is found async: entered on a second thread, or exited out of
    /// order). Shows where each thread's time went, poll by poll.
    #[default]
    Entered,
    /// One slice per span, from its creation to its close, on a track of
    /// its own (tracks are reused: one per span alive at once, per name);
    /// enters and exits write nothing. Shows how long each request and step
    /// lived, at about half the records of [`Entered`](Self::Entered) for
    /// spans entered once.
    Lifetime,
}

/// The OpenTelemetry ids of the default dispatcher's current span, if it
/// is ringtrace's subscriber or has ringtrace's layer and the span has ids,
/// and its trace's `tracestate`, for an outgoing request: with `bind` (its
/// `traceparent` goes out), the crossing flow is bound to the span.
#[cfg(feature = "otlp")]
pub(crate) fn inject_current(
    bind: bool,
) -> Option<(bridge::otel::OtelIds, Option<crate::context::TraceState>)> {
    ::tracing::dispatcher::get_default(|d| {
        let id = d.current_span().id()?.clone();
        if let Some(s) = d.downcast_ref::<RingtraceSubscriber>() {
            return s.otel_inject(&id, bind);
        }
        d.downcast_ref::<RingtraceLayer>()?.otel_inject(&id, bind)
    })
}

/// Counts one span the table had no room for, as a full table does (tests
/// of the session's count: filling the process-wide table takes 10^9 spans).
#[cfg(test)]
pub(crate) fn count_span_not_stored() {
    span_table::SPAN_STATES.full();
}

pub(crate) mod sealed {
    use std::sync::Arc;

    /// What a layer or subscriber is built with.
    #[derive(Default)]
    pub struct Setup {
        pub(crate) sampler: Option<Arc<super::sample::Sampler>>,
        pub(crate) slow: Option<Arc<crate::session::SlowRule>>,
        /// `Builder::span_fields_every_slice`.
        pub(crate) fields_every_slice: bool,
    }

    /// Made once its session has started.
    pub trait FromSession {
        fn from_session(setup: Setup) -> Self;
    }
}
