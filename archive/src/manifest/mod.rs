//! The `perfetto_manifest` document: its model, its JSON (written by hand,
//! `perfetto_manifest` first), the reader's parse rules
//! ([`Manifest::from_json`]) and the semantic rules checked against the
//! archive's members ([`Manifest::validate`]).
//!
//! The rules follow the spec (`perfetto-manifest.md`) and trace_processor's
//! reader (`perfetto_manifest_reader.cc`): a file is *multi-machine* for the
//! clock references when its entry declares `machines`; a clock override
//! *pins* the file (treats it as clockless) when `clocks.clock` is absent and
//! *relates* one of its clocks when it is present; `sync_to.clock` absent means
//! the reference file's own per-file timeline.
//!
//! Two rules are ringtrace's own, stricter than the reader, because the
//! reader accepts them but the merged timeline is then wrong:
//! relating a named clock of a clockless (JSON) file
//! ([`ArchiveError::ClockOnClocklessFile`]) and pinning to the private
//! timeline of a file that carries clocks
//! ([`ArchiveError::PrivateTimelineOfClockedFile`]).

use super::clock::Clock;
use super::sniff::{MemberKind, ProtoInfo};
use super::ArchiveError;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

/// A manifest attribute value: a string or an integer (the only two kinds
/// the format allows; they become `metadata` rows `manifest_attribute.<key>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttrValue {
    /// A string value.
    Str(String),
    /// An integer value.
    Int(i64),
}

impl From<&str> for AttrValue {
    fn from(s: &str) -> Self {
        AttrValue::Str(s.to_owned())
    }
}
impl From<String> for AttrValue {
    fn from(s: String) -> Self {
        AttrValue::Str(s)
    }
}
macro_rules! attr_from_int {
    ($($t:ty),*) => {$(
        impl From<$t> for AttrValue {
            fn from(v: $t) -> Self {
                AttrValue::Int(v as i64)
            }
        }
    )*};
}
attr_from_int!(i8, i16, i32, i64, u8, u16, u32);

/// `trace_time`: the clock of the merged timeline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceTime {
    /// The clock.
    pub clock: Clock,
    /// Whose clock: the machine of this file (default: the host machine).
    pub file: Option<String>,
    /// For a multi-machine `file`: which of its machines.
    pub machine: Option<String>,
}

/// One entry of `files`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FileEntry {
    /// The member's exact name.
    pub path: String,
    /// `machine.name`: the whole file belongs to this machine.
    pub machine: Option<String>,
    /// `machines`: (embedded id, name) pairs of a multi-machine trace.
    pub machines: Option<Vec<(i64, String)>>,
    /// `clocks`: how this file's clock relates to another file's.
    pub clocks: Option<Clocks>,
}

/// A `clocks` block.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Clocks {
    /// `clock`: which of this file's clocks to relate (RELATE); absent = the
    /// file is clockless and pinned (PIN).
    pub clock: Option<Clock>,
    /// `machine`: which of this file's machines owns `clock`.
    pub machine: Option<String>,
    /// `sync_to`: the reference (required).
    pub sync_to: Option<SyncTo>,
    /// `offset_ns`: the source reads T when the reference reads T + offset_ns.
    pub offset_ns: Option<i64>,
}

/// A `sync_to` block.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SyncTo {
    /// `file`: the reference file (required).
    pub file: Option<String>,
    /// `machine`: which of the reference's machines.
    pub machine: Option<String>,
    /// `clock`: the reference clock; absent = the reference's own per-file
    /// timeline.
    pub clock: Option<Clock>,
}

/// A `perfetto_manifest` document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// `version`: must be `Some(1)`.
    pub version: Option<i64>,
    /// `trace_time`.
    pub trace_time: Option<TraceTime>,
    /// `files`.
    pub files: Vec<FileEntry>,
    /// `attributes`, in order.
    pub attributes: Vec<(String, AttrValue)>,
}

impl Default for Manifest {
    fn default() -> Self {
        Manifest::new()
    }
}

/// What [`Manifest::validate`] needs to know about a member.
#[derive(Debug, Clone)]
pub struct MemberInfo {
    /// The member's name.
    pub name: String,
    /// What it is.
    pub kind: MemberKind,
    /// Its size in bytes.
    pub len: u64,
}

