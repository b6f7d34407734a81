//! ringtrace's system tracing against Perfetto's own tracing service (the
//! code `traced` runs, in the test host): the traces the service returns are
//! decoded with the official Perfetto schema, and the service's own
//! statistics must show no protocol breach.

use perfetto_test_host::{
    assert_service_stats_clean, events_named, producer, producer_logging, track_event_sources,
    Host, SilentService, TraceConfig,
};
use ringtrace_test_support::{perfetto_model as model, run_python, samples_model, scratch};
use serde_json::Value;
use std::collections::HashSet;
use std::time::{Duration, Instant};

const PRODUCER: &str = env!("CARGO_BIN_EXE_system-producer");

fn slices<'a>(m: &'a Value, name: &str) -> Vec<&'a Value> {
    m["slices"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["name"] == name)
        .collect()
}

/// Names of the slices and instants of a trace.
fn names(m: &Value) -> HashSet<String> {
    m["slices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap_or("").to_string())
        .collect()
}

/// The `tag` args of the `outer` slices.
fn tags(m: &Value) -> Vec<u64> {
    slices(m, "outer")
        .iter()
        .map(|s| s["args"]["tag"].as_u64().expect("tag arg"))
        .collect()
}

/// `burst TAG N` as the trace of a session recording only `alpha` shows it.
fn check_alpha_burst(m: &Value, tag: u64, n: usize) {
    let outer = slices(m, "outer");
    let point = slices(m, "point");
    assert_eq!(outer.len(), 3 * n, "outer slices");
    assert_eq!(point.len(), 3 * n, "point instants");
    let threads: HashSet<&Value> = outer.iter().map(|s| &s["track_uuid"]).collect();
    assert_eq!(threads.len(), 3, "one track per recording thread");
    for s in &outer {
        assert_eq!(s["category"], "alpha");
        assert_eq!(s["args"]["tag"].as_u64(), Some(tag));
        assert!(s["dur"].as_i64().unwrap() > 0, "ended slice: {s}");
        assert_eq!(s["depth"].as_u64(), Some(0));
    }
    let mut per_thread_i: Vec<(String, u64)> = outer
        .iter()
        .map(|s| {
            (
                s["track_uuid"].to_string(),
                s["args"]["i"].as_u64().unwrap(),
            )
        })
        .collect();
    per_thread_i.sort();
    per_thread_i.dedup();
    assert_eq!(
        per_thread_i.len(),
        3 * n,
        "every iteration of every thread once"
    );
    // Each point lies inside the outer slice of its thread and iteration
    // (beta's `inner` between them is not recorded).
    for p in &point {
        assert_eq!(p["depth"].as_u64(), Some(1), "nested in outer: {p}");
        let parent = outer
            .iter()
            .find(|o| o["track_uuid"] == p["track_uuid"] && o["args"]["i"] == p["args"]["i"])
            .expect("its outer slice");
        let (ts, start) = (p["ts"].as_u64().unwrap(), parent["ts"].as_u64().unwrap());
        let end = start + parent["dur"].as_u64().unwrap();
        assert!(
            start <= ts && ts <= end,
            "point at {ts} outside [{start}, {end}]"
        );
    }
}

#[test]
fn a_session_gets_exactly_its_categories_from_every_thread() {
    let dir = scratch("categories");
    let mut host = Host::start(&dir, None);
    let mut p = producer(PRODUCER, host.producer_socket.to_str().unwrap(), &[]);
    host.start_session("s", &TraceConfig::categories(&["alpha"]));
    assert_eq!(p.command("wait alpha on"), "ok");
    assert_eq!(p.command("wait beta off"), "ok");
    assert_eq!(p.command("burst 7 50"), "done");
    // A packet larger than a chunk: fragmented over several chunks.
    assert_eq!(p.command("big 20000"), "done");
    let trace = dir.join("s.pftrace");
    host.stop_session("s", &trace);
    let m = model(&trace);
    assert_service_stats_clean(&m);
    check_alpha_burst(&m, 7, 50);
    assert_eq!(
        names(&m),
        HashSet::from(["outer", "point", "big"].map(String::from))
    );
    let big = events_named(&m, "big");
    assert_eq!(big.len(), 1);
    assert_eq!(big[0]["args"]["text"].as_str().map(str::len), Some(20000));
    assert_eq!(p.command("quit"), "stopped 0");
}

#[test]
fn two_concurrent_sessions_each_get_their_own_categories() {
    let dir = scratch("two");
    let mut host = Host::start(&dir, None);
    // Started through init_from_env: RINGTRACE_OUTPUT=system.
    let mut p = producer(
        PRODUCER,
        host.producer_socket.to_str().unwrap(),
        &[("RINGTRACE_OUTPUT", "system")],
    );
    host.start_session("a", &TraceConfig::categories(&["alpha"]));
    host.start_session("g", &TraceConfig::categories(&["gamma"]));
    assert_eq!(p.command("wait alpha on"), "ok");
    assert_eq!(p.command("wait gamma on"), "ok");
    assert_eq!(p.command("burst 3 40"), "done");
    let (ta, tg) = (dir.join("a.pftrace"), dir.join("g.pftrace"));
    host.stop_session("a", &ta);
    host.stop_session("g", &tg);
    let (ma, mg) = (model(&ta), model(&tg));
    assert_service_stats_clean(&ma);
    assert_service_stats_clean(&mg);
    check_alpha_burst(&ma, 3, 40);
    assert_eq!(
        names(&ma),
        HashSet::from(["outer", "point"].map(String::from))
    );
    assert_eq!(names(&mg), HashSet::from(["other".to_string()]));
    assert_eq!(slices(&mg, "other").len(), 120);
    assert_eq!(p.command("quit"), "stopped 0");
}

#[test]
fn sessions_start_and_stop_while_the_program_runs() {
    let dir = scratch("restart-session");
    let mut host = Host::start(&dir, None);
    let mut p = producer(PRODUCER, host.producer_socket.to_str().unwrap(), &[]);
    host.start_session("one", &TraceConfig::categories(&["alpha"]));
    assert_eq!(p.command("wait alpha on"), "ok");
    assert_eq!(p.command("burst 1 10"), "done");
    let t1 = dir.join("one.pftrace");
    host.stop_session("one", &t1);
    assert_eq!(p.command("wait alpha off"), "ok");
    assert_eq!(p.command("burst 2 10"), "done"); // recorded by no one
    host.start_session("two", &TraceConfig::categories(&["alpha"]));
    assert_eq!(p.command("wait alpha on"), "ok");
    assert_eq!(p.command("burst 3 10"), "done");
    let t2 = dir.join("two.pftrace");
    host.stop_session("two", &t2);
    let (m1, m2) = (model(&t1), model(&t2));
    assert_service_stats_clean(&m1);
    assert_service_stats_clean(&m2);
    check_alpha_burst(&m1, 1, 10);
    check_alpha_burst(&m2, 3, 10);
    assert_eq!(p.command("quit"), "stopped 0");
}

#[test]
fn flushes_are_answered_and_incremental_state_is_cleared() {
    let dir = scratch("flush");
    let mut host = Host::start(&dir, None);
    let mut p = producer(PRODUCER, host.producer_socket.to_str().unwrap(), &[]);
    let cfg = TraceConfig {
        flush_period_ms: 100,
        clear_period_ms: 100,
        ..TraceConfig::categories(&["alpha"])
    };
    host.start_session("s", &cfg);
    assert_eq!(p.command("wait alpha on"), "ok");
    assert_eq!(p.command("main 4 20"), "done");
    assert!(host.flush("s", 2000), "an explicit flush is acked");
    std::thread::sleep(std::time::Duration::from_millis(400)); // periodic flushes and clears
    assert_eq!(p.command("main 4 20"), "done");
    assert!(host.flush("s", 2000), "a second flush is acked");
    let t = dir.join("s.pftrace");
    host.stop_session("s", &t);
    let m = model(&t);
    assert_service_stats_clean(&m);
    assert_eq!(tags(&m), vec![4; 40]);
    assert_eq!(slices(&m, "point").len(), 40);
    // The main thread's sequence was cleared again after the service asked,
    // and every event after a clear still resolves (names interned anew).
    let cleared: Vec<u64> = m["sequences"]
        .as_object()
        .unwrap()
        .values()
        .filter_map(|s| s["cleared_count"].as_u64())
        .collect();
    assert!(
        cleared.iter().any(|&c| c >= 2),
        "cleared counts {cleared:?}"
    );
    assert_eq!(p.command("quit"), "stopped 0");
}

fn count(text: &str, needle: &str) -> usize {
    text.matches(needle).count()
}

#[test]
fn without_traced_the_program_runs_says_so_once_and_connects_later() {
    let dir = scratch("absent");
    let socket = dir.join("producer.sock");
    let log = dir.join("producer.log");
    let mut p = producer_logging(PRODUCER, socket.to_str().unwrap(), &[], Some(&log));
    assert_eq!(p.command("burst 1 20"), "done"); // no stall, nothing recorded
    assert_eq!(p.command("wait alpha off"), "ok");
    std::thread::sleep(std::time::Duration::from_millis(1500)); // retries happen
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        count(&text, "no Perfetto tracing service"),
        1,
        "stderr: {text}"
    );
    // The service starts late: the producer connects on its own.
    let mut host = Host::start(&dir, None);
    host.start_session("s", &TraceConfig::categories(&["alpha"]));
    assert_eq!(p.command("wait alpha on"), "ok");
    assert_eq!(p.command("burst 2 10"), "done");
    let t = dir.join("s.pftrace");
    host.stop_session("s", &t);
    let m = model(&t);
    assert_service_stats_clean(&m);
    check_alpha_burst(&m, 2, 10);
    assert_eq!(p.command("quit"), "stopped 0");
}

