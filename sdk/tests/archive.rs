//! Archives of several traces with a `perfetto_manifest`.
//!
//! The traces come from real child processes: this test binary re-executes
//! itself (test `child_process`, driven by `RT_ARCHIVE_CHILD_*` variables),
//! each child records a "go" instant when the parent says so, bracketed by two
//! readings of the trace clock it prints. The archives are unpacked with
//! standard readers (`tar`, Python's `tarfile` and `zipfile`), the manifest is
//! checked against every rule of the spec by an independent Python validator,
//! the Perfetto files are decoded with the official schema
//! (`tests/support/perfetto_model.py`), and the "go" instants of every file,
//! moved onto one timeline by the manifest's relations, must fall inside the
//! brackets their processes printed.
//!
//! Then one test per error condition of the spec's table: each must be caught
//! by our validation, before anything is written.

use prost::Message;
use ringtrace::archive::{
    check_archive, read_members, Archive, ArchiveError, Clock, ClockSample, Manifest, MemberInfo,
    MemberKind,
};
use ringtrace::Format;
use ringtrace_protos::{clock_snapshot, ClockSnapshot, Trace, TracePacket};
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

// ---------------------------------------------------------------- helpers

/// A fresh directory, unique per call (tests run in parallel threads).
fn scratch(name: &str) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!(
        "ringtrace-archive-{}-{n}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn python() -> String {
    std::env::var("RINGTRACE_PYTHON").unwrap_or_else(|_| "python3".to_string())
}

fn run_python(script: &str, args: &[&str]) -> String {
    let out = Command::new(python())
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e} (set RINGTRACE_PYTHON)", python()));
    assert!(
        out.status.success(),
        "python failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

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
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "child_process",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
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

/// The trace decoded with the official schema; fails on any reader error.
fn perfetto_model(path: &Path) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/support/perfetto_model.py");
    let out = Command::new(python())
        .arg(&script)
        .arg(path)
        .output()
        .unwrap();
    let model: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "decoder output is not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert!(
        out.status.success() && model["errors"].as_array().unwrap().is_empty(),
        "decoder: {:#}",
        model["errors"]
    );
    model
}

