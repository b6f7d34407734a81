//! `ringtrace`: pack traces into a Perfetto archive with a manifest, inspect
//! a trace or an archive, convert between ringtrace's Perfetto and JSON.
//!
//! Exit status: 0 success, 1 the command failed (unreadable or invalid input,
//! an archive the manifest rules reject), 2 usage error. Output cut short by
//! its reader (`ringtrace inspect x | head`) ends the program quietly, with
//! status 0.

#![forbid(unsafe_code)]

use ringtrace_archive::{Archive, Clock, ZipMethod};
use ringtrace_cli::{inspect, out, outln, unpack_limit, Inspected};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

const USAGE: &str = "\
usage:
  ringtrace pack -o OUT.tar|OUT.zip [options] FILE|DIR...
  ringtrace inspect [--json] FILE
  ringtrace convert IN OUT
  ringtrace flamegraph [--thread NAME_OR_TID]... [--under NAME] [--folded]
                       -o OUT.svg TRACE
  ringtrace help

pack: writes the files (a directory adds its trace files, with the sidecars
written by ringtrace::archive::member_builder) into one archive with a
perfetto_manifest. FILE below is a member name (a file's name).
  -o, --output PATH               the archive; .tar or .zip
  --machine FILE=NAME             FILE was recorded on machine NAME
  --machines FILE=ID:NAME[,ID:NAME...]
                                  names the machine ids of a multi-machine trace
  --sync FILE=REF[:CLOCK][@OFFSET_NS]
                                  places FILE against REF: with CLOCK, relates
                                  FILE's CLOCK to REF's (RELATE); without, pins
                                  the clockless FILE to REF (PIN). Without
                                  @OFFSET_NS the offset is computed from the
                                  clocks the files recorded.
  --trace-time CLOCK[@FILE]       the merged timeline's clock (of FILE's machine)
  --attr KEY=VALUE                a manifest attribute (integer if it parses)
  --recorded-here FILE            FILE (JSON) was recorded on this machine
  --foreign FILE                  FILE is JSON ringtrace did not write: no
                                  automatic pinning
  --no-auto-clocks                do not pin ringtrace JSON files automatically
  --stored                        ZIP: store members uncompressed
  --allow-unrecognized            pack files no Perfetto reader recognizes as a
                                  trace (trace_processor refuses such archives)
  --print-manifest                print the manifest written
  --join                          join every Perfetto file without settings into
                                  one (processes.pftrace), the caller knowing
                                  they were recorded on one machine
  --no-join                       keep every file as it is
  Perfetto matches flows (a request crossing from one process to another)
  within a file, never across the files of an archive: by default the
  Perfetto files without settings whose sidecars say they were recorded on one
  machine (a directory the processes wrote) are joined into one,
  processes.pftrace, so those flows link.
  Clocks: REALTIME REALTIME_COARSE MONOTONIC MONOTONIC_COARSE MONOTONIC_RAW BOOTTIME

inspect: sequences, processes and threads, slices and marks by kind, lost events, time
range and clocks of a .pftrace or .json trace, or of every trace in a .tar/.zip
archive (after checking its manifest and that every member is a trace a
Perfetto reader recognizes; exit status 1 if not); gzipped traces are read
too. --json prints it as JSON.

convert: ringtrace Perfetto (.pftrace, .perfetto-trace, .pb) to Chrome JSON
(.json) or back; the output format follows OUT's extension.

flamegraph: draws the trace's CPU stack samples (Builder::cpu_sampling) as an
SVG flame graph titled with the program's name (its process name in the
trace, else the file's stem), one root per thread (`name (tid)`, or
`thread tid` for a thread without a name) so threads do not mix.
  --thread NAME_OR_TID            keeps only that thread's samples: a tid, a
                                  name, or `prefix*`; repeat it or separate
                                  several with commas. One matching no
                                  sampled thread is an error naming them.
  --under NAME                    keeps the samples taken while their thread
                                  was inside a slice named NAME
  --folded                        writes the folded stacks (one
                                  `thread;outer;inner count` line per stack)
                                  instead of the SVG

