//! Perfetto protobuf encoder: a stream of `TracePacket`s framed as field 1 of
//! `Trace`.
//!
//! Each recording thread is one packet sequence. A sequence starts (and
//! restarts after any loss) with a packet that clears incremental state, sets
//! the defaults (incremental clock 64, the thread's track) and carries a
//! ClockSnapshot relating clock 64 to BOOTTIME; then the process and thread
//! track descriptors. Event packets carry a delta timestamp, the
//! NEEDS_INCREMENTAL_STATE flag and interned ids; new interned entries ride in
//! the packet that first uses them. Sequence 1 is the session's own: global
//! clock snapshots (BOOTTIME, MONOTONIC, REALTIME) and the process descriptor.
//!
//! The rooms: `fields` (Perfetto's field numbers and enum values), `intern`
//! (iids and their `InternedData`), `annotations` (call-site arguments as
//! debug annotations), `descriptors` (clock snapshots, a sequence's reset,
//! track descriptors), `fast` (templates of the commonest packets), `typed`
//! (the typed event API's phases); this module holds the sequences' state,
//! the framing of packets and the general path of each record kind.

use super::protowire::{double, int, len_field_len, len_head, nested, string, uint, uint_len};
use super::LOST_EVENT_NAME;
use super::{Batch, Context, EncodeStats, Encoder, IdMap, IdSet, OpenScope, ScopeStack};
use crate::record::callsite::Callsite;
use crate::record::layout::Record;
use crate::record::registry::{ThreadInfo as ThreadRing, SESSION_SEQ};
use crate::sys;
use annotations::{annotations, const_annotations};
use descriptors::global_snapshot;
use fields::{
    BOOTTIME, DA_BOOL, DA_NAME, DA_STRING, DA_UINT, LOSS_BUFFER_FULL, LOSS_OVERWRITE, LOSS_PRESENT,
    P_INTERNED_DATA, P_SEQUENCE_FLAGS, P_SEQUENCE_ID, P_TIMESTAMP, P_TIMESTAMP_CLOCK_ID,
    P_TRACK_DESCRIPTOR, P_TRACK_EVENT, SEQ_NEEDS_INCREMENTAL_STATE, TD_NAME, TD_PARENT_UUID,
    TD_UUID, TE_CATEGORY_IIDS, TE_COUNTER_VALUE, TE_DEBUG_ANNOTATIONS, TE_DOUBLE_COUNTER_VALUE,
    TE_FLOW_IDS, TE_NAME, TE_NAME_IID, TE_SOURCE_LOCATION_IID, TE_TRACK_UUID, TE_TYPE,
    TYPE_COUNTER, TYPE_INSTANT, TYPE_SLICE_BEGIN, TYPE_SLICE_END,
};
use intern::{intern_category, intern_location, intern_name};
pub(crate) use samples::SAMPLES_SEQ;
use std::collections::HashMap;

mod annotations;
mod async_tracks;
mod descriptors;
mod fast;
mod fields;
mod intern;
// CPU stack samples (`sampling`).
mod samples;
mod tracing_slices;
mod typed;

/// Async ids and counter sites get tracks of their own: uuid derivation keys.
const UUID_KIND_COUNTER: u64 = 1;
const UUID_KIND_ASYNC: u64 = 2;