impl Manifest {
    /// An empty version-1 manifest.
    pub fn new() -> Manifest {
        Manifest {
            version: Some(1),
            trace_time: None,
            files: Vec::new(),
            attributes: Vec::new(),
        }
    }

    /// The entry of `path`.
    pub fn entry(&self, path: &str) -> Option<&FileEntry> {
        self.files.iter().find(|f| f.path == path)
    }

    /// The JSON text: `{"perfetto_manifest": {...}}` with `perfetto_manifest`
    /// as the first key (trace_processor detects the file by that prefix) and
    /// every other field only when set.
    pub fn to_json(&self) -> String {
        let mut s = String::from("{\"perfetto_manifest\": {\n");
        let mut fields: Vec<String> = Vec::new();
        if let Some(v) = self.version {
            fields.push(format!("  \"version\": {v}"));
        }
        if let Some(tt) = &self.trace_time {
            let mut o = format!("  \"trace_time\": {{\"clock\": {}", quote(tt.clock.name()));
            if let Some(f) = &tt.file {
                let _ = write!(o, ", \"file\": {}", quote(f));
            }
            if let Some(m) = &tt.machine {
                let _ = write!(o, ", \"machine\": {}", quote(m));
            }
            o.push('}');
            fields.push(o);
        }
        if !self.files.is_empty() {
            let entries: Vec<String> = self
                .files
                .iter()
                .map(|e| format!("    {}", entry_json(e)))
                .collect();
            fields.push(format!("  \"files\": [\n{}\n  ]", entries.join(",\n")));
        }
        if !self.attributes.is_empty() {
            let attrs: Vec<String> = self
                .attributes
                .iter()
                .map(|(k, v)| match v {
                    AttrValue::Str(s) => format!("{}: {}", quote(k), quote(s)),
                    AttrValue::Int(i) => format!("{}: {i}", quote(k)),
                })
                .collect();
            fields.push(format!("  \"attributes\": {{{}}}", attrs.join(", ")));
        }
        s.push_str(&fields.join(",\n"));
        s.push_str("\n}}\n");
        s
    }

    /// Parses a manifest as trace_processor's reader does, with its errors:
    /// the document must start with `{"perfetto_manifest"`, `version` must be
    /// 1, clock names must be known, `clocks` needs `sync_to` with a `file`,
    /// `offset_ns` must be an integer other than INT64_MIN, `machine` and
    /// `machines` are exclusive, names non-empty, ids in `[0, 2^32 - 1]`,
    /// attributes strings or integers. Unknown fields are ignored.
    ///
    /// # Errors
    ///
    /// The [`ArchiveError`] of the first violation.
    ///
    /// # Examples
    ///
    /// ```
    /// use ringtrace_archive::{ArchiveError, Manifest};
    /// let m = Manifest::from_json(r#"{"perfetto_manifest": {"version": 1}}"#).unwrap();
    /// assert_eq!(m.version, Some(1));
    /// let e = Manifest::from_json(r#"{"perfetto_manifest": {"version": 2}}"#).unwrap_err();
    /// assert!(matches!(e, ArchiveError::UnsupportedVersion(2)));
    /// ```
    pub fn from_json(text: &str) -> Result<Manifest, ArchiveError> {
        let bad = |m: &str| ArchiveError::InvalidManifest(m.to_owned());
        if !super::sniff::is_manifest(text.as_bytes()) {
            return Err(bad(
                "expected a JSON object whose first key is perfetto_manifest",
            ));
        }
        let root: Value = serde_json::from_str(text)
            .map_err(|e| ArchiveError::InvalidManifest(format!("not valid JSON: {e}")))?;
        let meta = root
            .get("perfetto_manifest")
            .filter(|m| m.is_object())
            .ok_or_else(|| bad("expected a JSON object with a top-level perfetto_manifest key"))?;
        let version = match meta.get("version") {
            None => return Err(ArchiveError::MissingVersion),
            Some(v) => v
                .as_i64()
                .ok_or_else(|| bad("version must be an integer"))?,
        };
        if version != 1 {
            return Err(ArchiveError::UnsupportedVersion(version));
        }
        let mut m = Manifest {
            version: Some(version),
            ..Manifest::new()
        };
        if let Some(tt) = meta.get("trace_time") {
            if !tt.is_object() {
                return Err(bad("trace_time must be an object"));
            }
            let clock = parse_clock(
                tt.get("clock")
                    .ok_or_else(|| bad("trace_time needs a clock"))?,
            )?;
            m.trace_time = Some(TraceTime {
                clock,
                file: opt_string(tt, "file", "trace_time: file must be a string")?,
                machine: opt_string(tt, "machine", "trace_time: machine must be a string")?,
            });
        }
        if let Some(files) = meta.get("files") {
            let files = files
                .as_array()
                .ok_or_else(|| bad("files must be an array"))?;
            for f in files {
                m.files.push(parse_entry(f)?);
            }
        }
        if let Some(attrs) = meta.get("attributes") {
            let attrs = attrs.as_object().ok_or_else(|| {
                bad("attributes must be an object of string or integer values, e.g. \"attributes\": {\"benchmark\": \"startup\"}")
            })?;
            for (k, v) in attrs {
                if k.is_empty() {
                    return Err(ArchiveError::InvalidAttribute {
                        key: k.clone(),
                        reason: "keys must be non-empty".into(),
                    });
                }
                let value = if let Some(s) = v.as_str() {
                    AttrValue::Str(s.to_owned())
                } else if let Some(i) = v.as_i64() {
                    AttrValue::Int(i)
                } else {
                    return Err(ArchiveError::InvalidAttribute {
                        key: k.clone(),
                        reason: "must be a string or an integer".into(),
                    });
                };
                m.attributes.push((k.clone(), value));
            }
        }
        Ok(m)
    }

