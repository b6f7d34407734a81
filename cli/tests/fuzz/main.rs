//! Fuzzing, on stable Rust, of every reader of untrusted bytes: what
//! `ringtrace inspect`, `convert` and `pack` do with a file (through the
//! `ringtrace_cli` library functions the command calls) and the archive code
//! reading TAR, ZIP, gzip, manifests and sidecars.
//!
//! Each case is a seed input (real ringtrace traces and archives, checked in
//! under `corpus/`) mutated by the seeded generator of `mutate.rs`; its
//! number alone reproduces it. Every case must end in a result or a clear
//! error, and
//! - never panic (caught and reported with the case's seed),
//! - never hang (a watchdog fails the run when one case takes longer than
//!   [`CASE_TIMEOUT`]),
//! - never allocate more than the input warrants: a counting global
//!   allocator measures each case's peak, which must stay under
//!   [`ALLOC_PER_INPUT_BYTE`] times the input plus [`ALLOC_FIXED`] (the
//!   unpack limit is [`UNPACK_LIMIT`] here, so bombs hit it),
//! - and when it succeeds, be right: JSON that `convert` writes parses,
//!   Perfetto that it writes decodes, an archive `pack` writes passes the
//!   same checks `inspect` applies and holds the bytes packed.
//!
//! `RINGTRACE_FUZZ_CASES` (default [`DEFAULT_CASES`]) sets the number of
//! cases, `RINGTRACE_FUZZ_SEED` the run's seed (a number, or `time`),
//! `RINGTRACE_FUZZ_ONLY` runs the one case of that seed;
//! seeds that once found a bug run first on every run ([`REGRESSIONS`]).
//! `cargo test -p ringtrace-cli --test fuzz -- --ignored write_corpus`
//! records the corpus again.

mod mutate;

use mutate::{Rng, Shape};
use prost::Message;
use ringtrace_archive::{self as archive, Archive, ArchiveError, Manifest};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

// ------------------------------------------------------ counting allocator

/// Counts, per thread, the bytes live and their peak since the last
/// [`reset_peak`].
struct Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn track(delta: isize) {
    // `try_with`: never panic inside the allocator, even while the thread's
    // locals are being torn down (these have no destructor, so they stay).
    let _ = LIVE.try_with(|l| {
        let now = l.get() + delta;
        l.set(now);
        let _ = PEAK.try_with(|p| {
            if now > p.get() {
                p.set(now)
            }
        });
    });
}

// SAFETY: every call is forwarded unchanged to the system allocator, which
// upholds GlobalAlloc's contract; the counting touches only const-initialised
// thread-local `Cell`s, which neither allocate nor unwind.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        track(layout.size() as isize);
        // SAFETY: the caller's `layout` is passed on as it came.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        track(layout.size() as isize);
        // SAFETY: as `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        track(-(layout.size() as isize));
        // SAFETY: `ptr` came from this allocator (so from `System`) with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        track(new_size as isize - layout.size() as isize);
        // SAFETY: `ptr` and `layout` came from this allocator, as `realloc` requires.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Starts measuring; returns the live bytes now.
fn reset_peak() -> isize {
    let live = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(live));
    live
}

fn peak_since(start: isize) -> usize {
    (PEAK.with(Cell::get) - start).max(0) as usize
}

// ------------------------------------------------------------- settings

const DEFAULT_CASES: usize = 6_000;
const DEFAULT_SEED: u64 = 0x5eed_2026_1124;
/// The decompression limit the readers get in this test.
const UNPACK_LIMIT: u64 = 1 << 20;
/// Peak bytes allowed per byte of input (decoded events, their JSON and
/// Perfetto forms, the archive copies `pack` makes)...
const ALLOC_PER_INPUT_BYTE: usize = 64;
/// ...plus this much (the unpack limit's worth of decompressed data and
/// what it decodes to, and fixed costs).
const ALLOC_FIXED: usize = 48 * UNPACK_LIMIT as usize + (4 << 20);
/// One case taking longer than this is a hang.
const CASE_TIMEOUT: Duration = Duration::from_secs(20);

/// Seeds of cases that once found a bug, with what it was. They run first.
const REGRESSIONS: &[(u64, &str)] = &[
    (
        8_893_362_567_474_888_713,
        "JSON ts near i64::MAX: `ts + dur` overflowed in inspect (convert::trace_end)",
    ),
    (
        7_779_189_009_446_528_921,
        "a TAR member's JSON with an out-of-range ts: the same overflow through inspect of an archive",
    ),
];

