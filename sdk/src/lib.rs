//! # ringtrace
//!
//! An in-process tracing SDK: annotate code with [`trace_scope!`],
//! [`trace_instant!`], [`trace_counter!`] or [`#[trace]`](trace); ringtrace
//! records each event into the calling thread's lock-free ring buffer in
//! nanoseconds, and a background flusher writes a trace that opens in
//! [Perfetto](https://ui.perfetto.dev) (`.pftrace`) or any Chrome Trace Event
//! Format viewer (`.json`).
//!
//! ## Quickstart
//!
//! ```
//! # let dir = std::env::temp_dir();
//! # let path = dir.join("ringtrace-doc-quickstart.pftrace");
//! // Record until `_trace` is dropped; the file is complete then.
//! let _trace = ringtrace::builder().output(&path).start()?;
//!
//! #[ringtrace::trace]
//! fn compute(x: u32) -> u32 {
//!     ringtrace::trace_scope!("math", "add_one", x = x);
//!     x + 1
//! }
//!
//! for i in 0..3 {
//!     ringtrace::trace_counter!("iteration", i);
//!     compute(i);
//! }
//! ringtrace::trace_instant!("done");
//! # Ok::<(), ringtrace::Error>(())
//! ```
//!
//! Open the file at <https://ui.perfetto.dev> ("Open trace file").
//!
//! ## Cost
//!
//! With a category off, an event costs one relaxed atomic load and a branch.
//! With it on: a timestamp read (the invariant TSC, or the vDSO clock) and a
//! few stores into the thread's ring. No lock, allocation or system call
//! after a thread's first event. See `benches/` and the README for numbers.
//!
//! ## Losing nothing silently
//!
//! A full ring drops new events (or, in flight-recorder mode, overwrites the
//! oldest); every loss is counted in [`Stats`] and marked in the trace at the
//! point it happened (an instant named `ringtrace: events lost` with the
//! count, and in Perfetto a sequence restart with `previous_packet_dropped`).
//!
//! ## Event kinds by format
//!
//! | API | Perfetto | Chrome JSON |
//! | --- | --- | --- |
//! | `trace_scope!`, `#[trace]` | SLICE_BEGIN / SLICE_END on the thread track | `X` (complete) |
//! | `trace_instant!` | INSTANT on the thread track | `i` with `"s":"t"` |
//! | `trace_counter!` | COUNTER on a process counter track | `C` |
//! | `#[trace]` on `async fn` | slice on an async track + a slice per poll | `b`/`e` (`id2.local`) + `X` per poll |
//! | thread/process names | TrackDescriptor | `M` thread_name / process_name |
//! | lost events | `previous_packet_dropped` + instant with the count | instant with the count |

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]
#![allow(missing_docs)] // TODO(docs): document every public item (issue: adoption)

mod args;
mod callsite;
mod clock;
mod encode;
mod flusher;
mod record;
mod registry;
mod ring;
mod scope;
mod session;
mod signals;
mod sink;
mod sync;
mod sys;

#[cfg(all(test, ringtrace_loom))]
mod loom_tests;

pub use args::TraceValue;
pub use callsite::{category_enabled, disable_categories, enable_categories};
pub use flusher::Stats;
pub use ringtrace_macros::trace;
pub use scope::{IntoCounterValue, ScopeGuard, TracedFuture};
pub use session::{
    builder, flush, init_from_env, is_recording, Builder, Error, Format, TraceGuard,
};
pub use sink::MemoryBuffer;

/// The trace clock now: CLOCK_BOOTTIME in nanoseconds (MONOTONIC where there
/// is no BOOTTIME). Event timestamps in both formats are on this clock
/// (JSON `ts` is this value in microseconds).
///
/// # Examples
///
/// ```
/// let a = ringtrace::trace_clock_ns();
/// let b = ringtrace::trace_clock_ns();
/// assert!(b >= a);
/// ```
pub fn trace_clock_ns() -> u64 {
    sys::boottime_ns()
}

/// Items the macros expand to. Not a stable API.
#[doc(hidden)]
pub mod __private {
    pub use crate::args::{ArgList, WordSink};
    pub use crate::callsite::{Callsite, CallsiteKind};
    pub use crate::scope::{begin_scope, counter, instant, CounterValue, ScopeGuard, TracedFuture};
}

/// Records a slice from here to the end of the enclosing block.
///
/// Forms: `trace_scope!(name)`, `trace_scope!(category, name)`, each
/// optionally followed by `key = value` arguments (any [`TraceValue`]).
/// Names and categories are string literals. Argument expressions are
/// evaluated only when the category is enabled, and borrowed, not moved.
///
/// # Examples
///
/// ```
/// fn parse(buf: &[u8]) {
///     ringtrace::trace_scope!("parse");
///     ringtrace::trace_scope!("io", "read", bytes = buf.len());
///     // ... both slices end here, inner first
/// }
/// parse(b"abc");
/// ```
#[cfg(feature = "enable")]
#[macro_export]
macro_rules! trace_scope {
    ($category:literal, $name:literal $(, $key:ident = $value:expr)* $(,)?) => {
        let __ringtrace_scope = $crate::__scope_guard!($category, $name $(, $key = $value)*);
    };
    ($name:literal $(, $key:ident = $value:expr)* $(,)?) => {
        let __ringtrace_scope = $crate::__scope_guard!("default", $name $(, $key = $value)*);
    };
}

