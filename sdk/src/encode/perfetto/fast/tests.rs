//! The fast path against the general path: the same records through both
//! give the same bytes, across interning clears, losses and every option.

use super::*;
use crate::encode::perfetto::fields::{LOSS_OVERWRITE, LOSS_PRESENT};
use crate::encode::perfetto::PerfettoOptions;
use crate::encode::{Batch, Encoder, ProcessInfo, Sites};
use crate::record::args::TraceValue;
use crate::record::clock::Calibration;
use crate::record::header::make_header;
use crate::record::layout::{
    KIND_ASYNC_BEGIN, KIND_ASYNC_END, KIND_END_ARGS, KIND_FLOW, KIND_INSTANT, KIND_LOST,
};
use crate::record::registry::ThreadInfo as ThreadRing;

static A: Callsite = Callsite::new("fast", "a", "f.rs", 1, "m", &[]);
static B: Callsite = Callsite::new("fast2", "b", "f.rs", 2, "m", &[]);
static C: Callsite = Callsite::new("fast", "c", "f.rs", 3, "m", &["x"]);
static D: Callsite = Callsite::new("fast", "d", "f.rs", 4, "m", &["s", "i", "b", "f", "x"]);
// Constant args (a `tracing` event's level): alone, after recorded args,
// and too long for a template (every packet then takes the general path).
static E: Callsite =
    Callsite::new("fast", "e", "f.rs", 6, "m", &[]).with_const_args(&[("level", "INFO")]);
static F: Callsite = Callsite::new("fast", "f", "f.rs", 7, "m", &["message", "n"])
    .with_const_args(&[("level", "WARN")]);
static G: Callsite = Callsite::new("fast", "g", "f.rs", 8, "m", &["x"]).with_const_args(&[
    ("level", "ERROR"),
    ("constant", "longer than a template holds"),
]);

/// A stream of records: `push_*` append them with rising timestamps.
struct Words {
    w: Vec<u64>,
    ts: u64,
}

impl Words {
    fn new() -> Words {
        Words {
            w: Vec::new(),
            ts: crate::record::clock::ticks(),
        }
    }
    fn tick(&mut self, step: u64) -> u64 {
        self.ts += step;
        self.ts
    }
    fn begin(&mut self, cs: &'static Callsite, depth: u64) -> &mut Self {
        assert!(cs.is_enabled() || cs.id() != 0);
        let ts = self.tick(37);
        self.w
            .push(make_header(KIND_BEGIN, 2, cs.id() as u64 | depth << 24));
        self.w.push(ts);
        self
    }
    fn begin_arg(&mut self, cs: &'static Callsite, depth: u64, v: u64) -> &mut Self {
        assert!(cs.is_enabled() || cs.id() != 0);
        self.with_arg(KIND_BEGIN, 5000, cs, depth, v)
    }

