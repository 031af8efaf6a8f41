/* Bit-reproducible dist_sync (tests/dist_programs.rs): every worker pushes values of mixed
 * magnitudes and signs, whose float sums depend on the order they are added in, for ROUNDS
 * rounds, and pulls after each round; it prints a hash of everything it pulled, per key. Run
 * twice, with KVSTORE_DIST_TEST_DELAY_US reversing the order the pushes reach the servers,
 * the hashes must be the same (and the same on every worker); with
 * KVSTORE_DIST_SUM_ORDER=arrival they differ.
 *
 *   dist_reproducible plain       dense float32 (small: one server; big: split over the
 *                                 servers), float16 with multi-precision float32 masters,
 *                                 row_sparse; first without a server updater (each pull is
 *                                 the round's sum), then with one (server state accumulates)
 *   dist_reproducible compressed  2-bit compressed dense float32 keys
 *
 * Pulls read the servers' stored values, so the hashes cover the servers' state. */
#include "dist_common.h"
#include <math.h>

#define ROUNDS 4
#define SMALL 8
#define BIG 1000
#define HALF 300
#define RSP_ROWS 40
#define RSP_COLS 5

static uint64_t lcg_state;

static uint32_t next_random(void) {
  lcg_state = lcg_state * 6364136223846793005ULL + 1442695040888963407ULL;
  return (uint32_t)(lcg_state >> 33);
}

static void seed(int rank, int round, int key) {
  lcg_state = (uint64_t)(rank + 1) * 1000003u + (uint64_t)round * 7919u + (uint64_t)key * 104729u;
  for (int i = 0; i < 4; i++) next_random();
}

/* ±(1 + u) * 2^e, e in [-10, 10]: sums of such values round differently by association. */
static float mixed_f32(void) {
  uint32_t r = next_random();
  float m = 1.0f + (float)(r & 0xffff) / 65536.0f;
  int e = (int)((r >> 16) % 21) - 10;
  float v = ldexpf(m, e);
  return (r >> 31) ? -v : v;
}

/* Element i of worker `rank`'s float16 push: workers 0 and 1 push +L and -L (L of 2^9 ..
 * 2^10, the same on both), the others small values (2^-10 .. 2^-3): summed in float32 as
 * ((L - L) + s) the small value survives whole, as ((s - L) + L) it is rounded to L's
 * precision, a difference the float16 pull still shows. */
static uint16_t mixed_f16(int rank, int round, int i) {
  uint32_t x = (uint32_t)i * 2654435761u ^ (uint32_t)round * 40503u;
  uint16_t large = (uint16_t)(((24 + (x >> 10) % 2) << 10) | (x & 0x3ff));
  if (rank == 0) return large;
  if (rank == 1) return (uint16_t)(large | 0x8000);
  uint32_t r = next_random();
  return (uint16_t)(((r >> 31) << 15) | ((5 + (r >> 10) % 8) << 10) | (r & 0x3ff));
}

/* FNV-1a over every pulled byte of a key. */
static uint64_t hashes[4] = {14695981039346656037ULL, 14695981039346656037ULL, 14695981039346656037ULL, 14695981039346656037ULL};

static void absorb(int slot, const void *bytes, size_t n) {
  const unsigned char *b = bytes;
  for (size_t i = 0; i < n; i++) hashes[slot] = (hashes[slot] ^ b[i]) * 1099511628211ULL;
}

static NDArrayHandle dense(uint32_t n, int dt) {
  NDArrayHandle h;
  CHECK(MXNDArrayCreateEx(&n, 1, DEV_CPU, 0, 0, dt, &h));
  return h;
}

static NDArrayHandle rsp(int nnr, const int64_t *ids, const float *vals) {
  return rsp_f32(RSP_ROWS, RSP_COLS, nnr, ids, vals);
}

static void fill_f32(NDArrayHandle h, uint32_t n) {
  float *v = malloc(n * sizeof *v);
  for (uint32_t i = 0; i < n; i++) v[i] = mixed_f32();
  CHECK(MXNDArraySyncCopyFromCPU(h, v, n));
  free(v);
}

static void absorb_dense(int slot, NDArrayHandle h, uint32_t n, size_t esz) {
  unsigned char *b = malloc(n * esz);
  CHECK(MXNDArraySyncCopyToCPU(h, b, n));
  absorb(slot, b, n * esz);
  free(b);
}

