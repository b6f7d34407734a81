//! JSON: every phase of the Trace Event Format from the typed event API
//! (`events`), scopes as `B`/`E` pairs, thread times, stack frames, and the
//! JSON Object Format.
//!
//! # Scopes
//!
//! By default a scope is one `X` event written when it ends (with `tts` and
//! `tdur` when thread time is recorded). With `JsonScopes::BeginEnd` every
//! slice is a `B` written when it begins and an `E` when it ends (each with
//! its `tts`); complete events with explicit times become a `B`/`E` pair
//! too, so one file never mixes `X` with `B`/`E` (readers break ties between
//! them badly). An `E` carries no name or category, so it closes whatever
//! its thread opened last, as the format's readers match it.
//!
//! # Object form
//!
//! `{"traceEvents":[` … events … `],"displayTimeUnit":…,"stackFrames":{…},
//! "samples":[…],"otherData":{…}, other keys…}` when the session asks for
//! top-level data; events still stream, the dictionary of stack frames and
//! the global samples are kept until the end (each distinct frame once).
//! Unlike the bare array, a file cut short in this form does not load.

use super::*;
use crate::encode::event::{open_site, open_tts, EventView, OPEN_DYNAMIC, OPEN_TTS};
use crate::encode::track_key;
use crate::record::event::{op, LogLevel};
use std::collections::HashMap;

/// How scopes are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum ScopeForm {
    /// One `X` per scope (default).
    #[default]
    Complete,
    /// `B` at the begin, `E` at the end.
    BeginEnd,
}

/// Options of the JSON output.
#[derive(Debug, Clone, Default)]
pub(crate) struct JsonOptions {
    pub(crate) scopes: ScopeForm,
    /// Write the JSON Object Format (else the bare array).
    pub(crate) object: bool,
    /// `displayTimeUnit`: "ms" or "ns".
    pub(crate) display_time_unit: Option<&'static str>,
    /// `otherData` entries: key and the value as JSON text.
    pub(crate) other_data: Vec<(String, String)>,
    /// Other top-level keys: key and the value as JSON text.
    pub(crate) metadata: Vec<(String, String)>,
}

/// A value as JSON text (for the object form's top-level data).
pub(crate) fn to_json_text(v: &dyn crate::TraceValue) -> String {
    let mut words = Vec::new();
    v.encode(&mut words);
    let mut s = Line::default();
    value_into(&mut s, &mut ArgReader::new(&words), 0);
    s.into_string()
}

/// The state of the phases beyond the basic encoder.
#[derive(Default)]
pub(super) struct Phases {
    pub(super) opts: JsonOptions,
    /// Interned stack frames: (parent id or 0, name, category) → id.
    frames: HashMap<(u64, String, String), u64>,
    /// The `stackFrames` entries written so far (object form).
    frames_text: String,
    /// The `samples` entries written so far (object form; CPU samples
    /// too: `json/samples.rs`).
    pub(super) samples_text: String,
    scratch: String,
}

impl JsonEncoder {
    /// A JSON encoder with `opts`.
    pub(crate) fn with_options(opts: JsonOptions) -> Self {
        let mut e = Self::default();
        e.phases.opts = opts;
        e
    }

    pub(super) fn begin_end(&self) -> bool {
        self.phases.opts.scopes == ScopeForm::BeginEnd
    }

    /// The bytes that open the file.
    pub(super) fn file_head(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(if self.phases.opts.object {
            b"{\"traceEvents\":[\n"
        } else {
            b"[\n"
        });
    }

    /// Process metadata known at the start besides the name.
    pub(super) fn process_meta(&mut self, ctx: &Context<'_>, out: &mut Vec<u8>) {
        let p = ctx.process;
        if !p.labels.is_empty() {
            self.meta_event("process_labels", p.pid, 0, out, |l| {
                l.push_str("\"labels\":");
                escape_into(l, &p.labels.join(","));
            });
        }
        if let Some(i) = p.sort_index {
            self.meta_event("process_sort_index", p.pid, 0, out, |l| {
                let _ = write!(l, "\"sort_index\":{i}");
            });
        }
    }

