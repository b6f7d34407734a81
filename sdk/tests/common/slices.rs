//! Slices, instants and flows as a viewer shows them, from either format,
//! and the `tracing` set-up the tests share.

use super::{json_events, perfetto_model_clean};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Mutex, MutexGuard};
use tracing::dispatcher::{self, Dispatch};
use tracing_subscriber::layer::SubscriberExt;

pub static SERIAL: Mutex<()> = Mutex::new(());

pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// One slice or instant as a viewer shows it, from either format.
#[derive(Debug, Clone)]
pub struct Slice {
    /// `thread:<name>#<tid>` or `async:<key>`.
    pub track: String,
    pub name: String,
    pub cat: String,
    pub ts: u64,
    /// -1: never ended.
    pub dur: i64,
    pub depth: u64,
    pub instant: bool,
    pub args: Value,
}

impl Slice {
    pub fn end(&self) -> u64 {
        self.ts + self.dur.max(0) as u64
    }
    pub fn is_async(&self) -> bool {
        self.track.starts_with("async:")
    }
    pub fn thread(&self) -> &str {
        self.track.strip_prefix("thread:").unwrap_or("")
    }
    /// Whether it begins and ends within `[from, to]` (ns).
    pub fn within(&self, (from, to): (u64, u64)) -> bool {
        self.ts >= from && self.end() <= to
    }
}

/// A flow as (source slice index, destination slice index) into the slices.
pub type Flows = Vec<(usize, usize)>;

pub fn perfetto_slices(model: &Value) -> (Vec<Slice>, Flows) {
    let tracks = model["tracks"].as_object().unwrap();
    let label = |uuid: &Value| -> String {
        let t = &tracks[&uuid.to_string()];
        if t["kind"] == "thread" {
            format!(
                "thread:{}#{}",
                t["thread_name"].as_str().unwrap_or(""),
                t["tid"]
            )
        } else {
            format!("async:{uuid}")
        }
    };
    let slices: Vec<Slice> = model["slices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| Slice {
            track: label(&s["track_uuid"]),
            name: s["name"].as_str().unwrap_or("").to_string(),
            cat: s["category"].as_str().unwrap_or("").to_string(),
            ts: s["ts"].as_u64().unwrap(),
            dur: s["dur"].as_i64().unwrap(),
            depth: s["depth"].as_u64().unwrap(),
            instant: s["instant"].as_bool().unwrap(),
            args: s["args"].clone(),
        })
        .collect();
    let flows = model["flows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["from"].as_u64().unwrap() as usize,
                f["to"].as_u64().unwrap() as usize,
            )
        })
        .collect();
    (slices, flows)
}

pub fn ns(v: &Value) -> u64 {
    (v.as_f64().unwrap() * 1000.0).round() as u64
}

/// Slices of a JSON trace: `X` and `i` on threads (depth from nesting),
/// `b`/`e` pairs on async tracks; flows from v2 `bind_id`s.
pub fn json_slices(events: &[Value]) -> (Vec<Slice>, Flows) {
    let mut names: HashMap<i64, String> = HashMap::new();
    for e in events {
        if e["ph"] == "M" && e["name"] == "thread_name" {
            names.insert(
                e["tid"].as_i64().unwrap(),
                e["args"]["name"].as_str().unwrap().into(),
            );
        }
    }
    let mut slices = Vec::new();
    let mut binds: Vec<(String, bool, usize)> = Vec::new();
    let mut open: HashMap<String, usize> = HashMap::new();
    // Readers sort by timestamp; the file is in flush order (per thread).
    let mut events: Vec<&Value> = events.iter().collect();
    events.sort_by_key(|e| e.get("ts").map_or(0, ns));
    for e in events {
        let ph = e["ph"].as_str().unwrap();
        let tid = e["tid"].as_i64().unwrap_or(0);
        let track = format!("thread:{}#{tid}", names.get(&tid).map_or("", |s| s));
        let base = |track: String, dur: i64, instant: bool| Slice {
            track,
            name: e["name"].as_str().unwrap().into(),
            cat: e["cat"].as_str().unwrap_or("").into(),
            ts: ns(&e["ts"]),
            dur,
            depth: 0,
            instant,
            args: e.get("args").cloned().unwrap_or(json!({})),
        };
        match ph {
            "X" => {
                if let Some(id) = e.get("bind_id") {
                    binds.push((
                        id.as_str().unwrap().into(),
                        e.get("flow_in").is_some(),
                        slices.len(),
                    ));
                }
                slices.push(base(track, ns(&e["dur"]) as i64, false));
            }
            "i" => slices.push(base(track, 0, true)),
            "b" => {
                if let Some(id) = e.get("bind_id") {
                    binds.push((
                        id.as_str().unwrap().into(),
                        e.get("flow_in").is_some(),
                        slices.len(),
                    ));
                }
                let key = format!("{}:{}", e["cat"], e["id2"]["local"]);
                assert!(!open.contains_key(&key), "async id reused while open: {e}");
                open.insert(key.clone(), slices.len());
                slices.push(base(format!("async:{key}"), -1, false));
            }
            "e" => {
                let key = format!("{}:{}", e["cat"], e["id2"]["local"]);
                let i = open
                    .remove(&key)
                    .unwrap_or_else(|| panic!("`e` without `b`: {e}"));
                let s = &mut slices[i];
                assert_eq!(
                    s.name,
                    e["name"].as_str().unwrap(),
                    "e matches its b by name"
                );
                s.dur = (ns(&e["ts"]) - s.ts) as i64;
                if let Some(Value::Object(a)) = e.get("args") {
                    let args = s.args.as_object_mut().unwrap();
                    args.extend(a.clone());
                }
            }
            "M" => {}
            other => panic!("unexpected phase {other}: {e}"),
        }
    }
    // Depths from nesting, per track: longer first at equal ts.
    let mut by_track: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, s) in slices.iter().enumerate() {
        by_track.entry(s.track.clone()).or_default().push(i);
    }
    for idx in by_track.values_mut() {
        idx.sort_by_key(|&i| {
            (
                slices[i].ts,
                std::cmp::Reverse(slices[i].dur),
                slices[i].instant,
            )
        });
        let mut stack: Vec<u64> = Vec::new();
        for &i in idx.iter() {
            while stack.last().is_some_and(|&end| {
                end <= slices[i].ts && !(end == slices[i].ts && slices[i].instant)
            }) {
                stack.pop();
            }
            slices[i].depth = stack.len() as u64;
            if !slices[i].instant {
                stack.push(slices[i].end());
            }
        }
    }
    let mut flows = Vec::new();
    for (id, is_in, dst) in &binds {
        if !is_in {
            continue;
        }
        let src: Vec<usize> = binds
            .iter()
            .filter(|(i, inn, _)| i == id && !inn)
            .map(|b| b.2)
            .collect();
        assert_eq!(src.len(), 1, "one flow_out for bind_id {id}");
        flows.push((src[0], *dst));
    }
    for (id, is_in, _) in &binds {
        if !is_in {
            assert!(
                binds.iter().any(|(i, inn, _)| i == id && *inn),
                "flow_out {id} has no flow_in"
            );
        }
    }
    (slices, flows)
}

