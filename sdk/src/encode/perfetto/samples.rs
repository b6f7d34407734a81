//! CPU stack samples as Perfetto `PerfSample` packets, all on one sequence
//! of their own (trace_processor makes each sequence with samples a perf
//! session: one per process). Mappings (with build ids and path
//! components), function names, frames and call stacks are interned on that
//! sequence, each entry written once, in the first packet that needs it.
//! Timestamps are absolute BOOTTIME nanoseconds, the trace's clock, so a
//! sample sits under the slice its thread had open; `pid`/`tid` are the
//! thread's own, so it lands in that thread's group.

use super::super::protowire::{bytes, nested, uint};
use super::super::Context;
use crate::sampling::tables::Tables;
use crate::sampling::SampleView;
use std::collections::HashMap;

// TracePacket
const P_TIMESTAMP: u32 = 8;
const P_SEQUENCE_ID: u32 = 10;
const P_INTERNED_DATA: u32 = 12;
const P_SEQUENCE_FLAGS: u32 = 13;
const P_PERF_SAMPLE: u32 = 66;
const SEQ_INCREMENTAL_STATE_CLEARED: u64 = 1;
const SEQ_NEEDS_INCREMENTAL_STATE: u64 = 2;
// PerfSample
const PS_CPU: u32 = 1;
const PS_PID: u32 = 2;
const PS_TID: u32 = 3;
const PS_CALLSTACK_IID: u32 = 4;
const PS_CPU_MODE: u32 = 5;
const PS_UNWIND_ERROR: u32 = 16;
const PS_KERNEL_RECORDS_LOST: u32 = 17;
/// Profiling.CpuMode.MODE_USER
const MODE_USER: u64 = 2;
/// Profiling.StackUnwindError.UNWIND_ERROR_UNWIND_INFO: the walk stopped
/// before the stack's root.
const UNWIND_ERROR_UNWIND_INFO: u64 = 3;
// InternedData
const ID_FUNCTION_NAMES: u32 = 5;
const ID_FRAMES: u32 = 6;
const ID_CALLSTACKS: u32 = 7;
const ID_BUILD_IDS: u32 = 16;
const ID_MAPPING_PATHS: u32 = 17;
const ID_MAPPINGS: u32 = 19;
// InternedString
const IS_IID: u32 = 1;
const IS_STR: u32 = 2;
// Frame
const F_IID: u32 = 1;
const F_FUNCTION_NAME_ID: u32 = 2;
const F_MAPPING_ID: u32 = 3;
const F_REL_PC: u32 = 4;
// Callstack
const CS_IID: u32 = 1;
const CS_FRAME_IDS: u32 = 2;
// Mapping
const M_IID: u32 = 1;
const M_BUILD_ID: u32 = 2;
const M_START_OFFSET: u32 = 3;
const M_START: u32 = 4;
const M_END: u32 = 5;
const M_LOAD_BIAS: u32 = 6;
const M_PATH_STRING_IDS: u32 = 7;

/// The sequence of the process's samples: far above the threads' (counted
/// up from 2), below what a varint of 4 bytes holds.
pub(crate) const SAMPLES_SEQ: u32 = (1 << 28) - 1;

/// What this file's samples sequence has written so far.
#[derive(Default)]
pub(crate) struct SampleSeq {
    started: bool,
    mappings: usize,
    names: usize,
    frames: usize,
    callstacks: usize,
    /// Path components and build ids (both `InternedString`s, in tables of
    /// their own), by text.
    paths: HashMap<String, u64>,
    build_ids: HashMap<Vec<u8>, u64>,
}

impl SampleSeq {
    /// Starts the sequence over: its next packet clears the incremental
    /// state and interns every table entry again (the tracing service
    /// asked, or a packet with interned entries was lost).
    pub(crate) fn restart(&mut self) {
        *self = SampleSeq::default();
    }

