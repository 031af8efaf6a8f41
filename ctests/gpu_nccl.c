/* The `nccl` store on GPUs (tests/gpu_standin.rs runs it on the CUDA stand-in with 1, 2 and 4
 * devices; it runs unchanged on real GPUs):
 *   - its results equal the `device` store's bit for bit (every dtype NCCL sums, 1 to all
 *     devices' values per key, sizes past the fused-launch limit, push, pull, push-pull,
 *     broadcast), and float32 sums equal a left fold computed here;
 *   - the first push summing several values fixes the device set and its first value's GPU
 *     holds every sum (an updater receives handles there, keys initialised later too);
 *   - each refusal (sparse arrays, ignore_sparse=false, row_sparse pull, compression, host
 *     values, two values on one GPU, an unsupported dtype, another device set, a pull not on
 *     the set) answers -1 with its message and leaves the store as it was, and usable.
 * Prints "gpu_nccl: ok" and the number of arrays compared. */
#include "common.h"
#include <stdbool.h>

static int n_gpus;
static long compared;

static NDArrayHandle make(int dev_type, int dev_id, int dt, uint32_t n, const void *bytes) {
  NDArrayHandle h;
  CHECK(MXNDArrayCreateEx(&n, 1, dev_type, dev_id, 0, dt, &h));
  if (bytes) CHECK(MXNDArraySyncCopyFromCPU(h, bytes, n));
  return h;
}

static unsigned char *read_all(NDArrayHandle h, int dt, uint32_t n) {
  unsigned char *b = malloc(dtype_size(dt) * n + 1);
  CHECK(MXNDArraySyncCopyToCPU(h, b, n));
  return b;
}

static void expect_same(NDArrayHandle a, NDArrayHandle b, int dt, uint32_t n, const char *what) {
  unsigned char *x = read_all(a, dt, n), *y = read_all(b, dt, n);
  if (memcmp(x, y, dtype_size(dt) * n) != 0) {
    fprintf(stderr, "%s: nccl and device differ (dtype %d, %u elements)\n", what, dt, n);
    exit(1);
  }
  compared++;
  free(x);
  free(y);
}

static uint64_t mix(uint64_t x) {
  x ^= x >> 33; x *= 0xff51afd7ed558ccdULL; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ULL; x ^= x >> 33;
  return x;
}

/* n elements of dtype dt for (seed): float exponents in a narrow range so the association
 * order shows in the rounding, some ±0, subnormals, infinities; integers that overflow. */
static void *pattern(int dt, uint32_t n, uint64_t seed) {
  unsigned char *b = malloc(dtype_size(dt) * n + 1);
  for (uint32_t i = 0; i < n; i++) {
    uint64_t r = mix(seed * 1000003ULL + i);
    unsigned char *p = b + dtype_size(dt) * i;
    switch (dt) {
      case DT_F32: {
        uint32_t bits = (uint32_t)((r >> 63) << 31) | (uint32_t)((127 - 6 + (r >> 8) % 12) << 23) | (uint32_t)(r & 0x7fffff);
        if (i % 101 == 7) bits = (uint32_t)(r & 0x807fffff); /* subnormal or ±0 */
        if (i % 211 == 13) bits = 0x7f800000u | (uint32_t)((r & 1) << 31); /* ±inf */
        memcpy(p, &bits, 4);
        break;
      }
      case DT_F64: {
        uint64_t bits = ((r >> 63) << 63) | ((uint64_t)(1023 - 20 + (r >> 8) % 40) << 52) | (r & 0xfffffffffffffULL);
        if (i % 101 == 7) bits = r & 0x800fffffffffffffULL;
        memcpy(p, &bits, 8);
        break;
      }
      case DT_F16: {
        /* Finite halves of every exponent: large ones overflow to inf when summed. */
        uint16_t h = (uint16_t)(r & 0xfbff);
        memcpy(p, &h, 2);
        break;
      }
      case DT_U8: p[0] = (unsigned char)r; break;
      case DT_I32: { int32_t v = (int32_t)(uint32_t)r; memcpy(p, &v, 4); break; }
      case DT_I64: { int64_t v = (int64_t)r; memcpy(p, &v, 8); break; }
      default: memset(p, (int)(r & 0x7f), dtype_size(dt)); break;
    }
  }
  return b;
}

