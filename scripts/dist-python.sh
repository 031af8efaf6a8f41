#!/usr/bin/env bash
# The unchanged Python frontend on distributed stores: MXNet's nightly dist_sync_kvstore.py
# (default_cpu, compressed_cpu with 3 repeats instead of 7 — its expected values are computed
# element by element in Python —, init_gpu --no-gpu) and dist_async_kvstore.py, copied under
# tests/dist_python/, run by the PyPI mxnet==1.9.1 package with 2 workers and 1 server —
# on the reference libmxnet.so (ps-lite, scripts/pslite-launch), on libkvstore.so
# (MPI, scripts/kvstore-launch, MXNET_LIBRARY_PATH) and in hosted mode (libkvstore.so with
# KVSTORE_HOST_LIBRARY naming the reference libmxnet.so: MXNet's operators, libkvstore's
# MPI store). Each job is bounded by a timeout.
#
# The libkvstore leg is skipped, with the library's message, when libkvstore answers the dist
# Create with an error (its dist store is not built yet) or mpirun is missing; with
# KVSTORE_REQUIRE_DIST=1 either is a failure.
#
#   scripts/dist-python.sh [reference|libkvstore|hosted]...   # all three legs by default
set -euo pipefail
cd "$(dirname "$0")/.."
reference=$(scripts/reference-mxnet.sh)
venv=$(cd "$(dirname "$reference")/../../../.." && pwd)
python="$venv/bin/python"
ours="$PWD/target/release/libkvstore.so"   # MXNET_LIBRARY_PATH must be absolute
timeout_s=${DIST_PYTHON_TIMEOUT:-600}
# ps-lite sometimes hangs at start-up (pslite-launch retries its known failures): a reference
# job takes under 30 s here, so a hung attempt is cut short and retried.
reference_timeout_s=${DIST_PYTHON_REFERENCE_TIMEOUT:-180}
required=${KVSTORE_REQUIRE_DIST:-}
[ "$required" = 0 ] && required=

jobs=(
  "dist_sync_kvstore.py --type default_cpu"
  "dist_sync_kvstore.py --type compressed_cpu --nrepeat 3"
  "dist_sync_kvstore.py --type init_gpu --no-gpu"
  "dist_async_kvstore.py"
)
# More of dist_sync_kvstore.py, run in hosted mode only (native libkvstore lacks operators they
# use, e.g. `_arange`): Gluon's sparse and dense Trainer steps on the store (row_sparse weights
# pulled inside autograd.record()) and its invalid-operation checks.
hosted_extra=(
  "dist_sync_kvstore.py --type gluon_sparse_step_cpu"
  "dist_sync_kvstore.py --type gluon_step_cpu"
  "dist_sync_kvstore.py --type invalid_cpu"
)
work=$(mktemp -d "${TMPDIR:-/tmp}/dist-python-XXXXXX")

reference_job() {
  local i=$1; shift
  (cd tests/dist_python && env -u MXNET_LIBRARY_PATH ../../scripts/pslite-launch -n 2 -s 1 \
    --timeout "$reference_timeout_s" --retries 2 --output-dir "$work/reference/job$i" "$python" "$@")
}

run_reference() {
  local i=0
  for job in "${jobs[@]}"; do
    read -r -a argv <<<"$job"
    i=$((i + 1))
    echo "== reference libmxnet.so (ps-lite, 2 workers, 1 server): $job"
    local t0=$SECONDS
    # The reference is the oracle, not the library under test: MXNet's own compressed_cpu
    # test failed on it once in CI (a pull read 0 instead of 2; 12 of 12 passed by hand right
    # after), so a failed reference job runs once more; libkvstore's legs never do.
    if ! reference_job "$i" "${argv[@]}"; then
      echo "   the reference failed; running it once more (outputs of the first try in $work/reference/job$i.first)"
      mv "$work/reference/job$i" "$work/reference/job$i.first"
      reference_job "$i" "${argv[@]}"
    fi
    echo "   passed in $((SECONDS - t0)) s"
  done
}

