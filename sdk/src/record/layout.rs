//! The records recording threads write into their ring, and their decoding.
//!
//! Layouts, in 64-bit words (header format in `header`):
//!
//! ```text
//! BEGIN        [hdr(site | depth << 24), ts, args...]
//! END          [hdr(depth), ts]
//! INSTANT      [hdr(site), ts, args...]
//! COUNTER_I64  [hdr(site), ts, value as u64]
//! COUNTER_F64  [hdr(site), ts, value bits]
//! ASYNC_BEGIN  [hdr(site), ts, id, args...]
//! ASYNC_END    [hdr(site), ts, id, args...]
//! END_ARGS     [hdr(site | depth << 24), ts, args...]   (an END with args for its slice)
//! FLOW         [hdr, ts, flow ids...]   (flows of the next END / END_ARGS / ASYNC_END)
//! EVENT        [hdr(site | op << 24), ts, fields...]   (the typed event API, `events`)
//! BEGIN_TT     [hdr(site | depth << 24), ts, thread ns, args...]   (BEGIN with thread time)
//! END_TT       [hdr(depth), ts, thread ns]                          (END with thread time)
//! LOST         [hdr, ts, count]            (written by the ring)
//! OTEL span    [hdr(site | 0 << 24), end ts, created ts, trace id hi, lo, span id, parent id, flags, [tracestate,] args...]
//! OTEL event   [hdr(site | 1 << 24), ts, span id, args...]
//! ```
//!
//! OTEL records are written only while an OTLP exporter runs
//! ([`OTEL_RECORDS`]): a `tracing` span's whole life at its close, an event
//! inside a span with the span's id; a span of a trace with a `tracestate`
//! has [`OTEL_TRACESTATE`] set in its flags word and the text (a string
//! value) before its args. [`parse`] skips them (no file encoder
//! sees them); the exporter's output reads them with [`parse_otel`].
//!
//! An EVENT record carries one event of any Trace Event Format phase with
//! values known only at run time (names, ids, stacks, args with dynamic
//! keys). `op` (8 bits) says which phase (`event::op`); the fields are a
//! sequence of `[field id word, value]`, each value in the `args` word
//! encoding (`event::field` lists the ids). Encoders decode them with
//! `encode::event`. BEGIN_TT / END_TT are what the macros write instead of
//! BEGIN / END when the session records thread CPU time.
//!
//! `site` is the call site id (24 bits), `depth` the number of recorded scopes
//! open on the thread when the scope began (16 bits, saturating). Encoders use
//! the depth to pair ends with begins even when records were lost in between.
//! `args` are the values of the site's arguments in order (see `args`).

use crate::record::args::{ArgList, ArgReader, ArgValue, StrWords, WordSink};
use crate::record::header::{self, header_kind, header_len, header_payload, make_header};
use crate::record::ring::{Reservation, Ring};

pub(crate) const KIND_LOST: u64 = header::KIND_LOST;
pub(crate) const KIND_BEGIN: u64 = 2;
pub(crate) const KIND_END: u64 = 3;
pub(crate) const KIND_INSTANT: u64 = 4;
pub(crate) const KIND_COUNTER_I64: u64 = 5;
pub(crate) const KIND_COUNTER_F64: u64 = 6;
pub(crate) const KIND_ASYNC_BEGIN: u64 = 7;
pub(crate) const KIND_ASYNC_END: u64 = 8;
// Kinds of the `tracing` layer, numbered from the top (15 down) so that
// kinds added for the macros (9 up) never collide with them.
/// END that also carries args (values recorded while the slice was open).
pub(crate) const KIND_END_ARGS: u64 = 14;
/// Bit 62 of a flow id: the id is the same in every process (an
/// OpenTelemetry trace's crossing, `otlp`), not made process-unique by the
/// encoders ([`scoped_flow`]).
pub(crate) const FLOW_GLOBAL: u64 = 1 << 62;

/// A FLOW word's id as the encoders write it: process-scoped ids (a
/// counter) mixed with `scope` (the process's), global ones as they are.
#[inline]
pub(crate) fn scoped_flow(flow: u64, scope: u64) -> u64 {
    let id = flow & !FLOW_IN;
    if id & FLOW_GLOBAL != 0 {
        id
    } else {
        id ^ scope
    }
}

