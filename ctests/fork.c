/* fork(): a child forked from a program that used libkvstore — idle, or while another thread
 * is pushing in a loop — never hangs. It tries init / push / pull / wait: libkvstore answers
 * each with -1 at once and a message saying the process forked (its worker threads did not
 * survive, and locks other threads held stay held); version and GPU-count queries still
 * answer. A child forked before the first call uses the library fully. The parent waits for
 * each child with a timeout and keeps working afterwards. libkvstore.so only. */
#define _DEFAULT_SOURCE
#include "common.h"
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define N 4096

/* In the child: every call that needs the library answers -1 (or works, when `works`). */
static int child(int works) {
  alarm(10); /* alarms are not inherited: a hang in the child ends it */
  KVStoreHandle kv = NULL;
  NDArrayHandle a = NULL;
  uint32_t n = N;
  int key = 3, failed = 0;
  int rc[6];
  rc[0] = MXKVStoreCreate("local", &kv);
  rc[1] = MXNDArrayCreateEx(&n, 1, DEV_CPU, 0, 0, DT_F32, &a);
  rc[2] = kv && a ? MXKVStoreInit(kv, 1, &key, &a) : -1;
  rc[3] = kv && a ? MXKVStorePush(kv, 1, &key, &a, 0) : -1;
  rc[4] = kv && a ? MXKVStorePull(kv, 1, &key, &a, 0) : -1;
  rc[5] = MXNDArrayWaitAll();
  for (int i = 0; i < 6; i++) {
    int ok = works ? rc[i] == 0 : rc[i] == -1;
    if (!ok) {
      fprintf(stderr, "child: call %d answered %d (%s)\n", i, rc[i], MXGetLastError());
      failed = 1;
    }
  }
  if (!works && !strstr(MXGetLastError(), "forked")) {
    fprintf(stderr, "child: message '%s'\n", MXGetLastError());
    failed = 1;
  }
  if (works) {
    failed |= f32_uniform(a, N) != 0;
  }
  int version = 0;
  failed |= MXGetVersion(&version) != 0;
  /* After use, _exit: leak checkers (LeakSanitizer, valgrind) would report the memory of the
   * parent's threads, which the fork lost. The child forked before any call exits normally. */
  if (!works) _exit(failed);
  exit(failed);
}

/* Forks, runs `child` there, waits at most 20 s. */
static void fork_and_wait(const char *what, int works) {
  pid_t pid = fork();
  EXPECT(pid >= 0);
  if (pid == 0) child(works);
  int status = 0;
  for (int i = 0; i < 2000; i++) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    EXPECT(r >= 0);
    if (r == pid) {
      printf("%s: child exited %d\n", what, WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status));
      EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
      return;
    }
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  fprintf(stderr, "%s: the child hung\n", what);
  exit(1);
}

static KVStoreHandle kv;
static volatile int stop = 0;

static void *pusher(void *arg) {
  (void)arg;
  NDArrayHandle ones = f32_filled(N, 1, 0);
  int key = 0;
  while (!stop) {
    CHECK(MXKVStorePush(kv, 1, &key, &ones, 0));
    CHECK(MXKVStorePull(kv, 1, &key, &ones, 0));
  }
  CHECK(MXNDArrayFree(ones));
  return NULL;
}

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  alarm(60);
  fork_and_wait("forked before the first call", 1);
  CHECK(MXKVStoreCreate("local", &kv));
  NDArrayHandle zero = f32_filled(N, 0, 0);
  int key = 0;
  CHECK(MXKVStoreInit(kv, 1, &key, &zero));
  CHECK(MXNDArrayWaitAll());
  fork_and_wait("forked while idle", 0);
#if defined(__SANITIZE_ADDRESS__)
  /* GCC 12's ASan allocator is not fork-safe: a child forked while another thread holds its
   * allocator lock hangs in its first malloc, in ASan's code (seen as SIGALRM in about one
   * run in three). glibc's malloc is fork-safe, so mid-push forks run in the uninstrumented
   * build (tests/c_programs.rs) only. */
  printf("forked mid-push: skipped under AddressSanitizer\n");
#else
  pthread_t th;
  pthread_create(&th, NULL, pusher, NULL);
  for (int i = 0; i < 20; i++) fork_and_wait("forked mid-push", 0);
  stop = 1;
  pthread_join(th, NULL);
#endif
  /* The parent goes on. */
  CHECK(MXKVStorePush(kv, 1, &key, &zero, 0));
  CHECK(MXKVStorePull(kv, 1, &key, &zero, 0));
  EXPECT(f32_uniform(zero, N) == 0);
  CHECK(MXNDArrayFree(zero));
  CHECK(MXKVStoreFree(kv));
  printf("fork passed\n");
  return 0;
}