/// Per-sequence state: interning tables and the delta clock.
struct Seq {
    seq_id: u32,
    track_uuid: u64,
    pid: i32,
    tid: i64,
    name: String,
    /// A packet was ever written (first_packet_on_sequence is set once).
    started: bool,
    /// Incremental state is valid; false forces a reset before the next packet.
    valid: bool,
    /// previous_packet_dropped bits for the next reset.
    loss_flags: u32,
    /// Events lost and not yet marked in the trace.
    lost_unreported: u64,
    last_ns: u64,
    name_iids: Vec<u32>,
    /// Category iid by call site id (0: not yet): saves hashing the
    /// category name on every event.
    site_cat_iids: Vec<u32>,
    loc_iids: Vec<u32>,
    /// Where each call site's argument-name iids start in `site_ann_iids`
    /// (plus one; 0: not placed yet): the names are interned by (call site,
    /// argument index), ids that already exist, not by hashing the names.
    site_ann_start: Vec<u32>,
    /// Argument-name iids (0: not interned since the last reset).
    site_ann_iids: Vec<u32>,
    /// First use of a name since the reset (shared by the call sites that
    /// use it): consulted once per (call site, argument) and reset.
    cat_iids: HashMap<&'static str, u32>,
    ann_iids: HashMap<&'static str, u32>,
    next_name_iid: u32,
    next_cat_iid: u32,
    next_ann_iid: u32,
    next_loc_iid: u32,
    /// Track uuids (counter, async) described since the last reset.
    described: IdSet<u64>,
    /// Pooled async tracks (`async_tracks`) described since the last
    /// reset: a bit by track number.
    described_pooled: Vec<u64>,
    stack: ScopeStack,
    /// Flow ids (FLOW records) waiting for the next slice end to bind to.
    flows: Vec<u64>,
    /// State of the typed event API's events (`typed`).
    ext: typed::SeqExt,
    /// Packet templates of plain begins by call site id, and of plain ends
    /// (`fast`); forgotten with the interning.
    begin_tmpl: Vec<fast::Tmpl>,
    instant_tmpl: Vec<fast::Tmpl>,
    end_tmpl: fast::Tmpl,
}

impl Seq {
    fn new(t: &ThreadRing, track_uuid: u64) -> Seq {
        Seq {
            seq_id: t.seq_id,
            track_uuid,
            pid: t.pid,
            tid: t.tid,
            name: t.name.clone(),
            started: false,
            valid: false,
            loss_flags: 0,
            lost_unreported: 0,
            last_ns: 0,
            name_iids: Vec::new(),
            site_cat_iids: Vec::new(),
            loc_iids: Vec::new(),
            site_ann_start: Vec::new(),
            site_ann_iids: Vec::new(),
            cat_iids: HashMap::new(),
            ann_iids: HashMap::new(),
            next_name_iid: 1,
            next_cat_iid: 1,
            next_ann_iid: 1,
            next_loc_iid: 1,
            described: IdSet::default(),
            described_pooled: Vec::new(),
            stack: ScopeStack::default(),
            flows: Vec::new(),
            ext: typed::SeqExt::default(),
            begin_tmpl: Vec::new(),
            instant_tmpl: Vec::new(),
            end_tmpl: fast::Tmpl::default(),
        }
    }

    /// Whether async track `t` was described since the last reset.
    #[inline]
    fn is_described(&self, t: async_tracks::Track) -> bool {
        match t.n {
            0 => self.described.contains(&t.uuid),
            n => self
                .described_pooled
                .get(n as usize / 64)
                .is_some_and(|w| w >> (n % 64) & 1 == 1),
        }
    }

    /// Marks async track `t` described; whether it was not yet.
    fn mark_described(&mut self, t: async_tracks::Track) -> bool {
        if t.n == 0 {
            if self.described.len() > 4096 {
                self.described.clear(); // re-describing is harmless; keep memory bounded
            }
            return self.described.insert(t.uuid);
        }
        let (i, bit) = (t.n as usize / 64, 1 << (t.n % 64));
        if self.described_pooled.len() <= i {
            self.described_pooled.resize(i + 1, 0);
        }
        let new = self.described_pooled[i] & bit == 0;
        self.described_pooled[i] |= bit;
        new
    }

    fn clear_interning(&mut self) {
        self.name_iids.iter_mut().for_each(|v| *v = 0);
        self.site_cat_iids.iter_mut().for_each(|v| *v = 0);
        self.loc_iids.iter_mut().for_each(|v| *v = 0);
        self.site_ann_iids.iter_mut().for_each(|v| *v = 0);
        self.cat_iids.clear();
        self.ann_iids.clear();
        self.next_name_iid = 1;
        self.next_cat_iid = 1;
        self.next_ann_iid = 1;
        self.next_loc_iid = 1;
        self.described.clear();
        self.described_pooled.iter_mut().for_each(|w| *w = 0);
        self.ext.clear_interning();
        self.begin_tmpl.clear();
        self.instant_tmpl.clear();
    }
}

