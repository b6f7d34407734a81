//! The packets that set the scene: the session's global clock snapshots,
//! a sequence's reset (incremental state cleared, defaults, a clock
//! snapshot, the process and thread descriptors), and the descriptors of
//! the counter and async tracks the general path writes on, each described
//! once per sequence before its first event.

use super::async_tracks::Track;
use super::fields::{
    BOOTTIME, CS_CLOCKS, CS_PRIMARY_TRACE_CLOCK, C_ID, C_IS_INCREMENTAL, C_TIMESTAMP,
    C_UNIT_MULTIPLIER_NS, D_TIMESTAMP_CLOCK_ID, D_TRACK_EVENT_DEFAULTS, P_CLOCK_SNAPSHOT,
    P_DEFAULTS, P_FIRST_PACKET_ON_SEQUENCE, P_PREVIOUS_PACKET_DROPPED, P_SEQUENCE_FLAGS,
    P_SEQUENCE_ID, P_TIMESTAMP, P_TRACK_DESCRIPTOR, SEQ_CLOCK, SEQ_INCREMENTAL_STATE_CLEARED,
    SEQ_NEEDS_INCREMENTAL_STATE, TD_COUNTER, TD_NAME, TD_PARENT_UUID, TD_UUID, TED_TRACK_UUID,
};
use super::typed::process_descriptor_with;
use super::{PerfettoEncoder, Seq, UUID_KIND_COUNTER};
use crate::encode::protowire::{nested, string, uint};
use crate::encode::{hash_str, Context};
use crate::record::callsite::Callsite;
use crate::record::registry::SESSION_SEQ;
use crate::sys;

/// Writes a global ClockSnapshot (BOOTTIME, MONOTONIC, REALTIME) on the
/// session sequence, so every other clock can be related to the trace clock.
pub(super) fn global_snapshot(out: &mut Vec<u8>) {
    let boot = sys::boottime_ns();
    let mono = sys::monotonic_ns();
    let real = sys::realtime_ns();
    nested(out, 1, |p| {
        uint(p, P_SEQUENCE_ID, SESSION_SEQ as u64);
        nested(p, P_CLOCK_SNAPSHOT, |cs| {
            for (id, ts) in [
                (BOOTTIME, boot),
                (sys::CLOCK_MONOTONIC as u64, mono),
                (sys::CLOCK_REALTIME as u64, real),
            ] {
                nested(cs, CS_CLOCKS, |c| {
                    uint(c, C_ID, id);
                    uint(c, C_TIMESTAMP, ts);
                });
            }
            uint(cs, CS_PRIMARY_TRACE_CLOCK, BOOTTIME);
        });
    });
}

impl PerfettoEncoder {
    /// Writes the packets that (re)start a sequence at `ts`.
    pub(super) fn reset(
        &mut self,
        ctx: &mut Context<'_>,
        seq: &mut Seq,
        ts: u64,
        out: &mut Vec<u8>,
    ) {
        seq.clear_interning();
        nested(out, 1, |p| {
            uint(p, P_SEQUENCE_ID, seq.seq_id as u64);
            if !seq.started {
                uint(p, P_FIRST_PACKET_ON_SEQUENCE, 1);
            }
            uint(p, P_SEQUENCE_FLAGS, SEQ_INCREMENTAL_STATE_CLEARED);
            if seq.loss_flags != 0 {
                uint(p, P_PREVIOUS_PACKET_DROPPED, seq.loss_flags as u64);
            }
            nested(p, P_DEFAULTS, |d| {
                uint(d, D_TIMESTAMP_CLOCK_ID, SEQ_CLOCK);
                nested(d, D_TRACK_EVENT_DEFAULTS, |ted| {
                    uint(ted, TED_TRACK_UUID, seq.track_uuid)
                });
            });
            nested(p, P_CLOCK_SNAPSHOT, |cs| {
                nested(cs, CS_CLOCKS, |c| {
                    uint(c, C_ID, BOOTTIME);
                    uint(c, C_TIMESTAMP, ts);
                });
                nested(cs, CS_CLOCKS, |c| {
                    uint(c, C_ID, SEQ_CLOCK);
                    uint(c, C_TIMESTAMP, ts);
                    uint(c, C_IS_INCREMENTAL, 1);
                    uint(c, C_UNIT_MULTIPLIER_NS, 1);
                });
            });
        });
        seq.started = true;
        seq.valid = true;
        seq.loss_flags = 0;
        seq.last_ns = ts;
        // The process and this thread's track, re-described after every reset.
        let meta = self.proc_meta.clone();
        self.descriptor_packet(seq, out, |td| process_descriptor_with(td, ctx, &meta));
        self.describe_thread(ctx, seq, out);
    }

    /// A packet on `seq` at the current clock position carrying what `f` writes.
    pub(super) fn descriptor_packet(
        &mut self,
        seq: &Seq,
        out: &mut Vec<u8>,
        f: impl FnOnce(&mut Vec<u8>),
    ) {
        nested(out, 1, |p| {
            uint(p, P_TIMESTAMP, 0);
            uint(p, P_SEQUENCE_ID, seq.seq_id as u64);
            uint(p, P_SEQUENCE_FLAGS, SEQ_NEEDS_INCREMENTAL_STATE);
            f(p);
        });
    }

    /// The process-scoped counter track of `cs`, described on this sequence
    /// before its first value.
    pub(super) fn counter_track(
        &mut self,
        ctx: &Context<'_>,
        seq: &mut Seq,
        cs: &Callsite,
        _ts: u64,
        out: &mut Vec<u8>,
    ) -> u64 {
        let uuid = ctx
            .process
            .derived_uuid(UUID_KIND_COUNTER, hash_str(cs.name));
        if seq.described.insert(uuid) {
            // A descriptor packet sits at the clock's current position
            // (delta 0); the event after it carries the whole delta.
            let parent = ctx.process.uuid;
            self.descriptor_packet(seq, out, |p| {
                nested(p, P_TRACK_DESCRIPTOR, |td| {
                    uint(td, TD_UUID, uuid);
                    string(td, TD_NAME, cs.name);
                    uint(td, TD_PARENT_UUID, parent);
                    nested(td, TD_COUNTER, |_| {});
                });
            });
        }
        uuid
    }

    /// Describes the track of an async range of `cs` on this sequence
    /// before its first use there.
    pub(super) fn async_track(
        &mut self,
        ctx: &Context<'_>,
        seq: &mut Seq,
        cs: &Callsite,
        track: Track,
        out: &mut Vec<u8>,
    ) {
        if seq.mark_described(track) {
            // A descriptor packet sits at the clock's current position
            // (delta 0); the event after it carries the whole delta.
            let parent = ctx.process.uuid;
            self.descriptor_packet(seq, out, |p| {
                nested(p, P_TRACK_DESCRIPTOR, |td| {
                    uint(td, TD_UUID, track.uuid);
                    string(td, TD_NAME, cs.name);
                    uint(td, TD_PARENT_UUID, parent);
                });
            });
        }
    }
}
