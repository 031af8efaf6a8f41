/* Distributed differential test of a dist store (argv[1]: dist_sync, the default, or
 * dist_async), run by scripts/dist-diff on the reference's ps-lite stores and on libkvstore's
 * MPI stores; each worker's results are compared by rank, servers' sorted reports as a set.
 * argv[2] "str" runs the same tests with string keys (a store takes one key type).
 * Sync: init takes rank 0's value; without an updater a round of pushes assigns their sum;
 * several values per push are reduced on the worker first; push-pull; several keys per call; broadcast;
 * a key above MXNET_KVSTORE_BIGARRAY_BOUND (sharded over servers); row_sparse pushes and
 * PullRowSparse of row subsets; commands received by a C controller, which installs a
 * server-side updater; float16 keys with multi-precision. Async: the server's updater applies
 * every push; after a barrier every worker pulls the same total. */
#include "dist_common.h"

#define SMALL 6
#define BIG 3001 /* above the bound the runner sets (1000), not a multiple of the server count */
#define ROWS 6
#define COLS 2

static int rank, nworker;
static int string_keys; /* argv[2] == "str": the same tests with string keys "k<N>" */

/* One-key calls on int key k, or on string key "k<k>" in string mode. */
static const char *skey(int k) {
  static char names[8][16];
  static int next;
  char *n = names[next++ % 8];
  snprintf(n, 16, "k%d", k);
  return n;
}

static void kv_init(KVStoreHandle kv, int k, NDArrayHandle v) {
  if (string_keys) {
    const char *s = skey(k);
    CHECK(MXKVStoreInitEx(kv, 1, &s, &v));
  } else {
    CHECK(MXKVStoreInit(kv, 1, &k, &v));
  }
}

/* Pushes (or pulls into) n values of key k in one call. */
static void kv_push_n(KVStoreHandle kv, int k, int n, NDArrayHandle *v) {
  int ks[4] = {k, k, k, k};
  const char *ss[4] = {skey(k), skey(k), skey(k), skey(k)};
  if (string_keys) CHECK(MXKVStorePushEx(kv, (mx_uint)n, ss, v, 0));
  else CHECK(MXKVStorePush(kv, (mx_uint)n, ks, v, 0));
}

static void kv_pull_n(KVStoreHandle kv, int k, int n, NDArrayHandle *v) {
  int ks[4] = {k, k, k, k};
  const char *ss[4] = {skey(k), skey(k), skey(k), skey(k)};
  if (string_keys) CHECK(MXKVStorePullEx(kv, (mx_uint)n, ss, v, 0));
  else CHECK(MXKVStorePull(kv, (mx_uint)n, ks, v, 0));
}

static void kv_push(KVStoreHandle kv, int k, NDArrayHandle v) {
  kv_push_n(kv, k, 1, &v);
}

static void kv_pull(KVStoreHandle kv, int k, NDArrayHandle v) {
  kv_pull_n(kv, k, 1, &v);
}

static void kv_pushpull(KVStoreHandle kv, int k, NDArrayHandle v, NDArrayHandle out) {
  const char *s = skey(k);
  if (string_keys) CHECK(MXKVStorePushPullEx(kv, 1, &s, 1, &s, &v, &out, 0));
  else CHECK(MXKVStorePushPull(kv, 1, &k, 1, &k, &v, &out, 0));
}

static void kv_broadcast(KVStoreHandle kv, int k, NDArrayHandle v, NDArrayHandle out) {
  const char *s = skey(k);
  if (string_keys) CHECK(MXKVStoreBroadcastEx(kv, 1, &s, 1, &s, &v, &out, 0));
  else CHECK(MXKVStoreBroadcast(kv, 1, &k, 1, &k, &v, &out, 0));
}

static void kv_pull_rows(KVStoreHandle kv, int k, NDArrayHandle out, NDArrayHandle ids) {
  const char *s = skey(k);
  if (string_keys) CHECK(MXKVStorePullRowSparseEx(kv, 1, &s, &out, &ids, 0));
  else CHECK(MXKVStorePullRowSparse(kv, 1, &k, &out, &ids, 0));
}

static int kv_pull_sparse(KVStoreHandle kv, int k, NDArrayHandle out) {
  const char *s = skey(k);
  if (string_keys) return MXKVStorePullWithSparseEx(kv, 1, &s, &out, 0, false);
  return MXKVStorePullWithSparse(kv, 1, &k, &out, 0, false);
}

static double ramp(uint32_t i, double r) {
  return (double)(i % 7) + r;
}

