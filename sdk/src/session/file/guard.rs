//! The guard of the session's own file: what may still go into it.
//!
//! With one file (`max_files(1)`) the limit is hard ([`HardLimit`]): the
//! file is never cut; once it holds `max_file_bytes`, later records are
//! dropped, counted in `Stats::events_dropped_disk` and marked (an
//! events-lost instant on the process track with `reason = "disk limit"`,
//! at the drop's start and, for the rest, at the end), and the file is
//! closed as usual at stop, so it stays a complete trace. With any other
//! output the same guard, without a size, counts rather than loses the
//! records a file cannot take: its writes failed, or the disk bound had no
//! next part for it (`parts`).

#![forbid(unsafe_code)]

use crate::encode::{Batch, Context};
use crate::record::header::{header_kind, header_len};
use crate::record::layout::{KIND_FLOW, KIND_LOST};
use crate::session::file::File;

/// The `reason` of the mark where records were dropped at the hard limit.
pub(crate) const DISK_LIMIT_REASON: &str = "disk limit";

/// Records encoded at a time near the hard limit (1 KiB): what the file
/// can pass it by is this much input's encoding (an instant with two int
/// args, 32 bytes in: Perfetto about 30 bytes out, JSON about 117; so
/// about 1 KiB and 4 KiB; more for a name's first use).
const NEAR_LIMIT_WORDS: usize = 128;
/// Far from the limit a whole batch goes at once: the rest of the room is
/// over this many bytes out per byte in (JSON's largest is under 4).
const FAR: u64 = 8;

/// What may go into the session's own file (the flusher's): the hard
/// limit of `max_files(1)`, and with every other output a guard that
/// counts, rather than loses, the records that cannot be written: once the
/// file's writes fail (a full disk, a size limit), or while the disk bound
/// has no next part to go on in, records are dropped and counted
/// (`Stats::events_dropped_disk`) and marked in the next file that can
/// take a mark.
pub(crate) struct HardLimit {
    max_bytes: u64,
    /// Records dropped since the session started, and those already
    /// marked in a file.
    pub(crate) dropped: u64,
    marked: u64,
    /// The current file takes no more records (the disk bound has no next
    /// part for it), whatever its size.
    closed: bool,
    /// The current file has dropped records: nothing later goes in, so
    /// its mark is where the drop began.
    dropping: bool,
}

impl HardLimit {
    /// A limit of `max_bytes` (`u64::MAX`: only the guard).
    pub(crate) fn new(max_bytes: u64) -> HardLimit {
        HardLimit {
            max_bytes,
            dropped: 0,
            marked: 0,
            closed: false,
            dropping: false,
        }
    }

    /// Whether the file takes nothing more: it reached the limit, its
    /// writes failed, or it was closed.
    pub(crate) fn full(&self, f: &File, out: &[u8]) -> bool {
        self.closed
            || self.dropping
            || f.sink.failed()
            || f.sink.bytes_written() + out.len() as u64 >= self.max_bytes
    }

    /// The current file takes no more records until [`reopen`](Self::reopen).
    pub(crate) fn close(&mut self) {
        self.closed = true;
    }

    /// A new file is the output: it takes records again.
    pub(crate) fn reopen(&mut self) {
        self.closed = false;
        self.dropping = false;
    }

    /// Encodes `batch` into `out` while the file takes it, in small pieces
    /// near the limit; drops and counts the rest, and marks the first drop
    /// where it happens.
    pub(crate) fn batch(
        &mut self,
        f: &mut File,
        ctx: &mut Context<'_>,
        batch: &Batch<'_>,
        out: &mut Vec<u8>,
    ) {
        let mut words = batch.words;
        let mut overwritten = batch.overwritten;
        while !words.is_empty() {
            if self.full(f, out) {
                let first = !self.dropping;
                self.dropping = true;
                self.dropped += events_in(words);
                if first {
                    self.mark(f, ctx, out);
                }
                return;
            }
            let room = self.max_bytes - (f.sink.bytes_written() + out.len() as u64);
            // Far from the limit: the whole rest at once (the common case).
            let take = if (words.len() as u64) * 8 * FAR < room {
                words.len()
            } else {
                record_boundary(words, NEAR_LIMIT_WORDS)
            };
            let (now, rest) = words.split_at(take);
            let piece = Batch {
                thread: batch.thread,
                words: now,
                overwritten: std::mem::take(&mut overwritten),
            };
            f.encoder.batch(ctx, &piece, out);
            words = rest;
        }
    }

    /// Marks the records dropped and not yet marked, at the current time
    /// (not into a file whose writes fail: the next file marks them).
    pub(crate) fn mark(&mut self, f: &mut File, ctx: &mut Context<'_>, out: &mut Vec<u8>) {
        let count = self.dropped - self.marked;
        if count == 0 || f.sink.failed() {
            return;
        }
        self.marked = self.dropped;
        let now = ctx.cal.now_ns();
        f.encoder
            .note_lost_process(ctx, now, count, DISK_LIMIT_REASON, out);
    }
}

/// Events in drained `words` as `Stats` counts them: one per record, loss
/// markers and flow records (part of the slice they precede) aside.
fn events_in(words: &[u64]) -> u64 {
    let (mut pos, mut n) = (0, 0);
    while let Some(&hdr) = words.get(pos) {
        let len = header_len(hdr) as usize;
        if len < 2 {
            break;
        }
        if !matches!(header_kind(hdr), KIND_LOST | KIND_FLOW) {
            n += 1;
        }
        pos += len;
    }
    n
}

/// The length of the whole records in `words` that fit in `max` words (at
/// least one record).
fn record_boundary(words: &[u64], max: usize) -> usize {
    let mut pos = 0;
    while let Some(&hdr) = words.get(pos) {
        let len = (header_len(hdr) as usize).max(1);
        if pos > 0 && pos + len > max {
            break;
        }
        pos = (pos + len).min(words.len());
    }
    pos
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn near_the_hard_limit_records_are_counted_and_cut_whole() {
        use crate::record::header::make_header;
        use crate::record::layout::KIND_INSTANT;
        let mut w = Vec::new();
        for i in 0..100 {
            w.extend([make_header(KIND_INSTANT, 3, 1), 10, i]);
        }
        w.extend([make_header(KIND_FLOW, 3, 0), 11, 5]);
        assert_eq!(events_in(&w), 100, "a flow record is not an event");
        assert_eq!(record_boundary(&w, 128), 126, "42 whole records of 3 words");
        assert_eq!(record_boundary(&w, 1), 3, "at least one record");
        assert_eq!(record_boundary(&w[..6], 128), 6);
    }
}