// --------------------------------------------------------------- corpus

struct Seed {
    name: &'static str,
    shape: Shape,
    bytes: &'static [u8],
}

macro_rules! seed {
    ($name:literal, $shape:expr) => {
        Seed {
            name: $name,
            shape: $shape,
            bytes: include_bytes!(concat!("corpus/", $name)),
        }
    };
}

fn corpus() -> Vec<Seed> {
    vec![
        seed!("trace.pftrace", Shape::Perfetto),
        seed!("compressed.pftrace", Shape::Perfetto),
        seed!("trace.json", Shape::Json),
        seed!("object.json", Shape::Json),
        seed!("archive.tar", Shape::Tar),
        seed!("archive.zip", Shape::Zip),
        seed!("archive.tar.gz", Shape::Gzip),
        seed!("perfetto_manifest.json", Shape::Manifest),
        seed!("sidecar.json", Shape::Sidecar),
    ]
}

// ---------------------------------------------------------------- cases

/// One generated input.
struct Case {
    seed: u64,
    name: &'static str,
    shape: Shape,
    bytes: Vec<u8>,
}

/// The input of case `seed`: a corpus entry mutated 1 to 3 times, or now
/// and then an input built to stress one limit (nesting, bombs).
fn generate(seed: u64, corpus: &[Seed]) -> Case {
    let mut rng = Rng::new(seed);
    let others: Vec<&[u8]> = corpus.iter().map(|s| s.bytes).collect();
    if rng.one_in(40) {
        let (name, shape, bytes) = match rng.below(6) {
            0 => (
                "deep.pftrace",
                Shape::Perfetto,
                mutate::frame(&[mutate::nested_annotation_packet(
                    *rng.pick(&[100, 101, 10_000]),
                    rng.one_in(2),
                )]),
            ),
            1 => (
                "bomb.pftrace",
                Shape::Perfetto,
                mutate::compressed_bomb(1 + rng.below(4), 64 << 10),
            ),
            2 => (
                "bomb.zip",
                Shape::Zip,
                mutate::zip_bomb(b"bomb.json", (2 + rng.below(30)) << 20),
            ),
            3 => (
                "bomb.json.gz",
                Shape::Gzip,
                mutate::gzip(&vec![b' '; (2 + rng.below(30)) << 20]),
            ),
            4 => (
                "deep.json",
                Shape::Json,
                format!("[{}", "[".repeat(*rng.pick(&[128, 129, 100_000]))).into_bytes(),
            ),
            _ => ("empty", Shape::Json, Vec::new()),
        };
        return Case {
            seed,
            name,
            shape,
            bytes,
        };
    }
    let s = &corpus[rng.below(corpus.len())];
    let mut bytes = s.bytes.to_vec();
    for _ in 0..1 + rng.below(3) {
        mutate::mutate(&mut rng, &mut bytes, s.shape, &others);
    }
    Case {
        seed,
        name: s.name,
        shape: s.shape,
        bytes,
    }
}

/// What one case did, for the summary.
#[derive(Default)]
struct Outcome {
    ok: usize,
    errors: usize,
}

