/* GPU checks that need the CUDA stand-in's knobs (tests/gpu_standin.rs sets them):
 *   count        prints the device count and gpu(0)'s total memory;
 *   alloc_fail   with CUDA_STANDIN_FAIL=cuMemAlloc_v2:1: the first GPU array fails at the
 *                call with a clear message, the next one works;
 *   async_fail [ERROR]  with CUDA_STANDIN_FAIL=cuLaunchKernel:1 (or a copy, or the sum's
 *                scratch allocation): a device-store push whose sum fails on the last GPU
 *                reports the driver's error (ERROR, default CUDA_ERROR_ILLEGAL_ADDRESS) at the
 *                next wait on what it wrote; a key on the host is intact; nothing hangs;
 *   trace_loop   a steady push/pull loop of small keys on every GPU, printing the trace file's
 *                size before and after the measured iterations and the calling thread's id;
 *   trace_rsp    row_sparse pushes of GPU values and row_sparse pulls into GPU outputs (row
 *                ids on a GPU), printing the trace file's size around them and the biggest
 *                row id array moved; checks the pulled rows.
 * Prints "<mode>: ok" on success. */
#define _GNU_SOURCE
#include "common.h"
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static int n_gpus;

static NDArrayHandle filled(int dev_type, int dev_id, uint32_t n, float base) {
  NDArrayHandle h;
  CHECK(MXNDArrayCreateEx(&n, 1, dev_type, dev_id, 0, DT_F32, &h));
  float *v = malloc(n * sizeof *v);
  for (uint32_t i = 0; i < n; i++) v[i] = base + (float)i;
  CHECK(MXNDArraySyncCopyFromCPU(h, v, n));
  free(v);
  return h;
}

static void count(void) {
  uint64_t free_b = 0, total_b = 0;
  CHECK(MXGetGPUMemoryInformation64(0, &free_b, &total_b));
  printf("gpus=%d total=%llu\n", n_gpus, (unsigned long long)total_b);
}

static void alloc_fail(void) {
  uint32_t n = 1000;
  NDArrayHandle h;
  EXPECT(MXNDArrayCreateEx(&n, 1, DEV_GPU, 0, 0, DT_F32, &h) == -1);
  const char *err = MXGetLastError();
  EXPECT(strstr(err, "gpu(0)") && strstr(err, "CUDA_ERROR_OUT_OF_MEMORY"));
  h = filled(DEV_GPU, 0, n, 1.0f);
  float back[1000];
  CHECK(MXNDArraySyncCopyToCPU(h, back, n));
  EXPECT(back[0] == 1.0f && back[999] == 1000.0f);
  CHECK(MXNDArrayFree(h));
}

static void async_fail(const char *expected) {
  int last = n_gpus - 1;
  KVStoreHandle kv, host_kv;
  CHECK(MXKVStoreCreate("device", &kv));
  CHECK(MXKVStoreCreate("local", &host_kv));
  int key = 1;
  uint32_t n = 100;
  NDArrayHandle init = filled(DEV_CPU, 0, n, 0.0f);
  CHECK(MXKVStoreInit(kv, 1, &key, &init));
  CHECK(MXKVStoreInit(host_kv, 1, &key, &init));
  /* Another key, on the host: pushed before the fault, pulled after it. */
  NDArrayHandle host_vals[2] = {filled(DEV_CPU, 0, n, 1.0f), filled(DEV_CPU, 1, n, 2.0f)};
  int keys[2] = {1, 1};
  CHECK(MXKVStorePush(host_kv, 2, keys, host_vals, 0));
  /* The key on the last GPU: its sum is the process's first kernel launch, which faults. */
  NDArrayHandle gpu_vals[2] = {filled(DEV_GPU, last, n, 1.0f), filled(DEV_GPU, last, n, 2.0f)};
  CHECK(MXKVStorePush(kv, 2, keys, gpu_vals, 0));
  NDArrayHandle out1 = filled(DEV_CPU, 0, n, 0.0f), out2 = filled(DEV_CPU, 0, n, 0.0f);
  CHECK(MXKVStorePull(kv, 1, &key, &out1, 0));
  EXPECT(MXNDArrayWaitToRead(out1) == -1);
  const char *err = MXGetLastError();
  char want[32];
  snprintf(want, sizeof want, "gpu(%d)", last);
  if (!(strstr(err, want) && strstr(err, expected))) fprintf(stderr, "message: %s\n", err);
  EXPECT(strstr(err, want) && strstr(err, expected));
  CHECK(MXKVStorePull(host_kv, 1, &key, &out2, 0));
  float v[100];
  CHECK(MXNDArraySyncCopyToCPU(out2, v, n));
  EXPECT(v[0] == 3.0f && v[99] == 201.0f);
  /* Later host work still runs; WaitAll returns (reporting or not). */
  CHECK(MXKVStorePush(host_kv, 2, keys, host_vals, 0));
  CHECK(MXKVStorePull(host_kv, 1, &key, &out2, 0));
  CHECK(MXNDArraySyncCopyToCPU(out2, v, n));
  EXPECT(v[0] == 3.0f);
  (void)MXNDArrayWaitAll();
  if (n_gpus > 1) {
    /* Another GPU's context is untouched by the fault. */
    NDArrayHandle other = filled(DEV_GPU, 0, n, 5.0f);
    CHECK(MXNDArraySyncCopyToCPU(other, v, n));
    EXPECT(v[0] == 5.0f && v[99] == 104.0f);
    MXNDArrayFree(other);
  }
  for (int i = 0; i < 2; i++) { MXNDArrayFree(host_vals[i]); MXNDArrayFree(gpu_vals[i]); }
  MXNDArrayFree(init); MXNDArrayFree(out1); MXNDArrayFree(out2);
  CHECK(MXKVStoreFree(kv));
  CHECK(MXKVStoreFree(host_kv));
}