    /// The bytes that close the file.
    pub(super) fn file_tail(&mut self, out: &mut Vec<u8>) {
        if !self.phases.opts.object {
            out.extend_from_slice(b"\n]\n");
            return;
        }
        let p = &self.phases;
        let mut s = String::from("\n]");
        if let Some(u) = p.opts.display_time_unit {
            let _ = write!(s, ",\n\"displayTimeUnit\":\"{u}\"");
        }
        if !p.frames_text.is_empty() {
            let _ = write!(s, ",\n\"stackFrames\":{{{}}}", p.frames_text);
        }
        if !p.samples_text.is_empty() {
            let _ = write!(s, ",\n\"samples\":[{}]", p.samples_text);
        }
        if !p.opts.other_data.is_empty() {
            s.push_str(",\n\"otherData\":{");
            for (i, (k, v)) in p.opts.other_data.iter().enumerate() {
                if i > 0 {
                    s.push(',');
                }
                escape_into(&mut s, k);
                s.push(':');
                s.push_str(v);
            }
            s.push('}');
        }
        for (k, v) in &p.opts.metadata {
            s.push_str(",\n");
            escape_into(&mut s, k);
            s.push(':');
            s.push_str(v);
        }
        s.push_str("}\n");
        out.extend_from_slice(s.as_bytes());
    }

    /// An `M` event `name` for (pid, tid) with the args `f` writes.
    fn meta_event(
        &mut self,
        name: &str,
        pid: i32,
        tid: i64,
        out: &mut Vec<u8>,
        f: impl FnOnce(&mut Line),
    ) {
        self.begin_event();
        let l = &mut self.line;
        let _ = write!(
            l,
            "{{\"name\":\"{name}\",\"ph\":\"M\",\"pid\":{pid},\"tid\":{tid},\"args\":{{"
        );
        f(l);
        l.push_str("}}");
        self.push_event(out);
    }

    /// `{"name":..[,"cat":..],"ph":..,"ts":..,"pid":..,"tid":..` (unclosed).
    fn head_opt(&mut self, name: &str, cat: Option<&str>, ph: &str, ts: u64, who: (i32, i64)) {
        self.begin_event();
        let l = &mut self.line;
        l.push_str("{\"name\":");
        escape_into(l, name);
        if let Some(c) = cat {
            l.push_str(",\"cat\":");
            escape_into(l, c);
        }
        let _ = write!(l, ",\"ph\":\"{ph}\",\"ts\":");
        micros(l, ts);
        let _ = write!(l, ",\"pid\":{},\"tid\":{}", who.0, who.1);
    }

