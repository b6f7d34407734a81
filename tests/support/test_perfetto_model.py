"""Self-tests of perfetto_model.py: small traces built with the official schema, checked against
what trace_processor imports (the conformance cases of the Perfetto writer notes §5, numbered as
there). Run from this directory: python3 -m unittest
"""
import base64
import json
import os
import subprocess
import sys
import tempfile
import unittest

from google.protobuf import json_format
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import perfetto_model  # noqa: E402

CLEARED, NEEDS = 1, 2
BEGIN, END, INSTANT, COUNTER = 1, 2, 3, 4
S = 1          # the sequence most tests write on
DESC_SEQ = 100  # a sequence that only carries plain track descriptors (no incremental state)


# -- building traces ---------------------------------------------------------------------------

def varint(n):
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def frame(body):
    """notes §1.1: one Trace.packet record."""
    return b"\x0a" + varint(len(body)) + body


def P(seq=None, ts=None, flags=None, **fields):
    """A TracePacket from field names (json_format names; bytes fields in base64)."""
    d = dict(fields)
    if seq is not None:
        d["trusted_packet_sequence_id"] = seq
    if ts is not None:
        d["timestamp"] = ts
    if flags is not None:
        d["sequence_flags"] = flags
    return json_format.ParseDict(d, pb.TracePacket())


def ev(type_, track=None, **fields):
    d = {"type": type_}
    if track is not None:
        d["track_uuid"] = track
    d.update(fields)
    return d


def b64(s):
    return base64.b64encode(s.encode()).decode()


def desc(uuid, seq=DESC_SEQ, **fields):
    return P(seq=seq, track_descriptor=dict(uuid=uuid, **fields))


def thread(uuid, pid, tid, name=None, seq=DESC_SEQ):
    t = {"pid": pid, "tid": tid}
    if name is not None:
        t["thread_name"] = name
    return desc(uuid, seq=seq, thread=t)


def trace(*packets):
    return b"".join(frame(p if isinstance(p, bytes) else p.SerializeToString()) for p in packets)


def model(*packets):
    return perfetto_model.analyze(trace(*packets))


def run_cli(data):
    with tempfile.NamedTemporaryFile(suffix=".pftrace", delete=False) as f:
        f.write(data)
    try:
        proc = subprocess.run([sys.executable, os.path.join(HERE, "perfetto_model.py"), f.name],
                              capture_output=True, text=True, check=False)
    finally:
        os.unlink(f.name)
    return proc


T, T2, P_UUID, C = 10, 11, 20, 30
CLOCK_SNAPSHOT_15 = {"clocks": [{"clock_id": 6, "timestamp": 1_000_000},
                                {"clock_id": 64, "timestamp": 1_000, "is_incremental": True,
                                 "unit_multiplier_ns": 1000}]}


def incremental_clock_start(seq=S, track=T, snapshot=CLOCK_SNAPSHOT_15):
    """Case 15's first packet: CLEARED + defaults{clock 64, track} + snapshot (nothing else)."""
    return P(seq=seq, flags=CLEARED,
             trace_packet_defaults={"timestamp_clock_id": 64, "track_event_defaults": {"track_uuid": track}},
             clock_snapshot=snapshot)


class Base(unittest.TestCase):
    def assertClean(self, m):
        self.assertEqual(m["errors"], [], m["errors"])

    def assertErrorLike(self, m, text):
        self.assertTrue(any(text in e for e in m["errors"]), f"no error containing {text!r}: {m['errors']}")

    def assertWarningLike(self, m, text):
        self.assertTrue(any(text in w for w in m["warnings"]), f"no warning containing {text!r}: {m['warnings']}")

    def names(self, m):
        return [s["name"] for s in m["slices"]]


# -- 5.A framing / encoding --------------------------------------------------------------------

