//! Clock names of the manifest and the clock relations ringtrace reads from
//! its own files, from which it computes `offset_ns`.
//!
//! # How an offset is computed
//!
//! Every machine has its clocks; on one machine they are related by a
//! simultaneous reading of them all (a [`ClockSample`]: what a ringtrace
//! Perfetto file records in its global `ClockSnapshot` on sequence 1, and what
//! [`ClockSample::now`] reads). Across machines, ringtrace relates clocks
//! through REALTIME, which NTP keeps in step: at a common instant every
//! machine's REALTIME reads the same value `R`, so a clock `K` of machine `m`
//! reads `R - e(m, K)` with `e(m, K) = REALTIME - K` taken from a sample of `m`.
//!
//! The manifest's `offset_ns` is defined by "at a common instant, the source
//! clock reads `T` when the reference clock reads `T + offset_ns`", hence
//!
//! ```text
//! offset_ns = K_ref - K_src = e(src machine, K_src) - e(ref machine, K_ref)
//! ```
//!
//! which is exactly 0 when both are the same clock of the same machine, with
//! no sample needed (a ringtrace JSON file pinned to a ringtrace Perfetto file
//! of the same machine by BOOTTIME).

use super::ArchiveError;
use std::fmt;
use std::str::FromStr;

/// A clock the manifest can name (`builtin_clock.proto`'s POSIX clocks).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Clock {
    /// CLOCK_REALTIME: wall-clock time.
    Realtime,
    /// CLOCK_REALTIME_COARSE.
    RealtimeCoarse,
    /// CLOCK_MONOTONIC: does not count suspend.
    Monotonic,
    /// CLOCK_MONOTONIC_COARSE.
    MonotonicCoarse,
    /// CLOCK_MONOTONIC_RAW.
    MonotonicRaw,
    /// CLOCK_BOOTTIME: counts suspend; ringtrace's trace clock.
    Boottime,
}

impl Clock {
    /// Every clock, in builtin-id order.
    pub const ALL: [Clock; 6] = [
        Clock::Realtime,
        Clock::RealtimeCoarse,
        Clock::Monotonic,
        Clock::MonotonicCoarse,
        Clock::MonotonicRaw,
        Clock::Boottime,
    ];

    /// The manifest's name of the clock (`"BOOTTIME"`).
    pub fn name(self) -> &'static str {
        match self {
            Clock::Realtime => "REALTIME",
            Clock::RealtimeCoarse => "REALTIME_COARSE",
            Clock::Monotonic => "MONOTONIC",
            Clock::MonotonicCoarse => "MONOTONIC_COARSE",
            Clock::MonotonicRaw => "MONOTONIC_RAW",
            Clock::Boottime => "BOOTTIME",
        }
    }

    /// The clock's id in Perfetto's `BuiltinClock` (BOOTTIME = 6).
    pub fn builtin_id(self) -> u32 {
        match self {
            Clock::Realtime => 1,
            Clock::RealtimeCoarse => 2,
            Clock::Monotonic => 3,
            Clock::MonotonicCoarse => 4,
            Clock::MonotonicRaw => 5,
            Clock::Boottime => 6,
        }
    }

    /// The clock with builtin id `id`, if it is one the manifest can name.
    pub fn from_builtin_id(id: u32) -> Option<Clock> {
        Clock::ALL.into_iter().find(|c| c.builtin_id() == id)
    }
}

impl fmt::Display for Clock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Clock {
    type Err = ArchiveError;

    /// Parses a manifest clock name, exactly as written (`"BOOTTIME"`).
    ///
    /// # Errors
    ///
    /// [`ArchiveError::UnknownClock`] for any other string.
    fn from_str(s: &str) -> Result<Clock, ArchiveError> {
        Clock::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| ArchiveError::UnknownClock(s.to_owned()))
    }
}

