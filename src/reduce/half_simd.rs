//! float16 and bfloat16 sums, 8 values at a time widened to float32. MXNet rounds to the half
//! type after every addition (float16 to nearest, bfloat16 by truncation), and so do these
//! loops (a narrowing and widening after each add), so they give the scalar kernel's bits. The scalar kernel converts one value at a time
//! through `half`, which picks its conversion at run time per value: ~25 times slower than a
//! float32 sum of the same length.

use super::SumOrder;
use half::{bf16, f16};
use std::arch::x86_64::{
    __m128i, __m256, __m256i, _mm256_add_ps, _mm256_and_si256, _mm256_castps_si256, _mm256_castsi256_ps, _mm256_castsi256_si128,
    _mm256_cvtepu16_epi32, _mm256_cvtph_ps, _mm256_cvtps_ph, _mm256_packus_epi32, _mm256_permute4x64_epi64, _mm256_set1_epi32,
    _mm256_slli_epi32, _mm256_srli_epi32, _mm_loadu_si128, _mm_storeu_si128,
};

/// A half type whose values load into, round within, and store from 8 float32 lanes.
trait Lanes: Copy {
    /// Widens the 8 values at `p`.
    unsafe fn load(p: *const Self) -> __m256;
    /// Rounds each lane to the half type as MXNet does: float16 to nearest (ties to even),
    /// bfloat16 toward zero.
    unsafe fn round(x: __m256) -> __m256;
    /// Narrows the lanes (already representable) into the 8 values at `p`.
    unsafe fn store(p: *mut Self, x: __m256);
}

impl Lanes for f16 {
    #[inline(always)]
    unsafe fn load(p: *const f16) -> __m256 {
        // SAFETY: the caller guarantees 8 readable values at `p` and F16C support.
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i)) }
    }
    #[inline(always)]
    unsafe fn round(x: __m256) -> __m256 {
        // SAFETY: the caller guarantees F16C support. Rounding mode 0: to nearest, ties to
        // even, as `half` (and MXNet's half_t) convert.
        unsafe { _mm256_cvtph_ps(_mm256_cvtps_ph::<0>(x)) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut f16, x: __m256) {
        // SAFETY: the caller guarantees 8 writable values at `p` and F16C support.
        unsafe { _mm_storeu_si128(p as *mut __m128i, _mm256_cvtps_ph::<0>(x)) }
    }
}

/// The bfloat16 bits of each float32 lane, in the low 16 bits of its 32: the upper half,
/// truncated as MXNet's `bf16_t` converts (see `element::bf16_from_f32_truncating`).
#[inline(always)]
unsafe fn bf16_bits(x: __m256) -> __m256i {
    // SAFETY: the caller guarantees AVX2 support; a register-only shift.
    unsafe { _mm256_srli_epi32::<16>(_mm256_castps_si256(x)) }
}

impl Lanes for bf16 {
    #[inline(always)]
    unsafe fn load(p: *const bf16) -> __m256 {
        // SAFETY: the caller guarantees 8 readable values at `p` and AVX2 support.
        unsafe { _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(_mm_loadu_si128(p as *const __m128i)))) }
    }
    #[inline(always)]
    unsafe fn round(x: __m256) -> __m256 {
        // SAFETY: the caller guarantees AVX2 support; clearing the low 16 bits truncates.
        unsafe { _mm256_castsi256_ps(_mm256_and_si256(_mm256_castps_si256(x), _mm256_set1_epi32(-65536))) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut bf16, x: __m256) {
        // SAFETY: the caller guarantees 8 writable values at `p` and AVX2 support. Packing
        // works within 128-bit halves; the permute gathers both halves' low 64 bits.
        unsafe {
            let bits = bf16_bits(x);
            let packed = _mm256_permute4x64_epi64::<0b1000>(_mm256_packus_epi32(bits, bits));
            _mm_storeu_si128(p as *mut __m128i, _mm256_castsi256_si128(packed));
        }
    }
}

