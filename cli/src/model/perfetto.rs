//! Perfetto protobuf to [`TraceModel`]: packet framing, per-sequence
//! interning and clocks, track descriptors, debug annotations.

use super::pairing::pair_slices;
use super::{clamp_ts, Event, Format, Kind, TraceModel, Track};
use prost::Message;
use ringtrace_archive::varint;
use ringtrace_protos::track_descriptor::StaticOrDynamicName;
use ringtrace_protos::{debug_annotation, track_event, DebugAnnotation, TracePacket};
use serde_json::{Map, Number, Value};
use std::collections::HashMap;

/// A clock reading `t` in units of `mult` ns, in ns within ±[`TS_LIMIT`].
fn clock_ns(t: u64, mult: i64) -> i64 {
    clamp_ts(i64::try_from(t).unwrap_or(i64::MAX).saturating_mul(mult))
}

#[derive(Default)]
struct SeqClock {
    incremental: bool,
    mult: i64,
    last: i64,
    /// (clock value, BOOTTIME) at the snapshot.
    anchor: Option<(i64, i64)>,
}

#[derive(Default)]
struct SeqState {
    names: HashMap<u64, String>,
    cats: HashMap<u64, String>,
    ann: HashMap<u64, String>,
    /// Interned debug-annotation string values.
    strings: HashMap<u64, String>,
    default_clock: Option<u32>,
    default_track: Option<u64>,
    clocks: HashMap<u32, SeqClock>,
}

#[derive(Default, Clone)]
struct TrackDesc {
    parent: Option<u64>,
    name: Option<String>,
    process: Option<i64>,
    thread: Option<(i64, i64)>,
    counter: bool,
}

struct RawEvent {
    ts: i64,
    ty: i32,
    name: Option<String>,
    category: Option<String>,
    track: Option<u64>,
    seq_track: Option<u64>,
    args: Map<String, Value>,
    counter: Option<Number>,
}

/// The packets of a `Trace` (field 1, length-delimited); `true` if the file
/// ends inside one.
fn frames(mut data: &[u8]) -> (Vec<&[u8]>, bool) {
    let mut out = Vec::new();
    while !data.is_empty() {
        let Some((key, rest)) = varint::read(data) else {
            return (out, true);
        };
        let wire = key & 7;
        let (len, rest) = match wire {
            2 => match varint::read(rest) {
                Some((l, r)) => (l as usize, r),
                None => return (out, true),
            },
            0 => match varint::read(rest) {
                Some((_, r)) => (0, r),
                None => return (out, true),
            },
            1 => (8, rest),
            5 => (4, rest),
            _ => return (out, true),
        };
        if rest.len() < len {
            return (out, true);
        }
        if key >> 3 == 1 && wire == 2 {
            out.push(&rest[..len]);
        }
        data = &rest[len..];
    }
    (out, false)
}

