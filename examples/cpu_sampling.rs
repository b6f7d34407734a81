//! CPU stack samples beside the slices: the scope `checksum` is traced, the
//! functions it calls are not; the samples taken inside it show where its
//! time goes.
//!
//! ```text
//! cargo run --release --example cpu_sampling -- /tmp/cpu.pftrace [copied|fp]
//! ringtrace flamegraph /tmp/cpu.pftrace --under checksum -o flame.svg
//! ```
//!
//! Open the trace in ui.perfetto.dev: the thread's track has its slices and,
//! below, a "callstacks" track; select a range for its flame graph.

use ringtrace::CpuStacks;
use std::hint::black_box;

/// Not instrumented: the hot path a trace alone would not show.
#[inline(never)]
fn mix_block(block: &[u64], state: u64) -> u64 {
    block.iter().fold(state, |h, &w| {
        (h ^ w).wrapping_mul(0x100_0000_01b3).rotate_left(13)
    })
}

/// Not instrumented either: calls the hot function for every block.
#[inline(never)]
fn checksum_blocks(data: &[u64]) -> u64 {
    data.chunks(64)
        .fold(0xcbf2_9ce4_8422_2325, |h, b| mix_block(black_box(b), h))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args.next().unwrap_or_else(|| {
        std::env::temp_dir()
            .join("cpu.pftrace")
            .display()
            .to_string()
    });
    let stacks = match args.next().as_deref() {
        Some("copied") => CpuStacks::CopiedStacks,
        Some("fp") => CpuStacks::FramePointers,
        _ => CpuStacks::Auto,
    };
    let millis: u64 = args.next().and_then(|m| m.parse().ok()).unwrap_or(300);
    let trace = ringtrace::builder()
        .output(&path)
        .cpu_sampling(1000)
        .cpu_sampling_stacks(stacks)
        .start()?;
    let data: Vec<u64> = (0..1 << 16).collect();
    let started = std::time::Instant::now();
    let mut sum = 0;
    while started.elapsed().as_millis() < millis as u128 {
        ringtrace::trace_scope!("checksum");
        for _ in 0..20 {
            sum ^= checksum_blocks(black_box(&data));
        }
    }
    let stats = trace.stop()?;
    println!(
        "checksum {sum:x}: {} CPU samples ({} lost, {} truncated stacks) of {} threads, in {path}",
        stats.cpu_samples,
        stats.cpu_samples_lost,
        stats.cpu_stacks_truncated,
        stats.cpu_threads_sampled
    );
    Ok(())
}