static long trace_size(void) {
  struct stat st;
  const char *path = getenv("CUDA_STANDIN_TRACE");
  return path && stat(path, &st) == 0 ? (long)st.st_size : -1;
}

#define KEYS 8
static void trace_loop(void) {
  KVStoreHandle kv;
  CHECK(MXKVStoreCreate("device", &kv));
  uint32_t n = 1000;
  int per_key = n_gpus > 1 ? n_gpus : 2; /* values per key: one per GPU (two on one GPU) */
  int keys[KEYS], vkeys[KEYS * 4];
  NDArrayHandle init[KEYS], vals[KEYS * 4], outs[KEYS * 4];
  for (int k = 0; k < KEYS; k++) { keys[k] = k; init[k] = filled(DEV_CPU, 0, n, (float)k); }
  CHECK(MXKVStoreInit(kv, KEYS, keys, init));
  int m = 0;
  for (int k = 0; k < KEYS; k++)
    for (int i = 0; i < per_key; i++, m++) {
      vkeys[m] = k;
      vals[m] = filled(DEV_GPU, i % n_gpus, n, (float)(k + i));
      outs[m] = filled(DEV_GPU, i % n_gpus, n, 0.0f);
    }
  for (int it = 0; it < 3; it++) { /* warm-up: placement, kernels, staging pool */
    CHECK(MXKVStorePush(kv, (uint32_t)m, vkeys, vals, 0));
    CHECK(MXKVStorePull(kv, (uint32_t)m, vkeys, outs, 0));
  }
  CHECK(MXNDArrayWaitAll());
  printf("tid=%ld\n", (long)syscall(SYS_gettid));
  printf("steady_from=%ld\n", trace_size());
  for (int it = 0; it < 5; it++) {
    CHECK(MXKVStorePush(kv, (uint32_t)m, vkeys, vals, 0));
    CHECK(MXKVStorePull(kv, (uint32_t)m, vkeys, outs, 0));
  }
  CHECK(MXNDArrayWaitAll());
  printf("steady_to=%ld\n", trace_size());
  printf("calls=5\n");
  float v[1000];
  CHECK(MXNDArraySyncCopyToCPU(outs[0], v, n));
  float want = 0;
  for (int i = 0; i < per_key; i++) want += (float)i;
  EXPECT(v[0] == want && v[999] == want + 999.0f * (float)per_key);
  for (int i = 0; i < m; i++) { MXNDArrayFree(vals[i]); MXNDArrayFree(outs[i]); }
  for (int k = 0; k < KEYS; k++) MXNDArrayFree(init[k]);
  CHECK(MXKVStoreFree(kv));
}

/* A (rows, RSP_COLS) row_sparse float32 array on gpu(dev_id) holding rows ids[0..nnr), row r
 * of it filled with base + r + column / 8. */
#define RSP_COLS 64
static NDArrayHandle rsp_on_gpu(int dev_id, uint32_t rows, uint32_t nnr, const int64_t *ids, float base) {
  float *vals = malloc(sizeof(float) * nnr * RSP_COLS);
  for (uint32_t r = 0; r < nnr; r++)
    for (uint32_t c = 0; c < RSP_COLS; c++) vals[r * RSP_COLS + c] = base + (float)ids[r] + (float)c / 8.0f;
  NDArrayHandle h = rsp_f32_at(DEV_GPU, dev_id, rows, RSP_COLS, nnr, ids, vals);
  free(vals);
  return h;
}

