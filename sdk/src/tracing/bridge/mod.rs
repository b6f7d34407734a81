//! What `tracing` spans and events become in ringtrace, shared by the
//! [`layer`](crate::Builder::layer) and the registry-free
//! [`subscriber`](crate::Builder::subscriber) (both keep span state in the span
//! table): call sites, field values, span state, and the records each
//! callback writes. See `layer.rs` for what is recorded.

#![forbid(unsafe_code)]

mod fields;
#[cfg(feature = "otlp")]
pub(crate) mod otel;
mod sites;
mod spans;

use crate::record::clock::ticks;
use crate::record::layout::{self, FLOW_IN, KIND_ASYNC_END, KIND_END, KIND_INSTANT, MAX_DEPTH};
use crate::record::registry::{count_implied_drop_without_ring, with_current, with_current_once};
use fields::{with_scratch, Visitor};
pub(crate) use sites::SiteInfo;
use sites::{known_site, site_info};
pub(crate) use spans::set_lifetime_slices;
pub(crate) use spans::{current_entered, innermost_entered, Inline, SpanData};
use spans::{
    extend_entered, lifetime_slices, pop_innermost, push_entered, stack_has_room, take_entered,
    thread_key, Entered, ASYNC_LIVE, END_PENDING, NEXT_FLOW_ID,
};
use std::sync::atomic::Ordering;
use tracing::span::{Attributes, Id, Record as SpanValues};
use tracing::{Event, Metadata};

/// How a span id finds its state: the subscriber's ids are span table ids,
/// the layer maps the registry's ids to them.
pub(crate) trait SpanStore {
    /// Runs `f` on the state of span `id`, if it has any.
    fn with_data<R>(&self, id: &Id, f: impl FnOnce(&mut SpanData) -> R) -> Option<R>;

    /// Whether every slice of a span carries all its fields
    /// (`Builder::span_fields_every_slice`), not only its first.
    fn fields_every_slice(&self) -> bool;
}

// ---------------------------------------------------------------------------
// Callbacks

/// A new span: its state, made in `state` (its slot of the span table: no
/// move), or `None` when its category is off (then it is not recorded at all).
#[inline]
pub(crate) fn new_span_into(attrs: &Attributes<'_>, state: &mut Option<SpanData>) {
    new_span_with(attrs, site_info(attrs.metadata()), state)
}

/// As [`new_span_into`], with the call site already looked up.
#[inline(always)]
pub(crate) fn new_span_with(
    attrs: &Attributes<'_>,
    info: &'static SiteInfo,
    state: &mut Option<SpanData>,
) {
    if !info.full.is_enabled() {
        *state = None;
        return;
    }
    let created = ticks();
    let data = match state {
        // A freed slot's state, kept (see `reusable`; a recycled one owns
        // nothing else to write or count), reset in place.
        Some(data) if !data.owns_heap() => {
            data.reset(info, created);
            data
        }
        // None, or a recycled slot's state holding heap memory: replaced.
        _ => state.insert(SpanData::new(info, created)),
    };
    if attrs.values().is_empty() {
        data.site = info.site(0); // fields declared `Empty`: no arg names
    } else {
        with_scratch(|f| {
            attrs.record(&mut Visitor(f));
            data.set_values(f);
        });
    }
    if lifetime_slices() {
        // The span's one slice begins now, with its fields (without a
        // ring, `with_current_once` counts the begin lost).
        with_current_once(|tr| data.begin_async(tr));
    }
}

/// Whether spans and events of this call site are recorded now.
pub(crate) fn enabled(meta: &'static Metadata<'static>) -> bool {
    site_info(meta).full.is_enabled()
}

/// The call site of `meta` if its spans and events are recorded now.
#[inline]
pub(crate) fn enabled_site(meta: &'static Metadata<'static>) -> Option<&'static SiteInfo> {
    let info = site_info(meta);
    info.full.is_enabled().then_some(info)
}

/// The site of `meta` (made on its first look-up).
#[inline]
pub(crate) fn site_of(meta: &'static Metadata<'static>) -> &'static SiteInfo {
    site_info(meta)
}

/// The site whose metadata is at `addr`, if it was made.
#[inline]
pub(crate) fn site_at(addr: usize) -> Option<&'static SiteInfo> {
    known_site(addr)
}

/// As [`enabled`], for metadata that may not be `'static`: a call site not
/// seen yet is let through (its span or event, whose metadata is `'static`,
/// is checked again).
pub(crate) fn enabled_any(meta: &Metadata<'_>) -> bool {
    let key = meta as *const Metadata<'_> as usize;
    known_site(key).is_none_or(|info| info.full.is_enabled())
}

