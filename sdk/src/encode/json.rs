//! Chrome Trace Event Format (JSON) encoder, streaming.
//!
//! The file is the bare-array form: `[`, then one event object per line, then
//! `]` at the end. Until the end is written the file is a valid prefix that
//! readers load (the format makes the closing `]` optional), so a crash or a
//! kill loses only what was not flushed yet.
//!
//! Completed scopes are written as complete (`X`) events when they end, never
//! mixed with `B`/`E`; scopes still open at the end of the trace are written
//! with their duration up to that moment and `"ringtrace.unfinished": true`.
//! Configured so (`JsonScopes::BeginEnd`), every scope is a `B`/`E` pair
//! instead; the other phases of the format, thread times, stack frames and
//! the JSON Object Format are written by `phases` (its module docs).
//! `ts` and `dur` are microseconds of BOOTTIME with three decimals, so the
//! nanoseconds survive and a JSON and a Perfetto trace of one run line up.
//!
//! Non-finite numbers have no JSON form: NaN and infinities are written as the
//! strings `"NaN"`, `"Infinity"` and `"-Infinity"`.

use super::{event, Batch, Context, EncodeStats, Encoder, OpenScope, ScopeStack};
use crate::record::args::{ArgReader, ArgValue};
use crate::record::callsite::Callsite;
use crate::record::layout::{parse, Record};
use crate::record::registry::ThreadRing;
use std::collections::HashMap;
use std::fmt::Write as _;

mod phases;
pub(crate) use phases::{to_json_text, JsonOptions, ScopeForm};

struct Thread {
    pid: i32,
    tid: i64,
    stack: ScopeStack,
    last_ns: u64,
    /// Flow ids (FLOW records) waiting for the next slice end to bind to.
    flows: Vec<u64>,
}

#[derive(Default)]
pub(crate) struct JsonEncoder {
    threads: HashMap<u32, Thread>,
    stats: EncodeStats,
    /// True once the first event is written (separators go before the rest).
    wrote_event: bool,
    line: String,
    /// Options and state of the phases of the typed API (`phases`).
    phases: phases::Phases,
}

impl JsonEncoder {
    /// A JSON encoder with the default options (see `with_options`).
    #[allow(dead_code)]
    pub(crate) fn new() -> Self {
        Self::default()
    }

    fn begin_event(&mut self) {
        self.line.clear();
    }

    fn push_event(&mut self, out: &mut Vec<u8>) {
        if self.wrote_event {
            out.extend_from_slice(b",\n");
        }
        self.wrote_event = true;
        out.extend_from_slice(self.line.as_bytes());
    }

