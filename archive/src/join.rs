//! Several Perfetto traces of one machine as one trace, so that what links
//! their events across processes is linked.
//!
//! Perfetto's trace processor keeps the state that matches flows (a flow
//! id to the slice it last met) per file of an archive (and per machine):
//! a flow id written by a client in one file and by a server in another is
//! never joined, whatever the manifest says. In one file it is: flow ids
//! are global within a trace. A Perfetto trace is a sequence of packets
//! (`repeated TracePacket packet = 1`), so traces are joined by putting
//! their packets one after another; what each writer numbered on its own
//! must not meet, and that is its packet sequences
//! (`trusted_packet_sequence_id`, field 10 of a packet): interned names,
//! incremental state, default tracks and sequence-scoped clocks (ids 64 to
//! 127) are all per sequence. Each trace after the first has its sequences
//! renumbered to ids no trace uses; every other byte is kept. Track uuids
//! are not renumbered: ringtrace draws a process's at random (63 bits) per
//! session, so two processes' do not meet. The traces' packets are
//! interleaved at their clock snapshots, in the order of their BOOTTIME
//! (each trace's own order kept): trace processor rejects a snapshot whose
//! BOOTTIME is below the one before it, which one trace after another would
//! make of two traces recorded at once.
//!
//! Only traces of one machine may be joined: they must share BOOTTIME (or
//! relate their clocks by their clock snapshots) for one timeline, and flows
//! do not cross machines anyway. A trace with packets of another machine
//! (`machine_id`, field 98) or compressed packets (field 50, whose inner
//! packets would need renumbering too) is refused. A last packet cut short
//! (a trace cut by a crash) is left out, as readers leave it.

use super::error::ArchiveError;
use super::varint;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// `Trace.packet`.
const TRACE_PACKET: u64 = 1;
/// `TracePacket.trusted_packet_sequence_id` (uint32).
const SEQUENCE_ID: u64 = 10;
/// `TracePacket.compressed_packets`.
const COMPRESSED_PACKETS: u64 = 50;
/// `TracePacket.machine_id`.
const MACHINE_ID: u64 = 98;
/// `TracePacket.clock_snapshot`; in it `clocks` (1), in which `clock_id`
/// (1) and `timestamp` (2).
const CLOCK_SNAPSHOT: u64 = 6;
/// The builtin BOOTTIME clock's id.
const BOOTTIME: u64 = 6;

const WIRE_VARINT: u64 = 0;
const WIRE_I64: u64 = 1;
const WIRE_LEN: u64 = 2;
const WIRE_I32: u64 = 5;

/// One top-level field of a packet: its number, wire type, the varint
/// value (for varints), and its bytes (tag included).
struct Field<'a> {
    number: u64,
    wire: u64,
    value: u64,
    bytes: &'a [u8],
}

/// The fields of a packet; `None` if it does not parse.
fn fields(mut data: &[u8]) -> Option<Vec<Field<'_>>> {
    let mut out = Vec::new();
    while !data.is_empty() {
        let start = data;
        let (tag, rest) = varint::read(data)?;
        let (number, wire) = (tag >> 3, tag & 7);
        let (value, rest) = match wire {
            WIRE_VARINT => varint::read(rest)?,
            WIRE_I64 => (0, rest.get(8..)?),
            WIRE_LEN => {
                let (len, rest) = varint::read(rest)?;
                (0, rest.get(usize::try_from(len).ok()?..)?)
            }
            WIRE_I32 => (0, rest.get(4..)?),
            _ => return None,
        };
        let used = start.len() - rest.len();
        out.push(Field {
            number,
            wire,
            value,
            bytes: &start[..used],
        });
        data = rest;
    }
    Some(out)
}

/// The packets of a trace (each packet's bytes, without its tag and
/// length); a last packet cut short is left out.
fn packets<'a>(name: &str, mut data: &'a [u8]) -> Result<Vec<&'a [u8]>, ArchiveError> {
    let mut out = Vec::new();
    while !data.is_empty() {
        let Some((tag, rest)) = varint::read(data) else {
            break; // cut inside a tag: the end of a trace cut short
        };
        if tag != TRACE_PACKET << 3 | WIRE_LEN {
            return Err(ArchiveError::CannotJoin {
                name: name.to_owned(),
                reason: format!(
                    "field {} (wire type {}) at the top level: not a Perfetto trace",
                    tag >> 3,
                    tag & 7
                ),
            });
        }
        let Some((len, rest)) = varint::read(rest) else {
            break;
        };
        let Some(packet) = usize::try_from(len).ok().and_then(|l| rest.get(..l)) else {
            break; // the last packet, cut short
        };
        out.push(packet);
        data = &rest[packet.len()..];
    }
    Ok(out)
}