pub fn decode_perfetto(bytes: &[u8]) -> Result<TraceModel, String> {
    let mut m = TraceModel::new(Format::Perfetto, bytes.len());
    let (packets, truncated) = frames(bytes);
    m.truncated = truncated;
    let mut seqs: HashMap<u32, SeqState> = HashMap::new();
    let mut tracks: HashMap<u64, TrackDesc> = HashMap::new();
    // Global snapshots: clock id -> BOOTTIME per snapshot.
    let mut globals: Vec<HashMap<u32, i64>> = Vec::new();
    let mut raw: Vec<RawEvent> = Vec::new();
    let mut last_boot = 0i64;
    for (index, bytes) in packets.iter().enumerate() {
        let p = TracePacket::decode(*bytes).map_err(|e| format!("packet {index}: {e}"))?;
        if p == TracePacket::default() {
            // Carries nothing known: padding (ringtrace keeps packets off
            // page boundaries with packets holding only a retired field).
            continue;
        }
        m.packets += 1;
        let seq_id = p.trusted_packet_sequence_id.unwrap_or(0);
        let summary = m.sequences.entry(seq_id).or_default();
        summary.packets += 1;
        if p.first_packet_on_sequence == Some(true) {
            summary.first_packet_flag = true;
        }
        if p.previous_packet_dropped.unwrap_or(0) != 0 {
            summary.loss_marks += 1;
            m.loss_packets += 1;
        }
        let seq = seqs.entry(seq_id).or_default();
        if p.sequence_flags.unwrap_or(0) & 1 != 0 || p.incremental_state_cleared == Some(true) {
            summary.resets += 1;
            seq.names.clear();
            seq.cats.clear();
            seq.ann.clear();
            seq.strings.clear();
            seq.default_clock = None;
            seq.default_track = None;
        }
        if let Some(d) = &p.trace_packet_defaults {
            seq.default_clock = d.timestamp_clock_id;
            seq.default_track = d.track_event_defaults.as_ref().and_then(|t| t.track_uuid);
            summary.default_track = seq.default_track;
        }
        if let Some(cs) = &p.clock_snapshot {
            m.clocks.snapshots += 1;
            if let Some(pc) = cs.primary_trace_clock {
                m.clocks.primary = Some(pc as u32);
            }
            let boot = cs
                .clocks
                .iter()
                .find(|c| c.clock_id == Some(6))
                .and_then(|c| c.timestamp)
                .map(|t| clock_ns(t, 1));
            let mut global = HashMap::new();
            for c in &cs.clocks {
                let (Some(id), Some(ts)) = (c.clock_id, c.timestamp) else {
                    continue;
                };
                if !m.clocks.ids.contains(&id) {
                    m.clocks.ids.push(id);
                }
                let mult =
                    i64::try_from(c.unit_multiplier_ns.unwrap_or(1).max(1)).unwrap_or(i64::MAX);
                let v = clock_ns(ts, mult);
                if (64..128).contains(&id) {
                    let sc = seq.clocks.entry(id).or_default();
                    sc.incremental = c.is_incremental.unwrap_or(false);
                    sc.mult = mult;
                    sc.last = v;
                    sc.anchor = boot.map(|b| (v, b));
                } else if let Some(b) = boot {
                    global.insert(id, v - b);
                }
            }
            if let Some(b) = boot {
                let real = cs
                    .clocks
                    .iter()
                    .find(|c| c.clock_id == Some(1))
                    .and_then(|c| c.timestamp);
                if let (Some(r), None) = (real, m.clocks.boot_realtime) {
                    m.clocks.boot_realtime = Some((b, r as i64));
                }
                if !global.is_empty() {
                    globals.push(global);
                }
            }
            continue; // a snapshot packet's own timestamp and payload are not read
        }
        // The packet's time.
        let ts = match p.timestamp {
            None => None,
            Some(t) => {
                let clock = p.timestamp_clock_id.or(seq.default_clock).unwrap_or(6);
                if (64..128).contains(&clock) {
                    match seq.clocks.get_mut(&clock) {
                        Some(sc) => {
                            let v = if sc.incremental {
                                sc.last = clamp_ts(sc.last.saturating_add(clock_ns(t, sc.mult)));
                                sc.last
                            } else {
                                clock_ns(t, sc.mult)
                            };
                            sc.anchor.map(|(cv, b)| clamp_ts(b + (v - cv)))
                        }
                        None => None,
                    }
                } else if clock == 6 {
                    Some(clock_ns(t, 1))
                } else {
                    // clock value - (clock - BOOTTIME) of the last snapshot holding it.
                    globals
                        .iter()
                        .rev()
                        .find_map(|g| g.get(&clock))
                        .map(|d| clamp_ts(clock_ns(t, 1) - d))
                }
            }
        };
        if p.timestamp.is_some() && ts.is_none() {
            let clock = p.timestamp_clock_id.or(seq.default_clock).unwrap_or(6);
            m.warn(format!(
                "packet {index}: timestamp on clock {clock}, which no snapshot relates to BOOTTIME"
            ));
        }
        if let Some(t) = ts {
            last_boot = t;
        }
        if let Some(i) = &p.interned_data {
            for e in &i.event_names {
                if let (Some(iid), Some(n)) = (e.iid, &e.name) {
                    seq.names.insert(iid, n.clone());
                }
            }
            for e in &i.event_categories {
                if let (Some(iid), Some(n)) = (e.iid, &e.name) {
                    seq.cats.insert(iid, n.clone());
                }
            }
            for e in &i.debug_annotation_names {
                if let (Some(iid), Some(n)) = (e.iid, &e.name) {
                    seq.ann.insert(iid, n.clone());
                }
            }
            for e in &i.debug_annotation_string_values {
                if let (Some(iid), Some(v)) = (e.iid, &e.str) {
                    seq.strings
                        .insert(iid, String::from_utf8_lossy(v).into_owned());
                }
            }
        }
        if let Some(td) = &p.track_descriptor {
            if let Some(uuid) = td.uuid {
                let d = TrackDesc {
                    parent: td.parent_uuid,
                    name: td.static_or_dynamic_name.as_ref().map(|n| match n {
                        StaticOrDynamicName::Name(n)
                        | StaticOrDynamicName::StaticName(n)
                        | StaticOrDynamicName::AtraceName(n) => n.clone(),
                    }),
                    process: td.process.as_ref().and_then(|p| p.pid).map(i64::from),
                    thread: td
                        .thread
                        .as_ref()
                        .map(|t| (t.pid.unwrap_or(0) as i64, t.tid.unwrap_or(0))),
                    counter: td.counter.is_some(),
                };
                if let Some(pr) = &td.process {
                    let pid = pr.pid.unwrap_or(0) as i64;
                    let slot = m.processes.entry(pid).or_default();
                    if pr.process_name.is_some() {
                        *slot = pr.process_name.clone();
                    }
                }
                if let Some(th) = &td.thread {
                    let key = (th.pid.unwrap_or(0) as i64, th.tid.unwrap_or(0));
                    m.processes.entry(key.0).or_default();
                    let slot = m.threads.entry(key).or_default();
                    if th.thread_name.is_some() {
                        *slot = th.thread_name.clone();
                    }
                }
                tracks.insert(uuid, d);
            }
        }
        if let Some(te) = &p.track_event {
            let Some(ts) = ts.or(if p.timestamp.is_none() {
                None
            } else {
                Some(last_boot)
            }) else {
                m.warn(format!(
                    "packet {index}: track event without a timestamp, dropped"
                ));
                continue;
            };
            let name = te
                .name
                .clone()
                .or_else(|| te.name_iid.and_then(|i| seq.names.get(&i).cloned()));
            let category = if !te.categories.is_empty() {
                Some(te.categories.join(","))
            } else {
                let c: Vec<String> = te
                    .category_iids
                    .iter()
                    .filter_map(|i| seq.cats.get(i).cloned())
                    .collect();
                (!c.is_empty()).then(|| c.join(","))
            };
            let mut args = Map::new();
            for a in &te.debug_annotations {
                let key = annotation_name(a, &seq.ann);
                if let Some(v) = annotation_value(a, &seq.ann, &seq.strings) {
                    args.insert(key, v);
                }
            }
            let counter = match te.counter_value_field {
                Some(track_event::CounterValueField::CounterValue(v)) => Some(Number::from(v)),
                Some(track_event::CounterValueField::DoubleCounterValue(v)) => Number::from_f64(v),
                None => None,
            };
            raw.push(RawEvent {
                ts,
                ty: te.r#type.unwrap_or(0),
                name,
                category,
                track: te.track_uuid.or(seq.default_track),
                seq_track: seq.default_track,
                args,
                counter,
            });
        }
    }
    // Threads of the sequences.
    for s in m.sequences.values_mut() {
        s.thread = s
            .default_track
            .and_then(|u| tracks.get(&u))
            .and_then(|t| t.thread);
    }
    // Resolve the events against the tracks.
    let pid_of = |mut uuid: Option<u64>| -> Option<i64> {
        for _ in 0..16 {
            let t = tracks.get(&uuid?)?;
            if let Some(p) = t.process.or(t.thread.map(|t| t.0)) {
                return Some(p);
            }
            uuid = t.parent;
        }
        None
    };
    for r in raw {
        let desc = r.track.and_then(|u| tracks.get(&u));
        let thread = r
            .seq_track
            .and_then(|u| tracks.get(&u))
            .and_then(|t| t.thread);
        let track = match desc {
            Some(TrackDesc {
                thread: Some((pid, tid)),
                ..
            }) => Track::Thread {
                pid: *pid,
                tid: *tid,
            },
            Some(TrackDesc {
                process: Some(pid), ..
            }) => Track::Process { pid: *pid },
            Some(d) if d.counter || r.ty == 4 => Track::Counter {
                pid: pid_of(d.parent).unwrap_or(0),
                name: d.name.clone().unwrap_or_default(),
            },
            Some(d) => Track::Async {
                pid: pid_of(d.parent).unwrap_or(0),
                id: format!("0x{:x}", r.track.unwrap_or(0)),
                name: d.name.clone().unwrap_or_default(),
            },
            None => Track::Global,
        };
        let kind = match r.ty {
            1 => Kind::Begin,
            2 => Kind::End,
            3 => Kind::Instant,
            4 => match r.counter {
                Some(v) => Kind::Counter(v),
                None => continue,
            },
            other => {
                m.warn(format!("track event of type {other} skipped"));
                continue;
            }
        };
        let name = match (&kind, &track, r.name) {
            (_, _, Some(n)) => n,
            (Kind::Counter(_), Track::Counter { name, .. }, None) => name.clone(),
            _ => String::new(),
        };
        m.events.push(Event {
            ts: r.ts,
            kind,
            name,
            category: r.category,
            track,
            thread,
            args: r.args,
        });
    }
    pair_slices(&mut m);
    Ok(m)
}

