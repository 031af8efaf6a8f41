#!/usr/bin/env bash
# The GPU tests, for a machine with an NVIDIA GPU and the CUDA driver; runs from the files
# scripts/gpu-bundle.sh built on the project's machine (this script sits in .gpu-bundle/).
#   1. gpu_diff: every store workload with values on GPUs, then on CPUs; outputs must be
#      identical (NaN compared as NaN), plus the C API checks (device pointers, waits,
#      fork, shutdown);
#   1b. gpu_nccl: the nccl store equals the device store bit for bit, and its refusals;
#   1c. the steady loop: iterations 2..N of a push/pull loop (`device` and `nccl` stores, dense;
#      `device` row_sparse) make no allocation or free of any kind, read from the driver calls
#      traced by ctests/cuda_audit.c (LD_AUDIT), on the real driver as on the stand-in;
#   2. the same program under compute-sanitizer memcheck and racecheck (small sizes);
#   3. with --bench: benches/gpubench.c (the issue's GPU workloads and their limits).
# With the CUDA stand-in first on LD_LIBRARY_PATH it runs unchanged: compute-sanitizer is
# skipped (it needs a GPU) and gpubench runs one iteration for its values, figures discarded.
# Exits non-zero on any failure; ends with an "N passed, N failed" line.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
[ -x "$here/bin/gpu_diff" ] || here="$here/../.gpu-bundle"
bin="$here/bin"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$PATH:/usr/local/cuda/bin"
tmp="$(mktemp -d)"
passed=0 failed=0
ok() { echo "PASS $1"; passed=$((passed + 1)); }
bad() { echo "FAIL $1"; failed=$((failed + 1)); }

# The CUDA stand-in (test equipment, docs/gpu-standin.md) first on LD_LIBRARY_PATH: the same
# checks run on it, except what needs a real GPU (compute-sanitizer; timings).
standin=""
IFS=: read -r -a lib_dirs <<<"${LD_LIBRARY_PATH:-}"
for d in "${lib_dirs[@]}"; do
  if [ -n "$d" ] && [ -f "$d/libcuda.so.1" ]; then
    grep -aq cuStandinRunKernel "$d/libcuda.so.1" && standin="$d/libcuda.so.1"
    break
  fi
done
if [ -n "$standin" ]; then
  echo "driver: the CUDA stand-in $standin (${CUDA_STANDIN_DEVICES:-2} devices); no timings are GPU figures"
else
  nvidia-smi -L 2>/dev/null || echo "(nvidia-smi not found)"
fi

if "$bin/gpu_diff" gpu >"$tmp/gpu.txt" 2>"$tmp/gpu.err" && "$bin/gpu_diff" cpu >"$tmp/cpu.txt" 2>"$tmp/cpu.err"; then
  if grep -q "skipped" "$tmp/gpu.txt"; then
    cat "$tmp/gpu.txt"; bad "gpu_diff: no GPU seen by libkvstore"
  elif cmp -s "$tmp/gpu.txt" "$tmp/cpu.txt"; then
    ok "gpu_diff: $(wc -l <"$tmp/gpu.txt") lines identical on GPU and CPU values"
  else
    diff "$tmp/cpu.txt" "$tmp/gpu.txt" | head -20; bad "gpu_diff: GPU and CPU values differ"
  fi
else
  cat "$tmp/gpu.err" "$tmp/cpu.err" | tail -20; bad "gpu_diff: a run failed"
fi
if [ -s "$tmp/gpu.err" ]; then echo "stderr of the GPU run:"; head -20 "$tmp/gpu.err"; bad "gpu_diff printed to stderr"; fi

if "$bin/gpu_nccl" >"$tmp/nccl.txt" 2>"$tmp/nccl.err" && grep -q "^gpu_nccl: ok" "$tmp/nccl.txt" && ! [ -s "$tmp/nccl.err" ]; then
  ok "$(grep '^gpu_nccl: ok' "$tmp/nccl.txt")"
else
  tail -20 "$tmp/nccl.txt" "$tmp/nccl.err"; bad "gpu_nccl"
fi

# Driver calls that take or give back memory: device, stream-ordered, pinned, registered, mapped.
allocating='call=(cuMemAlloc|cuMemFree|cuMemHostAlloc|cuMemHostRegister|cuMemHostUnregister|cuMemCreate|cuMemRelease|cuMemPoolTrimTo)'
steady_loop() {
  local store="$1" stype="$2" trace="$tmp/audit_$1_$2.txt" out from to warm work allocs
  if ! out=$(CUDA_AUDIT_TRACE="$trace" LD_AUDIT="$here/lib/cuda_audit.so" "$bin/gpu_standin" steady "$store" "$stype" 2>&1) ||
    ! grep -q "^steady: ok" <<<"$out"; then
    echo "$out" | tail -20; bad "steady loop ($store, $stype): the run failed"; return
  fi
  from=$(sed -n 's/^steady_from=//p' <<<"$out"); to=$(sed -n 's/^steady_to=//p' <<<"$out")
  head -c "$to" "$trace" | tail -c +"$((from + 1))" >"$trace.steady"
  warm=$(head -c "$from" "$trace" | grep -cE "$allocating")
  work=$(grep -cE 'call=(cuLaunchKernel|cuMemcpy)' "$trace.steady")
  allocs=$(grep -cE "$allocating" "$trace.steady")
  if [ "$warm" -eq 0 ] || [ "$work" -eq 0 ]; then
    bad "steady loop ($store, $stype): the tracer saw no allocation in the warm-up ($warm) or no work after it ($work)"
  elif [ "$allocs" -ne 0 ]; then
    grep -oE "$allocating[A-Za-z0-9_]*" "$trace.steady" | sort | uniq -c; bad "steady loop ($store, $stype): $allocs allocation calls in iterations 2..N"
  else
    ok "steady loop ($store, $stype): iterations 2..N made $work copies and launches and no allocation (warm-up: $warm)"
  fi
}
steady_loop device default
steady_loop nccl default
steady_loop device row_sparse

if [ -n "$standin" ]; then
  echo "SKIP compute-sanitizer: it needs a real GPU (on the stand-in, scripts/standin-asan.sh checks the kernels' indexing)"
elif command -v compute-sanitizer >/dev/null; then
  for tool in memcheck racecheck; do
    if compute-sanitizer --tool "$tool" --error-exitcode 99 "$bin/gpu_diff" gpu --small >"$tmp/$tool.txt" 2>&1; then
      ok "compute-sanitizer $tool: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$tmp/$tool.txt" | tail -1)"
    else
      tail -30 "$tmp/$tool.txt"; bad "compute-sanitizer $tool"
    fi
  done
else
  bad "compute-sanitizer not found (expected in /usr/local/cuda/bin)"
fi

if [ "${1:-}" = "--bench" ]; then
  if [ -n "$standin" ]; then
    # On the stand-in the benchmark runs for its values only: one iteration, figures discarded.
    "$bin/gpubench" --iters 1 --phases --workload small --workload latency >/dev/null && ok "gpubench ran on the stand-in (figures discarded)" || bad "gpubench"
  else
    "$bin/gpubench" --phases && ok "gpubench ran" || bad "gpubench"
  fi
fi
rm -rf "$tmp"
echo "test-gpu: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