/// Where a packet sits in time.
#[derive(Debug, Clone, Copy)]
enum PacketTime {
    /// Nanoseconds after the previous packet, on the sequence clock.
    Delta(u64),
    /// Absolute BOOTTIME nanoseconds (explicit `timestamp_clock_id`).
    Boottime(u64),
}

impl PacketTime {
    /// Bytes [`Self::write`] writes.
    #[inline]
    fn len(self) -> usize {
        match self {
            PacketTime::Delta(d) => uint_len(P_TIMESTAMP, d),
            PacketTime::Boottime(ns) => {
                uint_len(P_TIMESTAMP, ns) + uint_len(P_TIMESTAMP_CLOCK_ID, BOOTTIME)
            }
        }
    }

    #[inline]
    fn write(self, p: &mut Vec<u8>) {
        match self {
            PacketTime::Delta(d) => uint(p, P_TIMESTAMP, d),
            PacketTime::Boottime(ns) => {
                uint(p, P_TIMESTAMP, ns);
                uint(p, P_TIMESTAMP_CLOCK_ID, BOOTTIME);
            }
        }
    }
}

/// Options of the Perfetto output.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PerfettoOptions {
    /// Intern and reference each call site's file:line on its events.
    pub(crate) source_locations: bool,
    /// Leave the NEEDS_INCREMENTAL_STATE flag off plain event packets.
    pub(crate) omit_needs_flag: bool,
}

pub(crate) struct PerfettoEncoder {
    opts: PerfettoOptions,
    /// Boxed: a batch takes its sequence out and puts it back, moving a
    /// pointer rather than the whole state.
    seqs: IdMap<u32, Box<Seq>>,
    stats: EncodeStats,
    /// Scratch buffers reused for every packet.
    te: Vec<u8>,
    interned: Vec<u8>,
    /// Process metadata set at run time (typed event API).
    proc_meta: typed::ProcMeta,
    /// The CPU samples' sequence (`samples`).
    samples: samples::SampleSeq,
    /// The tracks of async ranges, reused (`async_tracks`).
    async_tracks: async_tracks::AsyncTracks,
}

impl PerfettoEncoder {
    /// Restarts every sequence (CLEARED packet, defaults, descriptors) at its
    /// next packet, as a tracing service's ClearIncrementalState asks.
    pub(crate) fn clear_incremental_state(&mut self) {
        for seq in self.seqs.values_mut() {
            seq.valid = false;
        }
        self.samples.restart();
    }

    pub(crate) fn new(opts: PerfettoOptions) -> Self {
        PerfettoEncoder {
            opts,
            seqs: IdMap::default(),
            stats: EncodeStats::default(),
            te: Vec::new(),
            interned: Vec::new(),
            proc_meta: typed::ProcMeta::default(),
            samples: Default::default(),
            async_tracks: Default::default(),
        }
    }
}

impl Encoder for PerfettoEncoder {
    fn header(&mut self, ctx: &mut Context<'_>, out: &mut Vec<u8>) {
        global_snapshot(out);
        nested(out, 1, |p| {
            uint(p, P_TIMESTAMP, sys::boottime_ns());
            uint(p, P_SEQUENCE_ID, SESSION_SEQ as u64);
            typed::process_descriptor_with(p, ctx, &self.proc_meta);
        });
    }

    fn batch(&mut self, ctx: &mut Context<'_>, batch: &Batch<'_>, out: &mut Vec<u8>) {
        let t = batch.thread;
        let track_uuid = ctx.process.thread_uuid(t.tid);
        let mut seq = self
            .seqs
            .remove(&t.seq_id)
            .unwrap_or_else(|| Box::new(Seq::new(t, track_uuid)));
        if batch.overwritten > 0 {
            seq.valid = false;
            seq.loss_flags |= LOSS_PRESENT | LOSS_OVERWRITE;
            seq.lost_unreported += batch.overwritten;
        }
        self.records(ctx, &mut seq, batch.words, out);
        self.seqs.insert(t.seq_id, seq);
    }

