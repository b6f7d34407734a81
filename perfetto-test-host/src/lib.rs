//! Helpers of the system tracing tests: the test host (Perfetto's tracing
//! service and consumer sessions, built by `build.rs`), the producer program
//! they drive, TraceConfig encoding, and checks of the decoded traces the
//! service returns (decoded with the official Perfetto schema by the
//! workspace's `ringtrace-test-support`).

use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::Duration;

/// The test host binary.
pub const HOST: &str = env!("PERFETTO_TEST_HOST");

/// How long any single answer may take.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(60);

/// A child answering one line per command.
pub struct LineChild {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    what: String,
}

impl LineChild {
    fn spawn(mut cmd: Command, what: &str) -> LineChild {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut c = LineChild {
            child,
            stdin,
            lines,
            what: what.to_string(),
        };
        let first = c.answer();
        assert_eq!(first, "ready", "{what} did not start");
        c
    }

    /// The next line the child prints.
    pub fn answer(&mut self) -> String {
        self.lines
            .recv_timeout(ANSWER_TIMEOUT)
            .unwrap_or_else(|_| panic!("{} gave no answer", self.what))
    }

    /// Sends `line`, returns the answer.
    pub fn command(&mut self, line: &str) -> String {
        writeln!(self.stdin, "{line}").unwrap();
        self.stdin.flush().unwrap();
        self.answer()
    }

    /// Kills the child at once (SIGKILL).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Closes stdin and waits for the exit status.
    pub fn wait(mut self) -> std::process::ExitStatus {
        let status = self.child.wait().unwrap();
        std::mem::forget(self);
        status
    }
}

impl Drop for LineChild {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Perfetto's tracing service on private sockets, with consumer sessions.
pub struct Host {
    child: LineChild,
    /// Where producers connect (a Unix socket path).
    pub producer_socket: PathBuf,
    pub consumer_socket: PathBuf,
}

impl Host {
    /// Starts the service in `dir`, its producer socket also listening on
    /// `extra` (`host:port` or `vsock://CID:PORT`) if given.
    pub fn start(dir: &Path, extra: Option<&str>) -> Host {
        let producer_socket = dir.join("producer.sock");
        let consumer_socket = dir.join("consumer.sock");
        let mut producers = producer_socket.display().to_string();
        if let Some(t) = extra {
            producers = format!("{producers},{t}");
        }
        let mut cmd = Command::new(HOST);
        cmd.arg(producers).arg(&consumer_socket);
        // The service logs every session: kept in the test's directory.
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("host.log"))
            .unwrap();
        cmd.stderr(log);
        Host {
            child: LineChild::spawn(cmd, "the Perfetto test host"),
            producer_socket,
            consumer_socket,
        }
    }

    /// Sets up and starts session `name` (returns once it runs).
    pub fn start_session(&mut self, name: &str, config: &TraceConfig) {
        let hex: String = config.encode().iter().map(|b| format!("{b:02x}")).collect();
        let a = self.child.command(&format!("start {name} {hex}"));
        assert_eq!(a, "ok", "start {name}");
    }

    /// Asks the producers to flush; true if all acked within `timeout_ms`.
    pub fn flush(&mut self, name: &str, timeout_ms: u32) -> bool {
        match self
            .child
            .command(&format!("flush {name} {timeout_ms}"))
            .as_str()
        {
            "ok 1" => true,
            "ok 0" => false,
            other => panic!("flush {name}: {other}"),
        }
    }

    /// Stops session `name` and writes its trace to `path`.
    pub fn stop_session(&mut self, name: &str, path: &Path) {
        let a = self
            .child
            .command(&format!("stop {name} {}", path.display()));
        assert!(a.starts_with("ok "), "stop {name}: {a}");
    }

    /// The service's state (its `QueryServiceState`): producers and the
    /// data sources they registered, with their `track_event` categories.
    pub fn query(&mut self) -> Value {
        let a = self.child.command("query");
        let json = a
            .strip_prefix("ok ")
            .unwrap_or_else(|| panic!("query: {a}"));
        serde_json::from_str(json).unwrap_or_else(|e| panic!("query answer {json}: {e}"))
    }

    /// The categories of the `track_event` data source that the producer
    /// named `producer` registered (None if it registered none).
    pub fn track_event_categories(&mut self, producer: &str) -> Option<Vec<String>> {
        let state = self.query();
        let ds = track_event_sources(&state, producer).into_iter().next()?;
        Some(
            ds["categories"]
                .as_array()?
                .iter()
                .filter_map(|c| c.as_str().map(String::from))
                .collect(),
        )
    }

