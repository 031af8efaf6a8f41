/* Distributed benchmark: ResNet-50's 161 gradient tensors (25,557,032 float32 values) on a
 * dist_sync store, every worker pushing and pulling every key each iteration (push all in one
 * call, pull all in one call, MXNDArrayWaitAll). Linked to one library per build; started by
 * benches/dist-run.sh as a job (reference: scripts/pslite-launch; libkvstore:
 * scripts/kvstore-launch). Servers and schedulers serve; worker rank 0 prints the median
 * seconds per iteration over the workers' iterations, and the bytes a worker sends and
 * receives per step, computed from the sizes (the store's payload; protocol headers excluded).
 *
 * With --updater, worker 0 has every server install an updater (stored -= 0.01 * pushed sum,
 * in place through MXNDArrayGetData), as a training job with the optimizer on the servers:
 * a round's answers then wait for its update.
 *
 *   distbench [--iters N] [--2bit] [--updater]      (3 warm-up iterations first) */
#define _POSIX_C_SOURCE 199309L
#include "kvstore.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_KEYS 256
static uint32_t sizes[MAX_KEYS];
static int nkeys;

static void add(uint32_t n) { sizes[nkeys++] = n; }

/* The same tensor list as kvbench.c's resnet50 workload. */
static void resnet50(void) {
  int blocks[4] = {3, 4, 6, 3}, in = 64;
  add(64 * 3 * 7 * 7), add(64), add(64);
  for (int s = 0; s < 4; s++) {
    int mid = 64 << s, out = mid * 4;
    for (int b = 0; b < blocks[s]; b++) {
      add((uint32_t)(mid * in)), add(mid), add(mid);
      add((uint32_t)(mid * mid * 9)), add(mid), add(mid);
      add((uint32_t)(out * mid)), add(out), add(out);
      if (b == 0) add((uint32_t)(out * in)), add(out), add(out);
      in = out;
    }
  }
  add(1000 * 2048), add(1000);
}

#define CHECK(call)                                                                    \
  do {                                                                                 \
    if ((call) != 0) {                                                                 \
      fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, MXGetLastError()); \
      exit(1);                                                                         \
    }                                                                                  \
  } while (0)

static KVStoreHandle server_kv;

/* stored -= 0.01 * recv; the updater owns both handles. */
static void sgd_updater(int key, NDArrayHandle recv, NDArrayHandle local, void *handle) {
  (void)key, (void)handle;
  int ndim;
  const int *shape;
  CHECK(MXNDArrayGetShapeEx(local, &ndim, &shape));
  size_t n = 1;
  for (int d = 0; d < ndim; d++) n *= (size_t)shape[d];
  void *r, *l;
  CHECK(MXNDArrayWaitToRead(recv));
  CHECK(MXNDArrayWaitToWrite(local));
  CHECK(MXNDArrayGetData(recv, &r));
  CHECK(MXNDArrayGetData(local, &l));
  const float *rf = r;
  float *lf = l;
  for (size_t i = 0; i < n; i++) lf[i] -= 0.01f * rf[i];
  CHECK(MXNDArrayFree(recv));
  CHECK(MXNDArrayFree(local));
}

static void server_commands(int head, const char *body, void *handle) {
  (void)handle;
  if (head == 0 && !strcmp(body, "updater")) CHECK(MXKVStoreSetUpdater(server_kv, sgd_updater, NULL));
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  int iters = 10, two_bit = 0, updater = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--2bit")) two_bit = 1;
    else if (!strcmp(argv[i], "--updater")) updater = 1;
    else {
      fprintf(stderr, "usage: %s [--iters N] [--2bit] [--updater]\n", argv[0]);
      return 2;
    }
  }
  if (iters < 1 || iters > 10000) return 2;
  int is_worker;
  CHECK(MXKVStoreIsWorkerNode(&is_worker));
  KVStoreHandle kv;
  if (MXKVStoreCreate("dist_sync", &kv) != 0) {
    fprintf(stderr, "dist Create failed: %s\n", MXGetLastError());
    return 3;
  }
  if (!is_worker) {
    server_kv = kv;
    CHECK(MXKVStoreRunServer(kv, server_commands, NULL));
    return 0;
  }
  resnet50();
  int rank, nworker;
  CHECK(MXKVStoreGetRank(kv, &rank));
  CHECK(MXKVStoreGetGroupSize(kv, &nworker));
  if (two_bit) {
    const char *k[2] = {"type", "threshold"}, *v[2] = {"2bit", "0.5"};
    CHECK(MXKVStoreSetGradientCompression(kv, 2, k, v));
  }
  int keys[MAX_KEYS];
  NDArrayHandle grads[MAX_KEYS], weights[MAX_KEYS];
  uint64_t values = 0;
  for (int i = 0; i < nkeys; i++) {
    keys[i] = i;
    values += sizes[i];
    CHECK(MXNDArrayCreateEx(&sizes[i], 1, 1, 0, 0, 0, &grads[i]));
    CHECK(MXNDArrayCreateEx(&sizes[i], 1, 1, 0, 0, 0, &weights[i]));
    float *host = malloc(sizeof(float) * sizes[i]);
    for (uint32_t j = 0; j < sizes[i]; j++) host[j] = (float)((j + (uint32_t)i + (uint32_t)rank) % 7) * 0.25f;
    CHECK(MXNDArraySyncCopyFromCPU(grads[i], host, sizes[i]));
    CHECK(MXNDArraySyncCopyFromCPU(weights[i], host, sizes[i]));
    free(host);
  }
  CHECK(MXKVStoreInit(kv, (mx_uint)nkeys, keys, weights));
  if (updater) {
    if (rank == 0) CHECK(MXKVStoreSendCommmandToServers(kv, 0, "updater"));
    CHECK(MXKVStoreBarrier(kv));
  }
  double *times = malloc(sizeof(double) * (size_t)iters);
  for (int it = -3; it < iters; it++) {
    double t0 = now();
    CHECK(MXKVStorePush(kv, (mx_uint)nkeys, keys, grads, 0));
    CHECK(MXKVStorePull(kv, (mx_uint)nkeys, keys, weights, 0));
    CHECK(MXNDArrayWaitAll());
    if (it >= 0) times[it] = now() - t0;
  }
  qsort(times, (size_t)iters, sizeof times[0], cmp_double);
  double median = iters % 2 ? times[iters / 2] : 0.5 * (times[iters / 2 - 1] + times[iters / 2]);
  double bytes = 4.0 * (double)values;
  double push = two_bit ? bytes / 16 : bytes;
  printf("worker %d of %d: %d keys, %llu values; median %.4f s/iter (min %.4f, max %.4f) over %d iterations; "
         "per step: push %.1f MB + pull %.1f MB = %.1f MB (computed from sizes%s)\n",
         rank, nworker, nkeys, (unsigned long long)values, median, times[0], times[iters - 1], iters, push / 1e6,
         bytes / 1e6, (push + bytes) / 1e6, two_bit ? "; 2-bit push = 1/16 of float32" : "");
  free(times);
  CHECK(MXKVStoreFree(kv));
  return 0;
}
