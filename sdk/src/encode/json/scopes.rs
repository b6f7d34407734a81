//! How scopes are written. By default a scope is one complete (`X`) event
//! written when it ends, with `tts` and `tdur` when thread time is
//! recorded; plain ones (no args, no flows) straight into the output from
//! a head kept per call site (`plain_x`). With `JsonScopes::BeginEnd`
//! every slice is a `B` written when it begins and an `E` when it ends
//! (each with its `tts`); complete events with explicit times become a
//! `B`/`E` pair too, so one file never mixes `X` with `B`/`E` (readers
//! break ties between them badly). An `E` carries no name or category, so
//! it closes whatever its thread opened last, as the format's readers match
//! it. Ends whose begin was lost, and scopes still open at the end, are
//! written with a flag in their args.

use super::text::{escape_into, micros, value_into, Line};
use super::{bind_flow, who_into, JsonEncoder, Thread};
use crate::encode::event::{open_site, open_tts, EventView, OPEN_DYNAMIC, OPEN_TTS};
use crate::encode::{Context, OpenScope};
use crate::record::args::ArgReader;
use crate::record::callsite::Callsite;
use crate::record::layout::Record;
use std::fmt::Write as _;

/// How scopes are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum ScopeForm {
    /// One `X` per scope (default).
    #[default]
    Complete,
    /// `B` at the begin, `E` at the end.
    BeginEnd,
}

impl JsonEncoder {
    /// The `X` of a scope that ends at `end_ns`, with `flag` (an end lost,
    /// a scope unfinished) in its args; scopes of the typed API or with
    /// thread time, and every scope in B/E form, through
    /// [`Self::complete_ext`].
    pub(super) fn complete(
        &mut self,
        ctx: &mut Context<'_>,
        t: (i32, i64),
        scope: &OpenScope,
        end_ns: u64,
        flag: Option<&str>,
        out: &mut Vec<u8>,
    ) {
        if self.begin_end() || scope.site & (OPEN_DYNAMIC | OPEN_TTS) != 0 {
            return self.complete_ext(ctx, t, scope, end_ns, None, None, flag, &[], out);
        }
        let Some(cs) = ctx.sites.get(scope.site) else {
            return;
        };
        self.stats.events += 1;
        self.head_site(cs, "X", scope.ts_ns, t.0, t.1);
        self.line.push_str(",\"dur\":");
        micros(&mut self.line, end_ns.saturating_sub(scope.ts_ns));
        self.args(cs, &scope.args, flag);
        self.line.push('}');
        self.push_event(out);
    }

    /// As `complete`, with the args of the end record (`extra`, merged into
    /// the slice's: a name in both takes the end's value) and the flows bound
    /// to this slice. A JSON event binds one flow (v2 `bind_id` with
    /// `flow_out` or `flow_in`); further flows of the same slice are left out.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn complete_with(
        &mut self,
        ctx: &mut Context<'_>,
        t: (i32, i64),
        scope: &OpenScope,
        end_ns: u64,
        extra: Option<(&'static Callsite, &[u64])>,
        flows: &[u64],
        out: &mut Vec<u8>,
    ) {
        if scope.site & (OPEN_DYNAMIC | OPEN_TTS) != 0 {
            return self.complete_ext(ctx, t, scope, end_ns, None, None, None, flows, out);
        }
        let Some(cs) = ctx.sites.get(scope.site) else {
            return;
        };
        self.stats.events += 1;
        if flows.is_empty()
            && cs.arg_names.is_empty()
            && extra.is_none_or(|(end_cs, _)| end_cs.arg_names.is_empty())
        {
            return self.plain_x(cs, scope.ts_ns, end_ns, t, out);
        }
        self.head_site(cs, "X", scope.ts_ns, t.0, t.1);
        self.line.push_str(",\"dur\":");
        micros(&mut self.line, end_ns.saturating_sub(scope.ts_ns));
        if let Some(&flow) = flows.first() {
            bind_flow(&mut self.line, flow, t.0);
        }
        match extra {
            Some((end_cs, end_args)) if !end_cs.arg_names.is_empty() => {
                let l = &mut self.line;
                l.push_str(",\"args\":{");
                let mut first = true;
                let mut value = Line::default();
                let mut r = ArgReader::new(&scope.args);
                for name in cs.arg_names {
                    value.clear();
                    value_into(&mut value, &mut r, 0);
                    if end_cs.arg_names.contains(name) {
                        continue;
                    }
                    if !std::mem::take(&mut first) {
                        l.push(',');
                    }
                    escape_into(l, name);
                    l.push(':');
                    l.push_line(&value);
                }
                let mut r = ArgReader::new(end_args);
                for name in end_cs.arg_names {
                    if !std::mem::take(&mut first) {
                        l.push(',');
                    }
                    escape_into(l, name);
                    l.push(':');
                    value_into(l, &mut r, 0);
                }
                l.push('}');
            }
            _ => self.args(cs, &scope.args, None),
        }
        self.line.push('}');
        self.push_event(out);
    }

