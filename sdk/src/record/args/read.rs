//! Reading argument values back from drained record words (the encoders'
//! side of the word encoding in [`super`]).

use super::{T_ARRAY, T_BOOL, T_DICT, T_DOUBLE, T_INT, T_POINTER, T_STR, T_UINT};

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
/// [`encode_bytes`](super::encode_bytes)'s callers), and torn copies of a ring are discarded
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
