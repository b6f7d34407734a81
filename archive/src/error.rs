//! [`ArchiveError`]: everything that stops an archive from being written (or
//! an existing one from being accepted), with the manifest spec's conditions
//! first and the messages trace_processor would print.

use std::fmt;
use std::path::PathBuf;

/// Why an archive cannot be written or read.
///
/// The first group mirrors the error table of the manifest spec
/// (`perfetto-manifest.md`, "Errors"); their messages start with
/// `perfetto_manifest:` and repeat trace_processor's wording, so a user who
/// has seen one recognises the other. [`Archive`](super::Archive) checks all
/// of them before it writes a byte: it never produces a manifest that
/// trace_processor rejects.
#[derive(Debug)]
#[non_exhaustive]
pub enum ArchiveError {
    /// Reading a member or writing the archive failed.
    Io {
        /// The file involved, when there is one.
        path: Option<PathBuf>,
        /// The OS error.
        source: std::io::Error,
    },

    // ---- the spec's error table ----
    /// The manifest has no `version`.
    MissingVersion,
    /// `version` is not 1.
    UnsupportedVersion(i64),
    /// A clock name that is not one of the six builtin names.
    UnknownClock(String),
    /// A second manifest in one input (a member whose content is a manifest).
    MultipleManifests {
        /// The member that is a second manifest.
        member: String,
    },
    /// A manifest that trace_processor would see after a trace file: a gzipped
    /// manifest member, or a manifest that is not the first member of a
    /// concatenated stream.
    ManifestNotFirst {
        /// The member (or stream) holding it.
        member: String,
    },
    /// `machine` and `machines` on the same `files` entry.
    MachineAndMachines {
        /// The entry's path.
        path: String,
    },
    /// An empty machine name (in `machine` or `machines`).
    EmptyMachineName {
        /// The entry's path.
        path: String,
    },
    /// A `machines` id outside `[0, 4294967295]`.
    MachineIdOutOfRange {
        /// The entry's path.
        path: String,
        /// The id given.
        id: i64,
    },
    /// A packet of the file carries a machine id that `machines` does not declare.
    UndeclaredMachineId {
        /// The entry's path.
        path: String,
        /// The embedded machine id.
        id: u32,
    },
    /// `machine` on a file whose packets come from several machines.
    MachineOnMultiMachineFile {
        /// The entry's path.
        path: String,
        /// The non-zero machine ids embedded in its packets.
        ids: Vec<u32>,
    },
    /// A `clocks` block without `sync_to`.
    ClocksWithoutSyncTo {
        /// The entry's path.
        path: String,
    },
    /// A `sync_to` block without `file`.
    SyncToWithoutFile {
        /// The entry's path.
        path: String,
    },
    /// `sync_to.file` (or `trace_time.file`) names no entry of `files`.
    UnknownFile {
        /// Which field: `clocks: sync_to.file` or `trace_time: file`.
        field: &'static str,
        /// The name given.
        file: String,
    },
    /// A machine named without its file (`sync_to.machine` or
    /// `trace_time.machine` alone): ambiguous.
    MachineWithoutFile {
        /// Which field.
        field: &'static str,
        /// The machine name given.
        machine: String,
    },
    /// The reference file is multi-machine but no machine was named.
    ReferenceIsMultiMachine {
        /// Which field should name it.
        field: &'static str,
        /// The reference file.
        file: String,
    },
    /// A machine name that the named file does not declare.
    MachineNotDeclared {
        /// Which field named it.
        field: &'static str,
        /// The machine name.
        machine: String,
        /// The file that should declare it.
        file: String,
    },
    /// This file is multi-machine but `clocks.machine` is missing.
    SourceIsMultiMachine {
        /// The entry's path.
        path: String,
    },
    /// `offset_ns` is not an integer.
    OffsetNotInteger {
        /// The entry's path.
        path: String,
        /// The value as written.
        value: String,
    },
    /// `offset_ns` is INT64_MIN (or beyond the int64 range).
    OffsetOutOfRange {
        /// The entry's path.
        path: String,
    },
    /// An override (`machine`, `machines`, `clocks`) on a member that is itself
    /// an archive, a compressed container or a manifest.
    OverrideOnContainer {
        /// The entry's path.
        path: String,
        /// What the member is.
        kind: &'static str,
    },
    /// A pinning override (`clocks` without `clocks.clock`) on a file that
    /// emits its own clock snapshots.
    PinnedFileHasClocks {
        /// The entry's path.
        path: String,
    },

