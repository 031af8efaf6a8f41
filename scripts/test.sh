#!/usr/bin/env bash
# The whole test suite: header freshness, Rust unit tests, the C programs (walkthrough,
# differential against the reference libmxnet.so, bad input, threads; both again on the
# x86_64 baseline loops), the header ABI check,
# the Python proof (the unchanged mxnet 1.9.1 package on both libraries), and the C programs
# again under AddressSanitizer and valgrind.
set -euo pipefail
cd "$(dirname "$0")/.."

MXNET_LIBRARY="${MXNET_LIBRARY:-$(scripts/reference-mxnet.sh)}"
export MXNET_LIBRARY
# The differential and ABI tests must not skip here: the reference library is required.
export KVSTORE_REQUIRE_REFERENCE=1
echo "reference library: $MXNET_LIBRARY"

scripts/gen-header.sh --check
scripts/gen-export-list.sh --check
cargo test --release
# The kernels pick AVX2 loops at run time; run the unit tests and the differential C programs
# again on the x86_64 baseline loops, which CPUs without AVX2 (or F16C) run.
KVSTORE_X86_BASELINE=1 cargo test --release --lib --test c_programs
scripts/python-frontend.sh
# Hosted mode: unchanged training scripts on pure MXNet and with libkvstore hosting its store.
tests/hosted/run.sh
bash ctests/run_sanitized.sh
