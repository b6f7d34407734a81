//! The values events carry: ids, stacks, colors, instant scopes, counter
//! units, log levels (defined with the EVENT record's codes, in
//! `record::event`, which the encoders read them from).

pub use crate::record::event::LogLevel;

/// An id of an async range, object, flow context or memory dump.
///
/// The Trace Event Format writes it as `"id": "0x…"` or, with an explicit
/// process-local or global scope, `"id2": {"local": "0x…"}` /
/// `"id2": {"global": "0x…"}`; an optional [`scope`](Id::with_scope) string
/// keeps ids of different kinds apart (`"scope": "…"`).
///
/// By the format's rules a plain `id` is global for async events and
/// process-local for objects.
///
/// # Examples
///
/// ```
/// use ringtrace::events::Id;
/// let a = Id::new(0x1000);
/// let b = Id::local(7).with_scope("requests");
/// let c = Id::global(42);
/// assert_eq!(a.value(), 0x1000);
/// assert_ne!(b, Id::local(7));
/// # let _ = c;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Id {
    pub(super) value: u64,
    pub(super) kind: IdKind,
    pub(super) scope: Option<&'static str>,
}

/// How an [`Id`] is scoped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum IdKind {
    /// `"id"`: the format's default for the phase.
    Default = 0,
    /// `"id2": {"local": …}`: unique within the process.
    Local = 1,
    /// `"id2": {"global": …}`: unique across processes.
    Global = 2,
}

impl Id {
    /// A plain `id`.
    pub const fn new(value: u64) -> Id {
        Id {
            value,
            kind: IdKind::Default,
            scope: None,
        }
    }

    /// A process-local id (`id2.local`).
    pub const fn local(value: u64) -> Id {
        Id {
            value,
            kind: IdKind::Local,
            scope: None,
        }
    }

    /// A global id (`id2.global`).
    pub const fn global(value: u64) -> Id {
        Id {
            value,
            kind: IdKind::Global,
            scope: None,
        }
    }

    /// The id of the object at `ptr` (its address, a plain `id`).
    pub fn from_ptr<T: ?Sized>(ptr: *const T) -> Id {
        Id::new(ptr.cast::<()>() as usize as u64)
    }

    /// The same id in a named scope (`"scope"`).
    pub const fn with_scope(self, scope: &'static str) -> Id {
        Id {
            scope: Some(scope),
            ..self
        }
    }

    /// The id's numeric value.
    pub fn value(&self) -> u64 {
        self.value
    }

    /// How the id is scoped: plain `id`, `id2.local` or `id2.global`.
    pub fn kind(&self) -> IdKind {
        self.kind
    }

    /// The id's named scope (`"scope"`), if [`with_scope`](Id::with_scope)
    /// gave it one.
    pub fn scope(&self) -> Option<&'static str> {
        self.scope
    }
}

/// A stack trace attached to an event (`sf` / `stack`, and at the end of a
/// slice `esf` / `estack`). Entries are rootmost first.
///
/// * [`Stack::Frames`]: named frames. In the JSON object form they go to the
///   trace's `stackFrames` dictionary (each distinct frame once, with its
///   parent) and the event refers to the leaf with `sf`; in the bare-array
///   form (which has no dictionary) they are written inline as a `stack` of
///   frame names.
/// * [`Stack::Raw`]: any strings, written as a `stack` array. Hex strings
///   (`"0x1234"`) are program counters to viewers.
/// * [`Stack::Addresses`]: program counters, written as `"0x…"` strings.
///
/// In Perfetto a stack is the event's `callstack` (frames by function name).
///
/// # Examples
///
/// ```
/// use ringtrace::events::{Frame, Stack};
/// let frames = [Frame::new("main", "app"), Frame::new("parse", "app")];
/// let s = Stack::Frames(&frames);
/// let raw = Stack::Addresses(&[0x401000, 0x401234]);
/// # let _ = (s, raw);
/// ```
#[derive(Debug, Clone, Copy)]
pub enum Stack<'a> {
    /// Named frames, rootmost first.
    Frames(&'a [Frame<'a>]),
    /// Any strings, rootmost first (`"0x…"` strings read as program counters).
    Raw(&'a [&'a str]),
    /// Program counters, rootmost first.
    Addresses(&'a [u64]),
}

/// A named stack frame: `{"name": …, "category": …}` in `stackFrames`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Frame<'a> {
    /// The frame's name (usually a function name).
    pub name: &'a str,
    /// What the frame belongs to (a library, a module).
    pub category: &'a str,
}

impl<'a> Frame<'a> {
    /// A frame named `name` in `category`.
    pub const fn new(name: &'a str, category: &'a str) -> Frame<'a> {
        Frame { name, category }
    }
}

