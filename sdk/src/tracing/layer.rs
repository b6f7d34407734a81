//! `RingtraceLayer`: ringtrace as a `tracing_subscriber::Layer`. Its span
//! state lives in a table of its own keyed by the registry's span id (not in
//! the registry's per-span extension maps, which box every value and look it
//! up by type).

use super::bridge::{self, SpanData, SpanStore};
use super::sealed;
use crossbeam_utils::CachePadded;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
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

impl fmt::Debug for RingtraceLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RingtraceLayer").finish_non_exhaustive()
    }
}

/// Shards of the span map: spans of different threads rarely meet on a lock.
const SHARDS: usize = 32;

/// The layer's live spans by registry span id: a map per shard, each behind
/// its own lock on cache lines of its own. Ids are the registry's (unique
/// among its live spans, reused after a close: the entry is removed at the
/// close), so the table belongs to one layer, hence one registry. A map
/// grows to the peak of live spans and is then reused: no allocation per span.
struct SpanMap {
    shards: Box<[CachePadded<Mutex<HashMap<u64, SpanData, BuildHasherDefault<IdHash>>>>]>,
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
                .map(|_| CachePadded::new(Mutex::new(HashMap::default())))
                .collect(),
        }
    }

    #[inline]
    fn shard(&self, id: u64) -> &Mutex<HashMap<u64, SpanData, BuildHasherDefault<IdHash>>> {
        let mut h = IdHash::default();
        h.write_u64(id);
        &self.shards[(h.finish() >> 59) as usize % SHARDS]
    }

    fn insert(&self, id: u64, data: SpanData) {
        let old = self.shard(id).lock().insert(id, data);
        drop(old); // a stale entry (a close this layer did not see), outside the lock
    }

    fn remove(&self, id: u64) -> Option<SpanData> {
        self.shard(id).lock().remove(&id)
    }
}

impl SpanStore for SpanMap {
    #[inline]
    fn with_data<R>(&self, id: &Id, f: impl FnOnce(&mut SpanData) -> R) -> Option<R> {
        let id = id.into_u64();
        self.shard(id).lock().get_mut(&id).map(f)
    }
}

impl<S> Layer<S> for RingtraceLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _ctx: Context<'_, S>) {
        if let Some(data) = bridge::new_span(attrs) {
            self.spans.insert(id.into_u64(), data);
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
        bridge::enter(&self.spans, id);
    }

    fn on_exit(&self, id: &Id, _ctx: Context<'_, S>) {
        bridge::exit(&self.spans, id);
    }

    fn on_close(&self, id: Id, _ctx: Context<'_, S>) {
        bridge::close(&self.spans, &id);
        drop(self.spans.remove(id.into_u64()));
    }
}

impl sealed::FromSession for RingtraceLayer {
    fn from_session() -> Self {
        RingtraceLayer {
            spans: SpanMap::new(),
        }
    }
}
