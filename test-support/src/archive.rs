//! What the archive tests share (those of `ringtrace-archive` and those of
//! `ringtrace` that record archives' members): the independent Python
//! validator of the manifest rules, archives made by Python's `tarfile`,
//! synthetic traces, and the check that an archive is refused for the right
//! reason.

use crate::{run_python, scratch};
use prost::Message;
use ringtrace_archive::{Archive, ArchiveError};
use ringtrace_protos::{clock_snapshot, ClockSnapshot, Trace, TracePacket};
use serde_json::Value;
use std::path::Path;

pub const JSON: &[u8] = br#"[{"name":"a","ph":"i","s":"t","ts":1.5,"pid":1,"tid":1}]"#;

/// Every rule of the manifest spec and of the archive container rules,
/// checked independently of our Rust code. Prints {"errors": [...], ...}.
pub const VALIDATOR: &str = r#"
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
pub fn python_validation(archive: &Path) -> Value {
    serde_json::from_str(&run_python(VALIDATOR, &[archive.to_str().unwrap()])).unwrap()
}

pub fn validate_with_python(archive: &Path) -> Value {
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

pub fn read_manifest(dir: &Path) -> Value {
    let text = std::fs::read_to_string(dir.join("perfetto_manifest.json")).unwrap();
    assert!(
        text.starts_with("{\"perfetto_manifest\""),
        "first key: {text}"
    );
    serde_json::from_str(&text).unwrap()
}

/// A Perfetto trace with one clock snapshot per given machine id (None: no
/// machine id on the packet).
pub fn synthetic_trace(machines: &[Option<u32>]) -> Vec<u8> {
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

/// `archive` must be rejected by `check`, as a TAR and as a ZIP, with a
/// message containing `text`, and leave no file behind.
pub fn assert_rejected(archive: &Archive, check: impl Fn(&ArchiveError) -> bool, text: &str) {
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
pub fn python_tar(dir: &Path, members: &[(&str, &[u8])]) -> Vec<u8> {
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

pub fn two_files() -> Archive {
    let mut a = Archive::new();
    a.add_bytes("a.pftrace", synthetic_trace(&[None]));
    a.add_bytes("b.json", JSON.to_vec());
    a
}