    /// Checks every rule of the spec that depends on the archive's members
    /// (`members`: every member except the manifest itself), plus the ones
    /// [`Manifest::from_json`] checks, so a manifest built in code is held to
    /// the same rules.
    ///
    /// # Errors
    ///
    /// The [`ArchiveError`] of the first violation.
    pub fn validate(&self, members: &[MemberInfo]) -> Result<(), ArchiveError> {
        match self.version {
            None => return Err(ArchiveError::MissingVersion),
            Some(1) => {}
            Some(v) => return Err(ArchiveError::UnsupportedVersion(v)),
        }
        let by_name: HashMap<&str, &MemberInfo> =
            members.iter().map(|m| (m.name.as_str(), m)).collect();
        let mut keys = HashSet::new();
        for (k, _) in &self.attributes {
            if k.is_empty() {
                return Err(ArchiveError::InvalidAttribute {
                    key: k.clone(),
                    reason: "keys must be non-empty".into(),
                });
            }
            if !keys.insert(k.as_str()) {
                return Err(ArchiveError::InvalidAttribute {
                    key: k.clone(),
                    reason: "is given twice".into(),
                });
            }
        }

        // Entries on their own.
        let mut seen = HashSet::new();
        for e in &self.files {
            if !seen.insert(e.path.as_str()) {
                return Err(ArchiveError::DuplicateEntry {
                    path: e.path.clone(),
                });
            }
            let Some(member) = by_name.get(e.path.as_str()) else {
                return Err(ArchiveError::EntryWithoutMember {
                    path: e.path.clone(),
                });
            };
            let overrides = e.machine.is_some() || e.machines.is_some() || e.clocks.is_some();
            if overrides && member.kind.is_container() {
                return Err(ArchiveError::OverrideOnContainer {
                    path: e.path.clone(),
                    kind: member.kind.describe(),
                });
            }
            if e.machine.is_some() && e.machines.is_some() {
                return Err(ArchiveError::MachineAndMachines {
                    path: e.path.clone(),
                });
            }
            if e.machine.as_deref() == Some("") {
                return Err(ArchiveError::EmptyMachineName {
                    path: e.path.clone(),
                });
            }
            if let Some(ms) = &e.machines {
                for (id, name) in ms {
                    if !(0..=u32::MAX as i64).contains(id) {
                        return Err(ArchiveError::MachineIdOutOfRange {
                            path: e.path.clone(),
                            id: *id,
                        });
                    }
                    if name.is_empty() {
                        return Err(ArchiveError::EmptyMachineName {
                            path: e.path.clone(),
                        });
                    }
                }
            }
            if let Some(proto) = member.kind.proto() {
                check_embedded_machines(e, proto)?;
            }
            if let Some(c) = &e.clocks {
                if c.offset_ns == Some(i64::MIN) {
                    return Err(ArchiveError::OffsetOutOfRange {
                        path: e.path.clone(),
                    });
                }
            }
        }

        // References between entries.
        for e in &self.files {
            let Some(c) = &e.clocks else { continue };
            let member = by_name[e.path.as_str()];
            let sync = c
                .sync_to
                .as_ref()
                .ok_or_else(|| ArchiveError::ClocksWithoutSyncTo {
                    path: e.path.clone(),
                })?;
            let Some(ref_file) = &sync.file else {
                return Err(match &sync.machine {
                    Some(m) => ArchiveError::MachineWithoutFile {
                        field: "clocks: sync_to.machine",
                        machine: m.clone(),
                    },
                    None => ArchiveError::SyncToWithoutFile {
                        path: e.path.clone(),
                    },
                });
            };
            if ref_file == &e.path {
                return Err(ArchiveError::SelfReference {
                    path: e.path.clone(),
                });
            }
            // The source clock's machine.
            match &c.machine {
                None if is_multi(e) => {
                    return Err(ArchiveError::SourceIsMultiMachine {
                        path: e.path.clone(),
                    })
                }
                Some(m) if !declares(e, m) => {
                    return Err(ArchiveError::MachineNotDeclared {
                        field: "clocks: machine",
                        machine: m.clone(),
                        file: e.path.clone(),
                    })
                }
                _ => {}
            }
            let reference = self.resolve_ref(
                "clocks: sync_to.file",
                "clocks: sync_to.machine",
                ref_file,
                sync.machine.as_deref(),
            )?;
            // PIN vs RELATE.
            match (c.clock, &member.kind) {
                (None, MemberKind::Perfetto(p)) if p.clock_snapshots > 0 => {
                    return Err(ArchiveError::PinnedFileHasClocks {
                        path: e.path.clone(),
                    })
                }
                (Some(_), MemberKind::Json) => {
                    return Err(ArchiveError::ClockOnClocklessFile {
                        path: e.path.clone(),
                    })
                }
                _ => {}
            }
            if sync.clock.is_none() {
                if let Some(MemberKind::Perfetto(p)) =
                    by_name.get(reference.path.as_str()).map(|m| &m.kind)
                {
                    if p.clock_snapshots > 0 {
                        return Err(ArchiveError::PrivateTimelineOfClockedFile {
                            path: e.path.clone(),
                            reference: reference.path.clone(),
                        });
                    }
                }
            }
        }
        if let Some(tt) = &self.trace_time {
            match (&tt.file, &tt.machine) {
                (None, Some(m)) => {
                    return Err(ArchiveError::MachineWithoutFile {
                        field: "trace_time: machine",
                        machine: m.clone(),
                    })
                }
                (Some(f), m) => {
                    self.resolve_ref("trace_time: file", "trace_time: machine", f, m.as_deref())?;
                }
                (None, None) => {}
            }
        }
        Ok(())
    }

