//! A minimal protobuf wire writer: varints, fixed64, length-delimited fields
//! and nested messages, appended to a `Vec<u8>`. Fields are written exactly as
//! asked: nothing is elided because it is zero, and repeated scalars are
//! written one tag per element (never packed), as Perfetto's readers expect.
//! [`Spare`] writes into a buffer's spare capacity instead, for packets whose
//! bound is known before they are written (the Perfetto fast path).

use crate::record::args::StrWords;
use std::mem::MaybeUninit;

pub(crate) const WT_VARINT: u32 = 0;
pub(crate) const WT_FIXED64: u32 = 1;
pub(crate) const WT_LEN: u32 = 2;

#[inline]
pub(crate) fn varint(buf: &mut Vec<u8>, v: u64) {
    if v < 0x80 {
        buf.push(v as u8);
    } else if v < 0x4000 {
        buf.extend_from_slice(&[(v as u8) | 0x80, (v >> 7) as u8]);
    } else {
        varint_long(buf, v);
    }
}

#[inline(never)]
fn varint_long(buf: &mut Vec<u8>, v: u64) {
    let mut tmp = [0u8; 10];
    let n = varint_into(&mut tmp, v);
    buf.extend_from_slice(&tmp[..n]);
}

/// Writes `v` as a varint at the start of `out` (at least 10 bytes);
/// returns its length.
#[inline]
fn varint_into(out: &mut [u8], mut v: u64) -> usize {
    let mut i = 0;
    while v >= 0x80 {
        out[i] = (v as u8) | 0x80;
        v >>= 7;
        i += 1;
    }
    out[i] = v as u8;
    i + 1
}

/// The two bytes of the varint of `v` (`0x80 <= v < 0x4000`), little
/// endian in the low 16 bits: stored with the bytes around it in one word
/// by the fast paths, which see one- and two-byte varints most.
#[inline(always)]
pub(crate) fn varint2(v: u64) -> u64 {
    debug_assert!((0x80..0x4000).contains(&v));
    (v & 0x7f | 0x80) | (v >> 7) << 8
}

