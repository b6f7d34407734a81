#!/usr/bin/env python3
"""Decode a Perfetto protobuf trace (.pftrace) and print what trace_processor would import.

Usage:
    python3 perfetto_model.py TRACE_FILE

Prints one JSON object on stdout. Exit status: 0 = no errors, 1 = the trace breaks a rule (the
errors are in the JSON), 2 = usage or I/O error (message on stderr).

JSON keys: packets, truncated_tail, errors, warnings, skipped_packets, fatal (null or the reason
TP would abort the import), trace_clock (clock id of trace time: 6 unless primary_trace_clock),
sequences{seq: packets, first_packet_on_sequence, first_packet_cleared, cleared_count,
skipped_packets, loss_marks[{packet_index, previous_packet_dropped}]}, tracks{uuid: ...},
events[...] (accepted TrackEvents in file order, ts in trace time), dropped_events, slices[...],
counters[{track_uuid, ts, value}], flows[{id, from, to}] (slice indices), clocks{seq: [snapshot]},
global_snapshots[snapshot], trace_stats[...]. A snapshot is {packet_index, primary_trace_clock,
clocks[{clock_id, timestamp, is_incremental, unit_multiplier_ns}], accepted}.

Packets are decoded with the official schema (PyPI `perfetto`: perfetto_trace_pb2). Everything
that python-protobuf hides is checked on the raw bytes by a small wire walker: framing, packed
repeated scalars, wrong wire types, invalid UTF-8, and several fields of the TracePacket `data`
oneof in one packet (trace_processor's decoder sees all of them, python-protobuf keeps one).

The sequence rules follow the project's Perfetto writer notes ("notes §x" below), which describe
trace_processor (TP): incremental state and interning (§2.2), clocks (§2.4), track descriptors
(§2.5), events, counters and flows (§2.6), debug annotations (§2.7), loss (§2.8). Where this
model and TP disagree, TP is right.
"""
import bisect
import json
import math
import sys
import zlib

try:
    from google.protobuf.json_format import MessageToDict
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
except ImportError as _exc:  # reported by main() with exit status 2
    pb = None
    _IMPORT_ERROR = _exc

SEQ_INCREMENTAL_STATE_CLEARED = 1
SEQ_NEEDS_INCREMENTAL_STATE = 2
BOOTTIME = 6
SEQUENCE_CLOCKS = range(64, 128)     # notes §1.3: clock ids 64..127 are sequence-scoped
MAX_EXTRA_COUNTERS = 8               # notes §2.6: kMaxNumExtraCounters
MAX_TRACK_DEPTH = 100                # notes §2.5: loops / depth > 100 are unresolvable
DEFAULT_LOG_PRIO = 4                 # LogMessage.prio unset = INFO
EVENT_TYPES = {1: "SLICE_BEGIN", 2: "SLICE_END", 3: "INSTANT", 4: "COUNTER", 5: "STATE"}
MAX_MESSAGES = 1000                  # cap on each of errors / warnings

FAILED = ("failed", None)           # a timestamp that cannot be converted: the packet is skipped

# Field numbers used on the raw bytes.
PKT_CLOCK_SNAPSHOT, PKT_TRACK_EVENT, PKT_TRACE_STATS = 6, 11, 35
PKT_COMPRESSED, PKT_TRACK_DESCRIPTOR = 50, 60
# TracePacket's `data` oneof: field number -> name
DATA_ONEOF_FIELDS = {f.number: f.name for f in pb.TracePacket.DESCRIPTOR.oneofs_by_name["data"].fields} if pb else {}


# ----------------------------------------------------------------------------------------------
# Problems


class Report:
    def __init__(self):
        self.errors = []
        self.warnings = []
        self.dropped = {"errors": 0, "warnings": 0}

    def error(self, msg):
        self._add(self.errors, "errors", msg)

    def warn(self, msg):
        self._add(self.warnings, "warnings", msg)

    def _add(self, bucket, name, msg):
        if len(bucket) < MAX_MESSAGES:
            bucket.append(msg)
        else:
            self.dropped[name] += 1

    def finish(self):
        for name, bucket in (("errors", self.errors), ("warnings", self.warnings)):
            if self.dropped[name]:
                bucket.append(f"... and {self.dropped[name]} more {name}")


class Fatal(Exception):
    """Something TP treats as a fatal import error: nothing after it is imported."""


# ----------------------------------------------------------------------------------------------
# Protobuf wire level (python-protobuf accepts encodings that TP's protozero decoder misreads)


class WireError(Exception):
    pass


def read_varint(buf, pos):
    value = shift = 0
    while True:
        if pos >= len(buf):
            raise WireError("truncated varint")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise WireError("varint longer than 10 bytes")


def iter_fields(buf):
    """Yield (field number, wire type, value) for each field of one encoded message.
    value is an int for varint/fixed64/fixed32 fields and bytes for length-delimited ones."""
    pos, end = 0, len(buf)
    while pos < end:
        key, pos = read_varint(buf, pos)
        num, wire = key >> 3, key & 7
        if num == 0:
            raise WireError("field number 0")
        if wire == 0:
            value, pos = read_varint(buf, pos)
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            if pos + size > end:
                raise WireError(f"truncated fixed{size * 8} field {num}")
            value = int.from_bytes(buf[pos:pos + size], "little")
            pos += size
        elif wire == 2:
            size, pos = read_varint(buf, pos)
            if pos + size > end:
                raise WireError(f"length of field {num} runs past the end of its message")
            value = bytes(buf[pos:pos + size])
            pos += size
        else:
            raise WireError(f"field {num} uses wire type {wire} (groups are not used by Perfetto)")
        yield num, wire, value


def split_frames(data, report):
    """notes §1.1: a trace file is `0x0A varint(len) TracePacket` records. TP skips other top-level
    fields and zero-length packets, and ignores a torn last record. Returns (bodies, torn_tail)."""
    bodies, pos, end = [], 0, len(data)
    while pos < end:
        start = pos
        try:
            key, pos = read_varint(data, pos)
            num, wire = key >> 3, key & 7
            if wire == 2:
                size, pos = read_varint(data, pos)
            elif wire == 0:
                _, pos = read_varint(data, pos)
                size = 0
            elif wire in (1, 5):
                size = 8 if wire == 1 else 4
            else:
                report.error(f"byte {start}: top-level record with wire type {wire}; the framing is broken here")
                return bodies, False
        except WireError:
            return bodies, True
        if pos + size > end:
            return bodies, True
        body = data[pos:pos + size]
        pos += size
        if num != 1 or wire != 2:
            report.error(f"byte {start}: top-level field {num} (wire type {wire}) is not a framed TracePacket "
                         "(TP skips it; a writer must emit only 0x0A records)")
        elif size == 0:
            report.warn(f"byte {start}: zero-length TracePacket (TP skips it)")
        else:
            bodies.append(body)
    return bodies, False


def expected_wire_type(field):
    t = field.type
    if t in (field.TYPE_DOUBLE, field.TYPE_FIXED64, field.TYPE_SFIXED64):
        return 1
    if t in (field.TYPE_FLOAT, field.TYPE_FIXED32, field.TYPE_SFIXED32):
        return 5
    if t in (field.TYPE_STRING, field.TYPE_BYTES, field.TYPE_MESSAGE):
        return 2
    return 0


def is_repeated(field):
    if hasattr(field, "is_repeated"):
        return field.is_repeated
    return field.label == field.LABEL_REPEATED