class Framing(Base):
    def test_example_encoding_of_the_notes(self):
        data = trace(P(seq=1, ts=1000, track_event=ev(BEGIN, 42, name="a")))
        self.assertEqual(data.hex(), "0a0f40e80750015a08480158" "2aba010161")
        m = perfetto_model.analyze(data)
        self.assertClean(m)
        self.assertEqual(m["events"][0]["ts"], 1000)
        self.assertEqual(m["events"][0]["name"], "a")

    def test_first_byte_must_be_0x0a(self):  # case 1
        m = perfetto_model.analyze(P(seq=1, ts=1, track_event=ev(INSTANT, 0, name="x")).SerializeToString())
        self.assertErrorLike(m, "not 0x0A")

    def test_truncated_tail_is_tolerated(self):  # case 5
        data = trace(thread(T, 5, 7), P(seq=S, ts=1000, track_event=ev(INSTANT, T, name="a")),
                     P(seq=S, ts=2000, track_event=ev(INSTANT, T, name="b")))
        m = perfetto_model.analyze(data[:-3])
        self.assertClean(m)
        self.assertTrue(m["truncated_tail"])
        self.assertEqual(m["packets"], 2)
        self.assertEqual(self.names(m), ["a"])
        self.assertFalse(perfetto_model.analyze(data)["truncated_tail"])

    def test_truncated_length_varint(self):
        data = trace(thread(T, 5, 7)) + b"\x0a\x80"
        m = perfetto_model.analyze(data)
        self.assertTrue(m["truncated_tail"])
        self.assertClean(m)

    def test_python_serialization_is_unpacked_and_fixed64(self):  # case 3
        m = model(thread(T, 5, 7),
                  P(seq=S, flags=CLEARED, interned_data={"event_categories": [{"iid": 1, "name": "a"},
                                                                              {"iid": 2, "name": "b"}]}),
                  P(seq=S, ts=5, flags=NEEDS, track_event=ev(INSTANT, T, name="x", category_iids=[1, 2],
                                                              flow_ids=[7, 8])))
        self.assertClean(m)
        self.assertEqual(m["events"][0]["categories"], ["a", "b"])
        self.assertEqual(m["events"][0]["flow_ids"], [7, 8])

    def test_packed_category_iids_negative_control(self):
        # TrackEvent {type: INSTANT, track_uuid: 0, category_iids: packed [1, 2], name: "x"}
        track_event = b"\x48\x03" + b"\x58\x00" + b"\x1a\x02\x01\x02" + b"\xba\x01\x01x"
        body = b"\x40\x05" + b"\x50\x01" + b"\x5a" + varint(len(track_event)) + track_event
        parsed = pb.TracePacket.FromString(body)
        self.assertEqual(list(parsed.track_event.category_iids), [1, 2])  # python accepts it...
        m = perfetto_model.analyze(frame(body))
        self.assertErrorLike(m, "TrackEvent.category_iids (field 3) is packed")  # ...TP does not
        proc = run_cli(frame(body))
        self.assertEqual(proc.returncode, 1)

    def test_packed_extra_counter_lists_negative_control(self):
        for field in (12, 31, 45):
            track_event = b"\x48\x03" + varint(field << 3 | 2) + b"\x02\x01\x02"
            body = b"\x40\x05\x50\x01\x5a" + varint(len(track_event)) + track_event
            m = perfetto_model.analyze(frame(body))
            self.assertErrorLike(m, f"(field {field}) is packed")
        doubles = b"\x00" * 8 + b"\x00" * 7 + b"\x3f"
        track_event = b"\x48\x03" + varint(46 << 3 | 2) + varint(len(doubles)) + doubles
        body = b"\x40\x05\x50\x01\x5a" + varint(len(track_event)) + track_event
        self.assertErrorLike(perfetto_model.analyze(frame(body)), "extra_double_counter_values (field 46) is packed")

    def test_flow_ids_as_varint_negative_control(self):
        for field, name in ((47, "flow_ids"), (48, "terminating_flow_ids")):
            track_event = b"\x48\x03" + varint(field << 3) + b"\x01"
            body = b"\x40\x05\x50\x01\x5a" + varint(len(track_event)) + track_event
            m = perfetto_model.analyze(frame(body))
            self.assertErrorLike(m, f"{name} (field {field}) must be fixed64 (wire type 1)")

    def test_zero_values_are_present(self):  # case 4
        m = model(desc(C, counter={}), P(seq=S, ts=0, track_event=ev(COUNTER, C, counter_value=0)))
        self.assertClean(m)
        self.assertEqual(m["counters"], [{"track_uuid": C, "ts": 0, "value": 0}])

    def test_event_without_timestamp(self):
        m = model(P(seq=S, track_event=ev(INSTANT, 0, name="x")))
        self.assertErrorLike(m, "without timestamp")
        self.assertEqual(m["slices"], [])

    def test_event_without_sequence_id(self):  # case 6
        m = model(P(ts=5, track_event=ev(INSTANT, 0, name="x")))
        self.assertErrorLike(m, "without trusted_packet_sequence_id")
        self.assertEqual(m["slices"], [])

    def test_malformed_packet_is_fatal(self):
        m = perfetto_model.analyze(frame(b"\x40") + trace(P(seq=1, ts=1, track_event=ev(INSTANT, 0, name="x"))))
        self.assertIsNotNone(m["fatal"])
        self.assertEqual(m["events"], [])

    def test_needs_flag_without_sequence_is_fatal(self):
        m = model(P(ts=1, flags=NEEDS, track_event=ev(INSTANT, 0, name="x")))
        self.assertIsNotNone(m["fatal"])


# -- 5.B sequences / interning / incremental state ---------------------------------------------

INTERN_FOO = {"event_names": [{"iid": 1, "name": "foo"}], "event_categories": [{"iid": 1, "name": "cat"}]}


