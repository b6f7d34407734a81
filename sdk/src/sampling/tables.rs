//! What samples are handed to the encoders as: samples whose stacks are
//! interned in tables of mappings, function names, frames and call stacks.
//! Plain data, compiled with or without the sampler (the encoders know it).

use std::collections::HashMap;

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
pub(crate) struct MappingDef {
    pub(crate) build_id: Vec<u8>,
    pub(crate) path: String,
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) pgoff: u64,
    pub(crate) load_bias: u64,
}

/// A frame as written to the trace: ids are indexes + 1.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FrameDef {
    /// Into `Tables::names` (0: no name).
    pub(crate) name: u32,
    pub(crate) mapping: u32,
    pub(crate) rel_pc: u64,
}

/// Everything samples refer to, only ever appended to (an encoder writes
/// what it has not written yet: ids stay valid for the whole session). The
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
    pub(crate) mapping_ids: HashMap<(u64, u64), u32>,
    pub(crate) name_ids: HashMap<String, u32>,
    pub(crate) frame_ids: HashMap<u64, u32>,
    pub(crate) stack_ids: HashMap<Vec<u32>, u32>,
}

/// What an encoder is handed each pass.
pub(crate) struct SampleView<'a> {
    pub(crate) tables: &'a Tables,
    pub(crate) samples: &'a [Sample],
    /// Samples lost since the last view (kernel records, the cap).
    pub(crate) lost: u64,
}
