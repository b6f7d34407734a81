//! `tracing` field values as ringtrace arg words.

use crate::record::args::{tag, ArgList, WordSink, T_BOOL, T_DOUBLE, T_INT, T_STR, T_UINT};
use std::cell::RefCell;
use std::fmt::{self, Write as _};
use tracing::field::{Field, Visit};

/// Field values encoded as arg words (see `args`), with the field each
/// belongs to. A reusable scratch.
#[derive(Default)]
pub(super) struct Fields {
    pub(super) words: Vec<u64>,
    /// (field index, start, end) into `words`, in visit order.
    pub(super) ranges: Vec<(u32, u32, u32)>,
    /// Words in field order, when visit order was not field order.
    sorted: Vec<u64>,
    /// The fields of `ranges`, a bit each (kept as they are visited: no
    /// pass over `ranges` per event).
    mask: u64,
    /// A field was visited after one of a higher index, or twice.
    unordered: bool,
}

impl Fields {
    fn clear(&mut self) {
        self.words.clear();
        self.ranges.clear();
        self.sorted.clear();
        self.mask = 0;
        self.unordered = false;
    }

    /// Field `idx` (below 64) was written to `words[start..]`.
    #[inline]
    pub(super) fn push_range(&mut self, idx: u32, start: u32) {
        if self.ranges.last().is_some_and(|&(last, _, _)| last >= idx) {
            self.unordered = true;
        }
        self.mask |= 1 << idx;
        self.ranges.push((idx, start, self.words.len() as u32));
    }

    #[inline]
    pub(super) fn mask(&self) -> u64 {
        self.mask
    }

    #[inline]
    pub(super) fn in_order(&self) -> bool {
        !self.unordered
    }

    /// The ranges in field order, the last value of a field winning.
    pub(super) fn ordered_ranges(&self) -> Vec<(u32, u32, u32)> {
        let mut r = self.ranges.clone();
        r.reverse();
        r.sort_by_key(|&(i, _, _)| i); // stable: the last visit of a field comes first
        r.dedup_by_key(|&mut (i, _, _)| i);
        r
    }

    /// The words of all values in field order.
    #[inline]
    pub(super) fn ordered(&mut self) -> &mut Vec<u64> {
        if self.in_order() {
            return &mut self.words; // the common case: visited in order
        }
        self.sort()
    }

    /// [`ordered`](Self::ordered) for fields visited out of order.
    #[inline(never)]
    fn sort(&mut self) -> &mut Vec<u64> {
        let mut sorted = std::mem::take(&mut self.sorted);
        sorted.clear();
        for (_, s, e) in self.ordered_ranges() {
            sorted.extend_from_slice(&self.words[s as usize..e as usize]);
        }
        self.sorted = sorted;
        &mut self.sorted
    }
}

/// Appends `s` as a STR value (tag, then the bytes packed little-endian).
#[inline]
pub(super) fn push_str(words: &mut Vec<u64>, s: &str) {
    words.push(tag(T_STR, s.len() as u64));
    TextWords { words, len: 0 }.append(s.as_bytes());
}

/// Packs text into arg words as it is formatted: a `Debug` or `Display`
/// value goes straight into the record's words, with no buffer between.
/// `len` bytes are written so far; the last word holds `len % 8` of them,
/// the rest of it zero, so the text is complete after every piece (no
/// step to finish it). A piece is loaded a word at a time (two loads at
/// most for up to 8 bytes) and or-ed in at its place: no copy call and no
/// loop over its bytes, whether the `Debug` impl writes a character at a
/// time or the whole value at once.
struct TextWords<'a> {
    words: &'a mut Vec<u64>,
    len: usize,
}

