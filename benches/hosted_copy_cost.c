/* What one store copy costs in hosted mode: the hosted store stages every pushed value and
 * writes every pulled one with MXNet's `_copyto` through MXImperativeInvoke (MXNet's own
 * store calls CopyFromTo directly). Times 20000 invokes of `_copyto` on 1024 float32 values,
 * cpu(0) -> cpu(1), against the library it is linked with (benches/hosted-step.sh links the
 * reference libmxnet.so). */
#define _POSIX_C_SOURCE 199309L
#include "../ctests/common.h"
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(void) {
  NDArrayHandle src = f32_filled(1024, 1, 0), dst = f32_filled(1024, 0, 1);
  void *copyto = NULL;
  CHECK(NNGetOpHandle("_copyto", &copyto));
  const int n = 20000;
  for (int round = 0; round < 3; round++) {
    double start = now();
    for (int i = 0; i < n; i++) {
      NDArrayHandle *outputs = &dst;
      int num_outputs = 1;
      CHECK(MXImperativeInvoke(copyto, 1, &src, &num_outputs, &outputs, 0, NULL, NULL));
    }
    CHECK(MXNDArrayWaitAll());
    printf("_copyto through MXImperativeInvoke: %.2f us per copy (4 KiB, queued and done)\n", (now() - start) / n * 1e6);
  }
  CHECK(MXNDArrayFree(src));
  CHECK(MXNDArrayFree(dst));
  return 0;
}
