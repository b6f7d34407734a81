//! The EVENT record every typed event is: phase code, field ids, and the
//! per-thread pool of field buffers the builders fill.

use super::{Id, IdKind, Stack, Track, MAX_TRACK_DEPTH};
use crate::record::args::{
    tag_word, TraceValue, T_ARRAY, T_BOOL, T_DICT, T_INT, T_POINTER, T_UINT,
};
use crate::record::clock::ticks;
use crate::record::layout::{self};
use crate::record::registry::{with_current, ThreadRing};
use std::cell::RefCell;

/// Phase codes of EVENT records (8 bits).
pub(crate) mod op {
    pub(crate) const SCOPE_BEGIN: u8 = 1;
    pub(crate) const SCOPE_END: u8 = 2;
    pub(crate) const COMPLETE: u8 = 3;
    pub(crate) const INSTANT: u8 = 4;
    pub(crate) const COUNTER: u8 = 5;
    pub(crate) const ASYNC_BEGIN: u8 = 6;
    pub(crate) const ASYNC_INSTANT: u8 = 7;
    pub(crate) const ASYNC_END: u8 = 8;
    pub(crate) const FLOW_START: u8 = 9;
    pub(crate) const FLOW_STEP: u8 = 10;
    pub(crate) const FLOW_END: u8 = 11;
    pub(crate) const SAMPLE: u8 = 12;
    pub(crate) const OBJECT_NEW: u8 = 13;
    pub(crate) const OBJECT_SNAPSHOT: u8 = 14;
    pub(crate) const OBJECT_DELETE: u8 = 15;
    pub(crate) const MEMORY_GLOBAL: u8 = 16;
    pub(crate) const MEMORY_PROCESS: u8 = 17;
    pub(crate) const MARK: u8 = 18;
    pub(crate) const CLOCK_SYNC: u8 = 19;
    pub(crate) const CONTEXT_ENTER: u8 = 20;
    pub(crate) const CONTEXT_LEAVE: u8 = 21;
    pub(crate) const LINK_IDS: u8 = 22;
    pub(crate) const THREAD_NAME: u8 = 23;
    pub(crate) const THREAD_SORT_INDEX: u8 = 24;
    pub(crate) const PROCESS_NAME: u8 = 25;
    pub(crate) const PROCESS_LABELS: u8 = 26;
    pub(crate) const PROCESS_SORT_INDEX: u8 = 27;
    pub(crate) const GLOBAL_SAMPLE: u8 = 28;
    pub(crate) const LOG: u8 = 29;
    pub(crate) const TRACK_BEGIN: u8 = 30;
    pub(crate) const TRACK_END: u8 = 31;
    pub(crate) const TRACK_INSTANT: u8 = 32;
}

