/* cuda_audit: an rtld-audit library (LD_AUDIT) that traces the CUDA driver calls a program
 * resolves from libcuda.so*, for a real driver that has no trace of its own. Every
 * allocation and free of device, stream-ordered, pinned or registered memory, every copy and
 * every kernel launch appends one line to the file named by CUDA_AUDIT_TRACE, in the CUDA
 * stand-in's trace format ("tid=N call=NAME"), so the same checks read either trace.
 *
 * libkvstore resolves the driver with dlsym (cudarc and src/gpu/driver.rs); glibc hands
 * dlsym's results to la_symbind64, which returns a counting wrapper in place of the
 * driver's function. Wrappers forward six integer arguments, which on x86-64 passes every
 * argument of the calls below (all take at most six integers or pointers) untouched;
 * cuLaunchKernel, with eleven, has a wrapper of its own prototype.
 *
 * Built by scripts/gpu-bundle.sh; used by scripts/test-gpu.sh's steady-loop check. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static int trace_fd = -1;

static void trace(const char *name) {
  if (trace_fd < 0) return;
  char line[160];
  int n = snprintf(line, sizeof line, "tid=%ld call=%s\n", (long)syscall(SYS_gettid), name);
  /* One write per line on an O_APPEND descriptor: lines of concurrent threads never mix. */
  if (n > 0 && write(trace_fd, line, (size_t)n) < 0) trace_fd = -1;
}

typedef int (*call6)(uintptr_t, uintptr_t, uintptr_t, uintptr_t, uintptr_t, uintptr_t);
typedef int (*launch_fn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *, void **,
                         void **);

struct traced {
  const char *name;
  uintptr_t real;
  uintptr_t wrapper;
};

#define WRAP6(i)                                                                                           \
  static int wrap_##i(uintptr_t a, uintptr_t b, uintptr_t c, uintptr_t d, uintptr_t e, uintptr_t f) {      \
    trace(table[i].name);                                                                              \
    return ((call6)table[i].real)(a, b, c, d, e, f);                                                   \
  }

static struct traced table[];
WRAP6(0) WRAP6(1) WRAP6(2) WRAP6(3) WRAP6(4) WRAP6(5) WRAP6(6) WRAP6(7) WRAP6(8) WRAP6(9)
WRAP6(10) WRAP6(11) WRAP6(12) WRAP6(13) WRAP6(14) WRAP6(15) WRAP6(16) WRAP6(17) WRAP6(18) WRAP6(19)
WRAP6(20) WRAP6(21) WRAP6(22) WRAP6(23) WRAP6(24)

static int wrap_launch(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                       unsigned shared, void *stream, void **params, void **extra);

#define ROW(i, name) {name, 0, (uintptr_t)wrap_##i}
static struct traced table[] = {
    /* allocations and frees */
    ROW(0, "cuMemAlloc_v2"), ROW(1, "cuMemAllocAsync"), ROW(2, "cuMemAllocFromPoolAsync"),
    ROW(3, "cuMemAllocHost_v2"), ROW(4, "cuMemHostAlloc"), ROW(5, "cuMemAllocManaged"),
    ROW(6, "cuMemAllocPitch_v2"), ROW(7, "cuMemFree_v2"), ROW(8, "cuMemFreeAsync"), ROW(9, "cuMemFreeHost"),
    ROW(10, "cuMemHostRegister_v2"), ROW(11, "cuMemHostUnregister"), ROW(12, "cuMemCreate"),
    ROW(13, "cuMemRelease"), ROW(14, "cuMemPoolTrimTo"),
    /* work */
    ROW(15, "cuMemcpyHtoDAsync_v2"), ROW(16, "cuMemcpyDtoHAsync_v2"), ROW(17, "cuMemcpyDtoDAsync_v2"),
    ROW(18, "cuMemcpyPeerAsync"), ROW(19, "cuMemcpyAsync"), ROW(20, "cuMemcpyHtoD_v2"),
    ROW(21, "cuMemcpyDtoH_v2"), ROW(22, "cuMemsetD8Async"), ROW(23, "cuMemsetD32Async"),
    ROW(24, "cuMemcpyDtoD_v2"),
    {"cuLaunchKernel", 0, (uintptr_t)wrap_launch},
};
#define TABLE_LEN (sizeof table / sizeof table[0])

static int wrap_launch(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                       unsigned shared, void *stream, void **params, void **extra) {
  trace("cuLaunchKernel");
  return ((launch_fn)table[TABLE_LEN - 1].real)(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra);
}

unsigned int la_version(unsigned int version) {
  const char *path = getenv("CUDA_AUDIT_TRACE");
  if (path && *path) trace_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  return version < LAV_CURRENT ? version : LAV_CURRENT;
}

unsigned int la_objopen(struct link_map *map, Lmid_t lmid, uintptr_t *cookie) {
  (void)lmid, (void)cookie;
  /* Bindings from any object to the driver library; nothing else is looked at. */
  return LA_FLG_BINDFROM | (strstr(map->l_name, "libcuda.so") ? LA_FLG_BINDTO : 0);
}

uintptr_t la_symbind64(Elf64_Sym *sym, unsigned int ndx, uintptr_t *refcook, uintptr_t *defcook, unsigned int *flags,
                       const char *symname) {
  (void)ndx, (void)refcook, (void)defcook, (void)flags;
  for (size_t i = 0; i < TABLE_LEN; i++)
    if (!strcmp(symname, table[i].name)) {
      table[i].real = sym->st_value;
      return table[i].wrapper;
    }
  return sym->st_value;
}