class WireChecker:
    """Walks the raw bytes of a message with its descriptor (notes §1.2, §5.A.3).

    * A repeated scalar that is not declared [packed=true] must be one tag per element; TP's
      decoder misreads a packed (wire type 2) encoding. This covers TrackEvent category_iids (3),
      extra_counter_values (12), extra_counter_track_uuids (31), extra_double_counter_track_uuids
      (45), extra_double_counter_values (46) and the same lists in TrackEventDefaults.
    * Every field must use the wire type of its declared type: flow_ids (47) and
      terminating_flow_ids (48) are fixed64 (wire type 1), not varint.
    * string fields must be valid UTF-8.
    """

    def __init__(self, report):
        self.report = report
        self._tables = {}

    def _table(self, desc):
        table = self._tables.get(desc.full_name)
        if table is None:
            table = {}
            for f in desc.fields:
                table[f.number] = (f, expected_wire_type(f), is_repeated(f), bool(f.GetOptions().packed))
            self._tables[desc.full_name] = table
        return table

    def check(self, buf, desc, where, depth=0):
        table = self._table(desc)
        for num, wire, value in iter_fields(buf):
            entry = table.get(num)
            if entry is None:
                continue  # unknown field: TP skips it as well
            field, want, repeated, packed_ok = entry
            if wire != want:
                if not (wire == 2 and repeated and packed_ok):
                    self.report.error(f"{where}: {wire_type_problem(desc, field, wire, want, repeated)}")
                continue
            if field.type == field.TYPE_STRING:
                try:
                    value.decode("utf-8")
                except UnicodeDecodeError:
                    self.report.error(f"{where}: {desc.name}.{field.name} is not valid UTF-8")
            elif field.type == field.TYPE_MESSAGE and depth < 64:
                self.check(value, field.message_type, where, depth + 1)


def wire_type_problem(desc, field, wire, want, repeated):
    name = f"{desc.name}.{field.name} (field {field.number})"
    if wire == 2 and repeated:
        return f"{name} is packed; TP reads repeated scalars one tag per element (never packed)"
    if want == 1 and field.type == field.TYPE_FIXED64:
        return f"{name} must be fixed64 (wire type 1), found wire type {wire}"
    return f"{name} has wire type {wire}, its declared type needs wire type {want}"


def top_level_fields(body):
    """Field number -> list of raw values, for the TracePacket fields read from raw bytes."""
    fields = {}
    for num, _, value in iter_fields(body):
        fields.setdefault(num, []).append(value)
    return fields


def to_int64(value):
    """TP reads uint64 timestamps and casts them to int64."""
    return value - (1 << 64) if value >= (1 << 63) else value


# ----------------------------------------------------------------------------------------------
# Clocks (notes §2.4)


class ClockGraph:
    """All accepted ClockSnapshots. Clock keys: ("g", id) global, ("s", seq, id) sequence-scoped.
    Values are in ns (timestamp * unit_multiplier_ns)."""

    def __init__(self):
        self.snapshots = []            # list of {key: ns}
        self.trace_clock = ("g", BOOTTIME)
        self.trace_clock_declared = False
        self._neighbours = {}
        self._last_by_clock_set = {}   # frozenset(keys) -> {key: ns}
        self._paths, self._pairs = {}, {}  # caches for the conversion phase

    def add(self, entries):
        self.snapshots.append(entries)
        self._last_by_clock_set[frozenset(entries)] = entries
        for a in entries:
            self._neighbours.setdefault(a, set()).update(k for k in entries if k != a)

    def went_backwards(self, entries):
        """A clock of this clock set that is lower than in the previous snapshot of the same set."""
        last = self._last_by_clock_set.get(frozenset(entries))
        if last is None:
            return None
        for key, ns in entries.items():
            if ns < last[key]:
                return key
        return None

    def path(self, src, dst):
        if src == dst:
            return []
        previous, queue = {src: None}, [src]
        while queue:
            nxt = []
            for node in queue:
                for n in sorted(self._neighbours.get(node, ()), key=str):
                    if n not in previous:
                        previous[n] = node
                        if n == dst:
                            hops, cur = [], dst
                            while previous[cur] is not None:
                                hops.append((previous[cur], cur))
                                cur = previous[cur]
                            return hops[::-1]
                        nxt.append(n)
            queue = nxt
        return None

    def convert_hop(self, src, dst, ns):
        """Through the snapshot with the largest src value <= ns (the earliest one if ns is before all)."""
        pairs = self._pairs.get((src, dst))
        if pairs is None:
            pairs = self._pairs[(src, dst)] = sorted((s[src], s[dst]) for s in self.snapshots if src in s and dst in s)
        i = max(bisect.bisect_right(pairs, (ns, math.inf)) - 1, 0)
        return pairs[i][1] + (ns - pairs[i][0])

    def to_trace_time(self, key, ns):
        """Only called once all snapshots are in (TP converts after tokenizing the whole file)."""
        if key not in self._paths:
            self._paths[key] = self.path(key, self.trace_clock)
        hops = self._paths[key]
        if hops is None:
            return None
        for src, dst in hops:
            ns = self.convert_hop(src, dst, ns)
        return ns


def clock_name(key):
    return f"clock {key[1]}" if key[0] == "g" else f"sequence clock {key[2]} of sequence {key[1]}"


# ----------------------------------------------------------------------------------------------
# Per-sequence state (notes §2.1, §2.2)


class Sequence:
    def __init__(self, seq_id, first_index):
        self.id = seq_id
        self.first_index = first_index
        self.packets = 0
        self.first_packet_on_sequence = False
        self.first_packet_cleared = False
        self.cleared_count = 0
        self.loss_marks = []
        self.skipped = 0
        self.uses_incremental_state = False
        # incremental state
        self.valid = False                       # TP assumes it may have missed the start
        self.invalid_reason = "never cleared"
        self.interned = {}                       # InternedData field name -> iid -> entry
        self.defaults = None                     # TracePacketDefaults
        self.counter_totals = {}                 # incremental counters: track uuid -> total
        # survive CLEARED
        self.clocks = {}                         # clock id -> {"multiplier", "incremental", "last_ns"}
        self.legacy_thread_uuid = None
        self.snapshots = []

    def clear(self):
        """notes §2.2 step 2: new generation: interning, defaults, counter accumulators wiped."""
        self.valid = True
        self.invalid_reason = None
        self.interned = {}
        self.defaults = None
        self.counter_totals = {}
        self.cleared_count += 1

    def lose(self):
        self.valid = False
        self.invalid_reason = "packet loss"

    def default_track_uuid(self):
        if self.defaults is None or not self.defaults.HasField("track_event_defaults"):
            return None
        ted = self.defaults.track_event_defaults
        return ted.track_uuid if ted.HasField("track_uuid") else None

    def default_list(self, name):
        if self.defaults is None or not self.defaults.HasField("track_event_defaults"):
            return []
        return list(getattr(self.defaults.track_event_defaults, name))

    def to_json(self):
        return {"packets": self.packets, "first_packet_on_sequence": self.first_packet_on_sequence,
                "first_packet_cleared": self.first_packet_cleared, "cleared_count": self.cleared_count,
                "skipped_packets": self.skipped, "loss_marks": self.loss_marks}


# ----------------------------------------------------------------------------------------------
# Tracks (notes §2.5)


def enum_name(enum_type, value):
    try:
        return enum_type.Name(value)
    except ValueError:
        return value


