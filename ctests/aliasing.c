/* Aliasing: an updater's `recv` and `local` handles are the caller's to keep, and a kept
 * `local` shares the stored value's memory (a kept `recv` of a several-value push is the
 * store's merge buffer). Pushing such a handle back to its own key — alone, with other
 * values, with and without an updater, small and big arrays, compressed or not — must
 * answer correctly (a sum reads all its sources before writing its destination) and must
 * not deadlock in the call or in a later pull or wait. A watchdog fails the program if
 * anything hangs. */
#include "common.h"
#include <unistd.h>

#define SMALL 4
#define BIG (1u << 16) /* 256 KiB: runs on a worker, not inline */

static NDArrayHandle kept_recv[2], kept_local[2];
static int keeping = 0;

/* local += recv; while `keeping`, the first call per key keeps both handles. */
static void add(int key, NDArrayHandle recv, NDArrayHandle local, void *user) {
  (void)user;
  size_t n = key == 0 ? SMALL : BIG;
  float *r = malloc(sizeof(float) * n), *l = malloc(sizeof(float) * n);
  CHECK(MXNDArraySyncCopyToCPU(recv, r, n));
  CHECK(MXNDArraySyncCopyToCPU(local, l, n));
  for (size_t i = 0; i < n; i++) l[i] += r[i];
  CHECK(MXNDArraySyncCopyFromCPU(local, l, n));
  free(r);
  free(l);
  if (keeping && kept_local[key] == NULL) {
    kept_recv[key] = recv;
    kept_local[key] = local;
  } else {
    CHECK(MXNDArrayFree(recv));
    CHECK(MXNDArrayFree(local));
  }
}

static size_t len_of(int key) { return key == 0 ? SMALL : BIG; }

static void expect_key(KVStoreHandle kv, int key, float want, const char *what) {
  NDArrayHandle out = f32_filled((uint32_t)len_of(key), -1, 0);
  CHECK(MXKVStorePull(kv, 1, &key, &out, 0));
  float got = f32_uniform(out, len_of(key));
  printf("%s, key %d: %g (expected %g)\n", what, key, got, want);
  EXPECT(got == want);
  CHECK(MXNDArrayFree(out));
}

static void plain(const char *type) {
  KVStoreHandle kv;
  CHECK(MXKVStoreCreate(type, &kv));
  CHECK(MXKVStoreSetUpdater(kv, add, NULL));
  int keys[2] = {0, 1};
  NDArrayHandle ones[2] = {f32_filled(SMALL, 1, 0), f32_filled(BIG, 1, 0)};
  CHECK(MXKVStoreInit(kv, 2, keys, ones));
  /* Two values per key: recv is the merge buffer (2), local = 1 + 2. Keep both. */
  keeping = 1;
  for (int k = 0; k < 2; k++) {
    NDArrayHandle two[2] = {ones[k], ones[k]};
    int kk[2] = {k, k};
    CHECK(MXKVStorePush(kv, 2, kk, two, 0));
  }
  keeping = 0;
  EXPECT(kept_local[0] && kept_local[1]);
  for (int k = 0; k < 2; k++) expect_key(kv, k, 3, "kept");

  /* With the updater: local alone (recv = local: local = 3 + 3). */
  CHECK(MXKVStorePush(kv, 2, keys, kept_local, 0));
  for (int k = 0; k < 2; k++) expect_key(kv, k, 6, "updater, local alone");
  /* local with another value: merge = 6 + 1, local = 6 + 7. */
  for (int k = 0; k < 2; k++) {
    int kk[2] = {k, k};
    NDArrayHandle v[2] = {kept_local[k], ones[k]};
    CHECK(MXKVStorePush(kv, 2, kk, v, 0));
  }
  for (int k = 0; k < 2; k++) expect_key(kv, k, 13, "updater, local + 1");
  /* The kept merge buffer (7) back into itself: merge = 7 + 1, local = 13 + 8. */
  {
    int kk[4] = {0, 0, 1, 1};
    NDArrayHandle v[4] = {kept_recv[0], ones[0], kept_recv[1], ones[1]};
    CHECK(MXKVStorePush(kv, 4, kk, v, 0));
  }
  for (int k = 0; k < 2; k++) expect_key(kv, k, 21, "updater, merge buffer + 1");
  /* A pull into the kept local (the stored value itself) changes nothing. */
  CHECK(MXKVStorePull(kv, 2, keys, kept_local, 0));
  CHECK(MXNDArrayWaitAll());
  for (int k = 0; k < 2; k++) expect_key(kv, k, 21, "pull into local");

  /* Without an updater the sum is stored: local alone, then with others. */
  CHECK(MXKVStoreSetUpdater(kv, NULL, NULL));
  CHECK(MXKVStorePush(kv, 2, keys, kept_local, 0));
  CHECK(MXNDArrayWaitAll());
  for (int k = 0; k < 2; k++) expect_key(kv, k, 21, "assign, local alone");
  {
    int kk[6] = {0, 0, 0, 1, 1, 1};
    NDArrayHandle v[6] = {kept_local[0], kept_local[0], ones[0], kept_local[1], kept_local[1], ones[1]};
    CHECK(MXKVStorePush(kv, 6, kk, v, 0));
  }
  CHECK(MXNDArrayWaitToRead(kept_local[0]));
  CHECK(MXNDArrayWaitToRead(kept_local[1]));
  for (int k = 0; k < 2; k++) expect_key(kv, k, 43, "assign, local + local + 1");
  /* In-place push-pull of the stored value itself. */
  CHECK(MXKVStorePushPull(kv, 2, keys, 2, keys, kept_local, kept_local, 0));
  CHECK(MXNDArrayWaitAll());
  for (int k = 0; k < 2; k++) expect_key(kv, k, 43, "push-pull in place");
  EXPECT(f32_uniform(kept_local[1], BIG) == 43);

  for (int k = 0; k < 2; k++) {
    CHECK(MXNDArrayFree(kept_recv[k]));
    CHECK(MXNDArrayFree(kept_local[k]));
    CHECK(MXNDArrayFree(ones[k]));
    kept_recv[k] = kept_local[k] = NULL;
  }
  CHECK(MXKVStoreFree(kv));
}

