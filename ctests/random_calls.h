/* Random sequences of store calls, shared by ctests/diff_random.c (local and device stores,
 * against libmxnet.so) and ctests/dist_diff_random.c (the dist stores, against ps-lite): a
 * seed gives the store's settings, its keys and a sequence of calls; every pulled value is
 * printed to rc_out as a hash of its bytes, so two libraries' transcripts compare line for
 * line.
 *
 * Values are small integers, so every sum is exact whatever order a store adds in: the
 * sequences are about which values end up where (grouping, updater calls, in-place outputs),
 * not rounding. Only calls MXNet defines are made: every key a call names is initialised, a
 * key is pushed with the same number of values every time (MXNet 1.9 can crash otherwise),
 * and an updater is set from the start or never. */
#ifndef KVSTORE_CTESTS_RANDOM_CALLS_H
#define KVSTORE_CTESTS_RANDOM_CALLS_H

#include "common.h"

/* Where the transcript goes (stdout when NULL), and the rank a distributed worker adds to the
 * values it pushes. */
static FILE *rc_out;
static int rc_rank;
/* When set before plan_sequence: every key's values and outputs one per context, context c
 * holding the c-th (the layout an `nccl` store takes once its device set is fixed), dense
 * keys, no compression. */
static int rc_one_per_device;
/* When set: the store type of a local sequence, in place of the drawn local or device. */
static const char *rc_store_type;
#define OUT(...) fprintf(rc_out ? rc_out : stdout, __VA_ARGS__)

#define RC_MAX_KEYS 8
#define RC_MAX_DEVS 4
#define RC_MAX_LIST 24

static uint64_t rng_state;

/* xorshift64* on *state: the same sequence on every machine */
static uint32_t xorshift_below(uint64_t *state, uint32_t n) {
  *state ^= *state >> 12;
  *state ^= *state << 25;
  *state ^= *state >> 27;
  return (uint32_t)((*state * 2685821657736338717ULL) >> 32) % n;
}

static uint32_t below(uint32_t n) { return xorshift_below(&rng_state, n); }

typedef struct {
  int dtype;
  uint32_t shape[2];
  uint32_t ndim;
  size_t len;
  int inited;
  uint32_t push_values; /* values per push of this key: fixed once chosen */
  int sparse;           /* pushed as row_sparse values (float32 matrices, seeds without updater) */
  char name[16];
  int id;
} Key;

typedef struct World {
  Key keys[RC_MAX_KEYS];
  int nkeys;
  int ndev;
  int string_keys;
  int step;
  const char *type;
  int updated;    /* an updater from the start */
  int compressed; /* 2-bit gradient compression */
  int server_updater; /* distributed: the servers' updater, stored += 2 * round's sum */
  /* called before every step when set (diff_random.c's calls that must fail) */
  void (*before_step)(struct World *w, KVStoreHandle kv);
  int wait_each_step; /* MXNDArrayWaitAll after every call (dist_diff_random.c) */
  int barrier_each_step; /* and MXKVStoreBarrier (dist_async: no pushes in flight during a pull) */
  int one_per_device;    /* rc_one_per_device */
} World;

static uint64_t fnv1a(const unsigned char *p, size_t n) {
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ULL;
  return h;
}

static double element(int dtype, const unsigned char *p) {
  switch (dtype) {
    case DT_F32: { float f; memcpy(&f, p, 4); return f; }
    case DT_F64: { double d; memcpy(&d, p, 8); return d; }
    default: { int32_t i; memcpy(&i, p, 4); return i; }
  }
}

/* The number of elements of h; its dtype in *dtype. */
static size_t elements(NDArrayHandle h, int *dtype) {
  CHECK(MXNDArrayGetDType(h, dtype));
  uint32_t ndim = 0;
  const uint32_t *shape = NULL;
  CHECK(MXNDArrayGetShape(h, &ndim, &shape));
  size_t len = 1;
  for (uint32_t i = 0; i < ndim; i++) len *= shape[i];
  return len;
}

