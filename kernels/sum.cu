// Dense sums of a key's values, one launch per key: dst = Σ srcs in the store's order.

// The sources' device addresses, passed by value; read through dev_ptr (prelude.cuh).
struct Sources {
  const void* p[MAX_SOURCES];
};

// acc_in_dst = 0: the fold starts from p[0]; 1: it continues from dst (a launch after the
// first when there are more than MAX_SOURCES values; the host cuts the list at a block
// boundary of the order, so the association is unchanged).
// n_out outputs (a pull that joined the push: outs.p) get the sum too, written in the same
// pass, so that they are not copied from dst afterwards (one read of the sum fewer each).
template <typename T>
__device__ __forceinline__ void sum_kernel(T* dst, const Sources& s, u32 n_src, u64 n, u32 order, u32 acc_in_dst,
                                           const Sources* outs, u32 n_out) {
  GRID_STRIDE(i, n) {
    u32 k = 0;
    T acc;
    if (acc_in_dst) {
      acc = dst[i];
    } else {
      acc = dev_ptr((const T*)s.p[0])[i];
      k = 1;
    }
    if (order == ORDER_CPU_COMM) {
      while (k < n_src) {
        T block = dev_ptr((const T*)s.p[k])[i];
        u32 end = k + 4 < n_src ? k + 4 : n_src;
        for (u32 j = k + 1; j < end; ++j) block = el_add(block, dev_ptr((const T*)s.p[j])[i]);
        acc = el_add(acc, block);
        k = end;
      }
    } else {
      for (; k < n_src; ++k) acc = el_add(acc, dev_ptr((const T*)s.p[k])[i]);
    }
    dst[i] = acc;
    for (u32 j = 0; j < n_out; ++j) dev_ptr((T*)outs->p[j])[i] = acc;
  }
}

#define SUM(name, T)                                                                          \
  extern "C" __global__ void sum_##name(T* dst, Sources s, u32 n_src, u64 n, u32 order, u32 acc_in_dst) { \
    sum_kernel<T>(dst, s, n_src, n, order, acc_in_dst, nullptr, 0);                          \
  }
FOR_EACH_SUMMABLE(SUM)

#define SUM_OUT(name, T)                                                                                      \
  extern "C" __global__ void sum_out_##name(T* dst, Sources s, u32 n_src, u64 n, u32 order, u32 acc_in_dst,   \
                                            Sources outs, u32 n_out) {                                        \
    sum_kernel<T>(dst, s, n_src, n, order, acc_in_dst, &outs, n_out);                                         \
  }
FOR_EACH_SUMMABLE(SUM_OUT)
