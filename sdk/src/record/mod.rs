//! The recording path: everything a thread runs when it records an event.
//!
//! A call site's cached on/off byte ([`callsite`]), the clock read
//! ([`clock`]), the argument words ([`args`]), the record layouts
//! ([`layout`]), the lock-free ring they go into ([`ring`]), and which ring
//! the calling thread owns ([`registry`]). [`scope`] is what the macros call.
//!
//! Rules of this layer:
//! - it knows no output format and no sink: it produces words in rings, and
//!   the flusher (`session`) hands them to an encoder (`encode`);
//! - it is the only place with lock-free `unsafe` code, and every lock-free
//!   hand-over in it is model-checked with loom (`loom_tests`, under
//!   `--cfg ringtrace_loom`, with the atomics of [`sync`]);
//! - after a thread's first event, nothing here takes a lock, allocates or
//!   makes a system call.
//!
//! The macros, the typed event API (`events`) and the `tracing` integration
//! reach the rings only through this module's functions (`scope`,
//! `layout::write`, `registry::with_current`).

pub(crate) mod args;
pub(crate) mod budget;
pub(crate) mod callsite;
pub(crate) mod clock;
pub(crate) mod layout;
pub(crate) mod registry;
pub(crate) mod ring;
pub(crate) mod scope;
pub(crate) mod sync;

#[cfg(all(test, ringtrace_loom))]
mod loom_tests;