    /// The entry a reference names, checked as the reader's `resolve_ref`.
    fn resolve_ref(
        &self,
        file_field: &'static str,
        machine_field: &'static str,
        file: &str,
        machine: Option<&str>,
    ) -> Result<&FileEntry, ArchiveError> {
        let r = self.entry(file).ok_or_else(|| ArchiveError::UnknownFile {
            field: file_field,
            file: file.to_owned(),
        })?;
        match machine {
            None if is_multi(r) => Err(ArchiveError::ReferenceIsMultiMachine {
                field: machine_field,
                file: file.to_owned(),
            }),
            Some(m) if !declares(r, m) => Err(ArchiveError::MachineNotDeclared {
                field: machine_field,
                machine: m.to_owned(),
                file: file.to_owned(),
            }),
            _ => Ok(r),
        }
    }
}

/// A multi-machine entry, for clock references: it declares `machines`.
fn is_multi(e: &FileEntry) -> bool {
    e.machines.as_ref().is_some_and(|m| !m.is_empty())
}

/// The entry names machine `m` (its `machine` or one of its `machines`).
fn declares(e: &FileEntry, m: &str) -> bool {
    e.machine.as_deref() == Some(m) || e.machines.iter().flatten().any(|(_, n)| n == m)
}

/// `machine` on a multi-machine trace, and ids that `machines` leaves out.
fn check_embedded_machines(e: &FileEntry, proto: &ProtoInfo) -> Result<(), ArchiveError> {
    if e.machine.is_some() && proto.is_multi_machine() {
        return Err(ArchiveError::MachineOnMultiMachineFile {
            path: e.path.clone(),
            ids: proto.machine_ids.iter().copied().collect(),
        });
    }
    if let Some(ms) = &e.machines {
        for &id in &proto.machine_ids {
            if !ms.iter().any(|(d, _)| *d == id as i64) {
                return Err(ArchiveError::UndeclaredMachineId {
                    path: e.path.clone(),
                    id,
                });
            }
        }
    }
    Ok(())
}

