//! The `track_event` data source: which categories one data source instance
//! (one tracing session) records, from its `TrackEventConfig`, the
//! selection of a drained batch's records for that instance, and when the
//! descriptor is re-announced because categories were first used.

#![forbid(unsafe_code)]

use super::wire::TrackEventConfig;
use crate::encode::Sites;
use crate::record::header::{header_kind, header_len, header_payload};
use crate::record::layout::{
    KIND_ASYNC_END, KIND_BEGIN, KIND_BEGIN_TT, KIND_END, KIND_END_ARGS, KIND_END_TT, KIND_FLOW,
    KIND_LOST, MAX_SITE_ID,
};
use crate::record::pattern;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The categories one instance records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Selection {
    config: TrackEventConfig,
}

impl Selection {
    pub(crate) fn new(config: TrackEventConfig) -> Selection {
        Selection { config }
    }

    /// Whether `category` is recorded. The order is the one
    /// `track_event_config.proto` documents: exact names before patterns,
    /// within each enabled categories, enabled tags, disabled categories,
    /// disabled tags; a category no rule matches is off. ringtrace's
    /// categories carry no tags, so only a tag rule `*` matches them. A config
    /// with no rule at all records every category.
    pub(crate) fn enabled(&self, category: &str) -> bool {
        let c = &self.config;
        if c.enabled_categories.is_empty()
            && c.disabled_categories.is_empty()
            && c.enabled_tags.is_empty()
            && c.disabled_tags.is_empty()
        {
            return true;
        }
        let exact = |list: &[String]| list.iter().any(|p| p == category);
        if exact(&c.enabled_categories) {
            return true;
        }
        if exact(&c.disabled_categories) {
            return false;
        }
        let pattern = |list: &[String]| {
            list.iter()
                .any(|p| p.ends_with('*') && pattern::matches(p, category))
        };
        let any_tag = |list: &[String]| list.iter().any(|p| p == "*");
        if pattern(&c.enabled_categories) || any_tag(&c.enabled_tags) {
            return true;
        }
        if pattern(&c.disabled_categories) || any_tag(&c.disabled_tags) {
            return false;
        }
        false
    }
}

/// The shortest time between two re-announcements of the descriptor: the
/// first uses of a burst of categories (a program's start, a new module's
/// first calls) go out in one or two UpdateDataSource, not one each.
pub(crate) const ANNOUNCE_GAP: Duration = Duration::from_millis(100);

/// Decides, once per flusher cycle, when to re-announce `track_event`
/// because categories were first used: a change goes out at once if the
/// last update sent is older than [`ANNOUNCE_GAP`], else when that gap is
/// over (with everything registered by then).
#[derive(Debug, Default)]
pub(crate) struct Announcer {
    seen: usize,
    pending: bool,
    last_sent: Option<Instant>,
}

impl Announcer {
    /// `known`: how many categories are known now; `announce` sends the
    /// descriptor and says whether it did (not when there is no connection,
    /// or it lists nothing new: that costs no gap).
    pub(crate) fn check(
        &mut self,
        known: usize,
        now: impl FnOnce() -> Instant,
        announce: impl FnOnce() -> bool,
    ) {
        if known != self.seen {
            self.seen = known;
            self.pending = true;
        }
        if !self.pending {
            return;
        }
        let now = now();
        if self
            .last_sent
            .is_some_and(|t| now.duration_since(t) < ANNOUNCE_GAP)
        {
            return;
        }
        self.pending = false;
        if announce() {
            self.last_sent = Some(now);
        }
    }
}

/// Per thread: which open scopes (by depth) this instance kept, and flow
/// records waiting for the end they bind to.
#[derive(Default)]
struct ThreadSelection {
    kept: Vec<bool>,
    flows: Vec<u64>,
}

/// Selects records of drained batches for one output (an instance, or the
/// file when system tracing is on too).
#[derive(Default)]
pub(crate) struct RecordFilter {
    threads: HashMap<u32, ThreadSelection>,
    /// Per call site id: 0 unknown, 1 on, 2 off.
    site_on: Vec<u8>,
}

impl RecordFilter {
    /// Forgets what was decided per call site (the categories changed).
    pub(crate) fn forget_sites(&mut self) {
        self.site_on.clear();
    }

    pub(crate) fn forget_thread(&mut self, seq_id: u32) {
        self.threads.remove(&seq_id);
    }