    /// Kills the service (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        self.child.kill();
    }
}

/// The `track_event` data sources that producers named `producer`
/// registered, in a [`Host::query`] answer.
pub fn track_event_sources<'a>(state: &'a Value, producer: &str) -> Vec<&'a Value> {
    let ids: Vec<&Value> = state["producers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["name"] == producer)
        .map(|p| &p["id"])
        .collect();
    state["data_sources"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|d| d["name"] == "track_event" && ids.contains(&&d["producer_id"]))
        .collect()
}

/// The producer program (`system-producer`), connected to `socket`, its
/// its stderr inherited.
pub fn producer(binary: &str, socket: &str, envs: &[(&str, &str)]) -> LineChild {
    producer_logging(binary, socket, envs, None)
}

/// As [`producer`], its stderr written to `log` if given.
pub fn producer_logging(
    binary: &str,
    socket: &str,
    envs: &[(&str, &str)],
    log: Option<&Path>,
) -> LineChild {
    let mut cmd = Command::new(binary);
    cmd.env("PERFETTO_PRODUCER_SOCK_NAME", socket)
        .env_remove("RINGTRACE_OUTPUT")
        .env_remove("RINGTRACE_SYSTEM")
        .envs(envs.iter().copied());
    if let Some(log) = log {
        cmd.stderr(std::fs::File::create(log).unwrap());
    }
    LineChild::spawn(cmd, "the system producer")
}

/// A TraceConfig with one ring buffer and the `track_event` data source.
#[derive(Debug, Clone, Default)]
pub struct TraceConfig {
    pub buffer_kb: u32,
    pub enabled_categories: Vec<String>,
    pub disabled_categories: Vec<String>,
    pub flush_period_ms: u32,
    pub clear_period_ms: u32,
    /// `producers { producer_name: "system-producer" shm_size_kb page_size_kb }`.
    pub shm_size_kb: u32,
    pub page_size_kb: u32,
    /// Drop instead of overwrite when the buffer is full.
    pub discard: bool,
    /// `trigger_config`: (mode: 1 START_TRACING, 2 STOP_TRACING,
    /// 4 CLONE_SNAPSHOT; trigger names, each with a `stop_delay_ms` of 0;
    /// `trigger_timeout_ms`).
    pub triggers: Option<(u32, Vec<String>, u32)>,
}

fn varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push(v as u8 | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

fn uint(buf: &mut Vec<u8>, field: u32, v: u64) {
    varint(buf, (field as u64) << 3);
    varint(buf, v);
}

fn bytes(buf: &mut Vec<u8>, field: u32, v: &[u8]) {
    varint(buf, ((field as u64) << 3) | 2);
    varint(buf, v.len() as u64);
    buf.extend_from_slice(v);
}

impl TraceConfig {
    /// Records the categories `enabled` and nothing else.
    pub fn categories(enabled: &[&str]) -> TraceConfig {
        TraceConfig {
            buffer_kb: 8192,
            enabled_categories: enabled.iter().map(|s| s.to_string()).collect(),
            disabled_categories: vec!["*".into()],
            ..Default::default()
        }
    }

    /// The serialized TraceConfig (field numbers of Perfetto's
    /// `trace_config.proto`).
    pub fn encode(&self) -> Vec<u8> {
        let mut cfg = Vec::new();
        let mut buffer = Vec::new();
        uint(&mut buffer, 1, self.buffer_kb as u64);
        uint(&mut buffer, 4, if self.discard { 2 } else { 1 });
        bytes(&mut cfg, 1, &buffer);
        let mut te = Vec::new();
        for c in &self.disabled_categories {
            bytes(&mut te, 1, c.as_bytes());
        }
        for c in &self.enabled_categories {
            bytes(&mut te, 2, c.as_bytes());
        }
        let mut dsc = Vec::new();
        bytes(&mut dsc, 1, b"track_event");
        bytes(&mut dsc, 113, &te);
        let mut ds = Vec::new();
        bytes(&mut ds, 1, &dsc);
        bytes(&mut cfg, 2, &ds);
        if self.shm_size_kb != 0 || self.page_size_kb != 0 {
            let mut p = Vec::new();
            bytes(&mut p, 1, b"system-producer");
            uint(&mut p, 2, self.shm_size_kb as u64);
            uint(&mut p, 3, self.page_size_kb as u64);
            bytes(&mut cfg, 6, &p);
        }
        if self.flush_period_ms != 0 {
            uint(&mut cfg, 13, self.flush_period_ms as u64);
        }
        if self.clear_period_ms != 0 {
            let mut inc = Vec::new();
            uint(&mut inc, 1, self.clear_period_ms as u64);
            bytes(&mut cfg, 21, &inc);
        }
        if let Some((mode, names, timeout_ms)) = &self.triggers {
            let mut tc = Vec::new();
            uint(&mut tc, 1, *mode as u64);
            for n in names {
                let mut t = Vec::new();
                bytes(&mut t, 1, n.as_bytes());
                uint(&mut t, 3, 0);
                bytes(&mut tc, 2, &t);
            }
            uint(&mut tc, 3, *timeout_ms as u64);
            bytes(&mut cfg, 17, &tc);
        }
        // Fail fast in tests: a missing flush ack shows as a failed flush.
        uint(&mut cfg, 14, 3000);
        cfg
    }
}

fn stat(v: &Value) -> u64 {
    match v {
        Value::String(s) => s.parse().unwrap_or(0),
        Value::Number(n) => n.as_u64().unwrap_or(0),
        _ => 0,
    }
}

/// The service's own statistics (the last TraceStats packet) show no
/// protocol breach: no ABI violation, discarded chunk, failed patch or
/// failed flush.
pub fn assert_service_stats_clean(model: &Value) {
    let stats = model["trace_stats"].as_array().expect("trace_stats");
    let last = stats.last().expect("the service wrote TraceStats");
    for b in last["buffer_stats"].as_array().into_iter().flatten() {
        for key in [
            "abi_violations",
            "chunks_discarded",
            "patches_failed",
            "trace_writer_packet_loss",
        ] {
            assert_eq!(stat(&b[key]), 0, "buffer stat {key}: {b:#}");
        }
    }
    for key in ["flushes_failed", "final_flush_failure"] {
        assert_eq!(stat(&last[key]), 0, "service stat {key}: {last:#}");
    }
}

/// Events of `model` named `name`.
pub fn events_named<'a>(model: &'a Value, name: &str) -> Vec<&'a Value> {
    model["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == name)
        .collect()
}