/// Flow ids bound to the slice that the thread's next end record closes.
pub(crate) const KIND_FLOW: u64 = 15;
/// Bit 63 of a word of a FLOW record: the flow comes *into* the slice (it
/// is the flow's destination); clear: the slice is the flow's source. The
/// other 63 bits are the flow id, unique in the process.
pub(crate) const FLOW_IN: u64 = 1 << 63;
// Kinds of the typed event API and of thread time (numbered from 9 up).
/// An event of the typed event API (`events`): op and tagged fields.
pub(crate) const KIND_EVENT: u64 = 9;
/// BEGIN with the thread's CPU time after the timestamp.
pub(crate) const KIND_BEGIN_TT: u64 = 10;
/// END with the thread's CPU time after the timestamp.
pub(crate) const KIND_END_TT: u64 = 11;

/// A span's or event's OpenTelemetry record (feature `otlp`; layouts in the
/// module doc). Skipped by [`parse`].
#[cfg_attr(not(feature = "otlp"), allow(dead_code))]
pub(crate) const KIND_OTEL: u64 = 12;
/// `op` of an OTEL record: a finished span.
#[cfg_attr(not(feature = "otlp"), allow(dead_code))]
pub(crate) const OTEL_SPAN: u64 = 0;
/// `op` of an OTEL record: an event inside a span.
#[cfg_attr(not(feature = "otlp"), allow(dead_code))]
pub(crate) const OTEL_EVENT: u64 = 1;
/// Bit of an OTEL span record's flags word (above the W3C flags' byte):
/// the trace's `tracestate` is its first arg, a string.
#[cfg_attr(not(feature = "otlp"), allow(dead_code))]
pub(crate) const OTEL_TRACESTATE: u64 = 1 << 8;
/// Whether the session wants OTEL records (an OTLP exporter runs): set at
/// its start, cleared at its stop. Relaxed: a record more or less around
/// either is harmless (the exporter counts what it gets).
pub(crate) static OTEL_RECORDS: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// A decoded OTEL record.
#[cfg_attr(not(feature = "otlp"), allow(dead_code))]
#[derive(Debug)]
pub(crate) enum OtelRecord<'a> {
    Span {
        end: u64,
        created: u64,
        trace: [u64; 2],
        span: u64,
        parent: u64,
        /// The W3C flags.
        flags: u8,
        /// The trace's `tracestate`, if it has one.
        tracestate: Option<StrWords<'a>>,
        site: u32,
        args: &'a [u64],
    },
    Event {
        ts: u64,
        span: u64,
        site: u32,
        args: &'a [u64],
    },
}

/// The OTEL records among `words` (every other record skipped whole).
#[cfg_attr(not(feature = "otlp"), allow(dead_code))]
pub(crate) fn parse_otel(words: &[u64]) -> impl Iterator<Item = OtelRecord<'_>> {
    let mut pos = 0;
    std::iter::from_fn(move || loop {
        let hdr = *words.get(pos)?;
        let len = header_len(hdr) as usize;
        if len < 2 || pos + len > words.len() {
            pos = words.len();
            return None;
        }
        let w = &words[pos..pos + len];
        pos += len;
        if header_kind(hdr) != KIND_OTEL {
            continue;
        }
        let payload = header_payload(hdr);
        let site = (payload & MAX_SITE_ID as u64) as u32;
        match payload >> 24 {
            OTEL_SPAN if len >= 8 => {
                let mut args = &w[8..];
                let mut tracestate = None;
                if w[7] & OTEL_TRACESTATE != 0 {
                    let mut r = ArgReader::new(args);
                    let ArgValue::Str(s) = r.next() else {
                        continue; // not as written: skipped
                    };
                    tracestate = Some(s);
                    args = args.get(r.pos()..).unwrap_or(&[]);
                }
                return Some(OtelRecord::Span {
                    end: w[1],
                    created: w[2],
                    trace: [w[3], w[4]],
                    span: w[5],
                    parent: w[6],
                    flags: w[7] as u8,
                    tracestate,
                    site,
                    args,
                });
            }
            OTEL_EVENT if len >= 3 => {
                return Some(OtelRecord::Event {
                    ts: w[1],
                    span: w[2],
                    site,
                    args: &w[3..],
                })
            }
            _ => continue,
        }
    })
}

/// Call site ids must fit in 24 bits.
pub(crate) const MAX_SITE_ID: u32 = (1 << 24) - 1;
pub(crate) const MAX_DEPTH: u32 = u16::MAX as u32;

impl WordSink for Reservation<'_> {
    #[inline(always)]
    fn push(&mut self, word: u64) {
        Reservation::push(self, word)
    }
}