def describe_track(td):
    """A TrackDescriptor as the model's track dict."""
    name = None
    for field in ("name", "static_name", "atrace_name"):
        if td.HasField(field):
            name = getattr(td, field)
    kind, pid, tid, thread_name, process_name, counter = "track", None, None, None, None, None
    if td.HasField("process"):
        kind, pid = "process", (td.process.pid if td.process.HasField("pid") else None)
        process_name = td.process.process_name if td.process.HasField("process_name") else None
    if td.HasField("thread"):
        kind = "thread"
        pid = td.thread.pid if td.thread.HasField("pid") else None
        tid = td.thread.tid if td.thread.HasField("tid") else None
        thread_name = td.thread.thread_name if td.thread.HasField("thread_name") else None
    if td.HasField("counter"):
        c = td.counter
        counter = {
            "type": enum_name(pb.CounterDescriptor.BuiltinCounterType, c.type) if c.HasField("type") else None,
            "categories": list(c.categories),
            "unit": enum_name(pb.CounterDescriptor.Unit, c.unit) if c.HasField("unit") else None,
            "unit_name": c.unit_name if c.HasField("unit_name") else None,
            "unit_multiplier": c.unit_multiplier if c.HasField("unit_multiplier") and c.unit_multiplier else 1,
            "is_incremental": bool(c.is_incremental),
            "y_axis_share_key": c.y_axis_share_key if c.HasField("y_axis_share_key") else None,
        }
        if kind == "track":
            kind = "counter"
    def optional(field):
        return getattr(td, field) if td.HasField(field) else None

    return {
        "uuid": td.uuid,
        "parent_uuid": optional("parent_uuid"),
        "name": name,
        "description": optional("description"),
        "kind": kind,
        "pid": pid,
        "tid": tid,
        "thread_name": thread_name,
        "process_name": process_name,
        "counter": counter,
        "is_state": td.HasField("state"),
        "sibling_merge_behavior": enum_name(pb.TrackDescriptor.SiblingMergeBehavior, td.sibling_merge_behavior)
        if td.HasField("sibling_merge_behavior") else None,
        "sibling_merge_key": optional("sibling_merge_key") if td.HasField("sibling_merge_key")
        else optional("sibling_merge_key_int"),
        "child_ordering": enum_name(pb.TrackDescriptor.ChildTracksOrdering, td.child_ordering)
        if td.HasField("child_ordering") else None,
        "sibling_order_rank": optional("sibling_order_rank"),
        "disallow_merging_with_system_tracks": bool(td.disallow_merging_with_system_tracks),
    }


def track_identity(track):
    """What must not change when a descriptor is re-emitted (notes §2.5: conflicting reservation)."""
    counter = track["counter"]
    counter_identity = None
    if counter is not None:
        counter_identity = (counter["type"], tuple(counter["categories"]), counter["unit_multiplier"],
                            counter["is_incremental"], counter["y_axis_share_key"])
    return {"parent_uuid": track["parent_uuid"], "process/thread": track["kind"] in ("process", "thread") and track["kind"],
            "pid": track["pid"], "tid": track["tid"], "counter": counter_identity, "state": track["is_state"],
            "sibling_merge_behavior": track["sibling_merge_behavior"], "sibling_merge_key": track["sibling_merge_key"]}


# ----------------------------------------------------------------------------------------------
# Debug annotations (notes §2.7)


class Pointer(int):
    """A pointer_value, printed as {"pointer": n}."""


def sanitize_arg_name(name):
    return name.replace(".", "_").replace("[", "_").replace("]", "_")


def flatten_args(prefix, value, out):
    """TP's arg keys: dict entries add `.name`, array elements `[i]`; empty containers add nothing."""
    if isinstance(value, dict):
        for k, v in value.items():
            flatten_args(f"{prefix}.{sanitize_arg_name(str(k))}", v, out)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            flatten_args(f"{prefix}[{i}]", v, out)
    elif value is not None:
        out[prefix] = value


def json_event(item):
    """An event or slice dict for JSON: only these members can hold pointers or NaN."""
    out = dict(item)
    for key in ("args", "flat_args", "counter_value", "extra_counter"):
        if key in out:
            out[key] = jsonable(out[key])
    return out


def jsonable(value):
    if isinstance(value, Pointer):
        return {"pointer": int(value)}
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # NaN / inf are not JSON
    return value


# ----------------------------------------------------------------------------------------------
# The model


