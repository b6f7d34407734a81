//! # ringtrace
//!
//! An in-process tracing SDK: annotate code with [`trace_scope!`],
//! [`trace_instant!`], [`trace_counter!`] or [`#[traced]`](traced); ringtrace
//! records each event into the calling thread's lock-free ring buffer, and
//! a background flusher writes a trace that opens in
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
//! #[ringtrace::traced]
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
//! after a thread's first event. The measurements, against the clock and
//! against other tracers, and how to rerun them, are in the repository's
//! `BENCHMARKS.md`.
//!
//! ## Losing nothing silently
//!
//! A full ring drops new events (or, in flight-recorder mode, overwrites the
//! oldest); every loss is counted in [`Stats`] and marked in the trace at the
//! point it happened (an instant named `ringtrace: events lost` with the
//! count, and in Perfetto a sequence restart with `previous_packet_dropped`).
//!
//! The totals of a session are its [`Stats`]. Their *events* are trace
//! events, the file's own units: Perfetto writes a scope as two (begin and
//! end), Chrome JSON as one `X` (see [`Stats::events_written`]).
//!
//! ## Guides
//!
//! Longer pages, with examples, one per page of `sdk/docs/`:
//!
//! - [`guide::memory`]: the memory budget, how rings grow, what it covers.
//! - [`guide::capture_windows`]: files cut out of a running program
//!   ([`rotate_output`], [`dump_to`]).
//! - [`guide::exit_paths`]: what a trace holds after an exit, a panic, a
//!   kill or a full disk.
//! - [`guide::system_tracing`]: recording for Perfetto's `traced`.
//! - [`guide::archives`]: several processes on one timeline, the
//!   `ringtrace` command.
//! - [`guide::cpu_sampling`]: CPU stack samples beside the slices (feature
//!   `cpu-sampling`).
//! - [`guide::production`]: leaving it on in production: sampled requests,
//!   captures of slow ones, a bounded disk.
//!
//! The `log` bridge is documented in `ringtrace::log` (feature `log`).
//!
//! ## Event kinds by format
//!
//! | API | Perfetto | Chrome JSON |
//! | --- | --- | --- |
//! | `trace_scope!`, `#[traced]` | SLICE_BEGIN / SLICE_END on the thread track | `X` (complete) |
//! | `trace_instant!` | INSTANT on the thread track | `i` with `"s":"t"` |
//! | `trace_counter!` | COUNTER on a process counter track | `C` |
//! | `#[traced]` on `async fn` | slice on an async track + a slice per poll | `b`/`e` (`id2.local`) + `X` per poll |
//! | `tracing` spans / events (`Builder::layer`, feature `tracing`) | slices on the thread (+ an async track for spans that move) / INSTANT | `X` (+ `b`/`e`) / `i` |
//! | thread/process names | TrackDescriptor | `M` thread_name / process_name |
//! | lost events | `previous_packet_dropped` + instant with the count | instant with the count |
//!
//! ## Every phase of the Trace Event Format
//!
//! Beyond the macros, a [`Category`](events::Category) (a `static`, or [`category!`]) starts
//! an event of any phase with names, ids, stacks and args known at run time
//! (see [`events`]). Which JSON phases have a Perfetto counterpart, and how
//! each is written there:
//!
//! | JSON phase | API | Perfetto |
//! | --- | --- | --- |
//! | `X` complete (`dur`; `tts`/`tdur` with [`Builder::thread_time`]) | `trace_scope!`, `#[traced]`, [`Category::scope`](events::Category::scope), [`Category::complete`](events::Category::complete) | SLICE_BEGIN / SLICE_END on the thread track; thread time as `extra_counter_values` on the thread's `COUNTER_THREAD_TIME_NS` track; explicit times as absolute BOOTTIME timestamps |
//! | `B` / `E` ([`JsonScopes::BeginEnd`]; never mixed with `X`) | the same | the same |
//! | `i` with `s` `t` / `p` / `g` | `trace_instant!`, [`Category::instant`](events::Category::instant) + [`InstantScope`](events::InstantScope) | INSTANT on the thread / process / global (uuid 0) track |
//! | `C` with several series | `trace_counter!`, [`Category::counter`](events::Category::counter) | COUNTER on a process counter track per series (`<name>`, or `<name> <series>`); int or double; unit in the CounterDescriptor |
//! | `b` / `n` / `e` (`id`, `id2.local`/`.global`, `scope`) | [`Category::async_begin`](events::Category::async_begin) → [`AsyncRange`](events::AsyncRange) | SLICE_BEGIN / INSTANT / SLICE_END on a track per (category, scope, id): child of the process track for `id2.local`, global otherwise |
//! | `b` / `n` / `e` on a custom track | [`Category::track_scope`](events::Category::track_scope), [`Category::track_instant`](events::Category::track_instant), [`Track`](events::Track) | a TrackDescriptor per track with `parent_uuid` (nesting), `sibling_merge_behavior: NONE` |
//! | `s` / `t` / `f` (`bp: "e"`) | [`Category::flow`](events::Category::flow) → [`Flow`](events::Flow) | `flow_ids` (fixed64) on an INSTANT at the flow point inside the enclosing slice; `f` puts `terminating_flow_ids` on the next slice's begin (with `bp:"e"`: on an INSTANT in the enclosing slice) |
//! | `R` mark | [`Category::mark`](events::Category::mark) | INSTANT on the thread track |
//! | `M` process_name / process_labels / process_sort_index | [`Builder::process_name`], [`Builder::process_labels`], [`Builder::process_sort_index`], [`set_process_name`](events::set_process_name), [`set_process_labels`](events::set_process_labels), [`set_process_sort_index`](events::set_process_sort_index) | ProcessDescriptor `process_name`, `process_labels`, `legacy_sort_index` (+ the track's `sibling_order_rank`) |
//! | `M` thread_name / thread_sort_index | thread names, [`set_thread_name`](events::set_thread_name), [`set_thread_sort_index`](events::set_thread_sort_index) | ThreadDescriptor `thread_name`, `legacy_sort_index` (+ `sibling_order_rank`) |
//! | `sf` / `stack`, `esf` / `estack`, top-level `stackFrames` | [`Stack`](events::Stack) on slices, instants, samples | `callstack` (InlineCallstack, rootmost frame first) |
//! | `i` named `log` (args `message`, `level`, `source`) | [`trace_log!`] | INSTANT with a `LogMessage` (interned body, interned source location, priority) |
//! | `P` sample | [`Category::sample`](events::Category::sample) | JSON only |
//! | `N` / `O` / `D` objects (snapshot `base_type`, `cat`) | [`Category::object_created`](events::Category::object_created), [`Category::object_snapshot`](events::Category::object_snapshot), [`Category::object_destroyed`](events::Category::object_destroyed) | JSON only |
//! | `V` / `v` memory dumps | [`Category::global_memory_dump`](events::Category::global_memory_dump), [`Category::process_memory_dump`](events::Category::process_memory_dump) | JSON only |
//! | `c` clock sync (`sync_id`, `issue_ts`) | [`clock_sync`](events::clock_sync), [`clock_sync_issued`](events::clock_sync_issued) | JSON only (Perfetto relates clocks with ClockSnapshots) |
//! | `(` / `)` contexts | [`Category::context`](events::Category::context) | JSON only |
//! | `=` linked ids | [`Category::link_ids`](events::Category::link_ids) | JSON only |
//! | `cname` | `.color(`[`Color`](events::Color)`)` | JSON only |
//! | top-level `samples`, `displayTimeUnit`, `otherData`, other keys | [`global_sample`](events::global_sample), [`Builder::json_display_time_unit`], [`Builder::json_other_data`], [`Builder::json_metadata`] | JSON only |
//!
//! The JSON file is the bare array (`[` … events …), which stays loadable
//! when the process is killed (the format makes the closing `]` optional);
//! asking for top-level data selects the object form
//! (`{"traceEvents":[…],…}`), completed when the session stops. Events
//! stream out as they are drained; only the object form's `stackFrames`
//! (each distinct frame once) and `samples` wait for the end. `ts`, `dur`,
//! `tts` and `tdur` are microseconds with three decimals (nanoseconds kept);
//! `pid` and `tid` are the OS ids; strings are escaped (quotes, backslashes,
//! control characters; invalid UTF-8 replaced; non-ASCII raw, never
//! surrogate escapes); NaN and infinities are the strings `"NaN"`,
//! `"Infinity"` and `"-Infinity"`.
//!
//! ## Features
//!
//! | feature | default | what it adds |
//! | --- | --- | --- |
//! | `enable` | on | the instrumentation itself; off, every macro and `#[traced]` expand to nothing |
//! | `tracing` | on | [`Builder::layer`] and [`Builder::subscriber`]: `tracing` spans and events recorded by ringtrace; the builder's options of `tracing` spans ([`Builder::sample_ratio`], [`Builder::sample_roots`], [`Builder::sample_with`], [`Builder::capture_slow`]) |
//! | `log` | off | `ringtrace::log`: records of the `log` crate recorded as log instants |
//! | `cpu-sampling` | off | [`Builder::cpu_sampling`]: CPU stack samples of every thread (Linux x86_64), unwound and symbolized off the recording threads; brings an ELF reader, an `.eh_frame` unwinder and demangling |
//! | `otlp` | off | `Builder::otlp`: the spans of kept `tracing` requests sent to an OpenTelemetry collector (OTLP/HTTP, protobuf), and `ringtrace::context` (W3C trace context); implies `tracing`, adds no dependency |

