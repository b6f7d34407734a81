//! What samples are handed to the encoders as: samples whose stacks are
//! interned in tables of mappings, function names, frames and call stacks.
//! Plain data, compiled with or without the sampler (the encoders know it).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// The interning maps' hasher: a word-at-a-time multiply-rotate. Their
/// keys are this process's own addresses and ids (nothing an attacker
/// chooses), looked up ~20 times per sample, where SipHash's cost showed.
#[derive(Default, Clone, Copy)]
pub(crate) struct WordHasher(u64);

impl WordHasher {
    #[inline]
    fn add(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

impl Hasher for WordHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes(c.try_into().unwrap()));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut last = [0u8; 8];
            last[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(last));
        }
    }
    #[inline]
    fn write_u8(&mut self, n: u8) {
        self.add(n as u64);
    }
    #[inline]
    fn write_u32(&mut self, n: u32) {
        self.add(n as u64);
    }
    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }
    #[inline]
    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        // The product's low bits see only the inputs' low bits; the table
        // indexes with them, so fold the high half in.
        self.0 ^ (self.0 >> 29)
    }
}

/// A map hashed with [`WordHasher`].
pub(crate) type WordMap<K, V> = HashMap<K, V, BuildHasherDefault<WordHasher>>;

/// One sample, its stack interned in [`Tables`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sample {
    /// CLOCK_BOOTTIME nanoseconds (the slices' clock).
    pub(crate) ts_ns: u64,
    pub(crate) tid: i32,
    pub(crate) cpu: u32,
    /// Index into `Tables::callstacks` + 1 (0: no stack).
    pub(crate) callstack: u32,
    /// The stack's unwinding stopped before its root.
    pub(crate) truncated: bool,
}

/// A mapping as written to the trace.
#[derive(Debug, Clone)]
#[cfg_attr(
    not(all(feature = "cpu-sampling", target_os = "linux", target_arch = "x86_64")),
    allow(dead_code)
)]
pub(crate) struct MappingDef {
    pub(crate) build_id: Vec<u8>,
    pub(crate) path: String,
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) pgoff: u64,
    pub(crate) load_bias: u64,
    /// The mapped file's device and inode (0 if unknown): the flusher
    /// names frames from that file, not another found at `path` since.
    pub(crate) dev: u64,
    pub(crate) inode: u64,
}

#[cfg(all(feature = "cpu-sampling", target_os = "linux", target_arch = "x86_64"))]
impl MappingDef {
    /// The mapping as `/proc/self/maps` showed it (what the flusher opens
    /// to name its frames).
    pub(crate) fn maps_line(&self) -> super::modules::MapsLine<'_> {
        super::modules::MapsLine::executable(
            self.start, self.end, self.pgoff, self.dev, self.inode, &self.path,
        )
    }
}

/// A frame as written to the trace: ids are indexes + 1.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FrameDef {
    /// Into `Tables::names` (0: no name).
    pub(crate) name: u32,
    pub(crate) mapping: u32,
    pub(crate) rel_pc: u64,
}

/// Everything samples refer to, only ever appended to (ids stay valid for
/// the whole session; each file's encoder interns, under ids of its own,
/// the entries its samples use). The sampler makes frames (one per
/// address, unnamed) and call stacks; the flusher names the frames and
/// puts the frames of inlined functions into the call stacks before any
/// sample using them is handed to an encoder (`engine::resolve`). The
/// maps are the sampler's (its interning), unused without it.
#[derive(Default)]
#[cfg_attr(
    not(all(feature = "cpu-sampling", target_os = "linux", target_arch = "x86_64")),
    allow(dead_code)
)]
pub(crate) struct Tables {
    pub(crate) mappings: Vec<MappingDef>,
    pub(crate) names: Vec<String>,
    pub(crate) frames: Vec<FrameDef>,
    /// Frame ids, outermost first.
    pub(crate) callstacks: Vec<Vec<u32>>,
    pub(crate) mapping_ids: WordMap<(u64, u64), u32>,
    pub(crate) name_ids: WordMap<String, u32>,
    pub(crate) frame_ids: WordMap<u64, u32>,
    /// Call stack ids by the hash of their frame ids (the stack itself is
    /// kept once, in `callstacks`; a look-up compares it there).
    pub(crate) stack_ids: WordMap<u64, u32>,
    /// Heap bytes the tables hold (an estimate: what the entries and the
    /// maps' slots take), which the sampler takes from the memory budget.
    pub(crate) bytes: u64,
    /// Frames the sampler made that the flusher has not named yet.
    pub(crate) unnamed: Vec<u32>,
    /// Call stacks the sampler made whose frames' inlined functions the
    /// flusher has not put in yet.
    pub(crate) unexpanded: Vec<u32>,
    /// A frame's inlined functions: the ids of their frames, outermost
    /// first (put after it in every call stack that holds it).
    pub(crate) inlined: WordMap<u32, Box<[u32]>>,
}

#[cfg_attr(
    not(all(feature = "cpu-sampling", target_os = "linux", target_arch = "x86_64")),
    allow(dead_code)
)]
impl Tables {
    /// The id of `name` (0 for "": no name), interned.
    pub(crate) fn name(&mut self, name: String) -> u32 {
        if name.is_empty() {
            return 0;
        }
        if let Some(&id) = self.name_ids.get(&name) {
            return id;
        }
        // Kept twice: in `names` and as the map's key.
        self.bytes += 2 * (24 + name.len() as u64) + 4 + SLOT_OVERHEAD;
        self.names.push(name.clone());
        let id = self.names.len() as u32;
        self.name_ids.insert(name, id);
        id
    }
}

/// Estimated heap bytes of one map slot beside its key and value (hash
/// tables keep a control byte per slot and up to an eighth free).
#[cfg_attr(
    not(all(feature = "cpu-sampling", target_os = "linux", target_arch = "x86_64")),
    allow(dead_code)
)]
pub(crate) const SLOT_OVERHEAD: u64 = 8;

/// What an encoder is handed each pass.
pub(crate) struct SampleView<'a> {
    pub(crate) tables: &'a Tables,
    pub(crate) samples: &'a [Sample],
    /// Samples lost since the last view (kernel records, the cap).
    pub(crate) lost: u64,
}
