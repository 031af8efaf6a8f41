/* Uneven data on dist_sync (tests/dist_programs.rs): worker r has ROUNDS[r] rounds of work
 * (6, 4, 2 for three workers), then leaves — worker 1 through MXNotifyShutdown with its store
 * alive, the others by freeing it. A worker that has left has *joined*: every later round
 * completes with the remaining workers' pushes, its share zero. Each round every worker
 * pushes (r + 1) * (k + 1) in round k (row_sparse rows: times (row + 1)) and checks the pulled
 * sums against that rule, then meets the others at a Barrier:
 *
 *   dist_join plain       dense keys on one server and split over both, PushPull, a
 *                         row_sparse key (push + PullRowSparse of some rows)
 *   dist_join compressed  2-bit keys (threshold 0.5; each worker pushes 1 and, with its
 *                         residual, sends 0.5 every round)
 *
 * Prints "worker R ok" at the end of each worker's work. */
#include "dist_common.h"

#define MAX_WORKERS 4
#define SMALL 8
#define BIG 1000
#define RSP_ROWS 40
#define RSP_COLS 5

static const int rounds_of[MAX_WORKERS] = {6, 4, 2, 1};
static int num_workers;

/* The sum of the round-k pushes of the workers still working in round k, for a worker
 * pushing (rank + 1) * (k + 1) * scale. */
static float expected(int k, float scale) {
  float sum = 0;
  for (int r = 0; r < num_workers; r++)
    if (rounds_of[r] > k) sum += (float)((r + 1) * (k + 1)) * scale;
  return sum;
}

static void expect_filled(const char *what, NDArrayHandle h, uint32_t n, float want, int rank, int k) {
  float *v = malloc(n * sizeof *v);
  f32_read(h, v, n);
  for (uint32_t i = 0; i < n; i++) {
    if (v[i] != want) {
      fprintf(stderr, "worker %d round %d: %s[%u] = %g, the join rule gives %g\n", rank, k, what, i, v[i], want);
      exit(1);
    }
  }
  free(v);
}

/* Every row of the row_sparse key, row r filled with value * (r + 1). */
static NDArrayHandle rsp_all_rows(float value) {
  float vals[RSP_ROWS * RSP_COLS];
  int64_t all[RSP_ROWS];
  for (int r = 0; r < RSP_ROWS; r++) {
    all[r] = r;
    for (int c = 0; c < RSP_COLS; c++) vals[r * RSP_COLS + c] = value * (float)(r + 1);
  }
  return rsp_f32(RSP_ROWS, RSP_COLS, RSP_ROWS, all, vals);
}

/* PullRowSparse of rows {0, 19, 20, 39} (both servers' parts); checks row r = want * (r + 1). */
static void check_rows(KVStoreHandle kv, float want, int rank, int k) {
  int key = 7;
  int64_t rows[4] = {0, 19, 20, 39};
  uint32_t n = 4;
  NDArrayHandle ids, out = rsp_f32(RSP_ROWS, RSP_COLS, 0, NULL, NULL), data;
  CHECK(MXNDArrayCreateEx(&n, 1, DEV_CPU, 0, 0, DT_I64, &ids));
  CHECK(MXNDArraySyncCopyFromCPU(ids, rows, 4));
  CHECK(MXKVStorePullRowSparse(kv, 1, &key, &out, &ids, 0));
  CHECK(MXNDArrayGetDataNDArray(out, &data));
  float v[4 * RSP_COLS];
  f32_read(data, v, 4 * RSP_COLS);
  for (int i = 0; i < 4; i++) {
    float w = want * (float)(rows[i] + 1);
    if (v[i * RSP_COLS] != w || v[i * RSP_COLS + RSP_COLS - 1] != w) {
      fprintf(stderr, "worker %d round %d: row_sparse row %lld = %g, the join rule gives %g\n", rank, k, (long long)rows[i], v[i * RSP_COLS], w);
      exit(1);
    }
  }
  CHECK(MXNDArrayFree(ids));
  CHECK(MXNDArrayFree(out));
  CHECK(MXNDArrayFree(data));
}

