//! The subset of Perfetto's trace schema that ringtrace writes, as prost types.
//!
//! This crate holds the `.proto` files under `proto/perfetto/trace/` (package
//! `perfetto.protos`, proto2) and the Rust types generated from them: the
//! [`Trace`] framing, the [`TracePacket`] envelope, [`TrackEvent`],
//! [`TrackDescriptor`], [`InternedData`], [`ClockSnapshot`], [`TraceStats`],
//! [`PerfSample`] (CPU stack samples) and
//! the messages they refer to. The files were written for ringtrace with the
//! official field numbers and types, so what these types encode is read by
//! Perfetto's trace_processor and UI, and can be decoded with the official
//! schema.
//!
//! No system `protoc` is needed: the build script parses the `.proto` files
//! with `protox`, a protobuf compiler written in Rust, and generates the code
//! with `prost-build`.
//!
//! # Wire details that matter to Perfetto
//!
//! - Every message is proto2, so optional scalars are `Option<T>` and a value
//!   of 0 is still written when it is `Some(0)`; Perfetto tests presence.
//! - No repeated scalar is packed: `category_iids`, `flow_ids`,
//!   `extra_counter_values` and the others are written with one tag per
//!   element, which is the only form Perfetto's decoder reads correctly.
//! - `flow_ids` and `terminating_flow_ids` are `fixed64`.
//! - Some official one-field or payload `oneof`s are plain optional fields
//!   here (wire-identical): `TracePacket`'s payloads (`track_event`,
//!   `track_descriptor`, `clock_snapshot`, `trace_stats`,
//!   `compressed_packets`), `trusted_packet_sequence_id`, and `TrackEvent`'s
//!   `name_iid` / `name`. Set at most one of each group. Prost encodes fields in
//!   field-number order, but a `oneof` at its lowest tag; plain fields keep
//!   the encoding identical to the canonical one.
//!
//! # Examples
//!
//! ```
//! use prost::Message;
//! use ringtrace_protos::{track_event, Trace, TracePacket, TrackEvent};
//!
//! let mut event = TrackEvent {
//!     track_uuid: Some(42),
//!     name: Some("a".to_owned()),
//!     ..Default::default()
//! };
//! event.set_type(track_event::Type::SliceBegin);
//! let trace = Trace {
//!     packet: vec![TracePacket {
//!         timestamp: Some(1000),
//!         trusted_packet_sequence_id: Some(1),
//!         track_event: Some(event),
//!         ..Default::default()
//!     }],
//! };
//! let bytes = trace.encode_to_vec();
//! assert_eq!(bytes[0], 0x0a); // every packet is field 1 of `Trace`
//! assert_eq!(Trace::decode(bytes.as_slice()).unwrap(), trace);
//! ```
#![forbid(unsafe_code)]

/// The generated code, at the path its proto package names.
pub mod perfetto {
    /// Package `perfetto.protos`.
    pub mod protos {
        #![allow(missing_docs)]
        include!(concat!(env!("OUT_DIR"), "/perfetto.protos.rs"));
    }
}

pub use perfetto::protos::*;

