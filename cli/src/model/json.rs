//! Chrome JSON (a bare array, possibly cut short, or `traceEvents`) to
//! [`TraceModel`].

use super::{clamp_ts, Event, Format, Kind, TraceModel, Track};
use serde_json::{Map, Number, Value};
use std::collections::HashMap;

/// Parses a JSON trace; a bare array cut short by a crash (no closing `]`, a
/// partial last event) is read up to its last whole event.
fn parse_json_events(bytes: &[u8]) -> Result<(Vec<Value>, bool), String> {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Array(a)) => Ok((a, false)),
        Ok(Value::Object(mut o)) => match o.remove("traceEvents") {
            Some(Value::Array(a)) => Ok((a, false)),
            _ => Err("a JSON object without a traceEvents array".into()),
        },
        Ok(_) => Err("JSON that is neither an array nor an object".into()),
        Err(e) => {
            let text = String::from_utf8_lossy(bytes);
            if !text.trim_start().starts_with('[') {
                return Err(format!("invalid JSON: {e}"));
            }
            // Keep the whole elements before the cut, one pass (a search
            // backwards for a cut point that parses would be quadratic).
            let events = whole_elements(bytes);
            if events.is_empty() {
                return Err(format!("invalid JSON: {e}"));
            }
            Ok((events, true))
        }
    }
}

/// The complete elements at the start of a JSON array cut short, each
/// parsed once.
fn whole_elements(bytes: &[u8]) -> Vec<Value> {
    let skip_ws = |mut i: usize| {
        while bytes.get(i).is_some_and(u8::is_ascii_whitespace) {
            i += 1;
        }
        i
    };
    let mut out = Vec::new();
    let mut pos = skip_ws(0);
    if bytes.get(pos) != Some(&b'[') {
        return out;
    }
    pos += 1;
    loop {
        pos = skip_ws(pos);
        let mut values = serde_json::Deserializer::from_slice(&bytes[pos..]).into_iter::<Value>();
        match values.next() {
            Some(Ok(v)) => out.push(v),
            _ => return out,
        }
        pos = skip_ws(pos + values.byte_offset());
        if bytes.get(pos) != Some(&b',') {
            return out;
        }
        pos += 1;
    }
}