static void plain_round(KVStoreHandle kv, int rank, int k) {
  float mine = (float)((rank + 1) * (k + 1));
  int keys[2] = {3, 9}, pp = 11, key7 = 7;
  NDArrayHandle vals[2] = {f32_filled(SMALL, mine, 0), f32_filled(BIG, mine, 0)};
  NDArrayHandle outs[2] = {f32_filled(SMALL, 0, 0), f32_filled(BIG, 0, 0)};
  CHECK(MXKVStorePush(kv, 2, keys, vals, 0));
  CHECK(MXKVStorePull(kv, 2, keys, outs, 0));
  expect_filled("small key 3", outs[0], SMALL, expected(k, 1), rank, k);
  expect_filled("big key 9", outs[1], BIG, expected(k, 1), rank, k);
  NDArrayHandle ppv = f32_filled(SMALL, mine * 2, 0), ppo = f32_filled(SMALL, 0, 0);
  CHECK(MXKVStorePushPull(kv, 1, &pp, 1, &pp, &ppv, &ppo, 0));
  expect_filled("push-pull key 11", ppo, SMALL, expected(k, 2), rank, k);
  NDArrayHandle rows = rsp_all_rows(mine);
  CHECK(MXKVStorePush(kv, 1, &key7, &rows, 0));
  check_rows(kv, expected(k, 1), rank, k);
  for (int i = 0; i < 2; i++) {
    CHECK(MXNDArrayFree(vals[i]));
    CHECK(MXNDArrayFree(outs[i]));
  }
  CHECK(MXNDArrayFree(ppv));
  CHECK(MXNDArrayFree(ppo));
  CHECK(MXNDArrayFree(rows));
}

static void plain_init(KVStoreHandle kv) {
  int keys[3] = {3, 9, 11}, key7 = 7;
  NDArrayHandle init[3] = {f32_filled(SMALL, 0, 0), f32_filled(BIG, 0, 0), f32_filled(SMALL, 0, 0)};
  CHECK(MXKVStoreInit(kv, 3, keys, init));
  NDArrayHandle rows = rsp_all_rows(0);
  CHECK(MXKVStoreInit(kv, 1, &key7, &rows));
  for (int i = 0; i < 3; i++) CHECK(MXNDArrayFree(init[i]));
  CHECK(MXNDArrayFree(rows));
}

static void compressed_round(KVStoreHandle kv, int rank, int k) {
  int keys[2] = {3, 9};
  NDArrayHandle vals[2] = {f32_filled(SMALL, 1, 0), f32_filled(BIG, 1, 0)};
  NDArrayHandle outs[2] = {f32_filled(SMALL, 0, 0), f32_filled(BIG, 0, 0)};
  CHECK(MXKVStorePush(kv, 2, keys, vals, 0));
  CHECK(MXKVStorePull(kv, 2, keys, outs, 0));
  float active = 0;
  for (int r = 0; r < num_workers; r++) active += rounds_of[r] > k;
  expect_filled("compressed key 3", outs[0], SMALL, 0.5f * active, rank, k);
  expect_filled("compressed key 9", outs[1], BIG, 0.5f * active, rank, k);
  for (int i = 0; i < 2; i++) {
    CHECK(MXNDArrayFree(vals[i]));
    CHECK(MXNDArrayFree(outs[i]));
  }
}

int main(int argc, char **argv) {
  const char *job = argc > 1 ? argv[1] : "plain";
  (void)worker_header; /* dist_common.h's differential report: not used here */
  if (!dist_is_worker()) return run_server_role("dist_sync");
  KVStoreHandle kv = dist_create("dist_sync");
  int rank, dead;
  CHECK(MXKVStoreGetRank(kv, &rank));
  CHECK(MXKVStoreGetGroupSize(kv, &num_workers));
  EXPECT(num_workers <= MAX_WORKERS);
  int compressed = strcmp(job, "compressed") == 0;
  if (compressed) {
    const char *ck[2] = {"type", "threshold"}, *cv[2] = {"2bit", "0.5"};
    CHECK(MXKVStoreSetGradientCompression(kv, 2, ck, cv));
    int keys[2] = {3, 9};
    NDArrayHandle init[2] = {f32_filled(SMALL, 0, 0), f32_filled(BIG, 0, 0)};
    CHECK(MXKVStoreInit(kv, 2, keys, init));
  } else {
    plain_init(kv);
  }
  for (int k = 0; k < rounds_of[rank]; k++) {
    if (compressed) compressed_round(kv, rank, k);
    else plain_round(kv, rank, k);
    CHECK(MXKVStoreBarrier(kv));
    /* Joined workers are not dead nodes, and the group keeps its size. */
    CHECK(MXKVStoreGetNumDeadNode(kv, 0, &dead, 60));
    EXPECT(dead == 0);
    int size;
    CHECK(MXKVStoreGetGroupSize(kv, &size));
    EXPECT(size == num_workers);
  }
  printf("worker %d ok\n", rank);
  fflush(stdout);
  if (rank == 1) CHECK(MXNotifyShutdown());
  else CHECK(MXKVStoreFree(kv));
  return 0;
}
