// Placeholder registry: no kernels yet (replaced by the host build of kernels/*.cu).
#include "standin_kernels.h"
#include <string.h>

extern "C" int standin_kernel_count(void) { return 0; }
extern "C" const char* standin_kernel_name(int) { return nullptr; }
extern "C" int standin_kernel_find(const char*) { return -1; }
extern "C" int standin_kernel_run(int, void**, standin_dim3, standin_dim3, unsigned, standin_translate_fn, void*) {
  return 500;  // CUDA_ERROR_NOT_FOUND
}
