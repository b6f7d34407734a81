//! The typed event API: every phase of the Chrome Trace Event Format, with
//! names, ids, stacks and args known only at run time.
//!
//! The macros ([`trace_scope!`](crate::trace_scope), [`trace_instant!`](crate::trace_instant),
//! [`trace_counter!`](crate::trace_counter)) cover the common events with
//! static names at the lowest cost. Everything else starts from a
//! [`Category`]: a `static` with a cached on/off state, like a macro's call
//! site. Its methods return a builder typed by the event's phase
//! ([`Event<P>`](Event)), so only the options that phase has can be set:
//!
//! ```
//! use ringtrace::events::{Category, Id, InstantScope};
//! static NET: Category = Category::new("net");
//!
//! # let _trace = ringtrace::builder().writer(ringtrace::MemoryBuffer::new()).start().unwrap();
//! let peer = "10.0.0.1:80";
//! NET.instant("connected").scope(InstantScope::Process).arg("peer", peer).emit();
//! NET.counter("sockets").series("open", 3).series("closing", 1).emit();
//! let req = NET.async_begin("request", Id::local(7)).arg("url", "/index").emit();
//! {
//!     let _s = NET.scope(&format!("parse {peer}")).begin(); // a slice with a dynamic name
//! }
//! req.end();
//! ```
//!
//! Arguments of these builders are evaluated before the category is
//! checked; wrap expensive ones in `if NET.is_enabled() { ... }`.
//!
//! # Records
//!
//! Each event is one `EVENT` record in the thread's ring (see `record`):
//! `[hdr(site | op << 24), ts, fields...]`, where `site` is the category's
//! call site id (0: none), `op` one of `record::event::op` and the fields a sequence of
//! `[field id, value]` (ids in `record::event::field`, values in the `args` word
//! encoding). Builders collect the fields in a buffer taken from a small
//! per-thread pool, so an event allocates nothing once the pool is warm.
//! Records are bounded like all others: one larger than a ring's limit is
//! dropped and counted as oversized.

//!
//! # Modules
//!
//! This module holds [`Category`], where every event starts; [`Event<P>`](Event)
//! builds one event (`builder`); `slices` ends slices later (on the thread or
//! a custom [`Track`]); `ranges` ties places together (async ranges, flows,
//! contexts); `metadata` has the events without a category; `values` the
//! ids, stacks and other values events carry; `wire` writes the EVENT record.
//! Like the macros, this API reaches the rings only through the recording
//! path's functions (`record::registry::with_current`, `record::layout::write`).

#![forbid(unsafe_code)]

mod builder;
mod metadata;
mod ranges;
mod slices;
pub(crate) mod values;
pub(crate) mod wire;

pub use builder::{phase, Event};
pub use metadata::{
    clock_sync, clock_sync_issued, global_sample, log, set_process_labels, set_process_name,
    set_process_sort_index, set_thread_name, set_thread_sort_index,
};
pub use ranges::{AsyncRange, ContextGuard, Flow};
pub use slices::{SliceGuard, Track, TrackSliceGuard, MAX_TRACK_DEPTH};
pub use values::{Color, CounterUnit, Frame, Id, IdKind, InstantScope, Stack};
// `LogLevel` is the crate root's (it is `trace_log!`'s level).
pub(crate) use values::LogLevel;
use wire::{write, write_now, write_on, Fields};

use crate::record::args::TraceValue;
use crate::record::callsite::Callsite;
use crate::record::event::{field, op};
use std::fmt;
use std::marker::PhantomData;

/// A category of the typed event API: a `static` with a cached on/off state
/// (one relaxed load when off), switched by the category filter like the
/// macros' categories.
///
/// Its methods start an event of one phase of the Trace Event Format; see
/// the [module docs](crate::events) and the crate's table of phases.
///
/// # Examples
///
/// ```
/// static RENDER: ringtrace::events::Category = ringtrace::events::Category::new("render");
/// # let _trace = ringtrace::builder().writer(ringtrace::MemoryBuffer::new()).start().unwrap();
/// if RENDER.is_enabled() {
///     RENDER.mark("first_paint").emit();
/// }
/// // Or without a named static:
/// ringtrace::category!("render").instant("vsync").emit();
/// ```
pub struct Category {
    site: Callsite,
}

