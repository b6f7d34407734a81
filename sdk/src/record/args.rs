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
//! static `arg_names`, in order.

use std::collections::{BTreeMap, HashMap};

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

/// A decoded argument value, borrowed from the drained words.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ArgValue<'a> {
    Null,
    Int(i64),
    Uint(u64),
    Double(f64),
    Bool(bool),
    Pointer(u64),
    /// The bytes, still in the words they were recorded in.
    Str(StrWords<'a>),
    Dict(usize),
    Array(usize),
}

/// A string argument as recorded: `len` UTF-8 bytes packed little-endian in
/// `words`. Read without copying it out first and without validating it
/// again: every writer of `T_STR` words encodes a `&str` (see
/// [`encode_bytes`]'s callers), and torn copies of a ring are discarded
/// before anything is decoded, so the bytes are the valid UTF-8 they were.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct StrWords<'a> {
    words: &'a [u64],
    len: usize,
}

impl<'a> StrWords<'a> {
    /// Length in bytes.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The words holding the bytes, in order (the last one's bytes past
    /// [`Self::len`] are not the string's).
    #[inline]
    pub(crate) fn words(&self) -> &'a [u64] {
        self.words
    }

    /// The bytes, word by word: `f` gets each word and how many of its bytes
    /// (little-endian, from the lowest) are the string's: 8, but fewer in
    /// the last one. Stops early at the end of `words`.
    #[inline]
    pub(crate) fn for_each_word(&self, mut f: impl FnMut(u64, usize)) {
        let mut left = self.len;
        for &w in self.words {
            if left == 0 {
                break;
            }
            let n = left.min(8);
            f(w, n);
            left -= n;
        }
    }

    /// Appends the bytes to `out` (a reserve and word-sized copies).
    #[inline]
    pub(crate) fn append_to(&self, out: &mut Vec<u8>) {
        out.reserve(self.len);
        let full = self.len / 8;
        for w in &self.words[..full] {
            out.extend_from_slice(&w.to_le_bytes());
        }
        let rest = self.len - full * 8;
        if rest > 0 {
            out.extend_from_slice(&self.words[full].to_le_bytes()[..rest]);
        }
    }

    /// An owned copy (cold paths: dict keys, the typed API's fields).
    pub(crate) fn to_string_lossy(self) -> String {
        let mut v = Vec::with_capacity(self.len);
        self.append_to(&mut v);
        match String::from_utf8(v) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        }
    }
}

/// Reads argument values back from record words. Malformed input (which only
/// a torn read could produce, and those are discarded before decoding) reads
/// as nulls rather than panicking.
pub(crate) struct ArgReader<'a> {
    words: &'a [u64],
    pos: usize,
}

impl<'a> ArgReader<'a> {
    pub(crate) fn new(words: &'a [u64]) -> Self {
        ArgReader { words, pos: 0 }
    }

    fn word(&mut self) -> u64 {
        let w = self.words.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        w
    }

    /// The next value's head (containers announce their element count; read
    /// the elements with further calls).
    pub(crate) fn next(&mut self) -> ArgValue<'a> {
        let t = self.word();
        let len = t >> 8;
        match t & 0xff {
            T_INT => ArgValue::Int(self.word() as i64),
            T_UINT => ArgValue::Uint(self.word()),
            T_DOUBLE => ArgValue::Double(f64::from_bits(self.word())),
            T_BOOL => ArgValue::Bool(len & 1 == 1),
            T_POINTER => ArgValue::Pointer(self.word()),
            T_STR => ArgValue::Str(self.string(len as usize)),
            T_DICT => ArgValue::Dict(len as usize),
            T_ARRAY => ArgValue::Array(len as usize),
            _ => ArgValue::Null,
        }
    }

    #[inline]
    fn string(&mut self, len: usize) -> StrWords<'a> {
        let nwords = len.div_ceil(8);
        let end = (self.pos + nwords).min(self.words.len());
        let words = &self.words[self.pos.min(end)..end];
        self.pos += nwords;
        StrWords {
            words,
            len: len.min(words.len() * 8),
        }
    }

    /// Skips the next value and everything nested in it, without recursion.
    pub(crate) fn skip_value(&mut self) {
        let mut pending = 1usize;
        while pending > 0 && self.pos < self.words.len() {
            pending -= 1;
            match self.next() {
                ArgValue::Dict(n) => pending += 2 * n, // key + value per entry
                ArgValue::Array(n) => pending += n,
                _ => {}
            }
        }
    }

    /// Reads a dict key (a string value); anything else reads as "".
    pub(crate) fn key(&mut self) -> String {
        match self.next() {
            ArgValue::Str(s) => s.to_string_lossy(),
            _ => String::new(),
        }
    }

    /// Reads a dict key (a string value) without copying it; anything else
    /// reads as empty.
    pub(crate) fn key_words(&mut self) -> StrWords<'a> {
        match self.next() {
            ArgValue::Str(s) => s,
            _ => StrWords { words: &[], len: 0 },
        }
    }

    /// Reads one raw word (an untagged field id).
    pub(crate) fn skip_word(&mut self) -> u64 {
        self.word()
    }

    /// Goes back (or forth) to word `pos` (a value's start from [`Self::pos`]).
    pub(crate) fn set_pos(&mut self, pos: usize) {
        self.pos = pos;
    }

    /// Position of the next word to read.
    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    /// True once every word has been read.
    pub(crate) fn at_end(&self) -> bool {
        self.pos >= self.words.len()
    }

    /// Skips the next value whole (containers with their elements), without
    /// decoding strings. Depth-bounded like every reader here.
    pub(crate) fn skip(&mut self) {
        self.skip_at_depth(0)
    }

    fn skip_at_depth(&mut self, depth: usize) {
        let t = self.word();
        let len = (t >> 8) as usize;
        match t & 0xff {
            T_INT | T_UINT | T_DOUBLE | T_POINTER => self.pos += 1,
            T_STR => self.pos += len.div_ceil(8),
            T_DICT if depth < 64 => {
                for _ in 0..len.min(self.words.len()) {
                    self.skip_at_depth(depth + 1);
                    self.skip_at_depth(depth + 1);
                }
            }
            T_ARRAY if depth < 64 => {
                for _ in 0..len.min(self.words.len()) {
                    self.skip_at_depth(depth + 1);
                }
            }
            _ => {}
        }
    }
}

