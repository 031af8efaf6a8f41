#!/usr/bin/env bash
# Development proof for the four frontends: builds MXNet's unchanged C++, Perl, Scala and
# Python KVStore tests against the reference libmxnet.so and against libkvstore.so, with the
# frontends harness (HARNESS, default ../shared/frontends/frontends.sh), and prints each
# frontend's result line for both libraries.
#
#   scripts/frontends.sh <apache/mxnet git dir or checkout, with branch v1.9.x> [STEPS]
# MXNet's sources are extracted into target/frontends/ (never committed). The harness's
# "deps" step installs Debian packages (swig, pdl, scala, ...) and runs on the first call.
set -euo pipefail
cd "$(dirname "$0")/.."
checkout=$(cd "$1" && pwd)
steps=${2:-"cpp perl scala python"}
harness=${HARNESS:-$(cd .. && pwd)/shared/frontends/frontends.sh}
work="$PWD/target/frontends"
if [ ! -f "$work/mxsrc/tests/python/unittest/test_kvstore.py" ]; then
  rm -rf "$work/mxsrc" && mkdir -p "$work/mxsrc"
  # (a partial mirror may lack blobs outside these folders and make git archive complain;
  # what matters is that the four folders arrive, checked below)
  git -C "$checkout" archive v1.9.x cpp-package perl-package scala-package tests/python | tar -x -C "$work/mxsrc" || true
fi
for f in cpp-package/example/test_kvstore.cpp perl-package/AI-MXNet/t/test_kvstore.t \
         scala-package/core/src/test/scala/org/apache/mxnet/KVStoreSuite.scala tests/python/unittest/test_kvstore.py; do
  [ -f "$work/mxsrc/$f" ] || { echo "MXNet sources incomplete: no $f" >&2; exit 1; }
done
cargo build --release --quiet
reference=$(scripts/reference-mxnet.sh)
first=$([ -d "$work/reference/venv" ] && echo "" || echo "deps ")
for which in reference libkvstore; do
  lib=$([ $which = reference ] && echo "$reference" || echo "$PWD/target/release/libkvstore.so")
  out="$work/$which"
  mkdir -p "$out"
  [ $which = libkvstore ] && ln -sfn "$work/reference/venv" "$out/venv"
  s=$([ $which = reference ] && echo "$first$steps" || echo "$steps")
  echo "== $which: $lib"
  MXSRC="$work/mxsrc" LIBSO="$lib" OUT="$out" STEPS="$s" bash "$harness" > "$out/log" 2>&1 || true
  grep -E "^C\+\+ test_kvstore|^Files=|^Result|^[0-9]+ passed, [0-9]+ failed$|^[0-9]+ (passed|failed).* in [0-9.]+s$" "$out/log" || tail -5 "$out/log"
done