#[inline]
pub(crate) fn varint_len(mut v: u64) -> usize {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

#[inline]
pub(crate) fn tag(buf: &mut Vec<u8>, field: u32, wire_type: u32) {
    varint(buf, ((field << 3) | wire_type) as u64);
}

/// Bytes of a field's tag.
#[inline]
pub(crate) fn tag_len(field: u32) -> usize {
    varint_len((field << 3) as u64)
}

/// Bytes of a varint field (`uint`).
#[inline]
pub(crate) fn uint_len(field: u32, v: u64) -> usize {
    tag_len(field) + varint_len(v)
}

/// Bytes of a length-delimited field with a body of `n` bytes.
#[inline]
pub(crate) fn len_field_len(field: u32, n: usize) -> usize {
    tag_len(field) + varint_len(n as u64) + n
}

/// The head of a length-delimited field whose body (`len` bytes) the caller
/// writes next: sized first, so nothing is moved afterwards.
#[inline]
pub(crate) fn len_head(buf: &mut Vec<u8>, field: u32, len: usize) {
    tag(buf, field, WT_LEN);
    varint(buf, len as u64);
}

/// A string field from recorded argument words (copied word by word, not
/// validated again: see `StrWords`).
#[inline]
pub(crate) fn string_words(buf: &mut Vec<u8>, field: u32, v: &StrWords<'_>) {
    len_head(buf, field, v.len());
    v.append_to(buf);
}

/// uint32/uint64/enum/bool field.
#[inline(always)]
pub(crate) fn uint(buf: &mut Vec<u8>, field: u32, v: u64) {
    if field < 16 && v < 0x80 {
        // The common case in one write: a one-byte tag, a one-byte value.
        buf.extend_from_slice(&[(field << 3) as u8, v as u8]);
    } else {
        tag(buf, field, WT_VARINT);
        varint(buf, v);
    }
}

/// int32/int64 field (two's complement, 10 bytes when negative).
#[inline]
pub(crate) fn int(buf: &mut Vec<u8>, field: u32, v: i64) {
    uint(buf, field, v as u64);
}

#[inline]
pub(crate) fn fixed64(buf: &mut Vec<u8>, field: u32, v: u64) {
    tag(buf, field, WT_FIXED64);
    buf.extend_from_slice(&v.to_le_bytes());
}

#[inline]
pub(crate) fn double(buf: &mut Vec<u8>, field: u32, v: f64) {
    fixed64(buf, field, v.to_bits());
}

#[inline]
pub(crate) fn bytes(buf: &mut Vec<u8>, field: u32, v: &[u8]) {
    tag(buf, field, WT_LEN);
    varint(buf, v.len() as u64);
    buf.extend_from_slice(v);
}

#[inline]
pub(crate) fn string(buf: &mut Vec<u8>, field: u32, v: &str) {
    bytes(buf, field, v.as_bytes());
}

/// Writes a nested message built by `f`, for messages whose size is not
/// known before they are written. One byte is reserved for the length and
/// patched afterwards; a body of 128 bytes or more is moved forward in place
/// (no allocation) to make room for a longer varint. Hot paths size their
/// messages first and use [`len_head`] instead.
#[inline]
pub(crate) fn nested<R>(buf: &mut Vec<u8>, field: u32, f: impl FnOnce(&mut Vec<u8>) -> R) -> R {
    tag(buf, field, WT_LEN);
    buf.push(0);
    let start = buf.len();
    let r = f(buf);
    patch_len(buf, start);
    r
}

/// Sets the length of the length-delimited field whose body runs from
/// `start` to the end of `buf`, and whose length was written as one byte
/// (any value) at `start - 1`. A body of 128 bytes or more is moved forward
/// in place to make room for a longer varint: the bytes are what sizing
/// first would have written.
#[inline]
pub(crate) fn patch_len(buf: &mut Vec<u8>, start: usize) {
    let len = buf.len() - start;
    if len < 0x80 {
        buf[start - 1] = len as u8;
    } else {
        patch_long_len(buf, start);
    }
}

#[cold]
fn patch_long_len(buf: &mut Vec<u8>, start: usize) {
    let len = buf.len() - start;
    let mut head = [0u8; 10];
    let n = varint_into(&mut head, len as u64);
    let end = buf.len();
    buf.resize(end + n - 1, 0);
    buf.copy_within(start..end, start + n - 1);
    buf[start - 1..start - 1 + n].copy_from_slice(&head[..n]);
}

// The writer of the Perfetto encoder's fast path (`perfetto/fast.rs`):
// packets of known bound written straight into a buffer's spare capacity.

/// Bytes written in order into a `Vec`'s spare capacity (bounds-checked);
/// the caller counts the first `n` in with `set_len` (the only `unsafe`
/// step, which stays with the caller: it alone knows the bound it
/// reserved). Fixed-size stores may write past `n` (up to 8 bytes for a
/// word, 24 for a two-word string, 8 per word for a longer one), bytes
/// that are written over next or never counted in: the caller's bound
/// leaves room for them.
pub(crate) struct Spare<'a> {
    pub(crate) buf: &'a mut [MaybeUninit<u8>],
    pub(crate) n: usize,
}

