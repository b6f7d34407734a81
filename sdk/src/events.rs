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
//! use ringtrace::{Category, Id, InstantScope};
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
//! call site id (0: none), `op` one of `events::op` and the fields a sequence of
//! `[field id, value]` (ids in `events::field`, values in the `args` word
//! encoding). Builders collect the fields in a buffer taken from a small
//! per-thread pool, so an event allocates nothing once the pool is warm.
//! Records are bounded like all others: one larger than a ring's limit is
//! dropped and counted as oversized.

#![forbid(unsafe_code)]

use crate::args::{tag_word, TraceValue, T_ARRAY, T_BOOL, T_DICT, T_INT, T_POINTER, T_UINT};
use crate::callsite::{Callsite, CallsiteKind};
use crate::clock::ticks;
use crate::record::{self, MAX_DEPTH};
use crate::registry::{with_current, ThreadRing};
use crate::scope::{CounterValue, IntoCounterValue};
use std::cell::RefCell;
use std::fmt;
use std::marker::PhantomData;
use std::sync::atomic::Ordering;

/// Phase codes of EVENT records (8 bits).
pub(crate) mod op {
    pub(crate) const SCOPE_BEGIN: u8 = 1;
    pub(crate) const SCOPE_END: u8 = 2;
    pub(crate) const COMPLETE: u8 = 3;
    pub(crate) const INSTANT: u8 = 4;
    pub(crate) const COUNTER: u8 = 5;
    pub(crate) const ASYNC_BEGIN: u8 = 6;
    pub(crate) const ASYNC_INSTANT: u8 = 7;
    pub(crate) const ASYNC_END: u8 = 8;
    pub(crate) const FLOW_START: u8 = 9;
    pub(crate) const FLOW_STEP: u8 = 10;
    pub(crate) const FLOW_END: u8 = 11;
    pub(crate) const SAMPLE: u8 = 12;
    pub(crate) const OBJECT_NEW: u8 = 13;
    pub(crate) const OBJECT_SNAPSHOT: u8 = 14;
    pub(crate) const OBJECT_DELETE: u8 = 15;
    pub(crate) const MEMORY_GLOBAL: u8 = 16;
    pub(crate) const MEMORY_PROCESS: u8 = 17;
    pub(crate) const MARK: u8 = 18;
    pub(crate) const CLOCK_SYNC: u8 = 19;
    pub(crate) const CONTEXT_ENTER: u8 = 20;
    pub(crate) const CONTEXT_LEAVE: u8 = 21;
    pub(crate) const LINK_IDS: u8 = 22;
    pub(crate) const THREAD_NAME: u8 = 23;
    pub(crate) const THREAD_SORT_INDEX: u8 = 24;
    pub(crate) const PROCESS_NAME: u8 = 25;
    pub(crate) const PROCESS_LABELS: u8 = 26;
    pub(crate) const PROCESS_SORT_INDEX: u8 = 27;
    pub(crate) const GLOBAL_SAMPLE: u8 = 28;
    pub(crate) const LOG: u8 = 29;
    pub(crate) const TRACK_BEGIN: u8 = 30;
    pub(crate) const TRACK_END: u8 = 31;
    pub(crate) const TRACK_INSTANT: u8 = 32;
}