fn entry_json(e: &FileEntry) -> String {
    let mut o = format!("{{\"path\": {}", quote(&e.path));
    if let Some(m) = &e.machine {
        let _ = write!(o, ", \"machine\": {{\"name\": {}}}", quote(m));
    }
    if let Some(ms) = &e.machines {
        let list: Vec<String> = ms
            .iter()
            .map(|(id, n)| format!("{{\"id\": {id}, \"name\": {}}}", quote(n)))
            .collect();
        let _ = write!(o, ", \"machines\": [{}]", list.join(", "));
    }
    if let Some(c) = &e.clocks {
        let mut parts = Vec::new();
        if let Some(clock) = c.clock {
            parts.push(format!("\"clock\": {}", quote(clock.name())));
        }
        if let Some(m) = &c.machine {
            parts.push(format!("\"machine\": {}", quote(m)));
        }
        if let Some(s) = &c.sync_to {
            let mut sp = Vec::new();
            if let Some(f) = &s.file {
                sp.push(format!("\"file\": {}", quote(f)));
            }
            if let Some(m) = &s.machine {
                sp.push(format!("\"machine\": {}", quote(m)));
            }
            if let Some(clock) = s.clock {
                sp.push(format!("\"clock\": {}", quote(clock.name())));
            }
            parts.push(format!("\"sync_to\": {{{}}}", sp.join(", ")));
        }
        if let Some(off) = c.offset_ns {
            parts.push(format!("\"offset_ns\": {off}"));
        }
        let _ = write!(o, ", \"clocks\": {{{}}}", parts.join(", "));
    }
    o.push('}');
    o
}

