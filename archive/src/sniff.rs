//! What a member is, told by its content the way trace_processor tells it
//! (writer notes §4.1: "each member is type-sniffed by content, not
//! extension"), and what a Perfetto member says about machines and clocks.
//!
//! [`sniff`] applies trace_processor's detection rules in its order: magic
//! numbers first (TAR, Fuchsia, perf.data, ZIP, gzip, ART method and heap
//! profiles), then the first 64 bytes (JSON and Gecko JSON once whitespace is
//! removed, ART text, systrace in its forms, Instruments XML, ctrace, ninja
//! logs), Android logcat lines, `perf script` text, and last the Perfetto
//! protobuf (first byte 0x0A). Data that matches none of them is
//! [`MemberKind::Unrecognized`]: trace_processor refuses it ("Unknown trace
//! type"), and so do [`Archive`](super::Archive) and
//! [`check_archive`](super::check_archive).
//!
//! Perfetto members are walked packet by packet on the wire (field 1 of
//! `Trace`, length-delimited), reading only `clock_snapshot` (field 6, decoded
//! with the `ringtrace-protos` prost type), `machine_id` (field 98) and
//! `compressed_packets` (field 50, zlib, walked recursively). Everything else
//! is skipped by wire type, so files from any producer are read safely, and a
//! truncated last packet (a trace cut by a crash) ends the walk. Compressed
//! packets nest at most 4 deep and inflate to at most
//! [`DEFAULT_UNPACK_LIMIT`](super::DEFAULT_UNPACK_LIMIT) bytes in all.

use super::clock::ClockSample;
use super::varint;
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
    /// Another format trace_processor reads (systrace text, perf data,
    /// Fuchsia, ninja logs, ...): passed through.
    Other,
    /// No format any Perfetto reader recognizes (text, junk): trace_processor
    /// fails the whole import with "Unknown trace type".
    Unrecognized,
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
            MemberKind::Unrecognized => "not a trace format any Perfetto reader recognizes",
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
    /// `compressed_packets` inflating to more than
    /// [`DEFAULT_UNPACK_LIMIT`](super::DEFAULT_UNPACK_LIMIT) bytes in all
    /// were not read (their clock snapshots and machine ids are not counted).
    pub compressed_over_limit: bool,
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

/// How far trace_processor looks into a file to tell text formats apart.
const LOOKAHEAD: usize = 64;

/// Tells what `data` is (see the module docs for the order of the rules).
pub fn sniff(data: &[u8]) -> MemberKind {
    if data.is_empty() {
        return MemberKind::Empty;
    }
    let magic_at = |at: usize, magic: &[u8]| data.get(at..at + magic.len()) == Some(magic);
    if magic_at(257, b"ustar\0") || magic_at(257, b"ustar  \0") {
        return MemberKind::Tar;
    }
    if magic_at(0, b"\x10\x00\x04\x46\x78\x54\x16\x00") || magic_at(0, b"PERFILE2") {
        return MemberKind::Other; // Fuchsia, perf.data
    }
    if magic_at(0, b"PK\x03\x04") || magic_at(0, b"PK\x05\x06") {
        return MemberKind::Zip;
    }
    if magic_at(0, &[0x1f, 0x8b]) {
        return MemberKind::Gzip {
            holds_manifest: gzip_holds_manifest(data),
        };
    }
    if magic_at(0, b"SLOW") || magic_at(0, b"JAVA PROFILE") {
        return MemberKind::Other; // ART method trace, ART heap dump
    }
    let head = &data[..data.len().min(LOOKAHEAD)];
    if is_manifest(data) {
        return MemberKind::Manifest;
    }
    if starts_without_ws(head, b"{\"") || starts_without_ws(head, b"[{\"") {
        // Gecko profiles (`{"meta"`, `{"libs"`) are read too.
        return MemberKind::Json;
    }
    let contains = |needle: &[u8]| head.windows(needle.len()).any(|w| w == needle);
    let lower: Vec<u8> = head.to_ascii_lowercase();
    let text_format = head.starts_with(b"*version\n")
        || contains(b"# tracer")
        || lower.starts_with(b"<!doctype html>")
        || lower.starts_with(b"<html>")
        || head.starts_with(b"<?xml version=\"1.0\"?>\n<trace-query-result>")
        || contains(b"TRACE:\n")
        || head.starts_with(b"# ninja log")
        || is_logcat(data)
        || is_perf_script(data)
        || head.starts_with(b" ");
    if text_format {
        return MemberKind::Other;
    }
    if data[0] == 0x0a {
        return MemberKind::Perfetto(scan_proto(data));
    }
    if head.starts_with(b"9,0,i,vers,") {
        return MemberKind::Other; // Android dumpstate
    }
    match data.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'[') | Some(b'{') => MemberKind::UndetectableJson,
        None => MemberKind::Empty,
        _ => MemberKind::Unrecognized,
    }
}