    /// Plain scope begins and ends may skip the general path (always, but
    /// in tests that compare both).
    #[inline(always)]
    pub(super) fn plain_fast(&self) -> bool {
        #[cfg(test)]
        return !self.general_only;
        #[cfg(not(test))]
        true
    }

    /// An `X` event without args or flows, written straight into `out`
    /// (what `head_site`, `dur` and `push_event` write, without building
    /// the line first): its head up to the timestamp is kept per call site.
    #[inline]
    pub(super) fn plain_x(
        &mut self,
        cs: &Callsite,
        ts_ns: u64,
        end_ns: u64,
        t: (i32, i64),
        out: &mut Vec<u8>,
    ) {
        let idx = cs.id() as usize;
        if self.x_heads.len() <= idx {
            self.x_heads.resize_with(idx + 1, Vec::new);
        }
        if self.x_heads[idx].is_empty() {
            let mut h = Line::default();
            h.push_str("{\"name\":");
            escape_into(&mut h, cs.name);
            h.push_str(",\"cat\":");
            escape_into(&mut h, cs.category);
            h.push_str(",\"ph\":\"X\",\"ts\":");
            self.x_heads[idx] = h.0;
        }
        if self.who.2.is_empty() || self.who.0 != t.0 || self.who.1 != t.1 {
            let mut w = Line(std::mem::take(&mut self.who.2));
            w.clear();
            who_into(&mut w, t.0, t.1);
            self.who = (t.0, t.1, w.0);
        }
        let head = &self.x_heads[idx];
        let mut l = Line(std::mem::take(out));
        // Separator, head, two numbers of at most 25 bytes, `,"dur":`, `}`.
        l.0.reserve(2 + head.len() + self.who.2.len() + 2 * 25 + 8);
        if self.wrote_event {
            l.0.extend_from_slice(b",\n");
        }
        self.wrote_event = true;
        l.0.extend_from_slice(head);
        micros(&mut l, ts_ns);
        l.0.extend_from_slice(&self.who.2);
        l.0.extend_from_slice(b",\"dur\":");
        micros(&mut l, end_ns.saturating_sub(ts_ns));
        l.0.push(b'}');
        *out = l.0;
    }

