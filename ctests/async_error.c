/* An asynchronous op that fails after its call returned is reported at the next wait on what it
 * wrote, as MXNet 1.9 does: WaitToRead, SyncCopyToCPU and WaitAll answer -1 with the message,
 * once; arrays and keys the failure did not reach, and the store, keep working. The failure is
 * provoked by the test-only failpoint KVSTORE_TEST_FAILPOINT: host sums into 7 elements fail
 * with an error, sums into 9 elements panic. libkvstore only (libmxnet.so has no failpoint). */
#define _POSIX_C_SOURCE 200112L
#include "common.h"

static int mentions(const char *needle) { return strstr(MXGetLastError(), needle) != NULL; }

static void push2(KVStoreHandle kv, int key, uint32_t n, float a, float b) {
  NDArrayHandle vals[2] = {f32_filled(n, a, 0), f32_filled(n, b, 1)};
  int keys[2] = {key, key};
  CHECK(MXKVStorePush(kv, 2, keys, vals, 0));
  CHECK(MXNDArrayFree(vals[0]));
  CHECK(MXNDArrayFree(vals[1]));
}

static void pull(KVStoreHandle kv, int key, NDArrayHandle out) {
  CHECK(MXKVStorePull(kv, 1, &key, &out, 0));
}

static void expect_all(NDArrayHandle h, uint32_t n, float want) {
  float buf[16];
  CHECK(MXNDArraySyncCopyToCPU(h, buf, n));
  for (uint32_t i = 0; i < n; i++) EXPECT(buf[i] == want);
}

int main(void) {
  /* Read when the first sum runs: set before any call. */
  setenv("KVSTORE_TEST_FAILPOINT", "sum-error:7,sum-panic:9", 1);
  KVStoreHandle kv;
  CHECK(MXKVStoreCreate("local", &kv));
  int keys[3] = {3, 5, 9};
  NDArrayHandle init[3] = {f32_filled(7, 1, 0), f32_filled(16, 1, 0), f32_filled(9, 1, 0)};
  CHECK(MXKVStoreInit(kv, 3, keys, init));
  NDArrayHandle out7 = f32_filled(7, 0, 0), out16 = f32_filled(16, 0, 0), out9 = f32_filled(9, 0, 0);

  /* The push returns 0: the sum fails later, inside its op. The pull reads the failed value, so
   * its output carries the failure; WaitToRead reports it, once. */
  push2(kv, 3, 7, 2, 3);
  pull(kv, 3, out7);
  EXPECT(MXNDArrayWaitToRead(out7) == -1);
  EXPECT(mentions("MXNDArrayWaitToRead") && mentions("the host sum of 7 elements failed"));
  CHECK(MXNDArrayWaitToRead(out7));
  /* The failed sum left the stored value as it was. */
  pull(kv, 3, out7);
  expect_all(out7, 7, 1);

  /* An unrelated key works throughout. */
  push2(kv, 5, 16, 2, 3);
  pull(kv, 5, out16);
  expect_all(out16, 16, 5);

  /* SyncCopyToCPU reports it too. */
  push2(kv, 3, 7, 2, 3);
  pull(kv, 3, out7);
  float buf[16];
  EXPECT(MXNDArraySyncCopyToCPU(out7, buf, 7) == -1);
  EXPECT(mentions("MXNDArraySyncCopyToCPU") && mentions("the host sum of 7 elements failed"));
  CHECK(MXNDArraySyncCopyToCPU(out7, buf, 7));

  /* WaitAll reports the first failure since the last WaitAll, then none. */
  push2(kv, 3, 7, 2, 3);
  push2(kv, 5, 16, 1, 1);
  EXPECT(MXNDArrayWaitAll() == -1);
  EXPECT(mentions("MXNDArrayWaitAll") && mentions("the host sum of 7 elements failed"));
  CHECK(MXNDArrayWaitAll());
  pull(kv, 5, out16);
  expect_all(out16, 16, 2);

  /* A panic inside an op is caught and reported the same way. */
  push2(kv, 9, 9, 2, 3);
  pull(kv, 9, out9);
  EXPECT(MXNDArrayWaitToRead(out9) == -1);
  EXPECT(mentions("panicked") && mentions("the host sum of 9 elements panicked"));
  CHECK(MXNDArrayWaitToWrite(out9));

  /* The store still takes new keys and serves every key. */
  int key11 = 11;
  NDArrayHandle init11 = f32_filled(4, 6, 0), out4 = f32_filled(4, 0, 0);
  CHECK(MXKVStoreInit(kv, 1, &key11, &init11));
  pull(kv, key11, out4);
  expect_all(out4, 4, 6);
  pull(kv, 3, out7);
  expect_all(out7, 7, 1);
  CHECK(MXNDArrayWaitAll());

  NDArrayHandle all[] = {init[0], init[1], init[2], out7, out16, out9, init11, out4};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) CHECK(MXNDArrayFree(all[i]));
  CHECK(MXKVStoreFree(kv));
  printf("async errors passed\n");
  return 0;
}
