// The interface between the stand-in driver (Rust, src/) and the host build of kernels/*.cu
// (C++, cpu/). Both live in the one libcuda stand-in; nothing outside it calls these.
#pragma once
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Translates a device address to the host address backing it. Returns 0 (CUDA_SUCCESS) and
// sets *host, or a CUresult (700, CUDA_ERROR_ILLEGAL_ADDRESS) when the address lies in no
// live allocation the launching context may access.
typedef int (*standin_translate_fn)(void* ctx, uint64_t device_addr, void** host);

typedef struct standin_dim3 {
  unsigned x, y, z;
} standin_dim3;

// Number of kernels in the host build, and the name of kernel `index`.
int standin_kernel_count(void);
const char* standin_kernel_name(int index);
// The index of the kernel called `name`, or -1.
int standin_kernel_find(const char* name);
// The number of parameters of kernel `index` (-1 for no such kernel), with *sizes set to
// their sizes in bytes, in order: what the module image must declare for the same name.
int standin_kernel_params(int index, const unsigned** sizes);
// Runs every block and thread of one launch on the calling thread. `params` is
// cuLaunchKernel's kernelParams (one pointer per parameter). Pointer parameters are translated
// with `translate` before the kernel runs; addresses a kernel reads from device memory go
// through dev_ptr() (kernels/prelude.cuh), which calls `translate` too. Returns 0 or a CUresult.
int standin_kernel_run(int index, void** params, standin_dim3 grid, standin_dim3 block, unsigned shared_bytes,
                       standin_translate_fn translate, void* ctx);

#ifdef __cplusplus
}
#endif
