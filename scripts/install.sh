#!/usr/bin/env bash
# Installs libkvstore as a system library, in cargo-c's layout:
#   scripts/install.sh [--prefix P] [--libdir DIR] [--no-build] [DESTDIR=D] [PREFIX=P]
# P defaults to /usr/local; DIR (relative to P) to lib; DESTDIR (also read from the
# environment) stages the tree under D, with every recorded path still naming P. Puts:
#   DIR/libkvstore.so.X.Y.Z (SONAME libkvstore.so.X), DIR/libkvstore.so.X, DIR/libkvstore.so
#   DIR/libkvstore.a
#   include/kvstore/kvstore.h, include/kvstore/kvstore.hpp (the C++17 wrapper)
#   DIR/pkgconfig/kvstore.pc                    pkg-config --cflags --libs kvstore
#   DIR/cmake/kvstore/kvstoreConfig.cmake       find_package(kvstore) -> kvstore::kvstore
#   DIR/cmake/kvstore/kvstoreConfigVersion.cmake
# X.Y.Z is Cargo.toml's version. --no-build installs target/release as it is.
set -euo pipefail
cd "$(dirname "$0")/.."

prefix=/usr/local libdir=lib build=1 destdir=${DESTDIR:-}
while [ $# -gt 0 ]; do
  case $1 in
    --prefix) prefix=$2; shift 2 ;;
    --prefix=*) prefix=${1#*=}; shift ;;
    PREFIX=*) prefix=${1#*=}; shift ;;
    --libdir) libdir=$2; shift 2 ;;
    --libdir=*) libdir=${1#*=}; shift ;;
    --destdir) destdir=$2; shift 2 ;;
    DESTDIR=*|--destdir=*) destdir=${1#*=}; shift ;;
    --no-build) build=0; shift ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
case $prefix in /*) ;; *) echo "install.sh: --prefix must be absolute, got '$prefix'" >&2; exit 2 ;; esac
case $libdir in /*|*..*) echo "install.sh: --libdir must be relative to the prefix, got '$libdir'" >&2; exit 2 ;; esac
prefix=${prefix%/}; [ -n "$prefix" ] || prefix=/

version=$(sed -n 's/^version *= *"\([0-9][0-9.]*\)".*/\1/p' Cargo.toml | head -n1)
description=$(sed -n 's/^description *= *"\(.*\)"/\1/p' Cargo.toml | head -n1)
IFS=. read -r major minor _ <<<"$version"
[ -n "$version" ] && [ -n "$minor" ] || { echo "install.sh: no version in Cargo.toml" >&2; exit 1; }

[ "$build" = 1 ] && cargo build --release --quiet --lib
for f in target/release/libkvstore.so target/release/libkvstore.a include/kvstore.h bindings/cpp/include/kvstore/kvstore.hpp; do
  [ -f "$f" ] || { echo "install.sh: $f is missing (build first, or drop --no-build)" >&2; exit 1; }
done
soname=$(readelf -d target/release/libkvstore.so | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = "libkvstore.so.$major" ] || {
  echo "install.sh: target/release/libkvstore.so has SONAME '$soname', expected libkvstore.so.$major (rebuild)" >&2; exit 1; }

root="$destdir$prefix"
lib="$root/$libdir"
install -d "$lib/pkgconfig" "$lib/cmake/kvstore" "$root/include/kvstore"
install -m 755 target/release/libkvstore.so "$lib/libkvstore.so.$version"
ln -sfn "libkvstore.so.$version" "$lib/libkvstore.so.$major"
ln -sfn "libkvstore.so.$major" "$lib/libkvstore.so"
install -m 644 target/release/libkvstore.a "$lib/libkvstore.a"
install -m 644 include/kvstore.h bindings/cpp/include/kvstore/kvstore.hpp "$root/include/kvstore/"

# What a static link needs besides libkvstore.a (rustc's native-static-libs for this target).
libs_private="-lpthread -ldl -lm -lrt -lutil -lgcc_s"
# From DIR/cmake/kvstore back to the prefix: one ".." per component of DIR, then two.
up=$(echo "$libdir" | tr '/' '\n' | grep -cv '^$' || true)
to_prefix=$(printf '../%.0s' $(seq 1 $((up + 2)))); to_prefix=${to_prefix%/}
subst() {
  sed -e "s|@PREFIX@|$prefix|g" -e "s|@LIBDIR@|\${prefix}/$libdir|g" \
      -e "s|@INCLUDEDIR@|\${prefix}/include|g" -e "s|@LIBDIR_REL@|$libdir|g" \
      -e "s|@INCLUDEDIR_REL@|include|g" -e "s|@CMAKE_TO_PREFIX@|$to_prefix|g" \
      -e "s|@VERSION@|$version|g" -e "s|@MAJOR@|$major|g" -e "s|@MINOR@|$minor|g" \
      -e "s|@DESCRIPTION@|$description|g" -e "s|@LIBS_PRIVATE@|$libs_private|g" \
      -e "s|@CMAKE_LIBS_PRIVATE@|$(echo "$libs_private" | sed 's/-l//g; s/ /;/g')|g" "$1"
}
subst packaging/kvstore.pc.in >"$lib/pkgconfig/kvstore.pc"
subst packaging/kvstoreConfig.cmake.in >"$lib/cmake/kvstore/kvstoreConfig.cmake"
subst packaging/kvstoreConfigVersion.cmake.in >"$lib/cmake/kvstore/kvstoreConfigVersion.cmake"
chmod 644 "$lib/pkgconfig/kvstore.pc" "$lib/cmake/kvstore/"*.cmake
echo "installed libkvstore $version under $root"
