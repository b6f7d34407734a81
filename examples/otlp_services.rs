//! Two services and a collector: a request crossing processes is one trace.
//!
//! Run: `cargo run --example otlp_services`. The program is three processes:
//! it starts a small OTLP/HTTP collector (here, in this process: it answers
//! every `POST /v1/traces` and reads the span names and trace ids out of the
//! protobuf body), then runs itself twice more, as the `inventory` service
//! (an HTTP server) and as the `checkout` service (its client). Each service
//! records through ringtrace's `tracing` subscriber into its own Perfetto
//! file and exports its spans to the collector; `checkout` sends the W3C
//! trace context of its client span with each request (`traceparent`, and
//! `tracestate` when its trace has one), and `inventory` continues that
//! trace. At the end the collector prints what it received:
//! every request's spans from both services under one trace id.
//!
//! Pack the two files to see the crossing in Perfetto (a flow from the
//! client span to the server span):
//! `cargo run -p ringtrace-cli -- pack -o services.tar --join checkout.pftrace inventory.pftrace`
//! (`--join`: both were recorded on this machine, so they become one trace,
//! in which Perfetto links the flow).
//!
//! Any OTLP/HTTP collector takes the place of the built-in one: point
//! `OTEL_EXPORTER_OTLP_ENDPOINT` at it (the services then send there and
//! this process only prints where the files are).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::sync::mpsc;

const REQUESTS: usize = 5;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("inventory") => inventory(&args[1], &args[2]),
        Some("checkout") => checkout(&args[1], &args[2]),
        _ => run_all(),
    }
}

/// The collector, then the two services as child processes.
fn run_all() -> Result<(), Box<dyn std::error::Error>> {
    let external = std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT").ok();
    let (collector_url, spans) = match &external {
        Some(url) => (url.clone(), None),
        None => {
            let listener = TcpListener::bind("127.0.0.1:0")?;
            let url = format!("http://{}", listener.local_addr()?);
            let (tx, rx) = mpsc::channel();
            std::thread::spawn(move || collect(listener, tx));
            (url, Some(rx))
        }
    };
    let me = std::env::current_exe()?;

    // The server first: it prints its address once it listens.
    let mut server = Command::new(&me)
        .args(["inventory", &collector_url, "inventory.pftrace"])
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    let mut line = String::new();
    BufReader::new(server.stdout.take().expect("piped")).read_line(&mut line)?;
    let server_addr = line.trim().to_string();

    let client = Command::new(&me)
        .args(["checkout", &collector_url, &server_addr])
        .status()?;
    let served = server.wait()?;
    if !client.success() || !served.success() {
        return Err("a service failed".into());
    }

    println!("wrote checkout.pftrace and inventory.pftrace");
    if let Some(rx) = spans {
        // Both services stopped: their exporters sent everything before.
        let mut traces: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (trace_id, name) in rx.try_iter() {
            traces.entry(trace_id).or_default().push(name);
        }
        println!("the collector received {} traces:", traces.len());
        for (trace_id, names) in &traces {
            println!("  {trace_id}: {}", names.join(", "));
        }
    }
    Ok(())
}

/// The `inventory` service: answers `REQUESTS` requests, each a root span
/// that continues the caller's trace from its `traceparent` and
/// `tracestate` headers.
fn inventory(collector: &str, file: &str) -> Result<(), Box<dyn std::error::Error>> {
    let (subscriber, trace) = ringtrace::builder()
        .output(file)
        .process_name("inventory")
        .otlp(collector)
        .service_name("inventory")
        .subscriber()?;
    tracing::subscriber::set_global_default(subscriber)?;

    let listener = TcpListener::bind("127.0.0.1:0")?;
    println!("{}", listener.local_addr()?);
    std::io::stdout().flush()?;
    for stream in listener.incoming().take(REQUESTS) {
        let mut stream = stream?;
        let (path, headers) = read_request(&mut stream)?;
        let pairs = || headers.iter().map(|(k, v)| (k.as_str(), v.as_str()));
        let parent = ringtrace::context::extract(pairs());
        let state = ringtrace::context::extract_tracestate(pairs());
        let span = tracing::info_span!(
            "GET /stock",
            otel.kind = "server",
            http.route = "/stock",
            traceparent = parent.as_ref().map(display),
            tracestate = state.as_ref().map(display),
        );
        let _request = span.enter();
        let count = {
            let _lookup = tracing::info_span!("lookup", item = %path).entered();
            path.len() as u64 * 7
        };
        tracing::info!(count, "in stock");
        let body = count.to_string();
        write!(
            stream,
            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )?;
    }
    let stats = trace.stop()?;
    eprintln!(
        "inventory: {} spans exported, {} dropped",
        stats.otlp_spans_exported, stats.otlp_spans_dropped
    );
    Ok(())
}

