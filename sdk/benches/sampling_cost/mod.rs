//! The sampler's work per sample, in instructions: real samples of this
//! process are recorded once (natively: the kernel samples the thread's own
//! registers), then replayed through the sampler's parsing, unwinding and
//! interning and the Perfetto encoder under callgrind, which counts what a
//! sample costs independently of the machine's load. Both are ignored
//! tests (a measurement, not a check) of the crate's unit tests, module
//! `sampling::cost` (this file is included there: it replays the sampler's
//! private stages, which no bench target can reach; a folder with a
//! `mod.rs`, so that Cargo does not take it for a bench target):
//!
//! ```text
//! cargo test --release -p ringtrace --features cpu-sampling --lib --no-run
//! cp target/release/deps/ringtrace-HASH rec     # the recording names its binary
//! RINGTRACE_COST_FILE=samples.bin RINGTRACE_COST_STACKS=copied \
//!   ./rec sampling::cost::record --ignored
//! RINGTRACE_COST_FILE=samples.bin RINGTRACE_COST_STACKS=copied \
//!   valgrind --tool=callgrind --toggle-collect='*cost*replay_warm*' \
//!   target/release/deps/ringtrace-HASH sampling::cost::replay --ignored --test-threads=1
//! ```
//!
//! The replay reads the recorded mappings' files (the recording binary must
//! still be where it ran, hence the copy) and replays them at the recorded
//! addresses, so the replaying process's own layout does not matter: one
//! recording serves builds before and after a change. With
//! `RINGTRACE_COST_STACKS=fp`, a recording of copied stacks is replayed as
//! the call chains the kernel would have walked in a frame-pointer build
//! (the frames unwound from each copy), so both modes replay the same
//! stacks. The replay prints the samples it ran; callgrind's total over
//! `replay_warm` divided by them is the cost of a sample whose frames are
//! already known (the steady state of a program's hot code). Samples are
//! unwound by the sampler's own path, which reads what a walk needs past
//! the copy from the sampled thread's stack: the recorded thread's stack
//! (a hot loop's) fits its copy, so the replay reads nothing there; a
//! recording of deeper stacks would read the replaying process's memory
//! instead, and is no measure of that path.

mod workload;

use super::engine::StackWork;
use super::perf::{parse_sample, PerfEvent, PerfRecord, StackSource};
use super::tables::{SampleView, Tables};
use crate::encode::perfetto::{PerfettoEncoder, PerfettoOptions};
use crate::encode::{Context, Encoder, ProcessInfo, Sites};
use crate::record::clock::Calibration;
use std::hint::black_box;
use std::time::Duration;
use workload::checksum;

fn source() -> StackSource {
    match std::env::var("RINGTRACE_COST_STACKS").as_deref() {
        Ok("copied") => StackSource::Copy(super::engine::STACK_COPY),
        _ => StackSource::Callchain,
    }
}

fn file() -> std::path::PathBuf {
    std::env::var_os("RINGTRACE_COST_FILE")
        .expect("RINGTRACE_COST_FILE names the recording")
        .into()
}

/// The kernel's layout of a sample's body, rebuilt from what was parsed.
fn body(s: &super::perf::RawSample<'_>, source: StackSource) -> Vec<u8> {
    let mut b = Vec::new();
    let mut w = |v: u64| b.extend_from_slice(&v.to_ne_bytes());
    w(((s.tid as u64) << 32) | s.tid as u32 as u64);
    w(s.time_ns);
    w(s.cpu as u64);
    w(1);
    match source {
        StackSource::Callchain => {
            let pcs: Vec<u64> = s.chain.pcs().collect();
            w(pcs.len() as u64 + 1);
            w((-512i64) as u64); // PERF_CONTEXT_USER
            pcs.iter().for_each(|&p| w(p));
        }
        StackSource::Copy(n) => {
            let [ip, sp, bp] = s.regs.unwrap_or_default();
            w(2); // PERF_SAMPLE_REGS_ABI_64
            w(bp);
            w(sp);
            w(ip);
            w(n as u64);
            let mut stack = s.stack.to_vec();
            stack.resize(n as usize, 0);
            b.extend_from_slice(&stack);
            b.extend_from_slice(&(s.stack.len() as u64).to_ne_bytes());
        }
    }
    b
}

#[test]
#[ignore = "a measurement: records samples for `replay`"]
fn record() {
    let source = source();
    let tid = crate::sys::tid() as i32;
    let mut ev = PerfEvent::open(tid, 1000, source, 256).expect("perf_event_open");
    let data: Vec<u64> = (0..1 << 14).collect();
    let mut bodies: Vec<Vec<u8>> = Vec::new();
    let t0 = std::time::Instant::now();
    let mut sum = 0u64;
    while t0.elapsed() < Duration::from_millis(1500) {
        for _ in 0..16 {
            sum = sum.wrapping_add(checksum(black_box(&data)));
        }
        ev.drain(|r| {
            if let PerfRecord::Sample(s) = r {
                bodies.push(body(&s, source));
            }
        });
    }
    black_box(sum);
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let mut out = Vec::new();
    out.extend_from_slice(&(maps.len() as u64).to_ne_bytes());
    out.extend_from_slice(maps.as_bytes());
    for b in &bodies {
        out.extend_from_slice(&(b.len() as u64).to_ne_bytes());
        out.extend_from_slice(b);
    }
    std::fs::write(file(), out).unwrap();
    eprintln!("recorded {} samples", bodies.len());
}

