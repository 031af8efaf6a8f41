//! The element-wise sum of a key's values, in one pass over the sources.

use crate::base::element::Element;
use super::parallel::for_parts;
use crate::base::buffer::{typed, typed_mut};
use crate::base::DType;

/// How the sources are associated. For floats the grouping decides the rounding, so each store
/// type follows the MXNet Comm it replaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SumOrder {
    /// MXNet's `CommCPU` (`local` stores): `s0 + (((s1 + s2) + s3) + s4)`, then blocks of four.
    CpuComm,
    /// MXNet's `CommDevice` (`device` stores): `((s0 + s1) + s2) + s3 ...`, left to right.
    Serial,
}

/// `dst = Σ srcs` in `dtype`, every slice the same length in bytes, over up to `threads`
/// threads when big. `srcs` must not be empty.
pub fn sum_into(dtype: DType, order: SumOrder, dst: &mut [u8], srcs: &[&[u8]], threads: usize) {
    crate::with_element_type!(dtype, T => {
        let srcs: Vec<&[T]> = srcs.iter().map(|s| typed::<T>(s)).collect();
        sum_typed::<T>(order, typed_mut::<T>(dst), &srcs, threads)
    })
}

/// `dst = Σ srcs` and every one of `outs` `= dst` (each of `dst`'s dtype and length), in one
/// pass over memory: a pull right behind its push takes its outputs from the sum as it is
/// made, instead of reading the stored value back. The same bits as [`sum_into`] then copies.
pub fn sum_into_with_copies(dtype: DType, order: SumOrder, dst: &mut [u8], outs: &mut [&mut [u8]], srcs: &[&[u8]], threads: usize) {
    crate::with_element_type!(dtype, T => {
        let srcs: Vec<&[T]> = srcs.iter().map(|s| typed::<T>(s)).collect();
        let mut outs: Vec<&mut [T]> = outs.iter_mut().map(|o| typed_mut::<T>(o)).collect();
        sum_copies_typed::<T>(order, typed_mut::<T>(dst), &mut outs, &srcs, threads)
    })
}

fn sum_copies_typed<T: Element>(order: SumOrder, dst: &mut [T], outs: &mut [&mut [T]], srcs: &[&[T]], threads: usize) {
    let stream = std::mem::size_of_val(dst) >= STREAM_SUM_MIN_BYTES;
    super::parallel::for_parts_with(dst, outs, threads, |offset, part, outs| {
        let end = offset + part.len();
        let parts: Vec<&[T]> = srcs.iter().map(|s| &s[offset..end]).collect();
        sum_copies_part(order, part, outs, &parts, stream);
    });
}

/// `dst = Σ srcs` and every one of `outs` `= dst`, with streaming stores when `stream`.
fn sum_copies_part<T: Element>(order: SumOrder, dst: &mut [T], outs: &mut [&mut [T]], srcs: &[&[T]], stream: bool) {
    // float32, the type of nearly every big key, has a one-pass kernel for 2-4 sources.
    if stream && std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>() {
        let srcs32: Vec<&[f32]> = srcs.iter().map(|s| bytemuck::cast_slice::<T, f32>(s)).collect();
        let mut outs32: Vec<&mut [f32]> = outs.iter_mut().map(|o| bytemuck::cast_slice_mut::<T, f32>(o)).collect();
        if super::stream::stream_sum_f32_to(order, bytemuck::cast_slice_mut::<T, f32>(dst), &mut outs32, &srcs32) {
            return;
        }
    }
    // Each block is summed in cache, then written to `dst` and the outputs.
    const BLOCK: usize = 4096;
    let mut block = vec![T::default(); BLOCK.min(dst.len())];
    let mut parts: Vec<&[T]> = Vec::with_capacity(srcs.len());
    for (k, out) in dst.chunks_mut(BLOCK).enumerate() {
        let (start, len) = (k * BLOCK, out.len());
        parts.clear();
        parts.extend(srcs.iter().map(|s| &s[start..start + len]));
        let sum = &mut block[..len];
        sum_serial(order, sum, &parts);
        for o in std::iter::once(out).chain(outs.iter_mut().map(|o| &mut o[start..start + len])) {
            if stream {
                super::stream::stream_copy_unfenced(bytemuck::cast_slice_mut(o), bytemuck::cast_slice(sum));
            } else {
                o.copy_from_slice(sum);
            }
        }
    }
    if stream {
        super::stream::store_fence();
    }
}

