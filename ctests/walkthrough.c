/* The seed walkthrough: MXNet's KVStore basics in C, with the exact numbers each step must
 * give. Runs unchanged against libkvstore.so and libmxnet.so. */
#include "common.h"

#define N 6 /* values of shape (2,3) */

static NDArrayHandle filled(float v, int dev) {
  float data[N];
  for (int i = 0; i < N; i++) data[i] = v;
  return f32_matrix(2, 3, data, dev);
}

static void expect(const char *step, NDArrayHandle h, float want) {
  float got = f32_uniform(h, N);
  printf("%-52s -> %g\n", step, got);
  if (got != want) {
    fprintf(stderr, "FAIL: %s gave %g, expected %g\n", step, got, want);
    exit(1);
  }
}

/* stored += 2 * input. The updater owns both handles and frees them. */
static void double_step(int key, NDArrayHandle recv, NDArrayHandle local, void *user) {
  (void)key;
  (void)user;
  update_add_scaled(recv, local, N, 2, NULL, NULL);
}

int main(void) {
  int version = 0;
  CHECK(MXGetVersion(&version));
  printf("MXNet C API version %d\n", version);

  KVStoreHandle kv;
  CHECK(MXKVStoreCreate("local", &kv));
  const char *type;
  CHECK(MXKVStoreGetType(kv, &type));
  printf("store type: %s\n", type);

  int k3 = 3;
  NDArrayHandle twos = filled(2, 0), out = filled(0, 0);
  CHECK(MXKVStoreInit(kv, 1, &k3, &twos));
  CHECK(MXKVStorePull(kv, 1, &k3, &out, 0));
  expect("init key 3 with 2s, pull", out, 2);

  NDArrayHandle eights = filled(8, 0);
  CHECK(MXKVStorePush(kv, 1, &k3, &eights, 0));
  CHECK(MXKVStorePull(kv, 1, &k3, &out, 0));
  expect("push 8, pull", out, 8);

  NDArrayHandle ones[4];
  int keys4[4] = {3, 3, 3, 3};
  for (int d = 0; d < 4; d++) ones[d] = filled(1, d);
  CHECK(MXKVStorePush(kv, 4, keys4, ones, 0));
  CHECK(MXKVStorePull(kv, 1, &k3, &out, 0));
  expect("push four 1s from cpu(0..3), pull", out, 4);

  CHECK(MXKVStoreSetUpdater(kv, double_step, NULL));
  CHECK(MXKVStorePull(kv, 1, &k3, &out, 0));
  expect("set updater stored += 2*input, pull", out, 4);

  CHECK(MXKVStorePush(kv, 1, &k3, &ones[0], 0));
  CHECK(MXKVStorePull(kv, 1, &k3, &out, 0));
  expect("push 1, pull", out, 6);

  NDArrayHandle outs[4];
  for (int d = 0; d < 4; d++) outs[d] = filled(0, d);
  CHECK(MXKVStorePull(kv, 4, keys4, outs, 0));
  for (int d = 0; d < 4; d++) {
    char step[64];
    snprintf(step, sizeof step, "pull into four outputs: output on cpu(%d)", d);
    expect(step, outs[d], 6);
  }

  int keys579[3] = {5, 7, 9};
  NDArrayHandle init3[3] = {ones[0], ones[1], ones[2]};
  NDArrayHandle out3[3] = {filled(0, 0), filled(0, 1), filled(0, 2)};
  CHECK(MXKVStoreInit(kv, 3, keys579, init3));
  CHECK(MXKVStorePush(kv, 3, keys579, init3, 0));
  CHECK(MXKVStorePull(kv, 3, keys579, out3, 0));
  for (int i = 0; i < 3; i++) {
    char step[64];
    snprintf(step, sizeof step, "init keys 5,7,9 with 1s, push 1s: key %d", keys579[i]);
    expect(step, out3[i], 3);
  }

  int keys12[12];
  NDArrayHandle vals12[12];
  for (int i = 0; i < 12; i++) {
    keys12[i] = keys579[i / 4];
    vals12[i] = ones[i % 4];
  }
  CHECK(MXKVStorePush(kv, 12, keys12, vals12, 0));
  CHECK(MXKVStorePull(kv, 3, keys579, out3, 0));
  for (int i = 0; i < 3; i++) {
    char step[64];
    snprintf(step, sizeof step, "push four 1s per key: key %d", keys579[i]);
    expect(step, out3[i], 11);
  }

  NDArrayHandle all[] = {twos, out, eights, ones[0], ones[1], ones[2], ones[3], outs[0], outs[1],
                         outs[2], outs[3], out3[0], out3[1], out3[2]};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) CHECK(MXNDArrayFree(all[i]));
  CHECK(MXKVStoreFree(kv));
  CHECK(MXNotifyShutdown());
  printf("walkthrough passed\n");
  return 0;
}