/// Records a slice from here to the end of the enclosing block (compiled out:
/// the `enable` feature is off).
#[cfg(not(feature = "enable"))]
#[macro_export]
macro_rules! trace_scope {
    ($($tt:tt)*) => {};
}

/// The guard of a scope, as an expression: `let g = __scope_guard!(cat, name, k = v);`.
#[doc(hidden)]
#[cfg(feature = "enable")]
#[macro_export]
macro_rules! __scope_guard {
    ($category:expr, $name:expr $(, $key:ident = $value:expr)*) => {{
        static __RINGTRACE_SITE: $crate::__private::Callsite = $crate::__private::Callsite::new(
            $category,
            $name,
            ::core::file!(),
            ::core::line!(),
            ::core::module_path!(),
            &[$(::core::stringify!($key)),*],
            $crate::__private::CallsiteKind::Scope,
        );
        if __RINGTRACE_SITE.is_enabled() {
            $crate::__private::begin_scope(&__RINGTRACE_SITE, &($(&$value,)*))
        } else {
            $crate::__private::ScopeGuard::inactive()
        }
    }};
}

/// A `&'static Callsite` for `#[trace]` on `async fn`.
#[doc(hidden)]
#[macro_export]
macro_rules! __callsite {
    ($category:expr, $name:expr) => {{
        static __RINGTRACE_SITE: $crate::__private::Callsite = $crate::__private::Callsite::new(
            $category,
            $name,
            ::core::file!(),
            ::core::line!(),
            ::core::module_path!(),
            &[],
            $crate::__private::CallsiteKind::Scope,
        );
        &__RINGTRACE_SITE
    }};
}

/// Records an instant event on the calling thread.
///
/// Forms as [`trace_scope!`]: `trace_instant!(name, k = v, ...)` or
/// `trace_instant!(category, name, k = v, ...)`.
///
/// # Examples
///
/// ```
/// ringtrace::trace_instant!("checkpoint", stage = 2);
/// ringtrace::trace_instant!("net", "connected", peer = "10.0.0.1:80");
/// ```
#[cfg(feature = "enable")]
#[macro_export]
macro_rules! trace_instant {
    ($category:literal, $name:literal $(, $key:ident = $value:expr)* $(,)?) => {
        $crate::__instant!($category, $name $(, $key = $value)*)
    };
    ($name:literal $(, $key:ident = $value:expr)* $(,)?) => {
        $crate::__instant!("default", $name $(, $key = $value)*)
    };
}

#[cfg(not(feature = "enable"))]
#[macro_export]
macro_rules! trace_instant {
    ($($tt:tt)*) => {};
}

#[doc(hidden)]
#[cfg(feature = "enable")]
#[macro_export]
macro_rules! __instant {
    ($category:expr, $name:expr $(, $key:ident = $value:expr)*) => {{
        static __RINGTRACE_SITE: $crate::__private::Callsite = $crate::__private::Callsite::new(
            $category,
            $name,
            ::core::file!(),
            ::core::line!(),
            ::core::module_path!(),
            &[$(::core::stringify!($key)),*],
            $crate::__private::CallsiteKind::Instant,
        );
        if __RINGTRACE_SITE.is_enabled() {
            $crate::__private::instant(&__RINGTRACE_SITE, &($(&$value,)*));
        }
    }};
}

/// Records a counter value (integer or float) on a process-wide counter
/// track named after the counter.
///
/// # Examples
///
/// ```
/// ringtrace::trace_counter!("queue_depth", 17);
/// ringtrace::trace_counter!("mem", "heap_mb", 12.5);
/// ```
#[cfg(feature = "enable")]
#[macro_export]
macro_rules! trace_counter {
    ($category:literal, $name:literal, $value:expr $(,)?) => {
        $crate::__counter!($category, $name, $value)
    };
    ($name:literal, $value:expr $(,)?) => {
        $crate::__counter!("default", $name, $value)
    };
}

#[cfg(not(feature = "enable"))]
#[macro_export]
macro_rules! trace_counter {
    ($($tt:tt)*) => {};
}

#[doc(hidden)]
#[cfg(feature = "enable")]
#[macro_export]
macro_rules! __counter {
    ($category:expr, $name:expr, $value:expr) => {{
        static __RINGTRACE_SITE: $crate::__private::Callsite = $crate::__private::Callsite::new(
            $category,
            $name,
            ::core::file!(),
            ::core::line!(),
            ::core::module_path!(),
            &[],
            $crate::__private::CallsiteKind::Counter,
        );
        if __RINGTRACE_SITE.is_enabled() {
            $crate::__private::counter(&__RINGTRACE_SITE, $value);
        }
    }};
}
