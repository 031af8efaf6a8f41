#!/usr/bin/env bash
# Prints the path of the reference libmxnet.so (PyPI mxnet==1.9.1), installing it into a
# virtualenv on first use. Override the venv location with KVSTORE_MXNET_VENV.
set -euo pipefail
venv="${KVSTORE_MXNET_VENV:-$HOME/.cache/libkvstore/mxnet-1.9.1}"
lib="$venv/lib/python3.11/site-packages/mxnet/libmxnet.so"
found=$(ls "$venv"/lib/python3*/site-packages/mxnet/libmxnet.so 2>/dev/null | head -1 || true)
if [ -z "$found" ]; then
  echo "installing the reference mxnet==1.9.1 into $venv" >&2
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install --quiet --disable-pip-version-check mxnet==1.9.1 numpy==1.23.5 >&2
  found=$(ls "$venv"/lib/python3*/site-packages/mxnet/libmxnet.so | head -1)
fi
echo "${found:-$lib}"
