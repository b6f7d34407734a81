//! Reliability: signals, kills, load, thread churn, bad input, I/O faults and
//! random event streams. Each scenario runs in a child process.

mod common;

use common::*;
use prost::Message;
use serde_json::Value;
use std::collections::HashMap;
use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

fn kill(child: &std::process::Child, sig: i32) {
    // SAFETY: sending a signal to our own child process.
    assert_eq!(unsafe { libc::kill(child.id() as i32, sig) }, 0);
}

#[test]
fn sigterm_and_sigint_finish_the_trace_then_end_the_process() {
    let dir = scratch("signals");
    for (sig, ext) in [(libc::SIGTERM, "pftrace"), (libc::SIGINT, "json")] {
        let trace = dir.join(format!("sig{sig}.{ext}"));
        let mut child = spawn_ready("signal_wait", &trace);
        std::thread::sleep(Duration::from_millis(50));
        kill(&child, sig);
        let status = child.wait().unwrap();
        assert_eq!(
            status.signal(),
            Some(sig),
            "the signal keeps its default effect"
        );
        let names: Vec<String> = if ext == "pftrace" {
            perfetto_model(&trace)["slices"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["name"].as_str().unwrap().to_string())
                .collect()
        } else {
            // Finished: the whole file parses, closing bracket included.
            json_events(&trace)
                .iter()
                .filter_map(|e| e["name"].as_str().map(String::from))
                .collect()
        };
        assert_eq!(names.iter().filter(|n| *n == "before_signal").count(), 100);
        assert!(names.iter().any(|n| n == "waiting"));
    }
}

#[test]
fn sigkill_mid_write_leaves_a_readable_prefix() {
    let dir = scratch("sigkill");
    for ext in ["pftrace", "json"] {
        let trace = dir.join(format!("killed.{ext}"));
        let mut child = spawn_ready("endless", &trace);
        std::thread::sleep(Duration::from_millis(150));
        kill(&child, libc::SIGKILL);
        assert_eq!(child.wait().unwrap().signal(), Some(libc::SIGKILL));
        if ext == "pftrace" {
            // Every whole packet decodes; a cut last packet is ignored.
            let model = perfetto_model(&trace);
            let n = slices_named(&model, "endless").len();
            assert!(n > 100, "{n} slices before the kill");
        } else {
            // The bare array without its `]`: drop a cut last line and close it.
            let text = std::fs::read_to_string(&trace).unwrap();
            assert!(!text.trim_end().ends_with(']'));
            let complete = &text[..text.rfind("},\n").map(|i| i + 1).unwrap_or(1)];
            let events: Vec<Value> =
                serde_json::from_str(&format!("{complete}]")).expect("prefix loads");
            let n = events.iter().filter(|e| e["name"] == "endless").count();
            assert!(n > 100, "{n} events before the kill");
        }
    }
}

