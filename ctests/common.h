/* Shared helpers of the C test programs. Every program is plain C11 against include/kvstore.h
 * (MXNet 1.9's prototypes), so the same source links to libkvstore.so or libmxnet.so. */
#ifndef KVSTORE_CTESTS_COMMON_H
#define KVSTORE_CTESTS_COMMON_H

#include "kvstore.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>

/* DEV_CPU is the device type the programs put their arrays on: tests/gpu_standin.rs builds
 * them again with -DDEV_CPU=2 and compares their output on GPU arrays with this build's. */
#ifndef DEV_CPU
#define DEV_CPU 1
#endif
#define DEV_GPU 2
#define DEV_CPU_PINNED 3
#define DEV_CPU_SHARED 5

#define DT_F32 0
#define DT_F64 1
#define DT_F16 2
#define DT_U8 3
#define DT_I32 4
#define DT_I8 5
#define DT_I64 6
#define DT_BOOL 7
#define DT_BF16 12

/* Fails the program if an API call does not return 0. */
#define CHECK(call)                                                                    \
  do {                                                                                 \
    if ((call) != 0) {                                                                 \
      fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,             \
              MXGetLastError());                                                       \
      exit(1);                                                                         \
    }                                                                                  \
  } while (0)

/* Fails the program unless cond holds. */
#define EXPECT(cond)                                                                   \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond);              \
      exit(1);                                                                         \
    }                                                                                  \
  } while (0)

/* A dense float32 array of n elements on cpu(dev_id), every element `value`. */
static inline NDArrayHandle f32_filled(uint32_t n, float value, int dev_id) {
  NDArrayHandle h;
  CHECK(MXNDArrayCreateEx(&n, 1, DEV_CPU, dev_id, 0, DT_F32, &h));
  float *data = malloc(sizeof(float) * (n ? n : 1));
  for (uint32_t i = 0; i < n; i++) data[i] = value;
  CHECK(MXNDArraySyncCopyFromCPU(h, data, n));
  free(data);
  return h;
}

/* A dense float32 array of shape (rows, cols) holding `values`. */
static inline NDArrayHandle f32_matrix(uint32_t rows, uint32_t cols, const float *values, int dev_id) {
  uint32_t shape[2] = {rows, cols};
  NDArrayHandle h;
  CHECK(MXNDArrayCreateEx(shape, 2, DEV_CPU, dev_id, 0, DT_F32, &h));
  CHECK(MXNDArraySyncCopyFromCPU(h, values, (size_t)rows * cols));
  return h;
}

/* Reads n float32 elements of h. */
/* A (rows, cols) row_sparse float32 array on (dev_type, dev_id) holding rows ids[0..nnr), their
 * values in vals (nnr * cols, row-major): values and ids copied in from arrays on the same
 * context. */
static inline NDArrayHandle rsp_f32_at(int dev_type, int dev_id, uint32_t rows, uint32_t cols, uint32_t nnr,
                                       const int64_t *ids, const float *vals) {
  uint32_t shape[2] = {rows, cols}, vshape[2] = {nnr, cols}, aux_ndim = 1, aux_shape = nnr;
  int aux_type = DT_I64;
  NDArrayHandle h;
  CHECK(MXNDArrayCreateSparseEx(1, shape, 2, dev_type, dev_id, 0, DT_F32, 1, &aux_type, &aux_ndim, &aux_shape, &h));
  if (nnr > 0) {
    NDArrayHandle v, i;
    CHECK(MXNDArrayCreateEx(vshape, 2, dev_type, dev_id, 0, DT_F32, &v));
    CHECK(MXNDArraySyncCopyFromCPU(v, vals, (size_t)nnr * cols));
    CHECK(MXNDArrayCreateEx(&nnr, 1, dev_type, dev_id, 0, DT_I64, &i));
    CHECK(MXNDArraySyncCopyFromCPU(i, ids, nnr));
    CHECK(MXNDArraySyncCopyFromNDArray(h, v, -1));
    CHECK(MXNDArraySyncCopyFromNDArray(h, i, 0));
    CHECK(MXNDArrayFree(v));
    CHECK(MXNDArrayFree(i));
  }
  return h;
}

