//! JSON's text: the line an event is built in (`Line`), numbers written by
//! hand (integers two digits per step, microseconds with three decimals,
//! doubles with their non-finite values as strings), strings escaped (from
//! a `&str`, or straight from a recorded string's words, eight bytes tested
//! at once), and recorded argument values as JSON values. Nothing here knows
//! an event or a phase.

use crate::record::args::{ArgReader, ArgValue, StrWords};
use std::fmt::Write as _;

/// JSON text being built, as bytes: recorded strings are escaped into it
/// straight from their words (they are UTF-8 already: see `StrWords`), and
/// numbers are written by hand. `push_str`, `push` and `write!` as on a
/// `String`; everything put in is UTF-8, so the line is.
#[derive(Default, Clone, Debug)]
pub(crate) struct Line(pub(super) Vec<u8>);

impl Line {
    #[inline]
    pub(crate) fn push_str(&mut self, s: &str) {
        self.0.extend_from_slice(s.as_bytes());
    }

    #[inline]
    pub(crate) fn push(&mut self, c: char) {
        if c.is_ascii() {
            self.0.push(c as u8);
        } else {
            let mut b = [0u8; 4];
            self.0.extend_from_slice(c.encode_utf8(&mut b).as_bytes());
        }
    }

    /// Appends another line's text.
    #[inline]
    pub(crate) fn push_line(&mut self, other: &Line) {
        self.0.extend_from_slice(&other.0);
    }

    #[inline]
    pub(crate) fn clear(&mut self) {
        self.0.clear();
    }

    #[inline]
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The text (cold paths: the object form's top-level values).
    pub(crate) fn into_string(self) -> String {
        String::from_utf8(self.0)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
    }

    /// Appends `v` in decimal, two digits per step, stored straight into
    /// the spare capacity (one capacity check per number).
    #[inline]
    #[allow(unsafe_code)]
    pub(crate) fn uint(&mut self, v: u64) {
        self.0.reserve(20);
        let len = self.0.len();
        // SAFETY: 20 bytes of spare capacity were reserved above, all that
        // `put_uint` writes; it initialises the `n` it returns.
        unsafe {
            let n = put_uint(self.0.as_mut_ptr().add(len), v);
            self.0.set_len(len + n);
        }
    }

    /// Appends `v` in decimal.
    #[inline]
    pub(crate) fn int(&mut self, v: i64) {
        if v < 0 {
            self.0.push(b'-');
        }
        self.uint(v.unsigned_abs());
    }
}

impl std::fmt::Write for Line {
    #[inline]
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.push_str(s);
        Ok(())
    }
}

/// Appends `ns` as microseconds with exactly three decimals.
#[inline]
#[allow(unsafe_code)]
pub(crate) fn micros(l: &mut Line, ns: u64) {
    let frac = (ns % 1000) as usize;
    let (hundreds, rest) = (frac / 100, frac % 100 * 2);
    l.0.reserve(24);
    let len = l.0.len();
    // SAFETY: 24 bytes of spare capacity were reserved above: `put_uint`
    // writes at most 20 (a u64 has at most 20 digits; `ns / 1000` at
    // most 17), then four more; all `n + 4` are initialised.
    unsafe {
        let dst = l.0.as_mut_ptr().add(len);
        let n = put_uint(dst, ns / 1000);
        *dst.add(n) = b'.';
        *dst.add(n + 1) = b'0' + hundreds as u8;
        std::ptr::copy_nonoverlapping(PAIRS.as_ptr().add(rest), dst.add(n + 2), 2);
        l.0.set_len(len + n + 4);
    }
}

/// The decimal digits of 0 to 99, two bytes each.
const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
    2021222324252627282930313233343536373839\
    4041424344454647484950515253545556575859\
    6061626364656667686970717273747576777879\
    8081828384858687888990919293949596979899";