    // ---- the manifest document's shape ----
    /// The manifest is not a JSON object starting with `{"perfetto_manifest"`,
    /// or a field has the wrong type (the reader's parse errors).
    InvalidManifest(String),
    /// Two `files` entries with the same path.
    DuplicateEntry {
        /// The path.
        path: String,
    },
    /// A `files` entry names no member of the archive.
    EntryWithoutMember {
        /// The path.
        path: String,
    },
    /// A `clocks.sync_to` that names the file itself.
    SelfReference {
        /// The entry's path.
        path: String,
    },
    /// An attribute with an empty key, or a value that is neither a string nor
    /// an integer.
    InvalidAttribute {
        /// The key.
        key: String,
        /// What is wrong.
        reason: String,
    },

    // ---- archive container rules (writer notes §4.1) ----
    /// A member name the readers would ignore or misread.
    InvalidMemberName {
        /// The name.
        name: String,
        /// Why.
        reason: String,
    },
    /// Two members with the same name.
    DuplicateMember(String),
    /// An empty member: no reader can tell its type, and trace_processor
    /// fails the whole import ("Unknown trace type").
    EmptyMember(String),
    /// A member that looks like JSON but that trace_processor does not detect
    /// (for example `[]`): the import would fail.
    UndetectableMember(String),
    /// A member in no format any Perfetto reader recognizes (see
    /// [`sniff`](super::sniff)): trace_processor fails the whole import
    /// ("Unknown trace type"). [`Archive::allow_unrecognized`](super::Archive::allow_unrecognized)
    /// packs it anyway.
    UnrecognizedMember(String),
    /// Reading an archive would decompress more than `limit` bytes (see
    /// [`DEFAULT_UNPACK_LIMIT`](super::DEFAULT_UNPACK_LIMIT)).
    UnpackLimit {
        /// The member (or stream) that went past the limit.
        member: String,
        /// The limit, in bytes.
        limit: u64,
    },
    /// A ZIP or TAR inside the archive: archives must not nest.
    NestedArchive {
        /// The member.
        member: String,
        /// `ZIP` or `TAR`.
        kind: &'static str,
    },
    /// [`Archive::file`](super::Archive::file) named no member.
    NoSuchMember(String),
    /// A member too large for the container format.
    TooLarge {
        /// The member.
        member: String,
        /// What limit it passes.
        limit: &'static str,
    },

    // ---- clocks ringtrace works out ----
    /// `clocks.clock` (RELATE) on a clockless file such as a Chrome JSON trace:
    /// its events are on its own per-file timeline, so relating a named clock
    /// would not place them. Pin it instead (no `clocks.clock`).
    ClockOnClocklessFile {
        /// The entry's path.
        path: String,
    },
    /// `sync_to` without `clock` whose reference carries its own clocks: the
    /// reference's private per-file timeline is not connected to its events.
    PrivateTimelineOfClockedFile {
        /// The entry's path.
        path: String,
        /// The reference file.
        reference: String,
    },
    /// An offset left to ringtrace that it cannot compute from what the files
    /// recorded.
    CannotComputeOffset {
        /// The entry's path.
        path: String,
        /// The reference file.
        reference: String,
        /// What is missing.
        reason: String,
    },
    /// Traces that cannot be joined into one
    /// ([`join_perfetto`](super::join_perfetto)).
    CannotJoin {
        /// The trace's name.
        name: String,
        /// Why.
        reason: String,
    },

