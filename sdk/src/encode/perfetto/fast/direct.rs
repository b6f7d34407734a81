//! Debug annotations written straight into a packet's spare capacity: the
//! fast path's begin with arguments, for scalars and strings under names
//! already interned (anything else takes the general writer, `annotation`,
//! whose bytes these match: tests in `fast/tests.rs`). The caller reserves
//! the bound these constants give before it writes.

use super::super::fields::{
    DA_BOOL, DA_DOUBLE, DA_INT, DA_NAME_IID, DA_POINTER, DA_STRING, DA_UINT, TE_DEBUG_ANNOTATIONS,
};
use super::super::Seq;
use crate::encode::protowire::{len_field_len, uint_len, varint2, Spare};
use crate::record::args::{
    ArgReader, ArgValue, T_ARRAY, T_BOOL, T_DICT, T_DOUBLE, T_INT, T_POINTER, T_STR, T_UINT,
};
use crate::record::callsite::Callsite;

/// Most bytes of one annotation besides its value's words: tag, length
/// (5), name iid (tag and 5), the value's tag. A value takes at most 8
/// bytes per word it was recorded in: a scalar (two words) at most 10, a
/// bool (one) 1, a string (one word, then its bytes) 5 and its bytes; a
/// null (no word when the record ends early) none.
pub(super) const ANN_MAX_HEAD: usize = 13;

/// Bytes a fixed-size store may write past what an annotation's share of
/// the bound covers: a short string's 24-byte window (its share is at
/// least 13 + 8, plus the 8 the bound keeps for any word store). A string
/// of 17 to 32 bytes writes a 40-byte window, within its share (at least
/// 13 + 8 for its tag word + 24 for its three or four words).
pub(super) const SLACK: usize = 16;

/// The annotations of `cs`'s arguments written into `w`, as `annotation`
/// writes them, if every name is interned and every value is a scalar, a
/// string or absent; false (and `w` to be discarded) otherwise. The caller
/// has checked that `cs` has names and that `args` has no more words than
/// the bound counts (64 per name, `begin_with_args`).
///
/// One pass over the value words: each value's tag word is read once and
/// dispatched once ([`short_annotation`]); what that does not take (a name
/// iid past 127, a string of 124 bytes or more, words cut short) is
/// written by [`long_annotation`], out of line.
#[inline]
pub(super) fn direct_annotations(
    seq: &Seq,
    cs: &Callsite,
    ann: u32,
    args: &[u64],
    w: &mut Spare<'_>,
) -> bool {
    let names = cs.arg_names.len();
    debug_assert!(names > 0 && args.len() <= names * 64);
    let Some(start) = (ann as usize).checked_sub(1) else {
        return false;
    };
    let Some(iids) = seq.site_ann_iids.get(start..start + names) else {
        return false;
    };
    // A `Spare` of this loop's own, whose address is never passed on (the
    // out-of-line writer gets another): its position stays in a register.
    let mut s = Spare {
        buf: &mut *w.buf,
        n: w.n,
    };
    let mut p = 0;
    for &iid in iids {
        // iid 0: not interned (the general path interns it).
        if iid.wrapping_sub(1) < 0x7f {
            if let Some(next) = short_annotation(&mut s, iid as u64, args, p) {
                p = next;
                continue;
            }
        }
        let mut c = Spare {
            buf: &mut *s.buf,
            n: s.n,
        };
        let next = long_annotation(&mut c, iid, args, p);
        s.n = c.n;
        match next {
            Some(next) => p = next,
            None => return false,
        }
    }
    w.n = s.n;
    true
}

/// One annotation of any scalar or string value, its name iid any, read
/// from `args[p..]` as [`ArgReader`] reads it; the position after it, or
/// none for a container or a name not interned.
#[cold]
#[inline(never)]
fn long_annotation(w: &mut Spare<'_>, iid: u32, args: &[u64], p: usize) -> Option<usize> {
    if iid == 0 {
        return None;
    }
    // Past the end every word reads as zero: the same from any position
    // there.
    let p = p.min(args.len());
    let mut r = ArgReader::new(&args[p..]);
    let value = r.next();
    let iid = iid as u64;
    let name_len = uint_len(DA_NAME_IID, iid);
    w.byte(((TE_DEBUG_ANNOTATIONS << 3) | 2) as u8);
    // Length, name, value: each as `annotation` sizes and writes it.
    macro_rules! head {
        ($body:expr) => {{
            w.varint(($body) as u64);
            w.byte((DA_NAME_IID << 3) as u8);
            w.varint(iid);
        }};
    }
    match value {
        ArgValue::Int(v) => {
            head!(name_len + uint_len(DA_INT, v as u64));
            w.byte((DA_INT << 3) as u8);
            w.varint(v as u64);
        }
        ArgValue::Uint(v) => {
            head!(name_len + uint_len(DA_UINT, v));
            w.byte((DA_UINT << 3) as u8);
            w.varint(v);
        }
        ArgValue::Bool(v) => {
            head!(name_len + 2);
            w.bytes(&[(DA_BOOL << 3) as u8, v as u8]);
        }
        ArgValue::Double(v) => {
            head!(name_len + 9);
            w.byte(((DA_DOUBLE << 3) | 1) as u8);
            w.word(v.to_bits(), 8);
        }
        ArgValue::Str(sw) => {
            let n = sw.len();
            head!(name_len + len_field_len(DA_STRING, n));
            w.byte(((DA_STRING << 3) | 2) as u8);
            w.varint(n as u64);
            w.str_words(&sw);
        }
        ArgValue::Pointer(v) => {
            head!(name_len + uint_len(DA_POINTER, v));
            w.byte((DA_POINTER << 3) as u8);
            w.varint(v);
        }
        ArgValue::Null => head!(name_len),
        ArgValue::Dict(_) | ArgValue::Array(_) => return None,
    }
    Some(p + r.pos())
}