/* Prints a canonical line for h: its shape, hash and the sum and first element. */
static void report(const char *what, NDArrayHandle h) {
  int dtype = -1;
  size_t len = elements(h, &dtype);
  size_t size = dtype_size(dtype);
  unsigned char *bytes = malloc(len * size + 1);
  CHECK(MXNDArraySyncCopyToCPU(h, bytes, len));
  double sum = 0;
  for (size_t i = 0; i < len; i++) sum += element(dtype, bytes + i * size);
  OUT("  %s: dtype=%d len=%zu hash=%016llx sum=%.17g first=%.17g\n", what, dtype, len,
         (unsigned long long)fnv1a(bytes, len * size), sum, len ? element(dtype, bytes) : 0.0);
  free(bytes);
}

/* Prints a canonical line for a row_sparse h: its row ids and the hash of its rows. */
static void report_rows(const char *what, NDArrayHandle h) {
  NDArrayHandle aux, data;
  int dtype = -1;
  CHECK(MXNDArrayGetAuxNDArray(h, 0, &aux));
  CHECK(MXNDArrayGetDataNDArray(h, &data));
  size_t nnr = elements(aux, &dtype), len = elements(data, &dtype);
  int64_t *ids = malloc(sizeof(int64_t) * (nnr + 1));
  float *vals = malloc(sizeof(float) * (len + 1));
  if (nnr > 0) {
    CHECK(MXNDArraySyncCopyToCPU(aux, ids, nnr));
    CHECK(MXNDArraySyncCopyToCPU(data, vals, len));
  }
  OUT("  %s: rows", what);
  for (size_t i = 0; i < nnr; i++) OUT(" %lld", (long long)ids[i]);
  OUT(" hash=%016llx\n", (unsigned long long)fnv1a((const unsigned char *)vals, len * sizeof(float)));
  free(ids);
  free(vals);
  CHECK(MXNDArrayFree(aux));
  CHECK(MXNDArrayFree(data));
}

/* A new array of key k's shape and dtype on cpu(dev), filled with small random integers. */
static NDArrayHandle random_value(const Key *k, int dev, int lo, int hi) {
  NDArrayHandle h;
  CHECK(MXNDArrayCreateEx(k->shape, k->ndim, DEV_CPU, dev, 0, k->dtype, &h));
  size_t size = dtype_size(k->dtype);
  unsigned char *bytes = malloc(k->len * size + 1);
  /* in a distributed job each worker adds its rank: the same draws on every worker (the calls
   * stay in step), different values */
  int offset = hi > lo ? rc_rank : 0;
  for (size_t i = 0; i < k->len; i++) encode(k->dtype, lo + (int)below((uint32_t)(hi - lo + 1)) + offset, bytes + i * size);
  CHECK(MXNDArraySyncCopyFromCPU(h, bytes, k->len));
  free(bytes);
  return h;
}

/* --- the updaters: stored += 2 * received, or stored = received - stored (user != NULL),
 * elementwise in the key's dtype ------------------------------------------------------------ */

static void apply(NDArrayHandle recv, NDArrayHandle local, int flip) {
  int dtype = -1;
  size_t len = elements(local, &dtype);
  size_t size = dtype_size(dtype);
  unsigned char *r = malloc(len * size + 1), *l = malloc(len * size + 1);
  CHECK(MXNDArraySyncCopyToCPU(recv, r, len));
  CHECK(MXNDArraySyncCopyToCPU(local, l, len));
  for (size_t i = 0; i < len; i++) {
    double v = flip ? element(dtype, r + i * size) - element(dtype, l + i * size)
                    : element(dtype, l + i * size) + 2 * element(dtype, r + i * size);
    encode(dtype, v, l + i * size);
  }
  CHECK(MXNDArraySyncCopyFromCPU(local, l, len));
  free(r);
  free(l);
}

