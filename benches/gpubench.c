/* gpubench: the GPU workloads on libkvstore.so (linked), with the limits measured in
 * the same run through the CUDA driver (dlopen libcuda.so.1):
 *   - resnet50, big, small with 4 values on GPU contexts (gpu(i % n): all on gpu(0) with one
 *     GPU, as MXNet allows), a `device` store, push + pull + wait per iteration;
 *   - the same pushed from CPU arrays (pageable user memory staged through pinned buffers);
 *   - latency: one small key, one value on gpu(0), push + pull + wait;
 *   - the device-to-device copy limit (cuMemcpyDtoD of the same bytes a reduction reads and
 *     writes) and the pinned host-to-device bandwidth.
 * Prints seconds per iteration (median) and the ratio to the limit. Goals on one H100: big
 * <= 1.15x, resnet50 <= 1.5x, small <= 3x the copy limit; latency <= 30 us; cpu->gpu pushes
 * >= 80% of pinned H2D bandwidth. Without a GPU it prints a skip line and exits 0.
 * --trace DIR: the last measured iteration of each workload's GPU run is recorded by the
 * profiler (MXNet's profiler C API) and dumped to DIR/<workload>.json as a Chrome trace.
 * --phases: also the medians of the push and pull calls' own times (the calling thread's share),
 *   wall-clock and the calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID).
 * usage: gpubench [--iters N] [--trace DIR] [--phases] [--workload NAME]...   (built by scripts/gpu-bundle.sh) */
#define _POSIX_C_SOURCE 200809L
#include "../ctests/common.h"
#include <dlfcn.h>
#include <time.h>

#define MAX_KEYS 4096
#define VALUES 4
static uint32_t sizes[MAX_KEYS];
static int nkeys;
static void add(uint32_t n) { sizes[nkeys++] = n; }

/* ResNet-50 v1's 161 parameter tensors (25,557,032 values), as benches/kvbench.c. */
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
  if (!strcmp(name, "resnet50")) resnet50();
  else if (!strcmp(name, "big")) add(16u << 20);
  else if (!strcmp(name, "small")) for (int i = 0; i < 2000; i++) add(1024);
  else if (!strcmp(name, "latency")) add(16);
  else return 0;
  return 1;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The calling thread's CPU time: on a machine whose cores other threads share (the CUDA
 * stand-in's streams), its own cost apart from time spent preempted. */
static double thread_cpu(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* ---- limits through the driver ---------------------------------------------------------- */
typedef int (*fn_init)(unsigned);
typedef int (*fn_dev)(int *, int);
typedef int (*fn_ctx)(void **, int);
typedef int (*fn_set)(void *);
typedef int (*fn_alloc)(unsigned long long *, size_t);
typedef int (*fn_free)(unsigned long long);
typedef int (*fn_d2d)(unsigned long long, unsigned long long, size_t);
typedef int (*fn_h2d)(unsigned long long, const void *, size_t);
typedef int (*fn_hostalloc)(void **, size_t, unsigned);
typedef int (*fn_sync)(void);

/* Seconds to copy `bytes` device to device (median of 20), and pinned host-to-device GB/s. */
static int measure_limits(size_t bytes, double *d2d_s, double *h2d_gbs) {
  void *cu = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!cu) return 0;
  fn_init init = (fn_init)(uintptr_t)dlsym(cu, "cuInit");
  fn_dev dev_get = (fn_dev)(uintptr_t)dlsym(cu, "cuDeviceGet");
  fn_ctx retain = (fn_ctx)(uintptr_t)dlsym(cu, "cuDevicePrimaryCtxRetain");
  fn_set set = (fn_set)(uintptr_t)dlsym(cu, "cuCtxSetCurrent");
  fn_alloc alloc = (fn_alloc)(uintptr_t)dlsym(cu, "cuMemAlloc_v2");
  fn_free mfree = (fn_free)(uintptr_t)dlsym(cu, "cuMemFree_v2");
  fn_d2d d2d = (fn_d2d)(uintptr_t)dlsym(cu, "cuMemcpyDtoD_v2");
  fn_h2d h2d = (fn_h2d)(uintptr_t)dlsym(cu, "cuMemcpyHtoD_v2");
  fn_hostalloc halloc = (fn_hostalloc)(uintptr_t)dlsym(cu, "cuMemHostAlloc");
  fn_sync sync = (fn_sync)(uintptr_t)dlsym(cu, "cuCtxSynchronize");
  int dev;
  void *ctx;
  unsigned long long a, b;
  void *host;
  if (!init || init(0) || dev_get(&dev, 0) || retain(&ctx, dev) || set(ctx)) return 0;
  if (alloc(&a, bytes) || alloc(&b, bytes) || halloc(&host, bytes, 1 /* PORTABLE */)) return 0;
  memset(host, 1, bytes);
  double t[20];
  for (int i = 0; i < 20; i++) {
    double t0 = now();
    d2d(b, a, bytes);
    sync();
    t[i] = now() - t0;
  }
  qsort(t, 20, sizeof t[0], cmp_double);
  *d2d_s = t[10];
  for (int i = 0; i < 20; i++) {
    double t0 = now();
    h2d(a, host, bytes);
    sync();
    t[i] = now() - t0;
  }
  qsort(t, 20, sizeof t[0], cmp_double);
  *h2d_gbs = (double)bytes / t[10] / 1e9;
  mfree(a);
  mfree(b);
  return 1;
}