/// Field ids of EVENT records; each is followed by one value.
pub(crate) mod field {
    /// str: the event's name.
    pub(crate) const NAME: u64 = 1;
    /// uint: nesting depth of a slice begin / end (pairs them, see `ScopeStack`).
    pub(crate) const DEPTH: u64 = 2;
    /// dict: args with their names.
    pub(crate) const ARGS: u64 = 3;
    /// array of str / pointer: a raw stack, rootmost first.
    pub(crate) const STACK: u64 = 4;
    /// array of str, (name, category) pairs: a stack of frames, rootmost first.
    pub(crate) const STACK_FRAMES: u64 = 5;
    pub(crate) const END_STACK: u64 = 6;
    pub(crate) const END_STACK_FRAMES: u64 = 7;
    /// str: a reserved color name.
    pub(crate) const CNAME: u64 = 8;
    /// uint: thread CPU time, ns.
    pub(crate) const TTS: u64 = 9;
    /// uint: thread CPU duration, ns.
    pub(crate) const TDUR: u64 = 10;
    /// uint: an explicit timestamp (trace clock ns), instead of the record's.
    pub(crate) const TS: u64 = 11;
    /// uint: duration, ns.
    pub(crate) const DUR: u64 = 12;
    /// uint: 0 thread, 1 process, 2 global.
    pub(crate) const INSTANT_SCOPE: u64 = 13;
    /// uint: an id's value.
    pub(crate) const ID: u64 = 14;
    /// uint: 0 `id`, 1 `id2.local`, 2 `id2.global`.
    pub(crate) const ID_KIND: u64 = 15;
    /// str: the id's `scope`.
    pub(crate) const ID_SCOPE: u64 = 16;
    /// uint: a `CounterUnit` code.
    pub(crate) const UNIT: u64 = 18;
    /// str: a custom unit name.
    pub(crate) const UNIT_NAME: u64 = 19;
    /// bool: a flow end binds to the enclosing slice (`"bp":"e"`).
    pub(crate) const BIND_ENCLOSING: u64 = 20;
    /// any: an object snapshot.
    pub(crate) const SNAPSHOT: u64 = 21;
    pub(crate) const BASE_TYPE: u64 = 22;
    pub(crate) const SNAPSHOT_CATEGORY: u64 = 23;
    pub(crate) const LINKED_ID: u64 = 24;
    /// str: clock sync id.
    pub(crate) const SYNC_ID: u64 = 26;
    /// uint: trace clock ns.
    pub(crate) const ISSUE_TS: u64 = 27;
    /// int.
    pub(crate) const SORT_INDEX: u64 = 28;
    /// array of str.
    pub(crate) const LABELS: u64 = 29;
    pub(crate) const CPU: u64 = 30;
    pub(crate) const WEIGHT: u64 = 31;
    /// uint: a `LogLevel`'s Perfetto priority.
    pub(crate) const LEVEL: u64 = 32;
    /// str.
    pub(crate) const MESSAGE: u64 = 33;
    /// uint: a counter's id.
    pub(crate) const COUNTER_ID: u64 = 34;
    /// array of str: a custom track's path, root first.
    pub(crate) const TRACK: u64 = 35;
}

// ---------------------------------------------------------------------------
// Field buffers

/// The fields of one event being built, and its args (kept apart until the
/// event is written, when they become one ARGS dict).
struct Fields {
    words: Vec<u64>,
    args: Vec<u64>,
    nargs: u64,
    /// The last id written (kept for the steps of an async range).
    id: Option<Id>,
}

/// Buffers larger than this are freed rather than pooled.
const MAX_POOLED_WORDS: usize = 1 << 13;
const POOL_SIZE: usize = 4;

thread_local! {
    static POOL: RefCell<Vec<Fields>> = const { RefCell::new(Vec::new()) };
}

