#!/usr/bin/env bash
# Sets up everything scripts/test.sh needs on a fresh Debian machine, and is quiet when
# nothing is missing (so test.sh can call it every time):
#   1. the system packages: installed with apt-get when run as root; otherwise it stops at
#      once and prints the exact `apt-get install ...` line to run;
#   2. the reference mxnet==1.9.1 venv (scripts/reference-mxnet.sh);
#   3. NVRTC from PyPI (scripts/nvrtc-wheel.sh);
#   4. the CUDA stand-in (scripts/cuda-standin.sh).
# Sourced (`. scripts/setup.sh`), it only defines its functions: tests/setup/ calls them on
# made-up directories.
set -euo pipefail

# The Debian packages the suite needs, each with the command (or check) that proves it is
# installed: compilers, valgrind (ctests/run_sanitized.sh), cmake and pkg-config (the install
# test), python3-venv (the reference venv), Open MPI (mpicc and headers for the MPI plugin's
# build, mpirun for the dist tests) and libclang for the plugin's bindgen.
missing_packages() {
  local need=()
  command -v cc >/dev/null 2>&1 || need+=(gcc)
  command -v c++ >/dev/null 2>&1 || need+=(g++)
  command -v valgrind >/dev/null 2>&1 || need+=(valgrind)
  command -v cmake >/dev/null 2>&1 || need+=(cmake)
  command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
  python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need+=(python3-venv)
  command -v mpirun >/dev/null 2>&1 || need+=(openmpi-bin)
  command -v mpicc >/dev/null 2>&1 || need+=(libopenmpi-dev)
  bindgen_libclang_found || need+=(libclang-dev)
  echo "${need[*]}"
}

# Whether a libclang that bindgen (clang-sys) loads is installed: `libclang.so` or
# `libclang-N.so` (libclang-dev's links), in the given directories or, without arguments,
# in LIBCLANG_PATH, the LLVM library directories and the loader's cache. Not any
# `libclang*.so*`: `libclang-cpp.so.14` (another library, present on a fresh Debian
# without libclang-dev) matches that and bindgen cannot use it.
bindgen_libclang_found() {
  local dirs=("$@") dir file
  if [ "$#" -eq 0 ]; then
    dirs=(${LIBCLANG_PATH:-} /usr/lib/llvm-*/lib /usr/lib/*-linux-gnu /usr/lib64 /usr/lib /usr/local/lib)
    if grep -Eq '^libclang(-[0-9]+)?\.so$' <<<"$(ldconfig -p 2>/dev/null | awk '{print $1}')"; then
      return 0
    fi
  fi
  for dir in "${dirs[@]}"; do
    for file in "$dir"/libclang.so "$dir"/libclang-[0-9]*.so; do
      if [ -e "$file" ] && [[ "$(basename "$file")" =~ ^libclang(-[0-9]+)?\.so$ ]]; then
        return 0
      fi
    done
  done
  return 1
}

# Installs the missing packages as root; otherwise stops with the line to run.
install_packages() {
  local need
  need=$(missing_packages)
  [ -z "$need" ] && return 0
  local line="apt-get install -y $need"
  if [ "${KVSTORE_SETUP_UID:-$(id -u)}" != 0 ]; then
    echo "scripts/setup.sh: missing Debian packages; run as root:" >&2
    echo "  sudo apt-get update && sudo $line" >&2
    return 1
  fi
  echo "installing: $need" >&2
  apt-get update -qq >&2
  # shellcheck disable=SC2086 # one word per package
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need >&2
}

# Runs a setup step; its output (both streams) is shown only if it fails.
quietly() {
  local log
  log=$(mktemp)
  if ! "$@" >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    echo "scripts/setup.sh: failed: $*" >&2
    return 1
  fi
  rm -f "$log"
}

setup_main() {
  cd "$(dirname "${BASH_SOURCE[0]}")/.."
  install_packages
  # These two print only while they install (minutes, once).
  scripts/reference-mxnet.sh >/dev/null
  scripts/nvrtc-wheel.sh >/dev/null
  # cargo prints "Finished" even when nothing is rebuilt.
  quietly scripts/cuda-standin.sh
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  setup_main
fi
