//! The EVENT record every typed event is written as (its codes are
//! `record::event`'s): the per-thread pool of field buffers the builders
//! fill, and `write`.

use super::{field, op, Id, IdKind, Stack, Track, MAX_TRACK_DEPTH};
use crate::record::args::{
    tag_word, TraceValue, T_ARRAY, T_BOOL, T_DICT, T_INT, T_POINTER, T_UINT,
};
use crate::record::clock::ticks;
use crate::record::layout::{self};
use crate::record::registry::{with_current, ThreadRing};
use std::cell::RefCell;

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