    fn thread_done(&mut self, ctx: &mut Context<'_>, seq_id: u32, out: &mut Vec<u8>) {
        // Slices the thread left open stay open ("did not end"), as they were;
        // losses not yet marked are marked now.
        if let Some(mut seq) = self.seqs.remove(&seq_id) {
            if seq.lost_unreported > 0 {
                let ts = ctx.cal.now_ns().max(seq.last_ns);
                self.ensure_valid(ctx, &mut seq, ts, out);
            }
        }
    }

    fn note_lost(&mut self, ctx: &mut Context<'_>, t: &ThreadRing, count: u64, _out: &mut Vec<u8>) {
        // Marked (with a sequence reset) before the thread's next packet, or at finish.
        let track_uuid = ctx.process.thread_uuid(t.tid);
        let seq = self
            .seqs
            .entry(t.seq_id)
            .or_insert_with(|| Box::new(Seq::new(t, track_uuid)));
        seq.valid = false;
        seq.loss_flags |= LOSS_PRESENT
            | if t.is_overwrite() {
                LOSS_OVERWRITE
            } else {
                LOSS_BUFFER_FULL
            };
        seq.lost_unreported += count;
    }

    fn note_lost_process(
        &mut self,
        ctx: &mut Context<'_>,
        now_ns: u64,
        count: u64,
        reason: &str,
        out: &mut Vec<u8>,
    ) {
        // On the session's sequence, which uses no incremental state: an
        // absolute BOOTTIME timestamp, the process track by uuid, names
        // inline.
        self.stats.lost_reported += count;
        nested(out, 1, |p| {
            uint(p, P_TIMESTAMP, now_ns);
            uint(p, P_SEQUENCE_ID, SESSION_SEQ as u64);
            nested(p, P_TRACK_EVENT, |te| {
                uint(te, TE_TYPE, TYPE_INSTANT);
                uint(te, TE_TRACK_UUID, ctx.process.uuid);
                string(te, TE_NAME, LOST_EVENT_NAME);
                nested(te, TE_DEBUG_ANNOTATIONS, |a| {
                    string(a, DA_NAME, "lost_events");
                    uint(a, DA_UINT, count);
                });
                nested(te, TE_DEBUG_ANNOTATIONS, |a| {
                    string(a, DA_NAME, "reason");
                    string(a, DA_STRING, reason);
                });
            });
        });
    }

    fn samples(
        &mut self,
        ctx: &mut Context<'_>,
        view: &crate::sampling::SampleView<'_>,
        out: &mut Vec<u8>,
    ) {
        self.samples.write(ctx, view, out);
    }

    fn tick(&mut self, _ctx: &mut Context<'_>, out: &mut Vec<u8>) {
        global_snapshot(out);
    }

    fn finish(&mut self, ctx: &mut Context<'_>, now_ns: u64, out: &mut Vec<u8>) {
        // Losses counted after a thread's last record still get their marker.
        let seq_ids: Vec<u32> = self.seqs.keys().copied().collect();
        for id in seq_ids {
            let mut seq = self.seqs.remove(&id).unwrap();
            if seq.lost_unreported > 0 {
                let ts = now_ns.max(seq.last_ns);
                self.ensure_valid(ctx, &mut seq, ts, out);
            }
            self.seqs.insert(id, seq);
        }
        global_snapshot(out);
    }

    fn stats(&self) -> EncodeStats {
        self.stats
    }
}