class TraceModel:
    def __init__(self):
        self.report = Report()
        self.wire = WireChecker(self.report)
        self.clock_graph = ClockGraph()
        self.global_clocks = {}           # clock id -> {"multiplier", "incremental"}
        self.global_snapshots = []
        self.sequences = {}
        self.tracks = {}                  # uuid -> track dict (first accepted descriptor, names updated)
        self.track_identities = {}
        self.thread_owner = {}            # (pid, tid) -> uuid
        self.process_owner = {}           # pid -> uuid
        self.raw_events = []              # tokenized events (timestamps not yet converted)
        self.trace_stats = []
        self.packets = 0
        self.skipped_packets = 0
        self.truncated_tail = False
        self.fatal = None

    # -- entry points --------------------------------------------------------------------------

    def load(self, data):
        """Frame, decode and tokenize every packet, then resolve the model. Returns the JSON dict."""
        if data[:2] == b"\x1f\x8b":   # notes §1.1: a whole-file gzip is accepted
            data = zlib.decompressobj(47).decompress(data)
        if not data:
            self.report.error("empty file: TP does not detect it as a proto trace")
        elif data[0] != 0x0A:
            self.report.error(f"first byte is 0x{data[0]:02x}, not 0x0A: TP does not detect a proto trace")
        bodies, self.truncated_tail = split_frames(data, self.report)
        try:
            self.tokenize_all(bodies)
        except Fatal as exc:
            self.fatal = str(exc)
            self.report.error(f"fatal (TP aborts the import): {exc}")
        return self.resolve()

    def tokenize_all(self, bodies):
        for body in bodies:
            pkt, raw = self.decode_packet(body)
            if PKT_COMPRESSED in raw:   # notes §1.1: compressed_packets are expanded inline
                self.expand_compressed(raw[PKT_COMPRESSED][-1])
                continue
            self.tokenize_packet(self.packets, pkt, raw)
            self.packets += 1

    def expand_compressed(self, blob):
        try:
            inner = zlib.decompressobj(47).decompress(blob)
        except zlib.error as exc:
            raise Fatal(f"packet {self.packets}: compressed_packets do not decompress: {exc}")
        bodies, torn = split_frames(inner, self.report)
        if torn:
            raise Fatal(f"packet {self.packets}: compressed_packets end in a torn packet")
        self.tokenize_all(bodies)

    def decode_packet(self, body):
        """notes §1.1: a malformed packet body is fatal. Wire-level checks run on the raw bytes."""
        where = f"packet {self.packets}"
        try:
            self.wire.check(body, pb.TracePacket.DESCRIPTOR, where)
            raw = top_level_fields(body)
            pkt = pb.TracePacket.FromString(bytes(body))
        except Exception as exc:  # WireError or protobuf DecodeError
            raise Fatal(f"{where}: does not parse as a TracePacket: {exc}")
        return pkt, raw

    # -- per packet, in TP's order (notes §2.2) ------------------------------------------------

    def tokenize_packet(self, idx, pkt, raw):
        seq_id = pkt.trusted_packet_sequence_id if pkt.HasField("trusted_packet_sequence_id") else 0
        flags = pkt.sequence_flags
        cleared = bool(flags & SEQ_INCREMENTAL_STATE_CLEARED) or pkt.incremental_state_cleared
        self.check_data_oneof(idx, raw)
        if seq_id == 0:
            self.tokenize_packet_without_sequence(idx, pkt, raw, flags, cleared)
            return
        seq = self.sequence(seq_id, idx)
        self.rule_first_packet(idx, seq, pkt, cleared)
        self.rule_loss_and_clear(idx, seq, pkt, cleared)                   # steps 1-2
        if pkt.HasField("trace_packet_defaults"):                           # step 3
            seq.defaults = pb.TracePacketDefaults()
            seq.defaults.CopyFrom(pkt.trace_packet_defaults)
            seq.uses_incremental_state = True
        if pkt.HasField("interned_data"):                                   # step 4
            self.rule_interned_data(idx, seq, pkt.interned_data)
        if PKT_CLOCK_SNAPSHOT in raw:                                       # step 5
            self.rule_clock_snapshot(idx, seq_id, seq, raw)
            return
        self.collect_trace_stats(raw)
        if flags & SEQ_NEEDS_INCREMENTAL_STATE and not seq.valid:           # step 6
            self.rule_skip_needs_incremental_state(idx, seq)
            return
        uses = PacketUse(cleared)
        ts_key = self.rule_timestamp(idx, seq, pkt, uses)                   # step 7
        if ts_key is FAILED:
            return  # TP skips a packet whose timestamp cannot be converted
        if PKT_TRACK_EVENT in raw:
            te = pb.TrackEvent.FromString(raw[PKT_TRACK_EVENT][-1])
            self.tokenize_track_event(idx, seq, te, ts_key, uses)
        elif PKT_TRACK_DESCRIPTOR in raw:
            td = pb.TrackDescriptor.FromString(raw[PKT_TRACK_DESCRIPTOR][-1])
            self.rule_track_descriptor(idx, seq, td)
        self.rule_legacy_descriptors(idx, pkt)
        self.rule_needs_flag_set(idx, seq, flags, uses)

    def tokenize_packet_without_sequence(self, idx, pkt, raw, flags, cleared):
        """notes §2.1: without trusted_packet_sequence_id interning/defaults/CLEARED are ignored,
        TrackEvents are dropped, flag 2 and sequence clocks are fatal."""
        where = f"packet {idx}"
        if flags & SEQ_NEEDS_INCREMENTAL_STATE:
            raise Fatal(f"{where}: SEQ_NEEDS_INCREMENTAL_STATE without trusted_packet_sequence_id")
        if cleared:
            self.report.error(f"{where}: incremental state cleared without trusted_packet_sequence_id (ignored)")
        if pkt.HasField("trace_packet_defaults"):
            self.report.error(f"{where}: trace_packet_defaults without trusted_packet_sequence_id (ignored)")
        if pkt.HasField("interned_data"):
            self.report.error(f"{where}: interned_data without trusted_packet_sequence_id (ignored)")
        if PKT_CLOCK_SNAPSHOT in raw:
            self.rule_clock_snapshot(idx, 0, None, raw)
            return
        self.collect_trace_stats(raw)
        if PKT_TRACK_EVENT in raw:
            self.report.error(f"{where}: TrackEvent without trusted_packet_sequence_id (TP drops it: "
                              "track_event_missing_sequence_id)")
        elif PKT_TRACK_DESCRIPTOR in raw:
            ts_clock = pkt.timestamp_clock_id if pkt.HasField("timestamp_clock_id") else 0
            if pkt.HasField("timestamp") and ts_clock in SEQUENCE_CLOCKS:
                raise Fatal(f"{where}: sequence-scoped clock {ts_clock} without trusted_packet_sequence_id")
            self.rule_track_descriptor(idx, None, pb.TrackDescriptor.FromString(raw[PKT_TRACK_DESCRIPTOR][-1]))

    def sequence(self, seq_id, idx):
        seq = self.sequences.get(seq_id)
        if seq is None:
            seq = self.sequences[seq_id] = Sequence(seq_id, idx)
        seq.packets += 1
        return seq

    # -- rules ---------------------------------------------------------------------------------

    def check_data_oneof(self, idx, raw):
        """TracePacket.data is a oneof: python-protobuf keeps one member, TP's decoder sees all.
        notes §2.2 step 5: a ClockSnapshot packet is not processed further (event/descriptor lost)."""
        present = sorted(n for n in raw if n in DATA_ONEOF_FIELDS)
        if PKT_CLOCK_SNAPSHOT in present and (PKT_TRACK_EVENT in present or PKT_TRACK_DESCRIPTOR in present):
            self.report.error(f"packet {idx}: ClockSnapshot packet also carries a track_event/track_descriptor "
                              "(TP stops at the snapshot: the event/descriptor is ignored)")
        elif len(present) > 1:
            names = [DATA_ONEOF_FIELDS[n] for n in present]
            self.report.error(f"packet {idx}: several members of the TracePacket data oneof: {names}")
        for num in present:
            if len(raw[num]) > 1:
                self.report.error(f"packet {idx}: field {DATA_ONEOF_FIELDS[num]} appears {len(raw[num])} times")

    def rule_first_packet(self, idx, seq, pkt, cleared):
        """notes §2.8: first_packet_on_sequence belongs on the first packet of a sequence, once."""
        if seq.packets == 1:
            seq.first_packet_cleared = cleared
            seq.first_packet_on_sequence = bool(pkt.first_packet_on_sequence)
        elif pkt.first_packet_on_sequence:
            self.report.warn(f"packet {idx} (seq {seq.id}): first_packet_on_sequence on a packet that is not "
                             "the first of its sequence")

    def rule_loss_and_clear(self, idx, seq, pkt, cleared):
        """notes §2.2 steps 1-2: CLEARED starts a new generation (valid); otherwise
        previous_packet_dropped makes the state invalid until the next CLEARED."""
        dropped = pkt.previous_packet_dropped
        if dropped:
            seq.loss_marks.append({"packet_index": idx, "previous_packet_dropped": dropped})
        if cleared:
            seq.clear()
        elif dropped:
            seq.lose()

    def rule_interned_data(self, idx, seq, interned):
        """notes §2.2 step 4: entries are added only while the state is valid; first definition
        of an iid in a generation wins."""
        seq.uses_incremental_state = True
        if not seq.valid:
            msg = (f"packet {idx} (seq {seq.id}): interned_data ignored: incremental state invalid "
                   f"({seq.invalid_reason})")
            if seq.invalid_reason == "packet loss":
                self.report.warn(msg)    # expected after a declared loss, until the next CLEARED
            else:
                self.report.error(msg)
            return
        for field, entries in interned.ListFields():
            table = seq.interned.setdefault(field.name, {})
            for entry in entries:
                iid = getattr(entry, "iid", None)
                if iid is None:
                    continue
                if iid == 0:
                    self.report.error(f"packet {idx} (seq {seq.id}): {field.name} entry with iid 0 (0 means unset)")
                old = table.get(iid)
                if old is None:
                    table[iid] = entry
                elif old != entry:
                    self.report.error(f"packet {idx} (seq {seq.id}): {field.name} iid {iid} redefined with "
                                      "different content in the same generation (TP keeps the first)")

    def rule_clock_snapshot(self, idx, seq_id, seq, raw):
        """notes §2.4: clocks 64..127 are per sequence; multiplier / incremental flag are fixed for
        (sequence, clock); incremental only for 64..127; a snapshot resets last_ns of incremental
        clocks; a rejected snapshot changes nothing."""
        snap = pb.ClockSnapshot.FromString(raw[PKT_CLOCK_SNAPSHOT][-1])
        where = f"packet {idx}" + (f" (seq {seq_id})" if seq_id else "")
        record = {"packet_index": idx, "primary_trace_clock": snap.primary_trace_clock
                  if snap.HasField("primary_trace_clock") else None, "clocks": [], "accepted": True}
        entries, problems, registrations = {}, [], []
        for c in snap.clocks:
            mult = c.unit_multiplier_ns if c.HasField("unit_multiplier_ns") else 1
            record["clocks"].append({"clock_id": c.clock_id, "timestamp": c.timestamp,
                                     "is_incremental": bool(c.is_incremental), "unit_multiplier_ns": mult})
            if c.clock_id in SEQUENCE_CLOCKS:
                if seq_id == 0:
                    raise Fatal(f"{where}: sequence-scoped clock {c.clock_id} in a snapshot without "
                                "trusted_packet_sequence_id")
                key, registry = ("s", seq_id, c.clock_id), seq.clocks
                seq.uses_incremental_state = True
            else:
                key, registry = ("g", c.clock_id), self.global_clocks
                if c.is_incremental:
                    problems.append(f"clock {c.clock_id} is incremental; only ids 64..127 may be")
            if mult == 0:
                problems.append(f"clock {c.clock_id} has unit_multiplier_ns 0")
            if key == self.clock_graph.trace_clock and mult != 1:
                problems.append(f"the trace-time clock {c.clock_id} must have unit_multiplier_ns 1")
            old = registry.get(c.clock_id)
            if old is not None and (old["multiplier"], old["incremental"]) != (mult, bool(c.is_incremental)):
                problems.append(f"{clock_name(key)} previously registered with different properties "
                                f"(unit_multiplier_ns {old['multiplier']} -> {mult}, is_incremental "
                                f"{old['incremental']} -> {bool(c.is_incremental)})")
            entries[key] = to_int64(c.timestamp) * mult
            registrations.append((registry, c.clock_id, mult, bool(c.is_incremental), entries[key]))
        backwards = self.clock_graph.went_backwards(entries) if entries else None
        if backwards is not None:
            problems.append(f"{clock_name(backwards)} went backwards since the previous snapshot of this clock set")
        if problems:
            record["accepted"] = False
            for p in problems:
                self.report.error(f"{where}: ClockSnapshot rejected (invalid_clock_snapshots): {p}")
        else:
            for registry, clock_id, mult, incremental, ns in registrations:
                domain = registry.setdefault(clock_id, {"multiplier": mult, "incremental": incremental})
                if incremental:
                    domain["last_ns"] = ns
            if len(entries) > 1:
                self.clock_graph.add(entries)
            self.rule_primary_trace_clock(where, snap)
        (seq.snapshots if seq is not None else self.global_snapshots).append(record)

    def rule_primary_trace_clock(self, where, snap):
        """notes §2.4: trace time is BOOTTIME unless a snapshot declares primary_trace_clock."""
        if not snap.HasField("primary_trace_clock"):
            return
        wanted = ("g", snap.primary_trace_clock)
        if not self.clock_graph.trace_clock_declared:
            self.clock_graph.trace_clock = wanted
            self.clock_graph.trace_clock_declared = True
        elif wanted != self.clock_graph.trace_clock:
            self.report.warn(f"{where}: primary_trace_clock {wanted[1]} ignored: trace clock already "
                             f"{self.clock_graph.trace_clock[1]}")

    def collect_trace_stats(self, raw):
        if PKT_TRACE_STATS in raw:
            self.trace_stats.append(MessageToDict(pb.TraceStats.FromString(raw[PKT_TRACE_STATS][-1]),
                                                   preserving_proto_field_name=True))

    def rule_skip_needs_incremental_state(self, idx, seq):
        """notes §2.2 step 6: SEQ_NEEDS_INCREMENTAL_STATE while invalid -> the packet is skipped
        (packet_skipped_seq_needs_incremental_state_invalid). After a declared loss that is the
        expected outcome (only counted); on a sequence never cleared it is a writer error."""
        seq.skipped += 1
        self.skipped_packets += 1
        seq.uses_incremental_state = True
        if seq.invalid_reason != "packet loss":
            self.report.error(f"packet {idx} (seq {seq.id}): skipped: SEQ_NEEDS_INCREMENTAL_STATE but the "
                              "sequence was never cleared (SEQ_INCREMENTAL_STATE_CLEARED)")

    def rule_timestamp(self, idx, seq, pkt, uses):
        """notes §2.4: returns None (no timestamp), FAILED, or (clock key | "raw", value in ns).
        Effective clock: packet timestamp_clock_id, else TracePacketDefaults, else none (raw).
        Incremental sequence clocks accumulate last_ns += timestamp * multiplier for every packet
        that gets here with a timestamp (descriptor and interned-only packets included)."""
        if not pkt.HasField("timestamp"):
            return None
        value = to_int64(pkt.timestamp)
        if pkt.HasField("timestamp_clock_id"):
            clock_id = pkt.timestamp_clock_id
        elif seq.defaults is not None and seq.defaults.HasField("timestamp_clock_id"):
            clock_id = seq.defaults.timestamp_clock_id
            uses.depends("TracePacketDefaults.timestamp_clock_id")
        else:
            clock_id = 0
        if clock_id == 0:
            return ("raw", value)
        if clock_id in SEQUENCE_CLOCKS:
            seq.uses_incremental_state = True
            domain = seq.clocks.get(clock_id)
            if domain is None:
                self.report.error(f"packet {idx} (seq {seq.id}): timestamp on sequence clock {clock_id}, "
                                  "which no ClockSnapshot of this sequence defined (TP drops the packet)")
                return FAILED
            if domain["incremental"]:
                uses.depends(f"incremental clock {clock_id}")
                domain["last_ns"] += value * domain["multiplier"]
                return (("s", seq.id, clock_id), domain["last_ns"])
            return (("s", seq.id, clock_id), value * domain["multiplier"])
        domain = self.global_clocks.get(clock_id)
        return (("g", clock_id), value * (domain["multiplier"] if domain else 1))

    def rule_track_descriptor(self, idx, seq, td):
        """notes §2.5: uuid required; thread needs pid+tid, process needs pid; re-emission must be
        identical in identity (else conflicting reservation, new one ignored); one uuid per
        process and per thread (else pid/tid reuse); uuid 0 has no parent."""
        where = f"packet {idx}" + (f" (seq {seq.id})" if seq is not None else "")
        if not td.HasField("uuid"):
            self.report.error(f"{where}: TrackDescriptor without uuid (dropped)")
            return
        track = describe_track(td)
        uuid = track["uuid"]
        if track["kind"] == "thread" and (track["pid"] is None or track["tid"] is None):
            self.report.error(f"{where}: thread descriptor {uuid} without pid and tid (dropped)")
            return
        if track["kind"] == "process" and track["pid"] is None:
            self.report.error(f"{where}: process descriptor {uuid} without pid (dropped)")
            return
        if uuid == 0 and track["parent_uuid"]:
            self.report.error(f"{where}: descriptor for uuid 0 (Default Track) has a parent")
        identity = track_identity(track)
        old = self.tracks.get(uuid)
        if old is None:
            self.tracks[uuid] = track
            self.track_identities[uuid] = identity
            self.rule_pid_tid_reuse(where, track)
        elif identity != self.track_identities[uuid]:
            diff = sorted(k for k in identity if identity[k] != self.track_identities[uuid][k])
            self.report.error(f"{where}: descriptor for uuid {uuid} conflicts with an earlier one in {diff} "
                              "(track_descriptor_conflicting_reservation; TP ignores it)")
            return
        else:
            self.merge_track_names(old, track)
        if track["kind"] == "thread" and seq is not None and seq.valid:
            seq.legacy_thread_uuid = uuid    # notes §2.5: becomes the sequence's legacy thread

    def merge_track_names(self, old, new):
        """notes §2.5: mergeable tracks keep the first non-null name, SIBLING_MERGE_BEHAVIOR_NONE the last."""
        if new["name"] is not None and (old["name"] is None or
                                        old["sibling_merge_behavior"] == "SIBLING_MERGE_BEHAVIOR_NONE"):
            old["name"] = new["name"]
        for field in ("thread_name", "process_name", "description"):
            if new[field] is not None:
                old[field] = new[field]

    def rule_pid_tid_reuse(self, where, track):
        if track["kind"] == "thread":
            owners, key, what = self.thread_owner, (track["pid"], track["tid"]), "pid/tid"
        elif track["kind"] == "process":
            owners, key, what = self.process_owner, track["pid"], "pid"
        else:
            return
        other = owners.setdefault(key, track["uuid"])
        if other != track["uuid"]:
            self.report.warn(f"{where}: pid/tid reuse: {what} {key} described by uuid {track['uuid']} and "
                             f"uuid {other} (TP creates a second {track['kind']})")

    def rule_legacy_descriptors(self, idx, pkt):
        for field in ("thread_descriptor", "process_descriptor"):
            if pkt.HasField(field):
                self.report.warn(f"packet {idx}: legacy {field} is not modelled (use TrackDescriptor)")

    def rule_needs_flag_set(self, idx, seq, flags, uses):
        """notes §2.2: every packet that depends on incremental state should carry flag 2, so a
        reader skips it after loss instead of mis-attributing it."""
        if uses.needs and not uses.cleared and not flags & SEQ_NEEDS_INCREMENTAL_STATE:
            self.report.warn(f"packet {idx} (seq {seq.id}): depends on incremental state "
                             f"({', '.join(sorted(uses.needs))}) without SEQ_NEEDS_INCREMENTAL_STATE")

    # -- track events (tokenization) -------------------------------------------------------------

    def lookup(self, seq, table, iid, where, uses):
        """An interned entry of this sequence's current generation, or None (an error)."""
        uses.depends("interned data")
        seq.uses_incremental_state = True
        entry = seq.interned.get(table, {}).get(iid)
        if entry is None:
            self.report.error(f"{where}: {table} iid {iid} referenced but not interned on this sequence "
                              f"(state {'valid' if seq.valid else 'invalid: ' + seq.invalid_reason})")
        return entry

    def tokenize_track_event(self, idx, seq, te, ts_key, uses):
        where = f"packet {idx} (seq {seq.id})"
        if ts_key is None:
            self.report.error(f"{where}: TrackEvent without timestamp (track_event_missing_timestamp)")
            return
        etype = te.type if te.HasField("type") else 0
        if not self.rule_event_type(where, te, etype):
            return
        track_uuid = self.event_track_uuid(seq, te, uses)
        name = self.event_name(where, seq, te, uses)
        categories = self.event_categories(where, seq, te, uses)
        self.rule_slice_end_unnamed(where, te, etype)
        args = self.event_args(where, seq, te, uses)
        event = {
            "seq": seq.id, "packet_index": idx, "ts": None, "type": EVENT_TYPES[etype],
            "track_uuid": track_uuid, "name": name, "categories": categories, "args": args,
            "flat_args": {}, "counter_value": None, "extra_counter": [],
            "flow_ids": list(te.flow_ids) + list(te.flow_ids_old),
            "terminating_flow_ids": list(te.terminating_flow_ids) + list(te.terminating_flow_ids_old),
            "source_location": self.event_source_location(where, seq, te, uses),
            "log": self.event_log(where, seq, te, uses),
            "correlation_id": self.event_correlation_id(where, seq, te, uses),
        }
        for key, value in args.items():
            flatten_args(f"debug.{sanitize_arg_name(key)}", value, event["flat_args"])
        counters = self.event_counters(where, seq, te, etype, track_uuid, event, uses)
        if counters is None:
            return
        if etype != 4 and self.tracks.get(track_uuid, {}).get("kind") == "counter":
            self.report.warn(f"{where}: {EVENT_TYPES[etype]} on counter track {track_uuid}")
        self.raw_events.append({"event": event, "ts_key": ts_key, "counters": counters,
                                "order": len(self.raw_events)})

    def rule_event_type(self, where, te, etype):
        """notes §2.6: type 0 without a legacy phase is rejected; legacy events are not modelled."""
        if etype == 0:
            if te.HasField("legacy_event") and te.legacy_event.HasField("phase"):
                self.report.warn(f"{where}: legacy_event phase events are not modelled (event ignored)")
            else:
                self.report.error(f"{where}: TrackEvent without type (type 0 is rejected by TP)")
            return False
        if etype not in (1, 2, 3, 4):
            self.report.warn(f"{where}: TrackEvent type {EVENT_TYPES.get(etype, etype)} is not modelled (ignored)")
            return False
        return True

    def event_track_uuid(self, seq, te, uses):
        """Explicit track_uuid (0 = Default Track), else TrackEventDefaults.track_uuid, else the
        sequence's legacy thread (a thread descriptor tokenized on it), else 0."""
        if te.HasField("track_uuid"):
            return te.track_uuid
        default = seq.default_track_uuid()
        if default is not None:
            uses.depends("default track")
            return default
        if seq.legacy_thread_uuid is not None:
            return seq.legacy_thread_uuid
        return 0

    def event_name(self, where, seq, te, uses):
        if te.HasField("name_iid"):
            if te.name_iid == 0:
                return None
            entry = self.lookup(seq, "event_names", te.name_iid, where, uses)
            return entry.name if entry is not None else None
        return te.name if te.HasField("name") else None

    def event_categories(self, where, seq, te, uses):
        """Unresolved category iids show as "unknown(<iid>)" in TP."""
        names = []
        for iid in te.category_iids:
            entry = self.lookup(seq, "event_categories", iid, where, uses)
            names.append(entry.name if entry is not None else f"unknown({iid})")
        return names + list(te.categories)

    def rule_slice_end_unnamed(self, where, te, etype):
        """notes §2.6: SLICE_END must carry no name / categories (TP would match them)."""
        if etype == 2 and (te.HasField("name_iid") or te.HasField("name") or te.category_iids or te.categories):
            self.report.error(f"{where}: SLICE_END carries a name or categories")

    def event_args(self, where, seq, te, uses):
        """notes §2.7: top-level annotations need a resolvable name, else they are dropped."""
        args = {}
        for ann in te.debug_annotations:
            name = self.annotation_name(where, seq, ann, uses)
            if name is None:
                continue
            args[name] = self.annotation_value(where, seq, ann, uses)
        return args

    def annotation_name(self, where, seq, ann, uses):
        if ann.HasField("name_iid"):
            entry = self.lookup(seq, "debug_annotation_names", ann.name_iid, where, uses)
            if entry is None:
                return None
            return entry.name
        if ann.HasField("name"):
            return ann.name
        self.report.error(f"{where}: debug annotation without a name (dropped)")
        return None

    def annotation_value(self, where, seq, ann, uses):
        which = ann.WhichOneof("value")
        if which in ("bool_value", "uint_value", "int_value", "double_value", "string_value"):
            return getattr(ann, which)
        if which == "pointer_value":
            return Pointer(ann.pointer_value)
        if which == "string_value_iid":
            entry = self.lookup(seq, "debug_annotation_string_values", ann.string_value_iid, where, uses)
            return entry.str.decode("utf-8", "replace") if entry is not None else None
        if which == "legacy_json_value":
            try:
                return json.loads(ann.legacy_json_value)
            except ValueError:
                self.report.error(f"{where}: legacy_json_value is not JSON")
                return ann.legacy_json_value
        if which == "nested_value":
            return nested_value(ann.nested_value)
        if ann.dict_entries:
            out = {}
            for entry in ann.dict_entries:
                name = self.annotation_name(where, seq, entry, uses)
                if name is not None:
                    out[name] = self.annotation_value(where, seq, entry, uses)
            return out
        if ann.array_values:
            return [self.annotation_value(where, seq, v, uses) for v in ann.array_values]
        if ann.HasField("proto_value"):
            type_name = ann.proto_type_name if ann.HasField("proto_type_name") else None
            if ann.HasField("proto_type_name_iid"):
                entry = self.lookup(seq, "debug_annotation_value_type_names", ann.proto_type_name_iid, where, uses)
                type_name = entry.name if entry is not None else None
            return {"proto_type_name": type_name, "proto_value_hex": ann.proto_value.hex()}
        return None

    def event_source_location(self, where, seq, te, uses):
        if te.HasField("source_location"):
            loc = te.source_location
        elif te.HasField("source_location_iid"):
            loc = self.lookup(seq, "source_locations", te.source_location_iid, where, uses)
            if loc is None:
                return None
        else:
            return None
        return source_location_json(loc)

    def event_log(self, where, seq, te, uses):
        """LogMessage: body is interned only; prio defaults to INFO (4)."""
        if not te.HasField("log_message"):
            return None
        lm = te.log_message
        body = None
        if lm.HasField("body_iid"):
            entry = self.lookup(seq, "log_message_body", lm.body_iid, where, uses)
            body = entry.body if entry is not None else None
        location = None
        if lm.HasField("source_location_iid"):
            loc = self.lookup(seq, "source_locations", lm.source_location_iid, where, uses)
            location = source_location_json(loc) if loc is not None else None
        return {"body": body, "prio": lm.prio if lm.HasField("prio") else DEFAULT_LOG_PRIO,
                "source_location": location}

    def event_correlation_id(self, where, seq, te, uses):
        which = te.WhichOneof("correlation_id_field")
        if which == "correlation_id_str_iid":
            entry = self.lookup(seq, "correlation_id_str", te.correlation_id_str_iid, where, uses)
            return entry.str.decode("utf-8", "replace") if entry is not None else None
        return getattr(te, which) if which else None

    def event_counters(self, where, seq, te, etype, track_uuid, event, uses):
        """notes §2.6: COUNTER needs a counter track described before (file order) and a value;
        extra counters go to the event's uuid list (else the defaults'), at most 8, every uuid a
        described counter track, else the whole event is dropped. Returns [(uuid, value)] with
        unit_multiplier applied and incremental values accumulated, or None (dropped)."""
        wanted = []
        if etype == 4:
            if not self.is_counter_track(track_uuid):
                self.report.error(f"{where}: counter event on uuid {track_uuid}, which is not (yet, in file order) "
                                  "described as a counter track (dropped)")
                return None
            which = te.WhichOneof("counter_value_field")
            if which is None:
                self.report.error(f"{where}: COUNTER event without counter_value / double_counter_value (dropped)")
                return None
            event["counter_value"] = getattr(te, which)
            wanted.append((track_uuid, event["counter_value"]))
        extras = self.extra_counter_pairs(where, seq, te, uses)
        if extras is None:
            return None
        event["extra_counter"] = [[u, v] for u, v in extras]
        wanted += extras
        for uuid, value in wanted:
            if self.tracks[uuid]["counter"]["is_incremental"] and isinstance(value, float):
                self.report.error(f"{where}: double value on incremental counter track {uuid} (dropped)")
                return None
        return [(uuid, self.counter_value(seq, uuid, value, uses)) for uuid, value in wanted]

    def extra_counter_pairs(self, where, seq, te, uses):
        if not te.extra_counter_values and not te.extra_double_counter_values:
            return []
        pairs = []
        for values_field, uuids_field in (("extra_counter_values", "extra_counter_track_uuids"),
                                          ("extra_double_counter_values", "extra_double_counter_track_uuids")):
            values = list(getattr(te, values_field))
            if not values:
                continue
            uuids = list(getattr(te, uuids_field))
            if not uuids:
                uuids = seq.default_list(uuids_field)
                uses.depends("default extra counter tracks")
            if len(values) > len(uuids):
                self.report.error(f"{where}: {len(values)} {values_field} but only {len(uuids)} track uuids (dropped)")
                return None
            pairs += list(zip(uuids, values))
        if len(pairs) > MAX_EXTRA_COUNTERS:
            self.report.error(f"{where}: {len(pairs)} extra counter values, at most {MAX_EXTRA_COUNTERS} (dropped)")
            return None
        for uuid, _ in pairs:
            if not self.is_counter_track(uuid):
                self.report.error(f"{where}: extra counter on uuid {uuid}, which is not (yet, in file order) "
                                  "described as a counter track (event dropped)")
                return None
        return pairs

    def is_counter_track(self, uuid):
        track = self.tracks.get(uuid)
        return track is not None and track["counter"] is not None

    def counter_value(self, seq, uuid, value, uses):
        """notes §2.6: multiplied by unit_multiplier; incremental values accumulate per
        (sequence, track) and restart from 0 at CLEARED."""
        counter = self.tracks[uuid]["counter"]
        if counter["is_incremental"]:
            uses.depends("incremental counter")
            value = seq.counter_totals[uuid] = seq.counter_totals.get(uuid, 0) + value
        return value * counter["unit_multiplier"]

    # -- resolution (after all packets: TP sorts by timestamp, then parses) ---------------------

    def resolve(self):
        events = self.resolve_events()
        slices, flows = self.build_slices_and_flows(events)
        counters = self.build_counters(events)
        self.check_sequences()
        self.check_dangling_parents()
        self.report.finish()
        return {
            "packets": self.packets,
            "truncated_tail": self.truncated_tail,
            "errors": self.report.errors,
            "warnings": self.report.warnings,
            "skipped_packets": self.skipped_packets,
            "fatal": self.fatal,
            "trace_clock": self.clock_graph.trace_clock[1],
            "sequences": {str(k): s.to_json() for k, s in sorted(self.sequences.items())},
            "tracks": {str(u): t for u, t in self.tracks.items()},
            "events": [json_event(e["event"]) for e in events],
            "dropped_events": len(self.raw_events) - len(events),
            "slices": [json_event(s) for s in slices],
            "counters": counters,
            "flows": flows,
            "clocks": {str(k): s.snapshots for k, s in sorted(self.sequences.items()) if s.snapshots},
            "global_snapshots": self.global_snapshots,
            "trace_stats": self.trace_stats,
        }

    def resolve_events(self):
        """Convert timestamps to trace time and drop events TP would drop at parse time."""
        resolved, chain_problems, undescribed = [], {}, set()
        for raw in self.raw_events:
            event = raw["event"]
            where = f"packet {event['packet_index']} (seq {event['seq']})"
            ts = self.trace_time(raw["ts_key"], where)
            if ts is None:
                continue
            event["ts"] = ts
            uuids = [event["track_uuid"]] + [u for u, _ in event["extra_counter"]]
            problem = None
            for uuid in uuids:
                if uuid not in chain_problems:
                    chain_problems[uuid] = self.parent_chain_problem(uuid)
                problem = problem or chain_problems[uuid]
            if problem:
                self.report.error(f"{where}: event dropped (track_hierarchy_missing_uuid): {problem}")
                continue
            uuid = event["track_uuid"]
            if uuid != 0 and uuid not in self.tracks and uuid not in undescribed:
                undescribed.add(uuid)
                self.report.warn(f"events on uuid {uuid}, which no TrackDescriptor describes "
                                 "(TP puts them on a global track named after the event)")
            raw["counters_resolved"] = [(u, ts, v) for u, v in raw["counters"]]
            resolved.append(raw)
        return resolved

    def trace_time(self, ts_key, where):
        kind, value = ts_key
        if kind == "raw":
            ts = value
        else:
            ts = self.clock_graph.to_trace_time(kind, value)
            if ts is None:
                self.report.error(f"{where}: no ClockSnapshot path from {clock_name(kind)} to the trace clock "
                                  f"{self.clock_graph.trace_clock[1]} (clock_sync_failure; event dropped)")
                return None
        if ts < 0:
            self.report.error(f"{where}: negative timestamp {ts} (event dropped)")
            return None
        return ts

    def parent_chain_problem(self, uuid):
        """notes §2.5: every parent_uuid up the chain must be described; no loops, depth <= 100.
        process / thread descriptors ignore their parent_uuid."""
        seen, current = set(), uuid
        while True:
            track = self.tracks.get(current)
            if track is None:
                return None if current == uuid else f"parent uuid {current} of track {uuid} is never described"
            if track["kind"] in ("process", "thread") or not track["parent_uuid"]:
                return None
            if current in seen or len(seen) > MAX_TRACK_DEPTH:
                return f"parent chain of track {uuid} loops or is deeper than {MAX_TRACK_DEPTH}"
            seen.add(current)
            current = track["parent_uuid"]

    def build_slices_and_flows(self, events):
        """notes §2.6: per track, in (ts, file order): BEGIN pushes, END pops the innermost open
        slice (matching name/categories if the END has them), INSTANT = dur 0 at the current depth.
        Flows run over the same global order: bound slice = the one created or closed."""
        slices, flows, stacks, active = [], [], {}, {}
        timeline = sorted((r for r in events if r["event"]["type"] != "COUNTER"),
                          key=lambda r: (r["event"]["ts"], r["order"]))
        for raw in timeline:
            ev = raw["event"]
            stack = stacks.setdefault(ev["track_uuid"], [])
            if ev["type"] == "SLICE_END":
                index = self.close_slice(ev, stack, slices)
                if index is None:
                    continue
            else:
                index = len(slices)
                slices.append(new_slice(ev, depth=len(stack), parent=stack[-1] if stack else None))
                if ev["type"] == "SLICE_BEGIN":
                    stack.append(index)
            apply_flows(ev, index, slices, active, flows)
        return slices, flows

    def close_slice(self, ev, stack, slices):
        position = None
        for pos in range(len(stack) - 1, -1, -1):
            s = slices[stack[pos]]
            if (ev["name"] is None or ev["name"] == s["name"]) and \
                    (not ev["categories"] or ev["categories"] == s["categories"]):
                position = pos
                break
        if position is None:
            self.report.warn(f"packet {ev['packet_index']} (seq {ev['seq']}): unmatched end on track "
                             f"{ev['track_uuid']} at ts {ev['ts']} (ignored)")
            return None
        index = stack.pop(position)
        s = slices[index]
        s["dur"] = ev["ts"] - s["ts"]
        s["args"].update(ev["args"])
        s["flat_args"].update(ev["flat_args"])
        s["flow_ids"] += ev["flow_ids"]
        s["terminating_flow_ids"] += ev["terminating_flow_ids"]
        return index

    def build_counters(self, events):
        rows = [(ts, raw["order"], uuid, value) for raw in events for uuid, ts, value in raw["counters_resolved"]]
        rows.sort(key=lambda r: (r[0], r[1]))
        return [{"track_uuid": uuid, "ts": ts, "value": jsonable(value)} for ts, _, uuid, value in rows]

    def check_sequences(self):
        """notes §2.2/§2.8: a sequence that uses incremental state must start with a CLEARED packet."""
        for seq in self.sequences.values():
            if seq.uses_incremental_state and not seq.first_packet_cleared:
                self.report.error(f"seq {seq.id}: first packet (packet {seq.first_index}) is not "
                                  "SEQ_INCREMENTAL_STATE_CLEARED but the sequence uses interning / defaults / "
                                  "sequence clocks / SEQ_NEEDS_INCREMENTAL_STATE")

    def check_dangling_parents(self):
        for uuid, track in self.tracks.items():
            parent = track["parent_uuid"]
            if parent and track["kind"] not in ("process", "thread") and parent not in self.tracks:
                self.report.warn(f"track {uuid}: parent_uuid {parent} is never described")