class Sequences(Base):
    def test_case_07_interning(self):
        m = model(thread(T, 5, 7),
                  P(seq=S, ts=1000, flags=CLEARED, interned_data=INTERN_FOO,
                    track_event=ev(BEGIN, T, name_iid=1, category_iids=[1])),
                  P(seq=S, ts=2000, flags=NEEDS, track_event=ev(END, T)))
        self.assertClean(m)
        self.assertEqual(len(m["slices"]), 1)
        s = m["slices"][0]
        self.assertEqual((s["name"], s["categories"], s["ts"], s["dur"]), ("foo", ["cat"], 1000, 1000))
        self.assertEqual(m["sequences"][str(S)]["cleared_count"], 1)

    def test_case_08_without_cleared_interning_is_ignored(self):
        m = model(thread(T, 5, 7),
                  P(seq=S, ts=1000, interned_data=INTERN_FOO, track_event=ev(BEGIN, T, name_iid=1, category_iids=[1])),
                  P(seq=S, ts=2000, track_event=ev(END, T)))
        s = m["slices"][0]
        self.assertEqual((s["name"], s["categories"], s["dur"]), (None, ["unknown(1)"], 1000))
        self.assertErrorLike(m, "interned_data ignored")
        self.assertErrorLike(m, "event_names iid 1 referenced but not interned")
        self.assertErrorLike(m, "first packet")

    def test_case_08_with_needs_flag_packets_are_skipped(self):
        m = model(thread(T, 5, 7),
                  P(seq=S, ts=1000, flags=NEEDS, interned_data=INTERN_FOO,
                    track_event=ev(BEGIN, T, name_iid=1, category_iids=[1])),
                  P(seq=S, ts=2000, flags=NEEDS, track_event=ev(END, T)))
        self.assertEqual(m["slices"], [])
        self.assertEqual(m["skipped_packets"], 2)
        self.assertEqual(m["sequences"][str(S)]["skipped_packets"], 2)
        self.assertErrorLike(m, "never cleared")

    def test_case_09_interning_is_per_sequence(self):
        m = model(thread(T, 5, 7), thread(T2, 5, 8),
                  P(seq=1, ts=10, flags=CLEARED, interned_data={"event_names": [{"iid": 1, "name": "a"}]},
                    track_event=ev(INSTANT, T, name_iid=1)),
                  P(seq=2, ts=20, flags=CLEARED, interned_data={"event_names": [{"iid": 1, "name": "b"}]},
                    track_event=ev(INSTANT, T2, name_iid=1)))
        self.assertClean(m)
        self.assertEqual([(s["name"], s["seq"]) for s in m["slices"]], [("a", 1), ("b", 2)])

    def test_case_10_interning_is_per_generation(self):
        m = model(thread(T, 5, 7),
                  P(seq=S, ts=10, flags=CLEARED, interned_data={"event_names": [{"iid": 1, "name": "x"}]}),
                  P(seq=S, ts=11, flags=NEEDS, track_event=ev(INSTANT, T, name_iid=1)),
                  P(seq=S, ts=20, flags=CLEARED, interned_data={"event_names": [{"iid": 1, "name": "y"}]}),
                  P(seq=S, ts=21, flags=NEEDS, track_event=ev(INSTANT, T, name_iid=1)))
        self.assertClean(m)
        self.assertEqual(self.names(m), ["x", "y"])
        self.assertEqual(m["sequences"][str(S)]["cleared_count"], 2)

    def test_case_11_defaults_are_wiped_by_cleared(self):
        named = 50
        m = model(desc(named, name="named"),
                  P(seq=S, flags=CLEARED, trace_packet_defaults={"track_event_defaults": {"track_uuid": named}}),
                  P(seq=S, ts=10, flags=NEEDS, track_event=ev(INSTANT, name="a")),
                  P(seq=S, flags=CLEARED),
                  P(seq=S, ts=20, flags=NEEDS, track_event=ev(INSTANT, name="b")))
        self.assertClean(m)
        self.assertEqual([(s["name"], s["track_uuid"]) for s in m["slices"]], [("a", named), ("b", 0)])

    def test_case_12_loss_skips_until_next_cleared(self):
        defaults = {"track_event_defaults": {"track_uuid": T}}
        names = {"event_names": [{"iid": 1, "name": "A"}, {"iid": 2, "name": "B"},
                                 {"iid": 3, "name": "C"}, {"iid": 4, "name": "D"}]}
        m = model(thread(T, 5, 7),
                  P(seq=S, flags=CLEARED, trace_packet_defaults=defaults, interned_data=names),
                  P(seq=S, ts=10, flags=NEEDS, track_event=ev(INSTANT, name_iid=1)),
                  P(seq=S, ts=20, flags=NEEDS, previous_packet_dropped=1, track_event=ev(INSTANT, name_iid=2)),
                  P(seq=S, ts=30, flags=NEEDS, track_event=ev(INSTANT, name_iid=3)),
                  P(seq=S, flags=CLEARED, trace_packet_defaults=defaults, interned_data=names),
                  P(seq=S, ts=40, flags=NEEDS, track_event=ev(INSTANT, name_iid=4)))
        self.assertClean(m)  # skips after a declared loss are only counted
        self.assertEqual(self.names(m), ["A", "D"])
        self.assertEqual(m["skipped_packets"], 2)
        seq = m["sequences"][str(S)]
        self.assertEqual(seq["loss_marks"], [{"packet_index": 3, "previous_packet_dropped": 1}])
        self.assertEqual(seq["cleared_count"], 2)

    def test_loss_without_needs_flag_keeps_event_but_iids_freeze(self):
        m = model(thread(T, 5, 7),
                  P(seq=S, flags=CLEARED, interned_data={"event_names": [{"iid": 1, "name": "A"}]}),
                  P(seq=S, ts=20, previous_packet_dropped=257,
                    interned_data={"event_names": [{"iid": 2, "name": "B"}]},
                    track_event=ev(INSTANT, T, name_iid=2)))
        self.assertEqual(self.names(m), [None])
        self.assertWarningLike(m, "interned_data ignored")
        self.assertErrorLike(m, "event_names iid 2 referenced but not interned")
        self.assertEqual(m["sequences"][str(S)]["loss_marks"][0]["previous_packet_dropped"], 257)

    def test_cleared_on_the_lossy_packet_keeps_it_valid(self):
        m = model(thread(T, 5, 7),
                  P(seq=S, flags=CLEARED),
                  P(seq=S, ts=20, flags=CLEARED | NEEDS, previous_packet_dropped=1,
                    interned_data={"event_names": [{"iid": 1, "name": "A"}]},
                    track_event=ev(INSTANT, T, name_iid=1)))
        self.assertClean(m)
        self.assertEqual(self.names(m), ["A"])

    def test_case_13_interned_debug_annotations(self):
        m = model(thread(T, 5, 7),
                  P(seq=S, ts=10, flags=CLEARED,
                    interned_data={"debug_annotation_names": [{"iid": 1, "name": "k"}],
                                   "debug_annotation_string_values": [{"iid": 1, "str": b64("v")}]},
                    track_event=ev(INSTANT, T, name="e",
                                   debug_annotations=[{"name_iid": 1, "string_value_iid": 1}])))
        self.assertClean(m)
        self.assertEqual(m["slices"][0]["args"], {"k": "v"})
        self.assertEqual(m["slices"][0]["flat_args"], {"debug.k": "v"})

    def test_case_14_first_packet_on_sequence(self):
        m = model(P(seq=S, flags=CLEARED, first_packet_on_sequence=True), P(seq=2, ts=1))
        self.assertTrue(m["sequences"][str(S)]["first_packet_on_sequence"])
        self.assertFalse(m["sequences"]["2"]["first_packet_on_sequence"])

    def test_first_defined_iid_wins(self):
        m = model(thread(T, 5, 7),
                  P(seq=S, flags=CLEARED, interned_data={"event_names": [{"iid": 1, "name": "first"}]}),
                  P(seq=S, ts=5, flags=NEEDS, interned_data={"event_names": [{"iid": 1, "name": "second"}]},
                    track_event=ev(INSTANT, T, name_iid=1)))
        self.assertEqual(self.names(m), ["first"])
        self.assertErrorLike(m, "redefined")

    def test_missing_needs_flag_is_a_warning(self):
        m = model(thread(T, 5, 7),
                  P(seq=S, flags=CLEARED, interned_data={"event_names": [{"iid": 1, "name": "a"}]}),
                  P(seq=S, ts=5, track_event=ev(INSTANT, T, name_iid=1)))
        self.assertClean(m)
        self.assertWarningLike(m, "without SEQ_NEEDS_INCREMENTAL_STATE")