impl PerfettoEncoder {
    fn record(&mut self, ctx: &mut Context<'_>, seq: &mut Seq, rec: Record<'_>, out: &mut Vec<u8>) {
        let raw_ns = ctx.cal.to_ns(rec.ts());
        let ts = raw_ns.max(seq.last_ns);
        match rec {
            Record::Lost { count, .. } => {
                seq.valid = false;
                seq.loss_flags |= LOSS_PRESENT | LOSS_BUFFER_FULL;
                seq.lost_unreported += count;
            }
            Record::Begin {
                site, depth, args, ..
            } => {
                let Some(cs) = ctx.sites.get(site) else {
                    return;
                };
                self.ensure_valid(ctx, seq, ts, out);
                for orphan in seq.stack.begin(OpenScope {
                    depth,
                    site,
                    ts_ns: ts,
                    args: Vec::new(),
                }) {
                    self.end_orphan(seq, ts, orphan, out);
                }
                self.event(seq, ts, TYPE_SLICE_BEGIN, None, Some(cs), args, out);
                self.note_begin(seq, cs);
            }
            Record::End { depth, .. } => {
                if self.pop_scope(ctx, seq, depth, ts, out) {
                    self.end_event(ctx, seq, ts, None, None, out);
                }
            }
            Record::Instant { site, args, .. } => {
                let Some(cs) = ctx.sites.get(site) else {
                    return;
                };
                self.ensure_valid(ctx, seq, ts, out);
                self.event(seq, ts, TYPE_INSTANT, None, Some(cs), args, out);
                self.note_instant(seq, cs);
            }
            Record::CounterI64 { site, value, .. } => {
                let Some(cs) = ctx.sites.get(site) else {
                    return;
                };
                self.ensure_valid(ctx, seq, ts, out);
                let uuid = self.counter_track(ctx, seq, cs, ts, out);
                self.counter(seq, ts, uuid, |te| int(te, TE_COUNTER_VALUE, value), out);
            }
            Record::CounterF64 { site, value, .. } => {
                let Some(cs) = ctx.sites.get(site) else {
                    return;
                };
                self.ensure_valid(ctx, seq, ts, out);
                let uuid = self.counter_track(ctx, seq, cs, ts, out);
                self.counter(
                    seq,
                    ts,
                    uuid,
                    |te| double(te, TE_DOUBLE_COUNTER_VALUE, value),
                    out,
                );
            }
            Record::AsyncBegin { site, id, args, .. } => {
                let Some(cs) = ctx.sites.get(site) else {
                    return;
                };
                self.ensure_valid(ctx, seq, ts, out);
                let track =
                    self.async_tracks
                        .begin(ctx.process, seq.seq_id, site, cs.name, id, raw_ns);
                if raw_ns < seq.last_ns {
                    // A range found to be async after it began (tracing layer).
                    self.async_begin_at(ctx, seq, cs, track, raw_ns, args, out);
                    return;
                }
                self.async_track(ctx, seq, cs, track, out);
                self.event(
                    seq,
                    ts,
                    TYPE_SLICE_BEGIN,
                    Some(track.uuid),
                    Some(cs),
                    args,
                    out,
                );
                // Its strings are interned now: later begins of the site,
                // on the thread's track or on one of their own, take the
                // fast path.
                self.note_begin(seq, cs);
            }
            Record::AsyncEnd { site, id, args, .. } => {
                let Some(cs) = ctx.sites.get(site) else {
                    return;
                };
                self.ensure_valid(ctx, seq, ts, out);
                let track = self.async_tracks.end(ctx.process, seq.seq_id, id, ts);
                self.async_track(ctx, seq, cs, track, out);
                self.end_event(ctx, seq, ts, Some(track.uuid), Some((cs, args)), out);
            }
            Record::EndArgs {
                site, depth, args, ..
            } => {
                let m = seq.stack.end(depth);
                if m.matched.is_none() && m.orphaned.is_empty() {
                    self.stats.unmatched_ends += 1;
                    return;
                }
                self.ensure_valid(ctx, seq, ts, out);
                for orphan in m.orphaned {
                    self.end_orphan(seq, ts, orphan, out);
                }
                if m.matched.is_some() {
                    let ann = ctx.sites.get(site).map(|cs| (cs, args));
                    self.end_event(ctx, seq, ts, None, ann, out);
                } else {
                    self.stats.unmatched_ends += 1;
                }
            }
            Record::Flow { ids, .. } => seq.flows.extend_from_slice(ids),
            Record::Event { .. } | Record::BeginTt { .. } | Record::EndTt { .. } => {
                self.phase_record(ctx, seq, ts, raw_ns, rec, out)
            }
        }
    }

