/* Allocation failure: with the address space capped (RLIMIT_AS) below what a call needs,
 * every call answers -1 with an "out of host memory" message and nothing aborts — also when
 * the allocation happens in work that runs after the call returned (the failure then
 * surfaces at the next wait on the arrays it would have written). libkvstore.so only. */
#define _DEFAULT_SOURCE
#include "common.h"
#include "limit_memory.h"
#include <stdbool.h>

#define ROWS (1u << 16)
#define COLS 1024 /* ROWS x COLS float32: 256 MiB */

static int failures = 0;

static void expect_fail(const char *what, int rc, const char *needle, int line) {
  const char *msg = MXGetLastError();
  if (rc != -1 || !strstr(msg, needle)) {
    fprintf(stderr, "line %d: %s: expected -1 with '%s', got %d '%s'\n", line, what, needle, rc, msg);
    failures++;
  } else {
    printf("%s: -1 (%s)\n", what, needle);
  }
}
#define FAILS(call, needle) expect_fail(#call, (call), needle, __LINE__)

static NDArrayHandle big(int stype) {
  uint32_t shape[2] = {ROWS, COLS};
  NDArrayHandle h;
  if (stype == 0) {
    CHECK(MXNDArrayCreateEx(shape, 2, DEV_CPU, 0, 0, DT_F32, &h));
  } else {
    uint32_t aux_ndim = 1, nnr = 0;
    int aux_type = DT_I64;
    CHECK(MXNDArrayCreateSparseEx(1, shape, 2, DEV_CPU, 0, 0, DT_F32, 1, &aux_type, &aux_ndim, &nnr, &h));
  }
  return h;
}

static void drop_both(int key, NDArrayHandle recv, NDArrayHandle local, void *user) {
  (void)key;
  (void)user;
  CHECK(MXNDArrayFree(recv));
  CHECK(MXNDArrayFree(local));
}

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  alarm(60);
  KVStoreHandle kv;
  CHECK(MXKVStoreCreate("local", &kv));
  NDArrayHandle dense = big(0), out = big(0), rsp = big(1), rsp_out = big(1);
  int key = 0;
  CHECK(MXKVStoreInit(kv, 1, &key, &dense));
  CHECK(MXNDArrayWaitAll());
  if (limit_memory(64u << 20) != 0) {
    printf("oom skipped: cannot set RLIMIT_AS\n");
    return 0;
  }
  /* Synchronous: the call itself allocates. */
  uint32_t huge[2] = {ROWS * 4, COLS};
  NDArrayHandle h = NULL;
  FAILS(MXNDArrayCreateEx(huge, 2, DEV_CPU, 0, 0, DT_F32, &h), "out of host memory");
  int two[2] = {0, 0};
  NDArrayHandle pair[2] = {dense, dense};
  /* Asynchronous: a dense + row_sparse sum densifies into 256 MiB buffers on a worker. */
  NDArrayHandle mixed[2] = {dense, rsp};
  CHECK(MXKVStorePush(kv, 2, two, mixed, 0));
  CHECK(MXKVStorePull(kv, 1, &key, &out, 0));
  FAILS(MXNDArrayWaitToRead(out), "out of host memory");
  /* A dense stored value pulled into a row_sparse output (cast_storage on a worker). */
  CHECK(MXKVStorePullWithSparse(kv, 1, &key, &rsp_out, 0, false));
  FAILS(MXNDArrayWaitToRead(rsp_out), "out of host memory");
  /* An updater's merge buffer for two values: the push itself allocates it. */
  CHECK(MXKVStoreSetUpdater(kv, drop_both, NULL));
  FAILS(MXKVStorePush(kv, 2, two, pair, 0), "out of host memory");
  CHECK(MXNDArrayWaitAll());
  /* Everything still works where memory suffices. */
  NDArrayHandle small = f32_filled(4, 2, 0);
  int k1 = 1;
  CHECK(MXKVStoreInit(kv, 1, &k1, &small));
  CHECK(MXKVStorePush(kv, 1, &k1, &small, 0));
  CHECK(MXKVStorePull(kv, 1, &k1, &small, 0));
  EXPECT(f32_uniform(small, 4) == 2);
  CHECK(MXNDArrayFree(small));
  CHECK(MXNDArrayFree(dense));
  CHECK(MXNDArrayFree(out));
  CHECK(MXNDArrayFree(rsp));
  CHECK(MXNDArrayFree(rsp_out));
  CHECK(MXKVStoreFree(kv));
  if (failures) {
    fprintf(stderr, "%d failures\n", failures);
    return 1;
  }
  printf("oom passed\n");
  return 0;
}