/// Field ids of EVENT records; each is followed by one value.
pub(crate) mod field {
    /// str: the event's name.
    pub(crate) const NAME: u64 = 1;
    /// uint: nesting depth of a slice begin / end (pairs them, see `ScopeStack`).
    pub(crate) const DEPTH: u64 = 2;
    /// dict: args with their names.
    pub(crate) const ARGS: u64 = 3;
    /// array of str / pointer: a raw stack, rootmost first.
    pub(crate) const STACK: u64 = 4;
    /// array of str, (name, category) pairs: a stack of frames, rootmost first.
    pub(crate) const STACK_FRAMES: u64 = 5;
    pub(crate) const END_STACK: u64 = 6;
    pub(crate) const END_STACK_FRAMES: u64 = 7;
    /// str: a reserved color name.
    pub(crate) const CNAME: u64 = 8;
    /// uint: thread CPU time, ns.
    pub(crate) const TTS: u64 = 9;
    /// uint: thread CPU duration, ns.
    pub(crate) const TDUR: u64 = 10;
    /// uint: an explicit timestamp (trace clock ns), instead of the record's.
    pub(crate) const TS: u64 = 11;
    /// uint: duration, ns.
    pub(crate) const DUR: u64 = 12;
    /// uint: 0 thread, 1 process, 2 global.
    pub(crate) const INSTANT_SCOPE: u64 = 13;
    /// uint: an id's value.
    pub(crate) const ID: u64 = 14;
    /// uint: 0 `id`, 1 `id2.local`, 2 `id2.global`.
    pub(crate) const ID_KIND: u64 = 15;
    /// str: the id's `scope`.
    pub(crate) const ID_SCOPE: u64 = 16;
    /// uint: a `CounterUnit` code.
    pub(crate) const UNIT: u64 = 18;
    /// str: a custom unit name.
    pub(crate) const UNIT_NAME: u64 = 19;
    /// bool: a flow end binds to the enclosing slice (`"bp":"e"`).
    pub(crate) const BIND_ENCLOSING: u64 = 20;
    /// any: an object snapshot.
    pub(crate) const SNAPSHOT: u64 = 21;
    pub(crate) const BASE_TYPE: u64 = 22;
    pub(crate) const SNAPSHOT_CATEGORY: u64 = 23;
    pub(crate) const LINKED_ID: u64 = 24;
    /// str: clock sync id.
    pub(crate) const SYNC_ID: u64 = 26;
    /// uint: trace clock ns.
    pub(crate) const ISSUE_TS: u64 = 27;
    /// int.
    pub(crate) const SORT_INDEX: u64 = 28;
    /// array of str.
    pub(crate) const LABELS: u64 = 29;
    pub(crate) const CPU: u64 = 30;
    pub(crate) const WEIGHT: u64 = 31;
    /// uint: a `LogLevel`'s Perfetto priority.
    pub(crate) const LEVEL: u64 = 32;
    /// str.
    pub(crate) const MESSAGE: u64 = 33;
    /// uint: a counter's id.
    pub(crate) const COUNTER_ID: u64 = 34;
    /// array of str: a custom track's path, root first.
    pub(crate) const TRACK: u64 = 35;
}

// ---------------------------------------------------------------------------
// Field buffers

/// The fields of one event being built, and its args (kept apart until the
/// event is written, when they become one ARGS dict).
pub(super) struct Fields {
    pub(super) words: Vec<u64>,
    args: Vec<u64>,
    nargs: u64,
    /// The last id written (kept for the steps of an async range).
    pub(super) id: Option<Id>,
}

/// Buffers larger than this are freed rather than pooled.
const MAX_POOLED_WORDS: usize = 1 << 13;
const POOL_SIZE: usize = 4;

thread_local! {
    static POOL: RefCell<Vec<Fields>> = const { RefCell::new(Vec::new()) };
}

impl Fields {
    pub(super) fn take() -> Fields {
        POOL.try_with(|p| p.borrow_mut().pop())
            .ok()
            .flatten()
            .unwrap_or_else(|| Fields {
                words: Vec::with_capacity(32),
                args: Vec::with_capacity(32),
                nargs: 0,
                id: None,
            })
    }

    pub(super) fn give(mut self) {
        if self.words.capacity() > MAX_POOLED_WORDS || self.args.capacity() > MAX_POOLED_WORDS {
            return;
        }
        self.words.clear();
        self.args.clear();
        self.nargs = 0;
        self.id = None;
        let _ = POOL.try_with(|p| {
            let mut p = p.borrow_mut();
            if p.len() < POOL_SIZE {
                p.push(self);
            }
        });
    }

    pub(super) fn str(&mut self, f: u64, s: &str) {
        self.words.push(f);
        s.encode(&mut self.words);
    }

    pub(super) fn uint(&mut self, f: u64, v: u64) {
        self.words.extend_from_slice(&[f, T_UINT, v]);
    }

    pub(super) fn int(&mut self, f: u64, v: i64) {
        self.words.extend_from_slice(&[f, T_INT, v as u64]);
    }

    pub(super) fn flag(&mut self, f: u64) {
        self.words.extend_from_slice(&[f, tag_word(T_BOOL, 1)]);
    }

