#!/usr/bin/env bash
# The Python wheel, as a user meets it: build it (scripts/wheel.sh: manylinux tag checked by
# auditwheel), install it with its `mxnet` extra into a fresh venv (no system site-packages;
# mxnet==1.9.1 and numpy from PyPI, or pip's cache), then train tests/wheel/train.py, an
# unchanged MXNet Gluon script:
# - through `python -m kvstore`: hosted over the venv's own libmxnet.so, the trainer's store
#   refuses a wrong-shape push with libkvstore's message;
# - plainly (the negative control): MXNet's own store refuses it with MXNet's message;
# both runs' losses fall and are identical (a `device` store sums in MXNet's order).
set -euo pipefail
cd "$(dirname "$0")/.."
wheel=$(scripts/wheel.sh | tail -1)
venv=target/wheel/venv
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check "$wheel[mxnet]"
"$venv/bin/pip" check --disable-pip-version-check >/dev/null

fail() { echo "test-wheel: $*" >&2; exit 1; }
lib=$(cd /tmp && "$OLDPWD/$venv/bin/python" -m kvstore --print-library)
case "$lib" in "$PWD/$venv"/lib/python3*/site-packages/kvstore/libkvstore.so) ;; *) fail "library at $lib" ;; esac
[ -f "$lib" ] || fail "$lib is missing"
native=$("$venv/bin/python" -m kvstore --native -c 'import os; print(os.environ.get("KVSTORE_HOST_LIBRARY"), os.environ["MXNET_LIBRARY_PATH"])')
[ "$native" = "None $lib" ] || fail "--native ran with: $native"

hosted=$("$venv/bin/python" -m kvstore tests/wheel/train.py)
plain=$("$venv/bin/python" tests/wheel/train.py)
printf 'python -m kvstore train.py:\n%s\npython train.py:\n%s\n' "$hosted" "$plain"
grep -qx "store type: device" <<<"$hosted" || fail "no device store through the entry point"
grep -q "^wrong-shape push: refused: MXNetError: MXKVStorePush: shape mismatch for key 0: " <<<"$hosted" ||
  fail "the store through python -m kvstore was not libkvstore's"
grep -q "^wrong-shape push: refused: MXNetError: Check failed: from.shape() == to.shape()" <<<"$plain" ||
  fail "the plain run's store was not MXNet's"
losses=$(grep "^losses:" <<<"$hosted")
[ "$losses" = "$(grep "^losses:" <<<"$plain")" ] || fail "losses differ between libkvstore's and MXNet's store"
read -r _ first _ _ _ last <<<"$losses"
python3 -c "import sys; sys.exit(0 if $last < $first / 2 else 1)" || fail "training did not converge: $losses"
echo "test-wheel: $(basename "$wheel") trains an unchanged Gluon script on libkvstore's store"
