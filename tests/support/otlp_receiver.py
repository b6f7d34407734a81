#!/usr/bin/env python3
"""An OTLP/HTTP receiver for the tests: decodes every request body with the
official OTLP schema (opentelemetry-proto's generated classes) and writes one
JSON line per request to OUT_DIR/requests.jsonl (the port it listens on to
OUT_DIR/port). Modes:

  normal                 200 with an empty ExportTraceServiceResponse
  status:CODE:N:AFTER    the first N requests answered CODE with
                         `Retry-After: AFTER` (AFTER "-" for none), then normal
  slow                   reads the request one byte a second, answers nothing
                         until the body is read

A body that does not decode is recorded with its error."""

import gzip
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

OUT = sys.argv[1]
MODE = sys.argv[2] if len(sys.argv) > 2 else "normal"
LOCK = threading.Lock()
SEEN = [0]


def value(v):
    kind = v.WhichOneof("value")
    if kind == "string_value":
        return ["str", v.string_value]
    if kind == "int_value":
        return ["int", v.int_value]
    if kind == "double_value":
        return ["double", v.double_value]
    if kind == "bool_value":
        return ["bool", v.bool_value]
    return [kind, None]


def attrs(kvs):
    return {kv.key: value(kv.value) for kv in kvs}


def decode(body):
    req = trace_service_pb2.ExportTraceServiceRequest()
    req.ParseFromString(body)
    out = []
    for rs in req.resource_spans:
        res = attrs(rs.resource.attributes)
        for ss in rs.scope_spans:
            for s in ss.spans:
                out.append({
                    "resource": res,
                    "scope": ss.scope.name,
                    "trace_id": s.trace_id.hex(),
                    "span_id": s.span_id.hex(),
                    "parent_span_id": s.parent_span_id.hex(),
                    "trace_state": s.trace_state,
                    "flags": s.flags,
                    "name": s.name,
                    "kind": s.kind,
                    "start": s.start_time_unix_nano,
                    "end": s.end_time_unix_nano,
                    "attributes": attrs(s.attributes),
                    "events": [{"time": e.time_unix_nano, "name": e.name,
                                "attributes": attrs(e.attributes)} for e in s.events],
                    "status": {"code": s.status.code, "message": s.status.message},
                })
    return out


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        if MODE == "slow":
            body = b""
            while len(body) < n:
                body += self.rfile.read(1)
                time.sleep(1)
        else:
            body = self.rfile.read(n)
        with LOCK:
            SEEN[0] += 1
            seen = SEEN[0]
        rec = {"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}}
        status = 200
        if MODE.startswith("status:"):
            _, code, count, after = MODE.split(":")
            if seen <= int(count):
                status = int(code)
                rec["answered"] = status
                rec["at"] = time.time()
                self.write(rec)  # before the answer: the test reads it after
                self.send_response(status)
                if after != "-":
                    self.send_header("Retry-After", after)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
        try:
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            rec["spans"] = decode(body)
        except Exception as e:  # noqa: BLE001 - recorded, the test fails on it
            rec["error"] = repr(e)
        rec["at"] = time.time()
        self.write(rec)  # before the answer: the test reads it after
        resp = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
        self.send_response(status)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(resp)))
        self.end_headers()
        self.wfile.write(resp)

    def write(self, rec):
        with LOCK, open(os.path.join(OUT, "requests.jsonl"), "a") as f:
            f.write(json.dumps(rec) + "\n")


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
with open(os.path.join(OUT, "port.tmp"), "w") as f:
    f.write(str(server.server_address[1]))
os.rename(os.path.join(OUT, "port.tmp"), os.path.join(OUT, "port"))
server.serve_forever()
