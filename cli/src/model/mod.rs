//! One in-memory model of a trace, decoded from ringtrace's Perfetto output
//! (prost types of `ringtrace-protos`) or from Chrome JSON.
//!
//! Perfetto decoding resolves what a reader must: per-sequence interning
//! (event names, categories, debug-annotation names; cleared when a packet
//! says `SEQ_INCREMENTAL_STATE_CLEARED`), `TracePacketDefaults`
//! (timestamp clock, track uuid), incremental sequence clocks (ids 64..127:
//! every packet with a timestamp on it accumulates, the snapshot anchors it
//! to BOOTTIME), absolute timestamps on BOOTTIME or, through the global
//! snapshots, on another builtin clock. Track descriptors give processes,
//! threads, counter tracks and the other (async) tracks; events are resolved
//! against them once the whole file is read.
//!
//! All timestamps in the model are BOOTTIME nanoseconds (the trace clock of
//! both ringtrace formats; JSON `ts` is that value in microseconds).

mod json;
mod pairing;
mod perfetto;

pub use json::decode_json;
pub use perfetto::decode_perfetto;

use serde_json::{Map, Number, Value};
use std::collections::BTreeMap;

/// Timestamps and durations are kept within ±2^61 ns (±73 years): whatever
/// a file says, sums and differences of two of them cannot overflow.
pub const TS_LIMIT: i64 = 1 << 61;

/// `v` within ±[`TS_LIMIT`].
pub fn clamp_ts(v: i64) -> i64 {
    v.clamp(-TS_LIMIT, TS_LIMIT)
}

/// The instant ringtrace writes where events were lost.
pub const LOST_EVENT_NAME: &str = "ringtrace: events lost";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Perfetto,
    Json,
}

/// Where an event is drawn.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Track {
    Thread {
        pid: i64,
        tid: i64,
    },
    Process {
        pid: i64,
    },
    /// An async track: `id` identifies it within the process.
    Async {
        pid: i64,
        id: String,
        name: String,
    },
    Counter {
        pid: i64,
        name: String,
    },
    Global,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    Begin,
    End,
    /// A complete slice (JSON `X`, or a matched begin/end).
    Complete {
        dur: i64,
    },
    Instant,
    Counter(Number),
}

#[derive(Debug, Clone)]
pub struct Event {
    pub ts: i64,
    pub kind: Kind,
    pub name: String,
    pub category: Option<String>,
    pub track: Track,
    /// The thread that emitted it (for async events in JSON output).
    pub thread: Option<(i64, i64)>,
    pub args: Map<String, Value>,
}

#[derive(Debug, Clone, Default)]
pub struct SeqSummary {
    pub packets: u64,
    pub resets: u64,
    pub loss_marks: u64,
    pub first_packet_flag: bool,
    pub thread: Option<(i64, i64)>,
    pub default_track: Option<u64>,
}

#[derive(Debug, Clone, Default)]
pub struct ClockInfo {
    /// Builtin or sequence clock ids seen in snapshots.
    pub ids: Vec<u32>,
    pub snapshots: u64,
    pub primary: Option<u32>,
    /// (BOOTTIME, REALTIME) of the first snapshot holding both.
    pub boot_realtime: Option<(i64, i64)>,
}

/// A decoded trace.
#[derive(Debug, Clone)]
pub struct TraceModel {
    pub format: Format,
    pub size: usize,
    pub packets: u64,
    pub truncated: bool,
    pub processes: BTreeMap<i64, Option<String>>,
    pub threads: BTreeMap<(i64, i64), Option<String>>,
    pub events: Vec<Event>,
    pub sequences: BTreeMap<u32, SeqSummary>,
    pub clocks: ClockInfo,
    pub loss_packets: u64,
    pub warnings: Vec<String>,
}

impl TraceModel {
    fn new(format: Format, size: usize) -> Self {
        TraceModel {
            format,
            size,
            packets: 0,
            truncated: false,
            processes: BTreeMap::new(),
            threads: BTreeMap::new(),
            events: Vec::new(),
            sequences: BTreeMap::new(),
            clocks: ClockInfo::default(),
            loss_packets: 0,
            warnings: Vec::new(),
        }
    }

    fn warn(&mut self, w: String) {
        if self.warnings.len() < 20 {
            self.warnings.push(w);
        }
    }

    /// Decodes a Perfetto or JSON trace, told apart by content.
    pub fn decode(bytes: &[u8]) -> Result<TraceModel, String> {
        if bytes.first() == Some(&0x0a) {
            return decode_perfetto(bytes);
        }
        match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
            Some(b'[') | Some(b'{') => decode_json(bytes),
            _ => Err(
                "not a Perfetto protobuf trace (first byte 0x0A) nor a Chrome JSON trace".into(),
            ),
        }
    }
}
