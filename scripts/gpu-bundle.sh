#!/usr/bin/env bash
# Builds what a GPU machine runs into the git-ignored folder .gpu-bundle/ (no Rust toolchain
# or package registry is needed there): the release libkvstore.so, the C programs
# ctests/gpu_diff.c, ctests/gpu_nccl.c, ctests/gpu_absent.c and ctests/gpu_standin.c, benches/gpubench.c
# (rpath $ORIGIN/../lib), the driver-call tracer ctests/cuda_audit.c, and scripts/test-gpu.sh. Hand the folder to the device machine (the device tool's `carry`:
# [".gpu-bundle"]) and run `bash .gpu-bundle/test-gpu.sh [--bench]` there.
# --variant NAME=DIR (repeatable): also DIR/libkvstore.so (another build: an earlier commit, a
# changed constant) as .gpu-bundle/var/NAME, for `bash .gpu-bundle/gpu-ab.sh` (benches/gpu-ab.sh),
# which runs gpubench on this build and each variant alternately. Libraries go without their
# debug info (`strip -g`): the device tool carries 64 MiB at most.
# --env-variant NAME=VAR=VALUE[,VAR=VALUE...] (repeatable): a variant that is this build run
# with those environment variables (a setting compared with the default in the same run, no
# second build): .gpu-bundle/var/NAME/env.
set -euo pipefail
usage="usage: $0 [--variant NAME=DIR]... [--env-variant NAME=VAR=VALUE[,VAR=VALUE...]]..."
variants=() env_variants=()
while [ $# -gt 0 ]; do
  case "$1" in
    --variant) [[ "${2:-}" =~ ^[A-Za-z0-9_.-]+=.+ ]] || { echo "$usage" >&2; exit 2; }
      [ -f "${2#*=}/libkvstore.so" ] || { echo "gpu-bundle: no libkvstore.so in ${2#*=}" >&2; exit 2; }
      variants+=("${2%%=*}=$(cd "${2#*=}" && pwd)"); shift 2 ;;
    --env-variant) [[ "${2:-}" =~ ^[A-Za-z0-9_.-]+=[A-Za-z_][A-Za-z0-9_]*=[^,]*(,[A-Za-z_][A-Za-z0-9_]*=[^,]*)*$ ]] || { echo "$usage" >&2; exit 2; }
      env_variants+=("$2"); shift 2 ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
done
cd "$(dirname "$0")/.."
cargo build --release --quiet --lib
out=.gpu-bundle
rm -rf "$out"
mkdir -p "$out/lib" "$out/bin"
strip -g -o "$out/lib/libkvstore.so" target/release/libkvstore.so
# The programs record the SONAME (libkvstore.so.<major>, build.rs), as they do when linked to an install.
soname=$(readelf -d target/release/libkvstore.so | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
ln -sf libkvstore.so "$out/lib/$soname"
for p in ctests/gpu_diff ctests/gpu_nccl ctests/gpu_absent ctests/gpu_standin benches/gpubench; do
  cc -std=c11 -O1 -g -Wall -Wextra -Werror -I include "$p.c" -L "$out/lib" -lkvstore -ldl -lm \
    -Wl,-rpath,'$ORIGIN/../lib' -o "$out/bin/$(basename "$p")"
done
# The driver-call tracer for the steady-loop allocation check (LD_AUDIT).
cc -std=c11 -O1 -g -Wall -Wextra -Werror -shared -fPIC ctests/cuda_audit.c -o "$out/lib/cuda_audit.so"
cp scripts/test-gpu.sh benches/gpu-ab.sh "$out/"
for v in "${env_variants[@]}"; do
  mkdir -p "$out/var/${v%%=*}"
  tr ',' '\n' <<<"${v#*=}" >"$out/var/${v%%=*}/env"
done
for v in "${variants[@]}"; do
  mkdir -p "$out/var/${v%%=*}"
  strip -g -o "$out/var/${v%%=*}/libkvstore.so" "${v#*=}/libkvstore.so"
  ln -sf libkvstore.so "$out/var/${v%%=*}/$soname"
done
du -sh "$out"