impl Fields {
    fn take() -> Fields {
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

    fn give(mut self) {
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

    fn str(&mut self, f: u64, s: &str) {
        self.words.push(f);
        s.encode(&mut self.words);
    }

    fn uint(&mut self, f: u64, v: u64) {
        self.words.extend_from_slice(&[f, T_UINT, v]);
    }

    fn int(&mut self, f: u64, v: i64) {
        self.words.extend_from_slice(&[f, T_INT, v as u64]);
    }

    fn flag(&mut self, f: u64) {
        self.words.extend_from_slice(&[f, tag_word(T_BOOL, 1)]);
    }

    fn value(&mut self, f: u64, v: &dyn TraceValue) {
        self.words.push(f);
        v.encode(&mut self.words);
    }

    fn id(&mut self, id: Id) {
        self.id = Some(id);
        self.uint(field::ID, id.value);
        if id.kind != IdKind::Default {
            self.uint(field::ID_KIND, id.kind as u64);
        }
        if let Some(scope) = id.scope {
            self.str(field::ID_SCOPE, scope);
        }
    }

    fn track(&mut self, track: &'static Track) {
        let mut path: [&str; MAX_TRACK_DEPTH] = [""; MAX_TRACK_DEPTH];
        let n = track.path(&mut path);
        self.words.push(field::TRACK);
        self.words.push(tag_word(T_ARRAY, n as u64));
        for name in &path[..n] {
            name.encode(&mut self.words);
        }
    }

    fn arg(&mut self, key: &str, value: &dyn TraceValue) {
        key.encode(&mut self.args);
        value.encode(&mut self.args);
        self.nargs += 1;
    }

    fn stack(&mut self, end: bool, stack: Stack<'_>) {
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
    fn seal(&mut self) {
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
fn write(site: u32, op: u8, fields: &mut Fields, thread_time: bool) -> bool {
    fields.seal();
    with_current(|tr| write_on(tr, site, op, fields, thread_time)).unwrap_or(false)
}

fn write_on(tr: &ThreadRing, site: u32, op: u8, fields: &mut Fields, thread_time: bool) -> bool {
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
    record::write(
        &tr.ring,
        record::KIND_EVENT,
        payload,
        ts,
        &fields.words,
        &(),
    )
}

/// Writes a one-off EVENT record built by `f` (no builder).
fn write_now(site: u32, op: u8, f: impl FnOnce(&mut Fields)) {
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
/// use ringtrace::Id;
/// let a = Id::new(0x1000);
/// let b = Id::local(7).with_scope("requests");
/// let c = Id::global(42);
/// assert_eq!(a.value(), 0x1000);
/// assert_ne!(b, Id::local(7));
/// # let _ = c;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Id {
    value: u64,
    kind: IdKind,
    scope: Option<&'static str>,
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
/// use ringtrace::{Frame, Stack};
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
/// use ringtrace::{Category, Color};
/// static BUILD: Category = Category::new("build");
/// # let _trace = ringtrace::builder().writer(ringtrace::MemoryBuffer::new()).start().unwrap();
/// BUILD.instant("tests failed").color(Color::BAD).emit();
/// assert_eq!(Color::BAD.name(), "bad");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Color(&'static str);

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
    fn code(self) -> u64 {
        match self {
            CounterUnit::TimeNs => 1,
            CounterUnit::Count => 2,
            CounterUnit::Bytes => 3,
            CounterUnit::Named(_) => 0,
        }
    }
}

/// Severity of a log message ([`trace_log!`](crate::trace_log)); the values
/// are Perfetto's `LogMessage.prio` (Android log priorities).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LogLevel {
    /// Priority 2 (`PRIO_VERBOSE`).
    Verbose = 2,
    /// Priority 3 (`PRIO_DEBUG`).
    Debug = 3,
    /// Priority 4 (`PRIO_INFO`).
    Info = 4,
    /// Priority 5 (`PRIO_WARN`).
    Warn = 5,
    /// Priority 6 (`PRIO_ERROR`).
    Error = 6,
    /// Priority 7 (`PRIO_FATAL`).
    Fatal = 7,
}

impl LogLevel {
    /// The level from a Perfetto priority (out of range: `Info`).
    pub(crate) fn from_prio(p: u64) -> LogLevel {
        match p {
            2 => LogLevel::Verbose,
            3 => LogLevel::Debug,
            5 => LogLevel::Warn,
            6 => LogLevel::Error,
            7 => LogLevel::Fatal,
            _ => LogLevel::Info,
        }
    }

    /// `"VERBOSE"`, `"DEBUG"`, `"INFO"`, `"WARN"`, `"ERROR"`, `"FATAL"`: the
    /// `level` arg of a JSON log event.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(ringtrace::LogLevel::Warn.as_str(), "WARN");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Verbose => "VERBOSE",
            LogLevel::Debug => "DEBUG",
            LogLevel::Info => "INFO",
            LogLevel::Warn => "WARN",
            LogLevel::Error => "ERROR",
            LogLevel::Fatal => "FATAL",
        }
    }
}

// ---------------------------------------------------------------------------
// Categories and the typed builders

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
/// static RENDER: ringtrace::Category = ringtrace::Category::new("render");
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

/// Marker types of the phases an [`Event`] builder can be, and the traits
/// saying which options each phase takes.
pub mod phase {
    /// A slice from [`Category::scope`](crate::Category::scope) (`X`, or `B`/`E`).
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
    /// Phases written with [`Event::emit`](crate::Event::emit).
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
/// use ringtrace::{Category, Frame, Stack};
/// static APP: Category = Category::new("app");
/// # let _trace = ringtrace::builder().writer(ringtrace::MemoryBuffer::new()).start().unwrap();
/// let frames = [Frame::new("main", "app"), Frame::new("load", "app")];
/// APP.instant("loaded").arg("files", 3).stack(Stack::Frames(&frames)).emit();
/// ```
#[must_use = "an event is recorded only when emitted"]
pub struct Event<P> {
    /// None when the category is off.
    fields: Option<Fields>,
    site: u32,
    op: u8,
    /// The custom track of a track slice (for its end).
    track: Option<&'static Track>,
    _phase: PhantomData<P>,
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
    fn new(cat: &'static Category, op: u8) -> Event<P> {
        let fields = cat.is_enabled().then(Fields::take);
        Event {
            fields,
            site: cat.site.id(),
            op,
            track: None,
            _phase: PhantomData,
        }
    }

    fn with(mut self, f: impl FnOnce(&mut Fields)) -> Self {
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

/// Ends a slice on a custom [`Track`] when dropped. `Send`: it may end on
/// another thread than it began.
#[must_use = "the slice ends when the guard is dropped; bind it with `let _guard = ...`"]
pub struct TrackSliceGuard {
    site: u32,
    track: Option<&'static Track>,
    /// The begin's encoded NAME field (JSON ends repeat it); None when not
    /// recording.
    name: Option<Fields>,
}

impl fmt::Debug for TrackSliceGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TrackSliceGuard")
            .field("recording", &self.name.is_some())
            .finish()
    }
}

impl TrackSliceGuard {
    /// Ends the slice now.
    pub fn end(self) {}
}

impl Drop for TrackSliceGuard {
    fn drop(&mut self) {
        if let (Some(mut f), Some(track)) = (self.name.take(), self.track) {
            f.track(track);
            write(self.site, op::TRACK_END, &mut f, false);
            f.give();
        }
    }
}

/// Deepest nesting of custom tracks.
pub const MAX_TRACK_DEPTH: usize = 8;

/// A named track of its own, beside the threads' tracks: a child of the
/// process's track, or of another `Track` (up to [`MAX_TRACK_DEPTH`]
/// levels), for work that is not a thread's call stack (a GPU queue, a
/// connection, a state machine). Slices on one track must nest.
///
/// In Perfetto it is a TrackDescriptor (uuid derived from the process and
/// the track's path, unique in the trace; `parent_uuid` its parent's or the
/// process's; `sibling_merge_behavior: NONE`, so two tracks with the same
/// name stay two tracks). In JSON its slices and instants are async events
/// (`b`/`e`/`n`) with `id2.local` derived from its path; JSON readers name
/// such a track after its first event.
///
/// # Examples
///
/// ```
/// use ringtrace::{Category, Track};
/// static GPU: Category = Category::new("gpu");
/// static QUEUES: Track = Track::new("GPU queues");
/// static COMPUTE: Track = Track::child(&QUEUES, "compute");
/// # let _trace = ringtrace::builder().writer(ringtrace::MemoryBuffer::new()).start().unwrap();
/// let job = GPU.track_scope(&COMPUTE, "dispatch").arg("groups", 64).begin();
/// std::thread::spawn(move || drop(job)).join().unwrap(); // ends on another thread
/// GPU.track_instant(&QUEUES, "fence").emit();
/// ```
#[derive(Debug)]
pub struct Track {
    name: &'static str,
    parent: Option<&'static Track>,
}

impl Track {
    /// A track under the process's track.
    pub const fn new(name: &'static str) -> Track {
        Track { name, parent: None }
    }

    /// A track nested under `parent`.
    pub const fn child(parent: &'static Track, name: &'static str) -> Track {
        Track {
            name,
            parent: Some(parent),
        }
    }

    /// The track's own name (not its parents').
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Fills `out` with the names from the root to this track; returns
    /// how many (deeper levels than `MAX_TRACK_DEPTH` are cut at the root).
    fn path(&'static self, out: &mut [&'static str; MAX_TRACK_DEPTH]) -> usize {
        let mut chain = [""; MAX_TRACK_DEPTH];
        let mut n = 0;
        let mut t = Some(self);
        while let (Some(tr), true) = (t, n < MAX_TRACK_DEPTH) {
            chain[n] = tr.name;
            n += 1;
            t = tr.parent;
        }
        for i in 0..n {
            out[i] = chain[n - 1 - i];
        }
        n
    }
}

const INACTIVE: u32 = u32::MAX;

/// Ends a slice begun with [`Event::begin`] when dropped. `!Send`: a slice
/// begins and ends on one thread (use [`Category::async_begin`] for work
/// that moves).
///
/// # Examples
///
/// ```
/// use ringtrace::{Category, Stack};
/// static DB: Category = Category::new("db");
/// # let _trace = ringtrace::builder().writer(ringtrace::MemoryBuffer::new()).start().unwrap();
/// let mut slice = DB.scope("query").arg("table", "users").begin();
/// let rows = 12;
/// slice.end_arg("rows", rows); // known only at the end
/// slice.end_stack(Stack::Raw(&["main", "run_query"]));
/// slice.end();
/// ```
#[must_use = "the slice ends when the guard is dropped; bind it with `let _guard = ...`"]
pub struct SliceGuard {
    depth: u32,
    /// Args and stack for the end, if any were given.
    end: Option<Fields>,
    _not_send: PhantomData<*const ()>,
}

impl fmt::Debug for SliceGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SliceGuard")
            .field("recording", &self.is_recording())
            .finish()
    }
}

