//! What the macros call: recording scopes, instants, counters and traced
//! futures into the calling thread's ring.

use crate::record::args::ArgList;
use crate::record::callsite::Callsite;
use crate::record::clock::ticks;
use crate::record::layout::{self, MAX_DEPTH};
use crate::record::registry::with_current;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

const INACTIVE: u32 = u32::MAX;

/// Ends the slice opened by [`trace_scope!`](crate::trace_scope) when dropped.
///
/// It is `!Send`: a slice begins and ends on one thread. For work that moves
/// between threads use `#[traced]` on an `async fn`, which records an async
/// range.
///
/// `trace_scope!` keeps its guard in a hidden local variable, so code
/// rarely names this type.
///
/// # Examples
///
/// ```
/// let guard = ringtrace::ScopeGuard::inactive();
/// assert!(!guard.is_recording());
/// drop(guard); // records nothing
/// ```
#[must_use = "the slice ends when the guard is dropped; bind it with `let _guard = ...`"]
pub struct ScopeGuard {
    depth: u32,
    _not_send: PhantomData<*const ()>,
}

impl ScopeGuard {
    /// A guard that records nothing (the scope's category was off).
    #[inline(always)]
    pub fn inactive() -> ScopeGuard {
        ScopeGuard {
            depth: INACTIVE,
            _not_send: PhantomData,
        }
    }

    /// Whether the begin of this scope was recorded.
    pub fn is_recording(&self) -> bool {
        self.depth != INACTIVE
    }
}

impl Drop for ScopeGuard {
    #[inline(always)]
    fn drop(&mut self) {
        if self.depth != INACTIVE {
            end_scope(self.depth);
        }
    }
}

/// Records the begin of a slice at `site` with `args`.
#[doc(hidden)]
#[inline(always)]
pub fn begin_scope<A: ArgList>(site: &'static Callsite, args: &A) -> ScopeGuard {
    with_current(|tr| {
        let depth = tr.depth.load(Ordering::Relaxed);
        let payload = site.id() as u64 | ((depth.min(MAX_DEPTH) as u64) << 24);
        let written = if tr.thread_time {
            begin_with_thread_time(tr, payload, args)
        } else {
            layout::write(&tr.ring, layout::KIND_BEGIN, payload, ticks(), &[], args)
        };
        if written {
            tr.depth.store(depth.saturating_add(1), Ordering::Relaxed);
            ScopeGuard {
                depth,
                _not_send: PhantomData,
            }
        } else {
            // The end will not be recorded either: count it as lost too, so
            // lost + written always adds up to what the program recorded.
            tr.ring.count_implied_drop();
            ScopeGuard::inactive()
        }
    })
    .unwrap_or_else(|| {
        crate::record::registry::count_implied_drop_without_ring();
        ScopeGuard::inactive()
    })
}

/// Out of line on purpose: it keeps `ScopeGuard`'s drop glue to a compare
/// and a call, small enough to be inlined at every `trace_scope!`, so that a
/// disabled scope costs no call at all (its guard's depth is the constant
/// `INACTIVE` and the compare folds away). An enabled scope pays one call here.
#[inline(never)]
fn end_scope(depth: u32) {
    with_current(|tr| {
        if tr.thread_time {
            end_with_thread_time(tr, depth);
        } else {
            let ts = ticks();
            layout::write(
                &tr.ring,
                layout::KIND_END,
                depth.min(MAX_DEPTH) as u64,
                ts,
                &[],
                &(),
            );
        }
        tr.depth.store(depth, Ordering::Relaxed);
    });
}

/// BEGIN_TT: a begin with the thread's CPU time (opt-in; a system call).
/// The thread time is read inside the wall-clock interval (after the begin's
/// timestamp, before the end's), so a slice's thread duration never exceeds
/// its duration.
#[inline(never)]
fn begin_with_thread_time<A: ArgList>(
    tr: &crate::record::registry::ThreadRing,
    payload: u64,
    args: &A,
) -> bool {
    let ts = ticks();
    let tts = crate::sys::thread_cpu_ns();
    layout::write(&tr.ring, layout::KIND_BEGIN_TT, payload, ts, &[tts], args)
}

/// END_TT: an end with the thread's CPU time (opt-in; a system call).
#[cold]
#[inline(never)]
fn end_with_thread_time(tr: &crate::record::registry::ThreadRing, depth: u32) {
    let tts = crate::sys::thread_cpu_ns();
    let ts = ticks();
    layout::write(
        &tr.ring,
        layout::KIND_END_TT,
        depth.min(MAX_DEPTH) as u64,
        ts,
        &[tts],
        &(),
    );
}

