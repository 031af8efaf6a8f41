/* dist_async under mpirun (see dist_store.c for the launch): a push before the servers have
 * an updater answers -1; once worker 0's controller command installs one, each push is
 * applied at once (stored += push); string keys. */
#include "common.h"
#include <string.h>

static KVStoreHandle server_kv;

static void add_updater(int key, NDArrayHandle recv, NDArrayHandle local, void *handle) {
  (void)key, (void)handle;
  float a[4], b[4];
  CHECK(MXNDArraySyncCopyToCPU(recv, a, 4));
  CHECK(MXNDArraySyncCopyToCPU(local, b, 4));
  for (int i = 0; i < 4; i++) b[i] += a[i];
  CHECK(MXNDArraySyncCopyFromCPU(local, b, 4));
  CHECK(MXNDArrayFree(recv));
  CHECK(MXNDArrayFree(local));
}

static void controller(int head, const char *body, void *handle) {
  (void)head, (void)handle;
  if (strcmp(body, "set updater") == 0) CHECK(MXKVStoreSetUpdater(server_kv, add_updater, NULL));
}

int main(int argc, char **argv) {
  /* "notify": the workers never free the store; MXNotifyShutdown (what the Python package
   * calls at interpreter exit) must run the exit protocol so that the servers stop. */
  int notify = argc > 1 && strcmp(argv[1], "notify") == 0;
  int nw = atoi(getenv("DMLC_NUM_WORKER"));
  int is_worker;
  CHECK(MXKVStoreIsWorkerNode(&is_worker));
  KVStoreHandle kv;
  CHECK(MXKVStoreCreate("dist_async", &kv));
  if (!is_worker) {
    server_kv = kv;
    CHECK(MXKVStoreRunServer(kv, controller, NULL));
    CHECK(MXKVStoreFree(kv));
    printf("server ok\n");
    return 0;
  }
  int rank;
  CHECK(MXKVStoreGetRank(kv, &rank));
  const char *keys[2] = {"w0", "w1"};
  NDArrayHandle init[2] = {f32_filled(4, 10, 0), f32_filled(4, 20, 0)};
  CHECK(MXKVStoreInitEx(kv, 2, keys, init));
  NDArrayHandle one = f32_filled(4, 1, 0), out = f32_filled(4, 0, 0);
  /* No updater on the servers yet: an async push is refused. */
  EXPECT(MXKVStorePushEx(kv, 1, keys, &one, 0) == -1);
  EXPECT(strstr(MXGetLastError(), "updater") != NULL);
  CHECK(MXKVStoreBarrier(kv));
  if (rank == 0) CHECK(MXKVStoreSendCommmandToServers(kv, 0, "set updater"));
  CHECK(MXKVStoreBarrier(kv));
  /* Each push is applied at once: this worker sees its own pushes right after them. */
  for (int i = 1; i <= 3; i++) {
    CHECK(MXKVStorePushEx(kv, 1, &keys[1], &one, 0));
    CHECK(MXKVStorePullEx(kv, 1, &keys[1], &out, 0));
    float v[4];
    CHECK(MXNDArraySyncCopyToCPU(out, v, 4));
    EXPECT(v[0] >= 20 + i && v[0] <= 20 + i + 3 * (nw - 1));
  }
  CHECK(MXKVStoreBarrier(kv));
  CHECK(MXKVStorePullEx(kv, 1, &keys[1], &out, 0));
  float v[4];
  CHECK(MXNDArraySyncCopyToCPU(out, v, 4));
  for (int i = 0; i < 4; i++) EXPECT(v[i] == 20 + 3 * nw);
  CHECK(MXKVStorePullEx(kv, 1, &keys[0], &out, 0));
  CHECK(MXNDArraySyncCopyToCPU(out, v, 4));
  EXPECT(v[0] == 10);
  if (notify) {
    CHECK(MXNotifyShutdown());
    CHECK(MXNotifyShutdown());
  } else {
    CHECK(MXKVStoreFree(kv));
  }
  printf("worker %d ok\n", rank);
  return 0;
}
