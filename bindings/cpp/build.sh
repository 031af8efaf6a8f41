#!/usr/bin/env bash
# Builds a cpp-package program against libkvstore.so, unchanged.
#   bindings/cpp/build.sh <mxnet checkout>/cpp-package <program.cpp> <output>
# 1. generates include/mxnet-cpp/op.h with cpp-package's own OpWrapperGenerator.py, reading
#    the op metadata of libkvstore.so (the ops it computes, and the names it registers);
# 2. compiles with MXNet's headers from the wheel and links -lkvstore (rpath set).
set -euo pipefail
source "$(dirname "$0")/../common.sh"
pkg=$(cd "$1" && pwd); program=$2; output=$3
python="$(dirname "$("$ROOT/scripts/reference-mxnet.sh")")/../../../../bin/python"
(cd "$pkg/scripts" && "$python" OpWrapperGenerator.py "$KVSTORE_LIB/libkvstore.so")
g++ -std=c++11 -O2 -I"$pkg/include" -I"$MXNET_INCLUDE" "$program" -o "$output" \
    -L"$KVSTORE_LIB" -lkvstore -Wl,-rpath,"$KVSTORE_LIB"
echo "built $output against $KVSTORE_LIB/libkvstore.so"
