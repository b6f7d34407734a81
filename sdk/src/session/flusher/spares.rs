//! Spare segments: the next segment of a ring that grew, made ready by the
//! flusher so its thread grows into memory mapped in here, and given back
//! when left unused.

#![forbid(unsafe_code)]

use super::rings::RingSet;
use crate::encode::IdMap;
use crate::record::registry::{ThreadRing, REGISTRY};
use crate::record::ring::GROWTH;
use crate::record::sync::Arc;
use std::time::{Duration, Instant};

/// What the flusher knows of a grown ring's spare segment.
#[derive(Default)]
pub(super) struct SpareState {
    /// The ring's segment count when its spare was last prepared.
    made: u64,
    /// When that spare was made ready, while it may still be unused.
    since: Option<Instant>,
}

/// The flusher's watch on growing rings: rings that grew get their next
/// segment made at once, between two drains of other records if need be (a
/// fresh thread's ring quadruples every few hundred microseconds, and a
/// pass of the flusher can take milliseconds).
pub(super) struct Spares {
    pub(super) seen: u64,
    /// `GROWTH`'s count when the pool was last restocked (at the session's
    /// start: what `start` stocked, if anything).
    pub(super) stocked: u64,
    pub(super) rings: IdMap<u32, SpareState>,
    /// Rings whose spare is out and unused, looked at to give it back after
    /// [`SPARE_IDLE`] even once they are quiet.
    pub(super) waiting: IdMap<u32, Arc<ThreadRing>>,
}

impl Spares {
    /// Tends the spares if a ring grew since the last look (or if `all`).
    /// Restocks the pool (`restock`: at a pass's start) only once a look
    /// finds no new growth: while a ring is growing its spares come first,
    /// and mapping in the stock (1 MiB of 4 KiB pages) or a drain chunk in
    /// between made a fresh thread's 4 MiB spare late by that much, and the
    /// thread then mapped its segment itself (BENCHMARKS.md, "History",
    /// "First laps").
    /// Not while stopping: the spares and the stock would be given back at
    /// once.
    pub(super) fn tend_if_grown(&mut self, rings: &mut RingSet, all: bool, restock: bool) {
        let grown = GROWTH.count();
        let quiet = grown == self.seen;
        if !quiet || all {
            self.seen = grown;
            // A ring that grew announced itself (growing is the producer's
            // slow path), so it is active.
            rings.take_announced();
            tend_spares(rings.active.values(), &mut self.rings, &mut self.waiting);
        }
        if restock && quiet && grown != self.stocked {
            self.stocked = grown;
            // Sizes a growth emptied are stocked again, here rather than
            // on a recording thread's first lap; a ring that grows
            // meanwhile gets its spare first (a later pass stocks on).
            // Only after a growth: a stock given back idle stays so until
            // rings grow again (and none is made in system-tracing-only
            // mode until a tracing session turns call sites on).
            REGISTRY
                .budget
                .pool()
                .stock_until(&|| GROWTH.count() != grown);
        }
    }
}

/// A spare segment the producer has not grown into after this long is given
/// back: its thread has stopped growing (the flusher keeps up with it), and
/// the memory is the budget's and the process's.
const SPARE_IDLE: Duration = Duration::from_secs(1);

/// Makes ready the next segment of each active ring that grew since the
/// last look (`Ring::prepare_spare`), so its thread grows into memory mapped
/// in here rather than on its own slow path; gives back spares left unused
/// for [`SPARE_IDLE`] (`waiting`: the rings with one out, active or not).
/// Rings that never grew get none: a thread that records a few events holds
/// no more than its first 512 bytes.
fn tend_spares<'a>(
    active: impl Iterator<Item = &'a Arc<ThreadRing>>,
    state: &mut IdMap<u32, SpareState>,
    waiting: &mut IdMap<u32, Arc<ThreadRing>>,
) {
    let now = Instant::now();
    let mut rings: Vec<Arc<ThreadRing>> = active.cloned().collect();
    rings.extend(waiting.values().cloned());
    for tr in &rings {
        let made = tr.ring.segments_made();
        if made < 2 {
            continue;
        }
        if tr.is_retired() {
            tr.ring.reclaim_spare();
            waiting.remove(&tr.seq_id);
            continue;
        }
        let st = state.entry(tr.seq_id).or_default();
        if st.made != made {
            st.made = made;
            st.since = tr.ring.prepare_spare().then_some(now);
        } else if st.since.is_some_and(|t| now - t >= SPARE_IDLE) {
            tr.ring.reclaim_spare();
            st.since = None;
        }
        if st.since.is_some() {
            waiting.insert(tr.seq_id, tr.clone());
        } else {
            waiting.remove(&tr.seq_id);
        }
    }
}
