/* Bad input, against libkvstore.so only (MXNet crashes or corrupts its store on most of
 * these): every case must answer -1 with a clear MXGetLastError() and change nothing. */
#include "common.h"
#include <pthread.h>

static int failures = 0;

/* rc must be -1 and the last error must contain `needle`. */
static void expect_fail(const char *what, int rc, const char *needle, int line) {
  const char *err = MXGetLastError();
  if (rc != -1 || err == NULL || strstr(err, needle) == NULL) {
    fprintf(stderr, "line %d: %s: rc=%d error='%s' (wanted -1 and '%s')\n", line, what, rc, err ? err : "(null)", needle);
    failures++;
  }
}
#define FAILS(call, needle) expect_fail(#call, (call), needle, __LINE__)

static void expect_true(const char *what, int cond, int line) {
  if (!cond) {
    fprintf(stderr, "line %d: expected %s\n", line, what);
    failures++;
  }
}
#define TRUE(cond) expect_true(#cond, (cond), __LINE__)

#define N 4
static KVStoreHandle kv;      /* int-key store with key 3 = 7.0 */
static KVStoreHandle skv;     /* string-key store with key "w" = 5.0 */
static NDArrayHandle val;     /* 4 float32 on cpu(0) */

static float stored(int key) {
  NDArrayHandle out = f32_filled(N, -1, 0);
  CHECK(MXKVStorePull(kv, 1, &key, &out, 0));
  float v = f32_uniform(out, N);
  CHECK(MXNDArrayFree(out));
  return v;
}

static float stored_str(const char *key) {
  NDArrayHandle out = f32_filled(N, -1, 0);
  CHECK(MXKVStorePullEx(skv, 1, &key, &out, 0));
  float v = f32_uniform(out, N);
  CHECK(MXNDArrayFree(out));
  return v;
}

