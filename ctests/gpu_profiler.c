/* GPU work in the profiler's trace, on the CUDA stand-in (tests/gpu_profiler.rs checks the
 * files): a device store on 2 GPUs with a small key (fused sum) and a big key (sum_float32),
 * another with 2-bit compression (quantize/dequantize), pulls into GPU and host outputs and a
 * synchronous upload, once with the profiler running (ON_TRACE) and once with it stopped
 * (OFF_TRACE). Prints the CUDA_STANDIN_TRACE file's size around each phase and the arrays'
 * sizes in bytes.
 *
 * usage: gpu_profiler ON_TRACE OFF_TRACE */
#include "common.h"
#include <sys/stat.h>

#define SMALL 100u
#define BIG 100000u
#define COMPRESSED 1000u

static long trace_size(void) {
  struct stat st;
  const char *path = getenv("CUDA_STANDIN_TRACE");
  return path && stat(path, &st) == 0 ? (long)st.st_size : -1;
}

static NDArrayHandle array(int dev_type, int dev_id, uint32_t n, float base) {
  NDArrayHandle h;
  CHECK(MXNDArrayCreateEx(&n, 1, dev_type, dev_id, 0, DT_F32, &h));
  float *v = malloc(n * sizeof *v);
  for (uint32_t i = 0; i < n; i++) v[i] = base + (float)(i % 7);
  CHECK(MXNDArraySyncCopyFromCPU(h, v, n));
  free(v);
  return h;
}

static KVStoreHandle kv, ckv;
static NDArrayHandle vals[4], outs[5], cvals[2], couts[2], upload_target;
static float *upload_data;

/* One round: an upload, a push and pull of both keys, a compressed push and pull. */
static void round_trip(void) {
  CHECK(MXNDArraySyncCopyFromCPU(upload_target, upload_data, BIG));
  int keys[4] = {0, 0, 1, 1};
  CHECK(MXKVStorePush(kv, 4, keys, vals, 0));
  int pull_keys[5] = {0, 0, 1, 1, 1};
  CHECK(MXKVStorePull(kv, 5, pull_keys, outs, 0));
  int ckeys[2] = {7, 7};
  CHECK(MXKVStorePush(ckv, 2, ckeys, cvals, 0));
  CHECK(MXKVStorePull(ckv, 2, ckeys, couts, 0));
  CHECK(MXNDArrayWaitAll());
}

static void profiler_config(const char *filename) {
  const char *keys[2] = {"filename", "profile_all"};
  const char *values[2] = {filename, "1"};
  CHECK(MXSetProfilerConfig(2, keys, values));
}

int main(int argc, char **argv) {
  if (argc != 3) { fprintf(stderr, "usage: gpu_profiler ON_TRACE OFF_TRACE\n"); return 2; }
  int n_gpus = 0;
  CHECK(MXGetGPUCount(&n_gpus));
  EXPECT(n_gpus >= 2);

  CHECK(MXKVStoreCreate("device", &kv));
  CHECK(MXKVStoreCreate("device", &ckv));
  const char *gk[2] = {"type", "threshold"}, *gv[2] = {"2bit", "0.5"};
  CHECK(MXKVStoreSetGradientCompression(ckv, 2, gk, gv));
  int init_keys[2] = {0, 1};
  NDArrayHandle init[2] = {array(DEV_CPU, 0, SMALL, 0.0f), array(DEV_CPU, 0, BIG, 0.0f)};
  CHECK(MXKVStoreInit(kv, 2, init_keys, init));
  int ckey = 7;
  NDArrayHandle cinit = array(DEV_CPU, 0, COMPRESSED, 0.0f);
  CHECK(MXKVStoreInit(ckv, 1, &ckey, &cinit));
  for (int g = 0; g < 2; g++) {
    vals[g] = array(DEV_GPU, g, SMALL, 1.0f + (float)g);
    vals[2 + g] = array(DEV_GPU, g, BIG, 1.0f + (float)g);
    outs[g] = array(DEV_GPU, g, SMALL, 0.0f);
    outs[2 + g] = array(DEV_GPU, g, BIG, 0.0f);
    cvals[g] = array(DEV_GPU, g, COMPRESSED, 1.0f);
    couts[g] = array(DEV_GPU, g, COMPRESSED, 0.0f);
  }
  outs[4] = array(DEV_CPU, 0, BIG, 0.0f); /* a pull into pageable host memory */
  upload_target = array(DEV_GPU, 0, BIG, 0.0f);
  upload_data = malloc(BIG * sizeof *upload_data);
  for (uint32_t i = 0; i < BIG; i++) upload_data[i] = (float)i;

  round_trip(); /* warm-up: placement, kernels, staging pool */
  printf("small_bytes=%u\nbig_bytes=%u\ncompressed_bytes=%u\n", SMALL * 4, BIG * 4, COMPRESSED * 4);

  profiler_config(argv[1]);
  printf("on_from=%ld\n", trace_size());
  CHECK(MXSetProfilerState(1));
  round_trip();
  CHECK(MXSetProfilerState(0));
  printf("on_to=%ld\n", trace_size());
  CHECK(MXDumpProfile(0));

  profiler_config(argv[2]);
  printf("off_from=%ld\n", trace_size());
  round_trip();
  printf("off_to=%ld\n", trace_size());
  CHECK(MXDumpProfile(1));

  float v[SMALL];
  CHECK(MXNDArraySyncCopyToCPU(outs[1], v, SMALL));
  EXPECT(v[0] == 3.0f && v[6] == 15.0f);

  for (int i = 0; i < 4; i++) MXNDArrayFree(vals[i]);
  for (int i = 0; i < 5; i++) MXNDArrayFree(outs[i]);
  for (int g = 0; g < 2; g++) { MXNDArrayFree(cvals[g]); MXNDArrayFree(couts[g]); }
  MXNDArrayFree(init[0]); MXNDArrayFree(init[1]); MXNDArrayFree(cinit); MXNDArrayFree(upload_target);
  free(upload_data);
  CHECK(MXKVStoreFree(kv));
  CHECK(MXKVStoreFree(ckv));
  printf("gpu_profiler: ok\n");
  return 0;
}