    /// A record of `kind` with one argument `v`, `step` ticks on.
    fn with_arg(
        &mut self,
        kind: u64,
        step: u64,
        cs: &'static Callsite,
        depth: u64,
        v: u64,
    ) -> &mut Self {
        self.record(kind, step, cs.id() as u64 | depth << 24, &[&v])
    }
    /// A record of `kind` carrying `payload` and the values `vals`.
    fn record(
        &mut self,
        kind: u64,
        step: u64,
        payload: u64,
        vals: &[&dyn TraceValue],
    ) -> &mut Self {
        let ts = self.tick(step);
        let mut args = Vec::new();
        for v in vals {
            v.encode(&mut args);
        }
        self.w.push(make_header(kind, 2 + args.len(), payload));
        self.w.push(ts);
        self.w.extend(args);
        self
    }
    fn begin_args(
        &mut self,
        cs: &'static Callsite,
        depth: u64,
        vals: &[&dyn TraceValue],
    ) -> &mut Self {
        self.with_args(KIND_BEGIN, cs, depth, vals)
    }
    fn instant_args(&mut self, cs: &'static Callsite, vals: &[&dyn TraceValue]) -> &mut Self {
        self.with_args(KIND_INSTANT, cs, 0, vals)
    }
    fn with_args(
        &mut self,
        kind: u64,
        cs: &'static Callsite,
        depth: u64,
        vals: &[&dyn TraceValue],
    ) -> &mut Self {
        assert!(cs.is_enabled() || cs.id() != 0);
        self.record(kind, 70, cs.id() as u64 | depth << 24, vals)
    }
    fn end(&mut self, depth: u64) -> &mut Self {
        let ts = self.tick(1_000_000);
        self.w.push(make_header(KIND_END, 2, depth));
        self.w.push(ts);
        self
    }
    fn end_args(&mut self, cs: &'static Callsite, depth: u64, v: u64) -> &mut Self {
        self.with_arg(KIND_END_ARGS, 3, cs, depth, v)
    }
    fn instant(&mut self, cs: &'static Callsite) -> &mut Self {
        assert!(cs.is_enabled() || cs.id() != 0);
        let ts = self.tick(11);
        self.w.push(make_header(KIND_INSTANT, 2, cs.id() as u64));
        self.w.push(ts);
        self
    }
    /// Async range `id` of `cs` begins `step` ticks on (0: at the clock
    /// of the last record), with `vals`.
    fn async_begin(
        &mut self,
        cs: &'static Callsite,
        id: u64,
        step: u64,
        vals: &[&dyn TraceValue],
    ) -> &mut Self {
        assert!(cs.is_enabled() || cs.id() != 0);
        // The id is a word of its own, not an encoded value.
        let ts = self.tick(step);
        let mut args = vec![id];
        for a in vals {
            a.encode(&mut args);
        }
        self.w.push(make_header(
            KIND_ASYNC_BEGIN,
            2 + args.len(),
            cs.id() as u64,
        ));
        self.w.push(ts);
        self.w.extend(args);
        self
    }
    /// A range's begin `back` ticks before the last record (found async
    /// after it began).
    fn async_begin_past(&mut self, cs: &'static Callsite, id: u64, back: u64) -> &mut Self {
        assert!(cs.is_enabled() || cs.id() != 0);
        self.w
            .push(make_header(KIND_ASYNC_BEGIN, 3, cs.id() as u64));
        self.w.extend([self.ts - back, id]);
        self
    }
    /// Range `id` of `cs` ends, with `vals` recorded since its begin.
    fn async_end(&mut self, cs: &'static Callsite, id: u64, vals: &[&dyn TraceValue]) -> &mut Self {
        assert!(cs.is_enabled() || cs.id() != 0);
        let ts = self.tick(900);
        let mut args = vec![id];
        for a in vals {
            a.encode(&mut args);
        }
        self.w
            .push(make_header(KIND_ASYNC_END, 2 + args.len(), cs.id() as u64));
        self.w.push(ts);
        self.w.extend(args);
        self
    }
    fn flow(&mut self, id: u64) -> &mut Self {
        let ts = self.tick(0);
        self.w.push(make_header(KIND_FLOW, 3, 0));
        self.w.extend([ts, id]);
        self
    }
    fn lost(&mut self, n: u64) -> &mut Self {
        let ts = self.tick(1);
        self.w.push(make_header(KIND_LOST, 3, 0));
        self.w.extend([ts, n]);
        self
    }
    fn take(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.w)
    }
}

/// What the general path alone writes for a batch (as `batch` did
/// before the fast path).
fn batch_general(e: &mut PerfettoEncoder, ctx: &mut Context<'_>, b: &Batch<'_>, out: &mut Vec<u8>) {
    let t = b.thread;
    let track_uuid = ctx.process.thread_uuid(t.tid);
    let mut seq = e
        .seqs
        .remove(&t.seq_id)
        .unwrap_or_else(|| Box::new(Seq::new(t, track_uuid)));
    if b.overwritten > 0 {
        seq.valid = false;
        seq.loss_flags |= LOSS_PRESENT | LOSS_OVERWRITE;
        seq.lost_unreported += b.overwritten;
    }
    for rec in parse(b.words) {
        e.record(ctx, &mut seq, rec, out);
    }
    e.seqs.insert(t.seq_id, seq);
}

