//! Timestamps. The hot path reads raw ticks: the CPU's time-stamp counter
//! where it is invariant (constant rate, runs in all sleep states), otherwise
//! CLOCK_BOOTTIME through the vDSO. The flusher converts ticks to BOOTTIME
//! nanoseconds, the trace's time base, against calibration points it takes
//! itself (a pair of TSC and BOOTTIME readings at each flush cycle).
//!
//! Set `RINGTRACE_CLOCK=boottime` (any case) to force the vDSO clock.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// True while the hot path reads the TSC.
static USE_TSC: AtomicBool = AtomicBool::new(false);
/// The TSC's rate the last session's start measured, in ticks per
/// nanosecond (an `f64`'s bits; 0: none measured yet), for
/// [`ticks_in`].
static TICKS_PER_NS: AtomicU64 = AtomicU64::new(0);

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

/// `d` in ticks of the current clock mode, from the rate the session's
/// calibration measured at its start (no measurement of its own): what a
/// threshold compared with tick differences on the recording path (a slow
/// span's) is set to. Without the TSC, ticks are nanoseconds.
pub(crate) fn ticks_in(d: Duration) -> u64 {
    let ns = d.as_nanos().min(u64::MAX as u128) as u64;
    let rate = f64::from_bits(TICKS_PER_NS.load(Ordering::Relaxed));
    if !USE_TSC.load(Ordering::Relaxed) || rate <= 0.0 || !rate.is_finite() {
        return ns;
    }
    // Saturates at u64::MAX (a float-to-int cast clamps).
    (ns as f64 * rate) as u64
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

/// Whether `RINGTRACE_CLOCK` asks for `boottime` (trimmed, any case).
/// `init_from_env` rejects any other value set; a session started by the
/// builder says once on stderr that it keeps the default clock.
fn boottime_asked() -> bool {
    let Some(v) = std::env::var_os("RINGTRACE_CLOCK") else {
        return false;
    };
    let v = v.to_string_lossy();
    let v = v.trim();
    if v.eq_ignore_ascii_case("boottime") {
        return true;
    }
    if !v.is_empty() {
        static SAID: std::sync::Once = std::sync::Once::new();
        SAID.call_once(|| {
            eprintln!(
                "ringtrace: RINGTRACE_CLOCK={} is not a clock ringtrace knows (expected \
                 boottime); using the default clock",
                v.chars().take(64).collect::<String>().escape_debug()
            )
        });
    }
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
    /// The rate, ns per tick, in fixed point: `int + frac / 2^64` (1 and 0
    /// without the TSC: `to_ns` relies on `int` not being 0). Integer
    /// arithmetic in `to_ns`, which runs once per event in the flusher: the
    /// high half of one 64x64 multiply (and one more while the rate is 1 ns
    /// per tick or more) against int/float conversions.
    int: u64,
    frac: u64,
}

/// `ns_per_tick` as `(int, frac)`, `int + frac / 2^64`: the f64's value
/// exactly (its 53 bits of mantissa), for a rate below 2^64 ns per tick.
fn fixed_point(ns_per_tick: f64) -> (u64, u64) {
    let int = ns_per_tick.max(0.0).floor();
    // Casts saturate: a rate past u64 (never met) is clamped.
    (
        int as u64,
        ((ns_per_tick.max(0.0) - int) * 2f64.powi(64)) as u64,
    )
}

/// How long the initial calibration spins when the TSC is used.
const INITIAL_SPIN_NS: u64 = 2_000_000;

impl Calibration {
    /// Chooses the clock mode for a new session and calibrates it.
    pub(crate) fn start(force_boottime: bool) -> Calibration {
        let tsc = !force_boottime && !boottime_asked() && invariant_tsc();
        if !tsc {
            USE_TSC.store(false, Ordering::Relaxed);
            let now = crate::sys::boottime_ns();
            return Calibration {
                tsc: false,
                first: (now, now),
                last: (now, now),
                int: 1,
                frac: 0,
            };
        }
        let first = Self::point();
        let mut last = first;
        while last.1 - first.1 < INITIAL_SPIN_NS {
            std::hint::spin_loop();
            last = Self::point();
        }
        let ns_per_tick = (last.1 - first.1) as f64 / (last.0 - first.0).max(1) as f64;
        TICKS_PER_NS.store((1.0 / ns_per_tick).to_bits(), Ordering::Relaxed);
        USE_TSC.store(true, Ordering::Relaxed);
        let (int, frac) = fixed_point(ns_per_tick);
        Calibration {
            tsc: true,
            first,
            last,
            int,
            frac,
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
            let ns_per_tick = (p.1 - self.first.1) as f64 / (p.0 - self.first.0) as f64;
            (self.int, self.frac) = fixed_point(ns_per_tick);
            self.last = p;
        }
    }

    /// BOOTTIME nanoseconds of a tick reading. Always inlined: the
    /// flusher converts every record's reading, the encoders' loops keep
    /// the calibration in registers.
    #[inline(always)]
    pub(crate) fn to_ns(&self, ticks: u64) -> u64 {
        // The usual rate, converted per event by the flusher: under a
        // nanosecond per tick (a TSC above 1 GHz). The same arithmetic as
        // below, with one branch on the side of the anchor. Ticks that are
        // BOOTTIME ns already have `int` 1: the one test sends them out of
        // line too.
        if self.int == 0 {
            let (anchor, anchor_ns) = self.last;
            let part = |d: u64| ((d as u128 * self.frac as u128 + (1 << 63)) >> 64) as u64;
            return if ticks >= anchor {
                anchor_ns.saturating_add(part(ticks - anchor))
            } else {
                anchor_ns.saturating_sub(part(anchor - ticks))
            };
        }
        self.to_ns_any(ticks)
    }

    /// [`Self::to_ns`] at any rate.
    #[inline(never)]
    fn to_ns_any(&self, ticks: u64) -> u64 {
        if !self.tsc {
            return ticks;
        }
        // |ticks - anchor| * rate, rounded half away from zero, then
        // added to or taken from the anchor's ns (clamped at 0 and u64::MAX).
        let (anchor, anchor_ns) = self.last;
        let (d, before) = match ticks.checked_sub(anchor) {
            Some(d) => (d, false),
            None => (anchor - ticks, true),
        };
        // The fraction's product rounded half up: its high half after
        // adding 2^63 (below 2^64 * 2^64: no overflow).
        let part = ((d as u128 * self.frac as u128 + (1 << 63)) >> 64) as u64;
        let scaled = if self.int == 0 {
            part
        } else {
            d.saturating_mul(self.int).saturating_add(part)
        };
        if before {
            anchor_ns.saturating_sub(scaled)
        } else {
            anchor_ns.saturating_add(scaled)
        }
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

    /// A duration put in ticks from the start's calibration converts back
    /// to itself (within 1%), with no measurement of its own.
    #[test]
    fn durations_in_ticks_follow_the_calibration() {
        let cal = Calibration::start(false);
        let t0 = ticks();
        for ms in [1, 20, 1000] {
            let d = std::time::Duration::from_millis(ms);
            let ns = cal.to_ns(t0 + ticks_in(d)) - cal.to_ns(t0);
            let want = d.as_nanos() as u64;
            assert!(ns.abs_diff(want) <= want / 100, "{ms} ms: {ns} ns");
        }
    }

    /// Without the TSC, ticks are BOOTTIME ns and come out as they are,
    /// on both sides of the anchor and at the ends of the range (the check
    /// is off the usual rate's path: `to_ns_any`).
    #[test]
    fn boottime_ticks_are_ns() {
        let now = crate::sys::boottime_ns();
        let cal = Calibration {
            tsc: false,
            first: (now, now),
            last: (now, now),
            int: 1,
            frac: 0,
        };
        for t in [0, 1, now - 1, now, now + 1, now + (1 << 40), u64::MAX] {
            assert_eq!(cal.to_ns(t), t);
        }
    }

    /// A TSC calibration anchored at `anchor` (ticks, ns) with the rate
    /// `int + frac / 2^64` ns per tick.
    fn tsc_at(anchor: (u64, u64), int: u64, frac: u64) -> Calibration {
        Calibration {
            tsc: true,
            first: anchor,
            last: anchor,
            int,
            frac,
        }
    }

    /// The fixed-point conversion against the exact product of the f64
    /// rate (its mantissa and exponent, in i128, truncated), on both sides
    /// of the anchor and far from it.
    #[test]
    fn fixed_point_conversion_is_within_a_nanosecond() {
        for rate in [0.25, 0.3333333333, 0.4166, 1.0, 1.7, 3.9, 1e-3] {
            let (int, frac) = fixed_point(rate);
            let anchor = (1u64 << 40, 5_000_000_000_000u64);
            let cal = tsc_at(anchor, int, frac);
            // rate = m * 2^e exactly.
            let bits = rate.to_bits();
            let e = ((bits >> 52) & 0x7ff) as i32 - 1075;
            let m = ((bits & ((1 << 52) - 1)) | (1 << 52)) as i128;
            for d in [0u64, 1, 2, 3, 1000, 123_456_789, 3 << 30, 1 << 39] {
                let exact = if e < 0 {
                    (d as i128 * m) >> -e
                } else {
                    (d as i128 * m) << e
                };
                for (ticks, want) in [
                    (anchor.0 + d, anchor.1 as i128 + exact),
                    (anchor.0 - d, anchor.1 as i128 - exact),
                ] {
                    let got = cal.to_ns(ticks) as i128;
                    assert!(
                        (got - want).abs() <= 1,
                        "rate {rate} d {d}: {got} vs {want}"
                    );
                }
            }
        }
        // Clamped at 0 and u64::MAX.
        let (int, frac) = fixed_point(1.0);
        assert_eq!((int, frac), (1, 0));
        let at = |ns| tsc_at((1 << 40, ns), int, frac);
        assert_eq!(at(10).to_ns(0), 0);
        assert_eq!(at(10).to_ns((1 << 40) + 5), 15);
        assert_eq!(at(u64::MAX - 5).to_ns((1 << 40) + 9), u64::MAX);
        assert_eq!(at(u64::MAX - 5).to_ns(1 << 39), u64::MAX - 5 - (1 << 39));
    }

    /// `to_ns` against the conversion it stands for (the rounded product
    /// added to or taken from the anchor, clamped; in i128, no shortcut):
    /// the same ns for every reading, on both sides of the anchor, near
    /// 2^63 and at the ends of the range, at rates below and above a
    /// nanosecond per tick.
    #[test]
    fn conversion_matches_the_clamped_reference() {
        let reference = |cal: &Calibration, t: u64| -> u64 {
            let (a, a_ns) = cal.last;
            let d = (t as i128 - a as i128).unsigned_abs();
            let scaled = d * cal.int as u128 + ((d * cal.frac as u128 + (1 << 63)) >> 64);
            let ns = if t >= a {
                a_ns as i128 + scaled as i128
            } else {
                a_ns as i128 - scaled as i128
            };
            ns.clamp(0, u64::MAX as i128) as u64
        };
        let half = 1u64 << 63;
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for rate in [0.25, 0.3333333333, 0.4166, 0.999_999_9, 1.0, 1.7] {
            let (int, frac) = fixed_point(rate);
            for anchor in [
                (1u64 << 40, 5_000_000_000_000u64),
                (0, 0),
                (half - 1, half - 1),
                (half, 7),
                (7, half),
                (u64::MAX, u64::MAX),
            ] {
                let cal = tsc_at(anchor, int, frac);
                let a = anchor.0;
                let mut readings = vec![0, 1, half - 1, half, half + 1, u64::MAX];
                for d in [0u64, 1, 2, 1000, 1 << 32, half - 1, half, half + 1] {
                    readings.push(a.wrapping_add(d));
                    readings.push(a.wrapping_sub(d));
                }
                for _ in 0..2000 {
                    let r = next();
                    readings.push(a.wrapping_add(r >> (r % 64)));
                    readings.push(a.wrapping_sub(r >> (r % 64)));
                }
                for &t in &readings {
                    let want = reference(&cal, t);
                    assert_eq!(cal.to_ns(t), want, "rate {rate} anchor {anchor:?} t {t}");
                }
            }
        }
    }
}
