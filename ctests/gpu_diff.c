/* GPU differential program: the same store workloads with values on GPU contexts (`gpu`) or
 * on CPU contexts (`cpu`); scripts/test-gpu.sh runs both and requires identical output.
 * The CPU store is the oracle (already byte-identical to libmxnet.so). Every element is
 * printed as hex bits, NaN as "NaN" whatever its payload (GPUs return the canonical NaN, x86
 * the first operand's: MXNet's own GPU and CPU paths differ there too).
 *
 * Covered: local and device stores; every summable dtype; 1-9 values per key; odd sizes
 * from 1 element to 64 MiB; +-0, subnormals, +-Inf, NaN, float16 overflow; mixed gpu/cpu
 * values; a C updater (its `local` handle must be on a GPU for `device` stores with GPU
 * values, as in MXNet); 2bit and 1bit compression over 20 pushes; row_sparse push/pull, and
 * a row_sparse key pulled into row_sparse outputs (PullWithSparse, PullRowSparse) read back
 * through their aux and data arrays.
 * In `gpu` mode also the C API: GetData is device memory (checked with the driver through
 * dlopen) for dense and row_sparse arrays and a row_sparse array's aux and data arrays, which
 * are on its GPU; its parts filled across contexts; waits, a forked child gets an error (not a hang), shutdown.
 *
 * usage: gpu_diff gpu|cpu [--small]   (--small: sizes for compute-sanitizer runs)
 * Without a GPU, `gpu` mode prints a skip line and exits 0. */
#include "common.h"
#include <dlfcn.h>
#include <math.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static int gpu_mode, n_gpus, small_sizes;

/* The context of value i of a key: gpu(i % n) in gpu mode (all on gpu(0) with one GPU, as
 * MXNet allows), cpu(i) otherwise; `mixed` puts odd values on the CPU in both modes. */
static void value_ctx(int i, int mixed, int *dev_type, int *dev_id) {
  if (gpu_mode && !(mixed && i % 2)) { *dev_type = DEV_GPU; *dev_id = i % n_gpus; }
  else { *dev_type = DEV_CPU; *dev_id = i; }
}

static uint64_t rng_state = 0x2545F4914F6CDD1DULL;
static uint64_t rng(void) { rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17; return rng_state; }

/* Element j of value i: mostly ordinary values, with the special ones sprinkled in. */
static void element(int dt, int i, size_t j, unsigned char *out) {
  uint64_t r = rng();
  switch (dt) {
    case DT_F32: {
      static const uint32_t special[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x7f800000u,
                                         0xff800000u, 0x7fc12345u, 0x7f7fffffu, 0x3f800001u};
      uint32_t b = (r % 17 == 0) ? special[(r >> 8) % 9] : (uint32_t)(0x3c000000u + (r >> 20) % 0x06000000u) | (uint32_t)((r >> 7) & 1) << 31;
      memcpy(out, &b, 4); break;
    }
    case DT_F64: {
      static const uint64_t special[] = {0, 0x8000000000000000ull, 1, 0x7ff0000000000000ull, 0xfff0000000000000ull, 0x7ff8000000000123ull};
      uint64_t b = (r % 17 == 0) ? special[(r >> 8) % 6] : (0x3f00000000000000ull + (r >> 12) % 0x00f0000000000000ull) | ((r >> 7) & 1) << 63;
      memcpy(out, &b, 8); break;
    }
    case DT_F16: case DT_BF16: {
      /* float16: 0x7bff (65504) twice overflows to Inf; subnormals 0x0001, 0x83ff. */
      static const uint16_t special16[] = {0x0000, 0x8000, 0x0001, 0x83ff, 0x7c00, 0xfc00, 0x7e01, 0x7bff, 0x7bff};
      static const uint16_t specialbf[] = {0x0000, 0x8000, 0x0001, 0x807f, 0x7f80, 0xff80, 0x7fc1, 0x7f7f, 0x3f81};
      uint16_t b = (r % 13 == 0) ? (dt == DT_F16 ? special16 : specialbf)[(r >> 8) % 9]
                                 : (uint16_t)((dt == DT_F16 ? 0x2000 : 0x3c00) + (r >> 20) % 0x2000) | (uint16_t)((r >> 7) & 1) << 15;
      memcpy(out, &b, 2); break;
    }
    default: {
      uint64_t v = r ^ ((uint64_t)i << 56) ^ j;
      memcpy(out, &v, dtype_size(dt));
    }
  }
}