/* A (ROWS, COLS) row_sparse float32 array with rows `ids`, row r filled with vals[r]. */
static NDArrayHandle rsp(int nnr, const int64_t *ids, const float *row_vals) {
  float vals[ROWS * COLS];
  for (int r = 0; r < nnr; r++)
    for (int c = 0; c < COLS; c++) vals[r * COLS + c] = row_vals[r] + (float)c / 2;
  return rsp_f32(ROWS, COLS, nnr, ids, vals);
}

static void emit_rsp(const char *label, NDArrayHandle h) {
  int st;
  CHECK(MXNDArrayGetStorageType(h, &st));
  EXPECT(st == 1);
  NDArrayHandle a, d;
  CHECK(MXNDArrayGetAuxNDArray(h, 0, &a));
  CHECK(MXNDArrayGetDataNDArray(h, &d));
  int nd;
  const int *dims;
  CHECK(MXNDArrayGetShapeEx(a, &nd, &dims));
  int n = dims[0];
  int64_t ids[ROWS];
  float v[ROWS * COLS];
  if (n > 0) {
    CHECK(MXNDArraySyncCopyToCPU(a, ids, (size_t)n));
    CHECK(MXNDArraySyncCopyToCPU(d, v, (size_t)n * COLS));
  }
  fprintf(dist_out, "%s: rows", label);
  for (int i = 0; i < n; i++) fprintf(dist_out, " %lld:[%g %g]", (long long)ids[i], v[COLS * i], v[COLS * i + 1]);
  fputc('\n', dist_out);
  fflush(dist_out);
  CHECK(MXNDArrayFree(a));
  CHECK(MXNDArrayFree(d));
}

/* Sum over ranks of (rank + 1). */
static float rank_sum(void) {
  return (float)(nworker * (nworker + 1) / 2);
}