impl TextWords<'_> {
    #[inline(always)]
    fn append(&mut self, b: &[u8]) {
        if b.len() <= 8 {
            self.short(load_short(b), b.len());
        } else {
            self.append_long(b);
        }
    }

    /// A piece of `n <= 8` bytes, `v` (little-endian, zero above them),
    /// or-ed into the last word; the bytes past its top (if any) begin the
    /// next.
    #[inline(always)]
    fn short(&mut self, mut v: u64, n: usize) {
        let used = self.len % 8;
        self.len += n;
        if used != 0 {
            if let Some(last) = self.words.last_mut() {
                *last |= v << (8 * used);
            }
            if used + n <= 8 {
                return;
            }
            v >>= 64 - 8 * used; // the bytes shifted past the top
        } else if n == 0 {
            return;
        }
        self.words.push(v);
    }

    /// One byte, as `short`, but a new word's push out of line: the common
    /// case (a character into the last word) is a leaf that saves no
    /// registers.
    #[inline(always)]
    fn byte(&mut self, b: u8) {
        let used = self.len % 8;
        self.len += 1;
        if used == 0 {
            return self.push_word(b as u64);
        }
        if let Some(last) = self.words.last_mut() {
            *last |= (b as u64) << (8 * used);
        }
    }

    #[inline(never)]
    fn push_word(&mut self, v: u64) {
        self.words.push(v);
    }

    /// A piece of more than 8 bytes, a word at a time: the last word
    /// completed from one load of the first 8 bytes, whole words straight
    /// from the bytes, the rest from one load of the last 8.
    #[inline(never)]
    fn append_long(&mut self, b: &[u8]) {
        let n = b.len();
        debug_assert!(n > 8);
        let load = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or_default());
        let used = self.len % 8;
        self.len += n;
        let mut at = 0;
        if used != 0 {
            if let Some(last) = self.words.last_mut() {
                *last |= load(0) << (8 * used);
            }
            at = 8 - used;
        }
        self.words.reserve((n - at).div_ceil(8));
        // A plain loop: pieces are short, a vectorized one costs more to
        // set up than it saves.
        while at + 8 <= n {
            self.words.push(load(at));
            at += 8;
        }
        if at < n {
            // `b` is longer than 8: its last 8 bytes end with the rest.
            self.words.push(load(n - 8) >> (64 - 8 * (n - at)));
        }
    }
}

/// Up to 8 bytes as a little-endian word, zero above them: two loads
/// (overlapping) of 4 bytes, or three single bytes, instead of a copy
/// call for a length not known in advance.
#[inline(always)]
fn load_short(b: &[u8]) -> u64 {
    let n = b.len();
    debug_assert!(n <= 8);
    if n >= 4 {
        let lo = u32::from_le_bytes(b[..4].try_into().unwrap_or_default()) as u64;
        let hi = u32::from_le_bytes(b[n - 4..].try_into().unwrap_or_default()) as u64;
        lo | hi << (8 * (n - 4))
    } else if n != 0 {
        // The first, the middle and the last byte (some the same).
        b[0] as u64 | (b[n / 2] as u64) << (8 * (n / 2)) | (b[n - 1] as u64) << (8 * (n - 1))
    } else {
        0
    }
}

impl fmt::Write for TextWords<'_> {
    #[inline]
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.append(s.as_bytes());
        Ok(())
    }

    /// An ASCII character is one byte or-ed in place (a leaf function:
    /// a new word and wide characters are out of line).
    #[inline]
    fn write_char(&mut self, c: char) -> fmt::Result {
        if c.is_ascii() {
            self.byte(c as u8);
            Ok(())
        } else {
            self.write_wide(c)
        }
    }
}

impl TextWords<'_> {
    #[inline(never)]
    fn write_wide(&mut self, c: char) -> fmt::Result {
        self.append(c.encode_utf8(&mut [0; 4]).as_bytes());
        Ok(())
    }
}

/// Encodes visited field values into a [`Fields`]: primitives as their tag
/// and payload words, text packed in place.
pub(super) struct Visitor<'a>(pub(super) &'a mut Fields);

impl Visitor<'_> {
    /// Writes one field's value with `encode`, and its range.
    #[inline]
    fn put(&mut self, field: &Field, encode: impl FnOnce(&mut Vec<u64>)) {
        let idx = field.index();
        if idx >= 64 {
            return;
        }
        let f = &mut *self.0;
        let start = f.words.len() as u32;
        encode(&mut f.words);
        f.push_range(idx as u32, start);
    }

    #[inline]
    fn put2(&mut self, field: &Field, ty: u64, payload: u64) {
        self.put(field, |w| w.extend_from_slice(&[ty, payload]));
    }

    /// A value as its `Display` (or `Debug`) text, formatted into the words.
    fn put_fmt(&mut self, field: &Field, args: fmt::Arguments<'_>) {
        self.put(field, |words| {
            let at = words.len();
            words.push(0);
            let mut text = TextWords { words, len: 0 };
            let _ = text.write_fmt(args); // a failing impl leaves what it wrote
            let len = text.len as u64;
            words[at] = tag(T_STR, len);
        })
    }
}

