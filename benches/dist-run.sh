#!/usr/bin/env bash
# Distributed benchmark: benches/distbench.c (ResNet-50 gradients, push + pull of every key per
# iteration) with 2 workers and 1 server on this machine, on the reference libmxnet.so (ps-lite,
# scripts/pslite-launch) and libkvstore.so (MPI, scripts/kvstore-launch) in the same run; prints
# each worker's median seconds per iteration, the ratio libkvstore / reference (worker medians
# averaged), and the bytes a worker moves per step. Extra arguments go to distbench
# (--iters N, --2bit). The libkvstore leg is skipped, with the library's message, while its dist
# Create answers an error.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet --workspace
mkdir -p target/bench
reference="${MXNET_LIBRARY:-$(scripts/reference-mxnet.sh)}"
cc -std=c11 -O2 -Wall -Wextra -I include benches/distbench.c "$reference" \
  -Wl,-rpath,"$(dirname "$reference")" -o target/bench/distbench_mx
cc -std=c11 -O2 -Wall -Wextra -I include benches/distbench.c -L target/release -lkvstore \
  -Wl,-rpath,"$PWD/target/release" -o target/bench/distbench_kv
timeout_s=${DIST_BENCH_TIMEOUT:-600}
out=$(mktemp -d "${TMPDIR:-/tmp}/distbench-XXXXXX")

median_of() { sed -n 's/.*median \([0-9.]*\) s\/iter.*/\1/p' "$1" | awk '{s += $1; n++} END {if (n) printf "%.4f", s / n}'; }

echo "== reference libmxnet.so: ps-lite, 2 workers + 1 server on loopback"
scripts/pslite-launch -n 2 -s 1 --timeout "$timeout_s" --output-dir "$out/reference" \
  target/bench/distbench_mx "$@" | tee "$out/reference.txt"
ref=$(median_of "$out/reference.txt")

echo "== libkvstore.so: MPI (scripts/kvstore-launch --launcher local), 2 workers + 1 server"
if ! command -v mpirun >/dev/null; then
  echo "skipped: mpirun not found (apt-get install openmpi-bin)"
  exit 0
fi
status=0
scripts/kvstore-launch -n 2 -s 1 --launcher local --timeout "$timeout_s" \
  target/bench/distbench_kv "$@" >"$out/libkvstore.txt" 2>"$out/libkvstore.err" || status=$?
cat "$out/libkvstore.txt"
if grep -q "dist Create failed" "$out/libkvstore.err"; then
  echo "skipped: libkvstore dist store not built yet: $(grep -m1 'dist Create failed' "$out/libkvstore.err" | sed 's/^dist Create failed: //')"
  echo "reference median: $ref s/iter"
  exit 0
fi
if [ "$status" -ne 0 ]; then
  cat "$out/libkvstore.err" >&2
  exit "$status"
fi
ours=$(median_of "$out/libkvstore.txt")
echo "median s/iter (mean of the workers' medians): libmxnet.so $ref, libkvstore.so $ours, ratio $(awk -v a="$ours" -v b="$ref" 'BEGIN {printf "%.3f", a / b}')"