/// The bytes `add_into` sums per step: a multiple of every element size, small enough that
/// the copy of `dst` it sums from stays in L1.
const ADD_BLOCK_BYTES: usize = 16 << 10;

/// `dst = dst + src` in `dtype`, both the same length in bytes: the same rounding as
/// `sum_into(dtype, SumOrder::Serial, dst, &[dst_before, src])`, without a copy of `dst`.
/// `src` may start at any address (a payload inside a received message): a block of it that
/// is not aligned for `dtype` is summed from an aligned copy.
pub fn add_into(dtype: DType, dst: &mut [u8], src: &[u8]) {
    // float32, nearly every pushed value, adds in place: a serial sum of two is one addition.
    if dtype == DType::Float32 {
        if let (Ok(dst), Ok(src)) = (bytemuck::try_cast_slice_mut::<u8, f32>(dst), bytemuck::try_cast_slice::<u8, f32>(src)) {
            for (d, s) in dst.iter_mut().zip(src) {
                *d += *s;
            }
            return;
        }
    }
    // u64 blocks: aligned for every element type.
    let mut before = [0u64; ADD_BLOCK_BYTES / 8];
    let mut aligned = [0u64; ADD_BLOCK_BYTES / 8];
    let src_aligned = (src.as_ptr() as usize).is_multiple_of(dtype.size());
    for (out, add) in dst.chunks_mut(ADD_BLOCK_BYTES).zip(src.chunks(ADD_BLOCK_BYTES)) {
        let before = &mut bytemuck::cast_slice_mut::<u64, u8>(&mut before)[..out.len()];
        before.copy_from_slice(out);
        let add = if src_aligned {
            add
        } else {
            let copy = &mut bytemuck::cast_slice_mut::<u64, u8>(&mut aligned)[..add.len()];
            copy.copy_from_slice(add);
            &*copy
        };
        sum_into(dtype, SumOrder::Serial, out, &[before, add], 1);
    }
}

/// Destinations from this size on are summed block by block into a cached buffer and
/// streamed out: they do not fit in cache, so a plain store would first read every line.
const STREAM_SUM_MIN_BYTES: usize = 1 << 20;

fn sum_typed<T: Element>(order: SumOrder, dst: &mut [T], srcs: &[&[T]], threads: usize) {
    let stream = std::mem::size_of_val(dst) >= STREAM_SUM_MIN_BYTES;
    for_parts(dst, threads, |offset, part| {
        let end = offset + part.len();
        let parts: Vec<&[T]> = srcs.iter().map(|s| &s[offset..end]).collect();
        if stream {
            sum_streamed(order, part, &parts);
        } else {
            sum_serial(order, part, &parts);
        }
    });
}

fn sum_streamed<T: Element>(order: SumOrder, dst: &mut [T], srcs: &[&[T]]) {
    sum_copies_part(order, dst, &mut [], srcs, true);
}