#[test]
fn a_restarted_traced_is_reconnected_to() {
    let dir = scratch("restart");
    let log = dir.join("producer.log");
    let mut host = Host::start(&dir, None);
    let socket = host.producer_socket.clone();
    let mut p = producer_logging(PRODUCER, socket.to_str().unwrap(), &[], Some(&log));
    host.start_session("s", &TraceConfig::categories(&["alpha"]));
    assert_eq!(p.command("wait alpha on"), "ok");
    assert_eq!(p.command("burst 1 10"), "done");
    host.kill();
    // The program notices, stops recording for the dead session, runs on.
    assert_eq!(p.command("wait alpha off"), "ok");
    assert_eq!(p.command("burst 2 10"), "done");
    let mut host = Host::start(&dir, None);
    host.start_session("s", &TraceConfig::categories(&["alpha"]));
    assert_eq!(p.command("wait alpha on"), "ok");
    assert_eq!(p.command("burst 3 10"), "done");
    let t = dir.join("s.pftrace");
    host.stop_session("s", &t);
    let m = model(&t);
    assert_service_stats_clean(&m);
    check_alpha_burst(&m, 3, 10);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("lost the connection"), "stderr: {text}");
    assert_eq!(p.command("quit"), "stopped 0");
}

#[test]
fn a_tiny_shared_memory_buffer_drops_and_counts_but_never_stalls() {
    let dir = scratch("tiny");
    let mut host = Host::start(&dir, None);
    let mut p = producer(PRODUCER, host.producer_socket.to_str().unwrap(), &[]);
    let cfg = TraceConfig {
        shm_size_kb: 8, // two 4 KiB pages
        page_size_kb: 4,
        buffer_kb: 65536,
        ..TraceConfig::categories(&["alpha"])
    };
    host.start_session("s", &cfg);
    assert_eq!(p.command("wait alpha on"), "ok");
    let answer = p.command("flood 20");
    let recorded: u64 = answer.strip_prefix("done ").unwrap().parse().unwrap();
    let t = dir.join("s.pftrace");
    host.stop_session("s", &t);
    let m = model(&t);
    assert_service_stats_clean(&m);
    let written = events_named(&m, "flood").len() as u64;
    let stopped = p.command("quit");
    let lost: u64 = stopped.strip_prefix("stopped ").unwrap().parse().unwrap();
    assert!(
        lost > 0,
        "a 8 KiB buffer cannot take {recorded} events in 20 ms"
    );
    assert!(written > 0, "events still get through");
    assert_eq!(
        written + lost,
        recorded,
        "every event written or counted as lost"
    );
    // The loss shows in the trace: marked with its count on the sequences.
    let marked: u64 = m["slices"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["name"] == "ringtrace: events lost")
        .map(|s| s["args"]["lost_events"].as_u64().unwrap())
        .sum();
    assert!(marked > 0, "loss marked in the trace");
}

