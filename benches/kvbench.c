/* kvbench: the same KVStore workloads through MXNet's C API against several libraries in one
 * run. Each library is loaded with dlopen in its own forked child (libmxnet.so and
 * libkvstore.so export the same symbols, and a child keeps each library's threads and memory
 * to itself); the parent prints medians, ratios and the memory-traffic limit.
 *
 * usage: kvbench [--iters N] [--warmup N] [--workload NAME]... [--rss-iters N] [--rounds N] [--dtype T] LIB...
 * (--rounds: the libraries take turns this many times, default 3, each turn running
 * iters/rounds iterations in a fresh child; the median is over all of a library's iterations)
 * (--dtype: float32, the default and the workloads, float64, float16 or bfloat16)
 * (--trace FILE: the last iteration of each run is profiled with MXNet's profiler API and
 * dumped to FILE as a Chrome trace; give one library and one round, or the last run wins)
 * The first LIB is the baseline of the ratios (put libmxnet.so first). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef void *H;
typedef void(Updater)(int, H, H, void *);
static struct {
  int (*create)(const char *, H *);
  int (*free_kv)(H);
  int (*init)(H, uint32_t, const int *, H *);
  int (*push)(H, uint32_t, const int *, H *, int);
  int (*pull)(H, uint32_t, const int *, H *, int);
  int (*set_updater)(H, Updater *, void *);
  int (*nd_create)(const uint32_t *, uint32_t, int, int, int, int, H *);
  int (*nd_free)(H);
  int (*nd_from_cpu)(H, const void *, size_t);
  int (*nd_wait_read)(H);
  int (*nd_wait_write)(H);
  int (*nd_get_data)(H, void **);
  int (*wait_all)(void);
  const char *(*last_error)(void);
  /* The profiler (only with --trace). */
  int (*prof_config)(int, const char *const *, const char *const *);
  int (*prof_state)(int);
  int (*prof_dump)(int);
} api;

/* --trace FILE: the last measured iteration runs under MXNet's profiler, dumped to FILE. */
static const char *trace_path = NULL;

#define CALL(x)                                                                      \
  do {                                                                               \
    if ((x) != 0) {                                                                  \
      fprintf(stderr, "%s failed: %s\n", #x, api.last_error());                      \
      exit(2);                                                                       \
    }                                                                                \
  } while (0)

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void load(const char *path) {
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
    exit(2);
  }
#define SYM(field, name)                                                             \
  do {                                                                               \
    *(void **)&api.field = dlsym(lib, name);                                         \
    if (!api.field) {                                                                \
      fprintf(stderr, "%s: no symbol %s\n", path, name);                             \
      exit(2);                                                                       \
    }                                                                                \
  } while (0)
  SYM(create, "MXKVStoreCreate");
  SYM(free_kv, "MXKVStoreFree");
  SYM(init, "MXKVStoreInit");
  SYM(push, "MXKVStorePush");
  SYM(pull, "MXKVStorePull");
  SYM(set_updater, "MXKVStoreSetUpdater");
  SYM(nd_create, "MXNDArrayCreateEx");
  SYM(nd_free, "MXNDArrayFree");
  SYM(nd_from_cpu, "MXNDArraySyncCopyFromCPU");
  SYM(nd_wait_read, "MXNDArrayWaitToRead");
  SYM(nd_wait_write, "MXNDArrayWaitToWrite");
  SYM(nd_get_data, "MXNDArrayGetData");
  SYM(wait_all, "MXNDArrayWaitAll");
  SYM(last_error, "MXGetLastError");
  if (trace_path) {
    SYM(prof_config, "MXSetProfilerConfig");
    SYM(prof_state, "MXSetProfilerState");
    SYM(prof_dump, "MXDumpProfile");
  }
}

/* ---- workloads: lists of parameter sizes ------------------------------------------------ */

#define MAX_KEYS 4096
static uint32_t sizes[MAX_KEYS];
static int nkeys;

static void add(uint32_t n) { sizes[nkeys++] = n; }

/* ResNet-50 v1 (MXNet model zoo): 53 conv weights, gamma and beta of 53 batch norms, fc
 * weight and bias = 161 tensors, 25,557,032 values. */
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

static int workload(const char *name) {
  nkeys = 0;
  if (!strcmp(name, "resnet50") || !strcmp(name, "sgd")) resnet50();
  else if (!strcmp(name, "big")) add(16u << 20);
  else if (!strcmp(name, "small")) for (int i = 0; i < 2000; i++) add(1024);
  else if (!strcmp(name, "rss")) for (int i = 0; i < 200; i++) add(1024);
  else if (!strcmp(name, "latency")) add(16);
  else return 0;
  return 1;
}

