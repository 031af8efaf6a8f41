//! Copies with non-temporal stores. A pull writes every output once and the store does not
//! read it again, so bypassing the cache saves the read-for-ownership of each destination
//! line. Measured with benches/kvbench (A/B in one run): about 20% off `big` and `resnet50`
//! for pull copies, and about 10% more for the sums of big keys (`sum.rs`).

/// Outputs at least this big are written with streaming stores; smaller ones are likely to
/// be read again from cache soon, and gain nothing.
pub(crate) const STREAM_MIN_BYTES: usize = 4096;

/// `dst = src` (same length) with streaming stores where the platform has them.
pub(crate) fn stream_copy(dst: &mut [u8], src: &[u8]) {
    let n = dst.len().min(src.len());
    let (dst, src) = (&mut dst[..n], &src[..n]);
    #[cfg(target_arch = "x86_64")]
    {
        // Plain copies up to a 16-byte boundary of `dst`, streaming in 64-byte steps, then
        // the tail.
        let head = dst.as_ptr().align_offset(16).min(n);
        let body = (n - head) / 64 * 64;
        dst[..head].copy_from_slice(&src[..head]);
        stream_body(&mut dst[head..head + body], &src[head..head + body]);
        dst[head + body..].copy_from_slice(&src[head + body..]);
    }
    #[cfg(not(target_arch = "x86_64"))]
    dst.copy_from_slice(src);
}

#[cfg(target_arch = "x86_64")]
fn stream_body(dst: &mut [u8], src: &[u8]) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
    debug_assert!(dst.len() == src.len() && dst.len() % 64 == 0 && dst.as_ptr() as usize % 16 == 0);
    for (d, s) in dst.chunks_exact_mut(64).zip(src.chunks_exact(64)) {
        let (d, s) = (d.as_mut_ptr() as *mut __m128i, s.as_ptr() as *const __m128i);
        // SAFETY: SSE2 is part of x86_64. Each chunk holds 64 bytes, so the four 16-byte
        // offsets stay inside both; `d` is 16-byte aligned (the caller aligned the start and
        // chunks are 64 bytes), as `_mm_stream_si128` requires; the loads are unaligned ones.
        unsafe {
            let (a, b, c, e) = (_mm_loadu_si128(s), _mm_loadu_si128(s.add(1)), _mm_loadu_si128(s.add(2)), _mm_loadu_si128(s.add(3)));
            _mm_stream_si128(d, a);
            _mm_stream_si128(d.add(1), b);
            _mm_stream_si128(d.add(2), c);
            _mm_stream_si128(d.add(3), e);
        }
    }
    // SAFETY: a store fence has no preconditions; it orders the streaming stores before any
    // later store, so a reader synchronising with this thread sees the data.
    unsafe { _mm_sfence() };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streaming_copies_are_exact_at_every_alignment_and_length() {
        let src: Vec<u8> = (0..5000u32).map(|i| (i * 7 % 251) as u8).collect();
        for offset in 0..17 {
            for len in [0, 1, 15, 16, 63, 64, 65, 200, 4096, 4900] {
                let mut buf = vec![0u8; 5100];
                stream_copy(&mut buf[offset..offset + len], &src[..len]);
                assert_eq!(&buf[offset..offset + len], &src[..len], "offset {offset} len {len}");
                assert!(buf[..offset].iter().chain(&buf[offset + len..]).all(|&b| b == 0));
            }
        }
    }
}
