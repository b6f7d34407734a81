//! `ringtrace inspect`: what a trace or an archive holds, as text or JSON.

use crate::convert::{micros, trace_end};
use crate::model::{Format, Kind, TraceModel, Track, LOST_EVENT_NAME};
use ringtrace_archive::{self as archive, MemberKind};
use serde_json::{json, Value};

/// Builtin clock names by id.
fn clock_name(id: u32) -> String {
    match id {
        1 => "REALTIME".into(),
        2 => "REALTIME_COARSE".into(),
        3 => "MONOTONIC".into(),
        4 => "MONOTONIC_COARSE".into(),
        5 => "MONOTONIC_RAW".into(),
        6 => "BOOTTIME".into(),
        9 => "TSC".into(),
        64..=127 => format!("sequence clock {id}"),
        _ => format!("clock {id}"),
    }
}

/// `ns` since the epoch as an ISO-8601 UTC time.
fn utc(ns: i64) -> String {
    let secs = ns.div_euclid(1_000_000_000);
    let frac = ns.rem_euclid(1_000_000_000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{frac:09}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The summary of one trace, as JSON.
pub fn trace_summary(m: &TraceModel) -> Value {
    let mut slices = 0u64;
    let mut unfinished = 0u64;
    let mut instants = 0u64;
    let mut counters = 0u64;
    let mut async_slices = 0u64;
    let mut markers = 0u64;
    let mut lost = 0u64;
    for e in &m.events {
        match (&e.kind, &e.track) {
            (Kind::Complete { .. }, Track::Async { .. }) => async_slices += 1,
            (Kind::Begin, Track::Async { .. }) => {
                async_slices += 1;
                unfinished += 1;
            }
            (Kind::Complete { .. }, _) => slices += 1,
            (Kind::Begin, _) => {
                slices += 1;
                unfinished += 1;
            }
            (Kind::Instant, _) if e.name == LOST_EVENT_NAME => {
                markers += 1;
                lost += e
                    .args
                    .get("lost_events")
                    .and_then(Value::as_u64)
                    .unwrap_or(0);
            }
            (Kind::Instant, _) => instants += 1,
            (Kind::Counter(_), _) => counters += 1,
            (Kind::End, _) => {}
        }
    }
    let start = m.events.iter().map(|e| e.ts).min();
    let end = trace_end(m);
    let time_range = match (start, end) {
        (Some(s), Some(e)) => json!({"start_ns": s, "end_ns": e, "duration_ns": e - s}),
        _ => Value::Null,
    };
    let clocks = match m.format {
        Format::Perfetto => {
            let realtime_at_start = match (m.clocks.boot_realtime, start) {
                (Some((b, r)), Some(s)) => Value::String(utc(r + (s - b))),
                _ => Value::Null,
            };
            json!({
                "trace_clock": clock_name(m.clocks.primary.unwrap_or(6)),
                "snapshots": m.clocks.snapshots,
                "clocks": m.clocks.ids.iter().map(|&i| clock_name(i)).collect::<Vec<_>>(),
                "realtime_minus_boottime_ns": m.clocks.boot_realtime.map(|(b, r)| r - b),
                "realtime_at_start": realtime_at_start,
            })
        }
        Format::Json => json!({
            "trace_clock": Value::Null,
            "note": "Chrome JSON carries no clocks (ringtrace writes ts as BOOTTIME microseconds)",
        }),
    };
    let thread_name = |pid: i64, tid: i64| m.threads.get(&(pid, tid)).cloned().flatten();
    json!({
        "format": match m.format { Format::Perfetto => "perfetto", Format::Json => "json" },
        "size": m.size,
        "packets": (m.format == Format::Perfetto).then_some(m.packets),
        "truncated": m.truncated,
        "sequences": m.sequences.iter().map(|(id, s)| json!({
            "id": id,
            "packets": s.packets,
            "resets": s.resets,
            "loss_marks": s.loss_marks,
            "thread": s.thread.map(|(pid, tid)| json!({"pid": pid, "tid": tid, "name": thread_name(pid, tid)})),
        })).collect::<Vec<_>>(),
        "processes": m.processes.iter().map(|(pid, n)| json!({"pid": pid, "name": n})).collect::<Vec<_>>(),
        "threads": m.threads.iter().map(|((pid, tid), n)| json!({"pid": pid, "tid": tid, "name": n})).collect::<Vec<_>>(),
        "events": {
            "slices": slices,
            "unfinished_slices": unfinished,
            "instants": instants,
            "counters": counters,
            "async_slices": async_slices,
            "lost_markers": markers,
            // Slices, instants, counter values, async slices and markers
            // together: not the writer's trace events (see the text output).
            "total": slices + instants + counters + async_slices + markers,
        },
        "lost_events": {
            "count": lost,
            "markers": markers,
            "packets_with_previous_packet_dropped": m.loss_packets,
        },
        "time_range": time_range,
        "clocks": clocks,
        "warnings": m.warnings,
    })
}

/// Text rendering of [`trace_summary`].
pub fn print_trace(name: &str, s: &Value, indent: &str) {
    let fmt = s["format"].as_str().unwrap_or("?");
    outln!(
        "{indent}{name}: {} trace, {} bytes{}{}",
        if fmt == "perfetto" {
            "Perfetto protobuf"
        } else {
            "Chrome JSON"
        },
        s["size"],
        s["packets"]
            .as_u64()
            .map_or(String::new(), |p| format!(", {p} packets")),
        if s["truncated"] == true {
            " (cut short: read up to the last whole record)"
        } else {
            ""
        }
    );
    if let Some(seqs) = s["sequences"].as_array().filter(|a| !a.is_empty()) {
        outln!("{indent}  sequences: {}", seqs.len());
        for q in seqs {
            let who = match &q["thread"] {
                Value::Null => String::new(),
                t => format!(
                    " thread pid {} tid {}{}",
                    t["pid"],
                    t["tid"],
                    t["name"]
                        .as_str()
                        .map_or(String::new(), |n| format!(" {n:?}"))
                ),
            };
            outln!(
                "{indent}    seq {}:{who} {} packets, {} reset(s), {} loss mark(s)",
                q["id"],
                q["packets"],
                q["resets"],
                q["loss_marks"]
            );
        }
    }
    let procs = s["processes"].as_array().unwrap();
    outln!("{indent}  processes: {}", procs.len());
    for p in procs {
        outln!(
            "{indent}    pid {}{}",
            p["pid"],
            p["name"]
                .as_str()
                .map_or(String::new(), |n| format!(" {n:?}"))
        );
        for t in s["threads"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["pid"] == p["pid"])
        {
            outln!(
                "{indent}      tid {}{}",
                t["tid"],
                t["name"]
                    .as_str()
                    .map_or(String::new(), |n| format!(" {n:?}"))
            );
        }
    }
    // Not "events": a writer's trace events are the file's units (a scope is
    // two in Perfetto, one `X` in JSON); a slice here is a scope either way.
    let e = &s["events"];
    outln!(
        "{indent}  slices and marks: {} slices ({} unfinished), {} instants, {} counter values, {} async slices, {} loss markers",
        e["slices"], e["unfinished_slices"], e["instants"], e["counters"], e["async_slices"], e["lost_markers"]
    );
    let l = &s["lost_events"];
    outln!(
        "{indent}  lost events: {} (markers: {}, packets with previous_packet_dropped: {})",
        l["count"],
        l["markers"],
        l["packets_with_previous_packet_dropped"]
    );
    match &s["time_range"] {
        Value::Null => outln!("{indent}  time range: no events"),
        r => outln!(
            "{indent}  time range: {} .. {} us (BOOTTIME), {} us long",
            micros(r["start_ns"].as_i64().unwrap()),
            micros(r["end_ns"].as_i64().unwrap()),
            micros(r["duration_ns"].as_i64().unwrap())
        ),
    }
    let c = &s["clocks"];
    if fmt == "perfetto" {
        let list: Vec<&str> = c["clocks"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        outln!(
            "{indent}  clocks: trace clock {}; {} snapshot(s) of {}{}",
            c["trace_clock"].as_str().unwrap_or("?"),
            c["snapshots"],
            if list.is_empty() {
                "no clock".to_owned()
            } else {
                list.join(", ")
            },
            c["realtime_at_start"]
                .as_str()
                .map_or(String::new(), |t| format!("; starts at {t}"))
        );
    } else {
        outln!("{indent}  clocks: none in the file (ringtrace writes ts as BOOTTIME microseconds)");
    }
    crate::samples::print_summary(s, indent);
    for w in s["warnings"].as_array().unwrap() {
        outln!("{indent}  warning: {}", w.as_str().unwrap_or(""));
    }
}

fn kind_name(k: &MemberKind) -> &'static str {
    match k {
        MemberKind::Perfetto(_) => "perfetto",
        MemberKind::Json => "json",
        MemberKind::Manifest => "manifest",
        MemberKind::Gzip { .. } => "gzip",
        MemberKind::Zip => "zip",
        MemberKind::Tar => "tar",
        MemberKind::Empty => "empty",
        MemberKind::UndetectableJson => "undetectable-json",
        MemberKind::Unrecognized => "unrecognized",
        _ => "other",
    }
}

/// Inspects an archive: members, manifest (checked), each trace. Returns
/// the JSON summary and whether the archive passed every check.
pub fn archive_summary(name: &str, bytes: &[u8], limit: u64) -> Result<(Value, bool), String> {
    let members = archive::read_members_limited(bytes, limit).map_err(|e| e.to_string())?;
    let check = archive::check_archive_limited(bytes, limit);
    let container = match archive::sniff(bytes) {
        MemberKind::Zip => "zip",
        MemberKind::Gzip { .. } => "tar.gz",
        _ => "tar",
    };
    let mut list = Vec::new();
    let mut manifest = Value::Null;
    for (member, data) in &members {
        let kind = archive::sniff(data);
        let mut entry = json!({"name": member, "kind": kind_name(&kind), "size": data.len()});
        match kind {
            MemberKind::Manifest => {
                manifest = serde_json::from_slice(data)
                    .unwrap_or(Value::String(String::from_utf8_lossy(data).into_owned()));
            }
            MemberKind::Perfetto(_) | MemberKind::Json => match TraceModel::decode(data) {
                Ok(m) => entry["trace"] = trace_summary(&m),
                Err(e) => entry["error"] = Value::String(e),
            },
            _ => {}
        }
        list.push(entry);
    }
    let (valid, error) = match &check {
        Ok(_) => (true, Value::Null),
        Err(e) => (false, Value::String(e.to_string())),
    };
    Ok((
        json!({
            "archive": name,
            "container": container,
            "valid": valid,
            "error": error,
            "manifest": manifest,
            "members": list,
        }),
        valid,
    ))
}

pub fn print_archive(s: &Value) {
    outln!(
        "{}: {} archive, {} members",
        s["archive"].as_str().unwrap_or(""),
        s["container"].as_str().unwrap_or(""),
        s["members"].as_array().map_or(0, Vec::len)
    );
    match s["error"].as_str() {
        None => outln!("  manifest check: ok"),
        Some(e) => outln!("  manifest check: FAILED: {e}"),
    }
    if let Some(m) = s["manifest"].get("perfetto_manifest") {
        if let Some(tt) = m.get("trace_time") {
            outln!("  trace_time: {tt}");
        }
        for f in m["files"].as_array().into_iter().flatten() {
            let mut parts = Vec::new();
            if let Some(n) = f["machine"]["name"].as_str() {
                parts.push(format!("machine {n:?}"));
            }
            if let Some(ms) = f.get("machines") {
                parts.push(format!("machines {ms}"));
            }
            if let Some(c) = f.get("clocks") {
                let mode = if c.get("clock").is_some() {
                    "RELATE"
                } else {
                    "PIN"
                };
                parts.push(format!("{mode} {c}"));
            }
            outln!(
                "  file {}{}",
                f["path"],
                if parts.is_empty() {
                    String::new()
                } else {
                    format!(": {}", parts.join(", "))
                }
            );
        }
        if let Some(a) = m.get("attributes") {
            outln!("  attributes: {a}");
        }
    }
    for member in s["members"].as_array().unwrap() {
        let name = member["name"].as_str().unwrap_or("");
        match (&member["trace"], member["kind"].as_str()) {
            (Value::Null, Some(kind)) => {
                outln!("  {name}: {kind}, {} bytes", member["size"]);
                if let Some(e) = member["error"].as_str() {
                    outln!("    error: {e}");
                }
            }
            (t, _) => print_trace(name, t, "  "),
        }
    }
}
