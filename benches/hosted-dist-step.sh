#!/usr/bin/env bash
# Hosted dist stores against pure MXNet: seconds per training step of the small ResNet-style
# Gluon model of benches/hosted_step.py with a `dist_sync` store (the optimizer on the server,
# Gluon's default), 2 workers + 1 server on loopback: pure MXNet under scripts/pslite-launch
# (ps-lite), hosted under scripts/kvstore-launch (libkvstore's MPI store, MXNet's operators).
# The sides take turns in fresh jobs (the order alternates every round), so drift on a shared
# machine lands on all; each figure is the median over every measured step of both workers.
# A step ends with waiting for all of MXNet's work, so the pushes, the server's updates and the
# pulls are inside it; a store that overlaps communication with backward gains there.
# With OLD_LIB (a libkvstore.so built from another commit) a third side runs hosted on it.
# usage: benches/hosted-dist-step.sh [ROUNDS [STEPS [CPUS_PER_WORKER]]]   (defaults: 4 8 1)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-4}"; steps="${2:-8}"; ncpu="${3:-1}"; warmup=3
ref="${MXNET_LIBRARY:-$(scripts/reference-mxnet.sh)}"
py="$(cd "$(dirname "$ref")/../../../.." && pwd)/bin/python"
cargo build --release --quiet --workspace
lib="$PWD/target/release/libkvstore.so"
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
args=(benches/hosted_step.py dist_sync "$ncpu" "$warmup" "$steps" step)
pure() {
  rm -rf "$out/job"
  env -u MXNET_LIBRARY_PATH -u KVSTORE_HOST_LIBRARY scripts/pslite-launch -n 2 -s 1 --timeout 300 --quiet \
    --output-dir "$out/job" "$py" "${args[@]}" > /dev/null 2>&1 || { echo "the pure MXNet job failed" >&2; exit 1; }
  cat "$out"/job/worker.*.stdout >> "$out/pure"
}
hosted_on() {
  rm -rf "$out/job"
  MXNET_LIBRARY_PATH="$1" scripts/kvstore-launch -n 2 -s 1 --launcher local --timeout 300 \
    --env "KVSTORE_HOST_LIBRARY:$ref" --output-dir "$out/job" "$py" "${args[@]}" > "$out/log" 2>&1 \
    || { echo "the hosted job failed:" >&2; tail -20 "$out/log" >&2; exit 1; }
  cat "$out"/job/1/rank.[12]/stdout >> "$2"
}
median() { "$py" -c 'import statistics,sys; print(f"{statistics.median(float(l) for l in open(sys.argv[1])):.4f}")' "$1"; }
sides=(pure hosted); [ -n "${OLD_LIB:-}" ] && sides+=(old)
run_side() {
  case "$1" in
    pure) pure ;;
    hosted) hosted_on "$lib" "$out/hosted" ;;
    old) hosted_on "$OLD_LIB" "$out/old" ;;
  esac
}
for s in "${sides[@]}"; do : > "$out/$s"; done
echo "$(nproc) cores; dist_sync, 2 workers + 1 server, $ncpu CPU context(s) per worker;" \
  "$rounds rounds x $steps steps per side and worker, after $warmup warm-up steps"
for ((r = 0; r < rounds; r++)); do
  if ((r % 2 == 0)); then order=("${sides[@]}"); else order=(); for ((i = ${#sides[@]} - 1; i >= 0; i--)); do order+=("${sides[i]}"); done; fi
  for s in "${order[@]}"; do run_side "$s"; done
done
p=$(median "$out/pure"); h=$(median "$out/hosted")
printf '%-28s %10s\n' side "s/step"
printf '%-28s %10s\n' "pure MXNet (ps-lite)" "$p" "hosted (this build)" "$h"
[ -n "${OLD_LIB:-}" ] && printf '%-28s %10s\n' "hosted (OLD_LIB)" "$(median "$out/old")"
echo "hosted/pure: $("$py" -c "print(f'{$h / $p:.3f}')")"
if [ -n "${OLD_LIB:-}" ]; then o=$(median "$out/old"); echo "hosted/OLD_LIB: $("$py" -c "print(f'{$h / $o:.3f}')")"; fi
