//! `RingtraceLayer`: ringtrace as a `tracing_subscriber::Layer`. Its span
//! state lives in ringtrace's span table (`span_table`, shared with the
//! subscriber), found through a map of the registry's span ids to table ids
//! (not in the registry's per-span extension maps, which box every value and
//! look it up by type). The state stays in its slot from the span's creation
//! to its close, and the slot's state is reused by a later span: a span's
//! hundreds of bytes are never moved.

use super::bridge::{self, SpanData, SpanStore};
use super::sealed;
use super::span_table::SPAN_STATES;
use crossbeam_utils::CachePadded;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
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
    /// span table holds (process-wide count, shared with
    /// [`RingtraceSubscriber::spans_not_stored`](crate::RingtraceSubscriber::spans_not_stored):
    /// one table holds the spans of both). The registry still has such
    /// spans; ringtrace records nothing of them.
    pub fn spans_not_stored() -> u64 {
        SPAN_STATES.not_stored()
    }
}

impl fmt::Debug for RingtraceLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RingtraceLayer").finish_non_exhaustive()
    }
}

/// Shards of the span map: spans of different threads rarely meet on a lock.
const SHARDS: usize = 32;

/// The layer's live spans: registry span id to id in `SPAN_STATES`, a map
/// per shard, each behind its own lock on cache lines of its own. Ids are
/// the registry's (unique among its live spans, reused after a close: the
/// entry is removed at the close), so the map belongs to one layer, hence
/// one registry. A map grows to the peak of live spans and is then reused:
/// no allocation per span.
struct SpanMap {
    shards: Box<[CachePadded<Shard>]>,
}

type IdMap = HashMap<u64, u64, BuildHasherDefault<IdHash>>;

struct Shard {
    /// Entries in `map`, written under its lock, read without it: an empty
    /// shard (every span when the categories are off) is not locked at all.
    len: AtomicUsize,
    map: Mutex<IdMap>,
}

/// Hashes a span id (already unique) with one multiply; the high bits, which
/// the map and the shard choice use, depend on every bit of the id.
#[derive(Default)]
struct IdHash(u64);

impl Hasher for IdHash {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    #[inline]
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

impl SpanMap {
    fn new() -> SpanMap {
        SpanMap {
            shards: (0..SHARDS)
                .map(|_| {
                    CachePadded::new(Shard {
                        len: AtomicUsize::new(0),
                        map: Mutex::new(HashMap::default()),
                    })
                })
                .collect(),
        }
    }

    #[inline]
    fn shard(&self, id: u64) -> &Shard {
        let mut h = IdHash::default();
        h.write_u64(id);
        &self.shards[(h.finish() >> 59) as usize % SHARDS]
    }

    /// Records span `id` (its category is on): its state is made in a slot
    /// of `SPAN_STATES`. The fields are visited there, before the map is
    /// locked (a `Debug` impl may make spans).
    fn insert(&self, id: u64, attrs: &Attributes<'_>) {
        let Some(slot) = SPAN_STATES.insert(attrs.metadata(), |state| {
            bridge::new_span_into(attrs, state)
        }) else {
            return; // over 10^9 spans alive: not recorded (the table counts it)
        };
        let shard = self.shard(id);
        let old = {
            let mut map = shard.map.lock();
            let old = map.insert(id, slot);
            shard.len.store(map.len(), Ordering::Relaxed);
            old
        };
        if let Some(old) = old {
            free(old); // a stale entry (a close this layer did not see)
        }
    }

    /// The table id of span `id`, if it is recorded.
    #[inline]
    fn slot(&self, id: u64) -> Option<u64> {
        let shard = self.shard(id);
        // Relaxed: a span's entry is inserted and removed by callbacks on
        // that span, which `tracing` orders (the span's handle is shared
        // with synchronisation); only other spans' updates can be unseen.
        if shard.len.load(Ordering::Relaxed) == 0 {
            return None;
        }
        shard.map.lock().get(&id).copied()
    }

    fn remove(&self, id: u64) {
        let shard = self.shard(id);
        if shard.len.load(Ordering::Relaxed) == 0 {
            return; // as in `slot`
        }
        let slot = {
            let mut map = shard.map.lock();
            let slot = map.remove(&id);
            shard.len.store(map.len(), Ordering::Relaxed);
            slot
        };
        if let Some(slot) = slot {
            free(slot);
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

impl<S> Layer<S> for RingtraceLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _ctx: Context<'_, S>) {
        if bridge::enabled(attrs.metadata()) {
            self.spans.insert(id.into_u64(), attrs);
        }
    }

    fn on_record(&self, id: &Id, values: &SpanValues<'_>, _ctx: Context<'_, S>) {
        bridge::record(&self.spans, id, values);
    }

    fn on_follows_from(&self, id: &Id, follows: &Id, _ctx: Context<'_, S>) {
        bridge::follows_from(&self.spans, id, follows);
    }

    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        bridge::event(event);
    }

    fn on_enter(&self, id: &Id, _ctx: Context<'_, S>) {
        bridge::enter(&self.spans, id, false);
    }

    fn on_exit(&self, id: &Id, _ctx: Context<'_, S>) {
        bridge::exit(&self.spans, id);
    }

    fn on_close(&self, id: Id, _ctx: Context<'_, S>) {
        bridge::close(&self.spans, &id);
        self.spans.remove(id.into_u64());
    }
}

impl sealed::FromSession for RingtraceLayer {
    fn from_session() -> Self {
        RingtraceLayer {
            spans: SpanMap::new(),
        }
    }
}
