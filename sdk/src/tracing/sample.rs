//! Whole-request sampling: a decision per root span (a span with no
//! parent), followed by every span and event under it.
//!
//! A span not kept is marked where its id is known to ringtrace: the
//! subscriber gives it an id with [`UNSAMPLED`] set (and its metadata's
//! address: nothing of it is kept, not even a slot of the span table); the
//! layer maps the registry's id to a mark ([`unsampled_slot`]). Entering
//! such a span puts it on the thread's stack of entered spans, which is how
//! a child made or an event emitted under it, on whichever thread enters
//! it, finds it is not kept.
//! Nothing of it reads the clock, visits a field or touches a ring.
//!
//! Most of a request not kept is not made at all: with a sampler, the
//! layer's `Layer::enabled` and the subscriber's `enabled` (every call site
//! `Interest::sometimes`) answer false, when the innermost span entered on
//! the thread is one not kept, for an event, and for a span whose call
//! site's spans have always been entered nested inside another span (4
//! enters seen, none alone: `SiteInfo::stays_nested`) and that is not a
//! root `sample_roots` names. Such a span would only pass its decision on
//! to what is made inside it, which finds the decision on the span around
//! it instead. A span of a site once seen entered alone (moved to another
//! task or thread, where nothing of its request is entered) is always made
//! and marked, so that it carries the decision there. What is left out is
//! left out for the whole dispatch: the registry makes no span and no layer
//! beside ringtrace's sees it.

#![forbid(unsafe_code)]

use crate::record::clock::ticks;
use crate::record::pattern::any_matches;
use std::cell::Cell;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use tracing::span::Attributes;
use tracing::Metadata;

/// Set in the ids the subscriber gives to spans not kept (span table ids
/// never have it: their generation stays below 2^31).
pub(crate) const UNSAMPLED: u64 = 1 << 63;

/// Set in what the layer maps the registry's id of a span not kept to,
/// with the address of the span's metadata in the bits below (never a span
/// table id: generations stay below 2^31; never `u64::MAX`, the mark of a
/// kept span whose category is off: metadata is aligned).
const UNSAMPLED_MARK: u64 = 1 << 63;

/// What the layer maps the registry's id of a span of `meta` not kept to.
#[inline]
pub(crate) fn unsampled_slot(meta: &'static Metadata<'static>) -> u64 {
    UNSAMPLED_MARK | (meta as *const Metadata<'static> as usize as u64)
}

/// Whether a value of the layer's map marks a span not kept.
#[inline]
pub(crate) fn is_unsampled_slot(slot: u64) -> bool {
    slot >= UNSAMPLED_MARK && slot != u64::MAX
}

/// The metadata address in a mark of [`unsampled_slot`].
#[inline]
pub(crate) fn unsampled_site(slot: u64) -> usize {
    (slot & !UNSAMPLED_MARK) as usize
}

/// A user's decision for a root span: `Some(keep)`, or `None` to leave it
/// to the ratio.
pub(crate) use crate::session::Decide;

/// How roots are decided: made by the `tracing` builder, shared by the
/// layer or subscriber it builds.
pub struct Sampler {
    /// A root is kept when a draw of 64 random bits is below this;
    /// `u64::MAX` with `ratio` 1: always.
    threshold: u64,
    pub(crate) ratio: f64,
    /// Name or target patterns (`prefix*` or exact) of the roots decided;
    /// empty: every root. Other roots are kept.
    pub(crate) roots: Vec<String>,
    pub(crate) decide: Option<Box<Decide>>,
}

impl fmt::Debug for Sampler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sampler")
            .field("ratio", &self.ratio)
            .field("roots", &self.roots)
            .field("decide", &self.decide.is_some())
            .finish()
    }
}

impl Sampler {
    pub(crate) fn new(ratio: f64, roots: Vec<String>, decide: Option<Box<Decide>>) -> Sampler {
        let ratio = if ratio.is_nan() {
            0.0
        } else {
            ratio.clamp(0.0, 1.0)
        };
        let threshold = if ratio >= 1.0 {
            u64::MAX
        } else {
            // Exact for the ratios people write (2^64 * r rounds to the
            // nearest representable u64 below 2^64).
            (ratio * 18_446_744_073_709_551_616.0) as u64
        };
        Sampler {
            threshold,
            ratio,
            roots,
            decide,
        }
    }

