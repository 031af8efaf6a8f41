#!/usr/bin/env bash
# Builds kvbench and the release libkvstore.so, then measures the reference libmxnet.so
# (PyPI mxnet==1.9.1) and libkvstore.so in one run. Extra arguments go to kvbench
# (e.g. --workload small --iters 50).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
mkdir -p target/bench
cc -std=c11 -O2 -Wall -Wextra -pthread benches/kvbench.c -ldl -o target/bench/kvbench
reference="${MXNET_LIBRARY:-$(scripts/reference-mxnet.sh)}"
exec target/bench/kvbench "$@" "$reference" "$PWD/target/release/libkvstore.so"
