/* Differential test of the store: every observable of MXNet's local and device stores is
 * printed in a canonical form; the runner compares the output of libkvstore.so with the
 * reference libmxnet.so's byte for byte. Only behaviour MXNet defines is exercised here (the
 * cases where libkvstore deliberately differs are in bad_input.c). */
#include "common.h"

#define N 4

static const char *STORE_TYPES[] = {"local", "device"};

static void show(const char *label, NDArrayHandle h) { f32_print(label, h, N); }

/* --- updaters that log what they receive and apply stored += 2 * recv ---------------- */

static void int_updater(int key, NDArrayHandle recv, NDArrayHandle local, void *user) {
  int dev_type = -1, dev_id = -1;
  CHECK(MXNDArrayGetContext(local, &dev_type, &dev_id));
  float r0, l0;
  update_add_scaled(recv, local, N, 2, &r0, &l0);
  printf("  %s updater: key=%d recv=%g local=%g local_ctx=(%d,%d)\n", (const char *)user, key, r0, l0, dev_type, dev_id);
}

static void str_updater(const char *key, NDArrayHandle recv, NDArrayHandle local, void *user) {
  float r0, l0;
  update_add_scaled(recv, local, N, 2, &r0, &l0);
  printf("  %s str updater: key=%s recv=%g local=%g\n", (const char *)user, key, r0, l0);
}

/* --- cases ------------------------------------------------------------------------------ */

static void type_names(void) {
  const char *names[] = {"local", "device", "Local_AllReduce_CPU", "local_update_cpu", "local_allreduce_device",
                         "row_sparse", "foo", ""};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    KVStoreHandle kv;
    CHECK(MXKVStoreCreate(names[i], &kv));
    const char *type = NULL;
    CHECK(MXKVStoreGetType(kv, &type));
    int rank = -1, size = -1, dead = -1;
    CHECK(MXKVStoreGetRank(kv, &rank));
    CHECK(MXKVStoreGetGroupSize(kv, &size));
    CHECK(MXKVStoreGetNumDeadNode(kv, 4, &dead, 60));
    printf("create '%s': type='%s' rank=%d group=%d dead=%d barrier=%d runserver=%d command=%d\n", names[i], type,
           rank, size, dead, MXKVStoreBarrier(kv), MXKVStoreRunServer(kv, NULL, NULL),
           MXKVStoreSendCommmandToServers(kv, 0, "body"));
    CHECK(MXKVStoreFree(kv));
  }
  int w = -1, s = -1, c = -1, v = -1;
  CHECK(MXKVStoreIsWorkerNode(&w));
  CHECK(MXKVStoreIsServerNode(&s));
  CHECK(MXKVStoreIsSchedulerNode(&c));
  CHECK(MXGetVersion(&v));
  printf("worker=%d server=%d scheduler=%d version=%d\n", w, s, c, v);
}

