# Sourced by bindings/*/build.sh: where libkvstore.so and MXNet's headers are.
#   KVSTORE_LIB   directory holding libkvstore.so  (default: the project's target/release, built)
#   MXNET_INCLUDE MXNet 1.9's include/ (mxnet/, nnvm/, dmlc/, mshadow/, dlpack/); default: the
#                 one shipped in the PyPI mxnet==1.9.1 wheel of scripts/reference-mxnet.sh
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ -z "${KVSTORE_LIB:-}" ]; then
  (cd "$ROOT" && cargo build --release --quiet)
  KVSTORE_LIB="$ROOT/target/release"
fi
if [ -z "${MXNET_INCLUDE:-}" ]; then
  MXNET_INCLUDE="$(dirname "$("$ROOT/scripts/reference-mxnet.sh")")/include"
fi