/// Per thread: events in the trace + events marked lost == events recorded.
/// Drop mode keeps each thread's first events (its ring starts empty); a
/// flight recorder keeps the process's newest records, whoever wrote them,
/// so a thread that did not run for a while before the stop may have none
/// left, but what it has left ends with its newest event (a ring frees its
/// own oldest records, the store forgets its oldest entries, and every ring
/// is read at stop), in the order recorded.
fn check_load(mode: &str) {
    let dir = scratch(&format!("load-{mode}"));
    let trace = dir.join("load.json");
    let expect = run_scenario_with("load", &trace, &dir.join("load.expect"), &[mode]);
    let events = json_events(&trace);
    let mut written: HashMap<i64, u64> = HashMap::new();
    let mut lost: HashMap<i64, u64> = HashMap::new();
    // Each thread's numbers (`n`, 0 up) in the order written.
    let mut numbers: HashMap<i64, Vec<u64>> = HashMap::new();
    for e in &events {
        let tid = e["tid"].as_i64().unwrap_or(0);
        if e["name"] == "load" {
            *written.entry(tid).or_default() += 1;
            let n = e["args"]["n"].as_u64().unwrap();
            numbers.entry(tid).or_default().push(n);
        } else if e["name"] == "ringtrace: events lost" {
            *lost.entry(tid).or_default() += e["args"]["lost_events"].as_u64().unwrap();
        }
    }
    let mut total_lost = 0;
    for t in expect["threads"].as_array().unwrap() {
        let tid = t["tid"].as_i64().unwrap();
        let recorded = t["recorded"].as_u64().unwrap();
        let (w, l) = (
            written.get(&tid).copied().unwrap_or(0),
            lost.get(&tid).copied().unwrap_or(0),
        );
        assert_eq!(
            w + l,
            recorded,
            "thread {tid} ({mode}): {w} written + {l} lost"
        );
        let kept = numbers.remove(&tid).unwrap_or_default();
        assert!(
            kept.windows(2).all(|p| p[0] < p[1]),
            "thread {tid} ({mode}): its events out of order or twice"
        );
        if mode == "drop" {
            assert_eq!(kept.first(), Some(&0), "thread {tid}: its first event");
        } else if w > 0 {
            assert_eq!(
                kept.last(),
                Some(&(recorded - 1)),
                "thread {tid}: {w} events left, not ending with its newest"
            );
        }
        total_lost += l;
    }
    assert!(
        written.values().any(|&w| w > 0),
        "{mode}: no thread's events left"
    );
    assert_eq!(total_lost, expect["events_lost"].as_u64().unwrap());
}

#[test]
fn load_in_drop_mode_accounts_for_every_event_per_thread() {
    check_load("drop");
}

#[test]
fn load_in_overwrite_mode_accounts_for_every_event_per_thread() {
    check_load("overwrite");
}

#[test]
fn thread_churn_keeps_every_event_and_frees_memory() {
    let (trace, expect) = run_scenario_ok("churn", "churn.json", "churn", &[]);
    let events = json_events(&trace);
    let scopes = events
        .iter()
        .filter(|e| e["name"] == "short_life" && e["ph"] == "X")
        .count();
    let hellos = events.iter().filter(|e| e["name"] == "hello").count();
    assert_eq!((scopes, hellos), (10_000, 10_000));
    assert_eq!(expect["events_lost"], 0);
    let (before, after) = (
        expect["baseline_bytes"].as_i64().unwrap(),
        expect["after_bytes"].as_i64().unwrap(),
    );
    // 10,000 rings of 16 KiB were allocated; what stays must be a small constant.
    assert!(
        after - before < 1 << 20,
        "live heap grew by {} bytes",
        after - before
    );
}

#[test]
fn bad_input_never_panics_or_corrupts() {
    let (trace, expect) = run_scenario_ok("bad", "bad.pftrace", "bad_input", &[]);
    assert_eq!(expect["start_twice_error"], true);
    assert_eq!(
        expect["unmatched_ends"], 1,
        "the out-of-order end is left out and counted"
    );
    assert_eq!(
        expect["events_lost"], 1,
        "the 1 MiB argument is a counted drop"
    );
    let model = perfetto_model(&trace);
    let slices = model["slices"].as_array().unwrap();
    let names: Vec<&str> = slices
        .iter()
        .map(|s| s["name"].as_str().unwrap_or(""))
        .collect();
    assert!(!names
        .iter()
        .any(|n| n.starts_with("before_start") || *n == "after_stop"));
    assert!(names.contains(&"ctl\u{0}\u{7}\n\"quoted\""));
    let deep: Vec<&Value> = slices.iter().filter(|s| s["name"] == "deep").collect();
    assert_eq!(deep.len(), 10_000);
    assert_eq!(
        deep.iter().map(|s| s["depth"].as_u64().unwrap()).max(),
        Some(9_999)
    );
    let floats = slices.iter().find(|s| s["name"] == "floats").unwrap();
    assert!(floats["args"]["inf"].as_f64().is_some() || floats["args"]["inf"].is_string());
    // The second session after stop wrote a valid file of its own.
    let second = perfetto_model(std::path::Path::new(expect["second"].as_str().unwrap()));
    assert_eq!(second["slices"][0]["name"], "second_session");

    // The same input as JSON parses with a standard parser.
    let trace = trace.with_file_name("bad.json");
    let (out, _) = run_scenario("bad_input", &trace, &[]);
    assert!(out.status.success());
    let events = json_events(&trace);
    assert!(events
        .iter()
        .any(|e| e["name"] == "ctl\u{0}\u{7}\n\"quoted\""));
    let nan = events.iter().find(|e| e["name"] == "nan").unwrap();
    assert_eq!(nan["args"]["value"], "NaN");
}

