/* Differential test of row_sparse values in the store, after MXNet's own tests: pushes make
 * the union of rows (also inside a push-pull), dense pulls densify, row_sparse_pull returns
 * the sorted unique rows asked for (zeros where absent; none from a key without rows),
 * updaters receive row_sparse handles, plain pulls skip sparse outputs, and the errors of a
 * row_sparse_pull. */
#include "common.h"
#include <stdint.h>

#define ROWS 6
#define COLS 2

/* A (ROWS, COLS) row_sparse float32 array with rows `ids` holding `vals`. */
static NDArrayHandle rsp(int nnr, const int64_t *ids, const float *vals, int dev) {
  return rsp_f32_on(ROWS, COLS, (uint32_t)nnr, ids, vals, dev);
}

static NDArrayHandle dense(float v) {
  float d[ROWS * COLS];
  for (int i = 0; i < ROWS * COLS; i++) d[i] = v;
  return f32_matrix(ROWS, COLS, d, 0);
}

static void show(const char *label, NDArrayHandle h) {
  int st;
  CHECK(MXNDArrayGetStorageType(h, &st));
  printf("%s: stype=%d", label, st);
  if (st == 1) {
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
    printf(" rows");
    for (int i = 0; i < n; i++) printf(" %lld:[%g %g]", (long long)ids[i], v[COLS * i], v[COLS * i + 1]);
    CHECK(MXNDArrayFree(a));
    CHECK(MXNDArrayFree(d));
  } else {
    float v[ROWS * COLS];
    CHECK(MXNDArraySyncCopyToCPU(h, v, ROWS * COLS));
    printf(" dense");
    for (int i = 0; i < ROWS * COLS; i++) printf(" %g", v[i]);
  }
  printf("\n");
}

static void log_updater(int key, NDArrayHandle recv, NDArrayHandle local, void *user) {
  (void)user;
  int rs, ls;
  CHECK(MXNDArrayGetStorageType(recv, &rs));
  CHECK(MXNDArrayGetStorageType(local, &ls));
  printf("  updater key=%d recv stype=%d local stype=%d\n", key, rs, ls);
  show("  updater recv", recv);
  CHECK(MXNDArrayFree(recv));
  CHECK(MXNDArrayFree(local));
}

