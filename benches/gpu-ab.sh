#!/usr/bin/env bash
# A/B of libkvstore builds on a GPU machine, for the few minutes a lent GPU gives: runs
# gpubench on the bundle's own build ("this", .gpu-bundle/lib) and on each variant that
# `scripts/gpu-bundle.sh --variant NAME=DIR` put in .gpu-bundle/var/NAME, alternating, each
# round starting one build later so that no build always goes first; prints every workload's
# median seconds per iteration (or latency) over the rounds per build and each variant's ratio
# to this build. A variant made with `--env-variant` is this build run with the variables of
# its `env` file. Runs from the bundle (no Rust needed).
#   usage: bash .gpu-bundle/gpu-ab.sh [--rounds N] [gpubench arguments...]
#   e.g.   bash .gpu-bundle/gpu-ab.sh --rounds 3 --iters 30 --workload resnet50 --workload small
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
[ -x "$here/bin/gpubench" ] || here="$here/../.gpu-bundle"
rounds=3
if [ "${1:-}" = "--rounds" ]; then rounds=$2; shift 2; fi
builds=(this)
for d in "$here"/var/*/; do [ -f "$d/libkvstore.so" ] || [ -f "$d/env" ] && builds+=("$(basename "$d")"); done
libdir() { if [ "$1" != this ] && [ -f "$here/var/$1/libkvstore.so" ]; then echo "$here/var/$1"; else echo "$here/lib"; fi; }
# The variables a build runs with: its `env` file's lines (none for a library variant).
settings() { [ "$1" != this ] && [ -f "$here/var/$1/env" ] && cat "$here/var/$1/env"; true; }
out=$(mktemp -d)
for ((r = 0; r < rounds; r++)); do
  for ((i = 0; i < ${#builds[@]}; i++)); do
    b=${builds[$(((i + r) % ${#builds[@]}))]}
    # gpubench's rows: "<workload> gpu|cpu <s/iter> ..." and "latency gpu <us> us".
    mapfile -t vars < <(settings "$b")
    if ! env "${vars[@]}" LD_LIBRARY_PATH="$(libdir "$b"):/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
      "$here/bin/gpubench" "$@" >"$out/run.txt" 2>&1; then
      tail -5 "$out/run.txt"; echo "gpu-ab: gpubench failed on $b"; exit 1
    fi
    grep -q "skipped" "$out/run.txt" && { cat "$out/run.txt"; exit 0; }
    awk -v b="$b" '$2 == "gpu" || $2 == "cpu" { print b, $1, $2, $3 }' "$out/run.txt" >>"$out/rows.txt"
  done
done
echo "gpu-ab: ${#builds[@]} builds x $rounds rounds, gpubench $*; medians of the rounds (s/iter; latency in us)"
awk -v order="${builds[*]}" '
  { v[$1 " " $2 " " $3] = v[$1 " " $2 " " $3] " " $4; seen[$2 " " $3] = 1 }
  function median(list,   a, n, i, j, t) {
    n = split(list, a, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  END {
    nb = split(order, names, " ")
    printf "%-18s", "workload"
    for (i = 1; i <= nb; i++) printf " %12s", names[i]
    for (i = 2; i <= nb; i++) printf " %12s", names[i] "/this"
    printf "\n"
    for (w in seen) {
      printf "%-18s", w
      base = median(v["this " w])
      for (i = 1; i <= nb; i++) printf " %12.6g", median(v[names[i] " " w])
      for (i = 2; i <= nb; i++) printf " %12.3f", median(v[names[i] " " w]) / base
      printf "\n"
    }
  }' "$out/rows.txt" | { IFS= read -r header; echo "$header"; sort; }
rm -rf "$out"