impl SliceGuard {
    fn inactive() -> SliceGuard {
        SliceGuard {
            depth: INACTIVE,
            end: None,
            _not_send: PhantomData,
        }
    }

    /// Whether the begin was recorded.
    pub fn is_recording(&self) -> bool {
        self.depth != INACTIVE
    }

    /// An argument known only at the end, merged into the slice's args (a
    /// key given at both ends takes the end's value).
    pub fn end_arg(&mut self, key: &str, value: impl TraceValue) {
        if self.is_recording() {
            self.end.get_or_insert_with(Fields::take).arg(key, &value);
        }
    }

    /// The stack at the end of the slice (`esf` / `estack`).
    pub fn end_stack(&mut self, stack: Stack<'_>) {
        if self.is_recording() {
            self.end.get_or_insert_with(Fields::take).stack(true, stack);
        }
    }

    /// Ends the slice now.
    pub fn end(self) {}
}

impl Drop for SliceGuard {
    fn drop(&mut self) {
        if self.depth == INACTIVE {
            return;
        }
        let depth = self.depth;
        let extra = self.end.take();
        with_current(|tr| {
            match extra {
                Some(mut f) => {
                    let mut head = Fields::take();
                    head.uint(field::DEPTH, depth.min(MAX_DEPTH) as u64);
                    f.seal();
                    head.words.extend_from_slice(&f.words);
                    write_on(tr, 0, op::SCOPE_END, &mut head, true);
                    head.give();
                    f.give();
                }
                None => {
                    if tr.thread_time {
                        let tts = crate::sys::thread_cpu_ns();
                        let payload = depth.min(MAX_DEPTH) as u64;
                        let ts = ticks();
                        record::write(&tr.ring, record::KIND_END_TT, payload, ts, &[tts], &());
                    } else {
                        let ts = ticks();
                        let payload = depth.min(MAX_DEPTH) as u64;
                        record::write(&tr.ring, record::KIND_END, payload, ts, &[], &());
                    }
                }
            }
            tr.depth.store(depth, Ordering::Relaxed);
        });
    }
}

