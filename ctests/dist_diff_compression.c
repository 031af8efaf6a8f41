/* Distributed differential test of 2-bit gradient compression on dist_sync, run by
 * scripts/dist-diff on both libraries: workers quantise pushes with their residuals, the server
 * dequantises and sums; init and pulls are uncompressed. A small key, a key above
 * MXNET_KVSTORE_BIGARRAY_BOUND (partitioned on its compressed size) and a key initialised with
 * ones (init is not compressed) are pushed several times with values that cross the threshold
 * only with the residual; after every push each worker pulls and prints. The server's updater
 * (installed through the controller) accumulates, so the pulls show the running sum. */
#include "dist_common.h"

#define SMALL 6
#define BIG 5003 /* above the bound the runner sets (1000) */

static int rank, nworker;

/* Push values around the threshold (0.5): element i of round r on rank q. */
static double gradient(uint32_t i, double round_rank) {
  int round = (int)round_rank / 16, q = (int)round_rank % 16;
  static const double base[] = {0.4, 0.1, 0.2, 0.3, -0.7, 0.6, -0.2};
  return base[round % 7] + 0.1 * (double)((i + (uint32_t)q) % 5) - 0.2 + 0.05 * q;
}

int main(void) {
  if (!dist_is_worker()) return run_server_role("dist_sync");
  KVStoreHandle kv = dist_create("dist_sync");
  worker_header(kv, &rank, &nworker);
  const char *keys[2] = {"type", "threshold"}, *vals[2] = {"2bit", "0.5"};
  CHECK(MXKVStoreSetGradientCompression(kv, 2, keys, vals));
  if (rank == 0) CHECK(MXKVStoreSendCommmandToServers(kv, 0, "updater 1"));
  CHECK(MXKVStoreBarrier(kv));

  int ks[3] = {1000, 1300, 1001};
  uint32_t sizes[3] = {SMALL, BIG, SMALL};
  for (int k = 0; k < 3; k++) {
    NDArrayHandle init = dense_of(DT_F32, sizes[k], 0, constant, ks[k] == 1001 ? 1.0 : 0.0);
    CHECK(MXKVStoreInit(kv, 1, &ks[k], &init));
  }
  for (int k = 0; k < 3; k++) {
    NDArrayHandle out = f32_filled(sizes[k], -1, 0);
    CHECK(MXKVStorePull(kv, 1, &ks[k], &out, 0));
    char label[64];
    snprintf(label, sizeof label, "key %d after init", ks[k]);
    emit_f32(label, out);
  }
  for (int round = 0; round < 7; round++) {
    for (int k = 0; k < 3; k++) {
      /* a fresh array per push: MXNet's dist worker pulls into the array last pushed from a CPU */
      NDArrayHandle g = dense_of(DT_F32, sizes[k], 0, gradient, round * 16 + rank);
      NDArrayHandle out = f32_filled(sizes[k], -1, 0);
      CHECK(MXKVStorePush(kv, 1, &ks[k], &g, 0));
      CHECK(MXKVStorePull(kv, 1, &ks[k], &out, 0));
      char label[64];
      snprintf(label, sizeof label, "key %d after push %d", ks[k], round + 1);
      emit_f32(label, out);
    }
  }
  /* an array whose elements are all at +-threshold steps: dequantised exactly */
  NDArrayHandle out = f32_filled(SMALL, -1, 0);
  CHECK(MXKVStorePull(kv, 1, &ks[0], &out, 0));
  float v[SMALL];
  f32_read(out, v, SMALL);
  for (int i = 0; i < SMALL; i++) {
    float steps = v[i] / 0.5f;
    EXPECT(steps == (float)(int)steps);
  }
  CHECK(MXNDArrayWaitAll());
  CHECK(MXKVStoreFree(kv));
  EMIT("done");
  return 0;
}
