/* Differential test of the operators libkvstore computes for MXImperativeInvoke(Ex): every
 * op the frontends use, for every dtype both libraries compute, with allocated and given
 * outputs, printed as raw bytes. The output must be identical against libmxnet.so. */
#include "common.h"
#include <stdint.h>

static const int DTYPES[] = {DT_F32, DT_F64, DT_F16, DT_U8, DT_I32, DT_I8, DT_I64};
static const char *DTYPE_NAMES[] = {"float32", "float64", "float16", "uint8", "int32", "int8", "int64"};
#define NUM_DTYPES (int)(sizeof DTYPES / sizeof DTYPES[0])

/* An array of `dtype` with the given shape holding `values` (converted exactly). */
static NDArrayHandle make(const uint32_t *shape, uint32_t ndim, int dtype, const double *values, int dev_id) {
  size_t n = 1;
  for (uint32_t i = 0; i < ndim; i++) n *= shape[i];
  NDArrayHandle h;
  CHECK(MXNDArrayCreateEx(shape, ndim, DEV_CPU, dev_id, 0, dtype, &h));
  unsigned char *bytes = malloc(n * 8);
  for (size_t i = 0; i < n; i++) encode(dtype, values[i], bytes + i * dtype_size(dtype));
  CHECK(MXNDArraySyncCopyFromCPU(h, bytes, n));
  free(bytes);
  return h;
}

/* One line describing an array: dtype, storage type, context, shape and raw bytes. */
static void describe(NDArrayHandle h) {
  int dtype, stype, dev_type, dev_id, ndim;
  const int *dims;
  CHECK(MXNDArrayGetDType(h, &dtype));
  CHECK(MXNDArrayGetStorageType(h, &stype));
  CHECK(MXNDArrayGetContext(h, &dev_type, &dev_id));
  CHECK(MXNDArrayGetShapeEx(h, &ndim, &dims));
  size_t n = 1;
  printf(" dtype=%d stype=%d ctx=%d:%d shape=(", dtype, stype, dev_type, dev_id);
  for (int i = 0; i < ndim; i++) {
    printf(i ? ",%d" : "%d", dims[i]);
    n *= (size_t)dims[i];
  }
  printf(")");
  if (stype == 0) {
    unsigned char *bytes = malloc(n * 8 + 1);
    CHECK(MXNDArraySyncCopyToCPU(h, bytes, n));
    printf(" bytes=");
    for (size_t i = 0; i < n * dtype_size(dtype); i++) printf("%02x", bytes[i]);
    free(bytes);
  }
}

/* Invokes `op` on inputs; with `given` (not NULL) writes into it, otherwise has the outputs
 * allocated. Prints the result line, frees allocated outputs. */
static void invoke(const char *label, const char *op, int num_inputs, NDArrayHandle *inputs,
                   NDArrayHandle given, int num_params, const char **keys, const char **vals) {
  void *creator;
  CHECK(NNGetOpHandle(op, &creator));
  int num_outputs = given ? 1 : 0;
  NDArrayHandle given_array[1] = {given};
  NDArrayHandle *outputs = given ? given_array : NULL;
  const int *stypes = NULL;
  printf("%s %s:", op, label);
  if (MXImperativeInvokeEx(creator, num_inputs, inputs, &num_outputs, &outputs, num_params, keys, vals, &stypes) != 0) {
    printf(" error\n");
    return;
  }
  CHECK(MXNDArrayWaitAll());
  printf(" outputs=%d stype0=%d", num_outputs, stypes ? stypes[0] : -9);
  for (int i = 0; i < num_outputs; i++) describe(outputs[i]);
  printf("\n");
  if (!given)
    for (int i = 0; i < num_outputs; i++) CHECK(MXNDArrayFree(outputs[i]));
}

static const double A[6] = {1, 2, 3, 4, 5, 6};
static const double B[6] = {2, 1, 3, 2, 5, 4};
static const double ROW[3] = {1, 2, 3};
static const double COL[2] = {2, 1};