/// A free TCP port on the loopback interface.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn over_tcp_chunks_travel_in_commit_data_and_large_packets_are_fragmented() {
    let dir = scratch("tcp");
    let addr = format!("127.0.0.1:{}", free_port());
    let mut host = Host::start(&dir, Some(&addr));
    let mut p = producer(PRODUCER, &addr, &[]);
    host.start_session("s", &TraceConfig::categories(&["alpha"]));
    assert_eq!(p.command("wait alpha on"), "ok");
    assert_eq!(p.command("burst 5 30"), "done");
    assert_eq!(p.command("big 50000"), "done");
    let t = dir.join("s.pftrace");
    host.stop_session("s", &t);
    let m = model(&t);
    assert_service_stats_clean(&m);
    check_alpha_burst(&m, 5, 30);
    let big = events_named(&m, "big");
    assert_eq!(big.len(), 1);
    assert_eq!(big[0]["args"]["text"].as_str().map(str::len), Some(50000));
    assert_eq!(p.command("quit"), "stopped 0");
}

#[test]
fn a_file_and_system_tracing_at_once_each_keep_their_categories() {
    let dir = scratch("file");
    let file = dir.join("file.pftrace");
    let mut host = Host::start(&dir, None);
    let mut p = producer(
        PRODUCER,
        host.producer_socket.to_str().unwrap(),
        &[
            ("RINGTRACE_OUTPUT", file.to_str().unwrap()),
            ("RINGTRACE_SYSTEM", "1"),
            ("RINGTRACE_CATEGORIES", "gamma"),
        ],
    );
    host.start_session("s", &TraceConfig::categories(&["alpha"]));
    assert_eq!(p.command("wait alpha on"), "ok");
    assert_eq!(p.command("burst 6 10"), "done");
    let t = dir.join("s.pftrace");
    host.stop_session("s", &t);
    assert_eq!(p.command("quit"), "stopped 0");
    let (ms, mf) = (model(&t), model(&file));
    assert_service_stats_clean(&ms);
    check_alpha_burst(&ms, 6, 10);
    assert_eq!(names(&mf), HashSet::from(["other".to_string()]));
    assert_eq!(slices(&mf, "other").len(), 30);
}

