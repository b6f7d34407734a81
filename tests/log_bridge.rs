//! The `log` crate bridge (`ringtrace::log`, feature `log`): `log` records
//! become log instants as `trace_log!` writes them. The Perfetto file is
//! decoded with the official schema, the JSON file parsed with serde_json,
//! and both compared with the records logged: body, level, category (the
//! target), source file and line, thread; records below the level filter
//! are neither recorded nor formatted; the chained logger gets what it
//! asks for; records logged from thread-local destructors are in the file,
//! or, where the thread's ring is already gone, counted as lost.
//!
//! A process has one `log` logger, so this file is a test binary of its own
//! with one test that runs the sessions in turn.

mod common;

use common::*;
use log::{Level, LevelFilter, Log, Metadata, Record};
use serde_json::Value;
use std::fmt;
use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Mutex;

/// Evaluates a `log` statement and gives its line.
macro_rules! at {
    ($e:expr) => {{
        $e;
        line!()
    }};
}

/// Times a `Counted` value was formatted.
static FORMATTED: AtomicUsize = AtomicUsize::new(0);

/// A log argument that counts its formatting.
struct Counted(u32);

impl fmt::Display for Counted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        FORMATTED.fetch_add(1, Ordering::SeqCst);
        write!(f, "{}", self.0)
    }
}

/// The program's "existing" logger: keeps the messages at `Warn` and above.
struct Kept(Mutex<Vec<String>>);

impl Log for Kept {
    fn enabled(&self, m: &Metadata<'_>) -> bool {
        m.level() <= Level::Warn
    }
    fn log(&self, r: &Record<'_>) {
        if self.enabled(r.metadata()) {
            self.0.lock().unwrap().push(r.args().to_string());
        }
    }
    fn flush(&self) {}
}

static KEPT: Kept = Kept(Mutex::new(Vec::new()));

/// `Kept` as an owned value for `chain` (forwards to the static).
struct KeptRef;

impl Log for KeptRef {
    fn enabled(&self, m: &Metadata<'_>) -> bool {
        KEPT.enabled(m)
    }
    fn log(&self, r: &Record<'_>) {
        KEPT.log(r)
    }
    fn flush(&self) {}
}

/// One record the test logged and expects in the trace.
#[derive(Debug, Clone, PartialEq)]
struct Logged {
    body: String,
    level: &'static str,
    prio: u64,
    target: String,
    line: u32,
    tid: i64,
}

fn logged(body: &str, level: Level, target: &str, line: u32, tid: i64) -> Logged {
    let (name, prio) = match level {
        Level::Error => ("ERROR", 6),
        Level::Warn => ("WARN", 5),
        Level::Info => ("INFO", 4),
        Level::Debug => ("DEBUG", 3),
        Level::Trace => ("VERBOSE", 2),
    };
    Logged {
        body: body.to_string(),
        level: name,
        prio,
        target: target.to_string(),
        line,
        tid,
    }
}

fn os_tid() -> i64 {
    // SAFETY: gettid takes no arguments, touches no memory and cannot fail.
    unsafe { libc::gettid() as i64 }
}

/// Logs from a thread-local destructor: `Bye(n)`'s drop logs "bye n".
struct Bye(u32);

/// The line of the `log::info!` in `Bye::drop`.
static BYE_LINE: AtomicU32 = AtomicU32::new(0);

impl Drop for Bye {
    fn drop(&mut self) {
        BYE_LINE.store(
            at!(log::info!(target: "tls", "bye {}", self.0)),
            Ordering::SeqCst,
        );
    }
}

thread_local! {
    static BYE: std::cell::RefCell<Option<Bye>> = const { std::cell::RefCell::new(None) };
}

/// What one session logs; returns the records expected in the file for
/// sure, and the one from a destructor that runs after the thread's ring
/// is handed over (in the file, or counted as lost).
fn log_workload(round: u32) -> (Vec<Logged>, Logged) {
    let me = os_tid();
    let mut want = Vec::new();
    let l = at!(log::info!("plain message"));
    want.push(logged("plain message", Level::Info, module_path!(), l, me));
    let l = at!(log::warn!("round {} of {}", round, Counted(2)));
    want.push(logged(
        &format!("round {round} of 2"),
        Level::Warn,
        module_path!(),
        l,
        me,
    ));
    let l = at!(log::debug!(target: "db", "query {}", Counted(7)));
    want.push(logged("query 7", Level::Debug, "db", l, me));
    // Below the level filter (Debug): never reaches the logger.
    log::trace!("filtered {}", Counted(99));

    // A worker: an error, then a destructor logging while its ring is
    // still installed (`BYE` is first used after the thread's first event,
    // so its destructor runs before the ring's owner's).
    let worker = std::thread::spawn(move || {
        let tid = os_tid();
        let l = at!(log::error!(target: "net", "refused by {}", "10.0.0.1"));
        BYE.with(|b| *b.borrow_mut() = Some(Bye(round * 10 + 1)));
        (tid, l)
    });
    let (tid, l) = worker.join().unwrap();
    want.push(logged("refused by 10.0.0.1", Level::Error, "net", l, tid));
    let bye_line = BYE_LINE.load(Ordering::SeqCst);
    want.push(logged(
        &format!("bye {}", round * 10 + 1),
        Level::Info,
        "tls",
        bye_line,
        tid,
    ));

    // A destructor that runs after the ring's owner is gone: `BYE` is used
    // before the thread's first event.
    let late = std::thread::spawn(move || {
        BYE.with(|b| *b.borrow_mut() = Some(Bye(round * 10 + 2)));
        (os_tid(), at!(log::info!(target: "late", "first event")))
    });
    let (tid, l) = late.join().unwrap();
    want.push(logged("first event", Level::Info, "late", l, tid));
    let late_bye = logged(
        &format!("bye {}", round * 10 + 2),
        Level::Info,
        "tls",
        bye_line,
        tid,
    );
    (want, late_bye)
}

