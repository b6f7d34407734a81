#!/usr/bin/env python3
"""Decode the CPU samples of a Perfetto protobuf trace (.pftrace) with the official schema.

Usage:
    python3 perfetto_samples.py TRACE_FILE

Prints one JSON object: samples[{ts, pid, tid, cpu, cpu_mode, unwind_error, seq, frames[{name,
mapping, rel_pc}] outermost first}], lost (sum of kernel_records_lost), mappings{seq: {iid:
{path, build_id, start, end}}}, interned{kind: entries written}, unused[...] (interned entries
no sample refers to, directly or through the entries it uses), errors[...]. Interned data is resolved as trace_processor does:
per trusted_packet_sequence_id, cleared by SEQ_INCREMENTAL_STATE_CLEARED. An error is any
callstack_iid, frame id, function name id, mapping id, build id or path id that resolves to
nothing, a sample that uses interned data before its sequence was cleared, or a sequence that
carries samples of more than one process. Exit status: 0 = no errors, 1 = errors, 2 = usage.
"""
import json
import sys

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

CLEARED = 1


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    trace = pb.Trace()
    with open(sys.argv[1], "rb") as f:
        trace.ParseFromString(f.read())
    state = {}  # seq -> tables
    samples, errors, lost = [], [], 0
    seq_pids = {}
    mappings_out = {}
    generations = []  # every state ever cleared in, with what samples used of it

    for i, p in enumerate(trace.packet):
        seq = p.trusted_packet_sequence_id
        if p.sequence_flags & CLEARED:
            state[seq] = {k: {} for k in
                          ("names", "frames", "stacks", "build_ids", "paths", "mappings")}
            state[seq]["used"] = {k: set() for k in
                                  ("names", "frames", "stacks", "build_ids", "paths", "mappings")}
            generations.append((seq, state[seq]))
        if p.HasField("interned_data"):
            t = state.get(seq)
            d = p.interned_data
            has = (d.function_names or d.frames or d.callstacks or d.build_ids
                   or d.mapping_paths or d.mappings)
            if has and t is None:
                errors.append(f"packet {i}: interned samples data before a cleared state")
                continue
            if t is not None:
                for s in d.function_names:
                    t["names"][s.iid] = s.str.decode("utf-8", "replace")
                for s in d.build_ids:
                    t["build_ids"][s.iid] = s.str.decode("utf-8", "replace")
                for s in d.mapping_paths:
                    t["paths"][s.iid] = s.str.decode("utf-8", "replace")
                for m in d.mappings:
                    t["mappings"][m.iid] = m
                for fr in d.frames:
                    t["frames"][fr.iid] = fr
                for cs in d.callstacks:
                    t["stacks"][cs.iid] = list(cs.frame_ids)
        if not p.HasField("perf_sample"):
            continue
        ps = p.perf_sample
        if ps.HasField("kernel_records_lost"):
            lost += ps.kernel_records_lost
            continue
        seq_pids.setdefault(seq, set()).add(ps.pid)
        t = state.get(seq)
        frames = []
        if ps.callstack_iid:
            if t is None or ps.callstack_iid not in t["stacks"]:
                errors.append(f"packet {i}: callstack_iid {ps.callstack_iid} unresolved")
                continue
            used = t["used"]
            used["stacks"].add(ps.callstack_iid)
            for fid in t["stacks"][ps.callstack_iid]:
                used["frames"].add(fid)
                fr = t["frames"].get(fid)
                if fr is None:
                    errors.append(f"packet {i}: frame {fid} unresolved")
                    continue
                name = None
                used["mappings"].add(fr.mapping_id)
                if fr.function_name_id:
                    used["names"].add(fr.function_name_id)
                    name = t["names"].get(fr.function_name_id)
                    if name is None:
                        errors.append(f"packet {i}: function name {fr.function_name_id} unresolved")
                m = t["mappings"].get(fr.mapping_id)
                if m is None:
                    errors.append(f"packet {i}: mapping {fr.mapping_id} unresolved")
                    continue
                parts = []
                used["build_ids"].add(m.build_id)
                for pid_ in m.path_string_ids:
                    used["paths"].add(pid_)
                    if pid_ not in t["paths"]:
                        errors.append(f"packet {i}: mapping path {pid_} unresolved")
                    parts.append(t["paths"].get(pid_, "?"))
                if m.build_id and m.build_id not in t["build_ids"]:
                    errors.append(f"packet {i}: build id {m.build_id} unresolved")
                path = "/" + "/".join(parts)
                mappings_out.setdefault(str(seq), {})[str(m.iid)] = {
                    "path": path, "build_id": t["build_ids"].get(m.build_id, ""),
                    "start": m.start, "end": m.end}
                frames.append({"name": name, "mapping": path, "rel_pc": fr.rel_pc})
        samples.append({
            "ts": p.timestamp, "pid": ps.pid, "tid": ps.tid, "cpu": ps.cpu,
            "cpu_mode": ps.cpu_mode, "unwind_error": ps.unwind_error, "seq": seq,
            "frames": frames,
        })
    for seq, pids in seq_pids.items():
        if len(pids) > 1:
            errors.append(f"sequence {seq} has samples of processes {sorted(pids)}")
    interned = {k: 0 for k in ("names", "frames", "stacks", "build_ids", "paths", "mappings")}
    unused = []
    for seq, t in generations:
        for kind in interned:
            interned[kind] += len(t[kind])
            for iid in sorted(set(t[kind]) - t["used"][kind]):
                unused.append(f"sequence {seq}: {kind} {iid} interned, never used")
    json.dump({"samples": samples, "lost": lost, "mappings": mappings_out, "interned": interned,
               "unused": unused, "errors": errors}, sys.stdout)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