# -- 5.C clocks --------------------------------------------------------------------------------

class Clocks(Base):
    def test_case_15_incremental_clock(self):
        m = model(thread(T, 5, 7), incremental_clock_start(),
                  P(seq=S, ts=5, flags=NEEDS, track_event=ev(BEGIN, name="s")),
                  P(seq=S, ts=3, flags=NEEDS, track_event=ev(END)))
        self.assertClean(m)
        s = m["slices"][0]
        self.assertEqual((s["ts"], s["dur"], s["track_uuid"]), (1_005_000, 3_000, T))
        snap = m["clocks"][str(S)][0]
        self.assertEqual(snap["clocks"][1], {"clock_id": 64, "timestamp": 1000, "is_incremental": True,
                                             "unit_multiplier_ns": 1000})

    def test_case_16_descriptor_timestamp_advances_the_clock(self):
        m = model(incremental_clock_start(),
                  P(seq=S, ts=2, flags=NEEDS, track_descriptor={"uuid": T, "thread": {"pid": 5, "tid": 7}}),
                  P(seq=S, ts=5, flags=NEEDS, track_event=ev(BEGIN, name="s")),
                  P(seq=S, ts=3, flags=NEEDS, track_event=ev(END)))
        self.assertClean(m)
        self.assertEqual((m["slices"][0]["ts"], m["slices"][0]["dur"]), (1_007_000, 3_000))

    def test_interned_only_packet_timestamp_advances_the_clock(self):
        m = model(thread(T, 5, 7), incremental_clock_start(),
                  P(seq=S, ts=4, flags=NEEDS, interned_data={"event_names": [{"iid": 1, "name": "n"}]}),
                  P(seq=S, ts=1, flags=NEEDS, track_event=ev(INSTANT, name_iid=1)))
        self.assertClean(m)
        self.assertEqual(m["slices"][0]["ts"], 1_005_000)

    def test_case_17_snapshot_packet_with_event_drops_the_event(self):
        snapshot_part = incremental_clock_start().SerializeToString()
        event_part = P(track_event=ev(INSTANT, name="lost")).SerializeToString()
        m = model(thread(T, 5, 7), snapshot_part + event_part,
                  P(seq=S, ts=5, flags=NEEDS, track_event=ev(INSTANT, name="kept")))
        self.assertErrorLike(m, "ClockSnapshot packet also carries")
        self.assertEqual(self.names(m), ["kept"])
        self.assertEqual(m["slices"][0]["ts"], 1_005_000)  # the snapshot itself still counts

    def test_case_18_resnapshot_on_cleared(self):
        second = {"clocks": [{"clock_id": 6, "timestamp": 5_000_000},
                             {"clock_id": 64, "timestamp": 5_000, "is_incremental": True, "unit_multiplier_ns": 1000}]}
        m = model(thread(T, 5, 7), incremental_clock_start(),
                  P(seq=S, ts=5, flags=NEEDS, track_event=ev(INSTANT, name="a")),
                  incremental_clock_start(snapshot=second),
                  P(seq=S, ts=1, flags=NEEDS, track_event=ev(INSTANT, name="b")))
        self.assertClean(m)
        self.assertEqual([s["ts"] for s in m["slices"]], [1_005_000, 5_001_000])

    def test_case_19_changed_multiplier_is_rejected(self):
        changed = {"clocks": [{"clock_id": 6, "timestamp": 5_000_000},
                              {"clock_id": 64, "timestamp": 5_000_000, "is_incremental": True,
                               "unit_multiplier_ns": 1}]}
        m = model(thread(T, 5, 7), incremental_clock_start(),
                  P(seq=S, ts=5, flags=NEEDS, track_event=ev(INSTANT, name="a")),
                  P(seq=S, clock_snapshot=changed),
                  P(seq=S, ts=1, flags=NEEDS, track_event=ev(INSTANT, name="b")))
        self.assertErrorLike(m, "previously registered with different properties")
        self.assertEqual([s["ts"] for s in m["slices"]], [1_005_000, 1_006_000])
        self.assertFalse(m["clocks"][str(S)][1]["accepted"])

    def test_changed_incremental_flag_is_rejected(self):
        changed = {"clocks": [{"clock_id": 6, "timestamp": 5_000_000},
                              {"clock_id": 64, "timestamp": 5_000, "unit_multiplier_ns": 1000}]}
        m = model(thread(T, 5, 7), incremental_clock_start(), P(seq=S, clock_snapshot=changed))
        self.assertErrorLike(m, "previously registered with different properties")

    def test_case_20_primary_trace_clock(self):
        m = model(thread(T, 5, 7),
                  P(clock_snapshot={"primary_trace_clock": 3, "clocks": [{"clock_id": 3, "timestamp": 1000},
                                                                          {"clock_id": 6, "timestamp": 11000}]}),
                  P(seq=S, ts=12000, timestamp_clock_id=6, track_event=ev(INSTANT, T, name="x")))
        self.assertClean(m)
        self.assertEqual(m["trace_clock"], 3)
        self.assertEqual(m["slices"][0]["ts"], 2000)
        self.assertEqual(len(m["global_snapshots"]), 1)

    def test_case_21_no_clock_is_raw(self):
        m = model(thread(T, 5, 7), P(seq=S, ts=123456, track_event=ev(INSTANT, T, name="x")))
        self.assertClean(m)
        self.assertEqual(m["slices"][0]["ts"], 123456)

    def test_case_22_out_of_order_absolute_event(self):
        m = model(thread(T, 5, 7), incremental_clock_start(),
                  P(seq=S, ts=5, flags=NEEDS, track_event=ev(INSTANT, name="a")),
                  P(seq=S, ts=1_002_000, timestamp_clock_id=6, flags=NEEDS, track_event=ev(INSTANT, name="old")),
                  P(seq=S, ts=1, flags=NEEDS, track_event=ev(INSTANT, name="b")))
        self.assertClean(m)
        self.assertEqual([(s["name"], s["ts"]) for s in m["slices"]],
                         [("old", 1_002_000), ("a", 1_005_000), ("b", 1_006_000)])
        self.assertEqual([e["name"] for e in m["events"]], ["a", "old", "b"])  # events stay in file order

    def test_sequence_clock_without_snapshot(self):
        m = model(thread(T, 5, 7), P(seq=S, flags=CLEARED),
                  P(seq=S, ts=5, timestamp_clock_id=64, flags=NEEDS, track_event=ev(INSTANT, T, name="x")))
        self.assertErrorLike(m, "which no ClockSnapshot of this sequence defined")
        self.assertEqual(m["slices"], [])

    def test_sequence_clocks_are_per_sequence(self):
        other = {"clocks": [{"clock_id": 6, "timestamp": 9_000_000},
                            {"clock_id": 64, "timestamp": 9_000, "is_incremental": True, "unit_multiplier_ns": 1000}]}
        m = model(thread(T, 5, 7), thread(T2, 5, 8),
                  incremental_clock_start(seq=1, track=T), incremental_clock_start(seq=2, track=T2, snapshot=other),
                  P(seq=1, ts=1, flags=NEEDS, track_event=ev(INSTANT, name="a")),
                  P(seq=2, ts=1, flags=NEEDS, track_event=ev(INSTANT, name="b")))
        self.assertClean(m)
        self.assertEqual([(s["name"], s["ts"]) for s in m["slices"]], [("a", 1_001_000), ("b", 9_001_000)])

    def test_no_path_to_trace_clock(self):
        m = model(thread(T, 5, 7), P(seq=S, ts=5, timestamp_clock_id=3, track_event=ev(INSTANT, T, name="x")))
        self.assertErrorLike(m, "no ClockSnapshot path")
        self.assertEqual(m["slices"], [])


