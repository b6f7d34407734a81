//! Event arguments: the [`TraceValue`] trait, and their word encoding in the
//! ring.
//!
//! An argument value is a tag word followed by its payload:
//!
//! ```text
//! tag bits 0..8: type; bits 8..64: a length or count
//! INT, UINT, DOUBLE, POINTER   tag, 1 payload word (f64 as its bits)
//! BOOL                         tag with the value in bit 8
//! NULL                         tag
//! STR                          tag with the byte length, bytes packed little-endian
//! DICT                         tag with the entry count, then per entry: STR key, value
//! ARRAY                        tag with the element count, then the values
//! ```
//!
//! Names of top-level arguments are not stored: they are the call site's
//! static `arg_names`, in order. Reading values back (the encoders' side)
//! is in `read.rs`.

use std::collections::{BTreeMap, HashMap};

mod read;
#[cfg(test)]
pub(crate) use read::Value;
pub(crate) use read::{ArgReader, ArgValue, StrWords};

pub(crate) const T_NULL: u64 = 0;
pub(crate) const T_INT: u64 = 1;
pub(crate) const T_UINT: u64 = 2;
pub(crate) const T_DOUBLE: u64 = 3;
pub(crate) const T_BOOL: u64 = 4;
pub(crate) const T_POINTER: u64 = 5;
pub(crate) const T_STR: u64 = 6;
pub(crate) const T_DICT: u64 = 7;
pub(crate) const T_ARRAY: u64 = 8;

/// Encoders write values nested deeper than this as a placeholder string
/// (bounds the flusher's recursion whatever a `TraceValue` impl writes).
pub(crate) const MAX_NESTING: usize = 64;
/// The placeholder for values nested deeper than [`MAX_NESTING`].
pub(crate) const TOO_DEEP: &str = "<nested too deep>";

/// Where a value's words go: a ring reservation, or a plain vector (tests).
#[doc(hidden)]
pub trait WordSink {
    fn push(&mut self, word: u64);
}

impl WordSink for Vec<u64> {
    fn push(&mut self, word: u64) {
        Vec::push(self, word)
    }
}

/// A value that can be attached to an event as an argument.
///
/// Implemented for integers, floats, `bool`, `char`, strings, raw pointers
/// (recorded as addresses), `Option` (`None` is written as null), slices,
/// arrays and `Vec`s (nested arrays), and maps with string keys (nested
/// dictionaries). In Perfetto they become typed debug annotations; in JSON,
/// `args` members.
///
/// # Examples
///
/// ```
/// use std::collections::BTreeMap;
/// let _trace = ringtrace::builder().writer(ringtrace::MemoryBuffer::new()).start().unwrap();
/// let sizes = vec![1u32, 2, 3];
/// let mut limits = BTreeMap::new();
/// limits.insert("max", 10i64);
/// ringtrace::trace_instant!("config", sizes = sizes, limits = limits, ratio = 0.5, name = "x");
/// ```
pub trait TraceValue {
    /// Number of 64-bit words [`TraceValue::encode`] writes.
    fn words(&self) -> usize;
    /// Writes the tag and payload words.
    #[doc(hidden)]
    fn encode(&self, out: &mut dyn WordSink);
}

#[inline]
pub(crate) fn tag(ty: u64, len: u64) -> u64 {
    ty | (len << 8)
}

macro_rules! int_value {
    ($ty:ident $($t:ty),*) => {$(
        impl TraceValue for $t {
            #[inline]
            fn words(&self) -> usize { 2 }
            #[inline]
            fn encode(&self, out: &mut dyn WordSink) {
                out.push($ty);
                out.push(*self as i64 as u64);
            }
        }
    )*};
}
int_value!(T_INT i8, i16, i32, i64, isize);

macro_rules! uint_value {
    ($($t:ty),*) => {$(
        impl TraceValue for $t {
            #[inline]
            fn words(&self) -> usize { 2 }
            #[inline]
            fn encode(&self, out: &mut dyn WordSink) {
                out.push(T_UINT);
                out.push(*self as u64);
            }
        }
    )*};
}
uint_value!(u8, u16, u32, u64, usize);

impl TraceValue for f64 {
    #[inline]
    fn words(&self) -> usize {
        2
    }
    #[inline]
    fn encode(&self, out: &mut dyn WordSink) {
        out.push(T_DOUBLE);
        out.push(self.to_bits());
    }
}

impl TraceValue for f32 {
    #[inline]
    fn words(&self) -> usize {
        2
    }
    #[inline]
    fn encode(&self, out: &mut dyn WordSink) {
        (*self as f64).encode(out)
    }
}

impl TraceValue for bool {
    #[inline]
    fn words(&self) -> usize {
        1
    }
    #[inline]
    fn encode(&self, out: &mut dyn WordSink) {
        out.push(tag(T_BOOL, *self as u64));
    }
}

impl TraceValue for str {
    #[inline]
    fn words(&self) -> usize {
        1 + self.len().div_ceil(8)
    }
    fn encode(&self, out: &mut dyn WordSink) {
        encode_bytes(self.as_bytes(), out)
    }
}

pub(crate) fn encode_bytes(bytes: &[u8], out: &mut dyn WordSink) {
    out.push(tag(T_STR, bytes.len() as u64));
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        out.push(u64::from_le_bytes(c.try_into().unwrap()));
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut last = [0u8; 8];
        last[..rest.len()].copy_from_slice(rest);
        out.push(u64::from_le_bytes(last));
    }
}

impl TraceValue for String {
    #[inline]
    fn words(&self) -> usize {
        self.as_str().words()
    }
    fn encode(&self, out: &mut dyn WordSink) {
        self.as_str().encode(out)
    }
}