fn perfetto_logs(trace: &Path) -> Vec<Logged> {
    let model = perfetto_model(trace);
    let tids: std::collections::HashMap<String, i64> = model["tracks"]
        .as_object()
        .unwrap()
        .values()
        .filter(|t| t["kind"] == "thread")
        .map(|t| (t["uuid"].to_string(), t["tid"].as_i64().unwrap()))
        .collect();
    model["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| !e["log"].is_null())
        .map(|e| {
            let log = &e["log"];
            let prio = log["prio"].as_u64().unwrap();
            let level =
                ["", "", "VERBOSE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL"][prio as usize];
            assert_eq!(e["type"], "INSTANT");
            assert_eq!(e["name"], "log");
            Logged {
                body: log["body"].as_str().unwrap().to_string(),
                level,
                prio,
                target: e["categories"][0].as_str().unwrap().to_string(),
                line: {
                    assert_eq!(log["source_location"]["file"], "tests/log_bridge.rs");
                    log["source_location"]["line"].as_u64().unwrap() as u32
                },
                tid: tids[&e["track_uuid"].to_string()],
            }
        })
        .collect()
}

fn json_logs(trace: &Path) -> Vec<Logged> {
    json_events(trace)
        .iter()
        .filter(|e| e["ph"] == "i" && e["name"] == "log")
        .map(|e: &Value| {
            assert_eq!(e["s"], "t");
            let source = e["args"]["source"].as_str().unwrap();
            let (file, line) = source.rsplit_once(':').unwrap();
            assert_eq!(file, "tests/log_bridge.rs");
            let level = e["args"]["level"].as_str().unwrap();
            let prio = match level {
                "VERBOSE" => 2,
                "DEBUG" => 3,
                "INFO" => 4,
                "WARN" => 5,
                "ERROR" => 6,
                other => panic!("unexpected level {other}"),
            };
            Logged {
                body: e["args"]["message"].as_str().unwrap().to_string(),
                level: ["", "", "VERBOSE", "DEBUG", "INFO", "WARN", "ERROR"][prio],
                prio: prio as u64,
                target: e["cat"].as_str().unwrap().to_string(),
                line: line.parse().unwrap(),
                tid: e["tid"].as_i64().unwrap(),
            }
        })
        .collect()
}

/// Runs one session into `trace` and checks what the file holds.
fn session(trace: &Path, round: u32, read: fn(&Path) -> Vec<Logged>) {
    let guard = ringtrace::builder().output(trace).start().unwrap();
    let formatted_before = FORMATTED.load(Ordering::SeqCst);
    let (mut want, late_bye) = log_workload(round);
    let stats = guard.stop().unwrap();
    // Counted(2) and Counted(7) once each (by ringtrace; the chained logger
    // wants Warn and up, so it formats Counted(2) once more); Counted(99)
    // never: its record is below `log::max_level`.
    assert_eq!(FORMATTED.load(Ordering::SeqCst) - formatted_before, 3);

    let mut got = read(trace);

    let late_recorded = got.contains(&late_bye);
    eprintln!(
        "late destructor record: {}",
        if late_recorded {
            "in the file"
        } else {
            "counted as lost"
        }
    );
    if late_recorded {
        want.push(late_bye);
    } else {
        // Its thread's ring was handed over before the destructor ran: the
        // record is counted, not silently gone.
        assert_eq!(
            stats.events_lost, 1,
            "late destructor record neither written nor counted"
        );
    }
    let key = |l: &Logged| (l.tid, l.line, l.body.clone());
    got.sort_by_key(key);
    want.sort_by_key(key);
    assert_eq!(got, want);
    if late_recorded {
        assert_eq!(stats.events_lost, 0);
    }
}

#[test]
fn log_records_become_log_instants() {
    ringtrace::log::Logger::new()
        .max_level(LevelFilter::Debug)
        .chain(KeptRef, LevelFilter::Warn)
        .init()
        .unwrap();
    assert_eq!(log::max_level(), LevelFilter::Debug);
    let dir = scratch("log-bridge");

    // No session: nothing is recorded, and ringtrace formats nothing.
    log::debug!("before any session {}", Counted(1));
    assert_eq!(FORMATTED.load(Ordering::SeqCst), 0);

    session(&dir.join("log.pftrace"), 1, perfetto_logs);
    session(&dir.join("log.json"), 2, json_logs);

    // The chained logger got its records (Warn and up) from both rounds,
    // not the others.
    let kept = KEPT.0.lock().unwrap().clone();
    assert_eq!(
        kept,
        [
            "round 1 of 2",
            "refused by 10.0.0.1",
            "round 2 of 2",
            "refused by 10.0.0.1"
        ]
    );
}