    fn thread_name_event(&mut self, t: &ThreadRing, out: &mut Vec<u8>) {
        self.begin_event();
        let l = &mut self.line;
        l.push_str("{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":");
        let _ = write!(l, "{},\"tid\":{},\"args\":{{\"name\":", t.pid, t.tid);
        let name = if t.name.is_empty() {
            format!("thread {}", t.tid)
        } else {
            t.name.clone()
        };
        escape_into(l, &name);
        l.push_str("}}");
        self.push_event(out);
    }

    /// `{"name":..,"cat":..,"ph":"<ph>","ts":..,"pid":..,"tid":..` (unclosed).
    fn head(&mut self, name: &str, cat: &str, ph: &str, ts_ns: u64, pid: i32, tid: i64) {
        self.begin_event();
        let l = &mut self.line;
        l.push_str("{\"name\":");
        escape_into(l, name);
        l.push_str(",\"cat\":");
        escape_into(l, cat);
        let _ = write!(l, ",\"ph\":\"{ph}\",\"ts\":");
        micros(l, ts_ns);
        let _ = write!(l, ",\"pid\":{pid},\"tid\":{tid}");
    }

    fn args(&mut self, cs: &Callsite, words: &[u64], extra: Option<&str>) {
        if cs.arg_names.is_empty() && extra.is_none() {
            return;
        }
        let l = &mut self.line;
        l.push_str(",\"args\":{");
        let mut r = ArgReader::new(words);
        for (i, name) in cs.arg_names.iter().enumerate() {
            if i > 0 {
                l.push(',');
            }
            escape_into(l, name);
            l.push(':');
            value_into(l, &mut r, 0);
        }
        if let Some(flag) = extra {
            if !cs.arg_names.is_empty() {
                l.push(',');
            }
            escape_into(l, flag);
            l.push_str(":true");
        }
        l.push('}');
    }

    fn complete(
        &mut self,
        ctx: &mut Context<'_>,
        t: (i32, i64),
        scope: &OpenScope,
        end_ns: u64,
        flag: Option<&str>,
        out: &mut Vec<u8>,
    ) {
        if self.begin_end() || scope.site & (event::OPEN_DYNAMIC | event::OPEN_TTS) != 0 {
            return self.complete_ext(ctx, t, scope, end_ns, None, None, flag, &[], out);
        }
        let Some(cs) = ctx.sites.get(scope.site) else {
            return;
        };
        self.stats.events += 1;
        self.head(cs.name, cs.category, "X", scope.ts_ns, t.0, t.1);
        self.line.push_str(",\"dur\":");
        micros(&mut self.line, end_ns.saturating_sub(scope.ts_ns));
        self.args(cs, &scope.args, flag);
        self.line.push('}');
        self.push_event(out);
    }
}

impl Encoder for JsonEncoder {
    fn header(&mut self, ctx: &mut Context<'_>, out: &mut Vec<u8>) {
        self.file_head(out);
        self.begin_event();
        let _ = write!(
            self.line,
            "{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":{},\"tid\":0,\"args\":{{\"name\":",
            ctx.process.pid
        );
        escape_into(&mut self.line, &ctx.process.name);
        self.line.push_str("}}");
        self.push_event(out);
        self.process_meta(ctx, out);
    }

