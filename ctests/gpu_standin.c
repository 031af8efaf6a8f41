/* GPU checks that need the CUDA stand-in's knobs (tests/gpu_standin.rs sets them):
 *   count        prints the device count and gpu(0)'s total memory;
 *   alloc_fail   with CUDA_STANDIN_FAIL=cuMemAlloc_v2:1: the first GPU array fails at the
 *                call with a clear message, the next one works;
 *   async_fail [ERROR [many_keys|gpu_out]]  with CUDA_STANDIN_FAIL=cuLaunchKernel:1 (or a
 *                copy, or the sum's scratch allocation: with many_keys, the fused table of
 *                MANY_KEYS more keys pushed with key 1): a device-store push whose sum fails on
 *                the last GPU (pulled into a host array, or with gpu_out into one on that GPU)
 *                reports the driver's error (ERROR, default CUDA_ERROR_ILLEGAL_ADDRESS) at the
 *                next wait on what it wrote; a key on the host is intact; nothing hangs;
 *   trace_loop   a steady push/pull loop of small keys on every GPU, printing the trace file's
 *                size before and after the measured iterations and the calling thread's id;
 *   trace_rsp    row_sparse pushes of GPU values and row_sparse pulls into GPU outputs (row
 *                ids on a GPU), printing the trace file's size around them and the biggest
 *                row id array moved; checks the pulled rows;
 *   steady STORE STYPE  a push/pull loop on every GPU of a STORE ("device" or "nccl") store:
 *                iteration 1 warms up, the trace file's size is printed around iterations
 *                2..STEADY_ITERS. STYPE "default": 48 small keys and one 4 MiB key, one value
 *                and one output per GPU (two on one GPU for the device store); "row_sparse"
 *                (device store): row_sparse keys (one of 4 MiB per value) whose values hold the
 *                same rows every iteration, pulled with PullRowSparse by the same row ids.
 *                Checks the last pull's values.
 * Prints "<mode>: ok" on success. `steady` needs no knob of the stand-in: on a real driver
 * scripts/test-gpu.sh traces it with ctests/cuda_audit.c. */
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

/* Keys pushed with key 1 in async_fail's many_keys mode: their fused table is too big for a
 * launch's parameters, so it is the sum's first allocation on the GPU. */
#define MANY_KEYS 80