#![deny(unsafe_op_in_unsafe_fn)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

pub mod archive;
#[cfg(feature = "otlp")]
#[cfg_attr(docsrs, doc(cfg(feature = "otlp")))]
pub mod context;
mod encode;
pub mod events;
#[cfg(feature = "log")]
pub mod log;
#[cfg(feature = "otlp")]
mod otlp;
mod output;
mod record;
mod sampling;
mod session;
mod stats;
mod sys;
// System tracing: a producer for Perfetto's tracing service (`traced`).
mod system;
#[cfg(feature = "tracing")]
mod tracing;

#[cfg(feature = "tracing")]
pub use crate::tracing::{RingtraceLayer, RingtraceSubscriber, SpanSlices};
pub use events::values::LogLevel;
/// How long a session's stop waits for the OTLP exporter to send the spans
/// still queued (feature `otlp`); what is not sent by then is dropped and
/// counted in [`Stats::otlp_spans_dropped`].
#[cfg(feature = "otlp")]
pub use otlp::STOP_TIMEOUT as OTLP_STOP_TIMEOUT;
pub use record::args::TraceValue;
pub use record::callsite::{category_enabled, disable_categories, enable_categories};
pub use record::scope::{IntoCounterValue, ScopeGuard, TracedFuture};
pub use ringtrace_macros::traced;
pub use sampling::CpuStacks;
pub use session::file::sink::MemoryBuffer;
pub use session::Stats;
pub use session::{
    builder, flush, init_from_env, is_recording, trigger, Builder, DisplayTimeUnit, Error, Format,
    JsonScopes, TraceGuard,
};
pub use session::{dump_to, rotate_output};

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