/// The commonest annotations, whose name iid (`1..0x80`) and length take
/// one byte each, read from the value words at `args[p..]` (as
/// [`ArgReader`] reads them) and written with their head (tag, length,
/// name) and a short value's tag and byte built in one word: the position
/// after the value, or none if it is not one of them (a string of 124
/// bytes or more, a container, value words cut short).
#[inline(always)]
fn short_annotation(w: &mut Spare<'_>, iid: u64, args: &[u64], p: usize) -> Option<usize> {
    // tag, length, DA_NAME_IID tag, iid: the length goes in byte 1.
    let head =
        ((TE_DEBUG_ANNOTATIONS << 3) | 2) as u64 | ((DA_NAME_IID << 3) as u64) << 16 | iid << 24;
    #[inline(always)]
    fn scalar(w: &mut Spare<'_>, head: u64, field: u32, v: u64) {
        if v < 0x80 {
            w.word(head | 4 << 8 | ((field << 3) as u64) << 32 | v << 40, 6);
        } else if v < 0x4000 {
            // Body: name (2), tag, the two bytes of the varint.
            w.word(
                head | 5 << 8 | ((field << 3) as u64) << 32 | varint2(v) << 40,
                7,
            );
        } else {
            let body = 2 + uint_len(field, v) as u64;
            w.word(head | body << 8 | ((field << 3) as u64) << 32, 5);
            w.varint(v);
        }
    }
    let (t, tail) = match args.get(p..) {
        Some([t, tail @ ..]) => (*t, tail),
        _ => {
            // The record ended early: absent (null) values.
            w.word(head | 2 << 8, 4);
            return Some(p);
        }
    };
    // The commonest value first: a string of up to 16 bytes (two words).
    // (Tag 6 and length <= 16 in one compare: the tag's byte rotated to the
    // top is zero only for a string, which keeps this test apart from the
    // dispatch on the tag below.)
    if (t ^ T_STR).rotate_right(8) <= 16 {
        let n = t >> 8;
        // Its words, and past them bytes after its end (written over next).
        let (a, b, nw) = match (n, tail) {
            (0, _) => (0, 0, 0),
            (1..=8, [a, ..]) => (*a, 0, 1),
            (9..=16, [a, b, ..]) => (*a, *b, 2),
            _ => return None, // cut short
        };
        // Body: name (2), tag, one-byte length, the bytes.
        const STR_HEAD: u64 = 4 << 8 | (((DA_STRING << 3) | 2) as u64) << 32;
        const PER_BYTE: u64 = 1 << 8 | 1 << 40;
        w.two_words_string(head + STR_HEAD + n * PER_BYTE, a, b, n as usize);
        return Some(p + 1 + nw);
    }
    match t & 0xff {
        T_STR => {
            let n = (t >> 8) as usize;
            if n >= 0x80 - 4 {
                return None;
            }
            let words = args.get(p + 1..p + 1 + n.div_ceil(8))?;
            // Body: name (2), tag, one-byte length, the bytes.
            let n = n as u64;
            w.short_string(
                head | (4 + n) << 8 | (((DA_STRING << 3) | 2) as u64) << 32 | n << 40,
                words,
                n as usize,
            );
            Some(p + 1 + words.len())
        }
        T_INT => {
            scalar(w, head, DA_INT, *args.get(p + 1)?);
            Some(p + 2)
        }
        T_UINT => {
            scalar(w, head, DA_UINT, *args.get(p + 1)?);
            Some(p + 2)
        }
        T_POINTER => {
            scalar(w, head, DA_POINTER, *args.get(p + 1)?);
            Some(p + 2)
        }
        T_BOOL => {
            scalar(w, head, DA_BOOL, (t >> 8) & 1);
            Some(p + 1)
        }
        T_DOUBLE => {
            let v = *args.get(p + 1)?;
            w.word(head | 11 << 8 | (((DA_DOUBLE << 3) | 1) as u64) << 32, 5);
            w.word(v, 8);
            Some(p + 2)
        }
        T_DICT | T_ARRAY => None,
        // Null, or a tag this reader does not know: a null value.
        _ => {
            w.word(head | 2 << 8, 4);
            Some(p + 1)
        }
    }
}