    fn batch(&mut self, ctx: &mut Context<'_>, batch: &Batch<'_>, out: &mut Vec<u8>) {
        let tr = batch.thread;
        if !self.threads.contains_key(&tr.seq_id) {
            self.thread_name_event(tr, out);
            self.threads.insert(
                tr.seq_id,
                Thread {
                    pid: tr.pid,
                    tid: tr.tid,
                    stack: ScopeStack::default(),
                    last_ns: 0,
                    flows: Vec::new(),
                },
            );
        }
        let mut th = self.threads.remove(&tr.seq_id).unwrap();
        let who = (th.pid, th.tid);
        if batch.overwritten > 0 {
            let ts = parse(batch.words)
                .next()
                .map(|r| ctx.cal.to_ns(r.ts()))
                .unwrap_or(th.last_ns);
            self.lost(who, ts.max(th.last_ns), batch.overwritten, out);
        }
        for rec in parse(batch.words) {
            let raw_ns = ctx.cal.to_ns(rec.ts());
            let ts = raw_ns.max(th.last_ns);
            th.last_ns = ts;
            if self.begin_end()
                && matches!(
                    rec,
                    Record::Begin { .. } | Record::End { .. } | Record::EndArgs { .. }
                )
            {
                self.scope_record_be(ctx, &mut th, who, ts, rec, out);
                continue;
            }
            match rec {
                Record::Begin {
                    site, depth, args, ..
                } => {
                    let scope = OpenScope {
                        depth,
                        site,
                        ts_ns: ts,
                        args: args.to_vec(),
                    };
                    for orphan in th.stack.begin(scope) {
                        self.stats.ends_lost += 1;
                        self.complete(ctx, who, &orphan, ts, Some("ringtrace.end_lost"), out);
                    }
                }
                Record::End { depth, .. } => {
                    let m = th.stack.end(depth);
                    for orphan in m.orphaned {
                        self.stats.ends_lost += 1;
                        self.complete(ctx, who, &orphan, ts, Some("ringtrace.end_lost"), out);
                    }
                    match m.matched {
                        Some(scope) => {
                            let flows = std::mem::take(&mut th.flows);
                            self.complete_with(ctx, who, &scope, ts, None, &flows, out)
                        }
                        None => self.stats.unmatched_ends += 1,
                    }
                }
                Record::EndArgs {
                    site, depth, args, ..
                } => {
                    let m = th.stack.end(depth);
                    for orphan in m.orphaned {
                        self.stats.ends_lost += 1;
                        self.complete(ctx, who, &orphan, ts, Some("ringtrace.end_lost"), out);
                    }
                    match m.matched {
                        Some(scope) => {
                            let flows = std::mem::take(&mut th.flows);
                            let extra = ctx.sites.get(site).map(|cs| (cs, args));
                            self.complete_with(ctx, who, &scope, ts, extra, &flows, out)
                        }
                        None => self.stats.unmatched_ends += 1,
                    }
                }
                Record::Flow { ids, .. } => th.flows.extend_from_slice(ids),
                Record::Instant { site, args, .. } => {
                    let Some(cs) = ctx.sites.get(site) else {
                        continue;
                    };
                    self.stats.events += 1;
                    self.head(cs.name, cs.category, "i", ts, who.0, who.1);
                    self.line.push_str(",\"s\":\"t\"");
                    self.args(cs, args, None);
                    self.line.push('}');
                    self.push_event(out);
                }
                Record::CounterI64 { site, value, .. } => {
                    let Some(cs) = ctx.sites.get(site) else {
                        continue;
                    };
                    self.counter(cs, ts, who, &value.to_string(), out);
                }
                Record::CounterF64 { site, value, .. } => {
                    let Some(cs) = ctx.sites.get(site) else {
                        continue;
                    };
                    let mut v = String::new();
                    double_into(&mut v, value);
                    self.counter(cs, ts, who, &v, out);
                }
                Record::AsyncBegin { site, id, args, .. } => {
                    let Some(cs) = ctx.sites.get(site) else {
                        continue;
                    };
                    self.stats.events += 1;
                    // Not clamped: a range may be found async after it began
                    // (tracing layer); readers sort by timestamp.
                    self.head(cs.name, cs.category, "b", raw_ns, who.0, who.1);
                    let _ = write!(self.line, ",\"id2\":{{\"local\":\"0x{id:x}\"}}");
                    if let Some(&flow) = th.flows.first() {
                        bind_flow(&mut self.line, flow, who.0);
                    }
                    th.flows.clear();
                    self.args(cs, args, None);
                    self.line.push('}');
                    self.push_event(out);
                }
                Record::AsyncEnd { site, id, args, .. } => {
                    let Some(cs) = ctx.sites.get(site) else {
                        continue;
                    };
                    // JSON binds flows only to B/X/b/n events, not to `e`.
                    th.flows.clear();
                    self.stats.events += 1;
                    self.head(cs.name, cs.category, "e", ts, who.0, who.1);
                    let _ = write!(self.line, ",\"id2\":{{\"local\":\"0x{id:x}\"}}");
                    self.args(cs, args, None);
                    self.line.push('}');
                    self.push_event(out);
                }
                Record::Lost { count, .. } => self.lost(who, ts, count, out),
                Record::Event { .. } | Record::BeginTt { .. } | Record::EndTt { .. } => {
                    self.phase_record(ctx, &mut th, who, ts, rec, out)
                }
            }
        }
        self.threads.insert(tr.seq_id, th);
    }

    fn thread_done(&mut self, _ctx: &mut Context<'_>, seq_id: u32, _out: &mut Vec<u8>) {
        // Open scopes of an exited thread are closed at the end of the trace.
        if let Some(th) = self.threads.get(&seq_id) {
            if th.stack.len() > 0 {
                return;
            }
        }
        self.threads.remove(&seq_id);
    }

