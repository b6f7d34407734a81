//! The container rules (member names and contents), archives written and read
//! back, and a check that the Python validator the other tests trust does
//! reject what it should.

use ringtrace_archive::{check_archive, read_members, Archive, ArchiveError, Clock, MemberKind};
use ringtrace_test_support::archive::*;
use ringtrace_test_support::scratch;
use serde_json::Value;

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
    a.zip_method(ringtrace_archive::ZipMethod::Stored)
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
    let dir = scratch("formats");
    let r = check_archive(&python_tar(
        &dir,
        &[
            ("a.pftrace", &synthetic_trace(&[None])),
            ("sys.txt", b"# tracer: nop\n#\n"),
            ("build.log", b"# ninja log v5\n0\t10\t0\ta.o\tdeadbeef\n"),
            (
                "perf.txt",
                b"app 1234/1235 [001] 303057.417513:          1 cycles:\n",
            ),
        ],
    ))
    .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(r.members.len(), 4);
    assert!(r.members[1..].iter().all(|m| m.kind == MemberKind::Other));
}
