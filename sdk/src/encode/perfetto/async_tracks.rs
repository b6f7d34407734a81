//! The tracks async ranges go on, reused: a range takes a track of its name
//! that no range holds, so a trace of a million short ranges (a `tracing`
//! span per request with `SpanSlices::Lifetime`) has as many tracks per
//! name as ranges were open at once, not a million, and describes each
//! track once per sequence, not once per range.
//!
//! Batches reach the flusher thread by thread, not in time order, so a
//! track is free for a range only if its last range ended strictly before
//! the new one begins (same timestamps sort in any order across sequences:
//! an end and a begin at one instant could nest wrongly). Freed tracks wait
//! in a heap by the end of their last range: a begin takes the one that
//! ended first, and makes a new track only when even that one is not free
//! yet at its time (then no free track is). For the same reason a range's
//! end may come before its begin (it ended on a thread drained first): it
//! gets a new track, held for it until its begin comes.

use super::UUID_KIND_ASYNC;
use crate::encode::{IdMap, ProcessInfo};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

/// Key of pooled track uuids (`ProcessInfo::derived_uuid`).
const UUID_KIND_POOLED: u64 = 6;

/// Ranges open at once past which a new range gets a track of its own (as
/// every range did before pooling), so that ranges never ended (a span
/// leaked, an end lost) cannot grow the map without bound.
const MAX_OPEN: usize = 1 << 16;

#[derive(Default)]
pub(super) struct AsyncTracks {
    /// Open ranges: async id → (track uuid, its pool).
    open: IdMap<u64, (u64, u32)>,
    /// Ranges whose end came before their begin: async id → (track uuid,
    /// end in ns); the track is theirs until the begin comes.
    ended_early: IdMap<u64, (u64, u64)>,
    /// Pool by call site id, plus one (0: not looked up yet).
    site_pool: Vec<u32>,
    /// Pool by track name.
    by_name: HashMap<&'static str, u32>,
    /// Free tracks of each pool: (end of its last range in ns, uuid), the
    /// earliest end first.
    pools: Vec<BinaryHeap<Reverse<(u64, u64)>>>,
    /// Tracks made so far: the key of the next one's uuid.
    made: u64,
}

impl AsyncTracks {
    /// The track of range `id` (call site `site`, named `name`) beginning at
    /// `ts_ns` as written: a free track of its name, else a new one.
    pub(super) fn begin(
        &mut self,
        process: &ProcessInfo,
        site: u32,
        name: &'static str,
        id: u64,
        ts_ns: u64,
    ) -> u64 {
        let pool = self.pool(site, name);
        if !self.ended_early.is_empty() {
            if let Some((uuid, ended)) = self.ended_early.remove(&id) {
                self.pools[pool as usize].push(Reverse((ended, uuid)));
                return uuid;
            }
        }
        if self.open.len() >= MAX_OPEN {
            return process.derived_uuid(UUID_KIND_ASYNC, id);
        }
        let free = &mut self.pools[pool as usize];
        let uuid = match free.peek() {
            Some(&Reverse((ended, uuid))) if ended < ts_ns => {
                free.pop();
                uuid
            }
            _ => {
                self.made += 1;
                process.derived_uuid(UUID_KIND_POOLED, self.made)
            }
        };
        if let Some((held, pool)) = self.open.insert(id, (uuid, pool)) {
            // An id begun twice without an end (ids are unique per range):
            // the first range's track is given up at this time.
            self.pools[pool as usize].push(Reverse((ts_ns, held)));
        }
        uuid
    }

    /// The track of range `id` ending at `ts_ns` as written; it is free for
    /// ranges beginning after that. A range whose begin has not come yet
    /// gets a new track, kept for its begin (past `MAX_OPEN` of them, the
    /// track its id alone names: a begin lost, or before the file, leaves
    /// its entry behind).
    pub(super) fn end(&mut self, process: &ProcessInfo, id: u64, ts_ns: u64) -> u64 {
        if let Some((uuid, pool)) = self.open.remove(&id) {
            self.pools[pool as usize].push(Reverse((ts_ns, uuid)));
            return uuid;
        }
        if self.ended_early.len() >= MAX_OPEN {
            return process.derived_uuid(UUID_KIND_ASYNC, id);
        }
        self.made += 1;
        let uuid = process.derived_uuid(UUID_KIND_POOLED, self.made);
        self.ended_early.insert(id, (uuid, ts_ns));
        uuid
    }

