#!/usr/bin/env bash
# The trace picture of docs/profiling.md: one resnet50 push + pull iteration of
# benches/kvbench.c (after 3 warm-up iterations) profiled through MXNet's profiler C API,
# dumped as a Chrome trace to target/trace/resnet50.json and rendered to docs/trace.png by scripts/trace-picture.py.
# Needs matplotlib: installed from PyPI into ~/.cache/libkvstore/plot on first use.
# Not part of scripts/test.sh.   usage: scripts/trace-picture.sh [LIBRARY.so]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
mkdir -p target/bench target/trace docs
cc -std=c11 -O2 -Wall -Wextra -pthread benches/kvbench.c -ldl -o target/bench/kvbench
lib=$(realpath "${1:-target/release/libkvstore.so}")
target/bench/kvbench --workload resnet50 --iters 1 --rounds 1 --trace "$PWD/target/trace/resnet50.json" "$lib"
venv="$HOME/.cache/libkvstore/plot"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -c 'import matplotlib' 2>/dev/null ||
  "$venv/bin/pip" install --quiet --disable-pip-version-check matplotlib
"$venv/bin/python" scripts/trace-picture.py target/trace/resnet50.json docs/trace.png \
  "libkvstore: one resnet50 push + pull (161 keys x 4 values on cpu(0..3), float32)"
