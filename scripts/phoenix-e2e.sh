#!/usr/bin/env bash
# End to end against a real OTLP backend: Arize Phoenix (from PyPI) receives
# the spans of two ringtrace processes over OTLP/HTTP (a client whose
# request carries its `traceparent`, a server continuing that trace), and
# the spans are read back whole from Phoenix's REST API: names, parents,
# attributes, events, trace ids (scripts/phoenix_e2e.py says what is
# checked).
#
# Needs python3 with venv and PyPI reachable the first time: Phoenix is
# installed into ./.venv-phoenix (PHOENIX_VENV overrides), pinned below.
# Took 2.3 min to install and 40 s to start on a loaded 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/.."

PHOENIX_VERSION=20.26.1
venv="${PHOENIX_VENV:-$PWD/.venv-phoenix}"
if [ ! -x "$venv/bin/phoenix" ]; then
  echo "== installing arize-phoenix $PHOENIX_VERSION into $venv"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    "arize-phoenix==$PHOENIX_VERSION"
fi

cargo build --quiet --bin ringtrace-test-scenarios
bin="${CARGO_TARGET_DIR:-$PWD/target}/debug/ringtrace-test-scenarios"
exec "$venv/bin/python" scripts/phoenix_e2e.py "$venv/bin/phoenix" "$bin"
