//! ringtrace as a `tracing` [`Subscriber`] of its own: the same recording as
//! the [layer](crate::Builder::layer), without `tracing-subscriber`'s registry.
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
//! cannot be added to it; use [`Builder::layer`](crate::Builder::layer) next to them. Filters
//! that need no registry compose as usual with
//! `tracing_subscriber::prelude::SubscriberExt::with`: `LevelFilter`,
//! `Targets`, `EnvFilter`, `filter_fn`.

#![forbid(unsafe_code)]

use super::bridge::{self, SpanData, SpanStore};
use super::sample::{Sampler, UNSAMPLED};
use crate::session::SlowRule;
// Live spans of every `RingtraceSubscriber` (ids are process-unique): its span
// ids are ids of the span table.
use super::span_table::{Release, SPAN_STATES as SPANS};
use std::fmt;
use std::sync::Arc;
use tracing::span::{Attributes, Id, Record as SpanValues};
use tracing::subscriber::Interest;
use tracing::{Event, Metadata, Subscriber};
use tracing_core::span::Current;

/// The id given to a span when the table is full (over 10^9 spans alive at
/// once): such a span is not recorded, and counted (by the table) in
/// [`Stats::spans_not_stored`](crate::Stats::spans_not_stored).
const NOT_STORED: u64 = u64::MAX;

/// The `tracing` subscriber that records into the ringtrace session started
/// by [`Builder::subscriber`](crate::Builder::subscriber). Set it as the
/// default (`tracing::subscriber::set_global_default`), alone or with
/// filters added by `.with(..)`. Without a recording session it records
/// nothing. A span or event whose category is off is not recorded. If its
/// category was off when `tracing` last asked about its call site, it is
/// disabled for `tracing` (`enabled` answers false, as a filter would:
/// `Span::current()` inside such a span is its parent); else `tracing` still
/// makes it, and ringtrace records nothing of it.
pub struct RingtraceSubscriber {
    /// Whole-request sampling, if configured.
    sampler: Option<Arc<Sampler>>,
    /// Slow spans captured, if configured.
    slow: Option<Arc<SlowRule>>,
    /// Every slice of a span carries all its fields, not only its first.
    fields_every_slice: bool,
}

impl super::sealed::FromSession for RingtraceSubscriber {
    fn from_session(setup: super::sealed::Setup) -> Self {
        RingtraceSubscriber {
            sampler: setup.sampler,
            slow: setup.slow,
            fields_every_slice: setup.fields_every_slice,
        }
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
        if id.into_u64() & UNSAMPLED != 0 {
            return None; // not kept: nothing recorded
        }
        SPANS
            .with(id.into_u64(), |e| e.state.as_mut().map(f))
            .flatten()
    }

    #[inline]
    fn fields_every_slice(&self) -> bool {
        self.fields_every_slice
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
        //
        // With sampling every site is `sometimes`: whether a span or event
        // is made also depends on the request it is in (`left_out`).
        if self.sampler.is_none() && bridge::enabled(meta) {
            Interest::always()
        } else {
            Interest::sometimes()
        }
    }

    fn enabled(&self, meta: &Metadata<'_>) -> bool {
        match &self.sampler {
            None => bridge::enabled_any(meta),
            Some(sampler) => enabled_sampled(sampler, meta),
        }
    }

