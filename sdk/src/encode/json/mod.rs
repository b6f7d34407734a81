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
//! instead. `ts` and `dur` are microseconds of BOOTTIME with three decimals,
//! so the nanoseconds survive and a JSON and a Perfetto trace of one run line
//! up. Non-finite numbers have no JSON form: NaN and infinities are written
//! as the strings `"NaN"`, `"Infinity"` and `"-Infinity"`.
//!
//! The rooms: `text` (JSON's text: the line an event is built in, numbers,
//! escaping, argument values), `scopes` (how a scope is written: `X`, or
//! `B`/`E`), `typed` (the typed event API's phases), `object` (the file's
//! first and last bytes, the object form's top-level keys); this module
//! holds the encoder's state, the heads of events and the path of each
//! record kind.

use super::{Batch, Context, EncodeStats, Encoder, IdMap, OpenScope, ScopeStack};
use crate::record::args::ArgReader;
use crate::record::callsite::Callsite;
use crate::record::header::{header_kind, header_len, header_payload};
use crate::record::layout::{parse, Record, KIND_BEGIN, KIND_END, MAX_SITE_ID};
use crate::record::registry::ThreadInfo as ThreadRing;
use std::fmt::Write as _;

mod object;
// CPU stack samples (`sampling`).
mod samples;
mod scopes;
mod text;
mod typed;

pub(crate) use object::to_json_text;
pub(crate) use scopes::ScopeForm;
use text::{double_into, escape_into, micros, value_into, Line};

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
    /// what goes before it (`,"args":{"a":`, then `,"b":`...), then its
    /// constant arguments written whole (empty: not made yet; see
    /// `arg_pieces`).
    arg_keys: Vec<Vec<Box<[u8]>>>,
    stats: EncodeStats,
    /// True once the first event is written (separators go before the rest).
    wrote_event: bool,
    line: Line,
    /// `,"pid":..,"tid":..` of the last thread written, and for whom.
    who: (i32, i64, Vec<u8>),
    /// Options and state of the phases of the typed API (`typed`).
    phases: typed::Phases,
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

    /// A JSON encoder with `opts`.
    pub(crate) fn with_options(opts: JsonOptions) -> Self {
        let mut e = Self::default();
        e.phases.opts = opts;
        e
    }

    pub(super) fn begin_end(&self) -> bool {
        self.phases.opts.scopes == ScopeForm::BeginEnd
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

    fn finish_line(&mut self, out: &mut Vec<u8>) {
        self.line.push('}');
        self.stats.events += 1;
        self.push_event(out);
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
        let names = cs.arg_names.len();
        let any = names != 0 || !cs.const_args.is_empty();
        if !any && extra.is_none() {
            return;
        }
        let idx = cs.id() as usize;
        if self.arg_keys.len() <= idx {
            self.arg_keys.resize_with(idx + 1, Vec::new);
        }
        let pieces = names + usize::from(!cs.const_args.is_empty());
        if self.arg_keys[idx].len() != pieces {
            self.arg_keys[idx] = arg_pieces(cs);
        }
        let l = &mut self.line;
        if !any {
            l.push_str(",\"args\":{");
        }
        let mut r = ArgReader::new(words);
        let (keys, tail) = self.arg_keys[idx].split_at(names);
        for key in keys {
            l.0.extend_from_slice(key);
            value_into(l, &mut r, 0);
        }
        if let Some(tail) = tail.first() {
            l.0.extend_from_slice(tail);
        }
        if let Some(flag) = extra {
            if any {
                l.push(',');
            }
            escape_into(l, flag);
            l.push_str(":true");
        }
        l.push('}');
    }
}

/// The pieces of a call site's `args` escaped once: a key for each of its
/// recorded arguments with what goes before it (`,"args":{"a":`, then
/// `,"b":`...), then, if it has constant arguments, all of them with their
/// values (`,"level":"INFO"`).
fn arg_pieces(cs: &Callsite) -> Vec<Box<[u8]>> {
    let first = |k: &mut Line, i: usize| k.push_str(if i == 0 { ",\"args\":{" } else { "," });
    let mut pieces: Vec<Box<[u8]>> = cs
        .arg_names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let mut k = Line::default();
            first(&mut k, i);
            escape_into(&mut k, name);
            k.push(':');
            k.0.into_boxed_slice()
        })
        .collect();
    if !cs.const_args.is_empty() {
        let mut k = Line::default();
        for (i, (name, value)) in cs.const_args.iter().enumerate() {
            first(&mut k, cs.arg_names.len() + i);
            escape_into(&mut k, name);
            k.push(':');
            escape_into(&mut k, value);
        }
        pieces.push(k.0.into_boxed_slice());
    }
    pieces
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
                        let depth = (payload >> 24) as u32;
                        // Its end next (a leaf), nothing orphaned, no
                        // flow to bind: the `X` at once, the scope never
                        // on the stack.
                        if let Some(&[end, end_ticks]) = words.get(pos..pos + 2) {
                            if header_kind(end) == KIND_END
                                && header_len(end) == 2
                                && header_payload(end) as u32 == depth
                                && th.flows.is_empty()
                                && th.stack.fits(depth)
                            {
                                let end_ns = ctx.cal.to_ns(end_ticks).max(ts);
                                th.last_ns = end_ns;
                                let scope = OpenScope {
                                    depth,
                                    site,
                                    ts_ns: ts,
                                    args: Vec::new(),
                                };
                                self.complete_with(ctx, who, &scope, end_ns, None, &[], out);
                                pos += 2;
                                continue;
                            }
                        }
                        if th.stack.try_begin_plain(depth, site, ts) {
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

    fn note_lost_process(
        &mut self,
        ctx: &mut Context<'_>,
        now_ns: u64,
        count: u64,
        reason: &str,
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
            ",\"s\":\"p\",\"args\":{{\"lost_events\":{count},\"reason\":\"{reason}\"}}}}"
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

/// Appends a v2 flow binding (`bind_id` and `flow_out` or `flow_in`) for a
/// FLOW record word; ids are made unique across processes with the pid.
fn bind_flow(l: &mut Line, flow: u64, pid: i32) {
    let id = crate::record::layout::scoped_flow(flow, (pid as u32 as u64) << 40);
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

#[cfg(test)]
mod tests;