static void expect_refused(int rc, const char *what, const char *needle) {
  if (rc != -1) { fprintf(stderr, "%s: returned %d, not -1\n", what, rc); exit(1); }
  const char *err = MXGetLastError();
  if (!strstr(err, needle)) { fprintf(stderr, "%s: message \"%s\" lacks \"%s\"\n", what, err, needle); exit(1); }
  printf("refused %s: %s\n", what, err);
}

/* ---- differential: nccl against device ------------------------------------------------- */

#define KEYS 3
static const int dtypes[] = {DT_F32, DT_F16, DT_F64, DT_U8, DT_I32, DT_I64};

/* Pushes `nv` values per key on gpu(nv-1), ..., gpu(0) (the root is the last GPU), pulls into
 * one output per value's GPU, three rounds (push + pull, push-pull, push + pull), into an nccl
 * and a device store; every output compared. nv == 1 also pulls into a host output. */
static void differential(int dt, uint32_t n, int nv) {
  KVStoreHandle kv[2];
  CHECK(MXKVStoreCreate("nccl", &kv[0]));
  CHECK(MXKVStoreCreate("device", &kv[1]));
  int keys[KEYS] = {5, 9, 2};
  uint32_t sizes[KEYS] = {n, 1, n + 3};
  for (int s = 0; s < 2; s++)
    for (int k = 0; k < KEYS; k++) {
      void *b = pattern(dt, sizes[k], 1 + (uint64_t)k);
      NDArrayHandle init = make(DEV_CPU, 0, dt, sizes[k], b);
      CHECK(MXKVStoreInit(kv[s], 1, &keys[k], &init));
      MXNDArrayFree(init);
      free(b);
    }
  int m = KEYS * nv;
  int *vkeys = malloc(sizeof(int) * (size_t)m);
  NDArrayHandle *vals = malloc(sizeof(NDArrayHandle) * (size_t)m), *outs[2];
  for (int s = 0; s < 2; s++) outs[s] = malloc(sizeof(NDArrayHandle) * (size_t)(m + KEYS));
  for (int round = 0; round < 3; round++) {
    /* Values interleaved across keys, as a framework pushes a layer's gradients. */
    for (int j = 0, i = 0; j < nv; j++)
      for (int k = 0; k < KEYS; k++, i++) {
        void *b = pattern(dt, sizes[k], 100 + (uint64_t)(round * 31 + k * 7 + j));
        vkeys[i] = keys[k];
        vals[i] = make(DEV_GPU, nv - 1 - j, dt, sizes[k], b);
        free(b);
        for (int s = 0; s < 2; s++) outs[s][i] = make(DEV_GPU, nv - 1 - j, dt, sizes[k], NULL);
      }
    int no = m;
    if (nv == 1) /* and a host output per key */
      for (int k = 0; k < KEYS; k++, no++) {
        vkeys[no] = keys[k];
        for (int s = 0; s < 2; s++) outs[s][no] = make(DEV_CPU, 0, dt, sizes[k], NULL);
      }
    for (int s = 0; s < 2; s++) {
      if (round == 1) {
        CHECK(MXKVStorePushPull(kv[s], (uint32_t)m, vkeys, (uint32_t)no, vkeys, vals, outs[s], 0));
      } else {
        CHECK(MXKVStorePush(kv[s], (uint32_t)m, vkeys, vals, 0));
        CHECK(MXKVStorePull(kv[s], (uint32_t)no, vkeys, outs[s], 0));
      }
    }
    for (int i = 0; i < no; i++) {
      int k = i < m ? i % KEYS : i - m;
      expect_same(outs[0][i], outs[1][i], dt, sizes[k], "pull");
    }
    if (dt == DT_F32 && round == 2) { /* the sum is the left fold in push order */
      for (int k = 0; k < KEYS; k++) {
        float *want = calloc(sizes[k], sizeof(float)), *got;
        for (int j = 0; j < nv; j++) {
          float *b = pattern(dt, sizes[k], 100 + (uint64_t)(round * 31 + k * 7 + j));
          for (uint32_t e = 0; e < sizes[k]; e++) want[e] = j ? want[e] + b[e] : b[e];
          free(b);
        }
        got = (float *)read_all(outs[0][k], DT_F32, sizes[k]);
        EXPECT(memcmp(got, want, sizeof(float) * sizes[k]) == 0);
        free(got);
        free(want);
      }
    }
    for (int i = 0; i < m; i++) MXNDArrayFree(vals[i]);
    for (int s = 0; s < 2; s++)
      for (int i = 0; i < no; i++) MXNDArrayFree(outs[s][i]);
  }
  /* Broadcast: new keys initialised from GPU values, pulled onto the same GPUs. */
  for (int s = 0; s < 2; s++) {
    int bkeys[2] = {40, 41};
    void *b = pattern(dt, n, 77);
    NDArrayHandle bv[2] = {make(DEV_GPU, 0, dt, n, b), make(DEV_GPU, nv - 1, dt, n, b)};
    free(b);
    /* Each key onto every GPU of the values (once the set is fixed, a pull must cover it). */
    int okeys[8], no = 0;
    for (int k = 0; k < 2; k++)
      for (int j = 0; j < nv; j++, no++) {
        okeys[no] = bkeys[k];
        outs[s][no] = make(DEV_GPU, j, dt, n, NULL);
      }
    CHECK(MXKVStoreBroadcast(kv[s], 2, bkeys, (uint32_t)no, okeys, bv, outs[s], 0));
    MXNDArrayFree(bv[0]);
    MXNDArrayFree(bv[1]);
  }
  for (int i = 0; i < 2 * nv; i++) expect_same(outs[0][i], outs[1][i], dt, n, "broadcast");
  for (int s = 0; s < 2; s++) {
    for (int i = 0; i < 2 * nv; i++) MXNDArrayFree(outs[s][i]);
    free(outs[s]);
    CHECK(MXKVStoreFree(kv[s]));
  }
  free(vals);
  free(vkeys);
}