static void int_updater(int key, NDArrayHandle recv, NDArrayHandle local, void *user) {
  OUT("  updater key=%d\n", key);
  report("received", recv);
  apply(recv, local, user != NULL);
  CHECK(MXNDArrayFree(recv));
  CHECK(MXNDArrayFree(local));
}

static void str_updater(const char *key, NDArrayHandle recv, NDArrayHandle local, void *user) {
  OUT("  updater key='%s'\n", key);
  report("received", recv);
  apply(recv, local, user != NULL);
  CHECK(MXNDArrayFree(recv));
  CHECK(MXNDArrayFree(local));
}

/* --- calls --------------------------------------------------------------------------------- */

/* MXNet's dist stores refuse what its local stores take (kvstore_dist.h): a push-pull of a
 * row_sparse value or with compression, a row_sparse pull of several outputs of one key; and
 * a key pushed row_sparse and pulled dense fails on its size. A distributed sequence makes
 * none of those calls. */
static int is_dist(const World *w) { return strncmp(w->type, "dist", 4) == 0; }

static void print_keys(const World *w, const char *call, int n, const int *idx) {
  OUT("step %d %s:", w->step, call);
  for (int i = 0; i < n; i++) {
    const Key *k = &w->keys[idx[i]];
    if (w->string_keys) OUT(" '%s'", k->name);
    else OUT(" %d", k->id);
  }
  OUT("\n");
}

/* Fills ids and names for the keys idx[0..n). */
static void key_lists(const World *w, int n, const int *idx, int *ids, const char **names) {
  for (int i = 0; i < n; i++) {
    ids[i] = w->keys[idx[i]].id;
    names[i] = w->keys[idx[i]].name;
  }
}

/* Picks n distinct keys among those with `inited` as given; returns how many it found. */
static int pick_keys(const World *w, int want_inited, int n, int *idx) {
  int pool[RC_MAX_KEYS], np = 0;
  for (int i = 0; i < w->nkeys; i++)
    if (w->keys[i].inited == want_inited) pool[np++] = i;
  int got = 0;
  while (got < n && np > 0) {
    int j = (int)below((uint32_t)np);
    idx[got++] = pool[j];
    pool[j] = pool[--np];
  }
  return got;
}

/* A row_sparse value of key k's shape on cpu(dev): a random subset of its rows (all of them
 * when `all`), small random integers in them. */
static NDArrayHandle random_rows(const Key *k, int dev, int all) {
  uint32_t rows = k->shape[0], cols = k->shape[1], nnr = 0;
  int64_t ids[64];
  float *vals = malloc(sizeof(float) * rows * cols + 1);
  for (uint32_t r = 0; r < rows; r++)
    if (all || below(2)) ids[nnr++] = r;
  for (size_t i = 0; i < (size_t)nnr * cols; i++) vals[i] = (float)((int)below(9) - 4);
  NDArrayHandle h = rsp_f32_at(DEV_CPU, dev, rows, cols, nnr, ids, vals);
  free(vals);
  return h;
}

