//! Perfetto: the counterparts of the typed event API's phases, written the
//! way Perfetto's SDK writes them, and thread time.
//!
//! | record | packets |
//! | --- | --- |
//! | slice begin / end (typed API, thread time) | SLICE_BEGIN / SLICE_END on the thread track; thread time as `extra_counter_values` on a `COUNTER_THREAD_TIME_NS` track of the thread |
//! | complete (explicit times) | SLICE_BEGIN + SLICE_END with absolute BOOTTIME timestamps |
//! | instant g / p / t | INSTANT on the global track (uuid 0) / the process track / the thread track |
//! | counter series | COUNTER on a process counter track per series (`<name>`, or `<name> <series>`), unit in its CounterDescriptor |
//! | async b / n / e | SLICE_BEGIN / INSTANT / SLICE_END on a track per (category, scope, id): child of the process track for `id2.local`, global otherwise |
//! | flow s / t, f with bp "e" | INSTANT at the flow point (nested in the enclosing slice) with `flow_ids` / `terminating_flow_ids` |
//! | flow f | `terminating_flow_ids` on the next SLICE_BEGIN of the thread |
//! | mark R | INSTANT on the thread track |
//! | thread / process metadata | re-emitted Thread / ProcessDescriptor (name, labels, `legacy_sort_index`, `sibling_order_rank`) |
//! | log | INSTANT with a `LogMessage` (interned body and source location) |
//! | stacks | `callstack` (InlineCallstack, rootmost frame first) |
//!
//! Everything else (samples, objects, memory dumps, clock sync, contexts,
//! linked ids, colors, global samples) has no Perfetto counterpart and is
//! written in JSON only.

use super::annotations::annotation_value;
use super::fields::{
    CALLSTACK_FRAMES, CD_TYPE, CD_UNIT, CD_UNIT_NAME, COUNTER_THREAD_TIME_NS, DA_NAME, ENTRY_IID,
    FRAME_FUNCTION_NAME, ID_LOG_MESSAGE_BODY, LMB_BODY, LM_BODY_IID, LM_PRIO,
    LM_SOURCE_LOCATION_IID, MERGE_NONE, PD_CMDLINE, PD_LEGACY_SORT_INDEX, PD_PID,
    PD_PROCESS_LABELS, PD_PROCESS_NAME, P_TRACK_DESCRIPTOR, TD_COUNTER, TD_NAME, TD_PARENT_UUID,
    TD_PROCESS, TD_SIBLING_MERGE_BEHAVIOR, TD_SIBLING_ORDER_RANK, TD_THREAD, TD_UUID, TE_CALLSTACK,
    TE_CATEGORY_IIDS, TE_COUNTER_VALUE, TE_DEBUG_ANNOTATIONS, TE_DOUBLE_COUNTER_VALUE,
    TE_EXTRA_COUNTER_TRACK_UUIDS, TE_EXTRA_COUNTER_VALUES, TE_FLOW_IDS, TE_LOG_MESSAGE, TE_NAME,
    TE_TERMINATING_FLOW_IDS, TE_TRACK_UUID, TE_TYPE, THD_LEGACY_SORT_INDEX, THD_PID,
    THD_THREAD_NAME, THD_TID, TYPE_INSTANT, TYPE_SLICE_BEGIN, TYPE_SLICE_END, UNIT_TIME_NS,
};
use super::intern::{intern_category, intern_location};
use super::{PacketTime, PerfettoEncoder, Seq, UUID_KIND_COUNTER};
use crate::encode::event::{EventView, IdView};
use crate::encode::protowire::{double, int, nested, string, uint};
use crate::encode::{hash_str, mix};
use crate::encode::{Context, OpenScope};
use crate::record::args::{ArgReader, ArgValue};
use crate::record::callsite::Callsite;
use crate::record::event::{op, LogLevel};
use crate::record::layout::Record;
use std::collections::HashMap;

const UUID_KIND_THREAD_TIME: u64 = 3;
const UUID_KIND_ASYNC_ID: u64 = 4;
const UUID_KIND_TRACK: u64 = 5;
const UUID_MASK: u64 = (1 << 63) - 1;

