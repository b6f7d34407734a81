//! Guides: how ringtrace behaves where a program's shape matters (memory,
//! capture windows, exit paths, system tracing, archives, CPU sampling,
//! production). Each is a page of
//! `sdk/docs/` in the package; its examples run as doc tests. This module
//! holds no items; it exists in documentation builds only.
//!
//! - [`memory`]: the budget, how rings grow, what it covers.
//! - [`capture_windows`]: files cut out of a running program
//!   ([`rotate_output`](crate::rotate_output), [`dump_to`](crate::dump_to)).
//! - [`exit_paths`]: what a trace holds when the program exits, panics, is
//!   killed, or its disk fills up.
//! - [`system_tracing`]: recording for Perfetto's `traced`, and where to get
//!   it.
//! - [`archives`]: several processes on one timeline, the `ringtrace`
//!   command, and what its counts mean.
//! - [`cpu_sampling`]: CPU stack samples beside the slices, their two
//!   stack modes, what they cost, where they are refused.
//! - [`production`]: leaving it on in production: whole requests sampled,
//!   slow ones captured, the disk bounded (in parts, or a hard limit).
//! - `otlp` (feature `otlp`): spans of kept requests sent to an
//!   OpenTelemetry collector, W3C trace context across services, the same
//!   ids in the Perfetto file.
//!
//! The `log` bridge is documented in its module, `ringtrace::log` (feature
//! `log`); `tracing` integration in [`Builder::layer`](crate::Builder::layer) and
//! [`Builder::subscriber`](crate::Builder::subscriber) (feature `tracing`, default).
//!
//! Cargo features of the crate (the crate root's "Features" says more):
//!
//! - `enable` (default): the instrumentation; off, every macro and
//!   `#[traced]` expand to nothing.
//! - `tracing` (default): `tracing` spans and events recorded by ringtrace.
//! - `log`: records of the `log` crate as log instants.
//! - `cpu-sampling`: CPU stack samples of every thread ([`cpu_sampling`]).
//! - `otlp`: OTLP export and `ringtrace::context` (the guide `otlp`).

pub mod memory {
    #![doc = include_str!("../docs/memory.md")]
}

pub mod capture_windows {
    #![doc = include_str!("../docs/capture-windows.md")]
}

pub mod exit_paths {
    #![doc = include_str!("../docs/exit-paths.md")]
}

pub mod system_tracing {
    #![doc = include_str!("../docs/system-tracing.md")]
}

pub mod archives {
    #![doc = include_str!("../docs/archives.md")]
}

pub mod cpu_sampling {
    #![doc = include_str!("../docs/cpu-sampling.md")]
}

pub mod production {
    #![doc = include_str!("../docs/production.md")]
}

#[cfg(feature = "otlp")]
pub mod otlp {
    #![doc = include_str!("../docs/otlp.md")]
}
