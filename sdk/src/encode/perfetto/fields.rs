//! Perfetto's numbers that the encoder writes: field numbers of the
//! messages it builds, and the enum values, flags and clock ids it sets.
//! All are Perfetto's (`protos/perfetto/trace/...`); none is ringtrace's
//! own. Grouped by message; the sizes and shapes of the messages are in
//! the code that writes them.

use crate::sys;

// TracePacket
pub(super) const P_TIMESTAMP: u32 = 8;
pub(super) const P_CLOCK_SNAPSHOT: u32 = 6;
pub(super) const P_TRACK_EVENT: u32 = 11;
pub(super) const P_TRACK_DESCRIPTOR: u32 = 60;
pub(super) const P_SEQUENCE_ID: u32 = 10;
pub(super) const P_INTERNED_DATA: u32 = 12;
pub(super) const P_SEQUENCE_FLAGS: u32 = 13;
pub(super) const P_DEFAULTS: u32 = 59;
pub(super) const P_PREVIOUS_PACKET_DROPPED: u32 = 42;
pub(super) const P_FIRST_PACKET_ON_SEQUENCE: u32 = 87;
/// TracePacket.timestamp_clock_id: the clock of this packet's timestamp.
pub(super) const P_TIMESTAMP_CLOCK_ID: u32 = 58;
// TracePacketDefaults / TrackEventDefaults
pub(super) const D_TIMESTAMP_CLOCK_ID: u32 = 58;
pub(super) const D_TRACK_EVENT_DEFAULTS: u32 = 11;
pub(super) const TED_TRACK_UUID: u32 = 11;
// ClockSnapshot / Clock
pub(super) const CS_CLOCKS: u32 = 1;
pub(super) const CS_PRIMARY_TRACE_CLOCK: u32 = 2;
pub(super) const C_ID: u32 = 1;
pub(super) const C_TIMESTAMP: u32 = 2;
pub(super) const C_IS_INCREMENTAL: u32 = 3;
pub(super) const C_UNIT_MULTIPLIER_NS: u32 = 4;
// TrackEvent
pub(super) const TE_CATEGORY_IIDS: u32 = 3;
pub(super) const TE_DEBUG_ANNOTATIONS: u32 = 4;
pub(super) const TE_TYPE: u32 = 9;
pub(super) const TE_NAME_IID: u32 = 10;
pub(super) const TE_TRACK_UUID: u32 = 11;
pub(super) const TE_EXTRA_COUNTER_VALUES: u32 = 12;
pub(super) const TE_LOG_MESSAGE: u32 = 21;
pub(super) const TE_NAME: u32 = 23;
pub(super) const TE_COUNTER_VALUE: u32 = 30;
pub(super) const TE_EXTRA_COUNTER_TRACK_UUIDS: u32 = 31;
pub(super) const TE_SOURCE_LOCATION_IID: u32 = 34;
pub(super) const TE_DOUBLE_COUNTER_VALUE: u32 = 44;
/// TrackEvent.flow_ids: repeated fixed64, one tag per id (never packed).
pub(super) const TE_FLOW_IDS: u32 = 47;
pub(super) const TE_TERMINATING_FLOW_IDS: u32 = 48;
pub(super) const TE_CALLSTACK: u32 = 55;
// TrackEvent.Type
pub(super) const TYPE_SLICE_BEGIN: u64 = 1;
pub(super) const TYPE_SLICE_END: u64 = 2;
pub(super) const TYPE_INSTANT: u64 = 3;
pub(super) const TYPE_COUNTER: u64 = 4;
// TrackEvent.Callstack / Frame
pub(super) const CALLSTACK_FRAMES: u32 = 1;
pub(super) const FRAME_FUNCTION_NAME: u32 = 1;
// LogMessage / LogMessageBody
pub(super) const LM_SOURCE_LOCATION_IID: u32 = 1;
pub(super) const LM_BODY_IID: u32 = 2;
pub(super) const LM_PRIO: u32 = 3;
pub(super) const LMB_BODY: u32 = 2;
// TrackDescriptor and friends
pub(super) const TD_UUID: u32 = 1;
pub(super) const TD_NAME: u32 = 2;
pub(super) const TD_PROCESS: u32 = 3;
pub(super) const TD_THREAD: u32 = 4;
pub(super) const TD_PARENT_UUID: u32 = 5;
pub(super) const TD_COUNTER: u32 = 8;
pub(super) const TD_SIBLING_ORDER_RANK: u32 = 12;
pub(super) const TD_SIBLING_MERGE_BEHAVIOR: u32 = 15;
/// SIBLING_MERGE_BEHAVIOR_NONE: one uuid, one track (never merged by name).
pub(super) const MERGE_NONE: u64 = 2;
pub(super) const PD_PID: u32 = 1;
pub(super) const PD_CMDLINE: u32 = 2;
pub(super) const PD_LEGACY_SORT_INDEX: u32 = 3;
pub(super) const PD_PROCESS_NAME: u32 = 6;
pub(super) const PD_PROCESS_LABELS: u32 = 8;
pub(super) const THD_PID: u32 = 1;
pub(super) const THD_TID: u32 = 2;
pub(super) const THD_LEGACY_SORT_INDEX: u32 = 3;
pub(super) const THD_THREAD_NAME: u32 = 5;
// CounterDescriptor
pub(super) const CD_TYPE: u32 = 1;
pub(super) const CD_UNIT: u32 = 3;
pub(super) const CD_UNIT_NAME: u32 = 6;
pub(super) const COUNTER_THREAD_TIME_NS: u64 = 1;
pub(super) const UNIT_TIME_NS: u64 = 1;
// InternedData
pub(super) const ID_EVENT_CATEGORIES: u32 = 1;
pub(super) const ID_EVENT_NAMES: u32 = 2;
pub(super) const ID_DEBUG_ANNOTATION_NAMES: u32 = 3;
pub(super) const ID_SOURCE_LOCATIONS: u32 = 4;
pub(super) const ID_LOG_MESSAGE_BODY: u32 = 20;
pub(super) const ENTRY_IID: u32 = 1;
pub(super) const ENTRY_NAME: u32 = 2;
pub(super) const SL_FILE_NAME: u32 = 2;
pub(super) const SL_FUNCTION_NAME: u32 = 3;
pub(super) const SL_LINE_NUMBER: u32 = 4;
// DebugAnnotation
pub(super) const DA_NAME_IID: u32 = 1;
pub(super) const DA_BOOL: u32 = 2;
pub(super) const DA_UINT: u32 = 3;
pub(super) const DA_INT: u32 = 4;
pub(super) const DA_DOUBLE: u32 = 5;
pub(super) const DA_STRING: u32 = 6;
pub(super) const DA_POINTER: u32 = 7;
pub(super) const DA_NAME: u32 = 10;
pub(super) const DA_DICT_ENTRIES: u32 = 11;
pub(super) const DA_ARRAY_VALUES: u32 = 12;

// TracePacket.SequenceFlags
pub(super) const SEQ_INCREMENTAL_STATE_CLEARED: u64 = 1;
pub(super) const SEQ_NEEDS_INCREMENTAL_STATE: u64 = 2;
/// previous_packet_dropped bits: DATA_LOSS_PRESENT, OVERWRITE, SMB_FULL.
pub(super) const LOSS_PRESENT: u32 = 1;
pub(super) const LOSS_OVERWRITE: u32 = 64;
pub(super) const LOSS_BUFFER_FULL: u32 = 256;

/// The sequence-scoped incremental clock (ns units).
pub(super) const SEQ_CLOCK: u64 = 64;
pub(super) const BOOTTIME: u64 = sys::CLOCK_BOOTTIME as u64;