run_libkvstore() {
  command -v mpirun >/dev/null || { skip_or_fail "mpirun not found (apt-get install openmpi-bin)"; return 0; }
  cargo build --release --quiet --workspace
  mkdir -p "$work/probe"
  # Does libkvstore create a dist store at all? (Servers create one on `import mxnet`.)
  if ! MXNET_LIBRARY_PATH="$ours" scripts/kvstore-launch -n 2 -s 1 --launcher local --timeout 60 \
      --env "DIST_PROBE_OUT=$work/probe" "$python" tests/dist_python/probe_dist.py >"$work/probe/log" 2>&1; then
    local refusal
    refusal=$(cat "$work"/probe/create-failed-*.txt 2>/dev/null | head -1 || true)
    if [ -n "$refusal" ]; then
      skip_or_fail "libkvstore dist store not built yet: $refusal"
      return 0
    fi
    cat "$work/probe/log" >&2
    echo "dist-python: the probe job failed on libkvstore" >&2
    return 1
  fi
  local i=0
  for job in "${jobs[@]}"; do
    i=$((i + 1))
    mpi_job libkvstore "libkvstore.so (MPI, 2 workers, 1 server)" "$i" "$job" || return 1
  done
}

# MXNet's Python frontend and operators from the reference libmxnet.so, every MXKVStore call
# served by libkvstore's MPI store (tests/hosted/run.sh runs the hosted training comparisons).
run_hosted() {
  command -v mpirun >/dev/null || { skip_or_fail "mpirun not found (apt-get install openmpi-bin)"; return 0; }
  cargo build --release --quiet --workspace
  local i=0
  for job in "${jobs[@]}" "${hosted_extra[@]}"; do
    i=$((i + 1))
    mpi_job hosted "hosted (libkvstore.so hosting its MPI store in the reference libmxnet.so, 2 workers, 1 server)" \
      "$i" "$job" --env "KVSTORE_HOST_LIBRARY:$reference" || return 1
  done
  # invalid_cpu saves parameters in its working directory.
  rm -f tests/dist_python/test_gluon_trainer_reset_*.params
}

# One job on libkvstore's MPI store: leg name, description, job number, job, then extra
# kvstore-launch flags.
mpi_job() {
  local leg=$1 what=$2 i=$3 job=$4
  shift 4
  local argv
  read -r -a argv <<<"$job"
  echo "== $what: $job"
  local t0=$SECONDS status=0 logs="$work/$leg/job$i"
  mkdir -p "$logs"
  (cd tests/dist_python && MXNET_LIBRARY_PATH="$ours" ../../scripts/kvstore-launch -n 2 -s 1 \
    --launcher local --timeout "$timeout_s" "$@" --output-dir "$logs/ranks" "$python" "${argv[@]}" \
    >"$logs/mpirun.log" 2>&1) || status=$?
  # Rank 0 is the server; the workers' lines are the test's progress.
  cat "$logs"/ranks/1/rank.[12]/stdout 2>/dev/null || true
  if [ "$status" -ne 0 ]; then
    failure_report "$leg" "$logs" "$status" "$job"
    return 1
  fi
  echo "   passed in $((SECONDS - t0)) s"
}

# What a failed job printed, rank by rank, without the server's expected noise: MXNet's Test
# optimizer raises TypeError on row_sparse weights in the server's updater (the reference's
# server prints the same tracebacks), which would bury the failure itself.
failure_report() {
  local leg=$1 logs=$2 status=$3 job=$4
  echo "dist-python: FAILED on $leg: $job (exit $status)" >&2
  echo "--- mpirun:" >&2
  tail -n 30 "$logs/mpirun.log" >&2
  local dir
  for dir in "$logs"/ranks/1/rank.*; do
    [ -d "$dir" ] || continue
    echo "--- ${dir##*/} stderr (last lines, updater TypeError tracebacks left out):" >&2
    python3 - "$dir/stderr" >&2 <<'PY'
import sys
try:
    lines = open(sys.argv[1], errors="replace").read().splitlines()
except OSError:
    sys.exit(0)
kept, block = [], []
for line in lines:
    if line.startswith("Exception ignored on calling ctypes callback") or (block and line[:1] in (" ", "T", "<")):
        block.append(line)
        if line.startswith("<RowSparseNDArray"):
            block = []
        continue
    kept.extend(block)
    block = []
    kept.append(line)
kept.extend(block)
print("\n".join(kept[-40:]))
PY
  done
  echo "(all outputs kept in $logs)" >&2
}

skip_or_fail() {
  if [ -n "$required" ]; then
    echo "dist-python: FAILED (KVSTORE_REQUIRE_DIST=1): $1" >&2
    exit 1
  fi
  echo "skipped: the libkvstore leg of dist-python: $1"
}

[ $# -gt 0 ] || set -- reference libkvstore hosted
for leg in "$@"; do
  case "$leg" in
    reference) run_reference ;;
    libkvstore) run_libkvstore ;;
    hosted) run_hosted ;;
    *) echo "usage: $0 [reference|libkvstore|hosted]..." >&2; exit 2 ;;
  esac
done
rm -rf "$work"
