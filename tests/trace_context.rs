//! W3C trace context across two real processes (feature `otlp`): a client
//! scenario sends its client span's `traceparent` to a server scenario over
//! HTTP; both export over OTLP to one collector (decoding with the official
//! schema), and the server's request span continues the client's trace.
//! Requests whose caller did not keep them (sampled flag 00) are not kept.
//! A caller's `tracestate` crosses too: every span of its trace carries it,
//! in both processes; an invalid one is dropped, the `traceparent` kept.

mod common;

use common::scratch;
use ringtrace_test_support::otlp::OtlpReceiver;
use serde_json::Value;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn scenario(name: &str, trace: &Path, arg: &str, rx: &OtlpReceiver, service: &str) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ringtrace-test-scenarios"));
    c.args([
        name,
        trace.to_str().unwrap(),
        trace.with_extension("expect.json").to_str().unwrap(),
        arg,
    ])
    .env("OTEL_EXPORTER_OTLP_ENDPOINT", rx.endpoint())
    .env("OTEL_SERVICE_NAME", service)
    .stderr(Stdio::inherit());
    c
}

fn get(port: u16, path: &str, traceparent: Option<&str>) {
    get_with(port, path, traceparent, None)
}

fn get_with(port: u16, path: &str, traceparent: Option<&str>, tracestate: Option<&str>) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut tp = traceparent
        .map(|t| format!("traceparent: {t}\r\n"))
        .unwrap_or_default();
    if let Some(ts) = tracestate {
        tp += &format!("tracestate: {ts}\r\n");
    }
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\n{tp}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

/// The one span of `service` named `name` (with attribute `path`, if
/// given) among `spans` as the collector decoded them.
fn span(spans: &[Value], service: &str, name: &str, path: Option<&str>) -> Value {
    let found: Vec<&Value> = spans
        .iter()
        .filter(|s| {
            s["resource"]["service.name"][1] == service
                && s["name"] == name
                && path.is_none_or(|p| s["attributes"]["path"][1] == p)
        })
        .collect();
    assert_eq!(found.len(), 1, "{service} {name} {path:?}: {spans:#?}");
    found[0].clone()
}

fn expect(trace: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(trace.with_extension("expect.json")).unwrap()).unwrap()
}