/// `Span::record`: the values join the span's state.
/// The values are visited (user `Debug` impls run) before the span's state
/// is locked, and not at all for a span ringtrace keeps no state for (its
/// category was off when it was made: `tracing` makes such spans at call
/// sites it was told are always on).
pub(crate) fn record(store: &impl SpanStore, id: &Id, values: &SpanValues<'_>) {
    if store.with_data(id, |_| ()).is_none() {
        return;
    }
    with_scratch(|f| {
        values.record(&mut Visitor(f));
        if !f.ranges.is_empty() {
            store.with_data(id, |data| data.tracking(|d| d.record(f)));
        }
    });
}

/// `id.follows_from(follows)`: a flow between them.
pub(crate) fn follows_from(store: &impl SpanStore, id: &Id, follows: &Id) {
    let has = |i: &Id| store.with_data(i, |_| ()).is_some();
    if !has(id) || !has(follows) {
        return;
    }
    let flow = NEXT_FLOW_ID.fetch_add(1, Ordering::Relaxed) & !FLOW_IN;
    store.with_data(follows, |d| d.tracking(|d| d.flows.push(flow)));
    store.with_data(id, |d| d.tracking(|d| d.flows.push(flow | FLOW_IN)));
}

/// An event: an instant with its fields and level. While an OTLP exporter
/// runs, an event inside a span with OpenTelemetry ids (of `store`) is
/// also that span's OTEL event, written from the same visit of its fields.
pub(crate) fn event(store: &impl SpanStore, event: &Event<'_>) {
    let meta = event.metadata();
    let info = site_info(meta);
    if !info.full.is_enabled() {
        return;
    }
    #[cfg(feature = "otlp")]
    let otel_span = if otel::active() {
        otel::event_span(store, event)
    } else {
        0
    };
    #[cfg(not(feature = "otlp"))]
    let _ = store;
    let ts = ticks();
    with_scratch(|f| {
        event.record(&mut Visitor(f));
        let site = info.site(f.mask());
        let words = f.ordered();
        with_current_once(|tr| {
            layout::write(&tr.ring, KIND_INSTANT, site.id() as u64, ts, words, &());
            #[cfg(feature = "otlp")]
            if otel_span != 0 {
                otel::write_event(tr, site, otel_span, ts, words);
            }
        });
    });
}

/// Span `id` is entered on this thread: a slice begins. A span ringtrace
/// keeps no state for (its category was off, or sampling did not keep it)
/// goes on the thread's stack of entered spans only if `track_unrecorded`,
/// its entry marked with `owner` (the subscriber answers `Span::current()`
/// from that stack; the layer, with sampling, finds there whether the
/// registry's current span is one it did not keep).
///
/// Every begin that is not written has its end counted as lost here (the
/// end will not be written either: the exit finds the entry not recorded),
/// so that written + lost adds up to what the program recorded.
///
/// With sampling, `nested` says whether the span entered around it on this
/// thread (if any) is of the same decision (kept): the span's site learns
/// from it whether its spans stay nested ([`SiteInfo::observe_enter`]).
#[inline(always)]
pub(crate) fn enter(
    store: &impl SpanStore,
    id: &Id,
    track_unrecorded: bool,
    owner: u64,
    nested: Option<bool>,
) {
    if lifetime_slices() {
        if nested.is_none() && stack_has_room() {
            // Without sampling: the entry alone.
            push_entered(Entered {
                id: id.into_u64(),
                depth: None,
                session: owner,
            });
            return;
        }
        return enter_lifetime(store, id, owner, nested);
    }
    let mut entered = Entered {
        id: id.into_u64(),
        depth: None,
        // Replaced by the ring's session if a begin is written.
        session: owner,
    };
    // Without room to remember the entry (only past 16 deep in the thread's
    // teardown) its end could not be paired: begin and end are both lost.
    let room = stack_has_room();
    let every = store.fields_every_slice();
    let found = store.with_data(id, |data| {
        if let Some(nested) = nested {
            data.info.observe_enter(nested);
        }
        if !data.site.is_enabled() {
            return;
        }
        let ts = ticks(); // once the span is known to be recorded
        let key = thread_key();
        let wrote = with_current_once(|tr| {
            if !room {
                tr.ring.count_implied_drop();
                tr.ring.count_implied_drop();
                return;
            }
            if data.thread == 0 {
                data.thread = key;
            } else if data.thread != key {
                data.begin_async(tr); // entered on a second thread
            }
            entered.session = tr.session;
            // A begin clears the fields pending for the next end: with none
            // pending, `END_PENDING` cannot change and needs no tracking.
            let depth = if data.dirty_is_clear() {
                data.begin_slice(tr, ts, every)
            } else {
                data.tracking(|d| d.begin_slice(tr, ts, every))
            };
            match depth {
                Some(depth) => entered.depth = Some(depth),
                // The begin was dropped (and counted): so is the end.
                None => tr.ring.count_implied_drop(),
            }
        });
        if wrote.is_none() {
            // No ring (budget used up, or the thread's ring handed over at
            // its exit): the begin was counted, its end is counted here.
            count_implied_drop_without_ring();
        }
    });
    if room && (found.is_some() || track_unrecorded) {
        push_entered(entered);
    }
}

