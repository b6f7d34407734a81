//! `ringtrace convert`: a [`TraceModel`] written as ringtrace's Chrome JSON
//! or as a Perfetto protobuf trace.
//!
//! JSON output is ringtrace's own form: a bare array, `ts`/`dur` in BOOTTIME
//! microseconds with three decimals (so nanoseconds survive), thread slices as
//! `X`, instants as `i`, counters as `C` with `{"value": v}`, async slices as
//! `b`/`e` with `id2.local`, names as `M` events.
//!
//! Perfetto output is one packet sequence without incremental state: every
//! packet carries an absolute BOOTTIME timestamp and inline names; a track
//! descriptor per process, thread, counter and async track; each slice as a
//! SLICE_BEGIN / SLICE_END pair on its track, emitted in nesting order.

use crate::model::{Event, Kind, TraceModel, Track};
use prost::Message;
use ringtrace_protos::{
    debug_annotation, track_descriptor, track_event, CounterDescriptor, DebugAnnotation,
    ProcessDescriptor, ThreadDescriptor, Trace, TracePacket, TrackDescriptor, TrackEvent,
};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Nanoseconds as microseconds with three decimals.
pub fn micros(ns: i64) -> String {
    let sign = if ns < 0 { "-" } else { "" };
    let a = ns.unsigned_abs();
    format!("{sign}{}.{:03}", a / 1000, a % 1000)
}

fn q(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

/// The end of the trace: the latest timestamp or slice end.
pub fn trace_end(m: &TraceModel) -> Option<i64> {
    m.events
        .iter()
        .map(|e| match e.kind {
            Kind::Complete { dur } => e.ts + dur.max(0),
            _ => e.ts,
        })
        .max()
}

pub fn to_json(m: &TraceModel) -> String {
    let mut head = Vec::new();
    for (pid, name) in &m.processes {
        if let Some(n) = name {
            head.push(format!(
                "{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":{pid},\"tid\":0,\"args\":{{\"name\":{}}}}}",
                q(n)
            ));
        }
    }
    for ((pid, tid), name) in &m.threads {
        if let Some(n) = name {
            head.push(format!(
                "{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":{pid},\"tid\":{tid},\"args\":{{\"name\":{}}}}}",
                q(n)
            ));
        }
    }
    let end = trace_end(m).unwrap_or(0);
    let mut body: Vec<(i64, String)> = Vec::new();
    for e in &m.events {
        json_event(e, end, &mut body);
    }
    body.sort_by_key(|(ts, _)| *ts);
    let mut out = String::from("[\n");
    let lines: Vec<String> = head
        .into_iter()
        .chain(body.into_iter().map(|(_, l)| l))
        .collect();
    out.push_str(&lines.join(",\n"));
    out.push_str("\n]\n");
    out
}

/// `{"name":..,"cat":..,"ph":..,"ts":..,"pid":..,"tid":..` (unclosed).
fn head(e: &Event, ph: &str, ts: i64, pid: i64, tid: i64) -> String {
    let mut l = format!("{{\"name\":{}", q(&e.name));
    if let Some(c) = &e.category {
        let _ = write!(l, ",\"cat\":{}", q(c));
    }
    let _ = write!(
        l,
        ",\"ph\":\"{ph}\",\"ts\":{},\"pid\":{pid},\"tid\":{tid}",
        micros(ts)
    );
    l
}

fn args(l: &mut String, args: &Map<String, Value>) {
    if !args.is_empty() {
        let _ = write!(l, ",\"args\":{}", serde_json::to_string(args).unwrap());
    }
}

fn json_event(e: &Event, end: i64, out: &mut Vec<(i64, String)>) {
    let (tpid, ttid) = e.thread.unwrap_or((0, 0));
    match (&e.kind, &e.track) {
        (Kind::Complete { .. } | Kind::Begin, Track::Counter { .. }) => {}
        (Kind::Complete { dur }, Track::Async { pid, id, .. }) => {
            let atid = if e.thread.is_some() { ttid } else { *pid };
            let id2 = format!(",\"id2\":{{\"local\":{}}}", q(id));
            let mut b = head(e, "b", e.ts, *pid, atid);
            b.push_str(&id2);
            args(&mut b, &e.args);
            b.push('}');
            out.push((e.ts, b));
            let mut x = head(e, "e", e.ts + dur, *pid, atid);
            x.push_str(&id2);
            x.push('}');
            out.push((e.ts + dur, x));
        }
        (Kind::Begin, Track::Async { pid, id, .. }) => {
            let atid = if e.thread.is_some() { ttid } else { *pid };
            let mut b = head(e, "b", e.ts, *pid, atid);
            let _ = write!(b, ",\"id2\":{{\"local\":{}}}", q(id));
            args(&mut b, &e.args);
            b.push('}');
            out.push((e.ts, b));
        }
        (Kind::Complete { .. } | Kind::Begin, track) => {
            let (pid, tid) = match track {
                Track::Thread { pid, tid } => (*pid, *tid),
                Track::Process { pid } => (*pid, *pid),
                _ => (0, 0),
            };
            let (dur, unfinished) = match e.kind {
                Kind::Complete { dur } => (dur, false),
                _ => ((end - e.ts).max(0), true),
            };
            let mut l = head(e, "X", e.ts, pid, tid);
            let _ = write!(l, ",\"dur\":{}", micros(dur));
            let mut a = e.args.clone();
            if unfinished {
                a.insert("ringtrace.unfinished".into(), Value::Bool(true));
            }
            args(&mut l, &a);
            l.push('}');
            out.push((e.ts, l));
        }
        (Kind::Instant, track) => {
            let mut l = match track {
                Track::Thread { pid, tid } => head(e, "i", e.ts, *pid, *tid) + ",\"s\":\"t\"",
                Track::Process { pid } => head(e, "i", e.ts, *pid, *pid) + ",\"s\":\"p\"",
                Track::Async { pid, id, .. } => {
                    head(e, "n", e.ts, *pid, ttid) + &format!(",\"id2\":{{\"local\":{}}}", q(id))
                }
                _ => head(e, "i", e.ts, tpid, ttid) + ",\"s\":\"g\"",
            };
            args(&mut l, &e.args);
            l.push('}');
            out.push((e.ts, l));
        }
        (Kind::Counter(v), track) => {
            let pid = match track {
                Track::Counter { pid, .. } | Track::Thread { pid, .. } | Track::Process { pid } => {
                    *pid
                }
                _ => tpid,
            };
            let tid = if e.thread.is_some() { ttid } else { pid };
            let mut l = head(e, "C", e.ts, pid, tid);
            let _ = write!(l, ",\"args\":{{\"value\":{v}}}}}");
            out.push((e.ts, l));
        }
        (Kind::End, _) => {}
    }
}

// -------------------------------------------------------------- Perfetto

/// splitmix64's finaliser, for track uuids.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) & ((1 << 63) - 1)
}