inspect and convert decompress (gzip, ZIP deflate) at most 1 GiB; set
RINGTRACE_MAX_UNPACKED=BYTES to change that.
";

/// A failure, with the exit status it maps to.
enum Failure {
    Usage(String),
    Failed(String),
}

fn usage(m: impl Into<String>) -> Failure {
    Failure::Usage(m.into())
}

fn failed(m: impl Into<String>) -> Failure {
    Failure::Failed(m.into())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("pack") => pack(&args[1..]),
        Some("inspect") => inspect(&args[1..]),
        Some("convert") => convert_cmd(&args[1..]),
        Some("flamegraph") => flamegraph(&args[1..]),
        Some("help" | "-h" | "--help") => {
            out!("{USAGE}");
            Ok(())
        }
        Some(other) => Err(usage(format!("unknown command {other:?}"))),
        None => Err(usage("no command given")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(m)) => {
            eprintln!("ringtrace: {m}\n\n{USAGE}");
            ExitCode::from(2)
        }
        Err(Failure::Failed(m)) => {
            eprintln!("ringtrace: {m}");
            ExitCode::from(1)
        }
    }
}

fn read(path: &str) -> Result<Vec<u8>, Failure> {
    std::fs::read(path).map_err(|e| failed(format!("cannot read {path}: {e}")))
}

/// Splits `FILE=VALUE`.
fn split_eq<'a>(opt: &str, v: &'a str) -> Result<(&'a str, &'a str), Failure> {
    match v.split_once('=') {
        Some((a, b)) if !a.is_empty() && !b.is_empty() => Ok((a, b)),
        _ => Err(usage(format!("{opt} expects FILE=VALUE, got {v:?}"))),
    }
}

fn parse_clock(s: &str) -> Result<Clock, Failure> {
    s.parse()
        .map_err(|e: ringtrace_archive::ArchiveError| usage(e.to_string()))
}

enum Op {
    Machine(String, String),
    Machines(String, Vec<(i64, String)>),
    Sync {
        file: String,
        reference: String,
        clock: Option<Clock>,
        offset: Option<i64>,
    },
    RecordedHere(String),
    Foreign(String),
}

/// The member the Perfetto files of one machine are joined into.
const JOINED: &str = "processes.pftrace";

