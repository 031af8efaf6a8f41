# Source this to run the unchanged MXNet Python package (PyPI mxnet==1.9.1, numpy<1.24) on
# libkvstore.so:   source bindings/python/env.sh && python your_training_script.py
# With KVSTORE_PREFIX set (a prefix of scripts/install.sh) the installed library is used.
# mxnet's libinfo.find_lib_path() honours MXNET_LIBRARY_PATH; it must be an absolute path.
if [ -n "${KVSTORE_PREFIX:-}" ]; then
  export MXNET_LIBRARY_PATH="$(PKG_CONFIG_PATH="$KVSTORE_PREFIX/lib/pkgconfig" pkg-config --variable=libdir kvstore)/libkvstore.so"
else
  _kv_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  [ -f "$_kv_root/target/release/libkvstore.so" ] || (cd "$_kv_root" && cargo build --release --quiet)
  export MXNET_LIBRARY_PATH="$_kv_root/target/release/libkvstore.so"
  unset _kv_root
fi
echo "mxnet will load $MXNET_LIBRARY_PATH"
