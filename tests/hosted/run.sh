#!/usr/bin/env bash
# Hosted mode on the reference wheel: unchanged training scripts (tests/hosted/train.py) run on
# pure MXNet and in hosted mode, stdout compared byte for byte; a negative control that must
# make the comparison fail; the proofs (tests/hosted/proof.py, tests/hosted/lending.py); the distributed section (training
# comparisons on ps-lite and hosted MPI, row_sparse checks); the refusal of a non-1.9 host.
set -euo pipefail
cd "$(dirname "$0")/../.."
ref="${MXNET_LIBRARY:-$(scripts/reference-mxnet.sh)}"
py="$(cd "$(dirname "$ref")/../../../.." && pwd)/bin/python"
lib="$PWD/target/release/libkvstore.so"
[ -f "$lib" ] || cargo build --release --quiet
# A directory of its own: two runs at once (two worktrees, a rerun) must not share files.
mkdir -p target; out=$(mktemp -d "$PWD/target/hosted.XXXXXX"); trap 'rm -rf "$out"' EXIT
hosted() { MXNET_LIBRARY_PATH="$lib" KVSTORE_HOST_LIBRARY="$ref" "$@"; }

# Every model with both stores and both update_on_kvstore settings; the context counts 2, 3, 4
# and 7 are spread over the combinations (each count appears with every model or store).
counts=(2 3 4 7)
fails=0; runs=0; i=0
for model in mlp conv hybrid module; do
  for store in local device; do
    for uok in 1 0; do
      [ "$model" = module ] && [ "$uok" = 0 ] && continue   # Module picks update_on_kvstore itself
      ncpu=${counts[$((i % 4))]}; i=$((i + 1))
      args=("$model" "$store" "$uok" "$ncpu" 3)
      "$py" tests/hosted/train.py "${args[@]}" > "$out/pure.txt" 2>/dev/null
      hosted "$py" tests/hosted/train.py "${args[@]}" > "$out/hosted.txt" 2>/dev/null
      runs=$((runs + 1))
      if cmp -s "$out/pure.txt" "$out/hosted.txt"; then
        echo "identical: ${args[*]}"
      else
        echo "DIFFERENT: ${args[*]}"; diff "$out/pure.txt" "$out/hosted.txt" || true; fails=$((fails + 1))
      fi
    done
  done
done
# A gluon DataLoader with 2 worker processes, forked after the store holds values.
for args in "loader device 1 2 4" "loader local 0 3 4"; do
  "$py" tests/hosted/train.py $args > "$out/pure.txt" 2>/dev/null
  hosted "$py" tests/hosted/train.py $args > "$out/hosted.txt" 2>/dev/null
  runs=$((runs + 1))
  if cmp -s "$out/pure.txt" "$out/hosted.txt"; then echo "identical (forking DataLoader): $args"; else echo "DIFFERENT (forking DataLoader): $args"; diff "$out/pure.txt" "$out/hosted.txt" || true; fails=$((fails + 1)); fi
done
# NaiveEngine: every op synchronous on the calling thread.
for args in "mlp device 1 3 3" "conv local 0 4 3"; do
  MXNET_ENGINE_TYPE=NaiveEngine "$py" tests/hosted/train.py $args > "$out/pure.txt" 2>/dev/null
  MXNET_ENGINE_TYPE=NaiveEngine hosted "$py" tests/hosted/train.py $args > "$out/hosted.txt" 2>/dev/null
  runs=$((runs + 1))
  if cmp -s "$out/pure.txt" "$out/hosted.txt"; then echo "identical (NaiveEngine): $args"; else echo "DIFFERENT (NaiveEngine): $args"; fails=$((fails + 1)); fi
