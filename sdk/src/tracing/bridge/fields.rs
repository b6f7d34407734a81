//! `tracing` field values as ringtrace arg words.

use crate::record::args::{ArgList, TraceValue, WordSink};
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
    /// Formatting buffer for `Debug` values and messages.
    text: String,
    /// Words in field order, when visit order was not field order.
    sorted: Vec<u64>,
}

impl Fields {
    fn clear(&mut self) {
        self.words.clear();
        self.ranges.clear();
        self.sorted.clear();
    }

    pub(super) fn mask(&self) -> u64 {
        self.ranges.iter().fold(0, |m, &(i, _, _)| m | 1 << i)
    }

    pub(super) fn in_order(&self) -> bool {
        self.ranges.windows(2).all(|w| w[0].0 < w[1].0)
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
    pub(super) fn ordered(&mut self) -> &mut Vec<u64> {
        if self.in_order() {
            return &mut self.words;
        }
        let mut sorted = std::mem::take(&mut self.sorted);
        sorted.clear();
        for (_, s, e) in self.ordered_ranges() {
            sorted.extend_from_slice(&self.words[s as usize..e as usize]);
        }
        self.sorted = sorted;
        &mut self.sorted
    }
}

/// Encodes visited field values into a [`Fields`].
pub(super) struct Visitor<'a>(pub(super) &'a mut Fields);

impl Visitor<'_> {
    fn put(&mut self, field: &Field, value: &dyn TraceValue) {
        let idx = field.index();
        if idx >= 64 {
            return;
        }
        let f = &mut *self.0;
        let start = f.words.len() as u32;
        value.encode(&mut f.words);
        f.ranges.push((idx as u32, start, f.words.len() as u32));
    }

    fn put_text(&mut self, field: &Field, fill: impl FnOnce(&mut String)) {
        let mut text = std::mem::take(&mut self.0.text);
        text.clear();
        fill(&mut text);
        self.put(field, &text.as_str());
        self.0.text = text;
    }
}

impl Visit for Visitor<'_> {
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, &value)
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, &value)
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, &value)
    }
    fn record_i128(&mut self, field: &Field, value: i128) {
        match i64::try_from(value) {
            Ok(v) => self.put(field, &v),
            Err(_) => self.put_text(field, |t| {
                let _ = write!(t, "{value}");
            }),
        }
    }
    fn record_u128(&mut self, field: &Field, value: u128) {
        match u64::try_from(value) {
            Ok(v) => self.put(field, &v),
            Err(_) => self.put_text(field, |t| {
                let _ = write!(t, "{value}");
            }),
        }
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, &value)
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, &value)
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.put_text(field, |t| {
            let _ = write!(t, "{value}");
        })
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put_text(field, |t| {
            let _ = write!(t, "{value:?}");
        })
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