/// `dst = Σ srcs` in one pass per group of sources, with the widest vectors the CPU has.
fn sum_serial<T: Element>(order: SumOrder, dst: &mut [T], srcs: &[&[T]]) {
    #[cfg(target_arch = "x86_64")]
    if sum_half(order, dst, srcs) {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if super::simd::has_avx2() {
        // SAFETY: the CPU supports AVX2, checked just above.
        unsafe { sum_serial_avx2(order, dst, srcs) };
        return;
    }
    sum_serial_body(order, dst, srcs)
}

/// float16 and bfloat16 sums with the vector kernels of `half_simd`, the tail with the scalar
/// loop; false (nothing done) for other types or CPUs without AVX2 and F16C.
#[cfg(target_arch = "x86_64")]
fn sum_half<T: Element>(order: SumOrder, dst: &mut [T], srcs: &[&[T]]) -> bool {
    use std::any::TypeId;
    let is = |t: TypeId| TypeId::of::<T>() == t;
    if !(is(TypeId::of::<half::f16>()) || is(TypeId::of::<half::bf16>())) || !super::half_simd::available() {
        return false;
    }
    let done = if is(TypeId::of::<half::f16>()) {
        let srcs: Vec<&[half::f16]> = srcs.iter().map(|s| bytemuck::cast_slice(s)).collect();
        super::half_simd::sum_f16(order, bytemuck::cast_slice_mut(dst), &srcs)
    } else {
        let srcs: Vec<&[half::bf16]> = srcs.iter().map(|s| bytemuck::cast_slice(s)).collect();
        super::half_simd::sum_bf16(order, bytemuck::cast_slice_mut(dst), &srcs)
    };
    let tails: Vec<&[T]> = srcs.iter().map(|s| &s[done..]).collect();
    sum_serial_body(order, &mut dst[done..], &tails);
    true
}

/// The same loops compiled for AVX2: twice the width of the x86_64 baseline (SSE2). Element
/// by element the arithmetic is the same (no fused operations), so the result is identical.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn sum_serial_avx2<T: Element>(order: SumOrder, dst: &mut [T], srcs: &[&[T]]) {
    sum_serial_body(order, dst, srcs)
}

#[inline(always)]
fn sum_serial_body<T: Element>(order: SumOrder, dst: &mut [T], srcs: &[&[T]]) {
    let Some((first, rest)) = srcs.split_first() else { return };
    if rest.is_empty() {
        dst.copy_from_slice(&first[..dst.len()]);
        return;
    }
    // The first pass reads s0 as its head; later passes accumulate into dst in place.
    let block = match order {
        SumOrder::CpuComm => 4,
        SumOrder::Serial => 3,
    };
    let mut head = Some(*first);
    for group in rest.chunks(block) {
        match group {
            [a] => pass(order, dst, head, [*a]),
            [a, b] => pass(order, dst, head, [*a, *b]),
            [a, b, c] => pass(order, dst, head, [*a, *b, *c]),
            [a, b, c, d] => pass(order, dst, head, [*a, *b, *c, *d]),
            _ => unreachable!("chunks of at most four"),
        }
        head = None;
    }
}

/// `dst[i] = combine(head[i] or dst[i], group[..][i])` for one group of `K` sources.
#[inline(always)]
fn pass<T: Element, const K: usize>(order: SumOrder, dst: &mut [T], head: Option<&[T]>, group: [&[T]; K]) {
    let n = dst.len();
    let group: [&[T]; K] = group.map(|s| &s[..n]);
    match head {
        Some(h) => {
            let h = &h[..n];
            for i in 0..n {
                dst[i] = combine(order, h[i], group.map(|s| s[i]));
            }
        }
        None => {
            for i in 0..n {
                dst[i] = combine(order, dst[i], group.map(|s| s[i]));
            }
        }
    }
}

