/* Differential test: Broadcast of a row_sparse value stores it row_sparse, as Init does and
 * as MXNet does, so a later PullRowSparse of the key works; dense outputs of the broadcast
 * receive the densified value. Both for int keys and string keys, local and device. */
#include "common.h"

#define ROWS 5
#define COLS 2

/* A (ROWS, COLS) row_sparse float32 array holding rows `ids` = `vals`. */
static NDArrayHandle rsp(uint32_t nnr, const int64_t *ids, const float *vals) {
  return rsp_f32_on(ROWS, COLS, nnr, ids, vals, 0);
}

static NDArrayHandle empty_rsp(void) {
  uint32_t shape[2] = {ROWS, COLS}, aux_ndim = 1, aux_shape = 0;
  int aux_type = DT_I64;
  NDArrayHandle h;
  CHECK(MXNDArrayCreateSparseEx(1, shape, 2, DEV_CPU, 0, 0, DT_F32, 1, &aux_type, &aux_ndim, &aux_shape, &h));
  return h;
}

static void show_rsp(const char *label, NDArrayHandle h) {
  int st, nd;
  const int *dims;
  CHECK(MXNDArrayGetStorageType(h, &st));
  NDArrayHandle a, d;
  CHECK(MXNDArrayGetAuxNDArray(h, 0, &a));
  CHECK(MXNDArrayGetDataNDArray(h, &d));
  CHECK(MXNDArrayGetShapeEx(a, &nd, &dims));
  int n = dims[0];
  int64_t ids[ROWS];
  float v[ROWS * COLS];
  if (n > 0) {
    CHECK(MXNDArraySyncCopyToCPU(a, ids, (size_t)n));
    CHECK(MXNDArraySyncCopyToCPU(d, v, (size_t)n * COLS));
  }
  printf("%s: stype=%d rows", label, st);
  for (int i = 0; i < n; i++) printf(" %lld:[%g %g]", (long long)ids[i], v[COLS * i], v[COLS * i + 1]);
  printf("\n");
  CHECK(MXNDArrayFree(a));
  CHECK(MXNDArrayFree(d));
}

static void show_dense(const char *label, NDArrayHandle h) {
  float v[ROWS * COLS];
  CHECK(MXNDArraySyncCopyToCPU(h, v, ROWS * COLS));
  printf("%s: dense", label);
  for (int i = 0; i < ROWS * COLS; i++) printf(" %g", v[i]);
  printf("\n");
}

static void run(const char *type, int string_keys) {
  printf("== %s %s keys\n", type, string_keys ? "string" : "int");
  KVStoreHandle kv;
  CHECK(MXKVStoreCreate(type, &kv));
  const int64_t ids[2] = {1, 3};
  const float vals[4] = {1, 2, 3, 4};
  NDArrayHandle value = rsp(2, ids, vals);
  float minus[ROWS * COLS];
  for (int i = 0; i < ROWS * COLS; i++) minus[i] = -1;
  NDArrayHandle out = f32_matrix(ROWS, COLS, minus, 0);
  int k = 7;
  const char *sk = "w";
  if (string_keys) CHECK(MXKVStoreBroadcastEx(kv, 1, &sk, 1, &sk, &value, &out, 0));
  else CHECK(MXKVStoreBroadcast(kv, 1, &k, 1, &k, &value, &out, 0));
  show_dense("broadcast into a dense output", out);
  /* the key is row_sparse: PullRowSparse answers the rows asked for */
  uint32_t n = 3;
  NDArrayHandle rid, pulled = empty_rsp();
  CHECK(MXNDArrayCreateEx(&n, 1, DEV_CPU, 0, 0, DT_I64, &rid));
  CHECK(MXNDArraySyncCopyFromCPU(rid, (int64_t[]){0, 3, 4}, 3));
  int rc = string_keys ? MXKVStorePullRowSparseEx(kv, 1, &sk, &pulled, &rid, 0) : MXKVStorePullRowSparse(kv, 1, &k, &pulled, &rid, 0);
  printf("row_sparse_pull after broadcast: rc=%d\n", rc);
  if (rc == 0) show_rsp("row_sparse_pull rows 0 3 4", pulled);
  else printf("error: %s\n", MXGetLastError());
  /* a push of row_sparse values keeps it row_sparse: the union of rows */
  NDArrayHandle more = rsp(1, (int64_t[]){0}, (float[]){10, 20});
  if (string_keys) CHECK(MXKVStorePushEx(kv, 1, &sk, &more, 0));
  else CHECK(MXKVStorePush(kv, 1, &k, &more, 0));
  if (string_keys) CHECK(MXKVStorePullEx(kv, 1, &sk, &out, 0));
  else CHECK(MXKVStorePull(kv, 1, &k, &out, 0));
  show_dense("after a row_sparse push, dense pull", out);
  CHECK(MXKVStoreFree(kv));
  NDArrayHandle all[] = {value, out, rid, pulled, more};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) CHECK(MXNDArrayFree(all[i]));
}

int main(void) {
  run("local", 0);
  run("local", 1);
  run("device", 0);
  run("device", 1);
  CHECK(MXNDArrayWaitAll());
  printf("done\n");
  return 0;
}