/// The producer's `track_event` categories as the service lists them, once
/// `done` accepts them (within 10 s).
fn categories_when(host: &mut Host, done: impl Fn(&[String]) -> bool) -> Vec<String> {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let cats = host.track_event_categories("system-producer");
        match cats {
            Some(c) if done(&c) => return c,
            other if Instant::now() >= until => {
                panic!("the service lists {other:?}: {:#}", host.query())
            }
            _ => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

#[test]
fn a_category_first_used_after_connecting_is_announced_and_can_be_recorded() {
    let dir = scratch("update");
    let mut host = Host::start(&dir, None);
    let mut p = producer(PRODUCER, host.producer_socket.to_str().unwrap(), &[]);
    // Registered with the categories known when it connected.
    let cats = categories_when(&mut host, |_| true);
    assert_eq!(cats, ["alpha", "beta", "gamma"]);
    // First use of delta (no session records it yet): the flusher notices
    // and sends UpdateDataSource with the full descriptor.
    let used = Instant::now();
    assert_eq!(p.command("late 3"), "done");
    let cats = categories_when(&mut host, |c| c.iter().any(|c| c == "delta"));
    eprintln!(
        "delta listed by the service {} ms after its first use",
        used.elapsed().as_millis()
    );
    assert_eq!(cats, ["alpha", "beta", "delta", "gamma"]);
    // Still one track_event data source for the producer (updated in
    // place, matched by name and id), not a second one.
    let state = host.query();
    let mine = track_event_sources(&state, "system-producer");
    assert_eq!(mine.len(), 1, "{state:#}");
    assert_eq!(mine[0]["id"], 1);
    // A session that asks for the new category gets its events.
    host.start_session("s", &TraceConfig::categories(&["delta"]));
    assert_eq!(p.command("wait delta on"), "ok");
    assert_eq!(p.command("late 5"), "done");
    let t = dir.join("s.pftrace");
    host.stop_session("s", &t);
    let m = model(&t);
    assert_service_stats_clean(&m);
    let late = slices(&m, "late");
    assert_eq!(late.len(), 5, "the events after the session started");
    for (i, s) in late.iter().enumerate() {
        assert_eq!(s["category"], "delta");
        assert_eq!(s["args"]["i"].as_u64(), Some(i as u64));
    }
    assert_eq!(names(&m), HashSet::from(["late".to_string()]));
    assert_eq!(p.command("quit"), "stopped 0");
}

/// Whether this kernel connects vsock sockets on one machine (CID 1, the
/// `vsock_loopback` transport): a listener bound at CID_ANY, a connection
/// to CID 1 within 1 s. Why not, if not.
fn vsock_loopback() -> Result<u32, String> {
    use socket2::{Domain, SockAddr, Socket, Type};
    let listener = Socket::new(Domain::VSOCK, Type::STREAM, None)
        .map_err(|e| format!("no vsock sockets ({e})"))?;
    listener
        .bind(&SockAddr::vsock(u32::MAX, u32::MAX))
        .map_err(|e| format!("cannot bind a vsock listener ({e})"))?;
    listener
        .listen(1)
        .map_err(|e| format!("cannot listen on vsock ({e})"))?;
    let port = listener
        .local_addr()
        .ok()
        .and_then(|a| a.as_vsock_address())
        .map(|(_, port)| port)
        .ok_or("no vsock port")?;
    let client = Socket::new(Domain::VSOCK, Type::STREAM, None).map_err(|e| e.to_string())?;
    client
        .connect_timeout(&SockAddr::vsock(1, port), Duration::from_secs(1))
        .map_err(|e| format!("no vsock loopback: connecting to CID 1 fails ({e})"))?;
    drop(client);
    drop(listener);
    Ok(port)
}

#[test]
fn over_vsock_chunks_travel_in_commit_data() {
    let port = match vsock_loopback() {
        Ok(port) => port,
        Err(why) => {
            // Straight to stderr, which the test harness does not capture:
            // the skip shows in every run.
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED over_vsock_chunks_travel_in_commit_data: {why}"
            );
            return;
        }
    };
    let dir = scratch("vsock");
    // Perfetto's service listens at CID_ANY, as `traced` configured for VMs.
    let mut host = Host::start(&dir, Some(&format!("vsock://-1:{port}")));
    let addr = format!("vsock://1:{port}");
    let mut p = producer(PRODUCER, &addr, &[]);
    host.start_session("s", &TraceConfig::categories(&["alpha"]));
    assert_eq!(p.command("wait alpha on"), "ok");
    assert_eq!(p.command("burst 8 30"), "done");
    assert_eq!(p.command("big 50000"), "done");
    let t = dir.join("s.pftrace");
    host.stop_session("s", &t);
    let m = model(&t);
    assert_service_stats_clean(&m);
    check_alpha_burst(&m, 8, 30);
    let big = events_named(&m, "big");
    assert_eq!(big.len(), 1);
    assert_eq!(big[0]["args"]["text"].as_str().map(str::len), Some(50000));
    assert_eq!(p.command("quit"), "stopped 0");
}

#[test]
fn a_vsock_address_without_a_service_or_malformed_is_reported_once_without_a_stall() {
    let dir = scratch("vsock-absent");
    // Nobody listens (or this kernel has no vsock); then a malformed address.
    for (addr, says, wait_ms) in [
        (
            "vsock://1:47917",
            "no Perfetto tracing service at vsock://1:47917",
            5500,
        ),
        ("vsock://one:47917", "vsock://CID:PORT", 1500),
    ] {
        let log = dir.join("producer.log");
        let mut p = producer_logging(PRODUCER, addr, &[], Some(&log));
        // Recording never waits for the connection thread.
        let start = Instant::now();
        assert_eq!(p.command("burst 1 200"), "done");
        let took = start.elapsed();
        assert!(took < Duration::from_secs(1), "{addr}: burst took {took:?}");
        assert_eq!(p.command("wait alpha off"), "ok");
        // Without a service: two attempts at least (back-off 1 s, an
        // attempt waits 2 s at most). Malformed: the producer gives up.
        std::thread::sleep(Duration::from_millis(wait_ms));
        assert_eq!(p.command("quit"), "stopped 0");
        let text = std::fs::read_to_string(&log).unwrap();
        assert_eq!(count(&text, says), 1, "{addr}: stderr: {text}");
        assert_eq!(text.lines().count(), 1, "{addr}: stderr: {text}");
    }
}

/// The trigger names of the `trigger` packets the service wrote into a
/// trace (decoded with the official schema).
fn triggers_in(trace: &std::path::Path) -> Vec<String> {
    let script = [
        "import sys",
        "from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb",
        "t = pb.Trace(); t.ParseFromString(open(sys.argv[1], 'rb').read())",
        "for p in t.packet:",
        "    if p.HasField('trigger'): print(p.trigger.trigger_name)",
    ]
    .join("\n");
    run_python(&script, &[trace.to_str().unwrap()])
        .lines()
        .map(String::from)
        .collect()
}

#[test]
fn a_trigger_reaches_the_service_and_a_stop_tracing_session_stops() {
    let dir = scratch("trigger-stop");
    let mut host = Host::start(&dir, None);
    let mut p = producer(PRODUCER, host.producer_socket.to_str().unwrap(), &[]);
    let mut config = TraceConfig::categories(&["alpha"]);
    config.triggers = Some((2, vec!["slow-request".into()], 60_000));
    host.start_session("stop-on-trigger", &config);
    assert_eq!(p.command("wait alpha on"), "ok");
    assert_eq!(p.command("burst 1 10"), "done");
    // A trigger the session does not name: it goes on.
    assert_eq!(p.command("trigger other"), "done");
    assert_eq!(p.command("burst 2 10"), "done");
    assert_eq!(p.command("trigger slow-request"), "done");
    // The service stops the session: the producer is told to stop.
    assert_eq!(p.command("wait alpha off"), "ok", "the session stopped");
    assert_eq!(p.command("burst 3 10"), "done"); // recorded by no one
    let trace = dir.join("stopped.pftrace");
    host.stop_session("stop-on-trigger", &trace);
    let m = model(&trace);
    assert_service_stats_clean(&m);
    let mut got = tags(&m);
    got.sort();
    got.dedup();
    assert_eq!(got, [1, 2], "what came before the trigger, nothing after");
    assert_eq!(triggers_in(&trace), ["slow-request"]);
    assert_eq!(p.command("quit"), "stopped 0");
}

/// The number after `key=` in an answer line.
fn field(answer: &str, key: &str) -> u64 {
    answer
        .split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in {answer:?}"))
}

/// `triggers N BYTES VALID`'s answer: long names queued, short names
/// queued, the longest `flush()` in ms.
fn flood(p: &mut perfetto_test_host::LineChild, n: u64, valid: &str) -> (u64, u64, u64) {
    let a = p.command(&format!("triggers {n} 102400 {valid}"));
    let v: Vec<u64> = a
        .strip_prefix("done ")
        .unwrap_or_else(|| panic!("triggers: {a}"))
        .split(' ')
        .map(|x| x.parse().unwrap())
        .collect();
    (v[0], v[1], v[2])
}

#[test]
fn a_flood_of_triggers_is_bounded_and_a_valid_one_among_them_reaches_the_service() {
    let dir = scratch("trigger-flood");
    let mut host = Host::start(&dir, None);
    let log = dir.join("producer.log");
    let mut p = producer_logging(
        PRODUCER,
        host.producer_socket.to_str().unwrap(),
        &[],
        Some(&log),
    );
    let mut config = TraceConfig::categories(&["alpha"]);
    config.triggers = Some((2, vec!["valid-trigger".into()], 60_000));
    host.start_session("flood", &config);
    assert_eq!(p.command("wait alpha on"), "ok");
    assert_eq!(p.command("burst 1 10"), "done");
    // 10,000 triggers, half of them with distinct names of 100 KiB, the
    // others distinct and short, the session's own in the middle.
    let (big, small, max_flush_ms) = flood(&mut p, 10_000, "valid-trigger");
    assert!(
        big > 0 && small > 0,
        "names queued: {big} long, {small} short"
    );
    assert!(
        max_flush_ms < 500,
        "a flush took {max_flush_ms} ms among the triggers"
    );
    // The service got the valid name and stopped the session.
    assert_eq!(p.command("wait alpha off"), "ok", "the session stopped");
    let trace = dir.join("flood.pftrace");
    host.stop_session("flood", &trace);
    let m = model(&trace);
    assert_service_stats_clean(&m);
    assert_eq!(triggers_in(&trace), ["valid-trigger"]);
    assert_eq!(tags(&m).first(), Some(&1), "what came before the trigger");
    let a = p.command("quit-stats");
    let dropped = field(&a, "triggers_dropped");
    // Every long name refused; short ones beyond the queue's bound too.
    assert!(
        dropped >= big && dropped <= big + small,
        "{dropped} dropped of {big} long and {small} short names: {a}"
    );
    assert!(field(&a, "stop_ms") < 1000, "{a}");
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(count(&text, "lost the connection"), 0, "stderr: {text}");
    assert_eq!(count(&text, "trigger names not sent"), 1, "stderr: {text}");
    assert!(text.contains("longer than 256 bytes"), "stderr: {text}");
}

#[test]
fn a_service_that_never_reads_blocks_no_flush_and_no_stop() {
    let dir = scratch("silent");
    // First a service that never answers the handshake, then one that
    // answers it and then never reads again.
    for answer_bind in [false, true] {
        let what = if answer_bind { "bind answered" } else { "mute" };
        let socket = dir.join(format!("silent-{answer_bind}.sock"));
        let service = SilentService::start(&socket, answer_bind);
        let log = dir.join(format!("producer-{answer_bind}.log"));
        let mut p = producer_logging(PRODUCER, socket.to_str().unwrap(), &[], Some(&log));
        let until = Instant::now() + Duration::from_secs(10);
        while service.accepted.load(std::sync::atomic::Ordering::Relaxed) == 0
            && Instant::now() < until
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        // The producer's handshake goes out right after the bind's answer.
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(p.command("trigger incident"), "done");
        let ms: u64 = p.command("flush")["done ".len()..].parse().unwrap();
        assert!(ms < 1000, "{what}: flush took {ms} ms");
        let (big, small, max_flush_ms) = flood(&mut p, 2_000, "-");
        assert!(
            max_flush_ms < 1000,
            "{what}: a flush took {max_flush_ms} ms among the triggers"
        );
        let a = p.command("quit-stats");
        // Within the time shut-down gives queued names (200 ms), well
        // under a send's timeout (2 s).
        assert!(field(&a, "stop_ms") < 1000, "{what}: {a}");
        let dropped = field(&a, "triggers_dropped");
        if answer_bind {
            // Every long name refused; the short ones went out (unread).
            assert!(dropped >= big, "{what}: {dropped} dropped, {big} long: {a}");
        } else {
            // Never connected: not one name sent.
            assert_eq!(dropped, 1 + big + small, "{what}: {a}");
        }
        let text = std::fs::read_to_string(&log).unwrap();
        assert_eq!(
            count(&text, "trigger names not sent"),
            1,
            "{what}: stderr: {text}"
        );
        drop(service);
    }
}

#[test]
fn cpu_samples_reach_the_service_with_their_stacks_beside_the_slices() {
    let dir = scratch("cpu-samples");
    let mut host = Host::start(&dir, None);
    let mut p = producer(
        PRODUCER,
        host.producer_socket.to_str().unwrap(),
        &[("RINGTRACE_CPU_SAMPLING", "1000")],
    );
    host.start_session("samples", &TraceConfig::categories(&["alpha"]));
    assert_eq!(p.command("wait alpha on"), "ok");
    let tid: i64 = p
        .command("spin 300")
        .strip_prefix("done ")
        .and_then(|t| t.parse().ok())
        .expect("spin's tid");
    // Samples reach the flusher every pass; let one more pass run.
    std::thread::sleep(Duration::from_millis(200));
    let trace = dir.join("samples.pftrace");
    host.stop_session("samples", &trace);
    let m = model(&trace);
    assert_service_stats_clean(&m);
    let s = samples_model(&trace);
    let mine: Vec<&Value> = s["samples"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["tid"].as_i64() == Some(tid))
        .collect();
    // 300 ms of CPU at 1 kHz: ~300 samples (fewer on a loaded machine).
    assert!(
        mine.len() >= 100,
        "{} samples of the spinning thread",
        mine.len()
    );
    // One perf session: every sample of the process on one sequence.
    let seqs: HashSet<String> = s["samples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["seq"].to_string())
        .collect();
    assert_eq!(seqs.len(), 1, "samples on one sequence: {seqs:?}");
    // The spin slices of that thread, and the samples naming spin_hot
    // inside them (same tid, same clock).
    let uuid = m["tracks"]
        .as_object()
        .unwrap()
        .values()
        .find(|t| t["kind"] == "thread" && t["tid"].as_i64() == Some(tid))
        .expect("the spinning thread's track")["uuid"]
        .clone();
    let spans: Vec<(u64, u64)> = slices(&m, "spin")
        .iter()
        .filter(|x| x["track_uuid"] == uuid)
        .map(|x| {
            let ts = x["ts"].as_u64().unwrap();
            (ts, ts + x["dur"].as_u64().unwrap())
        })
        .collect();
    assert!(!spans.is_empty(), "spin slices");
    let hot: Vec<&&Value> = mine
        .iter()
        .filter(|x| {
            x["frames"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| f["name"].as_str().unwrap_or("").contains("spin_hot"))
        })
        .collect();
    assert!(
        hot.len() * 100 >= mine.len() * 90,
        "{} of {} samples name spin_hot",
        hot.len(),
        mine.len()
    );
    for x in &hot {
        let ts = x["ts"].as_u64().unwrap();
        assert!(
            spans.iter().any(|&(a, b)| a <= ts && ts <= b),
            "a sample in spin_hot at {ts} outside every spin slice of its thread"
        );
    }
    assert_eq!(p.command("quit"), "stopped 0");
}