int main(void) {
  /* As every frontend does first: in MXNet, listing the op names is what registers the legacy
   * NDArray functions such as _set_value as ops. */
  uint32_t num_names;
  const char **names;
  CHECK(MXListAllOpNames(&num_names, &names));
  const uint32_t s23[2] = {2, 3}, s13[2] = {1, 3}, s21[2] = {2, 1};
  for (int d = 0; d < NUM_DTYPES; d++) {
    int dt = DTYPES[d];
    const char *name = DTYPE_NAMES[d];
    const char *create_keys[] = {"shape", "ctx", "dtype", "value"};
    const char *create_vals[] = {"(2, 3)", "cpu(1)", name, "2.5"};
    invoke(name, "_zeros", 0, NULL, NULL, 3, create_keys, create_vals);
    invoke(name, "_ones", 0, NULL, NULL, 3, create_keys, create_vals);
    invoke(name, "_full", 0, NULL, NULL, 4, create_keys, create_vals);
    /* _arange (what mx.nd.arange calls): fractional steps, repeats, descending ranges,
     * negative starts (wrapped by unsigned types), and a zero step (refused). */
    const char *range_keys[] = {"start", "stop", "step", "repeat", "dtype"};
    const char *range_cases[][5] = {{"1", "2", "0.3", "1", name},  {"3", "None", "1", "2", name},
                                    {"5", "0", "-2", "1", name},   {"-2", "3", "1.5", "1", name},
                                    {"0.5", "7", "0.7", "3", name}, {"0", "4", "0", "1", name}};
    for (size_t i = 0; i < sizeof range_cases / sizeof range_cases[0]; i++) {
      char label[64];
      snprintf(label, sizeof label, "%s (%s, %s, %s, repeat %s)", name, range_cases[i][0], range_cases[i][1],
               range_cases[i][2], range_cases[i][3]);
      invoke(label, "_arange", 0, NULL, NULL, 5, range_keys, range_cases[i]);
    }

    NDArrayHandle a = make(s23, 2, dt, A, 0), b = make(s23, 2, dt, B, 0);
    NDArrayHandle row = make(s13, 2, dt, ROW, 0), col = make(s21, 2, dt, COL, 0);
    NDArrayHandle out = make(s23, 2, dt, B, 2);

    const char *src_key[] = {"src"}, *src_val[] = {"3"};
    invoke(name, "_set_value", 0, NULL, out, 1, src_key, src_val);
    NDArrayHandle one[1] = {a};
    invoke(name, "_copyto", 1, one, out, 0, NULL, NULL);
    for (int e = 0; e < NUM_DTYPES; e++) {  /* copies across dtypes convert */
      NDArrayHandle other = make(s23, 2, DTYPES[e], B, 3);
      char label[64];
      snprintf(label, sizeof label, "%s->%s", name, DTYPE_NAMES[e]);
      invoke(label, "_copyto", 1, one, other, 0, NULL, NULL);
      const char *cast_key[] = {"dtype"}, *cast_val[] = {DTYPE_NAMES[e]};
      invoke(label, "Cast", 1, one, NULL, 1, cast_key, cast_val);
      CHECK(MXNDArrayFree(other));
    }

    const char *binary[] = {"_plus", "_minus", "_mul", "_div", "elemwise_add", "elemwise_sub",
                            "elemwise_mul", "elemwise_div", "broadcast_add", "broadcast_sub",
                            "broadcast_mul", "broadcast_div"};
    NDArrayHandle ab[2] = {a, b}, arow[2] = {a, row}, cola[2] = {col, a}, aa[2] = {a, a};
    for (size_t i = 0; i < sizeof binary / sizeof binary[0]; i++) {
      invoke(name, binary[i], 2, ab, NULL, 0, NULL, NULL);
      invoke(name, binary[i], 2, aa, out, 0, NULL, NULL);
      if (strncmp(binary[i], "broadcast", 9) == 0) {
        invoke(name, binary[i], 2, arow, NULL, 0, NULL, NULL);
        invoke(name, binary[i], 2, cola, NULL, 0, NULL, NULL);
      }
    }

    const char *scalar_ops[] = {"_plus_scalar", "_minus_scalar", "_rminus_scalar", "_mul_scalar",
                                "_div_scalar", "_rdiv_scalar"};
    const char *scalars[] = {"2", "2.0", "1.5", "12"};
    for (size_t i = 0; i < sizeof scalar_ops / sizeof scalar_ops[0]; i++)
      for (size_t j = 0; j < sizeof scalars / sizeof scalars[0]; j++) {
        const char *k[] = {"scalar"}, *v[] = {scalars[j]};
        char label[64];
        snprintf(label, sizeof label, "%s scalar=%s", name, scalars[j]);
        invoke(label, scalar_ops[i], 1, one, NULL, 1, k, v);
      }
    /* in place: out = out * 2 */
    NDArrayHandle self[1] = {out};
    const char *two_k[] = {"scalar"}, *two_v[] = {"2"};
    invoke(name, "_mul_scalar", 1, self, out, 1, two_k, two_v);

    const char *sum_keys[] = {"axis", "keepdims", "exclude"};
    const char *sum_cases[][3] = {{"()", "False", "False"}, {"0", "False", "False"}, {"1", "True", "False"},
                                  {"(0, 1)", "False", "False"}, {"0", "False", "True"}, {"-1", "False", "False"}};
    invoke(name, "sum", 1, one, NULL, 0, NULL, NULL);
    for (size_t i = 0; i < sizeof sum_cases / sizeof sum_cases[0]; i++) {
      char label[96];
      snprintf(label, sizeof label, "%s axis=%s keepdims=%s exclude=%s", name, sum_cases[i][0], sum_cases[i][1],
               sum_cases[i][2]);
      invoke(label, "sum", 1, one, NULL, 3, sum_keys, sum_cases[i]);
    }

    CHECK(MXNDArrayFree(a));
    CHECK(MXNDArrayFree(b));
    CHECK(MXNDArrayFree(row));
    CHECK(MXNDArrayFree(col));
    CHECK(MXNDArrayFree(out));
  }

  /* cast_storage: dense -> row_sparse (rows 1 and 3 non-zero) -> dense, and dense -> dense */
  const uint32_t s42[2] = {4, 2};
  const double sparse_rows[8] = {0, 0, 1, 2, 0, 0, 3, 4};
  NDArrayHandle dense = make(s42, 2, DT_F32, sparse_rows, 0);
  const char *st_key[] = {"stype"}, *to_rsp[] = {"row_sparse"}, *to_dense[] = {"default"};
  void *creator;
  CHECK(NNGetOpHandle("cast_storage", &creator));
  int n = 0;
  NDArrayHandle *outs = NULL;
  const int *stypes = NULL;
  NDArrayHandle in[1] = {dense};
  CHECK(MXImperativeInvokeEx(creator, 1, in, &n, &outs, 1, st_key, to_rsp, &stypes));
  NDArrayHandle rsp = outs[0];
  int aux_type;
  NDArrayHandle idx, data;
  CHECK(MXNDArrayGetAuxType(rsp, 0, &aux_type));
  CHECK(MXNDArrayGetAuxNDArray(rsp, 0, &idx));
  CHECK(MXNDArrayGetDataNDArray(rsp, &data));
  printf("cast_storage to row_sparse: outputs=%d stype0=%d aux_type=%d\n", n, stypes[0], aux_type);
  printf("  indices:");
  describe(idx);
  printf("\n  data:");
  describe(data);
  printf("\n");
  NDArrayHandle rsp_in[1] = {rsp};
  invoke("row_sparse->default", "cast_storage", 1, rsp_in, NULL, 1, st_key, to_dense);
  invoke("default->default", "cast_storage", 1, in, NULL, 1, st_key, to_dense);
  CHECK(MXNDArrayFree(idx));
  CHECK(MXNDArrayFree(data));
  CHECK(MXNDArrayFree(rsp));
  CHECK(MXNDArrayFree(dense));
  printf("diff_ops done\n");
  return 0;
}
