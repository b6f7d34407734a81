use super::*;

#[test]
fn plain_scope_records_skip_the_general_path_writing_the_same_bytes() {
    use crate::encode::{ProcessInfo, Sites};
    use crate::record::args::TraceValue;
    use crate::record::clock::Calibration;
    use crate::record::header::make_header;
    use crate::record::layout::{KIND_END_ARGS, KIND_FLOW, KIND_INSTANT, KIND_LOST};
    static A: Callsite = Callsite::new("j", "a", "f.rs", 1, "m", &[]);
    static B: Callsite = Callsite::new("j", "b", "f.rs", 2, "m", &["x"]);
    A.is_enabled();
    B.is_enabled();
    let (a, b) = (A.id() as u64, B.id() as u64);
    let mut ts = crate::record::clock::ticks();
    let mut w: Vec<u64> = Vec::new();
    let mut rec = |w: &mut Vec<u64>, kind: u64, payload: u64, extra: &[u64]| {
        ts += 1234;
        w.push(make_header(kind, 2 + extra.len(), payload));
        w.push(ts);
        w.extend_from_slice(extra);
    };
    let mut arg = Vec::new();
    7u64.encode(&mut arg);
    for _ in 0..3 {
        rec(&mut w, KIND_BEGIN, a, &[]); // depth 0
        rec(&mut w, KIND_BEGIN, a | 1 << 24, &[]);
        rec(&mut w, KIND_END, 1, &[]);
        rec(&mut w, KIND_BEGIN, b | 1 << 24, &arg); // args: general
        rec(&mut w, KIND_END, 1, &[]);
        rec(&mut w, KIND_BEGIN, a | 1 << 24, &[]);
        rec(&mut w, KIND_FLOW, 0, &[42]); // the end binds the flow
        rec(&mut w, KIND_END, 1, &[]);
        rec(&mut w, KIND_BEGIN, a | 1 << 24, &[]);
        rec(&mut w, KIND_BEGIN, a | 1 << 24, &[]); // the first lost its end
        rec(&mut w, KIND_END, 1, &[]);
        rec(&mut w, KIND_INSTANT, a, &[]);
        rec(&mut w, KIND_END_ARGS, b, &arg);
        rec(&mut w, KIND_END, 0, &[]); // no begin
        rec(&mut w, KIND_LOST, 0, &[2]);
        rec(&mut w, KIND_BEGIN, a, &[]);
        rec(&mut w, KIND_END, 0, &[]);
        // Leaves that are not a pair: an end of another depth, a flow
        // waiting before the begin.
        rec(&mut w, KIND_BEGIN, a, &[]);
        rec(&mut w, KIND_BEGIN, a | 1 << 24, &[]);
        rec(&mut w, KIND_END, 2, &[]);
        rec(&mut w, KIND_END, 1, &[]);
        rec(&mut w, KIND_FLOW, 0, &[43]);
        rec(&mut w, KIND_BEGIN, a | 1 << 24, &[]);
        rec(&mut w, KIND_END, 1, &[]);
        rec(&mut w, KIND_END, 0, &[]);
    }
    let cal = Calibration::start(false);
    let process = ProcessInfo::current(Some("j".into()));
    let thread = ThreadRing::for_test(5, false);
    let mut outs = Vec::new();
    for general_only in [false, true] {
        let mut sites = Sites::default();
        let mut ctx = Context {
            cal: &cal,
            process: &process,
            sites: &mut sites,
        };
        let mut e = JsonEncoder::new();
        e.general_only = general_only;
        let mut out = Vec::new();
        for half in [&w[..w.len() / 3], &w[w.len() / 3..]] {
            let batch = Batch {
                thread: &thread,
                words: half,
                overwritten: 0,
            };
            e.batch(&mut ctx, &batch, &mut out);
        }
        outs.push((String::from_utf8(out).unwrap(), e.stats().events));
    }
    assert!(outs[0].0.contains("\"ph\":\"X\""));
    assert_eq!(outs[0], outs[1]);
}

