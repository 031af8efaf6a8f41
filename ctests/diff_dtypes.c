/* Differential test of every dtype through init, multi-device push and pull, on local and
 * device stores: values are written and read back as raw element bytes, so no conversion of
 * ours takes part in the comparison. Values are exact in every dtype. */
#include "common.h"
#include <stdint.h>
#include <stdlib.h>

#define N 4

static const int DTYPES[] = {DT_F32, DT_F64, DT_F16, DT_U8, DT_I32, DT_I8, DT_I64, DT_BOOL, DT_BF16};
static const char *DTYPE_NAMES[] = {"float32", "float64", "float16", "uint8", "int32", "int8", "int64", "bool", "bfloat16"};

static NDArrayHandle make(int dt, int dev, const double *values) {
  uint32_t n = N;
  NDArrayHandle h;
  CHECK(MXNDArrayCreateEx(&n, 1, DEV_CPU, dev, 0, dt, &h));
  unsigned char buf[N * 8];
  for (int i = 0; i < N; i++) encode(dt, values[i], buf + i * dtype_size(dt));
  CHECK(MXNDArraySyncCopyFromCPU(h, buf, N));
  return h;
}

static void print_raw(const char *label, NDArrayHandle h, int dt) {
  unsigned char buf[N * 8];
  CHECK(MXNDArraySyncCopyToCPU(h, buf, N));
  printf("%s:", label);
  for (size_t i = 0; i < N * dtype_size(dt); i++) printf("%s%02x", i % dtype_size(dt) ? "" : " ", buf[i]);
  printf("\n");
}

/* ---- rounding of float16 / bfloat16 sums ------------------------------------------------
 * Both libraries round to the half type after every addition. Pseudo-random finite values of
 * nearby magnitudes make most additions round; lengths cover whole vector steps and a tail
 * (37), and an array big enough to take the blocked path of big sums (hashed). */

static uint32_t rng = 12345;
static uint16_t next_half(int dt) {
  rng = rng * 1664525u + 1013904223u;
  uint16_t sign = (rng >> 31) ? 0x8000 : 0;
  if (dt == DT_F16) return sign | (uint16_t)((13 + (rng >> 8) % 5) << 10) | (uint16_t)((rng >> 12) & 0x3ff);
  return sign | (uint16_t)((125 + (rng >> 8) % 5) << 7) | (uint16_t)((rng >> 12) & 0x7f);
}

static NDArrayHandle make_half(int dt, int dev, uint32_t n) {
  NDArrayHandle h;
  CHECK(MXNDArrayCreateEx(&n, 1, DEV_CPU, dev, 0, dt, &h));
  uint16_t *buf = malloc(2 * (size_t)n);
  for (uint32_t i = 0; i < n; i++) buf[i] = next_half(dt);
  CHECK(MXNDArraySyncCopyFromCPU(h, buf, n));
  free(buf);
  return h;
}

static void half_rounding(void) {
  const char *types[] = {"local", "device"};
  const int dts[] = {DT_F16, DT_BF16};
  const uint32_t lens[] = {37, 600000};
  const int counts[] = {2, 4, 5};
  for (int t = 0; t < 2; t++)
    for (int d = 0; d < 2; d++)
      for (int l = 0; l < 2; l++)
        for (int c = 0; c < 3; c++) {
          uint32_t n = lens[l];
          KVStoreHandle kv;
          CHECK(MXKVStoreCreate(types[t], &kv));
          int key = 3, keys[5] = {3, 3, 3, 3, 3};
          NDArrayHandle init = make_half(dts[d], 0, n), vals[5];
          CHECK(MXKVStoreInit(kv, 1, &key, &init));
          for (int i = 0; i < counts[c]; i++) vals[i] = make_half(dts[d], i % 4, n);
          CHECK(MXKVStorePush(kv, (uint32_t)counts[c], keys, vals, 0));
          CHECK(MXKVStorePull(kv, 1, &key, &init, 0));
          uint16_t *out = malloc(2 * (size_t)n);
          CHECK(MXNDArraySyncCopyToCPU(init, out, n));
          printf("%s %s sum of %d x %u:", types[t], dts[d] == DT_F16 ? "float16" : "bfloat16", counts[c], n);
          if (n <= 64) {
            for (uint32_t i = 0; i < n; i++) printf(" %04x", out[i]);
          } else {
            uint64_t hash = 1469598103934665603ull;
            for (uint32_t i = 0; i < n; i++) hash = (hash ^ out[i]) * 1099511628211ull;
            printf(" fnv %016llx", (unsigned long long)hash);
          }
          printf("\n");
          free(out);
          for (int i = 0; i < counts[c]; i++) CHECK(MXNDArrayFree(vals[i]));
          CHECK(MXNDArrayFree(init));
          CHECK(MXKVStoreFree(kv));
        }
}

/* ---- big float sums pulled right behind their push ----------------------------------------
 * A pull queued behind its push (or a push-pull) of a key of at least 1 MiB is written by the
 * sum itself in libkvstore: the outputs must hold the same bits as MXNet's copies of the
 * stored value. Nearby magnitudes make the association show; the length ends mid-vector. */

static NDArrayHandle make_wide(int dt, int dev, uint32_t n) {
  NDArrayHandle h;
  CHECK(MXNDArrayCreateEx(&n, 1, DEV_CPU, dev, 0, dt, &h));
  size_t size = dt == DT_F64 ? 8 : 4;
  unsigned char *buf = malloc(size * (size_t)n);
  for (uint32_t i = 0; i < n; i++) {
    rng = rng * 1664525u + 1013904223u;
    double v = (double)(rng >> 8) * 1e-4 - 800.0 + (double)((rng >> 3) % 3) * 1e5;
    if (dt == DT_F64) memcpy(buf + 8 * (size_t)i, &v, 8);
    else { float f = (float)v; memcpy(buf + 4 * (size_t)i, &f, 4); }
  }
  CHECK(MXNDArraySyncCopyFromCPU(h, buf, n));
  free(buf);
  return h;
}

