//! The flight recorder's samples (overwrite mode): CPU samples held beside
//! the recorder's records until a write-out (a snapshot, `flush()`, stop, a
//! capture window's start), then written for the same window as the
//! records: those at or after the oldest record written. Bounded in time
//! (samples older than the oldest record held go as the recorder forgets
//! records) and in memory (taken from the session's budget in chunks, at
//! most [`HELD_CAP`] samples; the oldest go first). Samples that go are
//! aged out, as the records the recorder forgets, not lost.
//!
//! A capture (`session::trigger`) reads the samples of its window from
//! here too, taking none out.
//!
//! Only the flusher thread touches it: no synchronisation.

#![forbid(unsafe_code)]

use super::tables::Sample;
use crate::record::registry::REGISTRY;
use std::collections::VecDeque;

/// Most samples held (8 MiB; an hour of one thread at 1 kHz is 3.6 M).
const HELD_CAP: usize = 1 << 18;
/// Samples taken from the budget at once.
const CHUNK: usize = 1 << 12;
const CHUNK_BYTES: u64 = (CHUNK * std::mem::size_of::<Sample>()) as u64;

#[derive(Default)]
pub(crate) struct HeldSamples {
    samples: VecDeque<Sample>,
    /// Room taken from the budget, in samples (whole chunks).
    room: usize,
    /// Samples lost (kernel records, the sampler's cap) while held: marked
    /// at the next write-out.
    pub(crate) lost: u64,
    /// Samples that went (too old, or no room): the session's count.
    pub(crate) aged_out: u64,
}

impl HeldSamples {
    /// Holds `samples` (in time order per thread), `lost` more lost.
    pub(crate) fn push(&mut self, samples: &[Sample], lost: u64) {
        self.lost += lost;
        for s in samples {
            if self.samples.len() == self.room && !self.grow() {
                match self.samples.pop_front() {
                    Some(_) => self.aged_out += 1,
                    None => {
                        // No room at all (the budget is spent).
                        self.aged_out += 1;
                        continue;
                    }
                }
            }
            self.samples.push_back(*s);
        }
    }

    /// One more chunk of room from the budget; false at the cap or when the
    /// budget refuses.
    fn grow(&mut self) -> bool {
        if self.room + CHUNK > HELD_CAP || !REGISTRY.budget.try_take(CHUNK_BYTES) {
            return false;
        }
        self.room += CHUNK;
        true
    }

    /// Forgets the samples taken before `from_ns` (the oldest record the
    /// recorder still holds).
    pub(crate) fn forget_before(&mut self, from_ns: u64) {
        let before = self.samples.len();
        self.samples.retain(|s| s.ts_ns >= from_ns);
        self.aged_out += (before - self.samples.len()) as u64;
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.samples.is_empty() && self.lost == 0
    }

    /// The samples held taken from `from_ns` to `to_ns` (a capture's window;
    /// nothing is taken out).
    pub(crate) fn window(&self, from_ns: u64, to_ns: u64) -> impl Iterator<Item = &Sample> {
        self.samples
            .iter()
            .filter(move |s| (from_ns..=to_ns).contains(&s.ts_ns))
    }

    /// Takes the samples at or after `from_ns` (all with `None`) into
    /// `into`, and the losses; the others are aged out. The store is empty
    /// after, its room kept for the next window.
    pub(crate) fn take(&mut self, from_ns: Option<u64>, into: &mut Vec<Sample>) -> u64 {
        into.clear();
        let from = from_ns.unwrap_or(0);
        for s in self.samples.drain(..) {
            if s.ts_ns >= from {
                into.push(s);
            } else {
                self.aged_out += 1;
            }
        }
        std::mem::take(&mut self.lost)
    }
}

impl Drop for HeldSamples {
    fn drop(&mut self) {
        REGISTRY
            .budget
            .give_back((self.room / CHUNK) as u64 * CHUNK_BYTES);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(ts_ns: u64) -> Sample {
        Sample {
            ts_ns,
            tid: 1,
            cpu: 0,
            callstack: 1,
            truncated: false,
        }
    }

    /// Too old or beyond the window: aged out, counted; the rest kept in
    /// order; the losses handed over once.
    #[test]
    fn held_samples_age_out_by_time_and_window() {
        let mut h = HeldSamples::default();
        h.push(&(0..10).map(sample).collect::<Vec<_>>(), 2);
        h.forget_before(3);
        assert_eq!(h.aged_out, 3);
        let mut out = Vec::new();
        assert_eq!(h.take(Some(5), &mut out), 2);
        assert_eq!(
            out.iter().map(|s| s.ts_ns).collect::<Vec<_>>(),
            vec![5, 6, 7, 8, 9]
        );
        assert_eq!(h.aged_out, 5);
        assert!(h.is_empty());
        assert_eq!(h.take(None, &mut out), 0);
    }

    /// At the cap the oldest go first.
    #[test]
    fn held_samples_keep_the_newest_at_the_cap() {
        let mut h = HeldSamples::default();
        let many: Vec<Sample> = (0..HELD_CAP as u64 + 10).map(sample).collect();
        h.push(&many, 0);
        assert!(h.samples.len() <= HELD_CAP);
        assert_eq!(h.aged_out as usize + h.samples.len(), many.len());
        assert_eq!(h.samples.back().unwrap().ts_ns, HELD_CAP as u64 + 9);
        assert_eq!(h.samples.front().unwrap().ts_ns, h.aged_out);
    }

    /// A capture's window: the samples inside it (both ends included),
    /// none taken out.
    #[test]
    fn a_window_reads_without_taking() {
        let mut h = HeldSamples::default();
        h.push(&(0..10).map(sample).collect::<Vec<_>>(), 0);
        let w: Vec<u64> = h.window(3, 6).map(|s| s.ts_ns).collect();
        assert_eq!(w, vec![3, 4, 5, 6]);
        let mut out = Vec::new();
        h.take(None, &mut out);
        assert_eq!(out.len(), 10);
    }
}