fn hash_str(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

fn track_uuid(t: &Track) -> u64 {
    match t {
        Track::Process { pid } => mix(*pid as u64 ^ 0x1000),
        Track::Thread { pid, tid } => mix(mix(*pid as u64 ^ 0x2000) ^ *tid as u64),
        Track::Counter { pid, name } => mix(mix(*pid as u64 ^ 0x3000) ^ hash_str(name)),
        Track::Async { pid, id, name } => {
            mix(mix(*pid as u64 ^ 0x4000) ^ hash_str(id) ^ hash_str(name).rotate_left(7))
        }
        Track::Global => mix(0x5000),
    }
    .max(1)
}

fn annotation(name: &str, v: &Value) -> Option<DebugAnnotation> {
    use debug_annotation::Value as V;
    let mut a = DebugAnnotation {
        name_field: Some(debug_annotation::NameField::Name(name.to_owned())),
        ..Default::default()
    };
    match v {
        Value::Null => return None,
        Value::Bool(b) => a.value = Some(V::BoolValue(*b)),
        Value::Number(n) => {
            a.value = Some(if let Some(i) = n.as_i64() {
                V::IntValue(i)
            } else if let Some(u) = n.as_u64() {
                V::UintValue(u)
            } else {
                V::DoubleValue(n.as_f64().unwrap_or(0.0))
            })
        }
        Value::String(s) => a.value = Some(V::StringValue(s.clone())),
        Value::Array(items) => {
            a.array_values = items
                .iter()
                .map(|i| {
                    let mut e = annotation("", i).unwrap_or_default();
                    e.name_field = None;
                    e
                })
                .collect()
        }
        Value::Object(o) => {
            a.dict_entries = o.iter().filter_map(|(k, v)| annotation(k, v)).collect()
        }
    }
    Some(a)
}

fn track_event(e: &Event, ty: track_event::Type, with_name: bool) -> TrackEvent {
    let mut te = TrackEvent {
        track_uuid: Some(track_uuid(&e.track)),
        ..Default::default()
    };
    te.set_type(ty);
    if with_name {
        te.name = Some(e.name.clone());
        if let Some(c) = &e.category {
            te.categories = vec![c.clone()];
        }
        te.debug_annotations = e
            .args
            .iter()
            .filter_map(|(k, v)| annotation(k, v))
            .collect();
    }
    te
}

/// One track's events in nesting order: slices sorted by start then by
/// length (outer first); each slice ends before anything that starts at or
/// after its end.
fn track_stream(events: &[&Event]) -> Vec<(i64, TrackEvent)> {
    let mut items: Vec<&Event> = events.to_vec();
    let rank = |e: &Event| match e.kind {
        Kind::Complete { dur } => (0, -dur),
        Kind::Begin => (0, i64::MIN),
        _ => (1, 0),
    };
    items.sort_by_key(|e| (e.ts, rank(e)));
    let mut out = Vec::new();
    let mut open: Vec<i64> = Vec::new(); // end times, innermost last
    let close_until =
        |t: i64, open: &mut Vec<i64>, out: &mut Vec<(i64, TrackEvent)>, track: &Event| {
            while let Some(&end) = open.last() {
                if end > t {
                    break;
                }
                open.pop();
                out.push((end, track_event(track, track_event::Type::SliceEnd, false)));
            }
        };
    for e in items {
        close_until(e.ts, &mut open, &mut out, e);
        match e.kind {
            Kind::Complete { dur } => {
                out.push((e.ts, track_event(e, track_event::Type::SliceBegin, true)));
                // An end inside the enclosing slice; never after it.
                let end = e.ts + dur.max(0);
                let end = open.last().map_or(end, |&outer| end.min(outer));
                open.push(end);
            }
            Kind::Begin => {
                out.push((e.ts, track_event(e, track_event::Type::SliceBegin, true)));
                open.push(i64::MAX);
            }
            Kind::Instant => out.push((e.ts, track_event(e, track_event::Type::Instant, true))),
            Kind::Counter(ref v) => {
                let mut te = track_event(e, track_event::Type::Counter, false);
                te.counter_value_field = Some(match v.as_i64() {
                    Some(i) => track_event::CounterValueField::CounterValue(i),
                    None => track_event::CounterValueField::DoubleCounterValue(
                        v.as_f64().unwrap_or(0.0),
                    ),
                });
                out.push((e.ts, te));
            }
            Kind::End => {}
        }
    }
    if let Some(last) = events.first() {
        while let Some(end) = open.pop() {
            if end != i64::MAX {
                out.push((end, track_event(last, track_event::Type::SliceEnd, false)));
            }
        }
    }
    out
}

pub fn to_perfetto(m: &TraceModel) -> Vec<u8> {
    let mut packets = Vec::new();
    let seq = Some(1u32);
    let descriptor = |td: TrackDescriptor| TracePacket {
        trusted_packet_sequence_id: seq,
        track_descriptor: Some(td),
        ..Default::default()
    };
    // Tracks used, with what describes them.
    let mut by_track: BTreeMap<Track, Vec<&Event>> = BTreeMap::new();
    for e in &m.events {
        by_track.entry(e.track.clone()).or_default().push(e);
    }
    let mut pids: BTreeMap<i64, Option<String>> = m.processes.clone();
    let mut threads = m.threads.clone();
    for t in by_track.keys() {
        match t {
            Track::Thread { pid, tid } => {
                pids.entry(*pid).or_default();
                threads.entry((*pid, *tid)).or_default();
            }
            Track::Process { pid } | Track::Async { pid, .. } | Track::Counter { pid, .. } => {
                pids.entry(*pid).or_default();
            }
            Track::Global => {}
        }
    }
    for (pid, name) in &pids {
        packets.push(descriptor(TrackDescriptor {
            uuid: Some(track_uuid(&Track::Process { pid: *pid })),
            process: Some(ProcessDescriptor {
                pid: Some(*pid as i32),
                process_name: name.clone(),
                ..Default::default()
            }),
            ..Default::default()
        }));
    }
    for ((pid, tid), name) in &threads {
        packets.push(descriptor(TrackDescriptor {
            uuid: Some(track_uuid(&Track::Thread {
                pid: *pid,
                tid: *tid,
            })),
            parent_uuid: Some(track_uuid(&Track::Process { pid: *pid })),
            thread: Some(ThreadDescriptor {
                pid: Some(*pid as i32),
                tid: Some(*tid),
                thread_name: name.clone(),
                ..Default::default()
            }),
            ..Default::default()
        }));
    }
    for t in by_track.keys() {
        let named = |name: &str, pid: i64| TrackDescriptor {
            uuid: Some(track_uuid(t)),
            parent_uuid: Some(track_uuid(&Track::Process { pid })),
            static_or_dynamic_name: Some(track_descriptor::StaticOrDynamicName::Name(
                name.to_owned(),
            )),
            ..Default::default()
        };
        match t {
            Track::Counter { pid, name } => {
                let mut td = named(name, *pid);
                td.counter = Some(CounterDescriptor::default());
                packets.push(descriptor(td));
            }
            Track::Async { pid, name, .. } => packets.push(descriptor(named(name, *pid))),
            Track::Global => packets.push(descriptor(TrackDescriptor {
                uuid: Some(track_uuid(t)),
                static_or_dynamic_name: Some(track_descriptor::StaticOrDynamicName::Name(
                    "Global".into(),
                )),
                ..Default::default()
            })),
            _ => {}
        }
    }
    if let Some(first) = packets.first_mut() {
        first.sequence_flags = Some(1); // SEQ_INCREMENTAL_STATE_CLEARED
        first.first_packet_on_sequence = Some(true);
    } else {
        packets.push(TracePacket {
            trusted_packet_sequence_id: seq,
            sequence_flags: Some(1),
            first_packet_on_sequence: Some(true),
            ..Default::default()
        });
    }
    let mut timed: Vec<(i64, TrackEvent)> = Vec::new();
    for events in by_track.values() {
        timed.extend(track_stream(events));
    }
    timed.sort_by_key(|(ts, _)| *ts); // stable: each track keeps its order
    for (ts, te) in timed {
        packets.push(TracePacket {
            timestamp: Some(ts.max(0) as u64),
            trusted_packet_sequence_id: seq,
            track_event: Some(te),
            ..Default::default()
        });
    }
    Trace { packet: packets }.encode_to_vec()
}
