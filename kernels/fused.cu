// Small keys, fused: one launch per device per call sums every small key of the call. The
// host packs a table (src/gpu/fused.rs): KeyDesc entries, then the source pointers; each
// key owns a run of blocks starting at block_start, and a block finds its key by binary
// search. The layout is checked here and in the Rust tests. The addresses in the table are
// read through dev_ptr (prelude.cuh).

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

template <typename T>
__device__ __forceinline__ void fused_one(const KeyDesc& d, const u64* srcs, u64 begin, u64 end) {
  T* dst = dev_ptr((T*)d.dst);
  for (u64 i = begin + threadIdx.x; i < end; i += blockDim.x) {
    T acc = dev_ptr((const T*)srcs[0])[i];
    u32 k = 1;
    if (d.order == ORDER_CPU_COMM) {
      while (k < d.n_src) {
        T block = dev_ptr((const T*)srcs[k])[i];
        u32 stop = k + 4 < d.n_src ? k + 4 : d.n_src;
        for (u32 j = k + 1; j < stop; ++j) block = el_add(block, dev_ptr((const T*)srcs[j])[i]);
        acc = el_add(acc, block);
        k = stop;
      }
    } else {
      for (; k < d.n_src; ++k) acc = el_add(acc, dev_ptr((const T*)srcs[k])[i]);
    }
    dst[i] = acc;
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

// Small copies within one GPU: the same table, one source per entry, moved in the widest
// integer type that fits (named apart so that traces tell copies from sums).
extern "C" __global__ void fused_copy(const KeyDesc* table, u32 n_desc, u32 elems_per_block) {
  fused_block(table, n_desc, elems_per_block);
}