/// An async range begun with [`Category::async_begin`]: records its steps
/// and its end with the same category, id and (for the end) name, as the
/// format requires for the `n` / `e` events to match the `b`.
///
/// # Examples
///
/// ```
/// use ringtrace::{Category, Id};
/// static NET: Category = Category::new("net");
/// # let _trace = ringtrace::builder().writer(ringtrace::MemoryBuffer::new()).start().unwrap();
/// let req = NET.async_begin("request", Id::local(1)).emit();
/// if let Some(id) = req.id() {
///     assert_eq!(id, Id::local(1)); // recorded: the category is on
/// }
/// req.instant("headers received").arg("status", 200).emit();
/// std::thread::spawn(move || req.end_with().arg("bytes", 512).emit()).join().unwrap();
/// ```
#[must_use = "an async range ends only when `end` is called"]
pub struct AsyncRange {
    site: u32,
    /// None when the begin was not recorded (category off).
    id: Option<Id>,
    /// The begin's encoded NAME field, for the end.
    name: Option<Fields>,
}

impl fmt::Debug for AsyncRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncRange").field("id", &self.id).finish()
    }
}

impl Drop for AsyncRange {
    fn drop(&mut self) {
        if let Some(f) = self.name.take() {
            f.give();
        }
    }
}

