// CUDA on the CPU: what kernels/*.cu use of CUDA C, for the host build of the kernels that
// the stand-in's cuLaunchKernel runs (build.rs compiles every unit as C++ with this header
// first). One CUDA thread at a time runs on the launching thread: the launcher
// (launcher.h) sets the index variables before each call of the kernel.
//
// Block-level cooperation has no meaning when threads run one after another, so it is
// refused at build time, not emulated (kernels/README.md, "The host build"): __shared__
// memory and __syncthreads are compile errors, and so is every other CUDA intrinsic this
// header does not define (warp shuffles, atomics, ...).
#pragma once
#include <stdint.h>
#include <string.h>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __restrict__ __restrict
#define __shared__ _Pragma("GCC error \"__shared__ memory is not supported by the stand-in's host build (kernels/README.md)\"")
#define __syncthreads() _Pragma("GCC error \"__syncthreads is not supported by the stand-in's host build (kernels/README.md)\"")

namespace standin {

struct uint3 {
  unsigned x, y, z;
};

// The running CUDA thread's indices and the launch's shape, set by the launcher.
extern thread_local uint3 threadIdx;
extern thread_local uint3 blockIdx;
extern thread_local uint3 blockDim;
extern thread_local uint3 gridDim;

// Resolves a device address read by a kernel to its host address (dev_ptr of
// kernels/prelude.cuh); throws standin::Fault when the launch's translate callback refuses it.
void* translate_read_address(uint64_t device_addr);

}  // namespace standin

using standin::blockDim;
using standin::blockIdx;
using standin::gridDim;
using standin::threadIdx;

// Arithmetic with an explicit rounding mode: the host rounds to nearest even by default, and
// the build never changes the mode, flushes subnormals or contracts (build.rs's flags).
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline float __double2float_rn(double v) { return (float)v; }
static inline double __ll2double_rn(long long v) { return (double)v; }
static inline float __ll2float_rn(long long v) { return (float)v; }

static inline unsigned int __float_as_uint(float f) {
  unsigned int u;
  memcpy(&u, &f, sizeof u);
  return u;
}
static inline float __uint_as_float(unsigned int u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
