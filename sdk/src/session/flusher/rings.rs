//! The rings a pass looks at: the flusher's copy of the registry's list, the
//! active (announced) ones, and quiet ones in turn.

#![forbid(unsafe_code)]

use crate::encode::IdMap;
use crate::record::registry::{ThreadRing, REGISTRY};
use crate::record::ring::ANNOUNCED;
use crate::record::sync::Arc;

/// Quiet rings a pass looks at besides the announced ones, in turn: a
/// record whose writer was held up while its ring was made quiet (see
/// `record::ring::announce`) waits a bounded number of passes.
const QUIET_LOOKS_PER_PASS: usize = 32;

/// The rings the flusher knows (its copy of the registry's list) and those
/// a pass looks at: the announced ones, which have or may have records. A
/// ring leaves `active` when a drain leaves it empty and it goes quiet
/// (`ThreadRing::quiet`), and comes back when its id is announced.
#[derive(Default)]
pub(super) struct RingSet {
    /// The registry's list, as taken (in order of listing).
    pub(super) all: Vec<Arc<ThreadRing>>,
    pub(super) by_seq: IdMap<u32, Arc<ThreadRing>>,
    pub(super) active: IdMap<u32, Arc<ThreadRing>>,
    /// Where the next look at quiet rings starts in `all`.
    pub(super) cursor: usize,
    /// The rings the registry listed since the last look (kept for its
    /// allocation, which goes back and forth with the registry's).
    pub(super) added: Vec<Arc<ThreadRing>>,
    /// The ids taken from `ANNOUNCED` (kept for its allocation).
    pub(super) ids: Vec<u32>,
}

impl RingSet {
    /// Follows the registry's list: rings new to it are active (announced
    /// from their creation).
    pub(super) fn follow_registry(&mut self) {
        REGISTRY.take_added(&mut self.added);
        for tr in self.added.drain(..) {
            self.by_seq.insert(tr.seq_id, tr.clone());
            self.active.insert(tr.seq_id, tr.clone());
            self.all.push(tr);
        }
        self.take_announced();
    }

    /// Rings announced since the last look become active. An id of no ring
    /// known (a ring of an earlier session, or not yet listed: it is active
    /// once listed) is passed over.
    pub(super) fn take_announced(&mut self) {
        ANNOUNCED.take(&mut self.ids, self.all.len());
        for seq in &self.ids {
            if let Some(tr) = self.by_seq.get(seq) {
                self.active.entry(*seq).or_insert_with(|| tr.clone());
            }
        }
    }

    /// The rings a pass looks at, into `out`: every one if `sweep`, else the
    /// active ones and [`QUIET_LOOKS_PER_PASS`] others in turn.
    pub(super) fn visits(&mut self, sweep: bool, out: &mut Vec<Arc<ThreadRing>>) {
        out.clear();
        if sweep {
            out.extend(self.all.iter().cloned());
            return;
        }
        out.extend(self.active.values().cloned());
        let n = self.all.len();
        for _ in 0..QUIET_LOOKS_PER_PASS.min(n) {
            self.cursor = if self.cursor + 1 >= n {
                0
            } else {
                self.cursor + 1
            };
            let tr = &self.all[self.cursor];
            if !self.active.contains_key(&tr.seq_id) {
                out.push(tr.clone());
            }
        }
    }

    /// After a drain of `tr`: quiet if it holds nothing (then it is not
    /// looked at until it announces itself), else active.
    pub(super) fn settle(&mut self, tr: &Arc<ThreadRing>) {
        if tr.quiet() {
            self.active.remove(&tr.seq_id);
        } else {
            self.activate(tr);
        }
    }

    /// `tr` is looked at each pass (a quiet ring found holding records).
    pub(super) fn activate(&mut self, tr: &Arc<ThreadRing>) {
        self.active.entry(tr.seq_id).or_insert_with(|| tr.clone());
    }

    /// Forgets the rings drained after their threads exited (`gone`,
    /// sorted), as the registry does.
    pub(super) fn forget(&mut self, gone: &[u32]) {
        if gone.is_empty() {
            return;
        }
        for seq in gone {
            self.active.remove(seq);
            self.by_seq.remove(seq);
        }
        self.all
            .retain(|tr| gone.binary_search(&tr.seq_id).is_err());
        REGISTRY.remove(gone);
    }
}
