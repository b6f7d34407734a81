#!/usr/bin/env bash
# Runs every test of ringtrace: the Rust unit, integration and doc tests (which
# decode our traces with the official Perfetto schema), the Python decoder's
# self-tests, and the loom models of the lock-free code.
#
# Needs: a Rust toolchain, python3 with venv. It installs the rest (the
# `perfetto` and `protobuf` Python packages) into ./.venv.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -r tests/support/requirements.txt
export RINGTRACE_PYTHON="$PWD/.venv/bin/python"

echo "== python decoder self-tests"
(cd tests/support && "$RINGTRACE_PYTHON" -m unittest -q)

echo "== cargo test (workspace: unit, integration, doc tests)"
cargo test --workspace

echo "== memory budget, optimised (peak RSS of many threads against the budget)"
cargo test --release --test memory

echo "== loom models of the ring and the registry"
RUSTFLAGS="--cfg ringtrace_loom" CARGO_TARGET_DIR=target/loom \
  cargo test --release -p ringtrace --lib loom_tests