/// Per-sequence state of the typed API's events.
#[derive(Default)]
pub(super) struct SeqExt {
    /// Flow ids that end in the next slice to begin on the thread (`f`).
    next_flows: Vec<u64>,
    /// `thread_sort_index`.
    sort_index: Option<i32>,
    /// Interned log message bodies (cleared with the interning).
    log_bodies: HashMap<String, u32>,
    next_body_iid: u32,
}

impl SeqExt {
    /// No flow waits for the next slice to begin.
    #[inline]
    pub(super) fn no_flows_waiting(&self) -> bool {
        self.next_flows.is_empty()
    }

    pub(super) fn clear_interning(&mut self) {
        self.log_bodies.clear();
        self.next_body_iid = 1;
    }
}

/// Process metadata set at run time (it overrides the session's).
#[derive(Debug, Clone, Default)]
pub(super) struct ProcMeta {
    name: Option<String>,
    labels: Option<Vec<String>>,
    sort_index: Option<i32>,
}

/// The process track's descriptor, with the run-time metadata.
pub(super) fn process_descriptor_with(buf: &mut Vec<u8>, ctx: &Context<'_>, meta: &ProcMeta) {
    let p = ctx.process;
    let sort = meta.sort_index.or(p.sort_index);
    nested(buf, P_TRACK_DESCRIPTOR, |td| {
        uint(td, TD_UUID, p.uuid);
        nested(td, TD_PROCESS, |pd| {
            int(pd, PD_PID, p.pid as i64);
            for arg in &p.cmdline {
                string(pd, PD_CMDLINE, arg);
            }
            string(pd, PD_PROCESS_NAME, meta.name.as_deref().unwrap_or(&p.name));
            if let Some(i) = sort {
                int(pd, PD_LEGACY_SORT_INDEX, i as i64);
            }
            for l in meta.labels.as_ref().unwrap_or(&p.labels) {
                string(pd, PD_PROCESS_LABELS, l);
            }
        });
        if let Some(i) = sort {
            int(td, TD_SIBLING_ORDER_RANK, i as i64);
        }
    });
}

/// A trace-global flow id for the format's (category, name, id) identity.
fn flow_uuid(cat: &str, name: &str, id: u64) -> u64 {
    mix(hash_str(cat) ^ hash_str(name).rotate_left(21) ^ mix(id)).max(1)
}

/// The track of an async id: per (category, scope, id); process-scoped for
/// `id2.local`, trace-global otherwise (the format's rules for async ids).
fn async_uuid(ctx: &Context<'_>, cat: &str, id: &IdView) -> (u64, Option<u64>) {
    let key =
        hash_str(cat) ^ hash_str(id.scope.as_deref().unwrap_or("")).rotate_left(13) ^ mix(id.value);
    if id.kind == 1 {
        (
            ctx.process.derived_uuid(UUID_KIND_ASYNC_ID, key),
            Some(ctx.process.uuid),
        )
    } else {
        ((mix(key ^ UUID_KIND_ASYNC_ID) & UUID_MASK).max(1), None)
    }
}

impl PerfettoEncoder {
    /// The thread track's descriptor (on `seq`, at its clock position).
    pub(super) fn describe_thread(&mut self, ctx: &Context<'_>, seq: &mut Seq, out: &mut Vec<u8>) {
        let (pid, tid, parent, uuid) = (seq.pid, seq.tid, ctx.process.uuid, seq.track_uuid);
        let sort = seq.ext.sort_index;
        let name = std::mem::take(&mut seq.name);
        self.descriptor_packet(seq, out, |p| {
            nested(p, P_TRACK_DESCRIPTOR, |td| {
                uint(td, TD_UUID, uuid);
                uint(td, TD_PARENT_UUID, parent);
                nested(td, TD_THREAD, |th| {
                    int(th, THD_PID, pid as i64);
                    int(th, THD_TID, tid);
                    if !name.is_empty() {
                        string(th, THD_THREAD_NAME, &name);
                    }
                    if let Some(i) = sort {
                        int(th, THD_LEGACY_SORT_INDEX, i as i64);
                    }
                });
                if let Some(i) = sort {
                    int(td, TD_SIBLING_ORDER_RANK, i as i64);
                }
            });
        });
        seq.name = name;
    }

