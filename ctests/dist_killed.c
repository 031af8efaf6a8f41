/* A worker that dies: worker 1 is killed by a signal after joining the job while the others
 * wait at a barrier. The job must end non-zero (Open MPI aborts it), well within mpirun's
 * --timeout, instead of hanging. */
#include "common.h"
#include <signal.h>

int main(void) {
  int is_worker;
  CHECK(MXKVStoreIsWorkerNode(&is_worker));
  KVStoreHandle kv;
  CHECK(MXKVStoreCreate("dist_sync", &kv));
  if (!is_worker) {
    CHECK(MXKVStoreRunServer(kv, NULL, NULL));
    return 0;
  }
  int rank;
  CHECK(MXKVStoreGetRank(kv, &rank));
  if (rank == 1) raise(SIGKILL);
  CHECK(MXKVStoreBarrier(kv));
  CHECK(MXKVStoreFree(kv));
  return 0;
}