static void run(const char *type) {
  printf("== %s\n", type);
  KVStoreHandle kv;
  CHECK(MXKVStoreCreate(type, &kv));
  const int64_t all[ROWS] = {0, 1, 2, 3, 4, 5};
  const float ones[ROWS * COLS] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  /* a dense key pushed one row_sparse value becomes row_sparse; dense pulls densify */
  const char *a = "a", *e = "e";
  NDArrayHandle z = dense(0), out = dense(-1);
  CHECK(MXKVStoreInitEx(kv, 1, &a, &z));
  NDArrayHandle one = rsp(ROWS, all, ones, 0);
  CHECK(MXKVStorePushEx(kv, 1, &a, &one, 0));
  CHECK(MXKVStorePullEx(kv, 1, &a, &out, 0));
  show("dense key pushed row_sparse ones, dense pull", out);
  /* the same in one push-pull: the pull reads the row_sparse value the push leaves */
  const char *f = "f";
  NDArrayHandle z2 = dense(0), out2 = dense(-1);
  CHECK(MXKVStoreInitEx(kv, 1, &f, &z2));
  CHECK(MXKVStorePushPullEx(kv, 1, &f, 1, &f, &one, &out2, 0));
  show("dense key push-pulled row_sparse ones, dense output", out2);
  /* row_sparse_pull from a key initialised with row_sparse ones, float32 (2,2) row ids */
  CHECK(MXKVStoreInitEx(kv, 1, &e, &one));
  float rid_vals[3][4] = {{3, 0, 3, 5}, {1, 1, 1, 1}, {4, 2, 0, 2}};
  NDArrayHandle rids[4], outs[4];
  const char *e4[4] = {"e", "e", "e", "e"};
  for (int i = 0; i < 3; i++) {
    uint32_t shape[2] = {2, 2};
    CHECK(MXNDArrayCreateEx(shape, 2, DEV_CPU, 0, 0, DT_F32, &rids[i]));
    CHECK(MXNDArraySyncCopyFromCPU(rids[i], rid_vals[i], 4));
    outs[i] = rsp(0, NULL, NULL, i);
  }
  uint32_t n2 = 2;
  CHECK(MXNDArrayCreateEx(&n2, 1, DEV_CPU, 0, 0, DT_I32, &rids[3]));
  CHECK(MXNDArraySyncCopyFromCPU(rids[3], (int32_t[]){5, 0}, 2));
  outs[3] = rsp(0, NULL, NULL, 3);
  CHECK(MXKVStorePullRowSparseEx(kv, 4, e4, outs, rids, 0));
  for (int i = 0; i < 4; i++) show("row_sparse_pull 'e'", outs[i]);
  /* the sparse aggregator: four row_sparse values from cpu(0..3), union of rows */
  const char *b = "b", *b4[4] = {"b", "b", "b", "b"};
  NDArrayHandle empty = rsp(0, NULL, NULL, 0);
  CHECK(MXKVStoreInitEx(kv, 1, &b, &empty));
  int64_t ids[4][2] = {{0, 2}, {2, 5}, {1, 5}, {0, 4}};
  float vals[4][4] = {{1, 2, 3, 4}, {10, 20, 30, 40}, {100, 200, 300, 400}, {1000, 2000, 3000, 4000}};
  NDArrayHandle parts[4];
  for (int i = 0; i < 4; i++) parts[i] = rsp(2, ids[i], vals[i], i);
  CHECK(MXKVStorePushEx(kv, 4, b4, parts, 0));
  CHECK(MXKVStorePullWithSparseEx(kv, 4, b4, parts, 0, false));
  for (int i = 0; i < 4; i++) show("aggregated 'b' pulled into the inputs", parts[i]);
  CHECK(MXKVStorePullEx(kv, 1, &b, &out, 0));
  show("aggregated 'b' dense pull", out);
  /* a plain pull skips sparse outputs, even of an unknown dense key */
  NDArrayHandle two = rsp(1, all, (float[]){2, 2}, 0);
  CHECK(MXKVStorePullEx(kv, 1, &a, &two, 0));
  show("plain pull into a row_sparse output is skipped", two);
  /* a dense key pulled into a row_sparse output with ignore_sparse = false */
  const char *d = "d";
  NDArrayHandle some = f32_matrix(ROWS, COLS, (float[]){0, 0, 5, 0, 0, 0, 0, 0, 0, 7, 0, 0}, 0);
  CHECK(MXKVStoreInitEx(kv, 1, &d, &some));
  CHECK(MXKVStorePullWithSparseEx(kv, 1, &d, &two, 0, false));
  show("dense key into row_sparse output", two);
  /* row_sparse_pull from a key without rows: no rows (not zero rows), as from no row ids */
  const char *g = "g";
  CHECK(MXKVStoreInitEx(kv, 1, &g, &empty));
  NDArrayHandle none_out = rsp(1, all, (float[]){9, 9}, 0);
  CHECK(MXKVStorePullRowSparseEx(kv, 1, &g, &none_out, &rids[0], 0));
  show("row_sparse_pull of a key without rows", none_out);
  CHECK(MXNDArrayFree(none_out));
  /* errors: row_sparse_pull into a dense output, of a dense key, with row_sparse row ids */
  printf("errors: dense output %d, dense key %d, sparse row ids %d\n", MXKVStorePullRowSparseEx(kv, 1, &e, &out, &rids[0], 0),
         MXKVStorePullRowSparseEx(kv, 1, &d, &outs[0], &rids[0], 0), MXKVStorePullRowSparseEx(kv, 1, &e, &outs[0], &two, 0));
  /* an updater receives row_sparse handles */
  CHECK(MXKVStoreSetUpdater(kv, log_updater, NULL));
  NDArrayHandle two_parts[2] = {parts[0], parts[1]};
  const char *b2[2] = {"b", "b"};
  CHECK(MXKVStorePushEx(kv, 2, b2, two_parts, 0));
  CHECK(MXKVStorePushEx(kv, 1, &b, &parts[2], 0));
  CHECK(MXKVStoreFree(kv));
  NDArrayHandle all_h[] = {z, out, z2, out2, one, empty, two, some, rids[0], rids[1], rids[2], rids[3], outs[0], outs[1], outs[2], outs[3],
                           parts[0], parts[1], parts[2], parts[3]};
  for (size_t i = 0; i < sizeof all_h / sizeof all_h[0]; i++) CHECK(MXNDArrayFree(all_h[i]));
}

int main(void) {
  run("local");
  run("device");
  CHECK(MXNDArrayWaitAll());
  printf("done\n");
  return 0;
}