    fn new_span(&self, attrs: &Attributes<'_>) -> Id {
        if let Some(sampler) = &self.sampler {
            if !kept(sampler, attrs) {
                return unkept_id(attrs.metadata());
            }
        }
        match SPANS.insert(attrs.metadata(), |state| {
            bridge::new_span_into(attrs, state)
        }) {
            Some(id) => {
                #[cfg(feature = "otlp")]
                if bridge::otel::active() {
                    let parent = bridge::otel::parent_of(attrs.parent(), attrs.is_contextual());
                    let ids = bridge::otel::new_ids(self, attrs, parent);
                    self.with_data(&Id::from_u64(id), |d| bridge::otel::set_ids(d, ids));
                }
                Id::from_u64(id)
            }
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
        if self.sampler.is_some() {
            let parent = match event.parent() {
                Some(p) => Some(p.into_u64()),
                None if event.is_contextual() => bridge::current_entered(),
                None => None,
            };
            if parent.is_some_and(|p| p & UNSAMPLED != 0) {
                return; // under a root not kept
            }
        }
        bridge::event(self, event);
    }

    #[inline]
    fn enter(&self, span: &Id) {
        // Each way is out of line: `enter` itself is a test and a jump.
        if span.into_u64() & UNSAMPLED != 0 {
            enter_unkept(span);
        } else {
            self.enter_kept(span);
        }
    }

    #[inline]
    fn exit(&self, span: &Id) {
        if span.into_u64() & UNSAMPLED != 0 {
            bridge::exit_unrecorded(self, span);
        } else {
            self.exit_kept(span);
        }
    }

    fn clone_span(&self, id: &Id) -> Id {
        if id.into_u64() & UNSAMPLED == 0 {
            SPANS.with(id.into_u64(), |e| e.refs += 1);
        }
        id.clone()
    }

    fn try_close(&self, id: Id) -> bool {
        if id.into_u64() & UNSAMPLED != 0 {
            // Not kept: nothing is kept of it, no handle is counted (each
            // drop of one closes it for the layers on this subscriber,
            // which see nothing of it that a close could end).
            return true;
        }
        if let Some(rule) = &self.slow {
            // The last handle: a slow span asks for a capture, once its
            // close is written (its async range ends in the window).
            let last = SPANS
                .with(id.into_u64(), |e| match (&e.state, e.meta) {
                    (Some(d), Some(m)) if e.refs == 1 => Some((m, d.created())),
                    _ => None,
                })
                .flatten();
            let closed = self.release(id);
            if let Some((meta, created)) = last {
                super::slow::closed(rule, meta, created);
            }
            return closed;
        }
        self.release(id)
    }

    fn current_span(&self) -> Current {
        let current = bridge::current_entered().and_then(|id| {
            let meta = if id & UNSAMPLED != 0 {
                unkept_site(id).map(|site| site.meta())
            } else {
                SPANS.with(id, |e| e.meta).flatten()
            };
            meta.map(|m| (id, m))
        });
        match current {
            Some((id, meta)) => Current::new(Id::from_u64(id), meta),
            None => Current::none(),
        }
    }
}

impl RingtraceSubscriber {
    /// The OpenTelemetry ids of span `id`, if it has any, and its trace's
    /// `tracestate`, for an outgoing request (`bridge::otel::inject`).
    #[cfg(feature = "otlp")]
    pub(crate) fn otel_inject(
        &self,
        id: &Id,
        bind: bool,
    ) -> Option<(bridge::otel::OtelIds, Option<crate::context::TraceState>)> {
        self.with_data(id, |d| bridge::otel::inject(d, bind))
            .flatten()
    }

    /// `enter` of a span sampling kept (or no sampling): out of line, so
    /// that a span not kept does not pay its frame.
    #[inline(never)]
    fn enter_kept(&self, span: &Id) {
        // With sampling, its site learns whether its spans stay nested.
        let nested = self
            .sampler
            .as_ref()
            .map(|_| bridge::current_entered().is_some_and(|top| top & UNSAMPLED == 0));
        bridge::enter(self, span, true, 0, nested);
    }

    #[inline(never)]
    fn exit_kept(&self, span: &Id) {
        bridge::exit(self, span);
    }

