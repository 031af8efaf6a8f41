#!/usr/bin/env bash
# The Python proof: the unchanged PyPI mxnet==1.9.1 package runs tests/python/ three times —
# loaded on libkvstore.so through MXNET_LIBRARY_PATH, on the wheel's own libmxnet.so (so a
# test asserting something MXNet does not do fails on the reference run), and in hosted mode
# (libkvstore.so's store, the wheel's libmxnet.so named by KVSTORE_HOST_LIBRARY for the rest).
#
#   scripts/python-frontend.sh [pytest args...]
# Uses the reference venv of scripts/reference-mxnet.sh (installs pytest into it if missing).
set -euo pipefail
cd "$(dirname "$0")/.."
reference=$(scripts/reference-mxnet.sh)
venv=$(cd "$(dirname "$reference")/../../../.." && pwd)
python="$venv/bin/python"
"$python" -c 'import pytest' 2>/dev/null || "$venv/bin/pip" install --quiet --disable-pip-version-check pytest
cargo build --release --quiet
ours="$PWD/target/release/libkvstore.so"   # MXNET_LIBRARY_PATH must be absolute

run() {
  echo "== unchanged mxnet 1.9.1 Python package on $1"
  (cd tests/python && env "${@:2}" "$python" -m pytest -q -p no:cacheprovider -W ignore::DeprecationWarning "${args[@]}")
}
args=("$@")
run "libkvstore.so ($ours)" -u KVSTORE_HOST_LIBRARY MXNET_LIBRARY_PATH="$ours"
run "the reference libmxnet.so ($reference)" -u MXNET_LIBRARY_PATH -u KVSTORE_HOST_LIBRARY
run "libkvstore.so hosting $reference" MXNET_LIBRARY_PATH="$ours" KVSTORE_HOST_LIBRARY="$reference"
