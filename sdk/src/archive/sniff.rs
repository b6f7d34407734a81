//! What a member is, told by its content the way trace_processor tells it
//! (writer notes §4.1: "each member is type-sniffed by content, not
//! extension"), and what a Perfetto member says about machines and clocks.
//!
//! Perfetto members are walked packet by packet on the wire (field 1 of
//! `Trace`, length-delimited), reading only `clock_snapshot` (field 6, decoded
//! with the `ringtrace-protos` prost type), `machine_id` (field 98) and
//! `compressed_packets` (field 50, zlib, walked recursively). Everything else
//! is skipped by wire type, so files from any producer are read safely, and a
//! truncated last packet (a trace cut by a crash) ends the walk.

use super::clock::ClockSample;
use prost::Message;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;

/// What an archive member is.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum MemberKind {
    /// A Perfetto protobuf trace (first byte 0x0A).
    Perfetto(ProtoInfo),
    /// A Chrome JSON trace (`{"` or `[{"` once whitespace is removed): clockless.
    Json,
    /// A `perfetto_manifest` document.
    Manifest,
    /// A gzip stream (a compressed trace, a container for trace_processor).
    Gzip {
        /// A gzip member of it decompresses to a manifest.
        holds_manifest: bool,
    },
    /// A ZIP archive.
    Zip,
    /// A TAR archive.
    Tar,
    /// No bytes at all.
    Empty,
    /// Starts like JSON but is not detectable as a trace (`[]`, `{}`).
    UndetectableJson,
    /// Something else (systrace text, perf data, ...): passed through.
    Other,
}

impl MemberKind {
    /// A short description for messages.
    pub fn describe(&self) -> &'static str {
        match self {
            MemberKind::Perfetto(_) => "a Perfetto protobuf trace",
            MemberKind::Json => "a Chrome JSON trace",
            MemberKind::Manifest => "a perfetto_manifest",
            MemberKind::Gzip { .. } => "a gzip container",
            MemberKind::Zip => "a ZIP archive",
            MemberKind::Tar => "a TAR archive",
            MemberKind::Empty => "empty",
            MemberKind::UndetectableJson => "undetectable JSON",
            MemberKind::Other => "another format",
        }
    }

    /// Archives, compressed containers and manifests: not traces themselves,
    /// so the manifest may not override them.
    pub fn is_container(&self) -> bool {
        matches!(
            self,
            MemberKind::Manifest | MemberKind::Gzip { .. } | MemberKind::Zip | MemberKind::Tar
        )
    }

    /// The Perfetto details, for a Perfetto member.
    pub fn proto(&self) -> Option<&ProtoInfo> {
        match self {
            MemberKind::Perfetto(p) => Some(p),
            _ => None,
        }
    }
}

/// What ringtrace reads from a Perfetto member.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProtoInfo {
    /// Packets walked.
    pub packets: u64,
    /// Packets carrying a `ClockSnapshot`.
    pub clock_snapshots: u64,
    /// Non-zero `machine_id`s carried by packets (a multi-machine trace when
    /// not empty).
    pub machine_ids: BTreeSet<u32>,
    /// The first snapshot relating BOOTTIME and REALTIME, per machine id (0 =
    /// packets without a machine id).
    pub samples: BTreeMap<u32, ClockSample>,
    /// The file ends inside a packet (a trace cut short; readable up to there).
    pub truncated: bool,
}

impl ProtoInfo {
    /// Packets of the file come from machines other than its own.
    pub fn is_multi_machine(&self) -> bool {
        !self.machine_ids.is_empty()
    }
}

/// A manifest is detected by content: `{"perfetto_manifest"` once whitespace
/// is removed from the start of the file.
pub(crate) fn is_manifest(data: &[u8]) -> bool {
    starts_without_ws(data, b"{\"perfetto_manifest\"")
}

/// `data`, whitespace removed, starts with `prefix` (looking at most 4 KiB in).
fn starts_without_ws(data: &[u8], prefix: &[u8]) -> bool {
    let mut i = 0;
    for &b in data.iter().take(4096) {
        if b.is_ascii_whitespace() {
            continue;
        }
        if b != prefix[i] {
            return false;
        }
        i += 1;
        if i == prefix.len() {
            return true;
        }
    }
    false
}

