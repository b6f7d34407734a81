//! Encoders turn drained records into file bytes. Both formats share the
//! pieces here: the process identity, the tick conversion, and the pairing of
//! scope ends with their begins.
//!
//! Rules of this layer: an encoder sees a thread's identity (`ThreadInfo`'s
//! pid, tid, name, sequence id, mode) and the records drained from it
//! (`record::layout::parse`), never the ring itself; it knows no `tracing`
//! layer, no macro and no sink. It only appends bytes to the buffer it is
//! given, so the file writer and any other output share it.

// `unsafe` in this layer, each block allowed where it is and proved there:
// the Perfetto fast path's output cursor (`perfetto/fast.rs`: `Cursor`, a
// `Vec`'s buffer written at a position kept in locals and counted in with
// `set_len`; packets copied from their templates through it, and a
// packet's annotations written by `protowire::Spare` into its spare
// capacity).
#![deny(unsafe_code)]

pub(crate) mod event;
pub(crate) mod json;
pub(crate) mod perfetto;
pub(crate) mod protowire;

use crate::record::callsite::{self, Callsite};
use crate::record::clock::Calibration;
use crate::record::registry::ThreadInfo as ThreadRing;

/// What the encoders know about the traced process.
#[derive(Debug, Clone)]
pub(crate) struct ProcessInfo {
    pub(crate) pid: i32,
    pub(crate) name: String,
    pub(crate) cmdline: Vec<String>,
    /// Track uuid of the process (random per session, 63 bits).
    pub(crate) uuid: u64,
    /// Extra labels (`process_labels`).
    pub(crate) labels: Vec<String>,
    /// Sort order among processes (`process_sort_index`).
    pub(crate) sort_index: Option<i32>,
}

impl ProcessInfo {
    pub(crate) fn current(name: Option<String>) -> ProcessInfo {
        let pid = crate::sys::pid();
        let seed = crate::sys::realtime_ns()
            ^ crate::sys::boottime_ns().rotate_left(32)
            ^ (pid as u64) << 16;
        ProcessInfo {
            pid,
            name: name.unwrap_or_else(crate::sys::process_name),
            cmdline: crate::sys::cmdline(),
            uuid: mix(seed) & UUID_MASK,
            labels: Vec::new(),
            sort_index: None,
        }
    }

    /// The track uuid of thread `tid`: the same for the whole trace.
    pub(crate) fn thread_uuid(&self, tid: i64) -> u64 {
        (mix(self.uuid ^ (tid as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)) & UUID_MASK).max(1)
    }

    /// The uuid of a track derived from this process and a `kind`/`key` pair.
    pub(crate) fn derived_uuid(&self, kind: u64, key: u64) -> u64 {
        (mix(self.uuid ^ mix(kind.wrapping_add(key.rotate_left(17)))) & UUID_MASK).max(1)
    }
}

const UUID_MASK: u64 = (1 << 63) - 1;

/// splitmix64's finaliser: a cheap, well-spread 64-bit mix.
pub(crate) fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A hasher for keys that are already ids (sequence ids, track uuids): one
/// multiply, no SipHash. Not for keys an outsider chooses.
#[derive(Default, Clone, Copy)]
pub(crate) struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    #[inline]
    fn write_u32(&mut self, v: u32) {
        self.write_u64(v as u64);
    }
    #[inline]
    fn write_u64(&mut self, v: u64) {
        // Fibonacci hashing: the high bits (which hashbrown uses) depend on
        // every bit of the key.
        self.0 = (self.0 ^ v)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .rotate_left(26);
    }
}

/// A map keyed by an id, hashed with [`IdHasher`].
pub(crate) type IdMap<K, V> =
    std::collections::HashMap<K, V, std::hash::BuildHasherDefault<IdHasher>>;
/// A set of ids, hashed with [`IdHasher`].
pub(crate) type IdSet<K> = std::collections::HashSet<K, std::hash::BuildHasherDefault<IdHasher>>;

/// FNV-1a, for keys derived from names.
pub(crate) fn hash_str(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// Name of the instant that marks where events were lost, with their count
/// (the same in both formats).
pub(crate) const LOST_EVENT_NAME: &str = "ringtrace: events lost";
/// The `reason` argument of a loss marked on the process track: events of
/// threads the memory budget had no ring for.
pub(crate) const NO_MEMORY_REASON: &str = "no memory";

/// The id of a custom track, from its path (the same in both formats).
pub(crate) fn track_key(path: &[String]) -> u64 {
    path.iter()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, n| mix(h ^ hash_str(n)))
        & ((1 << 63) - 1)
}

/// Call sites by id, cached by the flusher so it does not lock per event.
#[derive(Default)]
pub(crate) struct Sites {
    cache: Vec<&'static Callsite>,
}

