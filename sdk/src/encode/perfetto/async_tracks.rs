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
//! in lists by the sequence (thread) whose end freed them: one thread's
//! ends come in time order, so each list's first track is the one of the
//! list that ended first, and a begin looks at the first of each list (its
//! own thread's, usually the only one, first). It makes a new track only
//! when none of them ended before it: then no free track did. For the same reason a
//! range's end may come before its begin (it ended on a thread drained
//! first): it gets a new track, held for it until its begin comes.
//!
//! Open ranges are found by their id in a direct-mapped table (ids are
//! handed out in sequence, so the open ones rarely share a slot; those that
//! do wait in a map).

use super::fields::TE_TRACK_UUID;
use super::UUID_KIND_ASYNC;
use crate::encode::{IdMap, ProcessInfo};
use std::collections::{HashMap, VecDeque};

/// Key of pooled track uuids (`ProcessInfo::derived_uuid`).
const UUID_KIND_POOLED: u64 = 6;

/// Ranges open at once (and ends waiting for their begins) past which a
/// range gets a track of its own (as every range did before pooling), so
/// that ranges never ended (a span leaked, an end lost) or begins never
/// seen cannot grow the maps without bound. (A range's end that finds no
/// open range while ranges are on tracks of their own is taken as one of
/// theirs: past the bound, a range ended on another thread before its
/// begin was drained may lose its end.)
#[cfg(not(test))]
const MAX_OPEN: usize = 1 << 20;
#[cfg(test)]
const MAX_OPEN: usize = 1 << 12;

/// Slots of the table of open ranges.
const SLOTS: usize = 1024;

/// Free tracks of a pool, by the sequence whose ends freed them: (end of
/// its last range in ns, number), in the order they were freed.
#[derive(Default)]
struct Pool {
    lists: Vec<(u32, VecDeque<(u64, u32)>)>,
}

impl Pool {
    /// A track that ended before `ts_ns`, looking at sequence `seq`'s
    /// list first.
    #[inline(always)]
    fn take(&mut self, seq: u32, ts_ns: u64) -> Option<u32> {
        let usable = |l: &VecDeque<(u64, u32)>| l.front().is_some_and(|&(ended, _)| ended < ts_ns);
        let i = match self.lists.iter().position(|(s, _)| *s == seq) {
            Some(i) if usable(&self.lists[i].1) => i,
            _ => self.lists.iter().position(|(_, l)| usable(l))?,
        };
        self.lists[i].1.pop_front().map(|(_, n)| n)
    }

    /// Track `n`, whose last range ended at `ended` on sequence `seq`, is free.
    #[inline(always)]
    fn put(&mut self, seq: u32, ended: u64, n: u32) {
        match self.lists.iter_mut().find(|(s, _)| *s == seq) {
            Some((_, l)) => l.push_back((ended, n)),
            None => self.lists.push((seq, VecDeque::from([(ended, n)]))),
        }
    }
}

/// A range's track: its uuid and, for a pooled track, its number (from 1;
/// 0: a track of the range's own, named by its id).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Track {
    pub(super) uuid: u64,
    pub(super) n: u32,
}

/// `TrackEvent.track_uuid` of a track, encoded once: its tag and varint.
#[derive(Clone, Copy)]
pub(super) struct TrackField {
    pub(super) bytes: [u8; 16],
    pub(super) len: u8,
}

impl TrackField {
    #[cold]
    fn of(uuid: u64) -> TrackField {
        let mut v = Vec::with_capacity(16);
        crate::encode::protowire::uint(&mut v, TE_TRACK_UUID, uuid);
        let mut bytes = [0; 16];
        bytes[..v.len()].copy_from_slice(&v);
        TrackField {
            bytes,
            len: v.len() as u8,
        }
    }
}

/// An open range: its id, track and pool.
#[derive(Clone, Copy, Default)]
struct Open {
    id: u64,
    /// The track's number; 0: the slot is empty.
    n: u32,
    pool: u32,
}

pub(super) struct AsyncTracks {
    /// Open ranges on pooled tracks, by id modulo `SLOTS`.
    slots: Box<[Open; SLOTS]>,
    /// Open ranges whose slot was taken.
    spilled: IdMap<u64, Open>,
    /// Ranges open on pooled tracks.
    open: usize,
    /// Ranges open on tracks of their own (past `MAX_OPEN`).
    own_open: usize,
    /// Ranges whose end came before their begin: async id → (track
    /// number, end in ns, its sequence); the track is theirs until the
    /// begin comes.
    ended_early: IdMap<u64, (u32, u64, u32)>,
    /// Pool by call site id, plus one (0: not looked up yet).
    site_pool: Vec<u32>,
    /// Pool by track name.
    by_name: HashMap<&'static str, u32>,
    /// Free tracks of each pool.
    pools: Vec<Pool>,
    /// Pooled tracks by number - 1: uuid and encoded field.
    tracks: Vec<(u64, TrackField)>,
    /// The field of the last track of a range's own asked for.
    own_field: TrackField,
}

