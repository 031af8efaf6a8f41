// Small keys, fused: one launch per device per call sums every small key of the call. The
// host packs a table (src/gpu/fused.rs): KeyDesc entries, then the source pointers; each
// key owns a run of blocks starting at block_start, and a block finds its key by binary
// search. The layout is checked here and in the Rust tests. The addresses in the table are
// read through dev_ptr (prelude.cuh). A table that fits in a launch's parameters goes there
// (the _by_value kernels): no copy to the device has to run ahead of the kernel.

struct KeyDesc {
  u64 dst;          // device address of the output
  u64 srcs_offset;  // byte offset, from the table's start, of n_src u64 source addresses
  u64 n;            // elements
  u64 block_start;  // first block of this key
  u32 n_src;
  u32 dtype;        // MXNet's code
  u32 order;        // ORDER_SERIAL or ORDER_CPU_COMM
  u32 reserved;
};
// Natural C layout: four u64 then four u32 (offsets 0, 8, 16, 24, 32, 36, 40, 44).
static_assert(sizeof(KeyDesc) == 48, "KeyDesc is 48 bytes");

// Elements each thread of a block takes at once, and sources loaded at once: the loads of a
// group are independent, so a thread keeps FUSED_LANES x FUSED_GROUP of them in flight rather
// than waiting for each before the next; the adds then fold them in the store's order.
#define FUSED_LANES 4
#define FUSED_GROUP 4

// v[g][l] = source k + g at element at[l], for the count (<= FUSED_GROUP) sources from k.
template <typename T>
__device__ __forceinline__ void load_group(const u64* srcs, u32 k, u32 count, const u64* at, const bool* on,
                                           T (&v)[FUSED_GROUP][FUSED_LANES]) {
  for (u32 g = 0; g < FUSED_GROUP; ++g) {
    if (g < count) {
      const T* src = dev_ptr((const T*)srcs[k + g]);
      for (u32 l = 0; l < FUSED_LANES; ++l)
        if (on[l]) v[g][l] = src[at[l]];
    }
  }
}

template <typename T>
__device__ __forceinline__ void fused_one(const KeyDesc& d, const u64* srcs, u64 begin, u64 end) {
  T* dst = dev_ptr((T*)d.dst);
  for (u64 base = begin + threadIdx.x; base < end; base += (u64)blockDim.x * FUSED_LANES) {
    u64 at[FUSED_LANES];
    bool on[FUSED_LANES];
    T acc[FUSED_LANES];
    T v[FUSED_GROUP][FUSED_LANES];
    for (u32 l = 0; l < FUSED_LANES; ++l) {
      at[l] = base + (u64)l * blockDim.x;
      on[l] = at[l] < end;
    }
    // Every index into v, at, on and acc is a constant of an unrolled loop (a variable index
    // would put the arrays in local memory): g < count guards the group's tail instead.
    load_group(srcs, 0, 1, at, on, v);
    for (u32 l = 0; l < FUSED_LANES; ++l)
      if (on[l]) acc[l] = v[0][l];
    for (u32 k = 1; k < d.n_src; k += FUSED_GROUP) {
      u32 count = d.n_src - k < FUSED_GROUP ? d.n_src - k : FUSED_GROUP;
      load_group(srcs, k, count, at, on, v);
      for (u32 l = 0; l < FUSED_LANES; ++l) {
        if (!on[l]) continue;
        if (d.order == ORDER_CPU_COMM) {
          // s0 + (((s1 + s2) + s3) + s4), then blocks of four.
          T block = v[0][l];
          for (u32 g = 1; g < FUSED_GROUP; ++g)
            if (g < count) block = el_add(block, v[g][l]);
          acc[l] = el_add(acc[l], block);
        } else {
          // ((s0 + s1) + s2) + ...
          for (u32 g = 0; g < FUSED_GROUP; ++g)
            if (g < count) acc[l] = el_add(acc[l], v[g][l]);
        }
      }
    }
    for (u32 l = 0; l < FUSED_LANES; ++l)
      if (on[l]) dst[at[l]] = acc[l];
  }
}

// Block blockIdx.x's share of the table's work.
__device__ __forceinline__ void fused_block(const KeyDesc* table, u32 n_desc, u32 elems_per_block) {
  u64 block = blockIdx.x;
  u32 lo = 0, hi = n_desc;
  while (hi - lo > 1) {
    u32 mid = (lo + hi) / 2;
    if (table[mid].block_start <= block) lo = mid; else hi = mid;
  }
  const KeyDesc d = table[lo];
  const u64* srcs = (const u64*)((const u8*)table + d.srcs_offset);
  u64 begin = (block - d.block_start) * elems_per_block;
  u64 end = begin + elems_per_block < d.n ? begin + elems_per_block : d.n;
  switch (d.dtype) {
    case DT_FLOAT32: fused_one<float>(d, srcs, begin, end); break;
    case DT_FLOAT64: fused_one<double>(d, srcs, begin, end); break;
    case DT_FLOAT16: fused_one<h16>(d, srcs, begin, end); break;
    case DT_BFLOAT16: fused_one<b16>(d, srcs, begin, end); break;
    case DT_UINT8: fused_one<u8>(d, srcs, begin, end); break;
    case DT_INT8: fused_one<i8>(d, srcs, begin, end); break;
    case DT_INT32: fused_one<i32>(d, srcs, begin, end); break;
    case DT_INT64: fused_one<i64>(d, srcs, begin, end); break;
    default: break;
  }
}

extern "C" __global__ void fused_sum(const KeyDesc* table, u32 n_desc, u32 elems_per_block) {
  fused_block(table, n_desc, elems_per_block);
}

// Copies within one GPU: the same table, one source per entry, moved in the widest integer
// type that fits (named apart so that traces tell copies from sums).
extern "C" __global__ void fused_copy(const KeyDesc* table, u32 n_desc, u32 elems_per_block) {
  fused_block(table, n_desc, elems_per_block);
}

// A table passed by value: at most PARAM_TABLE_WORDS words (kernel parameters may take 4 KiB
// in all). GRID_CONSTANT (prelude.cuh) lets the kernel read it where the launch put it,
// rather than copying it per thread.
#define PARAM_TABLE_WORDS 500
struct ParamTable {
  u64 words[PARAM_TABLE_WORDS];
};
static_assert(sizeof(ParamTable) == 4000, "ParamTable is 4000 bytes");

extern "C" __global__ void fused_sum_by_value(const GRID_CONSTANT ParamTable table, u32 n_desc, u32 elems_per_block) {
  fused_block((const KeyDesc*)table.words, n_desc, elems_per_block);
}

extern "C" __global__ void fused_copy_by_value(const GRID_CONSTANT ParamTable table, u32 n_desc, u32 elems_per_block) {
  fused_block((const KeyDesc*)table.words, n_desc, elems_per_block);
}
