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
//! `ts` and `dur` are microseconds of BOOTTIME with three decimals, so the
//! nanoseconds survive and a JSON and a Perfetto trace of one run line up.
//!
//! Non-finite numbers have no JSON form: NaN and infinities are written as the
//! strings `"NaN"`, `"Infinity"` and `"-Infinity"`.

use super::{Batch, Context, EncodeStats, Encoder, OpenScope, ScopeStack};
use crate::args::{ArgReader, ArgValue};
use crate::callsite::Callsite;
use crate::record::{parse, Record};
use crate::registry::ThreadRing;
use std::collections::HashMap;
use std::fmt::Write as _;

struct Thread {
    pid: i32,
    tid: i64,
    stack: ScopeStack,
    last_ns: u64,
}

#[derive(Default)]
pub(crate) struct JsonEncoder {
    threads: HashMap<u32, Thread>,
    stats: EncodeStats,
    /// True once the first event is written (separators go before the rest).
    wrote_event: bool,
    line: String,
}

impl JsonEncoder {
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
        out.extend_from_slice(b"[\n");
        self.begin_event();
        let _ = write!(
            self.line,
            "{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":{},\"tid\":0,\"args\":{{\"name\":",
            ctx.process.pid
        );
        escape_into(&mut self.line, &ctx.process.name);
        self.line.push_str("}}");
        self.push_event(out);
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
            let ts = ctx.cal.to_ns(rec.ts()).max(th.last_ns);
            th.last_ns = ts;
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
                        Some(scope) => self.complete(ctx, who, &scope, ts, None, out),
                        None => self.stats.unmatched_ends += 1,
                    }
                }
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
                    self.head(cs.name, cs.category, "b", ts, who.0, who.1);
                    let _ = write!(self.line, ",\"id2\":{{\"local\":\"0x{id:x}\"}}");
                    self.args(cs, args, None);
                    self.line.push('}');
                    self.push_event(out);
                }
                Record::AsyncEnd { site, id, .. } => {
                    let Some(cs) = ctx.sites.get(site) else {
                        continue;
                    };
                    self.stats.events += 1;
                    self.head(cs.name, cs.category, "e", ts, who.0, who.1);
                    let _ = write!(self.line, ",\"id2\":{{\"local\":\"0x{id:x}\"}}}}");
                    self.push_event(out);
                }
                Record::Lost { count, .. } => self.lost(who, ts, count, out),
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
        out.extend_from_slice(b"\n]\n");
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
        self.head(
            super::perfetto::LOST_EVENT_NAME,
            "ringtrace",
            "i",
            ts,
            who.0,
            who.1,
        );
        let _ = write!(
            self.line,
            ",\"s\":\"t\",\"args\":{{\"lost_events\":{count}}}}}"
        );
        self.push_event(out);
    }
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
    fn non_finite_doubles_are_strings() {
        let mut l = String::new();
        double_into(&mut l, f64::NAN);
        double_into(&mut l, f64::NEG_INFINITY);
        double_into(&mut l, 0.5);
        assert_eq!(l, "\"NaN\"\"-Infinity\"0.5");
    }
}