static double total_values(void) {
  double t = 0;
  for (int i = 0; i < nkeys; i++) t += sizes[i];
  return t;
}

/* ---- the measured iteration ------------------------------------------------------------- */

#define DEVICES 4

static void sgd_updater(int key, H recv, H local, void *user) {
  (void)key;
  (void)user;
  float *g, *w;
  CALL(api.nd_wait_read(recv));
  CALL(api.nd_wait_write(local));
  CALL(api.nd_get_data(recv, (void **)&g));
  CALL(api.nd_get_data(local, (void **)&w));
  uint32_t n = sizes[key];
  for (uint32_t i = 0; i < n; i++) w[i] -= 0.01f * g[i];
  CALL(api.nd_free(recv));
  CALL(api.nd_free(local));
}

/* The element type of every array (--dtype): MXNet's code and size in bytes. */
static int dtype = 0;
static size_t dtype_size = 4;

/* `v` (0, 0.5 or 1: exact in every type) in the bytes of `dtype`. */
static void encode(float v, void *out) {
  uint32_t f;
  memcpy(&f, &v, 4);
  if (dtype == 0) memcpy(out, &v, 4);
  else if (dtype == 1) { double d = v; memcpy(out, &d, 8); }
  else if (dtype == 12) { uint16_t b = (uint16_t)(f >> 16); memcpy(out, &b, 2); }
  else { /* float16: exponent rebiased from 127 to 15; zero stays zero */
    uint16_t h = f == 0 ? 0 : (uint16_t)((((f >> 23) & 0xff) - 112) << 10 | ((f >> 13) & 0x3ff));
    memcpy(out, &h, 2);
  }
}

static H make(uint32_t n, int dev, float v) {
  H h;
  CALL(api.nd_create(&n, 1, 1, dev, 0, dtype, &h));
  char *buf = malloc(dtype_size * n);
  for (uint32_t i = 0; i < n; i++) encode(v, buf + dtype_size * i);
  CALL(api.nd_from_cpu(h, buf, n));
  free(buf);
  return h;
}

static long rss_kib(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long kib = -1;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "VmRSS: %ld", &kib) == 1) break;
  if (f) fclose(f);
  return kib;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* What a child reports: each measured iteration's seconds, then resident memory. */
struct report { long rss10, rss_end, heap10, heap_end; };

/* Bytes malloc has handed out and not taken back (glibc): unlike RSS, this does not move
 * with fragmentation or with pages touched once, so it shows a leak plainly. */
static long heap_kib(void) { return (long)(mallinfo2().uordblks / 1024); }

/* Writes or reads all `n` bytes (pipes may split them). */
static int full_io(int fd, void *buf, size_t n, int writing) {
  for (size_t done = 0; done < n;) {
    ssize_t k = writing ? write(fd, (char *)buf + done, n - done) : read(fd, (char *)buf + done, n - done);
    if (k <= 0) return 0;
    done += (size_t)k;
  }
  return 1;
}

/* Child: runs `name` on the loaded library; writes the iterations' seconds and a report to fd. */
static void child(const char *lib, const char *name, int iters, int warmup, int fd) {
  load(lib);
  workload(name);
  int values_per_key = !strcmp(name, "latency") ? 1 : DEVICES;
  int n = nkeys * values_per_key;
  int *keys = malloc(sizeof(int) * n);
  H *vals = malloc(sizeof(H) * n), *outs = malloc(sizeof(H) * n);
  H kv;
  CALL(api.create("local", &kv));
  for (int k = 0; k < nkeys; k++) {
    H init = make(sizes[k], 0, 1.0f);
    CALL(api.init(kv, 1, &k, &init));
    CALL(api.nd_free(init));
    for (int d = 0; d < values_per_key; d++) {
      keys[k * values_per_key + d] = k;
      vals[k * values_per_key + d] = make(sizes[k], d, 0.5f);
      outs[k * values_per_key + d] = make(sizes[k], d, 0.0f);
    }
  }
  if (!strcmp(name, "sgd")) CALL(api.set_updater(kv, sgd_updater, NULL));
  double *t = malloc(sizeof(double) * (size_t)iters);
  long rss10 = -1, heap10 = -1;
  for (int i = -warmup; i < iters; i++) {
    int traced = trace_path && i == iters - 1;
    if (traced) {
      const char *k[] = {"filename", "profile_all", "continuous_dump"}, *v[] = {trace_path, "True", "False"};
      CALL(api.prof_config(3, k, v));
      CALL(api.prof_state(1));
    }
    double t0 = now();
    CALL(api.push(kv, (uint32_t)n, keys, vals, 0));
    CALL(api.pull(kv, (uint32_t)n, keys, outs, 0));
    CALL(api.wait_all());
    if (i >= 0) t[i] = now() - t0;
    if (traced) {
      CALL(api.prof_state(0));
      CALL(api.prof_dump(1));
    }
    if (i == 9) rss10 = rss_kib(), heap10 = heap_kib();
  }
  struct report r = {rss10, rss_kib(), heap10, heap_kib()};
  if (!full_io(fd, t, sizeof(double) * (size_t)iters, 1) || !full_io(fd, &r, sizeof r, 1)) exit(2);
  for (int i = 0; i < n; i++) api.nd_free(vals[i]), api.nd_free(outs[i]);
  api.free_kv(kv);
  api.wait_all();
}

