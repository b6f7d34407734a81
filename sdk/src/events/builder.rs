//! `Event<P>`: the builder of one event, typed by its phase so that only the
//! options that phase has can be set.

use super::{
    field, op, write, write_on, AsyncRange, Category, Color, CounterUnit, Fields, InstantScope,
    SliceGuard, Stack, Track, TrackSliceGuard,
};
use crate::record::args::TraceValue;
use crate::record::layout::MAX_DEPTH;
use crate::record::registry::with_current;
use crate::record::scope::{CounterValue, IntoCounterValue};
use std::fmt;
use std::marker::PhantomData;
use std::sync::atomic::Ordering;

/// Marker types of the phases an [`Event`] builder can be, and the traits
/// saying which options each phase takes.
pub mod phase {
    /// A slice from [`Category::scope`](crate::events::Category::scope) (`X`, or `B`/`E`).
    #[derive(Debug)]
    pub struct Slice;
    /// A complete event with explicit times (`X`).
    #[derive(Debug)]
    pub struct Complete;
    /// An instant (`i`).
    #[derive(Debug)]
    pub struct Instant;
    /// A counter (`C`).
    #[derive(Debug)]
    pub struct Counter;
    /// An async begin (`b`).
    #[derive(Debug)]
    pub struct AsyncBegin;
    /// An async instant or end (`n`, `e`).
    #[derive(Debug)]
    pub struct Async;
    /// A sample (`P`).
    #[derive(Debug)]
    pub struct Sample;
    /// An object created or destroyed (`N`, `D`).
    #[derive(Debug)]
    pub struct Object;
    /// An object snapshot (`O`).
    #[derive(Debug)]
    pub struct Snapshot;
    /// A memory dump (`V`, `v`).
    #[derive(Debug)]
    pub struct MemoryDump;
    /// A mark (`R`).
    #[derive(Debug)]
    pub struct Mark;
    /// A slice on a custom track.
    #[derive(Debug)]
    pub struct TrackSlice;
    /// An instant on a custom track.
    #[derive(Debug)]
    pub struct TrackInstant;

    mod sealed {
        pub trait Sealed {}
    }
    macro_rules! sealed {
        ($($t:ident),*) => {$(impl sealed::Sealed for $t {})*};
    }
    sealed!(
        Slice,
        Complete,
        Instant,
        Counter,
        AsyncBegin,
        Async,
        Sample,
        Object,
        Snapshot,
        MemoryDump,
        Mark,
        TrackSlice,
        TrackInstant
    );

    /// Phases that carry `args`.
    pub trait Args: sealed::Sealed {}
    /// Phases that carry a stack trace (`sf` / `stack`).
    pub trait Stacked: sealed::Sealed {}
    /// Phases that carry a color (`cname`).
    pub trait Colored: sealed::Sealed {}
    /// Phases written with [`Event::emit`](crate::events::Event::emit).
    pub trait Emit: sealed::Sealed {}

    macro_rules! has {
        ($tr:ident: $($t:ident),*) => {$(impl $tr for $t {})*};
    }
    has!(Args: Slice, Complete, Instant, AsyncBegin, Async, Sample, MemoryDump, Mark, TrackSlice, TrackInstant);
    has!(Stacked: Slice, Complete, Instant, Sample);
    has!(Colored: Slice, Complete, Instant, AsyncBegin, Async, Sample, Mark, TrackSlice, TrackInstant);
    has!(Emit: Complete, Instant, Counter, Async, Sample, Object, Snapshot, MemoryDump, Mark, TrackInstant);
}

