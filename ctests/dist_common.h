/* Shared part of the distributed differential programs (dist_diff_*.c). Each program is started
 * once per process of a job (scripts/pslite-launch for the reference's ps-lite stores,
 * scripts/kvstore-launch for libkvstore's MPI stores) and takes its part from DMLC_ROLE:
 * - a worker creates the store and writes its results to DIST_DIFF_OUT/worker-<rank>.txt;
 * - a server or scheduler creates a store and runs MXKVStoreRunServer with a controller that
 *   records the commands it receives and installs a server-side updater when told to (as
 *   MXNet's Python server installs the optimizer it is sent); when the server loop ends it
 *   writes what it saw to DIST_DIFF_OUT/server-<pid>.txt (a scheduler writes nothing).
 * Without DIST_DIFF_OUT results go to stdout. When the library answers the dist Create with an
 * error, the process writes DIST_DIFF_OUT/create-failed-<pid>.txt with the message and exits 3,
 * so the runner can tell "no dist store in this library" from a wrong result. */
#ifndef KVSTORE_CTESTS_DIST_COMMON_H
#define KVSTORE_CTESTS_DIST_COMMON_H

#include "common.h"
#include <unistd.h>

static FILE *dist_out;

/* Opens DIST_DIFF_OUT/<stem>.txt (or stdout) as the result file. */
static void dist_open(const char *stem) {
  const char *dir = getenv("DIST_DIFF_OUT");
  if (!dir || !*dir) {
    dist_out = stdout;
    return;
  }
  char path[4096];
  snprintf(path, sizeof path, "%s/%s.txt", dir, stem);
  dist_out = fopen(path, "w");
  if (!dist_out) {
    perror(path);
    exit(1);
  }
}

#define EMIT(...)                   \
  do {                              \
    fprintf(dist_out, __VA_ARGS__); \
    fputc('\n', dist_out);          \
    fflush(dist_out);               \
  } while (0)

/* Creates a store of `type`; on failure records the library's message and exits 3. */
static KVStoreHandle dist_create(const char *type) {
  KVStoreHandle kv;
  if (MXKVStoreCreate(type, &kv) != 0) {
    const char *msg = MXGetLastError();
    fprintf(stderr, "dist Create(\"%s\") failed: %s\n", type, msg);
    const char *dir = getenv("DIST_DIFF_OUT");
    if (dir && *dir) {
      char path[4096];
      snprintf(path, sizeof path, "%s/create-failed-%ld.txt", dir, (long)getpid());
      FILE *f = fopen(path, "w");
      if (f) {
        fprintf(f, "%s\n", msg);
        fclose(f);
      }
    }
    exit(3);
  }
  return kv;
}

/* ---- server side ---- */

#define MAX_RECORDS 64
#define MAX_KEYS 64

static KVStoreHandle server_kv;
static char *commands[MAX_RECORDS];
static int n_commands;
static float server_scale;
static int updated_keys[MAX_KEYS], updates_per_key[MAX_KEYS], n_updated_keys;
static int updater_calls_by_dtype[16];

static size_t array_size(NDArrayHandle h) {
  int nd;
  const int *dims;
  CHECK(MXNDArrayGetShapeEx(h, &nd, &dims));
  size_t n = 1;
  for (int i = 0; i < nd; i++) n *= (size_t)dims[i];
  return n;
}

/* local += scale * recv for dense float32 values (with multi-precision the server hands
 * float16 keys over as float32 master copies); other values are counted, not changed. */
static void server_updater(int key, NDArrayHandle recv, NDArrayHandle local, void *user) {
  (void)user;
  int slot = 0;
  while (slot < n_updated_keys && updated_keys[slot] != key) slot++;
  if (slot == n_updated_keys && n_updated_keys < MAX_KEYS) updated_keys[n_updated_keys++] = key;
  if (slot < MAX_KEYS) updates_per_key[slot]++;
  int st, dt;
  CHECK(MXNDArrayGetStorageType(recv, &st));
  CHECK(MXNDArrayGetDType(recv, &dt));
  if (dt >= 0 && dt < 16) updater_calls_by_dtype[dt]++;
  if (st == 0 && dt == DT_F32) {
    update_add_scaled(recv, local, array_size(local), server_scale, NULL, NULL);
  } else {
    CHECK(MXNDArrayFree(recv));
    CHECK(MXNDArrayFree(local));
  }
}

/* Records every command; "updater S" installs server_updater with scale S, re-entrantly from
 * inside RunServer, as MXNet's Python server does with the optimizer it is sent. */
