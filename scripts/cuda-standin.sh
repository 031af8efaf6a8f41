#!/usr/bin/env bash
# Builds the CUDA stand-in (cuda-standin/, test equipment: a CPU implementation of the CUDA
# driver API) if needed, and prints as its last line the directory to put first on
# LD_LIBRARY_PATH. The directory holds libcuda.so and libcuda.so.1 and nothing else.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p cuda-standin >&2
dir="$PWD/target/cuda-standin"
mkdir -p "$dir"
for name in libcuda.so libcuda.so.1; do
  cp -f target/release/libcuda_standin.so "$dir/$name.tmp" && mv -f "$dir/$name.tmp" "$dir/$name"
done
echo "$dir"