/* Init/push/pull with int keys, repeated keys in one call, several devices. */
static void int_keys(const char *type) {
  printf("== int keys on '%s'\n", type);
  KVStoreHandle kv;
  CHECK(MXKVStoreCreate(type, &kv));
  int keys[4] = {11, 3, 7, 5};
  NDArrayHandle init[4];
  for (int i = 0; i < 4; i++) init[i] = f32_filled(N, (float)(i + 1) * 0.5f, 0);
  CHECK(MXKVStoreInit(kv, 4, keys, init));
  CHECK(MXNDArraySyncCopyFromCPU(init[0], (float[]){9, 9, 9, 9}, N)); /* init deep-copies */
  NDArrayHandle out[4];
  for (int i = 0; i < 4; i++) out[i] = f32_filled(N, -1, i);
  CHECK(MXKVStorePull(kv, 4, keys, out, 0));
  for (int i = 0; i < 4; i++) {
    char label[32];
    snprintf(label, sizeof label, "init key %d", keys[i]);
    show(label, out[i]);
  }
  for (int devices = 1; devices <= 4; devices++) {
    /* MXNet needs a constant number of values per key (it crashes otherwise), so each device
     * count uses its own keys; each key gets `devices` values, interleaved, unsorted, twice */
    int dkeys[4], pkeys[16];
    NDArrayHandle pvals[16];
    for (int k = 0; k < 4; k++) dkeys[k] = keys[k] + 100 * devices;
    CHECK(MXKVStoreInit(kv, 4, dkeys, init));
    int n = 0;
    for (int d = 0; d < devices; d++)
      for (int k = 0; k < 4; k++) {
        pkeys[n] = dkeys[k];
        pvals[n] = f32_filled(N, (float)(10 * (k + 1) + d) + 0.25f, d);
        n++;
      }
    for (int round = 0; round < 2; round++) {
      CHECK(MXKVStorePush(kv, (uint32_t)n, pkeys, pvals, 0));
      CHECK(MXKVStorePull(kv, 4, dkeys, out, 0));
      for (int k = 0; k < 4; k++) {
        char label[48];
        snprintf(label, sizeof label, "devices=%d round=%d key %d", devices, round, dkeys[k]);
        show(label, out[k]);
      }
    }
    for (int i = 0; i < n; i++) CHECK(MXNDArrayFree(pvals[i]));
  }
  /* one key pulled into several outputs on several devices, and the same array pushed 4 times */
  int same[4] = {7, 7, 7, 7};
  NDArrayHandle one = f32_filled(N, 1, 0);
  NDArrayHandle four_same[4] = {one, one, one, one};
  CHECK(MXKVStorePush(kv, 4, same, four_same, 0));
  CHECK(MXKVStorePull(kv, 4, same, out, 0));
  for (int i = 0; i < 4; i++) show("same array pushed 4 times, output", out[i]);
  /* PullWithSparse with dense outputs, either flag */
  CHECK(MXKVStorePullWithSparse(kv, 1, &keys[1], &out[0], 0, true));
  show("pull with sparse (ignore) key 3", out[0]);
  CHECK(MXKVStorePullWithSparse(kv, 1, &keys[2], &out[1], 0, false));
  show("pull with sparse (keep) key 7", out[1]);
  /* a float64 output receives the float32 value cast */
  NDArrayHandle f64;
  uint32_t n4 = N;
  CHECK(MXNDArrayCreateEx(&n4, 1, DEV_CPU, 0, 0, DT_F64, &f64));
  CHECK(MXKVStorePull(kv, 1, &keys[0], &f64, 0));
  double d[N];
  CHECK(MXNDArraySyncCopyToCPU(f64, d, N));
  printf("pull into float64 output: %g %g %g %g\n", d[0], d[1], d[2], d[3]);
  printf("mixed key types: initex=%d pushex=%d pullex=%d\n", MXKVStoreInitEx(kv, 1, (const char *[]){"x"}, &one) == 0,
         MXKVStorePushEx(kv, 1, (const char *[]){"x"}, &one, 0) == 0,
         MXKVStorePullEx(kv, 1, (const char *[]){"x"}, &one, 0) == 0);
  CHECK(MXNDArrayFree(f64));
  CHECK(MXNDArrayFree(one));
  for (int i = 0; i < 4; i++) CHECK(MXNDArrayFree(init[i]) || MXNDArrayFree(out[i]));
  CHECK(MXKVStoreFree(kv));
}

/* The same with string keys: ids follow init order, not the strings. */
static void str_keys(const char *type) {
  printf("== string keys on '%s'\n", type);
  KVStoreHandle kv;
  CHECK(MXKVStoreCreate(type, &kv));
  const char *keys[3] = {"b", "a", "10"};
  NDArrayHandle init[3];
  for (int i = 0; i < 3; i++) init[i] = f32_filled(N, (float)i, 0);
  CHECK(MXKVStoreInitEx(kv, 3, keys, init));
  const char *pkeys[6] = {"a", "10", "b", "a", "10", "b"};
  NDArrayHandle pvals[6];
  for (int i = 0; i < 6; i++) pvals[i] = f32_filled(N, (float)(i + 1), i % 4);
  CHECK(MXKVStorePushEx(kv, 6, pkeys, pvals, 0));
  NDArrayHandle out[3];
  for (int i = 0; i < 3; i++) out[i] = f32_filled(N, -1, 0);
  CHECK(MXKVStorePullEx(kv, 3, keys, out, 0));
  for (int i = 0; i < 3; i++) {
    char label[32];
    snprintf(label, sizeof label, "key '%s'", keys[i]);
    show(label, out[i]);
  }
  CHECK(MXKVStorePullWithSparseEx(kv, 1, &keys[2], &out[0], 0, true));
  show("pull with sparse key '10'", out[0]);
  int three = 3;
  printf("mixed key types: init=%d push=%d pull=%d\n", MXKVStoreInit(kv, 1, &three, &out[0]) == 0,
         MXKVStorePush(kv, 1, &three, &out[0], 0) == 0, MXKVStorePull(kv, 1, &three, &out[0], 0) == 0);
  for (int i = 0; i < 6; i++) CHECK(MXNDArrayFree(pvals[i]));
  for (int i = 0; i < 3; i++) CHECK(MXNDArrayFree(init[i]) || MXNDArrayFree(out[i]));
  CHECK(MXKVStoreFree(kv));
}