fn pack(args: &[String]) -> Result<(), Failure> {
    let mut output: Option<PathBuf> = None;
    let mut inputs: Vec<String> = Vec::new();
    let mut ops: Vec<Op> = Vec::new();
    let mut trace_time: Option<(Clock, Option<String>)> = None;
    let mut attrs: Vec<(String, String)> = Vec::new();
    let (mut auto, mut stored, mut print_manifest) = (true, false, false);
    let mut allow_unrecognized = false;
    // None: join what the sidecars place on one machine.
    let mut join: Option<bool> = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| usage(format!("{name} needs a value")))
        };
        match a.as_str() {
            "-o" | "--output" => output = Some(PathBuf::from(value(a)?)),
            "--machine" => {
                let v = value(a)?;
                let (f, n) = split_eq(a, &v)?;
                ops.push(Op::Machine(f.into(), n.into()));
            }
            "--machines" => {
                let v = value(a)?;
                let (f, list) = split_eq(a, &v)?;
                let mut ids = Vec::new();
                for item in list.split(',') {
                    let (id, name) = item.split_once(':').ok_or_else(|| {
                        usage(format!("--machines expects ID:NAME pairs, got {item:?}"))
                    })?;
                    let id = id
                        .parse::<i64>()
                        .map_err(|_| usage(format!("--machines: {id:?} is not an integer")))?;
                    ids.push((id, name.to_owned()));
                }
                ops.push(Op::Machines(f.into(), ids));
            }
            "--sync" => {
                let v = value(a)?;
                let (file, rest) = split_eq(a, &v)?;
                let (rest, offset) = match rest.rsplit_once('@') {
                    Some((r, o)) => (
                        r,
                        Some(o.parse::<i64>().map_err(|_| {
                            usage(format!("--sync: offset {o:?} is not an integer (ns)"))
                        })?),
                    ),
                    None => (rest, None),
                };
                let (reference, clock) = match rest.rsplit_once(':') {
                    Some((r, c)) => (r, Some(parse_clock(c)?)),
                    None => (rest, None),
                };
                if reference.is_empty() {
                    return Err(usage(format!("--sync {v:?}: no reference file")));
                }
                ops.push(Op::Sync {
                    file: file.into(),
                    reference: reference.into(),
                    clock,
                    offset,
                });
            }
            "--trace-time" => {
                let v = value(a)?;
                trace_time = Some(match v.split_once('@') {
                    Some((c, f)) => (parse_clock(c)?, Some(f.to_owned())),
                    None => (parse_clock(&v)?, None),
                });
            }
            "--attr" => {
                let v = value(a)?;
                let (k, val) = v
                    .split_once('=')
                    .ok_or_else(|| usage(format!("--attr expects KEY=VALUE, got {v:?}")))?;
                attrs.push((k.into(), val.into()));
            }
            "--recorded-here" => ops.push(Op::RecordedHere(value(a)?)),
            "--foreign" => ops.push(Op::Foreign(value(a)?)),
            "--no-auto-clocks" => auto = false,
            "--stored" => stored = true,
            "--allow-unrecognized" => allow_unrecognized = true,
            "--print-manifest" => print_manifest = true,
            "--join" => join = Some(true),
            "--no-join" => join = Some(false),
            s if s.starts_with('-') && s.len() > 1 => {
                return Err(usage(format!("unknown option {s:?}")))
            }
            s => inputs.push(s.to_owned()),
        }
    }
    let output = output.ok_or_else(|| usage("pack needs -o OUT.tar or -o OUT.zip"))?;
    let zip = match output
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        Some("zip") => true,
        Some("tar") => false,
        _ => {
            return Err(usage(format!(
                "{}: the archive must end in .tar or .zip",
                output.display()
            )))
        }
    };
    if inputs.is_empty() {
        return Err(usage("pack needs at least one trace file"));
    }
    let mut archive = Archive::new();
    for input in &inputs {
        let p = Path::new(input);
        if p.is_dir() {
            archive.add_dir(p).map_err(|e| failed(e.to_string()))?;
        } else {
            archive.add_file(p).map_err(|e| failed(e.to_string()))?;
        }
    }
    let member = |archive: &mut Archive, f: &str| -> Result<(), Failure> {
        archive
            .file(f)
            .map(|_| ())
            .map_err(|e| usage(format!("{e} (members: {})", member_list(archive))))
    };
    for op in ops {
        match op {
            Op::Machine(f, n) => {
                member(&mut archive, &f)?;
                archive.file(&f).unwrap().machine(n);
            }
            Op::Machines(f, ids) => {
                member(&mut archive, &f)?;
                archive.file(&f).unwrap().machines(ids);
            }
            Op::Sync {
                file,
                reference,
                clock,
                offset,
            } => {
                member(&mut archive, &file)?;
                let m = archive.file(&file).unwrap();
                m.sync_to(reference, clock);
                if let Some(o) = offset {
                    m.offset_ns(o);
                }
            }
            Op::RecordedHere(f) => {
                member(&mut archive, &f)?;
                archive.file(&f).unwrap().recorded_here();
            }
            Op::Foreign(f) => {
                member(&mut archive, &f)?;
                archive.file(&f).unwrap().foreign();
            }
        }
    }
    if let Some((clock, file)) = trace_time {
        archive.trace_time(clock, file.as_deref(), None);
    }
    if join != Some(false) {
        let joined = archive
            .join_processes(JOINED, join == Some(true))
            .map_err(|e| failed(e.to_string()))?;
        if !joined.is_empty() {
            outln!(
                "joined {} into {JOINED} (one trace: flows between them link)",
                joined.join(", ")
            );
        }
    }
    for (k, v) in attrs {
        match v.parse::<i64>() {
            Ok(i) => archive.attribute(k, i),
            Err(_) => archive.attribute(k, v),
        };
    }
    archive.auto_clocks(auto);
    archive.allow_unrecognized(allow_unrecognized);
    if stored {
        archive.zip_method(ZipMethod::Stored);
    }
    let manifest = archive.manifest().map_err(|e| failed(e.to_string()))?;
    let written = if zip {
        archive.write_zip(&output)
    } else {
        archive.write_tar(&output)
    };
    written.map_err(|e| failed(e.to_string()))?;
    outln!(
        "wrote {} ({} trace file(s) + {})",
        output.display(),
        archive.members().len(),
        ringtrace_archive::MANIFEST_NAME
    );
    for f in &manifest.files {
        let mut notes = Vec::new();
        if let Some(m) = &f.machine {
            notes.push(format!("machine {m}"));
        }
        if let Some(c) = &f.clocks {
            let to = c
                .sync_to
                .as_ref()
                .and_then(|s| s.file.clone())
                .unwrap_or_default();
            let mode = match c.clock {
                Some(k) => format!("relates {k} to {to}"),
                None => format!("pinned to {to}"),
            };
            notes.push(format!("{mode}, offset {} ns", c.offset_ns.unwrap_or(0)));
        }
        outln!(
            "  {}{}",
            f.path,
            if notes.is_empty() {
                String::new()
            } else {
                format!(": {}", notes.join("; "))
            }
        );
    }
    if print_manifest {
        out!("{}", manifest.to_json());
    }
    // With `--allow-unrecognized` the archive may hold a member no Perfetto
    // reader takes: say so rather than send the user to the UI with it.
    let refused = if allow_unrecognized {
        std::fs::read(&output)
            .map_err(|e| e.to_string())
            .and_then(|bytes| {
                ringtrace::archive::check_archive(&bytes)
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            })
            .err()
    } else {
        None
    };
    match refused {
        Some(why) => outln!(
            "Perfetto's readers (ui.perfetto.dev, trace_processor) will refuse this archive: {why}"
        ),
        None => outln!(
            "open it at https://ui.perfetto.dev (Open trace file), or: trace_processor {}",
            output.display()
        ),
    }
    Ok(())
}

