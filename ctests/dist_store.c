/* A distributed store under mpirun (MPMD: servers, workers, optionally a scheduler, each with
 * DMLC_ROLE set; DMLC_NUM_WORKER set; MXNET_KVSTORE_BIGARRAY_BOUND=100 so key 9 is split over
 * the servers). argv[1] is the store name (dist_sync, dist_device_sync, ...). Checks roles,
 * ranks, init from worker 0 only, sync sums of small and big keys, a row_sparse key's init
 * (refused on every worker unless it has every row) and PullRowSparse, commands reaching every
 * server's controller, a server updater installed from inside the controller, push-pull,
 * float16 with multi-precision, exact 2-bit residual sequences and the -1 errors.
 * Every process prints nothing on success except its final "ok" line. */
#include "common.h"
#include <math.h>

static int num_workers;
static int controller_calls, hello_calls;
static KVStoreHandle server_kv;

/* stored += recv, on the server; checks the server hands 1-D parts and float32 masters. */
static void add_updater(int key, NDArrayHandle recv, NDArrayHandle local, void *handle) {
  (void)handle;
  int dtype_r, dtype_l;
  CHECK(MXNDArrayGetDType(recv, &dtype_r));
  CHECK(MXNDArrayGetDType(local, &dtype_l));
  EXPECT(dtype_r == dtype_l);
  if (key == 5) EXPECT(dtype_l == DT_F32); /* float16 key: multi-precision master copy */
  uint32_t ndim;
  const uint32_t *shape;
  CHECK(MXNDArrayGetShape(local, &ndim, &shape));
  EXPECT(ndim == 1);
  uint32_t n = shape[0];
  float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
  CHECK(MXNDArraySyncCopyToCPU(recv, a, n));
  CHECK(MXNDArraySyncCopyToCPU(local, b, n));
  for (uint32_t i = 0; i < n; i++) b[i] += a[i];
  CHECK(MXNDArraySyncCopyFromCPU(local, b, n));
  free(a);
  free(b);
  CHECK(MXNDArrayFree(recv));
  CHECK(MXNDArrayFree(local));
}

static void controller(int head, const char *body, void *handle) {
  EXPECT(handle == &server_kv);
  EXPECT(head == 0);
  controller_calls++;
  if (strncmp(body, "hello from ", 11) == 0) hello_calls++;
  if (strcmp(body, "set updater") == 0) CHECK(MXKVStoreSetUpdater(server_kv, add_updater, NULL));
}

static void expect_all(NDArrayHandle h, uint32_t n, float want, int line) {
  float *v = malloc(n * sizeof(float));
  CHECK(MXNDArraySyncCopyToCPU(h, v, n));
  for (uint32_t i = 0; i < n; i++) {
    if (v[i] != want) {
      fprintf(stderr, "line %d: element %u is %g, expected %g\n", line, i, v[i], want);
      exit(1);
    }
  }
  free(v);
}
#define EXPECT_ALL(h, n, want) expect_all(h, n, want, __LINE__)

/* An (8, 2) row_sparse float32 array on cpu(0) (gpu(0) in the -DDEV_CPU=2 build) holding
 * rows ids[0..nnr), every value `value`: values and ids copied in from arrays on the same
 * context. */
static NDArrayHandle rsp_value(int nnr, const int64_t *ids, float value) {
  float vals[16];
  for (int j = 0; j < 2 * nnr; j++) vals[j] = value;
  return rsp_f32_on(8, 2, (uint32_t)nnr, ids, vals, 0);
}

/* n float32 values scale * (i % 997 + 1) on the program's context: every element differs
 * from its neighbours, so a piece answered at the wrong place shows. */
static NDArrayHandle f32_ramp(uint32_t n, float scale) {
  float *v = malloc(n * sizeof(float));
  for (uint32_t i = 0; i < n; i++) v[i] = scale * (float)(i % 997 + 1);
  NDArrayHandle h;
  CHECK(MXNDArrayCreateEx(&n, 1, DEV_CPU, 0, 0, DT_F32, &h));
  CHECK(MXNDArraySyncCopyFromCPU(h, v, n));
  free(v);
  return h;
}

