/* row_sparse row ids, against libkvstore.so only (MXNet accepts all of these and then reads
 * out of bounds, returns ids the array does not have, or lets two reads of a row disagree):
 * ids are refused where they enter unless sorted, unique and in [0, rows); arrays whose ids
 * and values disagree are refused by the store and the operators with a clear -1 (never
 * "internal error (panic)"); PullRowSparse refuses ids out of range. Every refusal changes
 * nothing. The harness checks that nothing is printed on stderr. */
#include "common.h"

#define ROWS 6
#define COLS 2

static int failures = 0;

static void expect_fail(const char *what, int rc, const char *needle, int line) {
  const char *err = MXGetLastError();
  if (rc != -1 || strstr(err, needle) == NULL || strstr(err, "panic") != NULL) {
    fprintf(stderr, "line %d: %s: rc=%d error='%s' (wanted -1 and '%s')\n", line, what, rc, err, needle);
    failures++;
  }
}
#define FAILS(call, needle) expect_fail(#call, (call), needle, __LINE__)
#define TRUE(cond) \
  do { if (!(cond)) { fprintf(stderr, "line %d: expected %s\n", __LINE__, #cond); failures++; } } while (0)

/* A (ROWS, COLS) row_sparse float32 array declared with nnr rows (its ids are zeros). */
static NDArrayHandle rsp_declared(uint32_t nnr) {
  uint32_t shape[2] = {ROWS, COLS}, aux_ndim = 1;
  int aux_type = DT_I64;
  NDArrayHandle h;
  CHECK(MXNDArrayCreateSparseEx(1, shape, 2, DEV_CPU, 0, 0, DT_F32, 1, &aux_type, &aux_ndim, &nnr, &h));
  return h;
}

static NDArrayHandle ids_array(uint32_t n, const int64_t *ids) {
  NDArrayHandle h;
  CHECK(MXNDArrayCreateEx(&n, 1, DEV_CPU, 0, 0, DT_I64, &h));
  if (n) CHECK(MXNDArraySyncCopyFromCPU(h, ids, n));
  return h;
}

static int set_ids(NDArrayHandle rsp, uint32_t n, const int64_t *ids) {
  NDArrayHandle i = ids_array(n, ids);
  int rc = MXNDArraySyncCopyFromNDArray(rsp, i, 0);
  CHECK(MXNDArrayFree(i));
  return rc;
}

static void set_values(NDArrayHandle rsp, uint32_t nnr, float v) {
  float vals[ROWS * COLS];
  for (int i = 0; i < ROWS * COLS; i++) vals[i] = v;
  NDArrayHandle d = f32_matrix(nnr, COLS, vals, 0);
  CHECK(MXNDArraySyncCopyFromNDArray(rsp, d, -1));
  CHECK(MXNDArrayFree(d));
}

/* The row ids of a row_sparse array, as "a b c". */
static const char *ids_text(NDArrayHandle rsp) {
  static char text[128];
  NDArrayHandle a;
  int nd;
  const int *dims;
  int64_t ids[ROWS + 2];
  CHECK(MXNDArrayGetAuxNDArray(rsp, 0, &a));
  CHECK(MXNDArrayGetShapeEx(a, &nd, &dims));
  int n = dims[0];
  if (n > 0) CHECK(MXNDArraySyncCopyToCPU(a, ids, (size_t)n));
  CHECK(MXNDArrayFree(a));
  text[0] = 0;
  for (int i = 0; i < n; i++) snprintf(text + strlen(text), sizeof text - strlen(text), "%s%lld", i ? " " : "", (long long)ids[i]);
  return text;
}

static int invoke1(const char *op, NDArrayHandle in, const char *key, const char *val, NDArrayHandle *out) {
  void *creator;
  CHECK(NNGetOpHandle(op, &creator));
  int n = 0;
  NDArrayHandle *outs = NULL;
  const char *k[1] = {key}, *v[1] = {val};
  int rc = MXImperativeInvoke(creator, 1, &in, &n, &outs, key ? 1 : 0, k, v);
  if (rc == 0) *out = outs[0];
  return rc;
}

/* Ids enter through SyncCopyFromNDArray(arr, ids, 0): unsorted, repeated, out-of-range and
 * negative ids are refused and leave the array as it was. */
static void ids_are_checked_where_they_enter(void) {
  NDArrayHandle r = rsp_declared(2);
  set_values(r, 2, 1);
  CHECK(set_ids(r, 2, (int64_t[]){1, 4}));
  FAILS(set_ids(r, 2, (int64_t[]){4, 1}), "row ids must be sorted and unique: 1 (position 1) follows 4");
  FAILS(set_ids(r, 2, (int64_t[]){3, 3}), "sorted and unique");
  FAILS(set_ids(r, 2, (int64_t[]){1, ROWS}), "row id 6 (position 1) is out of range: the array has 6 rows");
  FAILS(set_ids(r, 2, (int64_t[]){-1, 2}), "row id -1 (position 0) is out of range");
  TRUE(strcmp(ids_text(r), "1 4") == 0);
  /* the aux array MXNDArrayGetAuxNDArray returns is a copy, as in MXNet: writing it does
   * not change the row_sparse array's ids */
  NDArrayHandle a;
  CHECK(MXNDArrayGetAuxNDArray(r, 0, &a));
  CHECK(MXNDArraySyncCopyFromCPU(a, (int64_t[]){5, 0}, 2));
  CHECK(MXNDArrayFree(a));
  TRUE(strcmp(ids_text(r), "1 4") == 0);
  CHECK(MXNDArrayFree(r));
}

/* Malformed arrays (ids and values that disagree, or the repeated zero ids of an array
 * declared with several rows and never given ids) are refused by init, push and the
 * operators, and nothing changes. */
static void malformed_arrays_are_refused_where_used(void) {
  KVStoreHandle kv;
  CHECK(MXKVStoreCreate("local", &kv));
  int k = 5, k2 = 6;
  NDArrayHandle good = rsp_declared(1);
  set_values(good, 1, 2);
  CHECK(set_ids(good, 1, (int64_t[]){3}));
  CHECK(MXKVStoreInit(kv, 1, &k, &good));

  NDArrayHandle unfilled = rsp_declared(3); /* ids 0 0 0 */
  set_values(unfilled, 3, 7);
  FAILS(MXKVStoreInit(kv, 1, &k2, &unfilled), "row ids must be sorted and unique");
  FAILS(MXKVStorePush(kv, 1, &k, &unfilled, 0), "row ids must be sorted and unique");
  NDArrayHandle out = NULL;
  FAILS(invoke1("cast_storage", unfilled, "stype", "default", &out), "row ids must be sorted and unique");

  NDArrayHandle torn = rsp_declared(2);
  set_values(torn, 2, 3);
  CHECK(set_ids(torn, 3, (int64_t[]){0, 2, 4})); /* 3 ids for 2 rows of values */
  FAILS(MXKVStoreInit(kv, 1, &k2, &torn), "inconsistent row_sparse array: 3 row ids for 2 rows");
  FAILS(MXKVStorePush(kv, 1, &k, &torn, 0), "inconsistent row_sparse array: 3 row ids for 2 rows");
  FAILS(invoke1("cast_storage", torn, "stype", "default", &out), "inconsistent row_sparse array");
  FAILS(invoke1("_copyto", torn, NULL, NULL, &out), "inconsistent row_sparse array");
  FAILS(invoke1("_plus_scalar", torn, "scalar", "1", &out), "inconsistent row_sparse array");
  /* nothing changed: key 6 does not exist, key 5 holds row 3 = 2 */
  NDArrayHandle dense = f32_filled(ROWS * COLS, -1, 0);
  uint32_t shape[2] = {ROWS, COLS};
  NDArrayHandle dense2;
  CHECK(MXNDArrayReshape(dense, 2, (int[]){ROWS, COLS}, &dense2));
  FAILS(MXKVStorePull(kv, 1, &k2, &dense2, 0), "key 6 has not been inited");
  CHECK(MXKVStorePull(kv, 1, &k, &dense2, 0));
  float v[ROWS * COLS];
  f32_read(dense2, v, ROWS * COLS);
  for (int i = 0; i < ROWS * COLS; i++) TRUE(v[i] == (i / COLS == 3 ? 2.0f : 0.0f));
  (void)shape;

  /* once given ids that agree with its values, the array is accepted */
  CHECK(set_ids(torn, 2, (int64_t[]){0, 5}));
  CHECK(MXKVStorePush(kv, 1, &k, &torn, 0));
  CHECK(invoke1("cast_storage", torn, "stype", "default", &out));
  CHECK(MXNDArrayFree(out));
  CHECK(MXKVStoreFree(kv));
  NDArrayHandle all[] = {good, unfilled, torn, dense, dense2};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) CHECK(MXNDArrayFree(all[i]));
}

/* PullRowSparse refuses ids outside [0, rows) (MXNet's sparse_retain reads out of bounds);
 * unsorted and repeated ids are fine (the result is the sorted unique rows). */
static void pull_row_sparse_checks_the_rows_asked_for(void) {
  KVStoreHandle kv;
  CHECK(MXKVStoreCreate("local", &kv));
  int k = 1;
  NDArrayHandle value = rsp_declared(2);
  set_values(value, 2, 4);
  CHECK(set_ids(value, 2, (int64_t[]){1, 5}));
  CHECK(MXKVStoreInit(kv, 1, &k, &value));
  NDArrayHandle out = rsp_declared(0);
  NDArrayHandle high = ids_array(2, (int64_t[]){0, ROWS}), low = ids_array(1, (int64_t[]){-1});
  FAILS(MXKVStorePullRowSparse(kv, 1, &k, &out, &high, 0), "row id 6 is out of range for key 1: the stored value has 6 rows");
  FAILS(MXKVStorePullRowSparse(kv, 1, &k, &out, &low, 0), "row id -1 is out of range for key 1");
  TRUE(strcmp(ids_text(out), "") == 0);
  NDArrayHandle messy = ids_array(4, (int64_t[]){5, 0, 5, 1});
  CHECK(MXKVStorePullRowSparse(kv, 1, &k, &out, &messy, 0));
  TRUE(strcmp(ids_text(out), "0 1 5") == 0);
  CHECK(MXKVStoreFree(kv));
  NDArrayHandle all[] = {value, out, high, low, messy};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) CHECK(MXNDArrayFree(all[i]));
}

int main(void) {
  ids_are_checked_where_they_enter();
  malformed_arrays_are_refused_where_used();
  pull_row_sparse_checks_the_rows_asked_for();
  CHECK(MXNDArrayWaitAll());
  if (failures) {
    fprintf(stderr, "row_ids: %d failures\n", failures);
    return 1;
  }
  printf("row_ids passed\n");
  return 0;
}