static void null_pointers(void) {
  int k = 3, ret = 0, dt = 0;
  const char *sk = "w", *nullstr = NULL;
  const char *type = NULL;
  uint32_t shape = N, ndim = 0;
  const uint32_t *pdata = NULL;
  const int *ipdata = NULL;
  void *data = NULL;
  NDArrayHandle out = NULL;
  float buf[N];
  FAILS(MXKVStoreCreate(NULL, &kv), "type is NULL");
  FAILS(MXKVStoreCreate("local", NULL), "out is NULL");
  FAILS(MXKVStoreFree(NULL), "handle is NULL");
  FAILS(MXKVStoreSetGradientCompression(kv, 1, NULL, NULL), "keys is NULL");
  FAILS(MXKVStoreInit(NULL, 1, &k, &val), "handle is NULL");
  FAILS(MXKVStoreInit(kv, 1, NULL, &val), "keys is NULL");
  FAILS(MXKVStoreInit(kv, 1, &k, NULL), "vals is NULL");
  FAILS(MXKVStoreInitEx(skv, 1, NULL, &val), "keys is NULL");
  FAILS(MXKVStoreInitEx(skv, 1, &nullstr, &val), "keys[0] is NULL");
  FAILS(MXKVStorePush(kv, 1, NULL, &val, 0), "keys is NULL");
  FAILS(MXKVStorePush(kv, 1, &k, NULL, 0), "vals is NULL");
  FAILS(MXKVStorePushEx(skv, 1, &sk, NULL, 0), "vals is NULL");
  FAILS(MXKVStorePull(kv, 1, NULL, &val, 0), "keys is NULL");
  FAILS(MXKVStorePull(kv, 1, &k, NULL, 0), "vals is NULL");
  FAILS(MXKVStorePullEx(skv, 1, NULL, &val, 0), "keys is NULL");
  FAILS(MXKVStorePullWithSparse(kv, 1, &k, NULL, 0, true), "vals is NULL");
  FAILS(MXKVStorePullWithSparseEx(skv, 1, &sk, NULL, 0, false), "vals is NULL");
  FAILS(MXKVStorePullRowSparse(kv, 1, &k, &val, NULL, 0), "row_ids is NULL");
  FAILS(MXKVStorePullRowSparseEx(skv, 1, &sk, NULL, &val, 0), "vals is NULL");
  FAILS(MXKVStoreBroadcast(kv, 1, NULL, 1, &k, &val, &val, 0), "vkeys is NULL");
  FAILS(MXKVStoreBroadcastEx(skv, 1, &sk, 1, &sk, &val, NULL, 0), "outs is NULL");
  FAILS(MXKVStorePushPull(kv, 1, &k, 1, NULL, &val, &val, 0), "okeys is NULL");
  FAILS(MXKVStorePushPullEx(skv, 1, &sk, 1, &sk, NULL, &val, 0), "vals is NULL");
  FAILS(MXKVStoreSetUpdater(NULL, NULL, NULL), "handle is NULL");
  FAILS(MXKVStoreSetUpdaterEx(NULL, NULL, NULL, NULL), "handle is NULL");
  FAILS(MXKVStoreGetType(kv, NULL), "type is NULL");
  FAILS(MXKVStoreGetRank(kv, NULL), "ret is NULL");
  FAILS(MXKVStoreGetGroupSize(kv, NULL), "ret is NULL");
  FAILS(MXKVStoreIsWorkerNode(NULL), "ret is NULL");
  FAILS(MXKVStoreIsServerNode(NULL), "ret is NULL");
  FAILS(MXKVStoreIsSchedulerNode(NULL), "ret is NULL");
  FAILS(MXKVStoreBarrier(NULL), "handle is NULL");
  FAILS(MXKVStoreSetBarrierBeforeExit(NULL, 1), "handle is NULL");
  FAILS(MXKVStoreRunServer(NULL, NULL, NULL), "handle is NULL");
  FAILS(MXKVStoreSendCommmandToServers(kv, 0, NULL), "cmd_body is NULL");
  FAILS(MXKVStoreGetNumDeadNode(kv, 4, NULL, 60), "number is NULL");
  FAILS(MXInitPSEnv(1, NULL, NULL), "keys is NULL");
  FAILS(MXGetVersion(NULL), "out is NULL");
  FAILS(MXGetGPUCount(NULL), "out is NULL");
  const char *env_value = "unchanged";
  FAILS(MXGetEnv(NULL, &env_value), "name is NULL");
  FAILS(MXGetEnv("KVSTORE_BAD_INPUT_VAR", NULL), "value is NULL");
  FAILS(MXSetEnv(NULL, "1"), "name is NULL");
  FAILS(MXSetEnv("A=B", "1"), "invalid environment variable name 'A=B'");
  FAILS(MXSetEnv("", "1"), "invalid environment variable name ''");
  TRUE(strcmp(env_value, "unchanged") == 0);
  CHECK(MXSetEnv("KVSTORE_BAD_INPUT_VAR", "7"));
  CHECK(MXGetEnv("KVSTORE_BAD_INPUT_VAR", &env_value));
  TRUE(env_value && strcmp(env_value, "7") == 0 && strcmp(getenv("KVSTORE_BAD_INPUT_VAR"), "7") == 0);
  CHECK(MXSetEnv("KVSTORE_BAD_INPUT_VAR", NULL));
  CHECK(MXGetEnv("KVSTORE_BAD_INPUT_VAR", &env_value));
  TRUE(env_value == NULL && getenv("KVSTORE_BAD_INPUT_VAR") == NULL);

  FAILS(MXNDArrayCreateNone(NULL), "out is NULL");
  FAILS(MXNDArrayCreate(NULL, 1, DEV_CPU, 0, 0, &out), "shape is NULL");
  FAILS(MXNDArrayCreate(&shape, 1, DEV_CPU, 0, 0, NULL), "out is NULL");
  FAILS(MXNDArrayCreateEx(&shape, 1, DEV_CPU, 0, 0, DT_F32, NULL), "out is NULL");
  FAILS(MXNDArrayCreateSparseEx(1, &shape, 1, DEV_CPU, 0, 0, DT_F32, 1, NULL, NULL, NULL, &out), "aux_type is NULL");
  FAILS(MXNDArrayFree(NULL), "handle is NULL");
  FAILS(MXNDArraySyncCopyFromCPU(val, NULL, N), "data is NULL");
  FAILS(MXNDArraySyncCopyToCPU(val, NULL, N), "data is NULL");
  FAILS(MXNDArraySyncCopyToCPU(NULL, buf, N), "handle is NULL");
  FAILS(MXNDArraySyncCopyFromNDArray(NULL, val, -1), "handle_dst is NULL");
  FAILS(MXNDArraySyncCopyFromNDArray(val, NULL, -1), "handle_src is NULL");
  FAILS(MXNDArrayWaitToRead(NULL), "handle is NULL");
  FAILS(MXNDArrayWaitToWrite(NULL), "handle is NULL");
  FAILS(MXNDArrayGetShape(val, NULL, &pdata), "out_dim is NULL");
  FAILS(MXNDArrayGetShape(val, &ndim, NULL), "out_pdata is NULL");
  FAILS(MXNDArrayGetShapeEx(val, &ret, NULL), "out_pdata is NULL");
  FAILS(MXNDArrayGetShapeEx(NULL, &ret, &ipdata), "handle is NULL");
  FAILS(MXNDArrayGetDType(val, NULL), "out_dtype is NULL");
  FAILS(MXNDArrayGetContext(val, NULL, &dt), "out_dev_type is NULL");
  FAILS(MXNDArrayGetStorageType(val, NULL), "out_storage_type is NULL");
  FAILS(MXNDArrayGetData(val, NULL), "out_pdata is NULL");
  FAILS(MXNDArrayGetData(NULL, &data), "handle is NULL");
  FAILS(MXNDArrayGetAuxType(val, 0, NULL), "out_type is NULL");
  FAILS(MXNDArrayGetAuxNDArray(val, 0, NULL), "out is NULL");
  FAILS(MXNDArrayGetDataNDArray(val, NULL), "out is NULL");
  FAILS(MXNDArraySlice(val, 0, 1, NULL), "out is NULL");
  FAILS(MXNDArrayAt(val, 0, NULL), "out is NULL");
  FAILS(MXNDArrayReshape(val, 1, NULL, &out), "dims is NULL");
  (void)type;
  TRUE(stored(3) == 7 && stored_str("w") == 5);
}

