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

use super::{event, Batch, Context, EncodeStats, Encoder, IdMap, OpenScope, ScopeStack};
use crate::record::args::{ArgReader, ArgValue, StrWords};
use crate::record::callsite::Callsite;
use crate::record::header::{header_kind, header_len, header_payload};
use crate::record::layout::{parse, Record, KIND_BEGIN, KIND_END, MAX_SITE_ID};
use crate::record::registry::ThreadInfo as ThreadRing;
use std::fmt::Write as _;

/// JSON text being built, as bytes: recorded strings are escaped into it
/// straight from their words (they are UTF-8 already: see `StrWords`), and
/// numbers are written by hand. `push_str`, `push` and `write!` as on a
/// `String`; everything put in is UTF-8, so the line is.
#[derive(Default, Clone, Debug)]
pub(crate) struct Line(Vec<u8>);

impl Line {
    #[inline]
    pub(crate) fn push_str(&mut self, s: &str) {
        self.0.extend_from_slice(s.as_bytes());
    }

    #[inline]
    pub(crate) fn push(&mut self, c: char) {
        if c.is_ascii() {
            self.0.push(c as u8);
        } else {
            let mut b = [0u8; 4];
            self.0.extend_from_slice(c.encode_utf8(&mut b).as_bytes());
        }
    }

    /// Appends another line's text.
    #[inline]
    pub(crate) fn push_line(&mut self, other: &Line) {
        self.0.extend_from_slice(&other.0);
    }

    #[inline]
    pub(crate) fn clear(&mut self) {
        self.0.clear();
    }

    #[inline]
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The text (cold paths: the object form's top-level values).
    pub(crate) fn into_string(self) -> String {
        String::from_utf8(self.0)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
    }

    /// Appends `v` in decimal, two digits per step, written in place in a
    /// fixed-size buffer appended whole and cut to its digits (a copy of a
    /// known size, not a call to `memcpy`).
    #[inline]
    pub(crate) fn uint(&mut self, mut v: u64) {
        const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
            2021222324252627282930313233343536373839\
            4041424344454647484950515253545556575859\
            6061626364656667686970717273747576777879\
            8081828384858687888990919293949596979899";
        let digits = v.checked_ilog10().map_or(1, |d| d as usize + 1);
        let mut buf = [0u8; 20];
        let mut i = digits;
        while v >= 100 {
            let r = (v % 100) as usize * 2;
            v /= 100;
            i -= 2;
            buf[i..i + 2].copy_from_slice(&PAIRS[r..r + 2]);
        }
        if v >= 10 {
            let r = v as usize * 2;
            buf[0..2].copy_from_slice(&PAIRS[r..r + 2]);
        } else {
            buf[0] = b'0' + v as u8;
        }
        let len = self.0.len();
        self.0.extend_from_slice(&buf);
        self.0.truncate(len + digits);
    }

    /// Appends `v` in decimal.
    #[inline]
    pub(crate) fn int(&mut self, v: i64) {
        if v < 0 {
            self.0.push(b'-');
        }
        self.uint(v.unsigned_abs());
    }
}

impl std::fmt::Write for Line {
    #[inline]
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.push_str(s);
        Ok(())
    }
}