/// Runs every reader on the case's bytes and checks what succeeds.
fn run(case: &Case, corpus: &[Seed], out: &mut Outcome) -> Result<(), String> {
    let d = &case.bytes;
    let mut note = |r: bool| {
        if r {
            out.ok += 1
        } else {
            out.errors += 1
        }
    };
    let _ = archive::sniff(d);

    // `ringtrace inspect FILE`.
    let inspected = ringtrace_cli::inspect_bytes(case.name, d.clone(), UNPACK_LIMIT);
    if let Ok(ringtrace_cli::Inspected::Archive { summary, .. }) = &inspected {
        serde_json::to_string(summary).map_err(|e| format!("inspect summary: {e}"))?;
    }
    note(inspected.is_ok());

    // `ringtrace convert FILE out.json` and `out.pftrace`.
    if matches!(case.shape, Shape::Perfetto | Shape::Json | Shape::Gzip) {
        if let Ok((json, _)) = ringtrace_cli::convert_bytes(
            case.name,
            d.clone(),
            ringtrace::Format::Json,
            UNPACK_LIMIT,
        ) {
            serde_json::from_slice::<serde_json::Value>(&json)
                .map_err(|e| format!("convert wrote JSON that does not parse: {e}"))?;
            note(true);
        } else {
            note(false);
        }
        if let Ok((pb, _)) = ringtrace_cli::convert_bytes(
            case.name,
            d.clone(),
            ringtrace::Format::Perfetto,
            UNPACK_LIMIT,
        ) {
            ringtrace_protos::Trace::decode(pb.as_slice())
                .map_err(|e| format!("convert wrote Perfetto that does not decode: {e}"))?;
            note(true);
        } else {
            note(false);
        }
    }

    // The archive readers, then `pack` of what they read.
    if matches!(case.shape, Shape::Tar | Shape::Zip | Shape::Gzip) {
        let _ = archive::check_archive_limited(d, UNPACK_LIMIT);
        if let Ok(members) = archive::read_members_limited(d, UNPACK_LIMIT) {
            let mut a = Archive::new();
            for (name, data) in members {
                if !archive::sniff(&data).eq(&archive::MemberKind::Manifest) {
                    a.add_bytes(name, data);
                }
            }
            note(pack_checked(&a)?);
        }
    }

    // `ringtrace pack --join`: a mutated trace joined with a good one. The
    // join frames every packet it keeps (its bytes pass through as they
    // are: a packet that was damaged stays damaged) and keeps all of the
    // good trace's.
    if matches!(case.shape, Shape::Perfetto) {
        let good = corpus[0].bytes;
        match archive::join_perfetto(&[("good", good), (case.name, d.as_slice())]) {
            Ok(joined) => {
                let (n, whole) = frames(&joined);
                if !whole || n < frames(good).0 {
                    return Err(format!(
                        "join wrote {n} packets (framed whole: {whole}), fewer than the good trace's or cut"
                    ));
                }
                note(true);
            }
            Err(_) => note(false),
        }
    }

    // `ringtrace pack FILE good.pftrace`.
    let mut a = Archive::new();
    a.add_bytes("good.pftrace", corpus[0].bytes.to_vec());
    a.add_bytes(format!("case-{}", case.name), d.clone());
    note(pack_checked(&a)?);

    match case.shape {
        Shape::Manifest => {
            let text = String::from_utf8_lossy(d);
            if let Ok(m) = Manifest::from_json(&text) {
                let again = Manifest::from_json(&m.to_json())
                    .map_err(|e| format!("a manifest we print does not parse again: {e}"))?;
                if again != m {
                    return Err("a manifest changes through to_json/from_json".into());
                }
                let _ = m.validate(&[]);
                note(true);
            } else {
                note(false);
            }
        }
        Shape::Sidecar => note(pack_dir_with_sidecar(case, corpus)?),
        _ => {}
    }
    Ok(())
}

/// The packets of a Perfetto trace's framing (field 1, length-delimited,
/// at the top level), and whether the bytes are all such frames.
fn frames(mut d: &[u8]) -> (usize, bool) {
    let mut n = 0;
    while !d.is_empty() {
        let Some((0x0a, rest)) = archive::varint::read(d) else {
            return (n, false);
        };
        let Some((len, rest)) = archive::varint::read(rest) else {
            return (n, false);
        };
        let Some(rest) = usize::try_from(len).ok().and_then(|l| rest.get(l..)) else {
            return (n, false);
        };
        n += 1;
        d = rest;
    }
    (n, true)
}

/// Writes `a` as TAR and ZIP; what is written must pass `check_archive`
/// and hold the members' bytes. `Ok(false)`: refused with an error.
fn pack_checked(a: &Archive) -> Result<bool, String> {
    let mut tar = Vec::new();
    if a.write_tar_to(&mut tar).is_err() {
        if !tar.is_empty() {
            return Err("pack failed but wrote bytes".into());
        }
        return Ok(false);
    }
    let mut zip = Vec::new();
    a.write_zip_to(&mut zip)
        .map_err(|e| format!("TAR written but ZIP refused: {e}"))?;
    for (what, bytes) in [("TAR", &tar), ("ZIP", &zip)] {
        archive::check_archive_limited(bytes, u64::MAX)
            .map_err(|e| format!("pack wrote a {what} that inspect rejects: {e}"))?;
        let read = archive::read_members_limited(bytes, u64::MAX)
            .map_err(|e| format!("pack wrote a {what} that does not read back: {e}"))?;
        for m in a.members() {
            if !read.iter().any(|(n, _)| n == m.name()) {
                return Err(format!("{what}: member {} missing", m.name()));
            }
        }
    }
    Ok(true)
}