    /// The end of a slice in `B`/`E` form: an `E` with no name or category
    /// (readers close what the thread opened last), with its thread time,
    /// end stack and args.
    fn end_event_with(
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

    /// `,"args":{...}` from an encoded ARGS dict, with the entries of
    /// `over` (a second dict) replacing same-named ones, and a flag.
    fn args_dict(&mut self, base: Option<&[u64]>, over: Option<&[u64]>, flag: Option<&str>) {
        if base.is_none() && over.is_none() && flag.is_none() {
            return;
        }
        let mut entries: Vec<(String, String)> = Vec::new();
        for dict in [base, over].into_iter().flatten() {
            let mut r = ArgReader::new(dict);
            if let ArgValue::Dict(n) = r.next() {
                for _ in 0..n.min(dict.len()) {
                    let key = r.key();
                    let mut v = Line::default();
                    value_into(&mut v, &mut r, 0);
                    let v = v.into_string();
                    match entries.iter_mut().find(|(k, _)| *k == key) {
                        Some(e) => e.1 = v,
                        None => entries.push((key, v)),
                    }
                }
            }
        }
        let l = &mut self.line;
        l.push_str(",\"args\":{");
        for (i, (k, v)) in entries.iter().enumerate() {
            if i > 0 {
                l.push(',');
            }
            escape_into(l, k);
            l.push(':');
            l.push_str(v);
        }
        if let Some(flag) = flag {
            if !entries.is_empty() {
                l.push(',');
            }
            escape_into(l, flag);
            l.push_str(":true");
        }
        l.push('}');
    }

    /// `,"cname":..` if the event has a color.
    fn cname(&mut self, v: &EventView<'_>) {
        if let Some(c) = &v.cname {
            self.line.push_str(",\"cname\":");
            escape_into(&mut self.line, c);
        }
    }

    fn id_into(&mut self, v: &EventView<'_>) {
        if let Some(id) = &v.id {
            let l = &mut self.line;
            match id.kind {
                1 => {
                    let _ = write!(l, ",\"id2\":{{\"local\":\"0x{:x}\"}}", id.value);
                }
                2 => {
                    let _ = write!(l, ",\"id2\":{{\"global\":\"0x{:x}\"}}", id.value);
                }
                _ => {
                    let _ = write!(l, ",\"id\":\"0x{:x}\"", id.value);
                }
            }
            if let Some(s) = &id.scope {
                l.push_str(",\"scope\":");
                escape_into(l, s);
            }
        }
    }

    /// Interns a stack of frames (rootmost first); returns the leaf's id.
    pub(super) fn intern_frames<'s>(
        &mut self,
        frames: impl Iterator<Item = (&'s str, &'s str)>,
    ) -> u64 {
        let mut parent = 0;
        for (name, cat) in frames {
            let key = (parent, name.to_string(), cat.to_string());
            parent = match self.phases.frames.get(&key) {
                Some(&id) => id,
                None => {
                    let id = self.phases.frames.len() as u64 + 1;
                    let t = &mut self.phases.frames_text;
                    if !t.is_empty() {
                        t.push(',');
                    }
                    let _ = write!(t, "\n\"{id}\":{{\"name\":");
                    escape_into(t, name);
                    t.push_str(",\"category\":");
                    escape_into(t, cat);
                    if parent != 0 {
                        let _ = write!(t, ",\"parent\":\"{parent}\"");
                    }
                    t.push('}');
                    self.phases.frames.insert(key, id);
                    id
                }
            };
        }
        parent
    }

    /// The event's (end) stack: `sf` into the dictionary (object form, named
    /// frames) or an inline `stack` array.
    fn stack_into(&mut self, v: &EventView<'_>, end: bool, sf: &str, stack: &str) {
        let frames = if end {
            &v.end_stack_frames
        } else {
            &v.stack_frames
        };
        if let (Some(frames), true) = (frames, self.phases.opts.object) {
            if !frames.is_empty() {
                let id = self.intern_frames(frames.iter().map(|(n, c)| (n.as_str(), c.as_str())));
                let _ = write!(self.line, ",\"{sf}\":{id}");
            }
            return;
        }
        if let Some(names) = v.stack_names(end) {
            let l = &mut self.line;
            let _ = write!(l, ",\"{stack}\":[");
            for (i, n) in names.iter().enumerate() {
                if i > 0 {
                    l.push(',');
                }
                escape_into(l, n);
            }
            l.push(']');
        }
    }

