/* Random sequences of store calls on a dist_sync, dist_device_sync or dist_async store
 * (ctests/random_calls.h), run by scripts/dist-diff on the reference's ps-lite stores and on
 * libkvstore's MPI stores: every worker makes the same calls in step (the same seed), pushing
 * its draws plus its rank; each worker's transcript (every pulled value as a hash of its
 * bytes) must be identical rank by rank. Init, broadcast, push, pull and pushpull (also in
 * place) of dense float32 and float64 keys (MXNet's servers refuse int32 sums), row_sparse
 * pushes and pulls, int or string keys, 1-4 contexts per worker, lists naming a key several
 * times, keys above the bound the runner sets split over the servers, the servers' updater or
 * none (always on dist_async, where every worker ends each call at a barrier and push-pulls
 * are pushes), 2-bit compression or none.
 *
 * MXNet's dist stores order a worker's requests to its servers by the arrays they name only:
 * a push of one fresh CPU array does not wait for the key's earlier push or pull, so a server
 * may count one worker's two pushes as one round's, or answer a pull with the next round's sum
 * (kvstore_dist.h, "Start of a push doesn't guarantee that the previous pushes are
 * completed"), and the reference's results then depend on timing, or it hangs. Built against
 * the reference (scripts/dist-diff defines KV_REFERENCE) the program therefore waits for
 * every call before the next; against libkvstore, which keeps each key's rounds in the order
 * of the calls, it does not wait, and its transcript must still be the reference's.
 *
 * With `bad`, libkvstore's build makes calls the store must refuse between the steps
 * (ctests/bad_calls.h), logged to stderr: its transcript must still be the reference's, which
 * makes none.
 *
 * usage: dist_diff_random SEED [STEPS [TYPE [bad]]]   (default 80 steps of dist_sync) */
#include "dist_common.h"
#include "random_calls.h"
#ifndef KV_REFERENCE
#include "bad_calls.h"
#endif

int main(int argc, char **argv) {
  const char *type = argc > 3 ? argv[3] : "dist_sync";
  if (!dist_is_worker()) return run_server_role(type);
  uint64_t seed = argc > 1 ? (uint64_t)atoll(argv[1]) : 1;
  int steps = argc > 2 ? atoi(argv[2]) : 80;
  KVStoreHandle kv = dist_create(type);
  int rank, workers;
  worker_header(kv, &rank, &workers);
  rc_out = dist_out;
  rc_rank = rank;
  World w;
  plan_sequence(&w, seed, type);
#ifdef KV_REFERENCE
  w.wait_each_step = 1;
#endif
  /* dist_async applies each push when it arrives: every worker finishes a call before any
   * starts the next, so that a pull sees every push before it and none after; the servers'
   * updater adds integers, exact in any order */
  w.barrier_each_step = strcmp(type, "dist_async") == 0;
  int bad = argc > 4 && strcmp(argv[4], "bad") == 0;
#ifdef KV_REFERENCE
  (void)bad;
#else
  if (bad) {
    bad_state = seed * 0xD1B54A32D192ED03ULL + 7;
    bad_log = stderr;
    w.before_step = bad_call;
  }
#endif
  set_up_store(&w, kv, rank);
  run_sequence(&w, kv, steps);
#ifndef KV_REFERENCE
  if (bad) {
    fprintf(stderr, "worker %d: %d calls refused\n", rank, bad_calls_made);
    EXPECT(bad_calls_made > 0);
  }
#endif
  CHECK(MXNDArrayWaitAll());
  CHECK(MXKVStoreFree(kv));
  EMIT("done");
  return 0;
}