    /// Writes `view`'s samples (and a loss packet for its lost ones).
    pub(crate) fn write(&mut self, ctx: &Context<'_>, view: &SampleView<'_>, out: &mut Vec<u8>) {
        let pid = ctx.process.pid as u64;
        let mut interned = Vec::new();
        self.new_entries(view.tables, &mut interned);
        let mut first = true;
        for s in view.samples {
            nested(out, 1, |p| {
                uint(p, P_TIMESTAMP, s.ts_ns);
                uint(p, P_SEQUENCE_ID, SAMPLES_SEQ as u64);
                self.flags(p);
                if first && !interned.is_empty() {
                    bytes(p, P_INTERNED_DATA, &interned);
                }
                nested(p, P_PERF_SAMPLE, |ps| {
                    uint(ps, PS_CPU, s.cpu as u64);
                    uint(ps, PS_PID, pid);
                    uint(ps, PS_TID, s.tid as u64);
                    if s.callstack != 0 {
                        uint(ps, PS_CALLSTACK_IID, s.callstack as u64);
                    }
                    uint(ps, PS_CPU_MODE, MODE_USER);
                    if s.truncated {
                        uint(ps, PS_UNWIND_ERROR, UNWIND_ERROR_UNWIND_INFO);
                    }
                });
            });
            first = false;
        }
        if view.lost > 0 {
            let ts = view
                .samples
                .last()
                .map_or_else(|| ctx.cal.now_ns(), |s| s.ts_ns);
            nested(out, 1, |p| {
                uint(p, P_TIMESTAMP, ts);
                uint(p, P_SEQUENCE_ID, SAMPLES_SEQ as u64);
                self.flags(p);
                if first && !interned.is_empty() {
                    bytes(p, P_INTERNED_DATA, &interned);
                }
                nested(p, P_PERF_SAMPLE, |ps| {
                    uint(ps, PS_CPU, 0);
                    uint(ps, PS_KERNEL_RECORDS_LOST, view.lost);
                });
            });
        }
    }

    fn flags(&mut self, p: &mut Vec<u8>) {
        let flags = if self.started {
            SEQ_NEEDS_INCREMENTAL_STATE
        } else {
            SEQ_INCREMENTAL_STATE_CLEARED | SEQ_NEEDS_INCREMENTAL_STATE
        };
        self.started = true;
        uint(p, P_SEQUENCE_FLAGS, flags);
    }

    /// The `InternedData` body of every table entry not written yet.
    fn new_entries(&mut self, t: &Tables, d: &mut Vec<u8>) {
        for m in &t.mappings[self.mappings.min(t.mappings.len())..] {
            let hex: Vec<u8> = m
                .build_id
                .iter()
                .flat_map(|b| {
                    let h = b"0123456789abcdef";
                    [h[(b >> 4) as usize], h[(b & 15) as usize]]
                })
                .collect();
            let build = if hex.is_empty() {
                None
            } else {
                Some(intern(&mut self.build_ids, hex, d, ID_BUILD_IDS))
            };
            let comps: Vec<u64> = m
                .path
                .split('/')
                .filter(|c| !c.is_empty())
                .map(|c| intern(&mut self.paths, c.to_string(), d, ID_MAPPING_PATHS))
                .collect();
            let iid = self.mappings as u64 + 1;
            self.mappings += 1;
            nested(d, ID_MAPPINGS, |e| {
                uint(e, M_IID, iid);
                if let Some(b) = build {
                    uint(e, M_BUILD_ID, b);
                }
                uint(e, M_START_OFFSET, m.pgoff);
                uint(e, M_START, m.start);
                uint(e, M_END, m.end);
                uint(e, M_LOAD_BIAS, m.load_bias);
                for c in comps {
                    uint(e, M_PATH_STRING_IDS, c);
                }
            });
        }
        for name in &t.names[self.names.min(t.names.len())..] {
            self.names += 1;
            nested(d, ID_FUNCTION_NAMES, |e| {
                uint(e, IS_IID, self.names as u64);
                bytes(e, IS_STR, name.as_bytes());
            });
        }
        for f in &t.frames[self.frames.min(t.frames.len())..] {
            self.frames += 1;
            nested(d, ID_FRAMES, |e| {
                uint(e, F_IID, self.frames as u64);
                if f.name != 0 {
                    uint(e, F_FUNCTION_NAME_ID, f.name as u64);
                }
                uint(e, F_MAPPING_ID, f.mapping as u64);
                uint(e, F_REL_PC, f.rel_pc);
            });
        }
        for cs in &t.callstacks[self.callstacks.min(t.callstacks.len())..] {
            self.callstacks += 1;
            nested(d, ID_CALLSTACKS, |e| {
                uint(e, CS_IID, self.callstacks as u64);
                for &f in cs {
                    uint(e, CS_FRAME_IDS, f as u64);
                }
            });
        }
    }
}

