// The registry's C interface (standin_kernels.h) and the address translation of a launch.
#include <stdlib.h>

#include "launcher.h"

namespace standin {

thread_local uint3 threadIdx;
thread_local uint3 blockIdx;
thread_local uint3 blockDim;
thread_local uint3 gridDim;

namespace {

// The running launch's translation, with a small direct-mapped cache: a kernel reads the
// same few table addresses for every element, and an allocation cannot move during a launch.
struct Translation {
  standin_translate_fn translate = nullptr;
  void* ctx = nullptr;
  static const int kSlots = 64;
  uint64_t device[kSlots];
  void* host[kSlots];
  bool used[kSlots];
};
thread_local Translation current;

int slot_of(uint64_t addr) { return (int)((addr * 0x9e3779b97f4a7c15ull) >> 58); }

}  // namespace

// Unset on return, so a dev_ptr outside a launch fails instead of using a stale callback.
struct ScopedTranslation {
  ScopedTranslation(standin_translate_fn translate, void* ctx) {
    current.translate = translate;
    current.ctx = ctx;
    memset(current.used, 0, sizeof current.used);
  }
  ~ScopedTranslation() { current.translate = nullptr; }
};

void* translate_read_address(uint64_t device_addr) {
  int s = slot_of(device_addr);
  if (current.used[s] && current.device[s] == device_addr) return current.host[s];
  void* host = nullptr;
  // CUDA_ERROR_ILLEGAL_ADDRESS when there is no launch to ask.
  int rc = current.translate != nullptr ? current.translate(current.ctx, device_addr, &host) : 700;
  if (rc != 0) throw Fault{rc};
  current.device[s] = device_addr;
  current.host[s] = host;
  current.used[s] = true;
  return host;
}

void* translate_param_address(uint64_t device_addr) {
  return device_addr == 0 ? nullptr : translate_read_address(device_addr);
}

}  // namespace standin

using standin::kEntries;
using standin::kEntryCount;

extern "C" int standin_kernel_count(void) { return kEntryCount; }

extern "C" const char* standin_kernel_name(int index) {
  return index >= 0 && index < kEntryCount ? kEntries[index].name : nullptr;
}

extern "C" int standin_kernel_find(const char* name) {
  if (name == nullptr) return -1;
  int lo = 0, hi = kEntryCount;
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    int c = strcmp(kEntries[mid].name, name);
    if (c == 0) return mid;
    if (c < 0) lo = mid + 1; else hi = mid;
  }
  return -1;
}

extern "C" int standin_kernel_run(int index, void** params, standin_dim3 grid, standin_dim3 block,
                                  unsigned shared_bytes, standin_translate_fn translate, void* ctx) {
  if (index < 0 || index >= kEntryCount) return 500;  // CUDA_ERROR_NOT_FOUND
  // CUDA_ERROR_INVALID_VALUE: every kernel has parameters, and the host build has no shared
  // memory (kernels/README.md), so no launch may ask for any.
  if (params == nullptr || translate == nullptr || shared_bytes != 0) return 1;
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || block.x == 0 || block.y == 0 || block.z == 0) return 1;
  standin::ScopedTranslation scope(translate, ctx);
  return kEntries[index].run(standin::Launch{params, grid, block});
}
