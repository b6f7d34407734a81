//! The work of the `ringtrace` command on bytes, apart from its argument
//! parsing (`main.rs`): decoding traces ([`model`]), summarising traces and
//! archives ([`inspect`]), converting ([`convert`]). Everything here reads
//! untrusted files, so each entry point ends in a result or a clear error,
//! and decompression is bounded by an unpack limit
//! ([`unpack_limit`], `RINGTRACE_MAX_UNPACKED`); `tests/fuzz/` holds them
//! to that.

#![forbid(unsafe_code)]

/// `print!` to standard output, ending the program quietly when the reader
/// has gone (a closed pipe) instead of panicking as `print!` does.
#[macro_export]
macro_rules! out {
    ($($t:tt)*) => { $crate::write_out(format_args!($($t)*), false) };
}

/// `println!`, as [`out!`].
#[macro_export]
macro_rules! outln {
    ($($t:tt)*) => { $crate::write_out(format_args!($($t)*), true) };
}

pub mod convert;
pub mod inspect;
pub mod model;
pub mod samples;

use ringtrace_archive::{self as archive, MemberKind};
use serde_json::Value;
use std::io::{Read, Write};

/// The most bytes one command decompresses: `RINGTRACE_MAX_UNPACKED` (bytes)
/// when set, else [`archive::DEFAULT_UNPACK_LIMIT`] (1 GiB).
pub fn unpack_limit() -> u64 {
    std::env::var("RINGTRACE_MAX_UNPACKED")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(archive::DEFAULT_UNPACK_LIMIT)
}

/// A trace's bytes, gunzipped when they are a gzip stream (`.pftrace.gz`),
/// decompressing at most `limit` bytes.
///
/// # Errors
///
/// A damaged gzip stream, or one holding more than `limit` bytes.
pub fn trace_bytes(name: &str, bytes: Vec<u8>, limit: u64) -> Result<Vec<u8>, String> {
    if !bytes.starts_with(&[0x1f, 0x8b]) {
        return Ok(bytes);
    }
    let mut out = Vec::new();
    flate2::read::MultiGzDecoder::new(bytes.as_slice())
        .take(limit.saturating_add(1))
        .read_to_end(&mut out)
        .map_err(|e| format!("{name}: bad gzip stream: {e}"))?;
    if out.len() as u64 > limit {
        return Err(format!(
            "{name}: the gzip stream decompresses to more than {limit} bytes \
             (raise RINGTRACE_MAX_UNPACKED to read it)"
        ));
    }
    Ok(out)
}

/// What `ringtrace inspect` found in a file.
pub enum Inspected {
    /// An archive: its summary, and whether it passed every check (members
    /// that are traces, the manifest rules).
    Archive {
        /// As `inspect --json` prints it.
        summary: Value,
        /// Every check passed.
        valid: bool,
    },
    /// A single trace's summary.
    Trace(Value),
}

/// Inspects the bytes of a file named `name`: an archive (ZIP, TAR, gzipped
/// TAR) or a trace (Perfetto or JSON, gzipped or not).
///
/// # Errors
///
/// Input that is neither, or that cannot be read (see [`trace_bytes`]).
pub fn inspect_bytes(name: &str, bytes: Vec<u8>, limit: u64) -> Result<Inspected, String> {
    let is_archive = match archive::sniff(&bytes) {
        MemberKind::Zip | MemberKind::Tar => true,
        MemberKind::Gzip { .. } => archive::read_members_limited(&bytes, limit).is_ok(),
        _ => false,
    };
    if is_archive {
        let (summary, valid) = inspect::archive_summary(name, &bytes, limit)?;
        return Ok(Inspected::Archive { summary, valid });
    }
    let bytes = trace_bytes(name, bytes, limit)?;
    let mut summary = {
        let m = model::TraceModel::decode(&bytes).map_err(|e| format!("{name}: {e}"))?;
        inspect::trace_summary(&m)
    };
    // CPU stack samples (`samples`), once the model is freed.
    summary["cpu_samples"] = samples::summary(&samples::decode(&bytes, limit));
    Ok(Inspected::Trace(summary))
}

/// What `ringtrace flamegraph` draws.
#[derive(Debug)]
pub struct Flame {
    /// The folded stacks, one root frame per thread (see [`samples::folded`]).
    pub stacks: Vec<String>,
    /// How many samples they hold.
    pub samples: usize,
    /// The program sampled, as the trace names its process; `None` when it
    /// does not.
    pub program: Option<String>,
}

/// The CPU samples of the trace `bytes` (of the file `name`) as folded
/// stacks: only those of the threads `threads` names, if any (a tid, a
/// name, or `prefix*`; see [`samples::ThreadNames::matches`]), and of
/// those only the ones taken inside a slice named `under`, if given.
///
/// # Errors
///
/// Input that is not a trace ringtrace reads (see [`trace_bytes`]);
/// `threads` matching none of the sampled threads (the message lists them).
pub fn flame(
    name: &str,
    bytes: Vec<u8>,
    under: Option<&str>,
    threads: &[String],
    limit: u64,
) -> Result<Flame, String> {
    let bytes = trace_bytes(name, bytes, limit)?;
    let all = samples::decode(&bytes, limit);
    // The model names threads and processes; only `under` needs it whole,
    // without it a trace the model cannot read still draws, unnamed.
    let model = match under {
        Some(_) => Some(model::TraceModel::decode(&bytes).map_err(|e| format!("{name}: {e}"))?),
        None => model::TraceModel::decode(&bytes).ok(),
    };
    let names = samples::ThreadNames::of(&all.samples, model.as_ref());
    let program = samples::program_name(&all.samples, model.as_ref());
    let mut all = all;
    if !threads.is_empty() {
        let total = all.samples.len();
        all.samples
            .retain(|s| threads.iter().any(|t| names.matches(s, t)));
        if all.samples.is_empty() && total > 0 {
            return Err(format!(
                "{name}: no sampled thread matches --thread {}; the sampled threads are: {}",
                threads.join(","),
                names.list()
            ));
        }
    }
    let kept = samples::under(all, model.as_ref(), under);
    Ok(Flame {
        stacks: samples::folded(&kept, &names),
        samples: kept.len(),
        program,
    })
}

/// Converts the trace `bytes` (of the file `name`) to `to`: the output's
/// bytes and the decoded trace (for its warnings and event count).
///
/// # Errors
///
/// Input that is not a trace ringtrace reads (see [`trace_bytes`],
/// [`model::TraceModel::decode`]).
pub fn convert_bytes(
    name: &str,
    bytes: Vec<u8>,
    to: ringtrace::Format,
    limit: u64,
) -> Result<(Vec<u8>, model::TraceModel), String> {
    let bytes = trace_bytes(name, bytes, limit)?;
    let m = model::TraceModel::decode(&bytes).map_err(|e| format!("{name}: {e}"))?;
    let data = match to {
        ringtrace::Format::Json => convert::to_json(&m).into_bytes(),
        ringtrace::Format::Perfetto => convert::to_perfetto(&m),
    };
    Ok((data, m))
}

/// Writes to standard output; a closed pipe ends the program with status 0,
/// any other write error with status 1.
#[doc(hidden)]
pub fn write_out(args: std::fmt::Arguments<'_>, newline: bool) {
    let mut stdout = std::io::stdout().lock();
    let written = stdout.write_fmt(args).and_then(|()| {
        if newline {
            stdout.write_all(b"\n")
        } else {
            Ok(())
        }
    });
    if let Err(e) = written {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("ringtrace: cannot write the output: {e}");
        std::process::exit(1);
    }
}