/// The argument keys kept per call site write what escaping every key
/// on every event wrote, for sites used in turns, with and without a
/// flag argument.
#[test]
fn argument_keys_kept_per_site_are_what_escaping_each_time_writes() {
    use crate::record::args::TraceValue;
    static P: Callsite = Callsite::new(
        "j",
        "p",
        "f.rs",
        1,
        "m",
        &["q\"uote", "back\\slash", "plain"],
    );
    static Q: Callsite = Callsite::new("j", "q", "f.rs", 2, "m", &["tab\tkey"]);
    static R: Callsite = Callsite::new("j", "r", "f.rs", 3, "m", &[]);
    // Constant args (a `tracing` event's level), alone and after others.
    static S: Callsite =
        Callsite::new("j", "s", "f.rs", 4, "m", &[]).with_const_args(&[("level", "IN\"FO")]);
    static T: Callsite = Callsite::new("j", "t", "f.rs", 5, "m", &["a", "b"])
        .with_const_args(&[("level", "WARN"), ("k", "v")]);
    let mut e = JsonEncoder::new();
    let sites = [&P, &Q, &P, &R, &S, &Q, &T, &P, &R, &S, &T, &S];
    for (i, cs) in sites.into_iter().enumerate() {
        cs.is_enabled();
        let mut words = Vec::new();
        for k in 0..cs.arg_names.len() {
            (i * 10 + k).encode(&mut words);
        }
        let flag = (i % 2 == 1).then_some("fl\"ag");
        e.line.clear();
        e.args(cs, &words, flag);
        let mut want = Line::default();
        let any = !cs.arg_names.is_empty() || !cs.const_args.is_empty();
        if any || flag.is_some() {
            want.push_str(",\"args\":{");
            let mut r = ArgReader::new(&words);
            for (k, name) in cs.arg_names.iter().enumerate() {
                if k > 0 {
                    want.push(',');
                }
                escape_into(&mut want, name);
                want.push(':');
                value_into(&mut want, &mut r, 0);
            }
            for (k, (name, value)) in cs.const_args.iter().enumerate() {
                if k > 0 || !cs.arg_names.is_empty() {
                    want.push(',');
                }
                escape_into(&mut want, name);
                want.push(':');
                escape_into(&mut want, value);
            }
            if let Some(flag) = flag {
                if any {
                    want.push(',');
                }
                escape_into(&mut want, flag);
                want.push_str(":true");
            }
            want.push('}');
        }
        assert_eq!(e.line.0, want.0, "event {i} of {}", cs.name);
    }
}

#[test]
fn plain_x_writes_what_the_general_path_writes() {
    static S: Callsite = Callsite::new("c\"at", "na\\me", "f.rs", 1, "m", &[]);
    static T: Callsite = Callsite::new("cat", "other", "f.rs", 2, "m", &[]);
    S.is_enabled();
    T.is_enabled();
    let (mut fast, mut general) = (JsonEncoder::new(), JsonEncoder::new());
    let (mut a, mut b) = (Vec::new(), Vec::new());
    let cases = [
        (&S, 0, 0, (1, 2)),
        (&S, 1_234_567, 999, (1, 2)),
        (&T, u64::MAX / 2, 123_456_789_012, (1, 3)),
        (&S, 7, 1, (-1, -5)),
        (&T, 1_000_000_000_000, 0, (1, 2)),
    ];
    for (i, &(cs, ts, dur, who)) in cases.iter().enumerate() {
        fast.plain_x(cs, ts, ts + dur, who, &mut a);
        // `complete_with`'s general path.
        general.head_site(cs, "X", ts, who.0, who.1);
        general.line.push_str(",\"dur\":");
        micros(&mut general.line, dur);
        general.args(cs, &[], None);
        general.line.push('}');
        general.push_event(&mut b);
        assert_eq!(
            String::from_utf8_lossy(&a),
            String::from_utf8_lossy(&b),
            "after case {i}"
        );
    }
}
