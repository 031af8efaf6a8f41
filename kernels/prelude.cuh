// Prepended to every kernels/*.cu before NVRTC compiles it (NVRTC has no include path).
// Element types and MXNet's arithmetic on them, identical to the CPU loops of src/reduce/:
// no contraction (compiled with --fmad=false), IEEE subnormals (--ftz=false), float16 rounded
// to nearest after every add, bfloat16 truncated after every add as MXNet's bf16_t does.

typedef unsigned char u8;
typedef signed char i8;
typedef int i32;
typedef long long i64;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

// float16 and bfloat16 are distinct storage types so that overloads pick the right rounding.
struct h16 { u16 bits; };
struct b16 { u16 bits; };
// MXNet's bool: one byte, 0 or 1.
struct bool8 { u8 v; };

// MXNet's dtype codes (the ABI's).
#define DT_FLOAT32 0
#define DT_FLOAT64 1
#define DT_FLOAT16 2
#define DT_UINT8 3
#define DT_INT32 4
#define DT_INT8 5
#define DT_INT64 6
#define DT_BOOL 7
#define DT_BFLOAT16 12

// How sources associate (src/reduce/sum.rs SumOrder): 0 = left fold (CommDevice),
// 1 = s0 + (((s1+s2)+s3)+s4), then blocks of four (CommCPU).
#define ORDER_SERIAL 0
#define ORDER_CPU_COMM 1

// The most sources one launch folds; more are folded by further launches continuing in dst.
#define MAX_SOURCES 16

// The only code that differs between the GPU and the host build (the CUDA stand-in,
// kernels/README.md): the two float16 conversions, inline PTX here and exact integer code on
// the host, and dev_ptr.
//
// dev_ptr(p): every device address a kernel reads from memory or from a struct parameter
// (a table of source pointers, a descriptor's output address) must go through it before it
// is dereferenced. On a GPU it is the identity; on the host it translates the address to the
// memory backing it, and a launch reading an address outside every allocation it may access
// fails with CUDA_ERROR_ILLEGAL_ADDRESS. Pointer parameters of a kernel are translated by
// the launcher and need no dev_ptr.
#ifdef __CUDACC_RTC__
__device__ __forceinline__ float h16_to_f32(h16 h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h.bits));
  return f;
}
__device__ __forceinline__ h16 f32_to_h16(float f) {
  h16 h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(f));
  return h;
}
template <typename T> __device__ __forceinline__ T* dev_ptr(T* p) { return p; }
// A struct parameter read in place (CUDA 11.7+, sm_70+); older ones copy it, still correct.
#if (__CUDACC_VER_MAJOR__ > 11 || (__CUDACC_VER_MAJOR__ == 11 && __CUDACC_VER_MINOR__ >= 7)) && __CUDA_ARCH__ >= 700
#define GRID_CONSTANT __grid_constant__
#else
#define GRID_CONSTANT
#endif
#else
#define GRID_CONSTANT
// Exact: every float16 is a float32. Subnormals are normalised; NaN keeps its payload and
// is made quiet, as x86's F16C and the half crate do.
__device__ __forceinline__ float h16_to_f32(h16 h) {
  u32 sign = (u32)(h.bits & 0x8000) << 16;
  u32 exp = (h.bits >> 10) & 0x1f;
  u32 man = h.bits & 0x3ff;
  if (exp == 0x1f) return __uint_as_float(sign | 0x7f800000 | (man << 13) | (man != 0 ? 0x400000u : 0u));
  if (exp != 0) return __uint_as_float(sign | ((exp + 112) << 23) | (man << 13));
  if (man == 0) return __uint_as_float(sign);
  // Subnormal: man * 2^-24; shift the leading one into the implicit bit.
  u32 e = 113;
  while ((man & 0x400) == 0) {
    man <<= 1;
    --e;
  }
  return __uint_as_float(sign | (e << 23) | ((man & 0x3ff) << 13));
}
// Rounded to nearest, ties to even; too big becomes Inf, too small a subnormal or zero;
// NaN stays NaN (quiet, the payload's top bits kept).
__device__ __forceinline__ h16 f32_to_h16(float f) {
  u32 x = __float_as_uint(f);
  u32 sign = (x >> 16) & 0x8000;
  u32 exp = (x >> 23) & 0xff;
  u32 man = x & 0x7fffff;
  h16 h;
  if (exp == 0xff) {
    h.bits = (u16)(sign | 0x7c00 | (man != 0 ? 0x200u : 0u) | (man >> 13));
    return h;
  }
  int e = (int)exp - 127 + 15;
  if (e >= 0x1f) {
    h.bits = (u16)(sign | 0x7c00);
    return h;
  }
  // Keep `shift` fewer bits of the 24-bit significand, then round on what was dropped.
  u32 kept, shift;
  if (e <= 0) {
    if (e < -10) {
      h.bits = (u16)sign;
      return h;
    }
    man |= 0x800000;
    shift = (u32)(14 - e);
    kept = man >> shift;
  } else {
    shift = 13;
    kept = ((u32)e << 10) | (man >> 13);
  }
  u32 half = 1u << (shift - 1);
  u32 dropped = man & ((1u << shift) - 1);
  // A carry out of the significand moves into the exponent, up to Inf: the encoding is
  // monotonic.
  if (dropped > half || (dropped == half && (kept & 1))) ++kept;
  h.bits = (u16)(sign | kept);
  return h;
}
template <typename T> __device__ __forceinline__ T* dev_ptr(T* p) {
  return (T*)standin::translate_read_address((u64)p);
}
#endif
__device__ __forceinline__ float b16_to_f32(b16 b) { return __uint_as_float(((u32)b.bits) << 16); }
// Truncation, not rounding: the upper half of the float32, as mshadow's bf16_t converts.
__device__ __forceinline__ b16 f32_to_b16(float f) {
  b16 b;
  b.bits = (u16)(__float_as_uint(f) >> 16);
  return b;
}

