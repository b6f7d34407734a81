//! A process writing a Chrome JSON trace is killed (SIGKILL) mid-trace; what
//! it flushed loads the way the format allows: the bare array's closing `]`
//! is optional, so after stripping a truncated last object and adding the
//! `]`, a standard JSON parser reads every complete event, and each thread's
//! events are an unbroken prefix of what it recorded.

mod common;

use common::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The format's rule for a bare array cut short: drop the truncated last
/// object (anything after the last complete one) and add the missing `]`.
fn load_prefix(text: &str) -> (Vec<Value>, usize) {
    assert!(text.starts_with('['), "a bare array");
    if let Ok(Value::Array(v)) = serde_json::from_str::<Value>(text) {
        return (v, text.len()); // it was complete after all
    }
    let mut end = text.len();
    for _ in 0..10_000 {
        let Some(pos) = text[..end].rfind('}') else {
            break;
        };
        let candidate = format!("{}]", &text[..=pos]);
        if let Ok(Value::Array(v)) = serde_json::from_str::<Value>(&candidate) {
            return (v, pos + 1);
        }
        end = pos;
    }
    panic!("no loadable prefix");
}

#[test]
fn killed_writer_leaves_a_loadable_json_prefix() {
    let dir = scratch("json-kill");
    let trace = dir.join("endless.json");
    let expect = dir.join("endless.expect.json");
    let mut child = Command::new(env!("CARGO_BIN_EXE_ringtrace-test-scenarios"))
        .args([
            "json_endless",
            trace.to_str().unwrap(),
            expect.to_str().unwrap(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Let it write for a while: both threads' events flushed, several MiB.
    let started = Instant::now();
    let deadline = started + Duration::from_secs(30);
    loop {
        let len = std::fs::metadata(&trace).map(|m| m.len()).unwrap_or(0);
        if len > 4 << 20 && started.elapsed() > Duration::from_millis(300) {
            let text = std::fs::read(&trace).unwrap();
            let has = |who: &[u8]| text.windows(who.len()).any(|w| w == who);
            if has(b"\"who\":\"worker\"") && has(b"\"who\":\"main\"") {
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the writer produced only {len} bytes"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill().unwrap(); // SIGKILL: no exit handler, no closing bracket
    let status = child.wait().unwrap();
    {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGKILL));
    }
    let text = std::fs::read_to_string(&trace).unwrap();
    assert!(
        !text.trim_end().ends_with(']'),
        "a killed writer never closes the array"
    );

    let (events, used) = load_prefix(&text);
    // Every complete event is there: one per line before the cut, in order.
    let complete_lines: Vec<Value> = text[..used]
        .lines()
        .skip(1) // "["
        // Separators and the padding that keeps events off page boundaries
        // may stand on lines of their own.
        .map(|l| l.trim().trim_matches(','))
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_str(l).expect("each line one event"))
        .collect();
    assert_eq!(events, complete_lines);
    // What was cut is at most one partial event.
    let rest = text[used..].trim_start_matches([',', '\n', ' ']);
    assert!(
        !rest.contains('\n') && serde_json::from_str::<Value>(rest).is_err(),
        "only a partial last event is dropped: {rest:?}"
    );
    assert!(events.len() > 2000, "{} events", events.len());

    // Each thread's numbered events are in order, from 0, and every gap is
    // a loss the trace marks on that thread (a ring that filled up while
    // the flusher was busy): nothing is missing silently. The worker's
    // scopes (X events, written when they end) are checked the same way.
    let mut seqs: BTreeMap<String, (u64, Vec<u64>)> = BTreeMap::new();
    let mut lost: BTreeMap<u64, u64> = BTreeMap::new();
    for e in &events {
        let (name, ph) = (e["name"].as_str().unwrap_or(""), e["ph"].as_str().unwrap());
        let tid = e["tid"].as_u64().unwrap_or(0);
        let key = match (name, ph) {
            ("numbered", "i") => e["args"]["who"].as_str().unwrap().to_string(),
            ("work", "X") => "work".to_string(),
            ("ringtrace: events lost", "i") => {
                *lost.entry(tid).or_default() += e["args"]["lost_events"].as_u64().unwrap();
                continue;
            }
            _ => continue,
        };
        let entry = seqs.entry(key).or_insert((tid, Vec::new()));
        entry.1.push(e["args"]["seq"].as_u64().unwrap());
    }
    assert_eq!(seqs.keys().collect::<Vec<_>>(), ["main", "work", "worker"]);
    let mut gaps: BTreeMap<u64, u64> = BTreeMap::new();
    for (who, (tid, s)) in &seqs {
        assert!(s.len() > 100, "{who}: {} events", s.len());
        assert_eq!(s[0], 0, "{who}: starts at 0");
        for w in s.windows(2) {
            assert!(w[1] > w[0], "{who}: out of order at {}", w[0]);
            *gaps.entry(*tid).or_default() += w[1] - w[0] - 1;
        }
    }
    for (tid, g) in &gaps {
        let marked = lost.get(tid).copied().unwrap_or(0);
        assert!(
            *g <= marked,
            "thread {tid}: {g} events missing, {marked} marked lost"
        );
    }
    // Names and process metadata came first, as M events.
    assert_eq!(events[0]["ph"], "M");
    assert_eq!(events[0]["name"], "process_name");
}