/* ---- the measured iterations --------------------------------------------------------- */
static const char *trace_dir = NULL;
static int phases = 0;

static double run(const char *name, int from_cpu, int n_gpus, int iters) {
  KVStoreHandle kv;
  CHECK(MXKVStoreCreate("device", &kv));
  NDArrayHandle *vals = malloc(sizeof(NDArrayHandle) * (size_t)nkeys * VALUES);
  NDArrayHandle *outs = malloc(sizeof(NDArrayHandle) * (size_t)nkeys * VALUES);
  int *keys = malloc(sizeof(int) * (size_t)nkeys * VALUES);
  int values = strcmp(name, "latency") == 0 ? 1 : VALUES;
  for (int k = 0; k < nkeys; k++) {
    NDArrayHandle init;
    CHECK(MXNDArrayCreateEx(&sizes[k], 1, DEV_GPU, 0, 0, DT_F32, &init));
    CHECK(MXKVStoreInit(kv, 1, &k, &init));
    MXNDArrayFree(init);
    for (int v = 0; v < values; v++) {
      int i = k * values + v;
      keys[i] = k;
      CHECK(MXNDArrayCreateEx(&sizes[k], 1, from_cpu ? DEV_CPU : DEV_GPU, from_cpu ? v : v % n_gpus, 0, DT_F32, &vals[i]));
      CHECK(MXNDArrayCreateEx(&sizes[k], 1, DEV_GPU, v % n_gpus, 0, DT_F32, &outs[i]));
    }
  }
  uint32_t total = (uint32_t)(nkeys * values);
  double *t = malloc(sizeof(double) * (size_t)iters);
  double *push_s = malloc(sizeof(double) * (size_t)iters), *pull_s = malloc(sizeof(double) * (size_t)iters);
  double *push_cpu = malloc(sizeof(double) * (size_t)iters), *pull_cpu = malloc(sizeof(double) * (size_t)iters);
  char trace_path[4096];
  int traced_run = trace_dir && !from_cpu;
  if (traced_run) snprintf(trace_path, sizeof trace_path, "%s/%s.json", trace_dir, name);
  for (int it = -3; it < iters; it++) {
    int traced = traced_run && it == iters - 1;
    if (traced) {
      const char *k[] = {"filename", "profile_all", "continuous_dump"}, *v[] = {trace_path, "True", "False"};
      CHECK(MXSetProfilerConfig(3, k, v));
      CHECK(MXSetProfilerState(1));
    }
    double c0 = thread_cpu(), t0 = now();
    CHECK(MXKVStorePush(kv, total, keys, vals, 0));
    double t1 = now(), c1 = thread_cpu();
    CHECK(MXKVStorePull(kv, total, keys, outs, 0));
    double t2 = now(), c2 = thread_cpu();
    CHECK(MXNDArrayWaitAll());
    if (it >= 0) {
      t[it] = now() - t0;
      push_s[it] = t1 - t0;
      pull_s[it] = t2 - t1;
      push_cpu[it] = c1 - c0;
      pull_cpu[it] = c2 - c1;
    }
    if (traced) {
      CHECK(MXSetProfilerState(0));
      CHECK(MXDumpProfile(1));
    }
  }
  qsort(t, (size_t)iters, sizeof t[0], cmp_double);
  double median = t[iters / 2];
  if (phases && !from_cpu) {
    qsort(push_s, (size_t)iters, sizeof push_s[0], cmp_double);
    qsort(pull_s, (size_t)iters, sizeof pull_s[0], cmp_double);
    qsort(push_cpu, (size_t)iters, sizeof push_cpu[0], cmp_double);
    qsort(pull_cpu, (size_t)iters, sizeof pull_cpu[0], cmp_double);
    printf("%-9s phases: push call %.1f us (%.1f us CPU), pull call %.1f us (%.1f us CPU) (medians)\n", name,
           push_s[iters / 2] * 1e6, push_cpu[iters / 2] * 1e6, pull_s[iters / 2] * 1e6, pull_cpu[iters / 2] * 1e6);
  }
  free(push_s); free(pull_s); free(push_cpu); free(pull_cpu);
  for (uint32_t i = 0; i < total; i++) { MXNDArrayFree(vals[i]); MXNDArrayFree(outs[i]); }
  CHECK(MXKVStoreFree(kv));
  free(vals); free(outs); free(keys); free(t);
  return median;
}

