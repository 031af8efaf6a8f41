/* Distributed differential test of where libkvstore deliberately differs from MXNet 1.9's
 * dist stores, run by scripts/dist-diff on the reference's ps-lite stores and on libkvstore's
 * MPI stores. scripts/dist-diff holds what each library must print on the lines that differ
 * (KNOWN_DIFFERENCES there; docs/differences.md lists them); every other line must be the same.
 *
 * Pull into a pushed array (dist_sync): every round, each worker pushes the same single CPU
 * array (filled with ones once) and pulls the key into another array. MXNet's KVStoreDist sends
 * a single CPU value without copying it and keeps that array as the key's communication
 * buffer, so the pull lands in the pushed array too: the caller's array holds the round's sum
 * (W), the next round pushes W from every worker, and both arrays read W, W^2, W^3, ...
 * libkvstore never writes a pushed array: it stays 1 and every pull reads W. Pushing two
 * values per call (reduced on the worker into a buffer of the store's) changes neither
 * library's arrays: those lines are the same on both. */
#include "dist_common.h"

#define SMALL 6
#define ROUNDS 4

int main(void) {
  if (!dist_is_worker()) return run_server_role("dist_sync");
  KVStoreHandle kv = dist_create("dist_sync");
  int rank, workers;
  worker_header(kv, &rank, &workers);
  int key = 3, key2 = 4;
  NDArrayHandle zero = f32_filled(SMALL, 0, 0);
  CHECK(MXKVStoreInit(kv, 1, &key, &zero));
  CHECK(MXKVStoreInit(kv, 1, &key2, &zero));

  /* one CPU array pushed every round, never refilled */
  NDArrayHandle pushed = f32_filled(SMALL, 1, 0), out = f32_filled(SMALL, -1, 0);
  for (int r = 1; r <= ROUNDS; r++) {
    CHECK(MXKVStorePush(kv, 1, &key, &pushed, 0));
    CHECK(MXKVStorePull(kv, 1, &key, &out, 0));
    EMIT("pull into a pushed array, round %d: pulled %g", r, (double)f32_all(out));
    EMIT("pull into a pushed array, round %d: the pushed array now reads %g", r, (double)f32_all(pushed));
  }

  /* two values per push (cpu(0), cpu(1)): the same on both libraries */
  NDArrayHandle two[2] = {f32_filled(SMALL, 1, 0), f32_filled(SMALL, 1, 1)};
  int keys2[2] = {key2, key2};
  for (int r = 1; r <= ROUNDS; r++) {
    CHECK(MXKVStorePush(kv, 2, keys2, two, 0));
    CHECK(MXKVStorePull(kv, 1, &key2, &out, 0));
    EMIT("two values per push, round %d: pulled %g; the pushed arrays read %g and %g", r, (double)f32_all(out),
         (double)f32_all(two[0]), (double)f32_all(two[1]));
  }

  CHECK(MXNDArrayFree(two[0]));
  CHECK(MXNDArrayFree(two[1]));
  CHECK(MXNDArrayFree(pushed));
  CHECK(MXNDArrayFree(out));
  CHECK(MXNDArrayFree(zero));
  CHECK(MXKVStoreFree(kv));
  EMIT("done");
  return 0;
}