enum Step {
    Words(Vec<u64>),
    Clear,
}

/// Encodes `steps` with the fast path and with the general path alone;
/// the bytes must be the same. Returns them.
fn both(opts: PerfettoOptions, seq_id: u32, steps: &[Step]) -> Vec<u8> {
    let cal = Calibration::start(false);
    let process = ProcessInfo::current(Some("fast".into()));
    let thread = ThreadRing::for_test(seq_id, false);
    let mut outs = Vec::new();
    for general in [false, true] {
        let mut sites = Sites::default();
        let mut ctx = Context {
            cal: &cal,
            process: &process,
            sites: &mut sites,
        };
        let mut e = PerfettoEncoder::new(opts);
        let mut out = Vec::new();
        for step in steps {
            match step {
                Step::Words(w) => {
                    let b = Batch {
                        thread: &thread,
                        words: w,
                        overwritten: 0,
                    };
                    if general {
                        batch_general(&mut e, &mut ctx, &b, &mut out);
                    } else {
                        e.batch(&mut ctx, &b, &mut out);
                    }
                }
                Step::Clear => e.clear_incremental_state(),
            }
        }
        outs.push((out, e.stats().events));
    }
    assert_eq!(outs[0].1, outs[1].1, "events counted");
    assert!(
        outs[0].0 == outs[1].0,
        "fast path bytes differ from the general path's ({} vs {} bytes)",
        outs[0].0.len(),
        outs[1].0.len()
    );
    outs.swap_remove(0).0
}

fn all_opts() -> Vec<(PerfettoOptions, u32)> {
    let mut v = Vec::new();
    for source_locations in [true, false] {
        for omit_needs_flag in [false, true] {
            for seq_id in [3, 300, 1 << 30] {
                let o = PerfettoOptions {
                    source_locations,
                    omit_needs_flag,
                };
                v.push((o, seq_id));
            }
        }
    }
    v
}