/* Parent: forks a child for (lib, workload), storing its `iters` iteration times in `t`;
 * returns 0 on failure. */
static int measure(const char *lib, const char *name, int iters, int warmup, double *t, struct report *r) {
  int p[2];
  if (pipe(p) != 0) exit(2);
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    close(p[0]);
    child(lib, name, iters, warmup, p[1]);
    _exit(0);
  }
  close(p[1]);
  int ok = full_io(p[0], t, sizeof(double) * (size_t)iters, 0) && full_io(p[0], r, sizeof *r, 0);
  close(p[0]);
  int status;
  waitpid(pid, &status, 0);
  if (!ok || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fprintf(stderr, "%s on %s failed\n", name, lib);
    return 0;
  }
  return 1;
}

static double median(double *t, int n) {
  qsort(t, (size_t)n, sizeof(double), cmp_double);
  return n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
}

/* ---- memory bandwidth -------------------------------------------------------------------- */

struct copy_job { char *dst, *src; size_t n; };
static void *copy_part(void *arg) {
  struct copy_job *j = arg;
  memcpy(j->dst, j->src, j->n);
  return NULL;
}

/* Best bytes copied per second over 256 MiB with `threads` threads. */
static double copy_bandwidth(int threads) {
  size_t n = 256u << 20;
  char *a = malloc(n), *b = malloc(n);
  memset(a, 1, n);
  memset(b, 2, n);
  double best = 1e9;
  for (int r = 0; r < 6; r++) {
    pthread_t th[16];
    struct copy_job jobs[16];
    double t0 = now();
    for (int i = 0; i < threads; i++) {
      jobs[i] = (struct copy_job){b + n / threads * i, a + n / threads * i, n / threads};
      pthread_create(&th[i], NULL, copy_part, &jobs[i]);
    }
    for (int i = 0; i < threads; i++) pthread_join(th[i], NULL);
    double t = now() - t0;
    if (t < best) best = t;
  }
  free(a);
  free(b);
  return (double)n / best;
}

