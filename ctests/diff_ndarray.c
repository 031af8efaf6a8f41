/* Differential test of the NDArray subset: creation in every context and dtype, getters,
 * copies, views, raw data access and sparse parts. */
#include "common.h"
#include <stdint.h>

static void print_shape(const char *label, NDArrayHandle h) {
  int ndim = -2;
  const int *dims = NULL;
  CHECK(MXNDArrayGetShapeEx(h, &ndim, &dims));
  uint32_t ndim_u = 99;
  const uint32_t *dims_u = NULL;
  CHECK(MXNDArrayGetShape(h, &ndim_u, &dims_u));
  printf("%s: ndim=%d (%u) dims=", label, ndim, ndim_u);
  for (int i = 0; i < ndim; i++) printf("%d/%u ", dims[i], dims_u[i]);
  int dt = -2, st = -2, dev_type = -2, dev_id = -2;
  CHECK(MXNDArrayGetDType(h, &dt));
  CHECK(MXNDArrayGetStorageType(h, &st));
  CHECK(MXNDArrayGetContext(h, &dev_type, &dev_id));
  printf("dtype=%d stype=%d ctx=(%d,%d)\n", dt, st, dev_type, dev_id);
}

int main(void) {
  NDArrayHandle none;
  CHECK(MXNDArrayCreateNone(&none));
  print_shape("none", none);
  CHECK(MXNDArrayFree(none));

  uint32_t shape[3] = {2, 3, 4};
  int contexts[4][2] = {{DEV_CPU, 0}, {DEV_CPU, 3}, {DEV_CPU_PINNED, 0}, {DEV_CPU_SHARED, 1}};
  for (int c = 0; c < 4; c++) {
    NDArrayHandle h;
    CHECK(MXNDArrayCreate(shape, 3, contexts[c][0], contexts[c][1], 0, &h));
    print_shape("create (2,3,4)", h);
    CHECK(MXNDArrayFree(h));
  }
  int dtypes[] = {DT_F32, DT_F64, DT_F16, DT_U8, DT_I32, DT_I8, DT_I64, DT_BOOL, DT_BF16};
  for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++) {
    NDArrayHandle h;
    CHECK(MXNDArrayCreateEx(shape, 2, DEV_CPU, 0, 1, dtypes[d], &h));
    print_shape("createex (2,3)", h);
    CHECK(MXNDArrayFree(h));
  }

  /* copies, views and raw data */
  float v[12];
  for (int i = 0; i < 12; i++) v[i] = (float)i;
  NDArrayHandle m = f32_matrix(4, 3, v, 0);
  NDArrayHandle row, rows, flat;
  CHECK(MXNDArrayAt(m, 2, &row));
  print_shape("at(2)", row);
  f32_print("at(2) values", row, 3);
  CHECK(MXNDArraySlice(m, 1, 3, &rows));
  print_shape("slice(1,3)", rows);
  f32_print("slice(1,3) values", rows, 6);
  CHECK(MXNDArraySyncCopyFromCPU(row, (float[]){-1, -2, -3}, 3));
  f32_print("parent after writing at(2)", m, 12);
  CHECK(MXNDArrayReshape(m, 2, (int[]){2, -1}, &flat));
  print_shape("reshape(2,-1)", flat);
  CHECK(MXNDArrayWaitToRead(flat));
  void *data = NULL;
  CHECK(MXNDArrayGetData(rows, &data));
  printf("raw slice data: %g %g\n", ((float *)data)[0], ((float *)data)[5]);
  NDArrayHandle copy = f32_filled(12, 0, 1);
  NDArrayHandle copy2;
  CHECK(MXNDArrayReshape(copy, 2, (int[]){4, 3}, &copy2));
  CHECK(MXNDArraySyncCopyFromNDArray(copy2, m, -1));
  f32_print("SyncCopyFromNDArray", copy, 12);
  CHECK(MXNDArrayWaitAll());

  /* a row_sparse array built the way MXNet's Python does */
  uint32_t rsp_shape[2] = {5, 2};
  int aux_type = DT_I64;
  uint32_t aux_ndim = 1, aux_shape = 2;
  NDArrayHandle rsp, values, indices, back;
  CHECK(MXNDArrayCreateSparseEx(1, rsp_shape, 2, DEV_CPU, 0, 0, DT_F32, 1, &aux_type, &aux_ndim, &aux_shape, &rsp));
  print_shape("row_sparse (5,2)", rsp);
  values = f32_matrix(2, 2, (float[]){1, 2, 3, 4}, 0);
  uint32_t two = 2;
  CHECK(MXNDArrayCreateEx(&two, 1, DEV_CPU, 0, 0, DT_I64, &indices));
  CHECK(MXNDArraySyncCopyFromCPU(indices, (int64_t[]){1, 3}, 2));
  CHECK(MXNDArraySyncCopyFromNDArray(rsp, values, -1));
  CHECK(MXNDArraySyncCopyFromNDArray(rsp, indices, 0));
  int at = -1;
  CHECK(MXNDArrayGetAuxType(rsp, 0, &at));
  printf("aux type %d\n", at);
  CHECK(MXNDArrayGetAuxNDArray(rsp, 0, &back));
  print_shape("aux 0", back);
  int64_t idx[2];
  CHECK(MXNDArraySyncCopyToCPU(back, idx, 2));
  printf("aux 0 values: %lld %lld\n", (long long)idx[0], (long long)idx[1]);
  CHECK(MXNDArrayFree(back));
  CHECK(MXNDArrayGetDataNDArray(rsp, &back));
  print_shape("data", back);
  f32_print("data values", back, 4);
  NDArrayHandle all[] = {m, row, rows, flat, copy, copy2, rsp, values, indices, back};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) CHECK(MXNDArrayFree(all[i]));
  printf("done\n");
  return 0;
}
