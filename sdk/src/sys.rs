//! Thin wrappers over the OS calls ringtrace needs: ids, names and clocks.

/// This process's id.
pub(crate) fn pid() -> i32 {
    std::process::id() as i32
}

/// The calling thread's OS id (what `ps -L`, `top -H` and Perfetto show).
#[cfg(target_os = "linux")]
pub(crate) fn tid() -> i64 {
    // SAFETY: gettid has no preconditions and cannot fail.
    unsafe { libc::gettid() as i64 }
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn tid() -> i64 {
    use std::sync::atomic::{AtomicI64, Ordering};
    static NEXT: AtomicI64 = AtomicI64::new(1);
    thread_local!(static TID: i64 = NEXT.fetch_add(1, Ordering::Relaxed));
    TID.with(|t| *t)
}

/// The process's name: the file name of its executable, else `argv[0]`.
pub(crate) fn process_name() -> String {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .or_else(|| {
            std::env::args_os()
                .next()
                .map(|a| a.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| format!("pid {}", pid()))
}

/// The command line, for the process descriptor.
pub(crate) fn cmdline() -> Vec<String> {
    std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect()
}

/// Builtin clock ids, as Perfetto numbers them.
pub(crate) const CLOCK_REALTIME: u32 = 1;
pub(crate) const CLOCK_MONOTONIC: u32 = 3;
pub(crate) const CLOCK_BOOTTIME: u32 = 6;

/// Reads a POSIX clock in nanoseconds.
#[cfg(unix)]
pub(crate) fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock ids used are
    // constants the platform defines, so the call cannot fail.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The trace time base: CLOCK_BOOTTIME where it exists, else MONOTONIC.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) fn boottime_ns() -> u64 {
    clock_ns(libc::CLOCK_BOOTTIME)
}

#[cfg(all(unix, not(any(target_os = "linux", target_os = "android"))))]
pub(crate) fn boottime_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

#[cfg(unix)]
pub(crate) fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

#[cfg(unix)]
pub(crate) fn realtime_ns() -> u64 {
    clock_ns(libc::CLOCK_REALTIME)
}

/// CPU time the calling thread has used, in nanoseconds
/// (CLOCK_THREAD_CPUTIME_ID). Not served by the vDSO on Linux: every call is
/// a system call (see `Builder::thread_time` for the measured cost).
#[cfg(unix)]
pub(crate) fn thread_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}
