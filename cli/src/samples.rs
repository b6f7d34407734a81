//! CPU stack samples of a trace (what `Builder::cpu_sampling` writes):
//! decoded from Perfetto `PerfSample` packets (their call stacks resolved
//! through the sequence's interned frames, mappings and function names) or
//! from the JSON Object Format's `samples` and `stackFrames`; summarised for
//! `inspect` and folded into stacks for `flamegraph`.

use crate::model::{Kind, TraceModel, Track};
use prost::Message;
use ringtrace_protos::TracePacket;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};

/// One sample: its thread, time (trace ns) and stack, outermost first.
#[derive(Debug, Clone)]
pub struct CpuSample {
    pub ts: i64,
    pub pid: i64,
    pub tid: i64,
    pub frames: Vec<String>,
}

/// Every sample of a trace, and what could not be resolved.
#[derive(Debug, Default)]
pub struct Samples {
    pub samples: Vec<CpuSample>,
    /// Records the writer lost (Perfetto `kernel_records_lost`).
    pub lost: u64,
    /// Samples whose stack did not resolve (an unknown interned id).
    pub unresolved: u64,
    /// Samples whose unwinding stopped before the stack's root.
    pub truncated: u64,
}

/// The samples of `bytes` (a Perfetto or JSON trace, decompressed);
/// `compressed_packets` inflate to at most `limit` bytes in all.
pub fn decode(bytes: &[u8], limit: u64) -> Samples {
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
    match first {
        Some(b'{') | Some(b'[') => decode_json(bytes),
        _ => decode_perfetto(bytes, limit),
    }
}

/// A sequence's interned tables.
#[derive(Default)]
struct Interned {
    names: HashMap<u64, String>,
    paths: HashMap<u64, String>,
    /// Mapping iid → its file name.
    mappings: HashMap<u64, String>,
    /// Frame iid → (name id, mapping id, rel_pc).
    frames: HashMap<u64, (u64, u64, u64)>,
    stacks: HashMap<u64, Vec<u64>>,
}

impl Interned {
    fn frame_name(&self, id: u64) -> Option<String> {
        let &(name, mapping, rel_pc) = self.frames.get(&id)?;
        if let Some(n) = self.names.get(&name) {
            return Some(n.clone());
        }
        let file = self
            .mappings
            .get(&mapping)
            .map_or("[unknown]", String::as_str);
        Some(format!("{file}+{rel_pc:#x}"))
    }
}

fn decode_perfetto(bytes: &[u8], limit: u64) -> Samples {
    let mut out = Samples::default();
    let mut seqs: HashMap<u32, Interned> = HashMap::new();
    let mut budget = limit;
    for_each_packet(bytes, &mut budget, 0, &mut |p| {
        packet(p, &mut seqs, &mut out);
    });
    out
}

/// Takes in one packet: its interned entries, its sample.
fn packet(p: &TracePacket, seqs: &mut HashMap<u32, Interned>, out: &mut Samples) {
    let seq_id = p.trusted_packet_sequence_id.unwrap_or(0);
    if p.sequence_flags.unwrap_or(0) & 1 != 0 {
        seqs.insert(seq_id, Interned::default());
    }
    if let Some(d) = &p.interned_data {
        let t = seqs.entry(seq_id).or_default();
        let text =
            |b: &Option<Vec<u8>>| String::from_utf8_lossy(b.as_deref().unwrap_or(&[])).into_owned();
        for s in &d.function_names {
            t.names.insert(s.iid.unwrap_or(0), text(&s.str));
        }
        for s in &d.mapping_paths {
            t.paths.insert(s.iid.unwrap_or(0), text(&s.str));
        }
        for m in &d.mappings {
            let file = m
                .path_string_ids
                .last()
                .and_then(|id| t.paths.get(id))
                .cloned()
                .unwrap_or_else(|| "[unknown]".into());
            t.mappings.insert(m.iid.unwrap_or(0), file);
        }
        for f in &d.frames {
            t.frames.insert(
                f.iid.unwrap_or(0),
                (
                    f.function_name_id.unwrap_or(0),
                    f.mapping_id.unwrap_or(0),
                    f.rel_pc.unwrap_or(0),
                ),
            );
        }
        for c in &d.callstacks {
            t.stacks.insert(c.iid.unwrap_or(0), c.frame_ids.clone());
        }
    }
    let Some(ps) = &p.perf_sample else { return };
    if let Some(n) = ps.kernel_records_lost {
        out.lost += n;
        return;
    }
    if ps.unwind_error.is_some_and(|e| e != 0 && e != 1) {
        out.truncated += 1;
    }
    let t = seqs.get(&seq_id);
    let frames = ps.callstack_iid.and_then(|iid| {
        let t = t?;
        t.stacks
            .get(&iid)?
            .iter()
            .map(|&f| t.frame_name(f))
            .collect::<Option<Vec<String>>>()
    });
    let Some(frames) = frames else {
        out.unresolved += 1;
        return;
    };
    out.samples.push(CpuSample {
        ts: i64::try_from(p.timestamp.unwrap_or(0)).unwrap_or(i64::MAX),
        pid: ps.pid.unwrap_or(0) as i64,
        tid: ps.tid.unwrap_or(0) as i64,
        frames,
    });
}

