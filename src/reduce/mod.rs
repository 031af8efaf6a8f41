//! Host kernels: the element-wise sum of a key's pushed values, copies with casts, row-sparse
//! kernels. Every kernel reads and writes plain slices and is told how many threads it may
//! use; the host backend (`backend::host`) picks them, the engine decides when they run.

mod parallel;
#[cfg(target_arch = "x86_64")]
mod half_simd;
mod simd;
pub mod sparse;
mod stream;
mod sum;

pub use parallel::ReduceConfig;
pub use sum::{add_into, sum_into, sum_into_with_copies, SumOrder};

use crate::base::{affinity, cast, DType};

/// Copies `src` (of `src_dtype`) into `dst` (of `dst_dtype`), casting element-wise; a big
/// copy of one dtype is split over up to `threads` threads.
pub fn copy_cast(src_dtype: DType, src: &[u8], dst_dtype: DType, dst: &mut [u8], threads: usize) {
    if src_dtype == dst_dtype {
        parallel::copy(src, dst, src_dtype.size(), threads);
        return;
    }
    cast(src_dtype, src, dst_dtype, dst)
}

/// Copies `src` into every output, casting where dtypes differ. Works block by block so each
/// block of `src` is read from memory once and stays in cache while all outputs are written;
/// big copies are split over up to `threads` threads.
pub fn copy_cast_many(src_dtype: DType, src: &[u8], outs: &mut [(DType, &mut [u8])], threads: usize) {
    copy_cast_many_unfenced(src_dtype, src, outs, threads);
    stream::store_fence();
}

/// [`copy_cast_many`] for one copy of a batch: the caller must call [`fence_copies`] before
/// it releases the outputs, and may do so once for the whole batch.
pub fn copy_cast_many_unfenced(src_dtype: DType, src: &[u8], outs: &mut [(DType, &mut [u8])], threads: usize) {
    let n = src.len() / src_dtype.size();
    let threads = ReduceConfig::get().threads_for(n).min(threads.max(1));
    if threads <= 1 {
        copy_blocks(src_dtype, src, outs);
        return;
    }
    let per = n.div_ceil(threads).div_ceil(4096) * 4096;
    // parts[t] holds every output's slice for thread t's element range.
    let mut parts: Vec<Vec<(DType, &mut [u8])>> = (0..n.div_ceil(per)).map(|_| Vec::new()).collect();
    for (dtype, bytes) in outs.iter_mut() {
        for (t, chunk) in bytes.chunks_mut(per * dtype.size()).enumerate() {
            parts[t].push((*dtype, chunk));
        }
    }
    let _spread = affinity::unpinned();
    std::thread::scope(|scope| {
        for (t, mut part) in parts.into_iter().enumerate() {
            let start = t * per * src_dtype.size();
            let end = (start + per * src_dtype.size()).min(src.len());
            let src_part = &src[start..end];
            scope.spawn(move || {
                copy_blocks(src_dtype, src_part, &mut part);
                // The helper thread's streaming stores must be visible once it is joined.
                stream::store_fence();
            });
        }
    });
}

fn copy_blocks(src_dtype: DType, src: &[u8], outs: &mut [(DType, &mut [u8])]) {
    const BLOCK: usize = 8192;
    let n = src.len() / src_dtype.size();
    let stream = src.len() >= stream::STREAM_MIN_BYTES;
    let mut start = 0;
    while start < n {
        let end = (start + BLOCK).min(n);
        let s = &src[start * src_dtype.size()..end * src_dtype.size()];
        for (dtype, out) in outs.iter_mut() {
            let d = &mut out[start * dtype.size()..end * dtype.size()];
            if *dtype == src_dtype && stream {
                stream::stream_copy_unfenced(d, s);
            } else if *dtype == src_dtype {
                d.copy_from_slice(s);
            } else {
                cast(src_dtype, s, *dtype, d);
            }
        }
        start = end;
    }
}

/// Makes the streaming stores of earlier unfenced copies visible to other threads.
pub fn fence_copies() {
    stream::store_fence();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::buffer::{typed, typed_mut, Buffer};

    #[test]
    fn copies_to_many_outputs_cast_each_and_split_over_threads() {
        let n = 3 << 20;
        let mut src = Buffer::zeroed(n * 4).unwrap();
        for (i, v) in typed_mut::<f32>(src.bytes_mut()).iter_mut().enumerate() {
            *v = (i % 1000) as f32 - 0.5;
        }
        let (mut a, mut b) = (Buffer::zeroed(n * 4).unwrap(), Buffer::zeroed(n * 8).unwrap());
        let mut outs = [(DType::Float32, a.bytes_mut()), (DType::Int64, b.bytes_mut())];
        copy_cast_many(DType::Float32, src.bytes(), &mut outs, 4);
        assert_eq!(a.bytes(), src.bytes());
        assert!(typed::<i64>(b.bytes()).iter().enumerate().all(|(i, v)| *v == ((i % 1000) as f32 - 0.5) as i64));
    }
}