/* One round of the plain job: push every key, then pull every key into the hashes. */
static void plain_round(KVStoreHandle kv, int rank, int round) {
  int keys[3] = {3, 9, 5};
  NDArrayHandle vals[3] = {dense(SMALL, DT_F32), dense(BIG, DT_F32), dense(HALF, DT_F16)};
  seed(rank, round, 3);
  fill_f32(vals[0], SMALL);
  seed(rank, round, 9);
  fill_f32(vals[1], BIG);
  seed(rank, round, 5);
  uint16_t h[HALF];
  for (int i = 0; i < HALF; i++) h[i] = mixed_f16(rank, round, i);
  CHECK(MXNDArraySyncCopyFromCPU(vals[2], h, HALF));
  /* row_sparse: four rows in five, a different subset per rank and round; no row is left
   * out by two of the first three ranks, so many rows get every rank's push */
  int64_t ids[RSP_ROWS];
  float rows[RSP_ROWS * RSP_COLS];
  int nnr = 0;
  seed(rank, round, 7);
  for (int r = 0; r < RSP_ROWS; r++) {
    if ((r * 7 + rank * 3 + round) % 5 == 0) continue;
    ids[nnr] = r;
    for (int c = 0; c < RSP_COLS; c++) rows[nnr * RSP_COLS + c] = mixed_f32();
    nnr++;
  }
  NDArrayHandle sparse = rsp(nnr, ids, rows);
  int key7 = 7;
  CHECK(MXKVStorePush(kv, 3, keys, vals, 0));
  CHECK(MXKVStorePush(kv, 1, &key7, &sparse, 0));
  NDArrayHandle outs[3] = {dense(SMALL, DT_F32), dense(BIG, DT_F32), dense(HALF, DT_F16)};
  CHECK(MXKVStorePull(kv, 3, keys, outs, 0));
  absorb_dense(0, outs[0], SMALL, 4);
  absorb_dense(1, outs[1], BIG, 4);
  absorb_dense(2, outs[2], HALF, 2);
  int64_t all[RSP_ROWS];
  for (int r = 0; r < RSP_ROWS; r++) all[r] = r;
  NDArrayHandle want = dense(RSP_ROWS, DT_I64), got = rsp(0, NULL, NULL), data;
  CHECK(MXNDArraySyncCopyFromCPU(want, all, RSP_ROWS));
  CHECK(MXKVStorePullRowSparse(kv, 1, &key7, &got, &want, 0));
  CHECK(MXNDArrayGetDataNDArray(got, &data));
  absorb_dense(3, data, RSP_ROWS * RSP_COLS, 4);
  for (int i = 0; i < 3; i++) {
    CHECK(MXNDArrayFree(vals[i]));
    CHECK(MXNDArrayFree(outs[i]));
  }
  CHECK(MXNDArrayFree(sparse));
  CHECK(MXNDArrayFree(want));
  CHECK(MXNDArrayFree(got));
  CHECK(MXNDArrayFree(data));
}

static void plain_job(KVStoreHandle kv, int rank) {
  if (rank == 0) CHECK(MXKVStoreSendCommmandToServers(kv, 1, "")); /* multi-precision */
  int keys[3] = {3, 9, 5};
  NDArrayHandle init[3] = {f32_filled(SMALL, 1, 0), f32_filled(BIG, 1, 0), dense(HALF, DT_F16)};
  uint16_t one[HALF];
  for (int i = 0; i < HALF; i++) one[i] = 0x3c00;
  CHECK(MXNDArraySyncCopyFromCPU(init[2], one, HALF));
  CHECK(MXKVStoreInit(kv, 3, keys, init));
  int64_t all[RSP_ROWS];
  float ones[RSP_ROWS * RSP_COLS];
  for (int r = 0; r < RSP_ROWS; r++) all[r] = r;
  for (int i = 0; i < RSP_ROWS * RSP_COLS; i++) ones[i] = 1;
  NDArrayHandle rinit = rsp(RSP_ROWS, all, ones);
  int key7 = 7;
  CHECK(MXKVStoreInit(kv, 1, &key7, &rinit));
  for (int round = 0; round < ROUNDS; round++) plain_round(kv, rank, round);
  /* Then with a server updater (stored += sum): the servers' state accumulates. */
  CHECK(MXKVStoreBarrier(kv));
  if (rank == 0) CHECK(MXKVStoreSendCommmandToServers(kv, 0, "updater 1"));
  CHECK(MXKVStoreBarrier(kv));
  for (int round = ROUNDS; round < 2 * ROUNDS; round++) plain_round(kv, rank, round);
  const char *names[4] = {"float32 small", "float32 big", "float16 multi-precision", "row_sparse"};
  for (int i = 0; i < 4; i++) printf("hash %s %016llx\n", names[i], (unsigned long long)hashes[i]);
  for (int i = 0; i < 3; i++) CHECK(MXNDArrayFree(init[i]));
  CHECK(MXNDArrayFree(rinit));
}

static void compressed_job(KVStoreHandle kv, int rank) {
  const char *ck[2] = {"type", "threshold"}, *cv[2] = {"2bit", "0.1"};
  CHECK(MXKVStoreSetGradientCompression(kv, 2, ck, cv));
  int keys[2] = {3, 9};
  uint32_t sizes[2] = {SMALL, BIG};
  NDArrayHandle init[2] = {f32_filled(SMALL, 1, 0), f32_filled(BIG, 1, 0)};
  CHECK(MXKVStoreInit(kv, 2, keys, init));
  for (int round = 0; round < 2 * ROUNDS; round++) {
    for (int k = 0; k < 2; k++) {
      NDArrayHandle v = dense(sizes[k], DT_F32), out = dense(sizes[k], DT_F32);
      seed(rank, round, keys[k]);
      fill_f32(v, sizes[k]);
      CHECK(MXKVStorePush(kv, 1, &keys[k], &v, 0));
      CHECK(MXKVStorePull(kv, 1, &keys[k], &out, 0));
      absorb_dense(k, out, sizes[k], 4);
      CHECK(MXNDArrayFree(v));
      CHECK(MXNDArrayFree(out));
    }
  }
  printf("hash compressed small %016llx\n", (unsigned long long)hashes[0]);
  printf("hash compressed big %016llx\n", (unsigned long long)hashes[1]);
  for (int i = 0; i < 2; i++) CHECK(MXNDArrayFree(init[i]));
}

int main(int argc, char **argv) {
  (void)worker_header; /* dist_common.h's differential report: not used here */
  const char *job = argc > 1 ? argv[1] : "plain";
  if (!dist_is_worker()) return run_server_role("dist_sync");
  KVStoreHandle kv = dist_create("dist_sync");
  int rank;
  CHECK(MXKVStoreGetRank(kv, &rank));
  if (strcmp(job, "compressed") == 0) compressed_job(kv, rank);
  else plain_job(kv, rank);
  CHECK(MXKVStoreFree(kv));
  printf("worker %d ok\n", rank);
  return 0;
}
