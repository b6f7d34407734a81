//! Slow spans captured whole: a span whose name or target matches, closing
//! more than a threshold after its creation, asks for a capture of its life
//! (`session::trigger`: the flusher writes it, in flight-recorder mode).

#![forbid(unsafe_code)]

use crate::record::clock::ticks;
use std::time::{Duration, Instant};
use tracing::Metadata;

/// The rule of `TracingBuilder::capture_slow`.
#[derive(Debug)]
pub struct SlowRule {
    patterns: Vec<String>,
    /// The threshold in clock ticks.
    ticks: u64,
}

impl SlowRule {
    /// Measures the clock's rate (2 ms) to put `threshold` in ticks.
    pub(crate) fn new(patterns: Vec<String>, threshold: Duration) -> SlowRule {
        let (t0, i0) = (ticks(), Instant::now());
        std::thread::sleep(Duration::from_millis(2));
        let (t1, i1) = (ticks(), Instant::now());
        let per_ns = (t1 - t0) as f64 / (i1 - i0).as_nanos().max(1) as f64;
        SlowRule {
            patterns,
            ticks: (threshold.as_nanos() as f64 * per_ns) as u64,
        }
    }

    fn matches(&self, meta: &Metadata<'_>) -> bool {
        self.patterns.iter().any(|p| {
            let m = |s: &str| match p.strip_suffix('*') {
                Some(prefix) => s.starts_with(prefix),
                None => p == s,
            };
            m(meta.name()) || m(meta.target())
        })
    }

    /// A span of `meta` created at `created` closes now: asks for a
    /// capture if it matches and lasted longer than the threshold.
    #[inline]
    pub(crate) fn closed(&self, meta: &'static Metadata<'static>, created: u64) {
        if !self.matches(meta) {
            return;
        }
        let now = ticks();
        if now.saturating_sub(created) > self.ticks {
            crate::session::queue_capture(crate::session::capture::Capture {
                name: meta.name().to_owned(),
                start: created,
                end: now,
            });
        }
    }
}