static void sync_without_updater(KVStoreHandle kv) {
  /* init: every rank offers its own value; the store keeps rank 0's */
  NDArrayHandle mine = dense_of(DT_F32, SMALL, 0, constant, 10.0 * (rank + 1)), out = f32_filled(SMALL, -1, 0);
  kv_init(kv, 3, mine);
  kv_pull(kv, 3, out);
  EXPECT(f32_all(out) == 10);
  emit_f32("init key 3 (rank 0's value)", out);
  /* a round of pushes assigns the sum of the round (no updater) */
  for (int round = 1; round <= 3; round++) {
    NDArrayHandle v = dense_of(DT_F32, SMALL, 0, constant, (double)(rank + 1) * round);
    kv_push(kv, 3, v);
    kv_pull(kv, 3, out);
    EXPECT(f32_all(out) == rank_sum() * (float)round);
    char label[64];
    snprintf(label, sizeof label, "push round %d, pull key 3", round);
    emit_f32(label, out);
    CHECK(MXNDArrayFree(v));
  }
  /* two values per push from cpu(0) and cpu(1): reduced on the worker, then summed */
  NDArrayHandle z = f32_filled(SMALL, 0, 0);
  kv_init(kv, 5, z);
  NDArrayHandle two[2] = {dense_of(DT_F32, SMALL, 0, ramp, rank), dense_of(DT_F32, SMALL, 1, constant, 100)};
  kv_push_n(kv, 5, 2, two);
  NDArrayHandle outs2[2] = {f32_filled(SMALL, -1, 0), f32_filled(SMALL, -1, 1)};
  kv_pull_n(kv, 5, 2, outs2);
  emit_f32("two values per push, key 5 into cpu(0)", outs2[0]);
  emit_f32("two values per push, key 5 into cpu(1)", outs2[1]);
  /* a big key, split over the servers */
  NDArrayHandle bz = f32_filled(BIG, 0, 0), bv = dense_of(DT_F32, BIG, 0, ramp, rank), bo = f32_filled(BIG, -1, 0);
  kv_init(kv, 99, bz);
  kv_push(kv, 99, bv);
  kv_pull(kv, 99, bo);
  emit_f32("big key 99 after one round", bo);
  /* push-pull: one round trip, outputs get the round's sum */
  NDArrayHandle pv = dense_of(DT_F32, SMALL, 0, constant, rank + 1), po = f32_filled(SMALL, -1, 0);
  kv_init(kv, 7, z);
  kv_pushpull(kv, 7, pv, po);
  EXPECT(f32_all(po) == rank_sum());
  emit_f32("push-pull key 7", po);
  /* two keys initialised in one call, then pushed in one call */
  NDArrayHandle wi[2] = {dense_of(DT_F32, SMALL, 0, constant, 1 + rank), dense_of(DT_F32, SMALL, 0, constant, 2 + rank)};
  NDArrayHandle wo[2] = {f32_filled(SMALL, -1, 0), f32_filled(SMALL, -1, 0)};
  if (string_keys) {
    const char *w[2] = {"w0", "w1"};
    CHECK(MXKVStoreInitEx(kv, 2, w, wi));
    CHECK(MXKVStorePullEx(kv, 2, w, wo, 0));
    emit_f32("two keys after init, first", wo[0]);
    emit_f32("two keys after init, second", wo[1]);
    CHECK(MXKVStorePushEx(kv, 2, w, wi, 0));
    CHECK(MXKVStorePullEx(kv, 2, w, wo, 0));
  } else {
    int w[2] = {11, 12};
    CHECK(MXKVStoreInit(kv, 2, w, wi));
    CHECK(MXKVStorePull(kv, 2, w, wo, 0));
    emit_f32("two keys after init, first", wo[0]);
    emit_f32("two keys after init, second", wo[1]);
    CHECK(MXKVStorePush(kv, 2, w, wi, 0));
    CHECK(MXKVStorePull(kv, 2, w, wo, 0));
  }
  emit_f32("two keys after a push, first", wo[0]);
  emit_f32("two keys after a push, second", wo[1]);
  /* broadcast: init from rank 0, then pull */
  NDArrayHandle bi = dense_of(DT_F32, SMALL, 0, ramp, 50 + rank), bout = f32_filled(SMALL, -1, 0);
  kv_broadcast(kv, 13, bi, bout);
  emit_f32("broadcast key 13", bout);
  /* row_sparse: each rank pushes rows {rank % ROWS, ROWS - 1}; pulls of row subsets */
  const int64_t all[ROWS] = {0, 1, 2, 3, 4, 5};
  const float ones[ROWS] = {1, 1, 1, 1, 1, 1};
  NDArrayHandle rinit = rsp(ROWS, all, ones);
  kv_init(kv, 9, rinit);
  int64_t my_rows[2] = {rank % ROWS, ROWS - 1};
  if (my_rows[0] == my_rows[1]) my_rows[0] = 0;
  if (my_rows[0] > my_rows[1]) {
    int64_t t = my_rows[0];
    my_rows[0] = my_rows[1];
    my_rows[1] = t;
  }
  float my_vals[2] = {(float)(rank + 1), 10.0f * (rank + 1)};
  NDArrayHandle rpush = rsp(2, my_rows, my_vals);
  uint32_t nids = 4;
  NDArrayHandle ids, rout = rsp(0, NULL, NULL);
  CHECK(MXNDArrayCreateEx(&nids, 1, DEV_CPU, 0, 0, DT_I64, &ids));
  int64_t want[4] = {ROWS - 1, rank % ROWS, 0, ROWS - 1};
  CHECK(MXNDArraySyncCopyFromCPU(ids, want, 4));
  kv_pull_rows(kv, 9, rout, ids);
  emit_rsp("row_sparse key 9 after init, rows {5, rank, 0, 5}", rout);
  kv_push(kv, 9, rpush);
  kv_pull_rows(kv, 9, rout, ids);
  emit_rsp("row_sparse key 9 after a push, rows {5, rank, 0, 5}", rout);
  uint32_t zero = 0;
  NDArrayHandle no_ids;
  CHECK(MXNDArrayCreateEx(&zero, 1, DEV_CPU, 0, 0, DT_I64, &no_ids));
  kv_pull_rows(kv, 9, rout, no_ids);
  emit_rsp("row_sparse key 9, no rows", rout);
  /* a dist pull that does not ignore sparse outputs is refused */
  NDArrayHandle rout2 = rsp(0, NULL, NULL);
  EMIT("pull of a row_sparse key with ignore_sparse=0: %s",
       kv_pull_sparse(kv, 9, rout2) == 0 ? "accepted" : "refused");
  CHECK(MXNDArrayWaitAll());
}

