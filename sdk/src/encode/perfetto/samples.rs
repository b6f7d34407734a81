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

/// What this file's samples sequence has interned so far: only the
/// entries its samples use, numbered in the order they were first needed
/// (a file holding a window of the session's samples, a flight recorder's
/// write-out or a capture, carries no entry of the session's others).
#[derive(Default)]
pub(crate) struct SampleSeq {
    started: bool,
    /// Per table index of the session's tables: this sequence's iid (0:
    /// not interned yet).
    mappings: Vec<u32>,
    names: Vec<u32>,
    frames: Vec<u32>,
    callstacks: Vec<u32>,
    /// Entries interned per kind: the next iid is one more.
    counts: [u32; 4],
    /// Path components and build ids (both `InternedString`s, in tables of
    /// their own), by text.
    paths: HashMap<String, u64>,
    build_ids: HashMap<Vec<u8>, u64>,
    /// Each sample's callstack iid (scratch, one `write`).
    ids: Vec<u32>,
}

const K_MAPPING: usize = 0;
const K_NAME: usize = 1;
const K_FRAME: usize = 2;
const K_STACK: usize = 3;

/// The `InternedData` entries one `write` adds, by field (written in this
/// order: each refers only to those before it).
#[derive(Default)]
struct NewEntries {
    strings: Vec<u8>,
    mappings: Vec<u8>,
    names: Vec<u8>,
    frames: Vec<u8>,
    callstacks: Vec<u8>,
}

impl NewEntries {
    fn is_empty(&self) -> bool {
        self.strings.is_empty() && self.mappings.is_empty() && self.callstacks.is_empty()
    }

    fn into_bytes(self) -> Vec<u8> {
        let mut d = self.strings;
        for part in [self.mappings, self.names, self.frames, self.callstacks] {
            d.extend_from_slice(&part);
        }
        d
    }
}

/// The iid of the session's entry `id` (index + 1) in `map`: 0 when `id`
/// is 0 or out of the table (`len`), `Err(index)` when not interned yet.
fn local(map: &mut Vec<u32>, id: u32, len: usize) -> Result<u32, usize> {
    let Some(i) = (id as usize).checked_sub(1).filter(|&i| i < len) else {
        return Ok(0);
    };
    if map.len() < len {
        map.resize(len, 0);
    }
    match map[i] {
        0 => Err(i),
        iid => Ok(iid),
    }
}

impl SampleSeq {
    /// Starts the sequence over: its next packet clears the incremental
    /// state and interns again every entry its samples use (the tracing
    /// service asked, or a packet with interned entries was lost).
    pub(crate) fn restart(&mut self) {
        *self = SampleSeq::default();
    }

