//! What the `tracing` layer's records need beyond plain slices: slice ends
//! carrying args and flows, and ranges that begin in the past.

use super::*;

/// Slice ends with args and flows, and ranges that begin in the past (what
/// the `tracing` layer writes).
impl PerfettoEncoder {
    /// A SLICE_END on the thread track (or `track`) with the args of `ann`
    /// (merged by readers into the slice) and the pending flows of the
    /// sequence. Never a name or category: readers would match on them.
    pub(super) fn end_event(
        &mut self,
        ctx: &Context<'_>,
        seq: &mut Seq,
        ts: u64,
        track: Option<u64>,
        ann: Option<(&'static Callsite, &[u64])>,
        out: &mut Vec<u8>,
    ) {
        self.stats.events += 1;
        let delta = self.advance(seq, ts);
        self.te.clear();
        self.interned.clear();
        uint(&mut self.te, TE_TYPE, TYPE_SLICE_END);
        if let Some(uuid) = track {
            uint(&mut self.te, TE_TRACK_UUID, uuid);
        }
        if let Some((cs, args)) = ann {
            annotations(seq, cs, args, &mut self.te, &mut self.interned);
        }
        self.push_pending_flows(ctx, seq);
        self.emit(seq, delta, out);
    }

    /// Binds the flows waiting on this sequence to the event in `te`.
    pub(super) fn push_pending_flows(&mut self, ctx: &Context<'_>, seq: &mut Seq) {
        for id in seq.flows.drain(..) {
            // Process-scoped ids, made trace-global as Perfetto's SDK does.
            let id = crate::record::layout::scoped_flow(id, ctx.process.uuid);
            crate::encode::protowire::fixed64(&mut self.te, TE_FLOW_IDS, id);
        }
    }

    /// The SLICE_BEGIN of an async range (on track `uuid`) at `abs_ns`, earlier than the
    /// sequence clock: written with an absolute BOOTTIME timestamp (the
    /// sequence clock only moves forward), and its track described at the
    /// same time, so the descriptor precedes its first event.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn async_begin_at(
        &mut self,
        ctx: &Context<'_>,
        seq: &mut Seq,
        cs: &'static Callsite,
        track: super::async_tracks::Track,
        abs_ns: u64,
        args: &[u64],
        out: &mut Vec<u8>,
    ) {
        let (seq_id, parent) = (seq.seq_id as u64, ctx.process.uuid);
        let uuid = track.uuid;
        seq.mark_described(track);
        nested(out, 1, |p| {
            uint(p, P_TIMESTAMP, abs_ns);
            uint(p, P_TIMESTAMP_CLOCK_ID, BOOTTIME);
            uint(p, P_SEQUENCE_ID, seq_id);
            uint(p, P_SEQUENCE_FLAGS, SEQ_NEEDS_INCREMENTAL_STATE);
            nested(p, P_TRACK_DESCRIPTOR, |td| {
                uint(td, TD_UUID, uuid);
                string(td, TD_NAME, cs.name);
                uint(td, TD_PARENT_UUID, parent);
            });
        });
        self.stats.events += 1;
        self.fill_event(seq, TYPE_SLICE_BEGIN, Some(uuid), Some(cs), args);
        self.push_pending_flows(ctx, seq);
        self.emit_at(seq, PacketTime::Boottime(abs_ns), out);
    }
}
