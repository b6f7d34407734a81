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
    shards: Box<[CachePadded<Shard>]>,
}

type IdMap = HashMap<u64, SpanData, BuildHasherDefault<IdHash>>;

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

    fn insert(&self, id: u64, data: SpanData) {
        let shard = self.shard(id);
        let old = {
            let mut map = shard.map.lock();
            let old = map.insert(id, data);
            shard.len.store(map.len(), Ordering::Relaxed);
            old
        };
        drop(old); // a stale entry (a close this layer did not see), outside the lock
    }

    fn remove(&self, id: u64) -> Option<SpanData> {
        let shard = self.shard(id);
        // Relaxed: a span's entry is inserted and removed by callbacks on
        // that span, which `tracing` orders (the span's handle is shared
        // with synchronisation); only other spans' updates can be unseen.
        if shard.len.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let mut map = shard.map.lock();
        let old = map.remove(&id);
        shard.len.store(map.len(), Ordering::Relaxed);
        old
    }
}

impl SpanStore for SpanMap {
    #[inline]
    fn with_data<R>(&self, id: &Id, f: impl FnOnce(&mut SpanData) -> R) -> Option<R> {
        let id = id.into_u64();
        let shard = self.shard(id);
        if shard.len.load(Ordering::Relaxed) == 0 {
            return None; // as in `remove`
        }
        shard.map.lock().get_mut(&id).map(f)
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
        bridge::enter(&self.spans, id, false);
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