# -- 5.D tracks --------------------------------------------------------------------------------

class Tracks(Base):
    def test_case_23_thread_track(self):
        m = model(thread(T, 5, 7, name="w"),
                  P(seq=S, ts=1000, track_event=ev(BEGIN, T, name="s")),
                  P(seq=S, ts=1500, track_event=ev(END, T)))
        self.assertClean(m)
        s = m["slices"][0]
        self.assertEqual((s["ts"], s["dur"], s["depth"]), (1000, 500, 0))
        t = m["tracks"][str(T)]
        self.assertEqual((t["kind"], t["pid"], t["tid"], t["thread_name"]), ("thread", 5, 7, "w"))

    def test_case_24_process_track(self):
        m = model(desc(P_UUID, process={"pid": 5, "process_name": "app"}),
                  P(seq=S, ts=10, track_event=ev(INSTANT, P_UUID, name="i")))
        self.assertClean(m)
        self.assertEqual((m["tracks"][str(P_UUID)]["kind"], m["tracks"][str(P_UUID)]["process_name"]), ("process", "app"))
        self.assertEqual((m["slices"][0]["dur"], m["slices"][0]["track_uuid"]), (0, P_UUID))

    def test_case_25_async_track_fields(self):
        m = model(desc(P_UUID, process={"pid": 5}),
                  desc(40, parent_uuid=P_UUID, name="req", sibling_merge_behavior="SIBLING_MERGE_BEHAVIOR_NONE",
                       child_ordering="CHRONOLOGICAL", sibling_order_rank=-3),
                  P(seq=S, ts=1, track_event=ev(BEGIN, 40, name="r")), P(seq=S, ts=2, track_event=ev(END, 40)))
        self.assertClean(m)
        t = m["tracks"]["40"]
        self.assertEqual((t["kind"], t["parent_uuid"], t["name"], t["sibling_merge_behavior"], t["child_ordering"],
                          t["sibling_order_rank"]),
                         ("track", P_UUID, "req", "SIBLING_MERGE_BEHAVIOR_NONE", "CHRONOLOGICAL", -3))

    def test_case_27_pid_tid_reuse(self):
        m = model(thread(T, 5, 7), thread(T2, 5, 7),
                  desc(P_UUID, process={"pid": 5}), desc(P_UUID + 1, process={"pid": 5}))
        self.assertClean(m)
        self.assertEqual(sum("pid/tid reuse" in w for w in m["warnings"]), 2)

    def test_reemitting_an_identical_descriptor_is_fine(self):
        m = model(thread(T, 5, 7, name="w"), thread(T, 5, 7, name="w2", seq=S))
        self.assertClean(m)
        self.assertEqual(m["warnings"], [])
        self.assertEqual(m["tracks"][str(T)]["thread_name"], "w2")

    def test_case_28_conflicting_descriptor(self):
        m = model(desc(P_UUID, process={"pid": 5}), desc(P_UUID + 1, process={"pid": 6}),
                  desc(40, parent_uuid=P_UUID, name="a"), desc(40, parent_uuid=P_UUID + 1, name="a"),
                  desc(C, name="c"), desc(C, name="c", counter={}))
        self.assertErrorLike(m, "uuid 40 conflicts with an earlier one in ['parent_uuid']")
        self.assertErrorLike(m, f"uuid {C} conflicts with an earlier one in ['counter']")
        self.assertEqual(m["tracks"]["40"]["parent_uuid"], P_UUID)

    def test_case_29_missing_parent(self):
        m = model(desc(40, parent_uuid=999, name="orphan"), P(seq=S, ts=1, track_event=ev(INSTANT, 40, name="x")))
        self.assertErrorLike(m, "parent uuid 999 of track 40 is never described")
        self.assertEqual(m["slices"], [])

    def test_case_31_explicit_uuid_zero(self):
        m = model(P(seq=S, ts=1, track_event=ev(INSTANT, 0, name="x")))
        self.assertClean(m)
        self.assertEqual(m["slices"][0]["track_uuid"], 0)
        self.assertEqual(m["warnings"], [])

    def test_thread_descriptor_on_sequence_is_the_legacy_default(self):
        m = model(P(seq=S, flags=CLEARED), thread(T, 5, 7, seq=S), P(seq=S, ts=1, track_event=ev(INSTANT, name="x")))
        self.assertEqual(m["slices"][0]["track_uuid"], T)


