//! The machine's clocks, for [`ClockSample::now`](crate::ClockSample::now):
//! the three POSIX clocks an archive relates. The same readings as the SDK's
//! trace clock (`ringtrace::trace_clock_ns` is BOOTTIME), kept here so this
//! crate depends on nothing of the SDK.

#![allow(unsafe_code)]

/// Reads a POSIX clock in nanoseconds.
fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec that outlives the call; the
    // clock ids passed are constants the platform defines, so the call only
    // writes `ts` and cannot fail.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CLOCK_BOOTTIME where it exists, else MONOTONIC (as the SDK's trace clock).
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) fn boottime_ns() -> u64 {
    clock_ns(libc::CLOCK_BOOTTIME)
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub(crate) fn boottime_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

pub(crate) fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

pub(crate) fn realtime_ns() -> u64 {
    clock_ns(libc::CLOCK_REALTIME)
}
