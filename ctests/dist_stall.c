/* A paced dist_sync job for the network-fault tests (tests/dist_programs.rs): every process
 * writes its pid to DIST_STALL_DIR/<role>-<rank>.pid (a server at once, a worker after its
 * first round), so the test can stop (SIGSTOP), resume or kill one of them mid-job. Each
 * worker runs ROUNDS rounds of push + pull of two keys (key 3: 8 values on one server; key 9:
 * 1000 values, split over the servers when MXNET_KVSTORE_BIGARRAY_BOUND=100), with a worker
 * barrier every 10 rounds and a short pause between rounds, and prints a hash of everything
 * it pulled per key, then "ok". The servers keep no updater: each pull is the round's sum.
 *
 *   dist_stall                 as above
 *   dist_stall busy SECONDS    busy but alive peers: the servers run an updater (stored +=
 *                              sum) whose 5th update of key 9 computes for SECONDS, and
 *                              worker 1 computes for SECONDS before its 15th round's push; the
 *                              pulls are the same bits whatever SECONDS is */
#define _POSIX_C_SOURCE 200809L
#include "common.h"
#include <time.h>
#include <unistd.h>

#define ROUNDS 40
#define SMALL 8
#define BIG 1000

static void write_pid(const char *role, int rank) {
  const char *dir = getenv("DIST_STALL_DIR");
  if (!dir || !*dir) return;
  char path[4096], tmp[4200];
  snprintf(path, sizeof path, "%s/%s-%d.pid", dir, role, rank);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (!f) {
    perror(tmp);
    exit(1);
  }
  fprintf(f, "%ld\n", (long)getpid());
  fclose(f);
  if (rename(tmp, path) != 0) {
    perror(path);
    exit(1);
  }
}

static double busy_s;

/* Keeps a core busy for `seconds` (a long update or compute phase: the process is alive). */
static void compute_for(double seconds) {
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  volatile double x = 0;
  do {
    for (int i = 0; i < 100000; i++) x += 1e-9 * i;
    clock_gettime(CLOCK_MONOTONIC, &t);
  } while ((double)(t.tv_sec - t0.tv_sec) + 1e-9 * (double)(t.tv_nsec - t0.tv_nsec) < seconds);
}

static int updates_of_key9;

/* stored += sum; the 5th update of key 9 first computes for busy_s seconds. */
static void slow_updater(int key, NDArrayHandle recv, NDArrayHandle local, void *user) {
  (void)user;
  if (key == 9 && ++updates_of_key9 == 5) compute_for(busy_s);
  int nd;
  const int *dims;
  CHECK(MXNDArrayGetShapeEx(local, &nd, &dims));
  size_t n = 1;
  for (int i = 0; i < nd; i++) n *= (size_t)dims[i];
  update_add_scaled(recv, local, n, 1.0f, NULL, NULL);
}

static uint64_t lcg;

static float next_value(void) {
  lcg = lcg * 6364136223846793005ULL + 1442695040888963407ULL;
  uint32_t r = (uint32_t)(lcg >> 33);
  float v = (1.0f + (float)(r & 0xffff) / 65536.0f) * (float)(1 << ((r >> 16) % 12)) / 64.0f;
  return (r >> 31) ? -v : v;
}

static uint64_t hashes[2] = {14695981039346656037ULL, 14695981039346656037ULL};

static void absorb(int k, NDArrayHandle h, size_t n) {
  float *b = malloc(n * sizeof(float));
  CHECK(MXNDArraySyncCopyToCPU(h, b, n));
  const unsigned char *p = (const unsigned char *)b;
  for (size_t i = 0; i < n * sizeof(float); i++) hashes[k] = (hashes[k] ^ p[i]) * 1099511628211ULL;
  free(b);
}

int main(int argc, char **argv) {
  int busy = argc > 2 && strcmp(argv[1], "busy") == 0;
  if (busy) busy_s = atof(argv[2]);
  int is_worker;
  CHECK(MXKVStoreIsWorkerNode(&is_worker));
  KVStoreHandle kv;
  CHECK(MXKVStoreCreate("dist_sync", &kv));
  int rank;
  CHECK(MXKVStoreGetRank(kv, &rank));
  if (!is_worker) {
    write_pid("server", rank);
    if (busy) CHECK(MXKVStoreSetUpdater(kv, slow_updater, NULL));
    CHECK(MXKVStoreRunServer(kv, NULL, NULL));
    CHECK(MXKVStoreFree(kv));
    return 0;
  }
  int keys[2] = {3, 9};
  uint32_t sizes[2] = {SMALL, BIG};
  NDArrayHandle init[2] = {f32_filled(SMALL, 1, 0), f32_filled(BIG, 1, 0)};
  CHECK(MXKVStoreInit(kv, 2, keys, init));
  struct timespec pause = {0, 40 * 1000 * 1000};
  for (int round = 0; round < ROUNDS; round++) {
    if (busy && rank == 1 && round == 14) compute_for(busy_s);
    NDArrayHandle vals[2], outs[2];
    for (int k = 0; k < 2; k++) {
      lcg = (uint64_t)(rank + 1) * 1000003u + (uint64_t)round * 7919u + (uint64_t)keys[k] * 104729u;
      float *v = malloc(sizes[k] * sizeof(float));
      for (uint32_t i = 0; i < sizes[k]; i++) v[i] = next_value();
      vals[k] = f32_filled(sizes[k], 0, 0);
      outs[k] = f32_filled(sizes[k], 0, 0);
      CHECK(MXNDArraySyncCopyFromCPU(vals[k], v, sizes[k]));
      free(v);
    }
    CHECK(MXKVStorePush(kv, 2, keys, vals, 0));
    CHECK(MXKVStorePull(kv, 2, keys, outs, 0));
    for (int k = 0; k < 2; k++) {
      absorb(k, outs[k], sizes[k]);
      CHECK(MXNDArrayFree(vals[k]));
      CHECK(MXNDArrayFree(outs[k]));
    }
    if (round == 0) write_pid("worker", rank);
    if (round % 10 == 9) CHECK(MXKVStoreBarrier(kv));
    nanosleep(&pause, NULL);
  }
  printf("hash key 3 %016llx\nhash key 9 %016llx\n", (unsigned long long)hashes[0], (unsigned long long)hashes[1]);
  printf("worker %d ok\n", rank);
  fflush(stdout);
  for (int k = 0; k < 2; k++) CHECK(MXNDArrayFree(init[k]));
  CHECK(MXKVStoreFree(kv));
  return 0;
}
