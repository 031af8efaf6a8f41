// row_sparse kernels. A value is its sorted row ids and those rows, row_len elements each.
// The host computes where each input row lands in the union of rows (out_pos) and whether
// that input is the row's first contributor (first), as src/reduce/sparse.rs sums: the first
// contributor's row is copied, later ones added in input order. Rows within one input are
// unique, so one launch per input has no write conflicts; launches on one stream are ordered.

#define RSP(name, T)                                                                               \
  extern "C" __global__ void rsp_accumulate_##name(T* out, const T* data, const i64* out_pos,      \
                                                   const u8* first, u64 n_rows, u64 row_len) {     \
    GRID_STRIDE(i, n_rows * row_len) {                                                             \
      u64 k = i / row_len, j = i % row_len;                                                        \
      T* d = out + (u64)out_pos[k] * row_len + j;                                                  \
      *d = first[k] ? data[i] : el_add(*d, data[i]);                                              \
    }                                                                                              \
  }
FOR_EACH_SUMMABLE(RSP)

// Row gather (retain) and scatter (densify into a zeroed dense array), by bytes so one
// kernel serves every dtype; ids out of range are skipped as on the CPU.
extern "C" __global__ void rsp_gather(u8* out, const u8* dense, const i64* ids, u64 n_ids, u64 n_rows,
                                      u64 row_bytes) {
  GRID_STRIDE(i, n_ids * row_bytes) {
    u64 k = i / row_bytes, j = i % row_bytes;
    i64 r = ids[k];
    out[i] = (r >= 0 && (u64)r < n_rows) ? dense[(u64)r * row_bytes + j] : (u8)0;
  }
}

extern "C" __global__ void rsp_scatter(u8* dense, const u8* data, const i64* ids, u64 n_ids, u64 n_rows,
                                       u64 row_bytes) {
  GRID_STRIDE(i, n_ids * row_bytes) {
    u64 k = i / row_bytes, j = i % row_bytes;
    i64 r = ids[k];
    if (r >= 0 && (u64)r < n_rows) dense[(u64)r * row_bytes + j] = data[i];
  }
}
