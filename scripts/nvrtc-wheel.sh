#!/usr/bin/env bash
# Prints the path of libnvrtc.so.12 from the PyPI wheel nvidia-cuda-nvrtc-cu12 (pinned),
# installing it into the project's cache on first use (pip --target; no GPU or CUDA needed).
# CI compiles every kernel of kernels/ with it. Override the location with KVSTORE_NVRTC_DIR.
set -euo pipefail
version=12.9.86
dir="${KVSTORE_NVRTC_DIR:-$HOME/.cache/libkvstore/nvrtc-cu12-$version}"
lib="$dir/nvidia/cuda_nvrtc/lib/libnvrtc.so.12"
if [ ! -f "$lib" ]; then
  echo "installing nvidia-cuda-nvrtc-cu12==$version into $dir" >&2
  pip=(python3 -m pip)
  if ! python3 -m pip --version >/dev/null 2>&1; then
    # No pip for the system python (Debian's python3 without python3-pip): a venv has one.
    python3 -m venv "$dir.venv" >&2
    pip=("$dir.venv/bin/pip")
  fi
  PIP_ROOT_USER_ACTION=ignore "${pip[@]}" install --quiet --disable-pip-version-check --no-deps --target "$dir.partial" \
    "nvidia-cuda-nvrtc-cu12==$version" >&2
  rm -rf "$dir" && mv "$dir.partial" "$dir"
  rm -rf "$dir.venv"
fi
echo "$lib"