int main(int argc, char **argv) {
  int iters = 0, warmup = 3, rss_iters = 1000, rounds = 3;
  const char *libs[8], *names[8];
  int nlibs = 0, nnames = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--warmup") && i + 1 < argc) warmup = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--rss-iters") && i + 1 < argc) rss_iters = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--rounds") && i + 1 < argc && atoi(argv[i + 1]) > 0) rounds = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--workload") && i + 1 < argc && nnames < 8) names[nnames++] = argv[++i];
    else if (!strcmp(argv[i], "--trace") && i + 1 < argc) trace_path = argv[++i];
    else if (!strcmp(argv[i], "--dtype") && i + 1 < argc) {
      const char *d = argv[++i];
      if (!strcmp(d, "float32")) dtype = 0, dtype_size = 4;
      else if (!strcmp(d, "float64")) dtype = 1, dtype_size = 8;
      else if (!strcmp(d, "float16")) dtype = 2, dtype_size = 2;
      else if (!strcmp(d, "bfloat16")) dtype = 12, dtype_size = 2;
      else return fprintf(stderr, "--dtype: float32, float64, float16 or bfloat16\n"), 2;
    }
    else if (argv[i][0] != '-' && nlibs < 8) libs[nlibs++] = argv[i];
    else {
      fprintf(stderr, "usage: %s [--iters N] [--warmup N] [--rss-iters N] [--rounds N] [--dtype T] [--trace FILE] [--workload NAME]... LIB...\n", argv[0]);
      return 2;
    }
  }
  if (nlibs == 0) return fprintf(stderr, "no library given\n"), 2;
  if (nnames == 0) {
    const char *all[] = {"resnet50", "big", "small", "sgd", "latency", "rss"};
    for (int i = 0; i < 6; i++) names[nnames++] = all[i];
  }
  int cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
  double bw1 = copy_bandwidth(1), bwn = copy_bandwidth(cores > 1 ? cores : 1);
  double bw = bw1 > bwn ? bw1 : bwn;
  printf("machine: %d cores; copy bandwidth %.2f GB/s (1 thread), %.2f GB/s (%d threads)\n", cores, bw1 / 1e9,
         bwn / 1e9, cores);
  printf("memory-traffic limit: per iteration an ideal store reads the 4 pushed values and writes the sum\n"
         "once, then reads it once and writes 4 outputs: 10 x S bytes of traffic for S bytes of parameters;\n"
         "a copy moves 2 bytes of traffic per byte copied, so limit = 10 S / (2 x best copy bandwidth).\n\n");
  printf("element type: %s (MXNet dtype %d)\n", dtype == 0 ? "float32" : dtype == 1 ? "float64" : dtype == 2 ? "float16" : "bfloat16", dtype);
  for (int l = 0; l < nlibs; l++) printf("lib%d: %s\n", l, libs[l]);
  printf("\n%-9s %8s", "workload", "values");
  for (int l = 0; l < nlibs; l++) printf("   lib%d s/iter", l);
  for (int l = 1; l < nlibs; l++) printf("  lib%d/lib0", l);
  printf("   limit s  lib%d/limit\n", nlibs - 1);
  for (int w = 0; w < nnames; w++) {
    if (!workload(names[w])) {
      fprintf(stderr, "unknown workload %s\n", names[w]);
      return 2;
    }
    if (!strcmp(names[w], "sgd") && dtype != 0) {
      printf("%-9s (float32 only: its updater works on float data)\n", "sgd");
      continue;
    }
    int is_rss = !strcmp(names[w], "rss"), is_latency = !strcmp(names[w], "latency");
    int n = is_rss ? rss_iters : iters > 0 ? iters : is_latency ? 2000 : !strcmp(names[w], "small") ? 30 : 15;
    /* The libraries take turns, `rounds` times, each time in a fresh child: the host's
     * memory bandwidth drifts within seconds, and turns spread that drift over both. */
    int r_count = is_rss ? 1 : rounds, per = (n + r_count - 1) / r_count;
    double values = total_values(), med[8];
    long rss10[8], rss_end[8], heap10[8], heap_end[8];
    double *times[8];
    for (int l = 0; l < nlibs; l++) times[l] = malloc(sizeof(double) * (size_t)(per * r_count));
    for (int r = 0; r < r_count; r++)
      for (int l = 0; l < nlibs; l++) {
        struct report rep;
        if (!measure(libs[l], names[w], per, is_rss ? 10 : warmup, times[l] + r * per, &rep)) return 2;
        rss10[l] = rep.rss10, rss_end[l] = rep.rss_end, heap10[l] = rep.heap10, heap_end[l] = rep.heap_end;
      }
    for (int l = 0; l < nlibs; l++) med[l] = median(times[l], per * r_count), free(times[l]);
    if (is_rss) {
      printf("%-9s %8.0f", "rss", values);
      for (int l = 0; l < nlibs; l++)
        printf("   lib%d RSS %ld KiB after 10 iterations, %ld KiB after %d (malloc in use %ld -> %ld KiB)", l, rss10[l],
               rss_end[l], n, heap10[l], heap_end[l]);
      printf("\n");
      continue;
    }
    if (is_latency) {
      printf("%-9s %8.0f", "latency", values);
      for (int l = 0; l < nlibs; l++) printf("   %9.1f us", med[l] * 1e6);
      for (int l = 1; l < nlibs; l++) printf("  %9.3f", med[l] / med[0]);
      printf("   (one key, one value: push + pull + wait)\n");
      continue;
    }
    double limit = 10.0 * values * (double)dtype_size / (2 * bw);
    printf("%-9s %8.0f", names[w], values);
    for (int l = 0; l < nlibs; l++) printf("   %12.4f", med[l]);
    for (int l = 1; l < nlibs; l++) printf("  %9.3f", med[l] / med[0]);
    printf("   %7.4f  %9.2f\n", limit, med[nlibs - 1] / limit);
  }
  return 0;
}
