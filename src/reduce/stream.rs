//! Copies with non-temporal stores. A pull writes every output once and the store does not
//! read it again, so bypassing the cache saves the read-for-ownership of each destination
//! line; the big sums of `sum.rs` are streamed out for the same reason.

/// Outputs at least this big are written with streaming stores; smaller ones are likely to
/// be read again from cache soon, and gain nothing.
pub(crate) const STREAM_MIN_BYTES: usize = 4096;

/// Orders every streaming store made so far by this thread before its later stores (and so
/// before a lock release or an op's completion that publishes them).
pub(crate) fn store_fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a store fence has no preconditions.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
}

/// `dst = src` (same length) with streaming stores where the platform has them. Not fenced:
/// the caller calls [`store_fence`] before publishing `dst`, once for a whole batch of copies
/// where it can. A fence (or any locked instruction, a lock release among them) waits until
/// the streamed bytes have reached memory, so fencing each small copy serialises copies that
/// could overlap.
pub(crate) fn stream_copy_unfenced(dst: &mut [u8], src: &[u8]) {
    let n = dst.len().min(src.len());
    let (dst, src) = (&mut dst[..n], &src[..n]);
    #[cfg(target_arch = "x86_64")]
    {
        // Plain copies up to a 16-byte boundary of `dst` (only views into the middle of a
        // buffer need them: buffers start on a cache line), then streaming stores: 16 bytes
        // up to a 32-byte boundary, 64-byte steps (two 32-byte stores with AVX2, four 16-byte
        // ones without), 16-byte steps, and plain copies for the last few bytes.
        let head = dst.as_ptr().align_offset(16).min(n);
        dst[..head].copy_from_slice(&src[..head]);
        let (mut dst, mut src) = (&mut dst[head..], &src[head..]);
        if super::simd::has_avx2() {
            if !(dst.as_ptr() as usize).is_multiple_of(32) && dst.len() >= 16 {
                stream_16(&mut dst[..16], &src[..16]);
                (dst, src) = (&mut dst[16..], &src[16..]);
            }
            let body = dst.len() / 64 * 64;
            // SAFETY: the CPU supports AVX2 (checked above); `dst` starts on a 32-byte
            // boundary here and the body is whole 64-byte steps.
            unsafe { stream_64_avx2(&mut dst[..body], &src[..body]) };
            (dst, src) = (&mut dst[body..], &src[body..]);
        }
        let body = dst.len() / 16 * 16;
        stream_16(&mut dst[..body], &src[..body]);
        let (dst, src) = (&mut dst[body..], &src[body..]);
        dst.copy_from_slice(src);
    }
    #[cfg(not(target_arch = "x86_64"))]
    dst.copy_from_slice(src);
}

/// Streams whole 16-byte steps to a 16-byte aligned `dst`. Any other `dst` (misaligned, or
/// not whole steps of `src`'s length) is copied plainly: the streaming store faults on a
/// misaligned address, so the condition is checked, not assumed.
#[cfg(target_arch = "x86_64")]
fn stream_16(dst: &mut [u8], src: &[u8]) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
    if dst.len() != src.len() || !dst.len().is_multiple_of(16) || !(dst.as_ptr() as usize).is_multiple_of(16) {
        let n = dst.len().min(src.len());
        dst[..n].copy_from_slice(&src[..n]);
        return;
    }
    for (d, s) in dst.chunks_exact_mut(16).zip(src.chunks_exact(16)) {
        // SAFETY: SSE2 is part of x86_64. Each chunk holds 16 bytes; `d` is 16-byte aligned
        // (the caller aligned the start and chunks are 16 bytes), as `_mm_stream_si128`
        // requires; the load is an unaligned one.
        unsafe { _mm_stream_si128(d.as_mut_ptr() as *mut __m128i, _mm_loadu_si128(s.as_ptr() as *const __m128i)) };
    }
}

