/* Which library serves what, seen from a C program linked with -lkvstore: in hosted mode an
 * operator only MXNet has (`dot`) must compute, and the store must be libkvstore's (a push
 * of the wrong shape is refused with libkvstore's message; MXNet's local store accepts it).
 * Prints one line per fact; tests/hosted/run.sh checks the lines. */
#include "../../ctests/common.h"

int main(void) {
  /* dot of (2,2) [[1,2],[3,4]] with itself: [[7,10],[15,22]] */
  const float m[4] = {1, 2, 3, 4};
  NDArrayHandle a = f32_matrix(2, 2, m, 0);
  void *dot = NULL;
  CHECK(NNGetOpHandle("dot", &dot));
  NDArrayHandle inputs[2] = {a, a};
  NDArrayHandle out = f32_matrix(2, 2, m, 0);
  NDArrayHandle *outputs = &out;
  int num_outputs = 1;
  int rc = MXImperativeInvoke(dot, 2, inputs, &num_outputs, &outputs, 0, NULL, NULL);
  if (rc == 0) {
    float r[4];
    CHECK(MXNDArraySyncCopyToCPU(out, r, 4));
    printf("dot: %g %g %g %g\n", r[0], r[1], r[2], r[3]);
  } else {
    printf("dot: rc=%d %s\n", rc, MXGetLastError());
  }

  KVStoreHandle kv;
  CHECK(MXKVStoreCreate("local", &kv));
  int key = 3;
  CHECK(MXKVStoreInit(kv, 1, &key, &a));
  NDArrayHandle wrong = f32_filled(5, 1, 0);
  rc = MXKVStorePush(kv, 1, &key, &wrong, 0);
  printf("push of shape (5) into a (2,2) key: rc=%d %s\n", rc, rc ? MXGetLastError() : "accepted");
  CHECK(MXKVStoreFree(kv));
  CHECK(MXNDArrayFree(wrong));
  CHECK(MXNDArrayFree(out));
  CHECK(MXNDArrayFree(a));
  CHECK(MXNotifyShutdown());
  return 0;
}