// Guides, from `sdk/docs/`: documentation only, their examples doc-tested.
#[cfg(any(doc, doctest))]
pub mod guide;

/// Items the macros expand to. Not a stable API.
#[doc(hidden)]
pub mod __private {
    pub use crate::events::log;
    pub use crate::record::args::{ArgList, WordSink};
    pub use crate::record::callsite::Callsite;
    pub use crate::record::scope::{
        begin_scope, counter, instant, CounterValue, ScopeGuard, TracedFuture,
    };
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
        let site = $crate::__callsite!($category, $name $(, $key)*);
        if site.is_enabled() {
            $crate::__private::begin_scope(site, &($(&$value,)*))
        } else {
            $crate::__private::ScopeGuard::inactive()
        }
    }};
}

/// The `&'static Callsite` of the macro's use site (file, line, module),
/// with its argument names: what every recording macro and `#[traced]` on
/// `async fn` check and record with.
#[doc(hidden)]
#[macro_export]
macro_rules! __callsite {
    ($category:expr, $name:expr $(, $key:ident)*) => {{
        static __RINGTRACE_SITE: $crate::__private::Callsite = $crate::__private::Callsite::new(
            $category,
            $name,
            ::core::file!(),
            ::core::line!(),
            ::core::module_path!(),
            &[$(::core::stringify!($key)),*],
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

/// Records an instant event on the calling thread (compiled out: the `enable` feature is off).
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
        let site = $crate::__callsite!($category, $name $(, $key)*);
        if site.is_enabled() {
            $crate::__private::instant(site, &($(&$value,)*));
        }
    }};
}

/// Records a counter value (integer or float) on a process-wide counter
/// track named after the counter.
///
/// Forms: `trace_counter!(name, value)` or `trace_counter!(category, name,
/// value)`; names and categories are string literals and `value` is any
/// [`IntoCounterValue`]. The value is evaluated only when the category is
/// enabled.
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

/// Records a counter value (compiled out: the `enable` feature is off).
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
        let site = $crate::__callsite!($category, $name);
        if site.is_enabled() {
            $crate::__private::counter(site, $value);
        }
    }};
}

