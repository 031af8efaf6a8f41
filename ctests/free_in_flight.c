/* A store freed while its work is still in flight: pushes summing into merge buffers and the
 * stored values, push-pulls writing their outputs, updaters' arrays. MXKVStoreFree returns at
 * once; the work finishes (the outputs hold the pulled sums) and nothing it uses is freed
 * under it (the sanitized runs check). MXNet 1.9 deletes its store's reducer at once while the
 * CPU reducer's queued ops still call it (`ctests/diff_random.c`, run against MXNet too, waits
 * before each free for that reason). libkvstore only. */
#include "common.h"

#define BIG (1u << 20) /* 4 MiB: summed on a worker, in parallel */

/* An updater that leaves the stored value as it is. */
static void keep_stored(int key, NDArrayHandle recv, NDArrayHandle local, void *user) {
  (void)key;
  (void)user;
  CHECK(MXNDArrayFree(recv));
  CHECK(MXNDArrayFree(local));
}

static void run(const char *type, uint32_t n, int devices, int with_updater) {
  KVStoreHandle kv;
  CHECK(MXKVStoreCreate(type, &kv));
  if (with_updater) CHECK(MXKVStoreSetUpdater(kv, keep_stored, NULL));
  int keys[4] = {7, 7, 7, 7};
  NDArrayHandle init = f32_filled(n, 0, 0);
  CHECK(MXKVStoreInit(kv, 1, keys, &init));
  NDArrayHandle vals[4], outs[4];
  for (int i = 0; i < devices; i++) {
    vals[i] = f32_filled(n, (float)(i + 1), i);
    outs[i] = f32_filled(n, -1, i);
  }
  /* Several rounds queued, the last one a push-pull, then the store goes. */
  for (int r = 0; r < 3; r++) CHECK(MXKVStorePush(kv, (mx_uint)devices, keys, vals, 0));
  CHECK(MXKVStorePushPull(kv, (mx_uint)devices, keys, (mx_uint)devices, keys, vals, outs, 0));
  CHECK(MXKVStoreFree(kv));
  CHECK(MXNDArrayWaitAll());
  /* An updater that changes nothing keeps the initial zeros; otherwise the last sum. */
  float want = with_updater ? 0 : (float)(devices * (devices + 1) / 2);
  for (int i = 0; i < devices; i++) {
    float got = f32_uniform(outs[i], n);
    if (got != want) {
      fprintf(stderr, "'%s', %u elements, %d values%s: output %d holds %g, expected %g\n", type, n, devices,
              with_updater ? ", updater" : "", i, got, want);
      exit(1);
    }
    CHECK(MXNDArrayFree(vals[i]));
    CHECK(MXNDArrayFree(outs[i]));
  }
  CHECK(MXNDArrayFree(init));
}

int main(void) {
  const char *types[2] = {"local", "device"};
  for (int t = 0; t < 2; t++)
    for (int devices = 1; devices <= 4; devices++)
      for (int with_updater = 0; with_updater < 2; with_updater++) {
        run(types[t], 16, devices, with_updater);
        run(types[t], BIG, devices, with_updater);
      }
  printf("free_in_flight passed\n");
  return 0;
}