int main(int argc, char **argv) {
  /* --gpu-only: no pushes from CPU arrays (a profile of the GPU values' calls alone). */
  int iters = 20, n_names = 0, gpu_only = 0;
  const char *names[8];
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--workload") && i + 1 < argc && n_names < 8) names[n_names++] = argv[++i];
    else if (!strcmp(argv[i], "--trace") && i + 1 < argc) trace_dir = argv[++i];
    else if (!strcmp(argv[i], "--phases")) phases = 1;
    else if (!strcmp(argv[i], "--gpu-only")) gpu_only = 1;
    else { fprintf(stderr, "usage: %s [--iters N] [--trace DIR] [--phases] [--gpu-only] [--workload NAME]...\n", argv[0]); return 2; }
  }
  if (n_names == 0) { names[0] = "resnet50"; names[1] = "big"; names[2] = "small"; names[3] = "latency"; n_names = 4; }
  if (iters < 1) iters = 1;
  int n_gpus = 0;
  CHECK(MXGetGPUCount(&n_gpus));
  if (n_gpus == 0) { printf("gpubench: skipped: no CUDA device (MXGetGPUCount = 0)\n"); return 0; }
  printf("%-9s %-5s %12s %12s %8s\n", "workload", "from", "s/iter", "copy limit", "ratio");
  for (int w = 0; w < n_names; w++) {
    if (!workload(names[w])) { fprintf(stderr, "unknown workload %s\n", names[w]); return 2; }
    double values = 0;
    for (int k = 0; k < nkeys; k++) values += sizes[k];
    /* The reduction reads VALUES arrays and writes one (then the pull writes VALUES): the
     * copy limit is a device-to-device copy of the same bytes moved. */
    size_t bytes = (size_t)(values * 4 * (2 * VALUES));
    double d2d = 0, h2d_gbs = 0;
    if (!measure_limits(bytes / 2, &d2d, &h2d_gbs)) { printf("gpubench: could not measure the copy limit\n"); return 1; }
    d2d *= 2;
    for (int from_cpu = 0; from_cpu < 2; from_cpu++) {
      if (from_cpu && (gpu_only || !strcmp(names[w], "latency"))) continue;
      double s = run(names[w], from_cpu, n_gpus, strcmp(names[w], "small") ? iters : 2 * iters);
      if (!strcmp(names[w], "latency")) printf("%-9s %-5s %10.1f us\n", names[w], "gpu", s * 1e6);
      else if (from_cpu) {
        double gbs = values * 4 * VALUES / s / 1e9;
        printf("%-9s %-5s %12.6f %9.2f GB/s %8.2f of pinned H2D %.2f GB/s\n", names[w], "cpu", s, gbs, gbs / h2d_gbs, h2d_gbs);
      } else printf("%-9s %-5s %12.6f %12.6f %8.2f\n", names[w], "gpu", s, d2d, s / d2d);
    }
  }
  return 0;
}