/// Writes `v` in decimal at `dst`, two digits per step from the last, and
/// returns how many (1 to 20).
///
/// # Safety
/// `dst` is valid for writes of 20 bytes.
#[inline(always)]
#[allow(unsafe_code)]
unsafe fn put_uint(dst: *mut u8, mut v: u64) -> usize {
    let digits = v.checked_ilog10().map_or(1, |d| d as usize + 1);
    let mut i = digits;
    // SAFETY (every store): `i <= digits <= 20` and each store lies in
    // `dst[..digits]`; `r + 2 <= 200` (`r` is twice a number below 100).
    unsafe {
        while v >= 100 {
            let r = (v % 100) as usize * 2;
            v /= 100;
            i -= 2;
            std::ptr::copy_nonoverlapping(PAIRS.as_ptr().add(r), dst.add(i), 2);
        }
        if v >= 10 {
            std::ptr::copy_nonoverlapping(PAIRS.as_ptr().add(v as usize * 2), dst, 2);
        } else {
            *dst = b'0' + v as u8;
        }
    }
    digits
}

/// Appends `s` as a JSON string: quotes, backslashes and control characters
/// escaped; everything else raw UTF-8 (never surrogate escapes, which some
/// readers reject).
#[inline]
pub(crate) fn escape_into<W: std::fmt::Write>(l: &mut W, s: &str) {
    let _ = l.write_char('"');
    let bytes = s.as_bytes();
    let mut run = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if needs_escape(b) {
            // Runs end at ASCII bytes: always on a character boundary.
            let _ = l.write_str(&s[run..i]);
            run = i + 1;
            let mut esc = [0u8; 6];
            let _ = l.write_str(escape_of(b, &mut esc));
        }
    }
    let _ = l.write_str(&s[run..]);
    let _ = l.write_char('"');
}

/// The escape sequence of a byte [`needs_escape`] picks.
#[inline]
fn escape_of(b: u8, buf: &mut [u8; 6]) -> &str {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    match b {
        b'"' => "\\\"",
        b'\\' => "\\\\",
        b'\n' => "\\n",
        b'\r' => "\\r",
        b'\t' => "\\t",
        _ => {
            *buf = [
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[(b >> 4) as usize],
                HEX[(b & 15) as usize],
            ];
            std::str::from_utf8(buf).unwrap_or("?")
        }
    }
}

/// As [`escape_into`] for a recorded string, read from its words: a word
/// with no byte to escape (the usual case) is copied whole after one test
/// of its eight bytes at once; only a word that has one goes byte by byte.
#[inline]
fn escape_words(l: &mut Line, s: &StrWords<'_>) {
    l.0.push(b'"');
    l.0.reserve(s.len() + 8);
    s.for_each_word(|w, n| {
        let bytes = w.to_le_bytes();
        // The bytes past the string's end (in its last word) read as
        // spaces, which need no escape.
        let tail = if n == 8 { 0 } else { u64::MAX << (8 * n) };
        if escapes_in((w & !tail) | (SPACES & tail)) {
            escape_raw(l, &bytes[..n]);
        } else {
            // The whole word, a copy of fixed size (one store, where a copy
            // of `n` bytes is a call to memcpy), cut back to the string.
            l.0.extend_from_slice(&bytes);
            l.0.truncate(l.0.len() - (8 - n));
        }
    });
    l.0.push(b'"');
}

/// Eight copies of a byte value `b`, one per byte of a word.
const fn each_byte(b: u8) -> u64 {
    0x0101_0101_0101_0101 * b as u64
}

const SPACES: u64 = each_byte(b' ');

/// Whether a word's eight bytes hold one that [`needs_escape`] picks,
/// tested on all eight at once. `(x - each_byte(k)) & !x` has a top bit
/// set if and only if some byte of `x` is below `k` (`k` up to 0x80): the
/// lowest such byte borrows into its own top bit; with none, no byte
/// borrows, and a byte whose difference reaches 0x80 is one whose top bit
/// `!x` clears. A byte equal to `c` is a byte of `x ^ each_byte(c)` that
/// is below one. Bytes of 0x80 and up (UTF-8 beyond ASCII) never count, as
/// in [`needs_escape`].
#[inline]
fn escapes_in(w: u64) -> bool {
    const TOP: u64 = each_byte(0x80);
    let below = |x: u64, k: u8| x.wrapping_sub(each_byte(k)) & !x;
    let control = below(w, 0x20);
    let quote = below(w ^ each_byte(b'"'), 1);
    let backslash = below(w ^ each_byte(b'\\'), 1);
    let delete = below(w ^ each_byte(0x7f), 1);
    (control | quote | backslash | delete) & TOP != 0
}

/// Whether byte `b` of UTF-8 text needs an escape in a JSON string.
#[inline]
fn needs_escape(b: u8) -> bool {
    b < 0x20 || b == b'"' || b == b'\\' || b == 0x7f
}

