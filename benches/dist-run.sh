#!/usr/bin/env bash
# Distributed benchmark: benches/distbench.c (ResNet-50 gradients, push + pull of every key per
# iteration) with 2 workers and 1 server on this machine, on the reference libmxnet.so (ps-lite,
# scripts/pslite-launch) and libkvstore.so (MPI, scripts/kvstore-launch) in the same run; prints
# each worker's median seconds per iteration, the ratio libkvstore / reference (worker medians
# averaged), and the bytes a worker moves per step. Extra arguments go to distbench
# (--iters N, --2bit, --updater). The libkvstore leg is skipped, with the library's message, while its dist
# Create answers an error.
#
# A/B of libkvstore builds and settings in the same run:
#   DIST_BENCH_WORKERS=N      workers (default 2), DIST_BENCH_SERVERS=N servers (default 1)
#   DIST_BENCH_BASE=DIR       also run the libkvstore.so (and libkvstore_mpi.so) in DIR, e.g.
#                             a build of an earlier commit, alternating with this build
#   DIST_BENCH_ROUNDS=N       legs of each build and order (default 1; each round starts one
#                             leg later, so no leg is always first)
#   DIST_BENCH_SUM_ORDERS="rank arrival"   KVSTORE_DIST_SUM_ORDER of this build's legs
#   DIST_BENCH_SKIP_REFERENCE=1            no ps-lite leg
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet --workspace
mkdir -p target/bench
reference="${MXNET_LIBRARY:-$(scripts/reference-mxnet.sh)}"
cc -std=c11 -O2 -Wall -Wextra -I include benches/distbench.c "$reference" \
  -Wl,-rpath,"$(dirname "$reference")" -o target/bench/distbench_mx
cc -std=c11 -O2 -Wall -Wextra -I include benches/distbench.c -L target/release -lkvstore \
  -Wl,-rpath,"$PWD/target/release" -o target/bench/distbench_kv
base=${DIST_BENCH_BASE:-}
if [ -n "$base" ]; then
  base=$(cd "$base" && pwd)
  cc -std=c11 -O2 -Wall -Wextra -I include benches/distbench.c -L "$base" -lkvstore \
    -Wl,-rpath,"$base" -Wl,--disable-new-dtags -o target/bench/distbench_base
fi
workers=${DIST_BENCH_WORKERS:-2}
servers=${DIST_BENCH_SERVERS:-1}
rounds=${DIST_BENCH_ROUNDS:-1}
read -r -a orders <<<"${DIST_BENCH_SUM_ORDERS:-rank}"
timeout_s=${DIST_BENCH_TIMEOUT:-600}
out=$(mktemp -d "${TMPDIR:-/tmp}/distbench-XXXXXX")

median_of() { sed -n 's/.*median \([0-9.]*\) s\/iter.*/\1/p' "$1" | awk '{s += $1; n++} END {if (n) printf "%.4f", s / n}'; }

if [ -z "${DIST_BENCH_SKIP_REFERENCE:-}" ]; then
  echo "== reference libmxnet.so: ps-lite, $workers workers + $servers servers on loopback"
  scripts/pslite-launch -n "$workers" -s "$servers" --timeout "$timeout_s" --output-dir "$out/reference" \
    target/bench/distbench_mx "$@" | tee "$out/reference.txt"
  ref=$(median_of "$out/reference.txt")
else
  ref=
fi

echo "== libkvstore.so: MPI (scripts/kvstore-launch --launcher local), $workers workers + $servers servers"
if ! command -v mpirun >/dev/null; then
  echo "skipped: mpirun not found (apt-get install openmpi-bin)"
  exit 0
fi
# One libkvstore leg: LABEL BINARY [kvstore-launch --env settings...]; its median is appended to
# $out/LABEL.medians.
kv_leg() {
  local label=$1 exe=$2 status=0
  shift 2
  scripts/kvstore-launch -n "$workers" -s "$servers" --launcher local --timeout "$timeout_s" "$@" \
    "$exe" "${bench_args[@]}" >"$out/$label.txt" 2>"$out/$label.err" || status=$?
  sed "s/^/[$label] /" "$out/$label.txt"
  if grep -q "dist Create failed" "$out/$label.err"; then
    echo "skipped: libkvstore dist store not built yet: $(grep -m1 'dist Create failed' "$out/$label.err" | sed 's/^dist Create failed: //')"
    echo "reference median: $ref s/iter"
    exit 0
  fi
  if [ "$status" -ne 0 ]; then
    cat "$out/$label.err" >&2
    exit "$status"
  fi
  median_of "$out/$label.txt" >>"$out/$label.medians"
  echo >>"$out/$label.medians"
}
bench_args=("$@")
legs=("${orders[@]}")
[ -z "$base" ] || legs+=(base)
for round in $(seq "$rounds"); do
  # Each round starts with the next leg, so no leg always runs first (or last).
  for i in $(seq 0 $((${#legs[@]} - 1))); do
    leg=${legs[$(((i + round - 1) % ${#legs[@]}))]}
    if [ "$leg" = base ]; then
      kv_leg base target/bench/distbench_base
    else
      kv_leg "libkvstore-$leg" target/bench/distbench_kv --env "KVSTORE_DIST_SUM_ORDER:$leg"
    fi
  done
done
mean_of() { awk '{s += $1; n++} END {if (n) printf "%.4f", s / n}' "$out/$1.medians"; }
ours=$(mean_of "libkvstore-${orders[0]}")
summary="median s/iter (mean of the workers' medians, mean over $rounds round(s)):"
[ -z "$ref" ] || summary+=" libmxnet.so $ref,"
for order in "${orders[@]}"; do summary+=" libkvstore.so ($order) $(mean_of "libkvstore-$order"),"; done
[ -z "$base" ] || summary+=" base build $(mean_of base),"
echo "${summary%,}"
[ -z "$ref" ] || echo "ratio libkvstore / libmxnet: $(awk -v a="$ours" -v b="$ref" 'BEGIN {printf "%.3f", a / b}')"
[ -z "$base" ] || echo "ratio this build (${orders[0]}) / base build: $(awk -v a="$ours" -v b="$(mean_of base)" 'BEGIN {printf "%.3f", a / b}')"