    /// EVENT, BEGIN_TT and END_TT records.
    pub(super) fn phase_record(
        &mut self,
        ctx: &mut Context<'_>,
        seq: &mut Seq,
        ts: u64,
        _raw_ns: u64,
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
                let Some(cs) = ctx.sites.get(site) else {
                    return;
                };
                self.ensure_valid(ctx, seq, ts, out);
                self.open(seq, depth, site, ts, out);
                let tt = self.thread_time_track(ctx, seq, out);
                self.stats.events += 1;
                let delta = self.advance(seq, ts);
                self.fill_event(seq, TYPE_SLICE_BEGIN, None, Some(cs), args);
                extra_counter(&mut self.te, tt, tts);
                self.next_flows(seq);
                self.emit(seq, delta, out);
            }
            Record::EndTt { depth, tts, .. } => {
                self.close(ctx, seq, depth, ts, Some(tts), None, out)
            }
            Record::Event {
                site, op, fields, ..
            } => {
                let v = EventView::decode(fields);
                self.event_record(ctx, seq, ts, site, op, &v, out);
            }
            _ => {}
        }
    }

    /// Pushes a slice on the thread's stack; ends orphaned by it are closed.
    fn open(&mut self, seq: &mut Seq, depth: u32, site: u32, ts: u64, out: &mut Vec<u8>) {
        for orphan in seq.stack.begin(OpenScope {
            depth,
            site,
            ts_ns: ts,
            args: Vec::new(),
        }) {
            self.end_orphan(seq, ts, orphan, out);
        }
    }

    /// Pops a slice and writes its SLICE_END (thread time, end args, end
    /// stack, and the flows the `tracing` layer bound to it).
    #[allow(clippy::too_many_arguments)]
    fn close(
        &mut self,
        ctx: &mut Context<'_>,
        seq: &mut Seq,
        depth: u32,
        ts: u64,
        tts: Option<u64>,
        end: Option<&EventView<'_>>,
        out: &mut Vec<u8>,
    ) {
        if !self.pop_scope(ctx, seq, depth, ts, out) {
            return;
        }
        let tt = match tts {
            Some(_) => self.thread_time_track(ctx, seq, out),
            None => 0,
        };
        self.stats.events += 1;
        let delta = self.advance(seq, ts);
        self.te.clear();
        self.interned.clear();
        uint(&mut self.te, TE_TYPE, TYPE_SLICE_END);
        if let Some(v) = end {
            dict_annotations(&mut self.te, v.args);
            callstack(&mut self.te, v.stack_names(true));
        }
        if let Some(t) = tts {
            extra_counter(&mut self.te, tt, t);
        }
        for id in seq.flows.drain(..) {
            let id = crate::record::layout::scoped_flow(id, ctx.process.uuid);
            super::super::protowire::fixed64(&mut self.te, TE_FLOW_IDS, id);
        }
        self.emit(seq, delta, out);
    }

    /// Terminating flow ids of `f` events waiting for this slice begin.
    pub(super) fn next_flows(&mut self, seq: &mut Seq) {
        for id in seq.ext.next_flows.drain(..) {
            super::super::protowire::fixed64(&mut self.te, TE_TERMINATING_FLOW_IDS, id);
        }
    }

    /// The thread-time counter track of this thread, described on first use.
    fn thread_time_track(&mut self, ctx: &Context<'_>, seq: &mut Seq, out: &mut Vec<u8>) -> u64 {
        let uuid = ctx
            .process
            .derived_uuid(UUID_KIND_THREAD_TIME, seq.tid as u64);
        if seq.described.insert(uuid) {
            let parent = seq.track_uuid;
            self.descriptor_packet(seq, out, |p| {
                nested(p, P_TRACK_DESCRIPTOR, |td| {
                    uint(td, TD_UUID, uuid);
                    uint(td, TD_PARENT_UUID, parent);
                    nested(td, TD_COUNTER, |c| {
                        uint(c, CD_TYPE, COUNTER_THREAD_TIME_NS);
                        uint(c, CD_UNIT, UNIT_TIME_NS);
                    });
                });
            });
        }
        uuid
    }

    /// A process counter track named `name`, described on first use.
    fn named_counter_track(
        &mut self,
        ctx: &Context<'_>,
        seq: &mut Seq,
        name: &str,
        unit: Option<u64>,
        unit_name: Option<&str>,
        out: &mut Vec<u8>,
    ) -> u64 {
        let uuid = ctx.process.derived_uuid(UUID_KIND_COUNTER, hash_str(name));
        if seq.described.insert(uuid) {
            let parent = ctx.process.uuid;
            self.descriptor_packet(seq, out, |p| {
                nested(p, P_TRACK_DESCRIPTOR, |td| {
                    uint(td, TD_UUID, uuid);
                    string(td, TD_NAME, name);
                    uint(td, TD_PARENT_UUID, parent);
                    nested(td, TD_COUNTER, |c| match (unit, unit_name) {
                        (Some(u), _) if u != 0 => uint(c, CD_UNIT, u),
                        (_, Some(n)) => string(c, CD_UNIT_NAME, n),
                        _ => {}
                    });
                });
            });
        }
        uuid
    }

    /// A custom track and its ancestors, described on first use on this
    /// sequence: uuids from the process and the path (the same on every
    /// sequence), never merged with same-named siblings.
    fn custom_track(
        &mut self,
        ctx: &Context<'_>,
        seq: &mut Seq,
        path: &[String],
        out: &mut Vec<u8>,
    ) -> u64 {
        let mut parent = ctx.process.uuid;
        for i in 0..path.len() {
            let key = crate::encode::track_key(&path[..=i]);
            let uuid = ctx.process.derived_uuid(UUID_KIND_TRACK, key);
            if seq.described.insert(uuid) {
                let name = &path[i];
                self.descriptor_packet(seq, out, |p| {
                    nested(p, P_TRACK_DESCRIPTOR, |td| {
                        uint(td, TD_UUID, uuid);
                        string(td, TD_NAME, name);
                        uint(td, TD_PARENT_UUID, parent);
                        uint(td, TD_SIBLING_MERGE_BEHAVIOR, MERGE_NONE);
                    });
                });
            }
            parent = uuid;
        }
        parent
    }

    /// The track of an async id, described on first use on this sequence.
    fn async_id_track(
        &mut self,
        ctx: &Context<'_>,
        seq: &mut Seq,
        cat: &str,
        name: &str,
        id: &IdView,
        out: &mut Vec<u8>,
    ) -> u64 {
        let (uuid, parent) = async_uuid(ctx, cat, id);
        if seq.described.len() > 4096 {
            seq.described.clear(); // re-describing is harmless; keep memory bounded
        }
        if seq.described.insert(uuid) {
            self.descriptor_packet(seq, out, |p| {
                nested(p, P_TRACK_DESCRIPTOR, |td| {
                    uint(td, TD_UUID, uuid);
                    string(td, TD_NAME, name);
                    if let Some(parent) = parent {
                        uint(td, TD_PARENT_UUID, parent);
                    }
                });
            });
        }
        uuid
    }

    /// Fills `te` with a typed-API event: type, track, category, name, args,
    /// stack.
    /// A slice's begin or end, or an instant (`ty`), of the typed API on
    /// the track `uuid` (an async id's or a custom one), at `ts`.
    #[allow(clippy::too_many_arguments)]
    fn on_track(
        &mut self,
        seq: &mut Seq,
        ts: u64,
        ty: u64,
        uuid: u64,
        cs: Option<&'static Callsite>,
        v: &EventView<'_>,
        out: &mut Vec<u8>,
    ) {
        self.stats.events += 1;
        let delta = self.advance(seq, ts);
        if ty == TYPE_SLICE_END {
            // No name or category on an end: readers would match on them.
            self.te.clear();
            self.interned.clear();
            uint(&mut self.te, TE_TYPE, TYPE_SLICE_END);
            uint(&mut self.te, TE_TRACK_UUID, uuid);
            dict_annotations(&mut self.te, v.args);
        } else {
            self.fill_dynamic(seq, ty, Some(uuid), cs, v);
        }
        self.emit(seq, delta, out);
    }

    fn fill_dynamic(
        &mut self,
        seq: &mut Seq,
        ty: u64,
        track: Option<u64>,
        cs: Option<&'static Callsite>,
        v: &EventView<'_>,
    ) {
        self.te.clear();
        self.interned.clear();
        if let Some(cs) = cs {
            let cat = intern_category(seq, cs, &mut self.interned);
            uint(&mut self.te, TE_CATEGORY_IIDS, cat as u64);
        }
        uint(&mut self.te, TE_TYPE, ty);
        if let Some(uuid) = track {
            uint(&mut self.te, TE_TRACK_UUID, uuid);
        }
        if let Some(name) = &v.name {
            string(&mut self.te, TE_NAME, name);
        }
        dict_annotations(&mut self.te, v.args);
    }

    #[allow(clippy::too_many_arguments)]
    fn event_record(
        &mut self,
        ctx: &mut Context<'_>,
        seq: &mut Seq,
        ts: u64,
        site: u32,
        op: u8,
        v: &EventView<'_>,
        out: &mut Vec<u8>,
    ) {
        let cs = ctx.sites.get(site);
        match op {
            op::SCOPE_BEGIN => {
                let Some(depth) = v.depth else { return };
                self.ensure_valid(ctx, seq, ts, out);
                self.open(seq, depth, site, ts, out);
                let tt = match v.tts {
                    Some(_) => self.thread_time_track(ctx, seq, out),
                    None => 0,
                };
                self.stats.events += 1;
                let delta = self.advance(seq, ts);
                self.fill_dynamic(seq, TYPE_SLICE_BEGIN, None, cs, v);
                callstack(&mut self.te, v.stack_names(false));
                if let Some(t) = v.tts {
                    extra_counter(&mut self.te, tt, t);
                }
                self.next_flows(seq);
                self.emit(seq, delta, out);
            }
            op::SCOPE_END => {
                let Some(depth) = v.depth else { return };
                self.close(ctx, seq, depth, ts, v.tts, Some(v), out);
            }
            op::COMPLETE => {
                self.ensure_valid(ctx, seq, ts, out);
                let start = v.ts.unwrap_or(ts);
                let end = start + v.dur.unwrap_or(0);
                let tt = match v.tts {
                    Some(_) => self.thread_time_track(ctx, seq, out),
                    None => 0,
                };
                self.stats.events += 1;
                self.fill_dynamic(seq, TYPE_SLICE_BEGIN, None, cs, v);
                callstack(&mut self.te, v.stack_names(false));
                if let Some(t) = v.tts {
                    extra_counter(&mut self.te, tt, t);
                }
                self.next_flows(seq);
                self.emit_at(seq, PacketTime::Boottime(start), out);
                self.te.clear();
                self.interned.clear();
                uint(&mut self.te, TE_TYPE, TYPE_SLICE_END);
                callstack(&mut self.te, v.stack_names(true));
                if let Some(t) = v.tts {
                    extra_counter(&mut self.te, tt, t + v.tdur.unwrap_or(0));
                }
                self.emit_at(seq, PacketTime::Boottime(end), out);
            }
            op::INSTANT | op::MARK => {
                self.ensure_valid(ctx, seq, ts, out);
                let track = match v.instant_scope {
                    1 => Some(ctx.process.uuid),
                    2 => Some(0),
                    _ => None,
                };
                self.stats.events += 1;
                let delta = self.advance(seq, ts);
                self.fill_dynamic(seq, TYPE_INSTANT, track, cs, v);
                if track.is_none() {
                    callstack(&mut self.te, v.stack_names(false));
                }
                self.emit(seq, delta, out);
            }
            op::COUNTER => self.counter_series(ctx, seq, ts, v, out),
            op::ASYNC_BEGIN | op::ASYNC_INSTANT | op::ASYNC_END => {
                let (Some(id), Some(cs)) = (&v.id, cs) else {
                    return;
                };
                self.ensure_valid(ctx, seq, ts, out);
                let name = v.name.as_deref().unwrap_or("");
                let uuid = self.async_id_track(ctx, seq, cs.category, name, id, out);
                let ty = match op {
                    op::ASYNC_BEGIN => TYPE_SLICE_BEGIN,
                    op::ASYNC_END => TYPE_SLICE_END,
                    _ => TYPE_INSTANT,
                };
                self.on_track(seq, ts, ty, uuid, Some(cs), v, out);
            }
            op::TRACK_BEGIN | op::TRACK_END | op::TRACK_INSTANT => {
                let Some(path) = &v.track else { return };
                if path.is_empty() {
                    return;
                }
                self.ensure_valid(ctx, seq, ts, out);
                let uuid = self.custom_track(ctx, seq, path, out);
                let ty = match op {
                    op::TRACK_BEGIN => TYPE_SLICE_BEGIN,
                    op::TRACK_END => TYPE_SLICE_END,
                    _ => TYPE_INSTANT,
                };
                self.on_track(seq, ts, ty, uuid, cs, v, out);
            }
            op::FLOW_START | op::FLOW_STEP | op::FLOW_END => {
                let (Some(id), Some(cs)) = (&v.id, cs) else {
                    return;
                };
                let name = v.name.as_deref().unwrap_or("");
                let fid = flow_uuid(cs.category, name, id.value);
                if op == op::FLOW_END && !v.bind_enclosing {
                    // Binds to the next slice that begins on this thread.
                    seq.ext.next_flows.push(fid);
                    return;
                }
                self.ensure_valid(ctx, seq, ts, out);
                self.stats.events += 1;
                let delta = self.advance(seq, ts);
                self.fill_dynamic(seq, TYPE_INSTANT, None, Some(cs), v);
                let field = if op == op::FLOW_END {
                    TE_TERMINATING_FLOW_IDS
                } else {
                    TE_FLOW_IDS
                };
                super::super::protowire::fixed64(&mut self.te, field, fid);
                self.emit(seq, delta, out);
            }
            op::THREAD_NAME | op::THREAD_SORT_INDEX => {
                if op == op::THREAD_NAME {
                    seq.name = v.name.clone().unwrap_or_default();
                } else {
                    seq.ext.sort_index = v.sort_index.map(|i| i as i32);
                }
                if seq.valid {
                    self.describe_thread(ctx, seq, out);
                } else {
                    self.ensure_valid(ctx, seq, ts, out); // describes it
                }
            }
            op::PROCESS_NAME | op::PROCESS_LABELS | op::PROCESS_SORT_INDEX => {
                match op {
                    op::PROCESS_NAME => self.proc_meta.name = v.name.clone(),
                    op::PROCESS_LABELS => self.proc_meta.labels = v.labels.clone(),
                    _ => self.proc_meta.sort_index = v.sort_index.map(|i| i as i32),
                }
                let was_valid = seq.valid;
                self.ensure_valid(ctx, seq, ts, out);
                if was_valid {
                    let meta = self.proc_meta.clone();
                    self.descriptor_packet(seq, out, |p| process_descriptor_with(p, ctx, &meta));
                }
            }
            op::LOG => {
                let Some(cs) = cs else { return };
                self.ensure_valid(ctx, seq, ts, out);
                self.stats.events += 1;
                let delta = self.advance(seq, ts);
                self.fill_event(seq, TYPE_INSTANT, None, Some(cs), &[]);
                let loc = intern_location(seq, cs, &mut self.interned);
                let body = v.message.as_deref().unwrap_or("");
                let body_iid = match seq.ext.log_bodies.get(body) {
                    Some(&iid) => iid,
                    None => {
                        let iid = seq.ext.next_body_iid.max(1);
                        seq.ext.next_body_iid = iid + 1;
                        if seq.ext.log_bodies.len() < 4096 {
                            seq.ext.log_bodies.insert(body.to_string(), iid);
                        }
                        nested(&mut self.interned, ID_LOG_MESSAGE_BODY, |e| {
                            uint(e, ENTRY_IID, iid as u64);
                            string(e, LMB_BODY, body);
                        });
                        iid
                    }
                };
                let prio = LogLevel::from_prio(v.level.unwrap_or(4)) as u64;
                nested(&mut self.te, TE_LOG_MESSAGE, |lm| {
                    uint(lm, LM_SOURCE_LOCATION_IID, loc as u64);
                    uint(lm, LM_BODY_IID, body_iid as u64);
                    uint(lm, LM_PRIO, prio);
                });
                self.emit(seq, delta, out);
            }
            // JSON only: samples, objects, memory dumps, clock sync,
            // contexts, linked ids, global samples.
            _ => {}
        }
    }

    /// One COUNTER per series, each on its own process counter track.
    fn counter_series(
        &mut self,
        ctx: &mut Context<'_>,
        seq: &mut Seq,
        ts: u64,
        v: &EventView<'_>,
        out: &mut Vec<u8>,
    ) {
        let Some(words) = v.args else { return };
        let name = v.name.as_deref().unwrap_or("");
        self.ensure_valid(ctx, seq, ts, out);
        let mut r = ArgReader::new(words);
        let ArgValue::Dict(n) = r.next() else { return };
        for _ in 0..n.min(words.len()) {
            let key = r.key();
            let value = r.next();
            let mut track = name.to_string();
            if let Some(id) = v.counter_id {
                track.push_str(&format!(" id: 0x{id:x}"));
            }
            if key != "value" {
                track.push(' ');
                track.push_str(&key);
            }
            let uuid =
                self.named_counter_track(ctx, seq, &track, v.unit, v.unit_name.as_deref(), out);
            match value {
                ArgValue::Int(i) => {
                    self.counter(seq, ts, uuid, |te| int(te, TE_COUNTER_VALUE, i), out)
                }
                ArgValue::Uint(u) => {
                    self.counter(seq, ts, uuid, |te| int(te, TE_COUNTER_VALUE, u as i64), out)
                }
                ArgValue::Double(d) => self.counter(
                    seq,
                    ts,
                    uuid,
                    |te| double(te, TE_DOUBLE_COUNTER_VALUE, d),
                    out,
                ),
                _ => {}
            }
        }
    }
}