impl TraceValue for std::borrow::Cow<'_, str> {
    fn words(&self) -> usize {
        self.as_ref().words()
    }
    fn encode(&self, out: &mut dyn WordSink) {
        self.as_ref().encode(out)
    }
}

impl TraceValue for char {
    fn words(&self) -> usize {
        2
    }
    fn encode(&self, out: &mut dyn WordSink) {
        let mut buf = [0u8; 4];
        self.encode_utf8(&mut buf).encode(out)
    }
}

impl<T: ?Sized> TraceValue for *const T {
    fn words(&self) -> usize {
        2
    }
    fn encode(&self, out: &mut dyn WordSink) {
        out.push(T_POINTER);
        out.push(self.cast::<()>() as usize as u64);
    }
}

impl<T: ?Sized> TraceValue for *mut T {
    fn words(&self) -> usize {
        2
    }
    fn encode(&self, out: &mut dyn WordSink) {
        self.cast_const().encode(out)
    }
}

impl<T: TraceValue + ?Sized> TraceValue for &T {
    #[inline]
    fn words(&self) -> usize {
        (**self).words()
    }
    #[inline]
    fn encode(&self, out: &mut dyn WordSink) {
        (**self).encode(out)
    }
}

impl<T: TraceValue + ?Sized> TraceValue for Box<T> {
    fn words(&self) -> usize {
        (**self).words()
    }
    fn encode(&self, out: &mut dyn WordSink) {
        (**self).encode(out)
    }
}

impl<T: TraceValue> TraceValue for Option<T> {
    fn words(&self) -> usize {
        self.as_ref().map_or(1, T::words)
    }
    fn encode(&self, out: &mut dyn WordSink) {
        match self {
            Some(v) => v.encode(out),
            None => out.push(T_NULL),
        }
    }
}

impl<T: TraceValue> TraceValue for [T] {
    fn words(&self) -> usize {
        1 + self.iter().map(T::words).sum::<usize>()
    }
    fn encode(&self, out: &mut dyn WordSink) {
        out.push(tag(T_ARRAY, self.len() as u64));
        for v in self {
            v.encode(out);
        }
    }
}

impl<T: TraceValue, const N: usize> TraceValue for [T; N] {
    fn words(&self) -> usize {
        self.as_slice().words()
    }
    fn encode(&self, out: &mut dyn WordSink) {
        self.as_slice().encode(out)
    }
}

impl<T: TraceValue> TraceValue for Vec<T> {
    fn words(&self) -> usize {
        self.as_slice().words()
    }
    fn encode(&self, out: &mut dyn WordSink) {
        self.as_slice().encode(out)
    }
}

fn map_words<'a, K: AsRef<str> + 'a, V: TraceValue + 'a>(
    it: impl Iterator<Item = (&'a K, &'a V)>,
) -> usize {
    1 + it
        .map(|(k, v)| k.as_ref().words() + v.words())
        .sum::<usize>()
}

fn map_encode<'a, K: AsRef<str> + 'a, V: TraceValue + 'a>(
    len: usize,
    it: impl Iterator<Item = (&'a K, &'a V)>,
    out: &mut dyn WordSink,
) {
    out.push(tag(T_DICT, len as u64));
    for (k, v) in it {
        k.as_ref().encode(out);
        v.encode(out);
    }
}

impl<K: AsRef<str>, V: TraceValue> TraceValue for BTreeMap<K, V> {
    fn words(&self) -> usize {
        map_words(self.iter())
    }
    fn encode(&self, out: &mut dyn WordSink) {
        map_encode(self.len(), self.iter(), out)
    }
}

impl<K: AsRef<str>, V: TraceValue, S> TraceValue for HashMap<K, V, S> {
    fn words(&self) -> usize {
        map_words(self.iter())
    }
    fn encode(&self, out: &mut dyn WordSink) {
        map_encode(self.len(), self.iter(), out)
    }
}

/// A list of argument values, as the macros pass them: a tuple of references.
#[doc(hidden)]
pub trait ArgList {
    const LEN: usize;
    fn words(&self) -> usize;
    fn encode(&self, out: &mut dyn WordSink);
}

impl ArgList for () {
    const LEN: usize = 0;
    #[inline(always)]
    fn words(&self) -> usize {
        0
    }
    #[inline(always)]
    fn encode(&self, _: &mut dyn WordSink) {}
}

macro_rules! tuple_args {
    ($n:expr; $($name:ident $idx:tt),+) => {
        impl<$($name: TraceValue + ?Sized),+> ArgList for ($(&$name,)+) {
            const LEN: usize = $n;
            #[inline]
            fn words(&self) -> usize { 0 $(+ self.$idx.words())+ }
            #[inline]
            fn encode(&self, out: &mut dyn WordSink) { $(self.$idx.encode(out);)+ }
        }
    };
}
tuple_args!(1; A 0);
tuple_args!(2; A 0, B 1);
tuple_args!(3; A 0, B 1, C 2);
tuple_args!(4; A 0, B 1, C 2, D 3);
tuple_args!(5; A 0, B 1, C 2, D 3, E 4);
tuple_args!(6; A 0, B 1, C 2, D 3, E 4, F 5);
tuple_args!(7; A 0, B 1, C 2, D 3, E 4, F 5, G 6);
tuple_args!(8; A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);
tuple_args!(9; A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8);
tuple_args!(10; A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9);
tuple_args!(11; A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10);
tuple_args!(12; A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11);

/// A tag word: type `ty` with a length or count `len` (see the module docs).
pub(crate) fn tag_word(ty: u64, len: u64) -> u64 {
    tag(ty, len)
}

#[cfg(test)]
mod tests;