static void sync_with_server_updater(KVStoreHandle kv) {
  CHECK(MXKVStoreBarrier(kv));
  char hello[64];
  snprintf(hello, sizeof hello, "hello from worker %d", rank);
  CHECK(MXKVStoreSendCommmandToServers(kv, 0, hello));
  if (rank == 0) {
    CHECK(MXKVStoreSendCommmandToServers(kv, 0, "updater 2"));
    CHECK(MXKVStoreSendCommmandToServers(kv, 1, "")); /* multi-precision */
  }
  CHECK(MXKVStoreBarrier(kv));
  /* key 3 holds the last round's sum; the updater adds 2 x this round's sum */
  NDArrayHandle out = f32_filled(SMALL, -1, 0);
  for (int round = 1; round <= 2; round++) {
    /* a fresh array per push: MXNet's dist worker pulls into the array last pushed from a CPU */
    NDArrayHandle v = dense_of(DT_F32, SMALL, 0, constant, rank + 1);
    kv_push(kv, 3, v);
    kv_pull(kv, 3, out);
    emit_f32("server updater, key 3", out);
    EXPECT(f32_all(out) == rank_sum() * 3 + 2 * rank_sum() * (float)round);
  }
  /* the big key through the updater */
  NDArrayHandle bv = dense_of(DT_F32, BIG, 0, ramp, rank), bo = f32_filled(BIG, -1, 0);
  kv_push(kv, 99, bv);
  kv_pull(kv, 99, bo);
  emit_f32("server updater, big key 99", bo);
  /* float16 keys: the server keeps float32 master copies and updates those */
  NDArrayHandle h = dense_of(DT_F16, SMALL, 0, constant, 1.5), hb = dense_of(DT_F16, BIG, 0, constant, 0.5);
  kv_init(kv, 4, h);
  kv_init(kv, 100, hb);
  NDArrayHandle ho = dense_of(DT_F16, SMALL, 0, constant, 0), hbo = dense_of(DT_F16, BIG, 0, constant, 0);
  for (int round = 1; round <= 2; round++) {
    NDArrayHandle hp = dense_of(DT_F16, SMALL, 0, constant, 0.25 * (rank + 1));
    NDArrayHandle hbp = dense_of(DT_F16, BIG, 0, ramp, rank);
    kv_push(kv, 4, hp);
    kv_push(kv, 100, hbp);
    kv_pull(kv, 4, ho);
    kv_pull(kv, 100, hbo);
    uint16_t bits[BIG];
    CHECK(MXNDArraySyncCopyToCPU(ho, bits, SMALL));
    fprintf(dist_out, "float16 key 4 round %d:", round);
    for (int i = 0; i < SMALL; i++) fprintf(dist_out, " %04x", bits[i]);
    fputc('\n', dist_out);
    CHECK(MXNDArraySyncCopyToCPU(hbo, bits, BIG));
    uint64_t hash = 1469598103934665603ull;
    for (int i = 0; i < BIG; i++) hash = (hash ^ bits[i]) * 1099511628211ull;
    EMIT("float16 big key 100 round %d: [0]=%04x [1500]=%04x [3000]=%04x fnv=%016llx", round, bits[0], bits[1500],
         bits[3000], (unsigned long long)hash);
  }
  CHECK(MXNDArrayWaitAll());
}

static void async_run(KVStoreHandle kv) {
  /* dist_async applies each push at once through the server's updater, which must be set */
  if (rank == 0) CHECK(MXKVStoreSendCommmandToServers(kv, 0, "updater 1"));
  CHECK(MXKVStoreBarrier(kv));
  NDArrayHandle init = dense_of(DT_F32, SMALL, 0, constant, 10.0 * (rank + 1));
  NDArrayHandle binit = dense_of(DT_F32, BIG, 0, constant, 1);
  kv_init(kv, 3, init);
  kv_init(kv, 99, binit);
  for (int round = 0; round < 3; round++) {
    NDArrayHandle v = dense_of(DT_F32, SMALL, 0, constant, rank + 1), bv = dense_of(DT_F32, BIG, 0, ramp, rank);
    kv_push(kv, 3, v);
    kv_push(kv, 99, bv);
  }
  CHECK(MXNDArrayWaitAll());
  CHECK(MXKVStoreBarrier(kv));
  NDArrayHandle out = f32_filled(SMALL, -1, 0), bo = f32_filled(BIG, -1, 0);
  kv_pull(kv, 3, out);
  EXPECT(f32_all(out) == 10 + 3 * rank_sum());
  emit_f32("async key 3 after 3 pushes per worker", out);
  kv_pull(kv, 99, bo);
  emit_f32("async big key 99 after 3 pushes per worker", bo);
  CHECK(MXNDArrayWaitAll());
  CHECK(MXKVStoreBarrier(kv));
}

int main(int argc, char **argv) {
  const char *type = argc > 1 ? argv[1] : "dist_sync";
  string_keys = argc > 2 && strcmp(argv[2], "str") == 0;
  int is_async = strstr(type, "async") != NULL;
  if (!dist_is_worker()) return run_server_role(type);
  KVStoreHandle kv = dist_create(type);
  worker_header(kv, &rank, &nworker);
  EMIT("%s keys", string_keys ? "string" : "int");
  for (int group = 1; group <= 4; group *= 2) {
    int dead = -1;
    CHECK(MXKVStoreGetNumDeadNode(kv, group, &dead, 60));
    EMIT("dead nodes in group %d: %d", group, dead);
  }
  if (is_async) {
    async_run(kv);
  } else {
    sync_without_updater(kv);
    sync_with_server_updater(kv);
  }
  CHECK(MXKVStoreFree(kv));
  EMIT("done");
  return 0;
}