/// A service on a Unix socket that accepts producers and never reads what
/// they send: with `answer_bind`, it first answers their `ProducerPort`
/// bind (request 1) with the methods a producer needs, so that they count
/// as connected; without, it never writes a byte either.
pub struct SilentService {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Connections accepted so far.
    pub accepted: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl SilentService {
    /// Listens on `path` (a new socket).
    pub fn start(path: &Path, answer_bind: bool) -> SilentService {
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        use std::sync::Arc;
        let listener = std::os::unix::net::UnixListener::bind(path).unwrap();
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let accepted = Arc::new(AtomicUsize::new(0));
        let (s, a) = (stop.clone(), accepted.clone());
        let thread = std::thread::spawn(move || {
            // Kept open, never read, until the service ends.
            let mut held = Vec::new();
            while !s.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((mut conn, _)) => {
                        a.fetch_add(1, Ordering::Relaxed);
                        conn.set_nonblocking(false).unwrap();
                        if answer_bind {
                            let _ = conn.write_all(&bind_reply_frame());
                        }
                        held.push(conn);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        SilentService {
            stop,
            thread: Some(thread),
            accepted,
        }
    }
}

impl Drop for SilentService {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// An IPC frame answering bind request 1 with success, service 1 and the
/// `ProducerPort` methods (ids in Perfetto's declaration order).
fn bind_reply_frame() -> Vec<u8> {
    let methods = [
        (1, "InitializeConnection"),
        (2, "RegisterDataSource"),
        (3, "UnregisterDataSource"),
        (4, "CommitData"),
        (5, "GetAsyncCommand"),
        (6, "RegisterTraceWriter"),
        (7, "UnregisterTraceWriter"),
        (8, "NotifyDataSourceStarted"),
        (9, "NotifyDataSourceStopped"),
        (10, "ActivateTriggers"),
        (11, "Sync"),
        (12, "UpdateDataSource"),
    ];
    let mut reply = Vec::new();
    uint(&mut reply, 1, 1);
    uint(&mut reply, 2, 1);
    for (id, name) in methods {
        let mut m = Vec::new();
        uint(&mut m, 1, id);
        bytes(&mut m, 2, name.as_bytes());
        bytes(&mut reply, 3, &m);
    }
    let mut frame = Vec::new();
    uint(&mut frame, 2, 1); // request_id
    bytes(&mut frame, 4, &reply); // msg_bind_service_reply
    let mut out = (frame.len() as u32).to_le_bytes().to_vec();
    out.extend(frame);
    out
}