static void step_init(World *w, KVStoreHandle kv, int broadcast) {
  int idx[RC_MAX_KEYS];
  int n = pick_keys(w, 0, 1 + (int)below(3), idx);
  if (n == 0) return;
  NDArrayHandle vals[RC_MAX_KEYS];
  int ids[RC_MAX_KEYS];
  const char *names[RC_MAX_KEYS];
  key_lists(w, n, idx, ids, names);
  for (int i = 0; i < n; i++) {
    const Key *k = &w->keys[idx[i]];
    int dev = (int)below((uint32_t)w->ndev);
    /* a sparse key starts row_sparse too: a row_sparse pull needs a row_sparse stored value.
     * A dist server keeps an init's rows as rows 0.. of the key (InitRowSparseStored): only an
     * init of every row gives a key of its shape there. */
    vals[i] = k->sparse ? random_rows(k, dev, is_dist(w)) : random_value(k, dev, -8, 8);
    if (k->sparse && is_dist(w)) broadcast = 0;
  }
  print_keys(w, broadcast ? "broadcast" : "init", n, idx);
  if (!broadcast) {
    if (w->string_keys) CHECK(MXKVStoreInitEx(kv, (mx_uint)n, names, vals));
    else CHECK(MXKVStoreInit(kv, (mx_uint)n, ids, vals));
  } else {
    /* one output per key, or two for the first key (one per context with one_per_device) */
    NDArrayHandle outs[RC_MAX_KEYS * RC_MAX_DEVS];
    int oids[RC_MAX_KEYS * RC_MAX_DEVS];
    const char *onames[RC_MAX_KEYS * RC_MAX_DEVS];
    int no = 0;
    for (int i = 0; i < n; i++) {
      int copies = i == 0 ? 1 + (int)below(2) : 1;
      if (w->one_per_device) copies = w->ndev;
      for (int c = 0; c < copies; c++) {
        int dev = (int)below((uint32_t)w->ndev);
        outs[no] = random_value(&w->keys[idx[i]], w->one_per_device ? c : dev, 0, 0);
        oids[no] = ids[i];
        onames[no] = names[i];
        no++;
      }
    }
    if (w->string_keys) CHECK(MXKVStoreBroadcastEx(kv, (mx_uint)n, names, (mx_uint)no, onames, vals, outs, 0));
    else CHECK(MXKVStoreBroadcast(kv, (mx_uint)n, ids, (mx_uint)no, oids, vals, outs, 0));
    for (int i = 0; i < no; i++) {
      report("broadcast out", outs[i]);
      CHECK(MXNDArrayFree(outs[i]));
    }
  }
  for (int i = 0; i < n; i++) {
    w->keys[idx[i]].inited = 1;
    CHECK(MXNDArrayFree(vals[i]));
  }
}

/* Shuffles the pairs (keys[i], arrays[i]) of a call's list. */
static void shuffle(int *keys, NDArrayHandle *arrays, int m) {
  for (int i = m - 1; i > 0; i--) {
    int j = (int)below((uint32_t)(i + 1));
    int k = keys[i];
    keys[i] = keys[j];
    keys[j] = k;
    NDArrayHandle h = arrays[i];
    arrays[i] = arrays[j];
    arrays[j] = h;
  }
}

/* A list of pushed values for keys idx[0..n): each key's push_values values, on random
 * contexts, in an order that interleaves the keys (MXNet groups them by key). */
static int push_list(World *w, int n, const int *idx, int *lk, NDArrayHandle *vals) {
  int m = 0;
  for (int i = 0; i < n; i++) {
    Key *k = &w->keys[idx[i]];
    for (uint32_t c = 0; c < k->push_values && m < RC_MAX_LIST; c++) {
      lk[m] = idx[i];
      int dev = (int)below((uint32_t)w->ndev);
      if (w->one_per_device) dev = (int)c;
      vals[m] = k->sparse ? random_rows(k, dev, 0) : random_value(k, dev, -4, 4);
      m++;
    }
  }
  shuffle(lk, vals, m);
  return m;
}

/* 1-3 outputs per key, on random contexts, keys in random order (repeats allowed). */
static int pull_list(World *w, int n, const int *idx, int *lk, NDArrayHandle *outs) {
  int m = 0;
  for (int i = 0; i < n; i++) {
    int copies = 1 + (int)below(3);
    if (w->one_per_device) copies = w->ndev;
    for (int c = 0; c < copies && m < RC_MAX_LIST; c++) {
      lk[m] = idx[i];
      int dev = (int)below((uint32_t)w->ndev);
      outs[m] = random_value(&w->keys[idx[i]], w->one_per_device ? c : dev, 0, 0);
      m++;
    }
  }
  shuffle(lk, outs, m);
  return m;
}