/// One thread-time value for the track `uuid` on the event in `te`.
fn extra_counter(te: &mut Vec<u8>, uuid: u64, value: u64) {
    uint(te, TE_EXTRA_COUNTER_TRACK_UUIDS, uuid);
    int(te, TE_EXTRA_COUNTER_VALUES, value as i64);
}

/// Debug annotations from an encoded ARGS dict (names not interned: they
/// come with each event).
fn dict_annotations(te: &mut Vec<u8>, words: Option<&[u64]>) {
    let Some(words) = words else { return };
    let mut r = ArgReader::new(words);
    if let ArgValue::Dict(n) = r.next() {
        for _ in 0..n.min(words.len()) {
            let key = r.key();
            nested(te, TE_DEBUG_ANNOTATIONS, |a| {
                string(a, DA_NAME, &key);
                annotation_value(a, &mut r, 0);
            });
        }
    }
}

/// The event's `callstack`: frames by function name, rootmost first.
fn callstack(te: &mut Vec<u8>, names: Option<Vec<String>>) {
    let Some(names) = names else { return };
    if names.is_empty() {
        return;
    }
    nested(te, TE_CALLSTACK, |cs| {
        for n in &names {
            nested(cs, CALLSTACK_FRAMES, |f| string(f, FRAME_FUNCTION_NAME, n));
        }
    });
}