/// A JSON string literal: quotes, backslashes and control characters escaped,
/// everything else raw UTF-8.
pub(crate) fn quote(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            '\r' => o.push_str("\\r"),
            '\t' => o.push_str("\\t"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

fn parse_clock(v: &Value) -> Result<Clock, ArchiveError> {
    v.as_str()
        .ok_or_else(|| ArchiveError::InvalidManifest("clock name must be a string".into()))?
        .parse()
}

fn opt_string(obj: &Value, key: &str, msg: &str) -> Result<Option<String>, ArchiveError> {
    match obj.get(key) {
        None => Ok(None),
        Some(v) => v
            .as_str()
            .map(|s| Some(s.to_owned()))
            .ok_or_else(|| ArchiveError::InvalidManifest(msg.into())),
    }
}

fn parse_entry(f: &Value) -> Result<FileEntry, ArchiveError> {
    let path = f
        .get("path")
        .and_then(Value::as_str)
        .filter(|_| f.is_object())
        .ok_or_else(|| {
            ArchiveError::InvalidManifest("files entries must be objects with a string path".into())
        })?
        .to_owned();
    let mut e = FileEntry {
        path,
        ..Default::default()
    };
    if let Some(c) = f.get("clocks") {
        if !c.is_object() {
            return Err(ArchiveError::InvalidManifest(
                "clocks must be an object".into(),
            ));
        }
        e.clocks = Some(parse_clocks(&e.path, c)?);
    }
    if f.get("machine").is_some() && f.get("machines").is_some() {
        return Err(ArchiveError::MachineAndMachines { path: e.path });
    }
    if let Some(m) = f.get("machine") {
        let name = m.get("name").and_then(Value::as_str).filter(|_| m.is_object()).ok_or_else(|| {
            ArchiveError::InvalidManifest(
                "machine must be an object with a string name, e.g. \"machine\": {\"name\": \"phone\"}".into(),
            )
        })?;
        if name.is_empty() {
            return Err(ArchiveError::EmptyMachineName { path: e.path });
        }
        e.machine = Some(name.to_owned());
    }
    if let Some(ms) = f.get("machines") {
        let ms = ms
            .as_array()
            .ok_or_else(|| ArchiveError::InvalidManifest("machines must be an array".into()))?;
        let mut list = Vec::new();
        for m in ms {
            let entry_err = || {
                ArchiveError::InvalidManifest(
                    "machines entries need an integer id and a string name, e.g. \"machines\": [{\"id\": 0, \"name\": \"phone\"}]"
                        .into(),
                )
            };
            let id = m
                .get("id")
                .filter(|v| v.is_number())
                .ok_or_else(entry_err)?;
            let name = m
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(entry_err)?;
            let id = match (id.as_i64(), id.as_u64(), id.as_f64()) {
                (Some(i), _, _) => i,
                (None, Some(_), _) => i64::MAX,
                (_, _, Some(f)) if f.fract() == 0.0 && f.abs() < 9.2e18 => f as i64,
                _ => {
                    return Err(ArchiveError::MachineIdOutOfRange {
                        path: e.path,
                        id: i64::MAX,
                    })
                }
            };
            if !(0..=u32::MAX as i64).contains(&id) {
                return Err(ArchiveError::MachineIdOutOfRange { path: e.path, id });
            }
            if name.is_empty() {
                return Err(ArchiveError::EmptyMachineName { path: e.path });
            }
            list.push((id, name.to_owned()));
        }
        e.machines = Some(list);
    }
    Ok(e)
}

fn parse_clocks(path: &str, c: &Value) -> Result<Clocks, ArchiveError> {
    let mut out = Clocks {
        machine: opt_string(c, "machine", "clocks: machine must be a string")?,
        ..Default::default()
    };
    if let Some(clock) = c.get("clock") {
        out.clock = Some(parse_clock(clock)?);
    }
    let sync = c
        .get("sync_to")
        .ok_or_else(|| ArchiveError::ClocksWithoutSyncTo {
            path: path.to_owned(),
        })?;
    if !sync.is_object() {
        return Err(ArchiveError::InvalidManifest(
            "clocks: sync_to must be an object".into(),
        ));
    }
    let machine = opt_string(sync, "machine", "clocks: sync_to.machine must be a string")?;
    let file = match sync.get("file").map(Value::as_str) {
        Some(Some(f)) => f.to_owned(),
        _ => {
            return Err(match machine {
                Some(m) => ArchiveError::MachineWithoutFile {
                    field: "clocks: sync_to.machine",
                    machine: m,
                },
                None => ArchiveError::SyncToWithoutFile {
                    path: path.to_owned(),
                },
            })
        }
    };
    let clock = sync.get("clock").map(parse_clock).transpose()?;
    out.sync_to = Some(SyncTo {
        file: Some(file),
        machine,
        clock,
    });
    if let Some(off) = c.get("offset_ns") {
        let v = match (off.as_i64(), off.as_u64()) {
            (Some(v), _) => v,
            (None, Some(_)) => {
                return Err(ArchiveError::OffsetOutOfRange {
                    path: path.to_owned(),
                })
            }
            _ => {
                return Err(ArchiveError::OffsetNotInteger {
                    path: path.to_owned(),
                    value: off.to_string(),
                })
            }
        };
        if v == i64::MIN {
            return Err(ArchiveError::OffsetOutOfRange {
                path: path.to_owned(),
            });
        }
        out.offset_ns = Some(v);
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