    /// The pool of call site `site`: one per track name.
    #[inline]
    fn pool(&mut self, site: u32, name: &'static str) -> u32 {
        let i = site as usize;
        if let Some(&p) = self.site_pool.get(i) {
            if p != 0 {
                return p - 1;
            }
        }
        let next = self.pools.len() as u32;
        let p = *self.by_name.entry(name).or_insert(next);
        if p == next {
            self.pools.push(BinaryHeap::new());
        }
        if self.site_pool.len() <= i {
            self.site_pool.resize(i + 1, 0);
        }
        self.site_pool[i] = p + 1;
        p
    }

    /// Tracks made so far (tests, stats).
    #[cfg(test)]
    pub(super) fn made(&self) -> u64 {
        self.made
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn process() -> ProcessInfo {
        ProcessInfo::current(None)
    }

    #[test]
    fn a_track_is_reused_only_after_its_range_ended() {
        let p = process();
        let mut t = AsyncTracks::default();
        let a = t.begin(&p, 1, "request", 10, 100);
        let b = t.begin(&p, 1, "request", 11, 150); // a is open: a new track
        assert_ne!(a, b);
        assert_eq!(t.end(&p, 10, 200), a);
        // Begins at the instant a ended, or before (a batch drained late):
        // not on a's track.
        let c = t.begin(&p, 1, "request", 12, 200);
        assert!(c != a && c != b);
        assert_eq!(t.end(&p, 12, 210), c);
        // After it: a's track again (the one that ended first), then c's
        // (b's is held); freed out of time order, as batches of two threads
        // come in, the earliest end is still taken first.
        assert_eq!(t.begin(&p, 1, "request", 13, 201), a);
        assert_eq!(t.begin(&p, 1, "request", 14, 211), c);
        assert_eq!(t.end(&p, 14, 400), c);
        assert_eq!(t.end(&p, 11, 300), b);
        assert_eq!(t.begin(&p, 1, "request", 15, 350), b);
        assert_eq!(t.made(), 3);
    }

    #[test]
    fn tracks_are_pooled_by_name_not_by_site() {
        let p = process();
        let mut t = AsyncTracks::default();
        let a = t.begin(&p, 1, "request", 10, 100);
        t.end(&p, 10, 110);
        // Another site of the same name (other fields present) reuses it;
        // another name does not.
        let db = t.begin(&p, 3, "db", 11, 120);
        assert_ne!(db, a);
        assert_eq!(t.begin(&p, 2, "request", 12, 130), a);
    }

    #[test]
    fn an_end_before_its_begin_holds_a_track_for_it() {
        let p = process();
        let mut t = AsyncTracks::default();
        // Range 99 ended on a thread whose batch came first.
        let early = t.end(&p, 99, 300);
        let other = t.begin(&p, 1, "x", 1, 310);
        assert_ne!(other, early, "held for range 99");
        assert_eq!(t.begin(&p, 1, "x", 99, 100), early);
        // Then free after its end, not before.
        assert_ne!(t.begin(&p, 1, "x", 2, 300), early);
        assert_eq!(t.begin(&p, 1, "x", 3, 301), early);
        assert_eq!(t.made(), 3);
    }

    #[test]
    fn past_the_open_bound_ranges_get_tracks_of_their_own() {
        let p = process();
        let mut t = AsyncTracks::default();
        for id in 0..MAX_OPEN as u64 {
            t.begin(&p, 1, "leak", id, 1);
            t.end(&p, id | 1 << 41, 1); // ends whose begins never come
        }
        let over = t.begin(&p, 1, "leak", 1 << 40, 2);
        assert_eq!(over, p.derived_uuid(UUID_KIND_ASYNC, 1 << 40));
        let lone = t.end(&p, 1 << 42, 3);
        assert_eq!(lone, p.derived_uuid(UUID_KIND_ASYNC, 1 << 42));
        assert_eq!(t.end(&p, 1 << 40, 3), over);
        assert_eq!((t.open.len(), t.ended_early.len()), (MAX_OPEN, MAX_OPEN));
    }
}
