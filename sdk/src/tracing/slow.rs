//! Slow spans captured whole: a span whose name or target matches, closing
//! more than a threshold after its creation, asks for a capture of its life
//! (`session::trigger`: the flusher writes it, in flight-recorder mode).
//! The rule is the session's one slow rule (`Builder::capture_slow`), its
//! threshold in ticks of the session's clock.

#![forbid(unsafe_code)]

use crate::record::clock::ticks;
use crate::session::SlowRule;
use tracing::Metadata;

/// A span of `meta` created at `created` closes now: asks for a capture if
/// it matches `rule` and lasted longer than its threshold.
#[inline]
pub(crate) fn closed(rule: &SlowRule, meta: &'static Metadata<'static>, created: u64) {
    if !rule.matches(meta.name()) && !rule.matches(meta.target()) {
        return;
    }
    let now = ticks();
    if rule.is_slow(created, now) {
        crate::session::queue_capture(crate::session::capture::Capture {
            name: meta.name().to_owned(),
            start: created,
            end: now,
        });
    }
}
