#!/usr/bin/env bash
# The two dist_sync rules of docs/distributed-sync.md, proved through MXNet's Python package in
# hosted mode (libkvstore's MPI store, MXNet's operators), 2 servers, every job bounded by
# kvstore-launch --timeout:
# 1. Bit-reproducible sums: tests/hosted/train.py (a Gluon MLP, SGD with momentum on the
#    servers, its first weight split over both servers) trains 4 steps with 3 and with 4
#    workers, then again with the pushes reaching the servers in reverse rank order
#    (KVSTORE_DIST_TEST_DELAY_US): every worker's losses and parameter digest must be the same
#    bytes. The control: summed in arrival order (KVSTORE_DIST_SUM_ORDER=arrival), forward and
#    reversed arrival must give different bytes.
# 2. Uneven data: tests/hosted/dist_uneven.py, 3 workers with 10, 7 and 3 batches, trains to the
#    end; each worker checks its weights against the join rule, simulated in the script.
set -euo pipefail
cd "$(dirname "$0")/../.."
ref="${MXNET_LIBRARY:-$(scripts/reference-mxnet.sh)}"
py="$(cd "$(dirname "$ref")/../../../.." && pwd)/bin/python"
lib="$PWD/target/release/libkvstore.so"
command -v mpirun >/dev/null || { echo "dist sync rules: mpirun not found (apt-get install openmpi-bin)" >&2; exit 1; }
[ -f target/release/libkvstore_mpi.so ] || cargo build --release --quiet --workspace
mkdir -p target; out=$(mktemp -d "$PWD/target/dist-sync-rules.XXXXXX"); trap 'rm -rf "$out"' EXIT

# Runs a hosted job of WORKERS workers + 2 servers: SCRIPT ARGS...; extra --env NAME:VALUE
# settings come first, then `--`. The workers' stdout, in rank order, goes to $out/workers.txt.
hosted_job() {
  local workers=$1 extra=()
  shift
  while [ "$1" != -- ]; do extra+=(--env "$1"); shift; done
  shift
  rm -rf "$out/mpi"
  MXNET_LIBRARY_PATH="$lib" scripts/kvstore-launch -n "$workers" -s 2 --launcher local --timeout 240 \
    --env "KVSTORE_HOST_LIBRARY:$ref" --env MXNET_KVSTORE_BIGARRAY_BOUND:100 "${extra[@]}" \
    --output-dir "$out/mpi" "$py" "$@" > "$out/mpirun.log" 2>&1 \
    || { echo "dist sync rules: the job failed: $* (${extra[*]})"; tail -20 "$out/mpirun.log"; return 1; }
  local r
  : > "$out/workers.txt"
  for r in $(seq 2 $((workers + 1))); do cat "$out/mpi/1/rank.$r/stdout" >> "$out/workers.txt"; done
}

# Delays making the pushes arrive in reverse rank order (the last rank first), or in rank order.
reversed() { local r s=""; for r in $(seq 0 $(($1 - 2))); do s+="${s:+,}$r:$((($1 - 1 - r) * 15000))"; done; echo "$s"; }
forward() { local r s=""; for r in $(seq 1 $(($1 - 1))); do s+="${s:+,}$r:$((r * 15000))"; done; echo "$s"; }

train=(tests/hosted/train.py mlp dist_sync 1 1 4)
for workers in 3 4; do
  hosted_job "$workers" -- "${train[@]}"
  cp "$out/workers.txt" "$out/first.txt"
  [ "$(grep -c '^rank ' "$out/first.txt")" = "$workers" ] || { echo "dist sync rules: expected $workers workers' outputs"; cat "$out/first.txt"; exit 1; }
  [ "$(grep -Evc '^(rank |0x|-0x)' "$out/first.txt")" = "$workers" ] || { echo "dist sync rules: expected one digest per worker"; exit 1; }
  [ "$(grep -Ev '^(rank |0x|-0x)' "$out/first.txt" | sort -u | wc -l)" = 1 ] || { echo "dist sync rules: the workers ended with different parameters"; exit 1; }
  hosted_job "$workers" "KVSTORE_DIST_TEST_DELAY_US:$(reversed "$workers")" -- "${train[@]}"
  cmp -s "$out/first.txt" "$out/workers.txt" \
    || { echo "dist sync rules: DIFFERENT with the arrival order reversed, $workers workers"; diff "$out/first.txt" "$out/workers.txt" | head; exit 1; }
  echo "dist sync rules: $workers workers: the same bytes with the pushes arriving in reverse rank order"
done
hosted_job 3 KVSTORE_DIST_SUM_ORDER:arrival "KVSTORE_DIST_TEST_DELAY_US:$(forward 3)" -- "${train[@]}"
cp "$out/workers.txt" "$out/arrival-forward.txt"
hosted_job 3 KVSTORE_DIST_SUM_ORDER:arrival "KVSTORE_DIST_TEST_DELAY_US:$(reversed 3)" -- "${train[@]}"
if cmp -s "$out/arrival-forward.txt" "$out/workers.txt"; then
  echo "dist sync rules: summed in arrival order, reversing the arrival changed nothing: the check proves nothing" >&2
  exit 1
fi
echo "dist sync rules: the control differs, as it must (summed in arrival order, forward against reversed arrival)"

hosted_job 3 -- tests/hosted/dist_uneven.py
[ "$(grep -c ' uneven ok' "$out/workers.txt")" = 3 ] || { echo "dist sync rules: uneven data"; cat "$out/workers.txt"; exit 1; }
grep ' uneven ok' "$out/workers.txt" | sed 's/^/dist sync rules: /'