/// `dst[..m] = Σ srcs` for the largest multiple `m` of 8 within `dst`, in `order`'s
/// association; returns `m` (the caller sums the rest), 0 for fewer than two sources.
///
/// # Safety
/// The CPU must support AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
unsafe fn sum_lanes<H: Lanes>(order: SumOrder, dst: &mut [H], srcs: &[&[H]]) -> usize {
    let n = dst.len() / 8 * 8;
    // One source is a copy, which must keep every bit (widening quiets a signalling NaN).
    let Some((first, rest @ [_, ..])) = srcs.split_first() else { return 0 };
    if srcs.iter().any(|s| s.len() < n) {
        return 0;
    }
    for i in (0..n).step_by(8) {
        // SAFETY: `i + 8 <= n` and every source holds at least `n` values (checked above);
        // AVX2 and F16C are enabled for this function.
        unsafe {
            let at = |s: &[H]| H::load(s.as_ptr().add(i));
            let add = |a: __m256, b: __m256| H::round(_mm256_add_ps(a, b));
            let mut acc = at(first);
            match order {
                SumOrder::Serial => {
                    for s in rest {
                        acc = add(acc, at(s));
                    }
                }
                // s0 + (((s1 + s2) + s3) + s4), then each further block of four likewise.
                SumOrder::CpuComm => {
                    for block in rest.chunks(4) {
                        let mut partial = at(block[0]);
                        for s in &block[1..] {
                            partial = add(partial, at(s));
                        }
                        acc = add(acc, partial);
                    }
                }
            }
            H::store(dst.as_mut_ptr().add(i), acc);
        }
    }
    n
}

/// Whether [`sum_f16`] and [`sum_bf16`] can run on this CPU.
pub(crate) fn available() -> bool {
    super::simd::has_avx2() && std::arch::is_x86_feature_detected!("f16c")
}

/// float16 `dst[..m] = Σ srcs`; returns `m`, a multiple of 8 (0 unless [`available`]).
pub(crate) fn sum_f16(order: SumOrder, dst: &mut [f16], srcs: &[&[f16]]) -> usize {
    if !available() {
        return 0;
    }
    // SAFETY: AVX2 and F16C support were checked just above.
    unsafe { sum_lanes(order, dst, srcs) }
}

/// bfloat16 `dst[..m] = Σ srcs`; returns `m`, a multiple of 8 (0 unless [`available`]).
pub(crate) fn sum_bf16(order: SumOrder, dst: &mut [bf16], srcs: &[&[bf16]]) -> usize {
    if !available() {
        return 0;
    }
    // SAFETY: AVX2 and F16C support were checked just above.
    unsafe { sum_lanes(order, dst, srcs) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::element::Element;

    /// The scalar kernel's result: `half`'s conversions, one add at a time, in `order`.
    fn scalar<T: Element>(order: SumOrder, srcs: &[Vec<T>], i: usize) -> T {
        let mut acc = srcs[0][i];
        match order {
            SumOrder::Serial => srcs[1..].iter().for_each(|s| acc = acc.add(s[i])),
            SumOrder::CpuComm => {
                for block in srcs[1..].chunks(4) {
                    let partial = block[1..].iter().fold(block[0][i], |p, s| p.add(s[i]));
                    acc = acc.add(partial);
                }
            }
        }
        acc
    }

    /// Bit patterns covering normals of every scale, subnormals, zeros, infinities, NaNs
    /// (with payloads and signs) and values whose sums round.
    fn patterns(seed: u32) -> Vec<u16> {
        let special = [0x0000, 0x8000, 0x0001, 0x03ff, 0x7c00, 0xfc00, 0x7e00, 0x7c01, 0xfe37, 0x7f80, 0xff81, 0x3c00, 0x3c01, 0xbbff];
        (0..203u32).map(|i| if i % 7 == 0 { special[(i / 7 + seed) as usize % special.len()] } else { (i.wrapping_mul(2654435761).wrapping_add(seed * 40503) >> 7) as u16 }).collect()
    }

    fn check<H: Lanes + Element + PartialEq + std::fmt::Debug>(sum: fn(SumOrder, &mut [H], &[&[H]]) -> usize) {
        if !available() {
            return;
        }
        for k in 1..=9 {
            let srcs: Vec<Vec<H>> = (0..k).map(|s| patterns(s as u32).into_iter().map(|b| bytemuck::cast(b)).collect()).collect();
            let views: Vec<&[H]> = srcs.iter().map(|v| &v[..]).collect();
            for order in [SumOrder::CpuComm, SumOrder::Serial] {
                let mut dst = vec![H::default(); 203];
                if k == 1 {
                    assert_eq!(sum(order, &mut dst, &views), 0, "one source is left to the exact copy");
                    continue;
                }
                assert_eq!(sum(order, &mut dst, &views), 200);
                for (i, got) in dst[..200].iter().enumerate() {
                    let want = scalar(order, &srcs, i);
                    let (g, w): (u16, u16) = (bytemuck::cast(*got), bytemuck::cast(want));
                    assert_eq!(g, w, "{order:?} k={k} i={i}");
                }
            }
        }
    }

    #[test]
    fn float16_lanes_give_the_scalar_kernels_bits() {
        check::<f16>(sum_f16);
    }

    #[test]
    fn bfloat16_lanes_give_the_scalar_kernels_bits() {
        check::<bf16>(sum_bf16);
    }
}
