//! Reduction kernels: the element-wise sum of a key's pushed values, and copies with casts.
//! Every kernel reads and writes plain slices; the store decides what, the engine decides when.

mod parallel;
#[cfg(target_arch = "x86_64")]
mod half_simd;
mod simd;
pub mod sparse;
mod stream;
mod sum;

pub use parallel::ReduceConfig;
pub use sum::{sum_into, SumOrder};

use crate::base::buffer::{typed, typed_mut};
use crate::ndarray::DType;
use crate::base::element::{convert, Element};

/// Copies `src` (of `src_dtype`) into `dst` (of `dst_dtype`), casting element-wise.
pub fn copy_cast(src_dtype: DType, src: &[u8], dst_dtype: DType, dst: &mut [u8]) {
    if src_dtype == dst_dtype {
        parallel::copy(src, dst, src_dtype.size());
        return;
    }
    crate::with_element_type!(src_dtype, S => {
        crate::with_element_type!(dst_dtype, T => cast_slice::<S, T>(typed::<S>(src), typed_mut::<T>(dst)))
    })
}

/// Copies `src` into every output, casting where dtypes differ. Works block by block so each
/// block of `src` is read from memory once and stays in cache while all outputs are written;
/// big copies are split over threads.
pub fn copy_cast_many(src_dtype: DType, src: &[u8], outs: &mut [(DType, &mut [u8])]) {
    copy_cast_many_unfenced(src_dtype, src, outs);
    stream::store_fence();
}

/// [`copy_cast_many`] for one copy of a batch: the caller must call [`fence_copies`] before
/// it releases the outputs, and may do so once for the whole batch.
pub fn copy_cast_many_unfenced(src_dtype: DType, src: &[u8], outs: &mut [(DType, &mut [u8])]) {
    let n = src.len() / src_dtype.size();
    let threads = parallel::threads_now(n);
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
                copy_cast(src_dtype, s, *dtype, d);
            }
        }
        start = end;
    }
}

/// Makes the streaming stores of earlier unfenced copies visible to other threads.
pub fn fence_copies() {
    stream::store_fence();
}

fn cast_slice<S: Element, T: Element>(src: &[S], dst: &mut [T]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d = convert::<S, T>(*s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::buffer::Buffer;

    #[test]
    fn copy_cast_converts_like_static_cast() {
        let mut src = Buffer::zeroed(12).unwrap();
        typed_mut::<f32>(src.bytes_mut()).copy_from_slice(&[1.5, -2.25, 300.0]);
        let mut dst = Buffer::zeroed(24).unwrap();
        copy_cast(DType::Float32, src.bytes(), DType::Float64, dst.bytes_mut());
        assert_eq!(typed::<f64>(dst.bytes()), &[1.5, -2.25, 300.0]);
        let mut ints = Buffer::zeroed(12).unwrap();
        copy_cast(DType::Float32, src.bytes(), DType::Int32, ints.bytes_mut());
        assert_eq!(typed::<i32>(ints.bytes()), &[1, -2, 300]);
    }
}