static void step_push_pull(World *w, KVStoreHandle kv, int kind) {
  int idx[RC_MAX_KEYS];
  int n = pick_keys(w, 1, 1 + (int)below(4), idx);
  if (n == 0) return;
  /* the pushed values of a sparse key are row_sparse: not outputs of a plain pull */
  for (int i = 0; i < n && kind == 3; i++)
    if (w->keys[idx[i]].sparse) kind = 2;
  if (is_dist(w)) {
    for (int i = 0; i < n; i++)
      if (w->keys[idx[i]].sparse) kind = 0;
    if (w->compressed) kind %= 2;
    /* dist_async: a push-pull's pull would race the other workers' pushes */
    if (w->barrier_each_step && kind >= 2) kind = 0;
  }
  int lk[RC_MAX_LIST], ok[RC_MAX_LIST], ids[RC_MAX_LIST], oids[RC_MAX_LIST];
  const char *names[RC_MAX_LIST], *onames[RC_MAX_LIST];
  NDArrayHandle vals[RC_MAX_LIST], outs[RC_MAX_LIST];
  int m = 0, mo = 0;
  if (kind != 1) m = push_list(w, n, idx, lk, vals);
  if (kind == 1 || kind == 2) mo = pull_list(w, n, idx, ok, outs);
  for (int i = 0; i < m; i++) {
    ids[i] = w->keys[lk[i]].id;
    names[i] = w->keys[lk[i]].name;
  }
  for (int i = 0; i < mo; i++) {
    oids[i] = w->keys[ok[i]].id;
    onames[i] = w->keys[ok[i]].name;
  }
  int priority = (int)below(5) - 2;
  switch (kind) {
    case 0:
      print_keys(w, "push", m, lk);
      if (w->string_keys) CHECK(MXKVStorePushEx(kv, (mx_uint)m, names, vals, priority));
      else CHECK(MXKVStorePush(kv, (mx_uint)m, ids, vals, priority));
      break;
    case 1:
      print_keys(w, "pull", mo, ok);
      if (w->string_keys) CHECK(MXKVStorePullEx(kv, (mx_uint)mo, onames, outs, priority));
      else CHECK(MXKVStorePull(kv, (mx_uint)mo, oids, outs, priority));
      break;
    case 2:
      print_keys(w, "pushpull", m, lk);
      if (w->string_keys) CHECK(MXKVStorePushPullEx(kv, (mx_uint)m, names, (mx_uint)mo, onames, vals, outs, priority));
      else CHECK(MXKVStorePushPull(kv, (mx_uint)m, ids, (mx_uint)mo, oids, vals, outs, priority));
      break;
    default:
      /* in place: the pushed values are the outputs */
      print_keys(w, "pushpull in place", m, lk);
      if (w->string_keys) CHECK(MXKVStorePushPullEx(kv, (mx_uint)m, names, (mx_uint)m, names, vals, vals, priority));
      else CHECK(MXKVStorePushPull(kv, (mx_uint)m, ids, (mx_uint)m, ids, vals, vals, priority));
      for (int i = 0; i < m; i++) report("in place", vals[i]);
      break;
  }
  for (int i = 0; i < mo; i++) {
    char what[48];
    snprintf(what, sizeof what, "out %d key %s", i, w->keys[ok[i]].name);
    report(what, outs[i]);
    CHECK(MXNDArrayFree(outs[i]));
  }
  for (int i = 0; i < m; i++) CHECK(MXNDArrayFree(vals[i]));
}

/* Sets one of the two updaters (MXNet 1.9 cannot take one away: a NULL one crashes it). */
static void set_updater(const World *w, KVStoreHandle kv) {
  void *flip = below(2) ? "flip" : NULL;
  OUT("step %d updater %s\n", w->step, flip ? "received - stored" : "stored + 2 received");
  if (w->string_keys) CHECK(MXKVStoreSetUpdaterEx(kv, int_updater, str_updater, flip));
  else CHECK(MXKVStoreSetUpdater(kv, int_updater, flip));
}

/* PullRowSparse of the row_sparse keys: 1-3 outputs per key, each with its own random row
 * ids (int64, repeats and any order). */
