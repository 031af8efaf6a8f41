#!/usr/bin/env bash
# Development proof (needs an apache/mxnet git dir with branch v1.9.x, so not in CI): MXNet's
# own unchanged tests/python/unittest/test_kvstore.py and test_kvstore_custom.py, run by the
# PyPI mxnet==1.9.1 package in hosted mode (libkvstore.so's store on the wheel's libmxnet.so)
# and, for comparison, on the wheel's libmxnet.so alone. Every test must pass hosted; then a
# negative control (KVSTORE_HOSTED_TEST_DROP_SOURCE=1, which only the hosted store honours)
# must make some fail, so the passing run really exercised libkvstore's store.
#
#   tests/hosted/mxnet-unittest.sh <apache/mxnet git dir>
# MXNet's files go to target/mxnet-unittest/ (never committed); their `nose` import is
# satisfied by `pip install --target` there (the reference venv stays unchanged).
set -euo pipefail
cd "$(dirname "$0")/../.."
checkout=$(cd "$1" && pwd)
reference=$(scripts/reference-mxnet.sh)
python="$(cd "$(dirname "$reference")/../../../.." && pwd)/bin/python"
cargo build --release --quiet
ours="$PWD/target/release/libkvstore.so"
work="$PWD/target/mxnet-unittest"
mkdir -p "$work/unittest" "$work/common"
for f in unittest/test_kvstore.py unittest/test_kvstore_custom.py unittest/common.py common/models.py; do
  git -C "$checkout" cat-file -p "v1.9.x:tests/python/$f" > "$work/$f"
done
[ -d "$work/site/nose" ] || "$python" -m pip install --quiet --disable-pip-version-check --target "$work/site" nose

run() {  # run <label> <env...>: prints pytest's summary line, returns pytest's status
  local log="$work/log.txt"
  (cd "$work/unittest" && env "${@:2}" PYTHONPATH="$work/unittest:$work/common:$work/site" \
    "$python" -m pytest -q -p no:cacheprovider -W ignore::DeprecationWarning test_kvstore.py test_kvstore_custom.py) \
    > "$log" 2>&1 && rc=0 || rc=$?
  echo "$1: $(grep -E '(passed|failed)' "$log" | tail -1)"
  return $rc
}
run "reference libmxnet.so" -u MXNET_LIBRARY_PATH -u KVSTORE_HOST_LIBRARY \
  || { echo "MXNet's KVStore tests fail on the reference itself:"; tail -40 "$work/log.txt"; exit 1; }
run "hosted" MXNET_LIBRARY_PATH="$ours" KVSTORE_HOST_LIBRARY="$reference" \
  || { echo "MXNet's KVStore tests fail in hosted mode:"; tail -40 "$work/log.txt"; exit 1; }
if run "hosted, negative control" KVSTORE_HOSTED_TEST_DROP_SOURCE=1 MXNET_LIBRARY_PATH="$ours" KVSTORE_HOST_LIBRARY="$reference"; then
  echo "the negative control passed: the hosted run did not exercise libkvstore's store"; exit 1
fi
echo "MXNet's test_kvstore.py and test_kvstore_custom.py in hosted mode: all passed; negative control fails: ok"