impl AsyncRange {
    /// The range's id (None if its begin was not recorded).
    pub fn id(&self) -> Option<Id> {
        self.id
    }

    /// An instant inside the range (`n`) named `name`.
    pub fn instant(&self, name: &str) -> Event<phase::Async> {
        let fields = self.id.map(|id| {
            let mut f = Fields::take();
            f.str(field::NAME, name);
            f.id(id);
            f
        });
        Event {
            fields,
            site: self.site,
            op: op::ASYNC_INSTANT,
            track: None,
            _phase: PhantomData,
        }
    }

    /// Ends the range now (`e`).
    pub fn end(self) {
        self.end_with().emit()
    }

    /// The end of the range (`e`), to give it args before [`Event::emit`].
    pub fn end_with(mut self) -> Event<phase::Async> {
        let fields = match (self.id, self.name.take()) {
            (Some(id), Some(mut f)) => {
                f.id(id);
                Some(f)
            }
            (_, f) => {
                if let Some(f) = f {
                    f.give();
                }
                None
            }
        };
        Event {
            fields,
            site: self.site,
            op: op::ASYNC_END,
            track: None,
            _phase: PhantomData,
        }
    }
}

/// A flow: arrows between slices, across threads (`s`, `t`, `f`). All its
/// events share a category, name and id, as the format requires. `Copy` and
/// `Send`: pass it to the thread that continues the work.
///
/// The format binds `s` and `t` to the slice enclosing them on their thread,
/// and `f` to the next slice that begins on its thread (or the enclosing
/// one, with [`Flow::end_enclosing`]).
///
/// # Examples
///
/// ```
/// static JOBS: ringtrace::Category = ringtrace::Category::new("jobs");
/// # let _trace = ringtrace::builder().writer(ringtrace::MemoryBuffer::new()).start().unwrap();
/// let flow = JOBS.flow("job", 17);
/// {
///     ringtrace::trace_scope!("submit");
///     flow.start();
/// }
/// std::thread::spawn(move || {
///     ringtrace::trace_scope!("run");
///     flow.end_enclosing();
/// }).join().unwrap();
/// ```
#[derive(Clone, Copy)]
pub struct Flow {
    cat: &'static Category,
    name: &'static str,
    id: u64,
}

impl fmt::Debug for Flow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Flow")
            .field("category", &self.cat.name())
            .field("name", &self.name)
            .field("id", &self.id)
            .finish()
    }
}

impl Flow {
    /// The flow's id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The flow starts in the slice enclosing this point (`s`).
    pub fn start(&self) {
        self.emit(op::FLOW_START, false)
    }

    /// The flow passes through the slice enclosing this point (`t`).
    pub fn step(&self) {
        self.emit(op::FLOW_STEP, false)
    }

