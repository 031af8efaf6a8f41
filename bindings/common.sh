# Sourced by bindings/*/build.sh: where libkvstore.so and MXNet's headers are.
#   KVSTORE_PREFIX an install prefix of scripts/install.sh: the library is found through its
#                 pkg-config file (KVSTORE_LIB = its libdir); nothing of the build tree is used
#   KVSTORE_LIB   directory holding libkvstore.so  (default: the project's target/release, built)
#   MXNET_INCLUDE MXNet 1.9's include/ (mxnet/, nnvm/, dmlc/, mshadow/, dlpack/); default: the
#                 one shipped in the PyPI mxnet==1.9.1 wheel of scripts/reference-mxnet.sh
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ -n "${KVSTORE_PREFIX:-}" ]; then
  KVSTORE_LIB=$(PKG_CONFIG_PATH="$KVSTORE_PREFIX/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}" \
                pkg-config --variable=libdir kvstore) ||
    { echo "no kvstore.pc under $KVSTORE_PREFIX/lib/pkgconfig: run scripts/install.sh --prefix $KVSTORE_PREFIX" >&2; exit 1; }
elif [ -z "${KVSTORE_LIB:-}" ]; then
  (cd "$ROOT" && cargo build --release --quiet)
  KVSTORE_LIB="$ROOT/target/release"
fi
if [ -z "${MXNET_INCLUDE:-}" ]; then
  MXNET_INCLUDE="$(dirname "$("$ROOT/scripts/reference-mxnet.sh")")/include"
fi
