//! One test per error condition of the manifest spec's table: each must be
//! caught by our validation, before anything is written, and our verdict must
//! match the independent Python validator's.

use ringtrace_archive::{
    check_archive, Archive, ArchiveError, Clock, Manifest, MemberInfo, MemberKind,
};
use ringtrace_test_support::archive::*;
use ringtrace_test_support::scratch;
use std::io::Write;

// --------------------------------------------------- synthetic traces, errors

fn checked(members: &[(&str, &[u8])]) -> Result<ringtrace_archive::ArchiveReport, ArchiveError> {
    let dir = scratch("raw");
    let tar = python_tar(&dir, members);
    let _ = std::fs::remove_dir_all(&dir);
    check_archive(&tar)
}

/// A multi-machine trace (packets from machines 0 and 7) beside a plain one.
fn relay() -> Archive {
    let mut a = Archive::new();
    a.add_bytes("relay.pftrace", synthetic_trace(&[None, Some(7)]));
    a.add_bytes("a.pftrace", synthetic_trace(&[None]));
    a
}

/// [`relay`] with both its machines declared: 0 as "host", 7 as "vm".
fn declared_relay() -> Archive {
    let mut a = relay();
    a.file("relay.pftrace")
        .unwrap()
        .machines([(0, "host"), (7, "vm")]);
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
    let a = declared_relay();
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
    let mut a = declared_relay();
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
    let mut a = declared_relay();
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
    let mut a = declared_relay();
    a.file("relay.pftrace")
        .unwrap()
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