static void async_fail(const char *expected, int many_keys, int gpu_out) {
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
  int keys[2 * (MANY_KEYS + 1)] = {1, 1};
  CHECK(MXKVStorePush(host_kv, 2, keys, host_vals, 0));
  /* With gpu_out, the pull's output is beside the merge buffer: its copy is queued on the
   * sum's stream behind the faulting work, before that work has finished. (Made before the
   * fault, which leaves the GPU unusable.) */
  NDArrayHandle out1 = filled(gpu_out ? DEV_GPU : DEV_CPU, gpu_out ? last : 0, n, 0.0f);
  /* The key on the last GPU: its sum is the process's first kernel launch, which faults. */
  NDArrayHandle gpu_vals[2] = {filled(DEV_GPU, last, n, 1.0f), filled(DEV_GPU, last, n, 2.0f)};
  NDArrayHandle pushed[2 * (MANY_KEYS + 1)] = {gpu_vals[0], gpu_vals[1]};
  int n_pushed = 2;
  for (int k = 2; many_keys && k <= MANY_KEYS + 1; k++) {
    CHECK(MXKVStoreInit(kv, 1, &k, &init));
    keys[n_pushed] = keys[n_pushed + 1] = k;
    pushed[n_pushed++] = gpu_vals[0];
    pushed[n_pushed++] = gpu_vals[1];
  }
  CHECK(MXKVStorePush(kv, (uint32_t)n_pushed, keys, pushed, 0));
  NDArrayHandle out2 = filled(DEV_CPU, 0, n, 0.0f);
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

/* The trace: the stand-in's own, or on a real driver ctests/cuda_audit.c's (CUDA_AUDIT_TRACE). */
static long trace_size(void) {
  struct stat st;
  const char *path = getenv("CUDA_AUDIT_TRACE");
  if (!path || !*path) path = getenv("CUDA_STANDIN_TRACE");
  return path && stat(path, &st) == 0 ? (long)st.st_size : -1;
}

/* Enough arrays per call that its ops are not tiny (a tiny op is enqueued by the caller). */
#define KEYS 16
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

#define STEADY_SMALL 48
#define STEADY_BIG (1u << 20) /* float32 elements: 4 MiB */
#define STEADY_ITERS 6
#define STEADY_RSP_KEYS 3
static const uint32_t steady_nnr[STEADY_RSP_KEYS] = {100, 120, 16384}; /* the last: 4 MiB of rows */

static void steady_iteration(KVStoreHandle kv, int rsp, int m, const int *vkeys, NDArrayHandle *vals,
                             NDArrayHandle *outs, NDArrayHandle *rids) {
  CHECK(MXKVStorePush(kv, (uint32_t)m, vkeys, vals, 0));
  if (rsp)
    CHECK(MXKVStorePullRowSparse(kv, (uint32_t)m, vkeys, outs, (const NDArrayHandle *)rids, 0));
  else
    CHECK(MXKVStorePull(kv, (uint32_t)m, vkeys, outs, 0));
}

/* Output `out` of row_sparse key k (RSP_COLS columns): rows 0, 7, 14, ... (RSP_WANT of them);
 * row 7r sums the values j holding it (value j holds rows 3r' + 2j, r' < nnr), each
 * j + row + column / 8. */
static void check_steady_rsp(NDArrayHandle out, uint32_t nnr, int per_key) {
  NDArrayHandle a, d;
  CHECK(MXNDArrayGetAuxNDArray(out, 0, &a));
  CHECK(MXNDArrayGetDataNDArray(out, &d));
  int64_t got_ids[RSP_WANT];
  float *got = malloc(sizeof(float) * RSP_WANT * RSP_COLS);
  CHECK(MXNDArraySyncCopyToCPU(a, got_ids, RSP_WANT));
  CHECK(MXNDArraySyncCopyToCPU(d, got, (size_t)RSP_WANT * RSP_COLS));
  for (int r = 0; r < RSP_WANT; r++) {
    int row = 7 * r;
    float expect = 0;
    for (int j = 0; j < per_key; j++)
      if ((row - 2 * j) >= 0 && (row - 2 * j) % 3 == 0 && (uint32_t)((row - 2 * j) / 3) < nnr) expect += (float)j + (float)row + 5.0f / 8.0f;
    EXPECT(got_ids[r] == row && got[r * RSP_COLS + 5] == expect);
  }
  free(got);
  CHECK(MXNDArrayFree(a));
  CHECK(MXNDArrayFree(d));
}

static void steady(const char *store, const char *stype) {
  int nccl = !strcmp(store, "nccl"), rsp = !strcmp(stype, "row_sparse");
  KVStoreHandle kv;
  CHECK(MXKVStoreCreate(store, &kv));
  int per_key = (nccl || n_gpus > 1) ? n_gpus : 2; /* nccl: one value per GPU */
  int n_keys = rsp ? STEADY_RSP_KEYS : STEADY_SMALL + 1;
  int keys[STEADY_SMALL + 1], *vkeys = malloc(sizeof(int) * (size_t)(n_keys * per_key));
  NDArrayHandle init[STEADY_SMALL + 1];
  NDArrayHandle *vals = malloc(sizeof(NDArrayHandle) * (size_t)(n_keys * per_key));
  NDArrayHandle *outs = malloc(sizeof(NDArrayHandle) * (size_t)(n_keys * per_key));
  NDArrayHandle *rids = malloc(sizeof(NDArrayHandle) * (size_t)(n_keys * per_key));
  int64_t want_ids[RSP_WANT];
  for (int r = 0; r < RSP_WANT; r++) want_ids[r] = (int64_t)(7 * ((r * 13) % RSP_WANT)); /* unsorted, repeats */
  int m = 0;
  for (int k = 0; k < n_keys; k++) {
    keys[k] = k;
    if (rsp) {
      uint32_t nnr = steady_nnr[k], rows = 3 * nnr + 1000; /* room for every wanted row */
      int64_t *ids = malloc(sizeof(int64_t) * nnr);
      for (uint32_t r = 0; r < nnr; r++) ids[r] = 3 * (int64_t)r;
      init[k] = rsp_on_gpu(0, rows, nnr, ids, 0.0f);
      for (int i = 0; i < per_key; i++, m++) {
        for (uint32_t r = 0; r < nnr; r++) ids[r] = 3 * (int64_t)r + 2 * i;
        vkeys[m] = k;
        vals[m] = rsp_on_gpu(i % n_gpus, rows, nnr, ids, (float)i);
        outs[m] = rsp_on_gpu(i % n_gpus, rows, 0, ids, 0.0f);
        uint32_t n = RSP_WANT;
        CHECK(MXNDArrayCreateEx(&n, 1, DEV_GPU, i % n_gpus, 0, DT_I64, &rids[m]));
        CHECK(MXNDArraySyncCopyFromCPU(rids[m], want_ids, n));
      }
      free(ids);
    } else {
      uint32_t n = k == STEADY_SMALL ? STEADY_BIG : 1000;
      init[k] = filled(DEV_CPU, 0, n, (float)k);
      for (int i = 0; i < per_key; i++, m++) {
        vkeys[m] = k;
        vals[m] = filled(DEV_GPU, i % n_gpus, n, (float)(k + i));
        outs[m] = filled(DEV_GPU, i % n_gpus, n, 0.0f);
        rids[m] = NULL;
      }
    }
  }
  CHECK(MXKVStoreInit(kv, n_keys, keys, init));
  steady_iteration(kv, rsp, m, vkeys, vals, outs, rids); /* iteration 1: the warm-up */
  CHECK(MXNDArrayWaitAll());
  printf("tid=%ld\n", (long)syscall(SYS_gettid));
  printf("steady_from=%ld\n", trace_size());
  for (int it = 2; it <= STEADY_ITERS; it++) steady_iteration(kv, rsp, m, vkeys, vals, outs, rids);
  CHECK(MXNDArrayWaitAll());
  printf("steady_to=%ld\n", trace_size());
  printf("calls=%d\n", STEADY_ITERS - 1);
  if (rsp) {
    for (int k = 0, at = 0; k < n_keys; k++, at += per_key)
      for (int i = 0; i < per_key; i++) check_steady_rsp(outs[at + i], steady_nnr[k], per_key);
  } else {
    /* Key k's value i holds k + i + j at j: the sum is per_key * (k + j) + 0 + 1 + ... */
    for (int k = 0, at = 0; k < n_keys; k++, at += per_key) {
      uint32_t n = k == STEADY_SMALL ? STEADY_BIG : 1000;
      float *v = malloc(sizeof(float) * n), base = 0;
      for (int i = 0; i < per_key; i++) base += (float)(k + i);
      for (int i = 0; i < per_key; i++) {
        CHECK(MXNDArraySyncCopyToCPU(outs[at + i], v, n));
        EXPECT(v[0] == base && v[n - 1] == base + (float)per_key * (float)(n - 1));
      }
      free(v);
    }
  }
  for (int i = 0; i < m; i++) {
    MXNDArrayFree(vals[i]);
    MXNDArrayFree(outs[i]);
    if (rids[i]) MXNDArrayFree(rids[i]);
  }
  for (int k = 0; k < n_keys; k++) MXNDArrayFree(init[k]);
  free(vkeys); free(vals); free(outs); free(rids);
  CHECK(MXKVStoreFree(kv));
}

int main(int argc, char **argv) {
  if (argc < 2) { fprintf(stderr, "usage: gpu_standin count|alloc_fail|async_fail|trace_loop|trace_rsp|steady STORE STYPE\n"); return 2; }
  CHECK(MXGetGPUCount(&n_gpus));
  EXPECT(n_gpus > 0);
  if (!strcmp(argv[1], "count")) count();
  else if (!strcmp(argv[1], "alloc_fail")) alloc_fail();
  else if (!strcmp(argv[1], "async_fail"))
    async_fail(argc > 2 ? argv[2] : "CUDA_ERROR_ILLEGAL_ADDRESS", argc > 3 && !strcmp(argv[3], "many_keys"), argc > 3 && !strcmp(argv[3], "gpu_out"));
  else if (!strcmp(argv[1], "trace_loop")) trace_loop();
  else if (!strcmp(argv[1], "trace_rsp")) trace_rsp();
  else if (!strcmp(argv[1], "steady") && argc > 3) steady(argv[2], argv[3]);
  else { fprintf(stderr, "unknown mode %s\n", argv[1]); return 2; }
  printf("%s: ok\n", argv[1]);
  return 0;
}