/// `pack DIR` with a sidecar that is the case's bytes.
fn pack_dir_with_sidecar(case: &Case, corpus: &[Seed]) -> Result<bool, String> {
    let dir = std::env::temp_dir().join(format!(
        "ringtrace-fuzz-{}-{:x}",
        std::process::id(),
        case.seed
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("a.json"), corpus[2].bytes).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("b.pftrace"), corpus[0].bytes).map_err(|e| e.to_string())?;
    std::fs::write(dir.join(".a.json.ringtrace.json"), &case.bytes).map_err(|e| e.to_string())?;
    let result = Archive::from_dir(&dir).and_then(|a| a.manifest().map(|_| a));
    let _ = std::fs::remove_dir_all(&dir);
    match result {
        Ok(a) => pack_checked(&a),
        Err(ArchiveError::Io { .. }) => Err("reading the directory failed".into()),
        Err(_) => Ok(false),
    }
}

// --------------------------------------------------------------- runner

fn env_number(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    if v == "time" {
        return Some(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64,
        );
    }
    Some(
        v.parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
    )
}

/// The seed of case `i` of a run seeded `base`.
fn case_seed(base: u64, i: usize) -> u64 {
    Rng::new(base ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)).next()
}

#[test]
fn readers_survive_mutated_traces_and_archives() {
    let cases = env_number("RINGTRACE_FUZZ_CASES").map_or(DEFAULT_CASES, |n| n as usize);
    let base = env_number("RINGTRACE_FUZZ_SEED").unwrap_or(DEFAULT_SEED);
    if std::env::var_os("RINGTRACE_FUZZ_ONLY").is_none() {
        eprintln!(
            "fuzz: {} regression seeds, then {cases} cases of run seed {base} \
             (RINGTRACE_FUZZ_SEED={base} repeats them)",
            REGRESSIONS.len()
        );
    }
    let seeds: Vec<u64> = match env_number("RINGTRACE_FUZZ_ONLY") {
        Some(one) => vec![one],
        None => REGRESSIONS
            .iter()
            .map(|&(s, _)| s)
            .chain((0..cases).map(|i| case_seed(base, i)))
            .collect(),
    };
    let total = seeds.len();
    // The seed of the case running now, and how many are done.
    let current = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let worker = {
        let (current, done) = (current.clone(), done.clone());
        std::thread::spawn(move || {
            let corpus = corpus();
            let mut failures = Vec::new();
            let mut outcome = Outcome::default();
            let (mut worst_ratio, mut worst_seed) = (0.0f64, 0u64);
            let (mut slowest, mut slowest_seed) = (Duration::ZERO, 0u64);
            for seed in seeds {
                current.store(seed, Ordering::SeqCst);
                let case = generate(seed, &corpus);
                let start = reset_peak();
                let t = Instant::now();
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    run(&case, &corpus, &mut outcome)
                }));
                if t.elapsed() > slowest {
                    (slowest, slowest_seed) = (t.elapsed(), seed);
                }
                let peak = peak_since(start);
                let allowed = ALLOC_PER_INPUT_BYTE * case.bytes.len() + ALLOC_FIXED;
                let ratio = peak as f64 / (case.bytes.len().max(1)) as f64;
                if ratio > worst_ratio && case.bytes.len() > 1024 {
                    (worst_ratio, worst_seed) = (ratio, seed);
                }
                let what = match r {
                    Err(p) => Some(format!(
                        "panicked: {}",
                        p.downcast_ref::<String>()
                            .map(String::as_str)
                            .or_else(|| p.downcast_ref::<&str>().copied())
                            .unwrap_or("?")
                    )),
                    Ok(Err(e)) => Some(e),
                    Ok(Ok(())) if peak > allowed => Some(format!(
                        "allocated {peak} bytes at its peak for {} bytes of input (allowed {allowed})",
                        case.bytes.len()
                    )),
                    Ok(Ok(())) => None,
                };
                if let Some(w) = what {
                    failures.push(format!(
                        "seed {seed} ({} mutated, {} bytes): {w}",
                        case.name,
                        case.bytes.len()
                    ));
                }
                done.fetch_add(1, Ordering::SeqCst);
            }
            eprintln!(
                "fuzz: {} reader calls ended in a result, {} in an error; slowest case {slowest:?} \
                 (seed {slowest_seed}); highest peak allocation per input byte \
                 {worst_ratio:.1} (seed {worst_seed})",
                outcome.ok, outcome.errors
            );
            failures
        })
    };
    // The watchdog: a case that does not finish in time is a hang.
    let mut last = (0, Instant::now());
    while !worker.is_finished() {
        std::thread::sleep(Duration::from_millis(50));
        let n = done.load(Ordering::SeqCst);
        if n != last.0 {
            last = (n, Instant::now());
        } else if last.1.elapsed() > CASE_TIMEOUT {
            panic!(
                "fuzz: case seed {} has run for more than {CASE_TIMEOUT:?} ({n} of {total} done): a hang",
                current.load(Ordering::SeqCst)
            );
        }
    }
    let failures = worker.join().expect("the fuzz worker itself failed");
    assert!(
        failures.is_empty(),
        "{} of {total} fuzz cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

// ---------------------------------------------------------- the corpus

/// Records the corpus: real ringtrace output in both formats, archives
/// of them written by ringtrace, a manifest and a sidecar. Run it by hand
/// (`--ignored`) when the formats change; the files are checked in so that
/// a seed reproduces its case.
#[test]
#[ignore]
fn write_corpus() {
    use ringtrace::events::{Category, Id, Track};
    use ringtrace::Format;
    static NET: Category = Category::new("net");
    static QUEUE: Track = Track::new("send queue");
    fn workload() {
        std::thread::scope(|s| {
            for t in 0..2 {
                s.spawn(move || {
                    for i in 0..4u64 {
                        ringtrace::trace_scope!(
                            "io",
                            "read",
                            bytes = 4096 * i,
                            file = "a.txt",
                            ok = true,
                            ratio = 0.5
                        );
                        ringtrace::trace_instant!("checkpoint", stage = i, who = "worker é");
                        ringtrace::trace_counter!("queue_depth", (t * 10 + i) as i64);
                    }
                });
            }
        });
        let req = NET.async_begin("request", Id::local(7)).emit();
        let flow = NET.flow("packet", 42);
        {
            let _g = NET.scope("parse").begin();
            flow.start();
        }
        {
            let _s = NET.track_scope(&QUEUE, "send").begin();
        }
        req.end();
        ringtrace::trace_log!(ringtrace::LogLevel::Warn, "retrying {}", 7);
    }
    fn record(format: Format, compressed: bool, object: bool) -> Vec<u8> {
        let buf = ringtrace::MemoryBuffer::new();
        let mut b = ringtrace::builder()
            .writer(buf.clone())
            .format(format)
            .enable_categories(["*"])
            .compressed_packets(compressed);
        if object {
            b = b
                .json_other_data("run", 7)
                .json_scopes(ringtrace::JsonScopes::BeginEnd);
        }
        let guard = b.start().unwrap();
        workload();
        guard.stop().unwrap();
        buf.contents()
    }
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz/corpus");
    std::fs::create_dir_all(&dir).unwrap();
    let write = |name: &str, bytes: &[u8]| std::fs::write(dir.join(name), bytes).unwrap();
    let pf = record(Format::Perfetto, false, false);
    write("trace.pftrace", &pf);
    write("compressed.pftrace", &record(Format::Perfetto, true, false));
    let json = record(Format::Json, false, false);
    write("trace.json", &json);
    write("object.json", &record(Format::Json, false, true));
    let mut a = Archive::new();
    a.mtime(1_700_000_000);
    a.add_bytes("app.pftrace", pf.clone()).machine("phone");
    a.add_bytes("app.json", json.clone()).machine("phone");
    a.attribute("run_id", 42);
    let mut tar = Vec::new();
    a.write_tar_to(&mut tar).unwrap();
    write("archive.tar", &tar);
    let mut zip = Vec::new();
    a.write_zip_to(&mut zip).unwrap();
    write("archive.zip", &zip);
    write("archive.tar.gz", &mutate::gzip(&tar));
    write(
        "perfetto_manifest.json",
        a.manifest().unwrap().to_json().as_bytes(),
    );
    write(
        "sidecar.json",
        br#"{"ringtrace_member": 1, "member": "a.json", "role": "a", "pid": 7, "host": "box", "boot_id": "0123456789abcdef", "clock": {"boottime_ns": 1000000000, "realtime_ns": 1700000000000000000, "monotonic_ns": 999000000}}"#,
    );
}