/// The `checkout` service: `REQUESTS` requests of its own, each calling
/// `inventory` from a client span whose context goes with the request.
fn checkout(collector: &str, server: &str) -> Result<(), Box<dyn std::error::Error>> {
    let (subscriber, trace) = ringtrace::builder()
        .output("checkout.pftrace")
        .process_name("checkout")
        .otlp(collector)
        .service_name("checkout")
        .subscriber()?;
    tracing::subscriber::set_global_default(subscriber)?;

    for order in 0..REQUESTS {
        let _root = tracing::info_span!("checkout", otel.kind = "server", order).entered();
        let _call = tracing::info_span!("GET inventory", otel.kind = "client").entered();
        let mut request = format!("GET /stock/item-{order} HTTP/1.1\r\nhost: {server}\r\n");
        for (name, value) in ringtrace::context::current_headers() {
            request += &format!("{name}: {value}\r\n");
        }
        request += "\r\n";
        let mut stream = TcpStream::connect(server)?;
        stream.write_all(request.as_bytes())?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer)?;
        tracing::info!(
            answer = answer.lines().last().unwrap_or(""),
            "inventory answered"
        );
    }
    let stats = trace.stop()?;
    eprintln!(
        "checkout: {} spans exported, {} dropped",
        stats.otlp_spans_exported, stats.otlp_spans_dropped
    );
    Ok(())
}

/// Reads an HTTP/1.1 request's line and headers (and skips its body).
fn read_request(stream: &mut TcpStream) -> std::io::Result<(String, Vec<(String, String)>)> {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    let length: usize = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    Ok((path, headers))
}

/// The collector: answers every request 200 and sends (trace id, span name)
/// of each span in its body.
fn collect(listener: TcpListener, spans: mpsc::Sender<(String, String)>) {
    for stream in listener.incoming() {
        let Ok(mut stream) = stream else { continue };
        let mut reader = BufReader::new(&mut stream);
        let mut line = String::new();
        let mut length = 0usize;
        while reader.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
            if let Some((k, v)) = line.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    length = v.trim().parse().unwrap_or(0);
                }
            }
            line.clear();
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            continue;
        }
        // ExportTraceServiceRequest: resource_spans = 1 { scope_spans = 2
        // { spans = 2 { trace_id = 1, name = 5 } } }.
        for resource in fields(&body, 1) {
            for scope in fields(resource, 2) {
                for span in fields(scope, 2) {
                    let id: String = fields(span, 1)
                        .next()
                        .unwrap_or(&[])
                        .iter()
                        .map(|b| format!("{b:02x}"))
                        .collect();
                    let name = fields(span, 5).next().unwrap_or(&[]);
                    let _ = spans.send((id, String::from_utf8_lossy(name).into_owned()));
                }
            }
        }
        let _ = stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n");
    }
}

/// The length-delimited fields numbered `number` of a protobuf message.
fn fields(mut msg: &[u8], number: u64) -> impl Iterator<Item = &[u8]> {
    std::iter::from_fn(move || loop {
        let key = varint(&mut msg)?;
        let value: &[u8] = match key & 7 {
            0 => {
                varint(&mut msg)?;
                continue;
            }
            1 | 5 => {
                let n = if key & 7 == 1 { 8 } else { 4 };
                msg = msg.get(n..)?;
                continue;
            }
            2 => {
                let len = varint(&mut msg)? as usize;
                let (v, rest) = (msg.get(..len)?, msg.get(len..)?);
                msg = rest;
                v
            }
            _ => return None,
        };
        if key >> 3 == number {
            return Some(value);
        }
    })
}

fn varint(buf: &mut &[u8]) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let (&b, rest) = buf.split_first()?;
        *buf = rest;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}