static NDArrayHandle make_value(int dt, size_t n, int i, int mixed) {
  int t, id;
  value_ctx(i, mixed, &t, &id);
  uint32_t shape = (uint32_t)n;
  NDArrayHandle h;
  CHECK(MXNDArrayCreateEx(&shape, 1, t, id, 0, dt, &h));
  size_t es = dtype_size(dt);
  unsigned char *data = malloc(n * es + 1);
  for (size_t j = 0; j < n; j++) element(dt, i, j, data + j * es);
  CHECK(MXNDArraySyncCopyFromCPU(h, data, n));
  free(data);
  return h;
}

static int is_nan(int dt, const unsigned char *p) {
  switch (dt) {
    case DT_F32: { uint32_t b; memcpy(&b, p, 4); return (b & 0x7fffffffu) > 0x7f800000u; }
    case DT_F64: { uint64_t b; memcpy(&b, p, 8); return (b & 0x7fffffffffffffffull) > 0x7ff0000000000000ull; }
    case DT_F16: { uint16_t b; memcpy(&b, p, 2); return (b & 0x7fff) > 0x7c00; }
    case DT_BF16: { uint16_t b; memcpy(&b, p, 2); return (b & 0x7fff) > 0x7f80; }
    default: return 0;
  }
}

/* Prints a digest of the array: every element for small arrays, else a hash of the bits
 * (NaN counted as one canonical value) plus the first and last elements. */
static void print_array(const char *label, NDArrayHandle h, int dt, size_t n) {
  size_t es = dtype_size(dt);
  unsigned char *data = malloc(n * es + 1);
  CHECK(MXNDArraySyncCopyToCPU(h, data, n));
  uint64_t hash = 1469598103934665603ull;
  printf("%s:", label);
  for (size_t j = 0; j < n; j++) {
    const unsigned char *p = data + j * es;
    int nan = is_nan(dt, p);
    for (size_t b = 0; b < es; b++) hash = (hash ^ (nan ? 0xAA : p[b])) * 1099511628211ull;
    if (n <= 16 || j < 4 || j + 4 >= n) {
      if (nan) printf(" NaN");
      else { printf(" "); for (size_t b = es; b-- > 0;) printf("%02x", p[b]); }
    }
  }
  printf(" | hash %016llx\n", (unsigned long long)hash);
  free(data);
}

static int updater_local_dev_type = -1;
static void updater(int key, NDArrayHandle recv, NDArrayHandle local, void *handle) {
  (void)key; (void)handle;
  int t, id;
  CHECK(MXNDArrayGetContext(local, &t, &id));
  updater_local_dev_type = t;
  /* local = recv (assignment through the API, on whatever device they are). */
  CHECK(MXNDArraySyncCopyFromNDArray(local, recv, -1));
  MXNDArrayFree(recv);
  MXNDArrayFree(local);
}

static void dense_case(const char *store, int dt, size_t n, int n_values, int mixed, int with_updater) {
  KVStoreHandle kv;
  CHECK(MXKVStoreCreate(store, &kv));
  if (with_updater) CHECK(MXKVStoreSetUpdater(kv, updater, NULL));
  int key = 3;
  NDArrayHandle init = make_value(dt, n, 0, 0);
  CHECK(MXKVStoreInit(kv, 1, &key, &init));
  NDArrayHandle vals[9];
  int keys[9];
  for (int i = 0; i < n_values; i++) { vals[i] = make_value(dt, n, i, mixed); keys[i] = key; }
  updater_local_dev_type = -1;
  CHECK(MXKVStorePush(kv, (uint32_t)n_values, keys, vals, 0));
  NDArrayHandle out[9];
  for (int i = 0; i < n_values; i++) {
    int t, id;
    value_ctx(i, mixed, &t, &id);
    uint32_t shape = (uint32_t)n;
    CHECK(MXNDArrayCreateEx(&shape, 1, t, id, 0, dt, &out[i]));
  }
  CHECK(MXKVStorePull(kv, (uint32_t)n_values, keys, out, 0));
  CHECK(MXNDArrayWaitAll());
  char label[160];
  snprintf(label, sizeof label, "%s dt=%d n=%zu values=%d mixed=%d updater=%d", store, dt, n, n_values, mixed, with_updater);
  print_array(label, out[0], dt, n);
  for (int i = 1; i < n_values; i++) {
    /* Every output holds the same bytes; checked here, not printed. */
    size_t es = dtype_size(dt);
    unsigned char *a = malloc(n * es), *b = malloc(n * es);
    CHECK(MXNDArraySyncCopyToCPU(out[0], a, n));
    CHECK(MXNDArraySyncCopyToCPU(out[i], b, n));
    EXPECT(memcmp(a, b, n * es) == 0);
    free(a); free(b);
  }
  if (with_updater && gpu_mode && !mixed && strcmp(store, "device") == 0 && n_values > 1)
    EXPECT(updater_local_dev_type == DEV_GPU); /* MXNet: the updater sees the merge buffer's GPU */
  for (int i = 0; i < n_values; i++) { MXNDArrayFree(vals[i]); MXNDArrayFree(out[i]); }
  MXNDArrayFree(init);
  CHECK(MXKVStoreFree(kv));
}