// a + b as MXNet computes it in each type.
__device__ __forceinline__ float el_add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double el_add(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ h16 el_add(h16 a, h16 b) { return f32_to_h16(__fadd_rn(h16_to_f32(a), h16_to_f32(b))); }
__device__ __forceinline__ b16 el_add(b16 a, b16 b) { return f32_to_b16(__fadd_rn(b16_to_f32(a), b16_to_f32(b))); }
__device__ __forceinline__ u8 el_add(u8 a, u8 b) { return (u8)((u32)a + (u32)b); }
__device__ __forceinline__ i8 el_add(i8 a, i8 b) { return (i8)(u8)((u32)(u8)a + (u32)(u8)b); }
__device__ __forceinline__ i32 el_add(i32 a, i32 b) { return (i32)((u32)a + (u32)b); }
__device__ __forceinline__ i64 el_add(i64 a, i64 b) { return (i64)((u64)a + (u64)b); }
__device__ __forceinline__ bool8 el_add(bool8 a, bool8 b) {
  bool8 r;
  r.v = (a.v | b.v) != 0;
  return r;
}

// Conversions as C's static_cast, the CPU's `convert` (src/reduce/element.rs): between
// integers through int64 with wrap-around; otherwise through double, float to integer
// truncating toward zero and saturating (NaN to 0), as Rust's `as` does.
__device__ __forceinline__ double to_f64(float v) { return (double)v; }
__device__ __forceinline__ double to_f64(double v) { return v; }
__device__ __forceinline__ double to_f64(h16 v) { return (double)h16_to_f32(v); }
__device__ __forceinline__ double to_f64(b16 v) { return (double)b16_to_f32(v); }
__device__ __forceinline__ double to_f64(u8 v) { return (double)v; }
__device__ __forceinline__ double to_f64(i8 v) { return (double)v; }
__device__ __forceinline__ double to_f64(i32 v) { return (double)v; }
__device__ __forceinline__ double to_f64(i64 v) { return __ll2double_rn(v); }
__device__ __forceinline__ double to_f64(bool8 v) { return v.v != 0 ? 1.0 : 0.0; }

__device__ __forceinline__ i64 to_i64(u8 v) { return (i64)v; }
__device__ __forceinline__ i64 to_i64(i8 v) { return (i64)v; }
__device__ __forceinline__ i64 to_i64(i32 v) { return (i64)v; }
__device__ __forceinline__ i64 to_i64(i64 v) { return v; }
__device__ __forceinline__ i64 to_i64(bool8 v) { return v.v != 0; }

template <typename T> struct Conv;
template <> struct Conv<float> {
  static const bool integer = false;
  __device__ static float from_f64(double v) { return __double2float_rn(v); }
  __device__ static float from_i64(i64 v) { return __double2float_rn(__ll2double_rn(v)); }
};
template <> struct Conv<double> {
  static const bool integer = false;
  __device__ static double from_f64(double v) { return v; }
  __device__ static double from_i64(i64 v) { return __ll2double_rn(v); }
};
template <> struct Conv<h16> {
  static const bool integer = false;
  __device__ static h16 from_f64(double v) { return f32_to_h16(__double2float_rn(v)); }
  __device__ static h16 from_i64(i64 v) { return f32_to_h16(__ll2float_rn(v)); }
};
template <> struct Conv<b16> {
  static const bool integer = false;
  __device__ static b16 from_f64(double v) { return f32_to_b16(__double2float_rn(v)); }
  __device__ static b16 from_i64(i64 v) { return f32_to_b16(__ll2float_rn(v)); }
};
// Saturating truncation of a double into [lo, hi] (both exactly representable, or hi
// rounding up to a power of two that is itself out of range), NaN to 0.
__device__ __forceinline__ i64 saturate(double v, double lo, double hi, i64 ilo, i64 ihi) {
  if (v != v) return 0;
  if (v <= lo) return ilo;
  if (v >= hi) return ihi;
  return (i64)v;
}
template <> struct Conv<u8> {
  static const bool integer = true;
  __device__ static u8 from_f64(double v) { return (u8)saturate(v, 0.0, 255.0, 0, 255); }
  __device__ static u8 from_i64(i64 v) { return (u8)(u64)v; }
};
template <> struct Conv<i8> {
  static const bool integer = true;
  __device__ static i8 from_f64(double v) { return (i8)saturate(v, -128.0, 127.0, -128, 127); }
  __device__ static i8 from_i64(i64 v) { return (i8)(u8)(u64)v; }
};
template <> struct Conv<i32> {
  static const bool integer = true;
  __device__ static i32 from_f64(double v) {
    return (i32)saturate(v, -2147483648.0, 2147483647.0, -2147483647LL - 1, 2147483647LL);
  }
  __device__ static i32 from_i64(i64 v) { return (i32)(u32)(u64)v; }
};
template <> struct Conv<i64> {
  static const bool integer = true;
  // 2^63 as a double is the first value out of range above.
  __device__ static i64 from_f64(double v) {
    if (v != v) return 0;
    if (v <= -9223372036854775808.0) return (i64)0x8000000000000000ULL;
    if (v >= 9223372036854775808.0) return 0x7fffffffffffffffLL;
    return (i64)v;
  }
  __device__ static i64 from_i64(i64 v) { return v; }
};
template <> struct Conv<bool8> {
  static const bool integer = true;
  __device__ static bool8 from_f64(double v) {
    bool8 r;
    r.v = v != 0.0;
    return r;
  }
  __device__ static bool8 from_i64(i64 v) {
    bool8 r;
    r.v = v != 0;
    return r;
  }
};

template <typename S, typename T, bool BOTH_INTEGER> struct Convert;
template <typename S, typename T> struct Convert<S, T, true> {
  __device__ static T run(S v) { return Conv<T>::from_i64(to_i64(v)); }
};
template <typename S, typename T> struct Convert<S, T, false> {
  __device__ static T run(S v) { return Conv<T>::from_f64(to_f64(v)); }
};
template <typename S, typename T> __device__ __forceinline__ T convert(S v) {
  return Convert<S, T, Conv<S>::integer && Conv<T>::integer>::run(v);
}

// Every dtype with a sum, as X(name, type): bool has none (the store refuses to sum it).
#define FOR_EACH_SUMMABLE(X) \
  X(float32, float) X(float64, double) X(float16, h16) X(bfloat16, b16) \
  X(uint8, u8) X(int8, i8) X(int32, i32) X(int64, i64)
#define FOR_EACH_DTYPE(X) FOR_EACH_SUMMABLE(X) X(bool, bool8)

// Grid-stride loop over [0, n).
#define GRID_STRIDE(i, n) \
  for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (u64)blockDim.x * gridDim.x)