    fn note_lost(&mut self, ctx: &mut Context<'_>, t: &ThreadRing, count: u64, out: &mut Vec<u8>) {
        let now = ctx.cal.now_ns();
        let ts = self
            .threads
            .get(&t.seq_id)
            .map_or(now, |th| now.max(th.last_ns));
        self.lost((t.pid, t.tid), ts, count, out);
    }

    fn tick(&mut self, _ctx: &mut Context<'_>, _out: &mut Vec<u8>) {}

    fn finish(&mut self, ctx: &mut Context<'_>, now_ns: u64, out: &mut Vec<u8>) {
        let mut ids: Vec<u32> = self.threads.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let mut th = self.threads.remove(&id).unwrap();
            let end = now_ns.max(th.last_ns);
            for scope in th.stack.drain_all() {
                self.complete(
                    ctx,
                    (th.pid, th.tid),
                    &scope,
                    end,
                    Some("ringtrace.unfinished"),
                    out,
                );
            }
        }
        self.file_tail(out);
    }

    fn stats(&self) -> EncodeStats {
        self.stats
    }
}

impl JsonEncoder {
    fn counter(&mut self, cs: &Callsite, ts: u64, who: (i32, i64), value: &str, out: &mut Vec<u8>) {
        self.stats.events += 1;
        self.head(cs.name, cs.category, "C", ts, who.0, who.1);
        let _ = write!(self.line, ",\"args\":{{\"value\":{value}}}}}");
        self.push_event(out);
    }