/// A tag word: type `ty` with a length or count `len` (see the module docs).
pub(crate) fn tag_word(ty: u64, len: u64) -> u64 {
    tag(ty, len)
}

/// A fully decoded value tree (tests compare with it).
#[cfg(test)]
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    Null,
    Int(i64),
    Uint(u64),
    Double(f64),
    Bool(bool),
    Pointer(u64),
    Str(String),
    Dict(Vec<(String, Value)>),
    Array(Vec<Value>),
}

#[cfg(test)]
impl ArgReader<'_> {
    pub(crate) fn value(&mut self) -> Value {
        self.value_at_depth(0)
    }

    fn value_at_depth(&mut self, depth: usize) -> Value {
        // Depth is bounded by what fits in a record; guard anyway.
        if depth > 64 {
            return Value::Null;
        }
        match self.next() {
            ArgValue::Null => Value::Null,
            ArgValue::Int(v) => Value::Int(v),
            ArgValue::Uint(v) => Value::Uint(v),
            ArgValue::Double(v) => Value::Double(v),
            ArgValue::Bool(v) => Value::Bool(v),
            ArgValue::Pointer(v) => Value::Pointer(v),
            ArgValue::Str(s) => Value::Str(s.to_string_lossy()),
            ArgValue::Dict(n) => Value::Dict(
                (0..n.min(self.words.len()))
                    .map(|_| (self.key(), self.value_at_depth(depth + 1)))
                    .collect(),
            ),
            ArgValue::Array(n) => Value::Array(
                (0..n.min(self.words.len()))
                    .map(|_| self.value_at_depth(depth + 1))
                    .collect(),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip<T: TraceValue + ?Sized>(v: &T) -> Value {
        let mut w = Vec::new();
        v.encode(&mut w);
        assert_eq!(w.len(), v.words());
        ArgReader::new(&w).value()
    }

    #[test]
    fn strings_of_every_length_round_trip() {
        let text = "abcdefghijklmnopqrstuvwxyzé€😀0123456789";
        for end in 0..=text.len() {
            if let Some(s) = text.get(..end) {
                assert_eq!(roundtrip(s), Value::Str(s.into()));
            }
        }
    }

    #[test]
    fn values_round_trip() {
        assert_eq!(roundtrip(&-5i32), Value::Int(-5));
        assert_eq!(roundtrip(&u64::MAX), Value::Uint(u64::MAX));
        assert_eq!(roundtrip(&1.5f64), Value::Double(1.5));
        assert_eq!(roundtrip(&true), Value::Bool(true));
        assert_eq!(roundtrip("héllo, wörld"), Value::Str("héllo, wörld".into()));
        assert_eq!(roundtrip(""), Value::Str(String::new()));
        assert_eq!(roundtrip(&None::<i32>), Value::Null);
        assert_eq!(roundtrip(&'é'), Value::Str("é".into()));
        let mut m = BTreeMap::new();
        m.insert("a", vec![1u8, 2]);
        assert_eq!(
            roundtrip(&m),
            Value::Dict(vec![(
                "a".into(),
                Value::Array(vec![Value::Uint(1), Value::Uint(2)])
            )])
        );
        let p = 0x1234usize as *const u8;
        assert_eq!(roundtrip(&p), Value::Pointer(0x1234));
    }
}

#[cfg(test)]
mod skip_tests {
    use super::*;

    #[test]
    fn skip_value_consumes_nested_values_whole() {
        let mut m = BTreeMap::new();
        m.insert("a", vec![vec![1u8], vec![2, 3]]);
        let mut w = Vec::new();
        m.encode(&mut w);
        7i32.encode(&mut w);
        let mut r = ArgReader::new(&w);
        r.skip_value();
        assert_eq!(r.next(), ArgValue::Int(7));
    }
}
