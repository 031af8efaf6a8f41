#!/usr/bin/env bash
# Builds the Scala frontend's two JNI libraries against libkvstore.so, unchanged.
#   bindings/scala/build-jni.sh <mxnet checkout>/scala-package
# What the Maven native build does, with libkvstore in place of libmxnet: the sources include
# <mxnet/ndarray.h> (MXNet's headers from the wheel) and "../src/common/cuda_utils.h", used
# only under MXNET_USE_CUDA, so an empty stand-in is put on the include path.
set -euo pipefail
source "$(dirname "$0")/../common.sh"
pkg=$(cd "$1" && pwd)
java_home=${JAVA_HOME:-$(dirname "$(dirname "$(readlink -f "$(command -v javac)")")")}
stub="$ROOT/target/scala-jni-include"
mkdir -p "$stub/include" "$stub/src/common" && : > "$stub/src/common/cuda_utils.h"
flags=(-std=c++0x -O2 -fPIC -shared -DMSHADOW_USE_MKL=0 -DMSHADOW_USE_CUDA=0 -I"$MXNET_INCLUDE" -I"$stub/include"
       -I"$java_home/include" -I"$java_home/include/linux" -L"$KVSTORE_LIB" -lkvstore -Wl,-rpath,"$KVSTORE_LIB")
for part in native init-native; do
  src=$(ls "$pkg/$part/src/main/native/"*.cc)
  name=$([ $part = native ] && echo libmxnet-scala.so || echo libmxnet-init-scala.so)
  mkdir -p "$pkg/$part/target"
  g++ -I"$pkg/$part/src/main/native" "$src" "${flags[@]}" -o "$pkg/$part/target/$name"
  echo "built $pkg/$part/target/$name"
done
