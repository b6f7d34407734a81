//! Decoding of the typed event API's EVENT records (see `events`) into an
//! [`EventView`] both encoders read, and the flags by which encoders keep
//! such events (and thread times) in a [`ScopeStack`](super::ScopeStack).

#![forbid(unsafe_code)]

use super::OpenScope;
use crate::record::args::{ArgReader, ArgValue};
use crate::record::event::field;

/// An id as recorded: value, kind (0 `id`, 1 `id2.local`, 2 `id2.global`)
/// and scope.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct IdView {
    pub(crate) value: u64,
    pub(crate) kind: u64,
    pub(crate) scope: Option<String>,
}

/// The fields of one EVENT record. Nested values (args, snapshot) stay
/// encoded: they are the word ranges to read with an `ArgReader`.
#[derive(Debug, Default)]
pub(crate) struct EventView<'a> {
    pub(crate) name: Option<String>,
    pub(crate) depth: Option<u32>,
    /// The ARGS dict (starting at its tag word).
    pub(crate) args: Option<&'a [u64]>,
    pub(crate) stack_raw: Option<Vec<String>>,
    pub(crate) stack_frames: Option<Vec<(String, String)>>,
    pub(crate) end_stack_raw: Option<Vec<String>>,
    pub(crate) end_stack_frames: Option<Vec<(String, String)>>,
    pub(crate) cname: Option<String>,
    pub(crate) tts: Option<u64>,
    pub(crate) tdur: Option<u64>,
    pub(crate) ts: Option<u64>,
    pub(crate) dur: Option<u64>,
    pub(crate) instant_scope: u64,
    pub(crate) id: Option<IdView>,
    pub(crate) counter_id: Option<u64>,
    pub(crate) unit: Option<u64>,
    pub(crate) unit_name: Option<String>,
    pub(crate) bind_enclosing: bool,
    /// The snapshot value (starting at its tag word).
    pub(crate) snapshot: Option<&'a [u64]>,
    pub(crate) base_type: Option<String>,
    pub(crate) snapshot_category: Option<String>,
    pub(crate) linked_id: Option<u64>,
    pub(crate) sync_id: Option<String>,
    pub(crate) issue_ts: Option<u64>,
    pub(crate) sort_index: Option<i64>,
    pub(crate) labels: Option<Vec<String>>,
    pub(crate) cpu: Option<u64>,
    pub(crate) weight: Option<u64>,
    pub(crate) level: Option<u64>,
    pub(crate) message: Option<String>,
    /// A custom track's path, root first.
    pub(crate) track: Option<Vec<String>>,
}

