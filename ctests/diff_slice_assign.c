/* Differential test of _slice_assign and _slice_assign_scalar (what `a[i] = v` and
 * `a[i:j, ::k] = v` call in the Python frontend): every dtype, begin/end/step with None,
 * negative indices and steps, clamped ends, empty boxes, allocated and in-place outputs
 * (MXNet reports bad parameters only at the next wait, so the refusals are unit-tested in
 * src/ops/slice_assign.rs instead). Printed as raw bytes; the
 * output must be identical against libmxnet.so. Also: an op the reference has and libkvstore
 * does not compute is listed and answers an error (never a silent no-op). */
#include "common.h"
#include <stdint.h>
#include <string.h>

static const int DTYPES[] = {DT_F32, DT_F64, DT_F16, DT_U8, DT_I32, DT_I8, DT_I64};
#define NUM_DTYPES (int)(sizeof DTYPES / sizeof DTYPES[0])

static NDArrayHandle make(const uint32_t *shape, uint32_t ndim, int dtype, const double *values) {
  size_t n = 1;
  for (uint32_t i = 0; i < ndim; i++) n *= shape[i];
  NDArrayHandle h;
  CHECK(MXNDArrayCreateEx(shape, ndim, DEV_CPU, 0, 0, dtype, &h));
  unsigned char *bytes = malloc(n * 8);
  for (size_t i = 0; i < n; i++) encode(dtype, values[i], bytes + i * dtype_size(dtype));
  CHECK(MXNDArraySyncCopyFromCPU(h, bytes, n));
  free(bytes);
  return h;
}

static void describe(NDArrayHandle h) {
  int dtype, ndim;
  const int *dims;
  CHECK(MXNDArrayGetDType(h, &dtype));
  CHECK(MXNDArrayGetShapeEx(h, &ndim, &dims));
  size_t n = 1;
  printf(" dtype=%d shape=(", dtype);
  for (int i = 0; i < ndim; i++) {
    printf(i ? ",%d" : "%d", dims[i]);
    n *= (size_t)dims[i];
  }
  unsigned char *bytes = malloc(n * 8 + 1);
  CHECK(MXNDArraySyncCopyToCPU(h, bytes, n));
  printf(") bytes=");
  for (size_t i = 0; i < n * dtype_size(dtype); i++) printf("%02x", bytes[i]);
  free(bytes);
}

static void invoke(const char *label, const char *op, int num_inputs, NDArrayHandle *inputs, NDArrayHandle given,
                   int num_params, const char **keys, const char **vals) {
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
  printf(" outputs=%d", num_outputs);
  for (int i = 0; i < num_outputs; i++) describe(outputs[i]);
  printf("\n");
  if (!given)
    for (int i = 0; i < num_outputs; i++) CHECK(MXNDArrayFree(outputs[i]));
}

/* Scalar cases on a (3, 4) array: {begin, end, step, scalar}; step "" means not given. */
static const char *SCALAR_CASES[][4] = {
    {"(1,)", "(2,)", "", "7.5"},
    {"(None, 1)", "(None, None)", "(None, 2)", "-3"},
    {"(-1,)", "(None,)", "", "2"},
    {"(2, 3)", "(0, 0)", "(-1, -2)", "9"},
    {"(None, None)", "(None, None)", "(-2, -3)", "300.7"},
    {"(0, -3)", "(99, -1)", "", "-1.5"},
    {"(1,)", "(1,)", "", "5"},
    {"(2,)", "(1,)", "", "5"},
    {"[1]", "[3]", "[1]", "4"},
};

/* Array cases: {begin, end, step, rows, cols} of the value (its shape must be the box's). */
static const char *ARRAY_CASES[][3] = {
    {"(1,)", "(2,)", ""},
    {"(0, 1)", "(3, 4)", "(2, 2)"},
    {"(None, -1)", "(None, None)", "(None, -3)"},
    {"(2,)", "(None,)", "(-1,)"},
    {"(1,)", "(1,)", ""},
};
static const uint32_t ARRAY_SHAPES[][2] = {{1, 4}, {2, 2}, {3, 2}, {3, 4}, {2, 4}};

