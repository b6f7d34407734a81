//! Where trace bytes go: a file, any `io::Write`, or a memory buffer. The
//! first write error is reported once on stderr and kept for `stop()`; after
//! it the session goes on and the bytes are dropped (and counted).

use parking_lot::Mutex;
use std::io::Write;
use std::sync::Arc;

/// A growable in-memory trace, readable while or after the session writes it.
///
/// # Examples
///
/// ```
/// let buf = ringtrace::MemoryBuffer::new();
/// let guard = ringtrace::builder().writer(buf.clone()).start().unwrap();
/// ringtrace::trace_instant!("hello");
/// guard.stop().unwrap();
/// assert_eq!(buf.contents()[0], 0x0a); // a Perfetto trace starts with a packet
/// ```
#[derive(Clone, Default, Debug)]
pub struct MemoryBuffer(Arc<Mutex<Vec<u8>>>);

impl MemoryBuffer {
    /// An empty buffer. Clones share the same bytes: give one clone to
    /// [`Builder::writer`](crate::Builder::writer) and read another.
    pub fn new() -> Self {
        Self::default()
    }

    /// A copy of the bytes written so far.
    pub fn contents(&self) -> Vec<u8> {
        self.0.lock().clone()
    }
}

impl Write for MemoryBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

pub(crate) struct Sink {
    out: Box<dyn Write + Send>,
    what: String,
    error: Option<std::io::Error>,
    written: u64,
    pub(crate) bytes_dropped: u64,
}

impl Sink {
    pub(crate) fn new(out: Box<dyn Write + Send>, what: String) -> Sink {
        Sink {
            out,
            what,
            error: None,
            written: 0,
            bytes_dropped: 0,
        }
    }

    /// Writes and clears `buf`.
    pub(crate) fn write(&mut self, buf: &mut Vec<u8>) {
        if buf.is_empty() {
            return;
        }
        if self.error.is_none() {
            match self.out.write_all(buf) {
                Ok(()) => self.written += buf.len() as u64,
                Err(e) => self.fail(e),
            }
        } else {
            self.bytes_dropped += buf.len() as u64;
        }
        buf.clear();
    }

    pub(crate) fn flush(&mut self) {
        if self.error.is_none() {
            if let Err(e) = self.out.flush() {
                self.fail(e);
            }
        }
    }

    fn fail(&mut self, e: std::io::Error) {
        eprintln!("ringtrace: writing the trace to {} failed: {e}; tracing goes on, its output is dropped", self.what);
        self.error = Some(e);
    }

    pub(crate) fn bytes_written(&self) -> u64 {
        self.written
    }

    pub(crate) fn take_error(&mut self) -> Option<std::io::Error> {
        self.error.take()
    }
}
