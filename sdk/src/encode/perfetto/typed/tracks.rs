//! The tracks the typed API's events go on, each described on first use on
//! a sequence: the thread's own and its thread-time counter track, process
//! counter tracks by name, custom tracks with their ancestors, and async id
//! tracks (their uuids by the format's rules for async ids).

use crate::encode::event::IdView;
use crate::encode::perfetto::fields::{
    CD_TYPE, CD_UNIT, CD_UNIT_NAME, COUNTER_THREAD_TIME_NS, MERGE_NONE, P_TRACK_DESCRIPTOR,
    TD_COUNTER, TD_NAME, TD_PARENT_UUID, TD_SIBLING_MERGE_BEHAVIOR, TD_SIBLING_ORDER_RANK,
    TD_THREAD, TD_UUID, THD_LEGACY_SORT_INDEX, THD_PID, THD_THREAD_NAME, THD_TID, UNIT_TIME_NS,
};
use crate::encode::perfetto::{PerfettoEncoder, Seq, UUID_KIND_COUNTER};
use crate::encode::protowire::{int, nested, string, uint};
use crate::encode::Context;
use crate::encode::{hash_str, mix};

const UUID_KIND_THREAD_TIME: u64 = 3;
const UUID_KIND_ASYNC_ID: u64 = 4;
const UUID_KIND_TRACK: u64 = 5;
const UUID_MASK: u64 = (1 << 63) - 1;

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
    pub(in crate::encode::perfetto) fn describe_thread(
        &mut self,
        ctx: &Context<'_>,
        seq: &mut Seq,
        out: &mut Vec<u8>,
    ) {
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

    /// The thread-time counter track of this thread, described on first use.
    pub(super) fn thread_time_track(
        &mut self,
        ctx: &Context<'_>,
        seq: &mut Seq,
        out: &mut Vec<u8>,
    ) -> u64 {
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
    pub(super) fn named_counter_track(
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
    pub(super) fn custom_track(
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
    pub(super) fn async_id_track(
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
}
