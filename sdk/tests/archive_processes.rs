//! Archives of several traces with a `perfetto_manifest`, from real
//! processes.
//!
//! This test binary re-executes itself (test `child_process`, driven by
//! `RT_ARCHIVE_CHILD_*` variables); each child records a "go" instant when the
//! parent says so, bracketed by two readings of the trace clock it prints. The
//! archives are unpacked with standard readers (`tar`, Python's `tarfile` and
//! `zipfile`), the manifest is checked against every rule of the spec by an
//! independent Python validator, the Perfetto files are decoded with the
//! official schema (`tests/support/perfetto_model.py`), and the "go" instants
//! of every file, moved onto one timeline by the manifest's relations, must
//! fall inside the brackets their processes printed.

mod common;

use common::archive::*;
use common::{perfetto_model_clean, rerun_test, run_python, scratch};
use prost::Message;
use ringtrace::archive::{check_archive, Archive, ArchiveError, Clock, ClockSample};
use ringtrace::Format;
use ringtrace_protos::Trace;
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

// ---------------------------------------------------------------- helpers

/// What a child process reported.
#[derive(Debug, Clone)]
struct ChildRun {
    pid: u32,
    /// Trace clock just before and just after its "go" instant.
    t0: i64,
    t1: i64,
    sample: ClockSample,
}

