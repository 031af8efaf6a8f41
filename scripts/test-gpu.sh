#!/usr/bin/env bash
# The GPU tests, for a machine with an NVIDIA GPU and the CUDA driver; runs from the files
# scripts/gpu-bundle.sh built on the project's machine (this script sits in .gpu-bundle/).
#   1. gpu_diff: every store workload with values on GPUs, then on CPUs; outputs must be
#      identical (NaN compared as NaN), plus the C API checks (device pointers, waits,
#      fork, shutdown);
#   2. the same program under compute-sanitizer memcheck and racecheck (small sizes);
#   3. with --bench: benches/gpubench.c (the issue's GPU workloads and their limits).
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

nvidia-smi -L 2>/dev/null || echo "(nvidia-smi not found)"

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

if command -v compute-sanitizer >/dev/null; then
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
  "$bin/gpubench" && ok "gpubench ran" || bad "gpubench"
fi
rm -rf "$tmp"
echo "test-gpu: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