static void stale_and_wrong_handles(void) {
  int k = 3, r = 12345;
  KVStoreHandle gone;
  CHECK(MXKVStoreCreate("local", &gone));
  CHECK(MXKVStoreFree(gone));
  FAILS(MXKVStoreGetRank(gone, &r), "already freed");
  TRUE(r == 12345); /* out-parameters are written only on success */
  FAILS(MXKVStorePush(gone, 1, &k, &val, 0), "already freed");
  FAILS(MXKVStoreFree(gone), "already freed");
  NDArrayHandle freed = f32_filled(N, 1, 0);
  CHECK(MXNDArrayFree(freed));
  FAILS(MXNDArrayFree(freed), "already freed");
  FAILS(MXKVStorePush(kv, 1, &k, &freed, 0), "vals[0]");
  FAILS(MXKVStorePull(kv, 1, &k, &freed, 0), "already freed");
  int dt = 777;
  FAILS(MXNDArrayGetDType(freed, &dt), "already freed");
  TRUE(dt == 777);
  int ndim = 555;
  const int *dims = (const int *)&ndim;
  FAILS(MXNDArrayGetShapeEx(freed, &ndim, &dims), "already freed");
  TRUE(ndim == 555 && dims == (const int *)&ndim);
  /* the wrong kind of handle, and random memory */
  FAILS(MXKVStorePush(kv, 1, &k, (NDArrayHandle *)&kv, 0), "is a KVStoreHandle, not an NDArrayHandle");
  FAILS(MXKVStorePush(val, 1, &k, &val, 0), "is an NDArrayHandle, not a KVStoreHandle");
  char junk[64];
  memset(junk, 0xAB, sizeof junk);
  FAILS(MXKVStoreGetRank((KVStoreHandle)junk, &r), "not a live KVStoreHandle");
  FAILS(MXNDArrayGetDType((NDArrayHandle)(junk + 8), &dt), "not a live NDArrayHandle");
  NDArrayHandle empty;
  CHECK(MXNDArrayCreateNone(&empty));
  FAILS(MXKVStorePush(kv, 1, &k, &empty, 0), "empty array");
  CHECK(MXNDArrayFree(empty));
  TRUE(stored(3) == 7);
}