static void compression_case(const char *type) {
  KVStoreHandle kv;
  CHECK(MXKVStoreCreate("device", &kv));
  const char *k[2] = {"type", "threshold"}, *v[2] = {type, "0.5"};
  CHECK(MXKVStoreSetGradientCompression(kv, 2, k, v));
  int key = 9;
  size_t n = 1001;
  NDArrayHandle init = make_value(DT_F32, n, 0, 0);
  CHECK(MXKVStoreInit(kv, 1, &key, &init));
  for (int step = 0; step < 20; step++) {
    int keys[3] = {key, key, key};
    NDArrayHandle vals[3], out;
    for (int i = 0; i < 3; i++) vals[i] = make_value(DT_F32, n, i, 0);
    CHECK(MXKVStorePush(kv, 3, keys, vals, 0));
    int t, id;
    value_ctx(0, 0, &t, &id);
    uint32_t shape = (uint32_t)n;
    CHECK(MXNDArrayCreateEx(&shape, 1, t, id, 0, DT_F32, &out));
    CHECK(MXKVStorePull(kv, 1, &key, &out, 0));
    char label[64];
    snprintf(label, sizeof label, "compression %s step %d", type, step);
    print_array(label, out, DT_F32, n);
    for (int i = 0; i < 3; i++) MXNDArrayFree(vals[i]);
    MXNDArrayFree(out);
  }
  MXNDArrayFree(init);
  CHECK(MXKVStoreFree(kv));
}