    /// Closes a slice whose end record was lost, at `ts`, saying so in an arg.
    fn end_orphan(&mut self, seq: &mut Seq, ts: u64, _orphan: OpenScope, out: &mut Vec<u8>) {
        self.stats.ends_lost += 1;
        let delta = self.advance(seq, ts);
        self.te.clear();
        self.interned.clear();
        uint(&mut self.te, TE_TYPE, TYPE_SLICE_END);
        nested(&mut self.te, TE_DEBUG_ANNOTATIONS, |a| {
            string(a, DA_NAME, "ringtrace.end_lost");
            uint(a, DA_BOOL, 1);
        });
        self.emit(seq, delta, out);
    }

    /// Resets the sequence if needed (first packet, or after a loss) and marks
    /// any loss with an instant carrying the count.
    fn ensure_valid(&mut self, ctx: &mut Context<'_>, seq: &mut Seq, ts: u64, out: &mut Vec<u8>) {
        if seq.valid {
            return;
        }
        self.reset(ctx, seq, ts, out);
        if seq.lost_unreported > 0 {
            let count = std::mem::take(&mut seq.lost_unreported);
            self.stats.lost_reported += count;
            let delta = self.advance(seq, ts);
            self.te.clear();
            self.interned.clear();
            uint(&mut self.te, TE_TYPE, TYPE_INSTANT);
            string(&mut self.te, TE_NAME, LOST_EVENT_NAME);
            nested(&mut self.te, TE_DEBUG_ANNOTATIONS, |a| {
                string(a, DA_NAME, "lost_events");
                uint(a, DA_UINT, count);
            });
            self.emit(seq, delta, out);
        }
    }

    /// Pops the scope an end at `depth` closes, before its end is
    /// written: the scopes it orphaned get theirs (the sequence made valid
    /// first); false (counted) if its begin was not kept, so no end is due.
    fn pop_scope(
        &mut self,
        ctx: &mut Context<'_>,
        seq: &mut Seq,
        depth: u32,
        ts: u64,
        out: &mut Vec<u8>,
    ) -> bool {
        let m = seq.stack.end(depth);
        if m.matched.is_none() && m.orphaned.is_empty() {
            self.stats.unmatched_ends += 1;
            return false;
        }
        self.ensure_valid(ctx, seq, ts, out);
        for orphan in m.orphaned {
            self.end_orphan(seq, ts, orphan, out);
        }
        if m.matched.is_none() {
            self.stats.unmatched_ends += 1;
            return false;
        }
        true
    }

    /// Moves the sequence clock to `ts`; returns the delta to write.
    #[inline]
    fn advance(&self, seq: &mut Seq, ts: u64) -> u64 {
        let delta = ts - seq.last_ns;
        seq.last_ns = ts;
        delta
    }

    /// Writes a packet with the current `te` and `interned` scratch contents,
    /// `delta` after the previous one on the sequence clock.
    #[inline]
    fn emit(&mut self, seq: &Seq, delta: u64, out: &mut Vec<u8>) {
        self.emit_at(seq, PacketTime::Delta(delta), out);
    }