/// Runs one child process per `(role, format)`, all writing into `dir` with
/// `member_builder`; releases their "go" at the same moment.
fn run_children(dir: &Path, roles: &[(&str, Format)]) -> Vec<ChildRun> {
    let mut children = Vec::new();
    for (role, format) in roles {
        let mut child = rerun_test("child_process")
            // Event timestamps straight from CLOCK_BOOTTIME (not the
            // calibrated TSC), so the brackets below are exact.
            .env("RINGTRACE_CLOCK", "boottime")
            .env("RT_ARCHIVE_CHILD_DIR", dir)
            .env("RT_ARCHIVE_CHILD_ROLE", role)
            .env(
                "RT_ARCHIVE_CHILD_FORMAT",
                if *format == Format::Json {
                    "json"
                } else {
                    "pftrace"
                },
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        // Wait until its session records.
        loop {
            let line = lines.next().expect("child exited before READY").unwrap();
            // libtest prints "test child_process ... " before the child's output.
            if line.contains("RT-READY") {
                break;
            }
        }
        children.push((child, lines));
    }
    for (child, _) in &mut children {
        child.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
        child.stdin.as_mut().unwrap().flush().unwrap();
    }
    let mut runs = Vec::new();
    for (mut child, mut lines) in children {
        let line = loop {
            let l = lines.next().expect("child exited before GO").unwrap();
            if let Some(at) = l.find("RT-GO ") {
                break l[at..].to_owned();
            }
        };
        let f: Vec<i64> = line
            .split_whitespace()
            .skip(1)
            .map(|x| x.parse().unwrap())
            .collect();
        assert!(child.wait().unwrap().success());
        runs.push(ChildRun {
            pid: f[0] as u32,
            t0: f[1],
            t1: f[2],
            sample: ClockSample {
                boottime_ns: f[3] as u64,
                realtime_ns: f[4] as u64,
                monotonic_ns: Some(f[5] as u64),
            },
        });
    }
    runs
}

/// The child side of `run_children` (a no-op in a normal test run).
#[test]
fn child_process() {
    let Ok(dir) = std::env::var("RT_ARCHIVE_CHILD_DIR") else {
        return;
    };
    let role = std::env::var("RT_ARCHIVE_CHILD_ROLE").unwrap();
    let format = if std::env::var("RT_ARCHIVE_CHILD_FORMAT").unwrap() == "json" {
        Format::Json
    } else {
        Format::Perfetto
    };
    let guard = ringtrace::archive::member_builder(&dir, &role, format)
        .unwrap()
        .start()
        .unwrap();
    {
        ringtrace::trace_scope!("setup");
        ringtrace::trace_counter!("ready", 1);
    }
    println!("RT-READY");
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    let t0 = ringtrace::trace_clock_ns();
    ringtrace::trace_instant!("go");
    let t1 = ringtrace::trace_clock_ns();
    {
        ringtrace::trace_scope!("work");
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    let s = ClockSample::now();
    guard.stop().unwrap();
    println!(
        "RT-GO {} {t0} {t1} {} {} {}",
        std::process::id(),
        s.boottime_ns,
        s.realtime_ns,
        s.monotonic_ns.unwrap()
    );
    std::process::exit(0);
}

fn find_member(dir: &Path, role: &str, pid: u32) -> PathBuf {
    for ext in ["pftrace", "json"] {
        let p = dir.join(format!("{role}.{pid}.{ext}"));
        if p.exists() {
            return p;
        }
    }
    panic!("no trace of {role} ({pid}) in {}", dir.display());
}

/// The "go" instant's timestamp in the file's own time base (ns), and the
/// pids the file's events carry.
fn go_and_pids(path: &Path) -> (i64, Vec<i64>) {
    let bytes = std::fs::read(path).unwrap();
    if bytes[0] == 0x0a {
        let m = perfetto_model_clean(path);
        let go: Vec<i64> = m["slices"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["name"] == "go")
            .map(|s| s["ts"].as_i64().unwrap())
            .collect();
        assert_eq!(go.len(), 1, "one go instant in {}", path.display());
        let mut pids: Vec<i64> = m["tracks"]
            .as_object()
            .unwrap()
            .values()
            .filter_map(|t| t["pid"].as_i64())
            .collect();
        pids.sort();
        pids.dedup();
        (go[0], pids)
    } else {
        let events: Value = serde_json::from_slice(&bytes).expect("valid JSON");
        let events = events.as_array().unwrap();
        let go: Vec<i64> = events
            .iter()
            .filter(|e| e["name"] == "go" && e["ph"] == "i")
            .map(|e| (e["ts"].as_f64().unwrap() * 1000.0).round() as i64)
            .collect();
        assert_eq!(go.len(), 1, "one go instant in {}", path.display());
        let mut pids: Vec<i64> = events.iter().filter_map(|e| e["pid"].as_i64()).collect();
        pids.sort();
        pids.dedup();
        (go[0], pids)
    }
}

/// The offset that moves a time of `file` onto the timeline of the file its
/// `clocks` chain ends at, following the manifest (BOOTTIME relations and
/// pins of JSON files, whose own time base is BOOTTIME ns).
fn offset_to_root(manifest: &Value, file: &str) -> (i64, String) {
    let files = manifest["perfetto_manifest"]["files"].as_array().unwrap();
    let mut total = 0i64;
    let mut cur = file.to_owned();
    for _ in 0..10 {
        let entry = files
            .iter()
            .find(|f| f["path"] == cur.as_str())
            .expect("entry");
        let Some(c) = entry.get("clocks") else {
            return (total, cur);
        };
        let clock = c.get("clock").and_then(Value::as_str);
        assert!(clock.is_none() || clock == Some("BOOTTIME"), "{c}");
        let rclock = c["sync_to"].get("clock").and_then(Value::as_str);
        assert!(rclock.is_none() || rclock == Some("BOOTTIME"), "{c}");
        total += c.get("offset_ns").and_then(Value::as_i64).unwrap_or(0);
        cur = c["sync_to"]["file"].as_str().unwrap().to_owned();
    }
    panic!("clock chain of {file} does not end");
}

/// The machine name of a manifest entry (`None`: the host).
fn machine_of(manifest: &Value, file: &str) -> Option<String> {
    let files = manifest["perfetto_manifest"]["files"].as_array().unwrap();
    let entry = files.iter().find(|f| f["path"] == file).expect("entry");
    entry["machine"]["name"].as_str().map(str::to_owned)
}

/// Lists and extracts `archive` with Python's tarfile / zipfile (and checks
/// ZIP CRCs); returns the member names in archive order.
fn python_extract(archive: &Path, into: &Path) -> Vec<String> {
    const SCRIPT: &str = r#"
import json, sys, tarfile, zipfile
path, out = sys.argv[1], sys.argv[2]
if zipfile.is_zipfile(path):
    with zipfile.ZipFile(path) as z:
        assert z.testzip() is None, "CRC mismatch"
        names = z.namelist()
        z.extractall(out)
else:
    with tarfile.open(path) as t:
        names = t.getnames()
        t.extractall(out, filter="data")
print(json.dumps(names))
"#;
    serde_json::from_str(&run_python(
        SCRIPT,
        &[archive.to_str().unwrap(), into.to_str().unwrap()],
    ))
    .unwrap()
}

/// Asserts that every child's "go", moved onto the common timeline, lies in
/// the bracket the child printed (± `tolerance_ns`), each child's bracket
/// being on the real BOOTTIME of this machine after subtracting `shift_ns` of
/// the simulated machines.
fn assert_go_lines_up(
    manifest: &Value,
    unpacked: &Path,
    cases: &[(&str, &ChildRun, i64)],
    tolerance_ns: i64,
) {
    let mut root = None;
    for (member, run, shift) in cases {
        let (go, pids) = go_and_pids(&unpacked.join(member));
        assert!(
            pids.contains(&(run.pid as i64)),
            "{member}: pid {} not among {pids:?}",
            run.pid
        );
        // In its own file the instant is inside its bracket (shifted clocks included).
        assert!(
            go >= run.t0 + shift && go <= run.t1 + shift,
            "{member}: go {go} not in [{}, {}] + {shift}",
            run.t0,
            run.t1
        );
        // Files whose clock chains end at different files are on one
        // timeline only if those files share a machine (same BOOTTIME).
        let (off, r) = offset_to_root(manifest, member);
        let machine = machine_of(manifest, &r);
        assert_eq!(
            *root.get_or_insert_with(|| machine.clone()),
            machine,
            "{member}: one timeline"
        );
        let on_timeline = go + off;
        assert!(
            on_timeline >= run.t0 - tolerance_ns && on_timeline <= run.t1 + tolerance_ns,
            "{member}: on the merged timeline go = {on_timeline}, expected within [{}, {}] ± {tolerance_ns}",
            run.t0,
            run.t1
        );
    }
}

// ------------------------------------------------------ multi-process archives

#[test]
fn two_processes_one_tar() {
    let dir = scratch("two-procs");
    let traces = dir.join("traces");
    let runs = run_children(
        &traces,
        &[("client", Format::Perfetto), ("server", Format::Perfetto)],
    );
    assert_ne!(runs[0].pid, runs[1].pid);
    // The go instants were recorded at about the same moment.
    assert!((runs[0].t0 - runs[1].t0).abs() < 2_000_000_000);

    let mut archive = Archive::from_dir(&traces).unwrap();
    assert_eq!(archive.members().len(), 2, "sidecars are not members");
    archive
        .attribute("run_id", 7)
        .attribute("suite", "archive-test")
        .trace_time(Clock::Boottime, None, None);
    let tar = dir.join("run.tar");
    archive.write_tar(&tar).unwrap();

    // The tar command reads it, manifest first.
    let listing = Command::new("tar").arg("-tf").arg(&tar).output().unwrap();
    assert!(listing.status.success());
    let names: Vec<String> = String::from_utf8(listing.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(names[0], "perfetto_manifest.json");
    let by_tar = dir.join("by-tar");
    std::fs::create_dir_all(&by_tar).unwrap();
    assert!(Command::new("tar")
        .arg("-xf")
        .arg(&tar)
        .arg("-C")
        .arg(&by_tar)
        .status()
        .unwrap()
        .success());
    for r in &runs {
        for role in ["client", "server"] {
            let p = traces.join(format!("{role}.{}.pftrace", r.pid));
            if p.exists() {
                let name = p.file_name().unwrap();
                assert_eq!(
                    std::fs::read(by_tar.join(name)).unwrap(),
                    std::fs::read(&p).unwrap(),
                    "byte-identical member"
                );
            }
        }
    }

    let by_py = dir.join("by-python");
    let py_names = python_extract(&tar, &by_py);
    assert_eq!(py_names, names);
    validate_with_python(&tar);
    let manifest = read_manifest(&by_py);
    let m = &manifest["perfetto_manifest"];
    assert_eq!(m["version"], 1);
    assert_eq!(m["attributes"]["run_id"], 7);
    assert_eq!(m["trace_time"]["clock"], "BOOTTIME");
    assert_eq!(m["files"].as_array().unwrap().len(), 2);

    let client = find_member(&traces, "client", runs[0].pid);
    let server = find_member(&traces, "server", runs[1].pid);
    let cases = [
        (client.file_name().unwrap().to_str().unwrap(), &runs[0], 0),
        (server.file_name().unwrap().to_str().unwrap(), &runs[1], 0),
    ];
    // Same machine, BOOTTIME everywhere: exact.
    assert_go_lines_up(&manifest, &by_py, &cases, 0);

    // Our reader agrees with ours and with the standard ones.
    let report = check_archive(&std::fs::read(&tar).unwrap()).unwrap();
    assert_eq!(report.members.len(), 2);
    assert!(report.manifest.is_some());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn perfetto_plus_json_zip_pins_the_json_file() {
    let dir = scratch("pf-json");
    let traces = dir.join("traces");
    let runs = run_children(&traces, &[("app", Format::Perfetto), ("log", Format::Json)]);
    let app = find_member(&traces, "app", runs[0].pid);
    let log = find_member(&traces, "log", runs[1].pid);
    let (app_name, log_name) = (
        app.file_name().unwrap().to_str().unwrap().to_owned(),
        log.file_name().unwrap().to_str().unwrap().to_owned(),
    );

    let archive = Archive::from_dir(&traces).unwrap();
    let manifest = archive.manifest().unwrap();
    let entry = manifest.entry(&log_name).unwrap();
    let clocks = entry
        .clocks
        .as_ref()
        .expect("the JSON file is pinned automatically");
    assert_eq!(clocks.clock, None, "PIN: no clock of its own");
    let sync = clocks.sync_to.as_ref().unwrap();
    assert_eq!(sync.file.as_deref(), Some(app_name.as_str()));
    assert_eq!(sync.clock, Some(Clock::Boottime));
    assert_eq!(
        clocks.offset_ns,
        Some(0),
        "ringtrace JSON is BOOTTIME µs: same machine, offset 0"
    );
    assert!(manifest.entry(&app_name).unwrap().clocks.is_none());

    let zip = dir.join("run.zip");
    archive.write_zip(&zip).unwrap();
    let out = dir.join("unzipped");
    let names = python_extract(&zip, &out);
    assert_eq!(names[0], "perfetto_manifest.json");
    validate_with_python(&zip);
    let manifest = read_manifest(&out);
    assert_go_lines_up(
        &manifest,
        &out,
        &[(&app_name, &runs[0], 0), (&log_name, &runs[1], 0)],
        0,
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Shifts every absolute BOOTTIME (and MONOTONIC) reading of a ringtrace
/// Perfetto file by `shift` ns, as if its machine had booted `shift` earlier;
/// REALTIME stays. Deltas on sequence clocks are left alone, their anchors
/// (the snapshots) move.
fn shift_pftrace(bytes: &[u8], shift: u64) -> Vec<u8> {
    let mut trace = Trace::decode(bytes).unwrap();
    let mut seq_default_clock = std::collections::HashMap::new();
    for p in &mut trace.packet {
        let seq = p.trusted_packet_sequence_id.unwrap_or(0);
        if let Some(d) = &p.trace_packet_defaults {
            if let Some(c) = d.timestamp_clock_id {
                seq_default_clock.insert(seq, c);
            }
        }
        if let Some(cs) = &mut p.clock_snapshot {
            for c in &mut cs.clocks {
                let id = c.clock_id.unwrap_or(0);
                if id == 6 || id == 3 || (64..128).contains(&id) {
                    *c.timestamp.as_mut().unwrap() += shift;
                }
            }
        }
        let clock = p
            .timestamp_clock_id
            .or_else(|| seq_default_clock.get(&seq).copied())
            .unwrap_or(6);
        if clock == 6 {
            if let Some(ts) = &mut p.timestamp {
                *ts += shift;
            }
        }
    }
    trace.encode_to_vec()
}

/// Shifts a ringtrace JSON file's `ts` by `shift` ns.
fn shift_json(bytes: &[u8], shift: i64) -> Vec<u8> {
    let mut v: Value = serde_json::from_slice(bytes).unwrap();
    for e in v.as_array_mut().unwrap() {
        if let Some(ts) = e.get("ts").and_then(Value::as_f64) {
            let ns = (ts * 1000.0).round() as i64 + shift;
            e["ts"] = serde_json::from_str(&format!("{}.{:03}", ns / 1000, ns % 1000)).unwrap();
        }
    }
    serde_json::to_vec(&v).unwrap()
}

#[test]
fn second_machine_is_related_through_realtime() {
    // Three processes on this host; "b" and "c" are made to look like another
    // machine that booted SHIFT ns earlier (their BOOTTIME reads SHIFT more,
    // their REALTIME the same). The manifest must undo exactly that.
    const SHIFT: i64 = 3_600_123_456_000;
    let dir = scratch("two-machines");
    let traces = dir.join("traces");
    let runs = run_children(
        &traces,
        &[
            ("a", Format::Perfetto),
            ("b", Format::Perfetto),
            ("c", Format::Json),
        ],
    );
    let a = std::fs::read(find_member(&traces, "a", runs[0].pid)).unwrap();
    let b = shift_pftrace(
        &std::fs::read(find_member(&traces, "b", runs[1].pid)).unwrap(),
        SHIFT as u64,
    );
    let c = shift_json(
        &std::fs::read(find_member(&traces, "c", runs[2].pid)).unwrap(),
        SHIFT,
    );
    let c_sample = ClockSample {
        boottime_ns: runs[2].sample.boottime_ns + SHIFT as u64,
        monotonic_ns: runs[2].sample.monotonic_ns.map(|m| m + SHIFT as u64),
        ..runs[2].sample
    };

    // b relates its BOOTTIME to a's; c (JSON, machine b) is pinned for us.
    let mut archive = Archive::new();
    archive.add_bytes("a.pftrace", a.clone()).machine("alpha");
    archive
        .add_bytes("b.pftrace", b.clone())
        .machine("beta")
        .sync_to("a.pftrace", Some(Clock::Boottime));
    archive
        .add_bytes("c.json", c.clone())
        .machine("beta")
        .clock_sample(c_sample);
    archive.trace_time(Clock::Boottime, Some("a.pftrace"), None);
    let m = archive.manifest().unwrap();
    let b_off = m
        .entry("b.pftrace")
        .unwrap()
        .clocks
        .as_ref()
        .unwrap()
        .offset_ns
        .unwrap();
    assert!(
        (b_off + SHIFT).abs() < 1_000_000,
        "b's offset {b_off} should be about -{SHIFT}"
    );
    let c_clocks = m.entry("c.json").unwrap().clocks.clone().unwrap();
    assert_eq!(
        c_clocks.sync_to.unwrap().file.as_deref(),
        Some("b.pftrace"),
        "pinned to its own machine's file"
    );
    assert_eq!(c_clocks.offset_ns, Some(0));

    let tar = dir.join("machines.tar");
    archive.write_tar(&tar).unwrap();
    let out = dir.join("out");
    python_extract(&tar, &out);
    validate_with_python(&tar);
    let manifest = read_manifest(&out);
    assert_eq!(
        manifest["perfetto_manifest"]["files"][0]["machine"]["name"],
        "alpha"
    );
    // Independent snapshots of one host agree on REALTIME - BOOTTIME to well
    // under a millisecond.
    assert_go_lines_up(
        &manifest,
        &out,
        &[
            ("a.pftrace", &runs[0], 0),
            ("b.pftrace", &runs[1], SHIFT),
            ("c.json", &runs[2], SHIFT),
        ],
        1_000_000,
    );

    // The JSON file pinned straight to the other machine's file: the offset
    // comes from its clock sample against a's snapshot.
    let mut direct = Archive::new();
    direct.add_bytes("a.pftrace", a).machine("alpha");
    direct
        .add_bytes("c.json", c)
        .machine("beta")
        .clock_sample(c_sample)
        .sync_to("a.pftrace", None);
    let tar2 = dir.join("direct.zip");
    direct.write_zip(&tar2).unwrap();
    let out2 = dir.join("out2");
    python_extract(&tar2, &out2);
    validate_with_python(&tar2);
    let manifest2 = read_manifest(&out2);
    assert_go_lines_up(
        &manifest2,
        &out2,
        &[("a.pftrace", &runs[0], 0), ("c.json", &runs[2], SHIFT)],
        1_000_000,
    );

    // Without a clock reading of machine beta, no offset can be computed.
    let mut blind = Archive::new();
    blind
        .add_bytes("a.pftrace", std::fs::read(out2.join("a.pftrace")).unwrap())
        .machine("alpha");
    blind
        .add_bytes("c.json", std::fs::read(out2.join("c.json")).unwrap())
        .machine("beta");
    let e = blind.write_tar(dir.join("blind.tar")).unwrap_err();
    assert!(matches!(e, ArchiveError::CannotComputeOffset { .. }), "{e}");
    assert!(!dir.join("blind.tar").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn machines_from_different_boots_get_names() {
    // Sidecars of two "hosts": from_dir names the machines after them.
    let dir = scratch("hosts");
    let mk = |name: &str, host: &str, boot: &str| {
        std::fs::write(dir.join(name), synthetic_trace(&[None])).unwrap();
        std::fs::write(
            dir.join(format!(".{name}.ringtrace.json")),
            format!(
                "{{\"ringtrace_member\": 1, \"member\": \"{name}\", \"role\": \"x\", \"pid\": 1, \"host\": \"{host}\", \
                 \"boot_id\": \"{boot}\", \"clock\": {{\"boottime_ns\": 5, \"realtime_ns\": 9, \"monotonic_ns\": 4}}}}"
            ),
        )
        .unwrap();
    };
    mk("one.1.pftrace", "h1", "aaaa");
    mk("two.2.pftrace", "h2", "bbbb");
    let archive = Archive::from_dir(&dir).unwrap();
    let m = archive.manifest().unwrap();
    assert_eq!(
        m.entry("one.1.pftrace").unwrap().machine.as_deref(),
        Some("h1")
    );
    assert_eq!(
        m.entry("two.2.pftrace").unwrap().machine.as_deref(),
        Some("h2")
    );
    let _ = std::fs::remove_dir_all(&dir);
}
