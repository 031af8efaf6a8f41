#!/usr/bin/env bash
# Raw push + pull through an unchanged MXNet store (benches/hosted_kv.py): pure MXNet against
# hosted mode (MXNet's library for arrays, libkvstore's store), ResNet-50's 161 gradients and
# 2000 small keys, 2 and 4 CPU contexts. The two take turns in fresh processes (the order
# alternates every round), so drift on a shared machine lands on both; each figure is the
# median over all of a side's measured iterations.
# usage: benches/hosted-kv.sh [ROUNDS [ITERS [STORE]]]   (defaults: 4 rounds of 5 iterations, device)
# HOSTED_KV_BASE=LIB also runs hosted mode on another libkvstore.so in the same rounds (A/B).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-4}"; iters="${2:-5}"; store="${3:-device}"; warmup=2
ref="${MXNET_LIBRARY:-$(scripts/reference-mxnet.sh)}"
py="$(cd "$(dirname "$ref")/../../../.." && pwd)/bin/python"
cargo build --release --quiet
lib="$PWD/target/release/libkvstore.so"
base="${HOSTED_KV_BASE:-}"
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
run() {  # SIDE WORKLOAD NCTX
  case "$1" in
    pure) "$py" benches/hosted_kv.py "$2" "$3" "$warmup" "$iters" "$store" ;;
    hosted) MXNET_LIBRARY_PATH="$lib" KVSTORE_HOST_LIBRARY="$ref" "$py" benches/hosted_kv.py "$2" "$3" "$warmup" "$iters" "$store" ;;
    base) MXNET_LIBRARY_PATH="$base" KVSTORE_HOST_LIBRARY="$ref" "$py" benches/hosted_kv.py "$2" "$3" "$warmup" "$iters" "$store" ;;
  esac >> "$out/$1"
}
median() { "$py" -c 'import statistics,sys; print(f"{statistics.median(float(l) for l in open(sys.argv[1])):.4f}")' "$1"; }
sides="pure hosted"; [ -z "$base" ] || sides="$sides base"
echo "$(nproc) cores; store $store; $rounds rounds x $iters iterations per side, after $warmup warm-up"
printf '%-9s %5s %12s %12s %12s' workload ctxs "pure s/iter" "hosted s/it" "hosted/pure"
[ -z "$base" ] && echo || printf ' %12s %12s\n' "base s/it" "hosted/base"
for workload in resnet50 small; do
  for ncpu in 2 4; do
    : > "$out/pure"; : > "$out/hosted"; : > "$out/base"
    for ((r = 0; r < rounds; r++)); do
      order=$sides; ((r % 2 == 0)) || order=$(echo "$sides" | tr ' ' '\n' | tac | tr '\n' ' ')
      for side in $order; do run "$side" "$workload" "$ncpu"; done
    done
    p=$(median "$out/pure"); h=$(median "$out/hosted")
    printf '%-9s %5s %12s %12s %12s' "$workload" "$ncpu" "$p" "$h" "$("$py" -c "print(f'{$h / $p:.3f}')")"
    if [ -z "$base" ]; then echo; else b=$(median "$out/base"); printf ' %12s %12s\n' "$b" "$("$py" -c "print(f'{$h / $b:.3f}')")"; fi
  done
done