/// A fixed color for an event (`cname`): one of the trace viewer's reserved
/// color names. JSON only (Perfetto colors slices by name).
///
/// Each constant's documentation gives the name written as `cname`.
///
/// # Examples
///
/// ```
/// use ringtrace::events::{Category, Color};
/// static BUILD: Category = Category::new("build");
/// # let _trace = ringtrace::builder().writer(ringtrace::MemoryBuffer::new()).start().unwrap();
/// BUILD.instant("tests failed").color(Color::BAD).emit();
/// assert_eq!(Color::BAD.name(), "bad");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Color(pub(super) &'static str);

impl Color {
    /// `"good"`.
    pub const GOOD: Color = Color("good");
    /// `"bad"`.
    pub const BAD: Color = Color("bad");
    /// `"terrible"`.
    pub const TERRIBLE: Color = Color("terrible");
    /// `"generic_work"`.
    pub const GENERIC_WORK: Color = Color("generic_work");
    /// `"black"`.
    pub const BLACK: Color = Color("black");
    /// `"grey"`.
    pub const GREY: Color = Color("grey");
    /// `"white"`.
    pub const WHITE: Color = Color("white");
    /// `"yellow"`.
    pub const YELLOW: Color = Color("yellow");
    /// `"olive"`.
    pub const OLIVE: Color = Color("olive");
    /// `"startup"`.
    pub const STARTUP: Color = Color("startup");
    /// `"vsync_highlight_color"`.
    pub const VSYNC_HIGHLIGHT: Color = Color("vsync_highlight_color");
    /// `"rail_response"`.
    pub const RAIL_RESPONSE: Color = Color("rail_response");
    /// `"rail_animation"`.
    pub const RAIL_ANIMATION: Color = Color("rail_animation");
    /// `"rail_idle"`.
    pub const RAIL_IDLE: Color = Color("rail_idle");
    /// `"rail_load"`.
    pub const RAIL_LOAD: Color = Color("rail_load");
    /// `"thread_state_running"`.
    pub const THREAD_STATE_RUNNING: Color = Color("thread_state_running");
    /// `"thread_state_runnable"`.
    pub const THREAD_STATE_RUNNABLE: Color = Color("thread_state_runnable");
    /// `"thread_state_sleeping"`.
    pub const THREAD_STATE_SLEEPING: Color = Color("thread_state_sleeping");
    /// `"thread_state_iowait"`.
    pub const THREAD_STATE_IOWAIT: Color = Color("thread_state_iowait");
    /// `"thread_state_uninterruptible"`.
    pub const THREAD_STATE_UNINTERRUPTIBLE: Color = Color("thread_state_uninterruptible");
    /// `"thread_state_unknown"`.
    pub const THREAD_STATE_UNKNOWN: Color = Color("thread_state_unknown");
    /// `"light_memory_dump"`.
    pub const LIGHT_MEMORY_DUMP: Color = Color("light_memory_dump");
    /// `"detailed_memory_dump"`.
    pub const DETAILED_MEMORY_DUMP: Color = Color("detailed_memory_dump");
    /// `"background_memory_dump"`.
    pub const BACKGROUND_MEMORY_DUMP: Color = Color("background_memory_dump");
    /// `"cq_build_running"`.
    pub const CQ_BUILD_RUNNING: Color = Color("cq_build_running");
    /// `"cq_build_passed"`.
    pub const CQ_BUILD_PASSED: Color = Color("cq_build_passed");
    /// `"cq_build_failed"`.
    pub const CQ_BUILD_FAILED: Color = Color("cq_build_failed");
    /// `"cq_build_abandoned"`.
    pub const CQ_BUILD_ABANDONED: Color = Color("cq_build_abandoned");

    /// The reserved name written as `cname`.
    pub fn name(&self) -> &'static str {
        self.0
    }
}

/// How far an instant event reaches (`"s"`): its thread (default), all
/// threads of its process, or the whole trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum InstantScope {
    /// The calling thread (`"s": "t"`; the thread's track in Perfetto).
    #[default]
    Thread = 0,
    /// Every thread of the process (`"s": "p"`; the process's track in
    /// Perfetto).
    Process = 1,
    /// The whole trace (`"s": "g"`; the global track in Perfetto).
    Global = 2,
}

/// The unit of a counter, for Perfetto's counter track (`CounterDescriptor`);
/// JSON counters have no unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CounterUnit {
    /// Nanoseconds (`UNIT_TIME_NS`).
    TimeNs,
    /// A count (`UNIT_COUNT`).
    Count,
    /// Bytes (`UNIT_SIZE_BYTES`).
    Bytes,
    /// Any other unit, by name (`unit_name`).
    Named(&'static str),
}

impl CounterUnit {
    pub(super) fn code(self) -> u64 {
        match self {
            CounterUnit::TimeNs => 1,
            CounterUnit::Count => 2,
            CounterUnit::Bytes => 3,
            CounterUnit::Named(_) => 0,
        }
    }
}

// ---------------------------------------------------------------------------
// Categories and the typed builders
