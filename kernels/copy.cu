// Copies, fills and casts on one device (copies across devices are driver copies).

extern "C" __global__ void copy_bytes(u8* dst, const u8* src, u64 nbytes) {
  GRID_STRIDE(i, nbytes) dst[i] = src[i];
}

#define FILL(name, T) \
  extern "C" __global__ void fill_##name(T* dst, T value, u64 n) { GRID_STRIDE(i, n) dst[i] = value; }
FOR_EACH_DTYPE(FILL)

#define CAST_TO(sname, S, dname, T) \
  extern "C" __global__ void cast_##sname##_to_##dname(T* dst, const S* src, u64 n) { \
    GRID_STRIDE(i, n) dst[i] = convert<S, T>(src[i]);                             \
  }
#define CAST_FROM(sname, S)                                                                    \
  CAST_TO(sname, S, float32, float) CAST_TO(sname, S, float64, double)                        \
  CAST_TO(sname, S, float16, h16) CAST_TO(sname, S, bfloat16, b16) CAST_TO(sname, S, uint8, u8) \
  CAST_TO(sname, S, int8, i8) CAST_TO(sname, S, int32, i32) CAST_TO(sname, S, int64, i64)     \
  CAST_TO(sname, S, bool, bool8)
FOR_EACH_DTYPE(CAST_FROM)