class PacketUse:
    """What a packet depends on of the incremental state (for the flag-2 advice)."""

    def __init__(self, cleared):
        self.cleared = cleared
        self.needs = set()

    def depends(self, what):
        self.needs.add(what)


def nested_value(nv):
    """Deprecated DebugAnnotation.NestedValue."""
    if nv.nested_type == pb.DebugAnnotation.NestedValue.DICT:
        return {k: nested_value(v) for k, v in zip(nv.dict_keys, nv.dict_values)}
    if nv.nested_type == pb.DebugAnnotation.NestedValue.ARRAY:
        return [nested_value(v) for v in nv.array_values]
    for field in ("int_value", "double_value", "bool_value", "string_value"):
        if nv.HasField(field):
            return getattr(nv, field)
    return None


def source_location_json(loc):
    return {"file": loc.file_name if loc.HasField("file_name") else None,
            "function": loc.function_name if loc.HasField("function_name") else None,
            "line": loc.line_number if loc.HasField("line_number") else None}


def new_slice(ev, depth, parent):
    return {
        "track_uuid": ev["track_uuid"], "name": ev["name"], "categories": list(ev["categories"]),
        "category": ",".join(ev["categories"]) if ev["categories"] else None,
        "ts": ev["ts"], "dur": 0 if ev["type"] == "INSTANT" else -1, "depth": depth, "parent": parent,
        "instant": ev["type"] == "INSTANT", "args": dict(ev["args"]), "flat_args": dict(ev["flat_args"]),
        "flow_ids": list(ev["flow_ids"]), "terminating_flow_ids": list(ev["terminating_flow_ids"]),
        "seq": ev["seq"], "packet_index": ev["packet_index"],
    }