#[inline(always)]
fn combine<T: Element, const K: usize>(order: SumOrder, head: T, values: [T; K]) -> T {
    match order {
        SumOrder::CpuComm => {
            let mut block = values[0];
            for v in &values[1..] {
                block = block.add(*v);
            }
            head.add(block)
        }
        SumOrder::Serial => values.iter().fold(head, |acc, v| acc.add(*v)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::buffer::Buffer;

    fn buf_f32(v: &[f32]) -> Buffer {
        let mut b = Buffer::zeroed(v.len() * 4).unwrap();
        typed_mut::<f32>(b.bytes_mut()).copy_from_slice(v);
        b
    }

    #[test]
    fn add_into_matches_a_serial_sum_of_two_across_blocks() {
        // Lengths that end mid-block, for a float, a half and a wrapping integer type.
        for (dtype, n) in [(DType::Float32, 10_001), (DType::Float16, 9_000), (DType::Int8, 40_000)] {
            let bytes = n * dtype.size();
            let (mut a, mut b) = (Buffer::zeroed(bytes).unwrap(), Buffer::zeroed(bytes).unwrap());
            for (i, (x, y)) in a.bytes_mut().iter_mut().zip(b.bytes_mut().iter_mut()).enumerate() {
                // Exponent bytes kept small so half values stay finite.
                (*x, *y) = ((i * 37 % 251) as u8 & 0x3f, (i * 91 % 241) as u8 & 0x3f);
            }
            let mut expected = Buffer::zeroed(bytes).unwrap();
            sum_into(dtype, SumOrder::Serial, expected.bytes_mut(), &[a.bytes(), b.bytes()], 1);
            assert_ne!(expected.bytes(), a.bytes());
            // The source also from an odd address, as a payload inside a message.
            let mut shifted = Buffer::zeroed(bytes + 1).unwrap();
            shifted.bytes_mut()[1..].copy_from_slice(b.bytes());
            let mut a2 = Buffer::zeroed(bytes).unwrap();
            a2.bytes_mut().copy_from_slice(a.bytes());
            add_into(dtype, a.bytes_mut(), b.bytes());
            assert_eq!(a.bytes(), expected.bytes(), "{}", dtype.name());
            add_into(dtype, a2.bytes_mut(), &shifted.bytes()[1..]);
            assert_eq!(a2.bytes(), expected.bytes(), "{} from an unaligned source", dtype.name());
        }
    }

    fn sum_f32(order: SumOrder, values: &[f32]) -> f32 {
        let bufs: Vec<Buffer> = values.iter().map(|v| buf_f32(&[*v])).collect();
        let srcs: Vec<&[u8]> = bufs.iter().map(|b| b.bytes()).collect();
        let mut dst = Buffer::zeroed(4).unwrap();
        sum_into(DType::Float32, order, dst.bytes_mut(), &srcs, 1);
        typed::<f32>(dst.bytes())[0]
    }

    #[test]
    fn association_follows_each_comm() {
        // 1e8 + 1 - 1e8 + 1 differs with the grouping.
        let v = [1.0e8f32, 1.0, -1.0e8, 1.0];
        assert_eq!(sum_f32(SumOrder::CpuComm, &v), 1.0e8f32 + ((1.0f32 + -1.0e8f32) + 1.0f32));
        assert_eq!(sum_f32(SumOrder::Serial, &v), ((1.0e8f32 + 1.0) + -1.0e8) + 1.0);
        assert_ne!(sum_f32(SumOrder::CpuComm, &v), sum_f32(SumOrder::Serial, &v));
    }

    #[test]
    fn many_sources_are_summed_exactly_in_every_grouping() {
        for n in 1..=13 {
            let values: Vec<f32> = (1..=n).map(|i| i as f32).collect();
            let expect = (n * (n + 1) / 2) as f32;
            assert_eq!(sum_f32(SumOrder::CpuComm, &values), expect, "n={n}");
            assert_eq!(sum_f32(SumOrder::Serial, &values), expect, "n={n}");
        }
    }

    #[cfg(target_arch = "x86_64")]
    fn avx2_matches_baseline<T: Element + std::fmt::Debug>(make: impl Fn(usize) -> T) {
        if !crate::reduce::simd::has_avx2() {
            return;
        }
        for k in 1..=9 {
            let srcs: Vec<Vec<T>> = (0..k).map(|s| (0..1031).map(|i| make(i * 31 + s * 7919)).collect()).collect();
            let views: Vec<&[T]> = srcs.iter().map(|v| &v[..]).collect();
            for order in [SumOrder::CpuComm, SumOrder::Serial] {
                let (mut base, mut wide) = (vec![T::default(); 1031], vec![T::default(); 1031]);
                sum_serial_body(order, &mut base, &views);
                // SAFETY: AVX2 support was checked above.
                unsafe { sum_serial_avx2(order, &mut wide, &views) };
                assert!(bytemuck::cast_slice::<T, u8>(&base) == bytemuck::cast_slice::<T, u8>(&wide), "{order:?} k={k}");
            }
        }
    }

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn the_avx2_kernel_is_bit_identical_to_the_baseline_one() {
        // Values whose float sums round differently by association.
        let float = |i: usize| ((i * 2654435761) % 10007) as f64 * 1.0e-3 + 1.0e4 * (i % 3) as f64;
        avx2_matches_baseline(|i| float(i) as f32);
        avx2_matches_baseline(float);
        avx2_matches_baseline(|i| half::f16::from_f64(float(i) * 1e-3));
        avx2_matches_baseline(|i| half::bf16::from_f64(float(i)));
        avx2_matches_baseline(|i| (i as i32).wrapping_mul(-1640531535));
        avx2_matches_baseline(|i| (i as i64).wrapping_mul(0x1E37_79B9_7F4A_7C15));
        avx2_matches_baseline(|i| i as u8);
        avx2_matches_baseline(|i| i as i8);
    }

    #[test]
    fn integer_sums_wrap_like_cpp() {
        let a = [200u8, 100];
        let b = [100u8, 1];
        let mut dst = [0u8; 2];
        sum_into(DType::Uint8, SumOrder::CpuComm, &mut dst, &[&a, &b], 1);
        assert_eq!(dst, [44, 101]);
    }

    #[test]
    fn sums_with_copies_equal_a_sum_then_copies_for_every_type_and_size() {
        let float = |i: usize| ((i * 2654435761) % 10007) as f64 * 1.0e-3 + 1.0e4 * (i % 3) as f64;
        // Below and above the streaming size, split over threads or not, 1 to 5 sources.
        for (dtype, n) in [(DType::Float32, 1000), (DType::Float32, 1_500_007), (DType::Float64, 300_001), (DType::Float16, 5000), (DType::Int32, 2_000_003)] {
            for k in [1, 2, 4, 5] {
                let bufs: Vec<Buffer> = (0..k)
                    .map(|s| {
                        let mut b = Buffer::zeroed(n * dtype.size()).unwrap();
                        let vals: Vec<f64> = (0..n).map(|i| float(i * 31 + s * 7919) * if dtype == DType::Float16 { 1e-3 } else { 1.0 }).collect();
                        crate::base::cast(DType::Float64, bytemuck::cast_slice(&vals), dtype, b.bytes_mut());
                        b
                    })
                    .collect();
                let srcs: Vec<&[u8]> = bufs.iter().map(|b| b.bytes()).collect();
                for order in [SumOrder::CpuComm, SumOrder::Serial] {
                    let mut want = Buffer::zeroed(n * dtype.size()).unwrap();
                    sum_into(dtype, order, want.bytes_mut(), &srcs, 2);
                    let mut dst = Buffer::zeroed(n * dtype.size()).unwrap();
                    let (mut a, mut b) = (Buffer::zeroed(n * dtype.size()).unwrap(), Buffer::zeroed(n * dtype.size()).unwrap());
                    sum_into_with_copies(dtype, order, dst.bytes_mut(), &mut [a.bytes_mut(), b.bytes_mut()], &srcs, 2);
                    for got in [&dst, &a, &b] {
                        assert!(got.bytes() == want.bytes(), "{} n={n} k={k} {order:?}", dtype.name());
                    }
                }
            }
        }
    }

    #[test]
    fn big_sums_split_over_threads_match_serial() {
        let n = 3_000_011;
        let a: Vec<f32> = (0..n).map(|i| (i % 97) as f32).collect();
        let b: Vec<f32> = (0..n).map(|i| (i % 13) as f32).collect();
        let mut dst = vec![0f32; n];
        sum_typed(SumOrder::CpuComm, &mut dst, &[&a, &b, &a], 4);
        assert!(dst.iter().enumerate().all(|(i, &d)| d == (2 * (i % 97) + i % 13) as f32));
    }
}
