//! Debug annotations: a call site's arguments as `DebugAnnotation`s of a
//! track event, names interned by (call site, argument index). Scalars and
//! strings are sized first and written once; dicts and arrays are nested
//! messages. The fast path (`fast`) writes the same bytes for scalars and
//! strings without this module's scratch buffers.

use super::fields::{
    DA_ARRAY_VALUES, DA_BOOL, DA_DICT_ENTRIES, DA_DOUBLE, DA_INT, DA_NAME, DA_NAME_IID, DA_POINTER,
    DA_STRING, DA_UINT, TE_DEBUG_ANNOTATIONS,
};
use super::intern::intern_annotation_name;
use super::Seq;
use crate::encode::protowire::{
    double, int, len_field_len, len_head, nested, string, string_words, uint, uint_len,
};
use crate::record::args::{ArgReader, ArgValue};
use crate::record::callsite::Callsite;

/// Where a call site's argument-name iids start in `seq.site_ann_iids`
/// (its recorded arguments', then its constant arguments'), made on its
/// first use.
fn site_ann_start(seq: &mut Seq, cs: &Callsite) -> usize {
    let idx = cs.id() as usize;
    if seq.site_ann_start.len() <= idx {
        seq.site_ann_start.resize(idx + 1, 0);
    }
    if seq.site_ann_start[idx] == 0 {
        seq.site_ann_start[idx] = seq.site_ann_iids.len() as u32 + 1;
        let n = cs.arg_names.len() + cs.const_args.len();
        seq.site_ann_iids.extend(std::iter::repeat_n(0, n));
    }
    seq.site_ann_start[idx] as usize - 1
}

/// The iid of argument name `i` of a call site whose names start at
/// `start`, interned on its first use.
fn ann_iid(
    seq: &mut Seq,
    start: usize,
    i: usize,
    name: &'static str,
    interned: &mut Vec<u8>,
) -> u32 {
    let mut iid = seq.site_ann_iids[start + i];
    if iid == 0 {
        iid = intern_annotation_name(seq, name, interned);
        seq.site_ann_iids[start + i] = iid;
    }
    iid
}

/// The debug annotations of a call site's recorded arguments, names
/// interned by (call site, argument index).
pub(super) fn annotations(
    seq: &mut Seq,
    cs: &'static Callsite,
    args: &[u64],
    te: &mut Vec<u8>,
    interned: &mut Vec<u8>,
) {
    let start = site_ann_start(seq, cs);
    let mut reader = ArgReader::new(args);
    for (i, &arg_name) in cs.arg_names.iter().enumerate() {
        let iid = ann_iid(seq, start, i, arg_name, interned);
        annotation(te, iid, &mut reader);
    }
}

/// The debug annotations of a call site's constant arguments (before its
/// recorded ones: the fast path keeps them in its template), names
/// interned as [`annotations`]' are.
pub(super) fn const_annotations(
    seq: &mut Seq,
    cs: &'static Callsite,
    te: &mut Vec<u8>,
    interned: &mut Vec<u8>,
) {
    let start = site_ann_start(seq, cs);
    for (j, &(name, value)) in cs.const_args.iter().enumerate() {
        let iid = ann_iid(seq, start, cs.arg_names.len() + j, name, interned);
        const_annotation(te, iid, value);
    }
}

/// A DebugAnnotation named by `iid` with string value `value`.
pub(super) fn const_annotation(te: &mut Vec<u8>, iid: u32, value: &str) {
    let len = uint_len(DA_NAME_IID, iid as u64) + len_field_len(DA_STRING, value.len());
    len_head(te, TE_DEBUG_ANNOTATIONS, len);
    uint(te, DA_NAME_IID, iid as u64);
    string(te, DA_STRING, value);
}

/// A DebugAnnotation named by `iid` with varint `field` = `v`, sized first.
#[inline(always)]
fn scalar_annotation(te: &mut Vec<u8>, iid: u32, field: u32, v: u64) {
    let len = uint_len(DA_NAME_IID, iid as u64) + uint_len(field, v);
    len_head(te, TE_DEBUG_ANNOTATIONS, len);
    uint(te, DA_NAME_IID, iid as u64);
    uint(te, field, v);
}

/// One DebugAnnotation named by `iid` with the next value of `r`; scalars
/// and strings sized first, containers built with [`nested`].
#[inline]
pub(super) fn annotation(te: &mut Vec<u8>, iid: u32, r: &mut ArgReader<'_>) {
    let name_len = uint_len(DA_NAME_IID, iid as u64);
    let save = r.pos();
    match r.next() {
        // int64 as its two's complement, bool as 0/1: all varints.
        ArgValue::Int(v) => scalar_annotation(te, iid, DA_INT, v as u64),
        ArgValue::Uint(v) => scalar_annotation(te, iid, DA_UINT, v),
        ArgValue::Bool(v) => scalar_annotation(te, iid, DA_BOOL, v as u64),
        ArgValue::Double(v) => {
            len_head(te, TE_DEBUG_ANNOTATIONS, name_len + 1 + 8);
            uint(te, DA_NAME_IID, iid as u64);
            double(te, DA_DOUBLE, v);
        }
        ArgValue::Str(sw) => {
            len_head(
                te,
                TE_DEBUG_ANNOTATIONS,
                name_len + len_field_len(DA_STRING, sw.len()),
            );
            uint(te, DA_NAME_IID, iid as u64);
            string_words(te, DA_STRING, &sw);
        }
        _ => {
            r.set_pos(save);
            nested(te, TE_DEBUG_ANNOTATIONS, |a| {
                uint(a, DA_NAME_IID, iid as u64);
                annotation_value(a, r, 0);
            });
        }
    }
}

/// Writes the value fields of the next argument value as a DebugAnnotation.
pub(super) fn annotation_value(a: &mut Vec<u8>, r: &mut ArgReader<'_>, depth: usize) {
    if depth > crate::record::args::MAX_NESTING {
        r.skip_value();
        string(a, DA_STRING, crate::record::args::TOO_DEEP);
        return;
    }
    match r.next() {
        // Perfetto has no null: an annotation without a value reads as absent.
        ArgValue::Null => {}
        ArgValue::Int(v) => int(a, DA_INT, v),
        ArgValue::Uint(v) => uint(a, DA_UINT, v),
        ArgValue::Double(v) => double(a, DA_DOUBLE, v),
        ArgValue::Bool(v) => uint(a, DA_BOOL, v as u64),
        ArgValue::Pointer(v) => uint(a, DA_POINTER, v),
        ArgValue::Str(s) => string_words(a, DA_STRING, &s),
        ArgValue::Dict(n) => {
            for _ in 0..n {
                let key = r.key();
                nested(a, DA_DICT_ENTRIES, |e| {
                    string(e, DA_NAME, &key);
                    annotation_value(e, r, depth + 1);
                });
            }
        }
        ArgValue::Array(n) => {
            for _ in 0..n {
                nested(a, DA_ARRAY_VALUES, |e| annotation_value(e, r, depth + 1));
            }
        }
    }
}