    /// Writes `view`'s samples (and a loss packet for its lost ones),
    /// interning in the first packet the entries they use that this
    /// sequence has not interned yet.
    pub(crate) fn write(&mut self, ctx: &Context<'_>, view: &SampleView<'_>, out: &mut Vec<u8>) {
        let pid = ctx.process.pid as u64;
        let mut new = NewEntries::default();
        let mut ids = std::mem::take(&mut self.ids);
        ids.clear();
        for s in view.samples {
            // A stack interned before: one load (the steady state).
            let known = (s.callstack as usize)
                .checked_sub(1)
                .and_then(|i| self.callstacks.get(i))
                .copied()
                .unwrap_or(0);
            ids.push(match known {
                0 => self.callstack(view.tables, s.callstack, &mut new),
                iid => iid,
            });
        }
        let interned = if new.is_empty() {
            Vec::new()
        } else {
            new.into_bytes()
        };
        let mut first = true;
        for (s, &iid) in view.samples.iter().zip(&ids) {
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
                    if iid != 0 {
                        uint(ps, PS_CALLSTACK_IID, iid as u64);
                    }
                    uint(ps, PS_CPU_MODE, MODE_USER);
                    if s.truncated {
                        uint(ps, PS_UNWIND_ERROR, UNWIND_ERROR_UNWIND_INFO);
                    }
                });
            });
            first = false;
        }
        self.ids = ids;
        if view.lost > 0 {
            let ts = view
                .samples
                .last()
                .map_or_else(|| ctx.cal.now_ns(), |s| s.ts_ns);
            nested(out, 1, |p| {
                uint(p, P_TIMESTAMP, ts);
                uint(p, P_SEQUENCE_ID, SAMPLES_SEQ as u64);
                self.flags(p);
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

    fn next(&mut self, kind: usize) -> u32 {
        self.counts[kind] += 1;
        self.counts[kind]
    }

    /// The iid of the session's call stack `id` (0: none), interning it,
    /// its frames and theirs first.
    fn callstack(&mut self, t: &Tables, id: u32, new: &mut NewEntries) -> u32 {
        let slot = match local(&mut self.callstacks, id, t.callstacks.len()) {
            Ok(iid) => return iid,
            Err(slot) => slot,
        };
        let frames: Vec<u32> = t.callstacks[slot]
            .iter()
            .map(|&f| self.frame(t, f, new))
            .filter(|&f| f != 0)
            .collect();
        let iid = self.next(K_STACK);
        self.callstacks[slot] = iid;
        nested(&mut new.callstacks, ID_CALLSTACKS, |e| {
            uint(e, CS_IID, iid as u64);
            for f in frames {
                uint(e, CS_FRAME_IDS, f as u64);
            }
        });
        iid
    }

    fn frame(&mut self, t: &Tables, id: u32, new: &mut NewEntries) -> u32 {
        let slot = match local(&mut self.frames, id, t.frames.len()) {
            Ok(iid) => return iid,
            Err(slot) => slot,
        };
        let f = t.frames[slot];
        let name = self.name(t, f.name, new);
        let mapping = self.mapping(t, f.mapping, new);
        let iid = self.next(K_FRAME);
        self.frames[slot] = iid;
        nested(&mut new.frames, ID_FRAMES, |e| {
            uint(e, F_IID, iid as u64);
            if name != 0 {
                uint(e, F_FUNCTION_NAME_ID, name as u64);
            }
            if mapping != 0 {
                uint(e, F_MAPPING_ID, mapping as u64);
            }
            uint(e, F_REL_PC, f.rel_pc);
        });
        iid
    }

    fn name(&mut self, t: &Tables, id: u32, new: &mut NewEntries) -> u32 {
        let slot = match local(&mut self.names, id, t.names.len()) {
            Ok(iid) => return iid,
            Err(slot) => slot,
        };
        let iid = self.next(K_NAME);
        self.names[slot] = iid;
        nested(&mut new.names, ID_FUNCTION_NAMES, |e| {
            uint(e, IS_IID, iid as u64);
            bytes(e, IS_STR, t.names[slot].as_bytes());
        });
        iid
    }

    fn mapping(&mut self, t: &Tables, id: u32, new: &mut NewEntries) -> u32 {
        let slot = match local(&mut self.mappings, id, t.mappings.len()) {
            Ok(iid) => return iid,
            Err(slot) => slot,
        };
        let m = &t.mappings[slot];
        let hex: Vec<u8> = m
            .build_id
            .iter()
            .flat_map(|b| {
                let h = b"0123456789abcdef";
                [h[(b >> 4) as usize], h[(b & 15) as usize]]
            })
            .collect();
        let d = &mut new.strings;
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
        let iid = self.next(K_MAPPING);
        self.mappings[slot] = iid;
        nested(&mut new.mappings, ID_MAPPINGS, |e| {
            uint(e, M_IID, iid as u64);
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
        iid
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
            dev: 0,
            inode: 0,
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

    /// Runs `f` with an encoding context of this process.
    fn with_ctx(f: impl FnOnce(&Context<'_>)) {
        let cal = Calibration::start(false);
        let process = ProcessInfo::current(Some("samples".into()));
        let mut sites = Sites::default();
        f(&Context {
            cal: &cal,
            process: &process,
            sites: &mut sites,
        });
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
        with_ctx(|ctx| {
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
            seq.write(ctx, &view, &mut out);
            assert_eq!(packets(&out), [(cleared, true)]);
            // Nothing new: no interned data, no clear.
            out.clear();
            seq.write(ctx, &view, &mut out);
            assert_eq!(packets(&out), [(needs, false)]);
            // After a restart the entries written before are written again.
            seq.restart();
            out.clear();
            seq.write(ctx, &view, &mut out);
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
        });
    }

    /// Only the entries the samples use are interned, renumbered from 1,
    /// each once per sequence; a stack first used later comes with only
    /// what is new.
    #[test]
    fn only_the_entries_samples_use_are_interned() {
        with_ctx(|ctx| {
            let mut t = tables();
            t.mappings.push(MappingDef {
                build_id: vec![0xcd; 20],
                path: "/usr/lib/libother.so".into(),
                start: 0x10000,
                end: 0x20000,
                pgoff: 0,
                load_bias: 0,
                dev: 0,
                inode: 0,
            });
            t.names.push("other::f".into());
            t.names.push("prog::main".into());
            // Frame 2: other::f in libother (unused); frame 3: prog::main.
            t.frames.push(FrameDef {
                name: 2,
                mapping: 2,
                rel_pc: 0x10,
            });
            t.frames.push(FrameDef {
                name: 3,
                mapping: 1,
                rel_pc: 0x20,
            });
            t.callstacks.push(vec![2]); // 2: unused
            t.callstacks.push(vec![3, 1]); // 3: main -> hot
            let sample = |callstack| Sample {
                ts_ns: 1_000,
                tid: 7,
                cpu: 0,
                callstack,
                truncated: false,
            };
            let interned = |out: &[u8]| {
                let trace = ringtrace_protos::Trace::decode(out).unwrap();
                let p = &trace.packet[0];
                let d = p.interned_data.clone().unwrap_or_default();
                let iid = p.perf_sample.as_ref().unwrap().callstack_iid;
                (
                    d.mappings.len(),
                    d.function_names.len(),
                    d.frames.len(),
                    d.callstacks
                        .iter()
                        .map(|c| c.frame_ids.clone())
                        .collect::<Vec<_>>(),
                    iid,
                )
            };
            let mut seq = SampleSeq::default();
            let mut out = Vec::new();
            let samples = [sample(3), sample(3)];
            let view = SampleView {
                tables: &t,
                samples: &samples,
                lost: 0,
            };
            seq.write(ctx, &view, &mut out);
            // main (frame 1 here) and hot (2), one mapping, two names.
            assert_eq!(interned(&out), (1, 2, 2, vec![vec![1, 2]], Some(1)));
            // Stack 1 (hot alone) now: only the stack is new.
            out.clear();
            let samples = [sample(1)];
            let view = SampleView {
                tables: &t,
                samples: &samples,
                lost: 0,
            };
            seq.write(ctx, &view, &mut out);
            assert_eq!(interned(&out), (0, 0, 0, vec![vec![2]], Some(2)));
        });
    }
}
