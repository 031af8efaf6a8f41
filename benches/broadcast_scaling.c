/* Broadcast scaling: for n keys of 4 float32 values, the time of one Broadcast (n keys in,
 * the same n keys out) against one Init followed by one Pull of the same keys, in fresh
 * stores. A broadcast is an init and a pull, so the ratio should stay flat as n grows.
 *
 *   cc -O2 -I include benches/broadcast_scaling.c -L target/release -lkvstore -o target/broadcast_scaling
 *   LD_LIBRARY_PATH=target/release target/broadcast_scaling 10000 20000 40000 80000
 */
#include "kvstore.h"
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

#define OK(call) do { if ((call) != 0) { fprintf(stderr, "%s: %s\n", #call, MXGetLastError()); exit(1); } } while (0)

int main(int argc, char **argv) {
  printf("%8s %12s %12s %8s\n", "keys", "init+pull s", "broadcast s", "ratio");
  for (int a = 1; a < argc; a++) {
    int n = atoi(argv[a]);
    int *keys = malloc(sizeof(int) * n);
    NDArrayHandle *vals = malloc(sizeof(NDArrayHandle) * n), *outs = malloc(sizeof(NDArrayHandle) * n);
    uint32_t shape = 4;
    for (int i = 0; i < n; i++) {
      keys[i] = i;
      OK(MXNDArrayCreateEx(&shape, 1, 1, 0, 0, 0, &vals[i]));
      OK(MXNDArrayCreateEx(&shape, 1, 1, 0, 0, 0, &outs[i]));
    }
    KVStoreHandle kv1, kv2;
    OK(MXKVStoreCreate("local", &kv1));
    OK(MXKVStoreCreate("local", &kv2));
    double t0 = now();
    OK(MXKVStoreInit(kv1, n, keys, vals));
    OK(MXKVStorePull(kv1, n, keys, outs, 0));
    OK(MXNDArrayWaitAll());
    double t1 = now();
    OK(MXKVStoreBroadcast(kv2, n, keys, n, keys, vals, outs, 0));
    OK(MXNDArrayWaitAll());
    double t2 = now();
    printf("%8d %12.4f %12.4f %8.2f\n", n, t1 - t0, t2 - t1, (t2 - t1) / (t1 - t0));
    OK(MXKVStoreFree(kv1));
    OK(MXKVStoreFree(kv2));
    for (int i = 0; i < n; i++) {
      OK(MXNDArrayFree(vals[i]));
      OK(MXNDArrayFree(outs[i]));
    }
    free(keys); free(vals); free(outs);
  }
  return 0;
}