static void store_semantics(void) {
  int k = 3, unknown = 42, two[2] = {3, 3};
  /* wrong shape or dtype: refused, value kept (MXNet silently replaces it) */
  NDArrayHandle small = f32_filled(N - 1, 100, 0);
  FAILS(MXKVStorePush(kv, 1, &k, &small, 0), "shape mismatch for key 3");
  NDArrayHandle pair[2] = {val, small};
  FAILS(MXKVStorePush(kv, 2, two, pair, 0), "shape mismatch");
  FAILS(MXKVStorePull(kv, 1, &k, &small, 0), "shape mismatch");
  uint32_t n = N;
  NDArrayHandle f64;
  CHECK(MXNDArrayCreateEx(&n, 1, DEV_CPU, 0, 0, DT_F64, &f64));
  FAILS(MXKVStorePush(kv, 1, &k, &f64, 0), "dtype mismatch for key 3");
  TRUE(stored(3) == 7);
  /* a failing call changes nothing, not even its valid keys */
  int mixed[2] = {3, 42};
  NDArrayHandle hundred = f32_filled(N, 100, 0);
  NDArrayHandle both[2] = {hundred, hundred};
  FAILS(MXKVStorePush(kv, 2, mixed, both, 0), "key 42 has not been inited");
  TRUE(stored(3) == 7);
  /* uninitialised keys: refused, and still initialisable (MXNet leaves a phantom entry) */
  FAILS(MXKVStorePull(kv, 1, &unknown, &hundred, 0), "key 42 has not been inited");
  FAILS(MXKVStorePushPull(kv, 1, &unknown, 1, &unknown, &hundred, &hundred, 0), "has not been inited");
  CHECK(MXKVStoreInit(kv, 1, &unknown, &hundred));
  TRUE(stored(42) == 100);
  /* duplicates */
  FAILS(MXKVStoreInit(kv, 1, &k, &val), "duplicate init of key 3");
  int dup[2] = {50, 50};
  FAILS(MXKVStoreInit(kv, 2, dup, both), "duplicate init of key 50");
  FAILS(MXKVStorePull(kv, 1, &dup[0], &hundred, 0), "key 50 has not been inited");
  /* mixed key types, both ways */
  const char *w = "w", *nokey = "nokey";
  FAILS(MXKVStorePushEx(kv, 1, &w, &val, 0), "Mixed key types");
  FAILS(MXKVStoreInit(skv, 1, &k, &val), "Mixed key types");
  FAILS(MXKVStorePullEx(skv, 1, &nokey, &val, 0), "key nokey doesn't exist");
  FAILS(MXKVStoreInitEx(skv, 1, &w, &val), "duplicate init of key w");
  TRUE(stored_str("w") == 5);
  /* bool values cannot be summed (MXNet fails later with "Unknown type enum 7") */
  NDArrayHandle b;
  CHECK(MXNDArrayCreateEx(&n, 1, DEV_CPU, 0, 0, DT_BOOL, &b));
  int bk = 60, bkeys[2] = {60, 60};
  CHECK(MXKVStoreInit(kv, 1, &bk, &b));
  NDArrayHandle bb[2] = {b, b};
  FAILS(MXKVStorePush(kv, 2, bkeys, bb, 0), "bool");
  CHECK(MXKVStorePush(kv, 1, &bk, &b, 0));
  /* row_sparse_pull into a dense output, of a dense key */
  FAILS(MXKVStorePullRowSparse(kv, 1, &k, &val, &val, 0), "Expected row_sparse storage type for row_sparse_pull values");
  uint32_t rs_shape[1] = {N}, aux_ndim = 1, aux_len = 0;
  int aux_type = DT_I64;
  NDArrayHandle rs;
  CHECK(MXNDArrayCreateSparseEx(1, rs_shape, 1, DEV_CPU, 0, 0, DT_F32, 1, &aux_type, &aux_ndim, &aux_len, &rs));
  FAILS(MXKVStorePullRowSparse(kv, 1, &k, &rs, &val, 0), "PullRowSparse expects row_sparse src");
  FAILS(MXKVStorePullRowSparse(kv, 1, &k, &rs, &rs, 0), "Expected default storage type for row_sparse_pull rowids");
  /* csr values are not supported in the store */
  uint32_t csr_shape[2] = {2, 2}, csr_ndims[2] = {1, 1}, csr_aux[2] = {3, 0};
  int csr_types[2] = {DT_I64, DT_I64};
  NDArrayHandle csr;
  CHECK(MXNDArrayCreateSparseEx(2, csr_shape, 2, DEV_CPU, 0, 0, DT_F32, 2, csr_types, csr_ndims, csr_aux, &csr));
  int ck = 70;
  FAILS(MXKVStoreInit(kv, 1, &ck, &csr), "csr");
  FAILS(MXKVStorePush(kv, 1, &k, &csr, 0), "Unexpected storage type detected during kvstore push: csr");
  /* a row_sparse value whose row ids and rows of values disagree */
  NDArrayHandle two_rows = f32_filled(2, 1, 0), bad_rs, three_ids;
  uint32_t rs2[2] = {N, 1}, three = 3;
  CHECK(MXNDArrayCreateSparseEx(1, rs2, 2, DEV_CPU, 0, 0, DT_F32, 1, &aux_type, &aux_ndim, &aux_len, &bad_rs));
  NDArrayHandle two_by_one;
  CHECK(MXNDArrayReshape(two_rows, 2, (int[]){2, 1}, &two_by_one));
  CHECK(MXNDArraySyncCopyFromNDArray(bad_rs, two_by_one, -1));
  CHECK(MXNDArrayCreateEx(&three, 1, DEV_CPU, 0, 0, DT_I64, &three_ids));
  CHECK(MXNDArraySyncCopyFromCPU(three_ids, (int64_t[]){0, 1, 2}, 3));
  CHECK(MXNDArraySyncCopyFromNDArray(bad_rs, three_ids, 0));
  int rk = 71;
  FAILS(MXKVStoreInit(kv, 1, &rk, &bad_rs), "inconsistent row_sparse array: 3 row ids for 2 rows");
  NDArrayHandle all_bad[] = {two_rows, bad_rs, three_ids, two_by_one};
  for (size_t i = 0; i < 4; i++) CHECK(MXNDArrayFree(all_bad[i]));
  CHECK(MXNDArrayFree(rs));
  CHECK(MXNDArrayFree(csr));
  TRUE(stored(3) == 7);
  NDArrayHandle all[] = {small, f64, hundred, b};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) CHECK(MXNDArrayFree(all[i]));
}

