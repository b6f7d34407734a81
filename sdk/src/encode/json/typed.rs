//! JSON: the phases of the Trace Event Format written from the typed event
//! API's EVENT records (`events`): instants, counters, async and flow
//! events, samples, objects, memory dumps, clock syncs, contexts, marks,
//! metadata and log messages, with their ids, colors and stacks. Scopes of
//! that API and thread-time scopes are written by `scopes`; the object
//! form's top-level keys by `object`.

use super::text::{escape_into, micros, value_into, Line};
use super::{JsonEncoder, JsonOptions, Thread};
use crate::encode::event::{EventView, OPEN_DYNAMIC, OPEN_TTS};
use crate::encode::track_key;
use crate::encode::{Context, OpenScope};
use crate::record::args::{ArgReader, ArgValue};
use crate::record::event::{op, LogLevel};
use crate::record::layout::Record;
use std::collections::HashMap;
use std::fmt::Write as _;

/// The state of the phases beyond the basic encoder.
#[derive(Default)]
pub(super) struct Phases {
    pub(super) opts: JsonOptions,
    /// Interned stack frames: (parent id or 0, name, category) → id.
    pub(super) frames: HashMap<(u64, String, String), u64>,
    /// The `stackFrames` entries written so far (object form).
    pub(super) frames_text: String,
    /// The `samples` entries written so far (object form).
    pub(super) samples_text: String,
    scratch: String,
}

impl JsonEncoder {
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

    /// `,"args":{...}` from an encoded ARGS dict, with the entries of
    /// `over` (a second dict) replacing same-named ones, and a flag.
    pub(super) fn args_dict(
        &mut self,
        base: Option<&[u64]>,
        over: Option<&[u64]>,
        flag: Option<&str>,
    ) {
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
    pub(super) fn cname(&mut self, v: &EventView<'_>) {
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

    /// The event's (end) stack: `sf` into the dictionary (object form, named
    /// frames) or an inline `stack` array.
    pub(super) fn stack_into(&mut self, v: &EventView<'_>, end: bool, sf: &str, stack: &str) {
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
