#!/usr/bin/env bash
# The whole test suite, on a fresh Debian machine too: scripts/setup.sh first installs what is
# missing (Debian packages as root, else it stops with the apt-get line; the reference mxnet
# venv, NVRTC, the CUDA stand-in). Then: header, stubs and op-catalog freshness, the docs check
# (scripts/check-docs.py), Rust unit tests (and the
# import-layering check, tests/layers.rs), the GPU kernels compiled by NVRTC for sm_70/80/90
# and the GPU host logic (no GPU needed), the C programs (walkthrough,
# differential against the reference libmxnet.so, bad input, threads; both again on the
# x86_64 baseline loops), the header ABI check, the install test (scripts/install.sh into a
# temporary prefix; the walkthrough built with pkg-config and CMake against it),
# the Python proof (the unchanged mxnet 1.9.1 package on both libraries), the wheel
# (scripts/test-wheel.sh), the distributed
# harness (launcher unit tests; the dist C programs and MXNet's nightly dist scripts on the
# reference's ps-lite and on libkvstore's MPI stores; jobs and faults across the hosts of the
# network test bed, tests/testbed/run.sh), and the C programs again under
# AddressSanitizer and valgrind.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

MXNET_LIBRARY="${MXNET_LIBRARY:-$(scripts/reference-mxnet.sh)}"
export MXNET_LIBRARY
# The differential and ABI tests must not skip here: the reference library is required.
export KVSTORE_REQUIRE_REFERENCE=1
# The distributed-store programs run under mpirun and must not skip here either.
export KVSTORE_REQUIRE_MPI=1
echo "reference library: $MXNET_LIBRARY"
# NVRTC for compiling every kernel of kernels/ (tests/gpu_kernels.rs); it must not skip here.
KVSTORE_NVRTC_PATH="${KVSTORE_NVRTC_PATH:-$(scripts/nvrtc-wheel.sh)}"
export KVSTORE_NVRTC_PATH
export KVSTORE_REQUIRE_NVRTC=1
echo "NVRTC: $KVSTORE_NVRTC_PATH"

scripts/gen-header.sh --check
# The generated stubs and operator catalog match their generators and the committed lists.
python3 scripts/gen-stubs.py --check
python3 scripts/gen-op-catalog.py --check
scripts/gen-export-list.sh --check
# Every environment variable the code reads is in docs/environment.md; every page link resolves.
python3 -m unittest discover -s tests/docs
python3 scripts/check-docs.py
cargo test --release
# The MPI plugin's own framing (a two-part message's head carries its body's length).
cargo test --release -p kvstore-mpi
# The CUDA stand-in (test equipment): its imitation of the driver, NVRTC's images of kernels/
# loaded and launched on it, cudarc on it.
scripts/cuda-standin.sh >/dev/null
cargo test --release -p cuda-standin
# The host build of kernels/ again under AddressSanitizer (out-of-bounds indexing fails here).
scripts/standin-asan.sh
# ---- The GPU backend on the CUDA stand-in (docs/gpu.md) ----
# tests/gpu_standin.rs runs within `cargo test --release` above (no GPU needed; it builds the
# stand-in with scripts/cuda-standin.sh and puts it on its programs' LD_LIBRARY_PATH only):
# ctests/gpu_diff.c identical to its CPU run on 1, 2 and 4 devices and with stream delays,
# ctests/*.c on GPU arrays under ASan, fault injection, the steady push/pull trace.
# scripts/test-gpu.sh, the script a lent GPU machine runs, runs unchanged on the stand-in with
# 4 devices (compute-sanitizer skipped; gpubench for its values only).
# benches/gpu-ab.sh, the A/B of builds a lent GPU runs, once on the stand-in with this build as
# its own variant and as a variant run with a setting (every stream operation of the stand-in
# delayed by 2 ms): its table must name the three, give the ratios, and show the setting's
# variant slower.
scripts/gpu-bundle.sh --variant same=target/release --env-variant delayed=CUDA_STANDIN_DELAY_US=2000 >/dev/null
standin_dir="$(scripts/cuda-standin.sh | tail -1)"
LD_LIBRARY_PATH="$standin_dir" CUDA_STANDIN_DEVICES=4 bash .gpu-bundle/test-gpu.sh --bench
ab=$(LD_LIBRARY_PATH="$standin_dir" CUDA_STANDIN_DEVICES=1 bash .gpu-bundle/gpu-ab.sh --rounds 1 --iters 1 --workload latency)
echo "$ab"
if ! grep -q "same/this" <<<"$ab" || ! grep -q "delayed/this" <<<"$ab" ||
  ! grep -qE '^latency gpu( +[0-9.e+-]+){3}( +[0-9.]+){2}$' <<<"$ab"; then
  echo "FAIL: gpu-ab.sh printed no A/B table"; exit 1
fi
# The header names each column; the latency row has one more field (its "gpu").
if ! awk '$1 == "workload" { for (i = 2; i <= NF; i++) if ($i == "delayed/this") col = i + 1 }
  $1 == "latency" && col { found = 1; slower = $col > 1.5 } END { exit !(found && slower) }' <<<"$ab"; then
  echo "FAIL: gpu-ab.sh's variant with CUDA_STANDIN_DELAY_US=2000 was not slower: its settings did not reach gpubench"; exit 1
fi
# MXNet's own GPU KVStore tests, unchanged, on the stand-in (read from an apache/mxnet git
# directory when one is found: $MXNET_SOURCE or the fetch mirror; says so when there is none).
tests/gpu/mxnet-gpu-tests.sh
# ---- end of the GPU block ----
# The kernels pick AVX2 loops at run time; run the unit tests and the differential C programs
# again on the x86_64 baseline loops, which CPUs without AVX2 (or F16C) run.
KVSTORE_X86_BASELINE=1 cargo test --release --lib --test c_programs
scripts/test-install.sh
scripts/python-frontend.sh
# The wheel: pip-installed into a fresh venv, an unchanged Gluon script trained through
# `python -m kvstore` on libkvstore's store.
scripts/test-wheel.sh
# Distributed stores: the reference (ps-lite) and libkvstore (MPI) legs both run; a libkvstore
# leg that cannot run is a failure here, not a skip.
export KVSTORE_REQUIRE_DIST=1
python3 -m unittest discover -s tests/launcher
python3 -m unittest discover -s tests/setup
scripts/dist-diff
scripts/dist-diff --no-build -n 3 -s 2 --random 101-112
# Workers 0 and 1 as partners (on by default only across hosts).
KVSTORE_DIST_PAIRS=1 scripts/dist-diff --no-build -n 4 -s 2 --random 121-130
scripts/dist-python.sh
# Across hosts: a 4-host network test bed (scripts/testbed: namespaces, shaped links), a job
# through kvstore-launch --launcher ssh, a slowed link, a short partition, a killed host.
export KVSTORE_REQUIRE_TESTBED=1
tests/testbed/run.sh --no-build
# Hosted mode: unchanged training scripts on pure MXNet and with libkvstore hosting its store.
tests/hosted/run.sh
# dist_sync's rank-order sums and joins of workers that run out of data, through Python.
tests/hosted/dist_sync_rules.sh
bash ctests/run_sanitized.sh
