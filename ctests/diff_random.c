/* Randomised differential test of the store: seeded random sequences of init, broadcast, push,
 * pull, pushpull (also in place) and row_sparse pull calls on local and device stores: int or
 * string keys, 1-4 contexts, float32, float64 and int32 keys of several shapes, row_sparse
 * pushes, lists naming a key several times, an updater from the start (replaced on the way)
 * or none, 2-bit gradient compression or none (ctests/random_calls.h). Each pulled value
 * prints as a hash of its bytes; the runner compares the transcript of libkvstore.so with the
 * reference libmxnet.so's line for line, so any sequence on which the two stores disagree
 * shows up with its seed and step. With `bad`, calls the store must refuse are made between
 * the steps (bad_call below; libkvstore only): the transcript without their lines must be the
 * one without them.
 *
 * With `per-device`, every key's values and outputs are one per context (the layout of an
 * nccl store's fixed device set); with `nccl`, the same on nccl stores. `bad-live` makes only
 * the refused calls whose array handles are live arrays (for hosted mode).
 *
 * usage: diff_random [SEEDS [STEPS [FIRST_SEED [bad|bad-live|per-device|nccl]]]]
 *        (defaults: 40 seeds of 60 steps, from 1) */
#include "random_calls.h"

#include "bad_calls.h"

static int with_bad_calls;

static void run_seed(uint64_t seed, int steps) {
  World w;
  plan_sequence(&w, seed, NULL);
  bad_state = seed * 0xD1B54A32D192ED03ULL + 7;
  if (with_bad_calls) w.before_step = bad_call;
  KVStoreHandle kv;
  CHECK(MXKVStoreCreate(w.type, &kv));
  set_up_store(&w, kv, 0);
  run_sequence(&w, kv, steps);
  /* MXNet deletes its store's reducer at once while the reducer's queued ops still call it
   * (it crashed now and then here; libkvstore: ctests/free_in_flight.c) */
  CHECK(MXNDArrayWaitAll());
  CHECK(MXKVStoreFree(kv));
}

int main(int argc, char **argv) {
  int seeds = argc > 1 ? atoi(argv[1]) : 40;
  int steps = argc > 2 ? atoi(argv[2]) : 60;
  int first = argc > 3 ? atoi(argv[3]) : 1;
  const char *mode = argc > 4 ? argv[4] : "";
  with_bad_calls = strcmp(mode, "bad") == 0 || strcmp(mode, "bad-live") == 0;
  bad_live_handles_only = strcmp(mode, "bad-live") == 0;
  /* `nccl`: nccl stores; `per-device`: the local and device stores they are compared with;
   * both with every key's values and outputs one per context */
  rc_one_per_device = strcmp(mode, "nccl") == 0 || strcmp(mode, "per-device") == 0;
  if (strcmp(mode, "nccl") == 0) rc_store_type = "nccl";
  for (int s = first; s < first + seeds; s++) run_seed((uint64_t)s, steps);
  printf("diff_random: %d seeds of %d steps\n", seeds, steps);
  return 0;
}