/// The "go" instant's timestamp in the file's own time base (ns), and the
/// pids the file's events carry.
fn go_and_pids(path: &Path) -> (i64, Vec<i64>) {
    let bytes = std::fs::read(path).unwrap();
    if bytes[0] == 0x0a {
        let m = perfetto_model(path);
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

/// Every rule of the manifest spec and of the archive container rules,
/// checked independently of our Rust code. Prints {"errors": [...], ...}.
const VALIDATOR: &str = r#"
import gzip, json, sys, tarfile, zipfile
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
CLOCKS = {"REALTIME", "REALTIME_COARSE", "MONOTONIC", "MONOTONIC_COARSE", "MONOTONIC_RAW", "BOOTTIME"}
path = sys.argv[1]
errors = []
def err(m): errors.append(m)
members = []
if zipfile.is_zipfile(path):
    with zipfile.ZipFile(path) as z:
        if z.testzip() is not None: err("zip CRC mismatch")
        for i in z.infolist():
            if i.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED): err("zip method %d" % i.compress_type)
            if i.flag_bits & ~0b100000001110: err("zip flags %x" % i.flag_bits)
            if i.flag_bits & 8 and i.compress_type != zipfile.ZIP_DEFLATED: err("data descriptor without deflate")
            if i.create_version > 63 or i.extract_version > 45: err("zip version needed %d" % i.extract_version)
            members.append((i.filename, z.read(i)))
else:
    raw = open(path, "rb").read()
    if raw[257:262] != b"ustar": err("not ustar/GNU tar")
    with tarfile.open(path) as t:
        for m in t.getmembers():
            if not m.isfile(): err("non-file member %s" % m.name)
            if len(m.name.encode()) > 99: err("tar name longer than 99 bytes: %s" % m.name)
            members.append((m.name, t.extractfile(m).read()))
def squeeze(b): return bytes(c for c in b[:4096] if c not in b" \t\r\n")
def is_manifest(b): return squeeze(b).startswith(b'{"perfetto_manifest"')
names = [n for n, _ in members]
if len(set(names)) != len(names): err("duplicate member names")
for n, d in members:
    if any(p.startswith(".") for p in n.split("/")): err("dot-named member %s" % n)
    if not d: err("empty member %s" % n)
    if d[:2] == b"\x1f\x8b" and is_manifest(gzip.decompress(d)): err("gzipped manifest %s" % n)
    if d[:4] == b"PK\x03\x04" or d[257:262] == b"ustar": err("nested archive %s" % n)
manifests = [(n, d) for n, d in members if is_manifest(d)]
if len(manifests) != 1: err("%d manifests" % len(manifests))
mname, mtext = manifests[0]
pairs = json.loads(mtext, object_pairs_hook=lambda kv: kv)
if [k for k, _ in pairs] != ["perfetto_manifest"]: err("top-level keys %s" % [k for k, _ in pairs])
m = json.loads(mtext)["perfetto_manifest"]
traces = {n: d for n, d in members if n != mname}
def kind(d):
    s = squeeze(d)
    if d[:1] == b"\n": return "proto"
    if s.startswith(b'{"') or s.startswith(b'[{"'): return "json"
    if d[:2] == b"\x1f\x8b" or d[:4] == b"PK\x03\x04" or d[257:262] == b"ustar": return "container"
    return "other"
protos = {}
for n, d in traces.items():
    k = kind(d)
    if k == "json": json.loads(d)
    if k == "proto":
        t = pb.Trace.FromString(d)
        protos[n] = {"ids": {p.machine_id for p in t.packet if p.HasField("machine_id") and p.machine_id},
                     "snapshots": any(p.HasField("clock_snapshot") for p in t.packet)}
def is_int(v): return isinstance(v, int) and not isinstance(v, bool)
if "version" not in m: err("missing version")
elif not is_int(m["version"]) or m["version"] != 1: err("version %r" % m["version"])
files = m.get("files", [])
if not isinstance(files, list): err("files not a list"); files = []
paths = []
for f in files:
    if not isinstance(f, dict) or not isinstance(f.get("path"), str): err("bad entry %r" % f); continue
    paths.append(f["path"])
if len(set(paths)) != len(paths): err("duplicate entries")
entries = {f["path"]: f for f in files if isinstance(f, dict) and isinstance(f.get("path"), str)}
def multi(e): return bool(e.get("machines"))
def declares(e, name): return (e.get("machine") or {}).get("name") == name or any(x.get("name") == name for x in e.get("machines") or [])
def check_ref(field, file, machine):
    if machine is not None and file is None: err("%s: machine without file" % field); return
    if file is None: return
    if file not in entries: err("%s: unknown file %s" % (field, file)); return
    r = entries[file]
    if machine is None and multi(r): err("%s: %s is multi-machine" % (field, file))
    if machine is not None and not declares(r, machine): err("%s: %s not declared by %s" % (field, machine, file))
tt = m.get("trace_time")
if tt is not None:
    if tt.get("clock") not in CLOCKS: err("trace_time clock %r" % tt.get("clock"))
    check_ref("trace_time", tt.get("file"), tt.get("machine"))
for p, e in entries.items():
    if p not in traces: err("entry %s is not a member" % p); continue
    d = traces[p]
    overrides = any(k in e for k in ("machine", "machines", "clocks"))
    if overrides and (kind(d) == "container" or is_manifest(d)): err("override on container %s" % p)
    if "machine" in e and "machines" in e: err("machine and machines on %s" % p)
    if "machine" in e:
        n = e["machine"].get("name") if isinstance(e["machine"], dict) else None
        if not isinstance(n, str) or not n: err("bad machine name on %s" % p)
        if p in protos and protos[p]["ids"]: err("machine on multi-machine %s" % p)
    if "machines" in e:
        for x in e["machines"]:
            if not is_int(x.get("id")) or not 0 <= x["id"] <= 4294967295: err("machine id %r" % x.get("id"))
            if not isinstance(x.get("name"), str) or not x["name"]: err("empty machine name on %s" % p)
        declared = {x.get("id") for x in e["machines"]}
        for i in (protos.get(p) or {"ids": set()})["ids"]:
            if i not in declared: err("undeclared machine id %d in %s" % (i, p))
    c = e.get("clocks")
    if c is None: continue
    if not isinstance(c, dict): err("clocks not an object"); continue
    if "clock" in c and c["clock"] not in CLOCKS: err("clock %r" % c["clock"])
    s = c.get("sync_to")
    if not isinstance(s, dict): err("clocks without sync_to on %s" % p); continue
    if not isinstance(s.get("file"), str): err("sync_to without file on %s" % p); continue
    if "clock" in s and s["clock"] not in CLOCKS: err("sync_to clock %r" % s["clock"])
    check_ref("sync_to", s["file"], s.get("machine"))
    if "machine" in c:
        if not declares(e, c["machine"]): err("clocks.machine not declared by %s" % p)
    elif multi(e): err("%s is multi-machine, clocks.machine missing" % p)
    if "offset_ns" in c:
        o = c["offset_ns"]
        if not is_int(o): err("offset_ns not an integer on %s" % p)
        elif not -2**63 < o < 2**63: err("offset_ns out of range on %s" % p)
    if "clock" not in c and p in protos and protos[p]["snapshots"]: err("pinned %s has clock snapshots" % p)
a = m.get("attributes")
if a is not None:
    if not isinstance(a, dict): err("attributes not an object")
    else:
        for k, v in a.items():
            if not k: err("empty attribute key")
            if not (isinstance(v, str) or is_int(v)): err("attribute %s is %r" % (k, v))
print(json.dumps({"errors": errors, "members": names, "manifest_member": mname}))
"#;

/// What the independent validator reports about `archive`.
fn python_validation(archive: &Path) -> Value {
    serde_json::from_str(&run_python(VALIDATOR, &[archive.to_str().unwrap()])).unwrap()
}

fn validate_with_python(archive: &Path) -> Value {
    let v = python_validation(archive);
    assert!(
        v["errors"].as_array().unwrap().is_empty(),
        "{} breaks the spec: {:#}",
        archive.display(),
        v["errors"]
    );
    assert_eq!(
        v["members"][0], "perfetto_manifest.json",
        "the manifest is written first"
    );
    v
}

fn read_manifest(dir: &Path) -> Value {
    let text = std::fs::read_to_string(dir.join("perfetto_manifest.json")).unwrap();
    assert!(
        text.starts_with("{\"perfetto_manifest\""),
        "first key: {text}"
    );
    serde_json::from_str(&text).unwrap()
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

// --------------------------------------------------- synthetic traces, errors

/// A Perfetto trace with one clock snapshot per given machine id (None: no
/// machine id on the packet).
fn synthetic_trace(machines: &[Option<u32>]) -> Vec<u8> {
    let packet = |m: Option<u32>| TracePacket {
        trusted_packet_sequence_id: Some(1),
        machine_id: m,
        clock_snapshot: Some(ClockSnapshot {
            clocks: vec![
                clock_snapshot::Clock {
                    clock_id: Some(6),
                    timestamp: Some(1_000_000),
                    ..Default::default()
                },
                clock_snapshot::Clock {
                    clock_id: Some(1),
                    timestamp: Some(1_700_000_000_000_000_000),
                    ..Default::default()
                },
            ],
            primary_trace_clock: None,
        }),
        ..Default::default()
    };
    Trace {
        packet: machines.iter().map(|&m| packet(m)).collect(),
    }
    .encode_to_vec()
}

const JSON: &[u8] = br#"[{"name":"a","ph":"i","s":"t","ts":1.5,"pid":1,"tid":1}]"#;

/// `archive` must be rejected by `check`, as a TAR and as a ZIP, with a
/// message containing `text`, and leave no file behind.
fn assert_rejected(archive: &Archive, check: impl Fn(&ArchiveError) -> bool, text: &str) {
    let dir = scratch("rejected");
    for (name, result) in [
        ("x.tar", archive.write_tar(dir.join("x.tar"))),
        ("x.zip", archive.write_zip(dir.join("x.zip"))),
    ] {
        let e = result.expect_err("must be rejected");
        assert!(check(&e), "unexpected error for {name}: {e:?}");
        assert!(
            e.to_string().contains(text),
            "message {:?} lacks {text:?}",
            e.to_string()
        );
        assert!(!dir.join(name).exists(), "nothing written");
    }
    let mut sink = Vec::new();
    assert!(archive.write_tar_to(&mut sink).is_err());
    assert!(sink.is_empty(), "nothing written to the writer");
    assert!(archive.validate().is_err());
    let _ = std::fs::remove_dir_all(&dir);
}

/// Builds a TAR with Python's tarfile (a standard writer), members in order.
fn python_tar(dir: &Path, members: &[(&str, &[u8])]) -> Vec<u8> {
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    let mut args = vec![];
    for (i, (name, data)) in members.iter().enumerate() {
        let p = src.join(format!("m{i}"));
        std::fs::write(&p, data).unwrap();
        args.push(format!("{}={}", p.display(), name));
    }
    let out = dir.join("py.tar");
    let script = r#"
import sys, tarfile
with tarfile.open(sys.argv[1], "w", format=tarfile.USTAR_FORMAT) as t:
    for a in sys.argv[2:]:
        src, name = a.split("=", 1)
        t.add(src, arcname=name)
"#;
    let mut all = vec![out.to_str().unwrap().to_owned()];
    all.extend(args);
    run_python(script, &all.iter().map(String::as_str).collect::<Vec<_>>());
    std::fs::read(out).unwrap()
}

fn checked(members: &[(&str, &[u8])]) -> Result<ringtrace::archive::ArchiveReport, ArchiveError> {
    let dir = scratch("raw");
    let tar = python_tar(&dir, members);
    let _ = std::fs::remove_dir_all(&dir);
    check_archive(&tar)
}

fn two_files() -> Archive {
    let mut a = Archive::new();
    a.add_bytes("a.pftrace", synthetic_trace(&[None]));
    a.add_bytes("b.json", JSON.to_vec());
    a
}

/// A multi-machine trace (packets from machines 0 and 7) beside a plain one.
fn relay() -> Archive {
    let mut a = Archive::new();
    a.add_bytes("relay.pftrace", synthetic_trace(&[None, Some(7)]));
    a.add_bytes("a.pftrace", synthetic_trace(&[None]));
    a
}

#[test]
fn error_missing_version() {
    let m = Manifest {
        version: None,
        ..Manifest::new()
    };
    assert!(matches!(m.validate(&[]), Err(ArchiveError::MissingVersion)));
    let e = checked(&[
        (
            "perfetto_manifest.json",
            br#"{"perfetto_manifest": {"files": []}}"#,
        ),
        ("b.json", JSON),
    ])
    .unwrap_err();
    assert!(matches!(e, ArchiveError::MissingVersion), "{e}");
    assert!(e.to_string().contains("missing required field: version"));
}

#[test]
fn error_unsupported_version() {
    let m = Manifest {
        version: Some(2),
        ..Manifest::new()
    };
    assert!(matches!(
        m.validate(&[]),
        Err(ArchiveError::UnsupportedVersion(2))
    ));
    let e = checked(&[(
        "perfetto_manifest.json",
        br#"{"perfetto_manifest": {"version": 2}}"#,
    )])
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("unsupported version: 2. Only version 1 is supported"),
        "{e}"
    );
}

#[test]
fn error_unknown_clock_name() {
    let e = "UTC".parse::<Clock>().unwrap_err();
    assert!(matches!(&e, ArchiveError::UnknownClock(c) if c == "UTC"));
    assert!(e
        .to_string()
        .contains("unknown clock name: UTC. Use one of REALTIME"));
    let e = checked(&[
        (
            "perfetto_manifest.json",
            br#"{"perfetto_manifest": {"version": 1, "trace_time": {"clock": "UTC"}}}"#,
        ),
        ("b.json", JSON),
    ])
    .unwrap_err();
    assert!(matches!(e, ArchiveError::UnknownClock(_)), "{e}");
    let e = checked(&[
        (
            "perfetto_manifest.json",
            br#"{"perfetto_manifest": {"version": 1, "files": [{"path": "b.json", "clocks": {"sync_to": {"file": "b.json", "clock": "boottime"}}}]}}"#,
        ),
        ("b.json", JSON),
    ])
    .unwrap_err();
    assert!(matches!(e, ArchiveError::UnknownClock(_)), "{e}");
}

#[test]
fn error_second_manifest() {
    let mut a = two_files();
    a.add_bytes(
        "extra_manifest.json",
        br#"{"perfetto_manifest": {"version": 1}}"#.to_vec(),
    );
    assert_rejected(
        &a,
        |e| matches!(e, ArchiveError::MultipleManifests { .. }),
        "multiple perfetto_manifest files in archive",
    );
    let e = checked(&[
        ("m1.json", br#"{"perfetto_manifest": {"version": 1}}"#),
        ("m2.json", br#" {"perfetto_manifest": {"version": 1}}"#),
    ])
    .unwrap_err();
    assert!(matches!(e, ArchiveError::MultipleManifests { .. }), "{e}");
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(data).unwrap();
    enc.finish().unwrap()
}

#[test]
fn error_manifest_after_a_trace() {
    // A gzipped manifest sorts after the proto traces: "must be the first".
    let mut a = two_files();
    a.add_bytes(
        "manifest.json.gz",
        gzip(br#"{"perfetto_manifest": {"version": 1}}"#),
    );
    assert_rejected(
        &a,
        |e| matches!(e, ArchiveError::ManifestNotFirst { .. }),
        "perfetto_manifest file must be the first trace file in the input",
    );
    // A concatenated gzip stream with the manifest second.
    let mut stream = gzip(&synthetic_trace(&[None]));
    stream.extend(gzip(br#"{"perfetto_manifest": {"version": 1}}"#));
    let e = check_archive(&stream).unwrap_err();
    assert!(matches!(e, ArchiveError::ManifestNotFirst { .. }), "{e}");
    // First is fine.
    let mut stream = gzip(br#"{"perfetto_manifest": {"version": 1}}"#);
    stream.extend(gzip(&synthetic_trace(&[None])));
    assert!(check_archive(&stream).unwrap().manifest.is_some());
}

#[test]
fn error_machine_and_machines() {
    let mut a = two_files();
    a.file("a.pftrace")
        .unwrap()
        .machine("phone")
        .machines([(0, "phone")]);
    assert_rejected(
        &a,
        |e| matches!(e, ArchiveError::MachineAndMachines { .. }),
        "machine and machines are mutually exclusive",
    );
}

#[test]
fn error_empty_machine_name() {
    let mut a = two_files();
    a.file("a.pftrace").unwrap().machine("");
    assert_rejected(
        &a,
        |e| matches!(e, ArchiveError::EmptyMachineName { .. }),
        "machine: name must be non-empty",
    );
    let mut a = relay();
    a.file("relay.pftrace")
        .unwrap()
        .machines([(0, "host"), (7, "")]);
    assert_rejected(
        &a,
        |e| matches!(e, ArchiveError::EmptyMachineName { .. }),
        "name must be non-empty",
    );
}

#[test]
fn error_machine_id_out_of_range() {
    for id in [-1i64, 1 << 32] {
        let mut a = relay();
        a.file("relay.pftrace")
            .unwrap()
            .machines([(0, "host"), (7, "vm"), (id, "x")]);
        assert_rejected(
            &a,
            |e| matches!(e, ArchiveError::MachineIdOutOfRange { .. }),
            "machines: id must be in [0, 4294967295]",
        );
    }
}

#[test]
fn error_undeclared_machine_id() {
    let mut a = relay();
    a.file("relay.pftrace").unwrap().machines([(0, "host")]);
    assert_rejected(
        &a,
        |e| matches!(e, ArchiveError::UndeclaredMachineId { id: 7, .. }),
        "undeclared machine id 7",
    );
    // Declaring it is enough.
    let mut a = relay();
    a.file("relay.pftrace")
        .unwrap()
        .machines([(0, "host"), (7, "vm")]);
    a.validate().unwrap();
}

#[test]
fn error_machine_on_multi_machine_file() {
    let mut a = relay();
    a.file("relay.pftrace").unwrap().machine("host");
    assert_rejected(
        &a,
        |e| matches!(e, ArchiveError::MachineOnMultiMachineFile { ids, .. } if ids == &[7]),
        "is a multi-machine trace",
    );
}

#[test]
fn error_clocks_without_sync_to() {
    let mut a = two_files();
    a.file("b.json").unwrap().offset_ns(5);
    assert_rejected(
        &a,
        |e| matches!(e, ArchiveError::ClocksWithoutSyncTo { .. }),
        "clocks: a sync_to block is required",
    );
}

#[test]
fn error_sync_to_without_file() {
    let mut a = two_files();
    a.file("b.json")
        .unwrap()
        .reference_clock(Some(Clock::Boottime));
    assert_rejected(
        &a,
        |e| matches!(e, ArchiveError::SyncToWithoutFile { .. }),
        "clocks: sync_to.file is required",
    );
}

#[test]
fn error_sync_to_unknown_file() {
    let mut a = two_files();
    a.file("b.json").unwrap().sync_to("phone.pftrace", None);
    assert_rejected(
        &a,
        |e| matches!(e, ArchiveError::UnknownFile { file, .. } if file == "phone.pftrace"),
        "sync_to.file names unknown file 'phone.pftrace'. It must match the path of an entry in the files array",
    );
    let mut a = two_files();
    a.trace_time(Clock::Boottime, Some("nope.pftrace"), None);
    assert_rejected(
        &a,
        |e| matches!(e, ArchiveError::UnknownFile { .. }),
        "trace_time: file names unknown file 'nope.pftrace'",
    );
}

#[test]
fn error_machine_without_file() {
    let mut a = two_files();
    a.file("b.json").unwrap().sync_to_machine("phone");
    assert_rejected(
        &a,
        |e| matches!(e, ArchiveError::MachineWithoutFile { .. }),
        "a machine name alone is ambiguous",
    );
    let mut a = two_files();
    a.trace_time(Clock::Boottime, None, Some("phone"));
    assert_rejected(
        &a,
        |e| matches!(e, ArchiveError::MachineWithoutFile { .. }),
        "a machine name alone is ambiguous",
    );
}

#[test]
fn error_reference_is_multi_machine() {
    let mut a = relay();
    a.file("relay.pftrace")
        .unwrap()
        .machines([(0, "host"), (7, "vm")]);
    a.file("a.pftrace")
        .unwrap()
        .sync_to("relay.pftrace", Some(Clock::Boottime));
    assert_rejected(
        &a,
        |e| matches!(e, ArchiveError::ReferenceIsMultiMachine { .. }),
        "'relay.pftrace' is a multi-machine trace; also name the machine",
    );
    // Naming it resolves it (the offset between two machines is then computed
    // from the relay's snapshots of machine "vm").
    a.file("a.pftrace")
        .unwrap()
        .sync_to_machine("vm")
        .offset_ns(0);
    a.validate().unwrap();
}

#[test]
fn error_machine_not_declared() {
    let mut a = relay();
    a.file("relay.pftrace")
        .unwrap()
        .machines([(0, "host"), (7, "vm")]);
    a.file("a.pftrace")
        .unwrap()
        .sync_to("relay.pftrace", Some(Clock::Boottime))
        .sync_to_machine("phone");
    assert_rejected(
        &a,
        |e| matches!(e, ArchiveError::MachineNotDeclared { machine, file, .. } if machine == "phone" && file == "relay.pftrace"),
        "'phone' is not a machine declared by file 'relay.pftrace'",
    );
}

#[test]
fn error_source_is_multi_machine() {
    let mut a = relay();
    a.file("relay.pftrace")
        .unwrap()
        .machines([(0, "host"), (7, "vm")])
        .sync_to("a.pftrace", Some(Clock::Boottime));
    assert_rejected(
        &a,
        |e| matches!(e, ArchiveError::SourceIsMultiMachine { .. }),
        "file 'relay.pftrace' is a multi-machine trace; name which machine the clock is on",
    );
    a.file("relay.pftrace")
        .unwrap()
        .clock_machine("vm")
        .offset_ns(10);
    a.validate().unwrap();
}

#[test]
fn error_offset_not_an_integer_or_out_of_range() {
    let mut a = two_files();
    a.file("b.json")
        .unwrap()
        .sync_to("a.pftrace", None)
        .offset_ns(i64::MIN);
    assert_rejected(
        &a,
        |e| matches!(e, ArchiveError::OffsetOutOfRange { .. }),
        "offset_ns is out of range",
    );
    for bad in ["1.5", "\"250\"", "1e3"] {
        let text = format!(
            r#"{{"perfetto_manifest": {{"version": 1, "files": [{{"path": "b.json", "clocks": {{"sync_to": {{"file": "a.pftrace", "clock": "BOOTTIME"}}, "offset_ns": {bad}}}}}]}}}}"#
        );
        let e = Manifest::from_json(&text).unwrap_err();
        assert!(
            matches!(e, ArchiveError::OffsetNotInteger { .. }),
            "{bad}: {e}"
        );
        assert!(e.to_string().contains("offset_ns must be an integer"));
    }
    let text = r#"{"perfetto_manifest": {"version": 1, "files": [{"path": "b.json", "clocks": {"sync_to": {"file": "a.pftrace"}, "offset_ns": -9223372036854775808}}]}}"#;
    assert!(matches!(
        Manifest::from_json(text),
        Err(ArchiveError::OffsetOutOfRange { .. })
    ));
}

#[test]
fn error_override_on_archive_or_manifest() {
    let mut inner = Archive::new();
    inner.add_bytes("b.json", JSON.to_vec());
    let mut zip = Vec::new();
    inner.write_zip_to(&mut zip).unwrap();
    let mut a = two_files();
    a.add_bytes("inner.zip", zip.clone()).machine("phone");
    assert_rejected(
        &a,
        |e| matches!(e, ArchiveError::OverrideOnContainer { kind, .. } if kind.contains("ZIP")),
        "overrides on it are rejected",
    );
    let mut a = two_files();
    a.add_bytes(
        "other_manifest.json",
        br#"{"perfetto_manifest": {"version": 1}}"#.to_vec(),
    )
    .sync_to("a.pftrace", None);
    assert_rejected(
        &a,
        |e| matches!(e, ArchiveError::OverrideOnContainer { .. }),
        "perfetto_manifest",
    );
    // Without an override a nested archive is still refused.
    let mut a = two_files();
    a.add_bytes("inner.zip", zip);
    assert_rejected(
        &a,
        |e| matches!(e, ArchiveError::NestedArchive { .. }),
        "archives must not nest",
    );
    // In an archive read back: the manifest overriding the nested archive.
    let mut tar = Vec::new();
    inner.write_tar_to(&mut tar).unwrap();
    let e = checked(&[
        ("perfetto_manifest.json", br#"{"perfetto_manifest": {"version": 1, "files": [{"path": "x.tar", "machine": {"name": "m"}}]}}"#),
        ("x.tar", &tar),
    ])
    .unwrap_err();
    assert!(
        matches!(
            e,
            ArchiveError::NestedArchive { .. } | ArchiveError::OverrideOnContainer { .. }
        ),
        "{e}"
    );
    let infos = [MemberInfo {
        name: "x.tar".into(),
        kind: MemberKind::Tar,
        len: 1,
    }];
    let m = Manifest::from_json(r#"{"perfetto_manifest": {"version": 1, "files": [{"path": "x.tar", "machine": {"name": "m"}}]}}"#).unwrap();
    assert!(matches!(
        m.validate(&infos),
        Err(ArchiveError::OverrideOnContainer { .. })
    ));
}

#[test]
fn error_pinning_a_file_with_clock_snapshots() {
    let mut a = two_files();
    a.add_bytes("c.pftrace", synthetic_trace(&[None]))
        .sync_to("a.pftrace", None);
    assert_rejected(
        &a,
        |e| matches!(e, ArchiveError::PinnedFileHasClocks { .. }),
        "clock overrides require the trace to use a single clock",
    );
    // Relating it instead is accepted.
    a.file("c.pftrace")
        .unwrap()
        .sync_to("a.pftrace", Some(Clock::Boottime));
    a.validate().unwrap();
}

// ------------------------------------------- container rules and our own

#[test]
fn member_names_and_contents_are_checked() {
    type Case = (Archive, fn(&ArchiveError) -> bool);
    let cases: Vec<Case> = vec![
        (
            {
                let mut a = two_files();
                a.add_bytes(".hidden.json", JSON.to_vec());
                a
            },
            |e| matches!(e, ArchiveError::InvalidMemberName { .. }),
        ),
        (
            {
                let mut a = two_files();
                a.add_bytes("__MACOSX/._x.json", JSON.to_vec());
                a
            },
            |e| matches!(e, ArchiveError::InvalidMemberName { .. }),
        ),
        (
            {
                let mut a = two_files();
                a.add_bytes("/abs.json", JSON.to_vec());
                a
            },
            |e| matches!(e, ArchiveError::InvalidMemberName { .. }),
        ),
        (
            {
                let mut a = two_files();
                a.add_bytes("b.json", JSON.to_vec());
                a
            },
            |e| matches!(e, ArchiveError::DuplicateMember(_)),
        ),
        (
            {
                let mut a = two_files();
                a.add_bytes("perfetto_manifest.json", JSON.to_vec());
                a
            },
            |e| matches!(e, ArchiveError::DuplicateMember(_)),
        ),
        (
            {
                let mut a = two_files();
                a.add_bytes("empty.json", Vec::new());
                a
            },
            |e| matches!(e, ArchiveError::EmptyMember(_)),
        ),
        (
            {
                let mut a = two_files();
                a.add_bytes("none.json", b"[]".to_vec());
                a
            },
            |e| matches!(e, ArchiveError::UndetectableMember(_)),
        ),
        (
            {
                let mut a = two_files();
                a.file("b.json").unwrap().sync_to("b.json", None);
                a
            },
            |e| matches!(e, ArchiveError::SelfReference { .. }),
        ),
        (
            {
                let mut a = two_files();
                a.file("b.json")
                    .unwrap()
                    .sync_to("a.pftrace", Some(Clock::Boottime));
                a
            },
            |e| matches!(e, ArchiveError::ClockOnClocklessFile { .. }),
        ),
        (
            {
                let mut a = two_files();
                a.file("b.json")
                    .unwrap()
                    .sync_to("a.pftrace", None)
                    .reference_clock(None);
                a
            },
            |e| matches!(e, ArchiveError::PrivateTimelineOfClockedFile { .. }),
        ),
    ];
    for (a, check) in cases {
        assert_rejected(&a, check, "");
    }
    // A 100-byte name fits a ZIP but not our TAR.
    let mut a = two_files();
    a.add_bytes(format!("{}.json", "n".repeat(95)), JSON.to_vec());
    assert!(matches!(
        a.write_tar_to(Vec::new()),
        Err(ArchiveError::InvalidMemberName { .. })
    ));
    let mut zip = Vec::new();
    a.write_zip_to(&mut zip).unwrap();
    assert_eq!(read_members(&zip).unwrap().len(), 4);
}

#[test]
fn written_archives_read_back() {
    let mut a = two_files();
    a.file("a.pftrace").unwrap().machine("phone");
    a.file("b.json").unwrap().machine("phone");
    a.attribute("n", -3)
        .attribute("s", "x\"y")
        .mtime(1_700_000_000);
    let mut tar = Vec::new();
    a.write_tar_to(&mut tar).unwrap();
    let mut again = Vec::new();
    a.write_tar_to(&mut again).unwrap();
    assert_eq!(tar, again, "deterministic with a fixed mtime");
    let members = read_members(&tar).unwrap();
    assert_eq!(
        members.iter().map(|m| m.0.as_str()).collect::<Vec<_>>(),
        ["perfetto_manifest.json", "a.pftrace", "b.json"]
    );
    let report = check_archive(&tar).unwrap();
    let (_, m) = report.manifest.unwrap();
    assert_eq!(m, a.manifest().unwrap());
    let c = m.entry("b.json").unwrap().clocks.clone().unwrap();
    assert_eq!(
        (c.clock, c.offset_ns),
        (None, Some(0)),
        "same machine: pinned at 0"
    );
    // Auto clocks off: the JSON file keeps no override.
    a.auto_clocks(false);
    assert!(a
        .manifest()
        .unwrap()
        .entry("b.json")
        .unwrap()
        .clocks
        .is_none());
    // A foreign JSON file is left alone too.
    let mut f = two_files();
    f.file("b.json").unwrap().foreign();
    assert!(f
        .manifest()
        .unwrap()
        .entry("b.json")
        .unwrap()
        .clocks
        .is_none());
    // Stored ZIP.
    let mut zip = Vec::new();
    a.zip_method(ringtrace::archive::ZipMethod::Stored)
        .write_zip_to(&mut zip)
        .unwrap();
    assert_eq!(read_members(&zip).unwrap()[2].1, JSON);
}

#[test]
fn the_python_validator_is_not_vacuous() {
    // What our writer refuses, written by Python's tarfile: the independent
    // validator must flag each violation too.
    let dir = scratch("validator");
    let proto = synthetic_trace(&[None, Some(7)]);
    let manifest = br#"{"perfetto_manifest": {"version": 1, "trace_time": {"clock": "UTC"},
        "files": [{"path": "a.pftrace", "machine": {"name": "x"}, "clocks": {"sync_to": {"file": "nope"}, "offset_ns": 1.5}},
                  {"path": "b.json", "machine": {"name": ""}, "machines": [{"id": -1, "name": "y"}]}],
        "attributes": {"k": [1]}}}"#;
    let tar = python_tar(
        &dir,
        &[
            ("perfetto_manifest.json", manifest),
            ("a.pftrace", &proto),
            ("b.json", JSON),
            (".hidden", b"x"),
        ],
    );
    let path = dir.join("bad.tar");
    std::fs::write(&path, tar).unwrap();
    let v = python_validation(&path);
    let errors: Vec<&str> = v["errors"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for expected in [
        "dot-named member",
        "trace_time clock",
        "machine on multi-machine a.pftrace",
        "sync_to: unknown file nope",
        "offset_ns not an integer",
        "pinned a.pftrace has clock snapshots",
        "machine and machines on b.json",
        "bad machine name on b.json",
        "machine id -1",
        "attribute k",
    ] {
        assert!(
            errors.iter().any(|e| e.contains(expected)),
            "validator missed {expected:?}: {errors:?}"
        );
    }
    // And our reader refuses the same archive.
    assert!(check_archive(&std::fs::read(&path).unwrap()).is_err());
    let _ = std::fs::remove_dir_all(&dir);
}

// ------------------------------------------- members no reader recognizes

/// Issue 17 part 5: 11 bytes of text are no trace any Perfetto reader
/// recognizes; trace_processor fails the whole archive ("Unknown trace
/// type"), so writing refuses them unless told otherwise, and an existing
/// archive holding one fails the check.
#[test]
fn error_member_no_reader_recognizes() {
    let mut a = two_files();
    a.add_bytes("junk.pftrace", b"hello world".to_vec());
    assert_rejected(
        &a,
        |e| matches!(e, ArchiveError::UnrecognizedMember(n) if n == "junk.pftrace"),
        "archive member 'junk.pftrace' is not a trace",
    );
    // Told otherwise, it is packed, and the check of the result still says no.
    a.allow_unrecognized(true);
    let mut tar = Vec::new();
    a.write_tar_to(&mut tar).unwrap();
    assert!(read_members(&tar)
        .unwrap()
        .iter()
        .any(|(n, d)| n == "junk.pftrace" && d == b"hello world"));
    let e = check_archive(&tar).expect_err("an unrecognized member must fail the check");
    assert!(
        matches!(&e, ArchiveError::UnrecognizedMember(n) if n == "junk.pftrace"),
        "{e:?}"
    );
    // Formats trace_processor reads beside ours pass: systrace text, a ninja
    // log, `perf script` output.
    let r = checked(&[
        ("a.pftrace", &synthetic_trace(&[None])),
        ("sys.txt", b"# tracer: nop\n#\n"),
        ("build.log", b"# ninja log v5\n0\t10\t0\ta.o\tdeadbeef\n"),
        (
            "perf.txt",
            b"app 1234/1235 [001] 303057.417513:          1 cycles:\n",
        ),
    ])
    .unwrap();
    assert_eq!(r.members.len(), 4);
    assert!(r.members[1..].iter().all(|m| m.kind == MemberKind::Other));
}