mod phases;
// CPU stack samples (`sampling`).
mod samples;
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
    threads: IdMap<u32, Thread>,
    /// Per call site id: `{"name":..,"cat":..,"ph":"` escaped once (empty:
    /// not made yet).
    heads: Vec<Vec<u8>>,
    /// Per call site id: the head of its `X` events, up to the timestamp
    /// (`{"name":..,"cat":..,"ph":"X","ts":`; empty: not made yet).
    x_heads: Vec<Vec<u8>>,
    /// Per call site id: the keys of its arguments escaped once, each with
    /// what goes before it (`,"args":{"a":`, then `,"b":`...; empty: not
    /// made yet).
    arg_keys: Vec<Vec<Box<[u8]>>>,
    stats: EncodeStats,
    /// True once the first event is written (separators go before the rest).
    wrote_event: bool,
    line: Line,
    /// `,"pid":..,"tid":..` of the last thread written, and for whom.
    who: (i32, i64, Vec<u8>),
    /// Options and state of the phases of the typed API (`phases`).
    phases: phases::Phases,
    /// Tests: every record takes the general path (see `plain_fast`).
    #[cfg(test)]
    general_only: bool,
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
        l.push_str(",\"ph\":\"");
        head_tail(l, ph, ts_ns, pid, tid);
    }

    /// As [`Self::head`] for a call site's event: its name and category are
    /// escaped once per site, then copied.
    #[inline]
    fn head_site(&mut self, cs: &Callsite, ph: &str, ts_ns: u64, pid: i32, tid: i64) {
        self.begin_event();
        let idx = cs.id() as usize;
        if self.heads.len() <= idx {
            self.heads.resize_with(idx + 1, Vec::new);
        }
        if self.heads[idx].is_empty() {
            let mut h = Line::default();
            h.push_str("{\"name\":");
            escape_into(&mut h, cs.name);
            h.push_str(",\"cat\":");
            escape_into(&mut h, cs.category);
            h.push_str(",\"ph\":\"");
            self.heads[idx] = h.0;
        }
        self.line.0.extend_from_slice(&self.heads[idx]);
        self.line.push_str(ph);
        self.line.push_str("\",\"ts\":");
        micros(&mut self.line, ts_ns);
        if self.who.2.is_empty() || self.who.0 != pid || self.who.1 != tid {
            let mut w = Line(std::mem::take(&mut self.who.2));
            w.clear();
            who_into(&mut w, pid, tid);
            self.who = (pid, tid, w.0);
        }
        self.line.0.extend_from_slice(&self.who.2);
    }

    #[inline]
    fn args(&mut self, cs: &Callsite, words: &[u64], extra: Option<&str>) {
        if cs.arg_names.is_empty() && extra.is_none() {
            return;
        }
        let idx = cs.id() as usize;
        if self.arg_keys.len() <= idx {
            self.arg_keys.resize_with(idx + 1, Vec::new);
        }
        if self.arg_keys[idx].len() != cs.arg_names.len() {
            self.arg_keys[idx] = cs
                .arg_names
                .iter()
                .enumerate()
                .map(|(i, name)| {
                    let mut k = Line::default();
                    k.push_str(if i == 0 { ",\"args\":{" } else { "," });
                    escape_into(&mut k, name);
                    k.push(':');
                    k.0.into_boxed_slice()
                })
                .collect();
        }
        let l = &mut self.line;
        if cs.arg_names.is_empty() {
            l.push_str(",\"args\":{");
        }
        let mut r = ArgReader::new(words);
        for key in &self.arg_keys[idx] {
            l.0.extend_from_slice(key);
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
        self.head_site(cs, "X", scope.ts_ns, t.0, t.1);
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
        let (words, begin_end) = (batch.words, self.begin_end());
        let mut pos = 0;
        while pos < words.len() {
            let hdr = words[pos];
            let len = header_len(hdr) as usize;
            if len < 2 || pos + len > words.len() {
                break; // cut: as `parse`, nothing after it is read
            }
            let at = pos;
            pos += len;
            // Plain scope begins and ends (the commonest records): no
            // record decoded, nothing kept for a begin without args.
            if len == 2 && !begin_end && self.plain_fast() {
                let ts = ctx.cal.to_ns(words[at + 1]).max(th.last_ns);
                let payload = header_payload(hdr);
                match header_kind(hdr) {
                    KIND_BEGIN => {
                        let site = (payload & MAX_SITE_ID as u64) as u32;
                        if th.stack.try_begin_plain((payload >> 24) as u32, site, ts) {
                            th.last_ns = ts;
                            continue;
                        }
                    }
                    KIND_END if th.flows.is_empty() => {
                        if let Some(scope) = th.stack.try_end_top(payload as u32) {
                            th.last_ns = ts;
                            self.complete_with(ctx, who, &scope, ts, None, &[], out);
                            th.stack.recycle(scope);
                            continue;
                        }
                    }
                    _ => {}
                }
            }
            let Some(rec) = parse(&words[at..at + len]).next() else {
                continue; // unknown kinds are skipped whole
            };
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
                    let mut kept = th.stack.spare_args();
                    kept.extend_from_slice(args);
                    let scope = OpenScope {
                        depth,
                        site,
                        ts_ns: ts,
                        args: kept,
                    };
                    for orphan in th.stack.begin(scope) {
                        self.stats.ends_lost += 1;
                        self.complete(ctx, who, &orphan, ts, Some("ringtrace.end_lost"), out);
                        th.stack.recycle(orphan);
                    }
                }
                Record::End { depth, .. } => {
                    let m = th.stack.end(depth);
                    for orphan in m.orphaned {
                        self.stats.ends_lost += 1;
                        self.complete(ctx, who, &orphan, ts, Some("ringtrace.end_lost"), out);
                        th.stack.recycle(orphan);
                    }
                    match m.matched {
                        Some(scope) => {
                            if th.flows.is_empty() {
                                self.complete_with(ctx, who, &scope, ts, None, &[], out);
                            } else {
                                let flows = std::mem::take(&mut th.flows);
                                self.complete_with(ctx, who, &scope, ts, None, &flows, out);
                            }
                            th.stack.recycle(scope);
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
                        th.stack.recycle(orphan);
                    }
                    match m.matched {
                        Some(scope) => {
                            let flows = std::mem::take(&mut th.flows);
                            let extra = ctx.sites.get(site).map(|cs| (cs, args));
                            self.complete_with(ctx, who, &scope, ts, extra, &flows, out);
                            th.stack.recycle(scope);
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
                    self.head_site(cs, "i", ts, who.0, who.1);
                    self.line.push_str(",\"s\":\"t\"");
                    self.args(cs, args, None);
                    self.line.push('}');
                    self.push_event(out);
                }
                Record::CounterI64 { site, value, .. } => {
                    let Some(cs) = ctx.sites.get(site) else {
                        continue;
                    };
                    self.counter(cs, ts, who, |l| l.int(value), out);
                }
                Record::CounterF64 { site, value, .. } => {
                    let Some(cs) = ctx.sites.get(site) else {
                        continue;
                    };
                    self.counter(cs, ts, who, |l| double_into(l, value), out);
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

    fn note_lost_no_ring(
        &mut self,
        ctx: &mut Context<'_>,
        now_ns: u64,
        count: u64,
        out: &mut Vec<u8>,
    ) {
        self.stats.lost_reported += count;
        let pid = ctx.process.pid;
        self.head(
            super::LOST_EVENT_NAME,
            "ringtrace",
            "i",
            now_ns,
            pid,
            pid as i64,
        );
        let _ = write!(
            self.line,
            ",\"s\":\"p\",\"args\":{{\"lost_events\":{count},\"reason\":\"{}\"}}}}",
            super::NO_MEMORY_REASON
        );
        self.push_event(out);
    }

    fn samples(
        &mut self,
        _ctx: &mut Context<'_>,
        view: &crate::sampling::SampleView<'_>,
        _out: &mut Vec<u8>,
    ) {
        self.write_samples(view);
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
    /// A counter sample: `value` writes the number (no allocation, no `fmt`).
    fn counter(
        &mut self,
        cs: &Callsite,
        ts: u64,
        who: (i32, i64),
        value: impl FnOnce(&mut Line),
        out: &mut Vec<u8>,
    ) {
        self.stats.events += 1;
        self.head_site(cs, "C", ts, who.0, who.1);
        self.line.push_str(",\"args\":{\"value\":");
        value(&mut self.line);
        self.line.push_str("}}");
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
}

impl JsonEncoder {
    /// Plain scope begins and ends may skip the general path (always, but
    /// in tests that compare both).
    #[inline(always)]
    fn plain_fast(&self) -> bool {
        #[cfg(test)]
        return !self.general_only;
        #[cfg(not(test))]
        true
    }

    /// An `X` event without args or flows, written straight into `out`
    /// (what `head_site`, `dur` and `push_event` write, without building
    /// the line first): its head up to the timestamp is kept per call site.
    #[inline]
    fn plain_x(
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
}

/// Appends a v2 flow binding (`bind_id` and `flow_out` or `flow_in`) for a
/// FLOW record word; ids are made unique across processes with the pid.
fn bind_flow(l: &mut Line, flow: u64, pid: i32) {
    let id = (flow & !crate::record::layout::FLOW_IN) ^ ((pid as u32 as u64) << 40);
    let dir = if flow & crate::record::layout::FLOW_IN != 0 {
        "flow_in"
    } else {
        "flow_out"
    };
    let _ = write!(l, ",\"bind_id\":\"0x{id:x}\",\"{dir}\":true");
}

/// The rest of an event's head after `"ph":"`: the phase, `ts`, `pid`, `tid`.
#[inline]
fn head_tail(l: &mut Line, ph: &str, ts_ns: u64, pid: i32, tid: i64) {
    l.push_str(ph);
    l.push_str("\",\"ts\":");
    micros(l, ts_ns);
    who_into(l, pid, tid);
}

/// `,"pid":..,"tid":..`.
#[inline]
fn who_into(l: &mut Line, pid: i32, tid: i64) {
    l.push_str(",\"pid\":");
    l.int(pid as i64);
    l.push_str(",\"tid\":");
    l.int(tid);
}

/// Appends `ns` as microseconds with exactly three decimals.
#[inline]
pub(crate) fn micros(l: &mut Line, ns: u64) {
    l.uint(ns / 1000);
    let frac = (ns % 1000) as u16;
    l.0.extend_from_slice(&[
        b'.',
        b'0' + (frac / 100) as u8,
        b'0' + (frac / 10 % 10) as u8,
        b'0' + (frac % 10) as u8,
    ]);
}

/// Appends `s` as a JSON string: quotes, backslashes and control characters
/// escaped; everything else raw UTF-8 (never surrogate escapes, which some
/// readers reject).
#[inline]
pub(crate) fn escape_into<W: std::fmt::Write>(l: &mut W, s: &str) {
    let _ = l.write_char('"');
    let bytes = s.as_bytes();
    let mut run = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if needs_escape(b) {
            // Runs end at ASCII bytes: always on a character boundary.
            let _ = l.write_str(&s[run..i]);
            run = i + 1;
            let mut esc = [0u8; 6];
            let _ = l.write_str(escape_of(b, &mut esc));
        }
    }
    let _ = l.write_str(&s[run..]);
    let _ = l.write_char('"');
}

/// The escape sequence of a byte [`needs_escape`] picks.
#[inline]
fn escape_of(b: u8, buf: &mut [u8; 6]) -> &str {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    match b {
        b'"' => "\\\"",
        b'\\' => "\\\\",
        b'\n' => "\\n",
        b'\r' => "\\r",
        b'\t' => "\\t",
        _ => {
            *buf = [
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[(b >> 4) as usize],
                HEX[(b & 15) as usize],
            ];
            std::str::from_utf8(buf).unwrap_or("?")
        }
    }
}

/// As [`escape_into`] for a recorded string, read from its words: a word
/// with no byte to escape (the usual case) is copied whole after one test
/// of its eight bytes at once; only a word that has one goes byte by byte.
#[inline]
fn escape_words(l: &mut Line, s: &StrWords<'_>) {
    l.0.push(b'"');
    l.0.reserve(s.len() + 8);
    s.for_each_word(|w, n| {
        let bytes = w.to_le_bytes();
        // The bytes past the string's end (in its last word) read as
        // spaces, which need no escape.
        let tail = if n == 8 { 0 } else { u64::MAX << (8 * n) };
        if escapes_in((w & !tail) | (SPACES & tail)) {
            escape_raw(l, &bytes[..n]);
        } else {
            // The whole word, a copy of fixed size (one store, where a copy
            // of `n` bytes is a call to memcpy), cut back to the string.
            l.0.extend_from_slice(&bytes);
            l.0.truncate(l.0.len() - (8 - n));
        }
    });
    l.0.push(b'"');
}

/// Eight copies of a byte value `b`, one per byte of a word.
const fn each_byte(b: u8) -> u64 {
    0x0101_0101_0101_0101 * b as u64
}

const SPACES: u64 = each_byte(b' ');

/// Whether a word's eight bytes hold one that [`needs_escape`] picks,
/// tested on all eight at once. `(x - each_byte(k)) & !x` has a top bit
/// set if and only if some byte of `x` is below `k` (`k` up to 0x80): the
/// lowest such byte borrows into its own top bit; with none, no byte
/// borrows, and a byte whose difference reaches 0x80 is one whose top bit
/// `!x` clears. A byte equal to `c` is a byte of `x ^ each_byte(c)` that
/// is below one. Bytes of 0x80 and up (UTF-8 beyond ASCII) never count, as
/// in [`needs_escape`].
#[inline]
fn escapes_in(w: u64) -> bool {
    const TOP: u64 = each_byte(0x80);
    let below = |x: u64, k: u8| x.wrapping_sub(each_byte(k)) & !x;
    let control = below(w, 0x20);
    let quote = below(w ^ each_byte(b'"'), 1);
    let backslash = below(w ^ each_byte(b'\\'), 1);
    let delete = below(w ^ each_byte(0x7f), 1);
    (control | quote | backslash | delete) & TOP != 0
}

/// Whether byte `b` of UTF-8 text needs an escape in a JSON string.
#[inline]
fn needs_escape(b: u8) -> bool {
    b < 0x20 || b == b'"' || b == b'\\' || b == 0x7f
}

/// Appends UTF-8 bytes escaped (no quotes): runs of plain bytes are copied
/// whole. Bytes of multi-byte characters are all >= 0x80, never escaped, so
/// a character split across calls comes out whole.
#[inline]
fn escape_raw(l: &mut Line, bytes: &[u8]) {
    let mut run = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if !needs_escape(b) {
            continue;
        }
        l.0.extend_from_slice(&bytes[run..i]);
        run = i + 1;
        let mut esc = [0u8; 6];
        l.push_str(escape_of(b, &mut esc));
    }
    l.0.extend_from_slice(&bytes[run..]);
}

/// Appends a double; non-finite values as strings (JSON has no NaN).
pub(crate) fn double_into<W: std::fmt::Write>(l: &mut W, v: f64) {
    if v.is_nan() {
        let _ = l.write_str("\"NaN\"");
    } else if v.is_infinite() {
        let _ = l.write_str(if v > 0.0 {
            "\"Infinity\""
        } else {
            "\"-Infinity\""
        });
    } else {
        let _ = write!(l, "{v:?}");
    }
}

fn value_into(l: &mut Line, r: &mut ArgReader<'_>, depth: usize) {
    if depth > crate::record::args::MAX_NESTING {
        r.skip_value();
        escape_into(l, crate::record::args::TOO_DEEP);
        return;
    }
    match r.next() {
        ArgValue::Null => l.push_str("null"),
        ArgValue::Int(v) => l.int(v),
        ArgValue::Uint(v) => l.uint(v),
        ArgValue::Double(v) => double_into(l, v),
        ArgValue::Bool(v) => l.push_str(if v { "true" } else { "false" }),
        ArgValue::Pointer(v) => {
            let _ = write!(l, "\"0x{v:x}\"");
        }
        ArgValue::Str(s) => escape_words(l, &s),
        ArgValue::Dict(n) => {
            l.push('{');
            for i in 0..n {
                if i > 0 {
                    l.push(',');
                }
                let key = r.key_words();
                escape_words(l, &key);
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
    fn plain_scope_records_skip_the_general_path_writing_the_same_bytes() {
        use crate::encode::{ProcessInfo, Sites};
        use crate::record::args::TraceValue;
        use crate::record::callsite::CallsiteKind;
        use crate::record::clock::Calibration;
        use crate::record::header::make_header;
        use crate::record::layout::{KIND_END_ARGS, KIND_FLOW, KIND_INSTANT, KIND_LOST};
        static A: Callsite = Callsite::new("j", "a", "f.rs", 1, "m", &[], CallsiteKind::Scope);
        static B: Callsite = Callsite::new("j", "b", "f.rs", 2, "m", &["x"], CallsiteKind::Scope);
        A.is_enabled();
        B.is_enabled();
        let (a, b) = (A.id() as u64, B.id() as u64);
        let mut ts = crate::record::clock::ticks();
        let mut w: Vec<u64> = Vec::new();
        let mut rec = |w: &mut Vec<u64>, kind: u64, payload: u64, extra: &[u64]| {
            ts += 1234;
            w.push(make_header(kind, 2 + extra.len(), payload));
            w.push(ts);
            w.extend_from_slice(extra);
        };
        let mut arg = Vec::new();
        7u64.encode(&mut arg);
        for _ in 0..3 {
            rec(&mut w, KIND_BEGIN, a, &[]); // depth 0
            rec(&mut w, KIND_BEGIN, a | 1 << 24, &[]);
            rec(&mut w, KIND_END, 1, &[]);
            rec(&mut w, KIND_BEGIN, b | 1 << 24, &arg); // args: general
            rec(&mut w, KIND_END, 1, &[]);
            rec(&mut w, KIND_BEGIN, a | 1 << 24, &[]);
            rec(&mut w, KIND_FLOW, 0, &[42]); // the end binds the flow
            rec(&mut w, KIND_END, 1, &[]);
            rec(&mut w, KIND_BEGIN, a | 1 << 24, &[]);
            rec(&mut w, KIND_BEGIN, a | 1 << 24, &[]); // the first lost its end
            rec(&mut w, KIND_END, 1, &[]);
            rec(&mut w, KIND_INSTANT, a, &[]);
            rec(&mut w, KIND_END_ARGS, b, &arg);
            rec(&mut w, KIND_END, 0, &[]); // no begin
            rec(&mut w, KIND_LOST, 0, &[2]);
            rec(&mut w, KIND_BEGIN, a, &[]);
            rec(&mut w, KIND_END, 0, &[]);
        }
        let cal = Calibration::start(false);
        let process = ProcessInfo::current(Some("j".into()));
        let thread = ThreadRing::for_test(5, false);
        let mut outs = Vec::new();
        for general_only in [false, true] {
            let mut sites = Sites::default();
            let mut ctx = Context {
                cal: &cal,
                process: &process,
                sites: &mut sites,
            };
            let mut e = JsonEncoder::new();
            e.general_only = general_only;
            let mut out = Vec::new();
            for half in [&w[..w.len() / 3], &w[w.len() / 3..]] {
                let batch = Batch {
                    thread: &thread,
                    words: half,
                    overwritten: 0,
                };
                e.batch(&mut ctx, &batch, &mut out);
            }
            outs.push((String::from_utf8(out).unwrap(), e.stats().events));
        }
        assert!(outs[0].0.contains("\"ph\":\"X\""));
        assert_eq!(outs[0], outs[1]);
    }

    /// The argument keys kept per call site write what escaping every key
    /// on every event wrote, for sites used in turns, with and without a
    /// flag argument.
    #[test]
    fn argument_keys_kept_per_site_are_what_escaping_each_time_writes() {
        use crate::record::args::TraceValue;
        use crate::record::callsite::CallsiteKind;
        static P: Callsite = Callsite::new(
            "j",
            "p",
            "f.rs",
            1,
            "m",
            &["q\"uote", "back\\slash", "plain"],
            CallsiteKind::Scope,
        );
        static Q: Callsite =
            Callsite::new("j", "q", "f.rs", 2, "m", &["tab\tkey"], CallsiteKind::Scope);
        static R: Callsite = Callsite::new("j", "r", "f.rs", 3, "m", &[], CallsiteKind::Scope);
        let mut e = JsonEncoder::new();
        for (i, cs) in [&P, &Q, &P, &R, &Q, &P, &R].into_iter().enumerate() {
            cs.is_enabled();
            let mut words = Vec::new();
            for k in 0..cs.arg_names.len() {
                (i * 10 + k).encode(&mut words);
            }
            let flag = (i % 2 == 1).then_some("fl\"ag");
            e.line.clear();
            e.args(cs, &words, flag);
            let mut want = Line::default();
            if !cs.arg_names.is_empty() || flag.is_some() {
                want.push_str(",\"args\":{");
                let mut r = ArgReader::new(&words);
                for (k, name) in cs.arg_names.iter().enumerate() {
                    if k > 0 {
                        want.push(',');
                    }
                    escape_into(&mut want, name);
                    want.push(':');
                    value_into(&mut want, &mut r, 0);
                }
                if let Some(flag) = flag {
                    if !cs.arg_names.is_empty() {
                        want.push(',');
                    }
                    escape_into(&mut want, flag);
                    want.push_str(":true");
                }
                want.push('}');
            }
            assert_eq!(e.line.0, want.0, "event {i} of {}", cs.name);
        }
    }

    #[test]
    fn plain_x_writes_what_the_general_path_writes() {
        use crate::record::callsite::CallsiteKind;
        static S: Callsite =
            Callsite::new("c\"at", "na\\me", "f.rs", 1, "m", &[], CallsiteKind::Scope);
        static T: Callsite =
            Callsite::new("cat", "other", "f.rs", 2, "m", &[], CallsiteKind::Scope);
        S.is_enabled();
        T.is_enabled();
        let (mut fast, mut general) = (JsonEncoder::new(), JsonEncoder::new());
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let cases = [
            (&S, 0, 0, (1, 2)),
            (&S, 1_234_567, 999, (1, 2)),
            (&T, u64::MAX / 2, 123_456_789_012, (1, 3)),
            (&S, 7, 1, (-1, -5)),
            (&T, 1_000_000_000_000, 0, (1, 2)),
        ];
        for (i, &(cs, ts, dur, who)) in cases.iter().enumerate() {
            fast.plain_x(cs, ts, ts + dur, who, &mut a);
            // `complete_with`'s general path.
            general.head_site(cs, "X", ts, who.0, who.1);
            general.line.push_str(",\"dur\":");
            micros(&mut general.line, dur);
            general.args(cs, &[], None);
            general.line.push('}');
            general.push_event(&mut b);
            assert_eq!(
                String::from_utf8_lossy(&a),
                String::from_utf8_lossy(&b),
                "after case {i}"
            );
        }
    }

    #[test]
    fn strings_are_escaped() {
        let mut l = Line::default();
        escape_into(&mut l, "a\"b\\c\n\u{1}é😀");
        assert_eq!(l.into_string(), "\"a\\\"b\\\\c\\n\\u0001é😀\"");
    }

    #[test]
    fn recorded_strings_are_escaped_from_their_words() {
        use crate::record::args::TraceValue;
        for s in [
            "",
            "plain",
            "a\"b\\c\n\u{1}\u{7f}",
            "héllo wörld 😀 across words",
            "12345678\t",
        ] {
            let mut words = Vec::new();
            s.encode(&mut words);
            let mut got = Line::default();
            value_into(&mut got, &mut ArgReader::new(&words), 0);
            let got = got.into_string();
            let mut want = Line::default();
            escape_into(&mut want, s);
            assert_eq!(got, want.into_string());
            let back: String = serde_json::from_str(&got).unwrap();
            assert_eq!(back, s);
        }
    }

    #[test]
    fn a_word_test_finds_exactly_the_bytes_to_escape() {
        // Every byte value at every position of words whose other bytes are
        // drawn from values near the edges (0x1f/0x20, the quote, the
        // backslash, 0x7f/0x80) and at random.
        const EDGES: [u8; 14] = [
            0x00, 0x01, 0x1f, 0x20, 0x21, 0x22, 0x23, 0x5b, 0x5c, 0x5d, 0x7e, 0x7f, 0x80, 0xff,
        ];
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let plain_byte = |r: u64| {
            if r & 1 == 0 {
                EDGES[(r >> 1) as usize % EDGES.len()]
            } else {
                (r >> 8) as u8
            }
        };
        for round in 0..2_000 {
            let mut bytes = [0u8; 8];
            for b in &mut bytes {
                *b = plain_byte(next());
            }
            if round % 2 == 0 {
                // Half the rounds: no other byte to escape.
                for b in &mut bytes {
                    if needs_escape(*b) {
                        *b = b'a';
                    }
                }
            }
            for pos in 0..8 {
                for v in 0..=255u8 {
                    let mut w = bytes;
                    w[pos] = v;
                    assert_eq!(
                        escapes_in(u64::from_le_bytes(w)),
                        w.iter().any(|&b| needs_escape(b)),
                        "{w:02x?}"
                    );
                }
            }
        }
    }

    #[test]
    fn recorded_strings_of_every_length_with_an_escape_anywhere() {
        // Each byte an escape may be, and a character beyond ASCII, at each
        // position of strings that end at every offset of a word.
        use crate::record::args::TraceValue;
        let odd: Vec<String> = (0..0x80u8)
            .map(|b| (b as char).to_string())
            .chain(["é".to_string(), "😀".to_string()])
            .collect();
        for len in 0..=20 {
            for pos in 0..len {
                for c in &odd {
                    let s: String = (0..len)
                        .map(|i| if i == pos { c.as_str() } else { "x" })
                        .collect();
                    let mut words = Vec::new();
                    s.as_str().encode(&mut words);
                    let mut got = Line::default();
                    value_into(&mut got, &mut ArgReader::new(&words), 0);
                    let got = got.into_string();
                    let mut want = Line::default();
                    escape_into(&mut want, &s);
                    assert_eq!(got, want.into_string());
                    let back: String = serde_json::from_str(&got).unwrap();
                    assert_eq!(back, s);
                }
            }
        }
    }

    #[test]
    fn integers_are_written_in_decimal() {
        let mut l = Line::default();
        for v in [
            0i64,
            7,
            -7,
            10,
            99,
            100,
            101,
            1000,
            12345,
            i64::MAX,
            i64::MIN,
        ] {
            l.int(v);
            l.push(' ');
        }
        l.uint(u64::MAX);
        let want = format!(
            "0 7 -7 10 99 100 101 1000 12345 {} {} {}",
            i64::MAX,
            i64::MIN,
            u64::MAX
        );
        assert_eq!(l.into_string(), want);
    }

    #[test]
    fn uint_writes_every_digit_count() {
        let mut l = Line::default();
        let mut want = String::new();
        let mut p = 1u64;
        for _ in 0..20 {
            for v in [
                p - 1,
                p,
                p + 1,
                p.saturating_mul(5),
                p.saturating_mul(9).saturating_add(7),
            ] {
                l.uint(v);
                l.push(' ');
                want.push_str(&format!("{v} "));
            }
            p = p.saturating_mul(10);
        }
        l.uint(u64::MAX);
        want.push_str(&u64::MAX.to_string());
        assert_eq!(l.into_string(), want);
    }

    #[test]
    fn micros_keep_nanoseconds() {
        let mut l = Line::default();
        micros(&mut l, 1_234_567_890);
        assert_eq!(l.into_string(), "1234567.890");
        let mut l = Line::default();
        micros(&mut l, 7);
        l.push(' ');
        micros(&mut l, 0);
        l.push(' ');
        micros(&mut l, u64::MAX);
        assert_eq!(l.into_string(), "0.007 0.000 18446744073709551.615");
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
        let mut l = Line::default();
        let mut r = ArgReader::new(&words);
        value_into(&mut l, &mut r, 0);
        let l = l.into_string();
        assert!(l.contains("<nested too deep>"), "{l}");
        assert_eq!(
            r.next(),
            ArgValue::Uint(5),
            "the next value is still read correctly"
        );
    }

    #[test]
    fn non_finite_doubles_are_strings() {
        let mut l = Line::default();
        double_into(&mut l, f64::NAN);
        double_into(&mut l, f64::NEG_INFINITY);
        double_into(&mut l, 0.5);
        assert_eq!(l.into_string(), "\"NaN\"\"-Infinity\"0.5");
    }
}