/* rsp_f32_at on (DEV_CPU, dev_id): cpu(dev_id), or gpu(dev_id) in the -DDEV_CPU=2 builds. */
static inline NDArrayHandle rsp_f32_on(uint32_t rows, uint32_t cols, uint32_t nnr, const int64_t *ids,
                                       const float *vals, int dev_id) {
  return rsp_f32_at(DEV_CPU, dev_id, rows, cols, nnr, ids, vals);
}

static inline void f32_read(NDArrayHandle h, float *out, size_t n) {
  CHECK(MXNDArraySyncCopyToCPU(h, out, n));
}

/* Element 0 of h, after checking that all n elements are equal. */
static inline float f32_uniform(NDArrayHandle h, size_t n) {
  float *v = malloc(sizeof(float) * n);
  f32_read(h, v, n);
  for (size_t i = 1; i < n; i++) EXPECT(v[i] == v[0]);
  float first = v[0];
  free(v);
  return first;
}

/* Prints "label: v0 v1 ..." for n float32 elements. */
static inline void f32_print(const char *label, NDArrayHandle h, size_t n) {
  float *v = malloc(sizeof(float) * n);
  f32_read(h, v, n);
  printf("%s:", label);
  for (size_t i = 0; i < n; i++) printf(" %.9g", v[i]);
  printf("\n");
  free(v);
}

/* The body of the updaters the tests install: local += scale * recv over n float32 elements,
 * then frees both handles, which the updater owns. Reports element 0 of each before. */
static inline void update_add_scaled(NDArrayHandle recv, NDArrayHandle local, size_t n, float scale,
                                     float *recv0, float *local0) {
  float *r = malloc(sizeof(float) * n), *l = malloc(sizeof(float) * n);
  CHECK(MXNDArraySyncCopyToCPU(recv, r, n));
  CHECK(MXNDArraySyncCopyToCPU(local, l, n));
  if (recv0) *recv0 = r[0];
  if (local0) *local0 = l[0];
  for (size_t i = 0; i < n; i++) l[i] += scale * r[i];
  CHECK(MXNDArraySyncCopyFromCPU(local, l, n));
  CHECK(MXNDArrayFree(recv));
  CHECK(MXNDArrayFree(local));
  free(r);
  free(l);
}

/* Bytes per element of a dtype. */
static inline size_t dtype_size(int dt) {
  switch (dt) {
    case DT_F64: case DT_I64: return 8;
    case DT_F32: case DT_I32: return 4;
    case DT_F16: case DT_BF16: return 2;
    default: return 1;
  }
}

/* Small integers as float16: exact for |v| < 2048. */
static inline uint16_t to_f16(double v) {
  if (v == 0) return 0;
  uint16_t sign = v < 0 ? 0x8000 : 0;
  double a = v < 0 ? -v : v;
  int e = 0;
  while (a >= 2) { a /= 2; e++; }
  while (a < 1) { a *= 2; e--; }
  return (uint16_t)(sign | (uint16_t)((e + 15) << 10) | (uint16_t)((a - 1) * 1024));
}

/* Writes v as one element of dtype dt (exact for the small values the tests use). */
static inline void encode(int dt, double v, unsigned char *out) {
  switch (dt) {
    case DT_F32: { float f = (float)v; memcpy(out, &f, 4); break; }
    case DT_F64: memcpy(out, &v, 8); break;
    case DT_F16: { uint16_t h = to_f16(v); memcpy(out, &h, 2); break; }
    case DT_BF16: { float f = (float)v; uint32_t b; memcpy(&b, &f, 4); uint16_t h = (uint16_t)(b >> 16); memcpy(out, &h, 2); break; }
    case DT_U8: out[0] = (unsigned char)v; break;
    case DT_I8: { int8_t i = (int8_t)v; memcpy(out, &i, 1); break; }
    case DT_I32: { int32_t i = (int32_t)v; memcpy(out, &i, 4); break; }
    case DT_I64: { int64_t i = (int64_t)v; memcpy(out, &i, 8); break; }
    case DT_BOOL: out[0] = v != 0; break;
  }
}


#endif
