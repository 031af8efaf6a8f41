#!/usr/bin/env bash
# MXNet's own GPU KVStore tests, unchanged, on the CUDA stand-in: the PyPI mxnet==1.9.1
# package loads libkvstore.so (MXNET_LIBRARY_PATH) and runs
#   - tests/python/gpu/test_kvstore_gpu.py and tests/python/gpu/test_device.py with 4 devices
#     (they set and unset MXNET_KVSTORE_USETREE / MXNET_KVSTORE_TREE_ARRAY_BOUND themselves,
#     through MXSetEnv);
#   - tests/nightly/dist_device_sync_kvstore.py with 2 workers of 2 devices each and 1 server,
#     under mpirun (scripts/kvstore-launch).
# Every test must pass and none may skip. The stand-in's trace must then show GPU work on every
# device each job used: a run that quietly stayed on the CPU fails.
#
# MXNet's files are read at test time from an apache/mxnet git directory holding branch
# v1.9.x, into target/mxnet-gpu-tests/ (never committed). The directory is the first argument,
# else $MXNET_SOURCE, else the `fetch` mirror /work/.mirror/apache+mxnet/repo. Without one the
# script says so and exits 0, unless KVSTORE_REQUIRE_MXNET_SOURCE=1 (then it fails).
#
#   tests/gpu/mxnet-gpu-tests.sh [apache/mxnet git dir]
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
checkout=${1:-${MXNET_SOURCE:-/work/.mirror/apache+mxnet/repo}}
if ! git -C "$checkout" rev-parse --verify --quiet v1.9.x >/dev/null 2>&1; then
  msg="no apache/mxnet git directory with branch v1.9.x at '$checkout' (pass one, or set MXNET_SOURCE)"
  if [ "${KVSTORE_REQUIRE_MXNET_SOURCE:-}" = 1 ]; then
    echo "mxnet-gpu-tests: FAILED: $msg" >&2
    exit 1
  fi
  echo "mxnet-gpu-tests: not run: $msg"
  exit 0
fi

reference=$(scripts/reference-mxnet.sh)
venv=$(cd "$(dirname "$reference")/../../../.." && pwd)
python="$venv/bin/python"
"$python" -c 'import pytest' 2>/dev/null || "$venv/bin/pip" install --quiet --disable-pip-version-check pytest
KVSTORE_NVRTC_PATH="${KVSTORE_NVRTC_PATH:-$(scripts/nvrtc-wheel.sh)}"
export KVSTORE_NVRTC_PATH
standin=$(scripts/cuda-standin.sh | tail -1)
cargo build --release --quiet --workspace
ours="$root/target/release/libkvstore.so"

work="$root/target/mxnet-gpu-tests"
rm -rf "$work/gpu" "$work/nightly" "$work/trace"
mkdir -p "$work/gpu" "$work/unittest" "$work/common" "$work/nightly" "$work/trace"
for f in gpu/test_kvstore_gpu.py gpu/test_device.py unittest/common.py common/models.py; do
  git -C "$checkout" cat-file -p "v1.9.x:tests/python/$f" > "$work/$f"
done
git -C "$checkout" cat-file -p "v1.9.x:tests/nightly/dist_device_sync_kvstore.py" > "$work/nightly/dist_device_sync_kvstore.py"
# common.py imports nose (MXNet 1.9's test runner); it goes beside the files, not into the venv.
[ -d "$work/site/nose" ] || "$python" -m pip install --quiet --disable-pip-version-check --target "$work/site" nose

# The stand-in's directory first on the library path of these runs only; NVRTC's beside it.
export LD_LIBRARY_PATH="$standin:$(dirname "$KVSTORE_NVRTC_PATH")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export MXNET_LIBRARY_PATH="$ours"
unset KVSTORE_HOST_LIBRARY

# Which devices got kernel launches or device copies in a trace file.
devices_used() {
  { grep -E 'call=(cuLaunchKernel|cuMemcpy[A-Za-z]*Async[_v0-9]*|cuMemcpy[A-Za-z]*_v2) ' "$1" || true; } |
    { grep -oE ' dev=[0-9]+' || true; } | sort -u | tr -d ' dev=' | tr '\n' ' '
}