    /// Drops a handle of a kept span; true if it was the last. The last
    /// one writes what closing the span writes (its async range's end,
    /// flows, its OTEL record) under the slot's lock, then frees the slot,
    /// its state settled in place for the next span (not moved out and
    /// dropped) unless it holds heap memory.
    #[inline]
    fn release(&self, id: Id) -> bool {
        let close = |d: &mut SpanData| {
            if d.must_close() {
                bridge::close_state(d);
            }
        };
        matches!(
            SPANS.release(id.into_u64(), close, SpanData::settle),
            Release::Freed
        )
    }
}

/// With sampling: whether a span or event of `meta` about to be made is
/// disabled (`enabled` answers false: `tracing` makes nothing of it). It is
/// when the innermost span entered on the thread is of a request not kept,
/// and it is an event, or a span whose site's spans have always stayed
/// nested where they were made (not a root `sample_roots` names): whatever
/// is made inside it finds the decision on that span. A span of a site seen
/// entered alone (moved to another task) is made, and marked, so that it
/// carries the decision wherever it goes.
///
/// `enabled` with sampling: that, and whether the site's category is on
/// (one look-up of the site; none for an event under a request not kept).
#[inline]
fn enabled_sampled(sampler: &Sampler, meta: &Metadata<'_>) -> bool {
    let under = bridge::current_entered().is_some_and(|top| top & UNSAMPLED != 0);
    if under && meta.is_event() {
        return false;
    }
    let addr = meta as *const Metadata<'_> as usize;
    match bridge::site_at(addr) {
        // Not seen yet: made, and checked again with its `'static` metadata.
        None => true,
        Some(site) => site.is_on() && !(under && site.stays_nested() && !sampler.names(meta)),
    }
}

/// Bits of the id of a span not kept that hold its metadata's address
/// (user-space addresses fit in 48 bits on every 64-bit target Rust
/// supports with 4-level paging; an address above, never seen, is left out:
/// such a span's `Span::current()` is then none).
const ADDR_BITS: u32 = 48;

/// The bit of the id of a span not kept whose site was seen, when the id
/// was made, with spans entered alone (`SiteInfo::moves`,
/// which stays true once it is): its enters have nothing more to teach the
/// site, and skip looking it up (a request's root is such a span).
const SITE_MOVES: u64 = 1 << 62;

thread_local! {
    /// The thread's count of spans not kept: 14 bits of it in their ids.
    static UNKEPT_SEQ: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// The id of a new span not kept: [`UNSAMPLED`], [`SITE_MOVES`] if its
/// site moves, 14 bits of the thread's count of them, its metadata's
/// address. Nothing else is kept of it: no
/// slot, no handle count (the span table is not touched): what is made
/// inside it needs only the mark, and `Span::current()` inside it the
/// metadata, found from the address through the site it was made at. Two
/// such spans of one site alive at once share an id only if 2^14 others
/// were made on the thread between them (or on two threads at the same
/// count), which changes nothing: nothing is kept under the id.
#[inline]
fn unkept_id(meta: &'static Metadata<'static>) -> Id {
    // Made, for `current_span` and `observe_unkept`.
    let moves = if bridge::site_of(meta).moves() {
        SITE_MOVES
    } else {
        0
    };
    let addr = meta as *const Metadata<'static> as usize as u64;
    let addr = if addr >> ADDR_BITS == 0 { addr } else { 0 };
    let seq = UNKEPT_SEQ
        .try_with(|s| {
            let n = s.get().wrapping_add(1);
            s.set(n);
            n
        })
        .unwrap_or(0);
    Id::from_u64(UNSAMPLED | moves | (seq & 0x3fff) << ADDR_BITS | addr)
}

/// The site a span not kept (its id) was made at.
#[inline]
fn unkept_site(id: u64) -> Option<&'static bridge::SiteInfo> {
    bridge::site_at((id & ((1 << ADDR_BITS) - 1)) as usize)
}

/// A span not kept is entered: only remembered, for `current_span` and
/// the spans and events made inside it (no state, clock or ring).
#[inline(never)]
fn enter_unkept(span: &Id) {
    observe_unkept(span);
    bridge::enter_unrecorded(span, 0);
}

/// A span not kept is entered: its site learns whether it is entered inside
/// a span of a request not kept (its spans stay nested) or not.
#[inline]
fn observe_unkept(span: &Id) {
    if span.into_u64() & SITE_MOVES != 0 {
        return; // it has nothing more to learn
    }
    if let Some(site) = unkept_site(span.into_u64()) {
        if !site.moves() {
            let nested = bridge::current_entered().is_some_and(|top| top & UNSAMPLED != 0);
            site.observe_enter(nested);
        }
    }
}

/// Whether a new span is kept: a root as `sampler` decides, any other span
/// as its parent was (a parent ringtrace does not record because its
/// category is off was decided all the same, and passes its decision on).
#[inline]
fn kept(sampler: &Sampler, attrs: &Attributes<'_>) -> bool {
    let parent = match attrs.parent() {
        Some(p) => Some(p.into_u64()),
        None if attrs.is_contextual() => bridge::current_entered(),
        None => None,
    };
    match parent {
        Some(p) => p & UNSAMPLED == 0,
        None => sampler.keep_root(attrs),
    }
}