/// Hands each packet of a `Trace` to `f`, `compressed_packets` expanded
/// (nested at most twice, inflating at most `budget` bytes in all); stops
/// at the first bytes that do not frame a packet.
fn for_each_packet(mut data: &[u8], budget: &mut u64, depth: u32, f: &mut dyn FnMut(&TracePacket)) {
    use std::io::Read;
    while !data.is_empty() {
        // Field 1, length-delimited: one packet.
        if data[0] != 0x0a {
            return;
        }
        let mut rest = &data[1..];
        let Ok(len) = prost::encoding::decode_varint(&mut rest) else {
            return;
        };
        let Ok(len) = usize::try_from(len) else {
            return;
        };
        if rest.len() < len {
            return;
        }
        if let Ok(p) = TracePacket::decode(&rest[..len]) {
            match &p.compressed_packets {
                Some(z) if depth < 2 => {
                    let mut inflated = Vec::new();
                    let _ = flate2::read::ZlibDecoder::new(z.as_slice())
                        .take(*budget)
                        .read_to_end(&mut inflated);
                    *budget -= inflated.len() as u64;
                    for_each_packet(&inflated, budget, depth + 1, f);
                }
                _ => f(&p),
            }
        }
        data = &rest[len..];
    }
}

fn decode_json(bytes: &[u8]) -> Samples {
    let mut out = Samples::default();
    let Ok(doc) = serde_json::from_slice::<Value>(bytes) else {
        return out;
    };
    let (Some(list), frames) = (doc["samples"].as_array(), doc["stackFrames"].as_object()) else {
        return out;
    };
    for s in list {
        let mut stack = Vec::new();
        let mut id = match &s["sf"] {
            Value::String(v) => Some(v.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        };
        let mut ok = id.is_some();
        // Bounded: a cycle of parents ends the walk.
        while let Some(i) = id.take() {
            let Some(f) = frames.and_then(|f| f.get(&i)) else {
                ok = false;
                break;
            };
            stack.push(f["name"].as_str().unwrap_or("?").to_string());
            if stack.len() > 4096 {
                ok = false;
                break;
            }
            id = f["parent"].as_str().map(str::to_string);
        }
        if !ok {
            out.unresolved += 1;
            continue;
        }
        stack.reverse();
        let ts = s["ts"].as_f64().unwrap_or(0.0);
        out.samples.push(CpuSample {
            ts: (ts * 1000.0) as i64,
            pid: s["pid"].as_i64().unwrap_or(0),
            tid: s["tid"].as_i64().unwrap_or(0),
            frames: stack,
        });
    }
    out
}

/// What `inspect` reports: counts, threads, the most frequent leaf
/// functions.
pub fn summary(s: &Samples) -> Value {
    let mut threads: BTreeMap<i64, u64> = BTreeMap::new();
    let mut leaves: HashMap<&str, u64> = HashMap::new();
    for x in &s.samples {
        *threads.entry(x.tid).or_default() += 1;
        if let Some(l) = x.frames.last() {
            *leaves.entry(l.as_str()).or_default() += 1;
        }
    }
    let mut top: Vec<(&str, u64)> = leaves.into_iter().collect();
    top.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    top.truncate(5);
    json!({
        "samples": s.samples.len(),
        "threads": threads.len(),
        "lost": s.lost,
        "unresolved": s.unresolved,
        "truncated": s.truncated,
        "top_functions": top.iter().map(|(n, c)| json!({"name": n, "samples": c})).collect::<Vec<_>>(),
    })
}

/// Prints `inspect`'s lines for the `cpu_samples` of a summary.
pub fn print_summary(s: &Value, indent: &str) {
    let c = &s["cpu_samples"];
    if c["samples"].as_u64().unwrap_or(0) == 0 && c["lost"].as_u64().unwrap_or(0) == 0 {
        return;
    }
    crate::outln!(
        "{indent}  CPU samples: {} of {} thread(s); {} lost, {} with a stack cut short, {} unresolved",
        c["samples"],
        c["threads"],
        c["lost"],
        c["truncated"],
        c["unresolved"]
    );
    for f in c["top_functions"].as_array().into_iter().flatten() {
        crate::outln!(
            "{indent}    {:>6}  {}",
            f["samples"],
            f["name"].as_str().unwrap_or("")
        );
    }
}

/// The samples taken while their thread was inside a slice named `name`
/// (all samples if `None`).
pub fn under(samples: Samples, model: Option<&TraceModel>, name: Option<&str>) -> Vec<CpuSample> {
    let (Some(name), Some(m)) = (name, model) else {
        return samples.samples;
    };
    let mut spans: HashMap<i64, Vec<(i64, i64)>> = HashMap::new();
    for e in &m.events {
        if let (Kind::Complete { dur }, Track::Thread { tid, .. }) = (&e.kind, &e.track) {
            if e.name == name {
                spans
                    .entry(*tid)
                    .or_default()
                    .push((e.ts, e.ts.saturating_add(*dur)));
            }
        }
    }
    for v in spans.values_mut() {
        v.sort_unstable();
    }
    samples
        .samples
        .into_iter()
        .filter(|s| {
            spans.get(&s.tid).is_some_and(|v| {
                // Slices of one thread nest: any that starts before `ts`
                // may hold it.
                let end = v.partition_point(|x| x.0 <= s.ts);
                v[..end].iter().any(|x| s.ts <= x.1)
            })
        })
        .collect()
}

/// The names of the sampled threads, as the flame graph draws them: each
/// stack's root frame is its thread, so threads do not mix.
#[derive(Debug, Default)]
pub struct ThreadNames(BTreeMap<(i64, i64), Option<String>>);

impl ThreadNames {
    /// The names `model` gives the threads of `samples`: by (pid, tid), or
    /// by tid alone when the samples carry no pid (JSON's `samples` list).
    pub fn of(samples: &[CpuSample], model: Option<&TraceModel>) -> Self {
        let mut names = BTreeMap::new();
        for s in samples {
            names.entry((s.pid, s.tid)).or_insert_with(|| {
                let m = model?;
                m.threads
                    .get(&(s.pid, s.tid))
                    .cloned()
                    .flatten()
                    .or_else(|| {
                        m.threads
                            .iter()
                            .find(|((_, tid), n)| *tid == s.tid && n.is_some())
                            .and_then(|(_, n)| n.clone())
                    })
            });
        }
        ThreadNames(names)
    }

    /// The name of the thread `s` ran on, if the trace names it.
    pub fn name(&self, s: &CpuSample) -> Option<&str> {
        self.0.get(&(s.pid, s.tid)).and_then(Option::as_deref)
    }

    /// The root frame of `s`'s stack: `name (tid)`, or `thread tid` for a
    /// thread without a name.
    pub fn frame(&self, s: &CpuSample) -> String {
        match self.name(s) {
            Some(n) => format!("{n} ({})", s.tid),
            None => format!("thread {}", s.tid),
        }
    }

    /// Whether the thread of `s` is one `spec` names: its tid, its name
    /// exactly, or a name starting with `prefix` for `prefix*`.
    pub fn matches(&self, s: &CpuSample, spec: &str) -> bool {
        if spec == s.tid.to_string() {
            return true;
        }
        let Some(name) = self.name(s) else {
            return false;
        };
        match spec.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => name == spec,
        }
    }

    /// Every sampled thread's root frame, in tid order, for messages.
    pub fn list(&self) -> String {
        let mut all: Vec<(i64, String)> = self
            .0
            .iter()
            .map(|(&(_, tid), n)| {
                let label = match n {
                    Some(n) => format!("{n} ({tid})"),
                    None => format!("thread {tid}"),
                };
                (tid, label)
            })
            .collect();
        all.sort();
        all.dedup();
        all.into_iter()
            .map(|(_, l)| l)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The samples as folded stacks (`thread;outer;inner count`), the input of
/// a flame graph: each stack starts with its thread's frame (see
/// [`ThreadNames::frame`]); frames' `;` replaced so they do not split.
pub fn folded(samples: &[CpuSample], threads: &ThreadNames) -> Vec<String> {
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    for s in samples.iter().filter(|s| !s.frames.is_empty()) {
        let line = std::iter::once(threads.frame(s))
            .chain(s.frames.iter().cloned())
            .map(|f| f.replace(';', ":"))
            .collect::<Vec<_>>()
            .join(";");
        *counts.entry(line).or_default() += 1;
    }
    counts
        .into_iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect()
}

/// The program `samples` were taken in, for a flame graph's title: the
/// names the trace gives the samples' processes (or, for samples without a
/// pid, every process it names), joined; `None` when it names none.
pub fn program_name(samples: &[CpuSample], model: Option<&TraceModel>) -> Option<String> {
    let m = model?;
    let named = |pid: &i64| m.processes.get(pid).cloned().flatten();
    let pids: std::collections::BTreeSet<i64> = samples.iter().map(|s| s.pid).collect();
    let mut names: Vec<String> = pids.iter().filter_map(named).collect();
    if names.is_empty() {
        names = m.processes.keys().filter_map(named).collect();
    }
    names.sort();
    names.dedup();
    (!names.is_empty()).then(|| names.join(", "))
}

/// Draws `folded` stacks as an SVG flame graph.
pub fn flamegraph_svg(folded: &[String], title: &str) -> Result<Vec<u8>, String> {
    let mut opts = inferno::flamegraph::Options::default();
    opts.title = title.to_string();
    opts.count_name = "samples".into();
    let mut svg = Vec::new();
    inferno::flamegraph::from_lines(&mut opts, folded.iter().map(String::as_str), &mut svg)
        .map_err(|e| format!("cannot draw the flame graph: {e}"))?;
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(tid: i64, ts: i64, frames: &[&str]) -> CpuSample {
        CpuSample {
            ts,
            pid: 1,
            tid,
            frames: frames.iter().map(|f| f.to_string()).collect(),
        }
    }

    #[test]
    fn stacks_fold_and_draw() {
        let s = vec![
            sample(1, 0, &["main", "work", "hot"]),
            sample(1, 1, &["main", "work", "hot"]),
            sample(1, 2, &["main", "a;b"]),
        ];
        let f = folded(&s, &ThreadNames::default());
        assert_eq!(f, vec!["thread 1;main;a:b 1", "thread 1;main;work;hot 2"]);
        let svg = flamegraph_svg(&f, "t").unwrap();
        let text = String::from_utf8(svg).unwrap();
        assert!(text.starts_with("<?xml") && text.contains("hot"));
    }

    #[test]
    fn json_samples_resolve_through_their_parents() {
        let doc = br#"{"traceEvents":[],"stackFrames":{"1":{"name":"main","category":"x"},
            "2":{"name":"hot","category":"x","parent":"1"}},
            "samples":[{"cpu":0,"tid":7,"ts":1.5,"name":"cpu-clock","sf":2,"weight":1},
                       {"cpu":0,"tid":7,"ts":2.5,"name":"cpu-clock","sf":9,"weight":1}]}"#;
        let s = decode(doc, 1 << 20);
        assert_eq!(s.samples.len(), 1);
        assert_eq!(s.samples[0].frames, vec!["main", "hot"]);
        assert_eq!((s.samples[0].ts, s.unresolved), (1500, 1));
    }
}

