#!/usr/bin/env bash
# The host build of kernels/ under AddressSanitizer: the CUDA stand-in built with
# CUDA_STANDIN_ASAN=1 into its own target directory, then the kernel comparison
# (tests/gpu_standin_kernels.rs) run on it, so an out-of-bounds index in a kernel fails here,
# on the CPU, where on a GPU it would need compute-sanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."
target=target/standin-asan
CUDA_STANDIN_ASAN=1 CARGO_TARGET_DIR=$target cargo build --release -p cuda-standin >&2
mkdir -p "$target/lib"
cp -f "$target/release/libcuda_standin.so" "$target/lib/libcuda.so.1"
cargo test --release --test gpu_standin_kernels --no-run >&2
bin=$(cargo test --release --test gpu_standin_kernels --no-run --message-format=json 2>/dev/null |
  python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "gpu_standin_kernels" and m.get("executable"):
        print(m["executable"])')
[ -x "$bin" ] || { echo "standin-asan: no gpu_standin_kernels test binary" >&2; exit 1; }
# ASan's dlopen interceptor makes NVRTC's own dlopen of libnvrtc-builtins lose NVRTC's
# $ORIGIN run path, so the builtins' directory goes on the search path here.
nvrtc="${KVSTORE_NVRTC_PATH:-$(scripts/nvrtc-wheel.sh)}"
LD_LIBRARY_PATH="$(dirname "$nvrtc")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" KVSTORE_NVRTC_PATH="$nvrtc" \
  LD_PRELOAD="$(c++ -print-file-name=libasan.so)" ASAN_OPTIONS=detect_leaks=0 \
  KVSTORE_CUDA_STANDIN_DIR="$PWD/$target/lib" "$bin"