expect_devices() {  # expect_devices <what> <trace> <device...>
  local what=$1 trace=$2 used
  shift 2
  used=$(devices_used "$trace")
  for d in "$@"; do
    case " $used " in
      *" $d "*) ;;
      *) echo "mxnet-gpu-tests: FAILED: $what did no GPU work on gpu($d) (devices used: ${used:-none})" >&2; exit 1 ;;
    esac
  done
  echo "   GPU work on devices: $used"
}

echo "== MXNet's tests/python/gpu/test_kvstore_gpu.py and test_device.py, unchanged, libkvstore.so on the stand-in (4 devices)"
log="$work/pytest.log"
status=0
(cd "$work/gpu" && CUDA_STANDIN_DEVICES=4 CUDA_STANDIN_TRACE="$work/trace/pytest.trace" \
  PYTHONPATH="$work/unittest:$work/common:$work/site" \
  "$python" -m pytest -v -rs -p no:cacheprovider -W ignore::DeprecationWarning -W ignore::SyntaxWarning \
  test_kvstore_gpu.py test_device.py) >"$log" 2>&1 || status=$?
grep -E '(PASSED|FAILED|SKIPPED|ERROR)' "$log" | sed 's/^/   /' || true
summary=$(grep -E '^=+ .*(passed|failed|error).* =+$' "$log" | tail -1)
echo "   $summary"
if [ "$status" -ne 0 ] || ! [[ $summary =~ \ 4\ passed ]] || [[ $summary =~ skipped|failed|error ]]; then
  tail -60 "$log" >&2
  echo "mxnet-gpu-tests: FAILED: MXNet's GPU tests must all pass (4), none skipped" >&2
  exit 1
fi
expect_devices "test_kvstore_gpu.py and test_device.py" "$work/trace/pytest.trace" 0 1 2 3

echo "== MXNet's tests/nightly/dist_device_sync_kvstore.py, unchanged: 2 workers of 2 stand-in devices each, 1 server"
command -v mpirun >/dev/null || { echo "mxnet-gpu-tests: FAILED: mpirun not found (apt-get install openmpi-bin)" >&2; exit 1; }
status=0
(cd "$work/nightly" && CUDA_STANDIN_DEVICES=2 CUDA_STANDIN_TRACE="$work/trace/dist.trace" \
  "$root/scripts/kvstore-launch" -n 2 -s 1 --launcher local --timeout "${DIST_PYTHON_TIMEOUT:-600}" \
  --output-dir "$work/nightly/ranks" "$python" dist_device_sync_kvstore.py >"$work/nightly/mpirun.log" 2>&1) || status=$?
cat "$work"/nightly/ranks/1/rank.[12]/stdout 2>/dev/null | sed 's/^/   /' || true
done_lines=$(cat "$work"/nightly/ranks/1/rank.[12]/stdout 2>/dev/null | grep -c 'passed test_gluon_trainer_type' || true)
if [ "$status" -ne 0 ] || [ "$done_lines" -ne 2 ]; then
  tail -30 "$work/nightly/mpirun.log" >&2
  for f in "$work"/nightly/ranks/1/rank.*/stderr; do echo "--- $f" >&2; tail -30 "$f" >&2; done
  echo "mxnet-gpu-tests: FAILED: dist_device_sync_kvstore.py (exit $status, $done_lines of 2 workers finished)" >&2
  exit 1
fi
# Both workers' processes pushed from gpu(0) and gpu(1).
for pid in $(grep -oE '^standin pid=[0-9]+' "$work/trace/dist.trace" | sort -u | cut -d= -f2); do
  grep "^standin pid=$pid " "$work/trace/dist.trace" > "$work/trace/dist.$pid.trace"
done
workers=0
for t in "$work"/trace/dist.[0-9]*.trace; do
  used=$(devices_used "$t")
  [ "$used" = "0 1 " ] && workers=$((workers + 1))
done
if [ "$workers" -ne 2 ]; then
  echo "mxnet-gpu-tests: FAILED: expected 2 worker processes with GPU work on gpu(0) and gpu(1), found $workers" >&2
  exit 1
fi
echo "   both workers did GPU work on gpu(0) and gpu(1)"
echo "mxnet-gpu-tests: MXNet's GPU KVStore tests passed unchanged on the stand-in"