impl Sites {
    pub(crate) fn get(&mut self, id: u32) -> Option<&'static Callsite> {
        let idx = (id as usize).checked_sub(1)?;
        if idx >= self.cache.len() {
            callsite::sync_sites(&mut self.cache);
        }
        self.cache.get(idx).copied()
    }
}

/// Everything an encoder needs besides the records.
pub(crate) struct Context<'a> {
    pub(crate) cal: &'a Calibration,
    pub(crate) process: &'a ProcessInfo,
    pub(crate) sites: &'a mut Sites,
}

/// A drained batch from one thread.
pub(crate) struct Batch<'a> {
    pub(crate) thread: &'a ThreadRing,
    pub(crate) words: &'a [u64],
    /// Records overwritten (flight-recorder mode) before this batch.
    pub(crate) overwritten: u64,
}

/// Counts an encoder keeps, reported in the session's stats.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct EncodeStats {
    pub(crate) events: u64,
    pub(crate) lost_reported: u64,
    pub(crate) unmatched_ends: u64,
    pub(crate) ends_lost: u64,
}

pub(crate) trait Encoder: Send {
    /// Bytes that open the file.
    fn header(&mut self, ctx: &mut Context<'_>, out: &mut Vec<u8>);
    /// Encodes one thread's drained records.
    fn batch(&mut self, ctx: &mut Context<'_>, batch: &Batch<'_>, out: &mut Vec<u8>);
    /// A thread's ring is gone for good (thread exited, fully drained): close
    /// what it left open at `now_ns` if `close_open`, and forget its state.
    fn thread_done(&mut self, ctx: &mut Context<'_>, seq_id: u32, out: &mut Vec<u8>);
    /// `count` events of `thread` were lost outside its record stream (drops
    /// counted after its last record, oversized events): mark it in the trace.
    fn note_lost(
        &mut self,
        ctx: &mut Context<'_>,
        thread: &ThreadRing,
        count: u64,
        out: &mut Vec<u8>,
    );
    /// `count` events were lost by threads that got no ring at all (the
    /// budget had no room at their event): they have no stream of their
    /// own, so the loss is marked on the process track at `now_ns`, an
    /// instant [`LOST_EVENT_NAME`] with `lost_events = count` and `reason =
    /// "no memory"` ([`NO_MEMORY_REASON`]).
    fn note_lost_no_ring(
        &mut self,
        ctx: &mut Context<'_>,
        now_ns: u64,
        count: u64,
        out: &mut Vec<u8>,
    ) {
        self.note_lost_process(ctx, now_ns, count, NO_MEMORY_REASON, out);
    }
    /// `count` events lost for `reason`, marked on the process track at
    /// `now_ns` as [`note_lost_no_ring`](Encoder::note_lost_no_ring) does
    /// (also: records dropped at the session's hard disk limit).
    fn note_lost_process(
        &mut self,
        ctx: &mut Context<'_>,
        now_ns: u64,
        count: u64,
        reason: &str,
        out: &mut Vec<u8>,
    );
    /// CPU stack samples (`sampling`), with the tables their stacks are
    /// interned in. Formats without samples ignore them.
    fn samples(
        &mut self,
        _ctx: &mut Context<'_>,
        _view: &crate::sampling::SampleView<'_>,
        _out: &mut Vec<u8>,
    ) {
    }
    /// Periodic bookkeeping (clock snapshots).
    fn tick(&mut self, ctx: &mut Context<'_>, out: &mut Vec<u8>);
    /// Bytes that close the file; `now_ns` is the end of the trace.
    fn finish(&mut self, ctx: &mut Context<'_>, now_ns: u64, out: &mut Vec<u8>);
    fn stats(&self) -> EncodeStats;
}

/// A scope that began and has not ended yet.
#[derive(Debug, Clone)]
pub(crate) struct OpenScope {
    pub(crate) depth: u32,
    pub(crate) site: u32,
    pub(crate) ts_ns: u64,
    /// Argument words, kept for encoders that write at the end (JSON `X`).
    pub(crate) args: Vec<u64>,
}

/// Pairs ends with begins by the depth both records carry, so a lost record
/// never makes an end close the wrong slice.
#[derive(Debug, Default)]
pub(crate) struct ScopeStack {
    open: Vec<OpenScope>,
    /// Argument vectors of closed scopes, kept for the next begins (no
    /// allocation per scope once warm).
    spare: Vec<Vec<u64>>,
}

/// What an end record closes.
pub(crate) struct EndMatch {
    /// Scopes whose own end was lost, innermost first: close them here.
    pub(crate) orphaned: Vec<OpenScope>,
    /// The scope this end belongs to, if its begin was kept.
    pub(crate) matched: Option<OpenScope>,
}

impl ScopeStack {
    /// A begin at `depth`: scopes at that depth or deeper lost their end.
    #[inline]
    pub(crate) fn begin(&mut self, scope: OpenScope) -> Vec<OpenScope> {
        if self.open.last().is_none_or(|top| top.depth < scope.depth) {
            self.open.push(scope); // the usual case: nothing lost
            return Vec::new();
        }
        let orphaned = self.pop_deeper_than(scope.depth, true);
        self.open.push(scope);
        orphaned
    }

    /// A begin at `depth` that orphans nothing (deeper than the innermost
    /// open scope), kept without args: true. Else nothing is done (the
    /// caller takes [`Self::begin`]'s path).
    #[inline]
    pub(crate) fn try_begin_plain(&mut self, depth: u32, site: u32, ts_ns: u64) -> bool {
        let fits = self.fits(depth);
        if fits {
            self.push_plain(depth, site, ts_ns);
        }
        fits
    }

    /// Whether a begin at `depth` orphans nothing: deeper than the
    /// innermost open scope.
    #[inline]
    pub(crate) fn fits(&self, depth: u32) -> bool {
        self.open.last().is_none_or(|top| top.depth < depth)
    }

    /// Keeps a begin at `depth` without args; the caller has checked that
    /// it [`fits`](Self::fits).
    #[inline]
    pub(crate) fn push_plain(&mut self, depth: u32, site: u32, ts_ns: u64) {
        debug_assert!(self.fits(depth));
        self.open.push(OpenScope {
            depth,
            site,
            ts_ns,
            args: Vec::new(),
        });
    }

    /// The end of the innermost scope, if it is at `depth` (what
    /// [`Self::end`] matches without orphans); else nothing is done.
    #[inline]
    pub(crate) fn try_end_top(&mut self, depth: u32) -> Option<OpenScope> {
        if self.open.last().is_some_and(|top| top.depth == depth) {
            self.open.pop()
        } else {
            None
        }
    }

    #[inline]
    pub(crate) fn end(&mut self, depth: u32) -> EndMatch {
        if self.open.last().is_some_and(|top| top.depth == depth) {
            // The usual case: the end of the innermost scope.
            return EndMatch {
                orphaned: Vec::new(),
                matched: self.open.pop(),
            };
        }
        let orphaned = self.pop_deeper_than(depth, false);
        let matched = if self.open.last().is_some_and(|s| s.depth == depth) {
            self.open.pop()
        } else {
            None
        };
        EndMatch { orphaned, matched }
    }

    fn pop_deeper_than(&mut self, depth: u32, inclusive: bool) -> Vec<OpenScope> {
        let mut out = Vec::new();
        while let Some(top) = self.open.last() {
            if top.depth > depth || (inclusive && top.depth == depth) {
                out.push(self.open.pop().unwrap());
            } else {
                break;
            }
        }
        out
    }

    /// An empty vector for a new scope's argument words (a recycled one
    /// when there is one).
    #[inline]
    pub(crate) fn spare_args(&mut self) -> Vec<u64> {
        self.spare.pop().unwrap_or_default()
    }

    /// Keeps a closed scope's argument vector for [`Self::spare_args`].
    #[inline]
    pub(crate) fn recycle(&mut self, scope: OpenScope) {
        let mut v = scope.args;
        if v.capacity() > 0 && self.spare.len() < 64 {
            v.clear();
            self.spare.push(v);
        }
    }

    /// Everything still open, innermost first.
    pub(crate) fn drain_all(&mut self) -> Vec<OpenScope> {
        let mut v = std::mem::take(&mut self.open);
        v.reverse();
        v
    }

    pub(crate) fn len(&self) -> usize {
        self.open.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(depth: u32, site: u32) -> OpenScope {
        OpenScope {
            depth,
            site,
            ts_ns: 0,
            args: Vec::new(),
        }
    }

    #[test]
    fn lost_end_is_closed_by_the_outer_end() {
        let mut st = ScopeStack::default();
        assert!(st.begin(s(0, 1)).is_empty());
        assert!(st.begin(s(1, 2)).is_empty());
        // end of depth 1 lost; a new begin at depth 1 orphans the old one
        let orphans = st.begin(s(1, 3));
        assert_eq!(orphans.len(), 1);
        assert_eq!(orphans[0].site, 2);
        let m = st.end(1);
        assert!(m.orphaned.is_empty());
        assert_eq!(m.matched.unwrap().site, 3);
        let m = st.end(0);
        assert_eq!(m.matched.unwrap().site, 1);
        // an end whose begin was lost matches nothing
        let m = st.end(0);
        assert!(m.matched.is_none());
    }
}
