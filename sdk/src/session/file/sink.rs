//! Where trace bytes go: a file, any `io::Write`, or a memory buffer. The
//! first write error is reported once on stderr and kept for `stop()`; after
//! it the session goes on and the bytes are dropped (and counted).
//!
//! # Whole events in a file, whenever the process dies
//!
//! The flusher hands over whole events (JSON) or whole packets (Perfetto),
//! and a file sink writes each hand-over with one `write` call (`writev`
//! when padded: the hand-over's pieces and the padding between them). Linux
//! copies a write into the page cache page by page (folio by folio) and
//! stops between two pages when the process is killed, so a SIGKILL can cut
//! a write only at a multiple of the page size. The sink therefore lays its
//! bytes out so that no event of a page or less straddles a 4 KiB boundary
//! (a multiple of every page and folio size): before such an event it pads
//! to the boundary with whitespace (JSON: allowed between any two tokens) or
//! with an empty packet (Perfetto: a `TracePacket` holding only a field
//! Perfetto retired, which every reader skips; see `lay_out` for the few
//! bytes no packet fits in). Whatever a kill leaves is then whole events and padding:
//! a JSON bare array loads after appending `]`, a Perfetto file parses to its
//! last packet. An event larger than 4 KiB can still be cut inside (readers
//! of Perfetto drop a cut last packet; in JSON that takes an argument of
//! kilobytes). The padding costs about half an event per 4 KiB. Writers
//! given with [`Builder::writer`](crate::Builder::writer) get the bytes as
//! they are (their position in a file is unknown).

#![forbid(unsafe_code)]

use parking_lot::Mutex;
use std::io::{IoSlice, Write};
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

/// How a file's bytes split into events, for the layout (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Units {
    /// Chrome JSON: each event after the first starts with `,\n`.
    Json,
    /// Perfetto: framed top-level fields (`0x0A len packet`).
    Perfetto,
}

impl Units {
    /// The units of a file in `format`.
    pub(crate) fn of(format: crate::Format) -> Units {
        match format {
            crate::Format::Json => Units::Json,
            crate::Format::Perfetto => Units::Perfetto,
        }
    }
}

/// No unit of this size or less straddles a multiple of it in a file.
const PAGE: u64 = 4096;

pub(crate) struct Sink {
    out: Box<dyn Write + Send>,
    /// A file written from offset 0: lay units out (module docs).
    units: Option<Units>,
    layout: Layout,
    /// Perfetto: wrap the packets of each write in `compressed_packets`.
    compress: bool,
    scratch: Vec<u8>,
    what: String,
    error: Option<std::io::Error>,
    written: u64,
    pub(crate) bytes_dropped: u64,
    /// The file of a file sink: cut back to the last whole hand-over when a
    /// write fails part-way (a full disk, a size limit), so the file ends
    /// on an event boundary rather than inside an event.
    file: Option<std::fs::File>,
}

impl Sink {
    pub(crate) fn new(out: Box<dyn Write + Send>, what: String) -> Sink {
        Sink {
            out,
            units: None,
            layout: Layout::default(),
            compress: false,
            scratch: Vec::new(),
            what,
            error: None,
            written: 0,
            bytes_dropped: 0,
            file: None,
        }
    }