/// An event being built; `P` is its phase (see [`phase`]). Nothing is
/// recorded until [`emit`](Event::emit) (or [`begin`](Event::begin) for a
/// slice). A builder of a disabled category does nothing.
///
/// # Examples
///
/// ```
/// use ringtrace::events::{Category, Frame, Stack};
/// static APP: Category = Category::new("app");
/// # let _trace = ringtrace::builder().writer(ringtrace::MemoryBuffer::new()).start().unwrap();
/// let frames = [Frame::new("main", "app"), Frame::new("load", "app")];
/// APP.instant("loaded").arg("files", 3).stack(Stack::Frames(&frames)).emit();
/// ```
#[must_use = "an event is recorded only when emitted"]
pub struct Event<P> {
    /// None when the category is off.
    pub(super) fields: Option<Fields>,
    pub(super) site: u32,
    pub(super) op: u8,
    /// The custom track of a track slice (for its end).
    pub(super) track: Option<&'static Track>,
    pub(super) _phase: PhantomData<P>,
}

impl<P> fmt::Debug for Event<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Event")
            .field("phase", &std::any::type_name::<P>())
            .field("recording", &self.fields.is_some())
            .finish()
    }
}

impl<P> Drop for Event<P> {
    fn drop(&mut self) {
        if let Some(f) = self.fields.take() {
            f.give();
        }
    }
}

impl<P> Event<P> {
    pub(super) fn new(cat: &'static Category, op: u8) -> Event<P> {
        let fields = cat.is_enabled().then(Fields::take);
        Event {
            fields,
            site: cat.site.id(),
            op,
            track: None,
            _phase: PhantomData,
        }
    }

    pub(super) fn with(mut self, f: impl FnOnce(&mut Fields)) -> Self {
        if let Some(fields) = self.fields.as_mut() {
            f(fields);
        }
        self
    }

    /// Whether this event will be recorded (its category is on).
    pub fn is_recording(&self) -> bool {
        self.fields.is_some()
    }

    fn write(mut self, thread_time: bool) -> bool {
        match self.fields.as_mut() {
            Some(f) => write(self.site, self.op, f, thread_time),
            None => false,
        }
    }
}

impl<P: phase::Args> Event<P> {
    /// Adds an argument (`args.<key>`; a Perfetto debug annotation). Any
    /// [`TraceValue`]: numbers, strings, bools, options, arrays, maps.
    pub fn arg(self, key: &str, value: impl TraceValue) -> Self {
        self.with(|f| f.arg(key, &value))
    }
}

impl<P: phase::Stacked> Event<P> {
    /// The stack at the event (or at the start of a slice): `sf` or `stack`.
    pub fn stack(self, stack: Stack<'_>) -> Self {
        self.with(|f| f.stack(false, stack))
    }
}

impl<P: phase::Colored> Event<P> {
    /// A fixed color (`cname`).
    pub fn color(self, color: Color) -> Self {
        self.with(|f| f.str(field::CNAME, color.0))
    }
}

impl<P: phase::Emit> Event<P> {
    /// Records the event now.
    pub fn emit(self) {
        self.write(false);
    }
}

impl Event<phase::Instant> {
    /// How far the instant reaches (`"s"`): thread (default), process, global.
    /// Stacks are kept only on thread-scoped instants (the format's rule).
    pub fn scope(self, scope: InstantScope) -> Self {
        self.with(|f| {
            if scope != InstantScope::Thread {
                f.uint(field::INSTANT_SCOPE, scope as u64)
            }
        })
    }
}

impl Event<phase::Complete> {
    /// The stack at the end of the slice (`esf` / `estack`).
    pub fn end_stack(self, stack: Stack<'_>) -> Self {
        self.with(|f| f.stack(true, stack))
    }

    /// Thread CPU time at the start and thread CPU duration, ns (`tts`, `tdur`).
    pub fn thread_time(self, start_ns: u64, dur_ns: u64) -> Self {
        self.with(|f| {
            f.uint(field::TTS, start_ns);
            f.uint(field::TDUR, dur_ns);
        })
    }
}

impl Event<phase::Counter> {
    /// Adds a series (one of the stacked values of the counter). Integers
    /// are recorded exactly, floats as `f64`.
    pub fn series(self, name: &str, value: impl IntoCounterValue) -> Self {
        self.with(|f| match value.into_counter_value() {
            CounterValue::Int(v) => f.arg(name, &v),
            CounterValue::Float(v) => f.arg(name, &v),
        })
    }

