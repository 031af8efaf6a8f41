/* Threads: several threads push to their own key and to one common key at once, through an
 * updater (stored += recv), while a reader pulls; every sum must be exact. libkvstore.so
 * serialises updater calls per store, so the updater's read-modify-write loses nothing.
 * Each pusher also pushes and pulls a list of MANY handles every iteration (libkvstore keeps
 * such lists decoded) while another thread makes and frees arrays (each free empties what is
 * kept): the sums and pulls stay exact. */
#include "common.h"
#include <pthread.h>

#define THREADS 4
#define ITERS 200
#define N 256
#define COMMON 1000
#define MANY 64

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
  int many_keys[MANY];
  NDArrayHandle many_ones[MANY], many_outs[MANY];
  for (int j = 0; j < MANY; j++) many_keys[j] = t, many_ones[j] = f32_filled(N, 1, 0), many_outs[j] = f32_filled(N, 0, 0);
  for (int i = 0; i < ITERS; i++) {
    CHECK(MXKVStorePush(kv, 4, own, ones, i % 3));  /* own key: +4 */
    CHECK(MXKVStorePush(kv, 2, common, ones, 0));   /* common key: +2 */
    CHECK(MXKVStorePush(kv, 3, mixed, ones, 0));    /* own +1, common +2 */
    CHECK(MXKVStorePush(kv, MANY, many_keys, many_ones, 0)); /* own +MANY */
    CHECK(MXKVStorePull(kv, MANY, many_keys, many_outs, 0));
    float want = (float)((i + 1) * (5 + MANY));
    EXPECT(f32_uniform(many_outs[0], N) == want && f32_uniform(many_outs[MANY - 1], N) == want);
  }
  for (int d = 0; d < 4; d++) CHECK(MXNDArrayFree(ones[d]));
  for (int j = 0; j < MANY; j++) {
    CHECK(MXNDArrayFree(many_ones[j]));
    CHECK(MXNDArrayFree(many_outs[j]));
  }
  return NULL;
}

static void *churn(void *arg) {
  (void)arg;
  while (!done) {
    NDArrayHandle h = f32_filled(N, 0, 0);
    CHECK(MXNDArrayFree(h));
  }
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
  pthread_t th[THREADS], rd, ch;
  pthread_create(&rd, NULL, reader, NULL);
  pthread_create(&ch, NULL, churn, NULL);
  for (int t = 0; t < THREADS; t++) pthread_create(&th[t], NULL, pusher, (void *)(size_t)t);
  for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
  done = 1;
  pthread_join(rd, NULL);
  pthread_join(ch, NULL);
  CHECK(MXNDArrayWaitAll());
  NDArrayHandle out = f32_filled(N, 0, 0);
  for (int t = 0; t < THREADS; t++) {
    CHECK(MXKVStorePull(kv, 1, &t, &out, 0));
    float v = f32_uniform(out, N);
    printf("key %d: %g (expected %d)\n", t, v, ITERS * (5 + MANY));
    EXPECT(v == ITERS * (5 + MANY));
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