impl Spare<'_> {
    #[inline(always)]
    pub(crate) fn byte(&mut self, b: u8) {
        self.buf[self.n] = MaybeUninit::new(b);
        self.n += 1;
    }

    #[inline(always)]
    pub(crate) fn bytes(&mut self, s: &[u8]) {
        self.buf[self.n..self.n + s.len()].write_copy_of_slice(s);
        self.n += s.len();
    }

    /// A varint: up to 8 bytes built in a register and stored at once.
    #[inline(always)]
    pub(crate) fn varint(&mut self, mut v: u64) {
        let (mut x, mut k) = (0u64, 0);
        while v >= 0x80 && k < 7 {
            x |= ((v & 0x7f) | 0x80) << (8 * k);
            v >>= 7;
            k += 1;
        }
        if v < 0x80 {
            self.word(x | v << (8 * k), k + 1);
        } else {
            self.word(x, 7);
            self.n = varint_rest(self.buf, self.n, v);
        }
    }

    /// A fixed-size copy of all `N` bytes, of which the first `keep` count
    /// (the rest is written over next).
    #[inline(always)]
    pub(crate) fn fixed<const N: usize>(&mut self, bytes: &[u8; N], keep: usize) {
        self.buf[self.n..self.n + N].write_copy_of_slice(bytes);
        self.n += keep;
    }

    /// A short string field at the end of a message head: the first 6
    /// bytes of `head` (for a debug annotation: its tag, length, name, the
    /// string's tag and length), then the `n` bytes packed in `words`.
    /// Strings of up to 16 bytes (most) take two word stores, whatever
    /// their length: the window is 24 bytes; up to 32 bytes (a sentence
    /// of a message) four, in a window of 40.
    #[inline(always)]
    pub(crate) fn short_string(&mut self, head: u64, words: &[u64], n: usize) {
        let (a, b) = match *words {
            [] => (0, 0),
            [a] => (a, 0),
            [a, b] => (a, b),
            [a, b, c] => return self.four_words_string(head, [a, b, c, 0], n),
            [a, b, c, d] => return self.four_words_string(head, [a, b, c, d], n),
            _ => {
                string_run(self.buf, self.n, head, words);
                self.n += 6 + n;
                return;
            }
        };
        self.two_words_string(head, a, b, n);
    }

    /// A string of 17 to 32 bytes: `head` (as in [`Self::short_string`]),
    /// then the four words holding its `n` bytes (and whatever follows
    /// them, written over next), in one window of 40 bytes.
    #[inline(always)]
    fn four_words_string(&mut self, head: u64, words: [u64; 4], n: usize) {
        let win = &mut self.buf[self.n..self.n + 40];
        win[..8].write_copy_of_slice(&head.to_le_bytes());
        win[6..14].write_copy_of_slice(&words[0].to_le_bytes());
        win[14..22].write_copy_of_slice(&words[1].to_le_bytes());
        win[22..30].write_copy_of_slice(&words[2].to_le_bytes());
        win[30..38].write_copy_of_slice(&words[3].to_le_bytes());
        self.n += 6 + n;
    }

    /// A string of up to 16 bytes: `head` (as in
    /// [`Self::short_string`]), then the words `a` and `b` holding its `n`
    /// bytes (and whatever follows them, written over next).
    #[inline(always)]
    pub(crate) fn two_words_string(&mut self, head: u64, a: u64, b: u64, n: usize) {
        let win = &mut self.buf[self.n..self.n + 24];
        win[..8].write_copy_of_slice(&head.to_le_bytes());
        win[6..14].write_copy_of_slice(&a.to_le_bytes());
        win[14..22].write_copy_of_slice(&b.to_le_bytes());
        self.n += 6 + n;
    }

    /// Eight bytes, of which the first `keep` count (the rest is written
    /// over next): a string's words copied whole.
    #[inline(always)]
    pub(crate) fn word(&mut self, w: u64, keep: usize) {
        self.buf[self.n..self.n + 8].write_copy_of_slice(&w.to_le_bytes());
        self.n += keep;
    }

    /// A recorded string's bytes, whole words at a time.
    #[inline(always)]
    pub(crate) fn str_words(&mut self, sw: &StrWords<'_>) {
        let mut left = sw.len();
        for &word in sw.words() {
            let keep = left.min(8);
            self.word(word, keep);
            left -= keep;
        }
    }
}

// The out-of-line helpers of `Spare` take its buffer and position, not
// `&mut Spare`: a `Spare` whose address is never passed on stays in
// registers in the loops that write annotations.

/// The rest of a varint of more than 7 bytes, at `buf[n..]`; the position
/// after it.
#[cold]
fn varint_rest(buf: &mut [MaybeUninit<u8>], mut n: usize, mut v: u64) -> usize {
    while v >= 0x80 {
        buf[n] = MaybeUninit::new(v as u8 | 0x80);
        v >>= 7;
        n += 1;
    }
    buf[n] = MaybeUninit::new(v as u8);
    n + 1
}