/// One pass over every recorded sample: parse, unwind or read the chain,
/// intern, encode.
#[inline(never)]
fn replay_pass(
    work: &mut StackWork,
    tables: &mut Tables,
    bodies: &[&[u8]],
    source: StackSource,
    enc: &mut PerfettoEncoder,
    ctx: &mut Context<'_>,
    out: &mut Vec<u8>,
) -> u64 {
    let mut samples = Vec::with_capacity(bodies.len());
    let mut truncated = 0;
    for b in bodies {
        let s = parse_sample(b, source).expect("a recorded sample parses");
        let (callstack, whole) = work.intern(tables, s.tid, s.chain, s.regs, s.stack);
        truncated += !whole as u64;
        samples.push(super::tables::Sample {
            ts_ns: s.time_ns,
            tid: s.tid,
            cpu: s.cpu,
            callstack,
            truncated: !whole,
        });
    }
    let view = SampleView {
        tables,
        samples: &samples,
        lost: 0,
    };
    enc.samples(ctx, &view, out);
    truncated
}

/// Warm: every frame and stack is known already.
#[inline(never)]
fn replay_warm(
    work: &mut StackWork,
    tables: &mut Tables,
    bodies: &[&[u8]],
    source: StackSource,
    enc: &mut PerfettoEncoder,
    ctx: &mut Context<'_>,
    out: &mut Vec<u8>,
) -> u64 {
    replay_pass(work, tables, bodies, source, enc, ctx, out)
}

#[test]
#[ignore = "a measurement: replays what `record` wrote (under callgrind)"]
fn replay() {
    let source = source();
    let raw = std::fs::read(file()).unwrap();
    let n = u64::from_ne_bytes(raw[..8].try_into().unwrap()) as usize;
    let maps = std::str::from_utf8(&raw[8..8 + n]).unwrap();
    let mut at = 8 + n;
    let mut bodies: Vec<&[u8]> = Vec::new();
    while at < raw.len() {
        let len = u64::from_ne_bytes(raw[at..at + 8].try_into().unwrap()) as usize;
        bodies.push(&raw[at + 8..at + 8 + len]);
        at += 8 + len;
    }
    let mut work = StackWork::new();
    work.modules.scan_text(maps);
    let copied = bodies
        .first()
        .is_some_and(|b| parse_sample(b, StackSource::Copy(0)).is_some_and(|s| s.regs.is_some()));
    let chains: Vec<Vec<u8>>;
    if source == StackSource::Callchain && copied {
        let mut unwinder = StackWork::new();
        unwinder.modules.scan_text(maps);
        chains = bodies
            .iter()
            .map(|b| {
                let s = parse_sample(b, StackSource::Copy(0)).unwrap();
                let mut pcs = Vec::new();
                unwinder.unwind_pcs(s.regs.unwrap(), s.stack, &mut pcs);
                let mut c = Vec::new();
                let mut w = |v: u64| c.extend_from_slice(&v.to_ne_bytes());
                w(((s.tid as u64) << 32) | s.tid as u32 as u64);
                w(s.time_ns);
                w(s.cpu as u64);
                w(1);
                w(pcs.len() as u64 + 1);
                w((-512i64) as u64); // PERF_CONTEXT_USER
                pcs.iter().for_each(|&p| w(p));
                c
            })
            .collect();
        bodies = chains.iter().map(|c| c.as_slice()).collect();
    }
    let mut tables = Tables::default();
    let cal = Calibration::start(false);
    let process = ProcessInfo::current(Some("cost".into()));
    let mut sites = Sites::default();
    let mut ctx = Context {
        cal: &cal,
        process: &process,
        sites: &mut sites,
    };
    let mut enc = PerfettoEncoder::new(PerfettoOptions {
        source_locations: false,
        omit_needs_flag: false,
    });
    let mut out = Vec::new();
    let cold = replay_pass(
        &mut work,
        &mut tables,
        &bodies,
        source,
        &mut enc,
        &mut ctx,
        &mut out,
    );
    let cold_bytes = out.len();
    out.clear();
    let warm = replay_warm(
        &mut work,
        &mut tables,
        &bodies,
        source,
        &mut enc,
        &mut ctx,
        &mut out,
    );
    eprintln!(
        "replayed {} samples ({:?}): {} frames, {} stacks; truncated {cold}/{warm}; \
         {:.1} bytes per warm sample (first pass {cold_bytes} bytes)",
        bodies.len(),
        source,
        tables.frames.len(),
        tables.callstacks.len(),
        out.len() as f64 / bodies.len() as f64,
    );
}