/// One simultaneous reading of a machine's clocks, in nanoseconds.
///
/// A ringtrace Perfetto file carries these (its global clock snapshots); a
/// JSON file does not, so give it one with
/// [`Member::clock_sample`](super::Member::clock_sample) or
/// [`Member::recorded_here`](super::Member::recorded_here) when its machine
/// has no Perfetto file in the archive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockSample {
    /// CLOCK_BOOTTIME.
    pub boottime_ns: u64,
    /// CLOCK_REALTIME.
    pub realtime_ns: u64,
    /// CLOCK_MONOTONIC, when it was read.
    pub monotonic_ns: Option<u64>,
}

impl ClockSample {
    /// Reads this machine's clocks now. REALTIME − BOOTTIME only changes when
    /// the wall clock is stepped, so a sample taken at packing time describes
    /// a trace recorded earlier on the same machine since its last boot.
    ///
    /// # Examples
    ///
    /// ```
    /// let s = ringtrace_archive::ClockSample::now();
    /// assert!(s.realtime_ns > s.boottime_ns);
    /// ```
    pub fn now() -> ClockSample {
        let mono = crate::sys::monotonic_ns();
        let boot = crate::sys::boottime_ns();
        let real = crate::sys::realtime_ns();
        ClockSample {
            boottime_ns: boot,
            realtime_ns: real,
            monotonic_ns: Some(mono),
        }
    }

    /// `REALTIME - clock` on this machine, in ns: what a reading of `clock`
    /// must be raised by to give the wall-clock time. `None` for clocks the
    /// sample did not read.
    pub fn realtime_minus(&self, clock: Clock) -> Option<i128> {
        let real = self.realtime_ns as i128;
        match clock {
            Clock::Realtime => Some(0),
            Clock::Boottime => Some(real - self.boottime_ns as i128),
            Clock::Monotonic => self.monotonic_ns.map(|m| real - m as i128),
            _ => None,
        }
    }
}

/// `offset_ns` relating `src_clock` of the machine sampled by `src` to
/// `ref_clock` of the machine sampled by `reference` (see the module docs).
pub(crate) fn offset_between(
    src: &ClockSample,
    src_clock: Clock,
    reference: &ClockSample,
    ref_clock: Clock,
) -> Result<i64, String> {
    let e_src = src
        .realtime_minus(src_clock)
        .ok_or_else(|| format!("no {src_clock} reading is known"))?;
    let e_ref = reference
        .realtime_minus(ref_clock)
        .ok_or_else(|| format!("no {ref_clock} reading is known"))?;
    let off = e_src - e_ref;
    i64::try_from(off)
        .ok()
        .filter(|&o| o != i64::MIN)
        .ok_or_else(|| format!("the offset {off} ns is out of range"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for c in Clock::ALL {
            assert_eq!(c.name().parse::<Clock>().unwrap(), c);
            assert_eq!(Clock::from_builtin_id(c.builtin_id()), Some(c));
        }
        assert!(matches!(
            "boottime".parse::<Clock>(),
            Err(ArchiveError::UnknownClock(_))
        ));
    }

    #[test]
    fn offset_follows_the_manifest_sign_convention() {
        // Machine b booted 5 s before machine a: its BOOTTIME reads 5 s more.
        let a = ClockSample {
            boottime_ns: 100_000_000_000,
            realtime_ns: 1_700_000_000_000_000_000,
            monotonic_ns: None,
        };
        let b = ClockSample {
            boottime_ns: 105_000_000_000,
            ..a
        };
        // b reads T when a reads T - 5 s: offset -5 s.
        assert_eq!(
            offset_between(&b, Clock::Boottime, &a, Clock::Boottime).unwrap(),
            -5_000_000_000
        );
        assert_eq!(
            offset_between(&a, Clock::Boottime, &a, Clock::Boottime).unwrap(),
            0
        );
        // a's BOOTTIME against its own REALTIME.
        assert_eq!(
            offset_between(&a, Clock::Boottime, &a, Clock::Realtime).unwrap(),
            1_700_000_000_000_000_000 - 100_000_000_000
        );
        assert!(offset_between(&a, Clock::Monotonic, &a, Clock::Boottime).is_err());
    }
}
