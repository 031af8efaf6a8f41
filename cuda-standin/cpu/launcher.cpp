// The registry's C interface (standin_kernels.h) and the address translation of a launch.
#include <stdlib.h>

#include "launcher.h"

namespace standin {

// Installs a launch's translation for the calling thread, and removes it on return, so a
// dev_ptr outside a launch fails instead of using a stale callback.
struct ScopedTranslation {
  Translation translation;
  ScopedTranslation(standin_translate_fn translate, void* ctx) {
    translation.translate = translate;
    translation.ctx = ctx;
    memset(translation.used, 0, sizeof translation.used);
    current_translation = &translation;
  }
  ~ScopedTranslation() { current_translation = nullptr; }
};

void* translate_uncached(uint64_t device_addr) {
  Translation* t = current_translation;
  // CUDA_ERROR_ILLEGAL_ADDRESS when there is no launch to ask.
  if (t == nullptr) throw Fault{700};
  void* host = nullptr;
  int rc = t->translate(t->ctx, device_addr, &host);
  if (rc != 0) throw Fault{rc};
  int s = translation_slot(device_addr);
  t->device[s] = device_addr;
  t->host[s] = host;
  t->used[s] = true;
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

extern "C" int standin_kernel_params(int index, const unsigned** sizes) {
  if (index < 0 || index >= kEntryCount || sizes == nullptr) return -1;
  int count = 0;
  *sizes = kEntries[index].params(&count);
  return count;
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