    /// `X` (or `E` in B/E form) for a scope that `complete`/`complete_with`
    /// cannot write alone: flagged scopes (typed API, thread time) and
    /// every scope end in B/E form. `end_tts` is the thread time at the
    /// end; `end` the fields of a SCOPE_END record.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn complete_ext(
        &mut self,
        ctx: &mut Context<'_>,
        who: (i32, i64),
        scope: &OpenScope,
        end_ns: u64,
        end_tts: Option<u64>,
        end: Option<&EventView<'_>>,
        flag: Option<&str>,
        flows: &[u64],
        out: &mut Vec<u8>,
    ) {
        if self.begin_end() {
            self.layer_flows_v1(who, end_ns, flows, out);
            return self.end_event_with(who, end_ns, end_tts, end, flag, out);
        }
        let Some(cs) = ctx.sites.get(open_site(scope)) else {
            return;
        };
        let dur = end_ns.saturating_sub(scope.ts_ns);
        if scope.site & OPEN_DYNAMIC != 0 {
            let begin = EventView::decode(&scope.args);
            let name = begin.name.clone().unwrap_or_default();
            self.head_opt(&name, Some(cs.category), "X", scope.ts_ns, who);
            self.line.push_str(",\"dur\":");
            micros(&mut self.line, dur);
            self.thread_times(begin.tts, end_tts);
            if let Some(&flow) = flows.first() {
                super::bind_flow(&mut self.line, flow, who.0);
            }
            self.cname(&begin);
            self.stack_into(&begin, false, "sf", "stack");
            if let Some(end) = end {
                self.stack_into(end, true, "esf", "estack");
            }
            self.args_dict(begin.args, end.and_then(|e| e.args), flag);
        } else {
            let (tts, args) = open_tts(scope);
            self.head(cs.name, cs.category, "X", scope.ts_ns, who.0, who.1);
            self.line.push_str(",\"dur\":");
            micros(&mut self.line, dur);
            self.thread_times(tts, end_tts);
            if let Some(&flow) = flows.first() {
                super::bind_flow(&mut self.line, flow, who.0);
            }
            let args = args.to_vec();
            self.args(cs, &args, flag);
        }
        self.finish_line(out);
    }

    /// `,"tts":..,"tdur":..` from the thread times at both ends.
    pub(super) fn thread_times(&mut self, begin: Option<u64>, end: Option<u64>) {
        if let Some(b) = begin {
            self.line.push_str(",\"tts\":");
            micros(&mut self.line, b);
            if let Some(e) = end {
                self.line.push_str(",\"tdur\":");
                micros(&mut self.line, e.saturating_sub(b));
            }
        }
    }

    /// Flows of the `tracing` layer bound to a slice ending at `ts`, in B/E
    /// form (JSON's `bind_id` binds only to `B`/`X`/`b`/`n`, and the layer
    /// binds at the end): v1 events bound to the enclosing slice, written
    /// before its `E` so that slice still encloses them.
    pub(super) fn layer_flows_v1(
        &mut self,
        who: (i32, i64),
        ts: u64,
        flows: &[u64],
        out: &mut Vec<u8>,
    ) {
        for &flow in flows {
            let id = crate::record::layout::scoped_flow(flow, (who.0 as u32 as u64) << 40);
            let into = flow & crate::record::layout::FLOW_IN != 0;
            self.head_opt(
                "flow",
                Some("ringtrace.flow"),
                if into { "f" } else { "s" },
                ts,
                who,
            );
            let _ = write!(self.line, ",\"id\":\"0x{id:x}\"");
            if into {
                self.line.push_str(",\"bp\":\"e\"");
            }
            self.finish_line(out);
        }
    }

    /// A slice begin in B/E form: `B` now.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn write_b(
        &mut self,
        name: &str,
        cat: &str,
        ts: u64,
        who: (i32, i64),
        tts: Option<u64>,
        view: Option<&EventView<'_>>,
        static_args: Option<(&'static Callsite, &[u64])>,
        out: &mut Vec<u8>,
    ) {
        self.head_opt(name, Some(cat), "B", ts, who);
        if let Some(t) = tts {
            self.line.push_str(",\"tts\":");
            micros(&mut self.line, t);
        }
        if let Some(v) = view {
            self.cname(v);
            self.stack_into(v, false, "sf", "stack");
            self.args_dict(v.args, None, None);
        }
        if let Some((cs, args)) = static_args {
            self.args(cs, args, None);
        }
        self.finish_line(out);
    }

    /// Begin and end records of macro scopes in B/E form (called instead of
    /// the `X` path for BEGIN, END and END_ARGS).
    pub(super) fn scope_record_be(
        &mut self,
        ctx: &mut Context<'_>,
        th: &mut Thread,
        who: (i32, i64),
        ts: u64,
        rec: Record<'_>,
        out: &mut Vec<u8>,
    ) {
        match rec {
            Record::Begin {
                site, depth, args, ..
            } => {
                self.open_be(th, who, depth, site, ts, out);
                if let Some(cs) = ctx.sites.get(site) {
                    self.write_b(
                        cs.name,
                        cs.category,
                        ts,
                        who,
                        None,
                        None,
                        Some((cs, args)),
                        out,
                    );
                }
            }
            Record::End { depth, .. } => self.close_be(th, who, depth, ts, None, None, out),
            Record::EndArgs {
                site, depth, args, ..
            } => {
                // The layer's end args: an `E` merges its args into the slice.
                if !self.pop_be(th, who, depth, ts, out) {
                    return;
                }
                self.stats.events += 1;
                self.begin_event_line_e(who, ts);
                if let Some(cs) = ctx.sites.get(site) {
                    self.args(cs, args, None);
                }
                self.line.push('}');
                self.push_event(out);
            }
            _ => {}
        }
    }

    pub(super) fn begin_event_line_e(&mut self, who: (i32, i64), ts: u64) {
        self.begin_event();
        let l = &mut self.line;
        l.push_str("{\"ph\":\"E\",\"ts\":");
        micros(l, ts);
        let _ = write!(l, ",\"pid\":{},\"tid\":{}", who.0, who.1);
    }

    /// Pushes a scope in B/E form; ends orphaned by it get their `E`.
    pub(super) fn open_be(
        &mut self,
        th: &mut Thread,
        who: (i32, i64),
        depth: u32,
        site: u32,
        ts: u64,
        out: &mut Vec<u8>,
    ) {
        let scope = OpenScope {
            depth,
            site,
            ts_ns: ts,
            args: Vec::new(),
        };
        for _ in th.stack.begin(scope) {
            self.stats.ends_lost += 1;
            self.end_event_with(who, ts, None, None, Some("ringtrace.end_lost"), out);
        }
    }

    /// Pops a scope in B/E form and writes its `E`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn close_be(
        &mut self,
        th: &mut Thread,
        who: (i32, i64),
        depth: u32,
        ts: u64,
        tts: Option<u64>,
        end: Option<&EventView<'_>>,
        out: &mut Vec<u8>,
    ) {
        if self.pop_be(th, who, depth, ts, out) {
            self.end_event_with(who, ts, tts, end, None, out);
        }
    }

    /// Pops a scope in B/E form before its `E` is written: the scopes it
    /// orphaned get theirs, the flows waiting are bound; false (counted)
    /// if its begin was not kept, so no `E` is due.
    fn pop_be(
        &mut self,
        th: &mut Thread,
        who: (i32, i64),
        depth: u32,
        ts: u64,
        out: &mut Vec<u8>,
    ) -> bool {
        let m = th.stack.end(depth);
        for _ in m.orphaned {
            self.stats.ends_lost += 1;
            self.end_event_with(who, ts, None, None, Some("ringtrace.end_lost"), out);
        }
        if m.matched.is_none() {
            self.stats.unmatched_ends += 1;
            return false;
        }
        let flows = std::mem::take(&mut th.flows);
        self.layer_flows_v1(who, ts, &flows, out);
        true
    }

    /// Pops a scope in X form and writes it.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn close_x(
        &mut self,
        ctx: &mut Context<'_>,
        th: &mut Thread,
        who: (i32, i64),
        depth: u32,
        ts: u64,
        tts: Option<u64>,
        end: Option<&EventView<'_>>,
        out: &mut Vec<u8>,
    ) {
        let m = th.stack.end(depth);
        for orphan in m.orphaned {
            self.stats.ends_lost += 1;
            self.complete(ctx, who, &orphan, ts, Some("ringtrace.end_lost"), out);
        }
        match m.matched {
            Some(scope) => {
                let flows = std::mem::take(&mut th.flows);
                self.complete_ext(ctx, who, &scope, ts, tts, end, None, &flows, out)
            }
            None => self.stats.unmatched_ends += 1,
        }
    }

    /// Pushes a scope in X form; ends orphaned by it are written.
    pub(super) fn open_x(
        &mut self,
        ctx: &mut Context<'_>,
        th: &mut Thread,
        who: (i32, i64),
        scope: OpenScope,
        out: &mut Vec<u8>,
    ) {
        let ts = scope.ts_ns;
        for orphan in th.stack.begin(scope) {
            self.stats.ends_lost += 1;
            self.complete(ctx, who, &orphan, ts, Some("ringtrace.end_lost"), out);
        }
    }

    /// The end of a slice in `B`/`E` form: an `E` with no name or category
    /// (readers close what the thread opened last), with its thread time,
    /// end stack and args.
    pub(super) fn end_event_with(
        &mut self,
        who: (i32, i64),
        ts: u64,
        tts: Option<u64>,
        extra: Option<&EventView<'_>>,
        flag: Option<&str>,
        out: &mut Vec<u8>,
    ) {
        self.stats.events += 1;
        self.begin_event();
        let l = &mut self.line;
        l.push_str("{\"ph\":\"E\",\"ts\":");
        micros(l, ts);
        let _ = write!(l, ",\"pid\":{},\"tid\":{}", who.0, who.1);
        if let Some(t) = tts {
            l.push_str(",\"tts\":");
            micros(l, t);
        }
        if let Some(v) = extra {
            self.stack_into(v, true, "sf", "stack");
            self.args_dict(v.args, None, flag);
        } else if let Some(flag) = flag {
            let _ = write!(self.line, ",\"args\":{{\"{flag}\":true}}");
        }
        self.line.push('}');
        self.push_event(out);
    }
}
