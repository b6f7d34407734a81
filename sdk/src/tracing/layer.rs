//! `RingtraceLayer`: ringtrace as a `tracing_subscriber::Layer`. Its span
//! state lives in ringtrace's span table (`span_table`, shared with the
//! subscriber), found through a map of the registry's span ids to table ids
//! (`id_map`: lock-free on its common path; not the registry's per-span
//! extension maps, which box every value and look it up by type). The state stays in its slot from the span's creation
//! to its close, and the slot's state is reused by a later span: a span's
//! hundreds of bytes are never moved.

use super::bridge::{self, SpanData, SpanStore};
use super::id_map::IdMap;
use super::sealed;
use super::span_table::SPAN_STATES;
use std::fmt;
use tracing::span::{Attributes, Id, Record as SpanValues};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// The `tracing` layer that records into the ringtrace session started by
/// [`LayerBuilder::build`](crate::LayerBuilder::build). Add it to a `tracing_subscriber::registry()`,
/// with or without a per-layer filter. Without a recording session it records
/// nothing.
pub struct RingtraceLayer {
    spans: SpanMap,
}

impl RingtraceLayer {
    /// Spans not recorded because more spans were alive at once than the
    /// span table holds (process-wide count, the subscriber's spans
    /// included: one table holds the spans of both). The registry still has
    /// such spans; ringtrace records nothing of them.
    #[deprecated(
        since = "0.1.0",
        note = "every loss is in `Stats`: read `Stats::spans_not_stored`, returned by `TraceGuard::stop`"
    )]
    pub fn spans_not_stored() -> u64 {
        super::spans_not_stored()
    }
}

impl fmt::Debug for RingtraceLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RingtraceLayer").finish_non_exhaustive()
    }
}

/// The layer's live spans: the registry's span ids (unique among its live
/// spans, reused after a close, when the entry is removed) to ids in
/// `SPAN_STATES`; one map per layer, hence per registry.
struct SpanMap {
    ids: IdMap,
}

impl SpanMap {
    fn new() -> SpanMap {
        SpanMap { ids: IdMap::new() }
    }

    /// Records span `id` of call site `info` (its category is on): its
    /// state is made in a slot of `SPAN_STATES`, fields visited there
    /// (before the map is written: a `Debug` impl may make spans).
    #[inline]
    fn insert(&self, id: u64, attrs: &Attributes<'_>, info: &'static bridge::SiteInfo) {
        let Some(slot) = SPAN_STATES.insert(attrs.metadata(), |state| {
            bridge::new_span_with(attrs, info, state)
        }) else {
            return; // over 10^9 spans alive: not recorded (the table counts it)
        };
        if let Some(old) = self.ids.insert(id, slot) {
            free(old); // a stale entry (a close this layer did not see)
        }
    }

    /// The table id of span `id`, if it is recorded.
    #[inline]
    fn slot(&self, id: u64) -> Option<u64> {
        self.ids.get(id)
    }

    /// Span `id` closed; `settled`: its state has nothing left to write or
    /// to count (`bridge::close`), so its slot goes back unlocked.
    #[inline]
    fn remove(&self, id: u64, settled: bool) {
        if let Some(slot) = self.ids.remove(id) {
            if settled {
                SPAN_STATES.recycle(slot); // the map entry was its only way in
            } else {
                free(slot);
            }
        }
    }
}

/// Frees a span's slot; its state stays there for the next span if it
/// owns no heap memory (`SpanData::reusable`), else it is dropped.
fn free(slot: u64) {
    SPAN_STATES.release(slot, |_| false, SpanData::reusable);
}

impl SpanStore for SpanMap {
    #[inline]
    fn with_data<R>(&self, id: &Id, f: impl FnOnce(&mut SpanData) -> R) -> Option<R> {
        let slot = self.slot(id.into_u64())?;
        SPAN_STATES
            .with(slot, |e| e.state.as_mut().map(f))
            .flatten()
    }
}

/// The callbacks, out of line and not generic: compiled once, here, so the
/// registry's and the per-layer filter's code around each call (instantiated
/// in the user's crate) stays small enough to be inlined.
impl RingtraceLayer {
    #[inline(never)]
    fn new_span(&self, attrs: &Attributes<'_>, id: &Id) {
        // The call site is looked up once, for the check and the state.
        if let Some(info) = bridge::enabled_site(attrs.metadata()) {
            self.spans.insert(id.into_u64(), attrs, info);
        }
    }

    #[inline(never)]
    fn enter(&self, id: &Id) {
        bridge::enter(&self.spans, id, false);
    }

    #[inline(never)]
    fn exit(&self, id: &Id) {
        bridge::exit(&self.spans, id);
    }

    #[inline(never)]
    fn close(&self, id: &Id) {
        let settled = bridge::close(&self.spans, id);
        self.spans.remove(id.into_u64(), settled);
    }
}

impl<S> Layer<S> for RingtraceLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    #[inline]
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _ctx: Context<'_, S>) {
        self.new_span(attrs, id);
    }

    fn on_record(&self, id: &Id, values: &SpanValues<'_>, _ctx: Context<'_, S>) {
        bridge::record(&self.spans, id, values);
    }

    fn on_follows_from(&self, id: &Id, follows: &Id, _ctx: Context<'_, S>) {
        bridge::follows_from(&self.spans, id, follows);
    }

    #[inline]
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        bridge::event(event);
    }

    #[inline]
    fn on_enter(&self, id: &Id, _ctx: Context<'_, S>) {
        self.enter(id);
    }

    #[inline]
    fn on_exit(&self, id: &Id, _ctx: Context<'_, S>) {
        self.exit(id);
    }

    #[inline]
    fn on_close(&self, id: Id, _ctx: Context<'_, S>) {
        self.close(&id);
    }
}

impl sealed::FromSession for RingtraceLayer {
    fn from_session() -> Self {
        RingtraceLayer {
            spans: SpanMap::new(),
        }
    }
}