static void array_arguments(void) {
  uint32_t shape[2] = {2, 2};
  NDArrayHandle out = (NDArrayHandle)0x1234;
  FAILS(MXNDArrayCreateEx(shape, 2, DEV_CPU, 0, 0, 99, &out), "unknown dtype code 99");
  FAILS(MXNDArrayCreateEx(shape, 2, DEV_CPU, 0, 0, 9, &out), "uint16");
  FAILS(MXNDArrayCreateEx(shape, 2, 7, 0, 0, DT_F32, &out), "unknown device type 7");
  FAILS(MXNDArrayCreateEx(shape, 2, DEV_GPU, 0, 0, DT_F32, &out), "gpu(0)");
  FAILS(MXNDArrayCreateEx(shape, 2, DEV_CPU, -1, 0, DT_F32, &out), "negative");
  uint32_t huge[3] = {65536, 65536, 2};
  FAILS(MXNDArrayCreateEx(huge, 3, DEV_CPU, 0, 0, DT_F32, &out), "elements");
  TRUE(out == (NDArrayHandle)0x1234);
  float buf[N + 1];
  FAILS(MXNDArraySyncCopyFromCPU(val, buf, N + 1), "memory size mismatch");
  FAILS(MXNDArraySyncCopyToCPU(val, buf, N - 1), "memory size mismatch");
  NDArrayHandle view;
  FAILS(MXNDArraySlice(val, 2, 9, &view), "out of range");
  FAILS(MXNDArrayReshape(val, 1, (int[]){5}, &view), "sizes differ");
  FAILS(MXNDArrayGetAuxType(val, 0, (int[]){0}), "aux index 0 is out of range");
  const char *dist[] = {"dist_sync", "dist_async", "dist_device_sync"};
  for (int i = 0; i < 3; i++) FAILS(MXKVStoreCreate(dist[i], &view), "distributed stores need an MPI job");
  const char *gk[1] = {"type"}, *gv[1] = {"3bit"}, *tk[2] = {"type", "threshold"}, *tv[2] = {"2bit", "-1"};
  FAILS(MXKVStoreSetGradientCompression(kv, 1, gk, gv), "Unknown type for gradient compression 3bit");
  FAILS(MXKVStoreSetGradientCompression(kv, 2, tk, tv), "threshold must be greater than 0");
  FAILS(MXKVStoreSetGradientCompression(kv, 1, (const char *[]){"threshold"}, (const char *[]){"0.5"}), "type");
  FAILS(MXKVStoreSetGradientCompression(kv, 2, (const char *[]){"type", "treshold"}, (const char *[]){"2bit", "0.5"}),
        "unknown gradient compression parameter 'treshold'");
  /* compression: float32 only (MXNet reinterprets other dtypes as float) */
  KVStoreHandle dev;
  CHECK(MXKVStoreCreate("device", &dev));
  const char *ck[2] = {"type", "threshold"}, *cv[2] = {"2bit", "0.5"};
  CHECK(MXKVStoreSetGradientCompression(dev, 2, ck, cv));
  uint32_t four = 4;
  NDArrayHandle f64;
  CHECK(MXNDArrayCreateEx(&four, 1, DEV_CPU, 0, 0, DT_F64, &f64));
  int dk = 1;
  CHECK(MXKVStoreInit(dev, 1, &dk, &f64));
  FAILS(MXKVStorePush(dev, 1, &dk, &f64, 0), "only supported for float32");
  CHECK(MXNDArrayFree(f64));
  CHECK(MXKVStoreFree(dev));
  /* the message names the call */
  int k = 99;
  FAILS(MXKVStorePull(kv, 1, &k, &val, 0), "MXKVStorePull: key 99");
}

/* --- improvements over MXNet that are not errors -------------------------------------- */

static void adding_updater(int key, NDArrayHandle recv, NDArrayHandle local, void *user) {
  (void)key;
  (void)user;
  /* raw data access right away: the store hands over finished inputs */
  float *r = NULL, l[N];
  CHECK(MXNDArrayGetData(recv, (void **)&r));
  CHECK(MXNDArraySyncCopyToCPU(local, l, N));
  for (int i = 0; i < N; i++) l[i] += r[i];
  CHECK(MXNDArraySyncCopyFromCPU(local, l, N));
  CHECK(MXNDArrayFree(recv));
  CHECK(MXNDArrayFree(local));
}

/* A compressed device store whose value count per key grows: new positions get fresh
 * residuals (MXNet overruns its per-position buffers). */
