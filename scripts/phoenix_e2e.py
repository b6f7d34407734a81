"""ringtrace's OTLP export against Arize Phoenix, read back whole.

Usage: phoenix_e2e.py PHOENIX_CLI SCENARIOS_BIN (scripts/phoenix-e2e.sh runs
it). Starts Phoenix on free ports with a working directory of its own, runs
the `otlp_server` and `otlp_client` scenarios of ringtrace-test-scenarios
exporting to it (OTEL_EXPORTER_OTLP_ENDPOINT), sends the server two more
requests with a caller's `traceparent` (one sampled, one not), and reads
the spans back from Phoenix's REST API (`/v1/projects/<name>/spans/otlpv1`):

- exactly five spans: the client's `job` and `call`, the server's `handle`
  for `/work`, `/kept` and `/quit` (the request whose caller did not sample
  it is absent);
- `call` is `job`'s child in one trace; the server's `/work` continues that
  trace, its parent the client's `call` span (the W3C context crossed);
- `/kept` continues the caller's trace id and parent span id as sent;
  `/quit` (no traceparent) is a root of a trace of its own;
- each `handle` carries its `path` attribute and its `handled` event (with
  `level` = INFO); every span's start is before its end, within the run.

Only the standard library here; Phoenix runs from its own venv.
"""

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

PROJECT = "ringtrace-e2e"
KEPT = ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331")
NOT_KEPT = ("1af7651916cd43dd8448eb211c80319c", "c7ad6b7169203331")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read()


def request(port, path, traceparent=None):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        head = f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        if traceparent:
            head += f"traceparent: {traceparent}\r\n"
        s.sendall((head + "\r\n").encode())
        answer = b""
        while chunk := s.recv(4096):
            answer += chunk
    if not answer.startswith(b"HTTP/1.1 200"):
        sys.exit(f"the server answered {path} with {answer[:80]!r}")


def check(cond, what, spans):
    if not cond:
        sys.exit(f"FAILED: {what}\nspans: {json.dumps(spans, indent=1)}")


def main():
    phoenix_cli, scenarios = sys.argv[1], sys.argv[2]
    work = tempfile.mkdtemp(prefix="ringtrace-phoenix-")
    port = free_port()
    env = dict(
        os.environ,
        PHOENIX_WORKING_DIR=work,
        PHOENIX_PORT=str(port),
        PHOENIX_GRPC_PORT=str(free_port()),
        PHOENIX_HOST="127.0.0.1",
    )
    base = f"http://127.0.0.1:{port}"
    log = open(os.path.join(work, "phoenix.log"), "wb")
    t0 = time.monotonic()
    phoenix = subprocess.Popen([phoenix_cli, "serve"], env=env, stdout=log, stderr=log)
    try:
        while True:
            try:
                get(base + "/healthz", timeout=2)
                break
            except OSError:
                if phoenix.poll() is not None or time.monotonic() - t0 > 300:
                    log.flush()
                    sys.exit("Phoenix did not start:\n" + open(log.name).read()[-3000:])
                time.sleep(0.5)
        print(f"Phoenix up in {time.monotonic() - t0:.0f} s", flush=True)
        run(scenarios, base, work)
    finally:
        phoenix.terminate()
        try:
            phoenix.wait(timeout=20)
        except subprocess.TimeoutExpired:
            phoenix.kill()


def run(scenarios, base, work):
    otel = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": base,
        "OTEL_RESOURCE_ATTRIBUTES": f"openinference.project.name={PROJECT}",
    }
    wall0 = time.time_ns()
    port_file = os.path.join(work, "port")
    server = subprocess.Popen(
        [scenarios, "otlp_server", f"{work}/server.pftrace", f"{work}/server.json", port_file],
        env=dict(os.environ, OTEL_SERVICE_NAME="server", **otel),
    )
    t = time.monotonic()
    while not os.path.exists(port_file):
        if server.poll() is not None or time.monotonic() - t > 60:
            sys.exit("the server scenario did not start")
        time.sleep(0.05)
    sport = int(open(port_file).read())
    subprocess.run(
        [scenarios, "otlp_client", f"{work}/client.pftrace", f"{work}/client.json", str(sport)],
        env=dict(os.environ, OTEL_SERVICE_NAME="client", **otel),
        check=True,
    )
    request(sport, "/kept", f"00-{KEPT[0]}-{KEPT[1]}-01")
    request(sport, "/not-kept", f"00-{NOT_KEPT[0]}-{NOT_KEPT[1]}-00")
    request(sport, "/quit")
    if server.wait(timeout=30) != 0:
        sys.exit("the server scenario failed")
    wall1 = time.time_ns()
    client = json.load(open(f"{work}/client.json"))
    served = json.load(open(f"{work}/server.json"))
    if (client["exported"], client["dropped"], served["exported"], served["dropped"]) != (2, 0, 3, 0):
        sys.exit(f"exported/dropped: client {client}, server {served}")

    url = f"{base}/v1/projects/{PROJECT}/spans/otlpv1?limit=100"
    t = time.monotonic()
    while True:
        try:
            spans = json.loads(get(url))["data"]
        except OSError:
            spans = []
        if len(spans) >= 5 or time.monotonic() - t > 30:
            break
        time.sleep(0.5)
    check(len(spans) == 5, f"5 spans in Phoenix, found {len(spans)}", spans)

    def attrs(s):
        out = {}
        for kv in s.get("attributes") or []:
            v = kv["value"]
            out[kv["key"]] = next(x for x in v.values() if x is not None)
        return out

    def find(name, path=None):
        found = [s for s in spans if s["name"] == name and (path is None or attrs(s).get("path") == path)]
        check(len(found) == 1, f"one {name} {path or ''}", spans)
        return found[0]

    job, call = find("job"), find("call")
    work_, kept, quit_ = find("handle", "/work"), find("handle", "/kept"), find("handle", "/quit")
    check(job["parent_span_id"] is None, "job is a root", spans)
    check(call["trace_id"] == job["trace_id"], "call in job's trace", spans)
    check(call["parent_span_id"] == job["span_id"], "call under job", spans)
    sent = client["sent"].split("-")
    check(sent[1:3] == [call["trace_id"], call["span_id"]], "the traceparent sent is call's", spans)
    check(work_["trace_id"] == job["trace_id"], "/work continues the client's trace", spans)
    check(work_["parent_span_id"] == call["span_id"], "/work's parent is the client's call", spans)
    check((kept["trace_id"], kept["parent_span_id"]) == KEPT, "/kept continues the caller's", spans)
    check(quit_["parent_span_id"] is None, "/quit is a root", spans)
    check(quit_["trace_id"] not in (job["trace_id"], KEPT[0]), "/quit starts its own trace", spans)
    check(all(s["trace_id"] != NOT_KEPT[0] for s in spans), "/not-kept is absent", spans)
    ids = {s["span_id"] for s in spans}
    check(len(ids) == 5, "five span ids", spans)
    for h in (work_, kept, quit_):
        ev = h.get("events") or []
        check(
            [e["name"] for e in ev] == ["handled"] and attrs(ev[0]).get("level") == "INFO",
            "the handled event with its level",
            spans,
        )
    for s in spans:
        start, end = int(s["start_time_unix_nano"]), int(s["end_time_unix_nano"])
        check(wall0 - 10**9 <= start <= end <= wall1 + 10**9, f"{s['name']}'s times", spans)
    print(f"OK: 5 spans read back from Phoenix, one trace across two processes ({job['trace_id']})")


if __name__ == "__main__":
    main()
