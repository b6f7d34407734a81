//! Unit tests of the manifest: JSON round trips and validation.

use super::*;

#[test]
fn json_round_trips_with_the_manifest_key_first() {
    let m = Manifest {
        version: Some(1),
        trace_time: Some(TraceTime {
            clock: Clock::Boottime,
            file: Some("a.pftrace".into()),
            machine: None,
        }),
        files: vec![
            FileEntry {
                path: "a.pftrace".into(),
                machine: Some("phone \"1\"".into()),
                ..Default::default()
            },
            FileEntry {
                path: "relay.pftrace".into(),
                machines: Some(vec![(0, "host".into()), (7, "vm".into())]),
                ..Default::default()
            },
            FileEntry {
                path: "b.json".into(),
                clocks: Some(Clocks {
                    sync_to: Some(SyncTo {
                        file: Some("a.pftrace".into()),
                        machine: None,
                        clock: Some(Clock::Boottime),
                    }),
                    offset_ns: Some(-250),
                    ..Default::default()
                }),
                ..Default::default()
            },
        ],
        attributes: vec![
            ("run".into(), AttrValue::Int(42)),
            ("who".into(), AttrValue::Str("ci".into())),
        ],
    };
    let text = m.to_json();
    assert!(text.starts_with("{\"perfetto_manifest\": {"));
    let back = Manifest::from_json(&text).unwrap();
    // serde_json's map orders attribute keys; these are already sorted.
    assert_eq!(back, m);
}
