// Gradient compression on float32, identical to src/compression/: per element r += g, then
// compare and subtract, in float32, so GPU and CPU agree bit for bit. One thread per packed
// byte; bytes past the last element are zero (the packed buffer is padded to whole words).

// 2-bit (MXNet 1.9): 4 elements per byte, element j in bits (7-2j, 6-2j): 11 = +threshold,
// 10 = -threshold, 00 = nothing sent.
extern "C" __global__ void quantize_2bit(u8* packed, u64 packed_len, const float* grad, float* residual,
                                         u64 n, float threshold) {
  const float neg_threshold = -threshold;
  GRID_STRIDE(b, packed_len) {
    u8 byte = 0;
    for (u32 j = 0; j < 4; ++j) {
      u64 i = b * 4 + j;
      if (i >= n) break;
      float r = __fadd_rn(residual[i], grad[i]);
      if (r >= threshold) {
        byte |= (u8)(0xc0 >> (2 * j));
        r = __fsub_rn(r, threshold);
      } else if (r <= neg_threshold) {
        byte |= (u8)(0x80 >> (2 * j));
        r = __fadd_rn(r, threshold);
      }
      residual[i] = r;
    }
    packed[b] = byte;
  }
}

// out = dequantised (accumulate = 0) or out + dequantised (accumulate = 1): the merge is a
// left fold over the sources' dequantised values.
extern "C" __global__ void dequantize_2bit(float* out, const u8* packed, u64 n, float threshold, u32 accumulate) {
  GRID_STRIDE(i, n) {
    u32 j = (u32)(i % 4);
    u8 pos = (u8)(0xc0 >> (2 * j));
    u8 code = packed[i / 4] & pos;
    float v = code == pos ? threshold : (code == (u8)(0x80 >> (2 * j)) ? -threshold : 0.0f);
    out[i] = accumulate ? __fadd_rn(out[i], v) : v;
  }
}

// 1-bit (MXNet 2.0): 8 elements per byte, element j in bit 7-j. Strictly above the
// threshold sends +1 and takes 1 off the residual; otherwise sends -1 and adds 1.
extern "C" __global__ void quantize_1bit(u8* packed, u64 packed_len, const float* grad, float* residual,
                                         u64 n, float threshold) {
  GRID_STRIDE(b, packed_len) {
    u8 byte = 0;
    for (u32 j = 0; j < 8; ++j) {
      u64 i = b * 8 + j;
      if (i >= n) break;
      float r = __fadd_rn(residual[i], grad[i]);
      if (r > threshold) {
        byte |= (u8)(0x80 >> j);
        r = __fsub_rn(r, 1.0f);
      } else {
        r = __fadd_rn(r, 1.0f);
      }
      residual[i] = r;
    }
    packed[b] = byte;
  }
}

extern "C" __global__ void dequantize_1bit(float* out, const u8* packed, u64 n, u32 accumulate) {
  GRID_STRIDE(i, n) {
    float v = (packed[i / 8] & (0x80 >> (i % 8))) ? 1.0f : -1.0f;
    out[i] = accumulate ? __fadd_rn(out[i], v) : v;
  }
}