/// [`enter`] with `SpanSlices::Lifetime`: the span's slice runs from its
/// creation to its close, so an enter writes nothing and reads no clock;
/// the entry (whose exit then writes nothing either) keeps `Span::current()`
/// and sampling's marks true.
#[inline(never)]
fn enter_lifetime(store: &impl SpanStore, id: &Id, owner: u64, nested: Option<bool>) {
    if let Some(nested) = nested {
        store.with_data(id, |data| data.info.observe_enter(nested));
    }
    if stack_has_room() {
        push_entered(Entered {
            id: id.into_u64(),
            depth: None,
            session: owner,
        });
    }
}

/// Span `id`, which ringtrace records nothing of (a root not kept, or
/// under one), is entered on this thread: it goes on the stack of entered
/// spans only, without a look at its state, the clock or a ring.
/// Its entry carries `owner` (see [`enter`]).
#[inline]
pub(crate) fn enter_unrecorded(id: &Id, owner: u64) {
    let entered = Entered {
        id: id.into_u64(),
        depth: None,
        session: owner,
    };
    push_entered(entered);
}

/// Span `id` of [`enter_unrecorded`] exits on this thread.
#[inline]
pub(crate) fn exit_unrecorded(store: &impl SpanStore, id: &Id) {
    if pop_innermost(id.into_u64()).is_none() {
        exit_below(store, id); // not the innermost: spans above it may be recorded
    }
}

/// Span `id` exits on this thread: its slice ends.
#[inline]
pub(crate) fn exit(store: &impl SpanStore, id: &Id) {
    let id64 = id.into_u64();
    // The common exit: the innermost entry, in the stack's inline part.
    let Some(entry) = pop_innermost(id64) else {
        return exit_below(store, id);
    };
    let Some(depth) = entry.depth else {
        return; // its enter wrote nothing (its category was off): no clock read
    };
    end_innermost(store, id, entry.session, depth, ticks());
}

/// Ends the slice of `entry` (span `id`), the innermost entered.
#[inline(always)]
fn end_innermost(store: &impl SpanStore, id: &Id, session: u64, depth: u32, ts: u64) {
    with_current_once(|tr| {
        if tr.session == session {
            // Fast path: no span has anything for its end.
            let bare = END_PENDING.load(Ordering::Relaxed) == 0
                || store
                    .with_data(id, |d| d.tracking(|d| d.end_slice(tr, depth, ts)))
                    .is_none();
            if bare {
                let depth = depth.min(MAX_DEPTH) as u64;
                layout::write(&tr.ring, KIND_END, depth, ts, &[], &());
            }
            tr.depth.store(depth, Ordering::Relaxed);
        }
    });
}

/// [`exit`] of a span that is not the innermost entered, or is spilled:
/// its entry is taken with the entries above it.
#[cold]
#[inline(never)]
fn exit_below(store: &impl SpanStore, id: &Id) {
    let Some((entry, above)) = take_entered(id.into_u64()) else {
        return; // not entered here as far as ringtrace knows (its category was off)
    };
    if above.is_empty() {
        if let Some(depth) = entry.depth {
            end_innermost(store, id, entry.session, depth, ticks());
        }
        return;
    }
    let ts = ticks();
    let reopened = exit_out_of_order(store, id, entry, above, ts);
    extend_entered(reopened);
}

/// Whether no close has anything to write: no span is async or has flows
/// (`END_PENDING`, `ASYNC_LIVE`) and no OTLP exporter runs. Then a closed
/// span's state has nothing left to write or to count (not async, no
/// flows, no fields pending), whatever other threads do, since its own
/// changes came before its close and counted there.
#[inline]
pub(crate) fn close_is_idle() -> bool {
    #[cfg(feature = "otlp")]
    if otel::active() {
        return false;
    }
    END_PENDING.load(Ordering::Relaxed) == 0 && ASYNC_LIVE.load(Ordering::Relaxed) == 0
}

