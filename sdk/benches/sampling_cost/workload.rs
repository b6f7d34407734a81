//! The uninstrumented hot loop that CPU sampling's measurements sample: the
//! cost recording here and the suite's `benches/cpu_sampling.rs` (which
//! includes this file with `#[path]`: the `ringtrace` crate cannot reach the
//! suite's `benches/common`, outside its package), so both measure the same
//! code.

use std::hint::black_box;

#[inline(never)]
pub fn mix(block: &[u64], state: u64) -> u64 {
    block.iter().fold(state, |h, &w| {
        (h ^ w).wrapping_mul(0x100_0000_01b3).rotate_left(13)
    })
}

#[inline(never)]
pub fn checksum(data: &[u64]) -> u64 {
    data.chunks(64)
        .fold(0xcbf2_9ce4_8422_2325, |h, b| mix(black_box(b), h))
}