    /// The flow ends in the next slice that begins on this thread (`f`).
    pub fn end(&self) {
        self.emit(op::FLOW_END, false)
    }

    /// The flow ends in the slice enclosing this point (`f` with `"bp":"e"`).
    pub fn end_enclosing(&self) {
        self.emit(op::FLOW_END, true)
    }

    fn emit(&self, op: u8, enclosing: bool) {
        if self.cat.is_enabled() {
            write_now(self.cat.site.id(), op, |f| {
                f.str(field::NAME, self.name);
                f.uint(field::ID, self.id);
                if enclosing {
                    f.flag(field::BIND_ENCLOSING);
                }
            });
        }
    }
}

/// Leaves a context entered with [`Category::context`] when dropped. `!Send`:
/// a context is entered and left on one thread.
#[must_use = "the context is left when the guard is dropped"]
pub struct ContextGuard {
    cat: &'static Category,
    name: &'static str,
    id: Id,
    _not_send: PhantomData<*const ()>,
}

impl fmt::Debug for ContextGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ContextGuard")
            .field("name", &self.name)
            .field("id", &self.id)
            .finish()
    }
}

impl Drop for ContextGuard {
    fn drop(&mut self) {
        self.cat.context_leave(self.name, self.id);
    }
}

impl Category {
    /// A category named `name` (a comma-separated list is allowed, as in
    /// the format's `cat`).
    pub const fn new(name: &'static str) -> Category {
        Category {
            site: Callsite::new(name, "", "", 0, "", &[], CallsiteKind::Event),
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
    /// static IO: ringtrace::Category = ringtrace::Category::new("io");
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
    /// static GC: ringtrace::Category = ringtrace::Category::new("gc");
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
    /// use ringtrace::{Category, CounterUnit};
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
    /// use ringtrace::{Category, Frame, Stack};
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
    /// use ringtrace::{Category, Id};
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
    /// use ringtrace::{Category, Id};
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
    /// use ringtrace::{Category, Id};
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

// ---------------------------------------------------------------------------
// Events without a category: clock sync, metadata, global samples, logs

/// A clock sync marker received (`c`, `name: "clock_sync"`): `sync_id`
/// identifies the marker across the agents that record it. JSON only.
///
/// # Examples
///
/// ```
/// # let _trace = ringtrace::builder().writer(ringtrace::MemoryBuffer::new()).start().unwrap();
/// ringtrace::clock_sync("guid1");
/// let issued = ringtrace::trace_clock_ns();
/// ringtrace::clock_sync_issued("guid2", issued);
/// ```
pub fn clock_sync(sync_id: &str) {
    write_now(0, op::CLOCK_SYNC, |f| f.str(field::SYNC_ID, sync_id));
}

/// A clock sync marker this process issued at `issue_ts_ns` (trace clock)
/// and the receiver has now recorded (`args.issue_ts`).
pub fn clock_sync_issued(sync_id: &str, issue_ts_ns: u64) {
    write_now(0, op::CLOCK_SYNC, |f| {
        f.str(field::SYNC_ID, sync_id);
        f.uint(field::ISSUE_TS, issue_ts_ns);
    });
}

/// Names the calling thread in the trace (`M thread_name`; the thread's
/// descriptor in Perfetto), overriding its `std::thread` name from now on.
/// Recorded only while a session records.
///
/// # Examples
///
/// ```
/// # let _trace = ringtrace::builder().writer(ringtrace::MemoryBuffer::new()).start().unwrap();
/// std::thread::spawn(|| {
///     ringtrace::set_thread_name("io worker");
///     ringtrace::set_thread_sort_index(-1); // above the other threads
///     ringtrace::trace_instant!("started");
/// })
/// .join()
/// .unwrap();
/// ```
pub fn set_thread_name(name: &str) {
    write_now(0, op::THREAD_NAME, |f| f.str(field::NAME, name));
}

/// Where the calling thread sorts among its process's threads (`M
/// thread_sort_index`; `legacy_sort_index` and the track's
/// `sibling_order_rank` in Perfetto). Lower is higher up.
pub fn set_thread_sort_index(index: i32) {
    write_now(0, op::THREAD_SORT_INDEX, |f| {
        f.int(field::SORT_INDEX, index as i64)
    });
}

/// Renames the process from now on (`M process_name`; the process
/// descriptor in Perfetto). [`Builder::process_name`](crate::Builder::process_name)
/// sets it from the start. Recorded only while a session records.
///
/// # Examples
///
/// ```
/// # let _trace = ringtrace::builder().writer(ringtrace::MemoryBuffer::new()).start().unwrap();
/// ringtrace::set_process_name("renderer");
/// ringtrace::set_process_labels(&["gpu", "tab 3"]);
/// ringtrace::set_process_sort_index(2);
/// ```
pub fn set_process_name(name: &str) {
    write_now(0, op::PROCESS_NAME, |f| f.str(field::NAME, name));
}

/// Extra labels of the process (`M process_labels`, comma-joined;
/// `process_labels` of the process descriptor in Perfetto).
pub fn set_process_labels(labels: &[&str]) {
    write_now(0, op::PROCESS_LABELS, |f| f.value(field::LABELS, &labels))
}

/// Where the process sorts among processes (`M process_sort_index`;
/// `legacy_sort_index` and `sibling_order_rank` in Perfetto).
pub fn set_process_sort_index(index: i32) {
    write_now(0, op::PROCESS_SORT_INDEX, |f| {
        f.int(field::SORT_INDEX, index as i64)
    });
}

/// A global sample (the JSON object form's top-level `samples`): OS-level
/// sampling data, e.g. a CPU counter sample, with its `stack`, `weight`
/// and optional `cpu`, on the calling thread. In the bare-array form, which
/// has no `samples` list, it is written as a `P` event with the same fields
/// as args. JSON only.
///
/// # Examples
///
/// ```
/// use ringtrace::Stack;
/// let path = std::env::temp_dir().join("ringtrace-doc-global-sample.json");
/// let _trace = ringtrace::builder().output(&path).json_object_form(true).start()?;
/// ringtrace::global_sample("cpu-clock", 1, Some(0), Stack::Addresses(&[0x401000, 0x401234]));
/// # Ok::<(), ringtrace::Error>(())
/// ```
pub fn global_sample(name: &str, weight: u64, cpu: Option<u32>, stack: Stack<'_>) {
    write_now(0, op::GLOBAL_SAMPLE, |f| {
        f.str(field::NAME, name);
        f.uint(field::WEIGHT, weight);
        if let Some(cpu) = cpu {
            f.uint(field::CPU, cpu as u64);
        }
        f.stack(false, stack);
    });
}

thread_local! {
    static LOG_BUF: RefCell<String> = const { RefCell::new(String::new()) };
}

/// What [`trace_log!`](crate::trace_log) and the `log` bridge call. The
/// message is formatted into a reused per-thread buffer; a message without
/// arguments is not formatted; in a thread-local destructor (the buffer is
/// gone) or in a log written while formatting another, into a local `String`.
#[doc(hidden)]
pub fn log(site: &'static Callsite, level: LogLevel, message: fmt::Arguments<'_>) {
    if !cfg!(feature = "enable") {
        return;
    }
    if let Some(text) = message.as_str() {
        return log_str(site, level, text);
    }
    let done = LOG_BUF.try_with(|b| {
        let Ok(mut buf) = b.try_borrow_mut() else {
            return false; // a log while formatting a log
        };
        buf.clear();
        let _ = fmt::write(&mut *buf, message);
        log_str(site, level, &buf);
        if buf.capacity() > 1 << 16 {
            *buf = String::new();
        }
        true
    });
    if done != Ok(true) {
        log_str(site, level, &message.to_string());
    }
}

fn log_str(site: &'static Callsite, level: LogLevel, message: &str) {
    write_now(site.id(), op::LOG, |f| {
        f.uint(field::LEVEL, level as u64);
        f.str(field::MESSAGE, message);
    });
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
