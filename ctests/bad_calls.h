/* Calls the store must refuse, made between the steps of a random sequence
 * (ctests/random_calls.h's before_step): ctests/diff_random.c and ctests/dist_diff_random.c
 * with `bad`, against libkvstore only. Each is printed as a `bad ...` line to bad_log (the
 * transcript when NULL); the program exits unless the call answers -1. */
#ifndef KVSTORE_CTESTS_BAD_CALLS_H
#define KVSTORE_CTESTS_BAD_CALLS_H

#include "random_calls.h"

static FILE *bad_log;
static int bad_calls_made;
/* Only calls whose array handles are live arrays (no freed handle, no store handle): what
 * hosted mode, which cannot tell a host array handle from any other pointer, can refuse. */
static int bad_live_handles_only;
#define BAD_OUT(...) (bad_calls_made++, fprintf(bad_log ? bad_log : rc_out ? rc_out : stdout, __VA_ARGS__))

/* Before a third of the steps, from a stream of draws of its own (bad_state, seeded by the
 * program) so that the sequence's own calls stay the same. */
static uint64_t bad_state;

static uint32_t bad_below(uint32_t n) { return xorshift_below(&bad_state, n); }

/* An array of key k's shape (of n elements when n > 0) and dtype dt, every element 3. */
static NDArrayHandle threes(const Key *k, int dt, uint32_t n, int dev) {
  uint32_t flat[1] = {n};
  NDArrayHandle h;
  CHECK(MXNDArrayCreateEx(n ? flat : k->shape, n ? 1 : k->ndim, DEV_CPU, dev, 0, dt, &h));
  size_t len = n ? n : k->len, size = dtype_size(dt);
  unsigned char *bytes = malloc(len * size + 1);
  for (size_t i = 0; i < len; i++) encode(dt, 3, bytes + i * size);
  CHECK(MXNDArraySyncCopyFromCPU(h, bytes, len));
  free(bytes);
  return h;
}

/* Fails the program unless h (made by threes) still holds 3 everywhere. */
static void expect_threes(NDArrayHandle h) {
  int dtype = -1;
  size_t len = elements(h, &dtype), size = dtype_size(dtype);
  unsigned char *bytes = malloc(len * size + 1);
  CHECK(MXNDArraySyncCopyToCPU(h, bytes, len));
  for (size_t i = 0; i < len; i++) EXPECT(element(dtype, bytes + i * size) == 3);
  free(bytes);
}

/* One push (0), pull (1) or push-pull (2) of n keys, by id or by name as the store's keys
 * are (or the other way when `other_type`); returns the call's status. */
static int call_keys(const World *w, KVStoreHandle kv, int what, int other_type, int n, const int *ids,
                     const char **names, NDArrayHandle *vals, NDArrayHandle *outs) {
  int by_name = w->string_keys != other_type;
  switch (what) {
    case 0: return by_name ? MXKVStorePushEx(kv, (mx_uint)n, names, vals, 0) : MXKVStorePush(kv, (mx_uint)n, ids, vals, 0);
    case 1: return by_name ? MXKVStorePullEx(kv, (mx_uint)n, names, outs, 0) : MXKVStorePull(kv, (mx_uint)n, ids, outs, 0);
    default:
      return by_name ? MXKVStorePushPullEx(kv, (mx_uint)n, names, (mx_uint)n, names, vals, outs, 0)
                     : MXKVStorePushPull(kv, (mx_uint)n, ids, (mx_uint)n, ids, vals, outs, 0);
  }
}

/* A row_sparse pull the store must refuse: row ids past the key's rows, a dense output, or
 * a key stored dense (dense_key); returns the call's status and names it in *why. */
static int bad_row_sparse_pull(const World *w, KVStoreHandle kv, const Key *sparse, const Key *dense_key, const char **why) {
  int dev = (int)bad_below((uint32_t)w->ndev), kind = (int)bad_below(3);
  const Key *k = kind == 2 ? dense_key : sparse;
  uint32_t two = 2;
  int64_t ids[2] = {0, kind == 0 ? (int64_t)sparse->shape[0] : 0};
  NDArrayHandle rows, out;
  CHECK(MXNDArrayCreateEx(&two, 1, DEV_CPU, dev, 0, DT_I64, &rows));
  CHECK(MXNDArraySyncCopyFromCPU(rows, ids, 2));
  if (kind == 1) out = threes(k, DT_F32, 0, dev);
  else if (kind == 2) out = rsp_f32_at(DEV_CPU, dev, (uint32_t)k->len, 1, 0, NULL, NULL);
  else out = rsp_f32_at(DEV_CPU, dev, k->shape[0], k->shape[1], 0, NULL, NULL);
  *why = kind == 0 ? "a row id past the key's rows" : kind == 1 ? "a dense output for a row_sparse pull" : "a row_sparse pull of a dense key";
  const char *name = k->name;
  int rc = w->string_keys ? MXKVStorePullRowSparseEx(kv, 1, &name, &out, &rows, 0)
                          : MXKVStorePullRowSparse(kv, 1, &k->id, &out, &rows, 0);
  if (kind == 1) expect_threes(out);
  CHECK(MXNDArrayFree(out));
  CHECK(MXNDArrayFree(rows));
  return rc;
}