/// The category `"default"` (that of the macros without one).
pub static DEFAULT: Category = Category::new("default");

impl Category {
    /// A category named `name` (a comma-separated list is allowed, as in
    /// the format's `cat`).
    pub const fn new(name: &'static str) -> Category {
        Category {
            site: Callsite::new(name, "", "", 0, "", &[]),
        }
    }

    /// The category's name.
    pub fn name(&self) -> &'static str {
        self.site.category()
    }

    /// Whether events of this category are recorded now (one relaxed load).
    /// Always false with the crate's `enable` feature off: every event of
    /// the typed API is then a no-op the compiler removes.
    #[inline(always)]
    pub fn is_enabled(&'static self) -> bool {
        cfg!(feature = "enable") && self.site.is_enabled()
    }

    fn event<P>(&'static self, op: u8, name: Option<&str>) -> Event<P> {
        let ev = Event::new(self, op);
        match name {
            Some(n) => ev.with(|f| f.str(field::NAME, n)),
            None => ev,
        }
    }

    /// A slice on the calling thread from [`begin`](Event::begin) until the
    /// guard drops: `X` by default, `B`/`E` with
    /// [`JsonScopes::BeginEnd`](crate::JsonScopes); SLICE_BEGIN/END in Perfetto.
    /// The name may be built at run time.
    ///
    /// # Examples
    ///
    /// ```
    /// static IO: ringtrace::events::Category = ringtrace::events::Category::new("io");
    /// # let _trace = ringtrace::builder().writer(ringtrace::MemoryBuffer::new()).start().unwrap();
    /// let file = "data.bin";
    /// let mut g = IO.scope(&format!("read {file}")).arg("file", file).begin();
    /// g.end_arg("bytes", 4096u64);
    /// drop(g);
    /// ```
    pub fn scope(&'static self, name: &str) -> Event<phase::Slice> {
        self.event(op::SCOPE_BEGIN, Some(name))
    }

    /// A complete slice with explicit times on the trace clock
    /// ([`trace_clock_ns`](crate::trace_clock_ns)): `X` with `dur` (`B`+`E`
    /// in [`JsonScopes::BeginEnd`](crate::JsonScopes) files). It must nest
    /// properly with the other slices of the calling thread.
    ///
    /// # Examples
    ///
    /// ```
    /// static GC: ringtrace::events::Category = ringtrace::events::Category::new("gc");
    /// # let _trace = ringtrace::builder().writer(ringtrace::MemoryBuffer::new()).start().unwrap();
    /// let start = ringtrace::trace_clock_ns();
    /// // ... the work, measured elsewhere ...
    /// let dur = ringtrace::trace_clock_ns() - start;
    /// GC.complete("collect", start, dur).arg("freed", 4096).emit();
    /// ```
    pub fn complete(
        &'static self,
        name: &str,
        start_ns: u64,
        dur_ns: u64,
    ) -> Event<phase::Complete> {
        self.event::<phase::Complete>(op::COMPLETE, Some(name))
            .with(|f| {
                f.uint(field::TS, start_ns);
                f.uint(field::DUR, dur_ns);
            })
    }

    /// An instant (`i`), thread-scoped unless [`scope`](Event::scope) says otherwise.
    pub fn instant(&'static self, name: &str) -> Event<phase::Instant> {
        self.event(op::INSTANT, Some(name))
    }

    /// A counter (`C`) with one or more series: see [`Event::series`].
    /// Counters are process-wide.
    ///
    /// # Examples
    ///
    /// ```
    /// use ringtrace::events::{Category, CounterUnit};
    /// static MEM: Category = Category::new("mem");
    /// # let _trace = ringtrace::builder().writer(ringtrace::MemoryBuffer::new()).start().unwrap();
    /// MEM.counter("heap").value(1u64 << 20).unit(CounterUnit::Bytes).emit();
    /// MEM.counter("pools").series("small", 10).series("large", 2.5).emit();
    /// ```
    pub fn counter(&'static self, name: &str) -> Event<phase::Counter> {
        self.event(op::COUNTER, Some(name))
    }

    /// Begins an async range (`b`): work that is not tied to one thread's
    /// stack. Events with the same category, name scope and id form a tree;
    /// nest ranges by reusing the id.
    pub fn async_begin(&'static self, name: &str, id: Id) -> Event<phase::AsyncBegin> {
        self.event::<phase::AsyncBegin>(op::ASYNC_BEGIN, Some(name))
            .with(|f| f.id(id))
    }

    /// An instant of async range `id` (`n`).
    pub fn async_instant(&'static self, name: &str, id: Id) -> Event<phase::Async> {
        self.event::<phase::Async>(op::ASYNC_INSTANT, Some(name))
            .with(|f| f.id(id))
    }

    /// Ends the async range `name` of `id` (`e`); prefer [`AsyncRange::end`].
    pub fn async_end(&'static self, name: &str, id: Id) -> Event<phase::Async> {
        self.event::<phase::Async>(op::ASYNC_END, Some(name))
            .with(|f| f.id(id))
    }

    /// A slice on the custom track `track` (see [`Track`]), from
    /// [`begin`](Event::begin) until its guard drops on any thread.
    pub fn track_scope(
        &'static self,
        track: &'static Track,
        name: &str,
    ) -> Event<phase::TrackSlice> {
        let mut ev = self.event::<phase::TrackSlice>(op::TRACK_BEGIN, Some(name));
        ev.track = Some(track);
        ev.with(|f| f.track(track))
    }

    /// An instant on the custom track `track`.
    pub fn track_instant(
        &'static self,
        track: &'static Track,
        name: &str,
    ) -> Event<phase::TrackInstant> {
        self.event::<phase::TrackInstant>(op::TRACK_INSTANT, Some(name))
            .with(|f| f.track(track))
    }

    /// A flow named `name` with `id` in this category (see [`Flow`]).
    pub fn flow(&'static self, name: &'static str, id: u64) -> Flow {
        Flow {
            cat: self,
            name,
            id,
        }
    }

    /// A sample (`P`): a point of a sampling profile on the calling thread,
    /// usually with a [`stack`](Event::stack). JSON only.
    ///
    /// # Examples
    ///
    /// ```
    /// use ringtrace::events::{Category, Frame, Stack};
    /// static PROF: Category = Category::new("profiler");
    /// # let _trace = ringtrace::builder().writer(ringtrace::MemoryBuffer::new()).start().unwrap();
    /// let frames = [Frame::new("main", "app"), Frame::new("hash", "app")];
    /// PROF.sample("cpu").stack(Stack::Frames(&frames)).emit();
    /// ```
    pub fn sample(&'static self, name: &str) -> Event<phase::Sample> {
        self.event(op::SAMPLE, Some(name))
    }

    /// Object `id` of type `name` was created (`N`). JSON only.
    ///
    /// # Examples
    ///
    /// ```
    /// use ringtrace::events::{Category, Id};
    /// use std::collections::BTreeMap;
    /// static OBJ: Category = Category::new("objects");
    /// # let _trace = ringtrace::builder().writer(ringtrace::MemoryBuffer::new()).start().unwrap();
    /// let cache = vec![0u8; 64];
    /// let id = Id::from_ptr(cache.as_ptr());
    /// OBJ.object_created("Cache", id).emit();
    /// OBJ.object_snapshot("Cache", id, BTreeMap::from([("len", cache.len())])).emit();
    /// OBJ.object_destroyed("Cache", id).emit();
    /// ```
    pub fn object_created(&'static self, name: &str, id: Id) -> Event<phase::Object> {
        self.event::<phase::Object>(op::OBJECT_NEW, Some(name))
            .with(|f| f.id(id))
    }

    /// A snapshot of object `id` (`O`): `snapshot` is its state, usually a
    /// map. JSON only.
    pub fn object_snapshot(
        &'static self,
        name: &str,
        id: Id,
        snapshot: impl TraceValue,
    ) -> Event<phase::Snapshot> {
        self.event::<phase::Snapshot>(op::OBJECT_SNAPSHOT, Some(name))
            .with(|f| {
                f.id(id);
                f.value(field::SNAPSHOT, &snapshot);
            })
    }

    /// Object `id` of type `name` was destroyed (`D`). JSON only.
    pub fn object_destroyed(&'static self, name: &str, id: Id) -> Event<phase::Object> {
        self.event::<phase::Object>(op::OBJECT_DELETE, Some(name))
            .with(|f| f.id(id))
    }

    /// A global memory dump (`V`): system-wide memory figures as args; all
    /// dumps taken together share `dump_id`. JSON only.
    ///
    /// # Examples
    ///
    /// ```
    /// use ringtrace::events::{Category, Id};
    /// static MEM: Category = Category::new("memory");
    /// # let _trace = ringtrace::builder().writer(ringtrace::MemoryBuffer::new()).start().unwrap();
    /// let dump = Id::global(9);
    /// MEM.global_memory_dump("periodic", dump).arg("total_kb", 8_000_000u64).emit();
    /// MEM.process_memory_dump("periodic", dump).arg("rss_kb", 120_000u64).emit();
    /// ```
    pub fn global_memory_dump(&'static self, name: &str, dump_id: Id) -> Event<phase::MemoryDump> {
        self.event::<phase::MemoryDump>(op::MEMORY_GLOBAL, Some(name))
            .with(|f| f.id(dump_id))
    }

    /// A process memory dump (`v`): this process's memory figures as args.
    /// JSON only.
    pub fn process_memory_dump(&'static self, name: &str, dump_id: Id) -> Event<phase::MemoryDump> {
        self.event::<phase::MemoryDump>(op::MEMORY_PROCESS, Some(name))
            .with(|f| f.id(dump_id))
    }

    /// A mark (`R`): a named point in time, like a navigation timing mark.
    pub fn mark(&'static self, name: &str) -> Event<phase::Mark> {
        self.event(op::MARK, Some(name))
    }

    /// Enters context `id` of type `name` on this thread (`(`) until the
    /// guard drops (`)`). JSON only.
    ///
    /// # Examples
    ///
    /// ```
    /// use ringtrace::events::{Category, Id};
    /// static FRAMES: Category = Category::new("frames");
    /// # let _trace = ringtrace::builder().writer(ringtrace::MemoryBuffer::new()).start().unwrap();
    /// {
    ///     let _ctx = FRAMES.context("FrameContext", Id::new(0x42));
    ///     ringtrace::trace_scope!("layout"); // inside the context
    /// } // left here
    /// ```
    pub fn context(&'static self, name: &'static str, id: Id) -> ContextGuard {
        self.context_enter(name, id);
        ContextGuard {
            cat: self,
            name,
            id,
            _not_send: PhantomData,
        }
    }

    /// Enters context `id` (`(`); pair with [`Category::context_leave`].
    pub fn context_enter(&'static self, name: &str, id: Id) {
        self.one_off(op::CONTEXT_ENTER, name, id, None)
    }

    /// Leaves context `id` (`)`).
    pub fn context_leave(&'static self, name: &str, id: Id) {
        self.one_off(op::CONTEXT_LEAVE, name, id, None)
    }

    /// Declares that `id` and `linked` name the same thing (`=`). JSON only.
    pub fn link_ids(&'static self, name: &str, id: Id, linked: Id) {
        self.one_off(op::LINK_IDS, name, id, Some(linked))
    }

    fn one_off(&'static self, op: u8, name: &str, id: Id, linked: Option<Id>) {
        if self.is_enabled() {
            write_now(self.site.id(), op, |f| {
                f.str(field::NAME, name);
                f.id(id);
                if let Some(l) = linked {
                    f.uint(field::LINKED_ID, l.value);
                }
            });
        }
    }
}

impl fmt::Debug for Category {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Category").field(&self.name()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encode::event::EventView;

    #[test]
    fn fields_decode_back() {
        let mut f = Fields::take();
        f.str(field::NAME, "req");
        f.id(Id::local(7).with_scope("s"));
        f.arg("k", &5u32);
        f.arg("s", &"v");
        f.stack(false, Stack::Frames(&[Frame::new("main", "app")]));
        f.str(field::CNAME, Color::GOOD.name());
        f.seal();
        let v = EventView::decode(&f.words);
        assert_eq!(v.name.as_deref(), Some("req"));
        let id = v.id.unwrap();
        assert_eq!((id.value, id.kind, id.scope.as_deref()), (7, 1, Some("s")));
        assert_eq!(v.cname.as_deref(), Some("good"));
        assert!(v.args.is_some());
        assert_eq!(
            v.stack_frames.as_deref(),
            Some(&[("main".to_string(), "app".to_string())][..])
        );
    }
}