/* ---- the root and updaters --------------------------------------------------------------- */

static int recv_dev[64], local_dev[64], n_updates;
static void add_twice(int key, NDArrayHandle recv, NDArrayHandle local, void *handle) {
  (void)key; (void)handle;
  int t, id;
  CHECK(MXNDArrayGetContext(recv, &t, &id));
  recv_dev[n_updates] = t == DEV_GPU ? id : -1 - t;
  CHECK(MXNDArrayGetContext(local, &t, &id));
  local_dev[n_updates] = t == DEV_GPU ? id : -1 - t;
  n_updates++;
  const uint32_t *shape;
  uint32_t ndim;
  CHECK(MXNDArrayGetShape(recv, &ndim, &shape));
  update_add_scaled(recv, local, shape[0], 2.0f, NULL, NULL);
}

static float pull_first(KVStoreHandle kv, int key, uint32_t n) {
  NDArrayHandle out = make(DEV_CPU, 0, DT_F32, n, NULL);
  CHECK(MXKVStorePull(kv, 1, &key, &out, 0));
  float v = f32_uniform(out, n);
  MXNDArrayFree(out);
  return v;
}

/* Once the set (gpu(0), gpu(1)) is fixed a pull covers it: element 0 of both outputs. */
static float pull_set(KVStoreHandle kv, int key, uint32_t n) {
  NDArrayHandle outs[2] = {make(DEV_GPU, 1, DT_F32, n, NULL), make(DEV_GPU, 0, DT_F32, n, NULL)};
  int keys[2] = {key, key};
  CHECK(MXKVStorePull(kv, 2, keys, outs, 0));
  float v = f32_uniform(outs[0], n);
  EXPECT(f32_uniform(outs[1], n) == v);
  MXNDArrayFree(outs[0]);
  MXNDArrayFree(outs[1]);
  return v;
}