fn member_list(a: &Archive) -> String {
    a.members()
        .iter()
        .map(|m| m.name())
        .collect::<Vec<_>>()
        .join(", ")
}

fn flamegraph(args: &[String]) -> Result<(), Failure> {
    let mut under = None;
    let mut output = None;
    let mut folded = false;
    let mut threads: Vec<String> = Vec::new();
    let mut file = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--under" => under = Some(it.next().ok_or_else(|| usage("--under needs a name"))?),
            "--thread" => {
                let v = it
                    .next()
                    .ok_or_else(|| usage("--thread needs a thread name or tid"))?;
                for t in v.split(',') {
                    let t = t.trim();
                    if t.is_empty() {
                        return Err(usage(format!("--thread {v:?}: an empty thread name")));
                    }
                    threads.push(t.to_owned());
                }
            }
            "-o" | "--output" => output = Some(it.next().ok_or_else(|| usage("-o needs a path"))?),
            "--folded" => folded = true,
            s if s.starts_with('-') && s.len() > 1 => {
                return Err(usage(format!("unknown option {s:?}")))
            }
            s if file.is_none() => file = Some(s.to_owned()),
            s => return Err(usage(format!("flamegraph takes one trace, got also {s:?}"))),
        }
    }
    let file = file.ok_or_else(|| usage("flamegraph needs a trace"))?;
    let output = output.ok_or_else(|| usage("flamegraph needs -o OUT"))?;
    let bytes = read(&file)?;
    let flame = ringtrace_cli::flame(
        &file,
        bytes,
        under.map(String::as_str),
        &threads,
        unpack_limit(),
    )
    .map_err(failed)?;
    if flame.stacks.is_empty() {
        return Err(failed(match under {
            Some(u) => format!("{file}: no CPU samples inside a slice named {u:?}"),
            None => format!("{file}: no CPU samples (record with Builder::cpu_sampling)"),
        }));
    }
    let data = if folded {
        let mut t = flame.stacks.join("\n");
        t.push('\n');
        t.into_bytes()
    } else {
        let program = flame.program.unwrap_or_else(|| file_stem(&file));
        let title = match under {
            Some(u) => format!("{program}: CPU samples under {u}"),
            None => format!("{program}: CPU samples"),
        };
        ringtrace_cli::samples::flamegraph_svg(&flame.stacks, &title).map_err(failed)?
    };
    std::fs::write(output, data).map_err(|e| failed(format!("cannot write {output}: {e}")))?;
    outln!(
        "{output}: {} samples, {} distinct stacks",
        flame.samples,
        flame.stacks.len()
    );
    Ok(())
}