/// Span `data` closes (its last handle dropped; its caller holds its
/// slot): its OTEL record while an exporter runs, its async range's end,
/// flows no slice end carried.
pub(crate) fn close_state(data: &mut SpanData) {
    let ts = ticks();
    #[cfg(feature = "otlp")]
    if otel::active() {
        otel::write_span(data, ts);
    }
    if data.async_id == 0 && data.flows.is_empty() {
        return;
    }
    if data.flows.is_empty() && data.dirty_async == 0 {
        // The commonest close of an async span: its range's end alone.
        let site = data.info.site(0).id() as u64;
        let id = [data.async_id];
        with_current_once(|tr| layout::write(&tr.ring, KIND_ASYNC_END, site, ts, &id, &()));
        return;
    }
    with_current(|tr| {
        // Flows no slice end carried: the span's range carries them
        // (on its begin if it begins now: JSON binds flows to `b`).
        if data.async_id == 0 {
            data.tracking(|d| d.write_flows(tr, ts));
            data.begin_async(tr);
        }
        data.tracking(|d| d.write_flows(tr, ts));
        let site = data.info.site(data.dirty_async);
        let mut fixed = Inline::<u64, 17>::new();
        fixed.push(data.async_id);
        data.words_of(data.dirty_async, &mut fixed);
        let fixed = fixed.as_slice();
        layout::write(&tr.ring, KIND_ASYNC_END, site.id() as u64, ts, fixed, &());
    });
}

/// Span `id` exits while the spans of `above` (entered after it, on this
/// thread) are still entered: ends their slices, ends its own, and begins
/// theirs again; all of them become async. Returns the entries of `above`
/// with their new depths.
fn exit_out_of_order(
    store: &impl SpanStore,
    id: &Id,
    entry: Entered,
    mut above: Vec<Entered>,
    ts: u64,
) -> Vec<Entered> {
    with_current(|tr| {
        // The depth of an entry whose begin is in this ring.
        let live = |e: &Entered| e.depth.filter(|_| e.session == tr.session);
        let base = std::iter::once(&entry)
            .chain(above.iter())
            .filter_map(live)
            .min();
        for depth in above.iter().rev().filter_map(live) {
            let depth = depth.min(MAX_DEPTH) as u64;
            layout::write(&tr.ring, KIND_END, depth, ts, &[], &());
        }
        store.with_data(id, |d| {
            if let Some(depth) = live(&entry) {
                d.tracking(|d| d.end_slice(tr, depth, ts));
            }
            d.begin_async(tr);
        });
        if let Some(base) = base {
            tr.depth.store(base, Ordering::Relaxed);
        }
        for e in above.iter_mut() {
            if live(e).is_none() {
                continue;
            }
            let depth = store.with_data(&Id::from_u64(e.id), |d| {
                d.begin_async(tr);
                d.tracking(|d| d.begin_slice(tr, ts, store.fields_every_slice()))
            });
            match depth {
                Some(Some(depth)) => e.depth = Some(depth),
                Some(None) => {
                    // The begin again was dropped (and counted): so is its end.
                    tr.ring.count_implied_drop();
                    e.depth = None;
                }
                None => e.depth = None,
            }
        }
    });
    above
}

#[cfg(test)]
mod tests {
    use super::fields::Fields;
    use super::spans::merge_values;
    use super::*;
    use crate::record::args::TraceValue;

    fn fields(values: &[(u32, i64)]) -> Fields {
        let mut f = Fields::default();
        for &(i, v) in values {
            let start = f.words.len() as u32;
            v.encode(&mut f.words);
            f.push_range(i, start);
        }
        f
    }

    fn values(words: &[u64], ranges: &[(u32, u32, u32)]) -> Vec<(u32, i64)> {
        ranges
            .iter()
            .map(|&(i, s, _)| (i, words[s as usize + 1] as i64))
            .collect()
    }

    #[test]
    fn values_come_out_in_field_order_last_visit_wins() {
        let mut f = fields(&[(2, 20), (0, 1), (2, 21)]);
        assert!(!f.in_order());
        assert_eq!(f.mask(), 0b101);
        let expect: Vec<u64> = fields(&[(0, 1), (2, 21)]).words;
        assert_eq!(*f.ordered(), expect);
    }

    #[test]
    fn recorded_values_replace_and_join_in_field_order() {
        let old = fields(&[(0, 1), (3, 3)]);
        // 4 inline words: the first merge spills to the heap, the second not.
        let (mut w, mut r) = (Inline::<u64, 4>::new(), Inline::<_, 4>::new());
        let new = fields(&[(3, 30), (1, 10), (5, 50)]);
        merge_values(&old.words, &old.ranges, &new, &mut w, &mut r);
        let got = values(w.as_slice(), r.as_slice());
        assert_eq!(got, [(0, 1), (1, 10), (3, 30), (5, 50)]);
        let (mut w, mut r) = (Inline::<u64, 4>::new(), Inline::<_, 4>::new());
        merge_values(&[], &[], &fields(&[(4, 4)]), &mut w, &mut r);
        assert_eq!(values(w.as_slice(), r.as_slice()), [(4, 4)]);
    }
}
