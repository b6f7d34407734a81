//! The recording path: everything a thread runs when it records an event.
//!
//! A call site's cached on/off byte ([`callsite`]), the clock read
//! ([`clock`]), the argument words ([`args`]), the record layouts
//! ([`layout`]) with their header word ([`header`]) and the EVENT record's
//! codes ([`event`]), the lock-free ring they go into ([`ring`]), the memory
//! of its segments ([`segment`]), the budget that memory is taken from, with
//! the pool of segments reused ([`budget`]), and which ring the calling
//! thread owns ([`registry`]). [`scope`] is what the macros call.
//!
//! Rules of this layer:
//! - it knows no output format and no sink: it produces words in rings, and
//!   the flusher (`session`) hands them to an encoder (`encode`); the meaning
//!   of a record (header, layouts, EVENT codes) is defined here, and the
//!   encoders take it from here;
//! - imports go one way: `segment`, `header`, `event`, `pattern` (the one
//!   matcher of `prefix*` patterns) and `sync` are leaves;
//!   `budget` (its byte count and its pool) uses `segment`; `ring` uses
//!   `budget`, `segment` and `header`; `layout` the ring; `registry` the
//!   ring and the budget; `scope` all of them. No module here imports one
//!   that imports it;
//! - it is the only place with lock-free `unsafe` code, and every lock-free
//!   hand-over in it is model-checked with loom (`loom_tests`, under
//!   `--cfg ringtrace_loom`, with the atomics of [`sync`]);
//! - after a thread's first event, the fast path takes no lock, allocates
//!   nothing and makes no system call; the slow path of a ring that must grow
//!   takes a spare or pooled segment (one CAS), else maps a new one (`mmap`,
//!   `madvise`) and maps it in 256 KiB at a time as the thread reaches it, and a thread that records again after its
//!   session ended takes the registry's lock once to give its old ring back.
//!
//! The macros, the typed event API (`events`) and the `tracing` integration
//! reach the rings only through this module's functions (`scope`,
//! `layout::write`, `registry::with_current`).

pub(crate) mod args;
pub(crate) mod budget;
pub(crate) mod callsite;
pub(crate) mod clock;
pub(crate) mod event;
pub(crate) mod header;
pub(crate) mod layout;
pub(crate) mod pattern;
pub(crate) mod registry;
pub(crate) mod ring;
pub(crate) mod scope;
pub(crate) mod segment;
pub(crate) mod sync;

#[cfg(all(test, ringtrace_loom))]
mod loom_tests;