# -- 5.E slices, instants, counters, flows -----------------------------------------------------

class Events(Base):
    def test_case_32_nesting(self):
        m = model(thread(T, 5, 7),
                  P(seq=S, ts=1000, track_event=ev(BEGIN, T, name="a")),
                  P(seq=S, ts=1100, track_event=ev(BEGIN, T, name="b")),
                  P(seq=S, ts=1200, track_event=ev(END, T)),
                  P(seq=S, ts=1500, track_event=ev(END, T)))
        self.assertClean(m)
        a, b = m["slices"]
        self.assertEqual((a["name"], a["depth"], a["dur"]), ("a", 0, 500))
        self.assertEqual((b["name"], b["depth"], b["dur"], b["parent"]), ("b", 1, 100, 0))

    def test_case_33_unended_and_unmatched(self):
        m = model(thread(T, 5, 7), thread(T2, 5, 8),
                  P(seq=S, ts=1000, track_event=ev(BEGIN, T, name="open")),
                  P(seq=S, ts=1100, track_event=ev(END, T2)))
        self.assertClean(m)
        self.assertEqual([(s["name"], s["dur"]) for s in m["slices"]], [("open", -1)])
        self.assertWarningLike(m, "unmatched end")

    def test_case_34_instant_inside_slice(self):
        m = model(thread(T, 5, 7),
                  P(seq=S, ts=1000, track_event=ev(BEGIN, T, name="a")),
                  P(seq=S, ts=1100, track_event=ev(INSTANT, T, name="i")),
                  P(seq=S, ts=1200, track_event=ev(END, T)))
        i = m["slices"][1]
        self.assertEqual((i["name"], i["dur"], i["depth"], i["instant"]), ("i", 0, 1, True))

    def test_sorting_by_timestamp_per_track(self):
        m = model(thread(T, 5, 7),
                  P(seq=S, ts=2000, track_event=ev(END, T)),
                  P(seq=S, ts=1000, track_event=ev(BEGIN, T, name="a")))
        self.assertEqual([(s["name"], s["ts"], s["dur"]) for s in m["slices"]], [("a", 1000, 1000)])

    def test_case_35_counter_track(self):
        m = model(desc(C, name="mem", counter={"unit": "UNIT_SIZE_BYTES"}),
                  P(seq=S, ts=3000, track_event=ev(COUNTER, C, counter_value=1024)))
        self.assertClean(m)
        self.assertEqual(m["counters"], [{"track_uuid": C, "ts": 3000, "value": 1024}])
        t = m["tracks"][str(C)]
        self.assertEqual((t["kind"], t["name"], t["counter"]["unit"]), ("counter", "mem", "UNIT_SIZE_BYTES"))
        self.assertEqual(m["events"][0]["counter_value"], 1024)

    def test_case_36_incremental_counter(self):
        m = model(desc(C, counter={"unit_multiplier": 1000, "is_incremental": True}),
                  P(seq=S, flags=CLEARED),
                  P(seq=S, ts=1, flags=NEEDS, track_event=ev(COUNTER, C, counter_value=1000)),
                  P(seq=S, ts=2, flags=NEEDS, track_event=ev(COUNTER, C, counter_value=10)),
                  P(seq=S, flags=CLEARED),
                  P(seq=S, ts=3, flags=NEEDS, track_event=ev(COUNTER, C, counter_value=2000)))
        self.assertClean(m)
        self.assertEqual([c["value"] for c in m["counters"]], [1_000_000, 1_010_000, 2_000_000])

    def test_case_37_counter_before_descriptor(self):
        m = model(P(seq=S, ts=1, track_event=ev(COUNTER, C, counter_value=1)), desc(C, counter={}))
        self.assertErrorLike(m, "not (yet, in file order) described as a counter track")
        self.assertEqual(m["counters"], [])

    def test_case_38_double_and_extra_counters(self):
        extra1, extra2 = 31, 32
        m = model(thread(T, 5, 7), desc(C, counter={}), desc(extra1, counter={}), desc(extra2, counter={}),
                  P(seq=S, ts=5, track_event=ev(COUNTER, C, double_counter_value=3.14)),
                  P(seq=S, flags=CLEARED, trace_packet_defaults={"track_event_defaults": {
                      "track_uuid": T, "extra_counter_track_uuids": [extra1],
                      "extra_double_counter_track_uuids": [extra2]}}),
                  P(seq=S, ts=100, flags=NEEDS, track_event=ev(BEGIN, name="s", extra_counter_values=[7],
                                                               extra_double_counter_values=[0.5])))
        self.assertErrorLike(m, "first packet")  # the sequence's first packet was not CLEARED
        self.assertEqual(m["counters"], [{"track_uuid": C, "ts": 5, "value": 3.14},
                                         {"track_uuid": extra1, "ts": 100, "value": 7},
                                         {"track_uuid": extra2, "ts": 100, "value": 0.5}])
        self.assertEqual(m["events"][1]["extra_counter"], [[extra1, 7], [extra2, 0.5]])
        self.assertEqual(m["slices"][0]["name"], "s")

    def test_extra_counter_on_non_counter_track_drops_the_event(self):
        m = model(thread(T, 5, 7),
                  P(seq=S, ts=1, track_event=ev(INSTANT, T, name="x", extra_counter_track_uuids=[T],
                                                extra_counter_values=[1])))
        self.assertErrorLike(m, "extra counter on uuid")
        self.assertEqual(m["slices"], [])

    def test_case_39_flows(self):
        m = model(thread(T, 5, 7), thread(T2, 5, 8),
                  P(seq=S, ts=1000, track_event=ev(INSTANT, T, name="A", flow_ids=[1])),
                  P(seq=S, ts=2000, track_event=ev(INSTANT, T2, name="B", flow_ids=[1])),
                  P(seq=S, ts=3000, track_event=ev(INSTANT, T, name="C", terminating_flow_ids=[1])),
                  P(seq=S, ts=4000, track_event=ev(INSTANT, T, name="D", flow_ids=[1])),
                  P(seq=S, ts=5000, track_event=ev(INSTANT, T2, name="E", terminating_flow_ids=[1])),
                  P(seq=S, ts=6000, track_event=ev(INSTANT, T2, name="F", terminating_flow_ids=[1])))
        self.assertClean(m)
        names = self.names(m)
        self.assertEqual([(f["id"], names[f["from"]], names[f["to"]]) for f in m["flows"]],
                         [(1, "A", "B"), (1, "B", "C"), (1, "D", "E")])

    def test_case_40_flow_on_slice_end(self):
        m = model(thread(T, 5, 7), thread(T2, 5, 8),
                  P(seq=S, ts=1000, track_event=ev(BEGIN, T, name="A")),
                  P(seq=S, ts=1500, track_event=ev(INSTANT, T2, name="B", flow_ids=[9])),
                  P(seq=S, ts=2000, track_event=ev(END, T, terminating_flow_ids=[9])))
        self.assertClean(m)
        names = self.names(m)
        # the END binds to slice A (ts 1000): direction follows slice ts
        self.assertEqual([(names[f["from"]], names[f["to"]]) for f in m["flows"]], [("A", "B")])
        self.assertEqual(m["slices"][0]["terminating_flow_ids"], [9])

    def test_type_zero_is_rejected(self):
        m = model(P(seq=S, ts=1, track_event={"track_uuid": 0, "name": "x"}))
        self.assertErrorLike(m, "without type")
        self.assertEqual(m["events"], [])

    def test_slice_end_with_name(self):
        m = model(thread(T, 5, 7),
                  P(seq=S, ts=1, track_event=ev(BEGIN, T, name="a")),
                  P(seq=S, ts=2, track_event=ev(BEGIN, T, name="b")),
                  P(seq=S, ts=3, track_event=ev(END, T, name="a")))
        self.assertErrorLike(m, "SLICE_END carries a name")
        self.assertEqual([(s["name"], s["dur"]) for s in m["slices"]], [("a", 2), ("b", -1)])