/* Updaters: call order, keys received, the stored value's context. */
static void updaters(const char *type) {
  printf("== updaters on '%s'\n", type);
  KVStoreHandle kv;
  CHECK(MXKVStoreCreate(type, &kv));
  /* set before init, as Scala's KVStoreSuite does */
  CHECK(MXKVStoreSetUpdater(kv, int_updater, "int"));
  int keys[3] = {9, 2, 5};
  NDArrayHandle init[3];
  for (int i = 0; i < 3; i++) init[i] = f32_filled(N, 4, 0);
  CHECK(MXKVStoreInit(kv, 3, keys, init));
  int pkeys[7] = {5, 9, 2, 9, 5, 5, 9};
  NDArrayHandle pvals[7];
  for (int i = 0; i < 7; i++) pvals[i] = f32_filled(N, 1, i % 4);
  CHECK(MXKVStorePush(kv, 7, pkeys, pvals, 0));
  NDArrayHandle out = f32_filled(N, 0, 0);
  for (int i = 0; i < 3; i++) {
    CHECK(MXKVStorePull(kv, 1, &keys[i], &out, 0));
    char label[32];
    snprintf(label, sizeof label, "after update key %d", keys[i]);
    show(label, out);
  }
  CHECK(MXKVStoreFree(kv));

  /* a string store with only the int updater receives internal ids (init order) */
  CHECK(MXKVStoreCreate(type, &kv));
  CHECK(MXKVStoreSetUpdater(kv, int_updater, "int-on-strings"));
  const char *skeys[3] = {"w", "b", "a"};
  CHECK(MXKVStoreInitEx(kv, 3, skeys, init));
  const char *spkeys[4] = {"a", "w", "b", "a"};
  CHECK(MXKVStorePushEx(kv, 4, spkeys, pvals, 0));
  /* with SetUpdaterEx the string updater receives the strings */
  CHECK(MXKVStoreSetUpdaterEx(kv, int_updater, str_updater, "ex"));
  CHECK(MXKVStorePushEx(kv, 4, spkeys, pvals, 0));
  CHECK(MXKVStorePullEx(kv, 1, &skeys[2], &out, 0));
  show("string store key 'a'", out);
  CHECK(MXKVStoreFree(kv));

  /* an int store with SetUpdaterEx still calls the int updater */
  CHECK(MXKVStoreCreate(type, &kv));
  CHECK(MXKVStoreSetUpdaterEx(kv, int_updater, str_updater, "ex-int"));
  CHECK(MXKVStoreInit(kv, 1, &keys[0], init));
  CHECK(MXKVStorePush(kv, 2, (int[]){9, 9}, pvals, 0));
  CHECK(MXKVStorePull(kv, 1, &keys[0], &out, 0));
  show("int store with SetUpdaterEx key 9", out);
  CHECK(MXKVStoreFree(kv));
  for (int i = 0; i < 7; i++) CHECK(MXNDArrayFree(pvals[i]));
  for (int i = 0; i < 3; i++) CHECK(MXNDArrayFree(init[i]));
  CHECK(MXNDArrayFree(out));
}