/// Streams whole 64-byte steps to a 32-byte aligned `dst` with AVX2 stores.
///
/// # Safety
/// The CPU must support AVX2, `dst` must start on a 32-byte boundary, and `dst` and `src` must
/// be of one length, a multiple of 64 bytes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn stream_64_avx2(dst: &mut [u8], src: &[u8]) {
    use std::arch::x86_64::{__m256i, _mm256_loadu_si256, _mm256_stream_si256};
    debug_assert!(dst.len() == src.len() && dst.len().is_multiple_of(64) && (dst.as_ptr() as usize).is_multiple_of(32));
    for (d, s) in dst.chunks_exact_mut(64).zip(src.chunks_exact(64)) {
        let (d, s) = (d.as_mut_ptr() as *mut __m256i, s.as_ptr() as *const __m256i);
        // SAFETY: AVX2 is enabled for this function. Each chunk holds 64 bytes, so both
        // 32-byte halves are in bounds; `d` is 32-byte aligned (the caller aligned the start
        // and chunks are 64 bytes), as `_mm256_stream_si256` requires; loads are unaligned.
        unsafe {
            let (a, b) = (_mm256_loadu_si256(s), _mm256_loadu_si256(s.add(1)));
            _mm256_stream_si256(d, a);
            _mm256_stream_si256(d.add(1), b);
        }
    }
}

/// `dst = Σ srcs` for 2 to 4 float32 sources in `order`'s association, written with streaming
/// stores straight from registers: the big sums of the float32 keys that dominate training,
/// which otherwise sum into a cached block and copy it out, a second pass over memory. Each
/// sum is also streamed to every one of `outs` (each as long as `dst` and aligned as it is): a
/// pull's outputs written in the sum's own pass. Returns false, doing nothing, for other source
/// counts or outputs. Bit-identical to `sum_serial`: same association.
pub(crate) fn stream_sum_f32_to(order: super::SumOrder, dst: &mut [f32], outs: &mut [&mut [f32]], srcs: &[&[f32]]) -> bool {
    let n = dst.len();
    if !(2..=4).contains(&srcs.len()) || srcs.iter().any(|s| s.len() < n) || outs.iter().any(|o| o.len() != n) {
        return false;
    }
    let combine = |a: f32, b: f32, c: Option<f32>, d: Option<f32>| -> f32 {
        match (order, c, d) {
            (_, None, _) => a + b,
            (super::SumOrder::CpuComm, Some(c), None) => a + (b + c),
            (super::SumOrder::CpuComm, Some(c), Some(d)) => a + ((b + c) + d),
            (super::SumOrder::Serial, Some(c), None) => (a + b) + c,
            (super::SumOrder::Serial, Some(c), Some(d)) => ((a + b) + c) + d,
        }
    };
    let at = |k: usize, i: usize| srcs.get(k).map(|s| s[i]);
    let scalar = |dst: &mut [f32], outs: &mut [&mut [f32]], range: std::ops::Range<usize>| {
        for i in range {
            dst[i] = combine(srcs[0][i], srcs[1][i], at(2, i), at(3, i));
            for o in outs.iter_mut() {
                o[i] = dst[i];
            }
        }
    };
    #[cfg(target_arch = "x86_64")]
    {
        // Buffers start on a cache line, so `head` is empty unless `dst` is a view into one.
        let wide = super::simd::has_avx2();
        let (align, step) = if wide { (32, 8) } else { (16, 4) };
        let misalign = |p: *const f32| p as usize % align;
        if outs.iter().any(|o| misalign(o.as_ptr()) != misalign(dst.as_ptr())) {
            return false;
        }
        let head = dst.as_ptr().align_offset(align).min(n);
        let body_end = head + (n - head) / step * step;
        scalar(dst, outs, 0..head);
        let mut body_outs: Vec<&mut [f32]> = outs.iter_mut().map(|o| &mut o[head..body_end]).collect();
        if wide {
            // SAFETY: the CPU supports AVX2 (checked above); the body of `dst` and of every
            // output starts on a 32-byte boundary (same alignment as `dst`, checked above) and
            // is whole 8-float steps.
            unsafe { stream_sum_body_avx2(order, &mut dst[head..body_end], &mut body_outs, srcs, head) };
        } else {
            stream_sum_body(order, &mut dst[head..body_end], &mut body_outs, srcs, head);
        }
        scalar(dst, outs, body_end..n);
    }
    #[cfg(not(target_arch = "x86_64"))]
    scalar(dst, outs, 0..n);
    true
}