#[test]
fn write_errors_are_reported_once_and_the_program_goes_on() {
    let dir = scratch("iofault");
    let (out, expect) = run_scenario("io_fault", &dir.join("unused"), &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let expect = expect.unwrap();
    assert_eq!(expect["program_continued"], true);
    let err = expect["stop_error"]
        .as_str()
        .expect("stop reports the write error");
    assert!(err.contains("/dev/full"), "{err}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.matches("ringtrace: writing the trace").count(),
        1,
        "{stderr}"
    );
}

/// A write the file size limit cuts part-way (as a full disk would) leaves
/// a file that ends on an event boundary: the Perfetto file decodes
/// strictly, the JSON one loads once its `]` is appended.
#[test]
fn a_write_cut_part_way_leaves_whole_events() {
    let dir = scratch("sizelimit");
    for ext in ["pftrace", "json"] {
        let trace = dir.join(format!("cut.{ext}"));
        let (out, expect) = run_scenario("size_limit", &trace, &[]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let expect = expect.unwrap();
        let err = expect["stop_error"]
            .as_str()
            .expect("stop reports the error");
        assert!(err.contains("too large"), "{err}");
        let bytes = std::fs::read(&trace).unwrap();
        assert!(bytes.len() as u64 <= expect["limit"].as_u64().unwrap());
        let n = if ext == "pftrace" {
            ringtrace_protos::Trace::decode(bytes.as_slice())
                .unwrap_or_else(|e| panic!("a strict parser rejects the file: {e}"));
            slices_named(&perfetto_model(&trace), "cut").len()
        } else {
            let mut text = bytes;
            text.push(b']');
            let events: Vec<Value> = serde_json::from_slice(&text).unwrap_or_else(|e| {
                let tail = String::from_utf8_lossy(&text[text.len().saturating_sub(200)..]);
                panic!("the file + ']' does not parse: {e}; it ends with {tail:?}")
            });
            events.iter().filter(|e| e["name"] == "cut").count()
        };
        assert!(n > 100, "{ext}: {n} events before the limit");
    }
}

#[test]
fn random_event_streams_decode_to_exactly_what_went_in() {
    let dir = scratch("random");
    for seed in 1..=6u64 {
        let trace = dir.join(format!("random{seed}.pftrace"));
        let expect = run_scenario_with(
            "random_events",
            &trace,
            &trace.with_extension("expect"),
            &[&seed.to_string()],
        );
        let model = perfetto_model(&trace);
        let thread = &expect["threads"][0];
        let tid = thread["tid"].as_i64().unwrap();
        let mut want = Vec::new();
        let mut depth = 0;
        let mut counters = Vec::new();
        for e in thread["events"].as_array().unwrap() {
            match e["type"].as_str().unwrap() {
                "begin" => {
                    want.push((e["name"].clone(), e["args"].clone(), depth));
                    depth += 1;
                }
                "end" => depth -= 1,
                "instant" => want.push((e["name"].clone(), e["args"].clone(), depth)),
                _ => counters.push(e["value"].as_f64().unwrap()),
            }
        }
        let got = thread_slices(&model, tid);
        assert_eq!(got.len(), want.len(), "seed {seed}");
        for (g, (name, args, depth)) in got.iter().zip(&want) {
            assert_eq!(&g["name"], name, "seed {seed}");
            assert_eq!(&g["args"], args, "seed {seed}: args of {name}");
            assert_eq!(g["depth"].as_u64(), Some(*depth as u64), "seed {seed}");
        }
        if !counters.is_empty() {
            let got: Vec<f64> = counter_values(&model, "counter")
                .iter()
                .map(|c| c.1)
                .collect();
            assert_eq!(got, counters, "seed {seed}");
        }
    }
}