#define RSP_ROWS 1000
#define RSP_NNR 100
#define RSP_WANT 50
static void trace_rsp(void) {
  KVStoreHandle kv;
  CHECK(MXKVStoreCreate("device", &kv));
  int per_key = n_gpus > 1 ? n_gpus : 2, key = 0, vkeys[8];
  int64_t ids[RSP_NNR], want_ids[RSP_WANT];
  NDArrayHandle init, vals[8], outs[8], rids[8];
  for (int r = 0; r < RSP_NNR; r++) ids[r] = 3 * r;
  init = rsp_on_gpu(0, RSP_ROWS, RSP_NNR, ids, 0.0f);
  CHECK(MXKVStoreInit(kv, 1, &key, &init));
  /* Each value holds every third row from its own start: overlapping, not equal, sets. */
  for (int i = 0; i < per_key; i++) {
    int64_t mine[RSP_NNR];
    for (int r = 0; r < RSP_NNR; r++) mine[r] = 3 * r + 2 * i;
    vkeys[i] = key;
    vals[i] = rsp_on_gpu(i % n_gpus, RSP_ROWS, RSP_NNR, mine, (float)i);
    outs[i] = rsp_on_gpu(i % n_gpus, RSP_ROWS, 0, ids, 0.0f);
    /* Wanted rows, unsorted with repeats: 0, 7, 14, ... */
    for (int r = 0; r < RSP_WANT; r++) want_ids[r] = (int64_t)(7 * ((r * 13) % RSP_WANT));
    uint32_t n = RSP_WANT;
    CHECK(MXNDArrayCreateEx(&n, 1, DEV_GPU, i % n_gpus, 0, DT_I64, &rids[i]));
    CHECK(MXNDArraySyncCopyFromCPU(rids[i], want_ids, n));
  }
  CHECK(MXNDArrayWaitAll());
  printf("tid=%ld\n", (long)syscall(SYS_gettid));
  printf("steady_from=%ld\n", trace_size());
  for (int it = 0; it < 2; it++) {
    CHECK(MXKVStorePush(kv, (uint32_t)per_key, vkeys, vals, 0));
    CHECK(MXKVStorePullRowSparse(kv, (uint32_t)per_key, vkeys, outs, (const NDArrayHandle *)rids, 0));
  }
  CHECK(MXNDArrayWaitAll());
  printf("steady_to=%ld\n", trace_size());
  /* The most row ids an array holds: the stored sum's, the union of the values' rows. */
  printf("id_bytes=%d\n", (int)(per_key * RSP_NNR * sizeof(int64_t)));
  /* The pulled rows are 0, 7, 14, ...; row 7r sums the values holding it (row - 2j a multiple of 3). */
  for (int i = 0; i < per_key; i++) {
    NDArrayHandle a, d;
    CHECK(MXNDArrayGetAuxNDArray(outs[i], 0, &a));
    CHECK(MXNDArrayGetDataNDArray(outs[i], &d));
    int nd;
    const int *dims;
    CHECK(MXNDArrayGetShapeEx(a, &nd, &dims));
    EXPECT(nd == 1 && dims[0] == RSP_WANT);
    int64_t got_ids[RSP_WANT];
    float *got = malloc(sizeof(float) * RSP_WANT * RSP_COLS);
    CHECK(MXNDArraySyncCopyToCPU(a, got_ids, RSP_WANT));
    CHECK(MXNDArraySyncCopyToCPU(d, got, (size_t)RSP_WANT * RSP_COLS));
    for (int r = 0; r < RSP_WANT; r++) {
      int row = 7 * r;
      float expect = 0;
      for (int j = 0; j < per_key; j++)
        if ((row - 2 * j) >= 0 && (row - 2 * j) % 3 == 0 && (row - 2 * j) / 3 < RSP_NNR) expect += (float)j + (float)row + 5.0f / 8.0f;
      EXPECT(got_ids[r] == row && got[r * RSP_COLS + 5] == expect);
    }
    free(got);
    CHECK(MXNDArrayFree(a));
    CHECK(MXNDArrayFree(d));
  }
  for (int i = 0; i < per_key; i++) { MXNDArrayFree(vals[i]); MXNDArrayFree(outs[i]); MXNDArrayFree(rids[i]); }
  MXNDArrayFree(init);
  CHECK(MXKVStoreFree(kv));
}

int main(int argc, char **argv) {
  if (argc < 2) { fprintf(stderr, "usage: gpu_standin count|alloc_fail|async_fail|trace_loop|trace_rsp\n"); return 2; }
  CHECK(MXGetGPUCount(&n_gpus));
  EXPECT(n_gpus > 0);
  if (!strcmp(argv[1], "count")) count();
  else if (!strcmp(argv[1], "alloc_fail")) alloc_fail();
  else if (!strcmp(argv[1], "async_fail")) async_fail(argc > 2 ? argv[2] : "CUDA_ERROR_ILLEGAL_ADDRESS");
  else if (!strcmp(argv[1], "trace_loop")) trace_loop();
  else if (!strcmp(argv[1], "trace_rsp")) trace_rsp();
  else { fprintf(stderr, "unknown mode %s\n", argv[1]); return 2; }
  printf("%s: ok\n", argv[1]);
  return 0;
}