impl<'a> EventView<'a> {
    /// Decodes `[field id, value]...`; unknown fields are skipped whole and
    /// malformed input reads as absent fields, never a panic.
    pub(crate) fn decode(words: &'a [u64]) -> EventView<'a> {
        let mut v = EventView::default();
        let mut r = ArgReader::new(words);
        let mut id_kind = 0;
        let mut id_scope = None;
        let mut id_value = None;
        while !r.at_end() {
            let f = r.skip_word();
            match f {
                field::NAME => v.name = string(&mut r),
                field::DEPTH => v.depth = uint(&mut r).map(|d| d as u32),
                field::ARGS => v.args = Some(range(&mut r, words)),
                field::STACK => v.stack_raw = Some(strings(&mut r)),
                field::STACK_FRAMES => v.stack_frames = Some(pairs(strings(&mut r))),
                field::END_STACK => v.end_stack_raw = Some(strings(&mut r)),
                field::END_STACK_FRAMES => v.end_stack_frames = Some(pairs(strings(&mut r))),
                field::CNAME => v.cname = string(&mut r),
                field::TTS => v.tts = uint(&mut r),
                field::TDUR => v.tdur = uint(&mut r),
                field::TS => v.ts = uint(&mut r),
                field::DUR => v.dur = uint(&mut r),
                field::INSTANT_SCOPE => v.instant_scope = uint(&mut r).unwrap_or(0),
                field::ID => id_value = uint(&mut r),
                field::ID_KIND => id_kind = uint(&mut r).unwrap_or(0),
                field::ID_SCOPE => id_scope = string(&mut r),
                field::COUNTER_ID => v.counter_id = uint(&mut r),
                field::UNIT => v.unit = uint(&mut r),
                field::UNIT_NAME => v.unit_name = string(&mut r),
                field::BIND_ENCLOSING => {
                    v.bind_enclosing = matches!(r.next(), ArgValue::Bool(true))
                }
                field::SNAPSHOT => v.snapshot = Some(range(&mut r, words)),
                field::BASE_TYPE => v.base_type = string(&mut r),
                field::SNAPSHOT_CATEGORY => v.snapshot_category = string(&mut r),
                field::LINKED_ID => v.linked_id = uint(&mut r),
                field::SYNC_ID => v.sync_id = string(&mut r),
                field::ISSUE_TS => v.issue_ts = uint(&mut r),
                field::SORT_INDEX => {
                    v.sort_index = match r.next() {
                        ArgValue::Int(i) => Some(i),
                        ArgValue::Uint(u) => Some(u as i64),
                        _ => None,
                    }
                }
                field::LABELS => v.labels = Some(strings(&mut r)),
                field::CPU => v.cpu = uint(&mut r),
                field::WEIGHT => v.weight = uint(&mut r),
                field::LEVEL => v.level = uint(&mut r),
                field::MESSAGE => v.message = string(&mut r),
                field::TRACK => v.track = Some(strings(&mut r)),
                _ => r.skip(),
            }
        }
        v.id = id_value.map(|value| IdView {
            value,
            kind: id_kind,
            scope: id_scope,
        });
        v
    }

    /// The raw stack (start or end) as strings, frames as their names.
    pub(crate) fn stack_names(&self, end: bool) -> Option<Vec<String>> {
        let (raw, frames) = if end {
            (&self.end_stack_raw, &self.end_stack_frames)
        } else {
            (&self.stack_raw, &self.stack_frames)
        };
        raw.clone().or_else(|| {
            frames
                .as_ref()
                .map(|f| f.iter().map(|(n, _)| n.clone()).collect())
        })
    }
}

fn string(r: &mut ArgReader<'_>) -> Option<String> {
    match r.next() {
        ArgValue::Str(s) => Some(s.to_string_lossy()),
        _ => None,
    }
}

fn uint(r: &mut ArgReader<'_>) -> Option<u64> {
    match r.next() {
        ArgValue::Uint(u) => Some(u),
        ArgValue::Int(i) => Some(i as u64),
        _ => None,
    }
}

/// The words of the next value, skipping it.
fn range<'a>(r: &mut ArgReader<'_>, words: &'a [u64]) -> &'a [u64] {
    let start = r.pos();
    r.skip();
    &words[start.min(words.len())..r.pos().min(words.len())]
}

/// An array of strings and pointers (pointers as `0x…`).
fn strings(r: &mut ArgReader<'_>) -> Vec<String> {
    match r.next() {
        ArgValue::Array(n) => (0..n.min(1 << 16))
            .map_while(|_| {
                if r.at_end() {
                    return None;
                }
                Some(match r.next() {
                    ArgValue::Str(s) => s.to_string_lossy(),
                    ArgValue::Pointer(p) | ArgValue::Uint(p) => format!("0x{p:x}"),
                    ArgValue::Int(i) => i.to_string(),
                    _ => String::new(),
                })
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn pairs(v: Vec<String>) -> Vec<(String, String)> {
    let mut it = v.into_iter();
    let mut out = Vec::new();
    while let (Some(a), Some(b)) = (it.next(), it.next()) {
        out.push((a, b));
    }
    out
}

/// `OpenScope.site` flags: how its `args` words are to be read.
///
/// * `OPEN_DYNAMIC`: a slice of the typed event API; `args` holds the
///   begin record's fields (name, args dict, stack, color, thread time).
/// * `OPEN_TTS`: a macro scope with thread time; `args[0]` is the thread
///   CPU time at the begin, the site's arg words follow.
///
/// Site ids use 24 bits, so both flags are free bits.
pub(crate) const OPEN_DYNAMIC: u32 = 1 << 31;
pub(crate) const OPEN_TTS: u32 = 1 << 30;
const OPEN_SITE_MASK: u32 = (1 << 24) - 1;

/// The call site id of an open scope, without flags.
pub(crate) fn open_site(scope: &OpenScope) -> u32 {
    scope.site & OPEN_SITE_MASK
}

/// The thread time an open macro scope began at, and its args words.
pub(crate) fn open_tts(scope: &OpenScope) -> (Option<u64>, &[u64]) {
    if scope.site & OPEN_TTS != 0 {
        (
            scope.args.first().copied(),
            scope.args.get(1..).unwrap_or(&[]),
        )
    } else {
        (None, &scope.args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::args::TraceValue;

    #[test]
    fn unknown_and_malformed_fields_read_as_absent() {
        let mut w = vec![999u64];
        42u64.encode(&mut w);
        w.push(field::NAME);
        "n".encode(&mut w);
        w.push(field::TS); // truncated: no value
        let v = EventView::decode(&w);
        assert_eq!(v.name.as_deref(), Some("n"));
        assert_eq!(v.ts, None);
    }
}
