//! The options environment variables set (`init_from_env`'s table),
//! applied over a builder: `init_from_env`'s, or the one
//! `TracingBuilder::init_from_env` starts from.

use super::builder::Builder;
use super::error::Error;
use crate::record::callsite::CategoryFilter;
use std::path::PathBuf;

/// `b` with the environment's configuration (`init_from_env`'s table)
/// applied over it; `None` if `RINGTRACE_OUTPUT` is unset or empty.
pub(crate) fn env_config(b: Builder) -> Result<Option<Builder>, Error> {
    let Some(out) = std::env::var_os("RINGTRACE_OUTPUT").filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    let system = out == "system"
        || std::env::var("RINGTRACE_SYSTEM")
            .is_ok_and(|v| matches!(v.trim(), "1" | "true" | "yes" | "on"));
    let mut b = b.system_tracing(system);
    if out != "system" {
        b = b.output(PathBuf::from(out));
    }
    if let Ok(cats) = std::env::var("RINGTRACE_CATEGORIES") {
        let mut filter = CategoryFilter::none();
        for p in cats.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match p.strip_prefix('-') {
                Some(off) => filter.push(off, false),
                None => filter.push(p, true),
            }
        }
        b.filter = filter;
    }
    let number = |name: &str| -> Result<Option<u64>, Error> {
        match std::env::var(name) {
            Ok(v) => v
                .trim()
                .parse()
                .map(Some)
                .map_err(|_| Error::InvalidConfig(format!("{name}={v} is not a number"))),
            Err(_) => Ok(None),
        }
    };
    if let Some(n) = number("RINGTRACE_BUFFER_BYTES")? {
        b = b.buffer_bytes(n);
    }
    if let Some(n) = number("RINGTRACE_BUFFER_BYTES_PER_THREAD")? {
        b = b.buffer_bytes_per_thread(usize::try_from(n).unwrap_or(usize::MAX));
    }
    if let Some(hz) = number("RINGTRACE_CPU_SAMPLING")? {
        b = b.cpu_sampling(u32::try_from(hz).unwrap_or(u32::MAX));
    }
    if let Ok(v) = std::env::var("RINGTRACE_OVERWRITE") {
        b = b.overwrite(matches!(v.trim(), "1" | "true" | "yes" | "on"));
    }
    if let Some(n) = number("RINGTRACE_MAX_FILE_BYTES")? {
        b = b.max_file_bytes(n);
    }
    if let Some(n) = number("RINGTRACE_MAX_FILES")? {
        b = b.max_files(n);
    }
    Ok(Some(b))
}