/// Android logcat text (`adb logcat -v threadtime` or a bugreport's): the
/// first line that is not a `--------` marker, within the first 4 KiB, is
/// `MM-DD HH:MM:SS.mmm` followed by pid, tid (and, in a bugreport, uid)
/// and a one-letter priority.
fn is_logcat(data: &[u8]) -> bool {
    let window = &data[..data.len().min(4096)];
    // Whole lines only: those ending before the window's last newline.
    let Some(last_nl) = window.iter().rposition(|&b| b == b'\n') else {
        return false;
    };
    let Some(line) = window[..last_nl]
        .split(|&b| b == b'\n')
        .find(|l| !l.starts_with(b"--------"))
    else {
        return false;
    };
    let parts: Vec<&[u8]> = line
        .split(|&b| b == b' ')
        .filter(|p| !p.is_empty())
        .collect();
    if parts.len() < 5 {
        return false;
    }
    let (date, time) = (parts[0], parts[1]);
    if date.len() != 5 || date[2] != b'-' {
        return false;
    }
    if time.len() < 10 || time[2] != b':' || time[5] != b':' || time[8] != b'.' {
        return false;
    }
    let priority = |p: &[u8]| p.len() == 1 && p[0].is_ascii_uppercase();
    priority(parts[4]) || parts.get(5).is_some_and(|p| priority(p))
}

/// `perf script` / simpleperf text: the first line holds a sample header,
/// `comm [pid/]tid [[cpu]] seconds.micros:` (six digits after the point).
fn is_perf_script(data: &[u8]) -> bool {
    let Some(nl) = data.iter().position(|&b| b == b'\n') else {
        return false;
    };
    let line = &data[..nl];
    line.iter()
        .enumerate()
        .filter(|&(_, &b)| b == b':')
        .any(|(colon, _)| perf_sample_head(&line[..colon]))
}

/// `before` (the text up to a colon) ends with a sample's tid (and cpu) and
/// timestamp.
fn perf_sample_head(before: &[u8]) -> bool {
    let n = before.len();
    if n < 8 || !before[n - 6..].iter().all(u8::is_ascii_digit) || before[n - 7] != b'.' {
        return false;
    }
    let until_dot = &before[..n - 7];
    let Some(space) = until_dot.iter().rposition(|&b| b == b' ') else {
        return false;
    };
    if !until_dot[space + 1..].iter().all(u8::is_ascii_digit) {
        return false;
    }
    // What precedes the timestamp: `comm [pid/]tid [[cpu]]`, tabs as spaces.
    let rest: Vec<u8> = until_dot[..=space]
        .iter()
        .map(|&b| if b == b'\t' { b' ' } else { b })
        .collect();
    let mut words = rest.split(|&b| b == b' ').filter(|w| !w.is_empty()).rev();
    let Some(mut word) = words.next() else {
        return false;
    };
    let is_u32 = |w: &[u8]| {
        !w.is_empty()
            && w.iter().all(u8::is_ascii_digit)
            && std::str::from_utf8(w).is_ok_and(|s| s.parse::<u32>().is_ok())
    };
    if word.len() >= 2 && word[0] == b'[' && word[word.len() - 1] == b']' {
        if !is_u32(&word[1..word.len() - 1]) {
            return false;
        }
        let Some(w) = words.next() else {
            return false;
        };
        word = w;
    }
    let ids: Vec<&[u8]> = word.split(|&b| b == b'/').collect();
    match ids.as_slice() {
        [tid] => is_u32(tid),
        [pid, tid] => is_u32(pid) && is_u32(tid),
        _ => false,
    }
}

/// The decompressed members of a (possibly concatenated) gzip stream, up to
/// the first damaged member; `Err(())` when together they hold more than
/// `limit` bytes (nothing larger is ever allocated).
pub(crate) fn gunzip_members(data: &[u8], limit: u64) -> Result<Vec<Vec<u8>>, ()> {
    let mut out = Vec::new();
    let mut left = limit;
    let mut rest = data;
    while rest.starts_with(&[0x1f, 0x8b]) {
        let mut dec = flate2::bufread::GzDecoder::new(rest);
        let mut buf = Vec::new();
        match (&mut dec)
            .take(left.saturating_add(1))
            .read_to_end(&mut buf)
        {
            Err(_) => break,
            Ok(n) if n as u64 > left => return Err(()),
            Ok(n) => left -= n as u64,
        }
        // The member was read to its end: what follows is the next one.
        let next = dec.into_inner();
        out.push(buf);
        if next.len() == rest.len() {
            break;
        }
        rest = next;
    }
    Ok(out)
}