/// Starts the server scenario; its port.
fn start_server(dir: &Path, trace: &Path, rx: &OtlpReceiver) -> (std::process::Child, u16) {
    let port_file = dir.join("port");
    let server = scenario(
        "otlp_server",
        trace,
        port_file.to_str().unwrap(),
        rx,
        "server",
    )
    .spawn()
    .unwrap();
    let t = Instant::now();
    let port: u16 = loop {
        if let Ok(p) = std::fs::read_to_string(&port_file) {
            break p.trim().parse().unwrap();
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the server did not start"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    (server, port)
}

/// Runs the client program to its end; it must succeed.
fn run_client(mut client: std::process::Command) {
    let out = client.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn one_trace_crosses_two_processes() {
    let rx = OtlpReceiver::start("ctx-rx", "normal");
    let dir = scratch("ctx");
    let (server_trace, client_trace) = (dir.join("server.pftrace"), dir.join("client.pftrace"));
    let (mut server, port) = start_server(&dir, &server_trace, &rx);
    run_client(scenario(
        "otlp_client",
        &client_trace,
        &port.to_string(),
        &rx,
        "client",
    ));
    let kept = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let not_kept = "00-1af7651916cd43dd8448eb211c80319c-c7ad6b7169203331-00";
    get(port, "/kept", Some(kept));
    get(port, "/not-kept", Some(not_kept));
    get(port, "/quit", None);
    assert!(server.wait().unwrap().success());
    let (client, served) = (expect(&client_trace), expect(&server_trace));
    assert_eq!(
        (client["exported"].as_u64(), client["dropped"].as_u64()),
        (Some(2), Some(0))
    );
    assert_eq!(
        (served["exported"].as_u64(), served["dropped"].as_u64()),
        (Some(3), Some(0))
    );

    let spans = rx.wait_spans(5, Duration::from_secs(10));
    assert_eq!(spans.len(), 5, "{spans:#?}");
    let find = |service: &str, name: &str, path: Option<&str>| span(&spans, service, name, path);
    let (job, call) = (find("client", "job", None), find("client", "call", None));
    let work = find("server", "handle", Some("/work"));
    let pid = |s: &Value| s["resource"]["process.pid"][1].as_i64().unwrap();
    assert_ne!(pid(&job), pid(&work), "two processes");
    // The client's spans: one trace, `call` under `job`, of kind CLIENT.
    assert_eq!(call["trace_id"], job["trace_id"]);
    assert_eq!(call["parent_span_id"], job["span_id"]);
    assert_eq!(
        (job["parent_span_id"].as_str(), call["kind"].as_u64()),
        (Some(""), Some(3))
    );
    // What it sent is `call`'s context.
    let sent = client["sent"].as_str().unwrap();
    assert_eq!(
        sent,
        format!(
            "00-{}-{}-01",
            call["trace_id"].as_str().unwrap(),
            call["span_id"].as_str().unwrap()
        )
    );
    // The server's request span: the client's trace, under `call`, SERVER.
    assert_eq!(
        work["trace_id"], call["trace_id"],
        "one trace id in both processes"
    );
    assert_eq!(work["parent_span_id"], call["span_id"]);
    assert_eq!(work["kind"], 2);
    assert!(work["attributes"].get("traceparent").is_none());
    assert_eq!(work["events"][0]["name"], "handled");
    // A caller's kept request continues its trace; one it did not keep is
    // not kept; a request without context starts a trace of its own.
    let k = find("server", "handle", Some("/kept"));
    assert_eq!(k["trace_id"], "0af7651916cd43dd8448eb211c80319c");
    assert_eq!(k["parent_span_id"], "b7ad6b7169203331");
    assert!(!spans
        .iter()
        .any(|s| s["attributes"]["path"][1] == "/not-kept"));
    let q = find("server", "handle", Some("/quit"));
    assert_eq!(q["parent_span_id"], "");
    for t in [&call["trace_id"], &k["trace_id"]] {
        assert_ne!(&q["trace_id"], t);
    }

    // The same ids in the Perfetto files: each root slice carries its
    // trace id, and the client's `call` and the server's request slice
    // carry one flow id, the same in both files (made in each process from
    // the trace id and `call`'s span id).
    let (cm, sm) = (
        ringtrace_test_support::perfetto_model_clean(&client_trace),
        ringtrace_test_support::perfetto_model_clean(&server_trace),
    );
    let slice = |m: &Value, name: &str, path: Option<&str>| -> Value {
        let found: Vec<Value> = common::slices_named(m, name)
            .into_iter()
            .filter(|s| path.is_none_or(|p| s["args"]["path"] == p))
            .cloned()
            .collect();
        assert_eq!(found.len(), 1, "{name} {path:?}: {:#}", m["slices"]);
        found[0].clone()
    };
    let trace_arg = |s: &Value| s["args"]["trace_id"].clone();
    assert_eq!(trace_arg(&slice(&cm, "job", None)), job["trace_id"]);
    assert_eq!(
        trace_arg(&slice(&cm, "call", None)),
        Value::Null,
        "not a root"
    );
    let handle = slice(&sm, "handle", Some("/work"));
    assert_eq!(trace_arg(&handle), work["trace_id"]);
    assert_eq!(
        trace_arg(&slice(&sm, "handle", Some("/kept"))),
        k["trace_id"]
    );
    assert_eq!(
        trace_arg(&slice(&sm, "handle", Some("/quit"))),
        q["trace_id"]
    );
    let (out, into) = (
        slice(&cm, "call", None)["flow_ids"].clone(),
        handle["flow_ids"].clone(),
    );
    assert_eq!(out.as_array().map(Vec::len), Some(1), "{out}");
    assert_eq!(out, into, "one flow id in both files");
    // Perfetto matches flows within a file, never across the files of an
    // archive: the two files joined into one (as `ringtrace pack` joins one
    // machine's), the decoder sees one flow from the client's `call` to the
    // server's request slice, and every slice of both files, named as it was.
    let joined = ringtrace::archive::join_perfetto(&[
        ("client", &std::fs::read(&client_trace).unwrap()),
        ("server", &std::fs::read(&server_trace).unwrap()),
    ])
    .unwrap();
    let joined_trace = dir.join("processes.pftrace");
    std::fs::write(&joined_trace, &joined).unwrap();
    let jm = ringtrace_test_support::perfetto_model_clean(&joined_trace);
    let names = |m: &Value| -> Vec<String> {
        let mut n: Vec<String> = m["slices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].as_str().unwrap_or("").to_owned())
            .collect();
        n.sort();
        n
    };
    let mut both = [names(&cm), names(&sm)].concat();
    both.sort();
    assert_eq!(
        names(&jm),
        both,
        "every slice of both files, named as it was"
    );
    let slices = jm["slices"].as_array().unwrap();
    let index = |name: &str, path: Option<&str>| {
        slices
            .iter()
            .position(|s| s["name"] == name && path.is_none_or(|p| s["args"]["path"] == p))
            .unwrap()
    };
    let (call_at, handle_at) = (index("call", None), index("handle", Some("/work")));
    let flow = jm["flows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["from"] == call_at && f["to"] == handle_at);
    assert!(
        flow.is_some(),
        "a flow from call to handle: {:#}",
        jm["flows"]
    );
    // In an archive: the joined member beside nothing else.
    let mut archive = ringtrace::archive::Archive::new();
    archive.add_file(&client_trace).unwrap();
    archive.add_file(&server_trace).unwrap();
    let joined = archive.join_processes("processes.pftrace", true).unwrap();
    assert_eq!(joined, ["client.pftrace", "server.pftrace"]);
    assert_eq!(archive.members().len(), 1);
    archive.write_tar(dir.join("both.tar")).unwrap();
    ringtrace_test_support::archive::validate_with_python(&dir.join("both.tar"));
}

/// The client is a service called with a `traceparent` and a `tracestate`
/// (its environment): its spans carry that state, and so does its request
/// to the server, whose spans of that trace carry it too. The test's own
/// requests: one whose `tracestate` is invalid (a key with an uppercase
/// letter) continues its trace without a state; one without any context
/// carries none.
#[test]
fn tracestate_crosses_two_processes() {
    let rx = OtlpReceiver::start("ctx-state-rx", "normal");
    let dir = scratch("ctx-state");
    let (server_trace, client_trace) = (dir.join("server.pftrace"), dir.join("client.pftrace"));
    let (mut server, port) = start_server(&dir, &server_trace, &rx);
    let caller = "00-2af7651916cd43dd8448eb211c80319c-d7ad6b7169203331-01";
    let mut client = scenario(
        "otlp_client",
        &client_trace,
        &port.to_string(),
        &rx,
        "client",
    );
    client.env("INCOMING_TRACEPARENT", caller).env(
        "INCOMING_TRACESTATE",
        "rojo=00f067aa0ba902b7 , congo=t61rcWkgMzE",
    );
    run_client(client);
    let state = "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE";
    let bad = "00-3af7651916cd43dd8448eb211c80319c-e7ad6b7169203331-01";
    get_with(port, "/bad-state", Some(bad), Some("ok=1,Rojo=2"));
    get(port, "/quit", None);
    assert!(server.wait().unwrap().success());
    let client = expect(&client_trace);
    assert_eq!(client["sent_tracestate"], state, "{client}");
    let served = expect(&server_trace)["served"].clone();
    assert_eq!(served[0]["tracestate"], state, "{served}");
    assert_eq!(served[1]["tracestate"], Value::Null, "{served}");

    let spans = rx.wait_spans(5, Duration::from_secs(10));
    assert_eq!(spans.len(), 5, "{spans:#?}");
    let find = |service: &str, name: &str, path: Option<&str>| span(&spans, service, name, path);
    let (job, call) = (find("client", "job", None), find("client", "call", None));
    let work = find("server", "handle", Some("/work"));
    assert_ne!(
        job["resource"]["process.pid"],
        work["resource"]["process.pid"]
    );
    // The caller's trace, in the client and on to the server.
    assert_eq!(job["trace_id"], "2af7651916cd43dd8448eb211c80319c");
    assert_eq!(job["parent_span_id"], "d7ad6b7169203331");
    assert_eq!(work["trace_id"], job["trace_id"]);
    assert_eq!(work["parent_span_id"], call["span_id"]);
    for s in [&job, &call, &work] {
        assert_eq!(s["trace_state"], state, "{s:#}");
    }
    assert!(work["attributes"].get("tracestate").is_none());
    // An invalid state is dropped; its traceparent still holds.
    let b = find("server", "handle", Some("/bad-state"));
    assert_eq!(b["trace_id"], "3af7651916cd43dd8448eb211c80319c");
    assert_eq!(b["parent_span_id"], "e7ad6b7169203331");
    assert_eq!(b["trace_state"], "");
    let q = find("server", "handle", Some("/quit"));
    assert_eq!(q["trace_state"], "");
}
