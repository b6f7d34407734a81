#!/usr/bin/env bash
# Runs every test of ringtrace: the Rust unit, integration and doc tests (which
# decode our traces with the official Perfetto schema), the Python decoder's
# self-tests, and the loom models of the lock-free code.
#
# Needs: a Rust toolchain, python3 with venv. It installs the rest (the
# `perfetto` and `protobuf` Python packages) into ./.venv, g++ with apt if
# there is no C++ compiler, and the C library's debug symbols (libc6-dbg)
# and binutils with apt where they are missing.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -r tests/support/requirements.txt
export RINGTRACE_PYTHON="$PWD/.venv/bin/python"

# The system tracing tests build Perfetto's tracing service from C++
# (perfetto-test-host/build.rs): a C++17 compiler is needed.
if [ -z "${CXX:-}" ] && ! command -v g++ >/dev/null && ! command -v c++ >/dev/null \
  && ! command -v clang++ >/dev/null; then
  echo "== installing a C++ compiler (g++) for perfetto-test-host"
  if [ "$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq g++; \
  else sudo apt-get update -qq && sudo apt-get install -y -qq g++; fi
fi

# CPU sampling names the C library's internal functions (malloc's, free's)
# from its debug file, found by build id under /usr/lib/debug: the tests
# check it, so the system's debug symbols are installed (Debian's
# libc6-dbg), and objcopy (binutils) makes a library with MiniDebugInfo.
missing=""
if command -v dpkg-query >/dev/null; then
  dpkg-query -W -f='${Status}' libc6-dbg 2>/dev/null | grep -q "ok installed" \
    || missing="$missing libc6-dbg"
fi
command -v objcopy >/dev/null || missing="$missing binutils"
if [ -n "$missing" ]; then
  echo "== installing$missing (the C library's debug symbols, objcopy)"
  if [ "$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq $missing; \
  else sudo apt-get update -qq && sudo apt-get install -y -qq $missing; fi
fi

echo "== python decoder self-tests"
(cd tests/support && "$RINGTRACE_PYTHON" -m unittest -q)

echo "== cargo test (workspace: unit, integration, doc tests)"
cargo test --workspace

echo "== OTLP export (feature otlp; its test needs the feature on the SDK itself)"
cargo test -p ringtrace --features otlp --test otlp

echo "== OTLP end to end: spans read back whole from Arize Phoenix (installed from PyPI)"
./scripts/phoenix-e2e.sh

echo "== memory budget, optimised (peak RSS of many threads against the budget)"
cargo test --release --test memory

echo "== loom models of the ring and the registry"
RUSTFLAGS="--cfg ringtrace_loom" CARGO_TARGET_DIR=target/loom \
  cargo test --release -p ringtrace --lib loom_tests

echo "== memcheck (valgrind) of the unsafe code: rings, registry, exit paths, signals, kills, examples"
./scripts/memcheck.sh
