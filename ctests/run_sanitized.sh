#!/usr/bin/env bash
# The C programs under AddressSanitizer + UndefinedBehaviorSanitizer (the programs are
# instrumented; the library is the release build), then under valgrind's memcheck. Any
# report fails the run. Allocations may fail (allocator_may_return_null): programs that cap
# their address space check that the library answers -1 then.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
lib="$PWD/target/release"
out="$PWD/target/ctests-sanitized"
mkdir -p "$out"
programs=(walkthrough diff_store diff_dtypes diff_ndarray diff_compression diff_sparse diff_ops diff_broadcast_sparse diff_parsing diff_random bad_input row_ids threads teardown async_error profiler aliasing free_in_flight cross_store half_applied fork oom)
# Arguments where a program's full run would take minutes under the sanitizers.
declare -A args=([diff_random]="8 40 1 bad")

for p in "${programs[@]}"; do
  cc -std=c11 -g -O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all \
     -pthread -I include "ctests/$p.c" -L "$lib" -lkvstore -Wl,-rpath,"$lib" -o "$out/$p-asan"
  # grep reads all of nm's output (no -q): with pipefail an early exit would fail the pipe.
  nm "$out/$p-asan" | grep __asan_init > /dev/null || { echo "$p: not instrumented" >&2; exit 1; }
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:allocator_may_return_null=1 "$out/$p-asan" ${args[$p]:-} > "$out/$p-asan.log" 2>&1 \
    || { cat "$out/$p-asan.log" >&2; echo "ASan/UBSan: $p FAILED" >&2; exit 1; }
  echo "ASan/UBSan: $p clean"
done

for p in "${programs[@]}"; do
  # valgrind checks leaks in forked children too, where the parent's threads (lost by the
  # fork) read as leaked; fork runs under ASan above, whose leak check its children skip.
  [[ $p == fork ]] && { echo "valgrind: fork skipped (forked children)"; continue; }
  cc -std=c11 -g -O1 -pthread -I include "ctests/$p.c" -L "$lib" -lkvstore -Wl,-rpath,"$lib" -o "$out/$p"
  # --fair-sched: valgrind runs one thread at a time, and by default a thread that polls
  # (threads.c's reader) can starve the others for minutes; fair scheduling hands the lock
  # round in order.
  valgrind --quiet --fair-sched=yes --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite \
    "$out/$p" ${args[$p]:-} > "$out/$p-valgrind.log" 2>&1 \
    || { cat "$out/$p-valgrind.log" >&2; echo "valgrind: $p FAILED" >&2; exit 1; }
  echo "valgrind: $p clean"
done
echo "sanitized: ${#programs[@]} passed, 0 failed"