#[test]
fn fast_path_writes_what_the_general_path_writes() {
    let mut w = Words::new();
    let mut steps = Vec::new();
    // First uses (interning), then repeats (templates), nested.
    for _ in 0..3 {
        w.begin(&A, 0)
            .begin(&B, 1)
            .end(1)
            .begin(&A, 1)
            .end(1)
            .end(0);
    }
    steps.push(Step::Words(w.take()));
    // Args, instants, flows waiting for an end, a lost end (orphan),
    // an end without a begin, an end with args, a loss marker.
    w.begin(&A, 0)
        .begin_arg(&C, 1, 7)
        .begin(&B, 2)
        .end(2)
        .end(1);
    w.instant(&A).begin(&B, 1).flow(42).end(1).end(0);
    w.begin(&A, 0)
        .begin(&B, 1)
        .begin(&B, 1)
        .end(1)
        .end(0)
        .end(0);
    w.begin(&B, 0)
        .end_args(&B, 0, 9)
        .begin(&A, 0)
        .lost(3)
        .end(0);
    w.begin(&A, 0).begin(&B, 1).end(1).end(0);
    // Leaves (a begin and an end back to back) that are not a pair: an
    // end of another depth, a begin not deeper than the open scope (an
    // orphan), a flow waiting between them, a leaf of a site with args.
    w.begin(&A, 0).begin(&B, 1).end(2).end(1).end(0);
    w.begin(&A, 1).begin(&B, 1).end(1).end(0);
    w.begin(&A, 0).flow(7).begin(&B, 1).end(1).end(0);
    w.begin(&C, 0).end(0).begin(&B, 0).end(0);
    // Runs of the same leaf, then another site, then a repeat whose end
    // is of another depth.
    w.begin(&A, 0);
    for _ in 0..4 {
        w.begin(&B, 1).end(1);
    }
    w.begin(&A, 1)
        .end(1)
        .begin(&A, 1)
        .end(1)
        .begin(&A, 1)
        .end(2);
    w.end(1).end(0);
    steps.push(Step::Words(w.take()));
    // Begins with args of every kind, first and later uses; a string
    // long enough for two-byte lengths.
    let long = "y".repeat(300);
    for k in 0..3u64 {
        let s: &str = if k == 1 { &long } else { "GET /users/{id}" };
        w.begin_args(&D, 0, &[&s, &(-5i64 - k as i64), &(k == 2), &1.5f64, &k]);
        w.begin_arg(&C, 1, k).end(1).end(0);
        // Instants, plain and with args, before and after their
        // site's template (and a site used for both).
        w.instant(&B)
            .instant_args(&D, &[&s, &(k as i64), &true, &0.25f64, &7u64]);
        w.instant_args(&C, &[&k]).instant(&A);
    }
    // A site with args whose record has none (read as absent values).
    w.begin(&C, 0).end(0);
    // Instants of sites with constant args, first and later uses.
    for k in 0..3u64 {
        w.instant(&E)
            .instant_args(&F, &[&"msg", &k])
            .instant_args(&G, &[&k])
            .instant(&E);
    }
    steps.push(Step::Words(w.take()));
    // Strings around the one-byte lengths of the annotation, the track
    // event and the packet (each patched after the body is written);
    // pointers, absent values (None), and containers (written by the
    // general path after the direct writer gives up).
    let p = 0x7f00_dead_beef_usize as *const u8;
    for n in [
        0usize, 1, 7, 8, 9, 15, 16, 17, 23, 24, 25, 31, 32, 33, 40, 90, 101, 102, 103, 110, 111,
        112, 122, 123, 124, 125, 126, 127, 128, 200,
    ] {
        // Bytes that differ from word to word: a word stored in the
        // wrong place shows.
        let s: String = (0..n).map(|i| (b'a' + (i % 26) as u8) as char).collect();
        let none: Option<u64> = None;
        w.begin_args(&D, 0, &[&s.as_str(), &p, &none, &-1i64, &u64::MAX]);
        w.instant_args(&C, &[&s.as_str()]);
        w.end(0);
    }
    let dict = std::collections::BTreeMap::from([("k", 1u64), ("l", 2)]);
    w.begin_args(&D, 0, &[&"s", &[1u64, 2, 3], &dict, &true, &f64::NAN]);
    w.end(0);
    w.instant_args(&C, &[&vec!["a", "b"]])
        .instant_args(&C, &[&7i64]);
    // Annotation names past iid 127 (two-byte iids): a site with 140
    // names, its values of every kind.
    let names: Vec<&'static str> = (0..140)
        .map(|i| &*Box::leak(format!("arg{i}").into_boxed_str()))
        .collect();
    let many: &'static Callsite = Box::leak(Box::new(Callsite::new(
        "fast",
        "many",
        "f.rs",
        5,
        "m",
        Box::leak(names.into_boxed_slice()),
    )));
    let _ = many.is_enabled(); // registers the site, which gives it its id
    assert_ne!(many.id(), 0);
    for k in 0..3u64 {
        let vals: Vec<Box<dyn TraceValue>> = (0..140u64)
            .map(|i| -> Box<dyn TraceValue> {
                match (i + k) % 6 {
                    0 => Box::new(i),
                    1 => Box::new(-(i as i64)),
                    2 => Box::new(format!("s{i}")),
                    3 => Box::new(i % 2 == 0),
                    4 => Box::new(i as f64 / 3.0),
                    _ => Box::new(None::<u64>),
                }
            })
            .collect();
        let refs: Vec<&dyn TraceValue> = vals.iter().map(|v| &**v).collect();
        w.begin_args(many, 0, &refs).end(0);
    }
    steps.push(Step::Words(w.take()));
    // Records with args after deltas of one to six bytes, their scalars
    // of one to three bytes (each length is written its own way).
    for (step, v) in [
        (0u64, 5u64),
        (300, 200),
        (1 << 20, 16_000),
        (1 << 40, 20_000),
    ] {
        w.tick(step);
        w.instant_args(&C, &[&v]);
        w.tick(step);
        w.begin_args(&D, 0, &[&"s", &p, &(v as i64), &-(v as i64), &v])
            .end(0);
        // Plain packets after the same deltas.
        w.tick(step);
        w.begin(&A, 0).end(0);
        w.tick(step);
        w.instant(&B);
    }
    steps.push(Step::Words(w.take()));
    // A long delta (a multi-byte varint), then the template again.
    w.begin(&A, 0);
    w.tick(1 << 40);
    w.end(0).begin(&A, 0).end(0);
    steps.push(Step::Words(w.take()));
    for (opts, seq_id) in all_opts() {
        let out = both(opts, seq_id, &steps);
        assert!(!out.is_empty());
    }
}

