//! The EVENT record's vocabulary (layout in `layout`): the phase codes
//! (`op`), the field ids (`field`) and the log levels a LOG event carries.
//! The typed event API (`events`) writes these records; the encoders read
//! them (`encode::event`): both take the codes from here.

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