# -- 5.F debug annotations, logs ---------------------------------------------------------------

class Annotations(Base):
    def annotated(self, *annotations):
        m = model(thread(T, 5, 7), P(seq=S, ts=1, track_event=ev(INSTANT, T, name="x",
                                                                   debug_annotations=list(annotations))))
        self.assertClean(m)
        return m["slices"][0]

    def test_case_41_dict_and_array(self):
        s = self.annotated({"name": "d", "dict_entries": [
            {"name": "a", "int_value": 1},
            {"name": "b", "array_values": [{"int_value": 2}, {"int_value": 3}]}]})
        self.assertEqual(s["args"], {"d": {"a": 1, "b": [2, 3]}})
        self.assertEqual(s["flat_args"], {"debug.d.a": 1, "debug.d.b[0]": 2, "debug.d.b[1]": 3})

    def test_case_42_names_and_types(self):
        s = self.annotated({"name": "x.y", "bool_value": True}, {"name": "u", "uint_value": 18446744073709551615},
                           {"name": "f", "double_value": 1.5}, {"name": "p", "pointer_value": 4096},
                           {"name": "n", "int_value": -3}, {"name": "s", "string_value": "é"},
                           {"name": "j", "legacy_json_value": '{"k": [1]}'})
        self.assertEqual(s["args"], {"x.y": True, "u": 18446744073709551615, "f": 1.5, "p": {"pointer": 4096},
                                     "n": -3, "s": "é", "j": {"k": [1]}})
        self.assertEqual(s["flat_args"]["debug.x_y"], True)
        self.assertEqual(s["flat_args"]["debug.p"], {"pointer": 4096})
        self.assertEqual(s["flat_args"]["debug.j.k[0]"], 1)

    def test_case_43_begin_and_end_args_merge(self):
        m = model(thread(T, 5, 7),
                  P(seq=S, ts=1, track_event=ev(BEGIN, T, name="a", debug_annotations=[{"name": "b", "int_value": 1}])),
                  P(seq=S, ts=2, track_event=ev(END, T, debug_annotations=[{"name": "e", "int_value": 2}])))
        self.assertClean(m)
        self.assertEqual(m["slices"][0]["args"], {"b": 1, "e": 2})

    def test_unnamed_annotation_is_dropped(self):
        m = model(thread(T, 5, 7), P(seq=S, ts=1, track_event=ev(INSTANT, T, name="x",
                                                                   debug_annotations=[{"int_value": 1}])))
        self.assertErrorLike(m, "debug annotation without a name")
        self.assertEqual(m["slices"][0]["args"], {})

    def test_case_44_log_message_and_source_location(self):
        m = model(thread(T, 5, 7),
                  P(seq=S, ts=1, flags=CLEARED,
                    interned_data={"log_message_body": [{"iid": 1, "body": "hello"}],
                                   "source_locations": [{"iid": 1, "file_name": "a.rs", "function_name": "f",
                                                         "line_number": 3}]},
                    track_event=ev(INSTANT, T, name="log", source_location_iid=1, correlation_id=77,
                                   log_message={"body_iid": 1, "prio": "PRIO_WARN", "source_location_iid": 1})))
        self.assertClean(m)
        e = m["events"][0]
        loc = {"file": "a.rs", "function": "f", "line": 3}
        self.assertEqual(e["log"], {"body": "hello", "prio": 5, "source_location": loc})
        self.assertEqual(e["source_location"], loc)
        self.assertEqual(e["correlation_id"], 77)


