//! The old paths of items that moved, kept so code written against them
//! still builds (with a deprecation warning naming the new path). Each is an
//! alias of the item it names; none has behaviour of its own. To be removed
//! in a later release.
//!
//! The typed event API moved from the crate root to [`events`](crate::events)
//! (one path per item). `Event` and `Id` have no alias here: at the root
//! they met `tracing`'s `Event` and `Id` in code that glob-imports both
//! crates, which is what the move fixes.

use crate::events;

/// See [`events::AsyncRange`].
#[deprecated(since = "0.1.0", note = "moved: use `ringtrace::events::AsyncRange`")]
pub type AsyncRange = events::AsyncRange;

/// See [`events::Category`].
#[deprecated(since = "0.1.0", note = "moved: use `ringtrace::events::Category`")]
pub type Category = events::Category;

/// See [`events::Color`].
#[deprecated(since = "0.1.0", note = "moved: use `ringtrace::events::Color`")]
pub type Color = events::Color;

/// See [`events::ContextGuard`].
#[deprecated(since = "0.1.0", note = "moved: use `ringtrace::events::ContextGuard`")]
pub type ContextGuard = events::ContextGuard;

/// See [`events::CounterUnit`].
#[deprecated(since = "0.1.0", note = "moved: use `ringtrace::events::CounterUnit`")]
pub type CounterUnit = events::CounterUnit;

/// See [`events::Flow`].
#[deprecated(since = "0.1.0", note = "moved: use `ringtrace::events::Flow`")]
pub type Flow = events::Flow;

/// See [`events::Frame`].
#[deprecated(since = "0.1.0", note = "moved: use `ringtrace::events::Frame`")]
pub type Frame<'a> = events::Frame<'a>;

/// See [`events::IdKind`].
#[deprecated(since = "0.1.0", note = "moved: use `ringtrace::events::IdKind`")]
pub type IdKind = events::IdKind;

/// See [`events::InstantScope`].
#[deprecated(since = "0.1.0", note = "moved: use `ringtrace::events::InstantScope`")]
pub type InstantScope = events::InstantScope;

/// See [`events::SliceGuard`].
#[deprecated(since = "0.1.0", note = "moved: use `ringtrace::events::SliceGuard`")]
pub type SliceGuard = events::SliceGuard;

/// See [`events::Stack`].
#[deprecated(since = "0.1.0", note = "moved: use `ringtrace::events::Stack`")]
pub type Stack<'a> = events::Stack<'a>;

/// See [`events::Track`].
#[deprecated(since = "0.1.0", note = "moved: use `ringtrace::events::Track`")]
pub type Track = events::Track;

/// See [`events::TrackSliceGuard`].
#[deprecated(
    since = "0.1.0",
    note = "moved: use `ringtrace::events::TrackSliceGuard`"
)]
pub type TrackSliceGuard = events::TrackSliceGuard;

/// See [`events::clock_sync`].
#[deprecated(since = "0.1.0", note = "moved: use `ringtrace::events::clock_sync`")]
#[inline]
pub fn clock_sync(sync_id: &str) {
    events::clock_sync(sync_id)
}

/// See [`events::clock_sync_issued`].
#[deprecated(
    since = "0.1.0",
    note = "moved: use `ringtrace::events::clock_sync_issued`"
)]
#[inline]
pub fn clock_sync_issued(sync_id: &str, issue_ts_ns: u64) {
    events::clock_sync_issued(sync_id, issue_ts_ns)
}

/// See [`events::global_sample`].
#[deprecated(
    since = "0.1.0",
    note = "moved: use `ringtrace::events::global_sample`"
)]
#[inline]
pub fn global_sample(name: &str, weight: u64, cpu: Option<u32>, stack: events::Stack<'_>) {
    events::global_sample(name, weight, cpu, stack)
}

/// See [`events::set_process_labels`].
#[deprecated(
    since = "0.1.0",
    note = "moved: use `ringtrace::events::set_process_labels`"
)]
#[inline]
pub fn set_process_labels(labels: &[&str]) {
    events::set_process_labels(labels)
}

/// See [`events::set_process_name`].
#[deprecated(
    since = "0.1.0",
    note = "moved: use `ringtrace::events::set_process_name`"
)]
#[inline]
pub fn set_process_name(name: &str) {
    events::set_process_name(name)
}

/// See [`events::set_process_sort_index`].
#[deprecated(
    since = "0.1.0",
    note = "moved: use `ringtrace::events::set_process_sort_index`"
)]
#[inline]
pub fn set_process_sort_index(index: i32) {
    events::set_process_sort_index(index)
}

/// See [`events::set_thread_name`].
#[deprecated(
    since = "0.1.0",
    note = "moved: use `ringtrace::events::set_thread_name`"
)]
#[inline]
pub fn set_thread_name(name: &str) {
    events::set_thread_name(name)
}

/// See [`events::set_thread_sort_index`].
#[deprecated(
    since = "0.1.0",
    note = "moved: use `ringtrace::events::set_thread_sort_index`"
)]
#[inline]
pub fn set_thread_sort_index(index: i32) {
    events::set_thread_sort_index(index)
}