static void step_row_sparse_pull(World *w, KVStoreHandle kv) {
  int idx[RC_MAX_KEYS], pool = 0;
  for (int i = 0; i < w->nkeys; i++)
    if (w->keys[i].sparse && w->keys[i].inited) idx[pool++] = i;
  if (pool == 0) return;
  int lk[RC_MAX_LIST], ids[RC_MAX_LIST];
  const char *names[RC_MAX_LIST];
  NDArrayHandle outs[RC_MAX_LIST], rows[RC_MAX_LIST];
  int m = 0;
  for (int i = 0; i < pool; i++) {
    if (below(2)) continue;
    const Key *k = &w->keys[idx[i]];
    int copies = is_dist(w) ? 1 : 1 + (int)below(3);
    for (int c = 0; c < copies && m < RC_MAX_LIST; c++) {
      int dev = (int)below((uint32_t)w->ndev);
      lk[m] = idx[i];
      ids[m] = k->id;
      names[m] = k->name;
      outs[m] = rsp_f32_at(DEV_CPU, dev, k->shape[0], k->shape[1], 0, NULL, NULL);
      uint32_t n = 1 + below(6);
      int64_t r[6];
      for (uint32_t j = 0; j < n; j++) r[j] = below(k->shape[0]);
      CHECK(MXNDArrayCreateEx(&n, 1, DEV_CPU, dev, 0, DT_I64, &rows[m]));
      CHECK(MXNDArraySyncCopyFromCPU(rows[m], r, n));
      m++;
    }
  }
  if (m == 0) return;
  print_keys(w, "row_sparse pull", m, lk);
  if (w->string_keys) CHECK(MXKVStorePullRowSparseEx(kv, (mx_uint)m, names, outs, rows, 0));
  else CHECK(MXKVStorePullRowSparse(kv, (mx_uint)m, ids, outs, rows, 0));
  for (int i = 0; i < m; i++) {
    report_rows("rows", outs[i]);
    CHECK(MXNDArrayFree(outs[i]));
    CHECK(MXNDArrayFree(rows[i]));
  }
}

/* Draws a sequence's store, keys and settings from `seed` into *w (printed as its header).
 * `dist_type`: a distributed store of that type (float keys of at most a few thousand
 * elements; the servers' updater, set through a command, in place of the worker's); NULL: a
 * local or device store. */
