//! A client and a server, two processes, each traced into its own file of a
//! shared directory, then packed into one archive with a `perfetto_manifest`
//! so both open on one timeline.
//!
//! ```text
//! cargo run --example multiprocess_archive                  # both write Perfetto
//! cargo run --example multiprocess_archive -- --server-json # the server writes Chrome JSON
//! ```
//!
//! The client (this process) starts the server (this program again, with the
//! argument `server`), sends it five requests over a loopback TCP connection,
//! and once the server has exited packs the directory with
//! `Archive::from_dir`. With `--server-json` the server's JSON file is pinned
//! to the client's Perfetto file automatically (same machine: offset 0).

use ringtrace::archive::{member_builder, Archive};
use ringtrace::Format;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("server") {
        let format = if args.get(3).map(String::as_str) == Some("json") {
            Format::Json
        } else {
            Format::Perfetto
        };
        return server(Path::new(&args[2]), format);
    }
    let server_json = args.iter().any(|a| a == "--server-json");
    let base = std::env::temp_dir().join(format!("ringtrace-multiprocess-{}", std::process::id()));
    let dir = base.join("traces");

    // The server: this program again.
    let mut child = Command::new(std::env::current_exe()?)
        .arg("server")
        .arg(&dir)
        .arg(if server_json { "json" } else { "pftrace" })
        .stdout(Stdio::piped())
        .spawn()?;
    let mut from_server = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
    let port: u16 = from_server
        .next()
        .ok_or("the server exited")??
        .trim()
        .parse()?;

    // The client's own trace: one file of the shared directory.
    let trace = member_builder(&dir, "client", Format::Perfetto)?.start()?;
    let stream = TcpStream::connect(("127.0.0.1", port))?;
    let mut replies = BufReader::new(stream.try_clone()?).lines();
    let mut stream = stream;
    for id in 0..5u32 {
        ringtrace::trace_scope!("rpc", "request", id = id);
        writeln!(stream, "{id}")?;
        let reply = replies.next().ok_or("the server hung up")??;
        ringtrace::trace_instant!("rpc", "reply", text = reply.as_str());
    }
    writeln!(stream, "quit")?;
    trace.stop()?;
    if !child.wait()?.success() {
        return Err("the server failed".into());
    }

    // Both processes are done: pack their files with a manifest.
    let mut archive = Archive::from_dir(&dir)?;
    archive.attribute("example", "multiprocess_archive");
    let out = base.join("client-server.tar");
    archive.write_tar(&out)?;
    println!("wrote {}", out.display());
    for f in archive.manifest()?.files {
        let how = match &f.clocks {
            Some(c) => format!(
                " (pinned to {} at offset {} ns)",
                c.sync_to
                    .as_ref()
                    .and_then(|s| s.file.as_deref())
                    .unwrap_or("?"),
                c.offset_ns.unwrap_or(0)
            ),
            None => String::new(),
        };
        println!("  {}{how}", f.path);
    }
    println!("open it at https://ui.perfetto.dev (Open trace file): the client and the server are two processes on one timeline");
    println!(
        "or inspect it: cargo run -p ringtrace-cli -- inspect {}",
        out.display()
    );
    Ok(())
}

/// The server process: answers each request line until "quit".
fn server(dir: &Path, format: Format) -> Result<(), Box<dyn std::error::Error>> {
    let trace = member_builder(dir, "server", format)?.start()?;
    let listener = TcpListener::bind("127.0.0.1:0")?;
    println!("{}", listener.local_addr()?.port());
    std::io::stdout().flush()?;
    let (stream, _) = listener.accept()?;
    let mut out = stream.try_clone()?;
    for line in BufReader::new(stream).lines() {
        let line = line?;
        if line == "quit" {
            break;
        }
        ringtrace::trace_scope!("rpc", "handle", id = line.as_str());
        {
            ringtrace::trace_scope!("work");
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        writeln!(out, "ok {line}")?;
    }
    trace.stop()?;
    Ok(())
}