#[cfg(test)]
mod perfetto_tests {
    use super::*;
    use ringtrace_protos::{Callstack, Frame, InternedData, InternedString, Mapping, PerfSample};

    fn s(iid: u64, text: &str) -> InternedString {
        InternedString {
            iid: Some(iid),
            str: Some(text.as_bytes().to_vec()),
        }
    }

    #[test]
    fn perf_samples_resolve_through_the_sequence_tables() {
        let interned = InternedData {
            function_names: vec![s(1, "main"), s(2, "hot")],
            mapping_paths: vec![s(1, "bin"), s(2, "prog")],
            mappings: vec![Mapping {
                iid: Some(1),
                path_string_ids: vec![1, 2],
                ..Default::default()
            }],
            frames: vec![
                Frame {
                    iid: Some(1),
                    function_name_id: Some(1),
                    mapping_id: Some(1),
                    rel_pc: Some(0x10),
                    ..Default::default()
                },
                Frame {
                    iid: Some(2),
                    mapping_id: Some(1),
                    rel_pc: Some(0x20),
                    ..Default::default()
                },
            ],
            callstacks: vec![Callstack {
                iid: Some(1),
                frame_ids: vec![1, 2],
            }],
            ..Default::default()
        };
        let sample = |iid: u64, ts: u64| TracePacket {
            timestamp: Some(ts),
            trusted_packet_sequence_id: Some(9),
            sequence_flags: Some(2),
            perf_sample: Some(PerfSample {
                pid: Some(1),
                tid: Some(2),
                callstack_iid: Some(iid),
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut first = sample(1, 100);
        first.sequence_flags = Some(3);
        first.interned_data = Some(interned);
        let lost = TracePacket {
            trusted_packet_sequence_id: Some(9),
            perf_sample: Some(PerfSample {
                kernel_records_lost: Some(4),
                ..Default::default()
            }),
            ..Default::default()
        };
        let trace = ringtrace_protos::Trace {
            packet: vec![first, sample(1, 200), sample(7, 300), lost],
        };
        let got = decode(&trace.encode_to_vec(), 1 << 20);
        assert_eq!(got.samples.len(), 2);
        assert_eq!(got.samples[1].frames, vec!["main", "prog+0x20"]);
        assert_eq!((got.samples[1].ts, got.samples[1].tid), (200, 2));
        assert_eq!((got.unresolved, got.lost), (1, 4));
    }
}