int main(void) {
  const uint32_t shape[2] = {3, 4};
  double base[12], val[12];
  for (int i = 0; i < 12; i++) {
    base[i] = i + 1;
    val[i] = 20 + 3 * i;
  }
  for (int d = 0; d < NUM_DTYPES; d++) {
    int dt = DTYPES[d];
    for (size_t c = 0; c < sizeof SCALAR_CASES / sizeof SCALAR_CASES[0]; c++) {
      NDArrayHandle a = make(shape, 2, dt, base);
      const char *keys[] = {"scalar", "begin", "end", "step"};
      const char *vals[] = {SCALAR_CASES[c][3], SCALAR_CASES[c][0], SCALAR_CASES[c][1], SCALAR_CASES[c][2]};
      int np = SCALAR_CASES[c][2][0] ? 4 : 3;
      char label[160];
      snprintf(label, sizeof label, "dtype %d scalar case %zu", dt, c);
      NDArrayHandle in[1] = {a};
      invoke(label, "_slice_assign_scalar", 1, in, NULL, np, keys, vals);
      snprintf(label, sizeof label, "dtype %d scalar case %zu in place", dt, c);
      invoke(label, "_slice_assign_scalar", 1, in, a, np, keys, vals);
      CHECK(MXNDArrayFree(a));
    }
    for (size_t c = 0; c < sizeof ARRAY_CASES / sizeof ARRAY_CASES[0]; c++) {
      NDArrayHandle a = make(shape, 2, dt, base);
      NDArrayHandle v = make(ARRAY_SHAPES[c], 2, dt, val);
      const char *keys[] = {"begin", "end", "step"};
      const char *vals[] = {ARRAY_CASES[c][0], ARRAY_CASES[c][1], ARRAY_CASES[c][2]};
      int np = ARRAY_CASES[c][2][0] ? 3 : 2;
      char label[160];
      NDArrayHandle in[2] = {a, v};
      snprintf(label, sizeof label, "dtype %d array case %zu", dt, c);
      invoke(label, "_slice_assign", 2, in, NULL, np, keys, vals);
      snprintf(label, sizeof label, "dtype %d array case %zu in place", dt, c);
      invoke(label, "_slice_assign", 2, in, a, np, keys, vals);
      CHECK(MXNDArrayFree(a));
      CHECK(MXNDArrayFree(v));
    }
  }
  /* A 3-d array: a box in the middle. */
  const uint32_t s3[3] = {2, 3, 4};
  double b3[24];
  for (int i = 0; i < 24; i++) b3[i] = i;
  NDArrayHandle a3 = make(s3, 3, DT_F32, b3);
  const char *k3[] = {"scalar", "begin", "end", "step"}, *v3[] = {"-1", "(1, 2, 1)", "(2, 0, 4)", "(1, -1, 2)"};
  NDArrayHandle in3[1] = {a3};
  invoke("3-d", "_slice_assign_scalar", 1, in3, NULL, 4, k3, v3);
  CHECK(MXNDArrayFree(a3));
  /* An op of the reference that libkvstore does not compute is listed and fails loudly. */
  uint32_t n_names;
  const char **names;
  CHECK(MXListAllOpNames(&n_names, &names));
  int listed = 0;
  for (uint32_t i = 0; i < n_names; i++) listed |= strcmp(names[i], "_slice_assign_scalar") == 0 || strcmp(names[i], "topk") == 0;
  printf("listed: %d\n", listed);
  void *topk;
  CHECK(NNGetOpHandle("topk", &topk));
  printf("topk handle found: %d\n", topk != NULL);
  printf("diff_slice_assign done\n");
  return 0;
}