/// Every track's slices nest: each one is inside its parent or after it.
pub fn assert_well_nested(slices: &[Slice]) {
    let mut by_track: BTreeMap<&str, Vec<&Slice>> = BTreeMap::new();
    for s in slices.iter().filter(|s| !s.instant) {
        by_track.entry(&s.track).or_default().push(s);
    }
    for (track, mut v) in by_track {
        v.sort_by_key(|s| (s.ts, std::cmp::Reverse(s.dur)));
        let mut stack: Vec<&Slice> = Vec::new();
        for s in v {
            assert!(s.dur >= 0, "slice never ended on {track}: {s:?}");
            while stack.last().is_some_and(|p| p.end() <= s.ts) {
                stack.pop();
            }
            if let Some(p) = stack.last() {
                assert!(
                    s.end() <= p.end(),
                    "slices overlap on {track} without nesting:\n  {p:?}\n  {s:?}"
                );
            }
            stack.push(s);
        }
    }
}

pub fn no_loss_flags(slices: &[Slice]) {
    for s in slices {
        assert!(
            s.args.get("ringtrace.end_lost").is_none()
                && s.args.get("ringtrace.unfinished").is_none(),
            "a slice was closed by the encoder, not by its span: {s:?}"
        );
        assert_ne!(s.name, "ringtrace: events lost", "events were lost");
    }
}

/// The slices of a trace in either format (by its extension), as they are:
/// a capture's or a part's may be cut by its window or by losses.
pub fn decode_as_is(trace: &Path) -> (Vec<Slice>, Flows) {
    if trace.extension().unwrap() == "json" {
        json_slices(&json_events(trace))
    } else {
        perfetto_slices(&perfetto_model_clean(trace))
    }
}

/// The slices of a trace with nothing lost: each ended by its span, well
/// nested.
pub fn decode(trace: &Path) -> (Vec<Slice>, Flows) {
    let (slices, flows) = decode_as_is(trace);
    no_loss_flags(&slices);
    assert_well_nested(&slices);
    (slices, flows)
}

/// Runs `f` on a new thread named `name` with `dispatch` as its subscriber.
pub fn on_thread<R: Send + 'static>(
    name: &str,
    dispatch: &Dispatch,
    f: impl FnOnce() -> R + Send + 'static,
) -> R {
    let d = dispatch.clone();
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || dispatcher::with_default(&d, f))
        .unwrap()
        .join()
        .unwrap()
}

/// How spans reach ringtrace: its layer on the registry, or its own subscriber.
#[derive(Clone, Copy, Debug)]
pub enum Via {
    Layer,
    Subscriber,
}

/// Starts a session writing `trace`, recorded through `via`.
pub fn start(trace: &Path, via: Via) -> (Dispatch, ringtrace::TraceGuard) {
    start_with(trace, via, false)
}

/// As [`start`]; `every_slice`: every slice of a span carries its fields
/// (`Builder::span_fields_every_slice`), not only its first.
pub fn start_with(trace: &Path, via: Via, every_slice: bool) -> (Dispatch, ringtrace::TraceGuard) {
    let builder = ringtrace::builder()
        .output(trace)
        .span_fields_every_slice(every_slice);
    finish(builder, via)
}

/// Starts the session of `builder`, recorded through `via`.
pub fn finish(builder: ringtrace::Builder, via: Via) -> (Dispatch, ringtrace::TraceGuard) {
    match via {
        Via::Layer => {
            let (layer, guard) = builder.layer().unwrap();
            (
                Dispatch::new(tracing_subscriber::registry().with(layer)),
                guard,
            )
        }
        Via::Subscriber => {
            let (subscriber, guard) = builder.subscriber().unwrap();
            (Dispatch::new(subscriber), guard)
        }
    }
}