    /// Appends to `out` the records of `words` this instance records: those of
    /// enabled call sites, the ends of the scopes it kept (a scope begun
    /// before the instance started keeps its end: the encoder drops ends
    /// without a begin), flows bound to kept ends, and loss markers.
    pub(crate) fn select(
        &mut self,
        seq_id: u32,
        words: &[u64],
        wants: &dyn Fn(&str) -> bool,
        sites: &mut Sites,
        out: &mut Vec<u64>,
    ) {
        out.clear();
        let t = self.threads.entry(seq_id).or_default();
        let mut pos = 0;
        while pos < words.len() {
            let hdr = words[pos];
            let len = header_len(hdr) as usize;
            if len < 2 || pos + len > words.len() {
                break;
            }
            let rec = &words[pos..pos + len];
            pos += len;
            let kind = header_kind(hdr);
            let payload = header_payload(hdr);
            let site = (payload & MAX_SITE_ID as u64) as u32;
            let depth = (payload >> 24) as usize;
            let keep = match kind {
                KIND_LOST => true,
                KIND_FLOW => {
                    t.flows.extend_from_slice(rec);
                    continue;
                }
                KIND_END | KIND_END_TT => {
                    let d = payload as usize;
                    t.kept.get(d).copied().unwrap_or(true)
                }
                KIND_END_ARGS => t.kept.get(depth).copied().unwrap_or(true),
                KIND_BEGIN | KIND_BEGIN_TT => {
                    let on = site_enabled(&mut self.site_on, site, wants, sites);
                    if t.kept.len() <= depth {
                        t.kept.resize(depth + 1, true);
                    }
                    t.kept[depth] = on;
                    on
                }
                _ => site_enabled(&mut self.site_on, site, wants, sites),
            };
            let binds_flows = matches!(
                kind,
                KIND_END | KIND_END_TT | KIND_END_ARGS | KIND_ASYNC_END
            );
            if binds_flows && !t.flows.is_empty() {
                if keep {
                    out.extend_from_slice(&t.flows);
                }
                t.flows.clear();
            }
            if keep {
                out.extend_from_slice(rec);
            }
        }
    }
}

fn site_enabled(
    cache: &mut Vec<u8>,
    site: u32,
    wants: &dyn Fn(&str) -> bool,
    sites: &mut Sites,
) -> bool {
    let i = site as usize;
    if cache.len() <= i {
        cache.resize(i + 1, 0);
    }
    if cache[i] == 0 {
        let on = sites.get(site).is_some_and(|cs| wants(cs.category));
        cache[i] = if on { 1 } else { 2 };
    }
    cache[i] == 1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sel(enabled: &[&str], disabled: &[&str]) -> Selection {
        Selection::new(TrackEventConfig {
            enabled_categories: enabled.iter().map(|s| s.to_string()).collect(),
            disabled_categories: disabled.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        })
    }

    #[test]
    fn exact_names_win_over_patterns() {
        let s = sel(&["demo", "net.*"], &["*"]);
        assert!(s.enabled("demo"));
        assert!(s.enabled("net.http"));
        assert!(!s.enabled("io"));
        let s = sel(&["*"], &["io"]);
        assert!(s.enabled("demo"));
        assert!(!s.enabled("io"));
        assert!(sel(&[], &[]).enabled("anything"));
        assert!(!sel(&["a"], &[]).enabled("b"));
    }

    #[test]
    fn a_burst_of_new_categories_is_announced_in_two_updates_at_most() {
        let t0 = Instant::now();
        let at = |ms: u64| move || t0 + Duration::from_millis(ms);
        let mut a = Announcer::default();
        let mut sent = Vec::new();
        let mut step = |a: &mut Announcer, known: usize, ms: u64, connected: bool| {
            a.check(known, at(ms), || {
                sent.push(ms);
                connected
            });
        };
        step(&mut a, 0, 0, true); // nothing known, nothing new
        step(&mut a, 3, 1, false); // not connected yet: costs no gap
        step(&mut a, 4, 2, true); // the first new category: at once
        for n in 5..=14 {
            step(&mut a, n, 2 + 5 * (n - 4) as u64, true); // a burst, 5 ms apart
        }
        step(&mut a, 14, 101, true);
        step(&mut a, 14, 102, true); // the rest together once the gap is over
        step(&mut a, 14, 500, true); // nothing new, nothing sent
        step(&mut a, 15, 501, true); // a later first use: at once
        assert_eq!(sent, vec![1, 2, 102, 501]);
    }
}