static void plan_sequence(World *w_out, uint64_t seed, const char *dist_type) {
  rng_state = seed * 0x9E3779B97F4A7C15ULL + 1;
  World w;
  memset(&w, 0, sizeof w);
  w.type = below(2) ? "device" : "local";
  if (rc_store_type) w.type = rc_store_type;
  if (dist_type) w.type = dist_type;
  w.ndev = 1 + (int)below(RC_MAX_DEVS);
  w.string_keys = (int)below(2);
  w.nkeys = 2 + (int)below(RC_MAX_KEYS - 1);
  /* An updater from the start or never: after a push without one, MXNet's stored value of a
   * key pushed with several values is the key's merge buffer itself, so an updater set later
   * gets the same array as `recv` and `local` (docs/differences.md). */
  int updated = (int)below(3) != 0;
  /* a distributed worker's updater is not called: the servers' is, and it is set once
   * (dist_async needs one) */
  int server_updater = (updated && dist_type) || (dist_type && strcmp(dist_type, "dist_async") == 0);
  if (dist_type) updated = 0;
  /* 2-bit compression (threshold 0.5: each pushed integer becomes -0.5, 0 or 0.5 plus a
   * residual) in a third of the stores: float32 dense keys only, as MXNet requires */
  int compressed = below(3) == 0 && !rc_one_per_device;
  static const int dtypes[3] = {DT_F32, DT_F64, DT_I32};
  for (int i = 0; i < w.nkeys; i++) {
    Key *k = &w.keys[i];
    k->dtype = compressed ? DT_F32 : dtypes[below(3)];
    /* MXNet's parameter servers sum floating point types only */
    if (dist_type && k->dtype == DT_I32) k->dtype = DT_F64;
    k->id = (int)below(1000);
    for (int j = 0; j < i; j++)
      if (w.keys[j].id == k->id) { k->id += 1000 + i; }
    snprintf(k->name, sizeof k->name, "k%d", k->id);
    uint32_t size_class = below(8);
    uint32_t len = size_class < 5 ? 1 + below(64) : size_class < 7 ? 1000 + below(20000) : 100000 + below(200000);
    if (dist_type) len = 1 + len % 5000;
    if (below(2) && len >= 4) {
      k->ndim = 2;
      k->shape[0] = 2;
      k->shape[1] = len / 2;
    } else {
      k->ndim = 1;
      k->shape[0] = len;
    }
    /* row_sparse pushes: a float32 matrix of a few rows, in a store without updater */
    k->sparse = !updated && !compressed && k->dtype == DT_F32 && below(3) == 0 && !rc_one_per_device;
    if (k->sparse) {
      k->ndim = 2;
      k->shape[0] = 2 + below(7);
      k->shape[1] = 1 + below(40);
    }
    k->len = (size_t)k->shape[0] * (k->ndim == 2 ? k->shape[1] : 1);
    k->push_values = 1 + below((uint32_t)w.ndev);
    if (rc_one_per_device) k->push_values = (uint32_t)w.ndev;
  }
  OUT("== seed %llu: '%s' store%s%s, %d contexts%s, %s keys:", (unsigned long long)seed, w.type,
         compressed ? " with 2-bit compression" : "", server_updater ? " with the servers' updater" : "",
         w.ndev, rc_one_per_device ? " (a value per context)" : "", w.string_keys ? "string" : "int");
  for (int i = 0; i < w.nkeys; i++) {
    const Key *k = &w.keys[i];
    OUT(" %s(dtype %d, %zu, %u %svalues)", k->name, k->dtype, k->len, k->push_values, k->sparse ? "row_sparse " : "");
  }
  OUT("\n");
  w.updated = updated;
  w.compressed = compressed;
  w.server_updater = server_updater;
  w.one_per_device = rc_one_per_device;
  *w_out = w;
}

/* Sets the store up as *w plans it, before its first call: compression, and a distributed
 * store's server-side updater (sent by rank `rank` 0; every worker then waits at a barrier). */
static void set_up_store(const World *w, KVStoreHandle kv, int rank) {
  if (w->compressed) {
    const char *names[2] = {"type", "threshold"}, *values[2] = {"2bit", "0.5"};
    CHECK(MXKVStoreSetGradientCompression(kv, 2, names, values));
  }
  if (w->server_updater && rank == 0) CHECK(MXKVStoreSendCommmandToServers(kv, 0, "updater 2"));
  if (w->server_updater || (w->compressed && strncmp(w->type, "dist", 4) == 0)) CHECK(MXKVStoreBarrier(kv));
}

/* Makes the calls of the sequence planned in *w on kv. */
static void run_sequence(World *w_in, KVStoreHandle kv, int steps) {
  World w = *w_in;
  w.step = -1;
  if (w.updated) set_updater(&w, kv);
  for (w.step = 0; w.step < steps; w.step++) {
    if (w.before_step) w.before_step(&w, kv);
    uint32_t r = below(100);
    if (r < 12) {
      step_init(&w, kv, below(3) == 0);
    } else if (r < 17 && w.updated) {
      set_updater(&w, kv);
    } else {
      uint32_t kind = below(9);
      if (kind == 8) step_row_sparse_pull(&w, kv);
      else step_push_pull(&w, kv, (int)(kind % 4));
    }
    if (w.wait_each_step || w.barrier_each_step) CHECK(MXNDArrayWaitAll());
    if (w.barrier_each_step) CHECK(MXKVStoreBarrier(kv));
  }
  *w_in = w;
}

#endif