/// Writes one record of `kind` with `fixed` words after the timestamp and the
/// encoded `args`. Returns false if the ring had no room (the ring counts it).
#[inline(always)]
pub(crate) fn write<A: ArgList + ?Sized>(
    ring: &Ring,
    kind: u64,
    payload: u64,
    ts: u64,
    fixed: &[u64],
    args: &A,
) -> bool {
    let len = 2 + fixed.len() + args.words();
    match ring.reserve(len, ts) {
        Some(mut r) => {
            r.push(make_header(kind, len, payload));
            r.push(ts);
            r.push_words(fixed);
            args.encode(&mut r);
            r.commit();
            true
        }
        None => false,
    }
}

/// A decoded record, borrowing its argument words.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Record<'a> {
    Begin {
        ts: u64,
        site: u32,
        depth: u32,
        args: &'a [u64],
    },
    End {
        ts: u64,
        depth: u32,
    },
    Instant {
        ts: u64,
        site: u32,
        args: &'a [u64],
    },
    CounterI64 {
        ts: u64,
        site: u32,
        value: i64,
    },
    CounterF64 {
        ts: u64,
        site: u32,
        value: f64,
    },
    AsyncBegin {
        ts: u64,
        site: u32,
        id: u64,
        args: &'a [u64],
    },
    AsyncEnd {
        ts: u64,
        site: u32,
        id: u64,
        args: &'a [u64],
    },
    EndArgs {
        ts: u64,
        site: u32,
        depth: u32,
        args: &'a [u64],
    },
    Flow {
        ts: u64,
        ids: &'a [u64],
    },
    /// An event of the typed event API: `op` and its tagged fields.
    Event {
        ts: u64,
        site: u32,
        op: u8,
        fields: &'a [u64],
    },
    BeginTt {
        ts: u64,
        site: u32,
        depth: u32,
        tts: u64,
        args: &'a [u64],
    },
    EndTt {
        ts: u64,
        depth: u32,
        tts: u64,
    },
    Lost {
        ts: u64,
        count: u64,
    },
}

impl Record<'_> {
    pub(crate) fn ts(&self) -> u64 {
        match *self {
            Record::Begin { ts, .. }
            | Record::End { ts, .. }
            | Record::Instant { ts, .. }
            | Record::CounterI64 { ts, .. }
            | Record::CounterF64 { ts, .. }
            | Record::AsyncBegin { ts, .. }
            | Record::AsyncEnd { ts, .. }
            | Record::EndArgs { ts, .. }
            | Record::Flow { ts, .. }
            | Record::Event { ts, .. }
            | Record::BeginTt { ts, .. }
            | Record::EndTt { ts, .. }
            | Record::Lost { ts, .. } => ts,
        }
    }
}

/// Iterates over the whole records in `words` (as drained from a ring).
pub(crate) fn parse(words: &[u64]) -> Records<'_> {
    Records { words, pos: 0 }
}

pub(crate) struct Records<'a> {
    words: &'a [u64],
    pos: usize,
}

impl<'a> Iterator for Records<'a> {
    type Item = Record<'a>;