    pub(super) fn value(&mut self, f: u64, v: &dyn TraceValue) {
        self.words.push(f);
        v.encode(&mut self.words);
    }

    pub(super) fn id(&mut self, id: Id) {
        self.id = Some(id);
        self.uint(field::ID, id.value);
        if id.kind != IdKind::Default {
            self.uint(field::ID_KIND, id.kind as u64);
        }
        if let Some(scope) = id.scope {
            self.str(field::ID_SCOPE, scope);
        }
    }

    pub(super) fn track(&mut self, track: &'static Track) {
        let mut path: [&str; MAX_TRACK_DEPTH] = [""; MAX_TRACK_DEPTH];
        let n = track.path(&mut path);
        self.words.push(field::TRACK);
        self.words.push(tag_word(T_ARRAY, n as u64));
        for name in &path[..n] {
            name.encode(&mut self.words);
        }
    }

    pub(super) fn arg(&mut self, key: &str, value: &dyn TraceValue) {
        key.encode(&mut self.args);
        value.encode(&mut self.args);
        self.nargs += 1;
    }

    pub(super) fn stack(&mut self, end: bool, stack: Stack<'_>) {
        match stack {
            Stack::Frames(frames) => {
                self.words.push(if end {
                    field::END_STACK_FRAMES
                } else {
                    field::STACK_FRAMES
                });
                self.words.push(tag_word(T_ARRAY, 2 * frames.len() as u64));
                for f in frames {
                    f.name.encode(&mut self.words);
                    f.category.encode(&mut self.words);
                }
            }
            Stack::Raw(entries) => {
                self.words
                    .push(if end { field::END_STACK } else { field::STACK });
                self.words.push(tag_word(T_ARRAY, entries.len() as u64));
                for e in entries {
                    e.encode(&mut self.words);
                }
            }
            Stack::Addresses(pcs) => {
                self.words
                    .push(if end { field::END_STACK } else { field::STACK });
                self.words.push(tag_word(T_ARRAY, pcs.len() as u64));
                for &pc in pcs {
                    self.words.extend_from_slice(&[T_POINTER, pc]);
                }
            }
        }
    }

    /// Moves the args into the fields, as one ARGS dict.
    pub(super) fn seal(&mut self) {
        if self.nargs > 0 {
            self.words.push(field::ARGS);
            self.words.push(tag_word(T_DICT, self.nargs));
            self.words.extend_from_slice(&self.args);
            self.args.clear();
            self.nargs = 0;
        }
    }
}

/// Writes an EVENT record on this thread's ring; adds the thread's CPU time
/// first when `thread_time` is asked and the session records it.
pub(super) fn write(site: u32, op: u8, fields: &mut Fields, thread_time: bool) -> bool {
    fields.seal();
    with_current(|tr| write_on(tr, site, op, fields, thread_time)).unwrap_or(false)
}

pub(super) fn write_on(
    tr: &ThreadRing,
    site: u32,
    op: u8,
    fields: &mut Fields,
    thread_time: bool,
) -> bool {
    // Thread time is read inside the wall-clock interval of a slice: after
    // the begin's timestamp, before the end's.
    let end = op == op::SCOPE_END;
    let mut ts = if end { 0 } else { ticks() };
    if thread_time && tr.thread_time {
        fields.uint(field::TTS, crate::sys::thread_cpu_ns());
    }
    if end {
        ts = ticks();
    }
    let payload = site as u64 | (op as u64) << 24;
    layout::write(
        &tr.ring,
        layout::KIND_EVENT,
        payload,
        ts,
        &fields.words,
        &(),
    )
}

/// Writes a one-off EVENT record built by `f` (no builder).
pub(super) fn write_now(site: u32, op: u8, f: impl FnOnce(&mut Fields)) {
    if !cfg!(feature = "enable") {
        return; // compiled out with the `enable` feature
    }
    let mut fields = Fields::take();
    f(&mut fields);
    write(site, op, &mut fields, false);
    fields.give();
}

// ---------------------------------------------------------------------------
// Values the API takes