static void compression_with_growing_value_counts(void) {
  KVStoreHandle dev;
  CHECK(MXKVStoreCreate("device", &dev));
  const char *ck[2] = {"type", "threshold"}, *cv[2] = {"2bit", "0.5"};
  CHECK(MXKVStoreSetGradientCompression(dev, 2, ck, cv));
  int k = 1, keys4[4] = {1, 1, 1, 1};
  NDArrayHandle zero = f32_filled(N, 0, 0), out = f32_filled(N, 0, 0), g[4];
  for (int d = 0; d < 4; d++) g[d] = f32_filled(N, 0.3f, d);
  CHECK(MXKVStoreInit(dev, 1, &k, &zero));
  CHECK(MXKVStorePush(dev, 2, keys4, g, 0)); /* residuals 0.3 0.3: nothing sent */
  CHECK(MXKVStorePull(dev, 1, &k, &out, 0));
  TRUE(f32_uniform(out, N) == 0);
  CHECK(MXKVStorePush(dev, 4, keys4, g, 0)); /* 0.6 0.6 0.3 0.3: two halves sent */
  CHECK(MXKVStorePull(dev, 1, &k, &out, 0));
  TRUE(f32_uniform(out, N) == 1);
  for (int d = 0; d < 4; d++) CHECK(MXNDArrayFree(g[d]));
  CHECK(MXNDArrayFree(zero));
  CHECK(MXNDArrayFree(out));
  CHECK(MXKVStoreFree(dev));
}

static void improvements(void) {
  KVStoreHandle s;
  CHECK(MXKVStoreCreate("local", &s));
  int k = 1, keys4[4] = {1, 1, 1, 1};
  NDArrayHandle zero = f32_filled(N, 0, 0), out = f32_filled(N, 0, 0), v[4];
  for (int d = 0; d < 4; d++) v[d] = f32_filled(N, (float)(d + 1), d);
  CHECK(MXKVStoreInit(s, 1, &k, &zero));
  /* the number of values per key may vary between pushes (MXNet 1.9 segfaults) */
  int counts[5] = {4, 2, 3, 1, 4}, sums[5] = {10, 3, 6, 1, 10};
  for (int i = 0; i < 5; i++) {
    CHECK(MXKVStorePush(s, (uint32_t)counts[i], keys4, v, 0));
    CHECK(MXKVStorePull(s, 1, &k, &out, 0));
    TRUE(f32_uniform(out, N) == (float)sums[i]);
  }
  /* assignment copies: a later write to the pushed array does not reach the store */
  CHECK(MXKVStorePush(s, 1, &k, &v[3], 0));
  CHECK(MXNDArraySyncCopyFromCPU(v[3], (float[]){0, 0, 0, 0}, N));
  CHECK(MXKVStorePull(s, 1, &k, &out, 0));
  TRUE(f32_uniform(out, N) == 4);
  CHECK(MXNDArraySyncCopyFromCPU(v[3], (float[]){4, 4, 4, 4}, N));
  /* an updater reading raw data, then a NULL updater resets to assignment */
  CHECK(MXKVStoreSetUpdater(s, adding_updater, NULL));
  CHECK(MXKVStorePush(s, 4, keys4, v, 0));
  CHECK(MXKVStorePull(s, 1, &k, &out, 0));
  TRUE(f32_uniform(out, N) == 14);
  CHECK(MXKVStoreSetUpdater(s, NULL, NULL));
  CHECK(MXKVStorePush(s, 1, &k, &v[1], 0));
  CHECK(MXKVStorePull(s, 1, &k, &out, 0));
  TRUE(f32_uniform(out, N) == 2);
  /* num == 0 is a no-op, with NULL arrays */
  CHECK(MXKVStoreInit(s, 0, NULL, NULL));
  CHECK(MXKVStorePush(s, 0, NULL, NULL, 0));
  CHECK(MXKVStorePull(s, 0, NULL, NULL, 0));
  CHECK(MXKVStorePushEx(s, 0, NULL, NULL, 0));
  CHECK(MXKVStorePushPull(s, 0, NULL, 0, NULL, NULL, NULL, 0));
  CHECK(MXKVStoreBroadcast(s, 0, NULL, 0, NULL, NULL, NULL, 0));
  /* an empty call fixes no key type */
  const char *str = "s";
  CHECK(MXKVStoreFree(s));
  CHECK(MXKVStoreCreate("local", &s));
  CHECK(MXKVStorePush(s, 0, NULL, NULL, 0));
  CHECK(MXKVStoreInitEx(s, 1, &str, &zero));
  CHECK(MXKVStoreFree(s));
  for (int d = 0; d < 4; d++) CHECK(MXNDArrayFree(v[d]));
  CHECK(MXNDArrayFree(zero));
  CHECK(MXNDArrayFree(out));
}