/// Tells what `data` is.
pub fn sniff(data: &[u8]) -> MemberKind {
    if data.is_empty() {
        return MemberKind::Empty;
    }
    if data.len() >= 2 && data[0] == 0x1f && data[1] == 0x8b {
        return MemberKind::Gzip {
            holds_manifest: gzip_holds_manifest(data),
        };
    }
    if data.starts_with(b"PK\x03\x04") || data.starts_with(b"PK\x05\x06") {
        return MemberKind::Zip;
    }
    if data.len() >= 262 && &data[257..262] == b"ustar" {
        return MemberKind::Tar;
    }
    if data[0] == 0x0a {
        return MemberKind::Perfetto(scan_proto(data));
    }
    if is_manifest(data) {
        return MemberKind::Manifest;
    }
    if starts_without_ws(data, b"{\"") || starts_without_ws(data, b"[{\"") {
        return MemberKind::Json;
    }
    match data.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'[') | Some(b'{') => MemberKind::UndetectableJson,
        None => MemberKind::Empty,
        _ => MemberKind::Other,
    }
}

/// Splits a (possibly concatenated) gzip stream into its decompressed members.
/// Stops at the first damaged member.
pub(crate) fn gunzip_members(data: &[u8], limit_per_member: u64) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut rest = data;
    while rest.len() >= 2 && rest[0] == 0x1f && rest[1] == 0x8b {
        let mut dec = flate2::bufread::GzDecoder::new(rest);
        let mut buf = Vec::new();
        // Read the member (up to the limit), then the rest of it to find where
        // the next member starts.
        if (&mut dec)
            .take(limit_per_member)
            .read_to_end(&mut buf)
            .is_err()
        {
            break;
        }
        if std::io::copy(&mut dec, &mut std::io::sink()).is_err() {
            out.push(buf);
            break;
        }
        let left = dec.into_inner();
        out.push(buf);
        if left.len() == rest.len() {
            break;
        }
        rest = left;
    }
    out
}

fn gzip_holds_manifest(data: &[u8]) -> bool {
    gunzip_members(data, 4096).iter().any(|m| is_manifest(m))
}

/// Walks a Perfetto trace's packets (see the module docs).
pub fn scan_proto(data: &[u8]) -> ProtoInfo {
    let mut info = ProtoInfo::default();
    walk_trace(data, &mut info, 0);
    info
}

fn walk_trace(mut data: &[u8], info: &mut ProtoInfo, depth: u32) {
    while !data.is_empty() {
        let Some((key, rest)) = varint(data) else {
            info.truncated = true;
            return;
        };
        let (field, wire) = (key >> 3, (key & 7) as u8);
        let Some((value, rest)) = field_value(wire, rest) else {
            info.truncated = true;
            return;
        };
        data = rest;
        if field == 1 && wire == 2 {
            walk_packet(value, info, depth);
        }
    }
}

fn walk_packet(mut data: &[u8], info: &mut ProtoInfo, depth: u32) {
    info.packets += 1;
    let mut machine = 0u32;
    let mut snapshot = None;
    while !data.is_empty() {
        let Some((key, rest)) = varint(data) else {
            return;
        };
        let (field, wire) = (key >> 3, (key & 7) as u8);
        let Some((value, rest)) = field_value(wire, rest) else {
            return;
        };
        data = rest;
        match (field, wire) {
            (6, 2) => snapshot = Some(value),
            (98, 0) => machine = varint(value).map_or(0, |(v, _)| v as u32),
            (50, 2) if depth < 4 => {
                let mut inflated = Vec::new();
                if flate2::read::ZlibDecoder::new(value)
                    .read_to_end(&mut inflated)
                    .is_ok()
                {
                    walk_trace(&inflated, info, depth + 1);
                }
            }
            _ => {}
        }
    }
    if machine != 0 {
        info.machine_ids.insert(machine);
    }
    if let Some(bytes) = snapshot {
        info.clock_snapshots += 1;
        if let Ok(cs) = ringtrace_protos::ClockSnapshot::decode(bytes) {
            if let Some(sample) = sample_of(&cs) {
                info.samples.entry(machine).or_insert(sample);
            }
        }
    }
}