done
# Gradient compression (2bit) on `device` stores, set with the Trainer's (or Module's)
# compression_params: each context's gradient is quantised against its own residual,
# dequantised and summed. A threshold of 0.05 makes codes fire from the first step on.
for args in "mlp device 1 2 4 2bit:0.05" "mlp device 0 3 4 2bit:0.05" "conv device 1 4 3 2bit:0.05" \
  "hybrid device 0 7 3 2bit:0.05" "module device 1 2 3 2bit:0.05"; do
  "$py" tests/hosted/train.py $args > "$out/pure.txt" 2>/dev/null
  hosted "$py" tests/hosted/train.py $args > "$out/hosted.txt" 2>/dev/null
  runs=$((runs + 1))
  if cmp -s "$out/pure.txt" "$out/hosted.txt"; then echo "identical (compressed): $args"; else echo "DIFFERENT (compressed): $args"; diff "$out/pure.txt" "$out/hosted.txt" || true; fails=$((fails + 1)); fi
done
echo "hosted vs pure MXNet: $((runs - fails))/$runs identical"
[ "$fails" = 0 ]

# Negative control: dropping a source from every sum must make the comparison fail.
"$py" tests/hosted/train.py mlp device 1 3 3 > "$out/pure.txt" 2>/dev/null
KVSTORE_HOSTED_TEST_DROP_SOURCE=1 hosted "$py" tests/hosted/train.py mlp device 1 3 3 > "$out/hosted.txt" 2>/dev/null
if cmp -s "$out/pure.txt" "$out/hosted.txt"; then
  echo "the negative control (KVSTORE_HOSTED_TEST_DROP_SOURCE=1) did not change the output: the comparison proves nothing" >&2
  exit 1
fi
echo "negative control differs, as it must"
# ...and for a compressed run: dropping a source, or not compressing at all, must show.
"$py" tests/hosted/train.py mlp device 0 3 4 2bit:0.05 > "$out/pure.txt" 2>/dev/null
KVSTORE_HOSTED_TEST_DROP_SOURCE=1 hosted "$py" tests/hosted/train.py mlp device 0 3 4 2bit:0.05 > "$out/hosted.txt" 2>/dev/null
hosted "$py" tests/hosted/train.py mlp device 0 3 4 > "$out/uncompressed.txt" 2>/dev/null
for control in hosted uncompressed; do
  if cmp -s "$out/pure.txt" "$out/$control.txt"; then
    echo "the compressed negative control ($control) did not change the output: the comparison proves nothing" >&2
    exit 1
  fi
done
echo "compressed negative controls (a dropped source; no compression) differ, as they must"

# A failing or panicking sum reaches the host's waiters (MXNet's engine rethrows it at the
# next wait on the pulled value), in both reductions (local: CommCPU order; device).
for store in local device; do
  KVSTORE_HOSTED_TEST_FAIL_SUM=error hosted "$py" tests/hosted/failing_sum.py $store "KVSTORE_HOSTED_TEST_FAIL_SUM=error" 2>/dev/null
  KVSTORE_HOSTED_TEST_FAIL_SUM=panic hosted "$py" tests/hosted/failing_sum.py $store "engine operation panicked" 2>/dev/null
done

# Hosted KVStore handles are checked as native ones: freed and made-up handles refused.
hosted "$py" tests/hosted/handles.py

# The store is libkvstore's, ordered by the host's engine.
echo "pure MXNet:"; "$py" tests/hosted/proof.py pure 2>/dev/null
echo "hosted:"
hosted "$py" tests/hosted/proof.py hosted

# Plain CPU arrays are lent to the store in place (no copy after an array's second call);
# oneDNN layouts, in-place push-pulls, two handles of one array and views keep their values.
# Also with lending off, and under NaiveEngine (every host op runs on the calling thread).
echo "lending, pure MXNet:"; timeout -k 5 300 "$py" tests/hosted/lending.py pure 2>/dev/null
echo "lending, hosted:"; hosted timeout -k 5 300 "$py" tests/hosted/lending.py hosted
echo "lending off (KVSTORE_HOSTED_ZERO_COPY=0):"
KVSTORE_HOSTED_ZERO_COPY=0 hosted timeout -k 5 300 "$py" tests/hosted/lending.py hosted > "$out/lending.txt"; sed -n 2p "$out/lending.txt"
echo "lending under NaiveEngine:"
MXNET_ENGINE_TYPE=NaiveEngine hosted timeout -k 5 300 "$py" tests/hosted/lending.py hosted naive > "$out/lending.txt"; tail -1 "$out/lending.txt"