/* Each thread sees its own last error. */
static void *thread_error(void *arg) {
  int key = *(int *)arg;
  NDArrayHandle out = f32_filled(N, 0, 0);
  if (MXKVStorePull(kv, 1, &key, &out, 0) != -1) return "pull did not fail";
  for (int i = 0; i < 1000; i++) {
    char want[64];
    snprintf(want, sizeof want, "key %d has not been inited", key);
    if (strstr(MXGetLastError(), want) == NULL) return "another thread's error";
    sched_yield();
  }
  CHECK(MXNDArrayFree(out));
  return NULL;
}

static void per_thread_errors(void) {
  pthread_t t[2];
  int keys[2] = {1001, 2002};
  for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, thread_error, &keys[i]);
  for (int i = 0; i < 2; i++) {
    void *res;
    pthread_join(t[i], &res);
    if (res != NULL) {
      fprintf(stderr, "thread %d: %s\n", i, (const char *)res);
      failures++;
    }
  }
}

/* The operator surface of the frontends: MXImperativeInvoke(Ex), op lookup and op info. */
static void operators(void) {
  void *plus, *sgd, *zeros;
  uint32_t num_names;
  const char **names;
  CHECK(MXListAllOpNames(&num_names, &names));
  CHECK(NNGetOpHandle("elemwise_add", &plus));
  CHECK(NNGetOpHandle("_zeros", &zeros));
  void *untouched = &num_names;
  void *op = untouched;
  FAILS(NNGetOpHandle("no_such_op", &op), "no_such_op");
  TRUE(op == untouched);
  FAILS(NNGetOpHandle(NULL, &op), "NULL");
  FAILS(NNGetOpHandle("_zeros", NULL), "NULL");

  NDArrayHandle small = f32_filled(3, 1, 0);
  NDArrayHandle in2[2] = {val, small};
  int n = 0;
  NDArrayHandle *outs = NULL;
  /* shapes that do not match, for the elementwise and broadcast forms */
  FAILS(MXImperativeInvoke(plus, 2, in2, &n, &outs, 0, NULL, NULL), "shape");
  TRUE(n == 0 && outs == NULL);
  void *badd;
  CHECK(NNGetOpHandle("broadcast_add", &badd));
  FAILS(MXImperativeInvoke(badd, 2, in2, &n, &outs, 0, NULL, NULL), "shape");
  /* wrong input count, NULL inputs, a freed input, a bad creator */
  FAILS(MXImperativeInvoke(plus, 1, in2, &n, &outs, 0, NULL, NULL), "input");
  FAILS(MXImperativeInvoke(plus, 2, NULL, &n, &outs, 0, NULL, NULL), "NULL");
  NDArrayHandle freed = f32_filled(N, 1, 0);
  CHECK(MXNDArrayFree(freed));
  NDArrayHandle with_freed[2] = {val, freed};
  FAILS(MXImperativeInvoke(plus, 2, with_freed, &n, &outs, 0, NULL, NULL), "not a live");
  FAILS(MXImperativeInvoke(NULL, 2, in2, &n, &outs, 0, NULL, NULL), "operator handle");
  FAILS(MXImperativeInvoke(&n, 2, in2, &n, &outs, 0, NULL, NULL), "operator");
  FAILS(MXImperativeInvoke(plus, 2, in2, NULL, &outs, 0, NULL, NULL), "NULL");
  /* bad parameters: unknown names, unparsable values, unknown dtype, params without arrays */
  const char *shape_k[] = {"shape", "dtype"}, *bad_dtype[] = {"(2, 2)", "float128"};
  FAILS(MXImperativeInvoke(zeros, 0, NULL, &n, &outs, 2, shape_k, bad_dtype), "float128");
  const char *bad_shape[] = {"(2, x)", "float32"};
  FAILS(MXImperativeInvoke(zeros, 0, NULL, &n, &outs, 2, shape_k, bad_shape), "shape");
  const char *unknown_k[] = {"colour"}, *unknown_v[] = {"red"};
  FAILS(MXImperativeInvoke(zeros, 0, NULL, &n, &outs, 1, unknown_k, unknown_v), "colour");
  FAILS(MXImperativeInvoke(zeros, 0, NULL, &n, &outs, 1, NULL, unknown_v), "NULL");
  /* a given output of the wrong shape is refused and left as it was */
  NDArrayHandle wrong = f32_filled(3, 9, 0);
  NDArrayHandle val_val[2] = {val, val};
  n = 1;
  outs = &wrong;
  FAILS(MXImperativeInvoke(plus, 2, val_val, &n, &outs, 0, NULL, NULL), "shape");
  TRUE(f32_uniform(wrong, 3) == 9);
  /* a name registered for the Python import only answers "not supported" */
  CHECK(NNGetOpHandle("sgd_update", &sgd));
  n = 0;
  outs = NULL;
  FAILS(MXImperativeInvoke(sgd, 0, NULL, &n, &outs, 0, NULL, NULL), "not supported by libkvstore: sgd_update");
  /* op info: NULL out-params */
  const char *name, *desc, *kv_args, *ret;
  uint32_t num_args;
  const char **arg_names, **arg_types, **arg_descs;
  FAILS(MXSymbolGetAtomicSymbolInfo(plus, NULL, &desc, &num_args, &arg_names, &arg_types, &arg_descs, &kv_args, &ret), "NULL");
  FAILS(MXSymbolGetAtomicSymbolInfo(NULL, &name, &desc, &num_args, &arg_names, &arg_types, &arg_descs, &kv_args, &ret), "operator handle");
  CHECK(MXSymbolGetAtomicSymbolInfo(plus, &name, &desc, &num_args, &arg_names, &arg_types, &arg_descs, &kv_args, &ret));
  TRUE(strcmp(name, "elemwise_add") == 0 && num_args == 2 && strcmp(arg_names[0], "lhs") == 0);
  CHECK(MXNDArrayFree(small));
  CHECK(MXNDArrayFree(wrong));
}

