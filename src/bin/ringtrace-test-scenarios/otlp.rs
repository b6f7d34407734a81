//! Two processes propagating W3C trace context over HTTP, both exporting
//! over OTLP (`OTEL_EXPORTER_OTLP_ENDPOINT`, read by `init`), each with its
//! Perfetto file: `otlp_server` answers requests, continuing the caller's
//! trace from its `traceparent` and `tracestate`; `otlp_client` makes a
//! request from inside a client span and sends that span's context (its
//! own root continues `INCOMING_TRACEPARENT` and `INCOMING_TRACESTATE`
//! when they are set, as a service called with them would).

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use tracing::{info, info_span};

/// The session from the environment with the trace file, through the
/// subscriber as the global default.
fn init(trace: &str) -> ringtrace::TraceGuard {
    let b = ringtrace::builder()
        .output(trace)
        .from_env()
        .unwrap()
        .expect("an OTLP endpoint in the environment");
    let (subscriber, guard) = b.subscriber().unwrap();
    tracing::subscriber::set_global_default(subscriber).unwrap();
    guard
}

/// Serves requests on 127.0.0.1 (its port written to `port_file` once it
/// listens) until one asks for `/quit`; each request's root span continues
/// the caller's trace. Expects what it served.
pub(crate) fn server(trace: &str, port_file: &str) -> Value {
    let guard = init(trace);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::fs::write(format!("{port_file}.tmp"), port.to_string()).unwrap();
    std::fs::rename(format!("{port_file}.tmp"), port_file).unwrap();
    let mut served = Vec::new();
    for stream in listener.incoming() {
        let mut stream = stream.unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let path = line.split(' ').nth(1).unwrap_or("").to_string();
        let mut headers = Vec::new();
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap() == 0 || h.trim().is_empty() {
                break;
            }
            if let Some((k, v)) = h.trim_end().split_once(':') {
                headers.push((k.trim().to_string(), v.trim().to_string()));
            }
        }
        let h = || headers.iter().map(|(k, v)| (k.as_str(), v.as_str()));
        let parent = ringtrace::context::extract(h());
        let state = ringtrace::context::extract_tracestate(h());
        {
            let root = info_span!(
                "handle",
                otel.kind = "server",
                path = path.as_str(),
                traceparent = parent.as_ref().map(tracing::field::display),
                tracestate = state.as_ref().map(tracing::field::display),
            );
            let _e = root.enter();
            info!("handled");
            stream
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                .unwrap();
        }
        served.push(json!({
            "path": path,
            "traceparent": parent.map(|p| p.to_string()),
            "tracestate": state.map(|s| s.to_string()),
        }));
        if path == "/quit" {
            break;
        }
    }
    let stats = guard.stop().unwrap();
    json!({"served": served, "exported": stats.otlp_spans_exported, "dropped": stats.otlp_spans_dropped})
}

/// One request to the server on `port` from inside span `call` (kind
/// client) under the root `job`, carrying `call`'s trace context headers
/// (`traceparent`, and `tracestate` if its trace has one). `job` continues
/// the context of `INCOMING_TRACEPARENT` / `INCOMING_TRACESTATE`, if set.
pub(crate) fn client(trace: &str, port: &str) -> Value {
    let guard = init(trace);
    let incoming: Vec<(&str, String)> = ["traceparent", "tracestate"]
        .into_iter()
        .filter_map(|h| {
            Some((
                h,
                std::env::var(format!("INCOMING_{}", h.to_uppercase())).ok()?,
            ))
        })
        .collect();
    let h = || incoming.iter().map(|(k, v)| (*k, v.as_str()));
    let (parent, state) = (
        ringtrace::context::extract(h()),
        ringtrace::context::extract_tracestate(h()),
    );
    let sent;
    let sent_state;
    {
        let job = info_span!(
            "job",
            traceparent = parent.as_ref().map(tracing::field::display),
            tracestate = state.as_ref().map(tracing::field::display),
        );
        let _j = job.enter();
        let call = info_span!("call", otel.kind = "client");
        let _c = call.enter();
        let headers = ringtrace::context::current_headers();
        assert_eq!(
            headers.first().map(|h| h.0),
            Some("traceparent"),
            "{headers:?}"
        );
        sent = headers[0].1.clone();
        sent_state = headers.get(1).map(|h| h.1.clone());
        let mut s = TcpStream::connect(("127.0.0.1", port.parse::<u16>().unwrap())).unwrap();
        let mut request = String::from("GET /work HTTP/1.1\r\nHost: x\r\n");
        for (name, value) in &headers {
            request += &format!("{name}: {value}\r\n");
        }
        request += "Connection: close\r\n\r\n";
        s.write_all(request.as_bytes()).unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }
    let stats = guard.stop().unwrap();
    json!({
        "sent": sent,
        "sent_tracestate": sent_state,
        "exported": stats.otlp_spans_exported,
        "dropped": stats.otlp_spans_dropped,
    })
}

/// Spans recorded, then `std::process::exit` (`how` = `exit`) or a panic
/// out of `main` (`panic`) without a stop: the exit path finishes the
/// session, which sends them.
pub(crate) fn exit(trace: &str, how: &str) -> Value {
    let guard = init(trace);
    std::mem::forget(guard);
    for i in 0..3i64 {
        let s = info_span!("before_exit", i);
        let _e = s.enter();
        info!("inside");
    }
    match how {
        "exit" => std::process::exit(0),
        _ => panic!("out of main, on purpose"),
    }
}