impl Visit for Visitor<'_> {
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put2(field, T_DOUBLE, value.to_bits())
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put2(field, T_INT, value as u64)
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put2(field, T_UINT, value)
    }
    fn record_i128(&mut self, field: &Field, value: i128) {
        match i64::try_from(value) {
            Ok(v) => self.record_i64(field, v),
            Err(_) => self.put_fmt(field, format_args!("{value}")),
        }
    }
    fn record_u128(&mut self, field: &Field, value: u128) {
        match u64::try_from(value) {
            Ok(v) => self.record_u64(field, v),
            Err(_) => self.put_fmt(field, format_args!("{value}")),
        }
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, |w| w.push(tag(T_BOOL, value as u64)))
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, |w| push_str(w, value))
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.put_fmt(field, format_args!("{value}"))
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put_fmt(field, format_args!("{value:?}"))
    }
}

thread_local! {
    static SCRATCH: RefCell<Fields> = RefCell::new(Fields::default());
}

/// Runs `f` with this thread's cleared scratch (a fresh one if it is in use:
/// a `Debug` impl that emits an event while being formatted).
pub(super) fn with_scratch<R>(f: impl FnOnce(&mut Fields) -> R) -> R {
    let mut f = Some(f);
    let r = SCRATCH
        .try_with(|s| {
            s.try_borrow_mut().ok().map(|mut s| {
                s.clear();
                (f.take().unwrap())(&mut s)
            })
        })
        .ok()
        .flatten();
    match r {
        Some(r) => r,
        None => (f.take().unwrap())(&mut Fields::default()),
    }
}

/// Pre-encoded arg words, written as they are.
pub(super) struct Words<'a>(pub(super) &'a [u64]);