    /// As [`Self::emit`], at `time` (delta on the sequence clock, or an
    /// absolute BOOTTIME timestamp for events older than the sequence clock,
    /// which only moves forward).
    ///
    /// Sized first (every part is known), so the packet is written once,
    /// front to back, with nothing moved or regrown.
    #[inline]
    fn emit_at(&mut self, seq: &Seq, time: PacketTime, out: &mut Vec<u8>) {
        let (te, interned) = (&self.te, &self.interned);
        let flag = !self.opts.omit_needs_flag;
        let seq_id = seq.seq_id as u64;
        let mut len = time.len() + uint_len(P_SEQUENCE_ID, seq_id);
        if flag {
            len += uint_len(P_SEQUENCE_FLAGS, SEQ_NEEDS_INCREMENTAL_STATE);
        }
        if !interned.is_empty() {
            len += len_field_len(P_INTERNED_DATA, interned.len());
        }
        len += len_field_len(P_TRACK_EVENT, te.len());
        out.reserve(len + 4);
        len_head(out, 1, len);
        time.write(out);
        if flag && seq_id < 0x80 {
            // Sequence id and flags: the same bytes in every packet.
            out.extend_from_slice(&[
                (P_SEQUENCE_ID << 3) as u8,
                seq_id as u8,
                (P_SEQUENCE_FLAGS << 3) as u8,
                SEQ_NEEDS_INCREMENTAL_STATE as u8,
            ]);
        } else {
            uint(out, P_SEQUENCE_ID, seq_id);
            if flag {
                uint(out, P_SEQUENCE_FLAGS, SEQ_NEEDS_INCREMENTAL_STATE);
            }
        }
        if !interned.is_empty() {
            len_head(out, P_INTERNED_DATA, interned.len());
            out.extend_from_slice(interned);
        }
        len_head(out, P_TRACK_EVENT, te.len());
        out.extend_from_slice(te);
    }

    /// A slice begin/end or instant event on the thread track (or `track`).
    #[allow(clippy::too_many_arguments)]
    fn event(
        &mut self,
        seq: &mut Seq,
        ts: u64,
        ty: u64,
        track: Option<u64>,
        site: Option<&'static Callsite>,
        args: &[u64],
        out: &mut Vec<u8>,
    ) {
        self.stats.events += 1;
        let delta = self.advance(seq, ts);
        self.fill_event(seq, ty, track, site, args);
        if ty == TYPE_SLICE_BEGIN && track.is_none() {
            self.next_flows(seq); // flows (`f`) waiting for this thread's next slice
        }
        self.emit(seq, delta, out);
    }

    /// Fills the `te` and `interned` scratch buffers with an event.
    fn fill_event(
        &mut self,
        seq: &mut Seq,
        ty: u64,
        track: Option<u64>,
        site: Option<&'static Callsite>,
        args: &[u64],
    ) {
        self.te.clear();
        self.interned.clear();
        if let Some(cs) = site {
            let cat = intern_category(seq, cs, &mut self.interned);
            uint(&mut self.te, TE_CATEGORY_IIDS, cat as u64);
        }
        uint(&mut self.te, TE_TYPE, ty);
        if let Some(cs) = site {
            let name = intern_name(seq, cs, &mut self.interned);
            uint(&mut self.te, TE_NAME_IID, name as u64);
            if self.opts.source_locations {
                let loc = intern_location(seq, cs, &mut self.interned);
                uint(&mut self.te, TE_SOURCE_LOCATION_IID, loc as u64);
            }
            if !cs.const_args.is_empty() {
                const_annotations(seq, cs, &mut self.te, &mut self.interned);
            }
        }
        if let Some(cs) = site {
            if !cs.arg_names.is_empty() {
                annotations(seq, cs, args, &mut self.te, &mut self.interned);
            }
        }
        // Last: a begin on a track of its own is then the thread's begin
        // (the fast path's template and arguments) with the track added.
        if let Some(uuid) = track {
            uint(&mut self.te, TE_TRACK_UUID, uuid);
        }
    }

    fn counter(
        &mut self,
        seq: &mut Seq,
        ts: u64,
        uuid: u64,
        value: impl FnOnce(&mut Vec<u8>),
        out: &mut Vec<u8>,
    ) {
        self.stats.events += 1;
        let delta = self.advance(seq, ts);
        self.te.clear();
        self.interned.clear();
        uint(&mut self.te, TE_TYPE, TYPE_COUNTER);
        uint(&mut self.te, TE_TRACK_UUID, uuid);
        value(&mut self.te);
        self.emit(seq, delta, out);
    }
}