# -- the command line --------------------------------------------------------------------------

class CommandLine(Base):
    def test_exit_codes_and_json(self):
        good = run_cli(trace(thread(T, 5, 7), P(seq=S, ts=1, track_event=ev(INSTANT, T, name="x"))))
        self.assertEqual(good.returncode, 0, good.stderr)
        out = json.loads(good.stdout)
        for key in ("packets", "truncated_tail", "errors", "warnings", "skipped_packets", "sequences", "tracks",
                    "events", "slices", "counters", "flows", "clocks", "global_snapshots", "trace_stats"):
            self.assertIn(key, out)
        bad = run_cli(trace(P(seq=S, ts=1, track_event={"name": "x"})))
        self.assertEqual(bad.returncode, 1)
        self.assertTrue(json.loads(bad.stdout)["errors"])
        usage = subprocess.run([sys.executable, os.path.join(HERE, "perfetto_model.py")],
                               capture_output=True, text=True, check=False)
        self.assertEqual(usage.returncode, 2)
        missing = subprocess.run([sys.executable, os.path.join(HERE, "perfetto_model.py"), "/nonexistent.pftrace"],
                                 capture_output=True, text=True, check=False)
        self.assertEqual(missing.returncode, 2)

    def test_trace_stats_are_decoded(self):
        m = model(P(trace_stats={"chunks_discarded": 3}))
        self.assertEqual(m["trace_stats"], [{"chunks_discarded": "3"}])


if __name__ == "__main__":
    unittest.main()
