//! Slow scopes captured whole ([`Builder::capture_slow_scopes`]): the
//! flusher, reading the records it drains, finds each slice on a thread
//! (a `trace_scope!`, a `#[traced]` function or poll, a typed
//! [`events`](crate::events) slice, a `tracing` span's entry) and each
//! `#[traced]` async range whose name or category matches and that lasted
//! longer than the threshold, and queues a capture of it as
//! [`trigger`](crate::trigger) does (`trigger`: the next pass drains every
//! ring and writes the window from the flight recorder's store).
//!
//! Done on the flusher, never on the recording thread: a scope's begin and
//! end are records already, so the macros pay nothing for the rule, and a
//! session without it pays nothing either (no scan). Begins and ends pair
//! by depth as the encoders pair them; only matching slices are remembered.

#![forbid(unsafe_code)]

#[allow(unused_imports)] // rustdoc links
use crate::session::builder::Builder;

use crate::encode::event::EventView;
use crate::encode::{Context, IdMap};
use crate::record::event::op;
use crate::record::layout::{self, Record};
use crate::session::builder::SlowRule;
use crate::session::capture::Capture;

/// Async ranges remembered at most (a range whose end was lost stays until
/// the map is full; then the map starts over).
const MAX_RANGES: usize = 1 << 16;

/// A matching slice begun and not yet ended.
struct Open {
    depth: u32,
    ts: u64,
    name: String,
}

/// The rule and what it follows (the flusher's).
pub(crate) struct SlowScopes {
    rule: SlowRule,
    /// Per call site id: 0 not looked at yet, 1 matches, 2 does not.
    sites: Vec<u8>,
    /// Per thread: matching slices open, innermost last.
    open: IdMap<u32, Vec<Open>>,
    /// `#[traced]` async ranges open: id → (begin ticks, site).
    ranges: IdMap<u64, (u64, u32)>,
    /// Captures found in the records scanned since the last take.
    pub(crate) found: Vec<Capture>,
}

impl SlowScopes {
    pub(crate) fn new(rule: SlowRule) -> SlowScopes {
        SlowScopes {
            rule: rule.calibrated(),
            sites: Vec::new(),
            open: IdMap::default(),
            ranges: IdMap::default(),
            found: Vec::new(),
        }
    }

    fn matches(&self, text: &str) -> bool {
        self.rule.matches(text)
    }

    /// Whether the call site's name or category matches (cached per site).
    fn site_matches(&mut self, ctx: &mut Context<'_>, site: u32) -> bool {
        let i = site as usize;
        if i >= self.sites.len() {
            self.sites.resize(i + 1, 0);
        }
        if self.sites[i] == 0 {
            let m = ctx
                .sites
                .get(site)
                .is_some_and(|s| self.matches(s.name()) || self.matches(s.category()));
            self.sites[i] = if m { 1 } else { 2 };
        }
        self.sites[i] == 1
    }

    /// Reads one drained batch of thread `seq_id`.
    pub(crate) fn scan(&mut self, ctx: &mut Context<'_>, seq_id: u32, words: &[u64]) {
        for rec in layout::parse(words) {
            match rec {
                Record::Begin {
                    ts, site, depth, ..
                }
                | Record::BeginTt {
                    ts, site, depth, ..
                } if self.site_matches(ctx, site) => {
                    let name = ctx.sites.get(site).map_or("", |s| s.name()).to_owned();
                    self.begin(seq_id, depth, ts, name);
                }
                Record::Event {
                    ts,
                    site,
                    op: op::SCOPE_BEGIN,
                    fields,
                } => {
                    let v = EventView::decode(fields);
                    let name = v.name.unwrap_or_default();
                    if self.matches(&name) || self.site_matches(ctx, site) {
                        self.begin(seq_id, v.depth.unwrap_or(0), ts, name);
                    }
                }
                Record::End { ts, depth }
                | Record::EndTt { ts, depth, .. }
                | Record::EndArgs { ts, depth, .. } => self.end(seq_id, depth, ts),
                Record::Event {
                    ts,
                    op: op::SCOPE_END,
                    fields,
                    ..
                } if self.open.get(&seq_id).is_some_and(|v| !v.is_empty()) => {
                    let depth = EventView::decode(fields).depth.unwrap_or(0);
                    self.end(seq_id, depth, ts);
                }
                Record::AsyncBegin { ts, site, id, .. } if self.site_matches(ctx, site) => {
                    if self.ranges.len() >= MAX_RANGES {
                        self.ranges.clear();
                    }
                    self.ranges.insert(id, (ts, site));
                }
                Record::AsyncEnd { ts, id, .. } => {
                    if let Some((begin, site)) = self.ranges.remove(&id) {
                        let name = ctx.sites.get(site).map_or("", |s| s.name()).to_owned();
                        self.ended(name, begin, ts);
                    }
                }
                _ => {}
            }
        }
    }

    fn begin(&mut self, seq_id: u32, depth: u32, ts: u64, name: String) {
        self.open
            .entry(seq_id)
            .or_default()
            .push(Open { depth, ts, name });
    }

    /// An end at `depth`: slices deeper than it lost their ends; the one at
    /// `depth`, if it matches, ends here.
    fn end(&mut self, seq_id: u32, depth: u32, ts: u64) {
        let Some(open) = self.open.get_mut(&seq_id) else {
            return;
        };
        while open.last().is_some_and(|o| o.depth > depth) {
            open.pop();
        }
        if open.last().is_some_and(|o| o.depth == depth) {
            let o = open.pop().unwrap();
            self.ended(o.name, o.ts, ts);
        }
    }

    fn ended(&mut self, name: String, begin: u64, end: u64) {
        if self.rule.is_slow(begin, end) {
            self.found.push(Capture {
                name,
                start: begin,
                end,
            });
        }
    }

    /// The thread is finished: its open slices will not end.
    pub(crate) fn thread_done(&mut self, seq_id: u32) {
        self.open.remove(&seq_id);
    }
}