def apply_flows(ev, index, slices, active, flows):
    """notes §2.6: flow_ids: start if not active, else edge from the previously bound slice (id
    stays active); terminating_flow_ids: edge and close, ignored if not active. Edge direction is
    by slice ts."""
    def edge(flow_id, a, b):
        if a == b:
            return
        if slices[a]["ts"] > slices[b]["ts"]:
            a, b = b, a
        flows.append({"id": flow_id, "from": a, "to": b})

    for flow_id in ev["flow_ids"]:
        if flow_id in active:
            edge(flow_id, active[flow_id], index)
        active[flow_id] = index
    for flow_id in ev["terminating_flow_ids"]:
        if flow_id in active:
            edge(flow_id, active.pop(flow_id), index)


def analyze(data):
    """The model of a trace given as bytes (used by the self-tests)."""
    return TraceModel().load(data)


def main(argv):
    if len(argv) != 2 or argv[1].startswith("-"):
        print("usage: perfetto_model.py TRACE_FILE", file=sys.stderr)
        return 2
    if pb is None:
        print(f"perfetto_model.py: needs the official schema: pip install -r requirements.txt ({_IMPORT_ERROR})",
              file=sys.stderr)
        return 2
    try:
        with open(argv[1], "rb") as f:
            data = f.read()
    except OSError as exc:
        print(f"perfetto_model.py: {exc}", file=sys.stderr)
        return 2
    model = analyze(data)
    json.dump(model, sys.stdout, allow_nan=False)
    sys.stdout.write("\n")
    return 1 if model["errors"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