fn num_i64(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64().or_else(|| n.as_f64().map(|f| f as i64)),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

/// Microseconds (number or numeric string) to nanoseconds.
fn micros_to_ns(v: &Value) -> Option<i64> {
    let f = match v {
        Value::Number(n) => n.as_f64()?,
        Value::String(s) => s.trim().parse().ok()?,
        _ => return None,
    };
    f.is_finite().then(|| clamp_ts((f * 1000.0).round() as i64))
}

pub fn decode_json(bytes: &[u8]) -> Result<TraceModel, String> {
    let mut m = TraceModel::new(Format::Json, bytes.len());
    let (mut events, truncated) = parse_json_events(bytes)?;
    m.truncated = truncated;
    // Read in time order, as Perfetto's reader does (equal timestamps in
    // file order): a `B`/`b` may follow its `E`/`e` in the file. Events
    // without a valid `ts` (metadata) first.
    events.sort_by_cached_key(|e| e.get("ts").and_then(micros_to_ns).unwrap_or(i64::MIN));
    // Open B events per thread, to pair with E.
    let mut open: HashMap<(i64, i64), Vec<usize>> = HashMap::new();
    let mut async_open: HashMap<(i64, String, String), Vec<usize>> = HashMap::new();
    for e in &events {
        let Some(ph) = e
            .get("ph")
            .and_then(Value::as_str)
            .and_then(|p| p.chars().next())
        else {
            continue;
        };
        let pid = e.get("pid").and_then(num_i64).unwrap_or(0);
        let tid = e.get("tid").and_then(num_i64).unwrap_or(pid);
        let name = e
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let category = e
            .get("cat")
            .and_then(Value::as_str)
            .filter(|c| !c.is_empty())
            .map(str::to_owned);
        let args = e
            .get("args")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        if ph == 'M' {
            let value = args.get("name").and_then(Value::as_str).map(str::to_owned);
            match name.as_str() {
                "process_name" => {
                    m.processes.insert(pid, value);
                }
                "thread_name" => {
                    m.processes.entry(pid).or_default();
                    m.threads.insert((pid, tid), value);
                }
                _ => {}
            }
            continue;
        }
        let Some(ts) = e.get("ts").and_then(micros_to_ns) else {
            m.warn(format!("event {name:?} without a valid ts, skipped"));
            continue;
        };
        m.processes.entry(pid).or_default();
        let thread_track = Track::Thread { pid, tid };
        let ev = |kind, track| Event {
            ts,
            kind,
            name: name.clone(),
            category: category.clone(),
            track,
            thread: Some((pid, tid)),
            args: args.clone(),
        };
        match ph {
            'X' => {
                m.threads.entry((pid, tid)).or_default();
                let dur = e.get("dur").and_then(micros_to_ns).unwrap_or(0);
                m.events.push(ev(Kind::Complete { dur }, thread_track));
            }
            'B' => {
                m.threads.entry((pid, tid)).or_default();
                open.entry((pid, tid)).or_default().push(m.events.len());
                m.events.push(ev(Kind::Begin, thread_track));
            }
            'E' => close_open(
                &mut m,
                open.entry((pid, tid)).or_default(),
                'E',
                &name,
                ts,
                &args,
            ),
            'i' | 'I' | 'R' => {
                let track = match e.get("s").and_then(Value::as_str) {
                    Some("g") => Track::Global,
                    Some("p") => Track::Process { pid },
                    _ => {
                        m.threads.entry((pid, tid)).or_default();
                        thread_track
                    }
                };
                m.events.push(ev(Kind::Instant, track));
            }
            'C' => {
                let only_value = args.len() == 1 && args.contains_key("value");
                for (k, v) in &args {
                    let n = match v {
                        Value::Number(n) => n.clone(),
                        Value::String(s) => {
                            match s.parse::<f64>().ok().and_then(Number::from_f64) {
                                Some(n) => n,
                                None => continue,
                            }
                        }
                        _ => continue,
                    };
                    let track_name = if only_value {
                        name.clone()
                    } else {
                        format!("{name} {k}")
                    };
                    let mut c = ev(
                        Kind::Counter(n),
                        Track::Counter {
                            pid,
                            name: track_name.clone(),
                        },
                    );
                    c.name = track_name;
                    c.args = Map::new();
                    m.events.push(c);
                }
            }
            'b' | 'e' | 'n' => {
                let id = e
                    .get("id2")
                    .and_then(|i| i.get("local").or_else(|| i.get("global")))
                    .or_else(|| e.get("id"))
                    .map(|v| {
                        v.as_str()
                            .map(str::to_owned)
                            .unwrap_or_else(|| v.to_string())
                    });
                let Some(id) = id else {
                    m.warn(format!("async event {name:?} without an id, skipped"));
                    continue;
                };
                let key = (pid, category.clone().unwrap_or_default(), id.clone());
                match ph {
                    'b' => {
                        async_open.entry(key).or_default().push(m.events.len());
                        let track = Track::Async {
                            pid,
                            id,
                            name: name.clone(),
                        };
                        m.events.push(ev(Kind::Begin, track));
                    }
                    'e' => {
                        let stack = async_open.entry(key).or_default();
                        close_open(&mut m, stack, 'e', &name, ts, &args);
                    }
                    _ => {
                        let track = Track::Async {
                            pid,
                            id,
                            name: name.clone(),
                        };
                        m.events.push(ev(Kind::Instant, track));
                    }
                }
            }
            other => m.warn(format!("phase {other:?} is not converted")),
        }
    }
    Ok(m)
}

/// An end (`E`, or an async `e`) at `ts`: closes the innermost begin open in
/// `stack` with that name (or any, for an unnamed end), which takes the
/// end's args; one that closes nothing is a warning.
fn close_open(
    m: &mut TraceModel,
    stack: &mut Vec<usize>,
    phase: char,
    name: &str,
    ts: i64,
    args: &Map<String, Value>,
) {
    let at = stack
        .iter()
        .rposition(|&i| name.is_empty() || m.events[i].name == name);
    match at {
        Some(pos) => {
            let i = stack.remove(pos);
            let b = &mut m.events[i];
            b.kind = Kind::Complete { dur: ts - b.ts };
            b.args.extend(args.clone());
        }
        None => m.warn(format!("{phase} event {name:?} closes nothing")),
    }
}
