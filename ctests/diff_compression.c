/* Differential test of 2-bit gradient compression: a `device` store quantises every pushed
 * value against a per-position residual, dequantises and sums; results must be bit-identical
 * to libmxnet.so over many iterations of random gradients, for 1 to 4 devices, with and
 * without an updater. A `local` store accepts the setting and ignores it. */
#include "common.h"
#include <stdint.h>

static uint32_t rng = 12345;
static float uniform(float lo, float hi) { /* deterministic LCG */
  rng = rng * 1664525u + 1013904223u;
  return lo + (hi - lo) * (float)(rng >> 8) / (float)(1u << 24);
}

static uint64_t fnv1a(const void *data, size_t n) {
  const unsigned char *p = data;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

static void add_twice(int key, NDArrayHandle recv, NDArrayHandle local, void *user) {
  (void)key;
  update_add_scaled(recv, local, (size_t)(uintptr_t)user, 2, NULL, NULL);
}

static void run(const char *type, const char *threshold, uint32_t n, int devices, int with_updater) {
  KVStoreHandle kv;
  CHECK(MXKVStoreCreate(type, &kv));
  const char *keys[2] = {"type", "threshold"}, *vals[2] = {"2bit", threshold};
  CHECK(MXKVStoreSetGradientCompression(kv, 2, keys, vals));
  if (with_updater) CHECK(MXKVStoreSetUpdater(kv, add_twice, (void *)(uintptr_t)n));
  int key = 9, pkeys[4] = {9, 9, 9, 9};
  NDArrayHandle init = f32_filled(n, 1, 0), out = f32_filled(n, 0, 0), grads[4];
  CHECK(MXKVStoreInit(kv, 1, &key, &init));
  float *g = malloc(sizeof(float) * n), *o = malloc(sizeof(float) * n);
  for (int d = 0; d < devices; d++) grads[d] = f32_filled(n, 0, d);
  printf("%s threshold=%s n=%u devices=%d updater=%d\n", type, threshold, n, devices, with_updater);
  for (int it = 0; it < 25; it++) {
    for (int d = 0; d < devices; d++) {
      for (uint32_t i = 0; i < n; i++) g[i] = uniform(-0.6f, 0.6f);
      CHECK(MXNDArraySyncCopyFromCPU(grads[d], g, n));
    }
    CHECK(MXKVStorePush(kv, (uint32_t)devices, pkeys, grads, 0));
    CHECK(MXKVStorePull(kv, 1, &key, &out, 0));
    f32_read(out, o, n);
    printf("  iteration %2d: hash %016llx first %.9g %.9g last %.9g\n", it, (unsigned long long)fnv1a(o, sizeof(float) * n),
           o[0], o[1], o[n - 1]);
  }
  for (int d = 0; d < devices; d++) CHECK(MXNDArrayFree(grads[d]));
  CHECK(MXNDArrayFree(init));
  CHECK(MXNDArrayFree(out));
  CHECK(MXKVStoreFree(kv));
  free(g);
  free(o);
}

int main(void) {
  for (int devices = 1; devices <= 4; devices++) {
    run("device", "0.5", 37, devices, 0);
    run("device", "0.3", 1000, devices, 1);
  }
  run("local", "0.5", 37, 3, 0);
  printf("done\n");
  return 0;
}