    /// Whether the root span of `attrs` and its subtree are kept; counted.
    #[inline]
    pub(crate) fn keep_root(&self, attrs: &Attributes<'_>) -> bool {
        let meta = attrs.metadata();
        if !self.decides(meta) {
            return true; // not a root this sampler decides: kept, not counted
        }
        let keep = match self.decide.as_ref().and_then(|d| d(attrs)) {
            Some(keep) => keep,
            None => self.threshold == u64::MAX || draw() < self.threshold,
        };
        count(keep);
        keep
    }

    /// Whether `meta` is a root this sampler names (`sample_roots`): such a
    /// span is always made, even inside a request not kept, and decided
    /// if it has no parent.
    #[inline]
    pub(crate) fn names(&self, meta: &Metadata<'_>) -> bool {
        !self.roots.is_empty() && self.decides(meta)
    }

    fn decides(&self, meta: &Metadata<'_>) -> bool {
        self.roots.is_empty()
            || any_matches(&self.roots, meta.name())
            || any_matches(&self.roots, meta.target())
    }
}

thread_local! {
    /// The thread's xorshift64* state; 0 until its first draw.
    static RNG: Cell<u64> = const { Cell::new(0) };
    /// The thread's shard of the root counts.
    static SHARD: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// 64 random bits (xorshift64*, one state per thread: no shared line).
#[inline]
fn draw() -> u64 {
    RNG.try_with(|r| {
        let mut x = r.get();
        if x == 0 {
            x = seed();
        }
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        r.set(x);
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    })
    .unwrap_or(0) // a thread being torn down: kept if anything is
}

#[cold]
fn seed() -> u64 {
    static THREADS: AtomicU64 = AtomicU64::new(0);
    let n = THREADS.fetch_add(1, Ordering::Relaxed);
    // Time and thread number through a splitmix64 finaliser; never 0.
    let mut z = ticks() ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (z ^ (z >> 31)) | 1
}

#[inline]
fn count(keep: bool) {
    let shard = SHARD
        .try_with(|s| {
            let mut i = s.get();
            if i == usize::MAX {
                static NEXT: AtomicU64 = AtomicU64::new(0);
                i = NEXT.fetch_add(1, Ordering::Relaxed) as usize;
                s.set(i);
            }
            i
        })
        .unwrap_or(0);
    crate::stats::counters::count_root(shard, keep);
}

static RINGTRACE: crate::events::Category = crate::events::Category::new("ringtrace");

/// A session sampled by `sampler` started: its counts start from here, and
/// the trace says how it is sampled (a process-wide instant).
pub(crate) fn announce(sampler: &Sampler) {
    crate::stats::counters::take_sampled_roots();
    let roots = if sampler.roots.is_empty() {
        "*".to_owned()
    } else {
        sampler.roots.join(",")
    };
    RINGTRACE
        .instant("sampling")
        .scope(crate::events::InstantScope::Process)
        .arg("ratio", sampler.ratio)
        .arg("roots", roots.as_str())
        .arg("hook", sampler.decide.is_some())
        .emit();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratio_bounds_and_threshold() {
        assert_eq!(Sampler::new(1.0, vec![], None).threshold, u64::MAX);
        assert_eq!(Sampler::new(2.0, vec![], None).threshold, u64::MAX);
        assert_eq!(Sampler::new(0.0, vec![], None).threshold, 0);
        assert_eq!(Sampler::new(f64::NAN, vec![], None).threshold, 0);
        assert_eq!(Sampler::new(0.5, vec![], None).threshold, 1 << 63);
    }

    #[test]
    fn draws_below_a_threshold_at_its_rate() {
        let t = Sampler::new(0.01, vec![], None).threshold;
        let n = 200_000;
        let kept = (0..n).filter(|_| draw() < t).count();
        // 2,000 expected; 5 standard deviations (about 222) either side.
        assert!((1_778..=2_222).contains(&kept), "{kept} kept of {n}");
    }
}
