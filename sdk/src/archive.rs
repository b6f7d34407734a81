//! Multi-file traces: the [`ringtrace-archive`](ringtrace_archive) crate
//! (TAR or ZIP archives with a `perfetto_manifest` relating machines and
//! clocks), re-exported, plus [`member_builder`], which starts a session
//! writing one process's member of a shared directory.
//!
//! See [`Archive`] for building an archive and the crate's docs for the
//! clock rules.
//!
//! ```
//! # let dir = std::env::temp_dir().join(format!("ringtrace-doc-member-{}", std::process::id()));
//! let trace = ringtrace::archive::member_builder(&dir, "worker", ringtrace::Format::Perfetto)?.start()?;
//! ringtrace::trace_instant!("ready");
//! drop(trace);
//! let archive = ringtrace::archive::Archive::from_dir(&dir)?;
//! assert_eq!(archive.members().len(), 1);
//! # std::fs::remove_dir_all(&dir)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![forbid(unsafe_code)]

#[doc(inline)]
pub use ringtrace_archive::*;

use crate::session::{Builder, Format};
use std::path::{Path, PathBuf};

fn extension(format: Format) -> &'static str {
    match format {
        Format::Perfetto => "pftrace",
        Format::Json => "json",
    }
}

/// Where process `role` (this process, by its pid) writes its trace in the
/// shared directory `dir`: `<dir>/<role>.<pid>.pftrace` (or `.json`). `role`
/// is reduced to ASCII letters, digits, `-` and `_`, at most 64 bytes, so the
/// name is a valid archive member (see [`MemberFile`]).
///
/// # Examples
///
/// ```
/// let p = ringtrace::archive::member_path("traces", "client", ringtrace::Format::Json);
/// assert_eq!(p, std::path::Path::new("traces").join(format!("client.{}.json", std::process::id())));
/// ```
pub fn member_path(dir: impl AsRef<Path>, role: &str, format: Format) -> PathBuf {
    MemberFile::new(dir, role, extension(format)).path
}

/// Prepares this process's part of a multi-process archive: creates `dir`,
/// writes the sidecar of [`member_path`]`(dir, role, format)` (host, boot id,
/// a clock sample; [`MemberFile::prepare`]) and returns a session
/// [`Builder`] writing there in `format`, with `role` as the process name.
/// Configure it further and `start()` it; [`Archive::from_dir`] collects the
/// directory.
///
/// # Examples
///
/// ```
/// # let dir = std::env::temp_dir().join(format!("ringtrace-doc-member-builder-{}", std::process::id()));
/// let trace = ringtrace::archive::member_builder(&dir, "worker", ringtrace::Format::Json)?.start()?;
/// ringtrace::trace_instant!("ready");
/// drop(trace);
/// assert!(ringtrace::archive::member_path(&dir, "worker", ringtrace::Format::Json).exists());
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
///
/// [`ArchiveError::Io`] if the directory or the sidecar cannot be written.
pub fn member_builder(
    dir: impl AsRef<Path>,
    role: &str,
    format: Format,
) -> Result<Builder, ArchiveError> {
    let file = MemberFile::new(dir, role, extension(format));
    file.prepare()?;
    Ok(crate::builder()
        .output(&file.path)
        .format(format)
        .process_name(file.role))
}