/// Records a log message on the calling thread: in Perfetto a `LogMessage`
/// (interned body and source location, priority) on an instant of the
/// thread track, shown in the Android-logs table and the log panel; in JSON
/// an `i` instant named `log` with args `message`, `level` and `source`.
///
/// Forms: `trace_log!(level, format, args...)` (category `"log"`) or
/// `trace_log!(category, level, format, args...)`. The message is formatted
/// only when the category is enabled, into a reused per-thread buffer.
///
/// # Examples
///
/// ```
/// use ringtrace::LogLevel;
/// # let _trace = ringtrace::builder().writer(ringtrace::MemoryBuffer::new()).start().unwrap();
/// let disk = "sda";
/// ringtrace::trace_log!(LogLevel::Warn, "disk {disk} is {}% full", 93);
/// ringtrace::trace_log!("storage", LogLevel::Info, "flushed");
/// ```
#[cfg(feature = "enable")]
#[macro_export]
macro_rules! trace_log {
    ($category:literal, $level:expr, $($fmt:tt)+) => {
        $crate::__log!($category, $level, $($fmt)+)
    };
    ($level:expr, $($fmt:tt)+) => {
        $crate::__log!("log", $level, $($fmt)+)
    };
}

/// Records a log message on the calling thread (compiled out: the `enable` feature is off).
#[cfg(not(feature = "enable"))]
#[macro_export]
macro_rules! trace_log {
    ($($tt:tt)*) => {};
}

#[doc(hidden)]
#[cfg(feature = "enable")]
#[macro_export]
macro_rules! __log {
    ($category:expr, $level:expr, $($fmt:tt)+) => {{
        let site = $crate::__callsite!($category, "log");
        if site.is_enabled() {
            $crate::__private::log(site, $level, ::core::format_args!($($fmt)+));
        }
    }};
}

/// A `&'static` [`Category`](events::Category) named by a string literal, without declaring a
/// `static` by hand (one per use site).
///
/// # Examples
///
/// ```
/// # let _trace = ringtrace::builder().writer(ringtrace::MemoryBuffer::new()).start().unwrap();
/// ringtrace::category!("gpu").instant("present").emit();
/// ```
#[cfg(feature = "enable")]
#[macro_export]
macro_rules! category {
    ($name:literal) => {{
        static __RINGTRACE_CATEGORY: $crate::events::Category =
            $crate::events::Category::new($name);
        &__RINGTRACE_CATEGORY
    }};
}

/// A `&'static` [`Category`](events::Category) (compiled out: the `enable` feature is off;
/// every category is off and its events are no-ops).
#[cfg(not(feature = "enable"))]
#[macro_export]
macro_rules! category {
    ($name:literal) => {
        &$crate::events::DEFAULT
    };
}