    fn next(&mut self) -> Option<Record<'a>> {
        loop {
            let hdr = *self.words.get(self.pos)?;
            let len = header_len(hdr) as usize;
            if len < 2 || self.pos + len > self.words.len() {
                self.pos = self.words.len();
                return None;
            }
            let w = &self.words[self.pos..self.pos + len];
            self.pos += len;
            let payload = header_payload(hdr);
            let site = (payload & MAX_SITE_ID as u64) as u32;
            let ts = w[1];
            let rec = match header_kind(hdr) {
                KIND_BEGIN => Record::Begin {
                    ts,
                    site,
                    depth: (payload >> 24) as u32,
                    args: &w[2..],
                },
                KIND_END => Record::End {
                    ts,
                    depth: payload as u32,
                },
                KIND_INSTANT => Record::Instant {
                    ts,
                    site,
                    args: &w[2..],
                },
                KIND_COUNTER_I64 if len >= 3 => Record::CounterI64 {
                    ts,
                    site,
                    value: w[2] as i64,
                },
                KIND_COUNTER_F64 if len >= 3 => Record::CounterF64 {
                    ts,
                    site,
                    value: f64::from_bits(w[2]),
                },
                KIND_ASYNC_BEGIN if len >= 3 => Record::AsyncBegin {
                    ts,
                    site,
                    id: w[2],
                    args: &w[3..],
                },
                KIND_ASYNC_END if len >= 3 => Record::AsyncEnd {
                    ts,
                    site,
                    id: w[2],
                    args: &w[3..],
                },
                KIND_END_ARGS => Record::EndArgs {
                    ts,
                    site,
                    depth: (payload >> 24) as u32,
                    args: &w[2..],
                },
                KIND_FLOW => Record::Flow { ts, ids: &w[2..] },
                KIND_EVENT => Record::Event {
                    ts,
                    site,
                    op: (payload >> 24) as u8,
                    fields: &w[2..],
                },
                KIND_BEGIN_TT if len >= 3 => Record::BeginTt {
                    ts,
                    site,
                    depth: (payload >> 24) as u32,
                    tts: w[2],
                    args: &w[3..],
                },
                KIND_END_TT if len >= 3 => Record::EndTt {
                    ts,
                    depth: payload as u32,
                    tts: w[2],
                },
                KIND_LOST if len >= 3 => Record::Lost { ts, count: w[2] },
                _ => continue, // unknown kinds are skipped whole
            };
            return Some(rec);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::header::make_header;

    /// An OTEL record between two others: the file encoders' reader skips
    /// it whole, the exporter's reads it and nothing else.
    #[test]
    fn otel_records_are_read_by_the_exporter_only() {
        let mut words = vec![make_header(KIND_INSTANT, 3, 5), 10, 7];
        words.extend([
            make_header(KIND_OTEL, 9, 6 | OTEL_SPAN << 24),
            20,
            11,
            1,
            2,
            3,
            4,
            1,
            8,
        ]);
        words.extend([make_header(KIND_OTEL, 3, 6 | OTEL_EVENT << 24), 15, 3]);
        words.extend([make_header(KIND_END, 2, 0), 30]);
        let kinds: Vec<u64> = parse(&words)
            .map(|r| match r {
                Record::Instant { ts, .. } | Record::End { ts, .. } => ts,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(kinds, [10, 30]);
        let otel: Vec<String> = parse_otel(&words).map(|r| format!("{r:?}")).collect();
        assert_eq!(otel.len(), 2);
        assert!(otel[0].contains("Span { end: 20, created: 11, trace: [1, 2], span: 3, parent: 4"));
        assert!(otel[1].contains("Event { ts: 15, span: 3, site: 6"));
        // Cut short, or an unknown op: nothing, no panic.
        assert_eq!(parse_otel(&words[3..8]).count(), 0);
        let odd = [make_header(KIND_OTEL, 3, 7 << 24), 1, 2];
        assert_eq!(parse_otel(&odd).count(), 0);
    }

    /// A span of a trace with a `tracestate`: the text first, then its
    /// args; the flag set without a string after it: skipped, no panic.
    #[test]
    fn an_otel_span_carries_its_tracestate_before_its_args() {
        let text = "congo=t61rcWkgMzE";
        let mut words = vec![0, 20, 11, 1, 2, 3, 4, 1 | OTEL_TRACESTATE];
        crate::record::args::encode_bytes(text.as_bytes(), &mut words);
        words.extend([crate::record::args::T_INT, 42]); // an int arg: tag, value
        words[0] = make_header(KIND_OTEL, words.len(), 6 | OTEL_SPAN << 24);
        let spans: Vec<_> = parse_otel(&words).collect();
        let [OtelRecord::Span {
            flags,
            tracestate: Some(state),
            args,
            ..
        }] = spans.as_slice()
        else {
            panic!("{spans:?}");
        };
        assert_eq!((*flags, state.to_string_lossy().as_str()), (1, text));
        assert_eq!(*args, [crate::record::args::T_INT, 42]);
        let flagged_bare = [
            make_header(KIND_OTEL, 8, 6 | OTEL_SPAN << 24),
            20,
            11,
            1,
            2,
            3,
            4,
            1 | OTEL_TRACESTATE,
        ];
        assert_eq!(parse_otel(&flagged_bare).count(), 0);
    }

    /// A process's flow ids are mixed with its scope, global ones kept as
    /// they are (the same in every process); the direction bit is dropped.
    #[test]
    fn global_flow_ids_are_not_scoped() {
        assert_eq!(scoped_flow(5 | FLOW_IN, 0x30), 5 ^ 0x30);
        assert_eq!(
            scoped_flow(FLOW_GLOBAL | 5 | FLOW_IN, 0x30),
            FLOW_GLOBAL | 5
        );
    }
}