static void server_controller(int head, const char *body, void *handle) {
  (void)handle;
  if (n_commands < MAX_RECORDS) {
    size_t len = strlen(body) + 32;
    commands[n_commands] = malloc(len);
    snprintf(commands[n_commands], len, "command %d '%s'", head, body);
    n_commands++;
  }
  if (head == 0 && strncmp(body, "updater ", 8) == 0) {
    server_scale = strtof(body + 8, NULL);
    CHECK(MXKVStoreSetUpdater(server_kv, server_updater, NULL));
  }
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int cmp_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

/* The part of a server or scheduler: serve until the workers stop the servers. */
static int run_server_role(const char *type) {
  int is_scheduler;
  CHECK(MXKVStoreIsSchedulerNode(&is_scheduler));
  server_kv = dist_create(type);
  CHECK(MXKVStoreRunServer(server_kv, server_controller, NULL));
  if (!is_scheduler) {
    char stem[64];
    snprintf(stem, sizeof stem, "server-%ld", (long)getpid());
    dist_open(stem);
    /* Arrival order between workers is not deterministic: report sorted. */
    qsort(commands, (size_t)n_commands, sizeof commands[0], cmp_str);
    EMIT("server: %d controller commands", n_commands);
    for (int i = 0; i < n_commands; i++) EMIT("  %s", commands[i]);
    int keys[MAX_KEYS];
    for (int i = 0; i < n_updated_keys; i++) keys[i] = updated_keys[i];
    qsort(keys, (size_t)n_updated_keys, sizeof keys[0], cmp_int);
    for (int i = 0; i < n_updated_keys; i++) {
      int slot = 0;
      while (updated_keys[slot] != keys[i]) slot++;
      EMIT("  updater key %d: %d calls", keys[i], updates_per_key[slot]);
    }
    for (int d = 0; d < 16; d++)
      if (updater_calls_by_dtype[d]) EMIT("  updater calls with dtype %d: %d", d, updater_calls_by_dtype[d]);
    if (dist_out != stdout) fclose(dist_out);
  }
  for (int i = 0; i < n_commands; i++) free(commands[i]);
  return 0;
}

/* Returns nonzero on a worker (DMLC_ROLE unset or "worker"), after checking that the role
 * queries agree with DMLC_ROLE. */
static int dist_is_worker(void) {
  int w, s, c;
  CHECK(MXKVStoreIsWorkerNode(&w));
  CHECK(MXKVStoreIsServerNode(&s));
  CHECK(MXKVStoreIsSchedulerNode(&c));
  const char *role = getenv("DMLC_ROLE");
  if (!role || strcmp(role, "worker") == 0) EXPECT(w == 1 && s == 0 && c == 0);
  else if (strcmp(role, "server") == 0) EXPECT(w == 0 && s == 1 && c == 0);
  else if (strcmp(role, "scheduler") == 0) EXPECT(w == 0 && s == 0 && c == 1);
  return w;
}

/* Opens the worker's result file and reports what the store says about the job. */
static void worker_header(KVStoreHandle kv, int *rank, int *size) {
  CHECK(MXKVStoreGetRank(kv, rank));
  CHECK(MXKVStoreGetGroupSize(kv, size));
  char stem[64];
  snprintf(stem, sizeof stem, "worker-%d", *rank);
  dist_open(stem);
  const char *type;
  CHECK(MXKVStoreGetType(kv, &type));
  int w, s, c;
  CHECK(MXKVStoreIsWorkerNode(&w));
  CHECK(MXKVStoreIsServerNode(&s));
  CHECK(MXKVStoreIsSchedulerNode(&c));
  const char *n = getenv("DMLC_NUM_WORKER");
  EXPECT(n && atoi(n) == *size);
  EXPECT(*rank >= 0 && *rank < *size);
  EMIT("type %s; group size %d; rank %d; worker %d server %d scheduler %d", type, *size, *rank, w, s, c);
}

/* A dense array of `n` elements of dtype dt on cpu(dev), element i = f(i). */
static inline NDArrayHandle dense_of(int dt, uint32_t n, int dev, double (*f)(uint32_t, double), double arg) {
  NDArrayHandle h;
  CHECK(MXNDArrayCreateEx(&n, 1, DEV_CPU, dev, 0, dt, &h));
  size_t sz = dtype_size(dt);
  unsigned char *buf = malloc(sz * (n ? n : 1));
  for (uint32_t i = 0; i < n; i++) encode(dt, f(i, arg), buf + sz * i);
  CHECK(MXNDArraySyncCopyFromCPU(h, buf, n));
  free(buf);
  return h;
}

static inline double constant(uint32_t i, double v) {
  (void)i;
  return v;
}

/* Prints "label: n=N sum=S [i]=v ..." for a float32 array: the double-precision sum and the
 * elements at `picks` (which catch a misplaced partition of a sharded key). */
static inline void emit_f32(const char *label, NDArrayHandle h) {
  size_t n = array_size(h);
  float *v = malloc(sizeof(float) * (n ? n : 1));
  f32_read(h, v, n);
  double sum = 0;
  for (size_t i = 0; i < n; i++) sum += v[i];
  fprintf(dist_out, "%s: n=%zu sum=%.9g", label, n, sum);
  size_t picks[] = {0, 1, n / 3, n / 2 - 1, n / 2, n / 2 + 1, n - 2, n - 1};
  size_t last = (size_t)-1;
  for (size_t k = 0; k < sizeof picks / sizeof picks[0]; k++)
    if (picks[k] < n && picks[k] != last) {
      fprintf(dist_out, " [%zu]=%.9g", picks[k], v[picks[k]]);
      last = picks[k];
    }
  fputc('\n', dist_out);
  fflush(dist_out);
  free(v);
}

/* Element 0 of a float32 array after checking that all are equal. */
static inline float f32_all(NDArrayHandle h) {
  return f32_uniform(h, array_size(h));
}

/* A (rows, cols) row_sparse float32 array holding rows ids[0..nnr), their values in vals
 * (nnr * cols, row-major). */
static inline NDArrayHandle rsp_f32(uint32_t rows, uint32_t cols, int nnr, const int64_t *ids, const float *vals) {
  return rsp_f32_on(rows, cols, (uint32_t)nnr, ids, vals, 0);
}

#endif