/// The iid of `key` in one of the sequence's string tables (written to `d`
/// under `field` the first time).
fn intern<K: std::hash::Hash + Eq + AsRef<[u8]>>(
    map: &mut HashMap<K, u64>,
    key: K,
    d: &mut Vec<u8>,
    field: u32,
) -> u64 {
    if let Some(&iid) = map.get(&key) {
        return iid;
    }
    let iid = map.len() as u64 + 1;
    nested(d, field, |e| {
        uint(e, IS_IID, iid);
        bytes(e, IS_STR, key.as_ref());
    });
    map.insert(key, iid);
    iid
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encode::{ProcessInfo, Sites};
    use crate::record::clock::Calibration;
    use crate::sampling::tables::{FrameDef, MappingDef, Sample};
    use prost::Message;

    fn tables() -> Tables {
        let mut t = Tables::default();
        t.mappings.push(MappingDef {
            build_id: vec![0xab; 20],
            path: "/usr/bin/prog".into(),
            start: 0x1000,
            end: 0x9000,
            pgoff: 0,
            load_bias: 0,
        });
        t.names.push("prog::hot".into());
        t.frames.push(FrameDef {
            name: 1,
            mapping: 1,
            rel_pc: 0x42,
        });
        t.callstacks.push(vec![1]);
        t
    }

    /// Each packet's sequence flags and whether it carries interned data.
    fn packets(out: &[u8]) -> Vec<(u32, bool)> {
        ringtrace_protos::Trace::decode(out)
            .unwrap()
            .packet
            .iter()
            .map(|p| (p.sequence_flags.unwrap_or(0), p.interned_data.is_some()))
            .collect()
    }

    #[test]
    fn a_restart_clears_the_sequence_and_interns_every_entry_again() {
        let cal = Calibration::start(false);
        let process = ProcessInfo::current(Some("samples".into()));
        let mut sites = Sites::default();
        let ctx = Context {
            cal: &cal,
            process: &process,
            sites: &mut sites,
        };
        let t = tables();
        let samples = [Sample {
            ts_ns: 1_000,
            tid: 7,
            cpu: 0,
            callstack: 1,
            truncated: false,
        }];
        let view = SampleView {
            tables: &t,
            samples: &samples,
            lost: 0,
        };
        let mut seq = SampleSeq::default();
        let cleared = (SEQ_INCREMENTAL_STATE_CLEARED | SEQ_NEEDS_INCREMENTAL_STATE) as u32;
        let needs = SEQ_NEEDS_INCREMENTAL_STATE as u32;
        let mut out = Vec::new();
        seq.write(&ctx, &view, &mut out);
        assert_eq!(packets(&out), [(cleared, true)]);
        // Nothing new: no interned data, no clear.
        out.clear();
        seq.write(&ctx, &view, &mut out);
        assert_eq!(packets(&out), [(needs, false)]);
        // After a restart the entries written before are written again.
        seq.restart();
        out.clear();
        seq.write(&ctx, &view, &mut out);
        assert_eq!(packets(&out), [(cleared, true)]);
        let interned = ringtrace_protos::Trace::decode(out.as_slice())
            .unwrap()
            .packet[0]
            .interned_data
            .clone()
            .unwrap();
        assert_eq!(
            (
                interned.mappings.len(),
                interned.frames.len(),
                interned.callstacks.len(),
                interned.function_names.len()
            ),
            (1, 1, 1, 1)
        );
    }
}
