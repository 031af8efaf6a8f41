#!/usr/bin/env bash
# Regenerates include/kvstore.h with the pinned cbindgen (installing it if needed).
# With --check, fails if the committed header differs from what the sources generate.
set -euo pipefail
cd "$(dirname "$0")/.."
version=0.29.4
if ! cbindgen --version 2>/dev/null | grep -q " $version$"; then
  cargo install --quiet --locked cbindgen --version "$version"
fi
if [ "${1:-}" = "--check" ]; then
  tmp=$(mktemp)
  cbindgen -q --config cbindgen.toml --crate kvstore --output "$tmp"
  if ! diff -u include/kvstore.h "$tmp"; then
    echo "include/kvstore.h is stale: run scripts/gen-header.sh and commit it" >&2
    exit 1
  fi
  rm -f "$tmp"
  echo "include/kvstore.h is what cbindgen $version generates"
else
  cbindgen -q --config cbindgen.toml --crate kvstore --output include/kvstore.h
fi
