#!/usr/bin/env bash
# Hosted mode against pure MXNet: seconds per training step of a small ResNet-style Gluon
# model (benches/hosted_step.py), 2 and 4 CPU contexts, `device` and `local` stores. The two
# take turns in fresh processes (the order alternates every round), so drift on a shared
# machine lands on both; each figure is the median over all of that side's measured steps.
# Two figures each: the whole step, and the store's part alone (Trainer.step and the wait for
# it, after backward has finished).
# usage: benches/hosted-step.sh [ROUNDS [STEPS]]   (defaults: 4 rounds of 8 steps, 3 warm-up)
# HOSTED_STEP_BASE=LIB also runs hosted mode on another libkvstore.so (e.g. the last release's)
# in the same rounds, and prints its figure and this build's ratio to it (a same-run A/B).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-4}"; steps="${2:-8}"; warmup=3
ref="${MXNET_LIBRARY:-$(scripts/reference-mxnet.sh)}"
py="$(cd "$(dirname "$ref")/../../../.." && pwd)/bin/python"
cargo build --release --quiet
lib="$PWD/target/release/libkvstore.so"
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
pure() { "$py" benches/hosted_step.py "$@"; }
hosted() { MXNET_LIBRARY_PATH="$lib" KVSTORE_HOST_LIBRARY="$ref" "$py" benches/hosted_step.py "$@"; }
base="${HOSTED_STEP_BASE:-}"
based() { [ -z "$base" ] || MXNET_LIBRARY_PATH="$base" KVSTORE_HOST_LIBRARY="$ref" "$py" benches/hosted_step.py "$@"; }
median() { "$py" -c 'import statistics,sys; print(f"{statistics.median(float(l) for l in open(sys.argv[1])):.4f}")' "$1"; }
echo "$(nproc) cores; $rounds rounds x $steps steps per side and configuration, after $warmup warm-up steps"
printf '%-8s %5s %-6s %14s %14s %12s' store cpus part "pure s/step" "hosted s/step" "hosted/pure"
[ -z "$base" ] && echo || printf ' %14s %12s\n' "base s/step" "hosted/base"
for store in device local; do
  for ncpu in 2 4; do
   for what in step store; do
    : > "$out/pure"; : > "$out/hosted"; : > "$out/base"
    for ((r = 0; r < rounds; r++)); do
      if ((r % 2 == 0)); then
        pure "$store" "$ncpu" "$warmup" "$steps" "$what" >> "$out/pure"
        hosted "$store" "$ncpu" "$warmup" "$steps" "$what" >> "$out/hosted"
        based "$store" "$ncpu" "$warmup" "$steps" "$what" >> "$out/base"
      else
        based "$store" "$ncpu" "$warmup" "$steps" "$what" >> "$out/base"
        hosted "$store" "$ncpu" "$warmup" "$steps" "$what" >> "$out/hosted"
        pure "$store" "$ncpu" "$warmup" "$steps" "$what" >> "$out/pure"
      fi
    done
    p=$(median "$out/pure"); h=$(median "$out/hosted")
    printf '%-8s %5s %-6s %14s %14s %12s' "$store" "$ncpu" "$what" "$p" "$h" "$("$py" -c "print(f'{$h / $p:.3f}')")"
    if [ -z "$base" ]; then echo; else b=$(median "$out/base"); printf ' %14s %12s\n' "$b" "$("$py" -c "print(f'{$h / $b:.3f}')")"; fi
   done
  done
done
# The per-value cost the hosted store adds to MXNet's: one `_copyto` per staged or pulled value.
cc -std=c11 -O2 -Wall -Wextra -Werror -I include benches/hosted_copy_cost.c "$ref" -Wl,-rpath,"$(dirname "$ref")" -o "$out/copy_cost"
"$out/copy_cost"