static void root_and_updater(void) {
  if (n_gpus < 2) return;
  uint32_t n = 70000; /* past the fused launch */
  KVStoreHandle kv;
  CHECK(MXKVStoreCreate("nccl", &kv));
  CHECK(MXKVStoreSetUpdater(kv, add_twice, NULL));
  int k3 = 3, k12[2] = {1, 2};
  NDArrayHandle init = f32_filled(n, 1.0f, 0);
  NDArrayHandle inits[2] = {init, init};
  CHECK(MXKVStoreInit(kv, 2, k12, inits));
  NDArrayHandle g[4], g0b = make(DEV_GPU, 0, DT_F32, n, NULL);
  for (int i = 0; i < n_gpus && i < 4; i++) {
    g[i] = make(DEV_GPU, i, DT_F32, n, NULL);
    float *v = malloc(sizeof(float) * n);
    for (uint32_t e = 0; e < n; e++) v[e] = (float)(i + 1);
    CHECK(MXNDArraySyncCopyFromCPU(g[i], v, n));
    free(v);
  }
  /* A refused push fixes nothing, even when a key before the refused one would have fixed
   * the set (key 1 on gpu(1), gpu(0); key 2 twice on gpu(0)). */
  int two[2] = {1, 1}, bad_keys[4] = {1, 1, 2, 2};
  NDArrayHandle bad[4] = {g[1], g[0], g[0], g0b};
  expect_refused(MXKVStorePush(kv, 4, bad_keys, bad, 0), "push with two values of a key on one GPU", "distinct GPUs");
  EXPECT(n_updates == 0 && pull_first(kv, 1, n) == 1.0f);
  /* The first push summing several values: gpu(0) first, so gpu(0) is the root. */
  NDArrayHandle first[2] = {g[0], g[1]};
  CHECK(MXKVStorePush(kv, 2, two, first, 0));
  EXPECT(n_updates == 1 && recv_dev[0] == 0 && local_dev[0] == 0);
  EXPECT(pull_set(kv, 1, n) == 1.0f + 2.0f * 3.0f);
  /* Values in the other order: the sum still lands on the root, gpu(0). */
  NDArrayHandle swapped[2] = {g[1], g[0]};
  CHECK(MXKVStorePush(kv, 2, two, swapped, 0));
  EXPECT(n_updates == 2 && recv_dev[1] == 0 && local_dev[1] == 0);
  /* A key initialised after the set was fixed sums on the root too. */
  CHECK(MXKVStoreInit(kv, 1, &k3, &init));
  int k3s[2] = {3, 3};
  CHECK(MXKVStorePush(kv, 2, k3s, swapped, 0));
  EXPECT(n_updates == 3 && recv_dev[2] == 0 && local_dev[2] == 0);
  EXPECT(pull_set(kv, 3, n) == 7.0f);
  /* A single value is handed to the updater as it is, on its own GPU. */
  CHECK(MXKVStorePush(kv, 1, &k3, &g[1], 0));
  EXPECT(n_updates == 4 && recv_dev[3] == 1);
  EXPECT(pull_set(kv, 3, n) == 7.0f + 2.0f * 2.0f);
  printf("root: every sum on gpu(0), updater handles there\n");
  for (int i = 0; i < n_gpus && i < 4; i++) MXNDArrayFree(g[i]);
  MXNDArrayFree(g0b);
  MXNDArrayFree(init);
  CHECK(MXKVStoreFree(kv));
}

/* ---- refusals ----------------------------------------------------------------------------- */