/// Appends UTF-8 bytes escaped (no quotes): runs of plain bytes are copied
/// whole. Bytes of multi-byte characters are all >= 0x80, never escaped, so
/// a character split across calls comes out whole.
#[inline]
fn escape_raw(l: &mut Line, bytes: &[u8]) {
    let mut run = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if !needs_escape(b) {
            continue;
        }
        l.0.extend_from_slice(&bytes[run..i]);
        run = i + 1;
        let mut esc = [0u8; 6];
        l.push_str(escape_of(b, &mut esc));
    }
    l.0.extend_from_slice(&bytes[run..]);
}

/// Appends a double; non-finite values as strings (JSON has no NaN).
pub(crate) fn double_into<W: std::fmt::Write>(l: &mut W, v: f64) {
    if v.is_nan() {
        let _ = l.write_str("\"NaN\"");
    } else if v.is_infinite() {
        let _ = l.write_str(if v > 0.0 {
            "\"Infinity\""
        } else {
            "\"-Infinity\""
        });
    } else {
        let _ = write!(l, "{v:?}");
    }
}

pub(super) fn value_into(l: &mut Line, r: &mut ArgReader<'_>, depth: usize) {
    if depth > crate::record::args::MAX_NESTING {
        r.skip_value();
        escape_into(l, crate::record::args::TOO_DEEP);
        return;
    }
    match r.next() {
        ArgValue::Null => l.push_str("null"),
        ArgValue::Int(v) => l.int(v),
        ArgValue::Uint(v) => l.uint(v),
        ArgValue::Double(v) => double_into(l, v),
        ArgValue::Bool(v) => l.push_str(if v { "true" } else { "false" }),
        ArgValue::Pointer(v) => {
            let _ = write!(l, "\"0x{v:x}\"");
        }
        ArgValue::Str(s) => escape_words(l, &s),
        ArgValue::Dict(n) => {
            l.push('{');
            for i in 0..n {
                if i > 0 {
                    l.push(',');
                }
                let key = r.key_words();
                escape_words(l, &key);
                l.push(':');
                value_into(l, r, depth + 1);
            }
            l.push('}');
        }
        ArgValue::Array(n) => {
            l.push('[');
            for i in 0..n {
                if i > 0 {
                    l.push(',');
                }
                value_into(l, r, depth + 1);
            }
            l.push(']');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_escaped() {
        let mut l = Line::default();
        escape_into(&mut l, "a\"b\\c\n\u{1}é😀");
        assert_eq!(l.into_string(), "\"a\\\"b\\\\c\\n\\u0001é😀\"");
    }

    #[test]
    fn recorded_strings_are_escaped_from_their_words() {
        use crate::record::args::TraceValue;
        for s in [
            "",
            "plain",
            "a\"b\\c\n\u{1}\u{7f}",
            "héllo wörld 😀 across words",
            "12345678\t",
        ] {
            let mut words = Vec::new();
            s.encode(&mut words);
            let mut got = Line::default();
            value_into(&mut got, &mut ArgReader::new(&words), 0);
            let got = got.into_string();
            let mut want = Line::default();
            escape_into(&mut want, s);
            assert_eq!(got, want.into_string());
            let back: String = serde_json::from_str(&got).unwrap();
            assert_eq!(back, s);
        }
    }

    #[test]
    fn a_word_test_finds_exactly_the_bytes_to_escape() {
        // Every byte value at every position of words whose other bytes are
        // drawn from values near the edges (0x1f/0x20, the quote, the
        // backslash, 0x7f/0x80) and at random.
        const EDGES: [u8; 14] = [
            0x00, 0x01, 0x1f, 0x20, 0x21, 0x22, 0x23, 0x5b, 0x5c, 0x5d, 0x7e, 0x7f, 0x80, 0xff,
        ];
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let plain_byte = |r: u64| {
            if r & 1 == 0 {
                EDGES[(r >> 1) as usize % EDGES.len()]
            } else {
                (r >> 8) as u8
            }
        };
        for round in 0..2_000 {
            let mut bytes = [0u8; 8];
            for b in &mut bytes {
                *b = plain_byte(next());
            }
            if round % 2 == 0 {
                // Half the rounds: no other byte to escape.
                for b in &mut bytes {
                    if needs_escape(*b) {
                        *b = b'a';
                    }
                }
            }
            for pos in 0..8 {
                for v in 0..=255u8 {
                    let mut w = bytes;
                    w[pos] = v;
                    assert_eq!(
                        escapes_in(u64::from_le_bytes(w)),
                        w.iter().any(|&b| needs_escape(b)),
                        "{w:02x?}"
                    );
                }
            }
        }
    }

    #[test]
    fn recorded_strings_of_every_length_with_an_escape_anywhere() {
        // Each byte an escape may be, and a character beyond ASCII, at each
        // position of strings that end at every offset of a word.
        use crate::record::args::TraceValue;
        let odd: Vec<String> = (0..0x80u8)
            .map(|b| (b as char).to_string())
            .chain(["é".to_string(), "😀".to_string()])
            .collect();
        for len in 0..=20 {
            for pos in 0..len {
                for c in &odd {
                    let s: String = (0..len)
                        .map(|i| if i == pos { c.as_str() } else { "x" })
                        .collect();
                    let mut words = Vec::new();
                    s.as_str().encode(&mut words);
                    let mut got = Line::default();
                    value_into(&mut got, &mut ArgReader::new(&words), 0);
                    let got = got.into_string();
                    let mut want = Line::default();
                    escape_into(&mut want, &s);
                    assert_eq!(got, want.into_string());
                    let back: String = serde_json::from_str(&got).unwrap();
                    assert_eq!(back, s);
                }
            }
        }
    }

    #[test]
    fn integers_are_written_in_decimal() {
        let mut l = Line::default();
        for v in [
            0i64,
            7,
            -7,
            10,
            99,
            100,
            101,
            1000,
            12345,
            i64::MAX,
            i64::MIN,
        ] {
            l.int(v);
            l.push(' ');
        }
        l.uint(u64::MAX);
        let want = format!(
            "0 7 -7 10 99 100 101 1000 12345 {} {} {}",
            i64::MAX,
            i64::MIN,
            u64::MAX
        );
        assert_eq!(l.into_string(), want);
    }

    #[test]
    fn uint_writes_every_digit_count() {
        let mut l = Line::default();
        let mut want = String::new();
        let mut p = 1u64;
        for _ in 0..20 {
            for v in [
                p - 1,
                p,
                p + 1,
                p.saturating_mul(5),
                p.saturating_mul(9).saturating_add(7),
            ] {
                l.uint(v);
                l.push(' ');
                want.push_str(&format!("{v} "));
            }
            p = p.saturating_mul(10);
        }
        l.uint(u64::MAX);
        want.push_str(&u64::MAX.to_string());
        assert_eq!(l.into_string(), want);
    }

    #[test]
    fn micros_keep_nanoseconds() {
        let mut l = Line::default();
        micros(&mut l, 1_234_567_890);
        assert_eq!(l.into_string(), "1234567.890");
        let mut l = Line::default();
        micros(&mut l, 7);
        l.push(' ');
        micros(&mut l, 0);
        l.push(' ');
        micros(&mut l, u64::MAX);
        assert_eq!(l.into_string(), "0.007 0.000 18446744073709551.615");
    }

    #[test]
    fn values_nested_too_deep_become_a_placeholder() {
        use crate::record::args::TraceValue;
        let mut v: Vec<Vec<u8>> = vec![vec![1]];
        let mut words = Vec::new();
        // 100 levels of arrays around one value, then a sibling value.
        for _ in 0..99 {
            words.push(crate::record::args::T_ARRAY | (1 << 8));
        }
        v.remove(0).encode(&mut words);
        5u8.encode(&mut words);
        let mut l = Line::default();
        let mut r = ArgReader::new(&words);
        value_into(&mut l, &mut r, 0);
        let l = l.into_string();
        assert!(l.contains("<nested too deep>"), "{l}");
        assert_eq!(
            r.next(),
            ArgValue::Uint(5),
            "the next value is still read correctly"
        );
    }

    #[test]
    fn non_finite_doubles_are_strings() {
        let mut l = Line::default();
        double_into(&mut l, f64::NAN);
        double_into(&mut l, f64::NEG_INFINITY);
        double_into(&mut l, 0.5);
        assert_eq!(l.into_string(), "\"NaN\"\"-Infinity\"0.5");
    }
}
