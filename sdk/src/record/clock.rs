//! Timestamps. The hot path reads raw ticks: the CPU's time-stamp counter
//! where it is invariant (constant rate, runs in all sleep states), otherwise
//! CLOCK_BOOTTIME through the vDSO. The flusher converts ticks to BOOTTIME
//! nanoseconds, the trace's time base, against calibration points it takes
//! itself (a pair of TSC and BOOTTIME readings at each flush cycle).
//!
//! Set `RINGTRACE_CLOCK=boottime` to force the vDSO clock.

use std::sync::atomic::{AtomicBool, Ordering};

/// True while the hot path reads the TSC.
static USE_TSC: AtomicBool = AtomicBool::new(false);

/// Raw ticks of the current clock mode.
#[inline(always)]
pub(crate) fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        if USE_TSC.load(Ordering::Relaxed) {
            return rdtsc();
        }
    }
    crate::sys::boottime_ns()
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn rdtsc() -> u64 {
    // SAFETY: RDTSC exists on every x86-64 CPU and has no memory effects;
    // it is only reached once `invariant_tsc()` confirmed the counter is usable.
    #[allow(unused_unsafe)]
    unsafe {
        core::arch::x86_64::_rdtsc()
    }
}

/// Whether the CPU has an invariant TSC (CPUID 0x8000_0007, EDX bit 8).
#[cfg(target_arch = "x86_64")]
fn invariant_tsc() -> bool {
    use core::arch::x86_64::__cpuid;
    // SAFETY: CPUID exists on every x86-64 CPU; leaf 0x8000_0000 reports the
    // highest extended leaf, checked before leaf 0x8000_0007 is read.
    #[allow(unused_unsafe)]
    unsafe {
        __cpuid(0x8000_0000).eax >= 0x8000_0007 && (__cpuid(0x8000_0007).edx & (1 << 8)) != 0
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn invariant_tsc() -> bool {
    false
}

/// Tick-to-nanosecond conversion, owned by the flusher.
#[derive(Debug, Clone)]
pub(crate) struct Calibration {
    tsc: bool,
    /// First point of the session: (ticks, BOOTTIME ns).
    first: (u64, u64),
    /// Latest point; conversions are anchored here.
    last: (u64, u64),
    ns_per_tick: f64,
}

/// How long the initial calibration spins when the TSC is used.
const INITIAL_SPIN_NS: u64 = 2_000_000;

impl Calibration {
    /// Chooses the clock mode for a new session and calibrates it.
    pub(crate) fn start(force_boottime: bool) -> Calibration {
        let tsc = !force_boottime
            && std::env::var("RINGTRACE_CLOCK")
                .map(|v| v != "boottime")
                .unwrap_or(true)
            && invariant_tsc();
        if !tsc {
            USE_TSC.store(false, Ordering::Relaxed);
            let now = crate::sys::boottime_ns();
            return Calibration {
                tsc: false,
                first: (now, now),
                last: (now, now),
                ns_per_tick: 1.0,
            };
        }
        let first = Self::point();
        let mut last = first;
        while last.1 - first.1 < INITIAL_SPIN_NS {
            std::hint::spin_loop();
            last = Self::point();
        }
        let ns_per_tick = (last.1 - first.1) as f64 / (last.0 - first.0).max(1) as f64;
        USE_TSC.store(true, Ordering::Relaxed);
        Calibration {
            tsc: true,
            first,
            last,
            ns_per_tick,
        }
    }

    /// A simultaneous (ticks, BOOTTIME ns) reading: the tightest of a few.
    #[cfg(target_arch = "x86_64")]
    fn point() -> (u64, u64) {
        let mut best = (u64::MAX, 0, 0);
        for _ in 0..5 {
            let a = rdtsc();
            let ns = crate::sys::boottime_ns();
            let b = rdtsc();
            if b.wrapping_sub(a) < best.0 {
                best = (b.wrapping_sub(a), a + (b.wrapping_sub(a)) / 2, ns);
            }
        }
        (best.1, best.2)
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn point() -> (u64, u64) {
        let ns = crate::sys::boottime_ns();
        (ns, ns)
    }

    /// Takes a new point and refines the rate over the whole session so far
    /// (the long baseline makes the reading jitter negligible).
    pub(crate) fn refresh(&mut self) {
        if !self.tsc {
            return;
        }
        let p = Self::point();
        if p.0 > self.first.0 && p.1 > self.first.1 {
            self.ns_per_tick = (p.1 - self.first.1) as f64 / (p.0 - self.first.0) as f64;
            self.last = p;
        }
    }

    /// BOOTTIME nanoseconds of a tick reading.
    #[inline]
    pub(crate) fn to_ns(&self, ticks: u64) -> u64 {
        if !self.tsc {
            return ticks;
        }
        // i64, not i128: a tick count and a BOOTTIME reading are both far
        // below 2^63, so the difference is exact, and i64 <-> f64 are single
        // instructions where i128 <-> f64 are library calls (this runs once
        // per event in the flusher).
        let delta = ticks.wrapping_sub(self.last.0) as i64;
        // Rounded half away from zero, as `f64::round`, without its library
        // call (x86-64 has no rounding instruction before SSE4.1): the cast
        // truncates toward zero.
        let x = delta as f64 * self.ns_per_tick;
        let rounded = if x >= 0.0 { x + 0.5 } else { x - 0.5 } as i64;
        let ns = (self.last.1 as i64).saturating_add(rounded);
        ns.max(0) as u64
    }

    /// Reads the clock now, in BOOTTIME ns, the way events are stamped.
    pub(crate) fn now_ns(&self) -> u64 {
        self.to_ns(ticks())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_convert_to_boottime() {
        let mut cal = Calibration::start(false);
        std::thread::sleep(std::time::Duration::from_millis(20));
        cal.refresh();
        for _ in 0..10 {
            let before = crate::sys::boottime_ns();
            let t = cal.to_ns(ticks());
            let after = crate::sys::boottime_ns();
            // within 50 us of the real clock, even on a loaded machine
            assert!(
                t + 50_000 >= before && t <= after + 50_000,
                "{before} {t} {after}"
            );
        }
    }
}