/// BOOTTIME and REALTIME (and MONOTONIC) of a snapshot, when it holds both
/// as plain nanosecond clocks.
fn sample_of(cs: &ringtrace_protos::ClockSnapshot) -> Option<ClockSample> {
    let get = |id: u32| {
        cs.clocks
            .iter()
            .find(|c| {
                c.clock_id == Some(id)
                    && !c.is_incremental.unwrap_or(false)
                    && c.unit_multiplier_ns.unwrap_or(1) == 1
            })
            .and_then(|c| c.timestamp)
    };
    Some(ClockSample {
        boottime_ns: get(6)?,
        realtime_ns: get(1)?,
        monotonic_ns: get(3),
    })
}

/// A varint and what follows it.
pub(crate) fn varint(data: &[u8]) -> Option<(u64, &[u8])> {
    let mut v = 0u64;
    for (i, &b) in data.iter().enumerate().take(10) {
        v |= ((b & 0x7f) as u64) << (7 * i);
        if b & 0x80 == 0 {
            return Some((v, &data[i + 1..]));
        }
    }
    None
}

/// The value bytes of a field of wire type `wire` (for varints: the varint's
/// bytes) and what follows.
fn field_value(wire: u8, data: &[u8]) -> Option<(&[u8], &[u8])> {
    match wire {
        0 => {
            let n = data.iter().position(|b| b & 0x80 == 0)? + 1;
            Some(data.split_at(n))
        }
        1 => (data.len() >= 8).then(|| data.split_at(8)),
        5 => (data.len() >= 4).then(|| data.split_at(4)),
        2 => {
            let (len, rest) = varint(data)?;
            let len = usize::try_from(len).ok()?;
            (rest.len() >= len).then(|| rest.split_at(len))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ringtrace_protos::{clock_snapshot, ClockSnapshot, Trace, TracePacket};

    fn snapshot_packet(machine: Option<u32>, boot: u64, real: u64) -> TracePacket {
        TracePacket {
            trusted_packet_sequence_id: Some(1),
            clock_snapshot: Some(ClockSnapshot {
                clocks: vec![
                    clock_snapshot::Clock {
                        clock_id: Some(6),
                        timestamp: Some(boot),
                        ..Default::default()
                    },
                    clock_snapshot::Clock {
                        clock_id: Some(1),
                        timestamp: Some(real),
                        ..Default::default()
                    },
                ],
                primary_trace_clock: None,
            }),
            machine_id: machine,
            ..Default::default()
        }
    }

    #[test]
    fn kinds_by_content() {
        assert_eq!(sniff(b""), MemberKind::Empty);
        assert_eq!(sniff(b"  [\n{\"name\":1}"), MemberKind::Json);
        assert_eq!(sniff(b"{\"traceEvents\":[]}"), MemberKind::Json);
        assert_eq!(
            sniff(b" { \"perfetto_manifest\": {}}"),
            MemberKind::Manifest
        );
        assert_eq!(sniff(b"[]"), MemberKind::UndetectableJson);
        assert_eq!(sniff(b"# tracer: nop"), MemberKind::Other);
        assert_eq!(sniff(b"PK\x03\x04rest"), MemberKind::Zip);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        std::io::Write::write_all(&mut gz, b"{\"perfetto_manifest\":{\"version\":1}}").unwrap();
        assert_eq!(
            sniff(&gz.finish().unwrap()),
            MemberKind::Gzip {
                holds_manifest: true
            }
        );
    }

    #[test]
    fn proto_machines_and_samples() {
        let trace = Trace {
            packet: vec![
                snapshot_packet(None, 10, 1000),
                snapshot_packet(Some(7), 20, 1000),
                snapshot_packet(None, 30, 3000),
            ],
        };
        let bytes = trace.encode_to_vec();
        let MemberKind::Perfetto(info) = sniff(&bytes) else {
            panic!("not proto")
        };
        assert_eq!(info.packets, 3);
        assert_eq!(info.clock_snapshots, 3);
        assert_eq!(
            info.machine_ids.iter().copied().collect::<Vec<_>>(),
            vec![7]
        );
        assert_eq!(info.samples[&0].boottime_ns, 10);
        assert_eq!(info.samples[&7].boottime_ns, 20);
        assert!(!info.truncated);
        let cut = scan_proto(&bytes[..bytes.len() - 3]);
        assert!(cut.truncated);
        assert_eq!(cut.packets, 2);
    }
}