/// The BOOTTIME of a packet's clock snapshot, if it has one that reads it.
fn snapshot_boottime(f: &[Field<'_>]) -> Option<u64> {
    let snapshot = f
        .iter()
        .find(|x| x.number == CLOCK_SNAPSHOT && x.wire == WIRE_LEN)?;
    let body = len_body(snapshot.bytes)?;
    fields(body)?
        .iter()
        .filter(|c| c.number == 1 && c.wire == WIRE_LEN)
        .find_map(|c| {
            let clock = fields(len_body(c.bytes)?)?;
            let value = |n: u64| clock.iter().find(|x| x.number == n).map(|x| x.value);
            (value(1)? == BOOTTIME).then(|| value(2)).flatten()
        })
}

/// The payload of a length-delimited field's bytes (tag and length skipped).
fn len_body(bytes: &[u8]) -> Option<&[u8]> {
    let (_, rest) = varint::read(bytes)?;
    let (len, rest) = varint::read(rest)?;
    rest.get(..usize::try_from(len).ok()?)
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Joins Perfetto traces recorded on one machine (`(name, bytes)`, the name
/// for errors) into one: their packets interleaved at their clock
/// snapshots in BOOTTIME order (each trace's own order kept), each trace's
/// packet sequences after the first's renumbered to ids none of them uses.
/// Flows whose ends are in different traces are then one flow in Perfetto
/// (see the module docs).
///
/// # Errors
///
/// [`ArchiveError::CannotJoin`] naming the trace if one is not a Perfetto
/// protobuf trace (gzip included: join what it decompresses to), has a
/// packet that does not parse, packets of another machine or compressed
/// packets, or if the sequences of all of them do not fit the 32-bit ids.
pub fn join_perfetto(traces: &[(&str, &[u8])]) -> Result<Vec<u8>, ArchiveError> {
    let refuse = |name: &str, reason: &str| ArchiveError::CannotJoin {
        name: name.to_owned(),
        reason: reason.to_owned(),
    };
    // Every trace's packets, parsed, and every sequence id in use.
    let mut parsed = Vec::with_capacity(traces.len());
    let mut used = BTreeSet::new();
    for &(name, data) in traces {
        if data.first() != Some(&0x0a) {
            return Err(refuse(
                name,
                "not a Perfetto protobuf trace (its first byte is not 0x0A)",
            ));
        }
        let mut list = Vec::new();
        for packet in packets(name, data)? {
            let f = fields(packet).ok_or_else(|| refuse(name, "a packet does not parse"))?;
            for field in &f {
                match field.number {
                    MACHINE_ID => {
                        return Err(refuse(
                            name,
                            "it holds packets of another machine (machine_id)",
                        ))
                    }
                    COMPRESSED_PACKETS => return Err(refuse(name, "it holds compressed packets")),
                    SEQUENCE_ID if field.wire == WIRE_VARINT => {
                        used.insert(field.value);
                    }
                    _ => {}
                }
            }
            list.push((packet, f));
        }
        parsed.push((name, list));
    }
    let mut next = 1u64;
    let mut fresh = || -> Option<u64> {
        while used.contains(&next) {
            next += 1;
        }
        let id = next;
        next += 1;
        (id <= u32::MAX as u64).then_some(id)
    };
    // Each trace's packets, renumbered, in runs that each begin at a clock
    // snapshot reading BOOTTIME (the packets before a trace's first one go
    // with it), keyed by that BOOTTIME.
    let mut all_runs: Vec<VecDeque<(u64, Vec<u8>)>> = Vec::with_capacity(parsed.len());
    for (i, (name, list)) in parsed.into_iter().enumerate() {
        // The first trace keeps its ids; the others get fresh ones.
        let mut renumber: BTreeMap<u64, u64> = BTreeMap::new();
        let mut runs = VecDeque::new();
        let mut key = list
            .iter()
            .find_map(|(_, f)| snapshot_boottime(f))
            .unwrap_or(0);
        let mut bytes = Vec::new();
        for (packet, f) in list {
            if let Some(t) = snapshot_boottime(&f) {
                if !bytes.is_empty() {
                    runs.push_back((key, std::mem::take(&mut bytes)));
                }
                key = key.max(t); // a trace's keys never go down: its order is kept
            }
            // The packet's sequence: its last such field, as protobuf
            // reads a repeated scalar field; every one is rewritten.
            let is_seq = |x: &Field<'_>| x.number == SEQUENCE_ID && x.wire == WIRE_VARINT;
            let seq = f.iter().rev().find(|x| is_seq(x));
            let Some(seq) = seq.filter(|_| i > 0) else {
                bytes.push((TRACE_PACKET << 3 | WIRE_LEN) as u8);
                put_varint(&mut bytes, packet.len() as u64);
                bytes.extend_from_slice(packet);
                continue;
            };
            let id = match renumber.get(&seq.value) {
                Some(&id) => id,
                None => {
                    let id = fresh().ok_or_else(|| {
                        refuse(
                            name,
                            "the traces use more packet sequences than 32-bit ids hold",
                        )
                    })?;
                    renumber.insert(seq.value, id);
                    id
                }
            };
            let mut body = Vec::with_capacity(packet.len() + 5);
            for field in &f {
                if is_seq(field) {
                    put_varint(&mut body, SEQUENCE_ID << 3 | WIRE_VARINT);
                    put_varint(&mut body, id);
                } else {
                    body.extend_from_slice(field.bytes);
                }
            }
            bytes.push((TRACE_PACKET << 3 | WIRE_LEN) as u8);
            put_varint(&mut bytes, body.len() as u64);
            bytes.extend_from_slice(&body);
        }
        if !bytes.is_empty() {
            runs.push_back((key, bytes));
        }
        all_runs.push(runs);
    }
    // Always the run of lowest BOOTTIME at the front of a trace (the
    // earlier trace on a tie).
    let total: usize = traces.iter().map(|(_, d)| d.len()).sum();
    let mut out = Vec::with_capacity(total + total / 64);
    while let Some((_, i)) = all_runs
        .iter()
        .enumerate()
        .filter_map(|(i, r)| r.front().map(|&(k, _)| (k, i)))
        .min()
    {
        if let Some((_, bytes)) = all_runs[i].pop_front() {
            out.extend_from_slice(&bytes);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A packet: sequence `seq` (if any) and a payload field 99 `tag`.
    fn packet(seq: Option<u64>, tag: &[u8]) -> Vec<u8> {
        let mut p = Vec::new();
        if let Some(s) = seq {
            put_varint(&mut p, SEQUENCE_ID << 3);
            put_varint(&mut p, s);
        }
        put_varint(&mut p, 99 << 3 | WIRE_LEN);
        put_varint(&mut p, tag.len() as u64);
        p.extend_from_slice(tag);
        let mut t = vec![0x0a];
        put_varint(&mut t, p.len() as u64);
        t.extend(p);
        t
    }

    /// (sequence, payload) of every packet of a trace.
    fn read(trace: &[u8]) -> Vec<(Option<u64>, Vec<u8>)> {
        packets("t", trace)
            .unwrap()
            .into_iter()
            .map(|p| {
                let f = fields(p).unwrap();
                let seq = f.iter().find(|x| x.number == SEQUENCE_ID).map(|x| x.value);
                let body = f.iter().find(|x| x.number == 99).unwrap().bytes[3..].to_vec(); // tag (2 bytes), length
                (seq, body)
            })
            .collect()
    }

    #[test]
    fn later_traces_get_sequences_no_trace_uses() {
        let a = [
            packet(Some(1), b"a1"),
            packet(Some(2), b"a2"),
            packet(None, b"a-"),
        ]
        .concat();
        let b = [
            packet(Some(1), b"b1"),
            packet(Some(3), b"b3"),
            packet(Some(1), b"b1'"),
        ]
        .concat();
        let joined = join_perfetto(&[("a", &a), ("b", &b)]).unwrap();
        assert_eq!(
            read(&joined),
            [
                (Some(1), b"a1".to_vec()),
                (Some(2), b"a2".to_vec()),
                (None, b"a-".to_vec()),
                // b's 1 and 3 are taken (a's 1 and 2 and b's own 3 too).
                (Some(4), b"b1".to_vec()),
                (Some(5), b"b3".to_vec()),
                (Some(4), b"b1'".to_vec()),
            ]
        );
        // The first trace's bytes are kept as they were.
        assert_eq!(&joined[..a.len()], &a[..]);
    }

    /// A packet of sequence `seq` with a clock snapshot reading BOOTTIME
    /// `boot` (and clock 64 at 0).
    fn snapshot(seq: u64, boot: u64) -> Vec<u8> {
        let clock = |id: u64, ts: u64| {
            let mut c = Vec::new();
            put_varint(&mut c, 1 << 3);
            put_varint(&mut c, id);
            put_varint(&mut c, 2 << 3);
            put_varint(&mut c, ts);
            let mut f = vec![(1 << 3 | WIRE_LEN) as u8];
            put_varint(&mut f, c.len() as u64);
            f.extend(c);
            f
        };
        let body = [clock(64, 0), clock(BOOTTIME, boot)].concat();
        let mut p = Vec::new();
        put_varint(&mut p, SEQUENCE_ID << 3);
        put_varint(&mut p, seq);
        put_varint(&mut p, CLOCK_SNAPSHOT << 3 | WIRE_LEN);
        put_varint(&mut p, body.len() as u64);
        p.extend(body);
        let mut t = vec![0x0a];
        put_varint(&mut t, p.len() as u64);
        t.extend(p);
        t
    }

    /// Two traces recorded at once: their runs between snapshots go in
    /// BOOTTIME order, so no snapshot reads BOOTTIME below the one before.
    #[test]
    fn traces_interleave_at_their_snapshots_in_boottime_order() {
        let a = [
            packet(Some(1), b"a0"),
            snapshot(1, 10),
            packet(Some(1), b"a10"),
            snapshot(1, 30),
            packet(Some(1), b"a30"),
        ]
        .concat();
        let b = [snapshot(1, 20), packet(Some(1), b"b20"), snapshot(1, 40)].concat();
        let joined = join_perfetto(&[("a", &a), ("b", &b)]).unwrap();
        let order: Vec<(Option<u64>, Option<u64>, Vec<u8>)> = packets("j", &joined)
            .unwrap()
            .into_iter()
            .map(|p| {
                let f = fields(p).unwrap();
                let seq = f.iter().find(|x| x.number == SEQUENCE_ID).map(|x| x.value);
                let body = f
                    .iter()
                    .find(|x| x.number == 99)
                    .map(|x| x.bytes[3..].to_vec());
                (seq, snapshot_boottime(&f), body.unwrap_or_default())
            })
            .collect();
        assert_eq!(
            order,
            [
                (Some(1), None, b"a0".to_vec()),
                (Some(1), Some(10), vec![]),
                (Some(1), None, b"a10".to_vec()),
                (Some(2), Some(20), vec![]),
                (Some(2), None, b"b20".to_vec()),
                (Some(1), Some(30), vec![]),
                (Some(1), None, b"a30".to_vec()),
                (Some(2), Some(40), vec![]),
            ]
        );
    }

    #[test]
    fn a_long_id_is_rewritten_and_the_length_follows() {
        let a = packet(Some(200), b"x"); // two-byte varint
        let b = packet(Some(200), b"y");
        let joined = join_perfetto(&[("a", &a), ("b", &b)]).unwrap();
        assert_eq!(
            read(&joined),
            [(Some(200), b"x".to_vec()), (Some(1), b"y".to_vec())]
        );
        assert_eq!(joined.len(), a.len() + b.len() - 1);
    }

    /// A packet naming its sequence twice belongs to the last (as protobuf
    /// reads it), and both are rewritten: none keeps a taken id.
    #[test]
    fn a_sequence_named_twice_is_the_last_and_both_are_rewritten() {
        let a = packet(Some(1), b"a");
        let mut b = packet(Some(1), b"b");
        // Append a second field 10 (= 3) to b's one packet.
        b.extend_from_slice(&[(SEQUENCE_ID << 3) as u8, 3]);
        b[1] += 2;
        let joined = join_perfetto(&[("a", &a), ("b", &b)]).unwrap();
        let last = packets("j", &joined).unwrap()[1];
        let seqs: Vec<u64> = fields(last)
            .unwrap()
            .iter()
            .filter(|x| x.number == SEQUENCE_ID)
            .map(|x| x.value)
            .collect();
        assert_eq!(seqs, [2, 2]);
    }

    #[test]
    fn a_last_packet_cut_short_is_left_out() {
        let a = packet(Some(1), b"whole");
        let b = [packet(Some(1), b"kept"), packet(Some(1), b"cut")].concat();
        let joined = join_perfetto(&[("a", &a), ("b", &b[..b.len() - 2])]).unwrap();
        assert_eq!(read(&joined).len(), 2);
    }

    #[test]
    fn what_cannot_be_joined_is_refused_by_name() {
        let a = packet(Some(1), b"a");
        let err = |r: Result<Vec<u8>, ArchiveError>| r.unwrap_err().to_string();
        assert!(err(join_perfetto(&[("a", &a), ("j", b"[{}]")])).contains("j"));
        assert!(
            err(join_perfetto(&[("a", &a), ("z", &[0x1f, 0x8b, 8])])).contains("not a Perfetto")
        );
        let mut m = Vec::new();
        put_varint(&mut m, MACHINE_ID << 3);
        put_varint(&mut m, 2);
        let mut machine = vec![0x0a, m.len() as u8];
        machine.extend(m);
        assert!(err(join_perfetto(&[("a", &a), ("m", &machine)])).contains("another machine"));
        let mut junk = vec![0x0a, 3, 0xff, 0xff, 0xff];
        junk.extend(packet(Some(1), b"x"));
        assert!(err(join_perfetto(&[("bad", &junk)])).contains("does not parse"));
    }
}
