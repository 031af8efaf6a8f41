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
  printf("done\n");
  return 0;
}
