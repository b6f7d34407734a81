//! CPU stack samples (`Builder::cpu_sampling`), decoded with the official
//! Perfetto schema (`tests/support/perfetto_samples.py` for the samples,
//! `perfetto_model.py` for the slices) or a standard JSON parser. Each case
//! runs a child program (`ringtrace-test-scenarios cpu_*`): sampling is
//! process-wide.

mod common;

use common::{perfetto_model, samples_model, scratch};
use serde_json::Value;
use std::path::Path;
use std::process::Command;

/// Runs `scenario` (with `extra` as its fourth argument), checks it
/// succeeded, returns the trace's path, its expectation and stderr.
fn run(dir: &str, file: &str, scenario: &str, extra: &str) -> (std::path::PathBuf, Value, String) {
    run_env(dir, file, scenario, extra, &[])
}

fn run_env(
    dir: &str,
    file: &str,
    scenario: &str,
    extra: &str,
    envs: &[(&str, &str)],
) -> (std::path::PathBuf, Value, String) {
    let bin = Path::new(env!("CARGO_BIN_EXE_ringtrace-test-scenarios"));
    run_bin(bin, dir, file, scenario, extra, envs)
}

/// As `run_env`, with the scenarios program at `bin`.
fn run_bin(
    bin: &Path,
    dir: &str,
    file: &str,
    scenario: &str,
    extra: &str,
    envs: &[(&str, &str)],
) -> (std::path::PathBuf, Value, String) {
    let trace = scratch(dir).join(file);
    let expect = trace.with_extension("expect.json");
    let out = Command::new(bin)
        .args([
            scenario,
            trace.to_str().unwrap(),
            expect.to_str().unwrap(),
            extra,
        ])
        .envs(envs.iter().map(|(k, v)| {
            // `{trace}` stands for the trace's path.
            (*k, v.replace("{trace}", trace.to_str().unwrap()))
        }))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{scenario} failed: {stderr}");
    let e = serde_json::from_slice(&std::fs::read(&expect).unwrap()).unwrap();
    (trace, e, stderr)
}