    /// A sink writing a new file (at offset 0) with one `write` per hand-over,
    /// laid out so that a kill leaves whole `units` (module docs).
    pub(crate) fn file(file: std::fs::File, what: String, units: Units) -> Sink {
        let kept = file.try_clone().ok();
        let mut sink = Sink::new(Box::new(file), what);
        sink.units = Some(units);
        sink.file = kept;
        sink
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
        if self.error.is_some() {
            self.bytes_dropped += buf.len() as u64;
            buf.clear();
            return;
        }
        if self.compress {
            self.scratch.clear();
            compress_packets(buf, &mut self.scratch);
            std::mem::swap(buf, &mut self.scratch);
        }
        self.layout.clear();
        if let Some(units) = self.units {
            lay_out(buf, self.written, units, &mut self.layout);
        }
        let len = (buf.len() + self.layout.pads.len()) as u64;
        let done = if self.layout.cuts.is_empty() {
            self.out.write_all(buf)
        } else {
            // The padding goes between the pieces of `buf` in the same
            // call: no copy of `buf`.
            let (pads, cuts) = (&self.layout.pads, &self.layout.cuts);
            let mut slices = Vec::with_capacity(2 * cuts.len() + 1);
            let (mut at, mut p) = (0, 0);
            for &(i, q) in cuts {
                slices.push(IoSlice::new(&buf[at..i]));
                slices.push(IoSlice::new(&pads[p..q]));
                (at, p) = (i, q);
            }
            slices.push(IoSlice::new(&buf[at..]));
            write_all_vectored(&mut *self.out, &mut slices)
        };
        match done {
            Ok(()) => self.written += len,
            Err(e) => {
                self.bytes_dropped += len;
                if let Some(f) = &self.file {
                    // Whatever part of `buf` got in is cut away (best effort:
                    // where even that fails, the part stays).
                    let _ = f.set_len(self.written);
                }
                self.fail(e)
            }
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

    /// A write failed: nothing more goes in.
    pub(crate) fn failed(&self) -> bool {
        self.error.is_some()
    }

    pub(crate) fn take_error(&mut self) -> Option<std::io::Error> {
        self.error.take()
    }
}

/// The padding of one hand-over: `pads[cuts[k-1].1..cuts[k].1]` goes
/// before byte `cuts[k].0` of the hand-over (positions rising).
#[derive(Default)]
struct Layout {
    pads: Vec<u8>,
    cuts: Vec<(usize, usize)>,
}

impl Layout {
    fn clear(&mut self) {
        self.pads.clear();
        self.cuts.clear();
    }

    /// Padding of `gap` bytes before `buf[at]`; the bytes padded.
    fn pad(&mut self, at: usize, gap: u64, units: Units) -> u64 {
        let n = pad(&mut self.pads, gap, units);
        self.cuts.push((at, self.pads.len()));
        n
    }
}

/// Writes all of `slices` (`write_all` for `write_vectored`), a few hundred
/// at a time at most (the kernel takes up to 1024).
fn write_all_vectored(out: &mut dyn Write, mut slices: &mut [IoSlice<'_>]) -> std::io::Result<()> {
    while !slices.is_empty() {
        let n = slices.len().min(512);
        match out.write_vectored(&slices[..n]) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(written) => IoSlice::advance_slices(&mut slices, written),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Lays out the units of `buf`, which continues a file at `offset`: the
/// padding to put between them so that no unit of at most [`PAGE`] bytes
/// straddles a multiple of [`PAGE`].
///
/// Padding is at least [`min_pad`] bytes (5 for Perfetto, 1 for JSON), so
/// a page must never end with fewer free bytes than that: the space left in
/// the page after each unit is kept at 0 or at least `min_pad`. Units that
/// could not keep that even at a page's start (`PAGE - min_pad < len <
/// PAGE`) are laid out as large ones: they may straddle, and get `min_pad`
/// bytes of padding first when they would end too close before a boundary.
///
/// The bytes between two paddings are written as they are. This runs on the
/// flusher for every byte of the trace, so it looks at as little as it can:
/// Perfetto packets are stepped over by their length prefix, and not at all
/// once the rest of `buf` ends well before the next boundary; JSON, where
/// padding of one byte always fits, is looked at only around each boundary.
///
/// `out` is empty on return when `buf` needs no padding.
fn lay_out(buf: &[u8], offset: u64, units: Units, out: &mut Layout) {
    match units {
        Units::Json => lay_out_json(buf, offset, out),
        Units::Perfetto => lay_out_packets(buf, offset, out),
    }
}

/// [`lay_out`] for framed packets: each packet's place is decided in turn.
fn lay_out_packets(buf: &[u8], offset: u64, out: &mut Layout) {
    let m = min_pad(Units::Perfetto);
    let bad_rest = |rest: u64| rest != 0 && rest < m;
    let mut pos = offset;
    let mut i = 0;
    while i < buf.len() {
        // The rest ends at least `m` bytes before the next boundary: so does
        // each of its packets (none is large), none needs padding.
        if (buf.len() - i) as u64 + m <= PAGE - pos % PAGE {
            break;
        }
        // Packets with a one-byte length that end at least `m` bytes before
        // the next boundary need no padding: step over them, looking at
        // their length byte only.
        let left = PAGE - pos % PAGE;
        if left > m {
            let (start, limit) = (i, (i + (left - m) as usize).min(buf.len()));
            // Four packets a step while they fit: their length bytes are
            // read from a window whose size covers four lengths of up to
            // 255 (no bounds check each), one test for all four, and the
            // last one's end against the limit.
            while let Some(w) = buf.get(i..i + WINDOW) {
                let w: &[u8; WINDOW] = w.try_into().expect("WINDOW bytes");
                let b0 = w[1];
                let o1 = 2 + b0 as usize;
                let b1 = w[o1 + 1];
                let o2 = o1 + 2 + b1 as usize;
                let b2 = w[o2 + 1];
                let o3 = o2 + 2 + b2 as usize;
                let b3 = w[o3 + 1];
                let o4 = o3 + 2 + b3 as usize;
                if (b0 | b1 | b2 | b3) >= 0x80 || i + o4 > limit {
                    break;
                }
                i += o4;
            }
            // One bound for both: the page's limit and the buffer's end.
            let within = &buf[..limit];
            while let Some(&body) = within.get(i + 1) {
                let end = i + 2 + body as usize;
                if body >= 0x80 || end > limit {
                    break;
                }
                i = end;
            }
            pos += (i - start) as u64;
            if i >= buf.len() {
                break;
            }
        }
        let end = i + framed_len(&buf[i..]).max(1);
        let len = (end - i) as u64;
        let left = PAGE - pos % PAGE;
        let gap = if len == PAGE || len <= PAGE - m {
            if left < PAGE && (len > left || bad_rest(left - len)) {
                left
            } else {
                0
            }
        } else if bad_rest((PAGE - (pos + len) % PAGE) % PAGE) {
            m
        } else {
            0
        };
        if gap > 0 {
            pos += out.pad(i, gap, Units::Perfetto);
        }
        pos += len;
        i = end;
    }
}

/// The bytes [`lay_out_packets`] reads to step over four packets with
/// one-byte lengths: the fourth length byte is at most 3 * 257 + 1.
const WINDOW: usize = 3 * 257 + 2;

/// [`lay_out`] for JSON events (each after the first starts with `,\n`).
/// With padding of one byte possible, the rule reduces to: the event that
/// crosses a boundary is moved to it when it is at most [`PAGE`] long. So
/// only the event around each boundary is looked for.
fn lay_out_json(buf: &[u8], offset: u64, out: &mut Layout) {
    let starts_unit = |j: usize| buf[j] == b',' && j + 1 < buf.len() && buf[j + 1] == b'\n';
    let mut pos = offset; // file position of buf[i]; buf[i] starts a unit
    let mut i = 0;
    loop {
        let left = (PAGE - pos % PAGE) as usize;
        let k = i + left; // where the next boundary falls in `buf`
        if k >= buf.len() {
            break; // the rest ends at or before it
        }
        // The unit holding byte `k`: [s, e).
        let s = (i + 1..=k).rev().find(|&j| starts_unit(j)).unwrap_or(i);
        if s == k {
            // A unit starts right at the boundary: nothing crosses it.
            pos += left as u64;
            i = k;
            continue;
        }
        let e = (k + 1..buf.len())
            .find(|&j| starts_unit(j))
            .unwrap_or(buf.len());
        if e - s <= PAGE as usize {
            out.pad(s, (left - (s - i)) as u64, Units::Json);
            pos += left as u64;
            i = s;
        } else {
            pos += (e - i) as u64; // a large unit crosses it, unpadded
            i = e;
        }
    }
}

/// The smallest padding of `units`.
fn min_pad(units: Units) -> u64 {
    match units {
        Units::Json => 1,
        Units::Perfetto => 5,
    }
}

/// Length of the JSON unit at the start of `buf`: up to the next event
/// separator `,\n` (our events are one line each: strings escape newlines).
#[cfg(test)]
fn json_unit_len(buf: &[u8]) -> usize {
    let mut j = 1;
    while j + 1 < buf.len() {
        if buf[j] == b',' && buf[j + 1] == b'\n' {
            return j;
        }
        j += 1;
    }
    buf.len()
}

/// The field number of Perfetto padding: a `TracePacket` field that
/// Perfetto reserved when it removed it (`reserved 55`), so it can never
/// mean anything; readers skip it as an unknown field, and the packet,
/// holding nothing else, is empty to them.
const PAD_FIELD: u64 = 55;

/// Appends `gap` bytes of padding (at least [`min_pad`]; less is not
/// written); returns the bytes appended.
fn pad(out: &mut Vec<u8>, gap: u64, units: Units) -> u64 {
    if gap < min_pad(units) {
        return 0; // `lay_out` never asks
    }
    match units {
        Units::Json => {
            out.resize(out.len() + gap as usize - 1, b' ');
            out.push(b'\n');
        }
        Units::Perfetto => {
            // One packet `0a L [tag(55) L2 zeros]`: 5 + L2 bytes while both
            // lengths take one byte (up to 129), 7 + L2 with two-byte lengths
            // (from 135); 130 to 134 are split in two.
            // Written whole (no scratch buffer: a pad comes every few pages).
            let mut packet = |total: u64| {
                let body = if total <= 129 { total - 5 } else { total - 7 };
                let field = crate::encode::protowire::varint_len(body) as u64 + body;
                out.push(0x0a);
                crate::encode::protowire::varint(out, 2 + field);
                crate::encode::protowire::varint(out, PAD_FIELD << 3 | 2);
                crate::encode::protowire::varint(out, body);
                out.resize(out.len() + body as usize, 0);
            };
            match gap {
                5..=129 => packet(gap),
                130..=134 => {
                    packet(5);
                    packet(gap - 5);
                }
                _ => packet(gap),
            }
        }
    }
    gap
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
mod tests;
