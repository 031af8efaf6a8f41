/* Calls from teardown: a pthread key destructor (run when a thread exits, after the thread's
 * C++/Rust thread-locals are destroyed) and an atexit handler (run by exit(), after the main
 * thread's thread-locals are destroyed) use the store and NDArrays, make a call fail, and
 * read MXGetLastError(). Every call must work or answer -1 cleanly; the last error must be
 * the message of the call that failed; nothing may be printed on stderr (no panic message).
 *
 * The scenario runs in a child process whose stderr is a pipe: the parent (which never calls
 * the library) checks that the child exited 0 and printed nothing on stderr. */
#include "common.h"
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

static KVStoreHandle kv;
static pthread_key_t key;
static int failures = 0;

static void check(int ok, const char *where, const char *what) {
  if (!ok) {
    printf("%s: FAILED: %s\n", where, what);
    failures++;
  }
}

/* The library calls a teardown hook makes: store push/pull, a failing call and its message,
 * array creation, a shape query and an operator (thread-local result buffers). */
static void use_library(const char *where) {
  int k = 1;
  uint32_t n = 4;
  NDArrayHandle v = NULL, out = NULL;
  check(MXNDArrayCreateEx(&n, 1, DEV_CPU, 0, 0, DT_F32, &v) == 0, where, "MXNDArrayCreateEx");
  float twos[4] = {2, 2, 2, 2}, got[4] = {0};
  check(MXNDArraySyncCopyFromCPU(v, twos, 4) == 0, where, "MXNDArraySyncCopyFromCPU");
  check(MXKVStorePush(kv, 1, &k, &v, 0) == 0, where, "MXKVStorePush");
  check(MXNDArrayCreateEx(&n, 1, DEV_CPU, 0, 0, DT_F32, &out) == 0, where, "MXNDArrayCreateEx out");
  check(MXKVStorePull(kv, 1, &k, &out, 0) == 0, where, "MXKVStorePull");
  check(MXNDArraySyncCopyToCPU(out, got, 4) == 0 && got[0] == 2 && got[3] == 2, where, "pulled value is 2");
  int missing = 99;
  check(MXKVStorePull(kv, 1, &missing, &out, 0) == -1, where, "a pull of key 99 fails");
  const char *err = MXGetLastError();
  check(err != NULL && strstr(err, "key 99 has not been inited") != NULL, where, "MXGetLastError names key 99");
  /* a shape query: works, or fails cleanly with a message */
  int nd = 0;
  const int *dims = NULL;
  int rc = MXNDArrayGetShapeEx(v, &nd, &dims);
  check(rc == 0 ? (nd == 1 && dims[0] == 4) : (strstr(MXGetLastError(), "GetShapeEx") != NULL), where, "MXNDArrayGetShapeEx");
  /* an operator allocating its output: works, or fails cleanly with a message */
  void *creator = NULL;
  check(NNGetOpHandle("_plus_scalar", &creator) == 0, where, "NNGetOpHandle");
  int n_out = 0;
  NDArrayHandle *outs = NULL;
  const char *pk[1] = {"scalar"}, *pv[1] = {"1"};
  rc = MXImperativeInvoke(creator, 1, &v, &n_out, &outs, 1, pk, pv);
  if (rc == 0) {
    check(n_out == 1, where, "one output");
    float three[4] = {0};
    check(MXNDArraySyncCopyToCPU(outs[0], three, 4) == 0 && three[0] == 3, where, "_plus_scalar gives 3");
    check(MXNDArrayFree(outs[0]) == 0, where, "free the output");
  } else {
    check(strstr(MXGetLastError(), "MXImperativeInvoke") != NULL, where, "MXImperativeInvoke fails with a message");
  }
  check(MXNDArrayWaitAll() == 0, where, "MXNDArrayWaitAll");
  check(MXNDArrayFree(v) == 0 && MXNDArrayFree(out) == 0, where, "MXNDArrayFree");
  printf("%s: done\n", where);
  fflush(stdout);
}

static void key_destructor(void *value) {
  (void)value;
  use_library("pthread key destructor");
}

static void *thread_body(void *arg) {
  (void)arg;
  /* Use the library on this thread first, so its thread-locals exist and are destroyed
   * before the key destructor runs. */
  int bad = 42;
  NDArrayHandle none = NULL;
  (void)MXKVStorePull(kv, 1, &bad, &none, 0);
  use_library("worker thread");
  pthread_setspecific(key, (void *)1);
  return NULL;
}

static void at_exit(void) {
  use_library("atexit handler");
  check(MXKVStoreFree(kv) == 0, "atexit handler", "MXKVStoreFree");
  check(MXNotifyShutdown() == 0, "atexit handler", "MXNotifyShutdown");
  printf("teardown: %d failures\n", failures);
  fflush(stdout);
  if (failures) _exit(1);
}

static int scenario(void) {
  CHECK(MXKVStoreCreate("local", &kv));
  int k = 1;
  NDArrayHandle init = f32_filled(4, 0, 0);
  CHECK(MXKVStoreInit(kv, 1, &k, &init));
  CHECK(MXNDArrayFree(init));
  CHECK(pthread_key_create(&key, key_destructor) == 0 ? 0 : -1);
  atexit(at_exit);
  use_library("main thread");
  pthread_t t;
  if (pthread_create(&t, NULL, thread_body, NULL) != 0 || pthread_join(t, NULL) != 0) return 1;
  return 0; /* exit() runs at_exit */
}

int main(void) {
  int err_pipe[2];
  if (pipe(err_pipe) != 0) return 2;
  fflush(stdout);
  pid_t child = fork();
  if (child < 0) return 2;
  if (child == 0) {
    dup2(err_pipe[1], 2);
    close(err_pipe[0]);
    close(err_pipe[1]);
    exit(scenario());
  }
  close(err_pipe[1]);
  char buf[4096];
  size_t total = 0;
  ssize_t got;
  while ((got = read(err_pipe[0], buf, sizeof buf)) > 0) {
    fwrite(buf, 1, (size_t)got, stderr);
    total += (size_t)got;
  }
  int status = 0;
  waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fprintf(stderr, "teardown: the scenario failed (status %d)\n", status);
    return 1;
  }
  if (total != 0) {
    fprintf(stderr, "teardown: the scenario printed %zu bytes on stderr\n", total);
    return 1;
  }
  printf("teardown passed\n");
  return 0;
}