impl Default for AsyncTracks {
    fn default() -> Self {
        AsyncTracks {
            slots: Box::new([Open::default(); SLOTS]),
            spilled: IdMap::default(),
            open: 0,
            own_open: 0,
            ended_early: IdMap::default(),
            site_pool: Vec::new(),
            by_name: HashMap::new(),
            pools: Vec::new(),
            tracks: Vec::new(),
            own_field: TrackField {
                bytes: [0; 16],
                len: 0,
            },
        }
    }
}

impl AsyncTracks {
    /// The track of range `id` (call site `site`, named `name`) beginning at
    /// `ts_ns` (at or before the time written) on sequence `seq`: a free
    /// track of its name, else a new one.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn begin(
        &mut self,
        process: &ProcessInfo,
        seq: u32,
        site: u32,
        name: &'static str,
        id: u64,
        ts_ns: u64,
    ) -> Track {
        let pool = self.pool(site, name);
        if !self.ended_early.is_empty() {
            if let Some((n, ended, at)) = self.ended_early.remove(&id) {
                self.pools[pool as usize].put(at, ended, n);
                return self.track(n);
            }
        }
        if self.open >= MAX_OPEN {
            self.own_open += 1;
            return own(process, id);
        }
        let n = match self.pools[pool as usize].take(seq, ts_ns) {
            Some(n) => n,
            None => self.make(process),
        };
        let open = Open { id, n, pool };
        let slot = &mut self.slots[id as usize % SLOTS];
        if slot.n == 0 {
            *slot = open;
        } else if let Some(held) = self.spilled.insert(id, open) {
            // An id begun twice without an end (ids are unique per range):
            // the first range's track is given up at this time.
            self.pools[held.pool as usize].put(seq, ts_ns, held.n);
            self.open -= 1;
        }
        self.open += 1;
        self.track(n)
    }

    /// The track of range `id` ending at `ts_ns` as written, on sequence
    /// `seq`; it is free for ranges beginning after that. A range whose begin has not come yet
    /// gets a new track, kept for its begin (past `MAX_OPEN` of them, the
    /// track its id alone names: a begin lost, or before the file, leaves
    /// its entry behind).
    #[inline(always)]
    pub(super) fn end(&mut self, process: &ProcessInfo, seq: u32, id: u64, ts_ns: u64) -> Track {
        let slot = &mut self.slots[id as usize % SLOTS];
        let open = if slot.n != 0 && slot.id == id {
            Some(std::mem::take(slot))
        } else if !self.spilled.is_empty() {
            self.spilled.remove(&id)
        } else {
            None
        };
        if let Some(o) = open {
            self.open -= 1;
            self.pools[o.pool as usize].put(seq, ts_ns, o.n);
            return self.track(o.n);
        }
        if self.own_open > 0 {
            self.own_open -= 1;
            return own(process, id);
        }
        if self.ended_early.len() >= MAX_OPEN {
            return own(process, id);
        }
        let n = self.make(process);
        self.ended_early.insert(id, (n, ts_ns, seq));
        self.track(n)
    }

    /// The encoded `track_uuid` field of track `t`.
    #[inline(always)]
    pub(super) fn field(&mut self, t: Track) -> &TrackField {
        match t.n {
            0 => {
                self.own_field = TrackField::of(t.uuid);
                &self.own_field
            }
            n => &self.tracks[n as usize - 1].1,
        }
    }

    #[inline]
    fn track(&self, n: u32) -> Track {
        Track {
            uuid: self.tracks[n as usize - 1].0,
            n,
        }
    }

    /// A new pooled track; its number.
    #[cold]
    fn make(&mut self, process: &ProcessInfo) -> u32 {
        let n = self.tracks.len() as u64 + 1;
        let uuid = process.derived_uuid(UUID_KIND_POOLED, n);
        self.tracks.push((uuid, TrackField::of(uuid)));
        n as u32
    }

    /// The pool of call site `site`: one per track name.
    #[inline]
    fn pool(&mut self, site: u32, name: &'static str) -> u32 {
        match self.site_pool.get(site as usize) {
            Some(&p) if p != 0 => p - 1,
            _ => self.new_site(site, name),
        }
    }

    #[cold]
    fn new_site(&mut self, site: u32, name: &'static str) -> u32 {
        let next = self.pools.len() as u32;
        let p = *self.by_name.entry(name).or_insert(next);
        if p == next {
            self.pools.push(Pool::default());
        }
        let i = site as usize;
        if self.site_pool.len() <= i {
            self.site_pool.resize(i + 1, 0);
        }
        self.site_pool[i] = p + 1;
        p
    }

    /// Tracks made so far (tests).
    #[cfg(test)]
    fn made(&self) -> usize {
        self.tracks.len()
    }
}

