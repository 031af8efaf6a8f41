/* Threads: several threads push to their own key and to one common key at once, through an
 * updater (stored += recv), while a reader pulls; every sum must be exact. libkvstore.so
 * serialises updater calls per store, so the updater's read-modify-write loses nothing. */
#include "common.h"
#include <pthread.h>

#define THREADS 4
#define ITERS 200
#define N 256
#define COMMON 1000

static KVStoreHandle kv;
static volatile int done = 0;

static void add(int key, NDArrayHandle recv, NDArrayHandle local, void *user) {
  (void)key;
  (void)user;
  update_add_scaled(recv, local, N, 1, NULL, NULL);
}

static void *pusher(void *arg) {
  int t = (int)(size_t)arg;
  NDArrayHandle ones[4];
  for (int d = 0; d < 4; d++) ones[d] = f32_filled(N, 1, d);
  int own[4] = {t, t, t, t}, common[2] = {COMMON, COMMON}, mixed[3] = {COMMON, t, COMMON};
  for (int i = 0; i < ITERS; i++) {
    CHECK(MXKVStorePush(kv, 4, own, ones, i % 3));  /* own key: +4 */
    CHECK(MXKVStorePush(kv, 2, common, ones, 0));   /* common key: +2 */
    CHECK(MXKVStorePush(kv, 3, mixed, ones, 0));    /* own +1, common +2 */
  }
  for (int d = 0; d < 4; d++) CHECK(MXNDArrayFree(ones[d]));
  return NULL;
}

static void *reader(void *arg) {
  (void)arg;
  int key = COMMON;
  NDArrayHandle out = f32_filled(N, 0, 0);
  float last = 0;
  while (!done) {
    CHECK(MXKVStorePull(kv, 1, &key, &out, 0));
    float v = f32_uniform(out, N); /* never a torn value: all elements equal */
    EXPECT(v >= last && v == (float)(int)v);
    last = v;
  }
  CHECK(MXNDArrayFree(out));
  return NULL;
}

int main(void) {
  CHECK(MXKVStoreCreate("local", &kv));
  CHECK(MXKVStoreSetUpdater(kv, add, NULL));
  NDArrayHandle zero = f32_filled(N, 0, 0);
  for (int t = 0; t < THREADS; t++) CHECK(MXKVStoreInit(kv, 1, &t, &zero));
  int common = COMMON;
  CHECK(MXKVStoreInit(kv, 1, &common, &zero));
  pthread_t th[THREADS], rd;
  pthread_create(&rd, NULL, reader, NULL);
  for (int t = 0; t < THREADS; t++) pthread_create(&th[t], NULL, pusher, (void *)(size_t)t);
  for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
  done = 1;
  pthread_join(rd, NULL);
  CHECK(MXNDArrayWaitAll());
  NDArrayHandle out = f32_filled(N, 0, 0);
  for (int t = 0; t < THREADS; t++) {
    CHECK(MXKVStorePull(kv, 1, &t, &out, 0));
    float v = f32_uniform(out, N);
    printf("key %d: %g (expected %d)\n", t, v, ITERS * 5);
    EXPECT(v == ITERS * 5);
  }
  CHECK(MXKVStorePull(kv, 1, &common, &out, 0));
  float v = f32_uniform(out, N);
  printf("common key: %g (expected %d)\n", v, THREADS * ITERS * 4);
  EXPECT(v == THREADS * ITERS * 4);
  CHECK(MXNDArrayFree(out));
  CHECK(MXNDArrayFree(zero));
  CHECK(MXKVStoreFree(kv));
  printf("threads passed\n");
  return 0;
}
