//! What can go wrong starting or stopping a session.

#![forbid(unsafe_code)]

use std::fmt;
use std::path::PathBuf;

/// What can go wrong starting or stopping a session.
///
/// Returned by [`Builder::start`](crate::Builder::start), [`TraceGuard::stop`](crate::TraceGuard::stop) and
/// [`init_from_env`](crate::init_from_env). It implements [`std::error::Error`]; [`Error::Io`]
/// has the underlying I/O error as its [`source`](std::error::Error::source).
///
/// # Examples
///
/// ```
/// use ringtrace::Error;
/// // No output configured:
/// assert!(matches!(ringtrace::builder().start(), Err(Error::NoOutput)));
/// // An extension that names no format:
/// let path = std::env::temp_dir().join("ringtrace-doc-error.txt");
/// assert!(matches!(ringtrace::builder().output(&path).start(), Err(Error::UnknownFormat(_))));
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The output could not be created or written.
    Io {
        /// The trace file, or `None` when the output is a writer (or the
        /// failure was installing the signal handlers of
        /// [`Builder::finish_on_signals`](crate::Builder::finish_on_signals)).
        path: Option<PathBuf>,
        /// The I/O error (the first one, when several writes failed).
        source: std::io::Error,
    },
    /// The session stopped, but writing its own file failed at some point
    /// (a full disk, a size limit, a closed pipe): the file holds what was
    /// written before the failure, cut at a whole event; what came after is
    /// counted in [`Stats::events_dropped_disk`](crate::Stats::events_dropped_disk).
    Incomplete {
        /// The trace file, or `None` when the output is a writer.
        path: Option<PathBuf>,
        /// The first I/O error.
        source: std::io::Error,
        /// The session's totals, as [`TraceGuard::stop`](crate::TraceGuard::stop)
        /// returns them when nothing fails.
        stats: Box<crate::Stats>,
    },
    /// A session is already recording; stop it first.
    AlreadyStarted,
    /// The output's file extension names no format ringtrace writes; use
    /// `.pftrace`, `.perfetto-trace`, `.pb` or `.json`, or call `format`.
    UnknownFormat(PathBuf),
    /// No output was configured.
    NoOutput,
    /// A setting is out of range or malformed (the message says which).
    InvalidConfig(String),
    /// The flusher thread could not be started or died.
    Flusher(String),
    /// No session is recording ([`rotate_output`](crate::rotate_output),
    /// [`dump_to`](crate::dump_to)).
    NotRecording,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { path: Some(p), source } => write!(f, "cannot write trace file {}: {source}", p.display()),
            Error::Io { path: None, source } => write!(f, "cannot write the trace: {source}"),
            Error::Incomplete { path: Some(p), source, .. } => write!(f, "the trace file {} is incomplete: writing it failed: {source}", p.display()),
            Error::Incomplete { path: None, source, .. } => write!(f, "the trace is incomplete: writing it failed: {source}"),
            Error::AlreadyStarted => write!(f, "a ringtrace session is already recording"),
            Error::UnknownFormat(p) => write!(
                f,
                "cannot tell the trace format from {}: use .pftrace, .perfetto-trace, .pb or .json, or set .format()",
                p.display()
            ),
            Error::NoOutput => write!(f, "no output configured: call .output(path) or .writer(w)"),
            Error::InvalidConfig(m) => write!(f, "invalid ringtrace configuration: {m}"),
            Error::Flusher(m) => write!(f, "ringtrace flusher: {m}"),
            Error::NotRecording => write!(f, "no ringtrace session is recording"),
        }
    }
}

impl Error {
    /// The session's totals, when the session stopped despite the error
    /// ([`Error::Incomplete`]).
    pub fn stats(&self) -> Option<&crate::Stats> {
        match self {
            Error::Incomplete { stats, .. } => Some(stats),
            _ => None,
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } | Error::Incomplete { source, .. } => Some(source),
            _ => None,
        }
    }
}