/// Async ranges (a `tracing` span's with lifetime slices): begins with and
/// without args, plain ends and ends with args, ranges overlapping (new
/// tracks) and in turn (tracks reused), an end before its begin, a begin
/// in the past, a flow waiting, a clear: the same bytes through both paths.
#[test]
fn async_ranges_on_the_fast_path_write_what_the_general_path_writes() {
    let mut w = Words::new();
    let mut steps = Vec::new();
    // First uses, then repeats: A plain, C with an arg.
    for round in 0..3u64 {
        let id = 100 + 10 * round;
        w.async_begin(&A, id, 50, &[])
            .async_begin(&C, id + 1, 50, &[&7u64])
            .instant(&A)
            .async_begin(&A, id + 2, 50, &[])
            .async_end(&A, id + 2, &[])
            .async_end(&C, id + 1, &[])
            .async_end(&A, id, &[]);
    }
    // An end with args (recorded later: the general path), a range
    // ended before its begin is seen (another thread's), then begun.
    w.async_begin(&C, 200, 50, &[&1u64])
        .async_end(&C, 200, &[&2u64])
        .async_end(&A, 300, &[])
        .async_begin_past(&A, 300, 5_000)
        .async_begin(&A, 301, 50, &[]);
    steps.push(Step::Words(w.take()));
    // A flow waiting (general path until it binds), a long delta.
    w.flow(9).async_begin(&A, 400, 50, &[]).begin(&B, 0).end(0);
    w.tick(1 << 40);
    w.async_end(&A, 400, &[]).async_end(&A, 301, &[]);
    steps.push(Step::Words(w.take()));
    // Packets whose lengths take two bytes with the track added (written
    // again), or before it: strings of 80 to 160 bytes around the bound.
    for (i, n) in [80usize, 95, 100, 105, 110, 160].into_iter().enumerate() {
        let text = "y".repeat(n);
        let id = 700 + i as u64;
        w.async_begin(&D, id, 50, &[&text.as_str(), &-1i64, &true, &0.5f64, &9u64])
            .async_end(&D, id, &[]);
    }
    steps.push(Step::Words(w.take()));
    steps.push(Step::Clear);
    w.async_begin(&C, 500, 50, &[&3u64]).async_end(&C, 500, &[]);
    steps.push(Step::Words(w.take()));
    for (opts, seq_id) in all_opts() {
        let out = both(opts, seq_id, &steps);
        assert!(!out.is_empty());
    }
}

#[test]
fn annotations_follow_the_interning_across_clears_and_losses() {
    // C's one name and D's five are interned in the order the sites are
    // first used: C then D before the clear, D then C after it, and
    // again after a loss restarts the sequence. Annotations written
    // with a name iid from before would differ from the general path's.
    // Strings of every length from 0 to 40 bytes: no word, one, two
    // (the two-store writer) and up to five (the run of words).
    let mut w = Words::new();
    let mut steps = Vec::new();
    let strings: Vec<String> = (0..=40).map(|n| "s".repeat(n)).collect();
    let round = |w: &mut Words, first_c: bool| {
        for (k, s) in strings.iter().enumerate() {
            let k = k as u64;
            if first_c {
                w.instant_args(&C, &[&s.as_str()]);
            }
            w.begin_args(
                &D,
                0,
                &[
                    &s.as_str(),
                    &(k as i64 - 20),
                    &k.is_multiple_of(2),
                    &0.5f64,
                    &k,
                ],
            );
            w.begin_args(&C, 1, &[&s.as_str()]).end(1).end(0);
            w.instant_args(&C, &[&(k * 1000)]);
        }
    };
    round(&mut w, true);
    steps.push(Step::Words(w.take()));
    steps.push(Step::Clear);
    round(&mut w, false);
    steps.push(Step::Words(w.take()));
    w.lost(2);
    round(&mut w, false);
    steps.push(Step::Words(w.take()));
    for (opts, seq_id) in all_opts() {
        both(opts, seq_id, &steps);
    }
}

