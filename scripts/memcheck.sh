#!/usr/bin/env bash
# Runs the tests and programs that exercise ringtrace's `unsafe` code under
# valgrind's memcheck (Miri needs nightly Rust; memcheck checks the stable
# binaries themselves): the ring, registry, clock and span-table unit tests,
# threads exiting and the registry's hand-over, the exit paths
# (process::exit, panics in main and in a worker, init_from_env), the signal
# handlers (SIGINT/SIGTERM), writers killed mid-write, and every example
# program (system_trace with no tracing service to connect to). Any memcheck error (invalid read or write, use of uninitialised
# memory, invalid or mismatched free, overlapping copy, definite leak) fails
# the run, in the test binaries and in every child program they start.
# Suppressions: scripts/memcheck.supp (each one with its reason).
#
# RINGTRACE_MEMCHECK=full adds 10,000 threads exiting (several minutes).
# Installs valgrind with apt-get when it is missing (CI runs as root).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v valgrind >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing valgrind"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >/dev/null
  else
    echo "memcheck needs valgrind: apt-get install valgrind" >&2
    exit 1
  fi
fi

# Children that are not ours (Python decoders, tar) run without valgrind.
vg=(valgrind --tool=memcheck --error-exitcode=99 -q
    --leak-check=full --show-leak-kinds=definite --errors-for-leak-kinds=definite
    --trace-children=yes "--trace-children-skip=*python*,*/tar,*/sh,*/bash"
    --child-silent-after-fork=yes --fair-sched=yes
    "--suppressions=$PWD/scripts/memcheck.supp")

# Test binaries run through valgrind as cargo's runner for the host.
host=$(rustc -vV | sed -n 's/^host: //p')
runner_var="CARGO_TARGET_$(echo "$host" | tr 'a-z-' 'A-Z_')_RUNNER"
export "$runner_var=${vg[*]}"

echo "-- unit tests: ring, registry, clock, span table"
cargo test -q -p ringtrace --lib -- ring registry clock span_table

echo "-- exit paths, signals, SIGKILL mid-write, thread churn (child programs under memcheck too)"
# Skipped: abort_leaves_what_was_flushed_readable and
# sigkill_mid_write_leaves_a_readable_prefix give the flusher a fixed 100-150 ms
# before the end, too short under valgrind; tests/kill_whole_events.rs kills
# writers under memcheck instead, waiting for what they wrote.
cargo test -q --test exit_paths -- --skip abort
cargo test -q --test reliability -- sigterm write_errors
# 10,000 threads exiting take minutes under valgrind: on demand. The exit-path
# tests and the examples above have threads exit (and hand their rings over)
# on every run.
if [ "${RINGTRACE_MEMCHECK:-}" = full ]; then
  cargo test -q --test reliability -- thread_churn
fi
RINGTRACE_KILL_MAX_BYTES=$((256 << 10)) cargo test -q --test kill_whole_events -- killed_json killed_perfetto

echo "-- example programs"
unset "$runner_var"
cargo build -q --examples
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for ex in quickstart categories flight_recorder async_tasks; do
  echo "   $ex"
  "${vg[@]}" "target/debug/examples/$ex" "$out/$ex.pftrace" >/dev/null
  "${vg[@]}" "target/debug/examples/$ex" "$out/$ex.json" >/dev/null
done
echo "   tracing_layer"
"${vg[@]}" target/debug/examples/tracing_layer "$out/layer.pftrace" >/dev/null
"${vg[@]}" target/debug/examples/tracing_layer --subscriber "$out/subscriber.pftrace" >/dev/null
echo "   multiprocess_archive"
(cd "$out" && "${vg[@]}" "$OLDPWD/target/debug/examples/multiprocess_archive" >/dev/null)
echo "   production_service (sampled, and captures)"
"${vg[@]}" target/debug/examples/production_service sample "$out/prod-sample" >/dev/null
"${vg[@]}" target/debug/examples/production_service capture "$out/prod-capture" >/dev/null
echo "   capture_windows"
"${vg[@]}" target/debug/examples/capture_windows "$out/capture" >/dev/null
echo "   cpu_sampling (both stack modes: perf rings, ELF files mapped)"
"${vg[@]}" target/debug/examples/cpu_sampling "$out/cpu.pftrace" copied 300 >/dev/null
"${vg[@]}" target/debug/examples/cpu_sampling "$out/cpu.json" fp 300 >/dev/null
echo "   system_trace (no traced: the producer's retry path)"
PERFETTO_PRODUCER_SOCK_NAME="$out/no-traced.sock" \
  "${vg[@]}" target/debug/examples/system_trace 1 >/dev/null
echo "memcheck: no errors"