/* A device store with 2-bit compression: the compressed sum reads the kept local while
 * writing the stored value (0.5 quantises to exactly 0.5 with residual 0). */
static void compressed(void) {
  KVStoreHandle kv;
  CHECK(MXKVStoreCreate("device", &kv));
  const char *pk[2] = {"type", "threshold"}, *pv[2] = {"2bit", "0.5"};
  CHECK(MXKVStoreSetGradientCompression(kv, 2, pk, pv));
  CHECK(MXKVStoreSetUpdater(kv, add, NULL));
  int keys[2] = {0, 1};
  NDArrayHandle zero[2] = {f32_filled(SMALL, 0, 0), f32_filled(BIG, 0, 0)};
  NDArrayHandle half[2] = {f32_filled(SMALL, 0.5f, 0), f32_filled(BIG, 0.5f, 0)};
  CHECK(MXKVStoreInit(kv, 2, keys, zero));
  keeping = 1;
  CHECK(MXKVStorePush(kv, 2, keys, half, 0)); /* local = 0 + 0.5 */
  keeping = 0;
  EXPECT(kept_local[0] && kept_local[1]);
  CHECK(MXKVStoreSetUpdater(kv, NULL, NULL));
  CHECK(MXKVStorePush(kv, 2, keys, kept_local, 0)); /* stored = q(0.5) */
  CHECK(MXNDArrayWaitAll());
  for (int k = 0; k < 2; k++) expect_key(kv, k, 0.5f, "compressed, local alone");
  {
    int kk[4] = {0, 0, 1, 1};
    NDArrayHandle v[4] = {kept_local[0], half[0], kept_local[1], half[1]};
    CHECK(MXKVStorePush(kv, 4, kk, v, 0)); /* q(0.5) + q(0.5) */
  }
  for (int k = 0; k < 2; k++) expect_key(kv, k, 1, "compressed, local + 0.5");
  for (int k = 0; k < 2; k++) {
    CHECK(MXNDArrayFree(kept_recv[k]));
    CHECK(MXNDArrayFree(kept_local[k]));
    CHECK(MXNDArrayFree(zero[k]));
    CHECK(MXNDArrayFree(half[k]));
    kept_recv[k] = kept_local[k] = NULL;
  }
  CHECK(MXKVStoreFree(kv));
}

/* local = recv - local, after checking that the two are different arrays. */
static void difference(int key, NDArrayHandle recv, NDArrayHandle local, void *user) {
  (void)user;
  size_t n = len_of(key);
  void *r_data, *l_data;
  CHECK(MXNDArrayGetData(recv, &r_data));
  CHECK(MXNDArrayGetData(local, &l_data));
  EXPECT(r_data != l_data);
  float *r = malloc(sizeof(float) * n), *l = malloc(sizeof(float) * n);
  CHECK(MXNDArraySyncCopyToCPU(recv, r, n));
  CHECK(MXNDArraySyncCopyToCPU(local, l, n));
  for (size_t i = 0; i < n; i++) l[i] = r[i] - l[i];
  CHECK(MXNDArraySyncCopyFromCPU(local, l, n));
  free(r);
  free(l);
  CHECK(MXNDArrayFree(recv));
  CHECK(MXNDArrayFree(local));
}

/* Pushes without an updater, then with one: the updater gets the sum and the stored value as
 * two arrays (MXNet keeps the pushed array, or with several values the key's merge buffer, as
 * the stored value, and then hands that one array as both). Pushed again with the same
 * arrays, one value or two, small and big keys. */
static void updater_after_assignment(const char *type) {
  for (int key = 0; key < 2; key++) {
    for (int n = 1; n <= 2; n++) {
      KVStoreHandle kv;
      CHECK(MXKVStoreCreate(type, &kv));
      int keys[2] = {key, key};
      NDArrayHandle init = f32_filled((uint32_t)len_of(key), 1, 0);
      CHECK(MXKVStoreInit(kv, 1, keys, &init));
      NDArrayHandle v[2] = {f32_filled((uint32_t)len_of(key), 3, 0), f32_filled((uint32_t)len_of(key), 3, 1)};
      CHECK(MXKVStorePush(kv, (mx_uint)n, keys, v, 0));
      CHECK(MXKVStoreSetUpdater(kv, difference, NULL));
      CHECK(MXKVStorePush(kv, (mx_uint)n, keys, v, 0));
      char what[96];
      snprintf(what, sizeof what, "'%s' store, updater set after an assignment push of %d value(s)", type, n);
      expect_key(kv, key, 0, what); /* 3n - 3n */
      CHECK(MXKVStorePush(kv, (mx_uint)n, keys, v, 0));
      expect_key(kv, key, 3.0f * (float)n, what);
      CHECK(MXKVStoreFree(kv));
      for (int i = 0; i < 2; i++) CHECK(MXNDArrayFree(v[i]));
      CHECK(MXNDArrayFree(init));
    }
  }
}

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  alarm(30); /* a deadlock fails fast (SIGALRM) instead of hanging the run */
  plain("local");
  plain("device");
  compressed();
  updater_after_assignment("local");
  updater_after_assignment("device");
  CHECK(MXNDArrayWaitAll());
  printf("aliasing passed\n");
  return 0;
}
