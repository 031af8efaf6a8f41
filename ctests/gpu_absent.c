/* What libkvstore answers on a machine without a usable CUDA device: MXGetGPUCount 0, the
 * GPU memory queries and gpu(i) arrays -1 with a clear message, the CUDA feature off, the
 * `nccl` store refused at its creation with the reason -- and nothing printed to stderr (the cargo wrapper checks that).
 * On a machine with a GPU it prints a skip line and exits 0: test-gpu.sh covers that case. */
#include "common.h"
#include <stdbool.h>
#include <sys/wait.h>
#include <unistd.h>

struct Feature { const char *name; bool enabled; };

static void expect_error_containing(int rc, const char *what, const char *needle) {
  if (rc != -1) { printf("FAIL %s returned %d, not -1\n", what, rc); exit(1); }
  const char *err = MXGetLastError();
  if (!strstr(err, needle)) { printf("FAIL %s: message \"%s\" lacks \"%s\"\n", what, err, needle); exit(1); }
  printf("%s: -1 \"%s\"\n", what, err);
}

int main(void) {
  int count = -1;
  CHECK(MXGetGPUCount(&count));
  if (count > 0) {
    printf("gpu_absent: skipped: this machine has %d CUDA device(s); scripts/test-gpu.sh tests them\n", count);
    return 0;
  }
  EXPECT(count == 0);
  printf("MXGetGPUCount: 0\n");

  int free32 = 7, total32 = 7;
  expect_error_containing(MXGetGPUMemoryInformation(0, &free32, &total32), "MXGetGPUMemoryInformation", "no usable CUDA device");
  EXPECT(free32 == 7 && total32 == 7); /* out-parameters untouched on failure */
  uint64_t free64 = 7, total64 = 7;
  expect_error_containing(MXGetGPUMemoryInformation64(0, &free64, &total64), "MXGetGPUMemoryInformation64", "no usable CUDA device");
  EXPECT(free64 == 7 && total64 == 7);

  uint32_t shape[1] = {4};
  NDArrayHandle h = NULL;
  expect_error_containing(MXNDArrayCreateEx(shape, 1, DEV_GPU, 0, 0, DT_F32, &h), "MXNDArrayCreateEx(gpu(0))", "gpu(0) is not available");
  EXPECT(h == NULL);
  expect_error_containing(MXNDArrayCreateEx(shape, 1, DEV_GPU, 3, 0, DT_F16, &h), "MXNDArrayCreateEx(gpu(3))", "gpu(3)");
  expect_error_containing(MXNDArrayCreate(shape, 1, DEV_GPU, 0, 1, &h), "MXNDArrayCreate(gpu(0))", "no usable CUDA device");

  const struct LibFeature *features = NULL;
  size_t n = 0;
  CHECK(MXLibInfoFeatures(&features, &n));
  const struct Feature *f = (const struct Feature *)(const void *)features;
  bool seen = false;
  for (size_t i = 0; i < n; i++) {
    if (strcmp(f[i].name, "CUDA") == 0) { EXPECT(!f[i].enabled); seen = true; }
  }
  EXPECT(seen);
  printf("MXLibInfoFeatures: CUDA off\n");

  KVStoreHandle kv = NULL;
  expect_error_containing(MXKVStoreCreate("nccl", &kv), "MXKVStoreCreate(nccl)", "'nccl' store sums on CUDA GPUs, and this process has none: no usable CUDA device");
  EXPECT(kv == NULL);
  expect_error_containing(MXKVStoreCreate("Local_NCCL", &kv), "MXKVStoreCreate(Local_NCCL)", "'local_nccl' store sums on CUDA GPUs");
  /* NCCL is a feature only with a usable GPU. */
  for (size_t i = 0; i < n; i++)
    if (strcmp(f[i].name, "NCCL") == 0) EXPECT(!f[i].enabled);

  /* A forked child answers the same, and so does the parent afterwards: no hang, no output. */
  pid_t pid = fork();
  if (pid == 0) {
    int c = -1;
    _exit(MXGetGPUCount(&c) == 0 && c == 0 ? 0 : 3);
  }
  int status = 0;
  EXPECT(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
  printf("forked child: MXGetGPUCount 0\n");
  CHECK(MXNotifyShutdown());
  printf("gpu_absent: ok\n");
  return 0;
}
