/* Differential test of every dtype through init, multi-device push and pull, on local and
 * device stores: values are written and read back as raw element bytes, so no conversion of
 * ours takes part in the comparison. Values are exact in every dtype. */
#include "common.h"
#include <stdint.h>

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
  printf("done\n");
  return 0;
}
