/* Caps the program's address space (RLIMIT_AS) at what it uses now plus `headroom` bytes, so
 * that a later big allocation fails. Returns 0, or -1 if the limit could not be set. */
#ifndef KVSTORE_CTESTS_LIMIT_MEMORY_H
#define KVSTORE_CTESTS_LIMIT_MEMORY_H

#include <stdio.h>
#include <sys/resource.h>
#include <unistd.h>

static inline int limit_memory(size_t headroom) {
  FILE *f = fopen("/proc/self/statm", "r");
  unsigned long pages = 0;
  if (!f) return -1;
  int n = fscanf(f, "%lu", &pages);
  fclose(f);
  if (n != 1) return -1;
  struct rlimit lim;
  if (getrlimit(RLIMIT_AS, &lim) != 0) return -1;
  rlim_t want = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + headroom;
  if (lim.rlim_max != RLIM_INFINITY && want > lim.rlim_max) want = lim.rlim_max;
  lim.rlim_cur = want;
  return setrlimit(RLIMIT_AS, &lim);
}

#endif