    // ---- reading archives ----
    /// The bytes are not a ZIP, a TAR or a gzipped TAR.
    NotAnArchive(String),
    /// The archive is damaged.
    Corrupt(String),
}

impl fmt::Display for ArchiveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use ArchiveError::*;
        const P: &str = "perfetto_manifest:";
        match self {
            Io { path: Some(p), source } => write!(f, "{}: {source}", p.display()),
            Io { path: None, source } => write!(f, "archive I/O: {source}"),
            MissingVersion => write!(f, "{P} missing required field: version"),
            UnsupportedVersion(v) => {
                write!(f, "{P} unsupported version: {v}. Only version 1 is supported; set \"version\": 1")
            }
            UnknownClock(c) => write!(
                f,
                "{P} unknown clock name: {c}. Use one of REALTIME, REALTIME_COARSE, MONOTONIC, \
                 MONOTONIC_COARSE, MONOTONIC_RAW, BOOTTIME"
            ),
            MultipleManifests { member } => write!(
                f,
                "multiple perfetto_manifest files in archive: member '{member}' is a manifest too \
                 (ringtrace writes the archive's manifest itself)"
            ),
            ManifestNotFirst { member } => write!(
                f,
                "perfetto_manifest file must be the first trace file in the input: '{member}' holds \
                 a manifest that would be read after a trace file (a gzipped manifest, or one later \
                 in a concatenated stream)"
            ),
            MachineAndMachines { path } => write!(
                f,
                "{P} machine and machines are mutually exclusive (file '{path}'). Use `machine` for \
                 a single-machine file, or `machines` to remap a multi-machine proto's embedded ids"
            ),
            EmptyMachineName { path } => write!(f, "{P} machine: name must be non-empty (file '{path}')"),
            MachineIdOutOfRange { path, id } => {
                write!(f, "{P} machines: id must be in [0, 4294967295] (file '{path}', id {id})")
            }
            UndeclaredMachineId { path, id } => write!(
                f,
                "{P} undeclared machine id {id}: packets of '{path}' carry machine id {id}, which \
                 its `machines` list does not declare"
            ),
            MachineOnMultiMachineFile { path, ids } => write!(
                f,
                "{P} '{path}' is a multi-machine trace (its packets carry machine ids {ids:?}); \
                 `machine` attributes a whole file to one machine: use `machines` to name each id"
            ),
            ClocksWithoutSyncTo { path } => write!(
                f,
                "{P} clocks: a sync_to block is required (file '{path}'). Manual clock handling \
                 relates this file to a clock in another trace, e.g. \"sync_to\": {{\"file\": \"other.pb\"}}"
            ),
            SyncToWithoutFile { path } => {
                write!(f, "{P} clocks: sync_to.file is required and must be a string (file '{path}')")
            }
            UnknownFile { field, file } => write!(
                f,
                "{P} {field} names unknown file '{file}'. It must match the path of an entry in the \
                 files array"
            ),
            MachineWithoutFile { field, machine } => write!(
                f,
                "{P} {field} '{machine}' needs a file too: a machine name alone is ambiguous, name \
                 the file too"
            ),
            ReferenceIsMultiMachine { field, file } => {
                write!(f, "{P} '{file}' is a multi-machine trace; also name the machine ({field})")
            }
            MachineNotDeclared { field, machine, file } => {
                write!(f, "{P} {field} '{machine}' is not a machine declared by file '{file}'")
            }
            SourceIsMultiMachine { path } => write!(
                f,
                "{P} clocks: file '{path}' is a multi-machine trace; name which machine the clock is \
                 on with clocks: machine"
            ),
            OffsetNotInteger { path, value } => {
                write!(f, "{P} clocks: offset_ns must be an integer (file '{path}': {value})")
            }
            OffsetOutOfRange { path } => write!(f, "{P} clocks: offset_ns is out of range (file '{path}')"),
            OverrideOnContainer { path, kind } => write!(
                f,
                "{P} '{path}' is {kind}, not a trace: machine, machines and clocks overrides on it are \
                 rejected; add the trace files it holds instead"
            ),
            PinnedFileHasClocks { path } => write!(
                f,
                "{P} clock overrides require the trace to use a single clock: '{path}' emits its own \
                 clock snapshots, so it cannot be pinned (no clocks.clock); relate one of its clocks \
                 instead (set clocks.clock, e.g. BOOTTIME)"
            ),
            InvalidManifest(m) => write!(f, "{P} {m}"),
            DuplicateEntry { path } => write!(f, "{P} two files entries have the path '{path}'"),
            EntryWithoutMember { path } => write!(
                f,
                "{P} files entry '{path}' names no member of the archive (path must be the exact \
                 member name)"
            ),
            SelfReference { path } => write!(f, "{P} clocks: file '{path}' cannot be synced to itself"),
            InvalidAttribute { key, reason } => write!(f, "{P} attributes: '{key}' {reason}"),
            InvalidMemberName { name, reason } => write!(f, "invalid archive member name {name:?}: {reason}"),
            DuplicateMember(n) => write!(f, "two archive members are named '{n}'"),
            EmptyMember(n) => write!(
                f,
                "archive member '{n}' is empty: trace_processor cannot tell its type and fails the \
                 whole import (\"Unknown trace type\")"
            ),
            UndetectableMember(n) => write!(
                f,
                "archive member '{n}' looks like JSON but is not detectable as a trace (a JSON trace \
                 starts with {{\" or [{{\" once whitespace is removed): the import would fail"
            ),
            CannotJoin { name, reason } => {
                write!(f, "{name:?} cannot be joined into one trace with the others: {reason}")
            }
            UnrecognizedMember(n) => write!(
                f,
                "archive member '{n}' is not a trace: no Perfetto reader recognizes its format \
                 (not Perfetto protobuf, Chrome JSON, systrace, perf, Fuchsia, ninja log or another \
                 format trace_processor reads), and trace_processor fails the whole import \
                 (\"Unknown trace type\")"
            ),
            UnpackLimit { member, limit } => write!(
                f,
                "archive member '{member}' decompresses to more than the limit of {limit} bytes \
                 (a damaged or malicious archive, or raise the limit)"
            ),
            NestedArchive { member, kind } => write!(
                f,
                "archive member '{member}' is itself a {kind} archive: archives must not nest; add its \
                 files instead"
            ),
            NoSuchMember(n) => write!(f, "the archive has no member named '{n}'"),
            TooLarge { member, limit } => write!(f, "archive member '{member}' is too large: {limit}"),
            ClockOnClocklessFile { path } => write!(
                f,
                "{P} clocks: '{path}' is clockless (Chrome JSON): its events are on its own per-file \
                 timeline, so relating a named clock (clocks.clock) would not place them; pin it \
                 instead (sync_to without a clock of its own)"
            ),
            PrivateTimelineOfClockedFile { path, reference } => write!(
                f,
                "{P} clocks: '{path}' is synced to the private timeline of '{reference}', which \
                 carries its own clocks; name the reference clock (sync_to.clock, e.g. BOOTTIME)"
            ),
            CannotComputeOffset { path, reference, reason } => write!(
                f,
                "cannot compute the clock offset of '{path}' relative to '{reference}': {reason}. \
                 Give the offset (offset_ns), or the file's clock relation (clock_sample / \
                 recorded_here)"
            ),
            NotAnArchive(m) => write!(f, "not a ZIP or TAR archive: {m}"),
            Corrupt(m) => write!(f, "damaged archive: {m}"),
        }
    }
}

impl std::error::Error for ArchiveError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ArchiveError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl ArchiveError {
    pub(crate) fn io(path: Option<&std::path::Path>, source: std::io::Error) -> Self {
        ArchiveError::Io {
            path: path.map(|p| p.to_path_buf()),
            source,
        }
    }
}
