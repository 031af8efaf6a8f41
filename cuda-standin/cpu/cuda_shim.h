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

#include "standin_kernels.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __restrict__ __restrict
#define __shared__ _Pragma("GCC error \"__shared__ memory is not supported by the stand-in's host build (kernels/README.md)\"")
#define __syncthreads() _Pragma("GCC error \"__syncthreads is not supported by the stand-in's host build (kernels/README.md)\"")

// The launch state below is read in every kernel's inner loop: inline variables with constant
// initialisers and the initial-exec model make each read one load off the thread pointer
// (the default model for a shared library calls __tls_get_addr each time). The few bytes
// fit in the static TLS that glibc keeps for libraries loaded with dlopen.
#define STANDIN_TLS thread_local __attribute__((tls_model("initial-exec")))

namespace standin {

struct uint3 {
  unsigned x, y, z;
};

// The running CUDA thread's indices and the launch's shape, set by the launcher.
inline STANDIN_TLS uint3 threadIdx = {0, 0, 0};
inline STANDIN_TLS uint3 blockIdx = {0, 0, 0};
inline STANDIN_TLS uint3 blockDim = {0, 0, 0};
inline STANDIN_TLS uint3 gridDim = {0, 0, 0};

// The running launch's address translation, with a small direct-mapped cache: a kernel reads
// the same few table addresses for every element, and an allocation cannot move during a
// launch. Lives on the launcher's stack for the launch.
struct Translation {
  static const int kSlots = 64;
  standin_translate_fn translate;
  void* ctx;
  uint64_t device[kSlots];
  void* host[kSlots];
  bool used[kSlots];
};
inline STANDIN_TLS Translation* current_translation = nullptr;

inline int translation_slot(uint64_t addr) { return (int)((addr * 0x9e3779b97f4a7c15ull) >> 58); }

// Asks the launch's translate callback and caches the answer; throws standin::Fault when it
// refuses (or when no launch is running).
void* translate_uncached(uint64_t device_addr);

// Resolves a device address read by a kernel to its host address (dev_ptr of
// kernels/prelude.cuh).
inline void* translate_read_address(uint64_t device_addr) {
  const Translation* t = current_translation;
  int s = translation_slot(device_addr);
  if (t != nullptr && t->used[s] && t->device[s] == device_addr) return t->host[s];
  return translate_uncached(device_addr);
}

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