fn annotation_name(a: &DebugAnnotation, names: &HashMap<u64, String>) -> String {
    match &a.name_field {
        Some(debug_annotation::NameField::Name(n)) => n.clone(),
        Some(debug_annotation::NameField::NameIid(i)) => {
            names.get(i).cloned().unwrap_or_else(|| format!("iid{i}"))
        }
        None => String::new(),
    }
}

fn annotation_value(
    a: &DebugAnnotation,
    names: &HashMap<u64, String>,
    strings: &HashMap<u64, String>,
) -> Option<Value> {
    use debug_annotation::Value as V;
    if !a.dict_entries.is_empty() {
        let mut o = Map::new();
        for e in &a.dict_entries {
            if let Some(v) = annotation_value(e, names, strings) {
                o.insert(annotation_name(e, names), v);
            }
        }
        return Some(Value::Object(o));
    }
    if !a.array_values.is_empty() {
        return Some(Value::Array(
            a.array_values
                .iter()
                .map(|e| annotation_value(e, names, strings).unwrap_or(Value::Null))
                .collect(),
        ));
    }
    Some(match a.value.as_ref()? {
        V::BoolValue(b) => Value::Bool(*b),
        V::UintValue(u) => Value::from(*u),
        V::IntValue(i) => Value::from(*i),
        V::DoubleValue(d) => Number::from_f64(*d)
            .map(Value::Number)
            .unwrap_or_else(|| Value::String(d.to_string())),
        V::StringValue(s) => Value::String(s.clone()),
        V::PointerValue(p) => Value::String(format!("0x{p:x}")),
        V::LegacyJsonValue(s) => {
            serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.clone()))
        }
        V::StringValueIid(i) => Value::String(strings.get(i).cloned().unwrap_or_default()),
        _ => return None,
    })
}