/* A call repeating an earlier call's many handles (libkvstore keeps such lists decoded) after
 * one of them was freed is refused like any call naming a freed handle, and changes nothing;
 * the list with that handle replaced works again. */
static void repeated_calls_after_a_free(void) {
  enum { M = 100 };
  KVStoreHandle s;
  CHECK(MXKVStoreCreate("local", &s));
  int keys[M], k = 0;
  NDArrayHandle vals[M], outs[M];
  NDArrayHandle zero = f32_filled(N, 0, 0);
  CHECK(MXKVStoreInit(s, 1, &k, &zero));
  for (int i = 0; i < M; i++) keys[i] = 0, vals[i] = f32_filled(N, 1, 0), outs[i] = f32_filled(N, -1, 0);
  for (int r = 0; r < 3; r++) {
    CHECK(MXKVStorePush(s, M, keys, vals, 0));
    CHECK(MXKVStorePull(s, M, keys, outs, 0));
  }
  TRUE(f32_uniform(outs[0], N) == M && f32_uniform(outs[M - 1], N) == M);
  CHECK(MXNDArrayFree(vals[50]));
  CHECK(MXNDArrayFree(outs[50]));
  FAILS(MXKVStorePush(s, M, keys, vals, 0), "vals[50]");
  FAILS(MXKVStorePull(s, M, keys, outs, 0), "already freed");
  FAILS(MXKVStorePushPull(s, M, keys, M, keys, vals, outs, 0), "already freed");
  /* a new handle may take the freed slot: the old one stays refused */
  NDArrayHandle two = f32_filled(N, 2, 0);
  FAILS(MXKVStorePush(s, M, keys, vals, 0), "already freed");
  TRUE(f32_uniform(outs[0], N) == M);
  NDArrayHandle out = f32_filled(N, -1, 0);
  CHECK(MXKVStorePull(s, 1, &k, &out, 0));
  TRUE(f32_uniform(out, N) == M);
  vals[50] = two, outs[50] = out;
  CHECK(MXKVStorePush(s, M, keys, vals, 0));
  CHECK(MXKVStorePull(s, M, keys, outs, 0));
  TRUE(f32_uniform(outs[50], N) == M + 1 && f32_uniform(outs[M - 1], N) == M + 1);
  for (int i = 0; i < M; i++) {
    CHECK(MXNDArrayFree(vals[i]));
    CHECK(MXNDArrayFree(outs[i]));
  }
  CHECK(MXNDArrayFree(zero));
  CHECK(MXKVStoreFree(s));
}

int main(void) {
  CHECK(MXKVStoreCreate("local", &kv));
  CHECK(MXKVStoreCreate("local", &skv));
  val = f32_filled(N, 7, 0);
  int k = 3;
  const char *w = "w";
  CHECK(MXKVStoreInit(kv, 1, &k, &val));
  NDArrayHandle five = f32_filled(N, 5, 0);
  CHECK(MXKVStoreInitEx(skv, 1, &w, &five));
  null_pointers();
  stale_and_wrong_handles();
  repeated_calls_after_a_free();
  store_semantics();
  array_arguments();
  improvements();
  compression_with_growing_value_counts();
  per_thread_errors();
  operators();
  TRUE(stored(3) == 7 && stored_str("w") == 5);
  CHECK(MXNDArrayFree(val));
  CHECK(MXNDArrayFree(five));
  CHECK(MXKVStoreFree(kv));
  CHECK(MXKVStoreFree(skv));
  if (failures) {
    fprintf(stderr, "%d bad-input checks failed\n", failures);
    return 1;
  }
  printf("bad input: all checks passed\n");
  return 0;
}