/* row_sparse: two values with overlapping rows pushed to a device store, pulled dense. */
static void row_sparse_case(void) {
  KVStoreHandle kv;
  CHECK(MXKVStoreCreate("device", &kv));
  uint32_t shape[2] = {10, 3};
  int key = 5;
  NDArrayHandle init;
  CHECK(MXNDArrayCreateEx(shape, 2, DEV_CPU, 0, 0, DT_F32, &init));
  float zeros[30] = {0};
  CHECK(MXNDArraySyncCopyFromCPU(init, zeros, 30));
  CHECK(MXKVStoreInit(kv, 1, &key, &init));
  NDArrayHandle vals[2];
  int keys[2] = {key, key};
  const int64_t rows[2][3] = {{1, 4, 7}, {0, 4, 9}};
  for (int i = 0; i < 2; i++) {
    int t, id;
    value_ctx(i, 0, &t, &id);
    int aux_type = DT_I64;
    uint32_t aux_ndim = 1, aux_shape = 3, data_shape[2] = {3, 3};
    CHECK(MXNDArrayCreateSparseEx(1, shape, 2, t, id, 0, DT_F32, 1, &aux_type, &aux_ndim, &aux_shape, &vals[i]));
    NDArrayHandle data, idx;
    CHECK(MXNDArrayCreateEx(data_shape, 2, DEV_CPU, 0, 0, DT_F32, &data));
    CHECK(MXNDArrayCreateEx(&aux_shape, 1, DEV_CPU, 0, 0, DT_I64, &idx));
    float d[9];
    for (int j = 0; j < 9; j++) d[j] = 0.25f * (float)(j + 1) * (i ? -1.5f : 1.0f);
    CHECK(MXNDArraySyncCopyFromCPU(data, d, 9));
    CHECK(MXNDArraySyncCopyFromCPU(idx, rows[i], 3));
    CHECK(MXNDArraySyncCopyFromNDArray(vals[i], data, -1));
    CHECK(MXNDArraySyncCopyFromNDArray(vals[i], idx, 0));
    MXNDArrayFree(data); MXNDArrayFree(idx);
  }
  CHECK(MXKVStorePush(kv, 2, keys, vals, 0));
  NDArrayHandle out;
  int t, id;
  value_ctx(0, 0, &t, &id);
  CHECK(MXNDArrayCreateEx(shape, 2, t, id, 0, DT_F32, &out));
  CHECK(MXKVStorePull(kv, 1, &key, &out, 0));
  print_array("row_sparse pull", out, DT_F32, 30);
  MXNDArrayFree(out);

  /* A row_sparse key (init from a row_sparse value on a GPU, pushed row_sparse values),
   * pulled into row_sparse outputs on the GPUs: whole (PullWithSparse) and by rows
   * (PullRowSparse, the wanted ids on the output's context, unsorted and repeated). */
  int rkey = 6;
  CHECK(MXKVStoreInit(kv, 1, &rkey, &vals[1]));
  int rkeys[2] = {rkey, rkey};
  CHECK(MXKVStorePush(kv, 2, rkeys, vals, 0));
  for (int i = 0; i < 2; i++) {
    int aux_type = DT_I64;
    uint32_t aux_ndim = 1, aux_shape = 0, n_want = 4;
    value_ctx(i, 0, &t, &id);
    NDArrayHandle rsp, want;
    CHECK(MXNDArrayCreateSparseEx(1, shape, 2, t, id, 0, DT_F32, 1, &aux_type, &aux_ndim, &aux_shape, &rsp));
    if (i == 0) {
      CHECK(MXKVStorePullWithSparse(kv, 1, &rkey, &rsp, 0, false));
    } else {
      const int64_t wanted[4] = {9, 1, 4, 9};
      CHECK(MXNDArrayCreateEx(&n_want, 1, t, id, 0, DT_I64, &want));
      CHECK(MXNDArraySyncCopyFromCPU(want, wanted, 4));
      CHECK(MXKVStorePullRowSparse(kv, 1, &rkey, &rsp, &want, 0));
      MXNDArrayFree(want);
    }
    NDArrayHandle ids, data;
    CHECK(MXNDArrayGetAuxNDArray(rsp, 0, &ids));
    CHECK(MXNDArrayGetDataNDArray(rsp, &data));
    uint32_t ndim = 0;
    const uint32_t *ids_shape = NULL;
    CHECK(MXNDArrayGetShape(ids, &ndim, &ids_shape));
    EXPECT(ndim == 1);
    size_t nnz = ids_shape[0];
    printf("row_sparse %s: %zu rows\n", i ? "pull_row_sparse" : "rsp pull", nnz);
    print_array("  row ids", ids, DT_I64, nnz);
    print_array("  values", data, DT_F32, nnz * 3);
    print_array("  stored values", rsp, DT_F32, nnz * 3);
    MXNDArrayFree(ids); MXNDArrayFree(data); MXNDArrayFree(rsp);
  }
  MXNDArrayFree(vals[0]); MXNDArrayFree(vals[1]); MXNDArrayFree(init);
  CHECK(MXKVStoreFree(kv));
}

/* Whether `ptr` is device memory, asked of the driver (CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2,
 * CU_MEMORYTYPE_DEVICE = 2). */
static int is_device_ptr(void *ptr) {
  static void *cuda;
  if (!cuda) cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  EXPECT(cuda != NULL);
  typedef int (*attr_fn)(void *, int, unsigned long long);
  attr_fn get_attr = (attr_fn)(uintptr_t)dlsym(cuda, "cuPointerGetAttribute");
  EXPECT(get_attr != NULL);
  unsigned int mem_type = 0;
  return get_attr(&mem_type, 2, (unsigned long long)(uintptr_t)ptr) == 0 && mem_type == 2;
}

