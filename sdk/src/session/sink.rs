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
    /// Perfetto: wrap the packets of each write in `compressed_packets`.
    compress: bool,
    scratch: Vec<u8>,
    what: String,
    error: Option<std::io::Error>,
    written: u64,
    pub(crate) bytes_dropped: u64,
}

impl Sink {
    pub(crate) fn new(out: Box<dyn Write + Send>, what: String) -> Sink {
        Sink {
            out,
            compress: false,
            scratch: Vec::new(),
            what,
            error: None,
            written: 0,
            bytes_dropped: 0,
        }
    }

    /// From now on, write Perfetto packets zlib-compressed inside
    /// `TracePacket.compressed_packets` (field 50), which readers expand inline.
    pub(crate) fn compress_perfetto_packets(&mut self) {
        self.compress = true;
    }

    /// Writes and clears `buf` (whole packets when compressing).
    pub(crate) fn write(&mut self, buf: &mut Vec<u8>) {
        if buf.is_empty() {
            return;
        }
        if self.compress {
            self.scratch.clear();
            compress_packets(buf, &mut self.scratch);
            std::mem::swap(buf, &mut self.scratch);
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

/// Uncompressed bytes per `compressed_packets` packet: well under the 512 KB
/// readers accept for one compressed packet, even for incompressible data.
const COMPRESS_CHUNK: usize = 256 * 1024;

/// Rewrites a stream of framed packets (`0x0A len body`...) as framed packets
/// whose only field is `compressed_packets` (50): zlib of whole packets.
fn compress_packets(packets: &[u8], out: &mut Vec<u8>) {
    let mut start = 0;
    while start < packets.len() {
        // Extend the chunk packet by packet up to COMPRESS_CHUNK (at least one).
        let mut end = start;
        while end < packets.len() {
            let next = end + framed_len(&packets[end..]);
            if next - start > COMPRESS_CHUNK && end > start {
                break;
            }
            end = next;
        }
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        // Writing into a Vec cannot fail.
        z.write_all(&packets[start..end]).expect("write to memory");
        let blob = z.finish().expect("write to memory");
        crate::encode::protowire::nested(out, 1, |p| crate::encode::protowire::bytes(p, 50, &blob));
        start = end;
    }
}

/// Length of the framed packet at the start of `buf` (tag, varint, body);
/// the rest of the buffer if the framing is cut.
fn framed_len(buf: &[u8]) -> usize {
    let mut len = 0u64;
    let mut shift = 0;
    let mut i = 1; // after the 0x0A tag
    while i < buf.len() && shift < 64 {
        let b = buf[i];
        len |= ((b & 0x7f) as u64) << shift;
        i += 1;
        if b & 0x80 == 0 {
            return (i + len as usize).min(buf.len());
        }
        shift += 7;
    }
    buf.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;
    use std::io::Read;

    #[test]
    fn compressed_packets_expand_to_the_same_stream() {
        let mut packets = Vec::new();
        for i in 0..50_000u64 {
            crate::encode::protowire::nested(&mut packets, 1, |p| {
                crate::encode::protowire::uint(p, 8, i);
                crate::encode::protowire::uint(p, 10, 1);
            });
        }
        let mut out = Vec::new();
        compress_packets(&packets, &mut out);
        assert!(out.len() < packets.len() / 4);
        let trace = ringtrace_protos::Trace::decode(out.as_slice()).unwrap();
        assert!(
            trace.packet.len() > 1,
            "large input is split into several packets"
        );
        let mut expanded = Vec::new();
        for p in &trace.packet {
            let blob = p.compressed_packets.as_ref().unwrap();
            flate2::read::ZlibDecoder::new(blob.as_slice())
                .read_to_end(&mut expanded)
                .unwrap();
        }
        assert_eq!(expanded, packets);
    }
}