/// A member of the gzip stream starts with a manifest. Reads the first 4 KiB
/// of each member; the rest of a member is decompressed into nothing to find
/// the next one.
fn gzip_holds_manifest(data: &[u8]) -> bool {
    let mut rest = data;
    while rest.starts_with(&[0x1f, 0x8b]) {
        let mut dec = flate2::bufread::GzDecoder::new(rest);
        let mut head = Vec::new();
        if (&mut dec).take(4096).read_to_end(&mut head).is_err() {
            return false;
        }
        if is_manifest(&head) {
            return true;
        }
        if std::io::copy(&mut dec, &mut std::io::sink()).is_err() {
            return false;
        }
        let next = dec.into_inner();
        if next.len() == rest.len() {
            return false;
        }
        rest = next;
    }
    false
}

/// Walks a Perfetto trace's packets (see the module docs).
pub fn scan_proto(data: &[u8]) -> ProtoInfo {
    let mut info = ProtoInfo::default();
    let mut budget = super::DEFAULT_UNPACK_LIMIT;
    walk_trace(data, &mut info, 0, &mut budget);
    info
}

fn walk_trace(mut data: &[u8], info: &mut ProtoInfo, depth: u32, budget: &mut u64) {
    while !data.is_empty() {
        let Some((key, rest)) = varint::read(data) else {
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
            walk_packet(value, info, depth, budget);
        }
    }
}

fn walk_packet(mut data: &[u8], info: &mut ProtoInfo, depth: u32, budget: &mut u64) {
    info.packets += 1;
    let mut machine = 0u32;
    let mut snapshot = None;
    while !data.is_empty() {
        let Some((key, rest)) = varint::read(data) else {
            return;
        };
        let (field, wire) = (key >> 3, (key & 7) as u8);
        let Some((value, rest)) = field_value(wire, rest) else {
            return;
        };
        data = rest;
        match (field, wire) {
            (6, 2) => snapshot = Some(value),
            (98, 0) => machine = varint::read(value).map_or(0, |(v, _)| v as u32),
            (50, 2) if depth < 4 => {
                // Inflated at most `budget` bytes in all, nested ones included.
                let mut inflated = Vec::new();
                let read = flate2::read::ZlibDecoder::new(value)
                    .take(budget.saturating_add(1))
                    .read_to_end(&mut inflated);
                match read {
                    Ok(n) if n as u64 > *budget => {
                        *budget = 0;
                        info.compressed_over_limit = true;
                    }
                    Ok(n) => {
                        *budget -= n as u64;
                        walk_trace(&inflated, info, depth + 1, budget);
                    }
                    Err(_) => {}
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
            let (len, rest) = varint::read(data)?;
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
        assert_eq!(sniff(b"hello world"), MemberKind::Unrecognized);
        assert_eq!(sniff(b"\x00\x01\x02"), MemberKind::Unrecognized);
        // trace_processor looks for JSON before protobuf: a leading newline
        // (0x0A) does not make a JSON file a Perfetto trace.
        assert_eq!(sniff(b"\n[{\"ph\":\"i\"}]"), MemberKind::Json);
        for other in [
            &b"PERFILE2\0\0"[..],
            b"\x10\x00\x04\x46\x78\x54\x16\x00rest",
            b"SLOW\x03",
            b"JAVA PROFILE 1.0.3\0",
            b"*version\n3\n",
            b"<!DOCTYPE html>\n<html>",
            b"TRACE:\n# tracer: nop\n",
            b"# ninja log v5\n",
            b"  <idle>-0     [000] d..1  1.0: cpu_idle: state=1\n",
            b"--------- beginning of main\n11-23 10:00:00.123  1234  1235 I tag: hello\n",
            b"app 1234/1235 [001] 303057.417513: 1 cycles:\n",
            b"app\t1235 303057.417513: 1 cycles:\n",
            b"9,0,i,vers,1\n",
        ] {
            assert_eq!(
                sniff(other),
                MemberKind::Other,
                "{:?}",
                String::from_utf8_lossy(other)
            );
        }
        // Near misses stay unrecognized.
        for junk in [
            &b"11-23 10:00:00.123 no priority here\n"[..],
            b"app 1234 303057.41751: cycles:\n",
            b"app x/1235 303057.417513: cycles:\n",
            b"perf without newline 303057.417513:",
        ] {
            assert_eq!(
                sniff(junk),
                MemberKind::Unrecognized,
                "{:?}",
                String::from_utf8_lossy(junk)
            );
        }
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