    /// A counter with one series: named `value` in JSON; in Perfetto the
    /// track is named after the counter alone, like [`trace_counter!`](crate::trace_counter).
    pub fn value(self, value: impl IntoCounterValue) -> Self {
        self.series("value", value)
    }

    /// Makes `name` + `id` the counter's identity (`"id"`).
    pub fn id(self, id: u64) -> Self {
        self.with(|f| f.uint(field::COUNTER_ID, id))
    }

    /// The unit of the values (Perfetto only).
    pub fn unit(self, unit: CounterUnit) -> Self {
        self.with(|f| {
            f.uint(field::UNIT, unit.code());
            if let CounterUnit::Named(n) = unit {
                f.str(field::UNIT_NAME, n);
            }
        })
    }
}

impl Event<phase::Snapshot> {
    /// The base type the snapshot's type derives from (`snapshot.base_type`),
    /// when the snapshot is named after a subtype.
    pub fn base_type(self, base: &str) -> Self {
        self.with(|f| f.str(field::BASE_TYPE, base))
    }

    /// The snapshot's own category (`snapshot.cat`), when it differs from
    /// the category of the object's `N`/`D` events.
    pub fn snapshot_category(self, cat: &str) -> Self {
        self.with(|f| f.str(field::SNAPSHOT_CATEGORY, cat))
    }
}

impl Event<phase::AsyncBegin> {
    /// Records the begin now; the returned handle ends the range (it does
    /// not end it when dropped: async ranges outlive scopes).
    pub fn emit(self) -> AsyncRange {
        let site = self.site;
        let (id, name) = match self.fields.as_ref() {
            Some(f) => {
                // NAME is the first field: [NAME, str tag, bytes...].
                let len = f.words.get(1).map_or(0, |t| (t >> 8) as usize);
                let end = (2 + len.div_ceil(8)).min(f.words.len());
                let mut name = Fields::take();
                name.words.extend_from_slice(&f.words[..end]);
                (f.id, Some(name))
            }
            None => (None, None),
        };
        self.write(false);
        AsyncRange { site, id, name }
    }
}

impl Event<phase::Slice> {
    /// Records the begin now; the slice ends when the guard drops (or at
    /// [`SliceGuard::end`]). With [`Builder::thread_time`](crate::Builder::thread_time)
    /// on, both ends carry the thread's CPU time.
    pub fn begin(mut self) -> SliceGuard {
        let Some(fields) = self.fields.as_mut() else {
            return SliceGuard::inactive();
        };
        let site = self.site;
        with_current(|tr| {
            let depth = tr.depth.load(Ordering::Relaxed);
            // DEPTH goes first so encoders can pair ends without decoding more.
            let mut head = Fields::take();
            head.uint(field::DEPTH, depth.min(MAX_DEPTH) as u64);
            fields.seal();
            head.words.extend_from_slice(&fields.words);
            let ok = write_on(tr, site, op::SCOPE_BEGIN, &mut head, true);
            head.give();
            if ok {
                tr.depth.store(depth.saturating_add(1), Ordering::Relaxed);
                SliceGuard {
                    depth,
                    end: None,
                    _not_send: PhantomData,
                }
            } else {
                tr.ring.count_implied_drop();
                SliceGuard::inactive()
            }
        })
        .unwrap_or_else(SliceGuard::inactive)
    }
}

impl Event<phase::TrackSlice> {
    /// Records the begin now; the slice ends when the guard drops, on
    /// whatever thread that is (slices on one track must nest).
    pub fn begin(self) -> TrackSliceGuard {
        let site = self.site;
        let name = self.fields.as_ref().map(|f| {
            // NAME is the first field: [NAME, str tag, bytes...].
            let len = f.words.get(1).map_or(0, |t| (t >> 8) as usize);
            let end = (2 + len.div_ceil(8)).min(f.words.len());
            let mut name = Fields::take();
            name.words.extend_from_slice(&f.words[..end]);
            name
        });
        let track = self.track;
        self.write(false);
        TrackSliceGuard { site, track, name }
    }
}