    /// An instant marking lost events, with their count.
    fn lost(&mut self, who: (i32, i64), ts: u64, count: u64, out: &mut Vec<u8>) {
        self.stats.lost_reported += count;
        self.head(super::LOST_EVENT_NAME, "ringtrace", "i", ts, who.0, who.1);
        let _ = write!(
            self.line,
            ",\"s\":\"t\",\"args\":{{\"lost_events\":{count}}}}}"
        );
        self.push_event(out);
    }
}

/// Slice ends with args and flows (what the `tracing` layer writes).
impl JsonEncoder {
    /// As `complete`, with the args of the end record (`extra`, merged into
    /// the slice's: a name in both takes the end's value) and the flows bound
    /// to this slice. A JSON event binds one flow (v2 `bind_id` with
    /// `flow_out` or `flow_in`); further flows of the same slice are left out.
    #[allow(clippy::too_many_arguments)]
    fn complete_with(
        &mut self,
        ctx: &mut Context<'_>,
        t: (i32, i64),
        scope: &OpenScope,
        end_ns: u64,
        extra: Option<(&'static Callsite, &[u64])>,
        flows: &[u64],
        out: &mut Vec<u8>,
    ) {
        if scope.site & (event::OPEN_DYNAMIC | event::OPEN_TTS) != 0 {
            return self.complete_ext(ctx, t, scope, end_ns, None, None, None, flows, out);
        }
        let Some(cs) = ctx.sites.get(scope.site) else {
            return;
        };
        self.stats.events += 1;
        self.head(cs.name, cs.category, "X", scope.ts_ns, t.0, t.1);
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
                let mut value = String::new();
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
                    l.push_str(&value);
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
}

/// Appends a v2 flow binding (`bind_id` and `flow_out` or `flow_in`) for a
/// FLOW record word; ids are made unique across processes with the pid.
fn bind_flow(l: &mut String, flow: u64, pid: i32) {
    let id = (flow & !crate::record::layout::FLOW_IN) ^ ((pid as u32 as u64) << 40);
    let dir = if flow & crate::record::layout::FLOW_IN != 0 {
        "flow_in"
    } else {
        "flow_out"
    };
    let _ = write!(l, ",\"bind_id\":\"0x{id:x}\",\"{dir}\":true");
}

/// Appends `ns` as microseconds with exactly three decimals.
pub(crate) fn micros(l: &mut String, ns: u64) {
    let _ = write!(l, "{}.{:03}", ns / 1000, ns % 1000);
}

/// Appends `s` as a JSON string: quotes, backslashes and control characters
/// escaped; everything else raw UTF-8 (never surrogate escapes, which some
/// readers reject).
pub(crate) fn escape_into(l: &mut String, s: &str) {
    l.push('"');
    for c in s.chars() {
        match c {
            '"' => l.push_str("\\\""),
            '\\' => l.push_str("\\\\"),
            '\n' => l.push_str("\\n"),
            '\r' => l.push_str("\\r"),
            '\t' => l.push_str("\\t"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(l, "\\u{:04x}", c as u32);
            }
            c => l.push(c),
        }
    }
    l.push('"');
}

/// Appends a double; non-finite values as strings (JSON has no NaN).
pub(crate) fn double_into(l: &mut String, v: f64) {
    if v.is_nan() {
        l.push_str("\"NaN\"");
    } else if v.is_infinite() {
        l.push_str(if v > 0.0 {
            "\"Infinity\""
        } else {
            "\"-Infinity\""
        });
    } else {
        let _ = write!(l, "{v:?}");
    }
}

fn value_into(l: &mut String, r: &mut ArgReader<'_>, depth: usize) {
    if depth > crate::record::args::MAX_NESTING {
        r.skip_value();
        escape_into(l, crate::record::args::TOO_DEEP);
        return;
    }
    match r.next() {
        ArgValue::Null => l.push_str("null"),
        ArgValue::Int(v) => {
            let _ = write!(l, "{v}");
        }
        ArgValue::Uint(v) => {
            let _ = write!(l, "{v}");
        }
        ArgValue::Double(v) => double_into(l, v),
        ArgValue::Bool(v) => l.push_str(if v { "true" } else { "false" }),
        ArgValue::Pointer(v) => {
            let _ = write!(l, "\"0x{v:x}\"");
        }
        ArgValue::Str(s) => escape_into(l, &s),
        ArgValue::Dict(n) => {
            l.push('{');
            for i in 0..n {
                if i > 0 {
                    l.push(',');
                }
                let key = r.key();
                escape_into(l, &key);
                l.push(':');
                value_into(l, r, depth + 1);
            }
            l.push('}');
        }
        ArgValue::Array(n) => {
            l.push('[');
            for i in 0..n {
                if i > 0 {
                    l.push(',');
                }
                value_into(l, r, depth + 1);
            }
            l.push(']');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_escaped() {
        let mut l = String::new();
        escape_into(&mut l, "a\"b\\c\n\u{1}é😀");
        assert_eq!(l, "\"a\\\"b\\\\c\\n\\u0001é😀\"");
    }

    #[test]
    fn micros_keep_nanoseconds() {
        let mut l = String::new();
        micros(&mut l, 1_234_567_890);
        assert_eq!(l, "1234567.890");
    }

    #[test]
    fn values_nested_too_deep_become_a_placeholder() {
        use crate::record::args::TraceValue;
        let mut v: Vec<Vec<u8>> = vec![vec![1]];
        let mut words = Vec::new();
        // 100 levels of arrays around one value, then a sibling value.
        for _ in 0..99 {
            words.push(crate::record::args::T_ARRAY | (1 << 8));
        }
        v.remove(0).encode(&mut words);
        5u8.encode(&mut words);
        let mut l = String::new();
        let mut r = ArgReader::new(&words);
        value_into(&mut l, &mut r, 0);
        assert!(l.contains("<nested too deep>"), "{l}");
        assert_eq!(
            r.next(),
            ArgValue::Uint(5),
            "the next value is still read correctly"
        );
    }

    #[test]
    fn non_finite_doubles_are_strings() {
        let mut l = String::new();
        double_into(&mut l, f64::NAN);
        double_into(&mut l, f64::NEG_INFINITY);
        double_into(&mut l, 0.5);
        assert_eq!(l, "\"NaN\"\"-Infinity\"0.5");
    }
}