/* A call the store must refuse (-1), changing nothing: the rest of the sequence must print
 * what it prints without these calls. Pull outputs must keep what they held. */
static void bad_call(World *w, KVStoreHandle kv) {
  if (bad_below(3) != 0) return;
  int dense[RC_MAX_KEYS], nd = 0;
  for (int i = 0; i < w->nkeys; i++)
    if (w->keys[i].inited && !w->keys[i].sparse) dense[nd++] = i;
  if (nd == 0) return;
  const Key *a = &w->keys[dense[bad_below((uint32_t)nd)]], *b = &w->keys[dense[bad_below((uint32_t)nd)]];
  int dev = (int)bad_below((uint32_t)w->ndev), kind = (int)bad_below(10), what = (int)bad_below(3);
  if (bad_live_handles_only && (kind == 4 || kind == 8)) return;
  if (kind == 9) {
    const Key *sparse = NULL;
    for (int i = 0; i < w->nkeys; i++)
      if (w->keys[i].inited && w->keys[i].sparse) sparse = &w->keys[i];
    if (!sparse) return;
    const char *why = "";
    int rc = bad_row_sparse_pull(w, kv, sparse, a, &why);
    BAD_OUT("bad %d: %s (row_sparse pull): %d\n", w->step, why, rc);
    if (rc != -1) {
      fprintf(stderr, "step %d: a call with %s answered %d, not -1\n", w->step, why, rc);
      exit(1);
    }
    return;
  }
  int ids[2] = {a->id, b->id};
  const char *names[2] = {a->name, b->name};
  NDArrayHandle vals[2] = {threes(a, a->dtype, 0, dev), threes(b, b->dtype, 0, dev)};
  NDArrayHandle outs[2] = {threes(a, a->dtype, 0, dev), threes(b, b->dtype, 0, dev)};
  const char *why = "";
  NDArrayHandle *freed_slot = NULL; /* a slot that holds no array of ours */
  int rc = 0, n = 2, other_type = 0;
  switch (kind) {
    case 0: /* the second value or output of another shape */
      why = "an array of another shape";
      if (what != 1) {
        CHECK(MXNDArrayFree(vals[1]));
        vals[1] = threes(b, b->dtype, (uint32_t)b->len + 1, dev);
      } else {
        CHECK(MXNDArrayFree(outs[1]));
        outs[1] = threes(b, b->dtype, (uint32_t)b->len + 1, dev);
      }
      break;
    case 1: /* the second key never initialised */
      why = "a key never initialised";
      ids[1] = 4321;
      names[1] = "never-initialised";
      break;
    case 2:
      why = "keys of the other type";
      other_type = 1;
      break;
    case 3: /* a second init of the first key */
      why = "a second init";
      break;
    case 4: /* the second value or output freed */
      why = "an array already freed";
      freed_slot = what != 1 ? &vals[1] : &outs[1];
      CHECK(MXNDArrayFree(*freed_slot));
      break;
    case 5: /* the second value or output NULL */
      why = "a NULL array";
      freed_slot = what != 1 ? &vals[1] : &outs[1];
      CHECK(MXNDArrayFree(*freed_slot));
      *freed_slot = NULL;
      break;
    case 6: /* a push-pull whose second output has another shape: its push must not happen */
      why = "a push-pull into an array of another shape";
      what = 2;
      CHECK(MXNDArrayFree(outs[1]));
      outs[1] = threes(b, b->dtype, (uint32_t)b->len + 1, dev);
      break;
    case 7: /* the second value of another dtype (a pull into one converts, as in MXNet) */
      why = "a value of another dtype";
      what = what == 1 ? 0 : what;
      CHECK(MXNDArrayFree(vals[1]));
      vals[1] = threes(b, DT_F16, 0, dev);
      break;
    default: /* the store's own handle in place of the second value or output */
      why = "a store handle for an array";
      freed_slot = what != 1 ? &vals[1] : &outs[1];
      CHECK(MXNDArrayFree(*freed_slot));
      *freed_slot = (NDArrayHandle)kv;
      break;
  }
  if (kind == 3) {
    rc = w->string_keys ? MXKVStoreInitEx(kv, 1, names, vals) : MXKVStoreInit(kv, 1, ids, vals);
  } else {
    rc = call_keys(w, kv, what, other_type, n, ids, names, vals, outs);
  }
  BAD_OUT("bad %d: %s (%s): %d\n", w->step, why, kind == 3 ? "init" : what == 0 ? "push" : what == 1 ? "pull" : "push-pull", rc);
  if (rc != -1) {
    fprintf(stderr, "step %d: a call with %s answered %d, not -1\n", w->step, why, rc);
    exit(1);
  }
  if (what != 0 && kind != 3) expect_threes(outs[0]);
  for (int i = 0; i < 2; i++) {
    if (&vals[i] != freed_slot) CHECK(MXNDArrayFree(vals[i]));
    if (&outs[i] != freed_slot) CHECK(MXNDArrayFree(outs[i]));
  }
}

#endif
