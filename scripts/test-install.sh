#!/usr/bin/env bash
# The install test: scripts/install.sh into a temporary prefix (and once more staged under a
# DESTDIR), then the seed walkthrough built from copies of its sources three ways against the
# installed files only — cc + pkg-config, a CMake project with find_package(kvstore), and the
# C++17 wrapper's test (with pkg-config and with CMake) — plus a static link. Each program
# runs with LD_LIBRARY_PATH unset, and ldd must resolve libkvstore.so.0 into the prefix.
#   scripts/test-install.sh [--keep]     (--keep leaves the prefix and prints its path)
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
[ "${1:-}" = --keep ] || trap 'rm -rf "$work"' EXIT
prefix="$work/prefix"

scripts/install.sh --prefix "$prefix"
scripts/install.sh --no-build --prefix /usr/local DESTDIR="$work/stage" >/dev/null
cmp "$work/stage/usr/local/lib/libkvstore.so.0.1.0" "$prefix/lib/libkvstore.so.0.1.0"
grep -qx 'prefix=/usr/local' "$work/stage/usr/local/lib/pkgconfig/kvstore.pc"
echo "== installed tree"
(cd "$prefix" && find . | sort)

# Sources copied out of the project, so no build-tree directory is on any search path.
src="$work/src"; mkdir -p "$src" "$work/bin"
cp ctests/walkthrough.c ctests/common.h bindings/cpp/tests/test_raii.cpp "$src/"
sed -i 's|#include "kvstore/kvstore.hpp"|#include <kvstore/kvstore.hpp>|' "$src/test_raii.cpp"
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
libdir=$(pkg-config --variable=libdir kvstore)
[ "$libdir" = "$prefix/lib" ] || { echo "pkg-config libdir is $libdir, expected $prefix/lib" >&2; exit 1; }
pkg-config --exists 'kvstore >= 0.1'

echo "== cc + pkg-config"
cc -std=c11 -Wall -Wextra -Werror "$src/walkthrough.c" -o "$work/bin/walkthrough_pc" \
   $(pkg-config --cflags --libs kvstore) -Wl,-rpath,"$libdir"
cc -std=c11 -Wall -Wextra -Werror "$src/walkthrough.c" -o "$work/bin/walkthrough_static" \
   $(pkg-config --cflags kvstore) "$libdir/libkvstore.a" $(pkg-config --libs-only-l --static kvstore | sed 's/-lkvstore//')
c++ -std=c++17 -Wall -Wextra -Werror "$src/test_raii.cpp" -o "$work/bin/test_raii_pc" \
   $(pkg-config --cflags --libs kvstore) -Wl,-rpath,"$libdir"

echo "== CMake find_package(kvstore)"
cmake -S tests/install -B "$work/cmake" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
      -DWALKTHROUGH_DIR="$src" -DWRAPPER_TEST="$src/test_raii.cpp" >"$work/cmake.log" || { cat "$work/cmake.log"; exit 1; }
cmake --build "$work/cmake" -j2 >>"$work/cmake.log" || { cat "$work/cmake.log"; exit 1; }
# The version file: 0.1 and no version are accepted, 0.2 (another 0.x minor) and 1.0 refused.
for want in "" 0.1 0.2 1.0; do
  mkdir -p "$work/version-$want"
  printf 'cmake_minimum_required(VERSION 3.16)\nproject(v NONE)\nfind_package(kvstore %s REQUIRED)\n' "$want" \
    >"$work/version-$want/CMakeLists.txt"
  if cmake -S "$work/version-$want" -B "$work/version-$want/build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null 2>&1; then
    accepted=yes; else accepted=no; fi
  case "$want:$accepted" in
    :yes|0.1:yes|0.2:no|1.0:no) ;;
    *) echo "find_package(kvstore $want): accepted=$accepted, wrong" >&2; exit 1 ;;
  esac
done
cp "$work/cmake/walkthrough_cmake" "$work/cmake/walkthrough_cmake_static" "$work/cmake/test_raii_cmake" "$work/bin/"

for exe in "$work"/bin/*; do
  name=$(basename "$exe")
  resolved=$(env -u LD_LIBRARY_PATH ldd "$exe" | awk '$1 ~ /^libkvstore/ {print $1 " => " $3}')
  case $name in
    *static*) [ -z "$resolved" ] || { echo "$name: links $resolved, expected none" >&2; exit 1; } ;;
    *) [ "$resolved" = "libkvstore.so.0 => $prefix/lib/libkvstore.so.0" ] || {
         echo "$name: libkvstore resolves as '$resolved', expected into $prefix/lib" >&2; exit 1; } ;;
  esac
  out=$(cd "$work" && env -u LD_LIBRARY_PATH -u DMLC_ROLE "$exe" 2>&1) || { echo "$out"; echo "$name failed" >&2; exit 1; }
  case $name in
    test_raii*) grep -q "raii wrapper: all checks passed" <<<"$out" ;;
    *) grep -qx "walkthrough passed" <<<"$out" ;;
  esac
  echo "ok: $name (${resolved:-static})"
done
[ "${1:-}" = --keep ] && echo "kept $prefix"
echo "install test: all passed"