fn names(sample: &Value) -> Vec<String> {
    sample["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap_or("").to_string())
        .collect()
}

/// Whether `stack` (outermost first) goes from the thread's start through
/// `hot_thread_body` (the scope's function) into `hot_checksum` (the
/// uninstrumented hot path), in that order.
fn names_the_hot_path(stack: &[String]) -> bool {
    let at = |s: &str| stack.iter().position(|n| n.contains(s));
    match (
        at("thread_start"),
        at("cpu::hot_thread_body"),
        at("cpu::hot_checksum"),
    ) {
        (Some(a), Some(b), Some(c)) => a < b && b < c,
        _ => false,
    }
}

/// The `checksum` slices of thread `tid`: (start, end) in trace time.
fn checksum_slices(model: &Value, tid: i64) -> Vec<(u64, u64)> {
    let mut v: Vec<(u64, u64)> = common::thread_slices(model, tid)
        .into_iter()
        .filter(|s| s["name"] == "checksum")
        .map(|s| {
            let ts = s["ts"].as_u64().unwrap();
            (ts, ts + s["dur"].as_u64().unwrap())
        })
        .collect();
    v.sort_unstable();
    v
}

fn inside(slices: &[(u64, u64)], ts: u64) -> bool {
    let i = slices.partition_point(|s| s.0 <= ts);
    i > 0 && ts <= slices[i - 1].1
}

/// The hot thread's samples inside its scope name the hot path (≥ 95%),
/// every sample whose stack holds the hot path falls inside a `checksum`
/// slice of its own thread, and every sample is in the stats. Every frame
/// found a name had room for it (`cpu_frames_unnamed` is 0), unless
/// `tight`: in a budget spent to its last KiB a frame may be left
/// unnamed, counted, and the names are checked only if none was.
fn check_hot_trace(trace: &Path, expect: &Value, min_samples: usize, tight: bool) {
    let unnamed = expect["stats"]["cpu_frames_unnamed"].as_u64().unwrap();
    assert!(tight || unnamed == 0, "{expect}");
    let samples = samples_model(trace);
    let model = perfetto_model(trace);
    let tid = expect["tid"].as_i64().unwrap();
    let all = samples["samples"].as_array().unwrap();
    assert_eq!(
        all.len() as u64,
        expect["stats"]["cpu_samples"].as_u64().unwrap(),
        "every sample counted is in the file"
    );
    let pid = all[0]["pid"].as_i64().unwrap();
    assert!(all.iter().all(|s| s["pid"].as_i64() == Some(pid)));
    let slices = checksum_slices(&model, tid);
    assert!(!slices.is_empty(), "the hot thread's slices");
    let mine: Vec<&Value> = all
        .iter()
        .filter(|s| s["tid"].as_i64() == Some(tid))
        .collect();
    assert!(
        mine.len() >= min_samples,
        "{} samples of the hot thread",
        mine.len()
    );
    let in_scope: Vec<&&Value> = mine
        .iter()
        .filter(|s| inside(&slices, s["ts"].as_u64().unwrap()))
        .collect();
    let good = in_scope
        .iter()
        .filter(|s| names_the_hot_path(&names(s)))
        .count();
    assert!(
        unnamed > 0 || good * 100 >= in_scope.len() * 95,
        "{good} of {} samples inside the scope name the hot path; first: {:?}",
        in_scope.len(),
        in_scope.first().map(|s| names(s))
    );
    // The hot path runs only inside the scope: a sample naming it lies
    // inside one of the thread's `checksum` slices (same clock, same tid).
    for s in &mine {
        if names(s).iter().any(|n| n.contains("cpu::hot_checksum")) {
            assert!(
                inside(&slices, s["ts"].as_u64().unwrap()),
                "a sample in the hot path at {} is outside every checksum slice",
                s["ts"]
            );
        }
    }
    // Mappings carry build ids and paths.
    let maps = samples["mappings"].as_object().unwrap();
    assert!(maps
        .values()
        .flat_map(|m| m.as_object().unwrap().values())
        .any(|m| {
            m["path"]
                .as_str()
                .unwrap()
                .contains("ringtrace-test-scenarios")
                && m["build_id"].as_str().unwrap().len() >= 16
        }));
}

#[test]
fn copied_stacks_name_the_uninstrumented_hot_path_inside_its_slice() {
    let (trace, expect, _) = run("cpu-copied", "t.pftrace", "cpu_hot", "copied");
    check_hot_trace(&trace, &expect, 50, false);
}

#[test]
fn a_thread_the_budget_has_no_whole_ring_for_is_sampled_with_a_smaller_one() {
    // 1 MiB of budget: the threads sampled first take the room of a whole
    // ring of copies (516 KiB); the hot thread, started later, gets a
    // smaller ring and its samples all the same.
    let (trace, expect, _) = run("cpu-tight", "t.pftrace", "cpu_hot", "copied-tight");
    assert_eq!(expect["stats"]["cpu_threads_unsampled"], 0, "{expect}");
    check_hot_trace(&trace, &expect, 50, true);
}

#[test]
fn auto_takes_copied_stacks_for_a_program_without_frame_pointers() {
    // The test programs are built without frame pointers (Rust's default):
    // `Auto` must still give whole stacks.
    let (trace, expect, _) = run("cpu-auto", "t.pftrace", "cpu_hot", "auto");
    check_hot_trace(&trace, &expect, 50, false);
}

#[test]
fn frame_pointer_chains_resolve_and_their_leaf_is_the_hot_code() {
    // Without frame pointers in the program, the kernel's chains hold the
    // leaf (and what a stale frame pointer gives): every id still resolves,
    // and the leaf is the program's hot code.
    let (trace, expect, _) = run("cpu-fp", "t.pftrace", "cpu_hot", "fp");
    let samples = samples_model(&trace);
    let tid = expect["tid"].as_i64().unwrap();
    let mine: Vec<&Value> = samples["samples"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["tid"].as_i64() == Some(tid))
        .collect();
    assert!(mine.len() >= 50, "{} samples", mine.len());
    let leaf_in_program = mine
        .iter()
        .filter(|s| {
            s["frames"].as_array().unwrap().last().is_some_and(|f| {
                f["mapping"]
                    .as_str()
                    .unwrap()
                    .contains("ringtrace-test-scenarios")
            })
        })
        .count();
    assert!(
        leaf_in_program * 100 >= mine.len() * 95,
        "{leaf_in_program} of {}",
        mine.len()
    );
    assert_eq!(expect["stats"]["cpu_stacks_truncated"], 0);
}

/// The scenarios program built with `-C force-frame-pointers=yes` (in a
/// target directory of its own, offline: the workspace's dependencies are
/// already fetched): its kernel call chains alone name the hot function and
/// its callers down to the thread's start.
#[test]
fn a_frame_pointer_build_gets_whole_stacks_from_the_kernels_call_chains() {
    let target = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("the target directory")
        .join("frame-pointers");
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    let out = Command::new(env!("CARGO"))
        .args(["build", "--offline", "--quiet", "--bin"])
        .arg("ringtrace-test-scenarios")
        .arg("--manifest-path")
        .arg(&manifest)
        .env("CARGO_TARGET_DIR", &target)
        .env("RUSTFLAGS", "-C force-frame-pointers=yes")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .output()
        .expect("run cargo");
    assert!(
        out.status.success(),
        "building the scenarios with frame pointers failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bin = target.join("debug/ringtrace-test-scenarios");
    let (trace, expect, _) = run_bin(&bin, "cpu-fp-build", "t.pftrace", "cpu_hot", "fp", &[]);
    // The same bar as copied stacks: >= 95% of the in-scope samples go from
    // `thread_start` through the scope's function into the hot function.
    check_hot_trace(&trace, &expect, 50, false);
    assert_eq!(expect["stats"]["cpu_stacks_truncated"], 0);
}

#[test]
fn refused_perf_event_open_falls_back_to_cpu_time_timers() {
    // The child refuses itself perf_event_open with a seccomp filter.
    let (trace, expect, stderr) = run("cpu-refused", "t.pftrace", "cpu_refused", "");
    assert!(
        stderr.contains("perf_event_open refused") && stderr.contains("timers"),
        "{stderr}"
    );
    assert_eq!(
        stderr.matches("ringtrace:").count(),
        1,
        "one message: {stderr}"
    );
    // The tick bounds the rate (250 Hz here): 400 ms of CPU gives ~100.
    check_hot_trace(&trace, &expect, 20, false);
}

#[test]
fn threads_coming_and_going_are_sampled_and_leak_no_fd() {
    let (trace, expect, _) = run("cpu-threads", "t.pftrace", "cpu_threads", "");
    assert_eq!(
        expect["fds_before"], expect["fds_after"],
        "open fds before the session and after it"
    );
    // The sampler's tables, rings and buffers are all given back (measured
    // here: 3.7 KB more live heap after the session than before).
    let grown = expect["heap_after"].as_i64().unwrap() - expect["heap_before"].as_i64().unwrap();
    assert!(
        grown < 16 << 10,
        "{grown} bytes of heap kept after the session"
    );
    let samples = samples_model(&trace);
    let all = samples["samples"].as_array().unwrap();
    let stats = &expect["stats"];
    assert_eq!(all.len() as u64, stats["cpu_samples"].as_u64().unwrap());
    assert_eq!(samples["lost"], stats["cpu_samples_lost"]);
    let tids: std::collections::HashSet<i64> =
        all.iter().map(|s| s["tid"].as_i64().unwrap()).collect();
    let wanted = expect["tids"].as_array().unwrap();
    let sampled = wanted
        .iter()
        .filter(|t| tids.contains(&t.as_i64().unwrap()))
        .count();
    // Each ran 30 ms of CPU; one that lived less than a look at the thread
    // list (100 ms) may be missed.
    assert!(
        sampled * 10 >= wanted.len() * 9,
        "{sampled} of {} threads",
        wanted.len()
    );
}

#[test]
fn json_carries_the_samples_in_the_object_form() {
    let (trace, expect, _) = run("cpu-json", "t.json", "cpu_hot", "copied");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    let frames = doc["stackFrames"].as_object().unwrap();
    let samples = doc["samples"].as_array().unwrap();
    assert!(!samples.is_empty());
    let tid = expect["tid"].as_i64().unwrap();
    let mut good = 0;
    let mut mine = 0;
    for s in samples {
        // Every sf and every parent resolves.
        let mut chain = Vec::new();
        let mut id = s["sf"].to_string();
        loop {
            let f = frames.get(&id).unwrap_or_else(|| panic!("frame {id}"));
            chain.push(f["name"].as_str().unwrap().to_string());
            match f.get("parent") {
                Some(p) => id = p.as_str().unwrap().to_string(),
                None => break,
            }
        }
        chain.reverse();
        if s["tid"].as_i64() == Some(tid) {
            mine += 1;
            good += names_the_hot_path(&chain) as usize;
        }
    }
    assert!(mine >= 50 && good * 100 >= mine * 90, "{good} of {mine}");
}

/// The hot thread's samples name the hot path (a whole trace: the scope
/// is not checked here, only that sampling was on and stacks resolve).
fn hot_samples_named(trace: &Path, tid: i64) -> (usize, usize) {
    let samples = samples_model(trace);
    let mine: Vec<&Value> = samples["samples"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["tid"].as_i64() == Some(tid))
        .collect();
    let good = mine
        .iter()
        .filter(|s| names_the_hot_path(&names(s)))
        .count();
    (good, mine.len())
}

#[test]
fn init_from_env_reads_ringtrace_cpu_sampling() {
    let (trace, expect, _) = run_env(
        "cpu-env",
        "t.pftrace",
        "cpu_from_env",
        "",
        &[
            ("RINGTRACE_OUTPUT", "{trace}"),
            ("RINGTRACE_CPU_SAMPLING", "1000"),
        ],
    );
    let (good, all) = hot_samples_named(&trace, expect["tid"].as_i64().unwrap());
    assert!(all >= 30 && good * 100 >= all * 90, "{good} of {all}");
}

#[test]
fn the_tracing_layer_builder_turns_sampling_on() {
    let (trace, expect, _) = run("cpu-layer", "t.pftrace", "cpu_layer", "");
    let (good, all) = hot_samples_named(&trace, expect["tid"].as_i64().unwrap());
    assert!(all >= 30 && good * 100 >= all * 90, "{good} of {all}");
}

#[test]
fn sampling_off_writes_no_sample() {
    let trace = scratch("cpu-off").join("t.pftrace");
    let out = Command::new(env!("CARGO_BIN_EXE_ringtrace-test-scenarios"))
        .args(["workload", trace.to_str().unwrap(), "/dev/null"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(!String::from_utf8_lossy(&out.stderr).contains("CPU sampling"));
    let samples = samples_model(&trace);
    assert!(samples["samples"].as_array().unwrap().is_empty());
    assert_eq!(samples["lost"], 0);
}

#[test]
fn the_locked_memory_limit_makes_rings_smaller_said_once() {
    // The child drops the capabilities that lift the limit and sets
    // RLIMIT_MEMLOCK to 64 KiB: the rings do not all fit.
    let (trace, expect, stderr) = run("cpu-mlock", "t.pftrace", "cpu_mlock", "");
    assert_eq!(
        stderr.matches("locked-memory limit").count(),
        1,
        "said once: {stderr}"
    );
    assert_eq!(expect["fds_before"], expect["fds_after"]);
    let stats = &expect["stats"];
    let threads = stats["cpu_threads_sampled"].as_u64().unwrap()
        + stats["cpu_threads_unsampled"].as_u64().unwrap();
    // Of the 200 threads each ran 30 ms of CPU: one that lived less than a
    // look at the thread list (100 ms) may be missed, as in
    // `threads_coming_and_going_are_sampled_and_leak_no_fd` (a loaded
    // machine found 198).
    assert!(threads >= 180, "{stats}");
    let samples = samples_model(&trace);
    let n = samples["samples"].as_array().unwrap().len() as u64;
    assert!(n > 0);
    assert_eq!(n, stats["cpu_samples"].as_u64().unwrap());
    assert_eq!(samples["lost"], stats["cpu_samples_lost"]);
}

/// A flight recorder's file (written at stop, or a `dump_to` window) holds
/// the samples of the window its records cover: every id resolves, no
/// sample lies before the file's oldest event, the late hot thread's
/// samples are there and name the hot path, and the early thread's (whose
/// records the recorder forgot) were aged out, not written; every interned
/// entry is used.
fn check_flight_file(trace: &Path, expect: &Value, min_samples: usize) {
    let samples = samples_model(trace);
    assert!(
        samples["unused"].as_array().unwrap().is_empty(),
        "the file interns entries no sample uses: {:#}",
        samples["unused"]
    );
    let model = perfetto_model(trace);
    let first = model["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["ts"].as_u64())
        .min()
        .expect("the file holds events");
    let all = samples["samples"].as_array().unwrap();
    for s in all {
        let ts = s["ts"].as_u64().unwrap();
        assert!(
            ts >= first,
            "a sample at {ts} lies before the file's oldest event at {first}"
        );
    }
    let early = expect["early"].as_i64().unwrap();
    let early_track = model["tracks"]
        .as_object()
        .unwrap()
        .values()
        .any(|t| t["kind"] == "thread" && t["tid"].as_i64() == Some(early));
    assert!(
        !early_track || checksum_slices(&model, early).is_empty(),
        "the recorder forgot the early thread's slices"
    );
    assert!(!all.iter().any(|s| s["tid"].as_i64() == Some(early)));
    let late = expect["late"].as_i64().unwrap();
    // A slice open at a dump window's end has no duration: open till then.
    let mut slices: Vec<(u64, u64)> = common::thread_slices(&model, late)
        .into_iter()
        .filter(|s| s["name"] == "checksum")
        .map(|s| {
            let ts = s["ts"].as_u64().unwrap();
            (ts, s["dur"].as_u64().map_or(u64::MAX, |d| ts + d))
        })
        .collect();
    slices.sort_unstable();
    assert!(!slices.is_empty(), "the late thread's slices");
    let mine: Vec<&Value> = all
        .iter()
        .filter(|s| s["tid"].as_i64() == Some(late))
        .collect();
    let in_scope: Vec<&&Value> = mine
        .iter()
        .filter(|s| inside(&slices, s["ts"].as_u64().unwrap()))
        .collect();
    let good = in_scope
        .iter()
        .filter(|s| names_the_hot_path(&names(s)))
        .count();
    assert!(
        mine.len() >= min_samples && good * 100 >= in_scope.len() * 90,
        "{good} of {} samples of the late thread inside its scope name the hot path ({} in all)",
        in_scope.len(),
        mine.len()
    );
    for s in &mine {
        if names(s).iter().any(|n| n.contains("cpu::hot_checksum")) {
            assert!(inside(&slices, s["ts"].as_u64().unwrap()));
        }
    }
}

#[test]
fn a_flight_recorder_writes_the_samples_of_the_window_it_keeps() {
    let (trace, expect, stderr) = run("cpu-flight", "t.pftrace", "cpu_flight", "stop");
    assert!(!stderr.contains("CPU sampling off"), "{stderr}");
    check_flight_file(&trace, &expect, 30);
    let stats = &expect["stats"];
    assert!(
        stats["cpu_samples_aged_out"].as_u64().unwrap() > 0,
        "the early thread's samples aged out: {stats}"
    );
    assert!(
        stats["events_lost"].as_u64().unwrap() > 0,
        "records forgotten"
    );
}

#[test]
fn a_flight_recorders_dump_window_holds_its_samples() {
    let (_, expect, _) = run("cpu-flight-dump", "t.pftrace", "cpu_flight", "dump");
    let dump = Path::new(expect["dump"]["path"].as_str().unwrap());
    // A window of 1 s of wall time over the late thread's 300 ms of CPU.
    check_flight_file(dump, &expect, 10);
}

/// A dump file (`dump_to`) interns only what its samples use: every
/// mapping, name, frame and call stack it holds is referred to.
#[test]
fn a_dump_interns_only_what_its_samples_use() {
    let (_, expect, _) = run(
        "cpu-flight-dump-interned",
        "t.pftrace",
        "cpu_flight",
        "dump",
    );
    let dump = Path::new(expect["dump"]["path"].as_str().unwrap());
    let m = samples_model(dump);
    assert!(
        m["unused"].as_array().unwrap().is_empty(),
        "unused entries: {:#}",
        m["unused"]
    );
    let interned = &m["interned"];
    let n = |k: &str| interned[k].as_u64().unwrap();
    let stacks: std::collections::HashSet<Vec<String>> =
        m["samples"].as_array().unwrap().iter().map(names).collect();
    assert!(n("stacks") > 0 && n("frames") > 0 && n("mappings") > 0);
    // One call stack per distinct stack at most (two may name the same
    // functions at different return addresses).
    assert!(n("stacks") >= stacks.len() as u64, "{interned}");
}

/// A JSON dump's `stackFrames` are all used: each is a sample's frame or
/// the parent of one; every `sf` and parent resolves.
#[test]
fn a_json_dump_holds_only_the_stack_frames_its_samples_use() {
    let (_, expect, _) = run(
        "cpu-flight-dump-json",
        "t.pftrace",
        "cpu_flight",
        "dump-json",
    );
    let dump = Path::new(expect["dump"]["path"].as_str().unwrap());
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(dump).unwrap()).unwrap();
    let frames = doc["stackFrames"].as_object().unwrap();
    let samples = doc["samples"].as_array().unwrap();
    let late = expect["late"].as_i64().unwrap();
    assert!(
        samples
            .iter()
            .filter(|s| s["tid"].as_i64() == Some(late))
            .count()
            >= 10,
        "the late thread's samples are in the dump"
    );
    let mut used = std::collections::HashSet::new();
    for s in samples {
        let mut id = s["sf"].to_string();
        loop {
            let f = frames.get(&id).unwrap_or_else(|| panic!("frame {id}"));
            used.insert(id.clone());
            match f.get("parent") {
                Some(p) => id = p.as_str().unwrap().to_string(),
                None => break,
            }
        }
    }
    assert_eq!(used.len(), frames.len(), "stack frames no sample uses");
}

/// The window of the `slow_request` slice of `tid` in a capture, in ns:
/// its start less the capture's lead (`before_ns`), and its end.
fn slow_window(slices: &[(u64, u64)], before_ns: u64) -> (u64, u64) {
    assert_eq!(slices.len(), 1, "one slow request: {slices:?}");
    (slices[0].0 - before_ns, slices[0].1)
}

/// The checks common to both formats: the capture holds samples of the
/// slow thread inside its window whose stacks name the hot function (at
/// least 95%, and reaching within 50 ms of the scope's end), none outside
/// the window, none of the threads that ran before and after it; and all
/// the slow thread's samples in `scope` (the part of its scope the window
/// surely covers) that the session's own file (`main`) holds.
fn check_capture_samples(
    expect: &Value,
    window: (u64, u64),
    scope: (u64, u64),
    samples: &[(i64, u64, Vec<String>)],
    main: &Path,
) {
    let (slow, before, after) = (
        expect["slow"].as_i64().unwrap(),
        expect["before"].as_i64().unwrap(),
        expect["after"].as_i64().unwrap(),
    );
    for (tid, ts, _) in samples {
        assert!(
            (window.0..=window.1).contains(ts),
            "a sample of {tid} at {ts} outside the window {window:?}"
        );
        assert!(*tid != before && *tid != after, "a sample of thread {tid}");
    }
    let mine: Vec<&(i64, u64, Vec<String>)> = samples.iter().filter(|s| s.0 == slow).collect();
    let hot = |s: &Vec<String>| {
        let at = |f: &str| s.iter().position(|n| n.contains(f));
        matches!((at("cpu::slow_request"), at("cpu::hot_checksum")), (Some(a), Some(b)) if a < b)
    };
    let good = mine.iter().filter(|s| hot(&s.2)).count();
    assert!(
        mine.len() >= 20 && good * 100 >= mine.len() * 95,
        "{good} of {} samples of the slow thread name the hot function; first: {:?}",
        mine.len(),
        mine.first()
    );
    let last = mine.iter().map(|s| s.1).max().unwrap();
    assert!(
        last + 50_000_000 >= scope.1,
        "the last sample at {last}, the scope ends at {}: the window's tail is missing",
        scope.1
    );
    let in_scope = |tid: i64, ts: u64| tid == slow && (scope.0..=scope.1).contains(&ts);
    let in_main = samples_model(main)["samples"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| in_scope(s["tid"].as_i64().unwrap(), s["ts"].as_u64().unwrap()))
        .count();
    let in_capture = samples.iter().filter(|s| in_scope(s.0, s.1)).count();
    assert_eq!(
        in_capture, in_main,
        "the slow thread's samples inside its scope: {in_capture} in the capture, {in_main} in the session's file"
    );
    let stats = &expect["stats"];
    assert_eq!(stats["captures_fired"], 1, "{stats}");
    assert!(stats["cpu_samples"].as_u64().unwrap() > mine.len() as u64);
}

/// A Perfetto capture of `cpu_capture` in `mode`: its samples resolve,
/// nothing is unused, and `check_capture_samples` holds; `trigger`: the
/// window ends at the `trigger` call, just after the scope's end.
fn check_perfetto_capture(dir: &str, mode: &str) {
    let (main, expect, stderr) = run(dir, "t.pftrace", "cpu_capture", mode);
    assert!(!stderr.contains("CPU sampling off"), "{stderr}");
    let file = Path::new(expect["capture"].as_str().unwrap());
    let m = samples_model(file);
    assert!(
        m["unused"].as_array().unwrap().is_empty(),
        "unused entries: {:#}",
        m["unused"]
    );
    let slow = expect["slow"].as_i64().unwrap();
    let scope_in = |model: &Value| -> Vec<(u64, u64)> {
        common::thread_slices(model, slow)
            .into_iter()
            .filter(|s| s["name"] == "slow_request")
            .map(|s| {
                let ts = s["ts"].as_u64().unwrap();
                (ts, ts + s["dur"].as_u64().unwrap())
            })
            .collect()
    };
    let before_ns = expect["window_before_ns"].as_u64().unwrap();
    let (window, scope) = if mode == "trigger" {
        // The trigger's time is in no file: it follows the scope's end
        // (the thread only returns; 20 ms allows for a preemption). On a
        // loaded machine the window may start after the scope (in the
        // session's own file).
        const SLACK: u64 = 20_000_000;
        let scope = scope_in(&perfetto_model(&main))[0];
        let window = (scope.1 - before_ns, scope.1 + SLACK);
        (window, (scope.0.max(scope.1 + SLACK - before_ns), scope.1))
    } else {
        let scope = scope_in(&perfetto_model(file));
        (slow_window(&scope, before_ns), scope[0])
    };
    let samples: Vec<(i64, u64, Vec<String>)> = m["samples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["tid"].as_i64().unwrap(),
                s["ts"].as_u64().unwrap(),
                names(s),
            )
        })
        .collect();
    check_capture_samples(&expect, window, scope, &samples, &main);
    // Mappings with build ids and paths: offline symbolization works too.
    assert!(m["mappings"]
        .as_object()
        .unwrap()
        .values()
        .flat_map(|s| s.as_object().unwrap().values())
        .any(|m| m["build_id"].as_str().unwrap().len() >= 16));
}

#[test]
fn a_slow_scopes_capture_holds_the_samples_of_its_window() {
    check_perfetto_capture("cpu-capture", "pftrace");
}

/// `trigger` as the hot work ends: the capture still gets the window's
/// last samples (it waits for the sampler to hand them over).
#[test]
fn a_triggered_capture_holds_the_samples_up_to_the_trigger() {
    check_perfetto_capture("cpu-capture-trigger", "trigger");
}

/// `capture_slow`: a slow `tracing` span's capture holds the samples of
/// its window too.
#[test]
fn a_slow_spans_capture_holds_the_samples_of_its_window() {
    check_perfetto_capture("cpu-capture-span", "tracing");
}

#[test]
fn a_slow_scopes_json_capture_holds_the_samples_of_its_window() {
    let (main, expect, _) = run("cpu-capture-json", "t.pftrace", "cpu_capture", "json");
    let file = Path::new(expect["capture"].as_str().unwrap());
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    let frames = doc["stackFrames"].as_object().unwrap();
    let slow = expect["slow"].as_i64().unwrap();
    let us = |v: &Value| (v.as_f64().unwrap() * 1000.0).round() as u64;
    // The slow scope: one `X`, or a `B` and its `E`, on the slow thread.
    let events = doc["traceEvents"].as_array().unwrap();
    let mine = |e: &&Value| e["tid"].as_i64() == Some(slow) && e["name"] == "slow_request";
    let scope: Vec<(u64, u64)> = match events.iter().find(mine) {
        Some(e) if e["ph"] == "X" => vec![(us(&e["ts"]), us(&e["ts"]) + us(&e["dur"]))],
        Some(e) => {
            let end = events
                .iter()
                .find(|x| {
                    x["tid"].as_i64() == Some(slow)
                        && x["ph"] == "E"
                        && us(&x["ts"]) >= us(&e["ts"])
                })
                .expect("the scope's end");
            vec![(us(&e["ts"]), us(&end["ts"]))]
        }
        None => panic!("no slow_request slice"),
    };
    let (from, to) = slow_window(&scope, expect["window_before_ns"].as_u64().unwrap());
    // Microseconds with three decimals: a nanosecond of rounding each side.
    let window = (from - 1, to + 1);
    let mut used = std::collections::HashSet::new();
    let samples: Vec<(i64, u64, Vec<String>)> = doc["samples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let mut chain = Vec::new();
            let mut id = s["sf"].to_string();
            loop {
                let f = frames.get(&id).unwrap_or_else(|| panic!("frame {id}"));
                used.insert(id.clone());
                chain.push(f["name"].as_str().unwrap().to_string());
                match f.get("parent") {
                    Some(p) => id = p.as_str().unwrap().to_string(),
                    None => break,
                }
            }
            chain.reverse();
            (s["tid"].as_i64().unwrap(), us(&s["ts"]), chain)
        })
        .collect();
    assert_eq!(used.len(), frames.len(), "every stack frame is used");
    check_capture_samples(&expect, window, scope[0], &samples, &main);
}

/// A malformed ELF file mapped executable by the program (numbers that
/// overflow: a segment's end, sections' ends, a symbol's end, a section
/// past the file's end), with samples landing in its code: the sampler
/// reads it, symbolizes and unwinds through it in a debug build without a
/// panic; the session stops Ok with its samples, the sane files' symbols
/// still resolve.
#[test]
fn a_malformed_elf_mapped_by_the_program_makes_no_panic() {
    let (trace, expect, stderr) = run("cpu-bad-elf", "t.pftrace", "cpu_bad_elf", "");
    assert!(
        !stderr.contains("panicked") && !stderr.contains("sampler failed"),
        "the sampler panicked: {stderr}"
    );
    let samples = samples_model(&trace);
    let all = samples["samples"].as_array().unwrap();
    assert!(
        expect["stats"]["cpu_samples"].as_u64().unwrap() > 0,
        "{expect}"
    );
    assert_eq!(
        all.len() as u64,
        expect["stats"]["cpu_samples"].as_u64().unwrap(),
        "every sample counted is in the file"
    );
    let tid = expect["tid"].as_i64().unwrap();
    let elf = expect["elf"].as_str().unwrap();
    let mine: Vec<&Value> = all
        .iter()
        .filter(|s| s["tid"].as_i64() == Some(tid))
        .collect();
    // Samples in the malformed file's code: their leaf is in its mapping
    // (named by nothing: its only symbol there is malformed).
    let in_elf = mine
        .iter()
        .filter(|s| {
            let frames = s["frames"].as_array().unwrap();
            frames
                .last()
                .is_some_and(|f| f["mapping"].as_str() == Some(elf))
        })
        .count();
    assert!(
        in_elf >= 30,
        "{in_elf} samples in the malformed file's code"
    );
    // The sane files are still read: the hot path is named.
    let named = mine
        .iter()
        .filter(|s| names(s).iter().any(|n| n.contains("cpu::hot_checksum")))
        .count();
    assert!(named >= 30, "{named} samples name the hot path");
}

/// The `(start, end)` of the slices named `name` of thread `tid`.
fn named_slices(model: &Value, tid: i64, name: &str) -> Vec<(u64, u64)> {
    let mut v: Vec<(u64, u64)> = common::thread_slices(model, tid)
        .into_iter()
        .filter(|s| s["name"] == name)
        .map(|s| {
            let ts = s["ts"].as_u64().unwrap();
            (ts, ts + s["dur"].as_u64().unwrap())
        })
        .collect();
    v.sort_unstable();
    v
}

/// Third-party code built as in a release build, without frame pointers
/// (`cpu_deflate`: flate2 on miniz_oxide into a 96 KiB buffer on the
/// stack, flate2 making its compressor in a 64 KiB frame, and serde_json):
/// at least 95% of the samples inside each scope go from the thread's
/// start through the scenario's functions; in `compress`, most of them on
/// into miniz_oxide under the big frame; none is counted cut short but a
/// few.
fn check_deflate_trace(stacks: &str) {
    let (trace, expect, stderr) = run(
        &format!("cpu-deflate-{stacks}"),
        "t.pftrace",
        "cpu_deflate",
        stacks,
    );
    assert!(!stderr.contains("CPU sampling off"), "{stderr}");
    let samples = samples_model(&trace);
    let model = perfetto_model(&trace);
    let tid = expect["tid"].as_i64().unwrap();
    let all = samples["samples"].as_array().unwrap();
    assert_eq!(
        all.len() as u64,
        expect["stats"]["cpu_samples"].as_u64().unwrap()
    );
    let mine: Vec<&Value> = all
        .iter()
        .filter(|s| s["tid"].as_i64() == Some(tid))
        .collect();
    assert!(mine.len() >= 100, "{} samples of the thread", mine.len());
    for (scope, callee, lib) in [
        ("compress", "cpu::compress", "miniz_oxide"),
        ("parse", "cpu::parse", "serde_json"),
    ] {
        let slices = named_slices(&model, tid, scope);
        assert!(!slices.is_empty(), "the thread's {scope} slices");
        let in_scope: Vec<Vec<String>> = mine
            .iter()
            .filter(|s| inside(&slices, s["ts"].as_u64().unwrap()))
            .map(|s| names(s))
            .collect();
        // From the thread's start through the body into the library's
        // caller; or, at the slice's edges (its clock read before the
        // record is written), into ringtrace's own recording of a scope,
        // which is as whole a stack.
        let whole = |s: &Vec<String>| {
            let at = |f: &str| s.iter().position(|n| n.contains(f));
            let inner = at(callee).or_else(|| at("ringtrace::record::scope::"));
            matches!(
                (at("thread_start"), at("cpu::deflate_thread_body"), inner),
                (Some(a), Some(b), Some(c)) if a < b && b < c
            )
        };
        let good = in_scope.iter().filter(|s| whole(s)).count();
        assert!(
            in_scope.len() >= 20 && good * 100 >= in_scope.len() * 95,
            "{good} of {} samples inside `{scope}` reach the thread's start; first cut: {:?}",
            in_scope.len(),
            in_scope.iter().find(|s| !whole(s))
        );
        let in_lib = in_scope
            .iter()
            .filter(|s| whole(s) && s.iter().any(|n| n.contains(lib)))
            .count();
        assert!(
            in_lib * 2 >= in_scope.len(),
            "{in_lib} of {} samples inside `{scope}` reach the thread's start from {lib}",
            in_scope.len()
        );
    }
    let truncated = expect["stats"]["cpu_stacks_truncated"].as_u64().unwrap();
    assert!(
        truncated * 100 <= mine.len() as u64 * 5,
        "{truncated} stacks cut short of {} samples",
        mine.len()
    );
}

#[test]
fn third_party_code_under_a_64_kib_frame_unwinds_to_the_threads_start() {
    check_deflate_trace("copied");
}

#[test]
fn auto_unwinds_third_party_code_under_a_64_kib_frame_to_the_threads_start() {
    check_deflate_trace("auto");
}

/// Runs `cpu_replaced` in `mode` (killed after 120 s: a sampler stuck on
/// a file at a mapped path would keep `stop` waiting) and checks that the
/// samples in each copy of zlib name its `crc32`.
fn check_replaced(mode: &str) {
    let dir = scratch(&format!("cpu-replaced-{mode}"));
    let trace = dir.join("t.pftrace");
    let expect = trace.with_extension("expect.json");
    let mut child = Command::new(env!("CARGO_BIN_EXE_ringtrace-test-scenarios"))
        .args([
            "cpu_replaced",
            trace.to_str().unwrap(),
            expect.to_str().unwrap(),
            mode,
        ])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let since = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if since.elapsed() > std::time::Duration::from_secs(120) {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("cpu_replaced {mode} hung (the session's stop never returned)");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(status.success(), "cpu_replaced {mode} failed: {stderr}");
    let expect: Value = serde_json::from_slice(&std::fs::read(&expect).unwrap()).unwrap();
    let samples = samples_model(&trace);
    perfetto_model(&trace);
    let tid = expect["tid"].as_i64().unwrap();
    for path in expect["paths"].as_array().unwrap() {
        let path = path.as_str().unwrap();
        let in_copy: Vec<Vec<String>> = samples["samples"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["tid"].as_i64() == Some(tid))
            .filter(|s| {
                let frames = s["frames"].as_array().unwrap();
                frames
                    .last()
                    .is_some_and(|f| f["mapping"].as_str() == Some(path))
            })
            .map(names)
            .collect();
        let named = in_copy
            .iter()
            .filter(|s| s.last().is_some_and(|n| n.starts_with("crc32")))
            .count();
        assert!(
            in_copy.len() >= 20 && named * 100 >= in_copy.len() * 90,
            "{named} of {} samples in {path} name its crc32; first: {:?}",
            in_copy.len(),
            in_copy.first()
        );
    }
}

/// A library replaced on disk after it was mapped (`(deleted)` in the
/// maps) keeps the names of the file mapped, not the new one's; a path
/// with a space is read whole.
#[test]
fn a_library_replaced_on_disk_keeps_its_names() {
    check_replaced("replaced");
}

/// A FIFO put at a mapped library's path: the sampler does not wait on
/// it (the session stops), and the library's names are those mapped.
#[test]
fn a_fifo_at_a_mapped_path_does_not_hang_the_stop() {
    check_replaced("fifo");
}

/// A rate above `kernel.perf_event_max_sample_rate`: sampled with perf at
/// the limit (not the timer fallback at the tick's rate), said once on
/// stderr, the rate in the stats.
#[test]
fn a_rate_above_the_kernels_limit_samples_at_the_limit_said_once() {
    let (trace, expect, stderr) = run("cpu-over-max", "t.pftrace", "cpu_over_max_rate", "");
    let max = expect["max"].as_u64().unwrap();
    assert_eq!(
        stderr.matches("ringtrace:").count(),
        1,
        "one message: {stderr}"
    );
    assert!(
        stderr.contains("perf_event_max_sample_rate") && stderr.contains(&format!("{max} Hz")),
        "{stderr}"
    );
    assert!(!stderr.contains("timers"), "{stderr}");
    let stats = &expect["stats"];
    assert_eq!(stats["cpu_sampling_hz"], max, "{stats}");
    // 100 ms of CPU: the timer fallback's 250 Hz would give about 25.
    let taken =
        stats["cpu_samples"].as_u64().unwrap() + stats["cpu_samples_lost"].as_u64().unwrap();
    assert!(taken >= 200.min(max / 10), "{stats}");
    let samples = samples_model(&trace);
    assert_eq!(
        samples["samples"].as_array().unwrap().len() as u64,
        stats["cpu_samples"].as_u64().unwrap()
    );
}

/// With few open files allowed (64) and 60 threads: the sampler's events
/// take at most half, said once, the threads beyond unsampled; the
/// program can still open files.
#[test]
fn the_sampler_leaves_the_program_half_its_open_files() {
    let (trace, expect, stderr) = run("cpu-fd-limit", "t.pftrace", "cpu_fd_limit", "");
    assert_eq!(expect["opened"], 16, "{expect} {stderr}");
    assert_eq!(
        stderr.matches("RLIMIT_NOFILE").count(),
        1,
        "said once: {stderr}"
    );
    let stats = &expect["stats"];
    let perf_fds = expect["perf_fds"].as_u64().unwrap();
    assert!(
        perf_fds > 0 && perf_fds <= 32,
        "{perf_fds} perf fds open at once"
    );
    assert!(
        stats["cpu_threads_unsampled"].as_u64().unwrap() > 0,
        "{stats}"
    );
    let samples = samples_model(&trace);
    assert_eq!(
        samples["samples"].as_array().unwrap().len() as u64,
        stats["cpu_samples"].as_u64().unwrap()
    );
}

/// The innermost frame of each sample of `tid`: (name, mapping).
fn leaves(samples: &Value, tid: i64) -> Vec<(String, String)> {
    samples["samples"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["tid"].as_i64() == Some(tid))
        .filter_map(|s| s["frames"].as_array().unwrap().last())
        .map(|f| {
            (
                f["name"].as_str().unwrap_or("").to_string(),
                f["mapping"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// Third-party code (`serde_json` parsing into `Value`s) allocating
/// heavily at 1 kHz: the C library's share of the leaf frames is large,
/// and with its debug symbols installed (`libc6-dbg`, which
/// `scripts/test.sh` installs) at least 95% of the leaf frames are named,
/// its internal functions (`_int_malloc`, `_int_free`...) among them.
#[test]
fn third_party_code_allocating_heavily_gets_its_leaf_frames_named() {
    let (trace, expect, _) = run("cpu-json", "t.pftrace", "cpu_json_parse", "");
    let samples = samples_model(&trace);
    perfetto_model(&trace);
    let tid = expect["tid"].as_i64().unwrap();
    let leaves = leaves(&samples, tid);
    assert!(leaves.len() >= 100, "{} samples", leaves.len());
    let in_libc: Vec<&(String, String)> =
        leaves.iter().filter(|l| l.1.contains("/libc.so")).collect();
    assert!(
        in_libc.len() * 100 >= leaves.len() * 5,
        "the C library holds {} of {} leaves: the case does not show what it checks",
        in_libc.len(),
        leaves.len()
    );
    let named = leaves.iter().filter(|l| !l.0.is_empty()).count();
    let unnamed: std::collections::BTreeMap<&str, usize> = leaves
        .iter()
        .filter(|l| l.0.is_empty())
        .fold(Default::default(), |mut m, l| {
            *m.entry(l.1.as_str()).or_default() += 1;
            m
        });
    assert!(
        named * 100 >= leaves.len() * 95,
        "{named} of {} leaf frames named; unnamed per mapping: {unnamed:?}",
        leaves.len()
    );
    assert!(
        in_libc.iter().any(|l| l.0.starts_with("_int_")),
        "no leaf in the C library's internal functions: {:?}",
        in_libc
            .iter()
            .map(|l| &l.0)
            .collect::<std::collections::BTreeSet<_>>()
    );
}

/// A function always inlined into its caller (`inlined_hot_loop` into
/// `inline_caller`), in the scenarios program built with debug info (the
/// test profile's: its DWARF has line tables and inlined subroutines): the
/// inlined function is a frame of its own, right inside its caller's, as
/// `perf report --inline` shows it, not charged to the caller.
#[test]
fn a_function_inlined_into_its_caller_is_a_frame_of_its_own() {
    let (trace, expect, _) = run("cpu-inline", "t.pftrace", "cpu_inline", "");
    let samples = samples_model(&trace);
    perfetto_model(&trace);
    let tid = expect["tid"].as_i64().unwrap();
    let stacks: Vec<Vec<String>> = samples["samples"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["tid"].as_i64() == Some(tid))
        .map(names)
        .collect();
    let in_caller: Vec<&Vec<String>> = stacks
        .iter()
        .filter(|s| s.iter().any(|n| n.ends_with("cpu::inline_caller")))
        .collect();
    assert!(
        in_caller.len() >= 50,
        "{} samples in the caller",
        in_caller.len()
    );
    let inlined = in_caller
        .iter()
        .filter(|s| {
            let at = s
                .iter()
                .position(|n| n.ends_with("cpu::inline_caller"))
                .unwrap();
            s.get(at + 1)
                .is_some_and(|n| n.ends_with("cpu::inlined_hot_loop"))
        })
        .count();
    assert!(
        inlined * 100 >= in_caller.len() * 90,
        "{inlined} of {} samples in the caller name the inlined function next; first: {:?}",
        in_caller.len(),
        in_caller.first()
    );
}