/// Records an instant event at `site`.
#[doc(hidden)]
#[inline(always)]
pub fn instant<A: ArgList>(site: &'static Callsite, args: &A) {
    with_current(|tr| {
        layout::write(
            &tr.ring,
            layout::KIND_INSTANT,
            site.id() as u64,
            ticks(),
            &[],
            args,
        )
    });
}

/// A counter sample: integers are recorded exactly, floats as `f64`.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CounterValue {
    Int(i64),
    Float(f64),
}

/// Types [`trace_counter!`](crate::trace_counter) and
/// [`Event::series`](crate::events::Event::series) accept: every primitive integer
/// (recorded exactly as an `i64`; `u64` and `usize` values above
/// `i64::MAX` wrap) and `f32` / `f64` (recorded as `f64`).
///
/// # Examples
///
/// ```
/// # let _trace = ringtrace::builder().writer(ringtrace::MemoryBuffer::new()).start().unwrap();
/// ringtrace::trace_counter!("threads", 8u8);
/// ringtrace::trace_counter!("load", 0.75f32);
/// ```
pub trait IntoCounterValue {
    #[doc(hidden)]
    fn into_counter_value(self) -> CounterValue;
}

macro_rules! counter_from {
    ($variant:ident $as:ty: $($t:ty),*) => {$(
        impl IntoCounterValue for $t {
            #[inline(always)]
            fn into_counter_value(self) -> CounterValue { CounterValue::$variant(self as $as) }
        }
    )*};
}
counter_from!(Int i64: i8, i16, i32, i64, isize, u8, u16, u32, u64, usize);
counter_from!(Float f64: f32, f64);

/// Records a counter value at `site`.
#[doc(hidden)]
#[inline(always)]
pub fn counter(site: &'static Callsite, value: impl IntoCounterValue) {
    let (kind, word) = match value.into_counter_value() {
        CounterValue::Int(v) => (layout::KIND_COUNTER_I64, v as u64),
        CounterValue::Float(v) => (layout::KIND_COUNTER_F64, v.to_bits()),
    };
    with_current(|tr| layout::write(&tr.ring, kind, site.id() as u64, ticks(), &[word], &()));
}

static NEXT_ASYNC_ID: AtomicU64 = AtomicU64::new(1);

pin_project_lite::pin_project! {
    /// A future whose whole life (first poll to completion or drop) is an
    /// async slice on a track of its own, and whose every poll is a slice on
    /// the thread that ran it. Made by `#[traced]` on an `async fn`.
    pub struct TracedFuture<F> {
        span: AsyncSpan,
        #[pin]
        inner: F,
    }
}

struct AsyncSpan {
    site: &'static Callsite,
    /// 0 until the first poll records the begin.
    id: u64,
    done: bool,
}

impl<F: Future> TracedFuture<F> {
    /// Wraps `inner`; nothing is recorded until the first poll.
    pub fn new(site: &'static Callsite, inner: F) -> Self {
        TracedFuture {
            span: AsyncSpan {
                site,
                id: 0,
                done: false,
            },
            inner,
        }
    }
}

impl<F: Future> Future for TracedFuture<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let span = this.span;
        if span.id == 0 && !span.done && span.site.is_enabled() {
            span.id = NEXT_ASYNC_ID.fetch_add(1, Ordering::Relaxed);
            let id = span.id;
            let site = span.site.id() as u64;
            with_current(|tr| {
                layout::write(
                    &tr.ring,
                    layout::KIND_ASYNC_BEGIN,
                    site,
                    ticks(),
                    &[id],
                    &(),
                )
            });
        }
        let _poll = if span.id != 0 {
            begin_scope(span.site, &())
        } else {
            ScopeGuard::inactive()
        };
        let out = this.inner.poll(cx);
        if out.is_ready() {
            span.finish();
        }
        out
    }
}

impl AsyncSpan {
    fn finish(&mut self) {
        if self.id != 0 && !self.done {
            let (site, id) = (self.site.id() as u64, self.id);
            with_current(|tr| {
                layout::write(&tr.ring, layout::KIND_ASYNC_END, site, ticks(), &[id], &())
            });
        }
        self.done = true;
    }
}

impl Drop for AsyncSpan {
    fn drop(&mut self) {
        self.finish(); // a future dropped before completion ends its range here
    }
}