/// The name of `path` without its directory and extension (`.gz` and the
/// one before it: `run.pftrace.gz` is `run`).
fn file_stem(path: &str) -> String {
    let p = Path::new(path);
    let p = match p.extension() {
        Some(e) if e.eq_ignore_ascii_case("gz") => Path::new(p.file_stem().unwrap_or_default()),
        _ => p,
    };
    p.file_stem()
        .map_or_else(|| path.to_owned(), |s| s.to_string_lossy().into_owned())
}

fn inspect(args: &[String]) -> Result<(), Failure> {
    let mut as_json = false;
    let mut file = None;
    for a in args {
        match a.as_str() {
            "--json" => as_json = true,
            s if s.starts_with('-') && s.len() > 1 => {
                return Err(usage(format!("unknown option {s:?}")))
            }
            s if file.is_none() => file = Some(s.to_owned()),
            s => return Err(usage(format!("inspect takes one file, got also {s:?}"))),
        }
    }
    let file = file.ok_or_else(|| usage("inspect needs a file"))?;
    let bytes = read(&file)?;
    match ringtrace_cli::inspect_bytes(&file, bytes, unpack_limit()).map_err(failed)? {
        Inspected::Archive { summary, valid } => {
            if as_json {
                outln!("{}", serde_json::to_string_pretty(&summary).unwrap());
            } else {
                inspect::print_archive(&summary);
            }
            if valid {
                Ok(())
            } else {
                Err(failed(format!(
                    "{file}: {}",
                    summary["error"].as_str().unwrap_or("")
                )))
            }
        }
        Inspected::Trace(summary) => {
            if as_json {
                outln!("{}", serde_json::to_string_pretty(&summary).unwrap());
            } else {
                inspect::print_trace(&file, &summary, "");
            }
            Ok(())
        }
    }
}

fn convert_cmd(args: &[String]) -> Result<(), Failure> {
    let [input, output] = args else {
        return Err(usage("convert takes IN and OUT"));
    };
    let out_format = match ringtrace::Format::from_path(Path::new(output)) {
        Some(f) => f,
        None => {
            return Err(usage(format!(
                "{output}: OUT must end in .json, .pftrace, .perfetto-trace or .pb"
            )))
        }
    };
    let (data, m) = ringtrace_cli::convert_bytes(input, read(input)?, out_format, unpack_limit())
        .map_err(failed)?;
    std::fs::write(output, &data).map_err(|e| failed(format!("cannot write {output}: {e}")))?;
    for w in &m.warnings {
        eprintln!("ringtrace: warning: {w}");
    }
    outln!(
        "wrote {output} ({} slices and marks, {} bytes)",
        m.events.len(),
        data.len()
    );
    Ok(())
}