/// The track range `id` alone is on (not pooled).
fn own(process: &ProcessInfo, id: u64) -> Track {
    Track {
        uuid: process.derived_uuid(UUID_KIND_ASYNC, id),
        n: 0,
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
        let a = t.begin(&p, 1, 1, "request", 10, 100);
        let b = t.begin(&p, 1, 1, "request", 11, 150); // a is open: a new track
        assert_ne!(a, b);
        assert_eq!(t.end(&p, 1, 10, 200), a);
        // Begins at the instant a ended, or before (a batch drained late):
        // not on a's track.
        let c = t.begin(&p, 1, 1, "request", 12, 200);
        assert!(c != a && c != b);
        assert_eq!(t.end(&p, 1, 12, 210), c);
        // After it: a's track again (the first freed), then c's (b's is
        // held).
        assert_eq!(t.begin(&p, 1, 1, "request", 13, 201), a);
        assert_eq!(t.begin(&p, 1, 1, "request", 14, 211), c);
        // Freed on two threads, their batches drained out of time order:
        // c ends at 400 on this one, b at 300 on another (drained after).
        // A begin at 350 here finds b, the first of the other's list.
        assert_eq!(t.end(&p, 1, 14, 400), c);
        assert_eq!(t.end(&p, 2, 11, 300), b);
        assert_eq!(t.begin(&p, 1, 1, "request", 15, 350), b);
        assert_eq!(t.begin(&p, 1, 1, "request", 16, 401), c);
        assert_eq!(t.made(), 3);
        // The other thread frees a then b: taken in that order, each only
        // once it ended; meanwhile a new track.
        assert_eq!(t.end(&p, 2, 13, 500), a);
        assert_eq!(t.end(&p, 2, 15, 600), b);
        assert_eq!(t.begin(&p, 1, 1, "request", 17, 550), a);
        let d = t.begin(&p, 1, 1, "request", 18, 560);
        assert!(d != b && t.made() == 4, "b ended after 560");
        assert_eq!(t.begin(&p, 1, 1, "request", 19, 601), b);
        // The encoded field is the uuid's.
        let f = *t.field(a);
        let mut v = Vec::new();
        crate::encode::protowire::uint(&mut v, TE_TRACK_UUID, a.uuid);
        assert_eq!(&f.bytes[..f.len as usize], &v[..]);
    }

    #[test]
    fn tracks_are_pooled_by_name_not_by_site() {
        let p = process();
        let mut t = AsyncTracks::default();
        let a = t.begin(&p, 1, 1, "request", 10, 100);
        t.end(&p, 1, 10, 110);
        // Another site of the same name (other fields present) reuses it;
        // another name does not.
        let db = t.begin(&p, 1, 3, "db", 11, 120);
        assert_ne!(db, a);
        assert_eq!(t.begin(&p, 1, 2, "request", 12, 130), a);
    }

    #[test]
    fn ids_sharing_a_slot_are_found_apart() {
        let p = process();
        let mut t = AsyncTracks::default();
        let ids = [5, 5 + SLOTS as u64, 5 + 2 * SLOTS as u64];
        let tracks: Vec<Track> = ids
            .iter()
            .map(|&id| t.begin(&p, 1, 1, "x", id, 10))
            .collect();
        assert_eq!(t.end(&p, 1, ids[1], 20), tracks[1]);
        assert_eq!(t.end(&p, 1, ids[0], 21), tracks[0]);
        assert_eq!(t.end(&p, 1, ids[2], 22), tracks[2]);
        assert_eq!(t.open, 0);
        assert_eq!(t.made(), 3);
    }

    #[test]
    fn an_end_before_its_begin_holds_a_track_for_it() {
        let p = process();
        let mut t = AsyncTracks::default();
        // Range 99 ended on a thread whose batch came first.
        let early = t.end(&p, 1, 99, 300);
        let other = t.begin(&p, 1, 1, "x", 1, 310);
        assert_ne!(other, early, "held for range 99");
        assert_eq!(t.begin(&p, 1, 1, "x", 99, 100), early);
        // Then free after its end, not before.
        assert_ne!(t.begin(&p, 1, 1, "x", 2, 300), early);
        assert_eq!(t.begin(&p, 1, 1, "x", 3, 301), early);
        assert_eq!(t.made(), 3);
    }

    #[test]
    fn past_the_open_bound_ranges_get_tracks_of_their_own() {
        let p = process();
        let mut t = AsyncTracks::default();
        for id in 0..MAX_OPEN as u64 {
            t.begin(&p, 1, 1, "leak", id, 1);
        }
        let over = t.begin(&p, 1, 1, "leak", 1 << 40, 2);
        assert_eq!(over, own(&p, 1 << 40));
        assert_eq!(t.end(&p, 1, 1 << 40, 3), over, "its end finds its track");
        // Ends whose begins never come fill their map to the bound too.
        for id in 0..MAX_OPEN as u64 {
            t.end(&p, 1, id | 1 << 41, 4);
        }
        assert_eq!(t.end(&p, 1, 1 << 42, 5), own(&p, 1 << 42));
        assert_eq!((t.open, t.ended_early.len()), (MAX_OPEN, MAX_OPEN));
    }
}