/// The encoded `google.protobuf.FileDescriptorSet` of the `.proto` files of
/// this crate (with source info), for reflection and schema checks.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/perfetto_protos_descriptor.bin"));

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    fn hex(bytes: &[u8]) -> String {
        bytes
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn unhex(s: &str) -> Vec<u8> {
        s.split_whitespace()
            .map(|b| u8::from_str_radix(b, 16).unwrap())
            .collect()
    }

    /// The verified encoding from the writer notes, section 1.1.
    #[test]
    fn slice_begin_packet_matches_reference_bytes() {
        let mut event = TrackEvent {
            track_uuid: Some(42),
            name: Some("a".to_owned()),
            ..Default::default()
        };
        event.set_type(track_event::Type::SliceBegin);
        let trace = Trace {
            packet: vec![TracePacket {
                timestamp: Some(1000),
                trusted_packet_sequence_id: Some(1),
                track_event: Some(event),
                ..Default::default()
            }],
        };
        let expected = "0a 0f 40 e8 07 50 01 5a 08 48 01 58 2a ba 01 01 61";
        assert_eq!(hex(&trace.encode_to_vec()), expected);
        assert_eq!(Trace::decode(unhex(expected).as_slice()).unwrap(), trace);
    }

    /// proto2 presence: an explicit zero is written, an absent field is not.
    #[test]
    fn explicit_zero_is_written() {
        let packet = TracePacket {
            timestamp: Some(0),
            track_event: Some(TrackEvent {
                track_uuid: Some(0),
                counter_value_field: Some(track_event::CounterValueField::CounterValue(0)),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(hex(&packet.encode_to_vec()), "40 00 5a 05 58 00 f0 01 00");
        assert_eq!(TracePacket::default().encoded_len(), 0);
    }

    /// Repeated scalars are unpacked; flow ids are fixed64 (wire type 1).
    #[test]
    fn repeated_scalars_are_unpacked_and_flow_ids_fixed64() {
        let event = TrackEvent {
            category_iids: vec![1, 2],
            flow_ids: vec![1, 0x0102_0304_0506_0708],
            terminating_flow_ids: vec![3],
            extra_counter_values: vec![-1, 5],
            extra_double_counter_values: vec![1.0],
            ..Default::default()
        };
        let expected = [
            "18 01 18 02",                            // category_iids (3)
            "60 ff ff ff ff ff ff ff ff ff 01 60 05", // extra_counter_values (12)
            "f1 02 00 00 00 00 00 00 f0 3f",          // extra_double_counter_values (46)
            "f9 02 01 00 00 00 00 00 00 00",          // flow_ids (47)
            "f9 02 08 07 06 05 04 03 02 01",          // flow_ids (47)
            "81 03 03 00 00 00 00 00 00 00",          // terminating_flow_ids (48)
        ]
        .join(" ");
        assert_eq!(hex(&event.encode_to_vec()), expected);
        assert_eq!(
            TrackEvent::decode(unhex(&expected).as_slice()).unwrap(),
            event
        );

        let defaults = TrackEventDefaults {
            track_uuid: Some(7),
            extra_counter_track_uuids: vec![8, 9],
            extra_double_counter_track_uuids: vec![10],
        };
        assert_eq!(
            hex(&defaults.encode_to_vec()),
            "58 07 f8 01 08 f8 01 09 e8 02 0a"
        );
    }

    /// Schema guard: proto2 everywhere, no repeated scalar declared packed.
    #[test]
    fn schema_is_proto2_and_never_packed() {
        use prost_types::field_descriptor_proto::{Label, Type};
        use prost_types::{DescriptorProto, FileDescriptorSet};

        fn check(msg: &DescriptorProto, path: &str, seen: &mut usize) {
            let path = format!("{path}.{}", msg.name());
            for field in &msg.field {
                *seen += 1;
                let scalar = !matches!(field.r#type(), Type::Message | Type::Group);
                if field.label() == Label::Repeated && scalar {
                    let packed = field.options.as_ref().and_then(|o| o.packed);
                    assert_ne!(packed, Some(true), "{path}.{} is packed", field.name());
                }
            }
            for nested in &msg.nested_type {
                check(nested, &path, seen);
            }
        }

        let fds = FileDescriptorSet::decode(FILE_DESCRIPTOR_SET).unwrap();
        let mut seen = 0;
        for file in &fds.file {
            assert_eq!(file.syntax.as_deref().unwrap_or("proto2"), "proto2");
            assert_eq!(file.package(), "perfetto.protos");
            for msg in &file.message_type {
                check(msg, "perfetto.protos", &mut seen);
            }
        }
        assert!(seen > 200, "only {seen} fields found");
    }

    fn named(name: &str) -> Option<debug_annotation::NameField> {
        Some(debug_annotation::NameField::Name(name.to_owned()))
    }

    fn int(value: i64) -> Option<debug_annotation::Value> {
        Some(debug_annotation::Value::IntValue(value))
    }

    #[test]
    fn round_trip_interned_data_annotations_and_clocks() {
        use clock_snapshot::Clock;

        let snapshot = TracePacket {
            trusted_packet_sequence_id: Some(3),
            sequence_flags: Some(trace_packet::SequenceFlags::SeqIncrementalStateCleared as u32),
            first_packet_on_sequence: Some(true),
            clock_snapshot: Some(ClockSnapshot {
                clocks: vec![
                    Clock {
                        clock_id: Some(BuiltinClock::Boottime as u32),
                        timestamp: Some(1_000_000),
                        ..Default::default()
                    },
                    Clock {
                        clock_id: Some(64),
                        timestamp: Some(1_000),
                        is_incremental: Some(true),
                        unit_multiplier_ns: Some(1000),
                    },
                ],
                primary_trace_clock: Some(BuiltinClock::Boottime as i32),
            }),
            trace_packet_defaults: Some(TracePacketDefaults {
                timestamp_clock_id: Some(64),
                track_event_defaults: Some(TrackEventDefaults {
                    track_uuid: Some(99),
                    ..Default::default()
                }),
            }),
            ..Default::default()
        };

        let mut log = LogMessage {
            source_location_iid: Some(1),
            body_iid: Some(1),
            ..Default::default()
        };
        log.set_prio(log_message::Priority::PrioWarn);

        let mut event = TrackEvent {
            category_iids: vec![1],
            name_iid: Some(1),
            flow_ids: vec![u64::MAX],
            source_location_field: Some(track_event::SourceLocationField::SourceLocationIid(1)),
            log_message: Some(log),
            debug_annotations: vec![
                DebugAnnotation {
                    name_field: Some(debug_annotation::NameField::NameIid(1)),
                    value: Some(debug_annotation::Value::StringValueIid(1)),
                    ..Default::default()
                },
                DebugAnnotation {
                    name_field: named("d"),
                    dict_entries: vec![
                        DebugAnnotation {
                            name_field: named("a"),
                            value: int(1),
                            ..Default::default()
                        },
                        DebugAnnotation {
                            name_field: named("b"),
                            array_values: vec![
                                DebugAnnotation {
                                    value: int(-2),
                                    ..Default::default()
                                },
                                DebugAnnotation {
                                    value: Some(debug_annotation::Value::DoubleValue(0.5)),
                                    ..Default::default()
                                },
                                DebugAnnotation {
                                    dict_entries: vec![DebugAnnotation {
                                        name_field: named("deep"),
                                        value: Some(debug_annotation::Value::BoolValue(false)),
                                        ..Default::default()
                                    }],
                                    ..Default::default()
                                },
                            ],
                            ..Default::default()
                        },
                    ],
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        event.set_type(track_event::Type::Instant);

        let interned = TracePacket {
            timestamp: Some(5),
            trusted_packet_sequence_id: Some(3),
            sequence_flags: Some(trace_packet::SequenceFlags::SeqNeedsIncrementalState as u32),
            interned_data: Some(InternedData {
                event_categories: vec![EventCategory {
                    iid: Some(1),
                    name: Some("cat".to_owned()),
                }],
                event_names: vec![EventName {
                    iid: Some(1),
                    name: Some("evt".to_owned()),
                }],
                debug_annotation_names: vec![DebugAnnotationName {
                    iid: Some(1),
                    name: Some("k".to_owned()),
                }],
                debug_annotation_string_values: vec![InternedString {
                    iid: Some(1),
                    str: Some(b"v".to_vec()),
                }],
                source_locations: vec![SourceLocation {
                    iid: Some(1),
                    file_name: Some("src/main.rs".to_owned()),
                    function_name: Some("main".to_owned()),
                    line_number: Some(7),
                }],
                log_message_body: vec![LogMessageBody {
                    iid: Some(1),
                    body: Some("hello".to_owned()),
                }],
                ..Default::default()
            }),
            track_event: Some(event),
            ..Default::default()
        };

        let mut counter = CounterDescriptor {
            unit_multiplier: Some(1000),
            is_incremental: Some(true),
            ..Default::default()
        };
        counter.set_unit(counter_descriptor::Unit::SizeBytes);
        let mut descriptor = TrackDescriptor {
            uuid: Some(100),
            parent_uuid: Some(99),
            static_or_dynamic_name: Some(track_descriptor::StaticOrDynamicName::Name(
                "mem".to_owned(),
            )),
            counter: Some(counter),
            ..Default::default()
        };
        descriptor.set_sibling_merge_behavior(track_descriptor::SiblingMergeBehavior::None);
        let thread = TrackDescriptor {
            uuid: Some(99),
            thread: Some(ThreadDescriptor {
                pid: Some(5),
                tid: Some(-7),
                thread_name: Some("w".to_owned()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let stats = TracePacket {
            trusted_packet_sequence_id: Some(3),
            trace_stats: Some(TraceStats {
                buffer_stats: vec![trace_stats::BufferStats {
                    bytes_written: Some(4096),
                    chunks_discarded: Some(2),
                    ..Default::default()
                }],
                writer_stats: vec![trace_stats::WriterStats {
                    sequence_id: Some(3),
                    buffer: Some(0),
                }],
                ..Default::default()
            }),
            previous_packet_dropped: Some(
                trace_packet::DataLossReason::DataLossPresent as u32
                    | trace_packet::DataLossReason::DataLossOverwrite as u32,
            ),
            ..Default::default()
        };

        let trace = Trace {
            packet: vec![
                snapshot,
                TracePacket {
                    trusted_packet_sequence_id: Some(3),
                    track_descriptor: Some(thread),
                    ..Default::default()
                },
                TracePacket {
                    trusted_packet_sequence_id: Some(3),
                    track_descriptor: Some(descriptor),
                    ..Default::default()
                },
                interned,
                stats,
            ],
        };

        let bytes = trace.encode_to_vec();
        let decoded = Trace::decode(bytes.as_slice()).unwrap();
        assert_eq!(decoded, trace);

        // Packets can also be read one at a time: a trace is a concatenation
        // of `0x0a <len> <packet>` records.
        let mut rest = bytes.as_slice();
        let mut count = 0;
        while !rest.is_empty() {
            assert_eq!(rest[0], 0x0a);
            rest = &rest[1..];
            let packet = TracePacket::decode_length_delimited(&mut rest).unwrap();
            assert_eq!(packet, trace.packet[count]);
            count += 1;
        }
        assert_eq!(count, trace.packet.len());

        let event = decoded.packet[3].track_event.as_ref().unwrap();
        assert_eq!(event.r#type(), track_event::Type::Instant);
        assert_eq!(
            event.log_message.as_ref().unwrap().prio(),
            log_message::Priority::PrioWarn
        );
        let clocks = decoded.packet[0].clock_snapshot.as_ref().unwrap();
        assert_eq!(clocks.primary_trace_clock(), BuiltinClock::Boottime);
    }
}