static void print_hash(const char *label, NDArrayHandle h, int dt, uint32_t n) {
  size_t size = dt == DT_F64 ? 8 : 4;
  unsigned char *buf = malloc(size * (size_t)n);
  CHECK(MXNDArraySyncCopyToCPU(h, buf, n));
  uint64_t hash = 1469598103934665603ull;
  for (size_t i = 0; i < size * (size_t)n; i++) hash = (hash ^ buf[i]) * 1099511628211ull;
  printf("%s: fnv %016llx\n", label, (unsigned long long)hash);
  free(buf);
}

static void big_sums_pulled_behind(void) {
  const char *types[] = {"local", "device"};
  const int dts[] = {DT_F32, DT_F64};
  const int counts[] = {1, 2, 4, 5};
  const uint32_t n = 270001;
  for (int t = 0; t < 2; t++)
    for (int d = 0; d < 2; d++)
      for (int c = 0; c < 4; c++) {
        KVStoreHandle kv;
        CHECK(MXKVStoreCreate(types[t], &kv));
        int keys[5] = {8, 8, 8, 8, 8};
        NDArrayHandle init = make_wide(dts[d], 0, n), vals[5], outs[2];
        CHECK(MXKVStoreInit(kv, 1, keys, &init));
        for (int i = 0; i < counts[c]; i++) vals[i] = make_wide(dts[d], i % 4, n);
        for (int o = 0; o < 2; o++) outs[o] = make_wide(dts[d], o + 1, n);
        char label[96];
        CHECK(MXKVStorePush(kv, (uint32_t)counts[c], keys, vals, 0));
        CHECK(MXKVStorePull(kv, 2, keys, outs, 0));
        for (int o = 0; o < 2; o++) {
          snprintf(label, sizeof label, "%s %s push %d then pull, output %d", types[t], dts[d] == DT_F64 ? "float64" : "float32", counts[c], o);
          print_hash(label, outs[o], dts[d], n);
        }
        CHECK(MXKVStorePushPull(kv, (uint32_t)counts[c], keys, 2, keys, vals, outs, 0));
        for (int o = 0; o < 2; o++) {
          snprintf(label, sizeof label, "%s %s pushpull %d, output %d", types[t], dts[d] == DT_F64 ? "float64" : "float32", counts[c], o);
          print_hash(label, outs[o], dts[d], n);
        }
        CHECK(MXKVStorePull(kv, 1, keys, &init, 0));
        snprintf(label, sizeof label, "%s %s stored after %d", types[t], dts[d] == DT_F64 ? "float64" : "float32", counts[c]);
        print_hash(label, init, dts[d], n);
        for (int i = 0; i < counts[c]; i++) CHECK(MXNDArrayFree(vals[i]));
        for (int o = 0; o < 2; o++) CHECK(MXNDArrayFree(outs[o]));
        CHECK(MXNDArrayFree(init));
        CHECK(MXKVStoreFree(kv));
      }
}

int main(void) {
  const char *types[] = {"local", "device"};
  const double init_v[N] = {1, 2, 3, 4}, push_v[N] = {1, 0, 5, 7}, bool_v[N] = {1, 0, 1, 0};
  for (int t = 0; t < 2; t++) {
    for (size_t d = 0; d < sizeof DTYPES / sizeof DTYPES[0]; d++) {
      int dt = DTYPES[d];
      char label[96];
      KVStoreHandle kv;
      CHECK(MXKVStoreCreate(types[t], &kv));
      int key = 5, got_dt = -1;
      NDArrayHandle init = make(dt, 0, dt == DT_BOOL ? bool_v : init_v);
      CHECK(MXKVStoreInit(kv, 1, &key, &init));
      NDArrayHandle out = make(dt, 1, init_v);
      CHECK(MXKVStorePull(kv, 1, &key, &out, 0));
      CHECK(MXNDArrayGetDType(out, &got_dt));
      snprintf(label, sizeof label, "%s %s init (dtype %d)", types[t], DTYPE_NAMES[d], got_dt);
      print_raw(label, out, dt);
      /* three values from cpu(0..2), summed in the stored dtype; a second push of three */
      NDArrayHandle vals[3];
      int keys[3] = {key, key, key};
      for (int i = 0; i < 3; i++) vals[i] = make(dt, i, dt == DT_BOOL ? bool_v : push_v);
      /* MXNet has no bool reduction (bad_input.c checks that we refuse it) */
      for (int round = 0; round < 2 && dt != DT_BOOL; round++) {
        CHECK(MXKVStorePush(kv, 3, keys, vals, 0));
        CHECK(MXKVStorePull(kv, 1, &key, &out, 0));
        snprintf(label, sizeof label, "%s %s push 3 round %d", types[t], DTYPE_NAMES[d], round);
        print_raw(label, out, dt);
      }
      /* one value: assignment */
      CHECK(MXKVStorePush(kv, 1, &key, &vals[2], 0));
      CHECK(MXKVStorePull(kv, 1, &key, &out, 0));
      snprintf(label, sizeof label, "%s %s push 1", types[t], DTYPE_NAMES[d]);
      print_raw(label, out, dt);
      for (int i = 0; i < 3; i++) CHECK(MXNDArrayFree(vals[i]));
      CHECK(MXNDArrayFree(init));
      CHECK(MXNDArrayFree(out));
      CHECK(MXKVStoreFree(kv));
    }
  }
  half_rounding();
  big_sums_pulled_behind();
  printf("done\n");
  return 0;
}