impl ArgList for Words<'_> {
    const LEN: usize = 0;
    fn words(&self) -> usize {
        self.0.len()
    }
    fn encode(&self, out: &mut dyn WordSink) {
        for &w in self.0 {
            out.push(w);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::args::encode_bytes;

    /// Text formatted in pieces into the words is the text written at once.
    #[test]
    fn text_formatted_in_pieces_packs_as_one_string() {
        let pieces = [
            "",
            "a",
            "bcdefgh",
            "",
            "ijklmnopqrs",
            "tu",
            "vwxyz0123456789",
            "é€",
        ];
        for n in 0..=pieces.len() {
            let whole: String = pieces[..n].concat();
            let mut expect = vec![7u64];
            encode_bytes(whole.as_bytes(), &mut expect);
            let mut words = vec![7u64];
            let mut fields = Fields {
                words: std::mem::take(&mut words),
                ..Fields::default()
            };
            let field = TEST_META.fields().field("v").unwrap();
            Visitor(&mut fields).put_fmt(&field, format_args!("{}", Pieces(&pieces[..n])));
            assert_eq!(fields.words, expect, "{whole:?}");
            assert_eq!(fields.ranges, [(0, 1, expect.len() as u32)]);
        }
    }

    /// Text cut in two or three pieces at every pair of places packs as the
    /// text's bytes do, eight to a word, the last one padded with zeros.
    #[test]
    fn text_cut_anywhere_packs_as_its_bytes() {
        let text = "0123456789abcdefghijé€xyz";
        let mut expect = vec![7u64, tag(T_STR, text.len() as u64)];
        for c in text.as_bytes().chunks(8) {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            expect.push(u64::from_le_bytes(w));
        }
        let b = text.as_bytes();
        for i in 0..=b.len() {
            for j in i..=b.len() {
                let (Ok(p0), Ok(p1), Ok(p2)) = (
                    std::str::from_utf8(&b[..i]),
                    std::str::from_utf8(&b[i..j]),
                    std::str::from_utf8(&b[j..]),
                ) else {
                    continue; // a cut inside a character
                };
                let mut fields = Fields {
                    words: vec![7u64],
                    ..Fields::default()
                };
                let field = TEST_META.fields().field("v").unwrap();
                let pieces = [p0, p1, p2];
                Visitor(&mut fields).put_fmt(&field, format_args!("{}", Pieces(&pieces)));
                assert_eq!(fields.words, expect, "{pieces:?}");
            }
        }
    }

    /// Text written a character at a time (`write_char`, as `Debug` of
    /// byte strings does), mixed with pieces of every length, packs as its
    /// bytes: every prefix of a text with one- to four-byte characters.
    #[test]
    fn text_written_a_character_at_a_time_packs_as_its_bytes() {
        let text = "ab\"c\u{7f}é€𝄞0123456789abcdefghij\r\nxyz";
        for (n, _) in text.char_indices().chain([(text.len(), ' ')]) {
            let t = &text[..n];
            let mut expect = vec![7u64, tag(T_STR, t.len() as u64)];
            for c in t.as_bytes().chunks(8) {
                let mut w = [0u8; 8];
                w[..c.len()].copy_from_slice(c);
                expect.push(u64::from_le_bytes(w));
            }
            for long_every in [0, 3] {
                let mut fields = Fields {
                    words: vec![7u64],
                    ..Fields::default()
                };
                let field = TEST_META.fields().field("v").unwrap();
                let chars = Chars(t, long_every);
                Visitor(&mut fields).put_fmt(&field, format_args!("{chars:?}"));
                assert_eq!(fields.words, expect, "{t:?}");
            }
        }
    }

    /// A value given whole (`record_str`, as `&str` fields are), through
    /// `Display` (`%`, one `write_str`), a character at a time and in
    /// pieces packs to the same words, which are the encoder's own
    /// packing of its bytes: empty, every length around the word's, text
    /// that JSON must escape, every UTF-8 width, and values of 64 KiB and
    /// 1 MiB (grown into a vector that had no room). `?` gives `Debug`'s
    /// escaped text, packed the same way.
    #[test]
    fn whole_and_formatted_values_pack_the_same() {
        let mut texts: Vec<String> = (0..=40)
            .map(|n| "abcdefghij".repeat(4)[..n].to_string())
            .collect();
        texts.push("\"quoted\" \\ back\tslash\r\n\0\u{1}\u{1f}\u{7f}".to_string());
        texts.push("é€𝄞 ünïcödé \u{10ffff}\u{fffd}".to_string());
        texts.push("x".repeat(65_536));
        texts.push("0123456789é€𝄞".repeat(60_000)); // about 1 MiB
        let field = TEST_META.fields().field("v").unwrap();
        let packed = |put: &dyn Fn(&mut Visitor<'_>)| {
            let mut fields = Fields {
                words: vec![7u64],
                ..Fields::default()
            };
            fields.words.shrink_to_fit();
            put(&mut Visitor(&mut fields));
            fields.words
        };
        for t in &texts {
            let mut expect = vec![7u64];
            encode_bytes(t.as_bytes(), &mut expect);
            let whole = packed(&|v| v.record_str(&field, t));
            assert!(whole == expect, "record_str, {} bytes", t.len());
            let display = packed(&|v| v.record_debug(&field, &tracing_core::field::display(t)));
            assert!(display == expect, "Display, {} bytes", t.len());
            let chars = packed(&|v| v.record_debug(&field, &Chars(t, 0)));
            assert!(chars == expect, "per character, {} bytes", t.len());
            let mixed = packed(&|v| v.record_debug(&field, &Chars(t, 3)));
            assert!(mixed == expect, "in pieces, {} bytes", t.len());
            let mut escaped = vec![7u64];
            encode_bytes(format!("{t:?}").as_bytes(), &mut escaped);
            let debug = packed(&|v| v.record_debug(&field, &t.as_str()));
            assert!(debug == escaped, "Debug, {} bytes", t.len());
        }
    }

    /// Writes its text a character at a time; every `.1`-th character (if
    /// not 0) starts a piece of up to 12 bytes written at once instead.
    struct Chars<'a>(&'a str, usize);

    impl fmt::Debug for Chars<'_> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            let mut rest = self.0;
            let mut i = 0;
            while let Some(c) = rest.chars().next() {
                i += 1;
                if self.1 != 0 && i % self.1 == 0 {
                    let mut end = rest.len().min(12);
                    while !rest.is_char_boundary(end) {
                        end -= 1;
                    }
                    f.write_str(&rest[..end])?;
                    rest = &rest[end..];
                } else {
                    f.write_char(c)?;
                    rest = &rest[c.len_utf8()..];
                }
            }
            Ok(())
        }
    }

    struct Pieces<'a>(&'a [&'a str]);

    impl fmt::Display for Pieces<'_> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            self.0.iter().try_for_each(|p| f.write_str(p))
        }
    }

    struct TestCallsite;
    static TEST_CALLSITE: TestCallsite = TestCallsite;
    static TEST_META: tracing_core::Metadata<'static> = tracing_core::metadata! {
        name: "text",
        target: module_path!(),
        level: tracing_core::Level::INFO,
        fields: &["v"],
        callsite: &TEST_CALLSITE,
        kind: tracing_core::metadata::Kind::EVENT,
    };
    impl tracing_core::Callsite for TestCallsite {
        fn set_interest(&self, _: tracing_core::Interest) {}
        fn metadata(&self) -> &tracing_core::Metadata<'_> {
            &TEST_META
        }
    }
}
