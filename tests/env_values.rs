//! Environment values: `init_from_env` and `Builder::from_env` (finished by
//! `.subscriber()`) report each bad value as an `InvalidConfig` naming the variable and what
//! it allows, and no value of any `RINGTRACE_*` variable makes them abort,
//! panic or hang. Each case runs in a child process (the scenarios
//! `env_check` and `env_check_tracing`, which print `ok`, `off` or the
//! error), since the environment is the process's.

mod common;

use common::Rng;
use std::ffi::OsString;
use std::io::Read;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A child that runs longer than this hangs.
const HANG: Duration = Duration::from_secs(20);
/// What every message of an `InvalidConfig` starts with.
const INVALID: &str = "invalid ringtrace configuration: ";

/// How a child ended.
#[derive(Debug)]
struct Run {
    /// The exit code; `None` if a signal ended it (or it hung).
    code: Option<i32>,
    signal: Option<i32>,
    hung: bool,
    stdout: String,
    stderr: String,
}

impl Run {
    /// A clean end: a session started and stopped (or none, `off`), or an
    /// error reported; no signal, no panic, no hang.
    fn clean(&self) -> bool {
        !self.hung && matches!(self.code, Some(0 | 2)) && !self.stderr.contains("panicked")
    }
}

/// Runs `scenario` in `dir` with only `envs` of ringtrace's variables set.
fn run(scenario: &str, dir: &Path, envs: &[(&str, OsString)]) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ringtrace-test-scenarios"));
    cmd.args([scenario, "unused", "unused"])
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        if k.starts_with("RINGTRACE_")
            || k.starts_with("OTEL_")
            || k == "PERFETTO_PRODUCER_SOCK_NAME"
        {
            cmd.env_remove(&*k);
        }
    }
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("run the scenario binary");
    let pipe = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut b = Vec::new();
            let _ = r.read_to_end(&mut b);
            String::from_utf8_lossy(&b).into_owned()
        })
    };
    let out = pipe(Box::new(child.stdout.take().unwrap()));
    let err = pipe(Box::new(child.stderr.take().unwrap()));
    let start = Instant::now();
    let (status, hung) = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break (Some(s), false);
        }
        if start.elapsed() > HANG {
            let _ = child.kill();
            let _ = child.wait();
            break (None, true);
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    Run {
        code: status.and_then(|s| s.code()),
        signal: status.and_then(|s| s.signal()),
        hung,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}

fn os(v: &str) -> OsString {
    v.into()
}

/// The environment of a case: a file output in the test's directory, and
/// `vars`.
fn with_output(vars: &[(&'static str, OsString)]) -> Vec<(&'static str, OsString)> {
    let mut envs = vec![("RINGTRACE_OUTPUT", os("trace.pftrace"))];
    envs.extend(vars.iter().cloned());
    envs
}

/// The scenario that reads `var`: a `tracing` subscriber's for the
/// variables of `tracing` spans (sampling, how spans are drawn), else
/// `init_from_env`.
fn scenario_for(var: &str) -> &'static str {
    if var.starts_with("RINGTRACE_SAMPLE") || var == "RINGTRACE_SPAN_SLICES" {
        "env_check_tracing"
    } else {
        "env_check"
    }
}

/// Runs with `vars` (and a file output) and checks the child reports
/// exactly `InvalidConfig(message)` and exits 2.
fn expect_error(dir: &Path, vars: &[(&'static str, OsString)], message: &str) {
    let run = run(scenario_for(vars[0].0), dir, &with_output(vars));
    assert_eq!(
        (run.code, run.stdout.as_str()),
        (Some(2), format!("{INVALID}{message}\n").as_str()),
        "{vars:?}: {run:?}"
    );
}

/// Runs with `vars` (and a file output) and checks a session started and
/// stopped.
fn expect_ok(dir: &Path, vars: &[(&'static str, OsString)]) {
    let run = run(scenario_for(vars[0].0), dir, &with_output(vars));
    assert!(
        run.code == Some(0) && run.stdout == "ok\n" && !run.stderr.contains("panicked"),
        "{vars:?}: {run:?}"
    );
}

/// Every variable read as text: a value that is not UTF-8 is an error
/// naming it (it was ignored, as if unset). `RINGTRACE_OUTPUT` is a path:
/// any bytes name a file.
#[test]
fn values_that_are_not_utf8_are_errors() {
    let dir = common::scratch("env_utf8");
    let bad = || OsString::from_vec(b"on\xff\xfe".to_vec());
    // Every variable but the output (a path, checked below).
    for &var in VARIABLES.iter().filter(|v| **v != "RINGTRACE_OUTPUT") {
        expect_error(
            &dir,
            &[(var, bad())],
            &format!("{var} is not valid UTF-8 (its bytes: on\\xff\\xfe): the value must be text"),
        );
    }
    // Perfetto's socket, read with system tracing on.
    expect_error(
        &dir,
        &[
            ("RINGTRACE_SYSTEM", os("1")),
            ("PERFETTO_PRODUCER_SOCK_NAME", bad()),
        ],
        "PERFETTO_PRODUCER_SOCK_NAME is not valid UTF-8 (its bytes: on\\xff\\xfe): the value \
         must be text",
    );
    // With `RINGTRACE_OUTPUT` unset nothing is read: ringtrace is off.
    for scenario in ["env_check", "env_check_tracing"] {
        let run = run(
            scenario,
            &dir,
            &[("RINGTRACE_MAX_FILES", bad()), ("RINGTRACE_SAMPLE", bad())],
        );
        assert_eq!(
            (run.code, run.stdout.as_str()),
            (Some(0), "off\n"),
            "{run:?}"
        );
    }
    // A path of any bytes is a file name.
    let name = OsString::from_vec(b"tr\xffce.json".to_vec());
    let run = run("env_check", &dir, &[("RINGTRACE_OUTPUT", name.clone())]);
    assert_eq!(
        (run.code, run.stdout.as_str()),
        (Some(0), "ok\n"),
        "{run:?}"
    );
    assert!(dir.join(&name).metadata().unwrap().len() > 0);
}

/// Numbers: not a number and out of range are told apart, and each range
/// is the builder's (0 parts, an hz past u32, a ring past 1 TiB, a part
/// below the smallest were changed silently or reported as something else).
#[test]
fn numbers_out_of_range_say_the_range() {
    let dir = common::scratch("env_numbers");
    let parts = "parts kept on disk; 1: one file, a hard limit, events past \
                 RINGTRACE_MAX_FILE_BYTES dropped and counted";
    let budget = "bytes of memory for the rings of all threads";
    let ring = "bytes of the largest ring of one thread, 1 TiB at most, rounded up to a power of \
                two of at least 512";
    let hz = "CPU stack samples per second of each thread, 0: off";
    let part = "bytes of each part of the file on disk";
    let cases: &[(&str, &str, String)] = &[
        (
            "RINGTRACE_MAX_FILES",
            "0",
            format!("RINGTRACE_MAX_FILES=0 is out of range: at least 1 ({parts})"),
        ),
        (
            "RINGTRACE_MAX_FILES",
            "-1",
            format!("RINGTRACE_MAX_FILES=-1 is out of range: at least 1 ({parts})"),
        ),
        (
            "RINGTRACE_MAX_FILES",
            "0x10",
            format!(
                "RINGTRACE_MAX_FILES=0x10 is not a number (expected a whole number from 1 to \
                 18446744073709551615: {parts})"
            ),
        ),
        (
            "RINGTRACE_BUFFER_BYTES",
            "18446744073709551616",
            format!(
                "RINGTRACE_BUFFER_BYTES=18446744073709551616 is out of range: at most \
                 18446744073709551615 ({budget})"
            ),
        ),
        (
            "RINGTRACE_BUFFER_BYTES",
            "1000",
            format!("RINGTRACE_BUFFER_BYTES=1000 is out of range: at least 65536 ({budget})"),
        ),
        (
            "RINGTRACE_BUFFER_BYTES",
            "1e9",
            format!(
                "RINGTRACE_BUFFER_BYTES=1e9 is not a number (expected a whole number from 65536 \
                 to 18446744073709551615: {budget})"
            ),
        ),
        (
            "RINGTRACE_BUFFER_BYTES_PER_THREAD",
            "1099511627777",
            format!(
                "RINGTRACE_BUFFER_BYTES_PER_THREAD=1099511627777 is out of range: at most \
                 1099511627776 ({ring})"
            ),
        ),
        (
            "RINGTRACE_BUFFER_BYTES_PER_THREAD",
            "18446744073709551616",
            format!(
                "RINGTRACE_BUFFER_BYTES_PER_THREAD=18446744073709551616 is out of range: at most \
                 1099511627776 ({ring})"
            ),
        ),
        (
            "RINGTRACE_CPU_SAMPLING",
            "4294967296",
            format!("RINGTRACE_CPU_SAMPLING=4294967296 is out of range: at most 4294967295 ({hz})"),
        ),
        (
            "RINGTRACE_CPU_SAMPLING",
            "١٠٠",
            format!(
                "RINGTRACE_CPU_SAMPLING=١٠٠ is not a number (expected a whole number from 0 to \
                 4294967295: {hz})"
            ),
        ),
        (
            "RINGTRACE_MAX_FILE_BYTES",
            "1000",
            format!("RINGTRACE_MAX_FILE_BYTES=1000 is out of range: at least 65536 ({part})"),
        ),
    ];
    for (var, value, message) in cases {
        expect_error(&dir, &[(var, os(value))], message);
    }
    // The bounds themselves, trimmed, and empty as unset.
    expect_ok(
        &dir,
        &[
            ("RINGTRACE_MAX_FILES", os(" 1 ")),
            ("RINGTRACE_MAX_FILE_BYTES", os("65536")),
        ],
    );
    expect_ok(&dir, &[("RINGTRACE_BUFFER_BYTES", os("65536"))]);
    expect_ok(&dir, &[("RINGTRACE_CPU_SAMPLING", os("0"))]);
    expect_ok(
        &dir,
        &[("RINGTRACE_BUFFER_BYTES_PER_THREAD", os("1099511627776"))],
    );
    expect_ok(
        &dir,
        &[
            ("RINGTRACE_MAX_FILES", os("")),
            ("RINGTRACE_BUFFER_BYTES", os("  ")),
        ],
    );
}

/// Booleans: the eight words in any case; anything else is an error (it
/// meant false, silently).
#[test]
fn booleans_take_eight_words_in_any_case() {
    let dir = common::scratch("env_booleans");
    let allowed = "expected 1, true, yes, on to turn it on, or 0, false, no, off to turn it off; \
                   any case";
    for (var, value) in [
        ("RINGTRACE_OVERWRITE", "maybe"),
        ("RINGTRACE_OVERWRITE", "2"),
        ("RINGTRACE_SYSTEM", "enabled"),
    ] {
        expect_error(
            &dir,
            &[(var, os(value))],
            &format!("{var}={value} is not a boolean ({allowed})"),
        );
    }
    // `TRUE` turns flight-recorder mode on: with a hard disk limit, which
    // is not for it, start says so.
    expect_error(
        &dir,
        &[
            ("RINGTRACE_OVERWRITE", os(" TRUE ")),
            ("RINGTRACE_MAX_FILES", os("1")),
            ("RINGTRACE_MAX_FILE_BYTES", os("65536")),
        ],
        "max_files(1) (a hard disk limit) is for a streaming session, not with overwrite(true)",
    );
    expect_ok(
        &dir,
        &[
            ("RINGTRACE_OVERWRITE", os("Off")),
            ("RINGTRACE_SYSTEM", os("NO")),
        ],
    );
    expect_ok(&dir, &[("RINGTRACE_OVERWRITE", os("yes"))]);
    expect_ok(&dir, &[("RINGTRACE_OVERWRITE", os(""))]);
}

/// Patterns, the sampling ratio and the clock: malformed patterns, a ratio
/// that is NaN or outside 0 to 1, an unknown clock are errors that say
/// what is allowed.
#[test]
fn patterns_ratios_and_the_clock_are_checked() {
    let dir = common::scratch("env_patterns");
    let ratio = "a ratio from 0 to 1";
    let cases: &[(&str, &str, String)] = &[
        (
            "RINGTRACE_CATEGORIES",
            "io,a*b",
            "RINGTRACE_CATEGORIES: the pattern a*b is malformed: `*` goes only at the end \
             (expected comma-separated patterns: `name`, `prefix*` or `*`, `-` before one to \
             turn it off)"
                .into(),
        ),
        (
            "RINGTRACE_CATEGORIES",
            "io, -",
            "RINGTRACE_CATEGORIES: the pattern - is malformed: it names nothing (expected \
             comma-separated patterns: `name`, `prefix*` or `*`, `-` before one to turn it off)"
                .into(),
        ),
        (
            "RINGTRACE_SAMPLE_ROOTS",
            "request,-health",
            "RINGTRACE_SAMPLE_ROOTS: the pattern -health is malformed: a pattern here cannot \
             turn anything off (expected comma-separated patterns: `name`, `prefix*` or `*`)"
                .into(),
        ),
        (
            "RINGTRACE_SAMPLE",
            "NaN",
            format!("RINGTRACE_SAMPLE=NaN is not a number (expected {ratio}, such as 0.01)"),
        ),
        (
            "RINGTRACE_SAMPLE",
            "1.5",
            format!("RINGTRACE_SAMPLE=1.5 is out of range: at most 1 ({ratio})"),
        ),
        (
            "RINGTRACE_SAMPLE",
            "-inf",
            format!("RINGTRACE_SAMPLE=-inf is out of range: at least 0 ({ratio})"),
        ),
        (
            "RINGTRACE_SPAN_SLICES",
            "spans",
            "RINGTRACE_SPAN_SLICES=spans is not a value it takes (expected entered or \
             lifetime, or unset)"
                .into(),
        ),
        (
            "RINGTRACE_CLOCK",
            "tsc",
            "RINGTRACE_CLOCK=tsc is not a value it takes (expected boottime, or unset)".into(),
        ),
    ];
    for (var, value, message) in cases {
        expect_error(&dir, &[(var, os(value))], message);
    }
    expect_ok(&dir, &[("RINGTRACE_CATEGORIES", os("io,-noisy*, *"))]);
    expect_ok(&dir, &[("RINGTRACE_CATEGORIES", os(""))]);
    expect_ok(&dir, &[("RINGTRACE_SPAN_SLICES", os("Lifetime"))]);
    expect_ok(
        &dir,
        &[
            ("RINGTRACE_SAMPLE", os(" 0.5")),
            ("RINGTRACE_SAMPLE_ROOTS", os("req*,")),
        ],
    );
    expect_ok(&dir, &[("RINGTRACE_CLOCK", os("BootTime"))]);
}

/// A layer from the environment: `Builder::from_env` applies
/// `RINGTRACE_SAMPLE` and `RINGTRACE_SAMPLE_ROOTS` over the builder's own
/// sampling (ratio 1), and the layer it is finished with samples by them.
#[test]
fn the_environment_samples_a_layer() {
    let dir = common::scratch("env_layer");
    let cases: [(&[(&'static str, OsString)], &str); 4] = [
        // The builder's own ratio: every root decided and kept.
        (&[], "kept 11 skipped 0"),
        (&[("RINGTRACE_SAMPLE", os("0"))], "kept 0 skipped 11"),
        // Only the roots named: `health` is neither decided nor counted.
        (
            &[
                ("RINGTRACE_SAMPLE", os("0")),
                ("RINGTRACE_SAMPLE_ROOTS", os("req*")),
            ],
            "kept 0 skipped 10",
        ),
        // Set and empty: as unset, the builder's own ratio.
        (&[("RINGTRACE_SAMPLE", os(""))], "kept 11 skipped 0"),
    ];
    for (vars, want) in cases {
        let run = run("env_layer", &dir, &with_output(vars));
        assert_eq!(
            (run.code, run.stdout.trim_end()),
            (Some(0), want),
            "{vars:?}: {run:?}"
        );
    }
    let run = run("env_layer", &dir, &[("RINGTRACE_SAMPLE", os("0"))]);
    assert_eq!(
        (run.code, run.stdout.as_str()),
        (Some(0), "off\n"),
        "{run:?}"
    );
}

/// The OpenTelemetry variables of the export (feature `otlp`): the batch
/// processor's (`OTEL_BSP_*`) bound the requests a collector receives, and
/// `OTEL_TRACES_SAMPLER` (with `_ARG`) samples the roots, under
/// `RINGTRACE_SAMPLE` (ringtrace's own, which wins); bad values are errors
/// naming the variable.
#[test]
fn the_opentelemetry_variables_set_batches_and_sampling() {
    let dir = common::scratch("env_otel");
    let rx = ringtrace_test_support::otlp::OtlpReceiver::start("env-otel-rx", "normal");
    let otel = |vars: &[(&'static str, &str)]| {
        let mut v = vec![("OTEL_EXPORTER_OTLP_ENDPOINT", os(&rx.endpoint()))];
        v.extend(vars.iter().map(|&(k, x)| (k, os(x))));
        with_output(&v)
    };
    // Eleven roots (`env_layer`), exported in batches of at most three.
    let run1 = run(
        "env_layer",
        &dir,
        &otel(&[("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "3")]),
    );
    assert_eq!(run1.stdout, "kept 11 skipped 0\n", "{run1:?}");
    let sizes: Vec<usize> = rx
        .requests()
        .iter()
        .map(|r| r["spans"].as_array().map_or(0, Vec::len))
        .collect();
    assert_eq!(sizes.iter().sum::<usize>(), 11, "{sizes:?}");
    assert!(sizes.iter().all(|&n| (1..=3).contains(&n)), "{sizes:?}");
    let cases: [(&[(&'static str, &str)], &str); 7] = [
        (
            &[("OTEL_TRACES_SAMPLER", "always_off")],
            "kept 0 skipped 11",
        ),
        (
            &[("OTEL_TRACES_SAMPLER", "parentbased_always_off")],
            "kept 0 skipped 11",
        ),
        (
            &[
                ("OTEL_TRACES_SAMPLER", "traceidratio"),
                ("OTEL_TRACES_SAMPLER_ARG", "0"),
            ],
            "kept 0 skipped 11",
        ),
        (
            &[
                ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
                ("OTEL_TRACES_SAMPLER_ARG", "1"),
            ],
            "kept 11 skipped 0",
        ),
        // No argument: the specification's default, 1.
        (
            &[("OTEL_TRACES_SAMPLER", "traceidratio")],
            "kept 11 skipped 0",
        ),
        (&[("OTEL_TRACES_SAMPLER", "always_on")], "kept 11 skipped 0"),
        // ringtrace's own variable wins.
        (
            &[
                ("OTEL_TRACES_SAMPLER", "always_off"),
                ("RINGTRACE_SAMPLE", "1"),
            ],
            "kept 11 skipped 0",
        ),
    ];
    for (vars, want) in cases {
        let run = run("env_layer", &dir, &otel(vars));
        assert_eq!(
            (run.code, run.stdout.trim_end()),
            (Some(0), want),
            "{vars:?}: {run:?}"
        );
    }
    let errors: [(&[(&'static str, &str)], &str); 4] = [
        (&[("OTEL_TRACES_SAMPLER", "sometimes")], "OTEL_TRACES_SAMPLER=\"sometimes\": expected always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio"),
        (&[("OTEL_TRACES_SAMPLER", "traceidratio"), ("OTEL_TRACES_SAMPLER_ARG", "1.5")], "OTEL_TRACES_SAMPLER_ARG=\"1.5\": expected a ratio from 0 to 1"),
        (&[("OTEL_BSP_MAX_QUEUE_SIZE", "0")], "OTEL_BSP_MAX_QUEUE_SIZE=\"0\": expected a whole number above 0"),
        (&[("OTEL_BSP_SCHEDULE_DELAY", "soon")], "OTEL_BSP_SCHEDULE_DELAY=\"soon\": expected a whole number above 0"),
    ];
    for (vars, message) in errors {
        let run = run("env_layer", &dir, &otel(vars));
        assert_eq!(
            (run.code, run.stdout.as_str()),
            (Some(2), format!("{INVALID}{message}\n").as_str()),
            "{vars:?}: {run:?}"
        );
    }
}

/// Every variable `Builder::from_env` reads.
const VARIABLES: &[&str] = &[
    "RINGTRACE_OUTPUT",
    "RINGTRACE_SYSTEM",
    "RINGTRACE_CATEGORIES",
    "RINGTRACE_BUFFER_BYTES",
    "RINGTRACE_BUFFER_BYTES_PER_THREAD",
    "RINGTRACE_OVERWRITE",
    "RINGTRACE_MAX_FILE_BYTES",
    "RINGTRACE_MAX_FILES",
    "RINGTRACE_CPU_SAMPLING",
    "RINGTRACE_CLOCK",
    "RINGTRACE_SAMPLE",
    "RINGTRACE_SAMPLE_ROOTS",
    "RINGTRACE_SPAN_SLICES",
];

/// Values no variable takes, or at the edge of what one takes.
fn bad_values() -> Vec<OsString> {
    let mut v: Vec<OsString> = [
        "",
        "   ",
        "-1",
        "1e9",
        "0x10",
        "18446744073709551616",
        "18446744073709551615",
        "4294967296",
        "NaN",
        "inf",
        "\u{1}\u{7}\t\r\n\u{1b}[0m",
        "١",
        "*,-,**,-*,a*b",
        ",,,",
    ]
    .iter()
    .map(|s| os(s))
    .collect();
    v.push(os(&"9".repeat(100 << 10)));
    v.push(os(&"é,".repeat((100 << 10) / 3)));
    v.push(OsString::from_vec(b"\xff\xfe\x80".to_vec()));
    v.push(OsString::from_vec(b"1\xc3".to_vec()));
    v
}

/// Random bytes (no NUL, which no environment value holds), biased to what
/// parsers look at: digits, signs, separators, stars, spaces, bytes that are
/// not UTF-8.
fn random_bytes(rng: &mut Rng) -> Vec<u8> {
    const PICKS: &[u8] = b"0123456789-+.,*eExX _aZ\t\xff\xc3\xa9\x80";
    let len = (rng.next() % 24) as usize;
    (0..len)
        .map(|_| match rng.next() % 4 {
            0 => (rng.next() % 255 + 1) as u8,
            _ => PICKS[(rng.next() % PICKS.len() as u64) as usize],
        })
        .collect()
}

/// One fuzz case: the variables set beside a file output (unless one of
/// them is the output), and why the case may fail on this code if it does.
struct Case {
    vars: Vec<(&'static str, OsString)>,
    known: Option<&'static str>,
}

/// Every `RINGTRACE_*` variable with bad values (fixed, then random bytes
/// from a seeded generator), and combinations: each run ends cleanly (a
/// session started and stopped, or an error reported), within 20 s, with
/// no panic; an error names the variable.
#[test]
fn fuzz_every_variable_with_bad_values() {
    let dir = common::scratch("env_fuzz");
    let mut rng = Rng(0x5eed_0fe4_71e5 | 1);
    let mut cases = Vec::new();
    for &var in VARIABLES {
        let mut values = bad_values();
        values.extend((0..24).map(|_| OsString::from_vec(random_bytes(&mut rng))));
        for value in values {
            let value = if var == "RINGTRACE_OUTPUT" {
                // A name in the test's directory, never a path elsewhere.
                let mut b = value.into_vec();
                b.iter_mut().filter(|c| **c == b'/').for_each(|c| *c = b'_');
                OsString::from_vec(b)
            } else {
                value
            };
            cases.push(Case {
                vars: vec![(var, value)],
                known: None,
            });
        }
    }
    let max = os("18446744073709551615");
    let combos: Vec<Vec<(&'static str, OsString)>> = vec![
        vec![
            ("RINGTRACE_OVERWRITE", os("1")),
            ("RINGTRACE_BUFFER_BYTES", os("4294967296")),
        ],
        vec![
            ("RINGTRACE_MAX_FILES", max.clone()),
            ("RINGTRACE_MAX_FILE_BYTES", max.clone()),
        ],
        vec![
            ("RINGTRACE_MAX_FILES", os("1")),
            ("RINGTRACE_MAX_FILE_BYTES", os("65536")),
        ],
        vec![
            ("RINGTRACE_BUFFER_BYTES_PER_THREAD", os("1099511627776")),
            ("RINGTRACE_BUFFER_BYTES", os("65536")),
        ],
        vec![("RINGTRACE_CPU_SAMPLING", os("4294967295"))],
        vec![
            ("RINGTRACE_OUTPUT", os("system")),
            ("RINGTRACE_SYSTEM", os("0")),
        ],
    ];
    for vars in combos {
        cases.push(Case { vars, known: None });
    }
    // Pairs of variables (but the output), each with a bad or random value.
    let fixed = bad_values();
    for _ in 0..60 {
        let mut pick = || {
            let var = VARIABLES[1 + (rng.next() % (VARIABLES.len() as u64 - 1)) as usize];
            let value = match rng.next() % 2 {
                0 => fixed[(rng.next() % fixed.len() as u64) as usize].clone(),
                _ => OsString::from_vec(random_bytes(&mut rng)),
            };
            (var, value)
        };
        let (a, b) = (pick(), pick());
        if a.0 != b.0 {
            cases.push(Case {
                vars: vec![a, b],
                known: None,
            });
        }
    }
    cases.push(Case {
        vars: vec![
            ("RINGTRACE_OVERWRITE", os("1")),
            ("RINGTRACE_BUFFER_BYTES", max),
        ],
        known: Some(
            "known: flight-recorder mode reserved the whole budget up front (the recorder's fix)",
        ),
    });

    let started = Instant::now();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failures = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(case) = cases.get(i) else { break };
                let first = case.vars[0].0;
                let envs = if case.vars.iter().any(|(k, _)| *k == "RINGTRACE_OUTPUT") {
                    case.vars.clone()
                } else {
                    with_output(&case.vars)
                };
                for scenario in ["env_check", "env_check_tracing"] {
                    let run = run(scenario, &dir, &envs);
                    // Both read every variable, the sampling ones included; a
                    // case is checked the same way for both.
                    // The error of one bad variable names it (but the output's:
                    // I/O or format errors of the path).
                    let named = run.code != Some(2)
                        || first == "RINGTRACE_OUTPUT"
                        || case.vars.len() > 1
                        || run.stdout.starts_with(&format!("{INVALID}{first}"));
                    if !run.clean() || !named {
                        let shown: Vec<_> = case
                            .vars
                            .iter()
                            .map(|(k, v)| {
                                let v = v.to_string_lossy();
                                format!("{k}={:?}", v.chars().take(40).collect::<String>())
                            })
                            .collect();
                        let stderr: String = run.stderr.chars().take(600).collect();
                        failures.lock().unwrap().push(format!(
                            "{scenario} {} ({}): exit {:?}, signal {:?}, hung {}, stdout {:?}, \
                         stderr {stderr:?}",
                            shown.join(" "),
                            case.known.unwrap_or("not known"),
                            run.code,
                            run.signal,
                            run.hung,
                            run.stdout.chars().take(300).collect::<String>(),
                        ));
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    eprintln!("{} cases in {:?}", cases.len(), started.elapsed());
    assert!(
        failures.is_empty(),
        "{} of {} cases did not end cleanly:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}