/* An array `h` is on gpu(dev) and its GetData is device memory. */
static void expect_on_gpu(NDArrayHandle h, int dev) {
  int t = 0, id = -1;
  CHECK(MXNDArrayGetContext(h, &t, &id));
  EXPECT(t == DEV_GPU && id == dev);
  void *ptr = NULL;
  CHECK(MXNDArrayGetData(h, &ptr));
  EXPECT(ptr != NULL && is_device_ptr(ptr));
}

/* gpu mode: a row_sparse array on a GPU keeps its values and row ids in the GPU's memory, as
 * MXNet's: GetData is device memory, the aux and data arrays are on the same GPU, its parts
 * are filled across contexts, refused ids change nothing. */
static void row_sparse_api_checks(void) {
  int dev = n_gpus - 1;
  uint32_t shape[2] = {10, 3}, three = 3, data_shape[2] = {3, 3};
  int aux_type = DT_I64;
  uint32_t aux_ndim = 1;
  NDArrayHandle rsp;
  CHECK(MXNDArrayCreateSparseEx(1, shape, 2, DEV_GPU, dev, 0, DT_F32, 1, &aux_type, &aux_ndim, &three, &rsp));
  expect_on_gpu(rsp, dev);
  /* Values from the host, ids from another GPU (or the same one with one GPU). */
  NDArrayHandle data, ids;
  CHECK(MXNDArrayCreateEx(data_shape, 2, DEV_CPU, 0, 0, DT_F32, &data));
  CHECK(MXNDArrayCreateEx(&three, 1, DEV_GPU, 0, 0, DT_I64, &ids));
  const float d[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  const int64_t rows[3] = {0, 2, 9};
  CHECK(MXNDArraySyncCopyFromCPU(data, d, 9));
  CHECK(MXNDArraySyncCopyFromCPU(ids, rows, 3));
  CHECK(MXNDArraySyncCopyFromNDArray(rsp, data, -1));
  CHECK(MXNDArraySyncCopyFromNDArray(rsp, ids, 0));
  expect_on_gpu(rsp, dev);
  NDArrayHandle aux, vals;
  CHECK(MXNDArrayGetAuxNDArray(rsp, 0, &aux));
  CHECK(MXNDArrayGetDataNDArray(rsp, &vals));
  expect_on_gpu(aux, dev);
  expect_on_gpu(vals, dev);
  int64_t got_ids[3] = {0};
  float got[9] = {0};
  CHECK(MXNDArraySyncCopyToCPU(aux, got_ids, 3));
  CHECK(MXNDArraySyncCopyToCPU(vals, got, 9));
  EXPECT(memcmp(got_ids, rows, sizeof rows) == 0 && memcmp(got, d, sizeof d) == 0);
  memset(got, 0, sizeof got);
  CHECK(MXNDArraySyncCopyToCPU(rsp, got, 9));
  EXPECT(memcmp(got, d, sizeof d) == 0);
  /* Unsorted ids are refused and change nothing. */
  const int64_t bad[3] = {4, 2, 9};
  CHECK(MXNDArraySyncCopyFromCPU(ids, bad, 3));
  EXPECT(MXNDArraySyncCopyFromNDArray(rsp, ids, 0) == -1);
  EXPECT(strstr(MXGetLastError(), "sorted and unique") != NULL);
  MXNDArrayFree(aux);
  CHECK(MXNDArrayGetAuxNDArray(rsp, 0, &aux));
  CHECK(MXNDArraySyncCopyToCPU(aux, got_ids, 3));
  EXPECT(memcmp(got_ids, rows, sizeof rows) == 0);
  /* Its values and ids (on its GPU) fill a row_sparse array on gpu(0). */
  NDArrayHandle back;
  uint32_t zero = 0;
  CHECK(MXNDArrayCreateSparseEx(1, shape, 2, DEV_GPU, 0, 0, DT_F32, 1, &aux_type, &aux_ndim, &zero, &back));
  CHECK(MXNDArraySyncCopyFromNDArray(back, vals, -1));
  CHECK(MXNDArraySyncCopyFromNDArray(back, aux, 0));
  expect_on_gpu(back, 0);
  MXNDArrayFree(aux); MXNDArrayFree(vals);
  CHECK(MXNDArrayGetAuxNDArray(back, 0, &aux));
  CHECK(MXNDArrayGetDataNDArray(back, &vals));
  expect_on_gpu(aux, 0);
  expect_on_gpu(vals, 0);
  memset(got_ids, 0, sizeof got_ids);
  memset(got, 0, sizeof got);
  CHECK(MXNDArraySyncCopyToCPU(aux, got_ids, 3));
  CHECK(MXNDArraySyncCopyToCPU(vals, got, 9));
  EXPECT(memcmp(got_ids, rows, sizeof rows) == 0 && memcmp(got, d, sizeof d) == 0);
  MXNDArrayFree(aux); MXNDArrayFree(vals); MXNDArrayFree(back);
  MXNDArrayFree(data); MXNDArrayFree(ids); MXNDArrayFree(rsp);
}

/* gpu mode only: C API behaviour that has no CPU counterpart (printed to stderr-free
 * stdout only as "api: ok" so the two modes still compare equal). */
static void api_checks(void) {
  if (!gpu_mode) { printf("api: ok\n"); return; }
  uint32_t n = 1 << 20;
  NDArrayHandle h = make_value(DT_F32, n, 0, 0);
  expect_on_gpu(h, 0);
  row_sparse_api_checks();
  CHECK(MXNDArrayWaitToRead(h));
  CHECK(MXNDArrayWaitToWrite(h));
  uint64_t free_b = 0, total_b = 0;
  CHECK(MXGetGPUMemoryInformation64(0, &free_b, &total_b));
  EXPECT(total_b > 0 && free_b <= total_b);
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    alarm(20); /* a hang fails the test instead of blocking it */
    uint32_t s = 4;
    NDArrayHandle c;
    int rc = MXNDArrayCreateEx(&s, 1, DEV_GPU, 0, 0, DT_F32, &c);
    _exit(rc == -1 && strstr(MXGetLastError(), "fork") ? 0 : 4);
  }
  int status = 0;
  EXPECT(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
  MXNDArrayFree(h);
  printf("api: ok\n");
}

int main(int argc, char **argv) {
  if (argc < 2 || (strcmp(argv[1], "gpu") && strcmp(argv[1], "cpu"))) {
    fprintf(stderr, "usage: gpu_diff gpu|cpu [--small]\n");
    return 2;
  }
  gpu_mode = strcmp(argv[1], "gpu") == 0;
  small_sizes = argc > 2 && strcmp(argv[2], "--small") == 0;
  CHECK(MXGetGPUCount(&n_gpus));
  if (gpu_mode && n_gpus == 0) {
    printf("gpu_diff: skipped: no CUDA device (MXGetGPUCount = 0)\n");
    return 0;
  }
  if (n_gpus == 0) n_gpus = 1;
  static const int dtypes[] = {DT_F32, DT_F64, DT_F16, DT_BF16, DT_U8, DT_I8, DT_I32, DT_I64};
  const size_t sizes_full[] = {1, 7, 1023, 65537, 1000003};
  const size_t sizes_small[] = {1, 7, 1023};
  const size_t *sizes = small_sizes ? sizes_small : sizes_full;
  size_t n_sizes = small_sizes ? 3 : 5;
  const char *stores[] = {"local", "device"};
  for (int s = 0; s < 2; s++)
    for (int d = 0; d < 8; d++)
      for (size_t z = 0; z < n_sizes; z++)
        for (int v = 1; v <= 9; v += (z + 1 == n_sizes ? 4 : 1))
          dense_case(stores[s], dtypes[d], sizes[z], v, 0, 0);
  /* 64 MiB of float32 (an odd element count just under), 4 values. */
  if (!small_sizes) {
    dense_case("device", DT_F32, (64u << 20) / 4 - 3, 4, 0, 0);
    dense_case("local", DT_F32, (64u << 20) / 4 - 3, 4, 0, 0);
  }
  for (int s = 0; s < 2; s++) {
    dense_case(stores[s], DT_F32, 1023, 5, 1, 0);  /* mixed gpu/cpu values */
    dense_case(stores[s], DT_F16, 1023, 3, 0, 1);  /* updater */
    dense_case(stores[s], DT_BF16, 77, 4, 0, 1);
  }
  compression_case("2bit");
  compression_case("1bit");
  row_sparse_case();
  api_checks();
  CHECK(MXNotifyShutdown());
  printf("gpu_diff: done\n");
  return 0;
}