#[test]
fn templates_are_rebuilt_after_incremental_state_is_cleared() {
    // A's name gets iid 1 and B's iid 2; after the clear, B is interned
    // first (iid 1), then A (iid 2): a template kept from before the
    // clear would name A's later begins with B's iid.
    let mut w = Words::new();
    let mut steps = Vec::new();
    w.begin(&A, 0)
        .end(0)
        .begin(&B, 0)
        .end(0)
        .begin(&A, 0)
        .end(0);
    steps.push(Step::Words(w.take()));
    steps.push(Step::Clear);
    w.begin(&B, 0)
        .end(0)
        .begin(&A, 0)
        .end(0)
        .begin(&A, 0)
        .end(0);
    w.begin(&B, 0).end(0);
    steps.push(Step::Words(w.take()));
    // A loss resets the sequence too.
    w.lost(1)
        .begin(&A, 0)
        .end(0)
        .begin(&B, 0)
        .end(0)
        .begin(&A, 0)
        .end(0);
    steps.push(Step::Words(w.take()));
    for (opts, seq_id) in all_opts() {
        both(opts, seq_id, &steps);
    }
}

/// A site's constant args are annotations of each of its instants, first
/// and later uses (the template's copy and the general path's), before
/// the recorded ones: decoded, names through the interned data.
#[test]
fn const_args_are_annotations_of_every_instant() {
    use ringtrace_protos::debug_annotation::{NameField, Value};
    let mut w = Words::new();
    for k in 0..3u64 {
        w.instant(&E)
            .instant_args(&F, &[&"msg", &k])
            .instant_args(&G, &[&k]);
    }
    let steps = [Step::Words(w.take())];
    for (opts, seq_id) in all_opts() {
        let out = both(opts, seq_id, &steps);
        let trace = <ringtrace_protos::Trace as prost::Message>::decode(out.as_slice()).unwrap();
        let mut names = std::collections::HashMap::new();
        let mut got = Vec::new();
        for p in &trace.packet {
            if let Some(d) = &p.interned_data {
                names.extend(
                    d.debug_annotation_names
                        .iter()
                        .map(|n| (n.iid(), n.name().to_string())),
                );
            }
            let Some(te) = &p.track_event else { continue };
            let anns: Vec<(String, String)> = te
                .debug_annotations
                .iter()
                .map(|a| {
                    let Some(NameField::NameIid(iid)) = a.name_field else {
                        panic!("annotation without a name iid: {a:?}")
                    };
                    let v = match &a.value {
                        Some(Value::StringValue(s)) => s.clone(),
                        Some(Value::UintValue(v)) => v.to_string(),
                        v => panic!("unexpected value {v:?}"),
                    };
                    (names[&iid].clone(), v)
                })
                .collect();
            got.push(anns);
        }
        let pairs = |v: &[(&str, String)]| -> Vec<(String, String)> {
            v.iter().map(|(n, s)| (n.to_string(), s.clone())).collect()
        };
        let mut want = Vec::new();
        for k in 0..3u64 {
            want.push(pairs(&[("level", "INFO".into())]));
            want.push(pairs(&[
                ("level", "WARN".into()),
                ("message", "msg".into()),
                ("n", k.to_string()),
            ]));
            want.push(pairs(&[
                ("level", "ERROR".into()),
                ("constant", "longer than a template holds".into()),
                ("x", k.to_string()),
            ]));
        }
        assert_eq!(got, want);
    }
}
