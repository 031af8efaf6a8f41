#!/usr/bin/env bash
# The Python wheel, as a user meets it: build it (scripts/wheel.sh: manylinux tag checked by
# auditwheel), install it with its `mxnet` extra into a fresh venv (no system site-packages;
# mxnet==1.9.1 and numpy from PyPI, or pip's cache), then train tests/wheel/train.py, an
# unchanged MXNet Gluon script:
# - through `python -m kvstore`: hosted over the venv's own libmxnet.so, the trainer's store
#   refuses a wrong-shape push with libkvstore's message;
# - plainly (the negative control): MXNet's own store refuses it with MXNet's message;
# both runs' losses fall and are identical (a `device` store sums in MXNet's order).
# Then a user's own build from the source tree, in that venv: `pip wheel .` (pip's isolated
# build environment, setuptools and wheel from PyPI) gives a wheel whose package and
# libkvstore.so are the repaired wheel's, byte for byte; `pip install .` replaces the install
# and trains the script as the wheel did. Last, the refusals: with the installed library
# removed, or not loadable, `python -m kvstore` runs nothing, exits 1 and names the library
# and why (MXNet's package would fall back to its own libmxnet.so).
set -euo pipefail
cd "$(dirname "$0")/.."
wheel=$(scripts/wheel.sh | tail -1)
venv=target/wheel/venv
rm -rf "$venv"
python3 -m venv "$venv"
pip=("$venv/bin/pip" --disable-pip-version-check)
"${pip[@]}" install --quiet "$wheel[mxnet]"
"${pip[@]}" check >/dev/null

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

# A user's build from the source tree, from setuptools' build tree up (target/python: a clone
# has none).
rm -rf target/python target/wheel/pip
"${pip[@]}" wheel --quiet --no-deps -w target/wheel/pip .
built=$(ls target/wheel/pip/libkvstore-*-py3-none-linux_*.whl) || fail "pip wheel . gave no py3-none-linux wheel"
python3 - "$built" "$wheel" <<'PY' || fail "pip wheel . and scripts/wheel.sh built different packages"
import sys, zipfile
built, repaired = (zipfile.ZipFile(w) for w in sys.argv[1:])
package = lambda w: {n: w.read(n) for n in w.namelist() if n.startswith("kvstore/") and not n.endswith("/")}
files = package(built)
if "kvstore/libkvstore.so" not in files:
    sys.exit(f"{sys.argv[1]} has no kvstore/libkvstore.so: {sorted(files)}")
if files != package(repaired):
    sys.exit(f"{sys.argv[1]}: {sorted(files)} differ from {sys.argv[2]}'s")
PY
"${pip[@]}" install --quiet --no-deps --force-reinstall .
[ "$(cd /tmp && "$OLDPWD/$venv/bin/python" -m kvstore --print-library)" = "$lib" ] || fail "pip install . put the library elsewhere"
from_source=$("$venv/bin/python" -m kvstore tests/wheel/train.py)
[ "$from_source" = "$hosted" ] || fail "after pip install ., python -m kvstore train.py printed: $from_source"
echo "test-wheel: pip wheel . gives $(basename "$built") with the same library; pip install . trains the same"

# The refusals: nothing runs without the library. `-c` would leave a file if it ran.
ran=target/wheel/ran
refused() {  # refused WHY: python -m kvstore must exit 1, run nothing, and name $lib and WHY
  local out err rc=0
  rm -f "$ran"
  out=$("$venv/bin/python" -m kvstore tests/wheel/train.py 2>target/wheel/refusal.err) || rc=$?
  err=$(cat target/wheel/refusal.err)
  [ "$rc" = 1 ] || fail "python -m kvstore train.py exited $rc ($1), stderr: $err"
  [ -z "$out" ] || fail "python -m kvstore ran train.py ($1): $out"
  grep -qF "the library $lib $1" <<<"$err" || fail "the refusal did not say 'the library $lib $1': $err"
  grep -qF "not running tests/wheel/train.py" <<<"$err" || fail "the refusal did not say what it did not run: $err"
  rc=0
  "$venv/bin/python" -m kvstore -c "open('$ran', 'w')" 2>/dev/null || rc=$?
  [ "$rc" = 1 ] && [ ! -e "$ran" ] || fail "python -m kvstore -c ran (exit $rc) with the library $1"
  rc=0
  "$venv/bin/python" -m kvstore --print-library >/dev/null 2>&1 || rc=$?
  [ "$rc" = 1 ] || fail "python -m kvstore --print-library exited $rc with the library $1"
  printf 'test-wheel: library %s: python -m kvstore refuses:\n%s\n' "$1" "$err"
}
rm "$lib"
refused "is missing"
printf 'not a shared library\n' >"$lib"
refused "cannot be loaded"
grep -q "invalid ELF header\|file too short" target/wheel/refusal.err || fail "the refusal did not give the loader's reason: $(cat target/wheel/refusal.err)"