/// A short string of more than two words at `buf[at..]`:
/// `head` (see [`Spare::short_string`]), then its words copied whole into
/// a window of 8 bytes per word past the head (one bounds check).
#[inline(never)]
fn string_run(buf: &mut [MaybeUninit<u8>], at: usize, head: u64, words: &[u64]) {
    let win = &mut buf[at..at + 8 + 8 * words.len()];
    win[..8].write_copy_of_slice(&head.to_le_bytes());
    let (chunks, _) = win[6..].as_chunks_mut::<8>();
    for (dst, &word) in chunks.iter_mut().zip(words) {
        dst.write_copy_of_slice(&word.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_example_packet() {
        // {timestamp:1000, trusted_packet_sequence_id:1, track_event{type:SLICE_BEGIN, track_uuid:42, name:"a"}}
        let mut buf = Vec::new();
        nested(&mut buf, 1, |p| {
            uint(p, 8, 1000);
            uint(p, 10, 1);
            nested(p, 11, |te| {
                uint(te, 9, 1);
                uint(te, 11, 42);
                string(te, 23, "a");
            });
        });
        assert_eq!(
            buf,
            [
                0x0a, 0x0f, 0x40, 0xe8, 0x07, 0x50, 0x01, 0x5a, 0x08, 0x48, 0x01, 0x58, 0x2a, 0xba,
                0x01, 0x01, 0x61
            ]
        );
    }

    #[test]
    fn sizes_match_what_is_written() {
        for v in [0u64, 1, 127, 128, 300, 1 << 35, u64::MAX] {
            let mut buf = Vec::new();
            uint(&mut buf, 11, v);
            assert_eq!(buf.len(), uint_len(11, v), "{v}");
            let mut buf = Vec::new();
            uint(&mut buf, 87, v);
            assert_eq!(buf.len(), uint_len(87, v), "{v}");
        }
        for n in [0usize, 1, 127, 128, 20000] {
            let mut buf = Vec::new();
            bytes(&mut buf, 12, &vec![1u8; n]);
            assert_eq!(buf.len(), len_field_len(12, n), "{n}");
            let mut sized = Vec::new();
            len_head(&mut sized, 12, n);
            sized.extend(std::iter::repeat_n(1u8, n));
            assert_eq!(sized, buf);
        }
    }

    #[test]
    fn string_words_write_the_recorded_bytes() {
        use crate::record::args::{ArgReader, ArgValue, TraceValue};
        for s in [
            "",
            "a",
            "exactly8",
            "nine char",
            "héllo, wörld, and more than 16",
        ] {
            let mut w = Vec::new();
            s.encode(&mut w);
            let ArgValue::Str(sw) = ArgReader::new(&w).next() else {
                panic!("not a string")
            };
            let mut got = Vec::new();
            string_words(&mut got, 6, &sw);
            let mut want = Vec::new();
            string(&mut want, 6, s);
            assert_eq!(got, want, "{s:?}");
        }
    }

    #[test]
    fn nested_bodies_of_every_length_class() {
        for n in [0usize, 120, 127, 128, 16383, 16384, 70000] {
            let mut buf = vec![0xffu8];
            nested(&mut buf, 1, |p| p.extend(std::iter::repeat_n(7u8, n)));
            let mut want = vec![0xffu8];
            bytes(&mut want, 1, &vec![7u8; n]);
            assert_eq!(buf, want, "{n}");
        }
    }

    #[test]
    fn long_nested_bodies_get_long_lengths() {
        let mut buf = Vec::new();
        nested(&mut buf, 1, |p| bytes(p, 2, &[7u8; 300]));
        assert_eq!(&buf[..3], &[0x0a, 0xaf, 0x02]); // 303 = 0xaf 0x02
        assert_eq!(buf.len(), 3 + 303);
    }
}