    fn finish_line(&mut self, out: &mut Vec<u8>) {
        self.line.push('}');
        self.stats.events += 1;
        self.push_event(out);
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
    fn thread_times(&mut self, begin: Option<u64>, end: Option<u64>) {
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
    fn layer_flows_v1(&mut self, who: (i32, i64), ts: u64, flows: &[u64], out: &mut Vec<u8>) {
        for &flow in flows {
            let id = (flow & !crate::record::layout::FLOW_IN) ^ ((who.0 as u32 as u64) << 40);
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
    fn write_b(
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
                let m = th.stack.end(depth);
                for _ in m.orphaned {
                    self.stats.ends_lost += 1;
                    self.end_event_with(who, ts, None, None, Some("ringtrace.end_lost"), out);
                }
                if m.matched.is_none() {
                    self.stats.unmatched_ends += 1;
                    return;
                }
                let flows = std::mem::take(&mut th.flows);
                self.layer_flows_v1(who, ts, &flows, out);
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

    fn begin_event_line_e(&mut self, who: (i32, i64), ts: u64) {
        self.begin_event();
        let l = &mut self.line;
        l.push_str("{\"ph\":\"E\",\"ts\":");
        micros(l, ts);
        let _ = write!(l, ",\"pid\":{},\"tid\":{}", who.0, who.1);
    }

    /// Pushes a scope in B/E form; ends orphaned by it get their `E`.
    fn open_be(
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
    fn close_be(
        &mut self,
        th: &mut Thread,
        who: (i32, i64),
        depth: u32,
        ts: u64,
        tts: Option<u64>,
        end: Option<&EventView<'_>>,
        out: &mut Vec<u8>,
    ) {
        let m = th.stack.end(depth);
        for _ in m.orphaned {
            self.stats.ends_lost += 1;
            self.end_event_with(who, ts, None, None, Some("ringtrace.end_lost"), out);
        }
        if m.matched.is_none() {
            self.stats.unmatched_ends += 1;
            return;
        }
        let flows = std::mem::take(&mut th.flows);
        self.layer_flows_v1(who, ts, &flows, out);
        self.end_event_with(who, ts, tts, end, None, out);
    }

    /// Pops a scope in X form and writes it.
    #[allow(clippy::too_many_arguments)]
    fn close_x(
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
    fn open_x(
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

    /// EVENT, BEGIN_TT and END_TT records.
    pub(super) fn phase_record(
        &mut self,
        ctx: &mut Context<'_>,
        th: &mut Thread,
        who: (i32, i64),
        ts: u64,
        rec: Record<'_>,
        out: &mut Vec<u8>,
    ) {
        match rec {
            Record::BeginTt {
                site,
                depth,
                tts,
                args,
                ..
            } => {
                if self.begin_end() {
                    self.open_be(th, who, depth, site, ts, out);
                    if let Some(cs) = ctx.sites.get(site) {
                        self.write_b(
                            cs.name,
                            cs.category,
                            ts,
                            who,
                            Some(tts),
                            None,
                            Some((cs, args)),
                            out,
                        );
                    }
                } else {
                    let mut words = Vec::with_capacity(1 + args.len());
                    words.push(tts);
                    words.extend_from_slice(args);
                    let scope = OpenScope {
                        depth,
                        site: site | OPEN_TTS,
                        ts_ns: ts,
                        args: words,
                    };
                    self.open_x(ctx, th, who, scope, out);
                }
            }
            Record::EndTt { depth, tts, .. } => {
                if self.begin_end() {
                    self.close_be(th, who, depth, ts, Some(tts), None, out);
                } else {
                    self.close_x(ctx, th, who, depth, ts, Some(tts), None, out);
                }
            }
            Record::Event {
                site, op, fields, ..
            } => {
                let v = EventView::decode(fields);
                self.event(ctx, th, who, ts, site, op, fields, &v, out);
            }
            _ => {}
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn event(
        &mut self,
        ctx: &mut Context<'_>,
        th: &mut Thread,
        who: (i32, i64),
        ts: u64,
        site: u32,
        op: u8,
        fields: &[u64],
        v: &EventView<'_>,
        out: &mut Vec<u8>,
    ) {
        let cs = ctx.sites.get(site);
        let cat = cs.map(|c| c.category);
        let name = v.name.as_deref().unwrap_or("");
        match op {
            op::SCOPE_BEGIN => {
                let Some(depth) = v.depth else { return };
                if self.begin_end() {
                    self.open_be(th, who, depth, site | OPEN_DYNAMIC, ts, out);
                    self.write_b(name, cat.unwrap_or(""), ts, who, v.tts, Some(v), None, out);
                } else {
                    let scope = OpenScope {
                        depth,
                        site: site | OPEN_DYNAMIC,
                        ts_ns: ts,
                        args: fields.to_vec(),
                    };
                    self.open_x(ctx, th, who, scope, out);
                }
            }
            op::SCOPE_END => {
                let Some(depth) = v.depth else { return };
                if self.begin_end() {
                    self.close_be(th, who, depth, ts, v.tts, Some(v), out);
                } else {
                    self.close_x(ctx, th, who, depth, ts, v.tts, Some(v), out);
                }
            }
            op::COMPLETE => {
                let start = v.ts.unwrap_or(ts);
                let dur = v.dur.unwrap_or(0);
                if self.begin_end() {
                    self.write_b(
                        name,
                        cat.unwrap_or(""),
                        start,
                        who,
                        v.tts,
                        Some(v),
                        None,
                        out,
                    );
                    let end_tts = v.tts.map(|t| t + v.tdur.unwrap_or(0));
                    self.stats.events += 1;
                    self.begin_event_line_e(who, start + dur);
                    if let Some(t) = end_tts {
                        self.line.push_str(",\"tts\":");
                        micros(&mut self.line, t);
                    }
                    self.stack_into(v, true, "sf", "stack");
                    self.line.push('}');
                    self.push_event(out);
                } else {
                    self.head_opt(name, cat, "X", start, who);
                    self.line.push_str(",\"dur\":");
                    micros(&mut self.line, dur);
                    if let Some(t) = v.tts {
                        self.line.push_str(",\"tts\":");
                        micros(&mut self.line, t);
                        if let Some(d) = v.tdur {
                            self.line.push_str(",\"tdur\":");
                            micros(&mut self.line, d);
                        }
                    }
                    self.cname(v);
                    self.stack_into(v, false, "sf", "stack");
                    self.stack_into(v, true, "esf", "estack");
                    self.args_dict(v.args, None, None);
                    self.finish_line(out);
                }
            }
            op::INSTANT => {
                self.head_opt(name, cat, "i", ts, who);
                let s = match v.instant_scope {
                    1 => "p",
                    2 => "g",
                    _ => "t",
                };
                let _ = write!(self.line, ",\"s\":\"{s}\"");
                self.cname(v);
                if s == "t" {
                    self.stack_into(v, false, "sf", "stack");
                }
                self.args_dict(v.args, None, None);
                self.finish_line(out);
            }
            op::COUNTER => {
                self.head_opt(name, cat, "C", ts, who);
                if let Some(id) = v.counter_id {
                    let _ = write!(self.line, ",\"id\":\"0x{id:x}\"");
                }
                self.args_dict(v.args, None, None);
                self.finish_line(out);
            }
            op::ASYNC_BEGIN | op::ASYNC_INSTANT | op::ASYNC_END => {
                let ph = match op {
                    op::ASYNC_BEGIN => "b",
                    op::ASYNC_INSTANT => "n",
                    _ => "e",
                };
                self.head_opt(name, cat, ph, ts, who);
                self.id_into(v);
                self.cname(v);
                self.args_dict(v.args, None, None);
                self.finish_line(out);
            }
            op::TRACK_BEGIN | op::TRACK_END | op::TRACK_INSTANT => {
                // A custom track: async events with an id of the track's own.
                let ph = match op {
                    op::TRACK_BEGIN => "b",
                    op::TRACK_END => "e",
                    _ => "n",
                };
                let path = v.track.as_deref().unwrap_or(&[]);
                self.head_opt(name, cat, ph, ts, who);
                let _ = write!(
                    self.line,
                    ",\"id2\":{{\"local\":\"0x{:x}\"}}",
                    track_key(path)
                );
                self.cname(v);
                self.args_dict(v.args, None, None);
                self.finish_line(out);
            }
            op::FLOW_START | op::FLOW_STEP | op::FLOW_END => {
                let ph = match op {
                    op::FLOW_START => "s",
                    op::FLOW_STEP => "t",
                    _ => "f",
                };
                self.head_opt(name, cat, ph, ts, who);
                self.id_into(v);
                if v.bind_enclosing {
                    self.line.push_str(",\"bp\":\"e\"");
                }
                self.finish_line(out);
            }
            op::SAMPLE => {
                self.head_opt(name, cat, "P", ts, who);
                self.cname(v);
                self.stack_into(v, false, "sf", "stack");
                self.args_dict(v.args, None, None);
                self.finish_line(out);
            }
            op::OBJECT_NEW | op::OBJECT_DELETE => {
                let ph = if op == op::OBJECT_NEW { "N" } else { "D" };
                self.head_opt(name, cat, ph, ts, who);
                self.id_into(v);
                self.finish_line(out);
            }
            op::OBJECT_SNAPSHOT => {
                self.head_opt(name, cat, "O", ts, who);
                self.id_into(v);
                self.snapshot_args(v);
                self.finish_line(out);
            }
            op::MEMORY_GLOBAL | op::MEMORY_PROCESS => {
                let ph = if op == op::MEMORY_GLOBAL { "V" } else { "v" };
                self.head_opt(name, cat, ph, ts, who);
                self.id_into(v);
                self.args_dict(v.args, None, None);
                self.finish_line(out);
            }
            op::MARK => {
                self.head_opt(name, cat, "R", ts, who);
                self.cname(v);
                self.args_dict(v.args, None, None);
                self.finish_line(out);
            }
            op::CLOCK_SYNC => {
                self.head_opt("clock_sync", None, "c", ts, who);
                let l = &mut self.line;
                l.push_str(",\"args\":{\"sync_id\":");
                escape_into(l, v.sync_id.as_deref().unwrap_or(""));
                if let Some(t) = v.issue_ts {
                    l.push_str(",\"issue_ts\":");
                    micros(l, t);
                }
                l.push('}');
                self.finish_line(out);
            }
            op::CONTEXT_ENTER | op::CONTEXT_LEAVE => {
                let ph = if op == op::CONTEXT_ENTER { "(" } else { ")" };
                self.head_opt(name, cat, ph, ts, who);
                self.id_into(v);
                self.finish_line(out);
            }
            op::LINK_IDS => {
                self.head_opt(name, cat, "=", ts, who);
                self.id_into(v);
                let linked = v.linked_id.unwrap_or(0);
                let _ = write!(self.line, ",\"args\":{{\"linked_id\":\"0x{linked:x}\"}}");
                self.finish_line(out);
            }
            op::THREAD_NAME => {
                self.meta_event("thread_name", who.0, who.1, out, |l| {
                    l.push_str("\"name\":");
                    escape_into(l, name);
                });
                self.stats.events += 1;
            }
            op::THREAD_SORT_INDEX => {
                let i = v.sort_index.unwrap_or(0);
                self.meta_event("thread_sort_index", who.0, who.1, out, |l| {
                    let _ = write!(l, "\"sort_index\":{i}");
                });
                self.stats.events += 1;
            }
            op::PROCESS_NAME => {
                self.meta_event("process_name", who.0, 0, out, |l| {
                    l.push_str("\"name\":");
                    escape_into(l, name);
                });
                self.stats.events += 1;
            }
            op::PROCESS_LABELS => {
                let labels = v.labels.clone().unwrap_or_default().join(",");
                self.meta_event("process_labels", who.0, 0, out, |l| {
                    l.push_str("\"labels\":");
                    escape_into(l, &labels);
                });
                self.stats.events += 1;
            }
            op::PROCESS_SORT_INDEX => {
                let i = v.sort_index.unwrap_or(0);
                self.meta_event("process_sort_index", who.0, 0, out, |l| {
                    let _ = write!(l, "\"sort_index\":{i}");
                });
                self.stats.events += 1;
            }
            op::GLOBAL_SAMPLE => self.global_sample(who, ts, v, out),
            op::LOG => {
                let Some(cs) = cs else { return };
                let level = LogLevel::from_prio(v.level.unwrap_or(4));
                self.head_opt(cs.name, Some(cs.category), "i", ts, who);
                let l = &mut self.line;
                l.push_str(",\"s\":\"t\",\"args\":{\"message\":");
                escape_into(l, v.message.as_deref().unwrap_or(""));
                let _ = write!(l, ",\"level\":\"{}\",\"source\":", level.as_str());
                escape_into(l, &format!("{}:{}", cs.file, cs.line));
                l.push('}');
                self.finish_line(out);
            }
            _ => {}
        }
    }

    /// `,"args":{"snapshot":{...}}` with `cat` and `base_type` in the snapshot.
    fn snapshot_args(&mut self, v: &EventView<'_>) {
        let mut inner = std::mem::take(&mut self.phases.scratch);
        inner.clear();
        if let Some(c) = &v.snapshot_category {
            inner.push_str("\"cat\":");
            escape_into(&mut inner, c);
        }
        if let Some(b) = &v.base_type {
            if !inner.is_empty() {
                inner.push(',');
            }
            inner.push_str("\"base_type\":");
            escape_into(&mut inner, b);
        }
        let l = &mut self.line;
        l.push_str(",\"args\":{\"snapshot\":");
        let words = v.snapshot.unwrap_or(&[]);
        let mut r = ArgReader::new(words);
        let is_dict = matches!(ArgReader::new(words).next(), ArgValue::Dict(_));
        if is_dict {
            // Merge: our keys first, then the snapshot's entries.
            let mut body = Line::default();
            value_into(&mut body, &mut r, 0);
            let body = body.into_string();
            l.push('{');
            l.push_str(&inner);
            let rest = &body[1..];
            if !inner.is_empty() && rest != "}" {
                l.push(',');
            }
            l.push_str(rest);
        } else if inner.is_empty() {
            value_into(l, &mut r, 0);
        } else {
            l.push('{');
            l.push_str(&inner);
            l.push_str(",\"value\":");
            value_into(l, &mut r, 0);
            l.push('}');
        }
        l.push('}');
        self.phases.scratch = inner;
    }

    /// A global sample: an entry of the top-level `samples` (object form),
    /// or a `P` event (bare array, which has no such list).
    fn global_sample(&mut self, who: (i32, i64), ts: u64, v: &EventView<'_>, out: &mut Vec<u8>) {
        let name = v.name.as_deref().unwrap_or("");
        if !self.phases.opts.object {
            self.head_opt(name, None, "P", ts, who);
            self.stack_into(v, false, "sf", "stack");
            let l = &mut self.line;
            let _ = write!(l, ",\"args\":{{\"weight\":{}", v.weight.unwrap_or(1));
            if let Some(cpu) = v.cpu {
                let _ = write!(l, ",\"cpu\":{cpu}");
            }
            l.push('}');
            self.finish_line(out);
            return;
        }
        let frames: Vec<(String, String)> = match (&v.stack_frames, &v.stack_raw) {
            (Some(f), _) => f.clone(),
            (None, Some(raw)) => raw.iter().map(|n| (n.clone(), String::new())).collect(),
            _ => Vec::new(),
        };
        let sf = self.intern_frames(frames.iter().map(|(n, c)| (n.as_str(), c.as_str())));
        let mut s = std::mem::take(&mut self.phases.samples_text);
        if !s.is_empty() {
            s.push(',');
        }
        s.push_str("\n{");
        if let Some(cpu) = v.cpu {
            let _ = write!(s, "\"cpu\":{cpu},");
        }
        let _ = write!(s, "\"tid\":{},\"ts\":", who.1);
        let mut t = Line::default();
        micros(&mut t, ts);
        s.push_str(&t.into_string());
        s.push_str(",\"name\":");
        escape_into(&mut s, name);
        let _ = write!(s, ",\"sf\":{sf},\"weight\":{}}}", v.weight.unwrap_or(1));
        self.phases.samples_text = s;
        self.stats.events += 1;
    }
}
