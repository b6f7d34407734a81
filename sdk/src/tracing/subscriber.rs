//! ringtrace as a `tracing` [`Subscriber`] of its own: the same recording as
//! the [layer](crate::layer()), without `tracing-subscriber`'s registry.
//!
//! The registry keeps, for every span, its parent, its metadata, a map of
//! extensions for each layer and a span stack per thread; through a layer,
//! that bookkeeping costs more than ringtrace's own recording. This
//! subscriber keeps only what ringtrace needs: a slab slot per live span
//! (its handle count, metadata and recorded state) and the thread's stack of
//! entered spans. Spans and events become exactly the same slices, async
//! ranges, flows and instants as through the layer (see its docs).
//!
//! What it gives up: it does not implement `LookupSpan`, so layers that read
//! the registry (`tracing_subscriber::fmt`, `tracing-opentelemetry`, ...)
//! cannot be added to it; use [`layer()`](crate::layer()) next to them. Filters
//! that need no registry compose as usual with
//! `tracing_subscriber::prelude::SubscriberExt::with`: `LevelFilter`,
//! `Targets`, `EnvFilter`, `filter_fn`.

#![forbid(unsafe_code)]

use super::bridge::{self, SpanData, SpanStore};
// Live spans of every `RingtraceSubscriber` (ids are process-unique): its span
// ids are ids of the span table.
use super::span_table::{Release, SPAN_STATES as SPANS};
use std::fmt;
use tracing::span::{Attributes, Id, Record as SpanValues};
use tracing::subscriber::Interest;
use tracing::{Event, Metadata, Subscriber};
use tracing_core::span::Current;

/// The id given to a span when the table is full (over 10^9 spans alive at
/// once): such a span is not recorded, and counted (by the table) in
/// [`Stats::spans_not_stored`](crate::Stats::spans_not_stored).
const NOT_STORED: u64 = u64::MAX;

/// The `tracing` subscriber that records into the ringtrace session started
/// by [`SubscriberBuilder::build`](crate::SubscriberBuilder). Set it as the
/// default (`tracing::subscriber::set_global_default`), alone or with
/// filters added by `.with(..)`. Without a recording session it records
/// nothing. A span or event whose category is off is not recorded. If its
/// category was off when `tracing` last asked about its call site, it is
/// disabled for `tracing` (`enabled` answers false, as a filter would:
/// `Span::current()` inside such a span is its parent); else `tracing` still
/// makes it, and ringtrace records nothing of it.
pub struct RingtraceSubscriber {
    _private: (),
}

impl RingtraceSubscriber {
    /// Spans not recorded because more spans were alive at once than the
    /// span table holds (process-wide count, the layer's spans included:
    /// one table holds both). Such spans are still valid `tracing` spans:
    /// entering, recording and closing them do nothing.
    #[deprecated(
        since = "0.1.0",
        note = "every loss is in `Stats`: read `Stats::spans_not_stored`, returned by `TraceGuard::stop`"
    )]
    pub fn spans_not_stored() -> u64 {
        super::spans_not_stored()
    }
}

impl super::sealed::FromSession for RingtraceSubscriber {
    fn from_session() -> Self {
        RingtraceSubscriber { _private: () }
    }
}

impl fmt::Debug for RingtraceSubscriber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RingtraceSubscriber")
            .finish_non_exhaustive()
    }
}

impl SpanStore for RingtraceSubscriber {
    #[inline]
    fn with_data<R>(&self, id: &Id, f: impl FnOnce(&mut SpanData) -> R) -> Option<R> {
        SPANS
            .with(id.into_u64(), |e| e.state.as_mut().map(f))
            .flatten()
    }
}

impl Subscriber for RingtraceSubscriber {
    fn register_callsite(&self, meta: &'static Metadata<'static>) -> Interest {
        // `tracing` caches this answer in the call site, and both answers
        // stay true whatever is switched later, so nothing has `tracing` ask
        // again: a site whose category is on (`always`) skips `enabled`, and
        // every callback checks the category itself (one load); one whose
        // category is off, or that runs before a session starts, is asked
        // at each span and event (`sometimes`: `enabled`, which answers from
        // the thread's site cache). `never` would stay wrong once the
        // category is turned on, and having `tracing` rebuild its cache from
        // ringtrace is not sound: it asks only the calling thread's
        // dispatcher, and may call back into other layers that call
        // ringtrace.
        if bridge::enabled(meta) {
            Interest::always()
        } else {
            Interest::sometimes()
        }
    }

    fn enabled(&self, meta: &Metadata<'_>) -> bool {
        bridge::enabled_any(meta)
    }

    fn new_span(&self, attrs: &Attributes<'_>) -> Id {
        match SPANS.insert(attrs.metadata(), |state| {
            bridge::new_span_into(attrs, state)
        }) {
            Some(id) => Id::from_u64(id),
            None => Id::from_u64(NOT_STORED),
        }
    }

    fn record(&self, span: &Id, values: &SpanValues<'_>) {
        bridge::record(self, span, values);
    }

    fn record_follows_from(&self, span: &Id, follows: &Id) {
        bridge::follows_from(self, span, follows);
    }

    fn event(&self, event: &Event<'_>) {
        bridge::event(event);
    }

    fn enter(&self, span: &Id) {
        bridge::enter(self, span, true);
    }

    fn exit(&self, span: &Id) {
        bridge::exit(self, span);
    }

    fn clone_span(&self, id: &Id) -> Id {
        SPANS.with(id.into_u64(), |e| e.refs += 1);
        id.clone()
    }

    fn try_close(&self, id: Id) -> bool {
        match SPANS.release(id.into_u64(), SpanData::must_close, SpanData::reusable) {
            Release::Alive => false,
            Release::Freed => true,
            Release::MustClose => {
                // The last handle: no other can appear, so the span stays as
                // it is while its close is written.
                bridge::close(self, &id);
                drop(SPANS.remove(id.into_u64()));
                true
            }
        }
    }

    fn current_span(&self) -> Current {
        let current = bridge::current_entered()
            .and_then(|id| SPANS.with(id, |e| e.meta).flatten().map(|m| (id, m)));
        match current {
            Some((id, meta)) => Current::new(Id::from_u64(id), meta),
            None => Current::none(),
        }
    }
}