static void refusals(void) {
  uint32_t n = 8;
  KVStoreHandle kv;
  CHECK(MXKVStoreCreate("NCCL", &kv));
  const char *type = NULL;
  CHECK(MXKVStoreGetType(kv, &type));
  EXPECT(strcmp(type, "nccl") == 0);
  int key = 7, keys2[2] = {7, 7}, k9s[2] = {9, 9};
  NDArrayHandle init = f32_filled(n, 5.0f, 0);
  CHECK(MXKVStoreInit(kv, 1, &key, &init));

  uint32_t shape = n;
  int aux_type = DT_I64;
  uint32_t aux_ndim = 1, aux_shape = 0;
  NDArrayHandle rsp, rid = make(DEV_CPU, 0, DT_I64, 1, NULL);
  CHECK(MXNDArrayCreateSparseEx(1, &shape, 1, DEV_GPU, 0, 0, DT_F32, 1, &aux_type, &aux_ndim, &aux_shape, &rsp));
  int key8 = 8;
  expect_refused(MXKVStoreInit(kv, 1, &key8, &rsp), "init with a row_sparse value", "dense arrays only: key 8");
  NDArrayHandle out = make(DEV_CPU, 0, DT_F32, n, NULL);
  expect_refused(MXKVStorePull(kv, 1, &key8, &out, 0), "pull of the key a refused init named", "key 8 has not been inited");
  expect_refused(MXKVStorePush(kv, 1, &key, &rsp, 0), "push of a row_sparse value", "row_sparse pushed value");
  expect_refused(MXKVStorePull(kv, 1, &key, &rsp, 0), "pull into a row_sparse output", "row_sparse output");
  expect_refused(MXKVStorePullWithSparse(kv, 1, &key, &out, 0, false), "pull with ignore_sparse=false", "ignore_sparse");
  expect_refused(MXKVStorePullRowSparse(kv, 1, &key, &rsp, &rid, 0), "row_sparse pull", "no row_sparse pull");
  const char *ck[2] = {"type", "threshold"}, *cv[2] = {"2bit", "0.5"};
  expect_refused(MXKVStoreSetGradientCompression(kv, 2, ck, cv), "gradient compression", "does not support gradient compression");

  NDArrayHandle host = f32_filled(n, 1.0f, 0), g0 = make(DEV_GPU, 0, DT_F32, n, NULL), g0b = make(DEV_GPU, 0, DT_F32, n, NULL);
  CHECK(MXNDArraySyncCopyFromNDArray(g0, host, -1));
  CHECK(MXNDArraySyncCopyFromNDArray(g0b, host, -1));
  NDArrayHandle mixed[2] = {g0, host};
  expect_refused(MXKVStorePush(kv, 2, keys2, mixed, 0), "a host value among several", "GPUs only: key 7 has a value on cpu(0)");
  NDArrayHandle same[2] = {g0, g0b};
  expect_refused(MXKVStorePush(kv, 2, keys2, same, 0), "two values on one GPU", "distinct GPUs");
  EXPECT(pull_first(kv, 7, n) == 5.0f);

  /* Single values need no device set: a host value, an int8 one. */
  CHECK(MXKVStorePush(kv, 1, &key, &host, 0));
  EXPECT(pull_first(kv, 7, n) == 1.0f);
  int key9 = 9;
  NDArrayHandle i8 = make(DEV_GPU, n_gpus > 1 ? 1 : 0, DT_I8, n, NULL), i8b = NULL;
  CHECK(MXKVStoreInit(kv, 1, &key9, &i8));
  CHECK(MXKVStorePush(kv, 1, &key9, &i8, 0));
  CHECK(MXKVStorePull(kv, 1, &key9, &i8, 0));
  CHECK(MXNDArrayWaitAll());

  if (n_gpus >= 2) {
    i8b = make(DEV_GPU, 0, DT_I8, n, NULL);
    NDArrayHandle i8s[2] = {i8b, i8};
    expect_refused(MXKVStorePush(kv, 2, k9s, i8s, 0), "int8 values summed", "cannot sum or broadcast int8 values (key 9)");
    /* Fix the set on gpu(1), gpu(0): key 7 = 1 + 1. */
    NDArrayHandle g1 = make(DEV_GPU, 1, DT_F32, n, NULL), o1 = make(DEV_GPU, 1, DT_F32, n, NULL);
    CHECK(MXNDArraySyncCopyFromNDArray(g1, host, -1));
    NDArrayHandle set[2] = {g1, g0};
    CHECK(MXKVStorePush(kv, 2, keys2, set, 0));
    NDArrayHandle on_set[2] = {o1, g0b};
    CHECK(MXKVStorePull(kv, 2, keys2, on_set, 0));
    EXPECT(f32_uniform(o1, n) == 2.0f && f32_uniform(g0b, n) == 2.0f);
    /* Pulls must now cover the set, one output per GPU. */
    expect_refused(MXKVStorePull(kv, 1, &key, &out, 0), "pull into one host output", "must have one output on each of them");
    expect_refused(MXKVStorePull(kv, 1, &key, &g0, 0), "pull into one GPU output", "one set of devices, gpu(0), gpu(1)");
    NDArrayHandle twice[2] = {g0, g0b};
    expect_refused(MXKVStorePull(kv, 2, keys2, twice, 0), "pull into two outputs on gpu(0)", "one output on each");
    NDArrayHandle wide[2] = {make(DEV_GPU, 0, DT_F64, n, NULL), make(DEV_GPU, 1, DT_F64, n, NULL)};
    expect_refused(MXKVStorePull(kv, 2, keys2, wide, 0), "pull into float64 outputs", "without casting");
    NDArrayHandle i8s_on_set[2] = {i8b, i8};
    expect_refused(MXKVStorePull(kv, 2, k9s, i8s_on_set, 0), "int8 pull onto the set", "cannot sum or broadcast int8");
    /* A push-pull whose pull is refused pushes nothing. */
    expect_refused(MXKVStorePushPull(kv, 2, keys2, 1, &key, set, &out, 0), "push-pull into one output", "one output on each");
    if (n_gpus >= 3) {
      NDArrayHandle g2 = make(DEV_GPU, 2, DT_F32, n, NULL);
      int keys3[3] = {7, 7, 7};
      NDArrayHandle three[3] = {g0, g1, g2};
      expect_refused(MXKVStorePush(kv, 3, keys3, three, 0), "push on three GPUs", "key 7's values are on gpu(0), gpu(1), gpu(2)");
      MXNDArrayFree(g2);
    }
    if (n_gpus >= 4) {
      NDArrayHandle g2 = make(DEV_GPU, 2, DT_F32, n, NULL), g3 = make(DEV_GPU, 3, DT_F32, n, NULL);
      NDArrayHandle other[2] = {g3, g2};
      expect_refused(MXKVStorePush(kv, 2, keys2, other, 0), "push on another set", "one set of devices, gpu(0), gpu(1) (fixed");
      MXNDArrayFree(g2);
      MXNDArrayFree(g3);
    }
    /* Nothing changed; a single value is still stored unchecked, and the store works. */
    CHECK(MXKVStorePull(kv, 2, keys2, on_set, 0));
    EXPECT(f32_uniform(o1, n) == 2.0f && f32_uniform(g0b, n) == 2.0f);
    CHECK(MXKVStorePush(kv, 1, &key, &g0b, 0));
    CHECK(MXKVStorePushPull(kv, 2, keys2, 2, keys2, set, on_set, 0));
    EXPECT(f32_uniform(o1, n) == 2.0f && f32_uniform(g0, n) == 1.0f);
    CHECK(MXKVStorePush(kv, 1, &key, &o1, 0));
    CHECK(MXKVStorePull(kv, 2, keys2, set, 0));
    EXPECT(f32_uniform(g1, n) == 2.0f && f32_uniform(g0, n) == 2.0f);
    MXNDArrayFree(g1); MXNDArrayFree(o1); MXNDArrayFree(wide[0]); MXNDArrayFree(wide[1]);
  } else {
    /* One GPU: several values of a key can never be summed (one value per GPU). */
    expect_refused(MXKVStorePush(kv, 2, keys2, same, 0), "two values on the only GPU", "distinct GPUs");
  }
  MXNDArrayFree(host); MXNDArrayFree(g0); MXNDArrayFree(g0b); MXNDArrayFree(i8);
  if (i8b) MXNDArrayFree(i8b);
  MXNDArrayFree(rsp); MXNDArrayFree(rid); MXNDArrayFree(out); MXNDArrayFree(init);
  CHECK(MXKVStoreFree(kv));
}

int main(void) {
  CHECK(MXGetGPUCount(&n_gpus));
  EXPECT(n_gpus > 0);
  const struct { const char *name; bool enabled; } *f = NULL;
  size_t nf = 0;
  CHECK(MXLibInfoFeatures((const struct LibFeature **)(const void *)&f, &nf));
  bool nccl_on = false;
  for (size_t i = 0; i < nf; i++) if (!strcmp(f[i].name, "NCCL")) nccl_on = f[i].enabled;
  EXPECT(nccl_on);
  refusals();
  root_and_updater();
  for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++)
    for (int nv = 1; nv <= n_gpus; nv++) differential(dtypes[d], dtypes[d] == DT_F32 ? 70000 : 1000, nv);
  printf("gpu_nccl: ok (%d devices, %ld arrays compared)\n", n_gpus, compared);
  return 0;
}