static void expect_ramp(NDArrayHandle h, uint32_t n, float scale, int line) {
  float *v = malloc(n * sizeof(float));
  CHECK(MXNDArraySyncCopyToCPU(h, v, n));
  for (uint32_t i = 0; i < n; i++) {
    if (v[i] != scale * (float)(i % 997 + 1)) {
      fprintf(stderr, "line %d: element %u is %g, expected %g\n", line, i, v[i], scale * (float)(i % 997 + 1));
      exit(1);
    }
  }
  free(v);
}
#define EXPECT_RAMP(h, n, scale) expect_ramp(h, n, scale, __LINE__)

static void pull1(KVStoreHandle kv, int key, NDArrayHandle out) {
  CHECK(MXKVStorePull(kv, 1, &key, &out, 0));
}

int main(int argc, char **argv) {
  const char *name = argc > 1 ? argv[1] : "dist_sync";
  const char *role = getenv("DMLC_ROLE");
  num_workers = atoi(getenv("DMLC_NUM_WORKER"));
  int is_worker, is_server, is_scheduler;
  CHECK(MXKVStoreIsWorkerNode(&is_worker));
  CHECK(MXKVStoreIsServerNode(&is_server));
  CHECK(MXKVStoreIsSchedulerNode(&is_scheduler));
  EXPECT(is_worker == (role == NULL || strcmp(role, "worker") == 0));
  EXPECT(is_server == (role != NULL && strcmp(role, "server") == 0));
  EXPECT(is_scheduler == (role != NULL && strcmp(role, "scheduler") == 0));

  KVStoreHandle kv;
  CHECK(MXKVStoreCreate(name, &kv));
  const char *type;
  CHECK(MXKVStoreGetType(kv, &type));
  EXPECT(strcmp(type, name) == 0);
  int rank, size, dead = -1;
  CHECK(MXKVStoreGetRank(kv, &rank));
  CHECK(MXKVStoreGetGroupSize(kv, &size));
  CHECK(MXKVStoreGetNumDeadNode(kv, 0, &dead, 60));
  EXPECT(size == num_workers);
  EXPECT(dead == 0);

  if (!is_worker) {
    int num_servers = atoi(getenv("DMLC_NUM_SERVER"));
    if (is_server) EXPECT(rank >= 0 && rank < num_servers);
    /* Worker-only calls answer -1 on a server. */
    int key = 1;
    NDArrayHandle v = f32_filled(4, 1, 0);
    EXPECT(MXKVStoreInit(kv, 1, &key, &v) == -1);
    EXPECT(MXKVStoreSendCommmandToServers(kv, 0, "x") == -1);
    server_kv = kv;
    CHECK(MXKVStoreRunServer(kv, controller, &server_kv));
    if (is_server) {
      /* Every worker's hello, then rank 0's "set updater". */
      EXPECT(hello_calls == num_workers);
      EXPECT(controller_calls == num_workers + 1);
    }
    printf("%s %d ok\n", is_server ? "server" : "scheduler", rank);
    CHECK(MXNDArrayFree(v));
    CHECK(MXKVStoreFree(kv));
    return 0;
  }

  EXPECT(rank >= 0 && rank < num_workers);
  EXPECT(MXKVStoreRunServer(kv, controller, NULL) == -1);
  const uint32_t small = 4, big = 1000;
  int ks = 3, kb = 9;
  /* Init from worker 0 only: every worker offers its own value, all see worker 0's. */
  NDArrayHandle init[2] = {f32_filled(small, 100 * (rank + 1), 0), f32_filled(big, 100 * (rank + 1), 0)};
  int keys[2] = {ks, kb};
  CHECK(MXKVStoreInit(kv, 2, keys, init));
  NDArrayHandle os = f32_filled(small, -1, 0), ob = f32_filled(big, -1, 0);
  pull1(kv, ks, os);
  pull1(kv, kb, ob);
  EXPECT_ALL(os, small, 100);
  EXPECT_ALL(ob, big, 100);

  /* Sync sums without an updater: the stored value becomes the sum of every worker's push;
   * two values for one key are summed on the worker first. */
  float sum = 0, sum2 = 0;
  for (int r = 0; r < num_workers; r++) sum += r + 1, sum2 += 2 * (r + 1);
  NDArrayHandle vs = f32_filled(small, rank + 1, 0), vb = f32_filled(big, rank + 1, 0);
  NDArrayHandle vals[2] = {vs, vb};
  CHECK(MXKVStorePush(kv, 2, keys, vals, 0));
  pull1(kv, ks, os);
  pull1(kv, kb, ob);
  EXPECT_ALL(os, small, sum);
  EXPECT_ALL(ob, big, sum);
  int twice[2] = {kb, kb};
  NDArrayHandle vb2[2] = {vb, vb};
  CHECK(MXKVStorePush(kv, 2, twice, vb2, 0));
  pull1(kv, kb, ob);
  EXPECT_ALL(ob, big, sum2);

  /* A 12 MB key: split over the servers, its parts pushed and answered in chunks whose bytes
   * leave from the pushed value's (or the worker's sum's, or the server's chunk's) own memory
   * in a message of two parts. Every element checked: one value per worker, two (summed on
   * the worker first), and a push-pull. */
  int kl = 13;
  const uint32_t large = 3000000;
  NDArrayHandle lzero = f32_ramp(large, 0), lval = f32_ramp(large, (float)(rank + 1)), lout = f32_ramp(large, -1);
  CHECK(MXKVStoreInit(kv, 1, &kl, &lzero));
  int lkeys[2] = {kl, kl};
  NDArrayHandle lvals[2] = {lval, lval};
  for (uint32_t copies = 1; copies <= 2; copies++) {
    CHECK(MXKVStorePush(kv, copies, lkeys, lvals, 0));
    pull1(kv, kl, lout);
    EXPECT_RAMP(lout, large, copies == 1 ? sum : sum2);
  }
  CHECK(MXKVStorePushPull(kv, 1, &kl, 1, &kl, &lval, &lout, 0));
  EXPECT_RAMP(lout, large, sum);
  NDArrayHandle lall[] = {lzero, lval, lout};
  for (size_t i = 0; i < sizeof lall / sizeof lall[0]; i++) CHECK(MXNDArrayFree(lall[i]));

  /* An init of some of a row_sparse key's rows is refused by worker 0 before anything is
   * sent (MXNet's servers keep an init's rows as the key's first rows and answer pulls of the
   * others from past them), and so on every worker: none keeps the key, all go on in step. */
  int kpart = 12;
  const int64_t some_ids[2] = {1, 7};
  NDArrayHandle rsome = rsp_value(2, some_ids, 2.5f);
  EXPECT(MXKVStoreInit(kv, 1, &kpart, &rsome) == -1);
  if (rank == 0) {
    EXPECT(strstr(MXGetLastError(), "has 2 of the 8 rows") != NULL);
    EXPECT(strstr(MXGetLastError(), "inited with every row") != NULL);
  } else {
    EXPECT(strstr(MXGetLastError(), "worker 0 refused this init") != NULL);
  }
  EXPECT(MXKVStorePush(kv, 1, &kpart, &rsome, 0) == -1);
  EXPECT(strstr(MXGetLastError(), "12") != NULL);
  CHECK(MXNDArrayFree(rsome));

  /* row_sparse (on the program's context: GPUs in the -DDEV_CPU=2 build): init from worker
   * 0 with every row (as MXNet's servers expect), then PullRowSparse of rows {7, 1, 7} (the
   * ids on the same context) into an empty row_sparse output: rows 1 and 7. */
  int kr = 11;
  const int64_t init_ids[8] = {0, 1, 2, 3, 4, 5, 6, 7}, want_ids[3] = {7, 1, 7};
  NDArrayHandle rinit = rsp_value(8, init_ids, 1.5f);
  CHECK(MXKVStoreInit(kv, 1, &kr, &rinit));
  NDArrayHandle rout = rsp_value(0, NULL, 0), rid;
  uint32_t nwant = 3;
  CHECK(MXNDArrayCreateEx(&nwant, 1, DEV_CPU, 0, 0, DT_I64, &rid));
  CHECK(MXNDArraySyncCopyFromCPU(rid, want_ids, nwant));
  CHECK(MXKVStorePullRowSparse(kv, 1, &kr, &rout, &rid, 0));
  NDArrayHandle rids, rvals;
  CHECK(MXNDArrayGetAuxNDArray(rout, 0, &rids));
  CHECK(MXNDArrayGetDataNDArray(rout, &rvals));
  int64_t got_ids[2] = {0, 0};
  float got_rows[4] = {-1, -1, -1, -1};
  uint32_t ids_ndim = 0;
  const uint32_t *ids_shape = NULL;
  CHECK(MXNDArrayGetShape(rids, &ids_ndim, &ids_shape));
  EXPECT(ids_ndim == 1 && ids_shape[0] == 2);
  CHECK(MXNDArraySyncCopyToCPU(rids, got_ids, 2));
  CHECK(MXNDArraySyncCopyToCPU(rvals, got_rows, 4));
  EXPECT(got_ids[0] == 1 && got_ids[1] == 7);
  EXPECT(got_rows[0] == 1.5f && got_rows[1] == 1.5f && got_rows[2] == 1.5f && got_rows[3] == 1.5f);
  NDArrayHandle rall[] = {rinit, rout, rid, rids, rvals};
  for (size_t i = 0; i < sizeof rall / sizeof rall[0]; i++) CHECK(MXNDArrayFree(rall[i]));

  /* Commands: every worker's reaches the controller of every server before the call returns. */
  char hello[64];
  snprintf(hello, sizeof hello, "hello from %d", rank);
  CHECK(MXKVStoreSendCommmandToServers(kv, 0, hello));
  CHECK(MXKVStoreBarrier(kv));
  if (rank == 0) CHECK(MXKVStoreSendCommmandToServers(kv, 0, "set updater"));
  /* Float16 with multi-precision: the servers keep float32 masters (checked in the updater). */
  int kh = 5;
  uint32_t hn = 8;
  NDArrayHandle h16, h16out;
  CHECK(MXNDArrayCreateEx(&hn, 1, DEV_CPU, 0, 0, DT_F16, &h16));
  CHECK(MXNDArrayCreateEx(&hn, 1, DEV_CPU, 0, 0, DT_F16, &h16out));
  uint16_t one_h[8], quarter_h[8], got_h[8];
  for (int i = 0; i < 8; i++) one_h[i] = 0x3C00, quarter_h[i] = 0x3400; /* 1.0, 0.25 */
  CHECK(MXNDArraySyncCopyFromCPU(h16, one_h, hn));
  CHECK(MXKVStoreInit(kv, 1, &kh, &h16));
  if (rank == 0) CHECK(MXKVStoreSendCommmandToServers(kv, 1, ""));
  CHECK(MXKVStoreBarrier(kv));

  /* With the updater (stored += sum of the round). */
  float expect_s = sum + sum;
  CHECK(MXKVStorePush(kv, 1, &ks, &vs, 0));
  pull1(kv, ks, os);
  EXPECT_ALL(os, small, expect_s);
  /* Push-pull: one round trip, the output holds the value after this round's update. */
  expect_s += sum;
  CHECK(MXKVStorePushPull(kv, 1, &ks, 1, &ks, &vs, &os, 0));
  EXPECT_ALL(os, small, expect_s);
  /* A key of 240 KB through the updater, split over the servers: each server's part of 64 KiB
   * or more is answered from one copy for all its requests, in two-part messages whose bodies
   * land straight in the output (a pull after a push, then a push-pull). */
  int km = 6;
  const uint32_t medium = 60000;
  NDArrayHandle mi = f32_filled(medium, 100 * (rank + 1), 0), mv = f32_filled(medium, rank + 1, 0);
  NDArrayHandle mo = f32_filled(medium, -1, 0);
  CHECK(MXKVStoreInit(kv, 1, &km, &mi));
  CHECK(MXKVStorePush(kv, 1, &km, &mv, 0));
  pull1(kv, km, mo);
  EXPECT_ALL(mo, medium, 100 + sum);
  CHECK(MXKVStorePushPull(kv, 1, &km, 1, &km, &mv, &mo, 0));
  EXPECT_ALL(mo, medium, 100 + 2 * sum);
  CHECK(MXNDArrayFree(mi));
  CHECK(MXNDArrayFree(mv));
  CHECK(MXNDArrayFree(mo));
  /* Push-pull needs the same keys in both lists. */
  EXPECT(MXKVStorePushPull(kv, 1, &ks, 1, &kb, &vs, &ob, 0) == -1);
  /* Pull with ignore_sparse = 0 is refused on dist stores, as in MXNet. */
  EXPECT(MXKVStorePullWithSparse(kv, 1, &ks, &os, 0, 0) == -1);
  EXPECT(strstr(MXGetLastError(), "ignore_sparse") != NULL);
  /* Uninited keys and wrong shapes answer -1. */
  int unknown = 77;
  EXPECT(MXKVStorePush(kv, 1, &unknown, &vs, 0) == -1);
  EXPECT(MXKVStorePush(kv, 1, &ks, &vb, 0) == -1);

  /* Float16: 8 workers' 0.25 added to a float32 master of 1.0, read back as float16. */
  CHECK(MXNDArraySyncCopyFromCPU(h16, quarter_h, hn));
  CHECK(MXKVStorePush(kv, 1, &kh, &h16, 0));
  pull1(kv, kh, h16out);
  CHECK(MXNDArraySyncCopyToCPU(h16out, got_h, hn));
  /* 1 + 0.25 * num_workers as float16 (exact for small counts). */
  float want_h = 1 + 0.25f * num_workers;
  for (int i = 0; i < 8; i++) {
    uint16_t h = got_h[i];
    float f = ldexpf((float)((h & 0x3FF) | 0x400), ((h >> 10) & 0x1F) - 25);
    EXPECT(f == want_h);
  }

  /* 2-bit compression (threshold 0.5), worker -> server, with per-worker residuals: pushes
   * of 0.3 send 0, 0.5, 0, 0.5, 0.5 (residual 0.3, 0.1, 0.4, 0.2, 0.0) */
  const char *ck[2] = {"type", "threshold"}, *cv[2] = {"2bit", "0.5"};
  CHECK(MXKVStoreSetGradientCompression(kv, 2, ck, cv));
  CHECK(MXKVStoreBarrier(kv));
  EXPECT(MXKVStorePushPull(kv, 1, &kb, 1, &kb, &vb, &ob, 0) == -1);
  EXPECT(strstr(MXGetLastError(), "Compression not supported with PushPull") != NULL);
  NDArrayHandle g = f32_filled(big, 0.3f, 0);
  pull1(kv, kb, ob);
  float *basev = malloc(big * sizeof(float));
  CHECK(MXNDArraySyncCopyToCPU(ob, basev, big));
  float base = basev[0];
  free(basev);
  const float sent[5] = {0, 0.5f, 0, 0.5f, 0.5f};
  float expect_b = base;
  for (int step = 0; step < 5; step++) {
    CHECK(MXKVStorePush(kv, 1, &kb, &g, 0));
    pull1(kv, kb, ob);
    expect_b += sent[step] * num_workers;
    EXPECT_ALL(ob, big, expect_b);
  }

  NDArrayHandle all[] = {init[0], init[1], os, ob, vs, vb, h16, h16out, g};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) CHECK(MXNDArrayFree(all[i]));
  CHECK(MXKVStoreFree(kv));
  printf("worker %d ok\n", rank);
  return 0;
}
