/* Cross-store updaters: two stores whose updaters push into each other, driven from two
 * threads at once, complete (MXNet completes this: it holds no lock across an updater).
 * Store A's updater for key 0 pushes its recv into store B's key 1, store B's updater for key
 * 0 pushes into store A's key 1; thread 1 pushes A's key 0, thread 2 B's key 0. Then the
 * sums must be exact: concurrent pushes to one key still never lose an updater's
 * read-modify-write (two more threads push A's key 0 and B's key 0 with several values,
 * whose merge buffers must not be overwritten while an updater reads them). A watchdog fails
 * the program if it hangs. */
#define _DEFAULT_SOURCE
#include "common.h"
#include <pthread.h>
#include <unistd.h>

#define N 64
#define ITERS 300

static KVStoreHandle store[2];

/* local += recv; key 0 also forwards recv to the other store's key 1. */
static void forward(int key, NDArrayHandle recv, NDArrayHandle local, void *user) {
  int self = (int)(size_t)user;
  float r[N], l[N];
  CHECK(MXNDArraySyncCopyToCPU(recv, r, N));
  CHECK(MXNDArraySyncCopyToCPU(local, l, N));
  if (key == 0) {
    int one = 1;
    CHECK(MXKVStorePush(store[1 - self], 1, &one, &recv, 0));
  }
  usleep(50); /* widen the window between the read and the write */
  for (int i = 0; i < N; i++) l[i] += r[i];
  CHECK(MXNDArraySyncCopyFromCPU(local, l, N));
  CHECK(MXNDArrayFree(recv));
  CHECK(MXNDArrayFree(local));
}

struct job {
  int store, values;
};

static void *pusher(void *arg) {
  struct job *j = arg;
  NDArrayHandle ones = f32_filled(N, 1, 0);
  int keys[3] = {0, 0, 0};
  NDArrayHandle vals[3] = {ones, ones, ones};
  for (int i = 0; i < ITERS; i++) CHECK(MXKVStorePush(store[j->store], j->values, keys, vals, 0));
  CHECK(MXNDArrayFree(ones));
  return NULL;
}

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  alarm(60); /* a deadlock fails fast (SIGALRM) instead of hanging the run */
  NDArrayHandle zero = f32_filled(N, 0, 0);
  int keys[2] = {0, 1};
  NDArrayHandle zeros[2] = {zero, zero};
  for (int s = 0; s < 2; s++) {
    CHECK(MXKVStoreCreate("local", &store[s]));
    CHECK(MXKVStoreInit(store[s], 2, keys, zeros));
    CHECK(MXKVStoreSetUpdater(store[s], forward, (void *)(size_t)s));
  }
  /* Threads 0/1: one value per push; threads 2/3: three values (merge buffer). */
  struct job jobs[4] = {{0, 1}, {1, 1}, {0, 3}, {1, 3}};
  pthread_t th[4];
  for (int t = 0; t < 4; t++) pthread_create(&th[t], NULL, pusher, &jobs[t]);
  for (int t = 0; t < 4; t++) pthread_join(th[t], NULL);
  CHECK(MXNDArrayWaitAll());
  NDArrayHandle out = f32_filled(N, -1, 0);
  for (int s = 0; s < 2; s++) {
    for (int k = 0; k < 2; k++) {
      CHECK(MXKVStorePull(store[s], 1, &k, &out, 0));
      float v = f32_uniform(out, N);
      /* key 0: ITERS * (1 + 3); key 1: what the other store's key 0 received. */
      printf("store %d key %d: %g (expected %d)\n", s, k, v, ITERS * 4);
      EXPECT(v == ITERS * 4);
    }
  }
  CHECK(MXNDArrayFree(out));
  CHECK(MXNDArrayFree(zero));
  for (int s = 0; s < 2; s++) CHECK(MXKVStoreFree(store[s]));
  printf("cross_store passed\n");
  return 0;
}
