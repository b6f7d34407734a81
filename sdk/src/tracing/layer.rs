//! `RingtraceLayer`: ringtrace as a `tracing_subscriber::Layer`. Its span
//! state lives in ringtrace's span table (`span_table`, shared with the
//! subscriber), found through a map of the registry's span ids to table ids
//! (`id_map`: lock-free on its common path; not the registry's per-span
//! extension maps, which box every value and look it up by type). The state stays in its slot from the span's creation
//! to its close, and the slot's state is reused by a later span: a span's
//! hundreds of bytes are never moved.

use super::bridge::{self, SpanData, SpanStore};
use super::id_map::IdMap;
use super::sample::{is_unsampled_slot, unsampled_site, unsampled_slot, Sampler};
use super::sealed;
use super::span_table::SPAN_STATES;
use crate::session::SlowRule;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tracing::span::{Attributes, Id, Record as SpanValues};
use tracing::subscriber::Interest;
use tracing::{Event, Metadata, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// The `tracing` layer that records into the ringtrace session started by
/// [`Builder::layer`](crate::Builder::layer). Add it to a `tracing_subscriber::registry()`,
/// with or without a per-layer filter. Without a recording session it records
/// nothing.
pub struct RingtraceLayer {
    spans: SpanMap,
    /// This layer among others of the process (never 0): marks the spans it
    /// puts on a thread's stack of entered spans without recording them.
    key: u64,
    /// Whole-request sampling, if configured.
    sampler: Option<Arc<Sampler>>,
    /// Slow spans captured, if configured.
    slow: Option<Arc<SlowRule>>,
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
    /// Every slice of a span carries all its fields, not only its first.
    fields_every_slice: bool,
}

impl SpanMap {
    fn new(fields_every_slice: bool) -> SpanMap {
        SpanMap {
            ids: IdMap::new(),
            fields_every_slice,
        }
    }

    /// Marks span `id` as one ringtrace records nothing of: not kept
    /// ([`unsampled_slot`]), or kept with its category off
    /// ([`KEPT_OFF_SLOT`], so that its children know they are kept).
    #[inline]
    fn mark_unsampled(&self, id: u64, meta: &'static Metadata<'static>) {
        // Its site is made (if it was not), to learn where its spans are
        // entered (`RingtraceLayer::enter`).
        let _ = bridge::site_of(meta);
        self.mark(id, unsampled_slot(meta));
    }

    #[inline]
    fn mark(&self, id: u64, marker: u64) {
        if let Some(old) = self.ids.insert(id, marker) {
            free(old);
        }
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
        #[cfg(feature = "otlp")]
        if bridge::otel::active() {
            let parent = bridge::otel::parent_of(attrs.parent(), attrs.is_contextual());
            let ids = bridge::otel::new_ids(self, attrs, parent);
            self.with_data(&Id::from_u64(id), |d| bridge::otel::set_ids(d, ids));
        }
    }

    /// The table id of span `id`, if it is recorded.
    #[inline]
    fn slot(&self, id: u64) -> Option<u64> {
        self.ids.get(id)
    }

    /// Span `id` closes: its entry leaves the map, then what closing it
    /// writes (`bridge::close_state`) is written and its slot freed under
    /// one lock; when no span has anything to write on close, its slot
    /// goes back without its lock.
    #[inline]
    fn close(&self, id: u64) {
        let Some(slot) = self.ids.remove(id) else {
            return;
        };
        if is_marker(slot) {
            return;
        }
        if bridge::close_is_idle() {
            SPAN_STATES.recycle(slot); // the map entry was its only way in
        } else {
            SPAN_STATES.release(slot, bridge::close_state, SpanData::settle);
        }
    }

    /// Span `id`, which recorded nothing, closed: its marker leaves the map.
    #[inline]
    fn remove_marker(&self, id: u64) {
        if let Some(slot) = self.ids.remove(id) {
            if !is_marker(slot) {
                free(slot);
            }
        }
    }
}

/// What the map holds for a span kept whose category is off: it has no
/// slot, but its children are kept.
const KEPT_OFF_SLOT: u64 = u64::MAX;

/// Whether a map value is a marker, not a span table id.
#[inline]
fn is_marker(slot: u64) -> bool {
    slot == KEPT_OFF_SLOT || is_unsampled_slot(slot)
}

/// How a new span's or an event's parent was decided.
#[derive(Clone, Copy)]
enum Parent {
    /// No parent this layer knows: a root.
    Root,
    Kept,
    Unsampled,
}

/// Frees a span's slot; its state stays there for the next span if it
/// owns no heap memory (`SpanData::settle`), else it is dropped.
fn free(slot: u64) {
    if is_marker(slot) {
        return;
    }
    SPAN_STATES.release(slot, |_| {}, SpanData::settle);
}

impl SpanStore for SpanMap {
    #[inline]
    fn with_data<R>(&self, id: &Id, f: impl FnOnce(&mut SpanData) -> R) -> Option<R> {
        let slot = self.slot(id.into_u64())?;
        if is_marker(slot) {
            return None;
        }
        SPAN_STATES
            .with(slot, |e| e.state.as_mut().map(f))
            .flatten()
    }

    #[inline]
    fn fields_every_slice(&self) -> bool {
        self.fields_every_slice
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

    /// `new_span` with sampling: the parent's decision, or the root's.
    #[inline(never)]
    fn new_span_sampled(&self, sampler: &Sampler, attrs: &Attributes<'_>, id: &Id, parent: Parent) {
        let keep = match parent {
            Parent::Kept => true,
            Parent::Unsampled => false,
            Parent::Root => sampler.keep_root(attrs),
        };
        if !keep {
            self.spans.mark_unsampled(id.into_u64(), attrs.metadata());
        } else if let Some(info) = bridge::enabled_site(attrs.metadata()) {
            self.spans.insert(id.into_u64(), attrs, info);
        } else {
            self.spans.mark(id.into_u64(), KEPT_OFF_SLOT);
        }
    }

    /// What a span's or event's parent (if any) was decided: the nearest
    /// ancestor this layer has an entry for (spans made before the layer
    /// existed have none).
    fn parent<S>(&self, parent: Option<Id>, ctx: &Context<'_, S>) -> Parent
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        let Some(parent) = parent else {
            return Parent::Root;
        };
        match self.spans.slot(parent.into_u64()) {
            Some(s) if is_unsampled_slot(s) => return Parent::Unsampled,
            Some(_) => return Parent::Kept,
            None => {}
        }
        let Some(span) = ctx.span(&parent) else {
            return Parent::Root;
        };
        for s in span.scope().skip(1) {
            match self.spans.slot(s.id().into_u64()) {
                Some(s) if is_unsampled_slot(s) => return Parent::Unsampled,
                Some(_) => return Parent::Kept,
                None => {}
            }
        }
        Parent::Root
    }

    /// With sampling, a span ringtrace records nothing of goes on the
    /// thread's stack of entered spans too: the stack's innermost entry then
    /// is the registry's current span, and a span or event under a root not
    /// kept is found out from it (`under_unsampled`) without asking the
    /// registry.
    #[inline(never)]
    fn enter(&self, id: &Id) {
        if self.sampler.is_some() {
            return self.enter_sampled(id);
        }
        bridge::enter(&self.spans, id, false, self.key, None);
    }

    /// [`enter`](Self::enter) with sampling: a function of its own, so that
    /// each keeps one copy of the (inlined) recording path.
    #[inline(never)]
    fn enter_sampled(&self, id: &Id) {
        // What is entered around it (the sites learn whether their spans
        // stay nested: `left_out`): one not kept, another, or none.
        let around = || bridge::innermost_entered().map(|(_, owner)| owner == self.unkept_key());
        match self.spans.slot(id.into_u64()) {
            Some(slot) if is_unsampled_slot(slot) => {
                if let Some(site) = bridge::site_at(unsampled_site(slot)) {
                    if !site.moves() {
                        site.observe_enter(around() == Some(true));
                    }
                }
                bridge::enter_unrecorded(id, self.unkept_key());
            }
            _ => bridge::enter(
                &self.spans,
                id,
                true,
                self.key,
                Some(around() == Some(false)),
            ),
        }
    }

    /// What the entries of spans not kept carry on the thread's stack of
    /// entered spans: this layer's key with the top bit (a ring session,
    /// which recorded entries carry, never has it), so that whether the
    /// innermost entry is one is read from the stack alone.
    #[inline]
    fn unkept_key(&self) -> u64 {
        self.key | 1 << 63
    }

    /// With sampling: whether a span or event of `meta` about to be made is
    /// left out of the registry (`Layer::enabled` answers false: nothing
    /// makes it). It is when the innermost span entered on the thread is of
    /// a request not kept, and it is an event, or a span whose site's spans
    /// have always stayed nested where they were made (not a root
    /// `sample_roots` names): whatever is made inside it finds the
    /// decision on that span. A span of a site seen entered alone (moved
    /// to another task) is made, and marked, so that it carries the
    /// decision wherever it goes.
    #[inline]
    fn left_out(&self, sampler: &Sampler, meta: &Metadata<'_>) -> bool {
        if !self.under_unsampled() {
            return false;
        }
        if meta.is_event() {
            return true;
        }
        let addr = meta as *const Metadata<'_> as usize;
        bridge::site_at(addr).is_some_and(|site| site.stays_nested()) && !sampler.names(meta)
    }

    /// Whether the innermost span entered on this thread (the registry's
    /// current span, with sampling) is one sampling did not keep (its entry
    /// carries [`unkept_key`](Self::unkept_key)). False when it is not
    /// known (an entry of another layer or the subscriber, whose ids are
    /// not this registry's): the caller asks the registry.
    #[inline]
    fn under_unsampled(&self) -> bool {
        bridge::innermost_entered().is_some_and(|(_, owner)| owner == self.unkept_key())
    }

    #[inline(never)]
    fn exit(&self, id: &Id) {
        bridge::exit(&self.spans, id);
    }

    #[inline(never)]
    fn close(&self, id: &Id) {
        if self.sampler.is_some() && self.spans.slot(id.into_u64()).is_some_and(is_marker) {
            self.spans.remove_marker(id.into_u64()); // nothing was recorded
            return;
        }
        let life = self.slow.as_ref().and_then(|_| {
            let slot = self.spans.slot(id.into_u64()).filter(|s| !is_marker(*s))?;
            SPAN_STATES
                .with(slot, |e| match (&e.state, e.meta) {
                    (Some(d), Some(m)) => Some((m, d.created())),
                    _ => None,
                })
                .flatten()
        });
        self.spans.close(id.into_u64());
        // A slow span asks for a capture once its close is written (its
        // async range ends in the window).
        if let (Some(rule), Some((meta, created))) = (&self.slow, life) {
            super::slow::closed(rule, meta, created);
        }
    }
}

impl<S> Layer<S> for RingtraceLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    /// With sampling, `sometimes`: `enabled` is asked at each span and
    /// event (whether it is made depends on the request it is in).
    fn register_callsite(&self, _meta: &'static Metadata<'static>) -> Interest {
        if self.sampler.is_some() {
            Interest::sometimes()
        } else {
            Interest::always()
        }
    }

    /// With sampling, false for what `left_out`
    /// leaves out of a request not kept.
    #[inline]
    fn enabled(&self, meta: &Metadata<'_>, _ctx: Context<'_, S>) -> bool {
        match &self.sampler {
            None => true,
            Some(sampler) => !self.left_out(sampler, meta),
        }
    }

    #[inline]
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        match &self.sampler {
            None => self.new_span(attrs, id),
            Some(sampler) => {
                if attrs.is_contextual() && self.under_unsampled() {
                    return self.spans.mark_unsampled(id.into_u64(), attrs.metadata());
                }
                let parent = match attrs.parent() {
                    Some(p) => Some(p.clone()),
                    None if attrs.is_contextual() => ctx.current_span().id().cloned(),
                    None => None,
                };
                let parent = self.parent(parent, &ctx);
                self.new_span_sampled(sampler, attrs, id, parent);
            }
        }
    }

    fn on_record(&self, id: &Id, values: &SpanValues<'_>, _ctx: Context<'_, S>) {
        bridge::record(&self.spans, id, values);
    }

    fn on_follows_from(&self, id: &Id, follows: &Id, _ctx: Context<'_, S>) {
        bridge::follows_from(&self.spans, id, follows);
    }

    #[inline]
    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        if self.sampler.is_some() {
            if event.is_contextual() && self.under_unsampled() {
                return; // under a root not kept
            }
            let parent = match event.parent() {
                Some(p) => Some(p.clone()),
                None if event.is_contextual() => ctx.current_span().id().cloned(),
                None => None,
            };
            if let Parent::Unsampled = self.parent(parent, &ctx) {
                return; // under a root not kept
            }
        }
        bridge::event(&self.spans, event);
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

#[cfg(feature = "otlp")]
impl RingtraceLayer {
    /// The OpenTelemetry ids of span `id` (a registry id), if it has any,
    /// and its trace's `tracestate`, for an outgoing request
    /// (`bridge::otel::inject`).
    pub(crate) fn otel_inject(
        &self,
        id: &Id,
        bind: bool,
    ) -> Option<(bridge::otel::OtelIds, Option<crate::context::TraceState>)> {
        self.spans
            .with_data(id, |d| bridge::otel::inject(d, bind))
            .flatten()
    }
}

impl sealed::FromSession for RingtraceLayer {
    fn from_session(setup: sealed::Setup) -> Self {
        /// Relaxed: only uniqueness matters.
        static NEXT_KEY: AtomicU64 = AtomicU64::new(1);
        RingtraceLayer {
            spans: SpanMap::new(setup.fields_every_slice),
            key: NEXT_KEY.fetch_add(1, Ordering::Relaxed),
            sampler: setup.sampler,
            slow: setup.slow,
        }
    }
}
