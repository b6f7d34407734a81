//! The tables' entries made from a sample: its mapping, frames and call
//! stack interned by the sampler (names left to the flusher), and the
//! flusher's naming of frames and its putting inlined functions into the
//! call stacks that hold them. Every entry's bytes are counted in
//! `Tables::bytes`, which the sampler takes from the memory budget.

use super::modules::Modules;
use super::tables::{FrameDef, MappingDef, Tables, WordHasher, SLOT_OVERHEAD};
use std::hash::{BuildHasher, BuildHasherDefault};

impl Tables {
    /// The id of mapping `map` (None: no mapping holds the address); None
    /// if it is new and `room` is false.
    pub(super) fn mapping(
        &mut self,
        modules: &Modules,
        map: Option<usize>,
        room: bool,
    ) -> Option<u32> {
        let key = map.map_or((0, 0), |i| (modules.maps[i].start, modules.maps[i].end));
        if let Some(&id) = self.mapping_ids.get(&key) {
            return Some(id);
        }
        if !room {
            return None;
        }
        let def = match map {
            Some(i) => {
                let m = &modules.maps[i];
                MappingDef {
                    build_id: m
                        .file
                        .as_ref()
                        .map(|f| f.build_id.clone())
                        .unwrap_or_default(),
                    path: m.path.clone(),
                    start: m.start,
                    end: m.end,
                    pgoff: m.pgoff,
                    load_bias: m.load_bias(),
                    dev: m.dev,
                    inode: m.inode,
                }
            }
            None => MappingDef {
                build_id: Vec::new(),
                path: "[unknown]".into(),
                start: 0,
                end: 0,
                pgoff: 0,
                load_bias: 0,
                dev: 0,
                inode: 0,
            },
        };
        self.bytes += (std::mem::size_of::<MappingDef>() + def.path.len() + def.build_id.len())
            as u64
            + 20
            + SLOT_OVERHEAD;
        self.mappings.push(def);
        let id = self.mappings.len() as u32;
        self.mapping_ids.insert(key, id);
        Some(id)
    }

    /// The frame of `pc` (a return address already moved back into its
    /// call instruction); None if it is new and `room` is false. Not named
    /// yet: the flusher names it (`resolve`).
    pub(super) fn frame(&mut self, modules: &mut Modules, pc: u64, room: bool) -> Option<u32> {
        if let Some(&id) = self.frame_ids.get(&pc) {
            return Some(id);
        }
        if !room {
            return None;
        }
        let map = modules.find(pc);
        let mapping = self.mapping(modules, map, true)?;
        let rel_pc = map.map_or(pc, |i| modules.maps[i].rel_pc(pc));
        self.frames.push(FrameDef {
            name: 0,
            mapping,
            rel_pc,
        });
        self.bytes += std::mem::size_of::<FrameDef>() as u64 + 12 + SLOT_OVERHEAD;
        let id = self.frames.len() as u32;
        self.frame_ids.insert(pc, id);
        self.unnamed.push(id);
        Some(id)
    }

    /// The call stack of `pcs` (innermost first, as unwound); None if it
    /// needs an entry not in the tables and `room` is false (their memory
    /// is spent).
    pub(super) fn callstack(
        &mut self,
        modules: &mut Modules,
        pcs: &[u64],
        scratch: &mut Vec<u32>,
        room: bool,
    ) -> Option<u32> {
        if pcs.is_empty() {
            return Some(0);
        }
        scratch.clear();
        for (i, &pc) in pcs.iter().enumerate().rev() {
            // Return addresses name the call before them.
            let at = if i == 0 { pc } else { pc.wrapping_sub(1) };
            scratch.push(self.frame(modules, at, room)?);
        }
        let hash = BuildHasherDefault::<WordHasher>::default().hash_one(scratch.as_slice());
        let known = self.stack_ids.get(&hash).copied();
        if let Some(id) = known {
            if self.is_stack(id, scratch) {
                return Some(id);
            }
        }
        if !room {
            return None;
        }
        self.callstacks.push(scratch.clone());
        let id = self.callstacks.len() as u32;
        self.bytes += 24 + 4 * scratch.len() as u64 + 12 + SLOT_OVERHEAD;
        // Another stack of the same hash keeps the slot (this one is
        // interned again at each use: a cost, never a wrong stack).
        if known.is_none() {
            self.stack_ids.insert(hash, id);
        }
        self.unexpanded.push(id);
        Some(id)
    }
}

impl Tables {
    /// Names frame `id` with `names` (innermost first, `ElfFile::frame_names`):
    /// the last its own, each other a frame of an inlined function, put
    /// in `inlined` (outermost first). What it adds is counted in `bytes`.
    pub(super) fn name_frame(&mut self, id: u32, names: Vec<String>) {
        let mut names = names.into_iter().rev();
        let outer = names.next().unwrap_or_default();
        let f = self.frames[id as usize - 1];
        self.frames[id as usize - 1].name = self.name(outer);
        let inlined: Vec<u32> = names
            .map(|n| {
                let name = self.name(n);
                self.frames.push(FrameDef { name, ..f });
                self.bytes += std::mem::size_of::<FrameDef>() as u64;
                self.frames.len() as u32
            })
            .collect();
        if !inlined.is_empty() {
            self.bytes += 4 + 16 + 4 * inlined.len() as u64 + SLOT_OVERHEAD;
            self.inlined.insert(id, inlined.into());
        }
    }

    /// Puts into call stack `id`, after each of its frames, the frames of
    /// the functions inlined there (`scratch`: reused space). The stack
    /// keeps its id and its slot in `stack_ids` (`is_stack` finds it in
    /// either form); only the frames added count in `bytes`.
    pub(super) fn expand(&mut self, id: u32, scratch: &mut Vec<u32>) {
        let Some(stack) = self.callstacks.get(id as usize - 1) else {
            return;
        };
        if !stack.iter().any(|f| self.inlined.contains_key(f)) {
            return;
        }
        scratch.clear();
        for f in stack {
            scratch.push(*f);
            if let Some(more) = self.inlined.get(f) {
                scratch.extend_from_slice(more);
            }
        }
        self.bytes += 4 * (scratch.len() - stack.len()) as u64;
        self.callstacks[id as usize - 1] = scratch.clone();
    }

    /// Whether call stack `id` is `raw` (its frames as the sampler interns
    /// them): stored as made, or as the flusher expanded it (each frame
    /// followed by the frames of the functions inlined there, `inlined`).
    /// Those frames are never the sampler's (no address is interned to
    /// them), so a stack in one form is never taken for another stack in
    /// the other: `stack_ids` stays keyed by the hash of the form the
    /// sampler makes, which the expansion leaves as it was.
    pub(super) fn is_stack(&self, id: u32, raw: &[u32]) -> bool {
        let Some(stored) = self.callstacks.get(id as usize - 1) else {
            return false;
        };
        if stored.len() == raw.len() {
            return stored.as_slice() == raw;
        }
        let mut at = 0;
        for f in raw {
            if stored.get(at) != Some(f) {
                return false;
            }
            at += 1;
            if let Some(more) = self.inlined.get(f) {
                if stored.get(at..at + more.len()) != Some(&more[..]) {
                    return false;
                }
                at += more.len();
            }
        }
        at == stored.len()
    }
}