# A dist_sync training job, 2 workers + 1 server on loopback: pure MXNet (ps-lite) against
# hosted mode on libkvstore's MPI store. ps-lite numbers its workers in no fixed order, so each
# side's worker outputs are compared ordered by the rank each prints first. update_on_kvstore=1
# runs the pickled optimizer on the server (Python's kvstore_server, on host arrays over the
# server's buffers); 0 has the servers only sum.
command -v mpirun >/dev/null || { echo "hosted dist: mpirun not found (apt-get install openmpi-bin)" >&2; exit 1; }
[ -f target/release/libkvstore_mpi.so ] || cargo build --release --quiet --workspace
by_rank() { for f in "$@"; do printf '%s\t%s\n' "$(head -1 "$f")" "$f"; done | sort | cut -f2 | xargs cat; }
# Pure MXNet's side of a sync training comparison, under ps-lite. Sync training leaves every
# worker with the same parameters (train.py's last line, their digest); a ps-lite job whose two
# workers disagree is a fault of the reference, not an answer to compare against, so it is run
# again, at most four times. Inside this suite it happens to one job in a few (2026-11-27: once
# in one full run, three times in a row in another, on the 2-bit MLP); the same job run alone
# six times in a row agreed every time.
pure_train() {
  local try
  for try in 1 2 3 4 5; do
    rm -rf "$out/pslite"
    env -u MXNET_LIBRARY_PATH -u KVSTORE_HOST_LIBRARY scripts/pslite-launch -n 2 -s 1 --timeout 180 \
      --output-dir "$out/pslite" "$@" > /dev/null 2>&1 \
      || { echo "hosted dist: the pure MXNet job failed: $*"; tail -5 "$out"/pslite/*.stderr; return 1; }
    [ "$(tail -qn1 "$out"/pslite/worker.*.stdout | sort -u | wc -l)" = 1 ] && return 0
    echo "hosted dist: ps-lite left its two workers with different parameters (try $try): $*" >&2
  done
  return 1
}
# train.py ARGS hosted on libkvstore's MPI store, 2 workers + 1 server; extra kvstore-launch
# arguments (--env NAME:VALUE) come before `--`. The workers' outputs, by rank, go to hosted.txt.
hosted_train() {
  local extra=()
  while [ "$1" != -- ]; do extra+=("$1"); shift; done
  shift
  rm -rf "$out/mpi"
  MXNET_LIBRARY_PATH="$lib" scripts/kvstore-launch -n 2 -s 1 --launcher local --timeout 180 \
    --env "KVSTORE_HOST_LIBRARY:$ref" "${extra[@]}" --output-dir "$out/mpi" "$py" tests/hosted/train.py "$@" > "$out/mpirun.log" 2>&1 \
    || { echo "hosted dist: the hosted job failed: $* (${extra[*]})"; tail -20 "$out/mpirun.log"; return 1; }
  by_rank "$out"/mpi/1/rank.[12]/stdout > "$out/hosted.txt"
  [ "$(grep -c '^rank ' "$out/hosted.txt")" = 2 ] || { echo "hosted dist: expected 2 workers' outputs: $*"; return 1; }
}
# train.py ARGS pure (ps-lite, into pure.txt) and hosted, compared byte for byte. LABEL prefixes
# the report; ENGINE, when not empty, is MXNET_ENGINE_TYPE on both sides.
compare_dist() {
  local label=$1 engine=$2 pure_env=() hosted_env=()
  shift 2
  if [ -n "$engine" ]; then
    pure_env=(--env "MXNET_ENGINE_TYPE=$engine")
    hosted_env=(--env "MXNET_ENGINE_TYPE:$engine")
  fi
  pure_train "${pure_env[@]}" "$py" tests/hosted/train.py "$@" || exit 1
  by_rank "$out"/pslite/worker.*.stdout > "$out/pure.txt"
  hosted_train "${hosted_env[@]}" -- "$@" || exit 1
  # ps-lite itself has given other self-consistent answers under load (both workers agreeing),
  # the same one twice in a row in one CI run (2bit): where the answers differ, the reference
  # runs again, at most twice, and the hosted answer must equal one it gives; the hosted side
  # never runs again.
  local try
  for try in 2 3; do
    cmp -s "$out/pure.txt" "$out/hosted.txt" && break
    echo "hosted dist: pure MXNet (ps-lite) gave another answer than hosted mode; running it again (try $try): $*" >&2
    pure_train "${pure_env[@]}" "$py" tests/hosted/train.py "$@" || exit 1
    by_rank "$out"/pslite/worker.*.stdout > "$out/pure.txt"
  done
  cmp -s "$out/pure.txt" "$out/hosted.txt" \
    || { echo "hosted dist: DIFFERENT${label:+ ($label)}: $*"; diff "$out/pure.txt" "$out/hosted.txt" | head -20; exit 1; }
  echo "identical (${label:+$label, }2 workers, 1 server, $(wc -l < "$out/hosted.txt") lines): $*"
}
for args in "mlp dist_sync 0 2 4" "mlp dist_sync 1 2 4" "conv dist_sync 1 1 3" "hybrid dist_device_sync 0 3 3"; do
  # shellcheck disable=SC2086
  compare_dist "" "" $args
done
# Negative control: the last run's comparison, with a local value dropped from each worker's sum.
hosted_train --env KVSTORE_HOSTED_TEST_DROP_SOURCE:1 -- hybrid dist_device_sync 0 3 3 || exit 1
if cmp -s "$out/pure.txt" "$out/hosted.txt"; then
  echo "hosted dist: the negative control (KVSTORE_HOSTED_TEST_DROP_SOURCE=1) did not change the output" >&2
  exit 1
fi
echo "hosted dist: negative control differs, as it must"
# Gradient compression (2bit) in dist stores: each worker sums its contexts' gradients
# uncompressed (MXNet's dist workers never hand the setting to their Comm), then compresses the
# sum against one residual per key; worker 0 forwards the setting to the servers. MXNet's dist
# PushPull refuses compression, so train.py's workers push and pull themselves here.
for args in "mlp dist_sync 0 2 4 2bit:0.05" "hybrid dist_device_sync 1 3 3 2bit:0.05"; do
  # shellcheck disable=SC2086
  compare_dist compressed "" $args
done
# Negative control: the same job uncompressed must differ from the compressed one.
hosted_train -- hybrid dist_device_sync 1 3 3 || exit 1
if cmp -s "$out/pure.txt" "$out/hosted.txt"; then
  echo "hosted dist: the uncompressed control did not change the output: the compressed comparison proves nothing" >&2
  exit 1
fi
echo "hosted dist: the uncompressed control differs, as it must"
# NaiveEngine: the hosted dist push and pull ops run inline and wait for their native part.
compare_dist NaiveEngine NaiveEngine mlp dist_sync 1 2 4
# Ordering proofs of a dist_sync job (tests/hosted/dist_proof.py): pure MXNet, then hosted.
rm -rf "$out/pslite" "$out/mpi"
env -u MXNET_LIBRARY_PATH -u KVSTORE_HOST_LIBRARY scripts/pslite-launch -n 2 -s 1 --timeout 180 \
  --output-dir "$out/pslite" "$py" tests/hosted/dist_proof.py > /dev/null 2>&1 \
  || { echo "hosted dist proofs: failed on pure MXNet"; cat "$out"/pslite/worker.*.stdout; exit 1; }
MXNET_LIBRARY_PATH="$lib" scripts/kvstore-launch -n 2 -s 1 --launcher local --timeout 180 \
  --env "KVSTORE_HOST_LIBRARY:$ref" --output-dir "$out/mpi" "$py" tests/hosted/dist_proof.py > "$out/mpirun.log" 2>&1 \
  || { echo "hosted dist proofs: FAILED"; cat "$out"/mpi/1/rank.[12]/stdout; tail -20 "$out/mpirun.log"; exit 1; }
echo "hosted dist proofs (each worker):"; by_rank "$out"/mpi/1/rank.[12]/stdout
# A server updater that fails (tests/hosted/failing_updater.py). In Python: ctypes prints the
# traceback and the job goes on with the value unchanged, as pure MXNet's. In the host's
# engine (a failing operator): pure MXNet's server dies on the failed wait; the hosted job
# must stop at once with the reason (not hang, not go on).
rm -rf "$out/pslite" "$out/mpi"
env -u MXNET_LIBRARY_PATH -u KVSTORE_HOST_LIBRARY scripts/pslite-launch -n 2 -s 1 --timeout 180 \
  --output-dir "$out/pslite" "$py" tests/hosted/server_updater_failure.py python > /dev/null 2>&1 \
  || { echo "hosted dist: the pure MXNet job with a raising updater failed"; exit 1; }
MXNET_LIBRARY_PATH="$lib" scripts/kvstore-launch -n 2 -s 1 --launcher local --timeout 180 \
  --env "KVSTORE_HOST_LIBRARY:$ref" --output-dir "$out/mpi" "$py" tests/hosted/server_updater_failure.py python > "$out/mpirun.log" 2>&1 \
  || { echo "hosted dist: the job with a raising updater failed"; tail -20 "$out/mpirun.log"; exit 1; }
sort "$out"/pslite/worker.*.stdout > "$out/pure.txt"; sort "$out"/mpi/1/rank.[12]/stdout > "$out/hosted.txt"
cmp -s "$out/pure.txt" "$out/hosted.txt" && grep -q "TypeError: the test's optimizer raises in Python" "$out"/mpi/1/rank.0/stderr \
  || { echo "hosted dist: a raising updater: not as pure MXNet"; diff "$out/pure.txt" "$out/hosted.txt"; exit 1; }
echo "hosted dist: an updater raising in Python is printed and the job goes on, as in pure MXNet: $(head -1 "$out/hosted.txt")"
rm -rf "$out/mpi"; start=$SECONDS
if MXNET_LIBRARY_PATH="$lib" scripts/kvstore-launch -n 2 -s 1 --launcher local --timeout 180 \
  --env "KVSTORE_HOST_LIBRARY:$ref" --output-dir "$out/mpi" "$py" tests/hosted/server_updater_failure.py host > "$out/mpirun.log" 2>&1; then
  echo "hosted dist: a server updater failing in the host's engine did not fail the job" >&2; exit 1
fi
grep -q "the hosted server's updater for key 0 failed in the host" "$out/mpirun.log" && grep -q "the test's custom op fails" "$out/mpirun.log" && [ $((SECONDS - start)) -lt 90 ] \
  || { echo "hosted dist: a failing server updater: no reason, or not fast ($((SECONDS - start)) s)"; tail -20 "$out/mpirun.log"; exit 1; }
echo "hosted dist: a server updater failing in the host's engine stops the job with the reason ($((SECONDS - start)) s)"

# row_sparse keys of a dist_sync store (tests/hosted/dist_sparse_checks.py): pure MXNet runs the
# calls it allows, so the expected results are MXNet's; hosted runs them too, plus the bad calls,
# each of which must be refused without changing an output or the servers' rounds.
rm -rf "$out/pslite" "$out/mpi"
env -u MXNET_LIBRARY_PATH -u KVSTORE_HOST_LIBRARY scripts/pslite-launch -n 2 -s 1 --timeout 180 \
  --output-dir "$out/pslite" "$py" tests/hosted/dist_sparse_checks.py --valid-only > /dev/null 2>&1 \
  || { echo "hosted dist: the pure MXNet row_sparse checks failed"; tail -n 20 "$out"/pslite/worker.*.stderr; exit 1; }
MXNET_LIBRARY_PATH="$lib" scripts/kvstore-launch -n 2 -s 1 --launcher local --timeout 180 \
  --env "KVSTORE_HOST_LIBRARY:$ref" --output-dir "$out/mpi" "$py" tests/hosted/dist_sparse_checks.py > "$out/mpirun.log" 2>&1 \
  || { echo "hosted dist: the row_sparse checks failed"; tail -n 20 "$out"/mpi/1/rank.[12]/stderr; exit 1; }
[ "$(cat "$out"/pslite/worker.*.stdout "$out"/mpi/1/rank.[12]/stdout | grep -c 'all row_sparse checks passed')" = 4 ] \
  || { echo "hosted dist: the row_sparse checks did not finish on every worker"; exit 1; }
echo "hosted dist: row_sparse checks pass on pure MXNet (the calls it allows, $(grep -c '^ok' "$out"/pslite/worker.0.stdout) checks) and hosted ($(grep -c '^ok\|^refused' "$out"/mpi/1/rank.1/stdout) checks)"

# row_sparse pushes to a dist_async store, optimizer on the server: order-independent sums, so
# pure MXNet and hosted must print the same.
rm -rf "$out/pslite" "$out/mpi"
env -u MXNET_LIBRARY_PATH -u KVSTORE_HOST_LIBRARY scripts/pslite-launch -n 2 -s 1 --timeout 180 \
  --output-dir "$out/pslite" "$py" tests/hosted/dist_sparse_async.py > /dev/null 2>&1 \
  || { echo "hosted dist: the pure MXNet dist_async row_sparse job failed"; tail -n 20 "$out"/pslite/worker.*.stderr; exit 1; }
MXNET_LIBRARY_PATH="$lib" scripts/kvstore-launch -n 2 -s 1 --launcher local --timeout 180 \
  --env "KVSTORE_HOST_LIBRARY:$ref" --output-dir "$out/mpi" "$py" tests/hosted/dist_sparse_async.py > "$out/mpirun.log" 2>&1 \
  || { echo "hosted dist: the hosted dist_async row_sparse job failed"; tail -n 20 "$out"/mpi/1/rank.[12]/stderr; exit 1; }
by_rank "$out"/pslite/worker.*.stdout > "$out/pure.txt"
by_rank "$out"/mpi/1/rank.[12]/stdout > "$out/hosted.txt"
[ "$(grep -c '^rank ' "$out/hosted.txt")" = 2 ] && cmp -s "$out/pure.txt" "$out/hosted.txt" \
  || { echo "hosted dist: dist_async row_sparse DIFFERENT"; diff "$out/pure.txt" "$out/hosted.txt" | head; exit 1; }
echo "hosted dist: dist_async row_sparse pushes with the server optimizer: identical to pure MXNet"

# A host that is not MXNet 1.9.x is refused, with the reason, on every call.
cat > "$out/fake_host.c" <<'C'
int MXGetVersion(int *out) { *out = 20000; return 0; }
C
cc -shared -fPIC -o "$out/libfake_mxnet.so" "$out/fake_host.c"
# Checks read captured output from a here-string: with pipefail, `echo "$x" | grep -q` fails
# whenever grep exits at its match before echo has written the rest (SIGPIPE).
msg=$(MXNET_LIBRARY_PATH="$lib" KVSTORE_HOST_LIBRARY="$out/libfake_mxnet.so" "$py" -c "import mxnet" 2>&1 || true)
grep -q "hosted mode refused: KVSTORE_HOST_LIBRARY=.* is MXNet 2.0.0 (20000); hosted mode needs MXNet 1.9.x" <<<"$msg" \
  || { echo "a 2.0 host was not refused with the reason:"; echo "$msg"; exit 1; }
echo "a 2.0 host is refused: ok"

# A C program linked with -lkvstore, in hosted mode: the seed walkthrough and the differential
# C programs whose calls the hosted store serves print the same as against the reference
# libmxnet.so and against native libkvstore. One known difference is normalised, in
# diff_store only: an updater's `local` is on cpu(0) in hosted mode (the store's memory is
# wrapped with DLPack, which MXNet 1.9 accepts only as cpu), on cpu_pinned(0) in MXNet.
cflags=(-std=c11 -Wall -Wextra -Werror -O1 -pthread -I include)
with_kvstore=(-L target/release -lkvstore -Wl,-rpath,"$PWD/target/release")
with_mxnet=("$ref" -Wl,-rpath,"$(dirname "$ref")")
for prog in walkthrough diff_store diff_ndarray diff_ops diff_slice_assign diff_sparse diff_broadcast_sparse \
  diff_compression diff_parsing diff_random; do
  cc "${cflags[@]}" "ctests/$prog.c" "${with_kvstore[@]}" -o "$out/${prog}_kv"
  cc "${cflags[@]}" "ctests/$prog.c" "${with_mxnet[@]}" -o "$out/${prog}_mx"
  normalise() { if [ "$prog" = diff_store ]; then sed 's/local_ctx=(3,0)/local_ctx=(1,0)/'; else cat; fi; }
  "$out/${prog}_mx" | normalise > "$out/c_mx.txt"
  "$out/${prog}_kv" | normalise > "$out/c_native.txt"
  KVSTORE_HOST_LIBRARY="$ref" "$out/${prog}_kv" > "$out/c_hosted.txt"
  [ -s "$out/c_hosted.txt" ] || { echo "C $prog printed nothing in hosted mode"; exit 1; }
  for other in mx native; do
    cmp -s "$out/c_$other.txt" "$out/c_hosted.txt" \
      || { echo "C $prog in hosted mode differs from $other:"; diff "$out/c_$other.txt" "$out/c_hosted.txt" | head -20; exit 1; }
  done
  echo "C $prog, hosted: identical to libmxnet.so and to native libkvstore ($(wc -l < "$out/c_hosted.txt") lines)"
done
# diff_random with a value per context, against libmxnet.so; and with calls the store must
# refuse between the steps (those with live array handles: hosted mode cannot tell a host
# array's handle from another pointer), whose rest must be the sequence without them.
"$out/diff_random_mx" 20 60 1 per-device > "$out/c_mx.txt"
KVSTORE_HOST_LIBRARY="$ref" "$out/diff_random_kv" 20 60 1 per-device > "$out/c_hosted.txt"
cmp -s "$out/c_mx.txt" "$out/c_hosted.txt" \
  || { echo "C diff_random per-device in hosted mode differs from libmxnet.so:"; diff "$out/c_mx.txt" "$out/c_hosted.txt" | head -20; exit 1; }
KVSTORE_HOST_LIBRARY="$ref" "$out/diff_random_kv" 40 60 1 bad-live > "$out/c_bad.txt" \
  || { echo "C diff_random bad-live in hosted mode failed"; tail -5 "$out/c_bad.txt"; exit 1; }
KVSTORE_HOST_LIBRARY="$ref" "$out/diff_random_kv" 40 60 1 > "$out/c_hosted.txt"
grep -v '^bad ' "$out/c_bad.txt" | cmp -s - "$out/c_hosted.txt" \
  || { echo "C diff_random in hosted mode: refused calls changed the store"; exit 1; }
echo "C diff_random, hosted: a value per context identical to libmxnet.so; $(grep -c '^bad ' "$out/c_bad.txt") refused calls changed nothing"
# ...and it is hosted: an operator only MXNet has computes, and the store is libkvstore's.
cc "${cflags[@]}" tests/hosted/which_store.c "${with_kvstore[@]}" -o "$out/which_store"
facts=$(KVSTORE_HOST_LIBRARY="$ref" "$out/which_store")
grep -qx "dot: 7 10 15 22" <<<"$facts" || { echo "hosted C program: MXNet's dot did not run:"; echo "$facts"; exit 1; }
grep -q "rc=-1 .*MXKVStorePush: shape mismatch for key 3" <<<"$facts" \
  || { echo "hosted C program: the store is not libkvstore's:"; echo "$facts"; exit 1; }
native_facts=$("$out/which_store")
grep -q "dot: rc=-1" <<<"$native_facts" || { echo "native C program ran dot: the check proves nothing"; exit 1; }
echo "C program in hosted mode: MXNet's operators, libkvstore's store: ok"