/* PushPull (also in place) and Broadcast, as in test_kvstore_custom.py. */
static void pushpull_broadcast(const char *type) {
  printf("== pushpull and broadcast on '%s'\n", type);
  KVStoreHandle kv;
  CHECK(MXKVStoreCreate(type, &kv));
  NDArrayHandle ones = f32_filled(N, 1, 0), o = f32_filled(N, 0, 0);
  int k3 = 3, k6 = 6;
  CHECK(MXKVStoreBroadcast(kv, 1, &k3, 1, &k3, &ones, &o, 0));
  show("broadcast 3", o);
  NDArrayHandle outs3[3] = {f32_filled(N, 0, 0), f32_filled(N, 0, 1), f32_filled(N, 0, 2)};
  CHECK(MXKVStoreBroadcast(kv, 1, &k6, 3, (int[]){6, 6, 6}, &ones, outs3, 0));
  for (int i = 0; i < 3; i++) show("broadcast 6 to three outputs", outs3[i]);
  printf("broadcast existing key: ok=%d\n", MXKVStoreBroadcast(kv, 1, &k3, 1, &k3, &ones, &o, 0) == 0);
  /* pushpull: 4 arrays of ones from cpu(0..3) into 4 outputs */
  NDArrayHandle four[4], outs[4];
  for (int d = 0; d < 4; d++) {
    four[d] = f32_filled(N, 1, d);
    outs[d] = f32_filled(N, 0, d);
  }
  int k3x4[4] = {3, 3, 3, 3};
  CHECK(MXKVStorePushPull(kv, 4, k3x4, 4, k3x4, four, outs, 0));
  for (int d = 0; d < 4; d++) show("pushpull outputs", outs[d]);
  CHECK(MXKVStorePushPull(kv, 4, k3x4, 4, k3x4, four, four, 0));
  for (int d = 0; d < 4; d++) show("pushpull in place", four[d]);
  /* three keys, the same 4 arrays of 2s, pulled in place: all pushes read before pulls write */
  int keys[3] = {20, 21, 22};
  NDArrayHandle zeros3[3] = {f32_filled(N, 0, 0), f32_filled(N, 0, 0), f32_filled(N, 0, 0)};
  CHECK(MXKVStoreInit(kv, 3, keys, zeros3));
  NDArrayHandle twos[4];
  for (int d = 0; d < 4; d++) twos[d] = f32_filled(N, 2, d);
  int vkeys[12];
  NDArrayHandle vals[12];
  for (int i = 0; i < 12; i++) {
    vkeys[i] = keys[i / 4];
    vals[i] = twos[i % 4];
  }
  CHECK(MXKVStorePushPull(kv, 12, vkeys, 12, vkeys, vals, vals, 0));
  for (int d = 0; d < 4; d++) show("three keys in place", twos[d]);
  /* string variants */
  CHECK(MXKVStoreFree(kv));
  CHECK(MXKVStoreCreate(type, &kv));
  const char *a = "a", *aa = "aa";
  CHECK(MXKVStoreBroadcastEx(kv, 1, &a, 1, &a, &ones, &o, 0));
  show("broadcast 'a'", o);
  CHECK(MXKVStoreBroadcastEx(kv, 1, &aa, 3, (const char *[]){"aa", "a", "aa"}, &ones, outs3, 0));
  show("broadcast 'aa' then pull 'a'", outs3[1]);
  const char *a4[4] = {"a", "a", "a", "a"};
  CHECK(MXKVStorePushPullEx(kv, 4, a4, 4, a4, outs, outs, 0));
  for (int d = 0; d < 4; d++) show("pushpull 'a' in place", outs[d]);
  CHECK(MXKVStoreFree(kv));
  NDArrayHandle all[] = {ones, o, outs3[0], outs3[1], outs3[2], zeros3[0], zeros3[1], zeros3[2]};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) CHECK(MXNDArrayFree(all[i]));
  for (int d = 0; d < 4; d++) CHECK(MXNDArrayFree(four[d]) || MXNDArrayFree(outs[d]) || MXNDArrayFree(twos[d]));
}

/* The same long lists of handles call after call (libkvstore keeps such a list's arrays
 * decoded), keys in descending order, with the values rewritten between calls and the same
 * list pushed and pulled in place: each call sees the arrays as they are then. */
static void repeated_lists(const char *type) {
  printf("== repeated lists of 96 arrays on '%s'\n", type);
  enum { K = 24, M = K * 4 };
  KVStoreHandle kv;
  CHECK(MXKVStoreCreate(type, &kv));
  int keys[K], vkeys[M];
  NDArrayHandle inits[K], vals[M], outs[M];
  for (int k = 0; k < K; k++) keys[k] = 100 + k, inits[k] = f32_filled(N, 0, 0);
  CHECK(MXKVStoreInit(kv, K, keys, inits));
  for (int i = 0; i < M; i++) {
    vkeys[i] = 100 + K - 1 - i / 4;
    vals[i] = f32_filled(N, (float)(i % 7), i % 4);
    outs[i] = f32_filled(N, -1, i % 4);
  }
  for (int round = 0; round < 3; round++) {
    CHECK(MXKVStorePush(kv, M, vkeys, vals, 0));
    CHECK(MXKVStorePull(kv, M, vkeys, outs, 0));
    printf("round %d\n", round);
    show("first key, first output", outs[0]);
    show("last key, last output", outs[M - 1]);
    float v[N];
    for (int j = 0; j < N; j++) v[j] = (float)(round + 1) * 0.5f + (float)j;
    CHECK(MXNDArraySyncCopyFromCPU(vals[5], v, N));
  }
  CHECK(MXKVStorePushPull(kv, M, vkeys, M, vkeys, vals, vals, 0));
  show("pushpull in place, first", vals[0]);
  show("pushpull in place, rewritten value's key", vals[5]);
  for (int i = 0; i < M; i++) {
    CHECK(MXNDArrayFree(vals[i]));
    CHECK(MXNDArrayFree(outs[i]));
  }
  for (int k = 0; k < K; k++) CHECK(MXNDArrayFree(inits[k]));
  CHECK(MXKVStoreFree(kv));
}

int main(void) {
  type_names();
  for (int t = 0; t < 2; t++) {
    int_keys(STORE_TYPES[t]);
    str_keys(STORE_TYPES[t]);
    updaters(STORE_TYPES[t]);
    pushpull_broadcast(STORE_TYPES[t]);
    repeated_lists(STORE_TYPES[t]);
  }
  CHECK(MXNDArrayWaitAll());
  printf("done\n");
  return 0;
}
