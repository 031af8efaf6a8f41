/* A steady dist_sync job for the network test bed (tests/testbed/run.sh): every worker pushes
 * and pulls two keys for ROUNDS rounds, pausing PAUSE_MS between rounds, so faults (a killed
 * host, a slowed link, a short partition) can hit it mid-job. Key 1 holds ELEMENTS float32
 * values (split over the servers when ELEMENTS >= MXNET_KVSTORE_BIGARRAY_BOUND), key 2 six.
 * In round r worker k pushes (k + 1) * r + (i % 7) at element i; without an updater a round
 * assigns the sum, so every pull must read r * W(W+1)/2 + W * (i % 7) exactly (checked: a wrong
 * value exits 1). Each worker writes "round r: ..." lines (emit_f32 of both keys) and "done" to
 * DIST_DIFF_OUT/worker-<rank>.txt as it goes, then prints "worker <rank> ok"; servers run the
 * server loop of dist_common.h.
 *
 *   dist_rounds [ROUNDS (30)] [ELEMENTS (1048576)] [PAUSE_MS (200)] */
#define _POSIX_C_SOURCE 199309L
#include "dist_common.h"
#include <time.h>

static void fill(float *v, uint32_t n, int rank, int round) {
  for (uint32_t i = 0; i < n; i++) v[i] = (float)((rank + 1) * round + (int)(i % 7));
}

static void check(const float *v, uint32_t n, int workers, int round, int key) {
  float base = (float)(round * workers * (workers + 1) / 2);
  for (uint32_t i = 0; i < n; i++) {
    float want = base + (float)(workers * (int)(i % 7));
    if (v[i] != want) {
      fprintf(stderr, "round %d key %d element %u is %g, expected %g\n", round, key, i, v[i], want);
      exit(1);
    }
  }
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 30;
  uint32_t n = argc > 2 ? (uint32_t)strtoul(argv[2], NULL, 10) : 1048576u;
  int pause_ms = argc > 3 ? atoi(argv[3]) : 200;
  if (rounds < 1 || n < 7 || pause_ms < 0) {
    fprintf(stderr, "usage: dist_rounds [ROUNDS] [ELEMENTS >= 7] [PAUSE_MS]\n");
    return 2;
  }
  if (!dist_is_worker()) return run_server_role("dist_sync");
  KVStoreHandle kv = dist_create("dist_sync");
  int rank, workers;
  worker_header(kv, &rank, &workers);
  uint32_t sizes[2] = {n, 6};
  int keys[2] = {1, 2};
  NDArrayHandle push[2], pull[2];
  float *host[2];
  for (int k = 0; k < 2; k++) {
    push[k] = f32_filled(sizes[k], 0, 0);
    pull[k] = f32_filled(sizes[k], -1, 0);
    host[k] = malloc(sizeof(float) * sizes[k]);
  }
  CHECK(MXKVStoreInit(kv, 2, keys, push));
  struct timespec pause = {pause_ms / 1000, (long)(pause_ms % 1000) * 1000000L};
  for (int r = 1; r <= rounds; r++) {
    for (int k = 0; k < 2; k++) {
      fill(host[k], sizes[k], rank, r);
      CHECK(MXNDArraySyncCopyFromCPU(push[k], host[k], sizes[k]));
    }
    CHECK(MXKVStorePush(kv, 2, keys, push, 0));
    CHECK(MXKVStorePull(kv, 2, keys, pull, 0));
    for (int k = 0; k < 2; k++) {
      f32_read(pull[k], host[k], sizes[k]);
      check(host[k], sizes[k], workers, r, keys[k]);
    }
    char label[64];
    snprintf(label, sizeof label, "round %d: key 1", r);
    emit_f32(label, pull[0]);
    snprintf(label, sizeof label, "round %d: key 2", r);
    emit_f32(label, pull[1]);
    if (pause_ms) nanosleep(&pause, NULL);
  }
  for (int k = 0; k < 2; k++) {
    CHECK(MXNDArrayFree(push[k]));
    CHECK(MXNDArrayFree(pull[k]));
    free(host[k]);
  }
  CHECK(MXKVStoreFree(kv));
  EMIT("done");
  printf("worker %d ok\n", rank);
  return 0;
}