/// A float32 vector register, for the one body of the SSE and AVX2 streaming sums.
#[cfg(target_arch = "x86_64")]
trait F32Vector: Copy {
    /// Floats per register.
    const LANES: usize;
    /// Loads `LANES` floats from `p` (unaligned).
    unsafe fn load(p: *const f32) -> Self;
    /// Lane-wise `self + other`.
    unsafe fn add(self, other: Self) -> Self;
    /// Streams the lanes to `p`, aligned to the register's size.
    unsafe fn stream(self, p: *mut f32);
}

#[cfg(target_arch = "x86_64")]
impl F32Vector for std::arch::x86_64::__m128 {
    const LANES: usize = 4;
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        // SAFETY: the caller guarantees 4 readable floats at `p`; SSE is part of x86_64.
        unsafe { std::arch::x86_64::_mm_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn add(self, other: Self) -> Self {
        // SAFETY: register-only; SSE is part of x86_64.
        unsafe { std::arch::x86_64::_mm_add_ps(self, other) }
    }
    #[inline(always)]
    unsafe fn stream(self, p: *mut f32) {
        // SAFETY: the caller guarantees 4 writable floats at a 16-byte aligned `p`.
        unsafe { std::arch::x86_64::_mm_stream_ps(p, self) }
    }
}

#[cfg(target_arch = "x86_64")]
impl F32Vector for std::arch::x86_64::__m256 {
    const LANES: usize = 8;
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        // SAFETY: the caller guarantees 8 readable floats at `p` and AVX support.
        unsafe { std::arch::x86_64::_mm256_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn add(self, other: Self) -> Self {
        // SAFETY: register-only; the caller guarantees AVX support.
        unsafe { std::arch::x86_64::_mm256_add_ps(self, other) }
    }
    #[inline(always)]
    unsafe fn stream(self, p: *mut f32) {
        // SAFETY: the caller guarantees 8 writable floats at a 32-byte aligned `p` and AVX.
        unsafe { std::arch::x86_64::_mm256_stream_ps(p, self) }
    }
}

/// `dst = Σ srcs[..][offset..]`, `V::LANES` floats at a time, streamed out to `dst` and every
/// one of `outs`, then fenced.
///
/// # Safety
/// `dst` and every output must start on a boundary of `V`'s size and hold the same whole steps
/// of `V::LANES` floats, and the CPU must support `V`'s instructions.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn stream_sum_lanes<V: F32Vector>(order: super::SumOrder, dst: &mut [f32], outs: &mut [&mut [f32]], srcs: &[&[f32]], offset: usize) {
    debug_assert!(dst.len().is_multiple_of(V::LANES) && (dst.as_ptr() as usize).is_multiple_of(4 * V::LANES));
    debug_assert!(outs.iter().all(|o| o.len() == dst.len() && (o.as_ptr() as usize).is_multiple_of(4 * V::LANES)));
    let k = srcs.len();
    let src: Vec<&[f32]> = srcs.iter().map(|s| &s[offset..offset + dst.len()]).collect();
    let cpu_comm = order == super::SumOrder::CpuComm;
    for (j, out) in dst.chunks_exact_mut(V::LANES).enumerate() {
        let i = j * V::LANES;
        // SAFETY: every source holds at least `dst.len()` floats from `offset` (checked by the
        // caller), so the `LANES` floats at `i` are in bounds for each, and every output holds
        // `dst.len()` floats; `out` and the outputs at `i` are aligned (the caller aligned
        // their starts and steps are whole registers); the caller guarantees the CPU support.
        unsafe {
            let at = |s: usize| V::load(src[s].as_ptr().add(i));
            let (a, b) = (at(0), at(1));
            let r = match (k, cpu_comm) {
                (2, _) => a.add(b),
                (3, true) => a.add(b.add(at(2))),
                (3, false) => a.add(b).add(at(2)),
                (_, true) => a.add(b.add(at(2)).add(at(3))),
                (_, false) => a.add(b).add(at(2)).add(at(3)),
            };
            r.stream(out.as_mut_ptr());
            for o in outs.iter_mut() {
                r.stream(o.as_mut_ptr().add(i));
            }
        }
    }
    store_fence();
}

/// The SSE body of [`stream_sum_f32_to`] (see [`stream_sum_lanes`]).
#[cfg(target_arch = "x86_64")]
fn stream_sum_body(order: super::SumOrder, dst: &mut [f32], outs: &mut [&mut [f32]], srcs: &[&[f32]], offset: usize) {
    // SAFETY: SSE is part of x86_64; the caller aligned `dst` and `outs` to 16 bytes in whole
    // 4-float steps.
    unsafe { stream_sum_lanes::<std::arch::x86_64::__m128>(order, dst, outs, srcs, offset) }
}

/// The AVX2 body of [`stream_sum_f32_to`], for a 32-byte aligned `dst` of whole 8-float steps.
/// Same association, so the same bits.
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn stream_sum_body_avx2(order: super::SumOrder, dst: &mut [f32], outs: &mut [&mut [f32]], srcs: &[&[f32]], offset: usize) {
    // SAFETY: the caller guarantees AVX2 and aligned `dst` and `outs` to 32 bytes in whole
    // 8-float steps.
    unsafe { stream_sum_lanes::<std::arch::x86_64::__m256>(order, dst, outs, srcs, offset) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streaming_copies_are_exact_at_every_alignment_and_length() {
        let src: Vec<u8> = (0..5000u32).map(|i| (i * 7 % 251) as u8).collect();
        for offset in 0..70 {
            for len in [0, 1, 15, 16, 63, 64, 65, 200, 4096, 4900] {
                let mut buf = vec![0u8; 5200];
                stream_copy_unfenced(&mut buf[offset..offset + len], &src[..len]);
                store_fence();
                assert_eq!(&buf[offset..offset + len], &src[..len], "offset {offset} len {len}");
                assert!(buf[..offset].iter().chain(&buf[offset + len..]).all(|&b| b == 0));
            }
        }
    }

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn the_sse_and_avx2_sum_bodies_agree_bit_for_bit() {
        use crate::base::buffer::{typed_mut, Buffer};
        use crate::reduce::SumOrder;
        if !crate::reduce::simd::has_avx2() {
            return;
        }
        let make = |seed: u32| -> Vec<f32> { (0..1030u32).map(|i| (((i * 2654435761u32) ^ seed) % 10007) as f32 * 1.0e-3 + 1.0e4 * (i % 3) as f32).collect() };
        let srcs: Vec<Vec<f32>> = (0..4).map(make).collect();
        let (mut sse, mut avx) = (Buffer::zeroed(1024 * 4).unwrap(), Buffer::zeroed(1024 * 4).unwrap());
        for order in [SumOrder::CpuComm, SumOrder::Serial] {
            for k in 2..=4 {
                let views: Vec<&[f32]> = srcs[..k].iter().map(|v| &v[..]).collect();
                stream_sum_body(order, typed_mut::<f32>(sse.bytes_mut()), &mut [], &views, 6);
                // SAFETY: AVX2 support was checked above.
                unsafe { stream_sum_body_avx2(order, typed_mut::<f32>(avx.bytes_mut()), &mut [], &views, 6) };
                assert_eq!(sse.bytes(), avx.bytes(), "{order:?} k={k}");
            }
        }
    }

    #[test]
    fn streamed_f32_sums_match_the_serial_kernel_bit_for_bit() {
        use crate::reduce::SumOrder;
        // Values whose sums round differently by association.
        let make = |seed: u32| -> Vec<f32> { (0..1037u32).map(|i| (((i * 2654435761u32) ^ seed) % 10007) as f32 * 1.0e-3 + 1.0e4 * (i % 3) as f32).collect() };
        let srcs: Vec<Vec<f32>> = (0..4).map(make).collect();
        for order in [SumOrder::CpuComm, SumOrder::Serial] {
            for k in 2..=4 {
                let views: Vec<&[f32]> = srcs[..k].iter().map(|v| &v[..]).collect();
                for offset in 0..4 {
                    let mut want = vec![0f32; 1037 - offset];
                    let mut bytes: Vec<&[u8]> = views.iter().map(|v| bytemuck::cast_slice(&v[..1037 - offset])).collect();
                    bytes.truncate(k);
                    let mut buf = vec![0f32; 1040];
                    let dst = &mut buf[offset..1037];
                    crate::reduce::sum_into(crate::base::DType::Float32, order, bytemuck::cast_slice_mut(&mut want), &bytes, 1);
                    assert!(stream_sum_f32_to(order, dst, &mut [], &views));
                    assert!(dst.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()), "{order:?} k={k} offset={offset}");
                }
            }
        }
        let mut dst = [0f32; 4];
        assert!(!stream_sum_f32_to(SumOrder::Serial, &mut dst, &mut [], &[&[1.0; 4]]));
    }

    #[test]
    fn sums_streamed_to_outputs_too_equal_the_sum_at_every_offset() {
        use crate::reduce::SumOrder;
        let make = |seed: u32| -> Vec<f32> { (0..1037u32).map(|i| (((i * 2654435761u32) ^ seed) % 10007) as f32 * 1.0e-3 + 1.0e4 * (i % 3) as f32).collect() };
        let srcs: Vec<Vec<f32>> = (0..4).map(make).collect();
        let views: Vec<&[f32]> = srcs.iter().map(|v| &v[..]).collect();
        for offset in 0..9 {
            let n = 1037 - offset;
            let mut want = vec![0f32; n];
            assert!(stream_sum_f32_to(SumOrder::CpuComm, &mut want, &mut [], &views));
            // Buffers start on a cache line, so views at one offset are aligned alike.
            let filled_n = |v: f32, len: usize| {
                let mut b = crate::base::buffer::Buffer::zeroed(len * 4).unwrap();
                crate::base::buffer::typed_mut::<f32>(b.bytes_mut()).fill(v);
                b
            };
            let filled = |v: f32| filled_n(v, 1040);
            let (mut buf, mut a, mut b) = (filled(0.0), filled(1.0), filled(2.0));
            let (buf, a, b) = (
                crate::base::buffer::typed_mut::<f32>(buf.bytes_mut()),
                crate::base::buffer::typed_mut::<f32>(a.bytes_mut()),
                crate::base::buffer::typed_mut::<f32>(b.bytes_mut()),
            );
            let mut outs = [&mut a[offset..offset + n], &mut b[offset..offset + n]];
            assert!(stream_sum_f32_to(SumOrder::CpuComm, &mut buf[offset..offset + n], &mut outs, &views));
            for got in [&*buf, &*a, &*b] {
                assert!(got[offset..offset + n].iter().zip(&want).all(|(x, y)| x.to_bits() == y.to_bits()), "offset {offset}");
                assert!(got[offset + n..].iter().all(|&x| x == got[1039]), "written past the end at offset {offset}");
            }
            // An output aligned unlike `dst` is refused, untouched.
            let mut c = filled_n(3.0, 1041);
            let c = crate::base::buffer::typed_mut::<f32>(c.bytes_mut());
            let mut shifted = [&mut c[offset + 1..offset + 1 + n]];
            assert!(!stream_sum_f32_to(SumOrder::CpuComm, &mut buf[offset..offset + n], &mut shifted, &views));
            assert!(c.iter().all(|&x| x == 3.0));
        }
    }
}
