//! Random event trees (seeded): scopes with random nesting, instants and
//! counters with random arguments of every type.

use super::tid;
use ringtrace_test_support::Rng;
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// A random event sequence (seeded): scopes with random nesting, instants and
/// counters with random arguments. Expectations as in `workload`.
pub fn events(trace: &str, seed: u64) -> Value {
    let guard = ringtrace::builder().output(trace).start().unwrap();
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let start = ringtrace::trace_clock_ns();
    let mut events = Vec::new();
    random_level(&mut rng, 0, &mut events);
    let end = ringtrace::trace_clock_ns();
    let stats = guard.stop().unwrap();
    json!({"pid": std::process::id(), "start_ns": start, "end_ns": end, "events_lost": stats.events_lost,
           "events_written": stats.events_written,
           "threads": [{"tid": tid(), "name": "main", "events": events}]})
}

fn random_string(rng: &mut Rng) -> String {
    const ALPHABET: &[&str] = &[
        "a", "Z", "0", " ", "\"", "\\", "\n", "\t", "\u{1}", "é", "漢", "😀", "\u{7f}", "/",
    ];
    let len = rng.below(12) as usize;
    (0..len)
        .map(|_| ALPHABET[rng.below(ALPHABET.len() as u64) as usize])
        .collect()
}

/// A random value and its expected decoded JSON form (Perfetto side).
fn random_value(rng: &mut Rng, depth: u32) -> (ValueArg, Value) {
    match rng.below(if depth > 2 { 6 } else { 8 }) {
        0 => {
            let v = rng.next() as i64;
            (ValueArg::Int(v), json!(v))
        }
        1 => {
            let v = rng.next();
            (ValueArg::Uint(v), json!(v))
        }
        2 => {
            let v = (rng.next() as i64 as f64) / 1024.0;
            (ValueArg::Double(v), json!(v))
        }
        3 => {
            let v = rng.below(2) == 1;
            (ValueArg::Bool(v), json!(v))
        }
        4 | 5 => {
            let s = random_string(rng);
            (ValueArg::Str(s.clone()), json!(s))
        }
        6 => {
            let n = 1 + rng.below(3);
            let (vals, exp): (Vec<_>, Vec<_>) =
                (0..n).map(|_| random_value(rng, depth + 1)).unzip();
            (ValueArg::Array(vals), Value::Array(exp))
        }
        _ => {
            let n = 1 + rng.below(3);
            let mut map = BTreeMap::new();
            let mut exp = serde_json::Map::new();
            for k in 0..n {
                let (v, e) = random_value(rng, depth + 1);
                let key = format!("k{k}");
                map.insert(key.clone(), v);
                exp.insert(key, e);
            }
            (ValueArg::Dict(map), Value::Object(exp))
        }
    }
}

/// A dynamically typed argument, so random trees can be recorded.
enum ValueArg {
    Int(i64),
    Uint(u64),
    Double(f64),
    Bool(bool),
    Str(String),
    Array(Vec<ValueArg>),
    Dict(BTreeMap<String, ValueArg>),
}

impl ringtrace::TraceValue for ValueArg {
    fn words(&self) -> usize {
        match self {
            ValueArg::Int(v) => v.words(),
            ValueArg::Uint(v) => v.words(),
            ValueArg::Double(v) => v.words(),
            ValueArg::Bool(v) => v.words(),
            ValueArg::Str(v) => v.words(),
            ValueArg::Array(v) => v.words(),
            ValueArg::Dict(v) => v.words(),
        }
    }
    fn encode(&self, out: &mut dyn ringtrace::__private::WordSink) {
        match self {
            ValueArg::Int(v) => v.encode(out),
            ValueArg::Uint(v) => v.encode(out),
            ValueArg::Double(v) => v.encode(out),
            ValueArg::Bool(v) => v.encode(out),
            ValueArg::Str(v) => v.encode(out),
            ValueArg::Array(v) => v.encode(out),
            ValueArg::Dict(v) => v.encode(out),
        }
    }
}

fn random_level(rng: &mut Rng, depth: u32, events: &mut Vec<Value>) {
    let n = 1 + rng.below(6);
    for _ in 0..n {
        match rng.below(4) {
            0 | 1 if depth < 6 => {
                let (a, ae) = random_value(rng, 0);
                let (b, be) = random_value(rng, 0);
                ringtrace::trace_scope!("rand", "scope", a = a, b = b);
                events.push(json!({"type": "begin", "name": "scope", "cat": "rand", "args": {"a": ae, "b": be}}));
                random_level(rng, depth + 1, events);
                events.push(json!({"type": "end", "name": "scope"}));
            }
            2 => {
                let (v, ve) = random_value(rng, 0);
                ringtrace::trace_instant!("rand", "instant", v = v);
                events.push(
                    json!({"type": "instant", "name": "instant", "cat": "rand", "args": {"v": ve}}),
                );
            }
            _ => {
                let v = rng.next() as i64 >> rng.below(60);
                ringtrace::trace_counter!("rand", "counter", v);
                events.push(json!({"type": "counter", "name": "counter", "value": v}));
            }
        }
    }
}
